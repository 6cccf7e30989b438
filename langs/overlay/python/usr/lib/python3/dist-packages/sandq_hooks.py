"""sandq's start-up hooks for Python programs, loaded by zz-sandq.pth.

They cost almost nothing at start: one meta path finder that does nothing
until the program imports matplotlib, matplotlib.pyplot or plotly.io.

- matplotlib: the font cache baked into the image (/etc/sandq/mpl) is
  copied to $MPLCONFIGDIR, a writable tmpfs, so matplotlib neither warns nor
  rebuilds it. Programs that never import matplotlib see an untouched /tmp.
- Plot capture, when $SANDQ_PLOTS_DIR is set (the worker sets it): figures
  shown with plt.show(), saved with savefig(), or still open at exit are
  written there as plot-NNN.png (and .svg when $SANDQ_PLOT_FORMATS has svg);
  plotly's fig.show() writes a self-contained plot-NNN.html. Nothing is
  printed: stdout holds only what the program prints.
"""
import os
import sys

_PLOTS = os.environ.get("SANDQ_PLOTS_DIR", "")
_FORMATS = [f for f in os.environ.get("SANDQ_PLOT_FORMATS", "png").split(",") if f in ("png", "svg")] or ["png"]
_count = [0]


def _next_base():
    os.makedirs(_PLOTS, exist_ok=True)
    _count[0] += 1
    return os.path.join(_PLOTS, "plot-%03d" % _count[0])


def _seed_mpl(src="/etc/sandq/mpl"):
    dst = os.environ.get("MPLCONFIGDIR")
    if not dst or os.path.isdir(dst) or not os.path.isdir(src):
        return
    try:
        os.makedirs(dst, mode=0o700, exist_ok=True)
        for name in os.listdir(src):
            with open(os.path.join(src, name), "rb") as f, open(os.path.join(dst, name), "wb") as g:
                g.write(f.read())
    except OSError:
        pass


def _patch_pyplot(plt):
    import atexit
    from matplotlib.figure import Figure

    saved = set()  # figures written by savefig and not changed by show since
    orig_savefig = Figure.savefig

    def save_open(skip_saved):
        for num in list(plt.get_fignums()):
            fig = plt.figure(num)
            if skip_saved and id(fig) in saved:
                continue
            base = _next_base()
            for fmt in _FORMATS:
                orig_savefig(fig, base + "." + fmt, format=fmt)
        plt.close("all")
        saved.clear()

    def show(*args, **kwargs):
        save_open(False)

    def savefig(self, fname, *args, **kwargs):
        result = orig_savefig(self, fname, *args, **kwargs)
        saved.add(id(self))
        if isinstance(fname, (str, os.PathLike)):
            fmt = kwargs.get("format") or os.path.splitext(os.fspath(fname))[1].lstrip(".").lower() or "png"
            if fmt in ("png", "svg"):
                try:
                    with open(fname, "rb") as f:
                        data = f.read()
                    with open(_next_base() + "." + fmt, "wb") as g:
                        g.write(data)
                except OSError:
                    pass
        return result

    plt.show = show
    Figure.savefig = savefig
    atexit.register(save_open, True)


def _patch_plotly_io(pio):
    def show(fig, *args, **kwargs):
        if not hasattr(fig, "write_html"):
            import plotly.graph_objects as go

            fig = go.Figure(fig)
        fig.write_html(_next_base() + ".html", include_plotlyjs=True, full_html=True)

    pio.show = show


class _PatchLoader:
    """Runs the real loader, then patches the module."""

    def __init__(self, loader, patch):
        self._loader = loader
        self._patch = patch

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            self._patch(module)
        except Exception as e:  # never break the user's program
            sys.stderr.write("sandq: plot capture disabled: %r\n" % (e,))

    def __getattr__(self, name):
        return getattr(self._loader, name)


class _SandqFinder:
    def __init__(self):
        self._patches = {}
        if _PLOTS:
            self._patches = {"matplotlib.pyplot": _patch_pyplot, "plotly.io": _patch_plotly_io}
        self._seeded = False

    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib" and not self._seeded:
            self._seeded = True
            _seed_mpl()
        patch = self._patches.pop(name, None)
        if patch is None:
            if not self._patches and self._seeded:
                self._remove()
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _PatchLoader(spec.loader, patch)
                return spec
        return None

    def _remove(self):
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass


sys.meta_path.insert(0, _SandqFinder())
