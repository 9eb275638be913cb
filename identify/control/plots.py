"""Figures of the control stages: tracking error of the feed-forward cases, observer residuals
against their thresholds around the contact. Legends above the panels (one per figure), units
on every axis; widths from :data:`identify.common.figures.WIDTH_IN`."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from identify.common import figures

__all__ = ["plot_tracking", "plot_collision"]

_COLORS = {"pid_only": "#D55E00", "identified_ff": "#0072B2", "true_ff": "#009E73"}
_STYLES = {"pid_only": "-", "identified_ff": "--", "true_ff": "-"}
_LABELS = {"pid_only": "PID only", "identified_ff": "identified model feed-forward",
           "true_ff": "true model feed-forward"}


def plot_tracking(res, path) -> Path:
    """Tracking error [mrad] per joint (rows) of every case of a ClosedLoopResult: left every
    case on one scale, right the feed-forward cases alone on their own (PID only is 10-20x
    larger and would flatten them); identified dashed over true so both stay visible."""
    plt = figures.pyplot()
    n = len(res.joint_names)
    height = 1.55 * n + 1.3
    fig, axes = plt.subplots(n, 2, figsize=(figures.WIDTH_IN, height), sharex=True,
                             squeeze=False)
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.5 / height, top=1 - 0.95 / height,
                        hspace=0.35, wspace=0.18)
    ff = [nm for nm in res.cases if nm != "pid_only"]
    order = sorted(res.cases, key=lambda nm: nm != "true_ff")      # true first, identified over
    for col, names in enumerate((order, [nm for nm in order if nm in ff])):
        for nm in names:
            c = res.cases[nm]
            for j in range(n):
                td, ed = figures.decimate(np.asarray(c.t), 1e3 * np.asarray(c.error)[:, j])
                axes[j, col].plot(td, ed, lw=0.9, color=_COLORS.get(nm), ls=_STYLES.get(nm, "-"),
                                  label=f"{_LABELS.get(nm, nm)} (RMS "
                                        f"{1e3 * c.error_rms_overall:.3f} mrad)")
    for j in range(n):
        axes[j, 0].set_ylabel(f"{res.joint_names[j]}\nerror [mrad]", fontsize=8)
        for ax in axes[j]:
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
    axes[0, 0].set_title("every case", fontsize=9)
    axes[0, 1].set_title("feed-forward cases only (own scale)", fontsize=9)
    for ax in axes[-1]:
        ax.set_xlabel("t [s]", fontsize=8)
    h, lab = axes[0, 0].get_legend_handles_labels()
    rank = {nm: k for k, nm in enumerate(("pid_only", "identified_ff", "true_ff"))}
    pairs = sorted(zip(order, h, lab), key=lambda x: rank.get(x[0], len(rank)))
    figures.legend_above(fig, [p[1] for p in pairs], [p[2] for p in pairs],
                         top=1 - 0.38 / height, fontsize=7.5)
    fig.suptitle(f"tracking error on the {res.trajectory} trajectory (same gains, same noise)",
                 fontsize=10, y=1 - 0.06 / height, va="top")
    return figures.save(fig, path)


def plot_collision(results: dict, joint_names, path, window_s: float = 1.0) -> Path:
    """Observer residual r [N*m] and its thresholds per joint around the contact (grey span),
    one column per model."""
    plt = figures.pyplot()
    n = len(joint_names)
    names = list(results)
    height = 1.5 * n + 1.3
    fig, axes = plt.subplots(n, len(names), figsize=(figures.WIDTH_IN, height), sharex=True,
                             squeeze=False)
    fig.subplots_adjust(left=0.08, right=0.99, bottom=0.5 / height, top=1 - 0.95 / height,
                        hspace=0.35, wspace=0.18)
    for col, nm in enumerate(names):
        r = results[nm]
        t0, t1 = r.contact.time_s, r.contact.end_s
        sel = (r.t >= t0 - window_s) & (r.t <= t1 + window_s)
        for j in range(n):
            ax = axes[j, col]
            ax.axvspan(t0, t1, color="0.85", label="contact")
            ax.plot(r.t[sel], r.r[sel, j], lw=0.8, color="#0072B2", label="observer residual r")
            th = np.broadcast_to(r.thresholds.value[j] + (0.0 if r.band is None
                                                          else r.band[sel, j]), r.t[sel].shape)
            ax.plot(r.t[sel], th, color="#D55E00", lw=0.8, ls="--",
                    label="thresholds ± (static + friction band)")
            ax.plot(r.t[sel], -th, color="#D55E00", lw=0.8, ls="--")
            ax.tick_params(labelsize=7)
            if col == 0:
                ax.set_ylabel(f"{joint_names[j]}\nr [N·m]", fontsize=8)
        d = "not detected" if not r.detected else f"detected after {r.detection_delay_ms:.0f} ms"
        axes[0, col].set_title(f"{nm} model: {d}, {r.false_alarms} false alarms", fontsize=9)
        axes[-1, col].set_xlabel("t [s]", fontsize=8)
    h, lab = axes[0, 0].get_legend_handles_labels()
    figures.legend_above(fig, h, lab, top=1 - 0.38 / height, fontsize=7.5)
    fig.suptitle("collision detection: momentum-observer residual around the contact",
                 fontsize=10, y=1 - 0.06 / height, va="top")
    return figures.save(fig, path)
