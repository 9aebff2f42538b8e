"""Replay backend: answers an evaluation from recorded Kernel Tuner measurements.

The target ``replay:<dataset>`` names a Kernel Tuner cache file; evaluating a candidate is
an O(1) lookup of its parameter values (like Kernel Tuner's ``SimulationRunner``): nothing
is compiled, no child process is started, the source is ignored. Recorded data is trusted.

Data sets are found by name (the file name without ``.json`` / ``.json.gz``) in
:func:`kernels.config.replay_dirs` (``$KERNELS_REPLAY_DIRS`` or
``shared/datasets/tuning-cache``) and among files added with :func:`register_dataset`.

This module also provides the design-space domains ``replay:<dataset>`` (the configurations
a data set records; registered with :func:`kernels.space.register_domain_kind`).
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernels import config
from kernels.backends import CAPABILITIES, TARGET_PREFIXES
from kernels.evidence import Evidence
from kernels.interchange.tuning_cache import TuningCache, dataset_name, load_cache, load_resolved
from kernels.space import DesignSpace, Domain, SpaceError, register_domain_kind

__all__ = [
    "PREFIX",
    "ReplayBackend",
    "dataset_path",
    "evaluate_replay",
    "get_dataset",
    "list_datasets",
    "register_dataset",
]

PREFIX = TARGET_PREFIXES["replay"]
_SUFFIXES = (".json", ".json.gz")
_registered: dict[str, Path] = {}
_lock = threading.Lock()


def register_dataset(path: str | os.PathLike[str], name: str | None = None) -> str:
    """Make a cache file available as ``replay:<name>`` in this process.

    Args:
        path: a Kernel Tuner cache file (``.json`` or ``.json.gz``); it is loaded (and so
            validated) now.
        name: data set name; default the file name without ``.json`` / ``.json.gz``.

    Returns:
        The data set name.

    Raises:
        FileNotFoundError: no such file.
        TuningCacheError: not a readable cache file.
        ValueError: ``name`` is empty, contains whitespace, or is already registered for
            another file.
    """
    p = Path(path).expanduser().resolve()
    cache = load_cache(p)
    name = name or cache.name
    if not name or any(c.isspace() for c in name):
        raise ValueError(f"data set name {name!r} must be non-empty and contain no whitespace")
    with _lock:
        other = _registered.get(name)
        if other is not None and other != p:
            raise ValueError(f"data set '{name}' is already registered for {other}; pass another name")
        _registered[name] = p
    return name


@functools.lru_cache(maxsize=32)
def _listing(folder: Path, mtime_ns: int) -> tuple[tuple[str, Path], ...]:  # noqa: ARG001 - cache key
    folder = folder.resolve()
    return tuple((dataset_name(p), p.resolve()) for p in sorted(folder.iterdir())
                 if p.name.endswith(_SUFFIXES) and p.is_file())


def _scan() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for folder in config.replay_dirs():
        try:
            mtime_ns = folder.stat().st_mtime_ns  # a new or removed file changes it
        except OSError:
            continue
        for name, p in _listing(folder, mtime_ns):
            found.setdefault(name, p)  # first folder wins; .json before .json.gz
    with _lock:
        found.update(_registered)
    return found


def list_datasets() -> list[str]:
    """Names of all data sets: files in the replay folders plus registered ones, sorted."""
    return sorted(_scan())


def dataset_path(name: str) -> Path:
    """The file of data set ``name`` (a registered one wins over a folder's).

    Raises:
        KeyError: unknown data set; the message lists the known ones and the folders searched.
    """
    with _lock:
        if name in _registered:
            return _registered[name]
    found = _scan()
    try:
        return found[name]
    except KeyError:
        folders = ", ".join(str(f) for f in config.replay_dirs()) or "none found; set KERNELS_REPLAY_DIRS"
        raise KeyError(
            f"unknown replay data set '{name}' (known: {', '.join(sorted(found)) or 'none'}; "
            f"searched: {folders})"
        ) from None


def get_dataset(name: str) -> TuningCache:
    """The parsed cache of data set ``name`` (parsed once per process and file version).

    Raises:
        KeyError: unknown data set.
        TuningCacheError: the file is not a readable cache.
    """
    return load_resolved(dataset_path(name))  # registered and listed paths are resolved


def _resolve_domain(domain: str) -> Domain:
    """The points of domain ``replay:<dataset>``: the configurations the data set records, in
    its order, as points of its space (:meth:`TuningCache.point_of`; resolved once per process
    and file version).

    Raises:
        SpaceError: unknown data set (or a file that is not a readable cache).
    """
    try:
        cache = get_dataset(domain.partition(":")[2])
    except KeyError as exc:
        raise SpaceError(f"domain {domain!r}: {exc.args[0]}") from None
    key = (domain, cache.sha256)
    with _domain_lock:
        found = _domains.get(key)
        if found is None:
            found = _domains[key] = Domain.of(domain, (cache.point_of(k) for k in cache.entries))
        return found


_domains: dict[tuple[str, str], Domain] = {}
_domain_lock = threading.Lock()
register_domain_kind("replay", _resolve_domain, "replay:<dataset>")


def _dataset_of(target: str) -> str:
    if not isinstance(target, str) or not target.startswith(PREFIX) or len(target) == len(PREFIX):
        raise ValueError(f"replay target must look like 'replay:<dataset>', got {target!r}")
    return target[len(PREFIX):]


class ReplayBackend:
    """Drives ``replay:<dataset>`` targets from recorded measurements.

    Args:
        target: optional ``replay:<dataset>`` this instance is bound to; methods taking a
            ``target`` default to it.
    """

    name = "replay"
    target_prefix = TARGET_PREFIXES["replay"]
    capabilities = CAPABILITIES["replay"]

    def __init__(self, target: str | None = None) -> None:
        self.target = target

    def _target(self, target: str | None) -> str:
        t = target or self.target
        if t is None:
            raise ValueError("no target: pass target='replay:<dataset>' (or bind one with ReplayBackend(target))")
        return t

    def supports(self, target: str) -> bool:
        """True for ``replay:<dataset>`` where the data set exists."""
        try:
            dataset_path(_dataset_of(target))
        except (ValueError, KeyError):
            return False
        return True

    def fingerprint(self, target: str | None = None) -> dict[str, Any]:
        """Recorded environment of the target's data set: device name, data set, kernel,
        problem size and the sha256 of the file's decompressed content. Unbound and without
        ``target``: only ``{"backend": "replay", "format": "kernel_tuner_cache"}``.

        Raises:
            KeyError: unknown data set.
            ValueError: malformed target.
        """
        t = target or self.target
        if t is None:
            return {"backend": self.name, "format": "kernel_tuner_cache"}
        return get_dataset(_dataset_of(t)).fingerprint()

    def space(self, target: str | None = None) -> DesignSpace:
        """The recorded Cartesian design space (see :meth:`TuningCache.space`).

        Raises:
            KeyError: unknown data set.
            ValueError: no or malformed target.
        """
        return get_dataset(_dataset_of(self._target(target))).space()

    def lookup(self, params: Mapping[str, Any], target: str | None = None) -> Evidence:
        """Recorded evidence of ``params``, a point of :meth:`space` (:func:`lookup_point`).

        Raises:
            KeyError: unknown data set.
            ValueError: malformed target.
        """
        return lookup_point(get_dataset(_dataset_of(self._target(target))), params)


def lookup_point(cache: TuningCache, params: Any) -> Evidence:
    """:meth:`TuningCache.lookup` of a point of the cache's space: a parameter whose values are
    not numbers is given by position (:meth:`TuningCache.recorded_params`)."""
    return cache.lookup(cache.recorded_params(params) if isinstance(params, Mapping) else params)


def evaluate_replay(workload: str, params: Mapping[str, Any], *, target: str | None) -> Evidence:
    """What :func:`kernels.evaluate` returns for a ``replay:`` target.

    Args:
        workload: the goal's workload; for replay goals, the recorded kernel name (e.g.
            ``"Xgemm"``). Not required to be a registered workload; a mismatch with the
            recorded kernel is noted in the log, not an error.
        params: a point of the data set's space to look up (:func:`lookup_point`).
        target: ``replay:<dataset>``.

    Raises:
        KeyError: unknown data set.
        ValueError: ``target`` is missing or not ``replay:<dataset>``.
    """
    if target is None:
        raise ValueError(
            "backend 'replay' needs target='replay:<dataset>', e.g. "
            "evaluate(..., backend='replay', target='replay:gemm-clblast-xgemm_RTX-3090')"
        )
    cache = get_dataset(_dataset_of(target))
    ev = lookup_point(cache, params)
    if workload and cache.kernel_name and workload != cache.kernel_name:
        note = f"note: workload '{workload}' differs from the recorded kernel '{cache.kernel_name}'\n"
        ev = Evidence(status=ev.status, metrics=ev.metrics, samples_ms=ev.samples_ms, cases=ev.cases,
                      log=note + ev.log, fingerprint=ev.fingerprint, duration_s=ev.duration_s)
    return ev
