"""Physically consistent identification: full standard parameters that fit the data and are
physically realizable.

Method (semidefinite program, cvxpy + Clarabel). The decision variables are, per link, the 4x4
pseudo-inertia J_i (a PSD matrix variable) and the extra joint-term coefficients (viscous,
Coulomb, armature constrained >= 0; offsets free). The standard 10-vector of a link is a linear
function of J_i:

    J = [[S, h], [h^T, m]],  S = 0.5 tr(Ibar) 1 - Ibar  (second moment of the mass about the frame
    origin)  =>  m = J33, h = J[:3, 3], Ibar = tr(S) 1 - S.

J_i PSD is the full set of physical-consistency conditions (m >= 0, inertia PSD and the triangle
inequalities, centre of mass inside the body's inertia ellipsoid); Wensing et al. 2017.

Objective. With W~, y~ the rows weighted per joint by 1/sigma_j (two-step, like
:class:`~identify.estimation.estimators.WLS`; sigma_j from an OLS on the base columns unless given), the
data term ||W~ p - y~||^2 (a chi^2) depends only on the base parameters E p. It is compressed
exactly through the QR factor of the weighted base regressor, [W~_b | y~] = Q [[R, z], [0, r]],
so ||W~ p - y~||^2 = ||R E p - z||^2 + r^2: the SDP size does not depend on the number of samples
(no decimation needed; the only O(N) work is the QR).

Prior ("closest to a prior", e.g. the URDF's CAD values). Distances to the prior are measured as
D(p) = sum_k ((p_k - prior_k) / c_k)^2 with c_k = max(|prior_k|, floor of its kind) (floors:
0.01 kg, 1e-3 kg*m, 1e-4 kg*m^2, 0.01 for joint terms), i.e. relative deviations.

* prior given, prior_weight None (default): two SDPs. Stage 1 minimizes chi^2 under the
  constraints (chi^2_c); stage 2 minimizes D(p) subject to the constraints and
  chi^2 <= chi^2_c + chi2_slack * tau (tau: the mean integrated autocorrelation time of the
  weighted residuals, so the slack is chi2_slack units of *effective* chi^2; default 1). Among the
  physically consistent parameters that fit the data as well as statistically possible, it
  returns the ones closest to the prior: the prior fills in exactly the directions the data
  cannot see (non-base combinations), while the identifiable ones move by at most about one
  standard deviation.
* prior given, prior_weight = w: one SDP minimizing chi^2 + w * D(p) (a Gaussian prior with
  relative std 1/sqrt(w); strong priors bias identified parameters -- use with care).
* no prior: chi^2 + 1e-9 * D(p) with prior 0, i.e. the best consistent fit, the vanishing
  regularization only making the solution unique.

Estimator (``estimator``, the scenario's ``identification.estimator``): "wls" weights joint j by
1/sigma_j as above; "ols" uses one weight for all joints (the pooled residual std, so the chi^2
scale is unchanged); "ridge" uses the WLS weights and adds lambda ||D E (p - prior)||^2 to the
data term (D: column norms of the weighted base regressor, lambda at the L-curve corner of that
system as in :class:`~identify.estimation.estimators.Ridge`) and then returns the minimizer of
that penalized objective (one SDP; the prior's vanishing 1e-9 weight only fixes the directions
the data cannot see). On a well-conditioned problem lambda is tiny and ridge equals wls; on a
poorly excited one it pulls the identified combinations towards the prior.

After solving, each J_i is projected onto the PSD cone (negative eigenvalues of order the solver
tolerance clipped to 0) and constrained joint terms clipped at 0, so the returned parameters
satisfy the constraints exactly.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from identify.common.blas import single_thread_blas
from identify.common.estimator import EstimatorMixin, check_is_fitted
from identify.model.friction import check_terms, column_names
from identify.model.spatial import pseudo_inertia

from .estimators import (apply_mask, check_identifiable, dof_per_joint,
                         integrated_autocorr_time, lcurve_corner, stack_system)

NONNEGATIVE_TERMS = ("viscous", "coulomb", "armature")
_FLOOR = np.array([1e-2, 1e-3, 1e-3, 1e-3, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4, 1e-4])
_FLOOR_JOINT = 1e-2


def params_from_pseudo_inertia(J: np.ndarray) -> np.ndarray:
    """Inverse of :func:`identify.model.spatial.pseudo_inertia`: 4x4 J -> standard 10-vector
    [m, mcx, mcy, mcz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz] (inertia about the frame origin)."""
    J = np.asarray(J, dtype=float)
    S = J[:3, :3]
    I = np.trace(S) * np.eye(3) - S
    return np.array([J[3, 3], J[0, 3], J[1, 3], J[2, 3],
                     I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])


def consistency_report(params: np.ndarray, n: int, terms=()) -> dict:
    """Check a full parameter vector (10n inertial + extra joint terms).

    Returns dict with min_eig (n,) smallest pseudo-inertia eigenvalue per link [kg*m^2 / kg mix],
    and term_min {term: min coefficient} for the non-negative terms.
    """
    params = np.asarray(params, dtype=float)
    terms = check_terms(terms)
    if params.shape != (10 * n + len(terms) * n,):
        raise ValueError(f"parameter vector has shape {params.shape}, expected "
                         f"({10 * n + len(terms) * n},) for {n} links and terms {list(terms)}")
    mins = np.array([np.linalg.eigvalsh(pseudo_inertia(params[10 * i:10 * i + 10]))[0]
                     for i in range(n)])
    term_min = {t: float(np.min(params[10 * n + k * n:10 * n + (k + 1) * n]))
                for k, t in enumerate(terms) if t in NONNEGATIVE_TERMS}
    return {"min_eig": mins, "term_min": term_min}


def is_physically_consistent(params: np.ndarray, n: int, terms=(), tol: float = 1e-9) -> bool:
    """True if every link's pseudo-inertia is PSD (eigenvalues >= -tol) and the non-negative
    joint terms are >= -tol."""
    r = consistency_report(params, n, terms)
    return bool(np.all(r["min_eig"] >= -tol) and all(v >= -tol for v in r["term_min"].values()))


@dataclass(frozen=True)
class _Setup:
    """ConsistentFit's settings checked against each other and the model (made by ``fit``)."""
    n: int                          # joints (links)
    p_full: int                     # 10 n inertial + len(terms) n joint-term columns
    terms: tuple
    E: np.ndarray                   # (n_base, p_full) full -> base parameters
    prior: np.ndarray | None        # (p_full,)
    prior_weight: float | None
    chi2_slack: float
    names: list                     # p_full column names


class ConsistentFit(EstimatorMixin):
    """Physically consistent weighted least squares (see module docstring).

    Args (stored as given, checked by :meth:`fit`):
        model: the RobotModel (uses model.n and model.parameter_names()).
        base: BaseParameters of the same model and terms (E maps full -> base).
        terms: extra joint-term columns after the 10n inertial ones (must equal base.terms).
        prior: (p_full,) prior full parameters (e.g. the URDF's CAD values with friction), or
            None.
        prior_weight: None (default) -> "closest to the prior among equally good fits" (two
            stages, see module doc); a number w -> penalized fit chi^2 + w * D(p).
        sigma: known per-joint noise std (n,) for the weighting; None -> two-step estimate.
        solver: cvxpy solver name (default "CLARABEL").
        chi2_slack: effective-chi^2 slack of stage 2 (default 1.0).
        estimator: "wls" (default), "ols" or "ridge" (module doc).
    Fitted attributes:
        params_ (p_full,), base_params_ (n_base,) = base.E @ params_, wls_base_params_ and
        wls_base_cov_ (the unconstrained weighted fit of the base parameters for comparison,
        covariance as :class:`~identify.estimation.estimators.WLS` with serial="auto"),
        tau_int_ (n,), sigma2_ (n,), residual_rms_ (n,), chi2_ and wls_chi2_ (weighted residual sums of squares
        of the consistent and the unconstrained fit), min_eig_ (n,) pseudo-inertia eigenvalues,
        weights_ (n,), ridge_lambda_ (None unless estimator="ridge"), status_ (solver status),
        names_, n_joints_.
    """

    def __init__(self, model, base, terms=("viscous", "coulomb"), prior=None,
                 prior_weight: float | None = None, sigma=None, solver: str = "CLARABEL",
                 chi2_slack: float = 1.0, estimator: str = "wls"):
        self.model = model
        self.base = base
        self.terms = terms
        self.prior = prior
        self.prior_weight = prior_weight
        self.sigma = sigma
        self.solver = solver
        self.chi2_slack = chi2_slack
        self.estimator = estimator

    def _setup(self, names=None) -> _Setup:
        """The settings checked (ValueError naming the setting); `names`: p_full column names
        to use instead of the model's."""
        if self.estimator not in ("ols", "wls", "ridge"):
            raise ValueError(f"ConsistentFit estimator must be ols, wls or ridge, got "
                             f"{self.estimator!r}")
        terms = check_terms(self.terms)
        if tuple(getattr(self.base, "terms", terms)) != terms:
            raise ValueError(f"ConsistentFit terms {list(terms)} differ from the base "
                             f"parameters' terms {list(self.base.terms)}")
        n = int(self.model.n)
        p_full = 10 * n + len(terms) * n
        E = np.asarray(self.base.E, dtype=float)
        if E.shape[1] != p_full:
            raise ValueError(f"base.E has {E.shape[1]} columns, expected {p_full} "
                             f"(10*{n} inertial + {len(terms)}*{n} for terms {list(terms)})")
        if names is None:
            try:
                inertial = list(self.model.parameter_names())
            except AttributeError:
                inertial = [f"p{k + 1}" for k in range(10 * n)]
            names = inertial + column_names(n, terms)
        names = [str(x) for x in names]
        if len(names) != p_full:
            raise ValueError(f"{len(names)} parameter names given for {p_full} columns")
        prior = self.prior
        if prior is not None:
            prior = np.asarray(prior, dtype=float)
            if prior.shape != (p_full,):
                raise ValueError(f"prior has shape {prior.shape}, expected ({p_full},)")
            if not np.all(np.isfinite(prior)):
                k = int(np.argmax(~np.isfinite(prior)))
                raise ValueError(f"prior has a non-finite value at index {k} ({names[k]})")
        w = self.prior_weight
        if w is not None:
            if not w >= 0:
                raise ValueError(f"prior_weight must be >= 0, got {w!r}")
            w = float(w)
        if not self.chi2_slack > 0:
            raise ValueError(f"chi2_slack must be > 0, got {self.chi2_slack!r}")
        return _Setup(n, p_full, terms, E, prior, w, float(self.chi2_slack), names)

    # -- fitting ------------------------------------------------------------------------------
    @single_thread_blas()
    def fit(self, W, y, *, mask=None, names=None, joint_names=None) -> "ConsistentFit":
        """W (N, n, p_full) full regressor (10n inertial columns, then the joint terms);
        y (N, n) torques [N*m]; `mask` (N, n) bool: samples fitted (None: all,
        :func:`~identify.estimation.estimators.apply_mask`); `names`: p_full column names
        (default: the model's); `joint_names` (messages). Returns self."""
        st = self._setup(names)
        W = np.asarray(W, dtype=float)
        if W.ndim != 3 or W.shape[1:] != (st.n, st.p_full):
            raise ValueError(f"W_full has shape {W.shape}, expected (N, {st.n}, "
                             f"{st.p_full}) for {st.n} joints and terms {list(st.terms)}")
        _check_full_finite(W, st.names)
        y = np.asarray(y, dtype=float)
        if y.shape != W.shape[:2]:
            raise ValueError(f"y has shape {y.shape}, expected {W.shape[:2]} to match W_full "
                             f"{W.shape} (N samples, n joints, p parameters)")
        stack_system(W[:1], y[:1], None, joint_names)          # joint-name checks
        W, y, counts = apply_mask(W, y, mask)
        return self._fit(st, lambda: iter([(W, y)]), counts)

    @single_thread_blas()
    def fit_blocks(self, blocks, *, names=None) -> "ConsistentFit":
        """The same fit from row blocks: `blocks()` -> iterator of (W_full (B, n, p_full),
        y (B, n)) in time order (called twice; long logs, identify.estimation.streaming)."""
        return self._fit(self._setup(names), blocks)

    def _weights(self, st: _Setup, fac, base_names, dof, counts) -> np.ndarray:
        """Per-joint weights 1/sigma_j (n,) of the fit: two-step (sigma from an unconstrained
        fit of the base columns) unless `sigma` is given, floored; one pooled weight for
        estimator="ols"."""
        n, nb = st.n, fac.p
        N = fac.N
        M = N * n if counts is None else int(np.sum(counts))
        if self.sigma is None:
            R1, z1, _ = fac.combined(np.ones(n))
            check_identifiable(R1 if M >= nb else np.zeros((M, nb)), base_names, R=R1)
            p1 = sla.solve_triangular(R1, z1, check_finite=False)
            sig = np.sqrt(fac.rss(p1) / dof)
        else:
            sig = np.broadcast_to(np.asarray(self.sigma, dtype=float), (n,)).copy()
            if np.any(~np.isfinite(sig)) or np.any(sig <= 0):
                raise ValueError(f"sigma must be finite and > 0 per joint, got {sig}")
        # floor: 10 ppm of the joint's torque RMS (noise-free data would give weights ~1e12 and
        # an SDP too badly scaled to solve; no torque measurement is that precise)
        y_rms = np.sqrt(np.array([float(np.sum(R[:, nb] ** 2)) for R in fac.R]) / N)
        floor = np.where(y_rms > 0, 1e-5 * y_rms, 1.0)
        sig = np.maximum(sig, floor)
        if self.estimator == "ols":            # one weight for all joints: ordinary LS
            sig = np.full(n, float(np.sqrt(np.mean(sig ** 2))))
        return 1.0 / sig

    def _fit(self, st: _Setup, blocks, counts=None) -> "ConsistentFit":
        from .streaming import JointFactors
        idx = np.asarray(self.base.independent)
        base_names = list(getattr(self.base, "names", [f"b{k + 1}" for k in range(len(idx))]))
        n, nb = st.n, len(idx)
        fac = JointFactors(n, nb)
        for Wf, yb in blocks():
            Wf = np.asarray(Wf, dtype=float)
            if Wf.shape[1:] != (n, st.p_full):
                raise ValueError(f"W_full block has shape {Wf.shape}, expected (B, {n}, "
                                 f"{st.p_full})")
            _check_full_finite(Wf, st.names)
            fac.add(Wf[..., idx], yb)
        N = fac.N
        M = N * n if counts is None else int(np.sum(counts))
        dof = dof_per_joint(N if counts is None else counts, n, nb)
        w = self._weights(st, fac, base_names, dof, counts)
        R, z, r2 = fac.combined(w)
        beta_u = sla.solve_triangular(R, z, check_finite=False)
        ewj = np.empty((N, n))                 # weighted residuals of the unconstrained fit
        k = 0
        for Wf, yb in blocks():
            B = Wf.shape[0]
            ewj[k:k + B] = (np.asarray(yb, float) - Wf[..., idx] @ beta_u) * w
            k += B
        tau = integrated_autocorr_time(ewj)          # as WLS(serial="auto")
        dof_j = np.broadcast_to(dof, (n,))
        G = sum((tau[j] * np.sum(ewj[:, j] ** 2) / dof_j[j]) * w[j] ** 2 * fac.gram(j)
                for j in range(n))
        Rinv = sla.solve_triangular(R, np.eye(nb), check_finite=False)
        self.wls_base_params_ = beta_u
        P = Rinv @ Rinv.T                       # (A~^T A~)^-1
        self.wls_base_cov_ = P @ G @ P
        self.tau_int_ = tau
        self.wls_chi2_ = r2
        self.weights_ = w
        del ewj
        self.ridge_lambda_ = None
        ridge = None
        if self.estimator == "ridge":
            D = np.sqrt(np.sum(R ** 2, axis=0))       # column norms of the weighted rows
            D = np.where(D > 0, D, 1.0)
            U, s_, Vt = np.linalg.svd(R / D)
            keep = s_ > max(M, nb) * np.finfo(float).eps * s_[0]
            lam = lcurve_corner(s_[keep], (U.T @ z)[keep], r2)[0]
            self.ridge_lambda_ = float(lam)
            ridge = (lam, D)
        theta, status = self._solve(st, R @ st.E, z, M, float(np.mean(tau)), ridge=ridge)
        theta = self._project(st, theta)
        self.params_ = theta
        self.base_params_ = st.E @ theta
        rss = fac.rss(self.base_params_)
        self.chi2_ = float(np.sum(rss * w ** 2))
        self.sigma2_ = rss / dof
        self.residual_rms_ = np.sqrt(rss / (N if counts is None else np.maximum(counts, 1)))
        self.min_eig_ = consistency_report(theta, n, st.terms)["min_eig"]
        self.status_ = status
        self.names_ = st.names
        self.n_joints_ = n
        return self

    @staticmethod
    def _theta(st: _Setup):
        """cvxpy expression of the full parameter vector built from PSD pseudo-inertias and the
        (sign-constrained) joint-term coefficients."""
        import cvxpy as cp

        n = st.n
        parts = []
        for _ in range(n):
            J = cp.Variable((4, 4), PSD=True)
            S00, S11, S22 = J[0, 0], J[1, 1], J[2, 2]
            parts += [J[3, 3], J[0, 3], J[1, 3], J[2, 3],
                      S11 + S22, -J[0, 1], S00 + S22, -J[0, 2], -J[1, 2], S00 + S11]
        for t in st.terms:
            parts.append(cp.Variable(n, nonneg=t in NONNEGATIVE_TERMS))
        return cp.hstack(parts)

    @staticmethod
    def _prior_scale(st: _Setup, prior: np.ndarray) -> np.ndarray:
        n = st.n
        c = np.concatenate([np.tile(_FLOOR, n), np.full(len(st.terms) * n, _FLOOR_JOINT)])
        return np.maximum(np.abs(prior), c)

    def _run(self, prob, theta):
        import cvxpy as cp
        try:
            prob.solve(solver=self.solver)
        except cp.error.SolverError as exc:
            raise RuntimeError(f"physically consistent fit: solver {self.solver} failed ({exc})") \
                from exc
        if prob.status not in ("optimal", "optimal_inaccurate") or theta.value is None:
            raise RuntimeError(f"physically consistent fit: solver {self.solver} returned status "
                               f"{prob.status!r}")
        return np.asarray(theta.value, dtype=float), prob.status

    def _solve(self, st: _Setup, RE: np.ndarray, z: np.ndarray, n_rows: int,
               tau_mean: float = 1.0, ridge=None):
        """Minimize over consistent p: ||RE p - z||^2 (= chi^2 - const) [+ prior terms]
        [+ lambda ||D E (p - prior)||^2 with ridge = (lambda, D)]."""
        import cvxpy as cp

        # scale the whole objective by s^2 = 1/M (argmin unchanged): the weighted residual mean
        # square is O(1); the prior term is scaled alike, so weights keep their chi^2 meaning
        s = 1.0 / np.sqrt(n_rows)
        closest = st.prior is not None and st.prior_weight is None and ridge is None
        prior = st.prior if st.prior is not None else np.zeros(st.p_full)
        c = self._prior_scale(st, prior)
        w = 1e-9 if (st.prior is None or closest or ridge is not None) else st.prior_weight
        theta = self._theta(st)
        obj = cp.sum_squares((s * RE) @ theta - s * z)
        if ridge is not None:
            lam, D = ridge
            DE = D[:, None] * st.E
            obj = obj + cp.sum_squares((s * np.sqrt(lam) * DE) @ theta
                                       - s * np.sqrt(lam) * (DE @ prior))
        if w > 0:
            obj = obj + (w * s ** 2) * cp.sum_squares(cp.multiply(1.0 / c, theta - prior))
        th1, status = self._run(cp.Problem(cp.Minimize(obj)), theta)
        if not closest:
            return th1, status
        # stage 2: the parameters closest to the prior among those whose fit is within
        # chi2_slack effective chi^2 units (x the residuals' autocorrelation time) of stage 1
        d1 = float(np.sum((RE @ th1 - z) ** 2))
        bound = d1 + st.chi2_slack * tau_mean
        theta2 = self._theta(st)
        s2 = 1.0 / np.sqrt(bound)                     # constraint scaled to ||.||^2 <= 1
        cons = [cp.sum_squares((s2 * RE) @ theta2 - s2 * z) <= 1.0]
        obj2 = cp.sum_squares(cp.multiply(1.0 / c, theta2 - prior))
        return self._run(cp.Problem(cp.Minimize(obj2), cons), theta2)

    @staticmethod
    def _project(st: _Setup, theta: np.ndarray) -> np.ndarray:
        theta = theta.copy()
        n = st.n
        for i in range(n):
            J = pseudo_inertia(theta[10 * i:10 * i + 10])
            lam, V = np.linalg.eigh(J)
            if lam[0] < 0:
                J = (V * np.clip(lam, 0.0, None)) @ V.T
                theta[10 * i:10 * i + 10] = params_from_pseudo_inertia(J)
        for k, t in enumerate(st.terms):
            if t in NONNEGATIVE_TERMS:
                sl = slice(10 * n + k * n, 10 * n + (k + 1) * n)
                theta[sl] = np.clip(theta[sl], 0.0, None)
        return theta

    def predict(self, W_full) -> np.ndarray:
        """W_full (N, n, p_full) -> predicted torques (N, n) [N*m]."""
        check_is_fitted(self)
        W_full = np.asarray(W_full, dtype=float)
        if W_full.shape[-1] != self.params_.size:
            raise ValueError(f"W_full has {W_full.shape[-1]} columns, expected "
                             f"{self.params_.size}")
        return W_full @ self.params_


def _check_full_finite(W_full: np.ndarray, names) -> None:
    bad = ~np.isfinite(W_full)
    if bad.any():
        i, j, k = np.unravel_index(int(np.argmax(bad)), W_full.shape)
        raise ValueError(f"W_full (regressor): non-finite value at sample {i}, joint {j}, "
                         f"parameter column {k} ({names[k]})")
