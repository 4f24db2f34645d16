/*
 * spm.c - SentencePiece-style BPE (tokenizer.ggml.model "llama"), as
 * llama.cpp's llm_tokenizer_spm_session does it.
 *
 * The fragment arrives with spaces already spelled U+2581 (encode.c adds
 * the dummy prefix). Then:
 *
 *   1. Symbols are "characters" by llama.cpp's reading: the length a lead
 *      byte announces (hr_utf8_len), cut short at the end of the text; no
 *      other validation, so a stray continuation byte is a symbol of its own.
 *   2. Every adjacent pair whose concatenation is a token (any token type:
 *      control and byte tokens too) goes into a max-heap keyed by that
 *      token's score, ties to the leftmost pair. The best is popped; if a
 *      side has changed since (the sizes no longer add up) it is dropped,
 *      else the two symbols merge and the new neighbour pairs are pushed.
 *   3. Each final symbol is emitted as its token when its text is one (a
 *      merged symbol always is), else byte by byte as <0xXX> tokens
 *      (llama.cpp's resegment: its rev_merge lookup can only succeed for
 *      texts that are tokens, so it never applies here).
 *
 * There is no pre-tokenizer: a whole fragment is one merge problem. But a
 * merge only ever joins two symbols whose concatenation is a token, so
 * between two symbols where no token of the vocabulary could straddle the
 * boundary, no merge ever happens, and the text on either side is merged
 * exactly as if it were alone (the heap's global order only interleaves
 * the two sides' merges). We cut there: before a U+2581 unless some token
 * contains the preceding byte followed by U+2581 (true before most spaces),
 * and around an ASCII byte that no longer token contains (newlines in
 * Llama 2). The tables are built once at load (vocab.c). The chunks are
 * words, so the heap stays small and in cache; O(n log w) overall. Pairs
 * longer than the longest token are never looked up. A chunk's tokens depend
 * only on its bytes, so repeated words come from a per-call cache
 * (struct hr_spm, freed at the end of the hr_tokenizer_encode call).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer-impl.h"
#include "tokenizer/unicode.h"

struct spm_sym {
    int32_t prev, next;
    uint32_t start, len;
};

struct spm_pair {
    float score;
    int32_t left, right;
    uint32_t size;
};

/* a is popped before b. */
static inline bool pair_before(const struct spm_pair *a, const struct spm_pair *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

/* Everything one hr_tokenizer_encode call needs, across its fragments. */
struct hr_spm {
    const struct hr_tokenizer *tok;
    const uint8_t *text; /* the fragment being merged */
    struct spm_sym *syms;
    size_t cap_syms;
    struct spm_pair *heap;
    size_t n_heap, cap_heap;
    uint32_t max_len;
    /* Chunk cache: a chunk's tokens depend only on its bytes (see below). */
    struct spm_slot {
        uint32_t off, len; /* the chunk's bytes in `seen`; len 0 = empty slot */
        uint32_t hash;
        uint32_t first, count; /* into toks */
    } *cache;
    uint32_t cache_mask, cache_used, cache_slots;
    uint8_t *seen;
    size_t n_seen, cap_seen;
    int32_t *toks;
    size_t n_toks, cap_toks;
};

static void push(struct hr_spm *s, struct spm_pair p)
{
    size_t i = s->n_heap++;
    while (i > 0) {
        size_t parent = (i - 1) / 2;
        if (!pair_before(&p, &s->heap[parent]))
            break;
        s->heap[i] = s->heap[parent];
        i = parent;
    }
    s->heap[i] = p;
}

static struct spm_pair pop(struct hr_spm *s)
{
    struct spm_pair top = s->heap[0];
    struct spm_pair last = s->heap[--s->n_heap];
    size_t i = 0, n = s->n_heap;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n)
            break;
        if (c + 1 < n && pair_before(&s->heap[c + 1], &s->heap[c]))
            c++;
        if (!pair_before(&s->heap[c], &last))
            break;
        s->heap[i] = s->heap[c];
        i = c;
    }
    if (n)
        s->heap[i] = last;
    return top;
}

static void try_pair(struct hr_spm *s, int32_t left, int32_t right)
{
    if (left < 0 || right < 0)
        return;
    const struct spm_sym *l = &s->syms[left], *r = &s->syms[right];
    uint32_t size = l->len + r->len;
    if (size > s->max_len)
        return;
    int32_t id = hr_vocab_text_to_token(s->tok, s->text + l->start, size);
    if (id < 0)
        return;
    push(s, (struct spm_pair){s->tok->score[id], left, right, size});
}

/* Merges symbols [a, b) on their own and appends their tokens. */
static enum hr_status spm_chunk(struct hr_spm *s, int32_t a, int32_t b, struct hr_tokens *out)
{
    const struct hr_tokenizer *tok = s->tok;
    size_t need = 3 * (size_t)(b - a);
    if (need > s->cap_heap) {
        struct spm_pair *h = realloc(s->heap, need * sizeof(*h));
        if (!h)
            return HR_ERR_NOMEM;
        s->heap = h;
        s->cap_heap = need;
    }
    for (int32_t i = a; i < b; i++) {
        s->syms[i].prev = i > a ? i - 1 : -1;
        s->syms[i].next = i + 1 < b ? i + 1 : -1;
    }
    s->n_heap = 0;
    for (int32_t i = a + 1; i < b; i++)
        try_pair(s, i - 1, i);
    while (s->n_heap) {
        struct spm_pair p = pop(s);
        struct spm_sym *l = &s->syms[p.left], *r = &s->syms[p.right];
        if (l->len == 0 || r->len == 0 || l->len + r->len != p.size)
            continue; /* stale: a side changed since the pair was pushed */
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            s->syms[r->next].prev = p.left;
        try_pair(s, l->prev, p.left);
        try_pair(s, p.left, l->next);
    }
    for (int32_t i = a; i >= 0; i = s->syms[i].next) {
        const struct spm_sym *y = &s->syms[i];
        int32_t id = hr_vocab_text_to_token(tok, s->text + y->start, y->len);
        if (id >= 0) {
            if (hr_tokens_push(out, id) != HR_OK)
                return HR_ERR_NOMEM;
            continue;
        }
        for (uint32_t k = 0; k < y->len; k++) {
            int32_t bt = tok->byte_tok[s->text[y->start + k]];
            /* llama.cpp throws when a vocabulary lacks the byte token; we
             * use <unk> if there is one, else drop the byte. */
            if (bt < 0)
                bt = tok->unk;
            if (bt >= 0 && hr_tokens_push(out, bt) != HR_OK)
                return HR_ERR_NOMEM;
        }
    }
    return HR_OK;
}

/* Chunks up to this many bytes go through the cache. */
#define CACHE_MAX_CHUNK 256

/*
 * spm_chunk through the cache. A chunk starts and ends on symbol
 * boundaries, so the same bytes are cut into the same symbols wherever
 * they occur, and merge the same way: its tokens are a function of its
 * bytes.
 */
static enum hr_status cached_chunk(struct hr_spm *s, int32_t a, int32_t b, struct hr_tokens *out)
{
    const uint8_t *w = s->text + s->syms[a].start;
    size_t m = s->syms[b - 1].start + s->syms[b - 1].len - s->syms[a].start;
    if (m > CACHE_MAX_CHUNK || b - a == 1)
        return spm_chunk(s, a, b, out);
    if (!s->cache) {
        s->cache = calloc(s->cache_slots, sizeof(*s->cache));
        if (!s->cache)
            return spm_chunk(s, a, b, out); /* the cache is only an optimization */
        s->cache_mask = s->cache_slots - 1;
    }
    uint32_t h = hr_tok_hash(w, m);
    uint32_t k = h & s->cache_mask;
    for (; s->cache[k].len; k = (k + 1) & s->cache_mask) {
        const struct spm_slot *c = &s->cache[k];
        if (c->hash == h && c->len == m && memcmp(s->seen + c->off, w, m) == 0) {
            for (uint32_t j = 0; j < c->count; j++)
                if (hr_tokens_push(out, s->toks[c->first + j]) != HR_OK)
                    return HR_ERR_NOMEM;
            return HR_OK;
        }
    }
    size_t before = out->n;
    enum hr_status st = spm_chunk(s, a, b, out);
    size_t cnt = out->n - before;
    if (st != HR_OK || cnt == 0 || (s->cache_used + 1) * 2 > s->cache_mask + 1 ||
        s->n_seen + m > UINT32_MAX || s->n_toks + cnt > UINT32_MAX)
        return st;
    if (s->n_seen + m > s->cap_seen) {
        size_t cap = s->cap_seen ? s->cap_seen * 2 : 16384;
        while (cap < s->n_seen + m)
            cap *= 2;
        uint8_t *ns = realloc(s->seen, cap);
        if (!ns)
            return HR_OK;
        s->seen = ns;
        s->cap_seen = cap;
    }
    if (s->n_toks + cnt > s->cap_toks) {
        size_t cap = s->cap_toks ? s->cap_toks * 2 : 4096;
        while (cap < s->n_toks + cnt)
            cap *= 2;
        int32_t *nt = realloc(s->toks, cap * sizeof(*nt));
        if (!nt)
            return HR_OK;
        s->toks = nt;
        s->cap_toks = cap;
    }
    memcpy(s->seen + s->n_seen, w, m);
    memcpy(s->toks + s->n_toks, out->ids + before, cnt * sizeof(int32_t));
    s->cache[k] = (struct spm_slot){(uint32_t)s->n_seen, (uint32_t)m, h, (uint32_t)s->n_toks,
                                    (uint32_t)cnt};
    s->n_seen += m;
    s->n_toks += cnt;
    s->cache_used++;
    return HR_OK;
}

/* True when no merge can join symbol i - 1 and symbol i (see the top). */
static bool cut_before(const struct hr_spm *s, size_t i)
{
    const struct hr_tokenizer *tok = s->tok;
    const struct spm_sym *p = &s->syms[i - 1], *y = &s->syms[i];
    const uint8_t *t = s->text;
    if (y->len == 3 && t[y->start] == 0xE2 && t[y->start + 1] == 0x96 && t[y->start + 2] == 0x81 &&
        tok->spm_cut_before_space[t[y->start - 1]])
        return true;
    return (y->len == 1 && t[y->start] < 128 && tok->spm_lonely[t[y->start]]) ||
           (p->len == 1 && t[p->start] < 128 && tok->spm_lonely[t[p->start]]);
}

struct hr_spm *hr_spm_begin(const struct hr_tokenizer *tok, size_t text_len)
{
    struct hr_spm *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    s->tok = tok;
    s->max_len = tok->max_token_len;
    s->cache_slots = 64;
    while (s->cache_slots < text_len / 4 && s->cache_slots < 65536)
        s->cache_slots *= 2;
    return s;
}

void hr_spm_end(struct hr_spm *s)
{
    if (!s)
        return;
    free(s->syms);
    free(s->heap);
    free(s->cache);
    free(s->seen);
    free(s->toks);
    free(s);
}

enum hr_status hr_spm_encode(struct hr_spm *s, const uint8_t *text, size_t len,
                             struct hr_tokens *out, struct hr_err *err)
{
    if (len == 0)
        return HR_OK;
    if (len > INT32_MAX)
        return hr_err_set(err, HR_ERR_RANGE, "text of %zu bytes is too long", len);
    if (len > s->cap_syms) {
        struct spm_sym *ns = realloc(s->syms, len * sizeof(*ns));
        if (!ns)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
        s->syms = ns;
        s->cap_syms = len;
    }
    s->text = text;
    size_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t l = hr_utf8_len(text[off]);
        if (l > len - off)
            l = len - off;
        s->syms[n] = (struct spm_sym){-1, -1, (uint32_t)off, (uint32_t)l};
        off += l;
    }
    /* Cut into chunks no merge crosses; each is its own (small) problem. */
    size_t a = 0;
    for (size_t i = 1; i <= n; i++) {
        if (i < n && !cut_before(s, i))
            continue;
        if (cached_chunk(s, (int32_t)a, (int32_t)i, out) != HR_OK)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
        a = i;
    }
    return HR_OK;
}
