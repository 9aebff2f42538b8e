"""Enumerated domains of design spaces: sets of admissible points that no restriction
expression describes, such as the configurations a Kernel Tuner cache file records.

A domain is named ``<kind>:<name>``; ``replay:<dataset>`` resolves through the replay
backend's data sets. Resolution is cached per process and per file version.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from kernels.space import SpaceError, point_key


@dataclass(frozen=True)
class Domain:
    """The admissible points of a space: ``points`` in a stable order, their ``point_keys`` in
    the same order, and ``keys`` as a set."""

    name: str
    points: tuple[dict[str, Any], ...]
    point_keys: tuple[str, ...]
    keys: frozenset[str]
    values: dict[str, set[Any]]  # parameter -> values that occur in the points


def resolve(domain: str) -> Domain:
    """The points of ``domain``.

    Raises:
        SpaceError: unknown domain kind or data set.
    """
    kind, _, name = domain.partition(":")
    if kind != "replay" or not name:
        raise SpaceError(f"unknown domain {domain!r}; known kinds: replay:<dataset>")
    from kernels.backends.replay import get_dataset

    try:
        cache = get_dataset(name)
    except KeyError as exc:
        raise SpaceError(f"domain {domain!r}: {exc.args[0]}") from None
    key = (domain, cache.sha256)
    with _lock:
        found = _resolved.get(key)
        if found is None:
            points = tuple(cache.params_of(k) for k in cache.entries)
            keys = tuple(point_key(p) for p in points)
            values: dict[str, set[Any]] = {}
            for p in points:
                for k, v in p.items():
                    values.setdefault(k, set()).add(v)
            found = _resolved[key] = Domain(domain, points, keys, frozenset(keys), values)
        return found


_resolved: dict[tuple[str, str], Domain] = {}
_lock = threading.Lock()
