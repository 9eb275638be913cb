"""Paper Fig. 8 style plots of a joint trajectory with its limits (PNG, matplotlib Agg backend).

    from identify.excitation.plots import plot_trajectory
    plot_trajectory(traj, limits, "excitation.png")

One row per joint, columns position [deg], velocity [deg/s], acceleration [deg/s^2] (degrees only
here, at the edge); dashed lines mark the limits. Position limits far outside the motion (e.g.
+-360 deg) are written in the panel title instead of stretching the axis.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np


def plot_trajectory(traj, limits: dict | None, path: str | os.PathLike, *, title: str = "",
                    n_samples: int = 2000, periods: int = 1, joint_names=None) -> Path:
    """Write a PNG of q, qd, qdd over `periods` periods of `traj` with `limits`.

    Args:
        traj: anything with ``evaluate(t)`` and ``duration`` (and ``period`` if periodic).
        limits: dict with (n,) arrays q_min, q_max, qd_max, qdd_max [SI] (any may be missing or
            infinite), e.g. :attr:`identify.excitation.optimizer.ExcitationResult.limits_used`; None: no lines.
        path: output PNG file.
        title: figure title.
        n_samples: samples drawn per period.
    Returns: the path written.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

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
    fig, axes = plt.subplots(n, 3, figsize=(12, 1.8 * n + 0.8), sharex=True, squeeze=False)
    cols = (("position [deg]", q, q_lo, q_hi), ("velocity [deg/s]", qd, None, v_max),
            ("acceleration [deg/s$^2$]", qdd, None, a_max))
    for i in range(n):
        for c, (label, data, lo, hi) in enumerate(cols):
            ax = axes[i, c]
            ax.plot(t, data[:, i], lw=1.2, color="C0")
            lines = []
            if c == 0:
                lines = [x[i] for x in (lo, hi) if x is not None and np.isfinite(x[i])]
            elif hi is not None and np.isfinite(hi[i]):
                lines = [-hi[i], hi[i]]
            span = max(np.ptp(data[:, i]), 1e-9)
            shown, far = [], []
            for y in lines:
                near = data[:, i].min() - 0.6 * span <= y <= data[:, i].max() + 0.6 * span
                (shown if (near or c > 0) else far).append(y)
            for y in shown:
                ax.axhline(y, ls="--", lw=0.9, color="C3")
            head = f"{names[i]}: {label}"
            if far:
                head += "  (limits " + ", ".join(f"{y:.0f}" for y in far) + ")"
            ax.set_title(head, fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
    for c in range(3):
        axes[-1, c].set_xlabel("t [s]", fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_clearance(clearance: dict, path: str | os.PathLike, *, title: str = "",
                   n_pairs: int = 4) -> Path:
    """Write a PNG of the minimum link-pair / link-obstacle distance over one period [mm]
    (identify.backend.clearance on the URDF's shapes), the closest `n_pairs` pairs whose
    distance changes, and the margin.

    Args:
        clearance: dict t (N,) [s], min (N,) [m], margin [m], pairs {label: (N,) [m]}.
        path: output PNG file.
    """
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    t = np.asarray(clearance["t"], float)
    fig, ax = plt.subplots(figsize=(9, 3.6))
    ax.plot(t, 1e3 * np.asarray(clearance["min"]), "k", lw=2, label="minimum over all pairs")
    pairs = {k: np.asarray(v, float) for k, v in clearance.get("pairs", {}).items()
             if np.ptp(v) > 1e-6}
    for k in sorted(pairs, key=lambda k: pairs[k].min())[:n_pairs]:
        ax.plot(t, 1e3 * pairs[k], lw=1, label=k)
    ax.axhline(1e3 * float(clearance["margin"]), color="r", ls="--", label="margin")
    ax.set_xlabel("t [s]")
    ax.set_ylabel("distance [mm]")
    ax.set_title(title or "clearance: closest link pairs / obstacles (PyBullet, URDF shapes)")
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
