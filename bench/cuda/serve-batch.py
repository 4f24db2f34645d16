#!/usr/bin/env python3
"""serve-batch.py - batched decode through `headroom serve`: N streams at
once, each a short prompt and 128 generated tokens (non-streaming
completions, ignore_eos), for N in STREAMS (default 1 8 32). Prints one
line per N: the streams' tokens / wall seconds from the first request to
the last answer, and the ratio to N = 1; and from /metrics the engine
thread's seconds in steps and in scheduling them (admission, chunk
sizing, plans, the governor: schedule_pct is their cost against the
steps'), then that time by phase in milliseconds (admit, fit, prepare,
bracket, device, account: /metrics' schedule_phase counters); last, the
server's host memory (VmRSS, VmHWM). Needs nothing but python3.

    bench/cuda/serve-batch.py HEADROOM MODEL [STREAMS...]

HR_SERVE_ARGS adds arguments to `serve` (e.g. --no-governor: the governor
and planner's cost, in alternating runs against the default).
"""
import http.client, json, os, signal, subprocess, sys, threading, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../tests/cuda"))
from serve_checks import free_port  # noqa: E402

headroom, model = sys.argv[1], sys.argv[2]
streams = [int(a) for a in sys.argv[3:]] or [1, 8, 32]
N_GEN = 128


port = free_port()
log = os.environ.get("OUT", "/tmp") + "/serve-batch.log"
proc = subprocess.Popen([headroom, "serve", "--model", model, "--port", str(port),
                         "--parallel", str(max(streams)), "--ctx", "1024"] +
                        os.environ.get("HR_SERVE_ARGS", "").split(),
                        stdout=open(log, "w"), stderr=subprocess.STDOUT)


def post(i, out):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions",
              json.dumps({"model": "m", "prompt": "Stream %d: the story begins" % i,
                          "max_tokens": N_GEN, "temperature": 0, "ignore_eos": True}),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    j = json.loads(r.read())
    out[i] = j.get("usage", {}).get("completion_tokens", 0) if r.status == 200 else 0


def engine_seconds():
    """The engine thread's seconds in steps and in scheduling them (admission,
    chunk sizing, plans, the governor's accounts): /metrics' counters."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", "/metrics")
    v = {}
    for line in c.getresponse().read().decode().splitlines():
        if line.startswith("headroom_engine_s"):
            k, x = line.split()
            v[k] = float(x)
    phases = {k.split('"')[1]: x for k, x in v.items() if "{phase=" in k}
    return (v.get("headroom_engine_step_seconds_total", 0.0),
            v.get("headroom_engine_schedule_seconds_total", 0.0), phases)


try:
    t0 = time.time()
    while True:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.time() - t0 > 300:
            sys.exit("serve-batch: the server did not start; see " + log)
        time.sleep(0.5)
    post(0, [0])  # warm-up: the first request's one-time costs
    base = None
    for n in streams:
        m0 = engine_seconds()
        out = [0] * n
        th = [threading.Thread(target=post, args=(i, out)) for i in range(n)]
        t = time.time()
        for x in th:
            x.start()
        for x in th:
            x.join()
        dt = time.time() - t
        tps = sum(out) / dt
        base = base or tps
        m1 = engine_seconds()
        step, sched = m1[0] - m0[0], m1[1] - m0[1]
        print("serve-batch streams=%d tokens=%d seconds=%.2f tok_s=%.1f vs_1=%.2f "
              "step_s=%.3f schedule_s=%.4f schedule_pct=%.2f"
              % (n, sum(out), dt, tps, tps / base, step, sched,
                 100 * sched / step if step > 0 else 0), flush=True)
        print("serve-batch streams=%d schedule_ms %s" % (n, " ".join(
            "%s=%.2f" % (k, 1e3 * (x - m0[2].get(k, 0.0))) for k, x in m1[2].items())),
            flush=True)
    st = {}
    with open("/proc/%d/status" % proc.pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            st[k] = v.strip()
    print("serve-batch host_memory VmRSS=%s VmHWM=%s" % (st.get("VmRSS"), st.get("VmHWM")),
          flush=True)
finally:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
