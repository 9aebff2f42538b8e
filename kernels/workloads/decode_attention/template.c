/* Decode attention over a KV cache (one query token per sequence, MHA / GQA), float32,
 * CPU (OpenMP).
 *
 *   void decode_attention(const float *q, const float *k, const float *v, float *o, int batch,
 *                         int kv_len, int heads, int kv_heads, int head_dim)
 *   q, o [batch, heads, D]; k, v [batch, kv_len, kv_heads, D]; scale = 1/sqrt(D)
 *
 * Keys stream in blocks of BK with the online softmax (running max, running sum, rescaled
 * accumulator). With GROUP=1 one task serves the G = heads / kv_heads query heads that share
 * a KV head, so every cached key and value is read once per group instead of once per head
 * (the GQA reuse that decode kernels such as FlashInfer's exploit).
 *
 * Tunables (prepended as #define lines; defaults below):
 *   BK     keys per block
 *   GROUP  1: one task per (sequence, KV head) serving its query heads; 0: one per query head
 * Correct for any kv_len >= 1, head_dim, heads divisible by kv_heads.
 */
#include <math.h>
#include <stdlib.h>

#ifndef BK
#define BK 64
#endif
#ifndef GROUP
#define GROUP 1
#endif

static inline float dot(const float *restrict a, const float *restrict b, int n)
{
    float s = 0.0f;
#pragma omp simd reduction(+ : s)
    for (int i = 0; i < n; ++i)
        s += a[i] * b[i];
    return s;
}

void decode_attention(const float *restrict q, const float *restrict k, const float *restrict v, float *restrict o,
                      int batch, int kv_len, int heads, int kv_heads, int head_dim)
{
    if (batch <= 0 || heads <= 0 || head_dim <= 0 || kv_len <= 0)
        return;
    const int D = head_dim, G = heads / kv_heads;
    const float scale = 1.0f / sqrtf((float)D);
#if GROUP
    const int per_task = G;
    const long tasks = (long)batch * kv_heads;
#else
    const int per_task = 1;
    const long tasks = (long)batch * heads;
#endif
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (long t = 0; t < tasks; ++t) {
#if GROUP
        int b = (int)(t / kv_heads), kh = (int)(t % kv_heads), h0 = kh * G;
#else
        int b = (int)(t / heads), h0 = (int)(t % heads), kh = h0 / G;
#endif
        float *acc = malloc(sizeof(float) * (size_t)per_task * D);
        float *qs = malloc(sizeof(float) * (size_t)per_task * D);
        float m[per_task], l[per_task], s[per_task][BK];
        for (int g = 0; g < per_task; ++g) {
            const float *qr = q + ((long)b * heads + h0 + g) * D;
            for (int d = 0; d < D; ++d) {
                qs[g * D + d] = qr[d] * scale;
                acc[g * D + d] = 0.0f;
            }
            m[g] = -INFINITY;
            l[g] = 0.0f;
        }
        for (int j0 = 0; j0 < kv_len; j0 += BK) {
            int nk = kv_len - j0 < BK ? kv_len - j0 : BK;
            for (int jj = 0; jj < nk; ++jj) {
                const float *kr = k + (((long)b * kv_len + j0 + jj) * kv_heads + kh) * D;
                for (int g = 0; g < per_task; ++g)
                    s[g][jj] = dot(qs + g * D, kr, D);
            }
            for (int g = 0; g < per_task; ++g) {
                float mb = m[g];
                for (int jj = 0; jj < nk; ++jj)
                    mb = s[g][jj] > mb ? s[g][jj] : mb;
                float corr = expf(m[g] - mb), sum = 0.0f;
                for (int jj = 0; jj < nk; ++jj) {
                    s[g][jj] = expf(s[g][jj] - mb);
                    sum += s[g][jj];
                }
                l[g] = l[g] * corr + sum;
                m[g] = mb;
                float *a = acc + g * D;
#pragma omp simd
                for (int d = 0; d < D; ++d)
                    a[d] *= corr;
            }
            for (int jj = 0; jj < nk; ++jj) {
                const float *vr = v + (((long)b * kv_len + j0 + jj) * kv_heads + kh) * D;
                for (int g = 0; g < per_task; ++g) {
                    float p = s[g][jj], *a = acc + g * D;
#pragma omp simd
                    for (int d = 0; d < D; ++d)
                        a[d] += p * vr[d];
                }
            }
        }
        for (int g = 0; g < per_task; ++g) {
            float *orow = o + ((long)b * heads + h0 + g) * D, inv = 1.0f / l[g];
            for (int d = 0; d < D; ++d)
                orow[d] = acc[g * D + d] * inv;
        }
        free(acc);
        free(qs);
    }
}
