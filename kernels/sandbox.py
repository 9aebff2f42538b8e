"""The sandbox: run the candidate-calling child in its own session with limits."""

from __future__ import annotations

import json
import math
import os
import resource
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from kernels import config

_TAIL = 4000  # characters of child stdout/stderr kept in the log
_MAX_RESULT_BYTES = 16 * 2**20
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)

# Runs as `python -I -c`: limits are set before anything else is imported, so no candidate
# code ever runs without them. (Set here rather than in preexec_fn, which is unsafe in a
# threaded parent such as an ASGI server or a threaded Celery worker.)
_BOOTSTRAP = """\
import resource, sys
for _res, _val in {limits!r}:
    resource.setrlimit(_res, (_val, _val))
sys.path.insert(0, {root!r})
from kernels._sandbox_child import main
main(int(sys.argv[1]))
"""


@dataclass
class ChildRun:
    """What came back from one child: exit status, output tails, raw result bytes."""

    returncode: int | None
    timed_out: bool
    stdout: str
    stderr: str
    result: bytes


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _TAIL))
            return f.read().decode("utf-8", "replace")
    except OSError:
        return ""


def run_child(request: dict, workdir: Path, logdir: Path, timeout_s: float) -> ChildRun:
    """Run :mod:`kernels._sandbox_child` on ``request`` with ``workdir`` as its cwd.

    The child gets its own session, an environment of only ``OMP_NUM_THREADS`` (= CPU
    count) and a minimal ``PATH``, rlimits (address space ``KERNELS_SANDBOX_MEMORY_BYTES``,
    CPU ``timeout_s * cpus + 10`` s, files 256 MiB, no core dumps), the request as JSON on
    stdin and a pipe for its result. Its stdout/stderr go to files in ``logdir``. After
    ``timeout_s`` seconds of wall clock (or when it exits) its whole process group is
    killed with SIGKILL.
    """

    cpus = os.cpu_count() or 1
    limits = [
        (resource.RLIMIT_AS, config.sandbox_memory_bytes()),
        (resource.RLIMIT_CPU, int(math.ceil(timeout_s * cpus + 10))),
        (resource.RLIMIT_FSIZE, 256 * 2**20),
        (resource.RLIMIT_CORE, 0),
    ]
    code = _BOOTSTRAP.format(limits=limits, root=_PROJECT_ROOT)
    env = {"OMP_NUM_THREADS": str(cpus), "PATH": "/usr/bin:/bin"}
    rfd, wfd = os.pipe()
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

    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-c", code, str(wfd)],
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                cwd=workdir,
                env=env,
                pass_fds=(wfd,),
                start_new_session=True,
                close_fds=True,
            )
        finally:
            os.close(wfd)  # only the child holds the write end: EOF when it is gone
    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    timed_out = False
    try:
        try:
            proc.stdin.write(json.dumps(request).encode())
            proc.stdin.close()
        except BrokenPipeError:
            pass
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # Kill the whole group: also threads' helpers or grandchildren the candidate made.
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        thread.join(timeout=5)
        if not thread.is_alive():
            os.close(rfd)
    return ChildRun(proc.returncode, timed_out, _tail(out_path), _tail(err_path), b"".join(chunks))
