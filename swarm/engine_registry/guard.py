"""The cross-layer guard: promoting a kernel must not break or slow down a production engine.

:func:`check_kernel_promotion` is called by the promotion flow (``swarm.production.promotion``) before a
candidate kernel becomes production for (workload, target, shape set). For every active
:class:`~swarm.engine_registry.models.ProductionEngine` on that target whose plan runs the workload on
its production kernel, it re-validates the engine with the candidate in place of the
production kernel and re-benchmarks it against the engine as it runs today, in sandbox
children confined as the evaluator's (:mod:`engines._isolated`; the candidate is not trusted
in-process yet). The promotion is blocked when

* the engine's output is wrong with the candidate: the end-to-end validation fails, an
  operator's output at the engine's shapes is off its float64 reference beyond its
  workload's tolerance (:mod:`engines._operator_check`), or a child crashes, hangs or fails;
* the engine is slower beyond noise: in the paired, interleaved rounds of incumbent and
  challenger children, an end-to-end scenario or a call of the candidate's workload at one
  of its engine shapes has its whole interval of ``time(challenger) / time(incumbent)``
  above the noise floor band (verdict ``a_faster`` of :func:`kernels.comparison.verdict.judge_rounds`).

A passed check records the shapes it validated and benchmarked the candidate at
(``evidence["engines"][name]["shapes"]``): the engine may then bind the promoted kernel there
even where its shape set does not cover them (:mod:`engines._coverage`).

The verdict and its evidence are stored as a :class:`~swarm.engine_registry.models.GuardCheck` and the
measurements as :class:`~swarm.engine_registry.models.EngineBenchmark` rows (trigger ``guard``). An
approver may override a blocked check only with a written reason
(:func:`override`), which is audited (``swarm.AuditEvent`` ``engine_guard.override``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from django.db import transaction
from django.utils import timezone

from engines._isolated import check_engine_isolated
from swarm.engine_registry.models import EngineBenchmark, GuardCheck, ProductionEngine
from swarm.engine_registry.registry import DbRegistry
from swarm.models import AuditEvent


@dataclass
class GuardResult:
    """The guard's verdict.

    Attributes:
        ok: True when no production engine is broken or slowed down beyond noise.
        reason: one sentence per engine saying why (or that nothing uses the workload).
        evidence: per engine name, validation figures, timing samples and comparisons.
        check: the stored :class:`~swarm.engine_registry.models.GuardCheck`.
    """

    ok: bool
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)
    check: Any = None


class GuardOverrideRefused(Exception):
    """The override is not allowed (no permission, no written reason, nothing to override)."""


def affected_engines(workload: str, target: str):
    """Active production engines on ``target`` whose plan runs ``workload``'s production kernel."""
    return [e for e in ProductionEngine.objects.filter(active=True, target=target) if e.uses_production(workload)]


def check_kernel_promotion(candidate, *, runner: Callable[[dict], dict] | None = None,
                           settings=None, floor_store=None) -> GuardResult:
    """Re-validate and re-benchmark every production engine that would run ``candidate``.

    Args:
        candidate: a ``swarm.Candidate`` (its goal gives workload, target and shape set).
        runner: runs one engine check request (default
            :func:`engines._isolated.check_engine_isolated`).
        settings: :class:`engines._isolated.GuardSettings` of the default runner.
        floor_store: where the default runner keeps noise floors (the promotion flow passes
            the database's, ``swarm.runs.noise_floors.DbFloorStore``); default
            :class:`kernels.comparison.noise_floor.FileFloorStore`.

    Returns:
        :class:`GuardResult` (also stored as a ``GuardCheck``).
    """
    goal = candidate.goal
    workload, target = goal.workload, goal.target
    engines = affected_engines(workload, target)
    evidence: dict[str, Any] = {"workload": workload, "target": target, "candidate": candidate.pk, "engines": {}}
    if not engines:
        reason = f"no production engine runs the production kernel of {workload} on {target}"
        check = GuardCheck.objects.create(candidate=candidate, workload=workload, target=target, ok=True,
                                          reason=reason, evidence=evidence)
        return GuardResult(True, reason, evidence, check)
    run = runner or _default_runner(settings, floor_store)
    production = DbRegistry().entries(target)
    reasons, ok = [], True
    for eng in engines:
        req = {"engine": eng.engine, "config": eng.config, "plan": eng.plan, "target": target, "production": production,
               "candidate": {"workload": workload, "source": candidate.source, "params": candidate.params,
                             "candidate": candidate.pk, "hash": candidate.content_hash, "shape_set": goal.shape_set}}
        res = run(req)
        verdict, why, comparisons = judge(res)
        evidence["engines"][eng.name] = {"verdict": verdict, "reason": why, "comparisons": comparisons,
                                         "shapes": res.get("shapes") or [] if verdict == "ok" else [],
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


def _default_runner(settings, floor_store):
    return lambda req: check_engine_isolated(req, settings=settings, floor_store=floor_store)


def _figs(val: dict, keys) -> str:
    return ", ".join(f"{k}={val[k]:.3g}" for k in keys if isinstance(val.get(k), (int, float)))


def judge(res: dict) -> tuple[str, str, dict]:
    """``(verdict, why, comparisons)`` of one engine check (:func:`engines._isolated.check_engine_isolated`):
    ``error``, ``wrong_result``, ``slower`` or ``ok``; ``comparisons`` per timed item."""
    if res.get("error"):
        return "error", f"the engine check failed with the candidate: {res['error'][:500]}", {}
    val = res.get("challenger_validation") or {}
    if val.get("status") != "ok":
        bad = [r for r in val.get("operators") or () if r.get("status") != "ok"]
        ops = "; ".join(f"{r['workload']} at {_shape(r['shape'])}: max_rel_error {r['max_rel_error']} > {r['tolerance']:g}"
                        for r in bad[:4])
        e2e = _figs(val, ("cosine_min", "max_rel_error", "max_abs_error"))
        return "wrong_result", (f"wrong output with the candidate (end to end {val.get('end_to_end_status', '?')}: {e2e}"
                                + (f"; operators off their float64 reference: {ops}" if ops else "")
                                + f"; {val.get('reference', '')})"), {}
    items = (res.get("timing") or {}).get("items") or {}
    slower = [f"{label} {c['median_challenger_ms']:.3g} ms vs {c['median_incumbent_ms']:.3g} ms today ({c['why']})"
              for label, c in items.items() if c.get("verdict") == "a_faster"]
    if slower:
        return "slower", "slower beyond noise with the candidate: " + "; ".join(slower), items
    worst = (val.get("worst_operator") or {})
    figs = _figs(val, ("cosine_min", "max_rel_error"))
    if worst:
        figs += f", worst operator {worst['workload']} at {_shape(worst['shape'])}: {worst['max_rel_error']:.3g}"
    speed = ", ".join(f"{k} {v['ratio']:.3f}x ({v['verdict']})" for k, v in items.items())
    return "ok", f"validated ({figs}) and not slower beyond noise (challenger/incumbent time: {speed})", items


def _shape(shape: dict) -> str:
    return ",".join(f"{k}={v}" for k, v in shape.items())


def _trim(res: dict) -> dict:
    out = dict(res)
    out.pop("traceback", None)
    return out


def _record_benchmarks(eng, res: dict, candidate, model) -> None:
    if res.get("error"):
        model.objects.create(engine=eng, trigger="guard", label=f"with candidate {candidate.pk} ({candidate.goal.workload})",
                             status="error", plan=eng.plan, validation={"error": res["error"][:2000]})
        return
    items = (res.get("timing") or {}).get("items") or {}
    for side in ("incumbent", "challenger"):
        val = res.get(f"{side}_validation") or {}
        metrics = {f"{s}_ms": v[f"median_{side}_ms"] for s, v in items.items() if v.get("kind") == "scenario"}
        metrics.update({k: val[k] for k in ("cosine_min", "max_abs_error", "max_rel_error") if k in val})
        label = "as in production" if side == "incumbent" else f"with candidate {candidate.pk} ({candidate.goal.workload})"
        model.objects.create(engine=eng, trigger="guard", label=label, status=val.get("status", "error"),
                             plan=eng.plan, validation=val, metrics=metrics,
                             samples={s: v[f"median_{side}_ms"] for s, v in items.items()}, kernels=val.get("kernels", {}))


def guard_promotion(candidate, **kw) -> GuardResult:
    """The call for the promotion flow: the latest check of ``candidate`` if an approver
    overrode it (the promotion is then allowed, the override stays on record), else a fresh
    :func:`check_kernel_promotion`.

    Returns:
        :class:`GuardResult`; ``ok`` True means the promotion may proceed.
    """
    latest = GuardCheck.objects.filter(candidate=candidate).order_by("-created_at", "-id").first()
    if latest is not None and latest.overridden_at is not None:
        who = latest.overridden_by.get_username() if latest.overridden_by else "an approver"
        return GuardResult(True, f"guard check {latest.pk} overridden by {who}: {latest.override_reason}",
                           latest.evidence, latest)
    return check_kernel_promotion(candidate, **kw)


def promotion_allowed(candidate) -> tuple[bool, Any]:
    """``(allowed, latest GuardCheck or None)``: allowed when the latest check passed or was
    overridden. Without any check: not allowed (run :func:`check_kernel_promotion` first)."""
    check = GuardCheck.objects.filter(candidate=candidate).order_by("-created_at", "-id").first()
    return (check is not None and check.allows_promotion), check


def override(check, user, reason: str):
    """Let a blocked promotion proceed: an approver's decision with a written reason, audited.

    Raises:
        GuardOverrideRefused: the user lacks ``swarm.approve_promotion``, the reason is blank,
            or the check did not block.
    """
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
