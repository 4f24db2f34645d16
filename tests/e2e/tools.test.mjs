// tools.test.mjs - tool calls and reasoning through both APIs, with a
// scripted model output: `headroom serve --test-script TEXT` (a test-only
// switch) makes every request's output the tokenization of TEXT followed by
// end-of-turn; the engine still runs, only sampling is replaced. The demo
// model has Qwen3's template, so calls are hermes `<tool_call>` blocks and
// reasoning is a leading `<think>` block.
//
//   1. TOOL_SCRIPT (a get_weather call): Anthropic streaming (tool_use block,
//      input_json_delta pieces, stop_reason tool_use, finalMessage()) and
//      non-streaming; OpenAI streaming (tool_calls deltas, first with id,
//      type and name; finish_reason tool_calls; finalChatCompletion()) and
//      non-streaming; then the tool result sent back (tool_result blocks,
//      role "tool") is accepted.
//   2. THINK_SCRIPT (<think>...</think> then text): Anthropic with thinking
//      enabled gets a thinking block with a signature, without it none;
//      OpenAI gets reasoning_content; thinking blocks echoed back accepted.
// Ends with "N passed, N failed".
import {
  harness, startServer, show, TOOL_SCRIPT, THINK_SCRIPT, weatherToolAnthropic, weatherToolOpenAI,
} from "./lib/server.mjs";

const { check, eq, test, finish } = harness("tools");
const CALL = { city: "Paris", unit: "c" };
const question = [{ role: "user", content: "What is the weather in Paris?" }];

/* ---- 1. a scripted tool call --------------------------------------------- */

let server = await startServer(["--test-script", TOOL_SCRIPT]);
let anthropic = server.anthropic();
let openai = server.openai();
const aReq = { model: "claude-sonnet-4-6", max_tokens: 128, tools: [weatherToolAnthropic], messages: question };
const oReq = { model: "gpt-4o", max_tokens: 128, tools: [weatherToolOpenAI], messages: question };
let toolUse; // the tool_use block of the non-streaming Anthropic answer
let toolCall; // the tool call of the non-streaming OpenAI answer

await test("Anthropic tool call, raw stream", async () => {
  const stream = await anthropic.messages.create({ ...aReq, stream: true });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const starts = events.filter((e) => e.type === "content_block_start");
  const tu = starts.find((e) => e.content_block.type === "tool_use");
  check(tu, "a tool_use content_block_start", show(starts));
  if (!tu) return;
  eq(tu.content_block.name, "get_weather", "tool_use name");
  check(typeof tu.content_block.id === "string" && tu.content_block.id.length > 0, "tool_use id", show(tu.content_block));
  eq(tu.content_block.input, {}, "content_block_start input is {}");
  const pieces = events.filter((e) => e.type === "content_block_delta" && e.index === tu.index);
  check(pieces.length > 0 && pieces.every((e) => e.delta.type === "input_json_delta"),
    "the block's deltas are input_json_delta", show(pieces.map((e) => e.delta.type)));
  const json = pieces.map((e) => e.delta.partial_json).join("");
  let parsed;
  try { parsed = JSON.parse(json); } catch { parsed = `unparseable: ${json}`; }
  eq(parsed, CALL, "input_json_delta pieces assemble to the call's input");
  check(events.some((e) => e.type === "content_block_stop" && e.index === tu.index), "tool_use block stopped");
  const md = events.find((e) => e.type === "message_delta");
  eq(md?.delta?.stop_reason, "tool_use", "message_delta stop_reason tool_use");
  const texts = events.filter((e) => e.type === "content_block_delta" && e.delta.type === "text_delta").map((e) => e.delta.text).join("");
  check(!texts.includes("<tool_call>") && !texts.includes("get_weather"), "no call markup in text deltas", texts);
  eq(events.at(-1)?.type, "message_stop", "ends with message_stop");
});

await test("Anthropic tool call, messages.stream + finalMessage()", async () => {
  const stream = anthropic.messages.stream(aReq);
  let jsonEvents = 0;
  stream.on("inputJson", () => { jsonEvents++; });
  const msg = await stream.finalMessage();
  const tu = msg.content.find((b) => b.type === "tool_use");
  check(tu, "finalMessage has a tool_use block", show(msg.content));
  eq(tu?.name, "get_weather", "finalMessage tool_use name");
  eq(tu?.input, CALL, "finalMessage tool_use input");
  eq(msg.stop_reason, "tool_use", "finalMessage stop_reason tool_use");
  check(jsonEvents > 0, "inputJson events fired", jsonEvents);
});

await test("Anthropic tool call, non-streaming", async () => {
  const msg = await anthropic.messages.create(aReq);
  toolUse = msg.content.find((b) => b.type === "tool_use");
  check(toolUse, "content has a tool_use block", show(msg.content));
  eq(toolUse?.name, "get_weather", "tool_use name");
  eq(toolUse?.input, CALL, "tool_use input (an object)");
  check(typeof toolUse?.id === "string" && toolUse.id.length > 0, "tool_use id", show(toolUse));
  eq(msg.stop_reason, "tool_use", "stop_reason tool_use");
  const text = msg.content.filter((b) => b.type === "text").map((b) => b.text).join("");
  check(!text.includes("<tool_call>"), "no call markup in text", text);
  const none = await anthropic.messages.create({ ...aReq, tool_choice: { type: "none" } });
  eq(none.content.some((b) => b.type === "tool_use"), false, "tool_choice none: no tool_use block parsed");
});

await test("Anthropic tool result sent back", async () => {
  const id = toolUse?.id || "toolu_01";
  const assistant = { role: "assistant", content: [{ type: "text", text: "Let me check." },
    { type: "tool_use", id, name: "get_weather", input: CALL }] };
  const results = [
    { type: "tool_result", tool_use_id: id, content: "18 C, sunny" },
    { type: "tool_result", tool_use_id: id, content: [{ type: "text", text: "18 C, sunny" }] },
    { type: "tool_result", tool_use_id: id, is_error: true, content: "service unavailable" },
    { type: "tool_result", tool_use_id: id, content: [{ type: "tool_reference", tool_name: "get_weather" }] },
  ];
  for (const [i, r] of results.entries()) {
    const msg = await anthropic.messages.create({ ...aReq, messages: [...question, assistant, { role: "user", content: [r] }] });
    eq(msg.type, "message", `tool_result #${i} (${show(r.content).slice(0, 40)}) accepted`);
  }
  const stream = anthropic.messages.stream({
    ...aReq,
    messages: [...question, assistant, { role: "user", content: [results[0], { type: "text", text: "And tomorrow?" }] }],
  });
  const msg = await stream.finalMessage();
  eq(msg.stop_reason, "tool_use", "streamed round trip: the next call comes back");
});

await test("OpenAI tool call, raw stream", async () => {
  const stream = await openai.chat.completions.create({ ...oReq, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  const deltas = chunks.flatMap((c) => c.choices?.[0]?.delta?.tool_calls || []);
  check(deltas.length > 0, "tool_calls deltas present", show(chunks.slice(0, 4)));
  if (!deltas.length) return;
  const first = deltas[0];
  eq(first.index, 0, "first fragment index 0");
  check(typeof first.id === "string" && first.id.length > 0, "first fragment has an id", show(first));
  eq(first.type, "function", "first fragment type function");
  eq(first.function?.name, "get_weather", "first fragment function.name");
  check(deltas.every((d) => d.index === 0), "all fragments index 0", show(deltas));
  const args = deltas.map((d) => d.function?.arguments || "").join("");
  let parsed;
  try { parsed = JSON.parse(args); } catch { parsed = `unparseable: ${args}`; }
  eq(parsed, CALL, "arguments fragments assemble to the call");
  const fin = chunks.filter((c) => c.choices?.[0]?.finish_reason).map((c) => c.choices[0].finish_reason);
  eq(fin, ["tool_calls"], "one finish_reason, tool_calls");
  const content = chunks.map((c) => c.choices?.[0]?.delta?.content || "").join("");
  check(!content.includes("<tool_call>"), "no call markup in content", content);
});

await test("OpenAI tool call, stream + finalChatCompletion()", async () => {
  const done = await openai.chat.completions.stream(oReq).finalChatCompletion();
  const tc = done.choices[0].message.tool_calls?.[0];
  check(tc, "final message has tool_calls", show(done.choices[0].message));
  eq(tc?.function?.name, "get_weather", "tool call name");
  let parsed;
  try { parsed = JSON.parse(tc?.function?.arguments); } catch { parsed = tc?.function?.arguments; }
  eq(parsed, CALL, "tool call arguments");
  eq(done.choices[0].finish_reason, "tool_calls", "finish_reason tool_calls");
});

await test("OpenAI tool call, non-streaming", async () => {
  const r = await openai.chat.completions.create(oReq);
  const m = r.choices[0].message;
  toolCall = m.tool_calls?.[0];
  eq(m.tool_calls?.length, 1, "one tool call");
  eq(toolCall?.type, "function", "type function");
  eq(toolCall?.function?.name, "get_weather", "function.name");
  check(typeof toolCall?.function?.arguments === "string", "arguments is a JSON string", show(toolCall));
  let parsed;
  try { parsed = JSON.parse(toolCall?.function?.arguments); } catch { parsed = toolCall?.function?.arguments; }
  eq(parsed, CALL, "arguments parse to the call");
  check(typeof toolCall?.id === "string" && toolCall.id.length > 0, "id", show(toolCall));
  eq(r.choices[0].finish_reason, "tool_calls", "finish_reason tool_calls");
  check(m.content === null || m.content === "", "content null or empty", show(m.content));
});

await test("OpenAI tool result sent back", async () => {
  const id = toolCall?.id || "call_1";
  const assistant = { role: "assistant", content: null,
    tool_calls: [{ id, type: "function", function: { name: "get_weather", arguments: JSON.stringify(CALL) } }] };
  for (const content of ["18 C, sunny", [{ type: "text", text: "18 C, sunny" }]]) {
    const r = await openai.chat.completions.create({ ...oReq, messages: [...question, assistant,
      { role: "tool", tool_call_id: id, content }] });
    eq(r.object, "chat.completion", `role tool (${typeof content === "string" ? "string" : "parts"}) accepted`);
  }
  const s = await openai.chat.completions.stream({ ...oReq, messages: [...question, assistant,
    { role: "tool", tool_call_id: id, content: "18 C" }] }).finalChatCompletion();
  eq(s.choices[0].finish_reason, "tool_calls", "streamed round trip: the next call comes back");
});

eq((await server.stop()).code, 0, "tool-script server exits 0");

/* ---- 2. scripted reasoning ----------------------------------------------- */

server = await startServer(["--test-script", THINK_SCRIPT]);
anthropic = server.anthropic();
openai = server.openai();
const THOUGHT = "The user wants a greeting. I will say hello.";
const ANSWER = "Hello there!";
const hi = [{ role: "user", content: "Say hello." }];
const thinking = { type: "enabled", budget_tokens: 1024 };

await test("Anthropic thinking enabled, non-streaming", async () => {
  const msg = await anthropic.messages.create({ model: "claude-sonnet-4-6", max_tokens: 2048, thinking, messages: hi });
  const types = msg.content.map((b) => b.type);
  eq(types, ["thinking", "text"], "content: a thinking block, then text");
  const th = msg.content[0];
  eq(th?.thinking?.trim(), THOUGHT, "thinking text");
  check(typeof th?.signature === "string", "thinking block has a signature", show(th));
  eq(msg.content[1]?.text?.trim(), ANSWER, "text after the thinking");
  eq(msg.stop_reason, "end_turn", "stop_reason end_turn");
});

await test("Anthropic thinking enabled, streaming", async () => {
  const stream = await anthropic.messages.create({ model: "claude-sonnet-4-6", max_tokens: 2048, thinking, messages: hi, stream: true });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const start = events.find((e) => e.type === "content_block_start");
  eq(start?.content_block?.type, "thinking", "first block is thinking");
  const idx = start?.index;
  const thought = events.filter((e) => e.type === "content_block_delta" && e.delta.type === "thinking_delta")
    .map((e) => e.delta.thinking).join("");
  eq(thought.trim(), THOUGHT, "thinking_delta pieces");
  const sig = events.findIndex((e) => e.type === "content_block_delta" && e.delta.type === "signature_delta" && e.index === idx);
  const stop = events.findIndex((e) => e.type === "content_block_stop" && e.index === idx);
  check(sig >= 0 && sig < stop, "signature_delta before the thinking block stops", show(events.map((e) => e.delta?.type || e.type)));
  const text = events.filter((e) => e.type === "content_block_delta" && e.delta.type === "text_delta").map((e) => e.delta.text).join("");
  eq(text.trim(), ANSWER, "text_delta pieces");
  const final = await anthropic.messages.stream({ model: "claude-sonnet-4-6", max_tokens: 2048, thinking, messages: hi }).finalMessage();
  eq(final.content.map((b) => b.type), ["thinking", "text"], "finalMessage: thinking, text");
  check(typeof final.content[0]?.signature === "string", "finalMessage thinking has a signature", show(final.content[0]));
});

await test("Anthropic without thinking: no thinking block", async () => {
  const msg = await anthropic.messages.create({ model: "claude-sonnet-4-6", max_tokens: 256, messages: hi });
  eq(msg.content.map((b) => b.type), ["text"], "only a text block");
  eq(msg.content[0]?.text?.trim(), ANSWER, "the text, without the reasoning");
  const st = await anthropic.messages.stream({ model: "claude-sonnet-4-6", max_tokens: 256, messages: hi }).finalMessage();
  eq(st.content.map((b) => b.type), ["text"], "streaming: only a text block");
  const off = await anthropic.messages.create({ model: "claude-sonnet-4-6", max_tokens: 256, messages: hi, thinking: { type: "disabled" } });
  eq(off.content.map((b) => b.type), ["text"], "thinking disabled: only a text block");
});

await test("Anthropic thinking blocks echoed back", async () => {
  const msg = await anthropic.messages.create({
    model: "claude-sonnet-4-6", max_tokens: 2048, thinking,
    messages: [...hi,
      { role: "assistant", content: [{ type: "thinking", thinking: THOUGHT, signature: "c2lnbmF0dXJl" },
        { type: "redacted_thinking", data: "ZW5jcnlwdGVk" }, { type: "text", text: ANSWER }] },
      { role: "user", content: "Again." }],
  });
  eq(msg.type, "message", "thinking and redacted_thinking in an assistant turn accepted");
});

await test("OpenAI reasoning_content", async () => {
  const r = await openai.chat.completions.create({ model: "o-local", max_tokens: 256, messages: hi });
  const m = r.choices[0].message;
  eq(m.reasoning_content?.trim(), THOUGHT, "message.reasoning_content");
  eq(m.content?.trim(), ANSWER, "message.content without the reasoning");
  eq(r.choices[0].finish_reason, "stop", "finish_reason stop");
  const s = await openai.chat.completions.create({ model: "o-local", max_tokens: 256, messages: hi, stream: true });
  let reasoning = "", content = "";
  for await (const ch of s) {
    reasoning += ch.choices?.[0]?.delta?.reasoning_content || "";
    content += ch.choices?.[0]?.delta?.content || "";
  }
  eq(reasoning.trim(), THOUGHT, "streamed reasoning_content deltas");
  eq(content.trim(), ANSWER, "streamed content deltas");
  const back = await openai.chat.completions.create({ model: "o-local", max_tokens: 256, messages: [...hi,
    { role: "assistant", content: ANSWER, reasoning_content: THOUGHT }, { role: "user", content: "Again." }] });
  eq(back.object, "chat.completion", "reasoning_content on input accepted");
});

eq((await server.stop()).code, 0, "think-script server exits 0");
finish();
