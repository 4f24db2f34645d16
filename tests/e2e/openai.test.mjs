// openai.test.mjs - the OpenAI Chat Completions and Completions APIs of
// `headroom serve` through the official `openai` package: non-streaming,
// the stream helper (finalChatCompletion()) and raw `stream: true` chunks
// with stream_options.include_usage (role delta first, one finish_reason,
// a usage chunk with choices [] last, cached_tokens present, [DONE] on the
// wire), greedy streamed text == non-streamed text, /v1/completions both
// ways, /v1/models in OpenAI's shape, tools and the other request fields
// accepted. One server for the file. Ends with "N passed, N failed".
import { harness, startServer, parseSSE, weatherToolOpenAI, show } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("openai");
const MODEL = "gpt-4o-mini";
const server = await startServer(["--alias", "local-demo"]);
const client = server.openai();

const base = {
  model: MODEL,
  max_tokens: 16,
  temperature: 0,
  messages: [{ role: "user", content: "Write one sentence about the sea." }],
};

let plain; // the non-streaming reference for `base`

await test("chat.completions.create, non-streaming", async () => {
  plain = await client.chat.completions.create(base);
  eq(plain.object, "chat.completion", "object chat.completion");
  eq(plain.model, MODEL, "model echoed as sent");
  check(typeof plain.id === "string" && plain.id.length > 0, "id present", plain.id);
  check(Number.isInteger(plain.created), "created is an integer", plain.created);
  eq(plain.choices?.length, 1, "one choice");
  const c = plain.choices[0];
  eq(c.index, 0, "choice index 0");
  eq(c.message.role, "assistant", "message role assistant");
  check(typeof c.message.content === "string" && c.message.content.length > 0, "content is a non-empty string",
    show(c.message));
  check(["stop", "length"].includes(c.finish_reason), "finish_reason stop or length", c.finish_reason);
  const u = plain.usage || {};
  check(Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0, "usage.prompt_tokens > 0", show(u));
  check(Number.isInteger(u.completion_tokens) && u.completion_tokens > 0 && u.completion_tokens <= 16,
    "usage.completion_tokens in 1..max_tokens", show(u));
  eq(u.total_tokens, u.prompt_tokens + u.completion_tokens, "usage.total_tokens = prompt + completion");
  check(Number.isInteger(u.prompt_tokens_details?.cached_tokens), "usage.prompt_tokens_details.cached_tokens present",
    show(u));
  if (c.finish_reason === "length") eq(u.completion_tokens, 16, "length stop after exactly max_tokens");
  const again = await client.chat.completions.create(base);
  eq(again.choices[0].message.content, c.message.content, "greedy: the same request twice gives the same text");
  const mct = await client.chat.completions.create({ ...base, max_tokens: undefined, max_completion_tokens: 16 });
  eq(mct.choices[0].message.content, c.message.content, "max_completion_tokens == max_tokens");
});

await test("chat.completions.stream + finalChatCompletion()", async () => {
  const stream = client.chat.completions.stream({ ...base, stream_options: { include_usage: true } });
  let deltas = "";
  stream.on("content", (d) => { deltas += d; });
  const done = await stream.finalChatCompletion();
  eq(done.model, MODEL, "stream: model echoed");
  eq(done.choices[0].message.content, plain.choices[0].message.content, "stream: final content == non-streaming content");
  eq(deltas, plain.choices[0].message.content, "stream: content events concatenate to the same text");
  eq(done.choices[0].finish_reason, plain.choices[0].finish_reason, "stream: same finish_reason");
  eq(done.usage?.completion_tokens, plain.usage.completion_tokens, "stream: usage.completion_tokens");
  eq(done.usage?.prompt_tokens, plain.usage.prompt_tokens, "stream: usage.prompt_tokens");
});

await test("chat.completions.create stream: true, raw chunks", async () => {
  const stream = await client.chat.completions.create({ ...base, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  check(chunks.length >= 3, "at least 3 chunks", chunks.length);
  check(chunks.every((c) => c.object === "chat.completion.chunk"), "every chunk is chat.completion.chunk",
    show(chunks.find((c) => c.object !== "chat.completion.chunk")));
  check(chunks.every((c) => c.model === MODEL), "every chunk echoes the model");
  check(new Set(chunks.map((c) => c.id)).size === 1, "one id across chunks", show([...new Set(chunks.map((c) => c.id))]));
  eq(chunks[0]?.choices?.[0]?.delta?.role, "assistant", "first chunk: role delta");
  const withChoices = chunks.filter((c) => c.choices.length > 0);
  const finishes = withChoices.filter((c) => c.choices[0].finish_reason);
  eq(finishes.length, 1, "exactly one chunk with finish_reason");
  eq(finishes[0]?.choices[0].finish_reason, plain.choices[0].finish_reason, "finish_reason as non-streaming");
  const last = chunks.at(-1);
  eq(last?.choices, [], "last chunk: choices []");
  check(last?.usage && Number.isInteger(last.usage.prompt_tokens), "last chunk carries usage", show(last));
  check(Number.isInteger(last?.usage?.prompt_tokens_details?.cached_tokens),
    "usage chunk: prompt_tokens_details.cached_tokens present", show(last?.usage));
  eq(last?.usage?.completion_tokens, plain.usage.completion_tokens, "usage chunk: completion_tokens");
  check(chunks.slice(0, -1).every((c) => c.usage == null), "no usage on the other chunks",
    show(chunks.slice(0, -1).find((c) => c.usage != null)));
  const text = withChoices.map((c) => c.choices[0].delta?.content || "").join("");
  eq(text, plain.choices[0].message.content, "content deltas == non-streaming content");
  // Without include_usage there is no usage chunk.
  const s2 = await client.chat.completions.create({ ...base, stream: true });
  const c2 = [];
  for await (const ch of s2) c2.push(ch);
  check(c2.every((c) => c.choices.length === 1), "without include_usage: no choices [] chunk",
    show(c2.find((c) => c.choices.length !== 1)));
});

await test("SSE framing on the wire", async () => {
  const r = await server.fetch("/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", authorization: "Bearer k" },
    body: JSON.stringify({ ...base, stream: true, stream_options: { include_usage: true } }),
  });
  eq(r.status, 200, "status 200");
  check((r.headers.get("content-type") || "").startsWith("text/event-stream"), "content-type text/event-stream",
    r.headers.get("content-type"));
  const msgs = parseSSE(await r.text());
  eq(msgs.at(-1)?.data, "[DONE]", "ends with data: [DONE]");
  const bad = msgs.slice(0, -1).filter((m) => { try { JSON.parse(m.data); return false; } catch { return true; } });
  check(bad.length === 0, "every other data line is JSON", show(bad.slice(0, 3)));
});

await test("completions.create (raw prompt)", async () => {
  const req = { model: "text-model", prompt: "The sea is", max_tokens: 16, temperature: 0 };
  const c = await client.completions.create(req);
  eq(c.object, "text_completion", "object text_completion");
  eq(c.model, "text-model", "model echoed");
  check(typeof c.choices?.[0]?.text === "string" && c.choices[0].text.length > 0, "choices[0].text non-empty",
    show(c.choices));
  check(["stop", "length"].includes(c.choices?.[0]?.finish_reason), "finish_reason stop or length",
    c.choices?.[0]?.finish_reason);
  check(Number.isInteger(c.usage?.prompt_tokens) && c.usage.prompt_tokens > 0 && c.usage.prompt_tokens < 10,
    "usage.prompt_tokens: the raw prompt, no template", show(c.usage));
  const s = await client.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const ch of s) chunks.push(ch);
  const text = chunks.filter((ch) => ch.choices?.length).map((ch) => ch.choices[0].text || "").join("");
  eq(text, c.choices[0].text, "streamed text == non-streaming text");
  check(chunks.every((ch) => ch.object === "text_completion"), "chunks are text_completion objects",
    show(chunks.find((ch) => ch.object !== "text_completion")));
  const fin = chunks.filter((ch) => ch.choices?.[0]?.finish_reason);
  eq(fin.length, 1, "one chunk with finish_reason");
  eq(fin[0]?.choices[0].finish_reason, c.choices[0].finish_reason, "same finish_reason");
  const last = chunks.at(-1);
  eq(last?.usage?.completion_tokens, c.usage.completion_tokens, "usage chunk: completion_tokens");
  const arr = await client.completions.create({ ...req, prompt: ["The sea is"] });
  eq(arr.choices[0].text, c.choices[0].text, "prompt as a one-string array == string");
});

await test("models.list (OpenAI shape)", async () => {
  const page = await client.models.list();
  const ids = page.data.map((m) => m.id);
  check(ids.length >= 1, "at least one model", show(page.data));
  check(ids.includes("local-demo"), "alias local-demo listed", show(ids));
  for (const m of page.data) {
    check(m.object === "model" && typeof m.id === "string" && Number.isInteger(m.created) && typeof m.owned_by === "string",
      `model ${m.id}: object, created, owned_by`, show(m));
  }
  const r = await server.fetch("/v1/models", { headers: { authorization: "Bearer k" } });
  const body = await r.json();
  eq(body.object, "list", "raw body: object list");
  check(!("has_more" in body) && !("first_id" in body), "no Anthropic fields without anthropic-version", show(body));
});

await test("tools and other fields accepted", async () => {
  const messages = [{ role: "user", content: "What is the weather in Paris?" }];
  for (const tool_choice of [undefined, "auto", "none", "required", { type: "function", function: { name: "get_weather" } }]) {
    const r = await client.chat.completions.create({ ...base, messages, tools: [weatherToolOpenAI],
      ...(tool_choice ? { tool_choice } : {}) });
    eq(r.object, "chat.completion", `tools accepted (tool_choice ${show(tool_choice)})`);
  }
  const withTools = await client.chat.completions.create({ ...base, max_tokens: 1, messages, tools: [weatherToolOpenAI] });
  const without = await client.chat.completions.create({ ...base, max_tokens: 1, messages });
  check(withTools.usage.prompt_tokens > without.usage.prompt_tokens + 20, "tool definitions reach the template",
    `${withTools.usage.prompt_tokens} vs ${without.usage.prompt_tokens}`);
  const r = await client.chat.completions.create({
    ...base, temperature: 0.8, top_p: 0.9, seed: 7, presence_penalty: 0.5, frequency_penalty: 0.5,
    response_format: { type: "json_object" }, user: "u1", n: 1, logit_bias: {}, parallel_tool_calls: true,
  });
  eq(r.object, "chat.completion", "sampling fields, seed, penalties, response_format accepted");
  const seeded = await client.chat.completions.create({ ...base, temperature: 0.8, seed: 7 });
  const seeded2 = await client.chat.completions.create({ ...base, temperature: 0.8, seed: 7 });
  eq(seeded2.choices[0].message.content, seeded.choices[0].message.content, "same seed, same text");
  const chars = Array.from(plain.choices[0].message.content);
  if (chars.length >= 8) {
    const stop = chars.slice(4, 7).join("");
    const full = plain.choices[0].message.content;
    const s = await client.chat.completions.create({ ...base, stop: [stop] });
    eq(s.choices[0].message.content, full.slice(0, full.indexOf(stop)), "stop: text ends before the stop string");
    eq(s.choices[0].finish_reason, "stop", "stop: finish_reason stop");
    const s1 = await client.chat.completions.create({ ...base, stop });
    eq(s1.choices[0].message.content, full.slice(0, full.indexOf(stop)), "stop as a string");
  }
});

await test("message forms accepted", async () => {
  const parts = await client.chat.completions.create({
    ...base, messages: [{ role: "user", content: [{ type: "text", text: "Write one sentence about the sea." }] }],
  });
  eq(parts.usage.prompt_tokens, plain.usage.prompt_tokens, "one text part == string content (prompt tokens)");
  eq(parts.choices[0].message.content, plain.choices[0].message.content, "one text part == string content (text)");
  const multi = await client.chat.completions.create({
    ...base,
    messages: [
      { role: "system", content: "Be brief." },
      { role: "user", content: "Hi" },
      { role: "assistant", content: "Hello.", reasoning_content: "Greet back." },
      { role: "user", content: "Tell me about the sea." },
    ],
  });
  eq(multi.object, "chat.completion", "system, assistant with reasoning_content accepted");
});

const stopped = await server.stop();
eq(stopped.code, 0, "server exits 0 on SIGTERM");
finish();
