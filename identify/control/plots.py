"""Figures of the control stages: tracking error of the feed-forward cases, observer residuals
against their thresholds around the contact."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from identify.common import figures

__all__ = ["plot_tracking", "plot_collision"]

_COLORS = {"pid_only": "tab:red", "identified_ff": "tab:blue", "true_ff": "tab:green"}


def plot_tracking(res, path) -> Path:
    """Tracking error [mrad] per joint for every case of a ClosedLoopResult."""
    plt = figures.pyplot()
    n = len(res.joint_names)
    fig, axes = plt.subplots(n, 1, figsize=(9, 1.6 * n + 1), sharex=True)
    for name, c in res.cases.items():
        for j, ax in enumerate(np.atleast_1d(axes)):
            ax.plot(c.t, 1e3 * c.error[:, j], lw=0.7, color=_COLORS.get(name),
                    label=f"{name} (RMS {1e3 * c.error_rms_overall:.3f} mrad)" if j == 0 else None)
            ax.set_ylabel(f"{res.joint_names[j]}\n[mrad]")
    axes = np.atleast_1d(axes)
    axes[0].legend(loc="upper right", fontsize=8)
    axes[0].set_title(f"tracking error on the {res.trajectory} trajectory (same gains, same noise)")
    axes[-1].set_xlabel("t [s]")
    fig.tight_layout()
    return figures.save(fig, path, dpi=110)


def plot_collision(results: dict, joint_names, path, window_s: float = 1.0) -> Path:
    """Observer residual |r| and threshold per joint around the contact, one column per model."""
    plt = figures.pyplot()
    n = len(joint_names)
    names = list(results)
    fig, axes = plt.subplots(n, len(names), figsize=(5 * len(names), 1.5 * n + 1), sharex=True,
                             squeeze=False)
    for col, nm in enumerate(names):
        r = results[nm]
        t0, t1 = r.contact.time_s, r.contact.end_s
        sel = (r.t >= t0 - window_s) & (r.t <= t1 + window_s)
        for j in range(n):
            ax = axes[j, col]
            ax.plot(r.t[sel], r.r[sel, j], lw=0.8, color="tab:blue")
            th = r.thresholds.value[j] + (0.0 if r.band is None else r.band[sel, j])
            ax.plot(r.t[sel], np.broadcast_to(th, r.t[sel].shape), color="tab:red", lw=0.8, ls="--")
            ax.plot(r.t[sel], -np.broadcast_to(th, r.t[sel].shape), color="tab:red", lw=0.8, ls="--")
            ax.axvspan(t0, t1, color="0.85")
            if col == 0:
                ax.set_ylabel(f"{joint_names[j]}\n[N*m]")
        d = "not detected" if not r.detected else f"detected after {r.detection_delay_ms:.0f} ms"
        axes[0, col].set_title(f"{nm} model: {d}, {r.false_alarms} false alarms", fontsize=9)
        axes[-1, col].set_xlabel("t [s]")
    fig.tight_layout()
    return figures.save(fig, path, dpi=110)
