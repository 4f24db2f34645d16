// tokenize-llama.mjs - llama.cpp's tokenization throughput, through
// node-llama-cpp 3.21.1, for side-by-side comparison with bench-tokenize.
//
//   node bench/tokenize-llama.mjs --make-text OUT.txt   writes the benchmark text
//   node bench/tokenize-llama.mjs MODEL.gguf TEXT [--runs N]
//
// The text is 1 MiB of mixed text: the tokenizer oracle corpus
// (tests/oracle/corpus/tokenizer/corpus.json: prose in many scripts, code,
// whitespace runs, numbers, emoji, special-token texts) glued at random with
// a fixed seed, so every run and both programs see the same bytes.
//
// Times model.tokenize(text, false) (no special-token parsing, no BOS, as
// bench-tokenize by default) and prints the median of N runs (default 7)
// after one warm-up:
//   bench tokenize impl=llama.cpp vocab=F bytes=B tokens=T runs=N mb_per_s=M min=.. max=..
// MB is 10^6 bytes. The time includes node-llama-cpp's copy of the string
// into C++ and of the ids back (a few ms per MB), which llama_tokenize
// itself does not spend.
import fs from "node:fs";

const args = process.argv.slice(2);
if (args[0] === "--make-text") {
    const corpus = JSON.parse(fs.readFileSync(
        new URL("../tests/oracle/corpus/tokenizer/corpus.json", import.meta.url), "utf8"));
    const strings = Object.values(corpus).flat().filter((s) => s.length > 0);
    let seed = 0x12345678;
    const rnd = (n) => {
        seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
        return seed % n;
    };
    const parts = [];
    let bytes = 0;
    while (bytes < 1 << 20) {
        const s = strings[rnd(strings.length)] + (rnd(4) ? " " : "\n");
        parts.push(s);
        bytes += Buffer.byteLength(s);
    }
    fs.writeFileSync(args[1], parts.join(""));
    process.exit(0);
}

const {getLlama, LlamaLogLevel} = await import(
    new URL("../tests/oracle/node_modules/node-llama-cpp/dist/index.js", import.meta.url));
const [file, textFile] = args;
const runs = Number(args[args.indexOf("--runs") + 1] ?? 7) || 7;
const text = fs.readFileSync(textFile, "utf8");
const bytes = Buffer.byteLength(text);
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: file, vocabOnly: true});
let n = model.tokenize(text, false).length; // warm-up
const rates = [];
for (let r = 0; r < runs; r++) {
    const t0 = process.hrtime.bigint();
    n = model.tokenize(text, false).length;
    rates.push(bytes / 1e6 / (Number(process.hrtime.bigint() - t0) / 1e9));
}
rates.sort((a, b) => a - b);
console.log(`bench tokenize impl=llama.cpp vocab=${file} bytes=${bytes} tokens=${n} runs=${runs} ` +
    `mb_per_s=${rates[Math.floor(runs / 2)].toFixed(2)} min=${rates[0].toFixed(2)} ` +
    `max=${rates[runs - 1].toFixed(2)}`);
await model.dispose();
await llama.dispose();
