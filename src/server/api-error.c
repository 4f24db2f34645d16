/*
 * api-error.c - every error class as an HTTP status and a body in the
 * shape of the API the client called. This is the one place where statuses
 * are mapped; the server only picks a class.
 *
 *   class        status     Anthropic error.type    OpenAI error.type      OpenAI code
 *   INVALID      400        invalid_request_error   invalid_request_error  null
 *   TOO_LONG     400        invalid_request_error   invalid_request_error "context_length_exceeded"
 *   AUTH         401        authentication_error    authentication_error   "invalid_api_key"
 *   NOT_FOUND    404        not_found_error         not_found_error        null
 *   METHOD       405        invalid_request_error   invalid_request_error  "method_not_allowed"
 *   TOO_LARGE    413        request_too_large       invalid_request_error  "request_too_large"
 *   OVERLOADED   529 / 503  overloaded_error        server_error           "overloaded"
 *   UNAVAILABLE  503        api_error               server_error           "unavailable"
 *   INTERNAL     500        api_error               server_error           null
 *
 * Anthropic's 529 is its own "overloaded" status; OpenAI has none, so an
 * OpenAI client sees 503, which its SDK retries like 529. Behind a balancer
 * (`--overload-status 503`) Anthropic's answer is 503 too, with the same
 * overloaded_error body: HAProxy's retry-on knows 503 but not 529, and
 * Claude Code reads a 503 with that body as overload and retries it. The SDKs choose
 * their exception class from the status alone, so the type strings are for
 * people and for clients that branch on them (Anthropic's documented set;
 * OpenAI's server_error for 5xx, as its API sends).
 *
 * TOO_LONG keeps the message exactly in the wording clients match with a
 * regular expression (Claude Code: /prompt is too long: (\d+) tokens >
 * (\d+) maximum/; LangChain and LiteLLM: "maximum context length is");
 * anything else travels in extra fields of the error object:
 * estimated_bytes and limit_bytes (the memory behind a refusal; 0 when the
 * limit is the context) and "detail" (the server's sentence, when given).
 * OpenAI's param is "messages" for chat and "prompt" for completions, and
 * the completions sentence says "your prompt".
 *
 * Retry-After is a header the server sets from retry_after_s; the body
 * does not repeat it.
 */
#include "server/api-json.h"

#include <string.h>

struct error_class {
    unsigned status;
    const char *anthropic_type;
    const char *openai_type;
    const char *openai_code; /* NULL: null */
    const char *default_message;
};

static const struct error_class classes[] = {
    [HR_API_ERR_INVALID] = {400, "invalid_request_error", "invalid_request_error", NULL,
                            "invalid request"},
    [HR_API_ERR_TOO_LONG] = {400, "invalid_request_error", "invalid_request_error",
                             "context_length_exceeded", "prompt is too long"},
    [HR_API_ERR_AUTH] = {401, "authentication_error", "authentication_error", "invalid_api_key",
                         "invalid API key"},
    [HR_API_ERR_NOT_FOUND] = {404, "not_found_error", "not_found_error", NULL, "not found"},
    [HR_API_ERR_METHOD] = {405, "invalid_request_error", "invalid_request_error",
                           "method_not_allowed", "method not allowed"},
    [HR_API_ERR_TOO_LARGE] = {413, "request_too_large", "invalid_request_error",
                              "request_too_large", "request exceeds the maximum allowed size"},
    [HR_API_ERR_OVERLOADED] = {529, "overloaded_error", "server_error", "overloaded", "overloaded"},
    [HR_API_ERR_UNAVAILABLE] = {503, "api_error", "server_error", "unavailable",
                                "the server is not ready"},
    [HR_API_ERR_INTERNAL] = {500, "api_error", "server_error", NULL, "internal server error"},
};

static const struct error_class *class_of(enum hr_api_error_class cls)
{
    if ((unsigned)cls >= sizeof(classes) / sizeof(classes[0])) cls = HR_API_ERR_INTERNAL;
    return &classes[cls];
}

unsigned hr_api_error_status(enum hr_api_kind kind, enum hr_api_error_class cls)
{
    return hr_api_error_status_for(kind, cls, 529);
}

unsigned hr_api_error_status_for(enum hr_api_kind kind, enum hr_api_error_class cls,
                                 unsigned anthropic_overload_status)
{
    if (cls == HR_API_ERR_OVERLOADED && kind != HR_API_ANTHROPIC) return 503;
    if (cls == HR_API_ERR_OVERLOADED) return anthropic_overload_status == 503 ? 503 : 529;
    return class_of(cls)->status;
}

/* e->message up to its NUL (it is a fixed array: never past its end). */
static size_t message_len(const struct hr_api_error *e)
{
    const char *nul = memchr(e->message, '\0', sizeof(e->message));
    return nul ? (size_t)(nul - e->message) : sizeof(e->message);
}

/* The fields TOO_LONG adds inside the error object, after a comma. */
static void too_long_extra(struct hr_api_json *j, const struct hr_api_error *e)
{
    hr_api_json_lit(j, ",\"estimated_bytes\":");
    hr_api_json_u64(j, e->estimated_bytes);
    hr_api_json_lit(j, ",\"limit_bytes\":");
    hr_api_json_u64(j, e->limit_bytes);
    size_t n = message_len(e);
    if (n) {
        hr_api_json_lit(j, ",\"detail\":");
        hr_api_json_str(j, e->message, n);
    }
}

static void error_body(struct hr_api_json *j, enum hr_api_kind kind, const struct hr_api_error *e)
{
    const struct error_class *c = class_of(e->cls);
    bool too_long = e->cls == HR_API_ERR_TOO_LONG;
    char text[256];
    const char *msg = e->message;
    size_t msg_len = message_len(e);
    if (too_long) {
        int n;
        if (kind == HR_API_ANTHROPIC)
            n = snprintf(text, sizeof(text), "prompt is too long: %u tokens > %u maximum",
                         (unsigned)e->n_prompt, (unsigned)e->max_prompt);
        else
            n = snprintf(text, sizeof(text),
                         "This model's maximum context length is %u tokens. However, your %s "
                         "resulted in %u tokens.",
                         (unsigned)e->max_prompt,
                         kind == HR_API_OPENAI_COMPLETION ? "prompt" : "messages",
                         (unsigned)e->n_prompt);
        msg = text;
        msg_len = (size_t)n;
    } else if (msg_len == 0) {
        msg = c->default_message;
        msg_len = strlen(msg);
    }

    if (kind == HR_API_ANTHROPIC) {
        hr_api_json_lit(j, "{\"type\":\"error\",\"error\":{\"type\":");
        hr_api_json_cstr(j, c->anthropic_type);
        hr_api_json_lit(j, ",\"message\":");
        hr_api_json_str(j, msg, msg_len);
    } else {
        hr_api_json_lit(j, "{\"error\":{\"message\":");
        hr_api_json_str(j, msg, msg_len);
        hr_api_json_lit(j, ",\"type\":");
        hr_api_json_cstr(j, c->openai_type);
        hr_api_json_lit(j, ",\"param\":");
        hr_api_json_cstr(j, too_long ? (kind == HR_API_OPENAI_COMPLETION ? "prompt" : "messages")
                                     : NULL);
        hr_api_json_lit(j, ",\"code\":");
        hr_api_json_cstr(j, c->openai_code);
    }
    if (too_long) too_long_extra(j, e);
    hr_api_json_lit(j, "}}");
}

/* Appends, or on failure leaves `out` as it was. */
static enum hr_status finish(struct hr_api_json *j, size_t len0)
{
    if (j->st != HR_OK) {
        j->b->len = len0;
        if (j->b->data) j->b->data[len0] = '\0';
    }
    return j->st;
}

enum hr_status hr_api_error_body(enum hr_api_kind kind, const struct hr_api_error *e,
                                 struct hr_api_buf *out)
{
    struct hr_api_json j = {out, HR_OK};
    size_t len0 = out->len;
    error_body(&j, kind, e);
    return finish(&j, len0);
}

enum hr_status hr_api_error_sse(enum hr_api_kind kind, const struct hr_api_error *e,
                                struct hr_api_buf *out)
{
    struct hr_api_json j = {out, HR_OK};
    size_t len0 = out->len;
    /* llama.cpp's server ends an OpenAI stream with the error data line
     * alone, no [DONE]; the OpenAI SDK raises on a data line with "error". */
    hr_api_json_lit(&j, kind == HR_API_ANTHROPIC ? "event: error\ndata: " : "data: ");
    error_body(&j, kind, e);
    hr_api_json_lit(&j, "\n\n");
    return finish(&j, len0);
}
