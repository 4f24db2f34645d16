/*
 * file.h - reading a whole file into memory, for the commands and
 * benchmarks that take a prompt, a template or a JSON document from a path.
 * Reentrant; any thread may call it.
 */
#ifndef HR_BASE_FILE_H
#define HR_BASE_FILE_H

#include <stddef.h>

/* The whole file at `path` ("-": standard input) in a new malloc'd buffer the
 * caller frees, NUL-terminated (the NUL is not counted), its length in *len;
 * NULL with errno set on failure. */
char *hr_read_file(const char *path, size_t *len);

#endif
