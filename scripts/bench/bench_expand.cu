// The bf16 expansion kernels (kernels/expand.cu) timed alone on a GPU, each block type on a
// 14,336 × 4,096 matrix (an 8B's MLP shape) of random blocks, launched as hyoka launches them
// (src/model/quant/cuda/cuda_expand.rs: 256 threads, a grid of one thread per GROUPS groups of 8 values);
// against a device-to-device copy and a memset of the bf16 matrix's size in the same run, the
// bandwidth an expansion could reach. Median of 20 launches after 3. Correctness is
// tests/suite/expand_kernels.rs's (bit for bit against the CPU); this program only times.
//
// Build (here, without a GPU; scripts/gpu/gpu_bundle.sh does it into the bundle):
//   eval "$(scripts/gpu/cuda_toolchain.sh)"; nvcc -O3 -arch=sm_80 -o bench_expand scripts/bench/bench_expand.cu
// Run on the GPU machine: ./bench_expand
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "../../kernels/expand.cu"

#define CHECK(x)                                                                   \
    do {                                                                           \
        cudaError_t e = (x);                                                       \
        if (e != cudaSuccess) {                                                    \
            std::printf("CUDA error %s at line %d\n", cudaGetErrorString(e), __LINE__); \
            std::exit(1);                                                          \
        }                                                                          \
    } while (0)

typedef void (*Kernel)(const u8*, bf16*, long);
struct Type {
    const char* name;
    int size, per;
    int f16_at[2];  // byte offsets of a block's f16 scales (made finite here)
    Kernel kernel;
};

template <class F>
static float median_us(F launch) {
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) launch();
    std::vector<float> t;
    for (int i = 0; i < 20; i++) {
        cudaEventRecord(a);
        launch();
        cudaEventRecord(b);
        cudaEventSynchronize(b);
        float ms;
        cudaEventElapsedTime(&ms, a, b);
        t.push_back(ms * 1000);
    }
    CHECK(cudaGetLastError());
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

int main() {
    const long values = 14336L * 4096, groups = values / 8;
    const Type types[] = {
        {"q4_0", 18, 32, {0, 0}, expand_q4_0_bf16},    {"q4_1", 20, 32, {0, 2}, expand_q4_1_bf16},
        {"q5_0", 22, 32, {0, 0}, expand_q5_0_bf16},    {"q5_1", 24, 32, {0, 2}, expand_q5_1_bf16},
        {"q8_0", 34, 32, {0, 0}, expand_q8_0_bf16},    {"q2_K", 84, 256, {80, 82}, expand_q2_K_bf16},
        {"q3_K", 110, 256, {108, 108}, expand_q3_K_bf16}, {"q4_K", 144, 256, {0, 2}, expand_q4_K_bf16},
        {"q5_K", 176, 256, {0, 2}, expand_q5_K_bf16},  {"q6_K", 210, 256, {208, 208}, expand_q6_K_bf16},
    };
    u8* in;
    bf16 *out, *copy;
    CHECK(cudaMalloc(&in, values / 32 * 34));
    CHECK(cudaMalloc(&out, values * 2));
    CHECK(cudaMalloc(&copy, values * 2));
    // MB per µs is TB/s.
    const double out_mb = values * 2 / 1e6;
    const float copy_us = median_us([&] { cudaMemcpyAsync(copy, out, values * 2, cudaMemcpyDeviceToDevice); });
    const float set_us = median_us([&] { cudaMemsetAsync(out, 1, values * 2); });
    const double copy_tbs = 2 * out_mb / copy_us;
    std::printf("copy of %.0f MB: %.1f us, %.2f TB/s read + written; memset %.1f us, %.2f TB/s\n",
                out_mb, copy_us, copy_tbs, set_us, out_mb / set_us);
    std::mt19937 rng(7);
    const int threads = 256, per_thread = GROUPS;  // as cuda_expand.rs launches them
    for (const Type& t : types) {
        const long blocks = values / t.per, bytes = blocks * t.size;
        std::vector<u8> host(bytes);
        for (auto& x : host) x = (u8)rng();
        for (long b = 0; b < blocks; b++)
            for (int at : t.f16_at) {
                const unsigned short h = (unsigned short)((rng() % 2) << 15 | (3 + rng() % 20) << 10 | rng() % 1024);
                std::memcpy(&host[b * t.size + at], &h, 2);
            }
        CHECK(cudaMemcpy(in, host.data(), bytes, cudaMemcpyHostToDevice));
        const unsigned grid = (unsigned)((groups + threads * per_thread - 1) / (threads * per_thread));
        const float us = median_us([&] { t.kernel<<<grid, threads>>>(in, out, groups); });
        const double tbs = (bytes / 1e6 + out_mb) / us;
        std::printf("%-5s %7.1f us  %.2f TB/s read + written  %.2f of the copy's rate\n", t.name, us, tbs,
                    tbs / copy_tbs);
    }
    return 0;
}
