"""identify.estimation.signal against closed forms: polynomials, sinusoids and filter frequency responses."""
import numpy as np
import pytest
from scipy import signal as sps

from identify.estimation import signal as sig


def test_smooth5_keeps_cubics_exactly_including_edges():
    t = np.linspace(-1.0, 2.0, 57)
    x = np.stack([1 + 2 * t - 3 * t ** 2 + 0.5 * t ** 3, -t ** 3], axis=1)
    y = sig.smooth5(x, passes=20)
    np.testing.assert_allclose(y, x, atol=1e-11)


def test_smooth5_interior_gain_matches_closed_form_and_is_zero_phase():
    rate, f, K = 100.0, 7.0, 20
    n = np.arange(400)
    x = np.sin(2 * np.pi * f * n / rate + 0.3)
    y = sig.smooth5(x, passes=K)
    g = sig.smooth5_response(f, rate, K)
    assert 0.05 < g < 0.95          # a frequency where the filter does something
    mid = slice(3 * K, -3 * K)      # away from the end formulas
    np.testing.assert_allclose(y[mid], g * x[mid], atol=1e-10)


def test_smooth5_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 5"):
        sig.smooth5(np.zeros(4), 1)
    with pytest.raises(ValueError, match="passes"):
        sig.smooth5(np.zeros(10), -1)
    np.testing.assert_array_equal(sig.smooth5(np.arange(3.0), 0), np.arange(3.0))


def test_differentiate_exact_for_quadratics_uniform_and_irregular():
    rng = np.random.default_rng(0)
    t = np.cumsum(rng.uniform(0.5e-3, 1.5e-3, 200))
    x = 3.0 - 2.0 * t + 7.0 * t ** 2
    np.testing.assert_allclose(sig.differentiate(x, t=t), -2.0 + 14.0 * t, atol=1e-8)
    tu = np.arange(100) * 0.01
    xu = np.stack([tu ** 2, 5 * tu], axis=1)
    np.testing.assert_allclose(sig.differentiate(xu, dt=0.01),
                               np.stack([2 * tu, np.full_like(tu, 5)], axis=1), atol=1e-10)
    with pytest.raises(ValueError, match="dt"):
        sig.differentiate(xu)


def test_butterworth_zero_phase_and_gain_match_design():
    rate, fc, order = 1000.0, 10.0, 4
    t = np.arange(20000) / rate
    sos = sps.butter(order, fc, fs=rate, output="sos")
    for f in (0.5, 10.0, 25.0):
        x = np.sin(2 * np.pi * f * t)
        y = sig.butter_filtfilt(x, rate, fc, order)
        _, h = sps.sosfreqz(sos, worN=[f], fs=rate)
        gain = abs(h[0]) ** 2                       # forward-backward: |H|^2, zero phase
        mid = slice(3000, -3000)
        np.testing.assert_allclose(y[mid], gain * x[mid], atol=2e-3)
    assert abs(abs(sps.sosfreqz(sos, worN=[fc], fs=rate)[1][0]) ** 2 - 0.5) < 1e-9


def test_butterworth_rejects_cutoff_above_nyquist():
    with pytest.raises(ValueError, match="Nyquist"):
        sig.butter_filtfilt(np.zeros(100), 100.0, 60.0)
    with pytest.raises(ValueError, match="order"):
        sig.butter_filtfilt(np.zeros(100), 100.0, 10.0, order=0)


def test_periodic_filter_and_derivative_have_no_edge_effects():
    rate, T = 200.0, 4.0
    t = np.arange(int(T * rate)) / rate
    w = 2 * np.pi / T
    x = np.sin(w * t) + 0.5 * np.cos(3 * w * t) + 0.1 * np.sin(40 * w * t)   # 10 Hz ripple
    y = sig.periodic_filtfilt(x, rate, 3.0, 4)
    sos = sps.butter(4, 3.0, fs=rate, output="sos")
    g = np.abs(sps.sosfreqz(sos, worN=[1 / T, 3 / T, 40 / T], fs=rate)[1]) ** 2
    expect = g[0] * np.sin(w * t) + g[1] * 0.5 * np.cos(3 * w * t) + g[2] * 0.1 * np.sin(40 * w * t)
    np.testing.assert_allclose(y, expect, atol=1e-6)            # everywhere, edges included
    d = sig.periodic_differentiate(np.sin(w * t), 1 / rate)
    np.testing.assert_allclose(d, w * np.cos(w * t), atol=w ** 3 / rate ** 2)


def test_average_periods_mean_and_std():
    rng = np.random.default_rng(1)
    S, P = 50, 8
    base = np.sin(np.linspace(0, 2 * np.pi, S, endpoint=False))[:, None] * [1.0, 2.0]
    x = np.tile(base, (P, 1)) + rng.normal(0, 0.1, (P * S, 2))
    x = np.vstack([x, x[:1]])                      # a closing sample t = P*T is tolerated
    mean, std = sig.average_periods(x, P)
    assert mean.shape == (S, 2)
    resid = mean - base
    assert abs(resid.std() - 0.1 / np.sqrt(P)) < 0.02
    assert abs(std.mean() - 0.1) < 0.01
    with pytest.raises(ValueError, match="do not split"):
        sig.average_periods(x[:-3], P)
    with pytest.raises(ValueError, match="need"):
        sig.average_periods(x, P, samples_per_period=S + 10)


def test_resample_uniform_cubic_and_linear():
    rng = np.random.default_rng(2)
    t = np.cumsum(rng.uniform(0.8e-2, 1.2e-2, 300))
    x = np.stack([np.sin(2 * t), 3 * t + 1], axis=1)
    tu, xu = sig.resample_uniform(t, x, 100.0)
    assert np.allclose(np.diff(tu), 0.01)
    assert tu[0] == t[0] and tu[-1] <= t[-1]
    np.testing.assert_allclose(xu[:, 0], np.sin(2 * tu), atol=1e-6)
    tl, xl = sig.resample_uniform(t, x, 100.0, method="linear")
    np.testing.assert_allclose(xl[:, 1], 3 * tl + 1, atol=1e-12)   # exact for linear signals
    with pytest.raises(ValueError, match="method"):
        sig.resample_uniform(t, x, 100.0, method="nearest")
    with pytest.raises(ValueError, match="lengths"):
        sig.resample_uniform(t[:-1], x, 100.0)


def test_rate_checks_trim_and_decimate():
    t = np.arange(100) * 1e-3
    assert sig.is_uniform(t, 1000.0)
    sig.check_rate(t, 1000.0)
    with pytest.raises(ValueError, match="500 Hz does not match"):
        sig.check_rate(t, 500.0)
    tj = t.copy()
    tj[50] += 3e-4
    assert not sig.is_uniform(tj, 1000.0)
    np.testing.assert_array_equal(sig.trim(np.arange(10), 2), np.arange(2, 8))
    with pytest.raises(ValueError, match="leaves nothing"):
        sig.trim(np.arange(10), 5)
    np.testing.assert_array_equal(sig.decimate(np.arange(10), 3), [0, 3, 6, 9])
    with pytest.raises(ValueError, match="factor"):
        sig.decimate(np.arange(10), 0)


def test_check_finite_names_channel_sample_and_joint():
    x = np.zeros((20, 3))
    x[13, 2] = np.inf
    with pytest.raises(ValueError, match=r"tau_m: non-finite value inf at sample 13, joint3"):
        sig.check_finite(x, "tau_m", ["joint1", "joint2", "joint3"])
    sig.check_finite(np.ones(5), "ok")
