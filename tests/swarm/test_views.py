"""Pages and the production API through Django's test client."""

import pytest
from django.urls import reverse

from swarm import orchestrator
from swarm.models import AuditEvent, Goal, Promotion

GOAL_POST = {
    "name": "rmsnorm test",
    "workload": "rmsnorm",
    "target": "cpu-x86_64",
    "shape_set": "test-small",
    "objective": "latency_ms",
    "objective_direction": "minimize",
    "second_objective": "max_rel_error",
    "second_direction": "minimize",
    "max_rel_error": "1e-4",
    "parameters": "ROWS_PER_CHUNK: 1, 4\nUNROLL: 1, 4\nVEC: 1, 8\nACC_DOUBLE: 0, 1",
    "restrictions": "UNROLL * VEC <= 16",
}


def test_pages_need_sign_in(client):
    response = client.get(reverse("goal-list"))
    assert response.status_code == 302 and "/login/" in response["Location"]


@pytest.mark.django_db
def test_an_engineer_creates_a_goal(client, owner):
    client.force_login(owner)
    response = client.post(reverse("goal-create"), GOAL_POST)
    goal = Goal.objects.get()
    assert response.status_code == 302 and response["Location"] == reverse("goal-detail", args=[goal.pk])
    assert goal.space["restrictions"] == ["UNROLL * VEC <= 16"]
    assert goal.space_size() == 16
    assert goal.constraints == [{"metric": "max_rel_error", "op": "<=", "value": 1e-4}]
    assert "void rmsnorm(" in goal.source


@pytest.mark.django_db
@pytest.mark.parametrize(
    "restriction, message",
    [("__import__('os').system('true')", "not allowed"), ("UNROL > 2", "UNROL"), ("UNROLL >", "restriction")],
)
def test_a_bad_restriction_is_shown_in_place_and_nothing_is_saved(client, owner, restriction, message):
    client.force_login(owner)
    response = client.post(reverse("goal-create"), {**GOAL_POST, "restrictions": restriction})
    assert response.status_code == 200
    assert message in response.context["form"].errors["restrictions"][0]
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_a_malformed_parameter_line_is_rejected(client, owner):
    client.force_login(owner)
    response = client.post(reverse("goal-create"), {**GOAL_POST, "parameters": "UNROLL: 1, two"})
    assert "'two'" in response.context["form"].errors["parameters"][0]
    assert not Goal.objects.exists()


@pytest.mark.django_db
def test_a_viewer_cannot_create_goals(client, outsider):
    client.force_login(outsider)
    assert client.post(reverse("goal-create"), GOAL_POST).status_code == 403
    assert not Goal.objects.exists()


@pytest.fixture
def evaluated_run(small_goal):
    run, pending = orchestrator.start_run(small_goal, budget=2, seed=5, batch_size=2)
    for c in pending:
        orchestrator.evaluate_candidate(c.pk)
    orchestrator.advance(run.pk)
    return run


@pytest.mark.django_db
def test_promotion_puts_the_kernel_on_the_production_page_and_api(client, owner, evaluated_run):
    best = orchestrator.best(evaluated_run, list(evaluated_run.candidates.select_related("evidence")))
    client.force_login(owner)
    page = client.get(reverse("candidate-detail", args=[best.pk]))
    assert b"Promote to production" in page.content and b"rmsnorm" in page.content
    response = client.post(reverse("candidate-promote", args=[best.pk]), {"note": "first"})
    assert response.status_code == 302 and response["Location"] == reverse("production")
    assert f"#{best.pk}" in client.get(reverse("production")).content.decode()
    api = client.get(reverse("api-production-kernel", args=["rmsnorm", "cpu-x86_64", "test-small"])).json()
    assert api["candidate"] == best.pk and api["params"] == best.params
    assert api["evidence"]["status"] == "ok" and api["evidence"]["metrics"]["latency_ms"] > 0
    assert "void rmsnorm(" in api["source"]
    assert AuditEvent.objects.filter(verb="promotion.create").count() == 1


@pytest.mark.django_db
def test_a_viewer_cannot_promote(client, outsider, evaluated_run):
    candidate = evaluated_run.candidates.filter(status="ok").first()
    client.force_login(outsider)
    response = client.post(reverse("candidate-promote", args=[candidate.pk]), follow=True)
    assert "lacks the approve_promotion permission" in response.content.decode()
    assert not Promotion.objects.exists()


@pytest.mark.django_db
def test_the_production_api_says_when_nothing_is_promoted(client, owner):
    client.force_login(owner)
    assert client.get(reverse("api-production-kernel", args=["rmsnorm", "cpu-x86_64", "x"])).status_code == 404
    assert client.get(reverse("api-production")).json() == {"kernels": []}
