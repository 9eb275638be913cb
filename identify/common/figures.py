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
* :func:`legend_above` -- one legend for the whole figure, in the margin above the panels (a
  legend inside a panel hides data); :data:`PALETTE` -- line colours that stay apart for colour-
  blind readers (Okabe & Ito); :func:`caption` -- what a report plot shows and what to look for.
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
#: width of every report figure [in]: DPI * WIDTH_IN = 920 px, shown at >= 900 px in the report
WIDTH_IN = 11.5
#: line colours of plots with many curves (Okabe & Ito 2008, colour-blind safe; yellow left out:
#: unreadable on white), every pair at least 20 CIEDE2000 units apart
PALETTE = ("#000000", "#E69F00", "#56B4E9", "#009E73", "#0072B2", "#D55E00", "#CC79A7",
           "#999999")


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


def legend_above(fig, handles, labels, top: float, ncol: int | None = None, fontsize: float = 7):
    """One legend for the whole figure, centred with its top at figure fraction `top` (put it in
    the margin between the title and the panels: it never hides data). Returns the legend."""
    ncol = ncol or len(labels)
    return fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, top), ncol=ncol,
                      fontsize=fontsize, frameon=False, handlelength=2.6, columnspacing=1.4)


#: (file-stem pattern, caption) of the report's plots, first match wins; ``{label}`` is the
#: trajectory named in the stem. Each says what the plot shows and what to look for.
CAPTIONS = (
    ("trajectory_{label}_clearance",
     "Smallest distance between link pairs (and obstacles) over the {label} trajectory, from "
     "PyBullet on the URDF's collision shapes, with the closest pairs that move. Look for: every "
     "curve above the red margin line. Distances beyond margin + 0.1 m are not measured (grey "
     "band): a pair that is not drawn is farther than that."),
    ("trajectory_{label}",
     "The {label} trajectory per joint: position, velocity and acceleration over one period, "
     "with the limits the optimizer was given (dashed). Look for: curves inside the dashed lines "
     "and large motion on every joint (a joint that barely moves leaves its parameters poorly "
     "excited)."),
    ("torque_decomposition_{label}",
     "Parts of the improved model's predicted motor torque per joint on the {label} trajectory "
     "(rigid body: gravity, inertial, Coriolis; link, reducer and motor friction; rotor inertia; "
     "compliance). Look for: which parts matter on which joint; a part that is large but noisy "
     "or jumps is worth a look at its stage-2 coefficient."),
    ("torque_{label}",
     "Measured (black) against predicted torque per joint on the {label} trajectory, every "
     "model; each panel's title gives the models' RMS on that joint. Look for: the improved "
     "model on the measured line, also at velocity reversals (steps) where the simplified model "
     "overshoots."),
    ("residual_{label}",
     "Prediction minus measurement per joint on the {label} trajectory, and the distribution of "
     "all residuals. Look for: residuals centred on 0 without structure; spikes at velocity "
     "reversals are stick-slip no constant-parameter model follows; a slow drift or a shape that "
     "repeats with the motion is a missing model term."),
    ("param_stage1",
     "Stage 1 (joint-torque sensor): every base parameter in units of its standard deviation, "
     "with +-3 sigma bars -- on the twin its error against the truth, (estimate - truth) / "
     "sigma; without a truth estimate / sigma. Look for, on the twin: all points inside the "
     "green +-3 sigma band (the title counts them; a point outside means a biased estimate or a "
     "std that is too small); without a truth: points inside the band are not distinguishable "
     "from 0."),
    ("param_stage2",
     "Stage 2 (drive): per joint the reducer-friction coefficient(s), motor Coulomb and viscous "
     "friction, rotor inertia and compliance term, each +-3 sigma, with the twin's truth (x) "
     "where it applies. Look for: truth inside the bars; red: a negative value of a coefficient "
     "that cannot be negative; grey open circle: xi fixed at 0 (not identifiable from these "
     "data)."),
    ("param_simplified",
     "Simplified model: every parameter in units of its standard deviation (estimate / sigma). "
     "Look for: points outside the green band are distinguishable from 0; inside it the data "
     "do not fix even the sign."),
    ("closed_loop_tracking",
     "Tracking error per joint with PID only, with the identified model's torque feed-forward "
     "and with the true model's. Look for: the identified case on top of the true one, both far "
     "below PID only."),
    ("collision",
     "Momentum-observer residual per joint around the contact (grey), with its thresholds "
     "(dashed). Look for: the identified model's residual crossing the threshold inside the "
     "grey span and nowhere else."),
)


def caption(stem: str) -> str:
    """The report caption of a plot file stem (see :data:`CAPTIONS`); pages ``..._p2`` get their
    first page's caption; an unknown stem is returned with its underscores as spaces."""
    import re
    base = re.sub(r"_p\d+$", "", stem)
    for pattern, text in CAPTIONS:
        rx = "^" + re.escape(pattern).replace(re.escape("{label}"), r"(?P<label>\w+?)") + "$"
        m = re.match(rx, base)
        if m:
            return text.format(**m.groupdict())
    return stem.replace("_", " ")
