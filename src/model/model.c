/* model.c - bind a GGUF file's weights to the llama-family layout; see model.h. */
#include "model/model.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sys.h"
#include "kernels/matmul.h"

const char *hr_arch_name(enum hr_arch a)
{
    switch (a) {
    case HR_ARCH_LLAMA: return "llama";
    case HR_ARCH_QWEN2: return "qwen2";
    case HR_ARCH_QWEN3: return "qwen3";
    }
    return "?";
}

/* Binds tensor `name`, checking rows of ne0 elements and ne1 rows (ne1 = 0:
 * a vector). Vectors (norms, biases) must be F32, as every converter writes
 * them; matrices any type the kernels support. */
static enum hr_status bind(const struct hr_model *m, const char *name, uint64_t ne0, uint64_t ne1,
                           bool required, struct hr_weight *w, struct hr_err *err)
{
    memset(w, 0, sizeof(*w));
    const struct hr_gguf_tensor *t = hr_gguf_find_tensor(m->gguf, name);
    if (!t) {
        if (!required)
            return HR_OK;
        return hr_err_set(err, HR_ERR_NOT_FOUND, "missing tensor '%s' (required by %s)", name,
                          hr_arch_name(m->arch));
    }
    uint64_t want_dims = ne1 ? 2 : 1;
    bool shape_ok = t->ne[0] == ne0 && (ne1 ? t->ne[1] == ne1 : 1) && t->ne[2] == 1 &&
                    t->ne[3] == 1 && (ne1 || t->ne[1] == 1);
    if (!shape_ok)
        return hr_err_set(err, HR_ERR_INVALID,
                          "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu]",
                          name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                          (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                          (unsigned long long)ne0, (unsigned long long)(ne1 ? ne1 : 1));
    (void)want_dims;
    if (!ne1 && t->type != HR_GGML_F32)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "tensor '%s' has type %s; the engine expects F32 for vectors", name,
                          hr_ggml_type_name(t->type));
    if (ne1 && !hr_matmul_supports(t->type))
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "tensor '%s' has type %s, which the engine cannot compute with", name,
                          hr_ggml_type_name(t->type));
    if (!t->data)
        return hr_err_set(err, HR_ERR_INVALID, "tensor '%s' has no data", name);
    w->type = t->type;
    w->data = t->data;
    w->ne0 = ne0;
    w->ne1 = ne1 ? ne1 : 1;
    w->name = name;
    return HR_OK;
}

/* Tensor names live in the mapping as non-terminated strings; the names we
 * bind by are ours, kept in a per-model table so hr_weight.name stays valid. */
struct names {
    char (*s)[48];
    size_t n, cap;
};

static const char *name_at(struct names *nm, const char *fmt, uint32_t l)
{
    char *dst = nm->s[nm->n++];
    snprintf(dst, 48, fmt, l);
    return dst;
}

struct hr_model_priv {
    struct hr_model pub;
    struct names names;
    void *packed; /* one anonymous mapping for every packed matrix */
    size_t packed_len;
};

static size_t matrices(struct hr_model *m, struct hr_weight **out)
{
    size_t n = 0;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        struct hr_layer *L = &m->layers[l];
        struct hr_weight *w[HR_MODEL_LAYER_MATRICES] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                                        &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < HR_MODEL_LAYER_MATRICES; i++)
            out[n++] = w[i];
    }
    out[n++] = &m->output;
    return n;
}

size_t hr_model_matrices(const struct hr_model *m, const struct hr_weight **out)
{
    /* the same walk for readers; `matrices` itself serves pack_weights, which
     * writes each weight's packed pointer during open */
    return matrices((struct hr_model *)m, (struct hr_weight **)out);
}

/* The packing work, shared by the threads of pack_weights. */
struct pack_job {
    struct hr_weight **w;
    uint8_t **dst; /* per matrix; NULL: not packed */
    size_t *bytes; /* per matrix, packed */
    size_t n;
    _Atomic size_t next;
    /* progress, logged by the calling thread once packing takes a second */
    _Atomic uint64_t done_bytes;
    uint64_t total_bytes;
    double t0;
};

/* Packs matrices until none is left, dropping the file's pages of each
 * (its page-aligned interior: the edges may hold a neighbour) once copied. */
static void pack_run(struct pack_job *j, bool report)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    double t_last = j->t0;
    for (size_t i; (i = atomic_fetch_add(&j->next, 1)) < j->n;) {
        /* Packing a multi-GiB model takes seconds (page faults): say how far
         * it got, once a second, from one thread. */
        const double now = report ? hr_now_seconds() : 0;
        if (report && now - j->t0 >= 1.0 && now - t_last >= 1.0) {
            t_last = now;
            hr_log_info("model", "packing weights: %.0f of %.0f MiB (%.1f s)",
                        (double)atomic_load(&j->done_bytes) / 1048576.0,
                        (double)j->total_bytes / 1048576.0, now - j->t0);
        }
        const struct hr_weight *w = j->w[i];
        if (!j->dst[i])
            continue;
        hr_matmul_pack(w->type, w->data, w->ne0, w->ne1, j->dst[i]);
        const uintptr_t lo = ((uintptr_t)w->data + page - 1) / page * page,
                        hi = ((uintptr_t)w->data + hr_row_bytes(w->type, w->ne0) * w->ne1) /
                             page * page;
        if (lo < hi) {
            /* PAGEOUT drops the pages from the page cache too (they are
             * clean and ours alone), so a cgroup, which charges page cache
             * to us, stops counting them; DONTNEED then unmaps whatever
             * PAGEOUT left (an older kernel without it, pages another
             * process maps). Either way RSS holds the packed copy only. */
#ifdef MADV_PAGEOUT
            (void)madvise((void *)lo, hi - lo, MADV_PAGEOUT);
#endif
            (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
        }
        atomic_fetch_add(&j->done_bytes, j->bytes[i]);
    }
}

static void *pack_worker(void *arg)
{
    pack_run(arg, false);
    return NULL;
}

/* Packs every matrix the kernels want packed into one anonymous mapping, on
 * up to 8 threads (memory-bound: about 1 GB/s per core, page faults
 * included). Without memory for the copy the model runs unpacked. */
static void pack_weights(struct hr_model_priv *priv)
{
    struct hr_model *m = &priv->pub;
    const size_t cap = (size_t)m->hp.n_layer * HR_MODEL_LAYER_MATRICES + 1;
    struct pack_job j = {.w = malloc(cap * sizeof(*j.w)), .dst = calloc(cap, sizeof(*j.dst))};
    if (!j.w || !j.dst)
        goto out;
    j.n = matrices(m, j.w);
    /* each packed copy at a 64-byte aligned offset: off[i], of bytes[i] */
    size_t *bytes = calloc(2 * j.n, sizeof(size_t)), *off = bytes + j.n, total = 0;
    if (!bytes)
        goto out;
    for (size_t i = 0; i < j.n; i++) {
        bytes[i] = hr_matmul_packed_bytes(j.w[i]->type, j.w[i]->ne0, j.w[i]->ne1);
        off[i] = total;
        total += (bytes[i] + 63) / 64 * 64;
    }
    void *map = total ? mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
                      : MAP_FAILED;
    for (size_t i = 0; i < j.n && map != MAP_FAILED; i++) {
        struct hr_weight *w = j.w[i];
        if (!bytes[i])
            continue;
        j.dst[i] = (uint8_t *)map + off[i];
        w->packed = j.dst[i];
        m->weight_bytes += bytes[i] - hr_row_bytes(w->type, w->ne0) * w->ne1;
        m->packed_bytes += bytes[i];
    }
    j.bytes = bytes;
    j.total_bytes = total;
    j.t0 = hr_now_seconds();
    if (map == MAP_FAILED)
        goto out;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    pthread_t th[7];
    size_t started = 0;
    for (long t = 1; t < (ncpu < 8 ? ncpu : 8); t++)
        if (pthread_create(&th[started], NULL, pack_worker, &j) == 0)
            started++;
    pack_run(&j, true);
    for (size_t t = 0; t < started; t++)
        pthread_join(th[t], NULL);
    if (hr_now_seconds() - j.t0 >= 1.0)
        hr_log_info("model", "packing weights: %.0f MiB in %.1f s", (double)total / 1048576.0,
                    hr_now_seconds() - j.t0);
    if (m->output.data == m->tok_embd.data)
        m->tok_embd.packed = m->output.packed;
    (void)mprotect(map, total, PROT_READ);
    priv->packed = map;
    priv->packed_len = total;
out:
    free(j.bytes);
    free(j.w);
    free(j.dst);
}

/* True when tensor data `d` is a matrix that was packed: its file pages
 * were released and the kernels read the packed copy instead. */
static bool is_packed(const struct hr_model *m, const void *d)
{
    if (d == m->output.data && m->output.packed)
        return true;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        const struct hr_layer *L = &m->layers[l];
        const struct hr_weight *w[HR_MODEL_LAYER_MATRICES] = {&L->wq,     &L->wk,   &L->wv,    &L->wo,
                                                              &L->w_gate, &L->w_up, &L->w_down};
        for (size_t i = 0; i < HR_MODEL_LAYER_MATRICES; i++)
            if (w[i]->data == d)
                return w[i]->packed != NULL;
    }
    return false;
}

/*
 * Touches every page of every tensor that stays in the file's layout, so
 * that what is resident for the weights is exactly `weight_bytes` from the
 * start, on every path (serve, run, governed or not, bench): the governor
 * accounts the weights as resident, and a mapping paged in lazily would
 * make measured RSS lag that figure (hiding heap growth in the residual),
 * then catch up at a moment nobody planned. The embedding table is touched
 * whole, not row by row as prompts reach it, for the same reason: its
 * resident size is then a number, not a function of the tokens seen.
 * Packed matrices are skipped: their file pages were released after the
 * copy, and touching them again would make those weights resident twice.
 * The cost is one read of the unpacked tensors at open (the packing read
 * the others already).
 */
static void prefault_unpacked(const struct hr_model *m)
{
    const long page = sysconf(_SC_PAGESIZE);
    volatile uint8_t sink = 0;
    for (uint64_t i = 0; i < hr_gguf_n_tensors(m->gguf); i++) {
        const struct hr_gguf_tensor *t = hr_gguf_tensor_at(m->gguf, i);
        const volatile uint8_t *d = t->data;
        if (!d || !t->n_bytes || is_packed(m, t->data))
            continue;
        for (uint64_t o = 0; o < t->n_bytes; o += (uint64_t)page)
            sink ^= d[o];
        sink ^= d[t->n_bytes - 1];
    }
    (void)sink;
}

enum hr_status hr_model_open(const char *path, struct hr_model **out, struct hr_err *err)
{
    *out = NULL;
    struct hr_model_priv *priv = calloc(1, sizeof(*priv));
    if (!priv)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    struct hr_model *m = &priv->pub;
    enum hr_status st = hr_gguf_open(path, &m->gguf, err);
    if (st != HR_OK)
        goto fail;
    if ((st = hr_hparams_read(m->gguf, &m->hp, err)) != HR_OK)
        goto fail;
    const struct hr_hparams *hp = &m->hp;
    if (strcmp(hp->arch, "llama") == 0)
        m->arch = HR_ARCH_LLAMA;
    else if (strcmp(hp->arch, "qwen2") == 0)
        m->arch = HR_ARCH_QWEN2;
    else if (strcmp(hp->arch, "qwen3") == 0)
        m->arch = HR_ARCH_QWEN3;
    else {
        st = hr_err_set(err, HR_ERR_UNSUPPORTED,
                        "unknown architecture '%s' (headroom runs llama, qwen2 and qwen3)",
                        hp->arch);
        goto fail;
    }
    m->rope_neox = m->arch != HR_ARCH_LLAMA;
    if (hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv != 0) {
        st = hr_err_set(err, HR_ERR_INVALID, "head_count %u is not a multiple of head_count_kv %u",
                        hp->n_head, hp->n_head_kv);
        goto fail;
    }
    if (hp->head_dim_k != hp->head_dim_v || hp->head_dim_k % 2 || hp->n_rot > hp->head_dim_k ||
        hp->n_rot % 2 || hp->head_dim_k > 1024) {
        st = hr_err_set(err, HR_ERR_UNSUPPORTED,
                        "head dims k=%u v=%u rope=%u (need k == v, even, rope <= k, <= 1024)",
                        hp->head_dim_k, hp->head_dim_v, hp->n_rot);
        goto fail;
    }
    if (hp->n_vocab == 0 || hp->n_ff == 0) {
        st = hr_err_set(err, HR_ERR_INVALID, "the model has no vocabulary or no feed-forward size");
        goto fail;
    }
    if (hp->rope_scaling == HR_ROPE_SCALING_YARN) {
        st = hr_err_set(err, HR_ERR_UNSUPPORTED, "yarn RoPE scaling is not implemented yet");
        goto fail;
    }

    priv->names.cap = (size_t)hp->n_layer * 16 + 8;
    priv->names.s = calloc(priv->names.cap, sizeof(*priv->names.s));
    m->layers = calloc(hp->n_layer, sizeof(*m->layers));
    if (!priv->names.s || !m->layers) {
        st = hr_err_set(err, HR_ERR_NOMEM, "out of memory");
        goto fail;
    }
    struct names *nm = &priv->names;
    uint64_t E = hp->n_embd, hd = hp->head_dim_k, qd = (uint64_t)hp->n_head * hd,
             kvd = (uint64_t)hp->n_head_kv * hd, F = hp->n_ff, V = hp->n_vocab;
    if ((st = bind(m, "token_embd.weight", E, V, true, &m->tok_embd, err)) ||
        (st = bind(m, "output_norm.weight", E, 0, true, &m->output_norm, err)) ||
        (st = bind(m, "output.weight", E, V, false, &m->output, err)))
        goto fail;
    if (!m->output.data)
        m->output = m->tok_embd;
    if (hp->rope_scaling == HR_ROPE_SCALING_LLAMA3 &&
        (st = bind(m, "rope_freqs.weight", hp->n_rot / 2, 0, true, &m->rope_freqs, err)))
        goto fail;
    bool bias = m->arch == HR_ARCH_QWEN2, qk_norm = m->arch == HR_ARCH_QWEN3;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        struct hr_layer *L = &m->layers[l];
#define B(field, fmt, ne0, ne1, req)                                                               \
    if ((st = bind(m, name_at(nm, fmt, l), ne0, ne1, req, &L->field, err)))                        \
        goto fail;
        B(attn_norm, "blk.%u.attn_norm.weight", E, 0, true)
        B(wq, "blk.%u.attn_q.weight", E, qd, true)
        B(wk, "blk.%u.attn_k.weight", E, kvd, true)
        B(wv, "blk.%u.attn_v.weight", E, kvd, true)
        B(bq, "blk.%u.attn_q.bias", qd, 0, bias)
        B(bk, "blk.%u.attn_k.bias", kvd, 0, bias)
        B(bv, "blk.%u.attn_v.bias", kvd, 0, bias)
        B(q_norm, "blk.%u.attn_q_norm.weight", hd, 0, qk_norm)
        B(k_norm, "blk.%u.attn_k_norm.weight", hd, 0, qk_norm)
        B(wo, "blk.%u.attn_output.weight", qd, E, true)
        B(ffn_norm, "blk.%u.ffn_norm.weight", E, 0, true)
        B(w_gate, "blk.%u.ffn_gate.weight", E, F, true)
        B(w_up, "blk.%u.ffn_up.weight", E, F, true)
        B(w_down, "blk.%u.ffn_down.weight", F, E, true)
#undef B
    }
    for (uint64_t i = 0; i < hr_gguf_n_tensors(m->gguf); i++)
        m->weight_bytes += hr_gguf_tensor_at(m->gguf, i)->n_bytes;
    m->file_bytes = hr_gguf_file_size(m->gguf);
    pack_weights(priv);
    prefault_unpacked(m);
    *out = m;
    return HR_OK;
fail:
    hr_err_prefix(err, "%s", path);
    hr_model_close(m);
    return st;
}

void hr_model_close(struct hr_model *m)
{
    if (!m)
        return;
    struct hr_model_priv *priv = (struct hr_model_priv *)m;
    hr_gguf_close(m->gguf);
    if (priv->packed)
        munmap(priv->packed, priv->packed_len);
    free(m->layers);
    free(priv->names.s);
    free(priv);
}
