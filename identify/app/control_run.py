"""The control sections of a scenario (identify.control) as a run: the closed-loop tracking cases
and collision runs after an identification, with its exported model (:func:`closed_loop_run`), and
the runs without an arm identification (:func:`control_only`): the closed loop with a given
``closed_loop.model``, or the payload identification (``twinid run`` on the backend, ``twinid
fit`` from a log). Plots and recordings go into the run folder; the results are returned as an
:class:`~identify.outputs.results.ControlOutcome` for the one metrics document."""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np

from identify.common import progress
from identify.common.errors import SafetyRefusal
from identify.common.fileio import write_yaml
from identify.control.joint_model import from_export
from identify.control.plots import plot_collision, plot_tracking
from identify.control.runs import fit_payload, known_arm_model, loop_models, run_loop, run_payload
from identify.control.transfer import other_trajectory
from identify.logs.load import gains_from_drives, load_log
from identify.model.drives import load_drives
from identify.outputs import layout
from identify.outputs.results import ControlOutcome, RunInfo, TrajectoryInfo
from identify.outputs.runfolder import finish_run, run_folder
from identify.scenario.spec import Scenario

from .acquisition import backend_arm, preflight
from .inputs import build_model, log_specs, resolved_scenario, run_info
from .trajectories import check_contact_time, get_trajectory, load_trajectory_file
from .truth import true_link_parameters

__all__ = ["closed_loop_run", "control_only"]


def _datasheet_J_m(scn: Scenario, model) -> np.ndarray | None:
    if scn.arm.drives is None:
        return None
    return load_drives(scn.arm.drives, list(model.joint_names)).array("J_r")


def closed_loop_run(folder: Path, scn: Scenario, model, trajectory, run: RunInfo, *,
                    ident=None, truth=None, trajectories: dict | None = None) -> ControlOutcome:
    """Closed-loop cases and collision runs with the exported model of ``closed_loop.model``, or
    of this run's folder; plots and recordings into `folder`, notes into ``run.messages``, the
    plot files into ``run.files``. `truth`: the twin's Truth when there is no identification
    `ident` (whose truth is used otherwise). `trajectories`: label -> trajectory the run already
    has (the collision calibration's is taken from there, else designed / read)."""
    src = scn.closed_loop.model or folder
    exported = layout.exported_model(src)
    if exported is None:
        raise ValueError(f"closed_loop: {src} has no {layout.URDF} (the URDF export was skipped: "
                         f"see the run's messages; identification.physical_consistency: true gives "
                         f"physical parameters)")
    identified = from_export(model, exported.urdf, exported.sidecar, exported.parameters)
    if ident is not None:
        truth = ident.truth.truth
    prior = None if ident is None else ident.prior.inertial
    models = loop_models(model, identified=identified, truth=truth, cad_inertial=prior,
                         J_m_datasheet=_datasheet_J_m(scn, model))
    settings = scn.backend_settings()
    if scn.backend == "hardware":        # as the identification's runs: samples kept on a stop
        settings.setdefault("record_dir", str(folder / layout.RECORDINGS / "closed_loop"))
    calib = _calibration_trajectory(folder, scn, model, run, trajectories or {})
    with progress.step("closed loop", run.timings):
        try:
            res = run_loop(scn.closed_loop, scn.backend, backend_arm(scn, model), settings,
                           trajectory, models, model.joint_names, calib_trajectory=calib,
                           progress=progress.enabled())
        except ValueError as exc:
            raise SafetyRefusal(f"the {scn.backend} backend refused a closed-loop run: {exc}") from exc
    run.messages.extend(res.notes)
    files = {}
    if res.closed_loop is not None:
        files["closed_loop_tracking"] = plot_tracking(
            res.closed_loop, layout.plot(folder, "closed_loop_tracking"))
    if res.collision:
        files["collision"] = plot_collision(res.collision, list(model.joint_names),
                                            layout.plot(folder, "collision"))
    if scn.outputs.save_recordings:
        for label, rec in res.recordings.items():
            rec.save(layout.recording(folder, label))
    run.files.update({k: str(v.relative_to(folder)) for k, v in files.items()})
    return ControlOutcome(closed_loop=res.closed_loop, collision=dict(res.collision),
                          collision_transfer=dict(res.transfer))


def _calibration_trajectory(folder: Path, scn: Scenario, model, run: RunInfo, have: dict):
    """The trajectory the transferred collision thresholds are calibrated on (the other one of
    excitation / validation: from `have` when the run already has it, else designed or read and
    saved into the run folder), or None when the transfer does not run (off, collision off, not
    the twin)."""
    cl = scn.closed_loop
    if not (cl.collision.enabled and cl.collision.transfer and scn.backend == "twin"):
        return None
    label = other_trajectory(cl.trajectory)
    if label in have:
        return have[label]
    with progress.step(f"{label} trajectory (collision calibration)", run.timings):
        tr, info = get_trajectory(getattr(scn.trajectories, label), model,
                                  scn.identification.friction_terms, label)
    if label not in run.trajectories:
        run.trajectories[label] = info
        tr.save(layout.trajectory(folder, label))
    return tr


def _payload(scn: Scenario, model, folder: Path, run: RunInfo, command: str, truth, log, *,
             twin: bool):
    """The payload identification: (PayloadResult, console line). `truth`: the twin's Truth, or None;
    `twin`: a twin run (then the scenario's payload is the truth the result is judged on)."""
    ps = scn.payload
    exported = (layout.exported_model(ps.arm_model)
                if ps.arm_model is not None and Path(ps.arm_model).is_dir() else None)
    arm_model = known_arm_model(ps, model, truth, exported)
    if command == "run":
        ptruth = (None if not twin or scn.arm.payload is None
                  else dataclasses.asdict(scn.arm.payload))
        with progress.step("payload run", run.timings):
            try:
                res, tr, rec = run_payload(ps, scn.backend, backend_arm(scn, model),
                                           scn.backend_settings(), arm_model, scn.processing,
                                           ptruth, progress=progress.enabled())
            except ValueError as exc:
                raise SafetyRefusal(f"the {scn.backend} backend refused the payload "
                                    f"trajectory: {exc}") from exc
        tr.save(layout.trajectory(folder, "payload"))
        run.trajectories["payload"] = TrajectoryInfo(
            label="payload", source="optimized on the payload's columns",
            cond=res.trajectory_cond, harmonics=int(tr.n_harmonics), period_s=float(tr.period),
            periods=1, duration_s=float(tr.duration), samples=rec.n_samples)
    else:
        specs = log_specs(scn, log, None)
        gains = None if scn.arm.drives is None else gains_from_drives(scn.arm.drives,
                                                                      model.joint_names)
        with progress.step("reading logs", run.timings):
            # the unit guards of a normal fit too (a log in degrees gave 0.435 kg for 1.5)
            rec = load_log(specs["excitation"], model.joint_names, gains=gains, model=model)
        res = fit_payload(ps, arm_model, rec, scn.processing, None)
        run.trajectories["payload"] = TrajectoryInfo(
            label="payload", source=str(specs["excitation"].file), duration_s=rec.duration,
            samples=rec.n_samples, from_log=True)
    if scn.outputs.save_recordings:
        rec.save(layout.recording(folder, "payload"))
    msg = (f"payload: {res.identified['mass_kg']:.4f} kg (std {res.std['mass_kg']:.2g}), CoM "
           f"{np.round(1e3 * res.identified['com_m'], 2).tolist()} mm")
    if res.mass_error_percent is not None:
        msg += f"; error {res.mass_error_percent:+.3f} %, {1e3 * res.com_error_m:.2f} mm"
    return res, msg


def control_only(scn: Scenario, out, command: str, log=None):
    """A run without an arm identification: the closed loop with ``closed_loop.model``, or the
    payload identification. Returns (folder, metrics document)."""
    t0 = time.perf_counter()
    model = build_model(scn)
    twin = command == "run" and scn.backend == "twin"
    truth = true_link_parameters(scn, model) if twin else None
    if command == "run":
        preflight(scn, model)
    folder = run_folder(scn, out)
    run = run_info(scn, command, {}, backend=None if command == "run" else "logs")
    if scn.payload is not None:
        res, msg = _payload(scn, model, folder, run, command, truth, log, twin=twin)
        control = ControlOutcome(payload=res)
    else:
        label = scn.closed_loop.trajectory
        spec = getattr(scn.trajectories, label)
        check_contact_time(scn, {label: load_trajectory_file(spec.file, label, model.n)}
                           if spec.source == "file" else {})
        with progress.step(f"{label} trajectory", run.timings):
            tr, info = get_trajectory(getattr(scn.trajectories, label), model,
                                      scn.identification.friction_terms, label)
        run.trajectories[label] = info
        tr.save(layout.trajectory(folder, label))
        control = closed_loop_run(folder, scn, model, tr, run, truth=truth)
        cl = control.closed_loop
        msg = ("tracking RMS [rad]: " + ", ".join(f"{k} {v.error_rms_overall:.3g}"
                                                  for k, v in cl.cases.items())
               if cl is not None else "; ".join(run.messages))
    write_yaml(folder / layout.SCENARIO, resolved_scenario(scn))
    metrics = finish_run(folder, scn, run, t0, control=control, joint_names=model.joint_names)
    progress.message(f"run folder: {folder}\n  {msg}")
    return folder, metrics
