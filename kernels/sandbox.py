"""The sandbox: run the candidate-calling child in its own session, confined and limited.

Every evaluation runs :mod:`kernels._sandbox_child` in fresh processes (the evaluator starts
one for validation and one for timing), forked by this process's fork server
(:mod:`kernels.forkserver`: a pre-imported process that never loads candidate code; a child
in 0.05-0.1 s instead of 0.2 s) or, with ``KERNELS_SANDBOX_SPAWN=exec``, started as
``python -I``; either way (the same report, ``"spawn"`` says which):

- its own session and process group; after ``timeout_s`` of wall clock (or when it exits)
  the whole group gets SIGKILL;
- a disk quota (:class:`DiskWatch`): this process measures what the child writes while it
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
  :func:`kernels.timing.omp_environment` (no secrets, no ``HOME``);
- a private temporary directory of its own as its cwd, holding a copy of the candidate
  library (the evaluator gives each child a new one);
- request on stdin (exec) or in a file passed with the fork request, results on a dedicated
  pipe (the candidate's prints cannot forge it), its stdout/stderr in files whose tails go to
  the evidence log;
- confinement applied inside the child before the candidate is loaded
  (:mod:`kernels._isolation`, see there for the details and the sources):

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
evaluation protocol (:mod:`kernels.evaluator`) catches the honest-but-wrong and the
accidentally-cheating kernels that search agents and LLMs produce.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import re
import resource
import secrets
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from kernels import config, forkserver
from kernels.hashing import result_mac
from kernels.sandbox_policy import SandboxError, SandboxPolicy

__all__ = ["ChildRun", "DiskWatch", "PendingChild", "SandboxError", "SandboxPolicy", "TurnFailed", "make_workdir", "private_tempdir", "remove_tree",
           "run_child", "sweep_stale_tempdirs"]

_TAIL = 4000  # characters of child stdout/stderr kept in the log
_MAX_RESULT_BYTES = 16 * 2**20
DISK_POLL_S = 0.05  # how often a running child's directory is measured (DiskWatch)
_PROJECT_ROOT = str(Path(__file__).resolve().parent.parent)

# Runs as `python -I -c`: limits are set before anything else is imported, so no candidate
# code ever runs without them. (Set here rather than in preexec_fn, which is unsafe in a
# threaded parent such as an ASGI server or a threaded Celery worker.)
_BOOTSTRAP = """\
import resource, sys
for _res, _val in {limits!r}:
    resource.setrlimit(_res, (_val, _val))
sys.dont_write_bytecode = True
sys.path.insert(0, {root!r})
from kernels._sandbox_child import main
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
        sandbox: the child's sandbox report (:func:`kernels._isolation.apply`), None when
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


class DiskWatch:
    """What a child adds to the disk, measured from this process while it runs.

    ``RLIMIT_FSIZE`` bounds each file, not how many a candidate creates: without a quota one
    that writes file after file fills the host's disk (and its database) within its timeout.
    No kernel mechanism limits one directory without privileges (quotas, a sized tmpfs the
    parent could still read), so what the child adds is measured while it runs (every
    :data:`DISK_POLL_S`, or less often when a measurement is costly: it takes at most a fifth
    of a core) and the child is killed once it has added more than ``max_bytes`` of allocated
    blocks (sparse files count what they really use) or ``max_entries`` files and
    directories. A child writing at page-cache speed (a few GB/s) overshoots by about one
    poll's worth; ``fallocate``, which reserves any amount at once, is refused by seccomp.

    What the child adds is the sum of:

    - its private directory's growth, walked by directory descriptor (``openat`` with
      ``O_NOFOLLOW``, ``fstatat``), so paths longer than ``PATH_MAX`` and a directory swapped
      for a symbolic link mid-walk are no blind spot. Anything the walk cannot measure (a
      directory made unreadable, a name swapped under it, directories nested deeper than
      :attr:`MAX_DEPTH`) is a violation;
    - files of that directory it deleted while holding them open or mapped (they leave the
      directory, not the disk, until it exits), found through ``/proc/<pid>/fd`` and
      ``/proc/<pid>/maps`` and measured through ``/proc/<pid>/fd`` and ``map_files``, which
      need root: the child makes itself not dumpable, and ``map_files`` needs
      ``CAP_SYS_ADMIN``. Without root these files go unmeasured (the floor guard below
      remains). (Passing a descriptor through a socket, where no ``/proc`` entry shows it,
      is refused by seccomp: no ``socketpair``.)
    - the growth of its stdout and stderr files (``logs``, outside the directory).

    The filesystem's free space (``statvfs``) is a last guard, not a measure of the child
    (other processes write to the same disk): when it falls under :attr:`FLOOR_BYTES` with
    more than :attr:`FLOOR_UNEXPLAINED` lost that the child's measured additions do not
    explain, the child is killed all the same (the log says the loss may be another
    process's).

    Args:
        root: the child's private directory, holding what this process put there.
        max_bytes, max_entries: what the child may add.
        logs: files the child's stdout and stderr go to.
        own_bytes, own_entries: what the child's trusted code itself saves there at most
            (outputs, snapshots; grows with the shapes: 1.9 GB for the largest FlashInfer
            RMSNorm batches), allowed on top of ``max_bytes`` and ``max_entries``.
    """

    FLOOR_BYTES = 64 * 2**20
    FLOOR_UNEXPLAINED = 16 * 2**20
    MAX_DEPTH = 32
    MAX_POLL_GAP_S = 0.25
    _DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

    def __init__(self, root: Path, max_bytes: int, max_entries: int, logs: Sequence[Path] = (),
                 own_bytes: int = 0, own_entries: int = 0) -> None:
        self.root, self.max_bytes, self.max_entries = str(root), max_bytes, max_entries
        self.own_bytes, self.own_entries = max(0, int(own_bytes)), max(0, int(own_entries))
        self.logs = [str(p) for p in logs]
        self.pid: int | None = None
        self.exceeded: str | None = None
        #: Asked between measurements while the child runs (``stop_when(seconds since the
        #: run began)``): a reason (e.g. ``"cancelled"``) stops it like a quota breach.
        self.stop_when: Callable[[float], str | None] | None = None
        self.stopped: str | None = None
        self.began = time.monotonic()
        self._next_poll = 0.0
        self.rebase()

    def rebase(self) -> None:
        """Take what is there now as the starting point (e.g. once this process has put the
        candidate's library into the directory, just before the child runs it)."""
        self.base_bytes, self.base_entries, _ = self._usage(None)
        self.base_logs = self._log_bytes()
        self.base_free = self._free()

    def attach(self, pid: int) -> None:
        """Measure also what process ``pid`` (the child, just started) holds open or mapped."""
        self.pid = pid

    def _log_bytes(self) -> int:
        total = 0
        for path in self.logs:
            try:
                total += os.stat(path).st_blocks * 512
            except OSError:
                pass
        return total

    def _held(self) -> tuple[int, str | None]:
        """(bytes of deleted files of the directory the child holds open or mapped, what could
        not be measured or None); (0, None) before :meth:`attach` and after the child exits."""
        if self.pid is None:
            return 0, None
        proc, prefix = f"/proc/{self.pid}", self.root.rstrip("/") + "/"
        links = []
        try:
            links += [f"{proc}/fd/{fd}" for fd in os.listdir(f"{proc}/fd")]
        except OSError:  # exited (its files are released), or not dumpable to us (not root)
            return 0, None
        by_inode: dict[tuple[str, str], str] = {}  # one mapping per file: a file mapped 60,000
        try:                                         # times is measured once
            with open(f"{proc}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    if line.endswith(" (deleted)\n") and prefix in line:
                        fields = line.split(None, 5)  # range perms offset dev inode path
                        by_inode.setdefault((fields[3], fields[4]), f"{proc}/map_files/{fields[0]}")
        except (OSError, IndexError):
            pass
        if len(by_inode) > self.max_entries:
            return 0, f"more than {self.max_entries} deleted files of its directory mapped"
        total, seen = 0, set()
        for link, is_mapping in [*((fd, False) for fd in links), *((m, True) for m in by_inode.values())]:
            try:
                target = os.readlink(link)
                if not (target.startswith(prefix) and target.endswith(" (deleted)")):
                    continue
                st = os.stat(link)  # the open or mapped file itself
            except PermissionError:
                if is_mapping:
                    return total, "a deleted file of its directory that it holds mapped (not measurable here)"
                continue
            except OSError:
                continue  # closed or unmapped meanwhile
            if stat.S_ISREG(st.st_mode) and st.st_nlink == 0 and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
        return total, None

    def _free(self) -> int:
        fs = os.statvfs(self.root)
        return fs.f_bavail * fs.f_frsize

    def _usage(self, entry_limit: int | None) -> tuple[int, int, str | None]:
        """(allocated bytes, entries, what could not be measured or None) under the root;
        stops counting past ``entry_limit`` entries (the walk stays as cheap as the limit)."""
        tally = [0, 0]
        try:
            top = os.open(self.root, self._DIR_FLAGS)
        except FileNotFoundError:
            return 0, 0, None  # removed: nothing left to measure
        except OSError as exc:
            return 0, 0, f"its directory: {exc.strerror}"
        try:
            problem = self._walk(top, 1, tally, entry_limit)
        finally:
            os.close(top)
        return tally[0], tally[1], problem

    def _walk(self, fd: int, depth: int, tally: list[int], entry_limit: int | None) -> str | None:
        try:
            it = os.scandir(fd)
        except OSError as exc:
            return f"a directory that cannot be read: {exc.strerror}"
        with it:
            for entry in it:
                tally[1] += 1
                if entry_limit is not None and tally[1] > entry_limit:
                    return None  # over the entry limit: check() says so
                name = entry.name
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    continue  # removed while we walked
                except OSError as exc:
                    return f"{name[:60]!r}: {exc.strerror}"
                tally[0] += st.st_blocks * 512
                if not stat.S_ISDIR(st.st_mode):
                    continue
                if depth >= self.MAX_DEPTH:
                    return f"directories nested deeper than {self.MAX_DEPTH} levels"
                try:
                    sub = os.open(name, self._DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    continue
                except OSError as exc:  # ELOOP: swapped for a symbolic link since the stat
                    return f"{name[:60]!r}: {exc.strerror}"
                try:
                    problem = self._walk(sub, depth + 1, tally, entry_limit)
                finally:
                    os.close(sub)
                if problem:
                    return problem
        return None

    def poll(self) -> bool:
        """:meth:`check`, unless the last walk was so costly that this one would come too soon
        (then the last answer); True at once when :attr:`stop_when` gives a reason to stop
        (kept in :attr:`stopped`)."""
        now = time.monotonic()
        if self.stopped is None and self.stop_when is not None:
            self.stopped = self.stop_when(now - self.began)
        if self.stopped is not None:
            return True
        if now < self._next_poll or self.exceeded is not None:
            return self.exceeded is not None
        over = self.check()
        # A costly measurement waits 4 times its cost before the next, at most MAX_POLL_GAP_S.
        self._next_poll = time.monotonic() + min(4 * (time.monotonic() - now), self.MAX_POLL_GAP_S)
        return over

    def check(self) -> bool:
        """Measure now; True (and :attr:`exceeded` says why) once the child is over a limit."""
        if self.exceeded is not None:
            return True
        used, entries, problem = self._usage(self.base_entries + self.max_entries + self.own_entries)
        held, unmeasured = self._held()
        logs = max(0, self._log_bytes() - self.base_logs)
        try:
            free = self._free()
        except OSError:
            free = self.base_free  # the directory is gone: nothing more to measure there
        mib = 2**20
        grown = max(0, used - self.base_bytes)
        added = grown + held + logs
        unexplained = (self.base_free - free) - added
        if problem or unmeasured:
            self.exceeded = f"made what it wrote unmeasurable: {problem or unmeasured}"
        elif entries - self.base_entries > self.max_entries + self.own_entries:
            self.exceeded = (f"created more than {self.max_entries} files and directories in its private directory"
                             + (f" besides the evaluator's own {self.own_entries}" if self.own_entries else ""))
        elif added > self.max_bytes + self.own_bytes:
            own = f" besides the evaluator's own files (up to {self.own_bytes / mib:.3g} MiB)" if self.own_bytes else ""
            self.exceeded = (f"wrote more than {self.max_bytes / mib:g} MiB{own} ({added / mib:.0f} MiB when "
                             f"measured: {grown / mib:.0f} in its private directory, "
                             f"{held / mib:.0f} in files it deleted but holds, {logs / mib:.0f} to stdout/stderr)")
        elif free < self.FLOOR_BYTES and unexplained > self.FLOOR_UNEXPLAINED:
            self.exceeded = (f"was running when the disk holding its private directory fell to {free / mib:.0f} MiB "
                             f"free, {unexplained / mib:.0f} MiB of the loss not written where it may write (it, "
                             "or another process writing to that disk)")
        return self.exceeded is not None


def make_workdir(policy: SandboxPolicy, files: Mapping[str, Path], *, hand_over_dir: bool = True) -> Path:
    """A private temporary directory holding copies of ``files`` (name -> source path).

    When the child will drop privileges, the directory (mode 0700) and the copies are
    chowned to the sandbox uid so it can read them and write its results, while the
    originals (e.g. the compile cache) stay out of its reach. With ``hand_over_dir=False`` the
    directory itself stays this process's until :func:`hand_over` gives it away: add every
    file first (:func:`place`, or write it and :func:`hand_over` it), so that nothing
    sandboxed can plant a symbolic link where this process still writes.

    Raises:
        SandboxError: the configured user is invalid.
        OSError: copying failed.
    """
    ids = policy.ids()
    _sweep_once()
    workdir = private_tempdir("eval")
    try:
        for name, src in files.items():
            place(policy, workdir, name, src)
        if ids and hand_over_dir:
            os.chown(workdir, *ids)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    return workdir


def hand_over(policy: SandboxPolicy | None, path: Path, mode: int = 0o400) -> None:
    """Make ``path`` (a file this process wrote into a work directory, or the directory) ``mode``
    and, when the child will drop privileges, owned by the sandbox user.

    Raises:
        SandboxError: the configured user is invalid.
        OSError: chmod or chown failed.
    """
    os.chmod(path, mode)
    ids = policy.ids() if policy is not None else None
    if ids:
        os.chown(path, *ids)


def place(policy: SandboxPolicy, workdir: Path, name: str, src: Path) -> Path:
    """Copy ``src`` into ``workdir`` as ``name`` (mode 0500, the sandbox user's); the new path.

    Raises:
        SandboxError: the configured user is invalid.
        OSError: copying failed.
    """
    dst = workdir / name
    shutil.copyfile(src, dst)
    hand_over(policy, dst, 0o500)
    return dst


def private_tempdir(kind: str) -> Path:
    """A new directory ``int21-<kind>-<pid>-<random>`` in the temp dir (mode 0700): named after
    this process, so that :func:`sweep_stale_tempdirs` can tell when its owner is gone."""
    return Path(tempfile.mkdtemp(prefix=f"int21-{kind}-{os.getpid()}-"))


_STALE = re.compile(r"^int21-(?:eval|log|build|nvcc)-(\d+)-")
_swept = False


def sweep_stale_tempdirs() -> int:
    """Remove the evaluation, log and build directories (:func:`private_tempdir`) in the temp
    dir whose process no longer exists: a worker killed mid-evaluation (out of memory, a
    deploy, the sweeper's retry tests) never reaches its cleanup, and its inputs, outputs and
    candidate libraries (up to a few hundred MB) would stay for good. Directories of live
    processes, this one's included, are left alone. Returns how many were removed; never
    raises."""
    removed = 0
    try:
        entries = list(os.scandir(tempfile.gettempdir()))
    except OSError:
        return 0
    for entry in entries:
        m = _STALE.match(entry.name)
        if not m or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(m.group(1))
        if pid == os.getpid() or _alive(pid):
            continue
        remove_tree(Path(entry.path))
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: another user's process
        pass
    return True


def _sweep_once() -> None:
    """:func:`sweep_stale_tempdirs` on this process's first evaluation (a restarted worker
    clears what its killed predecessor left)."""
    global _swept
    if not _swept:
        _swept = True
        sweep_stale_tempdirs()


def remove_tree(path: Path) -> None:
    """Remove a directory a child wrote, whatever it left there: ``shutil.rmtree`` recurses
    (a candidate can nest thousands of directories), so ``rm -rf`` takes over when it fails,
    after ``chmod -R u+rwx`` (a child running as this user can make its directories
    unwritable; root is not stopped by that). Never raises."""
    try:
        shutil.rmtree(path)
        return
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        pass
    for cmd in (["chmod", "-R", "u+rwx", str(path)], ["rm", "-rf", "--one-file-system", str(path)]):
        try:  # chmod -R changes no symbolic link and follows none met on the way
            subprocess.run(cmd, timeout=120, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except (OSError, subprocess.SubprocessError):
            pass


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
    take turns with neither running while the other is timed (:mod:`kernels.paired`).
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
    """Start :mod:`kernels._sandbox_child` on ``request`` with ``workdir`` as its cwd; it
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
    """Run :mod:`kernels._sandbox_child` on ``request`` with ``workdir`` as its cwd:
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
