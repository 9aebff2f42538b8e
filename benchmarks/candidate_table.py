"""Benchmark: ``GET /api/runs/<id>/table/`` (the candidate table) of a 50,000-candidate run.

    python -m benchmarks.candidate_table [--candidates 50000] [--reps 5] \
        [--database-url URL] [--out benchmarks/results] [--json]

Creates a throwaway database (a temporary SQLite file by default, or ``--database-url``),
inserts a synthetic run of ``--candidates`` evaluated candidates with ``bulk_create``
(:func:`benchmarks.run_page.populate`) and times, ``--reps`` times each after one untimed
warm-up call (median and max in ms), the endpoint through DRF's test client with token auth
for the requests an engineer makes: the first page, a sort on a stored metric column
(``latency_ms``), on a metric read from the evidence JSON (``gflops``) and on a parameter,
filters on status, agent and ranges, the last page (a deep ``OFFSET``) and 500 rows at once.
Target: every median under 500 ms. Results: ``<out>/candidate_table.md`` (headed by host and
date) and ``<out>/candidate_table.json``.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks._django import bench_django  # noqa: E402 - after the path

TARGET_MS = 500.0


def _requests(n: int) -> list[tuple[str, dict]]:
    return [
        ("first page", {}),
        ("sort by latency_ms (stored column), descending", {"sort": "-latency_ms"}),
        ("sort by gflops (evidence JSON)", {"sort": "gflops"}),
        ("sort by a parameter, then latency_ms", {"sort": "BLOCK,latency_ms"}),
        ("status ok, two agents, latency and parameter ranges", {
            "status": "ok", "agent": "random,optuna", "range.latency_ms": "..3", "range.VEC": "4..16", "sort": "latency_ms"}),
        ("range on gflops (evidence JSON)", {"range.gflops": "1..", "sort": "-gflops"}),
        ("last page", {"sort": "-latency_ms", "offset": str(max(0, n - 50))}),
        ("500 rows", {"sort": "latency_ms", "limit": "500"}),
    ]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidates", type=int, default=50_000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--database-url", default="", help="default: a temporary SQLite file")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results"))
    ap.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    args = ap.parse_args()
    started = time.perf_counter()
    with bench_django(args.database_url, engines=False):
        return _measure(args, started)


def _measure(args: argparse.Namespace, started: float) -> int:
    from django.conf import settings
    from django.db import connection
    from rest_framework.authtoken.models import Token
    from rest_framework.test import APIClient

    from benchmarks._report import emit
    from benchmarks.run_page import BENCH_SPACE, populate
    from benchmarks.run_summary import _timed
    from swarm.goals.lifecycle import default_goal

    settings.ALLOWED_HOSTS = ["*"]
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.get(username="bench")
    goal = default_goal("rmsnorm", "cpu-x86_64", "llama3-8b", user=user, name=f"benchmark: {args.candidates} candidates")
    goal.space = BENCH_SPACE
    goal.save(update_fields=["space"])
    t0 = time.perf_counter()
    run = populate(goal, args.candidates, seed=0, batch_size=16, state="finished", user=user)
    insert_s = time.perf_counter() - t0

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=user)[0].key}")
    rows = []
    for name, params in _requests(args.candidates):
        def endpoint(params=params):
            r = client.get(f"/api/runs/{run.pk}/table/", params)
            assert r.status_code == 200, r.content[:500]
            return r.json()

        ms, out = _timed(endpoint, args.reps)
        rows.append({"request": name, "params": params, "median_ms": statistics.median(ms), "max_ms": max(ms),
                     "count": out["count"], "rows": len(out["rows"])})

    host, date = platform.node(), time.strftime("%Y-%m-%d %H:%M %z")
    table = "\n".join(
        ["| request | median (ms) | max (ms) | matching | rows returned |", "|---|---|---|---|---|"]
        + [f"| {r['request']} | {r['median_ms']:.1f} | {r['max_ms']:.1f} | {r['count']} | {r['rows']} |" for r in rows])
    worst = max(rows, key=lambda r: r["median_ms"])
    ok = worst["median_ms"] < TARGET_MS
    verdict = (f"{'pass' if ok else 'FAIL'}: the slowest request ({worst['request']}) takes {worst['median_ms']:.0f} ms, "
               f"target < {TARGET_MS:.0f} ms")
    payload = {"host": host, "date": date, "candidates": args.candidates, "database": connection.vendor,
               "reps": args.reps, "insert_s": insert_s, "rows": rows, "pass": ok, "seconds": time.perf_counter() - started}
    note = (f"host {host}, {date}; {connection.vendor}, {args.candidates} candidates inserted in {insert_s:.0f} s, "
            f"{args.reps} repetitions.")
    emit(Path(args.out), "candidate_table", f"Candidate table of a {args.candidates}-candidate run",
         None, note, payload, table, verdict, as_json=args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
