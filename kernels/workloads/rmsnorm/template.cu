/* RMSNorm, float32, CUDA.
 *
 *   extern "C" __global__ void rmsnorm_kernel(const float *x, const float *w, float *y,
 *                                             int rows, int hidden, float eps)
 *   y[r, i] = x[r, i] / sqrt(mean_i(x[r, i]^2) + eps) * w[i]
 *
 * Launch plan (launch_plan in this folder's __init__.py): grid.x = ceil(rows / ROWS_PER_BLOCK), block.x =
 * BLOCK_SIZE, dynamic shared memory = ROWS_PER_BLOCK * hidden * 4 bytes when USE_SMEM and
 * that is at most SMEM_CACHE_MAX (200 KiB), else 0 (then the row is re-read from global).
 *
 * THREADS_PER_ROW threads share a row (ROWS_PER_BLOCK = BLOCK_SIZE / THREADS_PER_ROW rows
 * per block): each accumulates a strided slice of the sum of squares, the group reduces it
 * with warp shuffles (and, above 32 threads per row, one shared-memory step), then every
 * thread writes its slice of y = x * inv_rms * w.
 *
 * Tunables (prepended as #define lines; defaults below):
 *   BLOCK_SIZE       threads per block (multiple of 32)
 *   THREADS_PER_ROW  threads per row (power of two, 8..1024, divides BLOCK_SIZE)
 *   VEC              floats per load/store: 1, 2 (float2) or 4 (float4); used when
 *                    hidden % VEC == 0 (rows stay aligned), else the scalar path runs
 *   UNROLL           independent loads in flight per thread per iteration
 *   USE_SMEM         1: keep the row in dynamic shared memory between the two passes
 *                    (the second pass reads shared memory instead of global/L2) when the
 *                    block's rows fit in SMEM_CACHE_MAX bytes
 * Correct for any rows >= 0 and hidden >= 1.
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
#ifndef UNROLL
#define UNROLL 2
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

__device__ __forceinline__ float sumsq(const vec_t v)
{
    const float *f = reinterpret_cast<const float *>(&v);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VEC; ++k)
        s = fmaf(f[k], f[k], s);
    return s;
}

__device__ __forceinline__ vec_t scale(const vec_t xv, const vec_t wv, float inv)
{
    vec_t out;
    const float *xf = reinterpret_cast<const float *>(&xv);
    const float *wf = reinterpret_cast<const float *>(&wv);
    float *of = reinterpret_cast<float *>(&out);
#pragma unroll
    for (int k = 0; k < VEC; ++k)
        of[k] = xf[k] * inv * wf[k];
    return out;
}

/* No __launch_bounds__: with it ptxas targets 2048 resident threads and spills small blocks
 * (BLOCK_SIZE 64: 32 registers and 160 B of spills); without it, 64 registers at most. */
extern "C" __global__ void
rmsnorm_kernel(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ y,
               int rows, int hidden, float eps)
{
    extern __shared__ __align__(16) float row_cache[]; /* ROWS_PER_BLOCK * hidden floats if cache */
#if WARPS_PER_ROW > 1
    __shared__ float partial[BLOCK_SIZE / 32];
#endif
    const int tid = threadIdx.x;
    const int lane = tid % THREADS_PER_ROW;
    const int local_row = tid / THREADS_PER_ROW;
    const long row = (long)blockIdx.x * ROWS_PER_BLOCK + local_row;
    const bool active = row < rows; /* no early return: the whole block reaches the barrier */
    const float *xr = x + row * (long)hidden;
    float *yr = y + row * (long)hidden;
    const bool cache = USE_SMEM && (long)ROWS_PER_BLOCK * hidden * 4 <= SMEM_CACHE_MAX;
    float *cr = row_cache + (long)local_row * hidden;
    const bool vectorised = VEC > 1 && hidden % VEC == 0;

    float acc = 0.0f;
    if (active) {
        if (vectorised) {
            const vec_t *xv = reinterpret_cast<const vec_t *>(xr);
            const int n = hidden / VEC;
            for (int i = lane; i < n; i += THREADS_PER_ROW * UNROLL) {
                vec_t v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    int j = i + u * THREADS_PER_ROW;
                    if (j < n)
                        v[u] = xv[j];
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    int j = i + u * THREADS_PER_ROW;
                    if (j < n) {
                        acc += sumsq(v[u]);
                        if (cache)
                            reinterpret_cast<vec_t *>(cr)[j] = v[u];
                    }
                }
            }
        } else {
            for (int i = lane; i < hidden; i += THREADS_PER_ROW * UNROLL) {
                float v[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    int j = i + u * THREADS_PER_ROW;
                    v[u] = j < hidden ? xr[j] : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    int j = i + u * THREADS_PER_ROW;
                    acc = fmaf(v[u], v[u], acc);
                    if (cache && j < hidden)
                        cr[j] = v[u];
                }
            }
        }
    }

    /* Reduce within the row's threads: shuffles inside each warp (segments of SHFL_WIDTH
     * lanes never mix rows), then across the row's warps through shared memory. */
#pragma unroll
    for (int off = SHFL_WIDTH / 2; off > 0; off >>= 1)
        acc += __shfl_xor_sync(0xffffffffu, acc, off);
#if WARPS_PER_ROW > 1
    if ((tid & 31) == 0)
        partial[tid >> 5] = acc;
    __syncthreads();
    acc = 0.0f;
#pragma unroll
    for (int k = 0; k < WARPS_PER_ROW; ++k)
        acc += partial[local_row * WARPS_PER_ROW + k];
#endif
    if (!active)
        return;
    const float inv = rsqrtf(acc / (float)hidden + eps);

    /* Second pass: every thread rewrites exactly the elements it read, so the shared-memory
     * row cache needs no barrier. */
    if (vectorised) {
        const vec_t *wv = reinterpret_cast<const vec_t *>(w);
        vec_t *yv = reinterpret_cast<vec_t *>(yr);
        const vec_t *src = reinterpret_cast<const vec_t *>(cache ? cr : xr);
        const int n = hidden / VEC;
        for (int i = lane; i < n; i += THREADS_PER_ROW)
            yv[i] = scale(src[i], wv[i], inv);
    } else {
        const float *src = cache ? cr : xr;
        for (int i = lane; i < hidden; i += THREADS_PER_ROW)
            yr[i] = src[i] * inv * w[i];
    }
}
