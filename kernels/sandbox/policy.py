"""What the sandbox applies to a child (:class:`SandboxPolicy`) and the user it drops to.

The policy is data: :mod:`kernels.sandbox.spawn` applies it when it starts a child, and the
compilers (:mod:`kernels.sandbox.toolchain`) run as its user when this process is root.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass, field

from kernels import config

__all__ = ["DEVICE_GLOBS", "SandboxError", "SandboxPolicy"]

DEVICE_GLOBS: tuple[str, ...] = (
    "/dev/null", "/dev/zero", "/dev/full", "/dev/nvidia*", "/dev/nvidia-caps/*", "/dev/dri/*",
)


class SandboxError(OSError):
    """The sandbox could not be set up (an infrastructure failure, not the candidate's)."""


@dataclass(frozen=True)
class SandboxPolicy:
    """What the sandbox applies; every layer is on by default.

    Attributes:
        user: unprivileged user to become when running as root: a name (``"nobody"``) or
            ``"uid:gid"``; None keeps root (not recommended). Ignored when not root.
        network: isolate the network with a namespace.
        landlock: restrict writes to the private directory with Landlock.
        mount_fallback: as root without Landlock, use a read-only mount namespace instead.
        seccomp: deny sockets, process creation and namespace/mount/ptrace/bpf syscalls.
        device_globs: device files the candidate may still open for writing (Landlock).
        memory_bytes: address-space limit (RLIMIT_AS) in bytes.
        disk_bytes: bytes (allocated blocks) the child may write: its private directory,
            files of it deleted but still held, its stdout and stderr (:class:`kernels.sandbox.disk_watch.DiskWatch`).
        disk_entries: files and directories the child may add to its private directory.

    Raises:
        ValueError: ``memory_bytes`` below 256 MiB, ``disk_bytes`` below 1 MiB or
            ``disk_entries`` below 64.
    """

    user: str | None = "nobody"
    network: bool = True
    landlock: bool = True
    mount_fallback: bool = True
    seccomp: bool = True
    device_globs: tuple[str, ...] = field(default=DEVICE_GLOBS)
    memory_bytes: int = 8 * 2**30
    disk_bytes: int = 2**30
    disk_entries: int = 4096

    def __post_init__(self) -> None:
        if self.memory_bytes < 256 * 2**20:
            raise ValueError(f"SandboxPolicy: memory_bytes must be >= 256 MiB (got {self.memory_bytes})")
        if self.disk_bytes < 2**20:
            raise ValueError(f"SandboxPolicy: disk_bytes must be >= 1 MiB (got {self.disk_bytes})")
        if self.disk_entries < 64:
            raise ValueError(f"SandboxPolicy: disk_entries must be >= 64 (got {self.disk_entries})")

    @classmethod
    def from_env(cls) -> SandboxPolicy:
        """The policy of this host: ``KERNELS_SANDBOX_USER`` (default ``nobody``; empty keeps
        root), ``KERNELS_SANDBOX_MEMORY_BYTES`` and ``KERNELS_SANDBOX_DISK_BYTES``."""
        return cls(user=config.sandbox_user(), memory_bytes=config.sandbox_memory_bytes(),
                   disk_bytes=config.sandbox_disk_bytes())

    def ids(self) -> tuple[int, int] | None:
        """(uid, gid) to drop to, or None when not root or no user is configured.

        Raises:
            SandboxError: the configured user does not exist or is root.
        """
        if os.geteuid() != 0 or not self.user:
            return None
        if ":" in self.user:
            try:
                uid, gid = (int(v) for v in self.user.split(":", 1))
            except ValueError:
                raise SandboxError(f"KERNELS_SANDBOX_USER={self.user!r}: expected a user name or 'uid:gid'") from None
        else:
            try:
                entry = pwd.getpwnam(self.user)
            except KeyError:
                raise SandboxError(
                    f"sandbox user {self.user!r} does not exist: create it or set KERNELS_SANDBOX_USER "
                    "to another unprivileged user or 'uid:gid'"
                ) from None
            uid, gid = entry.pw_uid, entry.pw_gid
        if uid == 0 or gid == 0:
            raise SandboxError(f"sandbox user {self.user!r} is root: choose an unprivileged user")
        return uid, gid

    def to_child(self) -> dict:
        """The JSON the child's :func:`kernels.sandbox.isolation.apply` reads."""
        ids = self.ids()
        return {
            "uid": ids[0] if ids else None,
            "gid": ids[1] if ids else None,
            "network": self.network,
            "landlock": self.landlock,
            "mount_fallback": self.mount_fallback,
            "seccomp": self.seccomp,
            "device_globs": list(self.device_globs),
        }
