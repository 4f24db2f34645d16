/*
 * unicode.h - the Unicode facts the tokenizer needs, and llama.cpp's way of
 * reading UTF-8.
 *
 * Code point classes. Pre-tokenizers split text by general category (\p{L},
 * \p{N}, \p{P}, ...) and White_Space. hr_ucd() gives both for any code
 * point from a generated two-stage table (unicode-data.c, Unicode 15.1,
 * the version of llama.cpp's own tables, so a letter added in Unicode 16
 * splits the same way in both). Code points above U+10FFFF are UNDEF.
 *
 * Lenient UTF-8. llama.cpp decodes text with rules of its own, and we must
 * split exactly where it does, so hr_utf8_decode copies them: a lead byte
 * says the length (110xxxxx two, 1110xxxx three, 11110xxx four) and only the
 * continuation bytes' top bits are checked, so overlong forms, surrogates
 * and values up to 0x1FFFFF decode; a stray continuation byte, a 11111xxx
 * lead or a truncated sequence decodes as U+FFFD and consumes one byte.
 *
 * GPT-2 byte encoding. Byte-level BPE vocabularies spell each byte as one
 * printable code point (bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF as
 * themselves, the other 68 as U+0100 upwards in byte order).
 *
 * Everything here is pure and reentrant.
 */
#ifndef HR_TOKENIZER_UNICODE_H
#define HR_TOKENIZER_UNICODE_H

#include <stddef.h>
#include <stdint.h>

/* General category classes; the numbering is fixed by unicode-data.c. */
enum hr_ucat {
    HR_UCAT_UNDEF = 0,  /* Cn: unassigned, noncharacters */
    HR_UCAT_NUMBER = 1, /* Nd Nl No */
    HR_UCAT_LETTER = 2, /* Lu Ll Lt Lm Lo */
    HR_UCAT_SEPARATOR = 3, /* Zs Zl Zp */
    HR_UCAT_MARK = 4,      /* Mn Mc Me */
    HR_UCAT_PUNCT = 5,     /* Pc Pd Pe Pf Pi Po Ps */
    HR_UCAT_SYMBOL = 6,    /* Sc Sk Sm So */
    HR_UCAT_CONTROL = 7,   /* Cc Cf Co Cs */
};
#define HR_UCAT_MASK 7u
#define HR_UCAT_WS   8u /* the White_Space property, or'ed into the class */

extern const uint16_t hr_ucd_block[0x1100];
extern const uint8_t hr_ucd_class[];

/* Class and White_Space bit of `cp`. */
static inline unsigned hr_ucd(uint32_t cp)
{
    if (cp >= 0x110000)
        return HR_UCAT_UNDEF;
    return hr_ucd_class[(size_t)hr_ucd_block[cp >> 8] * 256 + (cp & 255)];
}

/* Length a UTF-8 lead byte announces, as llama.cpp reads it (1 for a
 * continuation byte, 4 for 0xF8-0xFF). */
static inline size_t hr_utf8_len(uint8_t lead)
{
    static const uint8_t len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return len[lead >> 4];
}

/* Decodes one code point at s[0..n) (n >= 1) with llama.cpp's lenient rules
 * (see the top of this file); returns the bytes consumed (1..4). */
size_t hr_utf8_decode(const uint8_t *s, size_t n, uint32_t *cp);

/* Encodes cp (<= 0x10FFFF) into out; returns 1..4, or 0 for a larger value. */
size_t hr_utf8_encode(uint32_t cp, uint8_t out[4]);

/* The code point GPT-2's byte encoding spells byte b with. */
uint32_t hr_gpt2_byte_to_cp(uint8_t b);
/* The byte a GPT-2 code point stands for, or -1 if cp spells no byte. */
int hr_gpt2_cp_to_byte(uint32_t cp);

/*
 * Strict UTF-8 (RFC 3629: no overlongs, no surrogates, nothing above
 * U+10FFFF), for the detokenizer's output. Looks at the sequence starting
 * at s[0] of s[0..n), n >= 1, and returns:
 *   HR_UTF8_OK       *len = the character's length;
 *   HR_UTF8_PARTIAL  the n bytes are a valid start that more bytes could
 *                    complete (*len = n);
 *   HR_UTF8_BAD      *len = the "maximal subpart" to replace with one
 *                    U+FFFD (WHATWG Encoding / Unicode 3.9 convention, the
 *                    one JavaScript's TextDecoder and V8 use).
 */
enum hr_utf8_seq { HR_UTF8_OK, HR_UTF8_PARTIAL, HR_UTF8_BAD };
enum hr_utf8_seq hr_utf8_next(const uint8_t *s, size_t n, size_t *len);

#endif
