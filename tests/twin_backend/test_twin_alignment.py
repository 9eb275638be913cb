"""Sample alignment of twin recordings against independent truth (identify.backend.recording's contract).

Every field of sample k refers to t_k, the start of the 1 ms control period [t_k, t_k + dt):
positions/velocities at t_k, torques as held during the period, qdd the period's acceleration.
The independent truth is the rigid-body inverse dynamics of the arm's URDF
(identify.RobotModel.inverse_dynamics, recursive Newton-Euler, not PyBullet): the torque the
links receive during the period must equal ID(q, qd, qdd) of the SAME sample to round-off, and
must NOT equal it one sample earlier or later (the old recordings paired the positions at the end
of a period with the torques applied during it: one period of lag, which this test rejects).
"""
from __future__ import annotations

import numpy as np
import pytest

from test_twin_helpers import ARM, URDF, excitation

#: tolerance of the torque identity [N*m]: round-off of two inverse-dynamics algorithms
#: (PyBullet's articulated-body step vs RobotModel's Newton-Euler) on torques of ~100 N*m
TOL = 1e-6


def _record(settings, duration=1.0, scale=1.0):
    from twin import make_backend
    be = make_backend(ARM, {"noise": False, "sample_rate_hz": 1000, "settle_s": 0.02, **settings})
    return be.run(excitation(duration, scale=scale))


@pytest.fixture(scope="module")
def model():
    from identify import RobotModel
    return RobotModel.from_urdf(URDF)


def _id(model, rec, shift=0):
    """Inverse dynamics at the truth (q, qd, qdd) of sample k + shift, for the samples where it
    exists, next to the index range of the torques it is compared with."""
    T = rec.truth
    N = rec.n_samples
    ks = np.arange(max(0, -shift), N - max(0, shift))
    tau = model.inverse_dynamics(T["q"][ks + shift], T["qd"][ks + shift], T["qdd"][ks + shift])
    return ks, tau


def test_rigid_joints_torque_matches_inverse_dynamics_of_the_same_sample(model):
    """Drive model off (the motor torque acts on the link; no friction), ideal sensors: the
    recorded joint torque tau_j[k] = ID(q[k], qd[k], qdd[k]) -- with q, qd, qdd the truth of
    the same sample -- to round-off; shifted by one sample it is off by orders of magnitude."""
    rec = _record({"drive_model": False})
    np.testing.assert_array_equal(rec.q, rec.truth["q"])
    np.testing.assert_array_equal(rec.tau_j, rec.truth["tau_r"])
    ks, tau = _id(model, rec)
    err = np.abs(rec.tau_j[ks] - tau).max()
    assert err < TOL, f"aligned: max |tau_j - ID| = {err:.3g} N*m"
    for shift in (-1, 1):
        ks, tau = _id(model, rec, shift)
        err_s = np.abs(rec.tau_j[ks] - tau).max()
        assert err_s > 1e3 * TOL, f"shift {shift}: {err_s:.3g} N*m -- the check cannot tell"


def test_drive_model_link_torque_matches_inverse_dynamics_of_the_same_sample(model):
    """Compliant drives with every friction: the torque the link receives (truth tau_l) and the
    measured torque-sensor reading minus the link-side friction (tau_j - tau_lv - tau_lc) both
    equal ID at the same sample's truth; the drive's reported velocity is the motor's at t_k."""
    rec = _record({})
    T = rec.truth
    np.testing.assert_array_equal(rec.tau_j, T["tau_r"])
    np.testing.assert_array_equal(rec.qd, T["qd_m"])
    ks, tau = _id(model, rec)
    assert np.abs(T["tau_l"][ks] - tau).max() < TOL
    link = rec.tau_j - T["tau_lv"] - T["tau_lc"]
    err = np.abs(link[ks] - tau).max()
    assert err < TOL, f"max |tau_j - link friction - ID| = {err:.3g} N*m"
    ks, tau = _id(model, rec, 1)
    assert np.abs(link[ks] - tau).max() > 1e3 * TOL


def test_positions_differentiate_to_the_recorded_acceleration():
    """qdd[k] is the second central difference of the recorded positions at k (symplectic Euler:
    q[k+1] = q[k] + dt qd[k+1]), and q[k+1] - q[k] = dt qd[k+1]: position, velocity and
    acceleration of a sample refer to the same instant t_k."""
    rec = _record({})
    q, qd, qdd = (rec.truth[c] for c in ("q", "qd", "qdd"))
    dt = 1e-3
    np.testing.assert_allclose((q[2:] - 2 * q[1:-1] + q[:-2]) / dt ** 2, qdd[1:-1], atol=1e-6)
    np.testing.assert_allclose(np.diff(q, axis=0) / dt, qd[1:], atol=1e-9)


def test_io_delay_shifts_every_measured_field_alike():
    """io_delay_s: each measured field of sample k is the aligned truth of sample k - d
    (d = delay in samples at 1 kHz); truth itself is not delayed; reads before the first period
    are the rest state at the start pose."""
    d = 3
    rec = _record({"io_delay_s": d * 1e-3}, duration=0.3)
    T = rec.truth
    for meas, tr in (("q", "q"), ("tau_j", "tau_r"), ("qd", "qd_m"), ("tau_m", "tau_m")):
        np.testing.assert_allclose(getattr(rec, meas)[d:], T[tr][:-d], rtol=0, atol=1e-12,
                                   err_msg=meas)
    rec0 = _record({"io_delay_s": d * 1e-3, "settle_s": 0.0}, duration=0.05)
    np.testing.assert_allclose(rec0.q[:d], np.broadcast_to(rec0.truth["q"][0], (d, 6)), atol=1e-12)
