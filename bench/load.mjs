// load.mjs - a load run against `headroom serve`: 32 concurrent streaming
// clients (half the official @anthropic-ai/sdk, half `openai`), temperature
// 0.7, 64 max tokens, prompts of 50-500 tokens, for HR_LOAD_SECONDS
// (default 120) on the demo model. Each client sends its next request as
// soon as the previous one ends. The SDKs keep their default retry policy
// (2 retries honouring Retry-After), as a real client would; refusals that
// a retry absorbed are counted apart from errors.
//
//   node bench/load.mjs [--model models/demo.gguf] [--clients 32] [--seconds 120]
//                       [--temperature 0.7] [--max-tokens 64]
//
// Prints machine-readable lines:
//   bench serve_load clients=32 seconds=120 requests=... requests_per_s=...
//     ttft_p50_ms=... ttft_p99_ms=... tokens_per_s=... errors=...
//   bench serve_load_errors kind=... count=...         (one per kind, when any)
//   bench serve_load_memory rss_start_mib=... rss_end_mib=... rss_peak_mib=...
//     kv_blocks_used_end=... kv_blocks_total=... prefix_cache_mib_end=...
// Server flags can be added with HR_LOAD_SERVER_ARGS; HEADROOM_BIN picks the
// binary (default build/headroom). Never part of `make test`.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { startServer, metricValue, sleep } from "../tests/e2e/lib/server.mjs";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const argv = process.argv.slice(2);
const opt = (name, def) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? argv[i + 1] : def;
};
const model = opt("model", path.join(root, "models/demo.gguf"));
const nClients = Number(opt("clients", 32));
const seconds = Number(opt("seconds", process.env.HR_LOAD_SECONDS || 120));
const maxTokens = Number(opt("max-tokens", 64));
const temperature = Number(opt("temperature", 0.7));
const extra = (process.env.HR_LOAD_SERVER_ARGS || "").split(/\s+/).filter(Boolean);

if (!fs.existsSync(model)) {
  console.error(`load: ${model} is missing (make demo)`);
  process.exit(1);
}

// A seeded generator, so every run sends the same prompts in the same order.
let seed = 0x9e3779b9;
const rand = () => {
  seed = (seed + 0x6d2b79f5) >>> 0;
  let t = seed;
  t = Math.imul(t ^ (t >>> 15), t | 1);
  t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
};
const words = ("river stone harbour lantern copper meadow signal engine orchard winter cable garden " +
  "thunder ledger pocket candle marble bridge compass falcon quarry velvet ember glacier timber " +
  "anchor beacon canyon dynamo fabric granite horizon island jasmine kettle lagoon magnet nectar").split(" ");
// About one token per word with the Qwen3 vocabulary: 50-500 tokens.
function prompt() {
  const n = 45 + Math.floor(rand() * 450);
  const w = [];
  for (let i = 0; i < n; i++) w.push(words[Math.floor(rand() * words.length)]);
  return `Summarize these notes: ${w.join(" ")}.`;
}

const vmRSS = (pid, key = "VmRSS") => {
  try {
    const m = fs.readFileSync(`/proc/${pid}/status`, "utf8").match(new RegExp(`^${key}:\\s+(\\d+) kB`, "m"));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
};

const server = await startServer(extra, { model });
// Let the process settle (the model's pages, the pools) before the baseline.
await sleep(500);
const rssStart = vmRSS(server.pid);

const ttfts = [];
let requests = 0, tokens = 0, refusalsRetried = 0;
const errors = new Map();
const countError = (kind) => errors.set(kind, (errors.get(kind) || 0) + 1);

// fetch that counts 529/503 answers the SDK then retried.
const countingFetch = async (url, init) => {
  const r = await fetch(url, init);
  if (r.status === 529 || r.status === 503) refusalsRetried++;
  return r;
};
const anthropic = server.anthropic({ maxRetries: 2, fetch: countingFetch, timeout: 120_000 });
const openai = server.openai({ maxRetries: 2, fetch: countingFetch, timeout: 120_000 });

function errorKind(e) {
  if (e?.status) return `http_${e.status}_${e.type || e.error?.error?.type || "unknown"}`;
  if (e?.status === undefined && e?.error) return `stream_error_${e.type || e.error?.type || "unknown"}`;
  return (e?.constructor?.name || "Error") + (e?.message ? `:${e.message.replace(/\s+/g, "_").slice(0, 40)}` : "");
}

async function oneRequest(i) {
  const t0 = performance.now();
  let first = null, out = 0;
  const content = prompt();
  if (i % 2 === 0) {
    const stream = await anthropic.messages.create({ model: "claude-sonnet-4-6", max_tokens: maxTokens, temperature,
      stream: true, messages: [{ role: "user", content }] });
    let stopped = false;
    for await (const ev of stream) {
      if (first === null && ev.type === "content_block_delta") first = performance.now();
      if (ev.type === "message_delta") out = ev.usage.output_tokens;
      if (ev.type === "message_stop") stopped = true;
    }
    if (!stopped) throw new Error("stream ended without message_stop");
  } else {
    const stream = await openai.chat.completions.create({ model: "gpt-4o", max_tokens: maxTokens, temperature,
      stream: true, stream_options: { include_usage: true }, messages: [{ role: "user", content }] });
    let finished = false;
    for await (const ch of stream) {
      if (first === null && ch.choices?.[0]?.delta?.content) first = performance.now();
      if (ch.choices?.[0]?.finish_reason) finished = true;
      if (ch.usage) out = ch.usage.completion_tokens;
    }
    if (!finished) throw new Error("stream ended without finish_reason");
  }
  if (first !== null) ttfts.push(first - t0);
  tokens += out;
  requests++;
}

const t0 = Date.now();
const deadline = t0 + seconds * 1000;
let lastReport = t0;
async function client(c) {
  for (let k = 0; Date.now() < deadline; k++) {
    try {
      await oneRequest(c + k); // alternates APIs per client and per request
    } catch (e) {
      countError(errorKind(e));
      await sleep(100);
    }
    if (Date.now() - lastReport >= 30_000) {
      lastReport = Date.now();
      console.error(`load: ${((lastReport - t0) / 1000).toFixed(0)} s, ${requests} requests, ${tokens} tokens, ` +
        `rss ${vmRSS(server.pid).toFixed(1)} MiB`);
    }
  }
}
await Promise.all(Array.from({ length: nClients }, (_, c) => client(c)));
const elapsed = (Date.now() - t0) / 1000;

// The end state: every request is over, so nothing should hold KV.
await sleep(200);
const metrics = await server.metricsText();
const rssEnd = vmRSS(server.pid);
const rssPeak = vmRSS(server.pid, "VmHWM");
const kvUsed = metricValue(metrics, "headroom_kv_blocks_used");
const kvTotal = metricValue(metrics, "headroom_kv_blocks_total");
const cacheBytes = metricValue(metrics, "headroom_prefix_cache_bytes");
const stopped = await server.stop();

const pct = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))];
};
const nErrors = [...errors.values()].reduce((a, b) => a + b, 0);
const f = (x, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "nan");
console.log(`bench serve_load clients=${nClients} seconds=${f(elapsed)} model=${path.relative(root, model)} ` +
  `temperature=${temperature} max_tokens=${maxTokens} ` +
  `requests=${requests} requests_per_s=${f(requests / elapsed, 2)} ttft_p50_ms=${f(pct(ttfts, 50))} ` +
  `ttft_p99_ms=${f(pct(ttfts, 99))} tokens=${tokens} tokens_per_s=${f(tokens / elapsed)} ` +
  `errors=${nErrors} refusals_retried=${refusalsRetried} exit_code=${stopped.code}`);
for (const [kind, count] of errors) console.log(`bench serve_load_errors kind=${kind} count=${count}`);
console.log(`bench serve_load_memory rss_start_mib=${f(rssStart)} rss_end_mib=${f(rssEnd)} rss_peak_mib=${f(rssPeak)} ` +
  `kv_blocks_used_end=${kvUsed ?? "nan"} kv_blocks_total=${kvTotal ?? "nan"} ` +
  `prefix_cache_mib_end=${f((cacheBytes ?? NaN) / 1048576)}`);
process.exit(0);
