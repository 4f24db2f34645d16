/*
 * test-state-pool.c - recurrent state slots (src/engine/state-pool.c), both
 * kinds: the CPU engine's pool whose slots are host memory, and the
 * books-only pool the CUDA engine keeps for its device slots.
 *
 * Binding: a slot per owner, found again by the owner, refused when all are
 * bound, free again after release; releasing NULL or an unbound owner does
 * nothing; a NULL pool reads as one with no slots. The host pool's slots
 * are distinct, writable, page-aligned memory of slot bytes; the books-only
 * pool hands out no memory (NULL) and counts n_slots x slot bytes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "engine/state-pool.h"

static void check_books(struct hr_state_pool *p, uint32_t n)
{
    int owners[8];
    assert_true(n <= 8);
    assert_int_equal(hr_state_n_slots(p), n);
    for (uint32_t i = 0; i < n; i++) {
        const int32_t s = hr_state_acquire(p, &owners[i]);
        assert_true(s >= 0 && (uint32_t)s < n);
        assert_int_equal(hr_state_acquire(p, &owners[i]), s); /* bound: the same slot */
        assert_int_equal(hr_state_find(p, &owners[i]), s);
        for (uint32_t j = 0; j < i; j++)
            assert_int_not_equal(hr_state_find(p, &owners[j]), s);
    }
    int extra;
    assert_int_equal(hr_state_n_used(p), n);
    assert_int_equal(hr_state_acquire(p, &extra), -1); /* all bound */
    assert_int_equal(hr_state_find(p, &extra), -1);
    hr_state_release(p, &extra); /* not bound: nothing */
    hr_state_release(p, NULL);
    assert_int_equal(hr_state_n_used(p), n);
    const int32_t freed = hr_state_find(p, &owners[1]);
    hr_state_release(p, &owners[1]);
    assert_int_equal(hr_state_n_used(p), n - 1);
    assert_int_equal(hr_state_find(p, &owners[1]), -1);
    assert_int_equal(hr_state_acquire(p, &extra), freed); /* the freed slot serves again */
    for (uint32_t i = 0; i < n; i++)
        hr_state_release(p, &owners[i]);
    hr_state_release(p, &extra);
    assert_int_equal(hr_state_n_used(p), 0);
}

static void test_host_pool(void **state)
{
    (void)state;
    struct hr_state_pool *p = NULL;
    struct hr_err err = {{0}};
    const uint64_t floats = 3000; /* 12000 bytes: not a page multiple */
    assert_int_equal(hr_state_pool_init(4, floats, &p, &err), HR_OK);
    assert_int_equal(hr_state_slot_bytes(p), floats * 4);
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    assert_int_equal(hr_state_pool_bytes(p), 4 * ((floats * 4 + page - 1) / page * page));
    for (int32_t i = 0; i < 4; i++) {
        float *s = hr_state_slot(p, i);
        assert_non_null(s);
        assert_int_equal((uintptr_t)s % page, 0);
        memset(s, 0x11 * (i + 1), floats * 4); /* writable, whole */
        if (i)
            assert_true((uint8_t *)s >= (uint8_t *)hr_state_slot(p, i - 1) + floats * 4);
    }
    check_books(p, 4);
    hr_state_pool_free(p);
}

static void test_books_only(void **state)
{
    (void)state;
    struct hr_state_pool *p = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_state_pool_init_books(6, 3000, &p, &err), HR_OK);
    assert_int_equal(hr_state_slot_bytes(p), 12000);
    assert_int_equal(hr_state_pool_bytes(p), 6 * 12000); /* the device's bytes, exactly */
    assert_null(hr_state_slot(p, 0));
    check_books(p, 6);
    hr_state_pool_free(p);
}

static void test_empty(void **state)
{
    (void)state;
    struct hr_state_pool *p = NULL;
    struct hr_err err = {{0}};
    assert_int_equal(hr_state_pool_init(0, 100, &p, &err), HR_OK);
    assert_int_equal(hr_state_n_slots(p), 0);
    int o;
    assert_int_equal(hr_state_acquire(p, &o), -1);
    hr_state_pool_free(p);
    /* NULL: a backend without recurrent state */
    assert_int_equal(hr_state_n_slots(NULL), 0);
    assert_int_equal(hr_state_n_used(NULL), 0);
    assert_int_equal(hr_state_slot_bytes(NULL), 0);
    assert_int_equal(hr_state_pool_bytes(NULL), 0);
    hr_state_release(NULL, &o);
    hr_state_pool_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_pool),
        cmocka_unit_test(test_books_only),
        cmocka_unit_test(test_empty),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
