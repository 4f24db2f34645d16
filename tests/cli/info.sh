#!/usr/bin/env bash
# info.sh - `headroom info` as a user runs it: on generated models (text and
# JSON, checked field by field), and on bad input (one line, exit code 1).
# Uses the release build (build/headroom, build/gen-model; HR_BUILD: another dir).
source "$(dirname "$0")/lib/common.sh" info

$gen --shape tiny --arch qwen2 --type q8_0 --n-embd 64 --n-head 4 --n-head-kv 2 \
  --n-ff 128 --ctx 2048 --out "$dir/m.gguf" || bad "gen-model tiny"

out=$($hr info "$dir/m.gguf"); rc=$?
expect "info exits 0" "[[ $rc -eq 0 ]]"
expect "info names the architecture" "grep -q '^architecture   qwen2' <<<\"\$out\""
expect "info prints the context" "grep -q '^context        2048' <<<\"\$out\""
expect "info prints heads" "grep -q '4 query, 2 KV (GQA), head dim 16' <<<\"\$out\""
expect "info counts tensors by type" "grep -q 'Q8_0: 15' <<<\"\$out\""

json=$($hr info --json "$dir/m.gguf"); rc=$?
expect "info --json exits 0" "[[ $rc -eq 0 ]]"
check_json() {
  /usr/bin/python3 - "$1" <<'PY'
import json, sys
j = json.loads(sys.argv[1])
want = {"architecture": "qwen2", "context_length": 2048, "n_layer": 2, "n_embd": 64,
        "n_head": 4, "n_head_kv": 2, "head_dim": 16, "n_ff": 128, "tokenizer_model": "gpt2",
        "chat_template": True, "tied_output": True, "gguf_version": 3}
for k, v in want.items():
    assert j[k] == v, (k, j[k], v)
assert j["tensors_by_type"]["Q8_0"] == 15 and j["tensors_by_type"]["F32"] == 11, j["tensors_by_type"]
assert j["n_params"] > 0 and j["file_size_bytes"] > 0
PY
}
expect "info --json fields" "check_json \"\$json\""

# Bad files: one line on stderr naming the problem, exit 1.
printf 'GGUF\x09\x00\x00\x00' >"$dir/badver.gguf"
err=$($hr info "$dir/badver.gguf" 2>&1 >/dev/null); rc=$?
expect "bad version exits 1" "[[ $rc -eq 1 ]]"
expect "bad version: one line naming the version" \
  "[[ \$(wc -l <<<\"\$err\") -eq 1 ]] && grep -qi 'version' <<<\"\$err\""
head -c 3000 "$dir/m.gguf" >"$dir/trunc.gguf"
err=$($hr info "$dir/trunc.gguf" 2>&1 >/dev/null); rc=$?
expect "truncated file exits 1 with one line" "[[ $rc -eq 1 && \$(wc -l <<<\"\$err\") -eq 1 ]]"
err=$($hr info "$dir/nope.gguf" 2>&1 >/dev/null); rc=$?
# A mixture-of-experts file: experts, active experts, active parameters per
# token (2 layers x 3 stacks x 64 x 64 x (8 - 2) idle expert parameters).
$gen --shape tiny-moe --n-expert 8 --n-expert-used 2 --n-ff-exp 64 --out "$dir/moe.gguf" \
  >/dev/null 2>&1 || bad "gen-model tiny-moe"
out=$($hr info "$dir/moe.gguf")
expect "info on MoE: experts and active experts" "grep -q '^experts        8, 2 active per token, expert ffn 64' <<<\"\$out\""
expect "info on MoE: active parameters" "grep -q '^active params  0.11 M per token (111040, 43.0% of all)' <<<\"\$out\""
json=$($hr info --json "$dir/moe.gguf")
/usr/bin/python3 - "$json" <<'PY' && ok "info --json on MoE: n_expert, n_expert_used, n_params_active" || bad "info --json on MoE"
import json, sys
j = json.loads(sys.argv[1])
assert j["architecture"] == "qwen3moe", j
assert j["n_expert"] == 8 and j["n_expert_used"] == 2 and j["n_ff_exp"] == 64, j
assert j["n_params_active"] == j["n_params"] - 2 * 3 * 64 * 64 * (8 - 2), j
PY

expect "missing file exits 1 naming it" "[[ $rc -eq 1 ]] && grep -q 'nope.gguf' <<<\"\$err\""
: >"$dir/empty.gguf"
$hr info "$dir/empty.gguf" >/dev/null 2>&1; rc=$?
expect "empty file exits 1" "[[ $rc -eq 1 ]]"
$hr info >/dev/null 2>&1; rc=$?
expect "no file is a usage error (2)" "[[ $rc -eq 2 ]]"
$hr info --help >/dev/null; rc=$?
expect "info --help exits 0" "[[ $rc -eq 0 ]]"
$hr --help | grep -q info; rc=$?
expect "headroom --help lists info" "[[ $rc -eq 0 ]]"
$hr frobnicate >/dev/null 2>&1; rc=$?
expect "unknown command exits 2" "[[ $rc -eq 2 ]]"

cli_done
