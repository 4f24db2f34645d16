#!/usr/bin/env python3
"""squeeze-serve.py - the external squeeze on the GPU (issue 17): 4 streams
run through `headroom serve --device cuda` while another process
(tests/cuda/vram-hog) takes the device's free memory and keeps taking what
frees up for a few seconds. The KV pool cannot grow into memory the other
process holds, so the scheduler preempts (parking KV in host RAM) and the
last stream waits; free pool memory goes back to the device; when the hog
lets go, every stream resumes and completes with exactly the text it
produces alone. Nothing is aborted for memory, the server stays healthy.

Determinism: each prompt is 2 token ids and the server runs 4 streams, so
no step has more than 8 rows and every matmul is the GEMV kernel whose
result for a row does not depend on the others (cuda-engine.h, batch
invariance); a parked stream resumes from its copied KV, bit for bit.

No prefix cache: it would keep the alone runs' KV blocks mapped, and the
streams would grow into those (evicting them) instead of into new device
memory, so the squeeze would not reach them.

The server is stopped (SIGSTOP) while the hog takes the memory, so the
machine's speed does not decide whether the squeeze lands mid-stream.

  squeeze-serve.py HEADROOM VRAM_HOG MODEL
Prints one line per check; exits 1 when one failed.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time

import serve_checks
from serve_checks import check, free_port

headroom, vram_hog, model = sys.argv[1], sys.argv[2], sys.argv[3]
N_GEN, HOLD_S, LEAVE_MIB = 640, 3, 8

port = free_port()
log_path = os.environ.get("HR_SQUEEZE_LOG", "/tmp/hr-squeeze-serve.log")
log = open(log_path, "w")
srv = subprocess.Popen([headroom, "serve", "--model", model,
                        "--device", "cuda", "--port", str(port), "--parallel", "4",
                        "--ctx", "2048", "--no-prefix-cache"],
                       stdout=log, stderr=subprocess.STDOUT)


def get(path):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("GET", path)
    r = c.getresponse()
    return r.status, r.read().decode()


def metric(text, name):
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return float("nan")


def body(prompt, stream):
    return json.dumps({"model": "m", "prompt": prompt, "max_tokens": N_GEN, "temperature": 0,
                       "ignore_eos": True, "stream": stream})


def complete(prompt):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    c.request("POST", "/v1/completions", body(prompt, False),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    j = json.loads(r.read())
    return r.status, j["choices"][0]["text"], j["choices"][0]["finish_reason"]


class Stream(threading.Thread):
    def __init__(self, prompt):
        super().__init__()
        self.prompt, self.text, self.status, self.finish = prompt, "", 0, None
        self.chunks, self.started, self.error = 0, threading.Event(), None

    def run(self):
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            c.request("POST", "/v1/completions", body(self.prompt, True),
                      {"Content-Type": "application/json"})
            r = c.getresponse()
            self.status = r.status
            while True:
                line = r.readline()
                if not line:
                    break
                line = line.decode().strip()
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                j = json.loads(line[6:])
                if "error" in j:
                    self.error = j["error"]
                    continue
                ch = j["choices"][0]
                self.text += ch.get("text", "")
                self.chunks += 1
                if ch.get("finish_reason"):
                    self.finish = ch["finish_reason"]
                if self.chunks >= 48:
                    self.started.set()
        except Exception as e:  # reported as a failed check below
            self.error = str(e)
        self.started.set()


try:
    t0 = time.time()
    while True:
        try:
            if get("/health")[0] == 200:
                break
        except OSError:
            pass
        if srv.poll() is not None or time.time() - t0 > 120:
            print("  FAIL  the server did not start; its log:\n" + open(log_path).read())
            sys.exit(1)
        time.sleep(0.2)
    prompts = [[11 + i, 101 + 7 * i] for i in range(4)]
    alone = []
    for p in prompts:
        st, text, fin = complete(p)
        alone.append(text)
        check(st == 200 and fin == "length", f"alone: prompt {p} gives {N_GEN} tokens ({st}, {fin})")

    hog = subprocess.Popen([vram_hog, str(LEAVE_MIB), str(HOLD_S)],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    check(hog.stdout.readline().strip() == "ready", "the hog has its CUDA context")
    _, m0 = get("/metrics")
    streams = [Stream(p) for p in prompts]
    for s in streams:
        s.start()
    for s in streams:
        s.started.wait(60)
    # All 4 run and hold KV: stop the server, take the device, go on.
    os.kill(srv.pid, signal.SIGSTOP)
    hog.stdin.write("go\n")
    hog.stdin.flush()
    took = hog.stdout.readline().strip()
    os.kill(srv.pid, signal.SIGCONT)
    print(f"  info  hog: {took}; streams had {[s.chunks for s in streams]} chunks at the squeeze",
          flush=True)
    time.sleep(HOLD_S / 2)
    _, m_mid = get("/metrics")
    held = hog.stdout.readline().strip()
    hog.wait(60)
    print(f"  info  hog: {held}", flush=True)
    for s in streams:
        s.join(120)
    _, m1 = get("/metrics")
    for i, s in enumerate(streams):
        check(s.status == 200 and s.finish == "length" and s.error is None,
              f"stream {i}: completed ({s.status}, {s.finish}, {len(s.text)} chars"
              f"{', error ' + str(s.error) if s.error else ''})")
        check(s.text == alone[i], f"stream {i}: the same text as alone")
    d = lambda name: metric(m1, name) - metric(m0, name)
    pre, parked = d("headroom_requests_preempted_total"), d("headroom_requests_parked_total")
    given = d("headroom_device_kv_given_back_bytes_total")
    aborted = metric(m1, "headroom_requests_aborted_for_memory_total")
    print(f"  info  preempted {pre:.0f}, parked {parked:.0f}, KV given back "
          f"{given / 1048576:.1f} MiB, KV mapped mid-squeeze "
          f"{metric(m_mid, 'headroom_device_kv_mapped_bytes') / 1048576:.1f} MiB, after "
          f"{metric(m1, 'headroom_device_kv_mapped_bytes') / 1048576:.1f} MiB of "
          f"{metric(m1, 'headroom_device_kv_capacity_bytes') / 1048576:.1f}", flush=True)
    check(pre >= 1 and parked >= 1,
          f"the squeeze preempted streams and parked their KV in host RAM ({pre:.0f}, {parked:.0f})")
    check(aborted == 0, f"nothing aborted for memory ({aborted:.0f})")
    check(metric(m1, "headroom_device_lost") == 0 and get("/health")[0] == 200,
          "the device and the server are healthy after the squeeze")
    waits = open(log_path).read()
    check("out of memory" not in waits, "no out-of-memory in the server's log")
    print("  info  server log lines on the squeeze:", flush=True)
    for line in waits.splitlines():
        if "preempted" in line or "device memory" in line or "gave" in line:
            print("        " + line[:200])
finally:
    try:
        os.kill(srv.pid, signal.SIGCONT)
    except OSError:
        pass
    srv.send_signal(signal.SIGINT)
    try:
        srv.wait(20)
    except subprocess.TimeoutExpired:
        srv.kill()
print(f"squeeze-serve: {serve_checks.passed} passed, {serve_checks.failed} failed", flush=True)
sys.exit(1 if serve_checks.failed else 0)
