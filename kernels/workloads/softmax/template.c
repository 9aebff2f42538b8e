/* Row-wise softmax, float32, CPU (OpenMP).
 *
 *   void softmax(const float *x, float *y, int rows, int cols)
 *   y[r, j] = exp(x[r, j] - m_r) / sum_j exp(x[r, j] - m_r),  m_r = max_j x[r, j]
 *
 * Numerically stable for any input with a finite row maximum, including -inf entries
 * (masked tokens) anywhere in the row.
 *
 * Tunables (prepended as #define lines; defaults below):
 *   ALGO            0: three passes (max; sum of exp; write exp / sum), exp twice per element
 *                   1: online, two passes: running max and rescaled sum in one pass over
 *                      BLOCK-element blocks, then write exp / sum
 *                   2: two passes storing exp: max; y = exp(x - m) and sum; then y *= 1/sum
 *                      in place (exp once per element, y read back)
 *   VEC             lanes per vector (a GCC vector of VEC floats)
 *   UNROLL          independent vector accumulators (hides add / max latency)
 *   EXP_POLY        1: inline, vectorised Cephes-style exp (range reduction + polynomial);
 *                   0: libm expf per element
 *   EXP_DEGREE      EXP_POLY: degree of the polynomial for e^r, |r| <= ln2/2: 7 (Cephes
 *                   expf, ~1 ulp), 6 (~1.5e-7 relative), 5 (~2.5e-6 relative, fastest)
 *   ACC_DOUBLE      1: accumulate the sum of exps in double, 0: in float
 *   BLOCK           ALGO 1: elements per online block (a multiple of VEC * UNROLL)
 *   ROWS_PER_CHUNK  rows per OpenMP static-schedule chunk
 *   SPLIT_ROWS      1: when there are fewer rows than threads (and cols >= 4096), every
 *                   row's columns are split across the threads (partial max / sum combined
 *                   through shared memory); 0: one thread per row
 * Correct for any rows/cols: each segment's tail runs in a scalar remainder loop.
 */
#include <math.h>
#include <omp.h>

#ifndef ALGO
#define ALGO 0
#endif
#ifndef VEC
#define VEC 8
#endif
#ifndef UNROLL
#define UNROLL 2
#endif
#ifndef EXP_POLY
#define EXP_POLY 1
#endif
#ifndef EXP_DEGREE
#define EXP_DEGREE 7
#endif
#ifndef ACC_DOUBLE
#define ACC_DOUBLE 0
#endif
#ifndef BLOCK
#define BLOCK 1024
#endif
#ifndef ROWS_PER_CHUNK
#define ROWS_PER_CHUNK 1
#endif
#ifndef SPLIT_ROWS
#define SPLIT_ROWS 1
#endif

#define STEP (VEC * UNROLL)
#if ALGO == 1 && BLOCK % STEP != 0
#error "BLOCK must be a multiple of VEC * UNROLL"
#endif
#define MAX_THREADS 256

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));
typedef int vi __attribute__((vector_size(VEC * sizeof(int))));
#if ACC_DOUBLE
typedef double acc_t;
typedef double va __attribute__((vector_size(VEC * sizeof(double))));
#define TO_ACC(v) __builtin_convertvector((v), va)
#else
typedef float acc_t;
typedef vf va;
#define TO_ACC(v) (v)
#endif

static inline vf vload(const float *p)
{
    vf v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}

static inline void vstore(float *p, vf v) { __builtin_memcpy(p, &v, sizeof v); }

static inline vf vsplat(float s) { return (vf){0} + s; }

static inline vf vmax(vf a, vf b)
{
    vi m = a > b; /* all-ones lanes where a > b */
    return (vf)(((vi)a & m) | ((vi)b & ~m));
}

static inline float hmax(vf v)
{
    float m = v[0];
    for (int l = 1; l < VEC; ++l)
        m = v[l] > m ? v[l] : m;
    return m;
}

static inline acc_t hsum(va v)
{
    acc_t s = 0;
    for (int l = 0; l < VEC; ++l)
        s += v[l];
    return s;
}

/* exp(x) for x <= 0 (every exponent here is x - max <= 0); below -87.3 it is clamped, so
 * -inf gives ~1e-38, never NaN: x = n ln2 + r, |r| <= ln2/2 (Cody-Waite split of ln2),
 * e^r = 1 + r + r^2 P(r) with the Cephes expf coefficients (P truncated below degree 7),
 * 2^n built in the exponent bits. Rounding uses the 1.5 * 2^23 trick. */
#define EXP_LO -87.33654f
#define LOG2E 1.44269504088896341f
#define MAGIC 12582912.0f /* 1.5 * 2^23 */
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define P0 1.9875691500E-4f
#define P1 1.3981999507E-3f
#define P2 8.3334519073E-3f
#define P3 4.1665795894E-2f
#define P4 1.6666665459E-1f
#define P5 5.0000001201E-1f

#if EXP_DEGREE == 7
#define POLY(r) (((((P0 * (r) + P1) * (r) + P2) * (r) + P3) * (r) + P4) * (r) + P5)
#elif EXP_DEGREE == 6
#define POLY(r) ((((P1 * (r) + P2) * (r) + P3) * (r) + P4) * (r) + P5)
#elif EXP_DEGREE == 5
#define POLY(r) (((P2 * (r) + P3) * (r) + P4) * (r) + P5)
#else
#error "EXP_DEGREE must be 5, 6 or 7"
#endif

static inline float sexp(float x)
{
#if EXP_POLY
    x = x < EXP_LO ? EXP_LO : x;
    float t = x * LOG2E + MAGIC;
    float n = t - MAGIC;
    float r = x - n * LN2_HI;
    r = r - n * LN2_LO;
    float p = POLY(r);
    p = p * r * r + r + 1.0f;
    int ti, e;
    __builtin_memcpy(&ti, &t, sizeof ti);
    e = (ti - 0x4B400000 + 127) << 23;
    float s;
    __builtin_memcpy(&s, &e, sizeof s);
    return p * s;
#else
    return expf(x);
#endif
}

static inline vf vexp(vf x)
{
#if EXP_POLY
    x = vmax(x, vsplat(EXP_LO));
    vf t = x * LOG2E + MAGIC;
    vf n = t - MAGIC;
    vf r = x - n * LN2_HI;
    r = r - n * LN2_LO;
    vf p = POLY(r);
    p = p * r * r + r + 1.0f;
    vi e = ((vi)t - 0x4B400000 + 127) << 23;
    return p * (vf)e;
#else
    vf out;
    for (int l = 0; l < VEC; ++l)
        out[l] = expf(x[l]);
    return out;
#endif
}

/* ---- segment primitives: x[0:n] --------------------------------------------------- */

static float seg_max(const float *restrict x, long n)
{
    vf m[UNROLL];
    for (int u = 0; u < UNROLL; ++u)
        m[u] = vsplat(-INFINITY);
    long i = 0;
    for (; i + STEP <= n; i += STEP)
        for (int u = 0; u < UNROLL; ++u)
            m[u] = vmax(vload(x + i + u * VEC), m[u]);
    for (int u = 1; u < UNROLL; ++u)
        m[0] = vmax(m[u], m[0]);
    float r = hmax(m[0]);
    for (; i < n; ++i)
        r = x[i] > r ? x[i] : r;
    return r;
}

static acc_t seg_sumexp(const float *restrict x, long n, float mx)
{
    va s[UNROLL];
    for (int u = 0; u < UNROLL; ++u)
        s[u] = (va){0};
    vf m = vsplat(mx);
    long i = 0;
    for (; i + STEP <= n; i += STEP)
        for (int u = 0; u < UNROLL; ++u)
            s[u] += TO_ACC(vexp(vload(x + i + u * VEC) - m));
    for (int u = 1; u < UNROLL; ++u)
        s[0] += s[u];
    acc_t r = hsum(s[0]);
    for (; i < n; ++i)
        r += sexp(x[i] - mx);
    return r;
}

/* y = exp(x - mx) * scale */
static void seg_write(const float *restrict x, float *restrict y, long n, float mx, float scale)
{
    vf m = vsplat(mx);
    long i = 0;
    for (; i + STEP <= n; i += STEP)
        for (int u = 0; u < UNROLL; ++u)
            vstore(y + i + u * VEC, vexp(vload(x + i + u * VEC) - m) * scale);
    for (; i < n; ++i)
        y[i] = sexp(x[i] - mx) * scale;
}

/* y = exp(x - mx); returns the sum */
static acc_t seg_write_sum(const float *restrict x, float *restrict y, long n, float mx)
{
    va s[UNROLL];
    for (int u = 0; u < UNROLL; ++u)
        s[u] = (va){0};
    vf m = vsplat(mx);
    long i = 0;
    for (; i + STEP <= n; i += STEP)
        for (int u = 0; u < UNROLL; ++u) {
            vf e = vexp(vload(x + i + u * VEC) - m);
            vstore(y + i + u * VEC, e);
            s[u] += TO_ACC(e);
        }
    for (int u = 1; u < UNROLL; ++u)
        s[0] += s[u];
    acc_t r = hsum(s[0]);
    for (; i < n; ++i) {
        y[i] = sexp(x[i] - mx);
        r += y[i];
    }
    return r;
}

static void seg_scale(float *restrict y, long n, float scale)
{
    long i = 0;
    for (; i + STEP <= n; i += STEP)
        for (int u = 0; u < UNROLL; ++u)
            vstore(y + i + u * VEC, vload(y + i + u * VEC) * scale);
    for (; i < n; ++i)
        y[i] *= scale;
}

/* Online max and sum over x[0:n] in BLOCK-element blocks: *m_out, *s_out such that
 * s = sum exp(x - m). m stays -inf (and s 0) while every element seen is -inf. */
static void seg_online(const float *restrict x, long n, float *m_out, acc_t *s_out)
{
    float m = -INFINITY;
    acc_t s = 0;
    for (long b = 0; b < n; b += BLOCK) {
        long len = n - b < BLOCK ? n - b : BLOCK;
        float bm = seg_max(x + b, len);
        if (bm > m) {
            if (s != 0)
                s *= (acc_t)sexp(m - bm); /* m finite here: s != 0 only after a finite max */
            m = bm;
        }
        if (m == -INFINITY)
            continue; /* every element so far is -inf: nothing to add */
        s += seg_sumexp(x + b, len, m);
    }
    *m_out = m;
    *s_out = s;
}

/* ---- rows ------------------------------------------------------------------------ */

static void row(const float *restrict x, float *restrict y, long n)
{
#if ALGO == 0
    float m = seg_max(x, n);
    acc_t s = seg_sumexp(x, n, m);
    seg_write(x, y, n, m, (float)(1.0 / (double)s));
#elif ALGO == 1
    float m;
    acc_t s;
    seg_online(x, n, &m, &s);
    seg_write(x, y, n, m, (float)(1.0 / (double)s));
#else
    float m = seg_max(x, n);
    acc_t s = seg_write_sum(x, y, n, m);
    seg_scale(y, n, (float)(1.0 / (double)s));
#endif
}

/* Every thread of the team takes one contiguous segment of each row; partial maxima and
 * sums meet in shared arrays between barriers. The barrier at the end of a row keeps a fast
 * thread from overwriting them while a slow one still reads. */
static void rows_split(const float *restrict x, float *restrict y, int rows, long cols)
{
    float part_m[MAX_THREADS]; /* shared by the team: declared outside the region */
    acc_t part_s[MAX_THREADS];
    int nt = omp_get_max_threads();
    nt = nt > MAX_THREADS ? MAX_THREADS : nt;
#pragma omp parallel num_threads(nt)
    {
        int t = omp_get_thread_num(), team = omp_get_num_threads();
        long per = (cols + team - 1) / team;
        long c0 = t * per < cols ? t * per : cols;
        long c1 = c0 + per < cols ? c0 + per : cols;
        for (int r = 0; r < rows; ++r) {
            const float *xr = x + (long)r * cols + c0;
            float *yr = y + (long)r * cols + c0;
            long n = c1 - c0;
#if ALGO == 1
            seg_online(xr, n, &part_m[t], &part_s[t]);
#else
            part_m[t] = seg_max(xr, n);
#endif
#pragma omp barrier
            float m = -INFINITY;
            for (int u = 0; u < team; ++u)
                m = part_m[u] > m ? part_m[u] : m;
#if ALGO == 1
            acc_t s = 0;
            for (int u = 0; u < team; ++u)
                if (part_m[u] != -INFINITY)
                    s += part_s[u] * (acc_t)sexp(part_m[u] - m);
#else
#if ALGO == 0
            acc_t mine = seg_sumexp(xr, n, m);
#else
            acc_t mine = seg_write_sum(xr, yr, n, m);
#endif
            part_s[t] = mine;
#pragma omp barrier
            acc_t s = 0;
            for (int u = 0; u < team; ++u)
                s += part_s[u];
#endif
            float inv = (float)(1.0 / (double)s);
#if ALGO == 2
            seg_scale(yr, n, inv);
#else
            seg_write(xr, yr, n, m, inv);
#endif
#pragma omp barrier /* part_m / part_s are reused by the next row */
        }
    }
}

void softmax(const float *restrict x, float *restrict y, int rows, int cols)
{
    if (rows <= 0 || cols <= 0)
        return;
#if SPLIT_ROWS
    if (rows < omp_get_max_threads() && cols >= 4096) {
        rows_split(x, y, rows, cols);
        return;
    }
#endif
#pragma omp parallel for schedule(static, ROWS_PER_CHUNK) if (rows > 1)
    for (int r = 0; r < rows; ++r)
        row(x + (long)r * cols, y + (long)r * cols, cols);
}
