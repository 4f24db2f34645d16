/*
 * test-mem.c - the memory governor (src/mem): size strings, the probe's
 * parsers and a fixture filesystem, ceiling and reserve math, pressure
 * levels with hysteresis, the residual tracker replaying the seed's numbers
 * (DESIGN.md 4.5), chunk sizing, admission's M, the reclaim chain, the
 * external squeeze, the sampling thread, and the Prometheus text.
 *
 * Everything runs against a scripted probe, so nothing depends on this
 * machine's memory; log lines are captured by pointing stderr at a file.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "mem/counters.h"
#include "mem/governor.h"
#include "mem/probe.h"
#include "mem/reclaim.h"
#include "mem/residual.h"
#include "mem/size.h"

#define KiB (1024ull)
#define MiB (1024ull * 1024)
#define GiB (1024ull * 1024 * 1024)

/* ---- helpers ---- */

/* Log capture: stderr goes to a temporary file between begin and end. */
static int g_saved_stderr = -1;
static FILE *g_capture;

static void capture_begin(void)
{
    fflush(stderr);
    g_capture = tmpfile();
    assert_non_null(g_capture);
    g_saved_stderr = dup(STDERR_FILENO);
    dup2(fileno(g_capture), STDERR_FILENO);
}

/* Returns the captured text (static buffer) and restores stderr. */
static const char *capture_end(void)
{
    static char text[16384];
    fflush(stderr);
    dup2(g_saved_stderr, STDERR_FILENO);
    close(g_saved_stderr);
    rewind(g_capture);
    size_t n = fread(text, 1, sizeof(text) - 1, g_capture);
    text[n] = 0;
    fclose(g_capture);
    return text;
}

static int count_substr(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

static struct hr_mem_sample rss_only(uint64_t rss)
{
    struct hr_mem_sample s = {.known = HR_MEM_HAVE_RSS, .rss_bytes = rss};
    return s;
}

/* A governor on a fresh script: limit bytes, no meminfo unless the sample says. */
static struct hr_gov *gov_on(struct hr_mem_script **script, const struct hr_gov_config *cfg,
                             struct hr_mem_sample first)
{
    struct hr_err err = {{0}};
    assert_int_equal(hr_mem_script_init(script, &err), HR_OK);
    hr_mem_script_set(*script, &first);
    struct hr_gov *g = NULL;
    capture_begin(); /* the ceiling line */
    enum hr_status st = hr_gov_init(cfg, hr_mem_script_probe(*script), &g, &err);
    capture_end();
    assert_int_equal(st, HR_OK);
    return g;
}

static void set_sample(struct hr_mem_script *s, struct hr_mem_sample x)
{
    hr_mem_script_set(s, &x);
}

/* ---- size strings ---- */

static void test_size_good(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t ram, want;
    } cases[] = {
        {"123456", 0, 123456},
        {"0", 0, 0},
        {"12G", 0, 12 * GiB},
        {"12g", 0, 12 * GiB},
        {"12Gi", 0, 12 * GiB},
        {"12GiB", 0, 12 * GiB},
        {"12gib", 0, 12 * GiB},
        {"512M", 0, 512 * MiB},
        {"1.5GiB", 0, 3 * GiB / 2},
        {"0.5k", 0, 512},
        {"7K", 0, 7 * KiB},
        {"2T", 0, 2048 * GiB},
        {"1KB", 0, 1000},
        {"2GB", 0, 2000000000ull},
        {"2gb", 0, 2000000000ull},
        {"1.5MB", 0, 1500000},
        {"100B", 0, 100},
        {" 1 GiB ", 0, GiB},
        {"80%", 10000, 8000},
        {"100%", 16 * GiB, 16 * GiB},
        {"12.5%", 1000, 125},
        {"33%", 101, 33},
        {"0%", 1000, 0},
        {"18446744073709551615", 0, UINT64_MAX},
        {"15.99999999999T", 0, 17592186044405ull},
        {"18446744073709551615.5", 0, UINT64_MAX}, /* a fractional byte rounds down */
        {"18446744073709551.6KB", 0, 18446744073709551600ull},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t v = 42;
        struct hr_err err = {{0}};
        enum hr_status st = hr_mem_parse_size(cases[i].text, cases[i].ram, &v, &err);
        if (st != HR_OK) fail_msg("\"%s\": %s", cases[i].text, err.msg);
        if (v != cases[i].want)
            fail_msg("\"%s\": got %llu, want %llu", cases[i].text, (unsigned long long)v,
                     (unsigned long long)cases[i].want);
    }
}

static void test_size_bad(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t ram;
        enum hr_status want;
        const char *msg_part;
    } cases[] = {
        {"", 0, HR_ERR_INVALID, "empty"},
        {"   ", 0, HR_ERR_INVALID, "empty"},
        {"abc", 0, HR_ERR_INVALID, "\"abc\""},
        {"-1G", 0, HR_ERR_INVALID, "start with a digit"},
        {"+1G", 0, HR_ERR_INVALID, "start with a digit"},
        {".5G", 0, HR_ERR_INVALID, "start with a digit"},
        {"12X", 0, HR_ERR_INVALID, "unknown unit \"X\""},
        {"12 GiBs", 0, HR_ERR_INVALID, "unknown unit"},
        {"12Mb/s", 0, HR_ERR_INVALID, "unknown unit"},
        {"1.", 0, HR_ERR_INVALID, "decimal point"},
        {"1.5.5G", 0, HR_ERR_INVALID, "unknown unit"},
        {"1e9", 0, HR_ERR_INVALID, "unknown unit"},
        {"12 G B", 0, HR_ERR_INVALID, "unknown unit"},
        {"80%", 0, HR_ERR_INVALID, "RAM size"},
        {"101%", 1000, HR_ERR_RANGE, "at most 100%"},
        {"100.5%", 1000, HR_ERR_RANGE, "at most 100%"},
        {"50 %%", 1000, HR_ERR_INVALID, "unknown unit"},
        {"18446744073709551616", 0, HR_ERR_RANGE, "2^64"},
        {"99999999999999999999999G", 0, HR_ERR_RANGE, "2^64"},
        {"16777216T", 0, HR_ERR_RANGE, "2^64"},
        {"17179869184G", 0, HR_ERR_RANGE, "2^64"},
        {"18446744073709551.9KB", 0, HR_ERR_RANGE, "2^64"}, /* the fraction overflows */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint64_t v = 42;
        struct hr_err err = {{0}};
        enum hr_status st = hr_mem_parse_size(cases[i].text, cases[i].ram, &v, &err);
        if (st != cases[i].want)
            fail_msg("\"%s\": status %d, want %d (%s)", cases[i].text, st, cases[i].want, err.msg);
        assert_int_equal(v, 42); /* untouched on failure */
        if (!strstr(err.msg, cases[i].msg_part))
            fail_msg("\"%s\": message \"%s\" lacks \"%s\"", cases[i].text, err.msg,
                     cases[i].msg_part);
    }
    struct hr_err err = {{0}};
    uint64_t v = 0;
    assert_int_equal(hr_mem_parse_size(NULL, 0, &v, &err), HR_ERR_INVALID);
    assert_int_equal(hr_mem_parse_size("1G", 0, &v, NULL), HR_OK); /* err may be NULL */
}

static void test_format_bytes(void **state)
{
    (void)state;
    char b[32];
    assert_string_equal(hr_mem_format_bytes(12, 1, b, sizeof(b)), "12 B");
    assert_string_equal(hr_mem_format_bytes(512 * MiB, 1, b, sizeof(b)), "512.0 MiB");
    assert_string_equal(hr_mem_format_bytes(7 * GiB + GiB / 2, 1, b, sizeof(b)), "7.5 GiB");
    assert_string_equal(hr_mem_format_bytes(GiB + GiB / 5, 2, b, sizeof(b)), "1.20 GiB");
}

/* ---- probe parsers and the fixture filesystem ---- */

static void test_probe_parsers(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_true(hr_mem_parse_statm("12345 678 90 1 0 2 0\n", 4096, &v));
    assert_int_equal(v, 678 * 4096);
    v = 7;
    assert_false(hr_mem_parse_statm("", 4096, &v));
    assert_false(hr_mem_parse_statm("12345", 4096, &v));
    assert_false(hr_mem_parse_statm("12345 x", 4096, &v));
    assert_false(hr_mem_parse_statm("12345 67x 1", 4096, &v));
    assert_false(hr_mem_parse_statm("1 99999999999999999999 1", 4096, &v));
    assert_false(hr_mem_parse_statm("1 18446744073709551615 1", 4096, &v)); /* x page overflows */
    assert_false(hr_mem_parse_statm(NULL, 4096, &v));
    assert_int_equal(v, 7);

    const char *meminfo = "MemTotal:       16315316 kB\nMemFree:         1234 kB\n"
                          "MemAvailable:    9876543 kB\nBuffers: 1 kB\n";
    uint64_t total = 0, avail = 0;
    assert_int_equal(hr_mem_parse_meminfo(meminfo, &total, &avail),
                     HR_MEM_HAVE_TOTAL | HR_MEM_HAVE_AVAILABLE);
    assert_int_equal(total, 16315316ull * 1024);
    assert_int_equal(avail, 9876543ull * 1024);
    total = avail = 1;
    assert_int_equal(hr_mem_parse_meminfo("MemTotal: 100 kB\n", &total, &avail), HR_MEM_HAVE_TOTAL);
    assert_int_equal(avail, 1);
    assert_int_equal(
        hr_mem_parse_meminfo("MemTotal: lots kB\nMemAvailable: 5 MB\n", &total, &avail), 0);
    assert_int_equal(hr_mem_parse_meminfo("garbage\n\n\nMemAvailable:", &total, &avail), 0);
    assert_int_equal(hr_mem_parse_meminfo("", &total, &avail), 0);
    assert_int_equal(hr_mem_parse_meminfo("MemTotal: 99999999999999999999 kB\n", &total, &avail),
                     0);

    char path[64];
    assert_true(hr_mem_parse_cgroup_path("12:cpu,cpuacct:/foo\n0::/user.slice/app.scope\n", path,
                                         sizeof(path)));
    assert_string_equal(path, "/user.slice/app.scope");
    assert_true(hr_mem_parse_cgroup_path("0::/\n", path, sizeof(path)));
    assert_string_equal(path, "/");
    assert_false(hr_mem_parse_cgroup_path("12:memory:/docker/abc\n", path, sizeof(path)));
    assert_false(hr_mem_parse_cgroup_path("0::/../../etc\n", path, sizeof(path)));
    assert_false(hr_mem_parse_cgroup_path("0::relative\n", path, sizeof(path)));
    assert_false(hr_mem_parse_cgroup_path("0::/a/very/long/path/that/does/not/fit/in/the/buffer/"
                                          "given/to/it/at/all\n",
                                          path, 16));
    assert_false(hr_mem_parse_cgroup_path("", path, sizeof(path)));

    int is_max = -1;
    v = 0;
    assert_true(hr_mem_parse_cgroup_value("max\n", &v, &is_max));
    assert_int_equal(is_max, 1);
    assert_true(hr_mem_parse_cgroup_value("8589934592\n", &v, &is_max));
    assert_int_equal(is_max, 0);
    assert_int_equal(v, 8 * GiB);
    assert_false(hr_mem_parse_cgroup_value("maximum\n", &v, &is_max));
    assert_false(hr_mem_parse_cgroup_value("12a\n", &v, &is_max));
    assert_false(hr_mem_parse_cgroup_value("", &v, &is_max));
    assert_false(hr_mem_parse_cgroup_value("-5\n", &v, &is_max));
}

static void write_file(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s%s", root, rel);
    /* mkdir -p of the parent */
    for (char *p = path + strlen(root) + 1; *p; p++) {
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0700);
            *p = '/';
        }
    }
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void remove_tree(const char *root)
{
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    assert_int_equal(system(cmd), 0);
}

static void test_probe_fixture(void **state)
{
    (void)state;
    char root[] = "/tmp/hr-mem-probe-XXXXXX";
    assert_non_null(mkdtemp(root));
    struct hr_mem_probe p;
    struct hr_err err = {{0}};
    struct hr_mem_sample s;

    /* Nothing there: every field unknown, and no error. */
    assert_int_equal(hr_mem_probe_sys_init(root, &p, &err), HR_OK);
    assert_int_equal(hr_mem_probe_sample(&p, &s), HR_OK);
    assert_int_equal(s.known, 0);

    write_file(root, "/proc/self/statm", "1000 256 10 1 0 5 0\n");
    write_file(root, "/proc/meminfo", "MemTotal: 16777216 kB\nMemAvailable: 8388608 kB\n");
    write_file(root, "/proc/self/cgroup", "0::/a/b\n");
    write_file(root, "/sys/fs/cgroup/a/b/memory.current", "3221225472\n");
    write_file(root, "/sys/fs/cgroup/a/b/memory.max", "max\n");
    write_file(root, "/sys/fs/cgroup/a/memory.max", "6442450944\n");
    assert_int_equal(hr_mem_probe_sample(&p, &s), HR_OK);
    long page = sysconf(_SC_PAGESIZE);
    assert_int_equal(s.known, HR_MEM_HAVE_RSS | HR_MEM_HAVE_TOTAL | HR_MEM_HAVE_AVAILABLE |
                                  HR_MEM_HAVE_CGROUP_CURRENT | HR_MEM_HAVE_CGROUP_MAX);
    assert_int_equal(s.rss_bytes, 256 * (uint64_t)page);
    assert_int_equal(s.mem_total_bytes, 16 * GiB);
    assert_int_equal(s.mem_available_bytes, 8 * GiB);
    assert_int_equal(s.cgroup_current_bytes, 3 * GiB);
    /* The parent's limit binds us: the tightest on the way up wins. */
    assert_int_equal(s.cgroup_max_bytes, 6 * GiB);
    write_file(root, "/sys/fs/cgroup/a/b/memory.max", "4294967296\n");
    assert_int_equal(hr_mem_probe_sample(&p, &s), HR_OK);
    assert_int_equal(s.cgroup_max_bytes, 4 * GiB);

    /* "max" everywhere: no limit binds. Odd contents: unknown, not an error. */
    write_file(root, "/sys/fs/cgroup/a/b/memory.max", "max\n");
    write_file(root, "/sys/fs/cgroup/a/memory.max", "max\n");
    write_file(root, "/proc/self/statm", "\x01\x02 garbage");
    assert_int_equal(hr_mem_probe_sample(&p, &s), HR_OK);
    assert_false(s.known & HR_MEM_HAVE_CGROUP_MAX);
    assert_false(s.known & HR_MEM_HAVE_RSS);
    assert_true(s.known & HR_MEM_HAVE_CGROUP_CURRENT);
    hr_mem_probe_free(&p);
    hr_mem_probe_free(&p); /* twice is harmless */
    remove_tree(root);

    /* This machine: RSS is known wherever /proc is mounted. */
    assert_int_equal(hr_mem_probe_sys_init(NULL, &p, &err), HR_OK);
    assert_int_equal(hr_mem_probe_sample(&p, &s), HR_OK);
    assert_true(s.known & HR_MEM_HAVE_RSS);
    assert_true(s.rss_bytes > 0);
    hr_mem_probe_free(&p);
}

/* ---- ceiling and reserve ---- */

static void test_ceiling_math(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.limit_bytes = 12 * GiB;
    cfg.reserve_bytes = GiB / 2;
    struct hr_mem_sample s = {.known = HR_MEM_HAVE_RSS | HR_MEM_HAVE_TOTAL | HR_MEM_HAVE_AVAILABLE,
                              .rss_bytes = GiB,
                              .mem_total_bytes = 16 * GiB,
                              .mem_available_bytes = 10 * GiB};
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, s);
    struct hr_gov_view v;
    hr_gov_get_view(g, &v);
    assert_int_equal(v.measured_bytes, GiB);
    assert_int_equal(v.current_bytes, GiB);
    assert_int_equal(v.static_ceiling_bytes, 12 * GiB);
    assert_int_equal(v.dynamic_ceiling_bytes, GiB + 10 * GiB - GiB / 2);
    assert_int_equal(v.ceiling_bytes, v.dynamic_ceiling_bytes);
    assert_true(v.soft_bytes <= (uint64_t)(0.85 * (double)v.ceiling_bytes) + 1);
    assert_true(v.soft_bytes + 1 >= (uint64_t)(0.85 * (double)v.ceiling_bytes));

    /* Accounted above measured (weights not yet resident): current is the larger. */
    hr_gov_set_account(g, HR_GOV_WEIGHTS, 2 * GiB);
    hr_gov_set_account(g, HR_GOV_KV, GiB / 2);
    hr_gov_get_view(g, &v);
    assert_int_equal(v.accounted_bytes, 2 * GiB + GiB / 2);
    assert_int_equal(v.current_bytes, v.accounted_bytes);
    assert_int_equal(v.residual_bytes, 0);
    /* The dynamic ceiling moves with current: what is ours stays ours. */
    assert_int_equal(v.dynamic_ceiling_bytes, v.current_bytes + 10 * GiB - GiB / 2);

    /* Measured above accounted: the difference is the residual. */
    s.rss_bytes = 3 * GiB;
    set_sample(script, s);
    hr_gov_sample(g, &v);
    assert_int_equal(v.residual_bytes, GiB / 2);
    assert_int_equal(v.current_bytes, 3 * GiB);

    /* A cgroup limit binds: memory.current is measured, memory.max bounds the static ceiling. */
    s.known |= HR_MEM_HAVE_CGROUP_CURRENT | HR_MEM_HAVE_CGROUP_MAX;
    s.cgroup_current_bytes = 4 * GiB;
    s.cgroup_max_bytes = 8 * GiB;
    set_sample(script, s);
    hr_gov_sample(g, &v);
    assert_int_equal(v.measured_bytes, 4 * GiB);
    assert_int_equal(v.static_ceiling_bytes, 8 * GiB);
    assert_int_equal(v.ceiling_bytes, 8 * GiB);
    /* memory.current without a limit is not what is measured. */
    s.known &= ~(unsigned)HR_MEM_HAVE_CGROUP_MAX;
    set_sample(script, s);
    hr_gov_sample(g, &v);
    assert_int_equal(v.measured_bytes, 3 * GiB);

    /* Other processes grow: MemAvailable falls, so does the ceiling. */
    s.mem_available_bytes = GiB;
    set_sample(script, s);
    hr_gov_sample(g, &v);
    assert_int_equal(v.ceiling_bytes, 3 * GiB + GiB - GiB / 2);
    /* Less available than the reserve: the ceiling goes below current, never wraps. */
    s.mem_available_bytes = 0;
    s.rss_bytes = 100 * MiB;
    set_sample(script, s);
    hr_gov_set_account(g, HR_GOV_WEIGHTS, 0);
    hr_gov_set_account(g, HR_GOV_KV, 0);
    hr_gov_sample(g, &v);
    assert_int_equal(v.dynamic_ceiling_bytes, 0);
    assert_int_equal(v.level, HR_GOV_HARD);
    hr_gov_free(g);
    hr_mem_script_free(script);

    /* Without a limit the static ceiling is MemTotal; knowing nothing, there is none. */
    hr_gov_config_default(&cfg);
    g = gov_on(&script, &cfg, rss_only(GiB));
    hr_gov_get_view(g, &v);
    assert_int_equal(v.ceiling_bytes, UINT64_MAX);
    assert_int_equal(v.level, HR_GOV_OK);
    assert_int_equal(v.reserve_bytes, 512 * MiB); /* auto, MemTotal unknown */
    /* The auto reserve: MemTotal / 32 within [256 MiB, 2 GiB]. */
    struct {
        uint64_t total, reserve;
    } r[] = {{16 * GiB, 512 * MiB}, {4 * GiB, 256 * MiB}, {256 * GiB, 2 * GiB}, {32 * GiB, GiB}};
    for (size_t i = 0; i < 4; i++) {
        struct hr_mem_sample t = {.known = HR_MEM_HAVE_RSS | HR_MEM_HAVE_TOTAL,
                                  .rss_bytes = GiB,
                                  .mem_total_bytes = r[i].total};
        set_sample(script, t);
        hr_gov_sample(g, &v);
        assert_int_equal(v.reserve_bytes, r[i].reserve);
        assert_int_equal(v.static_ceiling_bytes, r[i].total);
    }
    hr_gov_free(g);
    hr_mem_script_free(script);
}

static void test_config_invalid(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    struct hr_mem_script *script;
    struct hr_err err = {{0}};
    assert_int_equal(hr_mem_script_init(&script, &err), HR_OK);
    struct hr_gov *g = (struct hr_gov *)1;
    hr_gov_config_default(&cfg);
    cfg.soft_frac = 0.97; /* above hard */
    assert_int_equal(hr_gov_init(&cfg, hr_mem_script_probe(script), &g, &err), HR_ERR_INVALID);
    assert_null(g);
    assert_non_null(strstr(err.msg, "soft"));
    hr_gov_config_default(&cfg);
    cfg.hard_frac = 1.5;
    assert_int_equal(hr_gov_init(&cfg, hr_mem_script_probe(script), &g, &err), HR_ERR_INVALID);
    hr_gov_config_default(&cfg);
    cfg.hysteresis_frac = -0.1;
    assert_int_equal(hr_gov_init(&cfg, hr_mem_script_probe(script), &g, &err), HR_ERR_INVALID);
    hr_gov_free(NULL);
    hr_mem_script_free(script);
}

/* ---- pressure levels and hysteresis ---- */

static void test_pressure_hysteresis(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.limit_bytes = 10 * GiB; /* no meminfo: the ceiling is the limit */
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, rss_only(GiB));
    struct hr_gov_view v;
    hr_gov_get_view(g, &v);
    const uint64_t soft = v.soft_bytes, hard = v.hard_bytes, h = v.ceiling_bytes / 50;
    assert_int_equal(v.ceiling_bytes, 10 * GiB);
    assert_true(soft > 8 * GiB && hard > soft);

    static const struct {
        int64_t rel; /* RSS relative to a threshold */
        int which;   /* 0: soft, 1: hard */
        enum hr_gov_level want;
    } steps[] = {
        {-1, 0, HR_GOV_OK},   /* just under soft */
        {0, 0, HR_GOV_SOFT},  /* on soft: up */
        {-1, 0, HR_GOV_SOFT}, /* just under: stays (no flap) */
        {0, 0, HR_GOV_SOFT},    {-1, 0, HR_GOV_SOFT},
        {-100, 0, HR_GOV_SOFT}, {0, 1, HR_GOV_HARD}, /* on hard: up */
        {-1, 1, HR_GOV_HARD},                        /* just under hard: stays */
        {0, 1, HR_GOV_HARD},    {-1, 1, HR_GOV_HARD},
        {-2, 2, HR_GOV_HARD}, /* exactly hard - h: not below yet */
        {-3, 2, HR_GOV_SOFT}, /* below hard - h: down one level */
        {-2, 3, HR_GOV_SOFT}, /* exactly soft - h */
        {-3, 3, HR_GOV_OK},   /* below soft - h */
        {1, 1, HR_GOV_HARD},  /* ok straight to hard */
        {-5, 4, HR_GOV_OK},   /* hard straight to ok */
    };
    capture_begin();
    int transitions = 0;
    enum hr_gov_level prev = HR_GOV_OK;
    for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
        uint64_t base;
        int64_t rel = steps[i].rel;
        switch (steps[i].which) {
        case 0:
            base = soft;
            break;
        case 1:
            base = hard;
            break;
        case 2:
            base = hard - h;
            rel += 2;
            break;
        case 3:
            base = soft - h;
            rel += 2;
            break;
        default:
            base = GiB;
            rel = 0;
            break;
        }
        set_sample(script, rss_only((uint64_t)((int64_t)base + rel)));
        hr_gov_sample(g, &v);
        if (v.level != steps[i].want) {
            capture_end();
            fail_msg("step %zu: level %s, want %s", i, hr_gov_level_name(v.level),
                     hr_gov_level_name(steps[i].want));
        }
        transitions += v.level != prev;
        prev = v.level;
    }
    const char *log = capture_end();
    /* Exactly one line per transition, in DESIGN 4.9's format. */
    assert_int_equal(count_substr(log, "memory pressure "), transitions);
    assert_int_equal(transitions, 6);
    assert_int_equal(count_substr(log, "memory pressure ok -> soft (current "), 1);
    assert_int_equal(count_substr(log, "memory pressure soft -> hard"), 1);
    assert_int_equal(count_substr(log, "memory pressure hard -> soft"), 1);
    assert_int_equal(count_substr(log, "memory pressure soft -> ok"), 1);
    assert_int_equal(count_substr(log, "memory pressure ok -> hard"), 1);
    assert_int_equal(count_substr(log, "memory pressure hard -> ok"), 1);
    assert_non_null(strstr(log, "GiB, soft 8.5 GiB, hard 9.5 GiB, ceiling 10.0 GiB)"));
    struct hr_mem_counters *c = hr_gov_counters(g);
    assert_int_equal(hr_mem_counter_get(&c->pressure_to_soft_total), 2);
    assert_int_equal(hr_mem_counter_get(&c->pressure_to_hard_total), 2);
    assert_int_equal(hr_mem_counter_get(&c->memory_pressure_level), 0);
    assert_int_equal(hr_mem_counter_get(&c->memory_peak_bytes), hard + 1);
    assert_int_equal(hr_mem_counter_get(&c->memory_ceiling_bytes), 10 * GiB);
    hr_gov_free(g);
    hr_mem_script_free(script);
}

/* A value wobbling around a threshold produces one transition, not one per wobble. */
static void test_pressure_no_flap(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.limit_bytes = 9 * GiB;
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, rss_only(GiB));
    struct hr_gov_view v;
    hr_gov_get_view(g, &v);
    capture_begin();
    for (int i = 0; i < 200; i++) {
        /* Up to 1.5% of the ceiling either side of soft: inside the 2% band. */
        uint64_t wobble = (uint64_t)(i % 7) * (v.ceiling_bytes / 100) / 4;
        set_sample(script, rss_only(v.soft_bytes + (i % 2 ? wobble : 0) - (i % 2 ? 0 : wobble)));
        hr_gov_sample(g, NULL);
    }
    const char *log = capture_end();
    assert_int_equal(count_substr(log, "memory pressure "), 1);
    assert_int_equal(hr_mem_counter_get(&hr_gov_counters(g)->pressure_to_soft_total), 1);
    hr_gov_free(g);
    hr_mem_script_free(script);
}

/* ---- the residual tracker (DESIGN 4.5, the seed's numbers) ---- */

static uint64_t gib(double x)
{
    return (uint64_t)(x * (double)GiB);
}

static void test_residual_seed_release_charged(void **state)
{
    (void)state;
    struct hr_mem_residual t;
    hr_mem_residual_init(&t, 64, 0);
    /* A 512-token chunk released 6.34 GiB; the next 2048-token chunk's static
     * estimate is 11.18 GiB. The seed's process then grew 17.16 GiB. */
    hr_mem_residual_observe(&t, 512, -(int64_t)gib(6.34));
    assert_int_equal(t.charge_bytes, gib(6.34));
    assert_int_equal(t.n_samples, 0);
    uint64_t p = hr_mem_residual_predict_with(&t, 2048, gib(11.18));
    assert_true(p >= gib(17.52) - 1);
    assert_int_equal(p, gib(11.18) + gib(6.34));
    assert_true(p >= gib(17.16));
}

static void test_residual_seed_no_double_count(void **state)
{
    (void)state;
    struct hr_mem_residual t;
    hr_mem_residual_init(&t, 64, 0);
    /* A positive sample whose rate predicts 11.83 GiB for the next 1024 tokens. */
    hr_mem_residual_observe(&t, 1024, (int64_t)gib(11.83));
    hr_mem_residual_observe(&t, 1024, -(int64_t)gib(6.86)); /* then a release */
    assert_int_equal(t.charge_bytes, gib(6.86));
    uint64_t p = hr_mem_residual_predict_with(&t, 1024, gib(4.11));
    /* max(11.83, 4.11, 4.11 + 6.86 = 10.97) = 11.83, not 11.83 + 6.86 = 18.69. */
    assert_true(p >= gib(11.83) - 1 && p <= gib(11.83) + 1);
    assert_true(p < gib(18.69) - GiB);
    /* The seed observed 7.54 GiB next: covered. */
    assert_true(p >= gib(7.54));
}

static void test_residual_tail_release_and_skipped_clear(void **state)
{
    (void)state;
    struct hr_mem_residual t;
    hr_mem_residual_init(&t, 64, 0);
    /* A 17-token tail (under the 64-token minimum) releasing 6 GB: charged,
     * though the sample is skipped for the rate. */
    hr_mem_residual_observe(&t, 17, -6000000000ll);
    assert_int_equal(t.charge_bytes, 6000000000ull);
    assert_int_equal(t.n_skipped, 1);
    assert_int_equal(t.n_samples, 0);
    assert_false(t.seeded);
    assert_int_equal(hr_mem_residual_predict_with(&t, 2048, 0), 6000000000ull);
    /* A positive delta on a skipped sample (another short chunk) clears it. */
    hr_mem_residual_observe(&t, 8, 4096);
    assert_int_equal(t.charge_bytes, 0);
    assert_int_equal(t.n_skipped, 2);
    assert_false(t.seeded); /* and it did not become a rate sample */
    assert_int_equal(hr_mem_residual_predict_with(&t, 2048, 0), 0);
    /* A zero delta neither charges nor clears. */
    hr_mem_residual_observe(&t, 128, -1000);
    hr_mem_residual_observe(&t, 128, 0);
    assert_int_equal(t.charge_bytes, 1000);
    /* A later release replaces, not adds to, the charge (one-shot). */
    hr_mem_residual_observe(&t, 128, -500);
    assert_int_equal(t.charge_bytes, 500);
    assert_int_equal(t.n_releases, 3);
}

static void test_residual_ewma_outlier_reset(void **state)
{
    (void)state;
    struct hr_mem_residual t;
    hr_mem_residual_init(&t, 64, 0);
    hr_mem_residual_observe(&t, 100, 1000); /* rate 10 seeds the EWMA */
    assert_true(t.seeded);
    assert_true(t.ewma_bytes_per_token == 10.0);
    hr_mem_residual_observe(&t, 100, 2000); /* rate 20: 0.3 x 20 + 0.7 x 10 = 13 */
    assert_true(t.ewma_bytes_per_token > 12.999 && t.ewma_bytes_per_token < 13.001);
    assert_true(t.last_rate_bytes_per_token == 20.0);
    assert_int_equal(hr_mem_residual_predict(&t, 100), 2000); /* max(last, ewma) x n */
    hr_mem_residual_observe(&t, 100, 500); /* rate 5: 0.3 x 5 + 0.7 x 13 = 10.6 */
    assert_true(t.ewma_bytes_per_token > 10.599 && t.ewma_bytes_per_token < 10.601);
    assert_int_equal(hr_mem_residual_predict(&t, 100), 1060); /* ewma above last now */
    /* Over 8x the EWMA (84.8): counted, not blended, but it is the last rate. */
    hr_mem_residual_observe(&t, 100, 10000);
    assert_int_equal(t.n_outliers, 1);
    assert_true(t.ewma_bytes_per_token > 10.599 && t.ewma_bytes_per_token < 10.601);
    assert_int_equal(hr_mem_residual_predict(&t, 10), 1000);
    /* Exactly 8x is not an outlier. */
    double e = t.ewma_bytes_per_token;
    hr_mem_residual_observe(&t, 100, (int64_t)(8 * e * 100));
    assert_int_equal(t.n_outliers, 1);
    assert_int_equal(t.n_samples, 5);
    /* Rate samples only from chunks >= the minimum. */
    hr_mem_residual_observe(&t, 63, 1000000);
    assert_int_equal(t.n_samples, 5);
    /* The static model is a floor. */
    struct hr_mem_residual s;
    hr_mem_residual_init(&s, 64, 3.0);
    assert_int_equal(hr_mem_residual_predict(&s, 100), 300);
    hr_mem_residual_observe(&s, 64, -50);
    assert_int_equal(hr_mem_residual_predict(&s, 100), 350);
    /* Reset clears everything but the configuration. */
    hr_mem_residual_reset(&t);
    assert_false(t.seeded);
    assert_int_equal(t.charge_bytes, 0);
    assert_int_equal(t.n_samples, 0);
    assert_int_equal(t.n_outliers, 0);
    assert_int_equal(t.chunk_min_tokens, 64);
    assert_int_equal(hr_mem_residual_predict(&t, 1000), 0);
    hr_mem_residual_observe(&t, 100, 700); /* the first sample after a reset seeds again */
    assert_true(t.ewma_bytes_per_token == 7.0);
    /* Saturation instead of wrapping. */
    hr_mem_residual_observe(&t, 64, INT64_MIN);
    assert_int_equal(t.charge_bytes, (uint64_t)1 << 63);
    assert_int_equal(hr_mem_residual_predict_with(&t, 1, UINT64_MAX - 5), UINT64_MAX);
}

/* The tracker inside the governor: the step bracket measures d itself. */
static void test_residual_through_steps(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.limit_bytes = 100 * GiB;
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, rss_only(10 * GiB));
    hr_gov_set_account(g, HR_GOV_WEIGHTS, 8 * GiB);
    /* A 512-token step: RSS +3 GiB, of which KV (accounted) +1 GiB: d = +2 GiB. */
    assert_int_equal(hr_gov_step_begin(g), HR_OK);
    set_sample(script, rss_only(13 * GiB));
    hr_gov_set_account(g, HR_GOV_KV, GiB);
    int64_t d = 0;
    assert_int_equal(hr_gov_step_end(g, 512, &d), HR_OK);
    assert_int_equal(d, 2 * GiB);
    assert_int_equal(hr_gov_residual_predict(g, 512), 2 * GiB);
    /* A 32-token boundary step releasing 5 GiB: charged though under chunk_min. */
    hr_gov_step_begin(g);
    set_sample(script, rss_only(8 * GiB));
    hr_gov_step_end(g, 32, &d);
    assert_int_equal(d, -5 * (int64_t)GiB);
    struct hr_mem_residual t;
    hr_gov_residual_get(g, &t);
    assert_int_equal(t.charge_bytes, 5 * GiB);
    assert_int_equal(hr_gov_residual_predict(g, 256), 5 * GiB); /* max(1 GiB, 5 GiB) */
    hr_gov_residual_reset(g);
    assert_int_equal(hr_gov_residual_predict(g, 256), 0);
    /* An end without a begin feeds nothing. */
    hr_gov_step_end(g, 512, &d);
    assert_int_equal(d, 0);
    hr_gov_free(g);
    hr_mem_script_free(script);
}

/* ---- chunk sizing ---- */

/* A synthetic plan: a fixed part plus per-token bytes that grow with kv_len
 * (the seed's attention matrix did; ours does not, but the sizer must not care). */
struct plan_model {
    uint64_t fixed;
    uint64_t per_token;
    uint64_t per_token_per_kv; /* x kv_len */
    uint64_t kv_len;
    int calls;
};

static uint64_t plan_fn(void *ctx, uint32_t n)
{
    struct plan_model *m = ctx;
    m->calls++;
    if (n == 0) return 0;
    return m->fixed + (uint64_t)n * (m->per_token + m->per_token_per_kv * m->kv_len);
}

static int fits(struct hr_gov *g, const struct hr_gov_chunk_req *r, struct plan_model *m,
                uint32_t n)
{
    struct hr_gov_view v;
    hr_gov_get_view(g, &v);
    return v.current_bytes + r->placed_bytes + plan_fn(m, n) + hr_gov_residual_predict(g, n) <=
           v.hard_bytes;
}

static void test_chunk_sizing(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.limit_bytes = 10 * GiB; /* hard = 9.5 GiB */
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, rss_only(6 * GiB));
    struct plan_model m = {
        .fixed = 64 * MiB, .per_token = 256 * KiB, .per_token_per_kv = 16, .kv_len = 0};
    struct hr_gov_chunk_req r = {.request_id = 12,
                                 .tokens_left = 100000,
                                 .kv_len = 0,
                                 .chunk_min = 64,
                                 .chunk_max = 2048,
                                 .placed_bytes = 0};
    capture_begin();
    /* Room for the whole 2048 (64 MiB + 512 MiB): no throttle. */
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 2048);

    /* As kv_len grows the per-token cost grows and the chunk shrinks; each
     * answer is a multiple of 16 that fits while 16 more would not. */
    uint32_t prev = 2048;
    for (uint64_t kv = 16384; kv <= 262144; kv *= 2) {
        m.kv_len = r.kv_len = kv;
        uint32_t n = hr_gov_size_chunk(g, &r, plan_fn, &m);
        assert_true(n <= prev);
        assert_true(n % 16 == 0);
        if (n > 0) {
            assert_true(n >= r.chunk_min);
            assert_true(fits(g, &r, &m, n));
        }
        if (n < 2048) assert_false(fits(g, &r, &m, n + 16));
        prev = n;
    }
    assert_true(prev < 2048);

    /* Headroom returns (RSS falls): the chunk recovers. */
    m.kv_len = r.kv_len = 131072;
    uint32_t tight = hr_gov_size_chunk(g, &r, plan_fn, &m);
    set_sample(script, rss_only(GiB));
    hr_gov_sample(g, NULL);
    uint32_t roomy = hr_gov_size_chunk(g, &r, plan_fn, &m);
    assert_true(roomy > tight);
    assert_int_equal(roomy, 2048);

    /* The final remainder is taken whole, not rounded. */
    r.tokens_left = 37;
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 37);
    r.tokens_left = 1000;
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 1000);
    /* A remainder shorter than chunk_min still runs when it fits. */
    r.tokens_left = 5;
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 5);

    /* Nothing >= chunk_min fits: 0. Placed bytes (decodes) count against room. */
    r.tokens_left = 100000;
    m.kv_len = r.kv_len = 0;
    struct hr_gov_view v;
    hr_gov_get_view(g, &v);
    r.placed_bytes = v.hard_bytes - v.current_bytes - m.fixed - 63 * m.per_token;
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 0);
    r.placed_bytes -= m.per_token; /* now exactly 64 tokens fit */
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 64);
    r.placed_bytes -= 20 * m.per_token; /* 84 fit: rounded to 80 */
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 80);
    /* Over the target already: 0, even for a tiny remainder. */
    set_sample(script, rss_only(v.hard_bytes + 1));
    hr_gov_sample(g, NULL);
    r.placed_bytes = 0;
    r.tokens_left = 3;
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 0);
    r.tokens_left = 0;
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 0);
    const char *log = capture_end();
    (void)log;

    struct hr_mem_counters *c = hr_gov_counters(g);
    assert_true(hr_mem_counter_get(&c->prefill_chunks_throttled_total) >= 4);
    assert_true(hr_mem_counter_get(&c->prefill_chunks_total) >
                hr_mem_counter_get(&c->prefill_chunks_throttled_total));
    hr_gov_free(g);
    hr_mem_script_free(script);
}

/* The throttle line, in DESIGN 4.9's words and numbers. */
static void test_chunk_log_line(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.hard_frac = 1.0;                     /* so the headroom is exactly limit - current */
    cfg.limit_bytes = 8 * GiB + GiB / 5 + 0; /* current 7 GiB: headroom 1.20 GiB */
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, rss_only(7 * GiB));
    uint64_t headroom = cfg.limit_bytes - 7 * GiB;
    /* 650 tokens would fill it exactly; 640 is the multiple of 16 below. */
    struct plan_model m = {.per_token = headroom / 650};
    struct hr_gov_chunk_req r = {.request_id = 12,
                                 .tokens_left = 200000,
                                 .kv_len = 107712,
                                 .chunk_min = 64,
                                 .chunk_max = 2048};
    capture_begin();
    uint32_t n = hr_gov_size_chunk(g, &r, plan_fn, &m);
    const char *log = capture_end();
    assert_int_equal(n, 640);
    assert_non_null(strstr(log, "prefill chunk 2048 -> 640 tokens (request 12, kv_len 107712, "
                                "headroom 1.20 GiB, planned 1.18 GiB)"));
    assert_int_equal(count_substr(log, "prefill chunk"), 1);
    /* An unthrottled chunk logs nothing. */
    r.chunk_max = 512;
    capture_begin();
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 512);
    log = capture_end();
    assert_int_equal(count_substr(log, "prefill chunk"), 0);
    hr_gov_free(g);
    hr_mem_script_free(script);
}

/* The seed's trace: a 32-token boundary chunk released 21.33 GiB; the request
 * for 2048 tokens was cut to the chunk that fits with the charge counted once,
 * and the next positive delta cleared the charge. */
static void test_chunk_with_reclaim_charge(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.hard_frac = 1.0;
    cfg.limit_bytes = 120 * GiB;
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, rss_only(110 * GiB));
    struct plan_model m = {.per_token = 5 * MiB}; /* 2048 tokens: 10 GiB, fits exactly */
    struct hr_gov_chunk_req r = {.request_id = 1,
                                 .tokens_left = 300000,
                                 .kv_len = 107712,
                                 .chunk_min = 64,
                                 .chunk_max = 2048};
    capture_begin();
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 2048);
    hr_gov_step_begin(g);
    set_sample(script, rss_only(110 * GiB - 4 * GiB)); /* the 32-token chunk releases 4 GiB */
    hr_gov_step_end(g, 32, NULL);
    /* 14 GiB of room now, but the 4 GiB charge is expected back: plan(n) +
     * 4 GiB <= 14 GiB -> n = 2048 still; with a 9 GiB release: */
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 2048);
    hr_gov_step_begin(g);
    set_sample(script, rss_only(106 * GiB - 9 * GiB));
    hr_gov_step_end(g, 32, NULL);
    /* 23 GiB of room, 9 GiB charge: 14 GiB for the plan -> still 2048. Tighten the limit. */
    set_sample(script, rss_only(112 * GiB));
    hr_gov_sample(g, NULL); /* the sample alone does not feed the tracker */
    /* 8 GiB of room, 9 GiB charge: nothing fits until the charge clears. */
    assert_int_equal(hr_gov_size_chunk(g, &r, plan_fn, &m), 0);
    hr_gov_step_begin(g);
    set_sample(script, rss_only(112 * GiB + 64 * MiB)); /* a positive delta on a short step */
    hr_gov_step_end(g, 16, NULL);
    uint32_t n = hr_gov_size_chunk(g, &r, plan_fn, &m);
    capture_end();
    /* Room 8 GiB - 64 MiB, no charge, no rate sample: (8 GiB - 64 MiB) / 5 MiB = 1625.6 -> 1616. */
    assert_int_equal(n, 1616);
    hr_gov_free(g);
    hr_mem_script_free(script);
}

/* ---- admission ---- */

struct admit_model {
    uint64_t kv_per_token;
    uint64_t plan_fixed, plan_per_token;
};

static uint64_t admit_kv(void *ctx, uint32_t n)
{
    const struct admit_model *m = ctx;
    /* KV comes in 32-token blocks. */
    return (uint64_t)((n + 31) / 32) * 32 * m->kv_per_token;
}

static uint64_t admit_plan(void *ctx, uint32_t n)
{
    const struct admit_model *m = ctx;
    return m->plan_fixed + (uint64_t)n * m->plan_per_token;
}

static void test_admission(void **state)
{
    (void)state;
    struct admit_model am = {
        .kv_per_token = 96 * KiB, .plan_fixed = 200 * MiB, .plan_per_token = 300 * KiB};
    struct hr_gov_admit_req req = {.n_prompt = 32768,
                                   .n_ctx = 131072,
                                   .chunk_min = 512,
                                   .weights_bytes = 3 * GiB,
                                   .residual_floor_bytes = 150 * MiB,
                                   .kv_bytes = admit_kv,
                                   .plan_bytes = admit_plan,
                                   .ctx = &am};
    const uint64_t limit = 5 * GiB;
    struct hr_gov_admit_result res;
    hr_gov_admit_compute(&req, limit, &res);
    /* 3 GiB + KV(32769) (3.0 GiB) + plan(512) + floor > 5 GiB: refused. */
    assert_int_equal(res.verdict, HR_GOV_REFUSE_MEMORY);
    assert_int_equal(res.n_prompt, 32768);
    assert_int_equal(res.limit_bytes, limit);
    assert_int_equal(res.estimated_bytes, hr_gov_need_alone(&req, 32768));
    assert_int_equal(res.estimated_bytes,
                     3 * GiB + admit_kv(&am, 32769) + admit_plan(&am, 512) + 150 * MiB);
    /* M is exactly the largest that fits. */
    uint32_t m = res.max_prompt;
    assert_true(m > 0 && m < 32768);
    assert_true(hr_gov_need_alone(&req, m) <= limit);
    assert_true(hr_gov_need_alone(&req, m + 1) > limit);
    /* The prompt M itself is admitted. */
    req.n_prompt = m;
    hr_gov_admit_compute(&req, limit, &res);
    assert_int_equal(res.verdict, HR_GOV_ADMIT);
    assert_int_equal(res.max_prompt, m);
    req.n_prompt = m + 1;
    hr_gov_admit_compute(&req, limit, &res);
    assert_int_equal(res.verdict, HR_GOV_REFUSE_MEMORY);
    /* A short prompt's first chunk is the whole prompt, not chunk_min. */
    req.n_prompt = 10;
    assert_int_equal(hr_gov_need_alone(&req, 10),
                     3 * GiB + admit_kv(&am, 11) + admit_plan(&am, 10) + 150 * MiB);

    /* The context bound: N + 1 <= n_ctx, and M respects it. */
    req.n_ctx = 4096;
    req.n_prompt = 4096;
    hr_gov_admit_compute(&req, 100 * GiB, &res);
    assert_int_equal(res.verdict, HR_GOV_REFUSE_CONTEXT);
    assert_int_equal(res.max_prompt, 4095);
    req.n_prompt = 4095;
    hr_gov_admit_compute(&req, 100 * GiB, &res);
    assert_int_equal(res.verdict, HR_GOV_ADMIT);
    /* Both bounds: the tighter one gives M. */
    req.n_prompt = 5000;
    hr_gov_admit_compute(&req, 3 * GiB + 500 * MiB, &res);
    assert_int_equal(res.verdict, HR_GOV_REFUSE_CONTEXT);
    assert_true(res.max_prompt < 4095);
    assert_true(hr_gov_need_alone(&req, res.max_prompt) <= 3 * GiB + 500 * MiB);
    assert_true(hr_gov_need_alone(&req, res.max_prompt + 1) > 3 * GiB + 500 * MiB);
    /* Not even one token fits: M = 0. */
    hr_gov_admit_compute(&req, GiB, &res);
    assert_int_equal(res.max_prompt, 0);
    req.n_ctx = 0;
    hr_gov_admit_compute(&req, 100 * GiB, &res);
    assert_int_equal(res.verdict, HR_GOV_REFUSE_CONTEXT);
    assert_int_equal(res.max_prompt, 0);

    /* Through the governor: the hard watermark of the static ceiling, and the
     * measured residual as the floor. */
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.limit_bytes = 8 * GiB;
    struct hr_mem_sample s = {.known = HR_MEM_HAVE_RSS | HR_MEM_HAVE_AVAILABLE,
                              .rss_bytes = 3 * GiB + 200 * MiB,
                              .mem_available_bytes = GiB};
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, s);
    hr_gov_set_account(g, HR_GOV_WEIGHTS, 3 * GiB);
    req.n_ctx = 131072;
    req.n_prompt = 32768;
    req.residual_floor_bytes = HR_GOV_RESIDUAL_FLOOR_AUTO;
    hr_gov_admit(g, &req, &res);
    struct hr_gov_view v;
    hr_gov_get_view(g, &v);
    assert_true(v.ceiling_bytes < 5 * GiB); /* squeezed by other processes... */
    assert_int_equal(res.limit_bytes,
                     (uint64_t)(0.95 * (double)(8 * GiB))); /* ...not refused for it */
    assert_int_equal(res.verdict, HR_GOV_ADMIT);
    assert_int_equal(res.estimated_bytes,
                     3 * GiB + admit_kv(&am, 32769) + admit_plan(&am, 512) + 200 * MiB);
    hr_gov_free(g);
    hr_mem_script_free(script);
}

/* ---- the reclaim chain ---- */

struct stage_log {
    char order[16];
    int n;
};

struct stage {
    struct stage_log *log;
    char tag;
    uint64_t gives;
    uint64_t asked;
};

static uint64_t stage_fn(void *ctx, uint64_t want)
{
    struct stage *s = ctx;
    s->log->order[s->log->n++] = s->tag;
    s->asked = want;
    return s->gives;
}

static void test_reclaim_chain(void **state)
{
    (void)state;
    struct stage_log log = {{0}, 0};
    struct stage trim = {&log, 't', 30, 0}, evict = {&log, 'e', 80, 0},
                 preempt = {&log, 'p', 500, 0};
    struct hr_mem_reclaim chain;
    hr_mem_reclaim_init(&chain);
    assert_int_equal(hr_mem_reclaim_add(&chain, "trim", stage_fn, &trim), HR_OK);
    assert_int_equal(hr_mem_reclaim_add(&chain, "evict", stage_fn, &evict), HR_OK);
    assert_int_equal(hr_mem_reclaim_add(&chain, "preempt", stage_fn, &preempt), HR_OK);
    assert_int_equal(hr_mem_reclaim_add(&chain, "x", NULL, NULL), HR_ERR_INVALID);

    struct hr_mem_reclaim_report rep;
    capture_begin();
    /* 100 wanted: trim gives 30, evict 80: enough, preemption never runs. */
    assert_int_equal(hr_mem_reclaim_run(&chain, 100, &rep), 110);
    const char *text = capture_end();
    assert_string_equal(log.order, "te");
    assert_int_equal(trim.asked, 100);
    assert_int_equal(evict.asked, 70); /* each stage is asked for what is still missing */
    assert_int_equal(rep.n_stages_run, 2);
    assert_int_equal(rep.stage_freed_bytes[0], 30);
    assert_int_equal(rep.stage_freed_bytes[1], 80);
    assert_non_null(
        strstr(text, "memory reclaim: wanted 100 B, freed 110 B (trim 30 B, evict 80 B)"));

    /* Trim alone suffices. */
    memset(&log, 0, sizeof(log));
    capture_begin();
    assert_int_equal(hr_mem_reclaim_run(&chain, 30, &rep), 30);
    capture_end();
    assert_string_equal(log.order, "t");

    /* Everything runs and still falls short: the total is reported. */
    memset(&log, 0, sizeof(log));
    capture_begin();
    assert_int_equal(hr_mem_reclaim_run(&chain, 10000, &rep), 610);
    capture_end();
    assert_string_equal(log.order, "tep");
    assert_int_equal(preempt.asked, 10000 - 110);

    /* Nothing wanted: nothing runs, nothing logged. */
    memset(&log, 0, sizeof(log));
    capture_begin();
    assert_int_equal(hr_mem_reclaim_run(&chain, 0, NULL), 0);
    text = capture_end();
    assert_int_equal(log.n, 0);
    assert_int_equal(count_substr(text, "reclaim"), 0);

    for (int i = 3; i < HR_MEM_RECLAIM_MAX_STAGES; i++)
        assert_int_equal(hr_mem_reclaim_add(&chain, "more", stage_fn, &trim), HR_OK);
    assert_int_equal(hr_mem_reclaim_add(&chain, "one too many", stage_fn, &trim), HR_ERR_LIMIT);
}

/* ---- the external squeeze ---- */

static void test_external_squeeze(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.limit_bytes = 16 * GiB;
    cfg.reserve_bytes = GiB;
    struct hr_mem_sample s = {.known = HR_MEM_HAVE_RSS | HR_MEM_HAVE_AVAILABLE | HR_MEM_HAVE_TOTAL,
                              .rss_bytes = 6 * GiB,
                              .mem_available_bytes = 20 * GiB,
                              .mem_total_bytes = 32 * GiB};
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, s);
    hr_gov_set_need(g, 512 * MiB); /* the running decodes' next step */
    struct hr_gov_view v;
    hr_gov_sample(g, &v);
    assert_int_equal(v.ceiling_bytes, 16 * GiB);
    assert_int_equal(v.reclaim_bytes, 0);
    assert_int_equal(v.level, HR_GOV_OK);

    /* Another process grows: 2 GiB left available. dynamic = 6 + 2 - 1 = 7 GiB. */
    s.mem_available_bytes = 2 * GiB;
    set_sample(script, s);
    capture_begin();
    hr_gov_sample(g, &v);
    const char *log = capture_end();
    assert_int_equal(v.dynamic_ceiling_bytes, 7 * GiB);
    assert_int_equal(v.ceiling_bytes, 7 * GiB);
    assert_int_equal(v.level, HR_GOV_SOFT); /* 6 of 7 GiB: above 0.85 */
    assert_non_null(strstr(log, "memory pressure ok -> soft"));
    /* current + need = 6.5 GiB > hard (6.65)? no; squeeze harder. */
    assert_int_equal(v.reclaim_bytes, 0);
    s.mem_available_bytes = GiB + GiB / 4; /* dynamic = 6.25 GiB, hard = 5.9375 GiB */
    set_sample(script, s);
    capture_begin();
    hr_gov_sample(g, &v);
    capture_end();
    assert_int_equal(v.level, HR_GOV_HARD);
    assert_int_equal(v.reclaim_bytes, 6 * GiB + 512 * MiB - v.hard_bytes);
    /* The other process exits: room again, nothing to reclaim. */
    s.mem_available_bytes = 20 * GiB;
    set_sample(script, s);
    capture_begin();
    hr_gov_sample(g, &v);
    capture_end();
    assert_int_equal(v.reclaim_bytes, 0);
    assert_int_equal(v.level, HR_GOV_OK);
    hr_gov_free(g);
    hr_mem_script_free(script);
}

/* ---- the sampling thread ---- */

struct sampler_seen {
    _Atomic int n;
    _Atomic int n_reclaim;
    struct hr_gov *g;
};

static void on_sample(void *ctx, const struct hr_gov_view *v)
{
    struct sampler_seen *s = ctx;
    if (v->reclaim_bytes > 0) atomic_fetch_add(&s->n_reclaim, 1);
    /* The callback runs unlocked: calling the governor from it is allowed. */
    struct hr_gov_view w;
    hr_gov_get_view(s->g, &w);
    atomic_fetch_add(&s->n, 1);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static void test_sampler_thread(void **state)
{
    (void)state;
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    cfg.limit_bytes = 10 * GiB;
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, rss_only(GiB));
    struct sampler_seen seen = {.g = g};
    atomic_init(&seen.n, 0);
    atomic_init(&seen.n_reclaim, 0);
    struct hr_err err = {{0}};
    assert_int_equal(hr_gov_sampler_start(g, 0, on_sample, &seen, &err), HR_ERR_INVALID);
    assert_int_equal(hr_gov_sampler_start(g, 1, on_sample, &seen, &err), HR_OK);
    assert_int_equal(hr_gov_sampler_start(g, 1, on_sample, &seen, &err), HR_ERR_INVALID);
    capture_begin();
    /* The engine thread keeps working while the sampler samples. */
    for (int i = 0; i < 2000 && atomic_load(&seen.n) < 5; i++) {
        hr_gov_set_account(g, HR_GOV_KV, (uint64_t)i * MiB);
        sleep_ms(1);
    }
    /* An external squeeze is seen by the sampler. */
    set_sample(script, rss_only(10 * GiB));
    for (int i = 0; i < 2000 && atomic_load(&seen.n_reclaim) == 0; i++) sleep_ms(1);
    hr_gov_sampler_stop(g);
    capture_end();
    int n = atomic_load(&seen.n);
    assert_true(n >= 5);
    assert_true(atomic_load(&seen.n_reclaim) >= 1);
    sleep_ms(5);
    assert_int_equal(atomic_load(&seen.n), n); /* stopped means stopped */
    hr_gov_sampler_stop(g);                    /* twice is harmless */
    /* Restart, and let hr_gov_free stop it. */
    assert_int_equal(hr_gov_sampler_start(g, 2, NULL, NULL, &err), HR_OK);
    sleep_ms(5);
    capture_begin();
    hr_gov_free(g);
    capture_end();
    hr_mem_script_free(script);
}

/* ---- counters ---- */

static void test_counters_text(void **state)
{
    (void)state;
    struct hr_mem_counters c;
    hr_mem_counters_init(&c);
    hr_mem_counter_set(&c.memory_ceiling_bytes, 9663676416ull);
    hr_mem_counter_set(&c.memory_pressure_level, 1);
    hr_mem_counter_add(&c.pressure_to_soft_total, 3);
    hr_mem_counter_add(&c.requests_refused_overloaded_total, 2);
    hr_mem_counter_set(&c.kv_blocks_total, 4096);
    hr_mem_counter_max(&c.step_plan_error_bytes_max, 100);
    hr_mem_counter_max(&c.step_plan_error_bytes_max, 40);
    char buf[8192];
    size_t n = hr_mem_counters_format(&c, buf, sizeof(buf));
    assert_int_equal(n, strlen(buf));
    assert_non_null(strstr(buf, "# HELP headroom_memory_ceiling_bytes "));
    assert_non_null(strstr(buf, "# TYPE headroom_memory_ceiling_bytes gauge\n"
                                "headroom_memory_ceiling_bytes 9663676416\n"));
    assert_non_null(strstr(buf, "\nheadroom_memory_pressure_level 1\n"));
    assert_non_null(strstr(buf, "# TYPE headroom_memory_pressure_transitions_total counter\n"
                                "headroom_memory_pressure_transitions_total{to=\"soft\"} 3\n"
                                "headroom_memory_pressure_transitions_total{to=\"hard\"} 0\n"));
    assert_non_null(strstr(buf, "headroom_requests_refused_total{reason=\"too_long\"} 0\n"
                                "headroom_requests_refused_total{reason=\"overloaded\"} 2\n"));
    assert_non_null(strstr(buf, "\nheadroom_step_plan_error_bytes_max 100\n"));
    assert_non_null(strstr(buf, "\nheadroom_kv_blocks_total 4096\n"));
    static const char *names[] = {"headroom_memory_ceiling_bytes",
                                  "headroom_memory_current_bytes",
                                  "headroom_memory_peak_bytes",
                                  "headroom_memory_pressure_level",
                                  "headroom_memory_pressure_transitions_total",
                                  "headroom_step_plan_error_bytes_max",
                                  "headroom_prefill_chunks_total",
                                  "headroom_prefill_chunks_throttled_total",
                                  "headroom_requests_admitted_total",
                                  "headroom_requests_refused_total",
                                  "headroom_requests_preempted_total",
                                  "headroom_requests_aborted_for_memory_total",
                                  "headroom_kv_blocks_used",
                                  "headroom_kv_blocks_total"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        char help[128], type[128];
        snprintf(help, sizeof(help), "# HELP %s ", names[i]);
        snprintf(type, sizeof(type), "# TYPE %s ", names[i]);
        assert_int_equal(count_substr(buf, help), 1);
        assert_int_equal(count_substr(buf, type), 1);
    }
    assert_int_equal(count_substr(buf, "# HELP "), 14);
    /* Every line is a comment or "name[{labels}] value". */
    int samples = 0;
    for (char *line = buf; *line;) {
        char *end = strchr(line, '\n');
        assert_non_null(end);
        if (line[0] != '#') {
            char *sp = memchr(line, ' ', (size_t)(end - line));
            assert_non_null(sp);
            for (char *d = sp + 1; d < end; d++) assert_true(*d >= '0' && *d <= '9');
            samples++;
        }
        line = end + 1;
    }
    assert_int_equal(samples, 16);
    /* Like snprintf: a short buffer is cut and NUL-terminated, the full length returned. */
    char small[64];
    assert_int_equal(hr_mem_counters_format(&c, small, sizeof(small)), n);
    assert_int_equal(strlen(small), sizeof(small) - 1);
    assert_int_equal(hr_mem_counters_format(&c, NULL, 0), n);

    /* The governor's own counters: plan error. */
    struct hr_gov_config cfg;
    hr_gov_config_default(&cfg);
    struct hr_mem_script *script;
    struct hr_gov *g = gov_on(&script, &cfg, rss_only(GiB));
    hr_gov_note_plan(g, 1000, 1200);
    hr_gov_note_plan(g, 1000, 900);
    assert_int_equal(hr_mem_counter_get(&hr_gov_counters(g)->step_plan_error_bytes_max), 200);
    hr_gov_free(g);
    hr_mem_script_free(script);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_size_good),
        cmocka_unit_test(test_size_bad),
        cmocka_unit_test(test_format_bytes),
        cmocka_unit_test(test_probe_parsers),
        cmocka_unit_test(test_probe_fixture),
        cmocka_unit_test(test_ceiling_math),
        cmocka_unit_test(test_config_invalid),
        cmocka_unit_test(test_pressure_hysteresis),
        cmocka_unit_test(test_pressure_no_flap),
        cmocka_unit_test(test_residual_seed_release_charged),
        cmocka_unit_test(test_residual_seed_no_double_count),
        cmocka_unit_test(test_residual_tail_release_and_skipped_clear),
        cmocka_unit_test(test_residual_ewma_outlier_reset),
        cmocka_unit_test(test_residual_through_steps),
        cmocka_unit_test(test_chunk_sizing),
        cmocka_unit_test(test_chunk_log_line),
        cmocka_unit_test(test_chunk_with_reclaim_charge),
        cmocka_unit_test(test_admission),
        cmocka_unit_test(test_reclaim_chain),
        cmocka_unit_test(test_external_squeeze),
        cmocka_unit_test(test_sampler_thread),
        cmocka_unit_test(test_counters_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
