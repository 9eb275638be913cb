"""Run reports: ``report.md`` and a self-contained ``report.html`` (images embedded as base64).

The report is built only from the files in a run folder (``scenario.yaml``, ``metrics.json``,
``parameters.yaml``, ``plots/*.png``), so ``twinid report DIR`` rebuilds it at any time::

    from identify.outputs.report import build_report
    build_report("runs/2026-01-01T12-00-00_quickstart")   # -> [report.md, report.html]

Contents: summary and the comparison with the paper's figures (motor-torque RMS of the simplified
and improved joint models on the excitation and validation trajectories), trajectories and
cond(W), RMS per joint / model / trajectory, identified parameters with std and relative std
(and the error against the twin's truth on twin runs), stage-2 joint coefficients next to the
paper's Table 2, timings and the list of files.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import yaml

from identify.common.fileio import atomic_write_text, read_yaml
from identify.common.figures import caption as _caption

from .markup import render_html, render_markdown
from .render import headline_lines
from .transfer import transfer_blocks

__all__ = ["build_report", "PAPER"]

# The paper's figures (reference README): motor-torque RMS [N*m] and the reduction [%].
PAPER = {
    "excitation": {"simplified": 1.6859, "improved": 0.6815, "reduction_percent": 59.58},
    "validation": {"simplified": 1.7045, "improved": 1.5762, "reduction_percent": 7.52},
    "targets_percent": {"excitation": 60.0, "validation": 40.0},
    # Table 2: a1..a5 per joint
    "table2": [[0.402, 1.578, 2.937, 0.515, 0.014], [0.804, 1.139, 7.870, 0.477, 0.009],
               [0.464, 0.822, 3.047, 0.638, 0.029], [0.266, 0.925, 2.721, 0.534, 0.033],
               [0.603, 1.916, 3.690, 0.123, -0.034], [0.282, 0.795, 2.689, 0.614, -0.076]],
}


def _paper_row(joint_name, j: int, n: int) -> list:
    """The paper's Table 2 row for a joint: by the joint's number in its name ("joint3" -> row 3)
    when the run identifies a subset of the six joints, else by position."""
    import re
    m = re.fullmatch(r"\D*(\d+)", str(joint_name or ""))
    k = int(m.group(1)) - 1 if m and n != len(PAPER["table2"]) else j
    return PAPER["table2"][k] if 0 <= k < len(PAPER["table2"]) else [None] * 5


def _fmt(v, digits: int = 4) -> str:
    if v is None:
        return "--"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int,)) and not isinstance(v, bool):
        return str(v)
    try:
        x = float(v)
    except (TypeError, ValueError):
        return str(v)
    if math.isnan(x):
        return "nan"
    if x == 0:
        return "0"
    if abs(x) >= 1e5 or abs(x) < 1e-3:
        return f"{x:.{digits - 1}e}"
    return f"{x:.{digits}g}"


def _load(folder: Path):
    metrics_p = folder / "metrics.json"
    if not metrics_p.is_file():
        raise FileNotFoundError(f"{folder}: not a finished run folder (no metrics.json) nor a "
                                f"trajectory folder (no trajectories.yaml)")
    try:
        metrics = json.loads(metrics_p.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{metrics_p}: not valid JSON ({exc})") from None
    params = {}
    if (folder / "parameters.yaml").is_file():
        params = read_yaml((folder / "parameters.yaml")) or {}
    scenario = {}
    if (folder / "scenario.yaml").is_file():
        scenario = read_yaml((folder / "scenario.yaml")) or {}
    return metrics, params, scenario


def _plot_files(folder: Path, metrics: dict) -> list[Path]:
    """The plots of THIS run: those metrics.json lists under files.plots (a run folder reused
    with --force or plots: false never shows another run's images); folders written before that
    list existed: every plots/*.png."""
    listed = (metrics.get("files") or {}).get("plots")
    if isinstance(listed, list):
        return sorted(folder / p for p in listed if (folder / p).is_file())
    return sorted((folder / "plots").glob("*.png")) if (folder / "plots").is_dir() else []


def _blocks(folder: Path, metrics: dict, params: dict, scenario: dict) -> list[tuple]:
    """The report as a list of blocks: ("h", level, text) / ("p", text) / ("table", head, rows)
    / ("img", relative_path, caption) / ("code", text)."""
    B: list[tuple] = []
    name = metrics.get("name") or scenario.get("name") or folder.name
    B.append(("h", 1, f"twinid run: {name}"))
    desc = scenario.get("description") or metrics.get("description")
    if desc:
        B.append(("p", desc))
    from_logs = metrics.get("source") == "logs"
    if from_logs:
        B += _logs_blocks(folder, metrics)
    else:
        B.append(("p", f"Backend: **{metrics.get('backend', '?')}** -- command: "
                       f"`{metrics.get('command', '?')}` -- created {metrics.get('created', '?')} "
                       f"-- folder `{folder.name}`"))
    B += _warning_blocks(metrics)
    B += _summary_blocks(metrics, from_logs)
    B += _per_joint_blocks(metrics)
    B += _variant_blocks(metrics)
    B += _trajectory_table_blocks(metrics)
    B += _cutoff_selection_blocks(metrics.get("cutoff_selection"))
    B += _control_blocks(metrics)
    B += _plot_blocks(folder, metrics)
    B += _parameter_blocks(params)
    B += _stage2_blocks(params)
    B += _truth_blocks(metrics)
    B += _closing_blocks(folder, metrics)
    return B


def _warning_blocks(metrics: dict) -> list[tuple]:
    """The loud warnings first: results that cannot be trusted."""
    B: list[tuple] = []
    for m in metrics.get("messages") or []:      # a deliberately matched twin law, first
        if str(m).startswith("MATCHED LAW"):
            B.append(("p", f"**{m}**"))
    loud = [m for m in metrics.get("messages") or [] if str(m).startswith("WARNING")]
    if loud:
        B.append(("h", 2, "WARNING: results not trustworthy"))
        for m in loud:
            B.append(("p", f"**{m}**"))
    return B


def _summary_blocks(metrics: dict, from_logs: bool) -> list[tuple]:
    """The motor-torque summary (twin runs) and the RMS against the raw signal and its noise
    floor."""
    B: list[tuple] = []
    rms = metrics.get("rms", {})
    imp = metrics.get("improvement_percent", {})
    if rms and from_logs:
        pass                      # summary in _logs_blocks; per-joint tables below
    elif rms:
        B.append(("h", 2, "Summary: motor-torque RMS, simplified vs improved joint model"))
        B.extend(("p", line.strip()) for line in headline_lines(metrics.get("headline")))
        head = ["trajectory", "simplified [N*m]", "improved [N*m]", "reduction [%]",
                "paper simplified [N*m]", "paper improved [N*m]", "paper reduction [%]",
                "target [%]"]
        rows = []
        for traj in ("excitation", "validation"):
            r = rms.get(traj, {})
            if not r:
                continue
            s = r.get("simplified", {}).get("overall")
            i = r.get("improved", {}).get("overall")
            p = PAPER[traj]
            rows.append([traj, _fmt(s), _fmt(i), _fmt(imp.get(traj)), str(p["simplified"]),
                         str(p["improved"]), str(-p["reduction_percent"]),
                         "<= " + _fmt(-PAPER["targets_percent"][traj])])
        B.append(("table", head, rows))
        B.append(("p", "Reduction = (improved - simplified) / simplified x 100 (negative = the "
                       "improved model is better), as the paper states it. RMS over all joints "
                       "and samples of predicted minus measured link-side motor torque eta*beta*i. "
                       "Measured = the RAW sensor signal (neither smoothed nor low-passed); the "
                       "predictions use the processed states."))
        floor = metrics.get("noise_floor", {})
        ratio = metrics.get("rms_over_noise_floor", {})
        filt = metrics.get("rms_filtered_target", {})
        if floor:
            head = ["trajectory", "model", "RMS vs raw [N*m]", "noise floor [N*m]",
                    "RMS / floor", "RMS vs filtered target [N*m]"]
            rows = []
            for traj in ("excitation", "validation"):
                for m, r in rms.get(traj, {}).items():
                    if not isinstance(r, dict) or m.startswith("improved_"):
                        continue
                    f = floor.get(traj, {}).get("tau_j" if m == "stage1_tau_j" else "tau_m", {})
                    rows.append([traj, m, _fmt(r.get("overall")), _fmt(f.get("overall")),
                                 _fmt(ratio.get(traj, {}).get(m)),
                                 _fmt(filt.get(traj, {}).get(m, {}).get("overall"))])
            B.append(("h", 3, "RMS against the raw signal, its noise floor, and the filtered-target "
                              "figure"))
            B.append(("table", head, rows))
            src = sorted({f.get("source", "?") for fl in floor.values() for f in fl.values()})
            B.append(("p", "Noise floor: " + ", ".join(src) + ". RMS / floor = 1 means the model "
                           "explains everything but the sensor noise. The filtered-target figure "
                           "compares with the smoothed, low-passed signal the fit saw; it is "
                           "lower by the removed noise and is not agreement with the sensor."))
    return B


def _per_joint_blocks(metrics: dict) -> list[tuple]:
    """RMS per joint of each trajectory and model."""
    B: list[tuple] = []
    rms = metrics.get("rms", {})
    if rms:
        for traj in ("excitation", "validation"):
            r = rms.get(traj, {})
            models = [m for m in r if isinstance(r[m], dict) and "per_joint" in r[m]]
            if not models:
                continue
            n = len(r[models[0]]["per_joint"])
            jn = metrics.get("joint_names")
            head = (["model"] + (list(jn) if isinstance(jn, list) and len(jn) == n
                                 else [f"joint {j + 1}" for j in range(n)]) + ["overall"])
            rows = [[m] + [_fmt(v) for v in r[m]["per_joint"]] + [_fmt(r[m].get("overall"))]
                    for m in models]
            sig = metrics.get("signal", "motor torque")
            B.append(("h", 3, f"RMS per joint, {traj} trajectory [N*m], {sig}"
                              + ("; stage1_tau_j: joint torque" if "stage1_tau_j" in models
                                 else "")))
            B.append(("table", head, rows))
    return B


def _variant_blocks(metrics: dict) -> list[tuple]:
    """The improved model's reducer-friction variants."""
    B: list[tuple] = []
    var = metrics.get("improved_variants_rms_closed_form")
    if var:
        fc = metrics.get("friction_term_comparison", {})
        B.append(("h", 3, "Improved model: reducer-friction variants (closed-form prediction)"))
        trajs = sorted({t for v in var.values() for t in v})
        head = ["variant"] + [f"{t} RMS [N*m]" for t in trajs] + ["stage-2 fit RMS [N*m]"]
        rows = [[v] + [_fmt(r.get(t)) for t in trajs] + [_fmt(fc.get("rms_Nm", {}).get(v))]
                for v, r in var.items()]
        B.append(("table", head, rows))
        B.append(("p", f"linear = the paper's a1*tau'_m; opposing = a loss that always opposes "
                       f"motion; both = the two together. Variant used for the headline figures: "
                       f"**{metrics.get('improved_variant', '?')}** (better stage-2 fit on the "
                       f"identification data: {fc.get('better', '?')})."))
    return B


def _trajectory_table_blocks(metrics: dict) -> list[tuple]:
    """cond(W_base), duration and source of each trajectory, and the held data."""
    B: list[tuple] = []
    cond = metrics.get("cond_W", {})
    traj_info = metrics.get("trajectories", {})
    if cond or traj_info:
        B.append(("h", 2, "Trajectories"))
        head = ["trajectory", "cond(W_base)", "duration [s]", "harmonics", "samples", "source"]
        rows = []
        for k in ("excitation", "validation", "payload"):
            ti = traj_info.get(k, {})
            if not ti and k not in cond:
                continue
            rows.append([k, _fmt(cond.get(k, ti.get("cond"))), _fmt(ti.get("duration_s")), _fmt(ti.get("harmonics")),
                         _fmt(ti.get("samples")), ti.get("source", "--")])
        B.append(("table", head, rows))
        B.extend(_held_blocks(traj_info.get("excitation", {}).get("held")))
    return B


def _plot_blocks(folder: Path, metrics: dict) -> list[tuple]:
    """The plots, grouped, each with its caption."""
    B: list[tuple] = []
    plots = _plot_files(folder, metrics)
    order = ("trajectory", "torque", "residual", "torque_decomposition", "param", "sweep")
    for group in order:
        sel = [p for p in plots if p.stem.startswith(group) and (
            group == "torque_decomposition" or not p.stem.startswith("torque_decomposition"))]
        if not sel:
            continue
        title = {"trajectory": "Trajectory plots",
                 "torque": f"Measured vs predicted {metrics.get('signal', 'motor torque')}",
                 "residual": "Residuals", "torque_decomposition": "Parts of the predicted torque",
                 "param": "Parameters", "sweep": "Sweep"}[group]
        B.append(("h", 2, title))
        for p in sel:
            B.append(("img", os.path.relpath(p, folder), _caption(p.stem)))
    rest = [p for p in plots if not p.stem.startswith(order + ("closed_loop", "collision"))]
    if rest:
        B.append(("h", 2, "Other plots"))
        for p in rest:
            B.append(("img", os.path.relpath(p, folder), _caption(p.stem)))
    return B


def _parameter_blocks(params: dict) -> list[tuple]:
    """Every value table of parameters.yaml, with units."""
    B: list[tuple] = []
    for model_key, model in (params.get("models") or {}).items():
        for block_key, table in (model or {}).items():
            # value tables only (the stage-2 block, with per-joint rows, has its own section)
            if not isinstance(table, dict) or "names" not in table or "value" not in table:
                continue
            B.append(("h", 2, f"Parameters: {model_key} / {block_key}"))
            if table.get("note"):
                B.append(("p", table["note"]))
            names = table["names"]
            if "poorly_excited_count" in table:
                B.append(("p", f"Poorly excited (std > |value|): **{table['poorly_excited_count']}** "
                               f"of {len(names)} parameters (marked below)."))
            cols = [("value", "value"), ("std", "std"), ("rel_std_percent", "rel. std [%]"),
                    ("truth", "truth"), ("error_percent", "error [%]"),
                    ("z", "z = error / std")]
            cols = [c for c in cols if c[0] in table]
            head = ["parameter", "unit"] + [c[1] for c in cols]
            pe = table.get("poorly_excited")
            if pe is not None:
                head.append("poorly excited")
            nz = table.get("truth_near_zero") or [False] * len(names)
            rows = [[str(nm), _unit(nm)] + [("—" if c == "error_percent" and nz[i]
                                            else _fmt(table[c][i]))
                                 for c, _ in cols]
                    + ([] if pe is None else ["yes" if pe[i] else ""]) for i, nm in enumerate(names)]
            B.append(("table", head, rows))
    return B


def _stage2_blocks(params: dict) -> list[tuple]:
    """The improved model's stage-2 coefficients (and a1..a5 vs the paper's Table 2)."""
    B: list[tuple] = []
    s2 = (params.get("models") or {}).get("improved", {}).get("stage2")
    if isinstance(s2, dict) and "params" in s2:
        B.append(("h", 2, f"Stage-2 joint coefficients ({s2.get('variant', '?')} reducer friction)"))
        B.append(("p", "Per joint, value +- std. xi: reducer (harmonic-drive) friction coefficient; "
                       "f_mc, f_mv: motor-side Coulomb [N*m] and viscous [N*m*s/rad] friction; J_m: "
                       "reflected motor inertia [kg*m^2]; J_m/K: compliance term (see "
                       "docs/joint_models.md)."))
        if "poorly_excited_count" in s2:
            B.append(("p", f"Poorly excited (std > |value|, or no std; marked *): "
                           f"**{s2['poorly_excited_count']}** of "
                           f"{sum(len(r) for r in s2['params'])} coefficients"
                           + (": " + ", ".join(s2["poorly_excited_names"])
                              if s2.get("poorly_excited_names") else "") + "."))
        if "noise_dominated" in s2:
            nd = s2.get("noise_dominated_names") or []
            B.append(("p", f"Noise-dominated (regressor column tau_r or taudd_r more than half "
                           f"sensor noise: not identifiable, std nan; marked #): "
                           f"**{len(nd)}**" + (": " + ", ".join(nd) if nd else "") + "."))
        if "xi_identified" in s2 and not all(s2["xi_identified"]):
            bad = [nm for nm, ok in zip(s2.get("joints", []), s2["xi_identified"]) if not ok]
            B.append(("p", "xi not identified (the data do not fix it, e.g. a torque-sensor "
                           "signal too small; fixed at 0, the motor-side coefficients absorb "
                           "it): " + ", ".join(bad) + "."))
        if s2.get("truth_not_applicable"):
            B.append(("p", "Stage-2 ground truth **not applicable**: "
                           + "; ".join(s2["truth_not_applicable"]) + "."))
        head = ["joint"] + [f"{nm} [{_S2_UNITS.get(nm, '?')}]" for nm in s2["names"]] \
            + ["fit RMS [N*m]"]
        rows = []
        for j, (vals, sds) in enumerate(zip(s2["params"], s2["std"])):
            name = s2.get("joints", [])[j] if j < len(s2.get("joints", [])) else str(j + 1)
            truth = s2["truth"][j] if "truth" in s2 else [None] * len(vals)
            flags = s2["poorly_excited"][j] if "poorly_excited" in s2 else [False] * len(vals)
            noisy = s2["noise_dominated"][j] if "noise_dominated" in s2 else [False] * len(vals)
            rows.append([name] + [f"{_fmt(v)} +- {_fmt(sd, 2)}" + ("*" if f else "")
                                  + ("#" if nd else "")
                                  + ("" if t is None else f" (truth {_fmt(t)})")
                                  for v, sd, t, f, nd in zip(vals, sds, truth, flags, noisy)]
                        + [_fmt(s2.get("rms_Nm", [None] * (j + 1))[j])])
        B.append(("table", head, rows))
        if "eiv_bias" in s2 or "tau_int" in s2:
            B.append(("p", "Uncertainty ingredients per coefficient: estimated errors-in-variables "
                           "bias (noise of the measured tau_r in the regressor; included in the "
                           "std) / integrated autocorrelation time tau_int [samples] (the "
                           "variance is inflated by it; nan for a fixed xi)."))
            head = ["joint"] + list(s2["names"])
            rows = []
            for j in range(len(s2["params"])):
                name = s2.get("joints", [])[j] if j < len(s2.get("joints", [])) else str(j + 1)
                eb = (s2.get("eiv_bias") or [[None] * len(s2["names"])] * (j + 1))[j]
                ti = (s2.get("tau_int") or [[None] * len(s2["names"])] * (j + 1))[j]
                rows.append([name] + [f"{_fmt(b, 2)} / {_fmt(t, 3)}" for b, t in zip(eb, ti)])
            B.append(("table", head, rows))
    if isinstance(s2, dict) and "a" in s2:
        B.append(("h", 2, "Stage-2 joint coefficients a1..a5 vs the paper's Table 2"))
        head = ["joint"] + [f"a{k + 1}" for k in range(5)] + [f"paper a{k + 1}" for k in range(5)]
        rows = []
        jn = s2.get("joints") or [f"joint{j + 1}" for j in range(len(s2["a"]))]
        ape = s2.get("a_poorly_excited")
        for j, row in enumerate(s2["a"]):
            paper = _paper_row(jn[j] if j < len(jn) else None, j, len(s2["a"]))
            flags = ape[j] if ape is not None and j < len(ape) else [False] * 5
            rows.append([str(jn[j]) if j < len(jn) else str(j + 1)]
                        + [_fmt(v) + ("*" if f else "") for v, f in zip(row[:5], flags)]
                        + [_fmt(v) for v in paper])
        B.append(("table", head, rows))
    return B


def _truth_blocks(metrics: dict) -> list[tuple]:
    """The prior of the consistent fit, where the twin's truth applies, and the parameter
    errors against it."""
    B: list[tuple] = []
    prior = metrics.get("prior")
    if isinstance(prior, dict):
        B.append(("h", 2, "Prior of the physically consistent fit / URDF export"))
        B.append(("p", f"Prior used: **{prior.get('kind', '?')}** (requested: "
                       f"{prior.get('requested', '?')}) -- {prior.get('note', '')}."))
    tr = metrics.get("truth")
    if isinstance(tr, dict):
        for stage, reasons in (tr.get("not_applicable") or {}).items():
            if reasons:
                B.append(("p", f"Ground truth for {stage.replace('stage', 'stage ')} **not "
                               f"applicable**: " + "; ".join(reasons) + "."))
    pe = metrics.get("parameter_errors")
    if pe:
        B.append(("h", 2, "Parameter errors against the twin's ground truth"))
        head = ["model", "parameters", "median |error| [%]", "max |error| [%]", "within 3 sigma",
                "skipped (no std)"]
        rows = [[k, _fmt(v.get("count")), _fmt(v.get("median_abs_error_percent")),
                 _fmt(v.get("max_abs_error_percent")),
                 f"{v.get('within_3sigma', '--')}/{v.get('count', '--')}",
                 _fmt(v.get("skipped_count", 0))]
                for k, v in pe.items() if isinstance(v, dict)]
        B.append(("table", head, rows))
        for k, v in pe.items():
            sk = v.get("skipped") if isinstance(v, dict) else None
            if sk:
                by: dict = {}
                for e in sk:
                    by.setdefault(e.get("reason", "?"), []).append(e.get("name", "?"))
                B.append(("p", f"{k}: {len(sk)} skipped (not counted): "
                               + "; ".join(f"{', '.join(nms)} -- {why}" for why, nms in by.items())
                               + "."))
    return B


def _closing_blocks(folder: Path, metrics: dict) -> list[tuple]:
    """Messages, timings and the folder's files."""
    B: list[tuple] = []
    quiet = [m for m in metrics.get("messages") or [] if not str(m).startswith("WARNING")]
    if quiet:
        B.append(("h", 2, "Messages"))
        B.append(("code", "\n".join(str(m) for m in quiet)))
    timings = metrics.get("timings_s", {})
    if timings:
        B.append(("h", 2, "Timings"))
        B.append(("table", ["step", "wall time [s]"], _timing_rows(timings)))
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*")
                   if p.is_file() and p.name not in ("report.md", "report.html", ".twinid.lock"))
    B.append(("h", 2, "Files"))
    B.append(("code", "\n".join(files)))
    return B


#: units of the stage-2 coefficients (identify.validation.plots.STAGE2_UNITS, docs/joint_models.md)
_S2_UNITS = {"xi_lin": "-", "xi_opp": "-", "f_mc": "N*m", "f_mv": "N*m*s/rad", "J_m": "kg*m^2",
             "J_m/K": "s^2"}
_PARAM_UNITS = {"m": "kg", "mx": "kg*m", "my": "kg*m", "mz": "kg*m", "fv": "N*m*s/rad",
                "fc": "N*m", "fo": "N*m", "Ia": "kg*m^2"}


def _unit(name) -> str:
    """Unit of a (base) parameter by its first term: m1 kg, mx2 kg*m, XX3 .. ZZ6 kg*m^2 (about
    the joint frame's origin), fv N*m*s/rad, fc / fo N*m, Ia kg*m^2; the terms of a base
    combination share it."""
    import re
    m = re.match(r"\s*(?:[-+]?[\d.]+\*)?([A-Za-z]+)\d", str(name))
    if not m:
        return "?"
    key = m.group(1)
    if re.fullmatch(r"[XYZ]{2}", key):
        return "kg*m^2"
    return _PARAM_UNITS.get(key, "?")


def _timing_rows(timings: dict) -> list:
    """Steps, then "other" (the total minus the steps: arm model, design set-up, writing the
    folder, the report), then the totals, so that the table adds up."""
    steps = {k: v for k, v in timings.items() if not str(k).startswith("total")}
    totals = {k: v for k, v in timings.items() if str(k).startswith("total")}
    rows = [[k, _fmt(v)] for k, v in steps.items()]
    total = totals.get("total")
    try:
        other = float(total) - sum(float(v) for v in steps.values())
    except (TypeError, ValueError):
        other = None
    if other is not None and other > 0:
        rows.append(["other (not in a step: arm model, design set-up, writing the run "
                     "folder, report)", _fmt(other)])
    return rows + [[k, _fmt(v)] for k, v in totals.items()]


def _held_blocks(held: dict | None) -> list[tuple]:
    """Data already held that the excitation was designed with and fitted together with."""
    if not held:
        return []
    rows = [[s.get("key"), s.get("kind"), s.get("file"), _fmt(s.get("samples")),
             _fmt(s.get("duration_s"))] for s in held.get("sources", [])]
    return [("h", 3, "Data already held (fitted together with the excitation recording)"),
            ("table", ["key", "kind", "file", "samples", "duration [s]"], rows),
            ("p", f"Median predicted relative std of the base parameters: held data alone "
                  f"{_fmt(held.get('median_rel_std_held'))} (rank of their information "
                  f"{held.get('rank')} of {held.get('n_base')}), new trajectory alone "
                  f"{_fmt(held.get('median_rel_std_new_alone'))}; the excitation's figures "
                  f"are for the combined estimate.")]


def _logs_blocks(folder: Path, metrics: dict) -> list[tuple]:
    """Header and summary of a ``twinid fit`` run: its logs, the fitted signal, the headline
    model's and the exported model's RMS (no paper targets: those are the twin's)."""
    B: list[tuple] = [("p", f"Source: **logs** -- command: `{metrics.get('command', '?')}` -- "
                            f"created {metrics.get('created', '?')} -- folder `{folder.name}`")]
    tr = metrics.get("trajectories", {})
    rows = [[k, str(v.get("source", "?")), _fmt(v.get("duration_s")), _fmt(v.get("samples")),
             str(v.get("resampled"))] for k, v in tr.items()]
    if rows:
        B.append(("table", ["log", "file", "duration [s]", "samples", "resampled"], rows))
    sig = metrics.get("signal", "?")
    head_model = metrics.get("headline_model", "?")
    B.append(("h", 2, "Summary: RMS of the fitted models and of the exported model"))
    B.append(("p", f"Fitted signal: **{sig}**; headline model: **{head_model}**. RMS over all "
                   f"joints and samples of predicted minus measured {sig} [N*m]."))
    B.extend(("p", line.strip()) for line in headline_lines(metrics.get("headline")))
    rms, ex = metrics.get("rms", {}), metrics.get("export", {})
    rows = []
    for traj in ("excitation", "validation"):
        r = rms.get(traj, {})
        if not r:
            continue
        rows.append([traj] + [_fmt(r.get(m, {}).get("overall")) for m in ("simplified", "improved")]
                    + [_fmt(ex.get("rms", {}).get(traj, {}).get("overall"))])
    ex_sig = ex.get("signal") or sig
    B.append(("table", ["trajectory", f"simplified [N*m] ({sig})", f"improved [N*m] ({sig})",
                        f"exported model [N*m] ({ex_sig})"], rows))
    if ex.get("written"):
        B.append(("p", "Exported model: `identified.urdf` + `identified_joints.yaml` ("
                       + str(ex.get("formula", "")) + f"); from the {ex.get('source', '?')}."))
    else:
        B.append(("p", f"**No identified.urdf written**: {ex.get('reason') or 'see messages'}."))
    return B + _friction_selection_blocks(metrics.get("friction_selection"))


def _friction_selection_blocks(sel: dict | None) -> list[tuple]:
    """identification.friction: auto -- the terms chosen per joint, their CV scores and why,
    and the candidates visited (metrics.json friction_selection; docs/friction-terms.md)."""
    if not sel:
        return []
    B: list[tuple] = [("h", 2, "Friction terms chosen by cross-validation"),
                      ("p", str(sel.get("method", "")) + ". CV RMS: the square root of the "
                            "folds' geometric-mean squared error of the joint's torque [N*m], on "
                            "the identification data only.")]
    rows = [[j["joint"], " + ".join(j["chosen"]) or "(rigid body only)",
             _fmt(j.get("chosen_cv_rms_Nm")), " + ".join(j["best_cv"]),
             _fmt(j.get("best_cv_rms_Nm")), j.get("why", "")] for j in sel.get("joints", [])]
    B.append(("table", ["joint", "chosen", "CV RMS [N*m]", "best by CV", "best CV RMS [N*m]",
                        "why"], rows))
    rows = [[j["joint"], " + ".join(c["terms"]), str(c["n_coefficients"]), _fmt(c["cv_rms_Nm"]),
             _fmt(c.get("log_mse_ratio_to_best"), 3), _fmt(c.get("se_of_log_ratio"), 3)]
            for j in sel.get("joints", []) for c in j.get("candidates", [])]
    B.append(("table", ["joint", "candidate", "coefficients", "CV RMS [N*m]",
                        "log MSE ratio to best", "SE"], rows))
    return B


def _cutoff_selection_blocks(sel: dict | None) -> list[tuple]:
    """processing.butter_cutoff_hz: auto -- the candidates, their CV scores, the choice and
    why, and the cutoff each joint alone would prefer (metrics.json cutoff_selection;
    docs/joint_models.md "Processing bandwidth")."""
    if not sel:
        return []
    names = [j["joint"] for j in sel.get("joints", [])]
    B: list[tuple] = [("h", 2, "Processing bandwidth chosen by cross-validation"),
                      ("p", f"{sel.get('method', '')}. Chosen: **{_fmt(sel.get('chosen_hz'))} Hz**"
                            f" -- {sel.get('why', '')}. CV RMS: the square root of the folds' "
                            f"geometric-mean squared error against the raw "
                            f"{sel.get('signal', '?')} [N*m]; trajectory bandwidth "
                            f"{_fmt(sel.get('trajectory_band_hz'))} Hz.")]
    rows = [[_fmt(c["cutoff_hz"]) + (" (chosen)" if c["cutoff_hz"] == sel.get("chosen_hz")
                                     else ""), _fmt(c["cv_rms_Nm"]),
             _fmt(c.get("log_mse_ratio_to_best"), 3), _fmt(c.get("se_of_log_ratio"), 3)]
            + [_fmt(v) for v in c.get("cv_rms_per_joint_Nm", [])]
            for c in sel.get("candidates", [])]
    B.append(("table", ["cutoff [Hz]", "CV RMS [N*m]", "log MSE ratio to best", "SE"]
              + [f"{nm} [N*m]" for nm in names], rows))
    B.append(("table", ["joint", "its own best cutoff [Hz]", "applied [Hz]"],
              [[j["joint"], _fmt(j["best_cv_hz"]), _fmt(j["chosen_hz"])]
               for j in sel.get("joints", [])]))
    return B


def _trajectory_blocks(folder: Path) -> list[tuple]:
    """Report of a trajectory folder (``twinid trajectory``): what it is, cond(W) and the
    limits used per trajectory, and the plots."""
    try:
        doc = read_yaml((folder / "trajectories.yaml")) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"{folder / 'trajectories.yaml'}: not valid YAML ({exc})") from None
    B: list[tuple] = [("h", 1, f"twinid trajectories: {doc.get('name', folder.name)}")]
    B.append(("p", "A trajectory folder written by `twinid trajectory` (no identification was "
                   "run): the optimized excitation and validation trajectories as Fourier "
                   "coefficients. Use one in a scenario with `trajectories.<label>: {source: "
                   "file, file: <folder>/<label>.yaml}`."))
    trajs = doc.get("trajectories") or {}
    head = ["trajectory", "cond(W_base)", "duration [s]", "harmonics", "source", "file"]
    rows = [[k, _fmt(v.get("cond")), _fmt(v.get("duration_s")), _fmt(v.get("harmonics")),
             str(v.get("source", "--")), f"{k}.yaml"] for k, v in trajs.items()
            if isinstance(v, dict)]
    B.append(("table", head, rows))
    for p in sorted(folder.glob("*.png")):
        B.append(("img", p.name, _caption(f"trajectory_{p.stem}")))   # excitation.png ...
    timings = doc.get("timings_s") or {}
    if timings:
        B.append(("h", 2, "Timings"))
        B.append(("table", ["step", "wall time [s]"], _timing_rows(timings)))
    return B


def _control_blocks(metrics: dict) -> list[tuple]:
    """Closed loop, collision detection and payload sections (identify.control), when present."""
    B: list[tuple] = []
    cl = metrics.get("closed_loop")
    if cl:
        B.append(("h", 2, "Closed loop: torque feed-forward"))
        cases = list(cl.get("tracking_rms_rad", {}))
        head = ["case", "tracking RMS [mrad]", "max |error| [mrad]", "PID torque RMS [N*m]"]
        rows = [[c, _fmt(1e3 * cl["tracking_rms_rad"][c]), _fmt(1e3 * cl["max_error_rad"][c]),
                 _fmt(cl["pid_torque_rms_Nm"][c])] for c in cases]
        B.append(("table", head, rows))
        g = cl.get("goals", {})
        B.append(("p", f"Same gains, same trajectory ({cl.get('trajectory')}), same sensor noise; "
                       f"error of the {cl.get('state_source')} link angle against the drive's set "
                       f"point. identified / PID only = {_fmt(g.get('identified_vs_pid'))} (goal "
                       f"<= {g.get('goal_vs_pid')}), identified / true model = "
                       f"{_fmt(g.get('identified_vs_true'))} (goal <= {g.get('goal_vs_true')})."))
        B.append(("img", "plots/closed_loop_tracking.png", _caption("closed_loop_tracking")))
    col = metrics.get("collision")
    if col:
        B.append(("h", 2, "Collision detection: momentum observer"))
        head = ["model", "detected", "delay [ms]", "false alarms (free run)",
                "false alarms (contact run)", "thresholds [N*m]"]
        rows = [[k, str(v.get("detected")), _fmt(v.get("detection_delay_ms")),
                 _fmt(v.get("false_alarms")), _fmt(v.get("false_alarms_contact_run")),
                 ", ".join(_fmt(x, 3) for x in v.get("threshold_Nm", []))]
                for k, v in col.get("models", {}).items()]
        B.append(("table", head, rows))
        c = col.get("contact", {})
        B.append(("p", f"Contact: {c.get('force_N')} N on {c.get('link')} at {c.get('time_s')} s for "
                       f"{c.get('duration_s')} s; observer input {col.get('signal')}, gain "
                       f"{col.get('observer_gain_per_s')} 1/s; thresholds from a collision-free "
                       f"run of the same trajectory ({col.get('threshold_rule')}). Goal: detected "
                       f"within 50 ms, 0 false alarms."))
        B.append(("img", "plots/collision.png", _caption("collision")))
    if metrics.get("collision_transfer"):
        B += transfer_blocks(metrics["collision_transfer"])
    pl = metrics.get("payload")
    if pl:
        B.append(("h", 2, "Payload identification"))
        head = ["", "mass [kg]", "CoM [mm]", "inertia about CoM [kg*m^2] (xx, yy, zz, xy, xz, yz)"]
        rows = []
        for k in ("identified", "std", "truth"):
            v = pl.get(k)
            if v:
                rows.append([k, _fmt(v["mass_kg"], 5), ", ".join(_fmt(1e3 * x, 3) for x in v["com_m"]),
                             ", ".join(_fmt(x, 3) for x in v["inertia_kgm2"])])
        B.append(("table", head, rows))
        e = pl.get("errors", {})
        if e.get("mass_percent") is not None:
            B.append(("p", f"Mass error {_fmt(e['mass_percent'])} %, CoM error "
                           f"{_fmt(1e3 * e['com_m'])} mm (goal 2 %, 5 mm); signal {pl.get('signal')}, "
                           f"arm: {pl.get('arm_source')}."))
    return B


def build_report(folder: str | os.PathLike) -> list[Path]:
    """(Re)write ``report.md`` and ``report.html`` of a run folder -- or of a trajectory folder
    written by ``twinid trajectory`` -- and return their paths.

    Raises FileNotFoundError if the folder holds neither metrics.json (a finished run) nor
    trajectories.yaml (a trajectory folder)."""
    folder = Path(folder)
    if not (folder / "metrics.json").is_file() and (folder / "trajectories.yaml").is_file():
        blocks = _trajectory_blocks(folder)
        title = f"twinid trajectories {folder.name}"
        md, ht = folder / "report.md", folder / "report.html"
        atomic_write_text(md, render_markdown(blocks))
        atomic_write_text(ht, render_html(blocks, folder, title))
        return [md, ht]
    metrics, params, scenario = _load(folder)
    blocks = _blocks(folder, metrics, params, scenario)
    md = folder / "report.md"
    ht = folder / "report.html"
    atomic_write_text(md, render_markdown(blocks))
    atomic_write_text(ht, render_html(blocks, folder, f"twinid run {metrics.get('name', folder.name)}"))
    return [md, ht]
