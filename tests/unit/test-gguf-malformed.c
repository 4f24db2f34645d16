/*
 * test-gguf-malformed.c - the GGUF reader against handcrafted files, one
 * test per defect class, plus valid files that exercise every accessor.
 *
 * Every file is built byte by byte with a small builder (struct bb) rather
 * than with the writer, so the tests do not depend on gguf-write.c and can
 * produce bytes the writer would never emit. Each malformed test checks the
 * status, a substring of the message that only that defect class produces,
 * and that *out was reset to NULL. The parser always gets an exact-size heap
 * copy, so ASan reports a read even one byte past the input.
 *
 * With HR_WRITE_MALFORMED_DIR set, every buffer parsed here is also written
 * to that directory as <test>.gguf; that is how tests/fuzz/corpus/gguf/ was
 * seeded.
 */
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

/* ------------------------------------------------------------------------ */
/* The byte builder                                                         */
/* ------------------------------------------------------------------------ */

struct bb {
    uint8_t *p;
    size_t n, cap;
};

static void bb_raw(struct bb *b, const void *src, size_t n)
{
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n)
            cap *= 2;
        b->p = realloc(b->p, cap);
        assert_non_null(b->p);
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void bb_free(struct bb *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

static void bb_u8(struct bb *b, uint8_t v) { bb_raw(b, &v, 1); }
static void bb_i8(struct bb *b, int8_t v) { bb_raw(b, &v, 1); }
static void bb_u16(struct bb *b, uint16_t v) { bb_raw(b, &v, 2); }
static void bb_i16(struct bb *b, int16_t v) { bb_raw(b, &v, 2); }
static void bb_u32(struct bb *b, uint32_t v) { bb_raw(b, &v, 4); }
static void bb_i32(struct bb *b, int32_t v) { bb_raw(b, &v, 4); }
static void bb_u64(struct bb *b, uint64_t v) { bb_raw(b, &v, 8); }
static void bb_i64(struct bb *b, int64_t v) { bb_raw(b, &v, 8); }
static void bb_f32(struct bb *b, float v) { bb_raw(b, &v, 4); }
static void bb_f64(struct bb *b, double v) { bb_raw(b, &v, 8); }

static void bb_str(struct bb *b, const char *s)
{
    bb_u64(b, strlen(s));
    bb_raw(b, s, strlen(s));
}

static void bb_zeros(struct bb *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        bb_u8(b, 0);
}

static void bb_pad(struct bb *b, size_t align)
{
    while (b->n % align)
        bb_u8(b, 0);
}

static void bb_header(struct bb *b, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    bb_u32(b, HR_GGUF_MAGIC);
    bb_u32(b, version);
    bb_u64(b, n_tensors);
    bb_u64(b, n_kv);
}

/* A key and its value type; the caller appends the value. */
static void bb_key(struct bb *b, const char *key, enum hr_gguf_type type)
{
    bb_str(b, key);
    bb_u32(b, type);
}

static void bb_tinfo(struct bb *b, const char *name, uint32_t n_dims, const uint64_t *ne,
                     uint32_t type, uint64_t offset)
{
    bb_str(b, name);
    bb_u32(b, n_dims);
    for (uint32_t d = 0; d < n_dims; d++)
        bb_u64(b, ne[d]);
    bb_u32(b, type);
    bb_u64(b, offset);
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */
/* ------------------------------------------------------------------------ */

/* Writes the buffer as a fuzz seed when HR_WRITE_MALFORMED_DIR is set. */
static void write_seed(const char *name, const struct bb *b)
{
    const char *dir = getenv("HR_WRITE_MALFORMED_DIR");
    if (!dir || !*dir)
        return;
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s.gguf", dir, name);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (b->n)
        assert_int_equal(fwrite(b->p, 1, b->n, f), b->n);
    fclose(f);
}

/* An exact-size heap copy so ASan sees any read past the end. */
static uint8_t *exact_copy(const struct bb *b)
{
    uint8_t *p = malloc(b->n ? b->n : 1);
    assert_non_null(p);
    if (b->n)
        memcpy(p, b->p, b->n);
    return p;
}

static void expect_fail_flags(const char *name, struct bb *b, unsigned flags,
                              enum hr_status want, const char *substr)
{
    write_seed(name, b);
    uint8_t *copy = exact_copy(b);
    struct hr_gguf *g = (struct hr_gguf *)copy; /* must be reset to NULL */
    struct hr_err err = {{0}};
    enum hr_status st = hr_gguf_parse_ex(copy, b->n, flags, &g, &err);
    if (st != want || !strstr(err.msg, substr)) {
        print_error("%s: got status %d (%s) message \"%s\"; wanted %d (%s) with \"%s\"\n", name,
                    st, hr_status_str(st), err.msg, want, hr_status_str(want), substr);
    }
    assert_int_equal(st, want);
    assert_null(g);
    assert_non_null(strstr(err.msg, substr));
    free(copy);
    bb_free(b);
}

/* Fails the same way with and without HR_GGUF_HEADER_ONLY (a defect in the
 * header is a defect whatever the caller wants from the data). */
static void expect_fail(const char *name, struct bb *b, enum hr_status want, const char *substr)
{
    struct bb again = {0};
    bb_raw(&again, b->p, b->n);
    expect_fail_flags(name, b, 0, want, substr);
    uint8_t *copy = exact_copy(&again);
    struct hr_gguf *g = (struct hr_gguf *)copy;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gguf_parse_ex(copy, again.n, HR_GGUF_HEADER_ONLY, &g, &err), want);
    assert_null(g);
    assert_non_null(strstr(err.msg, substr));
    free(copy);
    bb_free(&again);
}

/* A file with one key "k" of the given type and `value_bytes` appended. */
static void one_kv(struct bb *b, enum hr_gguf_type type)
{
    bb_header(b, 3, 0, 1);
    bb_key(b, "k", type);
}

/* Header + one tensor info; the caller may add data afterwards. */
static void one_tensor(struct bb *b, uint32_t n_dims, const uint64_t *ne, uint32_t type,
                       uint64_t offset)
{
    bb_header(b, 3, 1, 0);
    bb_tinfo(b, "w", n_dims, ne, type, offset);
}

/* ------------------------------------------------------------------------ */
/* Header                                                                   */
/* ------------------------------------------------------------------------ */

static void test_empty(void **state)
{
    (void)state;
    struct bb b = {0};
    expect_fail("empty", &b, HR_ERR_INVALID, "empty buffer");
}

static void test_truncated_magic(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_raw(&b, "GG", 2);
    expect_fail("truncated-magic", &b, HR_ERR_INVALID, "too short for the GGUF magic");
}

static void test_bad_magic(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_raw(&b, "GGML", 4);
    bb_u32(&b, 3);
    bb_u64(&b, 0);
    bb_u64(&b, 0);
    expect_fail("bad-magic", &b, HR_ERR_INVALID, "bad magic");
}

static void test_version_1(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_header(&b, 1, 0, 0);
    expect_fail("version-1", &b, HR_ERR_UNSUPPORTED, "GGUF version 1 is not supported");
}

static void test_version_4(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_header(&b, 4, 0, 0);
    expect_fail("version-4", &b, HR_ERR_UNSUPPORTED, "unsupported GGUF version 4");
}

static void test_version_big_endian(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_header(&b, 0x03000000u, 0, 0);
    expect_fail("version-big-endian", &b, HR_ERR_UNSUPPORTED, "big-endian");
}

static void test_truncated_version(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_u32(&b, HR_GGUF_MAGIC);
    bb_u16(&b, 3);
    expect_fail("truncated-version", &b, HR_ERR_INVALID, "the version at byte 4");
}

static void test_truncated_counts(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_u32(&b, HR_GGUF_MAGIC);
    bb_u32(&b, 3);
    bb_u32(&b, 0);
    expect_fail("truncated-tensor-count", &b, HR_ERR_INVALID,
                "truncated header: the tensor count at byte 8");

    bb_u32(&b, HR_GGUF_MAGIC);
    bb_u32(&b, 3);
    bb_u64(&b, 0);
    bb_u32(&b, 0);
    expect_fail("truncated-kv-count", &b, HR_ERR_INVALID,
                "truncated header: the metadata count at byte 16");
}

static void test_absurd_tensor_count(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, (uint64_t)1 << 62, 0);
    bb_zeros(&b, 64);
    expect_fail("absurd-tensor-count", &b, HR_ERR_INVALID,
                "tensor count 4611686018427387904 (at byte 8) is impossible");
}

static void test_absurd_kv_count(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, (uint64_t)1 << 62);
    bb_zeros(&b, 64);
    expect_fail("absurd-kv-count", &b, HR_ERR_INVALID,
                "metadata count 4611686018427387904 (at byte 16) is impossible");
}

/* ------------------------------------------------------------------------ */
/* Metadata                                                                 */
/* ------------------------------------------------------------------------ */

static void test_truncated_in_kv(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, 1);
    bb_key(&b, "general.name", HR_GGUF_UINT32);
    bb_u16(&b, 7); /* half a u32 */
    expect_fail("truncated-in-kv", &b, HR_ERR_INVALID,
                "key 'general.name' (at byte 24): truncated: the uint32 at byte 48");

    /* Inside the second pair's key length: the count check passes (two
     * pairs need 26 bytes and 34 remain) but the length is cut after 5 bytes. */
    bb_header(&b, 3, 0, 2);
    bb_key(&b, "abcdefghijklmnop", HR_GGUF_UINT8);
    bb_u8(&b, 1);
    bb_zeros(&b, 5);
    expect_fail("truncated-in-key-length", &b, HR_ERR_INVALID,
                "metadata kv #1 (at byte 53): truncated: the key length at byte 53 needs 8 "
                "bytes, only 5 remain");
}

static void test_string_past_eof(void **state)
{
    (void)state;
    struct bb b = {0};
    one_kv(&b, HR_GGUF_STRING);
    bb_u64(&b, 1000);
    bb_raw(&b, "llama", 5);
    expect_fail("string-past-eof", &b, HR_ERR_INVALID,
                "key 'k' (at byte 24): string length 1000 at byte 37 runs past the end");

    bb_header(&b, 3, 0, 1);
    bb_u64(&b, (uint64_t)-1); /* key length */
    bb_zeros(&b, 16);
    expect_fail("key-past-eof", &b, HR_ERR_INVALID,
                "key length 18446744073709551615 at byte 24 runs past the end");
}

static void test_duplicate_key(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 0, 3);
    bb_key(&b, "a.b", HR_GGUF_UINT8);
    bb_u8(&b, 1);
    bb_key(&b, "a.c", HR_GGUF_UINT8);
    bb_u8(&b, 2);
    bb_key(&b, "a.b", HR_GGUF_UINT32);
    bb_u32(&b, 3);
    expect_fail("duplicate-key", &b, HR_ERR_INVALID, "duplicate key 'a.b' at bytes 24 and 56");
}

static void test_unknown_value_type(void **state)
{
    (void)state;
    struct bb b = {0};
    one_kv(&b, (enum hr_gguf_type)13);
    bb_u64(&b, 0);
    expect_fail("unknown-value-type", &b, HR_ERR_INVALID, "unknown value type 13 at byte 37");

    one_kv(&b, HR_GGUF_ARRAY);
    bb_u32(&b, 77);
    bb_u64(&b, 0);
    expect_fail("unknown-array-elem-type", &b, HR_ERR_INVALID,
                "unknown array element type 77 at byte 37");
}

static void test_bad_bool(void **state)
{
    (void)state;
    struct bb b = {0};
    one_kv(&b, HR_GGUF_BOOL);
    bb_u8(&b, 2);
    bb_zeros(&b, 12);
    expect_fail("bad-bool", &b, HR_ERR_INVALID, "bool value 2 at byte 37 is neither 0 nor 1");
}

static void test_absurd_array_count(void **state)
{
    (void)state;
    struct bb b = {0};
    one_kv(&b, HR_GGUF_ARRAY);
    bb_u32(&b, HR_GGUF_UINT32);
    bb_u64(&b, (uint64_t)1 << 62);
    bb_zeros(&b, 16);
    expect_fail("absurd-array-count", &b, HR_ERR_INVALID,
                "array count 4611686018427387904 of uint32 at byte 41 is impossible");

    /* Strings: each needs 8 bytes, so 3 cannot fit in 16. */
    one_kv(&b, HR_GGUF_ARRAY);
    bb_u32(&b, HR_GGUF_STRING);
    bb_u64(&b, 3);
    bb_zeros(&b, 16);
    expect_fail("absurd-string-array-count", &b, HR_ERR_INVALID,
                "array count 3 of string at byte 41 is impossible");
}

/* `levels` arrays nested in each other, the innermost holding one u8. */
static void nested(struct bb *b, int levels)
{
    one_kv(b, HR_GGUF_ARRAY);
    for (int i = 1; i < levels; i++) {
        bb_u32(b, HR_GGUF_ARRAY);
        bb_u64(b, 1);
    }
    bb_u32(b, HR_GGUF_UINT8);
    bb_u64(b, 1);
    bb_u8(b, 42);
}

static void test_nesting_too_deep(void **state)
{
    (void)state;
    struct bb b = {0};
    nested(&b, HR_GGUF_MAX_NESTING + 1);
    expect_fail("nesting-too-deep", &b, HR_ERR_LIMIT, "arrays nested deeper than 8 levels");

    /* Exactly the limit parses, and the innermost value is reachable. */
    nested(&b, HR_GGUF_MAX_NESTING);
    struct hr_gguf *g;
    struct hr_err err;
    assert_int_equal(hr_gguf_parse(b.p, b.n, &g, &err), HR_OK);
    const struct hr_gguf_value *v = hr_gguf_find(g, "k");
    for (int i = 1; i < HR_GGUF_MAX_NESTING; i++) {
        assert_int_equal(v->type, HR_GGUF_ARRAY);
        assert_int_equal(v->v.arr.elem_type, HR_GGUF_ARRAY);
        v = &v->v.arr.items[0];
    }
    assert_int_equal(v->v.arr.elem_type, HR_GGUF_UINT8);
    assert_int_equal(hr_gguf_arr_get_u64(v, 0), 42);
    hr_gguf_close(g);
    bb_free(&b);
}

/* ------------------------------------------------------------------------ */
/* Tensor infos                                                             */
/* ------------------------------------------------------------------------ */

static void test_truncated_in_tensor_info(void **state)
{
    (void)state;
    struct bb b = {0};
    bb_header(&b, 3, 1, 0);
    bb_str(&b, "w");
    bb_u32(&b, 2);
    bb_u64(&b, 4);
    bb_u64(&b, 4);
    bb_u32(&b, HR_GGML_F32);
    bb_u32(&b, 0); /* half the offset */
    expect_fail("truncated-in-tensor-info", &b, HR_ERR_INVALID,
                "tensor 'w' (info at byte 24): truncated: the data offset at byte 57");
}

static void test_duplicate_tensor(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[1] = {8};
    bb_header(&b, 3, 2, 0);
    bb_tinfo(&b, "w", 1, ne, HR_GGML_F32, 0);
    bb_tinfo(&b, "w", 1, ne, HR_GGML_F32, 32);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail("duplicate-tensor", &b, HR_ERR_INVALID,
                "duplicate tensor name 'w' (infos at bytes 24 and 57)");
}

static void test_dims(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[5] = {1, 1, 1, 1, 1};
    one_tensor(&b, 0, ne, HR_GGML_F32, 0);
    bb_zeros(&b, 40);
    expect_fail("zero-dims", &b, HR_ERR_INVALID, "n_dims 0 at byte 33 is not in 1..4");

    one_tensor(&b, 5, ne, HR_GGML_F32, 0);
    bb_zeros(&b, 40);
    expect_fail("five-dims", &b, HR_ERR_INVALID, "n_dims 5 at byte 33 is not in 1..4");
}

static void test_ne_too_large(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[2] = {4, (uint64_t)1 << 63};
    one_tensor(&b, 2, ne, HR_GGML_F32, 0);
    expect_fail("ne-too-large", &b, HR_ERR_RANGE, "ne[1] = 9223372036854775808 at byte 45");
}

static void test_elem_overflow(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[2] = {(uint64_t)1 << 32, (uint64_t)1 << 32};
    one_tensor(&b, 2, ne, HR_GGML_F32, 0);
    expect_fail("elem-count-overflow", &b, HR_ERR_RANGE, "element count overflows");

    /* A zero dim does not hide an overflow of the other dims' strides. */
    const uint64_t ne0[3] = {(uint64_t)1 << 40, (uint64_t)1 << 40, 0};
    one_tensor(&b, 3, ne0, HR_GGML_F32, 0);
    expect_fail("elem-count-overflow-zero-dim", &b, HR_ERR_RANGE, "element count overflows");
}

static void test_byte_overflow(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[2] = {(uint64_t)1 << 61, 2};
    one_tensor(&b, 2, ne, HR_GGML_F32, 0);
    expect_fail("byte-size-overflow", &b, HR_ERR_RANGE, "byte size overflows");

    /* The offset plus the size wraps around. */
    const uint64_t ne1[1] = {16};
    one_tensor(&b, 1, ne1, HR_GGML_F32, UINT64_MAX - 31);
    expect_fail("offset-plus-size-overflow", &b, HR_ERR_RANGE, "bytes overflows");
}

static void test_bad_type_id(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[1] = {32};
    one_tensor(&b, 1, ne, 4, 0);
    expect_fail("retired-type-4", &b, HR_ERR_INVALID,
                "tensor 'w' (info at byte 24): ggml type id 4 at byte 45 was retired");
    one_tensor(&b, 1, ne, 5, 0);
    expect_fail("retired-type-5", &b, HR_ERR_INVALID, "ggml type id 5 at byte 45 was retired");
    one_tensor(&b, 1, ne, 200, 0);
    expect_fail("unknown-type-200", &b, HR_ERR_UNSUPPORTED,
                "tensor 'w' (info at byte 24): unknown ggml type id 200 at byte 45");
}

static void test_block_multiple(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[1] = {33};
    one_tensor(&b, 1, ne, HR_GGML_Q8_0, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 68);
    expect_fail("not-block-multiple", &b, HR_ERR_INVALID,
                "ne[0] = 33 is not a multiple of the Q8_0 block size 32");
}

static void test_offset_past_eof(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[2] = {32, 32};
    one_tensor(&b, 2, ne, HR_GGML_F32, 96);
    bb_pad(&b, 32);
    bb_zeros(&b, 2048);
    expect_fail_flags("offset-past-eof", &b, 0, HR_ERR_INVALID,
                      "tensor 'w' (info at byte 24): offset 96 + 4096 bytes (data section at "
                      "byte 96) ends past the end of the file (2144 bytes)");
}

static void test_misaligned(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[1] = {4};
    one_tensor(&b, 1, ne, HR_GGML_F32, 16);
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail("misaligned", &b, HR_ERR_INVALID,
                "data offset 16 at byte 49 is misaligned: not a multiple of the alignment 32");
}

static void test_overlap(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne_a[1] = {16}, ne_b[1] = {8}, ne_c[1] = {0};
    bb_header(&b, 3, 3, 0);
    bb_tinfo(&b, "a", 1, ne_a, HR_GGML_F32, 0);  /* [0, 64) */
    bb_tinfo(&b, "z", 1, ne_c, HR_GGML_F32, 32); /* zero bytes: overlaps nothing */
    bb_tinfo(&b, "b", 1, ne_b, HR_GGML_F32, 32); /* [32, 64) */
    bb_pad(&b, 32);
    bb_zeros(&b, 64);
    expect_fail("overlap", &b, HR_ERR_INVALID,
                "tensor 'b' (info at byte 90): data bytes [32, 64) overlap tensor 'a' (info at "
                "byte 24) at [0, 64)");
}

static void test_data_section_past_eof(void **state)
{
    (void)state;
    struct bb b = {0};
    const uint64_t ne[1] = {0};
    one_tensor(&b, 1, ne, HR_GGML_F32, 0); /* 57 bytes, no padding */
    expect_fail_flags("data-section-past-eof", &b, 0, HR_ERR_INVALID,
                      "the data section starts at byte 64");
}

static void bad_alignment(const char *name, enum hr_gguf_type type, uint32_t value,
                          enum hr_status want, const char *substr)
{
    struct bb b = {0};
    const uint64_t ne[1] = {4};
    bb_header(&b, 3, 1, 1);
    bb_key(&b, "general.alignment", type);
    bb_u32(&b, value);
    bb_tinfo(&b, "w", 1, ne, HR_GGML_F32, 0);
    bb_pad(&b, 64);
    bb_zeros(&b, 64);
    expect_fail(name, &b, want, substr);
}

static void test_bad_alignment(void **state)
{
    (void)state;
    bad_alignment("alignment-0", HR_GGUF_UINT32, 0, HR_ERR_INVALID,
                  "key 'general.alignment' (at byte 24) is 0, not a nonzero power of two");
    bad_alignment("alignment-3", HR_GGUF_UINT32, 3, HR_ERR_INVALID,
                  "is 3, not a nonzero power of two");
    bad_alignment("alignment-int32", HR_GGUF_INT32, 32, HR_ERR_TYPE,
                  "key 'general.alignment' (at byte 24) has type int32; it must be uint32");
}

/* ------------------------------------------------------------------------ */
/* Valid files                                                              */
/* ------------------------------------------------------------------------ */

/* Every scalar type, a string array, a nested array, fixed-size arrays,
 * alignment 64 and two tensors with padding between them. */
#define N_VALID_KV 21
/* Returns where the tensor infos end (before the padding). */
static size_t build_valid(struct bb *b, uint32_t version)
{
    const uint64_t ne_a[2] = {4, 2}, ne_b[2] = {32, 2};
    bb_header(b, version, 2, N_VALID_KV);
    bb_key(b, "general.architecture", HR_GGUF_STRING);
    bb_str(b, "llama");
    bb_key(b, "t.u8", HR_GGUF_UINT8);
    bb_u8(b, 200);
    bb_key(b, "t.i8", HR_GGUF_INT8);
    bb_i8(b, -5);
    bb_key(b, "t.u16", HR_GGUF_UINT16);
    bb_u16(b, 60000);
    bb_key(b, "t.i16", HR_GGUF_INT16);
    bb_i16(b, -30000);
    bb_key(b, "t.u32", HR_GGUF_UINT32);
    bb_u32(b, 4000000000u);
    bb_key(b, "t.i32", HR_GGUF_INT32);
    bb_i32(b, -7);
    bb_key(b, "t.i32_pos", HR_GGUF_INT32);
    bb_i32(b, 12);
    bb_key(b, "t.f32", HR_GGUF_FLOAT32);
    bb_f32(b, 1.5f);
    bb_key(b, "t.bool", HR_GGUF_BOOL);
    bb_u8(b, 1);
    bb_key(b, "t.u64", HR_GGUF_UINT64);
    bb_u64(b, (uint64_t)1 << 40);
    bb_key(b, "t.u64_max", HR_GGUF_UINT64);
    bb_u64(b, UINT64_MAX);
    bb_key(b, "t.i64", HR_GGUF_INT64);
    bb_i64(b, -((int64_t)1 << 40));
    bb_key(b, "t.f64", HR_GGUF_FLOAT64);
    bb_f64(b, 2.25);
    bb_key(b, "t.f64_huge", HR_GGUF_FLOAT64);
    bb_f64(b, 1e300);
    bb_key(b, "general.alignment", HR_GGUF_UINT32);
    bb_u32(b, 64);
    bb_key(b, "tokenizer.ggml.tokens", HR_GGUF_ARRAY);
    bb_u32(b, HR_GGUF_STRING);
    bb_u64(b, 3);
    bb_str(b, "a");
    bb_str(b, "bc");
    bb_str(b, "");
    bb_key(b, "t.nested", HR_GGUF_ARRAY); /* [[1, 2, 3], [], [4]] */
    bb_u32(b, HR_GGUF_ARRAY);
    bb_u64(b, 3);
    bb_u32(b, HR_GGUF_UINT8);
    bb_u64(b, 3);
    bb_u8(b, 1);
    bb_u8(b, 2);
    bb_u8(b, 3);
    bb_u32(b, HR_GGUF_UINT8);
    bb_u64(b, 0);
    bb_u32(b, HR_GGUF_UINT8);
    bb_u64(b, 1);
    bb_u8(b, 4);
    bb_key(b, "t.f32_arr", HR_GGUF_ARRAY);
    bb_u32(b, HR_GGUF_FLOAT32);
    bb_u64(b, 2);
    bb_f32(b, 0.5f);
    bb_f32(b, -1.0f);
    bb_key(b, "t.i32_arr", HR_GGUF_ARRAY);
    bb_u32(b, HR_GGUF_INT32);
    bb_u64(b, 2);
    bb_i32(b, -1);
    bb_i32(b, 70000);
    bb_key(b, "t.bool_arr", HR_GGUF_ARRAY);
    bb_u32(b, HR_GGUF_BOOL);
    bb_u64(b, 2);
    bb_u8(b, 1);
    bb_u8(b, 0);

    bb_tinfo(b, "tok_embd.weight", 2, ne_a, HR_GGML_F32, 0);          /* 32 bytes */
    bb_tinfo(b, "blk.0.attn_q.weight", 2, ne_b, HR_GGML_Q8_0, 64); /* 68 bytes */
    size_t header_end = b->n;
    bb_pad(b, 64);
    for (int i = 0; i < 64 + 68; i++)
        bb_u8(b, (uint8_t)i);
    return header_end;
}

static void test_valid(void **state)
{
    (void)state;
    struct bb b = {0};
    build_valid(&b, 3);
    write_seed("valid-full", &b);
    uint8_t *buf = exact_copy(&b);
    struct hr_gguf *g = NULL;
    struct hr_err err = {{0}};
    enum hr_status st = hr_gguf_parse(buf, b.n, &g, &err);
    if (st != HR_OK)
        print_error("%s\n", err.msg);
    assert_int_equal(st, HR_OK);

    assert_int_equal(hr_gguf_version(g), 3);
    assert_int_equal(hr_gguf_alignment(g), 64);
    assert_int_equal(hr_gguf_file_size(g), b.n);
    assert_ptr_equal(hr_gguf_bytes(g), buf);
    assert_int_equal(hr_gguf_n_kv(g), N_VALID_KV);
    assert_int_equal(hr_gguf_n_tensors(g), 2);
    uint64_t data_off = hr_gguf_data_offset(g);
    assert_int_equal(data_off % 64, 0);
    assert_int_equal(data_off, b.n - (64 + 68));

    /* File order is kept; out-of-range indexes give NULL. */
    assert_true(hr_gguf_str_eq(hr_gguf_kv_at(g, 0)->key, "general.architecture"));
    assert_int_equal(hr_gguf_kv_at(g, 0)->offset, 24);
    assert_true(hr_gguf_str_eq(hr_gguf_kv_at(g, N_VALID_KV - 1)->key, "t.bool_arr"));
    assert_null(hr_gguf_kv_at(g, N_VALID_KV));
    assert_null(hr_gguf_tensor_at(g, 2));

    /* Every key can be found, and names that are prefixes are not confused. */
    for (uint64_t i = 0; i < hr_gguf_n_kv(g); i++) {
        const struct hr_gguf_kv *kv = hr_gguf_kv_at(g, i);
        char *key = hr_gguf_str_dup(kv->key);
        assert_ptr_equal(hr_gguf_find(g, key), &kv->value);
        free(key);
    }
    assert_null(hr_gguf_find(g, "t."));
    assert_null(hr_gguf_find(g, "t.u8x"));
    assert_null(hr_gguf_find(g, ""));

    /* Scalars decoded into the union. */
    assert_int_equal(hr_gguf_find(g, "t.u8")->v.u64, 200);
    assert_int_equal(hr_gguf_find(g, "t.i8")->v.i64, -5);
    assert_int_equal(hr_gguf_find(g, "t.u16")->v.u64, 60000);
    assert_int_equal(hr_gguf_find(g, "t.i16")->v.i64, -30000);
    assert_true(hr_gguf_find(g, "t.f32")->v.f64 == 1.5);

    /* Typed getters. */
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f32;
    bool bv;
    struct hr_gguf_str s;
    assert_int_equal(hr_gguf_get_u32(g, "t.u32", &u32, &err), HR_OK);
    assert_int_equal(u32, 4000000000u);
    assert_int_equal(hr_gguf_get_u64(g, "t.u32", &u64, &err), HR_OK); /* widening */
    assert_int_equal(u64, 4000000000u);
    assert_int_equal(hr_gguf_get_u32(g, "t.i32_pos", &u32, &err), HR_OK); /* small signed */
    assert_int_equal(u32, 12);
    assert_int_equal(hr_gguf_get_u32(g, "t.u8", &u32, &err), HR_OK);
    assert_int_equal(u32, 200);
    assert_int_equal(hr_gguf_get_i64(g, "t.i64", &i64, &err), HR_OK);
    assert_true(i64 == -((int64_t)1 << 40));
    assert_int_equal(hr_gguf_get_i64(g, "t.u16", &i64, &err), HR_OK);
    assert_int_equal(i64, 60000);

    assert_int_equal(hr_gguf_get_u32(g, "t.u64", &u32, &err), HR_ERR_RANGE);
    assert_non_null(strstr(err.msg, "t.u64"));
    assert_int_equal(hr_gguf_get_u32(g, "t.i32", &u32, &err), HR_ERR_RANGE);
    assert_non_null(strstr(err.msg, "-7"));
    assert_int_equal(hr_gguf_get_u64(g, "t.i8", &u64, &err), HR_ERR_RANGE);
    assert_int_equal(hr_gguf_get_i64(g, "t.u64_max", &i64, &err), HR_ERR_RANGE);

    assert_int_equal(hr_gguf_get_u32(g, "general.architecture", &u32, &err), HR_ERR_TYPE);
    assert_non_null(strstr(err.msg, "general.architecture"));
    assert_int_equal(hr_gguf_get_u32(g, "t.bool", &u32, &err), HR_ERR_TYPE);
    assert_int_equal(hr_gguf_get_u32(g, "t.f32", &u32, &err), HR_ERR_TYPE);
    assert_int_equal(hr_gguf_get_u32(g, "no.such.key", &u32, &err), HR_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "no.such.key"));
    assert_int_equal(hr_gguf_get_str(g, "no.such.key", &s, &err), HR_ERR_NOT_FOUND);

    assert_int_equal(hr_gguf_get_f32(g, "t.f32", &f32, &err), HR_OK);
    assert_true(f32 == 1.5f);
    assert_int_equal(hr_gguf_get_f32(g, "t.f64", &f32, &err), HR_OK);
    assert_true(f32 == 2.25f);
    assert_int_equal(hr_gguf_get_f32(g, "t.f64_huge", &f32, &err), HR_ERR_RANGE);
    assert_int_equal(hr_gguf_get_f32(g, "t.u32", &f32, &err), HR_ERR_TYPE);

    assert_int_equal(hr_gguf_get_bool(g, "t.bool", &bv, &err), HR_OK);
    assert_true(bv);
    assert_int_equal(hr_gguf_get_bool(g, "t.u8", &bv, &err), HR_ERR_TYPE);

    assert_int_equal(hr_gguf_get_str(g, "general.architecture", &s, &err), HR_OK);
    assert_true(hr_gguf_str_eq(s, "llama"));
    assert_false(hr_gguf_str_eq(s, "llam"));
    assert_false(hr_gguf_str_eq(s, "llamas"));
    assert_int_equal(hr_gguf_get_str(g, "t.u8", &s, &err), HR_ERR_TYPE);

    /* Arrays. */
    const struct hr_gguf_value *arr;
    assert_int_equal(hr_gguf_get_arr(g, "tokenizer.ggml.tokens", HR_GGUF_STRING, &arr, &err),
                     HR_OK);
    assert_int_equal(arr->v.arr.n, 3);
    assert_true(hr_gguf_str_eq(arr->v.arr.items[0].v.str, "a"));
    assert_true(hr_gguf_str_eq(arr->v.arr.items[1].v.str, "bc"));
    assert_true(hr_gguf_str_eq(arr->v.arr.items[2].v.str, ""));
    char *dup = hr_gguf_str_dup(arr->v.arr.items[1].v.str);
    assert_string_equal(dup, "bc");
    free(dup);
    assert_int_equal(hr_gguf_get_arr(g, "tokenizer.ggml.tokens", HR_GGUF_INT32, &arr, &err),
                     HR_ERR_TYPE);
    assert_int_equal(hr_gguf_get_arr(g, "t.u8", HR_GGUF_TYPE_COUNT, &arr, &err), HR_ERR_TYPE);

    assert_int_equal(hr_gguf_get_arr(g, "t.nested", HR_GGUF_TYPE_COUNT, &arr, &err), HR_OK);
    assert_int_equal(arr->v.arr.elem_type, HR_GGUF_ARRAY);
    assert_int_equal(arr->v.arr.n, 3);
    const struct hr_gguf_value *in0 = &arr->v.arr.items[0], *in1 = &arr->v.arr.items[1],
                               *in2 = &arr->v.arr.items[2];
    assert_int_equal(in0->v.arr.n, 3);
    assert_int_equal(hr_gguf_arr_get_u64(in0, 0), 1);
    assert_int_equal(hr_gguf_arr_get_u64(in0, 2), 3);
    assert_int_equal(in1->v.arr.n, 0);
    assert_int_equal(in2->v.arr.n, 1);
    assert_int_equal(hr_gguf_arr_get_u64(in2, 0), 4);

    assert_int_equal(hr_gguf_get_arr(g, "t.f32_arr", HR_GGUF_FLOAT32, &arr, &err), HR_OK);
    assert_true(hr_gguf_arr_get_f64(arr, 0) == 0.5);
    assert_true(hr_gguf_arr_get_f64(arr, 1) == -1.0);
    assert_int_equal(hr_gguf_get_arr(g, "t.i32_arr", HR_GGUF_INT32, &arr, &err), HR_OK);
    assert_int_equal(hr_gguf_arr_get_i64(arr, 0), -1);
    assert_int_equal(hr_gguf_arr_get_i64(arr, 1), 70000);
    assert_int_equal(hr_gguf_get_arr(g, "t.bool_arr", HR_GGUF_BOOL, &arr, &err), HR_OK);
    assert_int_equal(hr_gguf_arr_get_u64(arr, 0), 1);
    assert_int_equal(hr_gguf_arr_get_u64(arr, 1), 0);

    /* Tensors. */
    const struct hr_gguf_tensor *ta = hr_gguf_find_tensor(g, "tok_embd.weight");
    const struct hr_gguf_tensor *tb = hr_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_ptr_equal(ta, hr_gguf_tensor_at(g, 0));
    assert_ptr_equal(tb, hr_gguf_tensor_at(g, 1));
    assert_null(hr_gguf_find_tensor(g, "blk.0"));
    assert_null(hr_gguf_find_tensor(g, "output.weight"));
    assert_int_equal(ta->n_dims, 2);
    assert_int_equal(ta->ne[0], 4);
    assert_int_equal(ta->ne[1], 2);
    assert_int_equal(ta->ne[2], 1);
    assert_int_equal(ta->ne[3], 1);
    assert_int_equal(ta->type, HR_GGML_F32);
    assert_int_equal(ta->n_elems, 8);
    assert_int_equal(ta->n_bytes, 32);
    assert_ptr_equal(ta->data, buf + data_off);
    assert_int_equal(tb->type, HR_GGML_Q8_0);
    assert_int_equal(tb->n_elems, 64);
    assert_int_equal(tb->n_bytes, 68);
    assert_int_equal(tb->offset, 64);
    assert_ptr_equal(tb->data, buf + data_off + 64);
    assert_int_equal(((const uint8_t *)tb->data)[0], 64);
    assert_int_equal(((const uint8_t *)tb->data)[67], 64 + 67);

    hr_gguf_close(g);
    free(buf);

    /* Version 2 has the same layout. */
    bb_free(&b);
    build_valid(&b, 2);
    assert_int_equal(hr_gguf_parse(b.p, b.n, &g, &err), HR_OK);
    assert_int_equal(hr_gguf_version(g), 2);
    hr_gguf_close(g);
    bb_free(&b);
}

static void test_minimal_and_edge_cases(void **state)
{
    (void)state;
    struct bb b = {0};
    struct hr_gguf *g;
    struct hr_err err;

    /* No tensors, no metadata, no padding. */
    bb_header(&b, 3, 0, 0);
    write_seed("valid-empty", &b);
    assert_int_equal(hr_gguf_parse(b.p, b.n, &g, &err), HR_OK);
    assert_int_equal(hr_gguf_n_kv(g), 0);
    assert_int_equal(hr_gguf_n_tensors(g), 0);
    assert_int_equal(hr_gguf_alignment(g), HR_GGUF_DEFAULT_ALIGNMENT);
    assert_int_equal(hr_gguf_data_offset(g), 32);
    assert_null(hr_gguf_find(g, "general.architecture"));
    assert_null(hr_gguf_find_tensor(g, "x"));
    hr_gguf_close(g);
    bb_free(&b);

    /* A tensor with a zero dim holds no bytes; a 4-dim tensor; empty key. */
    const uint64_t ne0[2] = {0, 5}, ne4[4] = {2, 3, 1, 2};
    bb_header(&b, 3, 2, 1);
    bb_key(&b, "", HR_GGUF_UINT8);
    bb_u8(&b, 9);
    bb_tinfo(&b, "empty", 2, ne0, HR_GGML_Q4_K, 0);
    bb_tinfo(&b, "four", 4, ne4, HR_GGML_F16, 0);
    bb_pad(&b, 32);
    bb_zeros(&b, 24);
    write_seed("valid-zero-dim", &b);
    assert_int_equal(hr_gguf_parse(b.p, b.n, &g, &err), HR_OK);
    const struct hr_gguf_tensor *t = hr_gguf_find_tensor(g, "empty");
    assert_int_equal(t->n_elems, 0);
    assert_int_equal(t->n_bytes, 0);
    assert_non_null(t->data);
    t = hr_gguf_find_tensor(g, "four");
    assert_int_equal(t->n_elems, 12);
    assert_int_equal(t->n_bytes, 24);
    assert_non_null(hr_gguf_find(g, ""));
    hr_gguf_close(g);
    bb_free(&b);

    /* Helpers. */
    assert_string_equal(hr_gguf_type_name(HR_GGUF_UINT32), "uint32");
    assert_string_equal(hr_gguf_type_name(HR_GGUF_FLOAT64), "float64");
    assert_string_equal(hr_gguf_type_name(99), "?");
    assert_int_equal(hr_gguf_type_size(HR_GGUF_UINT16), 2);
    assert_int_equal(hr_gguf_type_size(HR_GGUF_BOOL), 1);
    assert_int_equal(hr_gguf_type_size(HR_GGUF_INT64), 8);
    assert_int_equal(hr_gguf_type_size(HR_GGUF_STRING), 0);
    assert_int_equal(hr_gguf_type_size(HR_GGUF_ARRAY), 0);
    assert_int_equal(hr_gguf_type_size(1234), 0);
    struct hr_gguf_str empty = {NULL, 0};
    assert_true(hr_gguf_str_eq(empty, ""));
    char *d = hr_gguf_str_dup(empty);
    assert_string_equal(d, "");
    free(d);
    hr_gguf_close(NULL);
}

static void test_header_only(void **state)
{
    (void)state;
    struct bb b = {0};
    struct hr_gguf *g;
    struct hr_err err;
    size_t header_end = build_valid(&b, 3);
    uint64_t data_off = b.n - (64 + 68);
    assert_true(header_end < data_off); /* the cut below lands before the padding */

    /* Cut in the middle of the second tensor: the first is whole. */
    b.n = (size_t)data_off + 64 + 10;
    uint8_t *buf = exact_copy(&b);
    assert_int_equal(hr_gguf_parse(buf, b.n, &g, &err), HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "tensor 'blk.0.attn_q.weight'"));
    assert_non_null(strstr(err.msg, "ends past the end of the file"));
    assert_int_equal(hr_gguf_parse_ex(buf, b.n, HR_GGUF_HEADER_ONLY, &g, &err), HR_OK);
    assert_ptr_equal(hr_gguf_find_tensor(g, "tok_embd.weight")->data, buf + data_off);
    assert_null(hr_gguf_find_tensor(g, "blk.0.attn_q.weight")->data);
    assert_int_equal(hr_gguf_data_offset(g), data_off);
    hr_gguf_close(g);
    free(buf);

    /* Cut before the padding: the data section starts past the end. */
    b.n = header_end;
    write_seed("header-only-cut", &b);
    buf = exact_copy(&b);
    assert_int_equal(hr_gguf_parse(buf, b.n, &g, &err), HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "the data section starts at byte"));
    assert_int_equal(hr_gguf_parse_ex(buf, b.n, HR_GGUF_HEADER_ONLY, &g, &err), HR_OK);
    assert_null(hr_gguf_tensor_at(g, 0)->data);
    assert_null(hr_gguf_tensor_at(g, 1)->data);
    assert_int_equal(hr_gguf_data_offset(g), data_off);
    uint32_t u32;
    assert_int_equal(hr_gguf_get_u32(g, "general.alignment", &u32, &err), HR_OK);
    assert_int_equal(u32, 64);
    hr_gguf_close(g);
    free(buf);

    /* Header-only still rejects a cut inside the tensor infos. */
    b.n = header_end - 3;
    expect_fail_flags("cut-in-infos", &b, HR_GGUF_HEADER_ONLY, HR_ERR_INVALID, "truncated");
}

/* ------------------------------------------------------------------------ */
/* hr_gguf_open                                                             */
/* ------------------------------------------------------------------------ */

static char *write_temp(const struct bb *b)
{
    char *path = strdup("/tmp/hr-test-gguf-XXXXXX");
    assert_non_null(path);
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    if (b->n)
        assert_int_equal(write(fd, b->p, b->n), (ssize_t)b->n);
    close(fd);
    return path;
}

static void test_open(void **state)
{
    (void)state;
    struct bb b = {0};
    struct hr_gguf *g;
    struct hr_err err;

    build_valid(&b, 3);
    char *path = write_temp(&b);
    assert_int_equal(hr_gguf_open(path, &g, &err), HR_OK);
    assert_int_equal(hr_gguf_file_size(g), b.n);
    assert_int_equal(hr_gguf_n_tensors(g), 2);
    const struct hr_gguf_tensor *t = hr_gguf_find_tensor(g, "blk.0.attn_q.weight");
    assert_int_equal(((const uint8_t *)t->data)[67], 64 + 67);
    assert_ptr_equal(t->data, (const uint8_t *)hr_gguf_bytes(g) + hr_gguf_data_offset(g) + 64);
    hr_gguf_close(g);
    unlink(path);
    free(path);
    bb_free(&b);

    /* A malformed file: the message names the path, then the defect. */
    bb_header(&b, 1, 0, 0);
    path = write_temp(&b);
    g = (struct hr_gguf *)path;
    assert_int_equal(hr_gguf_open(path, &g, &err), HR_ERR_UNSUPPORTED);
    assert_null(g);
    assert_non_null(strstr(err.msg, path));
    assert_non_null(strstr(err.msg, "GGUF version 1 is not supported"));
    unlink(path);
    free(path);
    bb_free(&b);

    /* An empty file. */
    path = write_temp(&b);
    assert_int_equal(hr_gguf_open(path, &g, &err), HR_ERR_INVALID);
    assert_null(g);
    assert_non_null(strstr(err.msg, "empty file"));
    unlink(path);
    free(path);

    /* A path that does not exist, and a directory. */
    assert_int_equal(hr_gguf_open("/tmp/hr-no-such-dir/model.gguf", &g, &err), HR_ERR_NOT_FOUND);
    assert_null(g);
    assert_non_null(strstr(err.msg, "/tmp/hr-no-such-dir/model.gguf"));
    assert_non_null(strstr(err.msg, "No such file"));
    assert_int_equal(hr_gguf_open("/tmp", &g, &err), HR_ERR_IO);
    assert_null(g);
    assert_non_null(strstr(err.msg, "not a regular file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty),
        cmocka_unit_test(test_truncated_magic),
        cmocka_unit_test(test_bad_magic),
        cmocka_unit_test(test_version_1),
        cmocka_unit_test(test_version_4),
        cmocka_unit_test(test_version_big_endian),
        cmocka_unit_test(test_truncated_version),
        cmocka_unit_test(test_truncated_counts),
        cmocka_unit_test(test_absurd_tensor_count),
        cmocka_unit_test(test_absurd_kv_count),
        cmocka_unit_test(test_truncated_in_kv),
        cmocka_unit_test(test_string_past_eof),
        cmocka_unit_test(test_duplicate_key),
        cmocka_unit_test(test_unknown_value_type),
        cmocka_unit_test(test_bad_bool),
        cmocka_unit_test(test_absurd_array_count),
        cmocka_unit_test(test_nesting_too_deep),
        cmocka_unit_test(test_truncated_in_tensor_info),
        cmocka_unit_test(test_duplicate_tensor),
        cmocka_unit_test(test_dims),
        cmocka_unit_test(test_ne_too_large),
        cmocka_unit_test(test_elem_overflow),
        cmocka_unit_test(test_byte_overflow),
        cmocka_unit_test(test_bad_type_id),
        cmocka_unit_test(test_block_multiple),
        cmocka_unit_test(test_offset_past_eof),
        cmocka_unit_test(test_misaligned),
        cmocka_unit_test(test_overlap),
        cmocka_unit_test(test_data_section_past_eof),
        cmocka_unit_test(test_bad_alignment),
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_minimal_and_edge_cases),
        cmocka_unit_test(test_header_only),
        cmocka_unit_test(test_open),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
