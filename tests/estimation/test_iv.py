"""Instrumental variables (identify.estimation.iv.IV) against a closed-form truth: a synthetic
closed-loop log of the reference arm whose torques are the URDF's rigid body (RNEA) on the TRUE
states -- which lag the commanded trajectory by 10 ms, as a tracking controller's do -- plus
torque noise, and whose encoder adds white noise to those states. Least squares on the
differentiated encoder (errors in variables) is biased; the regressor of the commanded
trajectory (processed with the same filter chain) is biased too (it is not the state the
torque came from); IV with that regressor as the instrument is not."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from identify.backend.recording import Recording
from identify.estimation.design import design_from
from identify.estimation.estimators import WLS
from identify.estimation.iv import IV
from identify.estimation.processing import ProcessingSettings, process
from identify.logs.simulate import _motion
from identify.model.base_params import compute_base_parameters
from identify.model.robot_model import RobotModel

ROOT = Path(__file__).resolve().parents[2]
RATE, DURATION, LAG_S = 200.0, 40.0, 0.01


def _closed_loop(model, seed, encoder_noise):
    """Processed encoder data and processed command data of one synthetic closed-loop log."""
    t = np.arange(int(DURATION * RATE)) / RATE
    q_cmd = _motion(model, t, np.random.default_rng(7), harmonics=5, period=10.0)[0]
    q, qd, qdd = _motion(model, t - LAG_S, np.random.default_rng(7), harmonics=5, period=10.0)
    rng = np.random.default_rng(seed)
    tau = model.inverse_dynamics(q, qd, qdd) + 0.05 * rng.normal(size=q.shape)
    rec = Recording(t=t, q=q + encoder_noise * rng.normal(size=q.shape), rate_hz=RATE,
                    joint_names=list(model.joint_names), tau_m=tau, q_cmd=q_cmd)
    ps = ProcessingSettings.from_dict({"smooth_passes": 0, "butter_cutoff_hz": 10})
    return process(rec, ps), process(rec, dataclasses.replace(ps, velocity="command"))


@pytest.fixture(scope="module")
def arm():
    model = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf")
    base = compute_base_parameters(model, terms=(), seed=0)
    return model, base, base.E @ model.inertial_parameters()


def test_iv_removes_the_encoder_noise_bias_of_wls(arm):
    model, base, p_true = arm
    d, dz = _closed_loop(model, 0, encoder_noise=1e-3)
    assert np.array_equal(d.t, dz.t) and np.array_equal(d.tau_m, dz.tau_m)   # same samples
    W = design_from(model, base, d, terms=())[0]
    Z = design_from(model, base, dz, terms=())[0]
    wls = WLS().fit(W, d.tau_m)
    iv = IV().fit(W, d.tau_m, Z=Z)
    cmd = WLS().fit(Z, d.tau_m)                # the command's states as if they were the arm's
    good = wls.std_ < 0.05 * np.abs(p_true)    # the well-identified base parameters
    assert good.sum() >= 10

    def err(f):
        return float(np.median(np.abs(f.params_ - p_true)[good] / np.abs(p_true[good])))
    assert err(wls) > 0.01                     # WLS: biased by the noisy regressor (~2.4 %)
    assert err(cmd) > 0.004                    # the command alone: biased by the lag (~0.9 %)
    assert err(iv) < 0.1 * err(wls) and err(iv) < 0.3 * err(cmd)
    # the bias is systematic: WLS's errors are far beyond its own std, IV's are not
    z = np.abs(iv.params_ - p_true)[good] / iv.std_[good]
    assert np.median(np.abs(wls.params_ - p_true)[good] / wls.std_[good]) > 1.0
    assert np.all(z < 3)


def test_iv_equals_wls_when_the_instruments_are_the_regressor(arm):
    """Z = W: the IV normal equations are WLS's (same weights) -- same estimate."""
    model, base, _ = arm
    d, _ = _closed_loop(model, 1, encoder_noise=1e-4)
    W = design_from(model, base, d, terms=())[0]
    np.testing.assert_allclose(IV().fit(W, d.tau_m, Z=W).params_, WLS().fit(W, d.tau_m).params_,
                               rtol=1e-7, atol=1e-9)


def test_iv_refuses_bad_instruments(arm):
    model, base, _ = arm
    d, _ = _closed_loop(model, 2, encoder_noise=1e-4)
    W = design_from(model, base, d, terms=())[0]
    with pytest.raises(ValueError, match="instruments Z have shape"):
        IV().fit(W, d.tau_m, Z=W[:-1])
    Z = W.copy()
    Z[5, 0, 0] = np.nan
    with pytest.raises(ValueError, match="not finite at sample 5"):
        IV().fit(W, d.tau_m, Z=Z)
    with pytest.raises(ValueError, match="not correlated"):
        IV().fit(W, d.tau_m, Z=np.zeros_like(W))


def test_estimator_iv_on_the_twin_reduces_the_stage1_bias(tmp_path):
    """`identification.estimator: iv` on the twin in closed loop (its 1 kHz joint controller)
    with 10x the default encoder noise: the stage-1 base parameters against the twin's truth are
    closer than with wls, and within 3 sigma of it."""
    import json

    import yaml

    from identify.app.pipeline import run_scenario
    from identify.scenario.load import load_scenario
    base = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    base["arm"] = {k: str(ROOT / "scenarios" / v) for k, v in base["arm"].items()}
    base["twin"]["encoder_noise_rad"] = 1.0e-3
    base["identification"]["physical_consistency"] = False
    base["outputs"] = {"dir": str(tmp_path / "runs"), "plots": False}
    errs = {}
    for est in ("wls", "iv"):
        d = dict(base, name=f"iv_{est}", identification=dict(base["identification"],
                                                             estimator=est))
        p = tmp_path / f"{est}.yaml"
        p.write_text(yaml.safe_dump(d))
        res = run_scenario(load_scenario(p), out=tmp_path / est)
        m = json.loads((res.folder / "metrics.json").read_text())
        errs[est] = m["parameter_errors"]["improved_stage1"]
        errs[est]["misfit"] = m.get("uncertainty", {}).get("improved_stage1", {}).get("misfit")
    assert errs["iv"]["median_abs_error_percent"] < 0.5 * errs["wls"]["median_abs_error_percent"]
    # wls is biased by the encoder noise in its regressor: its sandwich std miss the truth, or
    # the block jackknife flags the fit as a misfit (std inflated, the run says lower bounds)
    assert errs["wls"]["within_3sigma"] < errs["wls"]["count"] or errs["wls"]["misfit"]
    assert errs["iv"]["within_3sigma"] == errs["iv"]["count"]
