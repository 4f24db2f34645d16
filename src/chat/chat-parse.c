/*
 * chat-parse.c - the streaming output parser: a state machine over the
 * unconsumed bytes of the output (see the diagram in chat-parse.h).
 *
 * How streaming stays exact: the parser keeps every byte it has not yet
 * emitted in `buf[pos..len)` and, after each feed, runs the current state's
 * function on it until none can progress. A state function only decides
 * what the bytes it has prove: when the answer could still depend on bytes
 * not yet seen it returns "no progress" and waits, unless `final` says no
 * more will come. Every decision is therefore a function of the whole
 * output alone, which is why whole, byte-by-byte and chunked feeds give the
 * same result. The only other memory is a cursor per call state (how far
 * into the held region it has read, and the resumable JSON scanner), so
 * holding a long call costs O(1) per byte, not a rescan per feed.
 *
 * Offsets kept across feeds are relative to `pos`, the start of what is
 * held: in a call state `pos` is where the region (whitespace before the
 * marker, the marker, the call) begins, so degrading emits buf[pos..pos+keep)
 * as content and resumes after the marker.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat-parse-impl.h"
#include "chat/chat-parse.h"
#include "tokenizer/unicode.h"

enum pstate {
    ST_START,       /* at the start of output or after </think>: <think>, a JSON call, or content */
    ST_REASON_LEAD, /* just inside <think>: dropping whitespace */
    ST_REASON,      /* inside <think>: reasoning text until </think> */
    ST_SKIP_WS,     /* dropping whitespace, then on to `after_ws` */
    ST_CONTENT,     /* content text until the format's marker */
    ST_HERMES,      /* <tool_call> JSON </tool_call> */
    ST_LLAMA,       /* [<|python_tag|>] JSON */
    ST_LLAMA_SEP,   /* after a llama3 call: ';' and whitespace, maybe another '{' */
    ST_MISTRAL,     /* [TOOL_CALLS] then an array, an object, or name[ARGS]{...} */
    ST_GENERIC,     /* the whole output is one JSON object */
    ST_QWEN3_CODER, /* <tool_call> <function=f> <parameter=k> text </parameter>... */
    ST_H_HEAD,      /* harmony: a message header up to <|message|> */
    ST_H_TEXT,      /* harmony: an analysis (reasoning) or final/commentary (content) body */
    ST_H_CALL,      /* harmony: a call's JSON arguments up to <|call|> or <|end|> */
};

/* The result of reading one piece of a call region. */
enum sub { SUB_NEED, SUB_FAIL, SUB_OK };

static const char M_THINK[] = "<think>", M_THINK_END[] = "</think>";
static const char M_HERMES[] = "<tool_call>", M_HERMES_END[] = "</tool_call>";
static const char M_PYTHON[] = "<|python_tag|>", M_MISTRAL[] = "[TOOL_CALLS]";
static const char M_ARGS[] = "[ARGS]", M_CALL_ID[] = "[CALL_ID]";
static const char M_FUNCTION[] = "<function=", M_FUNCTION_END[] = "</function>";
static const char M_PARAM[] = "<parameter=", M_PARAM_END[] = "</parameter>";
static const char M_H_CHANNEL[] = "<|channel|>", M_H_MESSAGE[] = "<|message|>";
static const char M_H_START[] = "<|start|>assistant", M_H_END[] = "<|end|>";
static const char M_H_RETURN[] = "<|return|>", M_H_CALL[] = "<|call|>";

/* A harmony header longer than this is not one (the longest real ones are
 * " to=functions.NAME<|channel|>commentary <|constrain|>json"). */
enum { H_HEAD_MAX = 512 };

enum { NAME_MAX_BYTES = 256 };

/* One event of the current feed, by offsets into `out` (which may move). */
struct rec {
    enum hr_chat_event_kind kind;
    size_t off, len;
    size_t index, name_off, args_off, args_len, id_off;
    bool has_id, streamed;
};

struct hr_chat_parser {
    struct hr_chat_parse_opts o;
    enum pstate st, after_ws;
    bool think_allowed; /* ST_START may still open a reasoning block */
    bool ws_spilled;    /* the whitespace run just emitted was too long to hold */
    bool finished;

    char *buf; /* held output: buf[pos..len) */
    size_t len, cap, pos;

    /* The call region being read, all offsets relative to pos. */
    int phase;
    size_t cur;  /* bytes of the region read so far */
    size_t keep; /* bytes that become content if the call degrades */
    bool tagged; /* ST_LLAMA: the region starts with <|python_tag|> */
    bool bare;   /* ST_QWEN3_CODER: the region starts at <function= (no <tool_call>) */
    struct hr_chat_jscan js;
    size_t js_at, js_end, name_at, name_end, id_at, id_end;
    bool has_id;
    /* qwen3-coder: the parameter being read, the committed call's name, its
     * arguments so far ("{" then "k":v,...), and how much of them went out
     * as TOOL_ARGS pieces (stream_args). */
    size_t key_at, key_end, val_at, val_end;
    char fn[NAME_MAX_BYTES + 1];
    char *args;
    size_t args_len, args_cap, args_sent;
    /* harmony: what the current message's body is; whether a header was read. */
    enum hr_chat_event_kind h_kind;
    bool h_seen;

    size_t n_calls;
    bool oom;

    /* This feed's events. */
    char *out;
    size_t out_len, out_cap;
    struct rec *recs;
    size_t n_recs, cap_recs;
    bool rec_open; /* the last rec is text that may still grow */
    struct hr_chat_event *evs;
    size_t cap_evs;
};

/* ---- formats ---- */

static const char *const g_format_names[HR_CHAT_FORMAT_COUNT] = {
    "generic", "hermes", "llama3", "mistral", "qwen3-coder", "harmony"};

const char *hr_chat_format_name(enum hr_chat_format f)
{
    return (unsigned)f < HR_CHAT_FORMAT_COUNT ? g_format_names[f] : "?";
}

enum hr_status hr_chat_format_from_name(const char *name, enum hr_chat_format *out,
                                        struct hr_err *err)
{
    for (int f = 0; f < HR_CHAT_FORMAT_COUNT; f++) {
        if (name && strcmp(name, g_format_names[f]) == 0) {
            *out = (enum hr_chat_format)f;
            return HR_OK;
        }
    }
    return hr_err_set(err, HR_ERR_INVALID,
                      "unknown tool-call format '%s' (expected generic, hermes, llama3, mistral, "
                      "qwen3-coder or harmony)",
                      name ? name : "(null)");
}

enum hr_chat_format hr_chat_format_detect(const char *src)
{
    if (!src)
        return HR_CHAT_FORMAT_GENERIC;
    /* Checked in a fixed order so that a template quoting another
     * family's marker still gets one predictable answer; no shipped
     * template we know of mentions two families' markers. */
    /* gpt-oss: llama.cpp takes any template naming <|channel|> for harmony. */
    if (strstr(src, M_H_CHANNEL))
        return HR_CHAT_FORMAT_HARMONY;
    if (strstr(src, M_MISTRAL))
        return HR_CHAT_FORMAT_MISTRAL;
    /* Qwen3-Coder's templates wrap the XML form in hermes' <tool_call>;
     * llama.cpp tells them apart by the same three markers. */
    if (strstr(src, M_HERMES) && strstr(src, M_FUNCTION) && strstr(src, M_PARAM))
        return HR_CHAT_FORMAT_QWEN3_CODER;
    if (strstr(src, M_HERMES))
        return HR_CHAT_FORMAT_HERMES;
    /* Llama 3.1 names <|python_tag|> for its built-in tools; 3.2 and 3.3
     * templates only describe the JSON form, with "parameters" and the
     * ipython role for results. */
    if (strstr(src, M_PYTHON) || (strstr(src, "ipython") && strstr(src, "\"parameters\"")))
        return HR_CHAT_FORMAT_LLAMA3;
    return HR_CHAT_FORMAT_GENERIC;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

bool hr_chat_prompt_opens_reasoning(const char *prompt, size_t n)
{
    while (n > 0 && is_ws(prompt[n - 1]))
        n--;
    size_t m = sizeof(M_THINK) - 1;
    return n >= m && memcmp(prompt + n - m, M_THINK, m) == 0;
}

struct hr_chat_parse_opts hr_chat_parse_defaults(void)
{
    return (struct hr_chat_parse_opts){.format = HR_CHAT_FORMAT_GENERIC, .reasoning = true};
}

size_t hr_chat_call_id_make(char *out, size_t cap, const char *prefix, struct hr_rng *rng)
{
    static const char alnum[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    if (cap == 0)
        return 0;
    size_t k = 0;
    for (; prefix && prefix[k] && k + 1 < cap; k++)
        out[k] = prefix[k];
    for (int i = 0; i < 24 && k + 1 < cap; i++)
        out[k++] = alnum[hr_rng_u64(rng) % 62];
    out[k] = '\0';
    return k;
}

/* ---- output of a feed ---- */

static bool out_reserve(struct hr_chat_parser *p, size_t extra)
{
    if (p->out_cap - p->out_len >= extra)
        return true;
    size_t cap = p->out_cap ? p->out_cap : 256;
    while (cap - p->out_len < extra)
        cap *= 2;
    char *o = realloc(p->out, cap);
    if (!o) {
        p->oom = true;
        return false;
    }
    p->out = o, p->out_cap = cap;
    return true;
}

static struct rec *rec_add(struct hr_chat_parser *p)
{
    if (p->n_recs == p->cap_recs) {
        size_t cap = p->cap_recs ? 2 * p->cap_recs : 8;
        struct rec *r = realloc(p->recs, cap * sizeof(*r));
        if (!r) {
            p->oom = true;
            return NULL;
        }
        p->recs = r, p->cap_recs = cap;
    }
    struct rec *r = &p->recs[p->n_recs++];
    memset(r, 0, sizeof(*r));
    return r;
}

/* Ends the open text record with a NUL, so every text is a C string too. */
static void rec_close(struct hr_chat_parser *p)
{
    if (!p->rec_open)
        return;
    p->rec_open = false;
    if (out_reserve(p, 1))
        p->out[p->out_len++] = '\0';
}

/* Appends s[0..n) as text of `kind`, joined to the previous record when it
 * is of the same kind, with invalid UTF-8 replaced by U+FFFD. A truncated
 * character at the end of s is replaced too: callers hold one back while
 * more bytes could complete it (utf8_safe_end). */
static void emit_text(struct hr_chat_parser *p, enum hr_chat_event_kind kind, const char *s,
                      size_t n)
{
    if (n == 0 || p->oom)
        return;
    struct rec *r = p->rec_open ? &p->recs[p->n_recs - 1] : NULL;
    if (!r || r->kind != kind) {
        rec_close(p);
        r = rec_add(p);
        if (!r)
            return;
        r->kind = kind;
        r->off = p->out_len;
        r->index = p->n_calls; /* TOOL_ARGS: the call being streamed */
        p->rec_open = true;
    }
    /* U+FFFD takes three bytes where the bad subpart may take one. */
    if (!out_reserve(p, 3 * n))
        return;
    for (size_t i = 0; i < n;) {
        size_t l;
        if (hr_utf8_next((const uint8_t *)s + i, n - i, &l) == HR_UTF8_OK) {
            memcpy(p->out + p->out_len, s + i, l);
            p->out_len += l;
        } else {
            memcpy(p->out + p->out_len, "\xEF\xBF\xBD", 3);
            p->out_len += 3;
        }
        i += l;
    }
    r->len = p->out_len - r->off;
}

static size_t out_str(struct hr_chat_parser *p, const char *s, size_t n)
{
    size_t off = p->out_len;
    if (out_reserve(p, n + 1)) {
        memcpy(p->out + p->out_len, s, n);
        p->out[p->out_len + n] = '\0';
        p->out_len += n + 1;
    }
    return off;
}

/* A streamed call starts (qwen3-coder with opts.stream_args). */
static void emit_call_begin(struct hr_chat_parser *p, const char *name, size_t name_len)
{
    rec_close(p);
    struct rec *r = rec_add(p);
    if (!r)
        return;
    r->kind = HR_CHAT_EVENT_TOOL_CALL_BEGIN;
    r->index = p->n_calls;
    r->name_off = out_str(p, name, name_len);
}

static void emit_call(struct hr_chat_parser *p, const char *name, size_t name_len, const char *args,
                      size_t args_len, const char *id, size_t id_len)
{
    rec_close(p);
    struct rec *r = rec_add(p);
    if (!r)
        return;
    r->kind = HR_CHAT_EVENT_TOOL_CALL;
    r->streamed = p->o.stream_args && p->o.format == HR_CHAT_FORMAT_QWEN3_CODER;
    r->index = p->n_calls++;
    r->name_off = out_str(p, name, name_len);
    r->args_off = out_str(p, args, args_len);
    r->args_len = args_len;
    if (id) {
        r->has_id = true;
        r->id_off = out_str(p, id, id_len);
    }
}

/* ---- reading helpers ---- */

static const char *held(const struct hr_chat_parser *p)
{
    return p->buf + p->pos;
}

static size_t n_held(const struct hr_chat_parser *p)
{
    return p->len - p->pos;
}

/* Where the emittable text b[0..e) must stop so that no UTF-8 character is
 * cut while more bytes could still complete it (only at the end of what has
 * arrived, only before the end of the stream). */
static size_t utf8_safe_end(const char *b, size_t e, size_t n, bool final)
{
    if (final || e != n)
        return e;
    for (size_t k = 1; k <= 3 && k <= e; k++) {
        unsigned char c = (unsigned char)b[e - k];
        if ((c & 0xC0) == 0x80)
            continue;
        size_t l;
        if (c >= 0xC0 &&
            hr_utf8_next((const uint8_t *)b + e - k, k, &l) == HR_UTF8_PARTIAL)
            return e - k;
        return e;
    }
    return e;
}

/* The start of the longest tail of b[0..n) that is a proper prefix of m,
 * or n when none is. */
static size_t partial_start(const char *b, size_t n, const char *m, size_t mlen)
{
    for (size_t k = mlen - 1 < n ? mlen - 1 : n; k > 0; k--)
        if (memcmp(b + n - k, m, k) == 0)
            return n - k;
    return n;
}

static size_t trailing_ws(const char *b, size_t n)
{
    size_t r = 0;
    while (r < n && is_ws(b[n - 1 - r]))
        r++;
    return r;
}

/*
 * Emits text of `kind` from pos up to the marker m (NULL: no marker), or up
 * to what could still be its start. Whitespace right before the marker is
 * not emitted (held while the marker may follow, up to
 * HR_CHAT_PARSE_WS_HOLD bytes). Returns 2 when the marker was found (pos
 * then starts the region, *lead its whitespace), 1 when text was consumed,
 * 0 when nothing could be. With a second marker m2 (NULL: none), the first
 * of the two to occur counts, and *second says whether it was m2.
 */
static int scan_text(struct hr_chat_parser *p, enum hr_chat_event_kind kind, const char *m,
                     const char *m2, bool final, size_t *lead, bool *second)
{
    const char *b = held(p);
    size_t n = n_held(p);
    if (n == 0)
        return 0;
    size_t mlen = m ? strlen(m) : 0;
    const char *hit = m ? memmem(b, n, m, mlen) : NULL;
    size_t stop = hit ? (size_t)(hit - b) : (final || !m) ? n : partial_start(b, n, m, mlen);
    *second = false;
    if (m && m2) {
        /* Only the text before m's hit (or m's partial start) can hold m2. */
        size_t m2len = strlen(m2);
        const char *hit2 = memmem(b, stop, m2, m2len);
        if (hit2) {
            hit = hit2;
            stop = (size_t)(hit2 - b);
            *second = true;
        } else if (!hit && !final) {
            size_t s2 = partial_start(b, n, m2, m2len);
            stop = s2 < stop ? s2 : stop;
        }
    }
    size_t e = stop;
    bool spill = false;
    if (m && (hit || !final)) {
        size_t r = trailing_ws(b, stop);
        /* A run that began in text already emitted (spilled) is not held:
         * the whole run, as one piece, was too long to hold. */
        bool continued = r == stop && p->ws_spilled;
        if (!continued && r <= HR_CHAT_PARSE_WS_HOLD)
            e = stop - r;
        else
            spill = r > 0;
    }
    e = utf8_safe_end(b, e, n, final);
    emit_text(p, kind, b, e);
    if (e > 0)
        p->ws_spilled = spill;
    p->pos += e;
    if (hit) {
        *lead = stop - e;
        return 2;
    }
    return e > 0;
}

/* Region readers: each advances p->cur from where the last call left it. A
 * region longer than max_held_bytes fails, whatever comes after. */

static enum sub need_ws(struct hr_chat_parser *p, bool final)
{
    const char *b = held(p);
    size_t n = n_held(p), cap = p->o.max_held_bytes;
    while (p->cur < n && p->cur < cap && is_ws(b[p->cur]))
        p->cur++;
    if (p->cur >= cap)
        return SUB_FAIL;
    return p->cur < n || final ? SUB_OK : SUB_NEED;
}

/* SUB_FAIL here means "not this literal", not necessarily a broken call. */
static enum sub match_lit(struct hr_chat_parser *p, const char *lit, bool final)
{
    size_t l = strlen(lit), n = n_held(p);
    if (p->cur + l > p->o.max_held_bytes)
        return SUB_FAIL;
    size_t have = n - p->cur < l ? n - p->cur : l;
    if (memcmp(held(p) + p->cur, lit, have) != 0)
        return SUB_FAIL;
    if (have < l)
        return final ? SUB_FAIL : SUB_NEED;
    p->cur += l;
    return SUB_OK;
}

/* The start of a JSON value: one of `opens` must be next. */
static enum sub need_json_start(struct hr_chat_parser *p, const char *opens, bool final)
{
    if (p->cur >= p->o.max_held_bytes)
        return SUB_FAIL;
    if (p->cur >= n_held(p))
        return final ? SUB_FAIL : SUB_NEED;
    if (!strchr(opens, held(p)[p->cur]))
        return SUB_FAIL;
    hr_chat_jscan_init(&p->js);
    p->js_at = p->cur;
    return SUB_OK;
}

static enum sub need_json_end(struct hr_chat_parser *p, bool final)
{
    size_t n = n_held(p), cap = p->o.max_held_bytes;
    size_t lim = n < cap ? n : cap;
    if (p->cur < lim) {
        size_t used;
        enum hr_chat_jscan_result r = hr_chat_jscan_feed(&p->js, held(p) + p->cur, lim - p->cur, &used);
        p->cur += used;
        if (r == HR_CHAT_JSCAN_DONE) {
            p->js_end = p->cur;
            return SUB_OK;
        }
        if (r == HR_CHAT_JSCAN_BAD)
            return SUB_FAIL;
    }
    if (p->cur >= cap)
        return SUB_FAIL;
    return final ? SUB_FAIL : SUB_NEED;
}

static bool name_byte(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.' || c == ':';
}

/* A run of 1..NAME_MAX_BYTES name bytes starting at p->cur (a Mistral
 * function name or call id). */
static enum sub need_word(struct hr_chat_parser *p, size_t start, bool final)
{
    const char *b = held(p);
    size_t n = n_held(p), cap = p->o.max_held_bytes;
    while (p->cur < n && p->cur < cap && p->cur - start <= NAME_MAX_BYTES && name_byte(b[p->cur]))
        p->cur++;
    if (p->cur - start > NAME_MAX_BYTES || p->cur >= cap)
        return SUB_FAIL;
    if (p->cur == n)
        return final ? SUB_FAIL : SUB_NEED;
    return p->cur > start ? SUB_OK : SUB_FAIL;
}

/* ---- transitions ---- */

static void enter_content(struct hr_chat_parser *p)
{
    p->st = ST_CONTENT;
    p->ws_spilled = false;
}

static void enter_call(struct hr_chat_parser *p, enum pstate st, size_t keep)
{
    p->st = st;
    p->phase = 0;
    p->cur = p->keep = keep;
}

/* The call was malformed: its first `keep` bytes are content, and reading
 * goes on after them. */
static int degrade(struct hr_chat_parser *p)
{
    emit_text(p, HR_CHAT_EVENT_CONTENT, held(p), p->keep);
    p->pos += p->keep;
    enter_content(p);
    return 1;
}

/* The call region is complete: drop it and go on. */
static int consume_call(struct hr_chat_parser *p, enum pstate next)
{
    p->pos += p->cur;
    p->st = next;
    p->after_ws = ST_CONTENT;
    p->ws_spilled = false;
    return 1;
}

/* Emits the calls in the JSON the region holds; false if it holds none. */
static bool emit_json_calls(struct hr_chat_parser *p)
{
    struct hr_chat_call_text *c;
    int n = hr_chat_json_calls(held(p) + p->js_at, p->js_end - p->js_at, &c);
    if (n < 0)
        p->oom = true;
    for (int i = 0; i < n; i++)
        emit_call(p, c[i].name, strlen(c[i].name), c[i].args, c[i].args_len, c[i].id,
                  c[i].id ? strlen(c[i].id) : 0);
    hr_chat_call_texts_free(c, n > 0 ? (size_t)n : 0);
    return n > 0;
}

static int st_start(struct hr_chat_parser *p, bool final)
{
    const char *b = held(p);
    size_t n = n_held(p), i = 0;
    while (i < n && i <= HR_CHAT_PARSE_WS_HOLD && is_ws(b[i]))
        i++;
    if (i > HR_CHAT_PARSE_WS_HOLD) {
        enter_content(p);
        return 1;
    }
    if (i == n) {
        if (!final)
            return 0;
        enter_content(p);
        return 1;
    }
    if (p->think_allowed && p->o.reasoning) {
        size_t m = sizeof(M_THINK) - 1, have = n - i < m ? n - i : m;
        if (memcmp(b + i, M_THINK, have) == 0) {
            if (have == m) {
                p->pos += i + m;
                p->st = ST_REASON_LEAD;
                return 1;
            }
            if (!final)
                return 0;
        }
    }
    if (p->o.tools && b[i] == '{' && p->o.format == HR_CHAT_FORMAT_LLAMA3) {
        p->tagged = false;
        enter_call(p, ST_LLAMA, 0);
        return 1;
    }
    if (p->o.tools && b[i] == '{' && p->o.format == HR_CHAT_FORMAT_GENERIC) {
        enter_call(p, ST_GENERIC, 0);
        return 1;
    }
    enter_content(p);
    return 1;
}

static int st_skip_ws(struct hr_chat_parser *p)
{
    const char *b = held(p);
    size_t n = n_held(p), i = 0;
    while (i < n && is_ws(b[i]))
        i++;
    p->pos += i;
    if (i == n)
        return i > 0;
    if (p->after_ws == ST_CONTENT)
        enter_content(p);
    else
        p->st = p->after_ws;
    return 1;
}

static int st_reason_lead(struct hr_chat_parser *p)
{
    p->after_ws = ST_REASON;
    p->ws_spilled = false;
    return st_skip_ws(p);
}

static int st_reason(struct hr_chat_parser *p, bool final)
{
    size_t lead;
    /* Qwen3.5 may go from reasoning straight to a call without </think>:
     * llama.cpp ends the reasoning at <tool_call> too, and so do we. */
    const char *m2 = p->o.tools && p->o.format == HR_CHAT_FORMAT_QWEN3_CODER ? M_HERMES : NULL;
    bool second;
    int r = scan_text(p, HR_CHAT_EVENT_REASONING, M_THINK_END, m2, final, &lead, &second);
    if (r == 2 && second) {
        p->pos += lead; /* the call is read from CONTENT */
        p->think_allowed = false;
        enter_content(p);
        return 1;
    }
    if (r == 2) {
        p->pos += lead + sizeof(M_THINK_END) - 1;
        p->st = ST_SKIP_WS;
        p->after_ws = ST_START;
        p->think_allowed = false;
        return 1;
    }
    return r;
}

static const char *content_marker(const struct hr_chat_parser *p)
{
    if (!p->o.tools)
        return NULL;
    switch (p->o.format) {
    case HR_CHAT_FORMAT_HERMES:
    case HR_CHAT_FORMAT_QWEN3_CODER:
        return M_HERMES;
    case HR_CHAT_FORMAT_LLAMA3:
        return M_PYTHON;
    case HR_CHAT_FORMAT_MISTRAL:
        return M_MISTRAL;
    default:
        return NULL;
    }
}

static int st_content(struct hr_chat_parser *p, bool final)
{
    const char *m = content_marker(p);
    /* Qwen3-Coder sometimes leaves out <tool_call>: a call may also start
     * at <function=, for a tool the request names (st_qwen3_coder checks). */
    const char *m2 =
        m && p->o.format == HR_CHAT_FORMAT_QWEN3_CODER && p->o.tool_defs ? M_FUNCTION : NULL;
    size_t lead;
    bool second;
    int r = scan_text(p, HR_CHAT_EVENT_CONTENT, m, m2, final, &lead, &second);
    if (r != 2)
        return r;
    if (second) {
        enter_call(p, ST_QWEN3_CODER, lead + strlen(M_FUNCTION));
        p->cur = lead; /* QC_OPEN reads the <function= itself */
        p->bare = true;
        return 1;
    }
    size_t keep = lead + strlen(m);
    if (p->o.format == HR_CHAT_FORMAT_HERMES) {
        enter_call(p, ST_HERMES, keep);
    } else if (p->o.format == HR_CHAT_FORMAT_QWEN3_CODER) {
        p->bare = false;
        enter_call(p, ST_QWEN3_CODER, keep);
    } else if (p->o.format == HR_CHAT_FORMAT_LLAMA3) {
        p->tagged = true;
        enter_call(p, ST_LLAMA, keep);
    } else {
        enter_call(p, ST_MISTRAL, keep);
    }
    return 1;
}

/* Runs `e` (a region reader) and leaves the state function on anything but
 * success: waiting returns 0, failure degrades. */
#define STEP(e)                                                                                    \
    do {                                                                                           \
        enum sub s_ = (e);                                                                         \
        if (s_ == SUB_NEED)                                                                        \
            return 0;                                                                              \
        if (s_ == SUB_FAIL)                                                                        \
            return degrade(p);                                                                     \
    } while (0)

/* <tool_call> ws JSON ws </tool_call>; the JSON may hold "</tool_call>" in
 * a string, which is why the JSON's end is found before the closing tag. */
static int st_hermes(struct hr_chat_parser *p, bool final)
{
    switch (p->phase) {
    case 0:
        STEP(need_ws(p, final));
        STEP(need_json_start(p, "{[", final));
        p->phase = 1;
        /* fall through */
    case 1:
        STEP(need_json_end(p, final));
        p->phase = 2;
        /* fall through */
    default:
        STEP(need_ws(p, final));
        STEP(match_lit(p, M_HERMES_END, final));
        if (!emit_json_calls(p))
            return degrade(p);
        return consume_call(p, ST_SKIP_WS);
    }
}

/* [<|python_tag|>] ws JSON. Untagged, only an object at the start counts. */
static int st_llama(struct hr_chat_parser *p, bool final)
{
    switch (p->phase) {
    case 0:
        STEP(need_ws(p, final));
        STEP(need_json_start(p, p->tagged ? "{[" : "{", final));
        p->phase = 1;
        /* fall through */
    default:
        STEP(need_json_end(p, final));
        if (!emit_json_calls(p))
            return degrade(p);
        return consume_call(p, ST_LLAMA_SEP);
    }
}

static int st_llama_sep(struct hr_chat_parser *p, bool final)
{
    const char *b = held(p);
    size_t n = n_held(p), i = 0;
    while (i < n && (is_ws(b[i]) || b[i] == ';'))
        i++;
    p->pos += i;
    if (i == n) {
        if (!final)
            return i > 0;
        enter_content(p);
        return 1;
    }
    if (b[i] == '{') {
        p->tagged = false;
        enter_call(p, ST_LLAMA, 0);
    } else {
        enter_content(p);
    }
    return 1;
}

enum {
    MI_WS,
    MI_KIND,
    MI_JSON,
    MI_NAME,
    MI_AFTER_NAME,
    MI_ID,
    MI_ARGS_TAG,
    MI_ARGS_WS,
    MI_ARGS_JSON,
};

/* [TOOL_CALLS] ws then [calls...], {call}, or name [CALL_ID]id [ARGS] {args}. */
static int st_mistral(struct hr_chat_parser *p, bool final)
{
    switch (p->phase) {
    case MI_WS:
        STEP(need_ws(p, final));
        p->phase = MI_KIND;
        /* fall through */
    case MI_KIND:
        if (p->cur < n_held(p) && strchr("{[", held(p)[p->cur]) && held(p)[p->cur] != '\0') {
            STEP(need_json_start(p, "{[", final));
            p->phase = MI_JSON;
        } else {
            p->name_at = p->cur;
            p->phase = MI_NAME;
        }
        return 1;
    case MI_JSON:
        STEP(need_json_end(p, final));
        if (!emit_json_calls(p))
            return degrade(p);
        return consume_call(p, ST_SKIP_WS);
    case MI_NAME:
        STEP(need_word(p, p->name_at, final));
        p->name_end = p->cur;
        p->has_id = false;
        p->phase = MI_AFTER_NAME;
        /* fall through */
    case MI_AFTER_NAME: {
        enum sub id = match_lit(p, M_CALL_ID, final);
        if (id == SUB_OK) {
            p->id_at = p->cur;
            p->phase = MI_ID;
            return 1;
        }
        enum sub args = match_lit(p, M_ARGS, final);
        if (args == SUB_OK) {
            p->phase = MI_ARGS_WS;
            return 1;
        }
        if (id == SUB_NEED || args == SUB_NEED)
            return 0;
        return degrade(p);
    }
    case MI_ID:
        STEP(need_word(p, p->id_at, final));
        p->id_end = p->cur;
        p->has_id = true;
        p->phase = MI_ARGS_TAG;
        /* fall through */
    case MI_ARGS_TAG:
        STEP(match_lit(p, M_ARGS, final));
        p->phase = MI_ARGS_WS;
        /* fall through */
    case MI_ARGS_WS:
        STEP(need_ws(p, final));
        STEP(need_json_start(p, "{", final));
        p->phase = MI_ARGS_JSON;
        /* fall through */
    default: {
        STEP(need_json_end(p, final));
        char *args;
        size_t args_len;
        int r = hr_chat_json_object_compact(held(p) + p->js_at, p->js_end - p->js_at, &args,
                                            &args_len);
        if (r < 0)
            p->oom = true;
        if (r != 1)
            return degrade(p);
        const char *b = held(p);
        emit_call(p, b + p->name_at, p->name_end - p->name_at, args, args_len,
                  p->has_id ? b + p->id_at : NULL, p->id_end - p->id_at);
        free(args);
        return consume_call(p, ST_SKIP_WS);
    }
    }
}

/* ws JSON ws <end of stream>: a call only if nothing else was written. */
static int st_generic(struct hr_chat_parser *p, bool final)
{
    switch (p->phase) {
    case 0:
        STEP(need_ws(p, final));
        STEP(need_json_start(p, "{", final));
        p->phase = 1;
        /* fall through */
    case 1:
        STEP(need_json_end(p, final));
        p->phase = 2;
        /* fall through */
    default:
        STEP(need_ws(p, final));
        if (p->cur < n_held(p) || !emit_json_calls(p))
            return degrade(p);
        return consume_call(p, ST_CONTENT);
    }
}

/* ---- qwen3-coder ---- */

/* A parameter name: 1..NAME_MAX_BYTES bytes up to the '>' that closes
 * "<parameter=". Any byte but markup and line breaks, since JSON-schema
 * property names are free text; it is escaped when written as a key. */
static enum sub need_key(struct hr_chat_parser *p, bool final)
{
    const char *b = held(p);
    size_t n = n_held(p), cap = p->o.max_held_bytes;
    while (p->cur < n && p->cur < cap && p->cur - p->key_at <= NAME_MAX_BYTES &&
           !strchr("<>\n\r", b[p->cur]) && b[p->cur] != '\0')
        p->cur++;
    if (p->cur - p->key_at > NAME_MAX_BYTES || p->cur >= cap)
        return SUB_FAIL;
    if (p->cur == n)
        return final ? SUB_FAIL : SUB_NEED;
    return p->cur > p->key_at ? SUB_OK : SUB_FAIL;
}

/* Everything up to the literal `m`: p->val_end is where it starts, p->cur
 * after it. The search resumes where the last one could not have missed a
 * match, so a long value costs O(1) per byte. */
static enum sub need_until(struct hr_chat_parser *p, const char *m, bool final)
{
    size_t n = n_held(p), cap = p->o.max_held_bytes, mlen = strlen(m);
    size_t lim = n < cap ? n : cap;
    if (p->cur < lim) {
        const char *hit = memmem(held(p) + p->cur, lim - p->cur, m, mlen);
        if (hit) {
            p->val_end = (size_t)(hit - held(p));
            p->cur = p->val_end + mlen;
            return SUB_OK;
        }
        if (lim - p->cur >= mlen)
            p->cur = lim - (mlen - 1);
    }
    if (lim >= cap)
        return SUB_FAIL;
    return final ? SUB_FAIL : SUB_NEED;
}

static void args_put(struct hr_chat_parser *p, const char *s, size_t n)
{
    if (p->oom)
        return;
    if (p->args_cap - p->args_len < n + 1) {
        size_t cap = p->args_cap ? p->args_cap : 256;
        while (cap - p->args_len < n + 1)
            cap *= 2;
        char *a = realloc(p->args, cap);
        if (!a) {
            p->oom = true;
            return;
        }
        p->args = a, p->args_cap = cap;
    }
    memcpy(p->args + p->args_len, s, n);
    p->args_len += n;
    p->args[p->args_len] = '\0';
}

/* s[0..n) as a JSON string: quotes, backslashes and control bytes escaped,
 * invalid UTF-8 as U+FFFD (as content text gets it). */
static void args_put_string(struct hr_chat_parser *p, const char *s, size_t n)
{
    args_put(p, "\"", 1);
    for (size_t i = 0; i < n && !p->oom;) {
        unsigned char c = (unsigned char)s[i];
        size_t l;
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            args_put(p, e, 2);
            i++;
        } else if (c < 0x20) {
            static const char hex[] = "0123456789abcdef";
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            const char *short_esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : NULL;
            if (short_esc)
                args_put(p, short_esc, 2);
            else
                args_put(p, e, 6);
            i++;
        } else if (hr_utf8_next((const uint8_t *)s + i, n - i, &l) == HR_UTF8_OK) {
            args_put(p, s + i, l);
            i += l;
        } else {
            args_put(p, "\xEF\xBF\xBD", 3);
            i += l;
        }
    }
    args_put(p, "\"", 1);
}

/* Appends "key":value for the parameter just read (see "Typed values" in
 * chat-parse.h) to p->args. */
static void append_value(struct hr_chat_parser *p)
{
    const char *b = held(p);
    const char *v = b + p->val_at;
    size_t n = p->val_end - p->val_at;
    if (n > 0 && v[0] == '\n')
        v++, n--;
    if (n > 0 && v[n - 1] == '\n')
        n--;
    char key[NAME_MAX_BYTES + 1];
    size_t key_len = p->key_end - p->key_at;
    memcpy(key, b + p->key_at, key_len);
    key[key_len] = '\0';
    args_put(p, p->args_len > 1 ? "," : "", p->args_len > 1);
    args_put_string(p, key, key_len);
    args_put(p, ":", 1);
    unsigned kind = hr_chat_param_kind(p->o.tool_defs, p->fn, key);
    if (!(kind & HR_CHAT_PARAM_STRING)) {
        char *js;
        size_t js_len;
        int r = hr_chat_json_value_compact(v, n, &js, &js_len);
        if (r < 0)
            p->oom = true;
        if (r == 1) {
            args_put(p, js, js_len);
            free(js);
            return;
        }
        /* Python's spellings, which the template's `| string` writes
         * for booleans and null in the history the model has seen. */
        static const struct {
            unsigned kind;
            const char *py, *json;
        } lit[] = {{HR_CHAT_PARAM_BOOL, "True", "true"},
                   {HR_CHAT_PARAM_BOOL, "False", "false"},
                   {HR_CHAT_PARAM_NULL, "None", "null"}};
        for (size_t i = 0; i < sizeof(lit) / sizeof(lit[0]); i++) {
            if ((kind & lit[i].kind) && n == strlen(lit[i].py) && memcmp(v, lit[i].py, n) == 0) {
                args_put(p, lit[i].json, strlen(lit[i].json));
                return;
            }
        }
    }
    args_put_string(p, v, n);
}

/* The bytes read so far are done with: the held region restarts after them
 * (a committed call never goes back to them). */
static void qc_advance(struct hr_chat_parser *p)
{
    p->pos += p->cur;
    p->cur = 0;
}

/* Sends the arguments text not sent yet as a TOOL_ARGS delta. */
static void qc_stream(struct hr_chat_parser *p)
{
    if (p->o.stream_args && !p->oom && p->args_len > p->args_sent)
        emit_text(p, HR_CHAT_EVENT_TOOL_ARGS, p->args + p->args_sent, p->args_len - p->args_sent);
    p->args_sent = p->args_len;
}

/* Ends the committed call with the parameters read so far. `done`: it was
 * closed properly and the region is consumed; otherwise reading resumes at
 * the element that broke it (whitespace dropped, the rest content). */
static int qc_end(struct hr_chat_parser *p, bool done)
{
    args_put(p, "}", 1);
    qc_stream(p);
    if (p->oom)
        return 0;
    emit_call(p, p->fn, strlen(p->fn), p->args, p->args_len, NULL, 0);
    if (!done)
        p->cur = 0;
    return consume_call(p, ST_SKIP_WS);
}

/* A reader after the call is committed: waiting returns 0, failure ends the
 * call where it broke. */
#define QSTEP(e)                                                                                   \
    do {                                                                                           \
        enum sub s_ = (e);                                                                         \
        if (s_ == SUB_NEED)                                                                        \
            return 0;                                                                              \
        if (s_ == SUB_FAIL)                                                                        \
            return qc_end(p, false);                                                               \
    } while (0)

enum { QC_OPEN, QC_NAME, QC_NEXT, QC_KEY, QC_VALUE, QC_CLOSE };

/*
 * <tool_call> ws <function=NAME> then, each after optional whitespace,
 * <parameter=KEY>VALUE</parameter> any number of times, </function>, ws,
 * </tool_call>. Before the call is committed (at the '>' after NAME) a
 * mismatch degrades the region to content like the other formats; after
 * it, the call is the parameters read so far and a mismatch only ends it
 * (chat-parse.h, "Committed calls"). Every element read after the commit is
 * dropped from the held region at once, so holding costs one parameter
 * value at a time. Every reader either waits at its first byte or, rerun
 * from there, reaches the same answer, so returning on SUB_NEED resumes
 * cleanly.
 */
static int st_qwen3_coder(struct hr_chat_parser *p, bool final)
{
    switch (p->phase) {
    case QC_OPEN:
        STEP(need_ws(p, final));
        STEP(match_lit(p, M_FUNCTION, final));
        p->name_at = p->cur;
        p->phase = QC_NAME;
        /* fall through */
    case QC_NAME: {
        STEP(need_word(p, p->name_at, final));
        p->name_end = p->cur;
        STEP(match_lit(p, ">", final));
        size_t n = p->name_end - p->name_at;
        memcpy(p->fn, held(p) + p->name_at, n);
        p->fn[n] = '\0';
        /* Without <tool_call>, only a tool the request offers makes a call
         * (as llama.cpp: "<function=" alone is too common in code). */
        if (p->bare && !hr_chat_tool_known(p->o.tool_defs, p->fn))
            return degrade(p);
        p->args_len = p->args_sent = 0;
        args_put(p, "{", 1);
        if (p->o.stream_args)
            emit_call_begin(p, p->fn, n);
        qc_advance(p);
        p->phase = QC_NEXT;
        return 1;
    }
    case QC_NEXT: {
        QSTEP(need_ws(p, final));
        enum sub param = match_lit(p, M_PARAM, final);
        if (param == SUB_OK) {
            p->key_at = p->cur;
            p->phase = QC_KEY;
            return 1;
        }
        enum sub end = match_lit(p, M_FUNCTION_END, final);
        if (end == SUB_OK) {
            qc_advance(p);
            p->phase = QC_CLOSE;
            return 1;
        }
        if (param == SUB_NEED || end == SUB_NEED)
            return 0;
        return qc_end(p, false);
    }
    case QC_KEY:
        QSTEP(need_key(p, final));
        p->key_end = p->cur;
        QSTEP(match_lit(p, ">", final));
        p->val_at = p->cur;
        p->phase = QC_VALUE;
        /* fall through */
    case QC_VALUE: {
        QSTEP(need_until(p, M_PARAM_END, final));
        size_t from = p->args_len;
        append_value(p);
        if (p->args_len > p->o.max_held_bytes) {
            /* The arguments as a whole are bounded too: this parameter is
             * dropped and the call ends before it. */
            p->args_len = from;
            return qc_end(p, false);
        }
        qc_stream(p);
        qc_advance(p);
        p->phase = QC_NEXT;
        return 1;
    }
    default:
        QSTEP(need_ws(p, final));
        QSTEP(match_lit(p, M_HERMES_END, final));
        return qc_end(p, true);
    }
}

/* ---- harmony ---- */

/* Whether b[0..n) (n > 0) begins a message header: 2 it does (a whole
 * opening is there), 1 it may (what is there is a prefix of one), 0 not. */
static int h_head_start(const char *b, size_t n)
{
    static const char *const starts[] = {M_H_CHANNEL, M_H_START, " to=", "to="};
    int r = 0;
    for (size_t i = 0; i < sizeof(starts) / sizeof(starts[0]); i++) {
        size_t l = strlen(starts[i]);
        if (memcmp(b, starts[i], n < l ? n : l) == 0)
            r = n >= l ? 2 : r > 1 ? r : 1;
    }
    return r;
}

/* The length of the run of name bytes at s[0..n), at most NAME_MAX_BYTES. */
static size_t h_word(const char *s, size_t n)
{
    size_t k = 0;
    while (k < n && k < NAME_MAX_BYTES && name_byte(s[k]))
        k++;
    return k;
}

static int h_text(struct hr_chat_parser *p, enum hr_chat_event_kind kind)
{
    p->h_kind = kind;
    p->st = ST_H_TEXT;
    p->ws_spilled = false;
    return 1;
}

/*
 * A header: [<|start|>assistant][ to=R]<|channel|>C[ to=R][ [<|constrain|>]T]<|message|>.
 * A recipient "functions.NAME" (tools offered) makes the body a call; else
 * channel "analysis" is reasoning and any other (final, commentary
 * preambles, recipients we do not run) is content. Bytes that cannot be a
 * header, or a header without a channel, are content up to the next <|end|>.
 */
static int st_h_head(struct hr_chat_parser *p, bool final)
{
    const char *b = held(p);
    size_t n = n_held(p), i = 0;
    while (i < n && is_ws(b[i]))
        i++;
    if (n == 0 || (i == n && !final))
        return 0;
    /* Whitespace before a header, or after the last message, is dropped;
     * before anything else it is content like what follows. Deciding
     * waits until the bytes after it prove which. */
    int after = i < n ? h_head_start(b + i, n - i) : 0;
    if (i > 0 && after == 1 && !final)
        return 0;
    if (i == n ? p->h_seen : i > 0 && after == 2) {
        p->pos += i;
        return 1;
    }
    if (i > 0 || h_head_start(b, n) == 0)
        return h_text(p, HR_CHAT_EVENT_CONTENT);
    size_t lim = n < H_HEAD_MAX ? n : H_HEAD_MAX;
    const char *hit = memmem(b, lim, M_H_MESSAGE, strlen(M_H_MESSAGE));
    if (!hit) {
        if (!final && n < H_HEAD_MAX)
            return 0;
        return h_text(p, HR_CHAT_EVENT_CONTENT);
    }
    const char *end = hit;
    const char *ch = memmem(b, (size_t)(end - b), M_H_CHANNEL, strlen(M_H_CHANNEL));
    if (!ch)
        return h_text(p, HR_CHAT_EVENT_CONTENT);
    const char *chan = ch + strlen(M_H_CHANNEL);
    size_t chan_len = h_word(chan, (size_t)(end - chan));
    const char *to = NULL;
    for (const char *q = b; q + 3 <= end; q++) {
        if (memcmp(q, "to=", 3) == 0 && (q == b || q[-1] == ' ')) {
            to = q + 3;
            break;
        }
    }
    size_t to_len = to ? h_word(to, (size_t)(end - to)) : 0;
    size_t body = (size_t)(end - b) + strlen(M_H_MESSAGE);
    p->h_seen = true;
    static const char fns[] = "functions.";
    const size_t nfns = sizeof(fns) - 1;
    if (to && p->o.tools && to_len > nfns && memcmp(to, fns, nfns) == 0) {
        memcpy(p->fn, to + nfns, to_len - nfns);
        p->fn[to_len - nfns] = '\0';
        enter_call(p, ST_H_CALL, body);
        return 1;
    }
    p->pos += body;
    bool analysis = chan_len == 8 && memcmp(chan, "analysis", 8) == 0;
    return h_text(p, analysis ? HR_CHAT_EVENT_REASONING : HR_CHAT_EVENT_CONTENT);
}

/* A body up to <|end|> (or <|return|>, when the server feeds it). */
static int st_h_text(struct hr_chat_parser *p, bool final)
{
    size_t lead;
    bool second;
    int r = scan_text(p, p->h_kind, M_H_END, M_H_RETURN, final, &lead, &second);
    if (r != 2)
        return r;
    p->pos += lead + (second ? strlen(M_H_RETURN) : strlen(M_H_END));
    p->st = ST_H_HEAD;
    return 1;
}

/* A call's arguments, from p->keep (after <|message|>) to <|call|>,
 * <|end|> or the end of the output (<|call|> is end-of-generation, so the
 * server usually ends the stream there). They must be one JSON object;
 * otherwise the whole message, header included, is content. */
static int st_h_call(struct hr_chat_parser *p, bool final)
{
    const char *b = held(p);
    size_t n = n_held(p), cap = p->o.max_held_bytes;
    size_t lim = n < cap ? n : cap;
    size_t e = lim, mlen = 0;
    if (p->cur < lim) {
        const char *c = memmem(b + p->cur, lim - p->cur, M_H_CALL, strlen(M_H_CALL));
        const char *d = memmem(b + p->cur, lim - p->cur, M_H_END, strlen(M_H_END));
        const char *m = c && (!d || c < d) ? c : d;
        if (m) {
            e = (size_t)(m - b);
            mlen = m == c ? strlen(M_H_CALL) : strlen(M_H_END);
        } else if (lim - p->cur >= sizeof(M_H_CALL)) {
            /* Neither marker can start before lim - 7 on a later feed. */
            p->cur = lim - (sizeof(M_H_CALL) - 2);
        }
    }
    if (mlen == 0 && !final && lim < cap)
        return 0;
    int r = 0;
    char *args = NULL;
    size_t args_len = 0;
    if (mlen > 0 || lim < cap)
        r = hr_chat_json_object_compact(b + p->keep, e - p->keep, &args, &args_len);
    if (r < 0) {
        p->oom = true;
        return 0;
    }
    if (r == 1)
        emit_call(p, p->fn, strlen(p->fn), args, args_len, NULL, 0);
    else
        emit_text(p, HR_CHAT_EVENT_CONTENT, b, e);
    free(args);
    p->pos += e + mlen;
    if (r != 1 && mlen == 0 && lim >= cap) /* over the cap: the rest is content */
        return h_text(p, HR_CHAT_EVENT_CONTENT);
    p->st = ST_H_HEAD;
    return 1;
}

static int step(struct hr_chat_parser *p, bool final)
{
    switch (p->st) {
    case ST_START:
        return st_start(p, final);
    case ST_REASON_LEAD:
        return st_reason_lead(p);
    case ST_REASON:
        return st_reason(p, final);
    case ST_SKIP_WS:
        return st_skip_ws(p);
    case ST_CONTENT:
        return st_content(p, final);
    case ST_HERMES:
        return st_hermes(p, final);
    case ST_LLAMA:
        return st_llama(p, final);
    case ST_LLAMA_SEP:
        return st_llama_sep(p, final);
    case ST_MISTRAL:
        return st_mistral(p, final);
    case ST_GENERIC:
        return st_generic(p, final);
    case ST_QWEN3_CODER:
        return st_qwen3_coder(p, final);
    case ST_H_HEAD:
        return st_h_head(p, final);
    case ST_H_TEXT:
        return st_h_text(p, final);
    case ST_H_CALL:
        return st_h_call(p, final);
    }
    return 0;
}

static void run(struct hr_chat_parser *p, bool final)
{
    while (!p->oom && step(p, final))
        ;
}

/* ---- the public calls ---- */

enum hr_status hr_chat_parser_init(const struct hr_chat_parse_opts *opts,
                                   struct hr_chat_parser **out, struct hr_err *err)
{
    *out = NULL;
    if ((unsigned)opts->format >= HR_CHAT_FORMAT_COUNT)
        return hr_err_set(err, HR_ERR_INVALID, "tool-call format %d is out of range",
                          (int)opts->format);
    struct hr_chat_parser *p = calloc(1, sizeof(*p));
    if (!p)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the output parser");
    /* A buffer from the start, so that held() never offsets a NULL. */
    p->cap = 256;
    p->buf = malloc(p->cap);
    if (!p->buf) {
        free(p);
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory for the output parser");
    }
    p->o = *opts;
    if (p->o.max_held_bytes == 0)
        p->o.max_held_bytes = HR_CHAT_PARSE_DEFAULT_MAX_HELD;
    p->think_allowed = true;
    p->st = ST_START;
    if (p->o.reasoning && p->o.in_reasoning) {
        p->st = ST_REASON_LEAD;
        p->think_allowed = false;
    }
    /* Harmony output is a sequence of messages from the first byte (the
     * prompt ends with "<|start|>assistant"); the completions API
     * (reasoning off) sees it raw. */
    if (p->o.format == HR_CHAT_FORMAT_HARMONY && p->o.reasoning) {
        p->st = ST_H_HEAD;
        p->think_allowed = false;
    }
    *out = p;
    return HR_OK;
}

void hr_chat_parser_free(struct hr_chat_parser *p)
{
    if (!p)
        return;
    free(p->buf);
    free(p->out);
    free(p->recs);
    free(p->evs);
    free(p->args);
    free(p);
}

size_t hr_chat_parser_n_calls(const struct hr_chat_parser *p)
{
    return p->n_calls;
}

static void begin_events(struct hr_chat_parser *p)
{
    p->out_len = 0;
    p->n_recs = 0;
    p->rec_open = false;
}

static enum hr_status end_events(struct hr_chat_parser *p, struct hr_chat_events *out,
                                 struct hr_err *err)
{
    out->ev = NULL;
    out->n = 0;
    rec_close(p);
    if (!p->oom && p->n_recs > p->cap_evs) {
        struct hr_chat_event *e = realloc(p->evs, p->n_recs * sizeof(*e));
        if (e)
            p->evs = e, p->cap_evs = p->n_recs;
        else
            p->oom = true;
    }
    if (p->oom)
        return hr_err_set(err, HR_ERR_NOMEM, "out of memory in the output parser");
    for (size_t i = 0; i < p->n_recs; i++) {
        const struct rec *r = &p->recs[i];
        struct hr_chat_event *e = &p->evs[i];
        memset(e, 0, sizeof(*e));
        e->kind = r->kind;
        if (r->kind == HR_CHAT_EVENT_TOOL_CALL) {
            e->call_index = r->index;
            e->name = p->out + r->name_off;
            e->arguments = p->out + r->args_off;
            e->arguments_len = r->args_len;
            e->id = r->has_id ? p->out + r->id_off : NULL;
            e->streamed = r->streamed;
        } else if (r->kind == HR_CHAT_EVENT_TOOL_CALL_BEGIN) {
            e->call_index = r->index;
            e->name = p->out + r->name_off;
        } else {
            e->call_index = r->index;
            e->text = p->out + r->off;
            e->len = r->len;
        }
    }
    out->ev = p->evs;
    out->n = p->n_recs;
    return HR_OK;
}

enum hr_status hr_chat_parser_feed(struct hr_chat_parser *p, const char *bytes, size_t n,
                                   struct hr_chat_events *out, struct hr_err *err)
{
    out->ev = NULL;
    out->n = 0;
    if (p->finished)
        return hr_err_set(err, HR_ERR_INVALID, "output parser fed after finish");
    if (p->oom)
        return hr_err_set(err, HR_ERR_NOMEM, "output parser is out of memory");
    /* Move the held bytes to the front once they are at most half the
     * buffer, so the copying stays O(1) per byte however the feeds are cut. */
    if (p->pos > 0 && p->pos >= p->len - p->pos) {
        memmove(p->buf, p->buf + p->pos, p->len - p->pos);
        p->len -= p->pos;
        p->pos = 0;
    }
    if (n > p->cap - p->len) {
        if (n > SIZE_MAX / 2 - p->len)
            return hr_err_set(err, HR_ERR_NOMEM, "output parser input too large");
        size_t cap = p->cap;
        while (cap - p->len < n)
            cap *= 2;
        char *b = realloc(p->buf, cap);
        if (!b) {
            p->oom = true;
            return hr_err_set(err, HR_ERR_NOMEM, "out of memory holding model output");
        }
        p->buf = b, p->cap = cap;
    }
    if (n)
        memcpy(p->buf + p->len, bytes, n);
    p->len += n;
    begin_events(p);
    run(p, false);
    return end_events(p, out, err);
}

enum hr_status hr_chat_parser_finish(struct hr_chat_parser *p, struct hr_chat_events *out,
                                     struct hr_err *err)
{
    begin_events(p);
    if (!p->finished && !p->oom) {
        run(p, true);
        p->finished = true;
        HR_ASSERT(p->oom || p->pos == p->len);
    }
    return end_events(p, out, err);
}
