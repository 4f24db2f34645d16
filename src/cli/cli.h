/*
 * cli.h - the `headroom` subcommands. main.c dispatches on argv[1]; each
 * cmd_* takes the arguments after the subcommand name and returns the
 * process exit code (0 ok, 1 failure, 2 usage error).
 */
#ifndef HR_CLI_CLI_H
#define HR_CLI_CLI_H

int hr_cmd_info(int argc, char **argv);
int hr_cmd_tokenize(int argc, char **argv);
int hr_cmd_run(int argc, char **argv);
int hr_cmd_template(int argc, char **argv);

/* "1.5 GiB", "512.0 KiB" ... into buf. */
const char *hr_cli_fmt_bytes(double bytes, char *buf, unsigned size);

/* The whole file at `path` ("-": standard input) in a new malloc'd buffer the
 * caller frees, its length in *len; NULL with errno set on failure. */
char *hr_cli_read_file(const char *path, size_t *len);

#endif
