"""Optional friction/drive effects: each does what its setting says (closed forms on the truth)."""
import numpy as np

from twin import TwinConfig, TwinSim

from test_twin_helpers import DRIVES, URDF, excitation


def run(seconds=2.0, **settings):
    sim = TwinSim(TwinConfig.from_files(URDF, DRIVES, settings=settings))
    traj = excitation(4.0, scale=0.5)
    t = np.arange(int(seconds * 1000) + 1) * 1e-3
    q = traj.evaluate(t)[0]
    sim.reset(q[0])
    rows = [sim.step(q[k + 1]) for k in range(len(t) - 1)]
    sim.close()
    return sim, rows


def _stack(rows, name):
    return np.array([getattr(r, name) for r in rows])


def test_friction_drift_follows_warmup_profile():
    """Motor Coulomb level while sliding = Fc (1 + drift (1 - exp(-t/T)))."""
    sim, rows = run(2.0, friction_drift=-0.3, friction_drift_time_s=0.5, harmonic_friction=False)
    t = np.array([r.t for r in rows]) - 1e-3                  # friction evaluated at step start
    mc = _stack(rows, "tau_mc")
    slide = _stack(rows, "stick_m") == 0
    expected = sim.cfg.drives.motor_coulomb * (1 - 0.3 * (1 - np.exp(-t / 0.5)))[:, None]
    np.testing.assert_allclose(np.abs(mc[slide]), np.broadcast_to(expected, mc.shape)[slide], rtol=1e-9)
    # viscous part follows the same profile, updated with each mass-matrix refresh (50 ms)
    mv = _stack(rows, "tau_mv")
    qd_m_prev = np.vstack([np.zeros(6), _stack(rows, "qd_m")[:-1]])
    t_ref = np.floor(t / 0.05 + 1e-9) * 0.05
    scale = (1 - 0.3 * (1 - np.exp(-t_ref / 0.5)))[:, None]
    np.testing.assert_allclose(mv[100:], (sim.cfg.drives.motor_viscous * scale * qd_m_prev)[100:],
                               atol=1e-12)


def test_asymmetric_coulomb():
    sim, rows = run(2.0, coulomb_asymmetry=0.2, harmonic_friction=False)
    mc = _stack(rows, "tau_mc")
    slide = _stack(rows, "stick_m") == 0
    fc = sim.cfg.drives.motor_coulomb
    pos = slide & (mc > 0)
    neg = slide & (mc < 0)
    for j in range(6):
        assert np.allclose(mc[pos[:, j], j], 1.2 * fc[j]) and np.allclose(mc[neg[:, j], j], -0.8 * fc[j])


def test_stribeck_static_peak():
    """Sliding friction follows Fc (1 + (r - 1) exp(-(w/vs)^2)): above Fc at low speed."""
    sim, rows = run(2.0, stribeck=True, stribeck_ratio=1.5, stribeck_velocity_rad_s=0.05,
                    harmonic_friction=False)
    mc = np.abs(_stack(rows, "tau_mc"))
    slide = _stack(rows, "stick_m") == 0
    fc = sim.cfg.drives.motor_coulomb
    assert np.all(mc[slide] <= 1.5 * np.broadcast_to(fc, mc.shape)[slide] + 1e-9)
    assert np.all(mc[slide] >= np.broadcast_to(fc, mc.shape)[slide] - 1e-9)
    assert np.any(mc[slide] > 1.2 * np.broadcast_to(fc, mc.shape)[slide])


def test_ripple_amplitude_and_period():
    sim, rows = run(1.0, ripple_Nm=0.3, ripple_cycles_per_motor_rev=2.0)
    rip = _stack(rows, "tau_rip")
    qm = np.array([r.q_m for r in rows])
    # tau_rip = A sin(2 * eta * q_m_prev): check against the motor angle of the previous step
    expected = 0.3 * np.sin(2 * 101 * qm[:-1])
    np.testing.assert_allclose(rip[1:], expected, atol=1e-12)


def test_backlash_play_carries_no_torque():
    """Inside the play the spring carries no torque; at rest under gravity the deflection is
    tau_r/K plus half the play."""
    play = 2e-3
    sim = TwinSim(TwinConfig.from_files(URDF, DRIVES, settings={"backlash_rad": play}))
    q0 = np.radians([0, -60, 30, -90, 20, 0])
    sim.reset(q0)
    for _ in range(1000):
        st = sim.step(q0)
    K = sim.cfg.drives.stiffness
    loaded = np.abs(st.tau_r) > 0.05
    defl = st.q_m - st.q
    np.testing.assert_allclose(defl[loaded], (st.tau_r / K + np.sign(st.tau_r) * play / 2)[loaded], atol=1e-6)
    assert np.abs(st.q - q0).max() < 1.5 * play       # backlash costs up to about the play


def test_rigid_loop_laws_closed_form():
    """Rigid joints, first period after reset at q0 with command q1: the decoupled default loop
    gives tau_m = M(q0) (kp e + kd e / dt) + g(q0) (acceleration gains w^2, 2 zeta w; integrator
    pre-loaded with M^-1 g), explicit gains give the per-joint law kp e + kd e / dt + g(q0) (integrator holds g)."""
    from identify import RobotModel
    model = RobotModel.reference()
    q0 = np.radians([10, -70, 40, -90, 30, 10])
    e = np.radians([0.1, -0.2, 0.1, 0.3, -0.2, 0.4])
    g = model.inverse_dynamics(q0, np.zeros(6), np.zeros(6))
    wn = 2 * np.pi * 10.0
    sim = TwinSim(TwinConfig.from_files(URDF, DRIVES, settings={
        "drive_model": False, "pid_bandwidth_hz": 10.0, "pid_damping": 0.8, "torque_limit_scale": None}))
    sim.reset(q0)
    M = sim.mass_matrix(q0)
    st = sim.step(q0 + e)
    sim.close()
    assert sim.loop == "decoupled"
    np.testing.assert_allclose(st.tau_m, M @ (wn ** 2 * e + 2 * 0.8 * wn * e / 1e-3) + g,
                               rtol=1e-9, atol=1e-9)
    kp, kd = np.array([80.0, 600, 150, 10, 8, 0.5]), np.array([4.0, 40, 8, 0.8, 0.6, 0.04])
    sim = TwinSim(TwinConfig.from_files(URDF, DRIVES, settings={
        "drive_model": False, "pid_kp": kp.tolist(), "pid_kd": kd.tolist(), "pid_ki": kp.tolist(),
        "torque_limit_scale": None}))
    sim.reset(q0)
    st = sim.step(q0 + e)
    sim.close()
    assert sim.loop == "per_joint"
    np.testing.assert_allclose(st.tau_m, kp * e + kd * e / 1e-3 + g, rtol=1e-9, atol=1e-9)
