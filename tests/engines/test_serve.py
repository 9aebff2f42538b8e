"""The OpenAI-compatible embeddings endpoint, through the real ``openai`` client against a
server started in the test: answers, batching of concurrent requests, clear errors."""

import base64
import json
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai")

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(minilm):
    import uvicorn

    from engines.serve import Limits, make_app

    port = free_port()
    app = make_app(minilm, limits=Limits(max_inputs=16, max_batch=32, max_wait_ms=20))
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="on"))
    t = threading.Thread(target=srv.run, daemon=True)
    t.start()
    from engines._loadtest import wait_ready

    wait_ready(port, timeout_s=60)
    yield {"port": port, "app": app}
    srv.should_exit = True
    t.join(timeout=10)


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=f"http://127.0.0.1:{server['port']}/v1", api_key="not-needed", max_retries=0)


def test_the_openai_client_gets_the_engines_embeddings(client, minilm):
    texts = ["A man is eating food.", "The cat sits outside."]
    resp = client.embeddings.create(model="all-MiniLM-L6-v2", input=texts)
    got = np.array([d.embedding for d in resp.data], dtype=np.float32)
    assert got.shape == (2, 384) and [d.index for d in resp.data] == [0, 1]
    assert np.allclose(got, minilm.encode(texts), atol=1e-6)
    assert resp.usage.prompt_tokens == sum(len(t) for t in minilm.tokenize(texts)) == resp.usage.total_tokens
    assert resp.model == "all-MiniLM-L6-v2"


def test_float_and_base64_encodings_and_token_inputs(client, minilm):
    ids = minilm.tokenize(["Paris is the capital of France."])[0]
    flt = client.embeddings.create(model="all-MiniLM-L6-v2", input="Paris is the capital of France.", encoding_format="float")
    tok = client.embeddings.create(model="all-MiniLM-L6-v2", input=[ids], encoding_format="float")
    assert np.allclose(flt.data[0].embedding, tok.data[0].embedding, atol=1e-7)
    raw = client.embeddings.with_raw_response.create(model="all-MiniLM-L6-v2", input="x y", encoding_format="base64")
    body = json.loads(raw.http_response.text)
    vec = np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype="<f4")
    assert vec.shape == (384,) and abs(np.linalg.norm(vec) - 1) < 1e-5
    assert len(client.models.list().data) == 1


@pytest.mark.parametrize("kwargs,message", [
    ({"input": ""}, "input[0] is empty"),
    ({"input": []}, "must not be an empty array"),
    ({"input": ["ok"] * 17}, "at most 16 per request"),
    ({"input": "word " * 400}, "at most 256"),
    ({"input": [[101, 999999, 102]]}, "outside the vocabulary"),
    ({"input": "hi", "dimensions": 128}, "cannot shorten"),
    ({"input": "hi", "encoding_format": "int8"}, "encoding_format"),
    ({"input": "\x00"}, "input[0] is empty"),  # a control character only
    ({"input": "\u200b \u2060"}, "input[0] is empty"),  # invisible format characters only
])
def test_bad_requests_get_a_400_that_says_what_is_wrong(client, kwargs, message):
    with pytest.raises(openai.BadRequestError) as exc:
        client.embeddings.create(model="all-MiniLM-L6-v2", **kwargs)
    assert message in str(exc.value)
    assert exc.value.body["param"] in ("input", "dimensions", "encoding_format")


def test_an_unknown_model_is_a_404_and_bad_json_a_400(client, server):
    with pytest.raises(openai.NotFoundError, match="does not exist"):
        client.embeddings.create(model="text-embedding-3-large", input="hi")
    req = urllib.request.Request(f"http://127.0.0.1:{server['port']}/v1/embeddings", data=b"{not json",
                                 headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=10)
    assert exc.value.code == 400 and "not valid JSON" in json.loads(exc.value.read())["error"]["message"]


@pytest.mark.parametrize("body, message", [
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"model": "all-MiniLM-L6-v2", "input": "abc \\ud800 def"}', "not valid Unicode text"),  # a lone surrogate
])
def test_raw_bodies_no_client_would_send_get_a_400(server, body, message):
    req = urllib.request.Request(f"http://127.0.0.1:{server['port']}/v1/embeddings", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    with pytest.raises(urllib.error.HTTPError) as exc:
        urllib.request.urlopen(req, timeout=30)
    assert exc.value.code == 400 and message in json.loads(exc.value.read())["error"]["message"]


@pytest.mark.parametrize("field, value", [("request_timeout_s", 0), ("request_timeout_s", -1.0),
                                          ("request_timeout_s", float("nan")), ("max_batch", 0),
                                          ("max_batch_tokens", True), ("max_wait_ms", -2.0)])
def test_limits_that_make_no_server_are_refused(field, value):
    from engines.serve import Limits

    with pytest.raises(ValueError, match=field):
        Limits(**{field: value})


def test_concurrent_requests_are_batched_together(client, server):
    app = server["app"]
    before = app.service.health()
    texts = [f"sentence number {i} about kernels" for i in range(24)]
    with ThreadPoolExecutor(24) as pool:
        results = list(pool.map(lambda t: client.embeddings.create(model="all-MiniLM-L6-v2", input=t), texts))
    assert all(len(r.data[0].embedding) == 384 for r in results)
    after = app.service.health()
    requests = after["requests"] - before["requests"]
    batches = after["batches"] - before["batches"]
    assert requests == 24 and batches < 24  # several requests shared an engine pass


def test_the_load_benchmark_reports_rates_and_percentiles(server):
    from engines._loadtest import run_clients

    for c in (1, 8):
        r = run_clients(server["port"], c, requests_per_client=3, max_seconds=30)
        assert r["errors"] == 0 and r["requests"] == 3 * c
        assert r["requests_per_s"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"]


def test_manage_py_engine_serve_serves_the_encoder(tmp_path, minilm):
    port = free_port()
    env = {**os.environ, "INT21_VAR_DIR": str(tmp_path)}
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput"], cwd=ROOT, env=env, check=True,
                   capture_output=True, timeout=240)
    proc = subprocess.Popen([sys.executable, "manage.py", "engine", "serve", "--engine", "minilm", "--port", str(port)],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        from engines._loadtest import wait_ready

        wait_ready(port, timeout_s=120, proc=proc)
        c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0)
        r = c.embeddings.create(model="all-MiniLM-L6-v2", input=["hello world"])
        assert len(r.data[0].embedding) == 384
    finally:
        proc.terminate()
        proc.wait(timeout=30)
