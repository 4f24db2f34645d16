/*
 * decode.c - token ids back to text: pieces, whole-sequence decoding, and
 * the streaming detokenizer.
 *
 * Pieces. Every token's decoded bytes are computed once at load
 * (llama.cpp's token-to-piece cache): control, unknown and user-defined
 * tokens decode to their text; normal byte-level BPE tokens are un-spelled
 * from GPT-2's alphabet (a code point outside it gives llama.cpp's
 * "[UNK_BYTE_0x..]" text); normal SentencePiece tokens get spaces for
 * U+2581; byte tokens their byte; unused and undefined tokens nothing.
 *
 * Whole-sequence decoding follows llama_detokenize, including its
 * clean-up of spaces (three in-place passes over the result).
 *
 * Streaming. The same result, produced token by token, must not emit
 * bytes that a later token could still change. Three things can change:
 *
 *   - the first piece's leading space (SentencePiece): known at once;
 *   - the clean-up passes, which look at most three bytes ahead. Each
 *     pass becomes a small transducer that holds back a space (and the
 *     apostrophe or letter after it) until the next byte decides; the
 *     passes are chained like the batch ones;
 *   - UTF-8: a character split across tokens waits for its last byte.
 *
 *     piece -> [first-space strip] -> P1 -> P2 -> P3 -> [UTF-8] -> output
 *
 * With HR_DETOK_PIECES (generated text, as llama.cpp's server streams it)
 * only the UTF-8 stage runs.
 *
 * The transducers are checked against the batch passes by the unit tests
 * and by the fuzz target (same output for every input).
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer-impl.h"
#include "tokenizer/unicode.h"

/* ------------------------------------------------------------------------ */
/* Pieces                                                                   */
/* ------------------------------------------------------------------------ */

struct bytebuf {
    char *p;
    size_t n, cap;
};

static bool buf_put(struct bytebuf *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return false;
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return true;
}

static bool buf_byte(struct bytebuf *b, uint8_t c)
{
    return buf_put(b, &c, 1);
}

/*
 * llama.cpp's token_to_byte: strtol(text.substr(3, 2), 16), so "<0x41>"
 * gives 0x41. Reproduced for odd texts too: leading C-locale space, a sign,
 * a "0x" prefix, stopping at the first non-hex character.
 */
static uint8_t token_to_byte(const char *t, size_t len)
{
    if (len < 3)
        return 0;
    const char *s = t + 3, *e = t + (len < 5 ? len : 5);
    while (s < e && (*s == ' ' || (*s >= '\t' && *s <= '\r')))
        s++;
    bool neg = false;
    if (s < e && (*s == '+' || *s == '-'))
        neg = *s++ == '-';
    if (e - s >= 3 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
        s += 2; /* (cannot happen in two characters; kept for the rule's sake) */
    long v = 0;
    for (; s < e; s++) {
        int d = *s >= '0' && *s <= '9'   ? *s - '0'
                : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10
                : *s >= 'A' && *s <= 'F' ? *s - 'A' + 10
                                         : -1;
        if (d < 0)
            break;
        v = v * 16 + d;
    }
    return (uint8_t)(neg ? -v : v);
}

/* llama_decode_text: GPT-2 spelling back to bytes. */
static bool gpt2_unspell(struct bytebuf *b, const uint8_t *t, size_t len)
{
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        i += hr_utf8_decode(t + i, len - i, &cp);
        int byte = hr_gpt2_cp_to_byte(cp);
        if (byte >= 0) {
            if (!buf_byte(b, (uint8_t)byte))
                return false;
            continue;
        }
        uint8_t enc[4];
        size_t k = hr_utf8_encode(cp, enc);
        char hex[8];
        if (!buf_put(b, "[UNK_BYTE_0x", 12))
            return false;
        for (size_t j = 0; j < k; j++) {
            static const char digits[] = "0123456789abcdef";
            hex[0] = digits[enc[j] >> 4];
            hex[1] = digits[enc[j] & 15];
            if (!buf_put(b, hex, 2))
                return false;
        }
        if (!buf_put(b, t, len) || !buf_put(b, "]", 1))
            return false;
    }
    return true;
}

enum hr_status hr_decode_build_pieces(struct hr_tokenizer *tok, struct hr_err *err)
{
    size_t n = tok->n_vocab ? tok->n_vocab : 1;
    tok->piece_off = malloc(n * sizeof(*tok->piece_off));
    tok->piece_len = malloc(n * sizeof(*tok->piece_len));
    struct bytebuf b = {0};
    if (!tok->piece_off || !tok->piece_len || !buf_put(&b, "", 0))
        goto nomem;
    for (uint32_t id = 0; id < tok->n_vocab; id++) {
        size_t len;
        const char *t = hr_tokenizer_text(tok, (int32_t)id, &len);
        unsigned attr = tok->attr[id];
        size_t start = b.n;
        bool ok = true;
        if (attr & (HR_TOKEN_ATTR_UNKNOWN | HR_TOKEN_ATTR_CONTROL | HR_TOKEN_ATTR_USER_DEFINED)) {
            ok = buf_put(&b, t, len);
        } else if (attr & HR_TOKEN_ATTR_NORMAL) {
            if (tok->type == HR_TOK_TYPE_BPE) {
                ok = gpt2_unspell(&b, (const uint8_t *)t, len);
            } else {
                for (size_t i = 0; i < len && ok; i++) {
                    if (i + 2 < len && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
                        ok = buf_byte(&b, ' ');
                        i += 2;
                    } else {
                        ok = buf_byte(&b, (uint8_t)t[i]);
                    }
                }
            }
        } else if (attr & HR_TOKEN_ATTR_BYTE) {
            ok = buf_byte(&b, token_to_byte(t, len));
        }
        if (!ok || b.n - start > UINT32_MAX)
            goto nomem;
        tok->piece_off[id] = start;
        tok->piece_len[id] = (uint32_t)(b.n - start);
    }
    tok->piece_blob = b.p;
    return HR_OK;
nomem:
    free(b.p);
    return hr_err_set(err, HR_ERR_NOMEM, "out of memory decoding %u tokens", tok->n_vocab);
}

const char *hr_tokenizer_piece(const struct hr_tokenizer *tok, int32_t id, unsigned flags,
                               size_t *len)
{
    if (id < 0 || (uint32_t)id >= tok->n_vocab ||
        (!(flags & HR_DETOK_SPECIAL) &&
         (tok->attr[id] & (HR_TOKEN_ATTR_UNKNOWN | HR_TOKEN_ATTR_CONTROL)))) {
        *len = 0;
        return "";
    }
    *len = tok->piece_len[id];
    return tok->piece_blob + tok->piece_off[id];
}

/* ------------------------------------------------------------------------ */
/* Whole-sequence decoding                                                  */
/* ------------------------------------------------------------------------ */

/* llama_detokenize's three clean-up passes, in place; returns the new length. */
static size_t clean_spaces(char *text, size_t total)
{
    /* 1: " ?", " !", " .", " ," lose the space. */
    size_t t1 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < t1; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ','))
            total--;
        text[total++] = x;
    }
    /* 2: " ' " becomes "'"; the skipped space is overwritten with NUL, so
     * it no longer counts as the space before the next character. */
    size_t t2 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < t2; i++) {
        char x = text[i];
        if (x == '\'' && i + 1 < t2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            total--;
            text[++i] = '\0';
        }
        text[total++] = x;
    }
    /* 3: " 's", " 'm", " 're", " 've" lose the space (not " 't", " 'd", " 'll"). */
    size_t t3 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < t3; i++) {
        char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < t3) {
            char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm')
                total--;
            else if (x1 != 't' && x1 != 'd' && i + 2 < t3) {
                char x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e'))
                    total--;
            }
        }
        text[total++] = x;
    }
    return total;
}

enum hr_status hr_tokenizer_decode(const struct hr_tokenizer *tok, const int32_t *ids, size_t n,
                                   unsigned flags, char **out, size_t *len, struct hr_err *err)
{
    *out = NULL;
    *len = 0;
    bool pieces_only = (flags & HR_DETOK_PIECES) != 0;
    bool remove_space = tok->add_space_prefix && !pieces_only;
    if (flags & HR_DETOK_REMOVE_BOS_EOS) {
        if (tok->add_bos && n > 0 && ids[0] == tok->bos) {
            remove_space = false;
            ids++;
            n--;
        }
        if (tok->add_eos && n > 0 && ids[n - 1] == tok->eos)
            n--;
    }
    struct bytebuf b = {0};
    if (!buf_put(&b, "", 0))
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        size_t pl;
        const char *p = hr_tokenizer_piece(tok, ids[i], flags, &pl);
        if (remove_space && pl > 0 && p[0] == ' ')
            p++, pl--;
        remove_space = false;
        if (!buf_put(&b, p, pl))
            goto nomem;
    }
    if (tok->clean_spaces && !pieces_only) {
        b.n = clean_spaces(b.p, b.n);
        b.p[b.n] = '\0';
    }
    *out = b.p;
    *len = b.n;
    return HR_OK;
nomem:
    free(b.p);
    return hr_err_set(err, HR_ERR_NOMEM, "out of memory decoding %zu tokens", n);
}

/* ------------------------------------------------------------------------ */
/* UTF-8 replacement                                                        */
/* ------------------------------------------------------------------------ */

static const char g_fffd[3] = {'\xef', '\xbf', '\xbd'};

/* Emits the complete characters of p[0..n) (U+FFFD for invalid subparts);
 * returns how many trailing bytes are an incomplete character (at most 3),
 * or, with at_end, replaces those too and returns 0. */
static size_t utf8_flush(struct bytebuf *out, const uint8_t *p, size_t n, bool at_end, bool *ok)
{
    size_t i = 0;
    while (i < n) {
        size_t l;
        enum hr_utf8_seq r = hr_utf8_next(p + i, n - i, &l);
        if (r == HR_UTF8_OK) {
            /* Copy the run of complete characters in one go. */
            size_t j = i + l;
            while (j < n && p[j] < 0x80)
                j++;
            *ok &= buf_put(out, p + i, j - i);
            i = j;
        } else if (r == HR_UTF8_BAD) {
            *ok &= buf_put(out, g_fffd, 3);
            i += l;
        } else {
            if (!at_end)
                return n - i;
            *ok &= buf_put(out, g_fffd, 3);
            i = n;
        }
    }
    return 0;
}

enum hr_status hr_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_len,
                                struct hr_err *err)
{
    struct bytebuf b = {0};
    bool ok = buf_put(&b, "", 0);
    if (ok)
        utf8_flush(&b, (const uint8_t *)s, n, true, &ok);
    if (!ok) {
        free(b.p);
        *out = NULL;
        *out_len = 0;
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    *out = b.p;
    *out_len = b.n;
    return HR_OK;
}

/* ------------------------------------------------------------------------ */
/* Streaming                                                                */
/* ------------------------------------------------------------------------ */

struct hr_detok {
    const struct hr_tokenizer *tok;
    unsigned flags;
    bool first;        /* no token seen yet: strip the first piece's space */
    bool p1_space;     /* pass 1 holds a space */
    uint8_t n_p2;      /* pass 2 holds nothing (0), " " (1) or " '" (2) */
    uint8_t p3[3];     /* pass 3 holds " ", " '", " 'r" or " 'v" */
    uint8_t n_p3;
    uint8_t utf8[4];   /* an incomplete character */
    uint8_t n_utf8;
    struct bytebuf out;
    bool ok; /* false after an allocation failure */
};

/* The last stage: UTF-8 completion. */
static void st_utf8(struct hr_detok *d, uint8_t c)
{
    if (d->n_utf8 == 0 && c < 0x80) {
        d->ok &= buf_byte(&d->out, c);
        return;
    }
    d->utf8[d->n_utf8++] = c;
    size_t keep = utf8_flush(&d->out, d->utf8, d->n_utf8, false, &d->ok);
    memmove(d->utf8, d->utf8 + d->n_utf8 - keep, keep);
    d->n_utf8 = (uint8_t)keep;
}

/* Pass 3: " 's", " 'm", " 're", " 've" lose the space. */
static void st_p3(struct hr_detok *d, uint8_t x)
{
    for (;;) {
        switch (d->n_p3) {
        case 0:
            if (x == ' ')
                d->p3[d->n_p3++] = x;
            else
                st_utf8(d, x);
            return;
        case 1:
            if (x == '\'') {
                d->p3[d->n_p3++] = x;
                return;
            }
            d->n_p3 = 0;
            st_utf8(d, ' ');
            continue; /* x starts afresh */
        case 2:
            if (x == 's' || x == 'm') {
                d->n_p3 = 0;
                st_utf8(d, '\'');
                st_utf8(d, x);
                return;
            }
            if (x == 'r' || x == 'v') {
                d->p3[d->n_p3++] = x;
                return;
            }
            d->n_p3 = 0;
            st_utf8(d, ' ');
            st_utf8(d, '\'');
            continue;
        default: /* " 'r" or " 'v" */
            d->n_p3 = 0;
            if (x == 'e') {
                st_utf8(d, '\'');
                st_utf8(d, d->p3[2]);
                st_utf8(d, x);
                return;
            }
            st_utf8(d, ' ');
            st_utf8(d, '\'');
            st_utf8(d, d->p3[2]);
            continue;
        }
    }
}

/* Pass 2: " ' " becomes "'"; the dropped space after it is gone for good. */
static void st_p2(struct hr_detok *d, uint8_t x)
{
    if (d->n_p2 == 2) {
        d->n_p2 = 0;
        if (x == ' ') {
            st_p3(d, '\'');
            return; /* x is the skipped space: it starts nothing */
        }
        st_p3(d, ' ');
        st_p3(d, '\'');
    } else if (d->n_p2 == 1) {
        if (x == '\'') {
            d->n_p2 = 2;
            return;
        }
        d->n_p2 = 0;
        st_p3(d, ' ');
    }
    if (x == ' ')
        d->n_p2 = 1;
    else
        st_p3(d, x);
}

/* Pass 1: " ?", " !", " .", " ," lose the space. */
static void st_p1(struct hr_detok *d, uint8_t x)
{
    if (d->p1_space) {
        d->p1_space = false;
        if (!(x == '?' || x == '!' || x == '.' || x == ','))
            st_p2(d, ' ');
    }
    if (x == ' ')
        d->p1_space = true;
    else
        st_p2(d, x);
}

static void detok_reset(struct hr_detok *d)
{
    d->first = !(d->flags & HR_DETOK_PIECES);
    d->p1_space = false;
    d->n_p2 = d->n_p3 = d->n_utf8 = 0;
}

enum hr_status hr_detok_init(const struct hr_tokenizer *tok, unsigned flags, struct hr_detok **out,
                             struct hr_err *err)
{
    struct hr_detok *d = calloc(1, sizeof(*d));
    if (!d || !buf_put(&d->out, "", 0)) {
        free(d);
        *out = NULL;
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    }
    d->tok = tok;
    d->flags = flags & (HR_DETOK_SPECIAL | HR_DETOK_PIECES);
    d->ok = true;
    detok_reset(d);
    *out = d;
    return HR_OK;
}

static enum hr_status detok_result(struct hr_detok *d, const char **text, size_t *len,
                                   struct hr_err *err)
{
    if (!d->ok) {
        d->ok = true;
        d->out.n = 0;
        *text = "";
        *len = 0;
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory detokenizing");
    }
    *text = d->out.p;
    *len = d->out.n;
    return HR_OK;
}

enum hr_status hr_detok_push(struct hr_detok *d, int32_t id, const char **text, size_t *len,
                             struct hr_err *err)
{
    d->out.n = 0;
    size_t pl;
    const uint8_t *p = (const uint8_t *)hr_tokenizer_piece(d->tok, id, d->flags, &pl);
    if (d->first && d->tok->add_space_prefix && pl > 0 && p[0] == ' ')
        p++, pl--;
    d->first = false;
    if (d->tok->clean_spaces && !(d->flags & HR_DETOK_PIECES)) {
        for (size_t i = 0; i < pl; i++)
            st_p1(d, p[i]);
    } else if (d->n_utf8 == 0) {
        /* The common case: copy whole characters, keep a split one. */
        size_t keep = utf8_flush(&d->out, p, pl, false, &d->ok);
        memcpy(d->utf8, p + pl - keep, keep);
        d->n_utf8 = (uint8_t)keep;
    } else {
        for (size_t i = 0; i < pl; i++)
            st_utf8(d, p[i]);
    }
    if (d->out.p)
        d->out.p[d->out.n] = '\0';
    return detok_result(d, text, len, err);
}

enum hr_status hr_detok_finish(struct hr_detok *d, const char **text, size_t *len,
                               struct hr_err *err)
{
    d->out.n = 0;
    if (d->p1_space) {
        d->p1_space = false;
        st_p2(d, ' ');
    }
    uint8_t n2 = d->n_p2;
    d->n_p2 = 0;
    if (n2 >= 1)
        st_p3(d, ' ');
    if (n2 == 2)
        st_p3(d, '\'');
    uint8_t p3[3];
    uint8_t n3 = d->n_p3;
    memcpy(p3, d->p3, sizeof(p3));
    d->n_p3 = 0;
    for (uint8_t i = 0; i < n3; i++)
        st_utf8(d, p3[i]);
    utf8_flush(&d->out, d->utf8, d->n_utf8, true, &d->ok);
    d->n_utf8 = 0;
    if (d->out.p)
        d->out.p[d->out.n] = '\0';
    detok_reset(d);
    return detok_result(d, text, len, err);
}

void hr_detok_free(struct hr_detok *d)
{
    if (!d)
        return;
    free(d->out.p);
    free(d);
}
