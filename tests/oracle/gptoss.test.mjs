// gptoss.test.mjs - gpt-oss (issue 19) in headroom's engine against llama.cpp.
//
// A tiny gpt-oss model (build/gen-model --arch gpt-oss: Q/K/V/O biases,
// attention sinks, 16-token sliding window on the even layers, YaRN NeoX
// RoPE with gpt-oss's base/factor/original context, 8 experts top-4 with a
// router bias, expert biases and the clamped SwiGLU) with a prompt of 40
// tokens, so that windowed and full layers both matter along prompt and
// continuation:
//   1. greedy: llama.cpp (node-llama-cpp 3.21.1, flash attention off, F32
//      KV) continues the prompt for 32 tokens; `headroom run --temp 0` must
//      give the same 32;
//   2. teacher-forced along llama.cpp's tokens: at every position from the
//      prompt's first token on, our top-10 logprobs against llama.cpp's,
//      and KL(llama.cpp || ours) over the vocabulary.
// F32: greedy identical and top-10 within 1e-3. mxfp4_real (experts MXFP4,
// the rest Q8_0, as gpt-oss downloads), with a window period of 3
// (attention.sliding_window_pattern: layers 0, 1 windowed, 2 full, 3
// windowed): mean KL < 1e-3.
// Ends with "N passed, N failed".
import path from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { compareDistributions, counter, genModel, llamaGreedy, llamaTeacherForced, ours, oursScored,
  outDir } from "./harness.mjs";

const shape = ["--arch", "gpt-oss", "--n-embd", "128", "--n-head", "4", "--n-head-kv", "2",
  "--head-dim", "64", "--n-ff", "64", "--n-layer", "4", "--n-expert", "8", "--n-expert-used", "4",
  "--n-ff-exp", "64", "--swa", "16", "--ctx", "4096", "--rope-base", "150000",
  "--rope-scaling", "yarn", "--rope-factor", "32", "--rope-orig-ctx", "4096", "--rms-eps", "1e-5"];
const cases = [
  { name: "gpt-oss-f32", args: ["--type", "f32", ...shape], tol: 1e-3 },
  // with the vocabulary padded past the tokenizer's ids ([PAD<id>] UNUSED
  // tokens, as in every real gpt-oss file: 201,088 over o200k's 200,019)
  { name: "gpt-oss-mxfp4_real-period3", args: ["--type", "mxfp4_real", ...shape,
    "--swa-pattern", "3", "--vocab-size", "1000"] },
];

// 40 prompt tokens: more than two windows.
const prompt = Array.from({ length: 40 }, (_, i) => 1 + ((i * 37 + 11) % 250));
const N_GEN = 32;

const { check, finish } = counter();
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });

for (const c of cases) {
  const file = path.join(outDir, `gptoss-${c.name}.gguf`);
  try {
    genModel(file, c.args);
    const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
    const ctx = await model.createContext({ contextSize: 256, flashAttention: false,
      experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", threads: 2 });
    const theirs = await llamaGreedy(ctx, prompt, N_GEN);
    const g = ours(file, prompt, ["--kv-type", "f32", "-n", String(N_GEN), "--temp", "0", "--ignore-eos", "--json"]);
    const same = g.tokens.length === theirs.length && g.tokens.every((t, i) => t === theirs[i]);
    const firstDiff = same ? -1 : g.tokens.findIndex((t, i) => t !== theirs[i]);
    const isFloat = c.tol !== undefined;
    if (isFloat)
      check(same, `${c.name}: greedy differs at ${firstDiff}: ours [${g.tokens}] llama.cpp [${theirs}]`);

    const full = [...prompt, ...theirs.slice(0, N_GEN - 1)];
    const res = await llamaTeacherForced(ctx, full, 0);
    const s = oursScored(file, full, ["--kv-type", "f32"], { logits: true });
    const { maxErr, worst, klMean, klMax, nPos, missing } = compareDistributions({
      res, topLogprobs: s.topLogprobs, logits: s.logits, nVocab: s.nVocab, from: 0, to: full.length });
    for (const i of missing) check(false, `${c.name}: llama.cpp gave no probabilities at ${i}`);
    if (isFloat)
      check(maxErr <= c.tol, `${c.name}: top-10 logprob max error ${maxErr.toExponential(2)} > ${c.tol} (${worst})`);
    else
      check(klMean < 1e-3, `${c.name}: mean KL ${klMean.toExponential(2)} >= 1e-3 (max ${klMax.toExponential(2)})`);
    console.log(`${c.name}: greedy ${same ? "identical" : `differs at ${firstDiff}`} (${N_GEN} tokens); ` +
      `over ${nPos} teacher-forced positions: top-10 logprob max |diff| ${maxErr.toExponential(2)}` +
      `${isFloat ? ` (tolerance ${c.tol})` : ""}, KL mean ${klMean.toExponential(2)} max ${klMax.toExponential(2)}`);
    await ctx.dispose();
    await model.dispose();
  } catch (e) {
    check(false, `${c.name}: ${e.stack || e}`);
  }
}

finish();
