/*
 * chat-render.h - turns a chat request (messages, tools, options) into the
 * prompt text the model expects, with the model's own chat template.
 *
 * The template is the GGUF's `tokenizer.chat_template` (a Jinja2 program,
 * run by jinja.h exactly as Hugging Face transformers runs it). A model
 * without one gets ChatML (the fallback below) and one log line saying so.
 *
 * What a template sees (the "context", a JSON object, as transformers'
 * apply_chat_template builds it):
 *
 *   messages               the request's messages, normalized as below
 *   tools                  the tools in OpenAI form, or null when there are none
 *   documents              null
 *   add_generation_prompt  true unless the caller turned it off
 *   bos_token, eos_token   the vocabulary's BOS/EOS texts, when the GGUF names
 *                          them (tokenizer.ggml.bos_token_id / eos_token_id)
 *   ...                    every key of the request's template kwargs
 *                          (e.g. enable_thinking); they may override bos/eos
 *                          but not the four keys above.
 *
 * Normalizing messages (OpenAI chat format in, template conventions out):
 *
 *   - Content-part arrays. Templates differ: some iterate the parts (Gemma 3
 *     handles [{"type":"text","text":...}]), most call string methods on
 *     `content` and fail on a list. At init each template is probed once
 *     with a one-part array; if its output shows the part's text (and not a
 *     printed Python list), arrays are passed as they are. Otherwise the
 *     text parts are joined with "\n" into a string (llama.cpp's server
 *     does the same) and non-text parts (images, audio) are dropped, since
 *     this engine is text-only.
 *   - Tool-call arguments. OpenAI sends `function.arguments` as a JSON
 *     string; templates written for transformers expect a mapping (Qwen 3
 *     prints a mapping with `| tojson`, a string as is; Llama 3.1 always
 *     applies tojson). A string that parses as a JSON object is therefore
 *     passed as that object, unless the init probe finds that the template
 *     only works with strings (DeepSeek V3 concatenates them with `+`); then
 *     strings stay strings. Arguments that are not a valid JSON object are
 *     passed unchanged.
 *   - Null content next to tool calls. OpenAI sends `"content": null` on an
 *     assistant turn that only calls tools. Some templates need the null
 *     (DeepSeek V3 tests `content is none`), others fail on it (Qwen 3 does
 *     `'</think>' in message.content`). The same probe tries null first and
 *     "" second; the first variant that renders the call decides.
 *   - Reasoning as `thinking`. A template that reads `message.thinking` and
 *     never names reasoning_content (gpt-oss's harmony template) gets an
 *     assistant turn's reasoning_content copied into `thinking`; when that
 *     turn also calls tools, its content is dropped (the template raises
 *     on both), as llama.cpp does.
 *   - Everything else (roles, name, tool_call_id, reasoning_content, other
 *     null content) is passed unchanged.
 *
 * Tools may be OpenAI's {"type":"function","function":{name, description,
 * parameters}}, a bare {name, description, parameters}, or Anthropic's
 * {name, description, input_schema}; all become the first form.
 *
 * Threads. An initialized hr_chat_template is immutable: any thread may
 * render with it at any time. Ownership: init copies what it needs from its
 * arguments; render returns a malloc'd string the caller frees.
 *
 * Failure. Template syntax errors fail init (HR_ERR_INVALID, "chat template
 * line N: ..."). A render fails with HR_ERR_INVALID when the template
 * raises (the message is the template's own, e.g. "Conversation roles must
 * alternate user/assistant/user/assistant/..."), with HR_ERR_LIMIT when it
 * exceeds a bound of jinja.h, and with HR_ERR_INVALID/HR_ERR_TYPE for
 * malformed requests (messages not an array, a message not an object).
 */
#ifndef HR_CHAT_CHAT_RENDER_H
#define HR_CHAT_CHAT_RENDER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "base/status.h"

struct hr_gguf;
struct hr_chat_template; /* opaque */

/* ChatML, used when a model ships no template. */
extern const char hr_chat_template_chatml[];

/*
 * Parses `source` (NUL-terminated; NULL means the ChatML fallback) and
 * probes it as described above. `bos_token`/`eos_token` may be NULL (then
 * the template sees them undefined). Errors: HR_ERR_INVALID (syntax),
 * HR_ERR_NOMEM.
 */
enum hr_status hr_chat_template_init(const char *source, const char *bos_token,
                                     const char *eos_token, struct hr_chat_template **out,
                                     struct hr_err *err);

/*
 * The same from a GGUF: its `tokenizer.chat_template` (or ChatML with an
 * info log line when absent) and the texts of the tokens named by
 * tokenizer.ggml.bos_token_id / eos_token_id in tokenizer.ggml.tokens.
 * `source_override`, when not NULL, replaces the GGUF's template (the
 * model's BOS/EOS texts are still used).
 */
enum hr_status hr_chat_template_init_from_gguf(const struct hr_gguf *g,
                                               const char *source_override,
                                               struct hr_chat_template **out,
                                               struct hr_err *err);

void hr_chat_template_free(struct hr_chat_template *ct); /* accepts NULL */

/* What the probes decided (see above): content-part arrays kept, tool-call
 * arguments as mappings, null content of tool-call turns turned into "". */
bool hr_chat_template_keeps_content_parts(const struct hr_chat_template *ct);
bool hr_chat_template_wants_object_arguments(const struct hr_chat_template *ct);
bool hr_chat_template_empties_null_content(const struct hr_chat_template *ct);

struct hr_chat_request {
    const json_t *messages;     /* array of message objects (required) */
    const json_t *tools;        /* array, or NULL */
    const json_t *kwargs;       /* object of extra template variables, or NULL */
    bool add_generation_prompt;
};

/*
 * The context a render gives the template (see the top of this file), as
 * a new JSON object the caller owns (json_decref). For debugging and for
 * the oracle test, which renders the same context with Python.
 */
enum hr_status hr_chat_build_context(const struct hr_chat_template *ct,
                                     const struct hr_chat_request *req, json_t **out,
                                     struct hr_err *err);

/*
 * Renders the prompt. *out is malloc'd and NUL-terminated (caller frees),
 * *out_len its length. On failure *out is NULL.
 */
enum hr_status hr_chat_render(const struct hr_chat_template *ct, const struct hr_chat_request *req,
                              char **out, size_t *out_len, struct hr_err *err);

/* Renders an explicit context object (no normalization). */
enum hr_status hr_chat_render_context(const struct hr_chat_template *ct, const json_t *context,
                                      char **out, size_t *out_len, struct hr_err *err);

/*
 * One tool in OpenAI form (new reference, caller decrefs): Anthropic's
 * {name, description, input_schema} and bare {name, description,
 * parameters} are wrapped as {"type":"function","function":{...}}; an
 * OpenAI tool is returned as is. NULL (with err) when `tool` is not an
 * object with a string "name" (or "function.name").
 */
json_t *hr_chat_tool_to_openai(const json_t *tool, struct hr_err *err);

#endif
