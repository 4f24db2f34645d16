#!/usr/bin/python3
"""summary.py - the engine rows of `make bench` as one table.

Reads the machine-readable lines of bench/run.sh on stdin and prints, per
model and test, our tokens/s next to llama.cpp's:
  - "llama.cpp": prefill (pp512, pp2048) measured in the same run through
    node-llama-cpp's prebuilt binaries, the issue's reference; decode
    (tg128) from DESIGN.md section 7's table (node adds 4-12 ms per decoded
    token, so its decode is not compared);
  - "native": llama-bench built natively from the same llama.cpp source,
    measured in the same run, alternating with ours (bench/llama-native.sh);
the share of the FMA peak (bench-flops) each prefill row uses and DESIGN's
would need, and the fraction of the read bandwidth our decode reaches: of_read, the
read of the same weights taking turns with the decode token by token
(bench-engine), or else the separate 2-thread bench-membw read. Every number is the median of the medians the benchmark
lines report when a test ran more than once. Decode (tg) is compared with
llama-bench in llama-bench's conditions, steps back to back (bench-engine
--tg-plain, mode=plain) when such a line exists; the run with reads between
steps gives the bandwidth share.
"""
import re
import statistics
import sys

# DESIGN.md section 7: llama.cpp built natively, 2 threads (tokens/s).
DESIGN = {
    "qwen2.5-0.5b-q8_0": {"pp512": 365, "pp2048": 312, "tg128": 66},
    "qwen2.5-0.5b-f16": {"pp512": 460, "pp2048": 383, "tg128": 42},
    "llama-3.2-1b-q8_0": {"pp512": 146, "pp2048": 133, "tg128": 33},
    "llama-3.2-1b-f16": {"pp512": 187, "pp2048": 165, "tg128": 21},
}

def fields(line):
    return dict(re.findall(r'(\w+)=("[^"]*"|\S+)', line))

ours, theirs, native, gbps, foreign, membw, of_read, read = {}, {}, {}, {}, {}, {}, {}, {}
flops, fpt, plain = {}, {}, {}
for line in sys.stdin:
    f = fields(line)
    if line.startswith("bench flops") and "gflops" in f:
        flops.setdefault(int(f["threads"]), []).append(float(f["gflops"]))
        continue
    if line.startswith("bench membw"):
        membw.setdefault(int(f["threads"]), []).append(float(f["gbps"]))
        continue
    if not (line.startswith("bench engine") or line.startswith("bench llama")):
        continue
    m = re.search(r"bench-(.+)\.gguf", f.get("model", ""))
    if not m:
        continue
    key = (m.group(1), f["test"])
    tps = float(f["tokens_per_s"])
    if line.startswith("bench engine") and f.get("mode") == "plain":
        # decode back to back, as llama-bench: the side-by-side row
        plain.setdefault(key, []).append(tps)
        continue
    if line.startswith("bench engine"):
        ours.setdefault(key, []).append(tps)
        foreign.setdefault(key, []).append(float(f.get("foreign_cpus", "0")))
        if "gbps" in f:
            gbps.setdefault(key, []).append(float(f["gbps"]))
        if "flops_per_token" in f:
            fpt[key] = float(f["flops_per_token"])
        if "of_read" in f:
            of_read.setdefault(key, []).append(float(f["of_read"]))
            read.setdefault(key, []).append(float(f["read_gbps"]))
    elif line.startswith("bench llama-native"):
        native.setdefault(key, []).append(tps)
    else:
        theirs.setdefault(key, []).append(tps)

med = lambda v: statistics.median(v) if v else None
# The tg row compares decode in llama-bench's conditions (back to back)
# where a plain run exists; the run with reads between steps keeps its
# bandwidth share in the notes.
with_reads = {}
for key, v in plain.items():
    if key in ours:
        with_reads[key] = ours[key]
    ours[key] = v
bw2 = med(membw.get(2, []))
models = sorted({k[0] for k in ours})
print("\n%-24s %-7s %9s %9s %6s %8s %6s   %s" % ("model", "test", "headroom", "llama.cpp", "ratio",
                                              "native", "ratio", "notes"))
for model in models:
    for test in ("pp512", "pp2048", "tg128"):
        o = med(ours.get((model, test), []))
        if o is None:
            continue
        note, ref = "", None
        if test.startswith("pp"):
            ref = med(theirs.get((model, test), []))
            note = "llama.cpp measured side by side"
            peak, fl = med(flops.get(2, [])), fpt.get((model, test))
            if peak and fl and re.search(r"-f(16|32)$", model):  # f32 FMAs; quants use int8 dot products
                note += "; %.0f GFLOP/s = %.0f%% of the %.0f GFLOP/s FMA peak" % (
                    o * fl / 1e9, 100 * o * fl / 1e9 / peak, peak)
                d = DESIGN.get(model, {}).get(test)
                if d:
                    note += "; DESIGN's %d tokens/s needs %.0f%%" % (d, 100 * d * fl / 1e9 / peak)
        else:
            ref = DESIGN.get(model, {}).get(test)
            note = "llama.cpp from DESIGN.md table" if ref else "no llama.cpp decode reference"
            g = med(gbps.get((model, test), []))
            fr = med(of_read.get((model, test), []))
            if g is not None and fr is not None:
                note += "; %.1f GB/s = %.0f%% of the %.1f GB/s read taking turns with it" % (
                    g, 100 * fr, med(read[(model, test)]))
                if (model, test) in with_reads:
                    note += " (%.1f tokens/s that way; back to back as llama-bench above)" % (
                        med(with_reads[(model, test)]))
            elif g is not None and bw2:
                note += "; %.1f GB/s = %.0f%% of %.1f GB/s read bandwidth" % (g, 100 * g / bw2, bw2)
        fl = max(foreign.get((model, test), [0]))
        if fl > 0.1:
            note += "; foreign load up to %.2f cores" % fl
        ratio = "%.2f" % (o / ref) if ref else "-"
        nat = med(native.get((model, test), []))
        nratio = "%.2f" % (o / nat) if nat else "-"
        print("%-24s %-7s %9.1f %9s %6s %8s %6s   %s" % (model, test, o, "%.1f" % ref if ref else "-",
                                                     ratio, "%.1f" % nat if nat else "-", nratio, note))

# Long context (issue 20): the tests run at depth or with long prompts, ours
# against native llama-bench only (node-llama-cpp does not run them).
long_tests = sorted({k[1] for k in ours if "@d" in k[1] or k[1] not in ("pp512", "pp2048", "tg128")})
if long_tests:
    print("\n%-24s %-14s %9s %8s %6s   %s" % ("model", "test", "headroom", "native", "ratio", "notes"))
    for model in models:
        for test in long_tests:
            o = med(ours.get((model, test), []))
            if o is None:
                continue
            nat = med(native.get((model, test), []))
            fl = max(foreign.get((model, test), [0]))
            note = "foreign load up to %.2f cores" % fl if fl > 0.1 else ""
            print("%-24s %-14s %9.1f %8s %6s   %s" % (model, test, o, "%.1f" % nat if nat else "-",
                                                     "%.2f" % (o / nat) if nat else "-", note))
