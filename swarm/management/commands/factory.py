"""``manage.py factory run``: run a goal headless through the orchestrator and evaluator."""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction
from django.utils import timezone

from kernels.backends import capabilities
from kernels.space import label_text
from swarm.goals import replay
from swarm.goals.lifecycle import get_or_create_default_goal
from swarm.management.run_checks import agent_mix, check_runnable, int_in, seconds
from swarm.models import PENDING_STATUSES, Baseline, Candidate, CandidateStatus, Evidence, Goal, Run, target_backend
from swarm.runs import baselines, orchestrator, summaries, sweeper
from swarm.runs.claims import worker_identity

#: Seconds between looks at a run whose in-flight candidates another process evaluates.
POLL_S = 0.2
#: Ranges of ``factory run``'s numbers besides budget and batch (:attr:`Run.MAX_BUDGET`): the seed is
#: what :func:`swarm.runs.orchestrator.start_run` and the agents' NumPy RNGs accept.
MAX_SEED = 2**31 - 1
MAX_ID = 2**63 - 1  # a BigAutoField


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived while ``factory run`` drove its run (a KeyboardInterrupt, so that whatever
    cleans up after Ctrl-C, the sandbox's children included, cleans up after it too)."""


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the block runs, SIGTERM (``timeout``, ``kill``) raises :class:`Terminated` instead of
    killing the process; the previous handler is back afterwards. Only the main thread can set
    handlers: elsewhere (a caller's thread) the block runs with the handler as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_terminated(signum, frame):
        raise Terminated

    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class Command(BaseCommand):
    help = "Kernel Factory operations. `factory run`: search a goal headless and report the result."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        run = sub.add_parser("run", help="run a goal headless (evaluations in this process's sandbox children)")
        run.add_argument("--goal", type=int_in(1, MAX_ID), help="id of an existing goal")
        run.add_argument("--workload", default="rmsnorm", help="workload of the default goal (without --goal)")
        run.add_argument("--target", default="cpu-x86_64")
        run.add_argument("--shape-set", default=None, help="shape set (default: the workload's first)")
        run.add_argument("--budget", type=int_in(1, Run.MAX_BUDGET), default=30,
                         help=f"number of evaluations, 1 to {Run.MAX_BUDGET}")
        run.add_argument("--batch-size", type=int_in(1, Run.MAX_BATCH_SIZE), default=4,
                         help=f"candidates per generation, 1 to {Run.MAX_BATCH_SIZE}")
        run.add_argument("--seed", type=int_in(0, MAX_SEED), default=None, help=f"0 to {MAX_SEED} (default: random)")
        run.add_argument("--no-baseline", action="store_true", help="skip timing the NumPy baseline")
        run.add_argument("--agents", default=None,
                         help="comma-separated agent kinds, e.g. forest,evolutionary,optuna (default: the swarm mix, swarm.agents.DEFAULT_MIX)")
        run.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
        sw = sub.add_parser("sweep", help="recover work left by dead workers and re-dispatch it (production: run periodically)")
        sw.add_argument("--every", type=seconds, default=0, help="repeat every N seconds (0: once)")
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
        from django.db import close_old_connections

        if settings.EMBEDDED:  # its dispatches would go to this process's memory:// queue, which no worker reads
            raise CommandError(
                "embedded mode (no REDIS_URL): `manage.py serve` sweeps by itself (at start and every minute) and "
                "its in-process worker evaluates what it re-dispatches; `factory sweep` is for production "
                "(REDIS_URL set), where Celery workers read the queues"
            )
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
                f"recorded optimum {_optimum_text(summary)}"
            )
            for line in summary["warnings"]:
                self.stdout.write(f"warning: {line}")

    def run(self, opts: dict[str, Any]) -> None:
        # Everything that can be refused is refused before a goal is created or a run started.
        agents = agent_mix(opts["agents"])
        goal, created = self._goal(opts)
        try:
            run, pending = orchestrator.start_run(
                goal, budget=opts["budget"], seed=opts["seed"], batch_size=opts["batch_size"], agents=agents
            )
        except (ValueError, OSError) as exc:  # OSError: a replay goal's file went away meanwhile
            if created:  # a goal made for this command only: nothing of a refused command is left
                Goal.objects.filter(pk=goal.pk, runs__isnull=True).delete()
            raise CommandError(str(exc)) from exc
        try:
            with _sigterm_raises():
                if opts["json"]:
                    self._drive(run, pending, progress=None)
                else:
                    from rich.progress import Progress

                    with Progress(transient=False) as progress:
                        task = progress.add_task(f"run {run.pk}: {goal.workload} on {goal.target}", total=run.budget)
                        self._drive(run, pending, progress=(progress, task))
        except KeyboardInterrupt as exc:  # Ctrl-C or SIGTERM: the run ends here instead of waiting for a server
            how = "SIGTERM" if isinstance(exc, Terminated) else "Ctrl-C"
            orchestrator.stop_run(run, via=f"{how} on factory run")
            _release_claims(run, how)
            if isinstance(exc, Terminated):
                raise CommandError(f"terminated (SIGTERM): run {run.pk} stopped (its evidence so far is kept)",
                                   returncode=128 + signal.SIGTERM) from None
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

    def _goal(self, opts: dict[str, Any]) -> tuple[Goal, bool]:
        """The goal to run and whether this call created it, once this machine is known to be
        able to run its target (:func:`swarm.management.run_checks.check_runnable`)."""
        if opts["goal"] is not None:
            try:
                goal = Goal.objects.get(pk=opts["goal"])
            except Goal.DoesNotExist:
                raise CommandError(f"no goal with id {opts['goal']}") from None
            check_runnable(goal.target, goal)
            return goal, False
        target = opts["target"]
        try:
            if capabilities(target_backend(target)).recorded:
                raise ValueError(f"a {target!r} goal is made from its cache file by `manage.py factory import-cache FILE`; "
                                 "then run it with `factory run --goal N`")
            check_runnable(target)
            return get_or_create_default_goal(opts["workload"], target, opts["shape_set"])
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
        objectives = [o["metric"] for o in summary["objectives"]]
        known = [k for k in dict.fromkeys([*objectives, "latency_ms", "energy_j", "max_rel_error", "gbps", "gflops"])
                 if k in present]
        columns = known or sorted(present)[:4]
        for col in ("id", "params", *columns):
            table.add_column(escape({"gbps": "GB/s", "gflops": "GFLOP/s"}.get(col, col)))
        for c in summary["frontier"]:
            m = c["metrics"]
            table.add_row(str(c["id"]), escape(" ".join(f"{k}={label_text(v)}" for k, v in c["labelled_params"].items())),
                          *(_cell(k, m.get(k)) for k in columns))
        console.print(table)
        if summary["best"]:
            metric = objectives[0]
            v = summary["best"]["metrics"].get(metric)
            value = "" if not isinstance(v, (int, float)) else f", {v:.4f} ms" if metric == "latency_ms" else f", {metric} {v:.4g}"
            console.print(f"best: candidate {summary['best']['id']}{escape(value)}")
        b = summary.get("baseline")
        if b and b.get("latency_ms"):
            line = f"numpy baseline: {b['latency_ms']:.4f} ms (measured {b['measured_at']} on {b['host'] or 'an unknown host'})"
            if b.get("speedup"):
                line += f" (best is {b['speedup']:.2f}x faster)"
            console.print(escape(line))


def _release_claims(run: Run, how: str) -> int:
    """Candidates of the stopped ``run`` that this process was evaluating when ``how`` (Ctrl-C,
    SIGTERM) interrupted it: ``cancelled``, with evidence saying so (no process will finish them,
    and a stopped run is not swept). Returns how many."""
    now = timezone.now()
    with transaction.atomic():
        mine = list(Candidate.objects.select_for_update().filter(
            run=run, status=CandidateStatus.RUNNING, claimed_by=worker_identity()).values_list("pk", flat=True))
        Candidate.objects.filter(pk__in=mine).update(status=CandidateStatus.CANCELLED, evaluated_at=now)
        Evidence.objects.bulk_create(
            Evidence(candidate_id=pk, status=CandidateStatus.CANCELLED,
                     log=f"interrupted by {how} on factory run while it was being evaluated: no result")
            for pk in mine if not Evidence.objects.filter(candidate_id=pk).exists())
    return len(mine)


def _cell(name: str, value: Any) -> str:
    """One metric for the table: '-' when the candidate has none, errors in scientific notation."""
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value:.2e}" if "error" in name else f"{value:.4g}"


def _evaluated(run: Run) -> int:
    """Candidates of ``run`` that are no longer queued or running (whoever evaluated them)."""
    return run.candidates.exclude(status__in=PENDING_STATUSES).count()


def _optimum_text(summary: dict[str, Any]) -> str:
    """The recorded optimum of an import summary: ``'0.5537 ms'`` for a time, else the value, its
    metric and direction (``'0.348 score (maximize)'``)."""
    if summary["optimum_ms"] is not None:
        return f"{summary['optimum_ms']:.4g} ms"
    objective = summary["objective"]
    return f"{summary['optimum']:.4g} {objective['metric']} ({objective['direction']})"
