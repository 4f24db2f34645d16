// balancer.test.mjs - many headroom servers behind a router users already
// have: Debian's HAProxy (2.6, installed by scripts/deps.sh) in front of two
// `headroom serve` processes (one engine thread each, the e2e demo model),
// all on 127.0.0.1, configured as docs/deploy.md says: affinity by Claude
// Code's x-claude-code-session-id header (a stick table; new sessions by least connections, weighted by the agent), `option httpchk
// GET /ready`, the agent check on --agent-port, `retry-on conn-failure
// empty-response 503` with redispatch, and `--overload-status 503
// --queue-max-wait` on the servers. Clients are the official SDKs with their
// own retries off (maxRetries 0), so every error the balancer lets through
// is seen. HAProxy adds x-served-by (the server's name) to every response.
//
// Scenarios, each with zero client-visible errors:
//   spread     8 concurrent streams with distinct session ids reach both servers
//   affinity   3 turns x 4 sessions: each session stays on one server, and
//              turns 2+ report cached prompt tokens
//   metrics    both /metrics scraped at 20 Hz for 5 s while the two above
//              run: p99 < 10 ms, the vllm:* aliases parse, 0 <= kv usage <= 1,
//              cache_config_info's labels are integers
//   queue full server A's queue filled directly; clients of A's sessions
//              see only 200s, from B
//   queue wait A's slots busy, its queue not full: A's sessions wait past
//              --queue-max-wait, are refused with 503 before any byte, and
//              HAProxy retries them on B (its retry counters prove it)
//   drain      SIGTERM to A mid-stream: its streams end normally, it exits
//              0, A's sessions go to B
//   squeeze    A restarted with a small dynamic ceiling (--memory-reserve),
//              then a real process (build/squeeze) takes MemAvailable away:
//              A's /ready goes 503 "memory" and its agent says drain within
//              1 s, new sessions of A go to B, A's running streams finish once
//              the squeezer lets go, nothing aborted for memory on either
// Bounded: about 40 generations (every request is counted and printed) and
// under 60 s. Ends with "N passed, N failed".
import { spawn } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { harness, here, headroomBin, metricValue, sleep, startServer, waitFor, describeError } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("balancer");
const T0 = Date.now();
const MiB = 1024 * 1024;
const HAPROXY = ["/usr/sbin/haproxy", "/usr/bin/haproxy"].find((p) => fs.existsSync(p));
const squeezeBin = process.env.HR_SQUEEZE || path.join(path.dirname(headroomBin), "squeeze");
const meminfo = (key) => {
  const m = fs.readFileSync("/proc/meminfo", "utf8").match(new RegExp(`^${key}:\\s+(\\d+) kB`, "m"));
  return m ? Number(m[1]) * 1024 : NaN;
};
const rssOf = (pid) => Number(fs.readFileSync(`/proc/${pid}/statm`, "utf8").split(" ")[1]) * 4096;

// Every output is this script (the engine still runs every step), so a
// generation's length is max_tokens exactly: the load is what the test says.
const SCRIPT = Array.from({ length: 3000 }, (_, i) => ["alpha", "beta", "gamma", "delta"][i % 4]).join(" ");
const SYSTEM = "You are a careful assistant for a balancer test. " +
  Array.from({ length: 60 }, (_, i) => `Rule ${i}: answer briefly.`).join(" ");

let generations = 0; // every generation request any client sends, for the bound
const freePort = () => new Promise((resolve, reject) => {
  const s = net.createServer();
  s.once("error", reject);
  s.listen(0, "127.0.0.1", () => { const p = s.address().port; s.close(() => resolve(p)); });
});

// One line from an agent-check port (what HAProxy reads).
const agentSays = (port) => new Promise((resolve) => {
  let text = "";
  const c = net.connect(port, "127.0.0.1");
  c.setEncoding("utf8");
  c.on("data", (d) => { text += d; });
  c.on("end", () => resolve(text.trim()));
  c.on("error", (e) => resolve(`error: ${e.message}`));
});

const ready = async (srv) => {
  try {
    const r = await fetch(`${srv.url}/ready`);
    return { status: r.status, body: await r.json() };
  } catch (e) { return { status: 0, body: { status: String(e.message) } }; }
};

/* ---- the servers and the balancer ---------------------------------------- */

const ports = { a: await freePort(), aa: await freePort(), b: await freePort(), ab: await freePort(),
  fe: await freePort(), stats: await freePort() };
const common = ["--threads", "1", "--parallel", "2", "--max-queue", "8", "--queue-max-wait", "2",
  "--overload-status", "503", "--ready-hold", "0.5", "--test-script", SCRIPT];
// HR_BALANCER_LOG=DIR keeps every server's log (for whoever studies a run).
const keepLog = (name, text) => {
  if (process.env.HR_BALANCER_LOG)
    fs.appendFileSync(path.join(process.env.HR_BALANCER_LOG, `server-${name}.log`), text);
};
const start = (name, extra = []) => startServer(["--port", String(ports[name]), "--agent-port",
  String(ports[`a${name}`]), ...common, ...extra]);

const cfgFile = path.join(os.tmpdir(), `headroom-balancer-${process.pid}.cfg`);
fs.writeFileSync(cfgFile, `# docs/deploy.md's configuration, on test ports and intervals
global
  maxconn 256
defaults
  mode http
  timeout connect 1s
  timeout client 60s
  timeout server 60s
  timeout check 1s
  retries 3
  option redispatch 1
  retry-on conn-failure empty-response 503
frontend llm
  bind 127.0.0.1:${ports.fe}
  default_backend headroom
frontend stats
  bind 127.0.0.1:${ports.stats}
  stats enable
  stats uri /stats
backend headroom
  balance leastconn
  stick-table type string len 128 size 100k expire 1h
  stick on req.hdr(x-claude-code-session-id)
  option httpchk GET /ready
  http-check expect status 200
  http-response set-header x-served-by %[srv_name]
  default-server weight 100 check inter 100ms fall 1 rise 2 agent-check agent-inter 100ms
  server a 127.0.0.1:${ports.a} agent-port ${ports.aa}
  server b 127.0.0.1:${ports.b} agent-port ${ports.ab}
`);

let hap = null, hapLog = "";
const servers = {};
const feURL = `http://127.0.0.1:${ports.fe}`;
const anthropic = new Anthropic({ apiKey: "k", baseURL: feURL, maxRetries: 0, timeout: 30_000 });
const openai = new OpenAI({ apiKey: "k", baseURL: `${feURL}/v1`, maxRetries: 0, timeout: 30_000 });
const session = (id) => ({ headers: { "x-claude-code-session-id": id } });

// HAProxy's view of a server: "UP", "DOWN", "DRAIN", "MAINT" ... (its CSV).
async function hapField(name, column) {
  try {
    const r = await fetch(`http://127.0.0.1:${ports.stats}/stats;csv`);
    const line = (await r.text()).split("\n").find((l) => l.startsWith(`headroom,${name},`));
    return line ? line.split(",")[column] : "?";
  } catch { return "no answer"; } // not listening yet
}
const hapStatus = (name) => hapField(name, 17);
// Requests HAProxy retried (wretr) and redispatched (wredis) away from a server.
const hapRetries = async (name) => `${await hapField(name, 15)} retried, ${await hapField(name, 16)} redispatched`;

// One Anthropic stream through the balancer: {server, text, stop, last, cached}.
async function stream(id, { max_tokens = 16, messages, onFirst } = {}) {
  generations++;
  const { data, response } = await anthropic.messages.create({
    model: "claude-sonnet-4-6", max_tokens, temperature: 0, stream: true, system: SYSTEM,
    messages: messages || [{ role: "user", content: `Hello from ${id}` }],
  }, session(id)).withResponse();
  let text = "", stop = null, last = null, cached = 0, first = false;
  for await (const ev of data) {
    if (ev.type === "message_start") cached = ev.message.usage.cache_read_input_tokens ?? 0;
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") {
      text += ev.delta.text;
      if (!first && onFirst) { first = true; onFirst(); }
    }
    if (ev.type === "message_delta") stop = ev.delta.stop_reason;
    last = ev.type;
  }
  return { server: response.headers.get("x-served-by"), status: response.status, text, stop, last, cached };
}

// One OpenAI chat stream through the balancer: {server, text, finish}.
async function chat(id, max_tokens = 8) {
  generations++;
  const { data, response } = await openai.chat.completions.create({
    model: "gpt-4o", max_tokens, temperature: 0, stream: true,
    messages: [{ role: "user", content: `Hi from ${id}` }],
  }, session(id)).withResponse();
  let text = "", finish = null;
  for await (const ch of data) {
    text += ch.choices[0]?.delta?.content ?? "";
    finish = ch.choices[0]?.finish_reason ?? finish;
  }
  return { server: response.headers.get("x-served-by"), status: response.status, text, finish };
}

// Runs calls and returns [results], counting each thrown error as a
// client-visible error (with its message).
async function noErrors(what, calls) {
  const out = await Promise.allSettled(calls);
  const bad = out.filter((o) => o.status === "rejected").map((o) => describeError(o.reason));
  eq(bad, [], `${what}: zero client-visible errors`);
  return out.map((o) => o.value);
}

await test("setup: two servers and HAProxy", async () => {
  check(!!HAPROXY, "haproxy is installed (scripts/deps.sh --oracle installs Debian's)");
  if (!HAPROXY) return;
  [servers.a, servers.b] = await Promise.all([start("a"), start("b")]);
  hap = spawn(HAPROXY, ["-f", cfgFile, "-db"], { stdio: ["ignore", "pipe", "pipe"] });
  hap.stdout.on("data", (d) => { hapLog += d; });
  hap.stderr.on("data", (d) => { hapLog += d; });
  const up = await waitFor(async () => (await hapStatus("a")) === "UP" && (await hapStatus("b")) === "UP", 10_000, 50);
  check(up, "HAProxy sees both servers UP (check /ready and agent)", hapLog);
}, { timeoutMs: 40_000 });

// Which server each session id hashes to, learned with GET /v1/models
// through the balancer (same backend, same hash; no generation).
const home = {};
async function learnHomes(prefix, n) {
  for (let i = 0; i < n; i++) {
    const id = `${prefix}-${i}`;
    const r = await fetch(`${feURL}/v1/models`, session(id));
    home[id] = r.headers.get("x-served-by");
  }
}
const idsOn = (server, prefix, n) => Object.keys(home).filter((k) => k.startsWith(prefix) && home[k] === server).slice(0, n);

await test("spread, affinity and the metrics contract", async () => {
  if (!hap) return;
  // The engines run for the whole 5 s: one long generation on each server
  // (sent directly, cancelled once the scraper is done) besides the load
  // below.
  const stopBusy = new AbortController();
  const busy = ["a", "b"].map((n) => {
    generations++;
    return new Anthropic({ apiKey: "k", baseURL: servers[n].url, maxRetries: 0, timeout: 30_000 }).messages
      .create({ model: "m", max_tokens: 1100, messages: [{ role: "user", content: `busy ${n}` }] }, { signal: stopBusy.signal })
      .then(() => "finished", (e) => (stopBusy.signal.aborted ? "cancelled" : describeError(e)));
  });
  await waitFor(async () => (await servers.a.metric("headroom_requests_running")) >= 1 &&
    (await servers.b.metric("headroom_requests_running")) >= 1, 5_000, 10);
  // The scraper: 20 Hz per server for 5 s, while the load below runs, from
  // a process of its own (lib/scrape.mjs).
  const scraper = new Promise((resolve) => {
    const p = spawn(process.execPath, [path.join(here, "scrape.mjs"), "20", "5",
      `${servers.a.url}/metrics`, `${servers.b.url}/metrics`], { stdio: ["ignore", "pipe", "inherit"] });
    let text = "";
    p.stdout.on("data", (d) => { text += d; });
    p.once("exit", () => { try { resolve(JSON.parse(text)); } catch { resolve({}); } });
  });

  // spread
  let t = Date.now();
  const spread = await noErrors("spread", Array.from({ length: 8 }, (_, i) => stream(`spread-${i}`)));
  const where = new Set(spread.map((r) => r?.server));
  check(where.has("a") && where.has("b"), "spread: 8 streams with distinct session ids reached both servers",
    spread.map((r) => r?.server));
  eq(spread.map((r) => r?.last), Array(8).fill("message_stop"), "spread: every stream ends with message_stop");

  console.log(`# spread: ${((Date.now() - t) / 1000).toFixed(1)} s`);
  t = Date.now();
  // affinity: 4 sessions x 3 turns, the sessions at once, the turns in order
  const turns = await noErrors("affinity", [0, 1, 2, 3].map(async (s) => {
    const id = `affinity-${s}`;
    const messages = [];
    const got = [];
    for (let t = 0; t < 3; t++) {
      messages.push({ role: "user", content: `Session ${s}, turn ${t}: tell me more.` });
      const r = await stream(id, { messages: [...messages], max_tokens: 8 });
      got.push(r);
      messages.push({ role: "assistant", content: r.text });
    }
    return got;
  }));
  for (let s = 0; s < 4; s++) {
    const t = turns[s] || [];
    check(t.length === 3 && t.every((r) => r.server === t[0].server), `affinity: session ${s} stayed on one server`,
      t.map((r) => r.server));
    check(t.length === 3 && t[1].cached > 0 && t[2].cached > 0, `affinity: session ${s} turns 2 and 3 report cached tokens`,
      t.map((r) => r.cached));
  }
  console.log(`# affinity: ${((Date.now() - t) / 1000).toFixed(1)} s`);
  t = Date.now();
  const scraped = await scraper;
  console.log(`# the scraper's last ${((Date.now() - t) / 1000).toFixed(1)} s`);
  stopBusy.abort();
  console.log(`# the long generations that kept both engines busy: ${(await Promise.all(busy)).join(", ")}`);

  // the metrics contract
  for (const n of ["a", "b"]) {
    const got = scraped[`${servers[n].url}/metrics`] || { ms: [], server: [], status: [], last: "" };
    const q = (xs) => {
      const v = [...xs].sort((x, y) => x - y);
      const at = (f) => (v.length ? v[Math.min(v.length - 1, Math.floor(v.length * f))] : NaN);
      return { median: at(0.5), p99: at(0.99), max: v[v.length - 1] ?? NaN };
    };
    const inServer = q(got.server), wall = q(got.ms);
    console.log(`# /metrics of ${n}: ${got.ms.length} scrapes; in the server (Server-Timing: locks and ` +
      `formatting) median ${inServer.median.toFixed(3)} ms, p99 ${inServer.p99.toFixed(3)} ms, max ` +
      `${inServer.max.toFixed(3)} ms; at the client (connect + request + response, on this shared machine, ` +
      `load ${os.loadavg()[0].toFixed(1)}) median ${wall.median.toFixed(2)} ms, p99 ${wall.p99.toFixed(2)} ms`);
    check(got.ms.length >= 80, `metrics ${n}: scraped at 20 Hz for 5 s`, got.ms.length);
    check(inServer.p99 < 10, `metrics ${n}: a scrape takes under 10 ms at p99 in the server while the engine runs`,
      inServer.p99);
    eq(got.status.filter((x) => x !== 200), [], `metrics ${n}: every scrape answered 200`);
    const t = got.last;
    for (const name of ["vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
      "vllm:cache_config_info", "vllm:prompt_tokens_total", "vllm:generation_tokens_total",
      "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total", "headroom_ready",
      "headroom_admit_max_prompt_tokens"]) {
      const v = metricValue(t, name);
      check(Number.isFinite(v), `metrics ${n}: ${name} parses`, v);
    }
    const u = metricValue(t, "vllm:kv_cache_usage_perc");
    check(u >= 0 && u <= 1, `metrics ${n}: 0 <= vllm:kv_cache_usage_perc <= 1`, u);
    const info = t.match(/^vllm:cache_config_info\{([^}]*)\} 1$/m);
    const labels = Object.fromEntries([...(info?.[1] ?? "").matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]));
    check(/^\d+$/.test(labels.block_size ?? "") && /^\d+$/.test(labels.num_gpu_blocks ?? "") &&
      Number(labels.num_gpu_blocks) > 0, `metrics ${n}: cache_config_info{block_size,num_gpu_blocks} are integers, value 1`, info?.[0]);
    check(metricValue(t, "vllm:prompt_tokens_total") === metricValue(t, "headroom_prompt_tokens_total") &&
      metricValue(t, "vllm:prefix_cache_hits_total") === metricValue(t, "headroom_prefix_cache_hit_tokens_total"),
      `metrics ${n}: the aliases equal headroom's own counters`);
  }
  await learnHomes("s", 24);
}, { timeoutMs: 30_000 });

await test("queue full on A: A's sessions are served by B", async () => {
  if (!hap) return;
  const a = servers.a;
  // 2 running + 8 queued fill A (--parallel 2 --max-queue 8), sent to A
  // directly: the first two, then (once they run) the other eight. All ten at
  // once raced the engine: when the tenth arrived before the second had
  // started, it was refused (9 queued) and the queue never filled (CI).
  const direct = new Anthropic({ apiKey: "k", baseURL: a.url, maxRetries: 0, timeout: 30_000 });
  const filler = (i) => {
    generations++;
    return direct.messages.create({ model: "m", max_tokens: 100, messages: [{ role: "user", content: `filler ${i}` }] })
      .then(() => 200, (e) => e.status ?? String(e));
  };
  const fill = [filler(0), filler(1)];
  await waitFor(async () => (await a.metric("headroom_requests_running")) === 2, 5_000, 5);
  for (let i = 2; i < 10; i++) fill.push(filler(i));
  const full = await waitFor(async () => (await ready(a)).body.status === "queue_full", 5_000, 10);
  check(full, "queue full: A's /ready says queue_full", await ready(a));
  const ids = idsOn("a", "s", 6);
  const got = await noErrors("queue full", ids.map((id, i) => (i % 2 ? chat(id) : stream(id))));
  eq(got.map((r) => r?.status), ids.map(() => 200), "queue full: clients of A's sessions see only 200s");
  eq(got.map((r) => r?.server), ids.map(() => "b"), "queue full: B served them");
  const fills = await Promise.all(fill);
  console.log(`# queue full: A's fillers answered ${fills.join(" ")} (2 run, 8 wait; --queue-max-wait 2); ` +
    `HAProxy so far: A ${await hapRetries("a")} (a 503 from A before its check saw queue_full)`);
  await waitFor(async () => (await hapStatus("a")) === "UP", 10_000, 50);
}, { timeoutMs: 30_000 });

await test("a wait past --queue-max-wait on A: refused before any byte, HAProxy retries it on B", async () => {
  if (!hap) return;
  // A's two slots taken by long generations (sent to A directly; 3000 tokens,
  // far longer than the 2 s wait even on a quiet machine, where 600 finished
  // within it; cancelled once B has answered); A stays ready (2 waiting of 8),
  // so HAProxy keeps sending A's sessions there, they wait 2 s, get 503
  // overloaded before their headers, and HAProxy's retry-on 503 sends them to B.
  await learnHomes("w", 16);
  const ids = idsOn("a", "w", 2);
  const a = servers.a;
  const direct = new Anthropic({ apiKey: "k", baseURL: a.url, maxRetries: 0, timeout: 30_000 });
  const before = [Number(await hapField("a", 15)), Number(await hapField("a", 16))];
  const stopBusy = new AbortController(); // they have served their purpose once B answered
  const busy = [0, 1].map((i) => {
    generations++;
    return direct.messages.create({ model: "m", max_tokens: 3000, messages: [{ role: "user", content: `long ${i}` }] },
      { signal: stopBusy.signal }).then(() => 200, (e) => (stopBusy.signal.aborted ? "cancelled" : e.status ?? String(e)));
  });
  check(await waitFor(async () => (await a.metric("headroom_requests_running")) === 2, 5_000, 10),
    "queue wait: A's two slots are busy");
  const got = await noErrors("queue wait", ids.map((id, i) => (i % 2 ? chat(id) : stream(id))));
  eq(got.map((r) => r?.status), ids.map(() => 200), "queue wait: the clients see only 200s");
  eq(got.map((r) => r?.server), ids.map(() => "b"), "queue wait: B served them");
  const after = [Number(await hapField("a", 15)), Number(await hapField("a", 16))];
  check(after[0] + after[1] - before[0] - before[1] >= ids.length,
    "queue wait: HAProxy retried A's 503s elsewhere (retry-on 503, redispatch)",
    `retried ${after[0] - before[0]}, redispatched ${after[1] - before[1]}`);
  stopBusy.abort();
  console.log(`# queue wait: HAProxy retried ${after[0] - before[0]} and redispatched ${after[1] - before[1]} ` +
    `requests away from A; A's long generations: ${(await Promise.all(busy)).join(" ")}`);
  check(await waitFor(async () => (await a.metric("headroom_requests_running")) === 0, 5_000, 20),
    "queue wait: A's long generations, cancelled by their client, left");
}, { timeoutMs: 30_000 });

await test("drain: SIGTERM to A mid-stream", async () => {
  if (!hap) return;
  // Fresh sessions: the queue-full scenario moved A's earlier ones to B
  // (redispatch rewrites their stick-table entries).
  await learnHomes("d", 16);
  const ids = idsOn("a", "d", 2);
  let first = 0;
  let firstResolve;
  const started = new Promise((r) => { firstResolve = r; });
  const running = noErrors("drain (A's streams)", ids.map((id) => stream(id, { max_tokens: 100,
    onFirst: () => { if (++first === ids.length) firstResolve(); } })));
  await started;
  const stopping = servers.a.stop({ timeoutMs: 20_000 });
  const drained = await waitFor(async () => (await agentSays(ports.aa)) === "drain", 2_000, 10);
  check(drained, "drain: A's agent says drain after SIGTERM");
  const others = idsOn("a", "d", 6).slice(2);
  check(others.length === 4, "drain: 4 more sessions live on A", others);
  const got = await noErrors("drain (new requests)", others.map((id) => stream(id)));
  eq(got.map((r) => r?.server), others.map(() => "b"), "drain: A's sessions went to B");
  const mine = await running;
  eq(mine.map((r) => r?.server), ids.map(() => "a"), "drain: the running streams were A's");
  eq(mine.map((r) => [r?.last, r?.stop]), ids.map(() => ["message_stop", "max_tokens"]),
    "drain: A's streams ended normally (message_stop, max_tokens)");
  const res = await stopping;
  keepLog("a", res.stderr);
  eq(res.code, 0, "drain: A exits 0");
}, { timeoutMs: 30_000 });

await test("squeeze on A: /ready and the agent turn, B takes the new sessions", async () => {
  if (!hap) return;
  // A again, on the same ports, with a dynamic ceiling near what it uses +
  // ROOM: the reserve leaves it only ROOM of this machine's MemAvailable, so
  // a squeezer taking about ROOM is a real squeeze (as in squeeze.test.mjs).
  // ROOM is the margin against other processes: A turns not-ready by itself
  // only if MemAvailable falls by ROOM - 5% of A before the squeeze starts
  // (a few seconds).
  const ROOM = 512 * MiB;
  const reserve = Math.max(0, meminfo("MemAvailable") - ROOM);
  servers.a = await start("a", ["--memory-reserve", String(reserve)]);
  const a = servers.a;
  check(await waitFor(async () => (await hapStatus("a")) === "UP", 10_000, 50), "squeeze: A is back UP in HAProxy");
  await learnHomes("q", 16);
  const ids = idsOn("a", "q", 2);
  let first = 0;
  let firstResolve;
  const started = new Promise((r) => { firstResolve = r; });
  const running = noErrors("squeeze (A's streams)", ids.map((id) => stream(id, { max_tokens: 100,
    onFirst: () => { if (++first === ids.length) firstResolve(); } })));
  await started;
  // The squeezer steers rss + MemAvailable - reserve; the governor's ceiling
  // is that with current = max(accounted, rss). Target: a ceiling of 0.97
  // of current, so its hard watermark (0.95) is well under current.
  const m = await a.metricsText();
  const cur = metricValue(m, "headroom_memory_current_bytes");
  const target = Math.round(cur * 0.97 - Math.max(0, cur - rssOf(a.pid)));
  const sq = spawn(squeezeBin, ["--pid", String(a.pid), "--reserve", String(reserve), "--ceiling", String(target),
    "--step", "32M", "--step-ms", "5", "--timeout-s", "30"], { stdio: ["ignore", "pipe", "inherit"] });
  let sqOut = "";
  sq.stdout.on("data", (d) => { sqOut += d; });
  const sqExit = new Promise((r) => sq.once("exit", r));
  // When the squeeze bites, measured by the test itself from /proc: the
  // moment the hard watermark of A's dynamic ceiling, 0.95 x (rss(A) +
  // MemAvailable - reserve), falls below A's RSS. (The governor's current is
  // at least its RSS, so it may see hard pressure a little earlier.)
  let tBites = 0, tReached = 0, tReady = 0, tAgent = 0, why = null;
  await waitFor(async () => {
    const rss = rssOf(a.pid);
    if (!tBites && 0.95 * (rss + meminfo("MemAvailable") - reserve) < rss) tBites = Date.now();
    if (!tReached && /squeeze: (reached|stopped short)/.test(sqOut)) tReached = Date.now();
    if (!tReady) { const r = await ready(a); if (r.status === 503) { tReady = Date.now(); why = r.body.status; } }
    if (!tAgent && (await agentSays(ports.aa)) === "drain") tAgent = Date.now();
    return tBites && tReached && tReady && tAgent;
  }, 15_000, 10);
  console.log(`# squeeze: ${sqOut.trim().split("\n").pop()}`);
  console.log(`# squeeze: /ready 503 ${tReady - tBites} ms, agent drain ${tAgent - tBites} ms after the squeeze ` +
    `bit (the squeezer settled ${tReached - tBites} ms after)`);
  check(/squeeze: reached/.test(sqOut), "squeeze: the squeezer reached its target", sqOut);
  check(tBites > 0, "squeeze: A's hard watermark fell below its RSS (measured from /proc)");
  check(tReady && tReady - tBites <= 1000, "squeeze: A's /ready went 503 within 1 s", `${tReady - tBites} ms`);
  eq(why, "memory", "squeeze: /ready says why: memory");
  check(tAgent && tAgent - tBites <= 1000, "squeeze: A's agent says drain within 1 s", `${tAgent - tBites} ms`);
  // DOWN, not merely not UP: the agent's drain comes first (DRAIN, weight 0),
  // and a draining server still takes the sessions its stick table sends it;
  // only /ready's failed check (fall 1) takes A out for A's own sessions.
  check(await waitFor(async () => /^DOWN/.test(await hapStatus("a")), 2_000, 20),
    "squeeze: HAProxy marks A DOWN (its /ready check)", await hapStatus("a"));
  const others = idsOn("a", "q", 6).slice(2);
  check(others.length === 4, "squeeze: 4 more sessions live on A", others);
  const got = await noErrors("squeeze (new sessions)", others.map((id) => stream(id)));
  eq(got.map((r) => r?.server), others.map(() => "b"), "squeeze: A's new sessions went to B");
  sq.kill("SIGTERM");
  await sqExit;
  const mine = await running;
  eq(mine.map((r) => [r?.server, r?.last, r?.stop]), ids.map(() => ["a", "message_stop", "max_tokens"]),
    "squeeze: A's running streams finished normally once the squeezer let go");
  for (const n of ["a", "b"])
    eq(await servers[n].metric("headroom_requests_aborted_for_memory_total"), 0,
      `squeeze: headroom_requests_aborted_for_memory_total is 0 on ${n}`);
}, { timeoutMs: 40_000 });

// HAProxy's own account of every state change, for whoever reads the log.
console.log(hapLog.split("\n").filter((l) => /Server headroom/.test(l)).map((l) => `# haproxy: ${l.replace(/^\S+\s+\(\d+\)\s+:\s*/, "")}`).join("\n"));
if (hap) hap.kill("SIGTERM");
for (const n of ["a", "b"]) if (servers[n]) keepLog(n, (await servers[n].stop()).stderr);
if (process.env.HR_BALANCER_LOG) fs.writeFileSync(path.join(process.env.HR_BALANCER_LOG, "haproxy.log"), hapLog);
fs.rmSync(cfgFile, { force: true });
const secs = (Date.now() - T0) / 1000;
console.log(`# ${generations} generation requests, ${secs.toFixed(1)} s`);
check(generations <= 200 && secs <= 60, "bounded: <= 200 generation requests and <= 60 s", { generations, secs });
finish();
