/*
 * matmul.c - the public matmul entry points: activation layout, the work
 * split between threads, and the choice of implementation; see matmul.h.
 *
 * The kernels live in matmul-ref.c (plain C, the reference and the portable
 * fallback), matmul-avx2.c and matmul-avx512.c. Each SIMD file compiles its
 * functions with a `target` attribute, so even a portable build (no
 * -march=native) carries them, and hr_mm_isa_select() picks the best one the
 * CPU supports, once, from CPUID.
 *
 * Work split: phase 1 gives each thread a contiguous range of activation
 * rows; phase 2 gives each thread a contiguous range of output rows (weight
 * rows), rounded to the kernel's panel size, so every thread streams its own
 * slice of the weights exactly once and no two threads write the same cache
 * line of Y except at the slice boundaries.
 */
#include "kernels/matmul.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/matmul-impl.h"
#include "kernels/quant.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

/* ---- activation layout --------------------------------------------------- */

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

void hr_mm_layout_init(struct hr_mm_layout *l, enum hr_ggml_type wtype, size_t m, size_t k)
{
    memset(l, 0, sizeof(*l));
    l->wtype = wtype;
    l->m = m;
    l->k = k;
    size_t off = 0;
    switch (hr_matmul_vec_dot_type(wtype)) {
    case HR_GGML_Q8_0:
        l->nb = k / 32;
        l->qs_stride = round_up(k, 64);
        l->qs_off = off, off = round_up(off + m * l->qs_stride, 64);
        l->d_off = off, off = round_up(off + m * l->nb * sizeof(float), 64);
        l->comp_off = off, off = round_up(off + m * l->nb * sizeof(int32_t), 64);
        l->comp4_off = off, off = round_up(off + m * l->nb * sizeof(int32_t), 64);
        l->comp5_off = off, off = round_up(off + m * l->nb * sizeof(int32_t), 64);
        break;
    case HR_GGML_Q8_1:
        l->nb = k / 32;
        l->qs_stride = round_up(k, 64);
        l->qs_off = off, off = round_up(off + m * l->qs_stride, 64);
        l->d_off = off, off = round_up(off + m * l->nb * sizeof(float), 64);
        l->comp_off = off, off = round_up(off + m * l->nb * sizeof(int32_t), 64);
        l->s_off = off, off = round_up(off + m * l->nb * sizeof(float), 64);
        break;
    case HR_GGML_Q8_K:
        l->nb = k / 256;
        l->qs_stride = round_up(k, 64);
        l->qs_off = off, off = round_up(off + m * l->qs_stride, 64);
        l->d_off = off, off = round_up(off + m * l->nb * sizeof(float), 64);
        l->bsum_off = off, off = round_up(off + m * l->nb * 16 * sizeof(int16_t), 64);
        l->sum32_off = off, off = round_up(off + m * l->nb * 8 * sizeof(int16_t), 64);
        l->comp16_off = off, off = round_up(off + m * l->nb * 16 * sizeof(int32_t), 64);
        break;
    case HR_GGML_BF16: /* 16-bit rows, as ggml's vec-dot format */
        l->qs_stride = round_up(k, 32) * sizeof(uint16_t);
        l->qs_off = off, off = round_up(off + m * l->qs_stride, 64);
        break;
    case HR_GGML_F16: /* the same, and those values widened (a32) */
        l->qs_stride = round_up(k, 32) * sizeof(uint16_t);
        l->qs_off = off, off = round_up(off + m * l->qs_stride, 64);
        l->a32_stride = round_up(k, 32) * sizeof(float);
        l->a32_off = off, off = round_up(off + m * l->a32_stride, 64);
        break;
    default: /* F32: f32 rows */
        l->qs_stride = round_up(k, 32) * sizeof(float);
        l->qs_off = off, off = round_up(off + m * l->qs_stride, 64);
        break;
    }
    l->total = off;
}

/* ---- CPU features -------------------------------------------------------- */

#if defined(__x86_64__)
struct cpu_features {
    bool avx2, avx512, avx512bf16;
};

static struct cpu_features detect(void)
{
    struct cpu_features f = {0};
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return f;
    bool fma = c & (1u << 12), f16c = c & (1u << 29), osxsave = c & (1u << 27),
         avx = c & (1u << 28);
    if (!osxsave || !avx)
        return f;
    unsigned xlo, xhi;
    __asm__ volatile("xgetbv" : "=a"(xlo), "=d"(xhi) : "c"(0));
    bool os_ymm = (xlo & 0x6) == 0x6, os_zmm = (xlo & 0xe6) == 0xe6;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return f;
    bool avx2 = b & (1u << 5), f512 = b & (1u << 16), dq = b & (1u << 17), bw = b & (1u << 30),
         vl = b & (1u << 31), vnni = c & (1u << 11);
    f.avx2 = os_ymm && avx2 && fma && f16c;
    f.avx512 = f.avx2 && os_zmm && f512 && dq && bw && vl && vnni;
    unsigned a1 = 0, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1))
        f.avx512bf16 = f.avx512 && (a1 & (1u << 5));
    return f;
}

/* CPUID traps to the hypervisor in a VM (microseconds), so the answer is
 * computed once; racing first callers compute the same bits. */
static int features(void)
{
    static _Atomic int cached = -1;
    int v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v < 0) {
        struct cpu_features f = detect();
        v = (f.avx2 ? 1 : 0) | (f.avx512 ? 2 : 0) | (f.avx512bf16 ? 4 : 0);
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return v;
}

bool hr_mm_cpu_has_avx2(void) { return features() & 1; }
bool hr_mm_cpu_has_avx512(void) { return features() & 2; }
bool hr_mm_cpu_has_avx512bf16(void) { return features() & 4; }
#else
bool hr_mm_cpu_has_avx2(void) { return false; }
bool hr_mm_cpu_has_avx512(void) { return false; }
bool hr_mm_cpu_has_avx512bf16(void) { return false; }
#endif

/* ---- implementation choice ----------------------------------------------- */

static _Atomic(const struct hr_mm_isa *) g_isa;

static const struct hr_mm_isa *isa_best(void)
{
    /* HR_KERNELS_ISA=generic|avx2|avx512vnni overrides the choice (debugging,
     * benchmarks); a name this CPU cannot run is ignored. */
    const char *env = getenv("HR_KERNELS_ISA");
    if (env) {
        if (strcmp(env, "generic") == 0)
            return &hr_mm_isa_generic;
#if defined(__x86_64__)
        if (strcmp(env, "avx2") == 0 && hr_mm_cpu_has_avx2())
            return &hr_mm_isa_avx2;
        if (strcmp(env, "avx512vnni") == 0 && hr_mm_cpu_has_avx512())
            return &hr_mm_isa_avx512;
#endif
    }
#if defined(__x86_64__)
    if (hr_mm_cpu_has_avx512())
        return &hr_mm_isa_avx512;
    if (hr_mm_cpu_has_avx2())
        return &hr_mm_isa_avx2;
#endif
    return &hr_mm_isa_generic;
}

static const struct hr_mm_isa *isa(void)
{
    const struct hr_mm_isa *p = atomic_load_explicit(&g_isa, memory_order_acquire);
    if (!p) {
        p = isa_best();
        atomic_store_explicit(&g_isa, p, memory_order_release);
    }
    return p;
}

const char *hr_kernels_isa(void) { return isa()->name; }

/* -1: not decided yet (HR_KERNELS_INVARIANT=0 in the environment turns it off). */
static _Atomic int g_invariant = -1;

void hr_kernels_set_batch_invariant(bool on)
{
    atomic_store_explicit(&g_invariant, on ? 1 : 0, memory_order_relaxed);
}

bool hr_kernels_batch_invariant(void)
{
    int v = atomic_load_explicit(&g_invariant, memory_order_relaxed);
    if (v < 0) {
        const char *env = getenv("HR_KERNELS_INVARIANT");
        v = env && strcmp(env, "0") == 0 ? 0 : 1;
        atomic_store_explicit(&g_invariant, v, memory_order_relaxed);
    }
    return v != 0;
}

bool hr_kernels_force_isa(const char *name)
{
    const struct hr_mm_isa *p = NULL;
    if (strcmp(name, "generic") == 0)
        p = &hr_mm_isa_generic;
#if defined(__x86_64__)
    else if (strcmp(name, "avx2") == 0 && hr_mm_cpu_has_avx2())
        p = &hr_mm_isa_avx2;
    else if (strcmp(name, "avx512vnni") == 0 && hr_mm_cpu_has_avx512())
        p = &hr_mm_isa_avx512;
#endif
    else if (strcmp(name, "best") == 0)
        p = isa_best();
    if (!p)
        return false;
    atomic_store_explicit(&g_isa, p, memory_order_release);
    return true;
}

/* ---- public API ---------------------------------------------------------- */

bool hr_matmul_supports(enum hr_ggml_type type)
{
    switch (type) {
    case HR_GGML_F32:
    case HR_GGML_F16:
    case HR_GGML_BF16:
    case HR_GGML_Q8_0:
    case HR_GGML_Q4_0:
    case HR_GGML_Q4_1:
    case HR_GGML_Q5_0:
    case HR_GGML_Q5_1:
    case HR_GGML_IQ4_NL:
    case HR_GGML_MXFP4:
    case HR_GGML_Q4_K:
    case HR_GGML_Q5_K:
    case HR_GGML_Q6_K:
    case HR_GGML_Q2_K:
    case HR_GGML_Q3_K:
    case HR_GGML_IQ4_XS: return true;
    default: return false;
    }
}

enum hr_ggml_type hr_matmul_vec_dot_type(enum hr_ggml_type wtype)
{
    switch (wtype) {
    case HR_GGML_Q8_0:
    case HR_GGML_Q4_0:
    case HR_GGML_Q5_0:
    case HR_GGML_IQ4_NL:
    case HR_GGML_MXFP4: return HR_GGML_Q8_0;
    case HR_GGML_Q4_1:
    case HR_GGML_Q5_1: return HR_GGML_Q8_1;
    case HR_GGML_Q4_K:
    case HR_GGML_Q5_K:
    case HR_GGML_Q6_K:
    case HR_GGML_Q2_K:
    case HR_GGML_Q3_K:
    case HR_GGML_IQ4_XS: return HR_GGML_Q8_K;
    case HR_GGML_F16: return HR_GGML_F16;
    case HR_GGML_BF16: return HR_GGML_BF16;
    default: return HR_GGML_F32;
    }
}

size_t hr_row_bytes(enum hr_ggml_type type, size_t n)
{
    const struct hr_ggml_type_info *ti = hr_ggml_type_info(type);
    return ti ? n / ti->block_elems * ti->block_bytes : 0;
}

size_t hr_matmul_act_bytes(enum hr_ggml_type wtype, size_t m, size_t k)
{
    struct hr_mm_layout l;
    hr_mm_layout_init(&l, wtype, m, k);
    return l.total;
}

/* [lo, hi) of n items for thread ith of nth, lo a multiple of `align`. */
static void split(size_t n, size_t align, int ith, int nth, size_t *lo, size_t *hi)
{
    size_t units = (n + align - 1) / align;
    size_t u0 = units * (size_t)ith / (size_t)nth, u1 = units * (size_t)(ith + 1) / (size_t)nth;
    *lo = u0 * align < n ? u0 * align : n;
    *hi = u1 * align < n ? u1 * align : n;
}

void hr_matmul_prepare(enum hr_ggml_type wtype, const float *x, size_t m, size_t k, void *act,
                       int ith, int nth)
{
    struct hr_mm_layout l;
    hr_mm_layout_init(&l, wtype, m, k);
    size_t i0, i1;
    split(m, 1, ith, nth, &i0, &i1);
    if (i0 < i1)
        isa()->prepare(&l, x, i0, i1, act);
}

typedef void compute_fn(const struct hr_mm_layout *l, const void *w, size_t r0, size_t r1,
                        const void *act, float *y, size_t ldy);

/* Thread ith's share of the n_out rows (a multiple of `align`) through `fn`. */
static void compute_share(compute_fn *fn, size_t align, enum hr_ggml_type wtype, const void *w,
                          size_t k, size_t n_out, const void *act, size_t m, float *y, size_t ldy,
                          int ith, int nth)
{
    struct hr_mm_layout l;
    hr_mm_layout_init(&l, wtype, m, k);
    size_t r0, r1;
    split(n_out, align, ith, nth, &r0, &r1);
    if (r0 < r1 && m > 0)
        fn(&l, w, r0, r1, act, y, ldy);
}

void hr_matmul_compute(enum hr_ggml_type wtype, const void *w, size_t k, size_t n_out,
                       const void *act, size_t m, float *y, size_t ldy, int ith, int nth)
{
    const struct hr_mm_isa *p = isa();
    compute_share(p->compute, p->row_align, wtype, w, k, n_out, act, m, y, ldy, ith, nth);
}

/* ---- packed weights -------------------------------------------------------- */

/* Longest row packed, in bytes: the fallback below unpacks one row on the
 * stack (Q8_0 k = 32768, F16 k = 17408). */
#define PACK_ROW_MAX (32768 / 32 * 34)

size_t hr_matmul_packed_bytes(enum hr_ggml_type type, size_t k, size_t n_out)
{
    if ((type != HR_GGML_Q8_0 && type != HR_GGML_F16 && type != HR_GGML_Q4_K) ||
        hr_row_bytes(type, k) > PACK_ROW_MAX || (type == HR_GGML_Q8_0 && k % 32 != 0) ||
        (type == HR_GGML_Q4_K && k % 256 != 0) || !isa()->compute_packed)
        return 0;
    const char *env = getenv("HR_KERNELS_PACK"); /* 0: keep the file's layout (A/B runs) */
    if (env && strcmp(env, "0") == 0)
        return 0;
    if (type == HR_GGML_F16)
        return round_up(n_out, HR_MM_F16P_ROWS) * round_up(k, 16) * 2;
    if (type == HR_GGML_Q4_K)
        return round_up(n_out, HR_MM_Q8P_ROWS) / HR_MM_Q4KP_ROWS * (k / 256) * HR_MM_Q4KP_BLOCK;
    return round_up(n_out, HR_MM_Q8P_ROWS) / HR_MM_Q8P_ROWS * hr_mm_q8p_panel_bytes(k / 32);
}

static void pack_q8_0(const void *w, size_t k, size_t n_out, void *dst)
{
    const size_t nb = k / 32, rb = nb * 34, pb = hr_mm_q8p_panel_bytes(nb);
    for (size_t p = 0; p < round_up(n_out, HR_MM_Q8P_ROWS) / HR_MM_Q8P_ROWS; p++) {
        uint8_t *q = (uint8_t *)dst + p * pb;
        uint16_t *d = (uint16_t *)(q + hr_mm_q8p_scales_off(nb));
        for (size_t lane = 0; lane < HR_MM_Q8P_ROWS; lane++) {
            const size_t row = p * HR_MM_Q8P_ROWS + lane, v = lane / 16, i = lane % 16;
            const uint8_t *src = row < n_out ? (const uint8_t *)w + row * rb : NULL;
            for (size_t b = 0; b < nb; b++) {
                uint16_t h = 0;
                uint32_t u[8] = {0};
                if (src) {
                    memcpy(&h, src + b * 34, 2);
                    memcpy(u, src + b * 34 + 2, 32);
                }
                d[(b * 2 + v) * 16 + i] = h;
                for (size_t t = 0; t < 8; t++) {
                    const uint32_t x = u[t] ^ 0x80808080u; /* w + 128, bytewise */
                    memcpy(q + ((b * 8 + t) * 2 + v) * 64 + i * 4, &x, 4);
                }
            }
        }
    }
}

static void pack_f16(const void *w, size_t k, size_t n_out, void *dst)
{
    const size_t kp = round_up(k, 16);
    for (size_t r = 0; r < round_up(n_out, HR_MM_F16P_ROWS); r++) {
        uint8_t *row = (uint8_t *)dst + hr_mm_f16p_row_off(r, kp);
        const uint8_t *src = r < n_out ? (const uint8_t *)w + r * k * 2 : NULL;
        for (size_t c = 0; c < kp / 16; c++) {
            const size_t n = k - 16 * c < 16 ? k - 16 * c : 16;
            memset(row + c * HR_MM_F16P_CHUNK, 0, 32);
            if (src)
                memcpy(row + c * HR_MM_F16P_CHUNK, src + 32 * c, n * 2);
        }
    }
}

/* Q4_K in groups of 16 rows (matmul-impl.h); rows past n_out stay zero. */
static void pack_q4_k(const void *w, size_t k, size_t n_out, void *dst)
{
    const size_t nb = k / 256, rb = nb * 144;
    for (size_t g = 0; g < round_up(n_out, HR_MM_Q8P_ROWS) / HR_MM_Q4KP_ROWS; g++) {
        for (size_t b = 0; b < nb; b++) {
            uint8_t *o = (uint8_t *)dst + (g * nb + b) * HR_MM_Q4KP_BLOCK;
            memset(o, 0, HR_MM_Q4KP_BLOCK);
            for (size_t i = 0; i < HR_MM_Q4KP_ROWS && g * HR_MM_Q4KP_ROWS + i < n_out; i++) {
                const uint8_t *blk = (const uint8_t *)w + (g * HR_MM_Q4KP_ROWS + i) * rb + b * 144;
                for (size_t j = 0; j < 32; j++)
                    memcpy(o + 64 * j + 4 * i, blk + 16 + 4 * j, 4);
                for (int s = 0; s < 8; s++) {
                    uint8_t sc, mn;
                    hr_q4_K_scale_min(s, blk + 4, &sc, &mn);
                    o[HR_MM_Q4KP_SC + 16 * s + i] = sc;
                    o[HR_MM_Q4KP_MN + 32 * (s / 2) + 2 * i + s % 2] = mn;
                }
                memcpy(o + HR_MM_Q4KP_D + 2 * i, blk, 2);
                memcpy(o + HR_MM_Q4KP_DMIN + 2 * i, blk + 2, 2);
            }
        }
    }
}

void hr_matmul_pack(enum hr_ggml_type type, const void *w, size_t k, size_t n_out, void *dst)
{
    if (type == HR_GGML_F16)
        pack_f16(w, k, n_out, dst);
    else if (type == HR_GGML_Q4_K)
        pack_q4_k(w, k, n_out, dst);
    else
        pack_q8_0(w, k, n_out, dst);
}

/* Row `row` of packed Q4_K back in GGUF's layout: the 6-bit scales and mins
 * re-encoded as hr_q4_K_scale_min reads them (j < 4: low 6 bits of bytes j
 * and j + 4; j >= 4: the nibbles of byte j + 4, the high 2 bits in the top
 * of bytes j - 4 and j). */
static void unpack_row_q4_k(const void *packed, size_t k, size_t row, uint8_t *dst)
{
    const size_t nb = k / 256, g = row / HR_MM_Q4KP_ROWS, i = row % HR_MM_Q4KP_ROWS;
    for (size_t b = 0; b < nb; b++) {
        const uint8_t *o = (const uint8_t *)packed + (g * nb + b) * HR_MM_Q4KP_BLOCK;
        uint8_t *blk = dst + b * 144, sc[8], mn[8];
        memcpy(blk, o + HR_MM_Q4KP_D + 2 * i, 2);
        memcpy(blk + 2, o + HR_MM_Q4KP_DMIN + 2 * i, 2);
        for (int s = 0; s < 8; s++) {
            sc[s] = o[HR_MM_Q4KP_SC + 16 * s + i];
            mn[s] = o[HR_MM_Q4KP_MN + 32 * (s / 2) + 2 * i + s % 2];
        }
        uint8_t *q = blk + 4;
        for (int j = 0; j < 4; j++) {
            q[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
            q[j + 4] = (uint8_t)((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
            q[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4));
        }
        for (size_t j = 0; j < 32; j++)
            memcpy(blk + 16 + 4 * j, o + 64 * j + 4 * i, 4);
    }
}

/* Row `row` of a packed matrix back in GGUF's layout. */
static void unpack_row(enum hr_ggml_type type, const void *packed, size_t k, size_t row,
                       uint8_t *dst)
{
    if (type == HR_GGML_Q4_K) {
        unpack_row_q4_k(packed, k, row, dst);
        return;
    }
    if (type == HR_GGML_F16) {
        const uint8_t *src = (const uint8_t *)packed + hr_mm_f16p_row_off(row, round_up(k, 16));
        for (size_t c = 0; c * 16 < k; c++)
            memcpy(dst + 32 * c, src + c * HR_MM_F16P_CHUNK, (k - 16 * c < 16 ? k - 16 * c : 16) * 2);
        return;
    }
    const size_t nb = k / 32;
    const uint8_t *q = (const uint8_t *)packed + row / HR_MM_Q8P_ROWS * hr_mm_q8p_panel_bytes(nb);
    const uint16_t *d = (const uint16_t *)(q + hr_mm_q8p_scales_off(nb));
    const size_t v = row % HR_MM_Q8P_ROWS / 16, i = row % 16;
    for (size_t b = 0; b < nb; b++) {
        memcpy(dst + b * 34, &d[(b * 2 + v) * 16 + i], 2);
        for (size_t t = 0; t < 8; t++) {
            uint32_t x;
            memcpy(&x, q + ((b * 8 + t) * 2 + v) * 64 + i * 4, 4);
            x ^= 0x80808080u;
            memcpy(dst + b * 34 + 2 + 4 * t, &x, 4);
        }
    }
}

void hr_matmul_compute_packed(enum hr_ggml_type type, const void *w, size_t k, size_t n_out,
                              const void *act, size_t m, float *y, size_t ldy, int ith, int nth)
{
    const struct hr_mm_isa *p = isa();
    if (p->compute_packed) {
        compute_share(p->compute_packed, HR_MM_Q8P_ROWS, type, w, k, n_out, act, m, y, ldy, ith,
                      nth);
        return;
    }
    /* An ISA forced after the weights were packed (tests, HR_KERNELS_ISA):
     * each row unpacked and computed as stored, so the results are that
     * ISA's own. */
    struct hr_mm_layout l;
    hr_mm_layout_init(&l, type, m, k);
    uint8_t row[PACK_ROW_MAX];
    size_t r0, r1;
    split(n_out, 1, ith, nth, &r0, &r1);
    for (size_t r = r0; r < r1 && m > 0; r++) {
        unpack_row(type, w, k, r, row);
        p->compute(&l, row, 0, 1, act, y + r, ldy);
    }
}

void hr_matmul_packed_row(enum hr_ggml_type type, const void *packed, size_t k, size_t row,
                          float *dst)
{
    uint8_t buf[PACK_ROW_MAX];
    unpack_row(type, packed, k, row, buf);
    (void)hr_dequantize_row(type, buf, dst, k);
}

void hr_dequantize_row_any(enum hr_ggml_type type, const void *src, float *dst, size_t n)
{
    (void)hr_dequantize_row(type, src, dst, n);
}
