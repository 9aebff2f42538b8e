"""Load benchmark of the embeddings server on loopback: requests/s and latency percentiles
with 1, 8 and 32 concurrent clients.

Each client is a thread with one keep-alive HTTP/1.1 connection (``http.client``) sending
one-sentence requests back to back; the run is bounded in requests and in time, and only
ever targets ``127.0.0.1``.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np


def run_clients(port: int, concurrency: int, *, requests_per_client: int = 30, max_seconds: float = 20.0,
                texts: list[str] | None = None) -> dict[str, Any]:
    from engines._bench import bench_corpus  # noqa: PLC0415

    texts = texts or bench_corpus()
    lat: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + max_seconds

    def client(cid: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        for i in range(requests_per_client):
            if time.monotonic() > stop_at:
                break
            body = json.dumps({"model": "all-MiniLM-L6-v2", "input": texts[(cid * 7 + i) % len(texts)]})
            t0 = time.perf_counter()
            try:
                conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
                resp = conn.getresponse()
                resp.read()
                ok = resp.status == 200
            except OSError:
                ok = False
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            if ok:
                mine.append(time.perf_counter() - t0)
            else:
                with lock:
                    errors[0] += 1
        conn.close()
        with lock:
            lat.extend(mine)

    threads = [threading.Thread(target=client, args=(c,)) for c in range(concurrency)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    a = np.array(lat) * 1e3
    return {"concurrency": concurrency, "requests": len(lat), "errors": errors[0], "seconds": wall,
            "requests_per_s": len(lat) / wall if wall else 0.0,
            "p50_ms": float(np.percentile(a, 50)) if a.size else None,
            "p99_ms": float(np.percentile(a, 99)) if a.size else None}


def wait_ready(port: int, timeout_s: float = 120.0, proc: subprocess.Popen | None = None) -> None:
    """Block until ``GET /health`` answers 200.

    Raises:
        RuntimeError: the server did not come up (or its process exited).
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited with code {proc.returncode}")
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/health")
            if conn.getresponse().status == 200:
                return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"server on port {port} not ready after {timeout_s:g} s")


def load_benchmark(port: int | None = None, *, concurrencies=(1, 8, 32), requests_per_client: int = 30,
                   threads: int | None = None) -> dict[str, Any]:
    """Start ``python -m engines.serve_main`` on a free loopback port, run the clients at each
    concurrency, stop the server. Returns the figures per concurrency."""
    import socket  # noqa: PLC0415

    if port is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    env = dict(os.environ)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    proc = subprocess.Popen([sys.executable, "-m", "engines.serve_main", "--port", str(port)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        wait_ready(port, proc=proc)
        run_clients(port, 4, requests_per_client=5)  # warm-up
        results = [run_clients(port, c, requests_per_client=requests_per_client) for c in concurrencies]
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {"server": "engines.serve (MiniLM, default plan)", "port": port, "results": results,
            "threads": threads or os.cpu_count()}
