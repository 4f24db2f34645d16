/*
 * log.h - one line per event, to stderr, for an operator to read.
 *
 * Format: `2026-11-30T11:43:14.123Z info  gguf: opened demo.gguf (41.2 MiB)`.
 * The level is set once at start-up (`--log-level` / HEADROOM_LOG_LEVEL);
 * lines below it cost one comparison. Each line is written with a single
 * write(2), so lines from different threads never interleave.
 */
#ifndef HR_BASE_LOG_H
#define HR_BASE_LOG_H

enum hr_log_level { HR_LOG_DEBUG = 0, HR_LOG_INFO = 1, HR_LOG_WARN = 2, HR_LOG_ERROR = 3 };

void hr_log_set_level(enum hr_log_level level);
enum hr_log_level hr_log_get_level(void);

/* Parses "debug", "info", "warn" or "error"; returns -1 for anything else. */
int hr_log_parse_level(const char *name);

void hr_log(enum hr_log_level level, const char *module, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#define hr_log_debug(mod, ...) hr_log(HR_LOG_DEBUG, mod, __VA_ARGS__)
#define hr_log_info(mod, ...)  hr_log(HR_LOG_INFO, mod, __VA_ARGS__)
#define hr_log_warn(mod, ...)  hr_log(HR_LOG_WARN, mod, __VA_ARGS__)
#define hr_log_error(mod, ...) hr_log(HR_LOG_ERROR, mod, __VA_ARGS__)

#endif
