/*
 * jinja-value.c - the values a template computes with, and the Python
 * behaviour of each: how it prints (str and repr), compares, tests true,
 * and serializes to JSON.
 *
 * Byte-identical output with Python depends on this file more than on any
 * other: `{{ 1.0 }}` must print "1.0", `{{ [1, 'a'] }}` "[1, 'a']",
 * `{{ x | tojson }}` must space and escape like json.dumps. Each function
 * says which Python operation it mirrors.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja-impl.h"

/* ---- arena ---- */

struct jx_chunk {
    struct jx_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

enum { JX_CHUNK_BYTES = 64 * 1024 };

void *jx_alloc(struct jx_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    struct jx_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > JX_CHUNK_BYTES / 2 ? n : JX_CHUNK_BYTES;
        if (a->limit_bytes && a->used_bytes + cap + sizeof(*c) > a->limit_bytes)
            return NULL;
        c = malloc(sizeof(*c) + cap);
        if (!c)
            return NULL;
        c->used = 0;
        c->cap = cap;
        a->used_bytes += cap + sizeof(*c);
        /* A big block gets its own chunk behind the head, so the head's
         * free space stays usable for small allocations. */
        if (a->head && n > JX_CHUNK_BYTES / 2) {
            c->next = a->head->next;
            a->head->next = c;
        } else {
            c->next = a->head;
            a->head = c;
        }
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

void jx_arena_free(struct jx_arena *a)
{
    struct jx_chunk *c = a->head;
    while (c) {
        struct jx_chunk *next = c->next;
        free(c);
        c = next;
    }
    a->head = NULL;
    a->used_bytes = 0;
}

/* ---- errors ---- */

enum hr_status jx_fail(struct jx_ctx *cx, enum hr_status st, const char *fmt, ...)
{
    if (cx->st != HR_OK)
        return cx->st;
    cx->st = st;
    if (cx->err) {
        char msg[480];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        hr_err_set(cx->err, st, "line %d: %s", cx->line, msg);
    }
    return st;
}

static void *cx_alloc(struct jx_ctx *cx, size_t n)
{
    void *p = jx_alloc(&cx->arena, n);
    if (!p)
        jx_fail(cx, HR_ERR_LIMIT, "template used more than %zu bytes of memory",
                cx->lim.max_memory_bytes);
    return p;
}

/* ---- constructors ---- */

struct jstr *jx_str_alloc(struct jx_ctx *cx, size_t len)
{
    if (len > cx->lim.max_memory_bytes) {
        jx_fail(cx, HR_ERR_LIMIT, "a string of %zu bytes is over the memory limit", len);
        return NULL;
    }
    struct jstr *s = cx_alloc(cx, sizeof(struct jstr) + len + 1);
    if (!s)
        return NULL;
    s->len = len;
    s->s[len] = '\0';
    return s;
}

/* The empty string, shared: a zero length and the NUL after it (a struct
 * jstr alone has no room for the NUL that C-string users read). */
static _Alignas(struct jstr) const unsigned char g_empty_bytes[sizeof(struct jstr) + 8];
#define EMPTY_STR ((const struct jstr *)(const void *)g_empty_bytes)

struct jv jx_str(struct jx_ctx *cx, const char *s, size_t len)
{
    if (len == 0)
        return (struct jv){.type = JV_STR, .s = EMPTY_STR};
    struct jstr *p = jx_str_alloc(cx, len);
    if (!p)
        return (struct jv){.type = JV_STR, .s = EMPTY_STR};
    memcpy(p->s, s, len);
    return (struct jv){.type = JV_STR, .s = p};
}

struct jv jx_str_c(struct jx_ctx *cx, const char *s) { return jx_str(cx, s, strlen(s)); }

struct jv jx_list(struct jx_ctx *cx, size_t n)
{
    struct jlist *l = cx_alloc(cx, sizeof(*l));
    if (!l)
        return jv_none();
    if (n) {
        if (n > cx->lim.max_memory_bytes / sizeof(struct jv)) {
            jx_fail(cx, HR_ERR_LIMIT, "a list of %zu items is over the memory limit", n);
            return jv_none();
        }
        l->items = cx_alloc(cx, n * sizeof(struct jv));
        if (!l->items)
            return jv_none();
    }
    l->n = n;
    return (struct jv){.type = JV_LIST, .l = l};
}

struct jdict *jx_dict_new(struct jx_ctx *cx, size_t cap)
{
    struct jdict *d = cx_alloc(cx, sizeof(*d));
    if (!d)
        return NULL;
    if (cap) {
        d->keys = cx_alloc(cx, cap * sizeof(struct jv));
        d->vals = cx_alloc(cx, cap * sizeof(struct jv));
        if (!d->keys || !d->vals)
            return NULL;
        d->cap = cap;
    }
    return d;
}

struct jv *jx_dict_get(const struct jdict *d, struct jv key)
{
    if (key.type == JV_STR)
        return jx_dict_get_str(d, key.s->s, key.s->len);
    for (size_t i = 0; i < d->n; i++)
        if (jx_equal(d->keys[i], key))
            return &d->vals[i];
    return NULL;
}

struct jv *jx_dict_get_str(const struct jdict *d, const char *key, size_t len)
{
    for (size_t i = 0; i < d->n; i++) {
        const struct jv *k = &d->keys[i];
        if (k->type == JV_STR && k->s->len == len && memcmp(k->s->s, key, len) == 0)
            return &d->vals[i];
    }
    return NULL;
}

/* Sets key to val, replacing an existing key in place (Python keeps the
 * first insertion position). Grows the arrays by doubling. */
bool jx_dict_set(struct jx_ctx *cx, struct jdict *d, struct jv key, struct jv val)
{
    struct jv *old = jx_dict_get(d, key);
    if (old) {
        *old = val;
        return true;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        struct jv *k = cx_alloc(cx, cap * sizeof(*k)), *v = cx_alloc(cx, cap * sizeof(*v));
        if (!k || !v)
            return false;
        if (d->n) {
            memcpy(k, d->keys, d->n * sizeof(*k));
            memcpy(v, d->vals, d->n * sizeof(*v));
        }
        d->keys = k, d->vals = v, d->cap = cap;
    }
    d->keys[d->n] = key;
    d->vals[d->n] = val;
    d->n++;
    return true;
}

struct jv jx_undef_attr(struct jx_ctx *cx, struct jv obj, const char *name, bool element)
{
    struct jundef *u = cx_alloc(cx, sizeof(*u));
    if (!u)
        return jv_undef();
    u->name = name;
    u->obj_type = jx_obj_repr(obj);
    u->element = element;
    return (struct jv){.type = JV_UNDEF, .u = u};
}

/* ---- from JSON ---- */

struct jv jx_from_json_arena(struct jx_arena *a, const json_t *j, bool *ok)
{
    switch (json_typeof(j)) {
    case JSON_NULL:
        return jv_none();
    case JSON_TRUE:
        return jv_bool(true);
    case JSON_FALSE:
        return jv_bool(false);
    case JSON_INTEGER:
        return jv_int(json_integer_value(j));
    case JSON_REAL:
        return jv_float(json_real_value(j));
    case JSON_STRING: {
        size_t n = json_string_length(j);
        struct jstr *s = jx_alloc(a, sizeof(struct jstr) + n + 1);
        if (!s) {
            *ok = false;
            return jv_none();
        }
        s->len = n;
        memcpy(s->s, json_string_value(j), n);
        return (struct jv){.type = JV_STR, .s = s};
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        struct jlist *l = jx_alloc(a, sizeof(*l));
        struct jv *items = n ? jx_alloc(a, n * sizeof(*items)) : NULL;
        if (!l || (n && !items)) {
            *ok = false;
            return jv_none();
        }
        l->n = n, l->items = items;
        for (size_t i = 0; i < n && *ok; i++)
            items[i] = jx_from_json_arena(a, json_array_get(j, i), ok);
        return (struct jv){.type = JV_LIST, .l = l};
    }
    case JSON_OBJECT: {
        size_t n = json_object_size(j);
        struct jdict *d = jx_alloc(a, sizeof(*d));
        if (!d || (n && (!(d->keys = jx_alloc(a, n * sizeof(struct jv))) ||
                         !(d->vals = jx_alloc(a, n * sizeof(struct jv)))))) {
            *ok = false;
            return jv_none();
        }
        d->cap = n;
        /* jansson keeps insertion order (json_object_iter walks it), as
         * Python's json.loads does. JSON keys are unique after loading. */
        const char *key;
        size_t key_len;
        json_t *val;
        void *tmp;
        json_object_keylen_foreach_safe((json_t *)j, tmp, key, key_len, val)
        {
            if (!*ok)
                break;
            struct jstr *ks = jx_alloc(a, sizeof(struct jstr) + key_len + 1);
            if (!ks) {
                *ok = false;
                break;
            }
            ks->len = key_len;
            memcpy(ks->s, key, key_len);
            d->keys[d->n] = (struct jv){.type = JV_STR, .s = ks};
            d->vals[d->n] = jx_from_json_arena(a, val, ok);
            d->n++;
        }
        return (struct jv){.type = JV_DICT, .d = d};
    }
    }
    return jv_none();
}

struct jv jx_from_json(struct jx_ctx *cx, const json_t *j)
{
    bool ok = true;
    struct jv v = jx_from_json_arena(&cx->arena, j, &ok);
    if (!ok)
        jx_fail(cx, HR_ERR_LIMIT, "the context is over the memory limit");
    return v;
}

/* ---- Python semantics ---- */

bool jx_truthy(struct jv v)
{
    switch (v.type) {
    case JV_UNDEF:
    case JV_NONE:
        return false;
    case JV_BOOL:
        return v.b;
    case JV_INT:
        return v.i != 0;
    case JV_FLOAT:
        return v.f != 0.0;
    case JV_STR:
        return v.s->len != 0;
    case JV_LIST:
        return v.l->n != 0;
    case JV_DICT:
        return v.d->n != 0;
    default:
        return true;
    }
}

static bool is_num(struct jv v) { return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL; }
static double num_f(struct jv v)
{
    return v.type == JV_FLOAT ? v.f : v.type == JV_INT ? (double)v.i : (double)v.b;
}
static int64_t num_i(struct jv v) { return v.type == JV_INT ? v.i : v.type == JV_BOOL ? (int64_t)v.b : 0; }

/* Python ==: numbers compare by value across int/float/bool, sequences
 * and mappings element-wise, undefined equals undefined (Jinja's
 * Undefined.__eq__ compares types), anything else by identity of type. */
bool jx_equal(struct jv a, struct jv b)
{
    if (is_num(a) && is_num(b)) {
        if (a.type == JV_FLOAT || b.type == JV_FLOAT)
            return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.type != b.type)
        return false;
    switch (a.type) {
    case JV_UNDEF:
    case JV_NONE:
        return true;
    case JV_STR:
        return a.s->len == b.s->len && memcmp(a.s->s, b.s->s, a.s->len) == 0;
    case JV_LIST:
        if (a.l->n != b.l->n || a.flags != b.flags)
            return false;
        for (size_t i = 0; i < a.l->n; i++)
            if (!jx_equal(a.l->items[i], b.l->items[i]))
                return false;
        return true;
    case JV_DICT:
        if (a.d->n != b.d->n)
            return false;
        for (size_t i = 0; i < a.d->n; i++) {
            struct jv *o = jx_dict_get(b.d, a.d->keys[i]);
            if (!o || !jx_equal(a.d->vals[i], *o))
                return false;
        }
        return true;
    case JV_NS:
        return a.d == b.d;
    case JV_MACRO:
        return a.m == b.m;
    case JV_FUNC:
        return a.fn == b.fn;
    default:
        return false;
    }
}

int jx_compare(struct jx_ctx *cx, struct jv a, struct jv b)
{
    if (is_num(a) && is_num(b)) {
        if (a.type == JV_FLOAT || b.type == JV_FLOAT) {
            double x = num_f(a), y = num_f(b);
            return x < y ? -1 : x > y;
        }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y;
    }
    if (a.type == JV_STR && b.type == JV_STR) {
        /* UTF-8 byte order is code point order, which is Python's. */
        size_t n = a.s->len < b.s->len ? a.s->len : b.s->len;
        int c = memcmp(a.s->s, b.s->s, n);
        if (c)
            return c < 0 ? -1 : 1;
        return a.s->len < b.s->len ? -1 : a.s->len > b.s->len;
    }
    if (a.type == JV_LIST && b.type == JV_LIST) {
        size_t n = a.l->n < b.l->n ? a.l->n : b.l->n;
        for (size_t i = 0; i < n; i++) {
            if (jx_equal(a.l->items[i], b.l->items[i]))
                continue;
            return jx_compare(cx, a.l->items[i], b.l->items[i]);
        }
        return a.l->n < b.l->n ? -1 : a.l->n > b.l->n;
    }
    if (a.type == JV_UNDEF) {
        jx_undef_fail(cx, a);
        return 0;
    }
    if (b.type == JV_UNDEF) {
        jx_undef_fail(cx, b);
        return 0;
    }
    jx_fail(cx, HR_ERR_INVALID, "'<' not supported between instances of '%s' and '%s'",
            jx_type_name(a), jx_type_name(b));
    return 0;
}

const char *jx_type_name(struct jv v)
{
    switch (v.type) {
    case JV_UNDEF:
        return "Undefined";
    case JV_NONE:
        return "NoneType";
    case JV_BOOL:
        return "bool";
    case JV_INT:
        return "int";
    case JV_FLOAT:
        return "float";
    case JV_STR:
        return "str";
    case JV_LIST:
        return v.flags & JX_TUPLE ? "tuple" : "list";
    case JV_DICT:
        return "dict";
    case JV_NS:
        return "Namespace";
    case JV_MACRO:
        return "Macro";
    case JV_FUNC:
        return "function";
    case JV_METHOD:
        return "builtin_function_or_method";
    case JV_LOOP:
        return "LoopContext";
    }
    return "object";
}

/* jinja2.utils.object_type_repr: "None", "dict object", ... */
const char *jx_obj_repr(struct jv v)
{
    switch (v.type) {
    case JV_NONE:
        return "None";
    case JV_BOOL:
        return "bool object";
    case JV_INT:
        return "int object";
    case JV_FLOAT:
        return "float object";
    case JV_STR:
        return "str object";
    case JV_LIST:
        return v.flags & JX_TUPLE ? "tuple object" : "list object";
    case JV_DICT:
        return "dict object";
    case JV_NS:
        return "jinja2.utils.Namespace object";
    case JV_LOOP:
        return "jinja2.runtime.LoopContext object";
    case JV_MACRO:
        return "jinja2.runtime.Macro object";
    default:
        return "builtin_function_or_method object";
    }
}

/* jinja2.runtime.Undefined._undefined_message. */
enum hr_status jx_undef_fail(struct jx_ctx *cx, struct jv u)
{
    if (!u.u)
        return jx_fail(cx, HR_ERR_INVALID, "value is undefined");
    if (!u.u->obj_type)
        return jx_fail(cx, HR_ERR_INVALID, "'%s' is undefined", u.u->name);
    if (u.u->element)
        return jx_fail(cx, HR_ERR_INVALID, "%s has no element %s", u.u->obj_type, u.u->name);
    return jx_fail(cx, HR_ERR_INVALID, "'%s' has no attribute '%s'", u.u->obj_type, u.u->name);
}

/* ---- buffers ---- */

bool jx_buf_put(struct jx_ctx *cx, struct jbuf *b, const char *s, size_t n)
{
    if (cx->st != HR_OK)
        return false;
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap - b->n < n) {
            if (cap > cx->lim.max_memory_bytes) {
                jx_fail(cx, HR_ERR_LIMIT, "a string is over the memory limit of %zu bytes",
                        cx->lim.max_memory_bytes);
                return false;
            }
            cap *= 2;
        }
        char *p = cx_alloc(cx, cap);
        if (!p)
            return false;
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    return true;
}

bool jx_buf_putc(struct jx_ctx *cx, struct jbuf *b, char c) { return jx_buf_put(cx, b, &c, 1); }

struct jv jx_buf_str(struct jx_ctx *cx, struct jbuf *b) { return jx_str(cx, b->p, b->n); }

/* ---- str() and repr() ---- */

/* Python's float repr (the 'r' format): the shortest digit string that
 * reads back to the same double, in fixed notation when the decimal
 * exponent is in [-4, 16), otherwise d.ddde+XX with at least two exponent
 * digits; integral values keep ".0". */
size_t jx_fmt_float(double f, char *buf, size_t cap)
{
    if (isnan(f))
        return (size_t)snprintf(buf, cap, "nan");
    if (isinf(f))
        return (size_t)snprintf(buf, cap, f < 0 ? "-inf" : "inf");
    char tmp[40];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, f);
        if (strtod(tmp, NULL) == f)
            break;
    }
    /* tmp is [-]d[.ddd]e[+-]XX: take the digits and the exponent apart. */
    const char *p = tmp;
    bool neg = *p == '-';
    if (neg)
        p++;
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    char out[64];
    size_t k = 0;
    if (neg)
        out[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp < 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = -1; i > exp; i--)
                out[k++] = '0';
            for (size_t i = 0; i < nd; i++)
                out[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp; i++)
                out[k++] = (size_t)i < nd ? digits[i] : '0';
            out[k++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t i = (size_t)exp + 1; i < nd; i++)
                    out[k++] = digits[i];
            else
                out[k++] = '0';
        }
        out[k] = '\0';
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (size_t i = 1; i < nd; i++)
                out[k++] = digits[i];
        }
        k += (size_t)snprintf(out + k, sizeof(out) - k, "e%c%02d", exp < 0 ? '-' : '+',
                              exp < 0 ? -exp : exp);
    }
    return (size_t)snprintf(buf, cap, "%s", out);
}

/* Python's str.isprintable for the code points a chat may hold: control
 * characters, separators other than the space, format characters and
 * private-use code points are not printable. (The full rule is the
 * Unicode category; this covers every category Python excludes in the
 * ranges that occur in practice.) */
static bool cp_printable(uint32_t c)
{
    if (c < 0x20 || (c >= 0x7f && c < 0xa0))
        return false;
    if (c == 0xa0 || c == 0xad || c == 0x1680 || (c >= 0x2000 && c <= 0x200f) ||
        (c >= 0x2028 && c <= 0x202f) || (c >= 0x205f && c <= 0x206f) || c == 0x3000 ||
        c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb) || (c >= 0xe000 && c <= 0xf8ff) ||
        (c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x180e ||
        c >= 0xf0000 || (c >= 0xd800 && c <= 0xdfff) || c == 0xe0001 ||
        (c >= 0xe0020 && c <= 0xe007f))
        return false;
    return true;
}

/* Python's repr(str): single quotes unless the text has a ' and no ". */
static bool repr_str(struct jx_ctx *cx, struct jbuf *b, const char *s, size_t n)
{
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (!jx_buf_putc(cx, b, q))
        return false;
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        uint32_t c = jx_utf8_next(s, n, &i);
        char esc[16];
        const char *e = NULL;
        if (c == (uint32_t)q || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
            e = esc;
        } else if (c == '\n') {
            e = "\\n";
        } else if (c == '\r') {
            e = "\\r";
        } else if (c == '\t') {
            e = "\\t";
        } else if (!cp_printable(c)) {
            if (c < 0x100)
                snprintf(esc, sizeof(esc), "\\x%02x", c);
            else if (c < 0x10000)
                snprintf(esc, sizeof(esc), "\\u%04x", c);
            else
                snprintf(esc, sizeof(esc), "\\U%08x", c);
            e = esc;
        }
        if (e ? !jx_buf_put(cx, b, e, strlen(e)) : !jx_buf_put(cx, b, s + start, i - start))
            return false;
    }
    return jx_buf_putc(cx, b, q);
}

static bool put_cstr(struct jx_ctx *cx, struct jbuf *b, const char *s)
{
    return jx_buf_put(cx, b, s, strlen(s));
}

static bool to_str_or_repr(struct jx_ctx *cx, struct jbuf *b, struct jv v, bool repr, int depth)
{
    if (depth > 100)
        return jx_fail(cx, HR_ERR_LIMIT, "value nested too deeply to print"), false;
    char num[64];
    switch (v.type) {
    case JV_UNDEF:
        /* str(Undefined) is ''; repr is "Undefined". */
        return repr ? put_cstr(cx, b, "Undefined") : true;
    case JV_NONE:
        return put_cstr(cx, b, "None");
    case JV_BOOL:
        return put_cstr(cx, b, v.b ? "True" : "False");
    case JV_INT:
        snprintf(num, sizeof(num), "%lld", (long long)v.i);
        return put_cstr(cx, b, num);
    case JV_FLOAT:
        jx_fmt_float(v.f, num, sizeof(num));
        return put_cstr(cx, b, num);
    case JV_STR:
        return repr ? repr_str(cx, b, v.s->s, v.s->len) : jx_buf_put(cx, b, v.s->s, v.s->len);
    case JV_LIST: {
        bool tuple = v.flags & JX_TUPLE;
        /* Dictionary views print as Python 3 prints them. */
        const char *view = v.flags & JX_DICT_KEYS     ? "dict_keys("
                           : v.flags & JX_DICT_VALUES ? "dict_values("
                           : v.flags & JX_DICT_ITEMS  ? "dict_items("
                                                      : NULL;
        if (view && !put_cstr(cx, b, view))
            return false;
        if (!jx_buf_putc(cx, b, tuple ? '(' : '['))
            return false;
        for (size_t i = 0; i < v.l->n; i++) {
            if (i && !jx_buf_put(cx, b, ", ", 2))
                return false;
            if (!to_str_or_repr(cx, b, v.l->items[i], true, depth + 1))
                return false;
        }
        if (tuple && v.l->n == 1 && !jx_buf_putc(cx, b, ','))
            return false;
        if (!jx_buf_putc(cx, b, tuple ? ')' : ']'))
            return false;
        return view ? jx_buf_putc(cx, b, ')') : true;
    }
    case JV_DICT:
    case JV_NS: {
        if (v.type == JV_NS && !put_cstr(cx, b, "<Namespace "))
            return false;
        if (!jx_buf_putc(cx, b, '{'))
            return false;
        for (size_t i = 0; i < v.d->n; i++) {
            if (i && !jx_buf_put(cx, b, ", ", 2))
                return false;
            if (!to_str_or_repr(cx, b, v.d->keys[i], true, depth + 1) ||
                !jx_buf_put(cx, b, ": ", 2) ||
                !to_str_or_repr(cx, b, v.d->vals[i], true, depth + 1))
                return false;
        }
        if (!jx_buf_putc(cx, b, '}'))
            return false;
        return v.type == JV_NS ? jx_buf_putc(cx, b, '>') : true;
    }
    case JV_MACRO:
        return put_cstr(cx, b, "<Macro>");
    case JV_FUNC:
        snprintf(num, sizeof(num), "<function %s>", jx_global_name(v.fn));
        return put_cstr(cx, b, num);
    case JV_METHOD:
        snprintf(num, sizeof(num), "<built-in method %s of %s>", jx_method_name(v.meth->id),
                 jx_obj_repr(*v.meth->self));
        return put_cstr(cx, b, num);
    case JV_LOOP:
        return put_cstr(cx, b, "<LoopContext>");
    }
    return true;
}

bool jx_to_str(struct jx_ctx *cx, struct jbuf *b, struct jv v)
{
    return to_str_or_repr(cx, b, v, false, 0);
}

bool jx_to_repr(struct jx_ctx *cx, struct jbuf *b, struct jv v)
{
    return to_str_or_repr(cx, b, v, true, 0);
}

struct jv jx_str_of(struct jx_ctx *cx, struct jv v)
{
    if (v.type == JV_STR)
        return v;
    struct jbuf b = {0};
    if (!jx_to_str(cx, &b, v))
        return jx_str(cx, "", 0);
    return jx_buf_str(cx, &b);
}

/* ---- JSON (json.dumps) ---- */

static bool json_str(struct jx_ctx *cx, struct jbuf *b, const char *s, size_t n, bool ascii)
{
    if (!jx_buf_putc(cx, b, '"'))
        return false;
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char c = (unsigned char)s[i];
        const char *e = NULL;
        char esc[16];
        if (c == '"')
            e = "\\\"";
        else if (c == '\\')
            e = "\\\\";
        else if (c == '\n')
            e = "\\n";
        else if (c == '\r')
            e = "\\r";
        else if (c == '\t')
            e = "\\t";
        else if (c == '\b')
            e = "\\b";
        else if (c == '\f')
            e = "\\f";
        else if (c < 0x20) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            e = esc;
        } else if (c >= 0x80 && ascii) {
            if (!jx_buf_put(cx, b, s + run, i - run))
                return false;
            uint32_t cp = jx_utf8_next(s, n, &i);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(esc, sizeof(esc), "\\u%04x\\u%04x", 0xd800 + (cp >> 10),
                         0xdc00 + (cp & 0x3ff));
            } else {
                snprintf(esc, sizeof(esc), "\\u%04x", cp);
            }
            if (!jx_buf_put(cx, b, esc, strlen(esc)))
                return false;
            run = i;
            continue;
        }
        if (e) {
            if (!jx_buf_put(cx, b, s + run, i - run) || !jx_buf_put(cx, b, e, strlen(e)))
                return false;
            run = i + 1;
        }
        i++;
    }
    return jx_buf_put(cx, b, s + run, n - run) && jx_buf_putc(cx, b, '"');
}

static bool json_newline(struct jx_ctx *cx, struct jbuf *b, const struct jx_json_opts *o,
                         int level)
{
    if (!jx_buf_putc(cx, b, '\n'))
        return false;
    for (int i = 0; i < level; i++)
        if (!jx_buf_put(cx, b, o->indent, o->indent_len))
            return false;
    return true;
}

static int cmp_keys(const void *x, const void *y)
{
    const struct jv *a = *(const struct jv *const *)x, *b = *(const struct jv *const *)y;
    size_t n = a->s->len < b->s->len ? a->s->len : b->s->len;
    int c = memcmp(a->s->s, b->s->s, n);
    return c ? c : (a->s->len > b->s->len) - (a->s->len < b->s->len);
}

bool jx_to_json(struct jx_ctx *cx, struct jbuf *b, struct jv v, const struct jx_json_opts *o,
                int depth)
{
    if (depth > 200)
        return jx_fail(cx, HR_ERR_LIMIT, "value nested too deeply for tojson"), false;
    char num[64];
    switch (v.type) {
    case JV_NONE:
        return put_cstr(cx, b, "null");
    case JV_BOOL:
        return put_cstr(cx, b, v.b ? "true" : "false");
    case JV_INT:
        snprintf(num, sizeof(num), "%lld", (long long)v.i);
        return put_cstr(cx, b, num);
    case JV_FLOAT:
        /* json.dumps writes NaN and Infinity (allow_nan=True). */
        if (isnan(v.f))
            return put_cstr(cx, b, "NaN");
        if (isinf(v.f))
            return put_cstr(cx, b, v.f < 0 ? "-Infinity" : "Infinity");
        jx_fmt_float(v.f, num, sizeof(num));
        return put_cstr(cx, b, num);
    case JV_STR:
        return json_str(cx, b, v.s->s, v.s->len, o->ensure_ascii);
    case JV_LIST: {
        if (v.l->n == 0)
            return put_cstr(cx, b, "[]");
        if (!jx_buf_putc(cx, b, '['))
            return false;
        for (size_t i = 0; i < v.l->n; i++) {
            if (i && !put_cstr(cx, b, o->item_sep))
                return false;
            if (o->indent && !json_newline(cx, b, o, depth + 1))
                return false;
            if (!jx_to_json(cx, b, v.l->items[i], o, depth + 1))
                return false;
        }
        if (o->indent && !json_newline(cx, b, o, depth))
            return false;
        return jx_buf_putc(cx, b, ']');
    }
    case JV_DICT: {
        if (v.d->n == 0)
            return put_cstr(cx, b, "{}");
        struct jv **order = cx_alloc(cx, v.d->n * sizeof(*order));
        if (!order)
            return false;
        for (size_t i = 0; i < v.d->n; i++) {
            struct jv k = v.d->keys[i];
            if (k.type != JV_STR && o->sort_keys)
                return jx_fail(cx, HR_ERR_INVALID,
                               "'<' not supported between instances of '%s' and 'str'",
                               jx_type_name(k)),
                       false;
            order[i] = &v.d->keys[i];
        }
        if (o->sort_keys)
            qsort(order, v.d->n, sizeof(*order), cmp_keys);
        if (!jx_buf_putc(cx, b, '{'))
            return false;
        for (size_t i = 0; i < v.d->n; i++) {
            struct jv k = *order[i];
            struct jv val = v.d->vals[order[i] - v.d->keys];
            if (i && !put_cstr(cx, b, o->item_sep))
                return false;
            if (o->indent && !json_newline(cx, b, o, depth + 1))
                return false;
            /* json.dumps turns int, float, bool and None keys into strings. */
            bool ok;
            if (k.type == JV_STR) {
                ok = json_str(cx, b, k.s->s, k.s->len, o->ensure_ascii);
            } else if (k.type == JV_INT || k.type == JV_FLOAT || k.type == JV_BOOL ||
                       k.type == JV_NONE) {
                struct jbuf kb = {0};
                ok = jx_to_json(cx, &kb, k, o, depth + 1) && jx_buf_putc(cx, b, '"') &&
                     jx_buf_put(cx, b, kb.p, kb.n) && jx_buf_putc(cx, b, '"');
            } else {
                return jx_fail(cx, HR_ERR_INVALID,
                               "keys must be str, int, float, bool or None, not %s",
                               jx_type_name(k)),
                       false;
            }
            if (!ok || !put_cstr(cx, b, o->key_sep) || !jx_to_json(cx, b, val, o, depth + 1))
                return false;
        }
        if (o->indent && !json_newline(cx, b, o, depth))
            return false;
        return jx_buf_putc(cx, b, '}');
    }
    default:
        return jx_fail(cx, HR_ERR_INVALID, "Object of type %s is not JSON serializable",
                       jx_type_name(v)),
               false;
    }
}

/* ---- UTF-8 ---- */

size_t jx_utf8_len(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xc0) != 0x80;
    return k;
}

size_t jx_utf8_offset(const char *s, size_t n, size_t cp)
{
    size_t i = 0, k = 0;
    for (; i < n; i++) {
        if (((unsigned char)s[i] & 0xc0) != 0x80) {
            if (k == cp)
                return i;
            k++;
        }
    }
    return n;
}
