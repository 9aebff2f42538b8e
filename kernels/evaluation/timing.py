"""Benchmark protocol: warm-up, repetitions sized from an estimate, cache flush, raw samples.

Modelled on Triton's ``testing.do_bench`` (warm-up and repetitions given in ms, an estimate
from the warm-up sizes the repetitions, caches flushed before every repetition, raw samples
returned); the evaluator injects :func:`bench` so tests can replace it. Also the OpenMP
environment of the sandbox child (:func:`omp_environment`, with the measurement behind it).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kernels.backends.cpu import CpuBackend
from kernels.evaluation.pruning import verdict

FLUSH_MODES = ("evict", "rewrite", "none")
_NAN_BITS = 0x7FC00000  # float32 quiet NaN, what numpy writes for np.nan
EVICT_SOURCE = Path(__file__).resolve().parents[1] / "native" / "evict.c"


@dataclass(frozen=True)
class BenchSettings:
    """How a candidate is timed.

    Attributes:
        warmup_ms: kernel time (ms) spent on untimed warm-up calls (at least one call).
        rep_ms: target total kernel time (ms) of the timed repetitions.
        min_reps, max_reps: bounds on the number of timed repetitions.
        flush: how caches are flushed before every timed repetition: ``"evict"`` (default:
            the native helper ``kernels/native/evict.c`` evicts exactly the call's own input
            and output buffers from every cache level, :class:`Evictor`; cost proportional
            to the kernel's working set), ``"rewrite"`` (rewrite ``flush_bytes`` of other
            memory, :func:`make_flush`; also the fallback where the helper is unavailable)
            or ``"none"`` (hot caches).
        flush_bytes: total size of the buffers rewritten by the ``"rewrite"`` flush, split
            over one pinned thread per CPU (>= the last-level cache).

    Raises:
        ValueError: negative times or sizes, or ``min_reps > max_reps``.
    """

    warmup_ms: float = 20.0
    rep_ms: float = 150.0
    min_reps: int = 10
    max_reps: int = 200
    flush: str = "evict"
    flush_bytes: int = 64 * 2**20

    def __post_init__(self) -> None:
        for name in ("warmup_ms", "rep_ms"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 60_000:
                raise ValueError(f"BenchSettings: {name} must be a number of ms in [0, 60000], not {v!r}")
        for name, top in (("min_reps", 100_000), ("max_reps", 100_000), ("flush_bytes", 2**34)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= top:
                raise ValueError(f"BenchSettings: {name} must be an integer in [0, {top}], not {v!r}")
        if self.flush not in FLUSH_MODES:
            raise ValueError(f"BenchSettings: flush must be one of {', '.join(FLUSH_MODES)}, not {self.flush!r}")
        if not 1 <= self.min_reps <= self.max_reps:
            raise ValueError(
                f"BenchSettings: need 1 <= min_reps <= max_reps (got {self.min_reps}, {self.max_reps})"
            )

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# OpenMP settings of the sandbox child. Chosen by measurement on the 2-core x86_64 development
# host (AMD EPYC VM, shared with other jobs), template point ROWS_PER_CHUNK=4 UNROLL=2 VEC=8
# ACC_DOUBLE=0 on llama3-8b, default BenchSettings, 3 runs per setting; median of the per-run
# medians / IQRs in microseconds, "+load" with one extra busy process:
#
#   setting                 rows=32 median / IQR     rows=512 median / IQR
#   (libgomp default)        5992 / 16420            10285 / 16105
#   OMP_WAIT_POLICY=ACTIVE  10858 /  9949             7801 / 12268
#   OMP_WAIT_POLICY=PASSIVE     85 /    18              741 /    49
#   GOMP_SPINCOUNT=10000       564 /   242             1203 /   243
#   default + OMP_PROC_BIND     59 /  3805             3186 / 18224
#   PASSIVE + OMP_PROC_BIND   1900 /  3041             2703 /  2850
#   PASSIVE +load               80 /    16              761 /    59
#   (libgomp default) +load   6590 / 13191             5340 / 14378
#
# Spinning threads lose their core to any competing process and then hold up every barrier
# for a scheduler time slice (milliseconds); binding forbids the migration that would avoid
# it. PASSIVE (sleep at once, futex wake-up) costs a few tens of microseconds per parallel
# region but is the only setting whose medians are stable (run-to-run spread <= 34 us; a second
# round of the experiment gave the same picture: PASSIVE 85/15 and 724/49, libgomp default
# 15994/12327 and 10281/20654), so it is the timing default. The host carried a load average
# of 3-8 from other jobs throughout; on a dedicated, quiet host spinning can be faster (one
# lucky run of the libgomp default gave 44 us / 428 us), so KERNELS_OMP_WAIT_POLICY=ACTIVE is
# an option there, recorded in the fingerprint like every setting here. Validation uses ACTIVE instead: spinning threads start parallel
# regions together, which is what makes data races show (a racy kernel passed 3 of 5
# evaluations under PASSIVE, 0 of 5 under ACTIVE).
OMP_TIMING_DEFAULTS: dict[str, str] = {"OMP_WAIT_POLICY": "PASSIVE"}
OMP_VALIDATION_DEFAULTS: dict[str, str] = {"OMP_WAIT_POLICY": "ACTIVE"}
OMP_DEFAULTS = OMP_TIMING_DEFAULTS  # backwards-compatible name
_OMP_KNOBS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES")


def omp_environment(phase: str = "timing") -> dict[str, str]:
    """OpenMP environment variables of the sandbox child (recorded in the fingerprint).

    Args:
        phase: ``"timing"``: :data:`OMP_TIMING_DEFAULTS`, each overridable by
            ``KERNELS_<NAME>`` for NAME in ``OMP_WAIT_POLICY``, ``GOMP_SPINCOUNT``,
            ``OMP_PROC_BIND``, ``OMP_PLACES`` (an empty value removes the setting);
            ``"validation"``: :data:`OMP_VALIDATION_DEFAULTS` (fixed).

    Raises:
        ValueError: unknown phase.
    """
    if phase == "validation":
        return dict(OMP_VALIDATION_DEFAULTS)
    if phase != "timing":
        raise ValueError(f"omp_environment: phase must be 'timing' or 'validation', not {phase!r}")
    env = dict(OMP_TIMING_DEFAULTS)
    for name in _OMP_KNOBS:
        raw = os.environ.get(f"KERNELS_{name}")
        if raw is not None:
            if raw.strip():
                env[name] = raw.strip()
            else:
                env.pop(name, None)
    return env


class _Flusher:
    """Evicts the caches of every CPU: one pinned thread per CPU rewrites its own buffer.

    A single-threaded ``memset`` is not enough: glibc uses non-temporal stores for large
    sizes, which bypass the cache and evict nothing (measured here: a 512 KiB row block stayed
    cache-resident, 40 GB/s instead of 17 GB/s after a real flush), and one thread cannot
    evict another core's private L2, where the OpenMP worker's share of the data stays. So
    each thread adds 1 to every 64-bit word of its buffer (ordinary loads and stores through
    the cache, new values each time so nothing can be skipped). Threads start on first use,
    i.e. in the sandbox child after the lockdown.
    """

    def __init__(self, nbytes: int, cpus: list[int]) -> None:
        self.cpus = cpus
        per = max(8, (nbytes // max(1, len(cpus))) // 8 * 8)
        self.bufs = [np.zeros(per // 8, dtype=np.uint64) for _ in cpus]
        self.threads: list = []

    def _start(self) -> None:
        self.go = [threading.Event() for _ in self.cpus]
        self.done = [threading.Event() for _ in self.cpus]
        for i, cpu in enumerate(self.cpus):
            t = threading.Thread(target=self._worker, args=(i, cpu), daemon=True, name=f"flush-{cpu}")
            t.start()
            self.threads.append(t)

    def _worker(self, i: int, cpu: int) -> None:
        try:
            os.sched_setaffinity(0, {cpu})  # 0: this thread (Linux)
        except (AttributeError, OSError):
            pass
        buf = self.bufs[i]
        while True:
            self.go[i].wait()
            self.go[i].clear()
            np.add(buf, 1, out=buf)
            self.done[i].set()

    def __call__(self) -> None:
        if len(self.cpus) == 1:
            np.add(self.bufs[0], 1, out=self.bufs[0])
            return
        if not self.threads:
            self._start()
        for ev in self.go:
            ev.set()
        for ev in self.done:
            ev.wait()
            ev.clear()


def evict_library() -> Path:
    """Path of :data:`EVICT_SOURCE` compiled for this host, from the CPU backend's compile cache.

    Raises:
        kernels.backends.cpu.CompileError: the compiler rejected it or is missing.
    """
    return Path(CpuBackend().compile(EVICT_SOURCE.read_text(), "").path)


class Evictor:
    """Evicts numpy buffers from every level of the data caches (:data:`EVICT_SOURCE`).

    The default flush of the CPU timing loop. Measured on the 2-core x86-64 development host
    (Xeon, 4 MiB L2 per core, 260 MiB shared L3; medians of 20): evicting 16 MiB takes
    0.79 ms, and a sum over those 16 MiB then takes 2.33 ms against 0.93 ms hot, i.e. the data
    really comes from memory; rewriting a 64 MiB buffer per repetition cost about 13 ms and,
    with an L3 that large, did not even evict everything. On ``rmsnorm`` llama3-8b the
    evaluation took 2.2 s instead of 5-10 s, with cold latencies (rows=512: 2.17 ms evict,
    1.92 ms rewrite, 0.95-1.12 ms hot).

    Args:
        library: path of the compiled helper (:func:`evict_library`).

    Raises:
        OSError: the library cannot be loaded or lacks the helper's symbols.
        RuntimeError: the helper has no eviction instruction for this architecture.
    """

    def __init__(self, library: str | os.PathLike) -> None:
        import ctypes  # noqa: PLC0415  (only the CPU timing child needs it)

        self._ct = ctypes
        lib = ctypes.CDLL(str(library))
        try:
            self._evict = lib.int21_evict
            lib.int21_evict_method.restype = ctypes.c_char_p
            supported = lib.int21_evict_supported()
            self.method = lib.int21_evict_method().decode()
        except AttributeError as exc:
            raise OSError(f"{library} is not the cache-eviction helper: {exc}") from None
        if not supported:
            raise RuntimeError("the cache-eviction helper has no eviction instruction for this CPU")
        self._evict.restype = None
        self._fill = getattr(lib, "int21_fill_nan_evict", None)  # absent from an older helper
        if self._fill is not None:
            self._fill.restype = None

    def plan(self, arrays: list[np.ndarray], fill: list[np.ndarray] = ()) -> Callable[[], None]:
        """A function that evicts ``arrays`` (the same memory every time it is called).

        ``fill``: float32 arrays (views into ``arrays``, e.g. the outputs without their guard
        regions) that the same call first sets to NaN with streaming stores, which write
        memory without reading the lines into the cache first: the outputs are NaN-filled and
        cold for the price of writing them once (a ``numpy`` fill followed by an eviction reads
        every line, dirties it and writes it back). The returned function's ``fills`` attribute
        is True when it does (the helper has the fill entry point), else ``fill`` is ignored.

        Raises:
            ValueError: a ``fill`` array is not contiguous writeable float32 memory inside
                one of ``arrays``.
        """
        ct = self._ct
        arrays, fill = list(arrays), list(fill)
        n = len(arrays)
        ptrs = (ct.c_size_t * n)(*[a.ctypes.data for a in arrays])
        sizes = (ct.c_size_t * n)(*[a.nbytes for a in arrays])
        keep = arrays + fill
        for a in fill:
            if a.dtype != np.float32 or not a.flags.c_contiguous or not a.flags.writeable:
                raise ValueError("Evictor.plan: fill arrays must be contiguous, writeable float32")
            start = a.ctypes.data
            if a.nbytes and not any(p <= start and start + a.nbytes <= p + s for p, s in zip(ptrs, sizes)):
                raise ValueError("Evictor.plan: a fill array must lie inside one of the evicted arrays")
        fill_fn = self._fill if fill else None
        if fill_fn is not None:
            m = len(fill)
            fptrs = (ct.c_size_t * m)(*[a.ctypes.data for a in fill])
            fsizes = (ct.c_size_t * m)(*[a.nbytes for a in fill])
        evict = self._evict

        def run() -> None:
            if fill_fn is not None:
                fill_fn(ptrs, sizes, n, fptrs, fsizes, m, _NAN_BITS)
            else:
                evict(ptrs, sizes, n)

        run.arrays = keep  # the pointers stay valid as long as the plan lives
        run.fills = fill_fn is not None
        return run


def team_starter(library: str | os.PathLike | None) -> Callable[[], None] | None:
    """The helper's ``int21_omp_start`` (:data:`EVICT_SOURCE`): starts the OpenMP thread team
    of the calling thread, so that the first parallel region of the candidate finds it
    running; None without a library or where the helper lacks the entry point (an older
    build) or cannot be loaded.

    The team's threads are created on the first call: the sandbox child calls it after its
    lockdown (a thread started before would not be confined).
    """
    if not library:
        return None
    import ctypes  # noqa: PLC0415  (only the CPU timing child needs it)

    try:
        start = ctypes.CDLL(str(library)).int21_omp_start
    except (OSError, AttributeError):
        return None
    start.restype = None
    start.argtypes = []
    return start


def make_flush(nbytes: int, *, per_cpu: bool = True) -> Callable[[], None] | None:
    """A function that evicts the caches by rewriting ``nbytes`` in total, or None for 0.

    Args:
        nbytes: total buffer size (>= the last-level cache; split evenly over the CPUs).
        per_cpu: spread the buffer over one pinned thread per CPU this process may run on
            (evicts every private cache); False: one buffer in the calling thread.
    """
    if nbytes <= 0:
        return None
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = list(range(os.cpu_count() or 1))
    return _Flusher(nbytes, cpus if per_cpu else cpus[:1])


@dataclass(frozen=True)
class BenchRun:
    """What one :func:`bench_run` measured.

    Attributes:
        samples_ms: the timed calls (ms), one per call, in call order.
        first_call_ms: the first warm-up call (ms): the first call of ``fn`` in the loop,
            caches as ``prepare`` left them (what the steady state's warm-up discards).
        warmup_calls: how many untimed warm-up calls ran (the first one included).
        first_call_cpu_ms: CPU time (ms) of the calling thread during that first call, or
            None where not measured: work the call did itself, without the time it waited
            for a CPU (a preemption on a loaded host) or slept (e.g. at a passive OpenMP
            barrier).
        warm_ms: every warm-up call (ms), the first one included, in call order.
        pruned: why the timing stopped early (:func:`kernels.evaluation.pruning.verdict`), or None
            when it ran in full.
    """

    samples_ms: list[float]
    first_call_ms: float
    warmup_calls: int
    first_call_cpu_ms: float | None = None
    warm_ms: tuple[float, ...] = ()
    pruned: str | None = None


def bench_run(
    fn: Callable[[], object],
    settings: BenchSettings,
    *,
    prepare: Callable[[], None] | None = None,
    flush: Callable[[], None] | None = None,
    timed_prepare: Callable[[], None] | None = None,
    prune_ms: float | None = None,
) -> BenchRun:
    """Time ``fn``: the raw samples in ms (one per timed call) and its first call apart.

    ``prepare`` runs untimed before every call (e.g. NaN-fill outputs, rotate inputs);
    ``flush`` runs untimed before every timed call only; ``timed_prepare``, if given, runs
    instead of ``prepare`` before timed calls (e.g. when ``flush`` NaN-fills the outputs).
    Warm-up calls until ``warmup_ms`` of kernel time (at least 3, at most ``max_reps`` calls)
    estimate the steady-state per-call time from their second half, which sizes the timed
    repetitions to about ``rep_ms`` within ``[min_reps, max_reps]``. The first warm-up call
    is reported as :attr:`BenchRun.first_call_ms` (and its thread CPU time as
    :attr:`BenchRun.first_call_cpu_ms`): in a fresh process it carries whatever the
    candidate sets up on first use (tables, allocations), which the steady state hides.

    With ``prune_ms`` (``k`` times the incumbent's median on this shape, ms), the loop stops
    after the first call for which :func:`kernels.evaluation.pruning.verdict` holds (warm-up calls from
    the second, timed calls from the :data:`~kernels.evaluation.pruning.PRUNE_AFTER_CALLS`-th), and
    :attr:`BenchRun.pruned` says why.
    """
    clock = time.perf_counter_ns
    if prepare is not None:
        prepare()
    cpu0 = time.thread_time_ns()  # the first call only: one more clock read on each side
    t0 = clock()
    fn()
    warm: list[int] = [clock() - t0]
    first_cpu_ms = (time.thread_time_ns() - cpu0) / 1e6
    spent_ns = warm[0]
    # At least 3 warm-up calls: the first ones pay for thread-team start-up and page faults.
    while len(warm) < 3 or (spent_ns < settings.warmup_ms * 1e6 and len(warm) < settings.max_reps):
        if prepare is not None:
            prepare()
        t0 = clock()
        fn()
        warm.append(clock() - t0)
        spent_ns += warm[-1]
        if prune_ms is not None and (why := verdict([w / 1e6 for w in warm], (), prune_ms)):
            return BenchRun([], warm[0] / 1e6, len(warm), first_cpu_ms, tuple(w / 1e6 for w in warm), why)
    est_ms = max(min(warm[len(warm) // 2 :]) / 1e6, 1e-6)  # later calls: steady state
    reps = min(max(math.ceil(settings.rep_ms / est_ms), settings.min_reps), settings.max_reps)
    samples = []
    before = timed_prepare if timed_prepare is not None else prepare
    for _ in range(reps):
        if before is not None:
            before()
        if flush is not None:
            flush()
        t0 = clock()
        fn()
        samples.append((clock() - t0) / 1e6)
        if prune_ms is not None and (why := verdict((), samples, prune_ms)):
            return BenchRun(samples, warm[0] / 1e6, len(warm), first_cpu_ms, tuple(w / 1e6 for w in warm), why)
    return BenchRun(samples, warm[0] / 1e6, len(warm), first_cpu_ms, tuple(w / 1e6 for w in warm))


def bench(
    fn: Callable[[], object],
    settings: BenchSettings,
    *,
    prepare: Callable[[], None] | None = None,
    flush: Callable[[], None] | None = None,
    timed_prepare: Callable[[], None] | None = None,
) -> list[float]:
    """:func:`bench_run`'s timed samples alone (ms, one per timed call)."""
    return bench_run(fn, settings, prepare=prepare, flush=flush, timed_prepare=timed_prepare).samples_ms
