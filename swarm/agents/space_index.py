"""An enumerated index of a design space's valid points, for agents that score many of them.

A model-based agent scores thousands of unseen points every generation. Building them as
dicts, checking each with :meth:`DesignSpace.contains` and keying each with
:func:`kernels.space.point_key` (sorted JSON) cost more than fitting the model. For a space
that can be enumerated (a replay domain, or at most :data:`ENUMERATE_LIMIT` points before
restrictions) the valid points are enumerated once per process into a value matrix, and
agents work with row numbers: sampling, neighbours and crossovers become array operations
and dict lookups of value tuples.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from kernels import DesignSpace
from kernels.space import resolve_domain

ENUMERATE_LIMIT = 50_000  # as DesignSpace.sample, which enumerates up to this size too
_CACHE_SIZE = 8


@dataclass(frozen=True)
class SpaceIndex:
    """The valid points of one design space, in a stable order.

    Attributes:
        space: the indexed space.
        tuples: valid points as value tuples in ``space.names`` order (row ``i`` is
            ``tuples[i]``; :meth:`point` makes the dict).
        values: ``float64 [n_points, len(varying(space))]``: the parameters that take more
            than one value (:func:`varying`), in ``space.names`` order.
        rows: value tuple (``space.names`` order) -> row.
        key_rows: :func:`kernels.space.point_key` -> row.
        codes: ``int32 [n_points, len(varying(space))]``: each varying parameter's value as
            its position among the parameter's values (exact where floats are not: 2**53 + 1).
    """

    space: DesignSpace
    tuples: tuple[tuple, ...]
    values: np.ndarray
    rows: dict[tuple, int]
    key_rows: dict[str, int]
    codes: np.ndarray

    def __len__(self) -> int:
        return len(self.tuples)

    def point(self, row: int) -> dict[str, Any]:
        """The parameter dict of ``row``."""
        return dict(zip(self.space.names, self.tuples[row]))

    def row(self, params: Mapping[str, Any]) -> int | None:
        """Row of ``params``, or None when it is not a valid point of the space."""
        try:
            return self.rows.get(tuple(params[k] for k in self.space.names))
        except KeyError:
            return None

    def within(self, row: int, distance: int) -> np.ndarray:
        """Rows (ascending) whose points differ from ``row``'s in 1 to ``distance`` parameters."""
        changed = np.count_nonzero(self.codes != self.codes[row], axis=1)
        return np.flatnonzero((changed >= 1) & (changed <= distance))

    def seen_mask(self, keys: Iterable[str]) -> np.ndarray:
        """``bool [n_points]``: True for rows whose point key is in ``keys``."""
        mask = np.zeros(len(self.tuples), dtype=bool)
        found = [r for r in map(self.key_rows.get, keys) if r is not None]
        mask[found] = True
        return mask


def index_of(space: DesignSpace) -> SpaceIndex | None:
    """The cached index of ``space``, or None when the space is too large to enumerate.

    Cached per process (the last few spaces); a replay domain is keyed on its data set's
    content hash as well, so a changed file is re-indexed.

    Raises:
        SpaceError: the space's domain cannot be resolved.
    """
    token: Any = None
    if space.domain is not None:
        token = resolve_domain(space.domain).point_keys  # identity changes with the file's content
    elif space.cartesian_size() > ENUMERATE_LIMIT:
        return None
    # Spelled values, not the space: DesignSpace equality says 32 == 32.0 and 0.0 == -0.0,
    # but their #defines and point keys differ.
    key = (tuple((p.name, tuple(map(repr, p.values))) for p in space.parameters), space.restrictions,
           space.domain, id(token))
    with _lock:
        hit = _cache.get(key)
        if hit is not None and hit[0] is token:
            _cache.move_to_end(key)
            return hit[1]
    index = _build(space)
    with _lock:
        _cache[key] = (token, index)
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return index


def varying(space: DesignSpace) -> list[int]:
    """Positions (in ``space.names``) of the parameters that take more than one value."""
    return [i for i, p in enumerate(space.parameters) if len(p.values) > 1]


def _build(space: DesignSpace) -> SpaceIndex:
    names, columns = space.names, varying(space)
    tuples, key_rows = [], {}
    for key, p in space.iter_valid_keyed():
        key_rows[key] = len(tuples)
        tuples.append(tuple(p[k] for k in names))
    n = len(tuples)
    values = np.empty((n, len(columns)), dtype=float)
    codes = np.empty((n, len(columns)), dtype=np.int32)
    for c, i in enumerate(columns):  # column by column: a recorded landscape has 10^5-10^6 rows
        column = [t[i] for t in tuples]
        values[:, c] = np.fromiter(map(float, column), dtype=float, count=n)
        position = {v: j for j, v in enumerate(space.parameters[i].values)}.__getitem__
        codes[:, c] = np.fromiter(map(position, column), dtype=np.int32, count=n)
    return SpaceIndex(space, tuple(tuples), values, {t: i for i, t in enumerate(tuples)}, key_rows, codes)


_cache: OrderedDict[tuple, tuple[Any, SpaceIndex]] = OrderedDict()
_lock = threading.Lock()
