// agent-scenario.mjs - the prefix cache's reason to exist: a coding agent
// re-sends a ~16K-token prefix (system prompt, tool definitions, history)
// every turn and appends a little. Five turns, each appending a few hundred
// tokens (the previous answer and a new user message), against the
// Qwen2.5-0.5B-shaped bench model, streamed through the official
// @anthropic-ai/sdk as Claude Code does; time to first token per turn, with
// the prefix cache and with --no-prefix-cache, measured in one run.
//
//   node bench/agent-scenario.mjs [--model models/bench-qwen2.5-0.5b-q8_0.gguf]
//        [--prefix-tokens 16000] [--turns 5] [--cold-turns 2]
//
// The cache-disabled server runs --cold-turns turns (default 2: every cold
// turn re-prefills the whole prefix, so more add minutes and no
// information). Prints machine-readable lines:
//   bench agent_turn cache=on|off turn=N prompt_tokens=... cached_tokens=... ttft_ms=...
//   bench agent_scenario turn1_ttft_ms=... later_ttft_median_ms=... speedup_vs_turn1=...
//     speedup_vs_no_cache=...
// HEADROOM_BIN picks the binary (default build/headroom). Never part of `make test`.
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
const model = opt("model", path.join(root, "models/bench-qwen2.5-0.5b-q8_0.gguf"));
const prefixTokens = Number(opt("prefix-tokens", 16000));
const turns = Number(opt("turns", 5));
const coldTurns = Number(opt("cold-turns", 2));
if (!fs.existsSync(model)) {
  console.error(`agent-scenario: ${model} is missing (make bench makes it)`);
  process.exit(1);
}

// The prefix: a long system prompt and tool definitions, as an agent sends.
// About 1.1 tokens per word of this text on the Qwen vocabulary; the
// server's count is printed, so the estimate only sizes it.
const words = "Read the file before editing it. Keep changes minimal and run the tests after each change. ";
const system = words.repeat(Math.round(prefixTokens / 18));
const tools = Array.from({ length: 12 }, (_, i) => ({
  name: `tool_${i}`,
  description: `Tool number ${i}: does one thing well and reports what it did.`,
  input_schema: { type: "object", properties: { path: { type: "string" }, text: { type: "string" } }, required: ["path"] },
}));
const userTurn = (t) => `Turn ${t}: ` + "Please look at the next failing test and explain the cause in detail. ".repeat(20);

async function run(cache, nTurns) {
  const server = await startServer(["--parallel", "1", "--ctx", "32768", ...(cache ? [] : ["--no-prefix-cache"])],
    { model, timeoutMs: 120_000 });
  const client = server.anthropic({ timeout: 1_800_000 });
  const messages = [];
  const rows = [];
  for (let t = 1; t <= nTurns; t++) {
    messages.push({ role: "user", content: userTurn(t) });
    const t0 = performance.now();
    let ttft = null, text = "";
    const stream = client.messages.stream({ model: "claude-sonnet-4-6", max_tokens: 24, temperature: 0, system, tools, messages });
    stream.on("text", (d) => { if (ttft === null) ttft = performance.now() - t0; text += d; });
    const final = await stream.finalMessage();
    if (ttft === null) ttft = performance.now() - t0;
    const u = final.usage;
    const prompt = u.input_tokens + (u.cache_read_input_tokens || 0);
    rows.push({ turn: t, prompt, cached: u.cache_read_input_tokens || 0, ttft });
    console.log(`bench agent_turn cache=${cache ? "on" : "off"} turn=${t} prompt_tokens=${prompt} ` +
      `cached_tokens=${u.cache_read_input_tokens || 0} ttft_ms=${ttft.toFixed(0)}`);
    messages.push({ role: "assistant", content: text || "(no text)" });
  }
  await server.stop();
  return rows;
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2; };
console.log(`bench agent_scenario_load load="${fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}"`);
const on = await run(true, turns);
const off = await run(false, coldTurns);
const later = median(on.slice(1).map((r) => r.ttft));
const offLater = median(off.slice(1).map((r) => r.ttft));
console.log(`bench agent_scenario turns=${turns} prefix_tokens=${on[0].prompt} turn1_ttft_ms=${on[0].ttft.toFixed(0)} ` +
  `later_ttft_median_ms=${later.toFixed(0)} speedup_vs_turn1=${(on[0].ttft / later).toFixed(1)} ` +
  `no_cache_later_ttft_median_ms=${offLater.toFixed(0)} speedup_vs_no_cache=${(offLater / later).toFixed(1)}`);
console.log(`bench agent_scenario_load_after load="${fs.readFileSync("/proc/loadavg", "utf8").split(" ").slice(0, 3).join(" ")}"`);
