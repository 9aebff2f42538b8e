"""Forms: validation at the edge, with messages that say how to fix the input."""

from __future__ import annotations

from django import forms

import kernels
from swarm.models import Goal

TARGETS = [("cpu-x86_64", "cpu-x86_64 (C + OpenMP, system compiler)")]
METRICS = [
    ("latency_ms", "latency (ms)"),
    ("max_rel_error", "max relative error"),
    ("gbps", "bandwidth (GB/s)"),
    ("gflops", "throughput (GFLOP/s)"),
]
DIRECTIONS = [("minimize", "minimise"), ("maximize", "maximise")]


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


class GoalForm(forms.Form):
    """Create a goal: workload, target, shape set, objectives, a constraint and a design space."""

    name = forms.CharField(max_length=200)
    workload = forms.ChoiceField()
    target = forms.ChoiceField(choices=TARGETS)
    shape_set = forms.ChoiceField()
    objective = forms.ChoiceField(choices=METRICS, initial="latency_ms")
    objective_direction = forms.ChoiceField(choices=DIRECTIONS, initial="minimize")
    second_objective = forms.ChoiceField(choices=METRICS, initial="max_rel_error")
    second_direction = forms.ChoiceField(choices=DIRECTIONS, initial="minimize")
    max_rel_error = forms.FloatField(min_value=0.0, initial=1e-4, help_text="constraint: max relative error <= this")
    parameters = forms.CharField(widget=forms.Textarea(attrs={"rows": 6}))
    restrictions = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        names = sorted(kernels.WORKLOADS)
        self.fields["workload"].choices = [(n, n) for n in names]
        self.fields["shape_set"].choices = [
            (s, f"{w}: {s}") for w in names for s in kernels.get_workload(w).shape_sets
        ]

    def clean_parameters(self) -> list[dict]:
        return parse_parameters(self.cleaned_data["parameters"])

    def clean(self) -> dict:
        data = super().clean()
        workload = data.get("workload")
        if workload and data.get("shape_set") and data["shape_set"] not in kernels.get_workload(workload).shape_sets:
            self.add_error("shape_set", f"shape set {data['shape_set']!r} is not one of {workload}'s")
        if data.get("objective") and data.get("objective") == data.get("second_objective"):
            self.add_error("second_objective", "pick a different metric than the primary objective")
        if "parameters" in data:
            restrictions = [r.strip() for r in data.get("restrictions", "").splitlines() if r.strip()]
            try:
                space = kernels.DesignSpace.from_dict({"parameters": data["parameters"], "restrictions": restrictions})
            except kernels.SpaceError as exc:
                field = "restrictions" if "restriction" in str(exc) else "parameters"
                self.add_error(field, str(exc))
            else:
                data["space"] = space.to_dict()
        return data

    def save(self, user) -> Goal:
        d = self.cleaned_data
        return Goal.objects.create(
            name=d["name"],
            workload=d["workload"],
            target=d["target"],
            shape_set=d["shape_set"],
            objectives=[
                {"metric": d["objective"], "direction": d["objective_direction"]},
                {"metric": d["second_objective"], "direction": d["second_direction"]},
            ],
            constraints=[{"metric": "max_rel_error", "op": "<=", "value": d["max_rel_error"]}],
            space=d["space"],
            source=kernels.load_template(d["workload"], "cpu"),
            created_by=user,
        )


class RunForm(forms.Form):
    budget = forms.IntegerField(min_value=1, max_value=100_000, initial=30)
    batch_size = forms.IntegerField(min_value=1, max_value=256, initial=4)
    seed = forms.IntegerField(required=False, min_value=0, max_value=2**31 - 1)


class PromoteForm(forms.Form):
    note = forms.CharField(required=False, max_length=2000)
