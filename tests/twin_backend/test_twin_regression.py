"""Regression: the twin's recordings match a reference stored BEFORE its speed-up, to round-off.

``tests/data/twin_regression.npz`` was written by ``python tests/twin_backend/test_twin_regression.py
--generate`` from commit 53e29cc (the numpy implementation of twin/sim.py, twin/backend.py, before
the compiled step). Each scenario below drives a different path of the twin (default drive model,
every friction/drive option with 1 kHz sampling and I/O delay, rigid joints, open-loop torque
with stick-slip, torque saturation with feed-forward, payload without deflection compensation,
and the per-step :meth:`TwinSim.step` API used by the EtherCAT emulator). Every sample of the run is
simulated; the file keeps every ``KEEP``-th recorded row of every channel (measurements and ground
truth) to stay small.

Do not regenerate the file to make this test pass: it is the physics of the original
implementation. Regenerate only for an intended change of the physics, and say so in the commit.

Regenerated once, deliberately, for the SAMPLE ALIGNMENT of recordings (identify.backend.recording's
contract: every field of sample k refers to t_k, the start of the control period, with the
torques held during that period). Before, a recorded row paired the positions at the end of a
period with the torques applied during it (one period of lag). Checked before regenerating, against
the pre-optimization file: the physics is unchanged -- every position, velocity, motor angle and
command channel of every backend scenario, and every channel of the per-step scenario ``sim_step``
(TwinSim.step keeps its end-of-period state), matched it within the tolerances below; only the
torque, current, acceleration and stick-flag channels (now those of the period starting at the
sample) and, with an I/O delay, the sensor reads before t = 0 (now the settle state 2 ms before
t = 0 instead of the state at t = 0) changed.

Regenerated a second time, deliberately, for an intended change of the physics: the reducer's
Coulomb-type loss is now the exact law xi |tau_in| at the end-of-step torque (twin.reducer,
twin.step_graph). Before, the implicit solve left out the own motor Coulomb impulse's effect on the
end-of-step spring torque and the other joints' impulses, so one sample's |tau_hd| / |tau_in|
deviated from xi by up to 21 % (realized xi 0.2-1.2 % above the drive file's). Differences at the
change: rigid scenario identical, positions <= 1.6e-4 rad, torques <= 0.64 N*m (payload scenario,
reducer loss only).

Tolerances: the optimized step evaluates the same equations with a different floating-point
evaluation order (compiled C instead of numpy/BLAS, Cholesky instead of LU inverses), so results
differ by round-off that the closed-loop dynamics carry along. Measured at the change: angles
2.5e-14 rad, velocities 1.5e-12 rad/s, torques 2.1e-10 N*m, currents 1.6e-11 A, accelerations
1.2e-9 rad/s^2 (the velocity round-off / 1 ms), stick flags identical. The bounds below are ~500x
those and still far below any physical effect in the model (encoder LSB 6e-6 rad, torque-sensor
noise 0.05 N*m), so a changed equation cannot hide in them. Quantized measurements may differ by
one LSB where a value sat exactly on a rounding boundary (none did at the change).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_twin_helpers import ARM, DRIVES, URDF, excitation  # noqa: E402

DATA = Path(__file__).resolve().parents[1] / "data" / "twin_regression.npz"

#: per channel kind: absolute tolerance (the unit of each channel is SI)
ATOL = {"angle": 1e-11, "velocity": 1e-9, "acceleration": 1e-6, "torque": 1e-7, "current": 1e-8,
        "flag": 0.0}
KIND = {"q": "angle", "q_m": "angle", "q_cmd": "angle", "qd": "velocity", "qd_m": "velocity",
        "qdd": "acceleration", "i_m": "current", "stick_m": "flag", "stick_l": "flag"}

#: recording rows kept in the reference (every KEEP-th of each run)
KEEP = 10
#: scenarios with ideal sensors (no quantization)
NOISE_OFF = ("rigid", "open_loop", "payload")


def _gravity_ff(scale=1.0, bias=None):
    """Feed-forward model: the reference arm's inverse dynamics (RobotModel of the URDF)."""
    from identify import RobotModel
    model = RobotModel.from_urdf(URDF)
    b = np.zeros(6) if bias is None else np.asarray(bias, float)

    def ff(q, qd, qdd):
        return scale * model.inverse_dynamics(q, qd, qdd) + b
    return ff


def _backend(settings, duration, traj_scale=1.0, tau_ff=None, payload=None, periods=1):
    from twin import make_backend
    arm = dict(ARM)
    if payload is not None:
        arm["payload"] = payload
    be = make_backend(arm, settings)
    rec = be.run(excitation(duration, scale=traj_scale), tau_ff=tau_ff, periods=periods)
    out = {f"meas.{k}": getattr(rec, k) for k in ("t", "q", "tau_j", "i_m", "tau_m", "q_cmd", "qd")}
    out.update({f"truth.{k}": np.asarray(v) for k, v in rec.truth.items()})
    return out


def _sim_steps(settings, steps=400):
    """TwinSim.step per 1 ms (the EtherCAT emulator's path), every TwinState field."""
    from twin import TwinConfig, TwinSim
    from twin.sim import STATE_CHANNELS
    sim = TwinSim(TwinConfig.from_files(URDF, DRIVES, settings=settings))
    traj = excitation(2.0, scale=0.7)
    t = np.arange(steps + 1) * 1e-3
    q = traj.evaluate(t)[0]
    ff = 0.3 * np.sin(2 * np.pi * 3.0 * t)[:, None] * np.array([1.0, 2.0, 1.0, 0.5, 0.3, 0.1])
    rows = [sim.reset(q[0])]
    for k in range(steps):
        rows.append(sim.step(q[k + 1], tau_ff=ff[k + 1]))
    sim.close()
    out = {"meas.t": np.array([r.t for r in rows])}
    out.update({f"truth.{c}": np.array([getattr(r, c) for r in rows]) for c in STATE_CHANNELS})
    return out


SCENARIOS = {
    # defaults: every friction source, deflection compensation, noisy quantized sensors, 100 Hz
    "default": lambda: _backend({"settle_s": 0.1, "seed": 3}, 1.0),
    # every option at once, 1 kHz sampling, I/O delay, sensor offsets, frequent M refresh
    "options": lambda: _backend({
        "settle_s": 0.05, "seed": 11, "stribeck": True, "stribeck_ratio": 1.4,
        "stribeck_velocity_rad_s": 0.05, "coulomb_asymmetry": [0.2, -0.1, 0.15, 0.0, 0.1, -0.2],
        "friction_drift": -0.3, "friction_drift_time_s": 0.3, "ripple_Nm": 0.2,
        "backlash_rad": [1e-3, 5e-4, 1e-3, 0.0, 2e-3, 1e-3], "mass_matrix_every": 7,
        "sample_rate_hz": 1000, "io_delay_s": 0.002, "torque_offset_Nm": 0.1,
        "torque_drift_Nm_s": 0.05, "current_scale_error": 0.02, "current_bias_A": 0.01,
        "velocity_noise_rad_s": 2e-3}, 0.5, traj_scale=0.8),
    # rigid joints (drive model off), open-loop inverse-dynamics torques (the forward/inverse
    # consistency set-up), ideal sensors. (Rigid joints WITH the position loop changed on purpose
    # after this reference was made -- the per-joint loop was unstable, it is now decoupled through
    # M(q) -- and are tested against RobotModel in tests/twin_backend/test_twin_sim.py instead.)
    "rigid": lambda: _backend({"settle_s": 0.0, "drive_model": False, "position_control": False,
                               "noise": False}, 0.5, tau_ff=_gravity_ff(1.0)),
    # open-loop torque: inverse dynamics minus a bias, so friction makes joints stick and slip
    "open_loop": lambda: _backend({"settle_s": 0.0, "position_control": False, "noise": False,
                                   "sample_rate_hz": 200},
                                  0.6, traj_scale=0.3,
                                  tau_ff=_gravity_ff(1.0, bias=[0.5, -1.0, 0.8, -0.3, 0.2, 0.0])),
    # position loop with feed-forward and a torque limit that saturates (anti-windup)
    "saturation": lambda: _backend({"settle_s": 0.05, "torque_limit_scale": 0.35,
                                    "sample_rate_hz": 200, "seed": 5},
                                   0.6, tau_ff=_gravity_ff(0.8)),
    # payload, no deflection compensation, HD friction only, two periods
    "payload": lambda: _backend({"settle_s": 0.05, "deflection_compensation": False,
                                 "motor_friction": False, "link_friction": False, "noise": False,
                                 "sample_rate_hz": 50},
                                0.4, traj_scale=0.6, periods=2,
                                payload={"mass_kg": 3.0, "com_m": [0.01, -0.02, 0.05],
                                         "inertia_kgm2": [0.01, 0.012, 0.008, 0.001, -0.0005, 0.0002]}),
    # per-step API with feed-forward, Stribeck and ripple
    "sim_step": lambda: _sim_steps({"stribeck": True, "ripple_Nm": 0.1}),
}


def _tol(key: str) -> float:
    name = key.split(".", 1)[1]
    return ATOL[KIND.get(name, "torque")]


@pytest.fixture(scope="module")
def reference():
    if not DATA.exists():
        pytest.fail(f"{DATA} is missing (generated from the pre-optimization twin)")
    with np.load(DATA) as z:
        return {k: z[k] for k in z.files}


def _lsb(name: str, key: str):
    """Quantization step of a measured channel in a noisy scenario (None: not quantized)."""
    if name in NOISE_OFF:
        return None
    if key == "meas.q":
        return 2 * np.pi / 2 ** 20
    if key == "meas.i_m":
        return 1e-3
    if key == "meas.tau_m":
        from twin import TwinConfig
        return 1e-3 * TwinConfig.from_files(URDF, DRIVES).drives.torque_factor
    return None


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_matches_pre_optimization_reference(name, reference):
    _compare(name, SCENARIOS[name](), reference)


@pytest.mark.parametrize("name", ["default", "payload", "sim_step"])
def test_pybullet_bias_path_matches_reference(name, reference, monkeypatch):
    """The fallback that takes h(q, v) from PyBullet's inverse dynamics each step (used when the
    arm's regressor does not reproduce PyBullet's) gives the same recordings."""
    from twin import TwinSim
    monkeypatch.setattr(TwinSim, "BIAS_RTOL", -1.0)      # no model passes: PyBullet's h
    sources = []
    init = TwinSim.__init__

    def spy(self, *a, **k):
        init(self, *a, **k)
        sources.append(self.bias_source)
    monkeypatch.setattr(TwinSim, "__init__", spy)
    _compare(name, SCENARIOS[name](), reference)
    assert sources and set(sources) == {"pybullet"}


def test_compiled_bias_is_used_for_the_reference_arm_and_payload():
    from twin import TwinConfig, TwinSim
    for payload in (None, {"mass_kg": 2.0, "com_m": [0.0, 0.01, 0.04],
                           "inertia_kgm2": [0.01, 0.01, 0.005, 0.0, 0.0, 0.0]}):
        with TwinSim(TwinConfig.from_files(URDF, DRIVES, payload=payload)) as sim:
            assert sim.bias_source == "compiled"
    with TwinSim(TwinConfig.from_files(URDF, DRIVES, settings={"drive_model": False})) as sim:
        assert sim.bias_source == "pybullet"              # rigid joints need no bias


def test_state_snapshot_and_channels_agree():
    """TwinState (per-step API: state at the END of the period, with the period's torques) and
    the aligned batch unpacking used for recordings (state at the START of the period, same
    torques) hold the same values, each at its documented instant; the batched TwinSim.run
    gives the rows of per-step calls bit for bit."""
    from twin import TwinConfig, TwinSim
    from twin.sim import STATE_CHANNELS
    start = ("q", "qd", "q_m", "qd_m", "q_cmd")
    cfg = TwinConfig.from_files(URDF, DRIVES, settings={"stribeck": True})
    q = excitation(1.0).evaluate(np.arange(60) * 1e-3)[0]
    ff = np.array([np.full(6, 0.1 * k) for k in range(1, 60)])
    with TwinSim(cfg) as sim:
        states = [sim.reset(q[0])]
        rows = []
        for k in range(1, 60):
            states.append(sim.step(q[k], tau_ff=ff[k - 1]))
            rows.append(sim.snapshot())
        ch = sim.channels(np.array(rows))
        for c in STATE_CHANNELS:
            src = states[:-1] if c in start else states[1:]
            np.testing.assert_array_equal(ch[c], np.array([getattr(s, c) for s in src]), err_msg=c)
        np.testing.assert_array_equal(ch["tau_ff"][-1], np.full(6, 5.9))
    with TwinSim(cfg) as sim:
        sim.reset(q[0])
        out = np.empty((59, sim.snapshot_size))
        sim.run(q[1:60], ff, snapshot_at=np.arange(59), out=out)
        np.testing.assert_array_equal(out, np.array(rows))
        with pytest.raises(ValueError, match="expected"):
            sim.channels(np.zeros((2, 3)))


def _compare(name, out, reference):
    keys = sorted(k[len(name) + 1:] for k in reference if k.startswith(name + "."))
    assert keys, f"no reference channels for scenario {name!r}"
    assert sorted(out) == keys, f"{name}: channel set changed"
    for key in keys:
        ref = reference[f"{name}.{key}"]
        new = np.asarray(out[key], float)[::KEEP]
        assert new.shape == ref.shape, f"{name}.{key}: shape {new.shape} != reference {ref.shape}"
        diff = np.abs(new - ref)
        bad = diff > _tol(key)
        lsb = _lsb(name, key)
        if lsb is not None and bad.any():
            # a value that sat on a rounding boundary may land one LSB away (at most twice)
            flips = bad & np.isclose(diff, np.broadcast_to(lsb, diff.shape), rtol=1e-6)
            assert np.count_nonzero(flips) <= 2, f"{name}.{key}: {np.count_nonzero(flips)} LSB flips"
            bad &= ~flips
        if bad.any():
            r, *j = np.argwhere(bad)[0]
            pytest.fail(f"{name}.{key}: max |new - ref| = {diff.max():.3g} > {_tol(key):g} "
                        f"(first at recorded row {r * KEEP}, joint {j})")


def test_reference_differs_between_scenarios(reference):
    """The comparison can fail: the stored scenarios are not all the same motion."""
    a, b = reference["default.truth.tau_r"], reference["saturation.truth.tau_r"]
    n = min(len(a), len(b))
    assert np.max(np.abs(a[:n] - b[:n])) > 1.0


def _generate() -> None:
    data = {}
    for name, fn in SCENARIOS.items():
        for key, v in fn().items():
            data[f"{name}.{key}"] = np.asarray(v, float)[::KEEP]
    DATA.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(DATA, **data)
    print(f"wrote {DATA} ({DATA.stat().st_size / 1024:.0f} kB, {len(data)} arrays)")


if __name__ == "__main__":
    if "--generate" in sys.argv:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
        _generate()
    else:
        print(__doc__)
