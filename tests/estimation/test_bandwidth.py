"""processing.butter_cutoff_hz: auto (identify.estimation.bandwidth): the candidate grid, the
trajectory's bandwidth, and the choice by blocked CV against the raw torque on a synthetic
recording whose torque has real content far above the trajectory's bandwidth."""
from __future__ import annotations

import numpy as np
import pytest

from identify.backend.recording import Recording
from identify.estimation.bandwidth import candidate_cutoffs, select_cutoff, trajectory_band_hz
from identify.estimation.processing import ProcessingSettings, process

RATE, SIGMA = 200.0, 0.05
#: torque = J qdd + b qd per joint: the truth of the synthetic "arm"
J, B = np.array([0.8, 0.3]), np.array([1.5, 0.7])


def _design(d):
    """(N, 2, 4) design of tau_j = J_j qdd_j + B_j qd_j (parameters [J1, J2, B1, B2])."""
    N = d.q.shape[0]
    W = np.zeros((N, 2, 4))
    for j in range(2):
        W[:, j, j], W[:, j, 2 + j] = d.qdd[:, j], d.qd[:, j]
    return W


def _recording(seed: int) -> Recording:
    """12 s at 200 Hz: a slow 0.25 Hz motion plus a small 18 Hz vibration whose acceleration
    dominates the torque; white torque noise SIGMA, exact positions."""
    t = np.arange(int(12 * RATE)) / RATE
    w1, w2 = 2 * np.pi * 0.25, 2 * np.pi * 18.0
    amp = np.array([[1.0, 0.6]])
    q = amp * np.sin(w1 * t)[:, None] + 2e-4 * np.sin(w2 * t + 0.3)[:, None]
    qd = amp * w1 * np.cos(w1 * t)[:, None] + 2e-4 * w2 * np.cos(w2 * t + 0.3)[:, None]
    qdd = -amp * w1 ** 2 * np.sin(w1 * t)[:, None] - 2e-4 * w2 ** 2 * np.sin(w2 * t + 0.3)[:, None]
    rng = np.random.default_rng(seed)
    tau = J * qdd + B * qd + SIGMA * rng.standard_normal(q.shape)
    return Recording(t=t, q=q, tau_j=tau, rate_hz=RATE, joint_names=["j1", "j2"])


def test_candidate_grid_spans_band_to_nyquist_and_band_of_a_sine():
    c = candidate_cutoffs(0.4, 50.0)
    assert c[0] == pytest.approx(2.0) and c[-1] == pytest.approx(45.0)
    assert np.all(np.diff(np.log(c)) <= np.log(1.6) + 1e-9)
    t = np.arange(4000) / 100.0
    q = np.column_stack([np.sin(2 * np.pi * 0.5 * t), 0.1 * np.sin(2 * np.pi * 1.5 * t)])
    assert trajectory_band_hz(q, 100.0) == pytest.approx(1.5, abs=0.05)


def test_auto_keeps_the_real_high_frequency_torque_and_reaches_the_noise_floor():
    rec = _recording(0)
    ps = ProcessingSettings(smooth_passes=0, reversal_speed_rad_s=None)
    sel = select_cutoff(rec, ps, _design, signal="tau_j")
    assert sel.chosen_hz > 18.0 * 1.2, sel.why              # the 18 Hz content passes
    low = next(c for c in sel.candidates if c.cutoff_hz < 5.0)
    chosen = next(c for c in sel.candidates if c.cutoff_hz == sel.chosen_hz)
    assert low.overall.cv_rms > 2 * chosen.overall.cv_rms
    doc = sel.to_dict()
    assert doc["chosen_hz"] == sel.chosen_hz and len(doc["candidates"]) == len(sel.candidates)
    assert [j["joint"] for j in doc["joints"]] == ["j1", "j2"]
    # judged on an independent recording (another noise draw), against the raw torque
    val = _recording(1)
    import dataclasses
    fit = process(rec, dataclasses.replace(ps, butter_cutoff_hz=sel.chosen_hz))
    W = _design(fit).reshape(-1, 4)
    p = np.linalg.lstsq(W, fit.tau_j.reshape(-1), rcond=None)[0]
    dv = process(val, dataclasses.replace(ps, butter_cutoff_hz=sel.chosen_hz))
    rms = np.sqrt(np.mean((_design(dv) @ p - dv.raw["tau_j"]) ** 2))
    assert rms / SIGMA <= 1.05, rms / SIGMA
    # the fixed 10 Hz default cannot: the test can fail
    d10 = process(rec, dataclasses.replace(ps, butter_cutoff_hz=10.0))
    p10 = np.linalg.lstsq(_design(d10).reshape(-1, 4), d10.tau_j.reshape(-1), rcond=None)[0]
    dv10 = process(val, dataclasses.replace(ps, butter_cutoff_hz=10.0))
    assert np.sqrt(np.mean((_design(dv10) @ p10 - dv10.raw["tau_j"]) ** 2)) / SIGMA > 1.5


def test_auto_refuses_a_missing_signal_and_unresolved_auto_falls_back():
    rec = _recording(0)
    with pytest.raises(ValueError, match="tau_m"):
        select_cutoff(rec, ProcessingSettings(), _design, signal="tau_m")
    d = process(rec, ProcessingSettings(butter_cutoff_hz="auto"))
    assert any("auto not resolved" in s for s in d.meta["processing"]["steps"])
    with pytest.raises(ValueError, match="auto"):
        ProcessingSettings(butter_cutoff_hz="fast")
