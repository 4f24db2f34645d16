/*
 * progress.c - one line of progress on stderr for long work in the
 * terminal (a prefill in `headroom run`), redrawn in place.
 *
 * Only a terminal gets it: when stderr is a pipe or a file (scripts, tests,
 * logs) nothing extra is written, so the output a program parses stays the
 * same. The line is redrawn at most ten times a second and erased when the
 * work ends, so what stays on the screen is the program's own output and
 * its summary line.
 */
#include <stdio.h>
#include <unistd.h>

#include "base/sys.h"
#include "cli/cli.h"

/* Resident bytes now (/proc/self/statm's second field), 0 if unknown. */
static uint64_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long long size = 0, resident = 0;
    const int n = f ? fscanf(f, "%llu %llu", &size, &resident) : 0;
    if (f)
        fclose(f);
    return n == 2 ? resident * (uint64_t)sysconf(_SC_PAGESIZE) : 0;
}

void hr_cli_progress_init(struct hr_cli_progress *p, const char *what)
{
    *p = (struct hr_cli_progress){.what = what, .tty = isatty(STDERR_FILENO) == 1,
                                  .t0 = hr_now_seconds()};
}

void hr_cli_progress_update(struct hr_cli_progress *p, uint64_t done, uint64_t total)
{
    if (!p->tty || done >= total)
        return;
    const double now = hr_now_seconds();
    if (p->shown && now - p->t_last < 0.1)
        return;
    p->t_last = now;
    p->shown = true;
    const double s = now - p->t0;
    char mem[32];
    /* \r and "erase to the end of the line": the new line replaces the old. */
    fprintf(stderr, "\r\033[K%s %llu / %llu tokens (%.0f%%), %.0f tokens/s, memory %s", p->what,
            (unsigned long long)done, (unsigned long long)total, 100.0 * (double)done / (double)total,
            s > 0 ? (double)done / s : 0.0, hr_cli_fmt_bytes((double)rss_bytes(), mem, sizeof(mem)));
    fflush(stderr);
}

void hr_cli_progress_end(struct hr_cli_progress *p)
{
    if (p->shown) {
        fprintf(stderr, "\r\033[K");
        fflush(stderr);
    }
    p->shown = false;
}
