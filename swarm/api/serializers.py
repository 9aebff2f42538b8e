"""API serializers: read forms from the models' ``to_dict()``, write forms validated at the edge
with messages that say how to fix the input (the same rules as the pages' forms)."""

from __future__ import annotations

import math
from typing import Any

from rest_framework import serializers

import kernels
from swarm.forms import default_template, empty_space_message, space_size
from swarm.launch import launch_plan
from swarm.models import Candidate, Direction, Goal, Run, target_backend
from swarm.progress import run_state

METRIC_DIRECTIONS = ("minimize", "maximize")


class GoalSerializer(serializers.ModelSerializer):
    """A goal. ``objectives``: ``[{"metric", "direction"}]`` (the first is primary);
    ``constraints``: ``[{"metric", "op": "<=" | ">=", "value"}]``; ``space``:
    ``{"parameters": [{"name", "values"}], "restrictions": [str]}``; ``source`` defaults to the
    workload's template on the target's backend.

    A replay goal (target ``replay:<dataset>``) is made by ``manage.py factory import-cache``
    from a Kernel Tuner cache file: its workload, target and shape set name the recorded data
    set and its space keeps that data set's domain; its name, objectives, constraints and the
    space's values and restrictions may change."""

    space_size = serializers.SerializerMethodField()
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = Goal
        fields = ["id", "name", "workload", "target", "shape_set", "objectives", "constraints", "space", "source",
                  "space_size", "created_by", "created_at"]
        read_only_fields = ["id", "created_by", "created_at", "space_size"]
        extra_kwargs = {"source": {"required": False, "allow_blank": True}}

    def get_space_size(self, goal: Goal) -> dict[str, Any]:
        return space_size(goal.design_space())

    def _replay(self) -> bool:
        """Whether the goal being changed is a replay goal."""
        return self.instance is not None and self.instance.capabilities.recorded

    def validate_workload(self, value: str) -> str:
        if self._replay() and value == self.instance.workload:
            return value  # a recorded kernel's name, not one of ``kernels.WORKLOADS``
        if value not in kernels.WORKLOADS:
            raise serializers.ValidationError(f"unknown workload {value!r}; known: {', '.join(sorted(kernels.WORKLOADS))}")
        return value

    def validate_target(self, value: str) -> str:
        try:
            backend = target_backend(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None
        if kernels.backends.capabilities(backend).recorded and not (self._replay() and value == self.instance.target):
            raise serializers.ValidationError(
                "a replay goal is made from a Kernel Tuner cache file: manage.py factory import-cache <file>")
        return value

    def validate_objectives(self, value: Any) -> list[dict]:
        if not isinstance(value, list) or not value:
            raise serializers.ValidationError('give a non-empty list of {"metric", "direction"} objects')
        for i, o in enumerate(value):
            if not isinstance(o, dict) or set(o) != {"metric", "direction"} or not isinstance(o["metric"], str):
                raise serializers.ValidationError(f'objectives[{i}] must be {{"metric": str, "direction": "minimize"|"maximize"}}')
            if o["direction"] not in METRIC_DIRECTIONS:
                raise serializers.ValidationError(f"objectives[{i}]: direction must be minimize or maximize")
        if len({o["metric"] for o in value}) != len(value):
            raise serializers.ValidationError("each objective needs a different metric")
        return value

    def validate_constraints(self, value: Any) -> list[dict]:
        if not isinstance(value, list):
            raise serializers.ValidationError('give a list of {"metric", "op", "value"} objects')
        out = []
        for i, c in enumerate(value):
            if not isinstance(c, dict) or set(c) != {"metric", "op", "value"} or c.get("op") not in ("<=", ">="):
                raise serializers.ValidationError(f'constraints[{i}] must be {{"metric": str, "op": "<=" | ">=", "value": number}}')
            try:
                v = float(c["value"])
            except (TypeError, ValueError):
                raise serializers.ValidationError(f"constraints[{i}]: value {c['value']!r} is not a number") from None
            if not math.isfinite(v):
                raise serializers.ValidationError(f"constraints[{i}]: value must be finite")
            out.append({"metric": str(c["metric"]), "op": c["op"], "value": v})
        return out

    def validate_space(self, value: Any) -> dict:
        try:
            space = kernels.DesignSpace.from_dict(value)
        except kernels.SpaceError as exc:
            raise serializers.ValidationError(str(exc)) from None
        domain = self.instance.space.get("domain") if self._replay() else None
        if space.domain != domain:
            raise serializers.ValidationError(
                f"this goal's space keeps its domain {domain!r} (the recorded configurations)" if domain else
                "'domain' belongs to replay goals (made by manage.py factory import-cache); leave it out")
        if domain:
            self.instance.ensure_dataset()  # the domain's points come from the recorded file
        size = space_size(space)
        if size["valid"] == 0:
            raise serializers.ValidationError(empty_space_message(space, size))
        return space.to_dict()

    def validate(self, attrs: dict) -> dict:
        goal = self.instance
        merged = {f: attrs.get(f, getattr(goal, f, None)) for f in ("workload", "target", "shape_set", "source")}
        if self._replay():
            for f in ("workload", "target", "shape_set"):
                if f in attrs and attrs[f] != getattr(goal, f):
                    raise serializers.ValidationError({f: f"a replay goal's {f} is its recorded data set's "
                                                          f"({getattr(goal, f)!r}); import another cache file "
                                                          "(manage.py factory import-cache) for another one"})
            return attrs  # no template: a replay candidate is a recorded configuration
        if merged["workload"] and merged["shape_set"]:
            sets = kernels.get_workload(merged["workload"]).shape_sets
            if merged["shape_set"] not in sets:
                raise serializers.ValidationError({"shape_set": f"{merged['shape_set']!r} is not one of "
                                                                f"{merged['workload']}'s: {', '.join(sets)}"})
        if goal is not None and goal.runs.exists():
            for f in ("workload", "target", "shape_set"):
                if f in attrs and attrs[f] != getattr(goal, f):
                    raise serializers.ValidationError({f: f"this goal has runs measured on {getattr(goal, f)!r}; "
                                                          "create a new goal to change it"})
        if not (merged["source"] or "").strip():
            try:
                attrs["source"] = default_template(merged["workload"], merged["target"])
            except (KeyError, ValueError) as exc:
                raise serializers.ValidationError({"source": f"no default template ({str(exc).strip(chr(39))}); give one"}) from None
        return attrs


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


class RunCreateSerializer(serializers.Serializer):
    goal = serializers.PrimaryKeyRelatedField(queryset=Goal.objects.all())
    budget = serializers.IntegerField(min_value=1, max_value=100_000)
    batch_size = serializers.IntegerField(min_value=1, max_value=256, default=4)
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
