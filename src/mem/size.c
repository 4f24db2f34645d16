/*
 * size.c - parsing and printing memory sizes; the grammar and the "GB"
 * decision are in size.h.
 *
 * The integer part is parsed exactly in 64 bits with an overflow check
 * before every multiply-add. The fraction is parsed as a double: it is
 * below 1, and multiplied by at most 2^40 (or 10^12) it stays well inside
 * a double's 53-bit mantissa, so the rounded-down result is exact to the
 * byte for every input a person would type.
 */
#include "mem/size.h"

#include <stdio.h>
#include <string.h>

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static char lower(char c)
{
    return (c >= 'A' && c <= 'Z') ? (char)(c - 'A' + 'a') : c;
}

/*
 * The multiplier a unit spells, or 0 when it spells none. `unit` is the
 * text after the number and its blank, with trailing blanks removed, of
 * length n.
 */
static uint64_t unit_multiplier(const char *unit, size_t n)
{
    if (n == 0) return 1;
    char u[4] = {0};
    if (n > 3) return 0;
    for (size_t i = 0; i < n; i++) u[i] = lower(unit[i]);
    if (n == 1 && u[0] == 'b') return 1;
    static const char letters[] = "kmgt";
    const char *p = strchr(letters, u[0]);
    if (!p || u[0] == 0) return 0;
    int power = (int)(p - letters) + 1;
    uint64_t bin = 1, dec = 1;
    for (int i = 0; i < power; i++) {
        bin *= 1024;
        dec *= 1000;
    }
    if (n == 1) return bin;                               /* "G" */
    if (n == 2 && u[1] == 'i') return bin;                /* "Gi" */
    if (n == 2 && u[1] == 'b') return dec;                /* "GB": SI, see size.h */
    if (n == 3 && u[1] == 'i' && u[2] == 'b') return bin; /* "GiB" */
    return 0;
}

#define UNITS_HINT                                                                                 \
    "use a byte count, K/M/G/T or KiB/MiB/GiB/TiB (powers of 1024), KB/MB/GB/TB (powers of "       \
    "1000), or a percentage of RAM like 80%%"

enum hr_status hr_mem_parse_size(const char *text, uint64_t ram_total_bytes, uint64_t *bytes,
                                 struct hr_err *err)
{
    if (!text) return hr_err_set(err, HR_ERR_INVALID, "invalid size: no text given");
    const char *s = text;
    while (is_blank(*s)) s++;
    size_t len = strlen(s);
    while (len > 0 && is_blank(s[len - 1])) len--;
    if (len == 0)
        return hr_err_set(err, HR_ERR_INVALID, "invalid size \"%.64s\": it is empty; " UNITS_HINT,
                          text);
    if (!is_digit(s[0]))
        return hr_err_set(err, HR_ERR_INVALID,
                          "invalid size \"%.64s\": it must start with a digit; " UNITS_HINT, text);

    /* Integer part, exactly, with the overflow check before each step. */
    size_t i = 0;
    uint64_t whole = 0;
    int whole_overflow = 0;
    for (; i < len && is_digit(s[i]); i++) {
        uint64_t d = (uint64_t)(s[i] - '0');
        if (whole > (UINT64_MAX - d) / 10)
            whole_overflow = 1;
        else
            whole = whole * 10 + d;
    }
    /* Fraction: digits after the point, as a double in [0, 1). */
    double frac = 0.0;
    int has_frac = 0;
    if (i < len && s[i] == '.') {
        i++;
        double scale = 0.1;
        size_t start = i;
        for (; i < len && is_digit(s[i]); i++) {
            frac += (s[i] - '0') * scale;
            scale /= 10.0;
        }
        if (i == start)
            return hr_err_set(err, HR_ERR_INVALID,
                              "invalid size \"%.64s\": a digit must follow the decimal point",
                              text);
        has_frac = frac > 0.0;
    }
    if (whole_overflow)
        return hr_err_set(err, HR_ERR_RANGE,
                          "invalid size \"%.64s\": the number is larger than 2^64 bytes", text);
    size_t unit_at = i;
    while (unit_at < len && is_blank(s[unit_at])) unit_at++;
    const char *unit = s + unit_at;
    size_t unit_len = len - unit_at;

    if (unit_len == 1 && unit[0] == '%') {
        if (ram_total_bytes == 0)
            return hr_err_set(err, HR_ERR_INVALID,
                              "invalid size \"%.64s\": a percentage needs the RAM size, which "
                              "is unknown here; give bytes instead",
                              text);
        if (whole > 100 || (whole == 100 && has_frac))
            return hr_err_set(err, HR_ERR_RANGE,
                              "invalid size \"%.64s\": a percentage of RAM must be at most 100%%",
                              text);
        /* whole <= 100, so whole * (ram / 100) cannot overflow; the remainder
         * term keeps the result exact for RAM sizes not divisible by 100. */
        uint64_t v = whole * (ram_total_bytes / 100) + whole * (ram_total_bytes % 100) / 100;
        v += (uint64_t)(frac * (double)ram_total_bytes / 100.0);
        *bytes = v;
        return HR_OK;
    }

    uint64_t mult = unit_multiplier(unit, unit_len);
    if (mult == 0)
        return hr_err_set(err, HR_ERR_INVALID,
                          "invalid size \"%.64s\": unknown unit \"%.16s\"; " UNITS_HINT, text,
                          unit);
    if (whole > UINT64_MAX / mult)
        return hr_err_set(err, HR_ERR_RANGE, "invalid size \"%.64s\": larger than 2^64 bytes",
                          text);
    uint64_t v = whole * mult;
    uint64_t f = (uint64_t)(frac * (double)mult);
    if (f > UINT64_MAX - v)
        return hr_err_set(err, HR_ERR_RANGE, "invalid size \"%.64s\": larger than 2^64 bytes",
                          text);
    *bytes = v + f;
    return HR_OK;
}

char *hr_mem_format_bytes(uint64_t bytes, int decimals, char *buf, size_t cap)
{
    static const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    if (!buf || cap == 0) return buf;
    if (decimals < 0) decimals = 0;
    if (decimals > 3) decimals = 3;
    int u = 0;
    double v = (double)bytes;
    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, cap, "%.*f %s", decimals, v, units[u]);
    return buf;
}
