"""Every fitter of identify.estimation through the same checks of the estimator contract
(identify/common/estimator.py, scikit-learn's): settings stored by __init__ and checked by fit,
one fit signature per kind of fitter, fitted attributes ending in "_", get_params / set_params /
repr, clone, NotFittedError before fit, determinism -- and recovery of known parameters on a
closed-form synthetic problem of the reference arm.

Truth is independent of the code under test: torques from RobotModel's regressor / inverse
dynamics (checked against Pinocchio in tests/model) times chosen parameters, and for the
improved model the harmonic-drive chain integrated forwards by test_joint_models.synth."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import pytest

from identify.common.estimator import EstimatorMixin, NotFittedError, clone
from identify.estimation import (OLS, WLS, ConsistentFit, ImprovedModel, PayloadFit, Ridge,
                                 SimplifiedModel)
from identify.estimation.selection import SelectedModel
from identify.estimation.payload import from_physical, payload_regressor
from identify.model.base_params import compute_base_parameters
from identify.model.friction import full_regressor
from test_joint_models import EPS, LOAD_EPS, Truth, drive_truth, sines, synth

TERMS = ("viscous", "coulomb")
# torque noise per joint [N*m]: small, so that 5 std is a tight bound on a 10 s trajectory
SIGMA = 1e-3 * np.array([0.05, 0.04, 0.03, 0.02, 0.01, 0.01])
REGRESSION_FIT = ["W", "y", "mask", "names", "joint_names"]   # the two fit signatures
JOINT_MODEL_FIT = ["processed", "W"]


@dataclass
class Case:
    """One fitter: how to make it, its data, the truth it must recover."""
    make: Callable                   # () -> unfitted estimator
    fit_args: tuple                  # estimator.fit(*fit_args, **fit_kwargs)
    fit_kwargs: dict
    predict_args: tuple
    truth_attr: str                  # fitted attribute compared with `truth`
    truth: np.ndarray
    tol: Callable                    # fitted estimator -> (p,) allowed |error|
    signature: list                  # names of fit's parameters after self
    changed: dict                    # a setting that differs from the default
    bad: dict                        # a setting fit must refuse with ValueError
    attrs: tuple = ("params_",)      # fitted attributes that must be present
    extra: Callable | None = field(default=None)   # further truth checks on the fitted one


@pytest.fixture(scope="module")
def arm(ref_model):
    base = compute_base_parameters(ref_model, terms=TERMS, coulomb_eps=EPS, seed=0)
    t = np.arange(1000) / 100.0                               # 10 s at 100 Hz
    q, qd, qdd = sines(ref_model.n, 7)(t)
    return ref_model, base, (q, qd, qdd)


def _std_tol(k=5.0):
    return lambda est: k * est.std_


def _linear_case(arm, cls, changed, bad):
    model, base, (q, qd, qdd) = arm
    p_full = np.concatenate([model.inertial_parameters(), np.linspace(2, 4, model.n),
                             np.linspace(1.5, 0.5, model.n)])
    W = base.reduce(full_regressor(model, q, qd, qdd, TERMS, coulomb_eps=EPS))
    p = base.project(p_full)
    y = W @ p + SIGMA * np.random.default_rng(3).standard_normal(W.shape[:2])
    kw = {"names": list(base.names), "joint_names": list(model.joint_names)}
    return Case(lambda: cls(), (W, y), kw, (W,), "params_", p, _std_tol(), REGRESSION_FIT,
                changed, bad, attrs=("params_", "cov_", "std_", "sigma2_", "residual_rms_",
                                     "names_", "tau_int_"))


def _consistent_case(arm):
    model, base, (q, qd, qdd) = arm
    p_full = np.concatenate([model.inertial_parameters(), np.linspace(2, 4, model.n),
                             np.linspace(1.5, 0.5, model.n)])
    W = full_regressor(model, q, qd, qdd, TERMS, coulomb_eps=EPS)
    y = W @ p_full + SIGMA * np.random.default_rng(4).standard_normal(W.shape[:2])
    E = np.asarray(base.E)
    return Case(lambda: ConsistentFit(model, base, TERMS), (W, y),
                {"joint_names": list(model.joint_names)}, (W,), "base_params_", E @ p_full,
                lambda est: 5.0 * np.sqrt(np.diag(est.wls_base_cov_)), REGRESSION_FIT,
                {"estimator": "ols"}, {"estimator": "lasso"},
                attrs=("params_", "base_params_", "wls_base_cov_", "min_eig_", "chi2_",
                       "status_", "names_"),
                extra=lambda est: np.all(est.min_eig_ >= -1e-12))


def _payload_case(arm):
    model, _, (q, qd, qdd) = arm
    phi = from_physical(1.5, [0.01, -0.02, 0.06], [4e-3, 5e-3, 3e-3, 1e-4, 0.0, -2e-4])
    W = payload_regressor(model, q, qd, qdd)
    y = W @ phi + SIGMA * np.random.default_rng(5).standard_normal(W.shape[:2])
    return Case(lambda: PayloadFit(), (W, y), {"mask": np.abs(qd) >= 0.01}, (W,), "params_",
                phi, _std_tol(), REGRESSION_FIT, {"consistent": False}, {"min_eig": "tiny"},
                attrs=("params_", "cov_", "std_", "sigma_", "physical_", "names_"))


def _simplified_case(arm):
    model, base, _ = arm
    n = model.n
    # no drive: the motor torque is the link torque (rigid body + link friction)
    tr = Truth(xi=np.zeros(n), f_mc=np.zeros(n), f_mv=np.zeros(n), J_m=np.zeros(n),
               K=np.ones(n), f_lc=np.linspace(1.5, 0.5, n), f_lv=np.linspace(2, 4, n))
    d, _ = synth(model, tr, seed=8)
    p = base.project(np.concatenate([model.inertial_parameters(), tr.f_lv, tr.f_lc]))
    return Case(lambda: SimplifiedModel(model, base, coulomb_eps=EPS), (d,), {}, (d,),
                "params_", p, lambda est: 1e-6 * np.abs(p) + 1e-8, JOINT_MODEL_FIT,
                {"estimator": "ols"}, {"estimator": "lasso"},
                attrs=("params_", "std_", "names_", "estimator_"))


def _improved_case(arm):
    model, base, _ = arm
    tr = drive_truth()
    d, _ = synth(model, tr, seed=1)
    p = base.project(np.concatenate([model.inertial_parameters(), tr.f_lv, tr.f_lc]))
    return Case(lambda: ImprovedModel(model, base, coulomb_eps=EPS, load_eps=LOAD_EPS), (d,), {},
                (d,), "params_", p, lambda est: 1e-6 * np.abs(p) + 1e-8, JOINT_MODEL_FIT,
                {"serial": None}, {"friction_term": "quadratic"},
                attrs=("params_", "std_", "stage1_", "stage2_", "stage2_all_", "variants_",
                       "friction_term_", "compare_friction_terms_"),
                # stage 2 up to the finite-difference error of taudd_r on the 100 Hz grid
                extra=lambda est: np.allclose(est.stage2_.a, tr.a(), rtol=1e-3, atol=1e-6))


def _selected_case(arm):
    """The simplified model with its terms chosen by CV: on data with the textbook friction
    (viscous + Coulomb) it must recover the same base parameters, fitted with those terms."""
    model, _base, _ = arm
    n = model.n
    tr = Truth(xi=np.zeros(n), f_mc=np.zeros(n), f_mv=np.zeros(n), J_m=np.zeros(n),
               K=np.ones(n), f_lc=np.linspace(1.5, 0.5, n), f_lv=np.linspace(2, 4, n))
    d, _ = synth(model, tr, seed=8)
    rigid = compute_base_parameters(model, terms=(), seed=0)
    p = rigid.project(model.inertial_parameters())
    return Case(lambda: SelectedModel(model, rigid), (d,), {}, (d,), "rigid_params_", p,
                lambda est: 1e-4 * np.abs(p) + 1e-5, JOINT_MODEL_FIT, {"folds": 3},
                {"folds": 1}, attrs=("params_", "std_", "names_", "rigid_params_", "selection_"),
                extra=None)


CASES = {
    "OLS": lambda arm: _linear_case(arm, OLS, {"serial": None}, {"serial": "yes"}),
    "WLS": lambda arm: _linear_case(arm, WLS, {"sigma": SIGMA}, {"sigma": -SIGMA}),
    "Ridge": lambda arm: _linear_case(arm, Ridge, {"lam": 1e-9}, {"lam": -1.0}),
    "ConsistentFit": _consistent_case,
    "PayloadFit": _payload_case,
    "SimplifiedModel": _simplified_case,
    "SelectedModel": _selected_case,
    "ImprovedModel": _improved_case,
}


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request, arm):
    c = CASES[request.param](arm)
    fitted = c.make()
    out = fitted.fit(*c.fit_args, **c.fit_kwargs)
    return c, fitted, out


def test_init_stores_settings_only(case):
    c, _, _ = case
    est = c.make()
    assert isinstance(est, EstimatorMixin)
    params = est.get_params(deep=False)
    assert set(vars(est)) == set(params)          # nothing derived, nothing fitted
    assert not any(k.endswith("_") for k in params)


def test_fit_signature_is_the_shared_one(case):
    c, fitted, _ = case
    sig = inspect.signature(fitted.fit).parameters
    assert list(sig) == c.signature
    first = 2 if c.signature is REGRESSION_FIT else 1
    assert all(p.kind is p.KEYWORD_ONLY for p in list(sig.values())[first:])


def test_get_params_round_trip_and_set_params(case):
    c, _, _ = case
    est = c.make()
    params = est.get_params(deep=False)
    again = type(est)(**params).get_params(deep=False)
    assert list(again) == list(params) and all(again[k] is params[k] for k in params)
    (key, value), = c.changed.items()
    assert est.set_params(**c.changed) is est and est.get_params()[key] is value
    with pytest.raises(ValueError, match="no setting 'colour'"):
        est.set_params(colour="red")


def test_repr_shows_the_changed_settings(case):
    c, _, _ = case
    name = type(c.make()).__name__
    text = repr(c.make().set_params(**c.changed))
    assert text.startswith(name + "(") and text.endswith(")") and "\n" not in text
    assert f"{next(iter(c.changed))}=" in text and len(text) < 200
    default = repr(type(c.make())(**c.make().get_params(deep=False)))
    assert next(iter(c.changed)) + "=" not in default


def test_unfitted_predict_raises(case):
    c, _, _ = case
    with pytest.raises(NotFittedError, match="not fitted"):
        c.make().predict(*c.predict_args)


def test_fit_returns_self_and_sets_only_underscore_attributes(case):
    c, fitted, out = case
    assert out is fitted
    for a in c.attrs:
        assert hasattr(fitted, a), a
    new = set(vars(fitted)) - set(fitted.get_params(deep=False))
    assert new and all(k.endswith("_") for k in new), sorted(new)
    assert fitted.get_params(deep=False).keys() == c.make().get_params(deep=False).keys()


def test_bad_setting_refused_by_fit_not_by_init(case):
    c, _, _ = case
    est = c.make().set_params(**c.bad)           # stored as given
    with pytest.raises(ValueError):
        est.fit(*c.fit_args, **c.fit_kwargs)


def test_clone_is_unfitted_and_refits_to_the_same_numbers(case):
    c, fitted, _ = case
    twin = clone(fitted)
    assert type(twin) is type(fitted) and "params_" not in vars(twin)
    twin.fit(*c.fit_args, **c.fit_kwargs)
    np.testing.assert_array_equal(getattr(twin, c.truth_attr), getattr(fitted, c.truth_attr))
    # clone with a setting replaced: that setting changed, the original's kept
    (key, value), = c.changed.items()
    other = clone(fitted, **c.changed)
    assert other.get_params()[key] is value and fitted.get_params()[key] is not value


def test_deterministic(case):
    c, fitted, _ = case
    again = c.make().fit(*c.fit_args, **c.fit_kwargs)
    np.testing.assert_array_equal(again.params_, fitted.params_)
    np.testing.assert_array_equal(again.predict(*c.predict_args),
                                  fitted.predict(*c.predict_args))


def test_recovers_known_parameters(case):
    c, fitted, _ = case
    got = np.asarray(getattr(fitted, c.truth_attr))
    err = np.abs(got - c.truth)
    tol = c.tol(fitted)
    assert got.shape == c.truth.shape
    nz = c.truth != 0
    assert np.median(tol[nz] / np.abs(c.truth[nz])) < 0.01  # a bound that can fail
    assert np.all(err <= tol), (np.max(err / tol), int(np.argmax(err / tol)))
    assert c.extra is None or c.extra(fitted)


def test_nested_estimator_settings_and_no_fit_in_place(arm):
    """A joint model's stage-1 estimator given as an instance: its settings reachable as
    estimator__<setting>, and the instance itself is cloned by fit, never fitted in place."""
    c = _simplified_case(arm)
    inner = WLS()
    sm = SimplifiedModel(*(c.make().get_params()[k] for k in ("model", "base")),
                         estimator=inner, coulomb_eps=EPS)
    assert sm.get_params()["estimator__serial"] == "auto"
    sm.set_params(estimator__serial=None)
    assert inner.serial is None and "estimator=WLS(serial=None)" in repr(sm)
    sm.fit(*c.fit_args)
    assert "params_" not in vars(inner) and sm.estimator_ is not inner
    assert sm.estimator_.serial is None
    np.testing.assert_allclose(sm.params_, c.truth, rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="not an estimator"):
        c.make().set_params(estimator__serial=None)          # estimator="wls": a name
