// concurrency.test.mjs - 16 streaming clients at once (Anthropic and OpenAI,
// raw iterators and stream helpers, different prompts, greedy, 24 tokens)
// all complete, each with exactly the output the same request gets alone.
// The server batches them (`--parallel 16`); the engine's kernels are batch
// invariant, so batching must not change a single token. Afterwards the KV
// pool is empty again. Ends with "N passed, N failed".
import { harness, startServer, show, waitFor } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("concurrency");
const server = await startServer(["--parallel", "16"]);
const anthropic = server.anthropic();
const openai = server.openai();

const topics = ["the sea", "mountains", "a lighthouse", "trains", "bread", "the moon", "owls", "rain",
  "chess", "volcanoes", "a library", "bees", "winter", "bridges", "tea", "comets"];

// Each client: a kind (how it streams) and a prompt of its own length.
const clients = topics.map((t, i) => ({
  kind: ["anthropic-raw", "anthropic-helper", "openai-raw", "openai-helper"][i % 4],
  prompt: `Write ${1 + (i % 3)} sentences about ${t}.` + " Be vivid.".repeat(i % 5),
}));

// Runs one client's streaming request; resolves {text, stop, tokens}.
async function run(c) {
  const a = { model: "claude-sonnet-4-6", max_tokens: 24, temperature: 0, messages: [{ role: "user", content: c.prompt }] };
  const o = { model: "gpt-4o", max_tokens: 24, temperature: 0, messages: [{ role: "user", content: c.prompt }],
    stream_options: { include_usage: true } };
  switch (c.kind) {
  case "anthropic-raw": {
    let text = "", stop = null, tokens = null, last = null;
    for await (const ev of await anthropic.messages.create({ ...a, stream: true })) {
      if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
      if (ev.type === "message_delta") { stop = ev.delta.stop_reason; tokens = ev.usage.output_tokens; }
      last = ev.type;
    }
    return { text, stop, tokens, complete: last === "message_stop" };
  }
  case "anthropic-helper": {
    const m = await anthropic.messages.stream(a).finalMessage();
    return { text: m.content.filter((b) => b.type === "text").map((b) => b.text).join(""), stop: m.stop_reason,
      tokens: m.usage.output_tokens, complete: true };
  }
  case "openai-raw": {
    let text = "", stop = null, tokens = null;
    for await (const ch of await openai.chat.completions.create({ ...o, stream: true })) {
      text += ch.choices?.[0]?.delta?.content || "";
      if (ch.choices?.[0]?.finish_reason) stop = ch.choices[0].finish_reason;
      if (ch.usage) tokens = ch.usage.completion_tokens;
    }
    return { text, stop, tokens, complete: stop !== null };
  }
  case "openai-helper": {
    const r = await openai.chat.completions.stream(o).finalChatCompletion();
    return { text: r.choices[0].message.content, stop: r.choices[0].finish_reason, tokens: r.usage?.completion_tokens,
      complete: true };
  }
  }
  throw new Error(`unknown kind ${c.kind}`);
}

const alone = [];
await test("each request alone, sequentially", async () => {
  for (const c of clients) alone.push(await run(c));
  check(alone.every((r) => r.text.length > 0 && r.complete), "every sequential run produced text",
    show(alone.map((r) => r.text.length)));
  const distinct = new Set(alone.map((r) => r.text)).size;
  check(distinct >= 12, "different prompts give different outputs", `${distinct} distinct of 16`);
}, { timeoutMs: 60_000 });

await test("16 concurrent streaming clients == sequential", async () => {
  const t0 = Date.now();
  const peak = { running: 0 };
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const r = await server.metric("headroom_requests_running").catch(() => 0);
      peak.running = Math.max(peak.running, r || 0);
      await new Promise((res) => setTimeout(res, 30));
    }
  })();
  const results = await Promise.allSettled(clients.map(run));
  polling = false;
  await poller;
  const ms = Date.now() - t0;
  results.forEach((r, i) => {
    const c = clients[i];
    if (r.status === "rejected") {
      check(false, `client ${i} (${c.kind}) completed`, String(r.reason?.stack || r.reason));
      return;
    }
    check(r.value.complete, `client ${i} (${c.kind}) completed`);
    eq(r.value.text, alone[i]?.text, `client ${i} (${c.kind}): text == alone`);
    eq([r.value.stop, r.value.tokens], [alone[i]?.stop, alone[i]?.tokens], `client ${i}: stop reason and tokens == alone`);
  });
  check(peak.running > 1, "requests were batched (headroom_requests_running > 1 seen)", peak.running);
  console.log(`   16 clients in ${ms} ms, peak running ${peak.running}`);
  const settled = await waitFor(async () => (await server.metric("headroom_kv_blocks_used")) === 0, 10_000);
  check(settled, "KV blocks back to 0 afterwards", await server.metric("headroom_kv_blocks_used"));
}, { timeoutMs: 60_000 });

eq((await server.stop()).code, 0, "server exits 0");
finish();
