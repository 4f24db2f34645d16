/*
 * vocab.c - builds a struct hr_tokenizer from a GGUF's tokenizer.* keys.
 *
 * The steps follow llama.cpp's llama_vocab::impl::load (llama-vocab.cpp in
 * the version node-llama-cpp 3.21.1 bundles) in order, because several of
 * them depend on the ones before:
 *
 *   1. model and pre-tokenizer names -> type, split steps, the per-family
 *      defaults (default BOS/EOS ids, add_bos, clean_spaces, ignore_merges);
 *   2. tokens, scores, token types -> attributes; an empty text becomes
 *      "[EMPTY_<id>]"; merges -> (left, right) -> rank;
 *   3. special ids from the file (an id out of range keeps the default);
 *      add_bos/add_eos/add_space_prefix from the file;
 *   4. llama.cpp's fix-ups by token text: the first "<|eot_id|>"-like token
 *      becomes EOT (and CONTROL), likewise EOM and the FIM tokens; control
 *      tokens named "*unused*" become UNUSED; every end-of-generation text
 *      is forced to CONTROL and into the EOG set; gpt-oss's channel tokens
 *      become USER_DEFINED; "<|end|>" and "</s>" leave the EOG set in the
 *      two vocabularies where llama.cpp says so;
 *   5. the special-token list (control, user-defined, unknown; longest
 *      first) and the decoded pieces, then LSTRIP/RSTRIP by model name;
 *   6. the newline token, which needs a working tokenizer.
 *
 * "The first token" in step 4 means first in the iteration order of
 * llama.cpp's std::unordered_map<std::string, int> token_to_id, which
 * decides, e.g., whether Qwen's EOT is "<|im_end|>" or "<|endoftext|>" (it
 * is "<|im_end|>" for Qwen 3 but "<|endoftext|>" for our built-in
 * vocabulary). We reproduce that order (stl_map_order below): libstdc++'s
 * string hash and its bucket growth are fixed, so the order is a function of
 * the token list. It is computed only when a choice exists.
 *
 * Cost: one hash insertion per token and merge; about 0.1 s for a
 * 150k-token, 150k-merge vocabulary.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer-impl.h"
#include "tokenizer/unicode.h"

/* ------------------------------------------------------------------------ */
/* Hashing and the string table                                             */
/* ------------------------------------------------------------------------ */

/* A multiply-xorshift hash over 8-byte words: token texts are short, so the
 * per-call constant matters more than the per-byte rate. */
uint32_t hr_tok_hash(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xFF51AFD7ED558CCDull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
        s += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = 0;
        memcpy(&v, s, n);
        h = (h ^ v) * 0xC4CEB9FE1A85EC53ull;
    }
    h ^= h >> 32;
    h *= 0xFF51AFD7ED558CCDull;
    h ^= h >> 29;
    return (uint32_t)h;
}

int32_t hr_strtab_find(const struct hr_strtab *t, const void *s, size_t n, uint32_t hash)
{
    if (!t->slots)
        return -1;
    for (uint32_t i = hash & t->mask;; i = (i + 1) & t->mask) {
        struct hr_strtab_slot v = t->slots[i];
        if (v.sid1 == 0)
            return -1;
        uint32_t sid = v.sid1 - 1;
        if (v.hash == hash && t->len[sid] == n && memcmp(t->blob + t->off[sid], s, n) == 0)
            return (int32_t)sid;
    }
}

static enum hr_status strtab_grow_index(struct hr_strtab *t)
{
    uint32_t cap = t->mask ? (t->mask + 1) * 2 : 1024;
    struct hr_strtab_slot *slots = calloc(cap, sizeof(*slots));
    if (!slots)
        return HR_ERR_NOMEM;
    for (uint32_t sid = 0; sid < t->n; sid++) {
        uint32_t i = t->hash[sid] & (cap - 1);
        while (slots[i].sid1)
            i = (i + 1) & (cap - 1);
        slots[i] = (struct hr_strtab_slot){t->hash[sid], sid + 1};
    }
    free(t->slots);
    t->slots = slots;
    t->mask = cap - 1;
    return HR_OK;
}

/* The sid of s[0..n), adding it if new. -1 on allocation failure. */
static int32_t strtab_intern(struct hr_strtab *t, const void *s, size_t n)
{
    uint32_t h = hr_tok_hash(s, n);
    int32_t found = hr_strtab_find(t, s, n, h);
    if (found >= 0)
        return found;
    if (t->n >= INT32_MAX - 1 || n > UINT32_MAX)
        return -1;
    if (t->n == t->cap) {
        uint32_t cap = t->cap ? t->cap * 2 : 1024;
        uint64_t *off = realloc(t->off, (size_t)cap * sizeof(*off));
        if (off)
            t->off = off;
        uint32_t *len = realloc(t->len, (size_t)cap * sizeof(*len));
        if (len)
            t->len = len;
        uint32_t *hash = realloc(t->hash, (size_t)cap * sizeof(*hash));
        if (hash)
            t->hash = hash;
        if (!off || !len || !hash)
            return -1;
        t->cap = cap;
    }
    if (t->blob_len + n + 1 > t->blob_cap) {
        size_t cap = t->blob_cap ? t->blob_cap : 65536;
        while (cap < t->blob_len + n + 1)
            cap *= 2;
        char *blob = realloc(t->blob, cap);
        if (!blob)
            return -1;
        t->blob = blob;
        t->blob_cap = cap;
    }
    /* Keep the load factor at or below one half. */
    if ((uint64_t)(t->n + 1) * 2 > (uint64_t)t->mask + 1 && strtab_grow_index(t) != HR_OK)
        return -1;
    uint32_t sid = t->n++;
    memcpy(t->blob + t->blob_len, s, n);
    t->blob[t->blob_len + n] = '\0'; /* so a text can be used as a C string where safe */
    t->off[sid] = t->blob_len;
    t->len[sid] = (uint32_t)n;
    t->hash[sid] = h;
    t->blob_len += n + 1;
    uint32_t i = h & t->mask;
    while (t->slots[i].sid1)
        i = (i + 1) & t->mask;
    t->slots[i] = (struct hr_strtab_slot){h, sid + 1};
    return (int32_t)sid;
}

static void strtab_free(struct hr_strtab *t)
{
    free(t->blob);
    free(t->off);
    free(t->len);
    free(t->hash);
    free(t->slots);
    memset(t, 0, sizeof(*t));
}

int32_t hr_vocab_text_to_token(const struct hr_tokenizer *tok, const void *s, size_t n)
{
    int32_t sid = hr_strtab_find(&tok->strs, s, n, hr_tok_hash(s, n));
    return sid < 0 ? -1 : tok->sid_token[sid];
}

enum hr_status hr_tokens_push(struct hr_tokens *t, int32_t id)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        int32_t *ids = realloc(t->ids, cap * sizeof(*ids));
        if (!ids)
            return HR_ERR_NOMEM;
        t->ids = ids;
        t->cap = cap;
    }
    t->ids[t->n++] = id;
    return HR_OK;
}

void hr_tokens_free(struct hr_tokens *t)
{
    if (!t)
        return;
    free(t->ids);
    t->ids = NULL;
    t->n = t->cap = 0;
}

/* ------------------------------------------------------------------------ */
/* Pre-tokenizer names                                                      */
/* ------------------------------------------------------------------------ */

/* llama.cpp's tokenizer_pre names that map to a split we implement, with
 * the flags llama.cpp sets for them (clean: -1 keeps the BPE default, true). */
struct pre_name {
    const char *name;
    enum hr_pre pre;
    int8_t clean;
    bool ignore_merges;
    bool add_bos;
    bool no_bos; /* the default BOS id is "none" */
};

static const struct pre_name g_pre_names[] = {
    {"default", HR_PRE_DEFAULT, -1, false, false, false},
    {"llama3", HR_PRE_LLAMA3, -1, true, true, false},
    {"llama-v3", HR_PRE_LLAMA3, -1, true, true, false},
    {"llama-bpe", HR_PRE_LLAMA3, -1, true, true, false},
    {"falcon3", HR_PRE_LLAMA3, -1, true, true, false},
    {"falcon-h1", HR_PRE_LLAMA3, -1, true, true, false},
    {"pixtral", HR_PRE_LLAMA3, -1, true, true, false},
    {"midm-2.0", HR_PRE_LLAMA3, -1, true, true, false},
    {"lfm2", HR_PRE_LLAMA3, -1, true, true, false},
    {"jina-v5-nano", HR_PRE_LLAMA3, -1, true, true, false},
    {"dbrx", HR_PRE_LLAMA3, -1, false, false, false},
    {"smaug-bpe", HR_PRE_LLAMA3, -1, false, false, false},
    {"glm4", HR_PRE_LLAMA3, -1, false, false, true},
    {"chatglm-bpe", HR_PRE_LLAMA3, -1, false, false, true},
    {"deepseek-llm", HR_PRE_DEEPSEEK_LLM, 0, false, false, false},
    {"deepseek-coder", HR_PRE_DEEPSEEK_CODER, 0, false, false, false},
    {"gpt-2", HR_PRE_GPT2, -1, false, false, false},
    {"phi-2", HR_PRE_GPT2, -1, false, false, false},
    {"jina-es", HR_PRE_GPT2, -1, false, false, false},
    {"jina-de", HR_PRE_GPT2, -1, false, false, false},
    {"gigachat", HR_PRE_GPT2, -1, false, false, false},
    {"jina-v2-es", HR_PRE_GPT2, -1, false, false, false},
    {"jina-v2-de", HR_PRE_GPT2, -1, false, false, false},
    {"a.x-4.0", HR_PRE_GPT2, -1, false, false, false},
    {"mellum", HR_PRE_GPT2, -1, false, false, false},
    {"modern-bert", HR_PRE_GPT2, -1, false, false, false},
    {"jina-v1-en", HR_PRE_GPT2, -1, false, false, false},
    {"jina-v2-code", HR_PRE_GPT2, -1, false, false, false},
    {"roberta-bpe", HR_PRE_GPT2, -1, false, false, false},
    {"mpt", HR_PRE_GPT2, -1, false, false, false},
    {"olmo", HR_PRE_GPT2, -1, false, false, false},
    {"jais", HR_PRE_GPT2, -1, false, false, false},
    {"exaone4", HR_PRE_GPT2, -1, false, false, false},
    {"trillion", HR_PRE_GPT2, 0, false, false, false},
    {"granite-docling", HR_PRE_GPT2, 0, false, false, false},
    {"starcoder", HR_PRE_STARCODER, -1, false, false, false},
    {"refact", HR_PRE_STARCODER, -1, false, false, false},
    {"command-r", HR_PRE_STARCODER, 0, false, false, false},
    {"smollm", HR_PRE_STARCODER, 0, false, false, false},
    {"codeshell", HR_PRE_STARCODER, -1, false, false, false},
    {"exaone", HR_PRE_STARCODER, -1, false, false, false},
    {"minerva-7b", HR_PRE_STARCODER, -1, false, false, false},
    {"mellum2", HR_PRE_STARCODER, -1, false, false, false},
    {"qwen2", HR_PRE_QWEN2, 0, false, false, false},
    {"deepseek-r1-qwen", HR_PRE_QWEN2, 0, false, false, false},
    {"kormo", HR_PRE_QWEN2, 0, false, false, false},
    {"f2llmv2", HR_PRE_QWEN2, 0, false, false, false},
    {"megrez", HR_PRE_QWEN2, -1, false, false, false},
    {"stablelm2", HR_PRE_QWEN2, -1, false, false, false},
    {"hunyuan", HR_PRE_QWEN2, 0, false, false, false},
    {"solar-open", HR_PRE_QWEN2, 0, false, false, false},
    {"grok-2", HR_PRE_QWEN2, 0, false, false, false},
    {"qwen35", HR_PRE_QWEN35, 0, false, false, false},
    {"tekken", HR_PRE_TEKKEN, 0, true, true, false},
    {"gpt-4o", HR_PRE_GPT4O, 0, false, false, false},
    {"llama4", HR_PRE_GPT4O, 0, false, false, false},
    {"kanana2", HR_PRE_GPT4O, 0, false, false, false},
    {"talkie", HR_PRE_GPT4O, 0, false, false, false},
};

/* ------------------------------------------------------------------------ */
/* llama.cpp's token_to_id iteration order                                  */
/* ------------------------------------------------------------------------ */

/* libstdc++'s std::hash<std::string>: _Hash_bytes, a MurmurHash2 variant,
 * with seed 0xc70f6907. */
static uint64_t stl_shift_mix(uint64_t v)
{
    return v ^ (v >> 47);
}

static uint64_t stl_hash(const uint8_t *p, size_t len)
{
    const uint64_t mul = (0xc6a4a793ull << 32) + 0x5bd1e995ull;
    uint64_t h = 0xc70f6907ull ^ (len * mul);
    size_t aligned = len & ~(size_t)7;
    for (size_t i = 0; i < aligned; i += 8) {
        uint64_t d;
        memcpy(&d, p + i, 8);
        h ^= stl_shift_mix(d * mul) * mul;
        h *= mul;
    }
    if (len & 7) {
        uint64_t d = 0;
        for (size_t k = len & 7; k-- > 0;)
            d = (d << 8) + p[aligned + k];
        h ^= d;
        h *= mul;
    }
    h = stl_shift_mix(h) * mul;
    return stl_shift_mix(h);
}

/* Bucket counts of a std::unordered_map with unique keys as it grows: when
 * the k-th element is inserted, the table first rehashes to the given size
 * (libstdc++'s prime rehash policy, max load factor 1; measured). */
static const struct {
    uint32_t at_element;
    uint32_t buckets;
} g_stl_growth[] = {
    {1, 13},           {14, 29},          {30, 59},          {60, 127},        {128, 257},
    {258, 541},        {542, 1109},       {1110, 2357},      {2358, 5087},     {5088, 10273},
    {10274, 20753},    {20754, 42043},    {42044, 85229},    {85230, 172933},  {172934, 351061},
    {351062, 712697},  {712698, 1447153}, {1447154, 2938679}, {2938680, 5967347},
};

#define STL_EMPTY  (-2)
#define STL_BEFORE (-1) /* the bucket's predecessor is the list head */

/*
 * Fills order[0..n_distinct) with token ids in the order llama.cpp's
 * `for (const auto & t : token_to_id)` visits them, where token_to_id was
 * filled by `token_to_id[text] = id` for id = 0, 1, ... (the last id of a
 * repeated text is the one stored). Simulates libstdc++'s _Hashtable: a new
 * node goes to the front of its bucket, or to the front of the whole list
 * when its bucket is empty; a rehash walks the list and rebuilds it the
 * same way. Returns the number of distinct texts, or 0 when the vocabulary
 * is too large for the growth table (the caller then uses id order).
 */
static uint32_t stl_map_order(const struct hr_tokenizer *tok, uint32_t *order)
{
    uint32_t n = tok->n_vocab;
    uint32_t n_distinct = tok->n_text_sids; /* token texts were interned first: sids 0.. */
    if (n_distinct > g_stl_growth[sizeof(g_stl_growth) / sizeof(g_stl_growth[0]) - 1].at_element)
        return 0;
    uint64_t *hash = malloc((size_t)n_distinct * sizeof(*hash));
    int32_t *next = malloc((size_t)n_distinct * sizeof(*next));
    int32_t *buckets = NULL;
    uint8_t *seen = calloc(n_distinct, 1);
    uint32_t count = 0;
    if (!hash || !next || !seen)
        goto out;
    int32_t head = -1;   /* _M_before_begin._M_nxt */
    uint32_t n_bkt = 1, growth = 0;
    /* Nodes are sids (a node per distinct text). */
    for (uint32_t id = 0; id < n; id++) {
        uint32_t sid = tok->tok_sid[id];
        if (seen[sid])
            continue;
        seen[sid] = 1;
        hash[sid] = stl_hash((const uint8_t *)hr_strtab_str(&tok->strs, sid), tok->strs.len[sid]);
        count++;
        if (growth < sizeof(g_stl_growth) / sizeof(g_stl_growth[0]) &&
            g_stl_growth[growth].at_element == count) {
            uint32_t nb = g_stl_growth[growth++].buckets;
            int32_t *nbk = malloc((size_t)nb * sizeof(*nbk));
            if (!nbk) {
                count = 0;
                goto out;
            }
            for (uint32_t i = 0; i < nb; i++)
                nbk[i] = STL_EMPTY;
            int32_t p = head;
            head = -1;
            uint32_t bbegin = 0;
            while (p >= 0) {
                int32_t nx = next[p];
                uint32_t b = (uint32_t)(hash[p] % nb);
                if (nbk[b] == STL_EMPTY) {
                    next[p] = head;
                    head = p;
                    nbk[b] = STL_BEFORE;
                    if (next[p] >= 0)
                        nbk[bbegin] = p;
                    bbegin = b;
                } else {
                    int32_t *pn = nbk[b] == STL_BEFORE ? &head : &next[nbk[b]];
                    next[p] = *pn;
                    *pn = p;
                }
                p = nx;
            }
            free(buckets);
            buckets = nbk;
            n_bkt = nb;
        }
        uint32_t b = (uint32_t)(hash[sid] % n_bkt);
        if (buckets[b] != STL_EMPTY) {
            int32_t *pn = buckets[b] == STL_BEFORE ? &head : &next[buckets[b]];
            next[sid] = *pn;
            *pn = (int32_t)sid;
        } else {
            next[sid] = head;
            head = (int32_t)sid;
            if (next[sid] >= 0)
                buckets[hash[next[sid]] % n_bkt] = (int32_t)sid;
            buckets[b] = STL_BEFORE;
        }
    }
    uint32_t k = 0;
    for (int32_t p = head; p >= 0; p = next[p])
        order[k++] = (uint32_t)tok->sid_token[p];
out:
    free(hash);
    free(next);
    free(buckets);
    free(seen);
    return count;
}

/* ------------------------------------------------------------------------ */
/* Loading                                                                  */
/* ------------------------------------------------------------------------ */

/* Texts llama.cpp matches to find special tokens the file does not name. */
static const char *const g_eot_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<end_of_utterance>", NULL};
static const char *const g_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const g_fim_pre_texts[] = {
    "<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<PRE>", "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const g_fim_suf_texts[] = {
    "<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    "<SUF>", "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const g_fim_mid_texts[] = {
    "<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
    "<MID>", "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const g_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>",
                                              "[PAD]", NULL};
static const char *const g_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
                                              "<REPO>", "<reponame>", NULL};
static const char *const g_fim_sep_texts[] = {"<|file_sep|>", NULL};
static const char *const g_eog_texts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};
static const char *const g_user_defined_texts[] = {"<|channel|>", "<|message|>", "<|start|>",
                                                   "<|constrain|>", NULL};

static void force_control(struct hr_tokenizer *tok, int32_t id)
{
    if (!(tok->attr[id] & HR_TOKEN_ATTR_CONTROL)) {
        size_t n;
        const char *t = hr_tokenizer_text(tok, id, &n);
        hr_log_debug("tokenizer", "token %d '%.*s' looks like a control token; treating it as one",
                     id, (int)n, t);
        tok->attr[id] |= HR_TOKEN_ATTR_CONTROL;
    }
}

static int32_t lookup(const struct hr_tokenizer *tok, const char *text)
{
    return hr_vocab_text_to_token(tok, text, strlen(text));
}

/*
 * Step 4 of the load: llama.cpp's fix-ups by token text. llama.cpp loops
 * over all tokens and compares texts; we look the listed texts up instead,
 * which gives the same sets. Where the loop's order matters (two tokens
 * could become EOT, say) we order the candidates by their place in
 * token_to_id's iteration, computed only when there is such a choice.
 */
static enum hr_status fixup_by_text(struct hr_tokenizer *tok, struct hr_err *err)
{
    uint32_t *pos = NULL; /* token id -> place in token_to_id's iteration */
    struct {
        int32_t *id;
        const char *const *texts;
    } finders[] = {
        {&tok->eot, g_eot_texts},         {&tok->eom, g_eom_texts},
        {&tok->fim_pre, g_fim_pre_texts}, {&tok->fim_suf, g_fim_suf_texts},
        {&tok->fim_mid, g_fim_mid_texts}, {&tok->fim_pad, g_fim_pad_texts},
        {&tok->fim_rep, g_fim_rep_texts}, {&tok->fim_sep, g_fim_sep_texts},
    };
    for (size_t f = 0; f < sizeof(finders) / sizeof(finders[0]); f++) {
        if (*finders[f].id != HR_TOKEN_NULL)
            continue;
        int32_t best = HR_TOKEN_NULL;
        for (const char *const *t = finders[f].texts; *t; t++) {
            int32_t id = lookup(tok, *t);
            if (id < 0 || id == best)
                continue;
            if (best >= 0 && !pos) {
                uint32_t *order = malloc((size_t)tok->n_vocab * sizeof(*order));
                pos = malloc((size_t)tok->n_vocab * sizeof(*pos));
                if (!order || !pos) {
                    free(order);
                    free(pos);
                    return hr_err_set(err, HR_ERR_NOMEM, "out of memory ordering tokens");
                }
                for (uint32_t i = 0; i < tok->n_vocab; i++)
                    pos[i] = UINT32_MAX;
                uint32_t n_order = stl_map_order(tok, order);
                if (n_order == 0) /* too large to simulate: id order */
                    for (uint32_t sid = 0; sid < tok->n_text_sids; sid++)
                        order[n_order++] = (uint32_t)tok->sid_token[sid];
                for (uint32_t k = 0; k < n_order; k++)
                    pos[order[k]] = k;
                free(order);
            }
            if (best < 0 || pos[id] < pos[best])
                best = id;
        }
        if (best >= 0) {
            *finders[f].id = best;
            force_control(tok, best);
        }
    }
    free(pos);
    /* Control tokens named "...unused..." are unused (strstr stops at a
     * NUL inside a text, as llama.cpp's does on c_str()). */
    for (uint32_t id = 0; id < tok->n_vocab; id++)
        if ((tok->attr[id] & HR_TOKEN_ATTR_CONTROL) && !(tok->attr[id] & HR_TOKEN_ATTR_UNUSED) &&
            tok->sid_token[tok->tok_sid[id]] == (int32_t)id &&
            strstr(hr_strtab_str(&tok->strs, tok->tok_sid[id]), "unused"))
            tok->attr[id] |= HR_TOKEN_ATTR_UNUSED;
    /* The end-of-generation set. */
    if (tok->fim_pad != HR_TOKEN_NULL)
        tok->eog[tok->fim_pad] = 1;
    if (tok->fim_rep != HR_TOKEN_NULL)
        tok->eog[tok->fim_rep] = 1;
    if (tok->fim_sep != HR_TOKEN_NULL)
        tok->eog[tok->fim_sep] = 1;
    for (const char *const *t = g_eog_texts; *t; t++) {
        int32_t id = lookup(tok, *t);
        if (id >= 0) {
            tok->eog[id] = 1;
            force_control(tok, id);
        }
    }
    /* gpt-oss: these always render. */
    for (const char *const *t = g_user_defined_texts; *t; t++) {
        int32_t id = lookup(tok, *t);
        if (id >= 0)
            tok->attr[id] = HR_TOKEN_ATTR_USER_DEFINED;
    }
    if (tok->eos != HR_TOKEN_NULL)
        tok->eog[tok->eos] = 1;
    if (tok->eot != HR_TOKEN_NULL)
        tok->eog[tok->eot] = 1;
    if (tok->eom != HR_TOKEN_NULL)
        tok->eog[tok->eom] = 1;

    /* o200k_harmony and solar-open: "<|end|>" is not the end when
     * "<|return|>" and "<|call|>" (or "<|calls|>" and "<|flush|>") are. */
    int32_t id_return = lookup(tok, "<|return|>"), id_call = lookup(tok, "<|call|>");
    int32_t id_calls = lookup(tok, "<|calls|>"), id_flush = lookup(tok, "<|flush|>");
    int32_t id_end = lookup(tok, "<|end|>");
#define IN_EOG(id) ((id) >= 0 && tok->eog[id])
    bool has_call = IN_EOG(id_call) || IN_EOG(id_calls);
    if (IN_EOG(id_end) && ((IN_EOG(id_return) && has_call) || (has_call && IN_EOG(id_flush)))) {
        tok->eog[id_end] = 0;
        tok->attr[id_end] = HR_TOKEN_ATTR_USER_DEFINED;
    }
    /* Gemma 4 and PaddleOCR: "</s>" is not the end when "<|tool_response>" is. */
    int32_t id_tool = lookup(tok, "<|tool_response>"), id_s = lookup(tok, "</s>");
    if (IN_EOG(id_tool) && IN_EOG(id_s)) {
        tok->eog[id_s] = 0;
        tok->attr[id_s] = HR_TOKEN_ATTR_NORMAL;
    }
#undef IN_EOG
    return HR_OK;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct hr_tokenizer *tok = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = tok->strs.len[tok->tok_sid[x]], ly = tok->strs.len[tok->tok_sid[y]];
    if (lx != ly)
        return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

/*
 * Step 5: the special tokens in matching order. llama.cpp sorts them with
 * std::sort by text length, longest first; the order among tokens of equal
 * length is whatever its introsort leaves, which only matters for two such
 * tokens that overlap in the text. We break ties by id.
 */
static enum hr_status build_specials(struct hr_tokenizer *tok, struct hr_err *err)
{
    const unsigned want = HR_TOKEN_ATTR_CONTROL | HR_TOKEN_ATTR_USER_DEFINED | HR_TOKEN_ATTR_UNKNOWN;
    uint32_t n = 0;
    for (uint32_t id = 0; id < tok->n_vocab; id++)
        n += (tok->attr[id] & want) != 0;
    tok->specials = malloc((size_t)(n ? n : 1) * sizeof(*tok->specials));
    if (!tok->specials)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory listing %u special tokens", n);
    tok->n_specials = 0;
    for (uint32_t id = 0; id < tok->n_vocab; id++)
        if (tok->attr[id] & want)
            tok->specials[tok->n_specials++] = (int32_t)id;
    qsort_r(tok->specials, tok->n_specials, sizeof(*tok->specials), cmp_special, tok);

    /* The trie of their texts. */
    size_t cap = 1;
    for (uint32_t i = 0; i < tok->n_specials; i++)
        cap += tok->strs.len[tok->tok_sid[tok->specials[i]]];
    tok->trie = malloc(cap * sizeof(*tok->trie));
    if (!tok->trie)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory indexing special tokens");
    tok->trie[0] = (struct hr_trie_node){-1, -1, -1, 0};
    tok->n_trie = 1;
    for (uint32_t i = 0; i < tok->n_specials; i++) {
        uint32_t sid = tok->tok_sid[tok->specials[i]];
        const uint8_t *s = (const uint8_t *)hr_strtab_str(&tok->strs, sid);
        uint32_t len = tok->strs.len[sid];
        int32_t node = 0;
        for (uint32_t k = 0; k < len; k++) {
            int32_t c = tok->trie[node].first_child;
            while (c >= 0 && tok->trie[c].byte != s[k])
                c = tok->trie[c].next_sibling;
            if (c < 0) {
                c = (int32_t)tok->n_trie++;
                tok->trie[c] = (struct hr_trie_node){-1, tok->trie[node].first_child, -1, s[k]};
                tok->trie[node].first_child = c;
            }
            node = c;
        }
        if (len > 0 && tok->trie[node].special < 0)
            tok->trie[node].special = (int32_t)i;
        if (len > 0)
            tok->trie_first[s[0]] = 1;
    }
    return HR_OK;
}

/* LSTRIP/RSTRIP, which llama.cpp sets by model name only. */
static void strip_attrs(struct hr_tokenizer *tok, const struct hr_gguf *g)
{
    struct hr_gguf_str s;
    char name[128] = "", arch[64] = "", pre[64] = "";
    if (hr_gguf_get_str(g, "general.name", &s, NULL) == HR_OK)
        snprintf(name, sizeof(name), "%.*s", (int)(s.len < 127 ? s.len : 127), s.ptr);
    if (hr_gguf_get_str(g, "general.architecture", &s, NULL) == HR_OK)
        snprintf(arch, sizeof(arch), "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
    if (hr_gguf_get_str(g, "tokenizer.ggml.pre", &s, NULL) == HR_OK)
        snprintf(pre, sizeof(pre), "%.*s", (int)(s.len < 63 ? s.len : 63), s.ptr);
    for (char *p = name; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    int32_t id;
    if (strstr(pre, "jina-v2-de") || strstr(pre, "jina-v2-es") || strstr(pre, "jina-v2-code") ||
        strstr(arch, "nomic-bert-moe") || strstr(arch, "jina-bert-v3")) {
        if ((id = hr_vocab_text_to_token(tok, "<mask>", 6)) >= 0)
            tok->attr[id] |= HR_TOKEN_ATTR_LSTRIP;
    } else if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (uint32_t i = 0; i < tok->n_specials; i++)
            tok->attr[tok->specials[i]] |= HR_TOKEN_ATTR_RSTRIP;
        if ((id = hr_vocab_text_to_token(tok, "</s>", 4)) >= 0)
            tok->attr[id] |= HR_TOKEN_ATTR_RSTRIP;
        static const char *const keep[] = {"<unk>", "<s>", "<|endoftext|>"};
        for (size_t k = 0; k < 3; k++)
            if ((id = hr_vocab_text_to_token(tok, keep[k], strlen(keep[k]))) >= 0)
                tok->attr[id] &= (uint16_t)~HR_TOKEN_ATTR_RSTRIP;
    } else if (strstr(name, "modern-bert")) {
        if ((id = hr_vocab_text_to_token(tok, "[MASK]", 6)) >= 0)
            tok->attr[id] |= HR_TOKEN_ATTR_LSTRIP;
    }
}

/* Reads a special token id key; an id out of range keeps the default. */
static void read_special(const struct hr_gguf *g, const char *key, uint32_t n_vocab, int32_t *id)
{
    if (*id >= 0 && (uint32_t)*id >= n_vocab)
        *id = HR_TOKEN_NULL;
    uint32_t v;
    if (hr_gguf_get_u32(g, key, &v, NULL) != HR_OK)
        return;
    if (v >= n_vocab)
        hr_log_warn("tokenizer", "%s = %u is outside the vocabulary (%u tokens); using %d", key, v,
                    n_vocab, *id);
    else
        *id = (int32_t)v;
}

static enum hr_status load_bpe_merges(struct hr_tokenizer *tok, const struct hr_gguf *g,
                                      struct hr_err *err)
{
    const struct hr_gguf_value *m;
    enum hr_status st = hr_gguf_get_arr(g, "tokenizer.ggml.merges", HR_GGUF_STRING, &m, err);
    if (st != HR_OK)
        return st;
    uint64_t n = m->v.arr.n;
    if (n > INT32_MAX)
        return hr_err_set(err, HR_ERR_RANGE, "tokenizer.ggml.merges has %llu entries",
                          (unsigned long long)n);
    int32_t *sides = malloc((size_t)(n ? n : 1) * 2 * sizeof(*sides));
    if (!sides)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory reading %llu merges",
                          (unsigned long long)n);
    /* Intern every side first, so that a merged string that is only a side
     * of a later merge still gets a sid. */
    for (uint64_t i = 0; i < n; i++) {
        struct hr_gguf_str s = m->v.arr.items[i].v.str;
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
        if (!sp) { /* no separator: llama.cpp stores ("", ""), which never matches */
            sides[2 * i] = sides[2 * i + 1] = -1;
            continue;
        }
        size_t l1 = (size_t)(sp - s.ptr);
        sides[2 * i] = strtab_intern(&tok->strs, s.ptr, l1);
        sides[2 * i + 1] = strtab_intern(&tok->strs, sp + 1, s.len - l1 - 1);
        if (sides[2 * i] < 0 || sides[2 * i + 1] < 0) {
            free(sides);
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory reading merge %llu",
                              (unsigned long long)i);
        }
    }
    uint32_t cap = 16;
    while (cap < 2 * n)
        cap *= 2;
    tok->merges = malloc((size_t)cap * sizeof(*tok->merges));
    if (!tok->merges) {
        free(sides);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory indexing merges");
    }
    for (uint32_t i = 0; i < cap; i++)
        tok->merges[i].key = UINT64_MAX;
    tok->merges_mask = cap - 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (sides[2 * i] < 0)
            continue;
        uint32_t a = (uint32_t)sides[2 * i], b = (uint32_t)sides[2 * i + 1];
        uint64_t key = (uint64_t)a << 32 | b;
        uint32_t h = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32);
        uint32_t k = h & tok->merges_mask;
        while (tok->merges[k].key != UINT64_MAX && tok->merges[k].key != key)
            k = (k + 1) & tok->merges_mask;
        if (tok->merges[k].key == key)
            continue; /* a repeated pair keeps its first rank, as std::unordered_map::emplace */
        size_t la = tok->strs.len[a], lb = tok->strs.len[b];
        if (la + lb > buf_cap) {
            buf_cap = (la + lb) * 2;
            char *nb = realloc(buf, buf_cap);
            if (!nb) {
                free(buf);
                free(sides);
                return hr_err_set(err, HR_ERR_NOMEM, "out of memory reading merges");
            }
            buf = nb;
        }
        memcpy(buf, hr_strtab_str(&tok->strs, a), la);
        memcpy(buf + la, hr_strtab_str(&tok->strs, b), lb);
        tok->merges[k].key = key;
        tok->merges[k].rank = (int32_t)i;
        tok->merges[k].merged = hr_strtab_find(&tok->strs, buf, la + lb, hr_tok_hash(buf, la + lb));
    }
    free(buf);
    free(sides);
    return HR_OK;
}

/* GPT-2 spellings of the bytes and what each falls back to. */
static void setup_bpe_bytes(struct hr_tokenizer *tok)
{
    for (int b = 0; b < 256; b++) {
        uint8_t enc[4];
        size_t n = hr_utf8_encode(hr_gpt2_byte_to_cp((uint8_t)b), enc);
        tok->byte_sid[b] = hr_strtab_find(&tok->strs, enc, n, hr_tok_hash(enc, n));
        /* llama.cpp looks up each byte of the spelling as a one-byte text. */
        tok->n_byte_fb[b] = 0;
        for (size_t k = 0; k < n; k++) {
            int32_t id = hr_vocab_text_to_token(tok, &enc[k], 1);
            if (id >= 0)
                tok->byte_fb[b][tok->n_byte_fb[b]++] = id;
        }
    }
}

static void setup_spm_bytes(struct hr_tokenizer *tok)
{
    static const char hex[] = "0123456789ABCDEF";
    for (int b = 0; b < 256; b++) {
        char buf[6] = {'<', '0', 'x', hex[b >> 4], hex[b & 15], '>'};
        int32_t id = hr_vocab_text_to_token(tok, buf, 6);
        if (id < 0) {
            char c = (char)b;
            id = hr_vocab_text_to_token(tok, &c, 1);
        }
        tok->byte_tok[b] = id;
    }
    /* The cut points of spm.c: one pass over every token text. */
    memset(tok->spm_cut_before_space, 1, sizeof(tok->spm_cut_before_space));
    memset(tok->spm_lonely, 1, sizeof(tok->spm_lonely));
    for (uint32_t sid = 0; sid < tok->n_text_sids; sid++) {
        const uint8_t *t = (const uint8_t *)hr_strtab_str(&tok->strs, sid);
        uint32_t len = tok->strs.len[sid];
        for (uint32_t i = 0; i < len; i++) {
            if (len >= 2 && t[i] < 128)
                tok->spm_lonely[t[i]] = 0;
            if (i + 3 < len && t[i + 1] == 0xE2 && t[i + 2] == 0x96 && t[i + 3] == 0x81)
                tok->spm_cut_before_space[t[i]] = 0;
        }
    }
}

enum hr_status hr_tokenizer_init_from_gguf(const struct hr_gguf *g, struct hr_tokenizer **out,
                                           struct hr_err *err)
{
    *out = NULL;
    struct hr_tokenizer *tok = calloc(1, sizeof(*tok));
    if (!tok)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    enum hr_status st;
    struct hr_gguf_str s;

    /* 1. Model and pre-tokenizer. */
    if ((st = hr_gguf_get_str(g, "tokenizer.ggml.model", &s, err)) != HR_OK)
        goto fail;
    if (hr_gguf_str_eq(s, "gpt2")) {
        tok->type = HR_TOK_TYPE_BPE;
    } else if (hr_gguf_str_eq(s, "llama")) {
        tok->type = HR_TOK_TYPE_SPM;
    } else {
        st = hr_err_set(err, HR_ERR_UNSUPPORTED,
                        "tokenizer.ggml.model '%.*s' is not supported (only 'gpt2' and 'llama')",
                        (int)(s.len < 64 ? s.len : 64), s.ptr);
        goto fail;
    }
    snprintf(tok->model_name, sizeof(tok->model_name), "%s",
             tok->type == HR_TOK_TYPE_BPE ? "gpt2" : "llama");
    tok->eot = tok->eom = tok->sep = tok->pad = tok->mask = HR_TOKEN_NULL;
    tok->fim_pre = tok->fim_suf = tok->fim_mid = HR_TOKEN_NULL;
    tok->fim_pad = tok->fim_rep = tok->fim_sep = HR_TOKEN_NULL;
    tok->nl = 13;
    if (tok->type == HR_TOK_TYPE_SPM) {
        tok->bos = 1, tok->eos = 2, tok->unk = 0;
        tok->add_space_prefix = true;
        tok->clean_spaces = false;
        tok->add_bos = true;
        tok->pre = HR_PRE_DEFAULT;
        snprintf(tok->pre_name, sizeof(tok->pre_name), "default");
    } else {
        tok->bos = 11, tok->eos = 11, tok->unk = HR_TOKEN_NULL;
        tok->clean_spaces = true;
        tok->pre = HR_PRE_DEFAULT;
        snprintf(tok->pre_name, sizeof(tok->pre_name), "default");
        struct hr_gguf_str pre;
        if (hr_gguf_get_str(g, "tokenizer.ggml.pre", &pre, NULL) != HR_OK) {
            hr_log_warn("tokenizer", "no tokenizer.ggml.pre; using the 'default' pre-tokenizer "
                                     "(tokenization may differ from the model's training)");
        } else {
            const struct pre_name *p = NULL;
            for (size_t i = 0; i < sizeof(g_pre_names) / sizeof(g_pre_names[0]); i++)
                if (hr_gguf_str_eq(pre, g_pre_names[i].name))
                    p = &g_pre_names[i];
            if (!p) {
                hr_log_warn("tokenizer",
                            "unknown pre-tokenizer '%.*s'; using 'default' (tokenization may "
                            "differ from the model's training; llama.cpp refuses this file)",
                            (int)(pre.len < 64 ? pre.len : 64), pre.ptr);
            } else {
                tok->pre = p->pre;
                snprintf(tok->pre_name, sizeof(tok->pre_name), "%s", p->name);
                if (p->clean >= 0)
                    tok->clean_spaces = p->clean;
                tok->ignore_merges = p->ignore_merges;
                tok->add_bos = p->add_bos;
                if (p->no_bos)
                    tok->bos = HR_TOKEN_NULL;
            }
        }
    }
    bool b;
    if (hr_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b, NULL) == HR_OK)
        tok->add_space_prefix = b;

    /* 2. Tokens, scores, types. */
    const struct hr_gguf_value *toks, *scores = NULL, *types = NULL;
    if ((st = hr_gguf_get_arr(g, "tokenizer.ggml.tokens", HR_GGUF_STRING, &toks, err)) != HR_OK)
        goto fail;
    if (toks->v.arr.n > INT32_MAX - 1) {
        st = hr_err_set(err, HR_ERR_RANGE, "tokenizer.ggml.tokens has %llu entries",
                        (unsigned long long)toks->v.arr.n);
        goto fail;
    }
    uint32_t n = tok->n_vocab = (uint32_t)toks->v.arr.n;
    st = hr_gguf_get_arr(g, "tokenizer.ggml.scores", HR_GGUF_TYPE_COUNT, &scores, err);
    if (st == HR_ERR_NOT_FOUND) {
        scores = NULL;
    } else if (st != HR_OK) {
        goto fail;
    } else if (scores->v.arr.elem_type != HR_GGUF_FLOAT32 && scores->v.arr.elem_type != HR_GGUF_INT32) {
        st = hr_err_set(err, HR_ERR_TYPE, "tokenizer.ggml.scores is an array of %s, not of float32",
                        hr_gguf_type_name(scores->v.arr.elem_type));
        goto fail;
    } else if (scores->v.arr.n < n) {
        st = hr_err_set(err, HR_ERR_INVALID, "tokenizer.ggml.scores has %llu entries for %u tokens",
                        (unsigned long long)scores->v.arr.n, n);
        goto fail;
    }
    st = hr_gguf_get_arr(g, "tokenizer.ggml.token_type", HR_GGUF_INT32, &types, err);
    if (st == HR_ERR_NOT_FOUND) {
        types = NULL;
    } else if (st != HR_OK) {
        goto fail;
    } else if (types->v.arr.n < n) {
        st = hr_err_set(err, HR_ERR_INVALID,
                        "tokenizer.ggml.token_type has %llu entries for %u tokens",
                        (unsigned long long)types->v.arr.n, n);
        goto fail;
    }
    size_t nn = n ? n : 1;
    tok->tok_sid = malloc(nn * sizeof(*tok->tok_sid));
    tok->score = malloc(nn * sizeof(*tok->score));
    tok->attr = malloc(nn * sizeof(*tok->attr));
    tok->eog = calloc(nn, 1);
    if (!tok->tok_sid || !tok->score || !tok->attr || !tok->eog)
        goto nomem;
    for (uint32_t i = 0; i < n; i++) {
        struct hr_gguf_str t = toks->v.arr.items[i].v.str;
        char empty[32];
        if (t.len == 0) {
            int k = snprintf(empty, sizeof(empty), "[EMPTY_%u]", i);
            hr_log_warn("tokenizer", "token %u has an empty text; naming it %s", i, empty);
            t.ptr = empty;
            t.len = (uint64_t)k;
        }
        int32_t sid = strtab_intern(&tok->strs, t.ptr, t.len);
        if (sid < 0)
            goto nomem;
        tok->tok_sid[i] = (uint32_t)sid;
        if (!scores)
            tok->score[i] = 0.0f;
        else if (scores->v.arr.elem_type == HR_GGUF_FLOAT32)
            tok->score[i] = (float)hr_gguf_arr_get_f64(scores, i);
        else
            tok->score[i] = (float)hr_gguf_arr_get_i64(scores, i);
        int64_t ty = types ? hr_gguf_arr_get_i64(types, i) : 1;
        switch (ty) {
        case 1: tok->attr[i] = HR_TOKEN_ATTR_NORMAL; break;
        case 2: tok->attr[i] = HR_TOKEN_ATTR_UNKNOWN; break;
        case 3: tok->attr[i] = HR_TOKEN_ATTR_CONTROL; break;
        case 4: tok->attr[i] = HR_TOKEN_ATTR_USER_DEFINED; break;
        case 5: tok->attr[i] = HR_TOKEN_ATTR_UNUSED; break;
        case 6: tok->attr[i] = HR_TOKEN_ATTR_BYTE; break;
        default: tok->attr[i] = HR_TOKEN_ATTR_UNDEFINED; break;
        }
    }
    /* sid -> token: the last id with a text wins, as `token_to_id[text] = id`. */
    uint32_t n_token_sids = tok->n_text_sids = tok->strs.n;
    tok->sid_token = malloc((size_t)(n_token_sids ? n_token_sids : 1) * sizeof(*tok->sid_token));
    if (!tok->sid_token)
        goto nomem;
    for (uint32_t i = 0; i < n; i++) {
        tok->sid_token[tok->tok_sid[i]] = (int32_t)i;
        if (tok->strs.len[tok->tok_sid[i]] > tok->max_token_len)
            tok->max_token_len = tok->strs.len[tok->tok_sid[i]];
    }
    if (tok->strs.n < n)
        hr_log_warn("tokenizer", "%u token texts appear more than once; the last id of each is "
                                 "used (llama.cpp refuses such a vocabulary)",
                    n - tok->strs.n);
    if (tok->type == HR_TOK_TYPE_BPE) {
        if ((st = load_bpe_merges(tok, g, err)) != HR_OK) {
            if (st == HR_ERR_NOT_FOUND)
                hr_err_set(err, st, "byte-level BPE vocabulary without tokenizer.ggml.merges");
            goto fail;
        }
        /* Merge sides added sids beyond the token texts; they map to no token. */
        int32_t *map = realloc(tok->sid_token, (size_t)tok->strs.n * sizeof(*map));
        if (!map)
            goto nomem;
        tok->sid_token = map;
        for (uint32_t sid = n_token_sids; sid < tok->strs.n; sid++)
            tok->sid_token[sid] = -1;
        setup_bpe_bytes(tok);
    } else {
        setup_spm_bytes(tok);
    }

    /* 3. Special ids and flags from the file. */
    static const struct {
        const char *key;
        size_t off;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", offsetof(struct hr_tokenizer, bos)},
        {"tokenizer.ggml.eos_token_id", offsetof(struct hr_tokenizer, eos)},
        {"tokenizer.ggml.eot_token_id", offsetof(struct hr_tokenizer, eot)},
        {"tokenizer.ggml.eom_token_id", offsetof(struct hr_tokenizer, eom)},
        {"tokenizer.ggml.unknown_token_id", offsetof(struct hr_tokenizer, unk)},
        {"tokenizer.ggml.seperator_token_id", offsetof(struct hr_tokenizer, sep)},
        {"tokenizer.ggml.padding_token_id", offsetof(struct hr_tokenizer, pad)},
        {"tokenizer.ggml.mask_token_id", offsetof(struct hr_tokenizer, mask)},
        {"tokenizer.ggml.fim_pre_token_id", offsetof(struct hr_tokenizer, fim_pre)},
        {"tokenizer.ggml.fim_suf_token_id", offsetof(struct hr_tokenizer, fim_suf)},
        {"tokenizer.ggml.fim_mid_token_id", offsetof(struct hr_tokenizer, fim_mid)},
        {"tokenizer.ggml.fim_pad_token_id", offsetof(struct hr_tokenizer, fim_pad)},
        {"tokenizer.ggml.fim_rep_token_id", offsetof(struct hr_tokenizer, fim_rep)},
        {"tokenizer.ggml.fim_sep_token_id", offsetof(struct hr_tokenizer, fim_sep)},
        {"tokenizer.ggml.prefix_token_id", offsetof(struct hr_tokenizer, fim_pre)},
        {"tokenizer.ggml.suffix_token_id", offsetof(struct hr_tokenizer, fim_suf)},
        {"tokenizer.ggml.middle_token_id", offsetof(struct hr_tokenizer, fim_mid)},
    };
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        read_special(g, ids[i].key, n, (int32_t *)((char *)tok + ids[i].off));
    if (hr_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b, NULL) == HR_OK)
        tok->add_bos = b;
    if (hr_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b, NULL) == HR_OK)
        tok->add_eos = b;

    /* 4 and 5. */
    if ((st = fixup_by_text(tok, err)) != HR_OK)
        goto fail;
    if ((st = build_specials(tok, err)) != HR_OK)
        goto fail;
    if ((st = hr_decode_build_pieces(tok, err)) != HR_OK)
        goto fail;
    strip_attrs(tok, g);

    /* 6. The newline token. */
    if (tok->type == HR_TOK_TYPE_SPM) {
        tok->nl = tok->byte_tok['\n'] >= 0 ? tok->byte_tok['\n'] : tok->pad;
    } else {
        struct hr_tokens t = {0};
        if ((st = hr_tokenizer_encode(tok, "\n", 1, 0, &t, err)) != HR_OK)
            goto fail;
        tok->nl = t.n ? t.ids[0] : tok->pad;
        hr_tokens_free(&t);
    }
    *out = tok;
    return HR_OK;
nomem:
    st = hr_err_set(err, HR_ERR_NOMEM, "out of memory loading a %u-token vocabulary", tok->n_vocab);
fail:
    hr_tokenizer_free(tok);
    return st;
}

void hr_tokenizer_free(struct hr_tokenizer *tok)
{
    if (!tok)
        return;
    free(tok->tok_sid);
    free(tok->score);
    free(tok->attr);
    free(tok->eog);
    strtab_free(&tok->strs);
    free(tok->sid_token);
    free(tok->merges);
    free(tok->specials);
    free(tok->trie);
    free(tok->piece_blob);
    free(tok->piece_off);
    free(tok->piece_len);
    free(tok);
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                */
/* ------------------------------------------------------------------------ */

uint32_t hr_tokenizer_n_vocab(const struct hr_tokenizer *tok) { return tok->n_vocab; }
const char *hr_tokenizer_model(const struct hr_tokenizer *tok) { return tok->model_name; }
const char *hr_tokenizer_pre(const struct hr_tokenizer *tok) { return tok->pre_name; }
int32_t hr_tokenizer_bos(const struct hr_tokenizer *tok) { return tok->bos; }
int32_t hr_tokenizer_eos(const struct hr_tokenizer *tok) { return tok->eos; }
int32_t hr_tokenizer_eot(const struct hr_tokenizer *tok) { return tok->eot; }
int32_t hr_tokenizer_eom(const struct hr_tokenizer *tok) { return tok->eom; }
int32_t hr_tokenizer_unk(const struct hr_tokenizer *tok) { return tok->unk; }
int32_t hr_tokenizer_sep(const struct hr_tokenizer *tok) { return tok->sep; }
int32_t hr_tokenizer_pad(const struct hr_tokenizer *tok) { return tok->pad; }
int32_t hr_tokenizer_nl(const struct hr_tokenizer *tok) { return tok->nl; }
bool hr_tokenizer_add_bos(const struct hr_tokenizer *tok) { return tok->add_bos; }
bool hr_tokenizer_add_eos(const struct hr_tokenizer *tok) { return tok->add_eos; }

static bool in_range(const struct hr_tokenizer *tok, int32_t id)
{
    return id >= 0 && (uint32_t)id < tok->n_vocab;
}

bool hr_tokenizer_is_eog(const struct hr_tokenizer *tok, int32_t id)
{
    return in_range(tok, id) && tok->eog[id];
}

bool hr_tokenizer_is_control(const struct hr_tokenizer *tok, int32_t id)
{
    return in_range(tok, id) &&
           (tok->attr[id] & (HR_TOKEN_ATTR_CONTROL | HR_TOKEN_ATTR_UNKNOWN)) != 0;
}

unsigned hr_tokenizer_attr(const struct hr_tokenizer *tok, int32_t id)
{
    return in_range(tok, id) ? tok->attr[id] : HR_TOKEN_ATTR_UNDEFINED;
}

const char *hr_tokenizer_text(const struct hr_tokenizer *tok, int32_t id, size_t *len)
{
    if (!in_range(tok, id)) {
        *len = 0;
        return "";
    }
    uint32_t sid = tok->tok_sid[id];
    *len = tok->strs.len[sid];
    return hr_strtab_str(&tok->strs, sid);
}

int32_t hr_tokenizer_find(const struct hr_tokenizer *tok, const char *s, size_t n)
{
    return hr_vocab_text_to_token(tok, s, n);
}
