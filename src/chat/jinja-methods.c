/*
 * jinja-methods.c - the Python methods templates call on values
 * ("abc".startswith(...), d.items(), ...), Python's % formatting and
 * str.format, and the global functions (range, dict, namespace,
 * raise_exception, strftime_now).
 *
 * Methods that would mutate a list or dict (append, pop, update, ...)
 * exist so that calling them fails with the message of Jinja's
 * ImmutableSandboxedEnvironment ("access to attribute 'append' of 'list'
 * object is unsafe."), as in transformers.
 *
 * Case mapping (upper, lower, title, capitalize) covers ASCII, Latin-1,
 * Latin Extended-A pairs, Greek and Cyrillic; other scripts pass through
 * unchanged (Python maps a few more, e.g. Armenian and Georgian).
 * Whitespace is Python's str.isspace() set.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/jinja-impl.h"

/* ---- UTF-8 and characters ---- */

uint32_t jx_utf8_next(const char *s, size_t n, size_t *i)
{
    unsigned char c = (unsigned char)s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if (len == 1 || *i + (size_t)len > n) {
        (*i)++;
        return 0xfffd;
    }
    uint32_t cp = c & (0x7f >> len);
    for (int k = 1; k < len; k++)
        cp = (cp << 6) | ((unsigned char)s[*i + (size_t)k] & 0x3f);
    *i += (size_t)len;
    return cp;
}

static size_t utf8_put(uint32_t cp, char *o)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | (cp >> 6));
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

bool jx_cp_is_space(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

static uint32_t cp_upper(uint32_t c)
{
    if (c >= 'a' && c <= 'z')
        return c - 32;
    if (c < 0x80)
        return c;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7))
        return c - 32;
    if (c == 0xff)
        return 0x178;
    if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
        c != 0x17f) {
        /* Latin Extended-A alternates upper/lower, with a shift of parity
         * between U+0139 and U+0148 and from U+0179. */
        bool odd_lower = (c >= 0x139 && c <= 0x148) || c >= 0x179;
        if ((c & 1) == (odd_lower ? 0u : 1u))
            return c - 1;
        return c;
    }
    if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2)
        return c - 32;
    if (c == 0x3c2)
        return 0x3a3;
    if (c >= 0x430 && c <= 0x44f)
        return c - 32;
    if (c >= 0x450 && c <= 0x45f)
        return c - 80;
    return c;
}

static uint32_t cp_lower(uint32_t c)
{
    if (c >= 'A' && c <= 'Z')
        return c + 32;
    if (c < 0x80)
        return c;
    if (c >= 0xc0 && c <= 0xde && c != 0xd7)
        return c + 32;
    if (c == 0x178)
        return 0xff;
    if (c >= 0x100 && c <= 0x17f && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
        c != 0x17f) {
        bool odd_lower = (c >= 0x139 && c <= 0x148) || c >= 0x179;
        if ((c & 1) == (odd_lower ? 1u : 0u))
            return c + 1;
        return c;
    }
    if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2)
        return c + 32;
    if (c >= 0x410 && c <= 0x42f)
        return c + 32;
    if (c >= 0x400 && c <= 0x40f)
        return c + 80;
    return c;
}

static bool cp_cased(uint32_t c) { return cp_upper(c) != c || cp_lower(c) != c; }

static bool cp_alpha(uint32_t c)
{
    if (c < 0x80)
        return (c | 32) >= 'a' && (c | 32) <= 'z';
    /* Outside ASCII: letters of every script count, punctuation and
     * symbols of the common blocks do not. */
    return !(c < 0xc0 || c == 0xd7 || c == 0xf7 || (c >= 0x2000 && c <= 0x2bff) ||
             (c >= 0x3000 && c <= 0x303f) || (c >= 0xfe30 && c <= 0xfe4f) ||
             (c >= 0xff00 && c <= 0xff20) || (c >= 0x1f000 && c <= 0x1faff));
}

static bool cp_digit(uint32_t c) { return c >= '0' && c <= '9'; }

/* ---- string helpers ---- */

struct jv jx_str_case(struct jx_ctx *cx, struct jv s, int mode)
{
    struct jbuf b = {0};
    const char *p = s.s->s;
    size_t n = s.s->len, i = 0;
    bool prev_cased = false, first = true, prev_letter = false;
    while (i < n) {
        uint32_t c = jx_utf8_next(p, n, &i), o;
        bool to_upper;
        switch (mode) {
        case 0:
            to_upper = false;
            break;
        case 1:
            to_upper = true;
            break;
        case 2: /* str.title: upper after an uncased character */
            to_upper = !prev_cased;
            prev_cased = cp_cased(c) || c == 0xdf;
            break;
        default: /* str.capitalize */
            to_upper = first;
            break;
        }
        first = false;
        /* German sharp s has no one-letter upper case: Python writes "SS"
         * for upper() and "Ss" where title case applies. */
        if (c == 0xdf && to_upper) {
            if (!jx_buf_put(cx, &b, mode == 1 ? "SS" : "Ss", 2))
                return jv_undef();
            prev_letter = true;
            continue;
        }
        o = to_upper ? cp_upper(c) : cp_lower(c);
        /* Capital sigma lowers to the final form at the end of a word:
         * after a cased letter and before none. */
        if (c == 0x3a3 && !to_upper && prev_letter) {
            size_t j = i;
            uint32_t next = j < n ? jx_utf8_next(p, n, &j) : 0;
            if (!(next && cp_cased(next)))
                o = 0x3c2;
        }
        prev_letter = cp_cased(c);
        char enc[4];
        if (!jx_buf_put(cx, &b, enc, utf8_put(o, enc)))
            return jv_undef();
    }
    return jx_buf_str(cx, &b);
}

static bool in_chars(uint32_t c, const struct jv *chars)
{
    if (!chars)
        return jx_cp_is_space(c);
    const char *p = chars->s->s;
    size_t n = chars->s->len, i = 0;
    while (i < n)
        if (jx_utf8_next(p, n, &i) == c)
            return true;
    return false;
}

struct jv jx_str_strip(struct jx_ctx *cx, struct jv s, const struct jv *chars, int sides)
{
    if (chars && chars->type == JV_NONE)
        chars = NULL;
    if (chars && chars->type != JV_STR) {
        jx_fail(cx, HR_ERR_INVALID, "strip arg must be None or str");
        return jv_undef();
    }
    const char *p = s.s->s;
    size_t n = s.s->len, a = 0, b = n;
    if (sides & JX_STRIP_LEFT) {
        while (a < n) {
            size_t j = a;
            if (!in_chars(jx_utf8_next(p, n, &j), chars))
                break;
            a = j;
        }
    }
    if (sides & JX_STRIP_RIGHT) {
        while (b > a) {
            size_t k = b - 1;
            while (k > a && ((unsigned char)p[k] & 0xc0) == 0x80)
                k--;
            size_t j = k;
            if (!in_chars(jx_utf8_next(p, n, &j), chars))
                break;
            b = k;
        }
    }
    if (a == 0 && b == n)
        return s;
    return jx_str(cx, p + a, b - a);
}

struct jv jx_str_replace(struct jx_ctx *cx, struct jv s, struct jv old, struct jv new_,
                         int64_t count)
{
    struct jbuf b = {0};
    const char *p = s.s->s;
    size_t n = s.s->len, i = 0;
    int64_t done = 0;
    if (old.s->len == 0) {
        /* Python inserts `new` between characters and at both ends. */
        while (count < 0 || done < count) {
            if (!jx_buf_put(cx, &b, new_.s->s, new_.s->len))
                return jv_undef();
            done++;
            if (i >= n)
                break;
            size_t j = i;
            jx_utf8_next(p, n, &j);
            if (!jx_buf_put(cx, &b, p + i, j - i))
                return jv_undef();
            i = j;
        }
        if (!jx_buf_put(cx, &b, p + i, n - i))
            return jv_undef();
        return jx_buf_str(cx, &b);
    }
    while (i <= n && (count < 0 || done < count)) {
        const char *hit = memmem(p + i, n - i, old.s->s, old.s->len);
        if (!hit)
            break;
        size_t at = (size_t)(hit - p);
        if (!jx_buf_put(cx, &b, p + i, at - i) || !jx_buf_put(cx, &b, new_.s->s, new_.s->len))
            return jv_undef();
        i = at + old.s->len;
        done++;
    }
    if (done == 0)
        return s;
    if (!jx_buf_put(cx, &b, p + i, n - i))
        return jv_undef();
    return jx_buf_str(cx, &b);
}

/* Line boundaries of str.splitlines: \n \r \r\n \v \f \x1c-\x1e U+0085 U+2028 U+2029. */
static size_t line_break_at(const char *p, size_t n, size_t i)
{
    unsigned char c = (unsigned char)p[i];
    if (c == '\r')
        return i + 1 < n && p[i + 1] == '\n' ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d || c == 0x1e)
        return 1;
    if (c == 0xc2 && i + 1 < n && (unsigned char)p[i + 1] == 0x85)
        return 2;
    if (c == 0xe2 && i + 2 < n && (unsigned char)p[i + 1] == 0x80 &&
        ((unsigned char)p[i + 2] == 0xa8 || (unsigned char)p[i + 2] == 0xa9))
        return 3;
    return 0;
}

/* A growable list in the arena. */
struct lbuf {
    struct jv *v;
    size_t n, cap;
};
static bool lbuf_push(struct jx_ctx *cx, struct lbuf *l, struct jv x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 8;
        struct jv *v = jx_alloc(&cx->arena, cap * sizeof(*v));
        if (!v) {
            jx_fail(cx, HR_ERR_LIMIT, "template used too much memory");
            return false;
        }
        if (l->n)
            memcpy(v, l->v, l->n * sizeof(*v));
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = x;
    return true;
}
static struct jv lbuf_list(struct jx_ctx *cx, struct lbuf *l)
{
    struct jv out = jx_list(cx, 0);
    if (cx->st != HR_OK)
        return jv_undef();
    out.l->items = l->v;
    out.l->n = l->n;
    return out;
}

struct jv jx_str_splitlines(struct jx_ctx *cx, struct jv s, bool keepends)
{
    struct lbuf l = {0};
    const char *p = s.s->s;
    size_t n = s.s->len, start = 0, i = 0;
    while (i < n) {
        size_t br = line_break_at(p, n, i);
        if (!br) {
            i++;
            continue;
        }
        if (!lbuf_push(cx, &l, jx_str(cx, p + start, (keepends ? i + br : i) - start)))
            return jv_undef();
        i += br;
        start = i;
    }
    if (start < n && !lbuf_push(cx, &l, jx_str(cx, p + start, n - start)))
        return jv_undef();
    return lbuf_list(cx, &l);
}

/* str.split / str.rsplit. */
static struct jv str_split(struct jx_ctx *cx, struct jv s, const struct jv *sep, int64_t maxsplit,
                           bool from_right)
{
    struct lbuf l = {0};
    const char *p = s.s->s;
    size_t n = s.s->len;
    if (sep && sep->type != JV_NONE) {
        if (sep->type != JV_STR) {
            jx_fail(cx, HR_ERR_INVALID, "must be str or None, not %s", jx_type_name(*sep));
            return jv_undef();
        }
        size_t sl = sep->s->len;
        if (sl == 0) {
            jx_fail(cx, HR_ERR_INVALID, "empty separator");
            return jv_undef();
        }
        if (!from_right) {
            size_t i = 0;
            int64_t done = 0;
            for (;;) {
                const char *hit = maxsplit < 0 || done < maxsplit
                                      ? memmem(p + i, n - i, sep->s->s, sl)
                                      : NULL;
                if (!hit)
                    break;
                if (!lbuf_push(cx, &l, jx_str(cx, p + i, (size_t)(hit - p) - i)))
                    return jv_undef();
                i = (size_t)(hit - p) + sl;
                done++;
            }
            if (!lbuf_push(cx, &l, jx_str(cx, p + i, n - i)))
                return jv_undef();
            return lbuf_list(cx, &l);
        }
        /* rsplit: find from the end, then reverse. */
        size_t end = n;
        int64_t done = 0;
        while (maxsplit < 0 || done < maxsplit) {
            size_t at = SIZE_MAX;
            for (size_t k = end >= sl ? end - sl + 1 : 0; k-- > 0;)
                if (memcmp(p + k, sep->s->s, sl) == 0) {
                    at = k;
                    break;
                }
            if (at == SIZE_MAX)
                break;
            if (!lbuf_push(cx, &l, jx_str(cx, p + at + sl, end - at - sl)))
                return jv_undef();
            end = at;
            done++;
        }
        if (!lbuf_push(cx, &l, jx_str(cx, p, end)))
            return jv_undef();
        for (size_t a = 0, b = l.n - 1; a < b; a++, b--) {
            struct jv t = l.v[a];
            l.v[a] = l.v[b];
            l.v[b] = t;
        }
        return lbuf_list(cx, &l);
    }
    /* No separator: runs of whitespace, ends ignored. */
    if (from_right) {
        struct lbuf rev = {0};
        size_t end = n;
        int64_t done = 0;
        for (;;) {
            while (end > 0) {
                size_t k = end - 1;
                while (k > 0 && ((unsigned char)p[k] & 0xc0) == 0x80)
                    k--;
                size_t j = k;
                if (!jx_cp_is_space(jx_utf8_next(p, n, &j)))
                    break;
                end = k;
            }
            if (end == 0)
                break;
            if (maxsplit >= 0 && done >= maxsplit) {
                if (!lbuf_push(cx, &rev, jx_str(cx, p, end)))
                    return jv_undef();
                break;
            }
            size_t start = end;
            while (start > 0) {
                size_t k = start - 1;
                while (k > 0 && ((unsigned char)p[k] & 0xc0) == 0x80)
                    k--;
                size_t j = k;
                if (jx_cp_is_space(jx_utf8_next(p, n, &j)))
                    break;
                start = k;
            }
            if (!lbuf_push(cx, &rev, jx_str(cx, p + start, end - start)))
                return jv_undef();
            end = start;
            done++;
        }
        for (size_t a = 0, b = rev.n ? rev.n - 1 : 0; a < b; a++, b--) {
            struct jv t = rev.v[a];
            rev.v[a] = rev.v[b];
            rev.v[b] = t;
        }
        return lbuf_list(cx, &rev);
    }
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        while (i < n) {
            size_t j = i;
            if (!jx_cp_is_space(jx_utf8_next(p, n, &j)))
                break;
            i = j;
        }
        if (i >= n)
            break;
        if (maxsplit >= 0 && done >= maxsplit) {
            /* The rest, with its trailing whitespace stripped. */
            struct jv rest = jx_str_strip(cx, jx_str(cx, p + i, n - i), NULL, JX_STRIP_RIGHT);
            if (!lbuf_push(cx, &l, rest))
                return jv_undef();
            break;
        }
        size_t start = i;
        while (i < n) {
            size_t j = i;
            if (jx_cp_is_space(jx_utf8_next(p, n, &j)))
                break;
            i = j;
        }
        if (!lbuf_push(cx, &l, jx_str(cx, p + start, i - start)))
            return jv_undef();
        done++;
    }
    return lbuf_list(cx, &l);
}

/* ---- % formatting ---- */

static bool fmt_int_arg(struct jx_ctx *cx, struct jv v, int64_t *out)
{
    if (v.type == JV_INT)
        *out = v.i;
    else if (v.type == JV_BOOL)
        *out = v.b;
    else if (v.type == JV_FLOAT)
        *out = (int64_t)v.f;
    else {
        jx_fail(cx, HR_ERR_INVALID, "%%d format: a real number is required, not %s",
                jx_type_name(v));
        return false;
    }
    return true;
}

struct jv jx_format_percent(struct jx_ctx *cx, struct jv fmt, struct jv args)
{
    struct jbuf b = {0};
    const char *p = fmt.s->s;
    size_t n = fmt.s->len, argi = 0;
    bool tuple = args.type == JV_LIST && (args.flags & JX_TUPLE);
    size_t n_args = tuple ? args.l->n : 1;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            if (!jx_buf_putc(cx, &b, p[i]))
                return jv_undef();
            continue;
        }
        if (++i >= n) {
            jx_fail(cx, HR_ERR_INVALID, "incomplete format");
            return jv_undef();
        }
        struct jv arg;
        bool have_arg = false;
        if (p[i] == '(') {
            size_t e = i + 1;
            while (e < n && p[e] != ')')
                e++;
            if (e >= n || args.type != JV_DICT) {
                jx_fail(cx, HR_ERR_INVALID, "format requires a mapping");
                return jv_undef();
            }
            struct jv *v = jx_dict_get_str(args.d, p + i + 1, e - i - 1);
            if (!v) {
                jx_fail(cx, HR_ERR_INVALID, "KeyError: '%.*s'", (int)(e - i - 1), p + i + 1);
                return jv_undef();
            }
            arg = *v;
            have_arg = true;
            i = e + 1;
        }
        char spec[32] = "%";
        size_t sk = 1;
        while (i < n && strchr("-+ #0", p[i]) && sk < 8)
            spec[sk++] = p[i++];
        while (i < n && p[i] >= '0' && p[i] <= '9' && sk < 16)
            spec[sk++] = p[i++];
        if (i < n && p[i] == '.') {
            spec[sk++] = p[i++];
            while (i < n && p[i] >= '0' && p[i] <= '9' && sk < 24)
                spec[sk++] = p[i++];
        }
        if (i >= n) {
            jx_fail(cx, HR_ERR_INVALID, "incomplete format");
            return jv_undef();
        }
        char conv = p[i];
        if (conv == '%') {
            if (!jx_buf_putc(cx, &b, '%'))
                return jv_undef();
            continue;
        }
        if (!have_arg) {
            if (argi >= n_args) {
                jx_fail(cx, HR_ERR_INVALID, "not enough arguments for format string");
                return jv_undef();
            }
            arg = tuple ? args.l->items[argi] : args;
            argi++;
        }
        char out[512];
        int len;
        switch (conv) {
        case 's':
        case 'r': {
            struct jbuf sb = {0};
            if (!(conv == 's' ? jx_to_str(cx, &sb, arg) : jx_to_repr(cx, &sb, arg)) ||
                !jx_buf_putc(cx, &sb, '\0'))
                return jv_undef();
            spec[sk++] = 's';
            spec[sk] = '\0';
            /* Width and precision count characters; fine for ASCII. */
            if (sk == 2) {
                if (!jx_buf_put(cx, &b, sb.p, sb.n - 1))
                    return jv_undef();
                continue;
            }
            len = snprintf(out, sizeof(out), spec, sb.p);
            break;
        }
        case 'd':
        case 'i':
        case 'u':
        case 'x':
        case 'X':
        case 'o': {
            int64_t v;
            if (!fmt_int_arg(cx, arg, &v))
                return jv_undef();
            spec[sk++] = 'l';
            spec[sk++] = 'l';
            spec[sk++] = conv == 'i' || conv == 'u' ? 'd' : conv;
            spec[sk] = '\0';
            len = snprintf(out, sizeof(out), spec, (long long)v);
            break;
        }
        case 'f':
        case 'F':
        case 'e':
        case 'E':
        case 'g':
        case 'G': {
            double v;
            if (arg.type == JV_FLOAT)
                v = arg.f;
            else if (arg.type == JV_INT)
                v = (double)arg.i;
            else if (arg.type == JV_BOOL)
                v = arg.b;
            else {
                jx_fail(cx, HR_ERR_INVALID, "must be real number, not %s", jx_type_name(arg));
                return jv_undef();
            }
            spec[sk++] = conv;
            spec[sk] = '\0';
            len = snprintf(out, sizeof(out), spec, v);
            break;
        }
        case 'c':
            if (arg.type == JV_STR) {
                if (!jx_buf_put(cx, &b, arg.s->s, arg.s->len))
                    return jv_undef();
                continue;
            }
            {
                int64_t v;
                if (!fmt_int_arg(cx, arg, &v))
                    return jv_undef();
                len = (int)utf8_put((uint32_t)v & 0x1fffff, out);
            }
            break;
        default:
            jx_fail(cx, HR_ERR_INVALID, "unsupported format character '%c'", conv);
            return jv_undef();
        }
        if (len < 0 || (size_t)len >= sizeof(out)) {
            jx_fail(cx, HR_ERR_INVALID, "formatted field too long");
            return jv_undef();
        }
        if (!jx_buf_put(cx, &b, out, (size_t)len))
            return jv_undef();
    }
    if (tuple ? argi < n_args : (argi == 0 && args.type != JV_DICT)) {
        jx_fail(cx, HR_ERR_INVALID, "not all arguments converted during string formatting");
        return jv_undef();
    }
    return jx_buf_str(cx, &b);
}

/* str.format with {}, {0}, {name}, !r/!s and an optional :spec of
 * [[fill]align][width][.precision][type] for s, d and f. */
static struct jv str_format(struct jx_ctx *cx, struct jv fmt, const struct jargs *a)
{
    struct jbuf b = {0};
    const char *p = fmt.s->s;
    size_t n = fmt.s->len, auto_i = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '}' && i + 1 < n && p[i + 1] == '}') {
            if (!jx_buf_putc(cx, &b, '}'))
                return jv_undef();
            i++;
            continue;
        }
        if (c != '{') {
            if (!jx_buf_putc(cx, &b, c))
                return jv_undef();
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            if (!jx_buf_putc(cx, &b, '{'))
                return jv_undef();
            i++;
            continue;
        }
        size_t e = i + 1;
        while (e < n && p[e] != '}')
            e++;
        if (e >= n) {
            jx_fail(cx, HR_ERR_INVALID, "Single '{' encountered in format string");
            return jv_undef();
        }
        const char *field = p + i + 1;
        size_t fl = e - i - 1, name_len = 0;
        while (name_len < fl && field[name_len] != '!' && field[name_len] != ':')
            name_len++;
        const struct jv *arg = NULL;
        if (name_len == 0) {
            arg = auto_i < a->n_pos ? &a->pos[auto_i] : NULL;
            auto_i++;
        } else if (field[0] >= '0' && field[0] <= '9') {
            size_t idx = (size_t)strtoul(field, NULL, 10);
            arg = idx < a->n_pos ? &a->pos[idx] : NULL;
        } else {
            for (size_t k = 0; k < a->n_kw; k++)
                if (strlen(a->kw_names[k]) == name_len &&
                    memcmp(a->kw_names[k], field, name_len) == 0)
                    arg = &a->kw[k];
        }
        if (!arg) {
            jx_fail(cx, HR_ERR_INVALID, "format field '%.*s' has no argument", (int)name_len,
                    field);
            return jv_undef();
        }
        bool repr = name_len + 1 < fl && field[name_len] == '!' && field[name_len + 1] == 'r';
        const char *spec = memchr(field, ':', fl);
        struct jbuf vb = {0};
        if (spec && (arg->type == JV_INT || arg->type == JV_FLOAT) &&
            (spec[fl - (size_t)(spec - field) - 1] == 'f' ||
             spec[fl - (size_t)(spec - field) - 1] == 'd')) {
            char cs[32], out[128];
            size_t sl = fl - (size_t)(spec - field) - 1;
            if (sl > 20)
                sl = 20;
            char type = spec[sl];
            snprintf(cs, sizeof(cs), "%%%.*s%s", (int)sl - 1, spec + 1, type == 'f' ? "f" : "lld");
            int len = type == 'f' ? snprintf(out, sizeof(out), cs,
                                             arg->type == JV_FLOAT ? arg->f : (double)arg->i)
                                  : snprintf(out, sizeof(out), cs,
                                             (long long)(arg->type == JV_INT ? arg->i : (int64_t)arg->f));
            if (len < 0 || !jx_buf_put(cx, &b, out, (size_t)len))
                return jv_undef();
            i = e;
            continue;
        }
        if (!(repr ? jx_to_repr(cx, &vb, *arg) : jx_to_str(cx, &vb, *arg)))
            return jv_undef();
        if (spec && fl - (size_t)(spec - field) > 1) {
            /* [[fill]align]width for strings */
            const char *s = spec + 1;
            size_t sl = fl - (size_t)(spec - field) - 1;
            char fill = ' ', align = '<';
            if (sl >= 2 && strchr("<>^", s[1]))
                fill = s[0], align = s[1], s += 2, sl -= 2;
            else if (sl >= 1 && strchr("<>^", s[0]))
                align = s[0], s++, sl--;
            size_t width = 0;
            for (size_t k = 0; k < sl && s[k] >= '0' && s[k] <= '9'; k++)
                width = width * 10 + (size_t)(s[k] - '0');
            if (width > 100000)
                width = 100000;
            size_t len = jx_utf8_len(vb.p, vb.n);
            size_t pad = width > len ? width - len : 0;
            size_t left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
            for (size_t k = 0; k < left; k++)
                if (!jx_buf_putc(cx, &b, fill))
                    return jv_undef();
            if (!jx_buf_put(cx, &b, vb.p, vb.n))
                return jv_undef();
            for (size_t k = left; k < pad; k++)
                if (!jx_buf_putc(cx, &b, fill))
                    return jv_undef();
        } else if (!jx_buf_put(cx, &b, vb.p, vb.n)) {
            return jv_undef();
        }
        i = e;
    }
    return jx_buf_str(cx, &b);
}

/* ---- methods ---- */

enum {
    M_STARTSWITH, M_ENDSWITH, M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES,
    M_REPLACE, M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_FORMAT, M_FIND, M_RFIND, M_COUNT,
    M_JOIN, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISUPPER, M_ISLOWER, M_STR_END,
    M_ITEMS = M_STR_END, M_KEYS, M_VALUES, M_GET, M_COPY, M_DICT_END,
    M_INDEX = M_DICT_END, M_LCOUNT, M_LIST_END,
    M_CYCLE = M_LIST_END, M_LOOP_END,
    /* unsafe in ImmutableSandboxedEnvironment: calling them fails */
    M_APPEND = M_LOOP_END, M_EXTEND, M_INSERT, M_POP, M_REMOVE, M_CLEAR, M_SORT, M_REVERSE,
    M_UPDATE, M_SETDEFAULT, M_POPITEM, M_COUNT_ALL,
};

static const char *const g_methods[M_COUNT_ALL] = {
    [M_STARTSWITH] = "startswith", [M_ENDSWITH] = "endswith", [M_STRIP] = "strip",
    [M_LSTRIP] = "lstrip", [M_RSTRIP] = "rstrip", [M_SPLIT] = "split", [M_RSPLIT] = "rsplit",
    [M_SPLITLINES] = "splitlines", [M_REPLACE] = "replace", [M_UPPER] = "upper",
    [M_LOWER] = "lower", [M_TITLE] = "title", [M_CAPITALIZE] = "capitalize",
    [M_FORMAT] = "format", [M_FIND] = "find", [M_RFIND] = "rfind", [M_COUNT] = "count",
    [M_JOIN] = "join", [M_ISDIGIT] = "isdigit", [M_ISALPHA] = "isalpha",
    [M_ISALNUM] = "isalnum", [M_ISSPACE] = "isspace", [M_ISUPPER] = "isupper",
    [M_ISLOWER] = "islower", [M_ITEMS] = "items", [M_KEYS] = "keys", [M_VALUES] = "values",
    [M_GET] = "get", [M_COPY] = "copy", [M_INDEX] = "index", [M_LCOUNT] = "count",
    [M_CYCLE] = "cycle", [M_APPEND] = "append", [M_EXTEND] = "extend", [M_INSERT] = "insert",
    [M_POP] = "pop", [M_REMOVE] = "remove", [M_CLEAR] = "clear", [M_SORT] = "sort",
    [M_REVERSE] = "reverse", [M_UPDATE] = "update", [M_SETDEFAULT] = "setdefault",
    [M_POPITEM] = "popitem",
};

const char *jx_method_name(int id) { return id >= 0 && id < M_COUNT_ALL ? g_methods[id] : "?"; }

static bool method_applies(struct jv v, int m)
{
    switch (v.type) {
    case JV_STR:
        return m < M_STR_END;
    case JV_DICT:
        return (m >= M_ITEMS && m < M_DICT_END) || m == M_POP || m == M_CLEAR ||
               m == M_UPDATE || m == M_SETDEFAULT || m == M_POPITEM;
    case JV_LIST:
        if (v.flags & JX_TUPLE)
            return m == M_INDEX || m == M_LCOUNT;
        return (m >= M_INDEX && m < M_LIST_END) || (m >= M_APPEND && m <= M_REVERSE);
    case JV_LOOP:
        return m == M_CYCLE;
    default:
        return false;
    }
}

int jx_method_find(struct jv v, const char *name)
{
    for (int m = 0; m < M_COUNT_ALL; m++)
        if (method_applies(v, m) && strcmp(g_methods[m], name) == 0)
            return m;
    return -1;
}

static const struct jv *need_str(struct jx_ctx *cx, const struct jargs *a, size_t i,
                                 const char *fname)
{
    const struct jv *v = jx_arg(a, i, NULL);
    if (!v) {
        jx_fail(cx, HR_ERR_INVALID, "%s() takes at least %zu argument(s)", fname, i + 1);
        return NULL;
    }
    if (v->type != JV_STR) {
        if (v->type == JV_UNDEF)
            jx_undef_fail(cx, *v);
        else
            jx_fail(cx, HR_ERR_INVALID, "%s() argument %zu must be str, not %s", fname, i + 1,
                    jx_type_name(*v));
        return NULL;
    }
    return v;
}

static bool affix_match(struct jv s, struct jv x, bool end)
{
    if (x.s->len > s.s->len)
        return false;
    return memcmp(s.s->s + (end ? s.s->len - x.s->len : 0), x.s->s, x.s->len) == 0;
}

/* startswith/endswith take a string or a tuple of strings. */
static struct jv affix(struct jx_ctx *cx, struct jv s, const struct jargs *a, bool end)
{
    const struct jv *x = jx_arg(a, 0, NULL);
    const char *fname = end ? "endswith" : "startswith";
    if (x && x->type == JV_LIST) {
        for (size_t i = 0; i < x->l->n; i++) {
            if (x->l->items[i].type != JV_STR) {
                jx_fail(cx, HR_ERR_INVALID, "tuple for %s must only contain str", fname);
                return jv_undef();
            }
            if (affix_match(s, x->l->items[i], end))
                return jv_bool(true);
        }
        return jv_bool(false);
    }
    if (!(x = need_str(cx, a, 0, fname)))
        return jv_undef();
    return jv_bool(affix_match(s, *x, end));
}

static int64_t int_arg(struct jx_ctx *cx, const struct jv *v, int64_t dflt)
{
    if (!v || v->type == JV_NONE)
        return dflt;
    if (v->type == JV_INT)
        return v->i;
    if (v->type == JV_BOOL)
        return v->b;
    jx_fail(cx, HR_ERR_INVALID, "'%s' object cannot be interpreted as an integer",
            jx_type_name(*v));
    return dflt;
}

static struct jv str_method(struct jx_ctx *cx, struct jv s, int m, const struct jargs *a)
{
    const struct jv *x;
    switch (m) {
    case M_STARTSWITH:
    case M_ENDSWITH:
        return affix(cx, s, a, m == M_ENDSWITH);
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        return jx_str_strip(cx, s, jx_arg(a, 0, "chars"),
                            m == M_STRIP    ? JX_STRIP_LEFT | JX_STRIP_RIGHT
                            : m == M_LSTRIP ? JX_STRIP_LEFT
                                            : JX_STRIP_RIGHT);
    case M_SPLIT:
    case M_RSPLIT: {
        int64_t maxsplit = int_arg(cx, jx_arg(a, 1, "maxsplit"), -1);
        if (cx->st != HR_OK)
            return jv_undef();
        return str_split(cx, s, jx_arg(a, 0, "sep"), maxsplit, m == M_RSPLIT);
    }
    case M_SPLITLINES:
        x = jx_arg(a, 0, "keepends");
        return jx_str_splitlines(cx, s, x && jx_truthy(*x));
    case M_REPLACE: {
        const struct jv *old = need_str(cx, a, 0, "replace"), *new_ = old ? need_str(cx, a, 1, "replace") : NULL;
        if (!new_)
            return jv_undef();
        int64_t count = int_arg(cx, jx_arg(a, 2, "count"), -1);
        return cx->st == HR_OK ? jx_str_replace(cx, s, *old, *new_, count) : jv_undef();
    }
    case M_UPPER:
        return jx_str_case(cx, s, 1);
    case M_LOWER:
        return jx_str_case(cx, s, 0);
    case M_TITLE:
        return jx_str_case(cx, s, 2);
    case M_CAPITALIZE:
        return jx_str_case(cx, s, 3);
    case M_FORMAT:
        return str_format(cx, s, a);
    case M_FIND:
    case M_RFIND:
    case M_COUNT: {
        if (!(x = need_str(cx, a, 0, g_methods[m])))
            return jv_undef();
        const char *p = s.s->s;
        size_t n = s.s->len, xl = x->s->len;
        if (m == M_COUNT) {
            if (xl == 0)
                return jv_int((int64_t)jx_utf8_len(p, n) + 1);
            int64_t k = 0;
            for (const char *h = p; (h = memmem(h, n - (size_t)(h - p), x->s->s, xl)); h += xl)
                k++;
            return jv_int(k);
        }
        const char *hit = NULL;
        if (m == M_FIND) {
            hit = memmem(p, n, x->s->s, xl);
        } else {
            for (size_t k = n >= xl ? n - xl + 1 : 0; k-- > 0;)
                if (memcmp(p + k, x->s->s, xl) == 0) {
                    hit = p + k;
                    break;
                }
        }
        return jv_int(hit ? (int64_t)jx_utf8_len(p, (size_t)(hit - p)) : -1);
    }
    case M_JOIN: {
        const struct jv *it = jx_arg(a, 0, NULL);
        struct jlist items;
        if (!it || !jx_iter_list(cx, *it, &items))
            return it ? jv_undef() : (jx_fail(cx, HR_ERR_INVALID, "join() takes exactly one argument"), jv_undef());
        struct jbuf b = {0};
        for (size_t i = 0; i < items.n; i++) {
            if (items.items[i].type != JV_STR) {
                jx_fail(cx, HR_ERR_INVALID, "sequence item %zu: expected str instance, %s found",
                        i, jx_type_name(items.items[i]));
                return jv_undef();
            }
            if ((i && !jx_buf_put(cx, &b, s.s->s, s.s->len)) ||
                !jx_buf_put(cx, &b, items.items[i].s->s, items.items[i].s->len))
                return jv_undef();
        }
        return jx_buf_str(cx, &b);
    }
    default: {
        /* is* predicates */
        const char *p = s.s->s;
        size_t n = s.s->len, i = 0;
        bool any_cased = false;
        if (n == 0)
            return jv_bool(false);
        while (i < n) {
            uint32_t c = jx_utf8_next(p, n, &i);
            bool ok = true;
            switch (m) {
            case M_ISDIGIT:
                ok = cp_digit(c);
                break;
            case M_ISALPHA:
                ok = cp_alpha(c);
                break;
            case M_ISALNUM:
                ok = cp_alpha(c) || cp_digit(c);
                break;
            case M_ISSPACE:
                ok = jx_cp_is_space(c);
                break;
            case M_ISUPPER:
                if (cp_lower(c) != c)
                    any_cased = true;
                else if (cp_upper(c) != c)
                    ok = false;
                break;
            case M_ISLOWER:
                if (cp_upper(c) != c)
                    any_cased = true;
                else if (cp_lower(c) != c)
                    ok = false;
                break;
            }
            if (!ok)
                return jv_bool(false);
        }
        return jv_bool(m == M_ISUPPER || m == M_ISLOWER ? any_cased : true);
    }
    }
}

struct jv jx_method_call(struct jx_ctx *cx, struct jv self, int m, const struct jargs *a)
{
    if (m >= M_APPEND) {
        jx_fail(cx, HR_ERR_INVALID, "access to attribute '%s' of '%s' object is unsafe.",
                g_methods[m], jx_type_name(self));
        return jv_undef();
    }
    if (self.type == JV_STR)
        return str_method(cx, self, m, a);
    if (self.type == JV_DICT) {
        switch (m) {
        case M_ITEMS: {
            struct jv out = jx_list(cx, self.d->n);
            for (size_t i = 0; cx->st == HR_OK && i < self.d->n; i++) {
                struct jv pair = jx_list(cx, 2);
                if (cx->st != HR_OK)
                    break;
                pair.l->items[0] = self.d->keys[i];
                pair.l->items[1] = self.d->vals[i];
                pair.flags = JX_TUPLE;
                out.l->items[i] = pair;
            }
            out.flags = JX_DICT_ITEMS;
            return cx->st == HR_OK ? out : jv_undef();
        }
        case M_KEYS:
        case M_VALUES: {
            struct jv out = jx_list(cx, self.d->n);
            if (cx->st != HR_OK)
                return jv_undef();
            if (self.d->n)
                memcpy(out.l->items, m == M_KEYS ? self.d->keys : self.d->vals,
                       self.d->n * sizeof(struct jv));
            out.flags = m == M_KEYS ? JX_DICT_KEYS : JX_DICT_VALUES;
            return out;
        }
        case M_GET: {
            const struct jv *k = jx_arg(a, 0, NULL), *d = jx_arg(a, 1, NULL);
            if (!k) {
                jx_fail(cx, HR_ERR_INVALID, "get expected at least 1 argument, got 0");
                return jv_undef();
            }
            struct jv *v = jx_dict_get(self.d, *k);
            return v ? *v : d ? *d : jv_none();
        }
        case M_COPY:
            return self;
        }
    }
    if (self.type == JV_LIST) {
        const struct jv *x = jx_arg(a, 0, NULL);
        if (!x) {
            jx_fail(cx, HR_ERR_INVALID, "%s() takes exactly one argument (0 given)", g_methods[m]);
            return jv_undef();
        }
        int64_t k = 0;
        for (size_t i = 0; i < self.l->n; i++)
            if (jx_equal(self.l->items[i], *x)) {
                if (m == M_INDEX)
                    return jv_int((int64_t)i);
                k++;
            }
        if (m == M_INDEX) {
            jx_fail(cx, HR_ERR_INVALID, "list.index(x): x not in list");
            return jv_undef();
        }
        return jv_int(k);
    }
    if (self.type == JV_LOOP && m == M_CYCLE) {
        if (a->n_pos == 0) {
            jx_fail(cx, HR_ERR_INVALID, "no items for cycling given");
            return jv_undef();
        }
        struct jv idx = jx_getattr(cx, self, "index0", 6);
        return a->pos[(size_t)idx.i % a->n_pos];
    }
    jx_fail(cx, HR_ERR_INVALID, "'%s' object has no method '%s'", jx_type_name(self),
            g_methods[m]);
    return jv_undef();
}

/* ---- globals ---- */

enum { G_RANGE, G_DICT, G_NAMESPACE, G_RAISE, G_STRFTIME, G_COUNT };
static const char *const g_globals[G_COUNT] = {"range", "dict", "namespace", "raise_exception",
                                               "strftime_now"};

int jx_global_find(const char *name)
{
    for (int i = 0; i < G_COUNT; i++)
        if (strcmp(g_globals[i], name) == 0)
            return i;
    return -1;
}

const char *jx_global_name(int id) { return id >= 0 && id < G_COUNT ? g_globals[id] : "?"; }

/* Jinja's sandbox refuses ranges longer than this (MAX_RANGE). */
enum { JX_MAX_RANGE = 100000 };

static struct jv fn_range(struct jx_ctx *cx, const struct jargs *a)
{
    if (a->n_kw) {
        jx_fail(cx, HR_ERR_INVALID, "range() takes no keyword arguments");
        return jv_undef();
    }
    if (a->n_pos < 1 || a->n_pos > 3) {
        jx_fail(cx, HR_ERR_INVALID, "range expected at most 3 arguments, got %zu", a->n_pos);
        return jv_undef();
    }
    int64_t v[3] = {0, 0, 1};
    for (size_t i = 0; i < a->n_pos; i++) {
        struct jv x = a->pos[i];
        if (x.type != JV_INT && x.type != JV_BOOL) {
            if (x.type == JV_UNDEF)
                jx_undef_fail(cx, x);
            else
                jx_fail(cx, HR_ERR_INVALID, "'%s' object cannot be interpreted as an integer",
                        jx_type_name(x));
            return jv_undef();
        }
        v[i] = x.type == JV_INT ? x.i : x.b;
    }
    int64_t start = a->n_pos == 1 ? 0 : v[0], stop = a->n_pos == 1 ? v[0] : v[1];
    int64_t step = a->n_pos == 3 ? v[2] : 1;
    if (step == 0) {
        jx_fail(cx, HR_ERR_INVALID, "range() arg 3 must not be zero");
        return jv_undef();
    }
    /* Length computed in 128 bits: the bounds may be anywhere in int64. */
    __int128 len = 0;
    if (step > 0 && stop > start)
        len = ((__int128)stop - start + step - 1) / step;
    else if (step < 0 && stop < start)
        len = ((__int128)start - stop - step - 1) / -step;
    if (len > JX_MAX_RANGE) {
        jx_fail(cx, HR_ERR_LIMIT,
                "Range too big. The sandbox blocks ranges larger than MAX_RANGE (%d).",
                JX_MAX_RANGE);
        return jv_undef();
    }
    struct jv out = jx_list(cx, (size_t)len);
    for (size_t i = 0; cx->st == HR_OK && i < (size_t)len; i++)
        out.l->items[i] = jv_int(start + (int64_t)i * step);
    return cx->st == HR_OK ? out : jv_undef();
}

static struct jv fn_dict(struct jx_ctx *cx, const struct jargs *a, bool ns)
{
    struct jdict *d = jx_dict_new(cx, a->n_kw);
    if (!d)
        return jv_undef();
    if (a->n_pos > 1) {
        jx_fail(cx, HR_ERR_INVALID, "%s expected at most 1 argument, got %zu",
                ns ? "namespace" : "dict", a->n_pos);
        return jv_undef();
    }
    if (a->n_pos == 1) {
        struct jv src = a->pos[0];
        if (src.type == JV_DICT || src.type == JV_NS) {
            for (size_t i = 0; i < src.d->n; i++)
                jx_dict_set(cx, d, src.d->keys[i], src.d->vals[i]);
        } else if (src.type == JV_LIST) {
            for (size_t i = 0; i < src.l->n && cx->st == HR_OK; i++) {
                struct jv p = src.l->items[i];
                if (p.type != JV_LIST || p.l->n != 2) {
                    jx_fail(cx, HR_ERR_INVALID,
                            "dictionary update sequence element #%zu has the wrong length", i);
                    return jv_undef();
                }
                jx_dict_set(cx, d, p.l->items[0], p.l->items[1]);
            }
        } else {
            jx_fail(cx, HR_ERR_INVALID, "'%s' object is not iterable", jx_type_name(src));
            return jv_undef();
        }
    }
    for (size_t i = 0; i < a->n_kw && cx->st == HR_OK; i++)
        jx_dict_set(cx, d, jx_str_c(cx, a->kw_names[i]), a->kw[i]);
    if (cx->st != HR_OK)
        return jv_undef();
    return (struct jv){.type = ns ? JV_NS : JV_DICT, .d = d};
}

static struct jv fn_raise(struct jx_ctx *cx, const struct jargs *a)
{
    const struct jv *m = jx_arg(a, 0, "message");
    struct jbuf b = {0};
    if (m && !jx_to_str(cx, &b, *m))
        return jv_undef();
    if (!jx_buf_putc(cx, &b, '\0'))
        return jv_undef();
    if (cx->st == HR_OK && !cx->raised)
        cx->raised = strdup(b.p);
    jx_fail(cx, HR_ERR_INVALID, "%s", b.p);
    return jv_undef();
}

static struct jv fn_strftime(struct jx_ctx *cx, const struct jargs *a)
{
    const struct jv *f = jx_arg(a, 0, "format");
    if (!f || f->type != JV_STR) {
        jx_fail(cx, HR_ERR_INVALID, "strftime_now() needs a format string");
        return jv_undef();
    }
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    char out[512];
    size_t n = strftime(out, sizeof(out), f->s->s, &tm);
    return jx_str(cx, out, n);
}

struct jv jx_global_call(struct jx_ctx *cx, int id, const struct jargs *a)
{
    switch (id) {
    case G_RANGE:
        return fn_range(cx, a);
    case G_DICT:
        return fn_dict(cx, a, false);
    case G_NAMESPACE:
        return fn_dict(cx, a, true);
    case G_RAISE:
        return fn_raise(cx, a);
    case G_STRFTIME:
        return fn_strftime(cx, a);
    }
    return jv_undef();
}
