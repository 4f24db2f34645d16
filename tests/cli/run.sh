#!/usr/bin/env bash
# run.sh - `headroom run` as a user runs it: greedy output as JSON, the
# memory-governed path (--memory-limit) giving the same tokens as the plain
# one, a prompt that can never fit refused with N, M and the bytes before
# anything runs, --no-governor reporting its peak against the limit, and
# usage errors (exit 2). Uses the release build and a tiny generated model
# with the built-in vocabulary.
source "$(dirname "$0")/lib/common.sh" run

$gen --shape tiny --arch qwen3 --type q8_0 --n-embd 64 --n-head 4 --n-head-kv 2 --n-ff 96 \
  --n-layer 2 --out "$dir/m.gguf" >/dev/null 2>&1
tokens() { python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])'; }

plain=$($hr run --model "$dir/m.gguf" -p "hello world, once more" -n 12 --temp 0 --json 2>/dev/null | tokens)
expect "plain run prints 12 tokens" "[[ \$(echo \"\$plain\" | tr -cd , | wc -c) -eq 11 ]]"
gov=$($hr run --model "$dir/m.gguf" -p "hello world, once more" -n 12 --temp 0 --json \
  --memory-limit 4G 2>"$dir/gov.err" | tokens)
expect "--memory-limit gives the same tokens" "[[ -n \"\$plain\" && \"\$gov\" == \"\$plain\" ]]"
expect "--memory-limit reports peak and ceiling" "grep -q 'memory (governor): peak RSS .* ceiling 4.0 GiB: below the ceiling' '$dir/gov.err'"

$hr run --model "$dir/m.gguf" -p "hello" -n 4 --memory-limit 1M >"$dir/out" 2>"$dir/err"
rc=$?
expect "a ceiling that holds no prompt at all: exit 1" "[[ $rc -eq 1 ]]"
expect "...saying so, with the smallest ceiling that runs one" "grep -q 'the memory ceiling holds no prompt at all: even 1 token needs about .* the smallest --memory-limit that runs it is' '$dir/err'"
expect "...and nothing on stdout" "[[ ! -s '$dir/out' ]]"

$hr run --model "$dir/m.gguf" -p "hello" -n 4 --memory-limit 1M --no-governor >/dev/null 2>"$dir/err"
expect "--no-governor runs and reports the peak above the limit" "grep -q 'memory (no governor): peak RSS .* limit 1.0 MiB: ABOVE the limit' '$dir/err'"

$hr run --model "$dir/m.gguf" -p "hello" --memory-limit 12Q >/dev/null 2>"$dir/err"
rc=$?
expect "a bad --memory-limit: exit 2, names the text" "[[ $rc -eq 2 ]] && grep -q '12Q' '$dir/err'"
$hr run --model "$dir/m.gguf" -p "hello" --memory-limit 1G --score >/dev/null 2>&1
expect "--memory-limit with --score: usage error" "[[ \$? -eq 2 ]]"

$hr run --model "$dir/m.gguf" -p "hello" -n 2 --memory-limit 4G --memory-soft 0.5 --memory-hard 0.6 \
  >/dev/null 2>"$dir/err"
expect "--memory-soft/--memory-hard set the watermarks" "grep -q 'memory (governor)' '$dir/err'"
$hr run --model "$dir/m.gguf" -p "hello" --memory-limit 4G --memory-soft 0.9 --memory-hard 0.8 >/dev/null 2>&1
expect "soft above hard: usage error" "[[ \$? -eq 2 ]]"
$hr run --model "$dir/m.gguf" -p "hello" --memory-limit 4G --memory-hard 1.5 >/dev/null 2>&1
expect "a watermark above 1: usage error" "[[ \$? -eq 2 ]]"

# --cache-type: every type runs (head dim 64: quantized blocks fit), the
# timing line names it, --kv-type is the same flag, a bad value exits 2
# naming the flag, and a head dim quantized blocks cannot hold is refused.
$gen --shape tiny --arch qwen3 --type f32 --n-embd 128 --n-head 2 --n-head-kv 1 --head-dim 64 \
  --n-ff 96 --n-layer 2 --out "$dir/hd64.gguf" >/dev/null 2>&1
for t in f16 f32 q8_0 q4_0; do
  out=$($hr run --model "$dir/hd64.gguf" --tokens 1,2,3,4,5 -n 8 --temp 0 --json --cache-type $t 2>"$dir/err" | tokens)
  expect "--cache-type $t: 8 tokens, the timing line says KV $t" \
    "[[ \$(echo \"\$out\" | tr -cd , | wc -c) -eq 7 ]] && grep -q 'KV $t)' '$dir/err'"
done
alias_out=$($hr run --model "$dir/hd64.gguf" --tokens 1,2,3,4,5 -n 8 --temp 0 --json --kv-type q8_0 2>/dev/null | tokens)
q8_out=$($hr run --model "$dir/hd64.gguf" --tokens 1,2,3,4,5 -n 8 --temp 0 --json --cache-type q8_0 2>/dev/null | tokens)
expect "--kv-type q8_0 is --cache-type q8_0" "[[ -n \"\$q8_out\" && \"\$alias_out\" == \"\$q8_out\" ]]"
$hr run --model "$dir/hd64.gguf" -p "hello" --cache-type q5_0 >/dev/null 2>"$dir/err"
rc=$?
expect "--cache-type q5_0: exit 2, the flag and the value named" "[[ $rc -eq 2 ]] && grep -q -- \"--cache-type: 'q5_0' is not a cache type\" '$dir/err'"
$hr run --model "$dir/m.gguf" -p "hello" --cache-type q8_0 >/dev/null 2>"$dir/err"
rc=$?
expect "q8_0 on head dim 16: exit 1, the head dim named" "[[ $rc -eq 1 ]] && grep -q 'head dim is 16' '$dir/err'"
expect "--help lists --cache-type" "$hr run --help | grep -q -- '--cache-type T'"
# Prefill progress: on a terminal (script(1) gives the command a
# pseudo-terminal) one line redrawn in place with done / total, tokens/s and
# memory, erased at the end; nothing of it when stderr is a pipe or a file.
python3 -c 'print("hello world " * 300)' >"$dir/long.txt"
for how in plain governed; do
  extra=""; [[ $how == governed ]] && extra="--memory-limit 4G"
  script -q -e -c "$hr run --model '$dir/m.gguf' --prompt-file '$dir/long.txt' -n 2 --temp 0 --batch 64 $extra" \
    /dev/null </dev/null >"$dir/tty.out" 2>&1
  expect "$how: on a terminal, prefill progress (done / total, tokens/s, memory)" \
    "tr '\\r' '\\n' <'$dir/tty.out' | grep -aqE '^.\\[Kprefill [0-9]+ / 1502 tokens \\([0-9]+%\\), [0-9]+ tokens/s, memory [0-9.]+ [KMG]iB'"
  expect "$how: ...and the line is erased before the output" \
    "python3 -c 'import sys; t = open(sys.argv[1], \"rb\").read(); i = t.rfind(b\"\\r\\x1b[Kprefill\"); sys.exit(not (i >= 0 and b\"\\r\\x1b[K\" in t[i + 1:]))' '$dir/tty.out'"
  $hr run --model "$dir/m.gguf" --prompt-file "$dir/long.txt" -n 2 --temp 0 --batch 64 $extra \
    2>"$dir/pipe.err" | cat >/dev/null
  expect "$how: piped, no progress line" "! grep -aq 'prefill [0-9]* /' '$dir/pipe.err' && ! grep -aq \$'\\r' '$dir/pipe.err'"
done

# A --batch below the governor's smallest chunk (64) once meant no chunk
# ever fit: the request waited forever.
timeout 30 $hr run --model "$dir/m.gguf" -p "$(printf 'hello world %.0s' $(seq 40))" -n 2 --temp 0 \
  --batch 16 --memory-limit 4G >/dev/null 2>"$dir/err"
expect "--memory-limit with --batch 16 completes" "grep -q 'memory (governor): .*below the ceiling' '$dir/err'"

# A mixture-of-experts model under the governor: its plan (routing buffers
# included) prices the chunks; the tokens are the plain run's.
$gen --shape tiny-moe --n-expert 8 --n-expert-used 3 --out "$dir/moe.gguf" >/dev/null 2>&1
plain=$($hr run --model "$dir/moe.gguf" -p "hello world, once more" -n 12 --temp 0 --ignore-eos --json 2>/dev/null | tokens)
gov=$($hr run --model "$dir/moe.gguf" -p "hello world, once more" -n 12 --temp 0 --ignore-eos --json \
  --memory-limit 4G --batch 4 2>"$dir/err" | tokens)
expect "MoE: --memory-limit gives the plain run's 12 tokens" "[[ -n \"\$plain\" && \"\$gov\" == \"\$plain\" && \$(echo \"\$plain\" | tr -cd , | wc -c) -eq 11 ]]"

cli_done
