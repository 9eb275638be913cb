"""Paper Fig. 8 style plots of a joint trajectory with its limits (PNG, matplotlib Agg backend).

    from identify.excitation.plots import plot_trajectory
    plot_trajectory(traj, limits, "excitation.png")

One row per joint, columns position [deg], velocity [deg/s], acceleration [deg/s^2] (degrees only
here, at the edge), time [s] on every column's bottom panel. Both limits of every panel are drawn
as dashed lines and labelled with their value (position: q_min and q_max; velocity and
acceleration: -max and +max); the axis always spans both limits. Joints are paged (at most six
rows per figure, further pages ``<stem>_p2.png`` ...).
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from identify.common import figures


def _limit_lines(ax, data: np.ndarray, lo, hi, name_lo: str, name_hi: str) -> None:
    """Dashed lines at both limits, each labelled with its name and value outside the band the
    motion stays in (the upper label above its line, the lower below), so neither the line nor
    the data cross a label; the y axis spans the data, both limits and their labels."""
    from matplotlib.transforms import offset_copy
    ys = [data.min(), data.max()]
    for y, nm, va, dy in ((lo, name_lo, "top", -1.5), (hi, name_hi, "bottom", 1.5)):
        if y is None or not np.isfinite(y):
            continue
        ax.axhline(y, ls="--", lw=0.9, color="C3")
        tr = offset_copy(ax.get_yaxis_transform(), fig=ax.figure, x=0.0, y=dy, units="points")
        ax.text(0.995, y, f"{nm} {y:.0f}", transform=tr, ha="right", va=va, fontsize=6.5,
                color="C3")
        ys.append(y)
    span = max(max(ys) - min(ys), 1e-9)
    # room for a label (6.5 pt + 1.5 pt offset) outside each limit: 30 % of the span each side
    ax.set_ylim(min(ys) - 0.3 * span, max(ys) + 0.3 * span)


def plot_trajectory(traj, limits: dict | None, path: str | os.PathLike, *, title: str = "",
                    n_samples: int = 600, periods: int = 1, joint_names=None) -> Path:
    """Write a PNG of q, qd, qdd over `periods` periods of `traj` with `limits`.

    Args:
        traj: anything with ``evaluate(t)`` and ``duration`` (and ``period`` if periodic).
        limits: dict with (n,) arrays q_min, q_max, qd_max, qdd_max [SI] (any may be missing or
            infinite: no line), e.g. :attr:`identify.excitation.optimizer.ExcitationResult.limits_used`;
            None: no lines.
        path: output PNG file (further pages of joints: ``<stem>_p2.png`` ...).
        title: figure title.
        n_samples: samples drawn per period (a smooth Fourier series: 600 is plenty).
    Returns: the path of the first page.
    """
    plt = figures.pyplot()
    path = Path(path)
    T = float(getattr(traj, "period", traj.duration))
    t = np.linspace(0.0, periods * T, periods * n_samples + 1)
    q, qd, qdd = (np.degrees(v) for v in traj.evaluate(t))
    n = q.shape[1]
    names = joint_names or getattr(traj, "joint_names", None) or [f"joint{i + 1}" for i in range(n)]
    lim = limits or {}

    def deg(key):
        v = lim.get(key)
        return None if v is None else np.degrees(np.broadcast_to(np.asarray(v, float), (n,)))

    q_lo, q_hi, v_max, a_max = deg("q_min"), deg("q_max"), deg("qd_max"), deg("qdd_max")
    cols = (("position [deg]", q, q_lo, q_hi, "min", "max"),
            ("velocity [deg/s]", qd, None if v_max is None else -v_max, v_max, "-max", "+max"),
            ("acceleration [deg/s$^2$]", qdd, None if a_max is None else -a_max, a_max,
             "-max", "+max"))
    first = None
    for k, page in enumerate(figures.pages(n)):
        rows = len(page)
        height = 1.9 * rows + 0.9
        fig, axes = plt.subplots(rows, 3, figsize=(figures.WIDTH_IN, height), sharex=True,
                                 squeeze=False)
        fig.subplots_adjust(left=0.06, right=0.99, bottom=0.55 / height, top=1 - 0.55 / height,
                            hspace=0.42, wspace=0.2)
        for r, i in enumerate(page):
            for c, (label, data, lo, hi, n_lo, n_hi) in enumerate(cols):
                ax = axes[r, c]
                ax.plot(t, data[:, i], lw=1.2, color="C0")
                _limit_lines(ax, data[:, i], None if lo is None else lo[i],
                             None if hi is None else hi[i], n_lo, n_hi)
                ax.set_title(f"{names[i]}: {label}", fontsize=8, y=1.0, pad=3)
                ax.tick_params(labelsize=7)
                ax.locator_params(nbins=4)
                ax.grid(alpha=0.3)
        for c in range(3):
            axes[-1, c].set_xlabel("t [s]", fontsize=8)
        head = title + ("  " if title else "") + "(dashed: limits used)" if lim else title
        if head:
            fig.suptitle(head + (f", joints {page.start + 1}-{page.stop}" if n > rows else ""),
                         fontsize=10)
        out = figures.save(fig, figures.page_path(path, k))
        first = first or out
    return first


def plot_clearance(clearance: dict, path: str | os.PathLike, *, title: str = "",
                   n_pairs: int = 4) -> Path:
    """Write a PNG of the minimum link-pair / link-obstacle distance over one period [mm]
    (identify.backend.clearance on the URDF's shapes), the closest `n_pairs` pairs whose
    distance changes, and the margin.

    PyBullet reports only pairs closer than margin + 0.1 m (``clearance["cap"]`` [m] when given);
    a sample at that cap is "farther than the cap", not a distance: it is not drawn, and the
    region above the cap is a grey band labelled so. The legend sits to the right of the axes.

    Args:
        clearance: dict t (N,) [s], min (N,) [m], margin [m], pairs {label: (N,) [m]}, optional
            cap [m].
        path: output PNG file.
    """
    plt = figures.pyplot()
    t = np.asarray(clearance["t"], float)
    margin = float(clearance["margin"])
    cap = float(clearance.get("cap", max(margin, 0.0) + 0.1))

    def measured(v):                     # mm, samples at the cap -> NaN (not drawn)
        v = 1e3 * np.asarray(v, float)
        return np.where(v >= 1e3 * cap - 1e-6, np.nan, v)
    fig, ax = plt.subplots(figsize=(figures.WIDTH_IN, 3.8))
    fig.subplots_adjust(left=0.07, right=0.70, bottom=0.14, top=0.88)
    ax.plot(*figures.decimate(t, measured(clearance["min"])), "k", lw=2,
            label="minimum over all pairs")
    pairs = {k: np.asarray(v, float) for k, v in clearance.get("pairs", {}).items()
             if np.ptp(v) > 1e-6}
    for i, k in enumerate(sorted(pairs, key=lambda k: pairs[k].min())[:n_pairs]):
        ax.plot(*figures.decimate(t, measured(pairs[k])), lw=1.2, label=k,
                color=figures.PALETTE[1 + i % (len(figures.PALETTE) - 1)])
    ax.axhline(1e3 * margin, color="r", ls="--", label=f"margin {1e3 * margin:.0f} mm")
    lo, hi = ax.get_ylim()
    top = max(hi, 1e3 * margin) + 0.15 * (max(hi, 1e3 * margin) - min(lo, 0.0))
    if top > 1e3 * cap:
        top = 1e3 * cap * 1.08
        ax.axhspan(1e3 * cap, top, color="0.85", lw=0,
                   label=f"beyond {1e3 * cap:.0f} mm: not measured\n(PyBullet reports pairs "
                         f"within margin + 0.1 m)")
    ax.set_ylim(min(lo, 0.0), top)
    ax.set_xlabel("t [s]")
    ax.set_ylabel("distance [mm]")
    ax.set_title(title or "clearance: closest link pairs / obstacles (PyBullet, URDF shapes)",
                 fontsize=10)
    ax.legend(fontsize=7.5, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.grid(alpha=0.3)
    return figures.save(fig, path)
