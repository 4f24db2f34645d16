/*
 * hf-vocab.h - turns a Hugging Face tokenizer into GGUF tokenizer metadata.
 *
 * The test-model generator gives its random-weight models a real
 * vocabulary and chat template, so that tokenization, chat formatting and
 * stop tokens are exercised exactly as with a downloaded model. The source
 * is a directory holding `tokenizer.json` and (optionally)
 * `tokenizer_config.json`; the output is the `tokenizer.*` keys that
 * llama.cpp's convert_hf_to_gguf.py would have written for it, so the file
 * loads in llama.cpp and tokenizes like a converted model.
 *
 * Two kinds of BPE tokenizer are understood:
 *
 *   byte-level BPE (GPT-2 style: a ByteLevel pre-tokenizer; Qwen, Llama 3)
 *     -> tokenizer.ggml.model "gpt2": tokens, token types, merges, and a
 *        `tokenizer.ggml.pre` name chosen from the pre-tokenizer's split
 *        regex (see hr_hf_vocab_load for the table).
 *   SentencePiece-style BPE (byte_fallback; Llama 2, Gemma 3)
 *     -> tokenizer.ggml.model "llama": tokens with U+2581 for spaces,
 *        token types and scores. Without the original tokenizer.model the
 *        scores are derived from the merge ranks so that llama.cpp's
 *        SentencePiece merge loop applies the merges in the same order
 *        as the Hugging Face tokenizer (see hf-vocab.c).
 *
 * Special token ids, add_bos/add_eos/add_sep and the chat template follow
 * gguf-py's SpecialVocab: the names in tokenizer_config.json are looked up
 * among tokenizer.json's added_tokens, and a TemplateProcessing
 * post-processor that opens with the BOS token turns add_bos on.
 *
 * Lifetime. A struct hr_hf_vocab owns all of its memory; nothing points
 * into the JSON once hr_hf_vocab_load returns. hr_hf_vocab_write copies
 * what it needs into the writer, so the vocab may be freed right after.
 * Strings returned by the accessors live until hr_hf_vocab_free.
 *
 * Threads. A loaded vocab is immutable; any number of threads may read it.
 */
#ifndef HR_TOOLS_HF_VOCAB_H
#define HR_TOOLS_HF_VOCAB_H

#include <stdint.h>

#include "base/status.h"

struct hr_gguf_writer;

/* GGUF token types (tokenizer.ggml.token_type), as llama.cpp defines them. */
enum hr_hf_token_type {
    HR_HF_TOKEN_NORMAL = 1,
    HR_HF_TOKEN_UNKNOWN = 2,
    HR_HF_TOKEN_CONTROL = 3,
    HR_HF_TOKEN_USER_DEFINED = 4,
    HR_HF_TOKEN_UNUSED = 5,
    HR_HF_TOKEN_BYTE = 6,
};

/* Which special token an id is for; the GGUF key of each is in hf-vocab.c. */
enum hr_hf_special {
    HR_HF_SPECIAL_BOS,
    HR_HF_SPECIAL_EOS,
    HR_HF_SPECIAL_UNK,
    HR_HF_SPECIAL_SEP,
    HR_HF_SPECIAL_PAD,
    HR_HF_SPECIAL_MASK,
    HR_HF_SPECIAL_EOT,
    HR_HF_SPECIAL_EOM,
    HR_HF_SPECIAL_COUNT
};

struct hr_hf_vocab; /* opaque */

/*
 * Loads `dir`/tokenizer.json and, when present, `dir`/tokenizer_config.json.
 * On success *out owns a new vocab (free with hr_hf_vocab_free); on failure
 * *out is NULL and `err` names the file and the field at fault.
 *
 * Errors: HR_ERR_IO (file missing or unreadable), HR_ERR_INVALID (malformed
 * JSON or a field of the wrong shape), HR_ERR_UNSUPPORTED (a model type
 * other than BPE, or a byte-level pre-tokenizer regex we cannot name),
 * HR_ERR_RANGE (a token id outside 0..2^24), HR_ERR_NOMEM.
 *
 * tokenizer.ggml.pre for byte-level vocabularies, from the Split regex of
 * the pre-tokenizer (the converter hashes the token ids of a test string,
 * which needs the tokenizer we are building; these rules give the same
 * names for the tokenizers we have, tests/oracle/vocab-check.mjs checks):
 *   Llama 3 regex (\p{N}{1,3}), BOS added by the post-processor -> "llama-bpe"
 *   Llama 3 regex, nothing added (early Meta tokenizer.json)   -> "smaug-bpe"
 *   Qwen 2 regex (single \p{N})                                -> "qwen2"
 *   no Split, ByteLevel with use_regex                         -> "gpt-2"
 * SentencePiece-style vocabularies always get "default".
 */
enum hr_status hr_hf_vocab_load(const char *dir, struct hr_hf_vocab **out, struct hr_err *err);

/*
 * A small built-in byte-level BPE vocabulary for tests that need no npm
 * package: 256 byte tokens (id = byte value, GPT-2's byte-to-unicode
 * spelling), 300 merges learned deterministically from a fixed English and
 * C corpus, then <|endoftext|> (BOS and padding), <|im_start|>, <|im_end|>
 * (EOS) as control tokens and <think>, </think> as user-defined tokens,
 * pre-tokenizer "qwen2", no automatic BOS, and a ChatML chat template.
 * The result is the same on every call and every machine.
 */
enum hr_status hr_hf_vocab_builtin(struct hr_hf_vocab **out, struct hr_err *err);

/*
 * Grows the vocabulary to n tokens: ids past the tokenizer's highest become
 * "[PAD<id>]" of type UNUSED (score -10000 for "llama" vocabularies), as
 * llama.cpp's converter pads up to config.json's vocab_size. HR_ERR_INVALID
 * when n is below the current size (the tokenizer's ids would not fit).
 */
enum hr_status hr_hf_vocab_pad(struct hr_hf_vocab *v, uint32_t n, struct hr_err *err);

/* Number of tokens, holes included: the model's vocab_size. */
uint32_t hr_hf_vocab_n_tokens(const struct hr_hf_vocab *v);

/* "gpt2" or "llama" (the tokenizer.ggml.model value). */
const char *hr_hf_vocab_model(const struct hr_hf_vocab *v);

/* The tokenizer.ggml.pre value: "qwen2", "llama-bpe", "default", ... */
const char *hr_hf_vocab_pre(const struct hr_hf_vocab *v);

/* Token text as written to GGUF (NUL-terminated), or NULL when id is out of range. */
const char *hr_hf_vocab_token(const struct hr_hf_vocab *v, uint32_t id);

/* Token type (enum hr_hf_token_type), or 0 when id is out of range. */
int32_t hr_hf_vocab_token_type(const struct hr_hf_vocab *v, uint32_t id);

/* Token score for "llama" vocabularies; 0 for "gpt2" or an id out of range. */
float hr_hf_vocab_score(const struct hr_hf_vocab *v, uint32_t id);

/* Number of merges ("gpt2" vocabularies; 0 for "llama"). */
uint32_t hr_hf_vocab_n_merges(const struct hr_hf_vocab *v);

/* Merge `rank` as "left right", or NULL when out of range. */
const char *hr_hf_vocab_merge(const struct hr_hf_vocab *v, uint32_t rank);

/* The id of a special token, or -1 when the source does not define it. */
int32_t hr_hf_vocab_special(const struct hr_hf_vocab *v, enum hr_hf_special which);

/* The default chat template, or NULL when the source has none. */
const char *hr_hf_vocab_chat_template(const struct hr_hf_vocab *v);

/*
 * Sets the tokenizer.* keys on `w`: model, pre, tokens, token_type, scores
 * ("llama") or merges ("gpt2"), the special token ids the source defines,
 * add_bos_token / add_eos_token / add_sep_token when the source says,
 * add_space_prefix for "llama" vocabularies, and tokenizer.chat_template
 * (plus tokenizer.chat_template.NAME and tokenizer.chat_templates for a
 * list of named templates). Everything is copied into the writer.
 * Errors: HR_ERR_NOMEM from the writer.
 */
enum hr_status hr_hf_vocab_write(const struct hr_hf_vocab *v, struct hr_gguf_writer *w,
                                 struct hr_err *err);

/* Frees everything the vocab owns. Accepts NULL. */
void hr_hf_vocab_free(struct hr_hf_vocab *v);

#endif
