// GGUF blocks to bf16 in one pass (src/model/cuda_expand.rs), for the GEMMs of weights kept as
// stored. candle's CUDA path writes f32 through kernels of 32-thread blocks, then casts: three
// passes over the expanded matrix. Here a thread expands groups of 8 consecutive values, each
// written as one 16-byte store, reading a group's bytes in 4- to 16-byte words; it loads the
// words of two groups before expanding either (loads in flight while it computes). Every value
// is computed as candle's CPU `to_float` computes it (llama.cpp's reference dequantization) —
// same operations in the same order, no fused multiply-add — then rounded to bf16 to nearest
// even, so the result is bit for bit the CPU's expansion cast to bf16 (tests/expand_kernels.rs;
// a NaN stays a NaN, not necessarily with its payload). Compiled at run time by NVRTC: no
// headers.

typedef unsigned short bf16;
typedef unsigned char u8;

// Rounded as written: the compiler may not fuse a product and a sum into one rounding.
#define MUL(a, b) __fmul_rn(a, b)
#define ADD(a, b) __fadd_rn(a, b)
#define SUB(a, b) __fsub_rn(a, b)

__device__ __forceinline__ float f16_to_f32(unsigned h) {
    const unsigned sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
    if (exp == 0) {  // zero or subnormal: man · 2^-24, exact
        const float f = (float)man * 5.9604644775390625e-8f;
        return sign ? -f : f;
    }
    if (exp == 31) return __uint_as_float(sign | 0x7f800000u | (man << 13));
    return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
}

// x < 2^23 as a float, exactly: 2^23 + x has x in its mantissa (an add at full rate, where an
// integer conversion runs at a quarter of it).
__device__ __forceinline__ float small_uint(unsigned x) {
    return SUB(__uint_as_float(0x4b000000u | x), 8388608.0f);
}

// Two floats to bf16, rounded to nearest even: (a, b) as the low and high half. GPUs before
// compute capability 8.0 have no bf16 conversion; the second body is also what the tests'
// emulation on the CPU runs (the first is checked on a GPU: tests/expand_kernels.rs).
__device__ __forceinline__ unsigned bf16x2(float a, float b) {
#if __CUDA_ARCH__ >= 800
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(b), "f"(a));
    return r;
#else
    unsigned u[2] = {__float_as_uint(a), __float_as_uint(b)};
    for (int k = 0; k < 2; k++)
        u[k] = (u[k] & 0x7fffffffu) > 0x7f800000u ? 0x7fffu
                                                   : (u[k] + 0x7fffu + ((u[k] >> 16) & 1u)) >> 16;
    return u[0] | (u[1] << 16);
#endif
}

// Eight values to out[8·i ..]: one 16-byte store.
__device__ __forceinline__ void store8(bf16* out, long i, const float (&y)[8]) {
    uint4 w;
    w.x = bf16x2(y[0], y[1]);
    w.y = bf16x2(y[2], y[3]);
    w.z = bf16x2(y[4], y[5]);
    w.w = bf16x2(y[6], y[7]);
    *(uint4*)(out + 8 * i) = w;
}

__device__ __forceinline__ unsigned byte_of(unsigned w, int k) { return (w >> (8 * k)) & 0xffu; }

// Byte k (0..7) of the 8 bytes (x, y).
__device__ __forceinline__ unsigned byte8(uint2 w, int k) {
    return byte_of(k < 4 ? w.x : w.y, k % 4);
}

// 8 bytes at an even address, in aligned 4-byte words: blocks of 18, 22, 34 or 210 bytes leave
// a group's bytes 2-aligned only. (A word that holds one of the bytes lies in the allocation.)
__device__ __forceinline__ uint2 load8_even(const u8* p) {
    const unsigned* a = (const unsigned*)((unsigned long long)p & ~3ull);
    const unsigned w0 = a[0], w1 = a[1];
    if (((unsigned long long)p & 3) == 0) return make_uint2(w0, w1);
    const unsigned w2 = a[2];
    return make_uint2(__funnelshift_r(w0, w1, 16), __funnelshift_r(w1, w2, 16));
}

__device__ __forceinline__ unsigned load_u16(const u8* p) { return *(const unsigned short*)p; }

// The k-quants' 6-bit scale and min of sub-block j (llama.cpp's get_scale_min_k4), from the 12
// scale bytes as three words.
__device__ __forceinline__ void scale_min_k4(int j, unsigned s0, unsigned s1, unsigned s2, int& d,
                                             int& m) {
    const int k = j % 4;
    const unsigned a = byte_of(s0, k), b = byte_of(s1, k), c = byte_of(s2, k);
    if (j < 4) {  // bytes j and j + 4
        d = a & 63;
        m = b & 63;
    } else {  // bytes j + 4 (low 4 bits), j - 4 and j (top 2)
        d = (c & 0xF) | ((a >> 6) << 4);
        m = (c >> 4) | ((b >> 6) << 4);
    }
}

// Per block type: `raw` holds the words a group's 8 values come from, `load` reads them for the
// group at value o of block b, `values` expands them.

// Q4_0: f16 d, 16 bytes of nibbles; value j (< 16) the low nibble of byte j, j + 16 the high.
struct q4_0_raw {
    unsigned d;
    uint2 q;
};
__device__ __forceinline__ q4_0_raw q4_0_load(const u8* b, int o) {
    return {load_u16(b), load8_even(b + 2 + o % 16)};
}
__device__ __forceinline__ void q4_0_values(const q4_0_raw& r, int o, float (&y)[8]) {
    const float d = f16_to_f32(r.d);
    for (int e = 0; e < 8; e++) {
        const unsigned q = byte8(r.q, e);
        y[e] = MUL(SUB(small_uint(o < 16 ? q & 0xF : q >> 4), 8.0f), d);
    }
}

// Q5_0: f16 d, 4 bytes of fifth bits, 16 bytes of nibbles.
struct q5_0_raw {
    unsigned d, qh;
    uint2 q;
};
__device__ __forceinline__ q5_0_raw q5_0_load(const u8* b, int o) {
    return {load_u16(b), load_u16(b + 2) | (load_u16(b + 4) << 16), load8_even(b + 6 + o % 16)};
}
__device__ __forceinline__ void q5_0_values(const q5_0_raw& r, int o, float (&y)[8]) {
    const float d = f16_to_f32(r.d);
    for (int e = 0; e < 8; e++) {
        const unsigned j = o % 16 + e, q = byte8(r.q, e);
        const unsigned x = o < 16 ? ((q & 0xF) | (((r.qh >> j) << 4) & 0x10))
                                  : ((q >> 4) | ((r.qh >> (j + 12)) & 0x10));
        y[e] = MUL(SUB(small_uint(x), 16.0f), d);
    }
}

// Q8_0: f16 d, 32 signed bytes (as x ^ 0x80 − 128).
struct q8_0_raw {
    unsigned d;
    uint2 q;
};
__device__ __forceinline__ q8_0_raw q8_0_load(const u8* b, int o) {
    return {load_u16(b), load8_even(b + 2 + o)};
}
__device__ __forceinline__ void q8_0_values(const q8_0_raw& r, int o, float (&y)[8]) {
    const float d = f16_to_f32(r.d);
    for (int e = 0; e < 8; e++) y[e] = MUL(SUB(small_uint(byte8(r.q, e) ^ 0x80u), 128.0f), d);
}

// Q4_K and Q5_K open with a 16-byte head: f16 d, f16 dmin, 12 bytes of 6-bit scales and mins.
// Value o lies in the 64 values o / 64, in the high nibbles or not ((o / 32) % 2), at byte o % 32
// of their 32; its sub-block's scale is d1, its offset m1.
struct KSubBlock {
    float d1, m1;
};
__device__ __forceinline__ KSubBlock k_sub_block(const uint4& head, int o) {
    const float d = f16_to_f32(head.x & 0xffffu), dmin = f16_to_f32(head.x >> 16);
    int sc, m;
    scale_min_k4(o / 32, head.y, head.z, head.w, sc, m);
    return {MUL(d, small_uint(sc)), MUL(dmin, small_uint(m))};
}

// Q4_K: the head, then 128 bytes of nibbles: per 64 values, 32 bytes whose low nibbles are the
// first 32 values and high nibbles the next. Blocks of 144 bytes: every load is aligned.
struct q4_K_raw {
    uint4 head;
    uint2 q;
};
__device__ __forceinline__ q4_K_raw q4_K_load(const u8* b, int o) {
    return {*(const uint4*)b, *(const uint2*)(b + 16 + 32 * (o / 64) + o % 32)};
}
__device__ __forceinline__ void q4_K_values(const q4_K_raw& r, int o, float (&y)[8]) {
    const KSubBlock s = k_sub_block(r.head, o);
    const int shift = (o / 32) % 2 ? 4 : 0;
    for (int e = 0; e < 8; e++) {
        const unsigned q = (byte8(r.q, e) >> shift) & 0xF;
        y[e] = SUB(MUL(s.d1, small_uint(q)), s.m1);
    }
}

// Q5_K: as Q4_K with 32 bytes of fifth bits (bit o / 32 of byte o % 32) before the nibbles.
// Blocks of 176 bytes: every load is aligned.
struct q5_K_raw {
    uint4 head;
    uint2 qh, q;
};
__device__ __forceinline__ q5_K_raw q5_K_load(const u8* b, int o) {
    return {*(const uint4*)b, *(const uint2*)(b + 16 + o % 32),
            *(const uint2*)(b + 48 + 32 * (o / 64) + o % 32)};
}
__device__ __forceinline__ void q5_K_values(const q5_K_raw& r, int o, float (&y)[8]) {
    const KSubBlock s = k_sub_block(r.head, o);
    const int shift = (o / 32) % 2 ? 4 : 0, bit = o / 32;
    for (int e = 0; e < 8; e++) {
        const unsigned q = (byte8(r.q, e) >> shift) & 0xF, h = (byte8(r.qh, e) >> bit) & 1;
        const float x = ADD(small_uint(q), h ? 16.0f : 0.0f);
        y[e] = SUB(MUL(s.d1, x), s.m1);
    }
}

// Q6_K: 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 signed scales, f16 d; per 128
// values n, quarter r of 32: nibble of ql[64n + l + 32 (r & 1)] (high for r ≥ 2), bits 2r of
// qh[32n + l], scale 8n + l / 16 + 2r.
struct q6_K_raw {
    unsigned d, scale;
    uint2 lo, hi;
};
__device__ __forceinline__ q6_K_raw q6_K_load(const u8* b, int o) {
    const int n = o / 128, r = (o % 128) / 32, l = o % 32;
    return {load_u16(b + 208), b[192 + 8 * n + l / 16 + 2 * r],
            load8_even(b + 64 * n + l + 32 * (r & 1)), load8_even(b + 128 + 32 * n + l)};
}
__device__ __forceinline__ void q6_K_values(const q6_K_raw& raw, int o, float (&y)[8]) {
    const int r = (o % 128) / 32;
    const float ds = MUL(f16_to_f32(raw.d), (float)(signed char)raw.scale);
    for (int e = 0; e < 8; e++) {
        const unsigned lo = byte8(raw.lo, e), hi = byte8(raw.hi, e);
        const unsigned q = (r >= 2 ? lo >> 4 : lo & 0xF) | (((hi >> (2 * r)) & 3) << 4);
        y[e] = MUL(ds, SUB(small_uint(q), 32.0f));
    }
}

// Groups of 8 values a thread loads before it expands them (cuda_expand.rs sizes the grid for
// it). On an H100, a 14,336 × 4,096 Q4_K matrix with 1, 2, 4, 8: 60.9, 59.3, 60.6, 63.1 µs;
// Q6_K 69.6, 70.9, 74.7, 94.4 (session 32); Q4_K is most of a Q4_K_M model.
#define GROUPS 2

// Thread t of T in the grid expands groups t, t + T, t + 2T, … of `groups` · 8 values, GROUPS
// at a time; blocks of `size` bytes hold `per` values each.
#define EXPAND(name, size, per)                                                                \
    extern "C" __global__ void expand_##name##_bf16(const u8* __restrict__ blocks,            \
                                                    bf16* __restrict__ out, long groups) {     \
        const long stride = (long)gridDim.x * blockDim.x;                                      \
        for (long first = (long)blockIdx.x * blockDim.x + threadIdx.x; first < groups;         \
             first += GROUPS * stride) {                                                       \
            name##_raw raw[GROUPS];                                                            \
            for (int k = 0; k < GROUPS; k++) {                                                 \
                const long i = first + k * stride;                                             \
                if (i < groups) raw[k] = name##_load(blocks + (8 * i / per) * size, 8 * i % per); \
            }                                                                                  \
            for (int k = 0; k < GROUPS; k++) {                                                 \
                const long i = first + k * stride;                                             \
                if (i >= groups) break;                                                        \
                float y[8];                                                                    \
                name##_values(raw[k], (int)(8 * i % per), y);                                  \
                store8(out, i, y);                                                             \
            }                                                                                  \
        }                                                                                      \
    }

EXPAND(q4_0, 18, 32)
EXPAND(q5_0, 22, 32)
EXPAND(q8_0, 34, 32)
EXPAND(q4_K, 144, 256)
EXPAND(q5_K, 176, 256)
EXPAND(q6_K, 210, 256)
