// Runs a CUDA C++ kernel on the CPU, every CUDA thread a fiber of its own (ucontext), for tests
// on machines without a GPU (tests/suite/fused_attention.rs): the kernel's index arithmetic,
// barriers and warp exchanges run as written. The fibers of a block take turns on one OS thread,
// each running until it waits at a barrier, so a barrier costs a few context switches in user
// space rather than wake-ups of as many OS threads, and a read of shared memory that a missing
// barrier leaves unwritten reads the wrong value every time. `__shared__` variables become
// function statics, so blocks run one at a time. Warp-collective operations (`__shfl_*_sync`, `mma_bf16`) exchange through per-warp
// slots between two warp barriers; `mma_bf16` is PTX's `mma.m16n8k16.row.col` with the register
// layout of the PTX ISA ("Matrix Fragments for mma.m16n8k16 with floating point type"),
// written here independently of the kernel that uses it.
#pragma once
#include <sys/mman.h>
#include <ucontext.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

// CUDA's integer min/max: mixed signedness compares in the common type, as there.
template <class A, class B>
inline std::common_type_t<A, B> min(A a, B b) {
    using T = std::common_type_t<A, B>;
    return (T)a < (T)b ? (T)a : (T)b;
}
template <class A, class B>
inline std::common_type_t<A, B> max(A a, B b) {
    using T = std::common_type_t<A, B>;
    return (T)a < (T)b ? (T)b : (T)a;
}

struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};
inline dim3 gridDim, blockDim;
// The running fiber's indices: the scheduler sets them each time it resumes a fiber.
inline dim3 threadIdx, blockIdx;

// One CUDA thread: its context and indices, and whether its kernel has returned.
struct HostFiber {
    ucontext_t context;
    dim3 index;
    bool done = false;
};
inline ucontext_t host_scheduler;
inline HostFiber* host_running = nullptr;
// Arrivals at barriers so far: a round of the fibers that adds none, and finishes none, is a
// deadlock (a barrier that some thread never reaches).
inline unsigned long long host_arrivals = 0;

inline void host_yield() { swapcontext(&host_running->context, &host_scheduler); }

// std::barrier's arrive_and_wait for fibers: the last to arrive opens it for the others.
struct HostBarrier {
    int expected, arrived = 0;
    unsigned long long generation = 0;
    explicit HostBarrier(int n) : expected(n) {}
    void arrive_and_wait() {
        host_arrivals++;
        if (++arrived == expected) {
            arrived = 0;
            generation++;
            return;
        }
        const unsigned long long mine = generation;
        while (generation == mine) host_yield();
    }
};

#define __device__
#define __global__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(n)
#define __align__(n) __attribute__((aligned(n)))
#define ATTENTION_HOST_MMA 1
#define HYOKA_HOST_EMULATION 1

struct uint4 {
    unsigned x, y, z, w;
};
struct uint2 {
    unsigned x, y;
};
inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
// Loads through this check (kernels/expand.cu's `load`): a GPU faults on a load of n bytes at
// an address not a multiple of n, and may read another tensor's bytes, or fault, past the end
// of its own, where the CPU would do neither. The extent [host_load_begin, host_load_end), when
// an emulator sets it, is what loads may read.
inline const unsigned char *host_load_begin = nullptr, *host_load_end = nullptr;
inline void host_check_load(const void* p, unsigned long n) {
    const unsigned char* b = (const unsigned char*)p;
    if ((unsigned long long)p % n != 0) {
        std::fprintf(stderr, "misaligned load: %lu bytes at %p\n", n, p);
        std::abort();
    }
    if (host_load_begin && (b < host_load_begin || b + n > host_load_end)) {
        std::fprintf(stderr, "load outside the tensor: %lu bytes at offset %ld of %ld\n", n,
                     (long)(b - host_load_begin), (long)(host_load_end - host_load_begin));
        std::abort();
    }
}
// The low 32 bits of (hi:lo) >> (shift mod 32).
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned shift) {
    return (unsigned)((((unsigned long long)hi << 32) | lo) >> (shift & 31));
}
// Built with -ffp-contract=off: each operation rounds once, as these intrinsics do.
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }

inline float __int_as_float(int x) { float f; std::memcpy(&f, &x, 4); return f; }
inline float __uint_as_float(unsigned x) { float f; std::memcpy(&f, &x, 4); return f; }
inline unsigned __float_as_uint(float f) { unsigned x; std::memcpy(&x, &f, 4); return x; }

constexpr int MAX_WARPS = 32;
struct HostBlock {
    HostBarrier all;
    std::vector<std::unique_ptr<HostBarrier>> warps;
    float lanes[MAX_WARPS][32];
    struct Mma { unsigned a[4], b[2]; } mma[MAX_WARPS][32];
    explicit HostBlock(int threads) : all(threads) {
        for (int w = 0; w < (threads + 31) / 32; w++)
            warps.push_back(std::make_unique<HostBarrier>(min(32, threads - 32 * w)));
    }
};
inline HostBlock* host_block;

inline void __syncthreads() { host_block->all.arrive_and_wait(); }

inline float host_exchange(float x, int from_lane) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32;
    host_block->lanes[w][lane] = x;
    host_block->warps[w]->arrive_and_wait();
    const float r = host_block->lanes[w][from_lane];
    host_block->warps[w]->arrive_and_wait();
    return r;
}
inline float __shfl_xor_sync(unsigned, float x, int mask) {
    return host_exchange(x, (threadIdx.x % 32) ^ mask);
}
inline float __shfl_sync(unsigned, float x, int lane) { return host_exchange(x, lane); }

inline float host_bf16(unsigned bits) { return __uint_as_float((bits & 0xffffu) << 16); }

// D = A·B + C for A 16×16 (row-major), B 16×8 (column-major), bf16; C, D 16×8 f32. Per PTX:
// with g = lane / 4, t = lane % 4, A's registers hold (row g, cols 2t..2t+1), (row g + 8,
// cols 2t..), (row g, cols 2t + 8..), (row g + 8, cols 2t + 8..); B's (rows 2t..2t+1, col g),
// (rows 2t + 8.., col g); C's and D's (row g, cols 2t, 2t + 1), (row g + 8, cols 2t, 2t + 1);
// the lower column or row of a pair in the low half of a register.
inline void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    const int w = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    auto& slots = host_block->mma[w];
    std::memcpy(slots[lane].a, a, sizeof a);
    slots[lane].b[0] = b0;
    slots[lane].b[1] = b1;
    host_block->warps[w]->arrive_and_wait();
    auto A = [&](int r, int k) {
        const unsigned x = slots[(r % 8) * 4 + (k % 8) / 2].a[r / 8 + 2 * (k / 8)];
        return host_bf16(k % 2 ? x >> 16 : x);
    };
    auto B = [&](int k, int n) {
        const unsigned x = slots[n * 4 + (k % 8) / 2].b[k / 8];
        return host_bf16(k % 2 ? x >> 16 : x);
    };
    float d[4];
    for (int e = 0; e < 4; e++) {
        const int r = g + 8 * (e / 2), n = 2 * t + e % 2;
        float s = c[e];
        for (int k = 0; k < 16; k++) s += A(r, k) * B(k, n);
        d[e] = s;
    }
    host_block->warps[w]->arrive_and_wait();
    std::memcpy(c, d, sizeof d);
}

template <class Kernel>
inline Kernel* host_kernel = nullptr;

template <class Kernel>
void host_fiber_main() {
    (*host_kernel<Kernel>)();
    host_running->done = true;  // back to the scheduler through uc_link
}

// Runs kernel() for every thread of every block, blocks one after another, the block's threads
// as fibers in turn.
template <class Kernel>
void host_launch(dim3 grid, dim3 block, Kernel kernel) {
    gridDim = grid;
    blockDim = block;
    host_kernel<Kernel> = &kernel;
    const size_t stack = 256 << 10;
    const unsigned n = block.x;
    // Stacks are reserved, not committed: a fiber touches a few pages of its own.
    void* stacks = mmap(nullptr, stack * n, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (stacks == MAP_FAILED) {
        std::perror("host_launch: mmap");
        std::abort();
    }
    std::vector<HostFiber> fibers(n);
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++) {
                HostBlock b(n);
                host_block = &b;
                blockIdx = {x, y, z};
                for (unsigned i = 0; i < n; i++) {
                    HostFiber& f = fibers[i];
                    f.index = {i, 0, 0};
                    f.done = false;
                    getcontext(&f.context);
                    f.context.uc_stack.ss_sp = (char*)stacks + stack * i;
                    f.context.uc_stack.ss_size = stack;
                    f.context.uc_link = &host_scheduler;
                    makecontext(&f.context, (void (*)())host_fiber_main<Kernel>, 0);
                }
                for (unsigned left = n; left > 0;) {
                    const unsigned long long arrivals = host_arrivals;
                    const unsigned before = left;
                    for (HostFiber& f : fibers) {
                        if (f.done) continue;
                        host_running = &f;
                        threadIdx = f.index;
                        swapcontext(&host_scheduler, &f.context);
                        left -= f.done;
                    }
                    if (left == before && host_arrivals == arrivals) {
                        std::fprintf(stderr, "host_launch: every thread waits at a barrier that "
                                             "some thread never reaches\n");
                        std::abort();
                    }
                }
            }
    host_running = nullptr;
    munmap(stacks, stack * n);
}

// For kernels without barriers or warp exchanges: every thread in turn, on this thread.
template <class Kernel>
void host_launch_serial(dim3 grid, dim3 block, Kernel kernel) {
    gridDim = grid;
    blockDim = block;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned x = 0; x < grid.x; x++)
                for (unsigned i = 0; i < block.x; i++) {
                    threadIdx = {i, 0, 0};
                    blockIdx = {x, y, z};
                    kernel();
                }
}
