"""serve_checks.py - what the GPU tests that drive `headroom serve`
(squeeze-serve.py, hybrid-serve.py) share: check lines and their counts,
and a free local port."""
import socket

passed = failed = 0


def check(cond, what):
    """Prints one check line ("  ok    ..." or "  FAIL  ...") and counts it."""
    global passed, failed
    if cond:
        passed += 1
    else:
        failed += 1
    print(("  ok    " if cond else "  FAIL  ") + what, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p
