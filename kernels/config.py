"""The library's environment settings, read on each call (no Django)."""

from __future__ import annotations

import os
from pathlib import Path


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be a number") from None


def compiler() -> str:
    """C compiler command: ``$CC`` or ``cc``."""
    return os.environ.get("CC") or "cc"


def cache_dir() -> Path:
    """Compile cache directory: ``$KERNELS_CACHE_DIR`` or ``~/.cache/int21-kernels``."""
    raw = os.environ.get("KERNELS_CACHE_DIR")
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "int21-kernels"


def cpu_peak_gbps() -> float:
    """Physical bandwidth limit in GB/s (``$KERNELS_CPU_PEAK_GBPS``, default 400); a
    measured result above it is classified ``invalid``."""
    return _env_float("KERNELS_CPU_PEAK_GBPS", 400.0)


def sandbox_memory_bytes() -> int:
    """Address-space limit of the sandbox child (``$KERNELS_SANDBOX_MEMORY_BYTES``, 8 GiB)."""
    return int(_env_float("KERNELS_SANDBOX_MEMORY_BYTES", 8 * 2**30))


def shared_dataset_dir(name: str) -> Path | None:
    """``shared/datasets/<name>`` found by walking up from this package (covers a checkout
    with ``shared/`` inside it and one with ``shared/`` beside it); None if absent."""
    for base in Path(__file__).resolve().parents:
        candidate = base / "shared" / "datasets" / name
        if candidate.is_dir():
            return candidate
    return None


def _env_dirs(name: str, default: str) -> tuple[Path, ...]:
    raw = os.environ.get(name)
    if raw:
        return tuple(Path(p).expanduser() for p in raw.split(os.pathsep) if p)
    found = shared_dataset_dir(default)
    return (found,) if found else ()


def replay_dirs() -> tuple[Path, ...]:
    """Folders searched for Kernel Tuner cache files (``replay:<dataset>`` targets):
    ``$KERNELS_REPLAY_DIRS`` (``os.pathsep``-separated) or ``shared/datasets/tuning-cache``."""
    return _env_dirs("KERNELS_REPLAY_DIRS", "tuning-cache")


def flashinfer_trace_dir() -> Path | None:
    """FlashInfer Trace folder (``definitions/``, ``workloads/``):
    ``$KERNELS_FLASHINFER_TRACE_DIR`` or ``shared/datasets/flashinfer-trace``."""
    found = _env_dirs("KERNELS_FLASHINFER_TRACE_DIR", "flashinfer-trace")
    return found[0] if found else None
