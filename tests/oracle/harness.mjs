// harness.mjs - what the engine oracles (engine.test.mjs, gptoss.test.mjs,
// kv-quant.test.mjs) share: the paths, the pass/fail count, our side
// (`headroom run --tokens`), llama.cpp's side (greedy continuation and
// teacher-forced probabilities through node-llama-cpp) and the comparison
// of the two distributions at each position.
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const here = path.dirname(fileURLToPath(import.meta.url));
export const root = path.resolve(here, "../..");
export const headroom = process.env.HEADROOM_BIN || path.join(root, "build/headroom");
export const outDir = process.env.HR_TEST_MODELS || fs.mkdtempSync("/tmp/hr-models-");
fs.mkdirSync(outDir, { recursive: true });

// A counter of checks: check(ok, what) prints "FAIL what" when !ok;
// finish() prints "N passed, N failed" and exits 1 on any failure.
export function counter() {
  let passed = 0, failed = 0;
  return {
    check(ok, what) {
      if (ok) passed++;
      else { failed++; console.log(`FAIL ${what}`); }
    },
    finish() {
      console.log(`${passed} passed, ${failed} failed`);
      process.exit(failed ? 1 : 0);
    },
  };
}

// build/gen-model --shape tiny ARGS --out FILE.
export function genModel(file, args) {
  execFileSync(path.join(root, "build/gen-model"), ["--shape", "tiny", ...args, "--out", file], { stdio: "inherit" });
}

// `headroom run --model FILE --tokens T --threads 2 ARGS`, its JSON output.
export function ours(file, tokens, args) {
  const out = execFileSync(headroom, ["run", "--model", file, "--tokens", tokens.join(","), "--threads", "2", ...args],
    { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  return JSON.parse(out);
}

// Our teacher-forced scores along `tokens`: the top-`top` logprobs at every
// position, and with logits (--logits-out) the raw logits, nVocab floats a
// position.
export function oursScored(file, tokens, args, { top = 10, logits = false } = {}) {
  const logitsFile = logits ? path.join(outDir, `scored-${process.pid}-${path.basename(file)}.logits`) : null;
  const s = ours(file, tokens, ["--score", "--logprobs", String(top),
    ...(logitsFile ? ["--logits-out", logitsFile] : []), ...args]);
  const r = { topLogprobs: s.prompt_logprobs, logits: null, nVocab: 0 };
  if (logitsFile) {
    const buf = fs.readFileSync(logitsFile);
    fs.unlinkSync(logitsFile);
    r.nVocab = buf.length / 4 / tokens.length;
    r.logits = new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4);
  }
  return r;
}

// llama.cpp's greedy continuation of `prompt` in a new sequence of ctx: up
// to n tokens (fewer when it reaches an end-of-generation token).
export async function llamaGreedy(ctx, prompt, n) {
  const seq = ctx.getSequence();
  const theirs = [];
  for await (const t of seq.evaluate(prompt, { temperature: 0 })) {
    theirs.push(t);
    if (theirs.length >= n) break;
  }
  await seq.dispose();
  return theirs;
}

// llama.cpp's full-vocabulary probabilities after each token of `tokens`
// from position `from` on (res[i].next.probabilities: a Map id -> p).
export async function llamaTeacherForced(ctx, tokens, from) {
  const seq = ctx.getSequence();
  const input = tokens.map((t, i) => i >= from
    ? [t, { generateNext: { probabilities: true, options: { temperature: 1, topK: 0, topP: 1, minP: 0 } } }]
    : t);
  const res = await seq.controlledEvaluate(input);
  await seq.dispose();
  return res;
}

// At each position in [from, to): our top logprobs against llama.cpp's
// probabilities, and, given our raw logits, KL(llama.cpp || ours) over the
// whole vocabulary in float64.
//   compareDistributions({ res, topLogprobs, logits, nVocab, from, to })
//     res          llamaTeacherForced's result
//     topLogprobs  ours: topLogprobs[i] = [{ id, logprob }, ...]
//     logits       ours: Float32Array, nVocab floats per position (or null: no KL)
//   -> { maxErr, worst, klMean, klMax, nPos, missing: [positions without
//        llama.cpp probabilities] }
export function compareDistributions({ res, topLogprobs, logits = null, nVocab = 0, from, to }) {
  let maxErr = 0, worst = "", klSum = 0, klMax = 0, nPos = 0;
  const missing = [];
  for (let i = from; i < to; i++) {
    const probs = res[i]?.next?.probabilities;
    if (!probs) { missing.push(i); continue; }
    for (const { id, logprob } of topLogprobs[i]) {
      const p = probs.get(id);
      const err = p === undefined || p <= 0 ? Infinity : Math.abs(Math.log(p) - logprob);
      if (err > maxErr) {
        maxErr = err;
        worst = `position ${i} token ${id}: ours ${logprob}, llama.cpp ${p === undefined ? "none" : Math.log(p)}`;
      }
    }
    nPos++;
    if (!logits) continue;
    const row = logits.subarray(i * nVocab, (i + 1) * nVocab);
    let mx = -Infinity;
    for (let v = 0; v < nVocab; v++) if (row[v] > mx) mx = row[v];
    let sum = 0;
    for (let v = 0; v < nVocab; v++) sum += Math.exp(row[v] - mx);
    const lse = mx + Math.log(sum);
    let kl = 0;
    for (const [id, p] of probs) if (p > 0) kl += p * (Math.log(p) - (row[id] - lse));
    klSum += kl; klMax = Math.max(klMax, kl);
  }
  return { maxErr, worst, klMean: klSum / Math.max(nPos, 1), klMax, nPos, missing };
}
