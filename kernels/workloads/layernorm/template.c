/* LayerNorm, float32, CPU (OpenMP).
 *
 *   void layernorm(const float *x, const float *w, const float *b, float *y,
 *                  int rows, int hidden, float eps)
 *   y[r, i] = (x[r, i] - mean_r) / sqrt(var_r + eps) * w[i] + b[i]    (biased variance)
 *
 * Tunables (prepended as #define lines; defaults below):
 *   ROWS_PER_CHUNK  rows per OpenMP static-schedule chunk
 *   LANES           independent partial sums per reduction (SIMD lanes x unroll)
 *   ACC_DOUBLE      1: accumulate in double, 0: in float
 *   ALGO            0: two passes (mean, then the centred sum of squares);
 *                   1: one pass over x - x[0] (shifted sums: robust to a large row mean)
 * Correct for any rows/hidden: each row's tail runs in a scalar remainder loop.
 */
#include <math.h>

#ifndef ROWS_PER_CHUNK
#define ROWS_PER_CHUNK 4
#endif
#ifndef LANES
#define LANES 16
#endif
#ifndef ACC_DOUBLE
#define ACC_DOUBLE 0
#endif
#ifndef ALGO
#define ALGO 0
#endif

#if ACC_DOUBLE
typedef double acc_t;
#else
typedef float acc_t;
#endif

static void row_stats(const float *restrict xr, int n, float *mean, float *rstd, float eps)
{
    acc_t s[LANES], q[LANES];
    for (int l = 0; l < LANES; ++l)
        s[l] = q[l] = 0;
    int i = 0;
#if ALGO == 0
    for (; i + LANES <= n; i += LANES)
#pragma GCC unroll 64
        for (int l = 0; l < LANES; ++l)
            s[l] += (acc_t)xr[i + l];
    acc_t sum = 0;
    for (int l = 0; l < LANES; ++l)
        sum += s[l];
    for (; i < n; ++i)
        sum += (acc_t)xr[i];
    acc_t mu = sum / (acc_t)n;
    for (i = 0; i + LANES <= n; i += LANES)
#pragma GCC unroll 64
        for (int l = 0; l < LANES; ++l) {
            acc_t d = (acc_t)xr[i + l] - mu;
            q[l] += d * d;
        }
    acc_t ss = 0;
    for (int l = 0; l < LANES; ++l)
        ss += q[l];
    for (; i < n; ++i) {
        acc_t d = (acc_t)xr[i] - mu;
        ss += d * d;
    }
    acc_t var = ss / (acc_t)n;
#else
    acc_t shift = (acc_t)xr[0];
    for (; i + LANES <= n; i += LANES)
#pragma GCC unroll 64
        for (int l = 0; l < LANES; ++l) {
            acc_t d = (acc_t)xr[i + l] - shift;
            s[l] += d;
            q[l] += d * d;
        }
    acc_t sum = 0, ss = 0;
    for (int l = 0; l < LANES; ++l) {
        sum += s[l];
        ss += q[l];
    }
    for (; i < n; ++i) {
        acc_t d = (acc_t)xr[i] - shift;
        sum += d;
        ss += d * d;
    }
    acc_t md = sum / (acc_t)n;
    acc_t var = ss / (acc_t)n - md * md;
    if (var < 0)
        var = 0;
    acc_t mu = shift + md;
#endif
    *mean = (float)mu;
    *rstd = (float)(1.0 / sqrt((double)var + (double)eps));
}

void layernorm(const float *restrict x, const float *restrict w, const float *restrict b, float *restrict y,
               int rows, int hidden, float eps)
{
    if (hidden <= 0)
        return;
#pragma omp parallel for schedule(static, ROWS_PER_CHUNK) if (rows > 1)
    for (int r = 0; r < rows; ++r) {
        const float *restrict xr = x + (long)r * hidden;
        float *restrict yr = y + (long)r * hidden;
        float mu, rstd;
        row_stats(xr, hidden, &mu, &rstd, eps);
#pragma omp simd
        for (int i = 0; i < hidden; ++i)
            yr[i] = (xr[i] - mu) * rstd * w[i] + b[i];
    }
}
