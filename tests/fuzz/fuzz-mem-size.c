/*
 * fuzz-mem-size.c - libFuzzer target for the size-string parser
 * (hr_mem_parse_size, src/mem/size.c), the parser behind --memory-limit.
 *
 * The input is the text (copied into an exact-size NUL-terminated buffer, so
 * ASan catches a read past its end), parsed twice: with RAM unknown and with
 * 16 GiB of RAM. Checked (abort() on failure, besides ASan/UBSan):
 *   - the status is HR_OK, HR_ERR_INVALID or HR_ERR_RANGE, and a failure
 *     comes with a message that quotes the text's start;
 *   - the output is written only on success;
 *   - a percentage is at most the RAM, and with RAM unknown it is refused;
 *   - leading and trailing blanks do not change the answer.
 *
 * Built with -fsanitize=fuzzer in the fuzz preset; otherwise linked with
 * replay-main.c so `make test` replays tests/fuzz/corpus/mem-size/ and every
 * kept input in tests/fuzz/crashes/mem-size/.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mem/size.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok) abort();
}

static enum hr_status parse(const char *text, uint64_t ram, uint64_t *v)
{
    struct hr_err err = {{0}};
    *v = 0x5a5a5a5a5a5a5a5aull;
    enum hr_status st = hr_mem_parse_size(text, ram, v, &err);
    check(st == HR_OK || st == HR_ERR_INVALID || st == HR_ERR_RANGE);
    if (st != HR_OK) {
        check(*v == 0x5a5a5a5a5a5a5a5aull);
        check(strncmp(err.msg, "invalid size", 12) == 0);
    }
    return st;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;

    const uint64_t ram = 16ull << 30;
    uint64_t a, b;
    enum hr_status sa = parse(text, 0, &a);
    enum hr_status sb = parse(text, ram, &b);
    const char *pct = strchr(text, '%');
    if (sb == HR_OK && pct) check(b <= ram);
    if (pct && strlen(text) == size) check(sa != HR_OK);
    if (sa == HR_OK && sb == HR_OK) check(a == b); /* RAM only matters to percentages */

    /* Blanks around the text change nothing (when the text has no NUL inside). */
    if (strlen(text) == size) {
        char *padded = malloc(size + 5);
        if (padded) {
            memcpy(padded, "  ", 2);
            memcpy(padded + 2, text, size);
            memcpy(padded + 2 + size, " \t", 3);
            uint64_t c;
            enum hr_status sc = parse(padded, ram, &c);
            check(sc == sb);
            if (sc == HR_OK) check(c == b);
            free(padded);
        }
    }
    free(text);
    return 0;
}
