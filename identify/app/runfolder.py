"""Stage 7 of the pipeline: the run folder.

    scenario.yaml (resolved)   trajectories/*.yaml   recordings/*.npz   parameters.yaml
    identified.urdf            metrics.json          plots/*.png        report.md, report.html

Documents come from :mod:`identify.app.render`; a failing plot is reported in
``metrics.json``'s ``messages`` and never loses a finished run."""
from __future__ import annotations

import datetime as _dt
import os
import re
import time
from pathlib import Path

import numpy as np

from identify.common.fileio import write_json, write_yaml
from identify.excitation import plots as trajectory_plots
from identify.common import progress
from identify.model.joint_sidecar import write_sidecar
from identify.model.urdf_export import export_urdf
from identify.scenario.spec import Scenario
from identify.validation import plots as ident_plots

from .render import metrics_document, model_tables, parameters_document
from .report import build_report
from .results import Identification, RunInfo, TrajectoryInfo
from .truth import twin_settings


def run_folder(scn: Scenario, out: str | os.PathLike | None) -> Path:
    """The run folder: `out`, or <outputs.dir>/<timestamp>_<name> (never an existing one)."""
    if out is not None:
        p = Path(out)
    else:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", scn.name)
        p = Path(scn.outputs.dir) / f"{stamp}_{safe}"
        k = 1
        while p.exists():
            k += 1
            p = Path(scn.outputs.dir) / f"{stamp}_{safe}-{k}"
    p.mkdir(parents=True, exist_ok=True)
    return p


def resolved_scenario(scn: Scenario, ident: Identification | None = None) -> dict:
    """The scenario as resolved, with the backend's full settings (defaults filled) when known.
    With `ident`: the identification settings actually used (``auto`` keys resolved); a fit
    from logs keeps only the sections that apply (no twin, trajectories, sweep, hardware)."""
    d = scn.resolved()
    if ident is not None and ident.spec is not None:
        import dataclasses as _dc
        d["identification"] = _dc.replace(scn, identification=ident.spec).resolved()[
            "identification"]
    if ident is not None and ident.from_logs:
        for key in ("twin", "trajectories", "sweep", "hardware", "backend"):
            d.pop(key, None)
        return d
    if scn.backend == "twin":
        ts = twin_settings(scn)
        if ts is not None:      # else keep what the user wrote
            d["twin"] = ts
    return d


def plot_limits(model, info: TrajectoryInfo) -> dict:
    """Limits drawn on trajectory plots: those the optimizer used, else the arm's."""
    lu = info.limits_used or {}
    lim = model.limits
    out = {k: np.asarray(getattr(lim, k), float) for k in ("q_min", "q_max", "qd_max", "qdd_max")}
    for k in out:
        if isinstance(lu.get(k), (list, tuple, np.ndarray)):
            out[k] = np.array([np.inf if v is None else v for v in lu[k]], float)
    return out


def _plot_jobs(ident: Identification) -> list:
    """(file stem, function, args, kwargs) of the identification plots."""
    jobs = []
    vres = ident.validation.result
    for label in vres.rms:
        jobs.append((f"torque_{label}", ident_plots.plot_torque_comparison, (vres, label),
                     {"title": f"{ident.signal_name}, {label} trajectory",
                      "signal": ident.signal_name}))
        if label == "validation" or len(vres.rms) == 1:
            jobs.append((f"residual_{label}", ident_plots.plot_residuals, (vres, label),
                         {"signal": ident.signal_name}))
    if "validation" in vres.decomposition and "improved" in vres.decomposition["validation"]:
        jobs.append(("torque_decomposition_validation", ident_plots.plot_decomposition,
                     (vres, "validation", "improved"), {}))
    im, sm = ident.improved, ident.simplified
    if im is not None:
        jobs.append(("param_stage1", ident_plots.plot_parameters, (im.names1_, im.params_, im.std_),
                     {"truth": ident.truth_base,
                      "title": "stage 1 (torque sensor): base parameters, +-3 sigma"}))
        jobs.append(("param_stage2", ident_plots.plot_stage2, (im.stage2_,), {}))
    elif sm is not None:
        jobs.append(("param_simplified", ident_plots.plot_parameters,
                     (sm.names_, sm.params_, sm.std_),
                     {"title": "simplified model parameters, +-3 sigma"}))
    return jobs


def write_plots(folder: Path, ident: Identification, trajs: dict | None, messages: list) -> None:
    """Trajectory plots and identification plots into folder/plots."""
    pdir = folder / "plots"
    pdir.mkdir(exist_ok=True)
    names = list(ident.model.joint_names)
    jobs = [(f"trajectory_{label}", trajectory_plots.plot_trajectory,
             (tr, plot_limits(ident.model, info)),
             {"title": f"{label} trajectory", "joint_names": names})
            for label, (tr, info) in (trajs or {}).items()]
    for stem, fn, args, kw in jobs + _plot_jobs(ident):
        try:
            fn(*args, pdir / f"{stem}.png", **kw)
        except Exception as exc:  # noqa: BLE001 -- a plot never loses a finished run
            what = stem.replace("trajectory_", "trajectory plot (", 1) + ")" \
                if stem.startswith("trajectory_") else f"plot {stem}"
            messages.append(f"{what} failed: {exc}")


def write_run(folder: Path, scn: Scenario, ident: Identification, run: RunInfo, *,
              trajs: dict | None, recs: dict | None) -> dict:
    """Write every output file of a finished run; returns the metrics document."""
    folder = Path(folder)
    out = scn.outputs
    run.messages = list(ident.warnings) + list(run.messages)
    write_yaml(folder / "scenario.yaml", resolved_scenario(scn, ident))
    if trajs:
        for label, (tr, _info) in trajs.items():
            tr.save(folder / "trajectories" / f"{label}.yaml")
    if recs and out.save_recordings:
        for label, rec in recs.items():
            rec.save(folder / "recordings" / f"{label}.npz")
    models = model_tables(ident)
    write_yaml(folder / "parameters.yaml", parameters_document(ident))
    run.files["urdf"] = None
    ex = ident.export
    if out.urdf and ex is not None and ex.inertial is not None:
        try:
            run.files["urdf"] = export_urdf(
                ident.model, folder / "identified.urdf", ex.inertial, viscous=ex.viscous,
                coulomb=ex.coulomb, comment=f"identified by twinid ({scn.name}): {ex.source}",
                name=f"{ident.model.name}_identified").name
            if ex.joint_terms is not None:
                run.files["joint_terms"] = write_sidecar(
                    folder / "identified_joints.yaml", ex.joint_terms,
                    urdf="identified.urdf").name
        except ValueError as exc:
            ex.reason = ex.reason or str(exc)
    if out.urdf and run.files.get("urdf") is None:
        why = ex.reason if ex is not None and ex.reason else "no model was fitted"
        run.messages.append(f"no identified.urdf written: {why}")
        progress.message(f"no identified.urdf written: {why}")
    if out.plots:
        t0 = time.perf_counter()
        write_plots(folder, ident, trajs, run.messages)
        run.timings["plots"] = round(time.perf_counter() - t0, 4)
    metrics = metrics_document(run, ident, models)
    write_json(folder / "metrics.json", metrics)
    return metrics


def finish_run(folder: Path, scn: Scenario, metrics: dict, timings: dict, t0: float) -> None:
    """Final timings into metrics.json, then the report (built from the folder's files)."""
    timings["total"] = round(time.perf_counter() - t0, 4)
    metrics["timings_s"] = timings
    write_json(folder / "metrics.json", metrics)
    if scn.outputs.report:
        build_report(folder)
