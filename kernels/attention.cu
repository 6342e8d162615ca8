// Causal attention of a prompt in one pass (src/model/attention/fused_attention.rs): one warp per query,
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

// Key `key` of a (row, kv head): the first `shared_len` are a prefix every row continues, one
// copy ((kv_heads, shared_len, D) at `shared`), the rest the row's own, `own` pointing at the
// row's and kv head's first (keys D apart: a decoding cache is read where it lies).
__device__ __forceinline__ const bf16* key_at(const bf16* shared, const bf16* own, int shared_len,
                                              int key, int D) {
    return key < shared_len ? shared + (size_t)key * D : own + (size_t)(key - shared_len) * D;
}

// A key's position and segment: from the row's arrays, or (none given: a single sequence whose
// positions are its key indices) the index itself and segment 0.
__device__ __forceinline__ float pos_at(const float* pos, int key) {
    return pos ? pos[key] : (float)key;
}
__device__ __forceinline__ float seg_at(const float* seg, int key) { return seg ? seg[key] : 0.0f; }

// q (rows, heads, len, D) contiguous; keys and values: `shared_len` shared ones (k_shared,
// v_shared: (kv_heads, shared_len, D)), then each row's own at k, v with strides row_stride
// and head_stride (elements), keys - shared_len of them; out like q; key_pos and key_seg (rows,
// pos_stride) f32 (both null: positions are key indices, one segment), the queries at columns
// prefix..prefix + len — or, where row_span (2 per row: prefix, queries) is given, each row's
// own prefix and number of queries ≤ len, keys after its last query not read and its padding
// queries' outputs zero. Grid: (query blocks of WARPS, heads, rows); block: 32 × WARPS threads.
// window 0: none; softcap 0: none.
template <int D>
__device__ void attention(const bf16* __restrict__ q, const bf16* __restrict__ k,
                          const bf16* __restrict__ v, const bf16* __restrict__ k_shared,
                          const bf16* __restrict__ v_shared, const float* __restrict__ key_pos,
                          const float* __restrict__ key_seg, bf16* __restrict__ out, int heads,
                          int kv_heads, int len, int keys, int prefix, int pos_stride, int window,
                          int shared_len, long long row_stride, long long head_stride,
                          const unsigned* __restrict__ row_span, float scale, float softcap) {
    constexpr int PER_LANE = (D + 31) / 32;  // output dims per lane: i·32 + lane < D
    __shared__ bf16 kt[D][TILE + 2];  // keys transposed: lane j reads column j
    __shared__ bf16 vs[TILE][D];
    __shared__ float qs[WARPS][D];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row = blockIdx.z, head = blockIdx.y, kv = head / (heads / kv_heads);
    const int query = blockIdx.x * WARPS + warp;
    const int first = row_span ? (int)row_span[2 * row] : prefix;
    const int queries = row_span ? (int)row_span[2 * row + 1] : len;
    const bool real = query < queries;
    const int last = min(queries, (blockIdx.x + 1) * WARPS) - 1;
    const int key_end = last < (int)(blockIdx.x * WARPS) ? 0 : min(keys, first + last + 1);

    const bf16* qrow = q + (((size_t)row * heads + head) * len + (real ? query : 0)) * D;
    for (int d = lane; d < D; d += 32) qs[warp][d] = real ? to_f32(qrow[d]) * scale : 0.0f;
    const float* pos = key_pos ? key_pos + (size_t)row * pos_stride : nullptr;
    const float* seg = key_seg ? key_seg + (size_t)row * pos_stride : nullptr;
    const float pq = real ? pos_at(pos, first + query) : 0.0f;
    const float sq = real ? seg_at(seg, first + query) : 0.0f;
    const bf16* kown = k + row * row_stride + kv * head_stride;
    const bf16* vown = v + row * row_stride + kv * head_stride;
    const bf16* kshared = k_shared + (size_t)kv * shared_len * D;
    const bf16* vshared = v_shared + (size_t)kv * shared_len * D;

    float m = NEG_INF, l = 0.0f, o[PER_LANE];
    for (int i = 0; i < PER_LANE; i++) o[i] = 0.0f;

    for (int start = 0; start < key_end; start += TILE) {
        __syncthreads();  // the previous tile is read by every warp
        for (int at = threadIdx.x; at < TILE * D; at += 32 * WARPS) {
            const int j = at / D, d = at % D, key = start + j;
            const bool in = key < key_end;
            kt[d][j] = in ? key_at(kshared, kown, shared_len, key, D)[d] : (bf16)0;
            vs[j][d] = in ? key_at(vshared, vown, shared_len, key, D)[d] : (bf16)0;
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
            const float behind = pos_at(pos, key) - pq, sk = seg_at(seg, key);
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
    if (query >= len) return;
    bf16* orow = out + (((size_t)row * heads + head) * len + query) * D;
    for (int i = 0; i < PER_LANE; i++)
        if (i * 32 + lane < D) orow[i * 32 + lane] = real ? to_bf16(o[i] / l) : (bf16)0;
}

#define ATTENTION(D)                                                                           \
    extern "C" __global__ void attention_bf16_d##D(                                            \
        const bf16* q, const bf16* k, const bf16* v, const bf16* k_shared,                     \
        const bf16* v_shared, const float* key_pos, const float* key_seg, bf16* out, int heads, \
        int kv_heads, int len, int keys, int prefix, int pos_stride, int window,               \
        int shared_len, long long row_stride, long long head_stride, const unsigned* row_span, \
        float scale, float softcap) {                                                          \
        attention<D>(q, k, v, k_shared, v_shared, key_pos, key_seg, out, heads, kv_heads, len, \
                     keys, prefix, pos_stride, window, shared_len, row_stride, head_stride,    \
                     row_span, scale, softcap);                                                \
    }

ATTENTION(8)
ATTENTION(16)
ATTENTION(32)
ATTENTION(64)
ATTENTION(128)
ATTENTION(256)

// ---------------------------------------------------------------------------------------------
// The same attention on tensor cores (sm_80 and later; head dims multiple of 16): FlashAttention-2's
// layout with `mma.sync.m16n8k16` (bf16 in, f32 accumulated). Each warp holds 16 queries, a
// block's MMA_WARPS warps share a tile of KT keys in shared memory (values transposed, so that
// both products read their B fragments as 32-bit words, conflict-free with the padding). A
// thread holds rows g and g + 8 of its warp's 16 (g = lane / 4) and, in every 8-column piece,
// columns 2t and 2t + 1 (t = lane % 4): the layout of PTX's m16n8k16 fragments, under which the
// scores' accumulators are already the probabilities' A fragments. Probabilities are rounded to
// bf16 for the second product, and the denominator sums the rounded ones (a weighted mean of the
// values). Blocks run the longest first.

#define MMA_WARPS 4
#define MMA_QUERIES (16 * MMA_WARPS)

// (tests/emulation/cuda_host.h brings its own, to run this file on a CPU.)
#ifndef ATTENTION_HOST_MMA
__device__ __forceinline__ void mma_bf16(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1) {
#if __CUDA_ARCH__ >= 800
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#endif
}
#endif

// Two bf16 in one register, the first in the low half (the lower column of a fragment).
__device__ __forceinline__ unsigned pack2(bf16 lo, bf16 hi) {
    return (unsigned)lo | ((unsigned)hi << 16);
}

__device__ __forceinline__ unsigned word(const bf16* p) {
#ifdef HYOKA_HOST_EMULATION
    host_check_load(p, 4);  // a GPU faults on a 4-byte load at an address not a multiple of 4
#endif
    return *(const unsigned*)p;
}

// Arguments and grid as `attention`, with MMA_QUERIES queries a block and 32 × MMA_WARPS
// threads; q, k, v and the shared keys and values 4-byte aligned (checked by the caller).
template <int D, int KT>
__device__ void attention_mma(const bf16* __restrict__ q, const bf16* __restrict__ k,
                              const bf16* __restrict__ v, const bf16* __restrict__ k_shared,
                              const bf16* __restrict__ v_shared,
                              const float* __restrict__ key_pos,
                              const float* __restrict__ key_seg, bf16* __restrict__ out,
                              int heads, int kv_heads, int len, int keys, int prefix,
                              int pos_stride, int window, int shared_len, long long row_stride,
                              long long head_stride, const unsigned* __restrict__ row_span,
                              float scale, float softcap) {
    constexpr int DP = D + 8, KP = KT + 8, THREADS = 32 * MMA_WARPS;
    __shared__ __align__(16) bf16 ks[KT * DP];  // ks[key][dim]
    __shared__ __align__(16) bf16 vt[D * KP];   // vt[dim][key]
    __shared__ float kpos[KT], kseg[KT];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int row = blockIdx.z, head = blockIdx.y, kv = head / (heads / kv_heads);
    const int qblock = gridDim.x - 1 - blockIdx.x;  // the blocks with the most keys first
    const int q0 = qblock * MMA_QUERIES + warp * 16;
    const int first = row_span ? (int)row_span[2 * row] : prefix;
    const int queries = row_span ? (int)row_span[2 * row + 1] : len;
    const int last = min(queries, (qblock + 1) * MMA_QUERIES) - 1;
    const int key_end = last < qblock * MMA_QUERIES ? 0 : min(keys, first + last + 1);
    const int qr[2] = {q0 + g, q0 + g + 8};

    const bf16* qbase = q + ((size_t)row * heads + head) * len * D;
    const float* pos = key_pos ? key_pos + (size_t)row * pos_stride : nullptr;
    const float* seg = key_seg ? key_seg + (size_t)row * pos_stride : nullptr;
    const bf16* kown = k + row * row_stride + kv * head_stride;
    const bf16* vown = v + row * row_stride + kv * head_stride;
    const bf16* kshared = k_shared + (size_t)kv * shared_len * D;
    const bf16* vshared = v_shared + (size_t)kv * shared_len * D;

    // A fragments of the warp's queries, 16 dims each: registers (row g | g + 8) × (columns
    // 2t | 8 + 2t).
    unsigned qa[D / 16][4];
    float pq[2], sq[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const bool real = qr[h] < queries;
        const bf16* qrow = qbase + (size_t)(real ? qr[h] : 0) * D;
#pragma unroll
        for (int c = 0; c < D / 16; c++) {
            qa[c][h] = real ? word(qrow + c * 16 + 2 * t) : 0u;
            qa[c][h + 2] = real ? word(qrow + c * 16 + 8 + 2 * t) : 0u;
        }
        pq[h] = real ? pos_at(pos, first + qr[h]) : 0.0f;
        sq[h] = real ? seg_at(seg, first + qr[h]) : 0.0f;
    }

    float m[2] = {NEG_INF, NEG_INF}, l[2] = {0.0f, 0.0f}, o[D / 8][4];
#pragma unroll
    for (int j = 0; j < D / 8; j++) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    for (int start = 0; start < key_end; start += KT) {
        __syncthreads();  // every warp is done with the previous tile
        // Keys row by row (consecutive threads, consecutive dims); values with consecutive
        // threads on consecutive keys, so that their transposed stores do not collide.
        for (int at = threadIdx.x; at < KT * D / 2; at += THREADS) {
            const int j = at / (D / 2), d = (at % (D / 2)) * 2, key = start + j;
            *(unsigned*)&ks[j * DP + d] =
                key < key_end ? word(key_at(kshared, kown, shared_len, key, D) + d) : 0u;
        }
        for (int at = threadIdx.x; at < KT * D / 2; at += THREADS) {
            const int j = at % KT, d = (at / KT) * 2, key = start + j;
            const unsigned x =
                key < key_end ? word(key_at(vshared, vown, shared_len, key, D) + d) : 0u;
            vt[d * KP + j] = (bf16)(x & 0xffffu);
            vt[(d + 1) * KP + j] = (bf16)(x >> 16);
        }
        for (int j = threadIdx.x; j < KT; j += THREADS) {
            const bool in = start + j < key_end;
            kpos[j] = in ? pos_at(pos, start + j) : 0.0f;
            kseg[j] = in ? seg_at(seg, start + j) : 0.0f;
        }
        __syncthreads();
        if (q0 >= queries) continue;  // a warp past the last query still meets every barrier

        float s[KT / 8][4];
#pragma unroll
        for (int n = 0; n < KT / 8; n++) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
        for (int c = 0; c < D / 16; c++)
#pragma unroll
            for (int n = 0; n < KT / 8; n++) {
                const bf16* kr = ks + (n * 8 + g) * DP + c * 16 + 2 * t;
                mma_bf16(s[n], qa[c], word(kr), word(kr + 8));
            }

        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int n = 0; n < KT / 8; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int h = e / 2, j = n * 8 + 2 * t + e % 2;
                float x = s[n][e] * scale;
                if (softcap > 0.0f) x = tanhf(x / softcap) * softcap;
                if (start + j >= key_end) {
                    x = NEG_INF;  // left out, as the unfused path leaves these keys out
                } else {
                    const float behind = kpos[j] - pq[h], sk = kseg[j];
                    const bool seen = behind <= 0.0f &&
                                      (window == 0 || behind > -(float)window) &&
                                      sk * (sk - sq[h]) == 0.0f;
                    if (!seen) x += MASKED;
                }
                s[n][e] = x;
                mx[h] = fmaxf(mx[h], x);
            }
        float alpha[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {  // the four threads of a row hold all its columns
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            alpha[h] = expf(m[h] - mx[h]);
            m[h] = mx[h];
            l[h] *= alpha[h];
        }
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
        }
        // The scores' accumulators of key pieces 2c and 2c + 1 are the A fragment of keys
        // 16c..16c + 15.
#pragma unroll
        for (int c = 0; c < KT / 16; c++) {
            unsigned pa[4];
#pragma unroll
            for (int half = 0; half < 2; half++) {
                const float* sn = s[2 * c + half];
                const bf16 p0 = to_bf16(expf(sn[0] - m[0])), p1 = to_bf16(expf(sn[1] - m[0]));
                const bf16 p2 = to_bf16(expf(sn[2] - m[1])), p3 = to_bf16(expf(sn[3] - m[1]));
                l[0] += to_f32(p0) + to_f32(p1);
                l[1] += to_f32(p2) + to_f32(p3);
                pa[2 * half] = pack2(p0, p1);
                pa[2 * half + 1] = pack2(p2, p3);
            }
#pragma unroll
            for (int j = 0; j < D / 8; j++) {
                const bf16* vr = vt + (j * 8 + g) * KP + c * 16 + 2 * t;
                mma_bf16(o[j], pa, word(vr), word(vr + 8));
            }
        }
    }
    if (q0 >= len) return;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        if (qr[h] >= len) continue;
        const bool real = qr[h] < queries;  // a row's padding queries: zeros
        bf16* orow = out + (((size_t)row * heads + head) * len + qr[h]) * D;
#pragma unroll
        for (int j = 0; j < D / 8; j++) {
            orow[j * 8 + 2 * t] = real ? to_bf16(o[j][2 * h] / l[h]) : (bf16)0;
            orow[j * 8 + 2 * t + 1] = real ? to_bf16(o[j][2 * h + 1] / l[h]) : (bf16)0;
        }
    }
}

#define ATTENTION_MMA(D, KT)                                                                   \
    extern "C" __global__ void __launch_bounds__(32 * MMA_WARPS) attention_mma_bf16_d##D(     \
        const bf16* q, const bf16* k, const bf16* v, const bf16* k_shared,                     \
        const bf16* v_shared, const float* key_pos, const float* key_seg, bf16* out, int heads, \
        int kv_heads, int len, int keys, int prefix, int pos_stride, int window,               \
        int shared_len, long long row_stride, long long head_stride, const unsigned* row_span, \
        float scale, float softcap) {                                                          \
        attention_mma<D, KT>(q, k, v, k_shared, v_shared, key_pos, key_seg, out, heads,        \
                             kv_heads, len, keys, prefix, pos_stride, window, shared_len,      \
                             row_stride, head_stride, row_span, scale, softcap);               \
    }

ATTENTION_MMA(16, 64)
ATTENTION_MMA(32, 64)
ATTENTION_MMA(64, 64)
ATTENTION_MMA(128, 64)
ATTENTION_MMA(256, 16)
