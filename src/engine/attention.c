/* attention.c - tiled online-softmax attention over paged KV; see attention.h. */
#include "engine/attention.h"

#include <math.h>
#include <string.h>

#include "base/fp16.h"

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

size_t hr_attn_scratch_bytes(uint32_t head_dim, uint32_t group)
{
    /* K tile [head_dim][16] and V tile [16][head_dim] in f32, then per row:
     * acc [head_dim], m, l. */
    size_t floats = 2 * (size_t)HR_ATTN_TILE * head_dim + (size_t)max_rows(group) * (head_dim + 2);
    return floats * sizeof(float);
}

void hr_attn_store(struct hr_kv_pool *kv, const int32_t *blocks, uint32_t layer, uint32_t n_head_kv,
                   uint32_t head_dim, int32_t pos, const float *k, const float *v)
{
    const uint32_t bt = hr_kv_block_tokens(kv), slot = (uint32_t)pos % bt;
    const int32_t b = blocks[(uint32_t)pos / bt];
    uint8_t *kb = hr_kv_block_k(kv, b, layer), *vb = hr_kv_block_v(kv, b, layer);
    const size_t hb = hr_kv_head_bytes(kv);
    const int f32 = hr_kv_type(kv) == HR_GGML_F32;
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
    const int f32 = hr_kv_type(c->kv) == HR_GGML_F32;
    const size_t hb = hr_kv_head_bytes(c->kv), esz = f32 ? 4 : 2;
    float *kt = scratch, *vt = kt + (size_t)HR_ATTN_TILE * hd;
    float *acc = vt + (size_t)HR_ATTN_TILE * hd, *m = acc + (size_t)rows * hd, *l = m + rows;
    for (uint32_t r = 0; r < rows; r++) {
        m[r] = -INFINITY;
        l[r] = 0.0f;
    }
    memset(acc, 0, (size_t)rows * hd * sizeof(float));
    const uint32_t n_keys = (uint32_t)pos0 + nq;
    for (uint32_t k0 = 0; k0 < n_keys; k0 += HR_ATTN_TILE) {
        const int32_t b = c->blocks[k0 / bt];
        const uint32_t o = k0 % bt;
        const uint8_t *ks = (const uint8_t *)hr_kv_block_k(c->kv, b, c->layer) + kv_head * hb + o * esz;
        const uint8_t *vs = (const uint8_t *)hr_kv_block_v(c->kv, b, c->layer) + kv_head * hb +
                            (size_t)o * hd * esz;
        load_tiles(ks, vs, f32, hd, bt, kt, vt);
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
#if defined(__AVX512F__)
            __m512 s = _mm512_setzero_ps();
            for (uint32_t d = 0; d < hd; d++)
                s = _mm512_fmadd_ps(_mm512_set1_ps(qr[d]), _mm512_loadu_ps(kt + (size_t)d * 16), s);
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
            for (uint32_t j = 0; j < HR_ATTN_TILE; j++) {
                float dot = 0.0f;
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
