/*
 * bench-sched - many requests under a memory ceiling that cannot hold them
 * all at once, with the real probe (RSS, cgroup, meminfo):
 *
 *   bench-sched MODEL --memory-limit SIZE [--requests 8] [--tokens 32] [--seed S]
 *
 * First all requests are submitted together (mixed prompt lengths, 1K to
 * 6K tokens, temperature sampling with a seed per request) to a scheduler
 * driven by the governor; then each runs alone on a fresh scheduler without
 * a limit. Every request must complete with the same tokens both ways. The
 * together phase runs first so that the process's peak RSS (VmHWM) at its
 * end is the peak of that phase, compared with the ceiling. Prints one
 * line per request and a summary:
 *   bench sched requests=8 identical=8 preempted=N throttled=N peak_rss_bytes=.. ceiling_bytes=..
 *     hard_transitions=N aborted=0 together_s=.. alone_s=..
 * Exit 0 only if every request completed identically and the peak stayed
 * below the ceiling.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys.h"
#include "engine/kv-cache.h"
#include "mem/counters.h"
#include "mem/governor.h"
#include "mem/probe.h"
#include "mem/size.h"
#include "model/model.h"
#include "sched/sched.h"

#define MAX_REQ 32

struct rec {
    int32_t *tokens;
    uint32_t n, cap;
    int finished;
    enum hr_sched_finish finish;
};

static void on_event(const struct hr_sched_event *ev, void *user)
{
    struct rec *r = user;
    if (ev->kind == HR_SCHED_TOKEN && r->n < r->cap)
        r->tokens[r->n++] = ev->token;
    else if (ev->kind == HR_SCHED_FINISHED || ev->kind == HR_SCHED_REFUSED) {
        r->finished = ev->kind == HR_SCHED_FINISHED ? 1 : -1;
        r->finish = ev->finish;
    }
}

static struct hr_sched *new_sched(const struct hr_model *m, struct hr_gov *gov, uint32_t parallel)
{
    struct hr_kv_config kc = {.n_layer = m->hp.n_layer, .n_head_kv = m->hp.n_head_kv,
                              .head_dim = m->hp.head_dim_k, .type = HR_GGML_F16};
    struct hr_sched_config cfg = {
        .model = m,
        .n_threads = 2,
        .kv_type = HR_GGML_F16,
        /* reserved address space for every request's whole context */
        .kv_budget_bytes = (uint64_t)parallel * (8192 / 32) * hr_kv_block_bytes_for(&kc),
        .n_ctx = 8192,
        .batch_tokens = 2048,
        .parallel = parallel,
        .max_queue = MAX_REQ,
        .gov = gov,
    };
    struct hr_sched *s = NULL;
    struct hr_err err = {{0}};
    if (hr_sched_init(&cfg, &s, &err) != HR_OK) {
        fprintf(stderr, "bench-sched: %s\n", err.msg);
        exit(1);
    }
    return s;
}

static void submit(struct hr_sched *s, const int32_t *prompt, uint32_t n, uint32_t n_gen,
                   uint64_t seed, struct rec *r)
{
    struct hr_sched_params p = hr_sched_params_defaults();
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = n_gen;
    p.ignore_eos = true;
    p.sampling.seed = seed;
    p.sampling.temperature = 0.8f;
    p.on_event = on_event;
    p.user = r;
    uint64_t id;
    struct hr_sched_refusal why;
    struct hr_err err = {{0}};
    if (hr_sched_submit(s, &p, &id, &why, &err) != HR_OK) {
        fprintf(stderr, "bench-sched: request refused: %s\n", err.msg);
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench-sched MODEL --memory-limit SIZE [--requests N] "
                        "[--tokens N] [--seed S]\n");
        return 2;
    }
    const char *path = argv[1], *limit_text = NULL;
    uint32_t n_req = 8, n_gen = 32;
    uint64_t seed = 1;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--memory-limit") == 0)
            limit_text = argv[i + 1];
        else if (strcmp(argv[i], "--requests") == 0)
            n_req = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--tokens") == 0)
            n_gen = (uint32_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--seed") == 0)
            seed = strtoull(argv[i + 1], NULL, 10);
    }
    if (!limit_text || n_req == 0 || n_req > MAX_REQ || n_gen == 0) {
        fprintf(stderr, "bench-sched: need --memory-limit, 1..%d requests, tokens >= 1\n", MAX_REQ);
        return 2;
    }
    struct hr_err err = {{0}};
    struct hr_model *m = NULL;
    if (hr_model_open(path, &m, &err) != HR_OK) {
        fprintf(stderr, "bench-sched: %s\n", err.msg);
        return 1;
    }
    struct hr_mem_probe probe;
    struct hr_mem_sample sm = {0};
    if (hr_mem_probe_sys_init(NULL, &probe, &err) != HR_OK) {
        fprintf(stderr, "bench-sched: %s\n", err.msg);
        return 1;
    }
    hr_mem_probe_sample(&probe, &sm);
    struct hr_gov_config gc;
    hr_gov_config_default(&gc);
    gc.admit_margin_bytes = HR_GOV_ADMIT_NOISE_BYTES; /* the real probe: see governor.h */
    if (hr_mem_parse_size(limit_text, sm.mem_total_bytes, &gc.limit_bytes, &err) != HR_OK) {
        fprintf(stderr, "bench-sched: --memory-limit: %s\n", err.msg);
        return 2;
    }
    struct hr_gov *gov = NULL;
    if (hr_gov_init(&gc, probe, &gov, &err) != HR_OK) {
        fprintf(stderr, "bench-sched: %s\n", err.msg);
        return 1;
    }

    /* Mixed lengths between 1K and 6K tokens; deterministic token ids. */
    static int32_t *prompts[MAX_REQ];
    uint32_t lens[MAX_REQ];
    struct rec together[MAX_REQ] = {0}, alone[MAX_REQ] = {0};
    for (uint32_t i = 0; i < n_req; i++) {
        lens[i] = 1024 + (uint32_t)((i * 2654435761u) % 5120u);
        prompts[i] = malloc(lens[i] * sizeof(int32_t));
        for (uint32_t j = 0; j < lens[i]; j++)
            prompts[i][j] = (int32_t)((j * 7919u + i * 104729u + 13u) % m->hp.n_vocab);
        together[i].tokens = malloc(n_gen * sizeof(int32_t));
        alone[i].tokens = malloc(n_gen * sizeof(int32_t));
        together[i].cap = alone[i].cap = n_gen;
    }

    double t0 = hr_now_seconds();
    struct hr_sched *s = new_sched(m, gov, n_req);
    for (uint32_t i = 0; i < n_req; i++)
        submit(s, prompts[i], lens[i], n_gen, seed + i, &together[i]);
    hr_sched_wait_idle(s);
    struct hr_sched_stats st;
    hr_sched_stats(s, &st);
    hr_sched_free(s);
    const double together_s = hr_now_seconds() - t0;
    const uint64_t peak = hr_peak_rss_bytes();
    struct hr_gov_view v;
    hr_gov_sample(gov, &v);
    const struct hr_mem_counters *c = hr_gov_counters(gov);

    t0 = hr_now_seconds();
    for (uint32_t i = 0; i < n_req; i++) {
        s = new_sched(m, NULL, 1);
        submit(s, prompts[i], lens[i], n_gen, seed + i, &alone[i]);
        hr_sched_wait_idle(s);
        hr_sched_free(s);
    }
    const double alone_s = hr_now_seconds() - t0;

    uint32_t identical = 0;
    for (uint32_t i = 0; i < n_req; i++) {
        const bool same = together[i].finished == 1 && alone[i].finished == 1 &&
                          together[i].n == alone[i].n &&
                          memcmp(together[i].tokens, alone[i].tokens, alone[i].n * 4) == 0;
        identical += same;
        printf("bench sched request=%u prompt_tokens=%u generated=%u finish=%s identical=%s\n", i,
               lens[i], together[i].n, hr_sched_finish_name(together[i].finish),
               same ? "yes" : "NO");
    }
    const uint64_t aborted = hr_mem_counter_get(&c->requests_aborted_for_memory_total);
    printf("bench sched requests=%u identical=%u preempted=%" PRIu64 " throttled=%" PRIu64
           " peak_rss_bytes=%" PRIu64 " ceiling_bytes=%" PRIu64 " hard_transitions=%" PRIu64
           " aborted=%" PRIu64 " together_s=%.1f alone_s=%.1f\n",
           n_req, identical, st.preempted,
           hr_mem_counter_get(&c->prefill_chunks_throttled_total), peak, v.static_ceiling_bytes,
           hr_mem_counter_get(&c->pressure_to_hard_total), aborted, together_s, alone_s);
    hr_gov_free(gov);
    for (uint32_t i = 0; i < n_req; i++) {
        free(prompts[i]);
        free(together[i].tokens);
        free(alone[i].tokens);
    }
    hr_model_close(m);
    return identical == n_req && peak < v.static_ceiling_bytes && aborted == 0 ? 0 : 1;
}
