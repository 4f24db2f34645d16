/*
 * test-fp16.c - the f16/bf16 conversions in base/fp16.h.
 *
 * Every one of the 65536 f16 bit patterns must survive f16 -> f32 -> f16
 * unchanged (NaNs stay NaNs), and f32 -> f16 must round to nearest-even at
 * the boundaries that matter: halfway between two halves, the overflow
 * threshold 65520, the subnormal range. The llama.cpp comparison of whole
 * rows is in test-quant-oracle.c.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "base/fp16.h"

static void test_f16_roundtrip_all(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hr_f16_to_f32((uint16_t)h);
        uint16_t back = hr_f32_to_f16(f);
        if (isnan(f))
            assert_true((back & 0x7c00) == 0x7c00 && (back & 0x3ff) != 0);
        else
            assert_int_equal(back, h);
    }
}

static void test_f16_known_values(void **state)
{
    (void)state;
    assert_int_equal(hr_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(hr_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(hr_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(hr_f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(hr_f32_to_f16(65520.0f), 0x7c00); /* ties to even: rounds up to inf */
    assert_int_equal(hr_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(hr_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(hr_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(hr_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(hr_f32_to_f16(5.9604645e-08f), 0x0001); /* smallest subnormal 2^-24 */
    assert_int_equal(hr_f32_to_f16(2.9802322e-08f), 0x0000); /* 2^-25: tie, to even (0) */
    assert_int_equal(hr_f32_to_f16(8.940697e-08f), 0x0002);  /* 1.5 x 2^-24: tie, to even (2) */
    assert_int_equal(hr_f32_to_f16(6.1035156e-05f), 0x0400); /* smallest normal 2^-14 */
    /* 1 + 2^-11 is halfway between 1 and 1 + 2^-10: ties to even -> 1. */
    assert_int_equal(hr_f32_to_f16(1.00048828125f), 0x3c00);
    /* 1 + 3 x 2^-11 is halfway between 1 + 2^-10 (odd) and 1 + 2^-9: -> 1 + 2^-9. */
    assert_int_equal(hr_f32_to_f16(1.00146484375f), 0x3c02);
    assert_true(isnan(hr_f16_to_f32(hr_f32_to_f16(NAN))));
}

/* Every f32 that lies exactly between two adjacent halves must round to the even one. */
static void test_f16_midpoints(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 0x7bff; h++) {
        float lo = hr_f16_to_f32((uint16_t)h), hi = hr_f16_to_f32((uint16_t)(h + 1));
        float mid = (float)(((double)lo + (double)hi) / 2.0);
        uint16_t want = (h & 1) ? (uint16_t)(h + 1) : (uint16_t)h;
        assert_int_equal(hr_f32_to_f16(mid), want);
        assert_int_equal(hr_f32_to_f16(nextafterf(mid, 0.0f)), h);
        assert_int_equal(hr_f32_to_f16(nextafterf(mid, INFINITY)), h + 1);
    }
}

static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(hr_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(hr_f32_to_bf16(hr_bits_f32(0x3f808000u)), 0x3f80); /* tie -> even */
    assert_int_equal(hr_f32_to_bf16(hr_bits_f32(0x3f818000u)), 0x3f82); /* tie -> even */
    assert_int_equal(hr_f32_to_bf16(hr_bits_f32(0x3f808001u)), 0x3f81);
    assert_true(isnan(hr_bf16_to_f32(hr_f32_to_bf16(NAN))));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = hr_bf16_to_f32((uint16_t)h);
        if (!isnan(f))
            assert_int_equal(hr_f32_to_bf16(f), h);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_roundtrip_all),
        cmocka_unit_test(test_f16_known_values),
        cmocka_unit_test(test_f16_midpoints),
        cmocka_unit_test(test_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
