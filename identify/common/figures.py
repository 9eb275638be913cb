"""Fast, small figures shared by every plot of the pipeline (matplotlib Agg, imported lazily).

Plots cost more than the identification itself when drawn naively (tens of thousands of points
per line, 18 panels laid out by ``tight_layout``, 110 dpi full-colour PNG). The helpers here keep
the same information at a fraction of the cost:

* :func:`decimate` -- min/max envelope per pixel column: a line of 100 000 samples drawn as
  ``2 * max_points`` points looks the same (every peak survives), draws 50x faster.
* :func:`pages` -- joints split into pages of at most ``per_page`` panels, one figure per page
  (a 12-joint arm gives two readable figures, not one giant one).
* :func:`save` -- Agg canvas at :data:`DPI`, saved as a palette PNG (plots hold few colours; the
  file is 3-4x smaller, so the self-contained HTML report stays small), via a temporary name.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

#: resolution of every saved figure [dots per inch]
DPI = 80
#: points per drawn line after decimation (pairs of min/max per bucket)
MAX_POINTS = 1200
#: panels (joints) per figure page
PER_PAGE = 6


def pyplot():
    """matplotlib.pyplot with the Agg backend (no display, no GUI toolkit)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def decimate(t: np.ndarray, y: np.ndarray, max_points: int = MAX_POINTS
             ) -> tuple[np.ndarray, np.ndarray]:
    """Min/max envelope decimation of lines sharing one time axis.

    Args:
        t: (N,) sample times [s].
        y: (N,) or (N, k) values.
        max_points: the result has at most about this many samples.
    Returns:
        (t_d, y_d): the samples holding each bucket's minimum and maximum (of every column, the
        union of their indices, in time order), first and last sample kept. ``N <= max_points``
        returns the inputs unchanged.
    """
    t = np.asarray(t)
    y = np.asarray(y)
    N = t.shape[0]
    if N <= max_points:
        return t, y
    y2 = y.reshape(N, -1)
    buckets = max(1, max_points // (2 * y2.shape[1]))     # each column adds its min and max
    size = int(np.ceil(N / buckets))
    pad = buckets * size - N
    # pad with the last row so the reshape is exact; padded rows duplicate a real sample
    yp = np.concatenate([y2, np.repeat(y2[-1:], pad, 0)]) if pad else y2
    blocks = yp.reshape(buckets, size, -1)
    base = (np.arange(buckets) * size)[:, None]
    idx = np.concatenate([(base + blocks.argmin(1)).ravel(), (base + blocks.argmax(1)).ravel(),
                          [0, N - 1]])
    idx = np.unique(np.minimum(idx, N - 1))
    return t[idx], y[idx]


def pages(n: int, per_page: int = PER_PAGE) -> list[range]:
    """Panel indices of each page: [range(0, 6), range(6, 12), ...]."""
    return [range(s, min(n, s + per_page)) for s in range(0, max(n, 1), per_page)]


def page_path(path: str | os.PathLike, page: int) -> Path:
    """File of page `page` (0-based): the path itself for the first, ``stem_p2.png`` ... after."""
    path = Path(path)
    return path if page == 0 else path.with_name(f"{path.stem}_p{page + 1}{path.suffix}")


def save(fig, path: str | os.PathLike, dpi: int = DPI) -> Path:
    """Render `fig` with Agg and write it as a palette PNG via a temporary name; close it."""
    from PIL import Image
    plt = pyplot()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial")
    try:
        fig.set_dpi(dpi)
        fig.canvas.draw()
        rgba = np.asarray(fig.canvas.buffer_rgba())
        img = Image.fromarray(rgba[..., :3]).quantize(colors=128, method=Image.Quantize.FASTOCTREE,
                                                      dither=Image.Dither.NONE)
        img.save(tmp, format="PNG", optimize=False, compress_level=6)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if tmp.exists():
            tmp.unlink()
    return path
