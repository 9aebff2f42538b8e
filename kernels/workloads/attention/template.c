/* Prefill attention (MHA / GQA, causal or bidirectional), float32, CPU (OpenMP).
 *
 *   void attention(const float *q, const float *k, const float *v, float *o, int batch, int seq,
 *                  int heads, int kv_heads, int head_dim, float causal)
 *   q, o [batch, seq, heads, D]; k, v [batch, seq, kv_heads, D]; query head h reads KV head
 *   h / (heads / kv_heads); scale = 1/sqrt(D); causal != 0 masks keys after the query.
 *
 * One task is a tile of BQ query rows of one (sequence, head). Keys stream in blocks of BK
 * with the online softmax of FlashAttention (Dao et al. 2022, arXiv:2205.14135): a running
 * maximum m, a running sum l and an unnormalised accumulator, rescaled by exp(m_old - m_new)
 * whenever the maximum grows; the output is divided by l once at the end.
 *
 * Tunables (prepended as #define lines; defaults below):
 *   BQ        query rows per tile (their K/V block loads are shared)
 *   BK        keys per block
 *   SCHEDULE  0: static, 1: dynamic scheduling of tiles (causal tiles are unequal)
 * Correct for any seq, head_dim and heads divisible by kv_heads.
 */
#include <math.h>

#ifndef BQ
#define BQ 4
#endif
#ifndef BK
#define BK 64
#endif
#ifndef SCHEDULE
#define SCHEDULE 1
#endif

static inline float dot(const float *restrict a, const float *restrict b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; ++i)
        s += a[i] * b[i];
    return s;
}

void attention(const float *restrict q, const float *restrict k, const float *restrict v, float *restrict o,
               int batch, int seq, int heads, int kv_heads, int head_dim, float causal)
{
    if (batch <= 0 || seq <= 0 || heads <= 0 || head_dim <= 0)
        return;
    const int D = head_dim, G = heads / kv_heads, is_causal = causal != 0.0f;
    const float scale = 1.0f / sqrtf((float)D);
    const int tiles = (seq + BQ - 1) / BQ;
    const long tasks = (long)batch * heads * tiles;
#if SCHEDULE
#pragma omp parallel for schedule(dynamic, 1) if (tasks > 1)
#else
#pragma omp parallel for schedule(static) if (tasks > 1)
#endif
    for (long t = 0; t < tasks; ++t) {
        int tile = (int)(t % tiles), h = (int)((t / tiles) % heads), b = (int)(t / ((long)tiles * heads));
        int i0 = tile * BQ, nq = seq - i0 < BQ ? seq - i0 : BQ, kh = h / G;
        float qs[BQ][D], acc[BQ][D], m[BQ], l[BQ], s[BQ][BK];
        for (int r = 0; r < nq; ++r) {
            const float *qr = q + (((long)b * seq + i0 + r) * heads + h) * D;
            for (int d = 0; d < D; ++d) {
                qs[r][d] = qr[d] * scale;
                acc[r][d] = 0.0f;
            }
            m[r] = -INFINITY;
            l[r] = 0.0f;
        }
        int jend = is_causal ? i0 + nq : seq;
        for (int j0 = 0; j0 < jend; j0 += BK) {
            int nk = jend - j0 < BK ? jend - j0 : BK;
            for (int jj = 0; jj < nk; ++jj) {
                const float *kr = k + (((long)b * seq + j0 + jj) * kv_heads + kh) * D;
                for (int r = 0; r < nq; ++r)
                    s[r][jj] = (is_causal && j0 + jj > i0 + r) ? -INFINITY : dot(qs[r], kr, D);
            }
            for (int r = 0; r < nq; ++r) {
                float mb = m[r];
                for (int jj = 0; jj < nk; ++jj)
                    mb = s[r][jj] > mb ? s[r][jj] : mb;
                if (mb == -INFINITY)
                    continue; /* the whole block is masked for this row */
                float corr = expf(m[r] - mb), sum = 0.0f;
                for (int jj = 0; jj < nk; ++jj) {
                    s[r][jj] = expf(s[r][jj] - mb);
                    sum += s[r][jj];
                }
                l[r] = l[r] * corr + sum;
                m[r] = mb;
#pragma omp simd
                for (int d = 0; d < D; ++d)
                    acc[r][d] *= corr;
            }
            for (int jj = 0; jj < nk; ++jj) {
                const float *vr = v + (((long)b * seq + j0 + jj) * kv_heads + kh) * D;
                for (int r = 0; r < nq; ++r) {
                    float p = s[r][jj];
                    if (p == 0.0f || m[r] == -INFINITY)
                        continue;
#pragma omp simd
                    for (int d = 0; d < D; ++d)
                        acc[r][d] += p * vr[d];
                }
            }
        }
        for (int r = 0; r < nq; ++r) {
            float *orow = o + (((long)b * seq + i0 + r) * heads + h) * D;
            float inv = 1.0f / l[r];
            for (int d = 0; d < D; ++d)
                orow[d] = acc[r][d] * inv;
        }
    }
}
