// prefix-cache.test.mjs - an agent's next turn reuses the KV of the last:
// requests that share a long prefix (a system prompt, earlier turns) report
// it as cached (OpenAI prompt_tokens_details.cached_tokens, Anthropic
// cache_read_input_tokens), and produce exactly the tokens a cold server
// (--no-prefix-cache) produces for them - for prefixes ending on and off a
// KV block boundary, one request at a time and several at once. Also the
// prefix-cache metrics. Ends with "N passed, N failed".
import { harness, metricValue, startServer, waitFor } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("prefix-cache");
const warm = await startServer(["--parallel", "8"]);
const cold = await startServer(["--parallel", "8", "--no-prefix-cache"]);

// A system prompt of about 1,500 tokens, as agents send, and turns after it.
const system = "You are a careful coding agent. Follow the repository's conventions. ".repeat(120);
const tails = ["List the files.", "Explain the build.", "x", "Why does the test fail? ".repeat(7),
  "Summarize the design in three sentences.", "Rename the function and update callers."];

const chat = (client, content, extra = {}) => client.chat.completions.create({
  model: "gpt-4o", max_tokens: 16, temperature: 0,
  messages: [{ role: "system", content: system }, { role: "user", content }], ...extra,
});

const results = { cold: [], warm: [], together: [] };

await test("a cold server: nothing cached", async () => {
  const c = cold.openai();
  for (const t of tails) {
    const r = await chat(c, t);
    results.cold.push(r.choices[0].message.content);
    eq(r.usage.prompt_tokens_details.cached_tokens, 0, `--no-prefix-cache: 0 cached (${JSON.stringify(t.slice(0, 20))})`);
  }
}, { timeoutMs: 120_000 });

await test("one at a time: the shared prefix is cached, the output is the cold one", async () => {
  const c = warm.openai();
  for (const [i, t] of tails.entries()) {
    const r = await chat(c, t);
    results.warm.push(r.choices[0].message.content);
    const cached = r.usage.prompt_tokens_details.cached_tokens;
    if (i === 0) eq(cached, 0, "the first request finds nothing cached");
    else check(cached >= 1400 && cached < r.usage.prompt_tokens && cached % 32 === 0,
      `request ${i}: the system prompt's whole blocks are cached`, `${cached} of ${r.usage.prompt_tokens}`);
    eq(results.warm[i], results.cold[i], `request ${i}: same text as the cold server`);
  }
  // The same request again: everything but the last partial block.
  const again = await chat(c, tails[1]);
  const u = again.usage;
  check(u.prompt_tokens - u.prompt_tokens_details.cached_tokens <= 32 && u.prompt_tokens_details.cached_tokens > 0,
    "a repeated request: all but at most one block cached", show(u));
  eq(again.choices[0].message.content, results.cold[1], "a repeated request: same text");
}, { timeoutMs: 120_000 });

await test("together: all at once, cached, the cold outputs", async () => {
  const c = warm.openai();
  const rs = await Promise.all(tails.map((t) => chat(c, t + " ")));
  const cs = await Promise.all(tails.map((t) => chat(cold.openai(), t + " ")));
  rs.forEach((r, i) => {
    eq(r.choices[0].message.content, cs[i].choices[0].message.content, `concurrent request ${i}: same text as cold`);
    check(r.usage.prompt_tokens_details.cached_tokens > 0, `concurrent request ${i}: cached tokens reported`,
      show(r.usage));
  });
}, { timeoutMs: 120_000 });

await test("Anthropic usage: cache_read_input_tokens, input_tokens is the rest", async () => {
  const a = warm.anthropic();
  const req = { model: "claude-sonnet-4-6", max_tokens: 8, temperature: 0, system,
    messages: [{ role: "user", content: "Hello." }] };
  await a.messages.create(req);
  const m = await a.messages.create(req);
  check(m.usage.cache_read_input_tokens > 1000, "cache_read_input_tokens on the repeat", show(m.usage));
  const n = await a.messages.countTokens({ model: req.model, system, messages: req.messages });
  eq(m.usage.input_tokens + m.usage.cache_read_input_tokens, n.input_tokens,
    "input_tokens + cache_read_input_tokens == count_tokens");
  const s = await a.messages.stream(req).finalMessage();
  check(s.usage.cache_read_input_tokens > 1000, "streaming: message_start carries cache_read_input_tokens",
    show(s.usage));
});

await test("metrics", async () => {
  const text = await (await warm.fetch("/metrics")).text();
  const hit = metricValue(text, "headroom_prefix_cache_hit_tokens_total");
  const looked = metricValue(text, "headroom_prefix_cache_lookup_tokens_total");
  check(hit > 0 && looked >= hit, "hit and lookup token counters", `${hit} of ${looked}`);
  check(metricValue(text, "headroom_prefix_cache_blocks") > 0, "headroom_prefix_cache_blocks > 0");
  check(metricValue(text, "headroom_prefix_cache_evicted_blocks_total") !== undefined,
    "headroom_prefix_cache_evicted_blocks_total exported");
  // A stream's client has message_stop a moment before the engine thread
  // releases the request's blocks (CI once scraped 50 still in use), so
  // wait for the release; the cached blocks must not count once it is done.
  await waitFor(async () => (await warm.metric("headroom_kv_blocks_used")) === 0, 5000, 20);
  eq(await warm.metric("headroom_kv_blocks_used"), 0, "cached blocks are not counted as in use");
});

function show(v) { return JSON.stringify(v); }

eq((await warm.stop()).code, 0, "warm server exits 0");
eq((await cold.stop()).code, 0, "cold server exits 0");
finish();
