"""The sandbox: run the candidate-calling child in its own session, confined and limited.

Every evaluation runs :mod:`kernels.sandbox.child` in fresh processes (the evaluator starts
one for validation and one for timing), forked by this process's fork server
(:mod:`kernels.sandbox.forkserver`: a pre-imported process that never loads candidate code, so a
child starts without importing anything) or, with ``KERNELS_SANDBOX_SPAWN=exec``, started as
``python -I``; either way (the same report, ``"spawn"`` says which):

- its own session and process group; after ``timeout_s`` of wall clock (or when it exits)
  the whole group gets SIGKILL;
- a disk quota (:class:`kernels.sandbox.disk_watch.DiskWatch`): this process measures what the child writes while it
  runs (its private directory, files of it deleted but held open or mapped, its stdout and
  stderr) and kills the group once that passes ``KERNELS_SANDBOX_DISK_BYTES`` (default
  1 GiB) or 4096 files and directories (the file-size limit bounds one file, not how many a
  candidate writes);
- resource limits set before anything is imported: address space
  (``KERNELS_SANDBOX_MEMORY_BYTES``, default 8 GiB), CPU seconds (``timeout_s * cpus + 10``),
  file size (256 MiB), no core dumps, 256 open files, and (sandbox user) 4096 threads;
- no descriptors but the standard streams and the result pipe;
- an empty environment: only ``PATH=/usr/bin:/bin``, ``OMP_NUM_THREADS`` (= CPU count),
  ``OPENBLAS_NUM_THREADS=1`` and the OpenMP wait settings of
  :func:`kernels.evaluation.timing.omp_environment` (no secrets, no ``HOME``);
- a private temporary directory of its own as its cwd (:mod:`kernels.sandbox.workdirs`), holding a copy of the candidate
  library (the evaluator gives each child a new one);
- request on stdin (exec) or in a file passed with the fork request, results on a dedicated
  pipe (the candidate's prints cannot forge it), its stdout/stderr in files whose tails go to
  the evidence log;
- confinement applied inside the child before the candidate is loaded
  (:mod:`kernels.sandbox.isolation`, see there for the details and the sources):

  ============== ========================================= ==================================
  layer          as root (this project's CI, workers)      not root
  ============== ========================================= ==================================
  network        own network namespace (``"namespace"``)   user+network namespace if the
                                                           kernel allows unprivileged user
                                                           namespaces, else ``"shared"``
  sockets        seccomp: ``socket()`` fails (EACCES)      same
  user           drop to ``KERNELS_SANDBOX_USER``          unchanged: reads what the
                 (``nobody``), no capabilities,            worker's user can read
                 ``no_new_privs``
  filesystem     Landlock: writes only in the private      Landlock, same; without it writes
                 directory, CPU children read only it and  go wherever the user may write
                 system and Python paths (no ``/tmp``,     (``/tmp``, ``$HOME``, ...)
                 no project ``var/``); without Landlock a
                 read-only mount namespace
  processes      seccomp: no fork/vfork/clone of           same
                 processes (threads are fine)
  ============== ========================================= ==================================

  What was applied is recorded per evaluation in ``Evidence.fingerprint["sandbox"]``
  (``network``: ``"namespace"`` | ``"user-namespace"`` | ``"shared"``; ``filesystem``:
  ``"landlock"`` | ``"mount-namespace"`` | ``"uid-permissions"``; ``user``; ``seccomp``;
  ``notes`` saying why a layer is missing). A missing layer never stops an evaluation;
  only a failed privilege drop as root does (:class:`SandboxError`).

Threat model: the sandbox protects the host (network, files, other processes, secrets) from
the candidate. It cannot make a *deliberately* malicious candidate's timing honest: the
candidate shares the child's address space and could forge what the child reports. The
evaluation protocol (:mod:`kernels.evaluation.pipeline`) catches the honest-but-wrong and the
accidentally-cheating kernels that search agents and LLMs produce.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import resource
import secrets
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from kernels import config
from kernels.hashing import result_mac
from kernels.sandbox import forkserver
from kernels.sandbox.disk_watch import DISK_POLL_S, DiskWatch
from kernels.sandbox.policy import SandboxError, SandboxPolicy

__all__ = ["ChildRun", "PendingChild", "SandboxError", "SandboxPolicy", "TurnFailed", "child_env", "run_child", "start_child"]

_TAIL = 4000  # characters of child stdout/stderr kept in the log
_MAX_RESULT_BYTES = 16 * 2**20
_PROJECT_ROOT = str(Path(__file__).resolve().parents[2])

# Runs as `python -I -c`: limits are set before anything else is imported, so no candidate
# code ever runs without them. (Set here rather than in preexec_fn, which is unsafe in a
# threaded parent such as an ASGI server or a threaded Celery worker.)
_BOOTSTRAP = """\
import resource, sys
for _res, _val in {limits!r}:
    resource.setrlimit(_res, (_val, _val))
sys.dont_write_bytecode = True
sys.path.insert(0, {root!r})
from kernels.sandbox.child import main
main(int(sys.argv[1]), int(sys.argv[2]))
"""

class TurnFailed(Exception):
    """A turn-taking child did not complete a turn (:meth:`PendingChild.turn`): it hung,
    died or broke its disk quota; the message says which."""


@dataclass
class ChildRun:
    """What came back from one child.

    Attributes:
        returncode: exit status (negative: killed by that signal), None if unknown.
        timed_out: the wall-clock limit was hit and the group killed.
        stdout, stderr: the last 4000 characters of each.
        result: raw bytes of the result document (after the sandbox report line).
        sandbox: the child's sandbox report (:func:`kernels.sandbox.isolation.apply`), None when
            the child died before writing it.
        wall_s: wall-clock seconds from the run's start (:meth:`PendingChild.go`) to the
            child's exit.
        authentic: the result carried the child's HMAC under this run's key (see
            :func:`run_child`); False when something else wrote to or relayed the pipe.
        disk: why the child was killed for what it wrote to its private directory
            (:class:`DiskWatch`), None when it was not.
        stopped: why the parent stopped the child before it exited (the reason the ``stop``
            callback of :meth:`PendingChild.go` gave, e.g. ``"cancelled"``), None when it did not.
    """

    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    result: bytes
    sandbox: dict | None = None
    wall_s: float = 0.0
    authentic: bool = True
    disk: str | None = None
    stopped: str | None = None


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def child_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The child's whole environment: ``PATH``, ``OMP_NUM_THREADS`` (CPU count),
    ``OPENBLAS_NUM_THREADS=1`` (numpy stays single-threaded, so the lockdown happens in a
    single-threaded process) and ``extra`` (e.g. OpenMP wait settings)."""
    env = {"OMP_NUM_THREADS": str(os.cpu_count() or 1), "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    env.update(extra or {})
    return env


def _wait_exit(proc: subprocess.Popen, timeout_s: float, watch: DiskWatch) -> bool:
    """Wait until ``proc`` exits (True), ``timeout_s`` passes or ``watch`` finds its directory
    over quota (False), woken at once by a pidfd where Linux has them (``Popen.wait(timeout)``
    polls with sleeps of up to 50 ms)."""
    deadline = time.monotonic() + timeout_s
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):
        fd = None
    try:
        poller = select.poll()
        if fd is not None:
            poller.register(fd, select.POLLIN)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return proc.poll() is not None
            if fd is not None:
                if poller.poll(max(1, math.ceil(min(left, DISK_POLL_S) * 1000))):
                    return True
            else:
                try:
                    proc.wait(timeout=min(left, DISK_POLL_S))
                    return True
                except subprocess.TimeoutExpired:
                    pass
            if watch.poll():
                return False
    finally:
        if fd is not None:
            os.close(fd)


def _collect(rfd: int, reader) -> threading.Thread:
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    return thread


def _finish_reader(thread: threading.Thread, rfd: int) -> None:
    thread.join(timeout=5)
    if not thread.is_alive():
        os.close(rfd)


def _spawn_exec(request, workdir, env, code, wfd, go_r, out_path, err_path, rfd) -> subprocess.Popen:
    """A fresh ``python -I`` child, given its request on stdin."""
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", code, str(wfd), str(go_r)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                cwd=workdir,
                env=child_env(env),
                pass_fds=(wfd, go_r),
                start_new_session=True,
                close_fds=True,
            )
        except BaseException:
            os.close(rfd)
            raise
        finally:
            os.close(wfd)  # only the child holds the write end: EOF when it is gone
            os.close(go_r)
    try:
        proc.stdin.write(json.dumps(request).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc


def _wait_exec(proc: subprocess.Popen, timeout_s: float, watch: DiskWatch) -> tuple[int | None, bool]:
    """(returncode, timed_out) of an exec'd child; its process group is killed either way."""
    timed_out = False
    try:
        if timeout_s > 0:
            timed_out = not _wait_exit(proc, timeout_s, watch) and watch.exceeded is None and watch.stopped is None
    finally:
        # Kill the whole group: also threads' helpers or grandchildren the candidate made.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
    return proc.returncode, timed_out


def _spawn_forked(request, workdir, env, limits, wfd, go_r, out_path, err_path, rfd):
    """A child forked by this process's fork server; returns (pid, status socket).

    Raises:
        SandboxError: the fork server failed (not the candidate's doing).
    """
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            return forkserver.server(child_env()).spawn(
                request, cwd=str(workdir), env=child_env(env), limits=limits,
                result_fd=wfd, stdout_fd=out.fileno(), stderr_fd=err.fileno(), go_fd=go_r)
        except forkserver.ForkServerError as exc:
            os.close(rfd)
            raise SandboxError(str(exc)) from exc
        finally:
            os.close(wfd)  # only the child holds the write end: EOF when it is gone
            os.close(go_r)


def _wait_forked(pid: int, status, timeout_s: float, watch: DiskWatch) -> tuple[int | None, bool]:
    """(returncode, timed_out) of a forked child; its process group is killed either way."""
    returncode = None
    timed_out = False
    deadline = time.monotonic() + timeout_s
    try:
        while timeout_s > 0:  # in slices: the directory is measured between them
            returncode = forkserver.wait_status(status, max(0.0, min(deadline - time.monotonic(), DISK_POLL_S)))
            if returncode is not None or watch.poll() or time.monotonic() >= deadline:
                break
        timed_out = returncode is None and watch.exceeded is None and watch.stopped is None and timeout_s > 0
    finally:
        try:
            os.killpg(pid, signal.SIGKILL)  # the whole group, as in the exec path
        except (ProcessLookupError, PermissionError):
            pass
        if returncode is None:
            try:
                returncode = forkserver.wait_status(status, 30)
            except forkserver.ForkServerError:
                returncode = None
        status.close()
    return returncode, timed_out


class PendingChild:
    """A sandbox child started ahead of its run (:func:`start_child`).

    It prepares at once (imports, loads its input files, allocates its buffers: tens of ms
    for large shapes) and then waits, before its lockdown and before any candidate code is
    loaded, for :meth:`go`; so the caller can overlap that set-up with its own work (the
    compiler, judging the previous child). Until :meth:`go` the child is trusted code only,
    running as this process's user: its directory may stay this process's (mode 0700) and
    be filled until just before :meth:`go`. Call exactly one of :meth:`go` and
    :meth:`cancel` (a child neither started nor cancelled is killed when this object is
    garbage-collected).

    A child started with ``turns=True`` keeps its go channel (a Unix socket pair instead of a
    pipe) after the go: :meth:`begin` lets it lock down, each :meth:`turn` makes it call the
    candidate once and acknowledge, and :meth:`end` closes the channel and collects its
    report. Between turns its process group is stopped (SIGSTOP), so two such children can
    take turns with neither running while the other is timed (:mod:`kernels.comparison.paired`).
    """

    def __init__(self, *, mode: str, key: bytes, watch: DiskWatch, out_path: Path, err_path: Path,
                 rfd: int, thread: threading.Thread, chunks: list[bytes], go_w: int,
                 proc: subprocess.Popen | None = None, pid: int | None = None, status=None,
                 turns: bool = False) -> None:
        self.mode, self.key, self.watch = mode, key, watch
        self.out_path, self.err_path = out_path, err_path
        self.rfd, self.thread, self.chunks, self.go_w = rfd, thread, chunks, go_w
        self.proc, self.pid, self.status = proc, pid, status
        self.turns = turns
        self.started: float | None = None
        self.done = False

    def _wait(self, timeout_s: float) -> tuple[int | None, bool]:
        self.done = True
        try:
            if self.proc is not None:
                return _wait_exec(self.proc, timeout_s, self.watch)
            return _wait_forked(self.pid, self.status, timeout_s, self.watch)
        finally:
            _finish_reader(self.thread, self.rfd)

    def _close_go(self) -> None:
        if self.go_w >= 0:
            os.close(self.go_w)
            self.go_w = -1

    def go(self, timeout_s: float, stop: Callable[[float], str | None] | None = None) -> ChildRun:
        """Let the child lock down and run the candidate; wait at most ``timeout_s`` seconds
        (wall clock, from now) for it to exit, then kill its process group.

        ``stop``, asked every :data:`DISK_POLL_S` or so with the seconds since the run began,
        may give a reason to stop the child now (its group is killed;
        :attr:`ChildRun.stopped` holds the reason).

        Returns:
            :class:`ChildRun` (``wall_s``: from this call to the child's exit).

        Raises:
            SandboxError: the child could not confine itself (e.g. the privilege drop failed).
            RuntimeError: :meth:`go` or :meth:`cancel` was called already, or the child was
                started with ``turns=True`` (use :meth:`begin`, :meth:`turn`, :meth:`end`).
        """
        if self.turns:
            raise RuntimeError("PendingChild.go: a turn-taking child runs through begin, turn and end")
        self.begin()
        self.watch.stop_when = stop
        return self.end(timeout_s)

    def begin(self) -> None:
        """Let the child lock down and load the candidate. A turn-taking child then waits for
        :meth:`turn`; any other runs to its end, collected by :meth:`end`.

        Raises:
            RuntimeError: :meth:`begin` or :meth:`cancel` was called already.
        """
        if self.done or self.started is not None:
            raise RuntimeError("PendingChild.begin: this child was run or cancelled already")
        self.started = self.watch.began = time.monotonic()
        self.watch.rebase()  # what this process put there since the start (the library) is not the child's
        try:
            os.write(self.go_w, b"g")
        except (BrokenPipeError, ConnectionResetError):
            pass  # it exited already (a failed set-up): its report says why
        finally:
            if not self.turns:
                self._close_go()

    def turn(self, command: int, timeout_s: float) -> float:
        """One turn of a turn-taking child: resume its process group, send ``command`` (one
        byte, 0-255: which of its timed items to call), wait for its acknowledgement, stop the
        group again (SIGSTOP: nothing of it runs between turns, threads it left behind
        included).

        Returns:
            Wall-clock seconds from the command to the acknowledgement.

        Raises:
            TurnFailed: no acknowledgement within ``timeout_s`` seconds, the channel closed
                (the child died), or the disk quota was exceeded.
            RuntimeError: not a turn-taking child, or not begun.
        """
        if not self.turns or self.started is None or self.go_w < 0:
            raise RuntimeError("PendingChild.turn: only a begun turn-taking child takes turns")
        self._signal(signal.SIGCONT)
        t0 = time.monotonic()
        try:
            os.write(self.go_w, bytes((command,)))
            ready, _, _ = select.select([self.go_w], [], [], max(timeout_s, 0.0))
            ack = os.read(self.go_w, 1) if ready else None
        except OSError as exc:
            raise TurnFailed(f"the channel to the child failed: {exc}") from exc
        finally:
            self._signal(signal.SIGSTOP)
        if ack is None:
            raise TurnFailed(f"no acknowledgement of the call within {timeout_s:.3g} s")
        if ack != b".":
            raise TurnFailed("the child closed its channel (it died or exited)" if not ack else
                             f"an unexpected acknowledgement {ack!r}")
        if self.watch.poll():
            raise TurnFailed(f"the child {self.watch.exceeded}")
        return time.monotonic() - t0

    def _signal(self, sig: int) -> None:
        pid = self.pid if self.pid is not None else (self.proc.pid if self.proc is not None else None)
        if pid is None:
            return
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def end(self, timeout_s: float) -> ChildRun:
        """Collect the child begun by :meth:`begin`: a turn-taking child is resumed and its
        channel closed (it reports and exits); wait at most ``timeout_s`` seconds (wall
        clock, from now) for it to exit, then kill its process group.

        Returns:
            :class:`ChildRun` (``wall_s``: from :meth:`begin` to the child's exit).

        Raises:
            SandboxError: the child could not confine itself (e.g. the privilege drop failed).
            RuntimeError: not begun, or collected already.
        """
        if self.started is None or self.done:
            raise RuntimeError("PendingChild.end: the child was not begun, or was collected already")
        start = self.started
        if self.turns:
            self._close_go()
            self._signal(signal.SIGCONT)
        returncode, timed_out = self._wait(timeout_s)
        wall_s = time.monotonic() - start
        self.watch.check()  # also what a child wrote between the last poll and its exit
        raw = b"".join(self.chunks)
        head, sep, rest = raw.partition(b"\n")
        report = None
        if sep:
            try:
                report = json.loads(head.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                report = None
            if not isinstance(report, dict):
                report = None
        if report is not None:
            report["spawn"] = self.mode
        if report is not None and "error" in report and returncode == 70:
            raise SandboxError(f"the sandbox child could not confine itself: {report['error']}")
        result = rest if sep else raw
        body, nl, mac = result.rpartition(b"\n")
        authentic = bool(nl) and hmac.compare_digest(mac, result_mac(self.key, body))
        return ChildRun(
            returncode, timed_out, _tail(self.out_path), _tail(self.err_path),
            body if authentic else result, report or None, wall_s, authentic or not result, self.watch.exceeded,
            self.watch.stopped,
        )

    def cancel(self) -> None:
        """Stop the child (it reads end-of-file instead of go, or instead of its next turn,
        and its group is killed); a no-op once collected. Never raises."""
        if self.done:
            return
        self._close_go()
        self._signal(signal.SIGCONT)
        try:
            self._wait(0)
        except OSError:
            pass

    def __del__(self) -> None:
        if not getattr(self, "done", True):
            self.cancel()


def start_child(
    request: dict,
    workdir: Path,
    logdir: Path,
    timeout_s: float,
    *,
    policy: SandboxPolicy | None = None,
    env: Mapping[str, str] | None = None,
    own_bytes: int = 0,
    own_entries: int = 0,
    turns: bool = False,
) -> PendingChild:
    """Start :mod:`kernels.sandbox.child` on ``request`` with ``workdir`` as its cwd; it
    prepares and waits for :meth:`PendingChild.go`.

    Args:
        request: JSON-serialisable request; ``"sandbox"`` is set from ``policy``.
        workdir: private directory from :func:`make_workdir`; it must be handed over to the
            sandbox user (:func:`hand_over`) before :meth:`PendingChild.go`.
        logdir: directory (trusted, not the child's) for its stdout/stderr files.
        timeout_s: wall-clock limit in seconds the run will get (sizes ``RLIMIT_CPU``).
        policy: confinement; default :meth:`SandboxPolicy.from_env`.
        env: extra environment variables (see :func:`child_env`).
        own_bytes, own_entries: what the child's trusted code saves in ``workdir`` at most,
            allowed besides the policy's disk quota (:class:`DiskWatch`).
        turns: the child takes turns (:meth:`PendingChild.turn`): its go channel is a socket
            pair it keeps, and the request says ``"turns": true`` (and ``"mode": "turns"``
            unless it names another mode, such as the engine check's ``"engine-check"``).

    Raises:
        SandboxError: the fork server failed.
        OSError: the child could not be started.
    """
    policy = policy or SandboxPolicy.from_env()
    key = secrets.token_bytes(32)  # per run: the child signs its result with it
    request = {**request, "sandbox": policy.to_child(), "result_key": key.hex()}
    cpus = os.cpu_count() or 1
    limits = [
        (resource.RLIMIT_AS, policy.memory_bytes),
        (resource.RLIMIT_CPU, int(math.ceil(timeout_s * cpus + 10))),
        (resource.RLIMIT_FSIZE, 256 * 2**20),
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, 256),  # few files: each may hold RLIMIT_FSIZE outside RLIMIT_AS
    ]
    if policy.ids():  # a bound on threads; the count is per user, so only for the sandbox user
        limits.append((resource.RLIMIT_NPROC, 4096))
    code = _BOOTSTRAP.format(limits=limits, root=_PROJECT_ROOT)
    rfd, wfd = os.pipe()
    if turns:  # both ways: commands to the child, its acknowledgements back
        parent_end, child_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        go_r, go_w = child_end.detach(), parent_end.detach()
        request["turns"] = True
        request.setdefault("mode", "turns")
    else:
        go_r, go_w = os.pipe()
    os.set_inheritable(go_w, False)
    out_path, err_path = logdir / "stdout", logdir / "stderr"
    chunks: list[bytes] = []

    def reader() -> None:
        total = 0
        while True:
            data = os.read(rfd, 65536)
            if not data:
                break
            total += len(data)
            if total <= _MAX_RESULT_BYTES:
                chunks.append(data)

    watch = DiskWatch(workdir, policy.disk_bytes, policy.disk_entries, logs=(out_path, err_path),
                      own_bytes=own_bytes, own_entries=own_entries)
    mode = config.sandbox_spawn()
    try:
        if mode == "fork":
            pid, status = _spawn_forked(request, workdir, env, limits, wfd, go_r, out_path, err_path, rfd)
            proc = None
        else:
            proc = _spawn_exec(request, workdir, env, code, wfd, go_r, out_path, err_path, rfd)
            pid, status = proc.pid, None
    except BaseException:
        os.close(go_w)
        raise
    watch.attach(pid)
    return PendingChild(mode=mode, key=key, watch=watch, out_path=out_path, err_path=err_path, rfd=rfd,
                        thread=_collect(rfd, reader), chunks=chunks, go_w=go_w, proc=proc, pid=pid, status=status,
                        turns=turns)


def run_child(
    request: dict,
    workdir: Path,
    logdir: Path,
    timeout_s: float,
    *,
    policy: SandboxPolicy | None = None,
    env: Mapping[str, str] | None = None,
) -> ChildRun:
    """Run :mod:`kernels.sandbox.child` on ``request`` with ``workdir`` as its cwd:
    :func:`start_child`, then :meth:`PendingChild.go` at once.

    Args:
        request: JSON-serialisable request; ``"sandbox"`` is set from ``policy``.
        workdir: private directory from :func:`make_workdir`, already handed over.
        logdir: directory (trusted, not the child's) for its stdout/stderr files.
        timeout_s: wall-clock limit in seconds.
        policy: confinement; default :meth:`SandboxPolicy.from_env`.
        env: extra environment variables (see :func:`child_env`).

    Returns:
        :class:`ChildRun`.

    Raises:
        SandboxError: the child could not confine itself (e.g. the privilege drop failed).
        OSError: the child could not be started.
    """
    return start_child(request, workdir, logdir, timeout_s, policy=policy, env=env).go(timeout_s)
