"""Linear least-squares estimators with honest uncertainties (scikit-learn-like fit / predict).

Model: y = W p + e with W the stacked regressor. Inputs are either the per-sample stack
``W (N, n, p)``, ``y (N, n)`` (N samples in time order, n joints, p parameters) or a flat
``W (M, p)``, ``y (M,)`` (treated as one joint). Noise is zero-mean with a variance that may
differ between joints (sigma_j^2) but not between samples of one joint. Samples need not be
independent: low-pass filtering (identify.estimation.processing) makes the noise serially correlated, and
with the default ``serial="auto"`` the covariance of WLS is a kernel (Parzen)
heteroscedasticity- and autocorrelation-consistent sandwich of the per-sample scores
(:func:`_hac_sandwich`), with a bandwidth of three times the residuals' integrated
autocorrelation time (:func:`integrated_autocorr_time`); OLS multiplies each joint's residual
variance by that time (:func:`_joint_sandwich`) -- without a serial correction the reported std is several-fold
too small (about 10x for a 1 kHz twin recording filtered at 10 Hz, 3x at 100 Hz). The HAC
sandwich replaced (issue 16) a per-joint variance inflation by tau_j, which cut the
autocorrelation at its first negative lags: twice-differentiated encoder noise, low-passed, is
band-pass noise whose negative correlations lower the long-run variance, and the std came out
~1.2x too large (20 twin seeds: 80 % of the base parameters within 1 sigma, RMS z 0.81; with the
HAC sandwich 65 %, RMS z 1.07). ``serial=None`` gives the textbook independent-sample
covariance.

Estimators:
    OLS    -- Householder QR of W (never the normal equations). Covariance: sandwich
              (W^T W)^-1 W^T S W (W^T W)^-1 with S = diag(tau_j sigma_j^2) per joint, computed
              as R^-1 (Q^T S Q) R^-T; with one joint and tau = 1 it is sigma^2 (R^T R)^-1.
    WLS    -- the paper's two-step weighted least squares: OLS, per-joint residual variance
              sigma_j^2, then OLS on rows scaled by 1/sigma_j; covariance (R~^T R~)^-1 scaled by
              the weighted residual variance (~1) and tau_j per joint. Known sigma_j can be
              given instead.
    Ridge  -- min ||W~ p - y~||^2 + lambda ||D (p - p0)||^2 (W~, y~ weighted per joint like WLS
              when weighted=True; D = column norms of W~, so lambda is dimensionless), lambda at
              the corner (maximum curvature) of the L-curve (log residual norm, log solution
              norm); rank deficiency is allowed (that is what ridge is for).

Fitted attributes (p parameters, n joints): params_ (p,), cov_ (p, p), std_ (p,), rel_std_ (p,)
[%] = 100 std / |value|, sigma2_ (n,) per-joint residual variance (residual sum of squares over
N - p/n degrees of freedom), poorly_excited_ (p,) bool (std > |value|), residual_rms_ (n,),
names_ (p,), and predict(W) -> (N, n) (or (M,) for flat input).

Errors: fewer equations than parameters or a rank-deficient regressor (OLS, WLS) -> ValueError
naming the unidentifiable parameters; NaN/inf -> ValueError naming array, sample, joint and
parameter; mismatched shapes -> ValueError with both shapes.
"""
from __future__ import annotations

import math

import numpy as np
import scipy.linalg as sla

from identify.common.blas import single_thread_blas
from identify.common.estimator import EstimatorMixin, check_is_fitted, clone

__all__ = ["OLS", "WLS", "Ridge", "LinearFit", "make_estimator", "ESTIMATORS", "stack_system",
           "check_identifiable", "check_serial", "lcurve_corner", "integrated_autocorr_time",
           "dof_per_joint", "hac_lags", "parzen_window", "apply_mask", "qr_r", "HAC_FACTOR"]


# -- input handling -----------------------------------------------------------------------------
def _check_finite(x: np.ndarray, what: str, names, joint_names) -> None:
    bad = ~np.isfinite(x)
    if not bad.any():
        return
    idx = np.unravel_index(int(np.argmax(bad)), x.shape)
    parts = [f"sample {idx[0]}"]
    if len(idx) >= 2 and x.ndim >= 2 and not (what.startswith("W") and x.ndim == 2):
        j = idx[1]
        parts.append(f"joint {joint_names[j]}" if joint_names is not None else f"joint {j}")
    if what.startswith("W"):
        k = idx[-1]
        parts.append(f"parameter column {k} ({names[k]})" if names is not None else f"column {k}")
    raise ValueError(f"{what}: non-finite value {float(x[idx])} at " + ", ".join(parts)
                     + f" ({int(bad.sum())} non-finite in total)")


def stack_system(W, y, names=None, joint_names=None):
    """Validate and flatten a regression problem.

    Args:
        W: (N, n, p) or (M, p); y: (N, n) or (M,).
        names: p parameter names (default p1..pp); joint_names: n names (default 0..n-1).
    Returns:
        A (N*n, p) rows ordered sample-major, b (N*n,), N, n, names (list of p str).
    """
    W = np.asarray(W, dtype=float)
    y = np.asarray(y, dtype=float)
    if W.ndim == 3:
        N, n, p = W.shape
        if y.shape != (N, n):
            raise ValueError(f"y has shape {y.shape}, expected ({N}, {n}) to match W {W.shape} "
                             f"(N samples, n joints, p parameters)")
    elif W.ndim == 2:
        N, p = W.shape
        n = 1
        if y.shape != (N,):
            raise ValueError(f"y has shape {y.shape}, expected ({N},) to match W {W.shape}")
    else:
        raise ValueError(f"W must be (N, n, p) or (M, p), got shape {W.shape}")
    if names is None:
        names = [f"p{k + 1}" for k in range(p)]
    names = [str(s) for s in names]
    if len(names) != p:
        raise ValueError(f"{len(names)} parameter names given for {p} regressor columns")
    if joint_names is not None and len(joint_names) != n:
        raise ValueError(f"{len(joint_names)} joint names given for {n} joints")
    _check_finite(W, "W (regressor)", names, joint_names)
    _check_finite(y, "y (torque)", names, joint_names)
    return W.reshape(N * n, p), y.reshape(N * n), N, n, names


def _rank_and_null(s: np.ndarray, Vt: np.ndarray, M: int, p: int, rcond: float | None):
    tol = (rcond if rcond is not None else max(M, p) * np.finfo(float).eps) * (s[0] if s.size else 0)
    r = int(np.sum(s > tol))
    return r, Vt[r:].T


def _unidentifiable_message(names, null: np.ndarray, r: int, p: int, M: int) -> str:
    weight = np.sum(null ** 2, axis=1)
    involved = [names[k] for k in np.flatnonzero(weight > 1e-6)]
    head = (f"fewer equations ({M}) than parameters ({p})" if M < p
            else f"regressor is rank-deficient (rank {r} of {p} columns)")
    combos = []
    for v in null.T[:5]:
        big = np.argsort(-np.abs(v))[: min(4, p)]
        terms = [f"{v[k]:+.3g}*{names[k]}" for k in big if abs(v[k]) > 1e-3]
        combos.append(" ".join(terms))
    return (f"{head}: {p - r} parameter combination(s) cannot be identified; involved "
            f"parameters: {involved}. Null-space directions (data cannot see them): "
            + "; ".join(combos) + ". Use base parameters or better excitation.")


def check_identifiable(A: np.ndarray, names, rcond: float | None = None,
                       R: np.ndarray | None = None) -> None:
    """Raise ValueError naming the unidentifiable parameters if A (M, p) has rank < p.
    `R` (p, p), the triangular factor of A, may be passed to avoid recomputing it."""
    M, p = A.shape
    if M < p:
        _, s, Vt = np.linalg.svd(A, full_matrices=True)
        s = np.concatenate([s, np.zeros(p - s.size)])
        r, null = _rank_and_null(s, Vt, M, p, rcond)
        raise ValueError(_unidentifiable_message(names, null, r, p, M))
    if R is None:
        R = qr_r(A)[:p]
    _, s, Vt = np.linalg.svd(R)
    r, null = _rank_and_null(s, Vt, M, p, rcond)
    if r < p:
        raise ValueError(_unidentifiable_message(names, null, r, p, M))


def qr_r(A: np.ndarray, block: int = 2048) -> np.ndarray:
    """Triangular factor R (min(M, k), k) of the Householder QR of A (M, k), Q not formed.

    Tall-skinny QR: R factors of row blocks of `block` rows, stacked and factored again (same R up
    to row signs, about twice as fast as one LAPACK call on a tall matrix).
    """
    A = np.asarray(A, dtype=float)
    M, k = A.shape
    if M > 2 * block and block > k:
        parts = [np.linalg.qr(A[i:i + block], mode="r") for i in range(0, M, block)]
        A = np.vstack(parts)
    return np.linalg.qr(A, mode="r")


def _qr_solve(A: np.ndarray, b: np.ndarray, names=None, rcond: float | None = None):
    """QR of the augmented [A | b] (R only, no Q formed): returns p, R (p, p). With `names`,
    first checks identifiability (ValueError naming the unidentifiable parameters)."""
    p = A.shape[1]
    Rb = qr_r(np.column_stack([A, b]))
    R = Rb[:p, :p]
    z = Rb[:p, p]
    if names is not None:
        check_identifiable(A, names, rcond, R=R)
    return sla.solve_triangular(R, z, check_finite=False), R


def dof_per_joint(N, n: int, p: int):
    """Residual degrees of freedom per joint: N - p/n; N may be (n,) counts of fitted samples
    per joint (a sample mask), then the result is (n,)."""
    dof = np.asarray(N, dtype=float) - p / n
    if np.any(dof <= 0):
        raise ValueError(f"no residual degrees of freedom: {N} samples x {n} joints for {p} "
                         f"parameters; record more samples")
    return dof


def integrated_autocorr_time(e: np.ndarray) -> np.ndarray:
    """Integrated autocorrelation time of each column of `e` (N, n) [samples], >= 1.

    tau = 1 + 2 sum_k rho_k (rho_k: sample autocorrelation at lag k, from an FFT), the sum cut by
    an initial-positive-sequence rule (Geyer): it stops before the first lag pair
    rho_{2m-1} + rho_{2m} <= 0. White noise gives ~1; low-pass-filtered noise gives about the
    filter's correlation length. The variance of a sum of N correlated residuals is tau times
    that of N independent ones, so tau is the factor by which the independent-sample
    least-squares covariance understates the parameter variance (for regressors that vary slowly
    over tau samples, as an excitation trajectory does). Samples must be in time order.
    Cost O(N log N). Returns (n,) (or (1,) for 1-D input).
    """
    e = np.asarray(e, dtype=float)
    if e.ndim == 1:
        e = e[:, None]
    N = e.shape[0]
    x = e - e.mean(axis=0)
    f = np.fft.rfft(x, n=2 * N, axis=0)
    ac = np.fft.irfft(f * np.conj(f), n=2 * N, axis=0)[:N]
    c0 = ac[0]
    ok = c0 > 0
    rho = np.where(ok, ac / np.where(ok, c0, 1.0), 0.0)
    m = (N - 1) // 2
    if m < 1:
        return np.ones(e.shape[1])
    pairs = rho[1:2 * m + 1:2] + rho[2:2 * m + 2:2]            # (m, n): rho_1+rho_2, rho_3+rho_4..
    pos = pairs > 0
    K = np.where(pos.all(axis=0), m, np.argmin(pos, axis=0))   # number of positive pairs
    csum = np.vstack([np.zeros((1, e.shape[1])), np.cumsum(pairs, axis=0)])
    tau = 1.0 + 2.0 * csum[K, np.arange(e.shape[1])]
    return np.maximum(tau, 1.0)


def _joint_sandwich(A: np.ndarray, R: np.ndarray, N: int, n: int, var: np.ndarray) -> np.ndarray:
    """R^-1 (sum_j var_j Q_j^T Q_j) R^-T with Q = A R^-1 (orthonormal columns), Q_j the rows of
    joint j: the covariance of the least-squares solution when joint j's residuals have (long-run)
    variance var_j."""
    p = A.shape[1]
    Q = sla.solve_triangular(R, A.T, trans="T", check_finite=False).T
    Qs = (Q.reshape(N, n, p) * np.sqrt(var)[None, :, None]).reshape(N * n, p)
    Rinv = sla.solve_triangular(R, np.eye(p), check_finite=False)
    return Rinv @ (Qs.T @ Qs) @ Rinv.T


def _hac_sandwich(A: np.ndarray, R: np.ndarray, N: int, n: int, e: np.ndarray,
                  lags: int) -> np.ndarray:
    """HAC (kernel) covariance of the least-squares solution of rows A (N*n, p) (sample-major)
    with residuals e (N*n,): R^-1 (S^T K S) R^-T with S (N, p) the per-sample scores
    sum_j Q_kj e_kj (Q = A R^-1) and K the Parzen lag window of `lags` lags (:func:`parzen_window`)
    -- positive semi-definite, so the covariance is too. The
    kernel is applied by a convolution along the samples (no N x N matrix): O(N p (log N + p))."""
    from scipy.signal import fftconvolve
    p = A.shape[1]
    Q = sla.solve_triangular(R, A.T, trans="T", check_finite=False).T
    S = (Q * e[:, None]).reshape(N, n, p).sum(axis=1)
    L = max(int(lags), 0)
    w = parzen_window(L)
    # zero-padded convolution (samples beyond the ends contribute nothing); FFT: O(N log N) per
    # column for the ~3 tau_int lags (hundreds at 1 kHz)
    KS = fftconvolve(S, w[:, None], mode="same", axes=0) if L > 0 else S
    Rinv = sla.solve_triangular(R, np.eye(p), check_finite=False)
    return Rinv @ (S.T @ KS) @ Rinv.T


#: HAC bandwidth in units of the residuals' largest integrated autocorrelation time. Parzen's
#: kernel (positive semi-definite, bias ~ 1/L^2 against the Bartlett kernel's 1/L): with
#: Bartlett at 2-3 tau an AR(1) rho = 0.9 noise gave 89 % within 2 sigma; Parzen at 3 tau
#: gives 90-99 % there and, on 20 twin seeds, 65 / 94 / 99.5 % within 1 / 2 / 3 sigma
HAC_FACTOR = 3.0


#: contiguous sample blocks of the delete-a-block jackknife (:func:`block_jackknife_cov`)
JACKKNIFE_BLOCKS = 10
#: median jackknife / sandwich std ratio above which the residual is called a misfit. The
#: delete-a-block jackknife is conservative on one excitation period (leaving a block out
#: changes the design): with a matched model and noise only the ratio was 1.2-1.54 on the twin's
#: quickstart trajectories (3 seeds); with the twin's link friction off the model (Stribeck, 15 %
#: Coulomb asymmetry, -20 % drift) 2.4-2.64, where the sandwich std -- a noise std -- hid a bias
#: the blocks show (tests/estimation/test_misfit.py)
MISFIT_RATIO = 2.0


def block_jackknife_cov(A: np.ndarray, b: np.ndarray, N: int, n: int,
                        blocks: int = JACKKNIFE_BLOCKS) -> np.ndarray | None:
    """Delete-a-block jackknife covariance (p, p) of the least-squares solution of rows A (N*n, p),
    b (N*n,) (sample-major), over `blocks` contiguous sample blocks: the spread of the solutions
    with one block left out, (K-1)/K sum_k (theta_-k - mean)(theta_-k - mean)^T. It holds whatever
    the residual is -- noise, serially correlated noise, or a model error that varies along the
    trajectory -- where a sandwich assumes the residual is noise. Normal equations downdated per
    block: O(N p^2). None when there are too few samples (< 20 per block) or a left-out system is
    singular."""
    p = A.shape[1]
    if N < 20 * blocks:
        return None
    A3, b2 = A.reshape(N, n, p), b.reshape(N, n)
    edges = np.linspace(0, N, blocks + 1).astype(int)
    G_k = np.empty((blocks, p, p))
    g_k = np.empty((blocks, p))
    for k in range(blocks):          # K block Gram matrices (K = 10): not a per-sample loop
        Ak = A3[edges[k]:edges[k + 1]].reshape(-1, p)
        G_k[k] = Ak.T @ Ak
        g_k[k] = Ak.T @ b2[edges[k]:edges[k + 1]].reshape(-1)
    G, g = G_k.sum(axis=0), g_k.sum(axis=0)
    try:
        th = np.stack([np.linalg.solve(G - G_k[k], g - g_k[k]) for k in range(blocks)])
    except np.linalg.LinAlgError:
        return None
    d = th - th.mean(axis=0)
    return (blocks - 1) / blocks * (d.T @ d)


def misfit_inflation(cov: np.ndarray, cov_j: np.ndarray | None) -> tuple[float, np.ndarray]:
    """(median jackknife / sandwich std ratio over the parameters, per-parameter inflation
    factors max(1, ratio) (p,)); (nan, ones) without a jackknife."""
    p = cov.shape[0]
    if cov_j is None:
        return math.nan, np.ones(p)
    s_h = np.sqrt(np.clip(np.diag(cov), 0.0, None))
    s_j = np.sqrt(np.clip(np.diag(cov_j), 0.0, None))
    ok = s_h > 0
    if not ok.any():
        return math.nan, np.ones(p)
    r = np.where(ok, s_j / np.where(ok, s_h, 1.0), 1.0)
    return float(np.median(r[ok])), np.maximum(r, 1.0)


def parzen_window(L: int) -> np.ndarray:
    """Parzen lag window w_l, l = -L..L (w_0 = 1)."""
    x = np.abs(np.arange(-L, L + 1)) / (L + 1.0)
    return np.where(x <= 0.5, 1 - 6 * x ** 2 + 6 * x ** 3, 2 * (1 - x) ** 3)


def hac_lags(e: np.ndarray) -> tuple[int, np.ndarray]:
    """Bandwidth of the HAC sandwich: HAC_FACTOR x the largest integrated autocorrelation time of
    the per-joint residuals e (N, n), rounded up. Returns (lags, tau (n,))."""
    tau = integrated_autocorr_time(e)
    return int(math.ceil(HAC_FACTOR * float(np.max(tau)))), tau


_SERIAL = ("auto", None)


def check_serial(serial):
    """The `serial` setting checked: "auto" or None (ValueError otherwise); returns it."""
    if serial not in _SERIAL:
        raise ValueError(f"serial must be 'auto' or None, got {serial!r}")
    return serial


def apply_mask(W, y, mask):
    """Leave samples out of a fit by zeroing their rows: W (N, n, p), y (N, n), mask (N, n) bool
    (True = fitted) or None. Zero rows add nothing to the normal equations nor to the residual
    sums; the degrees of freedom count only the fitted samples (returned per joint, (n,), or
    None without a mask). Keeping the (N, n) layout keeps the samples in time order for the
    autocorrelation of the residuals (left-out samples contribute zero residual)."""
    if mask is None:
        return W, y, None
    W = np.asarray(W, dtype=float)
    y = np.asarray(y, dtype=float)
    mask = np.asarray(mask, dtype=bool)
    if W.ndim != 3 or mask.shape != W.shape[:2]:
        raise ValueError(f"sample mask has shape {mask.shape}, expected {W.shape[:2]} "
                         f"(N samples, n joints) for W {W.shape}")
    return W * mask[..., None], y * mask, mask.sum(axis=0)


def prepare_system(W, y, names, joint_names, rcond, counts=None):
    """Fit preamble shared by OLS and WLS: :func:`stack_system`, then an under-determined system
    (M <= p rows) is rejected naming the unidentifiable parameters, then the residual degrees of
    freedom per joint are checked (`counts`: fitted samples per joint, :func:`apply_mask`).
    Returns A (M, p), b (M,), N, n, names, dof."""
    A, b, N, n, names = stack_system(W, y, names, joint_names)
    M, p = A.shape
    if M <= p:
        check_identifiable(A, names, rcond)
    return A, b, N, n, names, dof_per_joint(N if counts is None else counts, n, p)


def ols_step(A, b, N, n, names, rcond, dof):
    """Least squares by QR with the identifiability check (OLS, and step 1 of WLS). Returns
    p_hat (p,), R (p, p), residuals e (N, n), per-joint residual variance (n,) = sum e^2 / dof."""
    p_hat, R = _qr_solve(A, b, names, rcond)
    e = (b - A @ p_hat).reshape(N, n)
    return p_hat, R, e, np.sum(e ** 2, axis=0) / dof


# -- estimators ---------------------------------------------------------------------------------
class LinearFit(EstimatorMixin):
    """Shared fitted attributes, prediction and table of the linear least-squares fits (OLS,
    WLS, Ridge and :class:`~identify.estimation.streaming.BlockFit`)."""

    params_: np.ndarray
    cov_: np.ndarray
    sigma2_: np.ndarray
    residual_rms_: np.ndarray
    names_: list[str]

    @property
    def std_(self) -> np.ndarray:
        return np.sqrt(np.clip(np.diag(self.cov_), 0.0, None))

    @property
    def rel_std_(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(self.params_ != 0, 100.0 * self.std_ / np.abs(self.params_), np.inf)

    @property
    def poorly_excited_(self) -> np.ndarray:
        return self.std_ > np.abs(self.params_)

    def predict(self, W) -> np.ndarray:
        """W (N, n, p) -> (N, n); W (M, p) -> (M,)."""
        check_is_fitted(self)
        W = np.asarray(W, dtype=float)
        if W.shape[-1] != self.params_.size:
            raise ValueError(f"W has {W.shape[-1]} columns, the fit has {self.params_.size}")
        return W @ self.params_

    def _finish(self, A, b, N, n, names, p_hat, cov, counts=None):
        p = A.shape[1]
        e = (b - A @ p_hat).reshape(N, n)
        dof = dof_per_joint(N if counts is None else counts, n, p)
        self.params_ = p_hat
        self.cov_ = 0.5 * (cov + cov.T)
        self.sigma2_ = np.sum(e ** 2, axis=0) / dof
        self.residual_rms_ = np.sqrt(np.sum(e ** 2, axis=0)
                                     / (N if counts is None else np.maximum(counts, 1)))
        self.n_fitted_ = np.full(n, N) if counts is None else np.asarray(counts)
        self.names_ = list(names)
        self.n_joints_ = n
        self.n_samples_ = N
        return self

    def table(self) -> str:
        """Readable table: name, value, std, relative std [%], poorly-excited flag."""
        check_is_fitted(self)
        lines = [f"{'parameter':<24s} {'value':>13s} {'std':>11s} {'rel.std %':>10s}"]
        for k, name in enumerate(self.names_):
            flag = "  poorly excited" if self.poorly_excited_[k] else ""
            lines.append(f"{name:<24s} {self.params_[k]:>13.6g} {self.std_[k]:>11.4g} "
                         f"{self.rel_std_[k]:>10.3g}{flag}")
        return "\n".join(lines)


class OLS(LinearFit):
    """Ordinary least squares by Householder QR; joint-wise heteroscedastic sandwich covariance.

    Args:
        rcond: relative singular-value threshold for the rank test (default max(M, p) * eps).
        serial: "auto" (default) inflates each joint's residual variance by the residuals'
            integrated autocorrelation time (:func:`integrated_autocorr_time`; low-pass-filtered
            data are serially correlated, and ignoring it makes the std far too small); None
            assumes independent samples.
    Extra attribute: tau_int_ (n,) autocorrelation time used per joint [samples] (1 if None).
    """

    def __init__(self, rcond: float | None = None, serial: str | None = "auto"):
        self.rcond = rcond
        self.serial = serial

    @single_thread_blas()
    def fit(self, W, y, *, mask=None, names=None, joint_names=None) -> "OLS":
        """W (N, n, p) regressor, y (N, n) torques [N*m] (or W (M, p), y (M,)); `mask` (N, n)
        bool: samples fitted (None: all), :func:`apply_mask`; `names`: p column names,
        `joint_names`: n joint names (messages, ``names_``). Returns self."""
        serial = check_serial(self.serial)
        W, y, counts = apply_mask(W, y, mask)
        A, b, N, n, names, dof = prepare_system(W, y, names, joint_names, self.rcond, counts)
        M, p = A.shape
        p_hat, R, e, s2 = ols_step(A, b, N, n, names, self.rcond, dof)
        # OLS keeps the per-joint variance inflation: its rows are heteroscedastic across
        # joints (unweighted), where the per-row HAC middle matrix is too noisy (60 seeds:
        # 92.6 % within 2 sigma); WLS (the pipeline's) uses the HAC sandwich
        tau = integrated_autocorr_time(e) if serial == "auto" else np.ones(n)
        cov = _joint_sandwich(A, R, N, n, s2 * tau)
        self.tau_int_ = tau
        return self._finish(A, b, N, n, names, p_hat, cov, counts)


class WLS(LinearFit):
    """Two-step weighted least squares (the paper's): rows of joint j weighted by 1/sigma_j.

    Args:
        sigma: known per-joint noise std (n,) [N*m]; None (default) estimates it from the OLS
            residuals (step 1).
        rcond: rank-test threshold, see :class:`OLS`.
        serial: "auto" (default) or None, see :class:`OLS`. With "auto" the covariance is the
            per-joint sandwich R~^-1 (sum_j tau_j s_j^2 Q~_j^T Q~_j) R~^-T (s_j^2 the weighted
            residual variance of joint j, tau_j its autocorrelation time); with None it is
            s^2 (R~^T R~)^-1.
    Extra attributes: weights_ (n,) = 1/sigma_j used, scale2_ weighted residual variance (~1),
    tau_int_ (n,); jackknife_ratio_: median delete-a-block jackknife / sandwich std ratio
    (:func:`block_jackknife_cov`; NaN with ``serial=None`` or too few samples) and misfit_: it
    exceeds :data:`MISFIT_RATIO` -- the residual is a model error, not noise, and the std are then
    inflated to the jackknife's per parameter (still lower bounds for a bias the blocks share).
    """

    def __init__(self, sigma=None, rcond: float | None = None, serial: str | None = "auto"):
        self.sigma = sigma
        self.rcond = rcond
        self.serial = serial

    @single_thread_blas()
    def fit(self, W, y, *, mask=None, names=None, joint_names=None) -> "WLS":
        """The arguments of :meth:`OLS.fit`. Returns self."""
        serial = check_serial(self.serial)
        W, y, counts = apply_mask(W, y, mask)
        A, b, N, n, names, dof = prepare_system(W, y, names, joint_names, self.rcond, counts)
        M, p = A.shape
        if self.sigma is None:                     # step 1: OLS residual std per joint
            sig = np.sqrt(ols_step(A, b, N, n, names, self.rcond, dof)[3])
        else:
            sig = np.broadcast_to(np.asarray(self.sigma, dtype=float), (n,)).copy()
            if not np.all(np.isfinite(sig)) or np.any(sig <= 0):
                raise ValueError(f"WLS sigma must be finite and > 0 per joint, got {sig}")
        floor = 1e-9 * float(np.max(sig)) if np.max(sig) > 0 else 1.0
        sig = np.maximum(sig, floor)
        w = 1.0 / sig
        Aw = (A.reshape(N, n, p) * w[None, :, None]).reshape(M, p)
        bw = (b.reshape(N, n) * w[None, :]).reshape(M)
        p_hat, R = _qr_solve(Aw, bw, names if self.sigma is not None else None, self.rcond)
        ew = bw - Aw @ p_hat
        scale2 = float(ew @ ew) / ((M if counts is None else int(np.sum(counts))) - p)
        self.misfit_, self.jackknife_ratio_, self.std_sandwich_ = False, math.nan, None
        if serial == "auto":
            lags, tau = hac_lags(ew.reshape(N, n))
            M_fit = M if counts is None else int(np.sum(counts))
            cov = _hac_sandwich(Aw, R, N, n, ew, lags) * (M_fit / (M_fit - p))
            # a residual that is not noise (a model error along the trajectory): the block
            # estimates disagree beyond the sandwich -- the std take the jackknife's where larger
            ratio, up = misfit_inflation(cov, block_jackknife_cov(Aw, bw, N, n))
            self.jackknife_ratio_ = ratio
            self.std_sandwich_ = np.sqrt(np.clip(np.diag(cov), 0.0, None))
            if ratio > MISFIT_RATIO:
                self.misfit_ = True
                cov = cov * np.outer(up, up)
        else:
            lags, tau = 0, np.ones(n)
            Rinv = sla.solve_triangular(R, np.eye(p), check_finite=False)
            cov = scale2 * (Rinv @ Rinv.T)
        self.tau_int_ = tau
        self.hac_lags_ = lags
        self.weights_ = w
        self.scale2_ = scale2
        return self._finish(A, b, N, n, names, p_hat, cov, counts)


def lcurve_corner(s: np.ndarray, beta: np.ndarray, rho_perp2: float = 0.0,
                  lambdas: np.ndarray | None = None, n_grid: int = 300):
    """L-curve of ridge regression min ||A x - b||^2 + lam ||x||^2 from the SVD of A.

    Args:
        s: (r,) singular values of A (descending, > 0); beta: (r,) U^T b;
        rho_perp2: squared norm of the part of b outside range(A);
        lambdas: grid of lam (default: n_grid log-spaced values spanning s_min^2 1e-4 ..
            s_max^2).
    Returns:
        lam_corner, lambdas (G,), residual norms (G,), solution norms (G,), curvature (G,).
        The corner is the grid point of maximum curvature of (log rho, log eta).
    """
    s = np.asarray(s, dtype=float)
    beta = np.asarray(beta, dtype=float)
    if lambdas is None:
        lo = np.log10(max(s[-1] ** 2 * 1e-4, s[0] ** 2 * 1e-16))
        hi = np.log10(s[0] ** 2)
        lambdas = np.logspace(lo, hi, n_grid)
    lam = np.asarray(lambdas, dtype=float)[:, None]
    f = s ** 2 / (s ** 2 + lam)                     # filter factors (G, r)
    rho = np.sqrt(np.sum(((1 - f) * beta) ** 2, axis=1) + rho_perp2)
    eta = np.sqrt(np.sum((f * beta / s) ** 2, axis=1))
    x = np.log(rho)
    yv = np.log(eta)
    tl = np.log(lam[:, 0])
    dx, dy = np.gradient(x, tl), np.gradient(yv, tl)
    ddx, ddy = np.gradient(dx, tl), np.gradient(dy, tl)
    kappa = (dx * ddy - ddx * dy) / np.maximum((dx ** 2 + dy ** 2) ** 1.5, 1e-300)
    inner = kappa[2:-2]
    k = int(np.argmax(inner)) + 2 if inner.size and np.max(inner) > 0 else 0
    return float(lam[k, 0]), lam[:, 0], rho, eta, kappa


class Ridge(LinearFit):
    """Ridge regression with lambda at the L-curve corner.

    Minimizes ||W~ p - y~||^2 + lambda ||D (p - prior)||^2, where W~, y~ are the rows weighted by
    1/sigma_j per joint (weighted=True, sigma_j from a minimum-norm least-squares first step) and
    D = diag(column norms of W~) so that lambda is dimensionless and unit-independent.

    Args:
        lam: fixed lambda (None -> L-curve corner).
        prior: (p,) values the regularization pulls towards (default zeros).
        weighted: per-joint weighting as in :class:`WLS` (default True).
    Extra attributes: lambda_, lcurve_ (dict: lambdas, rho, eta, kappa), weights_.
    Covariance: noise-propagated covariance of the (biased) ridge estimate,
    s^2 D^-1 V diag(s_i^2 / (s_i^2 + lambda)^2) V^T D^-1 -- it excludes the bias -- times the mean
    integrated autocorrelation time of the residuals when serial="auto" (default).
    """

    def __init__(self, lam: float | None = None, prior=None, weighted: bool = True,
                 serial: str | None = "auto"):
        self.lam = lam
        self.prior = prior
        self.weighted = weighted
        self.serial = serial

    @single_thread_blas()
    def fit(self, W, y, *, mask=None, names=None, joint_names=None) -> "Ridge":
        """The arguments of :meth:`OLS.fit`. Returns self."""
        serial = check_serial(self.serial)
        W, y, counts = apply_mask(W, y, mask)
        A, b, N, n, names = stack_system(W, y, names, joint_names)
        M, p = A.shape
        prior = np.zeros(p) if self.prior is None else np.asarray(self.prior, dtype=float)
        if prior.shape != (p,):
            raise ValueError(f"Ridge prior has shape {prior.shape}, expected ({p},)")
        dof = dof_per_joint(N if counts is None else counts, n, p)
        b0 = b - A @ prior
        d = np.linalg.norm(A, axis=0)
        d = np.where(d > 0, d, 1.0)
        As = A / d
        if self.weighted:
            s, beta, Vt, rperp2 = _svd_system(As, b0)
            r = int(np.sum(s > max(M, p) * np.finfo(float).eps * s[0]))
            x_mn = Vt[:r].T @ (beta[:r] / s[:r])
            e1 = (b0 - As @ x_mn).reshape(N, n)
            sig = np.sqrt(np.sum(e1 ** 2, axis=0) / dof)
            sig = np.maximum(sig, 1e-9 * np.max(sig) if np.max(sig) > 0 else 1.0)
            w = 1.0 / sig
        else:
            w = np.ones(n)
        Aw = (As.reshape(N, n, p) * w[None, :, None]).reshape(M, p)
        bw = (b0.reshape(N, n) * w[None, :]).reshape(M)
        s, beta, Vt, rperp2 = _svd_system(Aw, bw)
        keep = s > max(M, p) * np.finfo(float).eps * s[0]
        s_k, beta_k, V_k = s[keep], beta[keep], Vt[keep].T
        if self.lam is None:
            lam, lams, rho, eta, kappa = lcurve_corner(s_k, beta_k, rperp2)
            self.lcurve_ = {"lambdas": lams, "rho": rho, "eta": eta, "kappa": kappa}
        else:
            lam = float(self.lam)
            if not lam >= 0:
                raise ValueError(f"Ridge lambda must be >= 0, got {lam!r}")
        f = s_k / (s_k ** 2 + lam)
        x = V_k @ (f * beta_k)
        ew = bw - Aw @ x
        scale2 = float(ew @ ew) / (M - p)
        tau = integrated_autocorr_time(ew.reshape(N, n)) if serial == "auto" else np.ones(n)
        cov_s = scale2 * float(np.mean(tau)) * (V_k * (f ** 2)) @ V_k.T
        self.tau_int_ = tau
        p_hat = prior + x / d
        cov = cov_s / np.outer(d, d)
        self.lambda_ = lam
        self.weights_ = w
        return self._finish(A, b, N, n, names, p_hat, cov, counts)


def _svd_system(A: np.ndarray, b: np.ndarray):
    """SVD of A via its R factor: returns s (p,), U^T b (p,), V^T (p, p), ||b_perp||^2."""
    p = A.shape[1]
    Rb = qr_r(np.column_stack([A, b]))
    if Rb.shape[0] < p + 1:                      # fewer rows than columns + 1
        Rb = np.vstack([Rb, np.zeros((p + 1 - Rb.shape[0], p + 1))])
    R, z = Rb[:p, :p], Rb[:p, p]
    U, s, Vt = np.linalg.svd(R)
    return s, U.T @ z, Vt, float(Rb[p, p] ** 2)


#: the estimators a scenario names (``identification.estimator``), by name
ESTIMATORS = {"ols": OLS, "wls": WLS, "ridge": Ridge}


def make_estimator(estimator):
    """An unfitted estimator from a name ("ols", "wls", "ridge": default settings) or from an
    estimator instance (an :class:`~identify.common.estimator.EstimatorMixin` is cloned, so the
    caller's instance stays unfitted; any other object with fit / predict is used as is).
    ValueError naming the choices for an unknown name."""
    if not isinstance(estimator, str):
        return clone(estimator) if isinstance(estimator, EstimatorMixin) else estimator
    key = estimator.lower()
    if key not in ESTIMATORS:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {sorted(ESTIMATORS)}")
    return ESTIMATORS[key]()
