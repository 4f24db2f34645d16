/*
 * jinja-filters.c - Jinja's built-in filters and tests, as jinja2/filters.py
 * and jinja2/tests.py (3.1) define them, plus transformers' `tojson`.
 *
 * Filters: abs, attr, batch, capitalize, center, count, default (d),
 * dictsort, escape (e, forceescape), first, float, format, indent, int,
 * items, join, last, length, list, lower, map, max, min, reject,
 * rejectattr, replace, reverse, round, safe, select, selectattr, sort,
 * string, striptags, sum, title, tojson, trim, truncate, unique, upper,
 * wordcount.
 *
 * Tests: boolean, callable, defined, divisibleby, eq (==, equalto),
 * escaped, even, false, filter, float, ge (>=), gt (>, greaterthan), in,
 * integer, iterable, le (<=), lower, lt (<, lessthan), mapping, ne (!=),
 * none, number, odd, sameas, sequence, string, test, true, undefined, upper.
 *
 * Where Jinja sorts or de-duplicates "case-insensitively" it lowercases
 * strings for the comparison only, and its sorts are stable (Python's
 * sorted), which the merge sort below also is. Autoescaping is off in
 * transformers' environment, so `safe` is the identity and `escape` just
 * replaces & < > " ' by entities.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja-impl.h"

static struct jv undef_hint(void) { return (struct jv){.type = JV_UNDEF, .u = NULL}; }

static bool need_defined(struct jx_ctx *cx, struct jv v)
{
    if (v.type == JV_UNDEF) {
        jx_undef_fail(cx, v);
        return false;
    }
    return true;
}

/* Jinja's make_attrgetter: "a.b.0" -> getitem for each part, numeric
 * parts as integers. */
static struct jv attr_path(struct jx_ctx *cx, struct jv v, struct jv attr)
{
    if (attr.type == JV_INT)
        return jx_getitem(cx, v, attr);
    if (attr.type != JV_STR) {
        jx_fail(cx, HR_ERR_INVALID, "attribute must be a string or an integer");
        return jv_undef();
    }
    const char *p = attr.s->s;
    size_t n = attr.s->len, i = 0;
    while (i <= n && cx->st == HR_OK) {
        size_t e = i;
        while (e < n && p[e] != '.')
            e++;
        bool digits = e > i;
        for (size_t k = i; k < e; k++)
            if (p[k] < '0' || p[k] > '9')
                digits = false;
        struct jv key = digits ? jv_int(strtoll(p + i, NULL, 10)) : jx_str(cx, p + i, e - i);
        v = jx_getitem(cx, v, key);
        i = e + 1;
        if (e >= n)
            break;
    }
    return v;
}

static struct jv str_of(struct jx_ctx *cx, struct jv v) { return jx_str_of(cx, v); }

/* A key for case-insensitive comparison: lowercased strings. */
static struct jv fold(struct jx_ctx *cx, struct jv v, bool case_sensitive)
{
    if (!case_sensitive && v.type == JV_STR)
        return jx_str_case(cx, v, 0);
    return v;
}

/* Stable merge sort of items by keys (parallel arrays). */
static void merge_sort(struct jx_ctx *cx, struct jv *items, struct jv *keys, size_t n,
                       struct jv *tmp_i, struct jv *tmp_k, bool reverse)
{
    if (n < 2 || cx->st != HR_OK)
        return;
    size_t h = n / 2;
    merge_sort(cx, items, keys, h, tmp_i, tmp_k, reverse);
    merge_sort(cx, items + h, keys + h, n - h, tmp_i, tmp_k, reverse);
    size_t a = 0, b = h, k = 0;
    while (a < h && b < n && cx->st == HR_OK) {
        int c = jx_compare(cx, keys[b], keys[a]);
        /* Take from the right only when strictly before (stability);
         * reversed sorts stay stable as Python's reverse=True does. */
        bool right = reverse ? c > 0 : c < 0;
        tmp_i[k] = right ? items[b] : items[a];
        tmp_k[k++] = right ? keys[b++] : keys[a++];
    }
    while (a < h)
        tmp_i[k] = items[a], tmp_k[k++] = keys[a++];
    while (b < n)
        tmp_i[k] = items[b], tmp_k[k++] = keys[b++];
    memcpy(items, tmp_i, n * sizeof(*items));
    memcpy(keys, tmp_k, n * sizeof(*keys));
}

static struct jv sorted(struct jx_ctx *cx, struct jlist in, const struct jv *attr,
                        bool case_sensitive, bool reverse, int by /* 0 item, 1 key, 2 value */)
{
    size_t n = in.n;
    struct jv out = jx_list(cx, n), keys = jx_list(cx, n), ti = jx_list(cx, n),
              tk = jx_list(cx, n);
    if (cx->st != HR_OK)
        return jv_undef();
    for (size_t i = 0; i < n && cx->st == HR_OK; i++) {
        struct jv it = in.items[i], k = it;
        if (by)
            k = it.l->items[by - 1];
        if (attr && attr->type != JV_NONE)
            k = attr_path(cx, k, *attr);
        out.l->items[i] = it;
        keys.l->items[i] = fold(cx, k, case_sensitive);
    }
    merge_sort(cx, out.l->items, keys.l->items, n, ti.l->items, tk.l->items, reverse);
    return cx->st == HR_OK ? out : jv_undef();
}

static bool arg_bool(const struct jv *v, bool dflt) { return v ? jx_truthy(*v) : dflt; }

static struct jv list_of(struct jx_ctx *cx, struct jv v)
{
    struct jlist l;
    if (!jx_iter_list(cx, v, &l))
        return jv_undef();
    struct jv out = jx_list(cx, l.n);
    if (cx->st != HR_OK)
        return jv_undef();
    if (l.n)
        memcpy(out.l->items, l.items, l.n * sizeof(struct jv));
    return out;
}

static struct jv do_length(struct jx_ctx *cx, struct jv v)
{
    switch (v.type) {
    case JV_UNDEF:
        return jv_int(0);
    case JV_STR:
        return jv_int((int64_t)jx_utf8_len(v.s->s, v.s->len));
    case JV_LIST:
        return jv_int((int64_t)v.l->n);
    case JV_DICT:
    case JV_NS:
        return jv_int((int64_t)v.d->n);
    default:
        jx_fail(cx, HR_ERR_INVALID, "object of type '%s' has no len()", jx_type_name(v));
        return jv_undef();
    }
}

static struct jv do_tojson(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    static const char *const kw[] = {"ensure_ascii", "indent", "separators", "sort_keys", NULL};
    if (!jx_args_check(cx, "tojson", a, 4, kw))
        return jv_undef();
    const struct jv *ea = jx_arg(a, 0, "ensure_ascii"), *ind = jx_arg(a, 1, "indent"),
                    *sep = jx_arg(a, 2, "separators"), *sk = jx_arg(a, 3, "sort_keys");
    struct jx_json_opts o = {.item_sep = ", ", .key_sep = ": "};
    o.ensure_ascii = arg_bool(ea, false);
    o.sort_keys = arg_bool(sk, false);
    char spaces[256];
    if (ind && ind->type != JV_NONE) {
        if (ind->type == JV_STR) {
            o.indent = ind->s->s;
            o.indent_len = ind->s->len;
        } else if (ind->type == JV_INT) {
            int64_t w = ind->i < 0 ? 0 : ind->i > 255 ? 255 : ind->i;
            memset(spaces, ' ', (size_t)w);
            o.indent = spaces;
            o.indent_len = (size_t)w;
        } else {
            jx_fail(cx, HR_ERR_INVALID, "tojson indent must be an integer or a string");
            return jv_undef();
        }
        o.item_sep = ",";
    }
    if (sep && sep->type != JV_NONE) {
        if (sep->type != JV_LIST || sep->l->n != 2 || sep->l->items[0].type != JV_STR ||
            sep->l->items[1].type != JV_STR) {
            jx_fail(cx, HR_ERR_INVALID, "tojson separators must be a pair of strings");
            return jv_undef();
        }
        struct jbuf b1 = {0}, b2 = {0};
        if (!jx_to_str(cx, &b1, sep->l->items[0]) || !jx_buf_putc(cx, &b1, '\0') ||
            !jx_to_str(cx, &b2, sep->l->items[1]) || !jx_buf_putc(cx, &b2, '\0'))
            return jv_undef();
        o.item_sep = b1.p;
        o.key_sep = b2.p;
    }
    struct jbuf b = {0};
    if (!jx_to_json(cx, &b, v, &o, 0))
        return jv_undef();
    return jx_buf_str(cx, &b);
}

static struct jv do_indent(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    static const char *const kw[] = {"width", "first", "blank", NULL};
    if (!jx_args_check(cx, "indent", a, 3, kw))
        return jv_undef();
    const struct jv *w = jx_arg(a, 0, "width");
    bool first = arg_bool(jx_arg(a, 1, "first"), false), blank = arg_bool(jx_arg(a, 2, "blank"), false);
    struct jv ind;
    if (!w)
        ind = jx_str(cx, "    ", 4);
    else if (w->type == JV_STR)
        ind = *w;
    else if (w->type == JV_INT) {
        int64_t k = w->i < 0 ? 0 : w->i > 1000 ? 1000 : w->i;
        char sp[1000];
        memset(sp, ' ', (size_t)k);
        ind = jx_str(cx, sp, (size_t)k);
    } else {
        jx_fail(cx, HR_ERR_INVALID, "indent width must be an integer or a string");
        return jv_undef();
    }
    struct jv s = str_of(cx, v);
    /* Jinja appends "\n" so that splitlines() keeps a trailing empty line. */
    struct jbuf sb = {0};
    if (!jx_buf_put(cx, &sb, s.s->s, s.s->len) || !jx_buf_putc(cx, &sb, '\n'))
        return jv_undef();
    struct jv lines = jx_str_splitlines(cx, jx_buf_str(cx, &sb), false);
    if (cx->st != HR_OK)
        return jv_undef();
    struct jbuf b = {0};
    if (first && !jx_buf_put(cx, &b, ind.s->s, ind.s->len))
        return jv_undef();
    for (size_t i = 0; i < lines.l->n; i++) {
        struct jv line = lines.l->items[i];
        if (i) {
            if (!jx_buf_putc(cx, &b, '\n'))
                return jv_undef();
            if ((blank || line.s->len) && !jx_buf_put(cx, &b, ind.s->s, ind.s->len))
                return jv_undef();
        }
        if (!jx_buf_put(cx, &b, line.s->s, line.s->len))
            return jv_undef();
    }
    return jx_buf_str(cx, &b);
}

/* int(): Python's int() of a string accepts surrounding whitespace,
 * a sign and underscores between digits. */
static bool parse_int(const char *s, size_t n, int base, int64_t *out)
{
    size_t i = 0;
    while (i < n && jx_cp_is_space((unsigned char)s[i]))
        i++;
    while (n > i && jx_cp_is_space((unsigned char)s[n - 1]))
        n--;
    bool neg = false;
    if (i < n && (s[i] == '+' || s[i] == '-'))
        neg = s[i++] == '-';
    if (base == 16 && i + 1 < n && s[i] == '0' && (s[i + 1] | 32) == 'x')
        i += 2;
    if (i >= n)
        return false;
    __int128 v = 0;
    bool prev_digit = false;
    for (; i < n; i++) {
        char c = s[i];
        if (c == '_' && prev_digit && i + 1 < n && s[i + 1] != '_') {
            prev_digit = false;
            continue;
        }
        int d = c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'z' ? (c | 32) - 'a' + 10 : 99;
        if (d >= base)
            return false;
        v = v * base + d;
        if (v > (__int128)INT64_MAX + 1)
            return false;
        prev_digit = true;
    }
    if (!neg && v > INT64_MAX)
        return false;
    *out = neg ? (int64_t)-v : (int64_t)v;
    return true;
}

static bool parse_float(const char *s, size_t n, double *out)
{
    char buf[128];
    size_t i = 0, k = 0;
    while (i < n && jx_cp_is_space((unsigned char)s[i]))
        i++;
    while (n > i && jx_cp_is_space((unsigned char)s[n - 1]))
        n--;
    if (n - i == 0 || n - i >= sizeof(buf))
        return false;
    for (; i < n; i++)
        if (s[i] != '_')
            buf[k++] = s[i];
    buf[k] = '\0';
    /* strtod also reads hex floats, which Python's float() refuses. */
    for (size_t j = 0; j < k; j++)
        if ((buf[j] | 32) == 'x')
            return false;
    char *end;
    *out = strtod(buf, &end);
    return *end == '\0';
}

static struct jv do_int(struct jv v, const struct jargs *a)
{
    const struct jv *d = jx_arg(a, 0, "default"), *b = jx_arg(a, 1, "base");
    int base = b && b->type == JV_INT ? (int)b->i : 10;
    struct jv dflt = d ? *d : jv_int(0);
    int64_t i;
    double f;
    switch (v.type) {
    case JV_INT:
        return v;
    case JV_BOOL:
        return jv_int(v.b);
    case JV_FLOAT:
        if (isnan(v.f) || isinf(v.f) || fabs(v.f) >= 9.2e18)
            return dflt;
        return jv_int((int64_t)v.f);
    case JV_STR:
        if (base >= 2 && base <= 36 && parse_int(v.s->s, v.s->len, base, &i))
            return jv_int(i);
        if (parse_float(v.s->s, v.s->len, &f) && !isnan(f) && !isinf(f) && fabs(f) < 9.2e18)
            return jv_int((int64_t)f);
        return dflt;
    default:
        return dflt;
    }
}

static struct jv do_float(struct jv v, const struct jargs *a)
{
    const struct jv *d = jx_arg(a, 0, "default");
    struct jv dflt = d ? *d : jv_float(0.0);
    double f;
    switch (v.type) {
    case JV_INT:
        return jv_float((double)v.i);
    case JV_BOOL:
        return jv_float(v.b);
    case JV_FLOAT:
        return v;
    case JV_STR:
        if (parse_float(v.s->s, v.s->len, &f))
            return jv_float(f);
        {
            /* Python also reads "nan", "inf", "infinity" in any case. */
            char low[16] = {0};
            size_t n = v.s->len < 15 ? v.s->len : 15;
            for (size_t i = 0; i < n; i++)
                low[i] = (char)(v.s->s[i] | 32);
            if (!strcmp(low, "nan") || !strcmp(low, "+nan") || !strcmp(low, "-nan"))
                return jv_float(NAN);
            if (!strcmp(low, "inf") || !strcmp(low, "+inf") || !strcmp(low, "infinity"))
                return jv_float(INFINITY);
            if (!strcmp(low, "-inf") || !strcmp(low, "-infinity"))
                return jv_float(-INFINITY);
        }
        return dflt;
    default:
        return dflt;
    }
}

/* Python's round(x, n) for floats: correctly rounded, ties to even on the
 * exact binary value, which is what printf's %.*f computes. */
static struct jv do_round(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    int64_t prec = 0;
    const struct jv *p = jx_arg(a, 0, "precision"), *m = jx_arg(a, 1, "method");
    if (p && p->type == JV_INT)
        prec = p->i;
    const char *method = m && m->type == JV_STR ? m->s->s : "common";
    if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor")) {
        jx_fail(cx, HR_ERR_INVALID, "method must be common, ceil or floor");
        return jv_undef();
    }
    if (v.type == JV_INT || v.type == JV_BOOL) {
        if (!strcmp(method, "common"))
            return v.type == JV_INT ? v : jv_int(v.b);
        v = jv_float(v.type == JV_INT ? (double)v.i : v.b);
    }
    if (v.type != JV_FLOAT) {
        if (v.type == JV_UNDEF)
            jx_undef_fail(cx, v);
        else
            jx_fail(cx, HR_ERR_INVALID, "type %s doesn't define __round__ method",
                    jx_type_name(v));
        return jv_undef();
    }
    if (prec > 300)
        prec = 300;
    if (prec < -300)
        prec = -300;
    if (strcmp(method, "common")) {
        double scale = pow(10.0, (double)prec);
        double r = !strcmp(method, "ceil") ? ceil(v.f * scale) : floor(v.f * scale);
        return jv_float(r / scale);
    }
    if (isnan(v.f) || isinf(v.f))
        return v;
    if (prec >= 0) {
        char buf[400];
        snprintf(buf, sizeof(buf), "%.*f", (int)prec, v.f);
        return jv_float(strtod(buf, NULL));
    }
    double scale = pow(10.0, (double)-prec);
    return jv_float(nearbyint(v.f / scale) * scale);
}

static struct jv do_join(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    const struct jv *d = jx_arg(a, 0, "d"), *attr = jx_arg(a, 1, "attribute");
    struct jlist items;
    if (!jx_iter_list(cx, v, &items))
        return jv_undef();
    struct jv sep = d ? str_of(cx, *d) : jx_str(cx, "", 0);
    struct jbuf b = {0};
    for (size_t i = 0; i < items.n && cx->st == HR_OK; i++) {
        struct jv it = items.items[i];
        if (attr && attr->type != JV_NONE)
            it = attr_path(cx, it, *attr);
        if (i)
            jx_buf_put(cx, &b, sep.s->s, sep.s->len);
        jx_to_str(cx, &b, it);
    }
    return cx->st == HR_OK ? jx_buf_str(cx, &b) : jv_undef();
}

/* map / select / reject / selectattr / rejectattr. */
static struct jv do_select(struct jx_ctx *cx, struct jv v, const struct jargs *a, bool attr_mode,
                           bool reject)
{
    struct jlist items;
    if (!jx_iter_list(cx, v, &items))
        return jv_undef();
    size_t skip = attr_mode ? 1 : 0;
    const struct jv *attr = attr_mode ? jx_arg(a, 0, NULL) : NULL;
    if (attr_mode && !attr) {
        jx_fail(cx, HR_ERR_INVALID, "Missing parameter for attribute name");
        return jv_undef();
    }
    const struct jv *test = jx_arg(a, skip, NULL);
    if (test && test->type != JV_STR) {
        jx_fail(cx, HR_ERR_INVALID, "test name must be a string");
        return jv_undef();
    }
    struct jargs rest = {.pos = a->n_pos > skip + 1 ? a->pos + skip + 1 : NULL,
                         .n_pos = a->n_pos > skip + 1 ? a->n_pos - skip - 1 : 0,
                         .kw_names = a->kw_names, .kw = a->kw, .n_kw = a->n_kw};
    struct jv out = jx_list(cx, items.n);
    size_t k = 0;
    for (size_t i = 0; i < items.n && cx->st == HR_OK; i++) {
        if (!jx_step(cx))
            break;
        struct jv it = items.items[i], x = attr ? attr_path(cx, it, *attr) : it;
        bool t = test ? jx_test_by_name(cx, test->s->s, x, &rest) : jx_truthy(x);
        if (cx->st == HR_OK && t != reject)
            out.l->items[k++] = it;
    }
    if (cx->st != HR_OK)
        return jv_undef();
    out.l->n = k;
    return out;
}

static struct jv do_map(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    struct jlist items;
    if (!jx_iter_list(cx, v, &items))
        return jv_undef();
    struct jv out = jx_list(cx, items.n);
    const struct jv *attr = NULL, *dflt = NULL;
    for (size_t k = 0; k < a->n_kw; k++) {
        if (!strcmp(a->kw_names[k], "attribute"))
            attr = &a->kw[k];
        else if (!strcmp(a->kw_names[k], "default"))
            dflt = &a->kw[k];
    }
    if (!attr && (a->n_pos == 0 || a->pos[0].type != JV_STR)) {
        if (a->n_pos == 0 && a->n_kw == 0)
            return out.type == JV_LIST ? (out.l->n = 0, out) : jv_undef();
        jx_fail(cx, HR_ERR_INVALID, "map needs a filter name or attribute=");
        return jv_undef();
    }
    struct jargs rest = {.pos = a->n_pos > 1 ? a->pos + 1 : NULL,
                         .n_pos = a->n_pos > 1 ? a->n_pos - 1 : 0,
                         .kw_names = a->kw_names, .kw = a->kw, .n_kw = attr ? 0 : a->n_kw};
    for (size_t i = 0; i < items.n && cx->st == HR_OK; i++) {
        if (!jx_step(cx))
            break;
        struct jv it = items.items[i];
        if (attr) {
            struct jv x = attr_path(cx, it, *attr);
            out.l->items[i] = x.type == JV_UNDEF && dflt ? *dflt : x;
        } else {
            out.l->items[i] = jx_filter_by_name(cx, a->pos[0].s->s, it, &rest);
        }
    }
    return cx->st == HR_OK ? out : jv_undef();
}

static struct jv do_unique(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    bool cs = arg_bool(jx_arg(a, 0, "case_sensitive"), false);
    const struct jv *attr = jx_arg(a, 1, "attribute");
    struct jlist items;
    if (!jx_iter_list(cx, v, &items))
        return jv_undef();
    struct jv out = jx_list(cx, items.n), seen = jx_list(cx, items.n);
    size_t k = 0;
    for (size_t i = 0; i < items.n && cx->st == HR_OK; i++) {
        struct jv it = items.items[i];
        struct jv key = fold(cx, attr && attr->type != JV_NONE ? attr_path(cx, it, *attr) : it, cs);
        bool dup = false;
        for (size_t j = 0; j < k && !dup; j++)
            dup = jx_equal(seen.l->items[j], key);
        if (!dup) {
            seen.l->items[k] = key;
            out.l->items[k++] = it;
        }
    }
    if (cx->st != HR_OK)
        return jv_undef();
    out.l->n = k;
    return out;
}

static struct jv do_minmax(struct jx_ctx *cx, struct jv v, const struct jargs *a, bool max)
{
    bool cs = arg_bool(jx_arg(a, 0, "case_sensitive"), false);
    const struct jv *attr = jx_arg(a, 1, "attribute");
    struct jlist items;
    if (!jx_iter_list(cx, v, &items))
        return jv_undef();
    if (items.n == 0)
        return undef_hint();
    size_t best = 0;
    struct jv bk = fold(cx, attr && attr->type != JV_NONE ? attr_path(cx, items.items[0], *attr) : items.items[0], cs);
    for (size_t i = 1; i < items.n && cx->st == HR_OK; i++) {
        struct jv k = fold(cx, attr && attr->type != JV_NONE ? attr_path(cx, items.items[i], *attr) : items.items[i], cs);
        int c = jx_compare(cx, k, bk);
        if (max ? c > 0 : c < 0)
            best = i, bk = k;
    }
    return cx->st == HR_OK ? items.items[best] : jv_undef();
}

static struct jv do_sum(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    const struct jv *attr = jx_arg(a, 0, "attribute"), *start = jx_arg(a, 1, "start");
    struct jlist items;
    if (!jx_iter_list(cx, v, &items))
        return jv_undef();
    struct jv acc = start ? *start : jv_int(0);
    for (size_t i = 0; i < items.n && cx->st == HR_OK; i++) {
        struct jv x = attr && attr->type != JV_NONE ? attr_path(cx, items.items[i], *attr) : items.items[i];
        bool fl = acc.type == JV_FLOAT || x.type == JV_FLOAT;
        if ((acc.type != JV_INT && acc.type != JV_FLOAT && acc.type != JV_BOOL) ||
            (x.type != JV_INT && x.type != JV_FLOAT && x.type != JV_BOOL)) {
            jx_fail(cx, HR_ERR_INVALID, "unsupported operand type(s) for +: '%s' and '%s'",
                    jx_type_name(acc), jx_type_name(x));
            return jv_undef();
        }
        double fa = acc.type == JV_FLOAT ? acc.f : acc.type == JV_INT ? (double)acc.i : acc.b;
        double fx = x.type == JV_FLOAT ? x.f : x.type == JV_INT ? (double)x.i : x.b;
        if (fl) {
            acc = jv_float(fa + fx);
        } else {
            int64_t r, ia = acc.type == JV_INT ? acc.i : acc.b, ix = x.type == JV_INT ? x.i : x.b;
            if (__builtin_add_overflow(ia, ix, &r)) {
                jx_fail(cx, HR_ERR_RANGE, "integer overflow (beyond 64 bits)");
                return jv_undef();
            }
            acc = jv_int(r);
        }
    }
    return acc;
}

static struct jv do_escape(struct jx_ctx *cx, struct jv v)
{
    struct jv s = str_of(cx, v);
    struct jbuf b = {0};
    for (size_t i = 0; i < s.s->len && cx->st == HR_OK; i++) {
        char c = s.s->s[i];
        const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;"
                      : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
        if (e)
            jx_buf_put(cx, &b, e, strlen(e));
        else
            jx_buf_putc(cx, &b, c);
    }
    return cx->st == HR_OK ? jx_buf_str(cx, &b) : jv_undef();
}

/* Jinja's title filter: each chunk between [-\s({[<]+ separators gets an
 * upper first character and lower rest. */
static struct jv do_title(struct jx_ctx *cx, struct jv v)
{
    struct jv s = str_of(cx, v);
    struct jbuf b = {0};
    const char *p = s.s->s;
    size_t n = s.s->len, i = 0;
    bool start = true;
    while (i < n && cx->st == HR_OK) {
        size_t j = i;
        uint32_t c = jx_utf8_next(p, n, &j);
        bool sep = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || jx_cp_is_space(c);
        struct jv ch = jx_str(cx, p + i, j - i);
        struct jv mapped = sep ? ch : jx_str_case(cx, ch, start ? 1 : 0);
        jx_buf_put(cx, &b, mapped.s->s, mapped.s->len);
        start = sep;
        i = j;
    }
    return cx->st == HR_OK ? jx_buf_str(cx, &b) : jv_undef();
}

static struct jv do_wordcount(struct jx_ctx *cx, struct jv v)
{
    struct jv s = str_of(cx, v);
    const char *p = s.s->s;
    size_t n = s.s->len, i = 0;
    int64_t words = 0;
    bool in_word = false;
    while (i < n) {
        uint32_t c = jx_utf8_next(p, n, &i);
        /* \w: letters, digits, underscore (of any script). */
        bool w = c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z') ||
                 (c >= 0xc0 && c != 0xd7 && c != 0xf7 && !jx_cp_is_space(c) &&
                  !(c >= 0x2000 && c <= 0x2bff) && !(c >= 0x3000 && c <= 0x3003));
        if (w && !in_word)
            words++;
        in_word = w;
    }
    return jv_int(words);
}

static struct jv do_center(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    struct jv s = str_of(cx, v);
    const struct jv *w = jx_arg(a, 0, "width");
    int64_t width = w && w->type == JV_INT ? w->i : 80;
    int64_t len = (int64_t)jx_utf8_len(s.s->s, s.s->len);
    if (width <= len)
        return s;
    if (width > 1000000)
        width = 1000000;
    int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
    struct jbuf b = {0};
    for (int64_t i = 0; i < left; i++)
        jx_buf_putc(cx, &b, ' ');
    jx_buf_put(cx, &b, s.s->s, s.s->len);
    for (int64_t i = left; i < pad; i++)
        jx_buf_putc(cx, &b, ' ');
    return cx->st == HR_OK ? jx_buf_str(cx, &b) : jv_undef();
}

static struct jv do_striptags(struct jx_ctx *cx, struct jv v)
{
    struct jv s = str_of(cx, v);
    struct jbuf b = {0};
    const char *p = s.s->s;
    size_t n = s.s->len;
    bool space = false, any = false;
    for (size_t i = 0; i < n && cx->st == HR_OK; i++) {
        if (p[i] == '<') {
            const char *e = memchr(p + i, '>', n - i);
            if (e) {
                i = (size_t)(e - p);
                continue;
            }
        }
        if (p[i] == ' ' || p[i] == '\t' || p[i] == '\n' || p[i] == '\r' || p[i] == '\f' ||
            p[i] == '\v') {
            space = true;
            continue;
        }
        if (space && any)
            jx_buf_putc(cx, &b, ' ');
        space = false;
        any = true;
        jx_buf_putc(cx, &b, p[i]);
    }
    return cx->st == HR_OK ? jx_buf_str(cx, &b) : jv_undef();
}

static struct jv do_truncate(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    struct jv s = str_of(cx, v);
    const struct jv *lv = jx_arg(a, 0, "length"), *kw = jx_arg(a, 1, "killwords"),
                    *ev = jx_arg(a, 2, "end"), *lw = jx_arg(a, 3, "leeway");
    int64_t length = lv && lv->type == JV_INT ? lv->i : 255;
    int64_t leeway = lw && lw->type == JV_INT ? lw->i : 5;
    struct jv end = ev ? str_of(cx, *ev) : jx_str(cx, "...", 3);
    int64_t n = (int64_t)jx_utf8_len(s.s->s, s.s->len), el = (int64_t)jx_utf8_len(end.s->s, end.s->len);
    if (n <= length + leeway)
        return s;
    int64_t keep = length - el < 0 ? 0 : length - el;
    size_t off = jx_utf8_offset(s.s->s, s.s->len, (size_t)keep);
    size_t cut = off;
    if (!arg_bool(kw, false)) {
        /* rsplit(" ", 1)[0] */
        for (size_t k = off; k-- > 0;)
            if (s.s->s[k] == ' ') {
                cut = k;
                break;
            }
    }
    struct jbuf b = {0};
    jx_buf_put(cx, &b, s.s->s, cut);
    jx_buf_put(cx, &b, end.s->s, end.s->len);
    return cx->st == HR_OK ? jx_buf_str(cx, &b) : jv_undef();
}

static struct jv do_batch(struct jx_ctx *cx, struct jv v, const struct jargs *a)
{
    const struct jv *lc = jx_arg(a, 0, "linecount"), *fill = jx_arg(a, 1, "fill_with");
    if (!lc || lc->type != JV_INT || lc->i <= 0) {
        jx_fail(cx, HR_ERR_INVALID, "batch needs a positive line count");
        return jv_undef();
    }
    struct jlist items;
    if (!jx_iter_list(cx, v, &items))
        return jv_undef();
    size_t per = (size_t)lc->i, n_b = (items.n + per - 1) / per;
    struct jv out = jx_list(cx, n_b);
    for (size_t i = 0; i < n_b && cx->st == HR_OK; i++) {
        size_t len = items.n - i * per < per ? items.n - i * per : per;
        struct jv row = jx_list(cx, fill && fill->type != JV_NONE ? per : len);
        if (cx->st != HR_OK)
            break;
        for (size_t k = 0; k < row.l->n; k++)
            row.l->items[k] = k < len ? items.items[i * per + k] : *fill;
        out.l->items[i] = row;
    }
    return cx->st == HR_OK ? out : jv_undef();
}

/* ---- the filter table ---- */

enum {
    F_ABS, F_ATTR, F_BATCH, F_CAPITALIZE, F_CENTER, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E,
    F_ESCAPE, F_FIRST, F_FLOAT, F_FORCEESCAPE, F_FORMAT, F_INDENT, F_INT, F_ITEMS, F_JOIN,
    F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE,
    F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT, F_STRING, F_STRIPTAGS, F_SUM,
    F_TITLE, F_TOJSON, F_TRIM, F_TRUNCATE, F_UNIQUE, F_UPPER, F_WORDCOUNT, F_COUNT_ALL,
};

static const char *const g_filters[F_COUNT_ALL] = {
    "abs", "attr", "batch", "capitalize", "center", "count", "d", "default", "dictsort", "e",
    "escape", "first", "float", "forceescape", "format", "indent", "int", "items", "join",
    "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr", "replace",
    "reverse", "round", "safe", "select", "selectattr", "sort", "string", "striptags", "sum",
    "title", "tojson", "trim", "truncate", "unique", "upper", "wordcount",
};

int jx_filter_find(const char *name)
{
    for (int i = 0; i < F_COUNT_ALL; i++)
        if (strcmp(g_filters[i], name) == 0)
            return i;
    return -1;
}

const char *jx_filter_name(int id) { return id >= 0 && id < F_COUNT_ALL ? g_filters[id] : "?"; }

struct jv jx_filter_apply(struct jx_ctx *cx, int id, struct jv v, const struct jargs *a)
{
    if (cx->st != HR_OK)
        return jv_undef();
    switch (id) {
    case F_ABS:
        if (v.type == JV_INT) {
            if (v.i == INT64_MIN) {
                jx_fail(cx, HR_ERR_RANGE, "integer overflow (beyond 64 bits)");
                return jv_undef();
            }
            return jv_int(v.i < 0 ? -v.i : v.i);
        }
        if (v.type == JV_BOOL)
            return jv_int(v.b);
        if (v.type == JV_FLOAT)
            return jv_float(fabs(v.f));
        if (!need_defined(cx, v))
            return jv_undef();
        jx_fail(cx, HR_ERR_INVALID, "bad operand type for abs(): '%s'", jx_type_name(v));
        return jv_undef();
    case F_ATTR: {
        const struct jv *n = jx_arg(a, 0, "name");
        if (!n || n->type != JV_STR) {
            jx_fail(cx, HR_ERR_INVALID, "attr needs a name");
            return jv_undef();
        }
        if (v.type == JV_DICT) /* attr() is getattr only: no item lookup */
            return jx_method_find(v, n->s->s) >= 0 ? jx_getattr(cx, v, n->s->s, n->s->len)
                                                  : jx_undef_attr(cx, v, n->s->s, false);
        return jx_getattr(cx, v, n->s->s, n->s->len);
    }
    case F_BATCH:
        return do_batch(cx, v, a);
    case F_CAPITALIZE:
        return jx_str_case(cx, str_of(cx, v), 3);
    case F_CENTER:
        return do_center(cx, v, a);
    case F_COUNT:
    case F_LENGTH:
        return do_length(cx, v);
    case F_D:
    case F_DEFAULT: {
        const struct jv *d = jx_arg(a, 0, "default_value");
        bool boolean = arg_bool(jx_arg(a, 1, "boolean"), false);
        if (v.type == JV_UNDEF || (boolean && !jx_truthy(v)))
            return d ? *d : jx_str(cx, "", 0);
        return v;
    }
    case F_DICTSORT: {
        if (v.type != JV_DICT && v.type != JV_NS) {
            if (!need_defined(cx, v))
                return jv_undef();
            jx_fail(cx, HR_ERR_INVALID, "'%s' object has no attribute 'items'", jx_type_name(v));
            return jv_undef();
        }
        bool cs = arg_bool(jx_arg(a, 0, "case_sensitive"), false);
        const struct jv *by = jx_arg(a, 1, "by");
        bool rev = arg_bool(jx_arg(a, 2, "reverse"), false);
        int pos = 1;
        if (by && by->type == JV_STR) {
            if (!strcmp(by->s->s, "value"))
                pos = 2;
            else if (strcmp(by->s->s, "key")) {
                jx_fail(cx, HR_ERR_INVALID, "You can only sort by either \"key\" or \"value\"");
                return jv_undef();
            }
        }
        struct jv pairs = jx_list(cx, v.d->n);
        for (size_t i = 0; i < v.d->n && cx->st == HR_OK; i++) {
            struct jv p = jx_list(cx, 2);
            if (cx->st != HR_OK)
                break;
            p.l->items[0] = v.d->keys[i];
            p.l->items[1] = v.d->vals[i];
            p.flags = JX_TUPLE;
            pairs.l->items[i] = p;
        }
        if (cx->st != HR_OK)
            return jv_undef();
        return sorted(cx, *pairs.l, NULL, cs, rev, pos);
    }
    case F_E:
    case F_ESCAPE:
    case F_FORCEESCAPE:
        return do_escape(cx, v);
    case F_FIRST:
    case F_LAST: {
        struct jlist l;
        if (!jx_iter_list(cx, v, &l))
            return jv_undef();
        if (l.n == 0)
            return undef_hint();
        return l.items[id == F_FIRST ? 0 : l.n - 1];
    }
    case F_FLOAT:
        return do_float(v, a);
    case F_FORMAT: {
        if (a->n_pos && a->n_kw) {
            jx_fail(cx, HR_ERR_INVALID, "can't handle positional and keyword arguments at the same time");
            return jv_undef();
        }
        struct jv args;
        if (a->n_kw) {
            struct jdict *d = jx_dict_new(cx, a->n_kw);
            for (size_t i = 0; d && i < a->n_kw; i++)
                jx_dict_set(cx, d, jx_str_c(cx, a->kw_names[i]), a->kw[i]);
            if (!d)
                return jv_undef();
            args = (struct jv){.type = JV_DICT, .d = d};
        } else {
            args = jx_list(cx, a->n_pos);
            if (cx->st != HR_OK)
                return jv_undef();
            if (a->n_pos)
                memcpy(args.l->items, a->pos, a->n_pos * sizeof(struct jv));
            args.flags = JX_TUPLE;
        }
        return jx_format_percent(cx, str_of(cx, v), args);
    }
    case F_INDENT:
        return do_indent(cx, v, a);
    case F_INT:
        return do_int(v, a);
    case F_ITEMS: {
        if (v.type == JV_UNDEF)
            return jx_list(cx, 0);
        if (v.type != JV_DICT) {
            jx_fail(cx, HR_ERR_INVALID, "Can only get item pairs from a mapping.");
            return jv_undef();
        }
        struct jv out = jx_list(cx, v.d->n);
        for (size_t i = 0; i < v.d->n && cx->st == HR_OK; i++) {
            struct jv p = jx_list(cx, 2);
            if (cx->st != HR_OK)
                break;
            p.l->items[0] = v.d->keys[i];
            p.l->items[1] = v.d->vals[i];
            p.flags = JX_TUPLE;
            out.l->items[i] = p;
        }
        return cx->st == HR_OK ? out : jv_undef();
    }
    case F_JOIN:
        return do_join(cx, v, a);
    case F_LIST:
        return list_of(cx, v);
    case F_LOWER:
        return jx_str_case(cx, str_of(cx, v), 0);
    case F_UPPER:
        return jx_str_case(cx, str_of(cx, v), 1);
    case F_MAP:
        return do_map(cx, v, a);
    case F_MAX:
    case F_MIN:
        return do_minmax(cx, v, a, id == F_MAX);
    case F_REJECT:
    case F_SELECT:
        return do_select(cx, v, a, false, id == F_REJECT);
    case F_REJECTATTR:
    case F_SELECTATTR:
        return do_select(cx, v, a, true, id == F_REJECTATTR);
    case F_REPLACE: {
        struct jv s = str_of(cx, v);
        const struct jv *o = jx_arg(a, 0, "old"), *nw = jx_arg(a, 1, "new"),
                        *c = jx_arg(a, 2, "count");
        if (!o || !nw) {
            jx_fail(cx, HR_ERR_INVALID, "replace needs old and new");
            return jv_undef();
        }
        int64_t count = c && c->type == JV_INT ? c->i : -1;
        return jx_str_replace(cx, s, str_of(cx, *o), str_of(cx, *nw), count);
    }
    case F_REVERSE: {
        if (v.type == JV_STR) {
            struct jlist chars;
            if (!jx_iter_list(cx, v, &chars))
                return jv_undef();
            struct jbuf b = {0};
            for (size_t i = chars.n; i-- > 0 && cx->st == HR_OK;)
                jx_buf_put(cx, &b, chars.items[i].s->s, chars.items[i].s->len);
            return cx->st == HR_OK ? jx_buf_str(cx, &b) : jv_undef();
        }
        struct jv l = list_of(cx, v);
        if (cx->st != HR_OK)
            return jv_undef();
        for (size_t i = 0, j = l.l->n ? l.l->n - 1 : 0; i < j; i++, j--) {
            struct jv t = l.l->items[i];
            l.l->items[i] = l.l->items[j];
            l.l->items[j] = t;
        }
        return l;
    }
    case F_ROUND:
        return do_round(cx, v, a);
    case F_SAFE:
        return v;
    case F_SORT: {
        struct jlist l;
        if (!jx_iter_list(cx, v, &l))
            return jv_undef();
        return sorted(cx, l, jx_arg(a, 2, "attribute"),
                      arg_bool(jx_arg(a, 1, "case_sensitive"), false),
                      arg_bool(jx_arg(a, 0, "reverse"), false), 0);
    }
    case F_STRING:
        return str_of(cx, v);
    case F_STRIPTAGS:
        return do_striptags(cx, v);
    case F_SUM:
        return do_sum(cx, v, a);
    case F_TITLE:
        return do_title(cx, v);
    case F_TOJSON:
        return do_tojson(cx, v, a);
    case F_TRIM:
        return jx_str_strip(cx, str_of(cx, v), jx_arg(a, 0, "chars"),
                            JX_STRIP_LEFT | JX_STRIP_RIGHT);
    case F_TRUNCATE:
        return do_truncate(cx, v, a);
    case F_UNIQUE:
        return do_unique(cx, v, a);
    case F_WORDCOUNT:
        return do_wordcount(cx, v);
    }
    jx_fail(cx, HR_ERR_INVALID, "No filter with id %d.", id);
    return jv_undef();
}

struct jv jx_filter_by_name(struct jx_ctx *cx, const char *name, struct jv v,
                            const struct jargs *args)
{
    int id = jx_filter_find(name);
    if (id < 0) {
        jx_fail(cx, HR_ERR_INVALID, "No filter named '%s'.", name);
        return jv_undef();
    }
    return jx_filter_apply(cx, id, v, args);
}

/* ---- tests ---- */

enum {
    T_LT_SYM, T_LE_SYM, T_EQ_SYM, T_NE_SYM, T_GT_SYM, T_GE_SYM, T_BOOLEAN, T_CALLABLE,
    T_DEFINED, T_DIVISIBLEBY, T_EQ, T_EQUALTO, T_ESCAPED, T_EVEN, T_FALSE, T_FILTER, T_FLOAT,
    T_GE, T_GREATERTHAN, T_GT, T_IN, T_INTEGER, T_ITERABLE, T_LE, T_LESSTHAN, T_LOWER, T_LT,
    T_MAPPING, T_NE, T_NONE, T_NUMBER, T_ODD, T_SAMEAS, T_SEQUENCE, T_STRING, T_TEST, T_TRUE,
    T_UNDEFINED, T_UPPER, T_COUNT_ALL,
};

static const char *const g_tests[T_COUNT_ALL] = {
    "<", "<=", "==", "!=", ">", ">=", "boolean", "callable", "defined", "divisibleby", "eq",
    "equalto", "escaped", "even", "false", "filter", "float", "ge", "greaterthan", "gt", "in",
    "integer", "iterable", "le", "lessthan", "lower", "lt", "mapping", "ne", "none", "number",
    "odd", "sameas", "sequence", "string", "test", "true", "undefined", "upper",
};

int jx_test_find(const char *name)
{
    for (int i = 0; i < T_COUNT_ALL; i++)
        if (strcmp(g_tests[i], name) == 0)
            return i;
    return -1;
}

static bool int_of(struct jx_ctx *cx, struct jv v, int64_t *out)
{
    if (v.type == JV_INT)
        *out = v.i;
    else if (v.type == JV_BOOL)
        *out = v.b;
    else {
        if (!need_defined(cx, v))
            return false;
        jx_fail(cx, HR_ERR_INVALID, "unsupported operand type(s) for %%: '%s' and 'int'",
                jx_type_name(v));
        return false;
    }
    return true;
}

bool jx_test_apply(struct jx_ctx *cx, int id, struct jv v, const struct jargs *a)
{
    const struct jv *x = jx_arg(a, 0, NULL);
    int64_t i, d;
    switch (id) {
    case T_BOOLEAN:
        return v.type == JV_BOOL;
    case T_CALLABLE:
        return v.type == JV_MACRO || v.type == JV_FUNC || v.type == JV_METHOD;
    case T_DEFINED:
        return v.type != JV_UNDEF;
    case T_UNDEFINED:
        return v.type == JV_UNDEF;
    case T_DIVISIBLEBY:
        if (!x || !int_of(cx, v, &i) || !int_of(cx, *x, &d))
            return x ? false : (jx_fail(cx, HR_ERR_INVALID, "divisibleby needs a number"), false);
        if (d == 0) {
            jx_fail(cx, HR_ERR_INVALID, "integer modulo by zero");
            return false;
        }
        return d == -1 || i % d == 0;
    case T_EVEN:
    case T_ODD:
        if (!int_of(cx, v, &i))
            return false;
        return (i % 2 != 0) == (id == T_ODD);
    case T_ESCAPED:
        return false;
    case T_FALSE:
        return v.type == JV_BOOL && !v.b;
    case T_TRUE:
        return v.type == JV_BOOL && v.b;
    case T_FILTER:
        return v.type == JV_STR && jx_filter_find(v.s->s) >= 0;
    case T_TEST:
        return v.type == JV_STR && jx_test_find(v.s->s) >= 0;
    case T_FLOAT:
        return v.type == JV_FLOAT;
    case T_INTEGER:
        return v.type == JV_INT;
    case T_NUMBER:
        return v.type == JV_INT || v.type == JV_FLOAT || v.type == JV_BOOL;
    case T_STRING:
        return v.type == JV_STR;
    case T_MAPPING:
        return v.type == JV_DICT;
    case T_NONE:
        return v.type == JV_NONE;
    case T_ITERABLE:
        return v.type == JV_STR || v.type == JV_LIST || v.type == JV_DICT || v.type == JV_UNDEF ||
               v.type == JV_NS;
    case T_SEQUENCE:
        return v.type == JV_STR || v.type == JV_LIST || v.type == JV_DICT || v.type == JV_UNDEF;
    case T_LOWER:
    case T_UPPER: {
        if (v.type != JV_STR)
            return false;
        struct jargs none = {0};
        struct jv r = jx_method_call(cx, v, jx_method_find(v, id == T_LOWER ? "islower" : "isupper"),
                                     &none);
        return r.type == JV_BOOL && r.b;
    }
    case T_SAMEAS:
        if (!x)
            return false;
        /* `is`: singletons and small cached ints compare by value. */
        if (v.type != x->type)
            return false;
        if (v.type == JV_NONE || v.type == JV_UNDEF)
            return true;
        if (v.type == JV_BOOL)
            return v.b == x->b;
        if (v.type == JV_INT)
            return v.i == x->i && v.i >= -5 && v.i <= 256;
        if (v.type == JV_STR)
            return v.s == x->s;
        if (v.type == JV_LIST)
            return v.l == x->l;
        if (v.type == JV_DICT || v.type == JV_NS)
            return v.d == x->d;
        return false;
    case T_IN:
        if (!x) {
            jx_fail(cx, HR_ERR_INVALID, "the in test needs a sequence");
            return false;
        }
        if (x->type == JV_STR) {
            if (v.type != JV_STR) {
                jx_fail(cx, HR_ERR_INVALID, "'in <string>' requires string as left operand, not %s",
                        jx_type_name(v));
                return false;
            }
            return v.s->len == 0 || memmem(x->s->s, x->s->len, v.s->s, v.s->len) != NULL;
        }
        if (x->type == JV_LIST) {
            for (size_t k = 0; k < x->l->n; k++)
                if (jx_equal(x->l->items[k], v))
                    return true;
            return false;
        }
        if (x->type == JV_DICT)
            return jx_dict_get(x->d, v) != NULL;
        if (x->type == JV_UNDEF)
            return false;
        jx_fail(cx, HR_ERR_INVALID, "argument of type '%s' is not iterable", jx_type_name(*x));
        return false;
    case T_EQ_SYM:
    case T_EQ:
    case T_EQUALTO:
        return x && jx_equal(v, *x);
    case T_NE_SYM:
    case T_NE:
        return x && !jx_equal(v, *x);
    default: {
        if (!x) {
            jx_fail(cx, HR_ERR_INVALID, "comparison test needs an argument");
            return false;
        }
        int c = jx_compare(cx, v, *x);
        switch (id) {
        case T_LT_SYM:
        case T_LT:
        case T_LESSTHAN:
            return c < 0;
        case T_LE_SYM:
        case T_LE:
            return c <= 0;
        case T_GT_SYM:
        case T_GT:
        case T_GREATERTHAN:
            return c > 0;
        default:
            return c >= 0;
        }
    }
    }
}

bool jx_test_by_name(struct jx_ctx *cx, const char *name, struct jv v, const struct jargs *args)
{
    int id = jx_test_find(name);
    if (id < 0) {
        jx_fail(cx, HR_ERR_INVALID, "No test named '%s'.", name);
        return false;
    }
    return jx_test_apply(cx, id, v, args);
}
