"""Re-validate and re-benchmark a production engine with a candidate kernel, in sandbox children.

The promotion guard (:mod:`swarm.engine_registry.guard`) calls :func:`check_engine_isolated` for every
production engine that uses the workload of a kernel about to be promoted. The candidate has
passed the sandboxed evaluation but is not production yet, so (see the trust decision in
:mod:`engines._binding`) it is loaded only in sandbox children confined exactly as the
evaluator's (:func:`kernels.sandbox.spawn.start_child`: sandbox user, network namespace, Landlock,
seccomp, resource limits, disk quota, empty environment), never in the web or worker process.
The children run :mod:`engines._guard_child` (request mode ``"engine-check"``).

This process compiles every library (the production kernels and the candidate; the
children cannot run the compiler) and then runs

1. **validation**: one child per side, the *challenger* (the engine with the candidate in
   place of the production kernel of its workload) and the *incumbent* (the engine as it
   runs today), each validating end to end and operator by operator at the engine's shapes
   (:func:`engines._validate.validate`);
2. **speed**, only when the challenger validated: the paired, interleaved protocol of
   :mod:`kernels.comparison.paired`, on engines: per *round* a fresh pair of turn-taking children
   (incumbent A, challenger B) take turns call by call in the order A B B A ... (the side that
   starts alternates between rounds), the idle child's process group stopped. The items are
   the engine's end-to-end scenarios and one kernel call of the candidate's workload at each
   of its engine shapes (per operator). A round's ratio per item is ``median(B) / median(A)``;
   each item's verdict comes from the rounds' ratios (:func:`kernels.comparison.verdict.judge_rounds`)
   against the item's noise floor: given, stored (``floor_store`` under
   :func:`kernels.comparison.noise_floor.floor_key` with workload ``engine:<engine>`` and shape set
   ``<config>:<workload>``), or measured by A/A rounds of the incumbent against itself and
   stored (:func:`kernels.comparison.noise_floor.floor_from_ratios`, per item).

Request: ``{"engine", "config", "plan", "target", "production": [entries of
/api/production/], "candidate": {"workload", "source", "params", "candidate", "hash",
"shape_set"?}, "scenarios"?}``.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from kernels.comparison.sandbox_side import SandboxSide, SideFailed
from kernels.evaluation.timing import omp_environment

RUNNER = "engines._guard_child"
_PREPARE_S = 300.0  # the first turn also waits for the child's weights, shapes and inputs


@dataclass(frozen=True)
class GuardSettings:
    """How the engine check measures speed (see :class:`kernels.comparison.paired.PairSettings`).

    Attributes:
        rounds: fresh pairs of children, at least 2; floor_rounds: A/A rounds behind a
            measured floor.
        warmup_calls: untimed turns per side and item at the start of a round.
        min_calls, max_calls: timed turns per side and item in a round.
        round_ms: wall clock (ms) of timed turns per item in a round, both sides together.
        turn_timeout_s: seconds one call may take before its side is failed.
        noise_floor: the floor (a fraction) every item is judged against; None: stored or
            measured.
        validate_timeout_s: wall-clock limit of a validation child.

    Raises:
        ValueError: a value out of range.
    """

    rounds: int = 6
    floor_rounds: int = 12
    warmup_calls: int = 2
    min_calls: int = 8
    max_calls: int = 200
    round_ms: float = 200.0
    turn_timeout_s: float = 60.0
    noise_floor: float | None = None
    validate_timeout_s: float = 600.0

    def __post_init__(self) -> None:
        for name, lo in (("rounds", 2), ("floor_rounds", 2), ("warmup_calls", 1), ("min_calls", 1), ("max_calls", 1)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < lo:
                raise ValueError(f"GuardSettings: {name} must be an integer >= {lo}, not {v!r}")
        if self.min_calls > self.max_calls:
            raise ValueError(f"GuardSettings: min_calls {self.min_calls} exceeds max_calls {self.max_calls}")
        for name in ("round_ms", "turn_timeout_s", "validate_timeout_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise ValueError(f"GuardSettings: {name} must be a positive number, not {v!r}")
        if self.noise_floor is not None and not self.noise_floor >= 0:
            raise ValueError(f"GuardSettings: noise_floor must be a fraction >= 0, not {self.noise_floor!r}")


class CheckFailed(Exception):
    """A child of the engine check failed (crashed, hung, broke its quota, forged its report)."""


class _Libraries:
    """The compiled libraries of the production entries and the candidate (compile cache)."""

    def __init__(self, req: dict) -> None:
        from kernels.backends import get_backend  # noqa: PLC0415
        from kernels.backends.cpu import CompileError  # noqa: PLC0415
        from kernels.space import SpaceError, format_defines  # noqa: PLC0415

        be = get_backend("cpu")
        self.paths: dict[str, Path] = {}
        self.fingerprint = be.fingerprint()
        for j, e in enumerate(req.get("production") or []):
            try:
                self.paths[f"production-{j}.so"] = Path(be.compile(e["source"], format_defines(e.get("params") or {})).path)
            except (CompileError, SpaceError) as exc:
                raise CheckFailed(f"production kernel of {e['workload']} (candidate {e.get('candidate')}) does not "
                                  f"compile: {exc}") from exc
        cand = req["candidate"]
        try:
            self.paths["candidate.so"] = Path(be.compile(cand["source"], format_defines(cand.get("params") or {})).path)
        except (CompileError, SpaceError, AttributeError, TypeError) as exc:
            raise CheckFailed(f"the candidate does not compile: {exc}") from exc

    def request(self, req: dict, workdir: Path, side: str, phase: str, **extra) -> dict:
        prod = [{**e, "library": str(workdir / f"production-{j}.so")} for j, e in enumerate(req.get("production") or [])]
        cand = {**req["candidate"], "library": str(workdir / "candidate.so")}
        return {"mode": "engine-check", "runner": RUNNER, "phase": phase, "side": side, "engine": req["engine"],
                "config": req.get("config") or None, "plan": req.get("plan") or {}, "target": req.get("target", "cpu-x86_64"),
                "production": prod, "candidate": cand, **extra}


class _Child:
    """One sandbox child of the check (:class:`kernels.comparison.sandbox_side.SandboxSide`): its private
    directory with the libraries copied in, its logs; failures named by the engine side."""

    def __init__(self, libs: _Libraries, request: dict, side: str, phase: str, policy, timeout_s: float, *,
                 turns: bool = False, **extra) -> None:
        self.side = side

        def request_for(workdir: Path) -> dict:
            return libs.request(request, workdir, side, phase, **extra)

        self.sandbox = SandboxSide(libs.paths, request_for, policy, omp_environment("timing"), timeout_s, turns=turns,
                                   first_turn_s=_PREPARE_S, tail_chars=1500)

    @property
    def walls(self) -> dict[int, list[float]]:
        return self.sandbox.walls

    def turn(self, k: int, timeout_s: float) -> None:
        try:
            self.sandbox.turn(k, timeout_s)
        except SideFailed as exc:
            raise CheckFailed(f"the {self.side} engine child failed a turn: {exc.reason}") from exc

    def finish(self, timeout_s: float) -> dict:
        """The child's result (with ``sandbox``, its confinement report).

        Raises:
            CheckFailed: it crashed, timed out, broke its quota, forged its report or failed.
        """
        try:
            return self.sandbox.finish(timeout_s)
        except SideFailed as exc:
            raise CheckFailed(f"the {self.side} engine child: {exc.reason}") from exc

    def close(self) -> None:
        self.sandbox.close()


def _validate(libs: _Libraries, req: dict, side: str, policy, settings: GuardSettings, reference) -> dict:
    child = _Child(libs, req, side, "validate", policy, settings.validate_timeout_s,
                   **({"reference": reference} if reference is not None else {}))
    try:
        return child.finish(settings.validate_timeout_s)
    finally:
        child.close()


def _round(libs: _Libraries, req: dict, items: list[dict], sides: dict[str, str], policy, settings: GuardSettings,
           a_first: bool) -> tuple[dict[str, list[list[float]]], list[int]]:
    """One round: a fresh pair of turn-taking children (``sides``: ``{"A": side, "B": side}``);
    per side and item the timed calls (ms), and the timed turns per item."""
    budget_s = _PREPARE_S + settings.turn_timeout_s * 4 * settings.max_calls * len(items)
    children: dict[str, _Child] = {}
    try:
        for name in ("A", "B") if a_first else ("B", "A"):
            children[name] = _Child(libs, req, sides[name], "turns", policy, budget_s, turns=True, items=items)
        first, second = (children["A"], children["B"]) if a_first else (children["B"], children["A"])
        counts = []
        for k in range(len(items)):
            for i in range(settings.warmup_calls):
                for c in ((first, second) if i % 2 == 0 else (second, first)):
                    c.turn(k, settings.turn_timeout_s)
            pairs, start = 0, time.monotonic()
            while pairs < settings.max_calls and (
                    pairs < settings.min_calls or (time.monotonic() - start) * 1e3 < settings.round_ms):
                for c in ((first, second) if (settings.warmup_calls + pairs) % 2 == 0 else (second, first)):
                    c.turn(k, settings.turn_timeout_s)
                pairs += 1
            counts.append(pairs)
        results = {name: c.finish(60.0) for name, c in children.items()}
    finally:
        for c in children.values():
            c.close()
    out = {}
    for name, res in results.items():
        samples = res.get("samples_ns")
        if (not isinstance(samples, list) or len(samples) != len(items)
                or any(not isinstance(s, list) or len(s) != settings.warmup_calls + n for s, n in zip(samples, counts))):
            raise CheckFailed(f"the {sides[name]} engine child's report does not hold the calls it was asked for")
        out[name] = [[x / 1e6 for x in s[settings.warmup_calls:]] for s in samples]
    return out, counts


def _labels(items: list[dict]) -> list[str]:
    from kernels.workloads import shape_label  # noqa: PLC0415

    return [it["scenario"] if it["kind"] == "scenario" else f"{it['workload']} {shape_label(it['shape'])}" for it in items]


def _ratios(rounds: list[dict[str, list[list[float]]]], n: int) -> list[list[float]]:
    """Per item, each round's ``median(B) / median(A)``."""
    return [[statistics.median(r["B"][k]) / statistics.median(r["A"][k]) for r in rounds] for k in range(n)]


def _floors(libs: _Libraries, req: dict, items: list[dict], policy, settings: GuardSettings,
            floor_store) -> tuple[list[float], str, dict | None]:
    """Per item the noise floor, where it came from, and the stored entry."""
    from kernels.comparison.noise_floor import FileFloorStore, floor_from_ratios, floor_key  # noqa: PLC0415

    if settings.noise_floor is not None:
        return [settings.noise_floor] * len(items), "given", None
    labels = _labels(items)
    store = floor_store or FileFloorStore()
    target = req.get("target", "cpu-x86_64")
    key = floor_key(target, libs.fingerprint, f"engine:{req['engine']}",
                    f"{req.get('config') or 'default'}:{req['candidate']['workload']}")
    entry = store.get(key)
    if entry is not None and all(lab in (entry.get("items") or {}) for lab in labels):
        return [float(entry["items"][lab]) for lab in labels], "stored", entry
    rounds = [_round(libs, req, items, {"A": "incumbent", "B": "incumbent"}, policy, settings, r % 2 == 0)[0]
              for r in range(settings.floor_rounds)]
    per_item = {lab: floor_from_ratios(rs) for lab, rs in zip(labels, _ratios(rounds, len(items)))}
    entry = {"floor": max(per_item.values()), "items": per_item, "aa_ratios": _ratios(rounds, len(items)),
             "rounds": settings.floor_rounds, "measured_at": time.time(), "target": target,
             "fingerprint": libs.fingerprint, "workload": f"engine:{req['engine']}",
             "shape_set": f"{req.get('config') or 'default'}:{req['candidate']['workload']}"}
    try:
        store.put(key, entry)
    except (OSError, ValueError):
        pass  # the verdicts stand; the next check measures again
    return [per_item[lab] for lab in labels], "measured", entry


def check_engine_isolated(req: dict[str, Any], *, settings: GuardSettings | None = None, policy=None,
                          floor_store=None, reference=None) -> dict[str, Any]:
    """Validate and time ``req``'s engine with and without the candidate (see the module).

    Args:
        req: the request (module docstring).
        settings: :class:`GuardSettings`; default ``GuardSettings()``.
        policy: the sandbox's :class:`kernels.sandbox.spawn.SandboxPolicy`; default from the
            environment, as the evaluator's.
        floor_store: where noise floors are kept (:class:`kernels.comparison.noise_floor.FloorStore`).
        reference: the encoder's reference embeddings (``minilm``; default computed here by
            :func:`engines.minilm.reference_embeddings`, a child process).

    Returns:
        ``{"engine", "config", "challenger_validation", "incumbent_validation", "shapes"
        (model axes of the candidate workload's operator calls), "timing": {"items": {label:
        {"kind", "verdict", "ratio", "ci", "p_value", "noise_floor", "round_ratios",
        "median_incumbent_ms", "median_challenger_ms", "why"}}, "floor_source", "rounds",
        "calls"} or None, "sandbox"}``, or ``{"error": ...}`` when a child crashed, timed out
        or failed, or a library does not compile (the guard blocks either way).
    """
    from kernels.comparison.verdict import judge_rounds  # noqa: PLC0415
    from kernels.sandbox.policy import SandboxError, SandboxPolicy  # noqa: PLC0415

    settings = settings or GuardSettings()
    policy = policy or SandboxPolicy.from_env()
    started = time.monotonic()
    try:
        libs = _Libraries(req)
        if req["engine"] == "minilm" and reference is None:
            from engines.minilm import SENTENCES, reference_embeddings  # noqa: PLC0415

            reference = reference_embeddings(SENTENCES)
        ref = None if reference is None else [list(map(float, row)) for row in reference]
        out: dict[str, Any] = {"engine": req["engine"], "config": req.get("config")}
        cha = _validate(libs, req, "challenger", policy, settings, ref)
        out["sandbox"] = cha.get("sandbox")
        out["challenger_validation"] = cha["validation"]
        out["shapes"] = cha.get("model_shapes") or []
        out["incumbent_validation"] = _validate(libs, req, "incumbent", policy, settings, ref)["validation"]
        if out["challenger_validation"].get("status") != "ok":
            out["timing"] = None
            return out
        from engines._timing import SCENARIOS  # noqa: PLC0415

        workload = req["candidate"]["workload"]
        items = [{"kind": "scenario", "scenario": s} for s in (req.get("scenarios") or SCENARIOS[req["engine"]][:2])]
        items += [{"kind": "operator", "workload": workload, "shape": s} for s in _timed_shapes(cha.get("shapes") or [])]
        floors, floor_source, floor_entry = _floors(libs, req, items, policy, settings, floor_store)
        rounds, calls = [], []
        for r in range(settings.rounds):
            samples, counts = _round(libs, req, items, {"A": "incumbent", "B": "challenger"}, policy, settings, r % 2 == 0)
            rounds.append(samples)
            calls.append(counts)
    except (CheckFailed, SandboxError) as exc:
        return {"error": str(exc)}
    labels = _labels(items)
    judged = {}
    for k, (label, ratios) in enumerate(zip(labels, _ratios(rounds, len(items)))):
        v = judge_rounds(ratios, floors[k])
        judged[label] = {"kind": items[k]["kind"], "verdict": v.verdict, "ratio": v.ratio, "ci": list(v.ci),
                         "p_value": v.p_value, "noise_floor": v.noise_floor, "round_ratios": list(v.round_ratios),
                         "median_incumbent_ms": statistics.median(statistics.median(r["A"][k]) for r in rounds),
                         "median_challenger_ms": statistics.median(statistics.median(r["B"][k]) for r in rounds),
                         "why": v.why}
    out["timing"] = {"items": judged, "floor_source": floor_source, "floor": floor_entry, "rounds": settings.rounds,
                     "calls": [dict(zip(labels, c)) for c in calls], "settings": asdict(settings),
                     "duration_s": time.monotonic() - started}
    return out


def _timed_shapes(shapes: list[dict]) -> list[dict]:
    """The operator shapes timed per operator: the validation's distinct call shapes, at most
    one per model axes and load (the decode attention's growing cache gives one each step)."""
    from engines._coverage import model_axes  # noqa: PLC0415

    out, seen = [], []
    for s in shapes:
        key = (tuple(model_axes(s).items()), tuple((k, v) for k, v in s.items() if k not in model_axes(s) and k != "kv_len"))
        if key not in seen:
            seen.append(key)
            out.append(s)
    return out
