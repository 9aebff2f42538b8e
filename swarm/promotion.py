"""Promotion of a candidate to production for (workload, target, shape set), and roll-back.

A promotion is decided by evidence, not by a click (DESIGN.md: "a faster kernel that is subtly
wrong is worthless"):

1. :func:`request_promotion` checks what can be checked at once (the ``approve_promotion``
   permission, an ``ok`` candidate that meets its goal's constraints, not already production,
   no other request for the key under way), records a :class:`PromotionRequest` and sends its
   validation to the target's queue, because only the target's hardware can re-measure it.
2. :func:`validate_request` (on that worker) re-evaluates the candidate with
   ``kernels.evaluate`` on fresh seeds (:data:`EXTENDED_SEEDS` independent validations, each
   of every timed and odd shape plus the stored regression cases) with more timing
   repetitions (:data:`EXTENDED_BENCH`), and the incumbent with the same settings in between
   (A-B-A order, so drift of the machine affects both alike). It then promotes the candidate
   only if every re-evaluation is ``ok`` and meets the constraints, and the candidate is
   significantly faster than the incumbent (``kernels.stats.compare``; see
   :func:`speed_verdict` for the rule). Otherwise ``reason`` says exactly why not. Everything
   measured is kept in the request's ``evidence``.
3. :func:`rollback` restores an earlier production kernel. Every action writes an
   :class:`AuditEvent`.
"""

from __future__ import annotations

import logging
import secrets
from datetime import timedelta
from typing import Any, Callable

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

import kernels
from swarm.models import (
    UNJUDGED_STATUSES, AuditEvent, Candidate, CandidateStatus, Promotion, PromotionRequest, constraints_met,
)

log = logging.getLogger(__name__)

EXTENDED_SEEDS = 2
EXTENDED_BENCH = kernels.BenchSettings(warmup_ms=25.0, rep_ms=300.0, min_reps=30, max_reps=400)
LOG_LIMIT = 20_000  # characters of each re-evaluation's log kept in the evidence


class PromotionRefused(Exception):
    """The candidate cannot be promoted (or production cannot be rolled back); the message says
    exactly why."""


def can_approve(user) -> bool:
    return bool(user and user.is_authenticated and user.has_perm("swarm.approve_promotion"))


def _require_approver(user) -> None:
    if not can_approve(user):
        name = user.get_username() if user and user.is_authenticated else "an anonymous user"
        raise PromotionRefused(f"{name} lacks the approve_promotion permission (the approver role)")


def active_promotion(workload: str, target: str, shape_set: str) -> Promotion | None:
    return Promotion.objects.filter(workload=workload, target=target, shape_set=shape_set, active=True).first()


def _check_candidate(candidate: Candidate) -> None:
    goal = candidate.goal
    if goal.backend == "replay":
        raise PromotionRefused(
            f"candidate {candidate.pk} is a recorded measurement ({goal.target}): there is no kernel to "
            "re-validate or to serve")
    if candidate.status != CandidateStatus.OK:
        raise PromotionRefused(f"candidate {candidate.pk} is {candidate.status}; only ok candidates can be promoted")
    evidence = getattr(candidate, "evidence", None)
    if evidence is None:
        raise PromotionRefused(f"candidate {candidate.pk} has no evidence")
    if not goal.is_feasible(evidence.metrics):
        raise PromotionRefused(f"candidate {candidate.pk} breaks a constraint of its goal: {_broken(goal.constraints, evidence.metrics)}")


def _broken(constraints: list[dict], metrics: dict) -> str:
    out = []
    for c in constraints:
        if not constraints_met([c], metrics):
            out.append(f"{c['metric']} {c['op']} {c['value']:g} (measured {metrics.get(c['metric'])!r})")
    return "; ".join(out) or "none"


def request_promotion(candidate: Candidate, user, note: str = "", *, dispatch: bool = True) -> PromotionRequest:
    """Ask for ``candidate`` to become the production kernel of its goal's key.

    Args:
        candidate: the candidate (with its goal and evidence).
        user: the approver asking.
        note: why, for the audit log.
        dispatch: send the validation to the target's queue after commit (False: the caller
            runs :func:`validate_request` itself, e.g. tests).

    Returns:
        The request, in state ``validating``.

    Raises:
        PromotionRefused: no permission, the candidate is not ``ok``, breaks a constraint, is a
            replay record, is already production, or another request for the key is running.
    """
    _require_approver(user)
    _check_candidate(candidate)
    goal = candidate.goal
    key = dict(workload=goal.workload, target=goal.target, shape_set=goal.shape_set)
    with transaction.atomic():
        incumbent = active_promotion(**key)
        if incumbent is not None and incumbent.candidate_id == candidate.pk:
            raise PromotionRefused(f"candidate {candidate.pk} is already the production kernel of "
                                   f"{goal.workload}/{goal.target}/{goal.shape_set}")
        running = PromotionRequest.objects.filter(state=PromotionRequest.State.VALIDATING, **key).first()
        if running is not None:
            raise PromotionRefused(
                f"promotion request {running.pk} (candidate {running.candidate_id}) for "
                f"{goal.workload}/{goal.target}/{goal.shape_set} is still validating; wait for its decision")
        req = PromotionRequest.objects.create(candidate=candidate, note=note, requested_by=user, incumbent=incumbent, **key)
        _audit(user, "promotion.request", req.key, candidate=candidate.pk, request=req.pk, note=note,
               incumbent=incumbent.candidate_id if incumbent else None)
        if dispatch:
            from swarm.tasks import validate_promotion  # noqa: PLC0415 - tasks import this module

            from swarm.dispatch import queue_for  # noqa: PLC0415

            pk, queue = req.pk, queue_for(candidate)  # the target's worker (the in-process one when embedded)
            transaction.on_commit(lambda: validate_promotion.apply_async(args=[pk], queue=queue))
    return req


def longest_validation_s() -> float:
    """Longest an extended validation can take, in seconds: :data:`EXTENDED_SEEDS` evaluations
    of the candidate and one of the incumbent, each limited to twice ``EVAL_TIMEOUT_S``."""
    return (EXTENDED_SEEDS + 1) * 2 * settings.EVAL_TIMEOUT_S


def stale_after() -> timedelta:
    """A validation started this long ago is presumed lost (its worker died) and may restart."""
    return timedelta(seconds=longest_validation_s() + 120)


def validate_request(
    request_id: int,
    *,
    evaluate: Callable[..., Any] | None = None,
    bench: kernels.BenchSettings | None = None,
) -> PromotionRequest:
    """Run the extended validation of a request and decide it (on the target's worker).

    Args:
        request_id: a :class:`PromotionRequest` in state ``validating``.
        evaluate: the evaluator (default ``kernels.evaluate``), injectable for tests.
        bench: timing protocol of the re-evaluations (default :data:`EXTENDED_BENCH`).

    Returns:
        The request, decided: ``promoted``, ``refused`` (``reason`` says why) or ``failed``
        (the validation itself could not run). A request already claimed by a live worker or
        already decided is returned unchanged.
    """
    now = timezone.now()
    claimed = PromotionRequest.objects.filter(
        Q(started_at__isnull=True) | Q(started_at__lt=now - stale_after()),
        pk=request_id, state=PromotionRequest.State.VALIDATING,
    ).update(started_at=now)
    req = PromotionRequest.objects.select_related("candidate__goal", "candidate__evidence", "incumbent__candidate",
                                                  "requested_by").get(pk=request_id)
    if not claimed:
        return req
    try:
        from swarm.orchestrator import evaluator_for

        verdict, reason, evidence = _extended_validation(req, evaluate or evaluator_for(req.candidate.goal),
                                                         bench or EXTENDED_BENCH)
    except Exception as exc:  # noqa: BLE001 - an infrastructure failure is recorded, not raised
        log.exception("extended validation of promotion request %s failed", request_id)
        return _decide(req, PromotionRequest.State.FAILED, f"the extended validation could not run: "
                       f"{type(exc).__name__}: {exc}", {})
    if verdict != PromotionRequest.State.PROMOTED:
        return _decide(req, verdict, reason, evidence)
    guard = _engine_guard(req.candidate)
    if guard is not None:
        evidence = {**evidence, "engines": {"ok": guard.ok, "reason": guard.reason, **(guard.evidence or {})}}
        if not guard.ok:
            return _decide(req, PromotionRequest.State.REFUSED, f"engine guard: {guard.reason}", evidence)
    try:
        with transaction.atomic():
            current = (Promotion.objects.select_for_update()
                       .filter(workload=req.workload, target=req.target, shape_set=req.shape_set, active=True).first())
            if (current.pk if current else None) != req.incumbent_id:
                raise PromotionRefused(
                    f"production of {req.key} changed while validating (now promotion "
                    f"{current.pk if current else 'none'}); request the promotion again to compare with it")
            promotion = _install(req.candidate, req.requested_by, req.note, current,
                                 kind=Promotion.Kind.PROMOTE, evidence=_summary(evidence))
            _adopt_engine_plan(req.candidate, req.target)
            req.promotion = promotion
            return _decide(req, PromotionRequest.State.PROMOTED, reason, evidence)
    except PromotionRefused as exc:
        return _decide(req, PromotionRequest.State.REFUSED, str(exc), evidence)


def _adopt_engine_plan(candidate: Candidate, target: str) -> None:
    """A promoted engine-plan candidate becomes the plan of the production engines it is for."""
    from engines.goals import is_engine_workload, parse_goal_workload
    from engines.web.models import ProductionEngine

    if not is_engine_workload(candidate.goal.workload):
        return
    engine, config = parse_goal_workload(candidate.goal.workload)
    engines = ProductionEngine.objects.filter(engine=engine, target=target, active=True)
    if config:
        engines = engines.filter(config=config)
    engines.update(plan=candidate.params, plan_candidate=candidate, updated_at=timezone.now())


def _engine_guard(candidate: Candidate):
    """Cross-layer guard: re-validate and re-benchmark every production engine that uses the
    candidate's workload on its target (``engines.web.guard``); None for engine-plan goals."""
    from engines.goals import is_engine_workload
    from engines.web.guard import guard_promotion

    if is_engine_workload(candidate.goal.workload):
        return None
    return guard_promotion(candidate)


def _decide(req: PromotionRequest, state: str, reason: str, evidence: dict) -> PromotionRequest:
    req.state, req.reason, req.evidence, req.finished_at = state, reason, evidence, timezone.now()
    req.save(update_fields=["state", "reason", "evidence", "finished_at", "promotion"])
    verb = {"promoted": "promotion.approved", "refused": "promotion.refused", "failed": "promotion.failed"}[state]
    _audit(req.requested_by, verb, req.key, candidate=req.candidate_id, request=req.pk, reason=reason,
           promotion=req.promotion_id)
    return req


def _extended_validation(req: PromotionRequest, evaluate, bench) -> tuple[str, str, dict]:
    candidate = req.candidate
    goal = candidate.goal
    kwargs: dict[str, Any] = dict(shape_set=goal.shape_set, backend=goal.backend,
                                  timeout_s=settings.EVAL_TIMEOUT_S * 2, bench=bench)
    if goal.backend == "cuda":
        kwargs["target"] = goal.target
    seeds = [secrets.randbits(62) for _ in range(EXTENDED_SEEDS + 1)]
    evidence: dict[str, Any] = {
        "protocol": {
            "seeds": seeds[:EXTENDED_SEEDS], "incumbent_seed": seeds[-1], "bench": bench.to_dict(),
            "order": "candidate, incumbent, candidate" if req.incumbent_id else "candidate x%d" % EXTENDED_SEEDS,
            "alpha": alpha(), "min_speedup": min_speedup(),
        },
        "candidate": [], "incumbent": None, "comparison": None,
    }

    def run(c: Candidate, seed: int) -> dict:
        return _trim(evaluate(goal.workload, c.source, c.params, seed=seed, **kwargs).to_dict())

    incumbent = req.incumbent.candidate if req.incumbent_id else None
    first = run(candidate, seeds[0])
    evidence["candidate"].append(first)
    inc = run(incumbent, seeds[-1]) if incumbent is not None else None
    evidence["incumbent"] = inc
    for seed in seeds[1:EXTENDED_SEEDS]:
        evidence["candidate"].append(run(candidate, seed))
    for e, seed in zip(evidence["candidate"], seeds):
        if e["status"] in UNJUDGED_STATUSES:  # the workload's inputs failed: nothing said about the candidate
            return PromotionRequest.State.FAILED, (
                f"the extended validation could not judge the candidate: on fresh seed {seed} the workload's inputs "
                f"are invalid ({e['status']}): {_verdict_line(e)}"), evidence
        if e["status"] != "ok":
            return PromotionRequest.State.REFUSED, (
                f"extended validation failed: the re-evaluation on fresh seed {seed} is {e['status']}: "
                f"{_verdict_line(e)}{_failing_cases(e)}"), evidence
        if not goal.is_feasible(e["metrics"]):
            return PromotionRequest.State.REFUSED, (
                f"extended validation failed: on fresh seed {seed} the candidate breaks a constraint: "
                f"{_broken(goal.constraints, e['metrics'])}"), evidence
    samples = _merge_samples(evidence["candidate"])
    if incumbent is None:
        return PromotionRequest.State.PROMOTED, (
            f"passed the extended validation ({EXTENDED_SEEDS} fresh seeds); no incumbent for {req.key}"), evidence
    if inc["status"] != "ok":
        return PromotionRequest.State.PROMOTED, (
            f"passed the extended validation; the incumbent (candidate {incumbent.pk}) failed its own "
            f"re-validation ({inc['status']}: {_verdict_line(inc)}), so it is replaced without a speed comparison"), evidence
    verdict = speed_verdict(samples, inc.get("samples_ms") or {})
    evidence["comparison"] = verdict
    if not verdict["faster"]:
        return PromotionRequest.State.REFUSED, (
            f"not significantly faster than the incumbent (candidate {incumbent.pk}): {verdict['why']}"), evidence
    return PromotionRequest.State.PROMOTED, (
        f"passed the extended validation ({EXTENDED_SEEDS} fresh seeds) and is significantly faster than the "
        f"incumbent (candidate {incumbent.pk}): {verdict['why']}"), evidence


def alpha() -> float:
    return float(getattr(settings, "PROMOTION_ALPHA", 0.05))


def min_speedup() -> float:
    return float(getattr(settings, "PROMOTION_MIN_SPEEDUP", 1.0))


def speed_verdict(candidate_ms: dict[str, list[float]], incumbent_ms: dict[str, list[float]]) -> dict[str, Any]:
    """Is the candidate significantly faster than the incumbent over a shape set?

    Rule, per timed shape (``kernels.stats.compare``: one-sided Mann-Whitney U plus a bootstrap
    interval of the speedup): the candidate must be significantly faster on at least one shape
    at level ``alpha / n_shapes`` (Bonferroni over the shapes), the incumbent must not be
    significantly faster on any shape at level ``alpha``, and the sum of the candidate's
    per-shape medians (the goal's ``latency_ms``) must be lower.

    Returns:
        ``{"faster": bool, "why": str, "shapes": {label: Comparison dict}, "speedup": total}``.
    """
    labels = sorted(set(candidate_ms) & set(incumbent_ms))
    if not labels:
        return {"faster": False, "why": "no timed shape in common between the two measurements", "shapes": {},
                "speedup": None}
    a, k = alpha(), len(labels)
    shapes, faster_on, slower_on = {}, [], []
    for label in labels:
        wins = kernels.compare(candidate_ms[label], incumbent_ms[label], alpha=a / k, min_speedup=min_speedup())
        loses = kernels.compare(incumbent_ms[label], candidate_ms[label], alpha=a)
        shapes[label] = {**wins.to_dict(), "incumbent_faster": loses.faster, "incumbent_p_value": loses.p_value}
        if wins.faster:
            faster_on.append(label)
        if loses.faster:
            slower_on.append(label)
    total_c = sum(shapes[s]["median_a_ms"] for s in labels)
    total_i = sum(shapes[s]["median_b_ms"] for s in labels)
    speedup = total_i / total_c if total_c > 0 else None

    def describe(label: str) -> str:
        s = shapes[label]
        return (f"on {label} median {s['median_a_ms']:.4g} ms vs {s['median_b_ms']:.4g} ms, speedup "
                f"{s['speedup']:.3f}x (CI {s['ci_low']:.3f}-{s['ci_high']:.3f}), one-sided Mann-Whitney "
                f"p = {s['p_value']:.3g}")

    level = f"alpha {a:g}" + (f" / {k} shapes = {a / k:.3g}" if k > 1 else "")
    if slower_on:
        why = "the incumbent is significantly faster " + "; ".join(describe(s) for s in slower_on)
        return {"faster": False, "why": why, "shapes": shapes, "speedup": speedup}
    if not faster_on:
        best = max(labels, key=lambda s: shapes[s]["speedup"])
        why = (f"no shape is significantly faster at {level}"
               + (f" with the speedup interval above {min_speedup():g}" if min_speedup() != 1.0 else "")
               + f"; closest: {describe(best)}")
        return {"faster": False, "why": why, "shapes": shapes, "speedup": speedup}
    if speedup is not None and speedup <= 1.0:
        why = f"the total latency is not lower: {total_c:.4g} ms vs {total_i:.4g} ms (speedup {speedup:.3f}x)"
        return {"faster": False, "why": why, "shapes": shapes, "speedup": speedup}
    why = f"total speedup {speedup:.3f}x; significant at {level} " + "; ".join(describe(s) for s in faster_on)
    return {"faster": True, "why": why, "shapes": shapes, "speedup": speedup}


def _merge_samples(evaluations: list[dict]) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for e in evaluations:
        for label, xs in (e.get("samples_ms") or {}).items():
            out.setdefault(label, []).extend(x for x in xs if x is not None)
    return out


def _trim(e: dict) -> dict:
    log_text = e.get("log") or ""
    if len(log_text) > LOG_LIMIT:
        e["log"] = log_text[:LOG_LIMIT // 2] + "\n[... cut ...]\n" + log_text[-LOG_LIMIT // 2:]
    return e


def _verdict_line(e: dict) -> str:
    for line in reversed((e.get("log") or "").splitlines()):
        if line.strip():
            return line.strip()
    return e.get("status", "")


def _failing_cases(e: dict) -> str:
    bad = [c for c in e.get("cases") or [] if not c.get("passed")]
    if not bad:
        return ""
    shown = ", ".join(f"{c.get('label') or c.get('shape')} seed {c.get('seed')} ({c.get('reason') or c.get('verdict')})"
                      for c in bad[:3])
    return f"; failing cases: {shown}" + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")


def _summary(evidence: dict) -> dict:
    """What a promotion keeps of its request's evidence (no logs): metrics, samples, verdict."""
    keep = ("status", "metrics", "samples_ms", "fingerprint")
    return {
        "protocol": evidence.get("protocol"),
        "candidate": [{k: e.get(k) for k in keep} for e in evidence.get("candidate") or []],
        "incumbent": {k: evidence["incumbent"].get(k) for k in keep} if evidence.get("incumbent") else None,
        "comparison": evidence.get("comparison"),
    }


def _install(candidate: Candidate, user, note: str, current: Promotion | None, *, kind: str,
             evidence: dict) -> Promotion:
    """End ``current`` (if any) and make ``candidate`` production; call inside a transaction."""
    goal = candidate.goal
    now = timezone.now()
    if current is not None:
        Promotion.objects.filter(pk=current.pk).update(
            active=False, ended_at=now, ended_by=user,
            end_reason="rolled_back" if kind == Promotion.Kind.ROLLBACK else "superseded")
    promotion = Promotion.objects.create(
        candidate=candidate, workload=goal.workload, target=goal.target, shape_set=goal.shape_set,
        note=note, promoted_by=user, kind=kind, evidence=evidence, replaced=current,
    )
    _audit(user, "promotion.create" if kind == Promotion.Kind.PROMOTE else "promotion.rollback",
           promotion.key, candidate=candidate.pk, hash=candidate.content_hash, note=note, promotion=promotion.pk,
           replaced=current.candidate_id if current else None)
    return promotion


def promote(candidate: Candidate, user, note: str = "", *, evaluate: Callable[..., Any] | None = None,
            bench: kernels.BenchSettings | None = None) -> Promotion:
    """Request and validate a promotion in this process; return the new production kernel.

    For the command line and tests: the web and the API go through :func:`request_promotion`,
    whose validation runs on the target's worker.

    Raises:
        PromotionRefused: as :func:`request_promotion`, or the validation's reason.
    """
    req = request_promotion(candidate, user, note, dispatch=False)
    req = validate_request(req.pk, evaluate=evaluate, bench=bench)
    if req.state != PromotionRequest.State.PROMOTED:
        raise PromotionRefused(req.reason)
    return req.promotion


def rollback(workload: str, target: str, shape_set: str, user, *, to: Promotion | None = None,
             note: str = "") -> Promotion:
    """Make an earlier kernel production again for the key.

    Args:
        to: the past promotion to restore; default the one the current kernel replaced.

    Returns:
        The new active promotion (kind ``rollback``).

    Raises:
        PromotionRefused: no permission, nothing to roll back to, or ``to`` is of another key
            or already production.
    """
    _require_approver(user)
    key = f"{workload}/{target}/{shape_set}"
    with transaction.atomic():
        current = (Promotion.objects.select_for_update()
                   .filter(workload=workload, target=target, shape_set=shape_set, active=True).first())
        if to is None:
            if current is None:
                raise PromotionRefused(f"nothing is in production for {key}: nothing to roll back")
            to = current.replaced
            if to is None:
                raise PromotionRefused(f"the production kernel of {key} (candidate {current.candidate_id}) replaced "
                                       "nothing: there is no earlier kernel to roll back to")
        if (to.workload, to.target, to.shape_set) != (workload, target, shape_set):
            raise PromotionRefused(f"promotion {to.pk} belongs to {to.key}, not {key}")
        if current is not None and current.candidate_id == to.candidate_id:
            raise PromotionRefused(f"candidate {to.candidate_id} is already the production kernel of {key}")
        candidate = Candidate.objects.select_related("goal").get(pk=to.candidate_id)
        return _install(candidate, user, note or f"roll back to promotion {to.pk}", current,
                        kind=Promotion.Kind.ROLLBACK, evidence={"restored_from": to.pk, **(to.evidence or {})})


def _audit(user, verb: str, subject: str, **data: Any) -> None:
    AuditEvent.objects.create(actor=user if user and user.is_authenticated else None, verb=verb, subject=subject,
                              data=data)
