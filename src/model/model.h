/*
 * model.h - a llama-family model bound to its weights.
 *
 * hr_model_open maps a GGUF file, reads the hyper-parameters (hparams.h),
 * decides the architecture's traits and binds every weight tensor by name,
 * checking its shape and that the engine can compute with its type. Errors
 * name the tensor ("missing tensor 'blk.3.attn_q.weight'", "tensor
 * 'output.weight' has type Q2_K, which the engine cannot compute with").
 *
 * Architectures (general.architecture):
 *   llama  - Llama 2/3.x, Mistral, TinyLlama, SmolLM2: RoPE on adjacent pairs
 *            (x[2i], x[2i+1]); optional rope_freqs.weight (Llama 3 scaling)
 *   qwen2  - Q/K/V biases; RoPE NeoX style (x[i], x[i + n_rot/2])
 *   qwen3  - per-head RMSNorm of Q and K before RoPE; NeoX RoPE
 *   qwen3moe - qwen3 attention; every layer's FFN a mixture of experts
 *            (softmax router, top-k, renormalised, SwiGLU experts)
 *   qwen2moe - qwen2 attention; MoE FFN (softmax, top-k, not renormalised)
 *            plus a shared expert scaled by sigmoid(ffn_gate_inp_shexp . x)
 *   llama with {arch}.expert_count > 0 - Mixtral: MoE FFN (softmax, top-k,
 *            renormalised), experts n_ff wide
 *   gpt-oss - Q/K/V/O biases, a learned sink logit per head (attn_sinks),
 *            sliding-window attention on the layers the pattern marks (every
 *            even layer by default), YaRN NeoX RoPE, the pre-FFN norm named
 *            post_attention_norm; MoE FFN with a router bias, top-k then a
 *            softmax over the k, biases on the experts' gate/up/down and the
 *            clamped SwiGLU (HR_FFN_ACT_SWIGLU_OAI)
 *   qwen35   - hybrid: three of four layers Gated DeltaNet (a recurrent
 *            mixer, engine/deltanet.h), the rest gated attention (attn_q
 *            twice as wide: query and a per-head gate; per-head Q/K RMSNorm;
 *            partial rotary, IMRoPE sections that reduce to NeoX on text);
 *            the FFN norm is named post_attention_norm
 *   qwen35moe - qwen35's mixers; MoE FFN (softmax, top-k, renormalised) plus
 *            a shared expert scaled by sigmoid(ffn_gate_inp_shexp . x)
 *   qwen3next - qwen35moe's blocks with plain NeoX RoPE and the DeltaNet's
 *            beta and alpha projections fused (ssm_ba); files with the older
 *            fused ssm_in (q, k, v and z in one) are refused
 *
 * An architecture is a description (arch_descs in model.c: RoPE style,
 * Q/K/V biases, Q/K norms, which FFN kind its layers have, the MoE gating,
 * renormalisation and shared expert), not a forward pass of its own: the
 * engine runs one forward pass whose FFN step is a layer kind, dense or
 * MoE (hr_ffn_kind), chosen per layer.
 *
 * Experts: a 3-D tensor [ne0, ne1, n_expert], expert index outermost, so
 * expert e's matrix is a contiguous 2-D slice (hr_weight.n_mat slices of
 * mat_bytes each); hr_weight_expert gives one as a plain 2-D weight.
 *
 * Packing: where this CPU's kernels read a matrix faster in a layout of
 * their own (Q8_0 and F16 on AVX-512, see hr_matmul_pack in kernels/matmul.h), open
 * copies it once into anonymous memory of the same size (the `weights`
 * category either way) and releases the file's pages of it, slice by slice
 * (about 256 KiB of the file at a time), so loading never holds a large
 * tensor twice: its peak is the resident weights plus one slice per packing
 * thread, which the governor's ceiling can count on. Every tensor
 * left in the file's layout is then touched once, so that from the end of
 * hr_model_open what is resident for the weights is `weight_bytes`, each
 * weight once, on every path that opens a model for the CPU. A model
 * opened for a device (hr_model_open_ex) is neither packed nor touched:
 * the device engine reads each tensor once and releases its pages.
 *
 * Lifetime: weights point into the mapping or the packed copy, valid until
 * hr_model_close. The model is immutable after open; any thread may read it.
 */
#ifndef HR_MODEL_MODEL_H
#define HR_MODEL_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"
#include "gguf/gguf.h"
#include "model/hparams.h"

enum hr_arch {
    HR_ARCH_LLAMA,
    HR_ARCH_QWEN2,
    HR_ARCH_QWEN3,
    HR_ARCH_QWEN2MOE,
    HR_ARCH_QWEN3MOE,
    HR_ARCH_GPTOSS,
    HR_ARCH_QWEN35,
    HR_ARCH_QWEN35MOE,
    HR_ARCH_QWEN3NEXT,
};

/* The token-mixer layer kinds: softmax attention over the paged KV, or a
 * Gated DeltaNet recurrence over a fixed-size per-sequence state
 * (engine/deltanet.h). A hybrid model mixes them; which layers are which is
 * data (hparams: full_attention_interval or attention.recurrent_layers). */
enum hr_mixer_kind { HR_MIXER_ATTN, HR_MIXER_DELTANET };

/* The Gated DeltaNet sizes of a hybrid model (n_layers = 0: none). The q/k
 * heads (n_k_heads of head_k_dim) are shared by the v heads: v head h reads
 * k head h % n_k_heads (qwen35*, as llama.cpp's ggml_gated_delta_net
 * broadcasts them), or h / (n_v_heads / n_k_heads) when k_blocked
 * (qwen3next, whose graph repeats each k head for its block of v heads). */
struct hr_deltanet {
    uint32_t n_layers;                /* recurrent layers */
    uint32_t n_k_heads, n_v_heads;
    uint32_t head_k_dim, head_v_dim;  /* equal (llama.cpp requires it) */
    uint32_t conv_kernel;             /* 4: each layer keeps the last 3 inputs */
    uint32_t key_dim, value_dim;      /* n_k_heads x head_k_dim, n_v_heads x head_v_dim */
    uint32_t conv_dim;                /* 2 key_dim + value_dim: the conv's channels */
    /* One sequence's state per recurrent layer, in floats: the conv's last
     * (conv_kernel - 1) inputs of every channel, and n_v_heads matrices of
     * head_v_dim x head_k_dim. */
    uint64_t conv_floats, ssm_floats;
    bool k_blocked;
};

/* The FFN layer kinds. */
enum hr_ffn_kind { HR_FFN_DENSE, HR_FFN_MOE };

/* How the router's logits become the k experts and their weights
 * (llama.cpp's llama_expert_gating_func_type, same numbers):
 *   SOFTMAX        softmax over all experts, then the top k (qwen*moe, Mixtral)
 *   SIGMOID        sigmoid per expert; the top k of sigmoid + exp_probs_b
 *                  (the bias steers selection only; deepseek2, glm4moe)
 *   SOFTMAX_WEIGHT the top k logits, then a softmax over those k (gpt-oss)
 * then optionally renormalised to sum 1 and multiplied by a scale. */
enum hr_moe_gating {
    HR_MOE_GATING_SOFTMAX = 1,
    HR_MOE_GATING_SIGMOID = 2,
    HR_MOE_GATING_SOFTMAX_WEIGHT = 3,
};

/* The expert activation: silu(gate) * up, or gpt-oss's clamped variant
 * (ggml_swiglu_oai with alpha 1.702, limit 7): g = min(gate, 7),
 * u = clamp(up, -7, 7), g * sigmoid(1.702 g) * (u + 1). */
enum hr_ffn_act { HR_FFN_ACT_SWIGLU, HR_FFN_ACT_SWIGLU_OAI };

/* A shared expert: none, a plain dense FFN added to the experts' sum, or one
 * scaled by sigmoid(ffn_gate_inp_shexp . x) (qwen2moe, qwen35moe). */
enum hr_shexp_kind { HR_SHEXP_NONE, HR_SHEXP_PLAIN, HR_SHEXP_SIGMOID };

/* Most experts a model may have and use (bounds the per-token routing
 * arrays, which live on the stack). */
#define HR_MOE_MAX_EXPERTS 512
#define HR_MOE_MAX_USED 64

/* The MoE facts of a model, from its description and metadata. */
struct hr_moe {
    uint32_t n_expert;      /* 0: a dense model */
    uint32_t n_expert_used; /* k */
    uint32_t n_ff_exp;      /* an expert's hidden width */
    uint32_t n_ff_shexp;    /* the shared expert's (0: none) */
    enum hr_moe_gating gating;
    enum hr_ffn_act act;
    enum hr_shexp_kind shexp;
    bool norm_w;            /* renormalise the k weights to sum 1 */
    float w_scale;          /* then multiply them by this (0 or 1: not at all) */
};

/* A weight: a view of one tensor in the mapping. Rows are ne[0] elements. */
struct hr_weight {
    enum hr_ggml_type type;
    const void *data; /* NULL when the tensor is absent (optional weights) */
    uint64_t ne0;     /* elements per row (input dimension) */
    uint64_t ne1;     /* rows (output dimension); 1 for vectors */
    const char *name;
    /* The matrix in the kernels' own layout (hr_matmul_pack), made at open;
     * NULL when the kernels read `data` as stored. When set, compute with
     * this (hr_matmul_compute_packed): the file's pages of `data` were
     * released and would be read from disk again. */
    const void *packed;
    /* Stacked matrices (experts): n_mat slices, slice e at data + e *
     * mat_bytes (packed + e * packed_mat_bytes); n_mat = 1 otherwise. */
    uint64_t n_mat;
    uint64_t mat_bytes;
    uint64_t packed_mat_bytes;
};

/* Expert e of a stacked weight as a plain 2-D weight (n_mat = 1). */
static inline struct hr_weight hr_weight_expert(const struct hr_weight *w, uint32_t e)
{
    struct hr_weight s = *w;
    s.data = (const uint8_t *)w->data + (uint64_t)e * w->mat_bytes;
    if (w->packed)
        s.packed = (const uint8_t *)w->packed + (uint64_t)e * w->packed_mat_bytes;
    s.n_mat = 1;
    return s;
}

struct hr_layer {
    enum hr_mixer_kind mixer;
    uint32_t kv_layer;                      /* HR_MIXER_ATTN: its layer in the KV pool */
    uint32_t dn_layer;                      /* HR_MIXER_DELTANET: its index in the state */
    struct hr_weight attn_norm;             /* [n_embd] */
    struct hr_weight wq, wk, wv;            /* [n_embd] x n_head*hd / n_head_kv*hd rows */
    struct hr_weight bq, bk, bv;            /* biases (qwen2) */
    struct hr_weight q_norm, k_norm;        /* [head_dim] (qwen3) */
    struct hr_weight wo;                    /* [n_head*hd] x n_embd rows */
    struct hr_weight bo;                    /* output bias [n_embd] (gpt-oss) */
    struct hr_weight sinks;                 /* attn_sinks [n_head]: per-head logit that joins
                                               the softmax denominator (gpt-oss) */
    uint32_t window;                        /* sliding window in tokens; 0: full causal */
    struct hr_weight ffn_norm;              /* [n_embd] (gpt-oss: post_attention_norm) */
    enum hr_ffn_kind ffn_kind;
    /* HR_FFN_DENSE */
    struct hr_weight w_gate, w_up;          /* [n_embd] x n_ff rows */
    struct hr_weight w_down;                /* [n_ff] x n_embd rows */
    /* HR_FFN_MOE (n_expert stacked matrices each for the *_exps) */
    struct hr_weight gate_inp;              /* router: [n_embd] x n_expert rows, F32/F16/BF16 */
    struct hr_weight gate_inp_b;            /* router bias [n_expert], optional */
    struct hr_weight exp_probs_b;           /* selection bias [n_expert] (sigmoid gating) */
    struct hr_weight gate_exps, up_exps;    /* [n_embd] x n_ff_exp rows per expert; when
                                               gate_up_fused, gate_exps holds ffn_gate_up_exps
                                               ([n_embd] x 2 n_ff_exp: gate rows, then up)
                                               and up_exps is absent */
    bool gate_up_fused;
    struct hr_weight down_exps;             /* [n_ff_exp] x n_embd rows per expert */
    struct hr_weight gate_exps_b, up_exps_b; /* [n_ff_exp] per expert, F32 (gpt-oss) */
    struct hr_weight down_exps_b;           /* [n_embd] per expert, F32 (gpt-oss) */
    struct hr_weight gate_inp_shexp;        /* [n_embd] (HR_SHEXP_SIGMOID) */
    struct hr_weight gate_shexp, up_shexp;  /* [n_embd] x n_ff_shexp rows */
    struct hr_weight down_shexp;            /* [n_ff_shexp] x n_embd rows */
    /* HR_MIXER_DELTANET (engine/deltanet.h) */
    struct hr_weight ssm_qkv;               /* attn_qkv: [n_embd] x conv_dim rows (q | k | v) */
    struct hr_weight ssm_z;                 /* attn_gate: [n_embd] x value_dim rows */
    struct hr_weight ssm_beta, ssm_alpha;   /* [n_embd] x n_v_heads rows */
    struct hr_weight ssm_ba;                /* qwen3next: beta and alpha fused, [n_embd] x
                                               2 n_v_heads rows: per k head, its v heads'
                                               betas then their alphas */
    struct hr_weight ssm_conv1d;            /* [conv_kernel] x conv_dim rows, F32 */
    struct hr_weight ssm_dt;                /* ssm_dt.bias [n_v_heads] */
    struct hr_weight ssm_a;                 /* [n_v_heads]: -exp(A_log) */
    struct hr_weight ssm_norm;              /* [head_v_dim] */
    struct hr_weight ssm_out;               /* [value_dim] x n_embd rows */
};

struct hr_model {
    struct hr_gguf *gguf; /* owned */
    struct hr_hparams hp;
    enum hr_arch arch;
    bool rope_neox;       /* NeoX half split (qwen2, qwen3) vs adjacent pairs (llama) */
    struct hr_weight tok_embd;    /* [n_embd] x n_vocab rows */
    struct hr_weight output_norm; /* [n_embd] */
    struct hr_weight output;      /* [n_embd] x n_vocab rows; = tok_embd when tied */
    struct hr_weight rope_freqs;  /* [n_rot/2] divisors (llama3 scaling), or absent */
    struct hr_layer *layers;      /* n_layer */
    struct hr_moe moe;            /* n_expert = 0 for a dense model */
    struct hr_deltanet dn;        /* n_layers = 0 for a model without recurrent layers */
    uint32_t n_attn_layers;       /* layers with KV (all of them unless hybrid) */
    bool attn_gated;              /* attn_q is 2 n_head hd rows: per head its query, then a
                                     gate; the output is multiplied by sigmoid(gate) (qwen35) */
    uint64_t weight_bytes;        /* bytes of all tensors, packed ones as packed (the
                                     `weights` memory category) */
    uint64_t packed_bytes;        /* of which in packed copies */
    uint64_t file_bytes;
    /* Opened for a device (hr_model_open_opts.device): nothing packed or
     * prefaulted; a device engine reads each tensor once to upload it and
     * then releases its file pages (hr_model_release_pages), so the host
     * keeps no copy of the weights. Should the CPU take it instead, the
     * CPU backend packs it first (hr_model_open_for_cpu). */
    bool for_device;
};

struct hr_model_open_opts {
    /* The weights go to a device engine: no packed copy for this CPU's
     * kernels and no prefault (docs/memory.md, "Device memory"). */
    bool device;
};

enum hr_status hr_model_open(const char *path, struct hr_model **out, struct hr_err *err);
/* hr_model_open with options (NULL: its defaults). */
enum hr_status hr_model_open_ex(const char *path, const struct hr_model_open_opts *opts,
                                struct hr_model **out, struct hr_err *err);
void hr_model_close(struct hr_model *m);

/* For a model opened for a device: drops the file's pages wholly inside
 * [data, data + bytes) (a tensor the device now holds) from this process
 * and from the page cache. Reading them again would fault them back from
 * the file. Nothing for a model opened for the CPU, whose engine reads
 * them. */
void hr_model_release_pages(const struct hr_model *m, const void *data, uint64_t bytes);

/* A model opened for a device that the CPU runs after all (the device
 * could not take it): packs and prefaults it as hr_model_open would have,
 * and clears for_device. Before any engine reads it; nothing for a model
 * opened for the CPU. */
void hr_model_open_for_cpu(struct hr_model *m);

/* The matrices a forward pass multiplies by, each once and in the order it
 * reads them: every layer's wq, wk, wv, wo (or a DeltaNet's qkv, z, beta,
 * alpha, out), then its FFN's (dense: w_gate,
 * w_up, w_down; MoE: the router, the stacked gate/up/down experts, the
 * shared expert's gate/up/down), then the output (the embedding table when
 * tied). Stacked expert tensors appear once (n_mat > 1). `out` has room for
 * HR_MODEL_LAYER_MATRICES * n_layer + 1; returns how many. */
#define HR_MODEL_LAYER_MATRICES 16
size_t hr_model_matrices(const struct hr_model *m, const struct hr_weight **out);


const char *hr_arch_name(enum hr_arch a);

#endif
