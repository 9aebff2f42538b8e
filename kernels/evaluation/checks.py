"""The checks of what a sandbox child saved: files read defensively (:func:`load_saved`),
outputs against the reference and their sentinels (:func:`check_outputs`), inputs unchanged
(:func:`check_inputs`), and one validation case or timed call judged (:func:`validate_case`,
:func:`validate_timed`)."""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path

import numpy as np

from kernels.evaluation.cases import SENTINELS_ONLY, Expected
from kernels.evaluation.reference_check import describe, reference_problems
from kernels.hashing import array_digest
from kernels.outcome import Outcome
from kernels.sandbox.guard_pages import GUARD_BITS, GuardLayout
from kernels.workloads import Workload, shape_label


class Broken(Exception):
    """The child's results are missing or malformed (-> runtime_error)."""


class Tampered(Broken):
    """A file the child saved was changed afterwards: the candidate rewrote its evidence."""


def load_saved(workdir: Path, name: str, size: int, *, missing_ok: bool = False,
          digests: dict[str, str] | None = None) -> np.ndarray | None:
    """A float32 array of ``size`` elements saved by the child, read defensively: no symlinks,
    regular files only, bounded size (the child owned the directory).

    ``digests``: the child's report of the files it saved (``result["files"]``, the CPU
    child's). A file it does not list is treated as absent (the candidate may have planted
    it), and a listed file must still hold the bytes the child saved (the candidate may have
    rewritten it: :class:`Tampered`). Raises :class:`Broken`."""
    want = None
    if digests is not None:
        want = digests.get(name)
        if want is None:
            if missing_ok:
                return None
            raise Broken(f"result file {name}: the child reported no such file")
    path = workdir / name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if want is not None:  # the child saved it: someone removed it since
            raise Tampered(f"result file {name} that the child saved is gone: removed after the call") from None
        if missing_ok:
            return None
        raise Broken(f"result file {name} missing") from None
    except OSError as exc:
        raise Broken(f"result file {name} unreadable: {exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > 4 * size + 4096:
            raise Broken(f"result file {name} is not a regular file of the expected size")
        try:
            arr = np.load(f, allow_pickle=False)
        except (OSError, ValueError, EOFError, MemoryError) as exc:  # e.g. a header claiming 2**40 elements
            raise Broken(f"result file {name} unreadable: {exc}") from None
    if arr.dtype != np.float32 or arr.size != size:
        raise Broken(f"result file {name} has dtype {arr.dtype} shape {arr.shape}, expected {size} float32")
    arr = np.ascontiguousarray(arr).reshape(-1)
    if want is not None and array_digest(arr) != want:
        raise Tampered(f"result file {name} no longer holds what the child saved: rewritten after the call")
    return arr


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _guard_hits(buf: np.ndarray, n: int, layout: GuardLayout = SENTINELS_ONLY) -> tuple[int, int]:
    """Changed sentinel elements (before, after) of a ``[head | n | tail]`` buffer of ``layout``."""
    g = layout.head
    before = int(np.count_nonzero(buf[:g].view(np.uint32) != GUARD_BITS))
    after = int(np.count_nonzero(buf[g + n :].view(np.uint32) != GUARD_BITS))
    return before, after


def check_outputs(
    wl: Workload, shape: dict, prefix: str, workdir: Path, ref: dict[str, np.ndarray] | None,
    files: dict[str, str] | None = None, same_as: dict[str, np.ndarray] | None = None,
    layout: GuardLayout = SENTINELS_ONLY,
) -> tuple[Outcome | None, str, dict[str, np.ndarray], float, float]:
    """Guards, late writes and accuracy of one call's outputs (files ``<prefix>_<out>.npy``:
    whole guarded buffers of ``layout``, checked against the child's ``files`` digests where
    it reports them, see :func:`load_saved`). With ``ref=None`` (a reference that cannot judge,
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
        buf = load_saved(workdir, f"{prefix}_{name}.npy", size, digests=files)
        before, after = _guard_hits(buf, n, layout)
        if after:
            return Outcome.invalid, (f"wrote past the end of output '{name}' ({after} of {layout.tail(n)} guard "
                                     "elements changed)"), outs, math.nan, math.nan
        if before:
            return Outcome.invalid, (f"wrote before the start of output '{name}' ({before} of {g} guard elements "
                                     "changed)"), outs, math.nan, math.nan
        late = load_saved(workdir, f"{prefix}_late_{name}.npy", size, missing_ok=True, digests=files)
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


def check_inputs(inputs: dict[str, np.ndarray], workdir: Path, name_fmt: str,
                  reported: dict | None = None, digests: dict[str, str] | None = None,
                  files: dict[str, str] | None = None, layout: GuardLayout = SENTINELS_ONLY) -> str:
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
                raise Broken(f"the check of input '{name}' is missing or malformed")
            digest, before_hit, after_hit = entry
            changed = digest != (digests or {}).get(name)
        else:
            after = load_saved(workdir, name_fmt.format(inp=name), layout.size(n))
            before_hit, after_hit = _guard_hits(after, n, layout)
            changed = not _same_bits(after[g : g + n], arr.reshape(-1))
        if before_hit or after_hit:
            return f"wrote outside input '{name}' ({before_hit} guard elements before it, {after_hit} after it changed)"
        if changed:
            if after is None:
                after = load_saved(workdir, name_fmt.format(inp=name), layout.size(n), missing_ok=True, digests=files)
            if after is None:
                return f"modified input '{name}' (its digest after the calls differs)"
            count = int(np.count_nonzero(after[g : g + n].view(np.uint32) != arr.reshape(-1).view(np.uint32)))
            return f"modified input '{name}' ({count} elements changed)"
    return ""


def case_record(kind: str, shape: dict, seed: int) -> dict:
    return {"kind": kind, "label": shape_label(shape), "shape": shape, "seed": seed,
            "max_abs_error": None, "max_rel_error": None, "passed": False, "reason": "", "verdict": None}


def unusable_reference(wl: Workload, record: dict, inputs: dict[str, np.ndarray], ref: dict[str, np.ndarray],
                        calls: list[tuple[str, str]], workdir: Path, files: dict[str, str] | None,
                        layout: GuardLayout = SENTINELS_ONLY) -> bool:
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
        verdict, why, *_ = check_outputs(wl, record["shape"], prefix, workdir, None, files, layout=layout)
        if verdict:
            record.update(reason=f"{what}: {why}", verdict=verdict)
            return True
    if record["kind"] == "regression":
        record.update(skipped=True, reason=f"stored case skipped: {describe(problems)}")
    else:
        record.update(reason=describe(problems), verdict=Outcome.invalid_input)
    return True


def validate_case(wl: Workload, case: dict, workdir: Path, expected: Expected, checks: dict,
                   files: dict[str, str] | None = None, layout: GuardLayout = SENTINELS_ONLY) -> dict:
    shape, cid = case["shape"], case["id"]
    inputs, ref = expected.get(shape, case["seed"])
    record = case_record(case.get("kind", "validation"), shape, case["seed"])
    reported = checks.get(f"{cid}_after")
    why = check_inputs(inputs, workdir, f"{cid}_after_{{inp}}.npy", reported,
                        expected.digests(shape, case["seed"]) if reported is not None else None, files, layout)
    if why:
        record.update(reason=why, verdict=Outcome.invalid)
        return record
    if unusable_reference(wl, record, inputs, ref, [(f"{cid}_call1", "first call"), (f"{cid}_call2", "second call")],
                           workdir, files, layout):
        return record
    v1, why1, y1, a1, r1 = check_outputs(wl, shape, f"{cid}_call1", workdir, ref, files, layout=layout)
    record.update(max_abs_error=a1, max_rel_error=r1)
    if v1:
        record.update(reason=f"first call: {why1}", verdict=v1)
        return record
    v2, why2, y2, a2, r2 = check_outputs(wl, shape, f"{cid}_call2", workdir, ref, files, same_as=y1, layout=layout)
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


def salted_inputs(inputs: dict[str, np.ndarray], swaps: dict) -> dict[str, np.ndarray]:
    """``inputs`` with the timing child's swaps applied (``{input: [i, j]}``, flat indices)
    to copies: what the last timed call saw. Raises :class:`Broken` for a malformed swap."""
    out = dict(inputs)
    if not isinstance(swaps, dict):
        raise Broken("timing data: the last call's salt is not an object")
    for name, pair in swaps.items():
        arr = inputs.get(name)
        ok = (arr is not None and isinstance(pair, list) and len(pair) == 2
              and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v < arr.size for v in pair))
        if not ok:
            raise Broken(f"timing data: the last call's salt of '{name}' is malformed")
        flat = np.array(arr, copy=True).reshape(-1)
        flat[pair[0]], flat[pair[1]] = flat[pair[1]], flat[pair[0]]
        out[name] = flat.reshape(arr.shape)
    return out


def validate_timed(wl: Workload, item: dict, last_set: int, fresh_slot: int, workdir: Path,
                    expected: Expected, last_salt: dict | None = None, checks: dict | None = None,
                    unwritten: tuple[int, int] | None = None, files: dict[str, str] | None = None,
                    pick: dict | None = None, layout: GuardLayout = SENTINELS_ONLY) -> list[dict]:
    """Records of the last timed call (its reference from the inputs as the call saw them:
    the set with ``last_salt``'s swaps), of the fresh-contents call after timing and, where
    the child drew one (``pick``: ``{call, set, salt}``, files ``<timed>_pick_<o>.npy``), of a
    warm-up or timed call drawn at random.
    ``unwritten``: (calls of the timing phase that left a sampled output element NaN, calls)."""
    shape, tid = item["shape"], item["id"]
    expected.join()
    sets = [expected.inputs(shape, s) for s in item["seeds"]]
    fresh = expected.inputs(shape, item["fresh_seed"])
    last = case_record("timed", shape, item["seeds"][last_set])
    again = case_record("fresh", shape, item["fresh_seed"])
    for j, inputs in enumerate(sets):
        seed = item["fresh_seed"] if j == fresh_slot else item["seeds"][j]
        reported = (checks or {}).get(f"{tid}_after{j}")
        why = check_inputs(fresh if j == fresh_slot else inputs, workdir, f"{tid}_after{j}_{{inp}}.npy", reported,
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
        salted = salted_inputs(sets[j], swaps)
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
        picked = case_record("picked", shape, item["seeds"][pick["set"]])
        checked.append((picked, f"{tid}_pick", sets[pick["set"]], salted_ref(pick["set"], pick["salt"]),
                        f"call {pick['call']} of the timing phase, drawn at random"))
    for rec, prefix, inputs, ref, what in checked:
        if unusable_reference(wl, rec, inputs, ref, [(prefix, what)], workdir, files, layout):
            if rec["verdict"] == Outcome.invalid_input:
                rec["reason"] = f"{what}: {rec['reason']}"
            continue
        verdict, why, _, a, r = check_outputs(wl, shape, prefix, workdir, ref, files, layout=layout)
        rec.update(max_abs_error=a, max_rel_error=r)
        if verdict:
            rec.update(reason=f"{what}: {why}", verdict=verdict)
        else:
            rec["passed"] = True
    return [rec for rec, *_ in checked]
