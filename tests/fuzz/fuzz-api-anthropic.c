/*
 * fuzz-api-anthropic.c - libFuzzer target for Anthropic Messages request
 * bodies (hr_api_parse with HR_API_ANTHROPIC, src/server/api-request.c).
 *
 * Input layout: byte 0 bit 0 chooses /v1/messages/count_tokens (no
 * max_tokens, no sampling); the rest is the body, handed over in an
 * exact-size heap copy without a NUL, so ASan catches a read past it.
 *
 * Checked (abort() on failure, besides ASan/UBSan/LeakSanitizer), see
 * api-check.h: the status and error shape, every promise of api.h on a
 * parsed request, tool-call arguments made from tool_use input reading
 * back as objects, the normalized messages being a fixed point of the
 * OpenAI chat parser, and a render through a ChatML-with-tools template.
 *
 * Built with -fsanitize=fuzzer in the fuzz preset; otherwise linked with
 * replay-main.c so `make test` replays tests/fuzz/corpus/api-anthropic/
 * and every kept input in tests/fuzz/crashes/api-anthropic/.
 */
#include "api-check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 16)) return 0;
    bool count_tokens = data[0] & 1;
    size_t n = size - 1;
    uint8_t *body = malloc(n ? n : 1);
    if (!body) return 0;
    memcpy(body, data + 1, n);
    struct hr_api_request r;
    if (api_parse_checked(HR_API_ANTHROPIC, count_tokens, body, n, &r) == HR_OK) {
        check(r.kwargs && json_is_boolean(json_object_get(r.kwargs, "enable_thinking")));
        if (count_tokens)
            check(r.max_tokens == 0 && r.n_stop == 0);
        else
            check(r.max_tokens > 0);
        check_made_arguments(r.messages);
        check_fixed_point(&r);
        check_render(&r);
    }
    hr_api_request_free(&r);
    free(body);
    return 0;
}
