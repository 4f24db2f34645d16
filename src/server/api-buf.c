/*
 * api-buf.c - the growable output buffer of api.h and the JSON text helpers
 * of api-json.h.
 *
 * A failed append leaves the buffer exactly as it was, so a writer that
 * runs out of memory halfway through a message can cut back to where the
 * message began and the server never sends half of one.
 */
#include "server/api-json.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for `extra` more bytes plus the terminating NUL. */
static enum hr_status buf_reserve(struct hr_api_buf *b, size_t extra)
{
    if (extra > SIZE_MAX - 1 - b->len) return HR_ERR_NOMEM;
    size_t need = b->len + extra + 1;
    if (need <= b->cap) return HR_OK;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    char *d = realloc(b->data, cap);
    if (!d) return HR_ERR_NOMEM;
    b->data = d;
    b->cap = cap;
    return HR_OK;
}

enum hr_status hr_api_buf_put(struct hr_api_buf *b, const char *s, size_t n)
{
    enum hr_status st = buf_reserve(b, n);
    if (st != HR_OK) return st;
    if (n) memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
    return HR_OK;
}

enum hr_status hr_api_buf_printf(struct hr_api_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) return HR_ERR_INVALID; /* an encoding error; no format we use has one */
    if ((size_t)n < sizeof(small)) return hr_api_buf_put(b, small, (size_t)n);
    enum hr_status st = buf_reserve(b, (size_t)n);
    if (st != HR_OK) return st;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return HR_OK;
}

void hr_api_buf_reset(struct hr_api_buf *b)
{
    b->len = 0;
    if (b->data) b->data[0] = '\0';
}

void hr_api_buf_free(struct hr_api_buf *b)
{
    if (!b) return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- JSON text ---- */

void hr_api_json_raw(struct hr_api_json *j, const char *s, size_t n)
{
    if (j->st == HR_OK) j->st = hr_api_buf_put(j->b, s, n);
}

void hr_api_json_lit(struct hr_api_json *j, const char *s)
{
    hr_api_json_raw(j, s, strlen(s));
}

void hr_api_json_u64(struct hr_api_json *j, uint64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof(t), "%llu", (unsigned long long)v);
    hr_api_json_raw(j, t, (size_t)n);
}

void hr_api_json_i64(struct hr_api_json *j, int64_t v)
{
    char t[24];
    int n = snprintf(t, sizeof(t), "%lld", (long long)v);
    hr_api_json_raw(j, t, (size_t)n);
}

/* The length of the valid UTF-8 character at s (n > 0 bytes left), or 0
 * when it is not one: overlongs, surrogates and values above U+10FFFF are
 * invalid, as in RFC 3629. */
static size_t utf8_char_len(const unsigned char *s, size_t n)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t len;
    unsigned lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (c >= 0xC2 && c <= 0xDF)
        len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0)
            lo = 0xA0;
        else if (c == 0xED)
            hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0)
            lo = 0x90;
        else if (c == 0xF4)
            hi = 0x8F;
    } else
        return 0;
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

void hr_api_json_str_body(struct hr_api_json *j, const char *s, size_t n)
{
    if (n == 0) return;
    const unsigned char *u = (const unsigned char *)s;
    size_t run = 0; /* start of the bytes not yet copied */
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0x80) {
            size_t k = utf8_char_len(u + i, n - i);
            if (k) {
                i += k;
                continue;
            }
        }
        hr_api_json_raw(j, s + run, i - run);
        char esc[8];
        const char *e = esc;
        size_t en = 2;
        switch (c) {
        case '"':
            e = "\\\"";
            break;
        case '\\':
            e = "\\\\";
            break;
        case '\n':
            e = "\\n";
            break;
        case '\r':
            e = "\\r";
            break;
        case '\t':
            e = "\\t";
            break;
        case '\b':
            e = "\\b";
            break;
        case '\f':
            e = "\\f";
            break;
        default:
            if (c < 0x20) {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
                en = 6;
            } else {
                e = "\xEF\xBF\xBD"; /* U+FFFD for a byte that starts no character */
                en = 3;
            }
        }
        hr_api_json_raw(j, e, en);
        i++;
        run = i;
    }
    hr_api_json_raw(j, s + run, n - run);
}

void hr_api_json_str(struct hr_api_json *j, const char *s, size_t n)
{
    hr_api_json_raw(j, "\"", 1);
    hr_api_json_str_body(j, s, n);
    hr_api_json_raw(j, "\"", 1);
}

void hr_api_json_cstr(struct hr_api_json *j, const char *s)
{
    if (s)
        hr_api_json_str(j, s, strlen(s));
    else
        hr_api_json_lit(j, "null");
}
