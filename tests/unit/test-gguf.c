/*
 * test-gguf.c - the GGUF writer and reader together: everything the writer
 * can express reads back identically (every value type, nested arrays,
 * tensors of every writable type, alignment, versions 2 and 3), from memory
 * and from an mmap'd file. Malformed input is test-gguf-malformed.c's job.
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

#include "gguf/gguf.h"

static struct hr_gguf *parse_owned(struct hr_gguf_writer *w, void **buf)
{
    size_t size;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gguf_writer_write_mem(w, buf, &size, &err), HR_OK);
    struct hr_gguf *g = NULL;
    enum hr_status st = hr_gguf_parse(*buf, size, &g, &err);
    if (st != HR_OK)
        fail_msg("parse failed: %s", err.msg);
    return g;
}

static void test_every_scalar_type(void **state)
{
    (void)state;
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    struct hr_gguf_value v;
#define SET(key, T, field, val)                                                                    \
    (v = (struct hr_gguf_value){.type = (T)}, v.v.field = (val),                                   \
     assert_int_equal(hr_gguf_writer_set_value(w, key, &v), HR_OK))
    SET("u8", HR_GGUF_UINT8, u64, 255);
    SET("i8", HR_GGUF_INT8, i64, -128);
    SET("u16", HR_GGUF_UINT16, u64, 65535);
    SET("i16", HR_GGUF_INT16, i64, -32768);
    SET("u32", HR_GGUF_UINT32, u64, 4000000000u);
    SET("i32", HR_GGUF_INT32, i64, -2000000000);
    SET("f32", HR_GGUF_FLOAT32, f64, 1.5);
    SET("bool", HR_GGUF_BOOL, u64, 1);
    SET("u64", HR_GGUF_UINT64, u64, UINT64_MAX);
    SET("i64", HR_GGUF_INT64, i64, INT64_MIN);
    SET("f64", HR_GGUF_FLOAT64, f64, 1e300);
#undef SET
    assert_int_equal(hr_gguf_writer_set_str(w, "str", "héllo, wörld"), HR_OK);
    assert_int_equal(hr_gguf_writer_set_str(w, "empty", ""), HR_OK);

    void *buf;
    struct hr_gguf *g = parse_owned(w, &buf);
    assert_int_equal(hr_gguf_n_kv(g), 13);
    assert_int_equal(hr_gguf_version(g), 3);
    const struct hr_gguf_value *x;
    assert_non_null(x = hr_gguf_find(g, "u8"));
    assert_int_equal(x->type, HR_GGUF_UINT8);
    assert_int_equal(x->v.u64, 255);
    assert_int_equal(hr_gguf_find(g, "i8")->v.i64, -128);
    assert_int_equal(hr_gguf_find(g, "u16")->v.u64, 65535);
    assert_int_equal(hr_gguf_find(g, "i16")->v.i64, -32768);
    assert_int_equal(hr_gguf_find(g, "u32")->v.u64, 4000000000u);
    assert_int_equal(hr_gguf_find(g, "i32")->v.i64, -2000000000);
    assert_true(hr_gguf_find(g, "f32")->v.f64 == 1.5);
    assert_int_equal(hr_gguf_find(g, "bool")->v.u64, 1);
    assert_true(hr_gguf_find(g, "u64")->v.u64 == UINT64_MAX);
    assert_true(hr_gguf_find(g, "i64")->v.i64 == INT64_MIN);
    assert_true(hr_gguf_find(g, "f64")->v.f64 == 1e300);
    struct hr_gguf_str s;
    assert_int_equal(hr_gguf_get_str(g, "str", &s, NULL), HR_OK);
    assert_true(hr_gguf_str_eq(s, "héllo, wörld"));
    assert_int_equal(hr_gguf_get_str(g, "empty", &s, NULL), HR_OK);
    assert_int_equal(s.len, 0);
    /* Key order is the writer's order. */
    assert_true(hr_gguf_str_eq(hr_gguf_kv_at(g, 0)->key, "u8"));
    assert_true(hr_gguf_str_eq(hr_gguf_kv_at(g, 12)->key, "empty"));

    /* Typed getters: widening works, wrong types and narrowing overflow do not. */
    uint32_t u32;
    uint64_t u64;
    float f;
    bool b;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gguf_get_u64(g, "u32", &u64, &err), HR_OK);
    assert_int_equal(u64, 4000000000u);
    assert_int_equal(hr_gguf_get_u32(g, "u8", &u32, &err), HR_OK);
    assert_int_equal(u32, 255);
    assert_int_equal(hr_gguf_get_u32(g, "u64", &u32, &err), HR_ERR_RANGE);
    assert_int_equal(hr_gguf_get_u32(g, "str", &u32, &err), HR_ERR_TYPE);
    assert_non_null(strstr(err.msg, "str"));
    assert_int_equal(hr_gguf_get_u32(g, "nope", &u32, &err), HR_ERR_NOT_FOUND);
    assert_int_equal(hr_gguf_get_f32(g, "f32", &f, &err), HR_OK);
    assert_true(f == 1.5f);
    assert_int_equal(hr_gguf_get_bool(g, "bool", &b, &err), HR_OK);
    assert_true(b);
    assert_int_equal(hr_gguf_get_bool(g, "u8", &b, &err), HR_ERR_TYPE);
    hr_gguf_close(g);
    free(buf);
    hr_gguf_writer_free(w);
}

static void test_arrays_and_nesting(void **state)
{
    (void)state;
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    const char *strs[] = {"<s>", "", "▁hello", "\xe4\xbd\xa0"};
    assert_int_equal(hr_gguf_writer_set_arr_str(w, "tokens", strs, 4), HR_OK);
    int32_t ints[] = {1, -2, 3, INT32_MIN};
    assert_int_equal(hr_gguf_writer_set_arr(w, "ints", HR_GGUF_INT32, ints, 4), HR_OK);
    float fl[] = {0.5f, -1e9f};
    assert_int_equal(hr_gguf_writer_set_arr(w, "floats", HR_GGUF_FLOAT32, fl, 2), HR_OK);
    assert_int_equal(hr_gguf_writer_set_arr(w, "none", HR_GGUF_UINT8, NULL, 0), HR_OK);
    uint64_t u64s[] = {UINT64_MAX, 0};
    assert_int_equal(hr_gguf_writer_set_arr(w, "u64s", HR_GGUF_UINT64, u64s, 2), HR_OK);

    /* [[1, 2, 3], [], [[7]]] style nesting: an array of arrays of u8, and a depth-3 chain. */
    uint8_t a0[] = {1, 2, 3};
    struct hr_gguf_value inner[2] = {
        {.type = HR_GGUF_ARRAY, .v.arr = {.elem_type = HR_GGUF_UINT8, .n = 3, .raw = a0}},
        {.type = HR_GGUF_ARRAY, .v.arr = {.elem_type = HR_GGUF_UINT8, .n = 0, .raw = NULL}},
    };
    struct hr_gguf_value outer = {.type = HR_GGUF_ARRAY,
                                  .v.arr = {.elem_type = HR_GGUF_ARRAY, .n = 2, .items = inner}};
    assert_int_equal(hr_gguf_writer_set_value(w, "nested", &outer), HR_OK);
    struct hr_gguf_value s1 = {.type = HR_GGUF_STRING, .v.str = {"deep", 4}};
    struct hr_gguf_value l1 = {.type = HR_GGUF_ARRAY,
                               .v.arr = {.elem_type = HR_GGUF_STRING, .n = 1, .items = &s1}};
    struct hr_gguf_value l2 = {.type = HR_GGUF_ARRAY,
                               .v.arr = {.elem_type = HR_GGUF_ARRAY, .n = 1, .items = &l1}};
    struct hr_gguf_value l3 = {.type = HR_GGUF_ARRAY,
                               .v.arr = {.elem_type = HR_GGUF_ARRAY, .n = 1, .items = &l2}};
    assert_int_equal(hr_gguf_writer_set_value(w, "deep", &l3), HR_OK);
    /* Setting a key again replaces the value in place. */
    assert_int_equal(hr_gguf_writer_set_arr(w, "floats", HR_GGUF_FLOAT32, fl, 1), HR_OK);

    void *buf;
    struct hr_gguf *g = parse_owned(w, &buf);
    const struct hr_gguf_value *a;
    assert_int_equal(hr_gguf_get_arr(g, "tokens", HR_GGUF_STRING, &a, NULL), HR_OK);
    assert_int_equal(a->v.arr.n, 4);
    for (int i = 0; i < 4; i++)
        assert_true(hr_gguf_str_eq(a->v.arr.items[i].v.str, strs[i]));
    assert_int_equal(hr_gguf_get_arr(g, "tokens", HR_GGUF_INT32, &a, NULL), HR_ERR_TYPE);
    assert_int_equal(hr_gguf_get_arr(g, "ints", HR_GGUF_INT32, &a, NULL), HR_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(hr_gguf_arr_get_i64(a, (uint64_t)i), ints[i]);
    assert_int_equal(hr_gguf_get_arr(g, "floats", HR_GGUF_FLOAT32, &a, NULL), HR_OK);
    assert_int_equal(a->v.arr.n, 1);
    assert_true(hr_gguf_arr_get_f64(a, 0) == 0.5);
    assert_int_equal(hr_gguf_get_arr(g, "none", HR_GGUF_UINT8, &a, NULL), HR_OK);
    assert_int_equal(a->v.arr.n, 0);
    assert_int_equal(hr_gguf_get_arr(g, "u64s", HR_GGUF_UINT64, &a, NULL), HR_OK);
    assert_true(hr_gguf_arr_get_u64(a, 0) == UINT64_MAX);
    assert_int_equal(hr_gguf_get_arr(g, "nested", HR_GGUF_ARRAY, &a, NULL), HR_OK);
    assert_int_equal(a->v.arr.n, 2);
    assert_int_equal(a->v.arr.items[0].v.arr.elem_type, HR_GGUF_UINT8);
    assert_int_equal(a->v.arr.items[0].v.arr.n, 3);
    assert_int_equal(hr_gguf_arr_get_u64(&a->v.arr.items[0], 2), 3);
    assert_int_equal(a->v.arr.items[1].v.arr.n, 0);
    assert_int_equal(hr_gguf_get_arr(g, "deep", HR_GGUF_ARRAY, &a, NULL), HR_OK);
    const struct hr_gguf_value *d = &a->v.arr.items[0].v.arr.items[0];
    assert_int_equal(d->v.arr.elem_type, HR_GGUF_STRING);
    assert_true(hr_gguf_str_eq(d->v.arr.items[0].v.str, "deep"));
    hr_gguf_close(g);
    free(buf);

    /* Nesting past the limit is refused by the writer too. */
    struct hr_gguf_value chain[HR_GGUF_MAX_NESTING + 2];
    chain[0] = (struct hr_gguf_value){.type = HR_GGUF_ARRAY,
                                      .v.arr = {.elem_type = HR_GGUF_UINT8, .n = 0}};
    for (int i = 1; i < HR_GGUF_MAX_NESTING + 2; i++)
        chain[i] = (struct hr_gguf_value){
            .type = HR_GGUF_ARRAY, .v.arr = {.elem_type = HR_GGUF_ARRAY, .n = 1, .items = &chain[i - 1]}};
    assert_int_equal(hr_gguf_writer_set_value(w, "too-deep", &chain[HR_GGUF_MAX_NESTING + 1]),
                     HR_ERR_INVALID);
    hr_gguf_writer_free(w);
}

static enum hr_status fill_pattern(void *ctx, void *dst, uint64_t n, struct hr_err *err)
{
    (void)err;
    uint8_t seed = (uint8_t)(uintptr_t)ctx;
    for (uint64_t i = 0; i < n; i++)
        ((uint8_t *)dst)[i] = (uint8_t)(seed + i * 7);
    return HR_OK;
}

static void check_tensors(struct hr_gguf *g, uint32_t alignment)
{
    assert_int_equal(hr_gguf_n_tensors(g), 4);
    assert_int_equal(hr_gguf_alignment(g), alignment);
    assert_int_equal(hr_gguf_data_offset(g) % alignment, 0);
    const struct hr_gguf_tensor *t = hr_gguf_find_tensor(g, "a.f32");
    assert_non_null(t);
    assert_int_equal(t->n_dims, 1);
    assert_int_equal(t->ne[0], 3);
    assert_int_equal(t->n_bytes, 12);
    float want[] = {1, 2, 3};
    assert_memory_equal(t->data, want, 12);
    t = hr_gguf_find_tensor(g, "b.q8_0");
    assert_int_equal(t->type, HR_GGML_Q8_0);
    assert_int_equal(t->ne[0], 64);
    assert_int_equal(t->ne[1], 3);
    assert_int_equal(t->n_elems, 192);
    assert_int_equal(t->n_bytes, 6 * 34);
    const uint8_t *p = t->data;
    for (uint64_t i = 0; i < t->n_bytes; i++)
        assert_int_equal(p[i], (uint8_t)(5 + i * 7));
    t = hr_gguf_find_tensor(g, "c.f16.4d");
    assert_int_equal(t->n_dims, 4);
    assert_int_equal(t->n_elems, 2 * 3 * 4 * 5);
    t = hr_gguf_find_tensor(g, "d.bf16");
    assert_int_equal(t->type, HR_GGML_BF16);
    assert_int_equal(t->n_bytes, 2);
    for (uint64_t i = 0; i < 4; i++)
        assert_int_equal(hr_gguf_tensor_at(g, i)->offset % alignment, 0);
    assert_null(hr_gguf_find_tensor(g, "missing"));
}

static struct hr_gguf_writer *tensor_writer(uint32_t version, uint32_t alignment)
{
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    hr_gguf_writer_set_version(w, version);
    if (alignment != HR_GGUF_DEFAULT_ALIGNMENT)
        assert_int_equal(hr_gguf_writer_set_u32(w, "general.alignment", alignment), HR_OK);
    static float a[] = {1, 2, 3};
    static uint16_t c[120], d[1];
    struct hr_err err = {{0}};
    assert_int_equal(hr_gguf_writer_add_tensor(w, "a.f32", HR_GGML_F32, 1, (uint64_t[]){3}, a,
                                               &err), HR_OK);
    assert_int_equal(hr_gguf_writer_add_tensor_cb(w, "b.q8_0", HR_GGML_Q8_0, 2,
                                                  (uint64_t[]){64, 3}, fill_pattern,
                                                  (void *)(uintptr_t)5, &err), HR_OK);
    assert_int_equal(hr_gguf_writer_add_tensor(w, "c.f16.4d", HR_GGML_F16, 4,
                                               (uint64_t[]){2, 3, 4, 5}, c, &err), HR_OK);
    assert_int_equal(hr_gguf_writer_add_tensor(w, "d.bf16", HR_GGML_BF16, 1, (uint64_t[]){1}, d,
                                               &err), HR_OK);
    /* The writer refuses what the reader would refuse. */
    assert_int_equal(hr_gguf_writer_add_tensor(w, "bad", HR_GGML_Q8_0, 1, (uint64_t[]){33}, a,
                                               &err), HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "block"));
    assert_int_equal(hr_gguf_writer_add_tensor(w, "a.f32", HR_GGML_F32, 1, (uint64_t[]){3}, a,
                                               &err), HR_ERR_INVALID);
    assert_int_equal(hr_gguf_writer_add_tensor(w, "z", HR_GGML_F32, 5,
                                               (uint64_t[]){1, 1, 1, 1, 1}, a, &err),
                     HR_ERR_INVALID);
    return w;
}

static void test_tensors_mem(void **state)
{
    (void)state;
    uint32_t versions[] = {2, 3}, aligns[] = {32, 64, 1};
    for (int vi = 0; vi < 2; vi++) {
        for (int ai = 0; ai < 3; ai++) {
            struct hr_gguf_writer *w = tensor_writer(versions[vi], aligns[ai]);
            void *buf;
            struct hr_gguf *g = parse_owned(w, &buf);
            assert_int_equal(hr_gguf_version(g), versions[vi]);
            check_tensors(g, aligns[ai]);
            hr_gguf_close(g);
            free(buf);
            hr_gguf_writer_free(w);
        }
    }
}

static void test_tensors_file(void **state)
{
    (void)state;
    char path[] = "/tmp/hr-test-gguf-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    struct hr_gguf_writer *w = tensor_writer(3, 32);
    struct hr_err err = {{0}};
    assert_int_equal(hr_gguf_writer_write_file(w, path, &err), HR_OK);
    hr_gguf_writer_free(w);
    struct hr_gguf *g = NULL;
    if (hr_gguf_open(path, &g, &err) != HR_OK)
        fail_msg("%s", err.msg);
    check_tensors(g, 32);
    hr_gguf_close(g);
    unlink(path);
    assert_int_equal(hr_gguf_open(path, &g, &err), HR_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, path));
    assert_null(g);
}

static void test_empty_file_and_close_null(void **state)
{
    (void)state;
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    void *buf;
    struct hr_gguf *g = parse_owned(w, &buf);
    assert_int_equal(hr_gguf_n_kv(g), 0);
    assert_int_equal(hr_gguf_n_tensors(g), 0);
    hr_gguf_close(g);
    free(buf);
    hr_gguf_writer_free(w);
    hr_gguf_close(NULL);
    hr_gguf_writer_free(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_scalar_type),
        cmocka_unit_test(test_arrays_and_nesting),
        cmocka_unit_test(test_tensors_mem),
        cmocka_unit_test(test_tensors_file),
        cmocka_unit_test(test_empty_file_and_close_null),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
