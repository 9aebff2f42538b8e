/* Names the buffer a faulting access hit, then lets the signal kill the process.
 *
 * Trusted helper of the CPU sandbox child (kernels/guard_pages.py): compiled with the same
 * compiler and flags as candidates, loaded and installed by the child before its lockdown and
 * before the candidate is loaded; the child registers every guarded buffer (its mapping, its
 * data range, its names). On SIGSEGV or SIGBUS the handler writes one line to the file
 * descriptor given at installation (stderr):
 *
 *   int21-guard-fault: write to y[n+1025], n=2048, past the end of output 'y' of validation
 *   case v1 (rows=8,hidden=256): guard page
 *
 * (or "before the start of", "inside", "at 0x... in no guarded buffer"; "read of" where the
 * CPU says the access was a read, "access to" where it does not say), then returns. The
 * handler is installed with SA_RESETHAND, so the kernel restores the default action on entry
 * without a further sigaction call (which the seccomp filter refuses after the lockdown): the
 * faulting instruction runs again and the process dies by the signal; a signal sent by a
 * process (si_code <= 0) is raised again instead, pending until the handler returns.
 *
 * Only async-signal-safe calls (write, raise); numbers are formatted by hand.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#define MAX_BUFFERS 8192

struct guarded {
    uintptr_t start, stop; /* the accessible buffer: sentinels, data, sentinels */
    uintptr_t data, end;   /* the data elements (float32) */
    uintptr_t region;      /* inaccessible bytes before start and from stop on */
    char var[32];         /* the argument's name, e.g. "y" */
    char what[128];       /* e.g. "output 'y' of validation case v1" */
};

static struct guarded buffers[MAX_BUFFERS];
static int count;
static int out_fd = 2;

int int21_guard_register(uintptr_t start, uintptr_t stop, uintptr_t data, uintptr_t end, uintptr_t region,
                         const char *var, const char *what) {
    if (count >= MAX_BUFFERS) return -1;
    struct guarded *g = &buffers[count];
    g->start = start; g->stop = stop; g->data = data; g->end = end; g->region = region;
    strncpy(g->var, var, sizeof g->var - 1);
    strncpy(g->what, what, sizeof g->what - 1);
    count++;
    return 0;
}

struct line { char buf[512]; size_t len; };

static void put(struct line *l, const char *s) {
    while (*s && l->len < sizeof l->buf - 2) l->buf[l->len++] = *s++;
}

static void put_long(struct line *l, long v) {
    char tmp[24]; int i = 0;
    unsigned long u = v < 0 ? 0UL - (unsigned long)v : (unsigned long)v;
    do { tmp[i++] = (char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) tmp[i++] = '-';
    while (i) { char c[2] = {tmp[--i], 0}; put(l, c); }
}

static void put_hex(struct line *l, uintptr_t v) {
    char tmp[2 + 2 * sizeof v + 1]; int i = 0;
    do { tmp[i++] = "0123456789abcdef"[v & 15]; v >>= 4; } while (v);
    put(l, "0x");
    while (i) { char c[2] = {tmp[--i], 0}; put(l, c); }
}

static const char *access_kind(int sig, void *ctx) {
#if defined(__x86_64__)
    if (sig == SIGSEGV) /* page-fault error code, bit 1: the access was a write */
        return (((ucontext_t *)ctx)->uc_mcontext.gregs[REG_ERR] & 2) ? "write to " : "read of ";
#endif
    (void)sig; (void)ctx;
    return "access to ";
}

static void on_fault(int sig, siginfo_t *si, void *ctx) {
    if (si->si_code <= 0) { /* sent by a process, not a fault: nothing to locate */
        raise(sig);
        return;
    }
    uintptr_t a = (uintptr_t)si->si_addr;
    struct line l = {.len = 0};
    put(&l, "int21-guard-fault: ");
    put(&l, access_kind(sig, ctx));
    const struct guarded *g = 0;
    for (int i = 0; i < count; i++)
        if (buffers[i].start - buffers[i].region <= a && a < buffers[i].stop + buffers[i].region) {
            g = &buffers[i];
            break;
        }
    if (!g) {
        put(&l, "address ");
        put_hex(&l, a);
        put(&l, " in no guarded buffer");
    } else {
        long n = (long)((g->end - g->data) / 4);
        long diff = (long)(a - g->data);  /* bytes, wraps to negative before the data */
        long idx = diff >= 0 ? diff / 4 : -((-diff + 3) / 4);
        put(&l, g->var);
        put(&l, "[");
        if (idx >= n) { put(&l, "n+"); put_long(&l, idx - n); }
        else put_long(&l, idx);
        put(&l, "], n=");
        put_long(&l, n);
        put(&l, idx < 0 ? ", before the start of " : idx >= n ? ", past the end of " : ", inside ");
        put(&l, g->what);
        put(&l, ": ");
        /* the sentinels and the data fault only where their pages were made inaccessible */
        if (a < g->start || a >= g->stop) put(&l, "guard page");
        else if (a < g->data || a >= g->end) put(&l, "sentinel page made inaccessible");
        else put(&l, "data page made inaccessible");
    }
    l.buf[l.len++] = '\n';
    ssize_t r = write(out_fd, l.buf, l.len);
    (void)r;
    /* SA_RESETHAND: the default action is back; the access faults again on return */
}

int int21_guard_install(int fd) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    out_fd = fd;
    if (sigaction(SIGSEGV, &sa, 0) != 0) return -1;
    if (sigaction(SIGBUS, &sa, 0) != 0) return -1;
    return 0;
}
