"""Forms: validation at the edge, with messages that say how to fix the input.

Nothing is saved unless the whole form is valid; a goal is saved in one statement.
"""

from __future__ import annotations

import re
from typing import Any

from django import forms

import kernels
from kernels.evaluation.pruning import DEFAULT_FACTOR
from swarm.goals.validation import GoalInvalid, validate_goal
from swarm.models import Direction, Goal, Run

TARGETS = [
    ("cpu-x86_64", "cpu-x86_64 (C + OpenMP, system compiler)"),
    ("cuda-sm90", "cuda-sm90 (H100 / H200)"),
    ("cuda-sm100", "cuda-sm100 (B200)"),
]
METRICS = [
    ("latency_ms", "latency (ms)"),
    ("max_rel_error", "max relative error"),
    ("gbps", "bandwidth (GB/s)"),
    ("gflops", "throughput (GFLOP/s)"),
    ("roofline_pct", "% of roofline"),
]
DIRECTIONS = [("minimize", "minimise"), ("maximize", "maximise")]
CONSTRAINT_LINE = re.compile(r"^\s*(\S+?)\s*([<>=!]+)\s*(\S+)\s*$")  # metric, op, value: checked by validate_goal


def parse_parameters(text: str) -> list[dict]:
    """Parse ``NAME: v1, v2, ...`` lines into ``[{"name", "values"}]``.

    Raises:
        forms.ValidationError: a line without ``:``, or a value that is not a number.
    """
    params = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        name, sep, values = line.partition(":")
        if not sep:
            raise forms.ValidationError(f"line {lineno} ({line!r}): expected 'NAME: v1, v2, ...'")
        parsed = []
        for v in values.split(","):
            v = v.strip()
            if not v:
                continue
            try:
                parsed.append(int(v))
            except ValueError:
                try:
                    parsed.append(float(v))
                except ValueError:
                    raise forms.ValidationError(f"line {lineno}: value {v!r} of {name.strip()} is not a number") from None
        params.append({"name": name.strip(), "values": parsed})
    if not params:
        raise forms.ValidationError("give at least one tunable parameter")
    return params


def format_parameters(space: dict) -> str:
    return "\n".join(f"{p['name']}: {', '.join(str(v) for v in p['values'])}" for p in space["parameters"])


def parse_constraints(text: str) -> list[dict]:
    """Parse ``METRIC OP VALUE`` lines into ``[{"metric", "op", "value": str}]``; the metric,
    the op (``<=`` or ``>=``) and the value are checked by :func:`swarm.goals.validation.validate_goal`.

    Raises:
        forms.ValidationError: a line that is not ``METRIC OP VALUE``.
    """
    out = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        m = CONSTRAINT_LINE.match(raw)
        if not m:
            raise forms.ValidationError(f"line {lineno} ({raw.strip()!r}): expected 'METRIC <= VALUE' or 'METRIC >= VALUE'")
        out.append({"metric": m.group(1), "op": m.group(2), "value": m.group(3)})
    return out


def format_constraints(constraints: list[dict], skip: str | None = None) -> str:
    return "\n".join(f"{c['metric']} {c['op']} {c['value']:g}" for c in constraints if c["metric"] != skip)


class OfferedChoiceField(forms.ChoiceField):
    """A select whose choices are offered, not enforced: :func:`swarm.goals.validation.validate_goal`
    says what is wrong with a value outside them."""

    def valid_value(self, value: Any) -> bool:
        return True


class ShapeSetSelect(forms.Select):
    """A select whose options carry ``data-workload`` so the page shows a workload's sets only."""

    def create_option(self, name, value, label, selected, index, subindex=None, attrs=None):
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        workload = str(label).split(":", 1)[0]
        option["attrs"]["data-workload"] = workload
        return option


class GoalForm(forms.Form):
    """Create or edit a goal: workload, target, shape set, objectives, constraints, design space
    and template. With ``instance`` (edit), the workload, target and shape set of a goal that
    already has runs cannot change (its candidates were measured on them)."""

    name = forms.CharField(max_length=200)
    workload = OfferedChoiceField()
    target = forms.ChoiceField(choices=TARGETS)
    shape_set = OfferedChoiceField(widget=ShapeSetSelect)
    objective = forms.ChoiceField(choices=METRICS, initial="latency_ms", label="Primary objective")
    objective_direction = forms.ChoiceField(choices=DIRECTIONS, initial="minimize")
    second_objective = forms.ChoiceField(choices=[("", "(none)")] + METRICS, initial="max_rel_error", required=False)
    second_direction = forms.ChoiceField(choices=DIRECTIONS, initial="minimize")
    max_rel_error = forms.FloatField(min_value=0.0, initial=1e-4, required=False,
                                     help_text="constraint: max relative error <= this (empty: none)")
    constraints = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2}), required=False, label="Other constraints",
        help_text="One per line: METRIC <= VALUE or METRIC >= VALUE, e.g. gbps >= 20.",
    )
    parameters = forms.CharField(widget=forms.Textarea(attrs={"rows": 6}))
    restrictions = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    source = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false"}), required=False, label="Template",
        help_text="Kernel template; leave empty for the workload's default template on the target's backend.",
    )
    prune_factor = forms.FloatField(
        initial=3.0, required=False, label="Prune factor k",
        help_text="A candidate whose first timed calls are more than k times slower than the best so far "
                  "is stopped early (pruned).")

    def __init__(self, *args, instance: Goal | None = None, **kwargs) -> None:
        self.instance = instance
        if instance is not None and "initial" not in kwargs and not args:
            kwargs["initial"] = self.initial_for(instance)
        super().__init__(*args, **kwargs)
        names = sorted(kernels.WORKLOADS)
        self.fields["workload"].choices = [(n, n) for n in names]
        self.fields["shape_set"].choices = [
            (s, f"{w}: {s}") for w in names for s in kernels.get_workload(w).shape_sets
        ]
        if instance is not None and instance.target not in dict(TARGETS):
            self.fields["target"].choices = TARGETS + [(instance.target, instance.target)]
        # A replay goal's workload and shape set are its data set's: offered, so that the form
        # as shown submits them rather than the first option
        if instance is not None and instance.workload not in names:
            self.fields["workload"].choices = [(instance.workload, instance.workload), *self.fields["workload"].choices]
        if instance is not None and (instance.workload, instance.shape_set) not in {
                (w, s) for w in names for s in kernels.get_workload(w).shape_sets}:
            self.fields["shape_set"].choices = [(instance.shape_set, f"{instance.workload}: {instance.shape_set}"),
                                                *self.fields["shape_set"].choices]
        # A goal's own metrics stay choices (a replay goal of recorded scores maximises "score"),
        # so that saving the form as shown never replaces an objective.
        own = [(o["metric"], o["metric"]) for o in (instance.objectives if instance is not None else [])
               if o["metric"] not in dict(METRICS)]
        if own:
            self.fields["objective"].choices = METRICS + own
            self.fields["second_objective"].choices = [("", "(none)")] + METRICS + own

    @staticmethod
    def initial_for(goal: Goal) -> dict[str, Any]:
        objectives = goal.objectives + [{"metric": "", "direction": "minimize"}]
        # a goal without the constraint (a replay goal: recorded data has no error) keeps none
        max_rel = next((c["value"] for c in goal.constraints if c["metric"] == "max_rel_error" and c["op"] == "<="), "")
        return {
            "name": goal.name, "workload": goal.workload, "target": goal.target, "shape_set": goal.shape_set,
            "objective": objectives[0]["metric"], "objective_direction": objectives[0]["direction"],
            "second_objective": objectives[1]["metric"], "second_direction": objectives[1]["direction"],
            "max_rel_error": max_rel,
            "constraints": format_constraints(goal.constraints, skip="max_rel_error"),
            "parameters": format_parameters(goal.space), "restrictions": "\n".join(goal.space.get("restrictions", [])),
            "source": goal.source, "prune_factor": goal.prune_factor,
        }

    def clean_parameters(self) -> list[dict]:
        return parse_parameters(self.cleaned_data["parameters"])

    def clean_constraints(self) -> list[dict]:
        return parse_constraints(self.cleaned_data.get("constraints") or "")

    def clean(self) -> dict:
        """Check the goal with :func:`swarm.goals.validation.validate_goal`; its messages go to
        the fields that hold the input (objective ``i`` and the constraint lines to theirs,
        the design space's to ``parameters`` / ``restrictions``)."""
        data = super().clean()
        fields = {f: data[f] for f in ("name", "workload", "target", "shape_set", "source") if f in data}
        if data.get("prune_factor") is not None:  # left empty: the goal keeps its own (new goals 3)
            fields["prune_factor"] = data["prune_factor"]
        if data.get("objective") and data.get("objective_direction"):
            fields["objectives"] = [{"metric": data["objective"], "direction": data["objective_direction"]}]
            if data.get("second_objective") and data.get("second_direction"):
                fields["objectives"].append({"metric": data["second_objective"], "direction": data["second_direction"]})
        has_max_rel = data.get("max_rel_error") is not None
        if "constraints" in data:
            fields["constraints"] = ([{"metric": "max_rel_error", "op": "<=", "value": data["max_rel_error"]}]
                                     if has_max_rel else []) + data["constraints"]
        if "parameters" in data:
            restrictions = [r.strip() for r in data.get("restrictions", "").splitlines() if r.strip()]
            fields["space"] = {"parameters": data["parameters"], "restrictions": restrictions}
            if self.instance is not None and self.instance.space.get("domain"):
                fields["space"]["domain"] = self.instance.space["domain"]  # a replay goal's recorded points
            # a replay goal's labels are its file's (swarm.goals.validation fills them in)
            if self.instance is not None and "domain" not in fields["space"] \
                    and not self._keep_labels(data["parameters"], self.instance.space):
                return data
        try:
            cleaned = validate_goal(fields, goal=self.instance)
        except GoalInvalid as exc:
            for p in exc.problems:
                self.add_error(self._field_of(p.field, p.index, has_max_rel), p.message)
            return data
        data.update({k: v for k, v in cleaned.items() if k in ("source", "space", "constraints", "prune_factor")})
        return data

    def _keep_labels(self, parameters: list[dict], stored: dict[str, Any]) -> bool:
        """Give each edited parameter that the goal's stored space labels the labels of its
        values, in ``parameters`` (the form shows values only); False, with the error on
        ``parameters``, where a value has no label."""
        stored_params = {p["name"]: p for p in stored.get("parameters", []) if p.get("labels")}
        for p in parameters:
            old = stored_params.get(p["name"])
            if old is None:
                continue
            label_of = {v: label for v, label in zip(old["values"], old["labels"])}
            missing = [v for v in p["values"] if v not in label_of]
            if missing:
                self.add_error("parameters", f"{p['name']}: value(s) {missing} have no label; its values "
                                             f"{old['values']} stand for {old['labels']}")
                return False
            p["labels"] = [label_of[v] for v in p["values"]]
        return True

    @staticmethod
    def _field_of(field: str, index: int | None, has_max_rel: bool) -> str:
        """The form field that shows a :class:`swarm.goals.validation.FieldError` on ``field``."""
        if field == "objectives":
            return "second_objective" if index == 1 else "objective"
        if field == "constraints":
            return "max_rel_error" if index == 0 and has_max_rel else "constraints"
        return field

    def goal_fields(self) -> dict[str, Any]:
        d = self.cleaned_data
        objectives = [{"metric": d["objective"], "direction": d["objective_direction"]}]
        if d.get("second_objective"):
            objectives.append({"metric": d["second_objective"], "direction": d["second_direction"]})
        constraints = list(d["constraints"])  # max_rel_error's bound first, then the lines
        return dict(
            name=d["name"], workload=d["workload"], target=d["target"], shape_set=d["shape_set"],
            objectives=objectives, constraints=constraints, space=d["space"], source=d["source"],
            prune_factor=d["prune_factor"] if d.get("prune_factor") is not None else (
                self.instance.prune_factor if self.instance is not None else DEFAULT_FACTOR),
        )

    def save(self, user) -> Goal:
        """Create the goal, or update ``instance``; one statement either way."""
        fields = self.goal_fields()
        if self.instance is None:
            return Goal.objects.create(created_by=user, **fields)
        for k, v in fields.items():
            setattr(self.instance, k, v)
        self.instance.save(update_fields=list(fields))
        return self.instance


class RunForm(forms.Form):
    budget = forms.IntegerField(min_value=1, max_value=Run.MAX_BUDGET, initial=30)
    batch_size = forms.IntegerField(min_value=1, max_value=Run.MAX_BATCH_SIZE, initial=4)
    seed = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1)


class PromoteForm(forms.Form):
    note = forms.CharField(required=False, max_length=2000)


class DirectionForm(forms.Form):
    """One steering decision; the payload is built per kind and checked by ``directions.submit``."""

    kind = forms.ChoiceField(choices=Direction.Kind.choices)
    param = forms.CharField(required=False, max_length=64)
    values = forms.CharField(required=False, max_length=2000, help_text="comma-separated values")
    expression = forms.CharField(required=False, max_length=2000)
    metric = forms.CharField(required=False, max_length=64)
    op = forms.ChoiceField(required=False, choices=[("<=", "<="), (">=", ">=")])
    value = forms.CharField(required=False, max_length=64)
    agent = forms.CharField(required=False, max_length=64)
    factor = forms.CharField(required=False, max_length=32)

    def payload(self) -> dict[str, Any]:
        d = self.cleaned_data
        kind = d["kind"]
        if kind in (Direction.Kind.NARROW, Direction.Kind.EXCLUDE):
            values = []
            for v in (d.get("values") or "").split(","):
                v = v.strip()
                if not v:
                    continue
                try:
                    values.append(int(v))
                except ValueError:
                    try:
                        values.append(float(v))
                    except ValueError:
                        values.append(v)  # a label (a recorded name); swarm.runs.directions checks it
            return {"param": d.get("param"), "values": values}
        if kind == Direction.Kind.ADD_RESTRICTION:
            return {"expression": d.get("expression") or ""}
        if kind == Direction.Kind.SET_CONSTRAINT:
            return {"metric": d.get("metric"), "op": d.get("op"), "value": d.get("value")}
        if kind == Direction.Kind.BOOST_AGENT:
            return {"agent": d.get("agent"), "factor": d.get("factor") or 2.0}
        if kind in (Direction.Kind.PAUSE_AGENT, Direction.Kind.RESUME_AGENT):
            return {"agent": d.get("agent")}
        return {}
