/*
 * gguf.h - reading and writing GGUF files (versions 2 and 3).
 *
 * A GGUF file is: magic "GGUF", u32 version, u64 tensor count, u64 metadata
 * count, the metadata key/value pairs, the tensor infos (name, dims, type,
 * offset), padding to `general.alignment` (default 32), then the tensor data.
 * All integers are little-endian. Strings are a u64 length plus bytes, not
 * NUL-terminated.
 *
 * Reader. `hr_gguf_parse` validates a whole header held in memory and builds
 * an index over it; `hr_gguf_open` mmaps a file read-only and parses that.
 * Validation is complete before any pointer into the buffer is handed out:
 * magic, version, every count against the bytes that remain, string lengths,
 * value types, nesting depth, duplicate keys and tensor names, dims (1..4),
 * element counts and byte sizes (overflow-checked before multiplying), type
 * ids, block divisibility, alignment, offsets and sizes inside the file, and
 * tensors that overlap. Every failure is a status plus a message naming the
 * key or tensor and the byte offset; no input can make the reader abort or
 * read outside the buffer (tests/fuzz/fuzz-gguf.c keeps it that way).
 *
 * Ownership. A `struct hr_gguf` borrows the bytes it was parsed from (the
 * caller's buffer, or its own mapping for hr_gguf_open). Every string, array
 * and tensor pointer it returns points into those bytes and stays valid until
 * hr_gguf_close. Nothing is copied except the index itself.
 *
 * Threads. A parsed hr_gguf is immutable: any number of threads may read it.
 *
 * Writer. Collect metadata and tensors with hr_gguf_writer_*, then write to a
 * file (tensor data streamed one tensor at a time, so a multi-GiB model never
 * sits in memory twice) or to a memory buffer.
 *
 *     struct hr_gguf_writer *w = hr_gguf_writer_init();
 *     hr_gguf_writer_set_str(w, "general.architecture", "llama");
 *     hr_gguf_writer_set_u32(w, "llama.block_count", 2);
 *     hr_gguf_writer_add_tensor(w, "output_norm.weight", HR_GGML_F32, 1, ne, data);
 *     if (hr_gguf_writer_write_file(w, "out.gguf", &err) != HR_OK) ...
 *     hr_gguf_writer_free(w);
 */
#ifndef HR_GGUF_GGUF_H
#define HR_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "gguf/ggml-types.h"

#define HR_GGUF_MAGIC             0x46554747u /* "GGUF" read as a little-endian u32 */
#define HR_GGUF_DEFAULT_ALIGNMENT 32u
#define HR_GGUF_MAX_DIMS          4
#define HR_GGUF_MAX_NESTING       8 /* arrays of arrays deeper than this are refused */

/* Metadata value types; the ids are stored in files. */
enum hr_gguf_type {
    HR_GGUF_UINT8 = 0,
    HR_GGUF_INT8 = 1,
    HR_GGUF_UINT16 = 2,
    HR_GGUF_INT16 = 3,
    HR_GGUF_UINT32 = 4,
    HR_GGUF_INT32 = 5,
    HR_GGUF_FLOAT32 = 6,
    HR_GGUF_BOOL = 7,
    HR_GGUF_STRING = 8,
    HR_GGUF_ARRAY = 9,
    HR_GGUF_UINT64 = 10,
    HR_GGUF_INT64 = 11,
    HR_GGUF_FLOAT64 = 12,
    HR_GGUF_TYPE_COUNT
};

/* "uint32", "string", ...; "?" for an unknown id. */
const char *hr_gguf_type_name(uint32_t type);

/* Byte size of a fixed-size value type, 0 for string, array and unknown ids. */
size_t hr_gguf_type_size(uint32_t type);

/* A string inside the parsed bytes: `len` bytes at `ptr`, not NUL-terminated. */
struct hr_gguf_str {
    const char *ptr;
    uint64_t len;
};

/*
 * One metadata value. Scalars are decoded into the union. An array keeps its
 * element type and count; fixed-size elements are read with
 * hr_gguf_arr_get_* from `raw` (little-endian, possibly unaligned), while
 * string and array elements are pre-decoded into `items`.
 */
struct hr_gguf_value {
    enum hr_gguf_type type;
    union {
        uint64_t u64; /* every unsigned integer type, and bool (0/1) */
        int64_t i64;  /* every signed integer type */
        double f64;   /* float32 and float64 */
        struct hr_gguf_str str;
        struct {
            enum hr_gguf_type elem_type;
            uint64_t n;
            const uint8_t *raw;           /* fixed-size elements, packed */
            struct hr_gguf_value *items;  /* string or array elements, n of them */
        } arr;
    } v;
};

struct hr_gguf_kv {
    struct hr_gguf_str key;
    struct hr_gguf_value value;
    uint64_t offset; /* byte offset of the key in the file, for messages */
};

struct hr_gguf_tensor {
    struct hr_gguf_str name;
    uint32_t n_dims;
    uint64_t ne[HR_GGUF_MAX_DIMS]; /* elements per dimension, ne[0] fastest; unused dims are 1 */
    enum hr_ggml_type type;
    uint64_t n_elems;
    uint64_t n_bytes;
    uint64_t offset;     /* relative to the start of the data section */
    const void *data;    /* into the parsed bytes; NULL only for a header-only parse */
};

struct hr_gguf; /* opaque; see the functions below */

/* Flags for hr_gguf_parse_ex. */
enum {
    /* Accept a buffer that holds the header but not (all of) the tensor data;
     * the data pointer of a tensor not wholly inside the buffer is then NULL.
     * Used to inspect truncated downloads. */
    HR_GGUF_HEADER_ONLY = 1u << 0,
};

/*
 * Parses `size` bytes at `buf`. On success *out owns an index that borrows
 * `buf`; the caller keeps `buf` alive until hr_gguf_close(*out). On failure
 * *out is NULL and `err` names the problem.
 */
enum hr_status hr_gguf_parse(const void *buf, size_t size, struct hr_gguf **out,
                             struct hr_err *err);
enum hr_status hr_gguf_parse_ex(const void *buf, size_t size, unsigned flags,
                                struct hr_gguf **out, struct hr_err *err);

/* mmaps `path` read-only and parses it; the mapping is released by hr_gguf_close. */
enum hr_status hr_gguf_open(const char *path, struct hr_gguf **out, struct hr_err *err);

/* Releases the index (and the mapping for hr_gguf_open). Accepts NULL. */
void hr_gguf_close(struct hr_gguf *g);

uint32_t hr_gguf_version(const struct hr_gguf *g);
uint32_t hr_gguf_alignment(const struct hr_gguf *g);
uint64_t hr_gguf_data_offset(const struct hr_gguf *g); /* file offset of the data section */
uint64_t hr_gguf_file_size(const struct hr_gguf *g);
const void *hr_gguf_bytes(const struct hr_gguf *g);     /* the parsed buffer or mapping */

uint64_t hr_gguf_n_kv(const struct hr_gguf *g);
const struct hr_gguf_kv *hr_gguf_kv_at(const struct hr_gguf *g, uint64_t i);
/* The value for `key`, or NULL. O(log n). */
const struct hr_gguf_value *hr_gguf_find(const struct hr_gguf *g, const char *key);

uint64_t hr_gguf_n_tensors(const struct hr_gguf *g);
const struct hr_gguf_tensor *hr_gguf_tensor_at(const struct hr_gguf *g, uint64_t i);
/* The tensor named `name`, or NULL. O(log n). */
const struct hr_gguf_tensor *hr_gguf_find_tensor(const struct hr_gguf *g, const char *name);

/*
 * Typed getters. Each returns HR_OK and stores the value; HR_ERR_NOT_FOUND if
 * the key is absent; HR_ERR_TYPE if it holds another type (integer getters
 * accept any integer type whose value fits, so a u32 may be read as u64 and a
 * small i32 as u32; HR_ERR_RANGE if it does not fit). `err` names the key.
 * hr_gguf_get_str returns a NUL-free view, not a C string.
 */
enum hr_status hr_gguf_get_u32(const struct hr_gguf *g, const char *key, uint32_t *out,
                               struct hr_err *err);
enum hr_status hr_gguf_get_u64(const struct hr_gguf *g, const char *key, uint64_t *out,
                               struct hr_err *err);
enum hr_status hr_gguf_get_i64(const struct hr_gguf *g, const char *key, int64_t *out,
                               struct hr_err *err);
enum hr_status hr_gguf_get_f32(const struct hr_gguf *g, const char *key, float *out,
                               struct hr_err *err);
enum hr_status hr_gguf_get_bool(const struct hr_gguf *g, const char *key, bool *out,
                                struct hr_err *err);
enum hr_status hr_gguf_get_str(const struct hr_gguf *g, const char *key,
                               struct hr_gguf_str *out, struct hr_err *err);
/* An array value; `elem_type` must match unless it is HR_GGUF_TYPE_COUNT (any). */
enum hr_status hr_gguf_get_arr(const struct hr_gguf *g, const char *key,
                               enum hr_gguf_type elem_type, const struct hr_gguf_value **out,
                               struct hr_err *err);

/* Element i of a fixed-size array (no bounds or type check beyond HR_ASSERT). */
uint64_t hr_gguf_arr_get_u64(const struct hr_gguf_value *arr, uint64_t i); /* unsigned or bool */
int64_t hr_gguf_arr_get_i64(const struct hr_gguf_value *arr, uint64_t i);  /* signed ints */
double hr_gguf_arr_get_f64(const struct hr_gguf_value *arr, uint64_t i);   /* float32/64 */

/* True when `s` equals the C string `c`. */
bool hr_gguf_str_eq(struct hr_gguf_str s, const char *c);
/* Copies `s` into a new NUL-terminated string (caller frees); NULL on OOM. */
char *hr_gguf_str_dup(struct hr_gguf_str s);

/* ------------------------------------------------------------------------ */
/* Writer                                                                   */
/* ------------------------------------------------------------------------ */

struct hr_gguf_writer;

/*
 * Produces a tensor's bytes on demand while the file is written: fill
 * exactly `n_bytes` at `dst` and return HR_OK. Called once per tensor, in
 * the order the tensors were added.
 */
typedef enum hr_status (*hr_gguf_fill_fn)(void *ctx, void *dst, uint64_t n_bytes,
                                          struct hr_err *err);

/* NULL on allocation failure. Version 3 unless hr_gguf_writer_set_version. */
struct hr_gguf_writer *hr_gguf_writer_init(void);
void hr_gguf_writer_free(struct hr_gguf_writer *w);
void hr_gguf_writer_set_version(struct hr_gguf_writer *w, uint32_t version);

/*
 * Metadata setters. A key set twice keeps its first position and takes the
 * new value. Strings and arrays are copied; the caller keeps ownership of
 * what it passed. Return HR_ERR_NOMEM on allocation failure, HR_ERR_INVALID
 * for an invalid type or nesting deeper than HR_GGUF_MAX_NESTING.
 * Setting `general.alignment` (u32, a power of two) changes the padding.
 */
enum hr_status hr_gguf_writer_set_value(struct hr_gguf_writer *w, const char *key,
                                        const struct hr_gguf_value *value);
enum hr_status hr_gguf_writer_set_u32(struct hr_gguf_writer *w, const char *key, uint32_t v);
enum hr_status hr_gguf_writer_set_i32(struct hr_gguf_writer *w, const char *key, int32_t v);
enum hr_status hr_gguf_writer_set_u64(struct hr_gguf_writer *w, const char *key, uint64_t v);
enum hr_status hr_gguf_writer_set_f32(struct hr_gguf_writer *w, const char *key, float v);
enum hr_status hr_gguf_writer_set_bool(struct hr_gguf_writer *w, const char *key, bool v);
enum hr_status hr_gguf_writer_set_str(struct hr_gguf_writer *w, const char *key, const char *v);
/* A string array of n NUL-terminated strings. */
enum hr_status hr_gguf_writer_set_arr_str(struct hr_gguf_writer *w, const char *key,
                                          const char *const *strs, uint64_t n);
/* A fixed-size element array: n elements of `elem_type`, packed little-endian at `data`. */
enum hr_status hr_gguf_writer_set_arr(struct hr_gguf_writer *w, const char *key,
                                      enum hr_gguf_type elem_type, const void *data, uint64_t n);

/*
 * Adds a tensor. `ne` has n_dims entries (1..4), ne[0] a multiple of the
 * type's block size. hr_gguf_writer_add_tensor borrows `data` (n_bytes as
 * the type implies) until the write; the _cb form calls `fill` at write time.
 */
enum hr_status hr_gguf_writer_add_tensor(struct hr_gguf_writer *w, const char *name,
                                         enum hr_ggml_type type, uint32_t n_dims,
                                         const uint64_t *ne, const void *data,
                                         struct hr_err *err);
enum hr_status hr_gguf_writer_add_tensor_cb(struct hr_gguf_writer *w, const char *name,
                                            enum hr_ggml_type type, uint32_t n_dims,
                                            const uint64_t *ne, hr_gguf_fill_fn fill,
                                            void *ctx, struct hr_err *err);

/* Writes the file (to `path`.tmp, then renames, so a crash never leaves half a model). */
enum hr_status hr_gguf_writer_write_file(struct hr_gguf_writer *w, const char *path,
                                         struct hr_err *err);
/* Writes into a new malloc'd buffer the caller frees. */
enum hr_status hr_gguf_writer_write_mem(struct hr_gguf_writer *w, void **out, size_t *size,
                                        struct hr_err *err);

#endif
