// hybrid-memory-limit.mjs - 4 concurrent streams on a hybrid model
// (qwen35moe) under a --memory-limit that holds each of them alone but not
// all four: the recurrent state slots are counted (the `state` account),
// requests are preempted and resume, nothing is aborted, the process's peak
// RSS (VmHWM) stays under the ceiling, and each stream's text equals its
// run alone on a server without a ceiling. The ceiling is set relative to
// the server's resident size at rest, so the run means the same on any
// machine. Before start_queued counted the arena of the step a restart
// joins (sched.c, start_cost), this could loop forever: restarted, then
// preempted again before any step ran.
//
//   node bench/hybrid-memory-limit.mjs [--model FILE] [--tokens 6000] [--headroom-mib 18]
//        [--max-tokens 48]
//
// Without --model it uses the e2e test's qwen35moe demo model
// (tests/e2e/hybrid-cache.test.mjs makes it). Prints machine-readable lines:
//   bench hybrid_memory_limit limit_mib=... load_peak_mib=... peak_mib=... preempted=... aborted=... same=N/4
// (load_peak: the process's peak while it loaded; peak: while the requests ran)
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
const MiB = 1024 * 1024;
const tokens = Number(opt("tokens", 6000));
const headroomMiB = Number(opt("headroom-mib", 18));
const maxTokens = Number(opt("max-tokens", 48));
let model = opt("model", null);
if (!model) {
  const dir = process.env.HR_TEST_MODELS || path.join(root, "build/e2e-models");
  model = fs.readdirSync(dir).filter((f) => /^e2e-qwen35moe-.*\.gguf$/.test(f)).map((f) => path.join(dir, f))[0];
  if (!model) {
    console.error("hybrid-memory-limit: no e2e-qwen35moe model (run tests/e2e/hybrid-cache.test.mjs once)");
    process.exit(1);
  }
}
const status = (pid, key) => {
  const m = fs.readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`^${key}:\\s+(\\d+) kB`, "m"));
  return m ? Number(m[1]) * 1024 : NaN;
};
// Four different long prompts (distinct from the first word, so the prefix
// cache shares nothing between them).
const prompts = [0, 1, 2, 3].map((i) => `${["alpha", "bravo", "charlie", "delta"][i]} ` +
  `word${i} `.repeat(Math.floor(tokens / 2)));
const ask = (server, content) => server.anthropic({ timeout: 600_000 }).messages.stream({
  model: "m", max_tokens: maxTokens, temperature: 0, messages: [{ role: "user", content }] }).finalMessage();
const textOf = (m) => JSON.stringify(m.content);

const free = await startServer(["--parallel", "4"], { model });
await ask(free, "hi");
const rest = status(free.pid, "VmRSS");
const alone = [];
for (const p of prompts) alone.push(await ask(free, p));
const freePeak = status(free.pid, "VmHWM");
await free.stop();

const limitMiB = Math.ceil(rest / MiB) + headroomMiB;
console.log(`# rest ${(rest / MiB).toFixed(1)} MiB, unlimited peak (one at a time) ${(freePeak / MiB).toFixed(1)} MiB, ` +
  `--memory-limit ${limitMiB}M`);
const server = await startServer(["--parallel", "4", "--memory-limit", `${limitMiB}M`], { model });
// Loading (packing the weights while their file pages are still mapped) has
// its own peak, before any request: report it, then reset the high-water
// mark (clear_refs 5) so that `peak` is the requests' alone.
const loadPeak = status(server.pid, "VmHWM");
fs.writeFileSync(`/proc/${server.pid}/clear_refs`, "5");
const t0 = performance.now();
const got = await Promise.all(prompts.map((p) => ask(server, p)));
const ms = performance.now() - t0;
const peak = status(server.pid, "VmHWM");
const metric = async (n) => (await server.metric(n)) ?? 0;
const preempted = await metric("headroom_requests_preempted_total");
const aborted = await metric("headroom_requests_aborted_for_memory_total");
const stateSlot = await metric("headroom_state_slot_bytes");
await server.stop();
const same = got.filter((m, i) => textOf(m) === textOf(alone[i]) && m.stop_reason === alone[i].stop_reason).length;
console.log(`bench hybrid_memory_limit limit_mib=${limitMiB} load_peak_mib=${(loadPeak / MiB).toFixed(1)} ` +
  `peak_mib=${(peak / MiB).toFixed(1)} ` +
  `preempted=${preempted} aborted=${aborted} state_slot_bytes=${stateSlot} same=${same}/4 ms=${ms.toFixed(0)}`);
process.exit(same === 4 && peak <= limitMiB * MiB && aborted === 0 ? 0 : 1);
