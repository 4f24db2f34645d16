/*
 * fuzz-jinja.c - libFuzzer target for the Jinja engine (src/chat/jinja*).
 *
 * An input is a template and a context: the bytes before the first NUL
 * are the template source, the bytes after it a JSON object whose keys
 * become the template's variables (when they do not parse as a JSON
 * object, a fixed chat context is used instead: messages with tool calls,
 * tools, add_generation_prompt, bos/eos). Each input is parsed and, if it
 * parses, rendered under tight bounds so hostile inputs stay fast.
 *
 * Checked (abort() on failure, besides ASan/UBSan): parse and render
 * return HR_OK or a negative status, never crash or hang; on success the
 * output exists and is within the output bound; on failure there is no
 * output and the message names the template line ("line N: ...") unless
 * memory ran out.
 *
 * Built with -fsanitize=fuzzer in the fuzz preset; otherwise linked with
 * replay-main.c so `make test` replays tests/fuzz/corpus/jinja/ and every
 * kept input in tests/fuzz/crashes/jinja/.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        abort();
}

static const char g_chat_context[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in Paris? \\u00e9\\ud83e\\udd99\"},"
    "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c1\","
    "\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    "\"arguments\": {\"city\": \"Paris\", \"days\": 2}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"18C\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>\\nok\\n</think>\\n\\n18 degrees.\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks\"}]}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    "\"description\": \"Weather\", \"parameters\": {\"type\": \"object\", \"properties\":"
    "{\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}},"
    "\"required\": [\"city\"]}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    "\"enable_thinking\": false, \"n\": 3, \"f\": 2.5}";

static json_t *g_default_ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_default_ctx)
        g_default_ctx = json_loads(g_chat_context, 0, NULL);
    check(g_default_ctx != NULL);
    const uint8_t *sep = memchr(data, 0, size);
    size_t tlen = sep ? (size_t)(sep - data) : size;
    json_t *ctx = NULL;
    if (sep) {
        ctx = json_loadb((const char *)sep + 1, size - tlen - 1, 0, NULL);
        if (ctx && !json_is_object(ctx)) {
            json_decref(ctx);
            ctx = NULL;
        }
    }
    const struct hr_jinja_limits lim = {
        .max_depth = 100,
        .max_call_depth = 32,
        .max_iterations = 20000,
        .max_output_bytes = 1 << 20,
        .max_memory_bytes = 64 << 20,
        .max_ms = 500,
    };
    struct hr_jinja_template *t = NULL;
    struct hr_err err = {{0}};
    enum hr_status st = hr_jinja_parse((const char *)data, tlen, &lim, &t, &err);
    check(st <= 0);
    if (st != HR_OK) {
        check(t == NULL);
        check(strncmp(err.msg, "line ", 5) == 0 || st == HR_ERR_NOMEM);
    } else {
        char *out = NULL, *raised = NULL;
        size_t n = 0;
        memset(&err, 0, sizeof(err));
        st = hr_jinja_render(t, ctx ? ctx : g_default_ctx, &lim, &out, &n, &raised, &err);
        check(st <= 0);
        if (st == HR_OK) {
            check(out != NULL && n <= lim.max_output_bytes && out[n] == '\0');
            check(raised == NULL);
        } else {
            check(out == NULL);
            check(strncmp(err.msg, "line ", 5) == 0 || st == HR_ERR_NOMEM);
        }
        free(out);
        free(raised);
    }
    hr_jinja_template_free(t);
    json_decref(ctx);
    return 0;
}
