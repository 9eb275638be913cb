"""The export of identification.friction: auto reproduces the model (issue 21, item 6): every
chosen term in identified_joints.yaml with its documented formula; Pinocchio's RNEA of
identified.urdf + the sidecar (and python -m identify.model.joint_sidecar) give the run's own
prediction."""
import json
import subprocess
import sys

import numpy as np
import pinocchio as pin
import pytest
import yaml

from identify.app.pipeline import fit_scenario
from identify.logs.simulate import simulate, write_log
from identify.model.friction import Term, dahl_state
from identify.model.joint_sidecar import JointTerms, read_sidecar, write_sidecar
from identify.model.robot_model import RobotModel
from identify.scenario.load import load_scenario

from conftest import ROOT

URDF = str(ROOT / "assets" / "cobot6.urdf")


def test_sidecar_library_terms_round_trip_and_formula(tmp_path):
    n, N, dt = 2, 400, 0.01
    t = np.arange(N) * dt
    qd = np.c_[0.4 * np.sin(2 * t), 0.3 * np.cos(3 * t)]
    qdd = np.c_[0.8 * np.cos(2 * t), -0.9 * np.sin(3 * t)]
    rigid = np.c_[2 + np.sin(t), -1 + 0.5 * np.cos(t)]
    lib = [[(Term("dahl", xs=3e-4), np.array([0.7])), (Term("armature"), np.array([0.05]))],
           [(Term("load_coulomb_4q", eps=0.02), np.array([0.1, 0.2])),
            (Term("stribeck", eps=0.0, vs=0.3), np.array([0.4]))]]
    z = np.zeros(n)
    jt = JointTerms(["a", "b"], z, z, np.array([0.1, 0.0]), z, signal="motor torque",
                    library=lib)
    path = write_sidecar(tmp_path / "identified_joints.yaml", jt)
    back = read_sidecar(path)
    got = back.torque(qd, qdd, dt=dt, rigid=rigid)
    # the documented formulas, written out
    tl = rigid[:, 1]
    c = np.tanh(qd[:, 1] / 0.02)
    drive = tl * qd[:, 1] > 0
    want = np.c_[0.1 + 0.7 * dahl_state(qd[:, 0], dt, 3e-4) + 0.05 * qdd[:, 0],
                 np.abs(tl) * c * np.where(drive, 0.1, 0.2)
                 + 0.4 * np.exp(-(qd[:, 1] / 0.3) ** 2) * np.sign(qd[:, 1])]
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="needs the rigid-body torque"):
        back.torque(qd, qdd, dt=dt)
    doc = yaml.safe_load(path.read_text())
    doc["joints"]["b"]["terms"][0]["coefficients"] = [0.1]
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ValueError, match=r"joints.b.terms\[0\]: load_coulomb_4q has 2"):
        read_sidecar(path)


def _pinocchio_rnea(urdf, names, q, qd, qdd):
    m = pin.buildModelFromUrdf(urdf)
    data = m.createData()
    idx = [m.joints[m.getJointId(nm)].idx_q for nm in names]
    out = np.empty(q.shape)
    for k in range(q.shape[0]):            # an independent RNEA, sample by sample (test only)
        x, v, a = (np.zeros(m.nq) for _ in range(3))
        x[idx], v[idx], a[idx] = q[k], qd[k], qdd[k]
        out[k] = pin.rnea(m, data, x, v, a)[idx]
    return out


def test_auto_export_reproduces_the_runs_prediction(tmp_path):
    model = RobotModel.from_urdf(URDF)
    log = simulate(model, duration_s=24.0, rate_hz=200.0, signals="tau_m", seed=4)
    f = write_log(log, tmp_path / "log", "ur_rtde")
    g = log.truth["gains"]
    fit = {"excitation": {"file": str(f), "preset": "ur_rtde", "current_gains": g,
                          "window_s": [0.0, 16.0]},
           "validation": {"file": str(f), "preset": "ur_rtde", "current_gains": g,
                          "window_s": [16.0, 24.0]}}
    scn = tmp_path / "fit.yaml"
    scn.write_text(yaml.safe_dump({"name": "auto", "arm": {"urdf": URDF}, "fit": fit,
                                   "outputs": {"dir": str(tmp_path / "runs"), "plots": False}}))
    res = fit_scenario(load_scenario(scn), out=tmp_path / "run")
    ident = res.identification
    assert ident.spec.friction == "auto"                  # the default for logs
    m = json.loads((res.folder / "metrics.json").read_text())
    sel = m["friction_selection"]
    assert [j["joint"] for j in sel["joints"]] == list(model.joint_names)
    assert all(j["candidates"] and j["why"] for j in sel["joints"])
    names = list(model.joint_names)
    d = ident.processed["validation"]
    side = read_sidecar(res.folder / "identified_joints.yaml", names)
    assert side.library is not None
    chosen = [sorted(t.label for t, _ in row) for row in side.library]
    assert chosen == [sorted(j["chosen"]) for j in sel["joints"]]
    rigid = _pinocchio_rnea(str(res.folder / "identified.urdf"), names, d.q, d.qd, d.qdd)
    pred = rigid + side.torque(d.qd, d.qdd, dt=float(np.median(np.diff(d.t))), rigid=rigid)
    ref = ident.export.predictions["validation"]
    assert np.max(np.abs(pred - ref)) / np.max(np.abs(ref)) <= 1e-6
    # the command-line entry on the same states
    states = tmp_path / "states.npz"
    np.savez(states, t=d.t, q=d.q, qd=d.qd, qdd=d.qdd, tau=ref)
    out = tmp_path / "pred.npz"
    r = subprocess.run([sys.executable, "-m", "identify.model.joint_sidecar",
                        str(res.folder / "identified.urdf"),
                        str(res.folder / "identified_joints.yaml"), str(states), "--out",
                        str(out)], capture_output=True, text=True, cwd=str(ROOT))
    assert r.returncode == 0, r.stderr
    assert np.max(np.abs(np.load(out)["tau_pred"] - ref)) / np.max(np.abs(ref)) <= 1e-6
    # the chosen model predicts the held-out window as well as the true law's class allows:
    # within 10 % of the noise floor of the currents (0.005 A x gain)
    floor = np.sqrt(np.mean((0.005 * np.asarray(g)) ** 2))
    assert m["export"]["rms"]["validation"]["overall"] < 1.1 * floor
