"""Persistent state of the factory: goals, runs, candidates, evidence, promotions, audit.

Data flows one way (DESIGN.md): the swarm asks ``kernels`` to evaluate, stores the returned
evidence here and publishes an event. Finished evidence is never modified.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from kernels import DesignSpace


class Direction(models.TextChoices):
    MINIMIZE = "minimize"
    MAXIMIZE = "maximize"


class Goal(models.Model):
    """A measurable goal: workload + target + shape set + objectives + constraints + space.

    ``objectives`` is a list of ``{"metric": str, "direction": "minimize"|"maximize"}``; the
    first one is the primary objective (what "best" means). ``constraints`` is a list of
    ``{"metric": str, "op": "<=" | ">=", "value": float}`` that an ``ok`` candidate must meet
    to count as feasible. ``space`` is ``kernels.DesignSpace.to_dict()``.
    """

    name = models.CharField(max_length=200)
    workload = models.CharField(max_length=64)
    target = models.CharField(max_length=64)
    shape_set = models.CharField(max_length=64)
    objectives = models.JSONField()
    constraints = models.JSONField(default=list, blank=True)
    space = models.JSONField()
    source = models.TextField(help_text="Kernel template; parameters arrive as #define lines.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def backend(self) -> str:
        """Backend that drives this goal's target (``cpu-x86_64`` -> ``cpu``)."""
        return target_backend(self.target)

    @property
    def queue(self) -> str:
        """Celery queue of the target, e.g. ``target.cpu-x86_64``."""
        return f"target.{self.target}"

    def design_space(self) -> DesignSpace:
        return DesignSpace.from_dict(self.space)

    def space_size(self) -> int:
        """Number of points of the unrestricted space (product of value counts)."""
        return self.design_space().cartesian_size()

    @property
    def primary(self) -> dict[str, str]:
        return self.objectives[0]

    def is_feasible(self, metrics: dict[str, float]) -> bool:
        """True when ``metrics`` meet every constraint (a missing metric fails it)."""
        for c in self.constraints:
            value = metrics.get(c["metric"])
            if value is None or not math.isfinite(value):
                return False
            if c["op"] == "<=" and not value <= c["value"]:
                return False
            if c["op"] == ">=" and not value >= c["value"]:
                return False
        return True


def target_backend(target: str) -> str:
    """Map a target name to its backend: ``cpu-*`` -> cpu, ``cuda-*`` -> cuda, ``replay:*``."""
    if target.startswith("cpu-"):
        return "cpu"
    if target.startswith("cuda-"):
        return "cuda"
    if target.startswith("replay:"):
        return "replay"
    raise ValueError(f"unknown target {target!r}: expected cpu-*, cuda-* or replay:<dataset>")


class Run(models.Model):
    """One swarm execution for a goal, made of generations of proposals."""

    class State(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        STOPPED = "stopped"
        FAILED = "failed"

    goal = models.ForeignKey(Goal, related_name="runs", on_delete=models.CASCADE)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    budget = models.PositiveIntegerField(help_text="Maximum number of evaluations.")
    batch_size = models.PositiveIntegerField(default=4, help_text="Candidates per generation.")
    seed = models.BigIntegerField()
    generation = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.goal}"

    @property
    def group_name(self) -> str:
        """Channels group that receives this run's events."""
        return f"run.{self.pk}"


class CandidateStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    INVALID = "invalid"


PENDING_STATUSES = (CandidateStatus.QUEUED, CandidateStatus.RUNNING)


class Candidate(models.Model):
    """One concrete kernel: source + parameter values, identified by its content hash."""

    goal = models.ForeignKey(Goal, related_name="candidates", on_delete=models.CASCADE)
    run = models.ForeignKey(Run, related_name="candidates", on_delete=models.CASCADE)
    generation = models.PositiveIntegerField()
    agent = models.CharField(max_length=64)
    content_hash = models.CharField(max_length=64)
    params = models.JSONField()
    source = models.TextField()
    status = models.CharField(max_length=16, choices=CandidateStatus.choices, default=CandidateStatus.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)
    evaluated_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.UniqueConstraint(fields=["goal", "content_hash"], name="candidate_unique_per_goal"),
        ]
        indexes = [models.Index(fields=["run", "status"])]

    def __str__(self) -> str:
        return f"candidate {self.pk} ({self.status})"

    @property
    def is_pending(self) -> bool:
        return self.status in PENDING_STATUSES

    def to_dict(self) -> dict[str, Any]:
        """JSON form used by events, the run page and the API."""
        evidence = getattr(self, "evidence", None)
        return {
            "id": self.pk,
            "run": self.run_id,
            "generation": self.generation,
            "agent": self.agent,
            "hash": self.content_hash,
            "params": self.params,
            "status": self.status,
            "metrics": evidence.metrics if evidence else {},
        }


class Evidence(models.Model):
    """Everything measured about a candidate (see ``kernels.Evidence``). Never modified."""

    candidate = models.OneToOneField(Candidate, related_name="evidence", on_delete=models.CASCADE)
    status = models.CharField(max_length=16, choices=CandidateStatus.choices)
    metrics = models.JSONField(default=dict)
    samples_ms = models.JSONField(default=dict)
    cases = models.JSONField(default=list)
    log = models.TextField(blank=True)
    fingerprint = models.JSONField(default=dict)
    duration_s = models.FloatField(default=0.0)
    created_at = models.DateTimeField(default=timezone.now)

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise RuntimeError(f"evidence {self.pk} is final and cannot be modified")
        super().save(*args, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "metrics": self.metrics,
            "samples_ms": self.samples_ms,
            "cases": self.cases,
            "log": self.log,
            "fingerprint": self.fingerprint,
            "duration_s": self.duration_s,
            "created_at": self.created_at.isoformat(),
        }


class Promotion(models.Model):
    """A candidate approved as the production kernel for (workload, target, shape set)."""

    candidate = models.ForeignKey(Candidate, related_name="promotions", on_delete=models.PROTECT)
    workload = models.CharField(max_length=64)
    target = models.CharField(max_length=64)
    shape_set = models.CharField(max_length=64)
    active = models.BooleanField(default=True)
    note = models.TextField(blank=True)
    promoted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("approve_promotion", "Can promote a candidate to production")]
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "target", "shape_set"],
                condition=models.Q(active=True),
                name="one_active_promotion_per_key",
            )
        ]

    def to_dict(self) -> dict[str, Any]:
        c = self.candidate
        return {
            "workload": self.workload,
            "target": self.target,
            "shape_set": self.shape_set,
            "candidate": c.pk,
            "hash": c.content_hash,
            "params": c.params,
            "source": c.source,
            "promoted_by": self.promoted_by.get_username() if self.promoted_by else None,
            "promoted_at": self.created_at.isoformat(),
            "evidence": c.evidence.to_dict(),
        }


class AuditEvent(models.Model):
    """Who did what, when: every action that changes production or a run."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    verb = models.CharField(max_length=64)
    subject = models.CharField(max_length=200)
    data = models.JSONField(default=dict)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at"]
