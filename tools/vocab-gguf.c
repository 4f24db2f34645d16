/*
 * vocab-gguf.c - writes a vocabulary-only GGUF from a Hugging Face tokenizer.
 *
 *     vocab-gguf DIR|builtin OUT.gguf [--arch llama|qwen2|qwen3]
 *
 * A development driver for tools/lib/hf-vocab.c: the file holds the
 * tokenizer.* keys plus the few architecture hyperparameters llama.cpp reads
 * before it looks at tensors, and no tensors, so llama.cpp can open it with
 * vocab_only and tokenize (tests/oracle/vocab-check.mjs does). The
 * hyperparameters are small made-up values; only vocab_size is real.
 */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "gguf/gguf.h"
#include "hf-vocab.h"

static int usage(void)
{
    fprintf(stderr, "usage: vocab-gguf DIR|builtin OUT.gguf [--arch llama|qwen2|qwen3]\n"
                    "  DIR holds tokenizer.json and optionally tokenizer_config.json\n");
    return 2;
}

static enum hr_status write_hparams(struct hr_gguf_writer *w, const char *arch, uint32_t n_vocab,
                                    struct hr_err *err)
{
    char key[128];
    enum hr_status st = HR_OK;
#define U32(name, value)                                                                           \
    do {                                                                                           \
        snprintf(key, sizeof(key), "%s.%s", arch, name);                                           \
        if (st == HR_OK)                                                                           \
            st = hr_gguf_writer_set_u32(w, key, value);                                            \
    } while (0)
    st = hr_gguf_writer_set_str(w, "general.architecture", arch);
    if (st == HR_OK)
        st = hr_gguf_writer_set_str(w, "general.name", "vocab-gguf");
    U32("context_length", 4096);
    U32("embedding_length", 64);
    U32("block_count", 1);
    U32("feed_forward_length", 128);
    U32("attention.head_count", 4);
    U32("attention.head_count_kv", 4);
    U32("rope.dimension_count", 16);
    U32("vocab_size", n_vocab);
#undef U32
    snprintf(key, sizeof(key), "%s.attention.layer_norm_rms_epsilon", arch);
    if (st == HR_OK)
        st = hr_gguf_writer_set_f32(w, key, 1e-6f);
    snprintf(key, sizeof(key), "%s.rope.freq_base", arch);
    if (st == HR_OK)
        st = hr_gguf_writer_set_f32(w, key, 10000.0f);
    if (st != HR_OK)
        return hr_err_set(err, st, "writing %s hyperparameters: %s", arch, hr_status_str(st));
    return HR_OK;
}

int main(int argc, char **argv)
{
    const char *dir = NULL, *out = NULL, *arch = "llama";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--arch") == 0 && i + 1 < argc) {
            arch = argv[++i];
            if (strcmp(arch, "llama") != 0 && strcmp(arch, "qwen2") != 0 &&
                strcmp(arch, "qwen3") != 0) {
                fprintf(stderr, "vocab-gguf: --arch %s: expected llama, qwen2 or qwen3\n", arch);
                return 2;
            }
        } else if (argv[i][0] == '-' && argv[i][1] != '\0') {
            return usage();
        } else if (!dir) {
            dir = argv[i];
        } else if (!out) {
            out = argv[i];
        } else {
            return usage();
        }
    }
    if (!dir || !out)
        return usage();

    struct hr_err err = {{0}};
    struct hr_hf_vocab *v = NULL;
    struct hr_gguf_writer *w = NULL;
    enum hr_status st = strcmp(dir, "builtin") == 0 ? hr_hf_vocab_builtin(&v, &err)
                                                    : hr_hf_vocab_load(dir, &v, &err);
    if (st != HR_OK)
        goto fail;
    if (!(w = hr_gguf_writer_init())) {
        st = hr_err_set(&err, HR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if ((st = write_hparams(w, arch, hr_hf_vocab_n_tokens(v), &err)) != HR_OK)
        goto fail;
    if ((st = hr_hf_vocab_write(v, w, &err)) != HR_OK)
        goto fail;
    if ((st = hr_gguf_writer_write_file(w, out, &err)) != HR_OK)
        goto fail;
    printf("%s: %u tokens, model %s, pre %s, %u merges\n", out, hr_hf_vocab_n_tokens(v),
           hr_hf_vocab_model(v), hr_hf_vocab_pre(v), hr_hf_vocab_n_merges(v));
    hr_gguf_writer_free(w);
    hr_hf_vocab_free(v);
    return 0;
fail:
    fprintf(stderr, "vocab-gguf: %s (%s)\n", err.msg, hr_status_str(st));
    hr_gguf_writer_free(w);
    hr_hf_vocab_free(v);
    return 1;
}
