/* SwiGLU of a fused gate/up projection, float32, CPU (OpenMP).
 *
 *   void swiglu(const float *x, float *y, int rows, int inter)
 *   y[r, i] = silu(x[r, i]) * x[r, inter + i],   silu(a) = a / (1 + exp(-a))
 *
 * Tunables (prepended as #define lines; defaults below):
 *   CHUNK     output elements per OpenMP task (rows are split into column chunks, so a
 *             single decode row still uses every thread)
 *   SIGMOID   0: a / (1 + expf(-a)); 1: a * (0.5 + 0.5 tanhf(a / 2)) (no overflow path)
 */
#include <math.h>

#ifndef CHUNK
#define CHUNK 2048
#endif
#ifndef SIGMOID
#define SIGMOID 0
#endif

void swiglu(const float *restrict x, float *restrict y, int rows, int inter)
{
    if (inter <= 0)
        return;
    long per_row = (inter + CHUNK - 1) / CHUNK;
    long tasks = (long)rows * per_row;
#pragma omp parallel for schedule(static) if (tasks > 1 && (long)rows * inter > 8192)
    for (long t = 0; t < tasks; ++t) {
        long r = t / per_row;
        int c0 = (int)(t % per_row) * CHUNK;
        int c1 = c0 + CHUNK < inter ? c0 + CHUNK : inter;
        const float *restrict g = x + r * 2L * inter;
        const float *restrict u = g + inter;
        float *restrict yr = y + r * (long)inter;
#pragma omp simd
        for (int i = c0; i < c1; ++i) {
            float a = g[i];
#if SIGMOID == 0
            yr[i] = a / (1.0f + expf(-a)) * u[i];
#else
            yr[i] = a * (0.5f + 0.5f * tanhf(0.5f * a)) * u[i];
#endif
        }
    }
}
