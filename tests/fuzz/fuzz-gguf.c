/*
 * fuzz-gguf.c - libFuzzer target for the GGUF reader (src/gguf/gguf-read.c).
 *
 * Parses the input twice (full, and HR_GGUF_HEADER_ONLY) and, whenever a
 * parse succeeds, touches everything the index hands out: every key and
 * value (recursing into arrays and reading every element through the
 * public getters), every tensor's first and last data byte, and the typed
 * getters on every key and a few well-known ones. The reader promises that
 * a successful parse never hands out a pointer outside the input, so ASan
 * turns any broken promise into a crash; the few invariants that ASan
 * cannot see (lookups find what was parsed, data inside the buffer) are
 * checked here and abort on failure.
 *
 * Built with -fsanitize=fuzzer in the fuzz preset; otherwise linked with
 * replay-main.c so `make test` replays tests/fuzz/corpus/gguf/ and every
 * kept input in tests/fuzz/crashes/gguf/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/hparams.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A sink the compiler cannot drop, so every read below really happens. */
static volatile uint64_t g_sink;

static void check(int ok)
{
    if (!ok)
        abort();
}

static void touch_str(struct hr_gguf_str s, const uint8_t *buf, size_t size)
{
    if (s.len == 0)
        return;
    const uint8_t *p = (const uint8_t *)s.ptr;
    check(p >= buf && s.len <= size && (size_t)(p - buf) <= size - s.len);
    g_sink += p[0] + p[s.len - 1];
}

/* Recursion depth is bounded by the nesting the reader accepted. */
static void walk_value(const struct hr_gguf_value *v, const uint8_t *buf, size_t size)
{
    switch (v->type) {
    case HR_GGUF_UINT8:
    case HR_GGUF_UINT16:
    case HR_GGUF_UINT32:
    case HR_GGUF_UINT64:
        g_sink += v->v.u64;
        break;
    case HR_GGUF_BOOL:
        check(v->v.u64 <= 1);
        g_sink += v->v.u64;
        break;
    case HR_GGUF_INT8:
    case HR_GGUF_INT16:
    case HR_GGUF_INT32:
    case HR_GGUF_INT64:
        g_sink += (uint64_t)v->v.i64;
        break;
    case HR_GGUF_FLOAT32:
    case HR_GGUF_FLOAT64:
        g_sink += v->v.f64 > 0;
        break;
    case HR_GGUF_STRING:
        touch_str(v->v.str, buf, size);
        break;
    case HR_GGUF_ARRAY:
        for (uint64_t i = 0; i < v->v.arr.n; i++) {
            switch (v->v.arr.elem_type) {
            case HR_GGUF_UINT8:
            case HR_GGUF_UINT16:
            case HR_GGUF_UINT32:
            case HR_GGUF_UINT64:
                g_sink += hr_gguf_arr_get_u64(v, i);
                break;
            case HR_GGUF_BOOL:
                check(hr_gguf_arr_get_u64(v, i) <= 1);
                break;
            case HR_GGUF_INT8:
            case HR_GGUF_INT16:
            case HR_GGUF_INT32:
            case HR_GGUF_INT64:
                g_sink += (uint64_t)hr_gguf_arr_get_i64(v, i);
                break;
            case HR_GGUF_FLOAT32:
            case HR_GGUF_FLOAT64:
                g_sink += hr_gguf_arr_get_f64(v, i) > 0;
                break;
            case HR_GGUF_STRING:
            case HR_GGUF_ARRAY:
                check(v->v.arr.items[i].type == v->v.arr.elem_type);
                walk_value(&v->v.arr.items[i], buf, size);
                break;
            default:
                abort(); /* the reader refuses unknown element types */
            }
        }
        break;
    default:
        abort(); /* the reader refuses unknown value types */
    }
}

/* Every typed getter on one key; any status is fine, a crash is not. */
static void try_getters(const struct hr_gguf *g, const char *key)
{
    struct hr_err err;
    uint32_t u32;
    uint64_t u64;
    int64_t i64;
    float f32;
    bool b;
    struct hr_gguf_str s;
    const struct hr_gguf_value *arr;
    if (hr_gguf_get_u32(g, key, &u32, &err) == HR_OK)
        g_sink += u32;
    if (hr_gguf_get_u64(g, key, &u64, &err) == HR_OK)
        g_sink += u64;
    if (hr_gguf_get_i64(g, key, &i64, &err) == HR_OK)
        g_sink += (uint64_t)i64;
    if (hr_gguf_get_f32(g, key, &f32, &err) == HR_OK)
        g_sink += f32 > 0;
    if (hr_gguf_get_bool(g, key, &b, &err) == HR_OK)
        g_sink += b;
    if (hr_gguf_get_str(g, key, &s, &err) == HR_OK)
        g_sink += s.len;
    if (hr_gguf_get_arr(g, key, HR_GGUF_TYPE_COUNT, &arr, &err) == HR_OK)
        g_sink += arr->v.arr.n;
    if (hr_gguf_get_arr(g, key, HR_GGUF_STRING, &arr, &err) == HR_OK)
        g_sink += arr->v.arr.n;
}

static void walk(const struct hr_gguf *g, const uint8_t *buf, size_t size, unsigned flags)
{
    check(hr_gguf_bytes(g) == buf && hr_gguf_file_size(g) == size);
    uint32_t align = hr_gguf_alignment(g);
    check(align != 0 && (align & (align - 1)) == 0);
    check(hr_gguf_data_offset(g) % align == 0);

    uint64_t n_kv = hr_gguf_n_kv(g);
    check(hr_gguf_kv_at(g, n_kv) == NULL);
    for (uint64_t i = 0; i < n_kv; i++) {
        const struct hr_gguf_kv *kv = hr_gguf_kv_at(g, i);
        touch_str(kv->key, buf, size);
        walk_value(&kv->value, buf, size);
        /* Lookups by name find this very pair, unless the key holds a NUL
         * (then the C-string query is a different, shorter key). */
        if (i < 256) {
            char *key = hr_gguf_str_dup(kv->key);
            if (key) {
                if (strlen(key) == kv->key.len)
                    check(hr_gguf_find(g, key) == &kv->value);
                try_getters(g, key);
                free(key);
            }
        }
    }

    uint64_t n_tensors = hr_gguf_n_tensors(g);
    check(hr_gguf_tensor_at(g, n_tensors) == NULL);
    for (uint64_t i = 0; i < n_tensors; i++) {
        const struct hr_gguf_tensor *t = hr_gguf_tensor_at(g, i);
        touch_str(t->name, buf, size);
        check(t->n_dims >= 1 && t->n_dims <= HR_GGUF_MAX_DIMS);
        check(t->offset % align == 0);
        if (t->data) {
            const uint8_t *p = t->data;
            check(p >= buf && (uint64_t)(p - buf) == hr_gguf_data_offset(g) + t->offset);
            check(t->n_bytes <= size && (size_t)(p - buf) <= size - t->n_bytes);
            if (t->n_bytes)
                g_sink += p[0] + p[t->n_bytes - 1];
        } else {
            check(flags & HR_GGUF_HEADER_ONLY);
        }
        if (i < 256) {
            char *name = hr_gguf_str_dup(t->name);
            if (name) {
                if (strlen(name) == t->name.len)
                    check(hr_gguf_find_tensor(g, name) == t);
                free(name);
            }
        }
    }

    static const char *const common[] = {
        "general.architecture", "general.alignment",     "general.name",
        "llama.block_count",    "llama.context_length", "llama.embedding_length",
        "tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type",
        "",
    };
    for (size_t i = 0; i < sizeof(common) / sizeof(common[0]); i++)
        try_getters(g, common[i]);
    const struct hr_gguf_value *arr;
    struct hr_err err;
    if (hr_gguf_get_arr(g, "tokenizer.ggml.scores", HR_GGUF_FLOAT32, &arr, &err) == HR_OK &&
        arr->v.arr.n)
        g_sink += hr_gguf_arr_get_f64(arr, arr->v.arr.n - 1) > 0;
    g_sink += hr_gguf_find_tensor(g, "token_embd.weight") != NULL;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const unsigned flag_sets[] = {0, HR_GGUF_HEADER_ONLY};
    for (size_t f = 0; f < 2; f++) {
        struct hr_gguf *g = NULL;
        struct hr_err err;
        enum hr_status st = flag_sets[f] ? hr_gguf_parse_ex(data, size, flag_sets[f], &g, &err)
                                         : hr_gguf_parse(data, size, &g, &err);
        if (st != HR_OK) {
            check(g == NULL && st < 0 && err.msg[0] != '\0');
            continue;
        }
        walk(g, data, size, flag_sets[f]);
        /* The hyper-parameters read from the same metadata (arrays such as
         * rope.dimension_sections and attention.recurrent_layers included):
         * any verdict, but an error must say what. */
        struct hr_hparams hp;
        if (hr_hparams_read(g, &hp, &err) != HR_OK)
            check(err.msg[0] != '\0');
        hr_gguf_close(g);
    }
    return 0;
}
