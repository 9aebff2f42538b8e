"""The library's environment settings, read on each call (no Django)."""

from __future__ import annotations

import math
import os
from pathlib import Path


def _env_float(name: str, default: float) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} must be a number") from None
    if not math.isfinite(value):  # int(nan) / int(inf) would fail later with a less clear error
        raise ValueError(f"environment variable {name}={raw!r} must be a finite number")
    return value


def compiler() -> str:
    """C compiler command: ``$CC`` or ``cc``."""
    return os.environ.get("CC") or "cc"


def cache_dir() -> Path:
    """Compile cache directory: ``$KERNELS_CACHE_DIR`` or ``~/.cache/int21-kernels``."""
    raw = os.environ.get("KERNELS_CACHE_DIR")
    return Path(raw).expanduser() if raw else Path.home() / ".cache" / "int21-kernels"


def cache_max_bytes() -> int:
    """Size (bytes) the compile cache's libraries are pruned back to, least recently used
    first (``$KERNELS_CACHE_MAX_BYTES``, 2 GiB: some 50,000 template kernels of about 40 KiB)."""
    return int(_env_float("KERNELS_CACHE_MAX_BYTES", 2 * 2**30))


def cpu_peak_gbps() -> float | None:
    """Physical bandwidth limit in GB/s set by ``$KERNELS_CPU_PEAK_GBPS``, or None (unset):
    then the limit is ``roofline_margin()`` times this host's measured copy bandwidth
    (:mod:`kernels.hostperf`). A measured result above the limit is classified ``invalid``."""
    raw = os.environ.get("KERNELS_CPU_PEAK_GBPS")
    return _env_float("KERNELS_CPU_PEAK_GBPS", 0.0) if raw else None


def roofline_margin() -> float:
    """Factor (``$KERNELS_ROOFLINE_MARGIN``, default 4) applied to this host's measured copy
    bandwidth and FMA throughput to get the physical limits a result may not exceed.

    Raises:
        ValueError: not a number >= 1.
    """
    value = _env_float("KERNELS_ROOFLINE_MARGIN", 4.0)
    if not value >= 1.0:
        raise ValueError(f"KERNELS_ROOFLINE_MARGIN={value!r} must be >= 1")
    return value


def data_dir() -> Path:
    """Persistent data (the growing validation set): ``$KERNELS_DATA_DIR`` or
    ``$XDG_DATA_HOME/int21-kernels`` (``~/.local/share/int21-kernels``)."""
    raw = os.environ.get("KERNELS_DATA_DIR")
    if raw:
        return Path(raw).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share") / "int21-kernels"


def sandbox_user() -> str | None:
    """User the sandbox child becomes when the worker runs as root:
    ``$KERNELS_SANDBOX_USER`` (a name or ``uid:gid``; default ``nobody``); set it empty to
    keep root (not recommended)."""
    raw = os.environ.get("KERNELS_SANDBOX_USER")
    if raw is None:
        return "nobody"
    return raw.strip() or None


def validation_store_limit() -> int:
    """How many stored failure cases per workload every evaluation re-runs
    (``$KERNELS_VALIDATION_STORE_LIMIT``, default 16; 0 disables the store)."""
    return max(0, int(_env_float("KERNELS_VALIDATION_STORE_LIMIT", 16)))


def sandbox_spawn() -> str:
    """How sandbox children start: ``"fork"`` (default: forked by a pre-imported fork server,
    :mod:`kernels.sandbox.forkserver`) or ``"exec"`` (a fresh ``python -I`` each);
    ``KERNELS_SANDBOX_SPAWN``.

    Raises:
        ValueError: another value.
    """
    mode = os.environ.get("KERNELS_SANDBOX_SPAWN", "fork").strip() or "fork"
    if mode not in ("fork", "exec"):
        raise ValueError(f"KERNELS_SANDBOX_SPAWN={mode!r}: expected 'fork' or 'exec'")
    return mode


def sandbox_memory_bytes() -> int:
    """Address-space limit of the sandbox child (``$KERNELS_SANDBOX_MEMORY_BYTES``, 8 GiB)."""
    return int(_env_float("KERNELS_SANDBOX_MEMORY_BYTES", 8 * 2**30))


def sandbox_disk_bytes() -> int:
    """Bytes the sandbox child may write (``$KERNELS_SANDBOX_DISK_BYTES``,
    1 GiB: about 8 times the most any shape set's outputs need, 119 MiB for ``softmax``
    llama3-8b)."""
    return int(_env_float("KERNELS_SANDBOX_DISK_BYTES", 2**30))


def shared_dataset_dir(name: str) -> Path | None:
    """``shared/datasets/<name>`` found by walking up from this package (covers a checkout
    with ``shared/`` inside it and one with ``shared/`` beside it); None if absent."""
    known = _shared_found.get(name)
    if known is not None and os.path.isdir(known):
        return known
    for base in Path(__file__).resolve().parents:
        candidate = base / "shared" / "datasets" / name
        if candidate.is_dir():
            _shared_found[name] = candidate
            return candidate
    return None


_shared_found: dict[str, Path] = {}  # name -> folder found (one stat re-checks it, not a walk)


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
