/* plan.c - the step layout function; see plan.h for the layout it draws. */
#include "engine/plan.h"

#include "kernels/matmul.h"

static uint64_t align_up(uint64_t x)
{
    return (x + HR_ARENA_ALIGN - 1) & ~(uint64_t)(HR_ARENA_ALIGN - 1);
}

/* Places `bytes` at the cursor and advances it to the next aligned offset.
 * `end` tracks the last byte any non-empty buffer reaches: the arena size is
 * that, not the cursor, so the plan equals the runner's high-water mark to the
 * byte (no trailing alignment padding is counted). */
#define place(cursor, bytes) place_(cursor, bytes, &end)
static uint64_t place_(uint64_t *cursor, uint64_t bytes, uint64_t *end)
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

void hr_plan_layout(const struct hr_plan_dims *d, const struct hr_step_shape *s, struct hr_plan *p)
{
    const uint64_t T = s->n_tokens, L = s->n_logits, f = sizeof(float);
    const uint64_t q_dim = (uint64_t)d->n_head * d->head_dim;
    const uint64_t kv_dim = (uint64_t)d->n_head_kv * d->head_dim;
    uint64_t c = 0, end = 0;

    p->off_tokens = place(&c, T * sizeof(int32_t));
    p->off_pos = place(&c, T * sizeof(int32_t));
    p->off_seq_of = place(&c, T * sizeof(int32_t));
    p->off_rope = place(&c, T * d->n_rot * f);
    p->off_x = place(&c, T * d->n_embd * f);
    p->off_xn = place(&c, T * d->n_embd * f);

    /* One activation scratch serves every matmul: the largest of them, also
     * the output matmul over the L logit rows. The kernels say how much each
     * needs (their layout may pad rows), so ask them. */
    uint64_t act = 0;
    for (uint32_t i = 0; i < d->n_types_embd; i++)
        act = max64(act, hr_matmul_act_bytes(d->types_embd[i], T, d->n_embd));
    for (uint32_t i = 0; i < d->n_types_q; i++)
        act = max64(act, hr_matmul_act_bytes(d->types_q[i], T, q_dim));
    for (uint32_t i = 0; i < d->n_types_ff; i++)
        act = max64(act, hr_matmul_act_bytes(d->types_ff[i], T, d->n_ff));
    for (uint32_t i = 0; i < d->n_types_dn_out; i++)
        act = max64(act, hr_matmul_act_bytes(d->types_dn_out[i], T, d->dn_value_dim));
    if (L)
        act = max64(act, hr_matmul_act_bytes(d->type_out, L, d->n_embd));
    if (!T)
        act = 0;
    p->act_bytes = act;
    p->off_act = place(&c, act);

    /* The attention buffers and the FFN buffers are never live at once: lay
     * both out from the same base and take the larger extent. */
    uint64_t base = c, ca = base, cf = base, cd = base;
    p->off_q = place(&ca, T * q_dim * f);
    p->off_k = place(&ca, T * kv_dim * f);
    p->off_v = place(&ca, T * kv_dim * f);
    p->off_attn = place(&ca, T * q_dim * f);
    p->off_qg = place(&ca, d->attn_gated ? T * 2 * q_dim * f : 0);
    p->off_qgate = place(&ca, d->attn_gated ? T * q_dim * f : 0);
    /* The Gated DeltaNet's buffers: a third member of the union. */
    p->off_dn_qkv = place(&cd, T * d->dn_conv_dim * f);
    p->off_dn_z = place(&cd, T * d->dn_value_dim * f);
    p->off_dn_beta = place(&cd, T * d->dn_n_v_heads * f);
    p->off_dn_g = place(&cd, T * d->dn_n_v_heads * f);
    p->off_dn_conv = place(&cd, T * d->dn_conv_dim * f);
    p->off_dn_o = place(&cd, T * d->dn_value_dim * f);
    p->off_gate = place(&cf, T * d->n_ff * f);
    p->off_up = place(&cf, T * d->n_ff * f);
    /* MoE: sizes in T x k only (see the layout above). */
    const uint64_t NX = d->n_expert, K = d->n_expert_used, TK = T * K, FX = d->n_ff_exp;
    uint64_t a_in = 0, a_ff = 0;
    for (uint32_t i = 0; i < d->n_types_exp_in; i++)
        a_in = max64(a_in, hr_matmul_act_bytes(d->types_exp_in[i], 1, d->n_embd));
    for (uint32_t i = 0; i < d->n_types_exp_ff; i++)
        a_ff = max64(a_ff, hr_matmul_act_bytes(d->types_exp_ff[i], 1, FX));
    p->moe_act_bytes = TK * max64(a_in * (d->exp_up_own_act ? 2 : 1), a_ff);
    p->off_moe_logits = place(&cf, T * NX * f);
    p->off_moe_sel = place(&cf, TK * sizeof(int32_t));
    p->off_moe_w = place(&cf, TK * f);
    p->off_moe_shg = place(&cf, NX ? T * f : 0);
    p->off_moe_off = place(&cf, T ? NX * sizeof(uint32_t) : 0);
    p->off_moe_row = place(&cf, TK * sizeof(int32_t));
    p->off_moe_tok = place(&cf, TK * sizeof(int32_t));
    p->off_moe_x = place(&cf, TK * d->n_embd * f);
    p->off_moe_gu = place(&cf, TK * 2 * FX * f);
    p->off_moe_h = place(&cf, TK * FX * f);
    p->off_moe_act = place(&cf, p->moe_act_bytes);
    c = max64(max64(ca, cf), cd);

    /* Per thread: a K and a V tile in f32 and the running state of the rows
     * of one attention call; independent of the KV length. */
    p->attn_scr_stride = align_up(d->attn_scratch_bytes);
    p->off_attn_scr = place(&c, p->attn_scr_stride * d->n_threads);

    p->off_out_x = place(&c, L * d->n_embd * f);
    p->off_logits = place(&c, L * d->n_vocab * f);
    (void)c;
    p->arena_bytes = end;
    p->kv_bytes = (uint64_t)s->new_blocks * d->kv_block_bytes;
    p->total_bytes = p->arena_bytes + p->kv_bytes;
}
