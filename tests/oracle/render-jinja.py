#!/usr/bin/python3
"""render-jinja.py - the oracle for headroom's Jinja engine: Python's Jinja2
(Debian python3-jinja2) configured as Hugging Face transformers configures it
in chat_template_utils._compile_jinja_template (transformers itself is not
needed and not imported):

  ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
      extensions=[AssistantTracker, jinja2.ext.loopcontrols])
  filters["tojson"]   = json.dumps(x, ensure_ascii=False, indent=..., ...)
  globals["raise_exception"] raises TemplateError(message)
  globals["strftime_now"]    = datetime.now().strftime(format)

AssistantTracker adds {% generation %}...{% endgeneration %}, which renders
its body (transformers records assistant spans only when asked for masks).

Usage:
  render-jinja.py TEMPLATE CONTEXT.json   print the rendering, no newline added;
                                          on error "ErrorType: message" on stderr, exit 1
  render-jinja.py --batch                 stdin: JSON [{"template": path, "context": {...}}]
                                          stdout: JSON [{"ok": true, "out": s} |
                                                        {"ok": false, "type": t, "error": m}]
"""
import json
import sys
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class AssistantTracker(jinja2.ext.Extension):
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render_assistant", [], lineno=lineno)
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_assistant(self, caller):
        return caller()


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


ENV = make_env()
_cache = {}


def render(template_path, context):
    tmpl = _cache.get(template_path)
    if tmpl is None:
        with open(template_path, encoding="utf-8", newline="") as f:
            tmpl = ENV.from_string(f.read())
        _cache[template_path] = tmpl
    return tmpl.render(**context)


def main():
    if len(sys.argv) == 2 and sys.argv[1] == "--batch":
        jobs = json.load(sys.stdin)
        results = []
        for job in jobs:
            try:
                results.append({"ok": True, "out": render(job["template"], job["context"])})
            except Exception as e:  # every failure is a result, as for the C side
                results.append({"ok": False, "type": type(e).__name__, "error": str(e)})
        sys.stdout.write(json.dumps(results, ensure_ascii=False))
        return 0
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(sys.argv[2], encoding="utf-8") as f:
        context = json.load(f)
    try:
        out = render(sys.argv[1], context)
    except Exception as e:
        sys.stderr.write(f"{type(e).__name__}: {e}\n")
        return 1
    sys.stdout.buffer.write(out.encode("utf-8", "surrogatepass"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
