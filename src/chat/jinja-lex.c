/*
 * jinja-lex.c - template source to tokens, with Jinja's whitespace rules.
 *
 * Whitespace decides byte identity more than anything else a template
 * does, so this follows jinja2/lexer.py (3.1) closely:
 *
 *   - Newlines. The source is split as str.splitlines() splits (\n, \r\n,
 *     \r, \v, \f, \x1c-\x1e, U+0085, U+2028, U+2029) and joined with "\n";
 *     a single trailing newline is thereby dropped (keep_trailing_newline
 *     is off in transformers' environment).
 *   - `{%-`, `{{-`, `{#-` strip all whitespace before the tag; `-%}`,
 *     `-}}`, `-#}` all whitespace after it.
 *   - lstrip_blocks: spaces and tabs between the start of a line and a
 *     `{%` or `{#` tag are removed, unless the tag is `{%+`. "Start of a
 *     line" means the text before the tag holds a newline, or the previous
 *     token ended with one (Jinja's `line_starting`; true at the start).
 *   - trim_blocks: one newline right after `%}` or `#}` is removed, unless
 *     the tag ends with `+%}`.
 *   - Tag ends are recognized only when brackets inside the tag balance, so
 *     `{{ {'a': {'b': 1}} }}` works.
 *   - `{% raw %}...{% endraw %}` is text, lexed here.
 *
 * String literals are decoded as Python's "unicode-escape" codec does on
 * them: \n \t \r \\ \' \" \a \b \f \v, octal, \xhh, \uXXXX, \UXXXXXXXX;
 * an unknown escape keeps its backslash.
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja-impl.h"

struct lexer {
    struct jx_arena *a;
    const char *s;
    size_t n, pos;
    int line;
    bool line_starting;
    struct jtoken *toks;
    size_t n_toks, cap;
    struct hr_err *err;
    enum hr_status st;
};

static enum hr_status lex_fail(struct lexer *L, int line, const char *fmt, const char *arg)
{
    if (L->st == HR_OK) {
        char msg[300];
        snprintf(msg, sizeof(msg), fmt, arg);
        L->st = hr_err_set(L->err, HR_ERR_INVALID, "line %d: %s", line, msg);
    }
    return L->st;
}

static struct jtoken *push(struct lexer *L, enum jt_kind kind, int line)
{
    if (L->n_toks == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        struct jtoken *t = jx_alloc(L->a, cap * sizeof(*t));
        if (!t) {
            L->st = hr_err_set(L->err, HR_ERR_NOMEM, "out of memory lexing the template");
            return NULL;
        }
        if (L->n_toks)
            memcpy(t, L->toks, L->n_toks * sizeof(*t));
        L->toks = t;
        L->cap = cap;
    }
    struct jtoken *t = &L->toks[L->n_toks++];
    memset(t, 0, sizeof(*t));
    t->kind = (uint8_t)kind;
    t->line = line;
    return t;
}

static int count_lines(const char *s, size_t n)
{
    int k = 0;
    for (size_t i = 0; i < n; i++)
        k += s[i] == '\n';
    return k;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* Emits text s[0..n) (maybe empty: then nothing). */
static void emit_text(struct lexer *L, const char *s, size_t n, int line)
{
    if (n == 0)
        return;
    char *p = jx_alloc(L->a, n + 1);
    struct jtoken *t = p ? push(L, JT_TEXT, line) : NULL;
    if (!t) {
        if (L->st == HR_OK)
            L->st = hr_err_set(L->err, HR_ERR_NOMEM, "out of memory lexing the template");
        return;
    }
    memcpy(p, s, n);
    t->s = p;
    t->len = n;
}

/* Applies `-` or lstrip_blocks to the text before a tag; returns the kept length. */
static size_t strip_before(struct lexer *L, const char *text, size_t n, char sign, bool is_var)
{
    if (sign == '-') {
        while (n && is_space(text[n - 1]))
            n--;
        return n;
    }
    if (sign == '+' || is_var)
        return n;
    size_t l = n;
    while (l && text[l - 1] != '\n')
        l--;
    if (l == 0 && !L->line_starting)
        return n;
    for (size_t i = l; i < n; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\v' && text[i] != '\f' &&
            text[i] != '\r')
            return n;
    return l;
}

/* After a tag end at L->pos: `-` strips whitespace, else trim_blocks
 * eats one newline (for blocks and comments). Updates line_starting. */
static void after_tag(struct lexer *L, char sign, bool trim)
{
    size_t start = L->pos;
    if (sign == '-') {
        while (L->pos < L->n && is_space(L->s[L->pos]))
            L->pos++;
    } else if (trim && sign != '+' && L->pos < L->n && L->s[L->pos] == '\n') {
        L->pos++;
    }
    L->line += count_lines(L->s + start, L->pos - start);
    L->line_starting = L->pos > start && L->s[L->pos - 1] == '\n';
}

/* Decodes a string literal's body as Python's unicode-escape codec does. */
static char *decode_string(struct lexer *L, const char *s, size_t n, size_t *out_len)
{
    char *o = jx_alloc(L->a, n + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '\\' || i + 1 == n) {
            o[k++] = s[i];
            continue;
        }
        char c = s[++i];
        uint32_t cp = 0;
        int digits = 0;
        switch (c) {
        case '\n':
            continue; /* a backslash-newline joins lines */
        case '\\': o[k++] = '\\'; continue;
        case '\'': o[k++] = '\''; continue;
        case '"': o[k++] = '"'; continue;
        case 'a': o[k++] = '\a'; continue;
        case 'b': o[k++] = '\b'; continue;
        case 'f': o[k++] = '\f'; continue;
        case 'n': o[k++] = '\n'; continue;
        case 'r': o[k++] = '\r'; continue;
        case 't': o[k++] = '\t'; continue;
        case 'v': o[k++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        default:
            if (c >= '0' && c <= '7') {
                int m = 0;
                while (m < 3 && i < n && s[i] >= '0' && s[i] <= '7')
                    cp = cp * 8 + (uint32_t)(s[i++] - '0'), m++;
                i--;
                digits = -1;
                break;
            }
            o[k++] = '\\';
            o[k++] = c;
            continue;
        }
        if (digits > 0) {
            for (int d = 0; d < digits; d++) {
                char h = i + 1 + (size_t)d < n ? s[i + 1 + (size_t)d] : 0;
                if (!isxdigit((unsigned char)h)) {
                    lex_fail(L, L->line, "%s", "truncated \\x, \\u or \\U escape in a string");
                    return NULL;
                }
                cp = cp * 16 + (uint32_t)(isdigit((unsigned char)h) ? h - '0' : (h | 32) - 'a' + 10);
            }
            i += (size_t)digits;
        }
        if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
            /* Python would keep a lone surrogate in the str and fail only
             * when printing it; we refuse it up front. */
            lex_fail(L, L->line, "%s", "string escape is not a valid code point");
            return NULL;
        }
        if (cp < 0x80) {
            o[k++] = (char)cp;
        } else if (cp < 0x800) {
            o[k++] = (char)(0xc0 | (cp >> 6));
            o[k++] = (char)(0x80 | (cp & 0x3f));
        } else if (cp < 0x10000) {
            o[k++] = (char)(0xe0 | (cp >> 12));
            o[k++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            o[k++] = (char)(0x80 | (cp & 0x3f));
        } else {
            o[k++] = (char)(0xf0 | (cp >> 18));
            o[k++] = (char)(0x80 | ((cp >> 12) & 0x3f));
            o[k++] = (char)(0x80 | ((cp >> 6) & 0x3f));
            o[k++] = (char)(0x80 | (cp & 0x3f));
        }
    }
    o[k] = '\0';
    *out_len = k;
    return o;
}

static const char *const g_ops[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%",
                                    "~",  "[",  "]",  "(",  ")",  "{", "}", "<", ">", "=", ".",
                                    ":",  "|",  ",",  ";"};

/* Lexes the inside of a tag until its end marker; returns the end's sign
 * ('-', '+' or 0) or -1 on error. `close` is '}' for {{ }} or '%'/'#'. */
static int lex_tag(struct lexer *L, char close)
{
    int depth = 0;
    int start_line = L->line;
    for (;;) {
        while (L->pos < L->n && is_space(L->s[L->pos])) {
            if (L->s[L->pos] == '\n')
                L->line++;
            L->pos++;
        }
        if (L->pos >= L->n) {
            lex_fail(L, start_line, "%s",
                     close == '}' ? "unexpected end of template, expected '}}'"
                                  : "unexpected end of template, expected '%}'");
            return -1;
        }
        const char *p = L->s + L->pos;
        size_t left = L->n - L->pos;
        if (depth == 0) {
            char sign = 0;
            const char *q = p;
            if ((*q == '-' || *q == '+') && left > 1) {
                sign = *q;
                q++;
            }
            if ((size_t)(q - p) + 2 <= left && q[0] == close && q[1] == '}' &&
                !(sign == '+' && close == '}')) {
                L->pos += (size_t)(q - p) + 2;
                return sign;
            }
        }
        int line = L->line;
        unsigned char c = (unsigned char)*p;
        if (isalpha(c) || c == '_' || c >= 0x80) {
            size_t k = 1;
            while (k < left && (isalnum((unsigned char)p[k]) || p[k] == '_' ||
                                (unsigned char)p[k] >= 0x80))
                k++;
            struct jtoken *t = push(L, JT_NAME, line);
            char *s = jx_alloc(L->a, k + 1);
            if (!t || !s)
                return -1;
            memcpy(s, p, k);
            t->s = s;
            t->len = k;
            L->pos += k;
        } else if (isdigit(c)) {
            /* Integers (with _ separators, 0x/0o/0b), floats with a
             * fraction and/or an exponent, as jinja's integer_re/float_re. */
            size_t k = 0;
            char buf[128];
            size_t bn = 0;
            bool is_float = false;
            int base = 10;
            if (c == '0' && left > 1 && strchr("xXoObB", p[1])) {
                base = p[1] == 'x' || p[1] == 'X' ? 16 : p[1] == 'o' || p[1] == 'O' ? 8 : 2;
                k = 2;
                while (k < left && (isxdigit((unsigned char)p[k]) || p[k] == '_')) {
                    if (p[k] != '_' && bn < sizeof(buf) - 1)
                        buf[bn++] = p[k];
                    k++;
                }
            } else {
                while (k < left && (isdigit((unsigned char)p[k]) || (p[k] == '_' && k + 1 < left && isdigit((unsigned char)p[k + 1])))) {
                    if (p[k] != '_' && bn < sizeof(buf) - 1)
                        buf[bn++] = p[k];
                    k++;
                }
                if (k + 1 < left && p[k] == '.' && isdigit((unsigned char)p[k + 1])) {
                    is_float = true;
                    buf[bn++] = '.';
                    k++;
                    while (k < left && (isdigit((unsigned char)p[k]) || (p[k] == '_' && k + 1 < left && isdigit((unsigned char)p[k + 1])))) {
                        if (p[k] != '_' && bn < sizeof(buf) - 1)
                            buf[bn++] = p[k];
                        k++;
                    }
                }
                if (k < left && (p[k] == 'e' || p[k] == 'E')) {
                    size_t e = k + 1;
                    if (e < left && (p[e] == '+' || p[e] == '-'))
                        e++;
                    if (e < left && isdigit((unsigned char)p[e])) {
                        is_float = true;
                        if (bn < sizeof(buf) - 1)
                            buf[bn++] = 'e';
                        for (size_t j = k + 1; j < e && bn < sizeof(buf) - 1; j++)
                            buf[bn++] = p[j];
                        k = e;
                        while (k < left && isdigit((unsigned char)p[k])) {
                            if (bn < sizeof(buf) - 1)
                                buf[bn++] = p[k];
                            k++;
                        }
                    }
                }
            }
            buf[bn] = '\0';
            struct jtoken *t = push(L, is_float ? JT_FLOAT : JT_INT, line);
            if (!t)
                return -1;
            if (is_float) {
                t->f = strtod(buf, NULL);
            } else {
                char *end;
                unsigned long long v = strtoull(buf, &end, base);
                if (bn == 0 || *end || v > (unsigned long long)INT64_MAX) {
                    lex_fail(L, line, "integer literal '%s' is out of range", buf);
                    return -1;
                }
                t->i = (int64_t)v;
            }
            L->pos += k;
        } else if (c == '\'' || c == '"') {
            size_t k = 1;
            while (k < left && p[k] != (char)c) {
                if (p[k] == '\\' && k + 1 < left)
                    k++;
                k++;
            }
            if (k >= left) {
                lex_fail(L, line, "%s", "unexpected end of string");
                return -1;
            }
            size_t len;
            char *s = decode_string(L, p + 1, k - 1, &len);
            struct jtoken *t = s ? push(L, JT_STRING, line) : NULL;
            if (!t) {
                if (L->st == HR_OK)
                    L->st = hr_err_set(L->err, HR_ERR_NOMEM, "out of memory lexing the template");
                return -1;
            }
            t->s = s;
            t->len = len;
            L->line += count_lines(p, k + 1);
            L->pos += k + 1;
        } else {
            const char *op = NULL;
            for (size_t i = 0; i < sizeof(g_ops) / sizeof(g_ops[0]); i++) {
                size_t ol = strlen(g_ops[i]);
                if (ol <= left && memcmp(p, g_ops[i], ol) == 0) {
                    op = g_ops[i];
                    break;
                }
            }
            if (!op) {
                char ch[2] = {(char)c, 0};
                lex_fail(L, line, "unexpected char '%s'", ch);
                return -1;
            }
            if (*op == '(' || *op == '[' || *op == '{')
                depth++;
            else if (*op == ')' || *op == ']' || *op == '}') {
                if (depth == 0) {
                    lex_fail(L, line, "unexpected '%s'", op);
                    return -1;
                }
                depth--;
            }
            struct jtoken *t = push(L, JT_OP, line);
            if (!t)
                return -1;
            t->s = op;
            t->len = strlen(op);
            L->pos += t->len;
        }
        if (L->st != HR_OK)
            return -1;
    }
}

/* Matches `{%[-+]? *name *[-+]?%}` at s[i]; returns its length (0: no). */
static size_t match_tag_word(const char *s, size_t n, size_t i, const char *word, char *lsign,
                             char *rsign)
{
    size_t j = i;
    if (j + 2 > n || s[j] != '{' || s[j + 1] != '%')
        return 0;
    j += 2;
    *lsign = 0;
    if (j < n && (s[j] == '-' || s[j] == '+'))
        *lsign = s[j++];
    while (j < n && is_space(s[j]))
        j++;
    size_t wl = strlen(word);
    if (j + wl > n || memcmp(s + j, word, wl) != 0)
        return 0;
    j += wl;
    if (j < n && (isalnum((unsigned char)s[j]) || s[j] == '_'))
        return 0;
    while (j < n && is_space(s[j]))
        j++;
    *rsign = 0;
    if (j < n && (s[j] == '-' || s[j] == '+'))
        *rsign = s[j++];
    if (j + 2 > n || s[j] != '%' || s[j + 1] != '}')
        return 0;
    return j + 2 - i;
}

/* Jinja's newline normalization: splitlines() then "\n".join(). */
static char *normalize(struct jx_arena *a, const char *s, size_t n, size_t *out_n)
{
    char *o = jx_alloc(a, n + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        size_t skip = 0;
        if (c == '\r' && i + 1 < n && s[i + 1] == '\n')
            skip = 1;
        else if (c == '\n' || c == '\r' || c == '\v' || c == '\f' || c == 0x1c || c == 0x1d ||
                 c == 0x1e)
            skip = 0;
        else if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] == 0x85)
            skip = 1;
        else if (c == 0xe2 && i + 2 < n && (unsigned char)s[i + 1] == 0x80 &&
                 ((unsigned char)s[i + 2] == 0xa8 || (unsigned char)s[i + 2] == 0xa9))
            skip = 2;
        else {
            o[k++] = (char)c;
            continue;
        }
        o[k++] = '\n';
        i += skip;
    }
    /* "a\n".splitlines() is ["a"]: one trailing line break disappears. */
    if (k && o[k - 1] == '\n')
        k--;
    o[k] = '\0';
    *out_n = k;
    return o;
}

enum hr_status jx_lex(struct jx_arena *a, const char *src, size_t len, struct jtoken **out,
                      size_t *n_out, struct hr_err *err)
{
    struct lexer L = {.a = a, .line = 1, .line_starting = true, .err = err};
    L.s = normalize(a, src, len, &L.n);
    if (!L.s)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory lexing the template");
    size_t text_start = 0;
    int text_line = 1;
    while (L.st == HR_OK) {
        /* Find the next tag opener. */
        size_t i = L.pos;
        const char *s = L.s;
        while (i + 1 < L.n && !(s[i] == '{' && (s[i + 1] == '{' || s[i + 1] == '%' || s[i + 1] == '#')))
            i++;
        if (i + 1 >= L.n) {
            emit_text(&L, s + text_start, L.n - text_start, text_line);
            break;
        }
        L.line += count_lines(s + L.pos, i - L.pos);
        char kind = s[i + 1];
        char sign = i + 2 < L.n && (s[i + 2] == '-' || s[i + 2] == '+') ? s[i + 2] : 0;
        char rs = 0;
        bool raw = kind == '%' && match_tag_word(s, L.n, i, "raw", &sign, &rs) > 0;
        size_t keep = strip_before(&L, s + text_start, i - text_start, sign, kind == '{');
        emit_text(&L, s + text_start, keep, text_line);
        if (raw) {
            size_t tl = match_tag_word(s, L.n, i, "raw", &sign, &rs);
            size_t body = i + tl, j = body;
            char es = 0, ers = 0;
            size_t el = 0;
            while (j < L.n && !(el = match_tag_word(s, L.n, j, "endraw", &es, &ers)))
                j++;
            if (j >= L.n)
                return hr_err_set(err, HR_ERR_INVALID, "line %d: missing end of raw directive",
                                  L.line);
            size_t b0 = body, b1 = j;
            if (rs == '-')
                while (b0 < b1 && is_space(s[b0]))
                    b0++;
            /* The endraw tag strips like any block tag: `-` all
             * whitespace, lstrip_blocks the indentation of its line. */
            L.line_starting = false;
            size_t kept = strip_before(&L, s + b0, b1 - b0, es, false);
            int raw_line = L.line;
            emit_text(&L, s + b0, kept, raw_line);
            L.line += count_lines(s + i, j + el - i);
            L.pos = j + el;
            after_tag(&L, ers, true);
            text_start = L.pos;
            text_line = L.line;
            continue;
        }
        int line = L.line;
        L.pos = i + 2 + (sign ? 1 : 0);
        if (kind == '#') {
            size_t j = L.pos;
            while (j + 1 < L.n && !(s[j] == '#' && s[j + 1] == '}'))
                j++;
            if (j + 1 >= L.n)
                return hr_err_set(err, HR_ERR_INVALID, "line %d: missing end of comment tag",
                                  line);
            char es = j > L.pos && (s[j - 1] == '-' || s[j - 1] == '+') ? s[j - 1] : 0;
            L.line += count_lines(s + L.pos, j - L.pos);
            L.pos = j + 2;
            after_tag(&L, es, true);
        } else {
            struct jtoken *t = push(&L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, line);
            if (!t)
                break;
            int es = lex_tag(&L, kind == '{' ? '}' : '%');
            if (es < 0)
                break;
            t = push(&L, kind == '{' ? JT_VAR_END : JT_BLOCK_END, L.line);
            if (!t)
                break;
            after_tag(&L, (char)es, kind == '%');
        }
        text_start = L.pos;
        text_line = L.line;
    }
    if (L.st != HR_OK)
        return L.st;
    if (!push(&L, JT_EOF, L.line))
        return L.st;
    *out = L.toks;
    *n_out = L.n_toks;
    return HR_OK;
}
