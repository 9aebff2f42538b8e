/* GEMM, float32, CUDA: the Linear-layer convention Y = X W^T.
 *
 *   C[m, n] = sum_k A[m, k] * B[n, k]      A [M, K], B [N, K], C [M, N], row-major
 *
 *   extern "C" __global__ void gemm_kernel(const float *A, const float *B, float *C,
 *                                          int M, int N, int K, int k_chunk)
 *   extern "C" __global__ void gemm_splitk_reduce(const float *partial, float *C,
 *                                                 int MN, int splits)
 *
 * Launch plan (launch_plan in this folder's __init__.py): gemm_kernel on grid (ceil(N / BLOCK_N),
 * ceil(M / BLOCK_M), SPLIT_K) with (BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N) threads.
 * Block z sums k in [z * k_chunk, min(K, (z + 1) * k_chunk)) and writes its tile to
 * C + z * M * N: with SPLIT_K == 1 that is C itself; with SPLIT_K > 1 it is a float32
 * scratch buffer of SPLIT_K * M * N partial sums that gemm_splitk_reduce adds into C
 * (more blocks for the decode shapes, where M is 1 and K is long).
 *
 * Each block computes a BLOCK_M x BLOCK_N tile of C; each thread a THREAD_M x THREAD_N
 * micro-tile held in registers, its rows and columns strided by the thread grid so that
 * neighbouring threads read neighbouring shared-memory words and write neighbouring C
 * elements (coalesced). Per BLOCK_K slice of k, the A and B tiles are staged in shared
 * memory transposed (k-major), padded by SMEM_PAD words per row against bank conflicts.
 *
 * Tunables (prepended as #define lines; defaults below):
 *   BLOCK_M, BLOCK_N   tile of C per block
 *   BLOCK_K            k slice staged per iteration
 *   THREAD_M, THREAD_N micro-tile per thread (accumulators in registers)
 *   VEC                4: float4 global loads along k when K % 4 == 0; 1: scalar loads
 *   SMEM_PAD           words of padding per shared-memory row (0 or 1)
 *   USE_SMEM           0: no shared memory, every thread reads A and B through L1
 *   SPLIT_K            k partitions (1: direct; >1: partial sums + reduce kernel)
 * Correct for any M, N >= 1 and K >= 0 (out-of-range tile elements load as zero).
 */

#ifndef BLOCK_M
#define BLOCK_M 64
#endif
#ifndef BLOCK_N
#define BLOCK_N 64
#endif
#ifndef BLOCK_K
#define BLOCK_K 16
#endif
#ifndef THREAD_M
#define THREAD_M 4
#endif
#ifndef THREAD_N
#define THREAD_N 4
#endif
#ifndef VEC
#define VEC 4
#endif
#ifndef SMEM_PAD
#define SMEM_PAD 1
#endif
#ifndef USE_SMEM
#define USE_SMEM 1
#endif
#ifndef SPLIT_K
#define SPLIT_K 1
#endif

#define TX (BLOCK_N / THREAD_N) /* threads along n */
#define TY (BLOCK_M / THREAD_M) /* threads along m */
#define NTHREADS (TX * TY)

#if BLOCK_M % THREAD_M != 0 || BLOCK_N % THREAD_N != 0
#error "THREAD_M must divide BLOCK_M and THREAD_N must divide BLOCK_N"
#endif
#if NTHREADS > 1024
#error "(BLOCK_M / THREAD_M) * (BLOCK_N / THREAD_N) must be at most 1024 threads"
#endif
#if VEC != 1 && VEC != 4
#error "VEC must be 1 or 4"
#endif
#if VEC == 4 && BLOCK_K % 4 != 0
#error "VEC 4 needs BLOCK_K % 4 == 0"
#endif

#if USE_SMEM
/* Copy rows [r0, r0 + ROWS) x cols [k0, k0 + BLOCK_K) of src (ld = K) into dst[k][r]
 * (k-major, row length ROWS + SMEM_PAD); zero outside rows < nrows and cols < k_end. */
template <int ROWS>
__device__ __forceinline__ void load_tile(const float *__restrict__ src, float (*dst)[ROWS + SMEM_PAD],
                                          int nrows, int K, int r0, int k0, int k_end, bool vec4)
{
    const int tid = threadIdx.x;
    if (VEC == 4 && vec4) {
        /* k_end and k0 are multiples of 4 here: a float4 is wholly inside or outside */
        for (int idx = tid; idx < ROWS * (BLOCK_K / 4); idx += NTHREADS) {
            const int r = idx / (BLOCK_K / 4), c = (idx % (BLOCK_K / 4)) * 4;
            const int gr = r0 + r, gc = k0 + c;
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (gr < nrows && gc < k_end)
                v = *reinterpret_cast<const float4 *>(src + (long)gr * K + gc);
            dst[c + 0][r] = v.x;
            dst[c + 1][r] = v.y;
            dst[c + 2][r] = v.z;
            dst[c + 3][r] = v.w;
        }
    } else {
        for (int idx = tid; idx < ROWS * BLOCK_K; idx += NTHREADS) {
            const int r = idx / BLOCK_K, c = idx % BLOCK_K;
            const int gr = r0 + r, gc = k0 + c;
            dst[c][r] = (gr < nrows && gc < k_end) ? src[(long)gr * K + gc] : 0.0f;
        }
    }
}
#endif

extern "C" __global__ void __launch_bounds__(NTHREADS)
gemm_kernel(const float *__restrict__ A, const float *__restrict__ B, float *__restrict__ C,
            int M, int N, int K, int k_chunk)
{
    const int tid = threadIdx.x;
    const int tx = tid % TX, ty = tid / TX;
    const int m0 = blockIdx.y * BLOCK_M, n0 = blockIdx.x * BLOCK_N;
    const int k_begin = blockIdx.z * k_chunk;
    const int k_end = min(K, k_begin + k_chunk);
    float *Cz = C + (long)blockIdx.z * M * N;

    float acc[THREAD_M][THREAD_N];
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j)
            acc[i][j] = 0.0f;

#if USE_SMEM
    __shared__ __align__(16) float As[BLOCK_K][BLOCK_M + SMEM_PAD];
    __shared__ __align__(16) float Bs[BLOCK_K][BLOCK_N + SMEM_PAD];
    const bool vec4 = (K % 4) == 0 && (k_chunk % 4) == 0;
    for (int k0 = k_begin; k0 < k_end; k0 += BLOCK_K) {
        load_tile<BLOCK_M>(A, As, M, K, m0, k0, k_end, vec4);
        load_tile<BLOCK_N>(B, Bs, N, K, n0, k0, k_end, vec4);
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BLOCK_K; ++kk) {
            float a[THREAD_M], b[THREAD_N];
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i)
                a[i] = As[kk][ty + i * TY];
#pragma unroll
            for (int j = 0; j < THREAD_N; ++j)
                b[j] = Bs[kk][tx + j * TX];
#pragma unroll
            for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
                for (int j = 0; j < THREAD_N; ++j)
                    acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
#else
    /* Direct: each thread streams its rows of A and B from global memory (L1/L2 cached). */
    const float *Ar[THREAD_M];
    const float *Br[THREAD_N];
#pragma unroll
    for (int i = 0; i < THREAD_M; ++i)
        Ar[i] = A + (long)min(m0 + ty + i * TY, M - 1) * K;
#pragma unroll
    for (int j = 0; j < THREAD_N; ++j)
        Br[j] = B + (long)min(n0 + tx + j * TX, N - 1) * K;
    for (int k = k_begin; k < k_end; ++k) {
        float a[THREAD_M], b[THREAD_N];
#pragma unroll
        for (int i = 0; i < THREAD_M; ++i)
            a[i] = __ldg(Ar[i] + k);
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j)
            b[j] = __ldg(Br[j] + k);
#pragma unroll
        for (int i = 0; i < THREAD_M; ++i)
#pragma unroll
            for (int j = 0; j < THREAD_N; ++j)
                acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
#endif

#pragma unroll
    for (int i = 0; i < THREAD_M; ++i) {
        const int m = m0 + ty + i * TY;
        if (m >= M)
            continue;
#pragma unroll
        for (int j = 0; j < THREAD_N; ++j) {
            const int n = n0 + tx + j * TX;
            if (n < N)
                Cz[(long)m * N + n] = acc[i][j];
        }
    }
}

/* C[i] = sum_z partial[z * MN + i], in a fixed order (deterministic). */
extern "C" __global__ void __launch_bounds__(256)
gemm_splitk_reduce(const float *__restrict__ partial, float *__restrict__ C, int MN, int splits)
{
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= MN)
        return;
    float s = 0.0f;
    for (int z = 0; z < splits; ++z)
        s += partial[(long)z * MN + i];
    C[i] = s;
}
