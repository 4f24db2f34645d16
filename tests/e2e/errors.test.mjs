// errors.test.mjs - every error class of `headroom serve`, with its status
// and body shape, through the SDKs' error classes (err.status, err.error,
// err.type, err.code) and raw fetch where the SDK hides the details:
// invalid JSON, bad fields (named), unknown route 404 and wrong method 405
// in each API's shape, prompt too long for the context (the wording
// clients parse), max_tokens clamped to the context, body over --max-body
// (413), and authentication with --api-key (401 in both shapes; x-api-key
// and Bearer both accepted; /health open) and without it (any or no key).
//
// The error shape of a route that is neither API's (404, 405) follows the
// anthropic-version header: Anthropic's shape when it is present (the
// Anthropic SDK always sends it), OpenAI's otherwise.
// Ends with "N passed, N failed".
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { harness, startServer, show, describeError } from "./lib/server.mjs";

const { check, eq, test, finish } = harness("errors");

const AV = { "anthropic-version": "2023-06-01" };
const JSONH = { "content-type": "application/json" };

// Raw request: {status, headers, text, body (parsed or null)}.
async function raw(server, route, { method = "POST", headers = {}, body } = {}) {
  const r = await server.fetch(route, { method, headers, body });
  const text = await r.text();
  let parsed = null;
  try { parsed = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, headers: r.headers, text, body: parsed };
}

const isAnthropicError = (b, type) =>
  b && b.type === "error" && b.error && typeof b.error.message === "string" && (type ? b.error.type === type : typeof b.error.type === "string");
const isOpenAIError = (b, type) =>
  b && b.error && typeof b.error.message === "string" && typeof b.error.type === "string" && (!type || b.error.type === type) &&
  "param" in b.error && "code" in b.error;

// Runs `fn`, which must throw an SDK APIError; returns it (or fails).
async function rejects(fn, what) {
  try {
    const r = await fn();
    check(false, `${what}: rejected`, `resolved: ${show(r).slice(0, 300)}`);
    return null;
  } catch (e) {
    if (e && e.status !== undefined) return e;
    check(false, `${what}: an APIError with a status`, describeError(e));
    return null;
  }
}

/* ---- a server with a small context and body limit, no key ---------------- */

const server = await startServer(["--ctx", "512", "--max-body", "1M"]);
const anthropic = server.anthropic();
const openai = server.openai();
const amsg = { model: "claude-sonnet-4-6", max_tokens: 8, messages: [{ role: "user", content: "Hi" }] };
const omsg = { model: "gpt-4o", max_tokens: 8, messages: [{ role: "user", content: "Hi" }] };

await test("invalid JSON -> 400 invalid_request_error", async () => {
  for (const route of ["/v1/messages", "/v1/messages/count_tokens"]) {
    const r = await raw(server, route, { headers: { ...JSONH, ...AV }, body: '{"model": "m", "messages": [' });
    eq(r.status, 400, `${route}: 400`);
    check(isAnthropicError(r.body, "invalid_request_error"), `${route}: Anthropic shape, invalid_request_error`, r.text);
    check((r.headers.get("content-type") || "").startsWith("application/json"), `${route}: JSON content-type`,
      r.headers.get("content-type"));
  }
  for (const route of ["/v1/chat/completions", "/v1/completions"]) {
    const r = await raw(server, route, { headers: JSONH, body: "{not json" });
    eq(r.status, 400, `${route}: 400`);
    check(isOpenAIError(r.body, "invalid_request_error"), `${route}: OpenAI shape, invalid_request_error`, r.text);
  }
  const r = await raw(server, "/v1/messages", { headers: { ...JSONH, ...AV }, body: "[1, 2]" });
  eq(r.status, 400, "a JSON array body: 400");
  const e = await raw(server, "/v1/chat/completions", { headers: JSONH, body: "" });
  eq(e.status, 400, "an empty body: 400");
});

await test("bad fields -> 400 naming the field (SDK errors)", async () => {
  const cases = [
    ["max_tokens: -1", { ...amsg, max_tokens: -1 }, /max_tokens/],
    ["messages not an array", { ...amsg, messages: "Hi" }, /messages/],
    ["unknown content block type", { ...amsg, messages: [{ role: "user", content: [{ type: "bogus", text: "x" }] }] },
      /messages\.0\.content\.0/],
    ["role not a string", { ...amsg, messages: [{ role: 7, content: "Hi" }] }, /role/],
    ["temperature a string", { ...amsg, temperature: "hot" }, /temperature/],
  ];
  for (const [what, body, re] of cases) {
    const e = await rejects(() => anthropic.messages.create(body), `Anthropic ${what}`);
    if (!e) continue;
    check(e instanceof Anthropic.BadRequestError, `Anthropic ${what}: BadRequestError`, describeError(e));
    eq(e.status, 400, `Anthropic ${what}: status 400`);
    eq(e.type, "invalid_request_error", `Anthropic ${what}: error.type`);
    check(re.test(e.error?.error?.message || ""), `Anthropic ${what}: message names ${re}`, e.error?.error?.message);
  }
  const ocases = [
    ["max_tokens: -1", { ...omsg, max_tokens: -1 }, /max_tokens/],
    ["messages not an array", { ...omsg, messages: "Hi" }, /messages/],
    ["temperature a string", { ...omsg, temperature: "hot" }, /temperature/],
    ["content a number", { ...omsg, messages: [{ role: "user", content: 5 }] }, /content/],
  ];
  for (const [what, body, re] of ocases) {
    const e = await rejects(() => openai.chat.completions.create(body), `OpenAI ${what}`);
    if (!e) continue;
    check(e instanceof OpenAI.BadRequestError, `OpenAI ${what}: BadRequestError`, describeError(e));
    eq(e.status, 400, `OpenAI ${what}: status 400`);
    eq(e.type, "invalid_request_error", `OpenAI ${what}: error.type`);
    check(re.test(e.error?.message || ""), `OpenAI ${what}: message names ${re}`, e.error?.message);
  }
  const ce = await rejects(() => openai.completions.create({ model: "m", prompt: 42, max_tokens: 4 }), "completions prompt a number");
  if (ce) eq(ce.status, 400, "completions prompt a number: 400");
  const se = await rejects(() => anthropic.messages.create({ ...amsg, max_tokens: -1, stream: true }), "Anthropic bad field, streaming");
  if (se) eq(se.status, 400, "a bad streaming request fails with HTTP 400 before the stream");
});

await test("unknown route 404, wrong method 405, both shapes", async () => {
  let r = await raw(server, "/v1/nope", { headers: { ...JSONH, ...AV }, body: "{}" });
  eq(r.status, 404, "POST /v1/nope (anthropic-version): 404");
  check(isAnthropicError(r.body, "not_found_error"), "404 in Anthropic shape, not_found_error", r.text);
  r = await raw(server, "/v1/nope", { headers: JSONH, body: "{}" });
  eq(r.status, 404, "POST /v1/nope: 404");
  check(isOpenAIError(r.body), "404 in OpenAI shape", r.text);
  r = await raw(server, "/v1/messages", { method: "GET", headers: AV });
  eq(r.status, 405, "GET /v1/messages: 405");
  check(isAnthropicError(r.body), "405 in Anthropic shape", r.text);
  r = await raw(server, "/v1/chat/completions", { method: "GET" });
  eq(r.status, 405, "GET /v1/chat/completions: 405");
  check(isOpenAIError(r.body), "405 in OpenAI shape", r.text);
  r = await raw(server, "/v1/models", { method: "POST", headers: JSONH, body: "{}" });
  eq(r.status, 405, "POST /v1/models: 405");
  const e = await rejects(() => anthropic.get("/v1/does-not-exist"), "Anthropic SDK GET unknown route");
  if (e) {
    check(e instanceof Anthropic.NotFoundError, "Anthropic SDK: NotFoundError", describeError(e));
    eq(e.type, "not_found_error", "Anthropic SDK: err.type not_found_error");
  }
  const o = await rejects(() => openai.get("/does-not-exist"), "OpenAI SDK GET unknown route");
  if (o) check(o instanceof OpenAI.NotFoundError, "OpenAI SDK: NotFoundError", describeError(o));
});

const longText = "The quick brown fox jumps over the lazy dog. ".repeat(80); // ~800 tokens
const TOO_LONG_A = /^prompt is too long: (\d+) tokens > (\d+) maximum$/;
const TOO_LONG_O = /^This model's maximum context length is (\d+) tokens\. However, your messages resulted in (\d+) tokens\./;

await test("prompt too long for the context -> 400", async () => {
  const body = { ...amsg, messages: [{ role: "user", content: longText }] };
  const counted = await anthropic.messages.countTokens({ model: amsg.model, messages: body.messages });
  check(counted.input_tokens > 512, "count_tokens works past the context", show(counted));
  for (const stream of [false, true]) {
    const e = await rejects(() => anthropic.messages.create({ ...body, stream }), `Anthropic too long (stream ${stream})`);
    if (!e) continue;
    eq(e.status, 400, `Anthropic too long (stream ${stream}): 400`);
    eq(e.type, "invalid_request_error", `Anthropic too long (stream ${stream}): invalid_request_error`);
    const m = (e.error?.error?.message || "").match(TOO_LONG_A);
    check(m, `Anthropic too long (stream ${stream}): "prompt is too long: N tokens > M maximum"`, e.error?.error?.message);
    if (m) {
      eq(Number(m[1]), counted.input_tokens, "N == count_tokens of the request");
      check(Number(m[2]) <= 512 && Number(m[2]) < Number(m[1]), "M is the context (<= 512) and N > M", m[0]);
    }
    check("estimated_bytes" in (e.error?.error || {}) && "limit_bytes" in (e.error?.error || {}),
      "Anthropic too long: estimated_bytes and limit_bytes", show(e.error));
  }
  const oe = await rejects(() => openai.chat.completions.create({ ...omsg, messages: [{ role: "user", content: longText }] }),
    "OpenAI too long");
  if (oe) {
    eq(oe.status, 400, "OpenAI too long: 400");
    eq(oe.code, "context_length_exceeded", "OpenAI too long: code context_length_exceeded");
    eq(oe.type, "invalid_request_error", "OpenAI too long: type invalid_request_error");
    const m = (oe.error?.message || "").match(TOO_LONG_O);
    check(m, "OpenAI too long: \"This model's maximum context length is M tokens. However, your messages resulted in N tokens.\"",
      oe.error?.message);
    if (m) check(Number(m[1]) <= 512 && Number(m[2]) > Number(m[1]), "M <= 512 < N", m[0]);
    check("estimated_bytes" in (oe.error || {}) && "limit_bytes" in (oe.error || {}),
      "OpenAI too long: estimated_bytes and limit_bytes", show(oe.error));
  }
  const os = await rejects(() => openai.chat.completions.create({ ...omsg, stream: true, messages: [{ role: "user", content: longText }] }),
    "OpenAI too long, streaming");
  if (os) eq(os.code, "context_length_exceeded", "OpenAI too long, streaming: HTTP 400 context_length_exceeded");
  const ce = await rejects(() => openai.completions.create({ model: "m", prompt: longText, max_tokens: 4 }), "completions too long");
  if (ce) eq(ce.code, "context_length_exceeded", "completions too long: context_length_exceeded");
});

await test("max_tokens beyond the context is clamped, not an error", async () => {
  const msg = await anthropic.messages.stream({ ...amsg, max_tokens: 100000, temperature: 0 }).finalMessage();
  eq(msg.stop_reason === "max_tokens" || msg.stop_reason === "end_turn", true, `stop_reason ${msg.stop_reason}`);
  check(msg.usage.input_tokens + msg.usage.output_tokens <= 512, "prompt + output within the context", show(msg.usage));
  const r = await openai.chat.completions.create({ ...omsg, max_tokens: 100000, temperature: 0, stream: false });
  check(r.usage.prompt_tokens + r.usage.completion_tokens <= 512, "OpenAI: prompt + output within the context", show(r.usage));
});

await test("body over --max-body -> 413", async () => {
  const big = JSON.stringify({ ...amsg, messages: [{ role: "user", content: "x".repeat(1536 * 1024) }] });
  let r;
  try {
    r = await raw(server, "/v1/messages", { headers: { ...JSONH, ...AV }, body: big });
  } catch (e) {
    check(false, "1.5 MiB body: an HTTP response (not a reset connection)", describeError(e.cause || e));
  }
  if (r) {
    eq(r.status, 413, "1.5 MiB body to /v1/messages: 413");
    check(isAnthropicError(r.body, "request_too_large"), "413 in Anthropic shape, request_too_large", r.text.slice(0, 300));
  }
  try {
    r = await raw(server, "/v1/chat/completions", { headers: JSONH, body: JSON.stringify({ ...omsg, messages: [{ role: "user", content: "y".repeat(1536 * 1024) }] }) });
    eq(r.status, 413, "1.5 MiB body to /v1/chat/completions: 413");
    check(isOpenAIError(r.body), "413 in OpenAI shape", r.text.slice(0, 300));
  } catch (e) {
    check(false, "1.5 MiB body (OpenAI): an HTTP response", describeError(e.cause || e));
  }
  const e = await rejects(() => anthropic.messages.create({ ...amsg, messages: [{ role: "user", content: "z".repeat(1536 * 1024) }] }),
    "Anthropic SDK 1.5 MiB body");
  if (e) check(e instanceof Anthropic.ContentTooLargeError && e.status === 413, "Anthropic SDK: ContentTooLargeError 413", describeError(e));
  // Just under the limit is parsed (and then too long for the context).
  const under = await raw(server, "/v1/messages", { headers: { ...JSONH, ...AV },
    body: JSON.stringify({ ...amsg, messages: [{ role: "user", content: "w ".repeat(400 * 1024) }] }) });
  eq(under.status, 400, "800 KiB body: parsed, then 400 too long (not 413)");
});

await test("without --api-key any or no key works", async () => {
  const r = await raw(server, "/v1/messages", { headers: { ...JSONH, ...AV }, body: JSON.stringify(amsg) });
  eq(r.status, 200, "no key: 200");
  const o = await raw(server, "/v1/chat/completions", { headers: { ...JSONH, authorization: "Bearer anything" }, body: JSON.stringify(omsg) });
  eq(o.status, 200, "any Bearer key: 200");
  const x = await raw(server, "/v1/messages", { headers: { ...JSONH, ...AV, "x-api-key": "whatever" }, body: JSON.stringify(amsg) });
  eq(x.status, 200, "any x-api-key: 200");
});

eq((await server.stop()).code, 0, "server exits 0");

/* ---- authentication ------------------------------------------------------ */

const auth = await startServer(["--api-key", "secret"]);

await test("--api-key: 401 without or with a wrong key, both shapes", async () => {
  let r = await raw(auth, "/v1/messages", { headers: { ...JSONH, ...AV }, body: JSON.stringify(amsg) });
  eq(r.status, 401, "Anthropic, no key: 401");
  check(isAnthropicError(r.body, "authentication_error"), "Anthropic 401 shape, authentication_error", r.text);
  r = await raw(auth, "/v1/chat/completions", { headers: JSONH, body: JSON.stringify(omsg) });
  eq(r.status, 401, "OpenAI, no key: 401");
  check(isOpenAIError(r.body), "OpenAI 401 shape", r.text);
  for (const [route, h] of [["/v1/models", {}], ["/v1/messages/count_tokens", AV], ["/v1/completions", {}]]) {
    const rr = await raw(auth, route, route === "/v1/models" ? { method: "GET", headers: h } :
      { headers: { ...JSONH, ...h }, body: JSON.stringify({ model: "m", prompt: "x", messages: amsg.messages }) });
    eq(rr.status, 401, `${route}, no key: 401`);
  }
  for (const key of ["secre", "secretX", "SECRET", ""]) {
    r = await raw(auth, "/v1/messages", { headers: { ...JSONH, ...AV, "x-api-key": key }, body: JSON.stringify(amsg) });
    eq(r.status, 401, `x-api-key "${key}": 401`);
  }
  const e = await rejects(() => auth.anthropic({ apiKey: "wrong" }).messages.create(amsg), "Anthropic SDK wrong key");
  if (e) {
    check(e instanceof Anthropic.AuthenticationError, "Anthropic SDK: AuthenticationError", describeError(e));
    eq(e.type, "authentication_error", "Anthropic SDK: err.type authentication_error");
  }
  const o = await rejects(() => auth.openai({ apiKey: "wrong" }).chat.completions.create(omsg), "OpenAI SDK wrong key");
  if (o) check(o instanceof OpenAI.AuthenticationError && o.status === 401, "OpenAI SDK: AuthenticationError 401", describeError(o));
});

await test("--api-key: x-api-key and Bearer both accepted; /health open", async () => {
  let r = await raw(auth, "/v1/messages", { headers: { ...JSONH, ...AV, "x-api-key": "secret" }, body: JSON.stringify(amsg) });
  eq(r.status, 200, "x-api-key: secret -> 200");
  r = await raw(auth, "/v1/messages", { headers: { ...JSONH, ...AV, authorization: "Bearer secret" }, body: JSON.stringify(amsg) });
  eq(r.status, 200, "Anthropic route, Authorization: Bearer secret -> 200");
  r = await raw(auth, "/v1/chat/completions", { headers: { ...JSONH, authorization: "Bearer secret" }, body: JSON.stringify(omsg) });
  eq(r.status, 200, "OpenAI route, Authorization: Bearer secret -> 200");
  r = await raw(auth, "/v1/chat/completions", { headers: { ...JSONH, "x-api-key": "secret" }, body: JSON.stringify(omsg) });
  eq(r.status, 200, "OpenAI route, x-api-key: secret -> 200");
  // @anthropic-ai/sdk 1.x sends apiKey as "Authorization: Bearer"; a key
  // set by hand in x-api-key (as Claude Code's apiKeyHelper setups do) too.
  const viaBearer = await auth.anthropic({ apiKey: "secret" }).messages.create(amsg);
  eq(viaBearer.type, "message", "Anthropic SDK apiKey (Bearer) works");
  const viaHeader = await auth.anthropic({ apiKey: null, defaultHeaders: { "x-api-key": "secret" } }).messages.create(amsg);
  eq(viaHeader.type, "message", "Anthropic SDK with an x-api-key header works");
  const viaToken = await auth.anthropic({ apiKey: null, authToken: "secret" }).messages.countTokens({ model: "m", messages: amsg.messages });
  check(viaToken.input_tokens > 0, "Anthropic SDK authToken works (count_tokens)", show(viaToken));
  const models = await auth.anthropic({ apiKey: "secret" }).models.list();
  check(models.data.length > 0, "Anthropic SDK models.list with the key", show(models.data));
  const oc = await auth.openai({ apiKey: "secret" }).chat.completions.create(omsg);
  eq(oc.object, "chat.completion", "OpenAI SDK apiKey works");
  r = await raw(auth, "/health", { method: "GET" });
  eq(r.status, 200, "/health without a key: 200");
});

eq((await auth.stop()).code, 0, "auth server exits 0");

/* ---- the same key from the environment ----------------------------------- */

await test("HEADROOM_API_KEY from the environment", async () => {
  const envServer = await startServer([], { env: { HEADROOM_API_KEY: "envkey" } });
  try {
    let r = await raw(envServer, "/v1/messages", { headers: { ...JSONH, ...AV }, body: JSON.stringify(amsg) });
    eq(r.status, 401, "no key: 401");
    r = await raw(envServer, "/v1/messages", { headers: { ...JSONH, ...AV, "x-api-key": "envkey" }, body: JSON.stringify(amsg) });
    eq(r.status, 200, "x-api-key from HEADROOM_API_KEY: 200");
  } finally {
    eq((await envServer.stop()).code, 0, "env server exits 0");
  }
});

finish();
