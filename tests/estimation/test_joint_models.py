"""Simplified and improved joint models against synthetic data with known parameters.

Truth is generated independently of the code under test: the rigid-body torque from RobotModel
(checked against Pinocchio in test_model.py), link friction added, then the harmonic-drive chain
of the paper integrated *forwards* physically -- tau'_r solved from tau_r = tau'_r - tau_rf(tau'_r)
by fixed-point iteration, the compliance acceleration from a fine central difference of tau_r on
the analytic trajectory -- and tau'_m = J'_m qdd'_m + tau'_mf + tau'_r. The code under test instead
uses the algebraic closed form and a finite difference on the sample grid.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from identify import RobotModel
from identify.model.base_params import compute_base_parameters
from identify.estimation.improved import ImprovedModel
from identify.estimation.stage2 import FRICTION_VARIANTS
from identify.estimation.simplified import SimplifiedModel
from identify.estimation.processing import Processed

ROOT = Path(__file__).resolve().parents[2]
EPS = 0.05          # tanh smoothing of Coulomb friction [rad/s] (generator and models alike)
LOAD_EPS = 0.02     # smoothing of the direction in the opposing reducer friction [rad/s]


@dataclass
class Truth:
    xi: np.ndarray       # (n,) reducer friction coefficient xi_gf + xi_sf
    f_mc: np.ndarray     # (n,) motor Coulomb [N*m]
    f_mv: np.ndarray     # (n,) motor viscous [N*m*s/rad]
    J_m: np.ndarray      # (n,) eta^2 J_m [kg*m^2]
    K: np.ndarray        # (n,) stiffness [N*m/rad]
    f_lc: np.ndarray     # (n,) link Coulomb [N*m]
    f_lv: np.ndarray     # (n,) link viscous [N*m*s/rad]

    def a(self) -> np.ndarray:
        """(n, 5) the paper's a1..a5 for the linear variant."""
        c = np.stack([self.f_mc, self.f_mv, self.J_m, self.J_m / self.K], axis=1)
        return np.column_stack([self.xi, (1 - self.xi)[:, None] * c])

    def c(self) -> np.ndarray:
        return np.stack([self.f_mc, self.f_mv, self.J_m, self.J_m / self.K], axis=1)


def drive_truth(compliance_scale: float = 1.0) -> Truth:
    """Drive truth from assets/cobot6_drives.yaml. `compliance_scale` < 1 softens the joints
    (so that J'_m/K is well excited in a short test)."""
    joints = yaml.safe_load((ROOT / "assets" / "cobot6_drives.yaml").read_text())["joints"]
    g = lambda k: np.array([float(j[k]) for j in joints])          # noqa: E731
    eta = g("gear_ratio")
    return Truth(xi=g("xi_gf") + g("xi_sf"), f_mc=g("motor_coulomb_Nm"),
                 f_mv=g("motor_viscous_Nms_rad"), J_m=eta ** 2 * g("J_m_kgm2"),
                 K=g("stiffness_Nm_rad") * compliance_scale, f_lc=g("link_coulomb_Nm"),
                 f_lv=g("link_viscous_Nms_rad"))


def sines(n: int, seed: int, period: float = 10.0, H: int = 5, vmax: float = 0.8):
    """A smooth periodic multi-sine trajectory: returns f(t) -> (q, qd, qdd), each (N, n)."""
    rng = np.random.default_rng(seed)
    wf = 2 * np.pi / period
    k = np.arange(1, H + 1)
    v = rng.uniform(-1, 1, (n, H)) * vmax / H                     # velocity amplitudes [rad/s]
    ph = rng.uniform(0, 2 * np.pi, (n, H))
    q0 = rng.uniform(-0.8, 0.8, n) + np.array([0, -np.pi / 2, 0, -np.pi / 2, 0, 0])[:n]

    def f(t):
        arg = k[None, None, :] * wf * t[:, None, None] + ph[None]
        q = q0 + np.sum(v / (k * wf) * np.sin(arg), axis=2)
        qd = np.sum(v * np.cos(arg), axis=2)
        qdd = -np.sum(v * k * wf * np.sin(arg), axis=2)
        return q, qd, qdd
    return f


def link_torque(model, traj, t, tr: Truth):
    q, qd, qdd = traj(t)
    return model.inverse_dynamics(q, qd, qdd) + tr.f_lc * np.tanh(qd / EPS) + tr.f_lv * qd


def synth(model, tr: Truth, *, seed: int, variant: str = "linear", duration: float = 10.0,
          rate: float = 100.0, sigma_m: float = 0.0, sigma_j: float = 0.0, traj=None):
    """Synthetic processed data: returns (Processed, true tau'_m (N, n))."""
    traj = traj or sines(model.n, seed)
    t = np.arange(int(round(duration * rate))) / rate
    q, qd, qdd = traj(t)
    h = 1e-3
    tau_r = link_torque(model, traj, t, tr)
    taudd_r = (link_torque(model, traj, t + h, tr) - 2 * tau_r
               + link_torque(model, traj, t - h, tr)) / h ** 2
    s = np.tanh(qd / LOAD_EPS)
    # tau'_r from tau_r = tau'_r - tau_rf(tau'_r): fixed-point iteration (contraction, xi < 1)
    tau_rp = tau_r.copy()
    for _ in range(200):
        if variant == "linear":
            tau_rf = tr.xi * tau_rp
        elif variant == "opposing":
            tau_rf = tr.xi * np.abs(tau_rp) * s
        else:
            raise ValueError(variant)
        tau_rp = tau_r + tau_rf
    qdd_m = qdd + taudd_r / tr.K                                   # motor acceleration, reflected
    tau_m = tr.J_m * qdd_m + tr.f_mc * np.tanh(qd / EPS) + tr.f_mv * qd + tau_rp
    rng = np.random.default_rng(1000 + seed)
    d = Processed(t=t, q=q, qd=qd, qdd=qdd,
                  tau_j=tau_r + sigma_j * rng.standard_normal(tau_r.shape),
                  tau_m=tau_m + sigma_m * rng.standard_normal(tau_m.shape),
                  rate_hz=rate, joint_names=list(model.joint_names))
    return d, tau_m


@pytest.fixture(scope="module")
def model():
    return RobotModel.reference()


@pytest.fixture(scope="module")
def base(model):
    return compute_base_parameters(model, terms=("viscous", "coulomb"), coulomb_eps=EPS, seed=0)


def _models(model, base, variant="linear", estimator="wls"):
    sm = SimplifiedModel(model, base, estimator=estimator, coulomb_eps=EPS)
    im = ImprovedModel(model, base, estimator=estimator, friction_term=variant,
                       coulomb_eps=EPS, load_eps=LOAD_EPS)
    return sm, im


@pytest.fixture(scope="module")
def noise_free(model, base):
    tr = drive_truth()
    d, _ = synth(model, tr, seed=1)
    dv, tau_v = synth(model, tr, seed=2)
    sm, im = _models(model, base)
    sm.fit(d)
    im.fit(d)
    return tr, d, dv, tau_v, sm, im


def test_noise_free_closed_form_equals_truth(noise_free, base, model):
    tr, d, dv, tau_v, sm, im = noise_free
    # stage 1 reproduces the true base parameters (inertial + link friction)
    p_true = base.project(np.concatenate([model.inertial_parameters(), tr.f_lv, tr.f_lc]))
    np.testing.assert_allclose(im.params_, p_true, rtol=1e-6, atol=1e-8)
    # stage 2 up to the finite-difference error of taudd_r on the 100 Hz grid (~2 % of a5)
    np.testing.assert_allclose(im.stage2_.a, tr.a(), rtol=1e-3, atol=1e-6)
    pred = im.predict(dv, route="closed_form")
    assert np.max(np.abs(tau_v)) > 20.0
    assert np.max(np.abs(pred - tau_v)) < 1e-4
    # eq. (24) feeds the simplified model's (wrong) tau'_m in: measurably worse
    pred24 = im.predict(dv, route="eq24", simplified=sm)
    assert np.sqrt(np.mean((pred24 - tau_v) ** 2)) > 10 * np.sqrt(np.mean((pred - tau_v) ** 2))


def test_closed_form_with_measured_tau_r_is_exact(noise_free):
    tr, d, dv, tau_v, sm, im = noise_free
    pred = im.predict(dv, route="closed_form", tau_r="measured")
    np.testing.assert_allclose(pred, tau_v, rtol=0, atol=1e-4)


def test_stage2_coverage_over_seeds(model, base):
    """a1..a5 recovered within their reported sigma: normalised errors z are ~N(0, 1)."""
    tr = drive_truth(compliance_scale=0.02)
    z = []
    for seed in (11, 12, 13):
        d, _ = synth(model, tr, seed=seed, sigma_m=0.05)
        im = ImprovedModel(model, base, coulomb_eps=EPS, load_eps=LOAD_EPS,
                           variants=("linear",)).fit(d)
        ok = np.array([j.xi_identified for j in im.stage2_.joints])
        # joint 6 carries ~1e-3 N*m through its torque sensor: xi is honestly unidentifiable
        assert ok[:5].all() and not ok[5]
        assert np.isnan(im.stage2_.a_std[5, 0]) and im.stage2_.a[5, 0] == 0.0
        # (its a2..a5 then absorb xi * tau'_r and are not compared with the truth)
        z.append(((im.stage2_.a - tr.a()) / im.stage2_.a_std)[:5])
        rms = im.stage2_.rms
        np.testing.assert_allclose(rms, 0.05, rtol=0.1)            # residual RMS == noise
    z = np.concatenate(z).ravel()
    assert np.max(np.abs(z)) < 4.5, z
    assert 0.5 < np.mean(z ** 2) < 1.7, np.mean(z ** 2)


def test_opposing_variant_recovered_and_preferred(model, base):
    tr = drive_truth(compliance_scale=0.02)
    d, _ = synth(model, tr, seed=21, variant="opposing", sigma_m=0.05)
    dv, tau_v = synth(model, tr, seed=22, variant="opposing")
    im = ImprovedModel(model, base, friction_term="auto", coulomb_eps=EPS,
                       load_eps=LOAD_EPS).fit(d)
    cmp = im.compare_friction_terms_
    assert cmp["better"] == "opposing" and im.friction_term_ == "opposing"
    assert im.stage2_ is im.stage2_all_["opposing"]
    assert cmp["rms"]["opposing"] < 0.8 * cmp["rms"]["linear"]
    P, S = im.stage2_.params, im.stage2_.std
    truth = np.column_stack([tr.xi, tr.c()])
    ok = np.array([j.xi_identified for j in im.stage2_.joints])
    assert ok[:5].all()                   # joint 6 (near-zero sensor torque) may be flagged
    z = ((P - truth) / S)[ok]
    assert np.max(np.abs(z)) < 4.5, z
    from identify.validation.parameter_errors import stage2_errors
    pe = stage2_errors(im.stage2_, {"xi": tr.xi, "f_mc": tr.f_mc, "f_mv": tr.f_mv,
                                    "J_m": tr.J_m, "K": tr.K})
    assert pe.n == 5 * int(ok.sum()) and pe.names[0] == "joint1.xi_opp"
    np.testing.assert_allclose(pe.z, z.ravel())
    # closed form of the piecewise-linear model reproduces the truth on the validation run
    pred = im.predict(dv, route="closed_form")
    rel = np.sqrt(np.mean((pred - tau_v) ** 2)) / np.sqrt(np.mean(tau_v ** 2))
    assert rel < 0.01, rel


def test_linear_data_prefers_linear(model, base):
    tr = drive_truth(compliance_scale=0.02)
    d, _ = synth(model, tr, seed=31, sigma_m=0.05)
    im = ImprovedModel(model, base, coulomb_eps=EPS, load_eps=LOAD_EPS).fit(d)
    assert set(im.compare_friction_terms_["rms"]) == set(FRICTION_VARIANTS)
    assert im.compare_friction_terms_["better"] == "linear"
    # "both" nests both variants: it explains the data at least as well, and finds xi_opp ~ 0
    both = im.stage2_all_["both"]
    assert both.rms_overall <= im.stage2_all_["linear"].rms_overall + 1e-9
    k = both.names.index("xi_opp")
    ok = np.array([j.xi_identified for j in both.joints])
    assert ok[:5].all()
    assert np.all(np.abs(both.params[ok, k]) < 4.5 * both.std[ok, k])


def test_improved_beats_simplified_on_motor_torque(model, base):
    tr = drive_truth()
    d, _ = synth(model, tr, seed=41, sigma_m=0.05, sigma_j=0.02)
    dv, _ = synth(model, tr, seed=42, sigma_m=0.05, sigma_j=0.02)
    sm, im = _models(model, base)
    sm.fit(d)
    im.fit(d)
    for data in (d, dv):
        e_s = np.sqrt(np.mean((sm.predict(data) - data.tau_m) ** 2))
        e_c = np.sqrt(np.mean((im.predict(data, route="closed_form") - data.tau_m) ** 2))
        e_24 = np.sqrt(np.mean((im.predict(data, route="eq24", simplified=sm) - data.tau_m) ** 2))
        assert e_c < e_24 < e_s, (e_c, e_24, e_s)


def test_simplified_model_fits_its_own_model(model, base):
    """Data generated by the simplified model itself: parameters recovered within sigma."""
    rng_traj = sines(model.n, 51)
    t = np.arange(1000) / 100.0
    q, qd, qdd = rng_traj(t)
    from identify.model.friction import joint_columns
    W = base.reduce(np.concatenate([model.regressor(q, qd, qdd),
                                    joint_columns(qd, qdd, coulomb_eps=EPS)], axis=2))
    p = base.project(np.concatenate([model.inertial_parameters(), np.full(6, 3.0),
                                     np.full(6, 1.2)]))
    tau = W @ p + 0.05 * np.random.default_rng(5).standard_normal((t.size, 6))
    d = Processed(t=t, q=q, qd=qd, qdd=qdd, tau_j=None, tau_m=tau, rate_hz=100.0,
                  joint_names=list(model.joint_names))
    sm = SimplifiedModel(model, base, coulomb_eps=EPS).fit(d)
    z = (sm.params_ - p) / sm.std_
    assert np.max(np.abs(z)) < 4.5
    assert len(sm.names_) == base.n_base
    np.testing.assert_allclose(sm.predict(d), W @ sm.params_)


# -- bad input ----------------------------------------------------------------------------------
def test_errors(model, base, noise_free):
    tr, d, dv, tau_v, sm, im = noise_free
    with pytest.raises(RuntimeError, match="not fitted"):
        ImprovedModel(model, base).predict(d)
    with pytest.raises(ValueError, match="friction_term"):           # settings: checked by fit
        ImprovedModel(model, base, friction_term="quadratic").fit(d)
    with pytest.raises(ValueError, match="variant"):
        ImprovedModel(model, base, variants=("cubic",)).fit(d)
    with pytest.raises(ValueError, match="eq24"):
        im.predict(dv, route="eq24")
    with pytest.raises(ValueError, match="route"):
        im.predict(dv, route="magic")
    bad = Processed(t=d.t, q=d.q, qd=d.qd, qdd=d.qdd, tau_j=d.tau_j.copy(), tau_m=d.tau_m.copy(),
                    rate_hz=d.rate_hz, joint_names=d.joint_names)
    bad.tau_m[17, 2] = np.nan
    with pytest.raises(ValueError, match=r"tau_m.*sample 17.*joint 3"):
        ImprovedModel(model, base, coulomb_eps=EPS).fit(bad)
    no_tj = Processed(t=d.t, q=d.q, qd=d.qd, qdd=d.qdd, tau_j=None, tau_m=d.tau_m,
                      rate_hz=d.rate_hz, joint_names=d.joint_names)
    with pytest.raises(ValueError, match="tau_j"):
        ImprovedModel(model, base, coulomb_eps=EPS).fit(no_tj)
    short = Processed(t=d.t[:5], q=d.q[:5], qd=d.qd[:5], qdd=d.qdd[:5], tau_j=d.tau_j[:5],
                      tau_m=d.tau_m[:5], rate_hz=d.rate_hz, joint_names=d.joint_names)
    with pytest.raises(ValueError):
        ImprovedModel(model, base, coulomb_eps=EPS).fit(short)
    with pytest.raises(ValueError, match="precomputed design"):
        sm.predict(dv, W=np.zeros((3, 6, base.n_base)))
    with pytest.raises(ValueError, match="precomputed design"):
        SimplifiedModel(model, base).fit(d, W=sm.design(d)[:, :, :-1])
    base_inertial = compute_base_parameters(model, terms=("viscous",), seed=0)
    with pytest.raises(ValueError, match="full columns|friction terms"):
        SimplifiedModel(model, base_inertial).fit(d)


def test_paper_formulas_eq24_and_closed_form(model, base, noise_free):
    """Linear variant, no compliance column: the two prediction routes are the paper's eq. (24)
    T_rp + a1 T_pre + a2 sign + a3 qd + a4 qdd and (T_rp + a2 sign + a3 qd + a4 qdd) / (1 - a1)."""
    tr, d, dv, tau_v, sm, _ = noise_free
    im = ImprovedModel(model, base, coulomb_eps=EPS, compliance=False,
                       variants=("linear",)).fit(d)
    a = im.stage2_.a
    assert np.all(a[:, 4] == 0.0)
    T_rp = im.predict_tau_r(dv)
    T_pre = sm.predict(dv)
    rest = a[:, 1] * np.tanh(dv.qd / EPS) + a[:, 2] * dv.qd + a[:, 3] * dv.qdd
    np.testing.assert_allclose(im.predict(dv, route="eq24", simplified=sm),
                               T_rp + a[:, 0] * T_pre + rest, atol=1e-10)
    np.testing.assert_allclose(im.predict(dv, route="eq24", T_pre=T_pre),
                               T_rp + a[:, 0] * T_pre + rest, atol=1e-10)
    np.testing.assert_allclose(im.predict(dv, route="closed_form"),
                               (T_rp + rest) / (1 - a[:, 0]), atol=1e-10)


def test_inertial_only_base_gets_friction_columns_appended(model, base, noise_free):
    """Base parameters computed without friction terms: the friction columns are appended; the
    column space and hence the fit are the same as with the friction-aware base."""
    from identify.validation.validate import decompose
    tr, d, dv, tau_v, sm, im = noise_free
    base0 = compute_base_parameters(model, terms=(), seed=0)
    sm0 = SimplifiedModel(model, base0, coulomb_eps=EPS).fit(d)
    assert sm0.names_[-12:] == [f"fv{j}" for j in range(1, 7)] + [f"fc{j}" for j in range(1, 7)]
    np.testing.assert_allclose(sm0.predict(dv), sm.predict(dv), atol=1e-8)
    parts = decompose(model, sm0, dv)
    np.testing.assert_allclose(sum(parts.values()), sm0.predict(dv), atol=1e-9)
    im0 = ImprovedModel(model, base0, coulomb_eps=EPS, load_eps=LOAD_EPS).fit(d)
    np.testing.assert_allclose(im0.predict(dv), im.predict(dv), atol=1e-6)


# -- honest stage-2 uncertainties on processed data ---------------------------------------------
def processed(model, tr: Truth, seed: int, *, sigma_m: float, sigma_j: float,
              rate: float = 100.0, duration: float = 10.0):
    """Raw synthetic recording (white sensor noise on tau_m and tau_j, linear reducer law) through
    the real processing chain (identify.estimation.processing.process defaults: 20 smoothing passes,
    10 Hz zero-phase Butterworth, differentiated encoder): the noise is then serially
    correlated, and the noisy measured tau_r is a stage-2 regressor."""
    from identify.estimation.processing import process
    from identify.backend.recording import Recording
    d, _ = synth(model, tr, seed=seed, rate=rate, duration=duration, sigma_m=sigma_m,
                 sigma_j=sigma_j)
    rec = Recording(t=d.t, q=d.q, rate_hz=rate, joint_names=d.joint_names, tau_j=d.tau_j,
                    tau_m=d.tau_m)
    return process(rec)


def _z_over_seeds(model, base, tr, seeds, **kw):
    zs, fits = [], []
    for seed in seeds:
        d = processed(model, tr, seed, **kw)
        im = ImprovedModel(model, base, coulomb_eps=EPS, load_eps=LOAD_EPS,
                           variants=("linear",)).fit(d)
        zs.append((im.stage2_.a - tr.a()) / im.stage2_.a_std)
        fits.append(im)
    return np.array(zs), fits                                     # (seeds, n, 5)


def test_stage2_coverage_on_processed_data(model, base):
    """a1..a4 within +-3 sigma of the truth over seeds on filtered/smoothed data with noise in
    both torques. Before the fix (sigma^2 (J^T J)^-1 as if samples were independent) the std
    was far too small here: coverage 58 %, mean z^2 ~100 (measured on the old code)."""
    tr = drive_truth()
    z, fits = _z_over_seeds(model, base, tr, range(100, 108), sigma_m=0.2, sigma_j=0.1)
    for im in fits:
        s2 = im.stage2_
        ok = np.array([j.xi_identified for j in s2.joints])
        assert ok[1:5].all() and not ok[5]       # joint 6: ~1e-3 N*m through its sensor
        # the processed residuals are serially correlated: several samples per independent one
        assert np.all(np.array([j.tau_int[1:] for j in s2.joints]) > 3.0)
        # taudd_r of the processed sensor torque is mostly noise at this noise level: a5 is
        # reported not identifiable (std NaN) and flagged, not given a falsely small std
        dom = np.array([j.noise_dominated for j in s2.joints])
        assert dom[:, -1].all() and not dom[:, 1:4].any()
        assert np.isnan(s2.a_std[:, 4]).all() and s2.a_poorly_excited[:, 4].all()
    za = z[:, :, :4]                      # includes joint 6's a2..a4 (xi not identified there)
    fin = np.isfinite(za)
    assert fin.mean() > 0.9
    cover = np.mean(np.abs(za[fin]) <= 3.0)
    assert cover >= 0.9, cover
    assert 0.3 < np.mean(za[fin] ** 2) < 2.0, np.mean(za[fin] ** 2)    # honest, not inflated


def test_stage2_coverage_with_identifiable_compliance(model, base):
    """Soft joints and a quiet torque sensor: taudd_r is signal, a5 gets a finite std, and
    a1..a5 are covered (the errors-in-variables bias of the compliance column is in the std)."""
    tr = drive_truth(compliance_scale=0.02)
    z, fits = _z_over_seeds(model, base, tr, range(200, 208), sigma_m=0.2, sigma_j=0.003)
    dom = np.array([[j.noise_dominated for j in im.stage2_.joints] for im in fits])
    assert not dom[:, :5, :4].any()
    assert dom[:, :5, 4].mean() <= 0.1            # a5 identifiable on (almost) every joint
    z = z[:, :5]
    assert np.isfinite(z[:, :, :4]).all() and np.isfinite(z[:, :, 4]).mean() >= 0.9
    fin = np.isfinite(z)
    assert np.mean(np.abs(z[fin]) <= 3.0) >= 0.9, np.mean(np.abs(z[fin]) <= 3.0)
    z5 = z[:, :, 4][np.isfinite(z[:, :, 4])]
    assert np.mean(np.abs(z5) <= 3.0) >= 0.9, z5
    assert 0.3 < np.mean(z[fin] ** 2) < 2.0, np.mean(z[fin] ** 2)


def test_eiv_bias_matches_monte_carlo():
    """Independent truth for the errors-in-variables bias: y = b x + c + e with x measured with
    noise u; the classic attenuation E[b_hat] - b = -b var(u) / (var(x) + var(u)) and the
    estimate of joint_models._eiv_bias agree with the Monte-Carlo mean error."""
    from identify.estimation.stage2 import errors_in_variables_bias
    rng = np.random.default_rng(7)
    N, reps, b, c = 400, 300, 2.0, 0.5
    err, est = [], []
    for _ in range(reps):
        x = rng.standard_normal(N)
        u = 0.5 * rng.standard_normal(N)
        y = b * x + c + 0.1 * rng.standard_normal(N)
        J = np.column_stack([x + u, np.ones(N)])
        th, *_ = np.linalg.lstsq(J, y, rcond=None)
        bias, dom = errors_in_variables_bias(J, np.column_stack([u, np.zeros(N)]),
                                             lambda z: th[0] * u)
        assert not dom.any()
        err.append(th - [b, c])
        est.append(bias)
    err, est = np.mean(err, axis=0), np.mean(est, axis=0)
    assert abs(err[0] - (-b * 0.25 / 1.25)) < 0.02              # attenuation -0.4
    np.testing.assert_allclose(est[0], err[0], atol=0.02)
    assert abs(est[1]) < 0.02 and abs(err[1]) < 0.02


def test_poorly_excited_flags(model, base):
    tr = drive_truth()
    tr.f_mc[:] = 0.0                              # a2 = 0: its sign is not determined
    d = processed(model, tr, 300, sigma_m=0.2, sigma_j=0.1)
    im = ImprovedModel(model, base, coulomb_eps=EPS, load_eps=LOAD_EPS).fit(d)
    for res in im.stage2_all_.values():
        flags = res.poorly_excited
        with np.errstate(invalid="ignore"):
            np.testing.assert_array_equal(flags, ~(res.std <= np.abs(res.params)))
    s2 = im.stage2_all_["linear"]                  # the law the data were generated with
    ok = np.array([j.xi_identified for j in s2.joints])
    assert ok[1:5].all()
    # rotor inertia well excited (where xi is not identified, c absorbs xi tau'_r and its std
    # includes the largest plausible absorption)
    assert not s2.poorly_excited[ok, s2.names.index("J_m")].any()
    assert s2.a_poorly_excited[:, 4].all()          # noise-dominated compliance
    assert s2.a_poorly_excited[:, 1].sum() >= 3     # a2 = 0 on every joint
    assert "joint1.J_m/K" in s2.poorly_excited_names
    assert "?" in s2.table()
    with pytest.raises(ValueError, match="serial"):
        ImprovedModel(model, base, serial="yes").fit(d)


def test_serial_correction_leaves_independent_samples_alone(model, base):
    """White noise on unfiltered data: autocorrelation times ~1 and the corrected std within
    ~30 % of the independent-sample one; on processed data the correction is several-fold."""
    tr = drive_truth(compliance_scale=0.02)
    d, _ = synth(model, tr, seed=11, sigma_m=0.05)
    kw = dict(coulomb_eps=EPS, load_eps=LOAD_EPS, variants=("linear",), errors_in_variables=False)
    auto = ImprovedModel(model, base, **kw).fit(d).stage2_
    plain = ImprovedModel(model, base, serial=None, **kw).fit(d).stage2_
    ok = np.array([j.xi_identified for j in auto.joints])
    tau = np.array([j.tau_int for j in auto.joints])[ok]
    assert 0.8 < np.median(tau) < 1.5 and np.all((tau >= 1.0) & (tau < 3.0)), tau
    assert np.all(np.array([j.tau_int for j in plain.joints])[ok] == 1.0)
    ratio = auto.std[ok] / plain.std[ok]
    assert 0.8 < np.median(ratio) < 1.3 and np.all((ratio > 0.5) & (ratio < 2.0)), ratio
    np.testing.assert_array_equal(auto.params, plain.params)       # estimates unchanged
    dp = processed(model, drive_truth(), 100, sigma_m=0.2, sigma_j=0.0)
    a = ImprovedModel(model, base, **kw).fit(dp).stage2_
    p = ImprovedModel(model, base, serial=None, **kw).fit(dp).stage2_
    ok = np.array([j.xi_identified for j in a.joints])
    assert np.median(a.std[ok] / p.std[ok]) > 2.0


# -- parallel filtering (ProcessingSettings.filter_regressor) ------------------------------------
def _raw_recording(model, tr: Truth, seed: int, periods: int = 2, rate: float = 100.0,
                   variant: str = "linear"):
    """A raw recording at the paper's 100 Hz of the joint model with HARD sign(qd) Coulomb
    friction on both sides (no compliance): tau_r = W p + f_lc sign + f_lv qd, tau'_m =
    tau'_r + f_mc sign + f_mv qd + J'_m qdd with tau'_r = tau_r / (1 - xi) ("linear") or
    tau_r / (1 - xi sign(tau_r) tanh(qd / LOAD_EPS)) ("opposing", the closed form of
    tau_r = tau'_r - xi |tau'_r| s); sensor noise 0.02 / 0.05 N*m, encoder quantisation.
    Returned unprocessed, for identify.estimation.processing.process."""
    from identify.backend.recording import Recording
    traj = sines(model.n, seed)
    t = np.arange(int(round(10.0 * periods * rate))) / rate
    q, qd, qdd = traj(t)
    sgn = np.sign(qd)
    tau_r = model.inverse_dynamics(q, qd, qdd) + tr.f_lc * sgn + tr.f_lv * qd
    if variant == "linear":
        tau_rp = tau_r / (1 - tr.xi)
    else:
        tau_rp = tau_r / (1 - tr.xi * np.sign(tau_r) * np.tanh(qd / LOAD_EPS))
    tau_m = tau_rp + tr.f_mc * sgn + tr.f_mv * qd + tr.J_m * qdd
    rng = np.random.default_rng(seed)
    enc = 2 * np.pi / 2 ** 19
    return Recording(t=t, q=np.round(q / enc) * enc, rate_hz=rate,
                     joint_names=list(model.joint_names),
                     tau_j=tau_r + 0.02 * rng.standard_normal(q.shape),
                     tau_m=tau_m + 0.05 * rng.standard_normal(q.shape))


def test_parallel_filtering_unbiases_link_and_motor_friction(model, base):
    """Data through process() (10 Hz Butterworth + 20 smoothing passes): with the Coulomb columns
    filtered like the torques (default), stage-1 link friction, stage-2 motor friction and the
    simplified model's lumped Coulomb friction are within 3 sigma of the truth; without, the
    link Coulomb friction is 4-7 % low and viscous 25-100 % high, all beyond 6 sigma -- what the
    twin showed."""
    from identify.estimation.design import coulomb_column, design_from, design_matrix
    from identify.estimation.processing import ProcessingSettings, filter_columns, process
    tr = drive_truth()
    rec = _raw_recording(model, tr, seed=61)
    res = {}
    for on in (True, False):
        # every sample fitted (reversal_speed_rad_s=None): leaving the reversals out would
        # also remove most of the smeared-step bias this test demonstrates
        d = process(rec, ProcessingSettings(filter_regressor=on, reversal_speed_rad_s=None))
        im = ImprovedModel(model, base, coulomb_eps=0.0, compliance=False,
                           variants=("linear",)).fit(d)
        sm = SimplifiedModel(model, base, coulomb_eps=0.0).fit(d)
        nm = im.names1_
        ic = [nm.index(f"fc{j + 1}") for j in range(6)]
        iv = [nm.index(f"fv{j + 1}") for j in range(6)]
        fc_s = tr.f_lc / (1 - tr.xi) + tr.f_mc          # simplified: lumped Coulomb friction
        P, S = im.stage2_.params, im.stage2_.std
        res[on] = {"fc": (im.params_[ic] - tr.f_lc) / im.std_[ic],
                   "fv": (im.params_[iv] - tr.f_lv) / im.std_[iv],
                   "fc_rel": im.params_[ic] / tr.f_lc - 1, "fv_rel": im.params_[iv] / tr.f_lv - 1,
                   "f_mc": (P[:5, 1] - tr.f_mc[:5]) / S[:5, 1],
                   "f_mv": (P[:5, 2] - tr.f_mv[:5]) / S[:5, 2],
                   "sm_fc": (sm.params_[ic] - fc_s) / sm.std_[ic]}
        if on:
            # the models' design: the plain design with the Coulomb columns replaced by the
            # filtered sign(qd) of the full grid
            W = im.design(d)
            plain, _ = design_matrix(model, base, d.q, d.qd, d.qdd)
            col = filter_columns(np.sign(d.qd_full), d)
            np.testing.assert_array_equal(coulomb_column(d, 6), col)
            np.testing.assert_array_equal(W[:, np.arange(6), ic], col)
            keep = np.ones(W.shape[2], bool)
            keep[ic] = False
            np.testing.assert_allclose(W[..., keep], plain[..., keep], rtol=0, atol=1e-12)
            np.testing.assert_array_equal(design_from(model, base, d)[0], W)
    on, off = res[True], res[False]
    for key in ("fc", "fv", "f_mc", "f_mv"):
        assert np.all(np.abs(on[key]) < 3), (key, on[key])
    # the simplified model's lumped Coulomb "truth" f_lc / (1 - xi) + f_mc is an approximation
    # (the reducer loss is not a constant Coulomb term); joint 4 (excluded below for the same
    # reason) misses it by 5.5 sigma with the HAC std (issue 16), the others stay within 3
    assert np.all(np.abs(on["sm_fc"][[0, 1, 2, 4, 5]]) < 3), on["sm_fc"]
    assert np.all(np.abs(on["fc_rel"]) < 0.01), on["fc_rel"]
    # (beyond 6 sigma with the per-joint tau-inflated std; the HAC std of issue 16 sees part of
    # the smeared-step misfit as correlated residual and is wider, 3.2-4.2 sigma)
    assert np.all(off["fc"] < -3) and np.all(off["fv"] > 3), (off["fc"], off["fv"])
    assert np.all(off["fc_rel"] < -0.03) and np.all(off["fv_rel"] > 0.2)
    assert np.all(off["sm_fc"][[0, 1, 2, 4, 5]] < -2.5), off["sm_fc"]


def test_coulomb_column_without_chain_and_errors(model, base, noise_free):
    from identify.estimation.design import coulomb_column
    from identify.estimation.processing import ProcessingSettings, filter_columns, process
    tr, d, *_ = noise_free
    assert coulomb_column(d, 6) is None             # hand-built data: plain sign(qd) is used
    dp = process(_raw_recording(model, drive_truth(), seed=62, periods=1),
                 ProcessingSettings())
    # a smooth Coulomb law (coulomb_eps > 0) is filtered alike, and differs from the hard sign
    smooth = coulomb_column(dp, 6, 0.05)
    np.testing.assert_array_equal(smooth, filter_columns(np.tanh(dp.qd_full / 0.05), dp))
    assert np.max(np.abs(smooth - coulomb_column(dp, 6))) > 0.05
    broken = Processed(t=dp.t, q=dp.q, qd=dp.qd, qdd=dp.qdd, tau_j=dp.tau_j, tau_m=dp.tau_m,
                       rate_hz=dp.rate_hz, joint_names=dp.joint_names,
                       filter_chain=dp.filter_chain)
    with pytest.raises(ValueError, match="no qd_full"):
        SimplifiedModel(model, base).fit(broken)
    cut = Processed(t=dp.t[:-3], q=dp.q[:-3], qd=dp.qd[:-3], qdd=dp.qdd[:-3],
                    tau_j=dp.tau_j[:-3], tau_m=dp.tau_m[:-3], rate_hz=dp.rate_hz,
                    joint_names=dp.joint_names, filter_chain=dp.filter_chain, qd_full=dp.qd_full)
    with pytest.raises(ValueError, match="changed after processing"):
        ImprovedModel(model, base).fit(cut)


def test_parallel_filtering_of_the_opposing_reducer_friction(model, base):
    """The opposing reducer friction xi |tau'_r| s steps at every reversal like Coulomb friction;
    with its direction parallel-filtered (joint_models._gain) the stage-2 coefficients of the
    opposing law come out within 3 sigma and the residual is the filtered noise; with the sharp
    direction xi is biased by several sigma (and joint 1's is lost)."""
    from identify.estimation.processing import ProcessingSettings, process
    tr = drive_truth()
    rec = _raw_recording(model, tr, seed=71, variant="opposing")
    T = np.column_stack([tr.xi, tr.f_mc, tr.f_mv, tr.J_m])
    z = {}
    for on in (True, False):
        # every sample fitted (reversal_speed_rad_s=None): leaving the reversals out would
        # also remove most of the smeared-step bias this test demonstrates
        d = process(rec, ProcessingSettings(filter_regressor=on, reversal_speed_rad_s=None))
        im = ImprovedModel(model, base, coulomb_eps=0.0, compliance=False, load_eps=LOAD_EPS,
                           friction_term="opposing", variants=("opposing",)).fit(d)
        P, S = im.stage2_.params, im.stage2_.std
        z[on] = (P - T) / S
        if on:
            ok = [j.xi_identified for j in im.stage2_.joints]
            assert ok == [True] * 5 + [False]          # joint 6 carries ~no sensor torque
            np.testing.assert_allclose(P[:5, 0], tr.xi[:5], rtol=0.01)
            assert np.max(np.delete(im.stage2_.rms, 1)) < 0.05     # filtered noise ~0.025
    assert np.all(np.abs(z[True][np.isfinite(z[True])]) < 3), z[True]
    assert np.isnan(z[False][0, 0])                    # xi of joint 1 not identified
    assert np.all(np.abs(z[False][3:5, 0]) > 3), z[False]


def test_reducer_gain_law():
    """stage2.reducer_gain: without filtering exactly 1 / (1 - M xi); its derivative against
    central differences; the filtered affine + remainder split equals the law when the
    filtered and sharp directions coincide."""
    from identify.estimation.stage2 import reducer_gain
    rng = np.random.default_rng(0)
    m = np.tanh(rng.normal(0, 2, 200))
    m_f = np.clip(m + rng.normal(0, 0.2, 200), -1, 1)
    for M_f, M, xi in ((m_f[:, None], m[:, None], np.array([0.4])),
                       (np.column_stack([np.ones(200), m_f]), np.column_stack([np.ones(200), m]),
                        np.array([0.2, 0.3]))):
        h, dh = reducer_gain(M_f, xi, m)
        fd = np.column_stack([(reducer_gain(M_f, xi + e, m)[0]
                               - reducer_gain(M_f, xi - e, m)[0]) / 2e-6
                              for e in np.eye(xi.size) * 1e-6])
        np.testing.assert_allclose(dh, fd, rtol=1e-6, atol=1e-8)
        np.testing.assert_allclose(reducer_gain(M, xi, m)[0], 1 / (1 - M @ xi), rtol=1e-13)
        np.testing.assert_allclose(reducer_gain(M, xi)[0], 1 / (1 - M @ xi), rtol=1e-13)


def test_a_loaded_joint_keeps_its_loss_when_the_linear_start_is_uncertain(model, base,
                                                                           monkeypatch):
    """The linear start's std of b also grows with its misfit of a nonlinear (opposing,
    load-speed) loss; on a loaded joint that must not fix xi = 0 (the loss would be dropped
    and the joint's motor-torque residual grow to the loss itself). Simulated by making the
    start's criterion unmeetable: joints whose torque signal is >= XI_SNR_MIN x the noise keep
    their xi and a residual at the noise; the near-unloaded wrist joint does not."""
    import identify.estimation.stage2 as s2
    monkeypatch.setattr(s2, "XI_REL_STD_MAX", 0.0)
    tr = drive_truth(compliance_scale=0.02)
    d, _ = synth(model, tr, seed=21, variant="opposing", sigma_m=0.05, sigma_j=0.05)
    im = ImprovedModel(model, base, friction_term="opposing", coulomb_eps=EPS,
                       load_eps=LOAD_EPS).fit(d)
    snr = np.sqrt(np.mean(d.tau_j ** 2, axis=0)) / 0.05
    loaded = snr >= 2 * s2.XI_SNR_MIN
    assert loaded.sum() >= 2 and not loaded[5]
    ok = np.array([j.xi_identified for j in im.stage2_.joints])
    assert ok[loaded].all() and not ok[5]
    # residual at the noise of tau_m and b x that of tau_r (sigma 0.05 both)
    assert np.all(im.stage2_.rms[loaded] < 0.05 * np.sqrt(1 + 1.6 ** 2))
    xi = np.array([j.theta[0] for j in im.stage2_.joints])
    np.testing.assert_allclose(xi[loaded], np.asarray(tr.xi)[loaded], rtol=0.05)
    # without the signal-to-noise rule (the previous behaviour) their loss is dropped
    monkeypatch.setattr(s2, "XI_SNR_MIN", np.inf)
    old = ImprovedModel(model, base, friction_term="opposing", coulomb_eps=EPS,
                        load_eps=LOAD_EPS).fit(d)
    assert not any(j.xi_identified for j in old.stage2_.joints)
    assert np.all(old.stage2_.rms[loaded] > 3 * im.stage2_.rms[loaded])
