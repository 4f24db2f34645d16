/*
 * cmd-template.c - `headroom template`: renders a chat request with a
 * model's chat template (src/chat) and prints the prompt exactly, byte for
 * byte, with no newline added. For debugging prompts and for the oracle
 * test that compares our Jinja engine with Python's.
 *
 * Errors are one line on stderr and exit code 1 (a template that raises
 * prints its own message); usage errors exit 2.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat-render.h"
#include "base/file.h"
#include "cli/cli.h"
#include "gguf/gguf.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: headroom template --model FILE --messages M.json [options]\n"
            "       headroom template --template T.jinja --messages M.json [options]\n"
            "       headroom template --template T.jinja --context C.json\n\n"
            "Renders a chat request with the model's chat template (tokenizer.chat_template,\n"
            "or ChatML when the model has none) as Hugging Face transformers would, and\n"
            "prints the prompt exactly as rendered, without a trailing newline.\n\n"
            "  --model FILE        the GGUF model: its template and BOS/EOS token texts\n"
            "  --template T        use the Jinja template in file T instead of the model's\n"
            "  --bos TEXT          the bos_token the template sees (default: the model's)\n"
            "  --eos TEXT          the eos_token the template sees (default: the model's)\n"
            "  --messages M.json   a JSON array of messages (OpenAI chat format), or an\n"
            "                      object with \"messages\" and optionally \"tools\"\n"
            "  --tools T.json      a JSON array of tools (OpenAI or Anthropic form)\n"
            "  --kwargs K.json     a JSON object of extra template variables, e.g.\n"
            "                      {\"enable_thinking\": false}\n"
            "  --no-generation-prompt  render without add_generation_prompt\n"
            "  --print-context     print the JSON context the template would get, instead\n"
            "                      of rendering it\n"
            "  --context C.json    render with exactly this context object (no messages\n"
            "                      processing)\n\n"
            "example: headroom template --model models/demo.gguf --messages chat.json\n");
}

static json_t *load_json(const char *path, const char *what)
{
    size_t len;
    char *text = hr_read_file(path, &len);
    if (!text) {
        fprintf(stderr, "headroom template: cannot read %s %s\n", what, path);
        return NULL;
    }
    json_error_t jerr;
    json_t *j = json_loadb(text, len, JSON_ALLOW_NUL, &jerr);
    free(text);
    if (!j)
        fprintf(stderr, "headroom template: %s %s:%d: %s\n", what, path, jerr.line, jerr.text);
    return j;
}

int hr_cmd_template(int argc, char **argv)
{
    const char *model = NULL, *template_path = NULL, *bos = NULL, *eos = NULL;
    const char *messages_path = NULL, *tools_path = NULL, *kwargs_path = NULL,
               *context_path = NULL;
    bool gen_prompt = true, print_context = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char **slot = !strcmp(a, "--model")      ? &model
                            : !strcmp(a, "--template") ? &template_path
                            : !strcmp(a, "--bos")      ? &bos
                            : !strcmp(a, "--eos")      ? &eos
                            : !strcmp(a, "--messages") ? &messages_path
                            : !strcmp(a, "--tools")    ? &tools_path
                            : !strcmp(a, "--kwargs")   ? &kwargs_path
                            : !strcmp(a, "--context")  ? &context_path
                                                       : NULL;
        if (slot) {
            if (i + 1 >= argc) {
                fprintf(stderr, "headroom template: %s needs a value\n", a);
                return 2;
            }
            *slot = argv[++i];
        } else if (!strcmp(a, "--no-generation-prompt")) {
            gen_prompt = false;
        } else if (!strcmp(a, "--print-context")) {
            print_context = true;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "headroom template: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        }
    }
    if ((!model && !template_path) || (!messages_path && !context_path) ||
        (messages_path && context_path)) {
        usage(stderr);
        return 2;
    }

    struct hr_err err = {{0}};
    struct hr_chat_template *ct = NULL;
    struct hr_gguf *g = NULL;
    json_t *messages = NULL, *tools = NULL, *kwargs = NULL, *context = NULL, *mfile = NULL;
    char *out = NULL;
    size_t out_len = 0;
    int rc = 1;
    enum hr_status st = HR_OK;

    if (model && (st = hr_gguf_open(model, &g, &err)) != HR_OK) {
        fprintf(stderr, "headroom template: %s: %s\n", model, err.msg);
        goto done;
    }
    if (template_path) {
        size_t len;
        char *src = hr_read_file(template_path, &len);
        if (!src) {
            fprintf(stderr, "headroom template: cannot read template %s\n", template_path);
            goto done;
        }
        if (memchr(src, '\0', len)) {
            fprintf(stderr, "headroom template: %s holds a NUL byte\n", template_path);
            free(src);
            goto done;
        }
        char *nsrc = realloc(src, len + 1); /* read_file does not terminate */
        if (!nsrc) {
            free(src);
            fprintf(stderr, "headroom template: out of memory\n");
            goto done;
        }
        src = nsrc;
        src[len] = '\0';
        /* With a model and no --bos/--eos, the model's token texts. */
        if (g && !bos && !eos)
            st = hr_chat_template_init_from_gguf(g, src, &ct, &err);
        else
            st = hr_chat_template_init(src, bos, eos, &ct, &err);
        free(src);
    } else {
        if (bos || eos) {
            fprintf(stderr, "headroom template: --bos and --eos need --template\n");
            rc = 2;
            goto done;
        }
        st = hr_chat_template_init_from_gguf(g, NULL, &ct, &err);
    }
    if (st != HR_OK) {
        fprintf(stderr, "headroom template: %s\n", err.msg);
        goto done;
    }

    if (context_path) {
        if (!(context = load_json(context_path, "context")))
            goto done;
    } else {
        if (!(mfile = load_json(messages_path, "messages")))
            goto done;
        messages = json_is_object(mfile) ? json_object_get(mfile, "messages") : mfile;
        if (json_is_object(mfile))
            tools = json_incref(json_object_get(mfile, "tools"));
        if (tools_path) {
            json_decref(tools);
            if (!(tools = load_json(tools_path, "tools")))
                goto done;
        }
        if (kwargs_path && !(kwargs = load_json(kwargs_path, "kwargs")))
            goto done;
        struct hr_chat_request req = {.messages = messages, .tools = tools, .kwargs = kwargs,
                                      .add_generation_prompt = gen_prompt};
        if ((st = hr_chat_build_context(ct, &req, &context, &err)) != HR_OK) {
            fprintf(stderr, "headroom template: %s\n", err.msg);
            goto done;
        }
    }
    if (print_context) {
        char *s = json_dumps(context, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_ENSURE_ASCII);
        if (s)
            printf("%s\n", s);
        free(s);
        rc = s ? 0 : 1;
        goto done;
    }
    if ((st = hr_chat_render_context(ct, context, &out, &out_len, &err)) != HR_OK) {
        fprintf(stderr, "headroom template: %s\n", err.msg);
        goto done;
    }
    rc = fwrite(out, 1, out_len, stdout) == out_len && fflush(stdout) == 0 ? 0 : 1;

done:
    free(out);
    json_decref(context);
    json_decref(kwargs);
    json_decref(tools);
    json_decref(mfile);
    hr_chat_template_free(ct);
    hr_gguf_close(g);
    return rc;
}
