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

# the headline model (improved, closed form) drawn above the others: where two predictions
# agree (joint 6: closed form = eq. (24)), it is the one that stays visible
_STYLE = {"simplified": dict(color="tab:blue", lw=1.0, ls="--", zorder=2),
          "improved_eq24": dict(color="tab:orange", lw=1.0, ls="-.", zorder=2.1),
          "improved_closed_form": dict(color="tab:red", lw=1.0, ls="-", zorder=2.5)}


def _joint_axes(n: int, extra_row: bool = False, legend: bool = True):
    """Figure with n joint panels in two columns sharing their time axis (and, with
    `extra_row`, one full-width panel below them with its own x axis). The top margin holds the
    title and (with `legend`) one figure legend: no legend inside a panel hides data. Fixed
    margins: no tight_layout pass (it costs a full extra draw). Returns (fig, axes, extra,
    legend_top): legend_top is the figure fraction where the legend's top goes."""
    plt = figures.pyplot()
    cols = 2 if n > 1 else 1
    rows = int(np.ceil(n / cols))
    total = rows + (1 if extra_row else 0)
    top_in = 0.9 if legend else 0.5
    height = 2.2 * total + 0.5 + top_in
    fig = plt.figure(figsize=(figures.WIDTH_IN, height))
    gs = fig.add_gridspec(total, cols, left=0.07, right=0.985, bottom=0.6 / height,
                          top=1 - top_in / height, hspace=0.55, wspace=0.16)
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
    return fig, axes, extra, 1 - 0.36 / height


def _suptitle(fig, text: str):
    """The figure title in the top margin, above the legend (see :func:`_joint_axes`)."""
    h = fig.get_figheight()
    return fig.suptitle(text, fontsize=9, y=1 - 0.08 / h, va="top")


def _short(model: str) -> str:
    """Short model name for panel titles: simplified / improved / eq. (24)."""
    return {"improved_closed_form": "improved", "improved_eq24": "eq. (24)"}.get(
        model, MODEL_LABELS.get(model, model))


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
        fig, axes, _, top = _joint_axes(len(page))
        for j, ax in zip(page, axes):
            td, md = figures.decimate(t, meas[:, j])
            ax.plot(td, md, color="k", lw=1.4, label="measured")
            for m in models:
                td, pd = figures.decimate(t, preds[m][:, j])
                ax.plot(td, pd, label=MODEL_LABELS.get(m, m), **_STYLE.get(m, {}))
            rms = ", ".join(f"{_short(m)} {res.rms[trajectory][m][j]:.3f}" for m in models)
            ax.set_title(f"{res.joint_names[j]} -- RMS [N·m]: {rms}", fontsize=8, y=1.0, pad=3)
            ax.set_ylabel(f"{signal} [N·m]", fontsize=8)
            ax.grid(alpha=0.3)
        figures.legend_above(fig, *axes[0].get_legend_handles_labels(), top=top)
        _suptitle(fig, title or f"{trajectory}: measured vs predicted {signal} "
                                f"(overall RMS: {ov} N·m)")
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
        fig, axes, hist, top = _joint_axes(len(page), extra_row=last)
        for j, ax in zip(page, axes):
            for m in models:
                td, rd = figures.decimate(t, preds[m][:, j] - meas[:, j])
                ax.plot(td, rd, label=MODEL_LABELS.get(m, m), **_STYLE.get(m, {}))
            ax.axhline(0.0, color="k", lw=0.5)
            ax.set_title(res.joint_names[j], fontsize=9, y=1.0, pad=3)
            ax.set_ylabel("residual [N·m]", fontsize=8)
            ax.grid(alpha=0.3)
        figures.legend_above(fig, *axes[0].get_legend_handles_labels(), top=top)
        if hist is not None:
            for m in models:
                e = (preds[m] - meas).ravel()
                hist.hist(e, bins=80, histtype="step", label=MODEL_LABELS.get(m, m),
                          color=_STYLE.get(m, {}).get("color"))
            hist.set_xlabel("residual [N·m] (all joints, all samples)", fontsize=8)
            hist.set_ylabel("samples", fontsize=8)
            hist.set_title("residual distribution", fontsize=9, y=1.0, pad=3)
            hist.tick_params(labelsize=7)
        _suptitle(fig, f"{trajectory}: {signal} residuals (predicted - measured)")
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
    plot_in = max(4.5, figures.WIDTH_IN - left_in - right_in)     # >= 920 px wide
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
    # every bar (estimate +- sigma) inside the axis; the clip triangles at +-clip as well
    zin = np.abs(z[inside])
    reach = max(sigma + 1.5, float(zin.max()) + sigma if zin.size else 0.0,
                clip if (out_hi | out_lo).any() else 0.0)
    xl = reach + 0.5
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


#: unit of each stage-2 coefficient (docs/joint_models.md); J_m/K = kg*m^2 / (N*m/rad) = s^2
STAGE2_UNITS = {"xi_lin": "–", "xi_opp": "–", "f_mc": "N·m", "f_mv": "N·m·s/rad",
                "J_m": "kg·m²", "J_m/K": "s²"}
#: stage-2 coefficients that a physical drive cannot have negative (a loss, a friction, an
#: inertia, a compliance); a negative estimate is drawn red and flagged
NON_NEGATIVE = ("xi_opp", "f_mc", "f_mv", "J_m", "J_m/K")


def _stage2_panel(ax, x, name, val, std, fixed, truth, sigma):
    """One coefficient over the joints: estimates +- sigma*std, fixed ones as open grey circles
    at their value (no bar), negative non-negative coefficients red with their value written,
    the truth as black crosses."""
    est = ~fixed
    neg = est & (val < 0) & (name in NON_NEGATIVE)
    for sel, colour in ((est & ~neg, "tab:blue"), (neg, "tab:red")):
        if sel.any():
            ax.errorbar(x[sel], val[sel], yerr=sigma * np.nan_to_num(std[sel]), fmt="o", ms=4,
                        capsize=3, color=colour, ecolor=colour, zorder=3)
    for i in np.flatnonzero(neg):
        ax.annotate("< 0", (x[i], val[i]), xytext=(5, 0), textcoords="offset points",
                    ha="left", va="center", fontsize=7, color="tab:red")
    if fixed.any():
        ax.plot(x[fixed], val[fixed], "o", ms=5, mfc="none", mec="0.5", zorder=3)
        for i in np.flatnonzero(fixed):
            ax.annotate("fixed", (x[i], val[i]), xytext=(0, 6), textcoords="offset points",
                        ha="center", va="bottom", fontsize=6.5, color="0.4")
    if truth is not None:
        ax.plot(x, truth, "x", color="k", ms=6, mew=1.3, zorder=4)
    lo = np.nanmin(np.concatenate([val - sigma * np.nan_to_num(std), val] + (
        [truth] if truth is not None else [])))
    hi = np.nanmax(np.concatenate([val + sigma * np.nan_to_num(std), val] + (
        [truth] if truth is not None else [])))
    pad = 0.2 * max(hi - lo, 1e-12 + 1e-3 * max(abs(hi), abs(lo)))
    ax.set_ylim(lo - pad, hi + pad)
    ax.axhline(0.0, color="k", lw=0.5)
    ax.set_title(name, fontsize=9, y=1.0, pad=3)
    ax.set_ylabel(f"{name} [{STAGE2_UNITS.get(name, '?')}]", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(alpha=0.3)


def plot_stage2(stage2, path, truth: dict | None = None, sigma: float = 3.0) -> Path:
    """Stage-2 coefficients of an ImprovedModel's ``stage2_``: one panel per coefficient (unit on
    its axis), the joints along x, value +- `sigma` std.

    Args:
        stage2: identify.estimation.stage2.Stage2Result.
        path: output PNG.
        truth: coefficient name -> (n,) true values (the twin's drive truth,
            ``Truth.stage2``), drawn as black crosses; None or a missing name: no truth.
    A ξ the data could not identify (``xi_identified`` False: fixed at 0) is an open grey circle
    without a bar; a negative value of a coefficient in :data:`NON_NEGATIVE` is red with its
    value written. Returns the path.
    """
    plt = figures.pyplot()
    names = list(stage2.names)
    P, S = np.asarray(stage2.params, float), np.asarray(stage2.std, float)
    joints = [j.joint for j in stage2.joints]
    xi_fixed = np.array([not getattr(j, "xi_identified", True) for j in stage2.joints])
    cols = 3
    rows = int(np.ceil(len(names) / cols))
    height = 2.5 * rows + 1.1
    fig, axes = plt.subplots(rows, cols, figsize=(figures.WIDTH_IN, height), squeeze=False)
    fig.subplots_adjust(left=0.07, right=0.99, bottom=0.55 / height, top=1 - 0.95 / height,
                        wspace=0.38, hspace=0.62)
    x = np.arange(P.shape[0])
    for k, ax in enumerate(axes.flat):
        if k >= len(names):
            ax.set_visible(False)
            continue
        nm = names[k]
        fixed = xi_fixed & nm.startswith("xi")
        tr = None if truth is None or truth.get(nm) is None else np.asarray(truth[nm], float)
        _stage2_panel(ax, x, nm, P[:, k], S[:, k], fixed, tr, sigma)
        ax.set_xticks(x)
        ax.set_xticklabels(joints, rotation=30, fontsize=7)
    from matplotlib.lines import Line2D
    handles = [Line2D([], [], marker="o", color="tab:blue", ls="-", label=f"estimate ± {sigma:g}σ"),
               Line2D([], [], marker="o", color="tab:red", ls="-",
                      label="negative: unphysical (friction, loss, inertia ≥ 0)"),
               Line2D([], [], marker="o", mfc="none", mec="0.5", ls="none",
                      label="ξ fixed at 0 (not identifiable)")]
    if truth:
        handles.append(Line2D([], [], marker="x", color="k", ls="none", mew=1.3, label="truth"))
    figures.legend_above(fig, handles, [h.get_label() for h in handles], top=1 - 0.42 / height)
    fig.suptitle(f"stage-2 coefficients per joint ({stage2.variant} reducer friction)"
                 + ("" if truth else ", no ground truth to compare with"),
                 fontsize=9, y=1 - 0.08 / height, va="top")
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
    style = {comp: dict(color=figures.PALETTE[i % len(figures.PALETTE)],
                        ls=("-", "--")[(i // len(figures.PALETTE)) % 2]) for i, comp in
             enumerate(parts)}
    for k, page in enumerate(figures.pages(n)):
        fig, axes, _, top = _joint_axes(len(page))
        for j, ax in zip(page, axes):
            for comp, arr in parts.items():
                td, ad = figures.decimate(t, arr[:, j])
                ax.plot(td, ad, lw=1.0, label=comp.replace("_", " "), **style[comp])
            ax.set_title(res.joint_names[j], fontsize=9, y=1.0, pad=3)
            ax.set_ylabel("torque [N·m]", fontsize=8)
            ax.grid(alpha=0.3)
        figures.legend_above(fig, *axes[0].get_legend_handles_labels(), top=top)
        _suptitle(fig, f"{trajectory}: parts of the {model} model's predicted torque [N·m]")
        out = figures.save(fig, figures.page_path(path, k))
        if k == 0:
            first = out
    return first
