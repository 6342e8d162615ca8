// Causal attention of a prompt in one pass (src/model/fused_attention.rs): one warp per query,
// keys in tiles of 32 shared by the block's queries, FlashAttention's online softmax in f32,
// bf16 in and out, head dims 8 to 256. The mask is computed here from every key's position and
// segment (the rule of
// `Batch::mask`): a query sees a key when the key is not after it, within the window, and in the
// prefix, the trunk or the query's own branch. A key it does not see gets MASKED added, as the
// unfused path adds its mask; keys after the block's last query are left out, as there.
// Compiled at run time by NVRTC: no headers (bf16 as its bits).

typedef unsigned short bf16;

#define TILE 32
#define WARPS 8
#define MASKED (-3.40282347e38f)
#define NEG_INF __int_as_float(0xff800000)

__device__ __forceinline__ float to_f32(bf16 x) { return __uint_as_float(((unsigned)x) << 16); }

__device__ __forceinline__ bf16 to_bf16(float f) {
    unsigned u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (bf16)((u >> 16) | 0x40);  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // to nearest, ties to even
    return (bf16)(u >> 16);
}

__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

__device__ __forceinline__ float warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

// q (rows, heads, len, D), k and v (rows, kv_heads, keys, D), out like q; key_pos and key_seg
// (rows, pos_stride) f32, the queries at columns prefix..prefix + len. Grid: (query blocks of
// WARPS, heads, rows); block: 32 × WARPS threads. window 0: none; softcap 0: none.
template <int D>
__device__ void attention(const bf16* __restrict__ q, const bf16* __restrict__ k,
                          const bf16* __restrict__ v, const float* __restrict__ key_pos,
                          const float* __restrict__ key_seg, bf16* __restrict__ out, int heads,
                          int kv_heads, int len, int keys, int prefix, int pos_stride, int window,
                          float scale, float softcap) {
    constexpr int PER_LANE = (D + 31) / 32;  // output dims per lane: i·32 + lane < D
    __shared__ bf16 kt[D][TILE + 2];  // keys transposed: lane j reads column j
    __shared__ bf16 vs[TILE][D];
    __shared__ float qs[WARPS][D];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.z, head = blockIdx.y, kv = head / (heads / kv_heads);
    const int query = blockIdx.x * WARPS + warp;
    const bool real = query < len;
    const int last = min(len, (blockIdx.x + 1) * WARPS) - 1;
    const int key_end = min(keys, prefix + last + 1);

    const bf16* qrow = q + (((size_t)row * heads + head) * len + (real ? query : 0)) * D;
    for (int d = lane; d < D; d += 32) qs[warp][d] = real ? to_f32(qrow[d]) * scale : 0.0f;
    const float* pos = key_pos + (size_t)row * pos_stride;
    const float* seg = key_seg + (size_t)row * pos_stride;
    const float pq = real ? pos[prefix + query] : 0.0f, sq = real ? seg[prefix + query] : 0.0f;
    const bf16* kbase = k + ((size_t)row * kv_heads + kv) * keys * D;
    const bf16* vbase = v + ((size_t)row * kv_heads + kv) * keys * D;

    float m = NEG_INF, l = 0.0f, o[PER_LANE];
    for (int i = 0; i < PER_LANE; i++) o[i] = 0.0f;

    for (int start = 0; start < key_end; start += TILE) {
        __syncthreads();  // the previous tile is read by every warp
        for (int at = threadIdx.x; at < TILE * D; at += 32 * WARPS) {
            const int j = at / D, d = at % D, key = start + j;
            const bool in = key < key_end;
            kt[d][j] = in ? kbase[(size_t)key * D + d] : (bf16)0;
            vs[j][d] = in ? vbase[(size_t)key * D + d] : (bf16)0;
        }
        __syncthreads();
        if (!real) continue;  // every warp still meets both barriers of every tile
        const int key = start + lane;
        float s = NEG_INF;
        if (key < key_end) {
            s = 0.0f;
#pragma unroll 8
            for (int d = 0; d < D; d++) s = fmaf(qs[warp][d], to_f32(kt[d][lane]), s);
            if (softcap > 0.0f) s = tanhf(s / softcap) * softcap;
            const float behind = pos[key] - pq, sk = seg[key];
            const bool seen = behind <= 0.0f && (window == 0 || behind > -(float)window) &&
                              sk * (sk - sq) == 0.0f;
            if (!seen) s += MASKED;
        }
        const float m_new = fmaxf(m, warp_max(s));
        const float p = expf(s - m_new), alpha = expf(m - m_new);
        l = l * alpha + warp_sum(p);
        for (int i = 0; i < PER_LANE; i++) o[i] *= alpha;
        for (int j = 0; j < TILE; j++) {
            const float pj = __shfl_sync(0xffffffffu, p, j);
            for (int i = 0; i < PER_LANE; i++)
                if (i * 32 + lane < D) o[i] = fmaf(pj, to_f32(vs[j][i * 32 + lane]), o[i]);
        }
        m = m_new;
    }
    if (!real) return;
    bf16* orow = out + (((size_t)row * heads + head) * len + query) * D;
    for (int i = 0; i < PER_LANE; i++)
        if (i * 32 + lane < D) orow[i * 32 + lane] = to_bf16(o[i] / l);
}

#define ATTENTION(D)                                                                           \
    extern "C" __global__ void attention_bf16_d##D(                                            \
        const bf16* q, const bf16* k, const bf16* v, const float* key_pos,                     \
        const float* key_seg, bf16* out, int heads, int kv_heads, int len, int keys,           \
        int prefix, int pos_stride, int window, float scale, float softcap) {                  \
        attention<D>(q, k, v, key_pos, key_seg, out, heads, kv_heads, len, keys, prefix,       \
                     pos_stride, window, scale, softcap);                                      \
    }

ATTENTION(8)
ATTENTION(16)
ATTENTION(32)
ATTENTION(64)
ATTENTION(128)
ATTENTION(256)
