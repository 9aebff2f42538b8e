"""Promotion of a candidate to production for (workload, target, shape set), and roll-back.

A promotion is decided by evidence, not by a click (docs/design.md: "a faster kernel that is subtly
wrong is worthless"):

1. :func:`request_promotion` checks what can be checked at once (the ``approve_promotion``
   permission, an ``ok`` candidate that meets its goal's constraints, not already production,
   no other request for the key under way), records a :class:`PromotionRequest` and sends its
   validation to the target's queue, because only the target's hardware can re-measure it.
2. :func:`validate_request` (on that worker) re-evaluates the candidate with
   ``kernels.evaluate`` on fresh seeds (:data:`EXTENDED_SEEDS` independent validations, each
   of every timed and odd shape plus the stored regression cases) with more timing
   repetitions (:data:`EXTENDED_BENCH`), and the incumbent once with the same settings. It
   promotes the candidate only if every re-evaluation is ``ok`` and meets the constraints, and
   the candidate is faster than the incumbent beyond the noise floor of the target. Speed is
   decided by a paired comparison (``kernels.comparison.paired.compare_paired``, the incumbent as A, the
   candidate as B, so ``b_faster`` means the candidate is faster): the two kernels take turns
   call by call in fresh pairs of sandbox children, and the verdict is drawn over the rounds'
   ratios against the floor. Samples of separate evaluations are never pooled into a verdict:
   the difference between processes dominates them. On CUDA targets, which have no
   turn-taking child, the candidate and the incumbent are evaluated alternately
   (C I I C C I ...), each pair of evaluations is one round whose ratio is the ratio of their
   ``latency_ms`` (sums of per-shape medians), and :func:`kernels.comparison.verdict.judge_rounds`
   judges those rounds against the stored floor or :data:`swarm.runs.noise_floors.DEFAULT_FLOOR`.
   Otherwise ``reason`` says exactly why not (for speed: the ratio, its interval, the floor
   and the rounds). Everything measured is kept in the request's ``evidence``.
3. :func:`rollback` restores an earlier production kernel. Every action writes an
   :class:`AuditEvent`.

Four eyes (``settings.PROMOTION_FOUR_EYES``, on in production mode): a request waits in state
``awaiting`` until another approver :func:`approve_request` s it (then step 2 runs) or
:func:`reject_request` s it; approving one's own request is refused and audited
(``promotion.approval_refused``). A candidate refused before shows its earlier refusals
(:func:`earlier_refusals`) when requested again.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

import kernels
from kernels.comparison.paired import ComparisonFailed
from kernels.comparison.verdict import judge_rounds
from swarm.models import (
    UNJUDGED_STATUSES,
    AuditEvent,
    Candidate,
    CandidateStatus,
    Promotion,
    PromotionRequest,
    constraints_met,
)
from swarm.production import paired_runs
from swarm.runs import noise_floors, orchestrator
from swarm.runs.dispatch import VALIDATE_PROMOTION, queue_for, send_on_commit

log = logging.getLogger(__name__)

EXTENDED_SEEDS = 2
EXTENDED_BENCH = kernels.BenchSettings(warmup_ms=25.0, rep_ms=300.0, min_reps=30, max_reps=400)
LOG_LIMIT = 20_000  # characters of each re-evaluation's log kept in the evidence
#: Requests that block another request for the same key.
OPEN_STATES = (PromotionRequest.State.AWAITING, PromotionRequest.State.VALIDATING)


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
    if goal.capabilities.recorded:
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
        The request, in state ``validating`` (``awaiting`` a second approver under
        ``settings.PROMOTION_FOUR_EYES``: nothing is sent until :func:`approve_request`).

    Raises:
        PromotionRefused: no permission, the candidate is not ``ok``, breaks a constraint, is a
            replay record, is already production or has its content hash, or another request
            for the key is running.
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
        if incumbent is not None and incumbent.candidate.content_hash == candidate.content_hash:
            raise PromotionRefused(
                f"candidate {candidate.pk} has the same content hash as the production kernel of "
                f"{goal.workload}/{goal.target}/{goal.shape_set} (candidate {incumbent.candidate_id}): it is the same "
                "kernel, so it cannot be faster")
        running = PromotionRequest.objects.filter(state__in=OPEN_STATES, **key).first()
        if running is not None:
            raise PromotionRefused(
                f"promotion request {running.pk} (candidate {running.candidate_id}) for "
                f"{goal.workload}/{goal.target}/{goal.shape_set} is still {running.state}; wait for its decision")
        four_eyes = settings.PROMOTION_FOUR_EYES
        req = PromotionRequest.objects.create(
            candidate=candidate, note=note, requested_by=user, incumbent=incumbent, **key,
            state=PromotionRequest.State.AWAITING if four_eyes else PromotionRequest.State.VALIDATING)
        _audit(user, "promotion.request", req.key, candidate=candidate.pk, request=req.pk, note=note,
               incumbent=incumbent.candidate_id if incumbent else None, four_eyes=four_eyes or None)
        if dispatch and not four_eyes:
            # the target's worker (the in-process one when embedded)
            send_on_commit(VALIDATE_PROMOTION, req.pk, queue=queue_for(candidate))
    return req


def _name(user) -> str:
    return user.get_username() if user else "a deleted user"


def earlier_refusals(candidate: Candidate, *, before: PromotionRequest | None = None) -> list[dict[str, Any]]:
    """The candidate's refused promotion requests, newest first: ``{request, reason, by, at}``
    (``by``: the approver who rejected it, or "the extended validation (requested by NAME)";
    ``at``: ISO 8601). ``before``: only requests older than this one."""
    qs = candidate.promotion_requests.filter(state=PromotionRequest.State.REFUSED).select_related(
        "requested_by", "decided_by").order_by("-created_at", "-id")
    if before is not None:
        qs = qs.exclude(pk=before.pk).filter(created_at__lte=before.created_at)
    return [{"request": r.pk, "reason": r.reason,
             "by": _name(r.decided_by) if r.decided_by_id else f"the extended validation (requested by {_name(r.requested_by)})",
             "at": (r.finished_at or r.created_at).isoformat()} for r in qs]


def refusal_lines(refusals: list[dict[str, Any]]) -> str:
    """Earlier refusals in one line each: "request N refused at WHEN by WHO: REASON"."""
    return "\n".join(f"request {r['request']} refused at {r['at']} by {r['by']}: {r['reason']}" for r in refusals)


def _awaiting(req: PromotionRequest, user) -> PromotionRequest:
    _require_approver(user)
    req = PromotionRequest.objects.select_for_update(of=("self",)).select_related("candidate__goal", "requested_by").get(pk=req.pk)
    if req.state != PromotionRequest.State.AWAITING:
        raise PromotionRefused(f"promotion request {req.pk} is {req.state}, not awaiting approval")
    return req


def approve_request(req: PromotionRequest, user, *, dispatch: bool = True) -> PromotionRequest:
    """A second approver's approval of a request ``awaiting`` it: the extended validation starts
    (sent to the target's queue after commit unless ``dispatch`` is False).

    Raises:
        PromotionRefused: no permission, the request is not awaiting approval, or (four eyes)
            ``user`` requested it; that refusal is audited as ``promotion.approval_refused``.
    """
    with transaction.atomic():
        req = _awaiting(req, user)
        if settings.PROMOTION_FOUR_EYES and req.requested_by_id == user.pk:
            why = (f"four eyes: {_name(user)} requested promotion request {req.pk} and cannot approve it too; "
                   "another approver must approve it (PROMOTION_FOUR_EYES)")
            _audit(user, "promotion.approval_refused", req.key, candidate=req.candidate_id, request=req.pk, reason=why)
        else:
            why = ""
            req.state, req.decided_by = PromotionRequest.State.VALIDATING, user
            req.save(update_fields=["state", "decided_by"])
            _audit(user, "promotion.approve", req.key, candidate=req.candidate_id, request=req.pk,
                   requested_by=_name(req.requested_by))
            if dispatch:
                send_on_commit(VALIDATE_PROMOTION, req.pk, queue=queue_for(req.candidate))
    if why:  # raised after the audit event is committed
        raise PromotionRefused(why)
    return req


def reject_request(req: PromotionRequest, user, reason: str) -> PromotionRequest:
    """An approver's rejection of a request ``awaiting`` approval (the requester may withdraw
    their own): state ``refused`` with ``reason``, audited as ``promotion.refused``.

    Raises:
        PromotionRefused: no permission, no reason, or the request is not awaiting approval.
    """
    if not reason.strip():
        raise PromotionRefused("say why the promotion is rejected")
    with transaction.atomic():
        req = _awaiting(req, user)
        req.state, req.decided_by, req.finished_at = PromotionRequest.State.REFUSED, user, timezone.now()
        req.reason = f"rejected by {_name(user)}: {reason.strip()}"
        req.save(update_fields=["state", "decided_by", "finished_at", "reason"])
        _audit(user, "promotion.refused", req.key, candidate=req.candidate_id, request=req.pk, reason=req.reason)
    return req


def longest_validation_s() -> float:
    """Longest an extended validation can take, in seconds: the evaluations of the candidate
    and the incumbent (on CUDA the alternating speed rounds: twice ``max(EXTENDED_SEEDS,
    cuda_rounds())``; on the CPU the candidate's seeds and one of the incumbent, fewer), each
    limited to twice ``EVAL_TIMEOUT_S``, plus the paired comparison's own limit."""
    evaluations = max(EXTENDED_SEEDS, cuda_rounds()) * 2
    return (evaluations + 2) * settings.EVAL_TIMEOUT_S * 2 + paired_runs.stale_after_s()


def stale_after() -> timedelta:
    """A validation started this long ago is presumed lost (its worker died) and may restart."""
    return timedelta(seconds=longest_validation_s() + 120)


def validate_request(
    request_id: int,
    *,
    evaluate: Callable[..., Any] | None = None,
    bench: kernels.BenchSettings | None = None,
    compare: paired_runs.CompareFn | None = None,
) -> PromotionRequest:
    """Run the extended validation of a request and decide it (on the target's worker).

    Args:
        request_id: a :class:`PromotionRequest` in state ``validating``.
        evaluate: the evaluator (default ``kernels.evaluate``), injectable for tests.
        bench: timing protocol of the re-evaluations (default :data:`EXTENDED_BENCH`).
        compare: the paired comparison (default ``kernels.comparison.paired.compare_paired`` with
            ``settings.PAIRED_COMPARISON``, see :mod:`swarm.production.paired_runs`), injectable for tests.

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
    req = PromotionRequest.objects.select_related("candidate__goal", "candidate__evidence", "incumbent__candidate__goal",
                                                  "requested_by").get(pk=request_id)
    if not claimed:
        return req
    try:
        verdict, reason, evidence = _extended_validation(req, evaluate or orchestrator.evaluator_for(req.candidate.goal),
                                                         bench or EXTENDED_BENCH, compare)
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
    from swarm.engine_registry.models import ProductionEngine

    if not is_engine_workload(candidate.goal.workload):
        return
    engine, config = parse_goal_workload(candidate.goal.workload)
    engines = ProductionEngine.objects.filter(engine=engine, target=target, active=True)
    if config:
        engines = engines.filter(config=config)
    engines.update(plan=candidate.params, plan_candidate=candidate, updated_at=timezone.now())


def _engine_guard(candidate: Candidate):
    """Cross-layer guard: re-validate and re-benchmark every production engine that uses the
    candidate's workload on its target (``swarm.engine_registry.guard``); None for engine-plan goals."""
    from engines.goals import is_engine_workload
    from swarm.engine_registry.guard import guard_promotion

    if is_engine_workload(candidate.goal.workload):
        return None
    return guard_promotion(candidate, floor_store=noise_floors.DbFloorStore())


def _decide(req: PromotionRequest, state: str, reason: str, evidence: dict) -> PromotionRequest:
    req.state, req.reason, req.evidence, req.finished_at = state, reason, evidence, timezone.now()
    req.save(update_fields=["state", "reason", "evidence", "finished_at", "promotion"])
    verb = {"promoted": "promotion.approved", "refused": "promotion.refused", "failed": "promotion.failed"}[state]
    _audit(req.requested_by, verb, req.key, candidate=req.candidate_id, request=req.pk, reason=reason,
           promotion=req.promotion_id)
    return req


def cuda_rounds() -> int:
    """Rounds (pairs of evaluations) of a CUDA promotion's speed comparison:
    ``settings.PROMOTION_CUDA_ROUNDS``, default 4, at least 2 (an interval needs two)."""
    return max(2, int(getattr(settings, "PROMOTION_CUDA_ROUNDS", 4)))


def _extended_validation(req: PromotionRequest, evaluate, bench, compare) -> tuple[str, str, dict]:
    candidate = req.candidate
    goal = candidate.goal
    incumbent = req.incumbent.candidate if req.incumbent_id else None
    turns = goal.capabilities.paired_turns  # a turn-taking child of a paired comparison
    kwargs: dict[str, Any] = dict(shape_set=goal.shape_set, backend=goal.backend,
                                  timeout_s=settings.EVAL_TIMEOUT_S * 2, bench=bench)
    if goal.capabilities.needs_target:
        kwargs["target"] = goal.target
    # The order of evaluations: the candidate's validations, then the incumbent once (its own
    # correctness); on CUDA the speed rounds alternate C I, I C, ... so drift affects both alike.
    if incumbent is None:
        order = ["C"] * EXTENDED_SEEDS
    elif turns:
        order = ["C"] * EXTENDED_SEEDS + ["I"]
    else:
        order = [x for r in range(max(EXTENDED_SEEDS, cuda_rounds())) for x in (("C", "I") if r % 2 == 0 else ("I", "C"))]
    seeds = [secrets.randbits(62) for _ in order]
    pair, floor_setting = paired_runs.pair_settings()
    evidence: dict[str, Any] = {
        "protocol": {
            "seeds": [s for s, x in zip(seeds, order) if x == "C"],
            "incumbent_seeds": [s for s, x in zip(seeds, order) if x == "I"],
            "bench": bench.to_dict(), "order": " ".join(order),
            "speed": (None if incumbent is None else "paired" if turns else "alternating evaluations"),
            "paired_settings": pair.to_dict() if incumbent is not None and turns else None,
        },
        "candidate": [], "incumbent": None, "incumbent_rounds": [], "comparison": None,
    }

    def run(c: Candidate, seed: int) -> dict:
        return _trim(evaluate(goal.workload, c.source, c.params, seed=seed, **kwargs).to_dict())

    for x, seed in zip(order, seeds):
        if x == "C":
            e = run(candidate, seed)
            evidence["candidate"].append(e)
            if e["status"] in UNJUDGED_STATUSES:  # the workload's inputs failed: nothing said about the candidate
                return PromotionRequest.State.FAILED, (
                    f"the extended validation could not judge the candidate: on fresh seed {seed} the workload's "
                    f"inputs are invalid ({e['status']}): {_verdict_line(e)}"), evidence
            if e["status"] != "ok":
                return PromotionRequest.State.REFUSED, (
                    f"extended validation failed: the re-evaluation on fresh seed {seed} is {e['status']}: "
                    f"{_verdict_line(e)}{_failing_cases(e)}"), evidence
            if not goal.is_feasible(e["metrics"]):
                return PromotionRequest.State.REFUSED, (
                    f"extended validation failed: on fresh seed {seed} the candidate breaks a constraint: "
                    f"{_broken(goal.constraints, e['metrics'])}"), evidence
        else:
            e = run(incumbent, seed)
            evidence["incumbent_rounds"].append(e)
            if evidence["incumbent"] is None:
                evidence["incumbent"] = e
            if e["status"] != "ok":
                return PromotionRequest.State.PROMOTED, (
                    f"passed the extended validation; the incumbent (candidate {incumbent.pk}) failed its own "
                    f"re-validation ({e['status']}: {_verdict_line(e)}), so it is replaced without a speed "
                    "comparison"), evidence
    n = len(evidence["candidate"])
    if incumbent is None:
        return PromotionRequest.State.PROMOTED, (
            f"passed the extended validation ({n} fresh seeds); no incumbent for {req.key}"), evidence
    if turns:
        try:
            result = paired_runs.compare_candidates(incumbent, candidate, goal=goal, compare=compare)
        except ComparisonFailed as exc:
            if exc.side == "B":
                return PromotionRequest.State.REFUSED, (
                    f"the paired comparison with the incumbent could not measure the candidate: {exc.reason}"), evidence
            who = f"the incumbent (candidate {incumbent.pk})" if exc.side == "A" else "the sandbox"
            return PromotionRequest.State.FAILED, f"the paired comparison could not run: {who}: {exc.reason}", evidence
        comparison = {**result.to_dict(), "protocol": "paired"}
    else:
        comparison = _alternating_verdict(evidence["candidate"], evidence["incumbent_rounds"], order, req,
                                          floor_setting)
    comparison.update(a=f"incumbent (candidate {incumbent.pk})", b=f"candidate {candidate.pk}",
                      faster=comparison["verdict"] == "b_faster" and not comparison.get("identical"),
                      speedup=1.0 / comparison["ratio"] if comparison.get("ratio") else None)
    evidence["comparison"] = comparison
    figures = speed_figures(comparison, candidate.pk, incumbent.pk)
    if comparison.get("identical"):
        return PromotionRequest.State.REFUSED, (
            f"compiles to the same library as the incumbent (candidate {incumbent.pk}): the same kernel cannot be "
            f"faster ({figures})"), evidence
    if not comparison["faster"]:
        return PromotionRequest.State.REFUSED, (
            f"not faster than the incumbent beyond the noise floor: {figures}"), evidence
    if comparison.get("clock_unchecked"):  # a candidate can rewrite its child's figures: production needs the check
        return PromotionRequest.State.REFUSED, (
            f"its speed-up could not be checked against the parent's clock on this host ({comparison['notes'][0]}): "
            f"{figures}"), evidence
    return PromotionRequest.State.PROMOTED, (
        f"passed the extended validation ({n} fresh seeds) and is faster than the incumbent (candidate "
        f"{incumbent.pk}) beyond the noise floor: {figures}"), evidence


def _alternating_verdict(cand: list[dict], inc: list[dict], order: list[str], req: PromotionRequest,
                         floor_setting: float | None) -> dict[str, Any]:
    """The verdict of a CUDA promotion: one round per pair of evaluations (in ``order``), its
    ratio ``latency_ms(candidate) / latency_ms(incumbent)`` (each a sum of per-shape medians
    of one evaluation), judged by :func:`kernels.comparison.verdict.judge_rounds` against the floor given
    in ``settings.PAIRED_COMPARISON``, else the stored one of the target, else
    :data:`swarm.runs.noise_floors.DEFAULT_FLOOR` (conservative: evaluations in separate processes
    vary more than the turns of a paired comparison)."""
    if floor_setting is not None:
        floor, source = float(floor_setting), "given"
    else:
        info = noise_floors.floor_for(req.target, req.workload, req.shape_set)
        floor, source = info.floor, info.source
    ratios = []
    for c, i in zip(cand, inc):
        c_ms, i_ms = c["metrics"].get("latency_ms"), i["metrics"].get("latency_ms")
        if not (isinstance(c_ms, (int, float)) and isinstance(i_ms, (int, float)) and c_ms > 0 and i_ms > 0):
            raise ValueError(f"an evaluation of the CUDA speed rounds has no positive latency_ms ({c_ms!r}, {i_ms!r})")
        ratios.append(c_ms / i_ms)
    v = judge_rounds(ratios, floor)
    return {**v.to_dict(), "protocol": "alternating evaluations", "order": " ".join(order), "floor_source": source,
            "identical": False}


def speed_figures(comparison: dict, candidate_pk: int, incumbent_pk: int) -> str:
    """``"ratio 0.998 (CI 0.981-1.012), floor 2.1%, 8 rounds; ..."``: a speed verdict for a
    person, the ratio being the candidate's time over the incumbent's."""
    lo, hi = comparison["ci"]
    text = (f"ratio {comparison['ratio']:.3f} (CI {lo:.3f}-{hi:.3f}), floor {comparison['noise_floor']:.1%}, "
            f"{comparison['rounds']} rounds (time of candidate {candidate_pk} over the incumbent's, candidate "
            f"{incumbent_pk}; {comparison.get('protocol', 'paired')})")
    if comparison["verdict"] == "a_faster":
        text += "; the incumbent is faster"
    elif comparison["verdict"] == "tie":
        needed = comparison.get("rounds_needed")
        text += ("; the difference lies within the floor: no number of rounds resolves it on this host" if needed is None
                 else f"; about {needed} rounds would resolve it if the difference holds")
    return text


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
            bench: kernels.BenchSettings | None = None, compare: paired_runs.CompareFn | None = None) -> Promotion:
    """Request and validate a promotion in this process; return the new production kernel.

    For the command line and tests: the web and the API go through :func:`request_promotion`,
    whose validation runs on the target's worker.

    Raises:
        PromotionRefused: as :func:`request_promotion`, or the validation's reason.
    """
    req = request_promotion(candidate, user, note, dispatch=False)
    if req.state == PromotionRequest.State.AWAITING:
        raise PromotionRefused(f"four eyes: promotion request {req.pk} awaits another approver (PROMOTION_FOUR_EYES)")
    req = validate_request(req.pk, evaluate=evaluate, bench=bench, compare=compare)
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
