"""Work directories of sandbox children: private temporary directories handed over to the
sandbox user, and their removal, including what killed workers left behind."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

from kernels.sandbox.policy import SandboxPolicy

__all__ = ["hand_over", "make_workdir", "place", "private_tempdir", "remove_tree", "sweep_stale_tempdirs"]


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
