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
    """Dashed lines at both limits, each labelled with its name and value; the y axis spans the
    data and both limits."""
    ys = [data.min(), data.max()]
    for y, nm, va in ((lo, name_lo, "top"), (hi, name_hi, "bottom")):
        if y is None or not np.isfinite(y):
            continue
        ax.axhline(y, ls="--", lw=0.9, color="C3")
        ax.text(0.995, y, f"{nm} {y:.0f}", transform=ax.get_yaxis_transform(), ha="right",
                va=va, fontsize=6.5, color="C3")
        ys.append(y)
    span = max(max(ys) - min(ys), 1e-9)
    ax.set_ylim(min(ys) - 0.12 * span, max(ys) + 0.12 * span)


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
        height = 1.75 * rows + 0.9
        fig, axes = plt.subplots(rows, 3, figsize=(11.0, height), sharex=True, squeeze=False)
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
