/* RMSNorm, float32, CPU (OpenMP).
 *
 *   void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)
 *   y[r, i] = x[r, i] / sqrt(mean_i(x[r, i]^2) + eps) * w[i]
 *
 * Tunables (prepended as #define lines; defaults below):
 *   ROWS_PER_CHUNK  rows per OpenMP static-schedule chunk
 *   UNROLL          independent VEC-wide accumulators (hides add latency)
 *   VEC             accumulation lanes per accumulator (gcc maps them to SIMD registers)
 *   ACC_DOUBLE      1: accumulate the sum of squares in double, 0: in float
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

#if ACC_DOUBLE
typedef double acc_t;
#else
typedef float acc_t;
#endif

#define LANES (VEC * UNROLL)

static inline float row_inv_rms(const float *restrict xr, int hidden, float eps)
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
            acc_t v = (acc_t)xr[i + l];
            acc[l] += v * v;
        }
    }
    acc_t sum = 0;
    for (int l = 0; l < LANES; ++l)
        sum += acc[l];
    for (; i < hidden; ++i) {
        acc_t v = (acc_t)xr[i];
        sum += v * v;
    }
    acc_t mean = sum / (acc_t)hidden;
    return (float)(1.0 / sqrt((double)mean + (double)eps));
}

void rmsnorm(const float *restrict x, const float *restrict w, float *restrict y,
             int rows, int hidden, float eps)
{
    /* A single row is not worth waking the thread team for. */
#pragma omp parallel for schedule(static, ROWS_PER_CHUNK) if (rows > 1)
    for (int r = 0; r < rows; ++r) {
        const float *restrict xr = x + (long)r * hidden;
        float *restrict yr = y + (long)r * hidden;
        float inv = row_inv_rms(xr, hidden, eps);
#pragma omp simd
        for (int i = 0; i < hidden; ++i)
            yr[i] = xr[i] * inv * w[i];
    }
}
