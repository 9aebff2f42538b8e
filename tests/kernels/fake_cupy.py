"""A stand-in for the parts of cupy the CUDA backend's child uses, for tests without a GPU.

Device arrays are numpy arrays; ``RawModule(code=...)`` kernels run in the CPU emulation of
:mod:`cuda_emu` (real CUDA C semantics for the templates' indexing, bounds, reductions and
barriers), writing into the very numpy buffers they were given, guards included. Events
measure wall-clock time. Install with :func:`install` (monkeypatches ``sys.modules``).
"""

from __future__ import annotations

import itertools
import re
import sys
import time
import types
from pathlib import Path

import cuda_emu
import numpy as np

from kernels.backends.cuda import ResolvedLaunch

__version__ = "0.0-fake"
ndarray = np.ndarray
float32, uint8, uint32, int32 = np.float32, np.uint8, np.uint32, np.int32
_counter = itertools.count()


def asarray(a, dtype=None):
    return np.array(a, dtype=dtype, copy=True)


def asnumpy(a):
    return np.array(a, copy=True)


def empty(shape, dtype=np.float32):
    return np.empty(shape, dtype=dtype)


class CompileException(Exception):
    """Like cupy.cuda.compiler.CompileException."""

    def get_message(self) -> str:
        return str(self)


def _base(a: np.ndarray) -> tuple[np.ndarray, int]:
    base = a
    while isinstance(base.base, np.ndarray):
        base = base.base
    off = (a.__array_interface__["data"][0] - base.__array_interface__["data"][0]) // a.itemsize
    return base, off


class RawKernel:
    def __init__(self, module: RawModule, name: str) -> None:
        self.module, self.name = module, name
        self.max_dynamic_shared_size_bytes = 48 * 1024
        self.num_regs, self.shared_size_bytes, self.local_size_bytes = 32, 0, 0
        self.const_size_bytes, self.max_threads_per_block = 0, 1024
        self.ptx_version = self.binary_version = 90

    def __call__(self, grid, block, args, *, shared_mem=0):
        bases: list[np.ndarray] = []
        offsets: dict[str, int] = {}
        spec = []
        for a in args:
            if isinstance(a, np.ndarray):
                base, off = _base(a)
                idx = next((i for i, b in enumerate(bases) if b is base), None)
                if idx is None:
                    bases.append(base)
                    idx = len(bases) - 1
                offsets[f"b{idx}"] = off
                spec.append(("buffer", f"b{idx}"))
            elif isinstance(a, np.int32):
                spec.append(("int32", int(a)))
            elif isinstance(a, np.int64):
                spec.append(("int64", int(a)))
            elif isinstance(a, np.uint32):
                spec.append(("uint32", int(a)))
            elif isinstance(a, np.float32):
                spec.append(("float32", float(a)))
            else:
                raise TypeError(f"fake cupy: unsupported kernel argument {type(a).__name__}")
        if shared_mem > self.max_dynamic_shared_size_bytes:
            raise RuntimeError("CUDA_ERROR_INVALID_VALUE: too much dynamic shared memory requested")
        launch = ResolvedLaunch(self.name, tuple(grid) + (1,) * (3 - len(grid)), tuple(block) + (1,) * (3 - len(block)),
                                int(shared_mem), tuple(spec))
        names = {f"b{i}": b for i, b in enumerate(bases)}
        out = cuda_emu.run(self.module.code, [launch], names, offsets,
                           self.module.workdir / f"call{next(_counter)}", self.module.cache)
        for n, b in names.items():
            b.reshape(-1).view(np.float32)[:] = out[n]


class RawModule:
    cache: Path = Path("/tmp")
    workdir: Path = Path("/tmp")

    def __init__(self, code=None, *, path=None, options=(), backend="nvrtc", **_):
        if code is None:
            raise CompileException("fake cupy runs CUDA C sources only (no cubin/PTX)")
        if "SYNTAX ERROR" in code:
            raise CompileException("kern.cu(1): error: fake NVRTC rejected the source")
        self.code = code

    def get_function(self, name: str) -> RawKernel:
        if not re.search(rf"\b{name}\s*\(", self.code):
            raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol not found: {name}")
        return RawKernel(self, name)


class Event:
    def __init__(self) -> None:
        self.t = 0.0

    def record(self, stream=None) -> None:
        self.t = time.perf_counter()

    def synchronize(self) -> None:
        pass


def _get_elapsed_time(a: Event, b: Event) -> float:
    return (b.t - a.t) * 1e3


_PROPS = {"name": b"Fake NVIDIA H200", "major": 9, "minor": 0, "multiProcessorCount": 132,
          "l2CacheSize": 1 << 20, "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472,
          "regsPerMultiprocessor": 65536, "totalGlobalMem": 141 << 30}


def install(monkeypatch, cache: Path, workdir: Path, props: dict | None = None) -> types.ModuleType:
    """Make ``import cupy`` return this module (with ``cuda.runtime`` etc.)."""
    mod = sys.modules[__name__]
    RawModule.cache, RawModule.workdir = cache, workdir
    runtime = types.SimpleNamespace(
        getDeviceProperties=lambda dev=0: dict(_PROPS, **(props or {})),
        driverGetVersion=lambda: 13000, runtimeGetVersion=lambda: 13000, deviceSynchronize=lambda: None,
    )
    cuda = types.SimpleNamespace(Event=Event, get_elapsed_time=_get_elapsed_time, runtime=runtime,
                                 nvrtc=types.SimpleNamespace(getVersion=lambda: (13, 0)),
                                 compiler=types.SimpleNamespace(CompileException=CompileException))
    mod.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", mod)
    return mod
