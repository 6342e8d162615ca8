// kernels/expand.cu's kernels run on the CPU through cuda_host.h, for tests/suite/expand_kernels.rs.
// Usage: expand_host TYPE VALUES IN OUT: IN holds the GGUF blocks of VALUES values of TYPE
// (q4_0, q4_1, q5_0, q5_1, q8_0, q2_K, q3_K, q4_K, q5_K, q6_K); OUT gets their bf16 bits.
#include "cuda_host.h"
#include "../../kernels/expand.cu"

#include <cstdio>
#include <string>

int main(int argc, char** argv) {
    if (argc != 5) return 2;
    const std::string type = argv[1];
    const long values = std::stol(argv[2]);
    void (*kernel)(const u8*, bf16*, long) = nullptr;
    if (type == "q4_0") kernel = expand_q4_0_bf16;
    if (type == "q4_1") kernel = expand_q4_1_bf16;
    if (type == "q5_0") kernel = expand_q5_0_bf16;
    if (type == "q5_1") kernel = expand_q5_1_bf16;
    if (type == "q8_0") kernel = expand_q8_0_bf16;
    if (type == "q2_K") kernel = expand_q2_K_bf16;
    if (type == "q3_K") kernel = expand_q3_K_bf16;
    if (type == "q4_K") kernel = expand_q4_K_bf16;
    if (type == "q5_K") kernel = expand_q5_K_bf16;
    if (type == "q6_K") kernel = expand_q6_K_bf16;
    FILE* in = fopen(argv[3], "rb");
    if (!kernel || !in || values % 8) return 2;
    std::vector<u8> blocks;
    for (int c; (c = fgetc(in)) != EOF;) blocks.push_back((u8)c);
    fclose(in);
    host_load_begin = blocks.data();
    host_load_end = blocks.data() + blocks.size();
    std::vector<bf16> out(values);
    const long groups = values / 8;
    // Two blocks, whatever the size: each thread strides through several pairs of groups, the
    // last pair part full (hyoka launches one block per 512 groups; tests/suite/expand_kernels.rs runs
    // that on a GPU).
    host_launch_serial({2}, {256},
                       [&] { kernel(blocks.data(), out.data(), groups); });
    FILE* o = fopen(argv[4], "wb");
    if (!o || fwrite(out.data(), 2, out.size(), o) != out.size()) return 2;
    fclose(o);
    return 0;
}
