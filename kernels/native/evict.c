/* Evict byte ranges from every level of the CPU's data caches (all cores: the instructions
 * act on the coherence domain), so that the next kernel call reads its inputs from memory.
 *
 * Trusted helper of the CPU timing loop (kernels/timing.py): compiled with the same compiler
 * and flags as candidates, loaded by the sandbox child before its lockdown. Cost is
 * proportional to the bytes evicted, unlike rewriting a buffer larger than the last-level
 * cache before every repetition.
 *
 * x86-64: CLFLUSHOPT where the target has it (-march=native), else CLFLUSH (SSE2, every
 * x86-64), then MFENCE so every eviction completes before the timed call.
 * AArch64: DC CIVAC (clean and invalidate to the point of coherency), then DSB ISH.
 * Lines are stepped at 64 bytes, the smallest data-cache line of both; on a CPU with larger
 * lines some instructions hit a line already evicted, which is harmless.
 *
 * Also int21_omp_start: the timing child's start of the OpenMP thread team (see there).
 */
#include <stddef.h>
#include <stdint.h>
#if defined(__x86_64__)
#include <emmintrin.h> /* SSE2: every x86-64 */
#endif

#define LINE 64

int int21_evict_supported(void) {
#if defined(__x86_64__) || defined(__aarch64__)
    return 1;
#else
    return 0;
#endif
}

const char *int21_evict_method(void) {
#if defined(__x86_64__) && defined(__CLFLUSHOPT__)
    return "clflushopt";
#elif defined(__x86_64__)
    return "clflush";
#elif defined(__aarch64__)
    return "dc civac";
#else
    return "none";
#endif
}

/* Evict [p, p + n) for each of the `count` ranges. */
void int21_evict(const uintptr_t *ptrs, const size_t *sizes, int count) {
    for (int r = 0; r < count; r++) {
        uintptr_t a = ptrs[r] & ~(uintptr_t)(LINE - 1);
        uintptr_t end = ptrs[r] + sizes[r];
        for (; a < end; a += LINE) {
#if defined(__x86_64__) && defined(__CLFLUSHOPT__)
            __builtin_ia32_clflushopt((const void *)a);
#elif defined(__x86_64__)
            __builtin_ia32_clflush((const void *)a);
#elif defined(__aarch64__)
            __asm__ volatile("dc civac, %0" : : "r"(a) : "memory");
#endif
        }
    }
#if defined(__x86_64__)
    __builtin_ia32_mfence();
#elif defined(__aarch64__)
    __asm__ volatile("dsb ish" : : : "memory");
#endif
}

/* NaN-fill then evict: set each of the `fcount` float32 ranges [fp, fp + fsize) to the bit
 * pattern `bits` with streaming stores (x86-64: MOVNTDQ, 16 bytes at a time, MOVNTI for an
 * unaligned head and tail; no read-for-ownership: the lines are written to memory without
 * first being read into the cache; other targets: plain stores),
 * fence, then evict the `count` ranges as int21_evict does (the filled ranges lie inside them,
 * so any line a streaming store left cached, or a plain store dirtied, is written back and
 * evicted too). Used by the timing loop before every timed call: NaN outputs and cold caches
 * for about the cost of writing the outputs once. Measured on the 2-core AMD EPYC development
 * host, 8 MiB of outputs plus 8 MiB of inputs (median of 60): evict alone 0.47 ms, fill and
 * evict 0.85 ms (4-byte MOVNTI stores only: 1.9 ms; a numpy fill then evict: 1.2 ms). */
void int21_fill_nan_evict(const uintptr_t *ptrs, const size_t *sizes, int count,
                          const uintptr_t *fptrs, const size_t *fsizes, int fcount, uint32_t bits) {
    for (int r = 0; r < fcount; r++) {
        uint32_t *p = (uint32_t *)fptrs[r];
        size_t n = fsizes[r] / sizeof(uint32_t);
#if defined(__x86_64__)
        size_t i = 0;
        for (; i < n && ((uintptr_t)(p + i) & 15); i++)
            __builtin_ia32_movnti((int *)(p + i), (int)bits);
        __m128i v = _mm_set1_epi32((int)bits);
        for (; i + 4 <= n; i += 4)
            _mm_stream_si128((__m128i *)(p + i), v);
        for (; i < n; i++)
            __builtin_ia32_movnti((int *)(p + i), (int)bits);
#else
        for (size_t i = 0; i < n; i++)
            ((volatile uint32_t *)p)[i] = bits;
#endif
    }
#if defined(__x86_64__)
    __builtin_ia32_sfence();
#endif
    int21_evict(ptrs, sizes, count);
}

/* Start the OpenMP thread team of the calling thread: one empty parallel region. The first
 * parallel region of a process creates the team's threads (libgomp keeps them for later
 * regions of the same thread, whichever library opens them); the timing child calls this
 * after its lockdown (threads started before it would escape the per-thread confinement)
 * and before it loads the candidate, so that cost of the runtime is not counted in the
 * candidate's first call. Without -fopenmp it does nothing. */
void int21_omp_start(void) {
#pragma omp parallel
    {
        __asm__ volatile("" : : : "memory");
    }
}
