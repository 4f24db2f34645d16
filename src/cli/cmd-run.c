/*
 * cmd-run.c - `headroom run`: one prompt through the engine, from the
 * command line. The smallest complete use of the engine: prefill in chunks,
 * then decode token by token with the sampler, printing as it goes.
 *
 * With --json it prints one object with the prompt and generated tokens,
 * per-token top-K log-probabilities and timings; --score instead returns the
 * log-probabilities after every prompt position (teacher forcing), which is
 * how tests compare us with llama.cpp.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/sys.h"
#include "base/log.h"
#include "base/file.h"
#include "cli/cli.h"
#include "engine/backend.h"
#include "kernels/matmul.h"
#include "mem/size.h"
#include "sample/sampler.h"
#include "tokenizer/tokenizer.h"

struct run_opts {
    const char *model;
    const char *tokens_arg;
    const char *prompt;
    const char *prompt_file;
    bool no_special;
    uint32_t n_predict;
    struct hr_sampler_params sp;
    int threads;
    bool json, score, ignore_eos;
    uint32_t logprobs;
    const char *logits_out;
    const char *memory_limit;
    float memory_soft, memory_hard;
    bool no_governor;
    bool admit_beyond_memory;
    bool kv_full_window;
    enum hr_ggml_type kv_type;
    uint32_t ctx;
    uint32_t batch;
    struct hr_device device;
    const char *device_arg;
    const char *vram_limit;
    uint64_t vram_limit_bytes;
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: headroom run --model FILE (-p TEXT | --prompt-file F | --tokens 1,2,3) "
            "[options]\n"
            "\n"
            "Runs one prompt through the engine and prints what the model generates.\n"
            "\n"
            "  --model FILE          GGUF model: llama, qwen2, qwen3, qwen3moe,\n"
            "                        qwen2moe, gpt-oss, qwen35, qwen35moe, qwen3next\n"
            "  -p, --prompt TEXT     the prompt; special-token text such as <|im_start|> is\n"
            "                        recognized, and BOS is added if the model asks for it\n"
            "  --prompt-file F       the prompt, read from a file\n"
            "  --no-special          treat special-token text in the prompt as plain text\n"
            "  --tokens LIST         the prompt as comma-separated token ids\n"
            "  -n, --n-predict N     tokens to generate (default 64)\n"
            "  --temp F              temperature; 0 is greedy (default 0.8)\n"
            "  --top-k N             (default 40; 0 off)\n"
            "  --top-p F             (default 0.95; 1 off)\n"
            "  --min-p F             (default 0.05; 0 off)\n"
            "  --repeat-penalty F    (default 1, off)\n"
            "  --presence-penalty F  (default 0)\n"
            "  --frequency-penalty F (default 0)\n"
            "  --repeat-last-n N     tokens the penalties look back over (default 64)\n"
            "  --seed N              sampling seed (default 0)\n"
            "  --ignore-eos          keep generating past end-of-generation tokens\n"
            "  --threads N           worker threads (default: physical cores)\n"
            "  --device DEV          cpu, cuda or cuda:N (default: cuda when this build has it,\n"
            "                        a GPU is present and it runs the model, else cpu)\n"
            "  --vram-limit SIZE     device-memory ceiling on a GPU (default: the device's\n"
            "                        total): the KV pool, then the prefill chunk, shrink to\n"
            "                        stay under it; with --no-governor fixed --batch chunks\n"
            "                        and the peak is reported against it\n"
            "  --ctx N               context to reserve (default: prompt + n, at most the\n"
            "                        model's trained context)\n"
            "  --batch N             prefill chunk size in tokens (default 512)\n"
            "  --cache-type T        KV cache type: f16 (default), f32, q8_0 or q4_0 (ggml's\n"
            "                        blocks, as llama.cpp's -ctk/-ctv; q8_0 is 53%% of f16's\n"
            "                        bytes, q4_0 28%%; both need a head dim that is a\n"
            "                        multiple of 32); --kv-type is the same flag\n"
            "  --no-kv-window        keep every position's KV on sliding-window layers\n"
            "                        (gpt-oss) instead of only their window: the same\n"
            "                        tokens, about twice the KV (for comparisons)\n"
            "  --memory-limit SIZE   run under the memory governor with this ceiling\n"
            "                        (12G, 512M, 80%% of RAM): the prompt is refused if it can\n"
            "                        never fit, prefill chunks (at most --batch) shrink to the\n"
            "                        headroom; chunk decisions are logged\n"
            "  --memory-soft F       soft watermark, a fraction of the ceiling (default 0.85)\n"
            "  --memory-hard F       hard watermark: chunks are sized to stay under it\n"
            "                        (default 0.95)\n"
            "  --no-governor         with --memory-limit: run with fixed --batch chunks and no\n"
            "                        admission anyway, and report the peak against the limit\n"
            "  --admit-beyond-memory TESTS ONLY, with --memory-limit: skip admission's memory\n"
            "                        check; a prompt that cannot complete under the ceiling\n"
            "                        exits 3 once its prefill has waited 1 s for memory\n"
            "  --json                print one JSON object instead of streaming text\n"
            "  --logprobs K          top-K log-probabilities per generated token (JSON)\n"
            "  --score               teacher-force the prompt and report top-K\n"
            "                        log-probabilities after every prompt position (JSON)\n"
            "  --logits-out FILE     with --score: also write every position's full logits\n"
            "                        to FILE as raw little-endian float32 rows of n_vocab\n"
            "                        (for comparing whole distributions with other engines)\n"
            "\n"
            "Timing goes to stderr: prompt and generation tokens/s, peak RSS; then\n"
            "\"kv: N bytes planned, M bytes used at most\": the step plans' KV against\n"
            "the pool's high-water mark (without --memory-limit).\n");
}

static int parse_tokens(const char *s, int32_t **out, uint32_t *n)
{
    uint32_t cap = 16, k = 0;
    int32_t *v = malloc(cap * sizeof(*v));
    if (!v)
        return -1;
    while (*s) {
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 0 || x > INT32_MAX) {
            free(v);
            return -1;
        }
        if (k == cap) {
            int32_t *nv = realloc(v, (cap *= 2) * sizeof(*v));
            if (!nv) {
                free(v);
                return -1;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        s = end;
        while (*s == ',' || *s == ' ')
            s++;
    }
    *out = v;
    *n = k;
    return 0;
}

static int append_text(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 256;
        while (c < *len + n + 1)
            c *= 2;
        char *b = realloc(*buf, c);
        if (!b)
            return -1;
        *buf = b;
        *cap = c;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = '\0';
    return 0;
}

static json_t *logprob_entry(const float *logits, uint32_t n_vocab, uint32_t k)
{
    int32_t ids[64];
    float lp[64];
    if (k > 64)
        k = 64;
    uint32_t n = hr_top_logprobs(logits, n_vocab, k, ids, lp);
    json_t *a = json_array();
    for (uint32_t i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:i,s:f}", "id", ids[i], "logprob", (double)lp[i]));
    return a;
}

static bool is_eog(const struct hr_model *m, int32_t tok)
{
    uint32_t id;
    static const char *keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                                 "tokenizer.ggml.eom_token_id"};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (hr_gguf_get_u32(m->gguf, keys[i], &id, NULL) == HR_OK && (int32_t)id == tok)
            return true;
    return false;
}

/* The prompt as token ids: --tokens as given, or text through the model's tokenizer. */
static int prompt_tokens(const struct run_opts *o, const struct hr_tokenizer *tok, int32_t **ids,
                         uint32_t *n)
{
    if (o->tokens_arg) {
        if (parse_tokens(o->tokens_arg, ids, n) != 0 || *n == 0) {
            fprintf(stderr, "headroom run: --tokens needs a comma-separated list of token ids\n");
            return 2;
        }
        return 0;
    }
    size_t len = 0;
    char *text = NULL;
    if (o->prompt_file) {
        text = hr_read_file(o->prompt_file, &len);
        if (!text) {
            fprintf(stderr, "headroom run: cannot read %s: %s\n", o->prompt_file, strerror(errno));
            return 1;
        }
    }
    struct hr_tokens t = {0};
    struct hr_err err = {{0}};
    unsigned flags = HR_TOK_ADD_SPECIAL | (o->no_special ? 0 : HR_TOK_PARSE_SPECIAL);
    enum hr_status st = hr_tokenizer_encode(tok, text ? text : o->prompt,
                                            text ? len : strlen(o->prompt), flags, &t, &err);
    free(text);
    if (st != HR_OK) {
        fprintf(stderr, "headroom run: cannot tokenize the prompt: %s\n", err.msg);
        hr_tokens_free(&t);
        return 1;
    }
    if (t.n == 0 || t.n > UINT32_MAX) {
        fprintf(stderr, "headroom run: the prompt is empty\n");
        hr_tokens_free(&t);
        return 1;
    }
    *ids = t.ids; /* ownership moves to the caller */
    *n = (uint32_t)t.n;
    return 0;
}

/* The KV the step's plan says the pool will hold while it runs (blocks in
 * use now plus the step's new ones), into *peak: what "kv: planned" prints. */
static void plan_kv(struct hr_backend *b, const struct hr_step *step, uint64_t *peak)
{
    struct hr_backend_plan p;
    hr_backend_plan(b, step, &p);
    const struct hr_kv_pool *pool = hr_backend_kv_pool(b);
    const uint64_t kv = (uint64_t)hr_kv_n_used(pool) * hr_kv_block_bytes(pool) + p.kv_bytes;
    if (kv > *peak)
        *peak = kv;
}

/* Device memory in use now (every process's; cudaMemGetInfo), into *peak. */
static void sample_device(struct hr_backend *b, uint64_t *peak)
{
    uint64_t fr, tot;
    if (hr_backend_device_mem_info(b, &fr, &tot) && tot - fr > *peak)
        *peak = tot - fr;
}

static int run(const struct run_opts *o)
{
    struct hr_err err = {{0}};
    int32_t *prompt = NULL;
    uint32_t n_prompt = 0;
    struct hr_model *model = NULL;
    /* a GPU takes the weights: no host copy (hr_model_open_opts.device) */
    const struct hr_model_open_opts mo = {.device = hr_device_tries_gpu(&o->device)};
    if (hr_model_open_ex(o->model, &mo, &model, &err) != HR_OK) {
        fprintf(stderr, "headroom run: %s\n", err.msg);
        return 1;
    }
    struct hr_tokenizer *tok = NULL;
    struct hr_detok *detok = NULL;
    if (hr_tokenizer_init_from_gguf(model->gguf, &tok, &err) != HR_OK) {
        if (!o->tokens_arg) {
            fprintf(stderr, "headroom run: %s: %s\n", o->model, err.msg);
            hr_model_close(model);
            return 1;
        }
        tok = NULL; /* token ids in and out still work without a vocabulary */
    }
    int prc = prompt_tokens(o, tok, &prompt, &n_prompt);
    if (prc != 0) {
        hr_tokenizer_free(tok);
        hr_model_close(model);
        return prc;
    }
    if (tok && hr_detok_init(tok, 0, &detok, &err) != HR_OK) {
        fprintf(stderr, "headroom run: %s\n", err.msg);
        hr_tokenizer_free(tok);
        hr_model_close(model);
        free(prompt);
        return 1;
    }
    const uint32_t n_vocab = model->hp.n_vocab;
    uint32_t n_predict = o->score ? 0 : o->n_predict;
    uint32_t ctx = o->ctx ? o->ctx : n_prompt + n_predict;
    if (model->hp.n_ctx_train && ctx > model->hp.n_ctx_train && !o->ctx)
        ctx = model->hp.n_ctx_train;
    if (n_prompt + n_predict > ctx) {
        if (n_prompt >= ctx) {
            fprintf(stderr, "headroom run: the prompt has %u tokens; the context holds %u\n",
                    n_prompt, ctx);
            hr_model_close(model);
            free(prompt);
            return 1;
        }
        n_predict = ctx - n_prompt;
    }
    uint32_t batch = o->batch ? o->batch : 512;
    if (o->memory_limit && !o->no_governor) {
        const struct hr_cli_governed_run g = {
            .model = model, .tok = tok, .prompt = prompt, .n_prompt = n_prompt,
            .n_predict = n_predict, .ctx = ctx, .batch = batch, .threads = o->threads,
            .kv_type = o->kv_type, .sampling = o->sp, .ignore_eos = o->ignore_eos,
            .json = o->json, .memory_limit = o->memory_limit,
            .soft_frac = o->memory_soft, .hard_frac = o->memory_hard,
            .admit_beyond_memory = o->admit_beyond_memory,
            .device = o->device, .vram_limit_bytes = o->vram_limit_bytes,
            .kv_full_window = o->kv_full_window};
        int grc = hr_cli_run_governed(&g);
        hr_detok_free(detok);
        hr_tokenizer_free(tok);
        hr_model_close(model);
        free(prompt);
        return grc;
    }
    struct hr_backend_config cfg = {
        .n_threads = o->threads,
        .kv_type = o->kv_type,
        .max_step_tokens = batch,
        .max_step_logits = o->score ? batch : 1,
        .max_step_seqs = 1,
        .max_seq_tokens = ctx,
        .device_limit_bytes = o->no_governor ? 0 : o->vram_limit_bytes,
        .kv_full_window = o->kv_full_window,
    };
    /* The whole context's blocks (sliding-window layers: their window's,
     * for steps of up to --batch tokens). */
    struct hr_kv_config kc;
    hr_engine_kv_config(model, o->kv_type, 0, o->kv_full_window, &kc);
    cfg.kv_budget_bytes = (uint64_t)hr_kv_config_blocks_for(&kc, ctx, batch) *
                          hr_kv_block_bytes_for(&kc);
    struct hr_backend *eng = NULL;
    struct hr_sampler *smp = NULL;
    struct hr_kv_seq seq = {0};
    json_t *out = NULL, *gen_lp = NULL, *prompt_lp = NULL, *gen = NULL;
    FILE *logits_f = NULL;
    char *text_buf = NULL;
    size_t text_len = 0, text_cap = 0;
    int rc = 1;
    if (hr_backend_init(model, &o->device, &cfg, &eng, &err) != HR_OK ||
        hr_backend_seq_init(eng, &seq, ctx, &err) != HR_OK ||
        hr_sampler_init(&o->sp, n_vocab, &smp, &err) != HR_OK) {
        fprintf(stderr, "headroom run: %s\n", err.msg);
        goto done;
    }
    const struct hr_backend_info *dev = hr_backend_info(eng);
    if (dev->kind != HR_DEVICE_CPU) {
        fprintf(stderr, "device %s: %s\n", dev->name, dev->description);
        /* A device ceiling may have sized the arena for smaller steps. */
        if (dev->max_step_tokens && dev->max_step_tokens < batch && !o->score)
            batch = dev->max_step_tokens;
    } else if (o->device_arg && dev->fallback[0]) {
        fprintf(stderr, "device cpu: CUDA not used: %s\n", dev->fallback);
    }
    uint64_t dev_peak = 0, kv_planned = 0;
    if (o->logits_out && !(logits_f = fopen(o->logits_out, "wb"))) {
        fprintf(stderr, "headroom run: cannot create %s: %s\n", o->logits_out, strerror(errno));
        goto done;
    }
    for (uint32_t i = 0; i < n_prompt; i++)
        hr_sampler_accept(smp, prompt[i]);
    if (o->json) {
        out = json_object();
        json_t *pt = json_array();
        for (uint32_t i = 0; i < n_prompt; i++)
            json_array_append_new(pt, json_integer(prompt[i]));
        json_object_set_new(out, "prompt_tokens", pt);
        gen = json_array();
        gen_lp = json_array();
        prompt_lp = json_array();
    }

    /* Prefill in chunks; logits for the last token (or every token when scoring). */
    double t0 = hr_now_seconds();
    int32_t next = -1;
    struct hr_cli_progress prog;
    hr_cli_progress_init(&prog, "prefill");
    for (uint32_t done_n = 0; done_n < n_prompt;) {
        uint32_t n = n_prompt - done_n < batch ? n_prompt - done_n : batch;
        bool last = done_n + n == n_prompt;
        struct hr_step_seq item = {.kv = &seq, .tokens = prompt + done_n, .n_tokens = n,
                                   .n_logits = o->score ? n : (last ? 1 : 0)};
        struct hr_step step = {.seqs = &item, .n_seqs = 1};
        plan_kv(eng, &step, &kv_planned);
        if (hr_backend_step(eng, &step, &err) != HR_OK) {
            fprintf(stderr, "headroom run: %s\n", err.msg);
            goto done;
        }
        sample_device(eng, &dev_peak);
        if (o->score)
            for (uint32_t j = 0; j < n; j++) {
                const float *lg = hr_backend_logits(eng, 0, j);
                json_array_append_new(prompt_lp,
                                      logprob_entry(lg, n_vocab, o->logprobs ? o->logprobs : 10));
                if (logits_f && fwrite(lg, sizeof(float), n_vocab, logits_f) != n_vocab) {
                    fprintf(stderr, "headroom run: cannot write %s: %s\n", o->logits_out,
                            strerror(errno));
                    goto done;
                }
            }
        if (last && n_predict > 0) {
            const float *lg = hr_backend_logits(eng, 0, 0);
            next = hr_sampler_sample(smp, lg);
            if (gen_lp && o->logprobs)
                json_array_append_new(gen_lp, logprob_entry(lg, n_vocab, o->logprobs));
        }
        done_n += n;
        hr_cli_progress_update(&prog, done_n, n_prompt);
    }
    hr_cli_progress_end(&prog);
    double t1 = hr_now_seconds();

    uint32_t n_gen = 0;
    while (n_gen < n_predict && next >= 0) {
        n_gen++;
        hr_sampler_accept(smp, next);
        bool eog = tok ? hr_tokenizer_is_eog(tok, next) : is_eog(model, next);
        if (gen)
            json_array_append_new(gen, json_integer(next));
        if (detok) {
            const char *piece;
            size_t plen;
            if (hr_detok_push(detok, next, &piece, &plen, &err) == HR_OK && plen) {
                if (gen) {
                    if (append_text(&text_buf, &text_len, &text_cap, piece, plen) != 0)
                        goto done;
                } else {
                    fwrite(piece, 1, plen, stdout);
                }
            }
        } else if (!gen) {
            printf("%d%s", next, n_gen < n_predict ? " " : "");
        }
        fflush(stdout);
        if (!o->ignore_eos && eog)
            break;
        if (n_gen == n_predict)
            break;
        struct hr_step_seq item = {.kv = &seq, .tokens = &next, .n_tokens = 1, .n_logits = 1};
        struct hr_step step = {.seqs = &item, .n_seqs = 1};
        plan_kv(eng, &step, &kv_planned);
        if (hr_backend_step(eng, &step, &err) != HR_OK) {
            fprintf(stderr, "headroom run: %s\n", err.msg);
            goto done;
        }
        sample_device(eng, &dev_peak);
        const float *lg = hr_backend_logits(eng, 0, 0);
        next = hr_sampler_sample(smp, lg);
        if (gen_lp && o->logprobs)
            json_array_append_new(gen_lp, logprob_entry(lg, n_vocab, o->logprobs));
    }
    if (detok) {
        const char *piece;
        size_t plen;
        if (hr_detok_finish(detok, &piece, &plen, &err) == HR_OK && plen) {
            if (gen) {
                if (append_text(&text_buf, &text_len, &text_cap, piece, plen) != 0)
                    goto done;
            } else {
                fwrite(piece, 1, plen, stdout);
            }
        }
    }
    double t2 = hr_now_seconds();
    double pp = (t1 - t0) > 0 ? n_prompt / (t1 - t0) : 0, tg = (t2 - t1) > 0 ? n_gen / (t2 - t1) : 0;
    uint64_t rss = hr_peak_rss_bytes();
    char b1[32];
    if (out) {
        json_object_set_new(out, "tokens", gen);
        gen = NULL;
        json_object_set_new(out, "text", json_stringn(text_buf ? text_buf : "", text_len));
        json_object_set_new(out, "logprobs", gen_lp);
        gen_lp = NULL;
        if (o->score) {
            json_object_set_new(out, "prompt_logprobs", prompt_lp);
            prompt_lp = NULL;
        }
        json_object_set_new(out, "timings",
                            json_pack("{s:f,s:f,s:I}", "prompt_tokens_per_second", pp,
                                      "generated_tokens_per_second", tg, "peak_rss_bytes",
                                      (json_int_t)rss));
        char *text = json_dumps(out, JSON_COMPACT);
        if (text) {
            printf("%s\n", text);
            free(text);
        }
    } else {
        printf("\n");
    }
    fflush(stdout); /* the timing line on stderr comes after the text */
    if (dev->kind == HR_DEVICE_CPU)
        fprintf(stderr, "prompt %u tokens, %.1f tokens/s; generated %u tokens, %.1f tokens/s; "
                        "peak RSS %s (%d threads, %s, KV %s)\n",
                n_prompt, pp, n_gen, tg, hr_cli_fmt_bytes((double)rss, b1, sizeof(b1)),
                dev->n_threads, hr_kernels_isa(), hr_kv_type_name(o->kv_type));
    else {
        char b2[32], b3[32];
        fprintf(stderr, "prompt %u tokens, %.1f tokens/s; generated %u tokens, %.1f tokens/s; "
                        "peak RSS %s; device %s peak %s of %s (%u-token chunks, KV %s)\n",
                n_prompt, pp, n_gen, tg, hr_cli_fmt_bytes((double)rss, b1, sizeof(b1)),
                dev->name, hr_cli_fmt_bytes((double)dev_peak, b2, sizeof(b2)),
                o->vram_limit ? o->vram_limit : "the device",
                batch, hr_kv_type_name(o->kv_type));
        if (o->vram_limit_bytes)
            fprintf(stderr, "device memory (%s): peak %s, limit %s: %s\n",
                    o->no_governor ? "no governor" : "governed",
                    hr_cli_fmt_bytes((double)dev_peak, b2, sizeof(b2)),
                    hr_cli_fmt_bytes((double)o->vram_limit_bytes, b3, sizeof(b3)),
                    dev_peak > o->vram_limit_bytes ? "CROSSED" : "below");
    }
    {
        /* The plan's KV against the pool's high-water mark: equal when the
         * plan is exact (tests/cli/window.sh reads this line). */
        const struct hr_kv_pool *pool = hr_backend_kv_pool(eng);
        const uint64_t bb = hr_kv_block_bytes(pool);
        fprintf(stderr, "kv: %llu bytes planned, %llu bytes used at most (blocks of %llu bytes, "
                        "window %u)\n",
                (unsigned long long)kv_planned,
                (unsigned long long)hr_kv_n_used_peak(pool) * bb, (unsigned long long)bb,
                hr_kv_window(pool));
    }
    if (o->memory_limit)
        hr_cli_report_limit(o->memory_limit, rss);
    rc = 0;
done:
    if (logits_f && fclose(logits_f) != 0 && rc == 0) {
        fprintf(stderr, "headroom run: cannot write %s: %s\n", o->logits_out, strerror(errno));
        rc = 1;
    }
    json_decref(out);
    json_decref(gen);
    json_decref(gen_lp);
    json_decref(prompt_lp);
    hr_sampler_free(smp);
    free(text_buf);
    hr_detok_free(detok);
    hr_tokenizer_free(tok);
    if (eng)
        hr_backend_seq_free(eng, &seq);
    hr_backend_free(eng);
    hr_model_close(model);
    free(prompt);
    return rc;
}

static int parse_float(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (end == s || *end || errno)
        return -1;
    *out = v;
    return 0;
}

static int parse_uint(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (end == s || *end || errno || v > UINT32_MAX || s[0] == '-')
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int hr_cmd_run(int argc, char **argv)
{
    struct run_opts o = {.n_predict = 64, .sp = hr_sampler_defaults(), .kv_type = HR_GGML_F16};
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t u;
        int bad = 0;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            o.json = true;
            continue;
        } else if (strcmp(a, "--score") == 0) {
            o.score = true;
            o.json = true;
            continue;
        } else if (strcmp(a, "--ignore-eos") == 0) {
            o.ignore_eos = true;
            continue;
        } else if (strcmp(a, "--no-kv-window") == 0) {
            o.kv_full_window = true;
            continue;
        } else if (strcmp(a, "--no-special") == 0) {
            o.no_special = true;
            continue;
        } else if (strcmp(a, "--no-governor") == 0) {
            o.no_governor = true;
            continue;
        } else if (strcmp(a, "--admit-beyond-memory") == 0) {
            o.admit_beyond_memory = true;
            continue;
        }
        if (!v) {
            fprintf(stderr, "headroom run: unknown option or missing value: %s\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--model") == 0 || strcmp(a, "-m") == 0)
            o.model = v;
        else if (strcmp(a, "--tokens") == 0)
            o.tokens_arg = v;
        else if (strcmp(a, "-p") == 0 || strcmp(a, "--prompt") == 0)
            o.prompt = v;
        else if (strcmp(a, "--prompt-file") == 0 || strcmp(a, "-f") == 0)
            o.prompt_file = v;
        else if (strcmp(a, "-n") == 0 || strcmp(a, "--n-predict") == 0)
            bad = parse_uint(v, &o.n_predict);
        else if (strcmp(a, "--temp") == 0)
            bad = parse_float(v, &o.sp.temperature);
        else if (strcmp(a, "--top-k") == 0)
            bad = parse_uint(v, &u), o.sp.top_k = (int32_t)u;
        else if (strcmp(a, "--top-p") == 0)
            bad = parse_float(v, &o.sp.top_p);
        else if (strcmp(a, "--min-p") == 0)
            bad = parse_float(v, &o.sp.min_p);
        else if (strcmp(a, "--repeat-penalty") == 0)
            bad = parse_float(v, &o.sp.repeat_penalty);
        else if (strcmp(a, "--presence-penalty") == 0)
            bad = parse_float(v, &o.sp.presence_penalty);
        else if (strcmp(a, "--frequency-penalty") == 0)
            bad = parse_float(v, &o.sp.frequency_penalty);
        else if (strcmp(a, "--repeat-last-n") == 0)
            bad = parse_uint(v, &u), o.sp.penalty_last_n = (int32_t)u;
        else if (strcmp(a, "--seed") == 0)
            o.sp.seed = strtoull(v, NULL, 10);
        else if (strcmp(a, "--threads") == 0 || strcmp(a, "-t") == 0)
            bad = parse_uint(v, &u), o.threads = (int)u;
        else if (strcmp(a, "--ctx") == 0)
            bad = parse_uint(v, &o.ctx);
        else if (strcmp(a, "--batch") == 0)
            bad = parse_uint(v, &o.batch) || o.batch == 0;
        else if (strcmp(a, "--logprobs") == 0)
            bad = parse_uint(v, &o.logprobs);
        else if (strcmp(a, "--logits-out") == 0)
            o.logits_out = v;
        else if (strcmp(a, "--memory-limit") == 0)
            o.memory_limit = v;
        else if (strcmp(a, "--device") == 0) {
            struct hr_err derr = {{0}};
            if (hr_device_parse(v, &o.device, &derr) != HR_OK) {
                fprintf(stderr, "headroom run: %s\n", derr.msg);
                return 2;
            }
            o.device_arg = v;
        } else if (strcmp(a, "--vram-limit") == 0) {
            struct hr_err verr = {{0}};
            o.vram_limit = v;
            if (hr_mem_parse_size(v, 0, &o.vram_limit_bytes, &verr) != HR_OK ||
                !o.vram_limit_bytes) {
                fprintf(stderr, "headroom run: --vram-limit: %s\n",
                        verr.msg[0] ? verr.msg : "must be above zero");
                return 2;
            }
        }
        else if (strcmp(a, "--memory-soft") == 0)
            bad = parse_float(v, &o.memory_soft) || !(o.memory_soft > 0 && o.memory_soft <= 1);
        else if (strcmp(a, "--memory-hard") == 0)
            bad = parse_float(v, &o.memory_hard) || !(o.memory_hard > 0 && o.memory_hard <= 1);
        else if (strcmp(a, "--cache-type") == 0 || strcmp(a, "--kv-type") == 0) {
            struct hr_err terr = {{0}};
            if (hr_kv_type_parse(v, &o.kv_type, &terr) != HR_OK) {
                fprintf(stderr, "headroom run: %s: %s\n", a, terr.msg);
                return 2;
            }
        } else {
            fprintf(stderr, "headroom run: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (bad) {
            fprintf(stderr, "headroom run: bad value for %s: '%s'\n", a, v);
            return 2;
        }
    }
    if (!o.model) {
        fprintf(stderr, "headroom run: --model FILE is required\n");
        usage(stderr);
        return 2;
    }
    int n_sources = (o.tokens_arg != NULL) + (o.prompt != NULL) + (o.prompt_file != NULL);
    if (n_sources != 1) {
        fprintf(stderr, "headroom run: give the prompt once: -p TEXT, --prompt-file F or "
                        "--tokens LIST\n");
        return 2;
    }
    if (o.memory_limit && !o.no_governor && (o.score || o.logprobs)) {
        fprintf(stderr, "headroom run: --memory-limit does not combine with --score or --logprobs\n");
        return 2;
    }
    if (o.memory_limit && !o.no_governor && o.kv_type == HR_GGML_F32) {
        /* The scheduler behind the governed path takes 0 (F32) as its f16 default. */
        fprintf(stderr, "headroom run: --cache-type f32 does not combine with --memory-limit "
                        "(f16, q8_0 or q4_0 do)\n");
        return 2;
    }
    if (o.logits_out && !o.score) {
        fprintf(stderr, "headroom run: --logits-out needs --score\n");
        return 2;
    }
    return run(&o);
}
