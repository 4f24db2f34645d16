/*
 * deltanet.h - the Gated DeltaNet layer kind's arithmetic (qwen35,
 * qwen35moe): the recurrent token mixer of hybrid models.
 *
 * Per layer, for the tokens of one sequence in order (llama.cpp
 * src/models/qwen35.cpp and ggml's gated_delta_net op are the reference):
 *
 *   qkv = W_qkv x;  z = W_z x;  beta = sigmoid(W_beta x);
 *   g = softplus(W_alpha x + dt_bias) * a           (a = -exp(A_log) < 0)
 *   c = SiLU(causal depthwise conv of qkv, kernel K) (K - 1 inputs carried over)
 *   q, k, v = split(c); q and k L2-normalised per k head
 *   per v head h (k head h % n_k_heads, or h / (n_v / n_k) for qwen3next),
 *   state S (d_v x d_k):
 *       S <- S exp(g);  d = beta (v - S k);  S <- S + d k^T;  o = S q / sqrt(d_k)
 *   out = W_out (RMSNorm(o) * norm_w * SiLU(z))
 *
 * Prefill and decode use the same one-token recurrence, token after token,
 * which is what llama.cpp's CPU backend runs too (its fused op; the chunked
 * form of delta-net-base.cpp is the fallback for backends without it). So a
 * token's result does not depend on how its prompt was cut into steps or
 * what it was batched with: chunking is bit-for-bit invariant, the engine's
 * batch-invariance rule holds exactly. Cost per token and v head: 3 d_k d_v
 * multiply-adds plus a d_k d_v scale (~65k flops at 128 x 128), small next to
 * the projections. The state is S stored row-major by v index: row j holds
 * S[j][0..d_k), so every product above walks contiguous rows.
 *
 * The engine (engine.c) runs the projections and splits the work; these
 * functions are pure, any thread may run them on disjoint data.
 */
#ifndef HR_ENGINE_DELTANET_H
#define HR_ENGINE_DELTANET_H

#include <stdint.h>

/*
 * The causal depthwise conv and SiLU over channels [c0, c1) of one
 * sequence's n tokens: in[t * ld + c] -> out[t * ld + c], with
 * out = SiLU(sum_i window[t + i] w[c][i]), window = the channel's K - 1
 * carried inputs (state[c][0..K-1), oldest first) then its n new inputs.
 * Afterwards state holds the channel's last K - 1 inputs. Sums in float in
 * kernel order, as ggml_ssm_conv does.
 */
void hr_deltanet_conv(const float *in, float *out, uint32_t n, uint32_t ld, float *state,
                      const float *w, uint32_t K, uint32_t c0, uint32_t c1);

/* x[0..n) / max(||x||, eps), in place (ggml_l2_norm: the sum of squares in double). */
void hr_deltanet_l2_norm(float *x, uint32_t n, float eps);

/* beta <- sigmoid(beta); g <- softplus(alpha + dt_bias) * a, for n heads
 * (`g` holds alpha on entry). */
void hr_deltanet_gates(float *beta, float *g, const float *dt_bias, const float *a, uint32_t n);

/*
 * One v head of one sequence over its n tokens: S (d x d, row j = S[j][.])
 * advances token by token; o[t * ld_o] gets S q_t / sqrt(d). q, k point at
 * the head's first token (stride ld_qk between tokens), v likewise (ld_v),
 * g and beta at the head's first value (stride ld_gb). `delta` is d floats
 * of scratch.
 */
void hr_deltanet_recur(float *S, const float *q, const float *k, uint32_t ld_qk, const float *v,
                       uint32_t ld_v, const float *g, const float *beta, uint32_t ld_gb,
                       uint32_t n, uint32_t d, float *o, uint32_t ld_o, float *delta);

#endif
