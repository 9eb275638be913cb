"""identify.estimation.consistency: the SDP fit returns physically consistent full parameters whose base
projection fits the data (ground truth: the reference arm's URDF inertia plus chosen friction)."""
import numpy as np
import pytest

from identify.model.base_params import compute_base_parameters
from identify.estimation.consistency import (ConsistentFit, consistency_report, is_physically_consistent,
                                  params_from_pseudo_inertia)
from identify.estimation.estimators import WLS
from identify.excitation.fourier import FourierTrajectory
from identify.model.friction import full_regressor
from identify.model.spatial import pseudo_inertia

TERMS = ("viscous", "coulomb")
SIGMA = np.array([0.08, 0.06, 0.04, 0.02, 0.01, 0.01])


@pytest.fixture(scope="module")
def problem(ref_model):
    m = ref_model
    bp = compute_base_parameters(m, terms=TERMS, seed=0)
    rng = np.random.default_rng(11)
    traj = FourierTrajectory.from_free(np.zeros(m.n), rng.normal(0, 0.35, (m.n, 4)),
                                       rng.normal(0, 0.35, (m.n, 4)), 0.1 * np.pi)
    t = np.linspace(0, 20, 1000, endpoint=False)
    W = full_regressor(m, *traj.evaluate(t), TERMS)
    p = np.concatenate([m.inertial_parameters(), np.linspace(2, 4, m.n), np.linspace(1.5, 0.5, m.n)])
    return {"m": m, "bp": bp, "W": W, "p": p, "tau": W @ p}


def test_truth_feasible_base_projection_matches_unconstrained_fit(problem):
    m, bp, W, p = problem["m"], problem["bp"], problem["W"], problem["p"]
    assert is_physically_consistent(p, m.n, TERMS)           # the truth is feasible
    y = problem["tau"] + np.random.default_rng(0).normal(size=problem["tau"].shape) * SIGMA
    cf = ConsistentFit(m, bp, TERMS).fit(W, y)
    assert cf.params_.shape == (len(p),)
    rep = consistency_report(cf.params_, m.n, TERMS)
    assert np.all(rep["min_eig"] >= -1e-12)
    assert all(v >= 0 for v in rep["term_min"].values())
    wls = WLS().fit(bp.reduce(W), y)
    np.testing.assert_allclose(cf.wls_base_params_, wls.params_, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(cf.base_params_, bp.E @ cf.params_)
    assert np.max(np.abs(cf.base_params_ - wls.params_) / wls.std_) < 1e-3
    assert cf.chi2_ == pytest.approx(cf.wls_chi2_, rel=1e-6)
    np.testing.assert_allclose(cf.predict(W), wls.predict(bp.reduce(W)), atol=1e-3)
    np.testing.assert_allclose(cf.residual_rms_, wls.residual_rms_, rtol=1e-3)


def test_infeasible_data_gives_constrained_parameters(problem):
    m, bp, W = problem["m"], problem["bp"], problem["W"]
    p = problem["p"].copy()
    n = m.n
    p[10 * n + 2] = -1.0                 # negative viscous friction on joint 3 (unphysical)
    p[10 * n + n + 4] = -0.4             # negative Coulomb friction on joint 5
    y = W @ p + np.random.default_rng(1).normal(size=(W.shape[0], n)) * SIGMA
    cf = ConsistentFit(m, bp, TERMS).fit(W, y)
    assert is_physically_consistent(cf.params_, n, TERMS, tol=1e-12)
    assert cf.params_[10 * n + 2] >= 0 and cf.params_[10 * n + n + 4] >= 0
    assert cf.params_[10 * n + 2] < 1e-6 and cf.params_[10 * n + n + 4] < 1e-6   # at the bound
    assert cf.chi2_ > 1.5 * cf.wls_chi2_       # the constraint costs fit quality, as it must
    wls = WLS().fit(bp.reduce(W), y)
    assert wls.params_[bp.names.index("fv3")] < 0


def _scale(prior, n):
    """The documented prior metric scale c_k = max(|prior_k|, floor): 0.01 kg, 1e-3 kg*m,
    1e-4 kg*m^2, 0.01 for the joint terms."""
    floor = np.concatenate([np.tile([1e-2] + [1e-3] * 3 + [1e-4] * 6, n),
                            np.full(len(TERMS) * n, 1e-2)])
    return np.maximum(np.abs(prior), floor)


def test_prior_resolves_unidentifiable_directions(problem):
    m, bp, W, p = problem["m"], problem["bp"], problem["W"], problem["p"]
    y = problem["tau"] + np.random.default_rng(2).normal(size=problem["tau"].shape) * SIGMA / 10
    wls = WLS().fit(bp.reduce(W), y)
    E = np.asarray(bp.E)
    # a prior off the truth by ~10 % (relative to its scale c: |value| or the floor) in every
    # parameter, identifiable or not
    prior = p + 0.1 * _scale(p, m.n) * np.random.default_rng(5).normal(size=p.shape)
    assert np.max(np.abs(E @ (prior - p)) / wls.std_) > 100     # the data can tell it is wrong
    cf = ConsistentFit(m, bp, TERMS, prior=prior).fit(W, y)
    invisible = np.all(np.abs(E) < 1e-12, axis=0)        # parameters no torque depends on
    assert invisible.sum() >= 4                             # e.g. m1, mx1, my1, XX1 ...
    np.testing.assert_allclose(cf.params_[invisible], prior[invisible], rtol=1e-4, atol=1e-8)
    # the data fix the base part: within the slack (~1 sigma) of the WLS fit, not at the prior's
    assert np.max(np.abs(cf.base_params_ - wls.params_) / wls.std_) < 1.05
    assert np.max(np.abs(cf.base_params_ - E @ p) / wls.std_) < 4.0
    # ... and the prior the rest: closed form, the parameters closest to the prior in the prior's
    # metric sum(((x - prior) / c)^2) among those with these base parameters,
    # x* = prior + C^2 E^T (E C^2 E^T)^-1 (E x - E prior). It is physically consistent here, so
    # the constraints are inactive and the SDP must return it.
    c = _scale(prior, m.n)
    C2E = (c ** 2)[:, None] * E.T
    x_star = prior + C2E @ np.linalg.solve(E @ C2E, cf.base_params_ - E @ prior)
    assert is_physically_consistent(x_star, m.n, TERMS)
    assert np.max(np.abs(cf.params_ - x_star) / c) < 1e-5
    assert np.max(np.abs(cf.params_ - p) / c) > 0.05           # not simply the truth
    # a wrong prior is overruled by the data in the identifiable directions: the fit stays within
    # the slack (1 effective chi^2 unit) of the best one, each base parameter within ~1 sigma
    cf2 = ConsistentFit(m, bp, TERMS, prior=1.3 * p).fit(W, y)
    assert cf2.chi2_ - cf2.wls_chi2_ <= 1.01 * np.mean(cf2.tau_int_)
    assert np.max(np.abs(cf2.base_params_ - wls.params_) / wls.std_) < 1.05
    assert is_physically_consistent(cf2.params_, m.n, TERMS, tol=1e-12)
    # ... and it is closer to that prior than the prior-free fit
    cf0 = ConsistentFit(m, bp, TERMS).fit(W, y)
    dist = lambda x: np.sum(((x - 1.3 * p) / np.maximum(np.abs(1.3 * p), 1e-4)) ** 2)  # noqa
    assert dist(cf2.params_) < 0.5 * dist(cf0.params_)
    # a prior of zero friction (as when only CAD inertia is known) does not drag the
    # well-identified friction coefficients away from the data
    prior0 = np.concatenate([p[:10 * m.n], np.zeros(2 * m.n)])
    cf3 = ConsistentFit(m, bp, TERMS, prior=prior0).fit(W, y)
    fr = [bp.names.index(f"{k}{j + 1}") for k in ("fv", "fc") for j in range(m.n)]
    assert np.all(np.abs(cf3.base_params_[fr] - wls.params_[fr]) < 1.05 * wls.std_[fr])


def test_penalized_prior_mode(problem):
    """prior_weight = w: chi^2 + w * D(p); a strong weight pulls towards the prior, a weak one
    leaves the fit at the data."""
    m, bp, W, p = problem["m"], problem["bp"], problem["W"], problem["p"]
    y = problem["tau"] + np.random.default_rng(4).normal(size=problem["tau"].shape) * SIGMA
    wls = WLS().fit(bp.reduce(W), y)
    weak = ConsistentFit(m, bp, TERMS, prior=1.3 * p, prior_weight=1e-6).fit(W, y)
    strong = ConsistentFit(m, bp, TERMS, prior=1.3 * p, prior_weight=1e6).fit(W, y)
    assert np.max(np.abs(weak.base_params_ - wls.params_) / wls.std_) < 0.05
    dist = lambda x: np.sum(((x - 1.3 * p) / np.maximum(np.abs(1.3 * p), 1e-4)) ** 2)  # noqa
    assert dist(strong.params_) < 0.1 * dist(weak.params_)
    assert strong.chi2_ > 2 * weak.chi2_
    assert is_physically_consistent(strong.params_, m.n, TERMS, tol=1e-12)


def test_pseudo_inertia_round_trip_and_report(ref_model):
    p = ref_model.inertial_parameters()
    for i in range(ref_model.n):
        np.testing.assert_allclose(params_from_pseudo_inertia(pseudo_inertia(p[10 * i:10 * i + 10])),
                                   p[10 * i:10 * i + 10], atol=1e-14)
    bad = p.copy()
    bad[0] = -0.1                                           # negative mass of link 1
    assert not is_physically_consistent(bad, ref_model.n)
    assert consistency_report(bad, ref_model.n)["min_eig"][0] < 0
    thin = p.copy()
    thin[10 + 4] = 1e-6                                      # link 2: Ixx violates triangle ineq.
    assert not is_physically_consistent(thin, ref_model.n)


def test_bad_input_errors(problem):
    m, bp, W = problem["m"], problem["bp"], problem["W"]
    with pytest.raises(ValueError, match="expected"):
        ConsistentFit(m, bp, TERMS).fit(W[..., :-1], problem["tau"])
    with pytest.raises(ValueError, match="terms"):               # settings: checked by fit
        ConsistentFit(m, bp, ("viscous",)).fit(W, problem["tau"])
    with pytest.raises(ValueError, match="prior has shape"):
        ConsistentFit(m, bp, TERMS, prior=np.zeros(3)).fit(W, problem["tau"])
    W2 = W.copy()
    W2[3, 0, 0] = np.nan                                    # m1 column: not a base column
    with pytest.raises(ValueError, match=r"sample 3, joint 0, parameter column 0 \(m1\)"):
        ConsistentFit(m, bp, TERMS).fit(W2, problem["tau"])
    with pytest.raises(ValueError, match="non-finite"):
        y = problem["tau"].copy()
        y[7, 1] = np.nan
        ConsistentFit(m, bp, TERMS).fit(W, y)


def test_offset_is_free_and_armature_nonnegative(problem):
    m = problem["m"]
    terms = ("viscous", "coulomb", "offset", "armature")
    bp = compute_base_parameters(m, terms=terms, seed=0)
    rng = np.random.default_rng(21)
    traj = FourierTrajectory.from_free(np.zeros(m.n), rng.normal(0, 0.35, (m.n, 4)),
                                       rng.normal(0, 0.35, (m.n, 4)), 0.1 * np.pi)
    t = np.linspace(0, 20, 600, endpoint=False)
    W = full_regressor(m, *traj.evaluate(t), terms)
    n = m.n
    offsets = np.array([-0.3, 0.2, -0.1, 0.05, -0.02, 0.01])
    p = np.concatenate([m.inertial_parameters(), np.full(n, 2.0), np.full(n, 1.0), offsets,
                        np.linspace(0.5, 0.15, n)])
    y = W @ p + rng.normal(size=(len(t), n)) * SIGMA / 10
    cf = ConsistentFit(m, bp, terms).fit(W, y)
    assert is_physically_consistent(cf.params_, n, terms, tol=1e-12)
    fo = cf.params_[10 * n + 2 * n:10 * n + 3 * n]
    np.testing.assert_allclose(fo, offsets, atol=0.01)      # negative offsets allowed
    assert np.all(cf.params_[10 * n + 3 * n:] >= 0)
    wls = WLS().fit(bp.reduce(W), y)
    assert np.max(np.abs(cf.base_params_ - wls.params_) / wls.std_) < 1e-3


def test_noise_free_data_recover_truth_base_parameters(problem):
    m, bp, W, p = problem["m"], problem["bp"], problem["W"], problem["p"]
    cf = ConsistentFit(m, bp, TERMS).fit(W, problem["tau"])
    assert np.all(np.isfinite(cf.params_))
    np.testing.assert_allclose(cf.base_params_, bp.E @ p, rtol=1e-5, atol=1e-6)
    assert is_physically_consistent(cf.params_, m.n, TERMS, tol=1e-12)


def test_mask_leaves_corrupted_samples_out(problem):
    """fit(..., mask=): samples marked False take no part (as in WLS): with 40 samples of joint 3
    corrupted by 50 N*m, the masked fit recovers the truth as the clean one does, the unmasked
    one does not; the masked fit's degrees of freedom count only the fitted samples."""
    m, bp, W, p = problem["m"], problem["bp"], problem["W"], problem["p"]
    y = problem["tau"] + np.random.default_rng(2).normal(size=problem["tau"].shape) * SIGMA
    bad = y.copy()
    bad[100:140, 2] += 50.0
    mask = np.ones(y.shape, bool)
    mask[100:140, 2] = False
    clean = ConsistentFit(m, bp, TERMS).fit(W, y)
    masked = ConsistentFit(m, bp, TERMS).fit(W, bad, mask=mask)
    plain = ConsistentFit(m, bp, TERMS).fit(W, bad)
    std = np.sqrt(np.diag(clean.wls_base_cov_))
    truth = bp.E @ p
    assert np.max(np.abs(masked.base_params_ - truth) / std) < 5
    assert np.max(np.abs(plain.base_params_ - truth) / std) > 50
    wls = WLS().fit(bp.reduce(W), bad, mask=mask)
    np.testing.assert_allclose(masked.sigma2_, wls.sigma2_, rtol=0.05)
    np.testing.assert_allclose(masked.residual_rms_[2] ** 2 * (len(y) - 40),
                               np.sum(((bad - W @ masked.params_) * mask)[:, 2] ** 2), rtol=1e-9)
