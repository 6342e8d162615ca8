// GGUF blocks to bf16 in one pass (src/model/cuda_expand.rs), for the GEMMs of weights kept as
// stored. candle's CUDA path writes f32 through kernels of 32-thread blocks, then casts: three
// passes over the expanded matrix. Here each thread writes 8 consecutive values as one 16-byte
// store, in blocks of 256 threads. Every value is computed as candle's CPU `to_float` computes
// it (llama.cpp's reference dequantization) — same operations in the same order, no fused
// multiply-add — then rounded to bf16 to nearest even, so the result is bit for bit the CPU's
// expansion cast to bf16 (tests/expand_kernels.rs). Compiled at run time by NVRTC: no headers.

typedef unsigned short bf16;
typedef unsigned char u8;

// Rounded as written: the compiler may not fuse a product and a sum into one rounding.
#define MUL(a, b) __fmul_rn(a, b)
#define ADD(a, b) __fadd_rn(a, b)
#define SUB(a, b) __fsub_rn(a, b)

__device__ __forceinline__ float f16_to_f32(const u8* p) {
    const unsigned h = (unsigned)p[0] | ((unsigned)p[1] << 8);
    const unsigned sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: man · 2^-24, exact
        const float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

__device__ __forceinline__ unsigned bf16_bits(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return u >> 16;
}

// Eight values to out[8·i ..]: one 16-byte store.
__device__ __forceinline__ void store8(bf16* out, long i, const float (&y)[8]) {
    uint4 w;
    w.x = bf16_bits(y[0]) | (bf16_bits(y[1]) << 16);
    w.y = bf16_bits(y[2]) | (bf16_bits(y[3]) << 16);
    w.z = bf16_bits(y[4]) | (bf16_bits(y[5]) << 16);
    w.w = bf16_bits(y[6]) | (bf16_bits(y[7]) << 16);
    *(uint4*)(out + 8 * i) = w;
}

// The k-quants' 6-bit scale and min of sub-block j (llama.cpp's get_scale_min_k4).
__device__ __forceinline__ void scale_min_k4(int j, const u8* q, int& d, int& m) {
    if (j < 4) {
        d = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

// Thread i writes values 8i .. 8i + 7 of `groups` · 8 values; blocks of `size` bytes hold
// `per` values each.
#define EXPAND(name, size, per)                                                                \
    extern "C" __global__ void expand_##name##_bf16(const u8* __restrict__ blocks,            \
                                                    bf16* __restrict__ out, long groups) {     \
        const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;                            \
        if (i >= groups) return;                                                               \
        const u8* b = blocks + (8 * i / per) * size;                                           \
        const int o = (int)(8 * i % per);                                                      \
        float y[8];                                                                            \
        name##_values(b, o, y);                                                                \
        store8(out, i, y);                                                                     \
    }

// Q4_0: f16 d, 16 bytes of nibbles; value j (< 16) the low nibble of byte j, j + 16 the high.
__device__ __forceinline__ void q4_0_values(const u8* b, int o, float (&y)[8]) {
    const float d = f16_to_f32(b);
    for (int e = 0; e < 8; e++) {
        const int j = (o % 16) + e, q = b[2 + j];
        y[e] = MUL((float)((o < 16 ? q & 0xF : q >> 4) - 8), d);
    }
}

// Q5_0: f16 d, 4 bytes of fifth bits, 16 bytes of nibbles.
__device__ __forceinline__ void q5_0_values(const u8* b, int o, float (&y)[8]) {
    const float d = f16_to_f32(b);
    const unsigned qh = b[2] | (b[3] << 8) | (b[4] << 16) | ((unsigned)b[5] << 24);
    for (int e = 0; e < 8; e++) {
        const int j = (o % 16) + e, q = b[6 + j];
        const int x = o < 16 ? ((q & 0xF) | (((qh >> j) << 4) & 0x10))
                             : ((q >> 4) | ((qh >> (j + 12)) & 0x10));
        y[e] = MUL((float)(x - 16), d);
    }
}

// Q8_0: f16 d, 32 signed bytes.
__device__ __forceinline__ void q8_0_values(const u8* b, int o, float (&y)[8]) {
    const float d = f16_to_f32(b);
    for (int e = 0; e < 8; e++) y[e] = MUL((float)(signed char)b[2 + o + e], d);
}

// Where value o of a Q4_K or Q5_K block lies: in the 64 values p, the high nibbles or not, at
// byte l of its 32; and its sub-block's scale d1 and offset m1 (f16 d, f16 dmin, then 12 bytes
// of 6-bit scales and mins).
struct KSubBlock {
    int p, high, l;
    float d1, m1;
};

__device__ __forceinline__ KSubBlock k_sub_block(const u8* b, int o) {
    const float d = f16_to_f32(b), dmin = f16_to_f32(b + 2);
    const int p = o / 64, high = (o / 32) % 2;
    int sc, m;
    scale_min_k4(2 * p + high, b + 4, sc, m);
    return {p, high, o % 32, MUL(d, (float)sc), MUL(dmin, (float)m)};
}

// Q4_K: the scales, then 128 bytes of nibbles: per 64 values, 32 bytes whose low nibbles are
// sub-block 2p and high nibbles 2p + 1.
__device__ __forceinline__ void q4_K_values(const u8* b, int o, float (&y)[8]) {
    const KSubBlock s = k_sub_block(b, o);
    for (int e = 0; e < 8; e++) {
        const int q = b[16 + 32 * s.p + s.l + e];
        y[e] = SUB(MUL(s.d1, (float)(s.high ? q >> 4 : q & 0xF)), s.m1);
    }
}

// Q5_K: as Q4_K with 32 bytes of fifth bits (bit 2p + high of byte l) before the nibbles.
__device__ __forceinline__ void q5_K_values(const u8* b, int o, float (&y)[8]) {
    const KSubBlock s = k_sub_block(b, o);
    for (int e = 0; e < 8; e++) {
        const int q = b[48 + 32 * s.p + s.l + e], h = b[16 + s.l + e] >> (2 * s.p + s.high) & 1;
        const float x = ADD((float)(s.high ? q >> 4 : q & 0xF), h ? 16.0f : 0.0f);
        y[e] = SUB(MUL(s.d1, x), s.m1);
    }
}

// Q6_K: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 signed scales, f16 d; per 128
// values n, quarter r of 32: nibble of ql[64n + l + 32 (r & 1)] (high for r ≥ 2), bits 2r of
// qh[32n + l], scale 8n + l / 16 + 2r.
__device__ __forceinline__ void q6_K_values(const u8* b, int o, float (&y)[8]) {
    const float d = f16_to_f32(b + 208);
    const int n = o / 128, r = (o % 128) / 32, l = o % 32;
    const float ds = MUL(d, (float)(signed char)b[192 + 8 * n + l / 16 + 2 * r]);
    for (int e = 0; e < 8; e++) {
        const int lo = b[64 * n + l + e + 32 * (r & 1)], hi = b[128 + 32 * n + l + e];
        const int q = ((r >= 2 ? lo >> 4 : lo & 0xF) | (((hi >> (2 * r)) & 3) << 4)) - 32;
        y[e] = MUL(ds, (float)q);
    }
}

EXPAND(q4_0, 18, 32)
EXPAND(q5_0, 22, 32)
EXPAND(q8_0, 34, 32)
EXPAND(q4_K, 144, 256)
EXPAND(q5_K, 176, 256)
EXPAND(q6_K, 210, 256)
