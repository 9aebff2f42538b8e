"""The engines page's form to register a production engine: the inputs of ``manage.py engine
register`` (engine, size config, target, plan as JSON, name, tune), checked as the command
checks them (:func:`swarm.engine_registry.services.check_config`, ``full_plan``)."""

from __future__ import annotations

import json

from django import forms

from engines.registry import CONFIGS, ENGINES
from swarm.engine_registry.services import check_config, full_plan
from swarm.web.forms import TARGETS


class RegisterEngineForm(forms.Form):
    engine = forms.ChoiceField(choices=[(e, e) for e in ENGINES])
    config = forms.CharField(required=False, max_length=32,
                             help_text="size config of a layer: " + "; ".join(
                                 f"{e}: {', '.join(c)}" for e, c in CONFIGS.items() if c) + " (empty: the first)")
    target = forms.ChoiceField(choices=TARGETS, initial="cpu-x86_64")
    plan = forms.CharField(required=False, initial="{}", widget=forms.Textarea(attrs={"rows": 2}),
                           help_text='JSON object of plan parameters, e.g. {"FUSE_QKV": 1}; missing ones take the defaults')
    name = forms.CharField(required=False, max_length=100, help_text="default: engine-config/target")
    tune = forms.BooleanField(required=False, help_text="queue a plan tuning on the target's worker")

    def clean_plan(self) -> dict:
        text = (self.cleaned_data.get("plan") or "").strip() or "{}"
        try:
            plan = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"the plan is not JSON: {exc}") from None
        if not isinstance(plan, dict):
            raise forms.ValidationError(f"the plan is a JSON object of parameters (got {type(plan).__name__})")
        return plan

    def clean(self) -> dict:
        data = super().clean()
        engine = data.get("engine")
        if not engine:
            return data
        try:
            check_config(engine, data.get("config") or "")
        except KeyError as exc:
            self.add_error("config", str(exc).strip("\"'"))
        if "plan" in data:
            try:
                data["plan"] = full_plan(engine, data["plan"])
            except (KeyError, ValueError) as exc:
                self.add_error("plan", str(exc).strip("\"'"))
        return data
