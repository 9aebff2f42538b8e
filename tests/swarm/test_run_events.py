"""Run events: their sequence numbers, the events endpoint the run page backfills from, the
warning for dropped messages and the websocket origin rule."""

import logging

import pytest
from rest_framework.test import APIClient

from int21_site.channel_log import OverCapacityAsWarning
from int21_site.origins import allowed_origins, origin_tuple
from swarm.models import Run
from swarm.runs import events


@pytest.fixture
def run(small_goal):
    return Run.objects.create(goal=small_goal, budget=1, seed=1, space=small_goal.space)


def test_a_runs_events_are_numbered_from_one_without_holes(run, small_goal):
    other = Run.objects.create(goal=small_goal, budget=1, seed=2, space=small_goal.space)
    assert events.last_seq(run.pk) == 0
    assert [events.store(run.pk, "probe", {"i": i}) for i in range(3)] == [1, 2, 3]
    assert events.store(other.pk, "probe", {}) == 1
    assert list(run.events.values_list("seq", "data")) == [(1, {"i": 0}), (2, {"i": 1}), (3, {"i": 2})]
    assert events.last_seq(run.pk) == 3


def test_the_events_endpoint_pages_from_a_sequence_number(run, owner):
    for i in range(7):
        events.store(run.pk, "probe", {"i": i})
    api = APIClient()
    api.force_authenticate(owner)
    page = api.get(f"/api/runs/{run.pk}/events/?after=2&limit=3").json()
    assert [e["seq"] for e in page["events"]] == [3, 4, 5] and page["more"] and page["last_seq"] == 7
    first = page["events"][0]
    assert {k: first[k] for k in ("event", "seq", "data")} == {"event": "probe", "seq": 3, "data": {"i": 2}}
    assert first["at"] == run.events.get(seq=3).at.isoformat()
    page = api.get(f"/api/runs/{run.pk}/events/?after=5").json()
    assert [e["seq"] for e in page["events"]] == [6, 7] and not page["more"]
    bad = api.get(f"/api/runs/{run.pk}/events/?after=x")
    assert bad.status_code == 400 and "integer" in bad.json()["after"]
    assert api.get(f"/api/runs/{run.pk}/events/?limit=0").status_code == 400


def test_dropped_messages_are_a_warning_naming_the_run():
    f = OverCapacityAsWarning()
    record = logging.LogRecord("channels_redis.core", logging.INFO, "core.py", 1,
                               "%s of %s channels over capacity in group %s", (2, 3, "run.17"), None)
    assert f.filter(record) and record.levelno == logging.WARNING
    assert record.getMessage().startswith("run 17: 2 of 3 websockets over capacity")
    other = logging.LogRecord("channels_redis.core", logging.INFO, "core.py", 1, "something else", (), None)
    assert not f.filter(other)


@pytest.mark.parametrize("origin, parsed", [
    ("http://localhost:8000", ("http", "localhost", 8000)),
    ("HTTPS://Example.COM", ("https", "example.com", 443)),
    ("http://[::1]:8000", ("http", "::1", 8000)),
    ("null", None), ("http://a.b/path", None), ("ftp://a.b", None), ("http://a.b:99999", None),
])
def test_an_origin_is_scheme_host_and_port(origin, parsed):
    assert origin_tuple(origin) == parsed


def test_a_socket_allows_its_own_origin_only(settings):
    settings.ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
    settings.CSRF_TRUSTED_ORIGINS = ["https://factory.example"]
    scope = {"type": "websocket", "scheme": "ws", "headers": [(b"host", b"localhost:8000")]}
    assert allowed_origins(scope) == {("http", "localhost", 8000), ("https", "factory.example", 443)}
    assert allowed_origins({**scope, "headers": [(b"host", b"evil.example:8000")]}) == {("https", "factory.example", 443)}


def test_the_embedded_server_stores_events_before_any_websocket_connects(monkeypatch, settings, run,
                                                                        django_capture_on_commit_callbacks):
    """``manage.py serve`` makes its loop known as it starts: a run started by the API (or the
    sweeper) before anyone opened its page still has its events for the page to read later."""
    from django.core.management import call_command

    from swarm.management.commands import serve

    settings.EMBEDDED = True
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}  # embedded mode's
    seen = []

    async def serve_nothing(self, sockets=None):
        seen.append(events.listening())

    monkeypatch.setattr(serve, "start_embedded_worker", lambda: None)
    monkeypatch.setattr(serve.sweeper, "start", lambda: None)
    monkeypatch.setattr("uvicorn.Server.serve", serve_nothing)
    monkeypatch.setattr(events, "_server_loop", None)
    assert not events.listening()  # no server in this process yet: events are skipped
    call_command("serve", "--port", str(free_port()))
    assert seen == [True]
    with django_capture_on_commit_callbacks(execute=True):
        events.publish(run.pk, "probe", {"i": 1})  # as the worker thread of that process does
    assert list(run.events.values_list("event", "data")) == [("probe", {"i": 1})]


def test_ctrl_c_stops_the_embedded_server_without_a_traceback(monkeypatch, settings):
    from django.core.management import call_command

    from swarm.management.commands import serve

    settings.EMBEDDED = True
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

    async def interrupted(self, sockets=None):  # what uvicorn re-raises after a SIGINT
        raise KeyboardInterrupt

    monkeypatch.setattr(serve, "start_embedded_worker", lambda: None)
    monkeypatch.setattr(serve.sweeper, "start", lambda: None)
    monkeypatch.setattr("uvicorn.Server.serve", interrupted)
    monkeypatch.setattr(events, "_server_loop", None)
    call_command("serve", "--port", str(free_port()))  # returns: no KeyboardInterrupt escapes


@pytest.mark.parametrize("argv, expected", [
    (["--port", "99999"], "a port is 1-65535, not 99999"),
    (["--port", "http"], "'http' is not a port number"),
    (["--host", "not..a..host"], "cannot listen on host 'not..a..host'"),
    (["--host", "10.255.255.1"], "cannot listen on 10.255.255.1:8000: Cannot assign requested address"),
])
def test_a_bad_address_is_a_usage_error_before_anything_starts(monkeypatch, settings, argv, expected):
    from django.core.management import CommandError, call_command

    from swarm.management.commands import serve

    settings.EMBEDDED = True
    started = []
    monkeypatch.setattr(serve, "start_embedded_worker", lambda: started.append("worker"))
    monkeypatch.setattr(serve.sweeper, "start", lambda: started.append("sweeper"))
    with pytest.raises(CommandError, match=expected):
        call_command("serve", *argv)
    assert started == []


def test_a_port_in_use_is_an_error_before_anything_starts_and_ipv6_urls_have_brackets(monkeypatch, settings):
    import socket

    from django.core.management import CommandError, call_command

    from swarm.management.commands import serve

    settings.EMBEDDED = True
    started = []
    monkeypatch.setattr(serve, "start_embedded_worker", lambda: started.append("worker"))
    monkeypatch.setattr(serve.sweeper, "start", lambda: started.append("sweeper"))
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        port = taken.getsockname()[1]
        with pytest.raises(CommandError, match=f"cannot listen on 127.0.0.1:{port}: Address already in use") as err:
            call_command("serve", "--port", str(port))
        assert err.value.returncode == 1 and started == []
    finally:
        taken.close()
    if socket.has_ipv6:
        try:
            sock = serve.listening_socket("::1", free_port())
        except CommandError:
            pytest.skip("no IPv6 loopback on this host")
        with sock:
            assert serve.url_of(sock) == f"http://[::1]:{sock.getsockname()[1]}/"


def free_port() -> int:
    import socket

    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]
