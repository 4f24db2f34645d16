/*
 * gen-model - writes a random-weight llama-family GGUF model for tests,
 * benchmarks and the demo. See tools/lib/model-gen.h for what it writes and
 * why; run `gen-model --help` for the flags.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "gguf/ggml-types.h"
#include "model-gen.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: gen-model --out FILE [--shape NAME] [options]\n"
            "\n"
            "Writes a GGUF model with seeded random weights (not a trained model).\n"
            "\n"
            "  --out FILE          where to write (atomically)\n"
            "  --shape NAME        start from a named shape (default: tiny):\n"
            "                      ");
    for (int i = 0; hr_gen_shape_names[i]; i++)
        fprintf(f, "%s%s", i ? ", " : "", hr_gen_shape_names[i]);
    fprintf(f,
            "\n"
            "  --arch A            llama, qwen2, qwen3, qwen2moe, qwen3moe, gpt-oss, qwen35,\n"
            "                      qwen35moe or qwen3next (llama with --n-expert: Mixtral-style)\n"
            "  --type T            weight type of matrices: f32, f16, bf16, q8_0, q4_0,\n"
            "                      q4_1, q5_0, q5_1, iq4_nl, mxfp4, q2_k, q3_k, q4_k, q5_k,\n"
            "                      q6_k, iq4_xs, or the mixes q4_k_m, q5_k_m (llama-quantize's\n"
            "                      _M) and q4_k_m_real (Q4_K, Q6_K, Q5_0, Q8_0 and IQ4_NL\n"
            "                      tensors, the fallback types of real downloads) and\n"
            "                      mxfp4_real (experts MXFP4, the rest Q8_0: gpt-oss files)\n"
            "  --vocab DIR|builtin a directory with a Hugging Face tokenizer.json and\n"
            "                      tokenizer_config.json, or the built-in byte-level vocabulary\n"
            "  --vocab-size N      the model's vocab_size: ids past the tokenizer's padded\n"
            "                      with [PAD<id>] tokens, as llama.cpp's converter does\n"
            "                      (gpt-oss shapes: 201088, config.json's; default: the\n"
            "                      tokenizer's own size)\n"
            "  --n-embd N --n-layer N --n-head N --n-head-kv N --head-dim N --n-ff N\n"
            "  --layers N          the same as --n-layer (shortens a named shape)\n"
            "  --n-rot N           rotary dims per head (qwen35*: default head-dim / 4)\n"
            "  --ssm-k-heads N --ssm-v-heads N --ssm-head-dim N --full-attn-interval N\n"
            "                      qwen35*'s Gated DeltaNet heads (default n-head, 2x that,\n"
            "                      head-dim / 2) and its every-Nth attention layer (4)\n"
            "  --n-expert N --n-expert-used K --n-ff-exp N --n-ff-shexp N\n"
            "                      experts, experts per token, expert width, shared\n"
            "                      expert width (qwen2moe)\n"
            "  --ctx N             context length written to the metadata\n"
            "  --rope-base F       RoPE frequency base\n"
            "  --rope-scaling S    none, linear, yarn or llama3 (with --rope-factor F and\n"
            "                      --rope-orig-ctx N)\n"
            "  --rms-eps F         RMSNorm epsilon\n"
            "  --swa N             gpt-oss: sliding window in tokens (default 128)\n"
            "  --swa-pattern N     gpt-oss: window period (layer l windowed iff\n"
            "                      l %% N < N - 1; default 2, not written)\n"
            "  --tied | --untied   output shares the token embedding, or has its own\n"
            "  --seed N            random seed (default 42)\n"
            "  --row-streams       draw each row from its own stream, on every core (other\n"
            "                      values than the default draw; for big benchmark files)\n"
            "  --name S            general.name\n"
            "  --chat-template F   tokenizer.chat_template from file F instead of the\n"
            "                      vocabulary's (e.g. a llama.cpp models/templates file)\n");
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno || *end || end == s || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int main(int argc, char **argv)
{
    const char *out = NULL, *shape = "tiny";
    char *chat_template = NULL; /* --chat-template's text; the process's lifetime */
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--shape") == 0 && i + 1 < argc)
            shape = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        }
    }
    struct hr_gen_params p;
    struct hr_err err = {{0}};
    if (hr_gen_shape(shape, &p, &err) != HR_OK) {
        fprintf(stderr, "gen-model: %s\n", err.msg);
        return 2;
    }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "--tied") == 0) {
            p.tied = true;
            continue;
        }
        if (strcmp(a, "--untied") == 0) {
            p.tied = false;
            continue;
        }
        if (strcmp(a, "--row-streams") == 0) {
            p.row_streams = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "gen-model: unknown flag or missing value: %s\n", a);
            usage(stderr);
            return 2;
        }
        i++;
        if (strcmp(a, "--shape") == 0)
            continue;
        else if (strcmp(a, "--out") == 0)
            out = v;
        else if (strcmp(a, "--arch") == 0)
            p.arch = v;
        else if (strcmp(a, "--vocab") == 0)
            p.vocab = v;
        else if (strcmp(a, "--chat-template") == 0) {
            free(chat_template);
            size_t tlen;
            if (!(chat_template = hr_read_file(v, &tlen))) {
                fprintf(stderr, "gen-model: cannot read %s: %s\n", v, strerror(errno));
                return 2;
            }
            p.chat_template = chat_template;
        } else if (strcmp(a, "--name") == 0)
            p.name = v;
        else if (strcmp(a, "--type") == 0) {
            p.k_mix = strcmp(v, "q4_k_m") == 0 || strcmp(v, "q5_k_m") == 0;
            p.real_mix = strcmp(v, "q4_k_m_real") == 0;
            p.mxfp4_mix = strcmp(v, "mxfp4_real") == 0;
            bad = p.real_mix ? !hr_ggml_type_from_name("q4_k", &p.type)
                  : p.mxfp4_mix ? !hr_ggml_type_from_name("mxfp4", &p.type)
                  : p.k_mix ? !hr_ggml_type_from_name(strcmp(v, "q4_k_m") == 0 ? "q4_k" : "q5_k", &p.type)
                          : !hr_ggml_type_from_name(v, &p.type);
        }
        else if (strcmp(a, "--swa") == 0)
            bad = parse_u32(v, &p.n_swa);
        else if (strcmp(a, "--swa-pattern") == 0)
            bad = parse_u32(v, &p.swa_period);
        else if (strcmp(a, "--vocab-size") == 0)
            bad = parse_u32(v, &p.n_vocab);
        else if (strcmp(a, "--n-embd") == 0)
            bad = parse_u32(v, &p.n_embd);
        else if (strcmp(a, "--n-layer") == 0 || strcmp(a, "--layers") == 0)
            bad = parse_u32(v, &p.n_layer);
        else if (strcmp(a, "--n-expert") == 0)
            bad = parse_u32(v, &p.n_expert);
        else if (strcmp(a, "--n-expert-used") == 0)
            bad = parse_u32(v, &p.n_expert_used);
        else if (strcmp(a, "--n-ff-exp") == 0)
            bad = parse_u32(v, &p.n_ff_exp);
        else if (strcmp(a, "--n-ff-shexp") == 0)
            bad = parse_u32(v, &p.n_ff_shexp);
        else if (strcmp(a, "--n-head") == 0)
            bad = parse_u32(v, &p.n_head);
        else if (strcmp(a, "--n-head-kv") == 0)
            bad = parse_u32(v, &p.n_head_kv);
        else if (strcmp(a, "--head-dim") == 0)
            bad = parse_u32(v, &p.head_dim);
        else if (strcmp(a, "--n-ff") == 0)
            bad = parse_u32(v, &p.n_ff);
        else if (strcmp(a, "--n-rot") == 0)
            bad = parse_u32(v, &p.n_rot);
        else if (strcmp(a, "--ssm-k-heads") == 0)
            bad = parse_u32(v, &p.ssm_k_heads);
        else if (strcmp(a, "--ssm-v-heads") == 0)
            bad = parse_u32(v, &p.ssm_v_heads);
        else if (strcmp(a, "--ssm-head-dim") == 0)
            bad = parse_u32(v, &p.ssm_head_dim);
        else if (strcmp(a, "--full-attn-interval") == 0)
            bad = parse_u32(v, &p.full_attn_interval);
        else if (strcmp(a, "--ctx") == 0)
            bad = parse_u32(v, &p.n_ctx);
        else if (strcmp(a, "--rope-orig-ctx") == 0)
            bad = parse_u32(v, &p.rope_orig_ctx);
        else if (strcmp(a, "--rope-base") == 0)
            p.rope_base = strtof(v, NULL), bad = !(p.rope_base > 0);
        else if (strcmp(a, "--rope-factor") == 0)
            p.rope_factor = strtof(v, NULL), bad = !(p.rope_factor > 0);
        else if (strcmp(a, "--rms-eps") == 0)
            p.rms_eps = strtof(v, NULL), bad = !(p.rms_eps > 0);
        else if (strcmp(a, "--seed") == 0)
            p.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--rope-scaling") == 0) {
            if (strcmp(v, "none") == 0)
                p.rope_scaling = HR_GEN_ROPE_NONE;
            else if (strcmp(v, "linear") == 0)
                p.rope_scaling = HR_GEN_ROPE_LINEAR;
            else if (strcmp(v, "yarn") == 0)
                p.rope_scaling = HR_GEN_ROPE_YARN;
            else if (strcmp(v, "llama3") == 0)
                p.rope_scaling = HR_GEN_ROPE_LLAMA3;
            else
                bad = 1;
        } else {
            fprintf(stderr, "gen-model: unknown flag %s\n", a);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "gen-model: bad value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    if (!out) {
        fprintf(stderr, "gen-model: --out FILE is required\n");
        usage(stderr);
        return 2;
    }
    p.progress = true; /* a line a second for models that take longer than one */
    enum hr_status st = hr_gen_model(&p, out, &err);
    free(chat_template);
    if (st != HR_OK) {
        fprintf(stderr, "gen-model: %s\n", err.msg);
        return 1;
    }
    return 0;
}
