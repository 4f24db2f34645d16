#!/usr/bin/env bash
# serve.sh - `headroom serve`'s command line as a user meets it: --help lists
# every flag the issue names, usage errors exit 2 with one line naming the
# flag, HEADROOM_<FLAG> variables are read (the command line winning), a port
# in use is a clear error (exit 1), SIGINT stops a server cleanly (exit 0), and
# --no-governor (benchmarks' "before") serves with a warning that memory is
# not governed and says so in /metrics.
# The protocol itself is tested by tests/e2e/ with the official clients.
source "$(dirname "$0")/lib/common.sh" serve

help=$($hr serve --help; echo "|$?")
for f in model host port api-key ctx threads parallel memory-limit memory-reserve max-queue \
  queue-timeout alias max-body no-prefix-cache cache-limit cache-type no-governor \
  queue-max-wait overload-status agent-port ready-hold; do
  expect "--help lists --$f" "grep -q -- '--$f' <<<\"\$help\""
done
expect "--help exits 0" "[[ \"\$help\" == *'|0' ]]"
expect "--help names the environment variables" "grep -q HEADROOM_MEMORY_LIMIT <<<\"\$help\""

err=$($hr serve 2>&1; echo "|$?")
expect "no --model: exit 2, says what is missing" "[[ \"\$err\" == *'--model FILE is required'*'|2' ]]"
err=$($hr serve --model x --bogus 1 2>&1; echo "|$?")
expect "unknown flag: exit 2, named" "[[ \"\$err\" == *\"unknown option '--bogus'\"*'|2' ]]"
err=$($hr serve --model x --port 70000 2>&1; echo "|$?")
expect "port above 65535: exit 2" "[[ \"\$err\" == *'--port 70000 is above 65535'*'|2' ]]"
err=$(HEADROOM_PARALLEL=many $hr serve --model x 2>&1; echo "|$?")
expect "HEADROOM_PARALLEL is read and checked" "[[ \"\$err\" == *\"--parallel: 'many' is not a valid count\"*'|2' ]]"
err=$(HEADROOM_PARALLEL=many $hr serve --model x --parallel 2 --max-body 0 2>&1; echo "|$?")
expect "the command line wins over the environment" "[[ \"\$err\" != *'many'* && \"\$err\" == *'--max-body'*'|2' ]]"
err=$($hr serve --model x --memory-reserve 1Q 2>&1; echo "|$?")
expect "--memory-reserve 1Q: exit 2, the flag named" "[[ \"\$err\" == *'--memory-reserve: invalid size \"1Q\"'*'|2' ]]"
err=$(HEADROOM_MEMORY_RESERVE=-5 $hr serve --model x 2>&1; echo "|$?")
expect "HEADROOM_MEMORY_RESERVE is read and checked" "[[ \"\$err\" == *'--memory-reserve: invalid size \"-5\"'*'|2' ]]"
err=$($hr serve --model x --no-prefix-cache=1 2>&1; echo "|$?")
expect "a switch takes no value" "[[ \"\$err\" == *'--no-prefix-cache takes no value'*'|2' ]]"
err=$($hr serve --model x --cache-type q5_0 2>&1; echo "|$?")
expect "--cache-type q5_0: exit 2, named" "[[ \"\$err\" == *\"--cache-type: 'q5_0' is not a cache type\"*'|2' ]]"
err=$(HEADROOM_CACHE_TYPE=q3 $hr serve --model x 2>&1; echo "|$?")
expect "HEADROOM_CACHE_TYPE is read and checked" "[[ \"\$err\" == *\"--cache-type: 'q3'\"*'|2' ]]"
err=$($hr serve --model x --overload-status 500 2>&1; echo "|$?")
expect "--overload-status 500: exit 2, 503 or 529 named" "[[ \"\$err\" == *'--overload-status 500: must be 503 or 529'*'|2' ]]"
err=$(HEADROOM_AGENT_PORT=70000 $hr serve --model x 2>&1; echo "|$?")
expect "HEADROOM_AGENT_PORT is read and checked" "[[ \"\$err\" == *'--agent-port 70000: must be 1..65535'*'|2' ]]"
err=$($hr serve --model x --queue-max-wait soon 2>&1; echo "|$?")
expect "--queue-max-wait soon: exit 2, named" "[[ \"\$err\" == *\"--queue-max-wait: 'soon' is not a valid number of seconds\"*'|2' ]]"
err=$($hr serve --model "$dir/missing.gguf" --port 0 2>&1; echo "|$?")
expect "a missing model: exit 1, the path named" "[[ \"\$err\" == *'missing.gguf'*'|1' ]]"

# A real server on a free port, started through the environment, with an
# API key (probes need none) and an agent-check port.
$gen --shape tiny --out "$dir/m.gguf" >/dev/null 2>&1
agent=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
HEADROOM_MODEL="$dir/m.gguf" HEADROOM_PORT=0 HEADROOM_ALIAS=one,two HEADROOM_MEMORY_RESERVE=100M \
  HEADROOM_AGENT_PORT=$agent HEADROOM_API_KEY=k $hr serve 2>"$dir/log" &
pids+=($!)
port=
for _ in $(seq 1 100); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$dir/log" | sed 's/.*://')
  [[ -n $port ]] && break
  sleep 0.1
done
expect "HEADROOM_MODEL / HEADROOM_PORT=0: listening, port logged" "[[ -n \"\$port\" ]]"
expect "HEADROOM_MEMORY_RESERVE=100M: the governor's reserve" "grep -q 'memory ceiling .*reserve 100.0 MiB)' \"\$dir/log\""
ready=$(curl -s -w '|%{http_code}' "http://127.0.0.1:$port/ready")
expect "/ready without the key: 200 {\"status\":\"ready\"}" "[[ \"\$ready\" == '{\"status\":\"ready\"}|200' ]]"
line=$(timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$agent; cat <&3")
expect "HEADROOM_AGENT_PORT: the agent answers 'ready up 100%'" "[[ \"\$line\" == 'ready up 100%' ]]"
models=$(curl -s -H 'x-api-key: k' "http://127.0.0.1:$port/v1/models")
expect "HEADROOM_ALIAS=one,two: both names in /v1/models" "[[ \"\$models\" == *'\"one\"'* && \"\$models\" == *'\"two\"'* ]]"
err=$($hr serve --model "$dir/m.gguf" --port "$port" 2>&1; echo "|$?")
expect "a port in use: exit 1, the address named" "[[ \"\$err\" == *\"cannot listen on 127.0.0.1:$port\"*'|1' ]]"
metrics=$(curl -s -H 'x-api-key: k' "http://127.0.0.1:$port/metrics")
expect "governed by default: headroom_memory_governed 1, the governor's counters present" \
  "grep -qx 'headroom_memory_governed 1' <<<\"\$metrics\" && grep -q '^headroom_memory_ceiling_bytes ' <<<\"\$metrics\""
kill -INT "${pids[0]}"
wait "${pids[0]}"
rc=$?
expect "SIGINT: exit 0" "[[ $rc -eq 0 ]]"
expect "SIGINT: logged" "grep -q 'SIGINT: shutting down' \"\$dir/log\""
expect "the default cache type and its block bytes are logged" "grep -q 'KV cache f16: [0-9]* bytes per block of 32 tokens' \"\$dir/log\""

# A q8_0 cache: logged with its real block bytes (2 layers x 2 x 32 tokens x
# 1 KV head x 2 blocks of 34 bytes), and /metrics counts blocks of that size.
$gen --shape tiny --arch qwen3 --type f32 --n-embd 128 --n-head 2 --n-head-kv 1 --head-dim 64 \
  --n-ff 96 --n-layer 2 --out "$dir/hd64.gguf" >/dev/null 2>&1
$hr serve --model "$dir/hd64.gguf" --port 0 --cache-type q8_0 2>"$dir/log8" &
pids+=($!)
port=
for _ in $(seq 1 100); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$dir/log8" | sed 's/.*://')
  [[ -n $port ]] && break
  sleep 0.1
done
expect "--cache-type q8_0: logged with 8704-byte blocks" "grep -q 'KV cache q8_0: 8704 bytes per block of 32 tokens' \"\$dir/log8\""
metrics=$(curl -s "http://127.0.0.1:$port/metrics")
expect "--cache-type q8_0: /metrics KV block bytes follow" "grep -q 'headroom_kv_block_bytes 8704' <<<\"\$metrics\""
kill -INT "${pids[1]}"
wait "${pids[1]}"

# --no-governor: a warning at start, the request still served, /metrics
# says ungoverned and has no ceiling, the chunk count still there.
$hr serve --model "$dir/m.gguf" --port 0 --no-governor --memory-limit 1G --batch-tokens 64 \
  2>"$dir/log-ng" &
pids+=($!)
port=
for _ in $(seq 1 100); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$dir/log-ng" | sed 's/.*://')
  [[ -n $port ]] && break
  sleep 0.1
done
expect "--no-governor: listening" "[[ -n \"\$port\" ]]"
expect "--no-governor: warns that memory is not governed and the limit is ignored" \
  "grep -q 'warn .*--no-governor: memory is NOT governed: fixed 64-token prefill chunks.*--memory-limit ignored' \"\$dir/log-ng\""
body='{"model":"m","max_tokens":2,"messages":[{"role":"user","content":"hello there, this prompt is longer than one chunk of sixty-four tokens? hello there, this prompt is longer than one chunk of sixty-four tokens? hello there"}]}'
resp=$(curl -s -w '|%{http_code}' "http://127.0.0.1:$port/v1/messages" -H 'content-type: application/json' -d "$body")
expect "--no-governor: a message is served (200, usage)" "[[ \"\$resp\" == *'\"input_tokens\":'*'|200' ]]"
n_in=$(grep -o '"input_tokens":[0-9]*' <<<"$resp" | cut -d: -f2)
# The scheduler counts a step's tokens just after the request's last event,
# so the response can come first: scrape until the count arrives (<= 2 s).
for _ in $(seq 1 20); do
  metrics=$(curl -s "http://127.0.0.1:$port/metrics")
  [[ -n $n_in ]] && grep -qx "headroom_prefill_tokens_total $n_in" <<<"$metrics" && break
  sleep 0.1
done
expect "--no-governor: headroom_memory_governed 0, no ceiling metric" \
  "grep -qx 'headroom_memory_governed 0' <<<\"\$metrics\" && ! grep -q '^headroom_memory_ceiling_bytes' <<<\"\$metrics\""
n_pre=$(sed -n 's/^headroom_prefill_tokens_total //p' <<<"$metrics")
n_chunks=$(sed -n 's/^headroom_prefill_chunks_total //p' <<<"$metrics")
expect "--no-governor: prefilled tokens == input_tokens ($n_pre == $n_in), fixed 64-token chunks ($n_chunks)" \
  "[[ -n \"\$n_in\" && \"\$n_pre\" == \"\$n_in\" && \"\$n_chunks\" == \$(( (n_in + 63) / 64 )) ]]"
# The last server started (the q8_0 one above is pids[1]).
kill -INT "${pids[-1]}"
wait "${pids[-1]}"
expect "--no-governor: SIGINT exit 0" "[[ $? -eq 0 ]]"

cli_done
