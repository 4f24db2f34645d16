/*
 * sys.h - small facts about the running process that several commands and
 * benchmarks report: a monotonic clock, CPU time (ours and the machine's)
 * and the peak resident set size; and on/off switches from the environment.
 * Reentrant; any thread may call them.
 */
#ifndef HR_BASE_SYS_H
#define HR_BASE_SYS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" { /* cuda-kernels.cu reads the switches */
#endif

/* Seconds from CLOCK_MONOTONIC: for intervals, not dates. */
double hr_now_seconds(void);

/* CPU time in seconds used so far by the whole machine (user, nice, system,
 * irq, softirq, steal; /proc/stat) and by this process (/proc/self/stat).
 * The difference of the two over a measurement is other processes' load,
 * which benchmarks print so that a disturbed number can be recognised.
 * Both are 0 when /proc cannot be read. */
void hr_cpu_times(double *all_s, double *self_s);

/* Writes one byte of every page of [p, p + n_bytes) (zeros where it finds
 * zeros, so the contents do not change), making fresh anonymous memory
 * resident now rather than at first use: memory an account counts as
 * resident must be. Through a volatile pointer, because a compiler may
 * drop a memset that follows calloc. */
void hr_mem_touch(void *p, size_t n_bytes);

/* An on/off switch from the environment: 0 when `name` is set to "0", 1
 * otherwise (unset included). The A/B switches of the benchmarks. */
int hr_env_on(const char *name);

/* The process's peak RSS (VmHWM in /proc/self/status) in bytes; 0 if unknown. */
uint64_t hr_peak_rss_bytes(void);

#ifdef __cplusplus
}
#endif

#endif
