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
 *
 * Packing: where this CPU's kernels read a matrix faster in a layout of
 * their own (Q8_0 and F16 on AVX-512, see hr_matmul_pack in kernels/matmul.h), open
 * copies it once into anonymous memory of the same size (the `weights`
 * category either way) and releases the file's pages of it. Every tensor
 * left in the file's layout is then touched once, so that from the end of
 * hr_model_open what is resident for the weights is `weight_bytes`, each
 * weight once, on every path that opens a model.
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

enum hr_arch { HR_ARCH_LLAMA, HR_ARCH_QWEN2, HR_ARCH_QWEN3 };

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
};

struct hr_layer {
    struct hr_weight attn_norm;             /* [n_embd] */
    struct hr_weight wq, wk, wv;            /* [n_embd] x n_head*hd / n_head_kv*hd rows */
    struct hr_weight bq, bk, bv;            /* biases (qwen2) */
    struct hr_weight q_norm, k_norm;        /* [head_dim] (qwen3) */
    struct hr_weight wo;                    /* [n_head*hd] x n_embd rows */
    struct hr_weight ffn_norm;              /* [n_embd] */
    struct hr_weight w_gate, w_up;          /* [n_embd] x n_ff rows */
    struct hr_weight w_down;                /* [n_ff] x n_embd rows */
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
    uint64_t weight_bytes;        /* bytes of all tensors, packed ones as packed (the
                                     `weights` memory category) */
    uint64_t packed_bytes;        /* of which in packed copies */
    uint64_t file_bytes;
};

enum hr_status hr_model_open(const char *path, struct hr_model **out, struct hr_err *err);
void hr_model_close(struct hr_model *m);

/* The matrices a forward pass multiplies by, each once and in the order it
 * reads them: every layer's wq, wk, wv, wo, w_gate, w_up, w_down, then the
 * output (the embedding table when tied). `out` has room for
 * HR_MODEL_LAYER_MATRICES * n_layer + 1; returns how many. */
#define HR_MODEL_LAYER_MATRICES 7
size_t hr_model_matrices(const struct hr_model *m, const struct hr_weight **out);

const char *hr_arch_name(enum hr_arch a);

#endif
