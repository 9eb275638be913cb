"""Physics of the twin against independent truth: RobotModel (CasADi RNEA, not PyBullet),
closed forms of the drive model, and finite differences of the simulated motion."""
import numpy as np
import pytest

from identify import RobotModel
from twin import TwinConfig, TwinSim
from twin.drive import OMEGA_DT_MAX

from test_twin_helpers import DRIVES, Q0, URDF, excitation


def make_sim(**settings):
    return TwinSim(TwinConfig.from_files(URDF, DRIVES, settings=settings))


@pytest.fixture(scope="module")
def model():
    return RobotModel.reference()


def test_rest_under_gravity_compliance(model):
    """At rest the spring carries gravity: tau_r = g(q) (RobotModel oracle) and q_m - q = tau_r / K;
    the arm stays at q0 (no drift, no chatter) and every stick-slip element sticks."""
    with make_sim() as sim:
        sim.reset(Q0)
        for _ in range(500):
            st = sim.step(Q0)
        g = model.inverse_dynamics(Q0, np.zeros(6), np.zeros(6))
        K = sim.cfg.drives.stiffness
        np.testing.assert_allclose(st.tau_r, g, atol=1e-6 * np.abs(g).max())
        np.testing.assert_allclose(st.q_m - st.q, st.tau_r / K, rtol=1e-9, atol=1e-15)
        assert np.abs(st.q_m - st.q).max() > 1e-4          # the deflection is real (joint 2)
        np.testing.assert_allclose(st.q, Q0, atol=1e-10)
        assert np.abs(st.qd).max() < 1e-9 and np.abs(st.qd_m).max() < 1e-9
        assert st.stick_m.all() and st.stick_l.all()


def test_forward_inverse_consistency(model):
    """Drive model off, no noise, open loop: torques from RobotModel.inverse_dynamics (CasADi
    regressor, independent of PyBullet) fed into PyBullet reproduce the trajectory.

    PyBullet's semi-implicit Euler is a leapfrog whose velocities live at half steps, so the run
    starts from qd(-dt/2). Open loop the upright wrist is gravity-unstable (error e-folding time
    ~70 ms), so the stated bound is 2e-4 rad over a 0.25 s horizon; a 1 % error in the inertial
    parameters breaks it by more than 100x (checked below, so the test can fail)."""
    traj = excitation(4.0, scale=0.5)
    dt = 1e-3
    t = np.arange(251) * dt
    q, qd, qdd = traj.evaluate(t)
    qd_half = traj.evaluate(np.array([-dt / 2]))[1][0]
    errs = []
    for scale in (1.0, 1.01):
        tau = model.inverse_dynamics(q, qd, qdd, params=model.inertial_parameters() * scale)
        with make_sim(drive_model=False, position_control=False) as sim:
            sim.reset(q[0], qd_half)
            err = 0.0
            for k in range(250):
                sim.advance(q[k], tau_ff=tau[k])
                err = max(err, np.abs(sim.q - q[k + 1]).max())
        errs.append(err)
    assert errs[0] < 2e-4, errs
    assert errs[1] > 100 * errs[0], errs


def _run(sim, traj, seconds):
    t = np.arange(int(seconds * 1000) + 1) * 1e-3
    q, _, _ = traj.evaluate(t)
    sim.reset(q[0])
    rows = []
    for k in range(len(t) - 1):
        rows.append(sim.step(q[k + 1]))
    return rows, q


def test_harmonic_drive_loss_slope_and_direction():
    """Only the harmonic-drive load friction on: the loss tau'_m - tau_r - J'_m qdd_m (from the
    motor's motion, by finite differences) equals xi |tau'_r| in magnitude (slope xi) and always
    opposes the motor's motion; driving and back-driven efficiencies therefore differ. Tolerance
    2 % (the per-joint stick-slip step neglects cross-joint coupling of the friction impulses; it
    matters only on the wrist-3 joint, whose torque here is ~0.01 N*m)."""
    with make_sim(motor_friction=False, link_friction=False) as sim:
        rows, _ = _run(sim, excitation(4.0), 4.0)
        J = sim.cfg.drives.J_r
        xi = sim.cfg.drives.xi
    tau_m = np.array([r.tau_m for r in rows])
    tau_r = np.array([r.tau_r for r in rows])
    w = np.array([r.qd_m for r in rows])
    stick = np.array([r.stick_m for r in rows]) > 0
    acc = np.diff(w, axis=0) / 1e-3                    # motor acceleration of step k+1
    loss = tau_m[1:] - tau_r[1:] - J * acc             # tau'_m - tau_r - J'_m qdd_m
    tau_in = tau_m[1:] - J * acc                       # gear input torque tau'_r
    moving = (~stick[1:]) & (np.abs(w[1:]) > 1e-2)
    for j in range(6):
        m = moving[:, j]
        assert m.sum() > 500
        slope = np.sum(np.abs(loss[m, j]) * np.abs(tau_in[m, j])) / np.sum(tau_in[m, j] ** 2)
        assert slope == pytest.approx(xi[j], rel=0.02), (j, slope, xi[j])
        assert np.all(loss[m, j] * np.sign(w[1:][m, j]) >= -1e-9)      # dissipative, all quadrants
        drv = m & (tau_r[1:, j] * w[1:, j] > 0)
        bck = m & (tau_r[1:, j] * w[1:, j] < 0)
        assert drv.sum() > 50 and bck.sum() > 50
        eff_d = np.median(np.abs(tau_r[1:][drv, j] / tau_in[drv, j]))
        eff_b = np.median(np.abs(tau_in[bck, j] / tau_r[1:][bck, j]))
        assert eff_d == pytest.approx(1 - xi[j], abs=0.01)
        assert eff_b == pytest.approx(1 / (1 + xi[j]), abs=0.01)


def test_coulomb_sticks_without_chatter():
    """Motor holding a constant load below its static friction: the motor stays stuck (velocity
    below 1e-6 rad/s -- the residual of the per-joint stick step's coupling correction -- with no
    sign flipping, position change < 1e-6 rad); above it the joint slides, friction opposing."""
    with make_sim(position_control=False, link_friction=False, harmonic_friction=False) as sim:
        q0 = np.radians([0, -90, 0, -90, 0, 0])
        sim.reset(q0)
        fc = sim.cfg.drives.motor_coulomb
        # open loop: only the motor torque that holds gravity plus 0.8 Fc -> must stick
        g = sim.tau_r.copy()
        ws = []
        for _ in range(300):
            sim.advance(q0, tau_ff=g + 0.8 * fc)
            ws.append(sim.w.copy())
        ws = np.array(ws)
        assert np.abs(ws).max() < 1e-6
        assert np.all(np.sign(ws[50:]) == np.sign(ws[-1])) or np.abs(ws[50:]).max() < 1e-12
        assert np.abs(sim.qm - sim.q - sim.tau_r / sim.K).max() < 1e-6
        for _ in range(300):
            sim.advance(q0, tau_ff=g + 1.5 * fc)
        assert np.all(sim.w > 1e-3)
        assert np.all(sim.tau_mc > 0)


def test_deflection_compensation_tracks_link():
    """With the drive's deflection compensation the LINK settles at the command; without it the
    motor does and the link sags by tau_r / K (checked on the loaded shoulder joint 2; the
    friction deadband of the PI loop leaves < 1e-4 rad)."""
    q1 = Q0 + np.radians([0, 40, 0, 0, 0, 0])
    for comp in (True, False):
        with make_sim(deflection_compensation=comp) as sim:
            sim.reset(Q0)
            for _ in range(3000):
                st = sim.step(q1)
            sag = st.tau_r[1] / sim.cfg.drives.stiffness[1]
            assert abs(sag) > 5e-4
            if comp:
                assert abs(st.q[1] - q1[1]) < 1e-4
            else:
                assert abs(st.q_m[1] - q1[1]) < 1e-4
                assert abs(st.q[1] - (q1[1] - sag)) < 1e-4


def test_unstable_stiffness_refused_with_reason():
    with pytest.raises(ValueError, match=r"natural frequency .* rad/s.*omega\*dt.*joint6"):
        s = TwinSim(TwinConfig.from_files(URDF, DRIVES, overrides={"joint6": {"stiffness_Nm_rad": 5e7}}))
        s.reset(Q0)


def test_stiffness_just_below_limit_is_stable():
    """A wrist stiffness with omega*dt just below the (accuracy) limit runs a motion without
    blowing up (bounded torques, tracking kept): the coupling is implicit."""
    K6 = 5e3 * (0.9 * OMEGA_DT_MAX / 3.8) ** 2          # default joint 6 has omega*dt ~ 3.8
    with make_sim(drive_overrides={"joint6": {"stiffness_Nm_rad": K6}}) as sim:
        rows, q = _run(sim, excitation(2.0, scale=0.5), 2.0)
        assert sim.omega_dt < OMEGA_DT_MAX
    qs = np.array([r.q for r in rows])
    assert np.all(np.isfinite(qs))
    assert np.abs(qs - q[1:]).max() < np.radians(1.0)
    assert np.abs(np.array([r.tau_r for r in rows])).max() < 200


def test_explicit_terms_refused_with_reason():
    """Explicit viscous friction / derivative gain too high for the inertia at 1 ms is refused."""
    with pytest.raises(ValueError, match=r"motor-side viscous friction of joint 'joint6'.*f_v\*dt/I"):
        TwinSim(TwinConfig.from_files(URDF, DRIVES, overrides={"joint6": {"motor_viscous_Nms_rad": 400.0}})).reset(Q0)
    with pytest.raises(ValueError, match=r"link-side viscous friction of joint 'joint6'"):
        TwinSim(TwinConfig.from_files(URDF, DRIVES, overrides={"joint6": {"link_viscous_Nms_rad": 5.0}})).reset(Q0)
    with pytest.raises(ValueError, match=r"pid_kd of joint 'joint1'"):
        make_sim(pid_kd=[1e4, 1, 1, 1, 1, 1]).reset(Q0)


def test_stale_mass_matrix_refresh_is_accurate():
    """The default refresh of M every 50 steps matches refreshing every step closely."""
    out = {}
    for mm in (1, 50):
        with make_sim(mass_matrix_every=mm) as sim:
            rows, _ = _run(sim, excitation(4.0), 1.5)
        out[mm] = {c: np.array([getattr(r, c) for r in rows]) for c in ("q", "tau_r", "tau_m")}
    assert np.abs(out[1]["q"] - out[50]["q"]).max() < 2e-5
    assert np.abs(out[1]["tau_r"] - out[50]["tau_r"]).max() < 0.03
    assert np.abs(out[1]["tau_m"] - out[50]["tau_m"]).max() < 0.03


def test_nan_command_stops_with_index():
    with make_sim() as sim:
        sim.reset(Q0)
        for _ in range(7):
            sim.step(Q0)
        bad = Q0.copy()
        bad[3] = np.nan
        with pytest.raises(ValueError, match="step 7"):
            sim.step(bad)


def test_step_before_reset_and_bad_shapes():
    with make_sim() as sim:
        with pytest.raises(RuntimeError, match="reset"):
            sim.step(Q0)
        with pytest.raises(ValueError, match="expected 6"):
            sim.reset(Q0[:5])
