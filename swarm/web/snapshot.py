"""The run page's snapshot: a run's candidates as compact columns, plus what the page shows.

A run can hold 50,000 candidates, so the snapshot is columnar (one array per field, agents and
statuses as small integer codes, parameters and metrics as one array each, numbers printed with
six significant digits) and is written as JSON text directly instead of through dicts of
dicts: about 60 bytes per candidate. Only whole-run metrics are sent (``latency_ms``, not the
per-shape ``latency_ms[<shape>]``); the candidate page has the rest.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.db import connection
from django.utils import timezone

from swarm.learning import store as insight_store
from swarm.models import PENDING_STATUSES, CandidateStatus, Generation, Run
from swarm.runs.noise_floors import tied_with_best
from swarm.runs.progress import run_state
from swarm.web import display

# Whole-run metrics always sent when present (objectives and constraint metrics are added).
# GFLOP/s and % of roofline are, like GB/s, the inverse of the latency for a fixed workload and
# shape set: one of them is enough for the charts (the candidate page has them all).
CORE_METRICS = ("latency_ms", "max_rel_error", "gbps")
METRIC_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
SHARE_HISTORY = 300  # generations of budget shares sent (the newest)

# Direction of each known metric, for frontier and convergence on any pair of axes.
MAXIMIZE = frozenset({"gbps", "gflops", "roofline_pct", "gflops_per_w"})


def metric_names(run: Run) -> list[str]:
    """Whole-run metrics of ``run`` worth sending: objectives, constraint metrics and the core
    metrics the newest ``ok`` evidence has (with the workload's throughput metric,
    :func:`swarm.web.display.throughput`)."""
    goal = run.goal
    names = [o["metric"] for o in goal.objectives] + [c["metric"] for c in run.constraints]
    sample = (
        run.candidates.filter(status=CandidateStatus.OK, evidence__isnull=False)
        .order_by("-id").values_list("evidence__metrics", flat=True).first()
    ) or {}
    core = [*CORE_METRICS, display.throughput(goal.workload)["metric"]]
    names += [m for m in core if m in sample or m in names]
    out: list[str] = []
    for n in names:
        if METRIC_NAME.match(n) and n not in out:
            out.append(n)
    return out


def _num(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return f"{v:.6g}" if math.isfinite(v) else "null"
    return "null"


def run_meta(run: Run) -> dict[str, Any]:
    """Everything the run page shows besides the candidates (small). ``ties``: the noise floor
    of the goal's target and the candidates tied with the best
    (:func:`swarm.runs.noise_floors.tied_with_best`); the page marks them "tied with best".
    ``running``: the candidates being evaluated now (``Candidate.to_dict()``, with
    ``started_at``: when its worker claimed it), oldest first; the page shows each with its
    elapsed time and a cancel button."""
    goal = run.goal
    generations = list(
        Generation.objects.filter(run=run).order_by("-number")
        .values("number", "shares", "improvements", "started_at", "finished_at")[:SHARE_HISTORY]
    )
    generations.reverse()
    for g in generations:
        g["started_at"] = g["started_at"].isoformat() if g["started_at"] else None
        g["finished_at"] = g["finished_at"].isoformat() if g["finished_at"] else None
    return {
        "run": run_state(run),
        "started_at": run.started_at.isoformat(),
        "finished_at": run.finished_at.isoformat() if run.finished_at else None,
        "objectives": goal.objectives,
        "constraints": run.constraints,
        "space": run.space,
        "labels": run.label_space()["parameters"],  # what labelled values stand for
        "agents": [a.to_dict() for a in run.agents.all()],
        "generations": generations,
        "insights": insight_store.latest_insights(goal.workload, goal.target),
        "directions": [d.to_dict() for d in run.directions.select_related("author").order_by("created_at", "id")],
        "ties": tied_with_best(run),
        "running": [c.to_dict() for c in run.candidates.filter(status=CandidateStatus.RUNNING)
                    .select_related("evidence").order_by("claimed_at", "id")],
    }


def columnar_snapshot_json(run: Run) -> str:
    """The run page's snapshot as JSON text (see the module docstring).

    Shape::

        {"meta": run_meta(run),
         "columns": {"n": N, "id": [...], "gen": [...], "agent": [codes], "status": [codes],
                     "t": [seconds since the run started, or null while pending],
                     "params": {name: [...]}, "metrics": {name: [...]},
                     "agents": [names], "statuses": [names]}}

    On SQLite and PostgreSQL the columns are aggregated by the database into JSON array text
    (50,000 candidates in about a second on a small host), and the part made of finished
    candidates is kept in memory (:class:`_SegmentCache`): finished evidence never changes, so
    the next snapshot of the run only queries the candidates after it. Elsewhere row by row.
    """
    meta = run_meta(run)
    metrics = metric_names(run)
    params = [p["name"] for p in run.space.get("parameters", []) if METRIC_NAME.match(p["name"])]
    vendor = connection.vendor
    if vendor in ("sqlite", "postgresql"):
        cols = _cached_columns(run, params, metrics, vendor).to_json()
    else:
        cols = _columns_python(run, params, metrics)
    return '{"meta":' + json.dumps(meta) + ',"columns":' + cols + "}"


@dataclass
class _Segment:
    """Columns of a run's candidates with ids in ``(lo, hi]``, as comma-joined number text."""

    hi: int
    n: int
    ids: str
    gens: str
    agents: list[str]
    statuses: list[str]
    times: str
    params: dict[str, str]
    metrics: dict[str, str]

    def __add__(self, other: _Segment) -> _Segment:
        def cat(a: str, b: str) -> str:
            return a + "," + b if a and b else a or b

        return _Segment(
            max(self.hi, other.hi), self.n + other.n, cat(self.ids, other.ids), cat(self.gens, other.gens),
            self.agents + other.agents, self.statuses + other.statuses, cat(self.times, other.times),
            {k: cat(v, other.params[k]) for k, v in self.params.items()},
            {k: cat(v, other.metrics[k]) for k, v in self.metrics.items()},
        )

    def to_json(self) -> str:
        return _assemble(self.n, self.ids, self.gens, self.agents, self.statuses, self.times, self.params, self.metrics)


class _SegmentCache:
    """The columns of each run's stable prefix (finished candidates, no pending one before them,
    older than :data:`STABLE_AFTER_S`), for the :data:`CACHED_RUNS` most recent runs of this
    process. Thread-safe; a lost entry only costs one slower snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple, _Segment] = OrderedDict()

    def get(self, key: tuple) -> _Segment | None:
        with self._lock:
            seg = self._entries.get(key)
            if seg is not None:
                self._entries.move_to_end(key)
            return seg

    def put(self, key: tuple, seg: _Segment) -> None:
        with self._lock:
            self._entries[key] = seg
            self._entries.move_to_end(key)
            while len(self._entries) > CACHED_RUNS:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()


CACHED_RUNS = 8
CACHE_MIN_ROWS = 500  # extend the cached prefix once this many more candidates are stable
STABLE_AFTER_S = 60  # a candidate created this long ago is past any concurrent insert
_cache = _SegmentCache()


def _cached_columns(run: Run, params: list[str], metrics: list[str], vendor: str) -> _Segment:
    key = (connection.alias, connection.settings_dict.get("NAME"), run.pk, run.started_at, tuple(params), tuple(metrics))
    seg = _cache.get(key) or _empty(params, metrics)
    qs = run.candidates.filter(id__gt=seg.hi)
    unstable = [
        qs.filter(status__in=PENDING_STATUSES).order_by("id").values_list("id", flat=True).first(),
        qs.filter(created_at__gte=timezone.now() - timedelta(seconds=STABLE_AFTER_S)).order_by("id")
        .values_list("id", flat=True).first(),
    ]
    bounds = [b for b in unstable if b is not None]
    stable = qs.filter(id__lt=min(bounds)) if bounds else qs
    if stable.count() >= CACHE_MIN_ROWS:
        stable_hi = stable.order_by("-id").values_list("id", flat=True).first()
        seg = seg + _query_segment(run, params, metrics, vendor, seg.hi, stable_hi)
        _cache.put(key, seg)
    return seg + _query_segment(run, params, metrics, vendor, seg.hi, None)


def _empty(params: list[str], metrics: list[str]) -> _Segment:
    return _Segment(0, 0, "", "", [], [], "", {p: "" for p in params}, {m: "" for m in metrics})


def _query_segment(run: Run, params: list[str], metrics: list[str], vendor: str, lo: int, hi: int | None) -> _Segment:
    """One statement: the columns of the run's candidates with ``lo < id <= hi``."""
    pending = tuple(PENDING_STATUSES)
    where = "c.run_id = %s AND c.id > %s" + (" AND c.id <= %s" if hi is not None else "")
    where_args = [run.pk, lo] + ([hi] if hi is not None else [])
    if vendor == "sqlite":
        inner = [
            "c.id AS id", "c.generation AS gen", "c.agent AS agent", "c.status AS status",
            "CASE WHEN c.evaluated_at IS NULL OR c.status IN (%s, %s) THEN NULL "
            "ELSE (julianday(c.evaluated_at) - julianday(%s)) * 86400.0 END AS t",
        ]
        args: list = [*pending, connection.ops.adapt_datetimefield_value(run.started_at)]
        for i, name in enumerate(params):
            inner.append(f"json_extract(c.params, '$.\"{name}\"') AS p{i}")
        for i, name in enumerate(metrics):
            inner.append(f"json_extract(e.metrics, '$.\"{name}\"') AS m{i}")
        outer = [
            "count(*)", "max(id)", "group_concat(id, ',')", "group_concat(gen, ',')",
            "group_concat(agent, char(31))", "group_concat(status, char(31))",
            "group_concat(CASE WHEN t IS NULL THEN 'null' ELSE printf('%%.1f', t) END, ',')",
        ]
        outer += [f"group_concat(CASE WHEN typeof(p{i}) IN ('integer', 'real') THEN p{i} ELSE 'null' END, ',')"
                  for i in range(len(params))]
        outer += [f"group_concat(CASE WHEN typeof(m{i}) IN ('integer', 'real') THEN printf('%%.6g', m{i}) ELSE 'null' END, ',')"
                  for i in range(len(metrics))]
        sql = (f"SELECT {', '.join(outer)} FROM (SELECT {', '.join(inner)} FROM swarm_candidate c "
               f"LEFT JOIN swarm_evidence e ON e.candidate_id = c.id WHERE {where} ORDER BY c.id)")
        args += where_args
    else:
        order = " ORDER BY c.id"
        num = "'^-?[0-9]'"  # a JSON number (not null, a string or an object)
        outer = [
            "count(*)", "max(c.id)", f"string_agg(c.id::text, ','{order})", f"string_agg(c.generation::text, ','{order})",
            f"string_agg(c.agent, chr(31){order})", f"string_agg(c.status, chr(31){order})",
            "string_agg(CASE WHEN c.evaluated_at IS NULL OR c.status IN (%s, %s) THEN 'null' ELSE "
            f"round(extract(epoch FROM c.evaluated_at - %s)::numeric, 1)::text END, ','{order})",
        ]
        args = [*pending, run.started_at]
        for name in params:
            outer.append(f"string_agg(CASE WHEN c.params->>%s ~ {num} THEN c.params->>%s ELSE 'null' END, ','{order})")
            args += [name, name]
        for name in metrics:
            outer.append(f"string_agg(CASE WHEN e.metrics->>%s ~ {num} THEN ((e.metrics->>%s)::float8)::text "
                         f"ELSE 'null' END, ','{order})")
            args += [name, name]
        sql = (f"SELECT {', '.join(outer)} FROM swarm_candidate c LEFT JOIN swarm_evidence e ON e.candidate_id = c.id "
               f"WHERE {where}")
        args += where_args
    with connection.cursor() as cur:
        cur.execute(sql, args)
        row = cur.fetchone()
    n = row[0] or 0
    if not n:
        return _Segment(hi or lo, 0, "", "", [], [], "", {p: "" for p in params}, {m: "" for m in metrics})
    k = len(params)
    return _Segment(hi if hi is not None else row[1], n, row[2], row[3], row[4].split("\x1f"), row[5].split("\x1f"),
                    row[6], dict(zip(params, row[7:7 + k])), dict(zip(metrics, row[7 + k:])))


def _assemble(n: int, ids: str, gens: str, agents_raw: list[str], statuses_raw: list[str], times: str,
              params: dict[str, str], metrics: dict[str, str]) -> str:
    """JSON text of the columns from comma-joined number lists and agent/status names."""
    agent_codes: dict[str, int] = {}
    status_codes: dict[str, int] = {s: i for i, s in enumerate(CandidateStatus.values)}
    agents = ",".join(str(agent_codes.setdefault(a, len(agent_codes))) for a in agents_raw)
    statuses = ",".join(str(status_codes.setdefault(s, len(status_codes))) for s in statuses_raw)
    parts = [
        f'"n":{n}', f'"id":[{ids}]', f'"gen":[{gens}]', f'"agent":[{agents}]', f'"status":[{statuses}]',
        f'"t":[{times}]',
        '"params":{' + ",".join(f"{json.dumps(k)}:[{v}]" for k, v in params.items()) + "}",
        '"metrics":{' + ",".join(f"{json.dumps(k)}:[{v}]" for k, v in metrics.items()) + "}",
        f'"agents":{json.dumps(list(agent_codes))}', f'"statuses":{json.dumps(list(status_codes))}',
    ]
    return "{" + ",".join(parts) + "}"


def _columns_python(run: Run, params: list[str], metrics: list[str]) -> str:
    fields = ["id", "generation", "agent", "status", "params", "evaluated_at"] + [f"evidence__metrics__{m}" for m in metrics]
    ids, gens, agents, statuses, times = [], [], [], [], []
    pcols: dict[str, list[str]] = {n: [] for n in params}
    mcols: list[list[str]] = [[] for _ in metrics]
    pending = set(PENDING_STATUSES)
    for row in run.candidates.order_by("id").values_list(*fields).iterator(chunk_size=5000):
        cid, gen, agent, status, p, at = row[:6]
        ids.append(str(cid))
        gens.append(str(gen))
        agents.append(agent)
        statuses.append(status)
        times.append(f"{(at - run.started_at).total_seconds():.1f}" if at is not None and status not in pending else "null")
        for name, col in pcols.items():
            col.append(_num((p or {}).get(name)))
        for col, v in zip(mcols, row[6:]):
            col.append(_num(v))
    return _assemble(len(ids), ",".join(ids), ",".join(gens), agents, statuses, ",".join(times),
                     {k: ",".join(v) for k, v in pcols.items()}, {k: ",".join(v) for k, v in zip(metrics, mcols)})
