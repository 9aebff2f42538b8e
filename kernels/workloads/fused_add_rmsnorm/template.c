/* Fused residual add + RMSNorm, float32, CPU (OpenMP).
 *
 *   void fused_add_rmsnorm(const float *x, const float *residual, const float *w,
 *                          float *y, float *residual_out, int rows, int hidden, float eps)
 *   residual_out[r, i] = x[r, i] + residual[r, i]
 *   y[r, i] = residual_out[r, i] / sqrt(mean_i(residual_out[r, i]^2) + eps) * w[i]
 *
 * Pass 1 writes residual_out and accumulates the sum of squares; pass 2 writes y.
 *
 * Tunables (prepended as #define lines; defaults below):
 *   ROWS_PER_CHUNK  rows per OpenMP static-schedule chunk
 *   UNROLL          independent VEC-wide accumulators (hides add latency)
 *   VEC             accumulation lanes per accumulator (gcc maps them to SIMD registers)
 *   ACC_DOUBLE      1: accumulate the sum of squares in double, 0: in float
 *   RECOMPUTE       pass 2 reads 0: residual_out back (just written, cache-hot),
 *                   1: x and residual again and re-adds them (no read-after-write)
 * Correct for any rows/hidden: the tail of each row runs in a scalar remainder loop.
 */
#include <math.h>

#ifndef ROWS_PER_CHUNK
#define ROWS_PER_CHUNK 4
#endif
#ifndef UNROLL
#define UNROLL 2
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef ACC_DOUBLE
#define ACC_DOUBLE 0
#endif
#ifndef RECOMPUTE
#define RECOMPUTE 0
#endif

#if ACC_DOUBLE
typedef double acc_t;
#else
typedef float acc_t;
#endif

#define LANES (VEC * UNROLL)

/* residual_out = x + residual for one row; returns 1 / sqrt(mean(residual_out^2) + eps). */
static inline float add_row_inv_rms(const float *restrict xr, const float *restrict rr,
                                    float *restrict ro, int hidden, float eps)
{
    /* LANES separate partial sums: without -ffast-math gcc may not reorder one float sum,
     * so the lane array is what lets it use SIMD and overlap add latencies. */
    acc_t acc[LANES];
    for (int l = 0; l < LANES; ++l)
        acc[l] = 0;
    int i = 0;
    for (; i + LANES <= hidden; i += LANES) {
#pragma GCC unroll 64
        for (int l = 0; l < LANES; ++l) {
            float s = xr[i + l] + rr[i + l];
            ro[i + l] = s;
            acc[l] += (acc_t)s * (acc_t)s;
        }
    }
    acc_t sum = 0;
    for (int l = 0; l < LANES; ++l)
        sum += acc[l];
    for (; i < hidden; ++i) {
        float s = xr[i] + rr[i];
        ro[i] = s;
        sum += (acc_t)s * (acc_t)s;
    }
    acc_t mean = sum / (acc_t)hidden;
    return (float)(1.0 / sqrt((double)mean + (double)eps));
}

void fused_add_rmsnorm(const float *restrict x, const float *restrict residual, const float *restrict w,
                       float *restrict y, float *restrict residual_out, int rows, int hidden, float eps)
{
    /* A single row is not worth waking the thread team for. */
#pragma omp parallel for schedule(static, ROWS_PER_CHUNK) if (rows > 1)
    for (int r = 0; r < rows; ++r) {
        long off = (long)r * hidden;
        float inv = add_row_inv_rms(x + off, residual + off, residual_out + off, hidden, eps);
        float *restrict yr = y + off;
#if RECOMPUTE
        const float *restrict xr = x + off, *restrict rr = residual + off;
#pragma omp simd
        for (int i = 0; i < hidden; ++i)
            yr[i] = (xr[i] + rr[i]) * inv * w[i];
#else
        const float *restrict ro = residual_out + off;
#pragma omp simd
        for (int i = 0; i < hidden; ++i)
            yr[i] = ro[i] * inv * w[i];
#endif
    }
}
