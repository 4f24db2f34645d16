// lifecycle.test.mjs - the server's own routes and its shutdown: /health,
// HEAD /, /metrics (Prometheus text with the request, token, time-to-first-
// token and tokens/s metrics plus the memory governor's counters, moving
// as requests are served), /tokenize and /detokenize, and SIGTERM while
// three streams are in flight: every client's stream ends cleanly (it
// completes, or ends with an error event; no hang, no connection reset),
// and the server exits 0 within 15 s. Ends with "N passed, N failed".
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { harness, startServer, show, describeError, metricValue } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("lifecycle");
const server = await startServer([]);

await test("/health, HEAD /", async () => {
  const r = await server.fetch("/health");
  eq(r.status, 200, "GET /health: 200");
  eq(await r.json().catch(() => null), { status: "ok" }, 'GET /health: {"status":"ok"}');
  const h = await server.fetch("/", { method: "HEAD" });
  eq(h.status, 200, "HEAD /: 200");
});

await test("/metrics", async () => {
  const r = await server.fetch("/metrics");
  eq(r.status, 200, "GET /metrics: 200");
  check((r.headers.get("content-type") || "").startsWith("text/plain"), "content-type text/plain",
    r.headers.get("content-type"));
  const t0 = await r.text();
  for (const name of ["headroom_requests_total", "headroom_requests_running", "headroom_requests_queued",
    "headroom_kv_blocks_used", "headroom_kv_blocks_total", "headroom_prompt_tokens_total",
    "headroom_generated_tokens_total"]) {
    check(metricValue(t0, name) !== undefined, `${name} present`);
  }
  for (const h of ["headroom_time_to_first_token_seconds", "headroom_generation_tokens_per_second"]) {
    check(new RegExp(`^# TYPE ${h} histogram$`, "m").test(t0), `${h}: # TYPE histogram`);
    check(new RegExp(`^${h}_bucket\\{le="\\+Inf"\\} `, "m").test(t0), `${h}_bucket{le="+Inf"}`);
    check(metricValue(t0, `${h}_sum`) !== undefined && metricValue(t0, `${h}_count`) !== undefined, `${h}_sum and _count`);
  }
  // The memory governor's counters (src/mem/counters.c).
  for (const name of ["headroom_memory_current_bytes", "headroom_memory_peak_bytes", "headroom_memory_pressure_level",
    "headroom_prefill_chunks_total", "headroom_requests_preempted_total"]) {
    check(metricValue(t0, name) !== undefined, `governor counter ${name} present`);
  }
  const bad = t0.split("\n").filter((l) => l && !l.startsWith("#") && !/^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? (-?[0-9.eE+-]+|NaN|[+-]Inf)( -?\d+)?$/.test(l));
  check(bad.length === 0, "every sample line is `name{labels} value`", show(bad.slice(0, 3)));
  check(metricValue(t0, "headroom_kv_blocks_total") > 0, "headroom_kv_blocks_total > 0", metricValue(t0, "headroom_kv_blocks_total"));
  // The device the engine runs on (engine/backend.h): the CPU here unless a GPU answers.
  check(/^headroom_device_info\{device="(cpu|cuda:\d+)",description="[^"]+"\} 1$/m.test(t0),
    "headroom_device_info{device,description} 1", show(t0.split("\n").filter((l) => l.startsWith("headroom_device_info"))));
  eq(metricValue(t0, "headroom_device_lost"), 0, "headroom_device_lost 0");

  // One request moves the counters by its usage.
  const msg = await server.anthropic().messages.create({ model: "m", max_tokens: 12, temperature: 0,
    messages: [{ role: "user", content: "Metrics, please: a unique prompt 8472." }] });
  const t1 = await server.metricsText();
  const d = (n, keep) => metricValue(t1, n, keep) - metricValue(t0, n, keep);
  // Scrapes are requests too: leave the /metrics route's samples out.
  eq(d("headroom_requests_total", (labels) => !labels.includes("metrics")), 1, "headroom_requests_total +1 (besides scrapes)");
  eq(d("headroom_generated_tokens_total"), msg.usage.output_tokens, "headroom_generated_tokens_total += output_tokens");
  eq(d("headroom_prompt_tokens_total"), msg.usage.input_tokens + (msg.usage.cache_read_input_tokens || 0),
    "headroom_prompt_tokens_total += prompt tokens");
  eq(d("headroom_time_to_first_token_seconds_count"), 1, "time to first token observed once");
  check(d("headroom_time_to_first_token_seconds_sum") > 0, "time to first token sum grows");
  eq(d("headroom_generation_tokens_per_second_count"), 1, "tokens/s observed once");
});

await test("/tokenize and /detokenize", async () => {
  const r = await server.fetch("/tokenize", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ content: "Hello world" }) });
  eq(r.status, 200, "POST /tokenize: 200");
  const tok = await r.json().catch(() => ({}));
  check(Array.isArray(tok.tokens) && tok.tokens.length === 2, "Hello world -> 2 Qwen3 tokens", show(tok));
  const d = await server.fetch("/detokenize", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ tokens: tok.tokens || [] }) });
  eq(d.status, 200, "POST /detokenize: 200");
  eq((await d.json().catch(() => ({}))).content, "Hello world", "detokenize round trip");
});

eq((await server.stop()).code, 0, "server exits 0 when idle");

/* ---- SIGTERM while streaming --------------------------------------------- */

await test("SIGTERM during three streams", async () => {
  const s = await startServer([]);
  const anthropic = s.anthropic();
  const openai = s.openai();
  const long = 4000;
  const progress = [0, 0, 0];
  // Each client returns {outcome: "completed" | "error-event" | "connection-error", detail}.
  const classify = (e) => {
    if (e instanceof Anthropic.APIConnectionError || e instanceof OpenAI.APIConnectionError) return "connection-error";
    if ((e instanceof Anthropic.APIError || e instanceof OpenAI.APIError) && e.status === undefined) return "error-event";
    if (e instanceof Anthropic.APIError || e instanceof OpenAI.APIError) return `http-${e.status}`;
    // undici's TypeError("terminated"): the socket closed in the middle of the body.
    if (e instanceof TypeError && /terminated|socket/i.test(e.message + (e.cause?.message || ""))) return "connection-reset";
    return `${e?.constructor?.name}: ${e?.message}`; // e.g. the helper's "stream ended without producing a Message"
  };
  const clients = [
    (async () => {
      let last = null;
      for await (const ev of await anthropic.messages.create({ model: "m", max_tokens: long, stream: true,
        messages: [{ role: "user", content: "A long story, please." }] })) { last = ev.type; progress[0]++; }
      return last === "message_stop" ? "completed" : `ended after ${last} without message_stop`;
    })(),
    (async () => {
      const st = anthropic.messages.stream({ model: "m", max_tokens: long, messages: [{ role: "user", content: "Another long story." }] });
      st.on("streamEvent", () => { progress[1]++; });
      const m = await st.finalMessage();
      return m.stop_reason ? "completed" : "no stop_reason";
    })(),
    (async () => {
      let fin = null;
      for await (const ch of await openai.chat.completions.create({ model: "m", max_tokens: long, stream: true,
        messages: [{ role: "user", content: "A third long story." }] })) {
        progress[2]++;
        if (ch.choices?.[0]?.finish_reason) fin = ch.choices[0].finish_reason;
      }
      return fin ? "completed" : "ended without finish_reason";
    })(),
  ].map((p) => p.then((outcome) => ({ outcome }), (e) => ({ outcome: classify(e), detail: describeError(e) })));
  // Wait until every stream is producing, then signal.
  const t0 = Date.now();
  while (progress.some((n) => n < 5) && Date.now() - t0 < 20_000) await new Promise((r) => setTimeout(r, 20));
  check(progress.every((n) => n >= 5), "all three streams producing before SIGTERM", show(progress));
  const stopping = s.stop({ timeoutMs: 15_000 });
  let timer;
  const results = await Promise.race([
    Promise.all(clients),
    new Promise((r) => { timer = setTimeout(() => r(null), 20_000); }),
  ]);
  clearTimeout(timer);
  check(results !== null, "no client hangs after SIGTERM");
  for (const [i, r] of (results || []).entries()) {
    check(r.outcome === "completed" || r.outcome === "error-event",
      `client ${i}: stream completed or ended with an error event`, `${r.outcome}${r.detail ? ": " + r.detail : ""}`);
    console.log(`   client ${i}: ${r.outcome} after ${progress[i]} events`);
  }
  const st = await stopping;
  eq(st.code, 0, "server exits 0 after SIGTERM");
  check(st.ms <= 15_000, "within 15 s", `${st.ms} ms`);
  console.log(`   server exited in ${st.ms} ms`);
}, { timeoutMs: 60_000 });

finish();
