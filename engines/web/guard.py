"""The cross-layer guard: promoting a kernel must not break or slow down a production engine.

:func:`check_kernel_promotion` is called by the promotion flow (``swarm.promotion``) before a
candidate kernel becomes production for (workload, target, shape set). For every active
:class:`~engines.web.models.ProductionEngine` on that target whose plan runs the workload on
its production kernel, it re-validates the engine end to end with the candidate in place of
the production kernel and re-benchmarks it against the engine as it runs today, in a child
process (:mod:`engines._isolated`; the candidate is not trusted in-process yet). The
promotion is blocked when

* the engine's output is wrong with the candidate (the end-to-end validation fails, or the
  child crashes or times out), or
* the engine is slower beyond noise: the incumbent engine is significantly faster on a
  scenario (one-sided Mann-Whitney U at level :data:`ALPHA`, bootstrap interval of the
  speedup entirely above :data:`NOISE` = 1.05, i.e. more than 5% slower with confidence;
  :func:`kernels.stats.compare`).

The verdict and its evidence are stored as a :class:`~engines.web.models.GuardCheck` and the
measurements as :class:`~engines.web.models.EngineBenchmark` rows (trigger ``guard``). An
approver may override a blocked check only with a written reason
(:func:`override`), which is audited (``swarm.AuditEvent`` ``engine_guard.override``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from django.db import transaction
from django.utils import timezone

ALPHA = 0.01
NOISE = 1.05
TIMING_REPS = 15


@dataclass
class GuardResult:
    """The guard's verdict.

    Attributes:
        ok: True when no production engine is broken or slowed down beyond noise.
        reason: one sentence per engine saying why (or that nothing uses the workload).
        evidence: per engine name, validation figures, timing samples and comparisons.
        check: the stored :class:`~engines.web.models.GuardCheck`.
    """

    ok: bool
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    check: Any = None


class GuardOverrideRefused(Exception):
    """The override is not allowed (no permission, no written reason, nothing to override)."""


def affected_engines(workload: str, target: str):
    """Active production engines on ``target`` whose plan runs ``workload``'s production kernel."""
    from engines.web.models import ProductionEngine  # noqa: PLC0415

    return [e for e in ProductionEngine.objects.filter(active=True, target=target) if e.uses_production(workload)]


def check_kernel_promotion(candidate, *, runner: Callable[[dict], dict] | None = None,
                           reps: int = TIMING_REPS) -> GuardResult:
    """Re-validate and re-benchmark every production engine that would run ``candidate``.

    Args:
        candidate: a ``swarm.Candidate`` (its goal gives workload and target).
        runner: runs one engine check request (default
            :func:`engines._isolated.check_engine_isolated`, a child process).
        reps: timing repetitions per scenario and side.

    Returns:
        :class:`GuardResult` (also stored as a ``GuardCheck``).
    """
    from engines._isolated import check_engine_isolated  # noqa: PLC0415
    from engines.web.models import EngineBenchmark, GuardCheck  # noqa: PLC0415
    from engines.web.registry import DbRegistry  # noqa: PLC0415

    goal = candidate.goal
    workload, target = goal.workload, goal.target
    engines = affected_engines(workload, target)
    evidence: dict[str, Any] = {"workload": workload, "target": target, "candidate": candidate.pk,
                                "alpha": ALPHA, "noise": NOISE, "engines": {}}
    if not engines:
        reason = f"no production engine runs the production kernel of {workload} on {target}"
        check = GuardCheck.objects.create(candidate=candidate, workload=workload, target=target, ok=True,
                                          reason=reason, evidence=evidence)
        return GuardResult(True, reason, evidence, check)
    run = runner or check_engine_isolated
    production = DbRegistry().entries(target)
    reasons, ok = [], True
    for eng in engines:
        req = {"engine": eng.engine, "config": eng.config, "plan": eng.plan, "target": target, "production": production,
               "candidate": {"workload": workload, "source": candidate.source, "params": candidate.params,
                             "candidate": candidate.pk, "hash": candidate.content_hash}, "reps": reps}
        res = run(req)
        verdict, why, comparisons = judge(res)
        evidence["engines"][eng.name] = {"verdict": verdict, "reason": why, "comparisons": comparisons,
                                         "result": _trim(res)}
        if verdict != "ok":
            ok = False
        reasons.append(f"{eng.name}: {why}")
        _record_benchmarks(eng, res, candidate, EngineBenchmark)
    reason = ("passed: " if ok else "blocked: ") + "; ".join(reasons)
    with transaction.atomic():
        check = GuardCheck.objects.create(candidate=candidate, workload=workload, target=target, ok=ok, reason=reason,
                                          evidence=evidence)
    return GuardResult(ok, reason, evidence, check)


def judge(res: dict) -> tuple[str, str, dict]:
    """``(verdict, why, comparisons)`` of one engine check: ``wrong_result``, ``slower``,
    ``error`` or ``ok``."""
    from kernels.stats import compare  # noqa: PLC0415

    if res.get("error"):
        return "error", f"the engine check failed with the candidate: {res['error'][:500]}", {}
    val = res.get("challenger_validation") or {}
    if val.get("status") != "ok":
        figs = ", ".join(f"{k}={val[k]:.3g}" for k in ("cosine_min", "max_rel_error", "max_abs_error") if k in val)
        return "wrong_result", f"wrong output with the candidate ({figs}; {val.get('reference', '')})", {}
    comps, slower = {}, []
    for scenario, s in (res.get("timing") or {}).items():
        c = compare(s["incumbent"], s["challenger"], alpha=ALPHA, min_speedup=NOISE)
        comps[scenario] = c.to_dict()
        if c.faster:
            slower.append(f"{scenario} {c.median_b_ms:.3g} ms vs {c.median_a_ms:.3g} ms today "
                          f"({c.speedup:.2f}x slower, CI {c.ci_low:.2f}-{c.ci_high:.2f}, p = {c.p_value:.2g})")
    if slower:
        return "slower", "slower beyond noise with the candidate: " + "; ".join(slower), comps
    figs = ", ".join(f"{k}={val[k]:.3g}" for k in ("cosine_min", "max_rel_error") if k in val)
    speed = ", ".join(f"{k} {1 / v['speedup']:.2f}x" for k, v in comps.items())
    return "ok", f"validated ({figs}) and not slower beyond noise (challenger/incumbent time: {speed})", comps


def _trim(res: dict) -> dict:
    out = dict(res)
    out.pop("traceback", None)
    return out


def _record_benchmarks(eng, res: dict, candidate, model) -> None:
    import statistics  # noqa: PLC0415

    if res.get("error"):
        model.objects.create(engine=eng, trigger="guard", label=f"with candidate {candidate.pk} ({candidate.goal.workload})",
                             status="error", plan=eng.plan, validation={"error": res["error"][:2000]})
        return
    for side in ("incumbent", "challenger"):
        val = res.get(f"{side}_validation") or {}
        timing = res.get("timing") or {}
        metrics = {f"{s}_ms": statistics.median(v[side]) for s, v in timing.items()}
        metrics.update({k: val[k] for k in ("cosine_min", "max_abs_error", "max_rel_error") if k in val})
        label = "as in production" if side == "incumbent" else f"with candidate {candidate.pk} ({candidate.goal.workload})"
        model.objects.create(engine=eng, trigger="guard", label=label, status=val.get("status", "error"),
                             plan=eng.plan, validation=val, metrics=metrics,
                             samples={s: v[side] for s, v in timing.items()}, kernels=val.get("kernels", {}))


def guard_promotion(candidate, **kw) -> GuardResult:
    """The call for the promotion flow: the latest check of ``candidate`` if an approver
    overrode it (the promotion is then allowed, the override stays on record), else a fresh
    :func:`check_kernel_promotion`.

    Returns:
        :class:`GuardResult`; ``ok`` True means the promotion may proceed.
    """
    from engines.web.models import GuardCheck  # noqa: PLC0415

    latest = GuardCheck.objects.filter(candidate=candidate).order_by("-created_at", "-id").first()
    if latest is not None and latest.overridden_at is not None:
        who = latest.overridden_by.get_username() if latest.overridden_by else "an approver"
        return GuardResult(True, f"guard check {latest.pk} overridden by {who}: {latest.override_reason}",
                           latest.evidence, latest)
    return check_kernel_promotion(candidate, **kw)


def promotion_allowed(candidate) -> tuple[bool, Any]:
    """``(allowed, latest GuardCheck or None)``: allowed when the latest check passed or was
    overridden. Without any check: not allowed (run :func:`check_kernel_promotion` first)."""
    from engines.web.models import GuardCheck  # noqa: PLC0415

    check = GuardCheck.objects.filter(candidate=candidate).order_by("-created_at", "-id").first()
    return (check is not None and check.allows_promotion), check


def override(check, user, reason: str):
    """Let a blocked promotion proceed: an approver's decision with a written reason, audited.

    Raises:
        GuardOverrideRefused: the user lacks ``swarm.approve_promotion``, the reason is blank,
            or the check did not block.
    """
    from swarm.models import AuditEvent  # noqa: PLC0415

    if not (user and user.is_authenticated and user.has_perm("swarm.approve_promotion")):
        raise GuardOverrideRefused("only an approver (swarm.approve_promotion) may override the engine guard")
    reason = (reason or "").strip()
    if len(reason) < 10:
        raise GuardOverrideRefused("an override needs a written reason (at least 10 characters) saying why the "
                                   "engine regression is acceptable")
    if check.ok:
        raise GuardOverrideRefused(f"guard check {check.pk} passed; there is nothing to override")
    if check.overridden_at is not None:
        raise GuardOverrideRefused(f"guard check {check.pk} was already overridden by "
                                   f"{check.overridden_by.get_username() if check.overridden_by else 'someone'}")
    with transaction.atomic():
        check.overridden_by, check.override_reason, check.overridden_at = user, reason, timezone.now()
        check.save(update_fields=["overridden_by", "override_reason", "overridden_at"])
        AuditEvent.objects.create(actor=user, verb="engine_guard.override",
                                  subject=f"{check.workload}/{check.target} candidate {check.candidate_id}",
                                  data={"check": check.pk, "reason": reason, "blocked_because": check.reason[:2000]})
    return check
