#!/usr/bin/env python3
"""trace-summary.py - a decode step's time, kernel by kernel, from kernel-trace.c's records.

    python3 bench/cuda/trace-summary.py TRACE.tsv [--graph ID] [--skip N] [--top N]

The kernels of one CUDA-graph replay share their launch's correlation id:
that is one engine step. The graph replayed most often is taken (a decode
step of one batch shape) unless --graph names another; the first --skip
replays (default 3) are left out as warm-up. Prints, medians over the
replays:
  step      first kernel's start to last kernel's end
  busy      the union of the kernels' intervals (the GPU ran something)
  idle      step - busy: launch and dependency gaps between kernels
then each (kernel, grid)'s marginal time a step: its end less the latest
end of the kernels before it (with programmatic dependent launch a kernel
starts while the one before it runs, so start-to-end double counts), the
share of the step, launches a step, and its time each. Names are demangled
with c++filt where it exists. The first lines name the trace and graph.
"""
import argparse
import collections
import shutil
import statistics
import subprocess
import sys


def demangle(names):
    if not names or not shutil.which("c++filt"):
        return {n: n for n in names}
    res = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    out = res.stdout.split("\n")
    return {n: (out[i] if i < len(out) and out[i] else n) for i, n in enumerate(names)}


def short(name):
    """The function's name with its template arguments, without its parameters."""
    depth = 0
    for i, c in enumerate(name):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0:
            name = name[:i]
            break
    if name.startswith("void "):
        name = name[5:]
    return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--graph", type=int, default=None)
    ap.add_argument("--skip", type=int, default=3)
    ap.add_argument("--top", type=int, default=25)
    a = ap.parse_args()

    replays = collections.defaultdict(list)  # (graph, correlation) -> kernels
    n_rec = 0
    with open(a.trace) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 7:
                continue
            n_rec += 1
            start, end, corr, graph = int(p[0]), int(p[1]), int(p[2]), int(p[3])
            if graph:
                replays[(graph, corr)].append((start, end, p[6], p[4]))
    by_graph = collections.Counter(g for g, _ in replays)
    if not by_graph:
        sys.exit(f"trace-summary: {a.trace}: {n_rec} kernels, none in a graph replay")
    graph = a.graph if a.graph is not None else by_graph.most_common(1)[0][0]
    steps = sorted((sorted(k) for (g, _), k in replays.items() if g == graph), key=lambda s: s[0][0])
    skipped = a.skip if len(steps) > a.skip else 0
    steps = steps[skipped:]
    print(f"trace {a.trace}: {n_rec} kernels; graphs replayed: "
          + ", ".join(f"{g} x{n}" for g, n in by_graph.most_common(6)))
    print(f"graph {graph}: {len(steps)} replays summarized ({skipped} skipped), "
          f"{len(steps[0])} kernels a step")

    spans, busys = [], []
    marg = collections.defaultdict(list)  # (name, grid) -> its marginal time in each step
    durs = collections.defaultdict(list)
    names = demangle(sorted({k[2] for s in steps for k in s}))
    for s in steps:
        spans.append(s[-1][1] - s[0][0])
        busy, cur_s, cur_e = 0, s[0][0], s[0][1]
        for st, en, _, _ in s[1:]:
            if st > cur_e:
                busy += cur_e - cur_s
                cur_s, cur_e = st, en
            else:
                cur_e = max(cur_e, en)
        busys.append(busy + cur_e - cur_s)
        # A kernel's marginal time: its end less the latest end before it. With
        # programmatic dependent launch a kernel starts (and waits) while the one
        # before it runs, so its own start-to-end would count that overlap twice.
        m_step, d_step = collections.Counter(), collections.Counter()
        last_end = s[0][0]
        for st, en, nm, grid in s:
            key = (short(names[nm]), grid)
            m_step[key] += max(en - last_end, 0)
            d_step[key] += en - st
            last_end = max(last_end, en)
        for key in m_step:
            marg[key].append(m_step[key])
            durs[key].append(d_step[key])

    med = statistics.median
    step, busy = med(spans) / 1e3, med(busys) / 1e3
    print(f"step {step:.1f} us  busy {busy:.1f} us  idle {step - busy:.1f} us "
          f"({100 * (step - busy) / step:.1f}%)")
    counts = collections.Counter((short(names[k[2]]), k[3]) for k in steps[0])
    print("by kernel and grid, medians a step: marginal time (end less the latest end before "
          "it), its share, launches, marginal and start-to-end time each")
    print(f"{'us/step':>9} {'share':>6} {'n':>4} {'us each':>8} {'dur each':>8}  {'grid':>12}  kernel")
    rows = sorted(marg.items(), key=lambda kv: -med(kv[1]))
    for key, ts in rows[: a.top]:
        t, n = med(ts) / 1e3, max(counts[key], 1)
        d = med(durs[key]) / 1e3
        print(f"{t:9.1f} {100 * t / step:5.1f}% {n:4d} {t / n:8.2f} {d / n:8.2f}  {key[1]:>12}  "
              f"{key[0][:120]}")


if __name__ == "__main__":
    main()
