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

import numpy as np
import scipy.linalg as sla

from .estimators import (_dof_per_joint, _one_blas_thread, check_identifiable,
                         integrated_autocorr_time, lcurve_corner, stack_system)
from identify.model.friction import check_terms, column_names
from identify.model.spatial import pseudo_inertia

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


class ConsistentFit:
    """Physically consistent weighted least squares (see module docstring).

    Args:
        model: the RobotModel (uses model.n and model.parameter_names()).
        base: BaseParameters of the same model and terms (E maps full -> base).
        terms: extra joint-term columns after the 10n inertial ones (must equal base.terms).
        prior: (p_full,) prior full parameters (e.g. the URDF's CAD values with friction), or
            None.
        prior_weight: None (default) -> "closest to the prior among equally good fits" (two
            stages, see module doc); a number w -> penalized fit chi^2 + w * D(p).
        chi2_slack: effective-chi^2 slack of stage 2 (default 1.0).
        sigma: known per-joint noise std (n,) for the weighting; None -> two-step estimate.
        solver: cvxpy solver name (default "CLARABEL").
    Fitted attributes:
        params_ (p_full,), base_params_ (n_base,) = base.E @ params_, wls_base_params_ and
        wls_base_cov_ (the unconstrained weighted fit of the base parameters for comparison,
        covariance as :class:`~identify.estimation.estimators.WLS` with serial="auto"), tau_int_ (n,),
        sigma2_ (n,), residual_rms_ (n,), chi2_ and wls_chi2_ (weighted residual sums of squares
        of the consistent and the unconstrained fit), min_eig_ (n,) pseudo-inertia eigenvalues,
        status_ (solver status), names_.
    """

    def __init__(self, model, base, terms=("viscous", "coulomb"), prior=None,
                 prior_weight: float | None = None, sigma=None, solver: str = "CLARABEL",
                 chi2_slack: float = 1.0, estimator: str = "wls"):
        if estimator not in ("ols", "wls", "ridge"):
            raise ValueError(f"ConsistentFit estimator must be ols, wls or ridge, got {estimator!r}")
        self.estimator = estimator
        self.model = model
        self.base = base
        self.terms = check_terms(terms)
        if tuple(getattr(base, "terms", self.terms)) != self.terms:
            raise ValueError(f"ConsistentFit terms {list(self.terms)} differ from the base "
                             f"parameters' terms {list(base.terms)}")
        n = int(model.n)
        self.n = n
        self.p_full = 10 * n + len(self.terms) * n
        E = np.asarray(base.E, dtype=float)
        if E.shape[1] != self.p_full:
            raise ValueError(f"base.E has {E.shape[1]} columns, expected {self.p_full} "
                             f"(10*{n} inertial + {len(self.terms)}*{n} for terms {list(self.terms)})")
        if prior is not None:
            prior = np.asarray(prior, dtype=float)
            if prior.shape != (self.p_full,):
                raise ValueError(f"prior has shape {prior.shape}, expected ({self.p_full},)")
            if not np.all(np.isfinite(prior)):
                k = int(np.argmax(~np.isfinite(prior)))
                raise ValueError(f"prior has a non-finite value at index {k} "
                                 f"({self._names()[k]})")
        self.prior = prior
        if prior_weight is not None:
            if not prior_weight >= 0:
                raise ValueError(f"prior_weight must be >= 0, got {prior_weight!r}")
            prior_weight = float(prior_weight)
        self.prior_weight = prior_weight
        if not chi2_slack > 0:
            raise ValueError(f"chi2_slack must be > 0, got {chi2_slack!r}")
        self.chi2_slack = float(chi2_slack)
        self.sigma = sigma
        self.solver = solver

    def _names(self) -> list[str]:
        try:
            inertial = list(self.model.parameter_names())
        except AttributeError:
            inertial = [f"p{k + 1}" for k in range(10 * self.n)]
        return inertial + column_names(self.n, self.terms)

    # -- fitting ------------------------------------------------------------------------------
    @_one_blas_thread
    def fit(self, W_full, y, joint_names=None) -> "ConsistentFit":
        """W_full (N, n, p_full) full regressor (10n inertial columns, then the joint terms);
        y (N, n) torques [N*m]."""
        names = self._names()
        W_full = np.asarray(W_full, dtype=float)
        if W_full.ndim != 3 or W_full.shape[1:] != (self.n, self.p_full):
            raise ValueError(f"W_full has shape {W_full.shape}, expected (N, {self.n}, "
                             f"{self.p_full}) for {self.n} joints and terms {list(self.terms)}")
        _check_full_finite(W_full, names)
        y = np.asarray(y, dtype=float)
        if y.shape != W_full.shape[:2]:
            raise ValueError(f"y has shape {y.shape}, expected {W_full.shape[:2]} to match W_full "
                             f"{W_full.shape} (N samples, n joints, p parameters)")
        stack_system(W_full[:1], y[:1], None, joint_names)          # joint-name checks
        return self._fit(lambda: iter([(W_full, y)]))

    @_one_blas_thread
    def fit_blocks(self, blocks) -> "ConsistentFit":
        """The same fit from row blocks: `blocks()` -> iterator of (W_full (B, n, p_full),
        y (B, n)) in time order (called twice; long logs, identify.estimation.streaming)."""
        return self._fit(blocks)

    def _fit(self, blocks) -> "ConsistentFit":
        from .streaming import JointFactors
        names = self._names()
        idx = np.asarray(self.base.independent)
        base_names = list(getattr(self.base, "names", [f"b{k + 1}" for k in range(len(idx))]))
        n, nb = self.n, len(idx)
        fac = JointFactors(n, nb)
        for Wf, yb in blocks():
            Wf = np.asarray(Wf, dtype=float)
            if Wf.shape[1:] != (n, self.p_full):
                raise ValueError(f"W_full block has shape {Wf.shape}, expected (B, {n}, "
                                 f"{self.p_full})")
            _check_full_finite(Wf, names)
            fac.add(Wf[..., idx], yb)
        N = fac.N
        M = N * n
        dof = _dof_per_joint(N, n, nb)
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
        w = 1.0 / sig
        R, z, r2 = fac.combined(w)
        beta_u = sla.solve_triangular(R, z, check_finite=False)
        ewj = np.empty((N, n))                 # weighted residuals of the unconstrained fit
        k = 0
        for Wf, yb in blocks():
            B = Wf.shape[0]
            ewj[k:k + B] = (np.asarray(yb, float) - Wf[..., idx] @ beta_u) * w
            k += B
        tau = integrated_autocorr_time(ewj)          # as WLS(serial="auto")
        G = sum((tau[j] * np.sum(ewj[:, j] ** 2) / dof) * w[j] ** 2 * fac.gram(j)
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
        theta, status = self._solve(R @ np.asarray(self.base.E, dtype=float), z, M,
                                    float(np.mean(tau)), ridge=ridge)
        theta = self._project(theta)
        self.params_ = theta
        self.base_params_ = np.asarray(self.base.E) @ theta
        rss = fac.rss(self.base_params_)
        self.chi2_ = float(np.sum(rss * w ** 2))
        self.sigma2_ = rss / dof
        self.residual_rms_ = np.sqrt(rss / N)
        self.min_eig_ = consistency_report(theta, self.n, self.terms)["min_eig"]
        self.status_ = status
        self.names_ = names
        return self

    def _theta(self):
        """cvxpy expression of the full parameter vector built from PSD pseudo-inertias and the
        (sign-constrained) joint-term coefficients."""
        import cvxpy as cp

        n = self.n
        parts = []
        for _ in range(n):
            J = cp.Variable((4, 4), PSD=True)
            S00, S11, S22 = J[0, 0], J[1, 1], J[2, 2]
            parts += [J[3, 3], J[0, 3], J[1, 3], J[2, 3],
                      S11 + S22, -J[0, 1], S00 + S22, -J[0, 2], -J[1, 2], S00 + S11]
        for t in self.terms:
            parts.append(cp.Variable(n, nonneg=t in NONNEGATIVE_TERMS))
        return cp.hstack(parts)

    def _prior_scale(self, prior: np.ndarray) -> np.ndarray:
        n = self.n
        c = np.concatenate([np.tile(_FLOOR, n), np.full(len(self.terms) * n, _FLOOR_JOINT)])
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

    def _solve(self, RE: np.ndarray, z: np.ndarray, n_rows: int, tau_mean: float = 1.0,
               ridge=None):
        """Minimize over consistent p: ||RE p - z||^2 (= chi^2 - const) [+ prior terms]
        [+ lambda ||D E (p - prior)||^2 with ridge = (lambda, D)]."""
        import cvxpy as cp

        # scale the whole objective by s^2 = 1/M (argmin unchanged): the weighted residual mean
        # square is O(1); the prior term is scaled alike, so weights keep their chi^2 meaning
        s = 1.0 / np.sqrt(n_rows)
        closest = self.prior is not None and self.prior_weight is None and ridge is None
        prior = self.prior if self.prior is not None else np.zeros(self.p_full)
        c = self._prior_scale(prior)
        w = 1e-9 if (self.prior is None or closest or ridge is not None) else self.prior_weight
        theta = self._theta()
        obj = cp.sum_squares((s * RE) @ theta - s * z)
        if ridge is not None:
            lam, D = ridge
            DE = D[:, None] * np.asarray(self.base.E, dtype=float)
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
        bound = d1 + self.chi2_slack * tau_mean
        theta2 = self._theta()
        s2 = 1.0 / np.sqrt(bound)                     # constraint scaled to ||.||^2 <= 1
        cons = [cp.sum_squares((s2 * RE) @ theta2 - s2 * z) <= 1.0]
        obj2 = cp.sum_squares(cp.multiply(1.0 / c, theta2 - prior))
        return self._run(cp.Problem(cp.Minimize(obj2), cons), theta2)

    def _project(self, theta: np.ndarray) -> np.ndarray:
        theta = theta.copy()
        n = self.n
        for i in range(n):
            J = pseudo_inertia(theta[10 * i:10 * i + 10])
            lam, V = np.linalg.eigh(J)
            if lam[0] < 0:
                J = (V * np.clip(lam, 0.0, None)) @ V.T
                theta[10 * i:10 * i + 10] = params_from_pseudo_inertia(J)
        for k, t in enumerate(self.terms):
            if t in NONNEGATIVE_TERMS:
                sl = slice(10 * n + k * n, 10 * n + (k + 1) * n)
                theta[sl] = np.clip(theta[sl], 0.0, None)
        return theta

    def predict(self, W_full) -> np.ndarray:
        """W_full (N, n, p_full) -> predicted torques (N, n) [N*m]."""
        W_full = np.asarray(W_full, dtype=float)
        if W_full.shape[-1] != self.p_full:
            raise ValueError(f"W_full has {W_full.shape[-1]} columns, expected {self.p_full}")
        return W_full @ self.params_


def _check_full_finite(W_full: np.ndarray, names) -> None:
    bad = ~np.isfinite(W_full)
    if bad.any():
        i, j, k = np.unravel_index(int(np.argmax(bad)), W_full.shape)
        raise ValueError(f"W_full (regressor): non-finite value at sample {i}, joint {j}, "
                         f"parameter column {k} ({names[k]})")
