/*
 * sys.h - small facts about the running process that several commands and
 * benchmarks report: a monotonic clock and the peak resident set size.
 * Reentrant; any thread may call them.
 */
#ifndef HR_BASE_SYS_H
#define HR_BASE_SYS_H

#include <stdint.h>

/* Seconds from CLOCK_MONOTONIC: for intervals, not dates. */
double hr_now_seconds(void);

/* The process's peak RSS (VmHWM in /proc/self/status) in bytes; 0 if unknown. */
uint64_t hr_peak_rss_bytes(void);

#endif
