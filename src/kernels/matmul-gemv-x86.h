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
 * Shape: one weight row at a time, the k loop innermost, M <= GEMV_MAX_M
 * tokens per pass with all accumulators in registers; each thread streams its
 * rows once per pass, so decode reads every weight byte once. The integer
 * parts are exact (tested against hr_mm_dot_ref in test-kernels.c).
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

/*
 * Q8_0 and Q4_0 rows. Per block, 32 unsigned weight bytes against each
 * token's 32 activation bytes (vpdpbusd); the block's sum is spread over 8
 * lanes, so each lane starts at comp / 8 (exact: comp is a multiple of 8).
 * Scales are prepared 8 blocks at a time (f16 -> f32 of the weight scales
 * times the activation scales, one vector op per token) and broadcast from
 * the stack, so a block costs one load + one xor (weights) and per token a
 * vpdpbusd, a convert and an fma. Two accumulators per token break the fma
 * latency chain. Checked against hr_mm_dot_ref in test-kernels.c.
 */
INLINE HR_GEMV_TARGET void gemv_q80(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                          const void *act, size_t i0, const int M, float *y, size_t ldy,
                          const bool q4)
{
    const size_t nb = l->nb, blk_bytes = q4 ? 18 : 34, row_bytes = nb * blk_bytes;
    const int8_t *qs[GEMV_MAX_M];
    const float *da[GEMV_MAX_M];
    const int32_t *comp[GEMV_MAX_M];
    UNROLL
    for (int i = 0; i < M; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + i);
        da[i] = hr_mm_d(l, act, i0 + i);
        comp[i] = hr_mm_comp(l, act, i0 + i);
    }
    const __m256i lo4 = _mm256_set1_epi8(0x0F);
    for (size_t r = r0; r < r1; r++) {
        const uint8_t *wr = (const uint8_t *)w + r * row_bytes;
        __m256 acc[GEMV_MAX_M][4];
        UNROLL
        for (int i = 0; i < M; i++)
            acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = _mm256_setzero_ps();
        /* Groups of G = 8 blocks, then 4, 2, 1 for the tail: every group is
         * unrolled with compile-time indices (28 blocks, k = 896, are 8+8+8+4). */
#define Q80_BLOCK(J, A)                                                                            \
    do {                                                                                           \
        const uint8_t *blk = wr + (b0 + (J)) * blk_bytes;                                          \
        __m256i wq;                                                                                \
        if (q4) {                                                                                  \
            const __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2));                         \
            wq = _mm256_and_si256(                                                                 \
                _mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1), lo4); \
        } else {                                                                                   \
            wq = HR_Q8_WEIGHTS(_mm256_loadu_si256((const __m256i *)(blk + 2)));                    \
        }                                                                                          \
        UNROLL                                                                                     \
        for (int i = 0; i < M; i++) {                                                              \
            const __m256i s_ = HR_Q80_DOT(q4, blk + 2, wq, &cc[i][J],                              \
                _mm256_load_si256((const __m256i *)(qs[i] + 32 * (b0 + (J)))));                    \
            acc[i][A] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s_), bcast_ps_mem(&sc[i][J]),          \
                                        acc[i][A]);                                                \
        }                                                                                          \
    } while (0)
#define Q80_GROUP(G)                                                                               \
    do {                                                                                           \
        /* the G f16 scales assembled in general registers (a vector load of                       \
         * 16-bit stack stores would miss store forwarding) */                                     \
        uint64_t dlo = 0, dhi = 0;                                                                 \
        UNROLL                                                                                     \
        for (int j = 0; j < (G); j++) {                                                            \
            uint16_t h;                                                                            \
            memcpy(&h, wr + (b0 + (size_t)j) * blk_bytes, 2);                                      \
            if (j < 4)                                                                             \
                dlo |= (uint64_t)h << (16 * j);                                                    \
            else                                                                                   \
                dhi |= (uint64_t)h << (16 * (j - 4));                                              \
        }                                                                                          \
        const __m256 dw = _mm256_cvtph_ps(_mm_set_epi64x((long long)dhi, (long long)dlo));         \
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
        for (int i = 0; i < M; i++)
            y[(i0 + i) * ldy + r] = hsum256(
                _mm256_add_ps(_mm256_add_ps(acc[i][0], acc[i][1]), _mm256_add_ps(acc[i][2], acc[i][3])));
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
 * Q4_K / Q5_K rows: per 64 values one 32-byte load of nibbles gives two
 * sub-blocks; vpmaddubsw makes pairwise products (at most 2 * 31 * 127, no
 * saturation) and vpdpwssd multiplies them by the sub-block scale into the
 * block's integer sum, one chain per 64 values so the dpwssd latency
 * overlaps. Mins come from the activation's 32-sums. Per block and token:
 * 8 maddubs + 8 dpwssd; per block: 12 unpack + 8 scale shuffles.
 */
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
    const __m256i m4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
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
                const __m256i sc_l = _mm256_shuffle_epi8(scd, _mm256_set1_epi16((short)(((4 * c + 1) << 8) | (4 * c))));
                const __m256i sc_h = _mm256_shuffle_epi8(scd, _mm256_set1_epi16((short)(((4 * c + 3) << 8) | (4 * c + 2))));
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
                const __m256i is = _mm256_add_epi32(_mm256_add_epi32(isum[i][0], isum[i][1]),
                                                    _mm256_add_epi32(isum[i][2], isum[i][3]));
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(da[i][b] * d), acc[i]);
                __m128i pm = _mm_madd_epi16(mins, _mm_loadu_si128((const __m128i *)(s32[i] + 8 * b)));
                pm = _mm_add_epi32(pm, _mm_unpackhi_epi64(pm, pm));
                pm = _mm_add_epi32(pm, _mm_shuffle_epi32(pm, 1));
                accm[i] += da[i][b] * dmin * (float)_mm_cvtsi128_si32(pm);
            }
        }
        UNROLL
        for (int i = 0; i < M; i++)
            y[(i0 + i) * ldy + r] = hsum256(acc[i]) - accm[i];
    }
}

/* Q6_K rows: four 32-value groups per 128 are rebuilt from ql/qh (q in
 * 0..63), multiplied with vpmaddubsw, scaled per 16 with vpdpwssd; the -32
 * offset is removed once per block through the bsums. */
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
    const __m256i m4 = _mm256_set1_epi8(0x0F), m2 = _mm256_set1_epi8(0x03);
    /* lanes 0-7 take scale 2p, lanes 8-15 scale 2p+1 (from a 128-bit-duplicated int16 vector) */
    const __m256i shuf0 = _mm256_set_epi8(3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 1, 0, 1, 0,
                                          1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0);
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
                    const __m256i scv = _mm256_shuffle_epi8(
                        scd, _mm256_add_epi8(shuf0, _mm256_set1_epi8((char)(4 * g))));
                    UNROLL
                    for (int i = 0; i < M; i++) {
                        const int8_t *a = qs[i] + 256 * b + 128 * h + 32 * g;
                        __m256i p = _mm256_maddubs_epi16(q[g], _mm256_load_si256((const __m256i *)a));
                        isum[i][g] = HR_DPWSSD(isum[i][g], p, scv);
                    }
                }
            }
            UNROLL
            for (int i = 0; i < M; i++) {
                const __m256i is = _mm256_add_epi32(_mm256_add_epi32(isum[i][0], isum[i][1]),
                                                    _mm256_add_epi32(isum[i][2], isum[i][3]));
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is), _mm256_set1_ps(da[i][b] * d), acc[i]);
            }
        }
        UNROLL
        for (int i = 0; i < M; i++)
            y[(i0 + i) * ldy + r] = hsum256(acc[i]);
    }
}

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

/* The quantized types over rows [r0, r1) and tokens [t0, t1). */
HR_GEMV_TARGET static void gemv_quant(const struct hr_mm_layout *l, const void *w, size_t r0,
                                      size_t r1, const void *act, size_t t0, size_t t1, float *y,
                                      size_t ldy)
{
    const size_t m = t1;
    switch (l->wtype) {
#define C(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, false)
    case HR_GGML_Q8_0: GEMV_DISPATCH_FROM(t0, C) break;
#undef C
#define C(M) gemv_q80(l, w, r0, r1, act, i0, M, y, ldy, true)
    case HR_GGML_Q4_0: GEMV_DISPATCH_FROM(t0, C) break;
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
