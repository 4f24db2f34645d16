/*
 * test-backend.c - the backend interface (engine/backend.h) on the CPU:
 *
 *  - --device strings: what parses and what is refused (naming the text);
 *  - the CPU backend is the CPU engine itself: for a ragged batch of two
 *    sequences (a prefill chunk and a decode), the backend's plan equals the
 *    engine's hr_plan, its logits equal a direct hr_engine_step's bit for
 *    bit, and its arena high-water mark is the plan's arena bytes;
 *  - "auto" runs: on a machine without a CUDA device (CI) it picks the CPU,
 *    and in a build with the CUDA engine it says why (the fallback reason);
 *  - an explicit "cuda:N" never falls back: without the CUDA engine or the
 *    device it fails, naming the device;
 *  - a model opened for a device (hr_model_open_opts.device) that the CPU
 *    backend takes instead is packed then, as a CPU open packs it: the
 *    same bytes, and the same logits bit for bit (Q8_0, packed on AVX-512);
 *    its host weights are the model's weight_bytes;
 *  - the scheduler's backend is visible to readers (hr_sched_backend_info);
 *  - parking: a sequence's KV copied to host memory frees its blocks, other
 *    sequences overwrite them, and restored it decodes the same logits bit
 *    for bit as a sequence never parked; restoring needs an empty sequence
 *    and blocks (HR_ERR_NOMEM takes nothing).
 *
 * The CUDA backend's own proofs run on a GPU (tests/cuda/test-cuda-backend.c).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/backend.h"
#include "model-gen.h"
#include "model/model.h"
#include "sched/sched.h"

struct fixture {
    char path[64];
    struct hr_model *model;
};

/* The tests' 2-layer qwen3 model in `type`, written to `path`. */
static void gen_tiny(const char *path, enum hr_ggml_type type)
{
    struct hr_gen_params p;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gen_shape("tiny", &p, &err), HR_OK);
    p.arch = "qwen3";
    p.type = type;
    p.n_embd = 64;
    p.n_head = 4;
    p.n_head_kv = 2;
    p.n_ff = 96;
    p.n_layer = 2;
    p.n_ctx = 256;
    if (hr_gen_model(&p, path, &err) != HR_OK) fail_msg("%s", err.msg);
}

static int setup(void **state)
{
    struct fixture *fx = calloc(1, sizeof(*fx));
    struct hr_err err = {{0}};
    snprintf(fx->path, sizeof(fx->path), "/tmp/hr-test-backend-%d.gguf", (int)getpid());
    gen_tiny(fx->path, HR_GGML_F32);
    if (hr_model_open(fx->path, &fx->model, &err) != HR_OK) fail_msg("%s", err.msg);
    *state = fx;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *fx = *state;
    hr_model_close(fx->model);
    unlink(fx->path);
    free(fx);
    return 0;
}

static void test_device_parse(void **state)
{
    (void)state;
    struct hr_device d;
    struct hr_err err = {{0}};
    assert_int_equal(hr_device_parse("cpu", &d, &err), HR_OK);
    assert_int_equal(d.kind, HR_DEVICE_CPU);
    assert_int_equal(hr_device_parse("auto", &d, &err), HR_OK);
    assert_int_equal(d.kind, HR_DEVICE_AUTO);
    assert_int_equal(hr_device_parse(NULL, &d, &err), HR_OK);
    assert_int_equal(d.kind, HR_DEVICE_AUTO);
    assert_int_equal(hr_device_parse("cuda", &d, &err), HR_OK);
    assert_int_equal(d.kind, HR_DEVICE_CUDA);
    assert_int_equal(d.ordinal, 0);
    assert_int_equal(hr_device_parse("cuda:3", &d, &err), HR_OK);
    assert_int_equal(d.kind, HR_DEVICE_CUDA);
    assert_int_equal(d.ordinal, 3);
    const char *bad[] = {"gpu",     "cuda:", "cuda:x", "cuda:-1",    "cuda:256",
                         "cuda:1a", "CPU",   "cudax",  "cuda:99999", ""};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err.msg[0] = '\0';
        assert_int_equal(hr_device_parse(bad[i], &d, &err), HR_ERR_INVALID);
        assert_non_null(strstr(err.msg, "--device"));
    }
}

/* Two sequences: a 7-token prefill chunk with logits for its last 2
 * tokens, and a decode after 5 prompt tokens. */
static void run_ragged(struct hr_engine *e, struct hr_backend *b, float *out, uint32_t n_vocab,
                       struct hr_backend_plan *bp, struct hr_plan *ep)
{
    static const int32_t p0[7] = {3, 9, 27, 81, 17, 51, 153};
    static const int32_t p1[5] = {5, 25, 125, 100, 7};
    static const int32_t d1 = 42;
    struct hr_err err = {{0}};
    struct hr_kv_seq s0 = {0}, s1 = {0};
    struct hr_kv_pool *pool = e ? hr_engine_kv_pool(e) : hr_backend_kv_pool(b);
    if (e) {
        assert_int_equal(hr_engine_seq_init(e, &s0, 64, &err), HR_OK);
        assert_int_equal(hr_engine_seq_init(e, &s1, 64, &err), HR_OK);
    } else {
        assert_int_equal(hr_backend_seq_init(b, &s0, 64, &err), HR_OK);
        assert_int_equal(hr_backend_seq_init(b, &s1, 64, &err), HR_OK);
    }
    struct hr_step_seq pre = {.kv = &s1, .tokens = p1, .n_tokens = 5, .n_logits = 0};
    struct hr_step st = {.seqs = &pre, .n_seqs = 1};
    assert_int_equal(e ? hr_engine_step(e, &st, &err) : hr_backend_step(b, &st, &err), HR_OK);
    struct hr_step_seq items[2] = {{.kv = &s0, .tokens = p0, .n_tokens = 7, .n_logits = 2},
                                   {.kv = &s1, .tokens = &d1, .n_tokens = 1, .n_logits = 1}};
    st = (struct hr_step){.seqs = items, .n_seqs = 2};
    if (e)
        hr_engine_plan(e, &st, ep);
    else
        hr_backend_plan(b, &st, bp);
    assert_int_equal(e ? hr_engine_step(e, &st, &err) : hr_backend_step(b, &st, &err), HR_OK);
    for (uint32_t r = 0; r < 3; r++) {
        const float *lg = e ? hr_engine_logits(e, r < 2 ? 0 : 1, r < 2 ? r : 0)
                            : hr_backend_logits(b, r < 2 ? 0 : 1, r < 2 ? r : 0);
        memcpy(out + (size_t)r * n_vocab, lg, n_vocab * sizeof(float));
    }
    if (b) assert_int_equal(hr_backend_arena_high_water(b), bp->arena_bytes);
    hr_kv_seq_free(&s0, pool);
    hr_kv_seq_free(&s1, pool);
}

static void test_cpu_backend_is_the_engine(void **state)
{
    struct fixture *fx = *state;
    struct hr_err err = {{0}};
    const uint32_t n_vocab = fx->model->hp.n_vocab;
    const struct hr_engine_config ec = {.n_threads = 2,
                                        .kv_type = HR_GGML_F16,
                                        .kv_budget_bytes = 1u << 20,
                                        .max_step_tokens = 16,
                                        .max_step_logits = 4};
    const struct hr_backend_config bc = {.n_threads = 2,
                                         .kv_type = HR_GGML_F16,
                                         .kv_budget_bytes = 1u << 20,
                                         .max_step_tokens = 16,
                                         .max_step_logits = 4};
    struct hr_engine *e = NULL;
    assert_int_equal(hr_engine_init(fx->model, &ec, &e, &err), HR_OK);
    struct hr_backend *b = NULL;
    const struct hr_device cpu = {.kind = HR_DEVICE_CPU};
    assert_int_equal(hr_backend_init(fx->model, &cpu, &bc, &b, &err), HR_OK);
    assert_int_equal(hr_backend_info(b)->kind, HR_DEVICE_CPU);
    assert_string_equal(hr_backend_info(b)->name, "cpu");
    assert_non_null(strstr(hr_backend_info(b)->description, "2 threads"));
    assert_ptr_equal(hr_backend_model(b), fx->model);
    assert_false(hr_backend_lost(b));
    uint64_t fr = 1, tot = 1;
    assert_false(hr_backend_device_mem_info(b, &fr, &tot));
    assert_true(fr == 0 && tot == 0);
    struct hr_backend_mem mem;
    hr_backend_mem(b, &mem);
    assert_true(mem.device_total == 0 && mem.weights_bytes == 0);

    float *want = malloc((size_t)3 * n_vocab * sizeof(float));
    float *got = malloc((size_t)3 * n_vocab * sizeof(float));
    struct hr_plan ep;
    struct hr_backend_plan bp;
    run_ragged(e, NULL, want, n_vocab, NULL, &ep);
    run_ragged(NULL, b, got, n_vocab, &bp, NULL);
    assert_true(bp.arena_bytes == ep.arena_bytes && bp.kv_bytes == ep.kv_bytes &&
                bp.total_bytes == ep.total_bytes);
    assert_true(bp.arena_bytes > 0 && bp.kv_bytes > 0);
    assert_memory_equal(want, got, (size_t)3 * n_vocab * sizeof(float));
    assert_int_equal(hr_backend_arena_capacity(b), hr_engine_arena_capacity(e));
    free(want);
    free(got);
    hr_backend_free(b);
    hr_engine_free(e);
    hr_backend_free(NULL);
}

static void test_auto_and_explicit_cuda(void **state)
{
    struct fixture *fx = *state;
    struct hr_err err = {{0}};
    const struct hr_backend_config bc = {.kv_type = HR_GGML_F16,
                                         .kv_budget_bytes = 1u << 20,
                                         .max_step_tokens = 16,
                                         .max_step_logits = 4};
    const bool gpu = hr_backend_has_cuda() && hr_cuda_backend_n_devices() > 0;
    struct hr_backend *b = NULL;
    const struct hr_device autod = {.kind = HR_DEVICE_AUTO};
    assert_int_equal(hr_backend_init(fx->model, &autod, &bc, &b, &err), HR_OK);
    if (!gpu) {
        assert_int_equal(hr_backend_info(b)->kind, HR_DEVICE_CPU);
        if (hr_backend_has_cuda())
            assert_string_equal(hr_backend_info(b)->fallback, "no CUDA device is present");
        else
            assert_string_equal(hr_backend_info(b)->fallback, "");
    } else {
        print_message("a CUDA device is present: auto chose %s (%s)\n", hr_backend_info(b)->name,
                      hr_backend_info(b)->fallback);
    }
    hr_backend_free(b);

    if (gpu) return; /* tests/cuda covers the device */
    const struct hr_device cuda = {.kind = HR_DEVICE_CUDA, .ordinal = 1};
    b = (struct hr_backend *)&err; /* must be reset on failure */
    enum hr_status st = hr_backend_init(fx->model, &cuda, &bc, &b, &err);
    assert_true(st == HR_ERR_UNSUPPORTED || st == HR_ERR_DEVICE);
    assert_null(b);
    assert_non_null(strstr(err.msg, "cuda:1"));
}

static void test_device_opened_model_on_the_cpu(void **state)
{
    (void)state;
    struct hr_err err = {{0}};
    char path[64];
    snprintf(path, sizeof(path), "/tmp/hr-test-backend-%d-q8.gguf", (int)getpid());
    gen_tiny(path, HR_GGML_Q8_0);
    struct hr_model *mc = NULL, *md = NULL;
    const struct hr_model_open_opts dev = {.device = true};
    assert_int_equal(hr_model_open(path, &mc, &err), HR_OK);
    assert_int_equal(hr_model_open_ex(path, &dev, &md, &err), HR_OK);
    unlink(path);
    assert_true(md->for_device);
    assert_int_equal(md->packed_bytes, 0);
    const struct hr_backend_config bc = {.n_threads = 2,
                                         .kv_type = HR_GGML_F16,
                                         .kv_budget_bytes = 1u << 20,
                                         .max_step_tokens = 16,
                                         .max_step_logits = 4};
    const struct hr_device cpu = {.kind = HR_DEVICE_CPU};
    struct hr_backend *bc_ = NULL, *bd = NULL;
    assert_int_equal(hr_backend_init(mc, &cpu, &bc, &bc_, &err), HR_OK);
    assert_int_equal(hr_backend_init(md, &cpu, &bc, &bd, &err), HR_OK);
    assert_false(md->for_device);
    assert_int_equal(md->packed_bytes, mc->packed_bytes);
    assert_int_equal(md->weight_bytes, mc->weight_bytes);
    assert_int_equal(hr_backend_host_weight_bytes(bd), md->weight_bytes);
    print_message("opened for a device, taken by the CPU: %llu bytes packed (a CPU open: %llu)\n",
                  (unsigned long long)md->packed_bytes, (unsigned long long)mc->packed_bytes);
    const uint32_t n_vocab = mc->hp.n_vocab;
    float *want = malloc((size_t)3 * n_vocab * sizeof(float));
    float *got = malloc((size_t)3 * n_vocab * sizeof(float));
    struct hr_backend_plan b1, b2;
    run_ragged(NULL, bc_, want, n_vocab, &b1, NULL);
    run_ragged(NULL, bd, got, n_vocab, &b2, NULL);
    assert_memory_equal(want, got, (size_t)3 * n_vocab * sizeof(float));
    free(want);
    free(got);
    hr_backend_free(bc_);
    hr_backend_free(bd);
    hr_model_close(mc);
    hr_model_close(md);
}

static void test_sched_reports_its_backend(void **state)
{
    struct fixture *fx = *state;
    struct hr_err err = {{0}};
    struct hr_sched_config sc = {.model = fx->model,
                                 .kv_budget_bytes = 1u << 20,
                                 .n_ctx = 128,
                                 .batch_tokens = 32,
                                 .parallel = 2,
                                 .device = {.kind = HR_DEVICE_CPU}};
    struct hr_sched *s = NULL;
    assert_int_equal(hr_sched_init(&sc, &s, &err), HR_OK);
    assert_string_equal(hr_sched_backend_info(s)->name, "cpu");
    struct hr_sched_stats st;
    hr_sched_stats(s, &st);
    assert_false(st.device_lost);
    assert_true(st.device_total_bytes == 0 && st.device_used_peak_bytes == 0);
    hr_sched_free(s);

    /* a device that cannot be had fails the scheduler's init, naming it */
    sc.device = (struct hr_device){.kind = HR_DEVICE_CUDA, .ordinal = 7};
    if (hr_backend_has_cuda() && hr_cuda_backend_n_devices() > 7) return;
    assert_int_not_equal(hr_sched_init(&sc, &s, &err), HR_OK);
    assert_non_null(strstr(err.msg, "cuda:7"));
}

static void prefill(struct hr_backend *b, struct hr_kv_seq *seq, const int32_t *t, uint32_t n)
{
    struct hr_err err = {{0}};
    struct hr_step_seq it = {.kv = seq, .tokens = t, .n_tokens = n, .n_logits = 0};
    struct hr_step st = {.seqs = &it, .n_seqs = 1};
    if (hr_backend_step(b, &st, &err) != HR_OK) fail_msg("%s", err.msg);
}

static void decode(struct hr_backend *b, struct hr_kv_seq *seq, int32_t t, float *out, uint32_t n)
{
    struct hr_err err = {{0}};
    struct hr_step_seq it = {.kv = seq, .tokens = &t, .n_tokens = 1, .n_logits = 1};
    struct hr_step st = {.seqs = &it, .n_seqs = 1};
    if (hr_backend_step(b, &st, &err) != HR_OK) fail_msg("%s", err.msg);
    memcpy(out, hr_backend_logits(b, 0, 0), n * sizeof(float));
}

static void test_park_unpark(void **state)
{
    struct fixture *fx = *state;
    struct hr_err err = {{0}};
    const uint32_t nv = fx->model->hp.n_vocab;
    struct hr_kv_config kc = {.n_layer = fx->model->hp.n_layer,
                              .n_head_kv = fx->model->hp.n_head_kv,
                              .head_dim = fx->model->hp.head_dim_k,
                              .type = HR_GGML_F16};
    /* 5 blocks of 32: the parked sequence's 2 and 3 more */
    const struct hr_backend_config bc = {.n_threads = 2,
                                         .kv_type = HR_GGML_F16,
                                         .kv_budget_bytes = 5 * hr_kv_block_bytes_for(&kc),
                                         .max_step_tokens = 64,
                                         .max_step_logits = 1};
    const struct hr_device cpu = {.kind = HR_DEVICE_CPU};
    struct hr_backend *b = NULL;
    assert_int_equal(hr_backend_init(fx->model, &cpu, &bc, &b, &err), HR_OK);
    struct hr_kv_pool *pool = hr_backend_kv_pool(b);
    assert_int_equal(hr_kv_n_blocks(pool), 5);
    int32_t p[40], q[64];
    for (uint32_t i = 0; i < 40; i++) p[i] = (int32_t)((i * 7 + 3) % nv);
    for (uint32_t i = 0; i < 64; i++) q[i] = (int32_t)((i * 13 + 5) % nv);
    float *want = malloc(nv * sizeof(float)), *got = malloc(nv * sizeof(float));
    struct hr_kv_seq a = {0}, c = {0};
    assert_int_equal(hr_backend_seq_init(b, &a, 128, &err), HR_OK);
    assert_int_equal(hr_backend_seq_init(b, &c, 128, &err), HR_OK);
    prefill(b, &a, p, 40);
    decode(b, &a, 11, want, nv);
    hr_kv_seq_clear(&a, pool);

    prefill(b, &a, p, 40);
    const uint64_t bytes = hr_backend_kv_park_bytes(b, &a);
    assert_int_equal(bytes, 2 * hr_kv_block_bytes(pool));
    void *host = malloc(bytes);
    uint32_t n_tok = 0;
    assert_int_equal(hr_backend_kv_park(b, &a, host, &n_tok, &err), HR_OK);
    assert_int_equal(n_tok, 40);
    assert_int_equal(a.n_blocks, 0);
    assert_int_equal(hr_kv_n_used(pool), 0);
    /* another sequence takes (and overwrites) the blocks */
    prefill(b, &c, q, 64);
    assert_int_equal(hr_kv_n_used(pool), 2);
    /* with d's 2 blocks taken too, 1 is free: restoring 2 is refused */
    struct hr_kv_seq d = {0};
    assert_int_equal(hr_backend_seq_init(b, &d, 128, &err), HR_OK);
    prefill(b, &d, q, 64);
    assert_int_equal(hr_backend_kv_unpark(b, &a, 40, host, &err), HR_ERR_NOMEM);
    assert_int_equal(a.n_blocks, 0);
    assert_int_equal(hr_kv_n_used(pool), 4);
    hr_kv_seq_clear(&d, pool);
    assert_int_equal(hr_backend_kv_unpark(b, &a, 40, host, &err), HR_OK);
    assert_int_equal(a.n_tokens, 40);
    assert_int_equal(hr_backend_kv_unpark(b, &a, 40, host, &err), HR_ERR_INVALID);
    decode(b, &a, 11, got, nv);
    assert_memory_equal(want, got, nv * sizeof(float));

    hr_kv_seq_free(&a, pool);
    hr_kv_seq_free(&c, pool);
    hr_kv_seq_free(&d, pool);
    free(host);
    free(want);
    free(got);
    hr_backend_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_device_parse),
        cmocka_unit_test_setup_teardown(test_cpu_backend_is_the_engine, setup, teardown),
        cmocka_unit_test_setup_teardown(test_auto_and_explicit_cuda, setup, teardown),
        cmocka_unit_test(test_device_opened_model_on_the_cpu),
        cmocka_unit_test_setup_teardown(test_sched_reports_its_backend, setup, teardown),
        cmocka_unit_test_setup_teardown(test_park_unpark, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
