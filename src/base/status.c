/* status.c - status names and error messages; see status.h. */
#include "base/status.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *hr_status_str(enum hr_status status)
{
    switch (status) {
    case HR_OK: return "ok";
    case HR_ERR_INVALID: return "invalid input";
    case HR_ERR_NOT_FOUND: return "not found";
    case HR_ERR_TYPE: return "wrong type";
    case HR_ERR_RANGE: return "out of range";
    case HR_ERR_NOMEM: return "out of memory";
    case HR_ERR_IO: return "i/o error";
    case HR_ERR_UNSUPPORTED: return "unsupported";
    case HR_ERR_LIMIT: return "limit reached";
    case HR_ERR_DEVICE: return "device error";
    }
    return "unknown status";
}

enum hr_status hr_err_set(struct hr_err *err, enum hr_status status, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return status;
}

void hr_err_prefix(struct hr_err *err, const char *fmt, ...)
{
    if (!err)
        return;
    char prefix[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof(prefix), fmt, ap);
    va_end(ap);
    /* Build "prefix: old" in place: move the old text right, then copy the prefix in. */
    size_t np = strlen(prefix), no = strnlen(err->msg, sizeof(err->msg) - 1);
    if (np + 2 >= sizeof(err->msg))
        np = sizeof(err->msg) - 3;
    if (np + 2 + no >= sizeof(err->msg))
        no = sizeof(err->msg) - 1 - np - 2;
    memmove(err->msg + np + 2, err->msg, no);
    memcpy(err->msg, prefix, np);
    err->msg[np] = ':';
    err->msg[np + 1] = ' ';
    err->msg[np + 2 + no] = '\0';
}

void hr_assert_fail(const char *expr, const char *file, int line)
{
    fprintf(stderr, "headroom: internal error: assertion '%s' failed at %s:%d\n", expr, file, line);
    abort();
}
