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


# -- rigid joints (drive_model: false) under the position loop ------------------------------------
UPRIGHT = np.radians([0.0, -90.0, 0.0, -90.0, 0.0, 0.0])


def _diag_inertia_gains(sim, q):
    """The per-joint gains the twin used to give rigid joints (J = M_ii(q), 12 Hz, zeta 1,
    T_i 0.1 s): the set that diverged at the upright pose."""
    from twin.drive import default_gains
    return default_gains(np.diag(sim.mass_matrix(q)), 12.0, 1.0, 0.1)


def test_rigid_joints_hold_upright_pose(model):
    """Default settings + rigid joints hold the upright pose: after 1 s the links are within
    1e-9 rad of it, the motor torque equals the gravity torque (RobotModel oracle) to 1e-6 N*m and
    never left +-(|g| + 1e-6) -- the committed per-joint gains swung +-150 N*m within 50 ms here."""
    g = model.inverse_dynamics(UPRIGHT, np.zeros(6), np.zeros(6))
    with make_sim(drive_model=False) as sim:
        sim.reset(UPRIGHT)
        assert sim.loop == "decoupled" and sim.loop_radius < 1.0
        taus = []
        for _ in range(1000):
            st = sim.step(UPRIGHT)
            taus.append(st.tau_m)
    taus = np.array(taus)
    np.testing.assert_allclose(st.q, UPRIGHT, atol=1e-9)
    np.testing.assert_allclose(st.tau_m, g, atol=1e-6)
    assert np.all(np.abs(taus) <= np.abs(g) + 1e-6)


def test_rigid_joints_track_trajectory(model):
    """Rigid joints follow the full-scale test excitation started upright (speeds to 2 rad/s,
    2 s) within 1 deg per joint (measured 0.73 deg max, joint 4; the 12 Hz PID lag without
    acceleration feed-forward), and the torque they record is the rigid-body torque: it equals
    RobotModel.inverse_dynamics at the step's start state and PyBullet's acceleration (1e-6)."""
    from test_twin_helpers import CosineTrajectory
    traj = CosineTrajectory(UPRIGHT, np.radians([60, 40, 40, 60, 60, 80]),
                            [0.5, 0.25, 0.5, 0.75, 0.5, 0.75], 2.0)
    q = traj.evaluate(np.arange(2001) * 1e-3)[0]
    with make_sim(drive_model=False) as sim:
        rows = [sim.reset(q[0])]
        for k in range(2000):
            rows.append(sim.step(q[k + 1]))
    Q = np.array([r.q for r in rows])
    err = np.abs(Q[1:] - q[1:]).max(axis=0)
    assert np.all(err < np.radians(1.0)), np.degrees(err)
    assert err.max() > np.radians(0.05)                 # the loop does lag: the bound is real
    V = np.array([r.qd for r in rows])
    A = np.array([r.qdd for r in rows])
    T = np.array([r.tau_m for r in rows])
    assert np.abs(T).max() < 40.0                       # far from the 165 N*m limit
    tau_id = model.inverse_dynamics(Q[:-1:10], V[:-1:10], A[1::10])
    np.testing.assert_allclose(T[1::10], tau_id, atol=1e-6 * max(1.0, np.abs(T).max()))


def test_rigid_loop_map_predicts_the_simulation():
    """The linearised closed loop the refusal is computed from (twin.drive.rigid_loop_map:
    coupled mass matrix, gravity stiffness, per-joint PID, PyBullet's semi-implicit step) predicts
    the simulated response to a small velocity kick at the upright pose to 1e-3 of its size."""
    from twin.drive import rigid_loop_map
    with make_sim(drive_model=False) as sim:
        sim.reset(UPRIGHT)
        M = sim.mass_matrix(UPRIGHT)
        kd = 2 * 2 * np.pi * 12.0 / np.diag(np.linalg.inv(M))
    with make_sim(drive_model=False, pid_kd=kd.tolist(), pid_integral_time_s=1.0) as sim:
        qd0 = 1e-3 * np.array([1.0, -1.0, 2.0, 1.0, -3.0, 2.0])
        sim.reset(UPRIGHT, qd0)
        assert sim.loop == "per_joint"
        A = rigid_loop_map(M, sim.kp, sim.ki, sim.kd, sim.dt, G=sim.gravity_stiffness(UPRIGHT))
        s = np.concatenate([np.zeros(6), qd0, np.zeros(6)])
        worst, size = 0.0, 0.0
        for _ in range(300):
            s = A @ s
            sim.advance(UPRIGHT)
            worst = max(worst, np.abs(sim.q - UPRIGHT - s[:6]).max())
            size = max(size, np.abs(s[:6]).max())
    assert size > 1e-5
    assert worst < 1e-3 * size, (worst, size)


def test_rigid_diagonal_gains_diverge_and_are_refused(monkeypatch):
    """The per-joint gains sized on M_ii (what the twin used before) are refused at the upright
    pose naming the joint and the reason; let through (check bypassed), they do diverge: the
    motor torque reaches the torque limit within 100 ms, as the check's radius predicts."""
    import twin.drive as drv
    with make_sim(drive_model=False) as sim:
        kp, ki, kd = _diag_inertia_gains(sim, UPRIGHT)
    gains = dict(pid_kp=kp.tolist(), pid_ki=ki.tolist(), pid_kd=kd.tolist())
    with pytest.raises(ValueError, match=r"pid_kp/pid_ki/pid_kd .*unstable with rigid joints.*"
                                         r"oscillates at the loop rate.*Joint 'joint3'.*kd"):
        make_sim(drive_model=False, **gains).reset(UPRIGHT)
    radius = []
    real_check = drv.check_rigid_gains

    def measured(*a, **k):
        try:
            return real_check(*a, **k)
        except ValueError:
            A = drv.rigid_loop_map(a[0], *a[1:5], Mc=k.get("Mc"), G=k.get("G"))
            radius.append(np.abs(np.linalg.eigvals(A)).max())
            return radius[-1]
    monkeypatch.setattr(drv, "check_rigid_gains", measured)
    with make_sim(drive_model=False, **gains) as sim:
        sim.reset(UPRIGHT)
        peak = 0.0
        for _ in range(100):
            sim.advance(UPRIGHT)
            peak = max(peak, np.abs(sim.tau_m / sim.tau_lim).max())
    assert radius and radius[0] > 2.0
    assert peak == pytest.approx(1.0)


def test_rigid_gains_refused_before_running():
    """Explicit gains unstable with the coupled inertia are refused at reset, before any step,
    naming the joint; too-low gains against the integral likewise; a stable set is accepted."""
    with pytest.raises(ValueError, match=r"pid_kd .*rigid joints.*Joint 'joint1'.*lower it"):
        make_sim(drive_model=False, pid_kd=[200.0, 10, 5, 1, 0.5, 0.05]).reset(UPRIGHT)
    with pytest.raises(ValueError, match=r"pid_kp .*oscillation grows.*Joint 'joint\d'"):
        make_sim(drive_model=False, pid_kp=1.0).reset(UPRIGHT)
    with make_sim(drive_model=False, pid_kp=[50.0, 400, 60, 8, 6, 0.4], pid_kd=[3.0, 30, 5, 0.6, 0.5, 0.04],
                  pid_ki=0.0) as sim:
        sim.reset(UPRIGHT)
        assert sim.loop == "per_joint" and sim.loop_radius < 1.0


def test_drive_loop_map_predicts_the_simulation():
    """With the drive model, the linearised loop of the refusal (twin.drive.drive_loop_map: the
    step's own linear map A, springs, motors, coupled links, gravity stiffness, PID) reproduces
    the simulated response to a velocity kick (friction off, so the twin is linear) to 1e-6 of
    its size; the default gains' radius is < 1."""
    from twin.drive import drive_loop_map
    with make_sim(motor_friction=False, link_friction=False, harmonic_friction=False) as sim:
        sim.reset(UPRIGHT)
        assert sim.loop_radius < 1.0
        L = drive_loop_map(sim._P["A"].copy(), sim.kp, sim.ki, sim.kd, sim.K, sim.dt, True,
                           sim.gravity_stiffness(UPRIGHT))
        qd0 = 1e-3 * np.array([1.0, -1.0, 2.0, 1.0, -3.0, 2.0])
        sim.reset(UPRIGHT, qd0)
        s = np.zeros(36)
        s[6:12] = s[18:24] = qd0
        worst, size = 0.0, 0.0
        for _ in range(300):
            s = L @ s
            sim.advance(UPRIGHT)
            worst = max(worst, np.abs(sim.q - UPRIGHT - s[:6]).max())
            size = max(size, np.abs(s[:6]).max())
    assert size > 1e-6
    assert worst < 1e-6 * size, (worst, size)


def test_drive_gains_unstable_through_the_spring_refused(monkeypatch):
    """A shoulder derivative gain the per-joint check accepts (kd dt / (J'_m + M_22) = 0.87 < 1)
    but that the motor alone cannot take (the spring decouples the link at the loop rate) is
    refused naming joint 2; let through, it does limit-cycle at the torque limit, while the
    default gains settle the same kick."""
    import twin.drive as drv
    with make_sim() as sim:
        sim.reset(UPRIGHT)
        kd = sim.kd.copy()
        J_tot = sim.J[1] + sim.mass_matrix(UPRIGHT)[1, 1]
    kd[1] = 2000.0
    assert kd[1] * 1e-3 / J_tot < 1.0
    with pytest.raises(ValueError, match=r"settings pid_kd: .*unstable with the drive model.*"
                                         r"Joint 'joint2'.*lower it"):
        make_sim(pid_kd=kd.tolist()).reset(UPRIGHT)
    monkeypatch.setattr(drv, "check_drive_gains", lambda *a, **k: float("nan"))
    with make_sim(pid_kd=kd.tolist()) as sim:
        sim.reset(UPRIGHT, np.full(6, 0.01))              # a small kick sets it off
        taus = []
        for _ in range(300):
            sim.advance(UPRIGHT)
            taus.append(sim.tau_m[1])
    assert np.ptp(taus[-100:]) == pytest.approx(2 * sim.tau_lim[1])
    with make_sim() as sim:                               # the default gains settle that kick
        sim.reset(UPRIGHT, np.full(6, 0.01))
        taus = []
        for _ in range(300):
            sim.advance(UPRIGHT)
            taus.append(sim.tau_m[1])
    assert np.ptp(taus[-100:]) < 1.0
