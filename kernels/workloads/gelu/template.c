/* GELU (exact, erf form), float32, CPU (OpenMP).
 *
 *   void gelu(const float *x, float *y, int rows, int cols)
 *   y = 0.5 * x * (1 + erf(x / sqrt(2)))
 *
 * Tunables (prepended as #define lines; defaults below):
 *   ERF_IMPL  0: libm erff; 1: Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7, one expf),
 *             vectorisable by the compiler
 *   CHUNK     elements per OpenMP static-schedule chunk (the array is treated as flat)
 */
#include <math.h>

#ifndef ERF_IMPL
#define ERF_IMPL 0
#endif
#ifndef CHUNK
#define CHUNK 4096
#endif

static inline float erf_f(float z)
{
#if ERF_IMPL == 0
    return erff(z);
#else
    /* Abramowitz & Stegun 7.1.26: erf(a) = 1 - (a1 t + ... + a5 t^5) exp(-a^2), t = 1/(1+p a) */
    float a = fabsf(z);
    float t = 1.0f / (1.0f + 0.3275911f * a);
    float p = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
    float r = 1.0f - p * expf(-a * a);
    return copysignf(r, z);
#endif
}

void gelu(const float *restrict x, float *restrict y, int rows, int cols)
{
    long n = (long)rows * cols;
#pragma omp parallel for schedule(static) if (n > 4 * CHUNK)
    for (long c0 = 0; c0 < n; c0 += CHUNK) {
        long c1 = c0 + CHUNK < n ? c0 + CHUNK : n;
#pragma omp simd
        for (long i = c0; i < c1; ++i) {
            float v = x[i];
            y[i] = 0.5f * v * (1.0f + erf_f(v * 0.70710678118654752f));
        }
    }
}
