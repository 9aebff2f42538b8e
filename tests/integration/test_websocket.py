"""A websocket client receives the candidate events the worker publishes for a run."""

import json
import re

import pytest
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect

from swarm.goals.lifecycle import default_goal
from tests.integration.stack import Browserless


@pytest.mark.timeout(180)
def test_the_run_websocket_streams_evaluated_candidates(stack, demo_user):
    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small")
    session = Browserless(stack)
    session.login(*demo_user)
    url = session.post(f"/goals/{goal.pk}/runs/", {"budget": 3, "batch_size": 3, "seed": 5}, form_page=f"/goals/{goal.pk}/")
    run_id = int(re.search(r"/runs/(\d+)/", url).group(1))
    ws_url = stack.replace("http://", "ws://") + f"/ws/runs/{run_id}/"
    headers = {"Cookie": f"sessionid={session.cookie('sessionid')}", "Origin": stack}
    evaluated = {}
    with connect(ws_url, additional_headers=headers, open_timeout=10) as ws:
        snapshot = json.loads(ws.recv(timeout=10))
        assert snapshot["event"] == "snapshot" and snapshot["data"]["run"]["id"] == run_id
        for c in snapshot["data"]["candidates"]:
            if c["status"] not in ("queued", "running"):
                evaluated[c["id"]] = c
        while len(evaluated) < 3:
            msg = json.loads(ws.recv(timeout=120))
            if msg["event"] == "candidate" and msg["data"]["status"] not in ("queued", "running"):
                evaluated[msg["data"]["id"]] = msg["data"]
    assert any(c["status"] == "ok" and c["metrics"]["latency_ms"] > 0 for c in evaluated.values())


def test_the_websocket_refuses_anonymous_clients(stack, transactional_db):
    ws_url = stack.replace("http://", "ws://") + "/ws/runs/1/"
    with pytest.raises(WebSocketException):  # refused handshake or closed at once
        with connect(ws_url, additional_headers={"Origin": stack}, open_timeout=10) as ws:
            ws.recv(timeout=5)


# --- production mode: an idle socket, a stressed run, foreign origins ------------------------

STRESS_TASKS, STRESS_EVENTS = 200, 100


def _quiet_run():
    """A finished run: its socket gets the snapshot and then nothing."""
    from swarm.models import Run

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small")
    return Run.objects.create(goal=goal, budget=1, seed=1, space=goal.space, constraints=goal.constraints,
                              state=Run.State.FINISHED)


def _signed_in(stack, demo_user):
    session = Browserless(stack)
    session.login(*demo_user)
    return session, {"Cookie": f"sessionid={session.cookie('sessionid')}", "Origin": stack}


@pytest.mark.services
@pytest.mark.timeout(120)
def test_an_idle_run_websocket_stays_open(stack, demo_user):
    """channels_redis waits 5 s for a message per BZPOPMIN; the Redis client's read timeout must
    outlast that wait, or every quiet socket is closed with a TimeoutError."""
    import time

    from websockets.exceptions import ConnectionClosed

    run = _quiet_run()
    _, headers = _signed_in(stack, demo_user)
    ws_url = stack.replace("http://", "ws://") + f"/ws/runs/{run.pk}/?columns=1"
    with connect(ws_url, additional_headers=headers, open_timeout=10) as ws:
        assert json.loads(ws.recv(timeout=10))["event"] == "snapshot"
        opened = time.monotonic()
        try:
            ws.recv(timeout=40)
            raise AssertionError("a finished run's socket received an event")
        except TimeoutError:
            pass
        except ConnectionClosed as exc:
            raise AssertionError(f"the idle socket closed after {time.monotonic() - opened:.1f} s: {exc}") from None
        ws.ping().wait(5)  # still open, and the server still answers
        print(f"idle socket open for {time.monotonic() - opened:.1f} s")


@pytest.mark.services
@pytest.mark.timeout(300)
def test_every_event_of_a_stressed_run_is_shown_live_or_backfilled(stack, demo_user):
    """200 tasks publish 100 events each through :func:`swarm.runs.events.publish` to one subscriber.

    The subscriber follows the run page's protocol (:class:`EventFollower`, as ``static/js/run/stream.js``):
    live events in sequence, a gap backfilled from ``/api/runs/<id>/events/?after=N``, and a last
    look at the same endpoint once the socket is quiet. Every one of the 20,000 events is shown
    exactly once, in sequence order.
    """
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from django.db import connection

    from swarm.runs import events

    run = _quiet_run()
    session, headers = _signed_in(stack, demo_user)
    ws_url = stack.replace("http://", "ws://") + f"/ws/runs/{run.pk}/?columns=1"
    with connect(ws_url, additional_headers=headers, open_timeout=10, max_size=None) as ws:
        snapshot = json.loads(ws.recv(timeout=10))
        assert snapshot["event"] == "snapshot"
        follower = EventFollower(session, run.pk, snapshot["seq"])  # the session is used by the reader only
        done = threading.Event()

        def read() -> None:
            quiet_since = None
            while True:
                try:
                    follower.receive(json.loads(ws.recv(timeout=0.1)))
                    quiet_since = None
                except TimeoutError:
                    follower.tick()
                    quiet_since = quiet_since or time.monotonic()
                    if done.is_set() and time.monotonic() - quiet_since > 5:
                        return

        reader = threading.Thread(target=read)
        reader.start()

        def task(t: int) -> None:
            try:
                for i in range(STRESS_EVENTS):
                    events.publish(run.pk, "probe", {"task": t, "i": i})
            finally:
                connection.close()

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(task, range(STRESS_TASKS)))
        published_s = time.monotonic() - started
        done.set()
        reader.join(timeout=120)
    follower.catch_up()  # the page's check of a quiet running run
    shown = [(e["data"]["task"], e["data"]["i"]) for e in follower.shown if e["event"] == "probe"]
    print(f"published {len(shown)} events in {published_s:.1f} s; shown {follower.live} live, "
          f"{follower.backfilled} backfilled")
    assert sorted(shown) == [(t, i) for t in range(STRESS_TASKS) for i in range(STRESS_EVENTS)]
    seqs = [e["seq"] for e in follower.shown]
    assert seqs == list(range(snapshot["seq"] + 1, snapshot["seq"] + 1 + len(seqs)))


class EventFollower:
    """The run page's event protocol (``static/js/run/stream.js``) in Python.

    The snapshot carries ``seq``, the sequence number of the last event it includes. Each event
    carries its ``seq`` (1, 2, ... per run). An event at ``last + 1`` is shown; one at or below
    ``last`` was shown already; one above ``last + 1`` waits: if the gap is still open after
    ``GAP_WAIT_S`` it is filled from ``GET /api/runs/<id>/events/?after=<last>`` (pages of
    ``{"events", "more"}``).
    """

    GAP_WAIT_S = 0.3  # stream.js GAP_WAIT_MS

    def __init__(self, session, run_id: int, seq: int) -> None:
        self.session, self.run_id, self.last = session, run_id, seq
        self.shown: list[dict] = []
        self.held: list[dict] = []
        self.gap_since: float | None = None
        self.live = self.backfilled = 0

    def receive(self, msg: dict) -> None:
        if msg.get("seq") is not None and msg["seq"] > self.last:
            self.held.append(msg)
        self._drain()
        self.tick()

    def tick(self) -> None:
        import time

        if self.gap_since is not None and time.monotonic() - self.gap_since > self.GAP_WAIT_S:
            self.catch_up()

    def _drain(self) -> None:
        import time

        self.held.sort(key=lambda m: m["seq"])
        while self.held and self.held[0]["seq"] <= self.last + 1:
            m = self.held.pop(0)
            if m["seq"] == self.last + 1:
                self.shown.append(m)
                self.last = m["seq"]
                self.live += 1
        self.gap_since = (self.gap_since or time.monotonic()) if self.held else None

    def catch_up(self) -> None:
        while True:
            page = json.loads(self.session.get(f"/api/runs/{self.run_id}/events/?after={self.last}"))
            for e in page["events"]:
                assert e["seq"] > self.last
                self.shown.append(e)
                self.last = e["seq"]
                self.backfilled += 1
            if not page["more"]:
                break
        self.gap_since = None
        self._drain()


@pytest.mark.parametrize("foreign", ["http://localhost:9999", "http://127.0.0.1:{other}", "https://127.0.0.1:{port}",
                                     "http://evil.example:{port}"])
def test_the_websocket_refuses_another_origin(stack, demo_user, foreign):
    """Same origin means the same scheme, host and port (RFC 6454): a page served from another
    port of the host is another site."""
    from websockets.exceptions import InvalidStatus

    from tests.integration.stack import free_port

    port = int(stack.rsplit(":", 1)[1])
    origin = foreign.format(port=port, other=free_port())
    run = _quiet_run()
    _, headers = _signed_in(stack, demo_user)
    ws_url = stack.replace("http://", "ws://") + f"/ws/runs/{run.pk}/"
    with connect(ws_url, additional_headers=headers, open_timeout=10) as ws:  # its own origin: accepted
        assert json.loads(ws.recv(timeout=10))["event"] == "snapshot"
    with pytest.raises(InvalidStatus) as refused:
        with connect(ws_url, additional_headers={**headers, "Origin": origin}, open_timeout=10) as ws:
            ws.recv(timeout=10)
    assert refused.value.response.status_code == 403
