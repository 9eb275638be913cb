"""identify.estimation.processing on synthetic recordings of a known Fourier trajectory (analytic truth)."""
import numpy as np
import pytest

from identify.excitation.fourier import FourierTrajectory
from identify.estimation.processing import Processed, ProcessingSettings, process
from identify.backend.recording import Recording

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


def _filtered_noise_std(sigma, rate, passes, cutoff, order=4):
    """Closed form: std of white noise (std sigma) after `passes` 5-point cubic smoothings and a
    forward-backward Butterworth low-pass, sigma^2 (2/fs) int_0^{fs/2} |G(f)^K |B(f)|^2|^2 df with
    G the 5-point filter's response and B the digital Butterworth's (scipy, not identify.estimation.signal)."""
    from scipy.signal import butter, sosfreqz
    f = np.linspace(0.0, rate / 2, 20001)
    _, b = sosfreqz(butter(order, cutoff, fs=rate, output="sos"), worN=f, fs=rate)
    w = 2 * np.pi * f / rate
    h = ((17 + 24 * np.cos(w) - 6 * np.cos(2 * w)) / 35) ** passes * np.abs(b) ** 2
    return sigma * np.sqrt(np.trapezoid(h ** 2, f) / (rate / 2))


def _lag_samples(x, y, max_lag=5):
    """Lag of x behind y [samples] per column: peak of the normalized cross-correlation
    corr(x[i + k], y[i]) over k in [-max_lag, max_lag], refined by a parabola through the peak
    and its neighbours (sub-sample resolution; a 1-sample lag reads as ~1.0)."""
    N = x.shape[0]
    ks = np.arange(-max_lag, max_lag + 1)

    def ncc(a, b):
        a = a - a.mean(axis=0)
        b = b - b.mean(axis=0)
        return np.sum(a * b, axis=0) / np.sqrt(np.sum(a * a, axis=0) * np.sum(b * b, axis=0))

    c = np.array([ncc(x[max_lag + k:N - max_lag + k], y[max_lag:N - max_lag]) for k in ks])
    i = np.argmax(c, axis=0)
    assert np.all((i > 0) & (i < len(ks) - 1)), f"cross-correlation peak at the edge: {ks[i]}"
    j = np.arange(c.shape[1])
    cm, c0, cp = c[i - 1, j], c[i, j], c[i + 1, j]
    return ks[i] + 0.5 * (cm - cp) / (cm - 2 * c0 + cp)


def _sine_amplitude(t, x, w):
    """Least-squares amplitude of the sin/cos component at w [rad/s] of each column of x."""
    B = np.column_stack([np.sin(w * t), np.cos(w * t), np.ones_like(t)])
    c = np.linalg.lstsq(B, x, rcond=None)[0]
    return np.hypot(c[0], c[1])


def test_encoder_derivatives_and_torques_match_analytic_truth():
    rec, traj = _recording(truth={"junk": np.full(20000, np.nan)})   # truth is never read
    d = process(rec, ProcessingSettings())
    assert isinstance(d, Processed) and d.rate_hz == 1000.0
    assert d.t[0] == pytest.approx(0.2) and d.t[-1] == pytest.approx(19.799)   # 0.2 s trimmed
    q, qd, qdd, tau = _truth_at(traj, d.t)
    assert np.max(np.abs(d.q - q)) < 2e-5
    assert np.max(np.abs(d.qd - qd)) < 5e-4
    assert np.max(np.abs(d.qdd - qdd)) < 2e-2
    # torque noise 0.02 N*m -> the std the filters' frequency responses predict (~0.0027 N*m); a
    # 1 ms torque lag would add ~0.012 N*m peak (0.0038 N*m rms) of systematic error
    s_f = _filtered_noise_std(0.02, 1000.0, 20, 10.0)
    for got, want in ((d.tau_j, tau), (d.tau_m, 1.5 * tau)):
        e = got - want
        assert 0.9 * s_f < np.std(e) < 1.1 * s_f
        assert np.max(np.abs(np.mean(e, axis=0))) < 0.2 * s_f          # no bias
        assert np.max(np.abs(e)) < 5 * s_f
    # no lag between the processed torque and the torque the processed kinematics imply
    lag = _lag_samples(d.tau_j, _torque(d.q, d.qd, d.qdd))
    assert np.all(np.abs(lag) < 0.25), lag
    # without noise only the processing's own error remains: far below a 1-sample lag's 0.012
    d0 = process(_recording(noise=0.0)[0], ProcessingSettings())
    _, _, _, tau0 = _truth_at(traj, d0.t)
    assert np.max(np.abs(d0.tau_j - tau0)) < 1e-3
    assert np.max(np.abs(d0.tau_m - 1.5 * tau0)) < 1.5e-3
    assert d.meta["processing"]["n_samples_in"] == 20000
    assert any("Butterworth" in s for s in d.meta["processing"]["steps"])


def test_lag_check_sees_a_one_sample_torque_lag():
    """The cross-correlation check above can fail: a torque recorded 1 sample late reads ~1."""
    rec, _ = _recording()
    late = Recording(t=rec.t, q=rec.q, rate_hz=rec.rate_hz, joint_names=NAMES,
                     tau_j=np.roll(rec.tau_j, 1, axis=0))
    d = process(late, ProcessingSettings())
    lag = _lag_samples(d.tau_j, _torque(d.q, d.qd, d.qdd))
    np.testing.assert_allclose(lag, 1.0, atol=0.25)


def test_positions_and_torques_get_the_identical_filter():
    rec, _ = _recording(noise=0.0)
    same = Recording(t=rec.t, q=rec.q, rate_hz=rec.rate_hz, joint_names=NAMES,
                     tau_j=rec.q.copy(), tau_m=rec.q.copy())
    d = process(same, ProcessingSettings(smooth_torques=False, butter_cutoff_hz=2.0))
    np.testing.assert_array_equal(d.tau_j, d.q)         # no phase, no gain difference at all
    d2 = process(same, ProcessingSettings(smooth_passes=20, butter_cutoff_hz=2.0))
    # the 5-point smoothing is part of the same chain for positions and torques
    np.testing.assert_array_equal(d2.tau_j, d2.q)
    assert any("smoothing x20 on positions and torques" in s
               for s in d2.meta["processing"]["steps"])


@pytest.mark.parametrize("periodic", [False, True])
def test_sinusoid_regressor_and_torque_side_gains_are_equal(periodic):
    """A 6 Hz sinusoid at the paper's 100 Hz, where 20 smoothing passes have gain 0.965: the
    position (regressor input) and the torque get the same gain, the closed-form response of
    smoothing and low-pass, and the torque equals the model on the processed kinematics."""
    from scipy.signal import butter, sosfreqz
    rate, f, amp, T = 100.0, 6.0, 0.05, 20.0
    w = 2 * np.pi * f
    t = np.arange(int(T * rate)) / rate
    q = amp * np.sin(w * t)[:, None] * np.array([1.0, -0.5])
    qd = amp * w * np.cos(w * t)[:, None] * np.array([1.0, -0.5])
    qdd = -w ** 2 * q
    J, D, K = 0.2, 0.5, 3.0                          # inertia, damping, stiffness (linear joint)
    tau = J * qdd + D * qd + K * q
    rec = Recording(t=t, q=q, rate_hz=rate, joint_names=["a", "b"], tau_j=tau)
    ps = (ProcessingSettings(average_periods=1, period_s=T) if periodic
          else ProcessingSettings())
    d = process(rec, ps)
    g_q = _sine_amplitude(d.t, d.q, w) / _sine_amplitude(t, q, w)
    g_tau = _sine_amplitude(d.t, d.tau_j, w) / _sine_amplitude(t, tau, w)
    np.testing.assert_allclose(g_q, g_tau, rtol=1e-6)
    _, b = sosfreqz(butter(ps.butter_order, ps.butter_cutoff_hz, fs=rate, output="sos"),
                    worN=[f], fs=rate)
    wn = w / rate
    smooth = ((17 + 24 * np.cos(wn) - 6 * np.cos(2 * wn)) / 35) ** ps.smooth_passes
    assert smooth < 0.97                             # the smoothing matters at this frequency
    np.testing.assert_allclose(g_tau, smooth * np.abs(b[0]) ** 2, rtol=1e-4)
    # regressor side: the model on the processed q, qd, qdd reproduces the processed torque (up to
    # the 4th-order differences' error, ~1e-3 of the qdd amplitude at 6 Hz / 100 Hz)
    tau_model = J * d.qdd + D * d.qd + K * d.q
    assert np.max(np.abs(tau_model - d.tau_j)) < 5e-3 * np.max(np.abs(tau))


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
    from identify.estimation import signal as sig
    from identify.backend.interface import load_backend

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


# -- parallel filtering of the regressor (filter_regressor) ---------------------------------
@pytest.mark.parametrize("kw", [{}, {"average_periods": 2, "period_s": 20.0},
                                {"decimate": 4, "butter_cutoff_hz": 5.0},
                                {"smooth_passes": 0, "trim_s": 0.5},
                                {"butter_cutoff_hz": None, "smooth_passes": 7}])
def test_filter_columns_is_exactly_the_torques_filter(kw):
    """A torque channel that IS a column comes out of process() bit-identical to the chain
    applied to that column (and a whole column block to rounding): same smoothing, Butterworth,
    periodic handling, trim and decimation."""
    from identify.estimation.processing import filter_columns
    rec, _ = _recording(rate=100.0, periods=2)
    X = np.sign(np.sin(np.outer(rec.t, [1.3, 0.7, 2.9])))          # arbitrary steps
    Xraw = np.stack([X, rec.tau_j], axis=2)                       # (N_raw, n, 2) block
    for k in range(2):
        probe = Recording(t=rec.t, q=rec.q, rate_hz=rec.rate_hz, joint_names=NAMES,
                          tau_j=Xraw[..., k], tau_m=rec.tau_m)
        d = process(probe, ProcessingSettings(**kw))
        P = kw.get("average_periods")
        full = Xraw if P is None else Xraw.reshape(P, -1, 3, 2).mean(axis=0)
        assert d.qd_full.shape == (d.filter_chain.n_full, 3)
        out = filter_columns(full, d)
        assert out.shape == (d.n_samples, 3, 2)
        np.testing.assert_array_equal(d.filter_chain.apply(full[..., k]), d.tau_j)
        # a 3-D block: the same operations on another memory layout (rounding only)
        np.testing.assert_allclose(out[..., k], d.tau_j, rtol=0, atol=1e-12)
    # the velocity on the full grid is the processed velocity before trimming and decimation
    np.testing.assert_array_equal(d.filter_chain.select(d.qd_full), d.qd)


def test_parallel_filtering_removes_the_coulomb_bias():
    """Known Coulomb + viscous friction and inertia, torques through process() at the paper's
    100 Hz: with the Coulomb column passed through the torques' filter the estimates are
    unbiased (|z| < 3 with the estimator's serially corrected std); with the sharp sign(qd) of
    the filtered velocity, Coulomb comes out low and viscous high by many sigma."""
    from identify.estimation.estimators import OLS
    from identify.estimation.processing import filter_columns
    FC, FV, J = np.array([3.0, 1.5, 0.8]), np.array([2.0, 4.0, 1.0]), np.array([0.5, 0.3, 0.1])
    traj = _traj()
    rate = 100.0
    t = np.arange(int(40.0 * rate)) / rate
    q, qd, qdd = traj.evaluate(t)
    tau = (J * qdd + FV * qd + FC * np.sign(qd)
           + np.random.default_rng(7).normal(0, 0.02, qd.shape))
    rec = Recording(t=t, q=np.round(q / ENC) * ENC, rate_hz=rate, joint_names=NAMES, tau_j=tau)

    def fit(d, sgn):
        n, idx = 3, np.arange(3)
        W = np.zeros(d.qd.shape + (3 * n,))
        W[:, idx, idx], W[:, idx, n + idx], W[:, idx, 2 * n + idx] = sgn, d.qd, d.qdd
        e = OLS().fit(W, d.tau_j)
        return (e.params_[:n] - FC) / e.std_[:n], (e.params_[n:2 * n] - FV) / e.std_[n:2 * n], \
            e.params_[:n] / FC - 1
    for kw in ({}, {"average_periods": 2, "period_s": 20.0}):
        d = process(rec, ProcessingSettings(**kw))
        assert d.meta["processing"]["settings"]["filter_regressor"] is True      # the default
        z_c, z_v, _ = fit(d, filter_columns(np.sign(d.qd_full), d))
        assert np.all(np.abs(z_c) < 3) and np.all(np.abs(z_v) < 3), (kw, z_c, z_v)
        off = process(rec, ProcessingSettings(filter_regressor=False, **kw))
        assert off.filter_chain is None and off.qd_full is None
        z_c, z_v, rel = fit(off, np.sign(off.qd))
        # (its std is inflated by the serially correlated misfit, so z stays moderate)
        assert np.all(z_c < -3.5) and np.all(z_v > 3), (kw, z_c, z_v)
        assert np.all(rel < -0.008), rel                  # Coulomb about 1-2 % low
        with pytest.raises(ValueError, match="filter_regressor=False"):
            filter_columns(np.sign(d.qd_full), off)


def test_filter_columns_errors():
    from identify.estimation.processing import filter_columns
    rec, _ = _recording(rate=100.0)
    d = process(rec)
    with pytest.raises(ValueError, match=r"has 10 samples.*full grid has 2000"):
        filter_columns(np.zeros((10, 3)), d)
    X = np.zeros((2000, 3, 2))
    X[5, 1, 1] = np.inf
    with pytest.raises(ValueError, match=r"Coulomb: non-finite value inf at sample 5"):
        filter_columns(X, d.filter_chain, "Coulomb")
    with pytest.raises(ValueError, match="filter_regressor must be true or false"):
        ProcessingSettings(filter_regressor="yes")


def test_hardware_time_stamps_with_late_and_missed_cycles():
    """A hardware log: monotonic acquisition times, 1 ms cycles, some rows late by 0.3-0.8 ms
    and a few cycles missed (2-3 ms gaps). Processing resamples onto the nominal grid from the
    real time stamps; the states and torques match the truth at the grid times. Treating the
    rows as uniform (row x period -- what the time stamps replace) is far off: the test fails on
    that handling."""
    rng = np.random.default_rng(11)
    k = np.arange(20000, dtype=float)
    k[rng.choice(np.arange(100, 19900), 40, replace=False)] += rng.uniform(0.3, 0.8, 40)
    t = np.sort(np.delete(k, rng.choice(np.arange(100, 19900), 30, replace=False))) * 1e-3
    t -= t[0]
    rec, traj = _recording(rate=1000.0, t=t, noise=0.0)
    d = process(rec, ProcessingSettings(smooth_passes=0))
    assert any("resampled" in s for s in d.meta["processing"]["steps"])
    assert np.allclose(np.diff(d.t), 1e-3)
    q, qd, qdd, tau = _truth_at(traj, d.t)
    err = (np.max(np.abs(d.qd - qd)), np.max(np.abs(d.tau_j - tau)))
    assert err[0] < 2e-3 and err[1] < 2e-3, err
    naive = Recording(t=np.arange(t.size) * 1e-3, q=rec.q, rate_hz=1000.0, joint_names=NAMES,
                      tau_j=rec.tau_j)
    dn = process(naive, ProcessingSettings(smooth_passes=0))
    qn, qdn, _, taun = _truth_at(traj, dn.t)
    assert np.max(np.abs(dn.tau_j - taun)) > 20 * err[1]
