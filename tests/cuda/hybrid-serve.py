#!/usr/bin/env python3
"""hybrid-serve.py - a hybrid model (Gated DeltaNet layers) through
`headroom serve --device cuda` with its prefix cache: the recurrent state
lives in device slots, and the cache's snapshots of it are copied to host
RAM and back (hr_backend_state_copy).

Turn 1 sends a 100-token prompt: nothing is cached, snapshots of the state
are saved at the prompt's last block boundaries. Turn 2 sends that prompt
plus 40 more tokens: it must start from a restored snapshot
(headroom_prefix_cache_snapshots_restored_total grows, cached tokens are
reported) and produce exactly the text a server without the cache produces
for the same prompt. Both servers run on the GPU; each prompt runs alone,
so every step is the same on both.

  hybrid-serve.py HEADROOM MODEL       (HR_DEVICE=cpu: the CPU engine instead)
Prints one line per check; exits 1 when one failed.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import time

import serve_checks
from serve_checks import check, free_port

headroom, model = sys.argv[1], sys.argv[2]
device = os.environ.get("HR_DEVICE", "cuda")  # "cpu": the same checks on the CPU engine
N_GEN = 24


class Server:
    def __init__(self, extra, log_path):
        self.port = free_port()
        self.log_path = log_path
        self.proc = subprocess.Popen([headroom, "serve", "--model", model, "--device", device,
                                      "--port", str(self.port), "--parallel", "2",
                                      "--ctx", "1024"] + extra,
                                     stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
        t0 = time.time()
        while True:
            try:
                if self.get("/health")[0] == 200:
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.time() - t0 > 120:
                raise RuntimeError("the server did not start; its log:\n" + open(log_path).read())
            time.sleep(0.2)

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read().decode()

    def metric(self, name):
        for line in self.get("/metrics")[1].splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                return float(line.rsplit(" ", 1)[1])
        return float("nan")

    def complete(self, prompt):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        c.request("POST", "/v1/completions",
                  json.dumps({"model": "m", "prompt": prompt, "max_tokens": N_GEN,
                              "temperature": 0, "ignore_eos": True}),
                  {"Content-Type": "application/json"})
        r = c.getresponse()
        j = json.loads(r.read())
        if r.status != 200:
            return r.status, "", None, {}
        return r.status, j["choices"][0]["text"], j["choices"][0]["finish_reason"], j.get("usage", {})

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


warm = cold = None
try:
    warm = Server([], "/tmp/hr-hybrid-warm.log")
    cold = Server(["--no-prefix-cache"], "/tmp/hr-hybrid-cold.log")
    log = open("/tmp/hr-hybrid-warm.log").read()
    if device == "cuda":
        check("recurrent state" in log and "cuda:0" in log,
              "the server runs the hybrid model on cuda:0 and logs its recurrent state bytes")
    p1 = [(i * 37 + 11) % 250 for i in range(100)]
    p2 = p1 + [(i * 13 + 5) % 250 for i in range(40)]
    st, text1, fin, _ = warm.complete(p1)
    check(st == 200 and fin == "length", f"turn 1: {N_GEN} tokens ({st}, {fin})")
    snaps = warm.metric("headroom_prefix_cache_snapshots")
    check(snaps >= 1, f"turn 1: state snapshots saved from the device ({snaps:.0f})")
    r0 = warm.metric("headroom_prefix_cache_snapshots_restored_total")
    st, text2, fin, usage = warm.complete(p2)
    r1 = warm.metric("headroom_prefix_cache_snapshots_restored_total")
    cached = (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
    check(st == 200 and r1 - r0 >= 1 and cached >= 64,
          f"turn 2: started from a restored snapshot ({r1 - r0:.0f} restored, {cached} tokens "
          "cached)")
    st, cold2, fin, _ = cold.complete(p2)
    check(st == 200 and text2 == cold2,
          "turn 2: the same text as a server without the prefix cache")
    st, cold1, fin, _ = cold.complete(p1)
    check(st == 200 and text1 == cold1, "turn 1: the same text on both servers")
    check(warm.metric("headroom_device_lost") == 0 and warm.get("/health")[0] == 200,
          "the device and the server are healthy")
except Exception as e:  # reported as a failed check
    check(False, f"hybrid-serve: {e}")
finally:
    for s in (warm, cold):
        if s:
            s.stop()
print(f"hybrid-serve: {serve_checks.passed} passed, {serve_checks.failed} failed", flush=True)
sys.exit(1 if serve_checks.failed else 0)
