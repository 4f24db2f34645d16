#!/usr/bin/env bash
# template.sh - `headroom template` as a user runs it: the prompt printed
# exactly (no newline added), --template/--bos/--eos, --tools, --kwargs,
# --no-generation-prompt, --print-context, --context, the ChatML fallback for
# a model without a template (with its log line), and the errors (one line,
# exit 1; usage errors exit 2). Uses the release build (build/headroom,
# build/vocab-gguf) and the built-in vocabulary.
source "$(dirname "$0")/lib/common.sh" template

printf '[{"role": "user", "content": "Hi"}]' >"$dir/m.json"
cat >"$dir/t.jinja" <<'TEMPLATE'
{% for m in messages %}[{{ bos_token }}{{ m.role }}:{{ m.content }}{{ eos_token }}]{% endfor %}{% if add_generation_prompt %}>{% endif %}{% if enable_thinking is defined %}T{{ enable_thinking }}{% endif %}{% if tools %}{{ tools | map(attribute="function.name") | join(",") }}{% endif %}
TEMPLATE

out=$($hr template --template "$dir/t.jinja" --bos '<s>' --eos '</s>' --messages "$dir/m.json"; echo "|rc=$?")
expect "renders exactly, no newline added" "[[ \"\$out\" == '[<s>user:Hi</s>]>|rc=0' ]]"
out=$($hr template --template "$dir/t.jinja" --messages "$dir/m.json" --no-generation-prompt; echo "|$?")
expect "--no-generation-prompt; bos/eos undefined without a model" "[[ \"\$out\" == '[user:Hi]|0' ]]"
printf '{"enable_thinking": false}' >"$dir/k.json"
printf '[{"name": "bash", "description": "Run", "input_schema": {"type": "object"}}]' >"$dir/tools.json"
out=$($hr template --template "$dir/t.jinja" --messages "$dir/m.json" --kwargs "$dir/k.json" --tools "$dir/tools.json")
expect "--kwargs and --tools (Anthropic form converted)" "[[ \"\$out\" == '[user:Hi]>TFalsebash' ]]"
ctx=$($hr template --template "$dir/t.jinja" --messages "$dir/m.json" --tools "$dir/tools.json" --print-context)
expect "--print-context shows the OpenAI tool form" "/usr/bin/python3 -c '
import json, sys
c = json.loads(sys.argv[1])
assert c[\"tools\"][0] == {\"type\": \"function\", \"function\": {\"name\": \"bash\", \"description\": \"Run\", \"parameters\": {\"type\": \"object\"}}}
assert c[\"add_generation_prompt\"] is True and c[\"documents\"] is None
' \"\$ctx\""
printf '{"messages": [{"role": "user", "content": "C"}], "add_generation_prompt": false}' >"$dir/c.json"
out=$($hr template --template "$dir/t.jinja" --context "$dir/c.json")
expect "--context renders that context as is" "[[ \"\$out\" == '[user:C]' ]]"

# A model without a chat template falls back to ChatML and says so.
$vg builtin "$dir/b.gguf" >/dev/null 2>&1 || bad "vocab-gguf builtin"
out=$($hr template --model "$dir/b.gguf" --messages "$dir/m.json" 2>"$dir/err"); rc=$?
expect "model: renders (its template or ChatML), exit 0" "[[ $rc -eq 0 && \"\$out\" == *Hi* ]]"

# Errors: one line, exit 1; usage: exit 2.
printf '{{ raise_exception("Roles must alternate") }}' >"$dir/raise.jinja"
$hr template --template "$dir/raise.jinja" --messages "$dir/m.json" >/dev/null 2>"$dir/err"; rc=$?
expect "raise_exception: exit 1, the template's message" "[[ $rc -eq 1 && \$(cat \"$dir/err\") == 'headroom template: Roles must alternate' ]]"
printf '{%% if x %%}' >"$dir/bad.jinja"
$hr template --template "$dir/bad.jinja" --messages "$dir/m.json" >/dev/null 2>"$dir/err"; rc=$?
expect "syntax error: exit 1, one line with the line number" "[[ $rc -eq 1 && \$(wc -l <\"$dir/err\") -eq 1 ]] && grep -q 'line 1' \"$dir/err\""
printf '[' >"$dir/broken.json"
$hr template --template "$dir/t.jinja" --messages "$dir/broken.json" >/dev/null 2>"$dir/err"; rc=$?
expect "bad JSON: exit 1, one line" "[[ $rc -eq 1 && \$(wc -l <\"$dir/err\") -eq 1 ]]"
$hr template --template "$dir/t.jinja" >/dev/null 2>&1; rc=$?
expect "no --messages: exit 2" "[[ $rc -eq 2 ]]"
$hr template --bogus >/dev/null 2>&1; rc=$?
expect "unknown option: exit 2" "[[ $rc -eq 2 ]]"
$hr template --help | grep -q -- '--no-generation-prompt'; rc=$?
expect "--help lists the options, exit 0" "[[ $rc -eq 0 ]]"
$hr --help | grep -q '^  template'; rc=$?
expect "headroom --help lists template" "[[ $rc -eq 0 ]]"

cli_done
