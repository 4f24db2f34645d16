/* log.c - timestamped single-write log lines; see log.h. */
#define _POSIX_C_SOURCE 200809L
#include "base/log.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static _Atomic int g_level = HR_LOG_INFO;

void hr_log_set_level(enum hr_log_level level)
{
    atomic_store(&g_level, (int)level);
}

enum hr_log_level hr_log_get_level(void)
{
    return (enum hr_log_level)atomic_load(&g_level);
}

int hr_log_parse_level(const char *name)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

void hr_log(enum hr_log_level level, const char *module, const char *fmt, ...)
{
    if ((int)level < atomic_load(&g_level))
        return;
    static const char *tags[] = {"debug", "info ", "warn ", "error"};
    char line[2048];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, ts.tv_nsec / 1000000, tags[level], module);
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n, fmt, ap);
    va_end(ap);
    if (n >= (int)sizeof(line) - 1)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    /* One write per line keeps lines whole across threads. */
    ssize_t w = write(STDERR_FILENO, line, (size_t)n);
    (void)w;
}
