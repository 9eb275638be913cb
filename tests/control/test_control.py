"""identify.control: the momentum observer on synthetic data with a known contact, the drive
inversion, the run-folder model reader, and the closed loop on the twin (feed-forward built from
the true model gives the true-model case exactly)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from identify.control.detection import episodes, evaluate
from identify.backend.contact import Contact
from identify.control.joint_model import from_export, from_parameters
from identify.outputs.layout import exported_model
from identify.control.observer import (alarms, link_torque_from_motor, mass_matrix, residual,
                                       stiction_band, thresholds)
from identify.model.drives import load_drives
from identify.model.urdf_export import export_urdf

from conftest import ROOT, tiny_scenario

DT = 1e-3


def _simulate(model, tau_fn, tau_ext, q0, N):
    """Symplectic Euler at DT of M(q) qdd + h(q, qd) + f(qd) = tau + tau_ext (the aligned-sample
    convention of the twin: torque held during [t_k, t_k + dt)); returns t, q, qd, tau."""
    n = model.n
    q = np.zeros((N, n))
    qd = np.zeros((N, n))
    tau = np.zeros((N, n))
    q[0] = q0
    z = np.zeros((1, n))
    for k in range(N - 1):
        M = mass_matrix(model, q[k:k + 1])[0] + np.diag(model.armature)
        h = model.robot.inverse_dynamics(q[k:k + 1], qd[k:k + 1], z)[0]
        f = model.viscous * qd[k] + model.coulomb * np.tanh(qd[k] / model.coulomb_scale)
        tau[k] = tau_fn(k * DT, q[k], qd[k])
        qdd = np.linalg.solve(M, tau[k] + tau_ext[k] - h - f)
        qd[k + 1] = qd[k] + DT * qdd
        q[k + 1] = q[k] + DT * qd[k + 1]
    tau[-1] = tau_fn((N - 1) * DT, q[-1], qd[-1])
    return np.arange(N) * DT, q, qd, tau


@pytest.fixture(scope="module")
def arm_model(ref_model):
    d = load_drives(ROOT / "assets" / "cobot6_drives.yaml", list(ref_model.joint_names))
    return from_parameters(ref_model, ref_model.params, viscous=d.array("link_viscous"),
                           coulomb=d.array("link_coulomb"), armature=0.05 * np.ones(ref_model.n),
                           stage2={"xi_opp": d.array("xi"), "f_mc": d.array("motor_coulomb"),
                                   "f_mv": d.array("motor_viscous"), "J_m": d.array("J_r")},
                           source="test")


def test_observer_recovers_a_known_contact(arm_model):
    """A 5 N*m step of external torque on joint 2 and 2 N*m on joint 3 from t = 0.6 s, while a
    PD loop moves the arm: the residual is zero before and the discrete first-order response
    tau_ext (1 - (1 - K_O dt)^(k - k0)) after (the torque of period k shows in the momentum at
    k + 1), to 1 % of the step."""
    model = arm_model
    n, N, K = model.n, 1200, 40.0
    q0 = np.array([0.2, -1.2, 0.8, 0.1, 0.4, -0.2])
    ref = lambda t: q0 + 0.3 * np.sin(2 * np.pi * 0.7 * t) * np.array([1, .6, .8, 1, 1, 1])  # noqa
    g = lambda q: model.robot.inverse_dynamics(q[None], np.zeros((1, n)), np.zeros((1, n)))[0]  # noqa
    tau_fn = lambda t, q, qd: g(q) + 400.0 * (ref(t) - q) - 40.0 * qd                 # noqa: E731
    ext = np.zeros((N, n))
    k0 = 600
    ext[k0:, 1], ext[k0:, 2] = 5.0, -2.0
    t, q, qd, tau = _simulate(model, tau_fn, ext, q0, N)
    r = residual(model, t, q, qd, tau, K)
    assert np.max(np.abs(r[:k0])) < 0.02                  # no contact: ~0 (discretisation only)
    expect = np.zeros_like(r)
    expect[k0:] = ext[k0:] * (1 - (1 - K * DT) ** np.arange(N - k0))[:, None]
    assert np.max(np.abs(r[k0:] - expect[k0:])) < 0.05    # 1 % of the 5 N*m step
    # a wrong model (no friction) does not explain the motion: the residual is off by the friction
    wrong = from_parameters(model.robot, model.robot.params, armature=model.armature)
    assert np.max(np.abs(residual(wrong, t, q, qd, tau, K)[:k0])) > 0.1
    # thresholds and alarms: detected on joint 2 within 2 time constants
    th = thresholds(r[:k0], k_sigma=5.0, peak_factor=1.2, margin_Nm=0.2)
    a = alarms(r, th.value)
    assert not a[:k0].any()
    first = episodes(a)[0]
    assert k0 <= first < k0 + 2 / K / DT


def test_motor_torque_inversion(arm_model):
    """link_torque_from_motor inverts JointModel.motor_torque (rotor inertia aside: J_m = 0)."""
    rng = np.random.default_rng(0)
    m = arm_model
    m0 = from_parameters(m.robot, m.robot.params, viscous=m.viscous, coulomb=m.coulomb,
                         stage2={"xi_opp": m.xi_opp, "f_mc": m.f_mc, "f_mv": m.f_mv})
    q, qd, qdd = (rng.normal(size=(200, 6)) for _ in range(3))
    tau_r = m0.joint_torque(q, qd, qdd)
    tau_m = m0.motor_torque(q, qd, qdd)
    assert np.max(np.abs(tau_m - tau_r)) > 1.0             # the drive adds a lot
    back = link_torque_from_motor(m0, qd, tau_m, DT)
    np.testing.assert_allclose(back, tau_r, atol=1e-9)
    # the stiction band is zero away from rest and 2F at rest
    b = stiction_band(m0, np.arange(3) * DT, np.array([[0.0] * 6, [5.0] * 6, [5.0] * 6]),
                      np.zeros((3, 6)), gain=1 / DT * 0.999, speed=0.05)
    np.testing.assert_allclose(b[0], 2 * 0.999 * (m0.coulomb + m0.f_mc), rtol=1e-12)
    assert np.all(np.abs(b[2]) < 1e-2)


def _from_run_folder(folder, robot):
    ex = exported_model(folder)
    if ex is None:
        raise FileNotFoundError(f"{folder}: no identified.urdf")
    return from_export(robot, ex.urdf, ex.sidecar, ex.parameters)


def test_run_folder_model(tmp_path, ref_model):
    """identified.urdf + parameters.yaml stage 2 (+ optional sidecar) -> JointModel, the files
    found by the run folder's layout."""
    n = ref_model.n
    p = ref_model.params * 1.1
    export_urdf(ref_model, tmp_path / "identified.urdf", p, viscous=np.full(n, 0.2),
                coulomb=np.full(n, 0.3))
    s2 = {"variant": "opposing", "names": ["xi_opp", "f_mc", "f_mv", "J_m", "J_m/K"],
          "joints": list(ref_model.joint_names),
          "params": [[0.3, 1.0, 2.0, 0.4, 1e-4]] * n}
    (tmp_path / "parameters.yaml").write_text(yaml.safe_dump({"models": {"improved": {"stage2": s2}}}))
    jm = _from_run_folder(tmp_path, ref_model)
    np.testing.assert_allclose(jm.robot.params, p, rtol=1e-12)
    np.testing.assert_allclose(jm.viscous, 0.2)
    np.testing.assert_allclose(jm.xi_opp, 0.3)
    np.testing.assert_allclose(jm.J_m, 0.4)
    assert jm.motor_side and np.all(jm.offset == 0)
    side = {"signal": "joint torque", "joints": {nm: {"viscous": 0.5, "coulomb": 0.6, "offset": -0.1,
                                                       "armature": 0.02, "coulomb_shape": "tanh",
                                                       "coulomb_velocity_scale": 0.03}
                                                  for nm in ref_model.joint_names}}
    (tmp_path / "identified_joints.yaml").write_text(yaml.safe_dump(side))
    jm = _from_run_folder(tmp_path, ref_model)
    np.testing.assert_allclose(jm.viscous, 0.5)
    np.testing.assert_allclose(jm.offset, -0.1)
    np.testing.assert_allclose(jm.armature, 0.02)
    assert jm.coulomb_scale == 0.03
    assert exported_model(tmp_path / "nowhere") is None
    with pytest.raises(FileNotFoundError, match="nowhere.urdf"):
        from_export(ref_model, tmp_path / "nowhere.urdf")


def _truth_folder(folder, scn_dict):
    """A run folder whose exported model IS the twin's truth (URDF inertia, drive-file friction
    and stage 2), as `twinid run` would write it for a perfect identification."""
    from identify.app.inputs import build_model
    from identify.app.truth import true_link_parameters
    from identify.scenario.load import scenario_from_dict
    scn = scenario_from_dict(scn_dict, base=ROOT)
    model = build_model(scn)
    T = true_link_parameters(scn, model)
    export_urdf(model, folder / "identified.urdf", T.inertial, viscous=T.viscous, coulomb=T.coulomb)
    names = ["xi_lin", "xi_opp", "f_mc", "f_mv", "J_m"]
    s2 = {"names": names, "joints": list(model.joint_names),
          "params": np.column_stack([T.stage2[k] for k in names]).tolist()}
    (folder / "parameters.yaml").write_text(yaml.safe_dump({"models": {"improved": {"stage2": s2}}}))


@pytest.mark.slow
def test_closed_loop_true_model_folder_gives_the_true_case_exactly(tmp_path):
    """`twinid run` with closed_loop.model = a folder holding the twin's true model: the
    identified feed-forward case IS the true-model case (same numbers, bit for bit), both far
    better than PID only, the contact detected without false alarms; metrics.json, plots, report."""
    from identify.app.pipeline import run_scenario
    from identify.scenario.load import scenario_from_dict
    (tmp_path / "model").mkdir()
    base = tiny_scenario("cl_test")
    _truth_folder(tmp_path / "model", base)
    base["closed_loop"] = {"model": str(tmp_path / "model"), "sample_rate_hz": 1000,
                           "collision": {"contact": {"link": "link3", "time_s": 2.0,
                                                     "duration_s": 0.2, "force_N": [0, 20, 0]}}}
    base["outputs"] = {"dir": str(tmp_path / "runs")}
    scn = scenario_from_dict(base, base=ROOT)
    res = run_scenario(scn, out=tmp_path / "run")
    m = json.loads((res.folder / "metrics.json").read_text())
    cl = m["closed_loop"]
    assert cl["tracking_rms_rad"]["identified_ff"] == cl["tracking_rms_rad"]["true_ff"]
    assert cl["pid_torque_rms_Nm_per_joint"]["identified_ff"] == cl["pid_torque_rms_Nm_per_joint"]["true_ff"]
    assert cl["tracking_rms_rad"]["true_ff"] < 0.2 * cl["tracking_rms_rad"]["pid_only"]
    assert cl["pid_torque_rms_Nm"]["true_ff"] < 0.05 * cl["pid_torque_rms_Nm"]["pid_only"]
    col = m["collision"]
    assert col["detected"] and col["detection_delay_ms"] <= 50 and col["false_alarms"] == 0
    assert len(col["threshold_Nm"]) == 6 and "cad" in col["models"]
    for f in ("plots/closed_loop_tracking.png", "plots/collision.png", "report.md"):
        assert (res.folder / f).is_file()
    assert "Closed loop: torque feed-forward" in (res.folder / "report.md").read_text()


def test_evaluate_counts_false_alarms_outside_the_contact(arm_model):
    """evaluate(): an alarm far from the contact on the contact run is a false alarm."""
    from types import SimpleNamespace
    model = from_parameters(arm_model.robot, arm_model.robot.params)
    N = 3000
    t = np.arange(N) * DT
    q = np.tile(np.array([0.2, -1.2, 0.8, 0.1, 0.4, -0.2]), (N, 1))
    qd = np.zeros_like(q)
    g = model.robot.inverse_dynamics(q, qd, qd)
    rng = np.random.default_rng(1)
    mk = lambda tau: SimpleNamespace(t=t, q=q, qd=qd, tau_j=tau, tau_m=tau, truth={})  # noqa
    calib, free = mk(g + 0.01 * rng.normal(size=g.shape)), mk(g + 0.01 * rng.normal(size=g.shape))
    tau = g + 0.01 * rng.normal(size=g.shape)
    tau[1000:1200, 1] -= 5.0            # the contact (the link pushes back on the sensor)
    tau[2500:2600, 2] -= 3.0            # something else, later: a false alarm
    contact = Contact(link="link3", time_s=1.0, duration_s=0.2, force_N=(0.0, 0.0, -50.0))
    r = evaluate(model, calib, free, mk(tau), contact, name="x", signal="tau_j", gain=50.0,
                 stiction_speed=0.0)
    assert r.detected and r.detection_delay_ms < 10
    assert r.false_alarms == 0 and r.false_alarms_contact_run == 1


@pytest.mark.parametrize("section, fragment", [
    ({"closed_loop": {"collision": {"contact": {"link": "forearm"}}}},
     "closed_loop.collision.contact.link: unknown link 'forearm'"),
    ({"closed_loop": {"collision": {"observer_gain": 0}}},
     "closed_loop.collision.observer_gain: must be > 0"),
    ({"closed_loop": {"collision": {"rest_contact": {"link": "forearm"}}}},
     "closed_loop.collision.rest_contact.link: unknown link 'forearm'"),
    ({"closed_loop": {"collision": {"rest_contact": {"time_s": 0.05}}}},
     "closed_loop.collision.rest_contact.time_s: the contact at rest (0.05 s for 0.2 s) must "
     "start after settle_s (0.1 s)"),
    ({"closed_loop": {"collision": {"rest_hold_s": 0.6}}},
     "end within rest_hold_s (0.6 s)"),
    ({"closed_loop": {"model": "/nonexistent/run"}}, "closed_loop.model: not found"),
    ({"payload": {"start_deg": [0, 0, 0]}}, "payload.start_deg: must have one angle per joint (6)"),
    ({"payload": {"signal": "current"}}, "payload.signal"),
])
def test_control_sections_are_checked(tmp_path, section, fragment):
    """Bad closed_loop / payload sections: one line `file:line: key.path: message`."""
    from identify.scenario.load import load_scenario
    from identify.scenario.spec import ScenarioError
    d = tiny_scenario("bad")
    d.update(section)
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    with pytest.raises(ScenarioError) as e:
        load_scenario(p)
    msg = str(e.value)
    assert fragment in msg and msg.startswith(f"{p}:") and "\n" not in msg
