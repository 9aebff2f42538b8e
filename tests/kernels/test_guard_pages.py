"""Guard pages around every buffer of the CPU child: the layout, the mapping, the fault line,
and stray writes at every distance from every workload's first output.

A stray store a few elements out lands in the sentinels (``invalid``, counted by the parent);
one further out than the sentinels reach hits an inaccessible page and kills the child at once
(``runtime_error``, the reason naming the buffer and the element). Never ``ok``.
"""

from __future__ import annotations

import math
import mmap
import platform
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import kernels
from kernels import BenchSettings, Outcome, evaluate, get_workload, load_template
from kernels.sandbox.guard_pages import GUARD_BITS, GUARD_ELEMS, GuardLayout, allocate, fault_report
from kernels.templates import default_space

pytestmark = pytest.mark.timeout(180)

PROJECT = str(__import__("pathlib").Path(__file__).resolve().parents[2])

# One evaluation per case, a few timed calls at most (a stray write is decided by validation).
TINY_BENCH = BenchSettings(warmup_ms=1, rep_ms=2, min_reps=1, max_reps=3)
OFFSETS = (1, 1025, 5000, 100_000, -1, -3000)  # elements: y[n + off] for off >= 0, y[off] below


# -- the layout and the mapping ----------------------------------------------------------------


def test_the_layout_puts_the_data_on_a_page_and_fills_the_pages_with_sentinels():
    lay = GuardLayout(1024, 4096, 2**20)
    assert lay.head == 1024
    for n, tail in ((0, 1024), (1, 2047), (256, 1792), (1024, 1024), (1025, 2047), (2048, 1024), (1813, 1259)):
        assert lay.tail(n) == tail, n
        assert (lay.head + n + lay.tail(n)) * 4 % 4096 == 0 and lay.tail(n) >= 1024
    big = GuardLayout(1024, 65536, 2**20)  # 64 KiB pages: whole pages of sentinels before the data
    assert big.head == 16384 and big.size(5) * 4 % 65536 == 0 and big.tail(5) >= 1024
    plain = GuardLayout(8)
    assert (plain.head, plain.tail(100), plain.size(100)) == (8, 8, 116)
    assert GuardLayout.from_dict(lay.to_dict()) == lay
    for bad in ({"sentinels": 0}, {"page": 3000}, {"page": 4096, "region": 100}, {"region": 4096},
                {"sentinels": True}, {"page": 4096, "region": -4096}):
        with pytest.raises(ValueError):
            GuardLayout(**bad)


def _maps() -> list[tuple[int, int, str]]:
    out = []
    with open("/proc/self/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            lo, hi = (int(v, 16) for v in span.split("-"))
            out.append((lo, hi, perms))
    return out


def _perms(addr: int) -> str | None:
    return next((p for lo, hi, p in _maps() if lo <= addr < hi), None)


def test_a_guarded_buffer_lies_between_inaccessible_pages():
    lay = GuardLayout.for_host()
    n = 3000
    buf = allocate(n, lay)
    start, data = buf.ctypes.data, buf.ctypes.data + 4 * lay.head
    assert buf.dtype == np.float32 and buf.size == lay.size(n) and buf.flags.writeable
    assert start % mmap.PAGESIZE == 0 and data % mmap.PAGESIZE == 0 and (start + buf.nbytes) % mmap.PAGESIZE == 0
    bits = buf.view(np.uint32)
    assert (bits[: lay.head] == GUARD_BITS).all() and (bits[lay.head + n :] == GUARD_BITS).all()
    assert _perms(start).startswith("rw") and _perms(start + buf.nbytes - 1).startswith("rw")
    for addr in (start - 1, start - lay.region, start + buf.nbytes, start + buf.nbytes + lay.region - 1):
        assert _perms(addr) == "---p", hex(addr)


def test_a_store_past_the_sentinels_dies_naming_the_buffer():
    """The helper in a process of its own: the stray store kills it by SIGSEGV, after one line."""
    code = textwrap.dedent(f"""
        import ctypes, sys
        sys.path.insert(0, {PROJECT!r})
        from kernels.backends.cpu import CpuBackend
        from kernels.sandbox.guard_pages import FAULT_SOURCE, FaultReporter, GuardLayout, allocate
        lay = GuardLayout.for_host()
        rep = FaultReporter(str(CpuBackend().compile(FAULT_SOURCE.read_text(), "").path))
        n = 2048
        buf = allocate(n, lay)
        rep.register(buf, n, lay, "y", "output 'y' of a test")
        data = buf.ctypes.data + 4 * lay.head
        for i in (n, n + lay.tail(n) - 1, -1, -lay.head):  # the sentinels: no fault
            ctypes.c_float.from_address(data + 4 * i).value = 1.0
        print(ctypes.c_float.from_address(data - 4 * 3000).value)  # a read before the sentinels
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == -11, proc.stderr
    line = fault_report(proc.stderr)
    kind = "read of" if platform.machine() == "x86_64" else "access to"
    assert line == f"{kind} y[-3000], n=2048, before the start of output 'y' of a test: guard page", proc.stderr


def test_the_fault_line_is_the_last_one_bounded_and_printable():
    assert fault_report("") is None and fault_report("no marker\n") is None
    text = "int21-guard-fault: first\nnoise int21-guard-fault: write to y[n+1]\x1b[31m\nmore\n"
    assert fault_report(text) == "write to y[n+1][31m"
    assert len(fault_report("int21-guard-fault: " + "x" * 5000)) == 300


# -- stray writes from real kernels ------------------------------------------------------------


def _stray_writer(name: str, offset: int) -> tuple[str, dict]:
    """``name``'s template at a fixed point, its entry point wrapped: the real call, then one
    store of 1.0 at ``y[n + offset]`` (``offset >= 0``) or ``y[offset]`` into the first output
    ``y`` of ``n`` elements (looked up from the call's int arguments among the test-small
    shapes and their odd validation shapes)."""
    wl = get_workload(name)
    params = default_space(name).sample(np.random.default_rng(0), 1)[0]
    ints = [a.name for a in wl.args if a.kind == "int"]
    first_out = wl.outputs[0]
    shapes = [*wl.shapes("test-small"), *wl.validation_shapes.get("test-small", ())]
    table = "\n".join(
        f"    if ({' && '.join(f'{a} == {int(s[a])}' for a in ints)}) return {math.prod(wl.output_shapes(s)[first_out])};"
        for s in shapes)
    sig = wl.c_signature.strip().rstrip(";")
    call = ", ".join(a.name for a in wl.args)
    real = f"int21_real_{wl.entry_point}"
    index = f"n + ({offset})" if offset >= 0 else f"({offset})"
    source = (f"#define {wl.entry_point} {real}\n{load_template(name)}\n#undef {wl.entry_point}\n"
              f"static long int21_first_output_size({', '.join(f'int {a}' for a in ints)}) {{\n{table}\n"
              f"    return -1;\n}}\n"
              f"{sig}\n{{\n    {real}({call});\n"
              f"    long n = int21_first_output_size({', '.join(ints)});\n"
              f"    if (n >= 0) ((volatile float *){first_out})[{index}] = 1.0f;\n}}\n")
    return source, params


def _faults_somewhere(name: str, offset: int) -> bool:
    """Whether the store misses the sentinels of the first output on some validated shape."""
    wl = get_workload(name)
    lay = GuardLayout.for_host()
    for s in [*wl.shapes("test-small"), *wl.validation_shapes.get("test-small", ())]:
        n = math.prod(wl.output_shapes(s)[wl.outputs[0]])
        if not (-lay.head <= (n + offset if offset >= 0 else offset) < n + lay.tail(n)):
            return True
    return False


CASES = [(w, off) for w in kernels.WORKLOADS for off in OFFSETS]


@pytest.mark.parametrize("workload, offset", CASES, ids=[f"{w}{off:+d}" for w, off in CASES])
def test_a_stray_write_near_an_output_is_never_ok(workload, offset):
    source, params = _stray_writer(workload, offset)
    ev = evaluate(workload, source, params, shape_set="test-small", bench=TINY_BENCH, seed=5, timeout_s=60)
    out = get_workload(workload).outputs[0]
    if offset in (5000, 100_000, -3000):  # beyond every sentinel zone: the guard pages
        assert _faults_somewhere(workload, offset)
    if offset in (1, -1):  # inside every sentinel zone
        assert not _faults_somewhere(workload, offset)
    if _faults_somewhere(workload, offset):
        assert ev.status == Outcome.runtime_error, ev.log[-3000:]
        reason = ev.log.split("== verdict ==")[-1]
        where = "past the end of" if offset >= 0 else "before the start of"
        assert re.search(rf"child killed by SIGSEGV: write to {re.escape(out)}\[[-+n0-9]+\], n=\d+, {where} "
                         rf"output '{re.escape(out)}' of validation case v\d+ \([^)]*\): guard page", reason), reason
    else:
        assert ev.status == Outcome.invalid, ev.log[-3000:]
        where = "past the end of" if offset >= 0 else "before the start of"
        assert f"wrote {where} output '{out}'" in ev.log


RMS = r"""
#include <math.h>
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)
{
    for (int r = 0; r < rows; ++r) {
        double s = 0.0;
        for (int i = 0; i < hidden; ++i) s += (double)x[(long)r * hidden + i] * x[(long)r * hidden + i];
        float inv = (float)(1.0 / sqrt(s / hidden + eps));
        for (int i = 0; i < hidden; ++i) y[(long)r * hidden + i] = x[(long)r * hidden + i] * inv * w[i];
    }
    STRAY;
}
"""


@pytest.mark.parametrize("stray, expected", [
    ("((float *)w)[hidden + 5000] = 1.0f", r"write to w\[n\+5000\], n=\d+, past the end of input 'w' of validation case v0"),
    ("((volatile float *)x)[-3000] += 1.0f", r"(read of|access to) x\[-3000\], n=\d+, before the start of input 'x'"),
    ("*(volatile int *)16 = 1", r"write to address 0x10 in no guarded buffer|access to address 0x10 in no guarded buffer"),
], ids=["past an input", "reads before an input", "null page"])
def test_the_fault_reason_names_inputs_reads_and_stray_pointers(stray, expected):
    ev = evaluate("rmsnorm", RMS.replace("STRAY", stray), {}, shape_set="test-small", bench=TINY_BENCH, seed=5,
                  timeout_s=60)
    assert ev.status == Outcome.runtime_error, ev.log[-3000:]
    if platform.machine() != "x86_64":
        expected = expected.replace("write to", "access to")
    assert re.search(expected, ev.log.split("== verdict ==")[-1]), ev.log[-3000:]


def test_the_sentinel_layout_stays_for_callers_that_give_an_int():
    from kernels.sandbox.child import guarded

    buf = guarded(5, 8, np.arange(5, dtype=np.float32))
    assert buf.size == 21 and np.array_equal(buf[8:13], np.arange(5))
    assert (buf[:8].view(np.uint32) == GUARD_BITS).all() and (buf[13:].view(np.uint32) == GUARD_BITS).all()
    assert GUARD_ELEMS == 1024
