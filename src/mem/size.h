/*
 * size.h - memory sizes as an operator writes them, and as we print them.
 *
 * `--memory-limit` and friends take a size string. The grammar is small and
 * strict, because a misread ceiling is a crash later, not an error now:
 *
 *     size    := number [space] [unit] | number [space] "%"
 *     number  := digits ["." digits]          (no sign, no exponent)
 *     unit    := "B"                          bytes
 *              | "K" | "M" | "G" | "T"        powers of 1024 (also "Ki", "KiB", ...)
 *              | "KB" | "MB" | "GB" | "TB"    powers of 1000
 *
 * Units are case-insensitive ("12g" = "12G" = "12GiB"). The one choice the
 * notation leaves open is "GB": we read it as 10^9, as SI says. Reading it
 * as 2^30 would hand a user who meant 10^9 a ceiling 7% higher than the one
 * they asked for, which is the unsafe direction; reading it as 10^9 when
 * they meant 2^30 only costs them 7% of headroom. A bare number is bytes.
 * A percentage is of `ram_total_bytes` (MemTotal), from 0 to 100 inclusive,
 * fractions allowed ("12.5%"). A fractional byte count rounds down.
 * Leading and trailing blanks are ignored. Zero is accepted: whether zero
 * makes sense is the caller's decision (a reserve may be 0; a limit not).
 *
 * Reentrant; any thread may call these.
 */
#ifndef HR_MEM_SIZE_H
#define HR_MEM_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"

/*
 * Parses `text` (NUL-terminated; NULL is an error) into `*bytes`.
 * `ram_total_bytes` is only used for percentages; 0 means unknown, and then a
 * percentage is an error. Returns HR_OK; HR_ERR_INVALID for text outside the
 * grammar, HR_ERR_RANGE for a value over UINT64_MAX bytes or a percentage
 * over 100, with a message quoting the text. `*bytes` is written only on
 * success.
 */
enum hr_status hr_mem_parse_size(const char *text, uint64_t ram_total_bytes, uint64_t *bytes,
                                 struct hr_err *err);

/*
 * Writes `bytes` as "7.9 GiB" / "512.0 MiB" / "12 B" with `decimals` digits
 * after the point (0 to 3) into buf, and returns buf. The unit is the
 * largest binary one the value reaches, so log lines stay short.
 */
char *hr_mem_format_bytes(uint64_t bytes, int decimals, char *buf, size_t cap);

#endif
