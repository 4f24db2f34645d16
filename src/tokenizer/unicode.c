/*
 * unicode.c - UTF-8 in llama.cpp's lenient reading and in the strict one,
 * and GPT-2's byte-to-code-point spelling. See unicode.h.
 */
#include "tokenizer/unicode.h"

size_t hr_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t b = s[0];
    if (b < 0x80) {
        *cp = b;
        return 1;
    }
    /* Lead byte -> sequence length; continuation and 0xF8.. leads are bad. */
    size_t len = (b & 0x40) == 0 ? 0 : (b & 0x20) == 0 ? 2 : (b & 0x10) == 0 ? 3 : (b & 0x08) == 0 ? 4 : 0;
    if (len == 0 || len > n)
        goto bad;
    uint32_t v = b & (0x7Fu >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            goto bad;
        v = (v << 6) | (s[i] & 0x3Fu);
    }
    *cp = v;
    return len;
bad:
    *cp = 0xFFFD;
    return 1;
}

size_t hr_utf8_encode(uint32_t cp, uint8_t out[4])
{
    if (cp < 0x80) {
        out[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (uint8_t)(0xC0 | (cp >> 6));
        out[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | (cp >> 12));
        out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    if (cp < 0x110000) {
        out[0] = (uint8_t)(0xF0 | (cp >> 18));
        out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
        out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[3] = (uint8_t)(0x80 | (cp & 0x3F));
        return 4;
    }
    return 0;
}

/* Bytes GPT-2 spells as themselves: the printable Latin-1 ones. */
static int gpt2_is_direct(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
}

uint32_t hr_gpt2_byte_to_cp(uint8_t b)
{
    if (gpt2_is_direct(b))
        return b;
    /* The others, in byte order, take U+0100, U+0101, ... */
    uint32_t n = 0;
    for (unsigned c = 0; c < b; c++)
        n += !gpt2_is_direct(c);
    return 0x100 + n;
}

int hr_gpt2_cp_to_byte(uint32_t cp)
{
    if (cp < 0x100)
        return gpt2_is_direct(cp) ? (int)cp : -1;
    if (cp >= 0x100 + 68)
        return -1;
    uint32_t n = cp - 0x100;
    for (unsigned c = 0; c < 256; c++)
        if (!gpt2_is_direct(c) && n-- == 0)
            return (int)c;
    return -1;
}

enum hr_utf8_seq hr_utf8_next(const uint8_t *s, size_t n, size_t *len)
{
    uint8_t b = s[0];
    if (b < 0x80) {
        *len = 1;
        return HR_UTF8_OK;
    }
    size_t need;
    uint8_t lo = 0x80, hi = 0xBF; /* the allowed range of the second byte */
    if (b >= 0xC2 && b <= 0xDF) {
        need = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        need = 3;
        if (b == 0xE0)
            lo = 0xA0; /* no overlongs */
        if (b == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (b >= 0xF0 && b <= 0xF4) {
        need = 4;
        if (b == 0xF0)
            lo = 0x90;
        if (b == 0xF4)
            hi = 0x8F; /* nothing above U+10FFFF */
    } else {
        *len = 1;
        return HR_UTF8_BAD;
    }
    for (size_t i = 1; i < need; i++) {
        if (i >= n) {
            *len = n;
            return HR_UTF8_PARTIAL;
        }
        uint8_t c = s[i];
        if (c < (i == 1 ? lo : 0x80) || c > (i == 1 ? hi : 0xBF)) {
            *len = i;
            return HR_UTF8_BAD;
        }
    }
    *len = need;
    return HR_UTF8_OK;
}
