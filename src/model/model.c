/* model.c - bind a GGUF file's weights to the llama-family layout; see model.h. */
#include "model/model.h"

#include <fcntl.h>
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
    case HR_ARCH_QWEN2MOE: return "qwen2moe";
    case HR_ARCH_QWEN3MOE: return "qwen3moe";
    case HR_ARCH_GPTOSS: return "gpt-oss";
    case HR_ARCH_QWEN35: return "qwen35";
    case HR_ARCH_QWEN35MOE: return "qwen35moe";
    case HR_ARCH_QWEN3NEXT: return "qwen3next";
    }
    return "?";
}

/* Which FFN kind an architecture's layers have. */
enum ffn_rule { FFN_DENSE_ONLY, FFN_MOE_ONLY, FFN_MOE_IF_EXPERTS };

/* An architecture as data: the attention variant's traits and the FFN layer
 * kind with its MoE parameters. Values follow llama.cpp's src/models/<arch>.cpp
 * (what it passes to build_moe_ffn), not the metadata, since llama.cpp reads
 * e.g. no expert_weights_norm key for these architectures. */
struct arch_desc {
    const char *name;
    enum hr_arch arch;
    bool rope_neox, qkv_bias, qk_norm;
    enum ffn_rule ffn;
    enum hr_moe_gating gating;
    bool norm_w;
    enum hr_shexp_kind shexp;
    /* gpt-oss's traits (zero for the others): */
    bool o_bias, sinks, exp_bias; /* attn_output.bias, attn_sinks, ffn_*_exps.bias */
    enum hr_ffn_act act;
    uint32_t swa_period;          /* sliding-window period when the metadata names none
                                     (llama.cpp's set_swa_pattern: layer l is windowed
                                     iff l % period < period - 1); 0: no windows */
    const char *ffn_norm;         /* the pre-FFN norm's name; NULL: "ffn_norm" */
    bool hybrid;                  /* Gated DeltaNet layers + gated attention (qwen35*) */
};

static const struct arch_desc arch_descs[] = {
    {"llama", HR_ARCH_LLAMA, false, false, false, FFN_MOE_IF_EXPERTS, HR_MOE_GATING_SOFTMAX, true,
     HR_SHEXP_NONE, .act = HR_FFN_ACT_SWIGLU},
    {"qwen2", HR_ARCH_QWEN2, true, true, false, FFN_DENSE_ONLY, HR_MOE_GATING_SOFTMAX, false,
     HR_SHEXP_NONE, .act = HR_FFN_ACT_SWIGLU},
    {"qwen3", HR_ARCH_QWEN3, true, false, true, FFN_DENSE_ONLY, HR_MOE_GATING_SOFTMAX, false,
     HR_SHEXP_NONE, .act = HR_FFN_ACT_SWIGLU},
    {"qwen2moe", HR_ARCH_QWEN2MOE, true, true, false, FFN_MOE_ONLY, HR_MOE_GATING_SOFTMAX, false,
     HR_SHEXP_SIGMOID, .act = HR_FFN_ACT_SWIGLU},
    {"qwen3moe", HR_ARCH_QWEN3MOE, true, false, true, FFN_MOE_ONLY, HR_MOE_GATING_SOFTMAX, true,
     HR_SHEXP_NONE, .act = HR_FFN_ACT_SWIGLU},
    /* src/models/openai-moe.cpp: build_moe_ffn(..., SWIGLU_OAI_MOE, norm_w false, ...,
     * SOFTMAX_WEIGHT); LLAMA_SWA_TYPE_STANDARD with period 2 */
    {"gpt-oss", HR_ARCH_GPTOSS, true, true, false, FFN_MOE_ONLY, HR_MOE_GATING_SOFTMAX_WEIGHT,
     false, HR_SHEXP_NONE, true, true, true, HR_FFN_ACT_SWIGLU_OAI, 2, "post_attention_norm", false},
    /* src/models/qwen35.cpp, qwen35moe.cpp, qwen3next.cpp: three of four
     * layers Gated DeltaNet, the rest gated attention */
    {"qwen35", HR_ARCH_QWEN35, true, false, true, FFN_DENSE_ONLY, HR_MOE_GATING_SOFTMAX, false,
     HR_SHEXP_NONE, .act = HR_FFN_ACT_SWIGLU, .ffn_norm = "post_attention_norm", .hybrid = true},
    {"qwen35moe", HR_ARCH_QWEN35MOE, true, false, true, FFN_MOE_ONLY, HR_MOE_GATING_SOFTMAX, true,
     HR_SHEXP_SIGMOID, .act = HR_FFN_ACT_SWIGLU, .ffn_norm = "post_attention_norm",
     .hybrid = true},
    {"qwen3next", HR_ARCH_QWEN3NEXT, true, false, true, FFN_MOE_ONLY, HR_MOE_GATING_SOFTMAX, true,
     HR_SHEXP_SIGMOID, .act = HR_FFN_ACT_SWIGLU, .ffn_norm = "post_attention_norm",
     .hybrid = true},
};

/* Binds tensor `name`, checking rows of ne0 elements and ne1 rows (ne1 = 0:
 * a vector). Vectors (norms, biases) must be F32, as every converter writes
 * them; matrices any type the kernels support. */
static enum hr_status bind3(const struct hr_model *m, const char *name, uint64_t ne0,
                            uint64_t ne1, uint64_t ne2, bool required, struct hr_weight *w,
                            struct hr_err *err);

static enum hr_status bind(const struct hr_model *m, const char *name, uint64_t ne0, uint64_t ne1,
                           bool required, struct hr_weight *w, struct hr_err *err)
{
    return bind3(m, name, ne0, ne1, 1, required, w, err);
}

/* bind for a stack of ne2 matrices [ne0, ne1] (experts); ne2 = 1: bind. */
static enum hr_status bind3(const struct hr_model *m, const char *name, uint64_t ne0,
                            uint64_t ne1, uint64_t ne2, bool required, struct hr_weight *w,
                            struct hr_err *err)
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
    bool shape_ok = t->ne[0] == ne0 && (ne1 ? t->ne[1] == ne1 : 1) && t->ne[2] == ne2 &&
                    t->ne[3] == 1 && (ne1 || t->ne[1] == 1);
    if (!shape_ok)
        return hr_err_set(err, HR_ERR_INVALID,
                          "tensor '%s' has shape [%llu, %llu, %llu, %llu], expected [%llu, %llu, "
                          "%llu]",
                          name, (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
                          (unsigned long long)t->ne[2], (unsigned long long)t->ne[3],
                          (unsigned long long)ne0, (unsigned long long)(ne1 ? ne1 : 1),
                          (unsigned long long)ne2);
    (void)want_dims;
    if (!ne1 && t->type != HR_GGML_F32)
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "tensor '%s' has type %s; the engine expects F32 for vectors", name,
                          hr_ggml_type_name(t->type));
    if (ne1 && !hr_matmul_supports(t->type))
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "tensor '%s' has type %u (%s), which the engine cannot compute with",
                          name, (unsigned)t->type, hr_ggml_type_name(t->type));
    if (!t->data)
        return hr_err_set(err, HR_ERR_INVALID, "tensor '%s' has no data", name);
    w->type = t->type;
    w->data = t->data;
    w->ne0 = ne0;
    w->ne1 = ne1 ? ne1 : 1;
    w->name = name;
    w->n_mat = ne2;
    w->mat_bytes = ne1 ? hr_row_bytes(t->type, ne0) * ne1 : 0;
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
    int fd; /* for_device: the file, for posix_fadvise (hr_model_release_pages); else -1 */
    char *path; /* for_device: the file's path, should the CPU take the model after all */
};

static size_t matrices(struct hr_model *m, struct hr_weight **out)
{
    size_t n = 0;
    for (uint32_t l = 0; l < m->hp.n_layer; l++) {
        struct hr_layer *L = &m->layers[l];
        struct hr_weight *w[] = {
            &L->wq,         &L->wk,         &L->wv,         &L->wo,         &L->ssm_qkv,
            &L->ssm_z,      &L->ssm_beta,   &L->ssm_alpha,  &L->ssm_ba,     &L->ssm_out,
            &L->w_gate,
            &L->w_up,       &L->w_down,     &L->gate_inp,   &L->gate_exps,  &L->up_exps,
            &L->down_exps,  &L->gate_shexp, &L->up_shexp,   &L->down_shexp,
        };
        /* at most HR_MODEL_LAYER_MATRICES are present: a layer has one
         * mixer kind and one FFN kind */
        for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++)
            if (w[i]->data)
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

/* Where the file's pages go once copied (pack_weights sets it up). */
struct pack_src {
    uintptr_t base; /* the mapping's start: file offset 0 */
    int fd;         /* the file, for posix_fadvise; -1: not opened */
};

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
    struct pack_src src;
};

/*
 * Packing holds, for a moment, a matrix's file pages and its packed copy
 * together. Done a whole tensor at a time, that moment costs the largest
 * tensor twice: a tied embedding of 151,936 x 256 Q8_0 is 39 MiB, which
 * lifted an idle qwen35moe demo server's peak 14.7 MiB above its resting
 * RSS, past a --memory-limit its rest fitted. So each matrix is packed in
 * slices of about PACK_SLICE_BYTES of the file (whole panels: the packed
 * layouts keep 32-row panels (Q8_0) and 4-row groups (F16) apart, so
 * rows [r0, r1) pack alone at hr_matmul_packed_bytes(k, r0) when r0 is a
 * multiple of 32, byte for byte what the whole matrix gives: test-model
 * checks it), and the file's pages of each slice are released as soon as
 * it is copied. The transient is then one slice per packing thread (plus
 * the kernel's fault-around, 64 KiB), not one tensor: that model's load
 * peak fell to 0.6 MiB above its rest (tests/cli/load-peak.sh holds it).
 */
#define PACK_SLICE_BYTES ((size_t)256 << 10)
#define PACK_SLICE_ROW_ALIGN 32 /* a multiple of both panel heights */
#define PACK_FAULT_AROUND_BYTES ((uintptr_t)64 << 10) /* fault_around_bytes' default */

/*
 * Releases the file's pages in [lo, hi) (page-aligned), once copied:
 * DONTNEED unmaps them, so RSS no longer counts them; POSIX_FADV_DONTNEED
 * then drops them from the page cache (they are clean; a page another
 * process maps stays), so a cgroup, which charges page cache to us, stops
 * counting them too, and the kernel's fault-around cannot map them back.
 * (MADV_PAGEOUT does both in one call, but it reclaims page by page with a
 * TLB flush each call: on the 44 MiB qwen35moe demo model, in 256 KiB
 * slices, it made loading 0.33 s -> 0.57 s; this costs nothing measurable.)
 */
static void drop_file_pages(const struct pack_src *src, uintptr_t lo, uintptr_t hi)
{
    if (lo >= hi)
        return;
    (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
    if (src->fd >= 0)
        (void)posix_fadvise(src->fd, (off_t)(lo - src->base), (off_t)(hi - lo),
                            POSIX_FADV_DONTNEED);
}

/* Packs matrix w into dst slice by slice, releasing the file's pages as it
 * goes: only the page-aligned interior of the tensor, since its first and
 * last pages may hold a neighbour that is still read in place. */
static void pack_matrix(const struct pack_src *src, const struct hr_weight *w, uint8_t *dst)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const size_t row_bytes = w->mat_bytes / w->ne1;
    size_t rows = PACK_SLICE_BYTES / (row_bytes ? row_bytes : 1);
    rows = rows < PACK_SLICE_ROW_ALIGN ? PACK_SLICE_ROW_ALIGN
                                       : rows / PACK_SLICE_ROW_ALIGN * PACK_SLICE_ROW_ALIGN;
    const uintptr_t start = (uintptr_t)w->data,
                    first_page = (start + page - 1) / page * page,
                    end_page = (start + w->mat_bytes * w->n_mat) / page * page;
    uintptr_t dropped = first_page; /* the file's pages below it were released */
    for (uint64_t e = 0; e < w->n_mat; e++) { /* each expert's slice on its own */
        const uint8_t *in = (const uint8_t *)w->data + e * w->mat_bytes;
        uint8_t *out = dst + e * w->packed_mat_bytes;
        for (size_t r0 = 0; r0 < w->ne1; r0 += rows) {
            const size_t n = w->ne1 - r0 < rows ? w->ne1 - r0 : rows;
            hr_matmul_pack(w->type, in + r0 * row_bytes, w->ne0, n,
                           out + hr_matmul_packed_bytes(w->type, w->ne0, r0));
            uintptr_t done = ((uintptr_t)in + (r0 + n) * row_bytes) / page * page;
            if (done > end_page)
                done = end_page;
            /* The kernel's fault-around maps the pages of the page cache
             * around a fault (a 64 KiB aligned window), which can bring back
             * pages this loop released just before the slice began, where
             * the page cache still had them: release that much again. */
            const uintptr_t lo = dropped - first_page > PACK_FAULT_AROUND_BYTES
                                     ? dropped - PACK_FAULT_AROUND_BYTES
                                     : first_page;
            if (done > dropped) {
                drop_file_pages(src, lo, done);
                dropped = done;
            }
        }
    }
    /* Whatever a fault-around mapped again further back: one sweep. */
    drop_file_pages(src, first_page, end_page);
}

/* Packs matrices until none is left. */
static void pack_run(struct pack_job *j, bool report)
{
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
        if (!j->dst[i])
            continue;
        pack_matrix(&j->src, j->w[i], j->dst[i]);
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
static void pack_weights(struct hr_model_priv *priv, const char *path)
{
    struct hr_model *m = &priv->pub;
    const size_t cap = (size_t)m->hp.n_layer * HR_MODEL_LAYER_MATRICES + 1;
    struct pack_job j = {.w = malloc(cap * sizeof(*j.w)), .dst = calloc(cap, sizeof(*j.dst)),
                         .src.fd = -1};
    if (!j.w || !j.dst)
        goto out;
    j.n = matrices(m, j.w);
    /* each packed copy at a 64-byte aligned offset: off[i], of bytes[i] */
    size_t *bytes = calloc(2 * j.n, sizeof(size_t)), *off = bytes + j.n, total = 0;
    if (!bytes)
        goto out;
    for (size_t i = 0; i < j.n; i++) {
        /* a stack of experts: each slice packed on its own, 64-byte aligned */
        const size_t one = hr_matmul_packed_bytes(j.w[i]->type, j.w[i]->ne0, j.w[i]->ne1);
        j.w[i]->packed_mat_bytes = (one + 63) / 64 * 64;
        bytes[i] = j.w[i]->n_mat > 1 ? j.w[i]->packed_mat_bytes * j.w[i]->n_mat : one;
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
        m->weight_bytes += bytes[i] - w->mat_bytes * w->n_mat;
        m->packed_bytes += bytes[i];
    }
    j.bytes = bytes;
    j.total_bytes = total;
    j.t0 = hr_now_seconds();
    if (map == MAP_FAILED)
        goto out;
    j.src.base = (uintptr_t)hr_gguf_bytes(m->gguf);
    /* The file again, for posix_fadvise only (hr_gguf_open closed its fd).
     * Advice on a file that replaced it since would only drop that file's
     * cached pages; -1: the page cache keeps ours, which costs a cgroup's
     * accounting, not correctness. */
    j.src.fd = open(path, O_RDONLY | O_CLOEXEC);
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
    if (j.src.fd >= 0)
        close(j.src.fd);
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
    const struct hr_weight **w = malloc(((size_t)m->hp.n_layer * HR_MODEL_LAYER_MATRICES + 1) *
                                        sizeof(*w));
    if (!w)
        return false; /* touching a packed tensor again costs memory, not correctness */
    const size_t n = hr_model_matrices(m, w);
    bool packed = false;
    for (size_t i = 0; i < n && !packed; i++)
        packed = w[i]->data == d && w[i]->packed != NULL;
    free(w);
    return packed;
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

/*
 * Fills m->moe from the architecture's description and the metadata. An
 * architecture that is MoE by definition needs expert_count and
 * expert_used_count; llama is MoE (Mixtral) exactly when expert_count > 0.
 * The expert width falls back as llama.cpp's loaders do: Mixtral's experts
 * are feed_forward_length wide, qwen2moe's default to n_ff / k, qwen3moe
 * has no default.
 */
static enum hr_status moe_describe(struct hr_model *m, const struct arch_desc *ad,
                                   struct hr_err *err)
{
    const struct hr_hparams *hp = &m->hp;
    struct hr_moe *mo = &m->moe;
    memset(mo, 0, sizeof(*mo));
    if (ad->ffn == FFN_DENSE_ONLY || (ad->ffn == FFN_MOE_IF_EXPERTS && hp->n_expert == 0))
        return HR_OK;
    if (hp->n_expert == 0)
        return hr_err_set(err, HR_ERR_INVALID, "key '%s.expert_count' is missing or 0 (required "
                          "by %s)", hp->arch, hp->arch);
    if (hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert)
        return hr_err_set(err, HR_ERR_INVALID, "key '%s.expert_used_count' is %u; it must be in "
                          "1..%s.expert_count (%u)", hp->arch, hp->n_expert_used, hp->arch,
                          hp->n_expert);
    if (hp->n_expert > HR_MOE_MAX_EXPERTS || hp->n_expert_used > HR_MOE_MAX_USED)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "%u experts, %u used: headroom handles up to "
                          "%d and %d", hp->n_expert, hp->n_expert_used, HR_MOE_MAX_EXPERTS,
                          HR_MOE_MAX_USED);
    mo->n_expert = hp->n_expert;
    mo->n_expert_used = hp->n_expert_used;
    mo->gating = ad->gating;
    mo->act = ad->act;
    mo->norm_w = ad->norm_w;
    mo->w_scale = hp->expert_weights_scale;
    mo->shexp = ad->shexp;
    mo->n_ff_exp = hp->n_ff_exp;
    if (!mo->n_ff_exp && ad->arch == HR_ARCH_LLAMA)
        mo->n_ff_exp = hp->n_ff;
    else if (!mo->n_ff_exp && ad->arch == HR_ARCH_QWEN2MOE)
        mo->n_ff_exp = hp->n_ff / hp->n_expert_used;
    if (!mo->n_ff_exp)
        return hr_err_set(err, HR_ERR_INVALID, "key '%s.expert_feed_forward_length' is missing "
                          "or 0 (required by %s)", hp->arch, hp->arch);
    if (mo->shexp != HR_SHEXP_NONE) {
        mo->n_ff_shexp = hp->n_ff_shexp ? hp->n_ff_shexp : hp->n_ff;
        if (!mo->n_ff_shexp)
            return hr_err_set(err, HR_ERR_INVALID, "key '%s.expert_shared_feed_forward_length' "
                              "is missing or 0 (required by %s's shared expert)", hp->arch,
                              hp->arch);
    }
    return HR_OK;
}

/* Whether layer l is a Gated DeltaNet layer, as llama.cpp decides: the
 * attention.recurrent_layers flags when present, else every layer but each
 * full_attention_interval-th (default 4: layers 3, 7, ... are attention). */
static bool layer_is_recurrent(const struct hr_hparams *hp, uint32_t l)
{
    if (hp->has_recurrent_layers)
        return l < 256 && (hp->recurrent_layers[l / 64] >> (l % 64)) & 1;
    const uint32_t every = hp->full_attn_interval ? hp->full_attn_interval : 4;
    return (l + 1) % every != 0;
}

/*
 * Fills m->dn from the ssm.* keys of a hybrid model and checks what the
 * engine relies on: equal k and v head dims, v heads a multiple of k heads,
 * and RoPE sections that reduce to plain NeoX RoPE on text. (llama.cpp runs
 * these models with interleaved M-RoPE; for text every position component
 * is the same position, except the fourth, which is 0: a dimension pair
 * that the sections would give to the fourth component would not rotate.)
 */
static enum hr_status deltanet_describe(struct hr_model *m, struct hr_err *err)
{
    const struct hr_hparams *hp = &m->hp;
    struct hr_deltanet *dn = &m->dn;
    memset(dn, 0, sizeof(*dn));
    if (!hp->ssm_d_conv || !hp->ssm_d_inner || !hp->ssm_d_state || !hp->ssm_dt_rank ||
        !hp->ssm_n_group)
        return hr_err_set(err, HR_ERR_INVALID, "%s needs the keys %s.ssm.conv_kernel, "
                          "ssm.inner_size, ssm.state_size, ssm.time_step_rank and "
                          "ssm.group_count (one is missing or 0)", hp->arch, hp->arch);
    dn->n_k_heads = hp->ssm_n_group;
    dn->n_v_heads = hp->ssm_dt_rank;
    dn->head_k_dim = hp->ssm_d_state;
    dn->head_v_dim = hp->ssm_d_inner / hp->ssm_dt_rank;
    dn->conv_kernel = hp->ssm_d_conv;
    dn->k_blocked = m->arch == HR_ARCH_QWEN3NEXT;
    if (dn->head_v_dim * dn->n_v_heads != hp->ssm_d_inner || dn->head_v_dim != dn->head_k_dim ||
        dn->n_v_heads % dn->n_k_heads != 0 || dn->conv_kernel < 2 || dn->conv_kernel > 16 ||
        dn->head_k_dim > 1024)
        return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s.ssm: inner_size %u, state_size %u, "
                          "time_step_rank %u, group_count %u, conv_kernel %u (need equal k and "
                          "v head dims up to 1024, v heads a multiple of k heads, a kernel of "
                          "2..16)", hp->arch, hp->ssm_d_inner, hp->ssm_d_state, hp->ssm_dt_rank,
                          hp->ssm_n_group, hp->ssm_d_conv);
    dn->key_dim = dn->n_k_heads * dn->head_k_dim;
    dn->value_dim = dn->n_v_heads * dn->head_v_dim;
    dn->conv_dim = 2 * dn->key_dim + dn->value_dim;
    dn->conv_floats = (uint64_t)(dn->conv_kernel - 1) * dn->conv_dim;
    dn->ssm_floats = (uint64_t)dn->n_v_heads * dn->head_v_dim * dn->head_k_dim;
    const int32_t *sec = hp->rope_sections;
    const int32_t n_sec = sec[0] + sec[1] + sec[2] + sec[3];
    for (uint32_t i = 0; n_sec > 0 && i < hp->n_rot / 2; i++) {
        const int32_t sector = (int32_t)i % n_sec;
        const bool text = (sector % 3 == 0 && sector < 3 * sec[0]) ||
                          (sector % 3 == 1 && sector < 3 * sec[1]) ||
                          (sector % 3 == 2 && sector < 3 * sec[2]);
        if (!text)
            return hr_err_set(err, HR_ERR_UNSUPPORTED, "%s.rope.dimension_sections [%d, %d, %d, "
                              "%d] give rotary pair %u to the fourth position component; "
                              "headroom runs text only", hp->arch, sec[0], sec[1], sec[2],
                              sec[3], i);
    }
    return HR_OK;
}

enum hr_status hr_model_open(const char *path, struct hr_model **out, struct hr_err *err)
{
    return hr_model_open_ex(path, NULL, out, err);
}

enum hr_status hr_model_open_ex(const char *path, const struct hr_model_open_opts *opts,
                                struct hr_model **out, struct hr_err *err)
{
    *out = NULL;
    struct hr_model_priv *priv = calloc(1, sizeof(*priv));
    if (!priv)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    priv->fd = -1;
    struct hr_model *m = &priv->pub;
    m->for_device = opts && opts->device;
    enum hr_status st = hr_gguf_open(path, &m->gguf, err);
    if (st != HR_OK)
        goto fail;
    if ((st = hr_hparams_read(m->gguf, &m->hp, err)) != HR_OK)
        goto fail;
    const struct hr_hparams *hp = &m->hp;
    const struct arch_desc *ad = NULL;
    for (size_t i = 0; i < sizeof(arch_descs) / sizeof(arch_descs[0]); i++)
        if (strcmp(hp->arch, arch_descs[i].name) == 0)
            ad = &arch_descs[i];
    if (!ad) {
        st = hr_err_set(err, HR_ERR_UNSUPPORTED,
                        "unknown architecture '%s' (headroom runs llama (with or without "
                        "experts), qwen2, qwen3, qwen2moe, qwen3moe, gpt-oss, qwen35, qwen35moe "
                        "and qwen3next)",
                        hp->arch);
        goto fail;
    }
    m->arch = ad->arch;
    m->rope_neox = ad->rope_neox;
    m->attn_gated = ad->hybrid;
    if ((st = moe_describe(m, ad, err)) != HR_OK ||
        (ad->hybrid && (st = deltanet_describe(m, err)) != HR_OK))
        goto fail;
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
    if (hp->n_vocab == 0 || (hp->n_ff == 0 && !m->moe.n_expert)) {
        st = hr_err_set(err, HR_ERR_INVALID, "the model has no vocabulary or no feed-forward size");
        goto fail;
    }
    if (ad->swa_period && !hp->n_swa) {
        st = hr_err_set(err, HR_ERR_NOT_FOUND, "key '%s.attention.sliding_window' is missing or 0 "
                        "(required by %s)", hp->arch, hp->arch);
        goto fail;
    }
    if (hp->rope_base_swa != hp->rope_base) {
        st = hr_err_set(err, HR_ERR_UNSUPPORTED, "key '%s.rope.freq_base_swa' (%g) differs from "
                        "rope.freq_base (%g): a second RoPE base for windowed layers is not "
                        "implemented", hp->arch, (double)hp->rope_base_swa,
                        (double)hp->rope_base);
        goto fail;
    }

    if (hp->n_layer > 256 && ad->hybrid) {
        st = hr_err_set(err, HR_ERR_UNSUPPORTED, "%s with %u layers (headroom handles 256)",
                        hp->arch, hp->n_layer);
        goto fail;
    }
    priv->names.cap = (size_t)hp->n_layer * 40 + 8;
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
    bool bias = ad->qkv_bias, qk_norm = ad->qk_norm;
    const struct hr_moe *mo = &m->moe;
    const uint64_t NX = mo->n_expert, FX = mo->n_ff_exp, FS = mo->n_ff_shexp;
    for (uint32_t l = 0; l < hp->n_layer; l++) {
        struct hr_layer *L = &m->layers[l];
#define B(field, fmt, ne0, ne1, req)                                                               \
    if ((st = bind(m, name_at(nm, fmt, l), ne0, ne1, req, &L->field, err)))                        \
        goto fail;
        B(attn_norm, "blk.%u.attn_norm.weight", E, 0, true)
        L->mixer = ad->hybrid && layer_is_recurrent(hp, l) ? HR_MIXER_DELTANET : HR_MIXER_ATTN;
        if (L->mixer == HR_MIXER_ATTN) {
            L->kv_layer = m->n_attn_layers++;
            B(wq, "blk.%u.attn_q.weight", E, m->attn_gated ? 2 * qd : qd, true)
            B(wk, "blk.%u.attn_k.weight", E, kvd, true)
            B(wv, "blk.%u.attn_v.weight", E, kvd, true)
            B(bq, "blk.%u.attn_q.bias", qd, 0, bias)
            B(bk, "blk.%u.attn_k.bias", kvd, 0, bias)
            B(bv, "blk.%u.attn_v.bias", kvd, 0, bias)
            B(q_norm, "blk.%u.attn_q_norm.weight", hd, 0, qk_norm)
            B(k_norm, "blk.%u.attn_k_norm.weight", hd, 0, qk_norm)
            B(wo, "blk.%u.attn_output.weight", qd, E, true)
            B(bo, "blk.%u.attn_output.bias", E, 0, ad->o_bias)
            B(sinks, "blk.%u.attn_sinks.weight", hp->n_head, 0, ad->sinks)
        } else {
            const struct hr_deltanet *dn = &m->dn;
            L->dn_layer = m->dn.n_layers++;
            if (!hr_gguf_find_tensor(m->gguf, name_at(nm, "blk.%u.attn_qkv.weight", l)) &&
                hr_gguf_find_tensor(m->gguf, name_at(nm, "blk.%u.ssm_in.weight", l))) {
                st = hr_err_set(err, HR_ERR_UNSUPPORTED, "tensor 'blk.%u.ssm_in.weight' (an "
                                "older %s file with q, k, v and z fused): headroom reads "
                                "attn_qkv and attn_gate; convert the model again", l, hp->arch);
                goto fail;
            }
            B(ssm_qkv, "blk.%u.attn_qkv.weight", E, dn->conv_dim, true)
            B(ssm_z, "blk.%u.attn_gate.weight", E, dn->value_dim, true)
            if (m->arch == HR_ARCH_QWEN3NEXT) {
                B(ssm_ba, "blk.%u.ssm_ba.weight", E, 2 * (uint64_t)dn->n_v_heads, true)
            } else {
                B(ssm_beta, "blk.%u.ssm_beta.weight", E, dn->n_v_heads, true)
                B(ssm_alpha, "blk.%u.ssm_alpha.weight", E, dn->n_v_heads, true)
            }
            B(ssm_conv1d, "blk.%u.ssm_conv1d.weight", dn->conv_kernel, dn->conv_dim, true)
            B(ssm_dt, "blk.%u.ssm_dt.bias", dn->n_v_heads, 0, true)
            B(ssm_a, "blk.%u.ssm_a", dn->n_v_heads, 0, true)
            B(ssm_norm, "blk.%u.ssm_norm.weight", dn->head_v_dim, 0, true)
            B(ssm_out, "blk.%u.ssm_out.weight", dn->value_dim, E, true)
            if (L->ssm_conv1d.type != HR_GGML_F32) {
                st = hr_err_set(err, HR_ERR_UNSUPPORTED, "tensor '%s' has type %s; the "
                                "convolution expects F32", L->ssm_conv1d.name,
                                hr_ggml_type_name(L->ssm_conv1d.type));
                goto fail;
            }
        }
        if (ad->ffn_norm) {
            B(ffn_norm, "blk.%u.post_attention_norm.weight", E, 0, true)
        } else {
            B(ffn_norm, "blk.%u.ffn_norm.weight", E, 0, true)
        }
        L->window = 0;
        if (ad->swa_period && hp->n_swa) {
            const uint32_t period = hp->swa_period == UINT32_MAX ? ad->swa_period : hp->swa_period;
            L->window = period == 0 || l % period < period - 1 ? hp->n_swa : 0;
        }
        L->ffn_kind = mo->n_expert ? HR_FFN_MOE : HR_FFN_DENSE;
        if (L->ffn_kind == HR_FFN_DENSE) {
            B(w_gate, "blk.%u.ffn_gate.weight", E, F, true)
            B(w_up, "blk.%u.ffn_up.weight", E, F, true)
            B(w_down, "blk.%u.ffn_down.weight", F, E, true)
            continue;
        }
#define B3(field, fmt, ne0, ne1, req)                                                              \
    if ((st = bind3(m, name_at(nm, fmt, l), ne0, ne1, NX, req, &L->field, err)))                   \
        goto fail;
        B(gate_inp, "blk.%u.ffn_gate_inp.weight", E, NX, true)
        B(gate_inp_b, "blk.%u.ffn_gate_inp.bias", NX, 0, false)
        B(exp_probs_b, "blk.%u.exp_probs_b.bias", NX, 0, mo->gating == HR_MOE_GATING_SIGMOID)
        B3(gate_exps, "blk.%u.ffn_gate_exps.weight", E, FX, false)
        if (!L->gate_exps.data) { /* newer files fuse gate and up */
            B3(gate_exps, "blk.%u.ffn_gate_up_exps.weight", E, 2 * FX, false)
            if (!L->gate_exps.data) {
                st = hr_err_set(err, HR_ERR_NOT_FOUND, "missing tensor 'blk.%u.ffn_gate_exps."
                                "weight' (or a fused 'blk.%u.ffn_gate_up_exps.weight'), "
                                "required by %s", l, l, hp->arch);
                goto fail;
            }
            L->gate_up_fused = true;
        } else {
            B3(up_exps, "blk.%u.ffn_up_exps.weight", E, FX, true)
        }
        B3(down_exps, "blk.%u.ffn_down_exps.weight", FX, E, true)
#undef B3
        if (ad->exp_bias) { /* [width, n_expert], F32: one bias row per expert */
            B(gate_exps_b, "blk.%u.ffn_gate_exps.bias", FX, NX, true)
            B(up_exps_b, "blk.%u.ffn_up_exps.bias", FX, NX, true)
            B(down_exps_b, "blk.%u.ffn_down_exps.bias", E, NX, true)
            const struct hr_weight *eb[3] = {&L->gate_exps_b, &L->up_exps_b, &L->down_exps_b};
            for (int i = 0; i < 3; i++)
                if (eb[i]->type != HR_GGML_F32) {
                    st = hr_err_set(err, HR_ERR_UNSUPPORTED, "tensor '%s' has type %s; the "
                                    "engine expects F32 for expert biases", eb[i]->name,
                                    hr_ggml_type_name(eb[i]->type));
                    goto fail;
                }
            if (L->gate_up_fused) {
                st = hr_err_set(err, HR_ERR_UNSUPPORTED, "tensor 'blk.%u.ffn_gate_up_exps.weight'"
                                ": fused gate/up experts with expert biases are not supported", l);
                goto fail;
            }
        }
        if (L->gate_inp.type != HR_GGML_F32 && L->gate_inp.type != HR_GGML_F16 &&
            L->gate_inp.type != HR_GGML_BF16) {
            st = hr_err_set(err, HR_ERR_UNSUPPORTED, "tensor '%s' (the router) has type %s; "
                            "routers are F32, F16 or BF16", L->gate_inp.name,
                            hr_ggml_type_name(L->gate_inp.type));
            goto fail;
        }
        if (mo->shexp != HR_SHEXP_NONE) {
            B(gate_shexp, "blk.%u.ffn_gate_shexp.weight", E, FS, true)
            B(up_shexp, "blk.%u.ffn_up_shexp.weight", E, FS, true)
            B(down_shexp, "blk.%u.ffn_down_shexp.weight", FS, E, true)
        }
        if (mo->shexp == HR_SHEXP_SIGMOID)
            B(gate_inp_shexp, "blk.%u.ffn_gate_inp_shexp.weight", E, 0, true)
#undef B
    }
    for (uint64_t i = 0; i < hr_gguf_n_tensors(m->gguf); i++)
        m->weight_bytes += hr_gguf_tensor_at(m->gguf, i)->n_bytes;
    m->file_bytes = hr_gguf_file_size(m->gguf);
    if (m->for_device) {
        /* The same file again, for posix_fadvise only (as pack_weights'). */
        priv->fd = open(path, O_RDONLY | O_CLOEXEC);
        if (!(priv->path = strdup(path))) {
            st = hr_err_set(err, HR_ERR_NOMEM, "out of memory");
            goto fail;
        }
    } else {
        pack_weights(priv, path);
        prefault_unpacked(m);
    }
    *out = m;
    return HR_OK;
fail:
    hr_err_prefix(err, "%s", path);
    hr_model_close(m);
    return st;
}

void hr_model_release_pages(const struct hr_model *m, const void *data, uint64_t bytes)
{
    if (!m || !m->for_device || !data || !bytes)
        return;
    const struct hr_model_priv *priv = (const struct hr_model_priv *)m;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)data + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)data + bytes) & ~(page - 1);
    const struct pack_src src = {.base = (uintptr_t)hr_gguf_bytes(m->gguf), .fd = priv->fd};
    drop_file_pages(&src, lo, hi);
}

void hr_model_open_for_cpu(struct hr_model *m)
{
    if (!m || !m->for_device)
        return;
    struct hr_model_priv *priv = (struct hr_model_priv *)m;
    m->for_device = false;
    pack_weights(priv, priv->path);
    prefault_unpacked(m);
    if (priv->fd >= 0)
        close(priv->fd);
    priv->fd = -1;
}

void hr_model_close(struct hr_model *m)
{
    if (!m)
        return;
    struct hr_model_priv *priv = (struct hr_model_priv *)m;
    hr_gguf_close(m->gguf);
    if (priv->packed)
        munmap(priv->packed, priv->packed_len);
    if (priv->fd >= 0)
        close(priv->fd);
    free(priv->path);
    free(m->layers);
    free(priv->names.s);
    free(priv);
}
