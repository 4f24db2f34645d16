/*
 * chat-parse-impl.h - what chat-parse.c needs from chat-parse-json.c: a
 * resumable scanner that finds where a JSON value ends in streamed text,
 * and the reading of complete call JSON into names and argument text.
 * Internal to src/chat/chat-parse*.c.
 */
#ifndef HR_CHAT_CHAT_PARSE_IMPL_H
#define HR_CHAT_CHAT_PARSE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/chat-parse.h"

/*
 * Finds the end of a JSON object or array fed in pieces, in O(1) per byte.
 * It tracks strings, escapes and the bracket stack, and rejects early what
 * can never become JSON (a mismatched bracket, a raw control character in a
 * string, a byte outside strings that no JSON token contains), so an
 * obviously broken call stops being held. It does not check the grammar
 * fully: hr_chat_json_calls validates the finished text with jansson.
 */
enum hr_chat_jscan_result { HR_CHAT_JSCAN_MORE, HR_CHAT_JSCAN_DONE, HR_CHAT_JSCAN_BAD };

struct hr_chat_jscan {
    size_t depth;
    bool in_str, esc;
    uint8_t stack[HR_CHAT_PARSE_MAX_DEPTH];
};

void hr_chat_jscan_init(struct hr_chat_jscan *s);

/* Scans b[0..n) after what was fed before; the first byte ever fed must be
 * '{' or '['. DONE sets *used to the bytes of b up to and including the
 * closing bracket; MORE means all n were consumed. */
enum hr_chat_jscan_result hr_chat_jscan_feed(struct hr_chat_jscan *s, const char *b, size_t n,
                                             size_t *used);

/* One call read from JSON text; every string is malloc'd and NUL-terminated. */
struct hr_chat_call_text {
    char *name;
    char *args;
    size_t args_len;
    char *id; /* NULL when the model gave none */
};

/*
 * Reads the calls that the complete JSON text s[0..n) describes (the shapes
 * listed in chat-parse.h). Returns how many (> 0) with *calls a malloc'd
 * array to release with hr_chat_call_texts_free; 0 when the text is not
 * valid JSON or not calls; -1 when out of memory.
 */
int hr_chat_json_calls(const char *s, size_t n, struct hr_chat_call_text **calls);

/*
 * Validates s[0..n) as a JSON object and writes its compact form to *out
 * (malloc'd, NUL-terminated). Returns 1, 0 when it is not a valid object,
 * -1 when out of memory.
 */
int hr_chat_json_object_compact(const char *s, size_t n, char **out, size_t *out_len);

void hr_chat_call_texts_free(struct hr_chat_call_text *calls, size_t n);

/*
 * Validates s[0..n) as any JSON value (surrounding whitespace allowed) and
 * writes its compact form, number text as written, to *out (malloc'd,
 * NUL-terminated). Returns 1, 0 when it is not JSON, -1 when out of memory.
 */
int hr_chat_json_value_compact(const char *s, size_t n, char **out, size_t *out_len);

/* How a qwen3-coder parameter's raw text becomes JSON (chat-parse.h, "Typed
 * values"): a bit set. */
enum {
    HR_CHAT_PARAM_STRING = 1, /* a JSON string of the text, verbatim */
    HR_CHAT_PARAM_BOOL = 2,   /* the schema allows a boolean: True/False accepted */
    HR_CHAT_PARAM_NULL = 4,   /* the schema allows null: None accepted */
};

/* The kind of parameter `key` of function `fn` in `tools` (chat-parse.h's
 * opts.tool_defs; NULL allowed): HR_CHAT_PARAM_STRING for an unknown tool or
 * parameter. Bounded: schemas nested deeper than 16 count as not strings. */
unsigned hr_chat_param_kind(const json_t *tools, const char *fn, const char *key);

/* Whether `tools` (as above) names function `fn`. */
bool hr_chat_tool_known(const json_t *tools, const char *fn);

#endif
