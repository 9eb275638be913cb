"""The whole pipeline, driven by a :class:`~identify.scenario.Scenario`:

    arm model -> trajectories -> backend run -> identification -> run folder -> report

    from identify.scenario import load_scenario
    from identify.app.pipeline import run_scenario
    res = run_scenario(load_scenario("scenarios/quickstart.yaml"), out="runs/demo")
    res.folder, res.metrics, res.identification

Each stage is a module of :mod:`identify.app` (reused by :mod:`identify.app.sweep`):
:mod:`~identify.app.trajectories`, :mod:`~identify.app.acquisition`,
:mod:`~identify.app.identification`, :mod:`~identify.outputs.runfolder`; the data passed between
them are the types of :mod:`identify.outputs.results`."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from identify.common import progress
from identify.common.errors import InputError
from identify.common.fileio import atomic_write_text, input_bytes, write_yaml
from identify.excitation.export import DEFAULT_RATE_HZ
from identify.excitation.plots import plot_trajectory
from identify.logs.held import load_held
from identify.logs.load import gains_from_drives, load_segments
from identify.outputs import layout
from identify.outputs.plotpool import plot_pool
from identify.outputs.render import console_summary, trajectory_document
from identify.outputs.results import Identification, TrajectoryInfo
from identify.outputs.runfolder import (claim_run_folder, finish_run, plot_limits,
                                       sampled_job, trajectory_plot_jobs, write_run,
                                       write_sampled)
from identify.scenario.spec import Scenario, ScenarioError

from .acquisition import preflight, record
from .control_run import closed_loop_run, control_only
from .identification import identify_recordings
from .inputs import (build_model, check_budget, log_processing, log_specs, require_backend_files,
                     resolved_scenario, run_info)
from .trajectories import trajectories
from .truth import matched_law_messages

__all__ = ["RunResult", "run_scenario", "fit_scenario", "trajectories_only"]


@dataclass(frozen=True)
class RunResult:
    """What a command produced: its run folder, the metrics document written there (rendered
    once, at the end) and the identification (None without one)."""
    folder: Path
    metrics: dict
    identification: Identification | None = None


#: cond(W_base) of a trajectory beyond which the identification is flagged as hopeless (well
#: designed excitation trajectories of the reference arm reach 30-60; 1e3 means some base
#: parameters are barely seen by the data)
COND_HOPELESS = 1.0e3


def conditioning_warnings(trajs: dict, ident: Identification) -> list[str]:
    """Loud warnings for results that cannot be trusted: cond(W_base) of a trajectory beyond
    :data:`COND_HOPELESS` (an excitation fitted with held data: the measured cond of the
    stacked rows), most parameters poorly excited (std > |value|), or a model misfit flagged by
    the estimator (``misfit_``: identify.estimation.estimators.MISFIT_RATIO)."""
    out = []
    for label, info in (trajs or {}).items():
        cond = getattr(info, "cond", None)
        what = f"{label} trajectory"
        if getattr(info, "held", None) is not None:     # fitted with held data: the stack counts
            cond = ident.validation.cond_measured.get(label, cond)
            what = f"{label} data (held + new, as fitted)"
        if cond is not None and np.isfinite(cond) and cond > COND_HOPELESS:
            out.append(f"WARNING: hopeless conditioning: cond(W_base) of the {what} "
                       f"is {cond:.3g} (> {COND_HOPELESS:g}; good excitation trajectories reach "
                       f"30-60): the identified parameters are not trustworthy")
    for label, fit in (("improved model stage 1", ident.improved),
                       ("simplified model", ident.simplified)):
        if fit is None or getattr(fit, "std_", None) is None:
            continue
        std, val = np.asarray(fit.std_, float), np.asarray(fit.params_, float)
        bad = int(np.sum(~(std <= np.abs(val))))
        if bad > val.size / 2:
            out.append(f"WARNING: {bad} of {val.size} parameters of the {label} are poorly "
                       f"excited (std > |value|): the trajectory does not excite them")
        est = getattr(fit, "stage1_", None) or getattr(fit, "estimator_", None)
        if getattr(est, "misfit_", False):
            out.append(f"WARNING: model misfit in the {label}: the estimates on contiguous "
                       f"blocks of the data disagree {est.jackknife_ratio_:.2f}x more than the "
                       f"residual noise explains (block jackknife / sandwich std, median over the "
                       f"parameters; noise alone gives about 1-1.5): the residual is a model "
                       f"error, not noise. The std are the jackknife's where larger, and still "
                       f"lower bounds (a bias every block shares is not in them)")
    return out


def run_scenario(scn: Scenario, out=None, *, force: bool = False, yes: bool = False) -> RunResult:
    """``twinid run``: budget -> claim the run folder -> preflight -> trajectories -> backend ->
    identification -> run folder (-> closed loop with a ``closed_loop:`` section; a ``payload:``
    section identifies the payload instead, and ``closed_loop.model`` skips the identification:
    :mod:`identify.app.control_run`). Nothing is computed before the estimate is within budget
    (or `yes`) and the folder is claimed (writable, room, not used by another command)."""
    if scn.payload is not None or (scn.closed_loop is not None and scn.closed_loop.model is not None):
        with claim_run_folder(scn, out, force=force) as folder:
            return RunResult(*control_only(scn, folder, "run"))
    from identify.scenario.budget import estimate_run
    from .trajectories import estimate_cache_state
    timings: dict = {}
    t0 = time.perf_counter()
    require_backend_files(scn)
    model = build_model(scn)
    est = estimate_run(scn, model.n, **estimate_cache_state(scn, model))
    check_budget(est, yes)
    with claim_run_folder(scn, out, force=force, need_bytes=int(est.disk_bytes)) as folder:
        preflight(scn, model)
        # the data already held, read once: the design and the fit both use them
        held_warnings: list = []
        held = (load_held(scn, model.joint_names, model, held_warnings)
                if scn.trajectories.excitation.held else None)
        trajs = trajectories(scn, model, timings, held)
        # plot workers forked after the design (its parallel starts fork themselves) and warmed
        # while the arm runs and the fit is computed; none beside a hardware run's loop
        with plot_pool(scn.outputs.plots and scn.backend != "hardware") as pool:
            if pool is not None:    # one drawer beside the arm's run (one core stays its own)
                (folder / layout.PLOTS).mkdir(exist_ok=True)
                pool.send([sampled_job(folder, model, trajs)]
                          + trajectory_plot_jobs(folder, model, trajs), workers=1)
            return _run_rest(scn, model, folder, trajs, timings, held, held_warnings, t0, pool)


def _run_rest(scn, model, folder, trajs, timings, held, held_warnings, t0, pool) -> "RunResult":
    """``run`` after the design: the arm runs the trajectories, the fit, the run folder."""
    settings = None
    if scn.backend == "hardware":        # samples stream into the run folder, kept on a stop
        settings = scn.backend_settings()
        settings.setdefault("record_dir", str(folder / layout.RECORDINGS))
    recs = record(scn, trajs, model=model, timings=timings, settings=settings)
    if settings is not None and settings.get("dry_run"):
        return _dry_run_result(folder, recs)
    ident = identify_recordings(scn, model, recs, timings=timings, held=held)
    ident.warnings[:0] = held_warnings
    timings["total_before_outputs"] = round(time.perf_counter() - t0, 4)
    run = run_info(scn, "run", timings)
    run.messages[:0] = matched_law_messages(recs)
    for label, (_tr, info) in trajs.items():
        info.samples = recs[label].n_samples
        run.trajectories[label] = info
    return _write_identification(folder, scn, ident, run, t0, trajs=trajs, recs=recs,
                                 plots=pool)


def _write_identification(folder: Path, scn: Scenario, ident: Identification, run, t0: float, *,
                          trajs: dict | None, recs: dict, plots=None) -> RunResult:
    """The end of ``run`` and ``fit``: loud warnings, the run folder's documents and exported
    model, the closed loop with that model (a ``closed_loop:`` section), metrics.json and the
    report, the console summary."""
    loud = conditioning_warnings(run.trajectories if trajs else {}, ident)
    run.messages = loud + list(run.messages)
    models = write_run(folder, scn, ident, run, trajs=trajs, recs=recs,
                       scenario_doc=resolved_scenario(scn, ident), plots=plots)
    if plots is not None:
        plots.close()           # drawn: no worker outlives the plots (the closed loop may fork)
    control = None
    if scn.closed_loop is not None and trajs:       # a fit from logs runs no closed loop
        control = closed_loop_run(folder, scn, ident.model, trajs[scn.closed_loop.trajectory][0],
                                  run, ident=ident,
                                  trajectories={k: tr for k, (tr, _i) in trajs.items()})
    metrics = finish_run(folder, scn, run, t0, ident=ident, models=models, control=control)
    progress.message(console_summary(metrics, folder))
    for w in loud:
        progress.warn(w)
    return RunResult(folder, metrics, ident)


def _dry_run_result(folder: Path, recs: dict) -> RunResult:
    """hardware.dry_run: the bus came up and every check passed; print the backend's bus report
    (stdout), keep it in the run folder, identify nothing."""
    text = next((r.backend_report for r in recs.values() if r.backend_report),
                "dry run: no bus report (offline: no interface given)")
    atomic_write_text(folder / layout.BUS_REPORT, text + "\n")
    print(text, flush=True)
    return RunResult(folder, {"dry_run": True}, None)


def fit_scenario(scn: Scenario, out=None, log=None, validation_log=None, *,
                 force: bool = False) -> RunResult:
    """``twinid fit``: identify from recordings/logs named in the scenario's fit section, with
    the defaults for real arms' logs (identify.scenario.signals)."""
    from identify.scenario.signals import resolve_joint_model
    if scn.payload is not None:
        with claim_run_folder(scn, out, force=force, command="fit",
                              inputs={"--log": log}) as folder:
            return RunResult(*control_only(scn, folder, "fit", log=log))
    timings: dict = {}
    t0 = time.perf_counter()
    specs = log_specs(scn, log, validation_log)
    model = build_model(scn)
    gains = None if scn.arm.drives is None else gains_from_drives(scn.arm.drives, model.joint_names)
    size = sum(input_bytes(s.file) for s in specs.values())
    with claim_run_folder(scn, out, force=force, need_bytes=2 * size, command="fit",
                          inputs={"--log": log, "--validation-log": validation_log}) as folder, \
            plot_pool(scn.outputs.plots) as pool:
        warnings: list = []
        with progress.step("reading logs", timings):
            recs, segments = log_segments(specs, model, gains, warnings)
        try:        # an explicit joint model the logs cannot support: refused before fitting
            resolve_joint_model(scn.identification.joint_model,
                                recs["excitation"].tau_j is not None,
                                recs["excitation"].tau_m is not None)
        except ValueError as exc:
            raise ScenarioError(str(scn.source or "<scenario>"), None,
                                "identification.joint_model",
                                f"{exc} (log {specs['excitation'].file})") from None
        for msg in warnings:
            progress.message(f"warning: {msg}")
        scn = log_processing(scn, recs)
        held = (load_held(scn, model.joint_names, model, warnings)
                if scn.trajectories.excitation.held else []) + segments
        ident = identify_recordings(scn, model, recs, timings=timings, want_truth=False,
                                    from_logs=True, held=held or None)
        ident.warnings[:0] = warnings
        run = run_info(scn, "fit", timings, backend="logs")
        run.trajectories = {label: TrajectoryInfo(
            label=label, source=str(specs[label].file), duration_s=rec.duration,
            samples=rec.n_samples, from_log=True,
            resampled=rec.meta.get("log", {}).get("resampled"))
            for label, rec in recs.items()}
        return _write_identification(folder, scn, ident, run, t0, trajs=None, recs=recs,
                                     plots=pool)


def log_segments(specs: dict, model, gains, warnings: list) -> tuple[dict, list]:
    """The fit's logs read (identify.logs.load.load_segments): label -> the longest gap-free
    segment of each log, and [HeldRecording] of the excitation log's other segments, which the
    fit stacks under it (identify.app.identification.stack_held: no filter across a gap). The
    validation log's other segments are left out, with a warning."""
    from identify.logs.held import HeldRecording
    recs, extra = {}, []
    for label, spec in specs.items():
        segs = load_segments(spec, model.joint_names, gains=gains, model=model,
                             warnings=warnings)
        k = max(range(len(segs)), key=lambda i: segs[i].n_samples)
        recs[label] = segs[k]
        others = [s for i, s in enumerate(segs) if i != k]
        if label == "excitation":
            extra += [HeldRecording(
                key=f"fit.excitation segment {s.meta['log']['segment']['index'] + 1} of "
                    f"{len(segs)}", source=str(spec.file), kind="segment", file=str(spec.file),
                recording=s) for s in others]
        elif others:
            a, b = segs[k].meta["log"]["segment"]["span_s"]
            warnings.append(f"{spec.file}: validated on its longest segment ({a:.3f}..{b:.3f} s "
                            f"from the log's start); the {len(others)} other(s) are left out")
    return recs, extra


def trajectories_only(scn: Scenario, out=None, *, force: bool = False,
                      rate_hz: float | None = None) -> Path:
    """``twinid trajectory``: optimize (or load) the trajectories and save them with plots into
    a trajectory folder: ``excitation.yaml`` / ``validation.yaml`` (load them with
    ``source: file``), their plots, ``sampled/`` (the forms for the arm's own controller, the
    table at `rate_hz` [Hz], default 1 kHz: docs/controllers.md), ``trajectories.yaml``
    (kind: trajectories, cond(W), timings) and a report (``twinid report`` rebuilds it)."""
    from identify.outputs.report import build_report
    t0 = time.perf_counter()
    model = build_model(scn)
    timings: dict = {}
    with claim_run_folder(scn, out, force=force, command="trajectory") as folder:
        trajs = trajectories(scn, model, timings)
        docs = {}
        for label, (tr, info) in trajs.items():
            tr.save(folder / f"{label}.yaml")      # the trajectory folder's own layout
            docs[label] = trajectory_document(info)
            plot_trajectory(tr, plot_limits(model, info), folder / f"{label}.png",
                            title=f"{label} trajectory", joint_names=list(model.joint_names))
        try:
            sampled = write_sampled(folder, model, trajs, rate_hz=rate_hz or DEFAULT_RATE_HZ)
        except ValueError as exc:
            raise InputError(f"{scn.source or scn.name}: {exc}") from None
        timings["total"] = round(time.perf_counter() - t0, 4)   # the report adds "other"
        write_yaml(folder / layout.TRAJECTORY_INDEX, {
            "kind": "trajectories", "name": scn.name,
            "note": "written by twinid trajectory: the excitation and validation trajectories "
                    "(Fourier coefficients); use them in a scenario with trajectories.<label>: "
                    "{source: file, file: <this folder>/<label>.yaml}",
            "trajectories": docs, "sampled": sampled, "timings_s": timings})
        if scn.outputs.report:
            build_report(folder)
    for label, d in docs.items():
        progress.message(f"{label}: cond(W_base) = {d['cond']:.2f}, {d['duration_s']:.1f} s")
    loud = conditioning_warnings({k: v[1] for k, v in trajs.items()}, _NoFits())
    for w in loud:
        progress.warn(w)
    return folder


class _NoFits:
    """Stand-in for an Identification without fits (trajectory-only command)."""
    improved = simplified = None


