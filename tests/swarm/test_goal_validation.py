"""One goal validator behind every path that writes a goal: the same bad input gets the same
message on the goal form (POST to the goal-create page), the API (POST /api/goals/) and the
page's live space check, each in its own error format."""

import pytest
from django.urls import reverse
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from swarm.goals.replay import import_cache
from swarm.goals.validation import GoalInvalid, validate_goal
from swarm.models import Goal
from swarm.web.forms import GoalForm
from tests.swarm.test_replay_api import GEMM

FORM = {
    "name": "one validator", "workload": "rmsnorm", "target": "cpu-x86_64", "shape_set": "test-small",
    "objective": "latency_ms", "objective_direction": "minimize",
    "second_objective": "", "second_direction": "minimize",
    "max_rel_error": "1e-4", "constraints": "",
    "parameters": "UNROLL: 1, 2, 4\nVEC: 1, 8", "restrictions": "UNROLL * VEC <= 16",
}
API = {
    "name": "one validator", "workload": "rmsnorm", "target": "cpu-x86_64", "shape_set": "test-small",
    "objectives": [{"metric": "latency_ms", "direction": "minimize"}],
    "constraints": [{"metric": "max_rel_error", "op": "<=", "value": 1e-4}],
    "space": {"parameters": [{"name": "UNROLL", "values": [1, 2, 4]}, {"name": "VEC", "values": [1, 8]}],
              "restrictions": ["UNROLL * VEC <= 16"]},
}
MAX_REL = API["constraints"][0]


def _space(unroll=(1, 2, 4), restrictions=("UNROLL * VEC <= 16",)) -> dict:
    return {"space": {"parameters": [{"name": "UNROLL", "values": list(unroll)}, {"name": "VEC", "values": [1, 8]}],
                      "restrictions": list(restrictions)}}


# (form change, form field, API change, API field, a part of the message)
BAD = {
    "unknown workload": ({"workload": "nope"}, "workload", {"workload": "nope"}, "workload", "unknown workload 'nope'"),
    "unknown shape set": ({"shape_set": "nope"}, "shape_set", {"shape_set": "nope"}, "shape_set",
                          "shape set 'nope' is not one of rmsnorm's"),
    "another workload's shape set": ({"shape_set": "square-1024"}, "shape_set",
                                     {"shape_set": "square-1024"}, "shape_set", "is not one of rmsnorm's"),
    "duplicate parameter values": ({"parameters": "UNROLL: 1, 1\nVEC: 1, 8"}, "parameters",
                                   _space(unroll=(1, 1)), "space", "duplicate values"),
    "a parameter without values": ({"parameters": "UNROLL:\nVEC: 1, 8"}, "parameters",
                                   _space(unroll=()), "space", "needs at least one value"),
    "a restriction naming an unknown parameter": ({"restrictions": "UNROL > 2"}, "restrictions",
                                                  _space(restrictions=["UNROL > 2"]), "space", "UNROL"),
    "a space with no valid point": ({"restrictions": "UNROLL > 100"}, "restrictions",
                                    _space(restrictions=["UNROLL > 100"]), "space", "exclude every one of the 6 points"),
    "an objective given twice": ({"second_objective": "latency_ms"}, "second_objective",
                                 {"objectives": [{"metric": "latency_ms", "direction": "minimize"}] * 2}, "objectives",
                                 "each objective needs a different metric"),
    "a bad constraint metric": ({"constraints": "2x <= 1"}, "constraints",
                                {"constraints": [MAX_REL, {"metric": "2x", "op": "<=", "value": 1}]}, "constraints",
                                "constraint on '2x': a metric is named with letters"),
    "a bad constraint op": ({"constraints": "gbps > 3"}, "constraints",
                            {"constraints": [MAX_REL, {"metric": "gbps", "op": ">", "value": 3}]}, "constraints",
                            "op '>' must be <= or >="),
    "a constraint bound that is not a number": ({"constraints": "gbps >= abc"}, "constraints",
                                                {"constraints": [MAX_REL, {"metric": "gbps", "op": ">=", "value": "abc"}]},
                                                "constraints", "'abc' is not a number"),
    "an infinite constraint bound": ({"constraints": "gbps >= inf"}, "constraints",
                                     {"constraints": [MAX_REL, {"metric": "gbps", "op": ">=", "value": "inf"}]},
                                     "constraints", "the bound must be a finite number"),
    "a second bound for max_rel_error": ({"constraints": "max_rel_error <= 5"}, "constraints",
                                         {"constraints": [MAX_REL, {"metric": "max_rel_error", "op": "<=", "value": 5}]},
                                         "constraints", "'max_rel_error <=' is given twice"),
    "contradicting bounds": ({"constraints": "gbps >= 5\ngbps <= 1"}, "constraints",
                             {"constraints": [MAX_REL, {"metric": "gbps", "op": ">=", "value": 5},
                                              {"metric": "gbps", "op": "<=", "value": 1}]},
                             "constraints", "contradict each other"),
}


@pytest.fixture
def api(owner) -> APIClient:
    token, _ = Token.objects.get_or_create(user=owner)
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return c


@pytest.mark.django_db
@pytest.mark.parametrize("form_change, form_field, api_change, api_field, part", list(BAD.values()), ids=list(BAD))
def test_the_same_bad_input_gets_the_same_message_on_the_form_and_the_api(
        client, owner, api, form_change, form_field, api_change, api_field, part):
    client.force_login(owner)
    page = client.post(reverse("goal-create"), {**FORM, **form_change})
    assert page.status_code == 200
    form_errors = page.context["form"].errors
    r = api.post("/api/goals/", {**API, **api_change}, format="json")
    assert r.status_code == 400
    api_errors = r.json()
    assert list(form_errors[form_field]) == api_errors[api_field], (form_errors, api_errors)
    assert part in api_errors[api_field][0]
    assert set(form_errors) == {form_field} and set(api_errors) == {api_field}
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_the_good_input_makes_the_same_goal_on_both_paths(client, owner, api):
    client.force_login(owner)
    assert client.post(reverse("goal-create"), FORM).status_code == 302
    assert api.post("/api/goals/", API, format="json").status_code == 201
    by_form, by_api = Goal.objects.order_by("pk")
    fields = ("workload", "target", "shape_set", "objectives", "constraints", "space", "source")
    assert {f: getattr(by_form, f) for f in fields} == {f: getattr(by_api, f) for f in fields}


@pytest.mark.django_db
@pytest.mark.parametrize("restrictions, part", [("UNROL > 2", "UNROL"), ("UNROLL > 100", "exclude every one")])
def test_the_live_space_check_says_what_the_form_says(client, owner, restrictions, part):
    client.force_login(owner)
    checked = client.post(reverse("api-goal-check-space"), {**FORM, "restrictions": restrictions}).json()
    page = client.post(reverse("goal-create"), {**FORM, "restrictions": restrictions})
    assert not checked["ok"] and part in checked["errors"]["restrictions"]
    assert checked["errors"]["restrictions"] == page.context["form"].errors["restrictions"][0]


@pytest.mark.django_db
def test_the_validator_reports_every_problem_per_field():
    with pytest.raises(GoalInvalid) as info:
        validate_goal({**API, "workload": "nope", "constraints": [MAX_REL, {"metric": "gbps", "op": "<", "value": 1}],
                       "objectives": [{"metric": "latency_ms", "direction": "up"}]})
    problems = {(p.field, p.index) for p in info.value.problems}
    assert problems == {("workload", None), ("constraints", 1), ("objectives", 0)}
    assert set(info.value.errors) == {"workload", "constraints", "objectives"}


@pytest.mark.django_db
def test_the_validator_cleans_values_and_fills_the_default_template():
    cleaned = validate_goal({**API, "constraints": [{"metric": "gbps", "op": ">=", "value": "2.5"}]})
    assert cleaned["constraints"] == [{"metric": "gbps", "op": ">=", "value": 2.5}]
    assert "void rmsnorm(" in cleaned["source"]
    assert cleaned["space"]["restrictions"] == ["UNROLL * VEC <= 16"]


@pytest.mark.django_db
@pytest.mark.parametrize("change, field, part", [
    ({"constraints": [MAX_REL, {"metric": "gbps", "op": ">=", "value": 10**400}]}, "constraints", "finite number"),
    ({"constraints": [MAX_REL, {"metric": "gbps", "op": ">=", "value": True}]}, "constraints", "is not a number"),
    ({"space": {"parameters": [], "restrictions": []}}, "space", "at least one parameter"),
], ids=["an integer beyond float range", "a boolean bound", "no parameters"])
def test_the_api_refuses_what_cannot_be_a_goal(api, change, field, part):
    r = api.post("/api/goals/", {**API, **change}, format="json")
    assert r.status_code == 400 and part in r.json()[field][0], r.content
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_an_over_nested_body_is_a_400(api):
    r = api.post("/api/goals/", "[" * 100_000 + "]" * 100_000, content_type="application/json")
    assert r.status_code == 400 and "nested too deeply" in r.json()["detail"]


@pytest.mark.django_db
def test_a_replay_goal_is_renamed_through_the_form(client, owner):
    goal = import_cache(GEMM, user=owner)[0]
    client.force_login(owner)
    r = client.post(reverse("goal-edit", args=[goal.pk]), {**GoalForm.initial_for(goal), "name": "renamed"})
    assert r.status_code == 302, r.context["form"].errors if r.context else r
    goal.refresh_from_db()
    assert goal.name == "renamed" and goal.space["domain"].startswith("replay:")


@pytest.mark.django_db
def test_a_goal_of_recorded_scores_keeps_its_objective_when_saved_through_the_form(client, owner, tmp_path):
    """The form's objective lists a goal's own metrics too: saved as shown, a goal that
    maximises a recorded ``score`` (and a second objective outside the form's list) keeps them."""
    import json
    import re

    path = tmp_path / "form-scores.json"
    path.write_text(json.dumps({"tune_params_keys": ["a"], "tune_params": {"a": [1, 2, 3]}, "objective": "score",
                                "cache": {f"{a}": {"a": a, "score": a - 2.5} for a in (1, 2, 3)}}))
    goal = import_cache(path, user=owner)[0]
    goal.objectives = [*goal.objectives, {"metric": "energy_j", "direction": "minimize"}]
    goal.save()
    client.force_login(owner)
    page = client.get(reverse("goal-edit", args=[goal.pk])).content.decode()
    assert re.search(r'<option value="score"[^>]*selected', page) and re.search(r'<option value="energy_j"[^>]*selected', page)
    # the data set's workload and shape set are offered too: the form as a browser submits it
    assert re.search(rf'<option value="{goal.workload}"[^>]*selected', page)
    assert re.search(r'<option value="recorded"[^>]*selected', page)
    r = client.post(reverse("goal-edit", args=[goal.pk]), {**GoalForm.initial_for(goal), "name": "renamed"})
    assert r.status_code == 302, r.context["form"].errors if r.context else r
    goal.refresh_from_db()
    assert goal.name == "renamed" and goal.objectives == [{"metric": "score", "direction": "maximize"},
                                                          {"metric": "energy_j", "direction": "minimize"}]
    assert goal.constraints == []  # recorded data has no error to bound: no max_rel_error constraint appears


@pytest.mark.django_db
def test_a_replay_goal_edited_through_the_form_or_api_keeps_its_files_labels(client, owner, tmp_path, api):
    import json

    path = tmp_path / "form-labels.json"
    path.write_text(json.dumps({"tune_params_keys": ["method", "unroll"],
                                "tune_params": {"method": ["best1bin", "rand1bin", "best2exp"], "unroll": [1, 2]},
                                "cache": {f"{m},{u}": {"method": m, "unroll": u, "time": 1.0 + u}
                                          for m in ("best1bin", "rand1bin", "best2exp") for u in (1, 2)}}))
    goal = import_cache(path, user=owner)[0]
    client.force_login(owner)
    page = client.get(reverse("goal-detail", args=[goal.pk])).content.decode()
    assert "best1bin, rand1bin, best2exp (searched as 0, 1, 2)" in page
    form = GoalForm.initial_for(goal)
    assert "method: 0, 1, 2" in form["parameters"]
    r = client.post(reverse("goal-edit", args=[goal.pk]), {**form, "name": "renamed"})
    assert r.status_code == 302, r.context["form"].errors if r.context else r
    goal.refresh_from_db()
    assert goal.space["parameters"][0] == {"name": "method", "values": [0, 1, 2], "labels": ["best1bin", "rand1bin", "best2exp"]}
    r = client.post(reverse("goal-edit", args=[goal.pk]), {**form, "parameters": "method: 0, 2\nunroll: 1, 2"})
    assert r.status_code == 302
    goal.refresh_from_db()
    assert goal.space["parameters"][0] == {"name": "method", "values": [0, 2], "labels": ["best1bin", "best2exp"]}
    r = client.post(reverse("goal-edit", args=[goal.pk]), {**form, "parameters": "method: 0, 1, 2\nunroll: 1, 2"})
    assert r.status_code == 302  # widened again: the file still names position 1
    goal.refresh_from_db()
    assert goal.space["parameters"][0]["labels"] == ["best1bin", "rand1bin", "best2exp"]
    refused = client.post(reverse("goal-edit", args=[goal.pk]), {**form, "parameters": "method: 0, 7\nunroll: 1, 2"})
    assert refused.status_code == 200
    assert "value(s) [7] are no recorded name's position" in refused.context["form"].errors["parameters"][0]
    # the API may leave the labels out (they are filled in) but not give others
    space = {**goal.space, "parameters": [{"name": "method", "values": [2, 0]}, goal.space["parameters"][1]]}
    assert api.patch(f"/api/goals/{goal.pk}/", {"space": space}, format="json").status_code == 200
    goal.refresh_from_db()
    assert goal.space["parameters"][0] == {"name": "method", "values": [2, 0], "labels": ["best2exp", "best1bin"]}
    space["parameters"][0]["labels"] = ["best1bin", "best2exp"]
    r = api.patch(f"/api/goals/{goal.pk}/", {"space": space}, format="json")
    assert r.status_code == 400 and "recorded names of its values, ['best2exp', 'best1bin']" in json.dumps(r.json())
    goal.refresh_from_db()
    assert goal.space["parameters"][0]["labels"] == ["best2exp", "best1bin"]  # nothing lost

