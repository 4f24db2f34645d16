/* attention.c - tiled online-softmax attention over paged KV; see attention.h. */
#include "engine/attention.h"

#include <math.h>
#include <string.h>

#include "base/fp16.h"
#include "kernels/quant.h"

#if defined(__AVX512F__)
#include <immintrin.h>
#endif

uint32_t hr_attn_block_tokens(uint32_t group)
{
    uint32_t t = group ? 64 / group : 1;
    if (t < 1)
        t = 1;
    if (t > 16)
        t = 16;
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
static size_t qrow_bytes(uint32_t head_dim)
{
    return (size_t)head_dim + (size_t)head_dim / 32 * 2 * sizeof(float);
}

size_t hr_attn_scratch_bytes(enum hr_ggml_type kv_type, uint32_t head_dim, uint32_t group)
{
    /* K tile [head_dim][16] and V tile [16][head_dim] in f32, then per row:
     * acc [head_dim], m, l. A quantized K tile (16 x head_dim bytes plus 16
     * scales per 32-block) fits in the f32 K tile's room; the quantized
     * query rows come after the running state. */
    size_t floats = 2 * (size_t)HR_ATTN_TILE * head_dim + (size_t)max_rows(group) * (head_dim + 2);
    size_t bytes = floats * sizeof(float);
    if (is_quant(kv_type))
        bytes += (size_t)max_rows(group) * qrow_bytes(head_dim);
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

#if defined(__AVX512F__)
/* e^x for x <= 0 (x = -inf gives a finite tiny value; callers mask those
 * lanes): Cody-Waite reduction x = n ln2 + r, |r| <= ln2/2, then Cephes'
 * degree-6 polynomial for e^r and a scale by 2^n; about 1 ulp. */
static inline __m512 exp512(__m512 x)
{
    x = _mm512_max_ps(x, _mm512_set1_ps(-88.0f));
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 r2 = _mm512_mul_ps(r, r);
    __m512 y = _mm512_fmadd_ps(p, r2, _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(y, n);
}
#endif

void hr_attention(const struct hr_attn_ctx *c, uint32_t kv_head, const float *q, size_t q_stride,
                  int32_t pos0, uint32_t nq, float *out, size_t out_stride, void *scratch)
{
    const uint32_t hd = c->head_dim, bt = c->block_tokens, G = c->group, rows = nq * G;
    const enum hr_ggml_type type = hr_kv_type(c->kv);
    const bool quant = is_quant(type);
    const int f32 = type == HR_GGML_F32;
    const size_t hb = hr_kv_head_bytes(c->kv), esz = f32 ? 4 : 2;
    const size_t rb = hr_kv_row_bytes(type, hd); /* quantized: one token's row */
    const int32_t koff = type == HR_GGML_Q8_0 ? 128 : 8;
    float *kt = scratch, *vt = kt + (size_t)HR_ATTN_TILE * hd;
    float *acc = vt + (size_t)HR_ATTN_TILE * hd, *m = acc + (size_t)rows * hd, *l = m + rows;
    uint8_t *ku = (uint8_t *)kt, *qq = (uint8_t *)(l + rows);
    float *dk = (float *)(ku + (size_t)HR_ATTN_TILE * hd);
    for (uint32_t r = 0; r < rows; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
        if (quant)
            quantize_query(q + (size_t)(r / G) * q_stride + (size_t)(r % G) * hd, hd,
                           qq + (size_t)r * qrow_bytes(hd));
    }
    memset(acc, 0, (size_t)rows * hd * sizeof(float));
    const uint32_t n_keys = (uint32_t)pos0 + nq;
    for (uint32_t k0 = 0; k0 < n_keys; k0 += HR_ATTN_TILE) {
        const int32_t b = c->blocks[k0 / bt];
        const uint32_t o = k0 % bt;
        const uint8_t *kbase = (const uint8_t *)hr_kv_block_k(c->kv, b, c->layer) + kv_head * hb;
        const uint8_t *vbase = (const uint8_t *)hr_kv_block_v(c->kv, b, c->layer) + kv_head * hb;
        if (quant) {
            const uint32_t n_tile = n_keys - k0 < HR_ATTN_TILE ? n_keys - k0 : HR_ATTN_TILE;
            load_k_quant(kbase + o * rb, type, hd, rb, ku, dk);
            load_v_quant(vbase + o * rb, type, hd, rb, n_tile, vt);
        } else {
            load_tiles(kbase + o * esz, vbase + (size_t)o * hd * esz, f32, hd, bt, kt, vt);
        }
        for (uint32_t r = 0; r < rows; r++) {
            const uint32_t t = r / G, h = r % G;
            const int32_t pos = pos0 + (int32_t)t;
            if ((int32_t)k0 > pos)
                continue; /* wholly past this row: contributes nothing */
            uint32_t n_valid = (uint32_t)pos + 1 - k0;
            if (n_valid > HR_ATTN_TILE)
                n_valid = HR_ATTN_TILE;
            const float *qr = q + (size_t)t * q_stride + (size_t)h * hd;
            float *ar = acc + (size_t)r * hd;
            const uint8_t *qqr = quant ? qq + (size_t)r * qrow_bytes(hd) : NULL;
#if defined(__AVX512F__)
            __m512 s = _mm512_setzero_ps();
            if (quant) {
#if defined(__AVX512VNNI__)
                s = scores_quant_vnni(ku, dk, qqr, hd, koff);
#else
                float sq[HR_ATTN_TILE];
                scores_quant_ref(ku, dk, qqr, hd, koff, sq);
                s = _mm512_loadu_ps(sq);
#endif
            } else {
                for (uint32_t d = 0; d < hd; d++)
                    s = _mm512_fmadd_ps(_mm512_set1_ps(qr[d]), _mm512_loadu_ps(kt + (size_t)d * 16),
                                        s);
            }
            s = _mm512_mul_ps(s, _mm512_set1_ps(c->scale));
            const __mmask16 valid = (__mmask16)((1u << n_valid) - 1u);
            s = _mm512_mask_blend_ps(valid, _mm512_set1_ps(-INFINITY), s);
            const float mt = _mm512_reduce_max_ps(s);
            const float m_new = mt > m[r] ? mt : m[r];
            const float corr = expf(m[r] - m_new);
            __m512 p = _mm512_maskz_mov_ps(valid, exp512(_mm512_sub_ps(s, _mm512_set1_ps(m_new))));
            l[r] = l[r] * corr + _mm512_reduce_add_ps(p);
            float pj[16];
            _mm512_storeu_ps(pj, p);
            const __m512 cv = _mm512_set1_ps(corr);
            uint32_t i = 0;
            for (; i + 16 <= hd; i += 16) {
                __m512 a = _mm512_mul_ps(_mm512_loadu_ps(ar + i), cv);
                for (uint32_t j = 0; j < n_valid; j++)
                    a = _mm512_fmadd_ps(_mm512_set1_ps(pj[j]),
                                        _mm512_loadu_ps(vt + (size_t)j * hd + i), a);
                _mm512_storeu_ps(ar + i, a);
            }
            for (; i < hd; i++) { /* head dims that are not a multiple of 16 */
                float a = ar[i] * corr;
                for (uint32_t j = 0; j < n_valid; j++)
                    a = fmaf(pj[j], vt[(size_t)j * hd + i], a);
                ar[i] = a;
            }
            m[r] = m_new;
#else
            float s[HR_ATTN_TILE], mt = -INFINITY;
            if (quant)
                scores_quant_ref(ku, dk, qqr, hd, koff, s);
            for (uint32_t j = 0; j < HR_ATTN_TILE; j++) {
                float dot = 0.0f;
                if (quant)
                    dot = s[j];
                else
                    for (uint32_t d = 0; d < hd; d++)
                        dot += qr[d] * kt[(size_t)d * HR_ATTN_TILE + j];
                s[j] = j < n_valid ? dot * c->scale : -INFINITY;
                if (s[j] > mt)
                    mt = s[j];
            }
            const float m_new = mt > m[r] ? mt : m[r];
            const float corr = expf(m[r] - m_new);
            float sum = 0.0f;
            for (uint32_t j = 0; j < HR_ATTN_TILE; j++) {
                s[j] = j < n_valid ? expf(s[j] - m_new) : 0.0f;
                sum += s[j];
            }
            l[r] = l[r] * corr + sum;
            for (uint32_t i = 0; i < hd; i++) {
                float a = ar[i] * corr;
                for (uint32_t j = 0; j < n_valid; j++)
                    a += s[j] * vt[(size_t)j * hd + i];
                ar[i] = a;
            }
            m[r] = m_new;
#endif
        }
    }
    for (uint32_t r = 0; r < rows; r++) {
        const uint32_t t = r / G, h = r % G;
        float *dst = out + (size_t)t * out_stride + (size_t)h * hd;
        const float inv = 1.0f / l[r];
        for (uint32_t i = 0; i < hd; i++)
            dst[i] = acc[(size_t)r * hd + i] * inv;
    }
}
