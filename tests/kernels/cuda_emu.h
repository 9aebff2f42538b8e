/* A CPU emulation of the CUDA execution model, for testing kernels without a GPU.
 *
 * Blocks run one after another; the threads of a block run as real std::threads, so
 * __syncthreads() (a std::barrier over the block) and __shfl_xor_sync() (a per-warp exchange
 * buffer between two warp barriers) have their CUDA meaning. __shared__ variables become
 * function statics (one block at a time shares them), extern __shared__ arrays point to a
 * per-launch dynamic buffer (cuda_emu.py rewrites those declarations). A thread that
 * returns drops out of the barriers, like an exited CUDA thread.
 *
 * Not emulated: memory-model races beyond barriers, warp divergence timing, atomics,
 * cooperative groups, textures, half types. Good enough to check indexing, bounds,
 * reductions and barriers of simple kernels.
 */
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
struct alignas(8) float2 { float x, y; };
struct alignas(16) float4 { float x, y, z, w; };
static inline float2 make_float2(float a, float b) { return {a, b}; }
static inline float4 make_float4(float a, float b, float c, float d) { return {a, b, c, d}; }

thread_local dim3 threadIdx, blockIdx;
static dim3 blockDim, gridDim;
static const int warpSize = 32;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__ __restrict

namespace emu {
static std::unique_ptr<std::barrier<>> block_barrier;
static std::vector<std::unique_ptr<std::barrier<>>> warp_barriers;
static std::vector<uint64_t> shfl_buf;
static std::vector<unsigned char> dyn_smem_buf;
thread_local int linear_tid = 0;
static unsigned char *dyn_smem() { return dyn_smem_buf.data(); }
}  // namespace emu

static inline void __syncthreads() { emu::block_barrier->arrive_and_wait(); }

template <class T>
static inline T __shfl_xor_sync(unsigned, T v, int off, int width = 32)
{
    const int lane = emu::linear_tid & 31, warp = emu::linear_tid >> 5;
    T *buf = reinterpret_cast<T *>(&emu::shfl_buf[warp * 32]);
    buf[lane] = v;
    emu::warp_barriers[warp]->arrive_and_wait();
    int src = lane ^ off;
    if ((src & ~(width - 1)) != (lane & ~(width - 1)))
        src = lane;
    T r = buf[src];
    emu::warp_barriers[warp]->arrive_and_wait();
    return r;
}

template <class T>
static inline T __ldg(const T *p) { return *p; }
static inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
#define __expf(x) expf(x)
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
using std::max;
using std::min;

/* Run `body` (a call of the kernel) for every thread of every block. */
static void emu_launch(dim3 grid, dim3 block, size_t smem, const std::function<void()> &body)
{
    const int nthreads = block.x * block.y * block.z;
    gridDim = grid;
    blockDim = block;
    emu::dyn_smem_buf.assign(smem + 64, 0xFF); /* garbage, like real shared memory */
    emu::shfl_buf.assign(((nthreads + 31) / 32) * 32, 0);
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                emu::block_barrier = std::make_unique<std::barrier<>>(nthreads);
                emu::warp_barriers.clear();
                for (int w = 0; w * 32 < nthreads; ++w)
                    emu::warp_barriers.push_back(std::make_unique<std::barrier<>>(std::min(32, nthreads - w * 32)));
                std::vector<std::thread> threads;
                threads.reserve(nthreads);
                for (int t = 0; t < nthreads; ++t)
                    threads.emplace_back([&, t, bx, by, bz] {
                        blockIdx = {bx, by, bz};
                        threadIdx = {t % block.x, (t / block.x) % block.y, t / (block.x * block.y)};
                        emu::linear_tid = t;
                        body();
                        emu::warp_barriers[t >> 5]->arrive_and_drop();
                        emu::block_barrier->arrive_and_drop();
                    });
                for (auto &th : threads)
                    th.join();
            }
}

static std::vector<unsigned char> emu_read(const char *path)
{
    FILE *f = std::fopen(path, "rb");
    if (!f) { std::perror(path); std::exit(2); }
    std::fseek(f, 0, SEEK_END);
    long n = std::ftell(f);
    std::fseek(f, 0, SEEK_SET);
    std::vector<unsigned char> buf(n + 64);
    if (std::fread(buf.data(), 1, n, f) != (size_t)n) { std::perror(path); std::exit(2); }
    std::fclose(f);
    buf.resize(n);
    return buf;
}

static void emu_write(const char *path, const void *data, size_t n)
{
    FILE *f = std::fopen(path, "wb");
    if (!f || std::fwrite(data, 1, n, f) != n) { std::perror(path); std::exit(2); }
    std::fclose(f);
}
