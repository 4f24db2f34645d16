/*
 * cmd-tokenize.c - `headroom tokenize`: text to token ids with a model's
 * own tokenizer (src/tokenizer), the same ids llama.cpp produces.
 *
 * Three inputs: the TEXT argument, a file (--file), or a JSON array of
 * strings (--batch, one result line per string; the oracle tests use it
 * to tokenize hundreds of strings in one process). Tokens print as ids on
 * one line, or with --json as {"tokens":[...],"pieces":[...]}; pieces are
 * the decoded bytes of each token, with U+FFFD where a token holds only
 * part of a UTF-8 character. --vocab prints the vocabulary's special ids
 * and every token decoded alone instead (also for the oracle tests).
 */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: headroom tokenize --model FILE [options] TEXT\n"
            "       headroom tokenize --model FILE [options] --file F\n"
            "       headroom tokenize --model FILE [options] --batch STRINGS.json\n"
            "       headroom tokenize --model FILE --vocab\n\n"
            "Tokenizes text with the model's vocabulary exactly as llama.cpp does and prints\n"
            "the token ids. BOS/EOS are added as the model's metadata says.\n\n"
            "  --model FILE       the GGUF model (a vocabulary-only GGUF works too)\n"
            "  --special          match control tokens (\"<|im_start|>\") inside the text, as\n"
            "                     for a rendered chat template; without it they are plain text\n"
            "  --no-add-special   do not add BOS/EOS\n"
            "  --json             print {\"tokens\":[...],\"pieces\":[...]}\n"
            "  --file F           tokenize the contents of F (\"-\" for standard input)\n"
            "  --batch F          F is a JSON array of strings; print one JSON object per\n"
            "                     string: {\"tokens\":[...],\"text\":D,\"stream\":S} where D is\n"
            "                     the tokens decoded at once and S decoded one token at a time\n"
            "                     by the streaming detokenizer (control tokens as text)\n"
            "  --vocab            print the vocabulary instead: special token ids, flags, the\n"
            "                     end-of-generation set and every token decoded on its own,\n"
            "                     as JSON (pieces[i] with control tokens as text, plain[i]\n"
            "                     without)\n\n"
            "example: headroom tokenize --model models/demo.gguf --special '<|im_start|>user'\n");
}

/* A JSON string of arbitrary bytes: invalid UTF-8 becomes U+FFFD. */
static json_t *json_bytes(const char *s, size_t n)
{
    char *clean;
    size_t clean_len;
    if (hr_utf8_sanitize(s, n, &clean, &clean_len, NULL) != HR_OK)
        return NULL;
    json_t *j = json_stringn(clean, clean_len);
    free(clean);
    return j;
}

static json_t *json_ids(const struct hr_tokens *t)
{
    json_t *a = json_array();
    for (size_t i = 0; i < t->n; i++)
        json_array_append_new(a, json_integer(t->ids[i]));
    return a;
}

/* Decodes ids one at a time through the streaming detokenizer. */
static enum hr_status stream_decode(const struct hr_tokenizer *tok, const struct hr_tokens *t,
                                    char **out, size_t *len, struct hr_err *err)
{
    struct hr_detok *d;
    enum hr_status st = hr_detok_init(tok, HR_DETOK_SPECIAL, &d, err);
    if (st != HR_OK)
        return st;
    size_t cap = 256, n = 0;
    char *buf = malloc(cap);
    for (size_t i = 0; i <= t->n && buf && st == HR_OK; i++) {
        const char *piece;
        size_t pl;
        st = i < t->n ? hr_detok_push(d, t->ids[i], &piece, &pl, err)
                      : hr_detok_finish(d, &piece, &pl, err);
        if (st != HR_OK)
            break;
        if (n + pl + 1 > cap) {
            while (n + pl + 1 > cap)
                cap *= 2;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
        }
        memcpy(buf + n, piece, pl);
        n += pl;
    }
    hr_detok_free(d);
    if (!buf && st == HR_OK)
        st = hr_err_set(err, HR_ERR_NOMEM, "out of memory");
    if (st != HR_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *len = n;
    return HR_OK;
}

static int run_batch(const struct hr_tokenizer *tok, const char *path, unsigned flags)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_ALLOW_NUL, &jerr);
    if (!root) {
        fprintf(stderr, "headroom tokenize: %s:%d: %s\n", path, jerr.line, jerr.text);
        return 1;
    }
    if (!json_is_array(root)) {
        fprintf(stderr, "headroom tokenize: %s: expected a JSON array of strings\n", path);
        json_decref(root);
        return 1;
    }
    int rc = 0;
    for (size_t i = 0; i < json_array_size(root) && rc == 0; i++) {
        json_t *s = json_array_get(root, i);
        if (!json_is_string(s)) {
            fprintf(stderr, "headroom tokenize: %s: element %zu is not a string\n", path, i);
            rc = 1;
            break;
        }
        struct hr_err err = {{0}};
        struct hr_tokens t = {0};
        char *text = NULL, *streamed = NULL;
        size_t text_len = 0, stream_len = 0;
        json_t *o = json_object();
        if (hr_tokenizer_encode(tok, json_string_value(s), json_string_length(s), flags, &t,
                                &err) != HR_OK) {
            json_object_set_new(o, "error", json_string(err.msg));
        } else if (hr_tokenizer_decode(tok, t.ids, t.n, HR_DETOK_SPECIAL, &text, &text_len,
                                       &err) != HR_OK ||
                   stream_decode(tok, &t, &streamed, &stream_len, &err) != HR_OK) {
            fprintf(stderr, "headroom tokenize: %s\n", err.msg);
            rc = 1;
        } else {
            json_object_set_new(o, "tokens", json_ids(&t));
            json_object_set_new(o, "text", json_bytes(text, text_len));
            json_object_set_new(o, "stream", json_bytes(streamed, stream_len));
        }
        if (rc == 0) {
            char *line = json_dumps(o, JSON_COMPACT);
            if (line) {
                puts(line);
                free(line);
            }
        }
        json_decref(o);
        free(text);
        free(streamed);
        hr_tokens_free(&t);
    }
    json_decref(root);
    return rc;
}

static json_t *json_id(int32_t id)
{
    return id == HR_TOKEN_NULL ? json_null() : json_integer(id);
}

static int print_vocab(const struct hr_tokenizer *tok)
{
    json_t *o = json_object();
    json_object_set_new(o, "n_vocab", json_integer(hr_tokenizer_n_vocab(tok)));
    json_object_set_new(o, "model", json_string(hr_tokenizer_model(tok)));
    json_object_set_new(o, "pre", json_string(hr_tokenizer_pre(tok)));
    json_object_set_new(o, "bos", json_id(hr_tokenizer_bos(tok)));
    json_object_set_new(o, "eos", json_id(hr_tokenizer_eos(tok)));
    json_object_set_new(o, "eot", json_id(hr_tokenizer_eot(tok)));
    json_object_set_new(o, "eom", json_id(hr_tokenizer_eom(tok)));
    json_object_set_new(o, "unk", json_id(hr_tokenizer_unk(tok)));
    json_object_set_new(o, "sep", json_id(hr_tokenizer_sep(tok)));
    json_object_set_new(o, "pad", json_id(hr_tokenizer_pad(tok)));
    json_object_set_new(o, "nl", json_id(hr_tokenizer_nl(tok)));
    json_object_set_new(o, "add_bos", json_boolean(hr_tokenizer_add_bos(tok)));
    json_object_set_new(o, "add_eos", json_boolean(hr_tokenizer_add_eos(tok)));
    json_t *eog = json_array(), *pieces = json_array(), *plain = json_array();
    for (uint32_t id = 0; id < hr_tokenizer_n_vocab(tok); id++) {
        if (hr_tokenizer_is_eog(tok, (int32_t)id))
            json_array_append_new(eog, json_integer(id));
        for (int k = 0; k < 2; k++) {
            int32_t one = (int32_t)id;
            char *text;
            size_t n;
            if (hr_tokenizer_decode(tok, &one, 1, k ? 0 : HR_DETOK_SPECIAL, &text, &n, NULL) != HR_OK) {
                json_decref(o);
                json_decref(eog);
                json_decref(pieces);
                json_decref(plain);
                fprintf(stderr, "headroom tokenize: out of memory\n");
                return 1;
            }
            json_array_append_new(k ? plain : pieces, json_bytes(text, n));
            free(text);
        }
    }
    json_object_set_new(o, "eog", eog);
    json_object_set_new(o, "pieces", pieces);
    json_object_set_new(o, "plain", plain);
    int rc = json_dumpf(o, stdout, JSON_COMPACT) == 0 ? 0 : 1;
    putchar('\n');
    json_decref(o);
    return rc;
}

int hr_cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *file = NULL, *batch = NULL, *text = NULL;
    bool json = false, special = false, add_special = true, vocab = false;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--model") == 0 && i + 1 < argc) {
            model = argv[++i];
        } else if (strcmp(a, "--file") == 0 && i + 1 < argc) {
            file = argv[++i];
        } else if (strcmp(a, "--batch") == 0 && i + 1 < argc) {
            batch = argv[++i];
        } else if (strcmp(a, "--vocab") == 0) {
            vocab = true;
        } else if (strcmp(a, "--json") == 0) {
            json = true;
        } else if (strcmp(a, "--special") == 0) {
            special = true;
        } else if (strcmp(a, "--no-add-special") == 0) {
            add_special = false;
        } else if (strcmp(a, "--") == 0 && i + 1 < argc && !text) {
            text = argv[++i];
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "headroom tokenize: unknown option '%s'\n\n", a);
            usage(stderr);
            return 2;
        } else if (!text) {
            text = a;
        } else {
            fprintf(stderr, "headroom tokenize: one TEXT only (quote it)\n\n");
            usage(stderr);
            return 2;
        }
    }
    if (!model || (!!text + !!file + !!batch + vocab) != 1) {
        fprintf(stderr, "headroom tokenize: need --model and exactly one of TEXT, --file, --batch, --vocab\n\n");
        usage(stderr);
        return 2;
    }

    struct hr_err err = {{0}};
    struct hr_gguf *g = NULL;
    struct hr_tokenizer *tok = NULL;
    if (hr_gguf_open(model, &g, &err) != HR_OK ||
        hr_tokenizer_init_from_gguf(g, &tok, &err) != HR_OK) {
        fprintf(stderr, "headroom tokenize: %s: %s\n", model, err.msg);
        hr_gguf_close(g);
        return 1;
    }
    hr_gguf_close(g);
    unsigned flags = (special ? HR_TOK_PARSE_SPECIAL : 0) | (add_special ? HR_TOK_ADD_SPECIAL : 0);

    int rc = 0;
    if (vocab) {
        rc = print_vocab(tok);
        hr_tokenizer_free(tok);
        return rc;
    }
    if (batch) {
        rc = run_batch(tok, batch, flags);
        hr_tokenizer_free(tok);
        return rc;
    }
    size_t len = 0;
    char *owned = NULL;
    if (file) {
        owned = hr_read_file(file, &len);
        if (!owned) {
            fprintf(stderr, "headroom tokenize: cannot read '%s': %s\n", file, strerror(errno));
            hr_tokenizer_free(tok);
            return 1;
        }
        text = owned;
    } else {
        len = strlen(text);
    }
    struct hr_tokens t = {0};
    if (hr_tokenizer_encode(tok, text, len, flags, &t, &err) != HR_OK) {
        fprintf(stderr, "headroom tokenize: %s\n", err.msg);
        rc = 1;
    } else if (json) {
        json_t *o = json_object();
        json_t *pieces = json_array();
        for (size_t i = 0; i < t.n; i++) {
            size_t pl;
            const char *p = hr_tokenizer_piece(tok, t.ids[i], HR_DETOK_SPECIAL, &pl);
            json_array_append_new(pieces, json_bytes(p, pl));
        }
        json_object_set_new(o, "tokens", json_ids(&t));
        json_object_set_new(o, "pieces", pieces);
        char *line = json_dumps(o, JSON_COMPACT);
        if (line)
            puts(line);
        free(line);
        json_decref(o);
    } else {
        for (size_t i = 0; i < t.n; i++)
            printf(i ? " %d" : "%d", t.ids[i]);
        putchar('\n');
    }
    hr_tokens_free(&t);
    free(owned);
    hr_tokenizer_free(tok);
    return rc;
}
