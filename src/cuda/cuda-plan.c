/* cuda-plan.c - the device step layout; see cuda-plan.h for what it draws. */
#include "cuda/cuda-plan.h"
#include "engine/kv-cache.h"

static uint64_t align_up(uint64_t x)
{
    return (x + HR_CUDA_ARENA_ALIGN - 1) & ~(uint64_t)(HR_CUDA_ARENA_ALIGN - 1);
}

/* Places `bytes` at the cursor and advances it to the next aligned offset;
 * `end` is the last byte any non-empty buffer reaches, so the arena size is
 * the runner's high-water mark exactly (trailing padding is not counted). */
static uint64_t place(uint64_t *cursor, uint64_t bytes, uint64_t *end)
{
    uint64_t off = *cursor;
    *cursor = align_up(off + bytes);
    if (bytes && off + bytes > *end)
        *end = off + bytes;
    return off;
}

static uint64_t max64(uint64_t a, uint64_t b)
{
    return a > b ? a : b;
}

void hr_cuda_plan_layout(const struct hr_cuda_plan_dims *d, const struct hr_cuda_step_shape *s,
                         struct hr_cuda_plan *p)
{
    const uint64_t T = s->n_tokens, L = s->n_logits, f = sizeof(float), i = sizeof(int32_t);
    const uint64_t q_dim = (uint64_t)d->n_head * d->head_dim;
    const uint64_t kv_dim = (uint64_t)d->n_head_kv * d->head_dim;
    const uint64_t max_in = hr_cuda_plan_max_in(d);
    const uint64_t TK = T * d->n_expert_used, NX = d->n_expert, FX = d->n_ff_exp;
    uint64_t c = 0, end = 0;

    p->off_tokens = place(&c, T * i, &end);
    p->off_pos = place(&c, T * i, &end);
    p->off_seq_of = place(&c, T * i, &end);
    p->off_rows = place(&c, L * i, &end);
    p->off_tab_off = place(&c, (uint64_t)s->n_seqs * i, &end);
    p->off_tables = place(&c, (uint64_t)s->n_table * i, &end);
    p->off_wtables = place(&c, d->kv_window ? (uint64_t)s->n_table * i : 0, &end);
    p->off_seq_fa = place(&c, (uint64_t)s->n_seqs * i, &end);
    p->off_tiles = place(&c, (T / HR_CUDA_FA_TILE + s->n_seqs) * 2 * i, &end);
    const uint64_t S_dn = d->dn_conv_dim ? s->n_seqs : 0;
    p->off_seq_tok = place(&c, S_dn * 2 * i, &end);
    p->off_seq_slot = place(&c, S_dn * i, &end);
    p->off_ctr = place(&c, hr_cuda_plan_ctr_bytes(d), &end);
    p->meta_bytes = end;

    p->off_rope = place(&c, T * d->n_rot * f, &end);
    p->off_x = place(&c, T * d->n_embd * f, &end);
    p->off_xn = place(&c, T * d->n_embd * f, &end);
    p->off_act = place(&c, hr_cuda_plan_act_rows(d, T, L) * max_in * f, &end);
    if (d->int_gemv) {
        const uint64_t g = hr_cuda_plan_actq_rows(d, T, L);
        uint64_t d_off, s_off, bytes;
        hr_cuda_actq_parts(g, max_in, &d_off, &s_off, &bytes);
        p->off_actq = place(&c, bytes, &end);
    } else {
        p->off_actq = place(&c, 0, &end);
    }
    const int tc = d->tc_gemm && max64(T, L) > d->gemv_max_tokens;
    p->off_act16 = place(&c, tc ? hr_cuda_act16_bytes(d, max64(T, L)) : 0, &end);
    p->off_wdq = place(&c, tc ? d->wdq_elems * 2 : 0, &end);

    /* Attention and FFN buffers are never live at once: both from one base. */
    uint64_t base = c, ca = base, cf = base, cd = base;
    p->off_q = place(&ca, T * q_dim * f, &end);
    p->off_k = place(&ca, T * kv_dim * f, &end);
    p->off_v = place(&ca, T * kv_dim * f, &end);
    p->off_attn = place(&ca, T * q_dim * f, &end);
    p->off_qg = place(&ca, d->attn_gated ? T * 2 * q_dim * f : 0, &end);
    p->off_qgate = place(&ca, d->attn_gated ? T * q_dim * f : 0, &end);
    p->off_attn_part = place(&ca, hr_cuda_attn_part_bytes(d, T), &end);
    p->off_gate = place(&cf, T * d->n_ff * f, &end);
    p->off_up = place(&cf, T * d->n_ff * f, &end);
    p->off_moe_logits = place(&cf, T * NX * f, &end);
    p->off_moe_sel = place(&cf, TK * i, &end);
    p->off_moe_w = place(&cf, TK * f, &end);
    p->off_moe_row = place(&cf, TK * i, &end);
    p->off_moe_tok = place(&cf, TK * i, &end);
    p->off_moe_rx = place(&cf, TK * i, &end);
    p->off_moe_off = place(&cf, NX * i, &end);
    p->off_moe_shg = place(&cf, NX ? T * f : 0, &end);
    p->off_moe_x = place(&cf, TK * d->n_embd * f, &end);
    p->off_moe_gu = place(&cf, TK * 2 * FX * f, &end);
    p->off_moe_h = place(&cf, TK * FX * f, &end);
    const uint64_t CD = d->dn_conv_dim, VD = d->dn_value_dim, HV = d->dn_n_v_heads;
    p->off_dn_qkv = place(&cd, T * CD * f, &end);
    p->off_dn_z = place(&cd, T * VD * f, &end);
    p->off_dn_beta = place(&cd, T * HV * f, &end);
    p->off_dn_g = place(&cd, T * HV * f, &end);
    p->off_dn_conv = place(&cd, T * CD * f, &end);
    p->off_dn_o = place(&cd, T * VD * f, &end);
    c = max64(max64(ca, cf), cd);

    p->off_out_x = place(&c, L * d->n_embd * f, &end);
    p->off_logits = place(&c, L * d->n_vocab * f, &end);
    p->arena_bytes = end;
    p->kv_bytes = (uint64_t)s->new_blocks * d->kv_block_bytes;
    p->total_bytes = p->arena_bytes + p->kv_bytes;
}

void hr_cuda_plan_max(const struct hr_cuda_plan_dims *d, const struct hr_cuda_sizing *z,
                      struct hr_cuda_plan *p)
{
    const uint32_t max_blocks = (z->max_seq_tokens + z->kv_block_tokens - 1) / z->kv_block_tokens;
    const struct hr_cuda_step_shape shape = {z->max_step_tokens, z->max_step_logits,
                                             z->max_step_seqs, z->max_step_seqs * max_blocks, 0};
    hr_cuda_plan_layout(d, &shape, p);
}

uint64_t hr_cuda_plan_kv_min(const struct hr_cuda_plan_dims *d, const struct hr_cuda_sizing *z)
{
    const struct hr_kv_config kc = {.block_tokens = z->kv_block_tokens, .window = d->kv_window};
    return (uint64_t)hr_kv_config_blocks_for(&kc, z->max_seq_tokens, z->max_step_tokens) *
           d->kv_block_bytes;
}

int hr_cuda_plan_size(const struct hr_cuda_plan_dims *d, struct hr_cuda_sizing *z,
                      uint64_t room_bytes)
{
    const uint64_t bb = d->kv_block_bytes;
    for (;;) {
        /* a windowed pool's window blocks shrink with the step */
        const uint64_t kv_min = hr_cuda_plan_kv_min(d, z);
        struct hr_cuda_plan p;
        hr_cuda_plan_max(d, z, &p);
        if (p.arena_bytes <= room_bytes && kv_min <= room_bytes - p.arena_bytes) {
            const uint64_t left = (room_bytes - p.arena_bytes) / bb * bb;
            if (!z->kv_budget_bytes || z->kv_budget_bytes > left)
                z->kv_budget_bytes = left;
            return 0;
        }
        if (z->max_step_tokens <= HR_CUDA_MIN_STEP_TOKENS)
            return -1;
        z->max_step_tokens /= 2;
        if (z->max_step_tokens < HR_CUDA_MIN_STEP_TOKENS)
            z->max_step_tokens = HR_CUDA_MIN_STEP_TOKENS;
        if (z->max_step_logits > z->max_step_tokens)
            z->max_step_logits = z->max_step_tokens;
        if (z->max_step_seqs > z->max_step_tokens)
            z->max_step_seqs = z->max_step_tokens;
    }
}
