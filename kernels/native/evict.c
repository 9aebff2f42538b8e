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
 */
#include <stddef.h>
#include <stdint.h>

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
