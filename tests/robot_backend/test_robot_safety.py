"""Safety checks, fault policy and run planning (no root, no bus)."""
from pathlib import Path

import numpy as np
import pytest

from robot.drive import cia402
from robot.plan import approach_duration, build_plan, quintic
from identify.model.robot_model import Limits
from robot.safety import (DEFAULT_POLICY, Fault, FaultMonitor, StopSequence, check_trajectory,
                          limit_step, run_limits, step_limit)

ROOT = Path(__file__).resolve().parents[2]
NAMES = [f"joint{k}" for k in range(1, 7)]
DT = 1e-3


class SineTraj:
    """q = q0 + a sin(w t) (independent closed form for velocity/acceleration)."""
    def __init__(self, q0, a, w, duration):
        self.q0, self.a, self.w, self.duration = np.asarray(q0), np.asarray(a), w, duration

    @property
    def n_joints(self):
        return len(self.q0)

    def evaluate(self, t):
        t = np.asarray(t, float)[:, None]
        s, c = np.sin(self.w * t), np.cos(self.w * t)
        return self.q0 + self.a * s, self.a * self.w * c, -self.a * self.w**2 * s


def limits():
    return Limits(q_min=np.full(6, -3.0), q_max=np.full(6, 3.0), qd_max=np.full(6, 2.0),
                  qdd_max=np.full(6, 8.0), tau_max=np.full(6, 1e3))


def sampled(tr, dt=DT):
    t = np.arange(int(tr.duration / dt)) * dt
    return (t, *tr.evaluate(t))


def test_feasible_trajectory_passes_and_reports_usage():
    tr = SineTraj(np.zeros(6), np.full(6, 0.5), 2 * np.pi / 4, 4.0)
    use = check_trajectory(*sampled(tr), limits(), NAMES, step_max=0.005)
    np.testing.assert_allclose(use["qd"], 0.5 * np.pi / 2 / 2.0, rtol=1e-6)
    assert np.all(use["step"] < 1)


@pytest.mark.parametrize("joint, field, value, needle", [
    (2, "a", 3.5, "lower position limit at joint joint3"),   # sin reaches -a at t=3T/4 after +a
    (4, "w", None, "velocity limit at joint joint5"),
])
def test_violation_names_joint_and_sample(joint, field, value, needle):
    a = np.full(6, 0.5)
    if field == "a":
        a[joint] = value
        tr = SineTraj(np.zeros(6), a, 2 * np.pi / 4, 4.0)
        lim = limits()
        lim = Limits(lim.q_min, np.full(6, 10.0), np.full(6, 100.0), np.full(6, 100.0), lim.tau_max)
        # first sample with q < -3: sin(w t) < -3/3.5 after t = 2 s
        t, q, qd, qdd = sampled(tr)
        k = int(np.argmax(q[:, joint] < -3.0))
    else:
        lim = limits()
        lim = Limits(lim.q_min, lim.q_max, np.array([2, 2, 2, 2, 0.7, 2.0]), np.full(6, 100.0), lim.tau_max)
        tr = SineTraj(np.zeros(6), a, 2 * np.pi / 4, 4.0)
        t, q, qd, qdd = sampled(tr)
        k = 0   # qd = a w cos(0) = 0.785 > 0.7 at the first sample
    with pytest.raises(ValueError) as e:
        check_trajectory(t, q, qd, qdd, lim, NAMES)
    assert needle in str(e.value) and f"sample {k} " in str(e.value)


def test_acceleration_and_step_limits():
    tr = SineTraj(np.zeros(6), np.full(6, 0.5), 2 * np.pi / 2, 2.0)  # qdd max = 0.5 pi^2 = 4.93
    t, q, qd, qdd = sampled(tr)
    lim = limits()
    lim = Limits(lim.q_min, lim.q_max, lim.qd_max, np.array([8, 8, 8, 4.0, 8, 8]), lim.tau_max)
    with pytest.raises(ValueError, match="acceleration limit at joint joint4"):
        check_trajectory(t, q, qd, qdd, lim, NAMES)
    # per-cycle step: max |dq| = a w dt = 1.57e-3 rad
    check_trajectory(t, q, qd, qdd, limits(), NAMES, step_max=1.6e-3)
    with pytest.raises(ValueError, match="per-cycle position step limit at joint joint1, sample 1 "):
        check_trajectory(t, q, qd, qdd, limits(), NAMES, step_max=1.5e-3)
    q2 = q.copy()
    q2[10, 3] = np.nan
    with pytest.raises(ValueError, match="not finite at joint joint4, sample 10"):
        check_trajectory(t, q2, qd, qdd, limits(), NAMES)


def test_torque_check_against_pinocchio_oracle():
    pin = pytest.importorskip("pinocchio")
    from identify import RobotModel
    m = RobotModel.reference()
    tr = SineTraj(np.array([0, -1.2, 0.8, -1.0, 0.5, 0]), np.full(6, 0.6), 2 * np.pi / 5, 5.0)
    t, q, qd, qdd = sampled(tr, 0.01)
    pm = pin.buildModelFromUrdf(str(ROOT / "assets" / "cobot6.urdf"))
    pd = pm.createData()
    assert [pm.names[k] for k in range(1, pm.njoints)] == list(m.joint_names)
    tau = np.array([pin.rnea(pm, pd, q[k], qd[k], qdd[k]) for k in range(len(t))])
    peak = np.max(np.abs(tau), axis=0)
    ok = Limits(np.full(6, -7.0), np.full(6, 7.0), np.full(6, 10.0), np.full(6, 50.0), peak * 1.01)
    use = check_trajectory(t, q, qd, qdd, ok, list(m.joint_names), model=m)
    np.testing.assert_allclose(use["tau"], 1 / 1.01, rtol=1e-6)
    lim2 = peak * 1.01
    lim2[1] = 0.9 * peak[1]
    k = int(np.argmax(np.abs(tau[:, 1]) > lim2[1]))
    bad = Limits(ok.q_min, ok.q_max, ok.qd_max, ok.qdd_max, lim2)
    with pytest.raises(ValueError, match=f"torque .* at joint joint2, sample {k} "):
        check_trajectory(t, q, qd, qdd, bad, list(m.joint_names), model=m)


def test_limits_from_model_scaling():
    from identify import RobotModel
    import robot.safety
    m = RobotModel.reference()
    lim = run_limits(m, scale=0.5, position_margin=0.1)
    assert type(lim) is Limits                     # the one Limits type (identify.model.robot_model)
    assert robot.safety.Limits is Limits and not hasattr(Limits, "from_model")
    np.testing.assert_allclose(lim.qd_max, 0.5 * m.limits.qd_max)
    np.testing.assert_allclose(lim.q_max, m.limits.q_max - 0.1)
    with pytest.raises(ValueError, match="scale"):
        run_limits(m, scale=1.5)


def test_step_limit_never_above_velocity_limit():
    """The per-cycle guard: min(configured, 1.2 qd_max dt) per joint. The configured 5 mrad per
    1 ms cycle would allow 5 rad/s, above the reference arm's velocity limits (pi rad/s on joints
    1-3, 225 deg/s on 4-6)."""
    from identify import RobotModel
    qd_max = RobotModel.reference().limits.qd_max
    sm = step_limit(0.005, qd_max, 1e-3)
    expect = np.minimum(0.005, 1.2 * np.radians([180, 180, 180, 225, 225, 225]) * 1e-3)
    np.testing.assert_allclose(sm, expect, rtol=1e-12)
    assert np.all(sm / 1e-3 <= 1.2 * qd_max + 1e-12)
    np.testing.assert_allclose(step_limit(0.001, qd_max, 1e-3), 0.001)   # tighter config kept
    np.testing.assert_allclose(step_limit(0.005, np.full(2, np.inf), 1e-3), 0.005)


def test_limit_step():
    out = limit_step(np.zeros(3), np.array([1.0, -0.001, -1.0]), np.full(3, 0.005))
    np.testing.assert_allclose(out, [0.005, -0.001, -0.005])


# -- fault monitor ---------------------------------------------------------------------------------
def monitor(**kw):
    args = dict(joint_names=NAMES, limits=limits(), following_error_max=0.05, wkc_error_budget=3,
                lost_frame_budget=5, lost_frame_window=100, stall_cycles=20)
    args.update(kw)
    return FaultMonitor(**args)


OK_SW = np.full(6, 0x0637)


def test_wkc_budget_consecutive():
    mon = monitor()
    for c in range(3):
        assert mon.update(c, 10, 18) is None
    assert mon.update(3, 18, 18) is None          # recovered: run resets
    for c in range(4, 7):
        assert mon.update(c, 15, 18) is None
    ev = mon.update(7, 15, 18)
    assert ev.fault == Fault.WKC_DROP and "4 consecutive" in ev.message
    assert mon.update(8, 0, 18) is None           # fires once


def test_lost_frames_window():
    mon = monitor()
    for c in range(0, 500, 50):                   # 1 per 50 cycles: never > 5 per 100
        assert mon.update(c, 0, 18) is None
        assert mon.update(c + 1, 18, 18, OK_SW) is None
    for c, k in zip(range(600, 606), range(6)):
        ev = mon.update(c, -1, 18)
    assert ev.fault == Fault.LOST_FRAMES and "6 lost frames" in ev.message
    assert mon.lost_total == 16


def test_drive_fault_names_joint_and_code():
    sw = OK_SW.copy()
    sw[2] = 0x0218
    ec = np.zeros(6, int)
    ec[2] = 0x7500
    ev = monitor().update(5, 18, 18, sw, ec)
    assert ev.fault == Fault.DRIVE_FAULT and "joint3" in ev.message and "0x7500" in ev.message


def test_state_checks_skipped_on_bad_cycles():
    sw = OK_SW.copy()
    sw[0] = 0x0218
    assert monitor().update(1, 0, 18, sw) is None        # lost frame: stale data not judged
    assert monitor().update(1, 12, 18, sw) is None       # short wkc within budget


def test_limit_following_stall_slave_lost():
    q = np.zeros(6)
    q2 = q.copy()
    q2[5] = 3.01
    ev = monitor().update(9, 18, 18, OK_SW, q=q2, q_cmd=q2)
    assert ev.fault == Fault.LIMIT_BREACH and "joint6" in ev.message
    qd = np.zeros(6)
    qd[1] = 2.5
    assert monitor().update(9, 18, 18, OK_SW, q=q, qd=qd).fault == Fault.LIMIT_BREACH
    qc = q.copy()
    qc[3] = 0.06
    ev = monitor().update(9, 18, 18, OK_SW, q=q, q_cmd=qc)
    assert ev.fault == Fault.FOLLOWING_ERROR and "joint4" in ev.message
    assert monitor().update(9, 18, 18, OK_SW, q=q, q_cmd=qc, check_following=False) is None
    assert monitor().update(9, 18, 18, late_periods=25).fault == Fault.STALLED_LOOP
    assert monitor().update(9, 18, 18, late_periods=15) is None
    ev = monitor().update(9, 15, 18, lost_slaves=["slave 5 (joint5)"])
    assert ev.fault == Fault.SLAVE_LOST and "joint5" in ev.message


# -- stop sequence ---------------------------------------------------------------------------------
def test_stop_sequence_order_and_bound():
    """Halt (hold, 0x0F) -> per drive, distal first, one more per cycle: disable operation (0x07)
    for the brake delay, then shutdown (0x06); bounded."""
    hold = np.arange(6) * 0.1
    seq = StopSequence(6, hold, hold_cycles=5, confirm_cycles=4, brake_cycles=3)
    assert seq.max_cycles == 5 + 6 + 3 + 4
    cws = []
    sw = OK_SW.copy()
    while not seq.done:
        cw, tgt = seq.step(sw)           # drives never confirm: bounded anyway
        np.testing.assert_allclose(tgt, hold)
        cws.append(cw)
    assert len(cws) == seq.max_cycles and not seq.confirmed
    cws = np.array(cws)
    assert np.all(cws[:5] == cia402.CW_ENABLE_OPERATION)
    for j in range(6):
        start = 5 + (5 - j)              # joint6 (j=5) first, joint1 last
        col = cws[:, j]
        assert np.all(col[:start] == cia402.CW_ENABLE_OPERATION)
        assert np.all(col[start:start + 3] == cia402.CW_SWITCH_ON)       # 0x07, brake delay
        assert np.all(col[start + 3:] == cia402.CW_SHUTDOWN)             # 0x06, power off
    assert not np.any(cws == cia402.CW_DISABLE_VOLTAGE)


def test_stop_sequence_confirms_early_and_disable_policy():
    seq = StopSequence(6, np.zeros(6), hold_cycles=50, confirm_cycles=20, policy="disable")
    n = 0
    while not seq.done:
        sw = OK_SW if n < 6 else np.full(6, 0x0231)      # ready to switch on after 0x06
        seq.step(sw)
        n += 1
    assert seq.confirmed and n == 7                      # 6 drives + 1 brake cycle, no hold
    assert set(DEFAULT_POLICY) == set(Fault)
    with pytest.raises(ValueError):
        StopSequence(6, np.zeros(6), 1, 1, policy="coast")


# -- planning ---------------------------------------------------------------------------------------
def test_quintic_closed_form():
    q, qd, qdd = quintic(np.zeros(2), np.array([1.0, -2.0]), 1.0, 1e-3)
    assert q.shape == (1000, 2)
    np.testing.assert_allclose(q[-1], [1.0, -2.0])
    np.testing.assert_allclose(np.max(np.abs(qd), axis=0), [1.875, 3.75], rtol=1e-5)
    np.testing.assert_allclose(np.max(np.abs(qdd), axis=0), 10 / np.sqrt(3) * np.array([1, 2]), rtol=1e-3)
    np.testing.assert_allclose(np.gradient(q[:, 0], 1e-3)[5:-5], qd[5:-5, 0], atol=1e-5)


def test_plan_respects_limits_and_layout():
    tr = SineTraj(np.array([0.3, -1.0, 0.5, 0, 0, 0.2]), np.full(6, 0.2), 2 * np.pi / 2, 2.0)
    lim = limits()
    q_now = np.zeros(6)
    plan = build_plan(tr, 2, DT, q_now, 0.2 * lim.qd_max, 0.2 * lim.qdd_max)
    T = approach_duration(q_now, tr.evaluate(np.zeros(1))[0][0], 0.4, 1.6)
    assert plan.traj_start == int(np.ceil(T / DT - 1e-9)) + 500
    assert plan.traj_stop - plan.traj_start == 4000 and plan.n_cycles == plan.traj_stop + 500
    np.testing.assert_allclose(plan.q[plan.traj_start:plan.traj_stop], np.tile(sampled(tr)[1], (2, 1)))
    check_trajectory(plan.t, plan.q, plan.qd, plan.qdd, lim, NAMES, step_max=0.005)
    approach = slice(0, plan.traj_start)
    assert np.all(np.abs(plan.qd[approach]) <= 0.4 + 1e-9)
    np.testing.assert_allclose(plan.q[plan.traj_start - 1], plan.q[plan.traj_start], atol=1e-12)


def test_torque_callable_evaluated_after_input_checks():
    """A per-sample torque bound given as a callable is checked against tau_max under its own
    label, and only evaluated once the inputs are known finite (a NaN is reported as such)."""
    tr = SineTraj(np.zeros(6), np.full(6, 0.5), 2 * np.pi / 4, 4.0)
    t, q, qd, qdd = sampled(tr)
    lim = limits()
    bound = lambda q, qd, qdd: 10.0 + 100.0 * np.abs(qd)            # noqa: E731 (peak 100 pi/4 + 10)
    lim2 = Limits(lim.q_min, lim.q_max, lim.qd_max, lim.qdd_max, np.full(6, 80.0))
    with pytest.raises(ValueError, match="motor bound limit at joint joint1, sample 0 "):
        check_trajectory(t, q, qd, qdd, lim2, NAMES, tau=bound, tau_label="motor bound")
    use = check_trajectory(t, q, qd, qdd, lim, NAMES, tau=bound)
    np.testing.assert_allclose(use["tau"], (10 + 100 * 0.5 * np.pi / 2) / 1e3, rtol=1e-6)
    q[3, 2] = np.nan

    def boom(*a):
        raise AssertionError("evaluated on bad input")
    with pytest.raises(ValueError, match="not finite at joint joint3, sample 3"):
        check_trajectory(t, q, qd, qdd, lim, NAMES, tau=boom)
