"""Four eyes (``PROMOTION_FOUR_EYES``): an approver cannot approve a promotion they requested;
a candidate refused before shows that refusal (reason, who, when) when requested again."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.urls import reverse

from swarm.models import AuditEvent, PromotionRequest
from swarm.production import promotion
from swarm.runs import orchestrator
from tests.swarm.test_views import timed

BENCH = promotion.kernels.BenchSettings(warmup_ms=1, rep_ms=5, min_reps=5, max_reps=20)
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def second(roles, django_user_model):
    """Another approver."""
    user = django_user_model.objects.create_user("second", password="pw-second")
    user.groups.add(roles["engineer"], roles["approver"])
    return user


@pytest.fixture
def evaluated_run(small_goal):
    run, pending = orchestrator.start_run(small_goal, budget=2, seed=5, batch_size=2)
    for c in pending:
        orchestrator.evaluate_candidate(c.pk)
    orchestrator.advance(run.pk)
    return run


@pytest.fixture
def four_eyes(settings):
    settings.PROMOTION_FOUR_EYES = True


def _ok(run):
    return run.candidates.filter(status="ok").order_by("id").first()


def _setting(**env) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "PROMOTION_FOUR_EYES")}
    code = "import int21_site.settings as s; print(s.PROMOTION_FOUR_EYES)"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**clean, **env, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, check=True).stdout.strip()


def test_four_eyes_is_on_in_production_mode_and_off_when_embedded():
    assert _setting() == "False"
    assert _setting(REDIS_URL="redis://127.0.0.1:6379/6") == "True"
    assert _setting(REDIS_URL="redis://127.0.0.1:6379/6", PROMOTION_FOUR_EYES="0") == "False"
    assert _setting(PROMOTION_FOUR_EYES="on") == "True"


@pytest.mark.django_db
def test_embedded_mode_lets_one_approver_promote_alone(owner, evaluated_run, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        req = promotion.request_promotion(_ok(evaluated_run), owner)
    assert req.state == PromotionRequest.State.VALIDATING and len(callbacks) == 1


@pytest.mark.django_db
def test_under_four_eyes_the_requester_cannot_approve_and_another_approver_can(
        four_eyes, owner, second, evaluated_run, django_capture_on_commit_callbacks):
    a = _ok(evaluated_run)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        req = promotion.request_promotion(a, owner, "fast")
    assert req.state == PromotionRequest.State.AWAITING and not callbacks  # nothing validates yet
    with pytest.raises(promotion.PromotionRefused, match="four eyes: owner requested promotion request"):
        promotion.approve_request(req, owner)
    req.refresh_from_db()
    assert req.state == PromotionRequest.State.AWAITING
    refusal = AuditEvent.objects.get(verb="promotion.approval_refused")
    assert refusal.actor == owner and refusal.data["request"] == req.pk and "another approver" in refusal.data["reason"]
    with pytest.raises(promotion.PromotionRefused, match="still awaiting"):
        promotion.request_promotion(a, second)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        req = promotion.approve_request(req, second)
    assert req.state == PromotionRequest.State.VALIDATING and req.decided_by == second and len(callbacks) == 1
    assert AuditEvent.objects.filter(verb="promotion.approve", actor=second).exists()
    req = promotion.validate_request(req.pk, evaluate=timed({a.pk: 1.0}), bench=BENCH)
    assert req.state == PromotionRequest.State.PROMOTED, req.reason
    with pytest.raises(promotion.PromotionRefused, match="not awaiting"):
        promotion.approve_request(req, second)


@pytest.mark.django_db
def test_four_eyes_through_the_pages(four_eyes, client, owner, second, evaluated_run):
    a = _ok(evaluated_run)
    client.force_login(owner)
    page = client.post(reverse("candidate-promote", args=[a.pk]), {"note": "mine"}, follow=True).content.decode()
    req = PromotionRequest.objects.get()
    assert req.state == "awaiting" and "awaits another approver" in page
    assert reverse("promotion-request-approve", args=[req.pk]) in page and "another approver must approve your request" in page
    page = client.post(reverse("promotion-request-approve", args=[req.pk]), follow=True).content.decode()
    assert "Not approved: four eyes: owner requested promotion request" in page
    assert AuditEvent.objects.filter(verb="promotion.approval_refused", actor=owner).exists()
    req.refresh_from_db()
    assert req.state == "awaiting"
    client.force_login(second)
    page = client.post(reverse("promotion-request-approve", args=[req.pk]), follow=True).content.decode()
    assert f"Promotion request {req.pk} approved" in page
    req.refresh_from_db()
    assert req.state == "validating" and req.decided_by == second


@pytest.mark.django_db
def test_four_eyes_through_the_api(four_eyes, client, owner, second, evaluated_run):
    a = _ok(evaluated_run)
    client.force_login(owner)
    created = client.post("/api/promotions/", {"candidate": a.pk, "note": "api"}, content_type="application/json")
    assert created.status_code == 202 and created.json()["state"] == "awaiting"
    url = f"/api/promotion-requests/{created.json()['id']}/"
    own = client.post(url + "approve/")
    assert own.status_code == 400 and "four eyes" in own.json()["detail"]
    client.force_login(second)
    no_reason = client.post(url + "reject/", {}, content_type="application/json")
    assert no_reason.status_code == 400 and "say why" in no_reason.json()["detail"]
    rejected = client.post(url + "reject/", {"reason": "not on a Friday"}, content_type="application/json")
    assert rejected.status_code == 200 and rejected.json()["state"] == "refused"
    assert rejected.json()["decided_by"] == "second" and "not on a Friday" in rejected.json()["reason"]
    # requested again: the response carries the earlier refusal, with who and when
    client.force_login(owner)
    again = client.post("/api/promotions/", {"candidate": a.pk}, content_type="application/json").json()
    [earlier] = again["earlier_refusals"]
    assert earlier["request"] == created.json()["id"] and earlier["by"] == "second"
    assert "not on a Friday" in earlier["reason"] and earlier["at"]


@pytest.mark.django_db
def test_a_refused_candidate_requested_again_shows_the_earlier_refusal(client, owner, evaluated_run):
    a = _ok(evaluated_run)
    first = promotion.request_promotion(a, owner, dispatch=False)
    first = promotion.validate_request(first.pk, evaluate=timed({a.pk: 1.0}, status="wrong_result"), bench=BENCH)
    assert first.state == "refused"
    client.force_login(owner)
    page = client.post(reverse("candidate-promote", args=[a.pk]), follow=True).content.decode()
    assert f"Candidate {a.pk} was refused before: request {first.pk} refused at {first.finished_at.isoformat()}" in page
    assert "by the extended validation (requested by owner)" in page and "wrong_result" in page
