/*
 * bench-tokenize.c - tokenization throughput on a text file.
 *
 *     bench-tokenize MODEL.gguf TEXT [--runs N] [--special]
 *
 * Loads the model's tokenizer, then tokenizes the whole text N times
 * (default 7; special-token parsing off unless --special, no BOS) and
 * prints one line per measure with the median of the runs:
 *
 *   bench tokenize impl=headroom vocab=F bytes=B tokens=T runs=N mb_per_s=M min=.. max=..
 *   bench detokenize impl=headroom vocab=F tokens=T runs=N mb_per_s=M
 *   bench tokenizer_load impl=headroom vocab=F ms=X
 *
 * MB is 10^6 bytes of input text (of output text for detokenize).
 * bench/tokenize-llama.mjs measures llama.cpp on the same file, and
 * bench/run.sh prints both side by side. Single-threaded, like llama.cpp's
 * llama_tokenize.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/file.h"
#include "base/sys.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "bench.h"

int main(int argc, char **argv)
{
    const char *model = NULL, *text_path = NULL;
    int runs = 7;
    unsigned flags = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
            runs = atoi(argv[++i]);
        else if (strcmp(argv[i], "--special") == 0)
            flags |= HR_TOK_PARSE_SPECIAL;
        else if (!model)
            model = argv[i];
        else if (!text_path)
            text_path = argv[i];
    }
    if (!model || !text_path || runs < 1 || runs > 1000) {
        fprintf(stderr, "usage: bench-tokenize MODEL.gguf TEXT [--runs N] [--special]\n");
        return 2;
    }
    size_t len;
    char *text = hr_read_file(text_path, &len);
    if (!text) {
        fprintf(stderr, "bench-tokenize: cannot read %s\n", text_path);
        return 1;
    }
    struct hr_err err = {{0}};
    struct hr_gguf *g = NULL;
    struct hr_tokenizer *tok = NULL;
    double t0 = hr_now_seconds();
    if (hr_gguf_open(model, &g, &err) != HR_OK ||
        hr_tokenizer_init_from_gguf(g, &tok, &err) != HR_OK) {
        fprintf(stderr, "bench-tokenize: %s: %s\n", model, err.msg);
        return 1;
    }
    double load_ms = (hr_now_seconds() - t0) * 1e3;
    hr_gguf_close(g);

    double *enc = malloc((size_t)runs * sizeof(double)), *dec = malloc((size_t)runs * sizeof(double));
    struct hr_tokens t = {0};
    size_t out_len = 0;
    for (int r = 0; r < runs; r++) {
        t.n = 0;
        double a = hr_now_seconds();
        if (hr_tokenizer_encode(tok, text, len, flags, &t, &err) != HR_OK) {
            fprintf(stderr, "bench-tokenize: %s\n", err.msg);
            return 1;
        }
        double b = hr_now_seconds();
        char *out;
        if (hr_tokenizer_decode(tok, t.ids, t.n, 0, &out, &out_len, &err) != HR_OK) {
            fprintf(stderr, "bench-tokenize: %s\n", err.msg);
            return 1;
        }
        double c = hr_now_seconds();
        free(out);
        enc[r] = (double)len / 1e6 / (b - a);
        dec[r] = (double)out_len / 1e6 / (c - b);
    }
    bench_sort(enc, (size_t)runs);
    bench_sort(dec, (size_t)runs);
    printf("bench tokenize impl=headroom vocab=%s bytes=%zu tokens=%zu runs=%d mb_per_s=%.2f "
           "min=%.2f max=%.2f\n",
           model, len, t.n, runs, enc[runs / 2], enc[0], enc[runs - 1]);
    printf("bench detokenize impl=headroom vocab=%s tokens=%zu runs=%d mb_per_s=%.2f\n", model, t.n,
           runs, dec[runs / 2]);
    printf("bench tokenizer_load impl=headroom vocab=%s ms=%.1f\n", model, load_ms);
    hr_tokens_free(&t);
    hr_tokenizer_free(tok);
    free(enc);
    free(dec);
    free(text);
    return 0;
}
