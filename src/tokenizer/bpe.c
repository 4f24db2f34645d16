/*
 * bpe.c - byte-level BPE (tokenizer.ggml.model "gpt2"), as llama.cpp's
 * llm_tokenizer_bpe_session does it.
 *
 * A fragment of raw text is decoded leniently and cut by the
 * pre-tokenizer (pretok.c); each piece is re-encoded as UTF-8 (so a bad
 * byte is now the three bytes of U+FFFD, an overlong form its shortest
 * form) and merged on its own:
 *
 *   1. Symbols start as single bytes. (llama.cpp spells the piece in GPT-2's
 *      alphabet and splits it into characters: one character per byte, so
 *      we skip the spelling and keep byte spans.) Each symbol carries the
 *      string id (sid) of its spelling, or -1 when that spelling is neither
 *      a token nor a side of any merge - such a symbol can never merge.
 *   2. Every adjacent pair with a merge rule goes into a min-heap keyed by
 *      (rank, left index). The lowest is popped; if either side has changed
 *      since it was pushed (sizes are compared: a symbol only ever grows by
 *      swallowing its right neighbour, so equal sizes mean unchanged, the
 *      same test as llama.cpp's string comparison) it is dropped, else the
 *      right symbol joins the left one and the two new neighbour pairs are
 *      pushed.
 *   3. Each final symbol whose spelling is a token is emitted; the others
 *      emit, per byte of their spelling, the token whose text is that one
 *      byte, when one exists (llama.cpp's fallback; a byte outside ASCII
 *      has no such token in a GPT-2 vocabulary, so it silently vanishes -
 *      a vocabulary with all 256 byte tokens never gets here).
 *
 * With ignore_merges (Llama 3, Tekken) a piece whose spelling is a token is
 * emitted directly.
 *
 * Cost: O(m log m) for a piece of m bytes. Natural text repeats its words,
 * so a cache maps a piece's bytes to its tokens. It belongs to one
 * hr_tokenizer_encode call (struct hr_bpe, made by hr_bpe_begin and freed by
 * hr_bpe_end), shared by the call's fragments: nothing is shared between
 * calls or threads.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer-impl.h"
#include "tokenizer/unicode.h"

struct sym {
    int32_t prev, next;
    uint32_t start, len;
    int32_t sid;
};

struct bigram {
    uint64_t key; /* rank << 32 | left: the heap order */
    int32_t right;
    uint32_t size;
    int32_t merged;
};

/* Everything one hr_tokenizer_encode call needs, across its fragments. */
struct hr_bpe {
    struct hr_pretok pt;
    uint8_t *words; /* every piece, re-encoded, one after the other */
    size_t n_words, cap_words;
    struct sym *syms;
    size_t cap_syms;
    struct bigram *heap;
    size_t n_heap, cap_heap;
    uint8_t *spell; /* GPT-2 spelling scratch */
    size_t cap_spell;
    /* The piece cache: open addressing over (piece bytes) -> tokens. */
    struct cache_slot {
        uint32_t off, len; /* the piece in `words`; len 0 = empty slot */
        uint32_t hash;
        uint32_t first, count; /* into cache_toks */
    } *cache;
    uint32_t cache_mask, cache_used, cache_slots;
    int32_t *cache_toks;
    size_t n_cache_toks, cap_cache_toks;
};

static const struct hr_merge *find_merge(const struct hr_tokenizer *tok, int32_t a, int32_t b)
{
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    uint32_t k = (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32) & tok->merges_mask;
    for (;; k = (k + 1) & tok->merges_mask) {
        const struct hr_merge *m = &tok->merges[k];
        if (m->key == key)
            return m;
        if (m->key == UINT64_MAX)
            return NULL;
    }
}

static void heap_push(struct hr_bpe *s, struct bigram b)
{
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (s->heap[parent].key <= b.key)
            break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = b;
}

static struct bigram heap_pop(struct hr_bpe *s)
{
    struct bigram top = s->heap[0];
    struct bigram last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && s->heap[c + 1].key < s->heap[c].key)
            c++;
        if (last.key <= s->heap[c].key)
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

static void add_bigram(const struct hr_tokenizer *tok, struct hr_bpe *s, int32_t left,
                       int32_t right)
{
    if (left < 0 || right < 0)
        return;
    const struct sym *l = &s->syms[left], *r = &s->syms[right];
    if (l->sid < 0 || r->sid < 0)
        return;
    const struct hr_merge *m = find_merge(tok, l->sid, r->sid);
    if (!m)
        return;
    heap_push(s, (struct bigram){(uint64_t)(uint32_t)m->rank << 32 | (uint32_t)left, right,
                                 l->len + r->len, m->merged});
}

/* Emits the tokens of one symbol (step 3). */
static enum hr_status emit_symbol(const struct hr_tokenizer *tok, const uint8_t *w,
                                  const struct sym *y, struct hr_tokens *out)
{
    int32_t id = y->sid >= 0 ? tok->sid_token[y->sid] : -1;
    if (id >= 0)
        return hr_tokens_push(out, id);
    for (uint32_t k = 0; k < y->len; k++) {
        uint8_t b = w[y->start + k];
        for (unsigned j = 0; j < tok->n_byte_fb[b]; j++)
            if (hr_tokens_push(out, tok->byte_fb[b][j]) != HR_OK)
                return HR_ERR_NOMEM;
    }
    return HR_OK;
}

/* Merges one piece w[0..m) and appends its tokens. */
static enum hr_status bpe_word(const struct hr_tokenizer *tok, struct hr_bpe *s,
                               const uint8_t *w, size_t m, struct hr_tokens *out)
{
    if (tok->ignore_merges) {
        size_t need = 2 * m;
        if (need > s->cap_spell) {
            uint8_t *sp = realloc(s->spell, need);
            if (!sp)
                return HR_ERR_NOMEM;
            s->spell = sp;
            s->cap_spell = need;
        }
        size_t k = 0;
        for (size_t i = 0; i < m; i++)
            k += hr_utf8_encode(hr_gpt2_byte_to_cp(w[i]), s->spell + k);
        int32_t id = hr_vocab_text_to_token(tok, s->spell, k);
        if (id >= 0)
            return hr_tokens_push(out, id);
    }
    if (m > s->cap_syms) {
        struct sym *ns = realloc(s->syms, m * sizeof(*ns));
        if (!ns)
            return HR_ERR_NOMEM;
        s->syms = ns;
        s->cap_syms = m;
    }
    /* At most one pair per adjacent symbols initially, and two per merge. */
    if (3 * m > s->cap_heap) {
        struct bigram *nh = realloc(s->heap, 3 * m * sizeof(*nh));
        if (!nh)
            return HR_ERR_NOMEM;
        s->heap = nh;
        s->cap_heap = 3 * m;
    }
    for (size_t i = 0; i < m; i++)
        s->syms[i] = (struct sym){(int32_t)i - 1, i + 1 < m ? (int32_t)i + 1 : -1, (uint32_t)i, 1,
                                  tok->byte_sid[w[i]]};
    s->n_heap = 0;
    for (size_t i = 1; i < m; i++)
        add_bigram(tok, s, (int32_t)i - 1, (int32_t)i);
    while (s->n_heap) {
        struct bigram b = heap_pop(s);
        int32_t li = (int32_t)(uint32_t)b.key;
        struct sym *l = &s->syms[li], *r = &s->syms[b.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != b.size)
            continue; /* stale: a side changed since the pair was pushed */
        l->len += r->len;
        l->sid = b.merged;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->syms[r->next].prev = li;
        add_bigram(tok, s, l->prev, li);
        add_bigram(tok, s, li, l->next);
    }
    for (int32_t i = 0; i >= 0; i = s->syms[i].next)
        if (emit_symbol(tok, w, &s->syms[i], out) != HR_OK)
            return HR_ERR_NOMEM;
    return HR_OK;
}

/* Pieces up to this many bytes go through the cache. */
#define CACHE_MAX_WORD 1024

static enum hr_status cached_word(const struct hr_tokenizer *tok, struct hr_bpe *s,
                                  uint32_t off, size_t m, struct hr_tokens *out)
{
    const uint8_t *w = s->words + off;
    if (m > CACHE_MAX_WORD)
        return bpe_word(tok, s, w, m, out);
    if (!s->cache) {
        s->cache = calloc(s->cache_slots, sizeof(*s->cache));
        if (!s->cache)
            return bpe_word(tok, s, w, m, out); /* the cache is only an optimization */
        s->cache_mask = s->cache_slots - 1;
    }
    uint32_t h = hr_tok_hash(w, m);
    uint32_t k = h & s->cache_mask;
    for (; s->cache[k].len; k = (k + 1) & s->cache_mask) {
        struct cache_slot *c = &s->cache[k];
        if (c->hash == h && c->len == m && memcmp(s->words + c->off, w, m) == 0) {
            for (uint32_t j = 0; j < c->count; j++)
                if (hr_tokens_push(out, s->cache_toks[c->first + j]) != HR_OK)
                    return HR_ERR_NOMEM;
            return HR_OK;
        }
    }
    size_t before = out->n;
    enum hr_status st = bpe_word(tok, s, w, m, out);
    if (st != HR_OK)
        return st;
    /* Remember it while the table is at most half full. */
    size_t cnt = out->n - before;
    if (cnt == 0 || (s->cache_used + 1) * 2 > s->cache_mask + 1)
        return HR_OK;
    if (s->n_cache_toks + cnt > s->cap_cache_toks) {
        size_t cap = s->cap_cache_toks ? s->cap_cache_toks * 2 : 4096;
        while (cap < s->n_cache_toks + cnt)
            cap *= 2;
        int32_t *nt = realloc(s->cache_toks, cap * sizeof(*nt));
        if (!nt)
            return HR_OK;
        s->cache_toks = nt;
        s->cap_cache_toks = cap;
    }
    memcpy(s->cache_toks + s->n_cache_toks, out->ids + before, cnt * sizeof(int32_t));
    s->cache[k] = (struct cache_slot){off, (uint32_t)m, h, (uint32_t)s->n_cache_toks, (uint32_t)cnt};
    s->n_cache_toks += cnt;
    s->cache_used++;
    return HR_OK;
}

struct hr_bpe *hr_bpe_begin(size_t text_len)
{
    struct hr_bpe *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    /* About one piece per four bytes; at most 64K slots (2 MiB). */
    s->cache_slots = 64;
    while (s->cache_slots < text_len / 2 && s->cache_slots < 65536)
        s->cache_slots *= 2;
    return s;
}

void hr_bpe_end(struct hr_bpe *s)
{
    if (!s)
        return;
    hr_pretok_free(&s->pt);
    free(s->words);
    free(s->syms);
    free(s->heap);
    free(s->spell);
    free(s->cache);
    free(s->cache_toks);
    free(s);
}

enum hr_status hr_bpe_encode(const struct hr_tokenizer *tok, struct hr_bpe *s,
                             const uint8_t *text, size_t len, struct hr_tokens *out,
                             struct hr_err *err)
{
    struct hr_pretok *pt = &s->pt;
    enum hr_status st = hr_pretok_run(pt, tok->pre, text, len, err);
    if (st != HR_OK)
        return st;
    /* Re-encode the code points; a value above U+10FFFF has no UTF-8 form,
     * and llama.cpp throws on it. */
    size_t need = s->n_words + 4 * pt->n;
    if (need > UINT32_MAX)
        return hr_err_set(err, HR_ERR_RANGE, "text of %zu bytes is too long", len);
    if (need > s->cap_words) {
        size_t cap = s->cap_words ? s->cap_words : 4096;
        while (cap < need)
            cap *= 2;
        uint8_t *nw = realloc(s->words, cap);
        if (!nw)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory encoding %zu bytes", len);
        s->words = nw;
        s->cap_words = cap;
    }
    size_t start = 0, in_off = 0;
    for (size_t i = 0; i < pt->n_ends; i++) {
        size_t w0 = s->n_words;
        for (size_t c = start; c < pt->ends[i]; c++) {
            size_t k = hr_utf8_encode(pt->cps[c], s->words + s->n_words);
            if (k == 0)
                return hr_err_set(err, HR_ERR_INVALID,
                                  "text has a UTF-8 sequence for U+%X (above U+10FFFF) near "
                                  "byte %zu",
                                  (unsigned)pt->cps[c], in_off);
            s->n_words += k;
            in_off += k;
        }
        start = pt->ends[i];
        if (cached_word(tok, s, (uint32_t)w0, s->n_words - w0, out) != HR_OK)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
    }
    return HR_OK;
}
