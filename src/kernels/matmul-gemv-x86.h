/*
 * matmul-gemv-x86.h - the decode (small m) kernels for Q8_0, Q4_0 and the
 * K-quants, shared by the AVX2 and AVX-512 files: both include this file
 * once, after defining
 *   HR_GEMV_TARGET  the function attribute (target ISA of that file),
 *   HR_GEMV_VNNI    1 to use vpdpbusd / vpdpwssd (AVX512_VNNI + VL), 0 for
 *                   the AVX2 equivalents (vpmaddubsw + vpmaddwd).
 * Include it after <immintrin.h>, <string.h> and matmul-impl.h, with INLINE
 * (static inline always_inline) and UNROLL (a full-unroll pragma) defined.
 * Private to src/kernels/; every function is static.
 *
 * Two families:
 *  - free-running (gemv_q80, gemv_q45_K, gemv_q6_K; the AVX2 build, and the
 *    AVX-512 Q8_0/Q4_0 decode with batch invariance off): one weight row at a
 *    time, the k loop innermost, M <= GEMV_MAX_M tokens per pass with all
 *    accumulators in registers, 8-lane partial sums scaled per block;
 *  - GEMM-order (gemv1_q80_rows8, gemv_k_rows8; AVX-512 only): 8 rows at a
 *    time, integer sums folded per block and scaled in the packed GEMM's
 *    order, so results do not depend on m (see the comment at the #if).
 * Each thread streams its rows once per pass, so decode reads every weight
 * byte once. The integer parts are exact (tested against hr_mm_dot_ref in
 * test-kernels.c).
 */
#ifndef HR_GEMV_TARGET
#error "define HR_GEMV_TARGET and HR_GEMV_VNNI before including matmul-gemv-x86.h"
#endif

/* Broadcasts from memory, forced: given a value it just computed, the
 * compiler would rather shuffle it out of a register (2 vector ops) than
 * store and reload it, but the reload runs on a load port for free. */
HR_GEMV_TARGET static inline int32_t hsum256_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

HR_GEMV_TARGET static inline __m256 bcast_ps_mem(const float *p)
{
    __m256 r;
    __asm__("vbroadcastss %1, %0" : "=x"(r) : "m"(*p));
    return r;
}
HR_GEMV_TARGET static inline __m256i bcast_epi32_mem(const int32_t *p)
{
    __m256i r;
    __asm__("vpbroadcastd %1, %0" : "=x"(r) : "m"(*p));
    return r;
}

#if HR_GEMV_VNNI
#define HR_DPWSSD(acc, a, b) _mm256_dpwssd_epi32((acc), (a), (b))
/* Q8_0 weights become unsigned (w + 128) for vpdpbusd; comp removes the offset. */
#define HR_Q8_WEIGHTS(v) _mm256_xor_si256((v), _mm256_set1_epi8((char)0x80))
#define HR_Q80_DOT(q4, wptr, wq, c8p, a) _mm256_dpbusd_epi32(bcast_epi32_mem(c8p), (wq), (a))
#else
#define HR_DPWSSD(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
/* Without VNNI, Q8_0 uses |w| times sign(w) * a (vpmaddubsw needs one unsigned
 * operand; 2 * 128 * 127 still fits int16), and no offset. Q4_0 nibbles are
 * unsigned already and use comp like the VNNI path. */
#define HR_Q8_WEIGHTS(v) (v)
#define HR_Q80_DOT(q4, wptr, wq, c8p, a)                                                           \
    ((q4) ? _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16((wq), (a)),                    \
                                               _mm256_set1_epi16(1)),                              \
                             bcast_epi32_mem(c8p))                                                 \
          : _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8((wq), (wq)),                   \
                                                   _mm256_sign_epi8((a), (wq))),                   \
                              _mm256_set1_epi16(1)))
#endif

HR_GEMV_TARGET static inline float hsum256(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}


/* Software prefetch distances in bytes ahead of the weight stream, per
 * kernel; 0 leaves the stream to the hardware prefetcher. Tuned with
 * bench-matmul (m = 1, weights from DRAM) on Zen 4. */
#ifndef PF_Q80
#define PF_Q80 0
#endif
#ifndef PF_K
#define PF_K 0
#endif
#define HR_PREFETCH(p, dist, off)                                                                  \
    do {                                                                                           \
        if (dist)                                                                                  \
            _mm_prefetch((const char *)(p) + (dist) + (off), _MM_HINT_T0);                         \
    } while (0)
#define GEMV_MAX_M 4 /* tokens per GEMV pass; arrays are sized for it, M <= it is used */

/* Weights of 32-value blocks that the non-VNNI kernels keep signed (the
 * sign trick; their |w| * |a| pairs fit int16): Q8_0, IQ4_NL, MXFP4. The
 * others are unsigned quants with an offset in comp (Q4_1 / Q5_1: none). */
static inline bool b32_signed(enum hr_ggml_type t)
{
    return !HR_GEMV_VNNI && (t == HR_GGML_Q8_0 || t == HR_GGML_IQ4_NL || t == HR_GGML_MXFP4);
}

/* 0x10 in byte j where bit j of h is set (Q5_0 / Q5_1's fifth bits). */
INLINE HR_GEMV_TARGET __m256i b32_bit4(uint32_t h)
{
#if HR_GEMV_VNNI
    return _mm256_maskz_mov_epi8((__mmask32)h, _mm256_set1_epi8(0x10));
#else
    /* byte j takes byte j / 8 of h, then tests bit j % 8 */
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)h),
                                    _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                     2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
#endif
}

/*
 * The 32 quants of a 32-value block in value order, as the byte operand of
 * the dot product: unsigned for vpdpbusd (Q8_0 w + 128, IQ4_NL / MXFP4 their
 * table + 128, the rest their stored q), or, without VNNI, signed for the
 * types b32_signed names. Nibble types: 16 bytes, low nibbles are values
 * 0-15 and high nibbles 16-31; IQ4_NL / MXFP4 map them through their table
 * with one vpshufb; Q5_x add the fifth bit from qh.
 */
INLINE HR_GEMV_TARGET __m256i b32_weights(enum hr_ggml_type t, const uint8_t *blk)
{
    const uint8_t *q = blk + hr_mm_b32_qs_off(t);
    if (t == HR_GGML_Q8_0)
        return HR_Q8_WEIGHTS(_mm256_loadu_si256((const __m256i *)q));
    const __m128i q16 = _mm_loadu_si128((const __m128i *)q);
    __m256i n = _mm256_and_si256(
        _mm256_inserti128_si256(_mm256_castsi128_si256(q16), _mm_srli_epi16(q16, 4), 1),
        _mm256_set1_epi8(0x0F));
    if (t == HR_GGML_IQ4_NL || t == HR_GGML_MXFP4) {
        const void *tab = HR_GEMV_VNNI ? (t == HR_GGML_IQ4_NL ? (const void *)hr_mm_iq4nl_u8
                                                                : (const void *)hr_mm_mxfp4_u8)
                                       : (t == HR_GGML_IQ4_NL ? (const void *)hr_iq4nl_values
                                                                : (const void *)hr_mxfp4_values);
        return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)tab)), n);
    }
    if (t == HR_GGML_Q5_0 || t == HR_GGML_Q5_1) {
        uint32_t h;
        memcpy(&h, blk + hr_mm_b32_qh_off(t), 4);
        n = _mm256_or_si256(n, b32_bit4(h));
    }
    return n;
}

/* 8 lanes of E8M0 exponents (0..255) as f32 2^(e - 128) (hr_e8m0_to_f32_half). */
INLINE HR_GEMV_TARGET __m256 e8m0_half8(__m256i e)
{
    const __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(norm, sub, small));
}

/* The f32 scales (off 0) or offsets (off 2, Q4_1 / Q5_1) of n <= 8
 * consecutive blocks starting at `first` (bb bytes apart); lanes past n are
 * 0. Assembled in general registers (a vector load of 16-bit stack stores
 * would miss store forwarding; a vpgatherdd measured slower). */
INLINE HR_GEMV_TARGET __m256 b32_scales8(enum hr_ggml_type t, const uint8_t *first, size_t bb,
                                         size_t n, size_t off)
{
    if (t == HR_GGML_MXFP4) {
        uint64_t e = 0;
        UNROLL
        for (int j = 0; j < 8; j++)
            if ((size_t)j < n)
                e |= (uint64_t)first[(size_t)j * bb] << (8 * j);
        const __m256 v = e8m0_half8(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)e)));
        return _mm256_and_ps(v, _mm256_castsi256_ps(_mm256_cmpgt_epi32(
                                    _mm256_set1_epi32((int)n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))));
    }
    uint64_t dlo = 0, dhi = 0;
    UNROLL
    for (int j = 0; j < 8; j++) {
        uint16_t h = 0;
        if ((size_t)j < n)
            memcpy(&h, first + (size_t)j * bb + off, 2);
        if (j < 4)
            dlo |= (uint64_t)h << (16 * j);
        else
            dhi |= (uint64_t)h << (16 * (j - 4));
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)dhi, (long long)dlo));
}

/*
 * The 32-value block types (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4).
 * Per block, 32 weight bytes (b32_weights) against each token's 32
 * activation bytes (vpdpbusd); the block's sum is spread over 8 lanes, so
 * each lane starts at comp / 8 (exact: comp is a multiple of 8). Scales are
 * prepared 8 blocks at a time (the weight scales times the activation
 * scales, one vector op per token) and broadcast from the stack, so a block
 * costs one load and one to three unpacking ops (weights) and per token a
 * vpdpbusd, a convert and an fma. Q4_1 / Q5_1 add m_w * s_a per block in a
 * separate vector (lanes = blocks). Two accumulators per token break the fma
 * latency chain. Checked against hr_mm_dot_ref in test-kernels.c.
 */
INLINE HR_GEMV_TARGET void gemv_q80(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                          const void *act, size_t i0, const int M, float *y, size_t ldy,
                          const enum hr_ggml_type t)
{
    const size_t nb = l->nb, blk_bytes = hr_mm_b32_bytes(t), row_bytes = nb * blk_bytes;
    const bool has_min = hr_mm_b32_has_min(t);
    const int8_t *qs[GEMV_MAX_M];
    const float *da[GEMV_MAX_M], *sa[GEMV_MAX_M];
    const int32_t *comp[GEMV_MAX_M];
    UNROLL
    for (int i = 0; i < M; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + i);
        da[i] = hr_mm_d(l, act, i0 + i);
        comp[i] = hr_mm_comp(l, act, i0 + i);
        sa[i] = has_min ? hr_mm_s(l, act, i0 + i) : NULL;
    }
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *wr = (const uint8_t *)w + r * row_bytes;
        __m256 acc[GEMV_MAX_M][4], accm[GEMV_MAX_M];
        UNROLL
        for (int i = 0; i < M; i++) {
            acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm256_setzero_ps();
            accm[i] = _mm256_setzero_ps();
        }
        /* Groups of G = 8 blocks, then 4, 2, 1 for the tail: every group is
         * unrolled with compile-time indices (28 blocks, k = 896, are 8+8+8+4). */
#define Q80_BLOCK(J, A)                                                                            \
    do {                                                                                           \
        const uint8_t *blk = wr + (b0 + (J)) * blk_bytes;                                          \
        const __m256i wq = b32_weights(t, blk);                                                    \
        UNROLL                                                                                     \
        for (int i = 0; i < M; i++) {                                                              \
            const __m256i s_ = HR_Q80_DOT(!b32_signed(t), blk, wq, &cc[i][J],                      \
                _mm256_load_si256((const __m256i *)(qs[i] + 32 * (b0 + (J)))));                    \
            acc[i][A] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_), bcast_ps_mem(&sc[i][J]),          \
                                        acc[i][A]);                                                \
        }                                                                                          \
    } while (0)
#define Q80_GROUP(G)                                                                               \
    do {                                                                                           \
        const __m256 dw = b32_scales8(t, wr + b0 * blk_bytes, blk_bytes, (G), 0);                  \
        const __m256i mk = _mm256_cmpgt_epi32(_mm256_set1_epi32(G),                                \
                                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));          \
        float sc[GEMV_MAX_M][8] __attribute__((aligned(32)));                                      \
        int32_t cc[GEMV_MAX_M][8] __attribute__((aligned(32)));                                    \
        UNROLL                                                                                     \
        for (int i = 0; i < M; i++) {                                                              \
            const __m256 da8 = (G) == 8 ? _mm256_loadu_ps(da[i] + b0)                              \
                                        : _mm256_maskload_ps(da[i] + b0, mk);                      \
            const __m256i c8 = (G) == 8 ? _mm256_loadu_si256((const __m256i *)(comp[i] + b0))      \
                                        : _mm256_maskload_epi32(comp[i] + b0, mk);                 \
            _mm256_store_ps(sc[i], _mm256_mul_ps(dw, da8));                                        \
            _mm256_store_si256((__m256i *)cc[i], _mm256_srai_epi32(c8, 3));                        \
        }                                                                                          \
        if (has_min) {                                                                             \
            const __m256 mw = b32_scales8(t, wr + b0 * blk_bytes, blk_bytes, (G), 2);              \
            UNROLL                                                                                 \
            for (int i = 0; i < M; i++)                                                            \
                accm[i] = _mm256_fmadd_ps(mw, _mm256_maskload_ps(sa[i] + b0, mk), accm[i]);        \
        }                                                                                          \
        if (PF_Q80) /* one prefetch per cache line */                                              \
            for (size_t off = 0; off < (G) * blk_bytes; off += 64)                                 \
                _mm_prefetch((const char *)wr + b0 * blk_bytes + PF_Q80 + off, _MM_HINT_T0);       \
        UNROLL                                                                                     \
        for (int j = 0; j < (G); j++)                                                              \
            Q80_BLOCK(j, j & 3);                                                                   \
        b0 += (G);                                                                                 \
    } while (0)
        size_t b0 = 0;
        while (nb - b0 >= 8)
            Q80_GROUP(8);
        if (nb - b0 >= 4)
            Q80_GROUP(4);
        if (nb - b0 >= 2)
            Q80_GROUP(2);
        if (nb - b0 >= 1)
            Q80_GROUP(1);
#undef Q80_GROUP
#undef Q80_BLOCK
        UNROLL
        for (int i = 0; i < M; i++) {
            float v = hsum256(_mm256_add_ps(_mm256_add_ps(acc[i][0], acc[i][1]),
                                            _mm256_add_ps(acc[i][2], acc[i][3])));
            if (has_min)
                v += hsum256(accm[i]);
            y[(i0 + i) * ldy + r] = v;
        }
    }
}

/* The 8 six-bit scales and mins of a Q4_K/Q5_K block as bytes: out[0..7]
 * scales, out[8..15] mins (ggml's utmp shuffle). */
static inline void k4_unpack_scales(const uint8_t *scales, uint32_t out[4])
{
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t u[3];
    memcpy(u, scales, 12);
    out[3] = ((u[2] >> 4) & kmask2) | (((u[1] >> 6) & kmask3) << 4);
    out[1] = (u[2] & kmask2) | (((u[0] >> 6) & kmask3) << 4);
    out[2] = u[1] & kmask1;
    out[0] = u[0] & kmask1;
}

/*
 * Q4_K / Q5_K, the integer parts of one block of one row for M tokens: is[i]
 * holds 8 int32 lanes whose sum is the block's exact sum_j sc_j * (q . a)_j,
 * ms[i] the exact sum_j m_j * (sum of 32 activation quants)_j. Per 64 values
 * one 32-byte load of nibbles gives two sub-blocks; vpmaddubsw makes pairwise
 * products (at most 2 * 31 * 127, no saturation) and vpmaddwd / vpdpwssd
 * multiply them by the sub-block scale, one chain per 64 values so the
 * latencies overlap. Per block and token: 8 maddubs + 8 madd/dpwssd; per
 * block: 12 unpack + 8 scale shuffles.
 */
INLINE HR_GEMV_TARGET void q45_block_ints(const uint8_t *blk, const bool q5,
                                          const int8_t *const *qs, const int16_t *const *s32,
                                          size_t b, const int M, __m256i *is, int32_t *ms)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    uint32_t u[4];
    k4_unpack_scales(blk + 4, u);
    const __m128i mins = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[3], (int)u[2]));
    /* the 8 scales as int16 in both 128-bit lanes; shuffles pick one per sub-block */
    const __m256i scd = _mm256_broadcastsi128_si256(
        _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)u[1], (int)u[0])));
    const uint8_t *q4 = blk + (q5 ? 48 : 16);
    __m256i hbits = q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
    __m256i isum[GEMV_MAX_M][4];
    UNROLL
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(q4 + 32 * c));
        __m256i ql = _mm256_and_si256(q, m4);
        __m256i qh = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (q5) {
            ql = _mm256_or_si256(ql, _mm256_slli_epi16(_mm256_and_si256(hbits, one), 4));
            qh = _mm256_or_si256(
                qh, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hbits, 1), one), 4));
            hbits = _mm256_srli_epi16(hbits, 2);
        }
        const __m256i sc_l =
            _mm256_shuffle_epi8(scd, _mm256_set1_epi16((short)(((4 * c + 1) << 8) | (4 * c))));
        const __m256i sc_h =
            _mm256_shuffle_epi8(scd, _mm256_set1_epi16((short)(((4 * c + 3) << 8) | (4 * c + 2))));
        UNROLL
        for (int i = 0; i < M; i++) {
            const int8_t *a = qs[i] + 256 * b + 64 * c;
            __m256i pl = _mm256_maddubs_epi16(ql, _mm256_load_si256((const __m256i *)a));
            __m256i ph = _mm256_maddubs_epi16(qh, _mm256_load_si256((const __m256i *)(a + 32)));
            isum[i][c] = HR_DPWSSD(_mm256_madd_epi16(pl, sc_l), ph, sc_h);
        }
    }
    UNROLL
    for (int i = 0; i < M; i++) {
        is[i] = _mm256_add_epi32(_mm256_add_epi32(isum[i][0], isum[i][1]),
                                 _mm256_add_epi32(isum[i][2], isum[i][3]));
        __m128i pm = _mm_madd_epi16(mins, _mm_loadu_si128((const __m128i *)(s32[i] + 8 * b)));
        pm = _mm_add_epi32(pm, _mm_unpackhi_epi64(pm, pm));
        pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, 1));
        ms[i] = _mm_cvtsi128_si32(pm);
    }
}

/* Q4_K / Q5_K rows one at a time (the AVX2 build): per block acc += isum *
 * (d * da) in 8 lanes, mins in a scalar; one horizontal sum per row. */
INLINE HR_GEMV_TARGET void gemv_q45_K(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                            const void *act, size_t i0, const int M, float *y, size_t ldy,
                            const bool q5)
{
    const size_t nb = l->nb, blk_bytes = q5 ? 176 : 144, row_bytes = nb * blk_bytes;
    const int8_t *qs[GEMV_MAX_M];
    const float *da[GEMV_MAX_M];
    const int16_t *s32[GEMV_MAX_M];
    UNROLL
    for (int i = 0; i < M; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + i);
        da[i] = hr_mm_d(l, act, i0 + i);
        s32[i] = hr_mm_sum32(l, act, i0 + i);
    }
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *wr = (const uint8_t *)w + r * row_bytes;
        __m256 acc[GEMV_MAX_M];
        float accm[GEMV_MAX_M];
        UNROLL
        for (int i = 0; i < M; i++)
            acc[i] = _mm256_setzero_ps(), accm[i] = 0;
        for (size_t b = 0; b < nb; b++) {
            const uint8_t *blk = wr + b * blk_bytes;
            HR_PREFETCH(blk, PF_K, 0);
            HR_PREFETCH(blk, PF_K, 64);
            HR_PREFETCH(blk, PF_K, 128);
            const float d = _cvtsh_ss(*(const uint16_t *)blk);
            const float dmin = _cvtsh_ss(*(const uint16_t *)(blk + 2));
            __m256i is[GEMV_MAX_M];
            int32_t ms[GEMV_MAX_M];
            q45_block_ints(blk, q5, qs, s32, b, M, is, ms);
            UNROLL
            for (int i = 0; i < M; i++) {
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[i]), _mm256_set1_ps(da[i][b] * d), acc[i]);
                accm[i] += da[i][b] * dmin * (float)ms[i];
            }
        }
        UNROLL
        for (int i = 0; i < M; i++)
            y[(i0 + i) * ldy + r] = hsum256(acc[i]) - accm[i];
    }
}

/*
 * Q6_K, the integer part of one block of one row for M tokens: is[i] holds 8
 * int32 lanes whose sum is the block's exact sum_j sc_j * ((q - 32) . a)_j.
 * Four 32-value groups per 128 are rebuilt from ql/qh (q in 0..63),
 * multiplied with vpmaddubsw, scaled per 16 with vpmaddwd / vpdpwssd; the -32
 * offset is removed once per block through the bsums.
 */
INLINE HR_GEMV_TARGET void q6_block_ints(const struct hr_block_q6_K *x, const int8_t *const *qs,
                                         const int16_t *const *bsum, size_t b, const int M,
                                         __m256i *is)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    /* lanes 0-7 take scale 2p, lanes 8-15 scale 2p+1 (from a 128-bit-duplicated int16 vector) */
    const __m256i shuf0 = _mm256_set_epi8(3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 1, 0, 1, 0,
                                          1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0);
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x->scales));
    __m256i isum[GEMV_MAX_M][4];
    UNROLL
    for (int i = 0; i < M; i++) {
        /* -32 * sum_j sc_j * bsum_j, the q - 32 offset */
        __m256i c = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)(bsum[i] + 16 * b)));
        isum[i][0] = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), c), 5);
        isum[i][1] = isum[i][2] = isum[i][3] = _mm256_setzero_si256();
    }
    UNROLL
    for (int h = 0; h < 2; h++) {
        const __m256i scd = _mm256_broadcastsi128_si256(
            _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(x->scales + 8 * h))));
        const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h));
        const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(x->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(x->qh + 32 * h));
        __m256i q[4];
        q[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_slli_epi16(_mm256_and_si256(qh, m2), 4));
        q[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), m2), 4));
        q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), m2), 4));
        q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4),
                               _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), m2), 4));
        UNROLL
        for (int g = 0; g < 4; g++) {
            const __m256i scv =
                _mm256_shuffle_epi8(scd, _mm256_add_epi8(shuf0, _mm256_set1_epi8((char)(4 * g))));
            UNROLL
            for (int i = 0; i < M; i++) {
                const int8_t *a = qs[i] + 256 * b + 128 * h + 32 * g;
                __m256i p = _mm256_maddubs_epi16(q[g], _mm256_load_si256((const __m256i *)a));
                isum[i][g] = HR_DPWSSD(isum[i][g], p, scv);
            }
        }
    }
    UNROLL
    for (int i = 0; i < M; i++)
        is[i] = _mm256_add_epi32(_mm256_add_epi32(isum[i][0], isum[i][1]),
                                 _mm256_add_epi32(isum[i][2], isum[i][3]));
}

/* Q6_K rows one at a time (the AVX2 build). */
INLINE HR_GEMV_TARGET void gemv_q6_K(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                           const void *act, size_t i0, const int M, float *y, size_t ldy)
{
    const size_t nb = l->nb, row_bytes = nb * 210;
    const int8_t *qs[GEMV_MAX_M];
    const float *da[GEMV_MAX_M];
    const int16_t *bsum[GEMV_MAX_M];
    UNROLL
    for (int i = 0; i < M; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + i);
        da[i] = hr_mm_d(l, act, i0 + i);
        bsum[i] = hr_mm_bsum(l, act, i0 + i);
    }
    for (size_t r = r0; r < r1; r++) {
        const struct hr_block_q6_K *wr = (const struct hr_block_q6_K *)((const uint8_t *)w + r * row_bytes);
        __m256 acc[GEMV_MAX_M];
        UNROLL
        for (int i = 0; i < M; i++)
            acc[i] = _mm256_setzero_ps();
        for (size_t b = 0; b < nb; b++) {
            const struct hr_block_q6_K *x = wr + b;
            HR_PREFETCH(x, PF_K, 0);
            HR_PREFETCH(x, PF_K, 64);
            HR_PREFETCH(x, PF_K, 128);
            HR_PREFETCH(x, PF_K, 192);
            const float d = _cvtsh_ss(x->d);
            __m256i is[GEMV_MAX_M];
            q6_block_ints(x, qs, bsum, b, M, is);
            UNROLL
            for (int i = 0; i < M; i++)
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[i]), _mm256_set1_ps(da[i][b] * d), acc[i]);
        }
        UNROLL
        for (int i = 0; i < M; i++)
            y[(i0 + i) * ldy + r] = hsum256(acc[i]);
    }
}

#if HR_GEMV_VNNI
/*
 * Decode kernels whose results are bit-identical to the packed GEMM's
 * (matmul-avx512.c), so a token's output does not depend on how many other
 * tokens share the call (ragged batches, prefill chunk sizes). The GEMM
 * keeps one lane per weight row and, per block, adds cvt(exact integer sum)
 * * (d_w * d_a) with one fma, blocks in order. These kernels take 8 rows at a
 * time in two passes per chunk of blocks:
 *   1. row by row, front to back (one sequential stream, as a plain decode
 *      kernel reads it), the exact integer block sums, folded 8 blocks at a
 *      time into one vector by hsum8x8 and parked in a small buffer;
 *   2. the buffer transposed 8 x 8 (lanes = rows), then the GEMM's fmas in
 *      the GEMM's order.
 * The folding and transposes cost ~3 ops per row and block on top of the
 * integer work; tested bit for bit against the GEMM in test-kernels.c.
 */

/* Lane u of the result = the sum of the 8 lanes of p[u] (exact integers). */
INLINE HR_GEMV_TARGET __m256i hsum8x8(const __m256i p[8])
{
    __m256i a[4], b0, b1;
    UNROLL
    for (int j = 0; j < 4; j++)
        a[j] = _mm256_add_epi32(_mm256_unpacklo_epi32(p[2 * j], p[2 * j + 1]),
                                _mm256_unpackhi_epi32(p[2 * j], p[2 * j + 1]));
    b0 = _mm256_add_epi32(_mm256_unpacklo_epi64(a[0], a[1]), _mm256_unpackhi_epi64(a[0], a[1]));
    b1 = _mm256_add_epi32(_mm256_unpacklo_epi64(a[2], a[3]), _mm256_unpackhi_epi64(a[2], a[3]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(b0, b1, 0x20),
                            _mm256_permute2x128_si256(b0, b1, 0x31));
}

/* 8 x 8 int32 transpose: r[j] lane u -> r[u] lane j. */
INLINE HR_GEMV_TARGET void transpose8x8(__m256i r[8])
{
    __m256i t[8], u[8];
    UNROLL
    for (int j = 0; j < 4; j++) {
        t[2 * j] = _mm256_unpacklo_epi32(r[2 * j], r[2 * j + 1]);
        t[2 * j + 1] = _mm256_unpackhi_epi32(r[2 * j], r[2 * j + 1]);
    }
    UNROLL
    for (int h = 0; h < 2; h++) {
        u[4 * h + 0] = _mm256_unpacklo_epi64(t[4 * h + 0], t[4 * h + 2]);
        u[4 * h + 1] = _mm256_unpackhi_epi64(t[4 * h + 0], t[4 * h + 2]);
        u[4 * h + 2] = _mm256_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
        u[4 * h + 3] = _mm256_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
    }
    /* u[e] (e < 4): lanes 0-3 element e of rows 0-3, lanes 4-7 element e + 4;
     * u[e + 4] the same for rows 4-7 */
    UNROLL
    for (int e = 0; e < 4; e++) {
        r[e] = _mm256_permute2x128_si256(u[e], u[e + 4], 0x20);
        r[e + 4] = _mm256_permute2x128_si256(u[e], u[e + 4], 0x31);
    }
}

/* The f16 at byte `off` of block b of 8 rows (row_bytes apart), as f32; the
 * dword gather reads 2 bytes after it, so off + 4 must stay in the block. */
INLINE HR_GEMV_TARGET __m256 f16x8_rows(const uint8_t *first, size_t row_bytes, __mmask8 rows,
                                        int shift)
{
    const __m256i roff = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                            _mm256_set1_epi32((int)row_bytes));
    __m256i g = _mm256_mmask_i32gather_epi32(_mm256_setzero_si256(), rows, roff, first, 1);
    if (shift)
        g = _mm256_srli_epi32(g, 16);
    return _mm256_cvtph_ps(_mm256_cvtepi32_epi16(g));
}

/* Blocks per chunk: pass 1 must read each row front to back in long runs (8
 * rows of a group are adjacent, so whole rows make one sequential stream;
 * short runs per row measured 2-3x slower from DRAM). 512 Q8_0 blocks = k up
 * to 16384 in one chunk, a 16 KiB stack buffer. */
#define Q80_CHUNK 512
#ifndef ROWS8_PF
#define ROWS8_PF 2048 /* bytes ahead of pass 1 to prefetch */
#endif
#define K_CHUNK 32 /* K-quant blocks per chunk: k up to 8192; 2 x 8 KiB of buffers at M = 4 */

/* Q4_1 / Q5_1: the f32 scales d and offsets m of n <= 8 consecutive blocks
 * (bb bytes apart) from one 32-bit load per block (d and m are adjacent);
 * lanes past n are 0. Half the work of two b32_scales8 calls. */
INLINE HR_GEMV_TARGET void b32_dm8(const uint8_t *first, size_t bb, size_t n, __m256 *d, __m256 *m)
{
    uint32_t u[8];
    UNROLL
    for (int j = 0; j < 8; j++) {
        u[j] = 0;
        if ((size_t)j < n)
            memcpy(&u[j], first + (size_t)j * bb, 4);
    }
    const __m256i v = _mm256_setr_epi32((int)u[0], (int)u[1], (int)u[2], (int)u[3], (int)u[4],
                                        (int)u[5], (int)u[6], (int)u[7]);
    *d = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(v));
    *m = _mm256_cvtph_ps(_mm256_cvtepi32_epi16(_mm256_srli_epi32(v, 16)));
}

/* The 32-value block types, one token, rows [r0, r1) in groups of 8. Pass 1
 * also assembles each row's block scales (8 blocks at a time) and forms
 * d_w * d_a there (and keeps Q4_1 / Q5_1's offsets m_w), so pass 2 only
 * transposes and issues the fmas: per block d * isum, then m_w * s_a, the
 * order of tile_q8_0. */
INLINE HR_GEMV_TARGET void gemv1_q80_rows8(const struct hr_mm_layout *l, const void *w, size_t r0,
                                           size_t r1, const void *act, size_t i, float *y,
                                           size_t ldy, const enum hr_ggml_type t)
{
    const size_t nb = l->nb, bb = hr_mm_b32_bytes(t), rb = nb * bb;
    const bool has_min = hr_mm_b32_has_min(t);
    const int8_t *qs = hr_mm_qs(l, act, i);
    const float *da = hr_mm_d(l, act, i);
    const float *sa = has_min ? hr_mm_s(l, act, i) : NULL;
    const int32_t *comp = hr_mm_comp(l, act, i);
    int32_t S[8][Q80_CHUNK] __attribute__((aligned(32)));
    float SC[8][Q80_CHUNK] __attribute__((aligned(32)));
    float MW[8][Q80_CHUNK] __attribute__((aligned(32))); /* Q4_1 / Q5_1 offsets m_w */
    int32_t c8[Q80_CHUNK] __attribute__((aligned(32)));
    for (size_t r = r0; r < r1; r += 8) {
        const size_t nr = r1 - r < 8 ? r1 - r : 8;
        const __mmask8 rows = (__mmask8)((1u << nr) - 1);
        const uint8_t *wr = (const uint8_t *)w + r * rb;
        __m256 c = _mm256_setzero_ps();
        for (size_t b0 = 0; b0 < nb; b0 += Q80_CHUNK) {
            const size_t nbc = nb - b0 < Q80_CHUNK ? nb - b0 : Q80_CHUNK;
            /* each of the 8 lanes of a block starts at comp / 8 (comp is a multiple of 8) */
            for (size_t u = 0; u < nbc; u++)
                c8[u] = comp[b0 + u] >> 3;
            /* pass 1: exact block sums and scale products, row by row */
            for (size_t j = 0; j < 8; j++) {
                for (size_t t0 = 0; t0 < nbc; t0 += 8) {
                    const size_t nu = nbc - t0 < 8 ? nbc - t0 : 8;
                    /* rows, then groups, are adjacent: pass 1 is one stream; keep it
                     * in flight across pass 2, which loads no weights */
                    for (size_t o = 0; o < 8 * bb; o += 64)
                        _mm_prefetch((const char *)wr + j * rb + (b0 + t0) * bb + ROWS8_PF + o,
                                     _MM_HINT_T0);
                    __m256i p[8];
#define Q80_SUM(U)                                                                                 \
    do {                                                                                           \
        const size_t b_ = b0 + t0 + (size_t)(U);                                                   \
        const uint8_t *blk = wr + j * rb + b_ * bb;                                                \
        p[U] = _mm256_dpbusd_epi32(_mm256_set1_epi32(c8[t0 + (size_t)(U)]), b32_weights(t, blk),   \
                                   _mm256_load_si256((const __m256i *)(qs + 32 * b_)));            \
    } while (0)
                    if (nu == 8 && j < nr) { /* the common case, branch-free */
                        UNROLL
                        for (int u = 0; u < 8; u++)
                            Q80_SUM(u);
                    } else {
                        UNROLL
                        for (int u = 0; u < 8; u++) {
                            p[u] = _mm256_setzero_si256();
                            if ((size_t)u < nu && j < nr)
                                Q80_SUM(u);
                        }
                    }
#undef Q80_SUM
                    _mm256_store_si256((__m256i *)&S[j][t0], hsum8x8(p));
                    const uint8_t *d0 = wr + j * rb + (b0 + t0) * bb;
                    const size_t nv = j < nr ? nu : 0;
                    __m256 dw, mw = _mm256_setzero_ps();
                    if (has_min)
                        b32_dm8(d0, bb, nv, &dw, &mw);
                    else
                        dw = b32_scales8(t, d0, bb, nv, 0);
                    _mm256_store_ps(&SC[j][t0],
                                    _mm256_mul_ps(dw, _mm256_maskz_loadu_ps((__mmask8)((1u << nu) - 1), da + b0 + t0)));
                    if (has_min)
                        _mm256_store_ps(&MW[j][t0], mw);
                }
            }
            /* pass 2: lanes = rows, the GEMM's fmas in block order */
            for (size_t t0 = 0; t0 < nbc; t0 += 8) {
                __m256i T[8], Q[8], N[8];
                UNROLL
                for (int j = 0; j < 8; j++) {
                    T[j] = _mm256_load_si256((const __m256i *)&S[j][t0]);
                    Q[j] = _mm256_load_si256((const __m256i *)&SC[j][t0]);
                    if (has_min)
                        N[j] = _mm256_load_si256((const __m256i *)&MW[j][t0]);
                }
                transpose8x8(T);
                transpose8x8(Q);
                if (has_min)
                    transpose8x8(N);
                UNROLL
                for (int u = 0; u < 8; u++) {
                    if (t0 + (size_t)u < nbc) {
                        c = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T[u]), _mm256_castsi256_ps(Q[u]), c);
                        if (has_min)
                            c = _mm256_fmadd_ps(_mm256_castsi256_ps(N[u]),
                                                _mm256_set1_ps(sa[b0 + t0 + (size_t)u]), c);
                    }
                }
            }
        }
        _mm256_mask_storeu_ps(y + i * ldy + r, rows, c);
    }
}

/* Q4_K / Q5_K / Q6_K, M tokens, rows [r0, r1) in groups of 8. */
INLINE HR_GEMV_TARGET void gemv_k_rows8(const struct hr_mm_layout *l, const void *w, size_t r0,
                                        size_t r1, const void *act, size_t i0, const int M,
                                        float *y, size_t ldy)
{
    const enum hr_ggml_type t = l->wtype;
    const bool q6 = t == HR_GGML_Q6_K, q5 = t == HR_GGML_Q5_K;
    const size_t nb = l->nb, bb = q6 ? 210 : q5 ? 176 : 144, rb = nb * bb;
    const int8_t *qs[GEMV_MAX_M];
    const float *da[GEMV_MAX_M];
    const int16_t *aux[GEMV_MAX_M];
    UNROLL
    for (int i = 0; i < M; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + i);
        da[i] = hr_mm_d(l, act, i0 + i);
        aux[i] = q6 ? hr_mm_bsum(l, act, i0 + i) : hr_mm_sum32(l, act, i0 + i);
    }
    for (size_t r = r0; r < r1; r += 8) {
        const size_t nr = r1 - r < 8 ? r1 - r : 8;
        const __mmask8 rows = (__mmask8)((1u << nr) - 1);
        const uint8_t *wr = (const uint8_t *)w + r * rb;
        __m256 c[GEMV_MAX_M];
        UNROLL
        for (int i = 0; i < M; i++)
            c[i] = _mm256_setzero_ps();
        for (size_t b0 = 0; b0 < nb; b0 += K_CHUNK) {
            const size_t nbc = nb - b0 < K_CHUNK ? nb - b0 : K_CHUNK;
            int32_t S[GEMV_MAX_M][8][K_CHUNK] __attribute__((aligned(32)));
            int32_t MS[GEMV_MAX_M][K_CHUNK][8] __attribute__((aligned(32)));
            /* pass 1: exact integer parts, row by row, front to back */
            for (size_t j = 0; j < 8; j++) {
                for (size_t t0 = 0; t0 < nbc; t0 += 8) {
                    __m256i P[GEMV_MAX_M][8];
                    for (size_t u = 0; u < 8; u++) {
                        __m256i is[GEMV_MAX_M] = {0};
                        int32_t m1[GEMV_MAX_M] = {0};
                        if (j < nr && t0 + u < nbc) {
                            const uint8_t *blk = wr + j * rb + (b0 + t0 + u) * bb;
                            for (size_t o = 0; o < bb; o += 64) /* see gemv1_q80_rows8 */
                                _mm_prefetch((const char *)blk + ROWS8_PF + o, _MM_HINT_T0);
                            if (q6)
                                q6_block_ints((const struct hr_block_q6_K *)blk, qs, aux, b0 + t0 + u, M, is);
                            else
                                q45_block_ints(blk, q5, qs, aux, b0 + t0 + u, M, is, m1);
                        }
                        UNROLL
                        for (int i = 0; i < M; i++) {
                            P[i][u] = is[i];
                            if (t0 + u < nbc)
                                MS[i][t0 + u][j] = m1[i]; /* stored transposed: [block][row] */
                        }
                    }
                    UNROLL
                    for (int i = 0; i < M; i++)
                        _mm256_store_si256((__m256i *)&S[i][j][t0], hsum8x8(P[i]));
                }
            }
            /* pass 2: lanes = rows, the GEMM's fmas in block order */
            for (size_t t0 = 0; t0 < nbc; t0 += 8) {
                UNROLL
                for (int i = 0; i < M; i++) {
                    __m256i T[8];
                    UNROLL
                    for (int j = 0; j < 8; j++)
                        T[j] = _mm256_load_si256((const __m256i *)&S[i][j][t0]);
                    transpose8x8(T);
                    for (size_t u = 0; u < 8 && t0 + u < nbc; u++) {
                        const size_t b = b0 + t0 + u;
                        /* d (and dmin) of 8 rows: Q4_K/Q5_K start with d, dmin;
                         * Q6_K ends with d (gathered from 2 bytes before it) */
                        const __m256 d = f16x8_rows(wr + b * bb + (q6 ? 206 : 0), rb, rows, q6);
                        const __m256 ad = _mm256_set1_ps(da[i][b]);
                        c[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(T[u]), _mm256_mul_ps(d, ad), c[i]);
                        if (!q6) {
                            const __m256 dmin = f16x8_rows(wr + b * bb, rb, rows, 1);
                            c[i] = _mm256_fnmadd_ps(
                                _mm256_cvtepi32_ps(_mm256_load_si256((const __m256i *)MS[i][t0 + u])),
                                _mm256_mul_ps(dmin, ad), c[i]);
                        }
                    }
                }
            }
        }
        UNROLL
        for (int i = 0; i < M; i++)
            _mm256_mask_storeu_ps(y + (i0 + (size_t)i) * ldy + r, rows, c[i]);
    }
}
#endif

/* Calls CALL(M) over tokens [T0, m) in passes of 4, then the remainder. */
#define GEMV_DISPATCH_FROM(T0, CALL)                                                               \
    for (size_t i0 = (T0); i0 < m;) {                                                              \
        const size_t left = m - i0;                                                                \
        if (left >= 4) {                                                                           \
            CALL(4);                                                                               \
            i0 += 4;                                                                               \
        } else if (left == 3) {                                                                    \
            CALL(3);                                                                               \
            i0 += 3;                                                                               \
        } else if (left == 2) {                                                                    \
            CALL(2);                                                                               \
            i0 += 2;                                                                               \
        } else {                                                                                   \
            CALL(1);                                                                               \
            i0 += 1;                                                                               \
        }                                                                                          \
    }
#define GEMV_DISPATCH(CALL) GEMV_DISPATCH_FROM(0, CALL)

#if !HR_GEMV_VNNI
/* The quantized types over rows [r0, r1) and tokens [t0, t1), one row at a
 * time (the AVX2 build, which has no second path to agree with). */
HR_GEMV_TARGET static void gemv_quant(const struct hr_mm_layout *l, const void *w, size_t r0,
                                      size_t r1, const void *act, size_t t0, size_t t1, float *y,
                                      size_t ldy)
{
    const size_t m = t1;
    switch (l->wtype) {
#define C(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, HR_GGML_Q8_0)
    case HR_GGML_Q8_0: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, HR_GGML_Q4_0)
    case HR_GGML_Q4_0: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, HR_GGML_Q4_1)
    case HR_GGML_Q4_1: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, HR_GGML_Q5_0)
    case HR_GGML_Q5_0: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, HR_GGML_Q5_1)
    case HR_GGML_Q5_1: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, HR_GGML_IQ4_NL)
    case HR_GGML_IQ4_NL: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, HR_GGML_MXFP4)
    case HR_GGML_MXFP4: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q45_K(l, w, r0, r1, act, i0, M, y, ldy, false)
    case HR_GGML_Q4_K: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q45_K(l, w, r0, r1, act, i0, M, y, ldy, true)
    case HR_GGML_Q5_K: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q6_K(l, w, r0, r1, act, i0, M, y, ldy)
    case HR_GGML_Q6_K: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
    default: break;
    }
}
#endif
