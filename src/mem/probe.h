/*
 * probe.h - what the machine says about our memory: the measured side of the
 * governor (DESIGN.md 4.1).
 *
 * A probe returns one sample:
 *   - the process RSS: resident pages of /proc/self/statm x the page size;
 *   - our cgroup v2's memory.current and the tightest memory.max on the way
 *     from our cgroup up to the root, when one is a number ("max" means no
 *     limit at that level). The cgroup is the "0::/path" line of
 *     /proc/self/cgroup, under /sys/fs/cgroup. Ancestors count because a
 *     limit on a parent cgroup binds us just as much as our own;
 *   - MemAvailable and MemTotal from /proc/meminfo.
 * Every field can be unknown (a missing file, a cgroup v1 host, an old
 * kernel without MemAvailable); `known` says which are valid. Reading never
 * fails on odd file contents: what does not parse is unknown.
 *
 * The probe is an interface (a vtable plus a context) so the governor's tests
 * can script it: hr_mem_probe_sys_init reads the real files (under a root
 * directory, so tests can point it at a fixture tree), and hr_mem_script
 * replays samples a test queued.
 *
 * Threads: a sys probe is stateless after init, any thread may sample it. A
 * script has a mutex inside: a test thread may push while the governor's
 * sampling thread pops.
 */
#ifndef HR_MEM_PROBE_H
#define HR_MEM_PROBE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/* Bits of hr_mem_sample.known. */
enum {
    HR_MEM_HAVE_RSS = 1u << 0,            /* rss_bytes */
    HR_MEM_HAVE_CGROUP_CURRENT = 1u << 1, /* cgroup_current_bytes */
    HR_MEM_HAVE_CGROUP_MAX = 1u << 2,     /* cgroup_max_bytes: a limit binds */
    HR_MEM_HAVE_AVAILABLE = 1u << 3,      /* mem_available_bytes */
    HR_MEM_HAVE_TOTAL = 1u << 4,          /* mem_total_bytes */
};

struct hr_mem_sample {
    unsigned known; /* HR_MEM_HAVE_* bits; a field whose bit is clear is 0 */
    uint64_t rss_bytes;
    uint64_t cgroup_current_bytes;
    uint64_t cgroup_max_bytes;
    uint64_t mem_available_bytes;
    uint64_t mem_total_bytes;
};

struct hr_mem_probe_ops {
    /* Fills *out. Returns HR_OK; a probe that cannot say anything returns a
     * sample with known == 0, not an error. */
    enum hr_status (*sample)(void *ctx, struct hr_mem_sample *out);
    /* Releases ctx; may be NULL when there is nothing to release. */
    void (*free)(void *ctx);
};

/* A probe is passed by value; whoever got it from an _init owns ctx. */
struct hr_mem_probe {
    const struct hr_mem_probe_ops *ops;
    void *ctx;
};

/* Samples through the vtable; a probe without ops gives an empty sample. */
enum hr_status hr_mem_probe_sample(const struct hr_mem_probe *probe, struct hr_mem_sample *out);
/* Releases the probe's context (if any) and clears it. Accepts NULL. */
void hr_mem_probe_free(struct hr_mem_probe *probe);

/*
 * The real probe. `root` is prefixed to every path ("/proc/self/statm"
 * becomes root + "/proc/self/statm"); NULL or "" reads this machine. The
 * root string is copied. Returns HR_ERR_NOMEM or HR_ERR_RANGE (root longer
 * than 3000 bytes); missing files are not an error.
 */
enum hr_status hr_mem_probe_sys_init(const char *root, struct hr_mem_probe *out,
                                     struct hr_err *err);

/* This machine's MemTotal, for percentages in size strings (size.h); 0 when
 * it cannot be read. One sample of the real probe. */
uint64_t hr_mem_ram_total_bytes(void);

/*
 * The parsers behind the sys probe, on file contents (NUL-terminated), so
 * tests need no files. Each returns 1 when it found its value(s), 0 when
 * the text does not say (the outputs are then untouched), never aborts.
 */
/* statm: the second field (resident pages) x page_bytes, overflow-checked. */
int hr_mem_parse_statm(const char *text, uint64_t page_bytes, uint64_t *rss_bytes);
/* meminfo: "MemTotal:" and "MemAvailable:" in kB. Returns HR_MEM_HAVE_TOTAL |
 * HR_MEM_HAVE_AVAILABLE bits for what it found (0 for neither). */
unsigned hr_mem_parse_meminfo(const char *text, uint64_t *total_bytes, uint64_t *available_bytes);
/* /proc/self/cgroup: copies the path of the "0::" line (cgroup v2) into buf
 * (NUL-terminated; "/" for the root). 0 on a v1-only file or a path that
 * does not fit or contains "..". */
int hr_mem_parse_cgroup_path(const char *text, char *buf, size_t cap);
/* memory.current / memory.max: a decimal byte count, or "max" (then
 * *is_max = 1 and *bytes is untouched). */
int hr_mem_parse_cgroup_value(const char *text, uint64_t *bytes, int *is_max);

/*
 * A scripted probe for tests: samples are returned in the order pushed; when
 * the queue is empty the last returned sample repeats (so a test can set a
 * state and let the governor sample it any number of times). Before any push
 * the sample is empty (known == 0).
 */
struct hr_mem_script;

enum hr_status hr_mem_script_init(struct hr_mem_script **out, struct hr_err *err);
/* Frees the script; any probe obtained from it must not be sampled again. */
void hr_mem_script_free(struct hr_mem_script *script);
/* Appends a sample (copied). HR_ERR_NOMEM if the queue cannot grow. */
enum hr_status hr_mem_script_push(struct hr_mem_script *script, const struct hr_mem_sample *s);
/* Drops every queued sample and makes `s` the one that repeats from now on. */
void hr_mem_script_set(struct hr_mem_script *script, const struct hr_mem_sample *s);
/* How many samples have been taken so far. */
uint64_t hr_mem_script_n_taken(struct hr_mem_script *script);
/* A probe view of the script; the script keeps ownership (ops->free is NULL). */
struct hr_mem_probe hr_mem_script_probe(struct hr_mem_script *script);

#endif
