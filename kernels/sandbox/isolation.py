"""Child-side isolation of the sandbox: namespaces, privilege drop, Landlock, seccomp.

Standard library and ``ctypes`` only. :func:`apply` runs inside the sandbox child after the
trusted imports (numpy, the workload registry) and before the candidate's shared library is
loaded, so no candidate code ever runs unconfined. Every layer is best effort except the
privilege drop (an error when running as root); what was applied comes back as a report that
the evaluator stores in ``Evidence.fingerprint["sandbox"]``.

Layers, in order (Linux):

1. **Network namespace** (``network``): ``unshare(CLONE_NEWNET)`` (needs ``CAP_SYS_ADMIN``,
   e.g. root). The new namespace has only a loopback interface, which is down, so every
   ``connect`` fails (``ENETUNREACH``), even to 127.0.0.1, and abstract unix sockets of the
   host are out of reach. Without the capability, after the privilege drop, it tries
   ``unshare(CLONE_NEWUSER | CLONE_NEWNET)`` (unprivileged user namespaces; needs a
   single-threaded process). If neither is allowed the report says ``"shared"`` and the
   evaluation proceeds; the seccomp layer (5) still denies ``socket()``.
2. **Mount namespace fallback** (``filesystem: "mount-namespace"``, root only, used only when
   Landlock is unavailable): a private mount namespace in which every mount is read-only
   (``mount_setattr(AT_RECURSIVE, MOUNT_ATTR_RDONLY)``, Linux >= 5.12) except a bind mount
   of the private directory.
3. **Privilege drop** (``user``): when running as root, ``setgroups([])``, ``setresgid``,
   ``setresuid`` to the configured unprivileged uid/gid (``nobody``/``nogroup`` by
   default), which clears every capability; files the uid cannot read (``/root``, the
   compile cache, the database) stay unreadable. Then ``PR_SET_NO_NEW_PRIVS`` (no setuid
   binary can give privileges back) and ``PR_SET_DUMPABLE 0`` (no same-uid ptrace).
4. **Landlock** (``filesystem: "landlock"``; Linux >= 5.13 with Landlock in the active
   LSMs): file creation, writing, truncation, removal and renaming are allowed only beneath
   the private directory (plus writing existing device files such as ``/dev/null`` and
   ``/dev/nvidia*``); with ABI >= 4 TCP ``bind``/``connect`` are denied; with ABI >= 6
   abstract unix sockets and signals to processes outside the sandbox are denied. Works
   without root too.
5. **seccomp** (``seccomp``; x86_64 and aarch64): returns an error for ``socket()`` and
   ``socketpair()`` (``EACCES``), process creation (``fork``, ``vfork``, ``clone`` without
   ``CLONE_THREAD``; ``clone3`` gets ``ENOSYS`` so threads fall back to ``clone``),
   ``io_uring_*``, ``unshare``, ``setns``, ``mount``, ``ptrace``, ``bpf``, ``userfaultfd``,
   ``fallocate`` (``EOPNOTSUPP``: it reserves disk past the file-size limit) and
   installing a ``SIGSEGV``/``SIGBUS`` handler (work deferred to the evaluator's first touch of a
   protected output page; the child's own fault helper, :mod:`kernels.sandbox.guard_pages`, is
   installed before the lockdown and stays); other ABIs
   (i386 ``int 0x80``, x32) kill the process. Threads (OpenMP) keep working; nothing the
   candidate starts can outlive the process group the parent kills.

What remains when a layer is missing: without a network namespace and without seccomp the
candidate can reach the network; without Landlock and the mount fallback (or when not root)
it can write wherever its uid can, e.g. world-writable ``/tmp``, ``/var/tmp`` and
``/dev/shm``; without the privilege drop (not root) it can read everything the worker's user
can. The report lists what was applied, never what was merely requested.

Sources: ``unshare(2)``, ``network_namespaces(7)``, ``capabilities(7)``, ``prctl(2)``,
the kernel's ``Documentation/userspace-api/landlock.rst`` and ``seccomp_filter.rst``,
``mount_setattr(2)``.
"""

from __future__ import annotations

import ctypes
import errno
import glob
import os
import platform
import signal
import struct
import sys
import tempfile

__all__ = ["apply"]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long

CLONE_NEWNS = 0x00020000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
CLONE_THREAD = 0x00010000

PR_SET_DUMPABLE = 4
PR_SET_NO_NEW_PRIVS = 38

# Syscall numbers that are the same on x86_64 and aarch64 (the "new" generic table).
SYS_MOUNT_SETATTR = 442
SYS_LANDLOCK_CREATE_RULESET = 444
SYS_LANDLOCK_ADD_RULE = 445
SYS_LANDLOCK_RESTRICT_SELF = 446

_ARCH = {
    # machine: (AUDIT_ARCH, seccomp syscall nr, {name: nr})
    "x86_64": (0xC000003E, 317, {
        "socket": 41, "socketpair": 53, "clone": 56, "fork": 57, "vfork": 58, "ptrace": 101, "mount": 165,
        "unshare": 272, "setns": 308, "bpf": 321, "io_uring_setup": 425,
        "io_uring_enter": 426, "io_uring_register": 427, "clone3": 435, "memfd_create": 319,
        "rt_sigaction": 13, "userfaultfd": 323, "fallocate": 285,
        "kill": 62, "tkill": 200, "tgkill": 234, "rt_sigqueueinfo": 129, "rt_tgsigqueueinfo": 297,
        "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438, "process_vm_readv": 310,
        "process_vm_writev": 311, "kcmp": 312, "prlimit64": 302,
    }),
    "aarch64": (0xC00000B7, 277, {
        "mount": 40, "unshare": 97, "ptrace": 117, "socket": 198, "socketpair": 199, "clone": 220,
        "setns": 268, "bpf": 280, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "clone3": 435, "memfd_create": 279,
        "rt_sigaction": 134, "userfaultfd": 282, "fallocate": 47,
        "kill": 129, "tkill": 130, "tgkill": 131, "rt_sigqueueinfo": 138, "rt_tgsigqueueinfo": 240,
        "pidfd_open": 434, "pidfd_send_signal": 424, "pidfd_getfd": 438, "process_vm_readv": 270,
        "process_vm_writev": 271, "kcmp": 272, "prlimit64": 261,
    }),
}


def _errno_msg(what: str) -> str:
    e = ctypes.get_errno()
    return f"{what}: {errno.errorcode.get(e, e)} ({os.strerror(e)})"


def _threads() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return -1


# -- namespaces --------------------------------------------------------------------------------


def _unshare(flags: int) -> str | None:
    """None on success, else the error text."""
    if _libc.unshare(ctypes.c_int(flags)) == 0:
        return None
    return _errno_msg("unshare")


def _mount_readonly_except(workdir: str) -> str | None:
    """Private mount namespace, everything read-only except ``workdir``. None on success."""
    MS_REC, MS_PRIVATE, MS_BIND = 0x4000, 0x40000, 0x1000
    AT_FDCWD, AT_RECURSIVE, MOUNT_ATTR_RDONLY = -100, 0x8000, 0x1
    err = _unshare(CLONE_NEWNS)
    if err:
        return err
    mount = _libc.mount
    mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
    if mount(None, b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        return _errno_msg("mount --make-rprivate /")
    wd = workdir.encode()
    if mount(wd, wd, None, MS_BIND | MS_REC, None) != 0:
        return _errno_msg("bind mount of the private directory")

    def setattr_(path: bytes, flags: int, attr_set: int, attr_clr: int) -> str | None:
        attr = struct.pack("QQQQ", attr_set, attr_clr, 0, 0)
        buf = ctypes.create_string_buffer(attr, len(attr))
        rc = _libc.syscall(SYS_MOUNT_SETATTR, ctypes.c_int(AT_FDCWD), ctypes.c_char_p(path),
                           ctypes.c_uint(flags), buf, ctypes.c_size_t(len(attr)))
        return None if rc == 0 else _errno_msg("mount_setattr")

    err = setattr_(b"/", AT_RECURSIVE, MOUNT_ATTR_RDONLY, 0) or setattr_(wd, 0, 0, MOUNT_ATTR_RDONLY)
    if err:
        return err
    os.chdir(workdir)  # the old cwd still points into the read-only mount below the bind
    return None


# -- privilege drop ----------------------------------------------------------------------------


def _drop_privileges(uid: int, gid: int) -> None:
    """setgroups([]), setresgid, setresuid; verifies root cannot be regained.

    Raises:
        OSError: a step failed, or root could be regained.
    """
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    try:
        os.setuid(0)
    except PermissionError:
        return
    raise OSError("privilege drop failed: setuid(0) succeeded afterwards")


def _prctl(option: int, arg: int) -> bool:
    return _libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), ctypes.c_ulong(0),
                       ctypes.c_ulong(0), ctypes.c_ulong(0)) == 0


# -- Landlock ----------------------------------------------------------------------------------

_LL_WRITE_FILE = 1 << 1
_LL_FS_WRITE = (
    (1 << 1)  # WRITE_FILE
    | (1 << 4) | (1 << 5)  # REMOVE_DIR, REMOVE_FILE
    | (1 << 6) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 10) | (1 << 11) | (1 << 12)  # MAKE_*
)
_LL_READ = (1 << 2) | (1 << 3)  # READ_FILE, READ_DIR
_LL_READ_FILE = 1 << 2
_LL_REFER = 1 << 13  # ABI 2
_LL_TRUNCATE = 1 << 14  # ABI 3
_LL_NET_TCP = (1 << 0) | (1 << 1)  # ABI 4: BIND_TCP, CONNECT_TCP
_LL_SCOPE = (1 << 0) | (1 << 1)  # ABI 6: ABSTRACT_UNIX_SOCKET, SIGNAL


def landlock_abi() -> int:
    """Landlock ABI version of the running kernel, or 0 if unavailable."""
    rc = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return int(rc) if rc > 0 else 0


# What may still be read (besides the private directory and, for the sandbox child, the Python
# installation, see readable_roots): shared libraries and programs, the loader's files, the CPU
# topology OpenMP reads (/sys, three /proc files), four device files. Not /tmp, /var, /home,
# /root, /run or /opt (other evaluations' work and build directories, databases, caches), nor
# the rest of /etc, /dev and /proc (configuration, shared memory, other processes).
SYSTEM_READ_ROOTS = (
    "/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/sys",
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
    "/dev/null", "/dev/zero", "/dev/full", "/dev/urandom", "/dev/random",
    "/proc/cpuinfo", "/proc/meminfo", "/proc/stat",
)


def _unique(paths: list[str]) -> list[str]:
    """``paths``, each also resolved, without repeats."""
    out: list[str] = []
    for path in paths:
        for p in (path, os.path.realpath(path)):
            if p not in out:
                out.append(p)
    return out


def readable_roots(project_root: str) -> list[str]:
    """What a confined CPU child may still read: :data:`SYSTEM_READ_ROOTS`, its own
    ``/proc/<pid>`` (it cannot fork), this Python's installation (prefixes and every existing
    ``sys.path`` directory, for imports made after the lockdown) and, of the project, only the
    ``kernels`` package (its ``var/`` holds the database). Paths as given and resolved."""
    roots = [*SYSTEM_READ_ROOTS, f"/proc/{os.getpid()}"]
    # Never the project itself, /tmp or a directory above either (a PYTHONPATH of "/" or the
    # project root would open them again).
    guarded = [os.path.realpath(project_root) + "/", os.path.realpath(tempfile.gettempdir()) + "/"]
    for path in (sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path):
        if not path or not os.path.isdir(path):
            continue
        real = os.path.realpath(path).rstrip("/") + "/"
        if not any(g.startswith(real) for g in guarded):
            roots.append(path)
    roots.append(os.path.join(project_root, "kernels"))
    return _unique(roots)


def confine_tool(workdir: str, executable: str) -> str | None:
    """Confine this process (a compiler's bootstrap, about to ``exec`` it) with Landlock:
    writes only beneath ``workdir``, reads only there, in :data:`SYSTEM_READ_ROOTS`, ``/proc``
    (its children read their own entries) and the installation ``executable`` lies in (two
    levels up from the resolved file, e.g. ``/usr/local/cuda-13.0``). Without it, ``#include``
    or ``.incbin`` of another evaluation's files would put them into this candidate's library
    or log. Sets ``no_new_privs`` (Landlock needs it without privileges; exec keeps both).

    Returns:
        None when applied, else why not (the compile goes on unconfined).
    """
    if not _prctl(PR_SET_NO_NEW_PRIVS, 1):
        return _errno_msg("PR_SET_NO_NEW_PRIVS")
    install = os.path.dirname(os.path.dirname(os.path.realpath(executable)))
    roots = _unique([*SYSTEM_READ_ROOTS, "/proc", install])
    _, err, _ = _landlock(workdir, [], roots)
    return err


def _landlock(workdir: str, device_globs: list[str],
              readable: list[str] | None = None) -> tuple[int, str | None, list[str]]:
    """Restrict writes to ``workdir`` (+ existing device files) and, with ``readable``, reads
    to ``workdir`` and those paths. Returns (abi, error, rights)."""
    abi = landlock_abi()
    if abi <= 0:
        return 0, _errno_msg("landlock unavailable"), []
    fs = _LL_FS_WRITE | (_LL_REFER if abi >= 2 else 0) | (_LL_TRUNCATE if abi >= 3 else 0)
    read = _LL_READ if readable is not None else 0
    fs |= read
    file_rights = _LL_WRITE_FILE | (_LL_TRUNCATE if abi >= 3 else 0) | (read & _LL_READ_FILE)
    net = _LL_NET_TCP if abi >= 4 else 0
    scope = _LL_SCOPE if abi >= 6 else 0
    if abi >= 6:
        attr = struct.pack("QQQ", fs, net, scope)
    elif abi >= 4:
        attr = struct.pack("QQ", fs, net)
    else:
        attr = struct.pack("Q", fs)
    abuf = ctypes.create_string_buffer(attr, len(attr))
    rfd = _libc.syscall(SYS_LANDLOCK_CREATE_RULESET, abuf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if rfd < 0:
        return abi, _errno_msg("landlock_create_ruleset"), []
    rights = ["write beneath the private directory"]
    try:
        rules = [(workdir, fs)]
        for path in readable or ():
            if os.path.isdir(path):
                rules.append((path, read))
            elif os.path.exists(path):
                rules.append((path, _LL_READ_FILE))
        for pattern in device_globs:
            for path in sorted(glob.glob(pattern)):
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if not os.path.isdir(path) and (st.st_mode & 0o170000) in (0o020000, 0o060000):
                    rules.append((path, file_rights))
        for path, allowed in rules:
            try:
                pfd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                rule = struct.pack("=Qi", allowed, pfd)  # packed landlock_path_beneath_attr
                rbuf = ctypes.create_string_buffer(rule, len(rule))
                if _libc.syscall(SYS_LANDLOCK_ADD_RULE, ctypes.c_int(rfd), ctypes.c_int(1), rbuf, ctypes.c_uint32(0)) != 0:
                    return abi, _errno_msg(f"landlock_add_rule({path})"), []
            finally:
                os.close(pfd)
            if allowed & _LL_WRITE_FILE and path != workdir:
                rights.append(f"write {path}")
        if _libc.syscall(SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(rfd), ctypes.c_uint32(0)) != 0:
            return abi, _errno_msg("landlock_restrict_self"), []
    finally:
        os.close(rfd)
    if readable is not None:
        rights.append(f"read only beneath the private directory and {len(readable)} system and Python paths")
    if net:
        rights.append("no TCP bind/connect")
    if scope:
        rights.append("no abstract unix sockets or signals outside the sandbox")
    return abi, None, rights


# -- seccomp -----------------------------------------------------------------------------------

_RET_ALLOW = 0x7FFF0000
_RET_KILL_PROCESS = 0x80000000
_RET_ERRNO = 0x00050000


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k & 0xFFFFFFFF)


def _ld(offset: int) -> bytes:
    return _insn(0x20, 0, 0, offset)  # BPF_LD | BPF_W | BPF_ABS


def _jeq(k: int, jt: int, jf: int) -> bytes:
    return _insn(0x15, jt, jf, k)  # BPF_JMP | BPF_JEQ | BPF_K


def _ret(k: int) -> bytes:
    return _insn(0x06, 0, 0, k)  # BPF_RET | BPF_K


def _own_process_only(nr: int, pid: int, *, group: bool = False) -> list[bytes]:
    """Allow syscall ``nr`` only when its first argument (a pid or thread-group id, the low 32
    bits the kernel reads) is this process (``pid``) or, with ``group``, 0 or ``-pid`` (its own
    process group: the child leads its session); else EPERM."""
    targets = [pid] + ([0, -pid] if group else [])
    body = [_ld(16)]
    for i, t in enumerate(targets):
        last = i == len(targets) - 1
        body.append(_jeq(t & 0xFFFFFFFF, len(targets) - 1 - i, 1 if last else 0))
    body += [_ret(_RET_ALLOW), _ret(_RET_ERRNO | errno.EPERM)]
    return [_jeq(nr, 0, len(body))] + body


def _seccomp_program(machine: str, pid: int | None = None) -> tuple[bytes, int, list[str]]:
    arch, sys_seccomp, nr = _ARCH[machine]
    pid = os.getpid() if pid is None else pid
    eacces, eperm, enosys = _RET_ERRNO | errno.EACCES, _RET_ERRNO | errno.EPERM, _RET_ERRNO | errno.ENOSYS
    prog = [_ld(4), _jeq(arch, 1, 0), _ret(_RET_KILL_PROCESS), _ld(0)]
    if machine == "x86_64":  # x32 ABI: syscall numbers with bit 30 set
        prog += [_insn(0x35, 0, 1, 0x40000000), _ret(_RET_KILL_PROCESS)]  # BPF_JGE
    denied = {
        "socket": eacces,
        # a descriptor sent through a socket pair and closed holds its (deleted) file's disk
        # space where no /proc entry of the child shows it to the disk watch
        "socketpair": eacces,
        "fork": eperm, "vfork": eperm, "clone3": enosys,
        "io_uring_setup": enosys, "io_uring_enter": enosys, "io_uring_register": enosys,
        "unshare": eperm, "setns": eperm, "mount": eperm, "ptrace": eperm, "bpf": eperm,
        # anonymous files are memory outside RLIMIT_AS (and outside the OOM killer's view)
        "memfd_create": eperm,
        # page faults served by the candidate's own thread: work done when the evaluator
        # first reads an output, after the timed call returned
        "userfaultfd": eperm,
        # reserves blocks past RLIMIT_FSIZE in one call, faster than the disk watch can look
        # (a terabyte in milliseconds, also on the log files); posix_fallocate falls back to
        # writes, which the limit bounds
        "fallocate": _RET_ERRNO | errno.EOPNOTSUPP,
        # reaching other processes (another sandbox child of the same user, the worker):
        # signals by thread id, process descriptors, another process's memory
        "tkill": eperm, "pidfd_open": eperm, "pidfd_send_signal": eperm, "pidfd_getfd": eperm,
        "process_vm_readv": eperm, "process_vm_writev": eperm, "kcmp": eperm,
    }
    names = []
    for name, action in denied.items():
        if name in nr:
            prog += [_jeq(nr[name], 0, 1), _ret(action)]
            names.append(name)
    # Signals and limits only for this process: every sandbox child of a comparison runs as
    # the same user, and kill(-1, ...) or prlimit64(pid, ...) would reach the other one.
    for name, group in (("kill", True), ("tgkill", False), ("rt_sigqueueinfo", False),
                        ("rt_tgsigqueueinfo", False)):
        prog += _own_process_only(nr[name], pid, group=group)
        names.append(f"{name} (other processes)")
    prog += [_jeq(nr["prlimit64"], 0, 5), _ld(16), _jeq(0, 1, 0), _jeq(pid & 0xFFFFFFFF, 0, 1),
             _ret(_RET_ALLOW), _ret(eperm)]
    names.append("prlimit64 (other processes)")
    # clone: allowed only for threads (CLONE_THREAD set in the low word of args[0]).
    prog += [_jeq(nr["clone"], 0, 4), _ld(16), _insn(0x45, 0, 1, CLONE_THREAD), _ret(_RET_ALLOW), _ret(eperm)]
    names.append("clone (processes)")
    # rt_sigaction installing a SIGSEGV or SIGBUS handler (args[0] the signal, args[1] the new
    # action, not NULL): with the output's pages made inaccessible, such a handler would do the
    # work when the evaluator first touches the output, after the timed call returned.
    prog += [
        _jeq(nr["rt_sigaction"], 0, 8),
        _ld(16), _jeq(signal.SIGSEGV, 1, 0), _jeq(signal.SIGBUS, 0, 5),
        _ld(24), _jeq(0, 0, 2), _ld(28), _jeq(0, 1, 0),
        _ret(eperm),
    ]
    names.append("rt_sigaction (SIGSEGV, SIGBUS handlers)")
    prog.append(_ret(_RET_ALLOW))
    return b"".join(prog), sys_seccomp, names


def _seccomp(machine: str) -> tuple[str | None, list[str]]:
    if machine not in _ARCH:
        return f"no seccomp filter for machine {machine!r}", []
    code, sys_seccomp, names = _seccomp_program(machine)
    n = len(code) // 8
    filt = ctypes.create_string_buffer(code, len(code))

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = SockFprog(n, ctypes.addressof(filt))
    SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC = 1, 1
    rc = _libc.syscall(sys_seccomp, ctypes.c_uint(SECCOMP_SET_MODE_FILTER),
                       ctypes.c_uint(SECCOMP_FILTER_FLAG_TSYNC), ctypes.byref(prog))
    if rc != 0:
        return _errno_msg("seccomp") if rc < 0 else f"seccomp: thread {rc} could not be synchronised", []
    return None, names


# -- entry point -------------------------------------------------------------------------------


def apply(policy: dict, workdir: str, readable: list[str] | None = None) -> dict:
    """Confine this process to ``workdir`` as ``policy`` asks; return what was applied.

    Args:
        policy: ``{"uid": int | None, "gid": int | None, "network": bool,
            "landlock": bool, "mount_fallback": bool, "seccomp": bool,
            "device_globs": [str]}`` (:meth:`kernels.sandbox.spawn.SandboxPolicy.to_child`).
        workdir: the private directory (absolute), owned by ``uid`` when dropping.
        readable: with Landlock, the only paths (besides ``workdir``) that may still be read
            (:func:`readable_roots`); None leaves reads to the file permissions.

    Returns:
        The report stored under ``Evidence.fingerprint["sandbox"]``: ``network``
        (``"namespace"``, ``"user-namespace"`` or ``"shared"``), ``user``
        (``{"uid", "gid", "dropped"}``), ``no_new_privs`` (bool), ``filesystem``
        (``"landlock"``, ``"mount-namespace"`` or ``"uid-permissions"``), ``landlock_abi``,
        ``writable`` (what may still be written), ``readable`` (what may still be read, or a
        sentence saying reads are unconfined), ``seccomp`` (list of denied syscalls, empty
        if not applied), ``threads_at_lockdown`` and ``notes`` (why a layer is missing).

    Raises:
        OSError: running as root and the privilege drop to ``uid`` failed.
    """
    notes: list[str] = []
    report: dict = {"network": "shared", "filesystem": "uid-permissions", "landlock_abi": 0,
                    "seccomp": [], "no_new_privs": False, "notes": notes}
    is_root = os.geteuid() == 0
    drop = is_root and policy.get("uid") is not None
    report["threads_at_lockdown"] = _threads()

    # 1. network namespace (privileged path)
    if policy.get("network", True):
        err = _unshare(CLONE_NEWNET)
        if err is None:
            report["network"] = "namespace"
        else:
            notes.append(f"network namespace: {err}")
    # 2. mount fallback: only if Landlock will not do the job (root only)
    use_landlock = policy.get("landlock", True) and landlock_abi() > 0
    if not use_landlock and policy.get("mount_fallback", True):
        if is_root:
            err = _mount_readonly_except(workdir)
            if err is None:
                report["filesystem"] = "mount-namespace"
            else:
                notes.append(f"mount namespace: {err}")
        else:
            notes.append("mount namespace: needs root")
    # 3. privilege drop
    if drop:
        _drop_privileges(int(policy["uid"]), int(policy["gid"]))
    elif is_root:
        notes.append("running as root without a privilege drop (no uid configured)")
    report["user"] = {"uid": os.getuid(), "gid": os.getgid(), "dropped": bool(drop)}
    # 1b. network namespace through a user namespace (unprivileged path)
    if policy.get("network", True) and report["network"] == "shared":
        if _threads() != 1:
            notes.append("user namespace: process is multi-threaded")
        else:
            err = _unshare(CLONE_NEWUSER | CLONE_NEWNET)
            if err is None:
                report["network"] = "user-namespace"
            else:
                notes.append(f"user+network namespace: {err}")
    # 4. no new privileges, not dumpable
    report["no_new_privs"] = _prctl(PR_SET_NO_NEW_PRIVS, 1)
    if not report["no_new_privs"]:
        notes.append(_errno_msg("PR_SET_NO_NEW_PRIVS"))
    _prctl(PR_SET_DUMPABLE, 0)
    # 5. Landlock
    writable = [workdir]
    if use_landlock:
        abi, err, rights = _landlock(workdir, list(policy.get("device_globs", [])), readable)
        report["landlock_abi"] = abi
        if err is None:
            report["filesystem"] = "landlock"
            report["landlock_rights"] = rights
            writable += [r.removeprefix("write ") for r in rights if r.startswith("write /")]
        else:
            notes.append(f"landlock: {err}")
    elif policy.get("landlock", True):
        notes.append("landlock: not supported by this kernel")
    if report["filesystem"] == "uid-permissions":
        writable.append(f"anything uid {os.getuid()} may write (e.g. /tmp, /var/tmp, /dev/shm)")
    elif report["filesystem"] == "mount-namespace":
        writable.append("device files")
    report["writable"] = writable
    confined = report["filesystem"] == "landlock" and readable is not None
    report["readable"] = [workdir, *readable] if confined else f"anything uid {os.getuid()} may read"
    # 6. seccomp
    if policy.get("seccomp", True):
        if report["no_new_privs"]:
            err, names = _seccomp(platform.machine())
            report["seccomp"] = names
            if err:
                notes.append(f"seccomp: {err}")
        else:
            notes.append("seccomp: needs no_new_privs")
    return report
