/*
 * test-jinja.c - src/chat: the Jinja engine feature by feature (expected
 * outputs checked against Python's Jinja2 3.1 by hand; the systematic
 * byte-for-byte comparison is tests/oracle/templates.test.mjs), its error
 * messages, one case per class of malformed template, the sandbox's
 * bounds against hostile templates, concurrent renders, and request
 * rendering (chat-render.h): fallback, tools, content parts, probes.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/sys.h"
#include "chat/chat-render.h"
#include "chat/jinja.h"
#include "gguf/gguf.h"

/* Renders `tmpl` with the JSON context `ctx` (NULL: none). */
static enum hr_status render_lim(const char *tmpl, const char *ctx,
                                 const struct hr_jinja_limits *lim, char **out, char **raised,
                                 struct hr_err *err)
{
    struct hr_jinja_template *t = NULL;
    *out = NULL;
    enum hr_status st = hr_jinja_parse(tmpl, strlen(tmpl), lim, &t, err);
    if (st != HR_OK)
        return st;
    json_t *c = NULL;
    if (ctx) {
        json_error_t je;
        c = json_loads(ctx, 0, &je);
        if (!c)
            fail_msg("bad test context %s: %s", ctx, je.text);
    }
    size_t len;
    st = hr_jinja_render(t, c, lim, out, &len, raised, err);
    if (st == HR_OK)
        assert_int_equal(len, strlen(*out));
    json_decref(c);
    hr_jinja_template_free(t);
    return st;
}

static void expect_ctx(const char *tmpl, const char *ctx, const char *want)
{
    char *out;
    struct hr_err err = {{0}};
    enum hr_status st = render_lim(tmpl, ctx, NULL, &out, NULL, &err);
    if (st != HR_OK)
        fail_msg("template %s: %s", tmpl, err.msg);
    if (strcmp(out, want) != 0)
        fail_msg("template %s\n  want [%s]\n  got  [%s]", tmpl, want, out);
    free(out);
}

static void expect(const char *tmpl, const char *want) { expect_ctx(tmpl, NULL, want); }

/* Expects failure with `status` and a message containing `part`. */
static void expect_fail_lim(const char *tmpl, const char *ctx, const struct hr_jinja_limits *lim,
                            enum hr_status status, const char *part)
{
    char *out;
    struct hr_err err = {{0}};
    enum hr_status st = render_lim(tmpl, ctx, lim, &out, NULL, &err);
    if (st == HR_OK)
        fail_msg("template %.80s rendered [%.80s], expected an error with '%s'", tmpl, out, part);
    if (st != status)
        fail_msg("template %.80s: status %s, expected %s (%s)", tmpl, hr_status_str(st),
                 hr_status_str(status), err.msg);
    if (!strstr(err.msg, part))
        fail_msg("template %.80s: message [%s] lacks [%s]", tmpl, err.msg, part);
    assert_null(out);
}

static void expect_fail(const char *tmpl, enum hr_status status, const char *part)
{
    expect_fail_lim(tmpl, NULL, NULL, status, part);
}

/* ------------------------------------------------------------------------ */

static void test_text_and_values(void **state)
{
    (void)state;
    expect("", "");
    expect("plain text", "plain text");
    expect("one trailing newline goes\n", "one trailing newline goes");
    expect("two\n\n", "two\n");
    expect("crlf\r\nline\rmac", "crlf\nline\nmac");
    expect_ctx("{{ name }}!", "{\"name\": \"wörld\"}", "wörld!");
    expect("{{ 1 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e-5 }} {{ 1e16 }} {{ 1e15 }} {{ -0.0 }}",
           "1 1.0 0.30000000000000004 1e-05 1e+16 1000000000000000.0 -0.0");
    expect("{{ 1/3 }} {{ 2.5e-8 }} {{ 123456789.0 }} {{ 1e22 }} {{ 0.0001 }}",
           "0.3333333333333333 2.5e-08 123456789.0 1e+22 0.0001");
    expect("{{ true }} {{ none }} {{ [1, 'a', none, 1.5] }} {{ {'k': (1,)} }}",
           "True None [1, 'a', None, 1.5] {'k': (1,)}");
    expect("{{ \"it's\" }} {{ [\"it's\", 'say \"hi\"', 'both \\'\"'] }}",
           "it's [\"it's\", 'say \"hi\"', 'both \\'\"']");
    expect("{{ ['tab\\t', 'nl\\n', 'bs\\\\', '\\x01', 'é'] }}",
           "['tab\\t', 'nl\\n', 'bs\\\\', '\\x01', 'é']");
    expect("{{ 'a' 'b' }}{{ '\\u00e9\\x41\\101\\q' }}", "abéAA\\q");
    expect("{{ undefined_name }}|{{ undefined_name | length }}", "|0");
}

static void test_whitespace(void **state)
{
    (void)state;
    /* trim_blocks removes the newline after a block tag, lstrip_blocks the
     * indentation before it; variables are untouched. */
    expect("a\n  {% if true %}\n  b\n  {% endif %}\nc", "a\n  b\nc");
    expect("  {{ 'x' }}\n", "  x");
    expect("a  {%- if true -%}  b  {%- endif -%}  c", "abc");
    expect("  {%+ if true %}x{% endif %}", "  x");
    expect("{% if true +%}\nx{% endif %}", "\nx");
    expect("a {# c #} b\n  {# own line #}\nc", "a  b\nc");
    expect("{% raw %}{{ x }}{% endraw %}", "{{ x }}");
    expect("x {% if true %} y {% endif %} z", "x  y  z");
    expect("{{ '{' }}{{ {'a': {'b': 1}} }}", "{{'a': {'b': 1}}");
}

static void test_loops(void **state)
{
    (void)state;
    expect("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}"
           "{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}",
           "1032TrueFalse3;2121FalseFalse3;3210FalseTrue3;");
    expect("{% for x in 'abc' %}{{ loop.previtem | default('-') }}{{ x }}"
           "{{ loop.nextitem | default('-') }} {% endfor %}",
           "-ab abc bc- ");
    expect("{% for x in [] %}no{% else %}empty{% endfor %}", "empty");
    expect("{% for x in range(10) if x is even %}{{ x }}{{ loop.length }},{% endfor %}",
           "05,25,45,65,85,");
    expect("{% for x in range(9) %}{% if x == 2 %}{% continue %}{% endif %}"
           "{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}",
           "0134");
    expect("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}", "a1b2");
    expect("{% for k in {'z': 1, 'a': 2} %}{{ k }}{% endfor %}", "za");
    expect("{% for x in [1,2] %}{{ loop.cycle('a', 'b') }}{% endfor %}", "ab");
    /* Each iteration has its own scope: a set does not leak or persist. */
    expect("{% set x = 0 %}{% for i in range(3) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
           "1110");
    expect("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}"
           "{% endfor %}{{ ns.n }}",
           "3");
    expect("{% for a in [[1, 2], [3]] %}{% for b in a %}{{ loop.index }}{% endfor %}|{% endfor %}",
           "12|1|");
}

static void test_set_macro_call(void **state)
{
    (void)state;
    expect("{% set a, b = 1, 2 %}{{ b }}{{ a }}", "21");
    expect("{% set x %}  in {{ 1 + 1 }}  {% endset %}[{{ x }}]", "[  in 2  ]");
    expect("{% set x | upper | trim %} abc {% endset %}[{{ x }}]", "[ABC]");
    expect("{% macro m(a, b='B') %}{{ a }}-{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} "
           "{{ m(b=3, a=4) }}",
           "1-B 1-2 4-3");
    expect("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}",
           "(1, 2){'k': 3}");
    expect("{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}in{% endcall %}",
           "[in]");
    expect("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
           "{% call(v) each([1, 2]) %}<{{ v }}>{% endcall %}",
           "<1><2>");
    expect("{% filter upper %}a{{ 'b' }}{% endfilter %}", "AB");
    expect("{% generation %}g{% endgeneration %}", "g");
    expect_fail("{% set x = [] %}{% set x.a = 1 %}", HR_ERR_INVALID,
                "cannot assign attribute on non-namespace object");
}

static void test_expressions(void **state)
{
    (void)state;
    expect("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 % -3 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }}",
           "3 -4 2 -2 3.0 0.5");
    expect("{{ 2 ** 10 }} {{ 2 ** -1 }} {{ -2 ** 2 }} {{ 10 / 4 }} {{ 4 / 2 }}", "1024 0.5 4 2.5 2.0");
    expect("{{ 'ab' * 2 }} {{ [0] * 2 }} {{ [1] + [2] }} {{ 'a' ~ 1 ~ none }}", "abab [0, 0] [1, 2] a1None");
    expect("{{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }} {{ 1 == 1.0 == true }} {{ [1, 2] < [1, 3] }}",
           "True False True True");
    expect("{{ 'b' in 'abc' }} {{ 2 not in [1] }} {{ 'k' in {'k': 1} }}", "True True True");
    expect("{{ 0 or 'x' }} {{ 1 and 'y' }} {{ not '' }} {{ 'a' if false else 'b' }}[{{ 1 if 0 }}]",
           "x y True b[]");
    expect("{{ 'abcdef'[1:4] }} {{ 'abcdef'[::-2] }} {{ [1,2,3][-1] }} {{ 'héllo'[1] }} "
           "{{ [1,2,3][:-1] }} {{ 'ab'[5:] }}",
           "bcd fdb 3 é [1, 2] ");
    expect("{{ x is defined }} {{ none is none }} {{ 3 is odd }} {{ 'a' is string }} "
           "{{ {} is mapping }} {{ 1 is true }} {{ true is true }} {{ 6 is divisibleby 3 }}",
           "False True True True True False True True");
    expect("{{ '  a b  '.strip() }}|{{ 'a,b'.split(',') }}|{{ ' a  b '.split() }}|"
           "{{ 'x'.upper() }}|{{ 'Ab'.startswith('A') }}|{{ 'hello world'.title() }}",
           "a b|['a', 'b']|['a', 'b']|X|True|Hello World");
    expect("{{ '{}-{x}'.format(1, x=2) }} {{ '%s=%03d' % ('a', 7) }} {{ '%.2f' | format(1/3) }}",
           "1-2 a=007 0.33");
    expect("{{ {'a': 1}.get('a') }} {{ {'a': 1}.get('b', 'd') }} {{ {'a': 1}.get('b') }} "
           "{{ {'b': 1, 'a': 2}.keys() | list }}",
           "1 d None ['b', 'a']");
    expect("{{ range(3) | list }} {{ dict(a=1) }} {{ namespace(x=1).x }}", "[0, 1, 2] {'a': 1} 1");
}

static void test_filters(void **state)
{
    (void)state;
    expect_ctx("{{ d | tojson }}|{{ d | tojson(indent=2) }}",
               "{\"d\": {\"b\": [1, 2.5, null], \"é\": \"\\n\\\"\"}}",
               "{\"b\": [1, 2.5, null], \"é\": \"\\n\\\"\"}|{\n  \"b\": [\n    1,\n    2.5,\n"
               "    null\n  ],\n  \"é\": \"\\n\\\"\"\n}");
    expect("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}",
           "{\"a\":2,\"b\":1}");
    expect("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(first=true) }}",
           "a\n  b\n\n  c|    a\n    b");
    expect("{{ ['b', 'A', 'a'] | sort }} {{ ['b', 'A', 'a'] | unique | list }} "
           "{{ {'b': 1, 'A': 2} | dictsort }}",
           "['A', 'a', 'b'] ['b', 'A'] [('A', 2), ('b', 1)]");
    expect("{{ [{'n': 'x', 'v': 1}, {'n': 'y'}] | selectattr('v') | map(attribute='n') | list }}",
           "['x']");
    expect("{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2] | map('string') | join('-') }}",
           "[1, 3] 1-2");
    expect("{{ x | default('d') }} {{ '' | default('e', true) }} {{ 2.5 | round }} "
           "{{ 3.5 | round }} {{ 2.675 | round(2) }} {{ -3 | abs }}",
           "d e 2.0 4.0 2.67 3");
    expect("{{ ' 42 ' | int }} {{ 'x' | int }} {{ '3.7' | int }} {{ '2.5' | float }} {{ 7 | string }}",
           "42 0 3 2.5 7");
    expect("{{ 'Hello World' | wordcount }} {{ 'ab' | center(6) }}| {{ '<a>' | e }} "
           "{{ 'hello big-world' | title }} {{ 'hI' | capitalize }}",
           "2   ab  | &lt;a&gt; Hello Big-World Hi");
    expect("{{ [3, 1, 2] | max }} {{ [3, 1, 2] | min }} {{ [1, 2] | sum }} {{ [1, 2, 3] | batch(2) | list }} "
           "{{ 'abc' | reverse }} {{ [1, 2] | first }} {{ [1, 2] | last }} {{ 'ab' | list }}",
           "3 1 3 [[1, 2], [3]] cba 1 2 ['a', 'b']");
    expect_fail("{{ x | no_such_filter }}", HR_ERR_INVALID, "No filter named 'no_such_filter'.");
    expect_fail("{{ x is no_such_test }}", HR_ERR_INVALID, "No test named 'no_such_test'.");
    /* An unknown filter in a branch that never runs is fine, as in Jinja 3.1. */
    expect("{% if false %}{{ x | no_such_filter }}{% endif %}ok", "ok");
}

static void test_runtime_errors(void **state)
{
    (void)state;
    expect_fail("{{ foo.bar }}", HR_ERR_INVALID, "line 1: 'foo' is undefined");
    expect_fail_lim("\n{{ d.x + 1 }}", "{\"d\": {}}", NULL, HR_ERR_INVALID,
                    "line 2: 'dict object' has no attribute 'x'");
    expect_fail_lim("{{ xs[7].a }}", "{\"xs\": [1]}", NULL, HR_ERR_INVALID,
                    "list object has no element 7");
    expect_fail("{{ 'a' + 1 }}", HR_ERR_INVALID, "can only concatenate str (not \"int\") to str");
    expect_fail("{{ 1 / 0 }}", HR_ERR_INVALID, "division by zero");
    expect_fail("{{ 'x' in none }}", HR_ERR_INVALID, "argument of type 'NoneType' is not iterable");
    expect_fail("{% for x in 5 %}{% endfor %}", HR_ERR_INVALID, "'int' object is not iterable");
    expect_fail("{{ 2 ** 64 }}", HR_ERR_RANGE, "integer overflow");
    expect_fail("{% set a, b = [1] %}", HR_ERR_INVALID, "not enough values to unpack");
    expect_fail("{{ [1, 2] | tojson(indent='x', bogus=1) }}", HR_ERR_INVALID,
                "unexpected keyword argument 'bogus'");
    /* ImmutableSandboxedEnvironment: lists and dicts cannot be changed. */
    expect_fail("{% set xs = [] %}{% set _ = xs.append(1) %}", HR_ERR_INVALID,
                "access to attribute 'append' of 'list' object is unsafe.");
    expect_fail("{{ {}.update({'a': 1}) }}", HR_ERR_INVALID,
                "access to attribute 'update' of 'dict' object is unsafe.");
    /* raise_exception: the bare message comes back through `raised`. */
    char *out, *raised = NULL;
    struct hr_err err = {{0}};
    enum hr_status st =
        render_lim("a\n{{ raise_exception('Roles must alternate (' ~ 2 ~ ')') }}", NULL, NULL,
                   &out, &raised, &err);
    assert_int_equal(st, HR_ERR_INVALID);
    assert_string_equal(raised, "Roles must alternate (2)");
    assert_string_equal(err.msg, "line 2: Roles must alternate (2)");
    free(raised);
    /* A context that is not an object. */
    struct hr_jinja_template *t;
    assert_int_equal(hr_jinja_parse("x", 1, NULL, &t, &err), HR_OK);
    json_t *arr = json_array();
    assert_int_equal(hr_jinja_render(t, arr, NULL, &out, NULL, NULL, &err), HR_ERR_TYPE);
    json_decref(arr);
    hr_jinja_template_free(t);
}

/* One template per class of malformed input; each must fail with the line. */
static void test_parse_errors(void **state)
{
    (void)state;
    static const struct {
        const char *tmpl, *part;
    } cases[] = {
        {"{{ x", "line 1: unexpected end of template, expected '}}'"},
        {"a\n{% if x %}", "line 2: unexpected end of template, expected 'endif'"},
        {"{% for x in y %}{% endif %}", "Encountered unknown tag 'endif'"},
        {"{% endfor %}", "Encountered unknown tag 'endfor'"},
        {"{% include 'x' %}", "Encountered unknown tag 'include'"},
        {"{% do x %}", "Encountered unknown tag 'do'"},
        {"{{ 1 + }}", "expected an expression"},
        {"{{ 'abc }}", "unexpected end of string"},
        {"{{ (1 }}", "unexpected '}'"},
        {"{{ 1) }}", "unexpected ')'"},
        {"{# open comment", "missing end of comment tag"},
        {"{% raw %}x", "missing end of raw directive"},
        {"{{ '\\x4' }}", "truncated"},
        {"{{ '\\ud800' }}", "not a valid code point"},
        {"{{ 99999999999999999999 }}", "out of range"},
        {"{% for in x %}{% endfor %}", "expected 'in'"},
        {"{% for x y %}{% endfor %}", "expected 'in'"},
        {"{% set %}", "expected a name to assign to"},
        {"{% macro (a) %}{% endmacro %}", "expected a macro name"},
        {"{% macro m(a=1, b) %}{% endmacro %}", "non-default argument follows default argument"},
        {"{{ f(a=1, 2) }}", "positional argument follows keyword argument"},
        {"{{ x is y is z }}", "You cannot chain multiple tests with is"},
        {"{{ x $ y }}", "unexpected char '$'"},
        {"{% if x %}{% else %}{% else %}{% endif %}", "Encountered unknown tag 'else'."},
        {"{% call x %}{% endcall %}", "expected a call after 'call'"},
        {"{{ x.  }}", "expected a name or number after '.'"},
        {"{% for x in y recursive %}{% endfor %}", "recursive loops are not supported"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct hr_jinja_template *t = NULL;
        struct hr_err err = {{0}};
        enum hr_status st = hr_jinja_parse(cases[i].tmpl, strlen(cases[i].tmpl), NULL, &t, &err);
        if (st == HR_OK)
            fail_msg("template %s parsed", cases[i].tmpl);
        assert_null(t);
        if (!strstr(err.msg, cases[i].part) || strncmp(err.msg, "line ", 5) != 0)
            fail_msg("template %s: message [%s] lacks [%s]", cases[i].tmpl, err.msg,
                     cases[i].part);
    }
}

/* Hostile templates stop with HR_ERR_LIMIT, quickly, naming the line. */
static void test_limits(void **state)
{
    (void)state;
    double t0 = hr_now_seconds();
    expect_fail("\n{% for i in range(10**9) %}{% endfor %}", HR_ERR_LIMIT,
                "line 2: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    struct hr_jinja_limits small = {.max_iterations = 100000};
    expect_fail_lim("{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}"
                    "{% endfor %}",
                    NULL, &small, HR_ERR_LIMIT, "more than 100000 loop iterations");
    expect_fail("{{ 'x' * 10**10 }}", HR_ERR_LIMIT, "line 1: string repetition is over the memory limit");
    struct hr_jinja_limits out_lim = {.max_output_bytes = 1 << 20};
    expect_fail_lim("{% for i in range(1000) %}{{ 'y' * 10000 }}{% endfor %}", NULL, &out_lim,
                    HR_ERR_LIMIT, "output is longer than 1048576 bytes");
    struct hr_jinja_limits mem = {.max_memory_bytes = 8 << 20};
    expect_fail_lim("{% set ns = namespace(s='x') %}{% for i in range(100000) %}"
                    "{% set ns.s = ns.s ~ ns.s[:1000] ~ 'z' %}{% endfor %}",
                    NULL, &mem, HR_ERR_LIMIT, "memory");
    expect_fail("{% macro r(n) %}{{ r(n + 1) }}{% endmacro %}\n{{ r(0) }}", HR_ERR_LIMIT,
                "macro calls nested deeper than 64");
    /* Parser nesting: 10000 parentheses, brackets and nested ifs. */
    char *deep = malloc(40000);
    size_t k = 0;
    k += (size_t)sprintf(deep, "{{ ");
    for (int i = 0; i < 10000; i++)
        deep[k++] = '(';
    deep[k++] = '1';
    for (int i = 0; i < 10000; i++)
        deep[k++] = ')';
    strcpy(deep + k, " }}");
    expect_fail(deep, HR_ERR_LIMIT, "line 1: template nesting deeper than 100");
    k = 0;
    for (int i = 0; i < 2000; i++)
        k += (size_t)sprintf(deep + k, "{%% if 1 %%}");
    deep[k] = 0;
    expect_fail(deep, HR_ERR_LIMIT, "nesting deeper than 100");
    k = (size_t)sprintf(deep, "{{ x");
    for (int i = 0; i < 5000; i++)
        k += (size_t)sprintf(deep + k, " | d");
    strcpy(deep + k, " }}");
    expect_fail(deep, HR_ERR_LIMIT, "nesting deeper than");
    k = (size_t)sprintf(deep, "{{ 1");
    for (int i = 0; i < 5000; i++)
        k += (size_t)sprintf(deep + k, " + 1");
    strcpy(deep + k, " }}");
    expect_fail(deep, HR_ERR_LIMIT, "nesting deeper than");
    k = (size_t)sprintf(deep, "{{ x");
    for (int i = 0; i < 5000; i++)
        k += (size_t)sprintf(deep + k, " or x");
    strcpy(deep + k, " }}");
    expect_fail(deep, HR_ERR_LIMIT, "nesting deeper than");
    k = (size_t)sprintf(deep, "{{ x");
    for (int i = 0; i < 5000; i++)
        k += (size_t)sprintf(deep + k, ".a");
    strcpy(deep + k, " }}");
    expect_fail(deep, HR_ERR_LIMIT, "nesting deeper than");
    free(deep);
    /* Time: iterations that each do real work, with a 50 ms budget. */
    struct hr_jinja_limits fast = {.max_ms = 50};
    double t1 = hr_now_seconds();
    expect_fail_lim("{% for a in range(100000) %}{% for b in range(100000) %}{{ 'ab' ~ b }}"
                    "{% endfor %}{% endfor %}",
                    NULL, &fast, HR_ERR_LIMIT, "longer than 50 ms");
    assert_true(hr_now_seconds() - t1 < 2.0);
    assert_true(hr_now_seconds() - t0 < 20.0);
}

/* Renders of one template from several threads give the same text. */
struct thread_arg {
    const struct hr_jinja_template *t;
    const json_t *ctx;
    const char *want;
    int ok;
};

static void *render_thread(void *p)
{
    struct thread_arg *a = p;
    a->ok = 1;
    for (int i = 0; i < 50; i++) {
        char *out;
        size_t n;
        if (hr_jinja_render(a->t, a->ctx, NULL, &out, &n, NULL, NULL) != HR_OK ||
            strcmp(out, a->want) != 0)
            a->ok = 0;
        free(out);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    const char *src = "{% for m in messages %}{{ m.role }}:{{ m.content | upper }};{% endfor %}";
    struct hr_jinja_template *t;
    struct hr_err err = {{0}};
    assert_int_equal(hr_jinja_parse(src, strlen(src), NULL, &t, &err), HR_OK);
    json_t *ctx = json_loads("{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"},"
                             "{\"role\": \"assistant\", \"content\": \"yo\"}]}",
                             0, NULL);
    pthread_t th[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){t, ctx, "user:HI;assistant:YO;", 0};
        pthread_create(&th[i], NULL, render_thread, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_true(args[i].ok);
    }
    json_decref(ctx);
    hr_jinja_template_free(t);
}

/* ------------------------------------------------------------------------ */
/* chat-render                                                               */
/* ------------------------------------------------------------------------ */

static char *chat(const struct hr_chat_template *ct, const char *messages, const char *tools,
                  bool gen)
{
    json_t *m = json_loads(messages, 0, NULL), *t = tools ? json_loads(tools, 0, NULL) : NULL;
    assert_non_null(m);
    struct hr_chat_request req = {.messages = m, .tools = t, .add_generation_prompt = gen};
    char *out = NULL;
    size_t n;
    struct hr_err err = {{0}};
    if (hr_chat_render(ct, &req, &out, &n, &err) != HR_OK)
        fail_msg("chat render: %s", err.msg);
    json_decref(m);
    json_decref(t);
    return out;
}

static void test_chat_fallback_and_parts(void **state)
{
    (void)state;
    struct hr_chat_template *ct;
    struct hr_err err = {{0}};
    assert_int_equal(hr_chat_template_init(NULL, NULL, NULL, &ct, &err), HR_OK);
    char *out = chat(ct,
                     "[{\"role\": \"system\", \"content\": \"S\"},"
                     "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"},"
                     "{\"type\": \"image_url\", \"image_url\": {\"url\": \"x\"}},"
                     "{\"type\": \"text\", \"text\": \"b\"}]},"
                     "{\"role\": \"assistant\", \"content\": null}]",
                     NULL, true);
    assert_string_equal(out, "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\na\nb<|im_end|>\n"
                             "<|im_start|>assistant\n<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    assert_false(hr_chat_template_keeps_content_parts(ct));
    hr_chat_template_free(ct);

    /* A template that iterates parts keeps them. */
    const char *iter = "{% for m in messages %}{% if m.content is string %}{{ m.content }}"
                       "{% else %}{% for p in m.content %}<{{ p.text }}>{% endfor %}{% endif %}"
                       "{% endfor %}";
    assert_int_equal(hr_chat_template_init(iter, "<s>", NULL, &ct, &err), HR_OK);
    assert_true(hr_chat_template_keeps_content_parts(ct));
    out = chat(ct, "[{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"a\"}]}]",
               NULL, true);
    assert_string_equal(out, "<a>");
    free(out);
    hr_chat_template_free(ct);

    /* A template that prints content blindly shows a list; it gets text. */
    assert_int_equal(hr_chat_template_init("{{ messages[0].content | trim }}", NULL, NULL, &ct,
                                           &err),
                     HR_OK);
    assert_false(hr_chat_template_keeps_content_parts(ct));
    hr_chat_template_free(ct);
    hr_chat_template_free(NULL);

    assert_int_equal(hr_chat_template_init("{% if %}", NULL, NULL, &ct, &err), HR_ERR_INVALID);
    assert_non_null(strstr(err.msg, "chat template: line 1"));
}

static void test_chat_tools_and_args(void **state)
{
    (void)state;
    struct hr_chat_template *ct;
    struct hr_err err = {{0}};
    /* Arguments as mappings when the template prints them with tojson. */
    const char *obj = "{% for t in tools %}{{ t | tojson }}\n{% endfor %}"
                      "{% for m in messages %}{% for c in m.tool_calls or [] %}"
                      "{{ c.function.arguments | tojson }}{% endfor %}{% endfor %}";
    assert_int_equal(hr_chat_template_init(obj, NULL, NULL, &ct, &err), HR_OK);
    assert_true(hr_chat_template_wants_object_arguments(ct));
    char *out = chat(ct,
                     "[{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"1\","
                     "\"type\": \"function\", \"function\": {\"name\": \"f\","
                     "\"arguments\": \"{\\\"a\\\":1}\"}}]}]",
                     "[{\"name\": \"bash\", \"description\": \"Run\", \"input_schema\": "
                     "{\"type\": \"object\"}}, {\"type\": \"function\", \"function\": "
                     "{\"name\": \"g\"}}]",
                     true);
    assert_string_equal(out, "{\"type\": \"function\", \"function\": {\"name\": \"bash\", "
                             "\"description\": \"Run\", \"parameters\": {\"type\": \"object\"}}}\n"
                             "{\"type\": \"function\", \"function\": {\"name\": \"g\"}}\n"
                             "{\"a\": 1}");
    free(out);
    hr_chat_template_free(ct);

    /* Arguments concatenated as strings, content tested for none: kept. */
    const char *str = "{% for m in messages %}{% if m.content is none %}"
                      "{% for c in m.tool_calls %}{{ 'call ' + c.function.arguments }}{% endfor %}"
                      "{% endif %}{% endfor %}";
    assert_int_equal(hr_chat_template_init(str, NULL, NULL, &ct, &err), HR_OK);
    assert_false(hr_chat_template_wants_object_arguments(ct));
    assert_false(hr_chat_template_empties_null_content(ct));
    hr_chat_template_free(ct);

    /* String methods on content: null becomes "" on tool-call turns. */
    const char *meth = "{% for m in messages %}{{ m.content.strip() }}"
                       "{% for c in m.tool_calls or [] %}{{ c.function.arguments | tojson }}"
                       "{% endfor %}{% endfor %}";
    assert_int_equal(hr_chat_template_init(meth, NULL, NULL, &ct, &err), HR_OK);
    assert_true(hr_chat_template_wants_object_arguments(ct));
    assert_true(hr_chat_template_empties_null_content(ct));
    hr_chat_template_free(ct);

    /* Anthropic tool without a name is refused; kwargs cannot set messages. */
    json_t *bad = json_loads("{\"description\": \"x\"}", 0, NULL);
    assert_null(hr_chat_tool_to_openai(bad, &err));
    json_decref(bad);
    assert_int_equal(hr_chat_template_init(NULL, NULL, NULL, &ct, &err), HR_OK);
    json_t *m = json_loads("[]", 0, NULL), *kw = json_loads("{\"messages\": 1}", 0, NULL);
    struct hr_chat_request req = {.messages = m, .kwargs = kw};
    json_t *ctx = NULL;
    assert_int_equal(hr_chat_build_context(ct, &req, &ctx, &err), HR_ERR_INVALID);
    json_decref(kw);
    kw = json_loads("{\"enable_thinking\": false, \"bos_token\": \"B\"}", 0, NULL);
    req.kwargs = kw;
    assert_int_equal(hr_chat_build_context(ct, &req, &ctx, &err), HR_OK);
    assert_true(json_is_false(json_object_get(ctx, "enable_thinking")));
    assert_string_equal(json_string_value(json_object_get(ctx, "bos_token")), "B");
    assert_true(json_is_null(json_object_get(ctx, "tools")));
    json_decref(ctx);
    req.messages = kw; /* not an array */
    assert_int_equal(hr_chat_build_context(ct, &req, &ctx, &err), HR_ERR_TYPE);
    json_decref(kw);
    json_decref(m);
    hr_chat_template_free(ct);
}

/* A GGUF with tokens and BOS/EOS ids, with and without a template. */
static struct hr_chat_template *from_gguf(const char *tmpl, void **buf, struct hr_gguf **g)
{
    struct hr_gguf_writer *w = hr_gguf_writer_init();
    static const char *const toks[] = {"<unk>", "<|begin|>", "<|end|>", "a"};
    assert_int_equal(hr_gguf_writer_set_str(w, "general.architecture", "llama"), HR_OK);
    assert_int_equal(hr_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, 4), HR_OK);
    assert_int_equal(hr_gguf_writer_set_u32(w, "tokenizer.ggml.bos_token_id", 1), HR_OK);
    assert_int_equal(hr_gguf_writer_set_u32(w, "tokenizer.ggml.eos_token_id", 2), HR_OK);
    if (tmpl)
        assert_int_equal(hr_gguf_writer_set_str(w, "tokenizer.chat_template", tmpl), HR_OK);
    size_t size;
    struct hr_err err = {{0}};
    assert_int_equal(hr_gguf_writer_write_mem(w, buf, &size, &err), HR_OK);
    hr_gguf_writer_free(w);
    assert_int_equal(hr_gguf_parse(*buf, size, g, &err), HR_OK);
    struct hr_chat_template *ct = NULL;
    if (hr_chat_template_init_from_gguf(*g, NULL, &ct, &err) != HR_OK)
        fail_msg("%s", err.msg);
    return ct;
}

static void test_chat_from_gguf(void **state)
{
    (void)state;
    void *buf;
    struct hr_gguf *g;
    struct hr_chat_template *ct = from_gguf("{{ bos_token }}{{ messages[0].content }}{{ eos_token }}",
                                            &buf, &g);
    char *out = chat(ct, "[{\"role\": \"user\", \"content\": \"x\"}]", NULL, true);
    assert_string_equal(out, "<|begin|>x<|end|>");
    free(out);
    hr_chat_template_free(ct);
    hr_gguf_close(g);
    free(buf);
    /* No template: ChatML (and one log line). */
    ct = from_gguf(NULL, &buf, &g);
    out = chat(ct, "[{\"role\": \"user\", \"content\": \"x\"}]", NULL, false);
    assert_string_equal(out, "<|im_start|>user\nx<|im_end|>\n");
    free(out);
    hr_chat_template_free(ct);
    hr_gguf_close(g);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_and_values),
        cmocka_unit_test(test_whitespace),
        cmocka_unit_test(test_loops),
        cmocka_unit_test(test_set_macro_call),
        cmocka_unit_test(test_expressions),
        cmocka_unit_test(test_filters),
        cmocka_unit_test(test_runtime_errors),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_chat_fallback_and_parts),
        cmocka_unit_test(test_chat_tools_and_args),
        cmocka_unit_test(test_chat_from_gguf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
