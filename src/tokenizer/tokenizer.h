/*
 * tokenizer.h - text to token ids and back, from a GGUF vocabulary, the way
 * llama.cpp does it.
 *
 * A model's tokenizer is fully described by its GGUF `tokenizer.*` keys;
 * headroom must turn a prompt into exactly the ids llama.cpp would (the
 * weights were trained on them, and prefix caching compares ids), so this
 * module re-implements llama.cpp's tokenizer rule for rule, quirks
 * included. tests/oracle/tokenize.test.mjs compares the two on a corpus.
 *
 * Two vocabulary types (`tokenizer.ggml.model`):
 *
 *   "gpt2"   byte-level BPE (Qwen, Llama 3, Mistral Nemo, DeepSeek, ...): the
 *            text is split by the pre-tokenizer named in
 *            `tokenizer.ggml.pre`, each piece is spelled in GPT-2's byte
 *            alphabet and merged by `tokenizer.ggml.merges` rank.
 *   "llama"  SentencePiece-style BPE (Llama 2, Gemma): spaces become U+2581,
 *            a space is prefixed when `add_space_prefix` says, adjacent
 *            pieces merge by `tokenizer.ggml.scores`, and characters that
 *            form no token fall back to <0xXX> byte tokens.
 *
 * Special tokens. Control and unknown tokens (token types 3 and 2, plus the
 * ones llama.cpp forces to control by their text, e.g. "<|im_end|>") are
 * found inside text only with HR_TOK_PARSE_SPECIAL, which rendered chat
 * templates need and user text must never get. User-defined tokens (type
 * 4, e.g. "<think>") are always split out of the text, as in llama.cpp.
 * HR_TOK_ADD_SPECIAL adds BOS/EOS as `add_bos_token`/`add_eos_token` (or
 * llama.cpp's default for the vocabulary) say.
 *
 * Pre-tokenizers (`tokenizer.ggml.pre`): llama-bpe/llama3 (and the names
 * llama.cpp treats the same), smaug-bpe, dbrx, qwen2 (deepseek-r1-qwen,
 * stablelm2, ...), qwen35, deepseek-llm, deepseek-coder, gpt-2 (mpt, olmo,
 * ...), starcoder, smollm (refact, command-r, ...), tekken, default. A
 * missing or unknown name uses llama.cpp's "default" splitting and logs a
 * warning (llama.cpp refuses to load an unknown one).
 *
 * Invalid UTF-8 input never fails and never crashes: byte-level BPE reads
 * it as llama.cpp does (each bad byte becomes U+FFFD and is tokenized as
 * such), SentencePiece emits byte tokens. The one input llama.cpp cannot
 * tokenize (a 4-byte sequence above U+10FFFF, which makes it throw) is
 * refused with HR_ERR_INVALID naming the byte offset.
 *
 * Ownership. hr_tokenizer_init_from_gguf copies everything it needs; the
 * hr_gguf may be closed right after. Strings returned by accessors live
 * until hr_tokenizer_free.
 *
 * Threads. An initialized tokenizer is immutable: any number of threads may
 * encode and decode with it at once (each call allocates its own scratch).
 * A struct hr_detok (streaming detokenizer) belongs to one thread at a time.
 *
 * Cost. Encoding is O(n log n) in the text length and allocates O(n)
 * scratch; a megabyte of text is fine. Special-token splitting only
 * searches for the special tokens that occur in the text at all.
 *
 *     struct hr_tokenizer *tok;
 *     if (hr_tokenizer_init_from_gguf(g, &tok, &err) != HR_OK) ...
 *     struct hr_tokens ids = {0};
 *     hr_tokenizer_encode(tok, text, len, HR_TOK_ADD_SPECIAL, &ids, &err);
 *     ...
 *     hr_tokens_free(&ids);
 *     hr_tokenizer_free(tok);
 */
#ifndef HR_TOKENIZER_TOKENIZER_H
#define HR_TOKENIZER_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

struct hr_gguf;
struct hr_tokenizer; /* opaque */

#define HR_TOKEN_NULL (-1) /* "no such token", as llama.cpp's LLAMA_TOKEN_NULL */

/* Token attributes, llama.cpp's llama_token_attr bits. A token's attribute
 * comes from its GGUF token type, then llama.cpp's fix-ups by text (EOG and
 * FIM texts forced to CONTROL, control tokens named "unused..." marked
 * UNUSED, ...), so one token may have several bits. */
enum hr_token_attr {
    HR_TOKEN_ATTR_UNDEFINED = 0,
    HR_TOKEN_ATTR_UNKNOWN = 1 << 0,
    HR_TOKEN_ATTR_UNUSED = 1 << 1,
    HR_TOKEN_ATTR_NORMAL = 1 << 2,
    HR_TOKEN_ATTR_CONTROL = 1 << 3,
    HR_TOKEN_ATTR_USER_DEFINED = 1 << 4,
    HR_TOKEN_ATTR_BYTE = 1 << 5,
    HR_TOKEN_ATTR_LSTRIP = 1 << 7,
    HR_TOKEN_ATTR_RSTRIP = 1 << 8,
};

/* Flags for hr_tokenizer_encode. */
enum {
    HR_TOK_ADD_SPECIAL = 1u << 0,   /* BOS/EOS as the vocabulary says */
    HR_TOK_PARSE_SPECIAL = 1u << 1, /* match control tokens inside the text */
};

/* Flags for hr_tokenizer_decode, hr_tokenizer_piece and hr_detok_init. */
enum {
    /* Render control/unknown tokens as their text ("<|im_end|>"); without
     * it they decode to nothing (llama.cpp's unparse_special). */
    HR_DETOK_SPECIAL = 1u << 0,
    /* hr_tokenizer_decode only: drop a leading BOS and trailing EOS that
     * the vocabulary adds (llama.cpp's remove_special). */
    HR_DETOK_REMOVE_BOS_EOS = 1u << 1,
    /* Just the pieces, concatenated: the first one keeps its leading space
     * and the clean-up of spaces is skipped. This is what llama.cpp's server
     * sends for generated tokens (token_to_piece per token), and what text
     * that continues a prompt needs; without it, decoding is
     * llama_detokenize's, which treats the ids as a whole text. */
    HR_DETOK_PIECES = 1u << 2,
};

/* A growable array of token ids; zero-initialize, free with hr_tokens_free. */
struct hr_tokens {
    int32_t *ids;
    size_t n;
    size_t cap;
};
void hr_tokens_free(struct hr_tokens *t);

/*
 * Builds a tokenizer from the `tokenizer.*` keys of a parsed GGUF. On
 * success *out owns a tokenizer that no longer refers to `g`.
 * Errors: HR_ERR_NOT_FOUND (no tokenizer.ggml.model / tokens / merges),
 * HR_ERR_TYPE (a key of the wrong type), HR_ERR_INVALID (inconsistent
 * arrays: fewer scores or types than tokens), HR_ERR_UNSUPPORTED (a
 * tokenizer model other than "gpt2" and "llama"), HR_ERR_RANGE (more than
 * 2^31 tokens), HR_ERR_NOMEM. `err` names the key.
 */
enum hr_status hr_tokenizer_init_from_gguf(const struct hr_gguf *g, struct hr_tokenizer **out,
                                           struct hr_err *err);
void hr_tokenizer_free(struct hr_tokenizer *tok); /* accepts NULL */

/*
 * Tokenizes text[0..len) (any bytes; NUL is an ordinary byte) and appends
 * the ids to *out. `flags`: HR_TOK_ADD_SPECIAL, HR_TOK_PARSE_SPECIAL.
 * On failure *out keeps the ids it held before the call (its buffer may
 * have grown; free it with hr_tokens_free either way).
 * Errors: HR_ERR_INVALID (byte-level BPE text with a code point above
 * U+10FFFF; `err` gives the offset), HR_ERR_RANGE (text over 1 GiB),
 * HR_ERR_NOMEM.
 */
enum hr_status hr_tokenizer_encode(const struct hr_tokenizer *tok, const char *text, size_t len,
                                   unsigned flags, struct hr_tokens *out, struct hr_err *err);

/*
 * The bytes token `id` decodes to (llama_token_to_piece without lstrip):
 * byte-level BPE pieces are un-spelled from GPT-2's alphabet, SentencePiece
 * ones get spaces for U+2581 and byte tokens their byte. Control and unknown
 * tokens give their text with HR_DETOK_SPECIAL and "" without. A piece may
 * be part of a UTF-8 character. Not NUL-terminated; valid until
 * hr_tokenizer_free. An id out of range gives "" and *len 0.
 */
const char *hr_tokenizer_piece(const struct hr_tokenizer *tok, int32_t id, unsigned flags,
                               size_t *len);

/*
 * Decodes ids[0..n) as llama_detokenize does: pieces concatenated, the
 * first one losing one leading space for SentencePiece vocabularies that
 * add a space prefix, then (for most byte-level BPE vocabularies, the
 * `clean_spaces` rule) " ?", " !", " .", " ," lose their space, " ' "
 * becomes "'" and " 's", " 'm", " 're", " 've" lose their space.
 * The result is raw bytes (a sequence cut inside a character stays cut):
 * *out is malloc'd, NUL-terminated, *len excludes the NUL; the caller frees.
 * Ids out of range decode to nothing. Errors: HR_ERR_NOMEM.
 */
enum hr_status hr_tokenizer_decode(const struct hr_tokenizer *tok, const int32_t *ids, size_t n,
                                   unsigned flags, char **out, size_t *len, struct hr_err *err);

/*
 * Streaming detokenizer: feed ids one at a time as they are generated and
 * get the text that is final so far. It emits only complete UTF-8: bytes of
 * a character split across tokens are held back until the character is
 * whole; a byte that can never become valid UTF-8 is replaced by U+FFFD
 * (one per maximal invalid subpart, as browsers do), and an incomplete
 * character still held at hr_detok_finish becomes U+FFFD. It also holds
 * back the few bytes that the clean-spaces rule may still change (a space
 * before a possible "?" or "'s"). The concatenation of everything it emits
 * equals hr_tokenizer_decode(all ids, flags) with invalid UTF-8 replaced the
 * same way. Flags: HR_DETOK_SPECIAL, HR_DETOK_PIECES (for generated text:
 * then only UTF-8 is held back); HR_DETOK_REMOVE_BOS_EOS is not supported
 * (the end is unknown while streaming) and is ignored.
 *
 * The returned pointers stay valid until the next call on the same hr_detok.
 */
struct hr_detok;
enum hr_status hr_detok_init(const struct hr_tokenizer *tok, unsigned flags, struct hr_detok **out,
                             struct hr_err *err);
/* Adds one token; *text and *len are the bytes that became final (maybe none). */
enum hr_status hr_detok_push(struct hr_detok *d, int32_t id, const char **text, size_t *len,
                             struct hr_err *err);
/* Ends the stream: flushes what was held back. The detokenizer is then
 * reset, ready for a new stream. */
enum hr_status hr_detok_finish(struct hr_detok *d, const char **text, size_t *len,
                               struct hr_err *err);
void hr_detok_free(struct hr_detok *d); /* accepts NULL */

/*
 * Replaces invalid UTF-8 in s[0..n) by U+FFFD (the same rule the streaming
 * detokenizer uses). *out is malloc'd and NUL-terminated; the caller frees.
 * For JSON output and comparisons. Errors: HR_ERR_NOMEM.
 */
enum hr_status hr_utf8_sanitize(const char *s, size_t n, char **out, size_t *out_len,
                                struct hr_err *err);

/* Accessors. Ids are HR_TOKEN_NULL when the vocabulary has none. As in
 * llama.cpp, a file that names no BOS/EOS gets the family's default ids
 * (byte-level BPE: 11 and 11, even where token 11 is ","; SentencePiece:
 * BOS 1, EOS 2, UNK 0); add_bos then says whether BOS is ever used. */
uint32_t hr_tokenizer_n_vocab(const struct hr_tokenizer *tok);
const char *hr_tokenizer_model(const struct hr_tokenizer *tok); /* "gpt2" or "llama" */
/* The pre-tokenizer in use: the GGUF name when known, else "default". */
const char *hr_tokenizer_pre(const struct hr_tokenizer *tok);
int32_t hr_tokenizer_bos(const struct hr_tokenizer *tok);
int32_t hr_tokenizer_eos(const struct hr_tokenizer *tok);
int32_t hr_tokenizer_eot(const struct hr_tokenizer *tok);
int32_t hr_tokenizer_eom(const struct hr_tokenizer *tok);
int32_t hr_tokenizer_unk(const struct hr_tokenizer *tok);
int32_t hr_tokenizer_sep(const struct hr_tokenizer *tok);
int32_t hr_tokenizer_pad(const struct hr_tokenizer *tok);
int32_t hr_tokenizer_nl(const struct hr_tokenizer *tok); /* the newline token */
bool hr_tokenizer_add_bos(const struct hr_tokenizer *tok);
bool hr_tokenizer_add_eos(const struct hr_tokenizer *tok);
/* End of generation: EOS, EOT, EOM and the other tokens llama.cpp stops on
 * ("<|im_end|>", "<|endoftext|>", "<end_of_turn>", FIM pad/repo/sep, ...). */
bool hr_tokenizer_is_eog(const struct hr_tokenizer *tok, int32_t id);
/* Control or unknown: decodes to nothing without HR_DETOK_SPECIAL. */
bool hr_tokenizer_is_control(const struct hr_tokenizer *tok, int32_t id);
/* enum hr_token_attr bits; HR_TOKEN_ATTR_UNDEFINED for an id out of range. */
unsigned hr_tokenizer_attr(const struct hr_tokenizer *tok, int32_t id);
/* The token's text as stored in the GGUF (GPT-2 or U+2581 spelling). */
const char *hr_tokenizer_text(const struct hr_tokenizer *tok, int32_t id, size_t *len);
/* The id whose stored text is exactly s[0..n), or HR_TOKEN_NULL. */
int32_t hr_tokenizer_find(const struct hr_tokenizer *tok, const char *s, size_t n);

#endif
