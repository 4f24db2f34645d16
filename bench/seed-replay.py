#!/usr/bin/env python3
"""seed-replay.py - the seed's own request, replayed over HTTP against `headroom serve`.

../shared/seeds/001_*.txt sends one user message of "x " repeated 245,243
times, max_tokens 1, temperature 0, through /v1/messages: 490,629 bytes with
SHA-256 4b9dcdec...ef2d. This program sends exactly those bytes (the model
name too: every name is served by the one model) to a fresh server, first to
/v1/messages/count_tokens and then to /v1/messages, and reports what the
seed's before/after table reports: the result, prefill progress, pressure
transitions, prefill API errors and wall time, plus the peak RSS (VmHWM of
the server process, read just before it is stopped) and throttled chunks.

Two modes, both printing machine-readable `seed245k ...` lines and a table:

  --replay   two cold servers (restarted between, prefix cache off, as the
             seed asks): `--no-governor` with fixed --batch-tokens chunks
             first, because its peak decides the limit of the governed run:
             a --memory-limit below that peak (so the fixed schedule would
             cross it) and above what the governor needs (the server's
             resting RSS plus the prompt's KV, over the hard watermark).
             Exits 1 unless count_tokens' N equals the completed response's
             usage.input_tokens, and unless the governed run completes.
  --overhead R  the same message shortened to --words tokens (32K in `make
             bench`), governed under a generous ceiling and ungoverned, two
             servers side by side, R alternating rounds: median prefill
             tokens/s of each and their ratio (the issue's target: the
             governor costs <= 1%).

Standard library only (the machine's /usr/bin/python3).
"""
import argparse
import hashlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

SEED_MODEL = "DeepSeek-V4-Flash-0731-oQ2e-mtp"
SEED_WORDS = 245_243
SEED_BYTES = 490_629
SEED_SHA256 = "4b9dcdec01ff8d56ea1bb22e3a011bdd90176f8127259e9d3dd69f4cde15ef2d"
MIB = 1024 * 1024


def payload(words):
    """The seed's body, byte for byte (separators as the seed's script)."""
    body = {
        "model": SEED_MODEL,
        "messages": [{"role": "user", "content": "x " * words}],
        "max_tokens": 1,
        "temperature": 0,
        "top_p": 1.0,
        "stream": False,
    }
    return json.dumps(body, separators=(",", ":")).encode()


def post(base, path, data, timeout):
    """(HTTP status, parsed JSON or the raw text) - errors are answers too."""
    req = urllib.request.Request(base + path, data=data, method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except (urllib.error.URLError, OSError) as e:
        return 0, {"error": {"type": "connection", "message": str(e)}}
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def metrics(base):
    """/metrics as {name{labels}: value}; {} when the server does not answer."""
    try:
        with urllib.request.urlopen(base + "/metrics", timeout=10) as r:
            text = r.read().decode()
    except (urllib.error.URLError, OSError):
        return {}
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
    return out


def proc_kib(pid, key):
    """VmRSS / VmHWM of a live process in KiB (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Server:
    """One `headroom serve` on 127.0.0.1 with a free port, its log in a file."""

    def __init__(self, args, extra, log_path):
        self.log_path = log_path
        cmd = [args.headroom, "serve", "--model", args.model, "--port", "0", "--parallel", "1",
               "--no-prefix-cache", "--batch-tokens", str(args.batch_tokens)]
        if args.threads:
            cmd += ["--threads", str(args.threads)]
        cmd += extra
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        self.base = None
        deadline = time.time() + 120
        while time.time() < deadline and self.proc.poll() is None:
            with open(log_path) as f:
                m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", f.read())
            if m:
                self.base = m.group(1)
                break
            time.sleep(0.1)
        if not self.base:
            self.stop()
            sys.exit(f"seed-replay: the server did not start; see {log_path}")

    def stop(self):
        """SIGINT, as a user stops it; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        return self.proc.returncode


def one_run(args, label, extra, data):
    """A cold server, count_tokens, the message; everything the table needs."""
    log_path = os.path.join(args.out_dir, f"seed245k-{label}.log")
    srv = Server(args, extra, log_path)
    res = {"label": label, "resting_rss_kib": proc_kib(srv.proc.pid, "VmRSS")}
    t0 = time.time()
    st, counted = post(srv.base, "/v1/messages/count_tokens", data, 600)
    res["count_s"] = round(time.time() - t0, 3)
    res["count_status"] = st
    res["count_tokens"] = counted.get("input_tokens") if isinstance(counted, dict) else None

    # Samples every 2 s while the message runs: prefill progress and RSS, so
    # a run that fails still says how far it got.
    samples, done = [], threading.Event()

    def sample():
        t0 = time.time()
        while not done.wait(2.0):
            m = metrics(srv.base)
            samples.append((round(time.time() - t0, 1), int(m.get("headroom_prefill_tokens_total", -1)),
                            proc_kib(srv.proc.pid, "VmRSS")))

    th = threading.Thread(target=sample, daemon=True)
    th.start()
    t0 = time.time()
    st, msg = post(srv.base, "/v1/messages", data, args.timeout)
    res["wall_s"] = time.time() - t0
    # The 5-minute load average as the message ends: on a shared machine
    # the wall time means little without it.
    res["load_5m"] = float(open("/proc/loadavg").read().split()[1])
    done.set()
    th.join()
    # The scheduler adds a step's prefilled tokens to its stats just after
    # the request's last event, so the response can arrive first: wait (up
    # to 5 s) for the count to reach the prompt before the final scrape.
    n_prompt = msg.get("usage", {}).get("input_tokens", 0) if isinstance(msg, dict) else 0
    for _ in range(50):
        m = metrics(srv.base)
        if not n_prompt or m.get("headroom_prefill_tokens_total", 0) >= n_prompt:
            break
        time.sleep(0.1)
    res["peak_rss_kib"] = proc_kib(srv.proc.pid, "VmHWM")  # before it exits
    # Bad input keeps its clear answer at this size: the same body without
    # max_tokens is a 400 naming the field, before anything is prefilled.
    bad = json.loads(data)
    del bad["max_tokens"]
    st_bad, msg_bad = post(srv.base, "/v1/messages", json.dumps(bad).encode(), 600)
    res["bad_input"] = f"{st_bad} " + (msg_bad.get("error", {}).get("message", "")
                                       if isinstance(msg_bad, dict) else str(msg_bad)[:80])
    res["exit"] = srv.stop()
    res["status"] = st
    ok = st == 200 and isinstance(msg, dict) and msg.get("type") == "message"
    usage = msg.get("usage", {}) if ok else {}
    res["stop_reason"] = msg.get("stop_reason") if ok else None
    res["input_tokens"] = usage.get("input_tokens")
    res["output_tokens"] = usage.get("output_tokens")
    if not ok:
        err = msg.get("error", {}) if isinstance(msg, dict) else {}
        res["error"] = f"{err.get('type', 'error')}: {err.get('message', str(msg)[:200])}"
    res["prefilled"] = int(m.get("headroom_prefill_tokens_total", samples[-1][1] if samples else 0))
    res["chunks"] = int(m.get("headroom_prefill_chunks_total", 0))
    res["governed"] = int(m.get("headroom_memory_governed", -1))
    res["throttled"] = int(m.get('headroom_prefill_chunks_throttled_total', 0))
    res["soft"] = int(m.get('headroom_memory_pressure_transitions_total{to="soft"}', 0))
    res["hard"] = int(m.get('headroom_memory_pressure_transitions_total{to="hard"}', 0))
    res["aborted"] = int(m.get("headroom_requests_aborted_for_memory_total", 0))
    res["streams_failed"] = int(m.get("headroom_streams_failed_total", 0))
    res["api_errors"] = (0 if ok else 1) + res["streams_failed"]
    with open(log_path) as f:
        log = f.read()
    first = re.search(r"prefill chunk \d+ -> \d+ tokens \([^)]*\)", log)
    res["first_throttle"] = first.group(0) if first else ""
    m2 = re.search(r"first token ([0-9.]+) s", log)
    res["ttft_s"] = float(m2.group(1)) if m2 else None
    with open(os.path.join(args.out_dir, f"seed245k-{label}.samples"), "w") as f:
        for s in samples:
            f.write("t=%s prefilled=%d rss_kib=%d\n" % s)
    print("seed245k " + " ".join(f"{k}={json.dumps(v)}" for k, v in res.items()), flush=True)
    return res


def resting_governed(args):
    """What a governed server holds before any request: the larger of its
    RSS and the governor's own current bytes (a probe server, started and
    stopped; the governed and ungoverned servers need not rest alike)."""
    srv = Server(args, ["--memory-limit", args.generous], os.path.join(args.out_dir, "seed245k-probe.log"))
    time.sleep(0.5)
    rss = proc_kib(srv.proc.pid, "VmRSS") * 1024
    cur = metrics(srv.base).get("headroom_memory_current_bytes", 0)
    srv.stop()
    return max(rss, int(cur))


def pick_limit(rest_bytes, kv_bytes, off):
    """A --memory-limit the fixed 2048-token schedule crosses and the governor can hold.

    The governor needs at least its resting memory plus the prompt's KV
    under its hard watermark (0.95 of the ceiling), plus a little for the
    request's own buffers and the smallest chunks (3%); the fixed schedule
    peaked at off's VmHWM. Halfway between the two leaves room on both
    sides; None when there is none.
    """
    need = (rest_bytes + kv_bytes) / 0.95 * 1.03
    peak = off["peak_rss_kib"] * 1024
    if need >= peak * 0.98:
        return None
    return int((need + peak) / 2 // MIB)


def fmt_run(r, n_total, limit_mib, version):
    if r["status"] == 200 and r["input_tokens"] is not None:
        result = f"Valid response (HTTP 200, {r['stop_reason']}, {r['output_tokens']} output token)"
    else:
        result = f"HTTP {r['status']}: {r.get('error', '')}"
    gov = r["governed"] == 1
    peak = r["peak_rss_kib"] / 1024
    over = "above" if peak > limit_mib else "below"
    return (f"| {version} | {result} | {r['prefilled']:,} / {n_total:,} | "
            f"{r['hard'] if gov else '- (no governor)'} | {r['api_errors']} | "
            f"{r['wall_s']:,.2f} s (load {r['load_5m']:.1f}) | "
            f"{peak:.1f} MiB ({over} {limit_mib} MiB) | "
            f"{r['soft'] if gov else '-'} | "
            f"{r['throttled'] if gov else 0} of {r['chunks']} | {r['aborted'] if gov else '-'} |")


def replay(args):
    data = payload(args.words)
    sha = hashlib.sha256(data).hexdigest()
    exact = args.words == SEED_WORDS
    print(f"seed245k body bytes={len(data)} sha256={sha} seed_exact={int(exact)}", flush=True)
    if exact and (len(data) != SEED_BYTES or sha != SEED_SHA256):
        sys.exit("seed-replay: the body is not the seed's 490,629 bytes")
    off = one_run(args, "no-governor", ["--no-governor"], data)
    limit = args.memory_limit_mib
    if not limit:
        rest = resting_governed(args)
        kv = args.kv_bytes_per_token * (off["count_tokens"] or 0)
        limit = pick_limit(rest, kv, off)
        print(f"seed245k limit: no-governor peak {off['peak_rss_kib'] / 1024:.1f} MiB; governed server "
              f"at rest {rest / MIB:.1f} MiB + the prompt's KV {kv / MIB:.1f} MiB", flush=True)
    if not limit:
        sys.exit("seed-replay: no --memory-limit lies between what the governor needs and the fixed "
                 "schedule's peak; set one with --memory-limit-mib")
    print(f"seed245k limit_mib={limit}", flush=True)
    on = one_run(args, "governor", ["--memory-limit", f"{limit}M"], data)
    n_total = on["input_tokens"] or off["input_tokens"] or on["count_tokens"] or 0
    print()
    print("| Version | Result | Prefill progress | Hard-pressure transitions | Prefill API errors | "
          "Wall time | Peak RSS (VmHWM) | Soft-pressure transitions | Throttled chunks | "
          "Aborted for memory |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print(fmt_run(off, n_total, limit, f"`--no-governor`, fixed {args.batch_tokens}-token chunks"))
    print(fmt_run(on, n_total, limit, f"governor, `--memory-limit {limit}M`"))
    print()
    if on["first_throttle"]:
        print(f"seed245k first_throttle=\"{on['first_throttle']}\"")
    failures = []
    for r in (off, on):
        if r["count_tokens"] != r["input_tokens"]:
            failures.append(f"{r['label']}: count_tokens {r['count_tokens']} != usage.input_tokens "
                            f"{r['input_tokens']}")
    if on["status"] != 200 or on["prefilled"] != on["input_tokens"] or on["api_errors"] or on["aborted"]:
        failures.append("governor: the request did not complete cleanly")
    for r in (off, on):
        if not r["bad_input"].startswith("400 max_tokens"):
            failures.append(f"{r['label']}: the body without max_tokens got {r['bad_input']!r}")
    if on["peak_rss_kib"] / 1024 > limit:
        failures.append(f"governor: peak RSS {on['peak_rss_kib'] / 1024:.1f} MiB above the {limit} MiB limit")
    for f in failures:
        print("seed245k FAIL " + f)
    if not failures:
        print(f"seed245k ok count_tokens == usage.input_tokens == {n_total:,} in both runs")
    return 1 if failures else 0


def last_ttft(log_path):
    """The server's time to first token of its latest finished request."""
    with open(log_path) as f:
        found = re.findall(r"first token ([0-9.]+) s", f.read())
    return float(found[-1]) if found else None


def overhead(args):
    """Governor on and off, side by side: two servers up at once (one
    governed under a generous ceiling, one --no-governor), one warm-up
    request each, then R rounds of one request to each, the order swapped
    every round, so a burst of foreign load on this shared machine lands on
    both sides alike. The prefill rate is tokens / the server's own time to
    first token (arrival to the one generated token), so the client and
    HTTP stay out of it. Reports both medians, their ratio, and the median
    of the per-round ratios (the steadier number when the load drifts)."""
    data = payload(args.words)
    sides = {"governor": ["--memory-limit", args.generous], "no-governor": ["--no-governor"]}
    srv = {k: Server(args, v, os.path.join(args.out_dir, f"seed-overhead-{k}.log")) for k, v in sides.items()}
    tps = {k: [] for k in sides}
    rc = 0
    try:
        for i in range(-1, args.overhead):  # -1: the warm-up round, not counted
            order = list(sides) if i % 2 == 0 else list(sides)[::-1]
            for k in order:
                st, msg = post(srv[k].base, "/v1/messages", data, args.timeout)
                ttft = last_ttft(srv[k].log_path)
                if st != 200 or not ttft:
                    print(f"seed245k FAIL overhead round {i} {k}: HTTP {st} {str(msg)[:200]}")
                    return 1
                n = msg["usage"]["input_tokens"]
                if i >= 0:
                    tps[k].append(n / ttft)
                print(f"overhead round={i}{' (warm-up)' if i < 0 else ''} side={k} tokens={n} "
                      f"ttft_s={ttft:.2f} prefill_tokens_per_s={n / ttft:.1f} "
                      f"load=\"{open('/proc/loadavg').read().split()[0]}\"", flush=True)
    finally:
        for v in srv.values():
            rc |= v.stop() != 0
    on, off = statistics.median(tps["governor"]), statistics.median(tps["no-governor"])
    pairs = statistics.median(a / b for a, b in zip(tps["governor"], tps["no-governor"]))
    print(f"overhead: {args.words}-word seed message over HTTP, {args.overhead} rounds alternating; "
          f"prefill median governor (--memory-limit {args.generous}) {on:.1f} tokens/s "
          f"[{min(tps['governor']):.0f}-{max(tps['governor']):.0f}], no governor {off:.1f} "
          f"[{min(tps['no-governor']):.0f}-{max(tps['no-governor']):.0f}]; ratio of medians "
          f"{on / off:.4f}, median of per-round ratios {pairs:.4f} (target >= 0.99)")
    return rc


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--headroom", default="build/headroom")
    ap.add_argument("--model", required=True)
    ap.add_argument("--words", type=int, default=SEED_WORDS, help='"x " repeats (the seed: 245243)')
    ap.add_argument("--batch-tokens", type=int, default=2048)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--kv-bytes-per-token", type=int, default=0,
                    help="the model's KV bytes per token, for the automatic limit")
    ap.add_argument("--memory-limit-mib", type=int, default=0, help="the governed run's limit (default: picked)")
    ap.add_argument("--timeout", type=float, default=7200)
    ap.add_argument("--out-dir", default="build/bench")
    ap.add_argument("--replay", action="store_true")
    ap.add_argument("--overhead", type=int, default=0, metavar="R")
    ap.add_argument("--generous", default="8G", help="the overhead run's ceiling")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    rc = 0
    if args.replay:
        rc |= replay(args)
    if args.overhead:
        rc |= overhead(args)
    return rc


if __name__ == "__main__":
    sys.exit(main())
