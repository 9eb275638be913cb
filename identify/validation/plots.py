"""Identification plots (matplotlib Agg; each function writes a PNG file, returns its path).

    from identify.validation.plots import plot_torque_comparison, plot_residuals, plot_parameters
    plot_torque_comparison(res, "validation", "out/fig11.png")     # paper Fig. 9 / Fig. 11 style
    plot_residuals(res, "validation", "out/residuals.png")
    plot_parameters(names, values, std, "out/params.png", truth=truth)

`res` is a :class:`identify.validation.validate.ValidationResult`. Torques in N*m, time in s.
Lines are min/max-decimated and joints paged (at most six panels per figure; further pages are
written next to the first as ``<stem>_p2.png``, ...) by :mod:`identify.common.figures`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from identify.common import figures

from .validate import MODEL_LABELS

_STYLE = {"simplified": dict(color="tab:blue", lw=1.0, ls="--"),
          "improved_eq24": dict(color="tab:orange", lw=1.0, ls="-."),
          "improved_closed_form": dict(color="tab:red", lw=1.0, ls="-")}


def _joint_axes(n: int, extra_row: bool = False):
    """Figure with n joint panels in two columns sharing their time axis (and, with
    `extra_row`, one full-width panel below them with its own x axis). Fixed margins: no
    tight_layout pass (it costs a full extra draw)."""
    plt = figures.pyplot()
    cols = 2 if n > 1 else 1
    rows = int(np.ceil(n / cols))
    total = rows + (1 if extra_row else 0)
    height = 2.2 * total + 0.9
    fig = plt.figure(figsize=(11.0, height))
    gs = fig.add_gridspec(total, cols, left=0.07, right=0.985, bottom=0.6 / height,
                          top=1 - 0.5 / height, hspace=0.55, wspace=0.16)
    axes = []
    for j in range(n):
        r, c = divmod(j, cols)
        axes.append(fig.add_subplot(gs[r, c], sharex=axes[0] if axes else None))
    for j, ax in enumerate(axes):
        # time label and tick labels on the lowest panel of each column (the panels share
        # their time axis; tick labels cost most of the drawing time)
        bottom = j + cols >= n
        ax.set_xlabel("t [s]" if bottom else "", fontsize=8)
        ax.tick_params(labelsize=7, labelbottom=bottom)
        ax.locator_params(nbins=5)
    extra = fig.add_subplot(gs[rows, :]) if extra_row else None
    return fig, axes, extra


def _check_traj(res, trajectory):
    if trajectory not in res.predictions:
        raise ValueError(f"no trajectory {trajectory!r} in the validation result "
                         f"(have {sorted(res.predictions)})")


def _models(res, trajectory, models) -> list:
    preds = res.predictions[trajectory]
    models = list(models) if models is not None else list(preds)
    for m in models:
        if m not in preds:
            raise ValueError(f"model {m!r} not in the validation result (have {sorted(preds)})")
    return models


def plot_torque_comparison(res, trajectory: str, path, models=None, title: str | None = None,
                           signal: str = "motor torque") -> Path:
    """Measured vs predicted motor torque per joint (one panel per joint), both models.

    Args:
        res: ValidationResult; trajectory: its key (e.g. "excitation", "validation").
        path: output image file (further pages of joints: ``<stem>_p2.png`` ...); models:
            subset of the result's model names (default all).
    Returns: the first page's path.
    """
    _check_traj(res, trajectory)
    models = _models(res, trajectory, models)
    t = res.t[trajectory]
    meas = res.measured[trajectory]
    preds = res.predictions[trajectory]
    n = meas.shape[1]
    ov = ", ".join(f"{MODEL_LABELS.get(m, m)} {res.rms_overall[trajectory][m]:.3f}" for m in models)
    for k, page in enumerate(figures.pages(n)):
        fig, axes, _ = _joint_axes(len(page))
        for j, ax in zip(page, axes):
            td, md = figures.decimate(t, meas[:, j])
            ax.plot(td, md, color="k", lw=1.4, label="measured")
            for m in models:
                r = res.rms[trajectory][m][j]
                td, pd = figures.decimate(t, preds[m][:, j])
                ax.plot(td, pd, label=f"{MODEL_LABELS.get(m, m)} (RMS {r:.3f})",
                        **_STYLE.get(m, {}))
            ax.set_title(res.joint_names[j], fontsize=9, y=1.0, pad=3)
            ax.set_ylabel(f"{signal} [N·m]", fontsize=8)
            ax.legend(fontsize=6, loc="upper right")
            ax.grid(alpha=0.3)
        fig.suptitle(title or f"{trajectory}: measured vs predicted {signal} "
                              f"(overall RMS: {ov} N·m)", fontsize=9)
        out = figures.save(fig, figures.page_path(path, k))
        if k == 0:
            first = out
    return first


def plot_residuals(res, trajectory: str, path, models=None, signal: str = "motor torque") -> Path:
    """Residual (predicted - measured) motor torque per joint over time [s] (panels sharing
    their time axis), and below them a histogram of all residuals per model (its own axis)."""
    _check_traj(res, trajectory)
    models = _models(res, trajectory, models)
    t = res.t[trajectory]
    meas = res.measured[trajectory]
    preds = res.predictions[trajectory]
    n = meas.shape[1]
    plist = figures.pages(n)
    for k, page in enumerate(plist):
        last = k == len(plist) - 1
        fig, axes, hist = _joint_axes(len(page), extra_row=last)
        for j, ax in zip(page, axes):
            for m in models:
                td, rd = figures.decimate(t, preds[m][:, j] - meas[:, j])
                ax.plot(td, rd, label=MODEL_LABELS.get(m, m), **_STYLE.get(m, {}))
            ax.axhline(0.0, color="k", lw=0.5)
            ax.set_title(res.joint_names[j], fontsize=9, y=1.0, pad=3)
            ax.set_ylabel("residual [N·m]", fontsize=8)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=6)
        if hist is not None:
            for m in models:
                e = (preds[m] - meas).ravel()
                hist.hist(e, bins=80, histtype="step", label=MODEL_LABELS.get(m, m),
                          color=_STYLE.get(m, {}).get("color"))
            hist.set_xlabel("residual [N·m] (all joints, all samples)", fontsize=8)
            hist.set_ylabel("samples", fontsize=8)
            hist.set_title("residual distribution", fontsize=9, y=1.0, pad=3)
            hist.tick_params(labelsize=7)
            hist.legend(fontsize=6)
        fig.suptitle(f"{trajectory}: {signal} residuals", fontsize=9)
        out = figures.save(fig, figures.page_path(path, k))
        if k == 0:
            first = out
    return first


def plot_parameters(names, values, std, path, truth=None, title: str = "identified parameters",
                    sigma: float = 3.0, clip: float = 10.0) -> Path:
    """Estimates in units of their standard deviation, one row per parameter with its full name.

    x = (estimate - truth) / std when a truth is given (the truth sits at 0 and the estimate
    should fall inside the +-`sigma` band), else estimate / std (how many std the estimate lies
    from zero: inside the band = not distinguishable from 0). Each row shows the estimate with a
    +-`sigma` bar; rows beyond +-`clip` are drawn at the edge as a triangle with the value
    written; rows without a std are listed as "no std". The numbers (estimate, std, truth) are
    written on the right of each row.

    Args: names (p,), values (p,), std (p,) (NaN allowed: no std), truth (p,) or None.
    """
    values = np.asarray(values, dtype=float)
    std = np.asarray(std, dtype=float)
    p = values.size
    if std.shape != (p,) or len(names) != p:
        raise ValueError(f"{len(names)} names, {p} values and {std.size} std must match")
    tr = None if truth is None else np.asarray(truth, dtype=float)
    if tr is not None and tr.shape != (p,):
        raise ValueError(f"truth has {tr.size} values for {p} parameters")
    plt = figures.pyplot()
    ref = np.zeros(p) if tr is None else tr
    ok = np.isfinite(std) & (std > 0)
    z = np.where(ok, (values - ref) / np.where(ok, std, 1.0), np.nan)
    zc = np.clip(z, -clip, clip)
    names = [str(nm) for nm in names]
    lab_w = max(len(nm) for nm in names) if names else 10
    left_in = min(0.062 * lab_w + 0.3, 9.0)         # inches of label column (fontsize 7)
    right_in = 2.7                                  # numbers column
    plot_in = 4.5
    width = left_in + plot_in + right_in
    height = 0.2 * p + 1.5
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes([left_in / width, 0.8 / height, plot_in / width, 1 - 1.3 / height])
    y = np.arange(p)[::-1]
    ax.axvspan(-sigma, sigma, color="tab:green", alpha=0.12, lw=0)
    ax.axvline(0.0, color="k", lw=0.8)
    inside = ok & (np.abs(z) <= clip)
    ax.errorbar(zc[inside], y[inside], xerr=sigma, fmt="o", ms=3, color="tab:blue",
                ecolor="tab:blue", elinewidth=0.8, capsize=2)
    out_hi, out_lo = ok & (z > clip), ok & (z < -clip)
    ax.plot(np.full(out_hi.sum(), clip), y[out_hi], ">", color="tab:red", ms=5)
    ax.plot(np.full(out_lo.sum(), -clip), y[out_lo], "<", color="tab:red", ms=5)
    ax.set_ylim(-1, p)
    zmax = float(np.nanmax(np.abs(z))) if ok.any() else 0.0
    xl = min(clip, max(sigma + 1.5, zmax + 1.0)) + 0.8
    ax.set_xlim(-xl, xl)
    ax.set_yticks(y)
    ax.set_yticklabels(names, fontsize=7)
    ax.tick_params(axis="x", labelsize=7)
    ax.set_xlabel(("(estimate − truth) / σ" if tr is not None else "estimate / σ")
                  + f"\nbars: estimate ± {sigma:g}σ; band: ±{sigma:g}σ; ◀ ▶: beyond ±{clip:g}σ",
                  fontsize=7.5)
    ax.grid(alpha=0.3, axis="x")
    for yi, v, s, zi, t in zip(y, values, std, z, ref if tr is not None else [None] * p):
        txt = f"{v:.4g} ± {s:.2g}" if np.isfinite(s) else f"{v:.4g}  (no std)"
        if t is not None:
            txt += f" | truth {t:.4g}"
        if np.isfinite(zi) and abs(zi) > clip:
            txt += f" | z = {zi:.3g}"
        ax.text(1.01, yi, txt, transform=ax.get_yaxis_transform(), fontsize=6.5, va="center",
                color="tab:red" if np.isfinite(zi) and abs(zi) > sigma else "k")
    inside_n = int(np.sum(np.abs(z[ok]) <= sigma))
    head = (f"{title}\n{inside_n} of {int(ok.sum())} within ±{sigma:g}σ of the truth"
            if tr is not None else title)
    fig.suptitle(head, fontsize=9, y=1 - 0.08 / height, va="top")
    return figures.save(fig, path)


def plot_stage2(stage2, path) -> Path:
    """Stage-2 coefficients (per joint, value +- 3 std) of an ImprovedModel's stage2_."""
    plt = figures.pyplot()
    names = stage2.names
    P, S = stage2.params, stage2.std
    fig, axes = plt.subplots(1, len(names), figsize=(2.3 * len(names), 2.7), squeeze=False)
    fig.subplots_adjust(left=0.05, right=0.99, bottom=0.25, top=0.8, wspace=0.45)
    x = np.arange(P.shape[0])
    for k, ax in enumerate(axes.flat):
        ax.errorbar(x, P[:, k], yerr=3 * np.nan_to_num(S[:, k]), fmt="o", capsize=3)
        ax.set_xticks(x)
        ax.set_xticklabels([j.joint for j in stage2.joints], rotation=45, fontsize=6)
        ax.tick_params(axis="y", labelsize=6)
        ax.set_title(names[k], fontsize=9, y=1.0, pad=3)
        ax.grid(alpha=0.3)
    fig.suptitle(f"stage-2 coefficients ({stage2.variant} reducer friction), ± 3σ", fontsize=9)
    return figures.save(fig, path)


def plot_decomposition(res, trajectory: str, model: str, path) -> Path:
    """Parts of a model's predicted motor torque [N*m] per joint over time [s]."""
    _check_traj(res, trajectory)
    if trajectory not in res.decomposition or model not in res.decomposition[trajectory]:
        raise ValueError(f"no decomposition of model {model!r} on {trajectory!r}")
    parts = {k: v for k, v in res.decomposition[trajectory][model].items() if k != "friction"
             or model == "simplified"}
    t = res.t[trajectory]
    n = next(iter(parts.values())).shape[1]
    for k, page in enumerate(figures.pages(n)):
        fig, axes, _ = _joint_axes(len(page))
        for j, ax in zip(page, axes):
            for comp, arr in parts.items():
                td, ad = figures.decimate(t, arr[:, j])
                ax.plot(td, ad, lw=0.9, label=comp)
            ax.set_title(res.joint_names[j], fontsize=9, y=1.0, pad=3)
            ax.set_ylabel("torque [N·m]", fontsize=8)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=6)
        fig.suptitle(f"{trajectory}: parts of the {model} model's predicted torque [N·m]",
                     fontsize=9)
        out = figures.save(fig, figures.page_path(path, k))
        if k == 0:
            first = out
    return first
