// kernels/attention.cu's kernels run on the CPU through cuda_host.h, for tests/suite/fused_attention.rs.
// Usage: attention_host IN OUT. IN holds i32 kernel (0: one warp per query, 1: tensor cores),
// d, rows, heads, kv_heads, len, keys, prefix, pos_stride, window, shared (keys every row
// shares), slots (each row's own keys' room, ≥ keys − shared), index positions (1: none given),
// row spans (1: given); f32 scale, softcap; then q (rows·heads·len·d bf16 bits), the shared
// keys and values (kv_heads·shared·d each), each row's own (rows·kv_heads·slots·d each); then
// either key positions and segments (rows·pos_stride f32 each) or the rows' spans (rows × u32
// prefix, queries). OUT gets the output's bf16 bits (as q).
#include "cuda_host.h"
#include "../../kernels/attention.cu"

#include <cstdio>

using Kernel = void (*)(const bf16*, const bf16*, const bf16*, const bf16*, const bf16*,
                        const float*, const float*, bf16*, int, int, int, int, int, int, int, int,
                        long long, long long, const unsigned*, float, float);

template <class T>
static std::vector<T> read(FILE* f, size_t n) {
    std::vector<T> x(n);
    if (fread(x.data(), sizeof(T), n, f) != n) {
        fprintf(stderr, "attention_host: input too short\n");
        exit(2);
    }
    return x;
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const auto h = read<int>(in, 14);
    const auto f = read<float>(in, 2);
    const int kind = h[0], d = h[1], rows = h[2], heads = h[3], kv_heads = h[4], len = h[5],
              keys = h[6], prefix = h[7], pos_stride = h[8], window = h[9], shared = h[10],
              slots = h[11], index_positions = h[12], spans = h[13];
    const auto q = read<bf16>(in, (size_t)rows * heads * len * d);
    const auto k_shared = read<bf16>(in, (size_t)kv_heads * shared * d);
    const auto v_shared = read<bf16>(in, (size_t)kv_heads * shared * d);
    const auto k = read<bf16>(in, (size_t)rows * kv_heads * slots * d);
    const auto v = read<bf16>(in, (size_t)rows * kv_heads * slots * d);
    const auto pos = read<float>(in, index_positions ? 0 : (size_t)rows * pos_stride);
    const auto seg = read<float>(in, index_positions ? 0 : (size_t)rows * pos_stride);
    const auto span = read<unsigned>(in, spans ? 2 * (size_t)rows : 0);
    fclose(in);

    Kernel kernel = nullptr;
    if (kind == 0) {
        switch (d) {
            case 8: kernel = attention_bf16_d8; break;
            case 16: kernel = attention_bf16_d16; break;
            case 32: kernel = attention_bf16_d32; break;
            case 64: kernel = attention_bf16_d64; break;
            case 128: kernel = attention_bf16_d128; break;
            case 256: kernel = attention_bf16_d256; break;
        }
    } else {
        switch (d) {
            case 16: kernel = attention_mma_bf16_d16; break;
            case 32: kernel = attention_mma_bf16_d32; break;
            case 64: kernel = attention_mma_bf16_d64; break;
            case 128: kernel = attention_mma_bf16_d128; break;
            case 256: kernel = attention_mma_bf16_d256; break;
        }
    }
    if (!kernel) {
        fprintf(stderr, "attention_host: no kernel %d for head dim %d\n", kind, d);
        return 2;
    }
    const unsigned queries = kind == 0 ? WARPS : MMA_QUERIES;
    const unsigned threads = kind == 0 ? 32 * WARPS : 32 * MMA_WARPS;
    std::vector<bf16> out((size_t)rows * heads * len * d);
    host_launch({(len + queries - 1) / queries, (unsigned)heads, (unsigned)rows}, {threads}, [&] {
        kernel(q.data(), k.data(), v.data(), k_shared.data(), v_shared.data(),
               index_positions ? nullptr : pos.data(), index_positions ? nullptr : seg.data(),
               out.data(), heads, kv_heads, len, keys, prefix, pos_stride, window, shared,
               (long long)kv_heads * slots * d, (long long)slots * d,
               spans ? span.data() : nullptr, f[0], f[1]);
    });
    FILE* o = fopen(argv[2], "wb");
    if (!o || fwrite(out.data(), sizeof(bf16), out.size(), o) != out.size()) return 2;
    fclose(o);
    return 0;
}
