// kv-quant.test.mjs - headroom's quantized KV cache (--cache-type q8_0|q4_0)
// against llama.cpp with the same cache type.
//
// For F32-weight models of three architectures (head dims 64 and 128), both
// engines store K and V as ggml Q8_0 or Q4_0 blocks; llama.cpp (node-llama-cpp
// 3.21.1) runs with flash attention on, which it requires for a quantized V
// cache, and its CPU flash attention then quantizes each query row to Q8_0
// and takes integer block dot products, as ours does. With F32 weights the
// only differences left are float summation order (1e-7), so:
//   1. greedy: llama.cpp continues a fixed prompt for 32 tokens; `headroom run
//      --temp 0 --cache-type T` must produce the same 32 tokens;
//   2. teacher-forced along llama.cpp's tokens: at every position, the largest
//      |logprob difference| over our top-5 tokens must be within 5e-2
//      (the issue's criterion); the measured maximum is printed.
// Ends with "N passed, N failed".
import path from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { compareDistributions, counter, genModel, llamaGreedy, llamaTeacherForced, ours, oursScored,
  outDir } from "./harness.mjs";

const TOL = 5e-2, TOP = 5, N_GEN = 32;
const base = ["--type", "f32", "--n-layer", "3", "--ctx", "512"];
const models = [
  { name: "qwen3-hd64", args: ["--arch", "qwen3", "--n-embd", "128", "--n-head", "4", "--n-head-kv", "2",
    "--head-dim", "64", "--n-ff", "256", ...base] },
  { name: "qwen2-hd128", args: ["--arch", "qwen2", "--n-embd", "256", "--n-head", "2", "--n-head-kv", "1",
    "--n-ff", "512", ...base] },
  { name: "llama-hd64", args: ["--arch", "llama", "--n-embd", "256", "--n-head", "4", "--n-head-kv", "2",
    "--n-ff", "512", ...base] },
];
// HR_KVQ_TYPES=f16:F16,f32:F32 compares other cache types the same way (a
// baseline for what flash attention alone costs).
const types = (process.env.HR_KVQ_TYPES || "q8_0:Q8_0,q4_0:Q4_0").split(",").map((p) => p.split(":"));
// A prompt longer than one 32-token KV block and one 16-key tile, so block
// and tile boundaries are crossed in prefill and decode.
const prompt = Array.from({ length: 40 }, (_, i) => 1 + ((i * 97 + 13) % 500));

const { check, finish } = counter();
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });

for (const m of models) {
  const file = path.join(outDir, `kvq-${m.name}.gguf`);
  let model;
  try {
    genModel(file, m.args);
    model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
  } catch (e) {
    check(false, `${m.name}: ${e.stack || e}`);
    continue;
  }
  for (const [ours_t, ggml_t] of types) {
    const name = `${m.name}-${ours_t}`;
    try {
      const ctx = await model.createContext({ contextSize: 256, flashAttention: true,
        experimentalKvCacheKeyType: ggml_t, experimentalKvCacheValueType: ggml_t, threads: 2 });
      const theirs = await llamaGreedy(ctx, prompt, N_GEN);
      const g = ours(file, prompt, ["--cache-type", ours_t, "-n", String(N_GEN), "--temp", "0", "--ignore-eos", "--json"]);
      // llama.cpp's evaluate() stops at an end-of-generation token; ours
      // (--ignore-eos) goes on, so compare up to and including it.
      const eog = theirs.length < N_GEN ? g.tokens[theirs.length] : undefined;
      const stopped = eog !== undefined && model.isEogToken(eog);
      const same = (theirs.length === N_GEN || stopped) && theirs.every((t, i) => t === g.tokens[i]);
      const firstDiff = same ? -1 : g.tokens.findIndex((t, i) => t !== theirs[i]);
      check(same, `${name}: greedy differs at ${firstDiff}: ours [${g.tokens}] llama.cpp [${theirs}]`);

      const full = [...prompt, ...theirs.slice(0, N_GEN - 1)];
      const res = await llamaTeacherForced(ctx, full, prompt.length - 1);
      await ctx.dispose();
      const s = oursScored(file, full, ["--cache-type", ours_t], { top: TOP });
      const { maxErr, worst, nPos, missing } = compareDistributions({
        res, topLogprobs: s.topLogprobs, from: prompt.length - 1, to: full.length });
      for (const i of missing) check(false, `${name}: llama.cpp gave no probabilities at ${i}`);
      const wantPos = full.length - prompt.length + 1;
      check(nPos === wantPos, `${name}: ${nPos} teacher-forced positions, expected ${wantPos}`);
      check(maxErr <= TOL, `${name}: top-${TOP} logprob max error ${maxErr.toExponential(2)} > ${TOL} (${worst})`);
      console.log(`${name}: greedy ${same ? "identical" : `differs at ${firstDiff}`} (${theirs.length} tokens${stopped ? ", then llama.cpp's end of generation" : ""}); ` +
        `over ${nPos} teacher-forced positions: top-${TOP} logprob max |diff| ${maxErr.toExponential(2)} (tolerance ${TOL})`);
    } catch (e) {
      check(false, `${name}: ${e.stack || e}`);
    }
  }
  await model.dispose();
}

finish();
