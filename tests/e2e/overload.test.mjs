// overload.test.mjs - what clients see when the server is busy, and what a
// client that goes away leaves behind.
//
//   1. `--parallel 1 --max-queue 1`: one long generation holds the slot,
//      a second waits in the queue; a third gets Anthropic 529
//      overloaded_error / OpenAI 503, both with Retry-After. The SDKs
//      (maxRetries 2) retry after Retry-After and succeed once the slot
//      frees: attempts are counted with a wrapped fetch and the wait
//      between them measured.
//      A stream waiting in the queue gets `event: ping` within 10 s.
//   2. A client disconnecting mid-stream (SDK abort, raw fetch abort, and
//      while still queued) or during a non-streaming request cancels its
//      request: /metrics shows headroom_kv_blocks_used back to 0 and
//      nothing running or queued.
//   3. `--queue-timeout 1`: a request that waits longer fails with 529/503.
// Ends with "N passed, N failed".
import Anthropic from "@anthropic-ai/sdk";
import { harness, startServer, show, describeError, waitFor, sleep, parseSSE } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("overload");
// tokens: far longer than any test waits (aborted when done); 4000 became
// too short once greedy sampling stopped copying the vocabulary (1100
// tokens/s on the demo model, 2026-12-07), within its 32768 context
const LONG = 30000;
const amsg = (content, max_tokens = 8) => ({ model: "claude-sonnet-4-6", max_tokens, temperature: 0,
  messages: [{ role: "user", content }] });
const omsg = (content, max_tokens = 8) => ({ model: "gpt-4o", max_tokens, temperature: 0,
  messages: [{ role: "user", content }] });

// A raw streaming request kept open until abort(): `admitted` resolves at
// the first SSE data (message_start / the role chunk), `done` when the
// body ends or is aborted ({status, text, error}).
function longStream(server, api = "anthropic", prompt = "Tell me a very long story.") {
  const ctrl = new AbortController();
  let admittedResolve;
  const admitted = new Promise((r) => { admittedResolve = r; });
  const route = api === "anthropic" ? "/v1/messages" : "/v1/chat/completions";
  const body = api === "anthropic" ? amsg(prompt, LONG) : omsg(prompt, LONG);
  let text = "";
  const done = (async () => {
    let status = 0;
    try {
      const r = await server.fetch(route, {
        method: "POST", signal: ctrl.signal,
        headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
        body: JSON.stringify({ ...body, stream: true }),
      });
      status = r.status;
      const dec = new TextDecoder();
      for await (const chunk of r.body) {
        text += dec.decode(chunk, { stream: true });
        if (text.includes("data:")) admittedResolve(true);
      }
      admittedResolve(false);
      return { status, text, error: null };
    } catch (e) {
      admittedResolve(false);
      return { status, text, error: e.name === "AbortError" ? "aborted" : describeError(e) };
    }
  })();
  return { abort: () => ctrl.abort(), admitted, done, text: () => text };
}

// fetch wrapped to record every attempt: {start, end, status, retryAfter, retryAfterMs}.
function countingFetch() {
  const attempts = [];
  const f = async (url, init) => {
    const a = { start: Date.now(), end: null, status: null };
    attempts.push(a);
    const r = await fetch(url, init);
    a.end = Date.now();
    a.status = r.status;
    a.retryAfter = r.headers.get("retry-after");
    a.retryAfterMs = r.headers.get("retry-after-ms");
    return r;
  };
  return { fetch: f, attempts };
}

const metric = (server, name) => server.metric(name);

// A stream's first event comes once it is accepted, which may be while it
// still waits in the queue (on a loaded machine, or while cached blocks
// make room for its 30000 tokens): it holds the slot once /metrics shows
// it running and nothing waiting.
async function holdsSlot(server, s) {
  if (!(await s.admitted)) return false;
  return waitFor(async () => (await metric(server, "headroom_requests_running")) === 1 &&
    (await metric(server, "headroom_requests_queued")) === 0, 10_000);
}

// Occupies the one slot and the one queue place; resolves when both hold.
async function fillUp(server) {
  // Start from an idle server: what earlier cases aborted must be gone.
  const idle = await waitFor(async () => (await metric(server, "headroom_requests_running")) === 0 &&
    (await metric(server, "headroom_requests_queued")) === 0, 15_000);
  check(idle, "the server is idle before filling it");
  const a = longStream(server, "anthropic", "Tell me a very long story about ships.");
  check(await holdsSlot(server, a), "the first long stream is admitted and running");
  const b = longStream(server, "openai", "Tell me a very long story about trains.");
  const queued = await waitFor(async () => (await metric(server, "headroom_requests_queued")) === 1, 5000);
  check(queued, "the second request waits in the queue (headroom_requests_queued 1)",
    `queued=${await metric(server, "headroom_requests_queued")}`);
  return { release: async () => { a.abort(); b.abort(); await Promise.all([a.done, b.done]); } };
}

/* ---- 1. queue full ------------------------------------------------------- */

const server = await startServer(["--parallel", "1", "--max-queue", "1"]);

await test("queue full: 529 / 503 with Retry-After", async () => {
  const held = await fillUp(server);
  try {
    const ra = await server.fetch("/v1/messages", {
      method: "POST", headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify(amsg("Hi")),
    });
    const rab = await ra.json().catch(() => null);
    eq(ra.status, 529, "Anthropic: 529");
    eq(rab?.type, "error", "Anthropic: type error");
    eq(rab?.error?.type, "overloaded_error", "Anthropic: overloaded_error");
    check(/^\d+$/.test(ra.headers.get("retry-after") || ""), "Anthropic: Retry-After in seconds", ra.headers.get("retry-after"));
    const ro = await server.fetch("/v1/chat/completions", {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(omsg("Hi")),
    });
    const rob = await ro.json().catch(() => null);
    eq(ro.status, 503, "OpenAI: 503");
    check(rob?.error && typeof rob.error.message === "string", "OpenAI: error shape", show(rob));
    check(/^\d+$/.test(ro.headers.get("retry-after") || ""), "OpenAI: Retry-After in seconds", ro.headers.get("retry-after"));
    const rs = await server.fetch("/v1/messages", {
      method: "POST", headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
      body: JSON.stringify({ ...amsg("Hi"), stream: true }),
    });
    eq(rs.status, 529, "Anthropic streaming: HTTP 529 (refused before the stream)");
    await rs.text();
    try {
      await server.anthropic().messages.create(amsg("Hi"));
      check(false, "Anthropic SDK: OverloadedError");
    } catch (e) {
      check(e instanceof Anthropic.OverloadedError, "Anthropic SDK: OverloadedError", describeError(e));
      eq(e.type, "overloaded_error", "Anthropic SDK: err.type overloaded_error");
    }
    try {
      await server.openai().chat.completions.create(omsg("Hi"));
      check(false, "OpenAI SDK: APIError 503");
    } catch (e) {
      eq(e.status, 503, "OpenAI SDK: err.status 503");
    }
  } finally {
    await held.release();
  }
});

async function retryCase(name, call) {
  const held = await fillUp(server);
  const cf = countingFetch();
  const t0 = Date.now();
  const p = call(cf.fetch).then((v) => ({ v }), (e) => ({ e }));
  // Free the slot once the first attempt has been refused.
  const refused = await waitFor(() => cf.attempts[0]?.status != null, 5000, 20);
  check(refused, `${name}: first attempt answered`);
  await held.release();
  const res = await p;
  check(!res.e, `${name}: the call succeeds after retrying`, res.e && describeError(res.e));
  const statuses = cf.attempts.map((a) => a.status);
  check(statuses.length >= 2 && statuses.at(-1) === 200 && statuses.slice(0, -1).every((s) => s === 529 || s === 503),
    `${name}: attempts refused then 200`, show(statuses));
  const first = cf.attempts[0];
  const waitMs = first.retryAfterMs != null ? Number(first.retryAfterMs) : Number(first.retryAfter) * 1000;
  check(Number.isFinite(waitMs) && waitMs > 0, `${name}: Retry-After on the refusal`, show(first));
  if (cf.attempts.length >= 2 && Number.isFinite(waitMs)) {
    const gap = cf.attempts[1].start - first.end;
    check(gap >= waitMs - 50, `${name}: the SDK waited Retry-After (${waitMs} ms) before retrying`, `${gap} ms`);
  }
  console.log(`   ${name}: attempts ${show(statuses)}, retry-after ${first.retryAfter}, total ${Date.now() - t0} ms`);
}

await test("Anthropic SDK retries a 529 after Retry-After", async () => {
  await retryCase("Anthropic", (f) => server.anthropic({ maxRetries: 2, fetch: f }).messages.create(amsg("Hi")));
}, { timeoutMs: 40_000 });

await test("OpenAI SDK retries a 503 after Retry-After", async () => {
  await retryCase("OpenAI", (f) => server.openai({ maxRetries: 2, fetch: f }).chat.completions.create(omsg("Hi")));
}, { timeoutMs: 40_000 });

/* ---- 2. disconnects ------------------------------------------------------ */

async function settled(server, what) {
  const ok = await waitFor(async () => {
    const t = await server.metricsText();
    const m = (n) => { const r = t.match(new RegExp(`^${n}(?:\\{[^}]*\\})? (\\S+)`, "m")); return r ? Number(r[1]) : NaN; };
    return m("headroom_kv_blocks_used") === 0 && m("headroom_requests_running") === 0 && m("headroom_requests_queued") === 0;
  }, 10_000);
  const t = await server.metricsText();
  const line = (n) => (t.match(new RegExp(`^${n}(?:\\{[^}]*\\})? \\S+`, "m")) || ["(absent)"])[0];
  check(ok, `${what}: KV blocks back to 0, nothing running or queued within 10 s`,
    [line("headroom_kv_blocks_used"), line("headroom_requests_running"), line("headroom_requests_queued")].join("; "));
}

await test("client disconnect mid-stream frees KV", async () => {
  await settled(server, "before");
  // Anthropic SDK, aborted with an AbortController after a few events.
  const ac = new AbortController();
  const stream = await server.anthropic().messages.create({ ...amsg("Tell me a long story.", LONG), stream: true },
    { signal: ac.signal });
  let n = 0, aborted = false;
  try {
    for await (const ev of stream) {
      void ev;
      if (++n === 8) {
        const used = await metric(server, "headroom_kv_blocks_used");
        check(used > 0, "while streaming: headroom_kv_blocks_used > 0", used);
        eq(await metric(server, "headroom_requests_running"), 1, "while streaming: headroom_requests_running 1");
        ac.abort();
      }
    }
  } catch (e) {
    aborted = e instanceof Anthropic.APIUserAbortError || e.name === "AbortError";
    if (!aborted) check(false, "Anthropic abort: a user-abort error", describeError(e));
  }
  check(n >= 8, "Anthropic: events received before the abort", n);
  await settled(server, "after an Anthropic SDK abort");
  // OpenAI SDK: leaving the loop aborts the request.
  const os = await server.openai().chat.completions.create({ ...omsg("Tell me a long story.", LONG), stream: true });
  let k = 0;
  for await (const ch of os) { void ch; if (++k === 8) break; }
  await settled(server, "after breaking out of an OpenAI SDK stream");
  // Raw fetch aborted right after the stream began.
  const raw = longStream(server, "anthropic");
  await raw.admitted;
  raw.abort();
  await raw.done;
  await settled(server, "after a raw fetch abort");
  // Aborted while still queued behind another request.
  const a = longStream(server, "anthropic");
  check(await holdsSlot(server, a), "a long stream holds the slot");
  const b = longStream(server, "anthropic", "Another long story.");
  await waitFor(async () => (await metric(server, "headroom_requests_queued")) === 1, 5000);
  // A stream waiting in the queue is kept alive with pings (every 10 s at most).
  const tp = Date.now();
  const pinged = await waitFor(() => /^event: ping$/m.test(b.text()), 11_000, 50);
  check(pinged, "a queued stream gets `event: ping` within 10 s", `${Date.now() - tp} ms: ${b.text().slice(0, 200)}`);
  b.abort();
  await b.done;
  // The scheduler drops cancelled queued requests at its next iteration,
  // and steps run every few ms while `a` generates.
  const tq = Date.now();
  const left = await waitFor(async () => (await metric(server, "headroom_requests_queued")) === 0, 2000, 20);
  check(left, "a queued request whose client left leaves the queue within 2 s", `still queued after ${Date.now() - tq} ms`);
  if (!left) {
    const late = await waitFor(async () => (await metric(server, "headroom_requests_queued")) === 0, 15_000, 50);
    console.log(`   the queued request left after ${Date.now() - tq} ms (${late ? "gone" : "still there"})`);
  }
  a.abort();
  await a.done;
  await settled(server, "after aborting a running and a queued request");
  const after = await server.anthropic().messages.create(amsg("Hi"));
  eq(after.type, "message", "the server still answers");
}, { timeoutMs: 60_000 });

eq((await server.stop()).code, 0, "server exits 0");

// A non-streaming request whose client gives up (an SDK timeout does this)
// must not generate to the end either. One server per API, so a request
// that keeps running cannot be mistaken for the other's.
for (const api of ["anthropic", "openai"]) {
  await test(`client disconnect during a non-streaming ${api} request frees KV`, async () => {
    const s = await startServer([]);
    try {
      const ctrl = new AbortController();
      const route = api === "anthropic" ? "/v1/messages" : "/v1/chat/completions";
      const p = s.fetch(route, { method: "POST", signal: ctrl.signal,
        headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
        body: JSON.stringify(api === "anthropic" ? amsg("A long story.", LONG) : omsg("A long story.", LONG)) })
        .catch((e) => e);
      const busy = await waitFor(async () => (await metric(s, "headroom_kv_blocks_used")) > 0, 5000, 20);
      check(busy, `${api} non-streaming: generating (KV in use)`);
      await sleep(300);
      ctrl.abort();
      await p;
      await settled(s, `after aborting a non-streaming ${api} request`);
    } finally {
      await s.stop({ signal: "SIGKILL" });
    }
  }, { timeoutMs: 30_000 });
}

/* ---- 3. queue timeout ---------------------------------------------------- */

const qt = await startServer(["--parallel", "1", "--max-queue", "4", "--queue-timeout", "1"]);

await test("--queue-timeout 1: a waiting request fails with 529 / 503", async () => {
  const a = longStream(qt, "anthropic");
  check(await holdsSlot(qt, a), "the slot is held");
  try {
    const t0 = Date.now();
    const [ra, ro, rs] = await Promise.all([
      qt.fetch("/v1/messages", { method: "POST", headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
        body: JSON.stringify(amsg("Hi")) }),
      qt.fetch("/v1/chat/completions", { method: "POST", headers: { "content-type": "application/json" },
        body: JSON.stringify(omsg("Hi")) }),
      qt.fetch("/v1/messages", { method: "POST", headers: { "content-type": "application/json", "anthropic-version": "2023-06-01" },
        body: JSON.stringify({ ...amsg("Hi"), stream: true }) }),
    ]);
    const rab = await ra.json().catch(() => null);
    const elapsed = Date.now() - t0;
    eq(ra.status, 529, "Anthropic: 529 after the queue timeout");
    eq(rab?.error?.type, "overloaded_error", "Anthropic: overloaded_error");
    check(ra.headers.get("retry-after"), "Anthropic: Retry-After", show([...ra.headers]));
    check(elapsed >= 900, "refused only after waiting about 1 s", `${elapsed} ms`);
    eq(ro.status, 503, "OpenAI: 503 after the queue timeout");
    check(ro.headers.get("retry-after"), "OpenAI: Retry-After", show([...ro.headers]));
    await ro.text();
    // A streaming request may already have its 200 and pings; then the
    // refusal is an `event: error` with overloaded_error.
    const text = await rs.text();
    if (rs.status === 200) {
      const ev = parseSSE(text).find((m) => m.event === "error");
      check(ev && JSON.parse(ev.data)?.error?.type === "overloaded_error",
        "Anthropic streaming: event: error overloaded_error", text.slice(0, 300));
    } else {
      eq(rs.status, 529, "Anthropic streaming: 529");
    }
  } finally {
    a.abort();
    await a.done;
  }
});

eq((await qt.stop()).code, 0, "queue-timeout server exits 0");
finish();
