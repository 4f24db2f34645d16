/*
 * gguf-read.c - the GGUF reader: validates a header held in memory (or an
 * mmap'd file) and builds an index over it; see gguf.h for the contract.
 *
 * Why it is built this way. A model file is untrusted input that may be
 * many GiB, so the reader never copies tensor data and never trusts a
 * number before checking it against the bytes that remain:
 *
 *   1. Every read goes through `struct cursor`, which refuses to move past
 *      the end and reads little-endian integers with memcpy (the file has no
 *      alignment guarantees inside the header).
 *   2. Every count (metadata pairs, tensors, array elements) is checked
 *      against the smallest number of bytes its items could occupy *before*
 *      anything is allocated for it, so the index is at most a small constant
 *      times the file size (about 5x for a file made only of empty strings);
 *      an absurd count fails at once instead of asking malloc for terabytes.
 *   3. Arrays of arrays are parsed by recursion bounded by
 *      HR_GGUF_MAX_NESTING, so no input can exhaust the stack.
 *   4. Keys and tensor names are sorted into pointer indexes: that finds
 *      duplicates in O(n log n) and makes hr_gguf_find O(log n).
 *   5. Tensor geometry is checked with division before multiplication, then
 *      every tensor's byte range is checked against the file, and the ranges
 *      are sorted by offset to find overlaps.
 *
 * Parsing happens in this order (each step may fail with a message naming
 * the key or tensor and the byte offset; on failure everything allocated so
 * far is freed and *out stays NULL):
 *
 *   header -> counts -> key/value pairs -> duplicate keys -> general.alignment
 *   -> tensor infos -> duplicate names -> data section -> byte ranges -> overlaps
 *
 * Error statuses: HR_ERR_INVALID for malformed bytes, HR_ERR_UNSUPPORTED for
 * well-formed things we do not read (version 1, big-endian files, ggml type ids
 * newer than our table), HR_ERR_RANGE for numbers that overflow, HR_ERR_LIMIT
 * for nesting deeper than HR_GGUF_MAX_NESTING, HR_ERR_TYPE for
 * general.alignment stored with a type other than uint32.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reader decodes integers by memcpy into host integers; a big-endian host
 * would need byte swaps everywhere, and no target we build for is one. */
#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf-read.c assumes a little-endian host"
#endif

/* The smallest encodings, used to bound counts before allocating:
 * a key/value pair is a u64 key length, a u32 value type and at least one
 * value byte (a u8, i8 or bool); a tensor info is a u64 name length, a u32
 * n_dims, at least one u64 ne, a u32 type and a u64 offset; a string is its
 * u64 length; an array is a u32 element type and a u64 count. */
#define MIN_KV_BYTES          (8u + 4u + 1u)
#define MIN_TENSOR_INFO_BYTES (8u + 4u + 8u + 4u + 8u)
#define MIN_STRING_BYTES      8u
#define MIN_ARRAY_BYTES       (4u + 8u)

#define ALIGNMENT_KEY "general.alignment"

struct hr_gguf {
    const uint8_t *bytes; /* the parsed buffer, or `map` */
    uint64_t size;
    uint32_t version;
    uint32_t alignment;
    uint64_t data_offset; /* may exceed `size` for a header-only parse */

    uint64_t n_kv;
    struct hr_gguf_kv *kvs;             /* file order */
    const struct hr_gguf_kv **kv_by_key; /* sorted by key bytes */

    uint64_t n_tensors;
    struct hr_gguf_tensor *tensors;                 /* file order */
    const struct hr_gguf_tensor **tensor_by_name;   /* sorted by name bytes */
    uint64_t *tensor_info_at;                        /* byte offset of each info, for messages */

    void *map; /* set by hr_gguf_open; released by hr_gguf_close */
    size_t map_size;
};

/* ------------------------------------------------------------------------ */
/* Small public helpers                                                     */
/* ------------------------------------------------------------------------ */

static const char *const g_type_names[HR_GGUF_TYPE_COUNT] = {
    [HR_GGUF_UINT8] = "uint8",     [HR_GGUF_INT8] = "int8",       [HR_GGUF_UINT16] = "uint16",
    [HR_GGUF_INT16] = "int16",     [HR_GGUF_UINT32] = "uint32",   [HR_GGUF_INT32] = "int32",
    [HR_GGUF_FLOAT32] = "float32", [HR_GGUF_BOOL] = "bool",       [HR_GGUF_STRING] = "string",
    [HR_GGUF_ARRAY] = "array",     [HR_GGUF_UINT64] = "uint64",   [HR_GGUF_INT64] = "int64",
    [HR_GGUF_FLOAT64] = "float64",
};

static const uint8_t g_type_sizes[HR_GGUF_TYPE_COUNT] = {
    [HR_GGUF_UINT8] = 1,   [HR_GGUF_INT8] = 1,  [HR_GGUF_UINT16] = 2,  [HR_GGUF_INT16] = 2,
    [HR_GGUF_UINT32] = 4,  [HR_GGUF_INT32] = 4, [HR_GGUF_FLOAT32] = 4, [HR_GGUF_BOOL] = 1,
    [HR_GGUF_STRING] = 0,  [HR_GGUF_ARRAY] = 0, [HR_GGUF_UINT64] = 8,  [HR_GGUF_INT64] = 8,
    [HR_GGUF_FLOAT64] = 8,
};

const char *hr_gguf_type_name(uint32_t type)
{
    return type < HR_GGUF_TYPE_COUNT ? g_type_names[type] : "?";
}

size_t hr_gguf_type_size(uint32_t type)
{
    return type < HR_GGUF_TYPE_COUNT ? g_type_sizes[type] : 0;
}

bool hr_gguf_str_eq(struct hr_gguf_str s, const char *c)
{
    size_t n = strlen(c);
    return s.len == n && (n == 0 || memcmp(s.ptr, c, n) == 0);
}

char *hr_gguf_str_dup(struct hr_gguf_str s)
{
    if (s.len >= SIZE_MAX)
        return NULL;
    char *out = malloc((size_t)s.len + 1);
    if (!out)
        return NULL;
    if (s.len)
        memcpy(out, s.ptr, (size_t)s.len);
    out[s.len] = '\0';
    return out;
}

/* Byte-wise order (shorter first on a common prefix); shared by the sort and
 * the lookups so both agree. */
static int str_cmp(const char *a, uint64_t a_len, const char *b, uint64_t b_len)
{
    uint64_t n = a_len < b_len ? a_len : b_len;
    int c = n ? memcmp(a, b, (size_t)n) : 0;
    if (c)
        return c;
    return a_len < b_len ? -1 : a_len > b_len;
}

static bool is_signed_int(enum hr_gguf_type t)
{
    return t == HR_GGUF_INT8 || t == HR_GGUF_INT16 || t == HR_GGUF_INT32 || t == HR_GGUF_INT64;
}

static bool is_unsigned_int(enum hr_gguf_type t)
{
    return t == HR_GGUF_UINT8 || t == HR_GGUF_UINT16 || t == HR_GGUF_UINT32 ||
           t == HR_GGUF_UINT64;
}

/* ------------------------------------------------------------------------ */
/* The cursor                                                               */
/* ------------------------------------------------------------------------ */

/*
 * A read position in the buffer. `ctx` is a short description of what is
 * being parsed ("header", "key 'general.name' (at byte 24)"), so a
 * truncation message says where it happened.
 */
struct cursor {
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    unsigned flags;
    char ctx[200];
    struct hr_err *err;
};

static uint64_t cur_left(const struct cursor *c)
{
    return c->size - c->pos;
}

static enum hr_status cur_truncated(struct cursor *c, const char *what, uint64_t need)
{
    return hr_err_set(c->err, HR_ERR_INVALID,
                      "%s: truncated: the %s at byte %" PRIu64 " needs %" PRIu64
                      " bytes, only %" PRIu64 " remain",
                      c->ctx, what, c->pos, need, cur_left(c));
}

static enum hr_status cur_read(struct cursor *c, void *dst, uint64_t n, const char *what)
{
    if (cur_left(c) < n)
        return cur_truncated(c, what, n);
    memcpy(dst, c->p + c->pos, (size_t)n);
    c->pos += n;
    return HR_OK;
}

static enum hr_status cur_u32(struct cursor *c, uint32_t *v, const char *what)
{
    return cur_read(c, v, 4, what);
}

static enum hr_status cur_u64(struct cursor *c, uint64_t *v, const char *what)
{
    return cur_read(c, v, 8, what);
}

/* A length-prefixed string; the bytes stay in the buffer. */
static enum hr_status cur_str(struct cursor *c, struct hr_gguf_str *s, const char *what)
{
    uint64_t at = c->pos;
    uint64_t len = 0; /* set by cur_u64 on success; gcc -O2 cannot see that */
    if (cur_left(c) < 8) {
        char field[64];
        snprintf(field, sizeof(field), "%s length", what);
        return cur_truncated(c, field, 8);
    }
    cur_u64(c, &len, what);
    if (len > cur_left(c)) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "%s: %s length %" PRIu64 " at byte %" PRIu64
                          " runs past the end of the buffer (%" PRIu64 " bytes remain)",
                          c->ctx, what, len, at, cur_left(c));
    }
    s->ptr = (const char *)c->p + c->pos;
    s->len = len;
    c->pos += len;
    return HR_OK;
}

/* Formats a key or tensor name into `dst` for messages, truncated and with
 * bytes outside printable ASCII escaped, so a hostile name cannot fill the
 * whole message or put control characters into a log. */
static void fmt_name(char *dst, size_t cap, struct hr_gguf_str s)
{
    static const char hex[] = "0123456789abcdef";
    size_t o = 0;
    for (uint64_t i = 0; i < s.len; i++) {
        unsigned char ch = (unsigned char)s.ptr[i];
        if (o + 8 >= cap) {
            memcpy(dst + o, "...", 3);
            o += 3;
            break;
        }
        if (ch >= 0x20 && ch < 0x7f && ch != '\\') {
            dst[o++] = (char)ch;
        } else {
            dst[o++] = '\\';
            dst[o++] = 'x';
            dst[o++] = hex[ch >> 4];
            dst[o++] = hex[ch & 15];
        }
    }
    dst[o] = '\0';
}

/* ------------------------------------------------------------------------ */
/* Values                                                                   */
/* ------------------------------------------------------------------------ */

/* Frees what a value owns (items of string/array arrays). Recursion depth is
 * bounded by the nesting the parser accepted. Zeroed values own nothing. */
static void value_free(struct hr_gguf_value *v)
{
    if (v->type != HR_GGUF_ARRAY || !v->v.arr.items)
        return;
    if (v->v.arr.elem_type == HR_GGUF_ARRAY) {
        for (uint64_t i = 0; i < v->v.arr.n; i++)
            value_free(&v->v.arr.items[i]);
    }
    free(v->v.arr.items);
    v->v.arr.items = NULL;
}

static enum hr_status parse_value(struct cursor *c, uint32_t type, int depth,
                                  struct hr_gguf_value *out);

/* Checks a packed run of bool bytes: only 0 and 1 are booleans, so
 * hr_gguf_arr_get_u64 can promise 0/1. */
static enum hr_status check_bools(struct cursor *c, uint64_t at, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++) {
        uint8_t b = c->p[at + i];
        if (b > 1) {
            return hr_err_set(c->err, HR_ERR_INVALID,
                              "%s: bool value %u at byte %" PRIu64 " is neither 0 nor 1",
                              c->ctx, b, at + i);
        }
    }
    return HR_OK;
}

/* An array body (element type, count, elements) at nesting level `depth`
 * (1 for an array that is a key's value). */
static enum hr_status parse_array(struct cursor *c, int depth, struct hr_gguf_value *out)
{
    uint64_t at = c->pos;
    if (depth > HR_GGUF_MAX_NESTING) {
        return hr_err_set(c->err, HR_ERR_LIMIT,
                          "%s: arrays nested deeper than %d levels at byte %" PRIu64, c->ctx,
                          HR_GGUF_MAX_NESTING, at);
    }
    uint32_t elem_type;
    uint64_t n;
    enum hr_status st = cur_u32(c, &elem_type, "array element type");
    if (st != HR_OK)
        return st;
    if (elem_type >= HR_GGUF_TYPE_COUNT) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "%s: unknown array element type %" PRIu32 " at byte %" PRIu64, c->ctx,
                          elem_type, at);
    }
    st = cur_u64(c, &n, "array count");
    if (st != HR_OK)
        return st;

    /* Bound the count by the smallest element before touching memory. */
    uint64_t min = hr_gguf_type_size(elem_type);
    if (elem_type == HR_GGUF_STRING)
        min = MIN_STRING_BYTES;
    else if (elem_type == HR_GGUF_ARRAY)
        min = MIN_ARRAY_BYTES;
    if (n > cur_left(c) / min) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "%s: array count %" PRIu64 " of %s at byte %" PRIu64
                          " is impossible: each element needs at least %" PRIu64
                          " bytes and only %" PRIu64 " remain",
                          c->ctx, n, hr_gguf_type_name(elem_type), at + 4, min, cur_left(c));
    }

    out->type = HR_GGUF_ARRAY;
    out->v.arr.elem_type = (enum hr_gguf_type)elem_type;
    out->v.arr.n = n;
    out->v.arr.raw = c->p + c->pos;
    out->v.arr.items = NULL;

    if (elem_type != HR_GGUF_STRING && elem_type != HR_GGUF_ARRAY) {
        if (elem_type == HR_GGUF_BOOL) {
            st = check_bools(c, c->pos, n);
            if (st != HR_OK)
                return st;
        }
        c->pos += n * min; /* cannot overflow or pass the end: checked above */
        return HR_OK;
    }
    if (n == 0)
        return HR_OK;

    /* n <= size / 8, so n * sizeof(value) is a small multiple of the file. */
    out->v.arr.items = calloc((size_t)n, sizeof(struct hr_gguf_value));
    if (!out->v.arr.items) {
        return hr_err_set(c->err, HR_ERR_NOMEM,
                          "%s: out of memory for %" PRIu64 " array elements at byte %" PRIu64,
                          c->ctx, n, at);
    }
    for (uint64_t i = 0; i < n; i++) {
        st = parse_value(c, elem_type, depth, &out->v.arr.items[i]);
        if (st != HR_OK)
            return st; /* the caller frees the partial array */
    }
    return HR_OK;
}

/* One value of a known type id at the cursor. `depth` is the nesting level
 * of the array holding it (0 for a key's own value). */
static enum hr_status parse_value(struct cursor *c, uint32_t type, int depth,
                                  struct hr_gguf_value *out)
{
    uint64_t at = c->pos;
    enum hr_status st;
    uint8_t b[8];

    if (type >= HR_GGUF_TYPE_COUNT) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "%s: unknown value type %" PRIu32 " at byte %" PRIu64, c->ctx, type,
                          at);
    }
    out->type = (enum hr_gguf_type)type;
    switch ((enum hr_gguf_type)type) {
    case HR_GGUF_STRING:
        return cur_str(c, &out->v.str, "string");
    case HR_GGUF_ARRAY:
        return parse_array(c, depth + 1, out);
    default:
        break;
    }

    st = cur_read(c, b, hr_gguf_type_size(type), hr_gguf_type_name(type));
    if (st != HR_OK)
        return st;
    switch ((enum hr_gguf_type)type) {
    case HR_GGUF_UINT8: out->v.u64 = b[0]; break;
    case HR_GGUF_INT8: { int8_t x; memcpy(&x, b, 1); out->v.i64 = x; break; }
    case HR_GGUF_UINT16: { uint16_t x; memcpy(&x, b, 2); out->v.u64 = x; break; }
    case HR_GGUF_INT16: { int16_t x; memcpy(&x, b, 2); out->v.i64 = x; break; }
    case HR_GGUF_UINT32: { uint32_t x; memcpy(&x, b, 4); out->v.u64 = x; break; }
    case HR_GGUF_INT32: { int32_t x; memcpy(&x, b, 4); out->v.i64 = x; break; }
    case HR_GGUF_UINT64: { uint64_t x; memcpy(&x, b, 8); out->v.u64 = x; break; }
    case HR_GGUF_INT64: { int64_t x; memcpy(&x, b, 8); out->v.i64 = x; break; }
    case HR_GGUF_FLOAT32: { float x; memcpy(&x, b, 4); out->v.f64 = x; break; }
    case HR_GGUF_FLOAT64: { double x; memcpy(&x, b, 8); out->v.f64 = x; break; }
    case HR_GGUF_BOOL:
        st = check_bools(c, at, 1);
        if (st != HR_OK)
            return st;
        out->v.u64 = b[0];
        break;
    default:
        HR_ASSERT(0 && "string and array are handled above");
    }
    return HR_OK;
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                  */
/* ------------------------------------------------------------------------ */

static int cmp_kv_ptr(const void *a, const void *b)
{
    const struct hr_gguf_kv *x = *(const struct hr_gguf_kv *const *)a;
    const struct hr_gguf_kv *y = *(const struct hr_gguf_kv *const *)b;
    int c = str_cmp(x->key.ptr, x->key.len, y->key.ptr, y->key.len);
    /* Ties by file position, so "first occurrence" in messages is stable. */
    return c ? c : (x->offset > y->offset) - (x->offset < y->offset);
}

static int cmp_tensor_name_ptr(const void *a, const void *b)
{
    const struct hr_gguf_tensor *x = *(const struct hr_gguf_tensor *const *)a;
    const struct hr_gguf_tensor *y = *(const struct hr_gguf_tensor *const *)b;
    int c = str_cmp(x->name.ptr, x->name.len, y->name.ptr, y->name.len);
    return c ? c : (x > y) - (x < y);
}

static int cmp_tensor_offset_ptr(const void *a, const void *b)
{
    const struct hr_gguf_tensor *x = *(const struct hr_gguf_tensor *const *)a;
    const struct hr_gguf_tensor *y = *(const struct hr_gguf_tensor *const *)b;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return (x > y) - (x < y);
}

static enum hr_status parse_header(struct hr_gguf *g, struct cursor *c)
{
    snprintf(c->ctx, sizeof(c->ctx), "header");
    if (c->size == 0)
        return hr_err_set(c->err, HR_ERR_INVALID, "empty buffer: 0 bytes is not a GGUF file");
    if (c->size < 4) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "%" PRIu64 " bytes is too short for the GGUF magic at byte 0",
                          c->size);
    }
    uint32_t magic, version;
    cur_u32(c, &magic, "magic"); /* cannot fail: size >= 4 */
    if (magic != HR_GGUF_MAGIC) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "bad magic 0x%08" PRIx32 " at byte 0 (expected \"GGUF\"): "
                          "not a GGUF file",
                          magic);
    }
    if (cur_u32(c, &version, "version") != HR_OK) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "truncated header: the version at byte 4 needs 4 bytes, only %" PRIu64
                          " remain",
                          cur_left(c));
    }
    if (version == 1) {
        return hr_err_set(c->err, HR_ERR_UNSUPPORTED,
                          "GGUF version 1 is not supported (at byte 4); convert the file to "
                          "version 3");
    }
    if ((version & 0xffffu) == 0 && version != 0) {
        /* A small version with its bytes swapped: the file was written on a
         * big-endian machine, so every integer in it is swapped too. */
        return hr_err_set(c->err, HR_ERR_UNSUPPORTED,
                          "version 0x%08" PRIx32 " at byte 4 looks byte-swapped: big-endian "
                          "GGUF files are not supported",
                          version);
    }
    if (version != 2 && version != 3) {
        return hr_err_set(c->err, HR_ERR_UNSUPPORTED,
                          "unsupported GGUF version %" PRIu32 " at byte 4 (only 2 and 3 are read)",
                          version);
    }
    g->version = version;

    uint64_t n_tensors, n_kv;
    if (cur_left(c) < 8) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "truncated header: the tensor count at byte 8 needs 8 bytes, "
                          "only %" PRIu64 " remain",
                          cur_left(c));
    }
    cur_u64(c, &n_tensors, "tensor count");
    if (cur_left(c) < 8) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "truncated header: the metadata count at byte 16 needs 8 bytes, only "
                          "%" PRIu64 " remain",
                          cur_left(c));
    }
    cur_u64(c, &n_kv, "metadata count");

    /* Both counts against the bytes left, before any allocation. */
    uint64_t left = cur_left(c);
    if (n_kv > left / MIN_KV_BYTES) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "metadata count %" PRIu64 " (at byte 16) is impossible: each key/value "
                          "pair needs at least %u bytes and only %" PRIu64 " remain",
                          n_kv, MIN_KV_BYTES, left);
    }
    left -= n_kv * MIN_KV_BYTES;
    if (n_tensors > left / MIN_TENSOR_INFO_BYTES) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "tensor count %" PRIu64 " (at byte 8) is impossible: each tensor info "
                          "needs at least %u bytes and only %" PRIu64
                          " remain after the metadata",
                          n_tensors, MIN_TENSOR_INFO_BYTES, left);
    }
    g->n_kv = n_kv;
    g->n_tensors = n_tensors;
    return HR_OK;
}

static enum hr_status parse_kvs(struct hr_gguf *g, struct cursor *c)
{
    if (g->n_kv == 0)
        return HR_OK;
    g->kvs = calloc((size_t)g->n_kv, sizeof(*g->kvs));
    g->kv_by_key = calloc((size_t)g->n_kv, sizeof(*g->kv_by_key));
    if (!g->kvs || !g->kv_by_key) {
        return hr_err_set(c->err, HR_ERR_NOMEM, "out of memory for %" PRIu64 " metadata pairs",
                          g->n_kv);
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        struct hr_gguf_kv *kv = &g->kvs[i];
        kv->offset = c->pos;
        g->kv_by_key[i] = kv;
        snprintf(c->ctx, sizeof(c->ctx), "metadata kv #%" PRIu64 " (at byte %" PRIu64 ")", i,
                 kv->offset);
        enum hr_status st = cur_str(c, &kv->key, "key");
        if (st != HR_OK)
            return st;
        char name[96];
        fmt_name(name, sizeof(name), kv->key);
        snprintf(c->ctx, sizeof(c->ctx), "key '%s' (at byte %" PRIu64 ")", name, kv->offset);
        uint32_t type;
        st = cur_u32(c, &type, "value type");
        if (st != HR_OK)
            return st;
        st = parse_value(c, type, 0, &kv->value);
        if (st != HR_OK)
            return st;
    }

    qsort(g->kv_by_key, (size_t)g->n_kv, sizeof(*g->kv_by_key), cmp_kv_ptr);
    for (uint64_t i = 1; i < g->n_kv; i++) {
        const struct hr_gguf_kv *a = g->kv_by_key[i - 1], *b = g->kv_by_key[i];
        if (str_cmp(a->key.ptr, a->key.len, b->key.ptr, b->key.len) == 0) {
            char name[96];
            fmt_name(name, sizeof(name), a->key);
            return hr_err_set(c->err, HR_ERR_INVALID,
                              "duplicate key '%s' at bytes %" PRIu64 " and %" PRIu64, name,
                              a->offset, b->offset);
        }
    }
    return HR_OK;
}

static const struct hr_gguf_kv *find_kv(const struct hr_gguf *g, const char *key);

static enum hr_status parse_alignment(struct hr_gguf *g, struct hr_err *err)
{
    g->alignment = HR_GGUF_DEFAULT_ALIGNMENT;
    const struct hr_gguf_kv *kv = find_kv(g, ALIGNMENT_KEY);
    if (!kv)
        return HR_OK;
    const struct hr_gguf_value *v = &kv->value;
    uint64_t at = kv->offset;
    if (v->type != HR_GGUF_UINT32) {
        return hr_err_set(err, HR_ERR_TYPE,
                          "key '" ALIGNMENT_KEY "' (at byte %" PRIu64 ") has type %s; it must "
                          "be uint32",
                          at, hr_gguf_type_name(v->type));
    }
    uint64_t a = v->v.u64;
    if (a == 0 || (a & (a - 1)) != 0) {
        return hr_err_set(err, HR_ERR_INVALID,
                          "key '" ALIGNMENT_KEY "' (at byte %" PRIu64 ") is %" PRIu64
                          ", not a nonzero power of two",
                          at, a);
    }
    g->alignment = (uint32_t)a;
    return HR_OK;
}

/* Element count and byte size of one tensor, overflow-checked. The product
 * of all dims with zeros counted as one must fit, so that any stride a
 * later stage computes (ne0 * ne1 * ...) fits too even when a dim is 0. */
static enum hr_status tensor_geometry(struct cursor *c, struct hr_gguf_tensor *t,
                                      const struct hr_ggml_type_info *info)
{
    uint64_t prod = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne = t->ne[d] ? t->ne[d] : 1;
        if (prod > (uint64_t)INT64_MAX / ne) {
            return hr_err_set(c->err, HR_ERR_RANGE,
                              "%s: element count overflows: the product of ne[0..%" PRIu32
                              "] exceeds INT64_MAX",
                              c->ctx, d);
        }
        prod *= ne;
    }
    if (t->ne[0] % info->block_elems != 0) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "%s: ne[0] = %" PRIu64 " is not a multiple of the %s block size %" PRIu32,
                          c->ctx, t->ne[0], info->name, info->block_elems);
    }
    /* Whole blocks, rounding up so a zero ne[0] (counted as one element
     * above) still counts as a block: the bound then also covers every row
     * stride, not only the total, which is 0 when any dim is 0. */
    uint64_t blocks = (prod + info->block_elems - 1) / info->block_elems;
    if (blocks > (uint64_t)INT64_MAX / info->block_bytes) {
        return hr_err_set(c->err, HR_ERR_RANGE,
                          "%s: byte size overflows: %" PRIu64 " blocks of %" PRIu32 " bytes",
                          c->ctx, blocks, info->block_bytes);
    }
    t->n_elems = 1;
    for (uint32_t d = 0; d < t->n_dims; d++)
        t->n_elems *= t->ne[d];
    t->n_bytes = t->n_elems / info->block_elems * info->block_bytes;
    return HR_OK;
}

static enum hr_status parse_tensor_infos(struct hr_gguf *g, struct cursor *c)
{
    if (g->n_tensors == 0)
        return HR_OK;
    g->tensors = calloc((size_t)g->n_tensors, sizeof(*g->tensors));
    g->tensor_by_name = calloc((size_t)g->n_tensors, sizeof(*g->tensor_by_name));
    g->tensor_info_at = calloc((size_t)g->n_tensors, sizeof(*g->tensor_info_at));
    if (!g->tensors || !g->tensor_by_name || !g->tensor_info_at) {
        return hr_err_set(c->err, HR_ERR_NOMEM, "out of memory for %" PRIu64 " tensor infos",
                          g->n_tensors);
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct hr_gguf_tensor *t = &g->tensors[i];
        uint64_t at = c->pos;
        g->tensor_info_at[i] = at;
        g->tensor_by_name[i] = t;
        snprintf(c->ctx, sizeof(c->ctx), "tensor info #%" PRIu64 " (at byte %" PRIu64 ")", i, at);
        enum hr_status st = cur_str(c, &t->name, "tensor name");
        if (st != HR_OK)
            return st;
        char name[96];
        fmt_name(name, sizeof(name), t->name);
        snprintf(c->ctx, sizeof(c->ctx), "tensor '%s' (info at byte %" PRIu64 ")", name, at);

        uint64_t dims_at = c->pos;
        st = cur_u32(c, &t->n_dims, "n_dims");
        if (st != HR_OK)
            return st;
        if (t->n_dims == 0 || t->n_dims > HR_GGUF_MAX_DIMS) {
            return hr_err_set(c->err, HR_ERR_INVALID,
                              "%s: n_dims %" PRIu32 " at byte %" PRIu64 " is not in 1..%d",
                              c->ctx, t->n_dims, dims_at, HR_GGUF_MAX_DIMS);
        }
        for (uint32_t d = 0; d < HR_GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne_at = c->pos;
            st = cur_u64(c, &t->ne[d], "dimension");
            if (st != HR_OK)
                return st;
            if (t->ne[d] > (uint64_t)INT64_MAX) {
                return hr_err_set(c->err, HR_ERR_RANGE,
                                  "%s: ne[%" PRIu32 "] = %" PRIu64 " at byte %" PRIu64
                                  " exceeds INT64_MAX",
                                  c->ctx, d, t->ne[d], ne_at);
            }
        }
        uint64_t type_at = c->pos;
        uint32_t type;
        st = cur_u32(c, &type, "ggml type");
        if (st != HR_OK)
            return st;
        const struct hr_ggml_type_info *info = hr_ggml_type_info(type);
        if (!info && type < HR_GGML_TYPE_COUNT) {
            return hr_err_set(c->err, HR_ERR_INVALID,
                              "%s: ggml type id %" PRIu32 " at byte %" PRIu64
                              " was retired by ggml and is not a valid type",
                              c->ctx, type, type_at);
        }
        if (!info) {
            return hr_err_set(c->err, HR_ERR_UNSUPPORTED,
                              "%s: unknown ggml type id %" PRIu32 " at byte %" PRIu64, c->ctx,
                              type, type_at);
        }
        t->type = (enum hr_ggml_type)type;
        uint64_t off_at = c->pos;
        st = cur_u64(c, &t->offset, "data offset");
        if (st != HR_OK)
            return st;
        st = tensor_geometry(c, t, info);
        if (st != HR_OK)
            return st;
        if (t->offset % g->alignment != 0) {
            return hr_err_set(c->err, HR_ERR_INVALID,
                              "%s: data offset %" PRIu64 " at byte %" PRIu64
                              " is misaligned: not a multiple of the alignment %" PRIu32,
                              c->ctx, t->offset, off_at, g->alignment);
        }
        if (t->offset > UINT64_MAX - t->n_bytes) {
            return hr_err_set(c->err, HR_ERR_RANGE,
                              "%s: data offset %" PRIu64 " + %" PRIu64 " bytes overflows",
                              c->ctx, t->offset, t->n_bytes);
        }
    }

    qsort(g->tensor_by_name, (size_t)g->n_tensors, sizeof(*g->tensor_by_name),
          cmp_tensor_name_ptr);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const struct hr_gguf_tensor *a = g->tensor_by_name[i - 1], *b = g->tensor_by_name[i];
        if (str_cmp(a->name.ptr, a->name.len, b->name.ptr, b->name.len) == 0) {
            char name[96];
            fmt_name(name, sizeof(name), a->name);
            return hr_err_set(c->err, HR_ERR_INVALID,
                              "duplicate tensor name '%s' (infos at bytes %" PRIu64 " and %" PRIu64
                              ")",
                              name, g->tensor_info_at[a - g->tensors],
                              g->tensor_info_at[b - g->tensors]);
        }
    }
    return HR_OK;
}

/*
 * Places every tensor inside the data section and checks for overlaps.
 * With HR_GGUF_HEADER_ONLY a tensor that is not wholly inside the buffer
 * gets a NULL data pointer instead of an error; tensors that are wholly
 * inside still get theirs, so a truncated download shows what it holds.
 */
static enum hr_status place_tensors(struct hr_gguf *g, struct cursor *c)
{
    uint64_t header_end = c->pos;
    /* header_end <= size, and alignment <= 2^31, so this cannot wrap. */
    g->data_offset = (header_end + g->alignment - 1) / g->alignment * g->alignment;
    if (g->n_tensors == 0)
        return HR_OK;
    bool header_only = (c->flags & HR_GGUF_HEADER_ONLY) != 0;
    if (g->data_offset > g->size && !header_only) {
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "the data section starts at byte %" PRIu64 " (header ends at %" PRIu64
                          ", padded to %" PRIu32 "), past the end of the file (%" PRIu64 " bytes)",
                          g->data_offset, header_end, g->alignment, g->size);
    }
    uint64_t data_size = g->data_offset <= g->size ? g->size - g->data_offset : 0;

    for (uint64_t i = 0; i < g->n_tensors; i++) {
        struct hr_gguf_tensor *t = &g->tensors[i];
        uint64_t end = t->offset + t->n_bytes; /* checked not to wrap */
        if (g->data_offset <= g->size && end <= data_size) {
            t->data = g->bytes + g->data_offset + t->offset;
            continue;
        }
        t->data = NULL;
        if (header_only)
            continue;
        char name[96];
        fmt_name(name, sizeof(name), t->name);
        return hr_err_set(c->err, HR_ERR_INVALID,
                          "tensor '%s' (info at byte %" PRIu64 "): offset %" PRIu64 " + %" PRIu64
                          " bytes (data section at byte %" PRIu64
                          ") ends past the end of the file (%" PRIu64 " bytes)",
                          name, g->tensor_info_at[i], t->offset, t->n_bytes, g->data_offset,
                          g->size);
    }

    /* Overlaps: sort by offset; each tensor that holds bytes must start at
     * or after the furthest end seen so far. Zero-byte tensors hold no bytes
     * and cannot overlap anything. */
    const struct hr_gguf_tensor **by_off = malloc((size_t)g->n_tensors * sizeof(*by_off));
    if (!by_off)
        return hr_err_set(c->err, HR_ERR_NOMEM, "out of memory sorting tensor offsets");
    for (uint64_t i = 0; i < g->n_tensors; i++)
        by_off[i] = &g->tensors[i];
    qsort(by_off, (size_t)g->n_tensors, sizeof(*by_off), cmp_tensor_offset_ptr);
    const struct hr_gguf_tensor *furthest = NULL;
    enum hr_status st = HR_OK;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const struct hr_gguf_tensor *t = by_off[i];
        if (t->n_bytes == 0)
            continue;
        if (furthest && t->offset < furthest->offset + furthest->n_bytes) {
            char a[96], b[96];
            fmt_name(a, sizeof(a), t->name);
            fmt_name(b, sizeof(b), furthest->name);
            st = hr_err_set(c->err, HR_ERR_INVALID,
                            "tensor '%s' (info at byte %" PRIu64 "): data bytes [%" PRIu64
                            ", %" PRIu64 ") overlap tensor '%s' (info at byte %" PRIu64
                            ") at [%" PRIu64 ", %" PRIu64 ")",
                            a, g->tensor_info_at[t - g->tensors], t->offset,
                            t->offset + t->n_bytes, b, g->tensor_info_at[furthest - g->tensors],
                            furthest->offset, furthest->offset + furthest->n_bytes);
            break;
        }
        if (!furthest || t->offset + t->n_bytes > furthest->offset + furthest->n_bytes)
            furthest = t;
    }
    free(by_off);
    return st;
}

enum hr_status hr_gguf_parse_ex(const void *buf, size_t size, unsigned flags,
                                struct hr_gguf **out, struct hr_err *err)
{
    HR_ASSERT(out != NULL);
    HR_ASSERT(buf != NULL || size == 0);
    *out = NULL;

    struct hr_gguf *g = calloc(1, sizeof(*g));
    if (!g)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the GGUF index");
    g->bytes = buf;
    g->size = size;

    struct cursor c = {.p = buf, .size = size, .pos = 0, .flags = flags, .err = err};
    enum hr_status st = parse_header(g, &c);
    if (st == HR_OK)
        st = parse_kvs(g, &c);
    if (st == HR_OK)
        st = parse_alignment(g, err);
    if (st == HR_OK)
        st = parse_tensor_infos(g, &c);
    if (st == HR_OK)
        st = place_tensors(g, &c);
    if (st != HR_OK) {
        hr_gguf_close(g);
        return st;
    }
    *out = g;
    return HR_OK;
}

enum hr_status hr_gguf_parse(const void *buf, size_t size, struct hr_gguf **out,
                             struct hr_err *err)
{
    return hr_gguf_parse_ex(buf, size, 0, out, err);
}

enum hr_status hr_gguf_open(const char *path, struct hr_gguf **out, struct hr_err *err)
{
    HR_ASSERT(out != NULL);
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return hr_err_set(err, e == ENOENT ? HR_ERR_NOT_FOUND : HR_ERR_IO, "cannot open '%s': %s",
                          path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return hr_err_set(err, HR_ERR_IO, "cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return hr_err_set(err, HR_ERR_IO, "'%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return hr_err_set(err, HR_ERR_INVALID, "'%s' is an empty file (0 bytes), not a GGUF file",
                          path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return hr_err_set(err, HR_ERR_RANGE, "'%s' is too large to map (%lld bytes)", path,
                          (long long)st.st_size);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int map_errno = errno;
    close(fd); /* the mapping keeps the file alive */
    if (map == MAP_FAILED) {
        return hr_err_set(err, HR_ERR_IO, "cannot mmap '%s' (%zu bytes): %s", path, size,
                          strerror(map_errno));
    }
    struct hr_gguf *g;
    enum hr_status s = hr_gguf_parse(map, size, &g, err);
    if (s != HR_OK) {
        munmap(map, size);
        hr_err_prefix(err, "%s", path);
        return s;
    }
    g->map = map;
    g->map_size = size;
    *out = g;
    return HR_OK;
}

void hr_gguf_close(struct hr_gguf *g)
{
    if (!g)
        return;
    if (g->kvs) {
        for (uint64_t i = 0; i < g->n_kv; i++)
            value_free(&g->kvs[i].value);
    }
    free(g->kvs);
    free(g->kv_by_key);
    free(g->tensors);
    free(g->tensor_by_name);
    free(g->tensor_info_at);
    if (g->map)
        munmap(g->map, g->map_size);
    free(g);
}

/* ------------------------------------------------------------------------ */
/* Accessors                                                                */
/* ------------------------------------------------------------------------ */

uint32_t hr_gguf_version(const struct hr_gguf *g) { return g->version; }
uint32_t hr_gguf_alignment(const struct hr_gguf *g) { return g->alignment; }
uint64_t hr_gguf_data_offset(const struct hr_gguf *g) { return g->data_offset; }
uint64_t hr_gguf_file_size(const struct hr_gguf *g) { return g->size; }
const void *hr_gguf_bytes(const struct hr_gguf *g) { return g->bytes; }
uint64_t hr_gguf_n_kv(const struct hr_gguf *g) { return g->n_kv; }
uint64_t hr_gguf_n_tensors(const struct hr_gguf *g) { return g->n_tensors; }

const struct hr_gguf_kv *hr_gguf_kv_at(const struct hr_gguf *g, uint64_t i)
{
    return i < g->n_kv ? &g->kvs[i] : NULL;
}

const struct hr_gguf_tensor *hr_gguf_tensor_at(const struct hr_gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

static const struct hr_gguf_kv *find_kv(const struct hr_gguf *g, const char *key)
{
    uint64_t klen = strlen(key), lo = 0, hi = g->n_kv;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const struct hr_gguf_kv *kv = g->kv_by_key[mid];
        int c = str_cmp(kv->key.ptr, kv->key.len, key, klen);
        if (c == 0)
            return kv;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

const struct hr_gguf_value *hr_gguf_find(const struct hr_gguf *g, const char *key)
{
    const struct hr_gguf_kv *kv = find_kv(g, key);
    return kv ? &kv->value : NULL;
}

const struct hr_gguf_tensor *hr_gguf_find_tensor(const struct hr_gguf *g, const char *name)
{
    uint64_t nlen = strlen(name), lo = 0, hi = g->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        const struct hr_gguf_tensor *t = g->tensor_by_name[mid];
        int c = str_cmp(t->name.ptr, t->name.len, name, nlen);
        if (c == 0)
            return t;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* ------------------------------------------------------------------------ */
/* Typed getters                                                            */
/* ------------------------------------------------------------------------ */

static enum hr_status get_value(const struct hr_gguf *g, const char *key,
                                const struct hr_gguf_value **v, struct hr_err *err)
{
    *v = hr_gguf_find(g, key);
    if (!*v)
        return hr_err_set(err, HR_ERR_NOT_FOUND, "key '%s' not found", key);
    return HR_OK;
}

static enum hr_status wrong_type(const char *key, const struct hr_gguf_value *v,
                                 const char *want, struct hr_err *err)
{
    return hr_err_set(err, HR_ERR_TYPE, "key '%s' is %s, not %s", key,
                      hr_gguf_type_name(v->type), want);
}

/*
 * Reads any integer value so the integer getters share one range check:
 * *neg is true when the value is a negative signed integer, held in *sval;
 * otherwise the value is in *uval.
 */
static enum hr_status get_int(const struct hr_gguf *g, const char *key, const char *want,
                              bool *neg, uint64_t *uval, int64_t *sval, struct hr_err *err)
{
    const struct hr_gguf_value *v;
    enum hr_status st = get_value(g, key, &v, err);
    if (st != HR_OK)
        return st;
    if (is_unsigned_int(v->type)) {
        *neg = false;
        *uval = v->v.u64;
        *sval = 0;
        return HR_OK;
    }
    if (is_signed_int(v->type)) {
        *neg = v->v.i64 < 0;
        *sval = v->v.i64;
        *uval = *neg ? 0 : (uint64_t)v->v.i64;
        return HR_OK;
    }
    return wrong_type(key, v, want, err);
}

enum hr_status hr_gguf_get_u32(const struct hr_gguf *g, const char *key, uint32_t *out,
                               struct hr_err *err)
{
    /* get_int sets all three on success; gcc 13 at -O3 cannot see it */
    bool neg = false;
    uint64_t u = 0;
    int64_t s = 0;
    enum hr_status st = get_int(g, key, "an integer", &neg, &u, &s, err);
    if (st != HR_OK)
        return st;
    if (neg || u > UINT32_MAX) {
        if (neg)
            return hr_err_set(err, HR_ERR_RANGE, "key '%s' is %" PRId64 ", outside uint32", key, s);
        return hr_err_set(err, HR_ERR_RANGE, "key '%s' is %" PRIu64 ", outside uint32", key, u);
    }
    *out = (uint32_t)u;
    return HR_OK;
}

enum hr_status hr_gguf_get_u64(const struct hr_gguf *g, const char *key, uint64_t *out,
                               struct hr_err *err)
{
    /* get_int sets all three on success; gcc 13 at -O3 cannot see it */
    bool neg = false;
    uint64_t u = 0;
    int64_t s = 0;
    enum hr_status st = get_int(g, key, "an integer", &neg, &u, &s, err);
    if (st != HR_OK)
        return st;
    if (neg)
        return hr_err_set(err, HR_ERR_RANGE, "key '%s' is %" PRId64 ", outside uint64", key, s);
    *out = u;
    return HR_OK;
}

enum hr_status hr_gguf_get_i64(const struct hr_gguf *g, const char *key, int64_t *out,
                               struct hr_err *err)
{
    /* get_int sets all three on success; gcc 13 at -O3 cannot see it */
    bool neg = false;
    uint64_t u = 0;
    int64_t s = 0;
    enum hr_status st = get_int(g, key, "an integer", &neg, &u, &s, err);
    if (st != HR_OK)
        return st;
    if (neg) {
        *out = s;
        return HR_OK;
    }
    if (u > (uint64_t)INT64_MAX)
        return hr_err_set(err, HR_ERR_RANGE, "key '%s' is %" PRIu64 ", outside int64", key, u);
    *out = (int64_t)u;
    return HR_OK;
}

enum hr_status hr_gguf_get_f32(const struct hr_gguf *g, const char *key, float *out,
                               struct hr_err *err)
{
    const struct hr_gguf_value *v;
    enum hr_status st = get_value(g, key, &v, err);
    if (st != HR_OK)
        return st;
    if (v->type != HR_GGUF_FLOAT32 && v->type != HR_GGUF_FLOAT64)
        return wrong_type(key, v, "float32 or float64", err);
    /* A finite float64 beyond float's range would become infinity; say so
     * rather than hand back a value the file did not hold. NaN and the
     * infinities convert as themselves. */
    double d = v->v.f64;
    if (isfinite(d) && (d > FLT_MAX || d < -FLT_MAX))
        return hr_err_set(err, HR_ERR_RANGE, "key '%s' is %g, outside float32", key, d);
    *out = (float)d;
    return HR_OK;
}

enum hr_status hr_gguf_get_bool(const struct hr_gguf *g, const char *key, bool *out,
                                struct hr_err *err)
{
    const struct hr_gguf_value *v;
    enum hr_status st = get_value(g, key, &v, err);
    if (st != HR_OK)
        return st;
    if (v->type != HR_GGUF_BOOL)
        return wrong_type(key, v, "bool", err);
    *out = v->v.u64 != 0;
    return HR_OK;
}

enum hr_status hr_gguf_get_str(const struct hr_gguf *g, const char *key,
                               struct hr_gguf_str *out, struct hr_err *err)
{
    const struct hr_gguf_value *v;
    enum hr_status st = get_value(g, key, &v, err);
    if (st != HR_OK)
        return st;
    if (v->type != HR_GGUF_STRING)
        return wrong_type(key, v, "string", err);
    *out = v->v.str;
    return HR_OK;
}

enum hr_status hr_gguf_get_arr(const struct hr_gguf *g, const char *key,
                               enum hr_gguf_type elem_type, const struct hr_gguf_value **out,
                               struct hr_err *err)
{
    const struct hr_gguf_value *v;
    enum hr_status st = get_value(g, key, &v, err);
    if (st != HR_OK)
        return st;
    if (v->type != HR_GGUF_ARRAY)
        return wrong_type(key, v, "array", err);
    if (elem_type != HR_GGUF_TYPE_COUNT && v->v.arr.elem_type != elem_type) {
        return hr_err_set(err, HR_ERR_TYPE, "key '%s' is an array of %s, not of %s", key,
                          hr_gguf_type_name(v->v.arr.elem_type), hr_gguf_type_name(elem_type));
    }
    *out = v;
    return HR_OK;
}

/* ------------------------------------------------------------------------ */
/* Array elements                                                           */
/* ------------------------------------------------------------------------ */

uint64_t hr_gguf_arr_get_u64(const struct hr_gguf_value *arr, uint64_t i)
{
    HR_ASSERT(arr->type == HR_GGUF_ARRAY && i < arr->v.arr.n);
    const uint8_t *p = arr->v.arr.raw;
    switch (arr->v.arr.elem_type) {
    case HR_GGUF_UINT8:
    case HR_GGUF_BOOL: return p[i];
    case HR_GGUF_UINT16: { uint16_t x; memcpy(&x, p + 2 * i, 2); return x; }
    case HR_GGUF_UINT32: { uint32_t x; memcpy(&x, p + 4 * i, 4); return x; }
    case HR_GGUF_UINT64: { uint64_t x; memcpy(&x, p + 8 * i, 8); return x; }
    default: HR_ASSERT(0 && "hr_gguf_arr_get_u64 on a non-unsigned array");
    }
    return 0;
}

int64_t hr_gguf_arr_get_i64(const struct hr_gguf_value *arr, uint64_t i)
{
    HR_ASSERT(arr->type == HR_GGUF_ARRAY && i < arr->v.arr.n);
    const uint8_t *p = arr->v.arr.raw;
    switch (arr->v.arr.elem_type) {
    case HR_GGUF_INT8: { int8_t x; memcpy(&x, p + i, 1); return x; }
    case HR_GGUF_INT16: { int16_t x; memcpy(&x, p + 2 * i, 2); return x; }
    case HR_GGUF_INT32: { int32_t x; memcpy(&x, p + 4 * i, 4); return x; }
    case HR_GGUF_INT64: { int64_t x; memcpy(&x, p + 8 * i, 8); return x; }
    default: HR_ASSERT(0 && "hr_gguf_arr_get_i64 on a non-signed array");
    }
    return 0;
}

double hr_gguf_arr_get_f64(const struct hr_gguf_value *arr, uint64_t i)
{
    HR_ASSERT(arr->type == HR_GGUF_ARRAY && i < arr->v.arr.n);
    const uint8_t *p = arr->v.arr.raw;
    switch (arr->v.arr.elem_type) {
    case HR_GGUF_FLOAT32: { float x; memcpy(&x, p + 4 * i, 4); return x; }
    case HR_GGUF_FLOAT64: { double x; memcpy(&x, p + 8 * i, 8); return x; }
    default: HR_ASSERT(0 && "hr_gguf_arr_get_f64 on a non-float array");
    }
    return 0;
}
