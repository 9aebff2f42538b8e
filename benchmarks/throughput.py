"""Throughput of the factory itself: evaluations per second that the whole pipeline sustains
when evaluation costs nothing (the ``replay`` backend).

    python -m benchmarks.throughput [--budget 4000] [--batch-size 256] [--agents random] [--json]

Two modes, each measured in the same run:

- ``embedded``: one process as ``manage.py serve`` runs it: a Celery worker on a thread over
  kombu's ``memory://`` transport, SQLite (WAL) on a temporary file, the in-memory channel layer.
- ``production``: PostgreSQL (a scratch database ``int21_throughput``), Redis as broker and
  ``channels_redis`` layer, and one ``celery worker`` process (prefork, one child) on the
  target's queue; this process starts the run and waits for it.

The whole path is measured: proposals by the agents, candidate rows, dispatch through the
broker, claims, evaluation, evidence writes, Channels events and the generation loop. Time per
phase comes from a cProfile of the worker (``--profile``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CACHE = "gemm-clblast-xgemm_RTX-3090"
PG_URL = os.environ.get("THROUGHPUT_PG_URL", "postgres://postgres@127.0.0.1:5432/int21_throughput")
REDIS_URL = os.environ.get("THROUGHPUT_REDIS_URL", "redis://127.0.0.1:6379/13")


def _child_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    env.update(DJANGO_SETTINGS_MODULE="int21_site.settings", LOG_LEVEL="WARNING", SWARM_SWEEP_EVERY_S="0", **extra)
    return env


def measure(mode: str, budget: int, batch_size: int, agents: list[str], cache: str, profile: bool) -> dict:
    """Run one replay run of ``budget`` evaluations in ``mode`` and time it (this process)."""
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    from django.db import transaction

    from kernels.backends.replay import dataset_path
    from swarm.goals.replay import import_cache
    from swarm.models import Run
    from swarm.runs import orchestrator
    from swarm.runs.dispatch import dispatch

    goal, _ = import_cache(dataset_path(cache))
    worker = None
    if mode == "embedded":
        from swarm.management.commands.serve import start_embedded_worker

        start_embedded_worker()
    else:
        import redis

        redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()
        args = [sys.executable, "-m", "celery", "-A", "int21_site", "worker", "-Q", goal.queue, "-c", "1",
                "--without-gossip", "--without-mingle", "-l", "WARNING"]
        env = _child_env(DATABASE_URL=os.environ["DATABASE_URL"], REDIS_URL=os.environ["REDIS_URL"])
        if profile:
            env["INT21_PROFILE_WORKER"] = str(Path(tempfile.gettempdir()) / "throughput-worker.prof")
        worker = subprocess.Popen(args, cwd=ROOT, env=env, start_new_session=True)
        time.sleep(4)  # let the worker connect
    mix = [{"name": a, "kind": a, "settings": {}} for a in agents]
    started = time.perf_counter()
    run, first = orchestrator.start_run(goal, budget=budget, seed=1, batch_size=batch_size, agents=mix)
    with transaction.atomic():
        dispatch(first)
    while True:
        run.refresh_from_db()
        if run.state != Run.State.RUNNING:
            break
        time.sleep(0.05)
    elapsed = time.perf_counter() - started
    evaluated = orchestrator.run_state(run)["evaluated"]
    if worker is not None:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(timeout=30)
    return {"mode": mode, "evaluations": evaluated, "seconds": elapsed, "evals_per_s": evaluated / elapsed,
            "batch_size": batch_size, "agents": agents, "generations": run.generation}


def _run_mode(mode: str, args: argparse.Namespace) -> dict:
    """Each mode in a fresh interpreter, configured by its environment (settings are read once)."""
    if mode == "embedded":
        db = Path(tempfile.mkdtemp()) / "throughput.sqlite3"
        env = _child_env(DATABASE_URL=f"sqlite:///{db}")
    else:
        _recreate_pg_database()
        env = _child_env(DATABASE_URL=PG_URL, REDIS_URL=REDIS_URL)
    cmd = [sys.executable, "-m", "benchmarks.throughput", "--_mode", mode, "--budget", str(args.budget),
           "--batch-size", str(args.batch_size), "--agents", ",".join(args.agents), "--cache", args.cache]
    if args.profile:
        cmd.append("--profile")
    out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"{mode} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _recreate_pg_database() -> None:
    import psycopg

    base, _, name = PG_URL.rpartition("/")
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def _profile_summary(path: str, top: int = 15) -> str:
    import io
    import pstats

    buf = io.StringIO()
    pstats.Stats(path, stream=buf).sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=int, default=4000)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--agents", type=lambda s: [a for a in s.split(",") if a], default=["random"])
    parser.add_argument("--cache", default=DEFAULT_CACHE, help="replay data set name")
    parser.add_argument("--modes", default="embedded,production")
    parser.add_argument("--profile", action="store_true", help="cProfile the production worker")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--_mode", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._mode:
        sys.path.insert(0, str(ROOT))
        print(json.dumps(measure(args._mode, args.budget, args.batch_size, args.agents, args.cache, args.profile)))
        return 0
    results = [_run_mode(m, args) for m in args.modes.split(",")]
    if args.json:
        print(json.dumps({"results": results}, indent=1))
    else:
        print("| mode | evaluations | seconds | evaluations/s | batch | agents |\n|---|---:|---:|---:|---:|---|")
        for r in results:
            print(f"| {r['mode']} | {r['evaluations']} | {r['seconds']:.2f} | {r['evals_per_s']:.0f} | {r['batch_size']} | {','.join(r['agents'])} |")
    prof = Path(tempfile.gettempdir()) / "throughput-worker.prof"
    if args.profile and prof.exists():
        print(_profile_summary(str(prof)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
