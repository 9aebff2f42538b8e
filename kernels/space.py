"""Design spaces: tunable parameters, their values, safe restrictions and enumerated domains.

A domain (``<kind>:<name>``) is a set of admissible points that no restriction expression
describes, such as the configurations a Kernel Tuner cache file records (``replay:<dataset>``).
The module that provides a kind registers it (:func:`register_domain_kind`; ``replay``:
:mod:`kernels.backends.replay`, imported with :mod:`kernels`), and :func:`resolve_domain`
returns its points.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import operator
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernels.restrictions import Restriction, RestrictionError

if TYPE_CHECKING:
    import numpy as np

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")  # \Z: "$" would admit a trailing newline
# Below this many points, sampling enumerates the valid points (exact, no rejection misses).
_ENUMERATE_LIMIT = 50_000
MAX_VALUES = 4096  # per parameter
MAX_RESTRICTIONS = 32
# C11 keywords plus common type names: as #define names they would break any kernel.
C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int "
    "long register restrict return short signed sizeof static struct switch typedef union unsigned void "
    "volatile while _Bool _Complex _Imaginary _Alignas _Alignof _Atomic _Generic _Noreturn _Static_assert "
    "_Thread_local bool size_t int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t NULL".split()
)

Value = int | float


class SpaceError(ValueError):
    """A design space (or a parameter point) is malformed; the message says how to fix it."""


def is_value(v: Any) -> bool:
    """True for what a parameter's values may be: an int or a finite float, not a bool."""
    return not isinstance(v, bool) and isinstance(v, (int, float)) and (not isinstance(v, float) or math.isfinite(v))


def labelled_value(labels: Sequence[Any] | None, v: Any, values: Sequence[Any] | None = None) -> Any:
    """What the value ``v`` of a parameter with ``labels`` (:class:`Parameter`) stands for: the
    label of the value equal to ``v`` among ``values`` (default: the positions 0 .. n - 1, as in
    a recorded parameter's space), else ``v`` itself (also a bool, which is no value)."""
    if not labels or isinstance(v, bool) or not isinstance(v, (int, float)):
        return v
    if values is None:
        return labels[v] if isinstance(v, int) and 0 <= v < len(labels) else v
    for value, label in zip(values, labels):
        if value == v and not isinstance(value, bool):
            return label
    return v


def labels_of(space: Mapping[str, Any] | None, params: Mapping[str, Any]) -> dict[str, Any]:
    """The labels of the values of ``params`` that ``space`` (a :meth:`DesignSpace.to_dict` form,
    as a goal or run stores it) labels (:func:`labelled_value`), by parameter; a value without a
    label is left out, e.g. ``{"method": "best1bin"}`` for ``{"method": 0, "unroll": 2}``."""
    found = {p.get("name"): p for p in (space or {}).get("parameters") or ()
             if isinstance(p, Mapping) and isinstance(p.get("labels"), list | tuple)}
    out = {}
    for k, v in params.items():
        if k in found:
            p = found[k]
            values = p.get("values") if isinstance(p.get("values"), list | tuple) else ()
            if (label := labelled_value(p["labels"], v, values)) is not v:
                out[k] = label
    return out


def label_space(*spaces: Mapping[str, Any] | None) -> dict[str, Any]:
    """One stored-space form (``{"parameters": [{"name", "values", "labels"}]}``) holding every
    labelled value of ``spaces``, later ones first: what a run's candidates stand for when its
    space was narrowed since (pass the goal's space, then the run's), for :func:`labels_of`.
    Parameters without labels are left out; its values are in first-seen order."""
    merged: dict[Any, dict[Any, Any]] = {}
    for space in spaces:
        for p in (space or {}).get("parameters") or ():
            if isinstance(p, Mapping) and isinstance(p.get("labels"), list | tuple) and isinstance(p.get("values"), list | tuple):
                by_value = merged.setdefault(p.get("name"), {})
                by_value.update((v, label) for v, label in zip(p["values"], p["labels"]) if not isinstance(v, bool))
    return {"parameters": [{"name": name, "values": list(m), "labels": list(m.values())} for name, m in merged.items()]}


def labelled_params(space: Mapping[str, Any] | None, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` with each value that ``space`` labels replaced by its label (:func:`labels_of`):
    what a point stands for, e.g. ``{"method": "best1bin", "unroll": 2}``."""
    return {**params, **labels_of(space, params)}


def shown_params(space: Mapping[str, Any] | None, params: Mapping[str, Any]) -> dict[str, Any]:
    """``params`` as a page shows them: each value that ``space`` labels as its label's
    :func:`label_text`, the others as given."""
    return {**params, **{k: label_text(v) for k, v in labels_of(space, params).items()}}


def label_text(v: Any) -> str:
    """How a shown value reads: a number or a string as it is (a string holding a control
    character JSON-quoted, so that a terminal or page does not act on it), ``null``, ``true``
    and ``false`` as JSON writes them."""
    if isinstance(v, str):
        return v if v.isprintable() else json.dumps(v)
    if v is None or isinstance(v, bool):
        return json.dumps(v)
    return str(v)


def _check_value(name: str, v: Any) -> Value:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise SpaceError(f"parameter '{name}': value {v!r} must be an int or a float")
    if isinstance(v, float) and not math.isfinite(v):
        raise SpaceError(f"parameter '{name}': value {v!r} must be finite")
    return v


def _format_value(v: Value) -> str:
    return repr(v)  # repr(float) round-trips and is a valid C literal (e.g. 1e-05)


def point_key(params: Mapping[str, Value]) -> str:
    """Canonical string of a parameter point (sorted JSON), for de-duplication.

    Example: ``{"VEC": 8, "UNROLL": 2}`` -> ``'{"UNROLL":2,"VEC":8}'``.

    Raises:
        TypeError: a name or value that JSON cannot write (as :func:`json.dumps`).
    """
    try:
        items = sorted(params.items())
    except TypeError:  # names of mixed types: json.dumps names the problem
        items = None
    if items is not None:
        # Spelled directly where that is exactly what json.dumps writes (identifier names,
        # ints and finite floats, whose JSON is their repr): keying a recorded landscape of
        # 10^5-10^6 points through the encoder costs seconds.
        parts = []
        for name, v in items:
            kind = type(v)
            if not (kind is int or (kind is float and math.isfinite(v))) or not _plain_name(name):
                break
            parts.append(f'"{name}":{v!r}')
        else:
            return "{" + ",".join(parts) + "}"
    return json.dumps(dict(params), sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=4096)
def _plain_name(name: Any) -> bool:
    """Whether JSON writes ``name`` as it is between quotes (a str C identifier)."""
    return type(name) is str and _IDENT.fullmatch(name) is not None


def format_defines(params: Mapping[str, Value], order: Iterable[str] | None = None) -> str:
    """``#define NAME value`` lines (Kernel Tuner convention) to prepend to a source.

    Args:
        params: parameter values; names must be C identifiers, values finite ints/floats.
        order: names in output order (default: the mapping's order).

    Raises:
        SpaceError: a name is not a C identifier or a value is not a finite number.
    """
    names = list(order) if order is not None else list(params)
    lines = []
    for name in names:
        if not isinstance(name, str) or not _IDENT.match(name):
            raise SpaceError(f"parameter name {name!r} is not a C identifier")
        lines.append(f"#define {name} {_format_value(_check_value(name, params[name]))}\n")
    return "".join(lines)


@dataclass(frozen=True)
class Domain:
    """The admissible points of a space: ``points`` in a stable order, their ``point_keys`` in
    the same order, and ``keys`` as a set."""

    name: str
    points: tuple[dict[str, Any], ...]
    point_keys: tuple[str, ...]
    keys: frozenset[str]
    values: dict[str, set[Any]]  # parameter -> values that occur in the points

    @classmethod
    def of(cls, name: str, points: Iterable[Mapping[str, Any]]) -> Domain:
        """The domain ``name`` of ``points`` (in that order), with their keys and values."""
        pts = tuple(dict(p) for p in points)
        keys = tuple(map(point_key, pts))
        names = dict.fromkeys(itertools.chain.from_iterable(pts))  # every point's parameters, first seen first
        values = {k: {p[k] for p in pts if k in p} for k in names}
        return cls(name, pts, keys, frozenset(keys), values)


#: The registered domain kinds, by kind: (the kind as error messages spell it, e.g.
#: ``"replay:<dataset>"``; ``resolve(domain) -> Domain`` for a domain ``<kind>:<name>``,
#: raising :class:`SpaceError` for a name it does not know).
_DOMAIN_KINDS: dict[str, tuple[str, Callable[[str], Domain]]] = {}


def register_domain_kind(kind: str, resolve: Callable[[str], Domain], spelled: str | None = None) -> None:
    """Make the domains ``<kind>:<name>`` resolvable with ``resolve(domain)`` (which caches
    what it needs); ``spelled`` (default ``<kind>:<name>``) names the kind in error messages,
    e.g. ``"replay:<dataset>"``. Registering a kind again replaces it."""
    _DOMAIN_KINDS[kind] = (spelled or f"{kind}:<name>", resolve)


def resolve_domain(domain: str) -> Domain:
    """The points of ``domain`` (``<kind>:<name>``).

    Raises:
        SpaceError: unknown domain kind, or a name the kind does not know.
    """
    kind, _, name = domain.partition(":")
    found = _DOMAIN_KINDS.get(kind)
    if found is None or not name:
        known = ", ".join(spelled for spelled, _ in _DOMAIN_KINDS.values()) or "none"
        raise SpaceError(f"unknown domain {domain!r}; known kinds: {known}")
    return found[1](domain)


#: The types a label may have (JSON scalars).
_LABEL_TYPES = frozenset({str, int, float, bool, type(None)})


@dataclass(frozen=True)
class Parameter:
    """One tunable parameter.

    Args:
        name: C identifier (becomes a ``#define``).
        values: non-empty tuple of distinct finite ints/floats.
        labels: what each value stands for where the values number categories (a recorded
            parameter whose values are names, e.g. ``("best1bin", "rand1bin")`` for the values
            ``(0, 1)``): JSON scalars, one per value, told apart as JSON tells them; None where
            the values are what they say.

    Raises:
        SpaceError: on any violation, naming the parameter.
    """

    name: str
    values: tuple[Value, ...]
    labels: tuple[Any, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _IDENT.match(self.name):
            raise SpaceError(
                f"parameter name {self.name!r} must be a C identifier "
                "(letters, digits, underscore; not starting with a digit)"
            )
        if self.name in C_KEYWORDS:
            raise SpaceError(f"parameter name '{self.name}' is a C keyword; a #define of it breaks every kernel")
        if isinstance(self.values, Sized) and len(self.values) > MAX_VALUES:
            raise SpaceError(f"parameter '{self.name}': {len(self.values)} values, at most {MAX_VALUES}")
        if isinstance(self.values, (str, bytes)) or not isinstance(self.values, Iterable):
            raise SpaceError(f"parameter '{self.name}': values must be a list of numbers")
        values = tuple(_check_value(self.name, v) for v in self.values)
        if not values:
            raise SpaceError(f"parameter '{self.name}': needs at least one value")
        if len(set(values)) != len(values):
            dupes = sorted(v for v, n in Counter(values).items() if n > 1)
            raise SpaceError(f"parameter '{self.name}': duplicate values {dupes}")
        object.__setattr__(self, "values", values)
        if self.labels is not None:
            labels = tuple(self.labels) if isinstance(self.labels, list | tuple) else None
            if labels is None or len(labels) != len(values) or not all(type(v) in _LABEL_TYPES for v in labels):
                raise SpaceError(f"parameter '{self.name}': labels must be a list of {len(values)} strings, "
                                 "numbers, booleans or nulls, one per value")
            if len({(type(v) is bool, v) for v in labels}) != len(labels):
                raise SpaceError(f"parameter '{self.name}': duplicate labels")
            object.__setattr__(self, "labels", labels)


@dataclass(frozen=True)
class DesignSpace:
    """Parameters plus restrictions that every valid point must satisfy.

    Args:
        parameters: distinct-named parameters, in ``#define`` order.
        restrictions: safe boolean expressions over the parameter names (see
            :mod:`kernels.restrictions` for the whitelist).
        domain: optional name of an enumerated set of admissible points, e.g.
            ``"replay:<dataset>"`` (the configurations a Kernel Tuner cache records; see
            :func:`resolve_domain`). Points outside it are not in the space, as Kernel Tuner's
            search space built from a cache excludes unrecorded configurations.

    Raises:
        SpaceError: duplicate names, bad values, or a restriction that is not allowed
            (e.g. ``restriction 'foo(1)': call to 'foo' is not allowed ...``).
    """

    parameters: tuple[Parameter, ...]
    restrictions: tuple[str, ...] = ()
    domain: str | None = None
    _compiled: tuple[Restriction, ...] = field(init=False, repr=False, compare=False)
    # (name, values as a set): membership as the tuple's (32 == 32.0), in O(1)
    _value_sets: tuple[tuple[str, frozenset[Value]], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        params = tuple(self.parameters)
        if not all(isinstance(p, Parameter) for p in params):
            raise SpaceError("parameters must be Parameter objects")
        names = [p.name for p in params]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise SpaceError(f"duplicate parameter names: {', '.join(dupes)}")
        if isinstance(self.restrictions, str):
            raise SpaceError("restrictions must be a list of strings, not one string")
        restrictions = tuple(self.restrictions)
        if len(restrictions) > MAX_RESTRICTIONS:
            raise SpaceError(f"{len(restrictions)} restrictions, at most {MAX_RESTRICTIONS}")
        try:
            compiled = tuple(Restriction(r, frozenset(names)) for r in restrictions)
        except RestrictionError as exc:
            raise SpaceError(str(exc)) from None
        if self.domain is not None and (not isinstance(self.domain, str) or ":" not in self.domain):
            raise SpaceError(f"domain {self.domain!r} must look like '<kind>:<name>', e.g. 'replay:<dataset>'")
        object.__setattr__(self, "parameters", params)
        object.__setattr__(self, "restrictions", restrictions)
        object.__setattr__(self, "_compiled", compiled)
        object.__setattr__(self, "_value_sets", tuple((p.name, frozenset(p.values)) for p in params))

    def _domain_keys(self) -> frozenset[str] | None:
        if self.domain is None:
            return None
        return resolve_domain(self.domain).keys

    # -- (de)serialisation -------------------------------------------------------------

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DesignSpace:
        """Build from ``{"parameters": [{"name", "values"}...], "restrictions": [str...]}``.

        Raises:
            SpaceError: malformed structure or any validation failure.
        """
        if not isinstance(d, Mapping):
            raise SpaceError("design space must be an object with 'parameters'")
        unknown = set(d) - {"parameters", "restrictions", "domain"}
        if unknown:
            raise SpaceError(f"unknown design space keys: {', '.join(sorted(unknown))}")
        raw = d.get("parameters")
        if not isinstance(raw, list):
            raise SpaceError("'parameters' must be a list of {name, values} objects")
        params = []
        for i, item in enumerate(raw):
            if not isinstance(item, Mapping) or not {"name", "values"} <= set(item) <= {"name", "values", "labels"}:
                raise SpaceError(f"parameters[{i}] must be an object with 'name' and 'values' (and optional 'labels')")
            if not isinstance(item["values"], list | tuple):
                raise SpaceError(f"parameter '{item['name']}': values must be a list")
            params.append(Parameter(item["name"], tuple(item["values"]), item.get("labels")))
        restrictions = d.get("restrictions", [])
        if not isinstance(restrictions, list | tuple) or not all(
            isinstance(r, str) for r in restrictions
        ):
            raise SpaceError("'restrictions' must be a list of strings")
        return cls(tuple(params), tuple(restrictions), d.get("domain"))

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form accepted by :meth:`from_dict`."""
        d: dict[str, Any] = {
            "parameters": [{"name": p.name, "values": list(p.values)}
                           | ({} if p.labels is None else {"labels": list(p.labels)}) for p in self.parameters],
            "restrictions": list(self.restrictions),
        }
        if self.domain is not None:
            d["domain"] = self.domain
        return d

    # -- queries -----------------------------------------------------------------------

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def cartesian_size(self) -> int:
        """Number of points before restrictions (product of value counts; no enumeration)."""
        return math.prod(len(p.values) for p in self.parameters)

    def broken_restrictions(self, params: Mapping[str, Value]) -> list[str]:
        """The restrictions (as written) that ``params`` does not satisfy."""
        return [r.text for r in self._compiled if not r(params)]

    def restriction_failures(self, params: Mapping[str, Value]) -> dict[str, str]:
        """Restriction text -> why it cannot be evaluated at ``params`` (a power over the
        exponent cap, a division by zero), for those that cannot; such a point is invalid."""
        out = {}
        for r in self._compiled:
            why = r.failure(params)
            if why is not None:
                out[r.text] = why
        return out

    def satisfies_restrictions(self, params: Mapping[str, Value]) -> bool:
        """True if every restriction holds (division by zero counts as False)."""
        return all(r(params) for r in self._compiled)

    def contains(self, params: Mapping[str, Value]) -> bool:
        """True if ``params`` names exactly this space's parameters, each value is one of
        the allowed values, and all restrictions hold."""
        if not isinstance(params, Mapping) or set(params) != set(self.names):
            return False
        for p in self.parameters:
            v = params[p.name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v not in p.values:
                return False
        keys = self._domain_keys()
        if keys is not None and point_key(params) not in keys:
            return False
        return self.satisfies_restrictions(params)

    def _in_values(self, point: Mapping[str, Value]) -> bool:
        try:
            return all(point.get(name) in values for name, values in self._value_sets)
        except TypeError:  # an unhashable value is none of the numbers
            return False

    def iter_valid_keyed(self) -> Iterator[tuple[str, dict[str, Value]]]:
        """(:meth:`point_key`, point) of :meth:`iter_valid`'s points, in its order; a domain's
        keys are the ones it holds, not computed again."""
        if self.domain is not None:
            yield from self._valid_in_domain()
            return
        for point in self.iter_valid():
            yield point_key(point), point

    def _valid_in_domain(self) -> Iterator[tuple[str, dict[str, Value]]]:
        """(key, point) of the domain's points that take this space's values and meet its restrictions."""
        found = resolve_domain(self.domain)
        for point, key in zip(found.points, found.point_keys):
            if self._in_values(point) and self.satisfies_restrictions(point):
                yield key, dict(point)

    def iter_valid(self) -> Iterator[dict[str, Value]]:
        """All valid points: the domain's in recorded order, else lexicographic (small spaces only)."""
        if self.domain is not None:
            yield from (point for _, point in self._valid_in_domain())
            return
        for combo in itertools.product(*(p.values for p in self.parameters)):
            point = dict(zip(self.names, combo))
            if self.satisfies_restrictions(point):
                yield point

    def sample(
        self, rng: np.random.Generator, n: int, exclude: Iterable[str] = frozenset()
    ) -> list[dict[str, Value]]:
        """Up to ``n`` distinct valid points, none of whose :func:`point_key` is in ``exclude``.

        Small spaces (<= 50,000 points) are enumerated and sampled without replacement;
        larger ones use rejection sampling with at most ``200 * n + 1000`` tries, so a
        space whose valid fraction is tiny may return fewer than ``n`` points.

        Args:
            rng: source of randomness (``numpy.random.default_rng(seed)``).
            n: maximum number of points.
            exclude: point keys to skip (e.g. already evaluated points).

        Raises:
            TypeError: ``n`` is not an integer.
        """
        n = operator.index(n)  # TypeError for 1.5: a count of points
        exclude = set(exclude)
        if n <= 0 or not self.parameters:
            return []
        if self.domain is not None:
            d = resolve_domain(self.domain)
            # Value and restriction checks only when directions narrowed the recorded space.
            narrowed = any(set(p.values) != d.values.get(p.name, set()) for p in self.parameters)
            # The first n acceptable points of a random order: a uniform sample without
            # replacement that checks only the points it walks past, not the whole domain.
            out = []
            for i in rng.permutation(len(d.points)).tolist():
                pt = d.points[i]
                if (d.point_keys[i] in exclude or (narrowed and not self._in_values(pt))
                        or (self._compiled and not self.satisfies_restrictions(pt))):
                    continue
                out.append(dict(pt))
                if len(out) == n:
                    break
            return out
        if self.cartesian_size() <= _ENUMERATE_LIMIT:
            pool = [p for p in self.iter_valid() if point_key(p) not in exclude]
            if len(pool) <= n:
                order = rng.permutation(len(pool))
            else:
                order = rng.choice(len(pool), size=n, replace=False)
            return [pool[int(i)] for i in order]
        out: list[dict[str, Value]] = []
        seen = set(exclude)
        sizes = [len(p.values) for p in self.parameters]
        for _ in range(200 * n + 1000):
            idx = [int(rng.integers(s)) for s in sizes]
            point = {p.name: p.values[i] for p, i in zip(self.parameters, idx)}
            key = point_key(point)
            if key in seen or not self.satisfies_restrictions(point):
                continue
            seen.add(key)
            out.append(point)
            if len(out) == n:
                break
        return out

    def point_key(self, params: Mapping[str, Value]) -> str:
        """Canonical key of a point; see :func:`point_key`."""
        return point_key(params)

    def defines(self, params: Mapping[str, Value]) -> str:
        """``#define NAME value\\n`` lines in parameter order.

        Raises:
            SpaceError: a parameter of this space is missing from ``params``.
        """
        missing = [n for n in self.names if n not in params]
        if missing:
            raise SpaceError(f"missing parameter values: {', '.join(missing)}")
        return format_defines(params, order=self.names)
