"""identification.estimator inside the physically consistent fit (issue 14): ols / wls weights
in the SDP, ridge's pull towards the prior on a poorly excited log."""
from __future__ import annotations

import numpy as np
import pytest

from identify.estimation.consistency import ConsistentFit
from identify.logs.simulate import simulate
from identify.model.base_params import compute_base_parameters
from identify.model.friction import full_regressor

TERMS = ("viscous", "coulomb")


@pytest.fixture(scope="module")
def problem(ref_model):
    base = compute_base_parameters(ref_model, terms=TERMS, seed=0)
    return ref_model, base


def _data(model, duration, seed, noise):
    log = simulate(model, duration_s=duration, rate_hz=100.0, signals="tau_j", seed=seed,
                   noise_tau=0.0)
    rng = np.random.default_rng(seed)
    y = log.tau_j + rng.normal(size=log.tau_j.shape) * noise
    W = full_regressor(model, log.q, log.qd, log.qdd, TERMS)
    return W, y


def test_ols_and_wls_weights_differ_when_joint_noise_differs(problem):
    model, base = problem
    noise = np.array([0.01, 0.01, 0.01, 2.0, 2.0, 2.0])     # three noisy joints
    W, y = _data(model, 20.0, 0, noise)
    prior = np.concatenate([model.inertial_parameters(), np.zeros(12)])
    fits = {e: ConsistentFit(model, base, TERMS, prior=prior, estimator=e).fit(W, y)
            for e in ("ols", "wls")}
    w_ols, w_wls = fits["ols"].weights_, fits["wls"].weights_
    assert np.ptp(w_ols) == 0 and w_wls[0] / w_wls[5] > 10
    # weighting the quiet joints more fits them better
    r = {e: f.residual_rms_ for e, f in fits.items()}
    assert np.mean(r["wls"][:3]) < np.mean(r["ols"][:3])


def test_ridge_pulls_a_poorly_excited_fit_towards_the_prior(problem):
    model, base = problem
    W, y = _data(model, 0.6, 1, np.full(6, 0.5))            # 0.6 s of a 20 s motion
    truth = np.concatenate([model.inertial_parameters(), np.zeros(12)])
    prior = truth.copy()
    fits = {e: ConsistentFit(model, base, TERMS, prior=prior, estimator=e).fit(W, y)
            for e in ("wls", "ridge")}
    assert fits["ridge"].ridge_lambda_ > 0 and fits["wls"].ridge_lambda_ is None
    E = np.asarray(base.E)
    d = {e: np.linalg.norm(E @ (f.params_ - prior)) for e, f in fits.items()}
    assert d["ridge"] < 0.5 * d["wls"], d
    with pytest.raises(ValueError, match="estimator"):
        ConsistentFit(model, base, TERMS, estimator="lasso").fit(W, y)
