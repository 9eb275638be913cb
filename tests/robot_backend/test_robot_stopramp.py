"""The stop ramp (robot.stopramp) against closed forms: a constant-deceleration stop from v0 at
A takes ceil(v0 / (A dt)) cycles and covers v0^2 / 2A (+ the discretisation's v0 dt / 2); with a
jerk limit J no acceleration step exceeds J dt; inactive joints follow their measurement; the
drives are disabled only after the measured standstill. And the drive-side reaction objects
(robot.drive.reactions) in closed form."""
import numpy as np
import pytest

from robot.config import DriveConfig, SafetyConfig
from robot.drive import cia402
from robot.drive.reactions import decel_counts, max_torque_permille, reaction_sdos
from robot.stopramp import SafeStop, StopRamp, ramp_bound_cycles

DT = 1e-3


def run_ramp(ramp, n_max=10000, active=None, q_meas=None):
    n = ramp.p.shape[0]
    active = np.ones(n, bool) if active is None else active
    q_meas = np.zeros(n) if q_meas is None else q_meas
    out = [ramp.p.copy()]
    for _ in range(n_max):
        out.append(ramp.step(active, q_meas))
        if ramp.at_rest:
            break
    return np.array(out)


def test_constant_deceleration_closed_form():
    v0 = np.array([1.0, -0.5, 0.0, 2.0])
    acc = np.array([10.0, 10.0, 10.0, 15.0])
    p = run_ramp(StopRamp(np.zeros(4), v0, np.zeros(4), acc, None, DT))
    v = np.diff(p, axis=0) / DT
    a = np.diff(np.r_[v0[None], v], axis=0) / DT
    assert np.all(np.abs(a) <= acc * (1 + 1e-9))
    # cycles to rest and distance: sum_{k=1..K} (v0 - k A dt) dt with K = ceil(v0 / A dt)
    for j in range(4):
        K = int(np.ceil(abs(v0[j]) / (acc[j] * DT) - 1e-9))
        assert np.count_nonzero(v[:, j]) <= K
        ks = np.arange(1, K + 1)
        d = np.sum(np.maximum(abs(v0[j]) - ks * acc[j] * DT, 0.0)) * DT
        assert abs(p[-1, j]) == pytest.approx(d, abs=1e-12)
        assert abs(p[-1, j]) <= v0[j]**2 / (2 * acc[j]) + 1e-12
    assert len(p) - 1 <= ramp_bound_cycles(np.abs(v0), acc, None, DT)


def test_jerk_limited_ramp():
    v0, a0 = np.array([1.5, -1.0]), np.array([8.0, 0.0])      # joint 1 still accelerating
    acc, jerk = np.array([10.0, 10.0]), 500.0
    r = StopRamp(np.zeros(2), v0, a0, acc, jerk, DT)
    p = run_ramp(r)
    v = np.r_[v0[None], np.diff(p, axis=0) / DT]
    a = np.r_[a0[None], np.diff(v, axis=0) / DT]
    assert np.all(np.abs(a) <= acc * (1 + 1e-9))
    # every step of the acceleration within J dt, but the last one of each joint (to rest:
    # the discrete ramp-out ends on a grid point, within 3 J dt)
    da = np.abs(np.diff(a, axis=0))
    for j in range(2):
        k_rest = int(np.flatnonzero(v[:, j])[-1]) + 1          # first row at rest
        assert np.all(da[:k_rest - 1, j] <= jerk * DT * (1 + 1e-6)), (j, da[:k_rest - 1, j].max())
        assert da[k_rest - 1, j] <= 3 * jerk * DT, (j, da[k_rest - 1, j])
        assert np.all(v[k_rest:, j] == 0)
    assert r.at_rest and len(p) - 1 <= ramp_bound_cycles(np.abs(v0), acc, jerk, DT)


def test_inactive_joint_follows_measurement_and_refuses_infinite_limit():
    r = StopRamp(np.zeros(2), [1.0, 1.0], np.zeros(2), [10.0, 10.0], None, DT)
    q = r.step(np.array([True, False]), np.array([0.3, 0.7]))
    assert q[1] == 0.7 and r.v[1] == 0.0 and q[0] == pytest.approx(0.99 * DT)
    with pytest.raises(ValueError, match="finite"):
        StopRamp(np.zeros(1), [1.0], [0.0], [np.inf], None, DT)


def test_safe_stop_disables_only_at_measured_standstill():
    """Ramp, then the drives stay enabled while the measured speed is above the threshold,
    then hold (policy hold) and disable distal first."""
    n = 2
    st = SafeStop(n, np.zeros(n), [0.5, 0.2], np.zeros(n), [10.0, 10.0], DT, jerk_max=None,
                  hold_cycles=5, confirm_cycles=3, policy="hold", brake_cycles=2,
                  standstill_rad_s=0.05, settle_cycles=50)
    en = np.full(n, 0x0637)
    cws, k_rest = [], None
    for k in range(st.max_cycles):
        moving = k < 80            # the measured arm still moves for 80 cycles
        qd = np.full(n, 0.2 if moving else 0.0)
        cw, q = st.step(en, np.ones(n, bool), q, qd) if k else st.step(en, np.ones(n, bool), np.zeros(n), qd)
        cws.append(cw)
        if st.ramp_cycles is not None and k_rest is None:
            k_rest = k
        if st.done:
            break
    cws = np.array(cws)
    first_off = np.argmax(cws != cia402.CW_ENABLE_OPERATION, axis=0)
    assert st.ramp_cycles == 50 and k_rest == 49      # 0.5 rad/s at 10 rad/s^2: 50 cycles
    assert first_off[1] >= 80 + 5 and first_off[0] == first_off[1] + 1   # distal first
    assert st.standstill and st.k <= st.max_cycles


def drive(joint="j1", counts=2**20, gear=101, enc="link", rated=70.0):
    return DriveConfig(joint=joint, sign=1, encoder_counts_per_rev=counts, gear_ratio=gear,
                       torque_constant_Nm_A=0.1, rated_torque_Nm=rated, rated_current_A=5.0,
                       joint_torque_scale_Nm=0.001, position_encoder=enc)


def test_reaction_objects_closed_form():
    d = drive()
    assert decel_counts(d, 10.0) == int(10.0 * 2**20 / (2 * np.pi)) == 1668860   # counts/s^2
    assert decel_counts(drive(enc="motor"), 10.0) == int(10.0 * 2**20 * 101 / (2 * np.pi))
    assert max_torque_permille(150.0, 70.0, "j1") == 2143                  # ceil(2142.86)
    sd = dict((i, v) for i, _s, _t, v in reaction_sdos(d, SafetyConfig(), 10.0, 150.0))
    assert sd == {0x605A: 2, 0x605B: 1, 0x605C: 1, 0x605E: 2, 0x6007: 3, 0x6085: 1668860,
                  0x6084: 1668860, 0x6072: 2143}
    with pytest.raises(ValueError, match="joint j1: the stop ramp needs a finite"):
        decel_counts(d, float("inf"))
    with pytest.raises(ValueError, match="16-bit 0x6072"):
        max_torque_permille(1e5, 1.0, "j1")


def test_config_refuses_coasting_reaction(tmp_path):
    import yaml
    from robot.config import ConfigError, DEFAULT_CONFIG, parse_config
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw["safety"]["fault_reaction_option"] = 0
    with pytest.raises(ConfigError, match="safety.fault_reaction_option=0 is not a stop reaction"):
        parse_config(raw, "x.yaml")
