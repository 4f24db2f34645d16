/*
 * fuzz-tokenizer.c - libFuzzer target for the tokenizer (src/tokenizer).
 *
 * Fuzz inputs are bytes, but a tokenizer needs a vocabulary, so the first
 * call builds small ones in-process with the GGUF writer: a byte-level BPE
 * vocabulary (all 256 byte tokens in GPT-2 spelling, a few dozen merges
 * including ones whose result or sides are not tokens, control and
 * user-defined tokens) once per pre-tokenizer family, and a SentencePiece
 * vocabulary (byte tokens, scored pieces, a control token, user-defined
 * whitespace tokens).
 *
 * The first input byte chooses what to do with the rest:
 *   bits 0-3  the vocabulary (index modulo the number built);
 *   bit 4     HR_TOK_PARSE_SPECIAL;
 *   bit 5     HR_TOK_ADD_SPECIAL;
 *   bit 6     HR_DETOK_SPECIAL for decoding;
 *   bit 7     the rest is not text but a GGUF file: load it as a vocabulary
 *             and, if that works, tokenize and decode a fixed text with it.
 *
 * Checked (abort() on failure, besides ASan/UBSan): encoding fails only
 * with HR_ERR_INVALID for a code point above U+10FFFF in byte-level BPE;
 * every id is in range; the streaming detokenizer, fed one id at a time,
 * emits valid UTF-8 that equals the whole decode with invalid UTF-8
 * replaced (with and without HR_DETOK_PIECES); and, for byte-level
 * vocabularies and text that is valid UTF-8, decoding the pieces gives the
 * text back.
 *
 * Built with -fsanitize=fuzzer in the fuzz preset; otherwise linked with
 * replay-main.c so `make test` replays tests/fuzz/corpus/tokenizer/ and
 * every kept input in tests/fuzz/crashes/tokenizer/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

/* ---- vocabularies ---- */

static const char *const g_pres[] = {"qwen2", "llama-bpe", "smaug-bpe", "gpt-2", "starcoder",
                                     "deepseek-llm", "deepseek-coder", "tekken", "default",
                                     "qwen35"};
enum { N_BPE = sizeof(g_pres) / sizeof(g_pres[0]), N_VOCABS = N_BPE + 1 };

static struct hr_tokenizer *g_tok[N_VOCABS];

/* GPT-2 spelling of a byte string, into out (NUL-terminated). */
static void spell(const char *s, char *out)
{
    size_t k = 0;
    for (; *s; s++)
        k += hr_utf8_encode(hr_gpt2_byte_to_cp((uint8_t)*s), (uint8_t *)out + k);
    out[k] = '\0';
}

/* Merges as raw byte strings "left right"; spelled at build time. The last
 * ones have a result that is no token, or sides that are no tokens. */
static const char *const g_merges[][2] = {
    {"t", "h"},    {"th", "e"},   {" ", "t"},      {" t", "he"},   {"i", "n"},  {"in", "g"},
    {"e", "r"},    {"o", "n"},    {" ", "a"},      {"a", "n"},     {"an", "d"}, {" a", "nd"},
    {"r", "e"},    {" ", "i"},    {" i", "n"},     {" ", " "},     {"  ", "  "}, {"\n", "\n"},
    {"e", "s"},    {"o", "r"},    {"'", "s"},      {"1", "2"},     {"12", "3"},  {"\xc3", "\xa9"},
    {"\xe2\x96", "\x81"}, {"<", "|"}, {"|", ">"}, {"q", "z"},       {"qz", "qz"}, {"x", "yy"},
};
/* Merge results that are not tokens: "qz" (so "qzqz" can never form). */
static bool merge_is_token(const char *l, const char *r)
{
    return !(strcmp(l, "q") == 0 && strcmp(r, "z") == 0) && strcmp(r, "yy") != 0;
}

static struct hr_tokenizer *load(struct hr_gguf_writer *w)
{
    void *buf;
    size_t size;
    struct hr_err err;
    check(hr_gguf_writer_write_mem(w, &buf, &size, &err) == HR_OK);
    struct hr_gguf *g = NULL;
    check(hr_gguf_parse(buf, size, &g, &err) == HR_OK);
    struct hr_tokenizer *tok = NULL;
    if (hr_tokenizer_init_from_gguf(g, &tok, &err) != HR_OK) {
        fprintf(stderr, "fuzz-tokenizer: %s\n", err.msg);
        abort();
    }
    hr_gguf_close(g);
    free(buf);
    hr_gguf_writer_free(w);
    return tok;
}

static struct hr_tokenizer *build_bpe(const char *pre)
{
    enum { N_MERGES = sizeof(g_merges) / sizeof(g_merges[0]) };
    static const char *const specials[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>",
                                           "<think>", "</think>", "<|eot|>"};
    static const int32_t special_types[] = {3, 3, 3, 4, 4, 3};
    enum { N_SPECIAL = 6, N_MAX = 256 + N_MERGES + N_SPECIAL };
    static char texts[N_MAX][32];
    static char merges[N_MERGES][64];
    const char *tp[N_MAX], *mp[N_MERGES];
    int32_t types[N_MAX];
    size_t n = 0;
    for (int b = 0; b < 256; b++) {
        char s[2] = {(char)b, 0};
        if (b == 0) { /* NUL cannot go through spell(); its spelling is U+0100 */
            hr_utf8_encode(hr_gpt2_byte_to_cp(0), (uint8_t *)texts[n]);
            texts[n][2] = '\0';
        } else {
            spell(s, texts[n]);
        }
        types[n++] = 1;
    }
    for (size_t i = 0; i < N_MERGES; i++) {
        char l[16], r[16];
        spell(g_merges[i][0], l);
        spell(g_merges[i][1], r);
        snprintf(merges[i], sizeof(merges[i]), "%s %s", l, r);
        mp[i] = merges[i];
        if (merge_is_token(g_merges[i][0], g_merges[i][1])) {
            snprintf(texts[n], sizeof(texts[n]), "%s%s", l, r);
            types[n++] = 1;
        }
    }
    for (size_t i = 0; i < N_SPECIAL; i++) {
        snprintf(texts[n], sizeof(texts[n]), "%s", specials[i]);
        types[n++] = special_types[i];
    }
    for (size_t i = 0; i < n; i++)
        tp[i] = texts[i];
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    check(w != NULL);
    hr_gguf_writer_set_str(w, "general.architecture", "llama");
    hr_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    hr_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    hr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tp, n);
    hr_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", HR_GGUF_INT32, types, n);
    hr_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", mp, N_MERGES);
    hr_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)n - N_SPECIAL);
    hr_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)n - N_SPECIAL + 2);
    hr_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", true);
    return load(w);
}

static struct hr_tokenizer *build_spm(void)
{
    static const char *const pieces[] = {
        "\xe2\x96\x81", "\xe2\x96\x81t", "\xe2\x96\x81th", "\xe2\x96\x81the", "he", "in", "ing",
        "\xe2\x96\x81\xe2\x96\x81", "\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81\xe2\x96\x81",
        "\xe2\x96\x81" "a", "an", "and", "\xe2\x96\x81" "and", "a", "t", "h", "e", "n", "d", "g",
        "i", "<ctrl>", "<ud>", "\n\n", "  ", "\xc3\xa9", "\xe6\x97\xa5"};
    enum { N_PIECES = sizeof(pieces) / sizeof(pieces[0]), N = 3 + 256 + N_PIECES };
    static char bytes[256][8];
    const char *tp[N];
    float scores[N];
    int32_t types[N];
    tp[0] = "<unk>", tp[1] = "<s>", tp[2] = "</s>";
    types[0] = 2, types[1] = 3, types[2] = 3;
    scores[0] = scores[1] = scores[2] = 0;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], sizeof(bytes[b]), "<0x%02X>", b);
        tp[3 + b] = bytes[b];
        types[3 + b] = 6;
        scores[3 + b] = 0;
    }
    for (int i = 0; i < N_PIECES; i++) {
        tp[259 + i] = pieces[i];
        scores[259 + i] = -(float)(i % 7) - 0.25f * (float)(i % 3);
        types[259 + i] = strcmp(pieces[i], "<ctrl>") == 0 ? 3
                         : (strcmp(pieces[i], "<ud>") == 0 || pieces[i][0] == '\n' ||
                            pieces[i][0] == ' ')
                             ? 4
                             : 1;
    }
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    check(w != NULL);
    hr_gguf_writer_set_str(w, "general.architecture", "llama");
    hr_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    hr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", tp, N);
    hr_gguf_writer_set_arr(w, "tokenizer.ggml.scores", HR_GGUF_FLOAT32, scores, N);
    hr_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", HR_GGUF_INT32, types, N);
    return load(w);
}

static void init_once(void)
{
    if (g_tok[0])
        return;
    hr_log_set_level(HR_LOG_ERROR); /* loader-mode inputs warn a lot */
    for (size_t i = 0; i < N_BPE; i++)
        g_tok[i] = build_bpe(g_pres[i]);
    g_tok[N_BPE] = build_spm();
}

/* ---- checks ---- */

static bool strictly_valid(const uint8_t *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t l;
        if (hr_utf8_next(s + i, n - i, &l) != HR_UTF8_OK)
            return false;
        i += l;
    }
    return true;
}

static void exercise(const struct hr_tokenizer *tok, const uint8_t *text, size_t len,
                     unsigned enc_flags, unsigned dec_flags, bool round_trip)
{
    struct hr_tokens t = {0};
    struct hr_err err;
    enum hr_status st = hr_tokenizer_encode(tok, (const char *)text, len, enc_flags, &t, &err);
    if (st != HR_OK) {
        check(st == HR_ERR_INVALID && strcmp(hr_tokenizer_model(tok), "gpt2") == 0 &&
              strstr(err.msg, "above U+10FFFF") != NULL && t.n == 0);
        hr_tokens_free(&t);
        return;
    }
    uint32_t n_vocab = hr_tokenizer_n_vocab(tok);
    for (size_t i = 0; i < t.n; i++)
        check(t.ids[i] >= 0 && (uint32_t)t.ids[i] < n_vocab);

    char *raw, *clean;
    size_t raw_len, clean_len;
    for (int pass = 0; pass < 2; pass++) {
        unsigned f = dec_flags | (pass ? HR_DETOK_PIECES : 0);
        check(hr_tokenizer_decode(tok, t.ids, t.n, f, &raw, &raw_len, &err) == HR_OK);
        check(hr_utf8_sanitize(raw, raw_len, &clean, &clean_len, &err) == HR_OK);
        check(strictly_valid((const uint8_t *)clean, clean_len));
        if (round_trip && pass == 1)
            check(raw_len == len && memcmp(raw, text, len) == 0);

        struct hr_detok *d;
        check(hr_detok_init(tok, f, &d, &err) == HR_OK);
        size_t k = 0;
        for (size_t i = 0; i <= t.n; i++) {
            const char *p;
            size_t pl;
            check((i < t.n ? hr_detok_push(d, t.ids[i], &p, &pl, &err)
                           : hr_detok_finish(d, &p, &pl, &err)) == HR_OK);
            check(strictly_valid((const uint8_t *)p, pl));
            check(k + pl <= clean_len && memcmp(clean + k, p, pl) == 0);
            k += pl;
        }
        check(k == clean_len);
        hr_detok_free(d);
        free(raw);
        free(clean);
    }

    /* Decoding ids that are not a tokenization must hold up too. */
    int32_t odd[4] = {-1, (int32_t)n_vocab, t.n ? t.ids[0] : 0, INT32_MAX};
    check(hr_tokenizer_decode(tok, odd, 4, dec_flags, &raw, &raw_len, &err) == HR_OK);
    free(raw);
    hr_tokens_free(&t);
}

/* Bit 7: the input is a vocabulary. */
static void fuzz_vocab(const uint8_t *data, size_t size, unsigned flags)
{
    struct hr_gguf *g = NULL;
    struct hr_err err;
    if (hr_gguf_parse(data, size, &g, &err) != HR_OK)
        return;
    struct hr_tokenizer *tok = NULL;
    if (hr_tokenizer_init_from_gguf(g, &tok, &err) == HR_OK) {
        static const char text[] = "Hello wörld <|im_start|> 123 \xff\xfe  \n\n<think>日本";
        exercise(tok, (const uint8_t *)text, sizeof(text) - 1, flags & 0x30 ? HR_TOK_PARSE_SPECIAL : 0,
                 HR_DETOK_SPECIAL, false);
        char *out;
        size_t n;
        int32_t ids[3] = {0, 1, (int32_t)hr_tokenizer_n_vocab(tok) - 1};
        check(hr_tokenizer_decode(tok, ids, 3, HR_DETOK_SPECIAL, &out, &n, &err) == HR_OK);
        free(out);
        hr_tokenizer_free(tok);
    }
    hr_gguf_close(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    init_once();
    unsigned flags = data[0];
    data++, size--;
    if (flags & 0x80) {
        fuzz_vocab(data, size, flags);
        return 0;
    }
    size_t v = (flags & 0x0F) % N_VOCABS;
    const struct hr_tokenizer *tok = g_tok[v];
    unsigned enc = ((flags & 0x10) ? HR_TOK_PARSE_SPECIAL : 0) | ((flags & 0x20) ? HR_TOK_ADD_SPECIAL : 0);
    unsigned dec = (flags & 0x40) ? HR_DETOK_SPECIAL : 0;
    /* Byte-level BPE with every byte a token round-trips valid UTF-8 exactly
     * when decoded as plain pieces (HR_DETOK_PIECES: no clean-up of spaces),
     * unless special parsing takes control tokens out (they decode to nothing
     * without HR_DETOK_SPECIAL) or BOS/EOS are added. */
    bool round_trip = v < N_BPE && !(enc & HR_TOK_ADD_SPECIAL) &&
                      ((dec & HR_DETOK_SPECIAL) || !(enc & HR_TOK_PARSE_SPECIAL)) &&
                      strictly_valid(data, size);
    exercise(tok, data, size, enc, dec, round_trip);
    return 0;
}
