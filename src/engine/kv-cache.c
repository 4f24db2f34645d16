/* kv-cache.c - the paged KV block pool; see kv-cache.h. */
#include "engine/kv-cache.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct hr_kv_pool {
    struct hr_kv_config cfg;
    uint64_t block_bytes;
    uint64_t layer_bytes;   /* K (or V) of one layer in one block */
    size_t head_bytes;     /* one KV head of one layer: block_tokens rows of head_dim values */
    uint32_t n_blocks;
    uint8_t *base;          /* n_blocks * block_bytes of reserved address space */
    size_t map_bytes;
    uint32_t *refcount;     /* per block */
    /* Bit b set: block b is free and below `usable`. Blocks go out lowest
     * first, so a pool whose top is given back (a GPU's, in groups) keeps
     * its used blocks low; first_word: no set bit below it. */
    uint64_t *free_bits;
    uint32_t n_words, first_word;
    uint32_t n_free;        /* bits set */
    uint32_t n_used;        /* blocks with references, wherever they lie */
    uint32_t usable;        /* blocks [0, usable) may be handed out */
    uint32_t used_peak;     /* high-water mark of n_used */
    uint8_t *dirty;         /* per block: pages may be committed */
};

size_t hr_kv_row_bytes(enum hr_ggml_type t, uint32_t head_dim)
{
    switch (t) {
    case HR_GGML_F32: return (size_t)head_dim * 4;
    case HR_GGML_F16: return (size_t)head_dim * 2;
    /* ggml's block_q8_0 / block_q4_0: an f16 scale and 32 values. */
    case HR_GGML_Q8_0: return head_dim % 32 ? 0 : (size_t)head_dim / 32 * (2 + 32);
    case HR_GGML_Q4_0: return head_dim % 32 ? 0 : (size_t)head_dim / 32 * (2 + 16);
    default: return 0;
    }
}

uint64_t hr_kv_block_bytes_for(const struct hr_kv_config *cfg)
{
    uint32_t bt = cfg->block_tokens ? cfg->block_tokens : HR_KV_DEFAULT_BLOCK_TOKENS;
    uint64_t row = (uint64_t)cfg->n_head_kv * hr_kv_row_bytes(cfg->type, cfg->head_dim);
    return 2ull * cfg->n_layer * bt * row;
}

static const struct {
    const char *name;
    enum hr_ggml_type type;
} k_cache_types[] = {
    {"f16", HR_GGML_F16}, {"f32", HR_GGML_F32}, {"q8_0", HR_GGML_Q8_0}, {"q4_0", HR_GGML_Q4_0}};

enum hr_status hr_kv_type_parse(const char *name, enum hr_ggml_type *out, struct hr_err *err)
{
    for (size_t i = 0; name && i < sizeof(k_cache_types) / sizeof(k_cache_types[0]); i++)
        if (strcmp(name, k_cache_types[i].name) == 0) {
            *out = k_cache_types[i].type;
            return HR_OK;
        }
    return hr_err_set(err, HR_ERR_INVALID, "'%s' is not a cache type (f16, f32, q8_0 or q4_0)",
                      name ? name : "");
}

const char *hr_kv_type_name(enum hr_ggml_type t)
{
    for (size_t i = 0; i < sizeof(k_cache_types) / sizeof(k_cache_types[0]); i++)
        if (k_cache_types[i].type == t)
            return k_cache_types[i].name;
    return "?";
}

enum hr_status hr_kv_pool_init(const struct hr_kv_config *cfg, struct hr_kv_pool **out,
                               struct hr_err *err)
{
    *out = NULL;
    if (!cfg->n_layer || !cfg->n_head_kv || !cfg->head_dim)
        return hr_err_set(err, HR_ERR_INVALID, "KV cache needs layers, heads and a head dim");
    if (!hr_kv_row_bytes(cfg->type, 1) && !hr_kv_row_bytes(cfg->type, 32))
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "KV cache type %s (f16, f32, q8_0 or q4_0)",
                          hr_ggml_type_name(cfg->type));
    if (!hr_kv_row_bytes(cfg->type, cfg->head_dim))
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "KV cache type %s needs a head dim that is a multiple of 32; the "
                          "model's head dim is %u",
                          hr_kv_type_name(cfg->type), cfg->head_dim);
    struct hr_kv_pool *p = calloc(1, sizeof(*p));
    if (!p)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    p->cfg = *cfg;
    if (!p->cfg.block_tokens)
        p->cfg.block_tokens = HR_KV_DEFAULT_BLOCK_TOKENS;
    if (p->cfg.block_tokens % 16 != 0) {
        free(p);
        return hr_err_set(err, HR_ERR_INVALID, "KV block size %u is not a multiple of 16",
                          cfg->block_tokens);
    }
    p->head_bytes = (size_t)p->cfg.block_tokens * hr_kv_row_bytes(cfg->type, cfg->head_dim);
    p->layer_bytes = (uint64_t)cfg->n_head_kv * p->head_bytes;
    p->block_bytes = 2 * p->layer_bytes * cfg->n_layer;
    uint64_t n = cfg->budget_bytes / p->block_bytes;
    if (n == 0) {
        unsigned long long block = (unsigned long long)p->block_bytes;
        free(p);
        return hr_err_set(err, HR_ERR_RANGE,
                          "KV budget of %llu bytes holds no block (a block is %llu bytes)",
                          (unsigned long long)cfg->budget_bytes, block);
    }
    if (n > INT32_MAX)
        n = INT32_MAX;
    p->n_blocks = (uint32_t)n;
    p->map_bytes = (size_t)(n * p->block_bytes);
    /* Address space only: pages are committed when a block is first written. */
    p->base = mmap(NULL, p->map_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    p->refcount = calloc(n, sizeof(*p->refcount));
    p->n_words = (uint32_t)((n + 63) / 64);
    p->free_bits = calloc(p->n_words, sizeof(*p->free_bits));
    p->dirty = calloc(n, 1);
    if (p->base == MAP_FAILED || !p->refcount || !p->free_bits || !p->dirty) {
        if (p->base == MAP_FAILED)
            p->base = NULL;
        hr_kv_pool_free(p);
        return hr_err_set(err, HR_ERR_NOMEM, "cannot reserve %zu bytes for the KV cache",
                          (size_t)(n * p->block_bytes));
    }
    for (uint32_t b = 0; b < p->n_blocks; b++)
        p->free_bits[b / 64] |= 1ull << (b % 64);
    p->n_free = p->n_blocks;
    p->usable = p->n_blocks;
    *out = p;
    return HR_OK;
}

void hr_kv_pool_free(struct hr_kv_pool *p)
{
    if (!p)
        return;
    if (p->base)
        munmap(p->base, p->map_bytes);
    free(p->refcount);
    free(p->free_bits);
    free(p->dirty);
    free(p);
}

uint64_t hr_kv_block_bytes(const struct hr_kv_pool *p) { return p->block_bytes; }
uint32_t hr_kv_block_tokens(const struct hr_kv_pool *p) { return p->cfg.block_tokens; }
uint32_t hr_kv_n_blocks(const struct hr_kv_pool *p) { return p->n_blocks; }
uint32_t hr_kv_n_free(const struct hr_kv_pool *p) { return p->n_free; }
uint32_t hr_kv_n_used(const struct hr_kv_pool *p) { return p->n_used; }
uint32_t hr_kv_n_used_peak(const struct hr_kv_pool *p) { return p->used_peak; }
enum hr_ggml_type hr_kv_type(const struct hr_kv_pool *p) { return p->cfg.type; }
uint32_t hr_kv_window(const struct hr_kv_pool *p) { return p->cfg.window; }
size_t hr_kv_head_bytes(const struct hr_kv_pool *p) { return p->head_bytes; }

static void set_free(struct hr_kv_pool *p, uint32_t b)
{
    p->free_bits[b / 64] |= 1ull << (b % 64);
    p->n_free++;
    if (b / 64 < p->first_word)
        p->first_word = b / 64;
}

int32_t hr_kv_alloc_block(struct hr_kv_pool *p)
{
    if (p->n_free == 0)
        return -1;
    while (!p->free_bits[p->first_word])
        p->first_word++;
    const uint64_t w = p->free_bits[p->first_word];
    const int32_t b = (int32_t)(p->first_word * 64 + (uint32_t)__builtin_ctzll(w));
    p->free_bits[p->first_word] = w & (w - 1);
    p->n_free--;
    HR_ASSERT(p->refcount[b] == 0);
    p->refcount[b] = 1;
    p->dirty[b] = 1;
    if (++p->n_used > p->used_peak)
        p->used_peak = p->n_used;
    return b;
}

void hr_kv_ref_block(struct hr_kv_pool *p, int32_t b)
{
    HR_ASSERT(b >= 0 && (uint32_t)b < p->n_blocks && p->refcount[b] > 0);
    p->refcount[b]++;
}

void hr_kv_unref_block(struct hr_kv_pool *p, int32_t b)
{
    HR_ASSERT(b >= 0 && (uint32_t)b < p->n_blocks && p->refcount[b] > 0);
    if (--p->refcount[b] == 0) {
        p->n_used--;
        if ((uint32_t)b < p->usable) /* else it stays out, its bytes about to go */
            set_free(p, (uint32_t)b);
    }
}

void hr_kv_pool_set_usable(struct hr_kv_pool *p, uint32_t n)
{
    if (n > p->n_blocks)
        n = p->n_blocks;
    if (n < p->usable) {
        for (uint32_t b = n; b < p->usable; b++)
            if (p->free_bits[b / 64] & (1ull << (b % 64))) {
                p->free_bits[b / 64] &= ~(1ull << (b % 64));
                p->n_free--;
            }
    } else {
        for (uint32_t b = p->usable; b < n; b++)
            if (p->refcount[b] == 0)
                set_free(p, b);
    }
    p->usable = n;
}

uint32_t hr_kv_pool_usable(const struct hr_kv_pool *p) { return p->usable; }

uint32_t hr_kv_n_used_from(const struct hr_kv_pool *p, uint32_t from)
{
    uint32_t n = 0;
    for (uint32_t b = from; b < p->n_blocks; b++)
        n += p->refcount[b] > 0;
    return n;
}

uint32_t hr_kv_refcount(const struct hr_kv_pool *p, int32_t b)
{
    HR_ASSERT(b >= 0 && (uint32_t)b < p->n_blocks);
    return p->refcount[b];
}

void *hr_kv_block_k(struct hr_kv_pool *p, int32_t b, uint32_t layer)
{
    return p->base + (uint64_t)b * p->block_bytes + 2 * (uint64_t)layer * p->layer_bytes;
}

void *hr_kv_block_v(struct hr_kv_pool *p, int32_t b, uint32_t layer)
{
    return p->base + (uint64_t)b * p->block_bytes + (2 * (uint64_t)layer + 1) * p->layer_bytes;
}

uint64_t hr_kv_pool_trim(struct hr_kv_pool *p)
{
    /* Release whole pages inside each free, dirty block. Blocks are usually
     * much larger than a page; a block smaller than a page keeps its page. */
    long page = sysconf(_SC_PAGESIZE);
    uint64_t released = 0;
    for (uint32_t b = 0; b < p->n_blocks; b++) {
        if (!p->dirty[b] || p->refcount[b])
            continue;
        uintptr_t lo = (uintptr_t)(p->base + (uint64_t)b * p->block_bytes);
        uintptr_t hi = lo + p->block_bytes;
        uintptr_t a = (lo + (uintptr_t)page - 1) & ~((uintptr_t)page - 1);
        uintptr_t e = hi & ~((uintptr_t)page - 1);
        if (e > a && madvise((void *)a, e - a, MADV_DONTNEED) == 0)
            released += e - a;
        p->dirty[b] = 0;
    }
    return released;
}

enum hr_status hr_kv_seq_init(struct hr_kv_seq *seq, uint32_t max_tokens, uint32_t block_tokens,
                              struct hr_err *err)
{
    memset(seq, 0, sizeof(*seq));
    if (!block_tokens)
        block_tokens = HR_KV_DEFAULT_BLOCK_TOKENS;
    seq->cap_blocks = (uint32_t)(((uint64_t)max_tokens + block_tokens - 1) / block_tokens);
    /* Both tables in one allocation: the windowed one is unused (and costs
     * 4 bytes per block of capacity) in a pool without a window. */
    const size_t cap = seq->cap_blocks ? seq->cap_blocks : 1;
    seq->blocks = malloc(2 * cap * sizeof(int32_t));
    if (!seq->blocks)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a block table");
    seq->wblocks = seq->blocks + cap;
    return HR_OK;
}

void hr_kv_seq_clear(struct hr_kv_seq *seq, struct hr_kv_pool *pool)
{
    for (uint32_t i = 0; i < seq->n_blocks; i++)
        hr_kv_unref_block(pool, seq->blocks[i]);
    for (uint32_t i = seq->w_first; i < seq->n_wblocks; i++)
        hr_kv_unref_block(pool, seq->wblocks[i]);
    seq->n_blocks = 0;
    seq->n_wblocks = 0;
    seq->w_first = 0;
    seq->n_tokens = 0;
}

void hr_kv_seq_free(struct hr_kv_seq *seq, struct hr_kv_pool *pool)
{
    if (seq->blocks && pool)
        hr_kv_seq_clear(seq, pool);
    free(seq->blocks);
    memset(seq, 0, sizeof(*seq));
}

uint32_t hr_kv_blocks_needed(uint32_t n_blocks, uint32_t n_tokens, uint32_t block_tokens)
{
    uint32_t want = (uint32_t)(((uint64_t)n_tokens + block_tokens - 1) / block_tokens);
    return want > n_blocks ? want - n_blocks : 0;
}

uint32_t hr_kv_window_first_block(uint32_t window, uint32_t n_tokens, uint32_t block_tokens)
{
    /* The query at the last block boundary, p = floor(n / B) x B, reads keys
     * from max(0, p - window + 1), aligned down to HR_KV_WINDOW_ALIGN. */
    const uint64_t p = (uint64_t)n_tokens / block_tokens * block_tokens;
    if (!window || p < window)
        return 0;
    const uint64_t lo = (p - window + 1) / HR_KV_WINDOW_ALIGN * HR_KV_WINDOW_ALIGN;
    return (uint32_t)(lo / block_tokens);
}

uint32_t hr_kv_seq_new_blocks(const struct hr_kv_seq *seq, const struct hr_kv_pool *pool,
                              uint32_t n_new)
{
    const uint32_t bt = pool->cfg.block_tokens, end = seq->n_tokens + n_new;
    uint32_t need = hr_kv_blocks_needed(seq->n_blocks, end, bt);
    if (pool->cfg.window)
        need += hr_kv_blocks_needed(seq->n_wblocks, end, bt);
    return need;
}

uint32_t hr_kv_seq_held_blocks(const struct hr_kv_seq *seq)
{
    return seq->n_blocks + (seq->n_wblocks - seq->w_first);
}

static uint32_t window_max_blocks(uint32_t w, uint32_t bt, uint32_t step_tokens)
{
    if (!w)
        return 0;
    if (!step_tokens)
        step_tokens = 1;
    /* A step starting in block b (its sequence slid to first(b x B)) that
     * starts at the block's last slot reaches furthest: it ends in block
     * b + ceil((B - 1 + T) / B) - 1. b - first(b x B) grows until the window
     * is full, then repeats with a period dividing 32 blocks: the loop
     * covers both. */
    const uint32_t span = (uint32_t)(((uint64_t)bt - 1 + step_tokens + bt - 1) / bt);
    uint32_t most = 0;
    for (uint64_t b = 0; b <= (uint64_t)w / bt + 64; b++) {
        const uint32_t held =
            (uint32_t)(b + span - hr_kv_window_first_block(w, (uint32_t)(b * bt), bt));
        if (held > most)
            most = held;
    }
    return most;
}

uint32_t hr_kv_window_max_blocks(const struct hr_kv_pool *pool, uint32_t step_tokens)
{
    return window_max_blocks(pool->cfg.window, pool->cfg.block_tokens, step_tokens);
}

uint32_t hr_kv_config_window_blocks(const struct hr_kv_config *cfg, uint32_t step_tokens)
{
    const uint32_t bt = cfg->block_tokens ? cfg->block_tokens : HR_KV_DEFAULT_BLOCK_TOKENS;
    return window_max_blocks(cfg->window, bt, step_tokens);
}

uint32_t hr_kv_config_blocks_for(const struct hr_kv_config *cfg, uint32_t n_tokens,
                                 uint32_t step_tokens)
{
    const uint32_t bt = cfg->block_tokens ? cfg->block_tokens : HR_KV_DEFAULT_BLOCK_TOKENS;
    const uint32_t full = hr_kv_blocks_needed(0, n_tokens, bt);
    if (!cfg->window)
        return full;
    const uint32_t win = window_max_blocks(cfg->window, bt, step_tokens);
    return full + (win < full ? win : full);
}

uint32_t hr_kv_blocks_for(const struct hr_kv_pool *pool, uint32_t n_tokens, uint32_t step_tokens)
{
    return hr_kv_config_blocks_for(&pool->cfg, n_tokens, step_tokens);
}

uint64_t hr_kv_pool_max_tokens(const struct hr_kv_pool *pool, uint32_t step_tokens)
{
    const uint64_t nb = pool->n_blocks, bt = pool->cfg.block_tokens;
    if (!pool->cfg.window)
        return nb * bt;
    /* Full blocks f with f + min(f, w) <= nb. */
    const uint64_t w = hr_kv_window_max_blocks(pool, step_tokens);
    return (nb >= 2 * w ? nb - w : nb / 2) * bt;
}

enum hr_status hr_kv_seq_reserve(struct hr_kv_seq *seq, struct hr_kv_pool *pool, uint32_t n_new,
                                 struct hr_err *err)
{
    uint64_t total = (uint64_t)seq->n_tokens + n_new;
    uint32_t bt = pool->cfg.block_tokens;
    if (total > (uint64_t)seq->cap_blocks * bt)
        return hr_err_set(err, HR_ERR_LIMIT, "sequence of %llu tokens exceeds its %u-token table",
                          (unsigned long long)total, seq->cap_blocks * bt);
    uint32_t need = hr_kv_seq_new_blocks(seq, pool, n_new);
    if (need > pool->n_free)
        return hr_err_set(err, HR_ERR_NOMEM, "KV pool has %u free blocks, %u needed",
                          pool->n_free, need);
    for (uint32_t i = hr_kv_blocks_needed(seq->n_blocks, (uint32_t)total, bt); i > 0; i--)
        seq->blocks[seq->n_blocks++] = hr_kv_alloc_block(pool);
    if (pool->cfg.window)
        for (uint32_t i = hr_kv_blocks_needed(seq->n_wblocks, (uint32_t)total, bt); i > 0; i--)
            seq->wblocks[seq->n_wblocks++] = hr_kv_alloc_block(pool);
    return HR_OK;
}

bool hr_kv_seq_window_held(const struct hr_kv_seq *seq, const struct hr_kv_pool *pool)
{
    return !pool->cfg.window ||
           (seq->n_wblocks == seq->n_blocks &&
            seq->w_first <= hr_kv_window_first_block(pool->cfg.window, seq->n_tokens,
                                                     pool->cfg.block_tokens));
}

uint32_t hr_kv_seq_slide(struct hr_kv_seq *seq, struct hr_kv_pool *pool)
{
    if (!pool->cfg.window)
        return 0;
    uint32_t keep = hr_kv_window_first_block(pool->cfg.window, seq->n_tokens, pool->cfg.block_tokens);
    if (keep > seq->n_wblocks)
        keep = seq->n_wblocks;
    uint32_t n = 0;
    for (; seq->w_first < keep; seq->w_first++, n++) {
        hr_kv_unref_block(pool, seq->wblocks[seq->w_first]);
        seq->wblocks[seq->w_first] = -1;
    }
    return n;
}
