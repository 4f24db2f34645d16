/*
 * probe.c - the real memory probe (procfs and cgroup v2 files) and the
 * scripted one for tests; see probe.h.
 *
 * Each sample opens and reads a handful of small files (statm, meminfo,
 * /proc/self/cgroup and two or three cgroup files), a few tens of
 * microseconds: cheap enough to do around every engine step. Files are read
 * whole into a stack buffer; a file longer than the buffer is cut, which can
 * only make a field unknown, never misparse it, because every parser
 * requires the whole number it reads to be followed by a delimiter.
 */
#include "mem/probe.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/sys.h"

/* ---- parsers ---- */

/*
 * Reads a decimal number at *p (after optional blanks) into *v; advances *p.
 * Returns 0 on no digits or overflow.
 */
static int read_u64(const char **p, uint64_t *v)
{
    const char *s = *p;
    while (*s == ' ' || *s == '\t') s++;
    if (*s < '0' || *s > '9') return 0;
    uint64_t x = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (x > (UINT64_MAX - d) / 10) return 0;
        x = x * 10 + d;
    }
    *p = s;
    *v = x;
    return 1;
}

static int at_end_of_field(const char *s)
{
    return *s == 0 || *s == ' ' || *s == '\t' || *s == '\n' || *s == '\r';
}

int hr_mem_parse_statm(const char *text, uint64_t page_bytes, uint64_t *rss_bytes)
{
    if (!text || page_bytes == 0) return 0;
    const char *p = text;
    uint64_t size_pages, resident_pages;
    if (!read_u64(&p, &size_pages) || !at_end_of_field(p)) return 0;
    if (!read_u64(&p, &resident_pages) || !at_end_of_field(p)) return 0;
    if (resident_pages > UINT64_MAX / page_bytes) return 0;
    *rss_bytes = resident_pages * page_bytes;
    return 1;
}

/* The value of a "Key:   123 kB" line of meminfo, in bytes. */
static int meminfo_field(const char *text, const char *key, uint64_t *bytes)
{
    size_t klen = strlen(key);
    for (const char *line = text; line && *line;) {
        if (strncmp(line, key, klen) == 0) {
            const char *p = line + klen;
            uint64_t kb;
            if (!read_u64(&p, &kb)) return 0;
            while (*p == ' ' || *p == '\t') p++;
            /* Every meminfo size is in kB; a line without the unit is not one we know. */
            if (strncmp(p, "kB", 2) != 0 || kb > UINT64_MAX / 1024) return 0;
            *bytes = kb * 1024;
            return 1;
        }
        line = strchr(line, '\n');
        if (line) line++;
    }
    return 0;
}

unsigned hr_mem_parse_meminfo(const char *text, uint64_t *total_bytes, uint64_t *available_bytes)
{
    if (!text) return 0;
    unsigned found = 0;
    uint64_t v;
    if (meminfo_field(text, "MemTotal:", &v)) {
        *total_bytes = v;
        found |= HR_MEM_HAVE_TOTAL;
    }
    if (meminfo_field(text, "MemAvailable:", &v)) {
        *available_bytes = v;
        found |= HR_MEM_HAVE_AVAILABLE;
    }
    return found;
}

int hr_mem_parse_cgroup_path(const char *text, char *buf, size_t cap)
{
    if (!text || !buf || cap == 0) return 0;
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t n = end ? (size_t)(end - line) : strlen(line);
        if (n >= 4 && strncmp(line, "0::/", 4) == 0) {
            const char *path = line + 3;
            size_t plen = n - 3;
            while (plen > 1 && (path[plen - 1] == '\r' || path[plen - 1] == ' ')) plen--;
            if (plen >= cap || memchr(path, 0, plen)) return 0;
            /* A path that climbs out of /sys/fs/cgroup is not one we follow. */
            for (size_t i = 0; i + 1 < plen; i++)
                if (path[i] == '.' && path[i + 1] == '.') return 0;
            memcpy(buf, path, plen);
            buf[plen] = 0;
            return 1;
        }
        line = end ? end + 1 : NULL;
    }
    return 0;
}

int hr_mem_parse_cgroup_value(const char *text, uint64_t *bytes, int *is_max)
{
    if (!text) return 0;
    const char *p = text;
    while (*p == ' ' || *p == '\t') p++;
    if (strncmp(p, "max", 3) == 0 && at_end_of_field(p + 3)) {
        *is_max = 1;
        return 1;
    }
    uint64_t v;
    if (!read_u64(&p, &v) || !at_end_of_field(p)) return 0;
    *is_max = 0;
    *bytes = v;
    return 1;
}

/* ---- the sys probe ---- */

enum { PATH_CAP = 4096, ROOT_CAP = 3000 };

struct sys_probe {
    char root[ROOT_CAP + 1];
    uint64_t page_bytes;
};

/* Reads root + path into buf (NUL-terminated); returns 0 if it cannot. */
static int read_text(const struct sys_probe *sp, const char *path, char *buf, size_t cap)
{
    char full[PATH_CAP];
    int n = snprintf(full, sizeof(full), "%s%s", sp->root, path);
    if (n < 0 || (size_t)n >= sizeof(full)) return 0;
    int fd = open(full, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    return 1;
}

/* Reads one cgroup file of `dir` (a path under /sys/fs/cgroup). */
static int read_cgroup_value(const struct sys_probe *sp, const char *dir, const char *file,
                             uint64_t *bytes, int *is_max)
{
    char path[PATH_CAP], text[128];
    int n = snprintf(path, sizeof(path), "/sys/fs/cgroup%s%s%s", dir,
                     (dir[0] && dir[strlen(dir) - 1] == '/') ? "" : "/", file);
    if (n < 0 || (size_t)n >= sizeof(path)) return 0;
    return read_text(sp, path, text, sizeof(text)) &&
           hr_mem_parse_cgroup_value(text, bytes, is_max);
}

/*
 * A sample slower than SLOW_SAMPLE_S is logged (at most every 10 s) with
 * each file's share: the governor samples around prefill steps on the
 * engine thread, so a slow sample is the engine's time, and which file was
 * slow says where the thread waited. Seen on an H100 host (2026-12-07):
 * once per server start, in the first burst of 32 streams, one read of
 * statm took 22.7 ms; with --no-governor the same burst's steps took as
 * much longer instead, so the thread is held up there whatever it runs
 * (docs/architecture.md, "Batched decode").
 */
#define SLOW_SAMPLE_S 0.002
enum { T_STATM, T_MEMINFO, T_CGROUP, T_CURRENT, T_MAX, T_N };

static void note_slow(const double t[T_N + 1])
{
    static _Atomic double last_log = -1e9;
    const double total = t[T_N] - t[0];
    if (total < SLOW_SAMPLE_S || t[T_N] - atomic_load(&last_log) < 10.0)
        return;
    atomic_store(&last_log, t[T_N]);
    hr_log_info("mem", "memory probe: a sample took %.2f ms (statm %.2f, meminfo %.2f, "
                "/proc/self/cgroup %.2f, memory.current %.2f, memory.max %.2f ms)",
                1e3 * total, 1e3 * (t[1] - t[0]), 1e3 * (t[2] - t[1]), 1e3 * (t[3] - t[2]),
                1e3 * (t[4] - t[3]), 1e3 * (t[5] - t[4]));
}

static enum hr_status sys_sample(void *ctx, struct hr_mem_sample *out)
{
    const struct sys_probe *sp = ctx;
    memset(out, 0, sizeof(*out));
    double t[T_N + 1];
    t[0] = hr_now_seconds();
    char text[8192];
    if (read_text(sp, "/proc/self/statm", text, sizeof(text)) &&
        hr_mem_parse_statm(text, sp->page_bytes, &out->rss_bytes))
        out->known |= HR_MEM_HAVE_RSS;
    t[1] = hr_now_seconds();
    if (read_text(sp, "/proc/meminfo", text, sizeof(text)))
        out->known |= hr_mem_parse_meminfo(text, &out->mem_total_bytes, &out->mem_available_bytes);
    t[2] = hr_now_seconds();

    char cg[1024];
    const bool in_cgroup = read_text(sp, "/proc/self/cgroup", text, sizeof(text)) &&
                           hr_mem_parse_cgroup_path(text, cg, sizeof(cg));
    t[3] = hr_now_seconds();
    if (!in_cgroup) {
        t[4] = t[5] = t[3];
        note_slow(t);
        return HR_OK;
    }
    uint64_t v;
    int is_max;
    if (read_cgroup_value(sp, cg, "memory.current", &v, &is_max) && !is_max) {
        out->cgroup_current_bytes = v;
        out->known |= HR_MEM_HAVE_CGROUP_CURRENT;
    }
    t[4] = hr_now_seconds();
    /* The tightest memory.max from our cgroup up to the root: a parent's
     * limit binds the whole subtree. The root cgroup has no memory.max. */
    for (;;) {
        if (read_cgroup_value(sp, cg, "memory.max", &v, &is_max) && !is_max &&
            (!(out->known & HR_MEM_HAVE_CGROUP_MAX) || v < out->cgroup_max_bytes)) {
            out->cgroup_max_bytes = v;
            out->known |= HR_MEM_HAVE_CGROUP_MAX;
        }
        char *slash = strrchr(cg, '/');
        if (!slash || (slash == cg && cg[1] == 0)) break;
        if (slash == cg)
            cg[1] = 0; /* "/a" -> "/" */
        else
            *slash = 0;
    }
    t[5] = hr_now_seconds();
    note_slow(t);
    return HR_OK;
}

static void sys_free(void *ctx)
{
    free(ctx);
}

static const struct hr_mem_probe_ops g_sys_ops = {.sample = sys_sample, .free = sys_free};

enum hr_status hr_mem_probe_sys_init(const char *root, struct hr_mem_probe *out, struct hr_err *err)
{
    out->ops = NULL;
    out->ctx = NULL;
    if (!root) root = "";
    size_t n = strlen(root);
    if (n > ROOT_CAP)
        return hr_err_set(err, HR_ERR_RANGE,
                          "memory probe: root directory path is %zu bytes, "
                          "the limit is %d",
                          n, ROOT_CAP);
    struct sys_probe *sp = calloc(1, sizeof(*sp));
    if (!sp) return hr_err_set(err, HR_ERR_NOMEM, "memory probe: out of memory");
    memcpy(sp->root, root, n);
    /* A trailing slash would double up with the absolute paths appended. */
    while (n > 0 && sp->root[n - 1] == '/') sp->root[--n] = 0;
    long page = sysconf(_SC_PAGESIZE);
    sp->page_bytes = page > 0 ? (uint64_t)page : 4096;
    out->ops = &g_sys_ops;
    out->ctx = sp;
    return HR_OK;
}

enum hr_status hr_mem_probe_sample(const struct hr_mem_probe *probe, struct hr_mem_sample *out)
{
    if (!probe || !probe->ops || !probe->ops->sample) {
        memset(out, 0, sizeof(*out));
        return HR_OK;
    }
    return probe->ops->sample(probe->ctx, out);
}

void hr_mem_probe_free(struct hr_mem_probe *probe)
{
    if (!probe) return;
    if (probe->ops && probe->ops->free) probe->ops->free(probe->ctx);
    probe->ops = NULL;
    probe->ctx = NULL;
}

/* ---- the scripted probe ---- */

struct hr_mem_script {
    pthread_mutex_t lock;
    struct hr_mem_sample *queue; /* ring is unnecessary: tests push a few hundred at most */
    size_t n, cap, head;
    struct hr_mem_sample last;
    uint64_t n_taken;
};

enum hr_status hr_mem_script_init(struct hr_mem_script **out, struct hr_err *err)
{
    struct hr_mem_script *s = calloc(1, sizeof(*s));
    if (!s) return hr_err_set(err, HR_ERR_NOMEM, "memory script: out of memory");
    pthread_mutex_init(&s->lock, NULL);
    *out = s;
    return HR_OK;
}

void hr_mem_script_free(struct hr_mem_script *script)
{
    if (!script) return;
    pthread_mutex_destroy(&script->lock);
    free(script->queue);
    free(script);
}

enum hr_status hr_mem_script_push(struct hr_mem_script *script, const struct hr_mem_sample *s)
{
    pthread_mutex_lock(&script->lock);
    if (script->n == script->cap) {
        size_t cap = script->cap ? script->cap * 2 : 16;
        struct hr_mem_sample *q = realloc(script->queue, cap * sizeof(*q));
        if (!q) {
            pthread_mutex_unlock(&script->lock);
            return HR_ERR_NOMEM;
        }
        script->queue = q;
        script->cap = cap;
    }
    script->queue[script->n++] = *s;
    pthread_mutex_unlock(&script->lock);
    return HR_OK;
}

void hr_mem_script_set(struct hr_mem_script *script, const struct hr_mem_sample *s)
{
    pthread_mutex_lock(&script->lock);
    script->n = script->head = 0;
    script->last = *s;
    pthread_mutex_unlock(&script->lock);
}

uint64_t hr_mem_script_n_taken(struct hr_mem_script *script)
{
    pthread_mutex_lock(&script->lock);
    uint64_t n = script->n_taken;
    pthread_mutex_unlock(&script->lock);
    return n;
}

static enum hr_status script_sample(void *ctx, struct hr_mem_sample *out)
{
    struct hr_mem_script *s = ctx;
    pthread_mutex_lock(&s->lock);
    if (s->head < s->n) {
        s->last = s->queue[s->head++];
        if (s->head == s->n) s->head = s->n = 0;
    }
    *out = s->last;
    s->n_taken++;
    pthread_mutex_unlock(&s->lock);
    return HR_OK;
}

static const struct hr_mem_probe_ops g_script_ops = {.sample = script_sample, .free = NULL};

struct hr_mem_probe hr_mem_script_probe(struct hr_mem_script *script)
{
    struct hr_mem_probe p = {.ops = &g_script_ops, .ctx = script};
    return p;
}

uint64_t hr_mem_ram_total_bytes(void)
{
    struct hr_mem_probe p;
    struct hr_mem_sample s = {0};
    if (hr_mem_probe_sys_init(NULL, &p, NULL) != HR_OK)
        return 0;
    hr_mem_probe_sample(&p, &s);
    hr_mem_probe_free(&p);
    return s.known & HR_MEM_HAVE_TOTAL ? s.mem_total_bytes : 0;
}
