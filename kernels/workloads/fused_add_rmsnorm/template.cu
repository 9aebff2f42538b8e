/* Fused residual add + RMSNorm, float32, CUDA.
 *
 *   extern "C" __global__ void fused_add_rmsnorm_kernel(
 *       const float *x, const float *residual, const float *w,
 *       float *y, float *residual_out, int rows, int hidden, float eps)
 *   residual_out = x + residual
 *   y = residual_out / sqrt(mean(residual_out^2) + eps) * w          (per row)
 *
 * Launch plan (launch_plan in this folder's __init__.py): grid.x = ceil(rows / ROWS_PER_BLOCK), block.x =
 * BLOCK_SIZE, dynamic shared memory = ROWS_PER_BLOCK * hidden * 4 bytes when USE_SMEM and
 * that is at most SMEM_CACHE_MAX (200 KiB), else 0.
 *
 * Pass 1 reads x and residual once, writes residual_out and accumulates its sum of squares;
 * the row's THREADS_PER_ROW threads reduce it (warp shuffles, then shared memory across
 * warps); pass 2 writes y from the row cache in shared memory (USE_SMEM) or by re-reading
 * the residual_out elements this same thread wrote (its own writes are visible to it).
 * Compulsory traffic: 2 reads + 2 writes per element.
 *
 * Tunables (prepended as #define lines; defaults below):
 *   BLOCK_SIZE, THREADS_PER_ROW, VEC, UNROLL, USE_SMEM: as in rmsnorm.cu
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

__device__ __forceinline__ vec_t add_sumsq(const vec_t a, const vec_t b, float &acc)
{
    vec_t out;
    const float *af = reinterpret_cast<const float *>(&a);
    const float *bf = reinterpret_cast<const float *>(&b);
    float *of = reinterpret_cast<float *>(&out);
#pragma unroll
    for (int k = 0; k < VEC; ++k) {
        of[k] = af[k] + bf[k];
        acc = fmaf(of[k], of[k], acc);
    }
    return out;
}

__device__ __forceinline__ vec_t scale(const vec_t rv, const vec_t wv, float inv)
{
    vec_t out;
    const float *rf = reinterpret_cast<const float *>(&rv);
    const float *wf = reinterpret_cast<const float *>(&wv);
    float *of = reinterpret_cast<float *>(&out);
#pragma unroll
    for (int k = 0; k < VEC; ++k)
        of[k] = rf[k] * inv * wf[k];
    return out;
}

/* No __launch_bounds__: with it ptxas targets 2048 resident threads and spills small blocks
 * (BLOCK_SIZE 64: 32 registers and 160 B of spills); without it, 64 registers at most. */
extern "C" __global__ void
fused_add_rmsnorm_kernel(const float *__restrict__ x, const float *__restrict__ residual,
                         const float *__restrict__ w, float *__restrict__ y,
                         float *__restrict__ residual_out, int rows, int hidden, float eps)
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
    const long base = row * (long)hidden;
    const bool cache = USE_SMEM && (long)ROWS_PER_BLOCK * hidden * 4 <= SMEM_CACHE_MAX;
    float *cr = row_cache + (long)local_row * hidden;
    float *ro = residual_out + base;
    const bool vectorised = VEC > 1 && hidden % VEC == 0;

    float acc = 0.0f;
    if (active) {
        if (vectorised) {
            const vec_t *xv = reinterpret_cast<const vec_t *>(x + base);
            const vec_t *rv = reinterpret_cast<const vec_t *>(residual + base);
            vec_t *ov = reinterpret_cast<vec_t *>(ro);
            const int n = hidden / VEC;
            for (int i = lane; i < n; i += THREADS_PER_ROW * UNROLL) {
                vec_t a[UNROLL], b[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    int j = i + u * THREADS_PER_ROW;
                    if (j < n) {
                        a[u] = xv[j];
                        b[u] = rv[j];
                    }
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    int j = i + u * THREADS_PER_ROW;
                    if (j < n) {
                        const vec_t s = add_sumsq(a[u], b[u], acc);
                        ov[j] = s;
                        if (cache)
                            reinterpret_cast<vec_t *>(cr)[j] = s;
                    }
                }
            }
        } else {
            const float *xr = x + base, *rr = residual + base;
            for (int i = lane; i < hidden; i += THREADS_PER_ROW * UNROLL) {
                float s[UNROLL];
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    int j = i + u * THREADS_PER_ROW;
                    s[u] = j < hidden ? xr[j] + rr[j] : 0.0f;
                }
#pragma unroll
                for (int u = 0; u < UNROLL; ++u) {
                    int j = i + u * THREADS_PER_ROW;
                    acc = fmaf(s[u], s[u], acc);
                    if (j < hidden) {
                        ro[j] = s[u];
                        if (cache)
                            cr[j] = s[u];
                    }
                }
            }
        }
    }

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

    float *yr = y + base;
    if (vectorised) {
        const vec_t *src = reinterpret_cast<const vec_t *>(cache ? cr : ro);
        const vec_t *wv = reinterpret_cast<const vec_t *>(w);
        vec_t *yv = reinterpret_cast<vec_t *>(yr);
        const int n = hidden / VEC;
        for (int i = lane; i < n; i += THREADS_PER_ROW)
            yv[i] = scale(src[i], wv[i], inv);
    } else {
        const float *src = cache ? cr : ro;
        for (int i = lane; i < hidden; i += THREADS_PER_ROW)
            yr[i] = src[i] * inv * w[i];
    }
}
