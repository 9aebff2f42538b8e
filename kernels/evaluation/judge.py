"""The plan, the expected results and the classification of one evaluation, the same for
every backend that runs candidates (:mod:`kernels.evaluation.pipeline` for ``cpu``,
:mod:`kernels.evaluation.cuda_pipeline` for ``cuda``; docs/design.md, "Evaluation protocol").

- :func:`_plan`: validation cases and timed items with fresh seeds;
- :class:`Expected`: inputs and float64 references of a plan, computed ahead of the
  children (and saved into their directories);
- :func:`_judge`: reads what the children saved (defensively: :func:`_load`) and classifies
  one :class:`~kernels.outcome.Outcome`, with the cases, metrics and samples.
"""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import threading
from pathlib import Path
from typing import Any

import numpy as np

from kernels import stats
from kernels.evaluation.first_call import first_call_metrics
from kernels.evaluation.reference_check import ReferenceProblem, describe, fix_hint, reference_problems
from kernels.hashing import array_digest
from kernels.outcome import Outcome
from kernels.sandbox.guard_pages import GUARD_BITS, GUARD_ELEMS, GuardLayout, fault_report
from kernels.sandbox.policy import SandboxPolicy
from kernels.sandbox.spawn import ChildRun
from kernels.sandbox.workdirs import hand_over
from kernels.validation_store import StoredCase
from kernels.workloads import Workload, shape_label

_SENTINELS_ONLY = GuardLayout(GUARD_ELEMS)  # [1024 | data | 1024], no inaccessible pages (CUDA)
_TIMED_INPUT_SETS = 2  # input sets rotated between timed calls (fresh contents)


def _plan(wl: Workload, shape_set: str, base_seed: int, stored: list[StoredCase] = ()) -> tuple[list[dict], list[dict]]:
    """Validation cases (every timed shape once, each odd shape twice, then the stored
    failure cases not already planned) and timed items, with fresh seeds from ``base_seed``."""
    rng = np.random.default_rng(base_seed)

    def fresh() -> int:
        return int(rng.integers(0, 2**62))

    shapes = [dict(s) for s in wl.shapes(shape_set)]
    odd = [dict(s) for s in wl.validation_shapes.get(shape_set, ())]
    cases = [{"id": f"v{i}", "kind": "validation", "shape": s, "seed": fresh()} for i, s in enumerate(shapes)]
    for s in odd:
        for _ in range(2):
            cases.append({"id": f"v{len(cases)}", "kind": "validation", "shape": s, "seed": fresh()})
    timed = [
        {"id": f"t{i}", "shape": s, "seeds": [fresh() for _ in range(_TIMED_INPUT_SETS)], "fresh_seed": fresh()}
        for i, s in enumerate(shapes)
    ]
    planned = {(tuple(sorted(c["shape"].items())), c["seed"]) for c in cases}
    axes = list(shapes[0]) if shapes else [a.name for a in wl.args if a.kind == "int"]
    for sc in stored:
        if set(sc.shape) != set(axes) or sc.key in planned:
            continue  # a shape of another version of the workload, or already planned
        planned.add(sc.key)
        shape = {a: sc.shape[a] for a in axes}  # the workload's axis order (labels match)
        cases.append({"id": f"v{len(cases)}", "kind": "regression", "shape": shape, "seed": sc.seed})
    return cases, timed


def _input_files(wl: Workload, prefix: str) -> dict[str, str]:
    """File names (in the child's directory) of the inputs of one input set: ``in_<prefix>_<name>.npy``."""
    return {a.name: f"in_{prefix}_{a.name}.npy" for a in wl.args if a.kind == "in"}


class Expected:
    """Inputs and float64 references of a plan, computed ahead of the children and the judge.

    The parent generates every input set from (shape, seed) exactly once, in a thread started
    before the compiler runs (numpy releases the GIL in its kernels). With ``workdirs``, each
    set is also saved into the directory of the child that calls the kernel on it, so the
    children load their inputs instead of generating them again; the inputs stay the
    parent's own copies (what the children save after the calls is compared with them).
    Order: the validation cases' inputs (then :meth:`wait` ``("validation")`` returns), the
    timed sets' (``"timing"``), then the references that are always needed (validation cases
    and fresh contents; the last timed call's is computed by the judge, from the inputs as
    that call saw them, see :func:`_salted`; where the workload has a ``salted_reference``,
    the timed sets' too, which the judge updates for the swaps). Entries beyond ``budget_bytes`` (inputs +
    references) are not kept and :meth:`get` computes them again.

    Args:
        wl: the workload (with the shape set's attributes).
        cases: validation cases of :func:`_plan`.
        timed: timed items of :func:`_plan` (every input set and the fresh contents).
        budget_bytes: most bytes kept (default 512 MiB).
        workdirs: ``{"validation": dir, "timing": dir}``: where the children's input files go
            (none written without it).
        policy: the sandbox policy (input files are handed to its user, read-only).
    """

    def __init__(self, wl: Workload, cases: list[dict] = (), timed: list[dict] = (),
                 budget_bytes: int = 512 * 2**20, workdirs: dict[str, Path] | None = None,
                 policy: SandboxPolicy | None = None) -> None:
        self.wl = wl
        self.budget = budget_bytes
        self.workdirs = workdirs or {}
        self.policy = policy
        self.jobs: dict[str, list[tuple[dict, int, str]]] = {
            "validation": [(c["shape"], c["seed"], c["id"]) for c in cases],
            "timing": [(t["shape"], s, f"{t['id']}s{j}") for t in timed for j, s in enumerate(t["seeds"])]
            + [(t["shape"], t["fresh_seed"], f"{t['id']}f") for t in timed],
        }
        self.ahead = [(c["shape"], c["seed"]) for c in cases] + [(t["shape"], t["fresh_seed"]) for t in timed]
        if wl.salted_reference is not None:  # the timed sets' too: the salted ones are updates of them
            self.ahead += [(t["shape"], s) for t in timed for s in t["seeds"]]
        self.inputs_done: dict[tuple, dict] = {}
        self.refs_done: dict[tuple, dict] = {}
        self.digests_done: dict[tuple, dict[str, str]] = {}  # key -> {input: sha256}
        self.files: dict[str, dict[str, str]] = {}  # prefix -> {input name: file} written
        self.used = 0
        self.ready = {phase: threading.Event() for phase in self.jobs}
        self.error: BaseException | None = None
        self.thread: threading.Thread | None = None
        self.stop = False

    @property
    def done(self) -> dict[tuple, tuple[dict, dict]]:
        """``{key: (inputs, reference)}`` of the entries whose reference is kept."""
        return {k: (self.inputs_done[k], r) for k, r in self.refs_done.items() if k in self.inputs_done}

    @staticmethod
    def _key(shape: dict, seed: int) -> tuple:
        return tuple(sorted(shape.items())), int(seed)

    def _keep(self, table: dict, key: tuple, arrays: dict) -> None:
        self.used += sum(a.nbytes for a in arrays.values())
        if self.used <= self.budget:
            table[key] = arrays

    def _save(self, phase: str, prefix: str, inputs: dict) -> None:
        workdir = self.workdirs.get(phase)
        if workdir is None:
            return
        names = _input_files(self.wl, prefix)
        for name, fname in names.items():
            path = workdir / fname
            np.save(path, np.ascontiguousarray(inputs[name], dtype=np.float32), allow_pickle=False)
            hand_over(self.policy, path)
        self.files[prefix] = names

    def _fill(self) -> None:
        try:
            for phase, jobs in self.jobs.items():
                for shape, seed, prefix in jobs:
                    if self.stop:
                        return
                    key = self._key(shape, seed)
                    inputs = self.inputs_done.get(key)
                    if inputs is None:
                        inputs = self.wl.generate(shape, seed)
                        self._keep(self.inputs_done, key, inputs)
                    if key not in self.digests_done:
                        self.digests_done[key] = {k: array_digest(v) for k, v in inputs.items()}
                    self._save(phase, prefix, inputs)
                self.ready[phase].set()
            for shape, seed in self.ahead:
                key = self._key(shape, seed)
                if self.stop or self.used > self.budget:
                    return
                if key not in self.refs_done:
                    self._keep(self.refs_done, key, self.wl.reference(self.inputs(shape, seed), self.wl.attrs))
        except BaseException as exc:  # noqa: BLE001  (surfaces in wait/get, in the caller's thread)
            self.error = exc
        finally:
            for ev in self.ready.values():
                ev.set()

    def start(self) -> Expected:
        """Start computing in a daemon thread."""
        self.thread = threading.Thread(target=self._fill, name="expected", daemon=True)
        self.thread.start()
        return self

    def wait(self, phase: str) -> None:
        """Block until the inputs of ``phase`` (``"validation"`` or ``"timing"``) are saved.

        Raises:
            OSError: (or whatever the thread raised) saving or generating failed.
        """
        self.ready[phase].wait()
        if self.error is not None:
            raise self.error

    def join(self) -> None:
        """Wait for the thread (errors surface from :meth:`wait`)."""
        if self.thread is not None:
            self.thread.join()

    def cancel(self) -> None:
        """Stop after the entry being computed (e.g. nothing left to judge)."""
        self.stop = True
        self.join()

    def with_files(self, phase: str, cases: list[dict], timed: list[dict]) -> tuple[list[dict], list[dict]]:
        """``cases`` and ``timed`` with the names of the input files saved for ``phase``:
        ``case["inputs"]``, ``item["inputs"]`` (one per seed) and ``item["fresh_inputs"]``,
        where every file of the set was written (else the child generates that set), and
        the digests of those sets (``digests``, ``fresh_digests``: the child saves an input
        whose digest differs after the calls, for the judge to count the changes)."""
        if phase == "validation":
            return [{**c, "inputs": self.files[c["id"]], "digests": self.digests(c["shape"], c["seed"])}
                    if c["id"] in self.files else c for c in cases], list(timed)
        out = []
        for t in timed:
            sets = [self.files.get(f"{t['id']}s{j}") for j in range(len(t["seeds"]))]
            fresh = self.files.get(f"{t['id']}f")
            out.append({**t, "inputs": sets, "fresh_inputs": fresh,
                        "digests": [self.digests(t["shape"], s) for s in t["seeds"]],
                        "fresh_digests": self.digests(t["shape"], t["fresh_seed"])}
                       if fresh and all(sets) else t)
        return list(cases), out

    def digests(self, shape: dict, seed: int) -> dict[str, str]:
        """``{input: sha256}`` of the inputs of (shape, seed) (:func:`kernels.hashing.array_digest`)."""
        hit = self.digests_done.get(self._key(shape, seed))
        return hit if hit is not None else {k: array_digest(v) for k, v in self.inputs(shape, seed).items()}

    def inputs(self, shape: dict, seed: int) -> dict:
        """The inputs of (shape, seed): kept, or generated again (the same arrays)."""
        hit = self.inputs_done.get(self._key(shape, seed))
        return hit if hit is not None else self.wl.generate(shape, seed)

    def get(self, shape: dict, seed: int) -> tuple[dict, dict]:
        """``(inputs, reference)`` of (shape, seed): kept ahead, or computed now."""
        self.join()
        inputs = self.inputs(shape, seed)
        ref = self.refs_done.get(self._key(shape, seed))
        return inputs, ref if ref is not None else self.wl.reference(inputs, self.wl.attrs)


# -- classification --------------------------------------------------------------------------


class _Broken(Exception):
    """The child's results are missing or malformed (-> runtime_error)."""


class _Tampered(_Broken):
    """A file the child saved was changed afterwards: the candidate rewrote its evidence."""


def _load(workdir: Path, name: str, size: int, *, missing_ok: bool = False,
          digests: dict[str, str] | None = None) -> np.ndarray | None:
    """A float32 array of ``size`` elements saved by the child, read defensively: no symlinks,
    regular files only, bounded size (the child owned the directory).

    ``digests``: the child's report of the files it saved (``result["files"]``, the CPU
    child's). A file it does not list is treated as absent (the candidate may have planted
    it), and a listed file must still hold the bytes the child saved (the candidate may have
    rewritten it: :class:`_Tampered`). Raises :class:`_Broken`."""
    want = None
    if digests is not None:
        want = digests.get(name)
        if want is None:
            if missing_ok:
                return None
            raise _Broken(f"result file {name}: the child reported no such file")
    path = workdir / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if want is not None:  # the child saved it: someone removed it since
            raise _Tampered(f"result file {name} that the child saved is gone: removed after the call") from None
        if missing_ok:
            return None
        raise _Broken(f"result file {name} missing") from None
    except OSError as exc:
        raise _Broken(f"result file {name} unreadable: {exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > 4 * size + 4096:
            raise _Broken(f"result file {name} is not a regular file of the expected size")
        try:
            arr = np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError, MemoryError) as exc:  # e.g. a header claiming 2**40 elements
            raise _Broken(f"result file {name} unreadable: {exc}") from None
    if arr.dtype != np.float32 or arr.size != size:
        raise _Broken(f"result file {name} has dtype {arr.dtype} shape {arr.shape}, expected {size} float32")
    arr = np.ascontiguousarray(arr).reshape(-1)
    if want is not None and array_digest(arr) != want:
        raise _Tampered(f"result file {name} no longer holds what the child saved: rewritten after the call")
    return arr


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _guard_hits(buf: np.ndarray, n: int, layout: GuardLayout = _SENTINELS_ONLY) -> tuple[int, int]:
    """Changed sentinel elements (before, after) of a ``[head | n | tail]`` buffer of ``layout``."""
    g = layout.head
    before = int(np.count_nonzero(buf[:g].view(np.uint32) != GUARD_BITS))
    after = int(np.count_nonzero(buf[g + n :].view(np.uint32) != GUARD_BITS))
    return before, after


def _check_outputs(
    wl: Workload, shape: dict, prefix: str, workdir: Path, ref: dict[str, np.ndarray] | None,
    files: dict[str, str] | None = None, same_as: dict[str, np.ndarray] | None = None,
    layout: GuardLayout = _SENTINELS_ONLY,
) -> tuple[Outcome | None, str, dict[str, np.ndarray], float, float]:
    """Guards, late writes and accuracy of one call's outputs (files ``<prefix>_<out>.npy``:
    whole guarded buffers of ``layout``, checked against the child's ``files`` digests where
    it reports them, see :func:`_load`). With ``ref=None`` (a reference that cannot judge,
    :mod:`kernels.evaluation.reference_check`) only the rules are checked (guards, late writes), not the
    values.

    ``same_as``: outputs of an earlier call on the same inputs that passed; an output
    bit-identical to its one there is not compared with ``ref`` again (its errors are that
    call's, and it adds 0 to the errors returned here).

    Returns (verdict or None if passed, reason, outputs, max_abs_error, max_rel_error).
    """
    outs: dict[str, np.ndarray] = {}
    max_abs = max_rel = 0.0
    g = layout.head
    for name, oshape in wl.output_shapes(shape).items():
        n = int(np.prod(oshape))
        size = layout.size(n)
        buf = _load(workdir, f"{prefix}_{name}.npy", size, digests=files)
        before, after = _guard_hits(buf, n, layout)
        if after:
            return Outcome.invalid, (f"wrote past the end of output '{name}' ({after} of {layout.tail(n)} guard "
                                     "elements changed)"), outs, math.nan, math.nan
        if before:
            return Outcome.invalid, (f"wrote before the start of output '{name}' ({before} of {g} guard elements "
                                     "changed)"), outs, math.nan, math.nan
        late = _load(workdir, f"{prefix}_late_{name}.npy", size, missing_ok=True, digests=files)
        if late is not None and not _same_bits(late, buf):
            changed = int(np.count_nonzero(late.view(np.uint32) != buf.view(np.uint32)))
            return Outcome.invalid, (
                f"output '{name}' changed after the call returned ({changed} elements): work continued "
                "after the return (e.g. a thread that outlives the call)"
            ), outs, math.nan, math.nan
        y = buf[g : g + n].reshape(oshape)
        outs[name] = y
        if ref is None:
            continue
        if same_as is not None and name in same_as and _same_bits(y, same_as[name]):
            continue
        bad = ~np.isfinite(y)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            return Outcome.wrong_result, (
                f"output '{name}' has {int(bad.sum())} NaN/inf elements of {n} (first at {first}; outputs are "
                "NaN-filled before every call, so these were not written before the call returned)"
            ), outs, math.nan, math.nan
        a, r = wl.errors(y, ref[name])
        max_abs, max_rel = max(max_abs, a), max(max_rel, r)
        if not r <= wl.tolerance:
            where = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(y - ref[name])), oshape))
            return Outcome.wrong_result, f"output '{name}': max_rel_error {r:.3g} > tolerance {wl.tolerance:g} (worst at {where})", outs, max_abs, max_rel
    return None, "", outs, max_abs, max_rel


def _check_inputs(inputs: dict[str, np.ndarray], workdir: Path, name_fmt: str,
                  reported: dict | None = None, digests: dict[str, str] | None = None,
                  files: dict[str, str] | None = None, layout: GuardLayout = _SENTINELS_ONLY) -> str:
    """'' if every input (guards included) is unchanged, else what changed. Saved inputs are
    whole guarded buffers of ``layout``.

    ``reported``: the child's check of this set, ``{input: [sha256 of the body after the
    calls, guard elements changed before it, after it]}`` (the CPU child's
    ``result["inputs"]``), judged against ``digests`` (this process's, of ``inputs``); a
    changed input's count comes from the buffer the child saved under ``name_fmt``, when it
    did. Without a report, the inputs the child saved (``name_fmt``, the CUDA child's files)
    are compared here."""
    g = layout.head
    for name, arr in inputs.items():
        n, after = arr.size, None
        if reported is not None:
            entry = reported.get(name)
            if not (isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str)
                    and all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c for c in entry[1:])):
                raise _Broken(f"the check of input '{name}' is missing or malformed")
            digest, before_hit, after_hit = entry
            changed = digest != (digests or {}).get(name)
        else:
            after = _load(workdir, name_fmt.format(inp=name), layout.size(n))
            before_hit, after_hit = _guard_hits(after, n, layout)
            changed = not _same_bits(after[g : g + n], arr.reshape(-1))
        if before_hit or after_hit:
            return f"wrote outside input '{name}' ({before_hit} guard elements before it, {after_hit} after it changed)"
        if changed:
            if after is None:
                after = _load(workdir, name_fmt.format(inp=name), layout.size(n), missing_ok=True, digests=files)
            if after is None:
                return f"modified input '{name}' (its digest after the calls differs)"
            count = int(np.count_nonzero(after[g : g + n].view(np.uint32) != arr.reshape(-1).view(np.uint32)))
            return f"modified input '{name}' ({count} elements changed)"
    return ""


def _record(kind: str, shape: dict, seed: int) -> dict:
    return {"kind": kind, "label": shape_label(shape), "shape": shape, "seed": seed,
            "max_abs_error": None, "max_rel_error": None, "passed": False, "reason": "", "verdict": None}


def _unusable_reference(wl: Workload, record: dict, inputs: dict[str, np.ndarray], ref: dict[str, np.ndarray],
                        calls: list[tuple[str, str]], workdir: Path, files: dict[str, str] | None,
                        layout: GuardLayout = _SENTINELS_ONLY) -> bool:
    """Judge ``record`` without values when its reference cannot judge a candidate
    (:func:`kernels.evaluation.reference_check.reference_problems`); False (nothing done) when it can.

    ``calls``: ``(file prefix, what)`` of the calls on these inputs, still checked for the
    rules (guards, late writes: ``invalid`` stays the candidate's). Otherwise the record is
    ``invalid_input``, or, for a stored failure case, skipped (``skipped: True``, verdict
    None): a case kept earlier whose reference is bad says nothing about this candidate.
    ``record["reference"]`` lists the problems (:class:`~kernels.evaluation.reference_check.ReferenceProblem`
    fields)."""
    problems = reference_problems(ref, wl.reference_bound(inputs))
    if not problems:
        return False
    record["reference"] = [dict(vars(p)) for p in problems]
    for prefix, what in calls:
        verdict, why, *_ = _check_outputs(wl, record["shape"], prefix, workdir, None, files, layout=layout)
        if verdict:
            record.update(reason=f"{what}: {why}", verdict=verdict)
            return True
    if record["kind"] == "regression":
        record.update(skipped=True, reason=f"stored case skipped: {describe(problems)}")
    else:
        record.update(reason=describe(problems), verdict=Outcome.invalid_input)
    return True


def _validate_case(wl: Workload, case: dict, workdir: Path, expected: Expected, checks: dict,
                   files: dict[str, str] | None = None, layout: GuardLayout = _SENTINELS_ONLY) -> dict:
    shape, cid = case["shape"], case["id"]
    inputs, ref = expected.get(shape, case["seed"])
    record = _record(case.get("kind", "validation"), shape, case["seed"])
    reported = checks.get(f"{cid}_after")
    why = _check_inputs(inputs, workdir, f"{cid}_after_{{inp}}.npy", reported,
                        expected.digests(shape, case["seed"]) if reported is not None else None, files, layout)
    if why:
        record.update(reason=why, verdict=Outcome.invalid)
        return record
    if _unusable_reference(wl, record, inputs, ref, [(f"{cid}_call1", "first call"), (f"{cid}_call2", "second call")],
                           workdir, files, layout):
        return record
    v1, why1, y1, a1, r1 = _check_outputs(wl, shape, f"{cid}_call1", workdir, ref, files, layout=layout)
    record.update(max_abs_error=a1, max_rel_error=r1)
    if v1:
        record.update(reason=f"first call: {why1}", verdict=v1)
        return record
    v2, why2, y2, a2, r2 = _check_outputs(wl, shape, f"{cid}_call2", workdir, ref, files, same_as=y1, layout=layout)
    if v2:
        record.update(reason=f"second call (repeatability): {why2}", verdict=v2)
        return record
    record.update(max_abs_error=max(a1, a2), max_rel_error=max(r1, r2))
    for name in y1:
        if not _same_bits(y1[name], y2[name]):
            _, diff = wl.errors(y1[name], y2[name].astype(np.float64))
            record["repeat_max_rel_diff"] = diff
            if not diff <= wl.tolerance:
                record.update(reason=f"repeated calls disagree on '{name}' (max rel diff {diff:.3g})", verdict=Outcome.wrong_result)
                return record
    record["passed"] = True
    return record


def _salted(inputs: dict[str, np.ndarray], swaps: dict) -> dict[str, np.ndarray]:
    """``inputs`` with the timing child's swaps applied (``{input: [i, j]}``, flat indices)
    to copies: what the last timed call saw. Raises :class:`_Broken` for a malformed swap."""
    out = dict(inputs)
    if not isinstance(swaps, dict):
        raise _Broken("timing data: the last call's salt is not an object")
    for name, pair in swaps.items():
        arr = inputs.get(name)
        ok = (arr is not None and isinstance(pair, list) and len(pair) == 2
              and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < arr.size for v in pair))
        if not ok:
            raise _Broken(f"timing data: the last call's salt of '{name}' is malformed")
        flat = np.array(arr, copy=True).reshape(-1)
        flat[pair[0]], flat[pair[1]] = flat[pair[1]], flat[pair[0]]
        out[name] = flat.reshape(arr.shape)
    return out


def _validate_timed(wl: Workload, item: dict, last_set: int, fresh_slot: int, workdir: Path,
                    expected: Expected, last_salt: dict | None = None, checks: dict | None = None,
                    unwritten: tuple[int, int] | None = None, files: dict[str, str] | None = None,
                    pick: dict | None = None, layout: GuardLayout = _SENTINELS_ONLY) -> list[dict]:
    """Records of the last timed call (its reference from the inputs as the call saw them:
    the set with ``last_salt``'s swaps), of the fresh-contents call after timing and, where
    the child drew one (``pick``: ``{call, set, salt}``, files ``<timed>_pick_<o>.npy``), of a
    warm-up or timed call drawn at random.
    ``unwritten``: (calls of the timing phase that left a sampled output element NaN, calls)."""
    shape, tid = item["shape"], item["id"]
    expected.join()
    sets = [expected.inputs(shape, s) for s in item["seeds"]]
    fresh = expected.inputs(shape, item["fresh_seed"])
    last = _record("timed", shape, item["seeds"][last_set])
    again = _record("fresh", shape, item["fresh_seed"])
    for j, inputs in enumerate(sets):
        seed = item["fresh_seed"] if j == fresh_slot else item["seeds"][j]
        reported = (checks or {}).get(f"{tid}_after{j}")
        why = _check_inputs(fresh if j == fresh_slot else inputs, workdir, f"{tid}_after{j}_{{inp}}.npy", reported,
                            expected.digests(shape, seed) if reported is not None else None, files, layout)
        if why:
            last.update(reason=f"during timing: {why}", verdict=Outcome.invalid)
            return [last]
    if unwritten and unwritten[0]:
        last.update(reason=f"{unwritten[0]} of {unwritten[1]} calls while timing left output elements NaN (not "
                           "written): the timings include calls that skipped the work", verdict=Outcome.wrong_result)
        return [last]

    def salted_ref(j: int, swaps: dict) -> dict[str, np.ndarray]:
        # The swaps move values within a row: the bound of the set's own inputs holds.
        """Reference of set ``j`` as a call saw it, with ``swaps`` applied."""
        if not swaps:
            return expected.get(shape, item["seeds"][j])[1]
        salted = _salted(sets[j], swaps)
        if wl.salted_reference is None:
            return wl.reference(salted, wl.attrs)
        return wl.salted_reference(salted, expected.get(shape, item["seeds"][j])[1], swaps, wl.attrs)

    last_ref = salted_ref(last_set, last_salt or {})
    checked = [
        (last, f"{tid}_last", sets[last_set], last_ref, "last timed call"),
        (again, f"{tid}_fresh", fresh, expected.get(shape, item["fresh_seed"])[1],
         "call on fresh contents in the timed buffers"),
    ]
    if pick is not None:
        picked = _record("picked", shape, item["seeds"][pick["set"]])
        checked.append((picked, f"{tid}_pick", sets[pick["set"]], salted_ref(pick["set"], pick["salt"]),
                        f"call {pick['call']} of the timing phase, drawn at random"))
    for rec, prefix, inputs, ref, what in checked:
        if _unusable_reference(wl, rec, inputs, ref, [(prefix, what)], workdir, files, layout):
            if rec["verdict"] == Outcome.invalid_input:
                rec["reason"] = f"{what}: {rec['reason']}"
            continue
        verdict, why, _, a, r = _check_outputs(wl, shape, prefix, workdir, ref, files, layout=layout)
        rec.update(max_abs_error=a, max_rel_error=r)
        if verdict:
            rec.update(reason=f"{what}: {why}", verdict=verdict)
        else:
            rec["passed"] = True
    return [rec for rec, *_ in checked]


def _parse_result(run: ChildRun, timed: list[dict]) -> tuple[dict[str, dict], dict[str, dict], dict[str, str] | None]:
    """(timing data per timed item id, the child's input checks per set: ``result["inputs"]``,
    empty where the child saved its inputs instead, the digests of the files it saved:
    ``result["files"]``, None where it reports none). Raises :class:`_Broken`."""
    try:
        result = json.loads(run.result.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _Broken(f"result pipe held garbage ({len(run.result)} bytes), not one JSON object") from None
    if not isinstance(result, dict):
        raise _Broken("result is not a JSON object")
    if result.get("ok") is not True:
        tb = result.get("traceback") or ""
        raise _Broken(f"child reported an error: {result.get('error')}" + (f"\n{tb}" if tb else ""))
    out = result.get("timed")
    if not isinstance(out, dict):
        raise _Broken("result lacks timing data")

    def index_ok(v: Any, n: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n

    for item in timed:
        t = out.get(item["id"])
        ok = (
            isinstance(t, dict)
            and isinstance(t.get("samples_ms"), list)
            and len(t["samples_ms"]) > 0
            and all(isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s >= 0 for s in t["samples_ms"])
            and index_ok(t.get("last_set"), len(item["seeds"]))
            and index_ok(t.get("fresh_slot"), len(item["seeds"]))
            and all(k not in t or t[k] is None and k == "first_call_cpu_ms"
                    or (isinstance(t[k], (int, float)) and not isinstance(t[k], bool) and math.isfinite(t[k])
                        and t[k] >= 0) for k in ("first_call_ms", "first_call_cpu_ms"))
            and ("unwritten" not in t or (index_ok(t.get("calls"), 2**62) and index_ok(t["unwritten"], t["calls"] + 1)))
            and ("pick" not in t or (isinstance(t["pick"], dict) and isinstance(t["pick"].get("salt"), dict)
                                     and index_ok(t["pick"].get("set"), len(item["seeds"]))
                                     and index_ok(t["pick"].get("call"), 2**62)))
        )
        if not ok:
            raise _Broken(f"timing data for {shape_label(item['shape'])} is missing or malformed")
    checks = result.get("inputs", {})
    if not (isinstance(checks, dict) and all(isinstance(v, dict) for v in checks.values())):
        raise _Broken("the input checks are malformed")
    files = result.get("files")
    if files is not None and not (isinstance(files, dict) and all(isinstance(v, str) for v in files.values())):
        raise _Broken("the digests of the saved files are malformed")
    return out, checks, files


def _reported_flush(run: ChildRun) -> str | None:
    """The cache flush the timing child says it used (fingerprint only; never trusted for
    a verdict), or None."""
    try:
        flush = json.loads(run.result.decode("utf-8")).get("flush")
    except (UnicodeDecodeError, ValueError, AttributeError):
        return None
    return flush[:200] if isinstance(flush, str) else None


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _roofline_pct(flops: float, nbytes: float, seconds: float, limits: dict) -> float | None:
    """Achieved GFLOP/s over min(FMA peak, intensity * copy bandwidth), in %; None if unknown."""
    copy, peak = limits.get("copy_gbps"), limits.get("fma_gflops")
    if not copy or not peak or seconds <= 0 or nbytes <= 0:
        return None
    attainable = min(peak, flops / nbytes * copy)  # GFLOP/s
    if attainable <= 0:  # no FLOPs counted: a pure data-movement workload
        return 100.0 * (nbytes / seconds / 1e9) / copy
    return 100.0 * (flops / seconds / 1e9) / attainable


def _metrics(wl: Workload, timed: list[dict], result: dict, cases: list[dict], limits: dict) -> tuple[dict, dict]:
    metrics: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    tot = {"median": 0.0, "iqr": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    total_bytes = total_flops = 0.0
    firsts: list[tuple[str, float | None, float, float | None]] = []
    for item in timed:
        label = shape_label(item["shape"])
        s = [float(x) for x in result[item["id"]]["samples_ms"]]
        samples[label] = s
        summ = stats.summarize(s)
        for k in tot:
            tot[k] += summ[k]
        metrics[f"latency_ms[{label}]"] = summ["median"]
        firsts.append((label, result[item["id"]].get("first_call_ms"), summ["median"],
                       result[item["id"]].get("first_call_cpu_ms")))
        nbytes, flops = wl.bytes(item["shape"]), wl.flops(item["shape"])
        if summ["median"] > 0:
            sec = summ["median"] * 1e-3
            metrics[f"gbps[{label}]"] = nbytes / sec / 1e9
            metrics[f"gflops[{label}]"] = flops / sec / 1e9
            pct = _roofline_pct(flops, nbytes, sec, limits)
            if pct is not None:
                metrics[f"roofline_pct[{label}]"] = pct
        total_bytes += nbytes
        total_flops += flops
    if timed:  # nothing timed (validation decided): no latency at all, not 0 ms
        metrics["latency_ms"] = tot["median"]
        metrics["latency_iqr_ms"] = tot["iqr"]
        metrics["latency_ci_low_ms"] = tot["ci_low"]
        metrics["latency_ci_high_ms"] = tot["ci_high"]
    metrics.update(first_call_metrics(firsts))  # beside latency_ms, never in it
    if tot["median"] > 0:
        sec = tot["median"] * 1e-3
        metrics["gbps"] = total_bytes / sec / 1e9
        metrics["gflops"] = total_flops / sec / 1e9
        pct = _roofline_pct(total_flops, total_bytes, sec, limits)
        if pct is not None:
            metrics["roofline_pct"] = pct
    errs = [c for c in cases if c["max_abs_error"] is not None and math.isfinite(c["max_abs_error"])]
    if errs:
        metrics["max_abs_error"] = max(c["max_abs_error"] for c in errs)
        metrics["max_rel_error"] = max(c["max_rel_error"] for c in errs)
    return metrics, samples


def _run_failure(run: ChildRun, timeout_s: float) -> tuple[Outcome, str] | None:
    """How a child run failed as a process (disk quota, timeout, signal, exit code, silence),
    or None. A death by ``SIGSEGV``/``SIGBUS`` gives the fault helper's line where the child's
    stderr has one (:func:`kernels.sandbox.guard_pages.fault_report`: which buffer, which element)."""
    if run.disk:
        return Outcome.runtime_error, f"child killed: it {run.disk}"
    if run.timed_out:
        return Outcome.timeout, f"no result within {timeout_s:g} s wall clock; process group killed"
    rc = run.returncode
    if rc is not None and rc < 0:
        fault = fault_report(run.stderr) if -rc in (signal.SIGSEGV, signal.SIGBUS) else None
        return Outcome.runtime_error, f"child killed by {_signal_name(rc)}" + (f": {fault}" if fault else "")
    if rc != 0:
        return Outcome.runtime_error, f"child exited with code {rc}"
    if not run.result:
        return Outcome.runtime_error, "child exited with code 0 without reporting a result"
    if not run.authentic:
        return Outcome.runtime_error, ("the result on the pipe is not the child's own report (its authentication "
                                       "code does not match): written or relayed by the candidate")
    return None


def _judge(wl: Workload, cases_plan: list[dict], timed: list[dict], run: ChildRun | list[ChildRun],
           workdir: Path | tuple[Path, Path], timeout_s: float, limits: dict | None = None,
           expected: Expected | None = None, validated: list[dict] | None = None, input_report: bool = False,
           layout: GuardLayout = _SENTINELS_ONLY):
    """The one place that maps child runs to an Outcome.

    Args:
        run: one child run that did everything, or the runs of the phases in order
            (validation, then timing); the first run that failed as a process decides, and
            the timing results come from the last run.
        workdir: the child's private directory, or (validation child's, timing child's).
        expected: inputs and references computed ahead (:class:`Expected`); default: computed
            here.
        validated: records of ``cases_plan`` already judged (by an earlier call on the
            validation run alone), used instead of judging those cases again.
        input_report: the child reports its input digests and those of the files it saved
            (the CPU child): a set without its input check or a run without the file
            digests is a ``runtime_error``, a file that no longer matches its digest
            ``invalid``.
        layout: where the sentinels of the buffers the children saved lie (the one the
            request gave them; default the sentinel-only layout of the CUDA child).

    Returns (status, reason, cases, metrics, samples_ms).
    """
    limits = limits or {}
    expected = expected or Expected(wl)
    runs = list(run) if isinstance(run, (list, tuple)) else [run]
    for r in runs:
        failure = _run_failure(r, timeout_s)
        if failure:
            return (*failure, [], {}, {})
    try:
        result: dict[str, dict] = {}
        checks: dict[str, dict] = {}
        files: dict[str, str] | None = {} if input_report else None
        for i, r in enumerate(runs):
            timing, reported, saved = _parse_result(r, timed if i == len(runs) - 1 else [])
            result.update(timing)
            checks.update(reported)
            if input_report:
                if saved is None:
                    raise _Broken("the child reported no digests of the files it saved")
                files.update(saved)  # file names differ between the two children
        if input_report:  # a result without the report (e.g. forged through the pipe) is broken
            wanted = [f"{c['id']}_after" for c in cases_plan if validated is None]
            wanted += [f"{t['id']}_after{j}" for t in timed for j in range(len(t["seeds"]))]
            missing = [w for w in wanted if w not in checks]
            if missing:
                raise _Broken(f"the child reported no input check for {', '.join(missing[:3])}")
            missing = [shape_label(t["shape"]) for t in timed if not {"unwritten", "pick"} <= set(result[t["id"]])]
            if missing:
                raise _Broken(f"the child reported no check of unwritten outputs or no drawn call for "
                              f"{', '.join(missing[:3])}")
        vdir, tdir = workdir if isinstance(workdir, tuple) else (workdir, workdir)
        cases = (list(validated) if validated is not None
                 else [_validate_case(wl, c, vdir, expected, checks, files, layout) for c in cases_plan])
        for t in timed:
            r = result[t["id"]]
            cases += _validate_timed(wl, t, r["last_set"], r["fresh_slot"], tdir, expected, r.get("last_salt"),
                                     checks, (r["unwritten"], r["calls"]) if "unwritten" in r else None, files,
                                     r.get("pick"), layout)
    except _Tampered as exc:
        return Outcome.invalid, str(exc), [], {}, {}
    except _Broken as exc:
        return Outcome.runtime_error, str(exc), [], {}, {}
    metrics, samples = _metrics(wl, timed, result, cases, limits)
    # Breaking a rule outranks wrong; both are the candidate's, judged on usable references,
    # and outrank cases no candidate could pass (the workload's inputs, not the candidate).
    for verdict in (Outcome.invalid, Outcome.wrong_result, Outcome.invalid_input):
        failed = [c for c in cases if c["verdict"] == verdict]
        if failed:
            reasons = "; ".join(f"{c['kind']} {c['label']} seed {c['seed']}: {c['reason']}" for c in failed[:5])
            if verdict is Outcome.invalid_input:
                return verdict, (f"{len(failed)} of {len(cases)} cases cannot be judged (invalid input of the "
                                 f"workload, not the candidate's failure): {reasons}. To fix: "
                                 f"{fix_hint(wl.name, [c['label'] for c in failed])}"), cases, metrics, samples
            return verdict, f"{len(failed)} of {len(cases)} cases failed: {reasons}", cases, metrics, samples
    for item in timed:
        label = shape_label(item["shape"])
        for key, unit, limit in (("gbps", "GB/s", limits.get("gbps")), ("gflops", "GFLOP/s", limits.get("gflops"))):
            value = metrics.get(f"{key}[{label}]", 0.0)
            if limit and value > limit:
                return Outcome.invalid, (
                    f"measured {value:.1f} {unit} at {label}, above the physical limit {limit:.1f} {unit} "
                    f"({limits.get('source', '')}; margin x{limits.get('margin', 1):g}): timing cannot be trusted"
                ), cases, metrics, samples
    skipped = [c for c in cases if c.get("skipped")]
    if skipped:
        return Outcome.ok, (f"all validation cases passed ({len(skipped)} stored case(s) skipped: their float64 "
                            "reference is unusable: see the reference check in the log)"), cases, metrics, samples
    return Outcome.ok, "all validation cases passed", cases, metrics, samples


def reference_notes(wl: Workload, cases: list[dict]) -> str | None:
    """The ``== reference check ==`` log section: every case whose float64 reference could
    not judge the candidate (shape, seed, output, NaN/inf count, largest magnitude against
    the bound) and how to fix the workload's inputs; None when every reference was usable."""
    bad = [c for c in cases if c.get("reference")]
    if not bad:
        return None
    lines = [f"{c['kind']} {c['label']} seed {c['seed']}"
             f"{' (stored case, skipped)' if c.get('skipped') else ''}: {describe(ReferenceProblem(**p) for p in c['reference'])}"
             for c in bad]
    lines.append(f"to fix: {fix_hint(wl.name, [c['label'] for c in bad])}")
    return "== reference check ==\n" + "\n".join(lines)
