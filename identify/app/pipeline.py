"""The whole pipeline, driven by a :class:`~identify.scenario.Scenario`:

    arm model -> trajectories -> backend run -> identification -> run folder -> report

    from identify.scenario import load_scenario
    from identify.app.pipeline import run_scenario
    res = run_scenario(load_scenario("scenarios/quickstart.yaml"), out="runs/demo")
    res.folder, res.metrics, res.identification

Each stage is a module of :mod:`identify.app` (reused by :mod:`identify.app.sweep`):
:mod:`~identify.app.trajectories`, :mod:`~identify.app.acquisition`,
:mod:`~identify.app.identification`, :mod:`~identify.app.runfolder`; the data passed between
them are the types of :mod:`identify.app.results`."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from identify.common import progress
from identify.common.errors import InputError
from identify.common.fileio import atomic_write_text, regular_file_problem, write_yaml
from identify.excitation.plots import plot_trajectory
from identify.logs.held import load_held
from identify.logs.load import gains_from_drives, load_log
from identify.model.arm import load_description
from identify.model.robot_model import RobotModel
from identify.scenario.spec import LogSpec, Scenario, ScenarioError

from .acquisition import preflight, record
from .identification import identify_recordings
from .render import trajectory_document
from .results import Identification, RunInfo, TrajectoryInfo
from .runfolder import claim_run_folder, finish_run, plot_limits, run_folder, write_run
from .trajectories import trajectories

__all__ = ["RunResult", "build_model", "run_scenario", "fit_scenario", "trajectories_only"]


@dataclass
class RunResult:
    folder: Path
    metrics: dict
    identification: Identification | None = None


def build_model(scn: Scenario) -> RobotModel:
    """RobotModel of the scenario's arm (acceleration limits and gravity from arm.description)."""
    joints = list(scn.arm.joints) if scn.arm.joints else None
    qdd_max, gravity = None, (0.0, 0.0, -9.81)
    if scn.arm.description is not None:
        desc = load_description(scn.arm.description)
        gravity = tuple(np.asarray(desc.gravity, float))
        by_name = dict(zip(desc.joint_names, np.asarray(desc.qdd_max, float)))
        model0 = RobotModel.from_urdf(scn.arm.urdf, joints)
        qdd_max = np.array([by_name.get(j, np.inf) for j in model0.joint_names])
    return RobotModel.from_urdf(scn.arm.urdf, joints, qdd_max=qdd_max, gravity=gravity)


def _run_info(scn: Scenario, command: str, timings: dict, backend: str | None = None) -> RunInfo:
    return RunInfo(name=scn.name, description=scn.description, backend=backend or scn.backend,
                   command=command, created=_dt.datetime.now().isoformat(timespec="seconds"),
                   host=platform.node(), timings=timings)


#: cond(W_base) of a trajectory beyond which the identification is flagged as hopeless (well
#: designed excitation trajectories of the reference arm reach 30-60; 1e3 means some base
#: parameters are barely seen by the data)
COND_HOPELESS = 1.0e3


def require_backend_files(scn: Scenario) -> None:
    """What a backend needs beyond a loadable scenario: the twin simulates the drives of
    arm.drives (without it, exit 2 here instead of a TypeError deep in the twin)."""
    if scn.backend == "twin" and scn.arm.drives is None:
        raise ScenarioError(str(scn.source or "<scenario>"), None, "arm.drives",
                            "backend: twin needs arm.drives, the drive parameters the twin "
                            "simulates (e.g. assets/cobot6_drives.yaml)")


def check_budget(est, yes: bool, what: str = "this run") -> None:
    """Print the estimate; refuse (InputError, exit 2) beyond the budget unless `yes`."""
    from identify.scenario.budget import over_budget
    progress.message(f"estimate: {what} takes {est.describe()}")
    why = over_budget(est)
    if why is None:
        return
    if not yes:
        raise InputError(f"{what} would take {est.describe()}: {why}. Check the scenario "
                         f"(period_s, periods, sample_rate_hz, sweep.seeds, ...) or pass --yes "
                         f"to run it anyway")
    progress.warn(f"{what} takes {est.describe()} ({why}); running it because of --yes")


def conditioning_warnings(trajs: dict, ident: Identification) -> list[str]:
    """Loud warnings for results that cannot be trusted: cond(W_base) of a trajectory beyond
    :data:`COND_HOPELESS` (an excitation fitted with held data: the measured cond of the
    stacked rows), or most parameters poorly excited (std > |value|)."""
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
    return out


def run_scenario(scn: Scenario, out=None, *, force: bool = False, yes: bool = False) -> RunResult:
    """``twinid run``: budget -> claim the run folder -> preflight -> trajectories -> backend ->
    identification -> run folder (-> closed loop with a ``closed_loop:`` section; a ``payload:``
    section identifies the payload instead, and ``closed_loop.model`` skips the identification:
    the hooks at the end of this module). Nothing is computed before the estimate is within
    budget (or `yes`) and the folder is claimed (writable, room, not used by another command)."""
    if scn.payload is not None or (scn.closed_loop is not None and scn.closed_loop.model is not None):
        with claim_run_folder(scn, out, force=force) as folder:
            return _control_only(scn, folder, "run")
    from identify.scenario.budget import estimate_run
    timings: dict = {}
    t0 = time.perf_counter()
    require_backend_files(scn)
    model = build_model(scn)
    est = estimate_run(scn, model.n)
    check_budget(est, yes)
    with claim_run_folder(scn, out, force=force, need_bytes=int(est.disk_bytes)) as folder:
        preflight(scn, model)
        # the data already held, read once: the design and the fit both use them
        held_warnings: list = []
        held = (load_held(scn, model.joint_names, model, held_warnings)
                if scn.trajectories.excitation.held else None)
        trajs = trajectories(scn, model, timings, held)
        settings = None
        if scn.backend == "hardware":        # samples stream into the run folder, kept on a stop
            settings = scn.backend_settings()
            settings.setdefault("record_dir", str(folder / "recordings"))
        recs = record(scn, trajs, model=model, timings=timings, settings=settings)
        if settings is not None and settings.get("dry_run"):
            return _dry_run_result(folder, recs)
        ident = identify_recordings(scn, model, recs, timings=timings, held=held)
        ident.warnings[:0] = held_warnings
        timings["total_before_outputs"] = round(time.perf_counter() - t0, 4)
        run = _run_info(scn, "run", timings)
        for label, (_tr, info) in trajs.items():
            info.samples = recs[label].n_samples
            run.trajectories[label] = info
        loud = conditioning_warnings(run.trajectories, ident)
        run.messages = loud + list(run.messages)
        metrics = write_run(folder, scn, ident, run, trajs=trajs, recs=recs)
        if scn.closed_loop is not None:
            _add_closed_loop(folder, scn, model, trajs[scn.closed_loop.trajectory][0], ident,
                             metrics, timings)
        finish_run(folder, scn, metrics, timings, t0)
    progress.message(summary(metrics, folder))
    for w in loud:
        progress.warn(w)
    return RunResult(folder, metrics, ident)


def _dry_run_result(folder: Path, recs: dict) -> RunResult:
    """hardware.dry_run: the bus came up and every check passed; print the backend's bus report
    (stdout), keep it in the run folder, identify nothing."""
    text = next((r.meta.get("bus_report_text") for r in recs.values()
                 if r.meta.get("bus_report_text")),
                "dry run: no bus report (offline: no interface given)")
    atomic_write_text(folder / "bus_report.txt", text + "\n")
    print(text, flush=True)
    return RunResult(folder, {"dry_run": True}, None)


def _log_specs(scn: Scenario, log=None, validation_log=None) -> dict:
    """label -> LogSpec of the fit section, with the command line's --log / --validation-log.

    A validation log without its own ``fit.validation`` section takes the excitation log's
    format, preset, columns, units and gains -- never its window (a window is a property of one
    file); ``fit.validation`` (possibly without ``file``) gives it its own."""
    specs = {"excitation": scn.fit.excitation, "validation": scn.fit.validation}
    for label, override in (("excitation", log), ("validation", validation_log)):
        if override is not None:
            p = Path(override)
            prob = regular_file_problem(p)
            if prob == "not found":
                raise FileNotFoundError(f"{override}: log file not found")
            if prob is not None:
                raise InputError(f"{override}: the log {prob}")
            base = specs[label]
            if base is None and label == "validation" and specs["excitation"] is not None:
                base = dataclasses.replace(specs["excitation"], window_s=None, window_t=None,
                                           window_rows=None)
            specs[label] = dataclasses.replace(base or LogSpec(file=p), file=p.resolve())
    if specs["excitation"] is None or specs["excitation"].file is None:
        raise ScenarioError(str(scn.source or "<scenario>"), None, "fit.excitation",
                            "twinid fit needs a log: set fit.excitation.file or pass --log FILE")
    if specs["validation"] is not None and specs["validation"].file is None:
        raise ScenarioError(str(scn.source or "<scenario>"), None, "fit.validation.file",
                            "fit.validation has no file: set it or pass --validation-log FILE")
    return {k: v for k, v in specs.items() if v is not None}


def _log_processing(scn: Scenario, recs: dict) -> Scenario:
    """Processing defaults for logs, unless the scenario says:

    * ``velocity``: the log's own qd when every log maps one ("log"), else differences of q
      ("differentiate");
    * ``decimate``: above 20 x butter_cutoff_hz, keep every k-th sample after the low-pass,
      k = floor(rate / (5 x butter_cutoff_hz)) -- a 1 kHz log low-passed at 10 Hz is fitted at 50 Hz (the filtered
      signals carry nothing above the cut-off: the 4th-order Butterworth is down 64 dB at the
      25 Hz Nyquist frequency), and twenty times fewer rows make an hour-long log fit in
      memory and time;
    * ``smooth_passes``: 0 when rate >= 50 x butter_cutoff_hz -- there the paper's 5-point
      smoothing x20 has a gain >= 0.9996 below the cut-off (it was designed for 100 Hz data)
      and would only cost time."""
    from identify.estimation.processing import ProcessingSettings
    proc = dict(scn.processing or {})
    if "velocity" not in proc:
        proc["velocity"] = "log" if all(r.qd is not None for r in recs.values()) \
            else "differentiate"
    fc = proc.get("butter_cutoff_hz", ProcessingSettings.butter_cutoff_hz)
    rate = min(float(r.rate_hz) for r in recs.values())
    if "decimate" not in proc and fc and "resample_hz" not in proc and rate > 20.0 * fc:
        proc["decimate"] = max(1, int(rate // (5.0 * float(fc))))
    if "smooth_passes" not in proc and fc and "resample_hz" not in proc and rate >= 50.0 * fc:
        proc["smooth_passes"] = 0
    return dataclasses.replace(scn, processing=proc)


def fit_scenario(scn: Scenario, out=None, log=None, validation_log=None, *,
                 force: bool = False) -> RunResult:
    """``twinid fit``: identify from recordings/logs named in the scenario's fit section, with
    the defaults for real arms' logs (identify.scenario.signals)."""
    from identify.scenario.signals import resolve_joint_model
    if scn.payload is not None:
        with claim_run_folder(scn, out, force=force, command="fit",
                              inputs={"--log": log}) as folder:
            return _control_only(scn, folder, "fit", log=log)
    timings: dict = {}
    t0 = time.perf_counter()
    specs = _log_specs(scn, log, validation_log)
    model = build_model(scn)
    gains = None if scn.arm.drives is None else gains_from_drives(scn.arm.drives, model.joint_names)
    size = sum(Path(s.file).stat().st_size for s in specs.values())
    with claim_run_folder(scn, out, force=force, need_bytes=2 * size, command="fit",
                          inputs={"--log": log, "--validation-log": validation_log}) as folder:
        warnings: list = []
        with progress.step("reading logs", timings):
            recs = {label: load_log(spec, model.joint_names, gains=gains, model=model,
                                    warnings=warnings)
                    for label, spec in specs.items()}
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
        scn = _log_processing(scn, recs)
        ident = identify_recordings(scn, model, recs, timings=timings, want_truth=False,
                                    from_logs=True)
        ident.warnings[:0] = warnings
        run = _run_info(scn, "fit", timings, backend="logs")
        run.trajectories = {label: TrajectoryInfo(
            label=label, source=str(specs[label].file), duration_s=rec.duration,
            samples=rec.n_samples, from_log=True,
            resampled=rec.meta.get("log", {}).get("resampled"))
            for label, rec in recs.items()}
        loud = conditioning_warnings({}, ident)
        run.messages = loud + list(run.messages)
        metrics = write_run(folder, scn, ident, run, trajs=None, recs=recs)
        finish_run(folder, scn, metrics, timings, t0)
    progress.message(summary(metrics, folder))
    for w in loud:
        progress.warn(w)
    return RunResult(folder, metrics, ident)


def trajectories_only(scn: Scenario, out=None, *, force: bool = False) -> Path:
    """``twinid trajectory``: optimize (or load) the trajectories and save them with plots into
    a trajectory folder: ``excitation.yaml`` / ``validation.yaml`` (load them with
    ``source: file``), their plots, ``trajectories.yaml`` (kind: trajectories, cond(W), timings)
    and a report (``twinid report`` rebuilds it)."""
    from .report import build_report
    model = build_model(scn)
    timings: dict = {}
    with claim_run_folder(scn, out, force=force, command="trajectory") as folder:
        trajs = trajectories(scn, model, timings)
        docs = {}
        for label, (tr, info) in trajs.items():
            tr.save(folder / f"{label}.yaml")
            docs[label] = trajectory_document(info)
            plot_trajectory(tr, plot_limits(model, info), folder / f"{label}.png",
                            title=f"{label} trajectory", joint_names=list(model.joint_names))
        write_yaml(folder / "trajectories.yaml", {
            "kind": "trajectories", "name": scn.name,
            "note": "written by twinid trajectory: the excitation and validation trajectories "
                    "(Fourier coefficients); use them in a scenario with trajectories.<label>: "
                    "{source: file, file: <this folder>/<label>.yaml}",
            "trajectories": docs, "timings_s": timings})
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


def summary(metrics: dict, folder: Path) -> str:
    """The console's closing lines of a run."""
    lines = [f"run folder: {folder}"]
    signal = metrics.get("signal")
    export = metrics.get("export", {})
    for label, r in metrics.get("rms", {}).items():
        parts = [f"{k} {v['overall']:.4f}" for k, v in r.items() if k in ("simplified", "improved")]
        imp = metrics.get("improvement_percent", {}).get(label)
        line = (f"  {label}: RMS [N*m]" + (f" of {signal}" if signal else "") + " "
                + ", ".join(parts) + ("" if imp is None else f"  ({imp:+.2f} %)"))
        ex = export.get("rms", {}).get(label)
        if ex is not None:      # the exported model predicts its own fitted signal
            line += (f"; exported model {ex['overall']:.4f}"
                     + (f" of {export['signal']}" if export.get("signal") else ""))
        lines.append(line)
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# control stages (identify.control): closed loop / collision after an identification, or alone
# with a given model, and payload identification
# ------------------------------------------------------------------------------------------------

def _datasheet_J_m(scn: Scenario, model) -> np.ndarray | None:
    if scn.arm.drives is None:
        return None
    from identify.model.drives import load_drives
    return load_drives(scn.arm.drives, list(model.joint_names)).array("J_r")


def _add_closed_loop(folder: Path, scn: Scenario, model, trajectory, ident, metrics: dict,
                     timings: dict, truth=None) -> None:
    """Closed-loop cases and collision runs with the run folder's exported model; their
    sections, plots and recordings go into the run folder (metrics.json rewritten by the caller's
    finish_run)."""
    from identify.common.errors import SafetyRefusal
    from identify.control.joint_model import from_run_folder
    from identify.control.plots import plot_collision, plot_tracking
    from identify.control.stage import loop_models, run_loop

    from .acquisition import backend_arm
    from .render import closed_loop_metrics, collision_metrics
    src = scn.closed_loop.model or folder
    if not (Path(src) / "identified.urdf").is_file():
        raise ValueError(f"closed_loop: {src} has no identified.urdf (the URDF export was skipped: "
                         f"see the run's messages; identification.physical_consistency: true gives "
                         f"physical parameters)")
    identified = from_run_folder(src, model)
    if ident is not None:
        truth = ident.truth.truth
    prior = None if ident is None else ident.prior.inertial
    models = loop_models(model, identified=identified, truth=truth, cad_inertial=prior,
                         J_m_datasheet=_datasheet_J_m(scn, model))
    settings = scn.backend_settings()
    if scn.backend == "hardware":        # as the identification's runs: samples kept on a stop
        settings.setdefault("record_dir", str(folder / "recordings" / "closed_loop"))
    with progress.step("closed loop", timings):
        try:
            res = run_loop(scn.closed_loop, scn.backend, backend_arm(scn, model), settings,
                           trajectory, models, model.joint_names, progress=progress.enabled())
        except ValueError as exc:
            raise SafetyRefusal(f"the {scn.backend} backend refused a closed-loop run: {exc}") from exc
    metrics.setdefault("messages", []).extend(res.notes)
    files = {}
    if res.closed_loop is not None:
        metrics["closed_loop"] = closed_loop_metrics(res.closed_loop)
        files["closed_loop_tracking"] = plot_tracking(res.closed_loop, folder / "plots" /
                                                      "closed_loop_tracking.png")
    if res.collision:
        metrics["collision"] = collision_metrics(res.collision)
        files["collision"] = plot_collision(res.collision, list(model.joint_names),
                                            folder / "plots" / "collision.png")
    if scn.outputs.save_recordings:
        for label, rec in res.recordings.items():
            rec.save(folder / "recordings" / f"{label}.npz")
    metrics.setdefault("files", {}).update({k: str(v.relative_to(folder)) for k, v in files.items()})


def _control_only(scn: Scenario, out, command: str, log=None) -> RunResult:
    """A run without an arm identification: the closed loop with ``closed_loop.model``, or the
    payload identification (``twinid run`` on the backend, ``twinid fit`` from a log)."""
    from identify.common.errors import SafetyRefusal
    from identify.common.fileio import write_json
    from identify.control.stage import fit_payload, known_arm, run_payload

    from .acquisition import backend_arm
    from .render import control_run_document, payload_metrics
    from .runfolder import resolved_scenario
    from .trajectories import get_trajectory
    from .truth import true_link_parameters
    timings: dict = {}
    t0 = time.perf_counter()
    model = build_model(scn)
    twin = command == "run" and scn.backend == "twin"
    truth = true_link_parameters(scn, model) if twin else None
    if command == "run":
        preflight(scn, model)
    folder = run_folder(scn, out)
    run = _run_info(scn, command, timings, backend=None if command == "run" else "logs")
    sections: dict = {}
    if scn.payload is not None:
        ps = scn.payload
        arm = known_arm(ps, model, truth)
        ptruth = (None if not twin or scn.arm.payload is None
                  else dataclasses.asdict(scn.arm.payload))
        if command == "run":
            with progress.step("payload run", timings):
                try:
                    res, tr, rec = run_payload(ps, scn.backend, backend_arm(scn, model),
                                               scn.backend_settings(), arm, scn.processing,
                                               ptruth, progress=progress.enabled())
                except ValueError as exc:
                    raise SafetyRefusal(f"the {scn.backend} backend refused the payload "
                                        f"trajectory: {exc}") from exc
            tr.save(folder / "trajectories" / "payload.yaml")
            run.trajectories["payload"] = TrajectoryInfo(
                label="payload", source="optimized on the payload's columns",
                cond=res.trajectory_cond, harmonics=int(tr.n_harmonics), period_s=float(tr.period),
                periods=1, duration_s=float(tr.duration), samples=rec.n_samples)
        else:
            specs = _log_specs(scn, log, None)
            gains = None if scn.arm.drives is None else gains_from_drives(scn.arm.drives,
                                                                          model.joint_names)
            with progress.step("reading logs", timings):
                # the unit guards of a normal fit too (a log in degrees gave 0.435 kg for 1.5)
                rec = load_log(specs["excitation"], model.joint_names, gains=gains, model=model)
            res = fit_payload(ps, arm, rec, scn.processing, None)
            run.trajectories["payload"] = TrajectoryInfo(
                label="payload", source=str(specs["excitation"].file), duration_s=rec.duration,
                samples=rec.n_samples, from_log=True)
        if scn.outputs.save_recordings:
            rec.save(folder / "recordings" / "payload.npz")
        sections["payload"] = payload_metrics(res)
        msg = (f"payload: {res.identified['mass_kg']:.4f} kg (std {res.std['mass_kg']:.2g}), CoM "
               f"{np.round(1e3 * res.identified['com_m'], 2).tolist()} mm")
        if res.mass_error_percent is not None:
            msg += f"; error {res.mass_error_percent:+.3f} %, {1e3 * res.com_error_m:.2f} mm"
    else:
        label = scn.closed_loop.trajectory
        with progress.step(f"{label} trajectory", timings):
            tr, info = get_trajectory(getattr(scn.trajectories, label), model,
                                      scn.identification.friction_terms, label)
        run.trajectories[label] = info
        tr.save(folder / "trajectories" / f"{label}.yaml")
        _add_closed_loop(folder, scn, model, tr, None, sections, timings, truth=truth)
        run.messages.extend(sections.pop("messages", []))
        run.files.update(sections.pop("files", {}))
        cl = sections.get("closed_loop", {}).get("tracking_rms_rad", {})
        msg = ("tracking RMS [rad]: " + ", ".join(f"{k} {v:.3g}" for k, v in cl.items())
               if cl else "; ".join(run.messages))
    write_yaml(folder / "scenario.yaml", resolved_scenario(scn))
    metrics = {**control_run_document(run, model.joint_names), **sections}
    write_json(folder / "metrics.json", metrics)
    finish_run(folder, scn, metrics, timings, t0)
    progress.message(f"run folder: {folder}\n  {msg}")
    return RunResult(folder, metrics, None)
