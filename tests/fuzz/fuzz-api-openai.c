/*
 * fuzz-api-openai.c - libFuzzer target for OpenAI request bodies
 * (hr_api_parse with HR_API_OPENAI_CHAT and HR_API_OPENAI_COMPLETION,
 * src/server/api-request.c).
 *
 * Input layout: byte 0 bit 0 chooses the API (0: chat completions, 1:
 * completions); the rest is the body, handed over in an exact-size heap
 * copy without a NUL, so ASan catches a read past it.
 *
 * Checked (abort() on failure, besides ASan/UBSan/LeakSanitizer), see
 * api-check.h: the status and error shape, every promise of api.h on a
 * parsed request; for chat, the normalized messages being a fixed point
 * of the parser and a render through a ChatML-with-tools template; for
 * completions, exactly one of prompt text and prompt tokens, the text's
 * length, token ids >= 0.
 *
 * Built with -fsanitize=fuzzer in the fuzz preset; otherwise linked with
 * replay-main.c so `make test` replays tests/fuzz/corpus/api-openai/ and
 * every kept input in tests/fuzz/crashes/api-openai/.
 */
#include "api-check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1 || size > (1u << 16)) return 0;
    enum hr_api_kind kind = (data[0] & 1) ? HR_API_OPENAI_COMPLETION : HR_API_OPENAI_CHAT;
    size_t n = size - 1;
    uint8_t *body = malloc(n ? n : 1);
    if (!body) return 0;
    memcpy(body, data + 1, n);
    struct hr_api_request r;
    if (api_parse_checked(kind, false, body, n, &r) == HR_OK) {
        if (kind == HR_API_OPENAI_CHAT) {
            check(r.prompt == NULL && r.prompt_tokens == NULL);
            check_fixed_point(&r);
            check_render(&r);
        } else {
            check(r.messages == NULL && r.tools == NULL && r.max_tokens > 0);
            check((r.prompt != NULL) != (r.prompt_tokens != NULL));
            if (r.prompt) check(strlen(r.prompt) == r.prompt_len);
            for (size_t i = 0; i < r.n_prompt_tokens; i++) check(r.prompt_tokens[i] >= 0);
            check(r.prompt_tokens == NULL || r.n_prompt_tokens > 0);
        }
    }
    hr_api_request_free(&r);
    free(body);
    return 0;
}
