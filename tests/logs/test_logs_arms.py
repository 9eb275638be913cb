"""`twinid fit` on arms that are not the twin, from logs in every supported format, with DEFAULT
identification settings (issue 14).

Logs are simulated from the arms' own URDFs (identify.logs.simulate: RNEA + per-joint viscous,
tanh-Coulomb, offset, armature + noise); the tests check that the fit recovers the simulated
parameters (the identifiable base combinations), that the exported model -- identified.urdf
loaded with Pinocchio, plus the identified_joints.yaml terms -- reproduces the run's prediction
to 1e-6, and what the run folder says (source: logs, the fitted signal, the resolved defaults).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from identify.app.pipeline import fit_scenario
from identify.logs.simulate import simulate, write_log
from identify.model.base_params import compute_base_parameters
from identify.model.joint_sidecar import read_sidecar
from identify.model.robot_model import RobotModel
from identify.scenario.load import load_scenario

pin = pytest.importorskip("pinocchio")

PANDA_JOINTS = [f"panda_joint{i}" for i in range(1, 8)]


def _urdf(pybullet_data_path, arm):
    return str(Path(pybullet_data_path) / {"xarm": "xarm/xarm6_robot.urdf",
                                            "panda": "franka_panda/panda.urdf",
                                            "iiwa": "kuka_iiwa/model.urdf"}[arm])


def _scenario(tmp_path, urdf, fit, joints=None, ident=None, name="arm") -> Path:
    d = {"name": name, "arm": {"urdf": urdf}, "fit": fit,
         "outputs": {"dir": str(tmp_path / "runs"), "plots": False}}
    if joints:
        d["arm"]["joints"] = joints
    if ident:
        d["identification"] = ident
    p = tmp_path / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d))
    return p


def _pinocchio_prediction(urdf_path, joint_names, q, qd, qdd):
    """RNEA of the exported URDF with Pinocchio (joints outside `joint_names` locked at 0)."""
    full = pin.buildModelFromUrdf(str(urdf_path))
    lock = [full.getJointId(nm) for nm in full.names[1:] if nm not in joint_names]
    model = pin.buildReducedModel(full, lock, pin.neutral(full)) if lock else full
    assert [model.names[i] for i in range(1, model.njoints)] == list(joint_names)
    data = model.createData()
    return np.array([pin.rnea(model, data, q[k], qd[k], qdd[k]) for k in range(q.shape[0])])


def _check_export_reproduces(res, label="validation"):
    """identified.urdf (Pinocchio) + identified_joints.yaml == the run's exported prediction."""
    ident = res.identification
    names = list(ident.model.joint_names)
    d = ident.processed[label]
    terms = read_sidecar(res.folder / "identified_joints.yaml", names)
    rigid = _pinocchio_prediction(res.folder / "identified.urdf", names, d.q, d.qd, d.qdd)
    pred = rigid + terms.torque(d.qd, d.qdd, dt=float(np.median(np.diff(d.t))), rigid=rigid)
    ref = ident.export.predictions[label]
    rel = np.max(np.abs(pred - ref)) / np.max(np.abs(ref))
    assert rel <= 1e-6, rel
    # and that prediction's RMS is what metrics.json reports for the exported model
    key = "tau_j" if ident.export.signal == "joint torque" and ident.improved is not None \
        else "tau_m"
    meas = (getattr(d, "raw", None) or {}).get(key)        # the raw measured signal
    meas = getattr(d, key) if meas is None else meas
    m = json.loads((res.folder / "metrics.json").read_text())
    assert m["export"]["rms"][label]["overall"] == pytest.approx(
        float(np.sqrt(np.mean((pred - meas) ** 2))), rel=1e-6)
    return m


def _assert_recovered(fitted, p_true, names):
    """Every well-excited base parameter (relative std < 10 %) within 5 sigma of the simulated
    truth, and at least 80 % of the friction / offset coefficients among them."""
    val, std = fitted.params_, fitted.std_
    good = std < 0.1 * np.abs(p_true)
    z = np.abs(val - p_true) / std
    assert np.all(z[good] < 5), dict(zip(np.array(names)[good][z[good] >= 5], z[good][z[good] >= 5]))
    fr = np.array([nm[:2] in ("fv", "fc", "fo") for nm in names])
    assert good[fr].mean() >= 0.8, np.array(names)[fr & ~good]
    assert good.sum() >= len(names) // 2, good.sum()


def _true_base(model, truth, key, terms):
    """Base parameters of the simulation's truth for the fitted terms (same base as the fit)."""
    base = compute_base_parameters(model, terms=tuple(terms), seed=0)
    t = truth[key]
    full = np.concatenate([np.asarray(truth["inertial"], float)]
                          + [np.asarray(t[k], float) for k in terms])
    return base, base.E @ full


def test_currents_only_ur_rtde_xarm(tmp_path, pybullet_data_path):
    """A 6-axis arm with motor currents only, UR RTDE CSV (space separated): auto -> rigid body +
    friction on eta*beta*i with offset, armature and tanh Coulomb; parameters recovered;
    exported model reproduces the prediction; meshes kept; the run says source: logs."""
    urdf = _urdf(pybullet_data_path, "xarm")
    model = RobotModel.from_urdf(urdf)
    log = simulate(model, duration_s=24.0, rate_hz=250.0, signals="tau_m", seed=1)
    f = write_log(log, tmp_path / "log", "ur_rtde")
    g = log.truth["gains"]
    fit = {"excitation": {"file": str(f), "preset": "ur_rtde", "current_gains": g,
                          "window_s": [0.0, 16.0]},
           "validation": {"file": str(f), "preset": "ur_rtde", "current_gains": g,
                          "window_t": [16.0, 24.0]}}
    res = fit_scenario(load_scenario(_scenario(tmp_path, urdf, fit, ident={"friction": "terms"})),
                       out=tmp_path / "run")
    ident = res.identification
    assert ident.spec.joint_model == "simplified" and ident.signal == "tau_m"
    assert ident.spec.friction_terms == ("viscous", "coulomb", "offset", "armature")
    assert ident.spec.coulomb_shape == "tanh" and ident.spec.physical_consistency is True
    # recovered: the identified base parameters against the simulation's truth
    base, p_true = _true_base(model, log.truth, "motor_torque_terms", ident.spec.friction_terms)
    sm = ident.simplified
    assert list(sm.names_) == list(base.names)
    _assert_recovered(sm, p_true, base.names)
    m = _check_export_reproduces(res)
    assert m["source"] == "logs" and m["headline_model"] == "export"
    assert m["headline"]["derived_from"] == "simplified"
    assert m["signal"] == "motor torque η·β·i" and "paper" not in m
    assert m["export"]["rms"]["validation"]["overall"] < 0.05
    text = (res.folder / "identified.urdf").read_text()
    assert 'filename="xarm_description/meshes' in text or ".stl" in text or ".dae" in text
    scn = yaml.safe_load((res.folder / "scenario.yaml").read_text())
    assert not {"twin", "trajectories", "sweep", "hardware"} & set(scn)
    assert scn["identification"]["joint_model"] == "simplified"
    assert scn["processing"]["velocity"] == "log"
    rep = (res.folder / "report.md").read_text()
    assert "Source: **logs**" in rep and "Backend: **twin**" not in rep and str(f) in rep


def test_joint_torque_only_libfranka_panda(tmp_path, pybullet_data_path):
    """Panda with the fingers locked (arm.joints honoured at load), libfranka-style CSV with
    tau_J only: rigid body + friction on the JOINT torque; reports name 'joint torque'."""
    urdf = _urdf(pybullet_data_path, "panda")
    model = RobotModel.from_urdf(urdf, PANDA_JOINTS)
    log = simulate(model, duration_s=24.0, rate_hz=250.0, signals="tau_j", seed=2)
    f = write_log(log, tmp_path / "log", "libfranka")
    fit = {"excitation": {"file": str(f), "preset": "libfranka", "window_rows": [0, 4000]},
           "validation": {"file": str(f), "preset": "libfranka", "window_rows": [4000, 6000]}}
    res = fit_scenario(load_scenario(_scenario(tmp_path, urdf, fit, joints=PANDA_JOINTS,
                                               ident={"friction": "terms"})),
                       out=tmp_path / "run")
    ident = res.identification
    assert ident.signal == "tau_j" and ident.spec.joint_model == "simplified"
    assert "armature" not in ident.spec.friction_terms      # the sensor sits after the gear
    base, p_true = _true_base(model, log.truth, "joint_torque_terms", ident.spec.friction_terms)
    _assert_recovered(ident.simplified, p_true, base.names)
    m = _check_export_reproduces(res)
    assert m["signal"] == "joint torque"
    assert "joint torque" in (res.folder / "report.md").read_text()
    assert "motor torque" not in json.dumps(m["export"])
    # the fingers' joints are still in the exported URDF (as shipped), massless
    assert 'name="panda_finger_joint1"' in (res.folder / "identified.urdf").read_text()


def test_both_signals_text_per_signal_iiwa(tmp_path, pybullet_data_path):
    """iiwa with joint torque sensors and currents, one text file per signal: auto -> both
    models (simplified and improved); the export is the stage-1 joint-torque model."""
    urdf = _urdf(pybullet_data_path, "iiwa")
    model = RobotModel.from_urdf(urdf)
    log = simulate(model, duration_s=16.0, rate_hz=200.0, signals="both", seed=3)
    f = write_log(log, tmp_path / "log", "text_per_signal")
    fit = {"excitation": {"file": str(f), "format": "text", "current_gains": log.truth["gains"],
                          "window_s": [0.0, 11.0]},
           "validation": {"file": str(f), "format": "text", "current_gains": log.truth["gains"],
                          "window_s": [11.0, 16.0]}}
    res = fit_scenario(load_scenario(_scenario(tmp_path, urdf, fit)), out=tmp_path / "run")
    ident = res.identification
    assert ident.spec.joint_model == "both"
    assert ident.simplified is not None and ident.improved is not None
    m = _check_export_reproduces(res)
    assert m["headline_model"] == "export" and m["export"]["signal"] == "joint torque"
    assert m["headline"]["derived_from"] == "improved stage 1"
