/*
 * main.c - the `headroom` executable: one binary, one subcommand per file
 * (cmd-<name>.c). This file only dispatches and prints help.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "cli/cli.h"

#define HR_VERSION "0.1.0"

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
};

static const struct command g_commands[] = {
    {"info", hr_cmd_info, "describe a GGUF model: architecture, shape, tokenizer, tensors"},
    {"tokenize", hr_cmd_tokenize, "text to token ids with the model's tokenizer (as llama.cpp)"},
    {"run", hr_cmd_run, "run one prompt through the engine and print what it generates"},
    {"template", hr_cmd_template, "render a chat request with the model's chat template"},
    {"serve", hr_cmd_serve, "serve the model over the Anthropic and OpenAI HTTP APIs"},
};

static void usage(FILE *f)
{
    fprintf(f, "headroom %s - an LLM inference server whose memory never kills a request\n\n"
               "usage: headroom <command> [options]\n\ncommands:\n",
            HR_VERSION);
    for (size_t i = 0; i < sizeof(g_commands) / sizeof(g_commands[0]); i++)
        fprintf(f, "  %-10s %s\n", g_commands[i].name, g_commands[i].summary);
    fprintf(f, "  %-10s %s\n", "version", "print the version");
    fprintf(f, "\nRun `headroom <command> --help` for a command's options.\n"
               "Environment: HEADROOM_LOG_LEVEL=debug|info|warn|error (default info).\n");
}

int main(int argc, char **argv)
{
    const char *lvl = getenv("HEADROOM_LOG_LEVEL");
    if (lvl) {
        int l = hr_log_parse_level(lvl);
        if (l < 0) {
            fprintf(stderr, "headroom: HEADROOM_LOG_LEVEL must be debug, info, warn or error\n");
            return 2;
        }
        hr_log_set_level((enum hr_log_level)l);
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "version") == 0 || strcmp(argv[1], "--version") == 0) {
        printf("headroom %s\n", HR_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof(g_commands) / sizeof(g_commands[0]); i++)
        if (strcmp(argv[1], g_commands[i].name) == 0)
            return g_commands[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "headroom: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
