"""Sandbox child runner of the CUDA backend (called by :mod:`kernels.sandbox.child`).

Same protocol and files as the CPU runner (see :mod:`kernels.sandbox.child`), on the GPU:

1. *Trusted phase* (:func:`prepare`, before the lockdown): import cupy, check that the
   device's compute capability matches the target, build the module (NVRTC compiles the
   candidate's source here: compiling is not running it), generate every input set, copy it
   to the device into guarded buffers ``[guard | data | guard]`` (sentinel ``0xA5A5A5A5``),
   allocate outputs, scratch and the L2 flush buffer.
2. *Candidate phase* (the returned ``run``): launch the resolved plan (two calls per
   validation case, outputs NaN-filled before each, synchronised after each; the first call
   on each shape timed with CUDA events: the shape's first call in the process), time the
   shape set with CUDA events (rotating two input sets, L2 flush before every timed call),
   then one call on fresh contents written into the same buffers; every buffer is copied
   back to the host and saved as ``.npy`` with the CPU runner's names, so the parent judges
   both backends with the same code.

An NVRTC failure is reported as ``{"ok": False, "stage": "compile", "log": ...}``, which
the parent classifies ``compile_error``. Device errors (illegal address, launch failure)
raise and become ``runtime_error`` with the CUDA message.
"""

from __future__ import annotations

import traceback
from typing import Any

import numpy as np

from kernels.backends.cuda import (
    ResolvedLaunch,
    arch_of_device,
    bench_events_run,
    bind_launches,
    device_info,
    import_cupy,
    kernel_attributes,
    load_kernels,
    make_l2_flush,
    prepare_kernels,
    run_bound,
)
from kernels.evaluation.timing import BenchSettings
from kernels.sandbox.child_request import request_workload, save_new

GUARD_BITS = np.uint32(0xA5A5A5A5)


class _DeviceIo:
    """Guarded device buffers of one (shape, input set): inputs, outputs, scratch."""

    def __init__(self, cp, workload, shape: dict, inputs: dict, guard: int, scratch: dict[str, int],
                 outputs: dict | None = None, scratch_bufs: dict | None = None):
        self.cp, self.guard = cp, guard
        self.sizes = {k: int(np.prod(s)) for k, s in workload.output_shapes(shape).items()}
        self.inputs = {k: self._guarded(v.size, v) for k, v in inputs.items()}
        self.outputs = outputs if outputs is not None else {k: self._guarded(n) for k, n in self.sizes.items()}
        self.scratch_sizes = dict(scratch)
        self.scratch = scratch_bufs if scratch_bufs is not None else {
            k: self._guarded(n) for k, n in scratch.items()}
        self.bound: list = []

    def _guarded(self, n: int, fill: np.ndarray | None = None):
        g = self.guard
        host = np.empty(n + 2 * g, dtype=np.float32)
        host[:g].view(np.uint32)[:] = GUARD_BITS
        host[g + n:].view(np.uint32)[:] = GUARD_BITS
        host[g:g + n] = np.nan if fill is None else fill.reshape(-1)
        return self.cp.asarray(host)

    def views(self) -> dict[str, Any]:
        """What the kernels see: each buffer from its first element (after the guard)."""
        g = self.guard
        out = {}
        for group, sizes in ((self.inputs, None), (self.outputs, self.sizes), (self.scratch, self.scratch_sizes)):
            for k, buf in group.items():
                n = (sizes or {}).get(k, buf.size - 2 * g)
                out[k] = buf[g:g + n]
        return out

    def nan_outputs(self) -> None:
        g = self.guard
        for k, n in self.sizes.items():
            self.outputs[k][g:g + n].fill(np.nan)
        for k, n in self.scratch_sizes.items():
            self.scratch[k][g:g + n].fill(np.nan)

    def refill(self, inputs: dict) -> None:
        """Write new contents into the same device input buffers (pointers unchanged)."""
        g = self.guard
        for k, v in inputs.items():
            self.inputs[k][g:g + v.size] = self.cp.asarray(v.reshape(-1))


def _compile_failure(exc: BaseException) -> dict:
    log = getattr(exc, "get_message", None)
    text = log() if callable(log) else str(exc)
    return {"ok": False, "stage": "compile", "error": f"{type(exc).__name__}: {str(exc)[:2000]}",
            "log": str(text)[-8000:], "traceback": traceback.format_exc()[-4000:]}


def prepare(req: dict):
    """Trusted phase of the CUDA runner; returns the candidate phase as a callable.

    ``req`` (built by :mod:`kernels.evaluation.cuda_pipeline`) has, besides the CPU runner's keys:
    ``arch`` (``sm_90``), ``module`` (:meth:`CudaArtifact.module_spec`, path inside the
    private directory), ``launches`` (``{case or timed id: [ResolvedLaunch JSON]}``) and
    ``scratch`` (``{id: {name: float32 elements}}``).

    Raises:
        ImportError: cupy is missing.
        RuntimeError: no GPU, or its compute capability differs from the target's.
    """
    cp = import_cupy()
    workload = request_workload(req)
    guard = int(req["guard"])
    info = device_info(cp)
    want = req["arch"].rstrip("a")
    if arch_of_device(info) != want:
        raise RuntimeError(
            f"target architecture {req['arch']} but the GPU is {info.get('gpu')} "
            f"(compute capability {info.get('compute_capability')}): run cuda-{arch_of_device(info).replace('_', '')} "
            "candidates on this worker"
        )
    plans = {k: [ResolvedLaunch.from_json(d) for d in v] for k, v in req["launches"].items()}
    names = sorted({l.kernel for ls in plans.values() for l in ls})
    try:
        kernels = load_kernels(cp, req["module"], names)
        prepare_kernels(kernels, [l for ls in plans.values() for l in ls])
    except Exception as exc:  # noqa: BLE001 - NVRTC / module load: the candidate's fault
        failure = _compile_failure(exc)
        return lambda: failure
    attrs = {n: kernel_attributes(k) for n, k in kernels.items()}

    cases = []
    for case in req["cases"]:
        shape = case["shape"]
        io_ = _DeviceIo(cp, workload, shape, workload.generate(shape, case["seed"]), guard,
                        req["scratch"].get(case["id"], {}))
        cases.append((case["id"], tuple(sorted(shape.items())), io_))
    timed = []
    for item in req["timed"]:
        shape = item["shape"]
        scratch = req["scratch"].get(item["id"], {})
        first = _DeviceIo(cp, workload, shape, workload.generate(shape, item["seeds"][0]), guard, scratch)
        sets = [first] + [
            _DeviceIo(cp, workload, shape, workload.generate(shape, s), guard, scratch,
                      outputs=first.outputs, scratch_bufs=first.scratch)
            for s in item["seeds"][1:]
        ]
        fresh = workload.generate(shape, item["fresh_seed"])
        timed.append((item, sets, fresh))
    settings = BenchSettings(**req["bench"])
    flush = make_l2_flush(cp, info.get("l2_bytes") or 0, settings.flush_bytes) if settings.flush_bytes and settings.flush != "none" else None
    cp.cuda.runtime.deviceSynchronize()

    # argument tuples built once per buffer set: a timed call only enqueues its launches
    for cid, _, io_ in cases:
        io_.bound = bind_launches(kernels, plans[cid], io_.views())
    for item, sets, _ in timed:
        for io_ in sets:
            io_.bound = bind_launches(kernels, plans[item["id"]], io_.views())

    def call(io_: _DeviceIo) -> None:
        run_bound(io_.bound)

    def save(io_: _DeviceIo, group: str, prefix: str) -> None:
        for k, buf in getattr(io_, group).items():
            save_new(f"{prefix}_{k}.npy", cp.asnumpy(buf))

    def run() -> dict:
        first: dict[tuple, float] = {}  # shape -> device ms of the process's first call on it
        start, end = cp.cuda.Event(), cp.cuda.Event()
        for cid, key, io_ in cases:
            for n_call in (1, 2):
                io_.nan_outputs()
                timed_call = n_call == 1 and key not in first
                if timed_call:
                    start.record()
                call(io_)
                if timed_call:
                    end.record()
                cp.cuda.runtime.deviceSynchronize()  # raises on a launch or device error
                if timed_call:
                    first[key] = float(cp.cuda.get_elapsed_time(start, end))
                save(io_, "outputs", f"{cid}_call{n_call}")
            save(io_, "inputs", f"{cid}_after")
        out = {}
        for item, sets, fresh in timed:
            tid = item["id"]
            cur = [len(sets) - 1]

            def prep() -> None:
                cur[0] = (cur[0] + 1) % len(sets)
                sets[cur[0]].nan_outputs()

            timing = bench_events_run(cp, lambda: call(sets[cur[0]]), settings, prepare=prep, flush=flush)
            cp.cuda.runtime.deviceSynchronize()
            save(sets[cur[0]], "outputs", f"{tid}_last")
            slot = (cur[0] + 1) % len(sets)
            sets[slot].refill(fresh)
            sets[slot].nan_outputs()
            call(sets[slot])
            cp.cuda.runtime.deviceSynchronize()
            save(sets[slot], "outputs", f"{tid}_fresh")
            for j, io_ in enumerate(sets):
                save(io_, "inputs", f"{tid}_after{j}")
            # The shape's first call in this process: its first validation case ran before timing.
            first_ms = first.get(tuple(sorted(item["shape"].items())), timing.first_call_ms)
            out[tid] = {"samples_ms": timing.samples_ms, "first_call_ms": first_ms, "last_set": cur[0],
                        "fresh_slot": slot}
        return {"ok": True, "timed": out, "device": info, "kernels": attrs}

    return run
