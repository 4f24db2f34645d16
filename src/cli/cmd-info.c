/*
 * cmd-info.c - `headroom info FILE [--json]`: what a GGUF file holds.
 *
 * The file is parsed and validated in full (see gguf.h), so `info` is also
 * the quickest way to ask "is this download intact?": a bad file gives one
 * line naming the problem and exit code 1. A valid GGUF whose architecture
 * we do not describe still prints its generic facts plus a note.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "gguf/gguf.h"
#include "model/hparams.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: headroom info FILE [--json]\n\n"
               "Describes a GGUF model: architecture, parameter count, context length, layers,\n"
               "heads, head dim, FFN size, RoPE, vocabulary and tokenizer, special token ids,\n"
               "chat template, tensors by type and file size. The whole file is validated.\n\n"
               "  --json   one JSON object instead of text\n\n"
               "example: headroom info models/demo.gguf\n");
}

struct special {
    const char *label;
    const char *key;
};

static const struct special g_special[] = {
    {"bos", "tokenizer.ggml.bos_token_id"},     {"eos", "tokenizer.ggml.eos_token_id"},
    {"eot", "tokenizer.ggml.eot_token_id"},     {"eom", "tokenizer.ggml.eom_token_id"},
    {"pad", "tokenizer.ggml.padding_token_id"}, {"unk", "tokenizer.ggml.unknown_token_id"},
};

/* Sums elements and counts tensors per type. */
static uint64_t count_tensors(const struct hr_gguf *g, uint64_t by_type[HR_GGML_TYPE_COUNT])
{
    uint64_t params = 0;
    memset(by_type, 0, sizeof(uint64_t) * HR_GGML_TYPE_COUNT);
    for (uint64_t i = 0; i < hr_gguf_n_tensors(g); i++) {
        const struct hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        params += t->n_elems;
        by_type[t->type]++;
    }
    return params;
}

static json_t *json_str(struct hr_gguf_str s)
{
    return json_stringn_nocheck(s.ptr, (size_t)s.len);
}

static int print_json(const char *path, const struct hr_gguf *g, const struct hr_hparams *hp,
                      const char *hp_error)
{
    uint64_t by_type[HR_GGML_TYPE_COUNT];
    uint64_t params = count_tensors(g, by_type);
    json_t *o = json_object();
    json_object_set_new(o, "file", json_string(path));
    json_object_set_new(o, "file_size_bytes", json_integer((json_int_t)hr_gguf_file_size(g)));
    json_object_set_new(o, "gguf_version", json_integer(hr_gguf_version(g)));
    json_object_set_new(o, "n_metadata", json_integer((json_int_t)hr_gguf_n_kv(g)));
    json_object_set_new(o, "n_tensors", json_integer((json_int_t)hr_gguf_n_tensors(g)));
    json_object_set_new(o, "n_params", json_integer((json_int_t)params));
    struct hr_gguf_str s;
    json_object_set_new(o, "name", hr_gguf_get_str(g, "general.name", &s, NULL) == HR_OK
                                       ? json_str(s) : json_null());
    if (hp_error) {
        json_object_set_new(o, "architecture_error", json_string(hp_error));
    } else {
        json_object_set_new(o, "architecture", json_string(hp->arch));
        json_object_set_new(o, "context_length", json_integer(hp->n_ctx_train));
        json_object_set_new(o, "n_layer", json_integer(hp->n_layer));
        json_object_set_new(o, "n_embd", json_integer(hp->n_embd));
        json_object_set_new(o, "n_head", json_integer(hp->n_head));
        json_object_set_new(o, "n_head_kv", json_integer(hp->n_head_kv));
        json_object_set_new(o, "head_dim", json_integer(hp->head_dim_k));
        json_object_set_new(o, "n_ff", json_integer(hp->n_ff));
        if (hp->n_expert) {
            uint64_t total, active;
            hr_hparams_count_params(g, hp, &total, &active);
            json_object_set_new(o, "n_expert", json_integer(hp->n_expert));
            json_object_set_new(o, "n_expert_used", json_integer(hp->n_expert_used));
            json_object_set_new(o, "n_ff_exp", json_integer(hp->n_ff_exp ? hp->n_ff_exp
                                                                           : hp->n_ff));
            if (hp->n_ff_shexp)
                json_object_set_new(o, "n_ff_shexp", json_integer(hp->n_ff_shexp));
            json_object_set_new(o, "n_params_active", json_integer((json_int_t)active));
        }
        json_object_set_new(o, "rms_eps", json_real(hp->rms_eps));
        json_object_set_new(o, "rope_base", json_real(hp->rope_base));
        json_object_set_new(o, "rope_scaling", json_string(hr_rope_scaling_name(hp->rope_scaling)));
        json_object_set_new(o, "rope_scaling_factor", json_real(hp->rope_factor));
        if (hp->n_swa)
            json_object_set_new(o, "sliding_window", json_integer(hp->n_swa));
        json_object_set_new(o, "tied_output", json_boolean(hp->tied_output));
        json_object_set_new(o, "n_vocab", json_integer(hp->n_vocab));
    }
    json_object_set_new(o, "tokenizer_model",
                        hr_gguf_get_str(g, "tokenizer.ggml.model", &s, NULL) == HR_OK
                            ? json_str(s) : json_null());
    json_object_set_new(o, "tokenizer_pre", hr_gguf_get_str(g, "tokenizer.ggml.pre", &s, NULL) ==
                                                    HR_OK ? json_str(s) : json_null());
    json_t *sp = json_object();
    for (size_t i = 0; i < sizeof(g_special) / sizeof(g_special[0]); i++) {
        uint32_t id;
        if (hr_gguf_get_u32(g, g_special[i].key, &id, NULL) == HR_OK)
            json_object_set_new(sp, g_special[i].label, json_integer(id));
    }
    json_object_set_new(o, "special_token_ids", sp);
    json_object_set_new(o, "chat_template",
                        json_boolean(hr_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) ==
                                     HR_OK));
    json_t *types = json_object();
    for (uint32_t t = 0; t < HR_GGML_TYPE_COUNT; t++)
        if (by_type[t])
            json_object_set_new(types, hr_ggml_type_name(t), json_integer((json_int_t)by_type[t]));
    json_object_set_new(o, "tensors_by_type", types);
    char *text = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
    json_decref(o);
    if (!text)
        return 1;
    printf("%s\n", text);
    free(text);
    return 0;
}

static void print_text(const char *path, const struct hr_gguf *g, const struct hr_hparams *hp,
                       const char *hp_error)
{
    uint64_t by_type[HR_GGML_TYPE_COUNT];
    uint64_t params = count_tensors(g, by_type);
    char b1[32];
    struct hr_gguf_str s;
    printf("file           %s (%s, GGUF v%u, %" PRIu64 " tensors, %" PRIu64 " metadata keys)\n",
           path, hr_cli_fmt_bytes((double)hr_gguf_file_size(g), b1, sizeof(b1)),
           hr_gguf_version(g), hr_gguf_n_tensors(g), hr_gguf_n_kv(g));
    if (hr_gguf_get_str(g, "general.name", &s, NULL) == HR_OK)
        printf("name           %.*s\n", (int)(s.len > 200 ? 200 : s.len), s.ptr);
    printf("parameters     %.2f M (%" PRIu64 ")\n", (double)params / 1e6, params);
    if (hp_error) {
        printf("architecture   not described: %s\n", hp_error);
    } else {
        printf("architecture   %s\n", hp->arch);
        printf("context        %u tokens (trained)\n", hp->n_ctx_train);
        printf("layers         %u\n", hp->n_layer);
        if (hp->ssm_dt_rank && hp->ssm_n_group && hp->ssm_d_state) {
            /* hybrid (qwen35*, qwen3next): which layers are Gated DeltaNet,
             * and the recurrent state one sequence holds */
            uint32_t n_rec = 0;
            const uint32_t every = hp->full_attn_interval ? hp->full_attn_interval : 4;
            for (uint32_t l = 0; l < hp->n_layer; l++)
                n_rec += hp->has_recurrent_layers
                             ? (l < 256 && (hp->recurrent_layers[l / 64] >> (l % 64)) & 1)
                             : (l + 1) % every != 0;
            const uint64_t conv = (uint64_t)(hp->ssm_d_conv ? hp->ssm_d_conv - 1 : 0) *
                                  (2ull * hp->ssm_n_group * hp->ssm_d_state + hp->ssm_d_inner);
            const uint64_t per_layer = conv + (uint64_t)hp->ssm_d_inner * hp->ssm_d_state;
            printf("deltanet       %u of the layers (%u q/k heads, %u v heads of %u); state %.1f "
                   "MiB per sequence\n", n_rec, hp->ssm_n_group, hp->ssm_dt_rank, hp->ssm_d_state,
                   (double)(n_rec * per_layer * 4) / 1048576.0);
        }
        printf("embedding      %u\n", hp->n_embd);
        printf("heads          %u query, %u KV (%s), head dim %u\n", hp->n_head, hp->n_head_kv,
               hp->n_head_kv == hp->n_head ? "MHA" : hp->n_head_kv == 1 ? "MQA" : "GQA",
               hp->head_dim_k);
        printf("ffn            %u\n", hp->n_ff);
        if (hp->n_expert) {
            uint64_t total, active;
            hr_hparams_count_params(g, hp, &total, &active);
            printf("experts        %u, %u active per token, expert ffn %u", hp->n_expert,
                   hp->n_expert_used, hp->n_ff_exp ? hp->n_ff_exp : hp->n_ff);
            if (hp->n_ff_shexp)
                printf(", shared expert ffn %u", hp->n_ff_shexp);
            printf("\nactive params  %.2f M per token (%" PRIu64 ", %.1f%% of all)\n",
                   (double)active / 1e6, active, total ? 100.0 * (double)active / (double)total : 0);
        }
        printf("rope           base %g, scaling %s", hp->rope_base,
               hr_rope_scaling_name(hp->rope_scaling));
        if (hp->rope_scaling != HR_ROPE_SCALING_NONE && hp->rope_scaling != HR_ROPE_SCALING_LLAMA3)
            printf(" x%g", hp->rope_factor);
        if (hp->rope_scaling == HR_ROPE_SCALING_YARN)
            printf(" over %u", hp->rope_orig_ctx);
        if (hp->n_swa)
            printf("\nwindow         %u tokens (sliding-window layers)", hp->n_swa);
        printf("\nrms eps        %g\n", hp->rms_eps);
        printf("output         %s\n", hp->tied_output ? "tied to token_embd" : "own matrix");
        printf("vocab          %u tokens", hp->n_vocab);
    }
    if (hr_gguf_get_str(g, "tokenizer.ggml.model", &s, NULL) == HR_OK) {
        printf(", tokenizer %.*s", (int)(s.len > 32 ? 32 : s.len), s.ptr);
        if (hr_gguf_get_str(g, "tokenizer.ggml.pre", &s, NULL) == HR_OK)
            printf(" / pre %.*s", (int)(s.len > 32 ? 32 : s.len), s.ptr);
    }
    printf("\nspecial ids   ");
    int any = 0;
    for (size_t i = 0; i < sizeof(g_special) / sizeof(g_special[0]); i++) {
        uint32_t id;
        if (hr_gguf_get_u32(g, g_special[i].key, &id, NULL) == HR_OK) {
            printf(" %s %u", g_special[i].label, id);
            any = 1;
        }
    }
    printf("%s\n", any ? "" : " none");
    if (hr_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) == HR_OK)
        printf("chat template  yes (%" PRIu64 " bytes)\n", s.len);
    else
        printf("chat template  no\n");
    printf("tensors       ");
    for (uint32_t t = 0; t < HR_GGML_TYPE_COUNT; t++)
        if (by_type[t])
            printf(" %s: %" PRIu64, hr_ggml_type_name(t), by_type[t]);
    printf("\n");
}

int hr_cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    int json = 0;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            fprintf(stderr, "headroom info: unknown option %s\n", argv[i]);
            usage(stderr);
            return 2;
        } else if (!path) {
            path = argv[i];
        } else {
            fprintf(stderr, "headroom info: one file at a time (got '%s' and '%s')\n", path,
                    argv[i]);
            return 2;
        }
    }
    if (!path) {
        usage(stderr);
        return 2;
    }
    struct hr_err err = {{0}};
    struct hr_gguf *g = NULL;
    if (hr_gguf_open(path, &g, &err) != HR_OK) {
        fprintf(stderr, "headroom info: %s: %s\n", path, err.msg);
        return 1;
    }
    struct hr_hparams hp;
    struct hr_err hp_err = {{0}};
    const char *hp_error = hr_hparams_read(g, &hp, &hp_err) == HR_OK ? NULL : hp_err.msg;
    int rc = 0;
    if (json)
        rc = print_json(path, g, &hp, hp_error);
    else
        print_text(path, g, &hp, hp_error);
    hr_gguf_close(g);
    return rc;
}
