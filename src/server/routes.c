/*
 * routes.c - what each URL does, the model the server holds, and the bridge
 * from scheduler events to response bytes.
 *
 * A generation route (messages, chat completions, completions) runs on an
 * MHD thread up to hr_sched_submit: parse (api-request.c), render the chat
 * template, tokenize, submit. Everything after happens in on_event on the
 * engine thread: text through the tool-call/reasoning parser (chat-parse.h)
 * into the response writer (api-writer.c), then a wake for the connection.
 * The event callback holds only the generation's own mutex and does no I/O,
 * so the engine thread never waits on a client.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "base/sys.h"
#include "engine/engine.h"
#include "engine/kv-cache.h"
#include "kernels/matmul.h"
#include "mem/counters.h"
#include "mem/decisions.h"
#include "mem/probe.h"
#include "mem/size.h"
#include "server/server-impl.h"

typedef enum MHD_Result (*route_fn)(struct hr_exchange *ex);

struct hr_route {
    const char *path;
    const char *methods; /* space-separated, e.g. "GET HEAD" */
    enum hr_metrics_route id;
    route_fn fn;
};

/* ---- small helpers ------------------------------------------------------------ */

static enum MHD_Result fail(struct hr_exchange *ex, enum hr_api_error_class cls,
                            unsigned retry_after_s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static enum MHD_Result fail(struct hr_exchange *ex, enum hr_api_error_class cls,
                            unsigned retry_after_s, const char *fmt, ...)
{
    struct hr_api_error e = {.cls = cls, .retry_after_s = retry_after_s};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e.message, sizeof(e.message), fmt, ap);
    va_end(ap);
    return hr_respond_error(ex, &e);
}

/* Generation routes need the model loaded and the server not stopping. */
static enum MHD_Result unavailable(struct hr_exchange *ex)
{
    const int st = atomic_load(&ex->srv->state);
    return fail(ex, HR_API_ERR_UNAVAILABLE, st == HR_SERVER_LOADING ? 2 : 0, "%s",
                st == HR_SERVER_LOADING ? "the model is still loading; retry shortly"
                                        : "the server is shutting down");
}

static json_t *parse_body(struct hr_exchange *ex, struct hr_err *err)
{
    json_error_t je;
    json_t *doc = json_loadb(ex->body ? ex->body : "", ex->n_body, 0, &je);
    if (!doc)
        hr_err_set(err, HR_ERR_INVALID, "request body is not valid JSON: %s (line %d, column %d)",
                   je.text, je.line, je.column);
    else if (!json_is_object(doc)) {
        hr_err_set(err, HR_ERR_INVALID, "request body must be a JSON object");
        json_decref(doc);
        doc = NULL;
    }
    return doc;
}

/* ---- prompts ------------------------------------------------------------------ */

/* The text of a final assistant message (string content, or text parts
 * that are all one text), or NULL when the conversation ends otherwise. */
static const char *final_assistant_text(const json_t *messages)
{
    const json_t *last = json_array_get(messages, json_array_size(messages) - 1);
    if (!json_is_string(json_object_get(last, "role")) ||
        strcmp(json_string_value(json_object_get(last, "role")), "assistant") != 0 ||
        json_object_get(last, "tool_calls"))
        return NULL;
    const json_t *c = json_object_get(last, "content");
    if (json_is_array(c) && json_array_size(c) == 1)
        c = json_object_get(json_array_get(c, 0), "text");
    return json_is_string(c) && json_string_length(c) ? json_string_value(c) : NULL;
}

/* As transformers' continue_final_message: the template closed the final
 * assistant message (an end-of-turn marker after it); cut the prompt right
 * after that message's text, found from the end, so the model continues it.
 * Trailing whitespace of the text is not required to match, since
 * templates often trim it. Returns the new length (unchanged if not found). */
static size_t continue_final_message(char *text, size_t n, const char *msg)
{
    size_t m = strlen(msg);
    while (m && (msg[m - 1] == ' ' || msg[m - 1] == '\n' || msg[m - 1] == '\t'))
        m--;
    for (size_t at = n >= m ? n - m + 1 : 0; m && at-- > 0;)
        if (memcmp(text + at, msg, m) == 0) {
            text[at + m] = '\0';
            return at + m;
        }
    return n;
}

/* The prompt's token ids for a parsed request: the chat template for chat
 * kinds (parsing special tokens, since the template writes them), the raw
 * text or ids for completions. A BOS the vocabulary wants is added unless
 * the template already wrote it. */
static bool build_prompt(struct hr_server *srv, const struct hr_api_request *rq,
                         struct hr_tokens *ids, char **text_out, struct hr_api_error *e)
{
    struct hr_err err = {{0}};
    char *text = NULL;
    size_t n_text = 0;
    e->cls = HR_API_ERR_INVALID;
    if (rq->kind == HR_API_OPENAI_COMPLETION && rq->prompt_tokens) {
        const uint32_t nv = hr_tokenizer_n_vocab(srv->tok);
        for (size_t i = 0; i < rq->n_prompt_tokens; i++)
            if (rq->prompt_tokens[i] < 0 || (uint32_t)rq->prompt_tokens[i] >= nv) {
                snprintf(e->message, sizeof(e->message),
                         "prompt.%zu: token id %d is outside the vocabulary (0..%u)", i,
                         rq->prompt_tokens[i], nv - 1);
                return false;
            }
        ids->ids = malloc((rq->n_prompt_tokens ? rq->n_prompt_tokens : 1) * sizeof(int32_t));
        if (!ids->ids) {
            e->cls = HR_API_ERR_INTERNAL;
            snprintf(e->message, sizeof(e->message), "out of memory");
            return false;
        }
        memcpy(ids->ids, rq->prompt_tokens, rq->n_prompt_tokens * sizeof(int32_t));
        ids->n = ids->cap = rq->n_prompt_tokens;
    } else {
        if (rq->kind == HR_API_OPENAI_COMPLETION) {
            text = malloc(rq->prompt_len + 1);
            if (text) {
                memcpy(text, rq->prompt ? rq->prompt : "", rq->prompt_len);
                text[rq->prompt_len] = '\0';
                n_text = rq->prompt_len;
            }
        } else {
            /* A conversation that ends with an assistant message is a
             * prefill: the model continues that message. */
            const char *prefill = final_assistant_text(rq->messages);
            const struct hr_chat_request cr = {.messages = rq->messages,
                                               .tools = rq->tools,
                                               .kwargs = rq->kwargs,
                                               .add_generation_prompt = !prefill};
            const enum hr_status st = hr_chat_render(srv->tmpl, &cr, &text, &n_text, &err);
            if (st == HR_OK && prefill)
                n_text = continue_final_message(text, n_text, prefill);
            if (st != HR_OK) {
                e->cls = st == HR_ERR_NOMEM ? HR_API_ERR_INTERNAL : HR_API_ERR_INVALID;
                snprintf(e->message, sizeof(e->message), "messages: the chat template failed: %.400s",
                         err.msg);
                return false;
            }
        }
        if (!text) {
            e->cls = HR_API_ERR_INTERNAL;
            snprintf(e->message, sizeof(e->message), "out of memory");
            return false;
        }
        unsigned flags = HR_TOK_PARSE_SPECIAL;
        if (hr_tokenizer_add_bos(srv->tok)) {
            size_t nb = 0;
            const char *bos = hr_tokenizer_piece(srv->tok, hr_tokenizer_bos(srv->tok),
                                                 HR_DETOK_SPECIAL, &nb);
            if (!(nb && n_text >= nb && memcmp(text, bos, nb) == 0))
                flags |= HR_TOK_ADD_SPECIAL;
        }
        if (hr_tokenizer_encode(srv->tok, text, n_text, flags, ids, &err) != HR_OK) {
            snprintf(e->message, sizeof(e->message), "%s: %.400s",
                     rq->kind == HR_API_OPENAI_COMPLETION ? "prompt" : "messages", err.msg);
            free(text);
            return false;
        }
    }
    if (ids->n == 0) {
        snprintf(e->message, sizeof(e->message), "%s: the prompt is empty",
                 rq->kind == HR_API_OPENAI_COMPLETION ? "prompt" : "messages");
        free(text);
        return false;
    }
    if (text && hr_log_get_level() <= HR_LOG_DEBUG)
        hr_log_debug("server", "prompt (%zu tokens): %s", ids->n, text);
    if (text_out)
        *text_out = text;
    else
        free(text);
    return true;
}

/* ---- generations ---------------------------------------------------------------- */

void hr_gen_free(struct hr_gen *g)
{
    hr_api_writer_free(g->w);
    hr_chat_parser_free(g->parser);
    hr_api_request_free(&g->req);
    hr_api_buf_free(&g->out);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static void feed_events(struct hr_gen *g, const struct hr_chat_events *ce)
{
    for (size_t i = 0; i < ce->n; i++)
        (void)hr_api_writer_event(g->w, &ce->ev[i], &g->out); /* NOMEM: the text is lost, not the stream */
}

static void feed_text(struct hr_gen *g, const char *t, size_t n)
{
    struct hr_chat_events ce;
    if (n && hr_chat_parser_feed(g->parser, t, n, &ce, NULL) == HR_OK)
        feed_events(g, &ce);
}

/* The end of a generation in the client's words: an error for a stream
 * becomes its last SSE message; for a document, the response itself. */
static void end_with_error(struct hr_gen *g, const struct hr_api_error *e)
{
    if (g->stream && !(g->hold_headers && !g->started)) {
        (void)hr_api_error_sse(g->req.kind, e, &g->out);
        atomic_fetch_add(&g->srv->metrics.streams_failed, 1);
    } else {
        g->failed = true;
        g->error = *e;
    }
}

static const char *finish_word(enum hr_api_finish f)
{
    switch (f) {
    case HR_API_FINISH_STOP: return "end of turn";
    case HR_API_FINISH_STOP_SEQ: return "stop sequence";
    case HR_API_FINISH_LENGTH: return "max tokens";
    }
    return "?";
}

/* The dashboard's row for a generation that ended (g->mu held). */
static void note_finished(struct hr_gen *g, double now, const char *outcome)
{
    struct hr_dash_finished f = {
        .id = g->id,
        .rid = g->rid,
        .route = g->route,
        .n_prompt = g->n_prompt,
        .n_cached = g->n_cached,
        .n_generated = g->n_generated,
        .n_preempts = g->n_preempts,
        .t_arrival = g->t_arrival,
        .t_end = now,
        .ttft_s = g->t_first > 0 ? g->t_first - g->t_arrival : 0,
        .tokens_per_s = g->n_generated > 1 && now > g->t_first && g->t_first > 0
                            ? (g->n_generated - 1) / (now - g->t_first)
                            : 0,
    };
    snprintf(f.model, sizeof(f.model), "%s", g->req.model ? g->req.model : g->srv->model_id);
    snprintf(f.outcome, sizeof(f.outcome), "%s", outcome);
    hr_dash_note_finished(&g->srv->dash, &f);
}

/* A refusal for the dashboard's feed: N and M, or the overload's reason. */
static void note_refusal(uint64_t id, const struct hr_sched_refusal *why)
{
    struct hr_decision d = {.kind = HR_DECISION_REFUSE, .request_id = id};
    d.u.refuse.n_prompt = why->n_prompt;
    d.u.refuse.max_prompt = why->max_prompt;
    d.u.refuse.estimated_bytes = why->estimated_bytes;
    d.u.refuse.limit_bytes = why->limit_bytes;
    /* the ring keeps the first 159 bytes; the log and the response have it whole */
    snprintf(d.u.refuse.why, sizeof(d.u.refuse.why), "%.159s", why->message);
    hr_decision_record(&d);
}

/* How often a long prefill logs its progress. */
#define PROGRESS_LOG_S 5.0

/* Scheduler events (engine thread; see the top of this file). */
static void on_event(const struct hr_sched_event *ev, void *user)
{
    struct hr_gen *g = user;
    struct hr_server *srv = g->srv;
    const double now = hr_now_seconds();
    bool last = false;
    pthread_mutex_lock(&g->mu);
    const size_t before = g->out.len;
    switch (ev->kind) {
    case HR_SCHED_STARTED:
        g->started = true;
        g->phase = HR_GEN_PREFILL;
        g->t_started = g->t_progress_log = now;
        g->n_prefilled = ev->n_cached;
        g->n_cached = ev->n_cached;
        hr_api_writer_set_cached(g->w, ev->n_cached);
        atomic_fetch_add(&srv->metrics.cached_tokens, ev->n_cached);
        if (now - g->t_arrival > 1.0)
            hr_log_info("server", "request %llu started after %.1f s in the queue",
                        (unsigned long long)g->rid, now - g->t_arrival);
        break;
    case HR_SCHED_PROGRESS:
        /* The ping thread keeps the stream alive; the dashboard and the
         * log follow the prefill. */
        if (g->phase == HR_GEN_PREEMPTED) {
            struct hr_decision d = {.kind = HR_DECISION_RESUME, .request_id = g->id};
            d.u.resume.paused_s = now - g->t_paused;
            hr_decision_record(&d);
            g->n_prefilled = 0; /* it recomputes from what the cache kept */
        }
        g->phase = HR_GEN_PREFILL;
        g->last_chunk = ev->n_prefilled > g->n_prefilled ? ev->n_prefilled - g->n_prefilled : 0;
        g->n_prefilled = ev->n_prefilled;
        if (now - g->t_progress_log >= PROGRESS_LOG_S) {
            hr_log_info("server", "request %llu prefill %u of %u tokens (chunk %u, %.0f tokens/s)",
                        (unsigned long long)g->rid, ev->n_prefilled, ev->n_prompt, g->last_chunk,
                        (ev->n_prefilled - g->n_cached) / (now - g->t_started));
            g->t_progress_log = now;
        }
        break;
    case HR_SCHED_PREEMPTED:
        g->phase = HR_GEN_PREEMPTED;
        g->t_paused = now;
        g->n_preempts++;
        break;
    case HR_SCHED_TOKEN:
        if (g->phase == HR_GEN_PREEMPTED) { /* resumed without a chunk: all of it was cached */
            struct hr_decision d = {.kind = HR_DECISION_RESUME, .request_id = g->id};
            d.u.resume.paused_s = now - g->t_paused;
            hr_decision_record(&d);
        }
        g->phase = HR_GEN_DECODE;
        g->n_prefilled = g->n_prompt;
        if (!g->n_generated) {
            g->t_first = now;
            hr_metrics_observe(&srv->metrics.ttft, now - g->t_arrival);
        }
        g->n_generated = ev->n_generated;
        feed_text(g, ev->text, ev->text_len);
        break;
    case HR_SCHED_FINISHED: {
        last = true;
        g->n_generated = ev->n_generated;
        atomic_fetch_add(&srv->metrics.generated_tokens, ev->n_generated);
        if (ev->finish == HR_SCHED_CANCELLED || ev->finish == HR_SCHED_FAILED) {
            struct hr_api_error e = {.cls = HR_API_ERR_INTERNAL};
            if (ev->finish == HR_SCHED_CANCELLED)
                hr_log_info("server",
                            "request %llu %s: cancelled (%s) after prompt %u tokens, %u generated",
                            (unsigned long long)g->rid, hr_metrics_route_name(g->route),
                            g->client_gone ? "the client closed the connection" : "shutdown",
                            g->n_prompt, ev->n_generated);
            if (ev->finish == HR_SCHED_CANCELLED) {
                e.cls = HR_API_ERR_UNAVAILABLE;
                snprintf(e.message, sizeof(e.message),
                         "the server is shutting down; the request was cancelled");
            } else {
                snprintf(e.message, sizeof(e.message), "generation failed: %s",
                         ev->message ? ev->message : "engine error");
                hr_log_error("server", "request %llu: %s", (unsigned long long)g->rid, e.message);
            }
            if (g->conn && !g->client_gone) /* a client that left needs no words */
                end_with_error(g, &e);
            note_finished(g, now,
                          ev->finish == HR_SCHED_FAILED ? "failed"
                          : g->client_gone              ? "cancelled: the client left"
                                                        : "cancelled: shutdown");
            break;
        }
        feed_text(g, ev->text, ev->text_len);
        struct hr_chat_events ce;
        if (hr_chat_parser_finish(g->parser, &ce, NULL) == HR_OK)
            feed_events(g, &ce);
        const enum hr_api_finish f = ev->finish == HR_SCHED_LENGTH ? HR_API_FINISH_LENGTH
                                     : ev->stop_index >= 0          ? HR_API_FINISH_STOP_SEQ
                                                                    : HR_API_FINISH_STOP;
        if (hr_api_writer_finish(g->w, f, ev->stop_index, ev->n_generated, &g->out) != HR_OK) {
            struct hr_api_error e = {.cls = HR_API_ERR_INTERNAL};
            snprintf(e.message, sizeof(e.message), "out of memory writing the response");
            end_with_error(g, &e);
        }
        const double tps =
            ev->n_generated > 1 && now > g->t_first ? (ev->n_generated - 1) / (now - g->t_first)
                                                    : 0;
        if (tps > 0)
            hr_metrics_observe(&srv->metrics.tokens_per_s, tps);
        hr_log_info("server",
                    "request %llu %s: prompt %u tokens (%u cached), generated %u, first token "
                    "%.2f s, %.1f tokens/s, %s",
                    (unsigned long long)g->rid, hr_metrics_route_name(g->route), g->n_prompt,
                    g->n_cached,
                    ev->n_generated, g->t_first > 0 ? g->t_first - g->t_arrival : 0.0, tps,
                    finish_word(f));
        note_finished(g, now, finish_word(f));
        break;
    }
    case HR_SCHED_REFUSED: {
        last = true;
        struct hr_api_error e = {.cls = HR_API_ERR_OVERLOADED, .retry_after_s = 2};
        snprintf(e.message, sizeof(e.message), "%s",
                 ev->message ? ev->message : "the server is overloaded; retry later");
        end_with_error(g, &e);
        if (ev->refusal)
            note_refusal(g->id, ev->refusal);
        note_finished(g, now, "refused: queue timeout");
        break;
    }
    }
    if (g->stream && g->out.len != before)
        g->t_last_write = now;
    if (last)
        g->done = true;
    if (last || (g->stream && g->out.len != before) ||
        (ev->kind == HR_SCHED_STARTED && g->hold_headers))
        hr_gen_wake(g);
    pthread_mutex_unlock(&g->mu);
    if (last)
        hr_gen_release(g); /* the scheduler's reference */
}

/* Completions with `echo`: the prompt's text (decoded from its ids, which
 * also covers prompts given as ids) is the output's first text. */
static bool echo_prompt(struct hr_server *srv, struct hr_gen *g, const struct hr_tokens *ids)
{
    char *text = NULL, *clean = NULL;
    size_t len = 0, nc = 0;
    bool ok = hr_tokenizer_decode(srv->tok, ids->ids, ids->n, HR_DETOK_SPECIAL, &text, &len,
                                  NULL) == HR_OK &&
              hr_utf8_sanitize(text, len, &clean, &nc, NULL) == HR_OK;
    if (ok && nc) {
        const struct hr_chat_event ev = {.kind = HR_CHAT_EVENT_CONTENT, .text = clean, .len = nc};
        ok = hr_api_writer_event(g->w, &ev, &g->out) == HR_OK;
    }
    free(text);
    free(clean);
    return ok;
}

static const char *id_prefix(enum hr_api_kind k)
{
    switch (k) {
    case HR_API_ANTHROPIC: return "msg_";
    case HR_API_OPENAI_CHAT: return "chatcmpl-";
    case HR_API_OPENAI_COMPLETION: return "cmpl-";
    }
    return "";
}

static enum MHD_Result generate(struct hr_exchange *ex, enum hr_api_kind kind)
{
    struct hr_server *srv = ex->srv;
    if (atomic_load(&srv->state) != HR_SERVER_READY)
        return unavailable(ex);
    struct hr_gen *g = calloc(1, sizeof(*g));
    if (!g)
        return fail(ex, HR_API_ERR_INTERNAL, 0, "out of memory");
    pthread_mutex_init(&g->mu, NULL);
    g->srv = srv;
    g->route = ex->route_id;
    g->rid = ex->rid;
    g->t_arrival = ex->t_arrival;
    struct hr_err err = {{0}};
    struct hr_api_error e = {0};
    struct hr_tokens ids = {0};
    char *prompt_text = NULL;
    enum MHD_Result ret;

    if (hr_api_parse(kind, false, ex->body ? ex->body : "", ex->n_body, &g->req, &err) != HR_OK) {
        ret = fail(ex, HR_API_ERR_INVALID, 0, "%s", err.msg);
        goto out;
    }
    g->stream = g->req.stream;
    if (!build_prompt(srv, &g->req, &ids, &prompt_text, &e)) {
        ret = hr_respond_error(ex, &e);
        goto out;
    }
    if (ids.n > UINT32_MAX / 2) {
        ret = fail(ex, HR_API_ERR_INVALID, 0, "the prompt is too long");
        goto out;
    }
    g->n_prompt = (uint32_t)ids.n;
    const bool tools = g->req.tools && json_array_size(g->req.tools) > 0 &&
                       g->req.tool_choice != HR_API_TOOL_NONE;

    /* The output parser: this model's tool-call format, reasoning when the
     * prompt leaves a <think> open. */
    struct hr_chat_parse_opts po = hr_chat_parse_defaults();
    po.format = srv->format;
    po.tools = tools && kind != HR_API_OPENAI_COMPLETION;
    po.tool_defs = g->req.tools; /* qwen3-coder types values by them; freed after the parser */
    po.stream_args = g->stream;  /* qwen3-coder: arguments stream as they are read */
    po.reasoning = kind != HR_API_OPENAI_COMPLETION;
    po.in_reasoning = po.reasoning && prompt_text &&
                      hr_chat_prompt_opens_reasoning(prompt_text, strlen(prompt_text));
    free(prompt_text);
    prompt_text = NULL;
    if (hr_chat_parser_init(&po, &g->parser, &err) != HR_OK) {
        ret = fail(ex, HR_API_ERR_INTERNAL, 0, "%s", err.msg);
        goto out;
    }

    char id[48];
    pthread_mutex_lock(&srv->gens_mu);
    const uint64_t seed = hr_rng_u64(&srv->rng);
    hr_chat_call_id_make(id + strlen(id_prefix(kind)), sizeof(id) - strlen(id_prefix(kind)), "",
                         &srv->rng);
    pthread_mutex_unlock(&srv->gens_mu);
    memcpy(id, id_prefix(kind), strlen(id_prefix(kind)));
    pthread_rwlock_rdlock(&srv->sched_lock);
    const uint32_t cached_now =
        srv->sched ? hr_sched_cached_prefix(srv->sched, ids.ids, g->n_prompt) : 0;
    pthread_rwlock_unlock(&srv->sched_lock);
    const struct hr_api_writer_config wc = {
        .kind = kind,
        .stream = g->stream,
        .include_usage = g->req.include_usage,
        .thinking = g->req.thinking,
        .model = g->req.model ? g->req.model : srv->model_id,
        .id = id,
        .created = (int64_t)time(NULL),
        .n_prompt = g->n_prompt,
        .n_cached = cached_now,
        .stop = (const char *const *)g->req.stop,
        .n_stop = g->req.n_stop,
        .seed = seed,
    };
    /* The writer starts (message_start, the role chunk) now, as the request
     * is admitted, with the cached tokens the cache holds now; the STARTED
     * event corrects the number for the usage written at the end. */
    if (hr_api_writer_init(&wc, &g->w, &err) != HR_OK ||
        hr_api_writer_start(g->w, &g->out) != HR_OK) {
        ret = fail(ex, HR_API_ERR_INTERNAL, 0, "%s", err.msg[0] ? err.msg : "out of memory");
        goto out;
    }
    if (g->req.echo && !echo_prompt(srv, g, &ids)) {
        ret = fail(ex, HR_API_ERR_INTERNAL, 0, "out of memory");
        goto out;
    }

    const uint32_t room = srv->n_ctx > g->n_prompt ? srv->n_ctx - g->n_prompt : 1;
    struct hr_sched_params p = hr_sched_params_defaults();
    p.prompt = ids.ids;
    p.n_prompt = g->n_prompt;
    p.max_tokens = g->req.max_tokens && g->req.max_tokens < room ? g->req.max_tokens : room;
    p.sampling = g->req.sampling;
    p.ignore_eos = g->req.ignore_eos;
    p.stop_strings = (const char *const *)g->req.stop;
    p.n_stop_strings = g->req.n_stop;
    /* Tool-call markers may be control tokens (Mistral's [TOOL_CALLS]);
     * they must reach the parser, and so must harmony's message markup. */
    const bool harmony = po.format == HR_CHAT_FORMAT_HARMONY && po.reasoning;
    p.detok_flags = HR_DETOK_PIECES | (po.tools || harmony ? HR_DETOK_SPECIAL : 0);
    p.script = srv->script;
    p.n_script = srv->n_script;
    p.on_event = on_event;
    p.user = g;

    /* References: the exchange, the scheduler, and (streams) the response. */
    g->refs = g->stream ? 3 : 2;
    g->conn = ex->conn;
    /* Behind a balancer a stream's headers wait until it leaves the queue,
     * so that a refusal there is still an HTTP error a balancer retries. */
    g->hold_headers = g->stream && srv->cfg.queue_max_wait_s > 0;
    g->t_last_write = hr_now_seconds();
    pthread_mutex_lock(&srv->gens_mu);
    g->next = srv->gens;
    if (srv->gens)
        srv->gens->prev = g;
    srv->gens = g;
    srv->n_gens++;
    pthread_mutex_unlock(&srv->gens_mu);

    struct hr_sched_refusal why = {0};
    uint64_t sid = 0;
    /* Events may arrive before submit returns; they wait for g->mu. */
    pthread_mutex_lock(&g->mu);
    pthread_rwlock_rdlock(&srv->sched_lock);
    const enum hr_status st =
        srv->sched ? hr_sched_submit(srv->sched, &p, &sid, &why, &err) : HR_ERR_LIMIT;
    pthread_rwlock_unlock(&srv->sched_lock);
    if (st == HR_OK) {
        g->id = sid;
        g->submitted = true;
    }
    pthread_mutex_unlock(&g->mu);
    hr_tokens_free(&ids);
    if (st != HR_OK) {
        g->refs = 1; /* no scheduler, no response: only ours */
        ex->gen = g; /* released by on_completed, after the error is sent */
        if (!srv->sched)
            return unavailable(ex);
        if (st == HR_ERR_LIMIT) {
            note_refusal(0, &why);
            char outcome[176];
            snprintf(outcome, sizeof(outcome), "refused: %.166s", why.message);
            note_finished(g, hr_now_seconds(), outcome);
        }
        if (st == HR_ERR_LIMIT && why.reason == HR_SCHED_TOO_LONG) {
            e = (struct hr_api_error){.cls = HR_API_ERR_TOO_LONG,
                                      .n_prompt = why.n_prompt,
                                      .max_prompt = why.max_prompt,
                                      .estimated_bytes = why.estimated_bytes,
                                      .limit_bytes = why.limit_bytes};
            if (strstr(why.message, "(memory)"))
                snprintf(e.message, sizeof(e.message),
                         "%s: the prompt alone needs about %.1f MiB and the memory ceiling "
                         "allows %.1f MiB; raise --memory-limit or shorten the conversation",
                         why.message, why.estimated_bytes / 1048576.0, why.limit_bytes / 1048576.0);
            else
                snprintf(e.message, sizeof(e.message),
                         "%s: the context is %u tokens (--ctx) and the prompt needs at least one "
                         "more for output",
                         why.message, srv->n_ctx);
            return hr_respond_error(ex, &e);
        }
        if (st == HR_ERR_LIMIT && why.reason == HR_SCHED_NO_MEMORY)
            /* the server's ceiling, not the prompt: no "prompt is too long" */
            return fail(ex, HR_API_ERR_UNAVAILABLE, 0, "%s", why.message);
        if (st == HR_ERR_LIMIT)
            return fail(ex, HR_API_ERR_OVERLOADED, 2, "%s", why.message);
        return fail(ex, HR_API_ERR_INVALID, 0, "%s", err.msg);
    }
    atomic_fetch_add(&srv->metrics.prompt_tokens, g->n_prompt);
    ex->gen = g;
    if (g->stream && g->hold_headers)
        return hr_respond_held_stream(ex);
    if (g->stream)
        return hr_respond_stream(ex, g);
    return hr_respond_document(ex);

out:
    free(prompt_text);
    hr_tokens_free(&ids);
    hr_gen_free(g);
    return ret;
}

static enum MHD_Result r_messages(struct hr_exchange *ex)
{
    return generate(ex, HR_API_ANTHROPIC);
}

static enum MHD_Result r_chat(struct hr_exchange *ex)
{
    return generate(ex, HR_API_OPENAI_CHAT);
}

static enum MHD_Result r_completions(struct hr_exchange *ex)
{
    return generate(ex, HR_API_OPENAI_COMPLETION);
}

/* ---- the other routes ------------------------------------------------------------ */

static enum MHD_Result r_count_tokens(struct hr_exchange *ex)
{
    struct hr_server *srv = ex->srv;
    if (atomic_load(&srv->state) != HR_SERVER_READY)
        return unavailable(ex);
    struct hr_api_request rq = {0};
    struct hr_err err = {{0}};
    if (hr_api_parse(HR_API_ANTHROPIC, true, ex->body ? ex->body : "", ex->n_body, &rq, &err) !=
        HR_OK)
        return fail(ex, HR_API_ERR_INVALID, 0, "%s", err.msg);
    struct hr_tokens ids = {0};
    struct hr_api_error e = {0};
    const bool ok = build_prompt(srv, &rq, &ids, NULL, &e);
    hr_api_request_free(&rq);
    if (!ok) {
        hr_tokens_free(&ids);
        return hr_respond_error(ex, &e);
    }
    json_t *doc = json_pack("{s:I}", "input_tokens", (json_int_t)ids.n);
    hr_tokens_free(&ids);
    return hr_respond_json(ex, 200, doc);
}

static enum MHD_Result r_models(struct hr_exchange *ex)
{
    struct hr_server *srv = ex->srv;
    const size_t n = 1 + srv->cfg.n_aliases;
    json_t *data = json_array();
    char when[32];
    const time_t t = (time_t)srv->created;
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
    const bool anthropic = ex->api == HR_API_ANTHROPIC;
    for (size_t i = 0; i < n; i++) {
        const char *name = i ? srv->cfg.aliases[i - 1] : srv->model_id;
        json_array_append_new(
            data, anthropic ? json_pack("{s:s,s:s,s:s,s:s}", "type", "model", "id", name,
                                        "display_name", name, "created_at", when)
                            : json_pack("{s:s,s:s,s:I,s:s}", "id", name, "object", "model",
                                        "created", (json_int_t)srv->created, "owned_by",
                                        "headroom"));
    }
    json_t *doc = anthropic ? json_pack("{s:o,s:b,s:s,s:s}", "data", data, "has_more", 0,
                                        "first_id", srv->model_id, "last_id",
                                        n > 1 ? srv->cfg.aliases[n - 2] : srv->model_id)
                            : json_pack("{s:s,s:o}", "object", "list", "data", data);
    return hr_respond_json(ex, 200, doc);
}

/* llama.cpp's server shapes: {"content", "add_special", "parse_special",
 * "with_pieces"} -> {"tokens": [ids or {id, piece}]}. */
static enum MHD_Result r_tokenize(struct hr_exchange *ex)
{
    struct hr_server *srv = ex->srv;
    if (atomic_load(&srv->state) != HR_SERVER_READY)
        return unavailable(ex);
    struct hr_err err = {{0}};
    json_t *in = parse_body(ex, &err);
    if (!in)
        return fail(ex, HR_API_ERR_INVALID, 0, "%s", err.msg);
    const json_t *content = json_object_get(in, "content");
    const json_t *as = json_object_get(in, "add_special"), *ps = json_object_get(in, "parse_special"),
                 *wp = json_object_get(in, "with_pieces");
    if (!json_is_string(content) || (as && !json_is_boolean(as)) || (ps && !json_is_boolean(ps)) ||
        (wp && !json_is_boolean(wp))) {
        json_decref(in);
        return fail(ex, HR_API_ERR_INVALID, 0,
                    "content must be a string; add_special, parse_special and with_pieces "
                    "booleans");
    }
    unsigned flags = (json_is_true(as) ? HR_TOK_ADD_SPECIAL : 0) |
                     (!ps || json_is_true(ps) ? HR_TOK_PARSE_SPECIAL : 0);
    struct hr_tokens ids = {0};
    if (hr_tokenizer_encode(srv->tok, json_string_value(content), json_string_length(content), flags,
                            &ids, &err) != HR_OK) {
        json_decref(in);
        hr_tokens_free(&ids);
        return fail(ex, HR_API_ERR_INVALID, 0, "content: %s", err.msg);
    }
    json_t *arr = json_array();
    for (size_t i = 0; i < ids.n; i++) {
        if (json_is_true(wp)) {
            size_t len = 0;
            const char *piece = hr_tokenizer_piece(srv->tok, ids.ids[i], HR_DETOK_SPECIAL, &len);
            char *clean = NULL;
            size_t nc = 0;
            if (hr_utf8_sanitize(piece, len, &clean, &nc, NULL) == HR_OK)
                json_array_append_new(arr, json_pack("{s:i,s:s%}", "id", ids.ids[i], "piece",
                                                     clean, nc));
            free(clean);
        } else {
            json_array_append_new(arr, json_integer(ids.ids[i]));
        }
    }
    json_decref(in);
    hr_tokens_free(&ids);
    return hr_respond_json(ex, 200, json_pack("{s:o}", "tokens", arr));
}

static enum MHD_Result r_detokenize(struct hr_exchange *ex)
{
    struct hr_server *srv = ex->srv;
    if (atomic_load(&srv->state) != HR_SERVER_READY)
        return unavailable(ex);
    struct hr_err err = {{0}};
    json_t *in = parse_body(ex, &err);
    if (!in)
        return fail(ex, HR_API_ERR_INVALID, 0, "%s", err.msg);
    const json_t *toks = json_object_get(in, "tokens");
    if (!json_is_array(toks)) {
        json_decref(in);
        return fail(ex, HR_API_ERR_INVALID, 0, "tokens: expected an array of token ids");
    }
    const size_t n = json_array_size(toks);
    int32_t *ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (!ids) {
        json_decref(in);
        return fail(ex, HR_API_ERR_INTERNAL, 0, "out of memory");
    }
    const uint32_t nv = hr_tokenizer_n_vocab(srv->tok);
    for (size_t i = 0; i < n; i++) {
        const json_t *v = json_array_get(toks, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 ||
            json_integer_value(v) >= (json_int_t)nv) {
            free(ids);
            json_decref(in);
            return fail(ex, HR_API_ERR_INVALID, 0, "tokens.%zu: expected a token id in 0..%u", i,
                        nv - 1);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    json_decref(in);
    char *text = NULL, *clean = NULL;
    size_t len = 0, nc = 0;
    enum hr_status st = hr_tokenizer_decode(srv->tok, ids, n, HR_DETOK_SPECIAL, &text, &len, &err);
    free(ids);
    if (st == HR_OK)
        st = hr_utf8_sanitize(text, len, &clean, &nc, &err);
    free(text);
    if (st != HR_OK)
        return fail(ex, HR_API_ERR_INTERNAL, 0, "%s", err.msg);
    json_t *doc = json_pack("{s:s%}", "content", clean, nc);
    free(clean);
    return hr_respond_json(ex, 200, doc);
}

static enum MHD_Result r_health(struct hr_exchange *ex)
{
    const int st = atomic_load(&ex->srv->state);
    if (st == HR_SERVER_READY) {
        /* A lost device context fails every request: not alive any more,
         * so an orchestrator restarts the process. */
        struct hr_sched_stats s;
        hr_server_sched_stats(ex->srv, &s);
        if (s.device_lost)
            return hr_respond_json(ex, 503, json_pack("{s:s,s:s}", "status", "device_lost",
                                                      "message", "a CUDA error destroyed the "
                                                      "device context; restart the server"));
        return hr_respond_json(ex, 200, json_pack("{s:s}", "status", "ok"));
    }
    return hr_respond_json(ex, 503, json_pack("{s:s}", "status",
                                              st == HR_SERVER_LOADING ? "loading" : "stopping"));
}

enum hr_ready_reason hr_server_ready(struct hr_server *srv, struct hr_ready_input *in)
{
    struct hr_ready_input x = {0};
    struct hr_sched_stats s;
    hr_server_sched_stats(srv, &s);
    const int state = atomic_load(&srv->state);
    x.loading = state == HR_SERVER_LOADING;
    x.draining = state == HR_SERVER_STOPPING;
    x.queued = s.queued;
    x.max_queue = srv->cfg.max_queue ? srv->cfg.max_queue : 64;
    x.kv_blocks_used = s.kv_blocks_used;
    x.kv_blocks_evictable = s.cache_evictable_blocks;
    x.kv_blocks_total = s.kv_blocks_total;
    x.kv_block_bytes = s.kv_block_bytes;
    x.min_request_bytes = x.loading ? 0 : srv->min_request_bytes;
    if (!x.loading && srv->gov) { /* set before the state left LOADING */
        struct hr_gov_view v;
        hr_gov_get_view(srv->gov, &v);
        x.governed = true;
        x.level = v.level;
        x.current_bytes = v.current_bytes;
        x.hard_bytes = v.hard_bytes;
    }
    if (in)
        *in = x;
    return hr_ready_update(&srv->ready, &x, hr_now_seconds());
}

/* GET/HEAD /ready: whether a balancer should send new requests here (ready.h).
 * Unauthenticated, like /health, which stays liveness. */
static enum MHD_Result r_ready(struct hr_exchange *ex)
{
    const enum hr_ready_reason why = hr_server_ready(ex->srv, NULL);
    return hr_respond_json(ex, why == HR_READY_OK ? 200 : 503,
                           json_pack("{s:s}", "status", hr_ready_reason_name(why)));
}

void hr_server_sched_stats(struct hr_server *srv, struct hr_sched_stats *out)
{
    memset(out, 0, sizeof(*out));
    pthread_rwlock_rdlock(&srv->sched_lock);
    if (srv->sched)
        hr_sched_stats(srv->sched, out);
    pthread_rwlock_unlock(&srv->sched_lock);
}

/*
 * What routers read. The Kubernetes inference router's endpoint picker
 * (gateway-api-inference-extension's model-server protocol; llm-d-router)
 * reads a pod without an engine label as vLLM and scrapes these names:
 * queue and running gauges, vllm:kv_cache_usage_perc (a 0..1 fraction: it
 * filters out replicas above 0.8) and vllm:cache_config_info. Ours is
 * memory-aware (ready.h): it rises toward 1 when the governor can fund
 * fewer blocks than the pool has free, so traffic moves before we must
 * queue, refuse or preempt. The token counters are the same numbers as
 * headroom's own names. headroom_ready and headroom_admit_max_prompt_tokens
 * are ours: /ready as a gauge, and the M a prompt would be refused with now.
 */
static enum hr_status metrics_for_routers(struct hr_server *srv, const struct hr_sched_stats *s,
                                          struct hr_api_buf *b)
{
    struct hr_ready_input in;
    const enum hr_ready_reason why = hr_server_ready(srv, &in);
    uint32_t m = 0;
    pthread_rwlock_rdlock(&srv->sched_lock);
    if (srv->sched)
        m = hr_sched_admit_max_prompt(srv->sched);
    pthread_rwlock_unlock(&srv->sched_lock);
    /* a label value: no quote, backslash or newline may break the line */
    char model[128];
    snprintf(model, sizeof(model), "%s", srv->model_id ? srv->model_id : "");
    for (char *p = model; *p; p++)
        if (*p == '"' || *p == '\\' || *p == '\n')
            *p = '_';
    return hr_api_buf_printf(
        b,
        "# HELP vllm:num_requests_waiting Requests waiting in the queue (headroom_requests_queued).\n"
        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name=\"%s\"} %u\n"
        "# HELP vllm:num_requests_running Requests generating (headroom_requests_running).\n"
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"%s\"} %u\n"
        "# HELP vllm:kv_cache_usage_perc KV usage as a 0..1 fraction, memory-aware: 1 - (blocks a "
        "new request could get now: free plus idle cache, limited by what the memory governor can "
        "fund under the hard watermark) / all blocks.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name=\"%s\"} %.6f\n"
        "# HELP vllm:cache_config_info The KV cache's block size (tokens) and blocks.\n"
        "# TYPE vllm:cache_config_info gauge\n"
        "vllm:cache_config_info{block_size=\"%u\",num_gpu_blocks=\"%u\",cache_dtype=\"%s\"} 1\n"
        "# HELP vllm:prompt_tokens_total Prompt tokens of admitted requests "
        "(headroom_prompt_tokens_total).\n"
        "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{model_name=\"%s\"} %" PRIu64 "\n"
        "# HELP vllm:generation_tokens_total Tokens generated (headroom_generated_tokens_total).\n"
        "# TYPE vllm:generation_tokens_total counter\n"
        "vllm:generation_tokens_total{model_name=\"%s\"} %" PRIu64 "\n"
        "# HELP vllm:prefix_cache_queries_total Prompt tokens looked up in the prefix cache.\n"
        "# TYPE vllm:prefix_cache_queries_total counter\n"
        "vllm:prefix_cache_queries_total{model_name=\"%s\"} %" PRIu64 "\n"
        "# HELP vllm:prefix_cache_hits_total Prompt tokens the prefix cache served.\n"
        "# TYPE vllm:prefix_cache_hits_total counter\n"
        "vllm:prefix_cache_hits_total{model_name=\"%s\"} %" PRIu64 "\n"
        "# HELP headroom_ready 1 when /ready answers 200 (new requests welcome), else 0.\n"
        "# TYPE headroom_ready gauge\nheadroom_ready %d\n"
        "# HELP headroom_admit_max_prompt_tokens The longest prompt admission accepts now (M).\n"
        "# TYPE headroom_admit_max_prompt_tokens gauge\nheadroom_admit_max_prompt_tokens %u\n",
        model, s->queued, model, s->running, model, hr_ready_kv_usage(&in), HR_KV_DEFAULT_BLOCK_TOKENS,
        s->kv_blocks_total, hr_kv_type_name(srv->cfg.kv_type ? srv->cfg.kv_type : HR_GGML_F16),
        model, (uint64_t)atomic_load(&srv->metrics.prompt_tokens), model,
        (uint64_t)atomic_load(&srv->metrics.generated_tokens), model, s->cache_lookup_tokens,
        model, s->cache_hit_tokens, why == HR_READY_OK ? 1 : 0, m);
}

static enum MHD_Result r_metrics(struct hr_exchange *ex)
{
    struct hr_server *srv = ex->srv;
    /* Its cost goes back in Server-Timing, as the snapshot's does: wall
     * time (the locks included: a scrape must never wait for a step) and
     * this thread's CPU time. */
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    const double t0 = hr_now_seconds();
    struct hr_api_buf b = {0};
    enum hr_status st = hr_metrics_format(&srv->metrics, &b);
    struct hr_sched_stats s;
    hr_server_sched_stats(srv, &s);
    if (st == HR_OK)
        st = hr_api_buf_printf(
            &b,
            "# HELP headroom_requests_running Requests generating now.\n"
            "# TYPE headroom_requests_running gauge\nheadroom_requests_running %u\n"
            "# HELP headroom_requests_queued Requests waiting for a slot.\n"
            "# TYPE headroom_requests_queued gauge\nheadroom_requests_queued %u\n"
            "# HELP headroom_engine_steps_total Engine steps run.\n"
            "# TYPE headroom_engine_steps_total counter\nheadroom_engine_steps_total %" PRIu64 "\n"
            "# HELP headroom_engine_step_seconds_total The engine thread's time in steps.\n"
            "# TYPE headroom_engine_step_seconds_total counter\n"
            "headroom_engine_step_seconds_total %.6f\n"
            "# HELP headroom_engine_schedule_seconds_total The engine thread's time admitting, "
            "building, planning and governing steps (their cost against the steps' own).\n"
            "# TYPE headroom_engine_schedule_seconds_total counter\n"
            "headroom_engine_schedule_seconds_total %.6f\n"
            "# HELP headroom_prefill_tokens_total Prompt tokens computed by prefill chunks "
            "(prefix-cache hits excluded).\n"
            "# TYPE headroom_prefill_tokens_total counter\n"
            "headroom_prefill_tokens_total %" PRIu64 "\n"
            "# HELP headroom_memory_governed 1 when a memory governor plans every step, 0 under "
            "--no-governor.\n"
            "# TYPE headroom_memory_governed gauge\nheadroom_memory_governed %d\n"
            "# HELP headroom_prefix_cache_lookup_tokens_total Prompt tokens looked up in the "
            "prefix cache.\n"
            "# TYPE headroom_prefix_cache_lookup_tokens_total counter\n"
            "headroom_prefix_cache_lookup_tokens_total %" PRIu64 "\n"
            "# HELP headroom_prefix_cache_hit_tokens_total Tokens served from the prefix cache "
            "instead of computed.\n"
            "# TYPE headroom_prefix_cache_hit_tokens_total counter\n"
            "headroom_prefix_cache_hit_tokens_total %" PRIu64 "\n"
            "# HELP headroom_prefix_cache_blocks KV blocks the prefix cache holds.\n"
            "# TYPE headroom_prefix_cache_blocks gauge\nheadroom_prefix_cache_blocks %u\n"
            "# HELP headroom_prefix_cache_bytes KV memory the prefix cache holds.\n"
            "# TYPE headroom_prefix_cache_bytes gauge\nheadroom_prefix_cache_bytes %" PRIu64 "\n"
            "# HELP headroom_prefix_cache_evictable_blocks Cached blocks no request uses "
            "(the first memory taken back).\n"
            "# TYPE headroom_prefix_cache_evictable_blocks gauge\n"
            "headroom_prefix_cache_evictable_blocks %u\n"
            "# HELP headroom_prefix_cache_evicted_blocks_total Cached blocks given back to the "
            "pool.\n"
            "# TYPE headroom_prefix_cache_evicted_blocks_total counter\n"
            "headroom_prefix_cache_evicted_blocks_total %" PRIu64 "\n"
            "# HELP headroom_prefix_cache_snapshots Recurrent state snapshots the prefix cache "
            "holds (hybrid models: the state at a cached block's end; evictable).\n"
            "# TYPE headroom_prefix_cache_snapshots gauge\nheadroom_prefix_cache_snapshots %u\n"
            "# HELP headroom_prefix_cache_snapshot_bytes Bytes of one recurrent state snapshot "
            "(0 without recurrent layers).\n"
            "# TYPE headroom_prefix_cache_snapshot_bytes gauge\n"
            "headroom_prefix_cache_snapshot_bytes %" PRIu64 "\n"
            "# HELP headroom_prefix_cache_snapshots_restored_total Requests started from a "
            "snapshot.\n"
            "# TYPE headroom_prefix_cache_snapshots_restored_total counter\n"
            "headroom_prefix_cache_snapshots_restored_total %" PRIu64 "\n"
            "# HELP headroom_kv_block_bytes Bytes of one KV block: 32 tokens of every layer's K "
            "and V in the cache type (--cache-type).\n"
            "# TYPE headroom_kv_block_bytes gauge\nheadroom_kv_block_bytes %" PRIu64 "\n"
            "# HELP headroom_kv_used_bytes KV memory requests use (blocks in use x block "
            "bytes).\n"
            "# TYPE headroom_kv_used_bytes gauge\nheadroom_kv_used_bytes %" PRIu64 "\n",
            s.running, s.queued, s.steps, s.step_seconds, s.schedule_seconds, s.tokens_prefilled,
            srv->gov ? 1 : 0,
            s.cache_lookup_tokens, s.cache_hit_tokens,
            s.cache_blocks, (uint64_t)s.cache_blocks * s.kv_block_bytes, s.cache_evictable_blocks,
            s.cache_evicted_blocks, s.cache_snapshots, s.cache_snapshot_bytes,
            s.cache_restored_snapshots, s.kv_block_bytes, (uint64_t)s.kv_blocks_used * s.kv_block_bytes);
    if (st == HR_OK)
        st = hr_api_buf_printf(&b, "# HELP headroom_engine_schedule_phase_seconds_total "
                                   "headroom_engine_schedule_seconds_total by phase: admit "
                                   "(starting queued requests), fit (building the step), prepare "
                                   "(its plan, cache room), bracket (the governor's samples around "
                                   "prefill steps), device (a GPU's free memory, KV given back), "
                                   "account (the governor's accounts).\n"
                                   "# TYPE headroom_engine_schedule_phase_seconds_total counter\n");
    for (int p = 0; st == HR_OK && p < HR_SCHED_N_PHASES; p++)
        st = hr_api_buf_printf(&b, "headroom_engine_schedule_phase_seconds_total{phase=\"%s\"} "
                                   "%.6f\n", hr_sched_phase_name((enum hr_sched_phase)p),
                               s.phase_seconds[p]);
    if (st == HR_OK && srv->sched) {
        /* The device the engine runs on (engine/backend.h), and on a GPU its
         * memory as cudaMemGetInfo says now: every process's bytes. */
        const struct hr_backend_info *bi = hr_sched_backend_info(srv->sched);
        char desc[sizeof(bi->description)];
        snprintf(desc, sizeof(desc), "%s", bi->description);
        for (char *p = desc; *p; p++)
            if (*p == '"' || *p == '\\' || *p == '\n' || *p == '{' || *p == '}')
                *p = '_';
        st = hr_api_buf_printf(
            &b,
            "# HELP headroom_device_info The device the engine runs on (--device).\n"
            "# TYPE headroom_device_info gauge\n"
            "headroom_device_info{device=\"%s\",description=\"%s\"} 1\n"
            "# HELP headroom_device_lost 1 when a CUDA error destroyed the device context "
            "(every request fails until a restart).\n"
            "# TYPE headroom_device_lost gauge\nheadroom_device_lost %d\n"
            "# HELP headroom_requests_parked_total Preemptions whose KV was parked in host "
            "memory (restored on resume instead of recomputed).\n"
            "# TYPE headroom_requests_parked_total counter\n"
            "headroom_requests_parked_total %" PRIu64 "\n"
            "# HELP headroom_parked_tokens_total Tokens of KV parked in host memory.\n"
            "# TYPE headroom_parked_tokens_total counter\n"
            "headroom_parked_tokens_total %" PRIu64 "\n",
            bi->name, desc, s.device_lost ? 1 : 0, s.parked, s.parked_tokens);
        if (st == HR_OK && s.device_total_bytes)
            st = hr_api_buf_printf(
                &b,
                "# HELP headroom_device_memory_total_bytes The device's memory.\n"
                "# TYPE headroom_device_memory_total_bytes gauge\n"
                "headroom_device_memory_total_bytes %" PRIu64 "\n"
                "# HELP headroom_device_memory_used_bytes Device memory in use now, every "
                "process's (cudaMemGetInfo).\n"
                "# TYPE headroom_device_memory_used_bytes gauge\n"
                "headroom_device_memory_used_bytes %" PRIu64 "\n"
                "# HELP headroom_device_memory_used_peak_bytes The highest device use sampled "
                "(after every step and at every scrape).\n"
                "# TYPE headroom_device_memory_used_peak_bytes gauge\n"
                "headroom_device_memory_used_peak_bytes %" PRIu64 "\n"
                "# HELP headroom_device_kv_mapped_bytes The KV pool's device memory mapped now "
                "(it grows as blocks are needed, while the device has room).\n"
                "# TYPE headroom_device_kv_mapped_bytes gauge\n"
                "headroom_device_kv_mapped_bytes %" PRIu64 "\n"
                "# HELP headroom_device_kv_capacity_bytes The KV pool's capacity (sized at start "
                "under --vram-limit).\n"
                "# TYPE headroom_device_kv_capacity_bytes gauge\n"
                "headroom_device_kv_capacity_bytes %" PRIu64 "\n"
                "# HELP headroom_device_kv_given_back_bytes_total Free KV pool memory given back "
                "to a device another process left short.\n"
                "# TYPE headroom_device_kv_given_back_bytes_total counter\n"
                "headroom_device_kv_given_back_bytes_total %" PRIu64 "\n",
                s.device_total_bytes, s.device_total_bytes - s.device_free_bytes,
                s.device_used_peak_bytes, s.device_kv_mapped_bytes, s.device_kv_reserved_bytes,
                s.device_kv_given_back_bytes);
    }
    if (st == HR_OK && s.state_slots_total)
        st = hr_api_buf_printf(
            &b,
            "# HELP headroom_state_slot_bytes Recurrent state of one sequence (hybrid models: "
            "every Gated DeltaNet layer's conv inputs and S matrices), whatever its length.\n"
            "# TYPE headroom_state_slot_bytes gauge\nheadroom_state_slot_bytes %" PRIu64 "\n"
            "# HELP headroom_state_slots Recurrent state slots (one per running request).\n"
            "# TYPE headroom_state_slots gauge\nheadroom_state_slots %u\n"
            "# HELP headroom_state_used_bytes Recurrent state requests use (slots in use x slot "
            "bytes).\n"
            "# TYPE headroom_state_used_bytes gauge\nheadroom_state_used_bytes %" PRIu64 "\n",
            s.state_slot_bytes, s.state_slots_total,
            (uint64_t)s.state_slots_used * s.state_slot_bytes);
    if (st == HR_OK && srv->gov) {
        char gov[16384];
        const size_t n = hr_mem_counters_format(hr_gov_counters(srv->gov), gov, sizeof(gov));
        st = hr_api_buf_put(&b, gov, n < sizeof(gov) ? n : sizeof(gov) - 1);
    } else if (st == HR_OK) {
        /* Without a governor (--no-governor) its counters are absent; the
         * chunk count still comes from the scheduler, so a dashboard or
         * benchmark reads the same name in both modes. */
        st = hr_api_buf_printf(&b,
                               "# HELP headroom_prefill_chunks_total Prefill chunks run.\n"
                               "# TYPE headroom_prefill_chunks_total counter\n"
                               "headroom_prefill_chunks_total %" PRIu64 "\n",
                               s.prefill_chunks);
    }
    if (st == HR_OK)
        st = metrics_for_routers(srv, &s, &b);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    ex->server_timing_name = "metrics";
    ex->server_timing_ms = (hr_now_seconds() - t0) * 1e3;
    if (ex->server_timing_ms <= 0)
        ex->server_timing_ms = 1e-6;
    ex->server_cpu_ms = (c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) / 1e6;
    enum MHD_Result r;
    if (st != HR_OK)
        r = fail(ex, HR_API_ERR_INTERNAL, 0, "out of memory");
    else
        r = hr_respond(ex, 200, "text/plain; version=0.0.4; charset=utf-8", b.data, b.len, 0);
    hr_api_buf_free(&b);
    return r;
}

/* The dashboard's page (also at `/`): the same bytes with or without the
 * key; without it (ex->locked) the status is 401 and the page's script asks
 * for the key before it loads anything else. */
static enum MHD_Result r_page(struct hr_exchange *ex)
{
    const struct hr_dash_asset *a = hr_dash_asset_find("/dashboard");
    return hr_respond(ex, ex->locked ? 401 : 200, a->content_type, (const char *)a->data, a->size,
                      0);
}

static enum MHD_Result r_asset(struct hr_exchange *ex)
{
    const struct hr_dash_asset *a = hr_dash_asset_find(ex->route->path);
    if (!a)
        return fail(ex, HR_API_ERR_NOT_FOUND, 0, "%s: no such asset", ex->path);
    return hr_respond(ex, 200, a->content_type, (const char *)a->data, a->size, 0);
}

static uint64_t query_u64(struct hr_exchange *ex, const char *key)
{
    const char *v = MHD_lookup_connection_value(ex->conn, MHD_GET_ARGUMENT_KIND, key);
    return v ? strtoull(v, NULL, 10) : 0;
}

/* GET /dashboard/snapshot?h=N&d=M&info=1: what is new since samples N and
 * decisions M (dashboard.h). Its cost, measured here, goes back in the
 * Server-Timing header and into the next snapshots' "cost". */
static enum MHD_Result r_snapshot(struct hr_exchange *ex)
{
    struct hr_server *srv = ex->srv;
    struct hr_dash *d = &srv->dash;
    /* Wall time includes waiting for the locks and for a CPU (2 cores
     * shared with the engine's threads); thread CPU time is what the call
     * itself costs. Both go back to the caller. */
    struct timespec c0, c1;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c0);
    const double t0 = hr_now_seconds();
    struct hr_api_buf b = {0};
    const enum hr_status st = hr_dash_snapshot(srv, query_u64(ex, "h"), query_u64(ex, "d"),
                                               query_u64(ex, "info") != 0, &b);
    const uint64_t ns = (uint64_t)((hr_now_seconds() - t0) * 1e9);
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &c1);
    const double cpu_ms = (c1.tv_sec - c0.tv_sec) * 1e3 + (c1.tv_nsec - c0.tv_nsec) / 1e6;
    atomic_fetch_add(&d->n_snapshots, 1);
    atomic_fetch_add(&d->snapshot_ns_total, ns);
    for (uint64_t m = atomic_load(&d->snapshot_ns_max);
         ns > m && !atomic_compare_exchange_weak(&d->snapshot_ns_max, &m, ns);)
        ;
    enum MHD_Result r;
    if (st != HR_OK) {
        r = fail(ex, HR_API_ERR_INTERNAL, 0, "out of memory");
    } else {
        ex->server_timing_ms = ns > 0 ? ns / 1e6 : 1e-6;
        ex->server_cpu_ms = cpu_ms;
        r = hr_respond(ex, 200, "application/json", b.data, b.len, 0);
    }
    hr_api_buf_free(&b);
    return r;
}

static const struct hr_route routes[] = {
    {"/v1/messages", "POST", HR_ROUTE_MESSAGES, r_messages},
    {"/v1/messages/count_tokens", "POST", HR_ROUTE_COUNT_TOKENS, r_count_tokens},
    {"/v1/chat/completions", "POST", HR_ROUTE_CHAT, r_chat},
    {"/v1/completions", "POST", HR_ROUTE_COMPLETIONS, r_completions},
    {"/v1/models", "GET HEAD", HR_ROUTE_MODELS, r_models},
    {"/tokenize", "POST", HR_ROUTE_TOKENIZE, r_tokenize},
    {"/detokenize", "POST", HR_ROUTE_DETOKENIZE, r_detokenize},
    {"/health", "GET HEAD", HR_ROUTE_HEALTH, r_health},
    {"/ready", "GET HEAD", HR_ROUTE_READY, r_ready},
    {"/metrics", "GET HEAD", HR_ROUTE_METRICS, r_metrics},
    {"/", "GET HEAD", HR_ROUTE_ROOT, r_page},
    {"/dashboard", "GET HEAD", HR_ROUTE_DASHBOARD, r_page},
    {"/dashboard/snapshot", "GET", HR_ROUTE_DASHBOARD, r_snapshot},
    {"/dashboard/app.js", "GET HEAD", HR_ROUTE_DASHBOARD, r_asset},
    {"/dashboard/uplot.js", "GET HEAD", HR_ROUTE_DASHBOARD, r_asset},
    {"/dashboard/uplot.css", "GET HEAD", HR_ROUTE_DASHBOARD, r_asset},
};

bool hr_route_answers_locked(const struct hr_route *r)
{
    return r && r->fn == r_page;
}

const struct hr_route *hr_route_find(const char *path, enum hr_metrics_route *id)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') /* "/v1/models/" is "/v1/models" */
        n--;
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
        if (strlen(routes[i].path) == n && memcmp(routes[i].path, path, n) == 0) {
            *id = routes[i].id;
            return &routes[i];
        }
    *id = HR_ROUTE_OTHER;
    return NULL;
}

static bool method_allowed(const char *methods, const char *m)
{
    const size_t n = strlen(m);
    for (const char *p = methods; *p;) {
        const char *e = strchr(p, ' ');
        const size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && memcmp(p, m, n) == 0)
            return true;
        if (!e)
            break;
        p = e + 1;
    }
    return false;
}

enum MHD_Result hr_route_dispatch(struct hr_exchange *ex)
{
    const struct hr_route *r = ex->route;
    if (!r)
        return fail(ex, HR_API_ERR_NOT_FOUND, 0, "%s %s: no such route", ex->method, ex->path);
    if (!method_allowed(r->methods, ex->method)) {
        ex->allow = !strcmp(r->methods, "POST") ? "POST" : "GET, HEAD";
        return fail(ex, HR_API_ERR_METHOD, 0, "%s %s: method not allowed (allowed: %s)",
                    ex->method, r->path, r->methods);
    }
    return r->fn(ex);
}

/* ---- the model ---------------------------------------------------------------------- */

enum hr_status hr_server_load(struct hr_server *srv, struct hr_err *err)
{
    const struct hr_server_config *cfg = &srv->cfg;
    enum hr_status st;
    const double t0 = hr_now_seconds();
    /* A GPU takes the weights: the host keeps no copy of them (a bad
     * --device is reported where the engine starts). */
    struct hr_device dev;
    const struct hr_model_open_opts mo = {
        .device = hr_device_parse(cfg->device, &dev, NULL) == HR_OK && hr_device_tries_gpu(&dev)};
    if ((st = hr_model_open_ex(cfg->model_path, &mo, &srv->model, err)) != HR_OK ||
        (st = hr_tokenizer_init_from_gguf(srv->model->gguf, &srv->tok, err)) != HR_OK ||
        (st = hr_chat_template_init_from_gguf(srv->model->gguf, NULL, &srv->tmpl, err)) != HR_OK) {
        hr_err_prefix(err, "%s", cfg->model_path);
        return st;
    }
    /* The process's peak so far is loading's: what a ceiling must hold
     * before the first request (docs/memory.md, "Loading under the ceiling"). */
    if (mo.device)
        hr_log_info("server", "weights %.1f MiB, opened for the GPU (not packed for the CPU; "
                    "each tensor's pages released once uploaded); opened in %.2f s, peak RSS "
                    "%.1f MiB", (double)srv->model->weight_bytes / (1 << 20),
                    hr_now_seconds() - t0, (double)hr_peak_rss_bytes() / (1 << 20));
    else
        hr_log_info("server",
                    "weights %.1f MiB, of which %.1f MiB packed for the %s kernels; loaded in "
                    "%.2f s, peak RSS %.1f MiB",
                    (double)srv->model->weight_bytes / (1 << 20),
                    (double)srv->model->packed_bytes / (1 << 20), hr_kernels_isa(),
                    hr_now_seconds() - t0, (double)hr_peak_rss_bytes() / (1 << 20));
    struct hr_gguf_str src;
    char *tsrc = NULL;
    if (hr_gguf_get_str(srv->model->gguf, "tokenizer.chat_template", &src, NULL) == HR_OK)
        tsrc = hr_gguf_str_dup(src);
    srv->format = hr_chat_format_detect(tsrc);
    free(tsrc);

    /* The name clients see: the file's base name without .gguf. */
    const char *base = strrchr(cfg->model_path, '/');
    base = base ? base + 1 : cfg->model_path;
    size_t nb = strlen(base);
    if (nb > 5 && strcmp(base + nb - 5, ".gguf") == 0)
        nb -= 5;
    if (!(srv->model_id = strndup(base, nb)))
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory");

    const struct hr_hparams *hp = &srv->model->hp;
    srv->n_ctx = cfg->n_ctx ? cfg->n_ctx : hp->n_ctx_train ? hp->n_ctx_train : 4096;

    if (cfg->test_script) {
        struct hr_tokens t = {0};
        if ((st = hr_tokenizer_encode(srv->tok, cfg->test_script, strlen(cfg->test_script),
                                      HR_TOK_PARSE_SPECIAL, &t, err)) != HR_OK) {
            hr_tokens_free(&t);
            return st;
        }
        int32_t end = hr_tokenizer_eot(srv->tok);
        if (end == HR_TOKEN_NULL)
            end = hr_tokenizer_eos(srv->tok);
        int32_t *p = realloc(t.ids, (t.n + 1) * sizeof(int32_t));
        if (!p) {
            hr_tokens_free(&t);
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory");
        }
        p[t.n] = end;
        srv->script = p;
        srv->n_script = (uint32_t)t.n + 1;
        hr_log_warn("server", "--test-script: every request's output is a fixed %u-token script",
                    srv->n_script);
    }

    /* The memory governor: the ceiling is --memory-limit, the cgroup's
     * limit and what the machine has available, whichever is lowest. The
     * limit is parsed even under --no-governor, so a typo is still an
     * error and not a silently different benchmark. */
    struct hr_gov_config gc;
    hr_gov_config_default(&gc);
    gc.admit_margin_bytes = HR_GOV_ADMIT_NOISE_BYTES; /* the real probe: see governor.h */
    if (cfg->memory_limit &&
        (st = hr_mem_parse_size(cfg->memory_limit, hr_mem_ram_total_bytes(), &gc.limit_bytes, err)) != HR_OK) {
        hr_err_prefix(err, "--memory-limit");
        return st;
    }
    if (cfg->has_memory_reserve)
        gc.reserve_bytes = cfg->memory_reserve_bytes;
    srv->memory_limit_bytes = gc.limit_bytes;
    if (cfg->no_governor) {
        /* The seed's "before" for benchmarks: the scheduler without a
         * governor cuts fixed chunks and admits whatever fits the context
         * and the KV pool, so memory can kill this process. */
        hr_log_warn("server",
                    "--no-governor: memory is NOT governed: fixed %u-token prefill chunks, no "
                    "admission or pressure handling by memory%s; for benchmarks only",
                    cfg->batch_tokens ? cfg->batch_tokens : 512,
                    cfg->memory_limit ? ", --memory-limit ignored" : "");
    } else {
        struct hr_mem_probe probe;
        if ((st = hr_mem_probe_sys_init(NULL, &probe, err)) != HR_OK ||
            (st = hr_gov_init(&gc, probe, &srv->gov, err)) != HR_OK)
            return st;
    }

    const uint32_t parallel = cfg->parallel ? cfg->parallel : 4;
    const enum hr_ggml_type kv_type = cfg->kv_type ? cfg->kv_type : HR_GGML_F16;
    /* KV only on attention layers (a hybrid model's DeltaNet layers keep state) */
    struct hr_kv_config kc = {.n_layer = srv->model->n_attn_layers, .n_head_kv = hp->n_head_kv,
                              .head_dim = hp->head_dim_k, .type = kv_type};
    /* The pool the engine will make (windowed blocks on gpt-oss). */
    struct hr_kv_config pool_kc;
    hr_engine_kv_config(srv->model, kv_type, 0, false, &pool_kc);
    if (!hr_kv_block_bytes_for(&kc))
        return hr_err_set(err, HR_ERR_UNSUPPORTED,
                          "--cache-type %s needs a head dim that is a multiple of 32; the "
                          "model's head dim is %u", hr_kv_type_name(kv_type), hp->head_dim_k);
    /* Address space for every slot's whole context; pages are committed
     * only as blocks fill, and the governor watches what is committed. */
    const uint64_t blocks_per_seq =
        ((uint64_t)srv->n_ctx + HR_KV_DEFAULT_BLOCK_TOKENS) / HR_KV_DEFAULT_BLOCK_TOKENS;
    struct hr_sched_config sc = {
        .model = srv->model,
        .tok = srv->tok,
        .n_threads = cfg->n_threads,
        .kv_type = kv_type,
        .kv_budget_bytes =
            (uint64_t)parallel *
            hr_kv_config_blocks_for(&pool_kc, (uint32_t)blocks_per_seq * HR_KV_DEFAULT_BLOCK_TOKENS,
                                    cfg->batch_tokens ? cfg->batch_tokens : 512) *
            hr_kv_block_bytes_for(&pool_kc),
        .n_ctx = srv->n_ctx,
        .batch_tokens = cfg->batch_tokens,
        .parallel = parallel,
        .max_queue = cfg->max_queue,
        /* --queue-max-wait bounds the wait too; the shorter one applies */
        .queue_timeout_s = cfg->queue_max_wait_s > 0 &&
                                   (cfg->queue_timeout_s <= 0 ||
                                    cfg->queue_max_wait_s < cfg->queue_timeout_s)
                               ? cfg->queue_max_wait_s
                               : cfg->queue_timeout_s,
        .gov = srv->gov,
        .prefix_cache = !cfg->no_prefix_cache,
        .cache_limit_bytes = cfg->cache_limit_bytes,
        .device_limit_bytes = cfg->vram_limit_bytes,
    };
    if ((st = hr_device_parse(cfg->device, &sc.device, err)) != HR_OK)
        return st;
    /* The agent's thread may read srv->sched already (under sched_lock). */
    struct hr_sched *sched = NULL;
    if ((st = hr_sched_init(&sc, &sched, err)) != HR_OK)
        return st;
    srv->min_request_bytes = hr_sched_min_request_bytes(sched);
    const struct hr_backend_info *bi = hr_sched_backend_info(sched);
    hr_log_info("server", "device %s: %s%s%s", bi->name, bi->description,
                bi->fallback[0] ? "; CUDA not used: " : "", bi->fallback);
    pthread_rwlock_wrlock(&srv->sched_lock);
    srv->sched = sched;
    pthread_rwlock_unlock(&srv->sched_lock);
    /* Everything the governor counts per block follows from these. */
    hr_log_info("server", "KV cache %s: %llu bytes per block of %u tokens (%llu per token)",
                hr_kv_type_name(kv_type), (unsigned long long)hr_kv_block_bytes_for(&pool_kc),
                HR_KV_DEFAULT_BLOCK_TOKENS,
                (unsigned long long)(hr_kv_block_bytes_for(&pool_kc) / HR_KV_DEFAULT_BLOCK_TOKENS));
    /* A windowed pool's block holds one kind of layer (kv-cache.h). */
    if (pool_kc.window)
        hr_log_info("server", "KV cache: the full-attention layers' blocks per token above, the "
                    "sliding-window layers' in blocks of their own for their last %u positions "
                    "(%u blocks a sequence at most while decoding)", pool_kc.window,
                    hr_kv_config_window_blocks(&pool_kc, 1));
    hr_log_info("server",
                "model %s: %s, context %u tokens, %u parallel, prefix cache %s, tool calls as %s, "
                "chat template %s",
                srv->model_id, hr_arch_name(srv->model->arch), srv->n_ctx, parallel,
                cfg->no_prefix_cache        ? "off"
                : srv->model->dn.n_layers ? "on (with recurrent state snapshots)"
                                          : "on",
                hr_chat_format_name(srv->format),
                hr_gguf_find(srv->model->gguf, "tokenizer.chat_template") ? "from the file"
                                                                          : "ChatML (none in the file)");
    return HR_OK;
}

void hr_server_unload(struct hr_server *srv)
{
    hr_gov_free(srv->gov);
    srv->gov = NULL;
    hr_chat_template_free(srv->tmpl);
    hr_tokenizer_free(srv->tok);
    hr_model_close(srv->model);
    free(srv->model_id);
    free(srv->script);
}
