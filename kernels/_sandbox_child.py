"""Runs inside the sandbox child: loads the candidate, calls it, times it, saves outputs.

Nothing here judges correctness: the trusted parent regenerates the inputs from
(shape, seed), computes the reference and classifies. The child only reports timing
samples on a dedicated pipe and leaves raw arrays as ``.npy`` files in its private cwd.

Files written (``<o>``/``<i>``: output/input names):
  ``<case>_call1_<o>.npy``, ``<case>_call2_<o>.npy``  output buffers incl. guard, two calls
  ``<case>_after_<i>.npy``                            inputs after both calls
  ``<timed>_last_<o>.npy``                           output buffer of the last timed call
  ``<timed>_after<j>_<i>.npy``                       input set j after timing
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import traceback

import numpy as np

GUARD_BITS = np.uint32(0xA5A5A5A5)


def _alloc_output(n: int, guard: int) -> np.ndarray:
    """One float32 buffer of n + guard elements; the guard is sentinel-filled."""
    buf = np.empty(n + guard, dtype=np.float32)
    buf[:n] = np.nan
    buf[n:].view(np.uint32)[:] = GUARD_BITS
    return buf


def _bind(lib: ctypes.CDLL, workload):
    fn = getattr(lib, workload.entry_point)
    types = {"in": ctypes.c_void_p, "out": ctypes.c_void_p, "int": ctypes.c_int, "float": ctypes.c_float}
    fn.argtypes = [types[a.kind] for a in workload.args]
    fn.restype = None
    return fn


def _args(workload, shape, inputs, outputs):
    vals = []
    for a in workload.args:
        if a.kind == "in":
            vals.append(inputs[a.name].ctypes.data)
        elif a.kind == "out":
            vals.append(outputs[a.name].ctypes.data)
        elif a.kind == "int":
            vals.append(int(shape[a.name]))
        else:
            vals.append(float(workload.attrs[a.name]))
    return vals


def _run(req: dict) -> dict:
    from kernels.timing import BenchSettings, bench, make_flush
    from kernels.workloads import get_workload

    workload = get_workload(req["workload"])
    guard = int(req["guard"])
    lib = ctypes.CDLL(req["library"])  # candidate constructors run here
    fn = _bind(lib, workload)

    for case in req["cases"]:
        shape, cid = case["shape"], case["id"]
        inputs = workload.generate(shape, case["seed"])
        sizes = {k: int(np.prod(s)) for k, s in workload.output_shapes(shape).items()}
        outputs = {k: _alloc_output(n, guard) for k, n in sizes.items()}
        args = _args(workload, shape, inputs, outputs)
        for call in (1, 2):
            for k, n in sizes.items():
                outputs[k][:n] = np.nan
            fn(*args)
            for k, buf in outputs.items():
                np.save(f"{cid}_call{call}_{k}.npy", buf)
        for k, arr in inputs.items():
            np.save(f"{cid}_after_{k}.npy", arr)

    settings = BenchSettings(**req["bench"])
    flush = make_flush(settings.flush_bytes)
    timed = {}
    for item in req["timed"]:
        shape, tid = item["shape"], item["id"]
        sets = [workload.generate(shape, s) for s in item["seeds"]]
        sizes = {k: int(np.prod(s)) for k, s in workload.output_shapes(shape).items()}
        outputs = {k: _alloc_output(n, guard) for k, n in sizes.items()}
        arglists = [_args(workload, shape, inp, outputs) for inp in sets]
        cur = [len(sets) - 1]

        def prepare() -> None:
            # Fresh input contents each call (rotate sets) and NaN outputs before every call.
            cur[0] = (cur[0] + 1) % len(sets)
            for k, n in sizes.items():
                outputs[k][:n] = np.nan

        def call() -> None:
            fn(*arglists[cur[0]])

        samples = bench(call, settings, prepare=prepare, flush=flush)
        for k, buf in outputs.items():
            np.save(f"{tid}_last_{k}.npy", buf)
        for j, inp in enumerate(sets):
            for k, arr in inp.items():
                np.save(f"{tid}_after{j}_{k}.npy", arr)
        timed[tid] = {"samples_ms": samples, "last_set": cur[0]}
    return {"ok": True, "timed": timed}


def main(result_fd: int) -> None:
    """Read the request (JSON) from stdin, run it, write one JSON object to ``result_fd``."""
    req = json.loads(sys.stdin.read())
    try:
        result = _run(req)
    except BaseException as exc:  # report, then let the parent classify runtime_error
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()[-4000:]}
    data = json.dumps(result).encode()
    with os.fdopen(result_fd, "wb") as f:
        f.write(data)
    sys.stdout.flush()
    sys.stderr.flush()
