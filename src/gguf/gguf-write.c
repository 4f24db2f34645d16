/*
 * gguf-write.c - builds GGUF files; see gguf.h for the format and the API.
 *
 * The writer keeps metadata (deep-copied values) and tensor descriptions in
 * memory, computes every tensor's offset up front, writes the header, then
 * streams tensor data one tensor at a time through a single scratch buffer
 * the size of the largest tensor. A multi-GiB model therefore costs one
 * tensor of memory, not the whole file.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gguf/gguf.h"

struct wkv {
    char *key;
    struct hr_gguf_value value; /* owns its strings, items and raw bytes */
};

struct wtensor {
    char *name;
    enum hr_ggml_type type;
    uint32_t n_dims;
    uint64_t ne[HR_GGUF_MAX_DIMS];
    uint64_t n_bytes;
    uint64_t offset;
    const void *data;    /* borrowed, or NULL when fill is set */
    hr_gguf_fill_fn fill;
    void *fill_ctx;
};

struct hr_gguf_writer {
    uint32_t version;
    struct wkv *kvs;
    size_t n_kvs, cap_kvs;
    struct wtensor *tensors;
    size_t n_tensors, cap_tensors;
};

struct hr_gguf_writer *hr_gguf_writer_init(void)
{
    struct hr_gguf_writer *w = calloc(1, sizeof(*w));
    if (w)
        w->version = 3;
    return w;
}

static void value_free(struct hr_gguf_value *v)
{
    if (v->type == HR_GGUF_STRING) {
        free((void *)v->v.str.ptr);
    } else if (v->type == HR_GGUF_ARRAY) {
        if (v->v.arr.items) {
            for (uint64_t i = 0; i < v->v.arr.n; i++)
                value_free(&v->v.arr.items[i]);
            free(v->v.arr.items);
        }
        free((void *)v->v.arr.raw);
    }
}

void hr_gguf_writer_free(struct hr_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kvs; i++) {
        free(w->kvs[i].key);
        value_free(&w->kvs[i].value);
    }
    free(w->kvs);
    for (size_t i = 0; i < w->n_tensors; i++)
        free(w->tensors[i].name);
    free(w->tensors);
    free(w);
}

void hr_gguf_writer_set_version(struct hr_gguf_writer *w, uint32_t version)
{
    w->version = version;
}

/* Deep copy of `src` into `dst`; on failure `dst` holds nothing to free. */
static enum hr_status value_copy(struct hr_gguf_value *dst, const struct hr_gguf_value *src,
                                 int depth)
{
    *dst = *src;
    if (src->type == HR_GGUF_STRING) {
        char *p = malloc(src->v.str.len ? src->v.str.len : 1);
        if (!p)
            return HR_ERR_NOMEM;
        if (src->v.str.len)
            memcpy(p, src->v.str.ptr, src->v.str.len);
        dst->v.str.ptr = p;
        return HR_OK;
    }
    if (src->type != HR_GGUF_ARRAY)
        return (uint32_t)src->type < HR_GGUF_TYPE_COUNT ? HR_OK : HR_ERR_INVALID;
    if (depth >= HR_GGUF_MAX_NESTING)
        return HR_ERR_INVALID;
    enum hr_gguf_type et = src->v.arr.elem_type;
    uint64_t n = src->v.arr.n;
    dst->v.arr.raw = NULL;
    dst->v.arr.items = NULL;
    if (et == HR_GGUF_STRING || et == HR_GGUF_ARRAY) {
        if (n == 0)
            return HR_OK;
        struct hr_gguf_value *items = calloc(n, sizeof(*items));
        if (!items)
            return HR_ERR_NOMEM;
        for (uint64_t i = 0; i < n; i++) {
            if (src->v.arr.items[i].type != et) {
                for (uint64_t j = 0; j < i; j++)
                    value_free(&items[j]);
                free(items);
                return HR_ERR_INVALID;
            }
            enum hr_status st = value_copy(&items[i], &src->v.arr.items[i], depth + 1);
            if (st != HR_OK) {
                for (uint64_t j = 0; j < i; j++)
                    value_free(&items[j]);
                free(items);
                return st;
            }
        }
        dst->v.arr.items = items;
        return HR_OK;
    }
    size_t es = hr_gguf_type_size(et);
    if (es == 0)
        return HR_ERR_INVALID;
    if (n > SIZE_MAX / es)
        return HR_ERR_RANGE;
    size_t bytes = (size_t)n * es;
    uint8_t *raw = malloc(bytes > 0 ? bytes : 1);
    if (!raw)
        return HR_ERR_NOMEM;
    if (bytes > 0)
        memcpy(raw, src->v.arr.raw, bytes);
    dst->v.arr.raw = raw;
    return HR_OK;
}

enum hr_status hr_gguf_writer_set_value(struct hr_gguf_writer *w, const char *key,
                                        const struct hr_gguf_value *value)
{
    struct hr_gguf_value copy;
    enum hr_status st = value_copy(&copy, value, 0);
    if (st != HR_OK)
        return st;
    for (size_t i = 0; i < w->n_kvs; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            value_free(&w->kvs[i].value);
            w->kvs[i].value = copy;
            return HR_OK;
        }
    }
    if (w->n_kvs == w->cap_kvs) {
        size_t cap = w->cap_kvs ? 2 * w->cap_kvs : 32;
        struct wkv *kvs = realloc(w->kvs, cap * sizeof(*kvs));
        if (!kvs) {
            value_free(&copy);
            return HR_ERR_NOMEM;
        }
        w->kvs = kvs;
        w->cap_kvs = cap;
    }
    char *k = strdup(key);
    if (!k) {
        value_free(&copy);
        return HR_ERR_NOMEM;
    }
    w->kvs[w->n_kvs].key = k;
    w->kvs[w->n_kvs].value = copy;
    w->n_kvs++;
    return HR_OK;
}

enum hr_status hr_gguf_writer_set_u32(struct hr_gguf_writer *w, const char *key, uint32_t v)
{
    struct hr_gguf_value val = {.type = HR_GGUF_UINT32, .v.u64 = v};
    return hr_gguf_writer_set_value(w, key, &val);
}

enum hr_status hr_gguf_writer_set_i32(struct hr_gguf_writer *w, const char *key, int32_t v)
{
    struct hr_gguf_value val = {.type = HR_GGUF_INT32, .v.i64 = v};
    return hr_gguf_writer_set_value(w, key, &val);
}

enum hr_status hr_gguf_writer_set_u64(struct hr_gguf_writer *w, const char *key, uint64_t v)
{
    struct hr_gguf_value val = {.type = HR_GGUF_UINT64, .v.u64 = v};
    return hr_gguf_writer_set_value(w, key, &val);
}

enum hr_status hr_gguf_writer_set_f32(struct hr_gguf_writer *w, const char *key, float v)
{
    struct hr_gguf_value val = {.type = HR_GGUF_FLOAT32, .v.f64 = v};
    return hr_gguf_writer_set_value(w, key, &val);
}

enum hr_status hr_gguf_writer_set_bool(struct hr_gguf_writer *w, const char *key, bool v)
{
    struct hr_gguf_value val = {.type = HR_GGUF_BOOL, .v.u64 = v ? 1 : 0};
    return hr_gguf_writer_set_value(w, key, &val);
}

enum hr_status hr_gguf_writer_set_str(struct hr_gguf_writer *w, const char *key, const char *v)
{
    struct hr_gguf_value val = {.type = HR_GGUF_STRING, .v.str = {v, strlen(v)}};
    return hr_gguf_writer_set_value(w, key, &val);
}

enum hr_status hr_gguf_writer_set_arr_str(struct hr_gguf_writer *w, const char *key,
                                          const char *const *strs, uint64_t n)
{
    struct hr_gguf_value *items = n ? calloc(n, sizeof(*items)) : NULL;
    if (n && !items)
        return HR_ERR_NOMEM;
    for (uint64_t i = 0; i < n; i++) {
        items[i].type = HR_GGUF_STRING;
        items[i].v.str.ptr = strs[i];
        items[i].v.str.len = strlen(strs[i]);
    }
    struct hr_gguf_value val = {.type = HR_GGUF_ARRAY};
    val.v.arr.elem_type = HR_GGUF_STRING;
    val.v.arr.n = n;
    val.v.arr.items = items;
    enum hr_status st = hr_gguf_writer_set_value(w, key, &val);
    free(items); /* the shallow item views; set_value made deep copies */
    return st;
}

enum hr_status hr_gguf_writer_set_arr(struct hr_gguf_writer *w, const char *key,
                                      enum hr_gguf_type elem_type, const void *data, uint64_t n)
{
    if (hr_gguf_type_size(elem_type) == 0)
        return HR_ERR_INVALID;
    struct hr_gguf_value val = {.type = HR_GGUF_ARRAY};
    val.v.arr.elem_type = elem_type;
    val.v.arr.n = n;
    val.v.arr.raw = data;
    return hr_gguf_writer_set_value(w, key, &val);
}

static enum hr_status add_tensor(struct hr_gguf_writer *w, const char *name,
                                 enum hr_ggml_type type, uint32_t n_dims, const uint64_t *ne,
                                 const void *data, hr_gguf_fill_fn fill, void *ctx,
                                 struct hr_err *err)
{
    const struct hr_ggml_type_info *ti = hr_ggml_type_info((uint32_t)type);
    if (!ti)
        return hr_err_set(err, HR_ERR_INVALID, "tensor '%s': unknown type id %u", name,
                          (unsigned)type);
    if (n_dims == 0 || n_dims > HR_GGUF_MAX_DIMS)
        return hr_err_set(err, HR_ERR_INVALID, "tensor '%s': %u dims (1..%d allowed)", name,
                          n_dims, HR_GGUF_MAX_DIMS);
    uint64_t n_elems = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] != 0 && n_elems > UINT64_MAX / 2 / ne[d])
            return hr_err_set(err, HR_ERR_RANGE, "tensor '%s': element count overflows", name);
        n_elems *= ne[d];
    }
    if (ne[0] % ti->block_elems != 0)
        return hr_err_set(err, HR_ERR_INVALID,
                          "tensor '%s': row of %llu elements is not a multiple of the %s block "
                          "size %u",
                          name, (unsigned long long)ne[0], ti->name, ti->block_elems);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return hr_err_set(err, HR_ERR_INVALID, "tensor '%s' added twice", name);
    if (w->n_tensors == w->cap_tensors) {
        size_t cap = w->cap_tensors ? 2 * w->cap_tensors : 64;
        struct wtensor *t = realloc(w->tensors, cap * sizeof(*t));
        if (!t)
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory adding tensor '%s'", name);
        w->tensors = t;
        w->cap_tensors = cap;
    }
    struct wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof(*t));
    t->name = strdup(name);
    if (!t->name)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory adding tensor '%s'", name);
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < HR_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->n_bytes = n_elems / ti->block_elems * ti->block_bytes;
    t->data = data;
    t->fill = fill;
    t->fill_ctx = ctx;
    w->n_tensors++;
    return HR_OK;
}

enum hr_status hr_gguf_writer_add_tensor(struct hr_gguf_writer *w, const char *name,
                                         enum hr_ggml_type type, uint32_t n_dims,
                                         const uint64_t *ne, const void *data,
                                         struct hr_err *err)
{
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL, err);
}

enum hr_status hr_gguf_writer_add_tensor_cb(struct hr_gguf_writer *w, const char *name,
                                            enum hr_ggml_type type, uint32_t n_dims,
                                            const uint64_t *ne, hr_gguf_fill_fn fill,
                                            void *ctx, struct hr_err *err)
{
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, ctx, err);
}

/* ---- serialization ---------------------------------------------------- */

/* A sink is either a growable memory buffer or a FILE. */
struct sink {
    FILE *f;
    uint8_t *buf;
    size_t len, cap;
    bool failed;
};

static void sink_put(struct sink *s, const void *p, size_t n)
{
    if (s->failed || n == 0)
        return;
    if (s->f) {
        if (fwrite(p, 1, n, s->f) != n)
            s->failed = true;
        return;
    }
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n)
            cap *= 2;
        uint8_t *b = realloc(s->buf, cap);
        if (!b) {
            s->failed = true;
            return;
        }
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
}

static void put_u32(struct sink *s, uint32_t v)
{
    sink_put(s, &v, 4); /* the host is little-endian, as GGUF is (checked by the reader) */
}

static void put_u64(struct sink *s, uint64_t v)
{
    sink_put(s, &v, 8);
}

static void put_str(struct sink *s, const char *p, uint64_t n)
{
    put_u64(s, n);
    sink_put(s, p, (size_t)n);
}

static void put_scalar(struct sink *s, enum hr_gguf_type t, const struct hr_gguf_value *v)
{
    uint8_t b[8];
    switch (t) {
    case HR_GGUF_UINT8: b[0] = (uint8_t)v->v.u64; sink_put(s, b, 1); break;
    case HR_GGUF_INT8: b[0] = (uint8_t)(int8_t)v->v.i64; sink_put(s, b, 1); break;
    case HR_GGUF_BOOL: b[0] = v->v.u64 ? 1 : 0; sink_put(s, b, 1); break;
    case HR_GGUF_UINT16: { uint16_t x = (uint16_t)v->v.u64; sink_put(s, &x, 2); break; }
    case HR_GGUF_INT16: { int16_t x = (int16_t)v->v.i64; sink_put(s, &x, 2); break; }
    case HR_GGUF_UINT32: put_u32(s, (uint32_t)v->v.u64); break;
    case HR_GGUF_INT32: { int32_t x = (int32_t)v->v.i64; sink_put(s, &x, 4); break; }
    case HR_GGUF_FLOAT32: { float x = (float)v->v.f64; sink_put(s, &x, 4); break; }
    case HR_GGUF_UINT64: put_u64(s, v->v.u64); break;
    case HR_GGUF_INT64: sink_put(s, &v->v.i64, 8); break;
    case HR_GGUF_FLOAT64: sink_put(s, &v->v.f64, 8); break;
    default: break;
    }
}

static void put_value(struct sink *s, const struct hr_gguf_value *v)
{
    if (v->type == HR_GGUF_STRING) {
        put_str(s, v->v.str.ptr, v->v.str.len);
    } else if (v->type == HR_GGUF_ARRAY) {
        put_u32(s, (uint32_t)v->v.arr.elem_type);
        put_u64(s, v->v.arr.n);
        if (v->v.arr.items) {
            for (uint64_t i = 0; i < v->v.arr.n; i++)
                put_value(s, &v->v.arr.items[i]);
        } else {
            sink_put(s, v->v.arr.raw, (size_t)(v->v.arr.n * hr_gguf_type_size(v->v.arr.elem_type)));
        }
    } else {
        put_scalar(s, v->type, v);
    }
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) / a * a;
}

static void put_zeros(struct sink *s, uint64_t n)
{
    static const uint8_t zeros[64];
    while (n > 0) {
        size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        sink_put(s, zeros, k);
        n -= k;
    }
}

static enum hr_status writer_alignment(const struct hr_gguf_writer *w, uint32_t *out,
                                       struct hr_err *err)
{
    *out = HR_GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kvs; i++) {
        if (strcmp(w->kvs[i].key, "general.alignment") != 0)
            continue;
        const struct hr_gguf_value *v = &w->kvs[i].value;
        if (v->type != HR_GGUF_UINT32 || v->v.u64 == 0 || (v->v.u64 & (v->v.u64 - 1)) != 0)
            return hr_err_set(err, HR_ERR_INVALID,
                              "general.alignment must be a uint32 power of two");
        *out = (uint32_t)v->v.u64;
    }
    return HR_OK;
}

static enum hr_status write_all(struct hr_gguf_writer *w, struct sink *s, struct hr_err *err)
{
    uint32_t alignment;
    enum hr_status st = writer_alignment(w, &alignment, err);
    if (st != HR_OK)
        return st;

    put_u32(s, HR_GGUF_MAGIC);
    put_u32(s, w->version);
    put_u64(s, w->n_tensors);
    put_u64(s, w->n_kvs);
    for (size_t i = 0; i < w->n_kvs; i++) {
        put_str(s, w->kvs[i].key, strlen(w->kvs[i].key));
        put_u32(s, (uint32_t)w->kvs[i].value.type);
        put_value(s, &w->kvs[i].value);
    }
    uint64_t offset = 0, max_bytes = 0;
    for (size_t i = 0; i < w->n_tensors; i++) {
        struct wtensor *t = &w->tensors[i];
        t->offset = offset;
        offset = align_up(offset + t->n_bytes, alignment);
        if (t->n_bytes > max_bytes)
            max_bytes = t->n_bytes;
        put_str(s, t->name, strlen(t->name));
        put_u32(s, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++)
            put_u64(s, t->ne[d]);
        put_u32(s, (uint32_t)t->type);
        put_u64(s, t->offset);
    }
    uint64_t header = s->f ? (uint64_t)ftell(s->f) : s->len;
    if (w->n_tensors)
        put_zeros(s, align_up(header, alignment) - header);

    void *scratch = NULL;
    for (size_t i = 0; i < w->n_tensors && !s->failed; i++) {
        struct wtensor *t = &w->tensors[i];
        const void *src = t->data;
        if (t->fill) {
            if (!scratch && !(scratch = malloc(max_bytes ? (size_t)max_bytes : 1)))
                return hr_err_set(err, HR_ERR_NOMEM, "out of memory for a %llu-byte tensor",
                                  (unsigned long long)max_bytes);
            st = t->fill(t->fill_ctx, scratch, t->n_bytes, err);
            if (st != HR_OK) {
                free(scratch);
                hr_err_prefix(err, "tensor '%s'", t->name);
                return st;
            }
            src = scratch;
        }
        sink_put(s, src, (size_t)t->n_bytes);
        if (i + 1 < w->n_tensors)
            put_zeros(s, align_up(t->n_bytes, alignment) - t->n_bytes);
    }
    free(scratch);
    if (s->failed)
        return hr_err_set(err, s->f ? HR_ERR_IO : HR_ERR_NOMEM, "writing GGUF failed: %s",
                          s->f ? strerror(errno) : "out of memory");
    return HR_OK;
}

enum hr_status hr_gguf_writer_write_file(struct hr_gguf_writer *w, const char *path,
                                         struct hr_err *err)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return hr_err_set(err, HR_ERR_INVALID, "path too long: %s", path);
    struct sink s = {.f = fopen(tmp, "wb")};
    if (!s.f)
        return hr_err_set(err, HR_ERR_IO, "cannot create %s: %s", tmp, strerror(errno));
    enum hr_status st = write_all(w, &s, err);
    if (fclose(s.f) != 0 && st == HR_OK)
        st = hr_err_set(err, HR_ERR_IO, "cannot write %s: %s", tmp, strerror(errno));
    if (st == HR_OK && rename(tmp, path) != 0)
        st = hr_err_set(err, HR_ERR_IO, "cannot rename %s to %s: %s", tmp, path,
                        strerror(errno));
    if (st != HR_OK)
        unlink(tmp);
    return st;
}

enum hr_status hr_gguf_writer_write_mem(struct hr_gguf_writer *w, void **out, size_t *size,
                                        struct hr_err *err)
{
    struct sink s = {0};
    enum hr_status st = write_all(w, &s, err);
    if (st != HR_OK) {
        free(s.buf);
        return st;
    }
    *out = s.buf;
    *size = s.len;
    return HR_OK;
}
