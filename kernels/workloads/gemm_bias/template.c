/* GEMM with bias and activation epilogue, float32, CPU (OpenMP): C = act(A B^T + bias).
 *
 *   void gemm_bias(const float *A, const float *B, const float *bias, float *C,
 *                  int M, int N, int K, float act)
 *   C[m, n] = act(sum_k A[m, k] * B[n, k] + bias[n])   A [M, K], B [N, K], C [M, N], row-major
 *   act: 0 identity, 1 exact GELU 0.5 x (1 + erf(x / sqrt(2)))
 *
 * The GEMM is gemm.c's (two register-tiled micro-kernels: dot products below PACK_MIN_M,
 * packed outer products from it; MC x NC blocks of C are the OpenMP tasks, swept in KC-long
 * slices of K). The epilogue is fused at block level: as soon as the last K slice of an
 * MC x NC block is done, the bias and the activation are applied to that block while it is
 * still in L1/L2, so C makes a single trip to memory ("bias + activation in one pass").
 *
 * Tunables (prepended as #define lines; defaults below): those of gemm.c (MR, NR, NV, VEC,
 * KC, NC, MC, PACK_MIN_M, LOOP_ORDER, SCHEDULE) plus
 *   ERF_IMPL  0: libm erff; 1: Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7)
 */
#include <math.h>
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

/* ---- epilogue ---------------------------------------------------------------------- */

#ifndef ERF_IMPL
#define ERF_IMPL 0
#endif

static inline float erf_f(float z)
{
#if ERF_IMPL == 0
    return erff(z);
#else
    float a = fabsf(z);
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    return copysignf(1.0f - p * expf(-a * a), z);
#endif
}

static void epilogue(float *restrict C, const float *restrict bias, int M, int N, int m0, int n0, int gelu)
{
    int m1 = MIN(m0 + MC, M), n1 = MIN(n0 + NC, N);
    for (int m = m0; m < m1; ++m) {
        float *c = C + (long)m * N;
        if (gelu) {
#pragma omp simd
            for (int n = n0; n < n1; ++n) {
                float x = c[n] + bias[n];
                c[n] = 0.5f * x * (1.0f + erf_f(x * 0.70710678118654752f));
            }
        } else {
#pragma omp simd
            for (int n = n0; n < n1; ++n)
                c[n] += bias[n];
        }
    }
}

/* ---- entry point ------------------------------------------------------------------- */

void gemm_bias(const float *restrict A, const float *restrict B, const float *restrict bias, float *restrict C,
               int M, int N, int K, float act)
{
    if (M <= 0 || N <= 0)
        return;
    int gelu = act == 1.0f;
    if (K <= 0) {
        for (int m = 0; m < M; m += MC)
            for (int n = 0; n < N; n += NC) {
                int m1 = MIN(m + MC, M), n1 = MIN(n + NC, N);
                for (int i = m; i < m1; ++i)
                    for (int j = n; j < n1; ++j)
                        C[(long)i * N + j] = 0.0f;
                epilogue(C, bias, M, N, m, n, gelu);
            }
        return;
    }
    int mb = (M + MC - 1) / MC, nb = (N + NC - 1) / NC;
    long tasks = (long)mb * nb;
    int packed = M >= PACK_MIN_M;
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
            epilogue(C, bias, M, N, m0, n0, gelu);
        }
        free(Bp);
    }
}
