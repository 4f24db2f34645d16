/*
 * test-cuda-plan.c - the CUDA engine's device step plan (src/cuda/cuda-plan.c)
 * without a GPU, so CI checks it: pure C, built on every machine.
 *
 * On random model dims and step shapes: every buffer is 256-byte aligned and
 * inside arena_bytes; buffers that are live together do not overlap (the
 * attention group {q, k, v, attn, a gated layer's qg and qgate}, the FFN
 * group {gate, up, and a MoE's routing and grouped rows} and the Gated
 * DeltaNet's group share one region by design); the staged metadata is
 * exactly the prefix the step uploads (meta_bytes, before the first device-only buffer); arena_bytes is
 * the end of the furthest non-empty buffer (what the runner's high-water
 * mark reaches, tests/cuda checks that on the GPU); more of any shape
 * component never plans fewer bytes; kv_bytes = new blocks x block bytes.
 *
 * The sizing under a device ceiling (hr_cuda_plan_size, what --vram-limit
 * does at init): on random dims, limits and rooms, a sizing that succeeds
 * fits (largest arena + pool <= room), holds one max_seq_tokens sequence,
 * never grows what was asked, cuts the pool before the step (the step is
 * only halved when even the smallest pool would not fit beside the arena),
 * and takes the largest step of the halving sequence that fits; one that
 * fails had no fitting step down to HR_CUDA_MIN_STEP_TOKENS.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "cuda/cuda-plan.h"
#include "engine/kv-cache.h"

static uint64_t rng = 7;

static uint32_t urand(uint32_t n)
{
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)((rng >> 33) % n);
}

struct buf {
    uint64_t off, bytes;
    int group; /* 0: always live; 1: attention group; 2: FFN group; 3: DeltaNet group */
};

static void check_plan(const struct hr_cuda_plan_dims *d, const struct hr_cuda_step_shape *s)
{
    struct hr_cuda_plan p;
    hr_cuda_plan_layout(d, s, &p);
    const uint64_t T = s->n_tokens, L = s->n_logits, f = 4;
    const uint64_t qd = (uint64_t)d->n_head * d->head_dim, kvd = (uint64_t)d->n_head_kv * d->head_dim;
    uint64_t max_in = d->n_embd > qd ? d->n_embd : qd;
    max_in = max_in > d->n_ff ? max_in : d->n_ff;
    max_in = max_in > d->n_ff_exp ? max_in : d->n_ff_exp;
    max_in = max_in > d->dn_value_dim ? max_in : d->dn_value_dim;
    assert_int_equal(hr_cuda_plan_max_in(d), max_in);
    const uint64_t TK = T * d->n_expert_used, NX = d->n_expert, FX = d->n_ff_exp;
    const int tc = d->tc_gemm && (T > L ? T : L) > d->gemv_max_tokens;
    /* a MoE's expert rows in a GEMV step (its experts in one launch) */
    const uint64_t X = d->n_expert ? (T < d->gemv_max_tokens ? T : d->gemv_max_tokens) *
                                         d->n_expert_used : 0;
    uint64_t g = T > L ? T : L, d_off, s_off, actq_bytes = 0;
    g = g < d->gemv_max_tokens ? g : d->gemv_max_tokens;
    g = g > X ? g : X;
    const uint64_t A = (T > L ? T : L) > X ? (T > L ? T : L) : X;
    if (d->int_gemv)
        hr_cuda_actq_parts(g, max_in, &d_off, &s_off, &actq_bytes);
    /* act16: R rows of f16, or of the integer GEMM's Q8_0 inputs when larger */
    const uint64_t R = T > L ? T : L;
    uint64_t act16 = R * max_in * 2, q8_bytes = 0;
    if (d->int_gemm)
        hr_cuda_actq_parts(R, max_in, &d_off, &s_off, &q8_bytes);
    act16 = q8_bytes > act16 ? q8_bytes : act16;
    const struct buf b[] = {
        {p.off_tokens, T * 4, 0}, {p.off_pos, T * 4, 0}, {p.off_seq_of, T * 4, 0},
        {p.off_rows, L * 4, 0}, {p.off_tab_off, (uint64_t)s->n_seqs * 4, 0},
        {p.off_tables, (uint64_t)s->n_table * 4, 0},
        {p.off_wtables, d->kv_window ? (uint64_t)s->n_table * 4 : 0, 0}, {p.off_seq_fa, (uint64_t)s->n_seqs * 4, 0},
        {p.off_tiles, (T / HR_CUDA_FA_TILE + s->n_seqs) * 8, 0},
        {p.off_seq_tok, d->dn_conv_dim ? (uint64_t)s->n_seqs * 8 : 0, 0},
        {p.off_seq_slot, d->dn_conv_dim ? (uint64_t)s->n_seqs * 4 : 0, 0},
        {p.off_ctr, ((uint64_t)d->gemv_max_tokens * d->n_head_kv + (d->int_gemv ? (d->n_ff + 31) / 32 : 0)) * 4, 0},
        {p.off_rope, T * d->n_rot * f, 0},
        {p.off_x, T * d->n_embd * f, 0}, {p.off_xn, T * d->n_embd * f, 0},
        {p.off_act, A * max_in * f, 0},
        {p.off_actq, actq_bytes, 0},
        {p.off_act16, tc ? act16 : 0, 0},
        {p.off_wdq, tc ? d->wdq_elems * 2 : 0, 0}, {p.off_q, T * qd * f, 1}, {p.off_k, T * kvd * f, 1},
        {p.off_v, T * kvd * f, 1}, {p.off_attn, T * qd * f, 1},
        {p.off_qg, d->attn_gated ? T * 2 * qd * f : 0, 1},
        {p.off_qgate, d->attn_gated ? T * qd * f : 0, 1},
        {p.off_attn_part, (T < d->gemv_max_tokens ? T : d->gemv_max_tokens) * d->n_head * HR_CUDA_ATTN_SPLITS * (d->head_dim + 2) * f, 1}, {p.off_gate, T * d->n_ff * f, 2},
        {p.off_up, T * d->n_ff * f, 2}, {p.off_moe_logits, T * NX * f, 2},
        {p.off_moe_sel, TK * 4, 2}, {p.off_moe_w, TK * f, 2}, {p.off_moe_row, TK * 4, 2},
        {p.off_moe_tok, TK * 4, 2}, {p.off_moe_rx, TK * 4, 2}, {p.off_moe_off, NX * 4, 2},
        {p.off_moe_shg, NX ? T * f : 0, 2}, {p.off_moe_x, TK * d->n_embd * f, 2},
        {p.off_moe_gu, TK * 2 * FX * f, 2}, {p.off_moe_h, TK * FX * f, 2},
        {p.off_dn_qkv, T * d->dn_conv_dim * f, 3}, {p.off_dn_z, T * d->dn_value_dim * f, 3},
        {p.off_dn_beta, T * d->dn_n_v_heads * f, 3}, {p.off_dn_g, T * d->dn_n_v_heads * f, 3},
        {p.off_dn_conv, T * d->dn_conv_dim * f, 3}, {p.off_dn_o, T * d->dn_value_dim * f, 3},
        {p.off_out_x, L * d->n_embd * f, 0},
        {p.off_logits, L * d->n_vocab * f, 0},
    };
    const size_t n = sizeof(b) / sizeof(b[0]);
    uint64_t end = 0, meta_end = 0;
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(b[i].off % HR_CUDA_ARENA_ALIGN, 0);
        if (b[i].bytes && b[i].off + b[i].bytes > end)
            end = b[i].off + b[i].bytes;
        if (i < 12 && b[i].bytes && b[i].off + b[i].bytes > meta_end)
            meta_end = b[i].off + b[i].bytes;
        for (size_t j = 0; j < i; j++) {
            if (!b[i].bytes || !b[j].bytes)
                continue;
            if (b[i].group && b[j].group && b[i].group != b[j].group)
                continue; /* the attention, FFN and DeltaNet groups share their region */
            const int overlap = b[i].off < b[j].off + b[j].bytes && b[j].off < b[i].off + b[i].bytes;
            assert_false(overlap);
        }
    }
    assert_int_equal(p.arena_bytes, end);
    assert_int_equal(p.meta_bytes, meta_end);
    assert_true(p.meta_bytes <= p.off_rope);
    assert_int_equal(p.kv_bytes, (uint64_t)s->new_blocks * d->kv_block_bytes);
    assert_int_equal(p.total_bytes, p.arena_bytes + p.kv_bytes);
}

static void random_dims(struct hr_cuda_plan_dims *d)
{
    d->head_dim = 32 * (1 + urand(8));
    d->n_head_kv = 1 + urand(8);
    d->n_head = d->n_head_kv * (1 + urand(8));
    d->n_embd = 64 * (1 + urand(64));
    d->n_rot = d->head_dim - 2 * urand(d->head_dim / 4);
    d->n_ff = 32 * (1 + urand(400));
    d->n_vocab = 1 + urand(200000);
    /* half the models a mixture of experts (then n_ff is the shared expert's, or 0) */
    const int moe = urand(2);
    d->n_expert = moe ? 2 + urand(256) : 0;
    d->n_expert_used = moe ? 1 + urand(d->n_expert < 16 ? d->n_expert : 16) : 0;
    d->n_ff_exp = moe ? 256 * (1 + urand(8)) : 0;
    if (moe && urand(2))
        d->n_ff = 0;
    /* a third of the models hybrid (Gated DeltaNet layers, gated attention) */
    const int hybrid = urand(3) == 0;
    d->attn_gated = hybrid;
    d->dn_n_v_heads = hybrid ? 2 * (1 + urand(32)) : 0;
    d->dn_value_dim = hybrid ? d->dn_n_v_heads * 128 : 0;
    d->dn_conv_dim = hybrid ? d->dn_value_dim + 2 * 128 * (1 + urand(16)) : 0;
    d->gemv_max_tokens = 8;
    d->tc_gemm = urand(2);
    d->int_gemv = urand(2);
    d->int_gemm = urand(2);
    d->wdq_elems = 32 * (uint64_t)urand(1u << 20);
    d->kv_block_bytes = 1024 * (1 + urand(1000));
    /* a third with a windowed pool (gpt-oss): windowed tables staged too */
    d->kv_window = urand(3) == 0 ? 16 + urand(4096) : 0;
}

static void test_layout(void **state)
{
    (void)state;
    for (int it = 0; it < 2000; it++) {
        struct hr_cuda_plan_dims d;
        random_dims(&d);
        struct hr_cuda_step_shape s = {urand(600), 0, 1 + urand(64), urand(5000), urand(100)};
        s.n_logits = urand(s.n_tokens + 1);
        check_plan(&d, &s);
    }
}

static void test_monotone(void **state)
{
    (void)state;
    for (int it = 0; it < 2000; it++) {
        struct hr_cuda_plan_dims d;
        random_dims(&d);
        struct hr_cuda_step_shape s = {1 + urand(500), 0, 1 + urand(32), urand(3000), urand(50)};
        s.n_logits = urand(s.n_tokens + 1);
        struct hr_cuda_plan a, b;
        hr_cuda_plan_layout(&d, &s, &a);
        for (int c = 0; c < 5; c++) {
            struct hr_cuda_step_shape t = s;
            uint32_t *field[] = {&t.n_tokens, &t.n_logits, &t.n_seqs, &t.n_table, &t.new_blocks};
            *field[c] += 1 + urand(40);
            hr_cuda_plan_layout(&d, &t, &b);
            assert_true(b.arena_bytes >= a.arena_bytes);
            assert_true(b.total_bytes >= a.total_bytes);
        }
    }
}

/* One max_seq_tokens sequence: its full blocks, and with a window the
 * windowed blocks its steps may hold (kv-cache.h's rule). */
static uint64_t kv_min(const struct hr_cuda_plan_dims *d, const struct hr_cuda_sizing *z)
{
    const struct hr_kv_config kc = {.block_tokens = z->kv_block_tokens, .window = d->kv_window};
    const uint64_t full = (z->max_seq_tokens + z->kv_block_tokens - 1) / z->kv_block_tokens;
    const uint64_t blocks = hr_kv_config_blocks_for(&kc, z->max_seq_tokens, z->max_step_tokens);
    assert_true(d->kv_window ? blocks > full && blocks <= 2 * full : blocks == full);
    return blocks * d->kv_block_bytes;
}

static uint64_t arena_of(const struct hr_cuda_plan_dims *d, const struct hr_cuda_sizing *z)
{
    struct hr_cuda_plan p;
    hr_cuda_plan_max(d, z, &p);
    return p.arena_bytes;
}

static void test_size_under_ceiling(void **state)
{
    (void)state;
    int fitted = 0, halved = 0, refused = 0;
    for (int it = 0; it < 3000; it++) {
        struct hr_cuda_plan_dims d;
        random_dims(&d);
        const uint32_t steps[] = {64, 100, 512, 2048, 4096};
        struct hr_cuda_sizing ask = {.max_step_tokens = steps[urand(5)], .max_step_seqs = 1 + urand(8),
                                     .max_seq_tokens = 1 + urand(40000), .kv_block_tokens = 32};
        ask.max_step_logits = 1 + urand(ask.max_step_tokens);
        const uint64_t arena_full = arena_of(&d, &ask), need = kv_min(&d, &ask);
        ask.kv_budget_bytes = urand(2) ? 0 : need + (uint64_t)urand(1000) * d.kv_block_bytes;
        /* rooms around the interesting edges: the full step with its pool,
         * and far less */
        const uint64_t room = urand(3) == 0 ? arena_full + need + urand(1 << 20)
                                            : (uint64_t)urand(1000) * (arena_full + need) / 1000;
        struct hr_cuda_sizing z = ask;
        const int rc = hr_cuda_plan_size(&d, &z, room);
        if (rc != 0) {
            refused++;
            assert_int_equal(z.max_step_tokens, ask.max_step_tokens < HR_CUDA_MIN_STEP_TOKENS
                                                    ? ask.max_step_tokens : HR_CUDA_MIN_STEP_TOKENS);
            assert_true(arena_of(&d, &z) + kv_min(&d, &z) > room);
            continue;
        }
        fitted++;
        assert_true(arena_of(&d, &z) + z.kv_budget_bytes <= room);
        assert_true(z.kv_budget_bytes >= kv_min(&d, &z));
        assert_int_equal(z.kv_budget_bytes % d.kv_block_bytes, 0);
        assert_true(z.max_step_tokens <= ask.max_step_tokens);
        assert_true(z.max_step_logits <= z.max_step_tokens && z.max_step_seqs <= z.max_step_tokens);
        if (ask.kv_budget_bytes)
            assert_true(z.kv_budget_bytes <= ask.kv_budget_bytes);
        if (z.max_step_tokens == ask.max_step_tokens) {
            assert_true(arena_full + need <= room);
        } else {
            /* halved only because the step before it did not fit even with
             * the smallest pool */
            halved++;
            struct hr_cuda_sizing prev = z;
            prev.max_step_tokens = z.max_step_tokens * 2 > ask.max_step_tokens
                                       ? ask.max_step_tokens : z.max_step_tokens * 2;
            prev.max_step_logits = ask.max_step_logits < prev.max_step_tokens
                                       ? ask.max_step_logits : prev.max_step_tokens;
            prev.max_step_seqs = ask.max_step_seqs < prev.max_step_tokens ? ask.max_step_seqs
                                                                          : prev.max_step_tokens;
            assert_true(arena_of(&d, &prev) + kv_min(&d, &prev) > room);
        }
    }
    print_message("sizing: %d fitted (%d with a smaller step), %d refused\n", fitted, halved,
                  refused);
    assert_true(fitted > 100 && halved > 10 && refused > 10);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layout),
        cmocka_unit_test(test_monotone),
        cmocka_unit_test(test_size_under_ceiling),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
