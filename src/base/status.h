/*
 * status.h - how every headroom function reports failure.
 *
 * A function that can fail on input or on its environment returns an
 * `enum hr_status`: HR_OK (zero) on success, a negative value otherwise.
 * When the caller passes a `struct hr_err`, the function also writes one
 * human-readable sentence into it that names what is at fault (the key, the
 * tensor, the byte offset, the flag). Callers that only need the code pass
 * NULL.
 *
 * HR_ASSERT is for our own bugs only: it never fires on bad input bytes.
 * Parsers return statuses; they do not abort.
 *
 * Thread safety: everything here is reentrant; an hr_err belongs to the
 * caller that passed it.
 */
#ifndef HR_BASE_STATUS_H
#define HR_BASE_STATUS_H

#include <stdarg.h>
#include <stddef.h>

enum hr_status {
    HR_OK = 0,
    HR_ERR_INVALID = -1,     /* malformed input: a file, a request, a flag */
    HR_ERR_NOT_FOUND = -2,   /* a key, tensor, file or route that is not there */
    HR_ERR_TYPE = -3,        /* a value exists but has another type */
    HR_ERR_RANGE = -4,       /* a number outside what is allowed or representable */
    HR_ERR_NOMEM = -5,       /* an allocation failed */
    HR_ERR_IO = -6,          /* open/read/write/mmap failed; errno is in the message */
    HR_ERR_UNSUPPORTED = -7, /* valid but not implemented (a quant type, an arch) */
    HR_ERR_LIMIT = -8,       /* a configured bound was hit (recursion, size, time) */
    HR_ERR_DEVICE = -9,      /* an accelerator (CUDA) call failed; the message names it */
};

/* A short constant name for a status ("invalid input", ...). Never NULL. */
const char *hr_status_str(enum hr_status status);

/* One sentence describing the last failure; owned by whoever declared it. */
struct hr_err {
    char msg[512];
};

/*
 * Writes a formatted message into `err` (if not NULL) and returns `status`,
 * so failure paths read `return hr_err_set(err, HR_ERR_INVALID, "...", ...);`.
 */
enum hr_status hr_err_set(struct hr_err *err, enum hr_status status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepends "prefix: " to an existing message, for context on the way up. */
void hr_err_prefix(struct hr_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Aborts with file:line; for broken internal invariants, never for input. */
#define HR_ASSERT(cond)                                                                            \
    do {                                                                                           \
        if (!(cond))                                                                               \
            hr_assert_fail(#cond, __FILE__, __LINE__);                                             \
    } while (0)

_Noreturn void hr_assert_fail(const char *expr, const char *file, int line);

#endif
