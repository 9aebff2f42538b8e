"""``manage.py factory run``: run a goal headless through the orchestrator and evaluator."""

from __future__ import annotations

import json
import platform
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from kernels.backends import capabilities, get_backend
from swarm.goals import replay
from swarm.goals.lifecycle import default_goal
from swarm.models import PENDING_STATUSES, Baseline, Goal, Run, target_backend
from swarm.runs import baselines, orchestrator, summaries, sweeper

#: Seconds between looks at a run whose in-flight candidates another process evaluates.
POLL_S = 0.2


class Command(BaseCommand):
    help = "Kernel Factory operations. `factory run`: search a goal headless and report the result."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        run = sub.add_parser("run", help="run a goal headless (evaluations in this process's sandbox children)")
        run.add_argument("--goal", type=int, help="id of an existing goal")
        run.add_argument("--workload", default="rmsnorm", help="workload of the default goal (without --goal)")
        run.add_argument("--target", default="cpu-x86_64")
        run.add_argument("--shape-set", default=None, help="shape set (default: the workload's first)")
        run.add_argument("--budget", type=int, default=30, help="number of evaluations")
        run.add_argument("--batch-size", type=int, default=4, help="candidates per generation")
        run.add_argument("--seed", type=int, default=None)
        run.add_argument("--no-baseline", action="store_true", help="skip timing the NumPy baseline")
        run.add_argument("--agents", default=None,
                         help="comma-separated agent kinds, e.g. forest,evolutionary,optuna (default: the swarm mix, swarm.agents.DEFAULT_MIX)")
        run.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
        sw = sub.add_parser("sweep", help="recover work left by dead workers and re-dispatch it (production: run periodically)")
        sw.add_argument("--every", type=float, default=0, help="repeat every N seconds (0: once)")
        imp = sub.add_parser("import-cache", help="create a replay: goal from a Kernel Tuner cache file")
        imp.add_argument("file", help="Kernel Tuner cache file (.json or .json.gz)")
        imp.add_argument("--name", default=None, help="data set name (default: the file name)")
        imp.add_argument("--json", action="store_true", help="print one JSON object")

    def handle(self, *args: Any, **opts: Any) -> None:
        if opts["action"] == "run":
            self.run(opts)
        elif opts["action"] == "import-cache":
            self.import_cache(opts)
        elif opts["action"] == "sweep":
            self.sweep(opts)

    def sweep(self, opts: dict[str, Any]) -> None:
        import time

        from django.db import close_old_connections

        while True:
            self.stdout.write(f"re-dispatched {sweeper.recover()} candidates")
            if not opts["every"]:
                return
            close_old_connections()
            time.sleep(opts["every"])

    def import_cache(self, opts: dict[str, Any]) -> None:
        from kernels.interchange.tuning_cache import TuningCacheError

        try:
            goal, summary = replay.import_cache(opts["file"], name=opts["name"])
        except (OSError, TuningCacheError, ValueError) as exc:
            raise CommandError(f"cannot import {opts['file']}: {exc}") from exc
        if opts["json"]:
            self.stdout.write(json.dumps(summary, indent=2))
        else:
            self.stdout.write(
                f"goal {goal.pk}{' (already imported: reused)' if summary['reused'] else ''}: {goal.name}\n"
                f"{summary['entries']} entries ({summary['valid']} valid, "
                f"{summary['failed']} failed) of {summary['space_size']} configurations; "
                f"recorded optimum {summary['optimum_ms']:.4g} ms"
            )
            for line in summary["warnings"]:
                self.stdout.write(f"warning: {line}")

    def run(self, opts: dict[str, Any]) -> None:
        goal = self._goal(opts)
        try:
            agents = None
            if opts["agents"]:
                agents = [{"name": k.strip(), "kind": k.strip(), "settings": {}} for k in opts["agents"].split(",") if k.strip()]
            run, pending = orchestrator.start_run(
                goal, budget=opts["budget"], seed=opts["seed"], batch_size=opts["batch_size"], agents=agents
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        try:
            if opts["json"]:
                self._drive(run, pending, progress=None)
            else:
                from rich.progress import Progress

                with Progress(transient=False) as progress:
                    task = progress.add_task(f"run {run.pk}: {goal.workload} on {goal.target}", total=run.budget)
                    self._drive(run, pending, progress=(progress, task))
        except KeyboardInterrupt:  # Ctrl-C: the run ends here instead of waiting for a server to resume it
            orchestrator.stop_run(run, via="Ctrl-C on factory run")
            raise CommandError(f"interrupted: run {run.pk} stopped (its evidence so far is kept)") from None
        if not opts["no_baseline"] and goal.capabilities.measures_baseline:
            self._measure_baseline(goal)
        summary = summaries.run_summary(run)
        if opts["json"]:
            self.stdout.write(json.dumps(summary, indent=2))
        else:
            self._print_table(summary)
        if summary["state"] == Run.State.FAILED:  # the evidence is printed above; the exit status says it failed
            raise CommandError(f"run {run.pk} failed: {summary.get('end_reason') or 'no reason recorded'}", returncode=1)

    def _goal(self, opts: dict[str, Any]) -> Goal:
        if opts["goal"] is not None:
            try:
                return Goal.objects.get(pk=opts["goal"])
            except Goal.DoesNotExist:
                raise CommandError(f"no goal with id {opts['goal']}") from None
        try:
            backend = target_backend(opts["target"])
            if capabilities(backend).host_target and not get_backend(backend).supports(opts["target"]):
                raise ValueError(f"this machine cannot run target {opts['target']!r} (it is cpu-{platform.machine()})")
            get_backend(backend)
            return default_goal(opts["workload"], opts["target"], opts["shape_set"])
        except (KeyError, ValueError, ImportError) as exc:
            raise CommandError(str(exc).strip("'\"")) from exc

    @staticmethod
    def _drive(run, pending, progress) -> None:
        """Evaluate and advance ``run`` until it has ended.

        The same orchestrator functions the Celery task calls, evaluated one at a time so that
        this process does not disturb its own timings. Another process may hold some of the
        run's candidates (a server's sweeper dispatches any running run's free slots to its own
        workers, which then time beside this one): once this process has nothing left to
        evaluate, the run's queued and running candidates are offered to the evaluator again
        every :data:`POLL_S` s. A claim is conditional, so a candidate a live process holds is
        left to it, and one whose holder died is taken over.
        """
        def show() -> None:  # what anyone has evaluated: the last candidates may be another process's
            if progress:
                progress[0].update(progress[1], completed=_evaluated(run))

        while True:
            while pending:
                if pending[0].goal.capabilities.batchable:  # lookups cost nothing: batch the writes
                    orchestrator.evaluate_batch([c.pk for c in pending])
                    show()
                else:
                    for candidate in pending:
                        orchestrator.evaluate_candidate(candidate.pk)
                        show()
                pending = orchestrator.advance(run.pk)
            run.refresh_from_db(fields=["state"])
            if run.state != Run.State.RUNNING:
                show()
                return
            time.sleep(POLL_S)
            pending = list(run.candidates.filter(status__in=PENDING_STATUSES).select_related("goal").order_by("id"))
            pending = pending or orchestrator.advance(run.pk)

    @staticmethod
    def _measure_baseline(goal: Goal) -> None:
        # This process times its own candidates on this host, so it times the key's baseline
        # here too if no worker has yet; the stored row is what every page and the summary read.
        b = baselines.ensure(goal)
        if b is not None and b.state == Baseline.State.MEASURING:
            baselines.measure(b.pk)

    def _print_table(self, summary: dict[str, Any]) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        console = Console(file=self.stdout._out)
        counts = ", ".join(f"{k}: {v}" for k, v in sorted(summary["status_counts"].items()))
        console.print(f"run {summary['id']} {summary['state']}: {summary['evaluated']} evaluated ({counts})")
        if summary.get("end_reason"):
            console.print(f"ended: {escape(summary['end_reason'])}")
        table = Table(title="Pareto frontier (feasible ok candidates)")
        # The metrics the frontier's evidence has: a kernel's latency, error and bandwidth, a
        # replayed configuration's recorded time and energy; the usual ones first.
        present = {k for c in summary["frontier"] for k, v in c["metrics"].items() if isinstance(v, (int, float))}
        known = [k for k in ("latency_ms", "energy_j", "max_rel_error", "gbps", "gflops") if k in present]
        columns = known or sorted(present)[:4]
        for col in ("id", "params", *columns):
            table.add_column(escape({"gbps": "GB/s", "gflops": "GFLOP/s"}.get(col, col)))
        for c in summary["frontier"]:
            m = c["metrics"]
            table.add_row(str(c["id"]), " ".join(f"{k}={v}" for k, v in c["params"].items()),
                          *(_cell(k, m.get(k)) for k in columns))
        console.print(table)
        if summary["best"]:
            m = summary["best"]["metrics"]
            ms = m.get("latency_ms")
            console.print(f"best: candidate {summary['best']['id']}" + (f", {ms:.4f} ms" if isinstance(ms, (int, float)) else ""))
        b = summary.get("baseline")
        if b and b.get("latency_ms"):
            line = f"numpy baseline: {b['latency_ms']:.4f} ms (measured {b['measured_at']} on {b['host'] or 'an unknown host'})"
            if b.get("speedup"):
                line += f" (best is {b['speedup']:.2f}x faster)"
            console.print(escape(line))


def _cell(name: str, value: Any) -> str:
    """One metric for the table: '-' when the candidate has none, errors in scientific notation."""
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value:.2e}" if "error" in name else f"{value:.4g}"


def _evaluated(run: Run) -> int:
    """Candidates of ``run`` that are no longer queued or running (whoever evaluated them)."""
    return run.candidates.exclude(status__in=PENDING_STATUSES).count()
