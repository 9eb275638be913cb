"""Twin contact events (TwinSettings.contacts) against closed forms.

A world-frame force f on a point of a link acts on the joints as tau_ext = J_p(q)^T f, with J_p the
point's translational Jacobian. The independent references are identify.RobotModel: J_p by central
differences of its forward kinematics (link_origins: the joint-frame origins, i.e. the URDF link
frames), M(q) and h(q, qd) by its inverse dynamics -- not PyBullet and not the twin's code.
"""
from __future__ import annotations

import numpy as np
import pytest

from test_twin_helpers import ARM, URDF, CosineTrajectory

Q0 = np.radians([10.0, -60.0, 40.0, -80.0, 30.0, 15.0])
F = [15.0, -20.0, 12.0]
T0, DUR = 0.05, 0.03


@pytest.fixture(scope="module")
def model():
    from identify import RobotModel
    return RobotModel.from_urdf(URDF)


def _point_jacobian(model, q, frame, step=1e-6):
    """d origin_frame / dq (3, n) by central differences of RobotModel.link_origins."""
    J = np.empty((3, model.n))
    for j in range(model.n):
        dq = np.zeros(model.n)
        dq[j] = step
        J[:, j] = (model.link_origins(q + dq)[frame] - model.link_origins(q - dq)[frame]) / (2 * step)
    return J


def _hold_run(model, settings, duration=0.12):
    """Rigid or compliant arm held at Q0 by open-loop gravity compensation (ideal sensors, 1 kHz),
    a contact on link6's frame origin from T0 for DUR."""
    from twin import make_backend
    be = make_backend(ARM, {"noise": False, "sample_rate_hz": 1000, "settle_s": 0.0,
                            "position_control": False,
                            "contacts": [{"link": "link6", "time_s": T0, "duration_s": DUR,
                                          "force_N": F, "point_m": [0.0, 0.0, 0.0]}],
                            **settings})
    traj = CosineTrajectory(Q0, np.zeros(6), np.ones(6), duration)
    return be.run(traj, tau_ff=lambda q, qd, qdd: model.inverse_dynamics(q, 0 * qd, 0 * qdd))


def test_contact_on_a_resting_rigid_arm_matches_the_closed_form(model):
    """Rigid joints at rest under exact gravity compensation: before the contact nothing moves;
    during it tau_ext = J_p^T f (J_p of RobotModel's kinematics) and, at its onset, the
    acceleration jumps by M^-1 J_p^T f; the torque identity tau_l + tau_ext = M qdd + h holds in every
    sample; f_ext is the force exactly in the contact window."""
    rec = _hold_run(model, {"drive_model": False})
    T = rec.truth
    k0, k1 = int(round(T0 * 1000)), int(round((T0 + DUR) * 1000))
    np.testing.assert_array_equal(T["f_ext"][:, 0][k0:k1], np.broadcast_to(F, (k1 - k0, 3)))
    assert not np.any(T["f_ext"][:k0]) and not np.any(T["f_ext"][k1:])
    assert not np.any(T["tau_ext"][:k0]) and not np.any(T["tau_ext"][k1:])
    assert np.abs(T["qd"][:k0 + 1]).max() < 1e-9           # at rest until the contact
    for k in (k0, (k0 + k1) // 2, k1 - 1):
        Jp = _point_jacobian(model, T["q"][k], 6)
        np.testing.assert_allclose(T["tau_ext"][k], Jp.T @ F, atol=1e-6, err_msg=f"sample {k}")
    q = T["q"][k0]
    g = model.inverse_dynamics(q, np.zeros(6), np.zeros(6))
    M = np.column_stack([model.inverse_dynamics(q, np.zeros(6), e) - g for e in np.eye(6)])
    # the contact's own acceleration: the step at its onset (the residual of the open-loop gravity
    # compensation cancels), compared in torque units: M (dqdd) = J_p^T f (M^-1 of the wrist
    # amplifies round-off ~1e3-fold, so rad/s^2 would test the conditioning, not the physics)
    np.testing.assert_allclose(M @ (T["qdd"][k0] - T["qdd"][k0 - 1]),
                               _point_jacobian(model, q, 6).T @ F, rtol=0, atol=1e-5)
    ID = model.inverse_dynamics(T["q"], T["qd"], T["qdd"])
    # 1e-5 N*m: PyBullet applies the force at the world point (applyExternalForce), tau_ext comes
    # from its calculateJacobian -- two paths, agreeing to ~1e-6 N*m on ~25 N*m
    assert np.abs(T["tau_l"] + T["tau_ext"] - ID).max() < 1e-5
    assert np.abs(T["tau_l"] - ID)[k0:k1].max() > 1.0       # without tau_ext it cannot hold


def test_contact_with_compliant_drives_keeps_the_link_identity(model):
    """With the drive model the contact enters the implicit step's link equation: tau_l + tau_ext
    = ID(q, qd, qdd) of the same sample throughout, and the torque sensor feels the contact."""
    rec = _hold_run(model, {"position_control": True}, duration=0.15)
    T = rec.truth
    ID = model.inverse_dynamics(T["q"], T["qd"], T["qdd"])
    assert np.abs(T["tau_l"] + T["tau_ext"] - ID).max() < 1e-5
    k0 = int(round(T0 * 1000))
    assert np.abs(rec.tau_j[k0 + 20] - rec.tau_j[k0 - 1]).max() > 1.0
    assert rec.meta["contacts"][0]["link"] == "link6"


def test_bad_contacts_are_refused():
    from twin import TwinConfig, TwinSettings, TwinSim
    from test_twin_helpers import DRIVES
    for bad, msg in (({"link": "link6", "time_s": 0.1, "duration_s": 0.1}, "missing"),
                     ({"link": "link6", "time_s": 0.1, "duration_s": 0.0, "force_N": [1, 0, 0]}, "duration_s"),
                     ({"link": "link6", "time_s": 0.1, "duration_s": 0.1, "force_N": [1, 0]}, "force_N")):
        with pytest.raises(ValueError, match=msg):
            TwinSettings.from_dict({"contacts": [bad]})
    cfg = TwinConfig.from_files(URDF, DRIVES, settings={"contacts": [
        {"link": "link9", "time_s": 0.0, "duration_s": 0.1, "force_N": [1, 0, 0]}]})
    with pytest.raises(ValueError, match="link9"):
        TwinSim(cfg)
