/*
 * test-model.c - hr_model_open's promises about the weights it packs, on
 * generated models:
 *
 *  - slices pack exactly: a matrix is packed in slices of about 256 KiB of
 *    the file (model.c, pack_matrix), each at its own offset of the packed
 *    copy; the copy equals hr_matmul_pack of the whole matrix byte for
 *    byte, for Q8_0 and F16, a row count that is not a multiple of the
 *    panel (padding rows), matrices of many slices, and expert stacks;
 *  - loading's transient is a few slices: what hr_model_open holds and
 *    gives back before it returns (VmHWM - VmRSS, the high-water mark reset
 *    just before) is bounded by one slice per packing thread, not by the
 *    largest tensor (here a 17 MiB tied embedding, which packed whole would
 *    hold its file pages and its copy together).
 *
 *  - a model opened for a device (hr_model_open_opts.device) packs and
 *    prefaults nothing, and hr_model_release_pages takes a tensor's pages
 *    out of the process (mincore: none of its interior resident after),
 *    while a CPU-opened model's release does nothing; one the CPU then
 *    takes (hr_model_open_for_cpu, auto's fallback) ends up as a model
 *    opened for the CPU: the same bytes accounted, the same packed copies.
 *
 * Packing happens on AVX-512 only; elsewhere the first two tests skip.
 * tests/cli/load-peak.sh checks the same end to end with the release binary:
 * `run` and `serve` under the smallest ceiling the governor names.
 */
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "kernels/matmul.h"
#include "model-gen.h"
#include "model/model.h"

static void gen(const char *path, const char *arch, enum hr_ggml_type type, uint32_t n_embd,
                uint32_t n_vocab, uint32_t n_expert)
{
    struct hr_gen_params p;
    struct hr_err err = {0};
    assert_int_equal(hr_gen_shape("tiny", &p, &err), HR_OK);
    p.arch = arch;
    p.type = type;
    p.n_embd = n_embd;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.head_dim = 64;
    p.n_layer = 1;
    /* F16: rows of 1000 pad to 1008; Q4_K: rows of whole 256-value blocks */
    p.n_ff = type == HR_GGML_F16 ? 1000 : type == HR_GGML_Q4_K ? 1024 : 1056;
    p.n_vocab = n_vocab;
    p.tied = true;
    if (n_expert) {
        p.n_expert = n_expert;
        p.n_expert_used = 2;
        p.n_ff_exp = 1056;
    }
    if (hr_gen_model(&p, path, &err) != HR_OK)
        fail_msg("gen %s: %s", path, err.msg);
}

/* Every packed matrix of the model at `path` against a whole-matrix pack. */
static void check_packed(const char *path)
{
    struct hr_model *m = NULL;
    struct hr_err err = {0};
    const enum hr_status st = hr_model_open(path, &m, &err);
    unlink(path); /* the mapping keeps it */
    if (st != HR_OK)
        fail_msg("open %s: %s", path, err.msg);
    if (!m->packed_bytes) {
        hr_model_close(m);
        skip(); /* no packing kernels on this machine */
    }
    const struct hr_weight **w = malloc(((size_t)m->hp.n_layer * HR_MODEL_LAYER_MATRICES + 1) *
                                        sizeof(*w));
    assert_non_null(w);
    const size_t n = hr_model_matrices(m, w);
    size_t n_checked = 0, most_slices = 0;
    bool padded = false;
    for (size_t i = 0; i < n; i++) {
        if (!w[i]->packed)
            continue;
        const size_t bytes = hr_matmul_packed_bytes(w[i]->type, w[i]->ne0, w[i]->ne1);
        uint8_t *whole = malloc(bytes);
        assert_non_null(whole);
        for (uint64_t e = 0; e < w[i]->n_mat; e++) {
            hr_matmul_pack(w[i]->type, (const uint8_t *)w[i]->data + e * w[i]->mat_bytes,
                           w[i]->ne0, w[i]->ne1, whole);
            const uint8_t *got = (const uint8_t *)w[i]->packed + e * w[i]->packed_mat_bytes;
            if (memcmp(got, whole, bytes) != 0) {
                size_t at = 0;
                while (got[at] == whole[at])
                    at++;
                fail_msg("%s: %s, matrix %llu: the packed copy differs from a whole pack at "
                         "byte %zu of %zu", path, w[i]->name, (unsigned long long)e, at, bytes);
            }
            n_checked++;
        }
        const size_t slices = w[i]->mat_bytes / (256 << 10);
        most_slices = slices > most_slices ? slices : most_slices;
        padded |= w[i]->ne1 % 32 != 0;
        free(whole);
    }
    free(w);
    /* what the test must have covered to mean anything */
    assert_true(n_checked >= 3);
    assert_true(most_slices >= 4);
    assert_true(padded);
    hr_model_close(m);
}

static void test_slices_pack_exactly(void **state)
{
    (void)state;
    char path[64];
    /* Q8_0: a 5003-row embedding of 272-byte rows (6 slices, the last padded) */
    snprintf(path, sizeof(path), "/tmp/hr-test-model-%d-q8.gguf", (int)getpid());
    gen(path, "qwen3", HR_GGML_Q8_0, 256, 5003, 0);
    check_packed(path);
    /* F16: 512-byte rows, 4-row groups; 5003 % 4 = 3 */
    snprintf(path, sizeof(path), "/tmp/hr-test-model-%d-f16.gguf", (int)getpid());
    gen(path, "llama", HR_GGML_F16, 256, 5003, 0);
    check_packed(path);
    /* Q4_K: 288-byte rows in 16-row groups (6 slices, the last padded) */
    snprintf(path, sizeof(path), "/tmp/hr-test-model-%d-q4k.gguf", (int)getpid());
    gen(path, "qwen3", HR_GGML_Q4_K, 512, 5003, 0);
    check_packed(path);
    /* experts: each expert's matrix on its own, slices within each */
    snprintf(path, sizeof(path), "/tmp/hr-test-model-%d-moe.gguf", (int)getpid());
    gen(path, "qwen3moe", HR_GGML_Q8_0, 256, 5003, 4);
    check_packed(path);
}

static uint64_t status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kb = 0;
    const size_t n = strlen(key);
    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, key, n) == 0 && line[n] == ':')
            kb = strtoull(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return kb * 1024;
}

static void test_load_transient_is_slices(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/hr-test-model-%d-big.gguf", (int)getpid());
    /* a 32768 x 512 Q8_0 tied embedding: 17 MiB in one tensor */
    gen(path, "qwen3", HR_GGML_Q8_0, 512, 32768, 0);
    FILE *f = fopen("/proc/self/clear_refs", "w"); /* "5": VmHWM = VmRSS from now */
    if (!f || fputs("5", f) < 0 || fclose(f) != 0) {
        unlink(path);
        skip(); /* no /proc/self/clear_refs: nothing to measure with */
    }
    struct hr_model *m = NULL;
    struct hr_err err = {0};
    const enum hr_status st = hr_model_open(path, &m, &err);
    const uint64_t hwm = status_kb("VmHWM"), rss = status_kb("VmRSS");
    unlink(path);
    if (st != HR_OK)
        fail_msg("open %s: %s", path, err.msg);
    const bool packed = m->packed_bytes > 0;
    const uint64_t largest = m->tok_embd.mat_bytes;
    hr_model_close(m);
    if (!packed)
        skip();
    /* one 256 KiB slice and the 64 KiB fault-around per packing thread (at
     * most 8), and 2 MiB for the allocator (ASan's: 1 MiB measured) */
    long threads = sysconf(_SC_NPROCESSORS_ONLN);
    threads = threads < 1 ? 1 : threads > 8 ? 8 : threads;
    const uint64_t bound = (uint64_t)threads * (320 << 10) + (2 << 20);
    print_message("loading's transient %.2f MiB (VmHWM %.1f, VmRSS %.1f MiB); bound %.2f MiB; "
                  "largest tensor %.1f MiB\n", (double)(hwm - rss) / 1048576.0,
                  (double)hwm / 1048576.0, (double)rss / 1048576.0, (double)bound / 1048576.0,
                  (double)largest / 1048576.0);
    assert_true(largest > 2 * bound); /* else the test could not tell */
    assert_true(hwm >= rss);
    assert_true(hwm - rss <= bound);
}

/* Pages of [p, p + n)'s page-aligned interior resident now, and their count. */
static size_t resident_pages(const void *p, size_t n, size_t *total)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t lo = ((uintptr_t)p + page - 1) & ~(page - 1);
    const uintptr_t hi = ((uintptr_t)p + n) & ~(page - 1);
    *total = hi > lo ? (hi - lo) / page : 0;
    if (!*total)
        return 0;
    unsigned char *v = malloc(*total);
    assert_non_null(v);
    assert_int_equal(mincore((void *)lo, hi - lo, v), 0);
    size_t r = 0;
    for (size_t i = 0; i < *total; i++)
        r += v[i] & 1;
    free(v);
    return r;
}

static void touch(const void *p, size_t n)
{
    volatile unsigned char sink = 0;
    for (size_t o = 0; o < n; o += 4096)
        sink ^= ((const volatile unsigned char *)p)[o];
    (void)sink;
}

static void test_open_for_device(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/hr-test-model-%d-dev.gguf", (int)getpid());
    gen(path, "qwen3", HR_GGML_Q8_0, 512, 32768, 0); /* a 17 MiB tied embedding */
    /* written back first: the page cache can drop clean pages only */
    const int fd = open(path, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fsync(fd), 0);
    close(fd);
    struct hr_model *m = NULL, *c = NULL;
    struct hr_err err = {0};
    const struct hr_model_open_opts dev = {.device = true};
    assert_int_equal(hr_model_open_ex(path, &dev, &m, &err), HR_OK);
    assert_true(m->for_device);
    assert_int_equal(m->packed_bytes, 0);
    assert_null(m->tok_embd.packed);
    uint64_t file_tensors = 0;
    for (uint64_t i = 0; i < hr_gguf_n_tensors(m->gguf); i++)
        file_tensors += hr_gguf_tensor_at(m->gguf, i)->n_bytes;
    assert_int_equal(m->weight_bytes, file_tensors); /* every tensor as the file holds it */
    const struct hr_weight *w = &m->tok_embd;
    size_t n = 0;
    touch(w->data, w->mat_bytes); /* as an upload reads it */
    assert_true(resident_pages(w->data, w->mat_bytes, &n) == n);
    assert_true(n > 1000);
    hr_model_release_pages(m, w->data, w->mat_bytes);
    const size_t left = resident_pages(w->data, w->mat_bytes, &n);
    print_message("device-opened: %zu of %zu pages of the embedding resident after release\n",
                  left, n);
    assert_int_equal(left, 0);
    /* a CPU-opened model (opened now: its prefault would keep the pages
     * above in the page cache): the same bytes, and release does nothing,
     * its engine reading the pages */
    assert_int_equal(hr_model_open(path, &c, &err), HR_OK);
    unlink(path); /* the mappings keep the file */
    assert_false(c->for_device);
    assert_memory_equal(w->data, c->tok_embd.data, 4096); /* faulted back from the file */
    const struct hr_weight *cw = &c->layers[0].w_down;
    touch(cw->data, cw->mat_bytes);
    const size_t before = resident_pages(cw->data, cw->mat_bytes, &n);
    hr_model_release_pages(c, cw->data, cw->mat_bytes);
    assert_int_equal(resident_pages(cw->data, cw->mat_bytes, &n), before);
    /* the GPU could not take it after all: the CPU's layout, as if opened
     * for the CPU (the embedding's pages were released above, as an
     * upload that failed later would have) */
    hr_model_open_for_cpu(m);
    assert_false(m->for_device);
    assert_int_equal(m->weight_bytes, c->weight_bytes);
    assert_int_equal(m->packed_bytes, c->packed_bytes);
    const struct hr_weight *mw[HR_MODEL_LAYER_MATRICES + 1], *cwm[HR_MODEL_LAYER_MATRICES + 1];
    const size_t nm = hr_model_matrices(m, mw);
    assert_int_equal(nm, hr_model_matrices(c, cwm));
    size_t n_packed = 0;
    for (size_t i = 0; i < nm; i++) {
        assert_int_equal(mw[i]->packed != NULL, cwm[i]->packed != NULL);
        if (!mw[i]->packed)
            continue;
        n_packed++;
        assert_memory_equal(mw[i]->packed, cwm[i]->packed,
                            hr_matmul_packed_bytes(mw[i]->type, mw[i]->ne0, mw[i]->ne1));
    }
    print_message("opened for the CPU after the device: %zu of %zu matrices packed, as the "
                  "CPU-opened model's\n", n_packed, nm);
    hr_model_open_for_cpu(c); /* nothing for a CPU-opened model */
    assert_int_equal(c->packed_bytes, m->packed_bytes);
    hr_model_close(m);
    hr_model_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_slices_pack_exactly),
        cmocka_unit_test(test_load_transient_is_slices),
        cmocka_unit_test(test_open_for_device),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
