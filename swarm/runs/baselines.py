"""Baseline latencies per (workload, target, shape set), measured once and stored.

Every speedup the factory shows (goal list, run page, run summary and ``factory run --json``,
the API) is :func:`speedup`: the stored :class:`Baseline` of the key divided by a latency, with
the baseline's date and host, so that one run has one speedup wherever it appears. The
baseline is a plain implementation (``kernels.baselines``: NumPy float32 on the CPU). Timing
it takes seconds and must happen on the target's hardware, so creating a goal or starting its
run only *asks* for it (:func:`ensure`): :func:`lookup` returns what is stored and enqueues
:func:`measure` on the target's queue for keys never measured (or whose measurement was lost).
Pages never time anything; :func:`measure` times a key once (a row already ``ok`` is kept).
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterable, Mapping
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

import kernels
from kernels.backends import capabilities
from kernels.baselines import baseline_latency_ms
from swarm.models import Baseline, Goal, Run, target_backend
from swarm.runs.dispatch import EMBEDDED_QUEUE, MEASURE_BASELINE, send_on_commit

log = logging.getLogger(__name__)

# A measurement not finished after this long is presumed lost (worker restarted) and re-asked.
STALE_AFTER = timedelta(minutes=15)
METHOD = "NumPy float32 (kernels.baselines.baseline_latency_ms), timed like candidates"


def available(workload: str, target: str) -> str | None:
    """Why no baseline can exist for (workload, target), or None when one can be measured."""
    try:
        backend = target_backend(target)
    except ValueError as exc:
        return str(exc)
    if not capabilities(backend).measures_baseline:
        return f"no baseline on {target}: the NumPy baselines run on the CPU"
    try:
        wl = kernels.get_workload(workload)
    except KeyError:
        return f"no NumPy baseline for {workload}"
    return None if wl.numpy_baseline is not None else f"no NumPy baseline for {workload}"


def lookup(goals: Iterable[Goal], *, schedule: bool = True) -> dict[tuple[str, str, str], Baseline]:
    """Stored baselines of the goals' keys; with ``schedule``, ask for the missing ones.

    Returns:
        ``{(workload, target, shape_set): Baseline}`` for every key with a row (a row in
        state ``measuring`` has no latency yet).
    """
    keys = {(g.workload, g.target, g.shape_set) for g in goals}
    if not keys:
        return {}
    rows = {
        (b.workload, b.target, b.shape_set): b
        for b in Baseline.objects.filter(workload__in={k[0] for k in keys}, target__in={k[1] for k in keys})
        if (b.workload, b.target, b.shape_set) in keys
    }
    if schedule:
        now = timezone.now()
        for key in keys:
            b = rows.get(key)
            if b is None:
                b = _request(*key)
                if b is not None:
                    rows[key] = b
            elif b.state == Baseline.State.MEASURING and b.requested_at < now - STALE_AFTER:
                if Baseline.objects.filter(pk=b.pk, requested_at=b.requested_at).update(requested_at=now):
                    _enqueue(b)
    return rows


def key_of(goal: Goal) -> tuple[str, str, str]:
    return (goal.workload, goal.target, goal.shape_set)


def ensure(goal: Goal) -> Baseline | None:
    """The goal's stored baseline, asked for (enqueued after commit) when it has none yet.
    Called when a goal is created and when a run of it starts."""
    return lookup([goal], schedule=True).get(key_of(goal))


def describe(b: Baseline | None) -> dict | None:
    """A stored baseline for JSON: ``{name, state, latency_ms, method, detail, measured_at
    (ISO 8601 or None), host}``; None without a row."""
    if b is None:
        return None
    return {"name": "numpy", "state": b.state, "latency_ms": b.latency_ms, "method": b.method, "detail": b.detail,
            "measured_at": b.measured_at.isoformat() if b.measured_at else None, "host": host(b)}


def host(b: Baseline) -> str:
    """The host that timed the baseline (its fingerprint's ``host``), or "" when unknown."""
    return str((b.fingerprint or {}).get("host") or "")


def speedup(goal_or_run: Goal | Run, latency_ms: float | None, *,
            rows: Mapping[tuple[str, str, str], Baseline] | None = None) -> dict | None:
    """The speedup of ``latency_ms`` over the stored baseline of the goal's (or run's goal's) key.

    Args:
        goal_or_run: a :class:`Goal` or a :class:`Run` (its goal's key).
        latency_ms: a candidate's ``latency_ms``.
        rows: baselines already read by :func:`lookup` (pages with many goals); the
            database otherwise.

    Returns:
        ``{speedup, baseline_ms, measured_at, host}`` (``speedup`` = baseline / latency,
        ``measured_at`` a datetime) when the baseline is measured and the latency positive;
        None otherwise (no row yet, still measuring, unavailable, no latency).
    """
    goal = goal_or_run.goal if isinstance(goal_or_run, Run) else goal_or_run
    key = key_of(goal)
    if rows is not None:
        b = rows.get(key)
    else:
        b = Baseline.objects.filter(workload=key[0], target=key[1], shape_set=key[2]).first()
    if b is None or b.state != Baseline.State.OK or not b.latency_ms:
        return None
    if not isinstance(latency_ms, (int, float)) or not latency_ms > 0:
        return None
    return {"speedup": b.latency_ms / latency_ms, "baseline_ms": b.latency_ms, "measured_at": b.measured_at,
            "host": host(b)}


def _request(workload: str, target: str, shape_set: str) -> Baseline | None:
    why_not = available(workload, target)
    try:
        with transaction.atomic():
            b = Baseline.objects.create(
                workload=workload, target=target, shape_set=shape_set,
                state=Baseline.State.UNAVAILABLE if why_not else Baseline.State.MEASURING,
                detail=why_not or "", method="" if why_not else METHOD,
            )
    except IntegrityError:  # another request created it meanwhile
        return Baseline.objects.filter(workload=workload, target=target, shape_set=shape_set).first()
    if not why_not:
        _enqueue(b)
    return b


def _enqueue(b: Baseline) -> None:
    send_on_commit(MEASURE_BASELINE, b.pk, queue=EMBEDDED_QUEUE if settings.EMBEDDED else f"target.{b.target}")


def measure(baseline_id: int, *, timer=None) -> Baseline:
    """Time the baseline of a stored key on this host and store the result.

    Args:
        baseline_id: primary key of a :class:`Baseline`.
        timer: ``(workload, shape_set) -> latency_ms``; default
            ``kernels.baselines.baseline_latency_ms`` (injectable for tests).

    Returns:
        The updated row: ``ok`` with ``latency_ms``, or ``unavailable`` with the reason; a row
        already ``ok`` unchanged.
    """
    b = Baseline.objects.get(pk=baseline_id)
    if b.state == Baseline.State.OK:  # measured once: a repeated task keeps the figure
        return b
    if timer is None:
        timer = baseline_latency_ms
    try:
        latency = float(timer(b.workload, b.shape_set))
    except Exception as exc:  # noqa: BLE001 - recorded on the row, shown on the page
        log.warning("baseline %s/%s/%s unavailable: %s", b.workload, b.target, b.shape_set, exc)
        b.state, b.detail, b.latency_ms = Baseline.State.UNAVAILABLE, f"{type(exc).__name__}: {exc}", None
    else:
        b.state, b.latency_ms = Baseline.State.OK, latency
        b.detail = "sum over the shape set of per-shape median latencies (warm-up, cache flush, rotating inputs)"
    b.fingerprint = _fingerprint()
    b.measured_at = timezone.now()
    b.save(update_fields=["state", "latency_ms", "detail", "fingerprint", "measured_at"])
    return b


def _fingerprint() -> dict:
    """The timing host: the CPU backend's fingerprint plus ``host`` (the host name)."""
    try:
        from kernels.backends.cpu import CpuBackend  # noqa: PLC0415

        fp = CpuBackend().fingerprint()
    except Exception:  # noqa: BLE001 - the figure stands without it
        fp = {}
    return {**fp, "host": socket.gethostname()}
