/*
 * cli.h - the `headroom` subcommands. main.c dispatches on argv[1]; each
 * cmd_* takes the arguments after the subcommand name and returns the
 * process exit code (0 ok, 1 failure, 2 usage error).
 */
#ifndef HR_CLI_CLI_H
#define HR_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/backend.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

int hr_cmd_info(int argc, char **argv);
int hr_cmd_tokenize(int argc, char **argv);
int hr_cmd_run(int argc, char **argv);
int hr_cmd_template(int argc, char **argv);
int hr_cmd_serve(int argc, char **argv);

/* "1.5 GiB", "512.0 KiB" ... into buf. */
const char *hr_cli_fmt_bytes(double bytes, char *buf, unsigned size);


/* `headroom run --memory-limit`: one request through the scheduler and the
 * memory governor (run-governed.c). Borrows everything; returns the exit code. */
struct hr_cli_governed_run {
    const struct hr_model *model;
    const struct hr_tokenizer *tok; /* may be NULL (--tokens without a vocabulary) */
    const int32_t *prompt;
    uint32_t n_prompt, n_predict, ctx, batch;
    int threads;
    enum hr_ggml_type kv_type;
    struct hr_sampler_params sampling;
    bool ignore_eos, json;
    const char *memory_limit;
    double soft_frac, hard_frac; /* watermarks; 0: the governor's defaults */
    bool admit_beyond_memory;    /* tests: skip admission by memory, exit 3 when stuck */
    struct hr_device device;     /* --device (engine/backend.h) */
    uint64_t vram_limit_bytes;   /* --vram-limit; 0: the device's total */
    bool kv_full_window;         /* --no-kv-window */
};
int hr_cli_run_governed(const struct hr_cli_governed_run *g);

/* Progress of long work on stderr, one line redrawn in place, only when
 * stderr is a terminal (progress.c): `prefill 2048 / 8000 tokens (25%),
 * 310 tokens/s, memory 1.2 GiB`. Updates with done >= total draw nothing;
 * end erases the line. One thread at a time. */
struct hr_cli_progress {
    const char *what;
    bool tty, shown;
    double t0, t_last;
};
void hr_cli_progress_init(struct hr_cli_progress *p, const char *what);
void hr_cli_progress_update(struct hr_cli_progress *p, uint64_t done, uint64_t total);
void hr_cli_progress_end(struct hr_cli_progress *p);

/* With --no-governor: one stderr line comparing the peak RSS with the limit. */
void hr_cli_report_limit(const char *memory_limit, uint64_t peak_rss_bytes);

#endif
