"""The candidate table API (``/api/runs/<id>/table/``): every candidate, sorted, filtered and
paginated by the database, with column choice; bad input is refused with 400 and the reason."""

import math

import pytest
from django.urls import reverse
from rest_framework.test import APIClient

from benchmarks.run_page import BENCH_SPACE, populate
from tests.swarm.test_api import api_for


@pytest.fixture
def run(db, owner):
    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", user=owner, name="table")
    goal.space = BENCH_SPACE
    goal.save(update_fields=["space"])
    return populate(goal, 60, seed=5, batch_size=8, state="finished", user=owner)


@pytest.fixture
def api(owner):
    return api_for(owner)


def table(api, run, **params):
    r = api.get(reverse("api-run-table", args=[run.pk]), params)
    assert r.status_code == 200, r.content
    return r.json()


def everything(run):
    """Every candidate of the run as (id, status, agent, params, metrics), in id order."""
    return [(c.pk, c.status, c.agent, c.params, c.evidence.metrics) for c in run.candidates.select_related("evidence").order_by("id")]


def test_the_table_needs_a_user(run):
    assert APIClient().get(reverse("api-run-table", args=[run.pk])).status_code in (401, 403)


def test_the_default_page_has_every_candidate_by_id_with_units(api, run):
    out = table(api, run)
    assert out["count"] == 60 and out["limit"] == 50 and out["offset"] == 0 and out["sort"] == ["id"]
    assert [r["id"] for r in out["rows"]] == [c[0] for c in everything(run)][:50]
    names = [c["name"] for c in out["columns"]]
    assert names[:5] == ["id", "generation", "agent", "status", "latency_ms"]
    assert "gbps" in names and "max_rel_error" in names and {p["name"] for p in BENCH_SPACE["parameters"]} <= set(names)
    ok = next(r for r in out["rows"] if r["values"]["status"] == "ok")
    assert ok["text"]["latency_ms"].endswith(" ms") and ok["text"]["gbps"].endswith(" GB/s")
    assert len(ok["text"]["latency_ms"].split()[0].replace(".", "").lstrip("0")) <= 4  # 4 significant digits
    available = {c["name"]: c for c in out["available"]}
    assert available["gflops"]["unit"] == "GFLOP/s" and available["BLOCK"]["kind"] == "param"
    assert "latency_ms[rows=1,hidden=4096]" not in available  # per-shape metrics: the candidate page
    assert set(out["agents"]) == {"random", "evolutionary", "optuna", "llm"}


@pytest.mark.parametrize("key", ["latency_ms", "gflops", "BLOCK", "generation"])
@pytest.mark.parametrize("desc", [False, True])
def test_sorting_is_done_on_every_kind_of_column_with_missing_values_last(api, run, key, desc):
    out = table(api, run, sort=("-" if desc else "") + key, limit=500, columns=f"id,{key}")
    got = [(r["id"], r["values"][key]) for r in out["rows"]]
    assert len(got) == 60
    present = [v for _, v in got if v is not None]
    assert present == sorted(present, reverse=desc) and len(present) > 30
    assert all(v is None for _, v in got[len(present):])  # missing last either way
    for (a, va), (b, vb) in zip(got, got[1:]):  # ties by id
        if va == vb:
            assert a < b


def test_filters_combine_status_agent_and_ranges_on_params_and_metrics(api, run):
    rows = everything(run)
    lats = sorted(m["latency_ms"] for _, s, _, _, m in rows if s == "ok")
    lo, hi = lats[5], lats[-5]
    out = table(api, run, status="ok,wrong_result", agent="random,optuna", **{
        "range.latency_ms": f"{lo!r}..{hi!r}", "range.BLOCK": "2..16", "range.gflops": "0..", "limit": 500})
    want = [cid for cid, s, a, p, m in rows
            if s in ("ok", "wrong_result") and a in ("random", "optuna") and 2 <= p["BLOCK"] <= 16
            and m.get("latency_ms") is not None and lo <= m["latency_ms"] <= hi and m.get("gflops", -1) >= 0]
    assert want and [r["id"] for r in out["rows"]] == want and out["count"] == len(want)
    # one-sided range
    out = table(api, run, **{"range.max_rel_error": "..1e-5", "limit": 500})
    assert [r["id"] for r in out["rows"]] == [cid for cid, _, _, _, m in rows
                                              if m.get("max_rel_error") is not None and m["max_rel_error"] <= 1e-5]


def test_pages_follow_the_sort_and_columns_are_chosen(api, run):
    full = [r["id"] for r in table(api, run, sort="-gbps", limit=500)["rows"]]
    pages = [table(api, run, sort="-gbps", limit=7, offset=o) for o in range(0, 60, 7)]
    assert [r["id"] for p in pages for r in p["rows"]] == full
    assert all(p["count"] == 60 for p in pages) and len(pages[-1]["rows"]) == 60 - 8 * 7
    out = table(api, run, columns="id,BLOCK,gflops,status", limit=3)
    assert [c["name"] for c in out["columns"]] == ["id", "BLOCK", "gflops", "status"]
    assert all(set(r["values"]) == {"id", "BLOCK", "gflops", "status"} for r in out["rows"])


@pytest.mark.parametrize("params, key, words", [
    ({"columns": "id,nope"}, "columns", "unknown column 'nope'"),
    ({"sort": "-nope"}, "sort", "unknown column 'nope'"),
    ({"range.nope": "1..2"}, "range.nope", "unknown column 'nope'"),
    ({"range.latency_ms": "3"}, "range.latency_ms", "expected lo..hi"),
    ({"range.latency_ms": "a..2"}, "range.latency_ms", "expected a number, got 'a'"),
    ({"range.latency_ms": "1..nan"}, "range.latency_ms", "finite number"),
    ({"range.latency_ms": "3..1"}, "range.latency_ms", "empty range: 3 > 1"),
    ({"range.agent": "1..2"}, "range.agent", "agent is not numeric"),
    ({"status": "ok,great"}, "status", "unknown status 'great'"),
    ({"agent": "nobody"}, "agent", "no candidate of run"),
    ({"limit": "ten"}, "limit", "expected an integer, got 'ten'"),
    ({"limit": "0"}, "limit", "from 1 to 500"),
    ({"limit": "501"}, "limit", "from 1 to 500"),
    ({"offset": "-1"}, "offset", "from 0"),
    ({"order": "id"}, "order", "unknown query parameter 'order'"),
])
def test_bad_input_is_refused_with_the_parameter_and_the_reason(api, run, params, key, words):
    r = api.get(reverse("api-run-table", args=[run.pk]), params)
    assert r.status_code == 400, r.content
    body = r.json()
    assert list(body) == [key] and words in body[key][0], body


def test_an_unknown_run_is_404(api, db):
    assert api.get(reverse("api-run-table", args=[999999])).status_code == 404


def test_non_finite_stored_values_come_back_as_missing(api, run):
    from swarm.web.candidate_table import _value, available_columns

    col = available_columns(run)["latency_ms"]
    assert _value(col, (1, 1, "a", "ok", None, {}, {"latency_ms": math.inf})) is None


def test_a_categorical_parameter_sorts_as_text_and_refuses_a_range(api, owner):
    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", user=owner, name="categorical")
    goal.space = {"parameters": [{"name": "BLOCK", "values": [1, 2, 4, 8]}, {"name": "LAYOUT", "values": ["row", "col"]}],
                  "restrictions": []}
    goal.save(update_fields=["space"])
    run = populate(goal, 8, seed=1, batch_size=4, state="finished", user=owner)
    out = table(api, run, sort="-LAYOUT,BLOCK", columns="id,LAYOUT,BLOCK")
    got = [(r["values"]["LAYOUT"], r["values"]["BLOCK"]) for r in out["rows"]]
    assert got == sorted(got, key=lambda v: (v[0] == "col", v[1])) and len(got) == 8
    available = {c["name"]: c for c in out["available"]}
    assert available["LAYOUT"]["numeric"] is False and available["BLOCK"]["numeric"] is True
    r = api.get(reverse("api-run-table", args=[run.pk]), {"range.LAYOUT": "1..2"})
    assert r.status_code == 400 and "LAYOUT is not numeric" in r.json()["range.LAYOUT"][0]


def test_the_table_page_needs_a_login_and_points_at_the_api(client, owner, run):
    url = reverse("run-candidates", args=[run.pk])
    assert client.get(url).status_code == 302  # to the login page
    client.force_login(owner)
    page = client.get(url)
    assert page.status_code == 200
    assert page.context["page_config"]["apiUrl"] == reverse("api-run-table", args=[run.pk])
    assert b'id="candidate-table"' in page.content and b"js/table/main" in page.content
    assert client.get(reverse("run-candidates", args=[999999])).status_code == 404
    run_page = client.get(reverse("run-detail", args=[run.pk]))
    assert url.encode() in run_page.content  # the run page links to it


def _unit_as_the_page_finds_it(rules: dict, name: str) -> str:
    """static/js/run/units.js unitOf(), over the rules the page config carries."""
    base = name.split("[", 1)[0]
    if base in rules["keys"]:
        return rules["keys"][base]
    return next((unit for suffix, unit in rules["suffixes"] if base.endswith(suffix)), "")


@pytest.mark.parametrize("name", ["latency_ms", "latency_ms[rows=1]", "gbps", "gflops", "roofline_pct", "max_rel_error",
                                  "duration_s", "flush_bytes", "copy_gbps", "peak_gflops", "t_us", "margin", "BLOCK"])
def test_the_run_page_finds_units_by_the_same_rules_as_the_server(name):
    from swarm.web import display

    assert _unit_as_the_page_finds_it(display.unit_rules(), name) == display.unit_of(name)
