"""Fork server: sandbox children forked from a pre-imported template process.

Starting ``python -I`` and importing numpy and :mod:`kernels` costs 0.15-0.25 s per child on
the 2-core development host, twice per evaluation (validation and timing child). The fork
server is one such process, started once per evaluating process, that has imported
everything and never loads candidate code; each child is an ``os.fork()`` of it (a few
milliseconds) that then does exactly what a freshly started child does: resource limits first,
its own session, the request's environment, cwd and standard streams, then
:func:`kernels.sandbox.child.serve` (lockdown, candidate). Nothing else changes: the same
confinement, the same result pipe, the same wall-clock kill of the process group by the
evaluating process.

Protocol (``AF_UNIX`` ``SOCK_SEQPACKET``, one message per request): a JSON header
``{cwd, env, limits, go}`` with five file descriptors (six when ``go``): the result pipe's
write end, stdout and stderr files, one end of a status socket pair, an unlinked file holding
the request and the read end of the go pipe (:class:`kernels.sandbox.spawn.PendingChild`); a request
with another count is refused (its status socket closed). On the status socket the server
writes ``{"pid": N}`` once the child leads its own session, and ``{"returncode": R}`` when it
has reaped it (``R`` as :attr:`subprocess.Popen.returncode`: negative for a signal).

``KERNELS_SANDBOX_SPAWN=exec`` turns it off (every child a fresh ``python -I``).
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kernels.sandbox import child

_ROOT = str(Path(__file__).resolve().parents[2])
_MAX_MESSAGE = 8 * 2**20

_BOOTSTRAP = f"""\
import sys
sys.dont_write_bytecode = True
sys.path.insert(0, {_ROOT!r})
from kernels.sandbox.forkserver import serve_forever
serve_forever(int(sys.argv[1]))
"""


class ForkServerError(OSError):
    """The fork server could not start a child (an infrastructure failure)."""


class ForkServer:
    """Client side: starts the server process on first use (again after a fork of this
    process or a death of the server) and asks it for children.

    Args:
        env: the server's own environment (the children replace it with the request's).
    """

    def __init__(self, env: dict[str, str]) -> None:
        self.env = dict(env)
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._sock: socket.socket | None = None
        self._owner = -1

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-c", _BOOTSTRAP, str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), env=self.env, cwd="/", stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True,
            )
        finally:
            theirs.close()
        ours.settimeout(60)
        try:
            ready = ours.recv(64)
        except OSError as exc:
            ready = repr(exc).encode()
        if ready != b"ready":
            self._stop()
            raise ForkServerError(f"the fork server did not start (got {ready[:60]!r})")
        ours.settimeout(None)
        self._sock, self._owner = ours, os.getpid()

    def _stop(self) -> None:
        if self._sock is not None:
            self._sock.close()
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()
        self._sock = self._proc = None

    def spawn(self, request: dict, *, cwd: str, env: dict[str, str], limits: list[tuple[int, int]],
              result_fd: int, stdout_fd: int, stderr_fd: int, go_fd: int | None = None,
              answer_s: float = 30.0) -> tuple[int, socket.socket]:
        """Fork a sandbox child; returns (pid, status socket). ``go_fd``: read end of the pipe
        on which the child waits, once prepared, for the go to run the candidate (None: it
        runs at once).

        The child leads its own session (process group ``pid``) before this returns. Read
        its exit with :func:`wait_status`. The request travels in an unlinked temporary file
        (any size); a server that does not answer within ``answer_s`` seconds is replaced.

        Raises:
            ForkServerError: the server could not be started or did not answer.
        """
        status, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        header = json.dumps({"cwd": cwd, "env": env, "limits": limits, "go": go_fd is not None}).encode()
        body = tempfile.TemporaryFile()
        try:
            body.write(json.dumps(request).encode())
            body.flush()
            body.seek(0)
            with self._lock:
                for attempt in (1, 2):  # a dead server (or one inherited through fork) is replaced once
                    if self._sock is None or self._owner != os.getpid() or self._proc.poll() is not None:
                        if self._owner != os.getpid():
                            self._sock = self._proc = None  # the parent's: leave it alone
                        self._stop()
                        self._start()
                    try:
                        fds = [result_fd, stdout_fd, stderr_fd, theirs.fileno(), body.fileno()]
                        socket.send_fds(self._sock, [header], fds + ([go_fd] if go_fd is not None else []))
                        break
                    except OSError:
                        self._stop()
                        if attempt == 2:
                            raise
        except OSError as exc:
            status.close()
            raise ForkServerError(f"could not reach the fork server: {exc}") from exc
        finally:
            theirs.close()
            body.close()
        status.settimeout(max(answer_s, 0.001))
        try:
            first = _read_line(status)
            pid = int(json.loads(first)["pid"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            status.close()
            with self._lock:
                self._stop()  # wedged or broken: the next request gets a fresh server
            raise ForkServerError(f"the fork server did not start the child: {exc}") from None
        status.settimeout(None)
        return pid, status


def _read_line(sock: socket.socket) -> bytes:
    """One line, read byte by byte: the pid and the exit status may arrive together, and the
    second must stay in the socket for the next read (lines are a few dozen bytes)."""
    data = b""
    while not data.endswith(b"\n"):
        chunk = sock.recv(1)
        if not chunk:
            raise ConnectionError("status socket closed")
        data += chunk
    return data


def wait_status(status: socket.socket, timeout_s: float | None) -> int | None:
    """The child's return code, or None if ``timeout_s`` passed first.

    Raises:
        ForkServerError: the server went away before reporting (the child is then unknown).
    """
    status.settimeout(None if timeout_s is None else max(timeout_s, 0.001))  # <= 0: look once
    try:
        return int(json.loads(_read_line(status))["returncode"])
    except (TimeoutError, BlockingIOError):
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ForkServerError(f"the fork server stopped before reporting the child's exit: {exc}") from None


_servers: dict[int, ForkServer] = {}
_servers_lock = threading.Lock()


def server(env: dict[str, str]) -> ForkServer:
    """This process's fork server (one per process; started on first :meth:`ForkServer.spawn`)."""
    with _servers_lock:
        key = os.getpid()
        if key not in _servers:
            _servers.clear()  # entries of a parent process (we were forked): not ours
            _servers[key] = ForkServer(env)
        return _servers[key]


# -- server side (runs in the server process) --------------------------------------------------


def serve_forever(sock_fd: int) -> None:
    """Fork one child per request until the client leaves; what children need (numpy, the
    workload registry, :mod:`kernels.evaluation.timing`) came with :mod:`kernels.sandbox.child`."""
    sock = socket.socket(fileno=sock_fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    children: dict[int, socket.socket] = {}
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "request")
    sel.register(wake_r, selectors.EVENT_READ, "child")
    sock.send(b"ready")
    while True:
        for key, _ in sel.select():
            if key.data == "child":
                while os.read(wake_r, 4096) == 4096:
                    pass
                _reap(children)
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(sock, _MAX_MESSAGE, 6)
            except InterruptedError:
                continue
            if not msg:  # the client is gone
                for pid in children:
                    _kill_group(pid)
                os._exit(0)
            _fork_child(msg, fds, children)
        _reap(children)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _reap(children: dict[int, socket.socket]) -> None:
    while children:
        try:
            pid, wstatus = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        status = children.pop(pid, None)
        if status is not None:
            try:
                status.sendall(json.dumps({"returncode": os.waitstatus_to_exitcode(wstatus)}).encode() + b"\n")
            except OSError:
                pass
            status.close()


def _fork_child(msg: bytes, fds: list[int], children: dict) -> None:
    try:
        job = json.loads(msg)
    except ValueError:
        job = None
    # A child that is to wait for the go must get its go pipe: without it, it would run the
    # candidate at once, before its directory is ready.
    want = 6 if isinstance(job, dict) and job.get("go") else 5
    if len(fds) != want:
        for fd in fds:
            os.close(fd)
        return
    result_fd, out_fd, err_fd, status_fd, body_fd = fds[:5]
    go_fd = fds[5] if want == 6 else None
    status = socket.socket(fileno=status_fd)
    if not isinstance(job, dict):
        for fd in (result_fd, out_fd, err_fd, body_fd, *([go_fd] if go_fd is not None else [])):
            os.close(fd)
        status.close()
        return
    ready_r, ready_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the sandbox child
        try:
            os.close(ready_r)
            _become_child(job, result_fd, out_fd, err_fd, body_fd, ready_w, go_fd)
        except BaseException as exc:  # set-up failed before any candidate code ran
            _setup_failed(result_fd, exc)
        finally:
            os._exit(70)
    os.close(ready_w)
    os.read(ready_r, 1)  # the child leads its own session now: killpg(pid) reaches it
    os.close(ready_r)
    for fd in (result_fd, out_fd, err_fd, body_fd, *([go_fd] if go_fd is not None else [])):
        os.close(fd)
    children[pid] = status
    try:
        status.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    except OSError:
        pass


def _setup_failed(result_fd: int, exc: BaseException) -> None:
    """Report a set-up failure as the sandbox's (exit 70 + ``{"error"}``), not the candidate's."""
    import traceback

    traceback.print_exc()  # stderr is the child's log file once it is redirected
    try:
        os.write(result_fd, json.dumps({"error": f"fork server child set-up: {type(exc).__name__}: {exc}"}).encode() + b"\n")
    except OSError:
        pass


def _become_child(job: dict, result_fd: int, out_fd: int, err_fd: int, body_fd: int, ready_w: int,
                  go_fd: int | None = None) -> None:
    """In the forked child: the same set-up as a fresh ``python -I`` child, then serve."""
    import resource

    os.setsid()  # first: the client may kill the group from now on
    os.write(ready_w, b"x")
    os.close(ready_w)
    os.dup2(err_fd, 2)  # then the log, so that a failure below is visible
    for res, val in job["limits"]:  # before anything reads the request or loads code
        resource.setrlimit(res, (val, val))
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    with os.fdopen(body_fd, "rb") as body:
        request = json.loads(body.read())
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out_fd, 1)
    # Keep only the standard streams, the result pipe and the go pipe, as the exec path's
    # close_fds does: the server's sockets and other children's status sockets must not
    # reach the candidate.
    result_fd = os.dup(result_fd) if result_fd < 3 else result_fd
    if go_fd is not None and go_fd < 3:
        go_fd = os.dup(go_fd)
    keep = sorted({result_fd, *([go_fd] if go_fd is not None else [])})
    low = 3
    for fd in keep:
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)
    os.chdir(job["cwd"])
    os.environ.clear()  # putenv: libraries loaded from now on (libgomp) see only this
    os.environ.update(job["env"])
    child.serve(request, result_fd, go_fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
