#!/usr/bin/env bash
# memory-truth.sh - the governor's numbers against what really happens
# (issue "memory truth"), with the release binary on generated models:
#
#   one footprint    idle `headroom serve` RSS <= 1.15 x the model file + the
#                    vocabulary's tables (measured on a model with the same
#                    vocabulary and almost no weights), Q8_0 and F16, packed
#                    and not (HR_KERNELS_PACK=0); and the governed peak of a
#                    prompt <= 1.05 x the ungoverned peak, same chunk.
#   M is the truth   for two models and three ceilings each, the refusal's M
#                    against the longest prompt that really completes, run
#                    with --admit-beyond-memory (a prompt that cannot
#                    complete exits 3 once its prefill waits for memory): M
#                    tokens complete and M + 2% (or one KV block) + the
#                    admission margin cannot (low by at most that, never
#                    high), and the prompt of M tokens completes with its
#                    peak RSS under the ceiling.
#   nothing at all   a ceiling that holds no prompt refuses to start, naming
#                    the smallest ceiling that runs one, and that one runs.
#   no false refusal a prompt whose ungoverned run peaks at P completes
#                    under a ceiling of 0.95 x P, in smaller chunks, with
#                    the same tokens.
source "$(dirname "$0")/lib/common.sh" memtruth

# ---- one footprint --------------------------------------------------------

# The weights dominate these (about 20 and 40 MB); the baseline has the same
# built-in vocabulary and almost nothing else.
common=(--shape tiny --arch qwen3 --n-head 4 --n-head-kv 2 --head-dim 64 --vocab builtin)
$gen "${common[@]}" --type q8_0 --n-embd 512 --n-ff 4096 --n-layer 3 --ctx 8192 --out "$dir/q8.gguf" >/dev/null
$gen "${common[@]}" --type f16 --n-embd 512 --n-ff 4096 --n-layer 3 --ctx 8192 --out "$dir/f16.gguf" >/dev/null
$gen "${common[@]}" --type q8_0 --n-embd 64 --n-ff 64 --n-layer 1 --out "$dir/base.gguf" >/dev/null

# idle_rss MODEL [ENV=V...]: VmRSS of a serve that has loaded MODEL and is idle.
idle_rss() {
  local m=$1 log="$dir/serve.log" pid rss=0
  shift
  env "$@" $hr serve --model "$m" --port 0 --threads 1 >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 200); do grep -q "listening on" "$log" && break; sleep 0.05; done
  sleep 0.3
  rss=$(awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$pid/status" 2>/dev/null)
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  echo "${rss:-0}"
}
base_rss=$(idle_rss "$dir/base.gguf")
base_file=$(stat -c %s "$dir/base.gguf")
tables=$((base_rss - base_file))
echo "#    vocabulary tables and the process itself: $(mib $tables) MiB (idle RSS of the baseline less its file)"
for t in q8 f16; do
  file=$(stat -c %s "$dir/$t.gguf")
  for pack in 1 0; do
    rss=$(idle_rss "$dir/$t.gguf" HR_KERNELS_PACK=$pack)
    ratio=$(awk -v r="$rss" -v t="$tables" -v f="$file" 'BEGIN { printf "%.3f", (r - t) / f }')
    expect "idle serve, $t, packing $pack: RSS $(mib $rss) MiB, (RSS - tables) / file $(mib $file) MiB = $ratio <= 1.15" \
      "awk -v r=$rss -v t=$tables -v f=$file 'BEGIN { exit !(r <= 1.15 * f + t) }'"
  done
done

# Prompts are token ids (one id repeated), so their length is exact.
toks() { python3 -c "print(','.join(['120'] * $1))"; }
peak() { sed -n 's/.*peak RSS \([0-9.]*\) MiB.*/\1/p' "$1" | head -1; }
for t in q8 f16; do
  for pack in 1 0; do
    HR_KERNELS_PACK=$pack timeout 60 $hr run --model "$dir/$t.gguf" --tokens "$(toks 3000)" -n 2 --temp 0 \
      --threads 1 --batch 512 >/dev/null 2>"$dir/plain.err"
    HR_KERNELS_PACK=$pack timeout 60 $hr run --model "$dir/$t.gguf" --tokens "$(toks 3000)" -n 2 --temp 0 \
      --threads 1 --batch 512 --memory-limit 8G >/dev/null 2>"$dir/gov.err"
    p=$(peak "$dir/plain.err") g=$(peak "$dir/gov.err")
    expect "$t, packing $pack: governed peak ${g:-?} MiB <= 1.05 x ungoverned ${p:-?} MiB (3K prompt, chunk 512)" \
      "[[ -n '$p' && -n '$g' ]] && awk -v p=$p -v g=$g 'BEGIN { exit !(g <= 1.05 * p) }'"
  done
done

# ---- M is the truth -------------------------------------------------------

# KV is 32 KiB a token in both (Qwen2.5-0.5B has 12, Llama-3.2-1B 32), so
# one block (32 tokens) is a MiB of the ceiling, above the residual's
# run-to-run noise (0.1-0.35 MiB); admission keeps 0.5 MiB of it below the
# hard watermark, so M can be low by that, never high. Ceilings of 24-88 MiB
# above the minimum keep prompts under 3K tokens (their prefills are most of
# this script's time).
$gen --shape tiny --arch qwen3 --type q8_0 --n-embd 256 --n-head 8 --n-head-kv 8 --head-dim 64 \
  --n-ff 1024 --n-layer 16 --ctx 16384 --vocab builtin --out "$dir/ma.gguf" >/dev/null
$gen --shape tiny --arch llama --type f16 --n-embd 512 --n-head 8 --n-head-kv 8 --head-dim 64 \
  --n-ff 768 --n-layer 16 --ctx 16384 --vocab builtin --out "$dir/mb.gguf" >/dev/null
# completes MODEL LIMIT N: 0 when an N-token prompt completes under LIMIT
# (admission skipped), 1 when it cannot (exit 3: its prefill waited).
completes() {
  timeout 60 $hr run --model "$1" --tokens "$(toks "$3")" -n 1 --temp 0 --threads 2 --memory-limit "$2" \
    --admit-beyond-memory >/dev/null 2>"$dir/b.err"
  local rc=$?
  if ((rc == 0)); then return 0; fi
  if ((rc != 3)); then echo "#    unexpected exit $rc for $3 tokens: $(tail -1 "$dir/b.err")"; fi
  return 1
}
for m in ma mb; do
  timeout 60 $hr run --model "$dir/$m.gguf" -p x --memory-limit 1M >/dev/null 2>"$dir/min.err"
  min=$(sed -n 's/.*smallest --memory-limit that runs it is \([0-9.]*\) MiB.*/\1/p' "$dir/min.err")
  if [[ -z "$min" ]]; then bad "$m: a 1M ceiling names the minimum ($(tail -1 "$dir/min.err"))"; continue; fi
  for extra in 24 56 88; do
    limit=$(awk -v a="$min" -v b="$extra" 'BEGIN { printf "%d", a + b + 0.999 }')M
    timeout 60 $hr run --model "$dir/$m.gguf" --tokens "$(toks 16000)" -n 1 --threads 2 \
      --memory-limit "$limit" >/dev/null 2>"$dir/m.err"
    M=$(sed -n 's/.*> \([0-9]*\) maximum (memory).*/\1/p' "$dir/m.err")
    if [[ -z "$M" ]]; then bad "$m at $limit: refused with M ($(tail -1 "$dir/m.err"))"; continue; fi
    # M is the truth when the M-token prompt completes and one of M + tol +
    # 17 tokens cannot (tol: 2% or one KV block, 32 tokens; 16 more for the
    # admission margin, HR_GOV_ADMIT_NOISE_BYTES, 0.5 MiB = 16 tokens here):
    # the real maximum is then in [M, M + tol + 16], and M never at or past
    # the first length that fails. (This file used to bisect the real
    # maximum to 16 tokens for the same verdict: 5-7 prefills a ceiling
    # where these are 2, about a minute of make test.) A new process samples
    # its own residual, and starts differ by up to 1.5 MiB (docs/memory.md:
    # 30.3-31.8 MiB for one 1-token need), so its M can be lower than this
    # one's (CI: 799, then 767 tokens; and an M-token run with admission
    # skipped waited at 1792 tokens): when it refuses M it names its own,
    # and that is the prompt that must complete, below the ceiling.
    tol=$(awk -v r=$M 'BEGIN { t = int(r * 0.02); print (t > 32 ? t : 32) }')
    Mr=$M
    for try in 1 2 3; do
      timeout 60 $hr run --model "$dir/$m.gguf" --tokens "$(toks "$Mr")" -n 1 --temp 0 --threads 2 \
        --memory-limit "$limit" >/dev/null 2>"$dir/atm.err"
      rc=$?
      m2=$(sed -n 's/.*prompt is too long: [0-9]* tokens > \([0-9]*\) maximum.*/\1/p' "$dir/atm.err" | head -1)
      [[ $rc -ne 0 && -n "$m2" ]] && ((m2 < Mr)) || break
      Mr=$m2
    done
    expect "$m at $limit: the M-token prompt ($Mr tokens, admitted by its own process) completes, peak under the ceiling ($(tail -1 "$dir/atm.err" | cut -c1-120))" \
      "[[ $rc -eq 0 ]] && grep -q 'memory (governor): .*: below the ceiling' '$dir/atm.err'"
    # M itself completes: shown by that run, or (when its own process named
    # a lower M) by one with admission skipped.
    m_completes=0
    if ((Mr == M)); then ((rc == 0)) && m_completes=1
    else completes "$dir/$m.gguf" "$limit" "$M" && m_completes=1; fi
    over=$((M + tol + 17))
    completes "$dir/$m.gguf" "$limit" $over
    over_rc=$?
    expect "$m at $limit: M $M is the truth: $M tokens complete, $over (M + $tol + 17) cannot" \
      "(( m_completes == 1 && over_rc != 0 ))"
  done
done

# ---- nothing at all ---------------------------------------------------------

$hr serve --model "$dir/ma.gguf" --port 0 --memory-limit 2M >/dev/null 2>"$dir/s.err" &
spid=$!
pids+=("$spid")
wait "$spid"
rc=$?
expect "serve under a ceiling that holds no prompt: exit 1, naming the minimum" \
  "[[ $rc -eq 1 ]] && grep -q 'holds no prompt at all: even 1 token needs about .*the smallest --memory-limit that runs it is' '$dir/s.err'"
min=$(sed -n 's/.*that runs it is \([0-9.]*\) MiB.*/\1/p' "$dir/s.err")
timeout 60 $hr run --model "$dir/ma.gguf" -p x -n 2 --threads 1 --memory-limit "${min%.*}M" >/dev/null 2>"$dir/r.err"
expect "...and the minimum it names (${min:-?} MiB) runs a 1-token prompt" "[[ \$? -eq 0 ]]"

# ---- no false refusal -------------------------------------------------------

# A 2048-token chunk's activations (gate and up: 2048 x 4096 x 8 bytes) make
# the ungoverned peak; under 0.95 of it the governor must shrink the chunks.
timeout 60 $hr run --model "$dir/q8.gguf" --tokens "$(toks 6000)" -n 8 --temp 0 --threads 1 --batch 2048 \
  --json >"$dir/plain.json" 2>"$dir/plain.err"
P=$(peak "$dir/plain.err")
ceil=$(awk -v p="$P" 'BEGIN { printf "%d", p * 0.95 * 1024 }')K
timeout 60 $hr run --model "$dir/q8.gguf" --tokens "$(toks 6000)" -n 8 --temp 0 --threads 1 --batch 2048 \
  --json --memory-limit "$ceil" >"$dir/gov.json" 2>"$dir/gov.err"
expect "no false refusal: ungoverned peak $P MiB; under 0.95 x P ($ceil) the prompt completes below the ceiling" \
  "grep -q 'memory (governor): .*: below the ceiling' '$dir/gov.err'"
expect "...in throttled chunks" "grep -q 'prefill chunk 2048 -> ' '$dir/gov.err'"
tok() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["tokens"])' "$1" 2>/dev/null; }
expect "...with the same tokens" "[[ -n \"\$(tok $dir/plain.json)\" && \"\$(tok $dir/plain.json)\" == \"\$(tok $dir/gov.json)\" ]]"

cli_done
