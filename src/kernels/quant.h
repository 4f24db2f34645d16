/*
 * quant.h - reference quantizers and dequantizers for the GGUF weight types,
 * and the activation conversions ggml-cpu applies before a dot product.
 *
 * These are the plain-C definitions every faster kernel is tested against,
 * and what the test-model generator uses to write quantized tensors. Each
 * weight quantizer is bit-identical to llama.cpp's reference quantizer
 * (`quantize_row_*_ref` in ggml-quants.c, which `ggml_quantize_chunk` runs
 * when no importance matrix is given) for the same f32 input, so a model we
 * generate is the model llama.cpp would have produced from those floats.
 * tests/unit/test-quant-oracle.c compares the bytes with llama.cpp's own.
 *
 * Block layouts (little-endian, packed, as stored in GGUF; "f16" is an IEEE
 * half, dequantized value x, quant q):
 *
 *   Q8_0 (34 bytes / 32 values): f16 d, int8 qs[32].        x = d * q
 *
 *   Q4_0 (18 bytes / 32 values): f16 d, uint8 qs[16].       x = d * (q - 8)
 *     Byte j holds value j in its low nibble and value j + 16 in its high
 *     nibble (the two halves of the block, not neighbours).
 *
 *   Q4_1 (20 bytes / 32 values): f16 d, f16 m, uint8 qs[16].  x = d * q + m
 *     Nibbles as Q4_0 (q in 0..15).
 *
 *   Q5_0 (22 bytes / 32 values): f16 d, uint8 qh[4], uint8 qs[16].
 *     x = d * (q - 16), q in 0..31: the low 4 bits in qs as Q4_0, bit 4 of
 *     value j in bit j of the little-endian 32-bit qh.
 *
 *   Q5_1 (24 bytes / 32 values): f16 d, f16 m, uint8 qh[4], uint8 qs[16].
 *     x = d * q + m, q in 0..31 packed as Q5_0.
 *
 *   IQ4_NL (18 bytes / 32 values): f16 d, uint8 qs[16].
 *     x = d * hr_iq4nl_values[q]: nibbles as Q4_0 index a fixed non-linear
 *     table of 16 int8 (denser near 0, where weights are).
 *
 *   MXFP4 (17 bytes / 32 values): uint8 e, uint8 qs[16].
 *     x = 2^(e - 128) * hr_mxfp4_values[q]: an OCP microscaling block, a
 *     shared power-of-two exponent (E8M0, bias 127) over 4-bit E2M1 floats;
 *     the table holds the E2M1 values doubled (integers 0..12), hence the
 *     halved scale. Nibbles as Q4_0.
 *
 *   The K-quants group 256 values into a super-block of 8 (or 16) sub-blocks;
 *   each sub-block has a small integer scale (and min) that is itself
 *   quantized against f16 super-block scales, so the per-sub-block
 *   resolution costs 6 or 8 bits instead of 16.
 *
 *   Q4_K (144 bytes / 256 values): f16 d, f16 dmin, uint8 scales[12],
 *     uint8 qs[128]. Eight sub-blocks of 32; sub-block j has a 6-bit scale
 *     sc_j and a 6-bit min m_j:   x = d * sc_j * q - dmin * m_j,  q in 0..15.
 *     The 16 six-bit numbers are packed into 12 bytes (get_scale_min_k4):
 *       j < 4:  sc_j = scales[j] & 63,          m_j = scales[j + 4] & 63
 *       j >= 4: sc_j = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4
 *               m_j  = (scales[j + 4] >> 4) | (scales[j]     >> 6) << 4
 *     i.e. bytes 0-3 hold sc_0..3 plus the top 2 bits of sc_4..7, bytes 4-7
 *     hold m_0..3 plus the top 2 bits of m_4..7, bytes 8-11 hold the low
 *     nibbles of sc_4..7 (low) and m_4..7 (high).
 *     Quants come in 4 chunks of 32 bytes; chunk c holds sub-block 2c in the
 *     low nibbles and sub-block 2c + 1 in the high nibbles.
 *
 *   Q5_K (176 bytes / 256 values): f16 d, f16 dmin, uint8 scales[12],
 *     uint8 qh[32], uint8 qs[128]. As Q4_K with a fifth bit: q in 0..31,
 *     low 4 bits in qs exactly as Q4_K, bit 4 of value l of sub-block j in
 *     bit j of qh[l].
 *
 *   Q6_K (210 bytes / 256 values): uint8 ql[128], uint8 qh[64],
 *     int8 scales[16], f16 d. Sixteen sub-blocks of 16 with signed 8-bit
 *     scales:  x = d * scales[j] * (q - 32),  q in 0..63.  Two halves of 128
 *     values; in half h, for l in 0..31, values l, l+32, l+64, l+96 of the
 *     half take their low 4 bits from the low nibble of ql[64h + l], the low
 *     nibble of ql[64h + l + 32], the high nibble of ql[64h + l] and the high
 *     nibble of ql[64h + l + 32], and their top two bits from qh[32h + l]
 *     bits 0-1, 2-3, 4-5 and 6-7.
 *
 *   Q8_1 (36 bytes / 32 values; activations of Q4_1/Q5_1): f16 d, f16 s,
 *     int8 qs[32]; s = d * (sum of qs), so a weight's offset m costs one
 *     multiply per block: sum (d_w q_w + m) d_a q_a = d_w d_a (q_w . q_a) + m s.
 *
 *   Q8_K (292 bytes / 256 values; activations only, never in files):
 *     f32 d, int8 qs[256], int16 bsums[16] (the sum of each 16 quants, which
 *     lets a dot product subtract mins and offsets without touching qs).
 *
 * Activation ("vec-dot") conversions: before a dot product llama.cpp's CPU
 * backend converts the f32 activations to the weight type's vec_dot_type with
 * that type's `from_float`. On x86 with AVX2 (every build headroom targets)
 * Q8_0's `from_float` is NOT the reference quantizer: it scales by
 * 127 / amax instead of 1 / (amax / 127) and rounds half to even. Q8_K's is
 * the reference. hr_quantize_row_q8_0_act and hr_quantize_row_q8_K reproduce
 * what runs, bit for bit, in plain C, on every ISA.
 *
 * Row lengths must be multiples of the block size (checked by the callers:
 * the GGUF reader and writer refuse other shapes).
 * Thread safety: pure functions.
 */
#ifndef HR_KERNELS_QUANT_H
#define HR_KERNELS_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "gguf/ggml-types.h"

#define HR_QK8_0 32
#define HR_QK4_0 32
#define HR_QK_K 256

struct hr_block_q8_0 {
    uint16_t d;            /* f16 scale */
    int8_t qs[HR_QK8_0];   /* quants */
};

struct hr_block_q4_0 {
    uint16_t d;                /* f16 scale */
    uint8_t qs[HR_QK4_0 / 2];  /* nibbles: value j low, value j + 16 high */
};

struct hr_block_q4_1 {
    uint16_t d, m;   /* f16 scale and offset */
    uint8_t qs[16];  /* nibbles as Q4_0 */
};

struct hr_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];   /* bit 4 of value j in bit j */
    uint8_t qs[16];  /* low 4 bits, as Q4_0 */
};

struct hr_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[16];
};

struct hr_block_iq4_nl {
    uint16_t d;
    uint8_t qs[16];  /* table indices, as Q4_0 */
};

struct hr_block_mxfp4 {
    uint8_t e;       /* E8M0 shared exponent */
    uint8_t qs[16];  /* E2M1 codes, as Q4_0 */
};

struct hr_block_q8_1 {
    uint16_t d, s;   /* f16 scale; f16 of d * sum(qs) */
    int8_t qs[32];
};

struct hr_block_q4_K {
    uint16_t d;               /* f16 super-block scale of the sub-block scales */
    uint16_t dmin;            /* f16 super-block scale of the sub-block mins */
    uint8_t scales[12];       /* 8 six-bit scales + 8 six-bit mins, packed */
    uint8_t qs[HR_QK_K / 2];  /* 4-bit quants */
};

struct hr_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[HR_QK_K / 8];  /* fifth bits */
    uint8_t qs[HR_QK_K / 2];  /* low 4 bits */
};

struct hr_block_q6_K {
    uint8_t ql[HR_QK_K / 2];     /* low 4 bits */
    uint8_t qh[HR_QK_K / 4];     /* high 2 bits */
    int8_t scales[HR_QK_K / 16]; /* 8-bit sub-block scales */
    uint16_t d;                  /* f16 super-block scale */
};

struct hr_block_q8_K {
    float d;
    int8_t qs[HR_QK_K];
    int16_t bsums[HR_QK_K / 16];
};

_Static_assert(sizeof(struct hr_block_q8_0) == 34, "Q8_0 block is 34 bytes");
_Static_assert(sizeof(struct hr_block_q4_0) == 18, "Q4_0 block is 18 bytes");
_Static_assert(sizeof(struct hr_block_q4_1) == 20, "Q4_1 block is 20 bytes");
_Static_assert(sizeof(struct hr_block_q5_0) == 22, "Q5_0 block is 22 bytes");
_Static_assert(sizeof(struct hr_block_q5_1) == 24, "Q5_1 block is 24 bytes");
_Static_assert(sizeof(struct hr_block_iq4_nl) == 18, "IQ4_NL block is 18 bytes");
_Static_assert(sizeof(struct hr_block_mxfp4) == 17, "MXFP4 block is 17 bytes");
_Static_assert(sizeof(struct hr_block_q8_1) == 36, "Q8_1 block is 36 bytes");
_Static_assert(sizeof(struct hr_block_q4_K) == 144, "Q4_K block is 144 bytes");
_Static_assert(sizeof(struct hr_block_q5_K) == 176, "Q5_K block is 176 bytes");
_Static_assert(sizeof(struct hr_block_q6_K) == 210, "Q6_K block is 210 bytes");
_Static_assert(sizeof(struct hr_block_q8_K) == 292, "Q8_K block is 292 bytes");

/*
 * The 256-value super-block types of quant-k2k3.c (Q2_K, Q3_K, IQ4_XS):
 *
 *   Q2_K (84 bytes / 256 values): uint8 scales[16], uint8 qs[64], f16 d,
 *     f16 dmin. Sixteen sub-blocks of 16; scales[j] holds a 4-bit scale
 *     (low nibble) and a 4-bit min (high nibble):
 *       x = d * (scales[j] & 15) * q - dmin * (scales[j] >> 4),  q in 0..3.
 *     Two halves of 128 values; in half h, values l, l+32, l+64, l+96 of the
 *     half (l in 0..31) are bits 0-1, 2-3, 4-5, 6-7 of qs[32h + l].
 *
 *   Q3_K (110 bytes / 256 values): uint8 hmask[32], uint8 qs[64],
 *     uint8 scales[12], f16 d. Sixteen sub-blocks of 16 with signed 6-bit
 *     scales sc_j - 32:   x = d * (sc_j - 32) * (q - 4),  q in 0..7.
 *     The low 2 bits of q are laid out as Q2_K's; bit 2 of value e (0..255)
 *     is bit e / 32 of hmask[e % 32]. sc_j: its low 4 bits are the low
 *     nibble of scales[j] (j < 8) or the high nibble of scales[j - 8], its
 *     top 2 bits are bits 2 (j / 4) and 2 (j / 4) + 1 of scales[8 + j % 4].
 *
 *   IQ4_XS (136 bytes / 256 values): f16 d, uint16 scales_h, uint8
 *     scales_l[4], uint8 qs[128]. Eight sub-blocks of 32 with 6-bit scales
 *     ls_j (low 4 bits: nibble j % 2 of scales_l[j / 2]; top 2 bits: bits
 *     2j and 2j + 1 of scales_h) and non-linear 4-bit quants:
 *       x = d * (ls_j - 32) * hr_iq4nl_values[q].
 *     Sub-block j's 16 bytes qs[16j ..] hold value l in the low nibble and
 *     value l + 16 in the high nibble (as IQ4_NL / Q4_0 blocks).
 */
struct hr_block_q2_K {
    uint8_t scales[HR_QK_K / 16]; /* 4-bit scale | 4-bit min << 4 */
    uint8_t qs[HR_QK_K / 4];      /* 2-bit quants */
    uint16_t d;                   /* f16 super-block scale of the scales */
    uint16_t dmin;                /* f16 super-block scale of the mins */
};

struct hr_block_q3_K {
    uint8_t hmask[HR_QK_K / 8]; /* bit 2 of each quant */
    uint8_t qs[HR_QK_K / 4];    /* low 2 bits */
    uint8_t scales[12];         /* 16 six-bit scales, packed */
    uint16_t d;                 /* f16 super-block scale */
};

struct hr_block_iq4_xs {
    uint16_t d;                  /* f16 super-block scale */
    uint16_t scales_h;           /* top 2 bits of the 8 sub-block scales */
    uint8_t scales_l[HR_QK_K / 64]; /* low 4 bits of the 8 sub-block scales */
    uint8_t qs[HR_QK_K / 2];     /* 4-bit indices into hr_iq4nl_values */
};

_Static_assert(sizeof(struct hr_block_q2_K) == 84, "Q2_K block is 84 bytes");
_Static_assert(sizeof(struct hr_block_q3_K) == 110, "Q3_K block is 110 bytes");
_Static_assert(sizeof(struct hr_block_iq4_xs) == 136, "IQ4_XS block is 136 bytes");

/* The 6-bit scale (0..63, stored with +32) of sub-block j (0..15) of a Q3_K block. */
static inline int hr_q3_K_scale(const uint8_t *scales, int j)
{
    const int lo = j < 8 ? scales[j] & 0xF : scales[j - 8] >> 4;
    return lo | (((scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}

/* The 6-bit scale (0..63, stored with +32) of sub-block j (0..7) of an IQ4_XS block. */
static inline int hr_iq4_xs_scale(const struct hr_block_iq4_xs *x, int j)
{
    return ((x->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((x->scales_h >> (2 * j)) & 3) << 4);
}

/* Weight quantizers (llama.cpp's reference, bit for bit) and dequantizers.
 * n must be a multiple of the type's block size. */
void hr_quantize_row_q8_0(const float *x, struct hr_block_q8_0 *y, size_t n);
void hr_dequantize_row_q8_0(const struct hr_block_q8_0 *x, float *y, size_t n);
void hr_quantize_row_q4_0(const float *x, struct hr_block_q4_0 *y, size_t n);
void hr_dequantize_row_q4_0(const struct hr_block_q4_0 *x, float *y, size_t n);
void hr_quantize_row_q4_K(const float *x, struct hr_block_q4_K *y, size_t n);
void hr_dequantize_row_q4_K(const struct hr_block_q4_K *x, float *y, size_t n);
void hr_quantize_row_q5_K(const float *x, struct hr_block_q5_K *y, size_t n);
void hr_dequantize_row_q5_K(const struct hr_block_q5_K *x, float *y, size_t n);
void hr_quantize_row_q6_K(const float *x, struct hr_block_q6_K *y, size_t n);
void hr_dequantize_row_q6_K(const struct hr_block_q6_K *x, float *y, size_t n);

void hr_quantize_row_q2_K(const float *x, struct hr_block_q2_K *y, size_t n);
void hr_dequantize_row_q2_K(const struct hr_block_q2_K *x, float *y, size_t n);
void hr_quantize_row_q3_K(const float *x, struct hr_block_q3_K *y, size_t n);
void hr_dequantize_row_q3_K(const struct hr_block_q3_K *x, float *y, size_t n);
void hr_quantize_row_iq4_xs(const float *x, struct hr_block_iq4_xs *y, size_t n);
void hr_dequantize_row_iq4_xs(const struct hr_block_iq4_xs *x, float *y, size_t n);
/* The 32-value block types (quant-block32.c). IQ4_NL's quantizer is
 * ggml's quantize_iq4_nl without an importance matrix (what
 * ggml_quantize_chunk and llama-quantize run: 15 candidate scales), not the
 * cheaper quantize_row_iq4_nl_ref no writer uses. */
void hr_quantize_row_q4_1(const float *x, struct hr_block_q4_1 *y, size_t n);
void hr_dequantize_row_q4_1(const struct hr_block_q4_1 *x, float *y, size_t n);
void hr_quantize_row_q5_0(const float *x, struct hr_block_q5_0 *y, size_t n);
void hr_dequantize_row_q5_0(const struct hr_block_q5_0 *x, float *y, size_t n);
void hr_quantize_row_q5_1(const float *x, struct hr_block_q5_1 *y, size_t n);
void hr_dequantize_row_q5_1(const struct hr_block_q5_1 *x, float *y, size_t n);
void hr_quantize_row_iq4_nl(const float *x, struct hr_block_iq4_nl *y, size_t n);
void hr_dequantize_row_iq4_nl(const struct hr_block_iq4_nl *x, float *y, size_t n);
void hr_quantize_row_mxfp4(const float *x, struct hr_block_mxfp4 *y, size_t n);
void hr_dequantize_row_mxfp4(const struct hr_block_mxfp4 *x, float *y, size_t n);
/* Q8_1 activations as ggml-cpu's x86 from_float makes them (quant-block32.c). */
void hr_quantize_row_q8_1_act(const float *x, struct hr_block_q8_1 *y, size_t n);
void hr_dequantize_row_q8_1(const struct hr_block_q8_1 *x, float *y, size_t n);

/* IQ4_NL's 16 values (ggml's kvalues_iq4nl), sorted; IQ4_XS uses the same
 * table. Defined once, in quant-block32.c. */
extern const int8_t hr_iq4nl_values[16];
/* MXFP4's 16 values: the E2M1 floats doubled (ggml's kvalues_mxfp4). */
extern const int8_t hr_mxfp4_values[16];
/* An E8M0 exponent as ggml's GGML_E8M0_TO_FP32_HALF: 2^(e - 128). */
float hr_e8m0_to_f32_half(uint8_t e);

/* Activation quantizers, as ggml-cpu's from_float runs them on x86 (see the
 * top of this file). Q8_K is also its reference quantizer. */
void hr_quantize_row_q8_0_act(const float *x, struct hr_block_q8_0 *y, size_t n);
void hr_quantize_row_q8_K(const float *x, struct hr_block_q8_K *y, size_t n);
void hr_dequantize_row_q8_K(const struct hr_block_q8_K *x, float *y, size_t n);

/* Unpacks the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block. */
static inline void hr_q4_K_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = scales[j] & 63;
        *m = scales[j + 4] & 63;
    } else {
        *sc = (uint8_t)((scales[j + 4] & 0xF) | ((scales[j - 4] >> 6) << 4));
        *m = (uint8_t)((scales[j + 4] >> 4) | ((scales[j - 0] >> 6) << 4));
    }
}

void hr_convert_row_f16(const float *x, uint16_t *y, size_t n);
void hr_convert_row_bf16(const float *x, uint16_t *y, size_t n);

/*
 * Converts n f32 values (a multiple of the block size) into `type` at `dst`,
 * which holds n / block_elems * block_bytes bytes, with the reference
 * quantizer. Returns 0, or -1 when this build cannot write `type`.
 * Writes F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS (and the activation formats Q8_1, Q8_K).
 */
int hr_quantize_row(enum hr_ggml_type type, const float *x, void *dst, size_t n);

/* The inverse, for every type hr_quantize_row writes; -1 otherwise. */
int hr_dequantize_row(enum hr_ggml_type type, const void *src, float *y, size_t n);

/*
 * Converts n f32 activations to vec-dot type `type` (F32, F16, BF16, Q8_0,
 * Q8_1 or Q8_K) exactly as ggml-cpu's `from_float` for that type does on x86 with
 * AVX2 or AVX-512: Q8_0 with hr_quantize_row_q8_0_act, the others as their
 * reference. Returns 0, or -1 for another type.
 */
int hr_convert_act_row(enum hr_ggml_type type, const float *x, void *dst, size_t n);

#endif
