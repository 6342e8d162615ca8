// GGUF blocks to bf16 in one pass (src/model/quant/cuda/cuda_expand.rs), for the GEMMs of weights kept as
// stored. candle's CUDA path writes f32 through kernels of 32-thread blocks, then casts: three
// passes over the expanded matrix. Here a thread expands groups of 8 consecutive values, each
// written as one 16-byte store, reading a group's bytes in words of up to 16 bytes; it loads the
// words of two groups before expanding either (loads in flight while it computes). Every value
// is computed as candle's CPU `to_float` computes it (llama.cpp's reference dequantization) —
// same operations in the same order, no fused multiply-add — then rounded to bf16 to nearest
// even, so the result is bit for bit the CPU's expansion cast to bf16 (tests/suite/expand_kernels.rs;
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
// emulation on the CPU runs (the first is checked on a GPU: tests/suite/expand_kernels.rs).
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

// A load of a T at p. A GPU faults where p is not a multiple of sizeof(T); the tests' emulation
// on the CPU, which would not, checks that, and that the load stays inside the tensor
// (tests/emulation/cuda_host.h).
template <class T>
__device__ __forceinline__ T load(const u8* p) {
#ifdef HYOKA_HOST_EMULATION
    host_check_load(p, sizeof(T));
#endif
    return *(const T*)p;
}

// 8 bytes at an even address p, in aligned words: blocks of 18, 20, 22, 34, 84, 110 or 210
// bytes leave a group's bytes 2- or 4-aligned only. At p ≡ 2 (mod 4) the first word holds the 2
// bytes before p (in the tensor: its start is aligned) and the last two come as a 16-bit load:
// a word there would reach 2 bytes past p + 7, past the tensor's end for its last group.
__device__ __forceinline__ uint2 load8_even(const u8* p) {
    const u8* a = (const u8*)((unsigned long long)p & ~3ull);
    const unsigned w0 = load<unsigned>(a), w1 = load<unsigned>(a + 4);
    if (a == p) return make_uint2(w0, w1);
    const unsigned last = load<unsigned short>(p + 6);
    return make_uint2(__funnelshift_r(w0, w1, 16), __funnelshift_r(w1, last, 16));
}

__device__ __forceinline__ unsigned load_u16(const u8* p) { return load<unsigned short>(p); }

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

// The 32-value blocks' quants: of 16 bytes of nibbles, value v (< 16) the low nibble of byte v,
// v + 16 the high one; Q5_0's and Q5_1's fifth bit of value v is bit v of 4 bytes `qh`. For
// value o + e of a group at o, of the group's 8 bytes `q`:
__device__ __forceinline__ unsigned nibble32(uint2 q, int o, int e) {
    const unsigned b = byte8(q, e);
    return o < 16 ? b & 0xF : b >> 4;
}
__device__ __forceinline__ unsigned five_bits32(uint2 q, unsigned qh, int o, int e) {
    return nibble32(q, o, e) | (((qh >> (o + e)) & 1) << 4);
}

// Q4_0: f16 d, 16 bytes of nibbles; value (x − 8) · d.
struct q4_0_raw {
    unsigned d;
    uint2 q;
};
__device__ __forceinline__ q4_0_raw q4_0_load(const u8* b, int o) {
    return {load_u16(b), load8_even(b + 2 + o % 16)};
}
__device__ __forceinline__ void q4_0_values(const q4_0_raw& r, int o, float (&y)[8]) {
    const float d = f16_to_f32(r.d);
    for (int e = 0; e < 8; e++) y[e] = MUL(SUB(small_uint(nibble32(r.q, o, e)), 8.0f), d);
}

// Q5_0: f16 d, 4 bytes of fifth bits, 16 bytes of nibbles; value (x − 16) · d.
struct q5_0_raw {
    unsigned d, qh;
    uint2 q;
};
__device__ __forceinline__ q5_0_raw q5_0_load(const u8* b, int o) {
    return {load_u16(b), load_u16(b + 2) | (load_u16(b + 4) << 16), load8_even(b + 6 + o % 16)};
}
__device__ __forceinline__ void q5_0_values(const q5_0_raw& r, int o, float (&y)[8]) {
    const float d = f16_to_f32(r.d);
    for (int e = 0; e < 8; e++)
        y[e] = MUL(SUB(small_uint(five_bits32(r.q, r.qh, o, e)), 16.0f), d);
}

// Q4_1: f16 d, f16 m, 16 bytes of nibbles; value x · d + m.
struct q4_1_raw {
    unsigned dm;
    uint2 q;
};
__device__ __forceinline__ q4_1_raw q4_1_load(const u8* b, int o) {
    return {load<unsigned>(b), load8_even(b + 4 + o % 16)};
}
__device__ __forceinline__ void q4_1_values(const q4_1_raw& r, int o, float (&y)[8]) {
    const float d = f16_to_f32(r.dm & 0xffffu), m = f16_to_f32(r.dm >> 16);
    for (int e = 0; e < 8; e++) y[e] = ADD(MUL(small_uint(nibble32(r.q, o, e)), d), m);
}

// Q5_1: f16 d, f16 m, 4 bytes of fifth bits, 16 bytes of nibbles; value x · d + m.
struct q5_1_raw {
    unsigned dm, qh;
    uint2 q;
};
__device__ __forceinline__ q5_1_raw q5_1_load(const u8* b, int o) {
    return {load<unsigned>(b), load<unsigned>(b + 4), load<uint2>(b + 8 + o % 16)};
}
__device__ __forceinline__ void q5_1_values(const q5_1_raw& r, int o, float (&y)[8]) {
    const float d = f16_to_f32(r.dm & 0xffffu), m = f16_to_f32(r.dm >> 16);
    for (int e = 0; e < 8; e++) y[e] = ADD(MUL(small_uint(five_bits32(r.q, r.qh, o, e)), d), m);
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

// Q2_K: 16 bytes of 4-bit scale and min pairs, 64 bytes of 2-bit values, f16 d, f16 dmin. Per
// 128 values n, 32 bytes; quarter j of 32 the bits 2j of them, its first 16 values from bytes
// 0..15 with pair 8n + 2j, the next 16 from bytes 16..31 with pair 8n + 2j + 1.
struct q2_K_raw {
    unsigned dd, sc;
    uint2 q;
};
__device__ __forceinline__ q2_K_raw q2_K_load(const u8* b, int o) {
    const int n = o / 128, j = (o % 128) / 32, half = (o % 32) / 16;
    return {load<unsigned>(b + 80), b[8 * n + 2 * j + half],
            load8_even(b + 16 + 32 * n + 16 * half + o % 16)};
}
__device__ __forceinline__ void q2_K_values(const q2_K_raw& r, int o, float (&y)[8]) {
    const int shift = 2 * ((o % 128) / 32);
    const float d = f16_to_f32(r.dd & 0xffffu), dmin = f16_to_f32(r.dd >> 16);
    const float dl = MUL(d, small_uint(r.sc & 0xF)), ml = MUL(dmin, small_uint(r.sc >> 4));
    for (int e = 0; e < 8; e++) y[e] = SUB(MUL(dl, small_uint((byte8(r.q, e) >> shift) & 3)), ml);
}

// Q3_K: 32 bytes of high bits, 64 of 2-bit values, 12 of 6-bit scales, f16 d. Per 128 values n,
// 32 bytes of qs; quarter j of 32 the bits 2j of them and bit 4n + j of the high bytes (set: the
// value as it is; clear: less 4), 16 values from bytes 0..15 with scale 8n + 2j, 16 from bytes
// 16..31 with 8n + 2j + 1. Scale s: the low 4 bits from nibble s / 8 of byte s % 8, the high
// 2 from bits 2 (s / 4) of byte 8 + s % 4 (llama.cpp's kmask shuffle); as a value s − 32.
struct q3_K_raw {
    unsigned d, lo, hi;
    uint2 q, h;
};
__device__ __forceinline__ q3_K_raw q3_K_load(const u8* b, int o) {
    const int n = o / 128, j = (o % 128) / 32, half = (o % 32) / 16, s = 8 * n + 2 * j + half;
    return {load_u16(b + 108), b[96 + s % 8], b[104 + s % 4],
            load8_even(b + 32 + 32 * n + 16 * half + o % 16), load8_even(b + 16 * half + o % 16)};
}
__device__ __forceinline__ void q3_K_values(const q3_K_raw& r, int o, float (&y)[8]) {
    const int n = o / 128, j = (o % 128) / 32, s = 8 * n + 2 * j + (o % 32) / 16;
    const unsigned scale = ((r.lo >> (4 * (s / 8))) & 0xF) | (((r.hi >> (2 * (s / 4))) & 3) << 4);
    const float dl = MUL(f16_to_f32(r.d), SUB(small_uint(scale), 32.0f));
    for (int e = 0; e < 8; e++) {
        const unsigned q = (byte8(r.q, e) >> (2 * j)) & 3, h = (byte8(r.h, e) >> (4 * n + j)) & 1;
        y[e] = MUL(dl, SUB(small_uint(q), h ? 0.0f : 4.0f));
    }
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
    return {load<uint4>(b), load<uint2>(b + 16 + 32 * (o / 64) + o % 32)};
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
    return {load<uint4>(b), load<uint2>(b + 16 + o % 32),
            load<uint2>(b + 48 + 32 * (o / 64) + o % 32)};
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
// Q6_K 69.6, 70.9, 74.7, 94.4; Q4_K is most of a Q4_K_M model.
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
EXPAND(q4_1, 20, 32)
EXPAND(q5_0, 22, 32)
EXPAND(q5_1, 24, 32)
EXPAND(q8_0, 34, 32)
EXPAND(q2_K, 84, 256)
EXPAND(q3_K, 110, 256)
EXPAND(q4_K, 144, 256)
EXPAND(q5_K, 176, 256)
EXPAND(q6_K, 210, 256)
