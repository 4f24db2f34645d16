/*
 * matmul-k2k3-x86.h - the SIMD kernels of Q2_K, Q3_K and IQ4_XS weights
 * (against Q8_K activations), shared by the AVX2 and AVX-512 files: each
 * includes it once, after matmul-gemv-x86.h (whose HR_GEMV_TARGET,
 * HR_GEMV_VNNI, HR_DPWSSD, GEMV_MAX_M, GEMV_DISPATCH, hsum256 and INLINE /
 * UNROLL it uses). Private to src/kernels/; every function is static.
 *
 * Two drivers over the same integer block kernels:
 *  - compute_k2k3 (the AVX2 build at every m; AVX-512 with batch invariance
 *    off): weight rows one at a time, the k loop innermost, up to 4 tokens
 *    per pass with their accumulators in registers; for more tokens the rows
 *    go in blocks of 16 that stay in L1/L2 while every group of 4 tokens
 *    passes. A token's arithmetic does not depend on which other tokens
 *    share the pass, so it is batch-invariant by itself.
 *  - gemv_k2k3_rows8 (AVX-512 decode, below 16 tokens): 8 rows at a time,
 *    the float operations of the packed GEMM (gemm_k2k3 in matmul-avx512.c,
 *    which takes over from 16 tokens) in its order, so decode and prefill
 *    agree bit for bit.
 *
 * Per block and token: the exact integer sum_j s_j * (q . a)_j in 8 int32
 * lanes (vpmaddubsw pairs, then vpmaddwd / vpdpwssd by the sub-block scale),
 * converted and scaled with one fma by d_w * d_a; Q2_K's mins are a scalar
 * integer through Q8_K's bsums. Unsigned-times-signed products need one
 * unsigned operand: Q2_K's quants are 0..3 already; Q3_K's are stored
 * q = value + 4 (0..7), and the offset is removed once per block as
 * 4 * sum_j s_j * bsum_j; IQ4_XS's grid values are signed (-127..113), so
 * they go as |v| against sign(v) * a, as ggml's AVX2 code does (each pair
 * stays within int16: 2 * 127 * 127). Tested against hr_mm_dot_ref in
 * test-kernels.c and against ggml-cpu's vec_dot in test-quant-oracle.c.
 */
#ifndef HR_GEMV_TARGET
#error "include matmul-gemv-x86.h before matmul-k2k3-x86.h"
#endif

#define K2K3_ROW_BLOCK 16 /* weight rows kept in cache while every token group passes */

static inline bool k2k3_type(enum hr_ggml_type t)
{
    return t == HR_GGML_Q2_K || t == HR_GGML_Q3_K || t == HR_GGML_IQ4_XS;
}

/* The 16 six-bit Q3_K scales (0..63, stored with +32) as bytes, in order
 * (ggml's kmask shuffle: 4 dword operations instead of 16 extractions). */
static inline void k3_unpack_scales(const uint8_t *scales, uint32_t out[4])
{
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t a[3];
    memcpy(a, scales, 12);
    out[0] = (a[0] & kmask2) | (((a[2] >> 0) & kmask1) << 4);
    out[1] = (a[1] & kmask2) | (((a[2] >> 2) & kmask1) << 4);
    out[2] = ((a[0] >> 4) & kmask2) | (((a[2] >> 4) & kmask1) << 4);
    out[3] = ((a[1] >> 4) & kmask2) | (((a[2] >> 6) & kmask1) << 4);
}

/*
 * Q2_K and Q3_K, the integer parts of one block for M tokens. Both store the
 * low 2 bits of value 128h + 32c + l in bits 2c of qs[32h + l]; a 32-value
 * group c of half h is sub-blocks 8h + 2c (bytes 0-15) and 8h + 2c + 1
 * (bytes 16-31), so each 128-bit lane has one sub-block scale. sc16 holds
 * the 16 scales as int16 (Q2_K: the low nibbles; Q3_K: sc - 32).
 * is[i]: 8 lanes summing to sum_j sc_j (q . a)_j (Q3_K: of q - 4);
 * ms[i] (Q2_K): sum_j m_j * bsum_j.
 */
INLINE HR_GEMV_TARGET void k23_block_ints(const uint8_t *qs2, const uint8_t *hmask,
                                          __m256i sc16, const __m128i mins8,
                                          const int8_t *const *qs, const int16_t *const *bsum,
                                          size_t b, const int M, const bool q3, __m256i *is,
                                          int32_t *ms)
{
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    /* lanes 0-7 take scale 2c, lanes 8-15 scale 2c + 1 (as q6_block_ints) */
    const __m256i shuf0 = _mm256_set_epi8(3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2,
                                          1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0);
    __m256i isum[GEMV_MAX_M][4];
    UNROLL
    for (int i = 0; i < M; i++) {
        const __m256i bs = _mm256_loadu_si256((const __m256i *)(bsum[i] + 16 * b));
        if (q3) { /* -4 * sum_j s_j * bsum_j: the q - 4 offset */
            const __m256i c = _mm256_madd_epi16(sc16, bs);
            isum[i][0] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(c, 2));
        } else {
            isum[i][0] = _mm256_setzero_si256();
            __m256i pm = _mm256_madd_epi16(_mm256_cvtepu8_epi16(mins8), bs);
            ms[i] = hsum256_epi32(pm);
        }
        isum[i][1] = isum[i][2] = isum[i][3] = _mm256_setzero_si256();
    }
    const __m256i hm = q3 ? _mm256_loadu_si256((const __m256i *)hmask) : _mm256_setzero_si256();
    UNROLL
    for (int h = 0; h < 2; h++) {
        const __m256i scd = h == 0 ? _mm256_permute2x128_si256(sc16, sc16, 0x00)
                                   : _mm256_permute2x128_si256(sc16, sc16, 0x11);
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs2 + 32 * h));
        UNROLL
        for (int c = 0; c < 4; c++) {
            __m256i v = _mm256_and_si256(_mm256_srli_epi16(q, 2 * c), m3);
            if (q3) { /* bit 2 of value e is bit e / 32 of hmask[e % 32] */
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + c), one);
                v = _mm256_or_si256(v, _mm256_slli_epi16(hb, 2));
            }
            const __m256i scv =
                _mm256_shuffle_epi8(scd, _mm256_add_epi8(shuf0, _mm256_set1_epi8((char)(4 * c))));
            UNROLL
            for (int i = 0; i < M; i++) {
                const int8_t *a = qs[i] + 256 * b + 128 * h + 32 * c;
                const __m256i p = _mm256_maddubs_epi16(v, _mm256_load_si256((const __m256i *)a));
                isum[i][c] = HR_DPWSSD(isum[i][c], p, scv);
            }
        }
    }
    UNROLL
    for (int i = 0; i < M; i++)
        is[i] = _mm256_add_epi32(_mm256_add_epi32(isum[i][0], isum[i][1]),
                                 _mm256_add_epi32(isum[i][2], isum[i][3]));
}

/*
 * IQ4_XS, the integer part of one block for M tokens: is[i] 8 lanes summing
 * to sum_j (ls_j - 32) (grid(q) . a)_j. Per 32 bytes of nibbles two
 * sub-blocks (low nibbles: values 0-15 of each, high: 16-31), put back in
 * value order by two lane permutes and mapped to the grid by vpshufb.
 */
INLINE HR_GEMV_TARGET void iq4xs_block_ints(const struct hr_block_iq4_xs *x,
                                            const int8_t *const *qs, size_t b, const int M,
                                            __m256i *is)
{
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i grid =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)hr_iq4nl_values));
    /* the 8 scales ls_j - 32 as int16 in both lanes: byte j of the pdep
     * results is nibble j of scales_l | 2-bit field j of scales_h << 4 */
    uint32_t sl;
    uint16_t sh;
    memcpy(&sl, x->scales_l, 4);
    memcpy(&sh, &x->scales_h, 2);
    const uint64_t ls8 =
        _pdep_u64(sl, 0x0F0F0F0F0F0F0F0Full) | _pdep_u64(sh, 0x3030303030303030ull);
    const __m256i scd = _mm256_broadcastsi128_si256(_mm_sub_epi16(
        _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)ls8)), _mm_set1_epi16(32)));
    __m256i isum[GEMV_MAX_M][4];
    UNROLL
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(x->qs + 32 * c));
        const __m256i lo = _mm256_and_si256(q, m4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        const __m256i v0 = _mm256_shuffle_epi8(grid, _mm256_permute2x128_si256(lo, hi, 0x20));
        const __m256i v1 = _mm256_shuffle_epi8(grid, _mm256_permute2x128_si256(lo, hi, 0x31));
        const __m256i u0 = _mm256_sign_epi8(v0, v0), u1 = _mm256_sign_epi8(v1, v1);
        const __m256i s0 =
            _mm256_shuffle_epi8(scd, _mm256_set1_epi16((short)(((4 * c + 1) << 8) | (4 * c))));
        const __m256i s1 =
            _mm256_shuffle_epi8(scd, _mm256_set1_epi16((short)(((4 * c + 3) << 8) | (4 * c + 2))));
        UNROLL
        for (int i = 0; i < M; i++) {
            const int8_t *a = qs[i] + 256 * b + 64 * c;
            const __m256i p0 = _mm256_maddubs_epi16(
                u0, _mm256_sign_epi8(_mm256_load_si256((const __m256i *)a), v0));
            const __m256i p1 = _mm256_maddubs_epi16(
                u1, _mm256_sign_epi8(_mm256_load_si256((const __m256i *)(a + 32)), v1));
            isum[i][c] = HR_DPWSSD(_mm256_madd_epi16(p0, s0), p1, s1);
        }
    }
    UNROLL
    for (int i = 0; i < M; i++)
        is[i] = _mm256_add_epi32(_mm256_add_epi32(isum[i][0], isum[i][1]),
                                 _mm256_add_epi32(isum[i][2], isum[i][3]));
}

/* Bytes of a block of type T (0 Q2_K, 1 Q3_K, 2 IQ4_XS). */
#define K2K3_BLOCK_BYTES(T) ((T) == 0 ? 84 : (T) == 1 ? 110 : 136)

/* The integer parts of one block of type T (a constant) for M tokens: is[i]
 * 8 lanes summing to the block's sum_j s_j (q . a)_j with every offset
 * removed, ms[i] (Q2_K) sum_j m_j bsum_j; *d16 / *dmin16 the f16 scales. */
INLINE HR_GEMV_TARGET void k2k3_block(const uint8_t *blk, const int8_t *const *qs,
                                      const int16_t *const *bsum, size_t b, const int M,
                                      const int T, __m256i *is, int32_t *ms, uint16_t *d16,
                                      uint16_t *dmin16)
{
    if (T == 0) {
        const struct hr_block_q2_K *x = (const struct hr_block_q2_K *)blk;
        const __m128i sc = _mm_loadu_si128((const __m128i *)x->scales);
        const __m128i lo = _mm_and_si128(sc, _mm_set1_epi8(0x0F));
        const __m128i mins = _mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(0x0F));
        k23_block_ints(x->qs, NULL, _mm256_cvtepu8_epi16(lo), mins, qs, bsum, b, M, false, is,
                       ms);
        memcpy(d16, &x->d, 2);
        memcpy(dmin16, &x->dmin, 2);
    } else if (T == 1) {
        const struct hr_block_q3_K *x = (const struct hr_block_q3_K *)blk;
        uint32_t u[4];
        k3_unpack_scales(x->scales, u);
        const __m256i sc16 = _mm256_sub_epi16(
            _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)u)), _mm256_set1_epi16(32));
        k23_block_ints(x->qs, x->hmask, sc16, _mm_setzero_si128(), qs, bsum, b, M, true, is, ms);
        memcpy(d16, &x->d, 2);
    } else {
        const struct hr_block_iq4_xs *x = (const struct hr_block_iq4_xs *)blk;
        iq4xs_block_ints(x, qs, b, M, is);
        memcpy(d16, &x->d, 2);
    }
}

/* Rows [r0, r1) of type T (a constant) for tokens [i0, i0 + M): per block
 * acc += isum * (d * da) in 8 lanes, Q2_K's mins in a scalar; one
 * horizontal sum per row and token. */
INLINE HR_GEMV_TARGET void gemv_k2k3(const struct hr_mm_layout *l, const void *w, size_t r0,
                                     size_t r1, const void *act, size_t i0, const int M,
                                     float *y, size_t ldy, const int T)
{
    const size_t nb = l->nb, bb = K2K3_BLOCK_BYTES(T), row_bytes = nb * bb;
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
        const uint8_t *wr = (const uint8_t *)w + r * row_bytes;
        __m256 acc[GEMV_MAX_M];
        float accm[GEMV_MAX_M];
        UNROLL
        for (int i = 0; i < M; i++)
            acc[i] = _mm256_setzero_ps(), accm[i] = 0;
        for (size_t b = 0; b < nb; b++) {
            __m256i is[GEMV_MAX_M];
            int32_t ms[GEMV_MAX_M];
            uint16_t d16, dmin16 = 0;
            k2k3_block(wr + b * bb, qs, bsum, b, M, T, is, ms, &d16, &dmin16);
            const float d = _cvtsh_ss(d16);
            UNROLL
            for (int i = 0; i < M; i++) {
                acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[i]), _mm256_set1_ps(da[i][b] * d),
                                         acc[i]);
                if (T == 0)
                    accm[i] += da[i][b] * _cvtsh_ss(dmin16) * (float)ms[i];
            }
        }
        UNROLL
        for (int i = 0; i < M; i++)
            y[(i0 + i) * ldy + r] = hsum256(acc[i]) - accm[i];
    }
}

#if HR_GEMV_VNNI
/*
 * The same integer parts, 8 rows at a time, with the float operations of
 * the packed GEMM (gemm_k2k3 in matmul-avx512.c) in its order, as
 * gemv_k_rows8 does for the other K-quants: pass 1 streams each row's
 * blocks and parks the exact block sums (and Q2_K's mins), pass 2
 * transposes them to lanes = rows and applies, block by block,
 * c += cvt(isum) * (d * da) and c -= cvt(mins) * (dmin * da). So a token's
 * results are the same bits at every m (test-kernels' batch invariance).
 */
INLINE HR_GEMV_TARGET void gemv_k2k3_rows8(const struct hr_mm_layout *l, const void *w, size_t r0,
                                           size_t r1, const void *act, size_t i0, const int M,
                                           float *y, size_t ldy, const int T)
{
    const size_t nb = l->nb, bb = K2K3_BLOCK_BYTES(T), rb = nb * bb;
    /* where each row's f16 d sits for the dword gather: Q2_K d, dmin at 80;
     * Q3_K d at 108, gathered from 106 (the upper half); IQ4_XS d at 0 */
    const size_t d_off = T == 0 ? 80 : T == 1 ? 106 : 0;
    const int d_shift = T == 1;
    const int8_t *qs[GEMV_MAX_M];
    const float *da[GEMV_MAX_M];
    const int16_t *bsum[GEMV_MAX_M];
    UNROLL
    for (int i = 0; i < M; i++) {
        qs[i] = hr_mm_qs(l, act, i0 + i);
        da[i] = hr_mm_d(l, act, i0 + i);
        bsum[i] = hr_mm_bsum(l, act, i0 + i);
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
                        __m256i is[GEMV_MAX_M];
                        int32_t m1[GEMV_MAX_M];
                        UNROLL
                        for (int i = 0; i < M; i++)
                            is[i] = _mm256_setzero_si256(), m1[i] = 0;
                        if (j < nr && t0 + u < nbc) {
                            const uint8_t *blk = wr + j * rb + (b0 + t0 + u) * bb;
                            uint16_t d16, dmin16;
                            for (size_t o = 0; o < bb; o += 64) /* see gemv1_q80_rows8 */
                                _mm_prefetch((const char *)blk + ROWS8_PF + o, _MM_HINT_T0);
                            k2k3_block(blk, qs, bsum, b0 + t0 + u, M, T, is, m1, &d16, &dmin16);
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
                    __m256i Tr[8];
                    UNROLL
                    for (int j = 0; j < 8; j++)
                        Tr[j] = _mm256_load_si256((const __m256i *)&S[i][j][t0]);
                    transpose8x8(Tr);
                    for (size_t u = 0; u < 8 && t0 + u < nbc; u++) {
                        const size_t b = b0 + t0 + u;
                        const __m256 d = f16x8_rows(wr + b * bb + d_off, rb, rows, d_shift);
                        const __m256 ad = _mm256_set1_ps(da[i][b]);
                        c[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Tr[u]), _mm256_mul_ps(d, ad),
                                               c[i]);
                        if (T == 0) {
                            const __m256 dmin = f16x8_rows(wr + b * bb + 80, rb, rows, 1);
                            const __m256i ms8 = _mm256_load_si256((const __m256i *)MS[i][t0 + u]);
                            c[i] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(ms8),
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

/* All m tokens of rows [r0, r1) (m small: decode) through gemv_k2k3_rows8. */
HR_GEMV_TARGET static void gemv_k2k3_invariant(const struct hr_mm_layout *l, const void *w,
                                               size_t r0, size_t r1, const void *act, float *y,
                                               size_t ldy)
{
    const size_t m = l->m;
    switch (l->wtype) {
#define C(M) gemv_k2k3_rows8(l, w, r0, r1, act, i0, M, y, ldy, 0)
    case HR_GGML_Q2_K: GEMV_DISPATCH(C) break;
#undef C
#define C(M) gemv_k2k3_rows8(l, w, r0, r1, act, i0, M, y, ldy, 1)
    case HR_GGML_Q3_K: GEMV_DISPATCH(C) break;
#undef C
#define C(M) gemv_k2k3_rows8(l, w, r0, r1, act, i0, M, y, ldy, 2)
    case HR_GGML_IQ4_XS: GEMV_DISPATCH(C) break;
#undef C
    default: break;
    }
}
#endif

/* All m tokens of rows [r0, r1): one pass for decode, else blocks of rows. */
HR_GEMV_TARGET static void compute_k2k3(const struct hr_mm_layout *l, const void *w, size_t r0,
                                        size_t r1, const void *act, float *y, size_t ldy)
{
    const size_t m = l->m;
    const size_t rb = m <= GEMV_MAX_M ? r1 - r0 : K2K3_ROW_BLOCK;
    for (size_t rb0 = r0; rb0 < r1; rb0 += rb) {
        const size_t rb1 = rb0 + rb < r1 ? rb0 + rb : r1;
        switch (l->wtype) {
#define C(M) gemv_k2k3(l, w, rb0, rb1, act, i0, M, y, ldy, 0)
        case HR_GGML_Q2_K: GEMV_DISPATCH(C) break;
#undef C
#define C(M) gemv_k2k3(l, w, rb0, rb1, act, i0, M, y, ldy, 1)
        case HR_GGML_Q3_K: GEMV_DISPATCH(C) break;
#undef C
#define C(M) gemv_k2k3(l, w, rb0, rb1, act, i0, M, y, ldy, 2)
        case HR_GGML_IQ4_XS: GEMV_DISPATCH(C) break;
#undef C
        default: break;
        }
    }
}
