"""API serializers: read forms from the models' ``to_dict()``, write forms validated at the edge
with messages that say how to fix the input (the same rules as the pages' forms)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from swarm.goals.validation import GoalInvalid, space_size, validate_goal
from swarm.launch import launch_plan
from swarm.models import Candidate, Direction, Goal, Run
from swarm.runs.progress import run_state


class GoalSerializer(serializers.ModelSerializer):
    """A goal. ``objectives``: ``[{"metric", "direction"}]`` (the first is primary);
    ``constraints``: ``[{"metric", "op": "<=" | ">=", "value"}]``; ``space``:
    ``{"parameters": [{"name", "values"}], "restrictions": [str]}``; ``source`` defaults to the
    workload's template on the target's backend.

    A replay goal (target ``replay:<dataset>``) is made by ``manage.py factory import-cache``
    from a Kernel Tuner cache file: its workload, target and shape set name the recorded data
    set and its space keeps that data set's domain; its name, objectives, constraints and the
    space's values and restrictions may change. ``prune_factor`` (``k``, default 3, in (1, 1000]):
    a candidate whose first timed calls are more than ``k`` times slower than the incumbent on
    the same shape is stopped early with the status ``pruned``."""

    space_size = serializers.SerializerMethodField()
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    archived = serializers.BooleanField(read_only=True, help_text="archived: kept with its runs, starts no runs "
                                                                  "(POST .../archive/ to change)")

    class Meta:
        model = Goal
        fields = ["id", "name", "workload", "target", "shape_set", "objectives", "constraints", "space", "source",
                  "prune_factor", "space_size", "created_by", "created_at", "archived", "archived_at"]
        read_only_fields = ["id", "created_by", "created_at", "space_size", "archived", "archived_at"]
        extra_kwargs = {"source": {"required": False, "allow_blank": True}, "prune_factor": {"required": False}}

    def get_space_size(self, goal: Goal) -> dict[str, Any]:
        return space_size(goal.design_space())

    def validate(self, attrs: dict) -> dict:
        """Check the goal with :func:`swarm.goals.validation.validate_goal`; its messages go to
        the fields given (the design space's to ``space``)."""
        try:
            return validate_goal(attrs, goal=self.instance)
        except GoalInvalid as exc:
            errors: dict[str, list[str]] = {}
            for p in exc.problems:
                errors.setdefault(SPACE_PARTS.get(p.field, p.field), []).append(p.message)
            raise serializers.ValidationError(errors) from None


SPACE_PARTS = {"parameters": "space", "restrictions": "space"}  # FieldError fields shown on the space


class RunSerializer(serializers.ModelSerializer):
    """A run with its progress (``progress``: state, generation, evaluated, status counts) and,
    once it ended, why: ``end_kind`` (budget, wall_time, space_exhausted, stopped, failed) and
    ``end_reason`` (in words)."""

    progress = serializers.SerializerMethodField()
    agents = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = ["id", "goal", "state", "budget", "batch_size", "seed", "generation", "max_wall_s", "space",
                  "constraints", "llm_usage", "warm_start", "started_at", "finished_at", "end_kind", "end_reason",
                  "progress", "agents"]
        read_only_fields = fields

    def get_progress(self, run: Run) -> dict[str, Any]:
        return run_state(run)

    def get_agents(self, run: Run) -> list[dict[str, Any]]:
        return [a.to_dict() for a in run.agents.all()]


class GoalArchiveSerializer(serializers.Serializer):
    archived = serializers.BooleanField(default=True, help_text="true: archive the goal; false: unarchive it")


class RunCreateSerializer(serializers.Serializer):
    goal = serializers.PrimaryKeyRelatedField(queryset=Goal.objects.all())
    budget = serializers.IntegerField(min_value=1, max_value=Run.MAX_BUDGET)
    batch_size = serializers.IntegerField(min_value=1, max_value=Run.MAX_BATCH_SIZE, default=4)
    seed = serializers.IntegerField(min_value=0, max_value=2**31 - 1, required=False, allow_null=True)
    max_wall_s = serializers.FloatField(min_value=1.0, required=False, allow_null=True)
    agents = serializers.ListField(child=serializers.DictField(), required=False,
                                   help_text='[{"name", "kind", "settings"}]; default the standard mix')


class CandidateSerializer(serializers.ModelSerializer):
    """A candidate: parameters, source, lineage and whole-run metrics (evidence at ``/evidence/``)."""

    metrics = serializers.SerializerMethodField()
    parents = serializers.PrimaryKeyRelatedField(many=True, read_only=True)
    launch_plan = serializers.SerializerMethodField()

    class Meta:
        model = Candidate
        fields = ["id", "goal", "run", "generation", "agent", "content_hash", "params", "source", "status",
                  "parents", "reused_from", "rationale", "attempts", "created_at", "evaluated_at", "metrics",
                  "launch_plan"]
        read_only_fields = fields

    def get_metrics(self, c: Candidate) -> dict[str, Any]:
        e = getattr(c, "evidence", None)
        return e.metrics if e else {}

    def get_launch_plan(self, c: Candidate) -> dict[str, Any]:
        return launch_plan(c)


class DirectionCreateSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=Direction.Kind.choices)
    payload = serializers.DictField(required=False, default=dict)


class PromotionCreateSerializer(serializers.Serializer):
    candidate = serializers.PrimaryKeyRelatedField(queryset=Candidate.objects.select_related("goal", "evidence"))
    note = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")


class RollbackSerializer(serializers.Serializer):
    to = serializers.IntegerField(required=False, allow_null=True, help_text="promotion id; default the replaced one")
    note = serializers.CharField(required=False, allow_blank=True, max_length=2000, default="")
