/* Softmax over the last axis, float32, CUDA, numerically stable.
 *
 *   extern "C" __global__ void softmax_kernel(const float *x, float *y, int rows, int cols)
 *   y[r, i] = exp(x[r, i] - max_j x[r, j]) / sum_j exp(x[r, j] - max_j x[r, j])
 *
 * Launch plan (launch_plan in this folder's __init__.py): grid.x = ceil(rows / ROWS_PER_BLOCK), block.x =
 * BLOCK_SIZE, dynamic shared memory = ROWS_PER_BLOCK * cols * 4 bytes when USE_SMEM and
 * that is at most SMEM_CACHE_MAX (200 KiB), else 0 (then x is re-read from global/L2).
 *
 * THREADS_PER_ROW threads share a row. ONLINE = 1 computes the maximum and the sum of
 * exponentials in one pass with rescaling (Milakov & Gimelshein 2018, "Online normalizer
 * calculation for softmax", arXiv:1805.02867), then writes y in a second pass: two reads
 * of x (or one with USE_SMEM). ONLINE = 0 takes the maximum first, then the sum, then
 * writes: three reads.
 *
 * Tunables (prepended as #define lines; defaults below):
 *   BLOCK_SIZE       threads per block (multiple of 32)
 *   THREADS_PER_ROW  threads per row (power of two, 8..1024, divides BLOCK_SIZE)
 *   VEC              floats per load/store: 1, 2 or 4, used when cols % VEC == 0
 *   ONLINE           1: one-pass max+sum (online softmax); 0: separate max and sum passes
 *   USE_SMEM         1: keep the row in dynamic shared memory after the first pass, when
 *                    the block's rows fit in SMEM_CACHE_MAX bytes
 * Correct for any rows >= 0 and cols >= 1, with -inf (masked) logits anywhere as long as
 * each row has one finite value.
 */

#ifndef BLOCK_SIZE
#define BLOCK_SIZE 256
#endif
#ifndef THREADS_PER_ROW
#define THREADS_PER_ROW 256
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef ONLINE
#define ONLINE 1
#endif
#ifndef USE_SMEM
#define USE_SMEM 0
#endif
#define SMEM_CACHE_MAX (200 * 1024) /* keep in sync with the launch plan's expression */

#if BLOCK_SIZE % 32 != 0 || BLOCK_SIZE > 1024
#error "BLOCK_SIZE must be a multiple of 32, at most 1024"
#endif
#if (THREADS_PER_ROW & (THREADS_PER_ROW - 1)) != 0 || THREADS_PER_ROW < 1 || BLOCK_SIZE % THREADS_PER_ROW != 0
#error "THREADS_PER_ROW must be a power of two dividing BLOCK_SIZE"
#endif
#if VEC != 1 && VEC != 2 && VEC != 4
#error "VEC must be 1, 2 or 4"
#endif

#define ROWS_PER_BLOCK (BLOCK_SIZE / THREADS_PER_ROW)
#define SHFL_WIDTH (THREADS_PER_ROW < 32 ? THREADS_PER_ROW : 32)
#define WARPS_PER_ROW (THREADS_PER_ROW > 32 ? THREADS_PER_ROW / 32 : 1)

#if VEC == 4
typedef float4 vec_t;
#elif VEC == 2
typedef float2 vec_t;
#else
typedef float vec_t;
#endif

#define NEG_INF (-__int_as_float(0x7f800000))

/* (m, s): running maximum and sum of exp(v - m). Merging handles empty (-inf) partners. */
__device__ __forceinline__ void merge(float &m, float &s, float m2, float s2)
{
    const float mn = fmaxf(m, m2);
    if (mn == NEG_INF)
        return; /* both empty */
    s = s * expf(m - mn) + s2 * expf(m2 - mn);
    m = mn;
}

__device__ __forceinline__ float row_max(float m)
{
#pragma unroll
    for (int off = SHFL_WIDTH / 2; off > 0; off >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    return m;
}

__device__ __forceinline__ float row_sum(float s)
{
#pragma unroll
    for (int off = SHFL_WIDTH / 2; off > 0; off >>= 1)
        s += __shfl_xor_sync(0xffffffffu, s, off);
    return s;
}

/* No __launch_bounds__: with it ptxas targets 2048 resident threads and spills small blocks
 * (BLOCK_SIZE 64: 32 registers and 160 B of spills); without it, 64 registers at most. */
extern "C" __global__ void
softmax_kernel(const float *__restrict__ x, float *__restrict__ y, int rows, int cols)
{
    extern __shared__ __align__(16) float row_cache[]; /* ROWS_PER_BLOCK * cols floats if cache */
#if WARPS_PER_ROW > 1
    __shared__ float part_m[BLOCK_SIZE / 32];
    __shared__ float part_s[BLOCK_SIZE / 32];
#endif
    const int tid = threadIdx.x;
    const int lane = tid % THREADS_PER_ROW;
    const int local_row = tid / THREADS_PER_ROW;
    const long row = (long)blockIdx.x * ROWS_PER_BLOCK + local_row;
    const bool active = row < rows; /* no early return before the barriers */
    const float *xr = x + row * (long)cols;
    float *yr = y + row * (long)cols;
    const bool cache = USE_SMEM && (long)ROWS_PER_BLOCK * cols * 4 <= SMEM_CACHE_MAX;
    float *cr = row_cache + (long)local_row * cols;
    const bool vectorised = VEC > 1 && cols % VEC == 0;
    const int n = vectorised ? cols / VEC : cols;
    const int width = vectorised ? VEC : 1;

    /* Pass 1: maximum (and, ONLINE, the rescaled sum) of this thread's slice. */
    float m = NEG_INF, s = 0.0f;
    if (active) {
        for (int i = lane; i < n; i += THREADS_PER_ROW) {
            float v[VEC];
            if (vectorised) {
                const vec_t t = reinterpret_cast<const vec_t *>(xr)[i];
#pragma unroll
                for (int k = 0; k < VEC; ++k)
                    v[k] = reinterpret_cast<const float *>(&t)[k];
                if (cache)
                    reinterpret_cast<vec_t *>(cr)[i] = t;
            } else {
                v[0] = xr[i];
                if (cache)
                    cr[i] = v[0];
            }
#pragma unroll
            for (int k = 0; k < VEC; ++k) {
                if (k >= width)
                    break;
#if ONLINE
                if (v[k] > m) {
                    s = s * expf(m - v[k]) + 1.0f; /* m = -inf: expf(-inf) = 0 */
                    m = v[k];
                } else if (m != NEG_INF) {
                    s += expf(v[k] - m); /* skipped while m = v = -inf (masked tokens) */
                }
#else
                m = fmaxf(m, v[k]);
#endif
            }
        }
    }

#if ONLINE
    /* Reduce (m, s) pairs across the row's threads. */
#pragma unroll
    for (int off = SHFL_WIDTH / 2; off > 0; off >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
#if WARPS_PER_ROW > 1
    if ((tid & 31) == 0) {
        part_m[tid >> 5] = m;
        part_s[tid >> 5] = s;
    }
    __syncthreads();
    m = NEG_INF;
    s = 0.0f;
#pragma unroll
    for (int k = 0; k < WARPS_PER_ROW; ++k)
        merge(m, s, part_m[local_row * WARPS_PER_ROW + k], part_s[local_row * WARPS_PER_ROW + k]);
#endif
#else
    m = row_max(m);
#if WARPS_PER_ROW > 1
    if ((tid & 31) == 0)
        part_m[tid >> 5] = m;
    __syncthreads();
    m = NEG_INF;
#pragma unroll
    for (int k = 0; k < WARPS_PER_ROW; ++k)
        m = fmaxf(m, part_m[local_row * WARPS_PER_ROW + k]);
#endif
    /* Pass 2: sum of exponentials with the row maximum known. */
    s = 0.0f;
    if (active) {
        const float *src = cache ? cr : xr;
        for (int i = lane; i < n; i += THREADS_PER_ROW) {
            if (vectorised) {
                const vec_t t = reinterpret_cast<const vec_t *>(src)[i];
#pragma unroll
                for (int k = 0; k < VEC; ++k)
                    s += expf(reinterpret_cast<const float *>(&t)[k] - m);
            } else {
                s += expf(src[i] - m);
            }
        }
    }
    s = row_sum(s);
#if WARPS_PER_ROW > 1
    if ((tid & 31) == 0)
        part_s[tid >> 5] = s;
    __syncthreads();
    s = 0.0f;
#pragma unroll
    for (int k = 0; k < WARPS_PER_ROW; ++k)
        s += part_s[local_row * WARPS_PER_ROW + k];
#endif
#endif
    if (!active)
        return;
    const float inv = 1.0f / s;

    /* Last pass: y = exp(x - m) / s; each thread rewrites the elements it read, so the
     * shared-memory row cache needs no barrier. */
    const float *src = cache ? cr : xr;
    for (int i = lane; i < n; i += THREADS_PER_ROW) {
        if (vectorised) {
            const vec_t t = reinterpret_cast<const vec_t *>(src)[i];
            vec_t o;
#pragma unroll
            for (int k = 0; k < VEC; ++k)
                reinterpret_cast<float *>(&o)[k] = expf(reinterpret_cast<const float *>(&t)[k] - m) * inv;
            reinterpret_cast<vec_t *>(yr)[i] = o;
        } else {
            yr[i] = expf(src[i] - m) * inv;
        }
    }
}
