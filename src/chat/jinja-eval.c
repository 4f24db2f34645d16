/*
 * jinja-eval.c - the interpreter: walks the syntax tree of a template and
 * writes its output, with Jinja's scoping and Python's operators.
 *
 * Scopes. A frame maps symbol ids to values and points to its parent. The
 * root frame holds top-level `set`s; below it the caller's context (a
 * dict), then the global functions. Each iteration of a for loop runs in a
 * fresh frame, so `{% set x = x + 1 %}` inside a loop never changes the x
 * outside it, nor carries over to the next iteration (Jinja prints "1110"
 * for `{% set x = 0 %}{% for i in range(3) %}{% set x = x + 1 %}{{ x }}
 * {% endfor %}{{ x }}`); that is why templates use namespace() to carry
 * state out of loops. A macro's frame hangs off the root frame: macros see
 * template-level variables, not their caller's locals.
 *
 * Output goes to a "sink", a buffer in the render arena. Macro calls, block
 * sets and filter blocks swap in a fresh sink and turn what it collected
 * into a string.
 *
 * Bounds. Every loop iteration and macro call is a step (jx_step), which
 * also checks the clock every 1024 steps. Expression and statement
 * evaluation count their recursion depth (max 1500, which bounds the C
 * stack to well under a megabyte), macro calls their own nesting.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/sys.h"
#include "chat/jinja-impl.h"

enum { JX_MAX_EVAL_DEPTH = 1500 };

struct jvar {
    int sym;
    struct jv v;
};

struct jframe {
    struct jframe *parent;
    struct jvar *vars;
    size_t n, cap;
};

struct jloop {
    struct jlist items;
    size_t index0;
};

struct jmacro {
    const struct jnode *def;  /* JN_MACRO or JN_CALLBLOCK */
    struct jframe *parent;    /* where names not bound by the macro resolve */
    struct jv caller;         /* for a macro called from {% call %}, or undefined */
};

struct ectx {
    struct jx_ctx *cx;
    struct jbuf *sink;
    uint32_t depth;
    int sym_loop, sym_caller, sym_varargs, sym_kwargs;
};

/* The interpreter state hangs off jx_ctx through this one pointer, so
 * jx_call_value (called from filters) can reach it. */
static struct ectx *ectx_of(struct jx_ctx *cx);

bool jx_step(struct jx_ctx *cx)
{
    if (cx->st != HR_OK)
        return false;
    if (++cx->steps > cx->lim.max_iterations) {
        jx_fail(cx, HR_ERR_LIMIT, "more than %llu loop iterations and macro calls",
                (unsigned long long)cx->lim.max_iterations);
        return false;
    }
    if ((cx->steps & 1023) == 0 && hr_now_seconds() > cx->deadline) {
        jx_fail(cx, HR_ERR_LIMIT, "rendering took longer than %u ms", cx->lim.max_ms);
        return false;
    }
    return true;
}

/* ---- frames ---- */

static struct jframe *frame_new(struct jx_ctx *cx, struct jframe *parent)
{
    struct jframe *f = jx_alloc(&cx->arena, sizeof(*f));
    if (!f) {
        jx_fail(cx, HR_ERR_LIMIT, "template used more than %zu bytes of memory",
                cx->lim.max_memory_bytes);
        return NULL;
    }
    f->parent = parent;
    return f;
}

static bool frame_set(struct jx_ctx *cx, struct jframe *f, int sym, struct jv v)
{
    for (size_t i = 0; i < f->n; i++)
        if (f->vars[i].sym == sym) {
            f->vars[i].v = v;
            return true;
        }
    if (f->n == f->cap) {
        size_t cap = f->cap ? f->cap * 2 : 8;
        struct jvar *vars = jx_alloc(&cx->arena, cap * sizeof(*vars));
        if (!vars) {
            jx_fail(cx, HR_ERR_LIMIT, "template used more than %zu bytes of memory",
                    cx->lim.max_memory_bytes);
            return false;
        }
        if (f->n)
            memcpy(vars, f->vars, f->n * sizeof(*vars));
        f->vars = vars;
        f->cap = cap;
    }
    f->vars[f->n].sym = sym;
    f->vars[f->n].v = v;
    f->n++;
    return true;
}

static struct jv lookup(struct jx_ctx *cx, struct jframe *f, int sym)
{
    for (; f; f = f->parent)
        for (size_t i = f->n; i-- > 0;)
            if (f->vars[i].sym == sym)
                return f->vars[i].v;
    const char *name = cx->t->syms[sym];
    if (cx->context) {
        struct jv *v = jx_dict_get_str(cx->context, name, strlen(name));
        if (v)
            return *v;
    }
    int g = jx_global_find(name);
    if (g >= 0)
        return (struct jv){.type = JV_FUNC, .fn = g};
    struct jundef *u = jx_alloc(&cx->arena, sizeof(*u));
    if (u)
        u->name = name;
    return (struct jv){.type = JV_UNDEF, .u = u};
}

/* ---- arguments ---- */

const struct jv *jx_arg(const struct jargs *a, size_t i, const char *name)
{
    if (i < a->n_pos)
        return &a->pos[i];
    if (name)
        for (size_t k = 0; k < a->n_kw; k++)
            if (strcmp(a->kw_names[k], name) == 0)
                return &a->kw[k];
    return NULL;
}

bool jx_args_check(struct jx_ctx *cx, const char *fname, const struct jargs *a, size_t max_pos,
                   const char *const *kw_allowed)
{
    if (a->n_pos > max_pos) {
        jx_fail(cx, HR_ERR_INVALID, "%s() takes at most %zu positional arguments (%zu given)",
                fname, max_pos, a->n_pos);
        return false;
    }
    for (size_t k = 0; k < a->n_kw; k++) {
        bool ok = false;
        for (size_t i = 0; kw_allowed && kw_allowed[i]; i++)
            if (strcmp(kw_allowed[i], a->kw_names[k]) == 0)
                ok = true;
        if (!ok) {
            jx_fail(cx, HR_ERR_INVALID, "%s() got an unexpected keyword argument '%s'", fname,
                    a->kw_names[k]);
            return false;
        }
    }
    return true;
}

/* ---- helpers ---- */

static struct jv eval(struct ectx *E, const struct jnode *n, struct jframe *f);
static void exec_body(struct ectx *E, const struct jnode *body, struct jframe *f);

static bool emit(struct ectx *E, const char *s, size_t n)
{
    struct jx_ctx *cx = E->cx;
    if (n > cx->lim.max_output_bytes || E->sink->n > cx->lim.max_output_bytes - n) {
        jx_fail(cx, HR_ERR_LIMIT, "output is longer than %zu bytes", cx->lim.max_output_bytes);
        return false;
    }
    return jx_buf_put(cx, E->sink, s, n);
}

static bool emit_value(struct ectx *E, struct jv v)
{
    if (v.type == JV_STR)
        return emit(E, v.s->s, v.s->len);
    if (v.type == JV_UNDEF)
        return true;
    struct jbuf b = {0};
    if (!jx_to_str(E->cx, &b, v))
        return false;
    return emit(E, b.p, b.n);
}

bool jx_iter_list(struct jx_ctx *cx, struct jv v, struct jlist *out)
{
    switch (v.type) {
    case JV_LIST:
        *out = *v.l;
        return true;
    case JV_UNDEF:
        out->n = 0;
        out->items = NULL;
        return true;
    case JV_DICT:
    case JV_NS:
        out->n = v.d->n;
        out->items = v.d->keys;
        return true;
    case JV_STR: {
        size_t n = jx_utf8_len(v.s->s, v.s->len);
        struct jv l = jx_list(cx, n);
        if (cx->st != HR_OK)
            return false;
        size_t i = 0;
        for (size_t k = 0; k < n; k++) {
            size_t j = i + 1;
            while (j < v.s->len && ((unsigned char)v.s->s[j] & 0xc0) == 0x80)
                j++;
            l.l->items[k] = jx_str(cx, v.s->s + i, j - i);
            i = j;
        }
        *out = *l.l;
        return cx->st == HR_OK;
    }
    default:
        jx_fail(cx, HR_ERR_INVALID, "'%s' object is not iterable", jx_type_name(v));
        return false;
    }
}

static bool check_defined(struct jx_ctx *cx, struct jv v)
{
    if (v.type == JV_UNDEF) {
        jx_undef_fail(cx, v);
        return false;
    }
    return true;
}

/* ---- attribute and item access ---- */

static struct jv loop_attr(struct jx_ctx *cx, struct jv lv, const char *name)
{
    struct jloop *L = lv.loop;
    size_t n = L->items.n, i = L->index0;
    if (!strcmp(name, "index"))
        return jv_int((int64_t)i + 1);
    if (!strcmp(name, "index0"))
        return jv_int((int64_t)i);
    if (!strcmp(name, "revindex"))
        return jv_int((int64_t)(n - i));
    if (!strcmp(name, "revindex0"))
        return jv_int((int64_t)(n - i - 1));
    if (!strcmp(name, "first"))
        return jv_bool(i == 0);
    if (!strcmp(name, "last"))
        return jv_bool(i + 1 == n);
    if (!strcmp(name, "length"))
        return jv_int((int64_t)n);
    if (!strcmp(name, "depth"))
        return jv_int(1);
    if (!strcmp(name, "depth0"))
        return jv_int(0);
    if (!strcmp(name, "previtem")) {
        if (i == 0) {
            return (struct jv){.type = JV_UNDEF, .u = NULL};
        }
        return L->items.items[i - 1];
    }
    if (!strcmp(name, "nextitem")) {
        if (i + 1 >= n)
            return (struct jv){.type = JV_UNDEF, .u = NULL};
        return L->items.items[i + 1];
    }
    int m = jx_method_find(lv, name);
    if (m >= 0) {
        struct jmethod *bm = jx_alloc(&cx->arena, sizeof(*bm));
        struct jv *self = jx_alloc(&cx->arena, sizeof(*self));
        if (!bm || !self)
            return jv_undef();
        *self = lv;
        bm->self = self;
        bm->id = m;
        return (struct jv){.type = JV_METHOD, .meth = bm};
    }
    return jx_undef_attr(cx, lv, name, false);
}

/* The value for a method of obj by name, bound; or undefined. */
static struct jv bind_method(struct jx_ctx *cx, struct jv obj, int m)
{
    struct jmethod *bm = jx_alloc(&cx->arena, sizeof(*bm));
    struct jv *self = jx_alloc(&cx->arena, sizeof(*self));
    if (!bm || !self) {
        jx_fail(cx, HR_ERR_LIMIT, "template used more than %zu bytes of memory",
                cx->lim.max_memory_bytes);
        return jv_undef();
    }
    *self = obj;
    bm->self = self;
    bm->id = m;
    return (struct jv){.type = JV_METHOD, .meth = bm};
}

/* x.name: Python attribute first (a dict's `items` is the method, even if
 * the dict has an "items" key), then the item, as Jinja's getattr does. */
struct jv jx_getattr(struct jx_ctx *cx, struct jv obj, const char *name, size_t len)
{
    switch (obj.type) {
    case JV_UNDEF:
        jx_undef_fail(cx, obj);
        return jv_undef();
    case JV_LOOP:
        return loop_attr(cx, obj, name);
    case JV_NS: {
        struct jv *v = jx_dict_get_str(obj.d, name, len);
        return v ? *v : jx_undef_attr(cx, obj, name, false);
    }
    case JV_DICT: {
        int m = jx_method_find(obj, name);
        if (m >= 0)
            return bind_method(cx, obj, m);
        struct jv *v = jx_dict_get_str(obj.d, name, len);
        return v ? *v : jx_undef_attr(cx, obj, name, false);
    }
    default: {
        int m = jx_method_find(obj, name);
        if (m >= 0)
            return bind_method(cx, obj, m);
        return jx_undef_attr(cx, obj, name, false);
    }
    }
}

static bool as_index(struct jv k, int64_t *i)
{
    if (k.type == JV_INT)
        *i = k.i;
    else if (k.type == JV_BOOL)
        *i = k.b;
    else
        return false;
    return true;
}

static const char *key_text(struct jx_ctx *cx, struct jv key)
{
    if (key.type == JV_STR)
        return key.s->s;
    struct jbuf b = {0};
    if (!jx_to_repr(cx, &b, key) || !jx_buf_putc(cx, &b, '\0'))
        return "?";
    return b.p;
}

/* x[key]: the item first, then (for string keys) the attribute. */
struct jv jx_getitem(struct jx_ctx *cx, struct jv obj, struct jv key)
{
    int64_t i;
    switch (obj.type) {
    case JV_UNDEF:
        jx_undef_fail(cx, obj);
        return jv_undef();
    case JV_DICT:
    case JV_NS: {
        struct jv *v = jx_dict_get(obj.d, key);
        if (v)
            return *v;
        if (key.type == JV_STR && obj.type == JV_DICT) {
            int m = jx_method_find(obj, key.s->s);
            if (m >= 0)
                return bind_method(cx, obj, m);
        }
        return jx_undef_attr(cx, obj, key_text(cx, key), key.type != JV_STR);
    }
    case JV_LIST:
        if (as_index(key, &i)) {
            int64_t n = (int64_t)obj.l->n;
            if (i < 0)
                i += n;
            if (i < 0 || i >= n)
                return jx_undef_attr(cx, obj, key_text(cx, key), true);
            return obj.l->items[i];
        }
        break;
    case JV_STR:
        if (as_index(key, &i)) {
            int64_t n = (int64_t)jx_utf8_len(obj.s->s, obj.s->len);
            if (i < 0)
                i += n;
            if (i < 0 || i >= n)
                return jx_undef_attr(cx, obj, key_text(cx, key), true);
            size_t a = jx_utf8_offset(obj.s->s, obj.s->len, (size_t)i);
            size_t b = a + 1;
            while (b < obj.s->len && ((unsigned char)obj.s->s[b] & 0xc0) == 0x80)
                b++;
            return jx_str(cx, obj.s->s + a, b - a);
        }
        break;
    case JV_LOOP:
        if (key.type == JV_STR)
            return loop_attr(cx, obj, key.s->s);
        break;
    default:
        break;
    }
    if (key.type == JV_STR)
        return jx_getattr(cx, obj, key.s->s, key.s->len);
    return jx_undef_attr(cx, obj, key_text(cx, key), true);
}

/* Python slice indices for a sequence of n elements. */
static bool slice_bounds(struct jx_ctx *cx, struct jv *parts, int64_t n, int64_t *start,
                         int64_t *stop, int64_t *step)
{
    *step = 1;
    if (parts[2].type != JV_NONE && parts[2].type != JV_UNDEF) {
        if (!as_index(parts[2], step)) {
            jx_fail(cx, HR_ERR_INVALID, "slice indices must be integers or None");
            return false;
        }
        if (*step == 0) {
            jx_fail(cx, HR_ERR_INVALID, "slice step cannot be zero");
            return false;
        }
    }
    int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? n - 1 : n;
    for (int k = 0; k < 2; k++) {
        int64_t *out = k == 0 ? start : stop;
        if (parts[k].type == JV_NONE || parts[k].type == JV_UNDEF) {
            *out = (k == 0) == (*step > 0) ? lo : hi;
            continue;
        }
        int64_t v;
        if (!as_index(parts[k], &v)) {
            jx_fail(cx, HR_ERR_INVALID, "slice indices must be integers or None");
            return false;
        }
        if (v < 0) {
            v += n;
            if (v < lo)
                v = lo;
        } else if (v > hi) {
            v = hi;
        }
        *out = v;
    }
    if (*step > 0 && *start < lo)
        *start = lo;
    return true;
}

static struct jv do_slice(struct jx_ctx *cx, struct jv obj, struct jv *parts)
{
    if (!check_defined(cx, obj))
        return jv_undef();
    int64_t start, stop, step;
    if (obj.type == JV_LIST) {
        int64_t n = (int64_t)obj.l->n;
        if (!slice_bounds(cx, parts, n, &start, &stop, &step))
            return jv_undef();
        size_t count = 0;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            count++;
        struct jv out = jx_list(cx, count);
        if (cx->st != HR_OK)
            return jv_undef();
        size_t k = 0;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            out.l->items[k++] = obj.l->items[i];
        out.flags = obj.flags;
        return out;
    }
    if (obj.type == JV_STR) {
        int64_t n = (int64_t)jx_utf8_len(obj.s->s, obj.s->len);
        if (!slice_bounds(cx, parts, n, &start, &stop, &step))
            return jv_undef();
        if (step == 1) {
            if (stop <= start)
                return jx_str(cx, "", 0);
            size_t a = jx_utf8_offset(obj.s->s, obj.s->len, (size_t)start);
            size_t b = jx_utf8_offset(obj.s->s, obj.s->len, (size_t)stop);
            return jx_str(cx, obj.s->s + a, b - a);
        }
        struct jlist chars;
        if (!jx_iter_list(cx, obj, &chars))
            return jv_undef();
        struct jbuf b = {0};
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            if (!jx_buf_put(cx, &b, chars.items[i].s->s, chars.items[i].s->len))
                return jv_undef();
        return jx_buf_str(cx, &b);
    }
    jx_fail(cx, HR_ERR_INVALID, "'%s' object is not subscriptable", jx_type_name(obj));
    return jv_undef();
}

/* ---- operators ---- */

static bool is_num(struct jv v) { return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL; }
static double num_f(struct jv v)
{
    return v.type == JV_FLOAT ? v.f : v.type == JV_INT ? (double)v.i : (double)v.b;
}
static int64_t num_i(struct jv v) { return v.type == JV_INT ? v.i : v.type == JV_BOOL ? (int64_t)v.b : 0; }

static const char *const g_op_text[] = {"+", "-", "*", "/", "//", "%", "**"};

static struct jv type_error(struct jx_ctx *cx, enum jn_op op, struct jv a, struct jv b)
{
    if (a.type == JV_UNDEF)
        jx_undef_fail(cx, a);
    else if (b.type == JV_UNDEF)
        jx_undef_fail(cx, b);
    else if (op == JO_ADD && a.type == JV_STR)
        jx_fail(cx, HR_ERR_INVALID, "can only concatenate str (not \"%s\") to str",
                jx_type_name(b));
    else if (op == JO_ADD && a.type == JV_LIST)
        jx_fail(cx, HR_ERR_INVALID, "can only concatenate list (not \"%s\") to list",
                jx_type_name(b));
    else
        jx_fail(cx, HR_ERR_INVALID, "unsupported operand type(s) for %s: '%s' and '%s'",
                g_op_text[op], jx_type_name(a), jx_type_name(b));
    return jv_undef();
}

static struct jv overflow(struct jx_ctx *cx)
{
    jx_fail(cx, HR_ERR_RANGE, "integer overflow (beyond 64 bits)");
    return jv_undef();
}

static struct jv repeat(struct jx_ctx *cx, struct jv seq, int64_t times)
{
    if (times < 0)
        times = 0;
    if (seq.type == JV_STR) {
        if (seq.s->len && (uint64_t)times > cx->lim.max_memory_bytes / seq.s->len) {
            jx_fail(cx, HR_ERR_LIMIT, "string repetition is over the memory limit");
            return jv_undef();
        }
        size_t n = seq.s->len * (size_t)times;
        struct jstr *s = jx_str_alloc(cx, n);
        if (!s)
            return jv_undef();
        for (int64_t i = 0; i < times; i++)
            memcpy(s->s + (size_t)i * seq.s->len, seq.s->s, seq.s->len);
        return (struct jv){.type = JV_STR, .s = s};
    }
    size_t n = seq.l->n;
    if (n && (uint64_t)times > cx->lim.max_memory_bytes / (n * sizeof(struct jv))) {
        jx_fail(cx, HR_ERR_LIMIT, "list repetition is over the memory limit");
        return jv_undef();
    }
    struct jv out = jx_list(cx, n * (size_t)times);
    if (cx->st != HR_OK)
        return jv_undef();
    for (int64_t i = 0; i < times; i++)
        if (n)
            memcpy(out.l->items + (size_t)i * n, seq.l->items, n * sizeof(struct jv));
    out.flags = seq.flags;
    return out;
}

static struct jv binop(struct jx_ctx *cx, enum jn_op op, struct jv a, struct jv b)
{
    if (is_num(a) && is_num(b)) {
        bool fl = a.type == JV_FLOAT || b.type == JV_FLOAT;
        int64_t x = num_i(a), y = num_i(b), r;
        double fx = num_f(a), fy = num_f(b);
        switch (op) {
        case JO_ADD:
            if (fl)
                return jv_float(fx + fy);
            return __builtin_add_overflow(x, y, &r) ? overflow(cx) : jv_int(r);
        case JO_SUB:
            if (fl)
                return jv_float(fx - fy);
            return __builtin_sub_overflow(x, y, &r) ? overflow(cx) : jv_int(r);
        case JO_MUL:
            if (fl)
                return jv_float(fx * fy);
            return __builtin_mul_overflow(x, y, &r) ? overflow(cx) : jv_int(r);
        case JO_DIV:
            if (fy == 0.0) {
                jx_fail(cx, HR_ERR_INVALID, fl ? "float division by zero" : "division by zero");
                return jv_undef();
            }
            return jv_float(fx / fy);
        case JO_FLOORDIV:
        case JO_MOD:
            if (fl ? fy == 0.0 : y == 0) {
                jx_fail(cx, HR_ERR_INVALID,
                        op == JO_MOD ? (fl ? "float modulo" : "integer modulo by zero")
                                     : (fl ? "float floor division by zero"
                                           : "integer division or modulo by zero"));
                return jv_undef();
            }
            if (fl) {
                /* Python: mod takes the divisor's sign; div = (a - mod) / b. */
                double m = fmod(fx, fy);
                if (m != 0.0 && ((fy < 0) != (m < 0)))
                    m += fy;
                if (op == JO_MOD)
                    return jv_float(m == 0.0 ? copysign(0.0, fy) : m);
                return jv_float(floor((fx - m) / fy + 0.5));
            }
            if (x == INT64_MIN && y == -1)
                return op == JO_MOD ? jv_int(0) : overflow(cx);
            {
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0)))
                    q--, m += y;
                return op == JO_MOD ? jv_int(m) : jv_int(q);
            }
        case JO_POW:
            if (fl || y < 0)
                return jv_float(pow(fx, fy));
            {
                int64_t acc = 1, base = x;
                int64_t e = y;
                while (e > 0) {
                    if (e & 1 && __builtin_mul_overflow(acc, base, &acc))
                        return overflow(cx);
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base))
                        return overflow(cx);
                }
                return jv_int(acc);
            }
        default:
            break;
        }
    }
    switch (op) {
    case JO_ADD:
        if (a.type == JV_STR && b.type == JV_STR) {
            if (!a.s->len)
                return b;
            if (!b.s->len)
                return a;
            struct jstr *s = jx_str_alloc(cx, a.s->len + b.s->len);
            if (!s)
                return jv_undef();
            memcpy(s->s, a.s->s, a.s->len);
            memcpy(s->s + a.s->len, b.s->s, b.s->len);
            return (struct jv){.type = JV_STR, .s = s};
        }
        if (a.type == JV_LIST && b.type == JV_LIST &&
            (a.flags & JX_TUPLE) == (b.flags & JX_TUPLE)) {
            struct jv out = jx_list(cx, a.l->n + b.l->n);
            if (cx->st != HR_OK)
                return jv_undef();
            if (a.l->n)
                memcpy(out.l->items, a.l->items, a.l->n * sizeof(struct jv));
            if (b.l->n)
                memcpy(out.l->items + a.l->n, b.l->items, b.l->n * sizeof(struct jv));
            out.flags = a.flags;
            return out;
        }
        break;
    case JO_MUL:
        if ((a.type == JV_STR || a.type == JV_LIST) && (b.type == JV_INT || b.type == JV_BOOL))
            return repeat(cx, a, num_i(b));
        if ((b.type == JV_STR || b.type == JV_LIST) && (a.type == JV_INT || a.type == JV_BOOL))
            return repeat(cx, b, num_i(a));
        break;
    case JO_MOD:
        if (a.type == JV_STR && b.type != JV_UNDEF)
            return jx_format_percent(cx, a, b);
        break;
    default:
        break;
    }
    return type_error(cx, op, a, b);
}

static bool contains(struct jx_ctx *cx, struct jv container, struct jv item)
{
    switch (container.type) {
    case JV_STR:
        if (item.type != JV_STR) {
            if (item.type == JV_UNDEF)
                jx_undef_fail(cx, item);
            else
                jx_fail(cx, HR_ERR_INVALID, "'in <string>' requires string as left operand, not %s",
                        jx_type_name(item));
            return false;
        }
        if (item.s->len == 0)
            return true;
        return memmem(container.s->s, container.s->len, item.s->s, item.s->len) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < container.l->n; i++)
            if (jx_equal(container.l->items[i], item))
                return true;
        return false;
    case JV_DICT:
    case JV_NS:
        return jx_dict_get(container.d, item) != NULL;
    case JV_UNDEF:
        return false;
    default:
        jx_fail(cx, HR_ERR_INVALID, "argument of type '%s' is not iterable",
                jx_type_name(container));
        return false;
    }
}

/* ---- calls ---- */

static struct jv call_macro(struct ectx *E, struct jmacro *m, const struct jargs *args)
{
    struct jx_ctx *cx = E->cx;
    const struct jnode *def = m->def;
    if (!jx_step(cx))
        return jv_undef();
    if (cx->call_depth >= cx->lim.max_call_depth) {
        jx_fail(cx, HR_ERR_LIMIT, "macro calls nested deeper than %u", cx->lim.max_call_depth);
        return jv_undef();
    }
    struct jframe *f = frame_new(cx, m->parent);
    if (!f)
        return jv_undef();
    size_t n_params = def->n;
    /* Positional arguments, then keywords by name, then defaults. */
    size_t extra = args->n_pos > n_params ? args->n_pos - n_params : 0;
    for (size_t i = 0; i < n_params; i++) {
        const struct jv *v = i < args->n_pos ? &args->pos[i] : NULL;
        for (size_t k = 0; !v && k < args->n_kw; k++)
            if (strcmp(args->kw_names[k], def->kids[i]->name) == 0)
                v = &args->kw[k];
        struct jv val;
        if (v)
            val = *v;
        else if (def->kw && def->kw[i])
            val = eval(E, def->kw[i], f);
        else {
            struct jundef *u = jx_alloc(&cx->arena, sizeof(*u));
            if (u)
                u->name = def->kids[i]->name;
            val = (struct jv){.type = JV_UNDEF, .u = u};
        }
        if (cx->st != HR_OK || !frame_set(cx, f, def->kids[i]->sym, val))
            return jv_undef();
    }
    struct jdict *kwargs = jx_dict_new(cx, 0);
    if (!kwargs)
        return jv_undef();
    for (size_t k = 0; k < args->n_kw; k++) {
        bool is_param = false;
        for (size_t i = 0; i < n_params; i++)
            if (strcmp(args->kw_names[k], def->kids[i]->name) == 0)
                is_param = true;
        if (!is_param) {
            if (E->sym_kwargs < 0) {
                jx_fail(cx, HR_ERR_INVALID, "macro '%s' takes no keyword argument '%s'",
                        def->name ? def->name : "caller", args->kw_names[k]);
                return jv_undef();
            }
            jx_dict_set(cx, kwargs, jx_str_c(cx, args->kw_names[k]), args->kw[k]);
        }
    }
    if (extra && E->sym_varargs < 0) {
        jx_fail(cx, HR_ERR_INVALID, "macro '%s' takes not more than %zu argument(s)",
                def->name ? def->name : "caller", n_params);
        return jv_undef();
    }
    if (E->sym_varargs >= 0) {
        struct jv va = jx_list(cx, extra);
        if (cx->st != HR_OK)
            return jv_undef();
        for (size_t i = 0; i < extra; i++)
            va.l->items[i] = args->pos[n_params + i];
        va.flags = JX_TUPLE;
        frame_set(cx, f, E->sym_varargs, va);
    }
    if (E->sym_kwargs >= 0)
        frame_set(cx, f, E->sym_kwargs, (struct jv){.type = JV_DICT, .d = kwargs});
    if (E->sym_caller >= 0 && m->caller.type != JV_UNDEF)
        frame_set(cx, f, E->sym_caller, m->caller);
    struct jbuf out = {0}, *saved = E->sink;
    E->sink = &out;
    cx->call_depth++;
    exec_body(E, def->c, f);
    cx->call_depth--;
    E->sink = saved;
    cx->loop_ctl = 0;
    if (cx->st != HR_OK)
        return jv_undef();
    return jx_buf_str(cx, &out);
}

struct jv jx_call_value(struct jx_ctx *cx, struct jv fn, const struct jargs *args)
{
    switch (fn.type) {
    case JV_MACRO:
        return call_macro(ectx_of(cx), fn.m, args);
    case JV_FUNC:
        return jx_global_call(cx, fn.fn, args);
    case JV_METHOD:
        return jx_method_call(cx, *fn.meth->self, fn.meth->id, args);
    case JV_UNDEF:
        jx_undef_fail(cx, fn);
        return jv_undef();
    default:
        jx_fail(cx, HR_ERR_INVALID, "'%s' object is not callable", jx_type_name(fn));
        return jv_undef();
    }
}

/* Evaluates the arguments of a CALL, FILTER or TEST node. */
static bool eval_args(struct ectx *E, const struct jnode *n, struct jframe *f, struct jargs *a,
                      struct jv *first)
{
    struct jx_ctx *cx = E->cx;
    size_t extra = first ? 1 : 0;
    memset(a, 0, sizeof(*a));
    size_t n_pos = n->n + extra;
    if (n_pos) {
        a->pos = jx_alloc(&cx->arena, n_pos * sizeof(struct jv));
        if (!a->pos)
            return jx_fail(cx, HR_ERR_LIMIT, "template used too much memory"), false;
    }
    if (first)
        a->pos[0] = *first;
    for (size_t i = 0; i < n->n; i++) {
        a->pos[i + extra] = eval(E, n->kids[i], f);
        if (cx->st != HR_OK)
            return false;
    }
    a->n_pos = n_pos;
    if (n->n_kw) {
        a->kw = jx_alloc(&cx->arena, n->n_kw * sizeof(struct jv));
        if (!a->kw)
            return jx_fail(cx, HR_ERR_LIMIT, "template used too much memory"), false;
        for (size_t i = 0; i < n->n_kw; i++) {
            a->kw[i] = eval(E, n->kw[i], f);
            if (cx->st != HR_OK)
                return false;
        }
        a->kw_names = n->kw_names;
        a->n_kw = n->n_kw;
    }
    return true;
}

static struct jv apply_filter(struct ectx *E, const struct jnode *n, struct jv v, struct jframe *f)
{
    struct jx_ctx *cx = E->cx;
    struct jargs args;
    if (!eval_args(E, n, f, &args, NULL))
        return jv_undef();
    cx->line = n->line;
    if (n->fn < 0) {
        jx_fail(cx, HR_ERR_INVALID, "No filter named '%s'.", n->name);
        return jv_undef();
    }
    return jx_filter_apply(cx, n->fn, v, &args);
}

/* A filter chain whose innermost input is `v` (block set, filter block). */
static struct jv apply_chain(struct ectx *E, const struct jnode *n, struct jv v, struct jframe *f)
{
    if (!n)
        return v;
    v = apply_chain(E, n->a, v, f);
    if (E->cx->st != HR_OK)
        return jv_undef();
    return apply_filter(E, n, v, f);
}

/* ---- expressions ---- */

static struct jv eval(struct ectx *E, const struct jnode *n, struct jframe *f)
{
    struct jx_ctx *cx = E->cx;
    if (cx->st != HR_OK)
        return jv_undef();
    if (++E->depth > JX_MAX_EVAL_DEPTH) {
        jx_fail(cx, HR_ERR_LIMIT, "template recursion deeper than %d", JX_MAX_EVAL_DEPTH);
        E->depth--;
        return jv_undef();
    }
    cx->line = n->line;
    struct jv r = jv_undef();
    switch (n->kind) {
    case JN_CONST:
        r = n->val;
        break;
    case JN_NAME:
        r = lookup(cx, f, n->sym);
        break;
    case JN_LIST:
    case JN_TUPLE:
        r = jx_list(cx, n->n);
        for (size_t i = 0; i < n->n && cx->st == HR_OK; i++)
            r.l->items[i] = eval(E, n->kids[i], f);
        if (n->kind == JN_TUPLE)
            r.flags = JX_TUPLE;
        break;
    case JN_DICT: {
        struct jdict *d = jx_dict_new(cx, n->n);
        for (size_t i = 0; d && i < n->n && cx->st == HR_OK; i++) {
            struct jv k = eval(E, n->kids[2 * i], f);
            struct jv v = eval(E, n->kids[2 * i + 1], f);
            if (cx->st == HR_OK && (k.type == JV_LIST && !(k.flags & JX_TUPLE))) {
                jx_fail(cx, HR_ERR_INVALID, "unhashable type: 'list'");
                break;
            }
            if (cx->st == HR_OK && (k.type == JV_DICT || k.type == JV_UNDEF)) {
                if (k.type == JV_UNDEF)
                    jx_undef_fail(cx, k);
                else
                    jx_fail(cx, HR_ERR_INVALID, "unhashable type: 'dict'");
                break;
            }
            if (cx->st == HR_OK)
                jx_dict_set(cx, d, k, v);
        }
        if (d)
            r = (struct jv){.type = JV_DICT, .d = d};
        break;
    }
    case JN_ATTR: {
        struct jv obj = eval(E, n->a, f);
        if (cx->st == HR_OK) {
            cx->line = n->line;
            r = jx_getattr(cx, obj, n->name, strlen(n->name));
        }
        break;
    }
    case JN_ITEM: {
        struct jv obj = eval(E, n->a, f);
        struct jv key = eval(E, n->b, f);
        if (cx->st == HR_OK) {
            cx->line = n->line;
            r = jx_getitem(cx, obj, key);
        }
        break;
    }
    case JN_SLICE: {
        struct jv obj = eval(E, n->a, f);
        struct jv parts[3];
        for (int i = 0; i < 3; i++)
            parts[i] = n->kids[i] ? eval(E, n->kids[i], f) : jv_none();
        if (cx->st == HR_OK)
            r = do_slice(cx, obj, parts);
        break;
    }
    case JN_CALL: {
        struct jv fn = eval(E, n->a, f);
        struct jargs args;
        if (cx->st == HR_OK && eval_args(E, n, f, &args, NULL)) {
            cx->line = n->line;
            r = jx_call_value(cx, fn, &args);
        }
        break;
    }
    case JN_FILTER: {
        struct jv v = eval(E, n->a, f);
        if (cx->st == HR_OK)
            r = apply_filter(E, n, v, f);
        break;
    }
    case JN_TEST: {
        struct jv v = eval(E, n->a, f);
        struct jargs args;
        if (cx->st == HR_OK && eval_args(E, n, f, &args, NULL)) {
            cx->line = n->line;
            if (n->fn < 0) {
                jx_fail(cx, HR_ERR_INVALID, "No test named '%s'.", n->name);
                break;
            }
            bool t = jx_test_apply(cx, n->fn, v, &args);
            r = jv_bool(n->op ? !t : t);
        }
        break;
    }
    case JN_NEG:
    case JN_POS: {
        struct jv v = eval(E, n->a, f);
        if (cx->st != HR_OK)
            break;
        if (v.type == JV_INT || v.type == JV_BOOL) {
            int64_t i = num_i(v);
            if (n->kind == JN_NEG && i == INT64_MIN)
                r = overflow(cx);
            else
                r = jv_int(n->kind == JN_NEG ? -i : i);
        } else if (v.type == JV_FLOAT) {
            r = jv_float(n->kind == JN_NEG ? -v.f : v.f);
        } else if (v.type == JV_UNDEF) {
            jx_undef_fail(cx, v);
        } else {
            jx_fail(cx, HR_ERR_INVALID, "bad operand type for unary %c: '%s'",
                    n->kind == JN_NEG ? '-' : '+', jx_type_name(v));
        }
        break;
    }
    case JN_NOT:
        r = jv_bool(!jx_truthy(eval(E, n->a, f)));
        break;
    case JN_AND: {
        struct jv a = eval(E, n->a, f);
        r = jx_truthy(a) ? eval(E, n->b, f) : a;
        break;
    }
    case JN_OR: {
        struct jv a = eval(E, n->a, f);
        r = jx_truthy(a) ? a : eval(E, n->b, f);
        break;
    }
    case JN_BINOP: {
        struct jv a = eval(E, n->a, f);
        struct jv b = eval(E, n->b, f);
        if (cx->st == HR_OK) {
            cx->line = n->line;
            r = binop(cx, (enum jn_op)n->op, a, b);
        }
        break;
    }
    case JN_COMPARE: {
        struct jv left = eval(E, n->a, f);
        r = jv_bool(true);
        for (size_t i = 0; i < n->n && cx->st == HR_OK; i++) {
            struct jv right = eval(E, n->kids[i], f);
            if (cx->st != HR_OK)
                break;
            cx->line = n->line;
            bool ok;
            switch (n->ops[i]) {
            case JO_EQ:
                ok = jx_equal(left, right);
                break;
            case JO_NE:
                ok = !jx_equal(left, right);
                break;
            case JO_IN:
                ok = contains(cx, right, left);
                break;
            case JO_NOTIN:
                ok = !contains(cx, right, left);
                break;
            default: {
                int c = jx_compare(cx, left, right);
                ok = n->ops[i] == JO_LT ? c < 0 : n->ops[i] == JO_LE ? c <= 0
                   : n->ops[i] == JO_GT ? c > 0 : c >= 0;
            }
            }
            if (!ok) {
                r = jv_bool(false);
                break;
            }
            left = right;
        }
        break;
    }
    case JN_CONCAT: {
        struct jbuf b = {0};
        for (size_t i = 0; i < n->n && cx->st == HR_OK; i++) {
            struct jv v = eval(E, n->kids[i], f);
            if (cx->st == HR_OK)
                jx_to_str(cx, &b, v);
        }
        if (cx->st == HR_OK)
            r = jx_buf_str(cx, &b);
        break;
    }
    case JN_COND:
        if (jx_truthy(eval(E, n->a, f)))
            r = eval(E, n->b, f);
        else if (n->c)
            r = eval(E, n->c, f);
        break;
    default:
        jx_fail(cx, HR_ERR_INVALID, "internal: statement in expression position");
        break;
    }
    E->depth--;
    return cx->st == HR_OK ? r : jv_undef();
}

/* ---- statements ---- */

static bool assign(struct ectx *E, const struct jnode *target, struct jv v, struct jframe *f)
{
    struct jx_ctx *cx = E->cx;
    if (target->kind == JN_NAME)
        return frame_set(cx, f, target->sym, v);
    if (target->kind == JN_TUPLE) {
        struct jlist items;
        if (!jx_iter_list(cx, v, &items))
            return false;
        if (items.n != target->n) {
            if (items.n > target->n)
                jx_fail(cx, HR_ERR_INVALID, "too many values to unpack (expected %zu)",
                        target->n);
            else
                jx_fail(cx, HR_ERR_INVALID, "not enough values to unpack (expected %zu, got %zu)",
                        target->n, items.n);
            return false;
        }
        for (size_t i = 0; i < items.n; i++)
            if (!assign(E, target->kids[i], items.items[i], f))
                return false;
        return true;
    }
    /* ns.attr = v */
    struct jv ns = lookup(cx, f, target->a->sym);
    if (ns.type != JV_NS) {
        jx_fail(cx, HR_ERR_INVALID, "cannot assign attribute on non-namespace object");
        return false;
    }
    return jx_dict_set(cx, ns.d, jx_str_c(cx, target->name), v);
}

static void exec_for(struct ectx *E, const struct jnode *n, struct jframe *f)
{
    struct jx_ctx *cx = E->cx;
    struct jv seq = eval(E, n->b, f);
    struct jlist items;
    if (cx->st != HR_OK || !jx_iter_list(cx, seq, &items))
        return;
    struct jframe *it = frame_new(cx, f);
    if (!it)
        return;
    if (n->e) {
        /* `for x in xs if cond`: filter first, so loop.length and
         * loop.last count only the items that pass. */
        struct jv kept = jx_list(cx, items.n);
        if (cx->st != HR_OK)
            return;
        size_t k = 0;
        for (size_t i = 0; i < items.n; i++) {
            if (!jx_step(cx))
                return;
            it->n = 0;
            if (!assign(E, n->a, items.items[i], it))
                return;
            bool keep = jx_truthy(eval(E, n->e, it));
            if (cx->st != HR_OK)
                return;
            if (keep)
                kept.l->items[k++] = items.items[i];
        }
        items.items = kept.l->items;
        items.n = k;
    }
    struct jloop *L = jx_alloc(&cx->arena, sizeof(*L));
    if (!L) {
        jx_fail(cx, HR_ERR_LIMIT, "template used too much memory");
        return;
    }
    L->items = items;
    struct jv loopv = {.type = JV_LOOP, .loop = L};
    for (size_t i = 0; i < items.n; i++) {
        if (!jx_step(cx))
            return;
        it->n = 0;
        L->index0 = i;
        if (E->sym_loop >= 0 && !frame_set(cx, it, E->sym_loop, loopv))
            return;
        if (!assign(E, n->a, items.items[i], it))
            return;
        exec_body(E, n->c, it);
        if (cx->st != HR_OK)
            return;
        if (cx->loop_ctl == 1) {
            cx->loop_ctl = 0;
            break;
        }
        cx->loop_ctl = 0;
    }
    if (items.n == 0 && n->d) {
        struct jframe *ef = frame_new(cx, f);
        if (ef)
            exec_body(E, n->d, ef);
    }
}

static void exec_stmt(struct ectx *E, const struct jnode *n, struct jframe *f)
{
    struct jx_ctx *cx = E->cx;
    cx->line = n->line;
    switch (n->kind) {
    case JN_TEXT:
        emit(E, n->val.s->s, n->val.s->len);
        break;
    case JN_OUTPUT:
        emit_value(E, eval(E, n->a, f));
        break;
    case JN_IF:
        for (const struct jnode *c = n; c;) {
            if (c->kind != JN_IF) {
                exec_body(E, c, f);
                break;
            }
            bool t = jx_truthy(eval(E, c->a, f));
            if (cx->st != HR_OK)
                break;
            if (t) {
                exec_body(E, c->b, f);
                break;
            }
            c = c->c;
        }
        break;
    case JN_FOR:
        exec_for(E, n, f);
        break;
    case JN_SET: {
        struct jv v = eval(E, n->b, f);
        if (cx->st == HR_OK)
            assign(E, n->a, v, f);
        break;
    }
    case JN_SETBLOCK:
    case JN_FILTERBLOCK: {
        struct jbuf out = {0}, *saved = E->sink;
        E->sink = &out;
        exec_body(E, n->c, f);
        E->sink = saved;
        if (cx->st != HR_OK)
            break;
        struct jv v = apply_chain(E, n->b, jx_buf_str(cx, &out), f);
        if (cx->st != HR_OK)
            break;
        if (n->kind == JN_SETBLOCK)
            assign(E, n->a, v, f);
        else
            emit_value(E, v);
        break;
    }
    case JN_MACRO: {
        struct jmacro *m = jx_alloc(&cx->arena, sizeof(*m));
        if (!m) {
            jx_fail(cx, HR_ERR_LIMIT, "template used too much memory");
            break;
        }
        m->def = n;
        m->parent = cx->globals;
        m->caller = jv_undef();
        frame_set(cx, f, n->sym, (struct jv){.type = JV_MACRO, .m = m});
        break;
    }
    case JN_CALLBLOCK: {
        /* The body becomes `caller`, a macro that sees this frame. */
        struct jmacro *caller = jx_alloc(&cx->arena, sizeof(*caller));
        if (!caller) {
            jx_fail(cx, HR_ERR_LIMIT, "template used too much memory");
            break;
        }
        caller->def = n;
        caller->parent = f;
        caller->caller = jv_undef();
        const struct jnode *call = n->a;
        struct jv fn = eval(E, call->a, f);
        struct jargs args;
        if (cx->st != HR_OK || !eval_args(E, call, f, &args, NULL))
            break;
        if (fn.type != JV_MACRO) {
            jx_fail(cx, HR_ERR_INVALID, "{%% call %%} needs a macro, not '%s'", jx_type_name(fn));
            break;
        }
        struct jmacro bound = *fn.m;
        bound.caller = (struct jv){.type = JV_MACRO, .m = caller};
        emit_value(E, call_macro(E, &bound, &args));
        break;
    }
    case JN_BREAK:
        cx->loop_ctl = 1;
        break;
    case JN_CONTINUE:
        cx->loop_ctl = 2;
        break;
    case JN_BODY:
        exec_body(E, n, f);
        break;
    default:
        jx_fail(cx, HR_ERR_INVALID, "internal: expression in statement position");
        break;
    }
}

static void exec_body(struct ectx *E, const struct jnode *body, struct jframe *f)
{
    struct jx_ctx *cx = E->cx;
    if (++E->depth > JX_MAX_EVAL_DEPTH) {
        jx_fail(cx, HR_ERR_LIMIT, "template recursion deeper than %d", JX_MAX_EVAL_DEPTH);
        E->depth--;
        return;
    }
    for (size_t i = 0; i < body->n && cx->st == HR_OK && !cx->loop_ctl; i++)
        exec_stmt(E, body->kids[i], f);
    E->depth--;
}

/* ---- entry ---- */

struct jx_ctx_ext {
    struct jx_ctx cx;
    struct ectx E;
};

static struct ectx *ectx_of(struct jx_ctx *cx)
{
    return &((struct jx_ctx_ext *)cx)->E;
}

static int find_sym(const struct hr_jinja_template *t, const char *name)
{
    for (size_t i = 0; i < t->n_syms; i++)
        if (strcmp(t->syms[i], name) == 0)
            return (int)i;
    return -1;
}

enum hr_status hr_jinja_render(const struct hr_jinja_template *t, const json_t *context,
                               const struct hr_jinja_limits *limits, char **out, size_t *out_len,
                               char **raised, struct hr_err *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (raised)
        *raised = NULL;
    if (context && !json_is_object(context))
        return hr_err_set(err, HR_ERR_TYPE, "the template context must be a JSON object");
    struct jx_ctx_ext *x = calloc(1, sizeof(*x));
    if (!x)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory rendering the template");
    struct jx_ctx *cx = &x->cx;
    struct ectx *E = &x->E;
    cx->t = t;
    cx->err = err;
    cx->line = 1;
    cx->lim = limits ? *limits : t->limits;
    if (!cx->lim.max_call_depth)
        cx->lim.max_call_depth = 64;
    if (!cx->lim.max_iterations)
        cx->lim.max_iterations = 10000000;
    if (!cx->lim.max_output_bytes)
        cx->lim.max_output_bytes = (size_t)64 << 20;
    if (!cx->lim.max_memory_bytes)
        cx->lim.max_memory_bytes = (size_t)512 << 20;
    if (!cx->lim.max_ms)
        cx->lim.max_ms = 2000;
    cx->arena.limit_bytes = cx->lim.max_memory_bytes;
    cx->deadline = hr_now_seconds() + cx->lim.max_ms / 1000.0;
    E->cx = cx;
    E->sym_loop = find_sym(t, "loop");
    E->sym_caller = find_sym(t, "caller");
    E->sym_varargs = find_sym(t, "varargs");
    E->sym_kwargs = find_sym(t, "kwargs");
    struct jbuf sink = {0};
    E->sink = &sink;
    if (context) {
        struct jv c = jx_from_json(cx, context);
        if (cx->st == HR_OK)
            cx->context = c.d;
    }
    if (cx->st == HR_OK)
        cx->globals = frame_new(cx, NULL);
    if (cx->st == HR_OK)
        exec_body(E, t->root, cx->globals);
    enum hr_status st = cx->st;
    if (st == HR_OK) {
        *out = malloc(sink.n + 1);
        if (!*out) {
            st = hr_err_set(err, HR_ERR_NOMEM, "out of memory rendering the template");
        } else {
            if (sink.n)
                memcpy(*out, sink.p, sink.n);
            (*out)[sink.n] = '\0';
            if (out_len)
                *out_len = sink.n;
        }
    }
    if (raised)
        *raised = cx->raised;
    else
        free(cx->raised);
    jx_arena_free(&cx->arena);
    free(x);
    return st;
}
