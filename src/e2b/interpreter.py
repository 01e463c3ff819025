"""The code interpreter of an E2B context, run inside its sandbox by sandloomd
(e2b/interpreter.c) as `python3 -c <this>`: one process per context, so
variables and imports live from one execution to the next.

Requests come on stdin, one JSON object a line:
    {"id": "...", "code": "...", "env_vars": {...}}
Answers go to the original stdout, one JSON object a line, in the shapes
E2B's code interpreter streams (stdout, stderr, result, error,
number_of_executions), then {"type": "end", "id": ...}, which sandloomd
keeps for itself. What the code (and the programs it starts) writes to
file descriptors 1 and 2 is read back through pipes and sent as stdout and
stderr lines, so nothing a user prints can corrupt the answers.

Standard library only; matplotlib's figures become PNG results when the
code used matplotlib.
"""
import ast
import base64
import io
import json
import os
import sys
import threading
import traceback

_answers = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
_lock = threading.Lock()


# The request being answered: every answer line carries its id, so that
# sandloomd passes on only the lines of the execution it serves (one whose
# client went away may still be printing when the next one comes).
_current = None


def send(obj):
    with _lock:
        obj["id"] = _current
        _answers.write(json.dumps(obj, ensure_ascii=False) + "\n")
        _answers.flush()


_MARK = b"\0sandloom-interpreter-mark\0"


class Pump(threading.Thread):
    """Reads one captured descriptor and sends what it holds; a mark written
    after an execution says everything before it has been sent."""

    def __init__(self, fd, kind):
        super().__init__(daemon=True)
        self.kind = kind
        self.reader, writer = os.pipe()
        os.dup2(writer, fd)
        os.close(writer)
        self.fd = fd
        self.marked = threading.Event()

    def run(self):
        pending = b""
        while True:
            data = os.read(self.reader, 65536)
            if not data:
                return
            pending += data
            while True:
                at = pending.find(_MARK)
                chunk = pending if at < 0 else pending[:at]
                # Hold back a possible start of the mark, and of a UTF-8
                # character cut by the read.
                keep = 0 if at >= 0 else min(len(_MARK) - 1, len(chunk))
                while keep and not _MARK.startswith(chunk[len(chunk) - keep:]):
                    keep -= 1
                out = chunk[: len(chunk) - keep] if at < 0 else chunk
                if out:
                    send({"type": self.kind, "text": out.decode("utf-8", "replace")})
                if at < 0:
                    pending = chunk[len(chunk) - keep:]
                    break
                pending = pending[at + len(_MARK):]
                self.marked.set()

    def drain(self):
        self.marked.clear()
        os.write(self.fd, _MARK)
        self.marked.wait(5)


pumps = [Pump(1, "stdout"), Pump(2, "stderr")]
for p in pumps:
    p.start()
# Line-buffered, as in a notebook: print("a") arrives as one "a\n".
sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb"), encoding="utf-8", line_buffering=True)
sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb"), encoding="utf-8", line_buffering=True)
os.environ.setdefault("MPLBACKEND", "Agg")

namespace = {"__name__": "__main__", "__builtins__": __builtins__}
executions = 0

# What a value offers beyond its repr, as Jupyter's display formatter asks.
_FORMATS = (("_repr_html_", "html"), ("_repr_markdown_", "markdown"), ("_repr_svg_", "svg"),
            ("_repr_png_", "png"), ("_repr_jpeg_", "jpeg"), ("_repr_latex_", "latex"),
            ("_repr_json_", "json"), ("_repr_javascript_", "javascript"))


def result_of(value, main):
    out = {"type": "result", "text": repr(value), "is_main_result": main}
    for method, key in _FORMATS:
        f = getattr(value, method, None)
        if not callable(f):
            continue
        try:
            v = f()
        except Exception:
            continue
        if v is None:
            continue
        if isinstance(v, bytes):
            v = base64.b64encode(v).decode()
        out[key] = v
    return out


def figures():
    """Open matplotlib figures as PNG results, then closed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    for number in plt.get_fignums():
        fig = plt.figure(number)
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        send({"type": "result", "png": base64.b64encode(buf.getvalue()).decode(),
              "text": repr(fig), "is_main_result": False})
    plt.close("all")


def run(code):
    tree = ast.parse(code, "<cell>", "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    exec(compile(tree, "<cell>", "exec"), namespace)
    value = eval(compile(last, "<cell>", "eval"), namespace) if last else None
    return value


def error_of(exc):
    tb = exc.__traceback__
    # Our own frames are not the user's: the traceback starts at <cell>.
    while tb is not None and tb.tb_frame.f_code.co_filename != "<cell>":
        tb = tb.tb_next
    lines = traceback.format_exception(type(exc), exc, tb)
    if isinstance(exc, SyntaxError):
        lines = traceback.format_exception_only(type(exc), exc)
    return {"type": "error", "name": type(exc).__name__, "value": str(exc),
            "traceback": "".join(lines)}


def execute(request):
    global executions
    executions += 1
    send({"type": "number_of_executions", "execution_count": executions})
    saved = {}
    for k, v in (request.get("env_vars") or {}).items():
        saved[k] = os.environ.get(k)
        os.environ[k] = str(v)
    try:
        value = run(request.get("code", ""))
        sys.stdout.flush()
        sys.stderr.flush()
        figures()
        if value is not None:
            send(result_of(value, True))
    except BaseException as exc:  # the user's code may raise anything, SystemExit too
        sys.stdout.flush()
        sys.stderr.flush()
        send(error_of(exc))
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        for p in pumps:
            p.drain()


def main():
    global _current
    requests = io.TextIOWrapper(os.fdopen(os.dup(0), "rb", buffering=0), encoding="utf-8")
    # The code's own stdin is empty: input() raises EOFError rather than
    # read the next request (E2B's interpreter has no input either).
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdin = io.TextIOWrapper(os.fdopen(0, "rb"), encoding="utf-8")
    for line in requests:
        try:
            request = json.loads(line)
        except ValueError:
            continue
        _current = request.get("id")
        try:
            execute(request)
        finally:
            send({"type": "end"})


main()
