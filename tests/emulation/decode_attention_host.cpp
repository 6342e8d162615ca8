// kernels/decode_attention.cu's attention kernel runs on the CPU through cuda_host.h, for
// tests/suite/decode_attention.rs. Usage: decode_attention_host IN OUT. IN holds i32 dtype (0 bf16,
// 1 f16, 2 f32), d, rows, heads, kv_heads, len, h (header keys), slots (cache slots a row),
// window, segments, queries (the longest segment's); f32 scale, softcap; then, as the dtype's
// bits, q (rows·heads·len·d), the step's k and v (rows·kv_heads·len·d each), the header's keys
// and values (kv_heads·h·d each) and the cache's (rows·kv_heads·slots·d each); then the
// segments (4 u32 each). OUT gets the output as the dtype's bits (q's shape).
#include "cuda_host.h"

inline float host_f16_to_f32(unsigned short x) {
    _Float16 h;
    std::memcpy(&h, &x, 2);
    return (float)h;
}
inline unsigned short host_f32_to_f16(float f) {
    const _Float16 h = (_Float16)f;
    unsigned short x;
    std::memcpy(&x, &h, 2);
    return x;
}

#include "../../kernels/decode_attention.cu"

template <class T>
static std::vector<T> read(FILE* f, size_t n) {
    std::vector<T> x(n);
    if (fread(x.data(), sizeof(T), n, f) != n) {
        fprintf(stderr, "decode_attention_host: input too short\n");
        exit(2);
    }
    return x;
}

template <class T, int D>
static int run(FILE* in, const std::vector<int>& n, const std::vector<float>& f, const char* out_path) {
    const int rows = n[2], heads = n[3], kv_heads = n[4], len = n[5], h = n[6], slots = n[7],
              window = n[8], segments = n[9], queries = n[10];
    const auto q = read<T>(in, (size_t)rows * heads * len * D);
    const auto k = read<T>(in, (size_t)rows * kv_heads * len * D);
    const auto v = read<T>(in, (size_t)rows * kv_heads * len * D);
    const auto hk = read<T>(in, (size_t)kv_heads * h * D);
    const auto hv = read<T>(in, (size_t)kv_heads * h * D);
    const auto ck = read<T>(in, (size_t)rows * kv_heads * slots * D);
    const auto cv = read<T>(in, (size_t)rows * kv_heads * slots * D);
    const auto segs = read<unsigned>(in, 4 * (size_t)segments);
    std::vector<T> out((size_t)rows * heads * len * D);  // zero: as the caller's buffer
    host_launch({(unsigned)queries, (unsigned)heads, (unsigned)segments}, {32 * DECODE_WARPS}, [&] {
        decode_attention<T, D>(q.data(), k.data(), v.data(), ck.data(), cv.data(),
                               (long long)kv_heads * slots * D, (long long)slots * D, hk.data(),
                               hv.data(), h, segs.data(), out.data(), heads, kv_heads, len, window,
                               f[0], f[1]);
    });
    FILE* o = fopen(out_path, "wb");
    if (!o || fwrite(out.data(), sizeof(T), out.size(), o) != out.size()) return 2;
    fclose(o);
    return 0;
}

template <class T>
static int by_dim(FILE* in, const std::vector<int>& n, const std::vector<float>& f, const char* out) {
    switch (n[1]) {
        case 8: return run<T, 8>(in, n, f, out);
        case 64: return run<T, 64>(in, n, f, out);
        case 128: return run<T, 128>(in, n, f, out);
        case 256: return run<T, 256>(in, n, f, out);
    }
    fprintf(stderr, "decode_attention_host: no head dim %d here\n", n[1]);
    return 2;
}

int main(int argc, char** argv) {
    if (argc != 3) return 2;
    FILE* in = fopen(argv[1], "rb");
    if (!in) return 2;
    const auto n = read<int>(in, 11);
    const auto f = read<float>(in, 2);
    switch (n[0]) {
        case 0: return by_dim<bf16_t>(in, n, f, argv[2]);
        case 1: return by_dim<f16_t>(in, n, f, argv[2]);
        case 2: return by_dim<float>(in, n, f, argv[2]);
    }
    return 2;
}
