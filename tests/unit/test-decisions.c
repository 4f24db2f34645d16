/*
 * test-decisions.c - the ring of memory decisions the dashboard's feed reads
 * (mem/decisions.h): sequence numbers, reads after a number, the oldest
 * entries overwritten once the ring is full, each kind's fields kept, and
 * writers on several threads against a reader (also under TSan).
 *
 * The ring is one per process, so each test reads only what comes after
 * the last number it saw before it started.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "mem/decisions.h"

static uint64_t last_now(void)
{
    uint64_t last = 0;
    struct hr_decision d;
    hr_decisions_read(UINT64_MAX - 1, &d, 1, &last);
    return last;
}

static void test_kinds_and_fields(void **state)
{
    (void)state;
    const uint64_t base = last_now();
    hr_decision_pressure(0, 2, 300, 170, 190, 200);
    hr_decision_chunk(7, 2048, 640, 107712, 1200, 1180);
    hr_decision_preempt(9, 50, 64, 4100);
    hr_decision_reclaim(3, 3 * 65536);
    struct hr_decision r = {.kind = HR_DECISION_REFUSE, .request_id = 0};
    r.u.refuse.n_prompt = 12000;
    r.u.refuse.max_prompt = 3167;
    snprintf(r.u.refuse.why, sizeof(r.u.refuse.why), "prompt is too long: 12000 tokens > 3167 maximum");
    hr_decision_record(&r);

    struct hr_decision out[8];
    uint64_t last = 0;
    const size_t n = hr_decisions_read(base, out, 8, &last);
    assert_int_equal(n, 5);
    assert_int_equal(last, base + 5);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(out[i].seq, base + 1 + i); /* oldest first, consecutive */
        assert_true(out[i].t > 0);
        if (i)
            assert_true(out[i].t >= out[i - 1].t);
    }
    assert_int_equal(out[0].kind, HR_DECISION_PRESSURE);
    assert_int_equal(out[0].u.pressure.from, 0);
    assert_int_equal(out[0].u.pressure.to, 2);
    assert_int_equal(out[0].u.pressure.ceiling_bytes, 200);
    assert_int_equal(out[1].kind, HR_DECISION_CHUNK);
    assert_int_equal(out[1].request_id, 7);
    assert_int_equal(out[1].u.chunk.asked_tokens, 2048);
    assert_int_equal(out[1].u.chunk.chosen_tokens, 640);
    assert_int_equal(out[1].u.chunk.kv_len, 107712);
    assert_int_equal(out[1].u.chunk.headroom_bytes, 1200);
    assert_int_equal(out[1].u.chunk.planned_bytes, 1180);
    assert_int_equal(out[2].kind, HR_DECISION_PREEMPT);
    assert_int_equal(out[2].u.preempt.kv_blocks_used, 50);
    assert_int_equal(out[2].u.preempt.recompute_tokens, 4100);
    assert_int_equal(out[3].u.reclaim.bytes, 3 * 65536);
    assert_int_equal(out[4].u.refuse.max_prompt, 3167);
    assert_string_equal(out[4].u.refuse.why, "prompt is too long: 12000 tokens > 3167 maximum");
    assert_string_equal(hr_decision_kind_name(HR_DECISION_CHUNK), "chunk");
    assert_string_equal(hr_decision_kind_name(HR_DECISION_REFUSE), "refuse");
    assert_string_equal(hr_decision_kind_name((enum hr_decision_kind)99), "?");

    /* After a number: only what follows it; at the end: nothing. */
    assert_int_equal(hr_decisions_read(base + 3, out, 8, NULL), 2);
    assert_int_equal(out[0].seq, base + 4);
    assert_int_equal(hr_decisions_read(base + 5, out, 8, &last), 0);
    assert_int_equal(last, base + 5);
    /* cap bounds a read; the rest comes with the next one */
    assert_int_equal(hr_decisions_read(base, out, 2, NULL), 2);
    assert_int_equal(out[1].seq, base + 2);
}

static void test_wraps_keeping_the_newest(void **state)
{
    (void)state;
    const uint64_t base = last_now();
    const uint32_t n_rec = HR_DECISIONS_CAP + 37;
    for (uint32_t i = 0; i < n_rec; i++)
        hr_decision_chunk(i, 512, i % 512, i, 0, 0);
    struct hr_decision *out = calloc(HR_DECISIONS_CAP + 8, sizeof(*out));
    assert_non_null(out);
    uint64_t last = 0;
    /* Asking from before the oldest gets the whole ring: the newest CAP. */
    const size_t n = hr_decisions_read(base, out, HR_DECISIONS_CAP + 8, &last);
    assert_int_equal(n, HR_DECISIONS_CAP);
    assert_int_equal(last, base + n_rec);
    assert_int_equal(out[0].seq, base + n_rec - HR_DECISIONS_CAP + 1); /* the gap shows what was lost */
    assert_int_equal(out[0].request_id, n_rec - HR_DECISIONS_CAP);
    assert_int_equal(out[n - 1].request_id, n_rec - 1);
    for (size_t i = 1; i < n; i++)
        assert_int_equal(out[i].seq, out[i - 1].seq + 1);
    free(out);
}

enum { N_WRITERS = 4, PER_WRITER = 3000 };

static void *writer(void *arg)
{
    const uint64_t w = (uint64_t)(uintptr_t)arg;
    for (uint32_t i = 0; i < PER_WRITER; i++)
        hr_decision_preempt(w, i, PER_WRITER, i);
    return NULL;
}

/* Readers see whole entries, consecutive numbers and each writer's entries
 * in its own order, while writers race. */
static void test_threads(void **state)
{
    (void)state;
    const uint64_t base = last_now();
    pthread_t t[N_WRITERS];
    for (uintptr_t i = 0; i < N_WRITERS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, writer, (void *)(i + 1)), 0);
    struct hr_decision *out = calloc(HR_DECISIONS_CAP, sizeof(*out));
    assert_non_null(out);
    uint64_t after = base;
    int64_t last_i[N_WRITERS + 1];
    for (int w = 0; w <= N_WRITERS; w++)
        last_i[w] = -1;
    size_t seen = 0;
    for (int round = 0; round < 2000 && seen < (size_t)N_WRITERS * PER_WRITER; round++) {
        uint64_t last = 0;
        const size_t n = hr_decisions_read(after, out, HR_DECISIONS_CAP, &last);
        for (size_t i = 0; i < n; i++) {
            const struct hr_decision *d = &out[i];
            assert_true(d->seq > after);
            if (i)
                assert_int_equal(d->seq, out[i - 1].seq + 1);
            assert_int_equal(d->kind, HR_DECISION_PREEMPT);
            assert_true(d->request_id >= 1 && d->request_id <= N_WRITERS);
            /* whole: the fields of one call together */
            assert_int_equal(d->u.preempt.kv_blocks_used, d->u.preempt.recompute_tokens);
            assert_true((int64_t)d->u.preempt.kv_blocks_used > last_i[d->request_id]);
            last_i[d->request_id] = d->u.preempt.kv_blocks_used;
        }
        seen += n;
        if (n)
            after = out[n - 1].seq;
    }
    for (int i = 0; i < N_WRITERS; i++)
        pthread_join(t[i], NULL);
    uint64_t last = 0;
    hr_decisions_read(UINT64_MAX - 1, out, 1, &last);
    assert_int_equal(last, base + (uint64_t)N_WRITERS * PER_WRITER);
    free(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kinds_and_fields),
        cmocka_unit_test(test_wraps_keeping_the_newest),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
