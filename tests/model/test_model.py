"""RobotModel and its regressor against independent oracles: Pinocchio and PyBullet."""
from pathlib import Path

import numpy as np
import pinocchio as pin
import pybullet as p
import pytest

from identify import RobotModel
from identify.model.arm import REFERENCE_URDF

PANDA_ARM = [f"panda_joint{i}" for i in range(1, 8)]


def _arms(data):
    return {
        "cobot6": (str(REFERENCE_URDF), None),
        "iiwa": (data + "/kuka_iiwa/model.urdf", None),
        "panda": (data + "/franka_panda/panda.urdf", PANDA_ARM),
    }


def _states(n, N, seed):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-np.pi, np.pi, (N, n)), rng.normal(0, 1.5, (N, n)), rng.normal(0, 4, (N, n)))


def _pin_model(path, joints):
    pm = pin.buildModelFromUrdf(path)
    if joints is not None:
        lock = [pm.getJointId(name) for name in pm.names[1:] if name not in joints]
        pm = pin.buildReducedModel(pm, lock, pin.neutral(pm))
    return pm


@pytest.mark.parametrize("arm", ["cobot6", "iiwa", "panda"])
def test_regressor_matches_pinocchio_rnea(arm, pybullet_data_path):
    path, joints = _arms(pybullet_data_path)[arm]
    m = RobotModel.from_urdf(path, joints)
    pm = _pin_model(path, joints)
    pd = pm.createData()
    assert m.n == pm.nv
    assert list(m.joint_names) == list(pm.names[1:])
    q, qd, qdd = _states(m.n, 40, seed=1)
    tau = m.regressor(q, qd, qdd) @ m.inertial_parameters()
    ref = np.array([pin.rnea(pm, pd, q[k], qd[k], qdd[k]) for k in range(len(q))])
    rel = np.abs(tau - ref).max() / np.abs(ref).max()
    assert rel <= 1e-8, rel
    # the standard parameters read from the URDF equal Pinocchio's (fixed links merged alike)
    pin_params = np.concatenate([pm.inertias[i].toDynamicParameters() for i in range(1, pm.njoints)])
    np.testing.assert_allclose(m.inertial_parameters(), pin_params, atol=1e-10)


def test_regressor_matrix_matches_pinocchio(ref_model):
    pm = _pin_model(str(REFERENCE_URDF), None)
    pd = pm.createData()
    q, qd, qdd = _states(6, 20, seed=2)
    Y = ref_model.regressor(q, qd, qdd)
    for k in range(len(q)):
        Yp = pin.computeJointTorqueRegressor(pm, pd, q[k], qd[k], qdd[k])
        np.testing.assert_allclose(Y[k], Yp, atol=1e-10 * max(1, np.abs(Yp).max()))


@pytest.mark.parametrize("arm", ["cobot6", "iiwa", "panda"])
def test_inverse_dynamics_matches_pybullet(arm, pybullet_data_path):
    path, joints = _arms(pybullet_data_path)[arm]
    m = RobotModel.from_urdf(path, joints)
    cid = p.connect(p.DIRECT)
    try:
        p.setGravity(0, 0, -9.81, physicsClientId=cid)
        body = p.loadURDF(path, useFixedBase=True, flags=p.URDF_USE_INERTIA_FROM_FILE,
                          physicsClientId=cid)
        movable = [j for j in range(p.getNumJoints(body, physicsClientId=cid))
                   if p.getJointInfo(body, j, physicsClientId=cid)[2] != p.JOINT_FIXED]
        names = [p.getJointInfo(body, j, physicsClientId=cid)[1].decode() for j in movable]
        ours = [names.index(n) for n in m.joint_names]
        q, qd, qdd = _states(m.n, 15, seed=3)
        for k in range(len(q)):
            full = [np.zeros(len(movable)) for _ in range(3)]
            for arr, src in zip(full, (q[k], qd[k], qdd[k])):
                arr[ours] = src  # locked joints (panda fingers) stay at zero
            ref = np.array(p.calculateInverseDynamics(body, *[list(a) for a in full],
                                                      physicsClientId=cid))[ours]
            tau = m.inverse_dynamics(q[k], qd[k], qdd[k])
            assert np.abs(tau - ref).max() <= 1e-8 * max(1.0, np.abs(ref).max()), (k, tau - ref)
    finally:
        p.disconnect(cid)


def test_shapes_single_and_batch(ref_model):
    q, qd, qdd = _states(6, 5, seed=4)
    Yb = ref_model.regressor(q, qd, qdd)
    assert Yb.shape == (5, 6, 60)
    Ys = ref_model.regressor(q[3], qd[3], qdd[3])
    assert Ys.shape == (6, 60)
    np.testing.assert_allclose(Ys, Yb[3], atol=1e-14)
    assert ref_model.inverse_dynamics(q[3], qd[3], qdd[3]).shape == (6,)
    # large batch crosses chunk boundaries and a padded tail
    q, qd, qdd = _states(6, 5000, seed=5)
    Y = ref_model.regressor(q, qd, qdd)
    f = ref_model.regressor_function()
    for k in (0, 2047, 2048, 4095, 4096, 4999):
        np.testing.assert_allclose(Y[k], np.array(f(q[k], qd[k], qdd[k])), atol=1e-12)


def test_regressor_rejects_bad_input(ref_model):
    q, qd, qdd = _states(6, 4, seed=6)
    qd[2, 4] = np.nan
    with pytest.raises(ValueError, match="qd is not finite at sample 2, joint joint5"):
        ref_model.regressor(q, qd, qdd)
    with pytest.raises(ValueError, match=r"shape \(N, 6\)"):
        ref_model.regressor(q[:, :5], qd, qdd)


def test_casadi_regressor_jacobian_matches_finite_differences(ref_model):
    """The symbolic regressor is differentiable (used by the excitation optimizer)."""
    import casadi as ca
    f = ref_model.regressor_function()
    qs = ca.SX.sym("q", 6)
    rng = np.random.default_rng(7)
    q0, qd0, qdd0 = rng.normal(size=(3, 6))
    J = ca.Function("J", [qs], [ca.jacobian(ca.vec(f(qs, qd0, qdd0)), qs)])
    Ja = np.array(J(q0))
    h = 1e-6
    Jn = np.zeros_like(Ja)
    for i in range(6):
        e = np.zeros(6)
        e[i] = h
        Jn[:, i] = (np.array(f(q0 + e, qd0, qdd0)).ravel(order="F")
                    - np.array(f(q0 - e, qd0, qdd0)).ravel(order="F")) / (2 * h)
    np.testing.assert_allclose(Ja, Jn, atol=1e-6)


def test_link_origins_match_pybullet(ref_model):
    cid = p.connect(p.DIRECT)
    try:
        body = p.loadURDF(str(REFERENCE_URDF), useFixedBase=True, physicsClientId=cid)
        q = _states(6, 5, seed=8)[0]
        P = ref_model.link_origins(q)
        for k in range(5):
            for j in range(6):
                p.resetJointState(body, j, q[k, j], physicsClientId=cid)
            for j in range(6):
                ls = p.getLinkState(body, j, computeForwardKinematics=True, physicsClientId=cid)
                # PyBullet reports link states in single precision
                np.testing.assert_allclose(P[k, j + 1], ls[4], atol=1e-6)  # URDF link frame
    finally:
        p.disconnect(cid)


def test_without_a_compiler_falls_back_with_a_warning(tmp_path, monkeypatch):
    """A missing compiler (CC pointing nowhere) must not break evaluation: same numbers, warned."""
    from identify.model.regressor import BatchEvaluator
    monkeypatch.setenv("TWINID_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    m = RobotModel.reference()
    with pytest.warns(RuntimeWarning, match="no C compiler found"):
        ev = BatchEvaluator(m.regressor_function())
    q, qd, qdd = _states(6, 7, seed=9)
    np.testing.assert_allclose(ev(q, qd, qdd), m.regressor(q, qd, qdd), atol=1e-12)


def test_bias_by_newton_euler_equals_the_regressor_and_pinocchio():
    """identify.model.regressor.build_bias (the twin's compiled bias) = Y(q, v, 0) theta and
    Pinocchio's nonLinearEffects at random states (independent oracle)."""
    import pinocchio as pin
    from identify import RobotModel
    from identify.model.regressor import build_bias
    root = Path(__file__).resolve().parents[2]
    m = RobotModel.from_urdf(root / "assets" / "cobot6.urdf")
    h = build_bias(m.placements, m.axes, m.gravity)
    theta = m.inertial_parameters()
    pm = pin.buildModelFromUrdf(str(root / "assets" / "cobot6.urdf"))
    pm.gravity.linear = np.asarray(m.gravity, float)
    pd = pm.createData()
    rng = np.random.default_rng(3)
    for _ in range(5):
        q, v = rng.uniform(-2, 2, m.n), rng.uniform(-2, 2, m.n)
        hb = np.asarray(h(q, v, theta)).ravel()
        hy = m.regressor(q[None], v[None], np.zeros((1, m.n)))[0] @ theta
        np.testing.assert_allclose(hb, hy, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(hb, pin.nonLinearEffects(pm, pd, q, v), rtol=1e-8, atol=1e-8)


def test_hold_problem_refuses_only_what_no_pose_can_hold(ref_model):
    """identify.model.payload.hold_problem: the reference arm's rated 3 kg and the README's
    1.5 kg pass; 10 t is refused naming a joint, its torque and its limit (over 2x even in the
    best pose); refusal is monotone in the mass."""
    import numpy as np
    from identify.model.payload import hold_problem
    from identify.model.spatial import params_from_inertial

    def payload(m):
        return params_from_inertial(m, np.array([0.0, 0.0, 0.05]), np.zeros((3, 3)))
    for m in (1.5, 3.0):
        assert hold_problem(ref_model, payload(m)) is None
    msg = hold_problem(ref_model, payload(10000.0))
    assert msg is not None and "cannot hold this payload in any pose" in msg
    assert any(f"joint {j} needs" in msg for j in ref_model.joint_names), msg
    # refused exactly when even the best sampled pose needs > 2x a limit: the message's ratio
    ratio = float(msg.split("N*m of gravity torque, ")[1].split("x its limit")[0])
    assert ratio > 2.0
    # monotone in the mass: between 3 kg (held) and 10 t (refused) there is one threshold
    masses = [3.0, 30.0, 300.0, 3000.0, 10000.0]
    refused = [hold_problem(ref_model, payload(m)) is not None for m in masses]
    assert refused == sorted(refused)
