#!/usr/bin/env bash
# window.sh - windowed KV on a gpt-oss-shaped model (issue 19, item 2): the
# sliding-window layers keep only their window's blocks, so a 4096-token
# prompt's KV is what the window says, about half of keeping every position
# (--no-kv-window, the same logits). Shown three ways, with the release
# binary on a generated model (4 layers, every other one windowed with
# gpt-oss's 128 tokens; 8 KV heads of 64, f16: 8 KiB of KV per token kept):
#
#   the plan      `headroom run` prints the plan's KV ("kv: N bytes planned")
#                 and the pool's high-water mark: equal, and the windowed
#                 figure is exactly ceil(n / 32) full blocks plus the
#                 window's (the last 512-token chunk's 16 blocks and the 4
#                 before them that its first query reads) of half-size blocks;
#   measured RSS  the peak RSS falls by at least 80% of the planned saving;
#   M             under one --memory-limit, admission's M (the longest prompt
#                 it accepts) is at least 1.8x the unwindowed M;
#   same tokens   greedy output is identical with and without the window.
source "$(dirname "$0")/lib/common.sh" window
toks() { python3 -c "import random; r = random.Random(7); print(','.join(str(r.randrange(3, 250)) for _ in range($1)))"; }
field() { python3 -c "import json,sys; d = json.load(sys.stdin); print($1)"; }

$gen --shape tiny --arch gpt-oss --type q8_0 --n-embd 256 --n-head 16 --n-head-kv 8 --head-dim 64 \
  --n-expert 4 --n-expert-used 2 --n-ff-exp 64 --n-layer 4 --swa 128 --ctx 16384 --vocab builtin \
  --out "$dir/m.gguf" >/dev/null || { echo "FAIL gen-model"; exit 1; }
toks 4096 >"$dir/p4096"

# run WHICH [flags...]: a 4096-token prompt, 8 greedy tokens; JSON on
# $dir/WHICH.json, stderr on $dir/WHICH.err.
run() {
  local which=$1
  shift
  timeout 60 $hr run --model "$dir/m.gguf" --tokens "$(cat "$dir/p4096")" -n 8 --temp 0 --threads 2 \
    --json "$@" >"$dir/$which.json" 2>"$dir/$which.err"
}
run win
run full --no-kv-window
planned() { sed -n 's/^kv: \([0-9]*\) bytes planned.*/\1/p' "$dir/$1.err"; }
used() { sed -n 's/^kv: [0-9]* bytes planned, \([0-9]*\) bytes used at most.*/\1/p' "$dir/$1.err"; }
block() { sed -n 's/^kv: .*(blocks of \([0-9]*\) bytes.*/\1/p' "$dir/$1.err"; }
pw=$(planned win) pf=$(planned full) uw=$(used win) uf=$(used full) bw=$(block win) bf=$(block full)
if [[ -z "$pw" || -z "$pf" ]]; then
  bad "both runs print the plan's KV ($(tail -1 "$dir/win.err"); $(tail -1 "$dir/full.err"))"
  echo "$passed passed, $failed failed"
  exit 1
fi
rw=$(field 'd["timings"]["peak_rss_bytes"]' <"$dir/win.json")
rf=$(field 'd["timings"]["peak_rss_bytes"]' <"$dir/full.json")
echo "#    4096-token prompt + 8 tokens: KV planned $pw B windowed, $pf B full ($(awk -v a="$pw" -v b="$pf" 'BEGIN { printf "%.3f", a / b }')); peak RSS $(awk -v a="$rw" 'BEGIN { printf "%.1f", a / 1048576 }') vs $(awk -v a="$rf" 'BEGIN { printf "%.1f", a / 1048576 }') MiB"

expect "the plan is the pool's high-water mark ($pw == $uw, $pf == $uf)" "[[ $pw -eq $uw && $pf -eq $uf ]]"
expect "windowed blocks are half a full-context block ($bw x 2 == $bf)" "[[ \$((bw * 2)) -eq $bf ]]"
# 4104 positions kept whole: 129 blocks of bf. Windowed: 129 full-layer
# blocks, and at most 16 + 4 + 1 of the window's (the 512-token chunk that
# starts at a block boundary, the 4 blocks before its first query's window
# start, and the decodes' one more block at most).
expect "full context: 129 blocks ($pf == 129 x $bf)" "[[ $pf -eq \$((129 * bf)) ]]"
expect "windowed: 128 full-layer blocks and the window's 20 at the last chunk ($pw == 148 x $bw)" \
  "[[ $pw -eq \$((148 * bw)) ]]"
expect "windowed KV is at most 0.6 of full" "awk -v a=$pw -v b=$pf 'BEGIN { exit !(a <= 0.6 * b) }'"
expect "peak RSS falls by at least 80% of the planned saving ($rf - $rw >= 0.8 x ($pf - $pw))" \
  "awk -v rw=$rw -v rf=$rf -v pw=$pw -v pf=$pf 'BEGIN { exit !(rf - rw >= 0.8 * (pf - pw)) }'"
tw=$(field 'd["tokens"]' <"$dir/win.json") tf=$(field 'd["tokens"]' <"$dir/full.json")
expect "the same 8 tokens with and without the window" "[[ -n '$tw' && '$tw' == '$tf' ]]"

# M: a prompt far past what fits is refused with M, under one ceiling for both.
timeout 60 $hr run --model "$dir/m.gguf" -p x --memory-limit 1M >/dev/null 2>"$dir/min.err"
min=$(sed -n 's/.*smallest --memory-limit that runs it is \([0-9.]*\) MiB.*/\1/p' "$dir/min.err")
limit=$(awk -v a="${min:-0}" 'BEGIN { printf "%d", a + 24.999 }')M
m_of() {
  timeout 60 $hr run --model "$dir/m.gguf" --tokens "$(toks 16000)" -n 1 --threads 2 \
    --memory-limit "$limit" "$@" >/dev/null 2>"$dir/m.err"
  sed -n 's/.*> \([0-9]*\) maximum (memory).*/\1/p' "$dir/m.err"
}
mw=$(m_of) mf=$(m_of --no-kv-window)
echo "#    M under $limit: $mw tokens windowed, $mf full ($(awk -v a="${mw:-0}" -v b="${mf:-1}" 'BEGIN { printf "%.2f", a / b }')x)"
expect "M grows with the window ($mw >= 1.8 x $mf)" \
  "[[ -n '$mw' && -n '$mf' ]] && awk -v a=$mw -v b=$mf 'BEGIN { exit !(a >= 1.8 * b) }'"

cli_done
