/* Kimi Delta Attention (KDA) forward, float32, CPU (OpenMP).
 *
 *   void kda(const float *q, const float *k, const float *v, const float *g,
 *            const float *beta, float *o, float *state,
 *            int batch_heads, int seq, int dk, int dv)
 *
 * Per sequence-head h (heads-first layout: q, k, g [BH, T, dk]; v, o [BH, T, dv];
 * beta [BH, T]; state [BH, dk, dv]), S = 0 initially, scale = 1 / sqrt(dk):
 *   S'_t = Diag(exp(g_t)) S_{t-1}
 *   S_t  = S'_t + beta_t k_t (v_t - S'_t^T k_t)^T
 *   o_t  = S_t^T (scale q_t)
 * and state = S_T. q, k are already L2-normalised; g <= 0 (log decay); beta in (0, 1).
 *
 * Two algorithms:
 * - ALGO 0, recurrent: token by token. The delta rule acts on every value column of S
 *   independently, so one task is (head, block of DV_BLOCK value columns) and its slice of
 *   S (dk x DV_BLOCK) stays in L1 for the whole sequence; exp(g) is computed once into a
 *   scratch buffer shared by the column blocks.
 * - ALGO 1, chunked (Kimi Linear Sec. 3.1, WY/UT form): per chunk of CHUNK tokens,
 *   A_kk / A_qk from pairwise decays exp(G_i - G_j) formed as running products of exp(g)
 *   (never exp of a cumulative sum, which underflows), a unit lower-triangular solve for
 *   U = M V and W = M (exp(G) K), then three small matrix products with the chunk-initial
 *   state. One task per head.
 *
 * Tunables (prepended as #define lines; defaults below):
 *   ALGO        0: recurrent, 1: chunked
 *   DV_BLOCK    recurrent: value columns per task (the S slice kept in L1)
 *   FUSE        recurrent: 1 fuses token t's update/output pass with token t+1's
 *               decay/prediction pass (S is loaded and stored once per token instead of
 *               twice); 0: two passes
 *   CHUNK       chunked: tokens per chunk
 *   ACC_DOUBLE  1: state, accumulators and chunk scratch in double; 0: float
 * Correct for any batch_heads, seq, dk, dv: ragged column blocks and the short last chunk
 * use runtime bounds.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifndef ALGO
#define ALGO 0
#endif
#ifndef DV_BLOCK
#define DV_BLOCK 64
#endif
#ifndef FUSE
#define FUSE 1
#endif
#ifndef CHUNK
#define CHUNK 64
#endif
#ifndef ACC_DOUBLE
#define ACC_DOUBLE 0
#endif

#if ACC_DOUBLE
typedef double real;
#else
typedef float real;
#endif

#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* exp(x) for x <= 0, ~1 ulp (Cephes expf polynomial; below -87.3 clamped to ~1e-38).
 * Branch-free, so gcc vectorises loops that call it. */
static inline float exp_neg(float x)
{
    x = x < -87.33654f ? -87.33654f : x;
    float t = x * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: round to integer */
    float n = t - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = ((((1.9875691500E-4f * r + 1.3981999507E-3f) * r + 8.3334519073E-3f) * r
                + 4.1665795894E-2f) * r + 1.6666665459E-1f) * r + 5.0000001201E-1f;
    p = p * r * r + r + 1.0f;
    int ti, e;
    memcpy(&ti, &t, sizeof ti);
    e = (ti - 0x4B400000 + 127) << 23;
    float s;
    memcpy(&s, &e, sizeof s);
    return p * s;
}

/* ---- recurrent --------------------------------------------------------------------- */

/* Decay token t into S and predict: S[d, :] *= a[d]; pred = S^T k. */
static inline void decay_predict(real *restrict S, real *restrict pred, const float *restrict a,
                                 const float *restrict kt, int dk, int nc)
{
    for (int c = 0; c < nc; ++c)
        pred[c] = 0;
    for (int d = 0; d < dk; ++d) {
        real ad = a[d], kd = kt[d];
        real *restrict s = S + (long)d * DV_BLOCK;
#pragma omp simd
        for (int c = 0; c < nc; ++c) {
            real x = s[c] * ad;
            s[c] = x;
            pred[c] += kd * x;
        }
    }
}

static void recurrent_task(const float *restrict q, const float *restrict k, const float *restrict v,
                           const float *restrict A, const float *restrict beta, float *restrict o,
                           float *restrict state, int T, int dk, int dv, int c0, real *restrict S)
{
    int nc = MIN(DV_BLOCK, dv - c0);
    real scale = (real)(1.0 / sqrt((double)dk));
    real pred[DV_BLOCK], u[DV_BLOCK], out[DV_BLOCK];
    memset(S, 0, sizeof(real) * (size_t)dk * DV_BLOCK);
    if (T > 0)
        decay_predict(S, pred, A, k, dk, nc);
    for (int t = 0; t < T; ++t) {
        const float *kt = k + (long)t * dk, *qt = q + (long)t * dk, *vt = v + (long)t * dv + c0;
        real bt = beta[t];
        for (int c = 0; c < nc; ++c) {
            u[c] = bt * ((real)vt[c] - pred[c]);
            out[c] = 0;
        }
        int next = t + 1 < T;
#if FUSE
        if (next) {
            const float *kn = kt + dk, *an = A + (long)(t + 1) * dk;
            for (int c = 0; c < nc; ++c)
                pred[c] = 0;
            for (int d = 0; d < dk; ++d) {
                real kd = kt[d], qd = (real)qt[d] * scale, ad = an[d], knd = kn[d];
                real *restrict s = S + (long)d * DV_BLOCK;
#pragma omp simd
                for (int c = 0; c < nc; ++c) {
                    real x = s[c] + kd * u[c];
                    out[c] += qd * x;
                    x *= ad;
                    s[c] = x;
                    pred[c] += knd * x;
                }
            }
            next = 0; /* token t+1 is decayed and predicted already */
        } else
#endif
        {
            for (int d = 0; d < dk; ++d) {
                real kd = kt[d], qd = (real)qt[d] * scale;
                real *restrict s = S + (long)d * DV_BLOCK;
#pragma omp simd
                for (int c = 0; c < nc; ++c) {
                    real x = s[c] + kd * u[c];
                    s[c] = x;
                    out[c] += qd * x;
                }
            }
        }
        float *ot = o + (long)t * dv + c0;
        for (int c = 0; c < nc; ++c)
            ot[c] = (float)out[c];
        if (next)
            decay_predict(S, pred, A + (long)(t + 1) * dk, kt + dk, dk, nc);
    }
    for (int d = 0; d < dk; ++d)
        for (int c = 0; c < nc; ++c)
            state[(long)d * dv + c0 + c] = (float)S[(long)d * DV_BLOCK + c];
}

static void kda_recurrent(const float *q, const float *k, const float *v, const float *g, const float *beta,
                          float *o, float *state, int BH, int T, int dk, int dv)
{
    long n = (long)BH * T * dk;
    float *A = malloc(sizeof(float) * (size_t)(n > 0 ? n : 1));
    if (!A)
        abort();
#pragma omp parallel
    {
#pragma omp for schedule(static)
        for (long i = 0; i < n; ++i)
            A[i] = exp_neg(g[i]);
        real *S = malloc(sizeof(real) * (size_t)dk * DV_BLOCK);
        if (!S)
            abort();
        int nb = (dv + DV_BLOCK - 1) / DV_BLOCK;
#pragma omp for schedule(dynamic, 1)
        for (long task = 0; task < (long)BH * nb; ++task) {
            long h = task / nb;
            int c0 = (int)(task % nb) * DV_BLOCK;
            long tk = h * T * (long)dk, tv = h * T * (long)dv;
            recurrent_task(q + tk, k + tk, v + tv, A + tk, beta + h * T, o + tv,
                           state + h * (long)dk * dv, T, dk, dv, c0, S);
        }
        free(S);
    }
    free(A);
}

/* ---- chunked ----------------------------------------------------------------------- */

typedef struct {
    real *a;    /* [C][dk]   exp(g_r) */
    real *cum;  /* [C][dk]   exp(G_r)        = prod_{s <= r} a_s */
    real *rev;  /* [C][dk]   exp(G_c - G_r)  = prod_{s > r} a_s */
    real *D;    /* [dk]      running pairwise decay */
    real *Akk;  /* [C][C]    strictly lower */
    real *Aqk;  /* [C][C]    lower incl. diagonal (scale folded in) */
    real *X;    /* [C][dv + dk]  [U | W] */
    real *Ut;   /* [C][dv]   U - W S */
    real *S;    /* [dk][dv]  state */
} scratch;

static void chunked_head(const float *restrict q, const float *restrict k, const float *restrict v,
                         const float *restrict g, const float *restrict beta, float *restrict o,
                         float *restrict state, int T, int dk, int dv, scratch *w)
{
    const real scale = (real)(1.0 / sqrt((double)dk));
    const int ld = dv + dk;
    real *S = w->S;
    memset(S, 0, sizeof(real) * (size_t)dk * dv);
    for (int t0 = 0; t0 < T; t0 += CHUNK) {
        int c = MIN(CHUNK, T - t0);
        const float *Q = q + (long)t0 * dk, *K = k + (long)t0 * dk, *V = v + (long)t0 * dv;
        const float *Gg = g + (long)t0 * dk, *B = beta + t0;
        /* decays */
        for (int r = 0; r < c; ++r)
            for (int d = 0; d < dk; ++d) {
                real a = exp_neg(Gg[(long)r * dk + d]);
                w->a[(long)r * dk + d] = a;
                w->cum[(long)r * dk + d] = r ? w->cum[(long)(r - 1) * dk + d] * a : a;
            }
        for (int d = 0; d < dk; ++d)
            w->rev[(long)(c - 1) * dk + d] = 1;
        for (int r = c - 2; r >= 0; --r)
            for (int d = 0; d < dk; ++d)
                w->rev[(long)r * dk + d] = w->rev[(long)(r + 1) * dk + d] * w->a[(long)(r + 1) * dk + d];
        /* A_kk[i][j] = sum_d k_i k_j D, A_qk[i][j] = scale sum_d q_i k_j D, D = prod_{j<s<=i} a_s */
        for (int i = 0; i < c; ++i) {
            const float *qi = Q + (long)i * dk, *ki = K + (long)i * dk;
            for (int d = 0; d < dk; ++d)
                w->D[d] = 1;
            for (int j = i; j >= 0; --j) {
                const float *kj = K + (long)j * dk;
                if (j < i) {
                    const real *an = w->a + (long)(j + 1) * dk;
                    for (int d = 0; d < dk; ++d)
                        w->D[d] *= an[d];
                }
                real sq = 0, sk = 0;
#pragma omp simd reduction(+ : sq, sk)
                for (int d = 0; d < dk; ++d) {
                    real kd = (real)kj[d] * w->D[d];
                    sq += (real)qi[d] * kd;
                    sk += (real)ki[d] * kd;
                }
                w->Aqk[i * CHUNK + j] = sq * scale;
                w->Akk[i * CHUNK + j] = j < i ? sk : 0;
            }
        }
        /* (I + Diag(beta) A_kk) X = Diag(beta) [V | exp(G) K], forward substitution */
        for (int i = 0; i < c; ++i) {
            real *xi = w->X + (long)i * ld;
            real bi = B[i];
            for (int n = 0; n < dv; ++n)
                xi[n] = V[(long)i * dv + n];
            for (int d = 0; d < dk; ++d)
                xi[dv + d] = w->cum[(long)i * dk + d] * K[(long)i * dk + d];
            /* X_i = beta_i (R_i - sum_{j<i} A_kk[i][j] X_j) */
            for (int j = 0; j < i; ++j) {
                real f = w->Akk[i * CHUNK + j];
                const real *xj = w->X + (long)j * ld;
#pragma omp simd
                for (int n = 0; n < ld; ++n)
                    xi[n] -= f * xj[n];
            }
#pragma omp simd
            for (int n = 0; n < ld; ++n)
                xi[n] *= bi;
        }
        /* U~ = U - W S;  O = scale (Q * exp(G)) S + A_qk U~ */
        for (int i = 0; i < c; ++i) {
            real *ut = w->Ut + (long)i * dv;
            const real *xi = w->X + (long)i * ld;
            for (int n = 0; n < dv; ++n)
                ut[n] = xi[n];
            for (int d = 0; d < dk; ++d) {
                real wd = xi[dv + d];
                const real *s = S + (long)d * dv;
#pragma omp simd
                for (int n = 0; n < dv; ++n)
                    ut[n] -= wd * s[n];
            }
        }
        for (int i = 0; i < c; ++i) {
            float *oi = o + (long)(t0 + i) * dv;
            real acc[dv];
            for (int n = 0; n < dv; ++n)
                acc[n] = 0;
            for (int d = 0; d < dk; ++d) {
                real qd = (real)Q[(long)i * dk + d] * scale * w->cum[(long)i * dk + d];
                const real *s = S + (long)d * dv;
#pragma omp simd
                for (int n = 0; n < dv; ++n)
                    acc[n] += qd * s[n];
            }
            for (int j = 0; j <= i; ++j) {
                real f = w->Aqk[i * CHUNK + j];
                const real *uj = w->Ut + (long)j * dv;
#pragma omp simd
                for (int n = 0; n < dv; ++n)
                    acc[n] += f * uj[n];
            }
            for (int n = 0; n < dv; ++n)
                oi[n] = (float)acc[n];
        }
        /* S = exp(G_c) S + (exp(G_c - G) * K)^T U~ */
        for (int d = 0; d < dk; ++d) {
            real *s = S + (long)d * dv;
            real gc = w->cum[(long)(c - 1) * dk + d];
#pragma omp simd
            for (int n = 0; n < dv; ++n)
                s[n] *= gc;
            for (int r = 0; r < c; ++r) {
                real f = w->rev[(long)r * dk + d] * K[(long)r * dk + d];
                const real *ur = w->Ut + (long)r * dv;
#pragma omp simd
                for (int n = 0; n < dv; ++n)
                    s[n] += f * ur[n];
            }
        }
    }
    for (long i = 0; i < (long)dk * dv; ++i)
        state[i] = (float)S[i];
}

static void kda_chunked(const float *q, const float *k, const float *v, const float *g, const float *beta,
                        float *o, float *state, int BH, int T, int dk, int dv)
{
#pragma omp parallel
    {
        scratch w;
        size_t cd = (size_t)CHUNK * dk;
        real *mem = malloc(sizeof(real) * (3 * cd + dk + 2 * CHUNK * CHUNK + (size_t)CHUNK * (dv + dk)
                                           + (size_t)CHUNK * dv + (size_t)dk * dv));
        if (!mem)
            abort();
        w.a = mem;
        w.cum = w.a + cd;
        w.rev = w.cum + cd;
        w.D = w.rev + cd;
        w.Akk = w.D + dk;
        w.Aqk = w.Akk + CHUNK * CHUNK;
        w.X = w.Aqk + CHUNK * CHUNK;
        w.Ut = w.X + (size_t)CHUNK * (dv + dk);
        w.S = w.Ut + (size_t)CHUNK * dv;
#pragma omp for schedule(dynamic, 1)
        for (int h = 0; h < BH; ++h) {
            long tk = (long)h * T * dk, tv = (long)h * T * dv;
            chunked_head(q + tk, k + tk, v + tv, g + tk, beta + (long)h * T, o + tv,
                         state + (long)h * dk * dv, T, dk, dv, &w);
        }
        free(mem);
    }
}

void kda(const float *restrict q, const float *restrict k, const float *restrict v, const float *restrict g,
         const float *restrict beta, float *restrict o, float *restrict state,
         int batch_heads, int seq, int dk, int dv)
{
    if (batch_heads <= 0 || dk <= 0 || dv <= 0)
        return;
#if ALGO == 0
    kda_recurrent(q, k, v, g, beta, o, state, batch_heads, seq, dk, dv);
#else
    kda_chunked(q, k, v, g, beta, o, state, batch_heads, seq, dk, dv);
#endif
}
