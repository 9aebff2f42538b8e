/* GEMM, float32, CPU (OpenMP): the Linear-layer convention Y = X W^T.
 *
 *   void gemm(const float *A, const float *B, float *C, int M, int N, int K)
 *   C[m, n] = sum_k A[m, k] * B[n, k]      A [M, K], B [N, K], C [M, N], row-major
 *
 * Two register-tiled micro-kernels, chosen per call by M (PACK_MIN_M):
 *
 * - dot (M < PACK_MIN_M, decode): A and B are both contiguous along K, so each C element
 *   is a dot product of two rows. An MR x NR tile keeps MR*NR vector accumulators of VEC
 *   lanes; per VEC-wide step of k it loads MR rows of A and NR rows of B and issues MR*NR
 *   fused multiply-adds, then reduces the lanes. No packing: at decode sizes B is read
 *   once from memory and packing it would double the traffic.
 * - packed (M >= PACK_MIN_M, prefill / square): each KC x NC block of B is transposed
 *   once into panels of NV*VEC columns (zero-padded), then an MR x (NV*VEC) outer-product
 *   micro-kernel broadcasts one element of A per row and multiplies it with NV contiguous
 *   vectors of the panel (the BLIS / GotoBLAS scheme; A is read in place).
 *
 * Cache blocking is shared: one OpenMP task is an MC x NC block of C, swept in KC-long
 * slices of K so that the B slice stays in L2 and the A tile in L1.
 *
 * Tunables (prepended as #define lines; defaults below):
 *   MR          rows of A (and C) per register tile, 1..8
 *   NR          dot path: rows of B (columns of C) per register tile, 1..8
 *   NV          packed path: vectors of VEC columns per register tile, 1..4
 *   VEC         lanes per vector (a GCC vector of VEC floats; 8 = one AVX2 register)
 *   KC          K block; the dot path needs a multiple of VEC
 *   NC          rows of B (columns of C) per block
 *   MC          rows of A per block
 *   PACK_MIN_M  use the packed path when M >= PACK_MIN_M (1 << 30: never)
 *   LOOP_ORDER  0: row tiles outer, column tiles inner (A tile reused from L1);
 *               1: column tiles outer, row tiles inner (B tile reused from L1)
 *   SCHEDULE    0: static, 1: dynamic scheduling of the MC x NC blocks over threads
 *   REG_PIN     dot path: 1 pins the loaded A and B vectors in registers (see PIN), 0 leaves
 *               register allocation to the compiler
 *
 * Correct for any M, N, K >= 0: ragged row tiles use compile-time specialised narrower
 * instances of the micro-kernels, ragged column tiles a runtime-sized one (dot) or the
 * zero-padded panel with a partial store (packed); the K tail that is not a multiple of
 * VEC runs in a scalar loop (dot).
 */
#include <stdlib.h>
#include <string.h>

#ifndef MR
#define MR 4
#endif
#ifndef NR
#define NR 4
#endif
#ifndef NV
#define NV 2
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef KC
#define KC 256
#endif
#ifndef NC
#define NC 128
#endif
#ifndef MC
#define MC 64
#endif
#ifndef PACK_MIN_M
#define PACK_MIN_M 32
#endif
#ifndef LOOP_ORDER
#define LOOP_ORDER 0
#endif
#ifndef SCHEDULE
#define SCHEDULE 0
#endif
#ifndef REG_PIN
#define REG_PIN 1
#endif

#if MR < 1 || MR > 8 || NR < 1 || NR > 8 || NV < 1 || NV > 4
#error "need 1 <= MR <= 8, 1 <= NR <= 8, 1 <= NV <= 4"
#endif
#if KC % VEC != 0
#error "KC must be a multiple of VEC"
#endif

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));

/* An empty asm that "modifies" a loaded vector: the compiler must keep it in a register
 * instead of folding a fresh load from L1 into every FMA that uses it (what gcc does
 * otherwise, costing MR*NR loads per step instead of MR+NR). x86 only; a no-op elsewhere. */
#if defined(__AVX512F__)
#define NATIVE_VEC_BYTES 64
#elif defined(__AVX__)
#define NATIVE_VEC_BYTES 32
#else
#define NATIVE_VEC_BYTES 16
#endif
/* Only for a vector that fits one register: a wider one (VEC 16 without AVX-512) has none. */
#if REG_PIN && (defined(__x86_64__) || defined(__i386__)) && VEC * 4 <= NATIVE_VEC_BYTES
#define PIN(v) __asm__("" : "+v"(v))
#else
#define PIN(v) ((void)0)
#endif

#define NRV (NV * VEC)                         /* columns per packed register tile */
#define NCP (((NC + NRV - 1) / NRV) * NRV)     /* NC rounded up to whole panels */
#define MIN(a, b) ((a) < (b) ? (a) : (b))

static inline vf loadu(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v); /* unaligned vector load */
    return v;
}

/* ---- dot path ---------------------------------------------------------------------- */

/* C[0:mr, 0:nr] (+)= A[0:mr, 0:kc] B[0:nr, 0:kc]^T; lda = ldb = K, ldc = N. Always inlined
 * with constant mr/nr at the full-tile call sites, so the accumulators stay in registers. */
static inline __attribute__((always_inline)) void
dot_tile(int mr, int nr, const float *restrict A, const float *restrict B, float *restrict C,
         long K, long N, int kc, int accumulate)
{
    vf acc[MR][NR];
    for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nr; ++j)
            acc[i][j] = (vf){0};
    int k = 0;
    for (; k + VEC <= kc; k += VEC) {
        vf a[MR], b[NR];
        for (int i = 0; i < mr; ++i) {
            a[i] = loadu(A + i * K + k);
            PIN(a[i]);
        }
        for (int j = 0; j < nr; ++j) {
            b[j] = loadu(B + j * K + k);
            PIN(b[j]);
        }
        for (int i = 0; i < mr; ++i)
            for (int j = 0; j < nr; ++j)
                acc[i][j] += a[i] * b[j];
    }
    for (int i = 0; i < mr; ++i)
        for (int j = 0; j < nr; ++j) {
            float s = 0.0f;
            for (int l = 0; l < VEC; ++l)
                s += acc[i][j][l];
            for (int kk = k; kk < kc; ++kk) /* K tail */
                s += A[i * K + kk] * B[j * K + kk];
            float *c = C + i * N + j;
            *c = accumulate ? *c + s : s;
        }
}

#define DOT_CASE(m)                                                        \
    case m:                                                                \
        dot_tile((m) <= MR ? (m) : MR, NR, A, B, C, K, N, kc, accumulate); \
        break;

static void dot_full(int mr, const float *A, const float *B, float *C, long K, long N, int kc, int accumulate)
{
    switch (mr) {
        DOT_CASE(1) DOT_CASE(2) DOT_CASE(3) DOT_CASE(4)
        DOT_CASE(5) DOT_CASE(6) DOT_CASE(7) DOT_CASE(8)
    }
}

static void dot_edge(int mr, int nr, const float *A, const float *B, float *C, long K, long N, int kc, int accumulate)
{
    dot_tile(mr, nr, A, B, C, K, N, kc, accumulate);
}

static void dot_block(const float *A, const float *B, float *C, int M, int N, int K, int m0, int n0)
{
    int m1 = MIN(m0 + MC, M), n1 = MIN(n0 + NC, N);
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = MIN(K - k0, KC), acc = k0 > 0;
#if LOOP_ORDER == 0
        for (int m = m0; m < m1; m += MR) {
            int mr = MIN(m1 - m, MR);
            for (int n = n0; n < n1; n += NR) {
                int nr = MIN(n1 - n, NR);
#else
        for (int n = n0; n < n1; n += NR) {
            int nr = MIN(n1 - n, NR);
            for (int m = m0; m < m1; m += MR) {
                int mr = MIN(m1 - m, MR);
#endif
                const float *a = A + (long)m * K + k0;
                const float *b = B + (long)n * K + k0;
                float *c = C + (long)m * N + n;
                if (nr == NR)
                    dot_full(mr, a, b, c, K, N, kc, acc);
                else
                    dot_edge(mr, nr, a, b, c, K, N, kc, acc);
            }
        }
    }
}

/* ---- packed path ------------------------------------------------------------------- */

/* Bp[p][k][c] = B[n0 + p*NRV + c, k0 + k] for the nc x kc block, zero beyond nc. */
static void pack_b(const float *restrict B, float *restrict Bp, long K, int n0, int nc, int k0, int kc)
{
    for (int p = 0; p * NRV < nc; ++p) {
        float *dst = Bp + (long)p * kc * NRV;
        for (int c = 0; c < NRV; ++c) {
            int n = p * NRV + c;
            if (n < nc) {
                const float *src = B + (long)(n0 + n) * K + k0;
                for (int k = 0; k < kc; ++k)
                    dst[(long)k * NRV + c] = src[k];
            } else {
                for (int k = 0; k < kc; ++k)
                    dst[(long)k * NRV + c] = 0.0f;
            }
        }
    }
}

/* C[0:mr, 0:nr] (+)= A[0:mr, 0:kc] * panel; the panel is kc x NRV, nr <= NRV valid columns. */
static inline __attribute__((always_inline)) void
packed_tile(int mr, const float *restrict A, const float *restrict Bp, float *restrict C,
            long K, long N, int kc, int nr, int accumulate)
{
    vf acc[MR][NV];
    for (int i = 0; i < mr; ++i)
        for (int v = 0; v < NV; ++v)
            acc[i][v] = (vf){0};
#pragma GCC unroll 4
    for (int k = 0; k < kc; ++k) {
        vf b[NV];
        for (int v = 0; v < NV; ++v)
            b[v] = *(const vf *)(Bp + (long)k * NRV + v * VEC); /* panels are VEC-aligned */
        for (int i = 0; i < mr; ++i) {
            float a = A[i * K + k];
            for (int v = 0; v < NV; ++v)
                acc[i][v] += a * b[v];
        }
    }
    if (nr == NRV) {
        for (int i = 0; i < mr; ++i)
            for (int v = 0; v < NV; ++v) {
                float *c = C + i * N + v * VEC;
                vf old = accumulate ? loadu(c) : (vf){0};
                vf r = old + acc[i][v];
                memcpy(c, &r, sizeof r);
            }
    } else {
        for (int i = 0; i < mr; ++i)
            for (int c = 0; c < nr; ++c) {
                float s = acc[i][c / VEC][c % VEC];
                C[i * N + c] = accumulate ? C[i * N + c] + s : s;
            }
    }
}

#define PACKED_CASE(m)                                                          \
    case m:                                                                     \
        packed_tile((m) <= MR ? (m) : MR, A, Bp, C, K, N, kc, nr, accumulate); \
        break;

static void packed_any(int mr, const float *A, const float *Bp, float *C, long K, long N, int kc, int nr, int accumulate)
{
    switch (mr) {
        PACKED_CASE(1) PACKED_CASE(2) PACKED_CASE(3) PACKED_CASE(4)
        PACKED_CASE(5) PACKED_CASE(6) PACKED_CASE(7) PACKED_CASE(8)
    }
}

static void packed_block(const float *A, const float *B, float *C, int M, int N, int K, int m0, int n0, float *Bp)
{
    int m1 = MIN(m0 + MC, M), nc = MIN(NC, N - n0);
    for (int k0 = 0; k0 < K; k0 += KC) {
        int kc = MIN(K - k0, KC), acc = k0 > 0;
        pack_b(B, Bp, K, n0, nc, k0, kc);
#if LOOP_ORDER == 0
        for (int m = m0; m < m1; m += MR) {
            int mr = MIN(m1 - m, MR);
            for (int p = 0; p * NRV < nc; ++p) {
#else
        for (int p = 0; p * NRV < nc; ++p) {
            for (int m = m0; m < m1; m += MR) {
                int mr = MIN(m1 - m, MR);
#endif
                int nr = MIN(nc - p * NRV, NRV);
                packed_any(mr, A + (long)m * K + k0, Bp + (long)p * kc * NRV,
                           C + (long)m * N + n0 + p * NRV, K, N, kc, nr, acc);
            }
        }
    }
}

/* ---- entry point ------------------------------------------------------------------- */

void gemm(const float *restrict A, const float *restrict B, float *restrict C, int M, int N, int K)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        memset(C, 0, sizeof(float) * (size_t)M * (size_t)N);
        return;
    }
    int mb = (M + MC - 1) / MC, nb = (N + NC - 1) / NC;
    long tasks = (long)mb * nb;
    int packed = M >= PACK_MIN_M;
    /* Column blocks vary fastest: neighbouring threads share the same rows of A. */
#pragma omp parallel if (tasks > 1)
    {
        float *Bp = packed ? aligned_alloc(64, ((sizeof(float) * (size_t)KC * NCP + 63) / 64) * 64) : NULL;
#if SCHEDULE
#pragma omp for schedule(dynamic, 1)
#else
#pragma omp for schedule(static)
#endif
        for (long t = 0; t < tasks; ++t) {
            int m0 = (int)(t / nb) * MC, n0 = (int)(t % nb) * NC;
            if (packed)
                packed_block(A, B, C, M, N, K, m0, n0, Bp);
            else
                dot_block(A, B, C, M, N, K, m0, n0);
        }
        free(Bp);
    }
}
