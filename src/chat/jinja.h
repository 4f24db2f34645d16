/*
 * jinja.h - a Jinja2 template engine that renders chat templates exactly as
 * Python's Jinja2 does in Hugging Face's environment.
 *
 * Models ship their prompt format as a Jinja2 program (the GGUF key
 * `tokenizer.chat_template`). The weights were trained on what Python's
 * Jinja2 3.x prints for it, so every byte matters: a space or newline that
 * differs changes the tokens and degrades the model. This engine therefore
 * follows Python's semantics, not a "Jinja-like" dialect: Python's str() of
 * values (`True`, `None`, `1.0`, `1e-05`, `['a', 1]`), Python's integer
 * division and modulo, string escapes as Python decodes them, dictionaries in
 * insertion order, and the environment transformers builds in
 * `_compile_jinja_template`: an ImmutableSandboxedEnvironment with
 * `trim_blocks` and `lstrip_blocks` on, the loop-controls extension
 * (`break`, `continue`), a `{% generation %}` block that renders its body, a
 * `tojson` filter that is json.dumps with `ensure_ascii=False`, and the
 * globals `raise_exception` and `strftime_now`. tests/oracle/templates.test.mjs
 * compares the output with Python's byte for byte.
 *
 * What is supported: if/elif/else, for (loop.index, index0, revindex,
 * revindex0, first, last, length, previtem, nextitem, cycle; `else`;
 * `for x in xs if cond`; tuple targets; break/continue), set (also block set
 * and namespace attributes), macro and call (caller()), filter blocks,
 * whitespace control, comments, raw. Expressions, filters, tests and methods
 * are listed in jinja-filters.c and jinja-methods.c. Not supported: template
 * inheritance and inclusion (extends, block, include, import: there is no
 * loader, as in transformers), recursive loops, autoescaping.
 *
 * Sandbox. A template cannot reach files, the environment or the process:
 * it sees only the context it is given. Lists and dictionaries are
 * immutable as in ImmutableSandboxedEnvironment (`xs.append(1)` fails as it
 * does there). Every render is bounded by `struct hr_jinja_limits`: nesting
 * depth while parsing, macro call depth, loop iterations, output bytes,
 * memory for intermediate values, and wall time. A template that hits a
 * bound stops with HR_ERR_LIMIT and a message naming the template line.
 *
 * Errors. Parsing and rendering never abort on input. Failures come back as
 * a status plus one sentence in `struct hr_err` that starts with the
 * template line: "line 3: expected 'endfor', got end of template".
 * `raise_exception(msg)` gives HR_ERR_INVALID with "line N: msg"; the
 * message after the line prefix is exactly the one Python would raise, and
 * hr_jinja_render also returns it alone through `raised` so callers can
 * show it verbatim.
 *
 * Threads. A parsed template is immutable: any number of threads may
 * render it at once. Each render allocates its own arena and frees it
 * before returning.
 *
 *     struct hr_jinja_template *t;
 *     if (hr_jinja_parse(src, len, NULL, &t, &err) != HR_OK) ...
 *     char *out; size_t n;
 *     if (hr_jinja_render(t, context_json, NULL, &out, &n, NULL, &err) != HR_OK) ...
 *     fwrite(out, 1, n, stdout);
 *     free(out);
 *     hr_jinja_template_free(t);
 */
#ifndef HR_CHAT_JINJA_H
#define HR_CHAT_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/*
 * Bounds on one parse or render. A zero field means "the default" (in
 * parentheses). The defaults are far above what real chat templates need
 * (they nest a few levels, loop once per message, call macros a few levels
 * deep) and far below what would hurt a server.
 */
struct hr_jinja_limits {
    uint32_t max_depth;            /* nesting of blocks and expressions while parsing (100) */
    uint32_t max_call_depth;       /* macro calls in progress at once (64) */
    uint64_t max_iterations;       /* loop iterations plus macro calls per render (10^7) */
    size_t max_output_bytes;       /* rendered text (64 MiB) */
    size_t max_memory_bytes;       /* intermediate values of one render (512 MiB) */
    uint32_t max_ms;               /* wall time of one render (2000 ms) */
};

struct hr_jinja_template; /* opaque, immutable once parsed */

/*
 * Parses template source src[0..len) (UTF-8; need not be NUL-terminated).
 * On success *out owns the template; `src` may be freed right after.
 * `limits` may be NULL (defaults). Errors: HR_ERR_INVALID (syntax; `err`
 * says "line N: ..." and what was expected), HR_ERR_LIMIT (nesting deeper
 * than max_depth), HR_ERR_NOMEM.
 */
enum hr_status hr_jinja_parse(const char *src, size_t len, const struct hr_jinja_limits *limits,
                              struct hr_jinja_template **out, struct hr_err *err);

void hr_jinja_template_free(struct hr_jinja_template *t); /* accepts NULL */

/*
 * Renders `t` with the variables of `context` (a JSON object: its keys are
 * the template's globals; NULL means none). JSON integers become Python
 * ints, reals Python floats, arrays lists, objects dicts in key order.
 * On success *out is a malloc'd NUL-terminated string the caller frees and
 * *out_len its length without the NUL (the text may contain NUL bytes if
 * the context does). `limits` may be NULL (defaults).
 * `raised`, when not NULL, receives the bare message of a
 * raise_exception() call (malloc'd, caller frees) and NULL otherwise.
 * Errors: HR_ERR_INVALID (raise_exception, undefined values used, type
 * errors: "line N: ..."), HR_ERR_LIMIT (a bound of `limits`),
 * HR_ERR_TYPE (context is not an object), HR_ERR_NOMEM. On error *out is
 * NULL.
 */
enum hr_status hr_jinja_render(const struct hr_jinja_template *t, const json_t *context,
                               const struct hr_jinja_limits *limits, char **out, size_t *out_len,
                               char **raised, struct hr_err *err);

#endif
