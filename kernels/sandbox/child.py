"""Runs inside the sandbox child: prepares buffers, locks down, calls and times the candidate.

Nothing here judges correctness: the trusted parent generates the inputs from (shape, seed)
(saved into this directory before the child starts; generated here when absent), keeps its
own copies, computes the reference and classifies. The child reports timing samples, the
unchanged-input checks and the digests of the files it saved on a dedicated pipe and leaves
raw outputs as ``.npy`` files in its private cwd.

Phases:

1. *Trusted* (before any candidate code): read the request, import everything, load (or
   generate) every input set and allocate every buffer (so nothing needs files outside the private
   directory later: after the privilege drop the interpreter's own directory may be
   unreadable).
2. *Lockdown*: :func:`kernels.sandbox.isolation.apply`; its report is written to the result pipe as
   the first line, before the candidate library is loaded, so the candidate cannot forge it.
3. *Candidate*: load the library, call, time; the result JSON follows on the pipe.

Buffers: every array the candidate sees is float32 in a mapping of its own
(:func:`kernels.sandbox.guard_pages.allocate`, layout :class:`kernels.sandbox.guard_pages.GuardLayout` from the
request)::

    [ PROT_NONE, 1 MiB | sentinels, >= 1024 | data, page-aligned | sentinels, >= 1024 | PROT_NONE, 1 MiB ]

The sentinels (bit pattern ``0xA5A5A5A5``) fill whole pages: on 4 KiB pages 1024 elements
before the data and 1024 to 2047 after it (up to the next page boundary); a small overrun
changes them and the parent counts the changes (``invalid``). Any access further out, up to
1 MiB (262,144 elements) before or after, hits an inaccessible page and faults at once: the
fault helper (:class:`kernels.sandbox.guard_pages.FaultReporter`, installed in the trusted phase,
every buffer registered by name as it is made) writes one stderr line naming the buffer and
the element, and the child dies by the signal (``runtime_error``). A request without
``guard_layout`` gets the sentinel-only layout ``[guard | data | guard]``.

Outputs are NaN-filled before every call. Input sets of validation cases are fresh per case;
timed calls rotate between the item's input sets (distinct buffers), and after timing one
more call runs on *fresh contents written into the same buffers* (same pointers), which a
kernel that caches by pointer or by call count gets wrong.

Files written (``<o>``: output names), each a whole guarded buffer (sentinels and data,
never the inaccessible pages):
  ``<case>_call1_<o>.npy``, ``<case>_call2_<o>.npy``  output right after each call returned
  ``<case>_call<n>_late_<o>.npy``                     only if the output changed afterwards
  ``<timed>_last_<o>.npy`` (+ ``_last_late_``)        output of the last timed call
  ``<timed>_fresh_<o>.npy`` (+ ``_fresh_late_``)      output of the fresh-contents call
  ``<timed>_pick_<o>.npy``                            output of one warm-up or timed call
                                                      drawn at random (``result["timed"][id]["pick"]``)

Inputs after the calls are reported as ``result["inputs"]``: ``{"<case>_after" or
"<timed>_after<j>": {input: [sha256 of the body (:func:`kernels.hashing.array_digest`), guard
elements changed before it, after it]}}``; the parent compares the digests with those of its
own copies (set ``j`` at ``fresh_slot`` holds the fresh contents). Only an input whose digest
differs from the one the request gives (or where the request gives none) is also saved, as
``<case>_after_<i>.npy`` / ``<timed>_after<j>_<i>.npy``, for the parent to count the changed
elements. Saving every input for the parent to compare cost more than the calls for large
inputs (24 MB: about 60 ms to write and 25 ms to read back, against 15 ms to digest).

Every file this process saves is created anew (``O_EXCL``, no links followed) and its digest
reported as ``result["files"]`` (``{file name: sha256}``): the candidate can rewrite files in
this directory, so the parent reads a file only if it still holds the bytes this process saved,
and ignores any file not reported. A result without these reports is a ``runtime_error``.

The result is signed (HMAC-SHA256 under the request's ``result_key``, a line of its own after
it), so a result the candidate writes to the pipe, or relays through a pipe of its own, is
refused. Like every report of this process (the timing samples too), these are still only as
trustworthy as the process, whose address space the candidate shares: code written to forge
reports from inside it (through the Python C API, or by finding the key in memory) can; the
sandbox protects the host from such a candidate, not the figures.
"""

from __future__ import annotations

import ctypes
import hashlib
import io
import json
import math
import os
import sys
import time
import traceback
from typing import NamedTuple

import numpy as np

from kernels.evaluation.timing import BenchSettings, Evictor, bench_run, make_flush, team_starter
from kernels.hashing import array_digest, result_mac
from kernels.sandbox import isolation
from kernels.sandbox.child_request import SAVED, request_workload, save_new
from kernels.sandbox.cuda_child import prepare as prepare_cuda
from kernels.sandbox.guard_pages import GUARD_BITS, FaultReporter, GuardLayout, allocate
from kernels.workloads import shape_label

_PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LATE_CHECK_DELAY_S = 0.02  # outputs are re-read at least this long after the last call
UNWRITTEN_SAMPLE = 64  # output elements per output checked for NaN after every timed-phase call


def as_layout(guard: GuardLayout | int) -> GuardLayout:
    """``guard`` as a layout: an int is the sentinel-only layout with that many elements."""
    return guard if isinstance(guard, GuardLayout) else GuardLayout(int(guard))


def guarded(n: int, guard: GuardLayout | int, fill: np.ndarray | None = None) -> np.ndarray:
    """A float32 buffer ``[head | n | tail]`` of layout ``guard`` (:func:`as_layout`):
    sentinels, middle NaN or ``fill``; inaccessible pages around it where the layout has them.

    Raises:
        OSError: the mapping failed (:func:`kernels.sandbox.guard_pages.allocate`).
    """
    layout = as_layout(guard)
    buf = allocate(n, layout)
    buf[layout.head : layout.head + n] = np.nan if fill is None else fill.reshape(-1)
    return buf


class Guarded(NamedTuple):
    """An array already in a guarded buffer (:func:`guarded`), e.g. read there from its file
    (:func:`load_guarded`)."""

    buf: np.ndarray  # float32 [head | body | tail]
    shape: tuple[int, ...]  # the body's


def load_guarded(fname: str, guard: GuardLayout | int) -> Guarded:
    """A float32 ``.npy`` file read straight into the body of a new guarded buffer: one copy,
    where loading the array and then copying it into the buffer made two (and faulted in
    twice the pages: 24 MB of timed inputs took 35 ms instead of 25).

    Raises:
        ValueError: the file does not hold a C-ordered float32 array, or is shorter than its
            header says.
        OSError: the mapping failed (:func:`kernels.sandbox.guard_pages.allocate`).
    """
    layout = as_layout(guard)
    with open(fname, "rb") as f:
        version = np.lib.format.read_magic(f)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, fortran_order, dtype = read_header(f)
        if dtype != np.float32 or fortran_order:
            raise ValueError(f"input file {fname} holds {dtype}{' (Fortran order)' if fortran_order else ''}, "
                             "not C-ordered float32")
        n = math.prod(shape)
        buf = allocate(n, layout)
        body = memoryview(buf[layout.head : layout.head + n]).cast("B")
        got = 0
        while got < len(body):
            step = f.readinto(body[got:])
            if not step:
                raise ValueError(f"input file {fname} ends after {got} of {len(body)} bytes")
            got += step
    return Guarded(buf, tuple(shape))


class _Io:
    """Guarded input and output buffers of one (shape, input set) with the call's args.

    ``inputs``: ``{name: array}`` (copied into new guarded buffers) or ``{name:
    Guarded}`` (the buffer is used as it is; its layout must be ``guard``). ``guard``: the
    :class:`~kernels.sandbox.guard_pages.GuardLayout` (an int: sentinels only, :func:`as_layout`).
    ``faults``: the fault helper every buffer made here (and every ``Guarded`` one) is
    registered with, named after its argument and ``label`` (e.g. ``validation case v0``;
    the outputs after ``out_label`` where given: a timed shape's sets share them)."""

    def __init__(self, workload, shape: dict, inputs: dict, guard: GuardLayout | int, outputs: dict | None = None,
                 label: str = "", faults: FaultReporter | None = None, out_label: str | None = None):
        self.layout = layout = as_layout(guard)
        self.guard = g = layout.head  # sentinel elements before every body
        self.inputs = {k: v.buf if isinstance(v, Guarded) else guarded(v.size, layout, v) for k, v in inputs.items()}
        self.in_sizes = {k: int(np.prod(v.shape)) for k, v in inputs.items()}
        self.rows = {k: int(v.shape[-1]) if len(v.shape) else 1 for k, v in inputs.items()}  # last-axis length
        self.sizes = {k: int(np.prod(s)) for k, s in workload.output_shapes(shape).items()}
        own = outputs is None
        self.outputs = outputs if outputs is not None else {k: guarded(n, layout) for k, n in self.sizes.items()}
        if faults is not None:
            of = f" of {label}" if label else ""
            out_of = of if out_label is None else f" of {out_label}"
            for k, buf in self.inputs.items():
                faults.register(buf, self.in_sizes[k], layout, k, f"input '{k}'{of}")
            for k, buf in self.outputs.items() if own else ():
                faults.register(buf, self.sizes[k], layout, k, f"output '{k}'{out_of}")
        self.args = []
        for a in workload.args:
            if a.kind == "in":
                self.args.append(self.inputs[a.name][g:].ctypes.data)
            elif a.kind == "out":
                self.args.append(self.outputs[a.name][g:].ctypes.data)
            elif a.kind == "int":
                self.args.append(int(shape[a.name]))
            else:
                self.args.append(float(workload.attrs[a.name]))

    def nan_outputs(self) -> None:
        g = self.guard
        for k, n in self.sizes.items():
            self.outputs[k][g : g + n] = np.nan

    def output_bodies(self) -> list[np.ndarray]:
        """Views of the outputs without their guards (what a call must write)."""
        g = self.guard
        return [self.outputs[k][g : g + n] for k, n in self.sizes.items()]

    def salt(self, rng: np.random.Generator) -> dict[str, list[int]]:
        """Swap two different values within one row (last axis) of every input: each timed
        call sees contents no earlier call saw, which a kernel that caches its output by a few
        input elements gets wrong, while row sums, norms and value ranges stay as generated.
        Returns ``{input: [i, j]}`` (flat indices) of the swaps made; :meth:`swap` undoes them."""
        g, swaps = self.guard, {}
        draws = rng.random((len(self.inputs), 5)).tolist()  # one draw per call: [i, 4 tries of j]
        for (k, buf), (u, *tries) in zip(self.inputs.items(), draws):
            size = self.in_sizes[k]
            if size < 2:
                continue
            body, width = buf[g : g + size], self.rows[k]
            i = int(u * size)
            start = i - i % width
            for t in tries:  # a value different from body[i] in the same row
                j = start + int(t * width)
                if body[j] != body[i]:
                    swaps[k] = [i, j]
                    break
        self.swap(swaps)
        return swaps

    def swap(self, swaps: dict[str, list[int]]) -> None:
        g = self.guard
        for k, (i, j) in swaps.items():
            body = self.inputs[k][g:]
            body[i], body[j] = body[j], body[i]

    def check_inputs(self, digests: dict | None, prefix: str) -> dict[str, list]:
        """Per input: ``[digest of the body, guard elements changed before it, after it]``;
        an input whose digest is not ``digests[input]`` is saved as ``<prefix>_<input>.npy``
        (whole guarded buffer) for the parent to count what changed."""
        g, out = self.guard, {}
        for k, buf in self.inputs.items():
            bits, n = buf.view(np.uint32), self.in_sizes[k]
            digest = array_digest(buf[g : g + n])
            if digest != (digests or {}).get(k):
                save_new(f"{prefix}_{k}.npy", buf.copy())  # one state: digest and file agree
            out[k] = [digest, int(np.count_nonzero(bits[:g] != GUARD_BITS)),
                      int(np.count_nonzero(bits[g + n :] != GUARD_BITS))]
        return out

    def refill(self, inputs: dict) -> None:
        """Write new contents into the same input buffers (pointers unchanged)."""
        g = self.guard
        for k, v in inputs.items():
            self.inputs[k][g : g + v.size] = v.reshape(-1)


class _Late:
    """Output snapshots taken right after a call, compared with the buffer later."""

    def __init__(self) -> None:
        self.pending: list[tuple[np.ndarray, np.ndarray, str]] = []
        self.last_call = 0.0

    def snapshot(self, outputs: dict, prefix: str) -> None:
        """Copy every output now (right after the call), save it, remember it for later."""
        self.last_call = time.monotonic()
        snaps = {k: buf.copy() for k, buf in outputs.items()}  # copy first, save after
        for k, snap in snaps.items():
            save_new(f"{prefix}_{k}.npy", snap)
            self.pending.append((outputs[k], snap, f"{prefix}_late_{k}.npy"))

    def check(self, *, wait: bool) -> None:
        """Save ``*_late_*`` for every output that changed since its snapshot."""
        if wait:
            time.sleep(max(0.0, LATE_CHECK_DELAY_S - (time.monotonic() - self.last_call)))
        for live, snap, name in self.pending:
            if not np.array_equal(live.view(np.uint32), snap.view(np.uint32)):
                save_new(name, live.copy())
        self.pending.clear()


class _Rotation:
    """Bookkeeping of the timing loop of one timed item, between calls (untimed).

    Fresh input contents each call: the next input set, with two values of a row of every
    input swapped (:meth:`_Io.salt`, undone after the call). Every call's outputs were
    NaN-filled before it: a call that left a sampled output element NaN skipped its work (the
    later calls' checks cannot see that); the 64 elements per output are drawn anew for every
    call from ``spot`` (OS entropy), so a candidate cannot write just those. One call, drawn
    uniformly from all of them as they happen (reservoir sampling, Vitter's algorithm R with
    one slot: call i replaces the pick with probability 1/i), keeps a copy of its outputs for
    the parent to validate in full: a kernel that writes cheap garbage on some calls is caught
    as often as it does so.

    The draws of ``spot`` come in blocks of :attr:`BLOCK` calls: one bulk draw costs about
    what one draw of 64 elements does, and the loop runs up to ``2 * max_reps`` calls.

    Attributes:
        cur: index of the set the current (next or just made) call uses.
        salted: ``(set index, swaps)`` of that call, or None once undone.
        made: calls made so far; unwritten: how many of them left a sampled element NaN.
        pick: ``(call number, set index, swaps, {output: copy of its guarded buffer})``.
    """

    BLOCK = 256

    def __init__(self, sets: list[_Io], salt_seed: int, spot: np.random.Generator) -> None:
        self.sets, self.spot = sets, spot
        self.salt_rng = np.random.default_rng([salt_seed, 1])
        self.cur = len(sets) - 1
        self.args = sets[self.cur].args
        self.salted: tuple[int, dict] | None = None
        self.made = self.unwritten = 0
        self.pick: tuple | None = None
        first = sets[0]  # the sets share their output buffers
        self.outputs = [(first.outputs[k], n) for k, n in first.sizes.items() if n]  # empty: nothing to write
        self.row = self.BLOCK

    def _draw(self) -> None:
        g = self.sets[0].guard
        self.idx = [self.spot.integers(0, n, (self.BLOCK, UNWRITTEN_SAMPLE)) + g for _, n in self.outputs]
        self.uniform = self.spot.random(self.BLOCK).tolist()
        self.row = 0

    def check_written(self) -> None:
        """After each call: its sampled output elements are not NaN; maybe the pick."""
        if self.row == self.BLOCK:
            self._draw()
        row = self.row
        self.row += 1
        for (buf, _), idx in zip(self.outputs, self.idx):
            if np.isnan(buf[idx[row]]).any():
                self.unwritten += 1
                break
        if self.uniform[row] * self.made < 1.0:  # probability 1 / made
            swaps = self.salted[1] if self.salted is not None else {}
            self.pick = (self.made, self.cur, swaps, {k: buf.copy() for k, buf in self.sets[self.cur].outputs.items()})

    def unsalt(self) -> None:
        if self.salted is not None:
            self.sets[self.salted[0]].swap(self.salted[1])
            self.salted = None

    def rotate(self) -> None:
        """Before each call: check the call just made, then move to the next set and salt it."""
        if self.made:
            self.check_written()  # before its set's outputs are reused
        self.made += 1
        self.unsalt()
        self.cur = (self.cur + 1) % len(self.sets)
        self.args = self.sets[self.cur].args
        self.salted = (self.cur, self.sets[self.cur].salt(self.salt_rng))

    def prepare(self) -> None:
        """Before a warm-up call: :meth:`rotate`, then NaN outputs (timed calls get theirs
        from the flush where the eviction helper fills)."""
        self.rotate()
        self.sets[self.cur].nan_outputs()


class MissingEntryPoint(Exception):
    """The candidate's library does not export the workload's entry point (e.g. an empty
    source): reported as its message alone, without a traceback."""


def bind(lib: ctypes.CDLL, workload):
    """The workload's entry point in ``lib`` with its C signature (pointers, ints, floats).

    Raises:
        MissingEntryPoint: ``lib`` exports no such symbol.
    """
    try:
        fn = getattr(lib, workload.entry_point)
    except AttributeError:
        raise MissingEntryPoint(f"the source defines no function {workload.entry_point}") from None
    types = {"in": ctypes.c_void_p, "out": ctypes.c_void_p, "int": ctypes.c_int, "float": ctypes.c_float}
    fn.argtypes = [types[a.kind] for a in workload.args]
    fn.restype = None
    return fn


def _prepare_cpu(req: dict):
    """Trusted phase of the CPU backend; returns the candidate phase as a callable."""
    workload = request_workload(req)
    # Guard pages where the parent asks for them (it judges the sentinels of that layout).
    guard = GuardLayout.from_dict(req["guard_layout"]) if req.get("guard_layout") else as_layout(req["guard"])
    # The fault helper first: every buffer is registered by name as it is made.
    faults = FaultReporter(req["fault_library"]) if req.get("fault_library") else None
    cases = []
    for case in req["cases"]:
        inputs = _inputs(workload, case["shape"], case["seed"], case.get("inputs"), guard)
        label = f"validation case {case['id']} ({shape_label(case['shape'])})"
        cases.append((case, _Io(workload, case["shape"], inputs, guard, label=label, faults=faults)))
    timed = []
    for item in req["timed"]:  # rotation sets: own input buffers, one shared output buffer
        files = item.get("inputs") or [None] * len(item["seeds"])
        sets: list[_Io] = []
        label = f"timed shape {shape_label(item['shape'])}"
        for j, (s, f) in enumerate(zip(item["seeds"], files)):
            sets.append(_Io(workload, item["shape"], _inputs(workload, item["shape"], s, f, guard), guard,
                            outputs=sets[0].outputs if sets else None, label=f"{label}, input set {j}",
                            faults=faults, out_label=label))
        fresh = _inputs(workload, item["shape"], item["fresh_seed"], item.get("fresh_inputs"))
        timed.append((item, sets, fresh))
    settings = BenchSettings(**req["bench"])
    flush_method, evictor, rewrite = _flush_for(req, settings, bool(timed))
    start_team = team_starter(req.get("evict_library")) if timed else None
    np.save(io.BytesIO(), np.zeros(2, np.float32))  # import numpy's lazy modules now
    hashlib.sha256(b"").hexdigest()  # and load OpenSSL's digest before the lockdown
    traceback.format_exc()

    def run() -> dict:
        if start_team is not None:  # the runtime's thread creation is not the candidate's first call
            start_team()
        lib = ctypes.CDLL(req["library"])  # candidate constructors run here
        fn = bind(lib, workload)
        late = _Late()
        checks: dict[str, dict] = {}
        for case, io_ in cases:
            cid = case["id"]
            for call in (1, 2):
                if call == 2:
                    late.check(wait=False)  # anything written after call 1 returned?
                io_.nan_outputs()
                fn(*io_.args)
                late.snapshot(io_.outputs, f"{cid}_call{call}")
            checks[f"{cid}_after"] = io_.check_inputs(case.get("digests"), f"{cid}_after")
        out = {}
        finished = []
        spot = np.random.default_rng()  # seeded from OS entropy: unknown to the candidate
        for item, sets, fresh in timed:
            rot = _Rotation(sets, int(item["fresh_seed"]), spot)
            # Evict exactly the buffers (guards included) that the next call touches; where
            # the helper can, it NaN-fills the outputs in the same pass (streaming stores).
            plans = [evictor.plan([*s.inputs.values(), *s.outputs.values()], fill=s.output_bodies())
                     for s in sets] if evictor else []

            def call() -> None:
                fn(*rot.args)

            def evict() -> None:
                plans[rot.cur]()

            fills = bool(plans) and all(getattr(pl, "fills", False) for pl in plans)
            timing = bench_run(call, settings, prepare=rot.prepare, flush=evict if plans else rewrite,
                               timed_prepare=rot.rotate if fills else None, prune_ms=item.get("prune_ms"))
            if timing.pruned:  # the calls so far, per shape: nothing else is judged of a pruned candidate
                done = {t["id"]: {"samples_ms": tm.samples_ms, "warm_ms": list(tm.warm_ms)}
                        for t, _s, _f, _c, tm, *_ in finished}
                done[item["id"]] = {"samples_ms": timing.samples_ms, "warm_ms": list(timing.warm_ms)}
                return {"ok": True, "pruned": {"item": item["id"], "why": timing.pruned}, "timed": done,
                        "flush": flush_method, "inputs": checks, "files": SAVED}
            late.snapshot(sets[rot.cur].outputs, f"{item['id']}_last")
            rot.check_written()  # the last call (the parent also validates its output in full)
            last_salt = rot.salted[1] if rot.salted is not None else {}
            rot.unsalt()  # the inputs as generated again (the parent checks them after the calls)
            number, pick_set, pick_salt, copies = rot.pick
            for k, copy in copies.items():
                save_new(f"{item['id']}_pick_{k}.npy", copy)
            finished.append((item, sets, fresh, rot.cur, timing, last_salt, rot.made, rot.unwritten,
                             {"call": number, "set": pick_set, "salt": pick_salt}))
        # One wait for every last timed call (the shared output buffers are reused below).
        late.check(wait=True)
        for item, sets, fresh, last, timing, last_salt, calls, skipped, picked in finished:
            tid = item["id"]
            slot = (last + 1) % len(sets)
            sets[slot].refill(fresh)
            sets[slot].nan_outputs()
            fn(*sets[slot].args)
            late.snapshot(sets[slot].outputs, f"{tid}_fresh")
            out[tid] = {"samples_ms": timing.samples_ms, "first_call_ms": timing.first_call_ms,
                        "first_call_cpu_ms": timing.first_call_cpu_ms, "last_set": last, "fresh_slot": slot,
                        "last_salt": last_salt, "calls": calls, "unwritten": skipped, "pick": picked}
        for item, sets, *_ in finished:  # while late writes to the fresh outputs would show
            slot = out[item["id"]]["fresh_slot"]
            given = item.get("digests") or [None] * len(sets)
            for j, io_ in enumerate(sets):
                tag = f"{item['id']}_after{j}"
                checks[tag] = io_.check_inputs(item.get("fresh_digests") if j == slot else given[j], tag)
        late.check(wait=True)
        return {"ok": True, "timed": out, "flush": flush_method, "inputs": checks, "files": SAVED}

    return run


def _inputs(workload, shape: dict, seed: int, files: dict | None, guard: GuardLayout | int | None = None) -> dict:
    """One input set: loaded from the files the parent saved in this directory (``{name:
    file}``, trusted: written before this process started), else generated from ``seed``.
    With ``guard``, a loaded input comes as :class:`Guarded` (read into its guarded buffer).

    Raises:
        ValueError: a file does not hold a float32 array, or the files do not name exactly
            the workload's inputs.
    """
    if not files:
        return workload.generate(shape, seed)
    if set(files) != set(workload.inputs):
        raise ValueError(f"input files name {sorted(files)}, the workload's inputs are {sorted(workload.inputs)}")
    out = {}
    for name, fname in files.items():
        if guard is not None:
            out[name] = load_guarded(fname, guard)
            continue
        arr = np.load(fname, allow_pickle=False)
        if arr.dtype != np.float32:
            raise ValueError(f"input file {fname} holds {arr.dtype}, not float32")
        out[name] = arr
    return out


def _flush_for(req: dict, settings, timing: bool):
    """(method actually used, Evictor or None, rewrite flush or None) of the timing phase.

    ``"evict"`` needs the helper library the parent compiled (``req["evict_library"]``);
    without it, or where it cannot evict, the ``"rewrite"`` flush stands in and the method
    says so.
    """
    if not timing or settings.flush == "none":
        return "none", None, None
    why = ""
    if settings.flush == "evict":
        lib = req.get("evict_library")
        if lib:
            try:
                evictor = Evictor(lib)
                return f"evict ({evictor.method})", evictor, None
            except (OSError, RuntimeError) as exc:
                why = f": {exc}"
        else:
            why = ": helper not compiled"
    rewrite = make_flush(settings.flush_bytes)
    method = f"rewrite {settings.flush_bytes} bytes"
    return (method if settings.flush == "rewrite" else f"{method} (evict unavailable{why})"), None, rewrite


def _prepare(req: dict):
    """Trusted phase: import, generate, allocate. Returns the candidate phase.

    Backends other than ``cpu`` dispatch here; whatever they need (modules, device handles)
    must be imported or opened in this phase, before the lockdown.
    """
    backend = req.get("backend", "cpu")
    if req.get("mode") == "engine-check":
        return _prepare_runner(req)
    if backend == "cpu" and req.get("mode") == "turns":
        return _prepare_turns(req)
    if backend == "cpu":
        return _prepare_cpu(req)
    if backend == "cuda":
        return prepare_cuda(req)  # cupy, the device and the module, before lockdown
    raise ValueError(f"the sandbox child has no runner for backend {backend!r}")


def _prepare_runner(req: dict):
    """Trusted phase of a child whose runner lives outside this package (the promotion
    guard's engine check, ``req["runner"]``: a module path such as ``engines._guard_child``,
    imported here by name so that this package imports nothing above it). The runner's
    ``prepare(req)`` imports what it needs and builds its inputs before the lockdown and
    returns the candidate phase: a callable of no argument, or of the channel's descriptor
    for a turn-taking child (``req["turns"]``).

    Raises:
        ValueError: ``runner`` is not a dotted module name.
        ImportError: the module cannot be imported.
    """
    import importlib  # noqa: PLC0415

    name = req.get("runner")
    if not isinstance(name, str) or not all(part.isidentifier() for part in name.split(".")):
        raise ValueError(f"the engine-check request names no runner module (got {name!r})")
    return importlib.import_module(name).prepare(req)


def _write(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def main(result_fd: int, go_fd: int | None = None) -> None:
    """Read the request (JSON) from stdin, prepare, wait for the go on ``go_fd`` (if given),
    lock down, run; report on ``result_fd``.

    The pipe carries two JSON documents: first line the sandbox report (written before the
    candidate is loaded), then the result and, on the last line, its HMAC-SHA256 (hex) under
    the request's ``result_key``. A failed lockdown writes ``{"error": ...}`` as
    the first line and exits with code 70 without loading the candidate.
    """
    serve(json.loads(sys.stdin.read()), result_fd, go_fd)


def _signed(key: bytes, result: dict) -> bytes:
    """The result document and, on a line of its own, its HMAC-SHA256 under the request's
    ``result_key``: the parent accepts only a result this process wrote (a candidate writing
    to the pipe, or relaying it through one of its own, does not know the key)."""
    body = json.dumps(result).encode()  # one line: JSON escapes newlines in strings
    return body + b"\n" + result_mac(key, body)


def serve(req: dict, result_fd: int, go_fd: int | None = None) -> None:
    """:func:`main` on a request already read (the fork server's children start here).

    ``go_fd``: read end of the go pipe (:class:`kernels.sandbox.spawn.PendingChild`): once
    prepared, wait for one byte on it before the lockdown; end-of-file (the parent
    cancelled) returns without running anything."""
    key = bytes.fromhex(req.pop("result_key", ""))  # out of the request the candidate phase sees
    try:
        run = _prepare(req)
    except BaseException as exc:  # the parent classifies; no candidate code has run
        _write(result_fd, b"{}\n" + _signed(key, {"ok": False, "error": f"prepare: {type(exc).__name__}: {exc}",
                                                  "traceback": traceback.format_exc()[-4000:]}))
        return
    turns = bool(req.get("turns")) or req.get("mode") == "turns"
    if go_fd is not None:
        go = os.read(go_fd, 1)
        if not turns:
            os.close(go_fd)  # the candidate gets no channel to the parent
        if not go:
            return
    try:
        # The CPU child reads only what it needs; the CUDA child's driver and libraries are
        # not mapped out well enough here to confine its reads without a GPU to check them.
        readable = isolation.readable_roots(_PROJECT_ROOT) if req.get("backend", "cpu") == "cpu" else None
        report = isolation.apply(req.get("sandbox", {}), os.getcwd(), readable)
    except OSError as exc:
        _write(result_fd, json.dumps({"error": f"{type(exc).__name__}: {exc}"}).encode() + b"\n")
        os._exit(70)
    _write(result_fd, json.dumps(report).encode() + b"\n")
    try:
        # A turn-taking child keeps its channel: it calls the candidate once per command on it.
        result = run(go_fd) if turns else run()
    except MissingEntryPoint as exc:  # a plain fact about the source: no traceback
        result = {"ok": False, "error": str(exc), "traceback": ""}
    except BaseException as exc:  # report, then let the parent classify runtime_error
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    _write(result_fd, _signed(key, result))
    sys.stdout.flush()
    sys.stderr.flush()


def _prepare_turns(req: dict):
    """Trusted phase of a turn-taking CPU child (one side of :mod:`kernels.comparison.paired`); returns
    the candidate phase as a callable of the channel's descriptor.

    The request's ``timed`` items are prepared as in the timing child (rotation sets, the
    same flush). Then each byte ``k`` read from the channel is one call of item ``k``:
    rotate and salt its inputs, flush (evict its buffers and NaN-fill its outputs), time the
    call alone (``time.perf_counter_ns``), check that the sampled output elements were
    written, acknowledge with ``b"."``. End-of-file ends the run; the result holds every
    call's time in ns per item, in order (``samples_ns``), and the count of calls that left
    output unwritten (``unwritten``).

    Raises:
        ValueError: a command names no item (from the candidate phase: ``runtime_error``).
    """
    workload = request_workload(req)
    # The timing child's buffers: guard pages where the parent asks for them.
    guard = GuardLayout.from_dict(req["guard_layout"]) if req.get("guard_layout") else as_layout(req["guard"])
    items = []
    for item in req["timed"]:
        files = item.get("inputs") or [None] * len(item["seeds"])
        first = _Io(workload, item["shape"], _inputs(workload, item["shape"], item["seeds"][0], files[0], guard), guard)
        sets = [first] + [
            _Io(workload, item["shape"], _inputs(workload, item["shape"], s, f, guard), guard, outputs=first.outputs)
            for s, f in zip(item["seeds"][1:], files[1:])
        ]
        items.append((item, sets))
    settings = BenchSettings(**req["bench"])
    flush_method, evictor, rewrite = _flush_for(req, settings, True)
    spot = np.random.default_rng()  # OS entropy: the sampled output elements are unknown to the candidate
    rotations = [_Rotation(sets, int(item["fresh_seed"]), spot) for item, sets in items]
    plans = [[evictor.plan([*s.inputs.values(), *s.outputs.values()], fill=s.output_bodies()) for s in sets]
             for _, sets in items] if evictor else []
    fills = bool(plans) and all(getattr(pl, "fills", False) for row in plans for pl in row)
    generated = [[{k: array_digest(buf[io_.guard : io_.guard + io_.in_sizes[k]]) for k, buf in io_.inputs.items()}
                  for io_ in sets] for _, sets in items]
    traceback.format_exc()

    def broken() -> list[str]:
        """What the calls did to the buffers: sentinels changed around any input or output,
        inputs whose contents differ from what was generated (after the last salt is undone)."""
        out = []
        for (item, sets), rot, digests in zip(items, rotations, generated):
            rot.unsalt()
            label = f"timed shape {item['id']}"
            seen_outputs = False
            for j, io_ in enumerate(sets):
                g = io_.guard
                buffers = [("input", k, buf, io_.in_sizes[k]) for k, buf in io_.inputs.items()]
                if not seen_outputs:  # the sets share their output buffers
                    buffers += [("output", k, buf, io_.sizes[k]) for k, buf in io_.outputs.items()]
                    seen_outputs = True
                for kind, k, buf, n in buffers:
                    bits = buf.view(np.uint32)
                    hit = int(np.count_nonzero(bits[:g] != GUARD_BITS)) + int(np.count_nonzero(bits[g + n :] != GUARD_BITS))
                    if hit:
                        out.append(f"wrote {hit} sentinel elements around {kind} '{k}' of {label}")
                for k, buf in io_.inputs.items():
                    if array_digest(buf[g : g + io_.in_sizes[k]]) != digests[j][k]:
                        out.append(f"modified input '{k}' of {label} (set {j})")
        return out

    def run(channel: int) -> dict:
        lib = ctypes.CDLL(req["library"])  # candidate constructors run here, before any turn
        fn = bind(lib, workload)
        clock = time.perf_counter_ns
        samples: list[list[int]] = [[] for _ in items]
        while True:
            command = os.read(channel, 1)
            if not command:
                break
            k = command[0]
            if k >= len(items):
                raise ValueError(f"turn command {k} names no timed item (there are {len(items)})")
            rot = rotations[k]
            if fills:
                rot.rotate()
            else:
                rot.prepare()
            if plans:
                plans[k][rot.cur]()
            elif rewrite is not None:
                rewrite()
            args = rot.args
            t0 = clock()
            fn(*args)
            samples[k].append(clock() - t0)
            _write(channel, b".")  # the written-output check of this call runs at the next rotate()
        for rot in rotations:
            if rot.made:
                rot.check_written()  # the last call of each item
        unwritten = [rot.unwritten for rot in rotations]
        return {"ok": True, "mode": "turns", "samples_ns": samples, "unwritten": unwritten, "broken": broken(),
                "flush": flush_method}

    return run
