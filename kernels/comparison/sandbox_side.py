"""One side of a measurement that runs kernels in sandbox children taking turns.

A paired comparison (:mod:`kernels.comparison.paired`) and the promotion guard's engine check
(:mod:`engines._isolated`) both run each side in a sandbox child of its own, confined as every
evaluation child: a private directory holding copies of the side's files (its libraries), logs
of its own, and :func:`kernels.sandbox.spawn.start_child`. :class:`SandboxSide` is that child's
lifecycle: start and begin it, take its turns (keeping the parent's wall clock of each),
collect its signed result, remove its directories. Failures raise :class:`SideFailed` with a
reason for a person; the caller names the side in its own terms.
"""

from __future__ import annotations

import json
import signal
from collections.abc import Callable, Mapping
from pathlib import Path

from kernels.sandbox.policy import SandboxPolicy
from kernels.sandbox.spawn import ChildRun, PendingChild, TurnFailed, start_child
from kernels.sandbox.workdirs import hand_over, make_workdir, private_tempdir, remove_tree

__all__ = ["SandboxSide", "SideFailed"]


class SideFailed(Exception):
    """A side's child failed: it died, hung, broke its disk quota, forged or garbled its report,
    or reported a failure. ``reason`` says which (with its signal, its error and its stderr
    tail where there are any)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class SandboxSide:
    """A sandbox child started ahead for one side, begun at once.

    Args:
        files: ``{name: path}`` copied into its private directory (e.g. ``candidate.so``).
        request_for: builds the child's request from its private directory (library paths
            point there).
        policy: confinement; env: extra environment (e.g. the OpenMP timing settings).
        timeout_s: the wall-clock limit its resource limits are sized for (s).
        turns: a turn-taking child (:meth:`turn`); else it runs to its end on its own.
        first_turn_s: what the first turn may take besides its own timeout (s): the child
            loads its inputs and locks down before it.
        tail_chars: characters of its stderr quoted in a failure.

    Raises:
        OSError: the sandbox could not be started (:class:`kernels.sandbox.spawn.SandboxError`);
            nothing is left behind.
    """

    def __init__(self, files: Mapping[str, Path], request_for: Callable[[Path], dict], policy: SandboxPolicy,
                 env: Mapping[str, str], timeout_s: float, *, turns: bool = True, first_turn_s: float = 60.0,
                 tail_chars: int = 600) -> None:
        self.first_turn_s, self.tail_chars = first_turn_s, tail_chars
        self.workdir = make_workdir(policy, files, hand_over_dir=False)
        self.logdir = private_tempdir("log")
        self.child: PendingChild | None = None
        self.turns = 0
        self.walls: dict[int, list[float]] = {}
        try:
            self.child = start_child(request_for(self.workdir), self.workdir, self.logdir, timeout_s, policy=policy,
                                     env=dict(env), turns=turns)
            hand_over(policy, self.workdir, 0o700)  # every file is in: now the child's
            self.child.begin()
        except BaseException:
            self.close()
            raise

    def turn(self, k: int, timeout_s: float) -> None:
        """One call of item ``k``; its wall clock (ms, command to acknowledgement: the parent's
        own measure of the turn) is kept in :attr:`walls`.

        Raises:
            SideFailed: the turn failed (its exit signal and error, its stderr tail).
        """
        try:
            wall = self.child.turn(k, self.first_turn_s + timeout_s if self.turns == 0 else timeout_s)
        except TurnFailed as exc:
            raise SideFailed(f"{exc}{self._exit()}{self._tail()}") from exc
        self.walls.setdefault(k, []).append(wall * 1e3)
        self.turns += 1

    def _exit(self) -> str:
        """How the child ended, once its turn failed: its exit signal or status and the error
        it reported (collected within a few seconds; a child still running is killed)."""
        try:
            run = self.child.end(5.0)
        except (OSError, RuntimeError):
            return ""
        out = []
        if run.returncode is not None and run.returncode < 0:
            try:
                out.append(f"killed by {signal.Signals(-run.returncode).name}")
            except ValueError:
                out.append(f"killed by signal {-run.returncode}")
        elif run.returncode:
            out.append(f"exit status {run.returncode}")
        error = _result(run).get("error") if run.authentic else None
        if error:
            out.append(f"it reported: {error}")
        return f" ({'; '.join(out)})" if out else ""

    def _tail(self) -> str:
        try:
            err = (self.logdir / "stderr").read_text(errors="replace")[-self.tail_chars:].strip()
        except OSError:
            err = ""
        return f"; its stderr: {err}" if err else ""

    def finish(self, timeout_s: float) -> dict:
        """The child's result once it exited, with ``sandbox``: its confinement report.

        Raises:
            SideFailed: it crashed, timed out, broke its quota, forged or garbled its report,
                or reported a failure.
        """
        run = self.child.end(timeout_s)
        if run.disk:
            raise SideFailed(f"the child {run.disk}")
        if run.timed_out:
            raise SideFailed(f"the child did not exit within {timeout_s:g} s")
        if not run.authentic:
            raise SideFailed("its report was not the child's own (something else wrote to the pipe)")
        result = _result(run)
        if run.returncode != 0 or not result.get("ok"):
            why = result.get("error") or (f"exit status {run.returncode}" if run.returncode else "no report")
            raise SideFailed(f"the child failed: {why}"
                             + (f"; stderr: {run.stderr[-self.tail_chars:]}" if run.stderr else ""))
        result["sandbox"] = run.sandbox
        return result

    def close(self) -> None:
        """Kill the child if it still runs and remove its directories; never raises."""
        if self.child is not None:
            self.child.cancel()
        for d in (self.workdir, self.logdir):
            remove_tree(d)


def _result(run: ChildRun) -> dict:
    try:
        result = json.loads(run.result.decode() or "{}")
    except (UnicodeDecodeError, ValueError):
        return {}
    return result if isinstance(result, dict) else {}
