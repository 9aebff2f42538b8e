"""Production engines, their end-to-end benchmark history and the promotion guard's checks."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone


class ProductionEngine(models.Model):
    """An engine serving in production on a target: which engine, at which size, under which
    plan. Every promotion of a kernel whose workload it uses re-validates and re-benchmarks it
    (:func:`engines.web.guard.check_kernel_promotion`)."""

    name = models.CharField(max_length=100, unique=True, help_text="e.g. minilm/cpu-x86_64")
    engine = models.CharField(max_length=32, help_text="engines.registry name: minilm, llama-layer, kda-layer")
    config = models.CharField(max_length=32, blank=True, help_text="size config of a layer (small, llama3-8b, ...)")
    target = models.CharField(max_length=64, default="cpu-x86_64")
    plan = models.JSONField(default=dict, help_text="plan parameters (FUSE_*, BATCH_SIZE, KERNEL_*)")
    active = models.BooleanField(default=True)
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
        from engines.registry import WORKLOADS  # noqa: PLC0415

        return WORKLOADS.get(self.engine, ())

    def uses_production(self, workload: str) -> bool:
        """True when the plan runs ``workload`` on its production kernel (choice 2)."""
        return workload in self.workloads() and int(self.plan.get(f"KERNEL_{workload.upper()}", 2)) == 2

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
