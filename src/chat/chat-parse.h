/*
 * chat-parse.h - turns the text a model generates back into content,
 * reasoning and tool calls, while it streams.
 *
 * A chat template teaches the model to write tool calls in one of a few
 * textual conventions; this module recognizes them in the detokenized
 * output and hands the server structured events:
 *
 *   content    plain text for the user (OpenAI `content`, Anthropic `text`);
 *   reasoning  the inside of a leading <think>...</think> block (OpenAI
 *              `reasoning_content`, Anthropic `thinking`);
 *   tool call  {index, name, arguments as compact JSON object text, the id
 *              the model wrote if any}, emitted once the call is complete;
 *   call begin, arguments delta
 *              (qwen3-coder with opts.stream_args only) the call's name as
 *              soon as it is known, then its arguments text in pieces as
 *              each parameter completes; the complete call follows, marked
 *              `streamed`, with the whole arguments again (so a consumer
 *              that does not stream may ignore the first two kinds).
 *
 * Formats (enum hr_chat_format), all but harmony only when opts.tools is set:
 *   hermes   Qwen 2.5/3, Hermes, many fine-tunes:
 *              <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *            anywhere in the content, any number of them.
 *   llama3   Llama 3.1+ JSON calls {"name": "f", "parameters": {...}} (or
 *            "arguments") at the very start of the output or after
 *            <|python_tag|>; several may follow, separated by ';' or
 *            whitespace.
 *   mistral  [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "..."}]
 *            and the newer [TOOL_CALLS]f[ARGS]{...} (with an optional
 *            [CALL_ID]id before [ARGS]).
 *   generic  the whole output is one JSON object naming a call: {"name",
 *            "arguments"|"parameters"}, {"tool_call": {...}} or
 *            {"tool_calls": [...]}.
 *   qwen3-coder  Qwen3-Coder, Qwen3.5, Nemotron Nano 3: XML, anywhere in
 *            the content, any number of them, one function per block:
 *              <tool_call>\n<function=f>\n<parameter=k>\nVALUE\n</parameter>\n
 *              </function>\n</tool_call>
 *            VALUE is raw text, not JSON: see "Typed values" below. As in
 *            llama.cpp, a call may leave out the opening <tool_call> (as
 *            Qwen3-Coder sometimes does) when NAME is a tool in
 *            opts.tool_defs; other "<function=" text is content.
 *   harmony  gpt-oss (OpenAI's harmony format): the output is a sequence of
 *            messages, each a header then a body, from the first byte (the
 *            prompt ends with "<|start|>assistant"):
 *              <|channel|>analysis<|message|>...<|end|>        reasoning
 *              <|start|>assistant<|channel|>commentary to=functions.f
 *                <|constrain|>json<|message|>{...}<|call|>      a call
 *              <|start|>assistant<|channel|>final<|message|>...<|return|>
 *            The recipient may also come first (" to=functions.f<|channel|>
 *            commentary json<|message|>", as the template renders history).
 *            A header is held whole (at most 512 bytes, else it is content);
 *            a body streams until <|end|> (or <|return|>, when fed): channel
 *            analysis is reasoning, a recipient "functions.NAME" with tools
 *            offered is a call, anything else (final, commentary preambles,
 *            other recipients, calls without tools) is content. A call's
 *            arguments run to <|call|>, <|end|> or the end of the output
 *            (<|call|> and <|return|> are end-of-generation, so the server's
 *            stream usually ends right before them) and must be one JSON
 *            object; otherwise the message, header included, is content.
 *            Text that cannot start a header is content up to <|end|>. With
 *            opts.reasoning off (the completions API) the output is content,
 *            markup and all. llama.cpp's common/chat.cpp gpt-oss rules.
 * The JSON formats also accept the OpenAI shape {"function": {"name",
 * "arguments"}, "id"} and, inside a call's JSON, an array of calls.
 * hr_chat_format_detect picks the format from the template's source.
 *
 * Reasoning: with opts.reasoning, a <think> at the start of the output
 * (after whitespace) opens a reasoning block that </think> closes; with
 * opts.in_reasoning the output starts inside one, because the prompt ended
 * with "<think>" (Qwen3 and DeepSeek-R1 templates with thinking on; see
 * hr_chat_prompt_opens_reasoning). A template that closes thinking in the
 * prompt ("<think>\n\n</think>\n\n") needs nothing: the output starts in
 * content. Whitespace just inside the block, and between </think> and what
 * follows, is dropped. In qwen3-coder with tools, <tool_call> also ends the
 * block (Qwen3.5 may call without closing its thinking; llama.cpp accepts
 * it too) and the call is read as it would be in content.
 *
 * What is held back, and for how long: the parser emits text as soon as it
 * cannot turn into something else. It holds (a) a tail of the buffer that
 * is a proper prefix of the next marker ("<tool_c"), (b) an incomplete UTF-8
 * character, (c) whitespace right before a possible marker (so "Sure.\n\n"
 * before a call loses its trailing blank lines; at most
 * HR_CHAT_PARSE_WS_HOLD bytes, beyond which the run is emitted as is), and
 * (d) a call from its marker until it is complete or proven malformed. For
 * llama3 and generic an output starting with '{' is held until the JSON
 * value closes (llama3) or the stream ends (generic, since trailing text
 * would make it content).
 *
 * Committed calls (qwen3-coder). A call is committed once
 * "<tool_call> <function=NAME>" has been read, so that its name and
 * arguments can stream. A mismatch before that degrades as below; after
 * it, the call is what was read so far: a mismatch, the end of the stream
 * or a value over max_held_bytes ends the call with the complete
 * parameters before it (a partial one is dropped), and reading resumes at
 * the element that broke it (whitespace dropped, the rest content). The
 * same rule holds with and without stream_args, so a streaming and a
 * non-streaming request see the same calls. max_held_bytes bounds one
 * parameter value and the arguments as a whole, not the whole call.
 *
 * Malformed calls degrade to content, never to an error: bad JSON, a
 * missing or empty name, arguments that are not an object, an unclosed tag
 * at the end of the stream, a call longer than opts.max_held_bytes or
 * nested deeper than HR_CHAT_PARSE_MAX_DEPTH. The marker and whatever
 * followed it come out as content text exactly as the model wrote them, and
 * scanning resumes after the marker.
 *
 * Arguments are the model's JSON with insignificant whitespace removed:
 * numbers, string escapes, key order and non-ASCII are kept exactly as
 * written (re-serializing through jansson would turn 0.1 into
 * 0.10000000000000001). The text is validated by jansson first. When the
 * model wrote "arguments" as a JSON string holding a JSON object (the
 * OpenAI wire form), the string is unwrapped; a string holding anything
 * else makes the call malformed. Missing or null arguments become "{}".
 *
 * Typed values (qwen3-coder). The model writes every parameter as raw
 * text; the request's tool schemas (opts.tool_defs) say what it means, as
 * llama.cpp's common/chat.cpp decides it: one newline right after
 * "<parameter=k>" and one right before "</parameter>" belong to the format
 * and are removed, nothing else is trimmed. A parameter whose schema
 * resolves to a string (type "string" or a type list naming it; a oneOf or
 * anyOf branch, or every allOf branch, that does; a string const or enum
 * value; pattern, minLength or maxLength) stays a JSON string of the text
 * verbatim, even "42" or "true". Any other known parameter is parsed as
 * JSON (number text kept as written, whitespace removed) and becomes a
 * string when it does not parse; where the schema allows a boolean or
 * null, Python's True, False and None (what the template's `| string`
 * renders for them in history) become true, false and null. A tool or
 * parameter the schemas do not name is a string. Arguments keep the
 * model's parameter order (a parameter written twice is kept twice; JSON
 * readers keep the last); an empty <function=f></function> gives "{}".
 * A value ends at the first "</parameter>". llama.cpp ends it at the first
 * "\n</parameter>\n", so a value holding "</parameter>" itself is cut
 * short here where llama.cpp keeps it; the template renders such a value
 * ambiguously for both.
 *
 * UTF-8: every content and reasoning delta is valid UTF-8. A character
 * split across feeds is held until complete; invalid bytes (and a truncated
 * character at the end of the stream) become U+FFFD, one per maximal
 * subpart as WHATWG decoders do, so the result does not depend on where the
 * chunks were cut.
 *
 * Invariant (checked by tests/unit/test-chat-parse.c and the fuzz target):
 * feeding an output whole, one byte at a time or in any chunks gives the
 * same sequence of content, reasoning, call begins, argument pieces and
 * calls once adjacent deltas of one kind are joined.
 *
 * States (the function behind each transition in brackets):
 *
 *   hr_chat_parser_init
 *      |   in_reasoning
 *      +-------------------------------> REASON_LEAD --[st_reason_lead]--> REASON
 *      v                                      ^                              |
 *    START ----- "<think>" [st_start] --------+              "</think>" [st_reason]
 *      |  \                          (qwen3-coder: "<tool_call>" to CONTENT)  v
 *      |   '{', llama3 or generic [st_start] --> LLAMA / GENERIC    START <- SKIP_WS
 *      |                                                    (<think> no longer opens)
 *      | anything else [st_start]
 *      v
 *   CONTENT -- marker [st_content] --> HERMES | QWEN3_CODER | MISTRAL | LLAMA (tagged)
 *      ^                                 |            |          |         |
 *      +--- SKIP_WS <-- call done [consume_call]  |         | call done [st_llama]
 *      |                                          |         v
 *      +--- anything else [st_llama_sep] <----------- LLAMA_SEP --'{'--> LLAMA
 *      +--- GENERIC at the end of the stream, a call or not [st_generic]
 *      +--- any call state, malformed [degrade]
 *
 * Harmony has its own three states (with opts.reasoning):
 *
 *   hr_chat_parser_init --> H_HEAD --"<|message|>", a call [st_h_head]--> H_CALL
 *                            ^  |                                          |
 *                            |  +--other headers, non-headers--> H_TEXT    |
 *                            |                                     |       |
 *                            +------ "<|end|>"/"<|return|>" [st_h_text]    |
 *                            +------ "<|call|>"/"<|end|>"/end [st_h_call] -+
 *
 * hr_chat_parser_finish resolves every waiting state: a call not yet
 * complete degrades, held text is emitted.
 *
 * Memory: per parser, the unconsumed input (held bytes, bounded by
 * max_held_bytes plus the size of one feed), a qwen3-coder call's
 * arguments (bounded by max_held_bytes; grown once per parameter) and the
 * events of the last feed. Threads: a parser belongs to one request and is used by one thread
 * at a time; the functions that take no parser are reentrant.
 *
 * Usage:
 *
 *   struct hr_chat_parse_opts o = hr_chat_parse_defaults();
 *   o.format = hr_chat_format_detect(template_src);
 *   o.tools = n_tools > 0;
 *   o.in_reasoning = hr_chat_prompt_opens_reasoning(prompt, prompt_len);
 *   struct hr_chat_parser *p;
 *   if (hr_chat_parser_init(&o, &p, &err) != HR_OK) ...
 *   for each detokenized piece:
 *       struct hr_chat_events ev;
 *       if (hr_chat_parser_feed(p, piece, len, &ev, &err) != HR_OK) ...  (only NOMEM)
 *       for (size_t i = 0; i < ev.n; i++) send(&ev.ev[i]);
 *   hr_chat_parser_finish(p, &ev, &err); send the last events
 *   hr_chat_parser_free(p);
 *
 * Markers that are control tokens (<|python_tag|>, [TOOL_CALLS], [ARGS])
 * reach the parser only if the server detokenizes with HR_DETOK_SPECIAL.
 */
#ifndef HR_CHAT_CHAT_PARSE_H
#define HR_CHAT_CHAT_PARSE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "base/rand.h"
#include "base/status.h"

enum hr_chat_format {
    HR_CHAT_FORMAT_GENERIC,
    HR_CHAT_FORMAT_HERMES,
    HR_CHAT_FORMAT_LLAMA3,
    HR_CHAT_FORMAT_MISTRAL,
    HR_CHAT_FORMAT_QWEN3_CODER,
    HR_CHAT_FORMAT_HARMONY,
    HR_CHAT_FORMAT_COUNT,
};

/*
 * The format a chat template's source implies: "[TOOL_CALLS]" -> mistral,
 * "<|channel|>" -> harmony (llama.cpp's test for gpt-oss),
 * "<tool_call>" with "<function=" and "<parameter=" -> qwen3-coder (the
 * test llama.cpp makes), "<tool_call>" alone -> hermes, "<|python_tag|>" or both "ipython" and
 * "\"parameters\"" -> llama3, anything else (or NULL) -> generic.
 */
enum hr_chat_format hr_chat_format_detect(const char *template_src);

/* "generic", "hermes", "llama3", "mistral", "qwen3-coder", "harmony"; "?" for a value out of range. */
const char *hr_chat_format_name(enum hr_chat_format f);

/* The inverse of hr_chat_format_name, for a flag; HR_ERR_INVALID names the value. */
enum hr_status hr_chat_format_from_name(const char *name, enum hr_chat_format *out,
                                        struct hr_err *err);

/* Whether the rendered prompt ends (after whitespace) with an open "<think>". */
bool hr_chat_prompt_opens_reasoning(const char *prompt, size_t n);

/* Held-back bounds, see the top of this file. */
#define HR_CHAT_PARSE_DEFAULT_MAX_HELD ((size_t)4 << 20)
#define HR_CHAT_PARSE_WS_HOLD          256
#define HR_CHAT_PARSE_MAX_DEPTH        256

struct hr_chat_parse_opts {
    enum hr_chat_format format;
    bool tools;            /* tools were offered: look for calls (else all is content) */
    bool reasoning;        /* a leading <think>...</think> is reasoning (default on) */
    bool in_reasoning;     /* the output starts inside a reasoning block */
    size_t max_held_bytes; /* a call longer than this degrades to text; 0: the default */
    /* The request's tools in OpenAI form ([{"type":"function","function":
     * {name, parameters}}], bare {name, parameters} and {name, input_schema}
     * work too), for qwen3-coder's typed values; NULL: every value is a
     * string. Borrowed: it must outlive the parser and not change. */
    const json_t *tool_defs;
    /* qwen3-coder: emit TOOL_CALL_BEGIN and TOOL_ARGS events as a call is
     * read (for streaming responses); other formats ignore it. */
    bool stream_args;
};

/* generic, no tools, reasoning on, not in reasoning, default cap. */
struct hr_chat_parse_opts hr_chat_parse_defaults(void);

enum hr_chat_event_kind {
    HR_CHAT_EVENT_CONTENT,
    HR_CHAT_EVENT_REASONING,
    HR_CHAT_EVENT_TOOL_CALL,
    HR_CHAT_EVENT_TOOL_CALL_BEGIN, /* opts.stream_args: a call's name, before its arguments */
    HR_CHAT_EVENT_TOOL_ARGS,       /* opts.stream_args: a piece of the open call's arguments */
};

/*
 * One event. Every pointer is owned by the parser and valid until the next
 * feed, finish or free on it; every string is NUL-terminated as well as
 * counted (content may itself contain NUL bytes, names and ids never do).
 */
struct hr_chat_event {
    enum hr_chat_event_kind kind;
    const char *text; /* CONTENT, REASONING, TOOL_ARGS: the delta, valid UTF-8, len > 0 */
    size_t len;
    size_t call_index;     /* TOOL_CALL, _BEGIN, TOOL_ARGS: 0, 1, 2... over the whole output */
    const char *name;      /* TOOL_CALL, _BEGIN: the function name, non-empty */
    const char *arguments; /* TOOL_CALL: a compact JSON object */
    size_t arguments_len;
    const char *id; /* TOOL_CALL: the id the model wrote (mistral), or NULL */
    bool streamed;  /* TOOL_CALL: a _BEGIN and TOOL_ARGS pieces (which concatenate to
                     * `arguments`) came before it */
};

/* The events of one feed or finish, in output order; adjacent text deltas
 * of one kind are already joined. */
struct hr_chat_events {
    const struct hr_chat_event *ev;
    size_t n;
};

struct hr_chat_parser;

/* HR_ERR_INVALID for a format out of range; HR_ERR_NOMEM. */
enum hr_status hr_chat_parser_init(const struct hr_chat_parse_opts *opts,
                                   struct hr_chat_parser **out, struct hr_err *err);

/*
 * Adds n bytes of output (any split: mid-character, mid-marker) and returns
 * the events they complete in *out. Fails only with HR_ERR_NOMEM (the
 * parser is then unusable) or HR_ERR_INVALID after finish.
 */
enum hr_status hr_chat_parser_feed(struct hr_chat_parser *p, const char *bytes, size_t n,
                                   struct hr_chat_events *out, struct hr_err *err);

/* The end of the output: emits everything still held. Feeding after it is
 * HR_ERR_INVALID; a second finish returns no events. */
enum hr_status hr_chat_parser_finish(struct hr_chat_parser *p, struct hr_chat_events *out,
                                     struct hr_err *err);

/* How many calls have been emitted so far. */
size_t hr_chat_parser_n_calls(const struct hr_chat_parser *p);

void hr_chat_parser_free(struct hr_chat_parser *p);

/*
 * Writes prefix followed by 24 random base-62 characters and a NUL into
 * out (cap bytes; truncated to fit), e.g. "toolu_" for Anthropic tool_use
 * ids and "call_" for OpenAI. Returns the length written.
 */
size_t hr_chat_call_id_make(char *out, size_t cap, const char *prefix, struct hr_rng *rng);

#endif
