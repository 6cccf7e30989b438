"""sandq's session driver for Python: an IPython-like loop over cells.

Protocol (see package langs/session, doc.go): commands "<nonce> <nbytes>\\n"
+ code on fd 3, one JSON reply line per cell on fd 4, and the cell-end
marker on fd 1 and fd 2 before each reply. SIGINT interrupts a running cell
(KeyboardInterrupt) and is ignored between cells. SIGURG does nothing: the
agent repeats it after a SIGINT until the cell answers, to wake a blocking
call the SIGINT landed just before (CPython then runs the pending handler).

Everything the driver needs is bound at start-up; the cell's namespace is a
fresh __main__ module, so the driver's own names stay out of the user's way.
"""
import ast
import builtins
import json
import os
import signal
import sys
import types

_DRIVER_FILE = __file__
_PID = os.getpid()
_CMD_FD = os.dup(3)  # os.dup makes non-inheritable (close-on-exec) copies
_REPLY_FD = os.dup(4)
os.close(3)
os.close(4)

# The cell runs as __main__ (pickle, multiprocessing and `if __name__ ==
# "__main__":` look there); imports resolve from the current directory,
# as in an interactive interpreter, not from the driver's directory.
_main = types.ModuleType("__main__")
_main.__dict__["__builtins__"] = builtins
_ns = _main.__dict__
sys.modules["__main__"] = _main
sys.argv = [""]
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(_DRIVER_FILE)):
    sys.path[0] = ""

_running = False  # a cell's code runs: SIGINT raises KeyboardInterrupt
_results = []  # the running cell's MIME bundles, in order
_shown = set()  # ids of figures already displayed in this cell
_flags = 0  # __future__ flags the cells have turned on
_loop = None  # the event loop for top-level await, made on first use


def _on_sigint(signum, frame):
    if _running:
        raise KeyboardInterrupt
    # idle: a late interrupt of a cell that has already finished


def _on_nudge(signum, frame):
    pass


signal.signal(signal.SIGINT, _on_sigint)
signal.signal(signal.SIGURG, _on_nudge)
_SIGMASK = signal.pthread_sigmask(signal.SIG_BLOCK, [])


def _write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[n:]


def _read_exact(n):
    chunks = []
    while n > 0:
        b = os.read(_CMD_FD, min(n, 1 << 20))
        if not b:
            return None
        chunks.append(b)
        n -= len(b)
    return b"".join(chunks)


def _read_command():
    """Returns (nonce, code) or None at end of input."""
    header = bytearray()
    while True:
        b = os.read(_CMD_FD, 1)  # byte by byte: never read past the header
        if not b:
            return None
        if b == b"\n":
            break
        header += b
        if len(header) > 64:
            raise ValueError("command header too long")
    nonce, size = header.decode("ascii").split(" ")
    code = _read_exact(int(size))
    if code is None:
        return None
    return nonce, code.decode("utf-8", "replace")


# --- display ------------------------------------------------------------------

_REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
    ("_repr_javascript_", "application/javascript"),
)
_BINARY = ("image/png", "image/jpeg")


def _warn(what, exc):
    try:
        sys.stderr.write("sandq: %s failed: %s: %s\n" % (what, type(exc).__name__, exc))
    except Exception:
        pass


def _mime_value(mime, data):
    """The string form of one MIME type's data, or None."""
    if data is None:
        return None
    if isinstance(data, tuple) and len(data) == 2:  # (data, metadata)
        data = data[0]
    if mime in _BINARY or (isinstance(data, (bytes, bytearray)) and not mime.startswith("text/")):
        import base64

        if isinstance(data, str):
            return data  # already base64, as IPython accepts
        return base64.b64encode(bytes(data)).decode("ascii")
    if isinstance(data, (bytes, bytearray)):
        return bytes(data).decode("utf-8", "replace")
    if mime == "application/json" or mime.endswith("+json"):
        return data if isinstance(data, str) else json.dumps(data, default=repr)
    return data if isinstance(data, str) else str(data)


def _figure_png(fig):
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def _is_figure(obj):
    mod = sys.modules.get("matplotlib.figure")
    return mod is not None and isinstance(obj, mod.Figure)


def _is_plotly(obj):
    mod = sys.modules.get("plotly.basedatatypes")
    return mod is not None and isinstance(obj, mod.BaseFigure)


def _plotly_html(fig):
    return fig.to_html(include_plotlyjs=True, full_html=True)


def _bundle(obj):
    """The MIME bundle of obj: text/plain always, richer types when the
    object provides them."""
    bundle = {}
    if isinstance(obj, type):  # a class: its _repr_*_ are unbound functions
        return {"text/plain": repr(obj)}
    if _is_figure(obj):
        _shown.add(id(obj))
        import base64

        bundle["image/png"] = base64.b64encode(_figure_png(obj)).decode("ascii")
    elif _is_plotly(obj):
        bundle["text/html"] = _plotly_html(obj)
    else:
        method = getattr(obj, "_repr_mimebundle_", None)
        if callable(method):
            try:
                data = method(include=None, exclude=None)
                if isinstance(data, tuple):
                    data = data[0]
                for mime, value in (data or {}).items():
                    value = _mime_value(mime, value)
                    if value is not None:
                        bundle[mime] = value
            except Exception as e:
                _warn("_repr_mimebundle_", e)
        for name, mime in _REPR_METHODS:
            if mime in bundle:
                continue
            method = getattr(obj, name, None)
            if not callable(method):
                continue
            try:
                value = _mime_value(mime, method())
            except Exception as e:
                _warn(name, e)
                continue
            if value is not None:
                bundle[mime] = value
    if "text/plain" not in bundle:
        bundle["text/plain"] = repr(obj)
    return bundle


def display(*objs, raw=False, **kwargs):
    """Shows each object as a result of the cell (IPython's display)."""
    for obj in objs:
        if raw and isinstance(obj, dict):
            _results.append({k: v for k, v in ((m, _mime_value(m, d)) for m, d in obj.items()) if v is not None})
        else:
            _results.append(_bundle(obj))


builtins.display = display


# --- plots: patched when the cell first imports pyplot or plotly.io -----------


def _emit_figures(skip_shown):
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    import base64

    for num in list(plt.get_fignums()):
        fig = plt.figure(num)
        if skip_shown and id(fig) in _shown:
            continue
        try:
            data = _figure_png(fig)
        except Exception as e:
            _warn("drawing figure %s" % num, e)
            continue
        _results.append({"image/png": base64.b64encode(data).decode("ascii"), "text/plain": repr(fig)})
    plt.close("all")


def _patch_pyplot(plt):
    def show(*args, **kwargs):
        """Adds every open figure to the cell's results and closes it."""
        _emit_figures(False)

    plt.show = show


def _patch_plotly_io(pio):
    def show(fig, *args, **kwargs):
        """Adds the figure to the cell's results as self-contained HTML."""
        if not hasattr(fig, "to_html"):
            import plotly.graph_objects as go

            fig = go.Figure(fig)
        _results.append({"text/html": _plotly_html(fig), "text/plain": repr(fig)})

    pio.show = show


class _PatchLoader:
    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as e:
            _warn("patching " + module.__name__, e)

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _PlotFinder:
    """Patches matplotlib.pyplot and plotly.io as they are imported; costs
    one dict lookup per import until then, and nothing after."""

    def __init__(self):
        self.patches = {"matplotlib.pyplot": _patch_pyplot, "plotly.io": _patch_plotly_io}

    def find_spec(self, name, path=None, target=None):
        patch = self.patches.get(name)
        if patch is None:
            return None
        del self.patches[name]
        if not self.patches:
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
        for finder in list(sys.meta_path):
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchLoader(spec.loader, patch)
                return spec
        return None


sys.meta_path.insert(0, _PlotFinder())


# --- running a cell -----------------------------------------------------------


def _compile(source, filename):
    """Parses the cell into (body code, last expression code or None)."""
    global _flags
    flags = _flags | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    tree = compile(source, filename, "exec", flags | ast.PyCF_ONLY_AST, dont_inherit=True)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not _ends_with_semicolon(source):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, filename, "exec", flags, dont_inherit=True)
    import __future__

    for name in __future__.all_feature_names:
        feature = getattr(__future__, name)
        if body.co_flags & feature.compiler_flag:
            _flags |= feature.compiler_flag
    if last is not None:
        last = compile(last, filename, "eval", flags, dont_inherit=True)
    return body, last


def _ends_with_semicolon(source):
    """A cell ending in ';' displays nothing (as in IPython)."""
    stripped = source.rstrip()
    if ";" not in stripped.rsplit("\n", 1)[-1]:
        return False
    import io
    import tokenize

    try:
        tokens = [t for t in tokenize.generate_tokens(io.StringIO(source).readline)
                  if t.type not in (tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT,
                                    tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT)]
    except (tokenize.TokenError, SyntaxError):
        return False
    return bool(tokens) and tokens[-1].string == ";"


def _run(code):
    """Runs a code object in the namespace, awaiting it if it is a coroutine."""
    value = eval(code, _ns)
    if code.co_flags & 0x80:  # inspect.CO_COROUTINE: top-level await
        global _loop
        if _loop is None:
            import asyncio

            _loop = asyncio.new_event_loop()
        value = _loop.run_until_complete(value)
    return value


def _error(exc):
    import traceback

    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == _DRIVER_FILE:
        tb = tb.tb_next
    sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
    try:
        value = str(exc)
    except BaseException:
        value = "<exception str() failed>"
    try:
        lines = "".join(traceback.format_exception(type(exc), exc, tb)).splitlines()
    except BaseException:
        lines = ["%s: %s" % (type(exc).__name__, value)]
    return {"name": type(exc).__name__, "value": value, "traceback": lines}


def _flush_streams():
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except Exception:
            pass


def _cell(count, source):
    """Runs one cell; returns its reply (without nonce)."""
    global _running
    filename = "<cell %d>" % count
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    del _results[:]
    _shown.clear()
    error = None
    try:
        try:
            _running = True
            body, last = _compile(source, filename)
            _run(body)
            if last is not None:
                value = _run(last)
                if value is not None:
                    _results.append(_bundle(value))
            _emit_figures(True)
        finally:
            _running = False
    except BaseException as e:  # SystemExit and KeyboardInterrupt too, as in IPython
        _running = False
        error = _error(e)
        try:
            _emit_figures(True)
        except BaseException:
            pass
    reply = {"status": "ok" if error is None else "error", "execution_count": count}
    if _results:
        reply["results"] = list(_results)
    if error is not None:
        reply["error"] = error
    del _results[:]
    return reply


def main():
    _write_all(_REPLY_FD, b'{"ready":true}\n')
    count = 0
    while True:
        cmd = _read_command()
        if cmd is None:
            break
        nonce, source = cmd
        count += 1
        reply = _cell(count, source)
        if os.getpid() != _PID:  # a child the cell forked, back here
            os._exit(0)
        # The cell (or a library) may have replaced the handlers or
        # blocked signals: between cells and in the next cells SIGINT must
        # stay ours. A SIGINT the mask held is handled (ignored) here.
        if signal.getsignal(signal.SIGINT) is not _on_sigint:
            signal.signal(signal.SIGINT, _on_sigint)
        if signal.getsignal(signal.SIGURG) is not _on_nudge:
            signal.signal(signal.SIGURG, _on_nudge)
        signal.pthread_sigmask(signal.SIG_SETMASK, _SIGMASK)
        _flush_streams()
        marker = b"\x1esandq-cell-end:" + nonce.encode("ascii") + b"\x1e"
        for fd in (1, 2):
            try:
                _write_all(fd, marker)
            except OSError:
                pass
        reply = dict(nonce=nonce, **reply)
        try:
            line = json.dumps(reply, separators=(",", ":"))
        except Exception as e:  # results that will not encode
            reply.pop("results", None)
            reply["status"] = "error"
            reply["error"] = {"name": type(e).__name__, "value": "reply: %s" % e}
            line = json.dumps(reply, separators=(",", ":"), default=repr)
        _write_all(_REPLY_FD, line.encode("ascii") + b"\n")
    # End of input: run the cells' atexit functions, but never wait for
    # threads they left running.
    _flush_streams()
    try:
        import atexit

        atexit._run_exitfuncs()
    except BaseException:
        pass
    _flush_streams()
    os._exit(0)


main()
