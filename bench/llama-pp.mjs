// llama-pp.mjs MODEL [--pp 512,2048] [--runs 3] [--threads 2]
// llama.cpp's prompt processing on the same file, through node-llama-cpp
// 3.21.1 (prebuilt CPU binaries), for side-by-side comparison with
// bench-engine. Flash attention on and an f16 KV cache, as in DESIGN.md's
// reference table; batch 512 (llama.cpp's default). Prints
//   bench llama model=F test=ppN threads=T runs=R tokens_per_s=MEDIAN min=.. max=..
// Decode is not measured here: node-llama-cpp adds 4-12 ms per decoded token,
// so decode is compared against DESIGN.md's table instead.
// The oracle packages live in tests/oracle/node_modules (scripts/deps.sh --oracle).
const { getLlama, LlamaLogLevel } = await import(
  new URL("../tests/oracle/node_modules/node-llama-cpp/dist/index.js", import.meta.url));

const args = process.argv.slice(2);
const file = args[0];
const opt = (name, def) => { const i = args.indexOf(name); return i >= 0 ? args[i + 1] : def; };
const pps = opt("--pp", "512,2048").split(",").map(Number).filter((n) => n > 0);
const runs = Number(opt("--runs", "3"));
const threads = Number(opt("--threads", "2"));

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath: file, gpuLayers: 0 });
const nVocab = model.fileInsights?.vocabularySize || 32000;
for (const n of pps) {
  const ctx = await model.createContext({ contextSize: n + 64, batchSize: 512, threads,
    flashAttention: true, sequences: 1 });
  const tokens = Array.from({ length: n }, (_, i) => (i * 7919 + 13) % Math.min(nVocab, 32000));
  const times = [];
  for (let r = 0; r < runs + 1; r++) {
    const seq = ctx.getSequence();
    const t0 = performance.now();
    await seq.evaluateWithoutGeneratingNewTokens(tokens);
    const t1 = performance.now();
    if (r > 0) times.push(n / ((t1 - t0) / 1000)); // the first run warms up
    await seq.dispose();
  }
  times.sort((a, b) => a - b);
  console.log(`bench llama model=${file} test=pp${n} threads=${threads} runs=${runs} ` +
    `tokens_per_s=${times[Math.floor(times.length / 2)].toFixed(2)} min=${times[0].toFixed(2)} ` +
    `max=${times[times.length - 1].toFixed(2)}`);
  await ctx.dispose();
}
await model.dispose();
