/*
 * test-ready.c - readiness for a balancer (src/server/ready.c): the state
 * machine (every reason, entering at once, leaving only past the margin and
 * the hold, draining for good) and the memory-aware KV usage fraction under
 * a scripted governor: a real hr_gov whose probe is scripted, so the
 * dynamic ceiling falls exactly as a squeeze by another process would make
 * it fall, and the fraction the router reads rises while pool blocks are
 * still free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cmocka.h>

#include "base/log.h"
#include "mem/governor.h"
#include "mem/probe.h"
#include "server/ready.h"

#define MiB (1024ull * 1024)

/* A ready server with an idle pool of 100 blocks of 1 MiB, no governor. */
static struct hr_ready_input idle(void)
{
    return (struct hr_ready_input){.max_queue = 8,
                                   .kv_blocks_total = 100,
                                   .kv_block_bytes = MiB,
                                   .min_request_bytes = 4 * MiB};
}

/* The transition log lines (info) are not this test's subject; cmocka's
 * own messages still reach stderr. */
static void quiet(void)
{
    hr_log_set_level(HR_LOG_ERROR);
}
static void loud(void)
{
    hr_log_set_level(HR_LOG_INFO);
}

/* ---- the usage fraction ---- */

static void test_usage_pool_only(void **state)
{
    (void)state;
    struct hr_ready_input in = idle();
    assert_true(hr_ready_kv_usage(&in) == 0.0);
    in.kv_blocks_used = 25;
    assert_true(hr_ready_kv_usage(&in) == 0.25);
    /* idle cache blocks are not counted as used: a new request can have them */
    in.kv_blocks_evictable = 40;
    assert_true(hr_ready_kv_usage(&in) == 0.25);
    in.kv_blocks_used = 100;
    assert_true(hr_ready_kv_usage(&in) == 1.0);
    in.kv_blocks_used = 150; /* never above 1 */
    assert_true(hr_ready_kv_usage(&in) == 1.0);
    in.kv_blocks_total = 0;
    assert_true(hr_ready_kv_usage(&in) == 0.0);
}

/* The governor's term limits what the pool offers. */
static void test_usage_memory_bound(void **state)
{
    (void)state;
    struct hr_ready_input in = idle();
    in.governed = true;
    in.current_bytes = 500 * MiB;
    in.hard_bytes = 600 * MiB; /* 100 blocks fundable: the pool binds */
    assert_true(hr_ready_kv_usage(&in) == 0.0);
    in.hard_bytes = 530 * MiB; /* 30 fundable of 100 free */
    assert_true(hr_ready_kv_usage(&in) == 0.7);
    in.kv_blocks_evictable = 10; /* the idle cache can be given back: 40 */
    assert_true(hr_ready_kv_usage(&in) == 0.6);
    in.hard_bytes = 400 * MiB; /* over the watermark: only the cache */
    assert_true(hr_ready_kv_usage(&in) == 0.9);
    in.kv_blocks_evictable = 0;
    assert_true(hr_ready_kv_usage(&in) == 1.0);
}

/* A scripted governor: the dynamic ceiling (current + MemAvailable -
 * reserve) falls as another process takes MemAvailable; the fraction the
 * router reads rises toward 1 with 90 of 100 pool blocks still free. */
static void test_usage_scripted_governor(void **state)
{
    (void)state;
    struct hr_err err = {{0}};
    struct hr_mem_script *script = NULL;
    assert_int_equal(hr_mem_script_init(&script, &err), HR_OK);
    struct hr_mem_sample smp = {.known = HR_MEM_HAVE_RSS | HR_MEM_HAVE_AVAILABLE | HR_MEM_HAVE_TOTAL,
                                .rss_bytes = 200 * MiB,
                                .mem_available_bytes = 4096 * MiB,
                                .mem_total_bytes = 8192 * MiB};
    hr_mem_script_set(script, &smp);
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.reserve_bytes = 0;
    struct hr_gov *g = NULL;
    quiet();
    assert_int_equal(hr_gov_init(&cfg, hr_mem_script_probe(script), &g, &err), HR_OK);
    hr_gov_set_account(g, HR_GOV_WEIGHTS, 150 * MiB);
    hr_gov_set_account(g, HR_GOV_KV, 10 * MiB);
    struct hr_gov_view v;
    double last = -1;
    /* MemAvailable: plenty, then 300, 100, 20, 5 MiB left. */
    static const uint64_t avail_mib[] = {4096, 300, 100, 20, 5};
    static const double want[] = {0.10, 0.10, 0.15, 0.91, 1.0};
    for (size_t i = 0; i < sizeof(avail_mib) / sizeof(avail_mib[0]); i++) {
        smp.mem_available_bytes = avail_mib[i] * MiB;
        hr_mem_script_set(script, &smp);
        assert_int_equal(hr_gov_sample(g, &v), HR_OK);
        struct hr_ready_input in = idle();
        in.kv_blocks_used = 10;
        in.governed = true;
        in.level = v.level;
        in.current_bytes = v.current_bytes;
        in.hard_bytes = v.hard_bytes;
        const double u = hr_ready_kv_usage(&in);
        /* dynamic ceiling 200 + avail; hard 0.95 of it; fundable (hard - 200) MiB */
        const double hard = 0.95 * (200.0 + (double)avail_mib[i]);
        double fund = hard > 200 ? hard - 200 : 0;
        double expect = 1.0 - (fund < 90 ? fund : 90) / 100.0;
        assert_true(u >= expect - 0.011 && u <= expect + 0.011);
        assert_true(u >= want[i] - 0.011 && u <= want[i] + 0.011);
        assert_true(u >= last); /* the squeeze only raises it */
        last = u;
        if (i == sizeof(avail_mib) / sizeof(avail_mib[0]) - 1)
            assert_int_equal(v.level, HR_GOV_HARD);
    }
    loud();
    hr_gov_free(g);
    hr_mem_script_free(script);
}

static void test_percent(void **state)
{
    (void)state;
    struct hr_ready_input in = idle();
    assert_int_equal(hr_ready_percent(&in), 100);
    in.kv_blocks_used = 30;
    assert_int_equal(hr_ready_percent(&in), 70);
    in.queued = 4; /* half the queue used: half the share */
    assert_int_equal(hr_ready_percent(&in), 35);
    in.queued = 8;
    assert_int_equal(hr_ready_percent(&in), 1); /* never 0: that is drain */
}

/* ---- the state machine ---- */

static void test_loading_then_ready_at_once(void **state)
{
    (void)state;
    quiet();
    struct hr_ready r;
    hr_ready_init(&r, 2.0, 100.0);
    struct hr_ready_input in = idle();
    in.loading = true;
    assert_int_equal(hr_ready_update(&r, &in, 100.1), HR_READY_LOADING);
    in.loading = false; /* no hold after loading: nothing flapped */
    assert_int_equal(hr_ready_update(&r, &in, 100.2), HR_READY_OK);
    hr_ready_free(&r);
    loud();
    assert_string_equal(hr_ready_reason_name(HR_READY_OK), "ready");
    assert_string_equal(hr_ready_reason_name(HR_READY_QUEUE_FULL), "queue_full");
}

static void test_queue_full_hysteresis_and_hold(void **state)
{
    (void)state;
    quiet();
    struct hr_ready r;
    hr_ready_init(&r, 2.0, 0.0);
    struct hr_ready_input in = idle();
    assert_int_equal(hr_ready_update(&r, &in, 1.0), HR_READY_OK);
    in.queued = 7;
    assert_int_equal(hr_ready_update(&r, &in, 1.1), HR_READY_OK);
    in.queued = 8; /* the next one would be refused: out at once */
    assert_int_equal(hr_ready_update(&r, &in, 1.2), HR_READY_QUEUE_FULL);
    /* below the entering threshold, above the leaving one: stays out */
    in.queued = 7;
    assert_int_equal(hr_ready_update(&r, &in, 5.0), HR_READY_QUEUE_FULL);
    in.queued = 5;
    assert_int_equal(hr_ready_update(&r, &in, 5.1), HR_READY_QUEUE_FULL);
    /* half the queue: the margin is met, and the hold is long past */
    in.queued = 4;
    assert_int_equal(hr_ready_update(&r, &in, 5.2), HR_READY_OK);
    /* back in at once; the margin met again at once, but the hold holds */
    in.queued = 8;
    assert_int_equal(hr_ready_update(&r, &in, 5.3), HR_READY_QUEUE_FULL);
    in.queued = 0;
    assert_int_equal(hr_ready_update(&r, &in, 5.4), HR_READY_QUEUE_FULL);
    assert_int_equal(hr_ready_update(&r, &in, 7.2), HR_READY_QUEUE_FULL);
    assert_int_equal(hr_ready_update(&r, &in, 7.31), HR_READY_OK);
    /* a value sitting at the threshold flips at most once per hold */
    uint64_t before = r.n_changes;
    for (int i = 0; i < 100; i++) {
        in.queued = (i % 2) ? 8 : 7;
        (void)hr_ready_update(&r, &in, 10.0 + i * 0.01);
    }
    assert_true(r.n_changes - before <= 1);
    hr_ready_free(&r);
    loud();
}

static void test_memory_reason(void **state)
{
    (void)state;
    quiet();
    struct hr_ready r;
    hr_ready_init(&r, 1.0, 0.0);
    struct hr_ready_input in = idle();
    in.governed = true;
    in.current_bytes = 500 * MiB;
    in.hard_bytes = 600 * MiB;
    assert_int_equal(hr_ready_update(&r, &in, 1.0), HR_READY_OK);
    /* soft pressure, small headroom: still ready (pressure must be hard) */
    in.level = HR_GOV_SOFT;
    in.current_bytes = 598 * MiB;
    assert_int_equal(hr_ready_update(&r, &in, 1.1), HR_READY_OK);
    /* hard, but the idle cache holds enough for a minimal request: ready */
    in.level = HR_GOV_HARD;
    in.current_bytes = 610 * MiB;
    in.kv_blocks_evictable = 4;
    assert_int_equal(hr_ready_update(&r, &in, 1.2), HR_READY_OK);
    /* hard and not enough: out at once */
    in.kv_blocks_evictable = 3;
    assert_int_equal(hr_ready_update(&r, &in, 1.3), HR_READY_MEMORY);
    /* the level falls to soft but the headroom is under twice the minimum */
    in.level = HR_GOV_SOFT;
    in.current_bytes = 596 * MiB; /* 4 + 3 = 7 MiB, under 2 x 4 */
    assert_int_equal(hr_ready_update(&r, &in, 3.0), HR_READY_MEMORY);
    in.current_bytes = 595 * MiB; /* 8 MiB: the margin is met */
    assert_int_equal(hr_ready_update(&r, &in, 3.1), HR_READY_OK);
    /* without a governor memory never binds */
    in.governed = false;
    in.level = HR_GOV_HARD;
    in.current_bytes = 900 * MiB;
    in.kv_blocks_evictable = 0;
    assert_int_equal(hr_ready_update(&r, &in, 3.2), HR_READY_OK);
    hr_ready_free(&r);
    loud();
}

static void test_draining_is_for_good(void **state)
{
    (void)state;
    quiet();
    struct hr_ready r;
    hr_ready_init(&r, 0.0, 0.0);
    struct hr_ready_input in = idle();
    in.queued = 8;
    assert_int_equal(hr_ready_update(&r, &in, 1.0), HR_READY_QUEUE_FULL);
    in.draining = true; /* draining outranks the others */
    assert_int_equal(hr_ready_update(&r, &in, 1.1), HR_READY_DRAINING);
    in.queued = 0;
    assert_int_equal(hr_ready_update(&r, &in, 100.0), HR_READY_DRAINING);
    hr_ready_free(&r);
    /* hold < 0 takes the default */
    hr_ready_init(&r, -1, 0.0);
    assert_true(r.hold_s == HR_READY_DEFAULT_HOLD_S);
    hr_ready_free(&r);
    loud();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usage_pool_only),
        cmocka_unit_test(test_usage_memory_bound),
        cmocka_unit_test(test_usage_scripted_governor),
        cmocka_unit_test(test_percent),
        cmocka_unit_test(test_loading_then_ready_at_once),
        cmocka_unit_test(test_queue_full_hysteresis_and_hold),
        cmocka_unit_test(test_memory_reason),
        cmocka_unit_test(test_draining_is_for_good),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
