// Attention of a decoding step (src/model/attention/decode_attention.rs): every segment of the step — a
// row's trunk or one of its branches, a few queries each — in one launch, over the keys it sees
// where they lie: the header every row continues (one copy), the row's slots of the cache, and
// its own keys among the step's. A block is one query of one head; its warps take the key
// tiles in turn (FlashAttention's online softmax in f32 each) and are combined in a fixed order
// at the end, so a query's numbers depend on its keys alone, not on the rest of the step.
// Compiled at run time by NVRTC: no headers (bf16 and f16 as their bits).

#define TILE 32
#define DECODE_WARPS 16
#define VALUE_GROUP 8
#define NEG_INF __int_as_float(0xff800000)

struct bf16_t {
    unsigned short x;
};
struct f16_t {
    unsigned short x;
};

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(bf16_t x) { return __uint_as_float(((unsigned)x.x) << 16); }
__device__ __forceinline__ float to_f32(f16_t x) {
#ifdef HYOKA_HOST_EMULATION
    return host_f16_to_f32(x.x);
#else
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x.x));
    return f;
#endif
}

__device__ __forceinline__ void store(float* p, float f) { *p = f; }
__device__ __forceinline__ void store(bf16_t* p, float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) {
        p->x = (unsigned short)((u >> 16) | 0x40);  // NaN stays NaN
        return;
    }
    u += 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even
    p->x = (unsigned short)(u >> 16);
}
__device__ __forceinline__ void store(f16_t* p, float f) {
#ifdef HYOKA_HOST_EMULATION
    p->x = host_f32_to_f16(f);
#else
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    p->x = h;
#endif
}

__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// Key (or value) `key` of a query whose row's past is `h` header keys, then `past` cache slots,
// then its own keys in the step (`own`: the first of them).
template <typename T>
__device__ __forceinline__ const T* key_row(const T* header, const T* cache, const T* own, int h,
                                            int past, int key, int D) {
    if (key < h) return header + (size_t)key * D;
    if (key < h + past) return cache + (size_t)(key - h) * D;
    return own + (size_t)(key - h - past) * D;
}

// q (rows, heads, len, D) and the step's k, v (rows, kv_heads, len, D), contiguous; the cache's
// key j of (row, kv head) at ck + row·c_row + kv·c_head + j·D (likewise cv); the header's
// (kv_heads, h, D) at hk, hv; segs (segments, 4): row, first query (index in len), queries,
// cache slots before them. Query i of a segment is at position h + past + i and sees the keys
// up to it (within `window` of it, if not 0). out like q: written at the segments' queries only.
// Grid: (longest segment, heads, segments); block: 32 × DECODE_WARPS threads. softcap 0: none.
template <typename T, int D>
__device__ void decode_attention(const T* __restrict__ q, const T* __restrict__ k,
                                 const T* __restrict__ v, const T* __restrict__ ck,
                                 const T* __restrict__ cv, long long c_row, long long c_head,
                                 const T* __restrict__ hk, const T* __restrict__ hv, int h,
                                 const unsigned* __restrict__ segs, T* __restrict__ out,
                                 int heads, int kv_heads, int len, int window, float scale,
                                 float softcap) {
    constexpr int PER = (D + 31) / 32;  // value dims per lane: lane·PER ..
    __shared__ float qs[D];
    __shared__ float part_m[DECODE_WARPS], part_l[DECODE_WARPS];
    __shared__ float part_o[DECODE_WARPS][D];

    const unsigned* seg = segs + 4 * blockIdx.z;
    const int row = (int)seg[0], start = (int)seg[1], n = (int)seg[2], past = (int)seg[3];
    const int i = blockIdx.x;
    if (i >= n) return;  // the whole block: before any barrier
    const int head = blockIdx.y, kv = head / (heads / kv_heads);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;

    const size_t at = (((size_t)row * heads + head) * len + start + i) * D;
    for (int d = threadIdx.x; d < D; d += 32 * DECODE_WARPS) qs[d] = to_f32(q[at + d]) * scale;
    __syncthreads();

    const int last = h + past + i;  // the query's own key
    const int first = window > 0 ? max(0, last - window + 1) : 0;
    const size_t own_at = (((size_t)row * kv_heads + kv) * len + start) * D;
    const T* kh = hk + (size_t)kv * h * D;
    const T* vh = hv + (size_t)kv * h * D;
    const T* kc = ck + row * c_row + kv * c_head;
    const T* vc = cv + row * c_row + kv * c_head;

    float m = NEG_INF, l = 0.0f, o[PER];
    for (int e = 0; e < PER; e++) o[e] = 0.0f;
    // Tiles by key index, the first one's warp fixed by the first key: the same split whatever
    // else the step holds.
    for (int t = first / TILE + warp; t <= last / TILE; t += DECODE_WARPS) {
        const int key = t * TILE + lane;
        float s = NEG_INF;
        if (key >= first && key <= last) {
            const T* kr = key_row(kh, kc, k + own_at, h, past, key, D);
            float acc = 0.0f;
#pragma unroll 8
            for (int d = 0; d < D; d++) acc = fmaf(qs[d], to_f32(kr[d]), acc);
            if (softcap > 0.0f) acc = tanhf(acc / softcap) * softcap;
            s = acc;
        }
        // Every tile holds a key the query sees: m_new is finite.
        const float m_new = fmaxf(m, warp_max(s));
        const float p = expf(s - m_new), alpha = expf(m - m_new);  // p = 0 where s = −inf
        l = l * alpha + warp_sum(p);
        for (int e = 0; e < PER; e++) o[e] *= alpha;
        // The tile's values, VALUE_GROUP keys at a time: their loads issued together (one
        // wait for memory per group rather than per key). A key the query does not see has
        // p = 0 and reads a key it sees instead (within the tensors), adding exactly nothing.
        for (int j0 = 0; j0 < TILE; j0 += VALUE_GROUP) {
            float pj[VALUE_GROUP], vv[VALUE_GROUP][PER];
#pragma unroll
            for (int u = 0; u < VALUE_GROUP; u++) {
                pj[u] = __shfl_sync(0xffffffffu, p, j0 + u);
                const int kj = min(max(t * TILE + j0 + u, first), last);
                const T* vr = key_row(vh, vc, v + own_at, h, past, kj, D);
#pragma unroll
                for (int e = 0; e < PER; e++)
                    vv[u][e] = lane * PER + e < D ? to_f32(vr[lane * PER + e]) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < VALUE_GROUP; u++)
#pragma unroll
                for (int e = 0; e < PER; e++) o[e] = fmaf(pj[u], vv[u][e], o[e]);
        }
        m = m_new;
    }
    if (lane == 0) {
        part_m[warp] = m;
        part_l[warp] = l;
    }
    for (int e = 0; e < PER; e++)
        if (lane * PER + e < D) part_o[warp][lane * PER + e] = o[e];
    __syncthreads();
    for (int d = threadIdx.x; d < D; d += 32 * DECODE_WARPS) {
        float top = NEG_INF;
        for (int w = 0; w < DECODE_WARPS; w++) top = fmaxf(top, part_m[w]);
        float sum = 0.0f, acc = 0.0f;
        for (int w = 0; w < DECODE_WARPS; w++) {
            // A warp without tiles (m = −inf) adds nothing.
            const float c = part_m[w] == NEG_INF ? 0.0f : expf(part_m[w] - top);
            sum = fmaf(part_l[w], c, sum);
            acc = fmaf(part_o[w][d], c, acc);
        }
        store(out + at + d, acc / sum);
    }
}

// The step's keys (or values) of each trunk into the cache: segment (row, first, n, past)'s
// token i to slot past + i of its row. Grid: (longest trunk, kv_heads, trunks); block: 128.
template <typename T>
__device__ void append_keys(T* __restrict__ cache, long long c_row, long long c_head,
                            const T* __restrict__ k, const unsigned* __restrict__ segs,
                            int kv_heads, int len, int D) {
    const unsigned* seg = segs + 4 * blockIdx.z;
    const int row = (int)seg[0], start = (int)seg[1], n = (int)seg[2], past = (int)seg[3];
    const int i = blockIdx.x, kv = blockIdx.y;
    if (i >= n) return;
    T* dst = cache + row * c_row + kv * c_head + (size_t)(past + i) * D;
    const T* src = k + (((size_t)row * kv_heads + kv) * len + start + i) * D;
    for (int d = threadIdx.x; d < D; d += blockDim.x) dst[d] = src[d];
}

#define DECODE_ATTENTION(NAME, T, D)                                                            \
    extern "C" __global__ void decode_attention_##NAME##_d##D(                                 \
        const T* q, const T* k, const T* v, const T* ck, const T* cv, long long c_row,         \
        long long c_head, const T* hk, const T* hv, int h, const unsigned* segs, T* out,       \
        int heads, int kv_heads, int len, int window, float scale, float softcap) {            \
        decode_attention<T, D>(q, k, v, ck, cv, c_row, c_head, hk, hv, h, segs, out, heads,    \
                               kv_heads, len, window, scale, softcap);                         \
    }

#define DECODE_ATTENTION_DIMS(NAME, T) \
    DECODE_ATTENTION(NAME, T, 8)       \
    DECODE_ATTENTION(NAME, T, 16)      \
    DECODE_ATTENTION(NAME, T, 32)      \
    DECODE_ATTENTION(NAME, T, 64)      \
    DECODE_ATTENTION(NAME, T, 128)     \
    DECODE_ATTENTION(NAME, T, 256)

DECODE_ATTENTION_DIMS(bf16, bf16_t)
DECODE_ATTENTION_DIMS(f16, f16_t)
DECODE_ATTENTION_DIMS(f32, float)

// By element size: a copy does not look at the values.
#define APPEND_KEYS(NAME, T)                                                                     \
    extern "C" __global__ void append_keys_##NAME(T* cache, long long c_row, long long c_head, \
                                                  const T* k, const unsigned* segs,             \
                                                  int kv_heads, int len, int D) {               \
        append_keys<T>(cache, c_row, c_head, k, segs, kv_heads, len, D);                        \
    }

APPEND_KEYS(b16, unsigned short)
APPEND_KEYS(b32, unsigned)
