"""sandq's start-up hooks for Python programs, loaded by zz-sandq.pth.

They cost almost nothing at start: one meta path finder that does nothing
until the program imports matplotlib. Then it copies the font cache baked
into the image (/etc/sandq/mpl) to $MPLCONFIGDIR, a writable tmpfs, so
matplotlib neither warns nor rebuilds its cache. Programs that never import
matplotlib see an untouched /tmp.
"""
import os
import sys


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


class _SandqFinder:
    """Acts on the first import of matplotlib, then removes itself."""

    def find_spec(self, name, path=None, target=None):
        if name == "matplotlib":
            try:
                sys.meta_path.remove(self)
            except ValueError:
                pass
            _seed_mpl()
        return None  # the regular finders import the module


sys.meta_path.insert(0, _SandqFinder())
