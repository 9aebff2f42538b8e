"""Paired comparisons of two candidates, requested on the compare page and measured on the
target's worker with ``kernels.comparison.paired.compare_paired``.

Stored timing samples of two candidates come from separate processes at separate times; the
difference between processes dominates them, so they say nothing about which kernel is faster.
A paired comparison measures both kernels in the same rounds, taking turns call by call, and
calls one faster only beyond the noise floor of the host (``kernels.comparison.verdict``). The floor is
read from, and when missing measured into, the database (:class:`swarm.runs.noise_floors.DbFloorStore`).

Settings: ``PAIRED_COMPARISON`` (a dict): the :class:`kernels.comparison.paired.PairSettings` fields
(``rounds``, ``warmup_calls``, ``min_calls``, ``max_calls``, ``round_ms``, ``flush``,
``turn_timeout_s``, ``seed``) and ``noise_floor`` (a fraction to judge against instead of the
stored floor; None: the stored or measured one). Missing keys take the library's defaults.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from kernels.comparison.paired import ComparisonFailed, Kernel, PairedComparison, PairSettings, compare_paired
from swarm.models import Candidate, PairedComparisonRun
from swarm.runs.noise_floors import DbFloorStore

log = logging.getLogger(__name__)

CompareFn = Callable[..., PairedComparison]
_SETTING_KEYS = frozenset(PairSettings.__dataclass_fields__)


class PairedRefused(Exception):
    """Two candidates cannot be compared paired; the message says why."""


def pair_settings() -> tuple[PairSettings, float | None]:
    """``(PairSettings, noise_floor or None)`` from ``settings.PAIRED_COMPARISON``.

    Raises:
        ValueError: an unknown key or a value out of range (PairSettings' message).
    """
    conf = dict(getattr(settings, "PAIRED_COMPARISON", None) or {})
    floor = conf.pop("noise_floor", None)
    unknown = sorted(set(conf) - _SETTING_KEYS)
    if unknown:
        raise ValueError(f"PAIRED_COMPARISON: unknown key(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(_SETTING_KEYS | {'noise_floor'}))}")
    return PairSettings(**conf), (None if floor is None else float(floor))


def no_kernel_reason(candidate: Candidate) -> str:
    """Why ``candidate`` cannot be measured paired ("" when it can)."""
    goal = candidate.goal
    if goal.capabilities.recorded:
        return (f"candidate {candidate.pk} is a recorded measurement ({goal.target}): there is no kernel "
                "to measure")
    return ""


def check_pair(a: Candidate, b: Candidate) -> None:
    """Raise :class:`PairedRefused` unless ``a`` and ``b`` can be compared paired: two
    different candidates with kernels, of the same workload, target and shape set."""
    if a.pk == b.pk:
        raise PairedRefused(f"candidate {a.pk} compared with itself: pick two candidates")
    for c in (a, b):
        reason = no_kernel_reason(c)
        if reason:
            raise PairedRefused(reason)
    ka = (a.goal.workload, a.goal.target, a.goal.shape_set)
    kb = (b.goal.workload, b.goal.target, b.goal.shape_set)
    if ka != kb:
        raise PairedRefused(f"candidates {a.pk} ({'/'.join(ka)}) and {b.pk} ({'/'.join(kb)}) belong to different "
                            "workloads, targets or shape sets: a paired comparison times both on the same shapes "
                            "and host")


def request_paired(a: Candidate, b: Candidate, user) -> PairedComparisonRun:
    """Record a queued paired comparison of ``a`` (side A) and ``b`` (side B); the caller sends
    it to the target's queue (:func:`swarm.runs.dispatch.dispatch_paired`).

    Raises:
        PairedRefused: see :func:`check_pair`.
    """
    check_pair(a, b)
    goal = a.goal
    return PairedComparisonRun.objects.create(candidate_a=a, candidate_b=b, workload=goal.workload, target=goal.target,
                                              shape_set=goal.shape_set, requested_by=user)


def compare_candidates(a: Candidate, b: Candidate, *, goal=None, compare: CompareFn | None = None) -> PairedComparison:
    """Measure ``a`` (A) against ``b`` (B) paired on this host, for ``goal`` (default ``a``'s:
    its workload, shape set and target), with :func:`pair_settings` and the database floor store.

    Raises:
        As ``kernels.comparison.paired.compare_paired``: ValueError for a backend without a turn-taking
        child (CUDA), ComparisonFailed when a side cannot be measured, KeyError for an
        unknown workload or shape set.
    """
    goal = goal or a.goal
    pair, floor = pair_settings()
    return (compare or compare_paired)(
        goal.workload, Kernel(a.source, dict(a.params)), Kernel(b.source, dict(b.params)),
        shape_set=goal.shape_set, backend=goal.backend, target=goal.target, settings=pair,
        noise_floor=floor, floor_store=DbFloorStore())


def stale_after_s() -> float:
    """A ``running`` comparison claimed this long ago is presumed lost (its worker died): the
    rounds (each at most its turns' timeouts, in practice seconds) and an A/A floor measurement."""
    pair, _ = pair_settings()
    return 600.0 + 10.0 * pair.rounds


def measure(run_id: int, *, compare: CompareFn | None = None) -> PairedComparisonRun:
    """Run a queued paired comparison on this (the target's) worker and store its result.

    Returns:
        The row, ``done`` (``result`` holds ``PairedComparison.to_dict()``) or ``failed``
        (``error`` says why: a side that failed, a backend without a turn-taking child). A row
        another live worker holds, or already finished, is returned unchanged.
    """
    now = timezone.now()
    claimed = PairedComparisonRun.objects.filter(
        Q(state=PairedComparisonRun.State.QUEUED)
        | Q(state=PairedComparisonRun.State.RUNNING, started_at__lt=now - timedelta(seconds=stale_after_s())),
        pk=run_id,
    ).update(state=PairedComparisonRun.State.RUNNING, started_at=now)
    row = PairedComparisonRun.objects.select_related("candidate_a__goal", "candidate_b__goal").get(pk=run_id)
    if not claimed:
        return row
    try:
        result = compare_candidates(row.candidate_a, row.candidate_b, compare=compare)
    except ComparisonFailed as exc:
        side = {"A": f"A (candidate {row.candidate_a_id})", "B": f"B (candidate {row.candidate_b_id})"}.get(exc.side)
        return _finish(row, PairedComparisonRun.State.FAILED, {}, f"side {side}: {exc.reason}" if side else exc.reason)
    except KeyError as exc:  # unknown workload or shape set: its message is the first argument
        return _finish(row, PairedComparisonRun.State.FAILED, {}, str(exc.args[0] if exc.args else exc))
    except (ValueError, OSError) as exc:  # a backend without a turn-taking child; the sandbox
        return _finish(row, PairedComparisonRun.State.FAILED, {}, str(exc))
    except Exception as exc:  # noqa: BLE001 - an infrastructure failure is recorded, not raised
        log.exception("paired comparison %s failed", run_id)
        return _finish(row, PairedComparisonRun.State.FAILED, {}, f"{type(exc).__name__}: {exc}")
    return _finish(row, PairedComparisonRun.State.DONE, result.to_dict(), "")


def _finish(row: PairedComparisonRun, state: str, result: dict, error: str) -> PairedComparisonRun:
    row.state, row.result, row.error, row.finished_at = state, result, error, timezone.now()
    row.save(update_fields=["state", "result", "error", "finished_at"])
    return row


VERDICT_TEXT = {"a_faster": "A faster", "b_faster": "B faster", "tie": "tie: within the noise floor of this host"}


def summary(result: dict) -> dict[str, Any]:
    """What a page or the API shows of a paired result: ``verdict``, ``verdict_text``,
    ``ratio`` (time(B) / time(A)), ``ci``, ``noise_floor``, ``floor_source``, ``rounds``,
    ``rounds_needed``, ``why``, ``identical``, ``notes`` (a list: what a person should know
    beside the verdict, such as a claim the parent's clock could not check)."""
    keys = ("verdict", "ratio", "ci", "p_value", "noise_floor", "floor_source", "rounds", "rounds_needed", "why",
            "identical", "median_a_ms", "median_b_ms")
    out = {k: result.get(k) for k in keys}
    out["notes"] = [str(n) for n in result.get("notes") or []]
    out["verdict_text"] = VERDICT_TEXT.get(out["verdict"], out["verdict"])
    floor = out["noise_floor"]
    out["noise_floor_pct"] = floor * 100.0 if isinstance(floor, (int, float)) else None
    return out


def history(candidate_ids: list[int]) -> list[PairedComparisonRun]:
    """Paired comparisons between any two of ``candidate_ids``, newest first."""
    return list(PairedComparisonRun.objects.filter(candidate_a__in=candidate_ids, candidate_b__in=candidate_ids)
                .select_related("requested_by")[:50])
