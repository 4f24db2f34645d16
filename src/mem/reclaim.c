/* reclaim.c - the ordered reclaim chain; see reclaim.h. */
#include "mem/reclaim.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "mem/size.h"

void hr_mem_reclaim_init(struct hr_mem_reclaim *chain)
{
    memset(chain, 0, sizeof(*chain));
}

enum hr_status hr_mem_reclaim_add(struct hr_mem_reclaim *chain, const char *name,
                                  hr_mem_reclaim_fn fn, void *ctx)
{
    if (!fn) return HR_ERR_INVALID;
    if (chain->n_stages >= HR_MEM_RECLAIM_MAX_STAGES) return HR_ERR_LIMIT;
    struct hr_mem_reclaim_stage *s = &chain->stages[chain->n_stages++];
    s->name = name ? name : "stage";
    s->fn = fn;
    s->ctx = ctx;
    return HR_OK;
}

uint64_t hr_mem_reclaim_run(const struct hr_mem_reclaim *chain, uint64_t want_bytes,
                            struct hr_mem_reclaim_report *report)
{
    struct hr_mem_reclaim_report r;
    memset(&r, 0, sizeof(r));
    r.want_bytes = want_bytes;
    for (int i = 0; i < chain->n_stages && r.freed_bytes < want_bytes; i++) {
        uint64_t got = chain->stages[i].fn(chain->stages[i].ctx, want_bytes - r.freed_bytes);
        r.stage_freed_bytes[i] = got;
        r.freed_bytes = got > UINT64_MAX - r.freed_bytes ? UINT64_MAX : r.freed_bytes + got;
        r.n_stages_run = i + 1;
    }
    if (want_bytes > 0) {
        /* One line per run: what was wanted, what each stage that ran gave. */
        char line[512], a[32], b[32], c[32];
        int n = snprintf(line, sizeof(line), "memory reclaim: wanted %s, freed %s (",
                         hr_mem_format_bytes(want_bytes, 2, a, sizeof(a)),
                         hr_mem_format_bytes(r.freed_bytes, 2, b, sizeof(b)));
        for (int i = 0; i < r.n_stages_run && n > 0 && (size_t)n < sizeof(line); i++)
            n += snprintf(line + n, sizeof(line) - (size_t)n, "%s%s %s", i ? ", " : "",
                          chain->stages[i].name,
                          hr_mem_format_bytes(r.stage_freed_bytes[i], 2, c, sizeof(c)));
        if (r.n_stages_run == 0 && n > 0 && (size_t)n < sizeof(line))
            n += snprintf(line + n, sizeof(line) - (size_t)n, "no stages");
        hr_log_info("mem", "%s)", line);
    }
    if (report) *report = r;
    return r.freed_bytes;
}
