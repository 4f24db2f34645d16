/*
 * tokenizer-impl.h - what the tokenizer's files share: the vocabulary as
 * loaded (vocab.c), the pre-tokenizers (pretok.c), the two merge
 * algorithms (bpe.c, spm.c), special-token splitting and encoding
 * (encode.c) and decoding (decode.c). Not a public interface; users
 * include tokenizer.h.
 *
 * Everything in struct hr_tokenizer is written once by vocab.c and then
 * only read, which is what makes a tokenizer shareable between threads.
 */
#ifndef HR_TOKENIZER_IMPL_H
#define HR_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

enum hr_tok_type { HR_TOK_TYPE_SPM, HR_TOK_TYPE_BPE };

/* Pre-tokenizer families: each is one fixed list of split steps (pretok.c),
 * the same list llama.cpp's llm_tokenizer_bpe builds for the family. */
enum hr_pre {
    HR_PRE_DEFAULT,
    HR_PRE_GPT2,
    HR_PRE_LLAMA3,
    HR_PRE_QWEN2,
    HR_PRE_QWEN35,
    HR_PRE_STARCODER,
    HR_PRE_DEEPSEEK_LLM,
    HR_PRE_DEEPSEEK_CODER,
    HR_PRE_TEKKEN,
    HR_PRE_GPT4O,
};

/*
 * Interned byte strings with a hash index: every token text, plus (for
 * byte-level BPE) every merge side that is not itself a token. An id here is
 * a "string id" (sid), distinct from token ids.
 */
struct hr_strtab {
    char *blob;
    size_t blob_len, blob_cap;
    uint64_t *off;  /* start of string i in blob */
    uint32_t *len;  /* its length */
    uint32_t *hash; /* hr_tok_hash of it */
    uint32_t n, cap;
    /* Open addressing, linear probing; a slot keeps the hash next to the
     * sid so a probe that misses costs one cache line. sid1 = sid + 1,
     * 0 = empty. */
    struct hr_strtab_slot {
        uint32_t hash, sid1;
    } *slots;
    uint32_t mask;
};

/* A merge: the pair (left sid, right sid) -> its rank and the merged sid
 * (-1 when the concatenation is neither a token nor a merge side). */
struct hr_merge {
    uint64_t key; /* left << 32 | right; UINT64_MAX = empty slot */
    int32_t rank;
    int32_t merged;
};

/* A byte trie over the special tokens' texts, to find which occur in a text. */
struct hr_trie_node {
    int32_t first_child; /* -1 if none */
    int32_t next_sibling;
    int32_t special;     /* index into specials, or -1 */
    uint8_t byte;
};

struct hr_tokenizer {
    enum hr_tok_type type;
    enum hr_pre pre;
    char model_name[16];
    char pre_name[64];
    uint32_t n_vocab;

    /* Per token id. */
    uint32_t *tok_sid; /* its text, in strs */
    float *score;
    uint16_t *attr; /* enum hr_token_attr */

    struct hr_strtab strs;
    uint32_t n_text_sids; /* sids [0, n_text_sids) are token texts, the rest merge sides */
    uint32_t max_token_len; /* bytes in the longest token text */
    int32_t *sid_token; /* sid -> token id (the last one with that text), or -1 */

    /* Byte-level BPE. */
    struct hr_merge *merges;
    uint32_t merges_mask;
    int32_t byte_sid[256];     /* sid of GPT-2's spelling of each byte, or -1 */
    int32_t byte_fb[256][2];   /* tokens a byte falls back to when its symbol is no token */
    uint8_t n_byte_fb[256];
    bool ignore_merges; /* a whole pre-token that is a token is taken as is */

    /* SentencePiece. */
    int32_t byte_tok[256]; /* <0xXX> (or the byte itself) per byte, or -1 */
    bool add_space_prefix;
    /* Where no merge can ever cross (see spm.c): before a U+2581 that
     * follows byte b when no token contains b + U+2581; around an ASCII
     * byte that no token of two or more bytes contains. */
    uint8_t spm_cut_before_space[256];
    uint8_t spm_lonely[128];

    bool add_bos, add_eos, clean_spaces;
    int32_t bos, eos, eot, eom, unk, sep, pad, nl, mask;
    int32_t fim_pre, fim_suf, fim_mid, fim_pad, fim_rep, fim_sep;
    uint8_t *eog; /* per token: end of generation */

    /* Special tokens (control, user-defined, unknown) in llama.cpp's
     * matching order: longest text first. */
    int32_t *specials;
    uint32_t n_specials;
    struct hr_trie_node *trie;
    uint32_t n_trie;
    uint8_t trie_first[256]; /* bytes that start some special token */

    /* Decoded pieces (llama.cpp's token-to-piece cache, special form). */
    char *piece_blob;
    uint64_t *piece_off;
    uint32_t *piece_len;
};

/* ---- hashing and the string table (vocab.c) ---- */

uint32_t hr_tok_hash(const void *p, size_t n);
/* sid of s[0..n), or -1. */
int32_t hr_strtab_find(const struct hr_strtab *t, const void *s, size_t n, uint32_t hash);
static inline const char *hr_strtab_str(const struct hr_strtab *t, uint32_t sid)
{
    return t->blob + t->off[sid];
}
/* Token id whose text is s[0..n), or -1 (llama.cpp's text_to_token). */
int32_t hr_vocab_text_to_token(const struct hr_tokenizer *tok, const void *s, size_t n);

/* ---- growable buffers ---- */

enum hr_status hr_tokens_push(struct hr_tokens *t, int32_t id);

/* ---- pre-tokenizers (pretok.c) ---- */

/*
 * The pre-tokenized text: code points (llama.cpp's lenient decoding) and
 * their classes, plus the split points. Filled by hr_pretok_run.
 */
struct hr_pretok {
    uint32_t *cps;
    uint8_t *cls;    /* hr_ucd() of each code point */
    size_t n;
    uint32_t *ends;  /* piece i is cps[ends[i-1] .. ends[i]) */
    size_t n_ends;
    uint32_t *tmp;   /* scratch for the next step's ends */
    size_t cap_ends, cap_cps;
};

/* Decodes text[0..len) and splits it with `pre`'s steps. */
enum hr_status hr_pretok_run(struct hr_pretok *p, enum hr_pre pre, const uint8_t *text,
                             size_t len, struct hr_err *err);
void hr_pretok_free(struct hr_pretok *p);

/* ---- the merge algorithms ---- */

/* Byte-level BPE (bpe.c). One struct hr_bpe per hr_tokenizer_encode call
 * (its scratch and piece cache, sized for a text of text_len bytes; NULL
 * on allocation failure), then hr_bpe_encode per raw fragment. */
struct hr_bpe;
struct hr_bpe *hr_bpe_begin(size_t text_len);
void hr_bpe_end(struct hr_bpe *s); /* accepts NULL */
enum hr_status hr_bpe_encode(const struct hr_tokenizer *tok, struct hr_bpe *s,
                             const uint8_t *text, size_t len, struct hr_tokens *out,
                             struct hr_err *err);

/* SentencePiece merges (spm.c), the same way: one struct hr_spm per call,
 * then hr_spm_encode per fragment, already escaped (U+2581 for spaces). */
struct hr_spm;
struct hr_spm *hr_spm_begin(const struct hr_tokenizer *tok, size_t text_len);
void hr_spm_end(struct hr_spm *s); /* accepts NULL */
enum hr_status hr_spm_encode(struct hr_spm *s, const uint8_t *text, size_t len,
                             struct hr_tokens *out, struct hr_err *err);

/* ---- decoding (decode.c) ---- */

/* Builds piece_blob/piece_off/piece_len; called once by vocab.c. */
enum hr_status hr_decode_build_pieces(struct hr_tokenizer *tok, struct hr_err *err);

#endif
