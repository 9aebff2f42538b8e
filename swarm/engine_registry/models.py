"""Production engines, their end-to-end benchmark history and the promotion guard's checks."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from engines._binding import CHOICE_NAMES
from engines.registry import WORKLOADS


class ProductionEngine(models.Model):
    """An engine serving in production on a target: which engine, at which size, under which
    plan. Every promotion of a kernel whose workload it uses re-validates and re-benchmarks it
    (:func:`swarm.engine_registry.guard.check_kernel_promotion`)."""

    name = models.CharField(max_length=100, unique=True, help_text="e.g. minilm/cpu-x86_64")
    engine = models.CharField(max_length=32, help_text="engines.registry name: minilm, llama-layer, kda-layer")
    config = models.CharField(max_length=32, blank=True, help_text="size config of a layer (small, llama3-8b, ...)")
    target = models.CharField(max_length=64, default="cpu-x86_64")
    plan = models.JSONField(default=dict, help_text="plan parameters (FUSE_*, BATCH_SIZE, KERNEL_*)")
    active = models.BooleanField(default=True)
    kernel_points = models.JSONField(default=dict, blank=True,
                                     help_text="workload -> the kernel choice a plan tuning measured fastest "
                                               "(choice, kind, params, latency_ms, shape_set, why)")
    plan_candidate = models.ForeignKey("swarm.Candidate", null=True, blank=True, on_delete=models.SET_NULL,
                                       related_name="+", help_text="engine-goal candidate whose plan this is")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def workloads(self) -> tuple[str, ...]:
        return WORKLOADS.get(self.engine, ())

    def uses_production(self, workload: str) -> bool:
        """True when the plan runs ``workload`` on its production kernel (choice 2)."""
        return workload in self.workloads() and int(self.plan.get(f"KERNEL_{workload.upper()}", 2)) == 2

    def kernel_rows(self) -> list[dict[str, Any]]:
        """Per workload: the kernel the plan runs and why (``workload``, ``kind``, ``params``,
        ``latency_ms``, ``why``). Without a tuning's choice a workload runs what its plan
        choice binds: the production kernel, else the baseline."""
        rows = []
        for w in self.workloads():
            choice = int(self.plan.get(f"KERNEL_{w.upper()}", 2))
            c = self.kernel_points.get(w)
            if c and int(c.get("choice", -1)) == choice:
                rows.append({"workload": w, "kind": c["kind"], "params": c.get("params") or {},
                             "latency_ms": c.get("latency_ms"), "candidate": c.get("candidate"), "why": c["why"],
                             "measured": True})
            else:
                rows.append({"workload": w, "kind": CHOICE_NAMES.get(choice, str(choice)), "params": {}, "latency_ms": None,
                             "candidate": None, "why": "plan choice, not measured at the engine's shapes"
                             + (" (the baseline when nothing is promoted)" if choice == 2 else ""), "measured": False})
        return rows

    def latest_tuning(self) -> EnginePlanTuning | None:
        return self.tunings.order_by("-created_at", "-id").first()

    def latest(self) -> EngineBenchmark | None:
        return self.benchmarks.order_by("-created_at", "-id").first()

    def to_dict(self) -> dict[str, Any]:
        latest = self.latest()
        return {"id": self.pk, "name": self.name, "engine": self.engine, "config": self.config, "target": self.target,
                "plan": self.plan, "active": self.active, "latest": latest.to_dict() if latest else None}


class EngineBenchmark(models.Model):
    """One end-to-end validation + benchmark of a production engine (its history).

    ``metrics``: scenario -> median latency (ms) and the agreement figures; ``samples``:
    scenario -> raw samples (ms); ``breakdown``: mode -> per-operator time rows; ``kernels``:
    workload -> the kernel bound; ``graph``: the operator graph with bindings.
    """

    class Trigger(models.TextChoices):
        MANUAL = "manual"
        GUARD = "guard"
        PROMOTION = "promotion"
        TUNING = "tuning"

    engine = models.ForeignKey(ProductionEngine, related_name="benchmarks", on_delete=models.CASCADE)
    trigger = models.CharField(max_length=16, choices=Trigger.choices, default=Trigger.MANUAL)
    label = models.CharField(max_length=200, blank=True, help_text="e.g. 'with candidate 12 (gemm)'")
    status = models.CharField(max_length=16, default="ok")
    plan = models.JSONField(default=dict)
    validation = models.JSONField(default=dict)
    metrics = models.JSONField(default=dict)
    samples = models.JSONField(default=dict)
    breakdown = models.JSONField(default=dict)
    kernels = models.JSONField(default=dict)
    graph = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.pk, "trigger": self.trigger, "label": self.label, "status": self.status, "plan": self.plan,
                "metrics": self.metrics, "kernels": self.kernels, "created_at": self.created_at.isoformat()}


class GuardCheck(models.Model):
    """The promotion guard's verdict on a candidate kernel across production engines.

    ``evidence``: per engine, the challenger's and incumbent's validation and timing with the
    slowdown test. Blocked checks can be overridden by an approver with a written reason
    (audited as ``engine_guard.override``).
    """

    candidate = models.ForeignKey("swarm.Candidate", related_name="engine_guard_checks", on_delete=models.CASCADE)
    workload = models.CharField(max_length=64)
    target = models.CharField(max_length=64)
    ok = models.BooleanField()
    reason = models.TextField()
    evidence = models.JSONField(default=dict)
    created_at = models.DateTimeField(default=timezone.now)
    overridden_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="+")
    override_reason = models.TextField(blank=True)
    overridden_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    @property
    def allows_promotion(self) -> bool:
        return self.ok or self.overridden_at is not None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.pk, "candidate": self.candidate_id, "workload": self.workload, "target": self.target,
                "ok": self.ok, "reason": self.reason, "allows_promotion": self.allows_promotion,
                "override_reason": self.override_reason,
                "overridden_by": self.overridden_by.get_username() if self.overridden_by else None,
                "created_at": self.created_at.isoformat()}


class EnginePlanTuning(models.Model):
    """One tuning of a production engine's plan (:mod:`engines.tuning`), one measurement per
    step: per workload the baseline, template points and production kernel at the engine's
    shapes, then engine-level plans. ``state`` is the tuning state; when it is done the
    engine's ``plan`` and ``kernel_points`` are what it measured fastest."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    engine = models.ForeignKey(ProductionEngine, related_name="tunings", on_delete=models.CASCADE)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    state = models.JSONField(default=dict)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    @property
    def progress(self) -> tuple[int, int | None]:
        """(steps done, steps in all: None until the shapes are known)."""
        return int(self.state.get("done_steps", 0)), self.state.get("total_steps")

    def to_dict(self) -> dict[str, Any]:
        done, total = self.progress
        return {"id": self.pk, "engine": self.engine_id, "status": self.status, "phase": self.state.get("phase"),
                "done_steps": done, "total_steps": total, "choices": self.state.get("choices", {}),
                "plan": self.state.get("plan"), "error": self.error, "updated_at": self.updated_at.isoformat()}
