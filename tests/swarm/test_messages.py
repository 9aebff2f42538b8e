"""Messages a user meets on bad input: a request body over the limit (JSON from the API, a
page that says it on the site), restrictions whose power exponent is over the cap, and
restrictions naming unknown helpers and parameters."""

import json

import pytest
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

import kernels
from kernels.restrictions import MAX_EXPONENT


def _api(user) -> APIClient:
    token, _ = Token.objects.get_or_create(user=user)
    c = APIClient()
    c.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return c


@pytest.mark.django_db
def test_an_api_request_over_the_body_limit_is_answered_in_json_with_the_limit(owner, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100_000
    body = json.dumps({"name": "x" * 200_000})
    r = _api(owner).post("/api/goals/", body, content_type="application/json")
    assert r.status_code == 400 and r["Content-Type"] == "application/json"
    detail = r.json()["detail"]
    assert "request body" in detail and "100000 bytes" in detail and "0.1 MB" in detail


@pytest.mark.django_db
def test_a_form_over_the_body_limit_gets_a_page_that_says_why(owner, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100_000
    c = Client()
    c.force_login(owner)
    r = c.post("/goals/new/", {"name": "x" * 200_000})
    assert r.status_code == 400 and r["Content-Type"].startswith("text/html")
    text = r.content.decode()
    assert "request body" in text and "100000 bytes" in text


GOAL = {
    "name": "capped exponent", "workload": "rmsnorm", "target": "cpu-x86_64", "shape_set": "test-small",
    "objectives": [{"metric": "latency_ms", "direction": "minimize"}], "constraints": [],
    "space": {"parameters": [{"name": "UNROLL", "values": [1, 2]}, {"name": "SHIFT", "values": [80, 96]}],
              "restrictions": ["2 ** SHIFT > UNROLL"]},
}


@pytest.mark.django_db
def test_a_space_emptied_by_the_exponent_cap_says_the_exponent_is_too_large(owner):
    r = _api(owner).post("/api/goals/", GOAL, format="json")
    assert r.status_code == 400
    message = r.json()["space"][0]
    assert "exclude every one of the 4 points" in message
    assert f"restriction '2 ** SHIFT > UNROLL' cannot be evaluated at UNROLL=1 SHIFT=80: exponent 80 is over the cap of {MAX_EXPONENT}" in message
    c = Client()
    c.force_login(owner)
    page = c.post("/api/goals/check-space/", {"parameters": "UNROLL: 1, 2\nSHIFT: 80, 96", "restrictions": "2 ** SHIFT > UNROLL"})
    assert "exponent 80 is over the cap" in page.json()["errors"]["restrictions"]


def test_a_restriction_names_every_unknown_helper_and_parameter():
    with pytest.raises(kernels.SpaceError) as info:
        kernels.DesignSpace.from_dict({"parameters": [{"name": "TILE", "values": [1, 2]}],
                                       "restrictions": ["chunk(N, TILE) <= 4 and split(M) > ROWS"]})
    message = str(info.value)
    assert "calls to 'chunk', 'split' are not allowed (only min, max, abs)" in message
    assert "unknown parameters 'N', 'M', 'ROWS' (known: TILE)" in message
