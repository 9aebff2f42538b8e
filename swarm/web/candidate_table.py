"""The candidate table of a run: every candidate, sorted, filtered and paginated by the
database, with the columns the engineer chose.

Columns are the candidate's fields (``id``, ``generation``, ``agent``, ``status``,
``evaluated_at``), the parameters of the run's design space and the run's whole-run metrics
(the objectives, the constraint metrics and every metric of the newest ``ok`` evidence that is
not per shape). Metrics that :data:`swarm.models.STORED_METRICS` keeps as evidence columns are
sorted and filtered on those columns; the others, and parameters, on the JSON values
(:class:`JsonValue`). The run's candidates are reached through the ``(run, status)`` index,
sorted by ids only and cut with ``LIMIT``/``OFFSET``; then the page's rows are read by id, so
a page of a 50,000-candidate run reads the JSON of the page's rows only
(``benchmarks/candidate_table.py``).

Query parameters (:func:`parse`; a bad one raises :class:`TableError` naming it):

- ``columns``: comma-separated column names (default: fields, objectives, the throughput
  metric, constraint metrics, parameters);
- ``sort``: comma-separated column names, ``-`` in front for descending (default ``id``);
  missing values sort last either way, ties by ``id``;
- ``status``, ``agent``: comma-separated values, any of which matches;
- ``range.<column>``: ``lo..hi`` (either side may be empty) on a numeric column, inclusive;
- ``limit`` (1 to :data:`MAX_LIMIT`, default :data:`DEFAULT_LIMIT`), ``offset`` (>= 0).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db.models import F, FloatField, Func, QuerySet, TextField

from kernels.space import label_text, labels_of
from swarm.models import STORED_METRICS, CandidateStatus, Run
from swarm.web import display

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
FIELDS = ("id", "generation", "agent", "status", "evaluated_at")
NUMERIC_FIELDS = ("id", "generation")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
KNOWN_PARAMS = ("columns", "sort", "status", "agent", "limit", "offset")
RANGE_PREFIX = "range."


class TableError(ValueError):
    """A bad query parameter: ``param`` names it, the message says why."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Column:
    """One column: ``kind`` is ``field``, ``param`` or ``metric``; ``unit`` as
    :func:`swarm.web.display.unit_of`; ``numeric`` when it can be range-filtered."""

    name: str
    kind: str
    unit: str = ""
    numeric: bool = True

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "unit": self.unit, "numeric": self.numeric}


@dataclass
class Query:
    """A parsed table request (see the module docstring)."""

    columns: list[Column]
    sort: list[tuple[Column, bool]]  # (column, descending)
    statuses: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    ranges: list[tuple[Column, float | None, float | None]] = field(default_factory=list)
    limit: int = DEFAULT_LIMIT
    offset: int = 0
    available: dict[str, Column] = field(default_factory=dict)
    known_agents: list[str] = field(default_factory=list)


def metric_names(run: Run) -> list[str]:
    """Whole-run metrics of ``run``: objectives, constraint metrics, then the keys of the newest
    ``ok`` evidence without a ``[shape]`` suffix, each once, in that order."""
    goal = run.goal
    names = [o["metric"] for o in goal.objectives] + [c["metric"] for c in run.constraints or []]
    sample = (
        run.candidates.filter(status=CandidateStatus.OK, evidence__isnull=False)
        .order_by("-id").values_list("evidence__metrics", flat=True).first()
    ) or {}
    names += sorted(k for k, v in sample.items() if isinstance(v, (int, float)) and not isinstance(v, bool))
    out: list[str] = []
    for n in names:
        if NAME.match(n) and n not in out:
            out.append(n)
    return out


def available_columns(run: Run) -> dict[str, Column]:
    """Every column of the run's table by name: fields, parameters, metrics."""
    cols = {name: Column(name, "field", "", name in NUMERIC_FIELDS) for name in FIELDS}
    for p in (run.space or {}).get("parameters", []):
        name = p["name"]
        if NAME.match(name) and name not in cols:
            values = p.get("values") or []
            numeric = bool(values) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values)
            cols[name] = Column(name, "param", display.unit_of(name), numeric)
    for name in metric_names(run):
        if name not in cols:
            cols[name] = Column(name, "metric", display.unit_of(name), True)
    return cols


def default_columns(run: Run, cols: dict[str, Column]) -> list[Column]:
    """Fields, objectives, the workload's throughput metric, constraint metrics, parameters."""
    goal = run.goal
    names = ["id", "generation", "agent", "status"] + [o["metric"] for o in goal.objectives]
    names += [display.throughput(goal.workload)["metric"]] + [c["metric"] for c in run.constraints or []]
    names += [n for n, c in cols.items() if c.kind == "param"]
    out: list[Column] = []
    for n in names:
        if n in cols and cols[n] not in out:
            out.append(cols[n])
    return out


def _one(params: Mapping[str, Any], name: str) -> str:
    v = params.get(name)
    if isinstance(v, (list, tuple)):
        v = v[-1] if v else ""
    return "" if v is None else str(v).strip()


def _names(raw: str) -> list[str]:
    return [n.strip() for n in raw.split(",") if n.strip()]


def _column(cols: dict[str, Column], name: str, param: str) -> Column:
    if name not in cols:
        raise TableError(param, f"unknown column {name!r}; columns: {', '.join(cols)}")
    return cols[name]


def _int(raw: str, param: str, default: int, lo: int, hi: int | None = None) -> int:
    if raw == "":
        return default
    try:
        v = int(raw)
    except ValueError:
        raise TableError(param, f"expected an integer, got {raw!r}") from None
    if v < lo or (hi is not None and v > hi):
        raise TableError(param, f"expected an integer from {lo}" + (f" to {hi}" if hi is not None else "") + f", got {v}")
    return v


def _bound(raw: str, param: str) -> float | None:
    raw = raw.strip()
    if raw == "":
        return None
    try:
        v = float(raw)
    except ValueError:
        raise TableError(param, f"expected a number, got {raw!r}") from None
    if not math.isfinite(v):
        raise TableError(param, f"expected a finite number, got {raw!r}")
    return v


def parse(run: Run, params: Mapping[str, Any]) -> Query:
    """The table request in ``params`` (a query dict: a value or a list of values per key).

    Raises:
        TableError: an unknown parameter or column, a status that does not exist, an agent
            that proposed no candidate of the run, a range that is not ``lo..hi`` of numbers
            with ``lo <= hi`` or on a non-numeric column, a bad ``limit`` or ``offset``.
    """
    cols = available_columns(run)
    for key in params:
        if key not in KNOWN_PARAMS and not key.startswith(RANGE_PREFIX):
            raise TableError(key, f"unknown query parameter {key!r}; known: {', '.join(KNOWN_PARAMS)}, range.<column>")
    raw_cols = _names(_one(params, "columns"))
    columns = [_column(cols, n, "columns") for n in dict.fromkeys(raw_cols)] if raw_cols else default_columns(run, cols)
    sort: list[tuple[Column, bool]] = []
    for item in _names(_one(params, "sort")) or ["id"]:
        desc = item.startswith("-")
        sort.append((_column(cols, item.lstrip("-"), "sort"), desc))
    statuses = _names(_one(params, "status"))
    known_agents = agents_of(run)
    for s in statuses:
        if s not in CandidateStatus.values:
            raise TableError("status", f"unknown status {s!r}; statuses: {', '.join(CandidateStatus.values)}")
    agents = _names(_one(params, "agent"))
    if agents:
        unknown = [a for a in agents if a not in known_agents and not run.candidates.filter(agent=a).exists()]
        if unknown:
            raise TableError("agent", f"no candidate of run {run.pk} comes from {', '.join(map(repr, unknown))}; "
                                      f"agents: {', '.join(known_agents) or 'none yet'}")
    ranges = []
    for key in params:
        if not key.startswith(RANGE_PREFIX):
            continue
        col = _column(cols, key[len(RANGE_PREFIX):], key)
        if not col.numeric:
            hint = f"; filter it with {col.name}=a,b" if col.name in KNOWN_PARAMS else ""
            raise TableError(key, f"{col.name} is not numeric: a range needs a numeric column{hint}")
        text = _one(params, key)
        if ".." not in text:
            raise TableError(key, f"expected lo..hi (either side may be empty), got {text!r}")
        lo_raw, hi_raw = text.split("..", 1)
        lo, hi = _bound(lo_raw, key), _bound(hi_raw, key)
        if lo is not None and hi is not None and lo > hi:
            raise TableError(key, f"empty range: {lo:g} > {hi:g}")
        if lo is not None or hi is not None:
            ranges.append((col, lo, hi))
    return Query(columns=columns, sort=sort, statuses=statuses, agents=agents, ranges=ranges,
                 limit=_int(_one(params, "limit"), "limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
                 offset=_int(_one(params, "offset"), "offset", 0, 0), available=cols, known_agents=known_agents)


class JsonValue(Func):
    """The value of key ``key`` of a JSON column, for sorting and comparing: a float when
    ``numeric`` (NULL when missing or not a number), else text. One ``json_extract`` on SQLite
    (native SQL values: numbers sort as numbers), ``->>`` on PostgreSQL (cast when it reads as a
    number); cheaper than Django's key transforms, which test the JSON type of every row."""

    def __init__(self, column: str, key: str, numeric: bool) -> None:
        if not NAME.match(key):
            raise ValueError(f"not a column name: {key!r}")
        self.key, self.numeric = key, numeric
        super().__init__(F(column), output_field=FloatField() if numeric else TextField())

    def as_sqlite(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        return f"json_extract({sql}, %s)", [*params, f'$."{self.key}"']

    def as_postgresql(self, compiler, connection, **extra):
        sql, params = compiler.compile(self.source_expressions[0])
        if not self.numeric:
            return f"({sql} ->> %s)", [*params, self.key]
        return (f"(CASE WHEN ({sql} ->> %s) ~ '^-?[0-9]' THEN ({sql} ->> %s)::float8 END)",
                [*params, self.key, *params, self.key])

    def as_sql(self, compiler, connection, **extra):
        raise NotImplementedError(f"the candidate table needs SQLite or PostgreSQL, not {connection.vendor}")


def _expr(col: Column):
    if col.kind == "field":
        return F(col.name)
    if col.kind == "metric":
        if col.name in STORED_METRICS:
            return F(f"evidence__{col.name}")
        return JsonValue("evidence__metrics", col.name, True)
    return JsonValue("params", col.name, col.numeric)


def queryset(run: Run, q: Query) -> QuerySet:
    """The run's candidates matching ``q``'s filters, in ``q``'s order (not cut)."""
    qs = run.candidates.order_by()
    if q.statuses:
        qs = qs.filter(status__in=q.statuses)
    if q.agents:
        qs = qs.filter(agent__in=q.agents)
    for i, (col, lo, hi) in enumerate(q.ranges):
        qs = qs.annotate(**{f"r{i}": _expr(col)})
        if lo is not None:
            qs = qs.filter(**{f"r{i}__gte": lo})
        if hi is not None:
            qs = qs.filter(**{f"r{i}__lte": hi})
    order = []
    for i, (col, desc) in enumerate(q.sort):
        if col.name == "id":
            order.append(F("id").desc() if desc else F("id").asc())
            continue
        qs = qs.annotate(**{f"s{i}": _expr(col)})
        order.append(F(f"s{i}").desc(nulls_last=True) if desc else F(f"s{i}").asc(nulls_last=True))
    if not any(col.name == "id" for col, _ in q.sort):
        order.append(F("id").asc())
    return qs.order_by(*order)


def _value(col: Column, row: tuple) -> Any:
    cid, gen, agent, status, at, params, metrics = row
    if col.kind == "field":
        return {"id": cid, "generation": gen, "agent": agent, "status": status,
                "evaluated_at": at.isoformat() if at else None}[col.name]
    v = (params or {}).get(col.name) if col.kind == "param" else (metrics or {}).get(col.name)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _text(col: Column, v: Any) -> str:
    if v is None:
        return ""
    if col.kind == "metric":
        return display.with_unit(col.name, v)
    if col.kind == "param":
        return display.with_unit(col.name, v) if isinstance(v, float) else str(v)
    return str(v)


def page(run: Run, q: Query) -> dict[str, Any]:
    """One page of the table.

    Returns:
        ``{"run", "count" (rows matching the filters), "limit", "offset", "sort" (names,
        ``-`` for descending), "columns" ([Column.to_dict()]), "rows" ([{"id", "values":
        {column: value}, "text": {column: value with unit and 4 significant digits, a labelled
        parameter's label}}]),
        "available" (every column), "statuses" (every status), "agents" (:func:`agents_of`),
        "default" (the default columns' names)}``.
    """
    qs = queryset(run, q)
    count = qs.count()
    # the sort carries only ids; the page's rows (with their JSON) are read by id afterwards
    ids = list(qs.values_list("id", flat=True)[q.offset:q.offset + q.limit])
    fields = ("id", "generation", "agent", "status", "evaluated_at", "params", "evidence__metrics")
    by_id = {row[0]: row for row in run.candidates.filter(id__in=ids).order_by().values_list(*fields)}
    rows = []
    labelled = run.label_space()
    for row in (by_id[i] for i in ids):
        values = {c.name: _value(c, row) for c in q.columns}
        text = {c.name: _text(c, values[c.name]) for c in q.columns}
        # a labelled parameter sorts and filters by its value and reads as its label
        text.update((k, label_text(v)) for k, v in labels_of(labelled, {c.name: values[c.name] for c in q.columns if c.kind == "param"}).items())
        rows.append({"id": row[0], "values": values, "text": text})
    return {
        "run": run.pk, "count": count, "limit": q.limit, "offset": q.offset,
        "sort": [("-" if desc else "") + col.name for col, desc in q.sort],
        "columns": [c.to_dict() for c in q.columns], "rows": rows,
        "available": [c.to_dict() for c in q.available.values()], "statuses": list(CandidateStatus.values),
        "agents": q.known_agents, "default": [c.name for c in default_columns(run, q.available)],
    }


def agents_of(run: Run) -> list[str]:
    """The agents of ``run`` (its agent records; candidates' agents when it has none), sorted."""
    names = set(run.agents.values_list("name", flat=True))
    return sorted(names or set(run.candidates.order_by().values_list("agent", flat=True).distinct()))
