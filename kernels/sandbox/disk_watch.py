"""The disk quota of a running sandbox child, measured from outside it (:class:`DiskWatch`)."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Sequence
from pathlib import Path

DISK_POLL_S = 0.05  # how often a running child's directory is measured


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
