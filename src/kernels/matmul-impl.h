/*
 * matmul-impl.h - what the matmul implementations share: the layout of the
 * converted activations (the `act` scratch) and the per-ISA kernel table.
 * Private to src/kernels/matmul*.c and the kernel tests.
 *
 * The act scratch is not ggml's block format; it is the same information
 * split into arrays the SIMD kernels can load directly (ggml's 34-byte Q8_0
 * blocks would make every quant load unaligned and every scale a gather).
 * The quants and scales are exactly those of ggml's activation blocks:
 * ggml block = {f16(d[b]), qs[32b .. 32b+31]}, so nothing is lost. The
 * layout depends only on the vec-dot type (and m, k), never on which weight
 * type of that family will use it, so one prepared act serves e.g. a Q4_K and
 * a Q6_K matrix of the same input (the engine shares it between Q, K, V).
 * Per vec-dot family, every array 64-byte aligned, rows of `m` tokens:
 *
 *   Q8_0 (weights Q8_0, Q4_0, Q5_0, IQ4_NL, MXFP4):
 *     qs     int8  [m][k_pad]   quants, k_pad = k rounded up to 64
 *     d      f32   [m][k/32]    block scales (the f16 of the ggml block, widened)
 *     comp   i32   [m][k/32]    -128 * (sum of the block's 32 quants), for
 *                               Q8_0, IQ4_NL and MXFP4
 *     comp4  i32   [m][k/32]    -8 * (the same sum), for Q4_0 (see below)
 *     comp5  i32   [m][k/32]    -16 * (the same sum), for Q5_0
 *   Q8_1 (weights Q4_1, Q5_1):
 *     qs, d                     as Q8_0 (the same bytes: ggml's Q8_1 quants
 *                               are Q8_0's)
 *     comp   i32   [m][k/32]    zeros: Q4_1 / Q5_1 quants need no offset
 *     s      f32   [m][k/32]    the block's s (f16 of d * sum, widened); a
 *                               weight block adds m_w * s
 *   Q8_K (weights Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS):
 *     qs     int8  [m][k_pad]
 *     d      f32   [m][k/256]
 *     bsum   i16   [m][k/16]    ggml's bsums: sums of 16 quants
 *     sum32  i16   [m][k/32]    sums of 32 quants (bsum pairs), for Q4_K/Q5_K mins
 *     comp16 i32   [m][k/16]    -32 * bsum, the offset of Q6_K's q - 32
 *   F32 weights:         f32 [m][k_pad32]
 *   F16 / BF16 weights:  u16 [m][k_pad32] f16 / bf16 bits (half the bytes of
 *                        f32: a decode pass re-reads the row per weight row)
 *   Padding elements of every row are zero.
 *
 * Why `comp`: the integer kernels use vpdpbusd, which multiplies an unsigned
 * byte by a signed byte. Weights are made unsigned by an offset (Q8_0: w + 128
 * by flipping the top bit; IQ4_NL and MXFP4: their table values + 128; Q4_0,
 * Q5_0 and the K-quants are stored unsigned already, q = value + 8 / + 16 /
 * + 32; Q4_1 and Q5_1 have no negative quants), and sum((w + off) * a) - off * sum(a) is the exact
 * signed dot product. The kernels start each block's accumulator at `comp`,
 * so the correction costs nothing.
 */
#ifndef HR_KERNELS_MATMUL_IMPL_H
#define HR_KERNELS_MATMUL_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/fp16.h"
#include "gguf/ggml-types.h"

struct hr_mm_layout {
    enum hr_ggml_type wtype;
    size_t m, k;
    size_t nb;          /* blocks per row: k/32 (Q8_0), k/256 (Q8_K), 0 for float types */
    size_t qs_stride;   /* bytes per row of the first array */
    size_t qs_off, d_off, comp_off, comp4_off, comp5_off, s_off; /* byte offsets; 0 if absent */
    size_t bsum_off, sum32_off, comp16_off;
    /* F16 weights: the f16-rounded inputs again, widened to f32 (rows of
     * a32_stride bytes, zero-padded like the f16 rows), so the batch-
     * invariant AVX-512 float GEMM does not convert the same inputs again
     * for every 4 weight rows (10 conversions per 24 FMAs on the FMA
     * ports); the same values, so the same bits. 0 for other types. */
    size_t a32_off, a32_stride;
    size_t total;       /* bytes */
};

/* Fills `l` for weights of `wtype` and m x k activations. */
void hr_mm_layout_init(struct hr_mm_layout *l, enum hr_ggml_type wtype, size_t m, size_t k);

/* Bytes of a row of the first array that hold values (the rest is zero padding). */
static inline size_t hr_mm_layout_row_used_bytes(const struct hr_mm_layout *l)
{
    switch (l->wtype) {
    case HR_GGML_F32: return l->k * sizeof(float);
    case HR_GGML_F16:
    case HR_GGML_BF16: return l->k * sizeof(uint16_t);
    default: return l->k;
    }
}

/* Typed views into the act scratch. */
static inline const int8_t *hr_mm_qs(const struct hr_mm_layout *l, const void *act, size_t i)
{
    return (const int8_t *)act + l->qs_off + i * l->qs_stride;
}
static inline const float *hr_mm_d(const struct hr_mm_layout *l, const void *act, size_t i)
{
    return (const float *)((const uint8_t *)act + l->d_off) + i * l->nb;
}
/* The block offsets for l->wtype: -128 * sum (Q8_0, IQ4_NL, MXFP4), -8 *
 * sum (Q4_0), -16 * sum (Q5_0), 0 (Q4_1, Q5_1). */
static inline const int32_t *hr_mm_comp(const struct hr_mm_layout *l, const void *act, size_t i)
{
    const size_t off = l->wtype == HR_GGML_Q4_0   ? l->comp4_off
                       : l->wtype == HR_GGML_Q5_0 ? l->comp5_off
                                                  : l->comp_off;
    return (const int32_t *)((const uint8_t *)act + off) + i * l->nb;
}
/* Q8_1's per-block s = d * sum (f32), for Q4_1 / Q5_1. */
static inline const float *hr_mm_s(const struct hr_mm_layout *l, const void *act, size_t i)
{
    return (const float *)((const uint8_t *)act + l->s_off) + i * l->nb;
}

/*
 * The 32-value block types that share the Q8_0 / Q8_1 kernels: bytes per
 * block, and where the quants start (after d, m and qh; MXFP4 has a one-byte
 * exponent instead of an f16 d).
 */
static inline bool hr_mm_is_b32(enum hr_ggml_type t)
{
    switch (t) {
    case HR_GGML_Q8_0:
    case HR_GGML_Q4_0:
    case HR_GGML_Q4_1:
    case HR_GGML_Q5_0:
    case HR_GGML_Q5_1:
    case HR_GGML_IQ4_NL:
    case HR_GGML_MXFP4: return true;
    default: return false;
    }
}
static inline size_t hr_mm_b32_bytes(enum hr_ggml_type t)
{
    switch (t) {
    case HR_GGML_Q8_0: return 34;
    case HR_GGML_Q4_1: return 20;
    case HR_GGML_Q5_0: return 22;
    case HR_GGML_Q5_1: return 24;
    case HR_GGML_MXFP4: return 17;
    default: return 18; /* Q4_0, IQ4_NL */
    }
}
static inline size_t hr_mm_b32_qs_off(enum hr_ggml_type t)
{
    switch (t) {
    case HR_GGML_Q4_1: return 4;
    case HR_GGML_Q5_0: return 6;
    case HR_GGML_Q5_1: return 8;
    case HR_GGML_MXFP4: return 1;
    default: return 2;
    }
}
/* Q4_1 / Q5_1: blocks with an offset m (f16 at byte 2). */
static inline bool hr_mm_b32_has_min(enum hr_ggml_type t)
{
    return t == HR_GGML_Q4_1 || t == HR_GGML_Q5_1;
}
/* Q5_0 / Q5_1: blocks with a fifth bit per value (u32 qh at byte 2 or 4). */
static inline size_t hr_mm_b32_qh_off(enum hr_ggml_type t) { return t == HR_GGML_Q5_0 ? 2 : 4; }

/* IQ4_NL's and MXFP4's tables plus 128 (the unsigned weights vpdpbusd needs). */
extern const uint8_t hr_mm_iq4nl_u8[16], hr_mm_mxfp4_u8[16];
static inline const int16_t *hr_mm_bsum(const struct hr_mm_layout *l, const void *act, size_t i)
{
    return (const int16_t *)((const uint8_t *)act + l->bsum_off) + i * l->nb * 16;
}
static inline const int16_t *hr_mm_sum32(const struct hr_mm_layout *l, const void *act, size_t i)
{
    return (const int16_t *)((const uint8_t *)act + l->sum32_off) + i * l->nb * 8;
}
static inline const int32_t *hr_mm_comp16(const struct hr_mm_layout *l, const void *act, size_t i)
{
    return (const int32_t *)((const uint8_t *)act + l->comp16_off) + i * l->nb * 16;
}
static inline const float *hr_mm_f32(const struct hr_mm_layout *l, const void *act, size_t i)
{
    return (const float *)((const uint8_t *)act + l->qs_off + i * l->qs_stride);
}
static inline const uint16_t *hr_mm_u16(const struct hr_mm_layout *l, const void *act, size_t i)
{
    return (const uint16_t *)((const uint8_t *)act + l->qs_off + i * l->qs_stride);
}
static inline const float *hr_mm_a32(const struct hr_mm_layout *l, const void *act, size_t i)
{
    return (const float *)((const uint8_t *)act + l->a32_off + i * l->a32_stride);
}

/* Row i's a32 copy from its f16 row (padding included: zeros). */
static inline void hr_mm_widen_f16_row(const struct hr_mm_layout *l, void *act, size_t i)
{
    const uint16_t *h = hr_mm_u16(l, act, i);
    float *o = (float *)((uint8_t *)act + l->a32_off + i * l->a32_stride);
    for (size_t j = 0; j < l->a32_stride / sizeof(float); j++)
        o[j] = hr_f16_to_f32(h[j]);
}


/*
 * Packed Q8_0 weights (hr_matmul_pack), the AVX-512 GEMM's panel made once
 * at load. Rows go in panels of 32 (rows past n_out: zero quants and scales);
 * with nb = k / 32 blocks, panel p is
 *   q  u8  [nb][8][2][16][4]  block b, group t, half v, lane i: the quants
 *                             32b + 4t .. 32b + 4t + 3 of row 32p + 16v + i,
 *                             plus 128 (unsigned, for vpdpbusd)
 *   d  f16 [nb][2][16]        block b's scale of row 32p + 16v + i
 * nb * 1088 bytes, the same as the 32 rows in GGUF; 1088 = 17 * 64, so in a
 * 64-byte aligned buffer every vector of every panel is aligned.
 */
#define HR_MM_Q8P_ROWS 32
static inline size_t hr_mm_q8p_panel_bytes(size_t nb) { return nb * 1088; }
static inline size_t hr_mm_q8p_scales_off(size_t nb) { return nb * 1024; }

/*
 * Packed F16 weights: rows in groups of 4 (rows past n_out zero), each row
 * padded with zeros to kp = k rounded up to 16; group g, chunk c holds
 * values 16c .. 16c + 15 of rows 4g .. 4g + 3, 32 bytes each:
 *   u16 [n_out / 4][kp / 16][4][16]
 * so the decode tile's 4 rows are one sequential stream. kp * 8 bytes per
 * group; every 32-byte row chunk is aligned in a 64-byte aligned buffer.
 */
#define HR_MM_F16P_ROWS 4
#define HR_MM_F16P_CHUNK 128 /* bytes of one chunk: 4 rows x 16 values */
/* Byte offset of row r's first chunk (kp: the padded row length). */
static inline size_t hr_mm_f16p_row_off(size_t r, size_t kp)
{
    return r / HR_MM_F16P_ROWS * kp * 2 * HR_MM_F16P_ROWS + r % HR_MM_F16P_ROWS * 32;
}

/*
 * Packed Q4_K weights: rows in groups of 16 (n_out rounded up to 32, the
 * packed kernels' panel; rows past n_out are zero). With nb = k / 256
 * super-blocks, group g, block b is HR_MM_Q4KP_BLOCK bytes at offset
 * (g * nb + b) * HR_MM_Q4KP_BLOCK:
 *   q     u8  [32][16][4]  byte t of dword j, lane i: byte 4j + t of row
 *                          16g + i's 128 quant bytes (low nibble: value
 *                          64(j/8) + 4(j%8) + t, high nibble: that + 32);
 *                          one 64-byte vector per j: the nibbles of 4
 *                          values of 2 sub-blocks for 16 rows
 *   sc    u8  [8][16]      sub-block scales (6 bits, unpacked), per lane
 *   mn    u8  [4][16][2]   sub-block mins in pairs (2j, 2j + 1), per lane:
 *                          widened to int16 they are vpdpwssd's operand
 *   d     f16 [16]         block scale, per lane
 *   dmin  f16 [16]         block min scale, per lane
 * 2368 = 37 * 64 bytes for 16 rows, 2.8% more than their 16 x 144 in GGUF;
 * every part is 64-byte aligned (d and dmin: 32-byte) in a 64-byte aligned
 * buffer. Decode streams one group at a time: each vector load feeds 16
 * rows (the row-major kernel gathers them from 16 places), and the scales
 * need no 6-bit unpacking.
 */
#define HR_MM_Q4KP_ROWS 16
#define HR_MM_Q4KP_BLOCK 2368
#define HR_MM_Q4KP_SC 2048
#define HR_MM_Q4KP_MN 2176
#define HR_MM_Q4KP_D 2304
#define HR_MM_Q4KP_DMIN 2336

/*
 * One ISA's kernels.
 *  prepare: converts activation rows [i0, i1) into the act scratch.
 *  compute: output rows [r0, r1) of all m tokens. The rows are this thread's
 *           share; r0 is a multiple of `row_align`.
 */
struct hr_mm_isa {
    const char *name;
    size_t row_align;
    void (*prepare)(const struct hr_mm_layout *l, const float *x, size_t i0, size_t i1,
                    void *act);
    void (*compute)(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                    const void *act, float *y, size_t ldy);
    /* compute for packed Q8_0, Q4_K or F16 weights (r0 a multiple of 32); NULL:
     * this ISA does not read the packed layouts, and nothing is packed for it. */
    void (*compute_packed)(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                           const void *act, float *y, size_t ldy);
};

extern const struct hr_mm_isa hr_mm_isa_generic;
#if defined(__x86_64__)
extern const struct hr_mm_isa hr_mm_isa_avx2;
extern const struct hr_mm_isa hr_mm_isa_avx512;
#endif

/* The generic (plain C) prepare; the SIMD ones must write the same bytes. */
void hr_mm_prepare_generic(const struct hr_mm_layout *l, const float *x, size_t i0, size_t i1,
                           void *act);

/*
 * Reference dot products, one per (weight type, vec-dot type) pair: weight
 * row `w` (k values in GGUF layout) with activation row i of the act scratch,
 * computed the way ggml defines them: exact integer sums per block, then
 * float scaling. Every SIMD kernel is tested against these.
 */
float hr_mm_dot_ref(const struct hr_mm_layout *l, const void *w, const void *act, size_t i);

/* True when the CPU (and OS) can run AVX2+FMA+F16C / the AVX-512 set we use. */
bool hr_mm_cpu_has_avx2(void);
bool hr_mm_cpu_has_avx512(void);
bool hr_mm_cpu_has_avx512bf16(void);

#endif
