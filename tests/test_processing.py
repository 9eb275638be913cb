"""identify.processing on synthetic recordings of a known Fourier trajectory (analytic truth)."""
import numpy as np
import pytest

from identify.fourier import FourierTrajectory
from identify.processing import Processed, ProcessingSettings, process
from identify.recording import Recording

NAMES = ["joint1", "joint2", "joint3"]
ENC = 2 * np.pi / 2 ** 19            # link encoder resolution [rad]


def _traj(seed=0):
    rng = np.random.default_rng(seed)
    return FourierTrajectory.from_free(np.array([0.1, -1.2, 0.4]), rng.normal(0, 0.25, (3, 4)),
                                       rng.normal(0, 0.25, (3, 4)), 0.1 * np.pi)


def _torque(q, qd, qdd):
    return 2.0 * qdd + 0.5 * qd + 3.0 * np.sin(q)


def _recording(rate=1000.0, periods=1, seed=0, t=None, noise=0.02, **kw):
    traj = _traj()
    if t is None:
        t = np.arange(int(round(20.0 * periods * rate))) / rate
    q, qd, qdd = traj.evaluate(t)
    rng = np.random.default_rng(seed)
    q_meas = np.round(q / ENC) * ENC
    tau = _torque(q, qd, qdd)
    rec = Recording(t=t, q=q_meas, rate_hz=rate, joint_names=NAMES,
                    tau_j=tau + rng.normal(0, noise, tau.shape),
                    tau_m=1.5 * tau + rng.normal(0, noise, tau.shape), q_cmd=q, **kw)
    return rec, traj


def _truth_at(traj, t):
    q, qd, qdd = traj.evaluate(t)
    return q, qd, qdd, _torque(q, qd, qdd)


def test_encoder_derivatives_and_torques_match_analytic_truth():
    rec, traj = _recording(truth={"junk": np.full(20000, np.nan)})   # truth is never read
    d = process(rec, ProcessingSettings())
    assert isinstance(d, Processed) and d.rate_hz == 1000.0
    assert d.t[0] == pytest.approx(0.2) and d.t[-1] == pytest.approx(19.799)   # 0.2 s trimmed
    q, qd, qdd, tau = _truth_at(traj, d.t)
    assert np.max(np.abs(d.q - q)) < 2e-5
    assert np.max(np.abs(d.qd - qd)) < 5e-4
    assert np.max(np.abs(d.qdd - qdd)) < 2e-2
    assert np.max(np.abs(d.tau_j - tau)) < 0.02            # noise 0.02 -> ~0.002 after filters
    assert np.std(d.tau_j - tau) < 0.2 * 0.02
    np.testing.assert_allclose(d.tau_m, 1.5 * tau, atol=0.03)
    assert d.meta["processing"]["n_samples_in"] == 20000
    assert any("Butterworth" in s for s in d.meta["processing"]["steps"])


def test_positions_and_torques_get_the_identical_filter():
    rec, _ = _recording(noise=0.0)
    same = Recording(t=rec.t, q=rec.q, rate_hz=rec.rate_hz, joint_names=NAMES,
                     tau_j=rec.q.copy(), tau_m=rec.q.copy())
    d = process(same, ProcessingSettings(smooth_torques=False, butter_cutoff_hz=2.0))
    np.testing.assert_array_equal(d.tau_j, d.q)         # no phase, no gain difference at all
    d2 = process(same, ProcessingSettings(smooth_passes=20, butter_cutoff_hz=2.0))
    # the extra 5-point smoothing of the torques is zero-phase: no lag between tau and q
    one_sample_lag = np.max(np.abs(np.diff(d2.q, axis=0)))
    assert np.max(np.abs(d2.tau_j - d2.q)) < 1e-3 * one_sample_lag


def test_period_averaging_reduces_noise_and_has_no_edges():
    rec, traj = _recording(periods=4, noise=0.2)
    d = process(rec, ProcessingSettings(average_periods=4, period_s=20.0, butter_cutoff_hz=5.0))
    assert d.n_samples == 20000 and d.t[0] == 0.0                 # one whole period, not trimmed
    q, qd, qdd, tau = _truth_at(traj, d.t)
    assert np.max(np.abs(d.qd - qd)) < 5e-4                        # edges as good as the middle
    assert np.max(np.abs(d.qdd - qdd)) < 2e-2
    single = process(rec.window(0, 20000), ProcessingSettings(butter_cutoff_hz=5.0))
    _, _, _, tau1 = _truth_at(traj, single.t)
    e_avg = np.std(d.tau_j - tau)
    e_one = np.std(single.tau_j - tau1)
    assert e_avg < 0.65 * e_one                                    # ~1/sqrt(4) of the noise
    assert d.period_std["tau_j"].shape == (20000, 3)
    assert abs(np.sqrt(np.mean(d.period_std["tau_j"] ** 2)) - 0.2) < 0.01   # injected noise std
    import json
    json.dumps(d.meta["processing"])                                # serialisable
    # the period may also come from the recording's metadata
    rec.meta["period_s"] = 20.0
    d2 = process(rec, ProcessingSettings(average_periods=4, butter_cutoff_hz=5.0))
    np.testing.assert_allclose(d2.tau_j, d.tau_j)


def test_command_velocity_analytic_and_from_q_cmd():
    rec, traj = _recording(noise=0.0)
    d = process(rec, ProcessingSettings(velocity="command"), trajectory=traj)
    q, qd, qdd, _ = _truth_at(traj, d.t)
    np.testing.assert_allclose(d.qd, qd, atol=1e-5)
    np.testing.assert_allclose(d.qdd, qdd, atol=2e-4)         # filter edge transient only
    d2 = process(rec, ProcessingSettings(velocity="command"))    # differences of q_cmd
    np.testing.assert_allclose(d2.qdd, qdd, atol=5e-4)
    no_cmd = Recording(t=rec.t, q=rec.q, rate_hz=1000.0, joint_names=NAMES, tau_m=rec.tau_m)
    with pytest.raises(ValueError, match="q_cmd"):
        process(no_cmd, ProcessingSettings(velocity="command"))
    d3 = process(no_cmd)
    assert d3.tau_j is None and d3.tau_m is not None


def test_irregular_time_stamps_are_resampled():
    rng = np.random.default_rng(3)
    t = np.arange(10000) * 2e-3 + rng.uniform(-4e-4, 4e-4, 10000)
    t[0] = 0.0
    rec, traj = _recording(rate=500.0, t=t, noise=0.0)
    d = process(rec, ProcessingSettings(smooth_passes=0))
    assert np.allclose(np.diff(d.t), 2e-3) and d.rate_hz == 500.0
    assert any("resampled" in s for s in d.meta["processing"]["steps"])
    q, qd, qdd, tau = _truth_at(traj, d.t)
    assert np.max(np.abs(d.qd - qd)) < 1e-3
    assert np.max(np.abs(d.tau_j - tau)) < 1e-3


def test_decimation():
    rec, traj = _recording(noise=0.0)
    d = process(rec, ProcessingSettings(decimate=10, butter_cutoff_hz=5.0))
    assert d.rate_hz == 100.0
    assert np.allclose(np.diff(d.t), 0.01)
    q, qd, qdd, tau = _truth_at(traj, d.t)
    assert np.max(np.abs(d.qdd - qdd)) < 2e-2
    with pytest.raises(ValueError, match="Nyquist"):
        process(rec, ProcessingSettings(decimate=100, butter_cutoff_hz=10.0))
    with pytest.raises(ValueError, match="anti-alias"):
        process(rec, ProcessingSettings(decimate=2, butter_cutoff_hz=None))


def test_bad_input_errors_name_channel_sample_and_joint():
    rec, _ = _recording()
    rec.tau_m[17, 1] = np.nan
    with pytest.raises(ValueError, match=r"recording\.tau_m: non-finite value nan at sample 17, joint2"):
        process(rec)
    rec, _ = _recording()
    rec.rate_hz = 500.0                          # the time stamps say 1 kHz
    with pytest.raises(ValueError, match="500 Hz does not match"):
        process(rec)
    rec, _ = _recording()
    bare = Recording(t=rec.t, q=rec.q, rate_hz=1000.0, joint_names=NAMES)
    with pytest.raises(ValueError, match="neither tau_j"):
        process(bare)
    with pytest.raises(ValueError, match="do not split into 3 equal periods"):
        process(rec, ProcessingSettings(average_periods=3))      # 20000 = 3 * 6666 + 2


def test_settings_validation_and_dict_round_trip():
    ps = ProcessingSettings.from_dict({"smooth_passes": 5, "butter_cutoff_hz": 4.0})
    assert ProcessingSettings.from_dict(ps.to_dict()) == ps
    with pytest.raises(ValueError, match="unknown processing setting"):
        ProcessingSettings.from_dict({"cutoff": 3})
    with pytest.raises(ValueError, match="velocity"):
        ProcessingSettings(velocity="drive")
    with pytest.raises(ValueError, match="decimate"):
        ProcessingSettings(decimate=0)


def test_twin_recording_processed_states_match_filtered_truth(root):
    """Integration: a twin run at the paper's 100 Hz; the processed q, qd, qdd and torques equal
    the simulator's true states passed through the same zero-phase low-pass, up to sensor noise."""
    pytest.importorskip("pybullet")
    from identify import signal as sig
    from identify.backend import load_backend

    rng = np.random.default_rng(3)
    traj = FourierTrajectory.from_free(np.array([0, -np.pi / 2, 0, -np.pi / 2, 0, 0]),
                                       rng.normal(0, 0.1, (6, 4)), rng.normal(0, 0.1, (6, 4)),
                                       0.2 * np.pi)
    be = load_backend("twin", {"urdf": str(root / "assets" / "cobot6.urdf"),
                               "drives": str(root / "assets" / "cobot6_drives.yaml")}, {})
    try:
        rec = be.run(traj, periods=1)
    finally:
        be.close()
    ps = ProcessingSettings()
    d = process(rec, ps)
    k = np.searchsorted(rec.t, d.t)
    assert np.array_equal(rec.t[k], d.t)

    def filt(x):
        return sig.butter_filtfilt(x, rec.rate_hz, ps.butter_cutoff_hz, ps.butter_order)[k]

    rms = lambda e: np.sqrt(np.mean(e ** 2, axis=0))           # noqa: E731
    # noise floor: the same processing applied to the twin's sensor noise alone
    st = rec.meta["settings"]
    nrng = np.random.default_rng(0)
    noise = Recording(t=rec.t, q=nrng.normal(0, st["encoder_noise_rad"], rec.q.shape),
                      rate_hz=rec.rate_hz, joint_names=rec.joint_names,
                      tau_j=nrng.normal(0, st["torque_noise_Nm"], rec.q.shape))
    dn = process(noise, ps)
    tr = rec.truth
    assert np.all(rms(d.qd - filt(tr["qd"])) < 1.3 * rms(dn.qd) + 0.01 * rms(tr["qd"]))
    assert np.all(rms(d.qdd - filt(tr["qdd"])) < 1.3 * rms(dn.qdd) + 0.02 * rms(tr["qdd"]))
    assert np.all(rms(d.tau_j - filt(tr["tau_r"])) < 1.3 * rms(dn.tau_j) + 0.01 * rms(tr["tau_r"]))
