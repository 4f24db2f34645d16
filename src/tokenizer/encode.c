/*
 * encode.c - hr_tokenizer_encode: special tokens first, then the merge
 * algorithm on the text between them (llama_vocab::impl::tokenize).
 *
 * Special-token splitting (llama.cpp's tokenizer_st_partition). The text
 * starts as one raw fragment. For each special token in order (longest text
 * first; control and unknown ones only with HR_TOK_PARSE_SPECIAL), every raw
 * fragment is searched left to right and cut around each occurrence, which
 * becomes a token fragment. Consequences worth knowing: a longer token wins
 * over a shorter one anywhere in the text, not only at the same position;
 * occurrences never overlap; a token with LSTRIP/RSTRIP eats the C-locale
 * white space before/after it.
 *
 * llama.cpp runs that loop over every special token (over 6000 for Gemma,
 * so 6000 scans of the text). We first walk a trie of the special texts
 * once over the text to learn which of them occur at all; a token that
 * does not occur in the whole text cannot occur in a fragment of it, so
 * only the occurring ones are searched, with the same cut-by-cut loop and
 * therefore the same result.
 *
 * Then each raw fragment is tokenized on its own: byte-level BPE (bpe.c)
 * directly; SentencePiece (spm.c) after spelling spaces as U+2581 and, with
 * add_space_prefix, prefixing one when the fragment is the first thing in
 * the text or follows a special token.
 */
#include <stdlib.h>
#include <string.h>

#include "tokenizer/tokenizer-impl.h"

struct frag {
    uint32_t start, len;
    int32_t token; /* a special token, or -1 for raw text [start, start + len) */
};

struct frag_list {
    struct frag *v;
    size_t n, cap;
};

static bool frag_push(struct frag_list *l, struct frag f)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        struct frag *v = realloc(l->v, cap * sizeof(*v));
        if (!v)
            return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = f;
    return true;
}

/* isspace() in the C locale, which llama.cpp's strip uses. */
static bool c_space(uint8_t c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

/* Marks, in occurs[], the special tokens whose text occurs in text. */
static void find_occurring(const struct hr_tokenizer *tok, const uint8_t *text, size_t len,
                           uint8_t *occurs)
{
    const struct hr_trie_node *trie = tok->trie;
    for (size_t i = 0; i < len; i++) {
        if (!tok->trie_first[text[i]])
            continue;
        int32_t node = 0;
        for (size_t j = i; j < len; j++) {
            int32_t c = trie[node].first_child;
            while (c >= 0 && trie[c].byte != text[j])
                c = trie[c].next_sibling;
            if (c < 0)
                break;
            node = c;
            if (trie[node].special >= 0)
                occurs[trie[node].special] = 1;
        }
    }
}

static enum hr_status partition(const struct hr_tokenizer *tok, const uint8_t *text, size_t len,
                                bool parse_special, struct frag_list *frags)
{
    frags->n = 0;
    if (len == 0)
        return HR_OK;
    if (!frag_push(frags, (struct frag){0, (uint32_t)len, -1}))
        return HR_ERR_NOMEM;
    if (tok->n_specials == 0)
        return HR_OK;
    uint8_t *occurs = calloc(tok->n_specials, 1);
    if (!occurs)
        return HR_ERR_NOMEM;
    find_occurring(tok, text, len, occurs);
    struct frag_list next = {0};
    enum hr_status st = HR_OK;
    for (uint32_t i = 0; i < tok->n_specials && st == HR_OK; i++) {
        if (!occurs[i])
            continue;
        int32_t id = tok->specials[i];
        unsigned attr = tok->attr[id];
        if (!parse_special && (attr & (HR_TOKEN_ATTR_CONTROL | HR_TOKEN_ATTR_UNKNOWN)))
            continue; /* user-defined tokens are split out either way */
        size_t tlen;
        const char *t = hr_tokenizer_text(tok, id, &tlen);
        next.n = 0;
        for (size_t f = 0; f < frags->n && st == HR_OK; f++) {
            struct frag fr = frags->v[f];
            if (fr.token >= 0) {
                if (!frag_push(&next, fr))
                    st = HR_ERR_NOMEM;
                continue;
            }
            size_t off = fr.start, flen = fr.len;
            for (;;) {
                const uint8_t *m = memmem(text + off, flen, t, tlen);
                if (!m) {
                    if (!frag_push(&next, (struct frag){(uint32_t)off, (uint32_t)flen, -1}))
                        st = HR_ERR_NOMEM;
                    break;
                }
                size_t at = (size_t)(m - text);
                size_t left = at - off;
                if (attr & HR_TOKEN_ATTR_LSTRIP)
                    while (left > 0 && c_space(text[off + left - 1]))
                        left--;
                if (left > 0 && !frag_push(&next, (struct frag){(uint32_t)off, (uint32_t)left, -1})) {
                    st = HR_ERR_NOMEM;
                    break;
                }
                if (!frag_push(&next, (struct frag){0, 0, id})) {
                    st = HR_ERR_NOMEM;
                    break;
                }
                size_t r_off = at + tlen, r_len = off + flen - r_off;
                if (attr & HR_TOKEN_ATTR_RSTRIP)
                    while (r_len > 0 && c_space(text[r_off]))
                        r_off++, r_len--;
                if (r_len == 0)
                    break;
                off = r_off;
                flen = r_len;
            }
        }
        struct frag_list sw = *frags;
        *frags = next;
        next = sw;
    }
    free(next.v);
    free(occurs);
    return st;
}

/* Spells a SentencePiece fragment: optional U+2581 prefix, spaces as U+2581. */
static uint8_t *spm_escape(const uint8_t *s, size_t n, bool prefix, size_t *out_len)
{
    uint8_t *buf = malloc(3 * (n + 1));
    if (!buf)
        return NULL;
    size_t k = 0;
    if (prefix) {
        memcpy(buf, "\xe2\x96\x81", 3);
        k = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(buf + k, "\xe2\x96\x81", 3);
            k += 3;
        } else {
            buf[k++] = s[i];
        }
    }
    *out_len = k;
    return buf;
}

enum hr_status hr_tokenizer_encode(const struct hr_tokenizer *tok, const char *text, size_t len,
                                   unsigned flags, struct hr_tokens *out, struct hr_err *err)
{
    if (len > UINT32_MAX / 4)
        return hr_err_set(err, HR_ERR_RANGE, "text of %zu bytes is too long to tokenize", len);
    const uint8_t *t = (const uint8_t *)text;
    size_t n_before = out->n;
    bool add_special = (flags & HR_TOK_ADD_SPECIAL) != 0;
    struct frag_list frags = {0};
    struct hr_bpe *bpe = NULL;
    struct hr_spm *spm = NULL;
    enum hr_status st = partition(tok, t, len, (flags & HR_TOK_PARSE_SPECIAL) != 0, &frags);
    if (st != HR_OK) {
        hr_err_set(err, st, "out of memory splitting special tokens in %zu bytes", len);
        goto done;
    }
    /* llama.cpp asserts that the vocabulary has the BOS/EOS it asks for; a
     * vocabulary without one simply gets none added here. */
    if (add_special && tok->add_bos && tok->bos >= 0 && (st = hr_tokens_push(out, tok->bos)) != HR_OK)
        goto nomem;
    bool prev_special = true; /* SentencePiece: prefix a space to the first fragment */
    for (size_t i = 0; i < frags.n; i++) {
        const struct frag *f = &frags.v[i];
        if (f->token >= 0) {
            if ((st = hr_tokens_push(out, f->token)) != HR_OK)
                goto nomem;
            prev_special = true;
            continue;
        }
        if (tok->type == HR_TOK_TYPE_BPE) {
            if (!bpe && !(bpe = hr_bpe_begin(len)))
                goto nomem;
            st = hr_bpe_encode(tok, bpe, t + f->start, f->len, out, err);
        } else {
            size_t n;
            uint8_t *esc = spm_escape(t + f->start, f->len, tok->add_space_prefix && prev_special, &n);
            if (!esc || (!spm && !(spm = hr_spm_begin(tok, len)))) {
                free(esc);
                goto nomem;
            }
            st = hr_spm_encode(spm, esc, n, out, err);
            free(esc);
        }
        if (st != HR_OK)
            goto done;
        prev_special = false;
    }
    if (add_special && tok->add_eos && tok->eos >= 0 && (st = hr_tokens_push(out, tok->eos)) != HR_OK)
        goto nomem;
    goto done;
nomem:
    st = hr_err_set(err, HR_ERR_NOMEM, "out of memory tokenizing %zu bytes", len);
done:
    if (st != HR_OK)
        out->n = n_before;
    free(frags.v);
    hr_bpe_end(bpe);
    hr_spm_end(spm);
    return st;
}
