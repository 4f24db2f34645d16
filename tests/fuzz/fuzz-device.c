/*
 * fuzz-device.c - libFuzzer target for the --device parser
 * (hr_device_parse, src/engine/backend.c).
 *
 * The input is the text (copied into an exact-size NUL-terminated buffer, so
 * ASan catches a read past its end). Checked (abort() on failure, besides
 * ASan/UBSan):
 *   - the status is HR_OK or HR_ERR_INVALID, and a refusal's message names
 *     the flag;
 *   - an accepted text is exactly one of auto, cpu, cuda or cuda:N with N a
 *     decimal device number 0..255 (at most 4 digits), and the parsed
 *     ordinal printed back gives the same text (for cuda:N without leading
 *     zeros).
 *
 * Built with -fsanitize=fuzzer in the fuzz preset; otherwise linked with
 * replay-main.c so `make test` replays tests/fuzz/corpus/device/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 256) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;

    struct hr_device d;
    struct hr_err err = {{0}};
    enum hr_status st = hr_device_parse(text, &d, &err);
    check(st == HR_OK || st == HR_ERR_INVALID);
    if (st != HR_OK) {
        check(strstr(err.msg, "--device") != NULL);
    } else if (d.kind == HR_DEVICE_AUTO) {
        check(strcmp(text, "auto") == 0);
    } else if (d.kind == HR_DEVICE_CPU) {
        check(strcmp(text, "cpu") == 0);
    } else {
        check(d.kind == HR_DEVICE_CUDA && d.ordinal >= 0 && d.ordinal <= 255);
        if (strcmp(text, "cuda") != 0) {
            check(strncmp(text, "cuda:", 5) == 0);
            const size_t nd = strlen(text + 5);
            check(nd >= 1 && nd <= 4 && strspn(text + 5, "0123456789") == nd);
            if (text[5] != '0' || nd == 1) {
                char back[16];
                snprintf(back, sizeof(back), "cuda:%d", d.ordinal);
                check(strcmp(back, text) == 0);
            }
        }
    }
    free(text);
    return 0;
}
