/*
 * api-json.h - the JSON text helpers that api-error.c and api-writer.c share.
 * Internal to src/server/: not part of the api.h contract.
 *
 * Responses are written as text straight into a struct hr_api_buf rather
 * than built as jansson trees and dumped, for two reasons: a tool call's
 * arguments are already compact JSON object text that must reach the client
 * byte for byte (a round trip through jansson turns 0.1 into
 * 0.10000000000000001 and refuses integers beyond 64 bits), and a streamed
 * delta is written once, so a tree per chunk would only add allocations.
 *
 * struct hr_api_json is a cursor with a sticky status: after the first
 * failed append every later one does nothing, so a writer composes a whole
 * message and checks once at the end.
 */
#ifndef HR_SERVER_API_JSON_H
#define HR_SERVER_API_JSON_H

#include <stddef.h>
#include <stdint.h>

#include "server/api.h"

struct hr_api_json {
    struct hr_api_buf *b;
    enum hr_status st; /* HR_OK until an append fails */
};

/* Raw bytes and NUL-terminated text, appended as they are. */
void hr_api_json_raw(struct hr_api_json *j, const char *s, size_t n);
void hr_api_json_lit(struct hr_api_json *j, const char *s);
void hr_api_json_u64(struct hr_api_json *j, uint64_t v);
void hr_api_json_i64(struct hr_api_json *j, int64_t v);

/*
 * s[0..n) as a JSON string literal, quotes included. '"', '\\' and control
 * characters are escaped (\n, \t, ... or \u00XX, so NUL becomes \u0000);
 * everything else, non-ASCII included, is copied. Bytes that are not valid
 * UTF-8 (which the events never contain, but a truncated error message
 * might) become U+FFFD one byte at a time, so the output is always valid
 * JSON in valid UTF-8.
 */
void hr_api_json_str(struct hr_api_json *j, const char *s, size_t n);

/* The inside of a JSON string literal (no quotes), escaped as above: a
 * string written in pieces is one quote, its pieces, and one quote. */
void hr_api_json_str_body(struct hr_api_json *j, const char *s, size_t n);

/* A NUL-terminated string as a JSON string, or null for NULL. */
void hr_api_json_cstr(struct hr_api_json *j, const char *s);

#endif
