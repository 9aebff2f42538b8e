"""Persistent state of the factory: goals, runs, candidates, evidence, promotions, audit.

Data flows one way (docs/design.md): the swarm asks ``kernels`` to evaluate, stores the returned
evidence here and publishes an event. Finished evidence is never modified.
"""

from __future__ import annotations

import math
from typing import Any

from django.conf import settings
from django.db import models
from django.utils import timezone

from kernels import DesignSpace
from kernels.backends import Capabilities, backend_for_target, capabilities, replay
from kernels.space import label_space
from swarm.launch import launch_plan


class ObjectiveDirection(models.TextChoices):
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
    source = models.TextField(blank=True, help_text="Kernel template; parameters arrive as #define lines.")
    dataset_path = models.CharField(max_length=1000, blank=True, help_text="Recorded data of a replay: target.")
    llm_context_tokens = models.PositiveIntegerField(
        default=6000, help_text="Token budget of the evidence an LLM agent's prompt carries (4 characters a token).")
    prune_factor = models.FloatField(
        default=3.0, help_text="k: a candidate whose first timed calls are more than k times slower than the "
                               "incumbent on the same shape is stopped early (pruned); > 1.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    archived_at = models.DateTimeField(
        null=True, blank=True, help_text="When the goal was archived: hidden from the goal list, no new runs.")

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return self.name

    @property
    def archived(self) -> bool:
        """Whether the goal is archived (its runs are kept; it starts no new ones)."""
        return self.archived_at is not None

    @property
    def backend(self) -> str:
        """Backend that drives this goal's target (``cpu-x86_64`` -> ``cpu``)."""
        return target_backend(self.target)

    @property
    def capabilities(self) -> Capabilities:
        """What the goal's backend does (:class:`kernels.backends.Capabilities`)."""
        return capabilities(self.backend)

    @property
    def queue(self) -> str:
        """Celery queue of the target, e.g. ``target.cpu-x86_64``."""
        return f"target.{self.target}"

    def design_space(self) -> DesignSpace:
        self.ensure_dataset()
        return DesignSpace.from_dict(self.space)

    def ensure_dataset(self) -> None:
        """Register the recorded data set of a replay goal in this process (workers start bare)."""
        if self.dataset_path:
            dataset = self.target[len(replay.PREFIX):]
            try:
                replay.dataset_path(dataset)
            except KeyError:
                replay.register_dataset(self.dataset_path, dataset)

    def recorded_file(self):
        """The parsed recorded file of a replay goal (a
        :class:`~kernels.interchange.tuning_cache.TuningCache`; an imported file is registered
        in this process first, a replay folder's is found by name); None for another goal.

        Raises:
            KeyError: the goal's data set is not known here.
            OSError: the file cannot be read.
            kernels.interchange.tuning_cache.TuningCacheError: it is not a readable cache.
        """
        if not self.target.startswith(replay.PREFIX):
            return None
        self.ensure_dataset()
        return replay.get_dataset(self.target[len(replay.PREFIX):])

    def space_size(self) -> int:
        """Number of points of the unrestricted space (product of value counts)."""
        return self.design_space().cartesian_size()

    @property
    def primary(self) -> dict[str, str]:
        return self.objectives[0]

    def is_feasible(self, metrics: dict[str, float]) -> bool:
        """True when ``metrics`` meet every constraint (a missing metric fails it)."""
        return constraints_met(self.constraints, metrics)


def constraints_met(constraints: list[dict], metrics: dict[str, float]) -> bool:
    """True when ``metrics`` meet every ``{"metric", "op", "value"}`` constraint.

    A missing or non-finite metric fails its constraint.
    """
    for c in constraints:
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
    return backend_for_target(target)


class Run(models.Model):
    """One swarm execution for a goal, made of generations of proposals."""

    #: Largest budget and batch any entry point (form, API, command line) accepts: a larger
    #: one is a typo, not a search.
    MAX_BUDGET = 100_000
    MAX_BATCH_SIZE = 256

    class State(models.TextChoices):
        RUNNING = "running"
        FINISHED = "finished"
        STOPPED = "stopped"
        FAILED = "failed"

    class EndKind(models.TextChoices):
        """Why a run ended (blank while it runs); ``end_reason`` says it in words."""

        BUDGET = "budget"
        WALL_TIME = "wall_time"
        SPACE_EXHAUSTED = "space_exhausted"
        STOPPED = "stopped"
        FAILED = "failed"

    goal = models.ForeignKey(Goal, related_name="runs", on_delete=models.CASCADE)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    budget = models.PositiveIntegerField(help_text="Maximum number of evaluations.")
    batch_size = models.PositiveIntegerField(default=4, help_text="Candidates per generation.")
    seed = models.BigIntegerField()
    generation = models.PositiveIntegerField(default=0)
    max_wall_s = models.FloatField(null=True, blank=True, help_text="Wall-time budget in seconds.")
    space = models.JSONField(help_text="Effective design space: the goal's, narrowed by directions.")
    constraints = models.JSONField(default=list, help_text="Effective constraints (goal's, changed by directions).")
    llm_usage = models.JSONField(default=dict, blank=True, help_text="Tokens and cost of LLM agents.")
    warm_start = models.JSONField(default=dict, blank=True, help_text="What the run inherited from insights.")
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)
    end_kind = models.CharField(max_length=16, choices=EndKind.choices, blank=True,
                                help_text="Why the run ended: budget, wall_time, space_exhausted, stopped, failed.")
    end_reason = models.TextField(blank=True, help_text="Why the run ended, in words (who stopped it, what failed).")

    class Meta:
        ordering = ["-started_at"]

    def __str__(self) -> str:
        return f"run {self.pk} of {self.goal}"

    @property
    def group_name(self) -> str:
        """Channels group that receives this run's events."""
        return f"run.{self.pk}"

    @property
    def identity(self) -> str:
        """Id and start time: unique in a process even when a database reuses ids (tests)."""
        return f"{self.pk}@{self.started_at.timestamp()}"

    def design_space(self) -> DesignSpace:
        self.goal.ensure_dataset()
        return DesignSpace.from_dict(self.space)

    def label_space(self) -> dict[str, Any]:
        """What the labelled values of this run's candidates stand for: its goal's labels and its
        own (:func:`kernels.space.label_space`), so that values narrowed away since keep theirs."""
        return label_space(self.goal.space, self.space)

    def is_feasible(self, metrics: dict[str, float]) -> bool:
        """True when ``metrics`` meet the run's effective constraints."""
        return constraints_met(self.constraints, metrics)


class RunEventSequence(models.Model):
    """The sequence number of a run's last published event (see :class:`RunEvent`).

    A row of its own, not a field of :class:`Run`: ``Run.save()`` writes every field and
    would move the counter back."""

    run = models.OneToOneField(Run, primary_key=True, related_name="event_sequence", on_delete=models.CASCADE)
    last_seq = models.PositiveBigIntegerField(default=0)


class RunEvent(models.Model):
    """One event published to a run's websockets, kept so that a page that missed it (a full
    channel, a dropped socket) can fetch it from ``/api/runs/<id>/events/?after=<seq>``.

    ``seq`` counts a run's events from 1 with no holes; ``data`` is the event's payload as sent.
    """

    run = models.ForeignKey(Run, related_name="events", on_delete=models.CASCADE)
    seq = models.PositiveBigIntegerField()
    event = models.CharField(max_length=32)
    data = models.JSONField()
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["run", "seq"]
        constraints = [models.UniqueConstraint(fields=["run", "seq"], name="run_event_unique_seq")]

    def to_dict(self) -> dict[str, Any]:
        """The websocket form: ``{"event", "seq", "data"}``."""
        return {"event": self.event, "seq": self.seq, "data": self.data}


class Generation(models.Model):
    """One round of proposals from all agents, with the budget share each agent received."""

    run = models.ForeignKey(Run, related_name="generations", on_delete=models.CASCADE)
    number = models.PositiveIntegerField()
    shares = models.JSONField(default=dict, help_text="agent name -> candidates asked for")
    credit = models.JSONField(default=dict, help_text="agent name -> bandit figures when shares were set")
    improvements = models.JSONField(default=dict, help_text="agent name -> frontier improvements this generation")
    started_at = models.DateTimeField(default=timezone.now)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [models.UniqueConstraint(fields=["run", "number"], name="generation_unique_per_run")]


class AgentRecord(models.Model):
    """An agent taking part in a run: its kind, settings, credit and the engineer's steering."""

    run = models.ForeignKey(Run, related_name="agents", on_delete=models.CASCADE)
    name = models.CharField(max_length=64)
    kind = models.CharField(max_length=32)
    settings = models.JSONField(default=dict, blank=True)
    paused = models.BooleanField(default=False)
    boost = models.FloatField(default=1.0, help_text="Multiplier of the agent's bandit score.")
    evaluations = models.PositiveIntegerField(default=0)
    improvements = models.PositiveIntegerField(default=0)
    failed_proposals = models.PositiveIntegerField(default=0)
    last_share = models.PositiveIntegerField(default=0)
    score = models.FloatField(default=0.0, help_text="Bandit (UCB1) score when shares were last set.")

    class Meta:
        ordering = ["run", "id"]
        constraints = [models.UniqueConstraint(fields=["run", "name"], name="agent_unique_per_run")]

    @property
    def credit(self) -> float:
        """Frontier improvements per evaluation."""
        return self.improvements / self.evaluations if self.evaluations else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "paused": self.paused,
            "boost": self.boost,
            "evaluations": self.evaluations,
            "improvements": self.improvements,
            "credit": self.credit,
            "failed_proposals": self.failed_proposals,
            "share": self.last_share,
            "score": self.score,
        }


class ProposalFailure(models.Model):
    """A proposal an agent could not make (e.g. a malformed LLM answer), kept with its raw text."""

    run = models.ForeignKey(Run, related_name="proposal_failures", on_delete=models.CASCADE)
    agent = models.CharField(max_length=64)
    generation = models.PositiveIntegerField()
    error = models.TextField()
    raw = models.TextField(blank=True)
    created_at = models.DateTimeField(default=timezone.now)


class LaneRequest(models.Model):
    """One request of an LLM agent's lane (:mod:`swarm.runs.llm_lane`): a fresh proposal, or the
    repair of a failed candidate in that candidate's conversation.

    It runs on a thread of the process that started it (``holder``) while the run goes on;
    that thread stores the answer (``result``: proposal dicts, see
    :func:`swarm.runs.llm_lane.proposal_to_dict`) and the tokens spent (``usage``), and a later
    generation takes it (``done -> taken``). ``deadline`` bounds the whole request (every
    attempt); a ``running`` request past it is lost.
    """

    class State(models.TextChoices):
        RUNNING = "running"
        DONE = "done"
        TAKEN = "taken"
        FAILED = "failed"
        CANCELLED = "cancelled"

    run = models.ForeignKey(Run, related_name="lane_requests", on_delete=models.CASCADE)
    agent = models.CharField(max_length=64)
    generation = models.PositiveIntegerField(help_text="Generation being proposed when it started.")
    repair_of = models.ForeignKey("Candidate", null=True, blank=True, related_name="repair_requests",
                                  on_delete=models.SET_NULL)
    state = models.CharField(max_length=16, choices=State.choices, default=State.RUNNING)
    holder = models.CharField(max_length=200, blank=True, help_text="host:pid:start of the process running it.")
    started_at = models.DateTimeField(default=timezone.now)
    deadline = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    result = models.JSONField(default=list, blank=True)
    usage = models.JSONField(default=dict, blank=True, help_text="calls, prompt_tokens, completion_tokens, cost_usd")
    error = models.TextField(blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "state"])]


class CandidateStatus(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    OK = "ok"
    COMPILE_ERROR = "compile_error"
    RUNTIME_ERROR = "runtime_error"
    TIMEOUT = "timeout"
    WRONG_RESULT = "wrong_result"
    INVALID = "invalid"
    INVALID_INPUT = "invalid_input"
    PRUNED = "pruned"
    CANCELLED = "cancelled"


PENDING_STATUSES = (CandidateStatus.QUEUED, CandidateStatus.RUNNING)
#: Evaluated, but the candidate could not be judged (the workload's inputs failed,
#: ``kernels.Outcome.invalid_input``, or its evaluation was cancelled): no credit lost, no
#: failure learned, no evidence reused.
UNJUDGED_STATUSES = (CandidateStatus.INVALID_INPUT, CandidateStatus.CANCELLED)


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
    parents = models.ManyToManyField("self", symmetrical=False, related_name="children", blank=True)
    rationale = models.TextField(blank=True, help_text="Why the agent proposed it (LLM agents).")
    transcript = models.JSONField(
        default=dict, blank=True,
        help_text="LLM agents: the conversation (messages), answer, tokens, latency and attempt.")
    reused_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="reused_by",
        help_text="Identical kernel (same hash and shapes) whose evidence was reused instead of re-benchmarking.",
    )
    attempts = models.PositiveIntegerField(default=0)
    retry_history = models.JSONField(default=list, blank=True, help_text="Claims taken over from dead workers.")
    created_at = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)
    claimed_by = models.CharField(max_length=200, blank=True, help_text="host:pid of the evaluating worker.")
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
            "reused": self.reused_from_id is not None,
            "started_at": self.claimed_at.isoformat() if self.claimed_at and self.status == CandidateStatus.RUNNING else None,
        }


#: Whole-run metrics also kept as columns of :class:`Evidence` (NULL when missing or not finite),
#: so that summaries filter and sort by them in the database instead of parsing ``metrics``.
STORED_METRICS = ("latency_ms", "max_rel_error", "gbps")


def stored_metric(metrics: dict[str, Any], name: str) -> float | None:
    """``metrics[name]`` as a float when it is a finite number, else None."""
    v = metrics.get(name) if isinstance(metrics, dict) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


class EvidenceManager(models.Manager):
    """Fills the :data:`STORED_METRICS` columns on ``bulk_create`` too (it bypasses ``save``)."""

    def bulk_create(self, objs, *args: Any, **kwargs: Any):
        objs = list(objs)
        for e in objs:
            e.fill_stored_metrics()
        return super().bulk_create(objs, *args, **kwargs)


class Evidence(models.Model):
    """Everything measured about a candidate (see ``kernels.Evidence``). Never modified.

    ``latency_ms`` (ms), ``max_rel_error`` and ``gbps`` (GB/s) repeat ``metrics`` as columns
    (:data:`STORED_METRICS`), filled when the row is created.
    """

    candidate = models.OneToOneField(Candidate, related_name="evidence", on_delete=models.CASCADE)
    status = models.CharField(max_length=16, choices=CandidateStatus.choices)
    metrics = models.JSONField(default=dict)
    samples_ms = models.JSONField(default=dict)
    cases = models.JSONField(default=list)
    log = models.TextField(blank=True)
    fingerprint = models.JSONField(default=dict)
    static = models.JSONField(default=dict, blank=True, help_text="Static resources (CUDA: registers, spills, occupancy).")
    duration_s = models.FloatField(default=0.0)
    created_at = models.DateTimeField(default=timezone.now)
    latency_ms = models.FloatField(null=True, blank=True, help_text="metrics['latency_ms'] (ms), for queries.")
    max_rel_error = models.FloatField(null=True, blank=True, help_text="metrics['max_rel_error'], for queries.")
    gbps = models.FloatField(null=True, blank=True, help_text="metrics['gbps'] (GB/s), for queries.")

    objects = EvidenceManager()

    def fill_stored_metrics(self) -> None:
        """Copy the :data:`STORED_METRICS` of ``metrics`` into their columns."""
        for name in STORED_METRICS:
            setattr(self, name, stored_metric(self.metrics, name))

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise RuntimeError(f"evidence {self.pk} is final and cannot be modified")
        self.fill_stored_metrics()
        super().save(*args, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "metrics": self.metrics,
            "samples_ms": self.samples_ms,
            "cases": self.cases,
            "log": self.log,
            "fingerprint": self.fingerprint,
            "static": self.static,
            "duration_s": self.duration_s,
            "created_at": self.created_at.isoformat(),
        }


class Insight(models.Model):
    """Knowledge learned from evidence that outlives a run, per (workload, target).

    Kinds: ``importance`` (``{"importances": {param: share}, "method", "n"}``), ``failure_rule``
    (``{"rule", "status", "support", "precision", "restriction"}``: a readable rule and the
    restriction that would exclude it), ``best_config`` (``{"shape", "params", "latency_ms"}``).
    """

    class Kind(models.TextChoices):
        IMPORTANCE = "importance"
        FAILURE_RULE = "failure_rule"
        BEST_CONFIG = "best_config"

    workload = models.CharField(max_length=64)
    target = models.CharField(max_length=64)
    shape_set = models.CharField(max_length=64, blank=True)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    data = models.JSONField()
    run = models.ForeignKey(Run, null=True, blank=True, related_name="insights", on_delete=models.SET_NULL)
    generation = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["workload", "target", "kind", "-created_at"])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "workload": self.workload,
            "target": self.target,
            "shape_set": self.shape_set,
            "kind": self.kind,
            "data": self.data,
            "run": self.run_id,
            "generation": self.generation,
            "created_at": self.created_at.isoformat(),
        }


class Direction(models.Model):
    """An engineer's steering decision for a run, applied when the run next proposes candidates
    (after each evaluation; ``not_applied`` when the run ended first).

    Kinds and payloads: ``narrow`` ``{"param", "values"}`` (keep only these values), ``exclude``
    ``{"param", "values"}``, ``add_restriction`` ``{"expression"}``, ``set_constraint``
    ``{"metric", "op", "value"}``, ``boost_agent`` ``{"agent", "factor"}``, ``pause_agent`` /
    ``resume_agent`` ``{"agent"}``, ``stop`` ``{}``.
    """

    class Kind(models.TextChoices):
        NARROW = "narrow"
        EXCLUDE = "exclude"
        ADD_RESTRICTION = "add_restriction"
        SET_CONSTRAINT = "set_constraint"
        BOOST_AGENT = "boost_agent"
        PAUSE_AGENT = "pause_agent"
        RESUME_AGENT = "resume_agent"
        STOP = "stop"

    class State(models.TextChoices):
        PENDING = "pending"
        APPLIED = "applied"
        REJECTED = "rejected"
        NOT_APPLIED = "not_applied"  # the run ended before its next proposal

    run = models.ForeignKey(Run, related_name="directions", on_delete=models.CASCADE)
    kind = models.CharField(max_length=32, choices=Kind.choices)
    payload = models.JSONField(default=dict, blank=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    state = models.CharField(max_length=16, choices=State.choices, default=State.PENDING)
    effect = models.JSONField(default=dict, blank=True, help_text="What applying it changed (or why it was rejected).")
    created_at = models.DateTimeField(default=timezone.now)
    applied_at = models.DateTimeField(null=True, blank=True)
    applied_generation = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["run", "state"])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "kind": self.kind,
            "payload": self.payload,
            "author": self.author.get_username() if self.author else None,
            "state": self.state,
            "effect": self.effect,
            "created_at": self.created_at.isoformat(),
            "applied_at": self.applied_at.isoformat() if self.applied_at else None,
            "applied_generation": self.applied_generation,
        }


class Promotion(models.Model):
    """A candidate approved as the production kernel for (workload, target, shape set).

    Rows are never deleted: the active row per key is production, the others are its history.
    ``kind`` says how a row came to be: ``promote`` (an approved :class:`PromotionRequest`,
    with its extended validation in ``evidence``) or ``rollback`` (an earlier kernel restored).
    ``replaced`` is the promotion that was active before; ``ended_*`` say when and why this one
    stopped being production (``superseded`` by a newer promotion, or ``rolled_back``).
    """

    class Kind(models.TextChoices):
        PROMOTE = "promote"
        ROLLBACK = "rollback"

    candidate = models.ForeignKey(Candidate, related_name="promotions", on_delete=models.PROTECT)
    workload = models.CharField(max_length=64)
    target = models.CharField(max_length=64)
    shape_set = models.CharField(max_length=64)
    active = models.BooleanField(default=True)
    note = models.TextField(blank=True)
    promoted_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.PROMOTE)
    evidence = models.JSONField(
        default=dict, blank=True,
        help_text="Extended validation and the speed verdict over the incumbent (a paired comparison).",
    )
    replaced = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replaced_by",
        help_text="The production kernel this one replaced.",
    )
    ended_at = models.DateTimeField(null=True, blank=True)
    ended_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
    )
    end_reason = models.CharField(max_length=32, blank=True, help_text="superseded or rolled_back")

    class Meta:
        ordering = ["-created_at", "-id"]
        permissions = [("approve_promotion", "Can promote a candidate to production")]
        constraints = [
            models.UniqueConstraint(
                fields=["workload", "target", "shape_set"],
                condition=models.Q(active=True),
                name="one_active_promotion_per_key",
            )
        ]

    @property
    def key(self) -> str:
        return f"{self.workload}/{self.target}/{self.shape_set}"

    def to_dict(self) -> dict[str, Any]:
        """The production kernel as an inference engine loads it: source, parameters, launch
        plan, and the evidence it was promoted on."""
        c = self.candidate
        return {
            "id": self.pk,
            "workload": self.workload,
            "target": self.target,
            "shape_set": self.shape_set,
            "active": self.active,
            "kind": self.kind,
            "candidate": c.pk,
            "hash": c.content_hash,
            "params": c.params,
            "source": c.source,
            "launch_plan": launch_plan(c),
            "promoted_by": self.promoted_by.get_username() if self.promoted_by else None,
            "promoted_at": self.created_at.isoformat(),
            "note": self.note,
            "replaced": self.replaced_id,
            "ended_at": self.ended_at.isoformat() if self.ended_at else None,
            "end_reason": self.end_reason,
            "evidence": c.evidence.to_dict(),
            "validation": self.evidence,
            "comparison": speed_verdict_fields(self.evidence),
        }


def speed_verdict_fields(evidence: dict | None) -> dict | None:
    """The speed verdict kept in a promotion's evidence (``evidence["comparison"]``), for an
    inference engine or a page: ``protocol`` (``paired``, or ``alternating evaluations`` on
    CUDA), ``verdict`` (``b_faster``: the candidate is faster), ``ratio`` (candidate's time
    over the incumbent's), ``ci``, ``noise_floor`` (fraction), ``floor_source``, ``rounds``,
    ``rounds_needed``, ``why``, ``identical``, ``speedup`` (1 / ratio); None when the
    promotion had no comparison (no incumbent, or one that failed its re-validation)."""
    c = (evidence or {}).get("comparison")
    if not isinstance(c, dict) or "verdict" not in c:
        return None
    keys = ("protocol", "verdict", "ratio", "ci", "noise_floor", "floor_source", "rounds", "rounds_needed", "why",
            "identical", "speedup")
    return {k: c.get(k) for k in keys}


class PromotionRequest(models.Model):
    """An approver's request to promote a candidate, decided by an extended validation.

    The candidate is re-evaluated on the target's queue with fresh seeds and more timing
    repetitions; it becomes production only if it passes and a paired comparison finds it
    faster than the incumbent beyond the target's noise floor
    (:func:`swarm.production.promotion.validate_request`). ``reason`` says exactly
    why a request was refused; ``evidence`` keeps everything measured for the decision.
    """

    class State(models.TextChoices):
        AWAITING = "awaiting"  # four eyes: waits for a second approver
        VALIDATING = "validating"
        PROMOTED = "promoted"
        REFUSED = "refused"
        FAILED = "failed"

    candidate = models.ForeignKey(Candidate, related_name="promotion_requests", on_delete=models.CASCADE)
    workload = models.CharField(max_length=64)
    target = models.CharField(max_length=64)
    shape_set = models.CharField(max_length=64)
    note = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+",
        help_text="Four eyes: the second approver who approved or rejected the request.",
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.VALIDATING)
    reason = models.TextField(blank=True)
    incumbent = models.ForeignKey(
        Promotion, null=True, blank=True, on_delete=models.SET_NULL, related_name="challenges",
    )
    evidence = models.JSONField(default=dict, blank=True)
    promotion = models.OneToOneField(
        Promotion, null=True, blank=True, on_delete=models.SET_NULL, related_name="request",
    )
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    @property
    def key(self) -> str:
        return f"{self.workload}/{self.target}/{self.shape_set}"

    @property
    def is_done(self) -> bool:
        return self.state not in (self.State.VALIDATING, self.State.AWAITING)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk,
            "candidate": self.candidate_id,
            "workload": self.workload,
            "target": self.target,
            "shape_set": self.shape_set,
            "note": self.note,
            "requested_by": self.requested_by.get_username() if self.requested_by else None,
            "decided_by": self.decided_by.get_username() if self.decided_by else None,
            "state": self.state,
            "reason": self.reason,
            "incumbent": self.incumbent_id,
            "promotion": self.promotion_id,
            "evidence": self.evidence,
            "created_at": self.created_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }


class Baseline(models.Model):
    """Latency of a trusted plain implementation (e.g. NumPy) per (workload, target, shape set).

    Measured once on the target's queue (:func:`swarm.runs.baselines.measure`), not on page views.
    """

    class State(models.TextChoices):
        MEASURING = "measuring"
        OK = "ok"
        UNAVAILABLE = "unavailable"

    workload = models.CharField(max_length=64)
    target = models.CharField(max_length=64)
    shape_set = models.CharField(max_length=64)
    method = models.CharField(max_length=200, blank=True, help_text="What was timed, e.g. NumPy float32.")
    state = models.CharField(max_length=16, choices=State.choices, default=State.MEASURING)
    latency_ms = models.FloatField(null=True, blank=True)
    detail = models.TextField(blank=True, help_text="Why it is unavailable, or how it was measured.")
    fingerprint = models.JSONField(default=dict, blank=True)
    requested_at = models.DateTimeField(default=timezone.now)
    measured_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["workload", "target", "shape_set"], name="baseline_unique_per_key")
        ]


class AuditEvent(models.Model):
    """Who did what, when: every action that changes production or a run."""

    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    verb = models.CharField(max_length=64)
    subject = models.CharField(max_length=200)
    data = models.JSONField(default=dict)
    at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-at"]


class NoiseFloor(models.Model):
    """The noise floor of a target for (workload, shape set) on one host fingerprint: the
    smallest time ratio a paired comparison there resolves (``kernels.comparison.noise_floor``).

    ``key`` is ``kernels.comparison.noise_floor.floor_key(target, fingerprint, workload, shape_set, protocol)``;
    ``floor`` a fraction (0.02 = 2%); ``entry`` the whole stored entry (A/A round ratios,
    rounds, settings). Written by the target's workers (:mod:`swarm.runs.noise_floors`), read by the
    web host.
    """

    key = models.CharField(max_length=400, unique=True)
    target = models.CharField(max_length=64)
    workload = models.CharField(max_length=64)
    shape_set = models.CharField(max_length=64)
    fingerprint = models.JSONField(default=dict)
    floor = models.FloatField(help_text="Fraction: 0.02 means ratios within [1/1.02, 1.02] are ties.")
    entry = models.JSONField(default=dict)
    measured_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-measured_at", "-id"]
        indexes = [models.Index(fields=["target", "workload", "shape_set", "-measured_at"])]

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "target": self.target, "workload": self.workload, "shape_set": self.shape_set,
                "floor": self.floor, "measured_at": self.measured_at.isoformat(),
                "rounds": (self.entry or {}).get("rounds")}


class PairedComparisonRun(models.Model):
    """A paired, interleaved comparison of two candidates measured on their target's worker
    (``kernels.comparison.paired.compare_paired``, A = ``candidate_a``): ``result`` is
    ``PairedComparison.to_dict()`` (``verdict``, ``ratio`` = time(B) / time(A), ``ci``,
    ``noise_floor``, ``rounds``, ...), ``error`` says why a failed one could not be measured."""

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    candidate_a = models.ForeignKey(Candidate, related_name="paired_as_a", on_delete=models.CASCADE)
    candidate_b = models.ForeignKey(Candidate, related_name="paired_as_b", on_delete=models.CASCADE)
    workload = models.CharField(max_length=64)
    target = models.CharField(max_length=64)
    shape_set = models.CharField(max_length=64)
    state = models.CharField(max_length=16, choices=State.choices, default=State.QUEUED)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    @property
    def verdict(self) -> str | None:
        return (self.result or {}).get("verdict") if self.state == self.State.DONE else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.pk, "a": self.candidate_a_id, "b": self.candidate_b_id, "workload": self.workload,
            "target": self.target, "shape_set": self.shape_set, "state": self.state, "result": self.result,
            "error": self.error, "requested_by": self.requested_by.get_username() if self.requested_by else None,
            "created_at": self.created_at.isoformat(),
            "finished_at": self.finished_at.isoformat() if self.finished_at else None,
        }
