"""Baseline latencies per (workload, target, shape set), measured once and stored.

The goal list shows each goal's best result as a speedup over a plain implementation
(``kernels.baselines``: NumPy float32 on the CPU). Timing it takes seconds and must happen
on the target's hardware, so a page view only *asks* for it: :func:`lookup` returns what is
stored and enqueues :func:`measure` on the target's queue for keys never measured (or whose
measurement was lost). Pages never time anything.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

import kernels
from kernels.backends import capabilities
from kernels.baselines import baseline_latency_ms
from swarm.dispatch import EMBEDDED_QUEUE, MEASURE_BASELINE, send_on_commit
from swarm.models import Baseline, Goal, target_backend

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
        The updated row: ``ok`` with ``latency_ms``, or ``unavailable`` with the reason.
    """
    b = Baseline.objects.get(pk=baseline_id)
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
    try:
        from kernels.backends.cpu import CpuBackend  # noqa: PLC0415

        return CpuBackend().fingerprint()
    except Exception:  # noqa: BLE001 - the figure stands without it
        return {}
