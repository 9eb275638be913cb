"""Identification plots (matplotlib, Agg backend; each function writes a file, returns its path).

    from identify.validation.plots import plot_torque_comparison, plot_residuals, plot_parameters
    plot_torque_comparison(res, "validation", "out/fig11.png")     # paper Fig. 9 / Fig. 11 style
    plot_residuals(res, "validation", "out/residuals.png")
    plot_parameters(names, values, std, "out/params.png", truth=truth)

`res` is a :class:`identify.validation.validate.ValidationResult`. Torques in N*m, time in s.
"""
from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .validate import MODEL_LABELS  # noqa: E402

_STYLE = {"simplified": dict(color="tab:blue", lw=1.0, ls="--"),
          "improved_eq24": dict(color="tab:orange", lw=1.0, ls="-."),
          "improved_closed_form": dict(color="tab:red", lw=1.0, ls="-")}


def _grid(n: int):
    cols = 2 if n > 1 else 1
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(6.5 * cols, 2.4 * rows + 0.6), sharex=True,
                             squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat)


def _save(fig, path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".partial" + path.suffix)
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
    return path


def _check_traj(res, trajectory):
    if trajectory not in res.predictions:
        raise ValueError(f"no trajectory {trajectory!r} in the validation result "
                         f"(have {sorted(res.predictions)})")


def plot_torque_comparison(res, trajectory: str, path, models=None, title: str | None = None,
                           signal: str = "motor torque") -> Path:
    """Measured vs predicted motor torque per joint (one panel per joint), both models.

    Args:
        res: ValidationResult; trajectory: its key (e.g. "excitation", "validation").
        path: output image file; models: subset of the result's model names (default all).
        signal: name of the fitted signal in the labels ("joint torque" for a torque sensor).
    """
    _check_traj(res, trajectory)
    t = res.t[trajectory]
    meas = res.measured[trajectory]
    preds = res.predictions[trajectory]
    models = list(models) if models is not None else list(preds)
    for m in models:
        if m not in preds:
            raise ValueError(f"model {m!r} not in the validation result (have {sorted(preds)})")
    n = meas.shape[1]
    fig, axes = _grid(n)
    for j, ax in zip(range(n), axes):
        ax.plot(t, meas[:, j], color="k", lw=1.4, label="measured")
        for m in models:
            r = res.rms[trajectory][m][j]
            ax.plot(t, preds[m][:, j], label=f"{MODEL_LABELS.get(m, m)} (RMS {r:.3f})",
                    **_STYLE.get(m, {}))
        ax.set_title(res.joint_names[j], fontsize=9)
        ax.set_ylabel(f"{signal} [N·m]", fontsize=8)
        ax.legend(fontsize=6, loc="upper right")
        ax.grid(alpha=0.3)
    for ax in list(axes)[max(0, n - 2):n]:
        ax.set_xlabel("t [s]")
    ov = ", ".join(f"{MODEL_LABELS.get(m, m)} {res.rms_overall[trajectory][m]:.3f}" for m in models)
    fig.suptitle(title or f"{trajectory}: measured vs predicted {signal} "
                          f"(overall RMS: {ov} N·m)", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_residuals(res, trajectory: str, path, models=None, signal: str = "motor torque") -> Path:
    """Residual (predicted - measured) motor torque per joint over time, plus a histogram
    panel of all residuals per model."""
    _check_traj(res, trajectory)
    t = res.t[trajectory]
    meas = res.measured[trajectory]
    preds = res.predictions[trajectory]
    models = list(models) if models is not None else list(preds)
    n = meas.shape[1]
    fig, axes = _grid(n + 1)
    axes = list(axes)
    for j in range(n):
        ax = axes[j]
        for m in models:
            ax.plot(t, preds[m][:, j] - meas[:, j], label=MODEL_LABELS.get(m, m),
                    **_STYLE.get(m, {}))
        ax.axhline(0.0, color="k", lw=0.5)
        ax.set_title(res.joint_names[j], fontsize=9)
        ax.set_ylabel("residual [N·m]", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=6)
    ax = axes[n]
    for m in models:
        e = (preds[m] - meas).ravel()
        ax.hist(e, bins=80, histtype="step", label=MODEL_LABELS.get(m, m),
                color=_STYLE.get(m, {}).get("color"))
    ax.set_xlabel("residual [N·m] (all joints)")
    ax.set_title("residual distribution", fontsize=9)
    ax.legend(fontsize=6)
    fig.suptitle(f"{trajectory}: {signal} residuals", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_parameters(names, values, std, path, truth=None, title: str = "identified parameters",
                    sigma: float = 3.0) -> Path:
    """Parameter table as a chart: value with +-`sigma`*std error bars (and the truth if given),
    one row per parameter, scaled by max(|value|, |truth|) so all fit one axis.

    Args: names (p,), values (p,), std (p,) (NaN allowed: no bar), truth (p,) or None.
    """
    values = np.asarray(values, dtype=float)
    std = np.asarray(std, dtype=float)
    p = values.size
    if std.shape != (p,) or len(names) != p:
        raise ValueError(f"{len(names)} names, {p} values and {std.size} std must match")
    tr = None if truth is None else np.asarray(truth, dtype=float)
    if tr is not None and tr.shape != (p,):
        raise ValueError(f"truth has {tr.size} values for {p} parameters")
    scale = np.abs(values)
    if tr is not None:
        scale = np.maximum(scale, np.abs(tr))
    scale = np.where(scale > 0, scale, 1.0)
    y = np.arange(p)[::-1]
    fig, ax = plt.subplots(figsize=(8.5, 0.22 * p + 1.2))
    ax.errorbar(values / scale, y, xerr=sigma * np.nan_to_num(std) / scale, fmt="o", ms=3,
                color="tab:blue", ecolor="tab:blue", capsize=2,
                label=f"estimate ± {sigma:g}σ")
    if tr is not None:
        ax.plot(tr / scale, y, "x", color="tab:red", ms=5, label="truth")
    ax.set_yticks(y)
    ax.set_yticklabels([f"{nm[:40]}  {v:.4g}" for nm, v in zip(names, values)], fontsize=6)
    ax.axvline(0.0, color="k", lw=0.5)
    ax.set_xlim(-2.0, 2.0)
    ax.set_xlabel("value / max(|value|, |truth|)")
    ax.grid(alpha=0.3, axis="x")
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_stage2(stage2, path) -> Path:
    """Stage-2 coefficients (per joint, value +- 3 std) of an ImprovedModel's stage2_."""
    names = stage2.names
    P, S = stage2.params, stage2.std
    fig, axes = plt.subplots(1, len(names), figsize=(2.6 * len(names), 2.6), squeeze=False)
    x = np.arange(P.shape[0])
    for k, ax in enumerate(axes.flat):
        ax.errorbar(x, P[:, k], yerr=3 * np.nan_to_num(S[:, k]), fmt="o", capsize=3)
        ax.set_xticks(x)
        ax.set_xticklabels([j.joint for j in stage2.joints], rotation=45, fontsize=6)
        ax.set_title(names[k], fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(f"stage-2 coefficients ({stage2.variant} reducer friction), ± 3σ", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)


def plot_decomposition(res, trajectory: str, model: str, path) -> Path:
    """Stacked parts of a model's predicted torque per joint over time."""
    _check_traj(res, trajectory)
    if trajectory not in res.decomposition or model not in res.decomposition[trajectory]:
        raise ValueError(f"no decomposition of model {model!r} on {trajectory!r}")
    parts = {k: v for k, v in res.decomposition[trajectory][model].items() if k != "friction"
             or model == "simplified"}
    t = res.t[trajectory]
    n = next(iter(parts.values())).shape[1]
    fig, axes = _grid(n)
    for j, ax in zip(range(n), axes):
        for comp, arr in parts.items():
            ax.plot(t, arr[:, j], lw=0.9, label=comp)
        ax.set_title(res.joint_names[j], fontsize=9)
        ax.grid(alpha=0.3)
    list(axes)[0].legend(fontsize=6)
    fig.suptitle(f"{trajectory}: parts of the {model} model's predicted torque [N·m]", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)
