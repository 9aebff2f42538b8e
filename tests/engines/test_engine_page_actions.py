"""Registering and benchmarking a production engine from the engines page (/engines/)."""

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from swarm.engine_registry import bench_requests
from swarm.engine_registry.models import EngineBenchmark, ProductionEngine

pytestmark = [pytest.mark.django_db, pytest.mark.timeout(600)]


@pytest.fixture
def sent(monkeypatch):
    """Tasks sent by name through Celery: (name, args, queue)."""
    out = []
    monkeypatch.setattr(bench_requests.current_app, "send_task",
                        lambda name, args=None, queue=None, **kw: out.append((name, args, queue)))
    return out


def test_the_form_registers_an_engine_with_the_commands_inputs(client, owner):
    client.force_login(owner)
    page = client.get(reverse("engine-list")).content.decode()
    assert 'id="register-form"' in page and 'name="plan"' in page and "csrfmiddlewaretoken" in page
    r = client.post(reverse("engine-register"), {"engine": "kda-layer", "config": "small", "target": "cpu-x86_64",
                                                 "plan": '{"FUSE_QKV": 0}', "name": ""})
    assert r.status_code == 302 and r["Location"].startswith(reverse("engine-list"))
    pe = ProductionEngine.objects.get(name="kda-layer-small/cpu-x86_64")
    assert pe.plan["FUSE_QKV"] == 0 and len(pe.plan) > 1 and pe.created_by == owner  # completed with the defaults
    page = client.get(r["Location"]).content.decode()
    assert "Registered production engine kda-layer-small/cpu-x86_64" in page and f'id="engine-{pe.pk}"' in page
    # again: the same engine is updated, not duplicated
    r = client.post(reverse("engine-register"), {"engine": "kda-layer", "config": "small", "target": "cpu-x86_64",
                                                 "plan": "{}"})
    assert r.status_code == 302 and ProductionEngine.objects.count() == 1
    assert ProductionEngine.objects.get().plan["FUSE_QKV"] == 1


@pytest.mark.parametrize("post, field, message", [
    ({"engine": "kda-layer", "config": "huge"}, "config", "engine kda-layer has no config &#x27;huge&#x27; (known: small, kimi-linear)"),
    ({"engine": "llama-layer", "config": "small", "plan": "{FUSE_QKV: 1"}, "plan", "the plan is not JSON"),
    ({"engine": "llama-layer", "config": "small", "plan": "[1, 2]"}, "plan", "the plan is a JSON object of parameters (got list)"),
    ({"engine": "llama-layer", "config": "small", "plan": '{"FUSE_QKV": 7}'}, "plan", "plan parameter FUSE_QKV=7 must be one of [0, 1]"),
    ({"engine": "llama-layer", "config": "small", "plan": '{"NOPE": 1}'}, "plan", "unknown plan parameter &#x27;NOPE&#x27;"),
    ({"engine": "gpt-5", "config": ""}, "engine", "Select a valid choice"),
    ({"engine": "minilm", "config": "large"}, "config", "engine minilm has no config &#x27;large&#x27; (known: none: it has one size)"),
])
def test_bad_input_is_refused_with_a_clear_error_and_keeps_what_was_typed(client, owner, post, field, message):
    client.force_login(owner)
    data = {"target": "cpu-x86_64", "name": "my engine name", "plan": "{}", **post}
    r = client.post(reverse("engine-register"), data)
    page = r.content.decode()
    assert r.status_code == 400 and not ProductionEngine.objects.exists()
    assert message in page, page[page.find("register-form"):][:3000]
    assert r.context["form"].errors[field]
    # nothing typed is lost: the form comes back with every value and is open
    assert 'value="my engine name"' in page and '<details class="card" id="register-engine" open>' in page
    if post.get("config"):
        assert f'value="{post["config"]}"' in page
    if post.get("plan"):
        from django.utils.html import escape

        assert escape(post["plan"]) in page


def test_the_command_refuses_a_config_for_an_engine_that_has_none(owner):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match="engine minilm has no config 'large'"):
        call_command("engine", "register", "--engine", "minilm", "--config", "large")
    assert not ProductionEngine.objects.exists()


def test_registering_and_benchmarking_need_the_engineer_role_and_a_csrf_token(client, outsider, owner):
    pe = ProductionEngine.objects.create(name="kda", engine="kda-layer", config="small")
    assert client.post(reverse("engine-register"), {"engine": "kda-layer"}).status_code == 302  # to the login page
    client.force_login(outsider)
    page = client.get(reverse("engine-list")).content.decode()
    assert 'id="register-form"' not in page and "needs the engineer role" in page
    assert client.post(reverse("engine-register"), {"engine": "kda-layer", "target": "cpu-x86_64"}).status_code == 403
    assert client.post(reverse("engine-benchmark", args=[pe.pk])).status_code == 403
    assert not pe.benchmarks.exists() and ProductionEngine.objects.count() == 1
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(owner)
    assert strict.post(reverse("engine-register"), {"engine": "kda-layer", "target": "cpu-x86_64"}).status_code == 403
    assert strict.post(reverse("engine-benchmark", args=[pe.pk])).status_code == 403
    assert client.get(reverse("engine-register")).status_code == 405


def test_the_benchmark_button_queues_a_task_on_the_targets_queue_and_the_page_shows_its_result(
        client, owner, sent, django_capture_on_commit_callbacks, settings):
    pe = ProductionEngine.objects.create(name="llama-small/cpu-x86_64", engine="llama-layer", config="small")
    client.force_login(owner)
    page = client.get(reverse("engine-list")).content.decode()
    assert f'action="{reverse("engine-benchmark", args=[pe.pk])}"' in page and "data-refresh-s" not in page
    settings.EMBEDDED = False
    with django_capture_on_commit_callbacks(execute=True):
        r = client.post(reverse("engine-benchmark", args=[pe.pk]), {"reps": "2"})
    assert r.status_code == 302
    row = pe.benchmarks.get()
    assert row.status == "queued" and row.trigger == "manual" and "owner" in row.label
    assert sent == [("engines.benchmark", [row.pk, 2], "target.cpu-x86_64")]
    page = client.get(reverse("engine-list")).content.decode()
    assert 'data-refresh-s="10"' in page and "status-queued" in page and "Benchmark queued" in page
    # a second press while it waits queues nothing more
    with django_capture_on_commit_callbacks(execute=True):
        client.post(reverse("engine-benchmark", args=[pe.pk]), {"reps": "2"})
    assert pe.benchmarks.count() == 1 and len(sent) == 1
    # the worker runs it (a duplicate message does nothing)
    from swarm.engine_registry.tasks import run_benchmark

    assert run_benchmark.name == bench_requests.BENCHMARK
    assert bench_requests.run(row.pk, 2) == "ok"
    assert bench_requests.run(row.pk, 2) is None
    row.refresh_from_db()
    assert row.metrics["decode_ms"] > 0 and row.metrics["prefill_ms"] > 0 and row.graph and row.breakdown["decode"]
    page = client.get(reverse("engine-list")).content.decode()
    assert "data-refresh-s" not in page and "status-ok" in page and "decode " in page
    detail = client.get(reverse("engine-detail", args=[pe.pk])).content.decode()
    assert "requested from the engines page by owner" in detail


def test_a_benchmark_that_raises_is_failed_with_its_error_on_the_page(client, owner, sent):
    pe = ProductionEngine.objects.create(name="kda", engine="kda-layer", config="small")
    row = bench_requests.request_benchmark(pe, reps=1)

    class Broken:
        def specs(self, workload, target):
            raise RuntimeError("the registry is unreachable")

        def lookup(self, workload, target, shape):
            raise RuntimeError("the registry is unreachable")

    assert bench_requests.run(row.pk, 1, registry=Broken()) == "failed"
    client.force_login(owner)
    page = client.get(reverse("engine-list")).content.decode()
    assert "status-failed" in page and "RuntimeError: the registry is unreachable" in page
    assert "data-refresh-s" not in page  # nothing left to wait for


def test_bad_repetitions_are_refused_with_the_reason(client, owner, sent):
    pe = ProductionEngine.objects.create(name="kda", engine="kda-layer", config="small")
    client.force_login(owner)
    r = client.post(reverse("engine-benchmark", args=[pe.pk]), {"reps": "many"}, follow=True)
    assert "repetitions must be a whole number (got &#x27;many&#x27;)" in r.content.decode()
    r = client.post(reverse("engine-benchmark", args=[pe.pk]), {"reps": "0"}, follow=True)
    assert "repetitions must be at least 1 (got 0)" in r.content.decode()
    assert not pe.benchmarks.exists() and sent == []


def test_lost_requests_are_sent_again_and_lost_runs_failed(sent, django_capture_on_commit_callbacks):
    pe = ProductionEngine.objects.create(name="kda", engine="kda-layer", config="small")
    now = timezone.now()
    fresh = EngineBenchmark.objects.create(engine=pe, status="queued", created_at=now)
    old = EngineBenchmark.objects.create(engine=pe, status="queued", created_at=now - timedelta(minutes=5),
                                         validation={"requested": {"reps": 3}})
    stuck = EngineBenchmark.objects.create(engine=pe, status="running", created_at=now - timedelta(hours=2))
    with django_capture_on_commit_callbacks(execute=True):
        assert bench_requests.recover(now) == 1
    assert [(name, args) for name, args, _ in sent] == [("engines.benchmark", [old.pk, 3])]
    stuck.refresh_from_db()
    fresh.refresh_from_db()
    assert stuck.status == "failed" and "worker was lost" in stuck.validation["error"] and fresh.status == "queued"
