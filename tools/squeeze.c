/*
 * squeeze - an external memory squeeze for tests: a process that really
 * grows its own resident memory, in steps, until another process's
 * dynamic memory ceiling (as headroom's governor computes it) falls to a
 * target, holds it there, and gives everything back when told to stop.
 *
 *     squeeze --ceiling SIZE --reserve SIZE [--pid PID] [--step SIZE]
 *             [--step-ms N] [--floor SIZE] [--max SIZE] [--timeout-s S]
 *
 * The quantity it steers is the governor's dynamic ceiling,
 *     rss(PID) + MemAvailable - reserve        (rss term 0 without --pid)
 * re-read from /proc/PID/statm and /proc/meminfo before every step. Above
 * the target it maps and touches one more chunk of anonymous memory (a step,
 * or what is left to the target, so it settles within a page of it); below
 * the target by more than its last chunk it unmaps that chunk.
 * Steering the sum rather than a fixed size makes the squeeze mean the same
 * thing on a noisy machine: when the watched process grows, MemAvailable
 * falls by as much and the sum stays put, so the squeezer does nothing; when
 * a third process grows, the squeezer gives memory back instead of letting
 * the ceiling (and the machine) sink further.
 *
 * Safety, because it runs on shared machines: it never lets MemAvailable
 * fall below the floor (default the larger of 1 GiB and 4% of MemTotal; it
 * unmaps a step when it does), never holds more than --max (default 4 GiB),
 * stops by itself after --timeout-s (default 60), and stops when its parent
 * dies (PR_SET_PDEATHSIG). SIGTERM and SIGINT stop it too. Stopping unmaps
 * everything before it exits.
 *
 * A line "ceiling SIZE" on stdin sets a new target, so a test can take the
 * ceiling down in two moves: most of the way before its load starts (that
 * takes a while: pages fault in at a few hundred MiB/s on a VM), the last
 * part at the moment it wants the squeeze to bite.
 *
 * Output, one line each on stdout (flushed), for the test to read:
 *     squeeze: reached ceiling 151.2 MiB (held 612.0 MiB, MemAvailable 3.1 GiB, rss 140.2 MiB)
 *     squeeze: released 612.0 MiB after 4.2 s (peak 640.0 MiB, lowest MemAvailable 3.0 GiB, 3 steps back)
 * "reached" is printed once per target, the first time the ceiling settles
 * within a chunk of it; a squeeze that the floor or --max stops short prints
 * "squeeze: stopped short: ..." instead. Exit 0, or 2 for a usage error.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "base/status.h"
#include "mem/probe.h"
#include "mem/size.h"

#define MIB (1024ull * 1024)
#define GIB (1024ull * MIB)

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static int usage(void)
{
    fprintf(stderr,
            "usage: squeeze --ceiling SIZE --reserve SIZE [--pid PID] [--step SIZE] [--step-ms N]\n"
            "               [--floor SIZE] [--max SIZE] [--timeout-s S]\n"
            "Grows until rss(PID) + MemAvailable - reserve <= ceiling, holds, releases on\n"
            "SIGTERM/SIGINT, parent exit or the timeout. Sizes as --memory-limit takes them.\n");
    return 2;
}

/* Reads a whole small file into buf; 0 when it cannot. */
static int read_file(const char *path, char *buf, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    size_t len = 0;
    while (len + 1 < cap) {
        ssize_t r = read(fd, buf + len, cap - 1 - len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
    }
    close(fd);
    buf[len] = 0;
    return 1;
}

/* MemTotal and MemAvailable in bytes, through the governor's own parser. */
static int meminfo(uint64_t *total, uint64_t *avail)
{
    char text[8192];
    if (!read_file("/proc/meminfo", text, sizeof(text)))
        return 0;
    unsigned got = hr_mem_parse_meminfo(text, total, avail);
    return (got & HR_MEM_HAVE_TOTAL) && (got & HR_MEM_HAVE_AVAILABLE);
}

/* The resident bytes of pid, 0 when pid is 0 or gone. */
static uint64_t rss_of(long pid, uint64_t page)
{
    if (pid <= 0)
        return 0;
    char path[64], text[256];
    uint64_t rss = 0;
    snprintf(path, sizeof(path), "/proc/%ld/statm", pid);
    if (!read_file(path, text, sizeof(text)) || !hr_mem_parse_statm(text, page, &rss))
        return 0;
    return rss;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static const char *fmt(uint64_t b, char *buf, size_t cap)
{
    return hr_mem_format_bytes(b, 1, buf, cap);
}

static int parse_size_arg(const char *flag, const char *v, uint64_t ram, uint64_t *out)
{
    struct hr_err err = {{0}};
    if (!v || hr_mem_parse_size(v, ram, out, &err) != HR_OK) {
        fprintf(stderr, "squeeze: %s: %s\n", flag, v ? err.msg : "needs a value");
        return 0;
    }
    return 1;
}

int main(int argc, char **argv)
{
    uint64_t total = 0, avail = 0;
    if (!meminfo(&total, &avail)) {
        fprintf(stderr, "squeeze: cannot read MemTotal and MemAvailable from /proc/meminfo\n");
        return 1;
    }
    uint64_t ceiling = 0, reserve = 0, step = 16 * MIB, max = 4 * GIB;
    uint64_t floor = total / 25 > GIB ? total / 25 : GIB;
    long pid = 0, step_ms = 20;
    double timeout_s = 60;
    int have_ceiling = 0, have_reserve = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int ok = 1;
        /* A size that does not parse has said why (parse_size_arg). */
        if (!strcmp(a, "--ceiling")) {
            if (!(have_ceiling = parse_size_arg(a, v, total, &ceiling)))
                return 2;
        } else if (!strcmp(a, "--reserve")) {
            if (!(have_reserve = parse_size_arg(a, v, total, &reserve)))
                return 2;
        } else if (!strcmp(a, "--step")) {
            if (!parse_size_arg(a, v, total, &step))
                return 2;
            ok = step >= 4096;
        } else if (!strcmp(a, "--floor")) {
            if (!parse_size_arg(a, v, total, &floor))
                return 2;
        } else if (!strcmp(a, "--max")) {
            if (!parse_size_arg(a, v, total, &max))
                return 2;
        } else if (!strcmp(a, "--pid"))
            ok = v && (pid = strtol(v, NULL, 10)) > 0;
        else if (!strcmp(a, "--step-ms"))
            ok = v && (step_ms = strtol(v, NULL, 10)) > 0 && step_ms <= 10000;
        else if (!strcmp(a, "--timeout-s"))
            ok = v && (timeout_s = strtod(v, NULL)) > 0 && timeout_s <= 3600;
        else
            return usage();
        if (!ok) {
            fprintf(stderr, "squeeze: %s: '%s' is not a valid value\n", a, v ? v : "");
            return 2;
        }
        i++;
    }
    if (!have_ceiling || !have_reserve)
        return usage();

    /* Whatever happens to the test that started us, we do not outlive it
     * (and --timeout-s bounds even a parent that never dies). */
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);

    const long page_l = sysconf(_SC_PAGESIZE);
    const uint64_t page = page_l > 0 ? (uint64_t)page_l : 4096;
    step = (step + page - 1) / page * page;
    /* Chunks of at most one step; near the target a chunk is just what is
     * left to take, so the ceiling settles within a page of it. */
    const size_t max_chunks = (size_t)(max / page) < 65536 ? (size_t)(max / page) + 1 : 65536;
    struct chunk {
        void *p;
        uint64_t bytes;
    } *chunks = calloc(max_chunks, sizeof(*chunks));
    if (!chunks) {
        fprintf(stderr, "squeeze: out of memory\n");
        return 1;
    }
    size_t n = 0, n_back = 0;
    uint64_t held = 0, peak = 0, lowest = avail;
    int reached = 0, short_said = 0, stdin_open = 1;
    char inbuf[256];
    size_t n_in = 0;
    const double t0 = now_s();
    char a[32], b[32], c[32], d[32];
    while (!g_stop && now_s() - t0 < timeout_s) {
        if (!meminfo(&total, &avail))
            break;
        if (avail < lowest)
            lowest = avail;
        const uint64_t rss = rss_of(pid, page);
        const uint64_t room = rss + avail;
        const uint64_t dyn = room > reserve ? room - reserve : 0;
        if (avail < floor && n > 0) {
            /* The machine is lower than we may take it: give a chunk back. */
            held -= chunks[--n].bytes;
            munmap(chunks[n].p, chunks[n].bytes);
            n_back++;
        } else if (dyn >= ceiling + page) {
            uint64_t want = dyn - ceiling < step ? (dyn - ceiling) / page * page : step;
            const char *why = avail < floor + want ? "MemAvailable is at the floor"
                              : held + want > max || n == max_chunks ? "--max reached"
                                                                      : NULL;
            void *p = why ? MAP_FAILED
                          : mmap(NULL, want, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
            if (!why && p == MAP_FAILED)
                why = strerror(errno);
            if (!why) {
                /* MAP_POPULATE faults the pages in at once (twice as fast as
                 * touching them one by one on a VM); a write per page after
                 * makes sure each is a private page, not the shared zero page. */
                for (uint64_t o = 0; o < want; o += page)
                    ((volatile char *)p)[o] = 1;
                chunks[n++] = (struct chunk){p, want};
                held += want;
                if (held > peak)
                    peak = held;
                continue; /* re-read at once: ramp up as fast as pages fault in */
            }
            if (!short_said)
                printf("squeeze: stopped short: %s (ceiling %s, held %s, MemAvailable %s, "
                       "floor %s)\n",
                       why, fmt(dyn, a, sizeof(a)), fmt(held, b, sizeof(b)),
                       fmt(avail, c, sizeof(c)), fmt(floor, d, sizeof(d)));
            short_said = 1;
        } else if (n > 0 && dyn + chunks[n - 1].bytes < ceiling) {
            held -= chunks[--n].bytes;
            munmap(chunks[n].p, chunks[n].bytes);
            n_back++;
        } else if (!reached) {
            reached = 1;
            printf("squeeze: reached ceiling %s (held %s, MemAvailable %s, rss %s)\n",
                   fmt(dyn, a, sizeof(a)), fmt(held, b, sizeof(b)), fmt(avail, c, sizeof(c)),
                   fmt(rss, d, sizeof(d)));
        }
        fflush(stdout);
        /* The pause between steps doubles as the wait for a new target. */
        if (stdin_open) {
            struct pollfd pfd = {.fd = 0, .events = POLLIN};
            if (poll(&pfd, 1, (int)step_ms) > 0) {
                /* read(), not stdio: a line stdio buffered would hide from poll. */
                ssize_t r = read(0, inbuf + n_in, sizeof(inbuf) - 1 - n_in);
                if (r <= 0) {
                    stdin_open = 0; /* EOF: keep the target, stop listening */
                } else {
                    n_in += (size_t)r;
                    inbuf[n_in] = 0;
                    char *nl;
                    while ((nl = strchr(inbuf, '\n'))) {
                        *nl = 0;
                        uint64_t c2;
                        struct hr_err e = {{0}};
                        if (strncmp(inbuf, "ceiling ", 8) ||
                            hr_mem_parse_size(inbuf + 8, total, &c2, &e) != HR_OK)
                            fprintf(stderr, "squeeze: stdin: '%s' is not 'ceiling SIZE'\n", inbuf);
                        else
                            ceiling = c2, reached = short_said = 0;
                        n_in -= (size_t)(nl + 1 - inbuf);
                        memmove(inbuf, nl + 1, n_in + 1);
                    }
                    if (n_in == sizeof(inbuf) - 1)
                        n_in = 0; /* a line too long to be a command */
                }
            }
        } else {
            struct timespec ts = {.tv_sec = step_ms / 1000,
                                  .tv_nsec = (step_ms % 1000) * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    const uint64_t released = held;
    while (n > 0) {
        n--;
        munmap(chunks[n].p, chunks[n].bytes);
    }
    free(chunks);
    printf("squeeze: released %s after %.1f s (peak %s, lowest MemAvailable %s, %zu steps back)\n",
           fmt(released, a, sizeof(a)), now_s() - t0, fmt(peak, b, sizeof(b)),
           fmt(lowest, c, sizeof(c)), n_back);
    fflush(stdout);
    return 0;
}
