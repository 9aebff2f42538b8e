/* Rotary position embedding (Llama "rotate half"), float32, CPU (OpenMP).
 *
 *   void rope(const float *x, const float *cos, const float *sin, float *y,
 *             int tokens, int heads, int head_dim)
 *   y[t,h,i]      = x[t,h,i] cos[t,i] - x[t,h,i+D/2] sin[t,i]
 *   y[t,h,i+D/2]  = x[t,h,i+D/2] cos[t,i] + x[t,h,i] sin[t,i]       i < D/2
 *
 * Tunables (prepended as #define lines; defaults below):
 *   ROWS_PER_CHUNK  (token, head) rows per OpenMP static-schedule chunk
 *   PAR_MIN_ROWS    run serially below this many rows (a decode token is not worth a team)
 */
#ifndef ROWS_PER_CHUNK
#define ROWS_PER_CHUNK 8
#endif
#ifndef PAR_MIN_ROWS
#define PAR_MIN_ROWS 64
#endif

void rope(const float *restrict x, const float *restrict cos, const float *restrict sin, float *restrict y,
          int tokens, int heads, int head_dim)
{
    int half = head_dim / 2;
    long rows = (long)tokens * heads;
#pragma omp parallel for schedule(static, ROWS_PER_CHUNK) if (rows >= PAR_MIN_ROWS)
    for (long r = 0; r < rows; ++r) {
        long t = r / heads;
        const float *restrict xr = x + r * head_dim;
        float *restrict yr = y + r * head_dim;
        const float *restrict c = cos + t * half;
        const float *restrict s = sin + t * half;
#pragma omp simd
        for (int i = 0; i < half; ++i) {
            float a = xr[i], b = xr[i + half];
            yr[i] = a * c[i] - b * s[i];
            yr[i + half] = b * c[i] + a * s[i];
        }
    }
}
