/* attention.c - tiled online-softmax attention over paged KV; see attention.h. */
#include "engine/attention.h"

#include <math.h>
#include <string.h>

#include "base/exp512.h"
#include "base/fp16.h"
#include "kernels/quant.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

uint32_t hr_attn_block_tokens(uint32_t group)
{
    /* 128 rows: each call streams its KV head once, so twice the rows read
     * the cache half as often (0.5B, 8K context, 2 threads, two alternating
     * rounds against 64 rows: pp512@d8192 f16 cache 194.5/188.9 -> 197.2/
     * 197.2 tok/s on the F16 model, 304.4/307.7 -> 316.2/318.5 on Q8_0;
     * 256 rows gave nothing more) */
    const uint32_t rows = 128;
    uint32_t t = group ? rows / group : 1;
    if (t < 1)
        t = 1;
    if (t > rows / 4)
        t = rows / 4;
    return t;
}

static uint32_t max_rows(uint32_t group)
{
    return hr_attn_block_tokens(group) * group;
}

static bool is_quant(enum hr_ggml_type t)
{
    return t == HR_GGML_Q8_0 || t == HR_GGML_Q4_0;
}

/* Per row of a quantized cache: the query as Q8_0 split into arrays the
 * kernels load directly: qs [head_dim] int8, then per 32-block dq (f32) and
 * the sum of its quants (int32, for the unsigned-offset correction). */
#define HR_ATTN_KEYS 32 /* keys per KV block of the tiled kernel */
/* Each row's softmax denominator l is kept as 16 lane sums and added up once
 * at the end: a horizontal sum per row and block cost about a tenth of the
 * attention's time (perf, 0.5B F16, 16K prompt). */
#define HR_ATTN_L_LANES 16

static size_t qrow_bytes(uint32_t head_dim)
{
    return (size_t)head_dim + (size_t)head_dim / 32 * 2 * sizeof(float);
}

size_t hr_attn_scratch_bytes(enum hr_ggml_type kv_type, uint32_t head_dim, uint32_t group)
{
    /* The K block as two f32 halves [head_dim][16] and the V block
     * [32][head_dim] (a quantized K block, 32 x head_dim bytes plus the
     * block scales, fits in the f32 K block's room); per row: the scores /
     * probabilities [32], a query pointer, acc [head_dim], m, corr, l [16];
     * the quantized query rows last. */
    const size_t rows = max_rows(group);
    size_t bytes = (2 * (size_t)HR_ATTN_KEYS * head_dim + rows * HR_ATTN_KEYS) * sizeof(float) +
                   rows * sizeof(const float *) + rows * (head_dim + 2 + HR_ATTN_L_LANES) * sizeof(float);
    if (is_quant(kv_type))
        bytes += rows * qrow_bytes(head_dim);
    return bytes;
}

void hr_attn_store(struct hr_kv_pool *kv, const int32_t *blocks, uint32_t layer, uint32_t n_head_kv,
                   uint32_t head_dim, int32_t pos, const float *k, const float *v)
{
    const uint32_t bt = hr_kv_block_tokens(kv), slot = (uint32_t)pos % bt;
    const int32_t b = blocks[(uint32_t)pos / bt];
    uint8_t *kb = hr_kv_block_k(kv, b, layer), *vb = hr_kv_block_v(kv, b, layer);
    const size_t hb = hr_kv_head_bytes(kv);
    const enum hr_ggml_type type = hr_kv_type(kv);
    const int f32 = type == HR_GGML_F32;
    if (is_quant(type)) {
        /* One ggml row per token and head. Q8_0 rows are quantized the way
         * llama.cpp's set_rows does on x86 (ggml-cpu's from_float, which is
         * hr_quantize_row_q8_0_act, not the reference); Q4_0's from_float is
         * the reference quantizer. */
        const size_t rb = hr_kv_row_bytes(type, head_dim);
        for (uint32_t h = 0; h < n_head_kv; h++) {
            const float *kh = k + (size_t)h * head_dim, *vh = v + (size_t)h * head_dim;
            uint8_t *kd = kb + h * hb + slot * rb, *vd = vb + h * hb + slot * rb;
            if (type == HR_GGML_Q8_0) {
                hr_quantize_row_q8_0_act(kh, (struct hr_block_q8_0 *)kd, head_dim);
                hr_quantize_row_q8_0_act(vh, (struct hr_block_q8_0 *)vd, head_dim);
            } else {
                hr_quantize_row_q4_0(kh, (struct hr_block_q4_0 *)kd, head_dim);
                hr_quantize_row_q4_0(vh, (struct hr_block_q4_0 *)vd, head_dim);
            }
        }
        return;
    }
    for (uint32_t h = 0; h < n_head_kv; h++) {
        const float *kh = k + (size_t)h * head_dim, *vh = v + (size_t)h * head_dim;
        if (f32) {
            float *kd = (float *)(kb + h * hb), *vd = (float *)(vb + h * hb) + (size_t)slot * head_dim;
            for (uint32_t d = 0; d < head_dim; d++)
                kd[(size_t)d * bt + slot] = kh[d];
            memcpy(vd, vh, head_dim * sizeof(float));
        } else {
            uint16_t *kd = (uint16_t *)(kb + h * hb);
            uint16_t *vd = (uint16_t *)(vb + h * hb) + (size_t)slot * head_dim;
            for (uint32_t d = 0; d < head_dim; d++) {
                kd[(size_t)d * bt + slot] = hr_f32_to_f16(kh[d]);
                vd[d] = hr_f32_to_f16(vh[d]);
            }
        }
    }
}

/* Converts a K tile (16 keys x head_dim, stored [d][bt] from `src`) and a V
 * tile (16 rows of head_dim) to f32. */
static void load_tiles(const uint8_t *ksrc, const uint8_t *vsrc, int f32, uint32_t hd, uint32_t bt,
                       float *kt, float *vt)
{
    if (f32) {
        for (uint32_t d = 0; d < hd; d++)
            memcpy(kt + (size_t)d * HR_ATTN_TILE, (const float *)ksrc + (size_t)d * bt,
                   HR_ATTN_TILE * sizeof(float));
        memcpy(vt, vsrc, (size_t)HR_ATTN_TILE * hd * sizeof(float));
        return;
    }
    const uint16_t *kh = (const uint16_t *)ksrc, *vh = (const uint16_t *)vsrc;
#if defined(__AVX512F__)
    for (uint32_t d = 0; d < hd; d++)
        _mm512_storeu_ps(kt + (size_t)d * HR_ATTN_TILE,
                         _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kh + (size_t)d * bt))));
    for (size_t i = 0; i < (size_t)HR_ATTN_TILE * hd; i += 16)
        _mm512_storeu_ps(vt + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vh + i))));
#else
    for (uint32_t d = 0; d < hd; d++)
        for (uint32_t j = 0; j < HR_ATTN_TILE; j++)
            kt[(size_t)d * HR_ATTN_TILE + j] = hr_f16_to_f32(kh[(size_t)d * bt + j]);
    for (size_t i = 0; i < (size_t)HR_ATTN_TILE * hd; i++)
        vt[i] = hr_f16_to_f32(vh[i]);
#endif
}

/* ---- quantized K and V ---------------------------------------------------
 *
 * ggml-cpu's flash attention with a Q8_0 or Q4_0 K converts each query row to
 * K's vec_dot_type (Q8_0, with from_float: hr_quantize_row_q8_0_act) and
 * takes the type's vec_dot with every key: per 32-block an exact integer sum
 * of products, scaled by d_k x d_q, summed in float. V rows are dequantized
 * to f32 (exact: an f16 scale times a small integer) and accumulated. We do
 * the same arithmetic on tiles of 16 keys:
 *
 *   K tile (in the f32 K tile's room):
 *     ku [head_dim / 4][16 keys][4] uint8: key j's values 4g .. 4g+3 at
 *        ku[g][j], as unsigned bytes: q8_0 + 128, q4_0 nibbles as stored
 *        (0..15, i.e. value + 8), so one vpdpbusd (u8 x s8, 4 products per
 *        lane) advances 16 keys by 4 dimensions against a broadcast query
 *        dword;
 *     dk [head_dim / 32][16] f32: each key's block scales.
 *   The offset is taken out exactly: sum (k + off) q = sum k q + off sum q.
 *
 * Score of key j = sum over blocks b, in order, of fmaf(sumi_b, dk_b x dq_b,
 * s) (dk x dq is exact in f32: two 11-bit mantissas), the same expression as
 * hr_attn_score_ref, so the SIMD and plain paths agree bit for bit. ggml's
 * own vec_dot sums partial lanes in another order: rounding-level (1e-7)
 * differences only. */

/* Converts query row `q` (head_dim values) to Q8_0 in the row layout above. */
static void quantize_query(const float *q, uint32_t hd, uint8_t *dst)
{
    int8_t *qs = (int8_t *)dst;
    float *dq = (float *)(dst + hd);
    int32_t *qsum = (int32_t *)(dq + hd / 32);
    for (uint32_t b = 0; b < hd / 32; b++) {
        struct hr_block_q8_0 blk;
        hr_quantize_row_q8_0_act(q + (size_t)b * 32, &blk, 32);
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            qs[b * 32 + i] = blk.qs[i];
            sum += blk.qs[i];
        }
        dq[b] = hr_f16_to_f32(blk.d);
        qsum[b] = sum;
    }
}

/* Value i (0..31) of a K row's block `blk` as the unsigned byte of the tile. */
static inline uint8_t k_byte(enum hr_ggml_type t, const uint8_t *blk, uint32_t i)
{
    if (t == HR_GGML_Q8_0)
        return (uint8_t)(blk[2 + i] ^ 0x80u); /* int8 + 128 */
    return i < 16 ? (uint8_t)(blk[2 + i] & 0x0F) : (uint8_t)(blk[2 + i - 16] >> 4);
}

/* Fills the K tile from 16 consecutive rows starting at `src` (row stride rb). */
static void load_k_quant(const uint8_t *src, enum hr_ggml_type t, uint32_t hd, size_t rb,
                         uint8_t *ku, float *dk)
{
    const size_t bb = t == HR_GGML_Q8_0 ? sizeof(struct hr_block_q8_0) : sizeof(struct hr_block_q4_0);
#if defined(__AVX512F__)
    const __m512i idx = _mm512_mullo_epi32(
        _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
        _mm512_set1_epi32((int)rb));
    for (uint32_t b = 0; b < hd / 32; b++) {
        const uint8_t *blk = src + b * bb;
        const __m512i d32 = _mm512_i32gather_epi32(idx, (const void *)blk, 1);
        _mm512_storeu_ps(dk + (size_t)b * 16, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d32)));
        uint8_t *kb = ku + (size_t)b * 8 * 64;
        if (t == HR_GGML_Q8_0) {
            for (uint32_t g = 0; g < 8; g++) {
                __m512i w = _mm512_i32gather_epi32(idx, (const void *)(blk + 2 + 4 * g), 1);
                _mm512_storeu_si512(kb + g * 64, _mm512_xor_si512(w, _mm512_set1_epi8((char)0x80)));
            }
        } else {
            const __m512i lo = _mm512_set1_epi8(0x0F);
            for (uint32_t g = 0; g < 4; g++) {
                __m512i w = _mm512_i32gather_epi32(idx, (const void *)(blk + 2 + 4 * g), 1);
                _mm512_storeu_si512(kb + g * 64, _mm512_and_si512(w, lo));
                _mm512_storeu_si512(kb + (g + 4) * 64, _mm512_and_si512(_mm512_srli_epi32(w, 4), lo));
            }
        }
    }
#else
    for (uint32_t j = 0; j < HR_ATTN_TILE; j++) {
        const uint8_t *row = src + j * rb;
        for (uint32_t b = 0; b < hd / 32; b++) {
            const uint8_t *blk = row + b * bb;
            uint16_t d;
            memcpy(&d, blk, sizeof(d));
            dk[(size_t)b * 16 + j] = hr_f16_to_f32(d);
            for (uint32_t i = 0; i < 32; i++)
                ku[((size_t)b * 8 + i / 4) * 64 + j * 4 + i % 4] = k_byte(t, blk, i);
        }
    }
#endif
}

/* Dequantizes the first n rows of a V tile (row stride rb) into vt [16][hd]. */
static void load_v_quant(const uint8_t *src, enum hr_ggml_type t, uint32_t hd, size_t rb,
                         uint32_t n, float *vt)
{
    for (uint32_t j = 0; j < n; j++) {
        const void *row = src + j * rb;
        float *dst = vt + (size_t)j * hd;
#if defined(__AVX512F__)
        const size_t bb = t == HR_GGML_Q8_0 ? sizeof(struct hr_block_q8_0)
                                            : sizeof(struct hr_block_q4_0);
        for (uint32_t b = 0; b < hd / 32; b++) {
            const uint8_t *blk = (const uint8_t *)row + b * bb;
            uint16_t dh;
            memcpy(&dh, blk, sizeof(dh));
            const __m512 d = _mm512_set1_ps(hr_f16_to_f32(dh));
            __m512i a, c;
            if (t == HR_GGML_Q8_0) {
                a = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
                c = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(blk + 18)));
            } else {
                const __m512i w = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(blk + 2)));
                const __m512i lo = _mm512_set1_epi32(0x0F), eight = _mm512_set1_epi32(8);
                a = _mm512_sub_epi32(_mm512_and_si512(w, lo), eight);
                c = _mm512_sub_epi32(_mm512_srli_epi32(w, 4), eight);
            }
            _mm512_storeu_ps(dst + b * 32, _mm512_mul_ps(_mm512_cvtepi32_ps(a), d));
            _mm512_storeu_ps(dst + b * 32 + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(c), d));
        }
#else
        if (t == HR_GGML_Q8_0)
            hr_dequantize_row_q8_0(row, dst, hd);
        else
            hr_dequantize_row_q4_0(row, dst, hd);
#endif
    }
}

/* Scores (before the softmax scale) of the tile's 16 keys against one
 * quantized query row; plain C, the reference of the SIMD version. */
static inline void scores_quant_ref(const uint8_t *ku, const float *dk, const uint8_t *qrow, uint32_t hd,
                             int32_t off, float *s)
{
    const int8_t *qs = (const int8_t *)qrow;
    const float *dq = (const float *)(qrow + hd);
    const int32_t *qsum = (const int32_t *)(dq + hd / 32);
    for (uint32_t j = 0; j < HR_ATTN_TILE; j++) {
        float acc = 0.0f;
        for (uint32_t b = 0; b < hd / 32; b++) {
            int32_t sumi = 0;
            for (uint32_t i = 0; i < 32; i++)
                sumi += (int32_t)ku[((size_t)b * 8 + i / 4) * 64 + j * 4 + i % 4] * qs[b * 32 + i];
            sumi -= off * qsum[b];
            acc = fmaf((float)sumi, dk[(size_t)b * 16 + j] * dq[b], acc);
        }
        s[j] = acc;
    }
}

#if defined(__AVX512F__) && defined(__AVX512VNNI__)
/* The same 16 scores with vpdpbusd: per 32-block 8 instructions for 16 keys. */
static inline __m512 scores_quant_vnni(const uint8_t *ku, const float *dk, const uint8_t *qrow,
                                       uint32_t hd, int32_t off)
{
    const float *dq = (const float *)(qrow + hd);
    const int32_t *qsum = (const int32_t *)(dq + hd / 32);
    __m512 s = _mm512_setzero_ps();
    for (uint32_t b = 0; b < hd / 32; b++) {
        __m512i acc = _mm512_setzero_si512();
        for (uint32_t g = 0; g < 8; g++) {
            int32_t qd;
            memcpy(&qd, qrow + b * 32 + g * 4, sizeof(qd));
            acc = _mm512_dpbusd_epi32(acc, _mm512_loadu_si512(ku + ((size_t)b * 8 + g) * 64),
                                      _mm512_set1_epi32(qd));
        }
        acc = _mm512_sub_epi32(acc, _mm512_set1_epi32(off * qsum[b]));
        const __m512 d = _mm512_mul_ps(_mm512_loadu_ps(dk + (size_t)b * 16), _mm512_set1_ps(dq[b]));
        s = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc), d, s);
    }
    return s;
}
#endif

uint32_t hr_attn_rot_k_dim(enum hr_ggml_type kv_type, uint32_t head_dim)
{
    if (!is_quant(kv_type) || head_dim % 64)
        return 0;
    uint32_t n = 64;
    while (head_dim % (2 * n) == 0)
        n *= 2;
    return n;
}

uint32_t hr_attn_rot_v_dim(enum hr_ggml_type kv_type, uint32_t head_dim)
{
    return is_quant(kv_type) && head_dim % 64 == 0 ? 64 : 0;
}

void hr_attn_rotate(float *x, uint32_t n)
{
    /* The scale comes first and every butterfly rounds once, as in ggml-cpu
     * (its SIMD passes are the same operations, u + v and u + v x -1), so
     * the result does not depend on vector width. */
    const float scale = 1.0f / sqrtf((float)n);
    for (uint32_t j = 0; j < n; j++)
        x[j] *= scale;
    for (uint32_t len = 1; len < n; len <<= 1)
        for (uint32_t i = 0; i < n; i += 2 * len)
            for (uint32_t j = 0; j < len; j++) {
                const float u = x[i + j], v = x[i + len + j];
                x[i + j] = u + v;
                x[i + len + j] = u - v;
            }
}

float hr_attn_score_ref(enum hr_ggml_type kv_type, const void *k_row, const float *q,
                        uint32_t head_dim)
{
    float acc = 0.0f;
    const uint8_t *row = k_row;
    const size_t bb = kv_type == HR_GGML_Q8_0 ? sizeof(struct hr_block_q8_0)
                                              : sizeof(struct hr_block_q4_0);
    for (uint32_t b = 0; b < head_dim / 32; b++) {
        struct hr_block_q8_0 qb;
        hr_quantize_row_q8_0_act(q + (size_t)b * 32, &qb, 32);
        const uint8_t *blk = row + b * bb;
        uint16_t dh;
        memcpy(&dh, blk, sizeof(dh));
        int32_t sumi = 0;
        for (uint32_t i = 0; i < 32; i++) {
            int32_t kv = kv_type == HR_GGML_Q8_0
                             ? (int8_t)blk[2 + i]
                             : (int32_t)(i < 16 ? blk[2 + i] & 0x0F : blk[2 + i - 16] >> 4) - 8;
            sumi += kv * qb.qs[i];
        }
        acc = fmaf((float)sumi, hr_f16_to_f32(dh) * hr_f16_to_f32(qb.d), acc);
    }
    return acc;
}

/* ---- the tiled kernel ----------------------------------------------------
 *
 * One call is a query tile: rows r = t x group + h (token t, head h of the
 * group), at most 128. Keys go by KV blocks of HR_ATTN_KEYS = 32, aligned to
 * absolute positions (k0 = 0, 32, 64, ...), each loaded once into f32 (or
 * unsigned-byte, for quantized K) scratch and used by every row of the tile:
 *
 *   S [rows][32] = Q [rows][hd] . K^T [hd][32]      qk_block: R rows x 32 keys
 *   online softmax per row: m, l, corr, P [rows][32] softmax_rows
 *   acc [rows][hd] = acc x corr + P . V [32][hd]    pv_block: R rows x 64 dims
 *
 * The micro-kernels keep R x 2 (QK) or R x 4 (PV) 512-bit accumulators in
 * registers, so each K or V vector loaded feeds R rows and each broadcast
 * query or probability feeds 2-4 vectors: FMA-bound, not load- or
 * latency-bound like a row at a time.
 *
 * Which blocks a row visits depends only on its position (causal: blocks
 * starting after it are skipped; window: blocks wholly behind it are
 * skipped), and within a block each row's arithmetic is the same sequence of
 * operations whatever R is and whichever rows share the tile: QK sums over d
 * in order, PV over all 32 keys in order (masked keys have p = 0 exactly and
 * V rows past the sequence are zeroed, so they add exact zeros), and the
 * softmax reductions are per row. Hence batch invariance, bit for bit. */

#define QK_R 6 /* rows per QK micro-kernel: 12 accumulators */
#define PV_R 4 /* rows per PV micro-kernel: 16 accumulators */

#if defined(__AVX512F__)
#define HR_AI static inline __attribute__((always_inline))

/* The micro-kernels name their accumulators one by one (a<row><vector>)
 * rather than as arrays: with R and W constants after inlining, the unused
 * ones vanish and the rest live in registers (GCC -O2 keeps small arrays of
 * vectors on the stack). */

/* S[r][0..31] = sum over d, in order, of q_r[d] x K[d][j]; K as two halves
 * [hd][16]. */
HR_AI void qk_f32(const float *k0, const float *k1, uint32_t hd, const float *const *q, float *s,
                  const int R)
{
    const __m512 z = _mm512_setzero_ps();
    __m512 a00 = z, a01 = z, a10 = z, a11 = z, a20 = z, a21 = z, a30 = z, a31 = z, a40 = z,
           a41 = z, a50 = z, a51 = z;
    const float *q0 = q[0], *q1 = R > 1 ? q[1] : q0, *q2 = R > 2 ? q[2] : q0,
                *q3 = R > 3 ? q[3] : q0, *q4 = R > 4 ? q[4] : q0, *q5 = R > 5 ? q[5] : q0;
    for (uint32_t d = 0; d < hd; d++) {
        const __m512 x0 = _mm512_load_ps(k0 + (size_t)d * 16), x1 = _mm512_load_ps(k1 + (size_t)d * 16);
#define QK_ROW(r)                                                                                  \
    if (R > r) {                                                                                   \
        const __m512 b = _mm512_set1_ps(q##r[d]);                                                  \
        a##r##0 = _mm512_fmadd_ps(b, x0, a##r##0);                                                 \
        a##r##1 = _mm512_fmadd_ps(b, x1, a##r##1);                                                 \
    }
        QK_ROW(0) QK_ROW(1) QK_ROW(2) QK_ROW(3) QK_ROW(4) QK_ROW(5)
#undef QK_ROW
    }
#define QK_STORE(r)                                                                                \
    if (R > r) {                                                                                   \
        _mm512_store_ps(s + (size_t)r * HR_ATTN_KEYS, a##r##0);                                    \
        _mm512_store_ps(s + (size_t)r * HR_ATTN_KEYS + 16, a##r##1);                               \
    }
    QK_STORE(0) QK_STORE(1) QK_STORE(2) QK_STORE(3) QK_STORE(4) QK_STORE(5)
#undef QK_STORE
}

/* acc_r[i0 .. i0 + 16W) = acc_r x corr_r + sum over j, in order, of
 * p_r[j] x V[j][..]. */
HR_AI void pv_f32(const float *vt, uint32_t hd, uint32_t i0, const float *p, const float *corr,
                  float *acc, const int R, const int W)
{
    const __m512 z = _mm512_setzero_ps();
    __m512 a00 = z, a01 = z, a02 = z, a03 = z, a10 = z, a11 = z, a12 = z, a13 = z, a20 = z,
           a21 = z, a22 = z, a23 = z, a30 = z, a31 = z, a32 = z, a33 = z;
    float *o = acc + i0;
#define PV_LOAD(r, w)                                                                              \
    if (R > r && W > w)                                                                            \
        a##r##w = _mm512_mul_ps(_mm512_loadu_ps(o + (size_t)r * hd + 16 * w),                     \
                                _mm512_set1_ps(corr[r]));
#define PV_ROW(M, r) M(r, 0) M(r, 1) M(r, 2) M(r, 3)
#define PV_ALL(M) PV_ROW(M, 0) PV_ROW(M, 1) PV_ROW(M, 2) PV_ROW(M, 3)
    PV_ALL(PV_LOAD)
    const float *v = vt + i0;
    for (uint32_t j = 0; j < HR_ATTN_KEYS; j++, v += hd) {
        const __m512 v0 = _mm512_loadu_ps(v), v1 = W > 1 ? _mm512_loadu_ps(v + 16) : z;
        const __m512 v2 = W > 2 ? _mm512_loadu_ps(v + 32) : z, v3 = W > 3 ? _mm512_loadu_ps(v + 48) : z;
        __m512 b0 = _mm512_set1_ps(p[j]), b1 = z, b2 = z, b3 = z;
        if (R > 1)
            b1 = _mm512_set1_ps(p[HR_ATTN_KEYS + j]);
        if (R > 2)
            b2 = _mm512_set1_ps(p[2 * HR_ATTN_KEYS + j]);
        if (R > 3)
            b3 = _mm512_set1_ps(p[3 * HR_ATTN_KEYS + j]);
#define PV_FMA(r, w)                                                                               \
    if (R > r && W > w)                                                                            \
        a##r##w = _mm512_fmadd_ps(b##r, v##w, a##r##w);
        PV_ALL(PV_FMA)
#undef PV_FMA
    }
#define PV_STORE(r, w)                                                                             \
    if (R > r && W > w)                                                                            \
        _mm512_storeu_ps(o + (size_t)r * hd + 16 * w, a##r##w);
    PV_ALL(PV_STORE)
#undef PV_STORE
#undef PV_LOAD
#undef PV_ROW
#undef PV_ALL
}

#if defined(__AVX512VNNI__)
/* The quantized scores of R rows against both 16-key halves: per 32-block an
 * exact integer dot (vpdpbusd, 8 per half and row), then in block order
 * s = fma(sumi, d_k x d_q, s): hr_attn_score_ref's expression. */
HR_AI void qk_quant(const uint8_t *ku0, const float *dk0, const uint8_t *ku1, const float *dk1,
                    uint32_t hd, const uint8_t *const *qq, int32_t off, float *s, const int R)
{
    const __m512 z = _mm512_setzero_ps();
    __m512 f00 = z, f01 = z, f10 = z, f11 = z, f20 = z, f21 = z, f30 = z, f31 = z, f40 = z,
           f41 = z, f50 = z, f51 = z;
    const uint8_t *q0 = qq[0], *q1 = R > 1 ? qq[1] : q0, *q2 = R > 2 ? qq[2] : q0,
                  *q3 = R > 3 ? qq[3] : q0, *q4 = R > 4 ? qq[4] : q0, *q5 = R > 5 ? qq[5] : q0;
    for (uint32_t b = 0; b < hd / 32; b++) {
        const __m512i zi = _mm512_setzero_si512();
        __m512i a00 = zi, a01 = zi, a10 = zi, a11 = zi, a20 = zi, a21 = zi, a30 = zi, a31 = zi,
                a40 = zi, a41 = zi, a50 = zi, a51 = zi;
        for (uint32_t g = 0; g < 8; g++) {
            const __m512i x0 = _mm512_loadu_si512(ku0 + ((size_t)b * 8 + g) * 64);
            const __m512i x1 = _mm512_loadu_si512(ku1 + ((size_t)b * 8 + g) * 64);
#define QQ_ROW(r)                                                                                  \
    if (R > r) {                                                                                   \
        int32_t qd;                                                                                \
        memcpy(&qd, q##r + b * 32 + g * 4, sizeof(qd));                                            \
        const __m512i y = _mm512_set1_epi32(qd);                                                   \
        a##r##0 = _mm512_dpbusd_epi32(a##r##0, x0, y);                                             \
        a##r##1 = _mm512_dpbusd_epi32(a##r##1, x1, y);                                             \
    }
            QQ_ROW(0) QQ_ROW(1) QQ_ROW(2) QQ_ROW(3) QQ_ROW(4) QQ_ROW(5)
#undef QQ_ROW
        }
        const __m512 d0 = _mm512_loadu_ps(dk0 + (size_t)b * 16), d1 = _mm512_loadu_ps(dk1 + (size_t)b * 16);
#define QQ_SCALE(r)                                                                                \
    if (R > r) {                                                                                   \
        const float *dq = (const float *)(q##r + hd);                                              \
        const int32_t *qsum = (const int32_t *)(dq + hd / 32);                                     \
        const __m512i o = _mm512_set1_epi32(off * qsum[b]);                                        \
        const __m512 e = _mm512_set1_ps(dq[b]);                                                    \
        f##r##0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a##r##0, o)),                \
                                  _mm512_mul_ps(d0, e), f##r##0);                                  \
        f##r##1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(a##r##1, o)),                \
                                  _mm512_mul_ps(d1, e), f##r##1);                                  \
    }
        QQ_SCALE(0) QQ_SCALE(1) QQ_SCALE(2) QQ_SCALE(3) QQ_SCALE(4) QQ_SCALE(5)
#undef QQ_SCALE
    }
#define QQ_STORE(r)                                                                                \
    if (R > r) {                                                                                   \
        _mm512_store_ps(s + (size_t)r * HR_ATTN_KEYS, f##r##0);                                    \
        _mm512_store_ps(s + (size_t)r * HR_ATTN_KEYS + 16, f##r##1);                               \
    }
    QQ_STORE(0) QQ_STORE(1) QQ_STORE(2) QQ_STORE(3) QQ_STORE(4) QQ_STORE(5)
#undef QQ_STORE
}
#endif
#endif

/* Geometry and scratch of one call. */
struct tile {
    const struct hr_attn_ctx *c;
    enum hr_ggml_type type;
    bool quant;
    uint32_t hd, rows;
    int32_t koff;
    float *kt, *vt, *s, *acc, *m, *corr; /* kt: 2 halves [hd][16]; vt [32][hd] */
    float *l;                            /* [rows][16]: lane sums */
    uint8_t *ku, *qq;                    /* quantized K halves, Q8_0 query rows */
    float *dk;
};

/* Scores of rows r0 .. r0 + n - 1 against the loaded block into t->s. */
static void scores(const struct tile *t, const float *const *qr, uint32_t r0, uint32_t n)
{
    const uint32_t hd = t->hd;
    float *s = t->s + (size_t)r0 * HR_ATTN_KEYS;
    if (t->quant) {
        const uint8_t *ku1 = t->ku + (size_t)HR_ATTN_TILE * hd;
        const float *dk1 = t->dk + (size_t)hd / 32 * 16;
#if defined(__AVX512F__) && defined(__AVX512VNNI__)
        const uint8_t *qq[QK_R];
        for (uint32_t i = 0; i < n; i += QK_R) {
            const uint32_t k = n - i < QK_R ? n - i : QK_R;
            for (uint32_t r = 0; r < k; r++)
                qq[r] = t->qq + (size_t)(r0 + i + r) * qrow_bytes(hd);
            float *dst = s + (size_t)i * HR_ATTN_KEYS;
            switch (k) {
            case 1: qk_quant(t->ku, t->dk, ku1, dk1, hd, qq, t->koff, dst, 1); break;
            case 2: qk_quant(t->ku, t->dk, ku1, dk1, hd, qq, t->koff, dst, 2); break;
            case 3: qk_quant(t->ku, t->dk, ku1, dk1, hd, qq, t->koff, dst, 3); break;
            case 4: qk_quant(t->ku, t->dk, ku1, dk1, hd, qq, t->koff, dst, 4); break;
            case 5: qk_quant(t->ku, t->dk, ku1, dk1, hd, qq, t->koff, dst, 5); break;
            default: qk_quant(t->ku, t->dk, ku1, dk1, hd, qq, t->koff, dst, 6); break;
            }
        }
#else
        for (uint32_t r = 0; r < n; r++) {
            const uint8_t *qq = t->qq + (size_t)(r0 + r) * qrow_bytes(hd);
            scores_quant_ref(t->ku, t->dk, qq, hd, t->koff, s + (size_t)r * HR_ATTN_KEYS);
            scores_quant_ref(ku1, dk1, qq, hd, t->koff, s + (size_t)r * HR_ATTN_KEYS + 16);
        }
#endif
        return;
    }
    const float *k1 = t->kt + (size_t)HR_ATTN_TILE * hd;
#if defined(__AVX512F__)
    for (uint32_t i = 0; i < n; i += QK_R) {
        const uint32_t k = n - i < QK_R ? n - i : QK_R;
        const float *const *q = qr + r0 + i;
        float *dst = s + (size_t)i * HR_ATTN_KEYS;
        switch (k) {
        case 1: qk_f32(t->kt, k1, hd, q, dst, 1); break;
        case 2: qk_f32(t->kt, k1, hd, q, dst, 2); break;
        case 3: qk_f32(t->kt, k1, hd, q, dst, 3); break;
        case 4: qk_f32(t->kt, k1, hd, q, dst, 4); break;
        case 5: qk_f32(t->kt, k1, hd, q, dst, 5); break;
        default: qk_f32(t->kt, k1, hd, q, dst, 6); break;
        }
    }
#else
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t j = 0; j < HR_ATTN_KEYS; j++) {
            const float *kh = j < 16 ? t->kt : k1;
            float a = 0.0f;
            for (uint32_t d = 0; d < hd; d++)
                a = fmaf(qr[r0 + r][d], kh[(size_t)d * 16 + j % 16], a);
            s[(size_t)r * HR_ATTN_KEYS + j] = a;
        }
#endif
}

/* The online softmax step of rows r0 .. r0 + n - 1 for the block at key k0:
 * scale, mask (causal and window), new running maximum, P = exp(s - m) with
 * exact zeros where masked, l and the rescale factor corr. */
static void softmax_rows(const struct tile *t, int32_t pos0, uint32_t k0, uint32_t r0, uint32_t n)
{
    const struct hr_attn_ctx *c = t->c;
    const uint32_t G = c->group;
    for (uint32_t r = r0; r < r0 + n; r++) {
        const int32_t pos = pos0 + (int32_t)(r / G);
        /* Valid keys: lo <= key <= pos (lo from the window). */
        int32_t lo = c->window ? pos - (int32_t)c->window + 1 : 0;
        int64_t jlo = (int64_t)lo - k0, jhi = (int64_t)pos - k0; /* inclusive, in block */
        if (jlo < 0)
            jlo = 0;
        if (jhi > HR_ATTN_KEYS - 1)
            jhi = HR_ATTN_KEYS - 1;
        float *s = t->s + (size_t)r * HR_ATTN_KEYS;
#if defined(__AVX512F__)
        const uint32_t bits = (uint32_t)(((2ull << jhi) - 1) & ~((1ull << jlo) - 1));
        const __mmask16 v0 = (__mmask16)bits, v1 = (__mmask16)(bits >> 16);
        const __m512 sc = _mm512_set1_ps(c->scale), ninf = _mm512_set1_ps(-INFINITY);
        __m512 s0 = _mm512_mask_blend_ps(v0, ninf, _mm512_mul_ps(_mm512_load_ps(s), sc));
        __m512 s1 = _mm512_mask_blend_ps(v1, ninf, _mm512_mul_ps(_mm512_load_ps(s + 16), sc));
        const float mt = _mm512_reduce_max_ps(_mm512_max_ps(s0, s1));
        const float m_new = mt > t->m[r] ? mt : t->m[r];
        const __m512 mv = _mm512_set1_ps(m_new);
        const __m512 p0 = _mm512_maskz_mov_ps(v0, hr_exp512(_mm512_sub_ps(s0, mv)));
        const __m512 p1 = _mm512_maskz_mov_ps(v1, hr_exp512(_mm512_sub_ps(s1, mv)));
        /* exp(0) is exactly 1: no call when the maximum stands (most blocks). */
        const float corr = m_new == t->m[r] ? 1.0f : expf(t->m[r] - m_new);
        float *lr = t->l + (size_t)r * HR_ATTN_L_LANES;
        _mm512_storeu_ps(lr, _mm512_fmadd_ps(_mm512_loadu_ps(lr), _mm512_set1_ps(corr),
                                             _mm512_add_ps(p0, p1)));
        _mm512_store_ps(s, p0);
        _mm512_store_ps(s + 16, p1);
#else
        float mt = -INFINITY;
        for (int64_t j = 0; j < HR_ATTN_KEYS; j++) {
            s[j] = j >= jlo && j <= jhi ? s[j] * c->scale : -INFINITY;
            mt = s[j] > mt ? s[j] : mt;
        }
        const float m_new = mt > t->m[r] ? mt : t->m[r];
        float sum = 0.0f;
        for (int64_t j = 0; j < HR_ATTN_KEYS; j++) {
            s[j] = j >= jlo && j <= jhi ? expf(s[j] - m_new) : 0.0f;
            sum += s[j];
        }
        const float corr = m_new == t->m[r] ? 1.0f : expf(t->m[r] - m_new);
        t->l[(size_t)r * HR_ATTN_L_LANES] = t->l[(size_t)r * HR_ATTN_L_LANES] * corr + sum;
#endif
        t->corr[r] = corr;
        t->m[r] = m_new;
    }
}

/* acc of rows r0 .. r0 + n - 1 = acc x corr + P . V. */
static void accumulate(const struct tile *t, uint32_t r0, uint32_t n)
{
    const uint32_t hd = t->hd;
    uint32_t i0 = 0;
#if defined(__AVX512F__)
    for (; i0 + 16 <= hd; i0 += 64) {
        const uint32_t W = (hd - i0) / 16 < 4 ? (hd - i0) / 16 : 4;
        for (uint32_t i = 0; i < n; i += PV_R) {
            const uint32_t k = n - i < PV_R ? n - i : PV_R, r = r0 + i;
            const float *p = t->s + (size_t)r * HR_ATTN_KEYS, *cr = t->corr + r;
            float *a = t->acc + (size_t)r * hd;
#define PV_CASE(R)                                                                                 \
    case R:                                                                                        \
        if (W == 4)                                                                                \
            pv_f32(t->vt, hd, i0, p, cr, a, R, 4);                                                 \
        else if (W == 3)                                                                           \
            pv_f32(t->vt, hd, i0, p, cr, a, R, 3);                                                 \
        else if (W == 2)                                                                           \
            pv_f32(t->vt, hd, i0, p, cr, a, R, 2);                                                 \
        else                                                                                       \
            pv_f32(t->vt, hd, i0, p, cr, a, R, 1);                                                 \
        break;
            switch (k) {
                PV_CASE(1)
                PV_CASE(2)
                PV_CASE(3)
            default:
                PV_CASE(4)
            }
#undef PV_CASE
        }
        if (W < 4) {
            i0 += 16 * W;
            break;
        }
    }
#endif
    for (uint32_t r = r0; r < r0 + n; r++) /* plain C: the dims SIMD did not cover */
        for (uint32_t i = i0; i < hd; i++) {
            float a = t->acc[(size_t)r * hd + i] * t->corr[r];
            for (uint32_t j = 0; j < HR_ATTN_KEYS; j++)
                a = fmaf(t->s[(size_t)r * HR_ATTN_KEYS + j], t->vt[(size_t)j * hd + i], a);
            t->acc[(size_t)r * hd + i] = a;
        }
}

/* Loads keys k0 .. k0 + 31 (the part below n_keys; the rest is zeroed) of
 * the call's KV head. */
static void load_block(const struct tile *t, uint32_t kv_head, uint32_t k0, uint32_t n_keys)
{
    const struct hr_attn_ctx *c = t->c;
    const uint32_t hd = t->hd, bt = c->block_tokens;
    const size_t hb = hr_kv_head_bytes(c->kv), rb = hr_kv_row_bytes(t->type, hd);
    const size_t esz = t->type == HR_GGML_F32 ? 4 : 2;
    for (uint32_t h = 0; h < 2; h++) {
        const uint32_t kh = k0 + h * HR_ATTN_TILE;
        float *vt = t->vt + (size_t)h * HR_ATTN_TILE * hd;
        const uint32_t n = kh >= n_keys ? 0 : n_keys - kh < HR_ATTN_TILE ? n_keys - kh : HR_ATTN_TILE;
        if (n == 0) { /* scores are masked; V must be zeros, not garbage */
            if (t->quant)
                memset(t->ku + (size_t)h * HR_ATTN_TILE * hd, 0, (size_t)HR_ATTN_TILE * hd);
            else
                memset(t->kt + (size_t)h * HR_ATTN_TILE * hd, 0, (size_t)HR_ATTN_TILE * hd * 4);
            memset(vt, 0, (size_t)HR_ATTN_TILE * hd * sizeof(float));
            continue;
        }
        const int32_t b = c->blocks[kh / bt];
        const uint32_t o = kh % bt;
        const uint8_t *kbase = (const uint8_t *)hr_kv_block_k(c->kv, b, c->layer) + kv_head * hb;
        const uint8_t *vbase = (const uint8_t *)hr_kv_block_v(c->kv, b, c->layer) + kv_head * hb;
        if (t->quant) {
            load_k_quant(kbase + o * rb, t->type, hd, rb, t->ku + (size_t)h * HR_ATTN_TILE * hd,
                         t->dk + (size_t)h * hd / 32 * 16);
            load_v_quant(vbase + o * rb, t->type, hd, rb, n, vt);
        } else {
            load_tiles(kbase + o * esz, vbase + (size_t)o * hd * esz, t->type == HR_GGML_F32, hd,
                       bt, t->kt + (size_t)h * HR_ATTN_TILE * hd, vt);
        }
        if (n < HR_ATTN_TILE) /* slots not yet written may hold NaN bit patterns */
            memset(vt + (size_t)n * hd, 0, (size_t)(HR_ATTN_TILE - n) * hd * sizeof(float));
    }
}

/* The first key block a row at `pos` visits. */
static uint32_t first_block(const struct hr_attn_ctx *c, int32_t pos)
{
    if (!c->window || pos < (int32_t)c->window)
        return 0;
    return (uint32_t)(pos - (int32_t)c->window + 1) / HR_ATTN_KEYS * HR_ATTN_KEYS;
}

uint64_t hr_attn_cost(const struct hr_attn_ctx *c, int32_t pos0, uint32_t nq)
{
    uint64_t keys = 0;
    for (uint32_t t = 0; t < nq; t++) {
        const int32_t pos = pos0 + (int32_t)t;
        keys += (uint64_t)pos / HR_ATTN_KEYS * HR_ATTN_KEYS + HR_ATTN_KEYS - first_block(c, pos);
    }
    /* Per-call fixed work (query setup, output) counts as a few blocks. */
    return (keys + 4 * HR_ATTN_KEYS) * c->group;
}

void hr_attention(const struct hr_attn_ctx *c, uint32_t kv_head, const float *q, size_t q_stride,
                  int32_t pos0, uint32_t nq, float *out, size_t out_stride, void *scratch)
{
    const uint32_t hd = c->head_dim, G = c->group, rows = nq * G;
    struct tile t = {.c = c, .type = hr_kv_type(c->kv), .hd = hd, .rows = rows};
    t.quant = is_quant(t.type);
    t.koff = t.type == HR_GGML_Q8_0 ? 128 : 8;
    t.kt = scratch;
    t.vt = t.kt + (size_t)HR_ATTN_KEYS * hd;
    t.s = t.vt + (size_t)HR_ATTN_KEYS * hd;
    const uint32_t mr = max_rows(G); /* the scratch's layout, as hr_attn_scratch_bytes */
    const float **qr = (const float **)(t.s + (size_t)mr * HR_ATTN_KEYS);
    t.acc = (float *)(qr + mr);
    t.m = t.acc + (size_t)mr * hd;
    t.corr = t.m + mr;
    t.l = t.corr + mr;
    t.qq = (uint8_t *)(t.l + (size_t)mr * HR_ATTN_L_LANES);
    t.ku = (uint8_t *)t.kt;
    t.dk = (float *)(t.ku + (size_t)HR_ATTN_KEYS * hd);

    for (uint32_t r = 0; r < rows; r++) {
        qr[r] = q + (size_t)(r / G) * q_stride + (size_t)(r % G) * hd;
        /* A sink is the softmax's initial state: m = sink, l = exp(0). */
        const float *sink = c->sinks ? c->sinks + (size_t)kv_head * G + r % G : NULL;
        t.m[r] = sink ? *sink : -INFINITY;
        memset(t.l + (size_t)r * HR_ATTN_L_LANES, 0, HR_ATTN_L_LANES * sizeof(float));
        t.l[(size_t)r * HR_ATTN_L_LANES] = sink ? 1.0f : 0.0f;
        if (t.quant)
            quantize_query(qr[r], hd, t.qq + (size_t)r * qrow_bytes(hd));
    }
    memset(t.acc, 0, (size_t)rows * hd * sizeof(float));

    const int32_t last = pos0 + (int32_t)nq - 1;
    const uint32_t n_keys = (uint32_t)last + 1;
    for (uint32_t k0 = first_block(c, pos0); k0 < n_keys; k0 += HR_ATTN_KEYS) {
        /* Rows with some valid key here: tokens from the first at or after
         * k0 (causal) to the last whose window still reaches k0 + 31. */
        uint32_t t_lo = (int32_t)k0 > pos0 ? k0 - (uint32_t)pos0 : 0, t_hi = nq;
        if (c->window) {
            const int64_t reach = (int64_t)k0 + HR_ATTN_KEYS - 1 + c->window - 1 - pos0;
            t_hi = reach < 0 ? 0 : reach + 1 < (int64_t)nq ? (uint32_t)(reach + 1) : nq;
        }
        if (t_lo >= t_hi)
            continue;
        load_block(&t, kv_head, k0, n_keys);
        const uint32_t r0 = t_lo * G, n = (t_hi - t_lo) * G;
        scores(&t, qr, r0, n);
        softmax_rows(&t, pos0, k0, r0, n);
        accumulate(&t, r0, n);
    }
    for (uint32_t r = 0; r < rows; r++) {
        float *dst = out + (size_t)(r / G) * out_stride + (size_t)(r % G) * hd;
        const float *lr = t.l + (size_t)r * HR_ATTN_L_LANES;
        float l = 0.0f;
        for (uint32_t i = 0; i < HR_ATTN_L_LANES; i++) /* plain C's lanes 1-15 are zeros */
            l += lr[i];
        const float inv = 1.0f / l;
        for (uint32_t i = 0; i < hd; i++)
            dst[i] = t.acc[(size_t)r * hd + i] * inv;
    }
}
