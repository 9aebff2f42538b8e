"""Running a compiler on untrusted source: resource limits, a process group, a bounded log.

A candidate's source drives the compiler as much as its code drives the sandbox child. Two
lines (``static char big[1L << 28] = {1};``) make gcc write a 256 MiB shared library in about
2 s, with the linker holding all of it in memory; a larger array fills the disk or the
memory of the worker host, and the library would be kept in the compile cache. A source that
makes the compiler print without end fills the worker's memory when the output is captured.
And ``subprocess.run(timeout=...)`` kills only the driver (``gcc``, ``nvcc``), not the ``cc1``,
``as`` or ``ptxas`` it started, which go on running.

So every compiler runs here:

- under resource limits set before it starts (a ``python -I -S`` bootstrap sets them, drops
  to the sandbox user where there is one, confines it with Landlock and ``exec``s the
  compiler; ``preexec_fn`` is unsafe in a threaded worker): file size (:data:`FILE_BYTES`,
  also the bound on its log), memory (:data:`MEMORY_BYTES`) and CPU seconds;
- reading only its build directory and the system's directories, writing only the former:
  ``#include`` and ``.incbin`` of another evaluation's source (every evaluation's files
  belong to the same sandbox user) fail;
- in its own session, whose whole process group is killed on timeout and after it exits;
- with stdout and stderr in one temporary file of this process's, of which only the first
  and last :data:`LOG_KEEP` characters are read back.

Sources: ``setrlimit(2)`` (``RLIMIT_FSIZE``: a write past the limit gets ``SIGXFSZ``), ``landlock(7)``,
``subprocess`` (``preexec_fn`` and threads).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

from kernels.sandbox.policy import SandboxPolicy

FILE_BYTES = 64 * 2**20  # largest file a compiler may write: object, library, log
MEMORY_BYTES = 4 * 2**30  # its data segment and private mappings (RLIMIT_DATA); a kernel needs ~40 MiB
LOG_KEEP = 32_000  # characters kept from each end of a compiler's output
_ISOLATION = os.path.join(os.path.dirname(os.path.abspath(__file__)), "isolation.py")

# Started as this process's user (the sandbox user may not be able to read this Python), it
# drops to the tool's user itself. Python ignores SIGPIPE and SIGXFSZ and an ignored signal
# stays ignored across exec: the tool gets them back at their defaults (a write past the
# file-size limit kills it).
_BOOTSTRAP = """\
import os, resource, signal, sys
for res, val in ((resource.RLIMIT_FSIZE, {fsize}), (resource.RLIMIT_CPU, {cpu}), (resource.RLIMIT_DATA, {data})):
    if val:
        resource.setrlimit(res, (val, val))
for sig in (signal.SIGPIPE, signal.SIGXFSZ):
    signal.signal(sig, signal.SIG_DFL)
if {confine!r}:  # isolation.py alone (stdlib only: the kernels package would import numpy),
    import importlib.util  # loaded before the drop (this Python may be unreadable to the user)
    spec = importlib.util.spec_from_file_location("_int21_isolation", {isolation!r})
    iso = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(iso)
ids = {ids!r}
if ids:
    os.setgroups([])
    os.setgid(ids[1])
    os.setuid(ids[0])
if {confine!r}:
    why = iso.confine_tool(os.getcwd(), sys.argv[1])
    if why:
        print(f"[not confined: {{why}}]", file=sys.stderr)
try:
    os.execv(sys.argv[1], sys.argv[1:])
except OSError as exc:
    print(f"cannot run {{sys.argv[1]}}: {{exc}}", file=sys.stderr)
    os._exit(127)
"""


class CompileError(Exception):
    """The compiler rejected a source or timed out; ``log`` holds its output."""

    def __init__(self, message: str, log: str) -> None:
        super().__init__(message)
        self.log = log


def compiler_ids() -> tuple[int, int] | None:
    """(uid, gid) the compiler runs as: the sandbox user when this process is root, else None
    (the compiler runs as this process's user).

    Raises:
        kernels.sandbox.policy.SandboxError: the configured sandbox user is invalid.
    """
    return SandboxPolicy.from_env().ids()


class ToolTimeout(Exception):
    """The tool ran past its wall-clock limit; its process group was killed.

    Attributes:
        log: what it printed until then (head and tail).
    """

    def __init__(self, timeout_s: float, log: str) -> None:
        super().__init__(f"timed out after {timeout_s:g} s")
        self.log = log


def run_tool(cmd: Sequence[str], *, cwd: str, env: Mapping[str, str], timeout_s: float,
             memory_bytes: int = MEMORY_BYTES, ids: tuple[int, int] | None = None,
             confine: bool = True) -> tuple[int, str]:
    """Run ``cmd`` (a compiler on untrusted source) confined as the module docstring says.

    Args:
        cmd: the command; ``cmd[0]`` is looked up on ``env["PATH"]``.
        cwd: its working directory.
        env: its whole environment.
        timeout_s: wall-clock limit (s); the CPU limit is this plus 10 s.
        memory_bytes: limit of its data segment and private writable mappings
            (``RLIMIT_DATA``, bytes), where a compiler's memory goes; unlike the address space
            it leaves alone the large virtual ranges CUDA's tools reserve. ``#include
            "/dev/zero"`` makes ``cc1`` grow until it hits this.
        ids: (uid, gid) the tool runs as (no supplementary groups), None for this process's.
        confine: Landlock: the tool writes only beneath ``cwd`` and reads only there and in
            the system's directories (:func:`kernels.sandbox.isolation.confine_tool`); where the
            kernel has no Landlock, its log says so and it runs unconfined.

    Returns:
        (return code, negative for a signal: ``-25`` is ``SIGXFSZ``, a file past
        :data:`FILE_BYTES`; stdout and stderr together, the middle cut out past
        2 x :data:`LOG_KEEP` characters).

    Raises:
        ToolTimeout: it ran past ``timeout_s``.
        FileNotFoundError: ``cmd[0]`` is not an executable on ``env["PATH"]``.
        OSError: it could not be started.
    """
    exe = shutil.which(cmd[0], path=env.get("PATH", os.defpath))
    if exe is None:
        raise FileNotFoundError(f"{cmd[0]}: no such executable on PATH={env.get('PATH', os.defpath)}")
    code = _BOOTSTRAP.format(fsize=FILE_BYTES, cpu=int(timeout_s) + 10, data=memory_bytes,
                             ids=tuple(ids) if ids else None, confine=confine, isolation=_ISOLATION)
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", code, exe, *cmd[1:]], stdin=subprocess.DEVNULL,
                                stdout=log, stderr=subprocess.STDOUT, cwd=cwd, env=dict(env),
                                start_new_session=True)
        try:
            returncode = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()
            raise ToolTimeout(timeout_s, _read_log(log)) from None
        _kill_group(proc.pid)  # whatever the driver left running
        return returncode, _read_log(log)


def failure(tool: str, returncode: int, log: str) -> str:
    """One line saying why ``tool`` failed (its return code and log from :func:`run_tool`): a
    file past :data:`FILE_BYTES` (the tool killed by ``SIGXFSZ``, or a driver such as gcc
    reporting that of ``as`` or ``ld``), another signal, or its exit code."""
    if returncode == -signal.SIGXFSZ or "File size limit exceeded" in log:
        return f"{tool} stopped: it wrote a file past the {FILE_BYTES // 2**20} MiB limit"
    if returncode < 0:
        try:
            return f"{tool} killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"{tool} killed by signal {-returncode}"
    return f"{tool} exited with code {returncode}"


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_log(f) -> str:
    """Head and tail of the log file (bytes decoded with replacement)."""
    size = f.seek(0, os.SEEK_END)
    if size <= 2 * LOG_KEEP:
        f.seek(0)
        return f.read().decode("utf-8", "replace")
    f.seek(0)
    head = f.read(LOG_KEEP)
    f.seek(size - LOG_KEEP)
    tail = f.read()
    return (head.decode("utf-8", "replace") + f"\n[... {size - 2 * LOG_KEEP} bytes of output cut ...]\n"
            + tail.decode("utf-8", "replace"))
