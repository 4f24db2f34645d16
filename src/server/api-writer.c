/*
 * api-writer.c - the bytes of a response, written from the chat parser's
 * events: SSE while streaming, one JSON document at the end otherwise.
 *
 * What each API's clients expect (measured with the real SDKs):
 *
 * Anthropic, streaming. Every message is "event: NAME\ndata: JSON\n\n":
 *
 *   message_start        message with content [] and usage (output 0)
 *   content_block_start  index i: text / thinking / tool_use (input {})
 *   content_block_delta  text_delta | thinking_delta | input_json_delta
 *   content_block_delta  signature_delta, last in a thinking block
 *   content_block_stop   index i
 *   ...                  (one block per run of one kind; a call is a block)
 *   message_delta        stop_reason, stop_sequence, usage.output_tokens
 *   message_stop
 *
 * A text or thinking block stays open while deltas of its kind arrive and
 * is closed by the next block or by finish; a tool_use block opens, gets
 * the whole arguments text as one input_json_delta and closes at once -
 * unless the parser streams the call (qwen3-coder): then the block opens at
 * the call's TOOL_CALL_BEGIN, each TOOL_ARGS piece is an input_json_delta,
 * and the complete call (marked streamed) closes it.
 * Anthropic usage counts the uncached prompt as input_tokens and the
 * prefix-cache hit as cache_read_input_tokens. Reasoning is dropped unless
 * the request enabled thinking. A thinking block needs a non-empty
 * signature, because clients send it back with the block on the next turn;
 * ours is base64 of "headroom:<message id>:<block index>", which names the
 * block and means nothing more.
 *
 * OpenAI chat, streaming. Every message is "data: JSON\n\n", a
 * chat.completion.chunk with one choice: first the role delta {"role":
 * "assistant","content":""}, then {"content"} / {"reasoning_content"}
 * deltas; a tool call is two chunks, the first with index, id, type, name
 * and empty arguments, the second with the arguments text (a streamed call:
 * the first chunk at TOOL_CALL_BEGIN, one chunk per TOOL_ARGS piece); then a chunk
 * with an empty delta and the finish_reason; with include_usage every
 * earlier chunk carries "usage":null and a last chunk has "choices":[] and
 * the usage; then "data: [DONE]". Completions stream text_completion
 * objects the same way, without the role chunk.
 *
 * Not streaming, the writer keeps the deltas (adjacent ones of one kind
 * joined) and the calls (ignoring call begins and argument pieces: the
 * complete call repeats them), and finish writes the Message, chat.completion or
 * text_completion. Anthropic tool_use input is the arguments text spliced
 * in as it is: chat-parse.h guarantees a compact JSON object, and going
 * through jansson would change the numbers' text.
 *
 * The stop reason: a call emitted and the turn ended -> tool_use /
 * tool_calls; a stop string -> stop_sequence (naming cfg.stop[stop_index])
 * / stop; the token limit -> max_tokens / length; else end_turn / stop.
 *
 * Tool call ids are the model's own when it wrote one (mistral), else
 * "toolu_" / "call_" and 24 characters drawn from an hr_rng seeded with
 * cfg.seed, so one seed gives the same ids streaming or not.
 *
 * Completions have no calls; should a call event reach one (the server
 * offers no tools there), it is written as the text
 * {"name":"f","arguments":{...}}, since the event no longer holds the
 * model's own bytes.
 *
 * Order: an event or finish before start writes the opening messages
 * first, so a stream is always well formed; pings may come before start
 * (while the request waits in the queue) since both SDKs skip them
 * anywhere; anything but a ping after finish is a bug of ours (HR_ASSERT).
 * Every call either appends whole messages or, when memory runs out, leaves
 * `out` and the writer as it found them.
 */
#include "server/api-json.h"

#include <stdlib.h>
#include <string.h>

#include "base/rand.h"

#define BLOCK_NONE (-1)

/* A joined run of text or reasoning, or one call (not streaming). */
struct acc_block {
    enum hr_chat_event_kind kind;
    struct hr_api_buf text; /* the text, or the call's arguments */
    char *name, *id;        /* TOOL_CALL */
};

struct hr_api_writer {
    enum hr_api_kind kind;
    bool stream, include_usage, thinking;
    char *model, *id;
    int64_t created;
    uint32_t n_prompt, n_cached;
    char **stop;
    uint32_t n_stop;
    struct hr_rng rng;

    bool started, finished;
    size_t n_calls; /* tool calls written as calls */

    /* Anthropic streaming */
    int open;          /* the hr_chat_event_kind of the open text or thinking block */
    uint32_t n_blocks; /* the index the next block gets */

    /* not streaming */
    struct acc_block *acc;
    size_t n_acc, cap_acc;
};

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n + 1);
    return d;
}

/* What a streaming call changes, kept so that a call that runs out of
 * memory leaves the writer, like `out`, as it found it. */
struct snapshot {
    size_t len0; /* out->len */
    int open;
    uint32_t n_blocks;
    size_t n_calls;
    struct hr_rng rng;
};

static struct snapshot snap(const struct hr_api_writer *w, const struct hr_api_buf *out)
{
    return (struct snapshot){out->len, w->open, w->n_blocks, w->n_calls, w->rng};
}

/* Ends a call: on failure `out` and the writer go back to the snapshot. */
static enum hr_status done(struct hr_api_writer *w, struct hr_api_json *j, const struct snapshot *s)
{
    if (j->st != HR_OK) {
        j->b->len = s->len0;
        if (j->b->data) j->b->data[s->len0] = '\0';
        w->open = s->open;
        w->n_blocks = s->n_blocks;
        w->n_calls = s->n_calls;
        w->rng = s->rng;
    }
    return j->st;
}

/* ---- shared pieces ---- */

static const char *stop_sequence(const struct hr_api_writer *w, enum hr_api_finish finish,
                                 int32_t stop_index)
{
    if (finish == HR_API_FINISH_STOP_SEQ && stop_index >= 0 && (uint32_t)stop_index < w->n_stop)
        return w->stop[stop_index];
    return NULL;
}

static const char *stop_reason(const struct hr_api_writer *w, enum hr_api_finish finish)
{
    bool anthropic = w->kind == HR_API_ANTHROPIC;
    switch (finish) {
    case HR_API_FINISH_STOP_SEQ:
        return anthropic ? "stop_sequence" : "stop";
    case HR_API_FINISH_LENGTH:
        return anthropic ? "max_tokens" : "length";
    case HR_API_FINISH_STOP:
        break;
    }
    if (w->n_calls > 0) return anthropic ? "tool_use" : "tool_calls";
    return anthropic ? "end_turn" : "stop";
}

/* The id of a call: the model's, or a fresh one in `tmp`. */
static const char *call_id(struct hr_api_writer *w, const struct hr_chat_event *ev, char *tmp,
                           size_t cap)
{
    if (ev->id && ev->id[0]) return ev->id;
    hr_chat_call_id_make(tmp, cap, w->kind == HR_API_ANTHROPIC ? "toolu_" : "call_", &w->rng);
    return tmp;
}

/* A call as text, for completions, which have no calls:
 * {"name":"f","arguments":{...}}. */
static enum hr_status call_text(const struct hr_chat_event *ev, struct hr_api_buf *tmp)
{
    struct hr_api_json j = {tmp, HR_OK};
    hr_api_json_lit(&j, "{\"name\":");
    hr_api_json_cstr(&j, ev->name ? ev->name : "");
    hr_api_json_lit(&j, ",\"arguments\":");
    if (ev->arguments && ev->arguments_len)
        hr_api_json_raw(&j, ev->arguments, ev->arguments_len);
    else
        hr_api_json_lit(&j, "{}");
    hr_api_json_lit(&j, "}");
    return j.st;
}

static void args_raw(struct hr_api_json *j, const char *args, size_t n)
{
    if (args && n)
        hr_api_json_raw(j, args, n);
    else
        hr_api_json_lit(j, "{}");
}

/* The signature of thinking block `index`, a JSON string. */
static void signature(const struct hr_api_writer *w, uint32_t index, struct hr_api_json *j)
{
    static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char plain[192];
    int n = snprintf(plain, sizeof(plain), "headroom:%.160s:%u", w->id, (unsigned)index);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof(plain) ? (size_t)n : sizeof(plain) - 1;
    char enc[4 * sizeof(plain) / 3 + 8];
    size_t k = 0;
    for (size_t i = 0; i < len; i += 3) {
        unsigned v = (unsigned char)plain[i] << 16;
        if (i + 1 < len) v |= (unsigned char)plain[i + 1] << 8;
        if (i + 2 < len) v |= (unsigned char)plain[i + 2];
        enc[k++] = b64[(v >> 18) & 63];
        enc[k++] = b64[(v >> 12) & 63];
        enc[k++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
        enc[k++] = i + 2 < len ? b64[v & 63] : '=';
    }
    hr_api_json_str(j, enc, k);
}

static void usage_anthropic(const struct hr_api_writer *w, uint32_t n_output, struct hr_api_json *j)
{
    uint32_t cached = w->n_cached < w->n_prompt ? w->n_cached : w->n_prompt;
    hr_api_json_lit(j, "{\"input_tokens\":");
    hr_api_json_u64(j, w->n_prompt - cached);
    hr_api_json_lit(j, ",\"output_tokens\":");
    hr_api_json_u64(j, n_output);
    hr_api_json_lit(j, ",\"cache_read_input_tokens\":");
    hr_api_json_u64(j, cached);
    hr_api_json_lit(j, ",\"cache_creation_input_tokens\":0}");
}

static void usage_openai(const struct hr_api_writer *w, uint32_t n_output, struct hr_api_json *j)
{
    uint32_t cached = w->n_cached < w->n_prompt ? w->n_cached : w->n_prompt;
    hr_api_json_lit(j, "{\"prompt_tokens\":");
    hr_api_json_u64(j, w->n_prompt);
    hr_api_json_lit(j, ",\"completion_tokens\":");
    hr_api_json_u64(j, n_output);
    hr_api_json_lit(j, ",\"total_tokens\":");
    hr_api_json_u64(j, (uint64_t)w->n_prompt + n_output);
    hr_api_json_lit(j, ",\"prompt_tokens_details\":{\"cached_tokens\":");
    hr_api_json_u64(j, cached);
    hr_api_json_lit(j, "}}");
}

/* {"id":..,"object":..,"created":..,"model":..,"system_fingerprint":..," */
static void openai_head(const struct hr_api_writer *w, const char *object, struct hr_api_json *j)
{
    hr_api_json_lit(j, "{\"id\":");
    hr_api_json_cstr(j, w->id);
    hr_api_json_lit(j, ",\"object\":");
    hr_api_json_cstr(j, object);
    hr_api_json_lit(j, ",\"created\":");
    hr_api_json_i64(j, w->created);
    hr_api_json_lit(j, ",\"model\":");
    hr_api_json_cstr(j, w->model);
    hr_api_json_lit(j, ",\"system_fingerprint\":\"headroom\"");
}

/* ---- Anthropic, streaming ---- */

static void sse_open(struct hr_api_json *j, const char *event)
{
    hr_api_json_lit(j, "event: ");
    hr_api_json_lit(j, event);
    hr_api_json_lit(j, "\ndata: ");
}

static void block_start(struct hr_api_writer *w, struct hr_api_json *j)
{
    sse_open(j, "content_block_start");
    hr_api_json_lit(j, "{\"type\":\"content_block_start\",\"index\":");
    hr_api_json_u64(j, w->n_blocks);
    hr_api_json_lit(j, ",\"content_block\":");
}

/* {"type":"content_block_delta","index":i,"delta":{"type":TYPE,FIELD: */
static void block_delta(struct hr_api_writer *w, struct hr_api_json *j, const char *type,
                        const char *field)
{
    sse_open(j, "content_block_delta");
    hr_api_json_lit(j, "{\"type\":\"content_block_delta\",\"index\":");
    hr_api_json_u64(j, w->n_blocks);
    hr_api_json_lit(j, ",\"delta\":{\"type\":\"");
    hr_api_json_lit(j, type);
    hr_api_json_lit(j, "\",\"");
    hr_api_json_lit(j, field);
    hr_api_json_lit(j, "\":");
}

static void block_stop(struct hr_api_writer *w, struct hr_api_json *j)
{
    sse_open(j, "content_block_stop");
    hr_api_json_lit(j, "{\"type\":\"content_block_stop\",\"index\":");
    hr_api_json_u64(j, w->n_blocks);
    hr_api_json_lit(j, "}\n\n");
    w->n_blocks++;
}

static void anthropic_close_open(struct hr_api_writer *w, struct hr_api_json *j)
{
    if (w->open == BLOCK_NONE) return;
    if (w->open == HR_CHAT_EVENT_REASONING) {
        block_delta(w, j, "signature_delta", "signature");
        signature(w, w->n_blocks, j);
        hr_api_json_lit(j, "}}\n\n");
    }
    block_stop(w, j);
    w->open = BLOCK_NONE;
}

static void anthropic_start(struct hr_api_writer *w, struct hr_api_json *j)
{
    sse_open(j, "message_start");
    hr_api_json_lit(j, "{\"type\":\"message_start\",\"message\":{\"id\":");
    hr_api_json_cstr(j, w->id);
    hr_api_json_lit(j, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    hr_api_json_cstr(j, w->model);
    hr_api_json_lit(j, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
    usage_anthropic(w, 0, j);
    hr_api_json_lit(j, "}}\n\n");
}

static void anthropic_event(struct hr_api_writer *w, struct hr_api_json *j,
                            const struct hr_chat_event *ev)
{
    if (ev->kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN) {
        char tmp[64];
        anthropic_close_open(w, j);
        block_start(w, j);
        hr_api_json_lit(j, "{\"type\":\"tool_use\",\"id\":");
        hr_api_json_cstr(j, call_id(w, ev, tmp, sizeof(tmp)));
        hr_api_json_lit(j, ",\"name\":");
        hr_api_json_cstr(j, ev->name ? ev->name : "");
        hr_api_json_lit(j, ",\"input\":{}}}\n\n");
        return;
    }
    if (ev->kind == HR_CHAT_EVENT_TOOL_ARGS) {
        if (ev->len == 0) return;
        block_delta(w, j, "input_json_delta", "partial_json");
        hr_api_json_str(j, ev->text, ev->len);
        hr_api_json_lit(j, "}}\n\n");
        return;
    }
    if (ev->kind == HR_CHAT_EVENT_TOOL_CALL && ev->streamed) {
        block_stop(w, j);
        w->n_calls++;
        return;
    }
    if (ev->kind == HR_CHAT_EVENT_TOOL_CALL) {
        char tmp[64];
        anthropic_close_open(w, j);
        block_start(w, j);
        hr_api_json_lit(j, "{\"type\":\"tool_use\",\"id\":");
        hr_api_json_cstr(j, call_id(w, ev, tmp, sizeof(tmp)));
        hr_api_json_lit(j, ",\"name\":");
        hr_api_json_cstr(j, ev->name ? ev->name : "");
        hr_api_json_lit(j, ",\"input\":{}}}\n\n");
        block_delta(w, j, "input_json_delta", "partial_json");
        if (ev->arguments && ev->arguments_len)
            hr_api_json_str(j, ev->arguments, ev->arguments_len);
        else
            hr_api_json_lit(j, "\"{}\"");
        hr_api_json_lit(j, "}}\n\n");
        block_stop(w, j);
        w->n_calls++;
        return;
    }
    bool reasoning = ev->kind == HR_CHAT_EVENT_REASONING;
    if ((reasoning && !w->thinking) || ev->len == 0) return;
    if (w->open != (int)ev->kind) {
        anthropic_close_open(w, j);
        block_start(w, j);
        hr_api_json_lit(j, reasoning
                               ? "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}}\n\n"
                               : "{\"type\":\"text\",\"text\":\"\"}}\n\n");
        w->open = (int)ev->kind;
    }
    if (reasoning)
        block_delta(w, j, "thinking_delta", "thinking");
    else
        block_delta(w, j, "text_delta", "text");
    hr_api_json_str(j, ev->text, ev->len);
    hr_api_json_lit(j, "}}\n\n");
}

static void anthropic_finish(struct hr_api_writer *w, struct hr_api_json *j,
                             enum hr_api_finish finish, int32_t stop_index, uint32_t n_output)
{
    anthropic_close_open(w, j);
    sse_open(j, "message_delta");
    hr_api_json_lit(j, "{\"type\":\"message_delta\",\"delta\":{\"stop_reason\":");
    hr_api_json_cstr(j, stop_reason(w, finish));
    hr_api_json_lit(j, ",\"stop_sequence\":");
    hr_api_json_cstr(j, stop_sequence(w, finish, stop_index));
    hr_api_json_lit(j, "},\"usage\":{\"output_tokens\":");
    hr_api_json_u64(j, n_output);
    hr_api_json_lit(j, "}}\n\n");
    sse_open(j, "message_stop");
    hr_api_json_lit(j, "{\"type\":\"message_stop\"}\n\n");
}

/* ---- OpenAI, streaming ---- */

/* data: {head,"choices":[{"index":0,"delta": */
static void chat_chunk_open(const struct hr_api_writer *w, struct hr_api_json *j)
{
    hr_api_json_lit(j, "data: ");
    openai_head(w, "chat.completion.chunk", j);
    hr_api_json_lit(j, ",\"choices\":[{\"index\":0,\"delta\":");
}

/* ,"logprobs":null,"finish_reason":F}],"usage":null}\n\n (usage only when asked) */
static void chunk_close(const struct hr_api_writer *w, struct hr_api_json *j, const char *finish)
{
    hr_api_json_lit(j, ",\"logprobs\":null,\"finish_reason\":");
    hr_api_json_cstr(j, finish);
    hr_api_json_lit(j, w->include_usage ? "}],\"usage\":null}\n\n" : "}]}\n\n");
}

static void completion_chunk(const struct hr_api_writer *w, struct hr_api_json *j, const char *text,
                             size_t len, const char *finish)
{
    hr_api_json_lit(j, "data: ");
    openai_head(w, "text_completion", j);
    hr_api_json_lit(j, ",\"choices\":[{\"text\":");
    hr_api_json_str(j, text, len);
    hr_api_json_lit(j, ",\"index\":0");
    chunk_close(w, j, finish);
}

static void chat_start(const struct hr_api_writer *w, struct hr_api_json *j)
{
    chat_chunk_open(w, j);
    hr_api_json_lit(j, "{\"role\":\"assistant\",\"content\":\"\"}");
    chunk_close(w, j, NULL);
}

static void chat_event(struct hr_api_writer *w, struct hr_api_json *j,
                       const struct hr_chat_event *ev)
{
    if (ev->kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN) {
        char tmp[64];
        chat_chunk_open(w, j);
        hr_api_json_lit(j, "{\"tool_calls\":[{\"index\":");
        hr_api_json_u64(j, w->n_calls);
        hr_api_json_lit(j, ",\"id\":");
        hr_api_json_cstr(j, call_id(w, ev, tmp, sizeof(tmp)));
        hr_api_json_lit(j, ",\"type\":\"function\",\"function\":{\"name\":");
        hr_api_json_cstr(j, ev->name ? ev->name : "");
        hr_api_json_lit(j, ",\"arguments\":\"\"}}]}");
        chunk_close(w, j, NULL);
        return;
    }
    if (ev->kind == HR_CHAT_EVENT_TOOL_ARGS) {
        if (ev->len == 0) return;
        chat_chunk_open(w, j);
        hr_api_json_lit(j, "{\"tool_calls\":[{\"index\":");
        hr_api_json_u64(j, w->n_calls);
        hr_api_json_lit(j, ",\"function\":{\"arguments\":");
        hr_api_json_str(j, ev->text, ev->len);
        hr_api_json_lit(j, "}}]}");
        chunk_close(w, j, NULL);
        return;
    }
    if (ev->kind == HR_CHAT_EVENT_TOOL_CALL && ev->streamed) {
        w->n_calls++;
        return;
    }
    if (ev->kind == HR_CHAT_EVENT_TOOL_CALL) {
        char tmp[64];
        chat_chunk_open(w, j);
        hr_api_json_lit(j, "{\"tool_calls\":[{\"index\":");
        hr_api_json_u64(j, w->n_calls);
        hr_api_json_lit(j, ",\"id\":");
        hr_api_json_cstr(j, call_id(w, ev, tmp, sizeof(tmp)));
        hr_api_json_lit(j, ",\"type\":\"function\",\"function\":{\"name\":");
        hr_api_json_cstr(j, ev->name ? ev->name : "");
        hr_api_json_lit(j, ",\"arguments\":\"\"}}]}");
        chunk_close(w, j, NULL);
        chat_chunk_open(w, j);
        hr_api_json_lit(j, "{\"tool_calls\":[{\"index\":");
        hr_api_json_u64(j, w->n_calls);
        hr_api_json_lit(j, ",\"function\":{\"arguments\":");
        if (ev->arguments && ev->arguments_len)
            hr_api_json_str(j, ev->arguments, ev->arguments_len);
        else
            hr_api_json_lit(j, "\"{}\"");
        hr_api_json_lit(j, "}}]}");
        chunk_close(w, j, NULL);
        w->n_calls++;
        return;
    }
    if (ev->len == 0) return;
    chat_chunk_open(w, j);
    hr_api_json_lit(j, ev->kind == HR_CHAT_EVENT_REASONING ? "{\"reasoning_content\":"
                                                           : "{\"content\":");
    hr_api_json_str(j, ev->text, ev->len);
    hr_api_json_lit(j, "}");
    chunk_close(w, j, NULL);
}

static void completion_event(struct hr_api_writer *w, struct hr_api_json *j,
                             const struct hr_chat_event *ev)
{
    if (ev->kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN || ev->kind == HR_CHAT_EVENT_TOOL_ARGS)
        return; /* the complete call follows and is written as text */
    if (ev->kind == HR_CHAT_EVENT_TOOL_CALL) {
        struct hr_api_buf tmp = {0};
        enum hr_status st = call_text(ev, &tmp);
        if (st == HR_OK)
            completion_chunk(w, j, tmp.data, tmp.len, NULL);
        else if (j->st == HR_OK)
            j->st = st;
        hr_api_buf_free(&tmp);
        return;
    }
    if (ev->len) completion_chunk(w, j, ev->text, ev->len, NULL);
}

static void openai_finish_stream(struct hr_api_writer *w, struct hr_api_json *j,
                                 enum hr_api_finish finish, uint32_t n_output)
{
    const char *reason = stop_reason(w, finish);
    if (w->kind == HR_API_OPENAI_COMPLETION) {
        completion_chunk(w, j, "", 0, reason);
    } else {
        chat_chunk_open(w, j);
        hr_api_json_lit(j, "{}");
        chunk_close(w, j, reason);
    }
    if (w->include_usage) {
        hr_api_json_lit(j, "data: ");
        openai_head(
            w, w->kind == HR_API_OPENAI_COMPLETION ? "text_completion" : "chat.completion.chunk",
            j);
        hr_api_json_lit(j, ",\"choices\":[],\"usage\":");
        usage_openai(w, n_output, j);
        hr_api_json_lit(j, "}\n\n");
    }
    hr_api_json_lit(j, "data: [DONE]\n\n");
}

/* ---- not streaming: accumulate, then one document ---- */

static enum hr_status acc_push(struct hr_api_writer *w)
{
    if (w->n_acc < w->cap_acc) return HR_OK;
    size_t cap = w->cap_acc ? 2 * w->cap_acc : 8;
    struct acc_block *a = realloc(w->acc, cap * sizeof(*a));
    if (!a) return HR_ERR_NOMEM;
    w->acc = a;
    w->cap_acc = cap;
    return HR_OK;
}

static enum hr_status acc_text(struct hr_api_writer *w, enum hr_chat_event_kind kind,
                               const char *text, size_t len)
{
    if (len == 0) return HR_OK;
    if (w->n_acc > 0 && w->acc[w->n_acc - 1].kind == kind)
        return hr_api_buf_put(&w->acc[w->n_acc - 1].text, text, len);
    if (acc_push(w) != HR_OK) return HR_ERR_NOMEM;
    struct acc_block b = {.kind = kind};
    if (hr_api_buf_put(&b.text, text, len) != HR_OK) return HR_ERR_NOMEM;
    w->acc[w->n_acc++] = b;
    return HR_OK;
}

static enum hr_status acc_event(struct hr_api_writer *w, const struct hr_chat_event *ev)
{
    if (ev->kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN || ev->kind == HR_CHAT_EVENT_TOOL_ARGS)
        return HR_OK; /* the complete call follows */
    if (w->kind == HR_API_OPENAI_COMPLETION) {
        if (ev->kind != HR_CHAT_EVENT_TOOL_CALL)
            return acc_text(w, HR_CHAT_EVENT_CONTENT, ev->text, ev->len);
        struct hr_api_buf tmp = {0};
        enum hr_status st = call_text(ev, &tmp);
        if (st == HR_OK) st = acc_text(w, HR_CHAT_EVENT_CONTENT, tmp.data, tmp.len);
        hr_api_buf_free(&tmp);
        return st;
    }
    if (ev->kind == HR_CHAT_EVENT_REASONING && w->kind == HR_API_ANTHROPIC && !w->thinking)
        return HR_OK;
    if (ev->kind != HR_CHAT_EVENT_TOOL_CALL) return acc_text(w, ev->kind, ev->text, ev->len);

    if (acc_push(w) != HR_OK) return HR_ERR_NOMEM;
    char tmp[64];
    struct acc_block b = {.kind = HR_CHAT_EVENT_TOOL_CALL};
    b.name = dup_str(ev->name ? ev->name : "");
    b.id = dup_str(call_id(w, ev, tmp, sizeof(tmp)));
    if (!b.name || !b.id || hr_api_buf_put(&b.text, ev->arguments, ev->arguments_len) != HR_OK) {
        free(b.name);
        free(b.id);
        hr_api_buf_free(&b.text);
        return HR_ERR_NOMEM;
    }
    w->acc[w->n_acc++] = b;
    w->n_calls++;
    return HR_OK;
}

static void anthropic_document(struct hr_api_writer *w, struct hr_api_json *j,
                               enum hr_api_finish finish, int32_t stop_index, uint32_t n_output)
{
    hr_api_json_lit(j, "{\"id\":");
    hr_api_json_cstr(j, w->id);
    hr_api_json_lit(j, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
    hr_api_json_cstr(j, w->model);
    hr_api_json_lit(j, ",\"content\":[");
    for (size_t i = 0; i < w->n_acc; i++) {
        const struct acc_block *b = &w->acc[i];
        if (i) hr_api_json_lit(j, ",");
        switch (b->kind) {
        case HR_CHAT_EVENT_CONTENT:
            hr_api_json_lit(j, "{\"type\":\"text\",\"text\":");
            hr_api_json_str(j, b->text.data, b->text.len);
            break;
        case HR_CHAT_EVENT_REASONING:
            hr_api_json_lit(j, "{\"type\":\"thinking\",\"thinking\":");
            hr_api_json_str(j, b->text.data, b->text.len);
            hr_api_json_lit(j, ",\"signature\":");
            signature(w, (uint32_t)i, j);
            break;
        case HR_CHAT_EVENT_TOOL_CALL:
            hr_api_json_lit(j, "{\"type\":\"tool_use\",\"id\":");
            hr_api_json_cstr(j, b->id);
            hr_api_json_lit(j, ",\"name\":");
            hr_api_json_cstr(j, b->name);
            hr_api_json_lit(j, ",\"input\":");
            args_raw(j, b->text.data, b->text.len);
            break;
        case HR_CHAT_EVENT_TOOL_CALL_BEGIN:
        case HR_CHAT_EVENT_TOOL_ARGS:
            HR_ASSERT(!"never accumulated (acc_event skips them)");
            break;
        }
        hr_api_json_lit(j, "}");
    }
    hr_api_json_lit(j, "],\"stop_reason\":");
    hr_api_json_cstr(j, stop_reason(w, finish));
    hr_api_json_lit(j, ",\"stop_sequence\":");
    hr_api_json_cstr(j, stop_sequence(w, finish, stop_index));
    hr_api_json_lit(j, ",\"usage\":");
    usage_anthropic(w, n_output, j);
    hr_api_json_lit(j, "}");
}

/* Whether any accumulated block of one kind has text. */
static bool has_text(const struct hr_api_writer *w, enum hr_chat_event_kind kind)
{
    for (size_t i = 0; i < w->n_acc; i++)
        if (w->acc[i].kind == kind && w->acc[i].text.len) return true;
    return false;
}

/* The joined text of every accumulated block of one kind, as one JSON string. */
static void joined_str(const struct hr_api_writer *w, struct hr_api_json *j,
                       enum hr_chat_event_kind kind)
{
    hr_api_json_lit(j, "\"");
    for (size_t i = 0; i < w->n_acc; i++)
        if (w->acc[i].kind == kind)
            hr_api_json_str_body(j, w->acc[i].text.data, w->acc[i].text.len);
    hr_api_json_lit(j, "\"");
}

static void openai_document(struct hr_api_writer *w, struct hr_api_json *j,
                            enum hr_api_finish finish, uint32_t n_output)
{
    bool completion = w->kind == HR_API_OPENAI_COMPLETION;
    openai_head(w, completion ? "text_completion" : "chat.completion", j);
    if (completion) {
        hr_api_json_lit(j, ",\"choices\":[{\"text\":");
        joined_str(w, j, HR_CHAT_EVENT_CONTENT);
        hr_api_json_lit(j, ",\"index\":0");
    } else {
        hr_api_json_lit(
            j, ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":");
        /* null only when the turn is nothing but calls, as OpenAI writes it */
        if (w->n_calls > 0 && !has_text(w, HR_CHAT_EVENT_CONTENT))
            hr_api_json_lit(j, "null");
        else
            joined_str(w, j, HR_CHAT_EVENT_CONTENT);
        if (has_text(w, HR_CHAT_EVENT_REASONING)) {
            hr_api_json_lit(j, ",\"reasoning_content\":");
            joined_str(w, j, HR_CHAT_EVENT_REASONING);
        }
        if (w->n_calls > 0) {
            hr_api_json_lit(j, ",\"tool_calls\":[");
            bool first = true;
            for (size_t i = 0; i < w->n_acc; i++) {
                const struct acc_block *b = &w->acc[i];
                if (b->kind != HR_CHAT_EVENT_TOOL_CALL) continue;
                hr_api_json_lit(j, first ? "{\"id\":" : ",{\"id\":");
                first = false;
                hr_api_json_cstr(j, b->id);
                hr_api_json_lit(j, ",\"type\":\"function\",\"function\":{\"name\":");
                hr_api_json_cstr(j, b->name);
                hr_api_json_lit(j, ",\"arguments\":");
                if (b->text.len)
                    hr_api_json_str(j, b->text.data, b->text.len);
                else
                    hr_api_json_lit(j, "\"{}\"");
                hr_api_json_lit(j, "}}");
            }
            hr_api_json_lit(j, "]");
        }
        hr_api_json_lit(j, "}");
    }
    hr_api_json_lit(j, ",\"logprobs\":null,\"finish_reason\":");
    hr_api_json_cstr(j, stop_reason(w, finish));
    hr_api_json_lit(j, "}],\"usage\":");
    usage_openai(w, n_output, j);
    hr_api_json_lit(j, "}");
}

/* ---- the API ---- */

enum hr_status hr_api_writer_init(const struct hr_api_writer_config *cfg,
                                  struct hr_api_writer **out, struct hr_err *err)
{
    *out = NULL;
    if ((unsigned)cfg->kind > HR_API_OPENAI_COMPLETION)
        return hr_err_set(err, HR_ERR_INVALID, "writer: unknown API kind %d", (int)cfg->kind);
    struct hr_api_writer *w = calloc(1, sizeof(*w));
    if (!w) return hr_err_set(err, HR_ERR_NOMEM, "writer: out of memory");
    w->kind = cfg->kind;
    w->stream = cfg->stream;
    w->include_usage = cfg->include_usage && cfg->kind != HR_API_ANTHROPIC;
    w->thinking = cfg->thinking;
    w->created = cfg->created;
    w->n_prompt = cfg->n_prompt;
    w->n_cached = cfg->n_cached;
    w->open = BLOCK_NONE;
    hr_rng_seed(&w->rng, cfg->seed);
    w->model = dup_str(cfg->model ? cfg->model : "");
    if (cfg->id) {
        w->id = dup_str(cfg->id);
    } else {
        /* No id given: make one in the API's form from the same seed. */
        static const char *const prefix[] = {"msg_", "chatcmpl-", "cmpl-"};
        char tmp[64];
        hr_chat_call_id_make(tmp, sizeof(tmp), prefix[cfg->kind], &w->rng);
        w->id = dup_str(tmp);
    }
    bool ok = w->model && w->id;
    if (ok && cfg->n_stop > 0 && cfg->stop) {
        w->stop = calloc(cfg->n_stop, sizeof(*w->stop));
        ok = w->stop != NULL;
        for (uint32_t i = 0; ok && i < cfg->n_stop; i++) {
            w->stop[i] = dup_str(cfg->stop[i] ? cfg->stop[i] : "");
            ok = w->stop[i] != NULL;
            w->n_stop = i + 1;
        }
    }
    if (!ok) {
        hr_api_writer_free(w);
        return hr_err_set(err, HR_ERR_NOMEM, "writer: out of memory");
    }
    *out = w;
    return HR_OK;
}

void hr_api_writer_free(struct hr_api_writer *w)
{
    if (!w) return;
    free(w->model);
    free(w->id);
    for (uint32_t i = 0; i < w->n_stop; i++) free(w->stop[i]);
    free(w->stop);
    for (size_t i = 0; i < w->n_acc; i++) {
        hr_api_buf_free(&w->acc[i].text);
        free(w->acc[i].name);
        free(w->acc[i].id);
    }
    free(w->acc);
    free(w);
}

/* The opening messages of a stream, once. */
static void stream_start(struct hr_api_writer *w, struct hr_api_json *j)
{
    if (w->started) return;
    if (w->kind == HR_API_ANTHROPIC)
        anthropic_start(w, j);
    else if (w->kind == HR_API_OPENAI_CHAT)
        chat_start(w, j);
}

void hr_api_writer_set_cached(struct hr_api_writer *w, uint32_t n_cached)
{
    w->n_cached = n_cached;
}

enum hr_status hr_api_writer_start(struct hr_api_writer *w, struct hr_api_buf *out)
{
    HR_ASSERT(!w->finished);
    struct hr_api_json j = {out, HR_OK};
    struct snapshot s0 = snap(w, out);
    if (w->stream) stream_start(w, &j);
    if (j.st == HR_OK) w->started = true;
    return done(w, &j, &s0);
}

enum hr_status hr_api_writer_event(struct hr_api_writer *w, const struct hr_chat_event *ev,
                                   struct hr_api_buf *out)
{
    HR_ASSERT(!w->finished);
    if (!w->stream) {
        struct hr_rng rng0 = w->rng;
        enum hr_status st = acc_event(w, ev);
        if (st != HR_OK) w->rng = rng0; /* the next call id is drawn again */
        return st;
    }
    /* An event before start still gets a well-formed stream. */
    enum hr_status st = w->started ? HR_OK : hr_api_writer_start(w, out);
    if (st != HR_OK) return st;
    struct hr_api_json j = {out, HR_OK};
    struct snapshot s0 = snap(w, out);
    switch (w->kind) {
    case HR_API_ANTHROPIC:
        anthropic_event(w, &j, ev);
        break;
    case HR_API_OPENAI_CHAT:
        chat_event(w, &j, ev);
        break;
    case HR_API_OPENAI_COMPLETION:
        completion_event(w, &j, ev);
        break;
    }
    return done(w, &j, &s0);
}

enum hr_status hr_api_writer_ping(struct hr_api_writer *w, struct hr_api_buf *out)
{
    static const char anthropic_ping[] = "event: ping\ndata: {\"type\": \"ping\"}\n\n";
    if (!w->stream || w->finished) return HR_OK;
    /* Both SDKs skip these: the Anthropic ones drop `ping` events wherever
     * they come (so before message_start too), OpenAI's SSE decoders drop
     * comment lines. */
    if (w->kind == HR_API_ANTHROPIC)
        return hr_api_buf_put(out, anthropic_ping, strlen(anthropic_ping));
    return hr_api_buf_put(out, ": ping\n\n", strlen(": ping\n\n"));
}

enum hr_status hr_api_writer_finish(struct hr_api_writer *w, enum hr_api_finish finish,
                                    int32_t stop_index, uint32_t n_output, struct hr_api_buf *out)
{
    HR_ASSERT(!w->finished);
    struct hr_api_json j = {out, HR_OK};
    struct snapshot s0 = snap(w, out);
    if (w->stream) {
        stream_start(w, &j);
        if (w->kind == HR_API_ANTHROPIC)
            anthropic_finish(w, &j, finish, stop_index, n_output);
        else
            openai_finish_stream(w, &j, finish, n_output);
    } else if (w->kind == HR_API_ANTHROPIC) {
        anthropic_document(w, &j, finish, stop_index, n_output);
    } else {
        openai_document(w, &j, finish, n_output);
    }
    if (j.st == HR_OK) w->finished = w->started = true;
    return done(w, &j, &s0);
}
