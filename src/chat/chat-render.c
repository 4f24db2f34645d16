/*
 * chat-render.c - a chat request to prompt text through the model's chat
 * template: builds the context transformers would build (see
 * chat-render.h), normalizes messages and tools, and probes each template
 * once at init for the two conventions templates disagree on (content-part
 * arrays, tool-call arguments as mappings or strings).
 */
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "chat/chat-render.h"
#include "chat/jinja.h"
#include "gguf/gguf.h"

/* ChatML: what Qwen, Hermes and many fine-tunes use; content that is not
 * a string (null, or parts the template never sees here) prints empty. */
const char hr_chat_template_chatml[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + "
    "(message['content'] if message['content'] is string else '') + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

struct hr_chat_template {
    struct hr_jinja_template *tmpl;
    char *bos, *eos; /* NULL: undefined in the template */
    bool keep_parts;
    bool object_args;
    bool null_to_empty; /* assistant content null -> "" when it has tool calls */
    bool thinking;      /* reasoning_content is passed as "thinking" too (gpt-oss) */
};

static char *dup_str(const char *s)
{
    return s ? strdup(s) : NULL;
}

/* ---- tools ---- */

json_t *hr_chat_tool_to_openai(const json_t *tool, struct hr_err *err)
{
    if (!json_is_object(tool)) {
        hr_err_set(err, HR_ERR_TYPE, "a tool must be an object");
        return NULL;
    }
    const json_t *fn = json_object_get(tool, "function");
    if (json_is_object(fn)) {
        if (!json_is_string(json_object_get(fn, "name"))) {
            hr_err_set(err, HR_ERR_INVALID, "tool function has no string 'name'");
            return NULL;
        }
        return json_incref((json_t *)tool);
    }
    const json_t *name = json_object_get(tool, "name");
    if (!json_is_string(name)) {
        hr_err_set(err, HR_ERR_INVALID, "tool has no string 'name'");
        return NULL;
    }
    json_t *f = json_object();
    json_object_set(f, "name", (json_t *)name);
    const json_t *desc = json_object_get(tool, "description");
    if (desc)
        json_object_set(f, "description", (json_t *)desc);
    const json_t *params = json_object_get(tool, "input_schema");
    if (!params)
        params = json_object_get(tool, "parameters");
    if (params)
        json_object_set(f, "parameters", (json_t *)params);
    json_t *out = json_object();
    json_object_set_new(out, "type", json_string("function"));
    json_object_set_new(out, "function", f);
    return out;
}

/* ---- messages ---- */

/* Text parts joined with "\n"; other parts dropped. */
static json_t *join_parts(const json_t *parts)
{
    size_t n = 0, i;
    const json_t *p;
    json_array_foreach(parts, i, p)
    {
        const json_t *t = json_object_get(p, "text");
        if (json_is_string(t))
            n += json_string_length(t) + 1;
    }
    char *buf = malloc(n + 1);
    if (!buf)
        return NULL;
    size_t k = 0;
    json_array_foreach(parts, i, p)
    {
        const json_t *type = json_object_get(p, "type");
        const json_t *t = json_object_get(p, "text");
        if (!json_is_string(t) || (type && !(json_is_string(type) && !strcmp(json_string_value(type), "text"))))
            continue;
        if (k)
            buf[k++] = '\n';
        memcpy(buf + k, json_string_value(t), json_string_length(t));
        k += json_string_length(t);
    }
    json_t *s = json_stringn(buf, k);
    free(buf);
    return s;
}

static enum hr_status normalize_message(const json_t *m, size_t idx, bool keep_parts,
                                        bool object_args, bool null_to_empty, bool thinking,
                                        json_t **out, struct hr_err *err)
{
    if (!json_is_object(m))
        return hr_err_set(err, HR_ERR_TYPE, "messages[%zu] is not an object", idx);
    json_t *c = json_deep_copy(m);
    if (!c)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory copying messages[%zu]", idx);
    json_t *content = json_object_get(c, "content");
    if (json_is_array(content) && !keep_parts) {
        json_t *s = join_parts(content);
        if (!s) {
            json_decref(c);
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory joining content parts");
        }
        json_object_set_new(c, "content", s);
    }
    json_t *calls = json_object_get(c, "tool_calls");
    if (null_to_empty && json_is_array(calls) && json_is_null(content))
        json_object_set_new(c, "content", json_string(""));
    if (object_args && json_is_array(calls)) {
        size_t i;
        json_t *call;
        json_array_foreach(calls, i, call)
        {
            json_t *fn = json_object_get(call, "function");
            json_t *args = fn ? json_object_get(fn, "arguments") : NULL;
            if (!json_is_string(args))
                continue;
            json_t *parsed = json_loadb(json_string_value(args), json_string_length(args),
                                        JSON_DECODE_ANY, NULL);
            if (json_is_object(parsed))
                json_object_set_new(fn, "arguments", parsed);
            else
                json_decref(parsed);
        }
    }
    /* gpt-oss's template reads an assistant turn's reasoning from
     * `thinking` and raises when a tool-call turn has both content and
     * thinking; llama.cpp copies reasoning_content there and drops such a
     * turn's content, and so do we. */
    json_t *rc = json_object_get(c, "reasoning_content");
    if (thinking && json_is_string(rc) && !json_object_get(c, "thinking")) {
        json_object_set(c, "thinking", rc);
        if (json_array_size(calls) > 0)
            json_object_del(c, "content");
    }
    *out = c;
    return HR_OK;
}

struct conventions {
    bool keep_parts, object_args, null_to_empty, thinking;
};

static enum hr_status build_context(const char *bos, const char *eos, struct conventions cv,
                                    const struct hr_chat_request *req, json_t **out,
                                    struct hr_err *err)
{
    *out = NULL;
    if (!json_is_array(req->messages))
        return hr_err_set(err, HR_ERR_TYPE, "messages must be an array");
    if (req->tools && !json_is_array(req->tools) && !json_is_null(req->tools))
        return hr_err_set(err, HR_ERR_TYPE, "tools must be an array");
    if (req->kwargs && !json_is_object(req->kwargs))
        return hr_err_set(err, HR_ERR_TYPE, "template kwargs must be an object");
    json_t *ctx = json_object(), *msgs = json_array();
    json_object_set_new(ctx, "messages", msgs);
    size_t i;
    const json_t *m;
    json_array_foreach(req->messages, i, m)
    {
        json_t *nm = NULL;
        enum hr_status st = normalize_message(m, i, cv.keep_parts, cv.object_args,
                                              cv.null_to_empty, cv.thinking, &nm, err);
        if (st != HR_OK) {
            json_decref(ctx);
            return st;
        }
        json_array_append_new(msgs, nm);
    }
    if (req->tools && json_array_size(req->tools)) {
        json_t *tools = json_array();
        json_object_set_new(ctx, "tools", tools);
        const json_t *t;
        json_array_foreach(req->tools, i, t)
        {
            json_t *o = hr_chat_tool_to_openai(t, err);
            if (!o) {
                hr_err_prefix(err, "tools[%zu]", i);
                json_decref(ctx);
                return HR_ERR_INVALID;
            }
            json_array_append_new(tools, o);
        }
    } else {
        json_object_set_new(ctx, "tools", json_null());
    }
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_boolean(req->add_generation_prompt));
    if (bos)
        json_object_set_new(ctx, "bos_token", json_string(bos));
    if (eos)
        json_object_set_new(ctx, "eos_token", json_string(eos));
    if (req->kwargs) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)req->kwargs, k, v)
        {
            if (!strcmp(k, "messages") || !strcmp(k, "tools") || !strcmp(k, "documents") ||
                !strcmp(k, "add_generation_prompt")) {
                json_decref(ctx);
                return hr_err_set(err, HR_ERR_INVALID,
                                  "template kwargs may not set '%s' (it is a request field)", k);
            }
            json_object_set(ctx, k, v);
        }
    }
    *out = ctx;
    return HR_OK;
}

/* ---- probes ---- */

/* Renders a probe request; the output, or NULL when the template fails. */
static char *probe(const struct hr_chat_template *ct, const char *messages_json,
                   struct conventions cv)
{
    json_t *msgs = json_loads(messages_json, 0, NULL);
    struct hr_chat_request req = {.messages = msgs, .add_generation_prompt = true};
    json_t *ctx = NULL;
    char *out = NULL;
    size_t len;
    struct hr_jinja_limits lim = {.max_ms = 200};
    if (msgs && build_context(ct->bos, ct->eos, cv, &req, &ctx, NULL) == HR_OK)
        if (hr_jinja_render(ct->tmpl, ctx, &lim, &out, &len, NULL, NULL) != HR_OK)
            out = NULL;
    json_decref(ctx);
    json_decref(msgs);
    return out;
}

static void run_probes(struct hr_chat_template *ct)
{
    /* Content parts: the text must come out, and not inside a printed
     * Python list (a template that does `content | trim` on a list prints
     * "[{'type': 'text', ...}]"). */
    struct conventions cv = {.keep_parts = true, .object_args = true};
    char *o = probe(ct,
                    "[{\"role\":\"user\",\"content\":[{\"type\":\"text\","
                    "\"text\":\"hr-probe-text\"}]}]",
                    cv);
    ct->keep_parts = o && strstr(o, "hr-probe-text") && !strstr(o, "'text'");
    free(o);
    /* Tool calls: OpenAI's form (content null, arguments a string) meets
     * templates that call string methods on content (Qwen 3) or need null
     * to detect a tool-call turn (DeepSeek V3), and that want arguments as
     * a mapping (most) or as a string (DeepSeek V3). The first variant that
     * renders the arguments wins: mapping before string, null before "". */
    static const char calls[] =
        "[{\"role\":\"user\",\"content\":\"hi\"},"
        "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"call_1\","
        "\"type\":\"function\",\"function\":{\"name\":\"probe_fn\","
        "\"arguments\":\"{\\\"hr_probe_arg\\\": 1}\"}}]},"
        "{\"role\":\"tool\",\"tool_call_id\":\"call_1\",\"content\":\"ok\"}]";
    static const struct {
        bool object_args, null_to_empty;
    } variants[] = {{true, false}, {true, true}, {false, false}, {false, true}};
    ct->object_args = true;
    ct->null_to_empty = false;
    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); i++) {
        cv.keep_parts = ct->keep_parts;
        cv.object_args = variants[i].object_args;
        cv.null_to_empty = variants[i].null_to_empty;
        o = probe(ct, calls, cv);
        bool shown = o && strstr(o, "hr_probe_arg");
        free(o);
        if (shown) {
            ct->object_args = cv.object_args;
            ct->null_to_empty = cv.null_to_empty;
            break;
        }
    }
}

/* ---- init ---- */

enum hr_status hr_chat_template_init(const char *source, const char *bos_token,
                                     const char *eos_token, struct hr_chat_template **out,
                                     struct hr_err *err)
{
    *out = NULL;
    struct hr_chat_template *ct = calloc(1, sizeof(*ct));
    if (!ct)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory loading the chat template");
    if (!source)
        source = hr_chat_template_chatml;
    enum hr_status st = hr_jinja_parse(source, strlen(source), NULL, &ct->tmpl, err);
    if (st != HR_OK) {
        hr_err_prefix(err, "chat template");
        free(ct);
        return st;
    }
    ct->bos = dup_str(bos_token);
    ct->eos = dup_str(eos_token);
    if ((bos_token && !ct->bos) || (eos_token && !ct->eos)) {
        hr_chat_template_free(ct);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory loading the chat template");
    }
    run_probes(ct);
    ct->thinking = strstr(source, "message.thinking") && !strstr(source, "reasoning_content");
    *out = ct;
    return HR_OK;
}

/* The stored text of the token a `tokenizer.ggml.*_token_id` key names. */
static char *token_text(const struct hr_gguf *g, const char *key)
{
    uint32_t id;
    const struct hr_gguf_value *toks;
    if (hr_gguf_get_u32(g, key, &id, NULL) != HR_OK)
        return NULL;
    if (hr_gguf_get_arr(g, "tokenizer.ggml.tokens", HR_GGUF_STRING, &toks, NULL) != HR_OK ||
        id >= toks->v.arr.n)
        return NULL;
    return hr_gguf_str_dup(toks->v.arr.items[id].v.str);
}

enum hr_status hr_chat_template_init_from_gguf(const struct hr_gguf *g,
                                               const char *source_override,
                                               struct hr_chat_template **out,
                                               struct hr_err *err)
{
    struct hr_gguf_str s;
    char *source = NULL;
    if (source_override) {
        if (!(source = strdup(source_override)))
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory reading the chat template");
    } else if (hr_gguf_get_str(g, "tokenizer.chat_template", &s, NULL) == HR_OK) {
        if (!(source = hr_gguf_str_dup(s)))
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory reading the chat template");
    } else {
        hr_log_info("chat", "the model has no tokenizer.chat_template; using ChatML");
    }
    char *bos = token_text(g, "tokenizer.ggml.bos_token_id");
    char *eos = token_text(g, "tokenizer.ggml.eos_token_id");
    enum hr_status st = hr_chat_template_init(source, bos, eos, out, err);
    free(source);
    free(bos);
    free(eos);
    return st;
}

void hr_chat_template_free(struct hr_chat_template *ct)
{
    if (!ct)
        return;
    hr_jinja_template_free(ct->tmpl);
    free(ct->bos);
    free(ct->eos);
    free(ct);
}

bool hr_chat_template_keeps_content_parts(const struct hr_chat_template *ct)
{
    return ct->keep_parts;
}

bool hr_chat_template_wants_object_arguments(const struct hr_chat_template *ct)
{
    return ct->object_args;
}

bool hr_chat_template_empties_null_content(const struct hr_chat_template *ct)
{
    return ct->null_to_empty;
}

/* ---- render ---- */

enum hr_status hr_chat_build_context(const struct hr_chat_template *ct,
                                     const struct hr_chat_request *req, json_t **out,
                                     struct hr_err *err)
{
    struct conventions cv = {ct->keep_parts, ct->object_args, ct->null_to_empty, ct->thinking};
    return build_context(ct->bos, ct->eos, cv, req, out, err);
}

enum hr_status hr_chat_render_context(const struct hr_chat_template *ct, const json_t *context,
                                      char **out, size_t *out_len, struct hr_err *err)
{
    char *raised = NULL;
    enum hr_status st = hr_jinja_render(ct->tmpl, context, NULL, out, out_len, &raised, err);
    if (st != HR_OK && raised) {
        /* The template's own words, without our line prefix: clients show
         * this to users ("System role not supported"). */
        hr_err_set(err, st, "%s", raised);
    }
    free(raised);
    return st;
}

enum hr_status hr_chat_render(const struct hr_chat_template *ct, const struct hr_chat_request *req,
                              char **out, size_t *out_len, struct hr_err *err)
{
    *out = NULL;
    json_t *ctx;
    enum hr_status st = hr_chat_build_context(ct, req, &ctx, err);
    if (st != HR_OK)
        return st;
    st = hr_chat_render_context(ct, ctx, out, out_len, err);
    json_decref(ctx);
    return st;
}
