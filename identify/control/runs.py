"""The control stages of a scenario, as functions over plain inputs (no files): the closed-loop
cases and the collision runs (:func:`run_loop`), the payload run (:func:`run_payload`), and the
models they use (:func:`loop_models`). :mod:`identify.app.control_run` calls them and writes the
run folder; :mod:`identify.outputs.render` renders the results.

Runs of one section share the backend settings; the twin's runs differ only in what is stated:
the three tracking cases use the scenario's noise seed (same noise), the collision runs fresh
seeds (seed + 1: collision-free test run, seed + 2: the contact run) so the thresholds are judged
on noise they were not set on; the transfer's runs (identify.control.transfer: the other
trajectory's calibration, the rest calibration, the contact at rest, a longer free run) the
seeds after them (seed + 3 to seed + 6)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from identify.backend.arm import BackendArm
from identify.estimation.processing import ProcessingSettings, process
from identify.scenario.spec import ClosedLoopSpec, PayloadSpec

from .closed_loop import ClosedLoopResult, run_case, tracking_case
from .detection import evaluate
from .feedforward import feedforward, pid_only
from .joint_model import JointModel, cad_model, from_export, from_parameters
from .payload_run import PayloadResult, identify_payload, wrist_excitation
from .transfer import contact_from_spec, evaluate_transfer, other_trajectory, transfer_runs

__all__ = ["LoopResults", "loop_models", "run_loop", "known_arm_model", "run_payload"]


@dataclass
class LoopResults:
    """closed_loop: ClosedLoopResult (None after a hardware dry run); collision: model name ("identified", "cad") ->
    CollisionResult (empty when not run); transfer: model name -> TransferResult (thresholds
    calibrated on the other trajectory, identify.control.transfer; empty when not run); notes:
    why parts did not run; recordings: label -> Recording (closed-loop and collision runs, for
    the run folder)."""
    closed_loop: ClosedLoopResult
    collision: dict = field(default_factory=dict)
    transfer: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)
    recordings: dict = field(default_factory=dict)


def true_joint_model(robot, truth) -> JointModel | None:
    """The twin's true model from an identify.outputs.results.Truth (inertial incl. payload, link
    friction, stage-2 drive truth), or None."""
    if truth is None:
        return None
    return from_parameters(robot, truth.inertial, viscous=truth.viscous, coulomb=truth.coulomb,
                           stage2=truth.stage2, source="the twin's truth (URDF + payload, drive file)")


def loop_models(robot, *, identified: JointModel, truth=None, cad_inertial=None,
                J_m_datasheet=None) -> dict:
    """name -> JointModel: "identified", "true" (twin only), "cad" (CAD inertia `cad_inertial`
    (10n,) default the URDF's, datasheet rotor inertia, no friction)."""
    models = {"identified": identified}
    tm = true_joint_model(robot, truth)
    if tm is not None:
        models["true"] = tm
    cad_p = robot.params if cad_inertial is None else cad_inertial
    J = np.zeros(robot.n) if J_m_datasheet is None else J_m_datasheet
    models["cad"] = cad_model(robot, cad_p, J, source="CAD: URDF/prior inertia, datasheet rotor "
                                                      "inertia, no friction")
    return models


def run_loop(spec: ClosedLoopSpec, backend_name: str, arm: BackendArm, settings: dict, trajectory,
             models: dict, joint_names, *, calib_trajectory=None,
             progress: bool = False) -> LoopResults:
    """The tracking cases (pid_only, identified_ff, true_ff when the true model is known) and,
    on the twin, the collision runs with the identified (and CAD) model; with
    ``collision.transfer``, also thresholds calibrated on `calib_trajectory` (the other one of
    excitation / validation) and a rest hold, judged on `trajectory` and a contact at rest."""
    twin = backend_name == "twin"
    s = dict(settings)
    if twin:
        s["sample_rate_hz"] = spec.sample_rate_hz
    seed = int(s.get("seed", 0))
    if not twin and s.get("dry_run"):
        # the backend checks the plan and the identified feed-forward (range, limits) and moves
        # nothing: no tracking figures
        rec = run_case(backend_name, arm, s, trajectory, feedforward(models["identified"]),
                       progress=progress)
        return LoopResults(None, notes=["closed_loop: hardware dry run -- the plan and the "
                                        "identified model's feed-forward were checked, nothing "
                                        "moved, no tracking figures"],
                           recordings={"closed_loop_dry_run": rec})
    lead = 1e-3 if twin else 0.0        # the twin's CSP set point (closed_loop.tracking_case)
    ffs = {"pid_only": (pid_only, "none"),
           "identified_ff": (feedforward(models["identified"]), models["identified"].source)}
    if "true" in models:
        ffs["true_ff"] = (feedforward(models["true"]), models["true"].source)
    cases, recs, notes = {}, {}, []
    for name, (ff, src) in ffs.items():
        rec = run_case(backend_name, arm, s, trajectory, ff, progress=progress)
        recs[f"closed_loop_{name}"] = rec
        cases[name] = tracking_case(name, rec, ff, trajectory, src, lead_s=lead)
    if "true_ff" not in cases:
        notes.append("true_ff: no true model off the twin")
    res = LoopResults(ClosedLoopResult(cases=cases, trajectory=spec.trajectory,
                                       sample_rate_hz=float(s.get("sample_rate_hz", 0) or 0),
                                       joint_names=list(joint_names)), notes=notes, recordings=recs)
    col = spec.collision
    if not col.enabled:
        return res
    if not twin:
        res.notes.append("collision: needs the twin's contact events; on hardware calibrate the "
                         "thresholds on a collision-free run and test with a real contact")
        return res
    contact = contact_from_spec(col.contact)
    if not 0 <= contact.time_s < float(trajectory.duration):
        raise ValueError(f"closed_loop.collision.contact.time_s = {contact.time_s} s is not "
                         f"within the trajectory (0 .. {float(trajectory.duration)} s)")
    ff = ffs["identified_ff"][0]
    free = run_case(backend_name, arm, {**s, "seed": seed + 1}, trajectory, ff, progress=progress)
    hit = run_case(backend_name, arm, {**s, "seed": seed + 2, "contacts": [contact.as_setting()]}, trajectory, ff,
                   progress=progress)
    res.recordings.update({"collision_free": free, "collision_contact": hit})
    calib = recs["closed_loop_identified_ff"]
    names = ["identified"] + (["cad"] if col.compare_cad else [])
    for nm in names:
        res.collision[nm] = evaluate(models[nm], calib, free, hit, contact, name=nm,
                                     signal=col.signal, gain=col.observer_gain,
                                     k_sigma=col.k_sigma, peak_factor=col.peak_factor,
                                     margin_Nm=col.margin_Nm,
                                     stiction_speed=col.stiction_speed_rad_s)
    if col.transfer:
        _transfer(res, spec, calib_trajectory, trajectory, free, hit, contact, names, models,
                  lambda tr, sd, cs, p: run_case(backend_name, arm,
                                                 {**s, "seed": sd, "contacts": cs}, tr, ff,
                                                 periods=p, progress=progress), seed)
    return res


def _transfer(res: LoopResults, spec: ClosedLoopSpec, calib_trajectory, trajectory, free, hit,
              contact, names, models, run, seed: int) -> None:
    """The transfer part of run_loop into `res` (transfer, recordings, notes)."""
    if calib_trajectory is None:
        res.notes.append("collision.transfer: no calibration trajectory given, not run")
        return
    calib_on = other_trajectory(spec.trajectory)
    recs, seeds = transfer_runs(run, calib_trajectory, trajectory, spec.collision, seed)
    res.recordings.update(recs)
    for nm in names:
        res.transfer[nm] = evaluate_transfer(models[nm], recs, free, hit, contact,
                                             spec.collision, name=nm, calibrated_on=calib_on,
                                             judged_on=spec.trajectory, seeds=seeds)


def known_arm_model(spec: PayloadSpec, robot, truth=None, exported=None) -> JointModel:
    """The arm without the payload: a run folder's exported model (`exported`: its
    identify.outputs.layout.ExportedModel, when ``arm_model`` is a run folder), a URDF (its
    inertials and <dynamics>), or (arm_model null, twin) the twin's own arm -- `truth`
    (identify.outputs.results.Truth) minus the payload: the URDF's inertials with the drive file's
    friction."""
    p = spec.arm_model
    if p is None:
        if truth is None:
            raise ValueError("payload.arm_model: give the arm's parameters (a run folder or a URDF); "
                             "only the twin knows its own arm")
        return from_parameters(robot, robot.params, viscous=truth.viscous, coulomb=truth.coulomb,
                               stage2=truth.stage2, source="the twin's arm (URDF, drive file), "
                               "without the payload")
    if p.is_dir():
        if exported is None:
            raise ValueError(f"payload.arm_model: {p} holds no exported model")
        return from_export(robot, exported.urdf, exported.sidecar, exported.parameters)
    from identify.model.robot_model import RobotModel
    from identify.model.urdf import load_chain
    names = list(robot.joint_names)
    m = RobotModel.from_urdf(p, names, gravity=robot.gravity)
    ch = load_chain(p, names)
    return from_parameters(robot, m.params, viscous=ch.damping, coulomb=ch.friction,
                           motor_side=False, source=str(p))


def payload_trajectory(spec: PayloadSpec, robot):
    """(FourierTrajectory, cond) of the wrist excitation of `spec`."""
    start = np.radians(np.asarray(spec.start_deg, float))
    if start.shape != (robot.n,):
        raise ValueError(f"payload.start_deg has {start.size} angles, the arm has {robot.n} joints")
    return wrist_excitation(robot, start, harmonics=spec.harmonics, period_s=spec.period_s,
                            wrist=spec.wrist_joints, limit_scale=spec.limit_scale, seed=spec.seed)


def fit_payload(spec: PayloadSpec, arm_model: JointModel, rec, processing: dict, truth: dict | None,
                trajectory_cond: float | None = None) -> PayloadResult:
    """Process a recording (scenario processing settings) and fit the payload."""
    d = process(rec, ProcessingSettings.from_dict(processing))
    return identify_payload(arm_model, d, signal=spec.signal, truth=truth, consistent=spec.consistent,
                            trajectory_cond=trajectory_cond, min_speed=spec.min_speed_rad_s)


def run_payload(spec: PayloadSpec, backend_name: str, backend_arm: BackendArm, settings: dict,
                arm_model: JointModel, processing: dict, truth: dict | None, *,
                progress: bool = False):
    """(PayloadResult, trajectory, recording): optimize the wrist excitation, run it with the
    payload on (`backend_arm`: the arm the backend runs, payload included), fit with the known
    arm's model `arm_model`."""
    tr, cond = payload_trajectory(spec, arm_model.robot)
    rec = run_case(backend_name, backend_arm, settings, tr, None, progress=progress)
    return fit_payload(spec, arm_model, rec, processing, truth, cond), tr, rec
