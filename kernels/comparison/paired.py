"""Paired, interleaved comparison of two kernels: "is B faster than A?" as a measurement.

Samples taken in different processes at different times are not draws of one distribution:
the difference between processes (frequency, page placement, cache colouring, other
tenants) dominates, and two measurements of the same kernel "differ significantly". So a
comparison is measured on its own, in *rounds*:

1. Both kernels are compiled once (the same compiler and flags); their libraries' bytes say
   whether they are identical.
2. A round starts a fresh pair of sandbox children (:func:`kernels.sandbox.spawn.start_child`
   with ``turns=True``), one per kernel, each confined as every evaluation child and in its
   own private directory (neither can reach the other's process or files). Both generate the
   same inputs (the round's seeds) into their own guarded buffers.
3. The children take turns call by call in the order A B B A A B ... (the side that starts
   alternates between rounds): each turn resumes one child, which rotates and salts its
   inputs, flushes (evicts its buffers, NaN-fills its outputs, as the timing child does),
   times one call and acknowledges; then its process group is stopped (SIGSTOP), so neither
   runs while the other is timed. Per shape, :attr:`PairSettings.warmup_calls` turns each
   are discarded, then turns continue until each side has at least ``min_calls`` timed calls
   and ``round_ms`` of wall clock passed (at most ``max_calls``).
4. A round's ratio is ``sum of B's per-shape medians / sum of A's``; the verdict is computed
   over the rounds' ratios (:func:`kernels.comparison.verdict.judge_rounds`), against the target's noise
   floor (:mod:`kernels.comparison.noise_floor`, measured here by A/A when none is stored).

A side whose child fails (crashes, hangs past ``turn_timeout_s``, leaves sampled output
elements unwritten, forges its report) ends the comparison with :class:`ComparisonFailed`
naming the side. Correctness is not judged here: compare kernels that passed
:func:`kernels.evaluate` (the command line and the web application do so first).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import secrets
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernels.backends import capabilities, get_backend
from kernels.backends.cpu import CompileError
from kernels.comparison.noise_floor import FileFloorStore, FloorStore, floor_from_ratios, floor_key
from kernels.comparison.sandbox_side import SandboxSide, SideFailed
from kernels.comparison.verdict import judge_rounds
from kernels.evaluation.timing import FLUSH_MODES, evict_library, omp_environment
from kernels.sandbox.guard_pages import GuardLayout
from kernels.sandbox.policy import SandboxPolicy
from kernels.space import SpaceError, format_defines
from kernels.workloads import Workload, get_workload, shape_label

__all__ = ["ComparisonFailed", "Kernel", "PairSettings", "PairedComparison", "compare_paired", "measure_noise_floor"]

GUARD_ELEMS = 1024  # sentinel elements before and after every buffer, as in the evaluator's children
_FIRST_TURN_S = 60.0  # the first turn also waits for the child's input generation and lockdown


class ComparisonFailed(Exception):
    """A side of a paired comparison could not be measured.

    Attributes:
        side: ``"A"``, ``"B"`` or ``""`` (neither: e.g. the sandbox could not start).
        reason: what happened, for a person.
    """

    def __init__(self, side: str, reason: str) -> None:
        super().__init__(f"{side}: {reason}" if side else reason)
        self.side, self.reason = side, reason


@dataclass(frozen=True)
class Kernel:
    """One side of a comparison: a source defining the workload's C entry point and the
    parameter values prepended to it as ``#define`` lines."""

    source: str
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class PairSettings:
    """How a paired comparison is measured.

    Attributes:
        rounds: fresh pairs of children (the unit of replication), at least 2.
        warmup_calls: untimed calls per side and shape at the start of each round, >= 1.
        min_calls, max_calls: timed calls per side and shape in a round.
        round_ms: wall clock (ms) of timed turns per shape in a round, both sides together;
            turns continue past it until ``min_calls``.
        flush: ``"evict"`` (default), ``"rewrite"`` or ``"none"``, as
            :class:`kernels.evaluation.timing.BenchSettings`.
        turn_timeout_s: seconds one call (with its flush) may take before the side is failed.
        seed: base seed of the rounds' inputs (a non-negative integer, as NumPy's); None draws one.

    Raises:
        ValueError: a value out of range.
    """

    rounds: int = 8
    warmup_calls: int = 3
    min_calls: int = 15
    max_calls: int = 400
    round_ms: float = 150.0
    flush: str = "evict"
    turn_timeout_s: float = 30.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name, lo, hi in (("rounds", 2, 1000), ("warmup_calls", 1, 10_000), ("min_calls", 1, 100_000),
                             ("max_calls", 1, 100_000)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"PairSettings: {name} must be an integer in [{lo}, {hi}], not {v!r}")
        if self.min_calls > self.max_calls:
            raise ValueError(f"PairSettings: min_calls {self.min_calls} exceeds max_calls {self.max_calls}")
        for name, hi in (("round_ms", 600_000.0), ("turn_timeout_s", 3600.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= hi:
                raise ValueError(f"PairSettings: {name} must be a number in (0, {hi:g}], not {v!r}")
        if self.flush not in FLUSH_MODES:
            raise ValueError(f"PairSettings: flush must be one of {', '.join(FLUSH_MODES)}, not {self.flush!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise ValueError(f"PairSettings: seed must be a non-negative integer or None, not {self.seed!r}")

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def protocol(self) -> str:
        """The settings a noise floor depends on, as a key part: ``"w3-c15-400-150ms-evict"``."""
        return f"w{self.warmup_calls}-c{self.min_calls}-{self.max_calls}-{self.round_ms:g}ms-{self.flush}"


@dataclass(frozen=True)
class PairedComparison:
    """The result of :func:`compare_paired`.

    Attributes:
        verdict: ``"a_faster"``, ``"b_faster"`` or ``"tie"`` (:func:`kernels.comparison.verdict.judge_rounds`);
            always ``"tie"`` when the two libraries are byte-identical.
        notes: what a person should know beside the verdict (e.g. a side whose mean call is
            more than :data:`STALL_RATIO` times its median: some of its calls stall).
        clock_unchecked: a claim of twice as fast or more stands that the parent's clock could
            not check (see :func:`_check_clock`; the first note says so).
        measured_verdict: what the rounds alone said (differs from ``verdict`` only for
            identical libraries whose measurement left the floor band: the host's noise).
        ratio: median over rounds of ``time(B) / time(A)`` (> 1: A is faster).
        ci: ``[low, high]`` 95% bootstrap interval of ``ratio`` over rounds.
        p_value: two-sided Wilcoxon signed-rank p-value of "no difference" over rounds.
        noise_floor: the floor the interval had to clear (fraction); floor_source: where it
            came from (``"given"``, ``"stored"``, ``"measured"``); floor: the stored entry.
        rounds, round_ratios, rounds_needed, why: see :class:`kernels.comparison.verdict.RoundVerdict`.
        median_a_ms, median_b_ms: median over rounds of each side's summed per-shape medians (ms).
        shapes: per shape label ``{"ratio", "ci", "verdict", "median_a_ms", "median_b_ms",
            "mean_a_ms", "mean_b_ms", "round_ratios"}`` (the same statistic per shape, judged
            against the same floor; the means, medians over rounds of each round's mean call,
            show stalls that the medians do not).
        calls: timed calls per side and shape in each round.
        identical: both libraries have the same bytes (an A/A comparison in effect).
        fingerprint: backend fingerprint, shape set, settings, seed, OpenMP environment.
        duration_s: wall-clock seconds of the whole comparison.
    """

    verdict: str
    ratio: float
    ci: tuple[float, float]
    p_value: float
    noise_floor: float
    floor_source: str
    rounds: int
    round_ratios: tuple[float, ...]
    rounds_needed: int | None
    why: str
    median_a_ms: float
    median_b_ms: float
    shapes: dict[str, dict]
    calls: list[dict[str, int]]
    identical: bool
    fingerprint: dict
    duration_s: float
    floor: dict | None = None
    measured_verdict: str | None = None
    notes: list[str] = field(default_factory=list)
    clock_unchecked: bool = False

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ci"], d["round_ratios"] = list(self.ci), list(self.round_ratios)
        return json.loads(json.dumps(d, default=str))


def _shapes(wl: Workload, shape_set: str, labels: list[str] | None) -> list[dict]:
    shapes = [dict(s) for s in wl.shapes(shape_set)]
    if not labels:
        return shapes
    known = {shape_label(s): s for s in shapes}
    missing = [x for x in labels if x not in known]
    if missing:
        raise KeyError(f"shape set {shape_set!r} of {wl.name} has no shape {', '.join(missing)}; "
                       f"its shapes: {', '.join(known)}")
    return [known[x] for x in labels]


class _Side(SandboxSide):
    """One kernel's child in one round (:class:`kernels.comparison.sandbox_side.SandboxSide`), its
    failures named by the side (``"A"`` or ``"B"``)."""

    def __init__(self, name: str, library: Path, request: dict, policy: SandboxPolicy, env: dict,
                 timeout_s: float) -> None:
        self.name = name

        def request_for(workdir: Path) -> dict:
            return {**request, "library": str(workdir / "candidate.so")}

        super().__init__({"candidate.so": library}, request_for, policy, env, timeout_s, first_turn_s=_FIRST_TURN_S)

    def turn(self, k: int, timeout_s: float) -> None:
        try:
            super().turn(k, timeout_s)
        except SideFailed as exc:
            raise ComparisonFailed(self.name, exc.reason) from exc

    def finish(self, timeout_s: float) -> dict:
        try:
            return super().finish(timeout_s)
        except SideFailed as exc:
            raise ComparisonFailed(self.name, exc.reason) from exc


class _Setup:
    """What both :func:`compare_paired` and :func:`measure_noise_floor` start from: the
    workload at its shape set, the shapes, the settings, the sandbox, the backend's
    fingerprint and target, the base seed and the children's request."""

    def __init__(self, workload: str, shape_set: str, shapes: list[str] | None, settings: PairSettings | None,
                 sandbox: SandboxPolicy | None, target: str | None) -> None:
        wl = get_workload(workload)
        wl.shapes(shape_set)  # KeyError early for an unknown shape set
        self.wl = wl.for_shape_set(shape_set) if hasattr(wl, "for_shape_set") else wl
        self.shapes = _shapes(self.wl, shape_set, shapes)
        self.be = get_backend("cpu")
        self.settings = settings or PairSettings()
        self.policy = sandbox or SandboxPolicy.from_env()
        self.env = omp_environment("timing")
        self.fingerprint = self.be.fingerprint()
        self.target = target or f"cpu-{self.fingerprint.get('machine', 'host')}"
        self.seed = self.settings.seed if self.settings.seed is not None else secrets.randbits(62)
        self.request = {"backend": "cpu", "workload": self.wl.name, "shape_set": shape_set, "guard": GUARD_ELEMS,
                        "guard_layout": GuardLayout.for_host().to_dict(),  # the timing child's buffers
                        "bench": {"flush": self.settings.flush}, "evict_library": self._evict(),
                        "attrs": dict(self.wl.attrs), "cases": []}

    def _evict(self) -> str | None:
        """The eviction helper for the ``"evict"`` flush; None makes the children say
        "rewrite ... (evict unavailable)" in their flush method."""
        if self.settings.flush != "evict":
            return None
        try:
            return str(evict_library())
        except (CompileError, OSError):
            return None

    def compile(self, kernel: Kernel, side: str) -> Path:
        """The kernel's library (compile cache).

        Raises:
            ComparisonFailed: bad parameters or a compile error, naming ``side``.
        """
        try:
            defines = format_defines(kernel.params)
        except (SpaceError, AttributeError, TypeError) as exc:
            raise ComparisonFailed(side, f"bad parameters: {exc}") from exc
        try:
            return Path(self.be.compile(kernel.source, defines).path)
        except CompileError as exc:
            raise ComparisonFailed(side, f"compile error: {exc}") from exc


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _round(wl: Workload, shapes: list[dict], libraries: dict[str, Path], request: dict, settings: PairSettings,
           policy: SandboxPolicy, env: dict, rng: np.random.Generator, a_first: bool) -> dict:
    """One round: a fresh pair of children taking turns; per side and shape the timed calls (ms)."""
    items = [{"id": f"t{k}", "shape": s, "seeds": [int(rng.integers(0, 2**62)) for _ in range(2)],
              "fresh_seed": int(rng.integers(0, 2**62))} for k, s in enumerate(shapes)]
    req = {**request, "timed": items}
    budget_s = _FIRST_TURN_S + settings.turn_timeout_s * 4 * settings.max_calls * len(shapes)
    sides: dict[str, _Side] = {}
    try:
        for name in ("A", "B") if a_first else ("B", "A"):
            sides[name] = _Side(name, libraries[name], req, policy, env, budget_s)
        first, second = (sides["A"], sides["B"]) if a_first else (sides["B"], sides["A"])
        counts = []
        for k in range(len(shapes)):
            pairs = 0
            for i in range(settings.warmup_calls):
                order = (first, second) if i % 2 == 0 else (second, first)
                for side in order:
                    side.turn(k, settings.turn_timeout_s)
            start = time.monotonic()
            while pairs < settings.max_calls and (
                    pairs < settings.min_calls or (time.monotonic() - start) * 1e3 < settings.round_ms):
                order = (first, second) if (settings.warmup_calls + pairs) % 2 == 0 else (second, first)
                for side in order:
                    side.turn(k, settings.turn_timeout_s)
                pairs += 1
            counts.append(pairs)
        results = {name: side.finish(30.0) for name, side in sides.items()}
    finally:
        for side in sides.values():
            side.close()
    out: dict[str, list[list[float]]] = {}
    for name, result in results.items():
        samples = result.get("samples_ns")
        unwritten = result.get("unwritten") or []
        if (not isinstance(samples, list) or len(samples) != len(shapes)
                or any(not isinstance(s, list) or len(s) != settings.warmup_calls + n for s, n in zip(samples, counts))):
            raise ComparisonFailed(name, "the child's report does not hold the calls it was asked for")
        impossible = [x for s in samples for x in s if not _positive_time(x)]
        if impossible:  # the child's clock cannot give these: its report was rewritten or is broken
            raise ComparisonFailed(name, f"reports {len(impossible)} call time(s) that are not a positive, finite time "
                                   f"(first: {impossible[0]!r} ns): no call takes that")
        bad = [(shape_label(s), u) for s, u in zip(shapes, unwritten) if u]
        if bad:
            raise ComparisonFailed(name, "left sampled output elements unwritten (NaN) in "
                                   + ", ".join(f"{u} calls at {label}" for label, u in bad) + ": it skips work")
        broken = result.get("broken")
        if not isinstance(broken, list):
            raise ComparisonFailed(name, "the child's report does not say whether its buffers stayed intact")
        if broken:
            raise ComparisonFailed(name, "broke a rule of its buffers: " + "; ".join(map(str, broken[:4])))
        out[name] = [[x / 1e6 for x in s[settings.warmup_calls:]] for s in samples]
    walls = {name: [side.walls.get(k, [])[settings.warmup_calls:] for k in range(len(shapes))]
             for name, side in sides.items()}
    return {"samples_ms": out, "walls_ms": walls, "calls": counts, "flush": results["A"].get("flush")}


def _positive_time(x: Any) -> bool:
    """Whether ``x`` (a reported call time, ns) is a number > 0 and finite as a float (not a
    bool; an integer beyond the float range is not)."""
    if not isinstance(x, (int, float)) or isinstance(x, bool):
        return False
    try:
        return math.isfinite(float(x)) and x > 0
    except OverflowError:
        return False


#: A side whose mean call exceeds its median this many times gets a note: some calls stall.
STALL_RATIO = 1.5
#: The parent's clock must see at least this share of a claimed 2x-or-more difference (see :func:`_check_clock`).
CLOCK_SHARE = 0.25
#: ... and the claim must exceed this many standard errors of the clock's estimate (see :func:`_check_clock`).
CLOCK_RESOLUTIONS = 2.0
#: ... and a side is refused only when so many rounds fall short of that share that a fair coin
#: gives as many with at most this probability (a sign test; see :func:`_check_clock`).
CLOCK_REFUSAL_P = 0.05
_MEDIAN_SE = 1.2533  # sqrt(pi / 2): the standard error of a median is this times sigma / sqrt(n) (normal data)
_MAD_SIGMA = 1.4826  # sigma = this times the median absolute deviation (normal data)


def _clock_resolution(per_round: list[dict]) -> float:
    """Standard error (ms) of the parent's clock's estimate of the difference between the
    sides' calls: the median over rounds of each round's difference ``d`` of the sides' turn
    medians (summed over shapes). The larger of two estimates:

    - *within rounds*: a round's turn median over ``n`` turns of scatter ``sigma`` has standard
      error ``1.2533 * sigma / sqrt(n)``, with ``sigma = 1.4826 * MAD`` (the median absolute
      deviation; Serfling, *Approximation Theorems of Mathematical Statistics*, 1980, sec. 2.3
      and 2.5); a difference of two sides ``sqrt(2)`` times that; its median over ``R`` rounds
      ``1.2533 / sqrt(R)`` times that. Shapes combine in quadrature; the scatter is the smaller
      side's (the median over rounds), since a forging side can scatter its own turns at will.
    - *between rounds*: ``1.2533 * 1.4826 * MAD(d) / sqrt(R)``. Where a round's children land
      (beside another tenant or not) shifts all of its turns, which the turns within it do not
      show. A forger can inflate this one; it then gets an unchecked claim, which promotion
      refuses, not a pass.
    """
    def mad(xs: list[float]) -> float:
        m = statistics.median(xs)
        return statistics.median(abs(x - m) for x in xs)

    def se(xs: list[float]) -> float:  # of the median of xs
        return _MEDIAN_SE * _MAD_SIGMA * mad(xs) / math.sqrt(len(xs)) if len(xs) >= 2 else 0.0

    per_side = min(statistics.median(math.sqrt(sum(se(w) ** 2 for w in rnd["walls_ms"][side])) for rnd in per_round)
                   for side in ("A", "B"))
    within = math.sqrt(2.0) * per_side * _MEDIAN_SE / math.sqrt(len(per_round))
    totals = _turn_totals(per_round)
    return max(within, se([a - b for a, b in zip(totals["A"], totals["B"])]))


def _turn_totals(per_round: list[dict]) -> dict[str, list[float]]:
    """Per side, each round's turn medians (ms) summed over shapes (0 for a shape without turns)."""
    return {side: [sum(statistics.median(w) if w else 0.0 for w in rnd["walls_ms"][side]) for rnd in per_round]
            for side in ("A", "B")}


def _shorter(ms: float) -> str:
    """``"X ms shorter"``, or ``"X ms longer"`` for a negative ``ms``."""
    return f"{ms:.4g} ms shorter" if ms >= 0 else f"{-ms:.4g} ms longer"


def _check_clock(per_round: list[dict], med: dict[str, list[list[float]]], noise_floor: float) -> str | None:
    """Cross-check the children's reported call times with the parent's clock: a plausibility
    check against gross forgery, not a second measurement.

    A turn, as the parent times it (command to acknowledgement), holds the flush, the call,
    the channel and the child's wake-up; all but the call cost both sides about alike, though
    with the scheduler's noise (on a loaded host a wake-up can cost more than a short call).
    So: a side must not report calls longer than its turns took; and a side that claims to
    be at least twice as fast (its calls shorter by ``d`` ms, ``d`` over half of the other
    side's time) must also take turns shorter by at least :data:`CLOCK_SHARE` of ``d``, over
    the rounds' medians. Else its reports are not its calls' times (the candidate shares the
    child's address space and can rewrite them), and it is refused when the rounds whose turns
    fall short are so many that a fair coin gives as many with probability at most
    :data:`CLOCK_REFUSAL_P` (a sign test: where the rest of a turn costs both sides alike, an
    honest side's rounds fall short less often than not, whatever the shape of the host's
    noise); with fewer, the claim stands unconfirmed, with a note (with four rounds or fewer a
    sign test cannot reach that probability, so such a claim stays unconfirmed). Smaller
    claimed differences are not checked.
    A claim within :data:`CLOCK_RESOLUTIONS` standard errors of the clock's own estimate
    (:func:`_clock_resolution`) stands unchecked, with a note (and
    :attr:`PairedComparison.clock_unchecked`, on which promotion refuses): a turn holds a cache
    flush and a wake-up, and on a loaded host turns of microsecond calls scatter over
    milliseconds, and which child lands beside another tenant shifts a whole round's turns, so
    the clock cannot see such a claim either way. (A forger can widen the error by slowing its
    own turns, which cuts the turns per round; that gets it the note, not a pass.) Checked for
    verdicts other than a tie, between libraries that are not byte-identical.

    Returns:
        A note for the result when a claim of twice as fast or more was within the clock's
        resolution, or beyond it but contradicted in too few rounds to refuse (so it stands
        unchecked), else None.

    Raises:
        ComparisonFailed: naming the side whose reports disagree with the parent's clock.
    """
    rep = {side: [sum(m) for m in med[side]] for side in ("A", "B")}
    wall = _turn_totals(per_round)
    for side in ("A", "B"):
        if statistics.median(r - w for r, w in zip(rep[side], wall[side])) > 0.05 * statistics.median(wall[side]):
            raise ComparisonFailed(side, f"reports calls ({statistics.median(rep[side]):.4g} ms) longer than its turns "
                                   f"took by the parent's clock ({statistics.median(wall[side]):.4g} ms)")
    claimed = statistics.median(a - b for a, b in zip(rep["A"], rep["B"]))  # > 0: B claims to be faster
    seen = statistics.median(a - b for a, b in zip(wall["A"], wall["B"]))
    slower = max(statistics.median(rep["A"]), statistics.median(rep["B"]))
    side = "B" if claimed > 0 else "A"
    sign = 1.0 if side == "B" else -1.0  # turns of A minus B, as how much shorter the claimant's were
    shorter = sign * seen
    if abs(claimed) <= 0.5 * slower:
        return None
    resolution = _clock_resolution(per_round)
    if abs(claimed) <= CLOCK_RESOLUTIONS * resolution:
        return (f"{side} claims calls {abs(claimed):.4g} ms shorter, twice as fast or more, which the parent's clock "
                f"could not check: its standard error here is {resolution:.4g} ms (each turn holds a cache flush and "
                f"a wake-up; {side}'s turns were {_shorter(shorter)}); on a quieter host, or with more calls "
                "per round, it can")
    if shorter >= CLOCK_SHARE * abs(claimed):
        return None
    # Under load a round's turns can lose a microsecond difference to one wake-up, and a median
    # of a few heavy-tailed rounds can then miss the claim by more than its standard error says.
    # So refusal is a sign test: an honest side's rounds fall short of a quarter of its claim less
    # often than not (the rest of a turn costs both sides alike), and the clock must contradict
    # it in so many rounds that a fair coin would rarely give as many (Conover, "Practical
    # Nonparametric Statistics", 1999, sec. 3.4).
    from scipy.stats import binomtest  # noqa: PLC0415  (import-light package, as the verdict's Wilcoxon)

    short = sum(1 for a, b in zip(wall["A"], wall["B"]) if sign * (a - b) < CLOCK_SHARE * abs(claimed))
    rounds = len(wall["A"])
    p = binomtest(short, rounds, 0.5, alternative="greater").pvalue
    if p <= CLOCK_REFUSAL_P:
        raise ComparisonFailed(side, (
            f"its reported call times disagree with the parent's clock: it claims calls {abs(claimed):.4g} ms shorter "
            f"than the other side's, its turns were {_shorter(shorter)} (under a quarter of the claim in "
            f"{short} of {rounds} rounds); the candidate can rewrite what its child reports, so these figures are "
            "refused"))
    settle = ("more rounds, or a quieter host, can settle it" if 0.5 ** rounds <= CLOCK_REFUSAL_P else
              f"{rounds} rounds cannot: a sign test needs at least "
              f"{math.ceil(math.log2(1 / CLOCK_REFUSAL_P))} to refuse")
    return (f"{side} claims calls {abs(claimed):.4g} ms shorter, twice as fast or more, which the parent's clock "
            f"could not confirm: {side}'s turns were {_shorter(shorter)}, under a quarter of the claim in {short} of "
            f"{rounds} rounds, too few to refuse it (a sign test, p {p:.2g}); {settle}")


def compare_paired(
    workload: str,
    a: Kernel,
    b: Kernel,
    *,
    shape_set: str = "llama3-8b",
    shapes: list[str] | None = None,
    backend: str = "cpu",
    target: str | None = None,
    settings: PairSettings | None = None,
    noise_floor: float | None = None,
    floor_store: FloorStore | None = None,
    sandbox: SandboxPolicy | None = None,
) -> PairedComparison:
    """Is B faster than A? Measured paired and interleaved, in rounds (see the module).

    Args:
        workload: registered workload name, e.g. ``"rmsnorm"``.
        a, b: the kernels (A is the reference side: ``ratio`` is B's time over A's).
        shape_set: the workload's shape set to time.
        shapes: labels of the shapes to time (``"rows=8,hidden=256"``); default all of the set.
        backend: ``"cpu"`` (the backend with a turn-taking child).
        target: target name the floor is kept under; default ``"cpu-<machine>"`` of the backend.
        settings: :class:`PairSettings`; default ``PairSettings()``.
        noise_floor: the floor to judge against (a fraction); default the stored one for
            (target, fingerprint, workload, shape set), measured by :func:`measure_noise_floor`
            and stored when there is none.
        floor_store: where floors are read and kept; default :class:`FileFloorStore`.
        sandbox: confinement of the children; default :meth:`SandboxPolicy.from_env`.

    Returns:
        :class:`PairedComparison`.

    Raises:
        KeyError: unknown workload, shape set, shape label or backend.
        ValueError: a backend without a turn-taking child, or a negative ``noise_floor``.
        ComparisonFailed: a side did not compile or its child failed (``side`` says which).
        OSError: the sandbox cannot be started (:class:`kernels.sandbox.spawn.SandboxError`).
    """
    started = time.monotonic()
    if noise_floor is not None and not noise_floor >= 0:
        raise ValueError(f"compare_paired: noise_floor must be a fraction >= 0, not {noise_floor!r}")
    if not capabilities(backend).paired_turns:
        raise ValueError(f"paired comparison runs on the cpu backend's turn-taking child, not {backend!r}")
    ctx = _Setup(workload, shape_set, shapes, settings, sandbox, target)
    wl, chosen, settings, policy, env, request = ctx.wl, ctx.shapes, ctx.settings, ctx.policy, ctx.env, ctx.request
    fingerprint, target, base_seed = ctx.fingerprint, ctx.target, ctx.seed
    libraries = {"A": ctx.compile(a, "A"), "B": ctx.compile(b, "B")}
    identical = _digest(libraries["A"]) == _digest(libraries["B"])
    floor_entry, floor_source = None, "given"
    if noise_floor is None:
        store = floor_store or FileFloorStore()
        key = floor_key(target, fingerprint, wl.name, shape_set, settings.protocol)
        floor_entry = store.get(key)
        floor_source = "stored"
        if floor_entry is None:
            floor_entry = _measure(wl, chosen, libraries["A"], request, settings, policy, env, base_seed + 1)
            floor_entry.update(target=target, fingerprint=fingerprint, workload=wl.name, shape_set=shape_set)
            try:
                store.put(key, floor_entry)
            except OSError:
                pass  # the verdict stands; the next comparison measures again
            floor_source = "measured"
        noise_floor = float(floor_entry["floor"])
    rng = np.random.default_rng(base_seed)
    per_round: list[dict] = []
    for r in range(settings.rounds):
        per_round.append(_round(wl, chosen, libraries, request, settings, policy, env, rng, a_first=r % 2 == 0))
    labels = [shape_label(s) for s in chosen]
    med = {side: [[statistics.median(x) for x in rnd["samples_ms"][side]] for rnd in per_round] for side in ("A", "B")}
    totals = [sum(mb) / sum(ma) for ma, mb in zip(med["A"], med["B"])]
    verdict = judge_rounds(totals, noise_floor)
    # A claim that one side is faster must hold on the parent's clock too. Byte-identical
    # libraries make no such claim (the verdict below is a tie whatever was measured), so a
    # difference between their reports is noise, not forgery.
    unchecked = _check_clock(per_round, med, noise_floor) if verdict.verdict != "tie" and not identical else None
    measured = verdict.verdict
    if identical and measured != "tie":
        # The same machine code cannot be faster than itself: what was measured is noise.
        verdict = dataclasses.replace(verdict, verdict="tie", why=(
            f"tie: the two libraries are byte-identical (measured: {verdict.why})"))
    per_shape: dict[str, dict] = {}
    notes: list[str] = [unchecked] if unchecked else []
    for k, label in enumerate(labels):
        ratios = [mb[k] / ma[k] for ma, mb in zip(med["A"], med["B"])]
        v = judge_rounds(ratios, noise_floor)
        means = {side: statistics.median(statistics.fmean(rnd["samples_ms"][side][k]) for rnd in per_round)
                 for side in ("A", "B")}
        per_shape[label] = {"ratio": v.ratio, "ci": list(v.ci), "verdict": v.verdict,
                            "median_a_ms": statistics.median(m[k] for m in med["A"]),
                            "median_b_ms": statistics.median(m[k] for m in med["B"]),
                            "mean_a_ms": means["A"], "mean_b_ms": means["B"],
                            "round_ratios": list(v.round_ratios)}
        for side in ("A", "B"):
            typical = per_shape[label][f"median_{side.lower()}_ms"]
            if typical > 0 and means[side] > STALL_RATIO * typical:
                notes.append(f"{side}'s mean call at {label} is {means[side] / typical:.1f}x its median: some of "
                             "its calls stall (the verdict is on medians)")
    return PairedComparison(
        verdict=verdict.verdict, measured_verdict=measured, ratio=verdict.ratio, ci=verdict.ci, p_value=verdict.p_value,
        noise_floor=noise_floor, floor_source=floor_source, rounds=verdict.rounds,
        round_ratios=verdict.round_ratios, rounds_needed=verdict.rounds_needed, why=verdict.why,
        median_a_ms=statistics.median(sum(m) for m in med["A"]),
        median_b_ms=statistics.median(sum(m) for m in med["B"]),
        shapes=per_shape, calls=[dict(zip(labels, rnd["calls"])) for rnd in per_round], identical=identical,
        fingerprint={**fingerprint, "target": target, "shape_set": shape_set, "settings": settings.to_dict(),
                     "seed": base_seed, "omp": env, "flush": per_round[0]["flush"] if per_round else None},
        duration_s=time.monotonic() - started, floor=floor_entry, notes=notes, clock_unchecked=unchecked is not None,
    )


#: A/A rounds behind a measured floor (fewer give a wide interval, so a high floor).
FLOOR_ROUNDS = 12


def _measure(wl: Workload, shapes: list[dict], library: Path, request: dict, settings: PairSettings,
             policy: SandboxPolicy, env: dict, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    ratios = []
    rounds = max(settings.rounds, FLOOR_ROUNDS)
    for r in range(rounds):
        rnd = _round(wl, shapes, {"A": library, "B": library}, request, settings, policy, env, rng, a_first=r % 2 == 0)
        ma = [statistics.median(x) for x in rnd["samples_ms"]["A"]]
        mb = [statistics.median(x) for x in rnd["samples_ms"]["B"]]
        ratios.append(sum(mb) / sum(ma))
    return {"floor": floor_from_ratios(ratios), "aa_ratios": ratios, "rounds": rounds, "measured_at": time.time(),
            "kernel": _digest(library), "settings": settings.to_dict()}


def measure_noise_floor(
    workload: str,
    kernel: Kernel,
    *,
    shape_set: str = "llama3-8b",
    shapes: list[str] | None = None,
    target: str | None = None,
    settings: PairSettings | None = None,
    floor_store: FloorStore | None = None,
    sandbox: SandboxPolicy | None = None,
) -> dict:
    """Measure the noise floor by A/A: ``kernel`` against itself in at least
    :data:`FLOOR_ROUNDS` rounds (:func:`kernels.comparison.noise_floor.floor_from_ratios`), and store it.

    Returns:
        The stored entry: ``floor`` (fraction), ``aa_ratios``, ``rounds``, ``measured_at``,
        ``target``, ``fingerprint``, ``workload``, ``shape_set``, ``key``.

    Raises:
        As :func:`compare_paired`; OSError also when the store cannot be written.
    """
    ctx = _Setup(workload, shape_set, shapes, settings, sandbox, target)
    library = ctx.compile(kernel, "A")
    entry = _measure(ctx.wl, ctx.shapes, library, ctx.request, ctx.settings, ctx.policy, ctx.env, ctx.seed)
    target, fingerprint, wl = ctx.target, ctx.fingerprint, ctx.wl
    key = floor_key(target, fingerprint, wl.name, shape_set, ctx.settings.protocol)
    entry.update(target=target, fingerprint=fingerprint, workload=wl.name, shape_set=shape_set)
    (floor_store or FileFloorStore()).put(key, entry)
    return {**entry, "key": key}
