// anthropic.test.mjs - the Anthropic Messages API of `headroom serve`
// through the official @anthropic-ai/sdk: non-streaming, the stream helper
// (finalMessage()) and the raw `stream: true` iterator (event order and
// shapes), greedy determinism (streamed text == non-streamed text), the
// request features agents send (system as string and blocks, the billing
// header block, tools with input_schema and cache_control, role "system"
// inside messages, stop_sequences, metadata, sampling fields), count_tokens
// against usage, /v1/models in Anthropic's shape with --alias names, the
// model name echoed as sent, the SDK's beta namespace, and `?beta=true`
// on the path (what Claude Code sends). One server for the file. Ends with "N passed, N failed".
import { harness, startServer, parseSSE, weatherToolAnthropic, show } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("anthropic");
const MODEL = "claude-sonnet-4-6";
const server = await startServer(["--alias", "claude-haiku-4-5", "--alias", "local-demo"]);
const client = server.anthropic();

const base = {
  model: MODEL,
  max_tokens: 16,
  temperature: 0,
  messages: [{ role: "user", content: "Write one sentence about the sea." }],
};

const textOf = (msg) => msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");

let plain; // the non-streaming reference for `base`

await test("messages.create, non-streaming", async () => {
  plain = await client.messages.create(base);
  eq(plain.type, "message", "type is message");
  eq(plain.role, "assistant", "role is assistant");
  eq(plain.model, MODEL, "model echoed as sent");
  check(typeof plain.id === "string" && plain.id.startsWith("msg_"), "id starts with msg_", plain.id);
  check(Array.isArray(plain.content) && plain.content.length >= 1 && plain.content[0].type === "text",
    "content is a text block", show(plain.content));
  check(textOf(plain).length > 0, "text is not empty");
  check(["end_turn", "max_tokens"].includes(plain.stop_reason), "stop_reason end_turn or max_tokens", plain.stop_reason);
  check(plain.stop_sequence === null, "stop_sequence null", show(plain.stop_sequence));
  const u = plain.usage || {};
  check(Number.isInteger(u.input_tokens) && u.input_tokens > 0, "usage.input_tokens > 0", show(u));
  check(Number.isInteger(u.output_tokens) && u.output_tokens > 0 && u.output_tokens <= 16,
    "usage.output_tokens in 1..max_tokens", show(u));
  if (plain.stop_reason === "max_tokens") eq(u.output_tokens, 16, "max_tokens stop after exactly 16 tokens");
  const again = await client.messages.create(base);
  eq(textOf(again), textOf(plain), "greedy: the same request twice gives the same text");
});

await test("messages.stream + finalMessage()", async () => {
  const stream = client.messages.stream(base);
  let deltas = "";
  stream.on("text", (t) => { deltas += t; });
  const msg = await stream.finalMessage();
  eq(msg.model, MODEL, "stream: model echoed");
  eq(textOf(msg), textOf(plain), "stream: finalMessage text == non-streaming text");
  eq(deltas, textOf(plain), "stream: text events concatenate to the same text");
  eq(msg.stop_reason, plain.stop_reason, "stream: same stop_reason");
  eq(msg.usage.output_tokens, plain.usage.output_tokens, "stream: same usage.output_tokens");
  eq(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens || 0),
    plain.usage.input_tokens + (plain.usage.cache_read_input_tokens || 0),
    "stream: same prompt tokens (input + cache_read)");
});

await test("messages.create stream: true, raw events", async () => {
  const stream = await client.messages.create({ ...base, stream: true });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const types = events.map((e) => e.type);
  eq(types[0], "message_start", "first event message_start");
  const start = events[0]?.message || {};
  eq(start.content, [], "message_start.message.content is []");
  check(start.usage && Number.isInteger(start.usage.input_tokens), "message_start carries usage.input_tokens", show(start.usage));
  eq(start.model, MODEL, "message_start model echoed");
  eq(start.role, "assistant", "message_start role assistant");
  eq(types.at(-1), "message_stop", "last event message_stop");
  eq(types.at(-2), "message_delta", "message_delta just before message_stop");
  // The middle: content_block_start, deltas, content_block_stop per block.
  const middle = types.slice(1, -2);
  const grammar = /^(content_block_start,(content_block_delta,)*content_block_stop,)+$/;
  check(grammar.test(middle.join(",") + ","), "blocks: start, deltas, stop", middle.join(","));
  const first = events.find((e) => e.type === "content_block_start");
  eq(first?.index, 0, "first block index 0");
  eq(first?.content_block, { type: "text", text: "" }, "first block is an empty text block");
  const text = events.filter((e) => e.type === "content_block_delta" && e.delta.type === "text_delta")
    .map((e) => e.delta.text).join("");
  eq(text, textOf(plain), "text_delta pieces == non-streaming text");
  const md = events.find((e) => e.type === "message_delta");
  eq(md?.delta?.stop_reason, plain.stop_reason, "message_delta.stop_reason");
  eq(md?.usage?.output_tokens, plain.usage.output_tokens, "message_delta.usage.output_tokens (cumulative)");
});

await test("SSE framing on the wire", async () => {
  const r = await server.fetch("/v1/messages", {
    method: "POST",
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": "k" },
    body: JSON.stringify({ ...base, stream: true }),
  });
  eq(r.status, 200, "status 200");
  check((r.headers.get("content-type") || "").startsWith("text/event-stream"), "content-type text/event-stream",
    r.headers.get("content-type"));
  const msgs = parseSSE(await r.text());
  const bad = msgs.filter((m) => !m.event || !m.data);
  check(bad.length === 0, "every SSE message has an event: and a data: line", show(bad.slice(0, 3)));
  const mismatched = msgs.filter((m) => {
    try { return JSON.parse(m.data).type !== m.event; } catch { return true; }
  });
  check(mismatched.length === 0, "event name == data.type, data is JSON", show(mismatched.slice(0, 3)));
});

await test("system as string, as blocks, billing header dropped", async () => {
  const sys = "You are a terse assistant.";
  const a = await client.messages.create({ ...base, system: sys });
  const b = await client.messages.create({ ...base, system: [{ type: "text", text: sys }] });
  const c = await client.messages.create({
    ...base,
    system: [
      { type: "text", text: "x-anthropic-billing-header: cc_version=2.0.14.abc; cc_entrypoint=cli; cch=7f3a1;" },
      { type: "text", text: sys, cache_control: { type: "ephemeral" } },
    ],
  });
  const total = (m) => m.usage.input_tokens + (m.usage.cache_read_input_tokens || 0) +
    (m.usage.cache_creation_input_tokens || 0);
  check(total(a) > total(plain), "a system prompt adds tokens", `${total(a)} vs ${total(plain)}`);
  eq(total(b), total(a), "system blocks == system string (prompt tokens)");
  eq(textOf(b), textOf(a), "system blocks == system string (greedy text)");
  eq(total(c), total(a), "billing-header block dropped (prompt tokens)");
  eq(textOf(c), textOf(a), "billing-header block dropped (greedy text)");
  const n1 = await client.messages.countTokens({ model: MODEL, system: sys, messages: base.messages });
  const n2 = await client.messages.countTokens({
    model: MODEL, messages: base.messages,
    system: [{ type: "text", text: "x-anthropic-billing-header: cc_version=1; cch=0;" }, { type: "text", text: sys }],
  });
  eq(n2.input_tokens, n1.input_tokens, "count_tokens also drops the billing-header block");
  const d = await client.messages.create({
    ...base,
    messages: [{ role: "system", content: sys }, ...base.messages],
  });
  eq(d.type, "message", "role system inside messages accepted");
});

await test("count_tokens == usage prompt tokens", async () => {
  const reqs = [
    { messages: base.messages },
    { system: "Be brief.", messages: [{ role: "user", content: "Name three colours." },
      { role: "assistant", content: "Red, green, blue." }, { role: "user", content: [{ type: "text", text: "Three more?" }] }] },
    { tools: [weatherToolAnthropic], messages: [{ role: "user", content: "Weather in Oslo?" }] },
  ];
  for (const [i, r] of reqs.entries()) {
    const counted = await client.messages.countTokens({ model: MODEL, ...r });
    const keys = Object.keys(counted).filter((k) => !k.startsWith("_"));
    check(Number.isInteger(counted.input_tokens) && counted.input_tokens > 0, `count_tokens #${i} returns input_tokens`,
      show(counted));
    const msg = await client.messages.create({ model: MODEL, max_tokens: 4, temperature: 0, ...r });
    const used = msg.usage.input_tokens + (msg.usage.cache_read_input_tokens || 0) +
      (msg.usage.cache_creation_input_tokens || 0);
    eq(counted.input_tokens, used, `count_tokens #${i} == usage.input_tokens + cache_read_input_tokens`);
    if (i === 0) eq(keys, ["input_tokens"], "count_tokens body is {input_tokens}");
  }
});

await test("tools with input_schema, cache_control and unknown fields", async () => {
  const tools = [
    { ...weatherToolAnthropic, cache_control: { type: "ephemeral" } },
    { name: "search", description: "Web search", input_schema: { type: "object", properties: { q: { type: "string" } } },
      defer_loading: true, eager_input_streaming: true, some_future_field: { x: 1 } },
  ];
  for (const tool_choice of [undefined, { type: "auto" }, { type: "any" }, { type: "tool", name: "get_weather" }, { type: "none" }]) {
    const msg = await client.messages.create({
      ...base,
      tools,
      ...(tool_choice ? { tool_choice } : {}),
      messages: [{ role: "user", content: [{ type: "text", text: "What is the weather in Paris?", cache_control: { type: "ephemeral" } }] }],
    });
    eq(msg.type, "message", `tools accepted (tool_choice ${show(tool_choice)})`);
  }
  const withTools = await client.messages.countTokens({ model: MODEL, tools, messages: base.messages });
  const without = await client.messages.countTokens({ model: MODEL, messages: base.messages });
  check(withTools.input_tokens > without.input_tokens + 20, "tool definitions reach the template (more prompt tokens)",
    `${withTools.input_tokens} vs ${without.input_tokens}`);
});

await test("sampling fields, metadata, stop_sequences", async () => {
  const msg = await client.messages.create({
    ...base, temperature: 0.7, top_p: 0.9, top_k: 40, metadata: { user_id: "user-123" },
  });
  eq(msg.type, "message", "temperature, top_p, top_k, metadata accepted");
  // A stop sequence taken from the middle of the greedy text: generation
  // stops there and the text is everything before it.
  const chars = Array.from(textOf(plain));
  if (chars.length >= 8) {
    const stop = chars.slice(4, 7).join("");
    const before = textOf(plain).slice(0, textOf(plain).indexOf(stop));
    const s = await client.messages.create({ ...base, stop_sequences: [stop] });
    eq(s.stop_reason, "stop_sequence", "stop_sequences: stop_reason stop_sequence");
    eq(s.stop_sequence, stop, "stop_sequences: the matched sequence is named");
    eq(textOf(s), before, "stop_sequences: text ends before the sequence");
    const st = await client.messages.stream({ ...base, stop_sequences: [stop] }).finalMessage();
    eq(textOf(st), before, "stop_sequences (stream): text ends before the sequence");
    eq(st.stop_reason, "stop_sequence", "stop_sequences (stream): stop_reason");
    eq(st.stop_sequence, stop, "stop_sequences (stream): stop_sequence named");
  } else {
    check(false, "stop_sequences: greedy text too short to pick a sequence", textOf(plain));
  }
});

await test("models.list (Anthropic shape) and ?beta=true", async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  check(ids.length >= 1, "at least one model listed", show(page.data));
  for (const alias of ["claude-haiku-4-5", "local-demo"]) check(ids.includes(alias), `alias ${alias} listed`, show(ids));
  for (const m of page.data) {
    check(m.type === "model" && typeof m.display_name === "string" && typeof m.created_at === "string" &&
      !Number.isNaN(Date.parse(m.created_at)), `model ${m.id}: type, display_name, created_at (RFC 3339)`, show(m));
  }
  eq(page.has_more, false, "has_more false");
  eq(page.first_id, ids[0], "first_id");
  eq(page.last_id, ids.at(-1), "last_id");
  let n = 0;
  for await (const m of client.models.list()) { if (++n > 50) break; void m; }
  eq(n, ids.length, "auto-pagination stops after one page");
  // The SDK's beta namespace adds anthropic-beta headers; Claude Code also
  // appends ?beta=true to the path (this SDK version does not), so that is
  // sent by hand.
  const beta = await client.beta.messages.create({ ...base, betas: ["interleaved-thinking-2025-05-14"] });
  eq(textOf(beta), textOf(plain), "beta.messages.create (anthropic-beta header): same text");
  const bs = await client.beta.messages.stream({ ...base, betas: ["fine-grained-tool-streaming-2025-05-14"] }).finalMessage();
  eq(textOf(bs), textOf(plain), "beta.messages.stream: same text");
  const headers = { "content-type": "application/json", "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14", "x-api-key": "k" };
  const r = await server.fetch("/v1/messages?beta=true", { method: "POST", headers, body: JSON.stringify(base) });
  const body = await r.json().catch((e) => ({ parse_error: String(e) }));
  eq(r.status, 200, "POST /v1/messages?beta=true: 200");
  eq(body.content?.map((b) => b.text).join(""), textOf(plain), "/v1/messages?beta=true: same text");
  const rc = await server.fetch("/v1/messages/count_tokens?beta=true", {
    method: "POST", headers, body: JSON.stringify({ model: MODEL, messages: base.messages }),
  });
  const counted = await rc.json().catch(() => ({}));
  eq(rc.status, 200, "POST /v1/messages/count_tokens?beta=true: 200");
  eq(counted.input_tokens, (await client.messages.countTokens({ model: MODEL, messages: base.messages })).input_tokens,
    "count_tokens?beta=true == count_tokens");
});

await test("any model name is served and echoed", async () => {
  for (const name of ["claude-opus-4-1-20250805", "local-demo", "whatever/it-is:Q4"]) {
    const m = await client.messages.create({ ...base, model: name });
    eq(m.model, name, `model "${name}" echoed`);
    eq(textOf(m), textOf(plain), `model "${name}" served by the one model`);
  }
});

await test("multi-turn content blocks accepted", async () => {
  const msg = await client.messages.create({
    ...base,
    messages: [
      { role: "user", content: [{ type: "text", text: "Hi." }, { type: "text", text: "Tell me a fact." }] },
      { role: "assistant", content: [{ type: "text", text: "Water boils at 100 C at sea level." }] },
      { role: "user", content: "Another one." },
    ],
  });
  eq(msg.type, "message", "text block arrays in both roles accepted");
});

await test("assistant prefill: the model continues the final assistant message", async () => {
  // The prompt ends inside the assistant turn, right after its text (the
  // template's end-of-turn marker after it is cut), as transformers'
  // continue_final_message does. Qwen3's template, for the record:
  const expected = "<|im_start|>user\nGive JSON<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n{\"answer\":";
  const messages = [{ role: "user", content: "Give JSON" }, { role: "assistant", content: "{\"answer\": " }];
  const counted = await client.messages.countTokens({ model: MODEL, messages });
  const tok = await (await fetch(`${server.url}/tokenize`, {
    method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ content: expected }),
  })).json();
  eq(counted.input_tokens, tok.tokens.length, "count_tokens of a prefill == tokens of the prompt cut after the prefill");
  const msg = await client.messages.create({ ...base, messages });
  eq(msg.usage.input_tokens, tok.tokens.length, "usage.input_tokens of a prefill request");
});

const stopped = await server.stop();
eq(stopped.code, 0, "server exits 0 on SIGTERM");
finish();
