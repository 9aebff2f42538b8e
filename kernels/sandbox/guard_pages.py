"""Guarded buffers: their layout, their allocation against inaccessible pages, the fault report.

Every float32 array a CPU candidate sees lies in its own anonymous mapping (``mmap(2)``)::

    [ PROT_NONE region | head sentinels | data (n) | tail sentinels | PROT_NONE region ]
      region bytes       >= sentinels     page-aligned  >= sentinels    region bytes

- the data starts on a page boundary (so 64-byte aligned too);
- the sentinel zones hold the bit pattern :data:`GUARD_BITS`: ``head`` elements fill whole
  pages (1024 on 4 KiB pages), ``tail`` elements fill from the end of the data to the next
  page boundary at least ``sentinels`` elements on (1024 to 2047 on 4 KiB pages): small
  overruns land there and the parent counts the changed sentinels (``invalid``);
- the inaccessible regions (:data:`GUARD_REGION_BYTES` each side) sit directly against the
  sentinels: any access further out (up to that many bytes) faults at once, and the native
  helper ``kernels/native/guard_fault.c`` (a ``SIGSEGV``/``SIGBUS`` handler installed before
  the candidate is loaded) writes one line naming the buffer and the element to stderr, then
  lets the signal kill the process (``runtime_error``; :func:`fault_report` reads the line).

The regions count toward ``RLIMIT_AS`` (address space, not memory: nothing backs them):
``2 * GUARD_REGION_BYTES`` (2 MiB) per buffer, e.g. 300 MiB for 150 buffers (22 validation
cases of a workload with 7 arrays).

:class:`GuardLayout` with ``page=0`` is the sentinel-only layout ``[sentinels | n |
sentinels]`` (no inaccessible pages), as the CUDA child lays out its device buffers.
"""

from __future__ import annotations

import ctypes
import mmap
import weakref
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GUARD_ELEMS = 1024  # at least 4 KiB of sentinels before and after every array the kernel sees
GUARD_BITS = np.uint32(0xA5A5A5A5)
GUARD_REGION_BYTES = 2**20  # inaccessible bytes each side: overruns up to 262,144 elements fault
FAULT_SOURCE = Path(__file__).resolve().parents[1] / "native" / "guard_fault.c"
FAULT_MARKER = "int21-guard-fault: "  # the helper's line on stderr
_HUGE_BYTES = 4 * 2**20  # from this size numpy's allocator asks for transparent huge pages too
_MADV_HUGEPAGE = 14
_PROT_NONE = 0  # mmap has PROT_READ and PROT_WRITE only


@dataclass(frozen=True)
class GuardLayout:
    """Where the sentinels and the inaccessible pages of a guarded buffer lie.

    Attributes:
        sentinels: the fewest sentinel elements (float32) before and after the data.
        page: page size in bytes (``mmap.PAGESIZE`` of the host the child runs on); 0: no
            inaccessible pages, exactly ``sentinels`` elements each side.
        region: inaccessible bytes each side (a multiple of ``page``; 0 with ``page=0``).

    Raises:
        ValueError: ``sentinels`` < 1, ``page`` not 0 or a power of two of at least 4
            bytes, or ``region`` not a non-negative multiple of ``page``.
    """

    sentinels: int = GUARD_ELEMS
    page: int = 0
    region: int = 0

    def __post_init__(self) -> None:
        ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (self.sentinels, self.page, self.region))
        if not ints or self.sentinels < 1:
            raise ValueError(f"GuardLayout: sentinels must be a positive integer, page and region integers "
                             f"(got {self.sentinels!r}, {self.page!r}, {self.region!r})")
        if self.page and (self.page < 4 or self.page & (self.page - 1)):
            raise ValueError(f"GuardLayout: page must be 0 or a power of two >= 4 bytes, not {self.page}")
        if self.region < 0 or (self.region and (not self.page or self.region % self.page)):
            raise ValueError(f"GuardLayout: region ({self.region} bytes) must be a multiple of the page ({self.page})")

    @classmethod
    def for_host(cls, sentinels: int = GUARD_ELEMS, region: int = GUARD_REGION_BYTES) -> GuardLayout:
        """Inaccessible pages on this host's page size (``region`` rounded up to whole pages)."""
        page = mmap.PAGESIZE
        return cls(sentinels, page, -(-region // page) * page)

    @classmethod
    def from_dict(cls, d: dict) -> GuardLayout:
        """From :meth:`to_dict`. Raises ValueError (bad values) or KeyError (missing keys)."""
        return cls(d["sentinels"], d["page"], d["region"])

    def to_dict(self) -> dict:
        return {"sentinels": self.sentinels, "page": self.page, "region": self.region}

    @property
    def head(self) -> int:
        """Sentinel elements before the data: whole pages, at least ``sentinels``."""
        if not self.page:
            return self.sentinels
        return -(-self.sentinels * 4 // self.page) * self.page // 4

    def tail(self, n: int) -> int:
        """Sentinel elements after ``n`` data elements: up to a page boundary, at least
        ``sentinels``."""
        if not self.page:
            return self.sentinels
        end = (n + self.sentinels) * 4  # bytes from the data start
        return (-(-end // self.page) * self.page) // 4 - n

    def size(self, n: int) -> int:
        """Elements of the accessible buffer ``[head | n | tail]`` (what the child saves)."""
        return self.head + n + self.tail(n)


def _libc() -> ctypes.CDLL:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    for name in ("mprotect", "munmap", "madvise"):
        fn = getattr(libc, name)
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t] + ([ctypes.c_int] if name != "munmap" else [])
    return libc


_LIBC = _libc()


def allocate(n: int, layout: GuardLayout) -> np.ndarray:
    """A float32 buffer ``[head | n | tail]`` (sentinels set, data uninitialised) in a mapping
    of its own with ``layout.region`` inaccessible bytes directly before and after it
    (unmapped when the array is freed); with ``layout.page == 0`` plain numpy memory.

    Raises:
        OSError: ``mmap``/``mprotect`` failed (e.g. ``ENOMEM`` under ``RLIMIT_AS``), or the
            layout's page is not this host's.
    """
    size = layout.size(n)
    if not layout.page:
        buf = np.empty(size, dtype=np.float32)
    else:
        if layout.page != mmap.PAGESIZE:
            raise OSError(f"guarded buffer: layout page {layout.page} is not this host's page size {mmap.PAGESIZE}")
        body = size * 4  # whole pages by construction of head and tail
        total = body + 2 * layout.region
        base = _LIBC.mmap(None, total, _PROT_NONE, mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if base is None or base == ctypes.c_void_p(-1).value:
            raise OSError(ctypes.get_errno(), f"guarded buffer: mmap of {total} bytes failed")
        weakref.finalize(holder := (ctypes.c_char * body).from_address(base + layout.region),
                         _LIBC.munmap, base, total)
        if _LIBC.mprotect(base + layout.region, body, mmap.PROT_READ | mmap.PROT_WRITE) != 0:
            raise OSError(ctypes.get_errno(), f"guarded buffer: mprotect of {body} bytes failed")
        if body >= _HUGE_BYTES:  # as numpy does for its own large arrays (fewer TLB misses)
            _LIBC.madvise(base + layout.region, body, _MADV_HUGEPAGE)
        buf = np.frombuffer(holder, dtype=np.float32)  # keeps ``holder`` (and the mapping) alive
    head = layout.head
    buf[:head].view(np.uint32)[:] = GUARD_BITS
    buf[head + n :].view(np.uint32)[:] = GUARD_BITS
    return buf


class FaultReporter:
    """The native fault helper (:data:`FAULT_SOURCE`) loaded in the sandbox child: a
    ``SIGSEGV``/``SIGBUS`` handler that names the registered buffer the faulting address
    falls in (or its guard region) on one stderr line, then lets the signal kill the process.

    Install it before the lockdown (the seccomp filter refuses such handlers afterwards)
    and before the candidate is loaded; register every buffer as it is made.

    Args:
        library: path of the compiled helper (the evaluator compiles :data:`FAULT_SOURCE`
            like a candidate, from the CPU backend's compile cache).

    Raises:
        OSError: the library cannot be loaded, lacks the helper's symbols, or the handler
            could not be installed.
    """

    def __init__(self, library: str) -> None:
        lib = ctypes.CDLL(str(library))
        try:
            self._register = lib.int21_guard_register
            install = lib.int21_guard_install
        except AttributeError as exc:
            raise OSError(f"{library} is not the guard-fault helper: {exc}") from None
        self._register.restype = ctypes.c_int
        self._register.argtypes = [ctypes.c_size_t] * 5 + [ctypes.c_char_p, ctypes.c_char_p]
        install.restype = ctypes.c_int
        install.argtypes = [ctypes.c_int]
        self._lib = lib
        # stderr itself: a descriptor of its own would be one more the candidate inherits
        # (a candidate that closes fd 2 loses the line, not the verdict)
        if install(2) != 0:
            raise OSError("guard-fault helper: sigaction failed")

    def register(self, buf: np.ndarray, n: int, layout: GuardLayout, var: str, what: str) -> None:
        """Name ``buf`` (``[head | n | tail]`` of ``layout``) for the fault line: ``var`` is the
        argument's name (``y``), ``what`` the buffer in words (``output 'y' of validation case
        v0``). A buffer past the helper's capacity stays unnamed (its faults still kill)."""
        start = buf.ctypes.data
        data = start + 4 * layout.head
        self._register(start, start + buf.nbytes, data, data + 4 * n, layout.region,
                       var.encode()[:31], what.encode()[:127])


def fault_report(stderr: str) -> str | None:
    """What the fault helper wrote (its last line in ``stderr``, at most 300 characters, no
    control characters), or None. The child's own words, like its other reports: a candidate
    can print such a line too, so it explains a death by signal, never decides a verdict."""
    found = None
    for line in stderr.splitlines():
        at = line.find(FAULT_MARKER)
        if at >= 0:
            found = line[at + len(FAULT_MARKER) :]
    if found is None:
        return None
    return "".join(c for c in found if c.isprintable())[:300].strip() or None
