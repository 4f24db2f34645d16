/*
 * api.h - the two HTTP APIs (Anthropic Messages, OpenAI Chat Completions and
 * Completions) as plain data: a request parsed into one internal form, and
 * the bytes of a response written from the scheduler's and the chat
 * parser's events. Nothing here touches a socket, a thread or the engine, so
 * every function is a pure transformation that unit tests and libFuzzer can
 * drive directly; http.c and server.c do the I/O.
 *
 *   client JSON --hr_api_parse--> struct hr_api_request --(server: template,
 *   tokenize, hr_sched_submit)--> events --hr_api_writer_*--> response bytes
 *
 * Files:
 *   api-request.c   hr_api_parse: both APIs' request bodies, validated, with
 *                   Anthropic content blocks turned into the OpenAI chat
 *                   form that chat-render.h gives the template
 *   api-writer.c    hr_api_writer_*: SSE events / chunks while streaming,
 *                   or one JSON document at the end
 *   api-error.c     hr_api_error_*: every error class -> HTTP status, body
 *                   in the API's shape, Retry-After; the one place where
 *                   statuses are mapped
 *
 * Ownership: a parsed request owns everything it points to (free it with
 * hr_api_request_free). A writer copies its config strings. Output goes to
 * a struct hr_api_buf the caller owns. Threads: none of this is shared; a
 * request and its writer belong to one connection.
 */
#ifndef HR_SERVER_API_H
#define HR_SERVER_API_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "chat/chat-parse.h"
#include "sample/sampler.h"

enum hr_api_kind {
    HR_API_ANTHROPIC,         /* POST /v1/messages (and count_tokens) */
    HR_API_OPENAI_CHAT,       /* POST /v1/chat/completions */
    HR_API_OPENAI_COMPLETION, /* POST /v1/completions */
};

/* ---- growable output buffer ----------------------------------------------- */

struct hr_api_buf {
    char *data; /* NUL-terminated when len > 0; malloc'd */
    size_t len, cap;
};

/* Appends; HR_ERR_NOMEM on failure (the buffer is unchanged). */
enum hr_status hr_api_buf_put(struct hr_api_buf *b, const char *s, size_t n);
enum hr_status hr_api_buf_printf(struct hr_api_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void hr_api_buf_reset(struct hr_api_buf *b); /* len = 0, keeps the memory */
void hr_api_buf_free(struct hr_api_buf *b);

/* ---- requests -------------------------------------------------------------- */

enum hr_api_tool_choice {
    HR_API_TOOL_AUTO,     /* default when tools are given */
    HR_API_TOOL_NONE,     /* tools not offered to the model, no calls parsed */
    HR_API_TOOL_REQUIRED, /* Anthropic "any", OpenAI "required" */
    HR_API_TOOL_NAMED,    /* one function by name (tool_choice_name) */
};

struct hr_api_request {
    enum hr_api_kind kind;
    char *model; /* the name the client asked for; echoed in responses */
    bool stream;
    bool include_usage; /* OpenAI stream_options.include_usage */
    bool ignore_eos;    /* llama.cpp's extension: generate max_tokens past end-of-generation */

    /* Chat kinds: messages in OpenAI chat form, ready for chat-render.h
     * (Anthropic system text first as a system message; tool_result blocks
     * as role "tool" messages; tool_use blocks as assistant tool_calls with
     * arguments as a JSON string; thinking blocks as reasoning_content;
     * billing-header system blocks dropped). Never NULL for chat kinds. */
    json_t *messages;
    json_t *tools;  /* array in OpenAI form, or NULL when none (or choice none) */
    json_t *kwargs; /* extra template variables (e.g. enable_thinking), or NULL */
    enum hr_api_tool_choice tool_choice;
    char *tool_choice_name; /* HR_API_TOOL_NAMED */

    /* Completions: the raw prompt text (a string, or an array of one
     * string; more than one prompt per request is a 400), or token ids in
     * prompt_tokens. */
    char *prompt;
    size_t prompt_len;
    int32_t *prompt_tokens; /* when the prompt was given as token ids */
    size_t n_prompt_tokens;

    uint32_t max_tokens; /* 0: not given (the server uses what the context allows) */
    struct hr_sampler_params sampling; /* the API's defaults where not given */
    char **stop;                       /* stop strings, owned */
    uint32_t n_stop;
    bool thinking;    /* Anthropic thinking enabled: emit thinking blocks */
    bool json_object; /* OpenAI response_format json_object/json_schema: accepted and
                       * recorded, not enforced (no constrained decoding yet) */
    bool echo;        /* completions: the prompt's text comes first in the output */
};

/*
 * Parses a request body of `kind`. `count_tokens` parses the body of
 * /v1/messages/count_tokens (no max_tokens required, no sampling).
 * HR_OK: *out is filled and owned by the caller. HR_ERR_INVALID /
 * HR_ERR_TYPE / HR_ERR_RANGE: err names the field ("messages.2.content.0.
 * type: unknown content block type \"image_url\"", "max_tokens: must be a
 * positive integer"); *out is left empty. Unknown fields are ignored.
 * Never aborts on input; bounded by the body, which the server caps.
 */
enum hr_status hr_api_parse(enum hr_api_kind kind, bool count_tokens, const char *body,
                            size_t len, struct hr_api_request *out, struct hr_err *err);
void hr_api_request_free(struct hr_api_request *r); /* accepts NULL and empty */

/* ---- errors ---------------------------------------------------------------- */

enum hr_api_error_class {
    HR_API_ERR_INVALID,      /* 400 invalid_request_error (bad JSON or field) */
    HR_API_ERR_TOO_LONG,     /* 400: the prompt exceeds the context or memory */
    HR_API_ERR_AUTH,         /* 401 authentication_error */
    HR_API_ERR_NOT_FOUND,    /* 404 not_found_error */
    HR_API_ERR_METHOD,       /* 405 */
    HR_API_ERR_TOO_LARGE,    /* 413 request_too_large */
    HR_API_ERR_OVERLOADED,   /* Anthropic 529 overloaded_error, OpenAI 503; Retry-After */
    HR_API_ERR_UNAVAILABLE,  /* 503: loading or shutting down */
    HR_API_ERR_INTERNAL,     /* 500 api_error */
};

struct hr_api_error {
    enum hr_api_error_class cls;
    char message[512];
    /* HR_API_ERR_TOO_LONG: N, M and the bytes behind a memory refusal
     * (estimated 0 when the limit is the context) */
    uint32_t n_prompt, max_prompt;
    uint64_t estimated_bytes, limit_bytes;
    unsigned retry_after_s; /* OVERLOADED/UNAVAILABLE: Retry-After; 0: none */
};

/* The HTTP status of a class for an API (529 vs 503 for OVERLOADED). */
unsigned hr_api_error_status(enum hr_api_kind kind, enum hr_api_error_class cls);
/* The same, with Anthropic's OVERLOADED status chosen (529, or 503 behind a
 * balancer: --overload-status); any other value is taken as 529. */
unsigned hr_api_error_status_for(enum hr_api_kind kind, enum hr_api_error_class cls,
                                 unsigned anthropic_overload_status);

/*
 * The error body in the API's shape, before a response started:
 *   Anthropic {"type":"error","error":{"type":"invalid_request_error","message":...}}
 *   OpenAI    {"error":{"message":...,"type":...,"param":null,"code":...}}
 * TOO_LONG uses the wording clients parse ("prompt is too long: N tokens >
 * M maximum"; OpenAI code "context_length_exceeded" and "This model's
 * maximum context length is M tokens. However, your messages resulted in N
 * tokens.") and adds estimated_bytes and limit_bytes.
 */
enum hr_status hr_api_error_body(enum hr_api_kind kind, const struct hr_api_error *e,
                                 struct hr_api_buf *out);

/* The same error after a stream started: Anthropic `event: error` SSE
 * message, OpenAI `data: {"error":{...}}` (the stream then ends). */
enum hr_status hr_api_error_sse(enum hr_api_kind kind, const struct hr_api_error *e,
                                struct hr_api_buf *out);

/* ---- responses ------------------------------------------------------------- */

struct hr_api_writer_config {
    enum hr_api_kind kind;
    bool stream;
    bool include_usage;
    bool thinking;        /* Anthropic: reasoning becomes thinking blocks; else dropped */
    const char *model;    /* echoed; copied */
    const char *id;       /* "msg_...", "chatcmpl-...", "cmpl-..."; copied */
    int64_t created;      /* unix seconds (OpenAI) */
    uint32_t n_prompt;    /* prompt tokens, for usage */
    uint32_t n_cached;    /* of which served from the prefix cache */
    const char *const *stop; /* the request's stop strings, to name the one that matched */
    uint32_t n_stop;
    uint64_t seed;        /* for the tool-call ids the writer makes (toolu_..., call_...) */
};

enum hr_api_finish {
    HR_API_FINISH_STOP,      /* end of turn (Anthropic end_turn, OpenAI stop) */
    HR_API_FINISH_STOP_SEQ,  /* a stop string (stop_sequence / stop) */
    HR_API_FINISH_LENGTH,    /* max_tokens / length */
    /* tool_use / tool_calls is chosen by the writer when a call was emitted
     * and the turn ended with STOP. */
};

struct hr_api_writer;

enum hr_status hr_api_writer_init(const struct hr_api_writer_config *cfg,
                                  struct hr_api_writer **out, struct hr_err *err);
void hr_api_writer_free(struct hr_api_writer *w);

/*
 * Streaming: each call appends complete SSE messages to `out` (never a
 * partial one), which the server sends as they come. Non-streaming: the
 * calls accumulate and only hr_api_writer_finish appends, the whole JSON
 * document.
 *
 *   start      once, when the request is admitted: Anthropic message_start
 *              (content [], usage); OpenAI the role delta chunk
 *   event      content / reasoning / tool call from chat-parse.h: opens and
 *              closes Anthropic content blocks as the kind changes, OpenAI
 *              deltas (a tool call's first fragment carries id, type, name)
 *   ping       Anthropic `event: ping`; OpenAI an SSE comment line
 *   finish     closes what is open; Anthropic message_delta (stop_reason,
 *              stop_sequence, usage.output_tokens) + message_stop; OpenAI
 *              the finish_reason chunk, the usage chunk when asked, [DONE]
 *
 * Completions (HR_API_OPENAI_COMPLETION) have no role chunk, tools or
 * reasoning: every event's text is `choices[0].text` of a text_completion
 * object; a tool-call event there is written as its text.
 *
 * n_output counts generated tokens. Only HR_ERR_NOMEM fails.
 */
/* The prompt tokens the prefix cache served, known when the request leaves
 * the queue (config.n_cached, an estimate, until then). Usage written after
 * this call reports it. */
void hr_api_writer_set_cached(struct hr_api_writer *w, uint32_t n_cached);
enum hr_status hr_api_writer_start(struct hr_api_writer *w, struct hr_api_buf *out);
enum hr_status hr_api_writer_event(struct hr_api_writer *w, const struct hr_chat_event *ev,
                                   struct hr_api_buf *out);
enum hr_status hr_api_writer_ping(struct hr_api_writer *w, struct hr_api_buf *out);
enum hr_status hr_api_writer_finish(struct hr_api_writer *w, enum hr_api_finish finish,
                                    int32_t stop_index, uint32_t n_output,
                                    struct hr_api_buf *out);

#endif
