"""The paper's two joint models: *simplified* (Coulomb-viscous) and *improved* (harmonic drive).

    from identify.estimation.joint_models import SimplifiedModel, ImprovedModel
    sm = SimplifiedModel(model, base).fit(d)            # tau'_m = W_b p_b + f_c sign(qd) + f_v qd
    im = ImprovedModel(model, base, friction_term="linear").fit(d)
    tau_m_hat = im.predict(d_val, route="closed_form")  # or route="eq24", simplified=sm

`d` is any object with the attributes of :class:`identify.estimation.processing.Processed`: ``t`` (N,) [s] and
``q, qd, qdd`` (N, n) [rad, rad/s, rad/s^2], ``tau_j`` (N, n) joint-torque-sensor reading tau_r
[N*m], ``tau_m`` (N, n) motor torque reflected to the link, eta*beta*i [N*m].

Improved model, per joint (all torques reflected to the link side; derivation in
docs/joint_models.md):

    tau'_m = tau_r * h + Phi @ c,   h = 1 / (1 - xi_lin - xi_opp * s * g)
    Phi    = [sign(qd), qd, qdd, taudd_r]            (motor Coulomb, viscous, inertia, compliance)
    s      = tanh(qd / load_eps)  (smoothed direction of motion),  g = sign(tau_r)

``friction_term="linear"`` is the paper's reducer friction tau_rf = xi * tau'_r (xi_opp = 0);
``"opposing"`` is tau_rf = xi * |tau'_r| * sign(qd), a loss that always opposes motion (xi_lin = 0);
``"both"`` fits both coefficients; ``"auto"`` uses whichever of linear / opposing has the lower
stage-2 residual (``compare_friction_terms_``). A joint whose sensor torque is too small to fix xi
gets xi = 0 with std NaN (``Stage2Joint.xi_identified = False``).

Parallel filtering (docs/joint_models.md): when `d` carries the processing's filter chain
(``d.filter_chain``, ``d.qd_full``; ProcessingSettings.filter_regressor, the default), every
sign(qd) above -- the Coulomb columns of the simplified model and of stage 1, stage 2's Coulomb
column and the opposing direction s -- is evaluated on the unfiltered grid and passed through
exactly the torques' filter (:func:`coulomb_column`, :func:`_direction`, :func:`_gain`), which
removes the bias of a sharp step regressed on a smeared one (Coulomb low, viscous high). Data
without a chain use the plain columns.

The paper's grouping of the torque difference,

    dtau = tau'_m - tau_r = a1 tau'_m + a2 sign(qd) + a3 qd + a4 qdd + a5 taudd_r,

is the linear variant with a1 = xi_lin and a_k = (1 - a1) c_k (k = 2..5). Stage 2 is fitted with the
motor torque as the response (noise in tau'_m then stays in the response and does not bias a1):
same model as the paper's, but the minimised residual is tau'_m's, not dtau's (= (1 - a1) times it,
with the noisy tau'_m among the regressors).

Stage-2 uncertainty (``Stage2Joint.std`` / ``a_std``; docs/joint_models.md, "Uncertainty of
stage 2"): processed data are low-pass filtered and smoothed, so residuals are serially correlated,
and the noisy measured tau_r is itself a regressor. The covariance is a heteroscedasticity-
consistent sandwich whose per-coefficient variance is multiplied by the integrated
autocorrelation time of that coefficient's influence series (estimators.integrated_autocorr_time,
``serial="auto"``), plus bias bias^T for the estimated errors-in-variables bias (stage-1 residual
as the sensor-noise proxy, ``errors_in_variables=True``). A coefficient whose column (tau_r, or
taudd_r = its second derivative) is more than half noise is reported with std NaN
(``noise_dominated``); ``poorly_excited`` flags std > |value| like the estimators'.

Prediction on a new trajectory (tau_r from stage 1, T_rp):
  * ``route="eq24"``: the paper's eq. (24), dtau evaluated with tau'_m := the simplified model's
    prediction T_pre, T_mp = T_rp + dtau(T_pre);
  * ``route="closed_form"``: tau'_m = T_rp * h + Phi @ c (no simplified model needed; for the
    linear variant this is (T_rp + a2 sign + a3 qd + a4 qdd + a5 taudd_r) / (1 - a1)).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.linalg as sla

from .estimators import _check_serial, integrated_autocorr_time

FRICTION_VARIANTS = ("linear", "opposing", "both")
# physical meaning of the stage-2 coefficients c_k (docs/joint_models.md)
PHI_NAMES = ("f_mc", "f_mv", "J_m", "J_m/K")
PHI_UNITS = ("N*m", "N*m*s/rad", "kg*m^2", "kg*m^2*rad/(N*m)")
ROUTES = ("closed_form", "eq24")


# --------------------------------------------------------------------------------------------
# input checks and design matrices
# --------------------------------------------------------------------------------------------
def _channel(d, name: str, n: int | None = None, n_samples: int | None = None) -> np.ndarray:
    """Fetch a (N, n) channel of processed data with a clear error if missing or malformed."""
    x = getattr(d, name, None)
    if x is None:
        raise ValueError(f"processed data has no channel {name!r} (needed by the joint model)")
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or (n is not None and x.shape[1] != n):
        raise ValueError(f"channel {name!r} has shape {x.shape}, expected (N, {n})")
    if n_samples is not None and x.shape[0] != n_samples:
        raise ValueError(f"channel {name!r} has {x.shape[0]} samples, q has {n_samples}")
    bad = ~np.isfinite(x)
    if bad.any():
        k, j = np.argwhere(bad)[0]
        raise ValueError(f"channel {name!r}: non-finite value {x[k, j]!r} at sample {k}, "
                         f"joint {j + 1}")
    return x


def _states(d, n: int):
    q = _channel(d, "q", n)
    N = q.shape[0]
    return q, _channel(d, "qd", n, N), _channel(d, "qdd", n, N)


def _time(d, N: int) -> np.ndarray:
    t = getattr(d, "t", None)
    if t is None:
        raise ValueError("processed data has no time stamps 't' (needed for taudd_r)")
    t = np.asarray(t, dtype=float).reshape(-1)
    if t.shape[0] != N:
        raise ValueError(f"time stamps 't' have {t.shape[0]} samples, q has {N}")
    if N < 3:
        raise ValueError(f"need at least 3 samples, got {N}")
    if not np.all(np.diff(t) > 0):
        k = int(np.argmax(~(np.diff(t) > 0)))
        raise ValueError(f"time stamps 't' are not strictly increasing at sample {k + 1}")
    return t


def _base_terms(base, n: int, terms: tuple) -> bool:
    """True if `base` was computed with the friction `terms` (its full columns include them),
    False if it covers the 10n inertial columns only."""
    n_full = np.asarray(base.E).shape[1]
    if n_full == 10 * n + len(terms) * n:
        bt = getattr(base, "terms", None)
        if bt is not None and tuple(bt) != tuple(terms):
            raise ValueError(f"base parameters were computed with friction terms {tuple(bt)}, "
                             f"the joint model uses {tuple(terms)}")
        return True
    if n_full == 10 * n:
        return False
    raise ValueError(f"base parameters have {n_full} full columns; expected {10 * n} (inertial) "
                     f"or {10 * n + len(terms) * n} (inertial + friction terms {tuple(terms)})")


def design_matrix(model, base, q, qd, qdd, *, terms=("viscous", "coulomb"),
                  coulomb_eps: float = 0.0, coulomb: np.ndarray | None = None
                  ) -> tuple[np.ndarray, list[str]]:
    """Base regressor with friction columns: rigid body W_b plus `terms` per joint.

    Args:
        model: RobotModel; base: BaseParameters of `model` (with or without the friction terms).
        q, qd, qdd: (N, n) [rad, rad/s, rad/s^2].
        terms: friction.joint_columns terms; coulomb_eps: tanh smoothing of sign [rad/s].
        coulomb: (N, n) values of the Coulomb columns to use instead of sign(qd) / tanh(qd/eps)
            -- the parallel-filtered column of :func:`coulomb_column` (ignored without the
            "coulomb" term).
    Returns:
        W (N, n, p) and the p column names.
    """
    from identify.model.friction import column_names, joint_columns
    n = model.n
    terms = tuple(terms)
    J = joint_columns(qd, qdd, terms=terms, coulomb_eps=coulomb_eps)
    if coulomb is not None and "coulomb" in terms:
        coulomb = np.asarray(coulomb, dtype=float)
        if coulomb.shape != J.shape[:2]:
            raise ValueError(f"Coulomb column values have shape {coulomb.shape}, expected "
                             f"{J.shape[:2]} (samples of qd, joints)")
        k = terms.index("coulomb")
        idx = np.arange(n)
        J[:, idx, k * n + idx] = coulomb
    Y = model.regressor(q, qd, qdd)
    if _base_terms(base, n, terms):
        return base.reduce(np.concatenate([Y, J], axis=2)), list(base.names)
    W = np.concatenate([base.reduce(Y), J], axis=2)
    return W, list(base.names) + (column_names(n, terms) if terms else [])


def coulomb_column(d, n: int, coulomb_eps: float = 0.0) -> np.ndarray | None:
    """Parallel-filtered Coulomb column (N, n) of processed data `d`, or None.

    If `d` carries the processing's filter chain (``d.filter_chain``, ``d.qd_full``:
    ProcessingSettings.filter_regressor, the default), sign(qd) (tanh(qd / coulomb_eps) for
    coulomb_eps > 0) is evaluated on the chain's full grid and passed through exactly the filter
    the torques went through (processing.filter_columns), so that the smeared Coulomb step in
    the filtered torque is matched by the same smeared step in the regressor. Data without a
    chain (processed with filter_regressor=False, or built by hand): None, and the callers use
    the plain sign(qd) of ``d.qd``.
    """
    chain = getattr(d, "filter_chain", None)
    if chain is None:
        return None
    from .processing import filter_columns
    qd_full = getattr(d, "qd_full", None)
    if qd_full is None:
        raise ValueError("processed data carry a filter chain but no qd_full (the velocity on "
                         "the chain's full grid) to build the Coulomb column from")
    qd_full = np.asarray(qd_full, dtype=float)
    if qd_full.ndim != 2 or qd_full.shape[1] != n:
        raise ValueError(f"qd_full has shape {qd_full.shape}, expected (N_full, {n})")
    raw = np.sign(qd_full) if coulomb_eps <= 0 else np.tanh(qd_full / coulomb_eps)
    out = filter_columns(raw, chain, "Coulomb column from qd_full")
    N = np.shape(getattr(d, "qd"))[0]
    if out.shape[0] != N:
        raise ValueError(f"the filter chain gives {out.shape[0]} samples, qd has {N}: the data "
                         f"were changed after processing")
    return out


def design_from(model, base, d, *, terms=("viscous", "coulomb"), coulomb_eps: float = 0.0
                ) -> tuple[np.ndarray, list[str]]:
    """:func:`design_matrix` of processed data `d` (q, qd, qdd and, if `d` carries the filter
    chain, the parallel-filtered Coulomb column of :func:`coulomb_column`). This is the design
    the joint models use; share it between them via ``fit(d, W)`` / ``predict(d, W)``."""
    q, qd, qdd = _states(d, model.n)
    return design_matrix(model, base, q, qd, qdd, terms=terms, coulomb_eps=coulomb_eps,
                         coulomb=(coulomb_column(d, model.n, coulomb_eps)
                                  if "coulomb" in tuple(terms) else None))


def _given_design(obj, d, W):
    """Design of `d` for a fitted/unfitted model `obj`: computed, or the caller's W checked."""
    if W is None:
        return obj.design(d)
    W = np.asarray(W, dtype=float)
    q = _channel(d, "q", obj.model.n)
    p = len(design_matrix_names(obj.model, obj.base, obj.terms))
    if W.ndim != 3 or W.shape != (q.shape[0], obj.model.n, p):
        raise ValueError(f"precomputed design W has shape {W.shape}, expected "
                         f"{(q.shape[0], obj.model.n, p)} (samples of q, joints, columns)")
    return W


def column_kinds(model, base, terms) -> np.ndarray:
    """(p,) kind of each design_matrix column: "rigid" or the friction term's name."""
    n = model.n
    terms = tuple(terms)
    if _base_terms(base, n, terms):
        idx = np.asarray(base.independent)
        fr = [terms[(i - 10 * n) // n] if i >= 10 * n else "rigid" for i in idx]
    else:
        fr = ["rigid"] * len(base.independent) + [t for t in terms for _ in range(n)]
    return np.array(fr, dtype=object)


def coulomb_mask(model, base, terms, coulomb_eps: float) -> np.ndarray:
    """(p,) True for hard-sign Coulomb columns (coulomb_eps <= 0) of design_matrix."""
    if coulomb_eps > 0:
        return np.zeros(len(column_kinds(model, base, terms)), bool)
    return column_kinds(model, base, terms) == "coulomb"


def _make_estimator(estimator):
    if not isinstance(estimator, str):
        return estimator                      # an estimator instance with fit/predict
    from . import estimators as est
    table = {"ols": "OLS", "wls": "WLS", "ridge": "Ridge"}
    key = estimator.lower()
    if key not in table:
        raise ValueError(f"unknown estimator {estimator!r}; choose one of {sorted(table)}")
    return getattr(est, table[key])()


def second_derivative(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d^2x/dt^2 along axis 0 by two passes of second-order central differences.

    Args: t (N,) [s]; x (N, ...). Returns (N, ...) [unit of x / s^2]."""
    from .signal import differentiate
    return differentiate(differentiate(x, t), t)


# --------------------------------------------------------------------------------------------
# simplified model
# --------------------------------------------------------------------------------------------
class SimplifiedModel:
    """Paper §1.1 / §2.3.1: tau'_m = W_b(q, qd, qdd) p_b + f_c sign(qd) + f_v qd, fitted to the
    motor torque by the chosen estimator ("wls" as in the paper, "ols", "ridge" or an instance).

    After :meth:`fit`: ``params_`` (p,), ``std_`` (p,), ``names_`` (p,), ``estimator_``.
    """

    def __init__(self, model, base, estimator="wls", *, terms=("viscous", "coulomb"),
                 coulomb_eps: float = 0.0):
        self.model = model
        self.base = base
        self.estimator = estimator
        self.terms = tuple(terms)
        self.coulomb_eps = float(coulomb_eps)

    def design(self, d) -> np.ndarray:
        """(N, n, p) regressor of the simplified model for processed data `d`
        (:func:`design_from`: parallel-filtered Coulomb column if `d` carries the filter chain)."""
        W, _ = design_from(self.model, self.base, d, terms=self.terms,
                           coulomb_eps=self.coulomb_eps)
        return W

    def fit(self, d, W: np.ndarray | None = None) -> "SimplifiedModel":
        """Identify from the motor torque ``d.tau_m``.

        `W` (N, n, p): a precomputed :meth:`design` of `d` (optional)."""
        n = self.model.n
        W = _given_design(self, d, W)
        names = design_matrix_names(self.model, self.base, self.terms)
        tau_m = _channel(d, "tau_m", n, W.shape[0])
        self.estimator_ = _make_estimator(self.estimator).fit(
            W, tau_m, names=names, joint_names=list(self.model.joint_names))
        self.params_ = np.asarray(self.estimator_.params_, dtype=float)
        self.std_ = np.asarray(self.estimator_.std_, dtype=float)
        self.names_ = list(names)
        return self

    def predict(self, d, W: np.ndarray | None = None) -> np.ndarray:
        """Predicted motor torque tau'_m (N, n) [N*m] on the states of `d`."""
        _check_fitted(self, "SimplifiedModel")
        W = _given_design(self, d, W)
        return W @ self.params_


def design_matrix_names(model, base, terms) -> list[str]:
    from identify.model.friction import column_names
    if _base_terms(base, model.n, tuple(terms)):
        return list(base.names)
    return list(base.names) + (column_names(model.n, terms) if terms else [])


def _check_fitted(obj, what):
    if not hasattr(obj, "params_"):
        raise RuntimeError(f"{what} is not fitted yet; call fit(d) first")


# --------------------------------------------------------------------------------------------
# improved model, stage 2 (per joint)
# --------------------------------------------------------------------------------------------
@dataclass
class Stage2Joint:
    """Stage-2 result for one joint.

    Attributes:
        xi: dict variant-coefficient -> value ("xi_lin", "xi_opp" as fitted).
        theta: (k + 4,) fitted [xi..., c] ; cov: (k+4, k+4) covariance ; names: their names.
        rms: residual RMS of the motor torque [N*m]; n_samples.
        a / a_std: the paper's a1..a5 (linear variant only, else None).
        xi_identified: False if the joint's torque-sensor signal is too small to identify xi
            (xi then fixed at 0, its std NaN).
        tau_int: (k+4,) integrated autocorrelation time [samples] of each coefficient's
            influence series, by which its variance was inflated (1 with serial=None, NaN for
            a fixed xi).
        eiv_bias: (k+4,) estimated errors-in-variables bias of theta (noise of the measured
            tau_r in the regressor), already included in cov as bias bias^T (zeros if the model
            was fitted with errors_in_variables=False).
        noise_dominated: (k+4,) bool: the coefficient's regressor column (tau_r or taudd_r) is
            more than NOISE_FRACTION_MAX sensor noise; the coefficient is not identifiable from
            these data and its std is NaN.
    The std (``std``, ``a_std``) is a heteroscedasticity- and autocorrelation-consistent
    sandwich (docs/joint_models.md, "Uncertainty of stage 2"); ``poorly_excited`` /
    ``a_poorly_excited`` flag coefficients whose std exceeds their magnitude.
    """

    joint: str
    variant: str
    names: list
    theta: np.ndarray
    cov: np.ndarray
    rms: float
    n_samples: int
    a: np.ndarray | None = None
    a_std: np.ndarray | None = None
    xi_identified: bool = True
    tau_int: np.ndarray | None = None
    eiv_bias: np.ndarray | None = None
    noise_dominated: np.ndarray | None = None

    @property
    def std(self) -> np.ndarray:
        """(k+4,) standard deviation of theta (NaN for a fixed xi)."""
        d = np.diag(self.cov)
        return np.where(np.isnan(d), np.nan, np.sqrt(np.clip(d, 0.0, None)))

    @property
    def poorly_excited(self) -> np.ndarray:
        """(k+4,) bool: std > |value| (the data do not determine even the sign); a fixed
        (not identified) xi counts as poorly excited."""
        return ~(self.std <= np.abs(self.theta))

    @property
    def a_poorly_excited(self) -> np.ndarray | None:
        """(5,) bool for the paper's a1..a5 (linear variant; a5 = 0 without the compliance
        column is never flagged), else None."""
        if self.a is None:
            return None
        return ~(self.a_std <= np.abs(self.a)) & ~((self.a == 0) & (self.a_std == 0))

    def value(self, name: str) -> float:
        return float(self.theta[self.names.index(name)])


@dataclass
class Stage2Result:
    """Stage-2 coefficients of all joints for one friction variant."""

    variant: str
    joints: list = field(default_factory=list)        # list[Stage2Joint]

    @property
    def names(self) -> list:
        return self.joints[0].names

    @property
    def params(self) -> np.ndarray:
        """(n, k+4) fitted [xi..., f_mc, f_mv, J_m, J_m/K] per joint."""
        return np.array([j.theta for j in self.joints])

    @property
    def std(self) -> np.ndarray:
        return np.array([j.std for j in self.joints])

    @property
    def a(self) -> np.ndarray | None:
        """(n, 5) the paper's a1..a5 (linear variant), else None."""
        if self.joints[0].a is None:
            return None
        return np.array([j.a for j in self.joints])

    @property
    def a_std(self) -> np.ndarray | None:
        if self.joints[0].a_std is None:
            return None
        return np.array([j.a_std for j in self.joints])

    @property
    def poorly_excited(self) -> np.ndarray:
        """(n, k+4) bool: std > |value| per joint and coefficient (like estimators'
        ``poorly_excited_``)."""
        return np.array([j.poorly_excited for j in self.joints])

    @property
    def a_poorly_excited(self) -> np.ndarray | None:
        """(n, 5) bool for a1..a5 (linear variant), else None."""
        if self.joints[0].a is None:
            return None
        return np.array([j.a_poorly_excited for j in self.joints])

    @property
    def poorly_excited_names(self) -> list:
        """["joint.coefficient", ...] of the poorly excited coefficients (std > |value|)."""
        return [f"{j.joint}.{nm}" for j in self.joints
                for nm, bad in zip(j.names, j.poorly_excited) if bad]

    @property
    def rms(self) -> np.ndarray:
        return np.array([j.rms for j in self.joints])

    @property
    def rms_overall(self) -> float:
        w = np.array([j.n_samples for j in self.joints], float)
        return float(np.sqrt(np.sum(w * self.rms ** 2) / np.sum(w)))

    def table(self) -> str:
        """Per-joint coefficient table, value +- std (physical names, then the paper's a's)."""
        names = list(self.names)
        head = f"{'joint':<8}" + "".join(f"{nm:>22}" for nm in names)
        rows = [f"stage 2 ({self.variant} reducer friction); value +- std (nan: not "
                "identifiable); '?' = poorly excited (std > |value|)", head]

        def cell(v, s, bad):
            return f"{v:>12.4g} +-{s:<7.2g}{'?' if bad else ' '}"
        for j in self.joints:
            rows.append(f"{j.joint:<8}" + "".join(cell(v, s, b) for v, s, b
                                                  in zip(j.theta, j.std, j.poorly_excited)))
        if self.a is not None:
            rows.append("paper grouping dtau = a1 tau'_m + a2 sign(qd) + a3 qd + a4 qdd "
                        "+ a5 taudd_r")
            rows.append(f"{'joint':<8}" + "".join(f"{f'a{k + 1}':>22}" for k in range(5)))
            for j in self.joints:
                rows.append(f"{j.joint:<8}" + "".join(cell(v, s, b) for v, s, b
                                                      in zip(j.a, j.a_std, j.a_poorly_excited)))
        rows.append("residual RMS of tau'_m [N*m]: " + " ".join(f"{r:.4g}" for r in self.rms)
                    + f"  overall {self.rms_overall:.4g}")
        return "\n".join(rows)


def _multipliers(variant: str, s: np.ndarray, g: np.ndarray) -> np.ndarray:
    """(N, k) multipliers M of the reducer-friction coefficients: h = 1 / (1 - M @ xi)."""
    if variant == "linear":
        return np.ones((s.shape[0], 1))
    if variant == "opposing":
        return (s * g)[:, None]
    if variant == "both":
        return np.stack([np.ones_like(s), s * g], axis=1)
    raise ValueError(f"unknown friction_term {variant!r}; choose one of {FRICTION_VARIANTS}")


def _xi_names(variant: str) -> list[str]:
    return {"linear": ["xi_lin"], "opposing": ["xi_opp"], "both": ["xi_lin", "xi_opp"]}[variant]


def _phi(qd, qdd, taudd_r, coulomb_eps: float, compliance: bool,
         sgn: np.ndarray | None = None) -> np.ndarray:
    """(N, n, 4 or 3) stage-2 columns [sign(qd), qd, qdd, taudd_r] per joint; `sgn` (N, n):
    the parallel-filtered Coulomb column (:func:`coulomb_column`) replacing sign(qd)."""
    if sgn is None:
        sgn = np.sign(qd) if coulomb_eps <= 0 else np.tanh(qd / coulomb_eps)
    cols = [sgn, qd, qdd] + ([taudd_r] if compliance else [])
    return np.stack(cols, axis=2)


def _direction(d, qd: np.ndarray, load_eps: float) -> np.ndarray:
    """(N, n) smoothed direction of motion tanh(qd / load_eps) of the opposing reducer friction,
    parallel-filtered like the Coulomb column (:func:`coulomb_column`) when `d` carries the
    filter chain: the reducer friction xi |tau'_r| s is a step at every reversal, like Coulomb
    friction (used through the affine law of :func:`_gain`)."""
    s = coulomb_column(d, qd.shape[1], load_eps)
    return np.tanh(qd / load_eps) if s is None else s


def _influence(J: np.ndarray, r: np.ndarray, where: str, names) -> np.ndarray:
    """Influence series of a least-squares solution: Psi (N, p) with rows
    Psi_k = r_k (J^T J)^-1 J_k^T, so that theta_hat - theta ~ -sum_k Psi_k to first order in the
    errors (J (N, p) the regressor or, for a nonlinear fit, the Jacobian at the solution; r (N,)
    the residuals there). Computed via the SVD of the column-scaled J (never the normal
    equations). Raises ValueError (naming `where` and the coefficient) if a column is all zero or
    J is rank deficient."""
    N, p = J.shape
    if N <= p:
        raise ValueError(f"{where}: {N} samples for {p} coefficients {list(names)}")
    scale = np.linalg.norm(J, axis=0)
    if np.any(scale == 0):
        raise ValueError(f"{where}: coefficient(s) "
                         f"{[nm for nm, s in zip(names, scale) if s == 0]} have an all-zero column "
                         f"(not excited)")
    U, sv, Vt = np.linalg.svd(J / scale, full_matrices=False)
    if sv[-1] <= sv[0] * 1e-10:
        raise ValueError(f"{where}: stage-2 regressor is rank deficient; coefficient "
                         f"{names[int(np.argmax(np.abs(Vt[-1])))]} cannot be identified")
    return ((U * r[:, None]) / sv) @ Vt / scale


def _serial_cov(Psi: np.ndarray, serial, n_params: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """Covariance of sum_k Psi_k for serially correlated, heteroscedastic terms.

    Heteroscedasticity-consistent sandwich (J^T J)^-1 (sum_k r_k^2 J_k J_k^T) (J^T J)^-1 =
    Psi^T Psi with the small-sample factor N / (N - p) (HC1), then each coefficient's variance
    multiplied by the integrated autocorrelation time tau_i of its own influence series Psi[:, i]
    (estimators.integrated_autocorr_time; serial="auto"), covariances by sqrt(tau_i tau_j).
    Var(sum_k psi_k) = tau Var(psi) N for a stationary series, so the diagonal is the long-run
    (HAC) variance with a data-chosen lag window. serial=None: tau = 1 (independent samples).
    n_params: number of fitted coefficients for the HC1 factor (default p; give it when Psi holds
    a subset or a transformation of the coefficients' influence series).
    Returns cov (p, p) and tau (p,) [samples]."""
    N, p = Psi.shape
    tau = integrated_autocorr_time(Psi) if serial == "auto" else np.ones(p)
    st = np.sqrt(tau)
    cov = (Psi.T @ Psi) * (N / (N - (p if n_params is None else n_params))) * np.outer(st, st)
    return cov, tau


XI_REL_STD_MAX = 0.1   # 1/(1 - xi) must be known to 10 % for xi to count as identified
XI_PLAUSIBLE_MAX = 0.8  # largest reducer friction considered (the paper's Table 2: a1 <= 0.804)


def _gain(M: np.ndarray, xi: np.ndarray, m_sharp: np.ndarray | None = None
          ) -> tuple[np.ndarray, np.ndarray]:
    """Reducer gain h = tau'_r / tau_r (N,) and its derivative dh/dxi (N, k).

    Sharp multipliers M (N, k) (:func:`_multipliers`; the opposing column m = s g is +-1 away
    from reversals): h = 1 / (1 - M xi). With parallel filtering, M's opposing column (the
    last one of the opposing and both variants) is the filtered direction m_f = g H[s]
    (:func:`_direction`) and `m_sharp` (N,) the unfiltered m. The law is not linear in m, so
    filtering the torque does not simply filter m through it; it is split exactly into a part
    affine in m and a remainder that vanishes for m = +-1 (a = xi_opp / (1 - xi_lin)):

        (1 - a m)^-1 = (1 + a m) / (1 - a^2) - a^2 (1 - m^2) / ((1 - a m)(1 - a^2)),

    the affine part is evaluated with m_f (it commutes with the linear filter while tau_r varies
    slowly across a reversal) and the remainder -- non-zero only at low speed,
    |qd| < ~2 load_eps -- with m_sharp; h = that / (1 - xi_lin). Without filtering (m_f = m)
    this is 1 / (1 - M xi) exactly. The linear variant (M = 1) is unaffected."""
    k = M.shape[1]
    if m_sharp is None or np.all(M == 1.0):
        h = 1.0 / (1.0 - M @ xi)
        return h, (h * h)[:, None] * M
    xl, xo = (xi[0], xi[1]) if k == 2 else (0.0, xi[0])
    mf, m = M[:, -1], m_sharp
    L = 1.0 - xl
    A = xo / L
    den = 1.0 - A * A
    q = (1.0 - A * m) * den
    h1 = (1.0 + A * mf) / den - A * A * (1.0 - m * m) / q
    dq = -m * den - 2.0 * A * (1.0 - A * m)
    dh1 = ((mf * den + 2.0 * A * (1.0 + A * mf)) / den ** 2
           - (1.0 - m * m) * (2.0 * A * q - A * A * dq) / q ** 2)
    h = h1 / L
    d_xo = dh1 / L ** 2
    if k == 1:
        return h, d_xo[:, None]
    return h, np.column_stack([(h1 + A * dh1) / L ** 2, d_xo])


def _feasible(M: np.ndarray, xi: np.ndarray, m_sharp: np.ndarray | None = None) -> bool:
    """True if the reducer transmits torque for every sample: 1 - M xi > 0 (sharp M), or
    1 - xi_lin - |xi_opp| > 0 (the parallel-filtered law of :func:`_gain`)."""
    if m_sharp is None or np.all(M == 1.0):
        return bool(np.all(1.0 - M @ xi > 0))
    xl, xo = (xi[0], xi[1]) if M.shape[1] == 2 else (0.0, xi[0])
    return bool(1.0 - xl - abs(xo) > 0)


def _gauss_newton(resid, jac, theta, k, feasible, where, max_iter: int = 50):
    """Damped Gauss-Newton (step halving) for the stage-2 least squares; the problem is linear
    in c and mildly nonlinear in xi, so it converges in a few steps from the linear start.
    Steps that would leave ``feasible(xi)`` (the reducer transmits torque) are halved too."""
    r = resid(theta)
    cost = float(r @ r)
    for _ in range(max_iter):
        step, *_ = np.linalg.lstsq(jac(theta), -r, rcond=None)
        lam = 1.0
        while lam > 1e-6:
            trial = theta + lam * step
            if feasible(trial[:k]):
                r_t = resid(trial)
                c_t = float(r_t @ r_t)
                if c_t <= cost:
                    break
            lam *= 0.5
        else:
            break                                   # no descent: at the minimum (numerically)
        converged = (np.all(np.abs(lam * step) <= 1e-9 * (1.0 + np.abs(theta)))
                     or cost - c_t <= 1e-12 * cost)
        theta, r, cost = trial, r_t, c_t
        if converged:
            break
    return theta


NOISE_FRACTION_MAX = 0.5   # a regressor column more than half sensor noise: not identified


def _noise_columns(u: np.ndarray, udd, lead: np.ndarray, m: int) -> np.ndarray:
    """Noise part Jn (N, k + m) of a stage-2 regressor / Jacobian when the measured
    tau_r = true + u: lead (N, k) * u in the k leading (xi or b) columns, udd (the noise's second
    derivative, if the last of the m Phi columns is taudd_r) in the last column, 0 elsewhere."""
    k = lead.shape[1]
    Jn = np.zeros((u.shape[0], k + m))
    Jn[:, :k] = lead * u[:, None]
    if udd is not None:
        Jn[:, -1] = udd
    return Jn


def _eiv_bias(J: np.ndarray, Jn: np.ndarray, eps_of) -> tuple[np.ndarray, np.ndarray]:
    """Errors-in-variables bias of a stage-2 least-squares fit.

    The measured tau_r enters the regressor (and its second derivative the compliance column),
    so the regressor carries the noise part Jn (:func:`_noise_columns`) and the residual the
    noise eps; they are correlated, and to first order theta_hat - theta = -(J^T J)^-1 g(theta)
    with g = Jn^T eps(theta) at the TRUE theta (the classic attenuation of a noisy regressor plus
    the cross term of tau_r's noise with its own second derivative). With theta = theta_hat -
    bias and d eps / d theta = Jn this gives (J^T J - Jn^T Jn) bias = -g(theta_hat), the
    corrected-least-squares bias.

    A column whose noise power exceeds NOISE_FRACTION_MAX of its total power is *dominated* by
    the noise: its coefficient is not identifiable from these data (the correction divides by
    its signal power, which the noise proxy cannot resolve). Such columns are left out of the
    correction term, `eps_of(dominated)` may take their true coefficient as 0 (stage 2 does so
    for the compliance coefficient J'_m/K, ~1e-5 on real joints), and the caller reports their
    std as NaN. If J^T J - Jn^T Jn is not positive definite
    (noise proxy larger than the signal) the plain first-order bias -(J^T J)^-1 g is used.

    Args: J, Jn (N, p); eps_of: callable (p,) bool -> (N,) the residual's noise part with the
        flagged coefficients set to 0.
    Returns: bias (p,), dominated (p,) bool."""
    jj = np.sum(J ** 2, axis=0)
    frac = np.sum(Jn ** 2, axis=0) / np.where(jj > 0, jj, np.inf)
    dom = frac > NOISE_FRACTION_MAX
    g = Jn.T @ eps_of(dom)
    d = np.sqrt(np.where(jj > 0, jj, 1.0))
    Js = Jn * ~dom
    A = (J.T @ J) / np.outer(d, d)
    C = A - (Js.T @ Js) / np.outer(d, d)
    try:
        bias = -sla.cho_solve(sla.cho_factor(C), g / d) / d
    except np.linalg.LinAlgError:
        bias = -np.linalg.lstsq(A, g / d, rcond=None)[0] / d
    return bias, dom


def _linear_start(tau_m, tau_r, Phi, names_c, where, serial="auto", u=None, udd=None):
    """Linear fit tau_m = b tau_r + Phi c, b = 1/(1 - xi_lin): returns (sol, std of b).

    The std is the serially corrected sandwich (:func:`_serial_cov`); with a noise proxy `u` (N,)
    of tau_r (and `udd` its second derivative when Phi has the taudd_r column) the
    errors-in-variables bias of b (:func:`_eiv_bias`) is added in quadrature, and the std is
    inf if the tau_r column is dominated by the noise."""
    A = np.column_stack([tau_r, Phi])
    sol, *_ = np.linalg.lstsq(A, tau_m, rcond=None)
    Psi = _influence(A, tau_m - A @ sol, where, ["1/(1-xi)"] + list(names_c))
    cov_lin, _ = _serial_cov(Psi[:, :1], serial, n_params=A.shape[1])
    var_b = cov_lin[0, 0]
    if u is not None:
        Jn = _noise_columns(u, udd, np.ones((A.shape[0], 1)), Phi.shape[1])
        bias, dom = _eiv_bias(A, Jn, lambda z: (sol[0] * u if not z[0] else 0.0 * u)
                              + (sol[-1] * udd if udd is not None and not z[-1] else 0.0))
        var_b = np.inf if dom[0] else var_b + bias[0] ** 2
    return sol, float(np.sqrt(var_b))


def _fit_stage2_joint(tau_m, tau_r, Phi, M, names, where, start=None, serial="auto",
                      u=None, udd=None, m_sharp=None):
    """Least squares of tau_m = tau_r h(M, xi) + Phi c for one joint, h = 1 / (1 - M xi)
    (:func:`_gain`; `m_sharp` (N,): the unfiltered opposing multiplier when M's is
    parallel-filtered).

    Args: tau_m, tau_r (N,); Phi (N, m); M (N, k); names (k + m,); start: the joint's
        :func:`_linear_start` (shared between variants), computed if None; serial: "auto" or
        None (see :func:`_serial_cov`); u (N,): proxy of the measurement noise in tau_r (the
        stage-1 residual) and udd (N,) its second derivative (when Phi has the taudd_r column),
        or None to ignore errors in variables.
    Returns: theta = [xi, c] (k + m,), cov (k + m, k + m), residual RMS [N*m], xi_identified,
        Psi (N, k + m) the influence series (:func:`_influence`; zero in the xi columns if xi is
        not identified), tau (k + m,) integrated autocorrelation time per coefficient [samples],
        biases (b, k + m) bias vectors included in cov as bias bias^T: [0] the estimated
        errors-in-variables bias, [1] (xi not identified only) the xi-absorption bound,
        dominated (k + m,) bool: column dominated by the sensor noise (coefficient not
        identifiable, variance NaN).
    cov = serially corrected sandwich + bias bias^T (:func:`_eiv_bias`; with the stage-1
    residual as u -- sensor noise plus link-model error -- the bias is over- rather than
    under-estimated, so it is added to the covariance, not subtracted from theta).
    If the torque-sensor signal of this joint is too small against the noise to fix
    b = 1/(1 - xi) to XI_REL_STD_MAX (e.g. an unloaded wrist joint), xi is not identifiable:
    it is fixed at 0, its variance is NaN and xi_identified is False; the other coefficients
    then absorb xi tau'_r, and the absorption for xi = XI_PLAUSIBLE_MAX is added to their
    covariance (and to the a's) like a bias.
    """
    k = M.shape[1]
    m = Phi.shape[1]
    if start is None:
        start = _linear_start(tau_m, tau_r, Phi, names[k:], where, serial, u, udd)
    sol, sb = start
    b = sol[0]
    xi_identified = bool(b > 0 and sb < XI_REL_STD_MAX * b)

    def c5(th, z):
        return th[-1] * udd if udd is not None and not z[-1] else 0.0

    if not xi_identified:
        sol_c, *_ = np.linalg.lstsq(Phi, tau_m - tau_r, rcond=None)
        r = tau_r + Phi @ sol_c - tau_m
        Psi_c = _influence(Phi, r, where, names[k:])
        cov_c, tau_c = _serial_cov(Psi_c, serial)
        bias = np.zeros(k + m)
        dom = np.zeros(k + m, bool)
        if u is not None:
            Jn = _noise_columns(u, udd, np.zeros((Phi.shape[0], 0)), m)
            bias[k:], dom[k:] = _eiv_bias(Phi, Jn, lambda z: u + c5(sol_c, z))
        # c absorbs xi tau'_r = (b - 1) tau_r with b = 1/(1 - xi) unknown: add the largest
        # plausible absorption (xi = XI_PLAUSIBLE_MAX) in quadrature
        absorb, *_ = np.linalg.lstsq(Phi, tau_r * (1.0 / (1.0 - XI_PLAUSIBLE_MAX) - 1.0),
                                     rcond=None)
        cov = np.full((k + m,) * 2, np.nan)
        cov[k:, k:] = cov_c + np.outer(bias[k:], bias[k:]) + np.outer(absorb, absorb)
        cov[dom, :] = np.nan
        cov[:, dom] = np.nan
        Psi = np.concatenate([np.zeros((Phi.shape[0], k)), Psi_c], axis=1)
        return (np.concatenate([np.zeros(k), sol_c]), cov, float(np.sqrt(np.mean(r ** 2))),
                False, Psi, np.concatenate([np.full(k, np.nan), tau_c]),
                np.stack([bias, np.concatenate([np.zeros(k), absorb])]), dom)

    def resid(th):
        return tau_r * _gain(M, th[:k], m_sharp)[0] + Phi @ th[k:] - tau_m

    def jac(th):
        return np.column_stack([tau_r[:, None] * _gain(M, th[:k], m_sharp)[1], Phi])

    if k == 1 and np.all(M == 1.0):          # linear variant: exact in b, map back
        theta = np.concatenate([[1.0 - 1.0 / b], sol[1:]])
    else:
        theta0 = np.concatenate([np.full(k, (1.0 - 1.0 / b) / k), sol[1:]])
        theta = _gauss_newton(resid, jac, theta0, k,
                              lambda xi: _feasible(M, xi, m_sharp), where)
    if not _feasible(M, theta[:k], m_sharp):
        raise ValueError(f"{where}: fitted reducer friction {dict(zip(names[:k], theta[:k]))} "
                         f"makes 1 - xi <= 0 (the joint would transmit no torque); the data do "
                         f"not support this friction variant")
    r = resid(theta)
    J = jac(theta)
    Psi = _influence(J, r, where, names)
    cov, tau = _serial_cov(Psi, serial)
    bias = np.zeros(k + m)
    dom = np.zeros(k + m, bool)
    if u is not None:
        h, dh = _gain(M, theta[:k], m_sharp)
        Jn = _noise_columns(u, udd, dh, m)
        bias, dom = _eiv_bias(J, Jn, lambda z: h * u + c5(theta, z))
        cov = cov + np.outer(bias, bias)
        cov[dom, :] = np.nan
        cov[:, dom] = np.nan
    return theta, cov, float(np.sqrt(np.mean(r ** 2))), True, Psi, tau, bias[None], dom


def _paper_a(theta: np.ndarray, Psi: np.ndarray, xi_identified: bool, serial="auto",
             biases: np.ndarray | None = None, dominated: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """Linear variant: a1 = xi, a_k = (1 - xi) c_k, std by the delta method applied to the
    influence series (Psi_a = Psi G^T, G = da/dtheta), so that the serial correction of
    :func:`_serial_cov` uses each a's own autocorrelation time; the bias vectors `biases`
    (b, p) of :func:`_fit_stage2_joint` (G bias) are added in quadrature as for theta, and a
    coefficient whose column is dominated by the sensor noise (`dominated`, theta order) gets
    std NaN. a1's std is NaN if xi was not identified (fixed at 0); without the compliance
    column a5 = 0 with std 0."""
    xi, c = theta[0], theta[1:]
    a = np.concatenate([[xi], (1.0 - xi) * c])
    G = np.zeros((a.size, theta.size))
    G[0, 0] = 1.0
    G[1:, 0] = -c
    G[1:, 1:] = np.eye(c.size) * (1.0 - xi)
    Psi_a = Psi @ G.T
    bias_a = (np.atleast_2d(biases) @ G.T if biases is not None
              else np.zeros((1, a.size)))                                   # (b, 5)
    if not xi_identified:                            # a1 fixed at 0: no influence series
        Psi_a, bias_a = Psi_a[:, 1:], bias_a[:, 1:]
    a_cov, _ = _serial_cov(Psi_a, serial, n_params=Psi.shape[1] - (0 if xi_identified else 1))
    a_std = np.sqrt(np.clip(np.diag(a_cov) + np.sum(bias_a ** 2, axis=0), 0, None))
    if not xi_identified:
        a_std = np.concatenate([[np.nan], a_std])
    if dominated is not None:
        a_std = np.where(dominated, np.nan, a_std)
    if a.size < 5:                                   # no compliance column: a5 = 0 by choice
        a = np.concatenate([a, [0.0]])
        a_std = np.concatenate([a_std, [0.0]])
    return a, a_std


# --------------------------------------------------------------------------------------------
# improved model
# --------------------------------------------------------------------------------------------
class ImprovedModel:
    """Paper §1.2 / §2.3.2: two-stage identification with the harmonic-drive joint model.

    Stage 1: p_r = [p_b, f_lc, f_lv] from the torque sensor tau_j (estimator as in the paper: WLS).
    Stage 2: per joint, the reducer friction (xi) and the motor-side coefficients
    c = [f_mc, f_mv, J'_m, J'_m/K] from tau'_m and tau_r (see module docstring).

    Args:
        model, base: RobotModel and its BaseParameters.
        estimator: stage-1 estimator ("wls", "ols", "ridge" or an instance with fit/predict).
        friction_term: reducer-friction variant used for prediction: "linear" (paper),
            "opposing" (always opposes motion), "both", or "auto" (whichever of linear and
            opposing explains the fitting data better). All `variants` are fitted; their RMS
            is in ``compare_friction_terms_``; the one used is ``friction_term_``.
        terms, coulomb_eps: link-side friction columns of stage 1 (friction.joint_columns).
        load_eps: [rad/s] smoothing of sign(qd) in the opposing reducer-friction term.
        compliance: include the taudd_r (compliance) column (the paper's a5).
        serial: stage-2 uncertainty: "auto" (default) corrects for serially correlated residuals
            (processed data are low-pass filtered and smoothed) by each coefficient's integrated
            autocorrelation time; None assumes independent samples (see :func:`_serial_cov`).
            Stage 1 takes its own setting from the estimator (estimators.py, ``serial=``).
        errors_in_variables: add the estimated bias from the noise of the measured tau_r (a
            stage-2 regressor) to the stage-2 covariance (default True; see
            :func:`_fit_stage2_joint`); False ignores it.

    After :meth:`fit`: ``stage1_`` (fitted estimator: params_, std_, ...), ``names1_``,
    ``friction_term_`` (variant used), ``stage2_`` (its Stage2Result), ``stage2_all_``
    (variant -> Stage2Result),
    ``compare_friction_terms_`` (dict), ``params_`` (stage-1 parameters).
    """

    def __init__(self, model, base, estimator="wls", friction_term: str = "linear", *,
                 terms=("viscous", "coulomb"), coulomb_eps: float = 0.0, load_eps: float = 0.02,
                 compliance: bool = True, variants=FRICTION_VARIANTS,
                 serial: str | None = "auto", errors_in_variables: bool = True):
        if friction_term not in FRICTION_VARIANTS + ("auto",):
            raise ValueError(f"unknown friction_term {friction_term!r}; choose one of "
                             f"{FRICTION_VARIANTS + ('auto',)}")
        bad = [v for v in variants if v not in FRICTION_VARIANTS]
        if bad:
            raise ValueError(f"unknown friction variant(s) {bad}; choose from {FRICTION_VARIANTS}")
        if not load_eps > 0:
            raise ValueError(f"load_eps must be > 0 [rad/s], got {load_eps!r}")
        self.model = model
        self.base = base
        self.estimator = estimator
        self.friction_term = friction_term
        self.terms = tuple(terms)
        self.coulomb_eps = float(coulomb_eps)
        self.load_eps = float(load_eps)
        self.compliance = bool(compliance)
        self.serial = _check_serial(serial)
        self.errors_in_variables = bool(errors_in_variables)
        need = ("linear", "opposing") if friction_term == "auto" else (friction_term,)
        self.variants = tuple(dict.fromkeys(tuple(variants) + need))

    # -- stage 1 ---------------------------------------------------------------------------
    def design(self, d) -> np.ndarray:
        """(N, n, p) stage-1 regressor (same columns as the simplified model's, see
        :func:`design_from`)."""
        W, _ = design_from(self.model, self.base, d, terms=self.terms,
                           coulomb_eps=self.coulomb_eps)
        return W

    def fit(self, d, W: np.ndarray | None = None) -> "ImprovedModel":
        """Stage 1 on ``d.tau_j``, stage 2 on ``d.tau_m`` and ``d.tau_j``."""
        n = self.model.n
        W = _given_design(self, d, W)
        names = design_matrix_names(self.model, self.base, self.terms)
        N = W.shape[0]
        tau_j = _channel(d, "tau_j", n, N)
        tau_m = _channel(d, "tau_m", n, N)
        self.stage1_ = _make_estimator(self.estimator).fit(
            W, tau_j, names=names, joint_names=list(self.model.joint_names))
        self.params_ = np.asarray(self.stage1_.params_, dtype=float)
        self.std_ = np.asarray(self.stage1_.std_, dtype=float)
        self.names1_ = list(names)

        _, qd, qdd = _states(d, n)
        t = _time(d, N)
        taudd = second_derivative(t, tau_j) if self.compliance else None
        Phi = _phi(qd, qdd, taudd, self.coulomb_eps, self.compliance,
                   coulomb_column(d, n, self.coulomb_eps))
        s = _direction(d, qd, self.load_eps)
        s_sharp = (np.tanh(qd / self.load_eps) if getattr(d, "filter_chain", None) is not None
                   else None)
        g = np.sign(tau_j)
        phi_names = list(PHI_NAMES[:Phi.shape[2]])
        self.stage2_all_ = {}
        if self.errors_in_variables:
            # noise proxy of the measured tau_r: the stage-1 residual (sensor noise + link-model
            # error, so the bias bound it gives is conservative)
            u = tau_j - W @ self.params_
            udd = second_derivative(t, u) if self.compliance else None
        else:
            u = udd = None

        def col(x, j):
            return None if x is None else x[:, j]
        starts = [_linear_start(tau_m[:, j], tau_j[:, j], Phi[:, j], phi_names,
                                f"stage 2, joint {self.model.joint_names[j]}", self.serial,
                                col(u, j), col(udd, j))
                  for j in range(n)]
        for variant in self.variants:
            res = Stage2Result(variant)
            for j in range(n):
                jn = self.model.joint_names[j]
                M = _multipliers(variant, s[:, j], g[:, j])
                nm = _xi_names(variant) + phi_names
                try:
                    th, cov, rms, ok, Psi, tau, biases, dom = _fit_stage2_joint(
                        tau_m[:, j], tau_j[:, j], Phi[:, j], M, nm,
                        f"stage 2 ({variant}), joint {jn}", start=starts[j], serial=self.serial,
                        u=col(u, j), udd=col(udd, j),
                        m_sharp=None if s_sharp is None else s_sharp[:, j] * g[:, j])
                except ValueError:
                    if variant == self.friction_term or (self.friction_term == "auto"
                                                         and variant == "linear"):
                        raise
                    res = None
                    break
                sj = Stage2Joint(jn, variant, nm, th, cov, rms, N, xi_identified=ok,
                                 tau_int=tau, eiv_bias=biases[0], noise_dominated=dom)
                if variant == "linear":
                    sj.a, sj.a_std = _paper_a(th, Psi, ok, self.serial, biases, dom)
                res.joints.append(sj)
            if res is not None:
                self.stage2_all_[variant] = res
        cmp = {v: r.rms_overall for v, r in self.stage2_all_.items()}
        per_joint = {v: r.rms for v, r in self.stage2_all_.items()}
        two = {v: cmp[v] for v in ("linear", "opposing") if v in cmp}
        self.compare_friction_terms_ = {
            "rms": cmp, "rms_per_joint": per_joint,
            "better": min(two, key=two.get) if two else None,
            "note": "residual RMS of tau'_m [N*m] on the fitting data (stage 2, measured tau_r)"}
        self.friction_term_ = (self.compare_friction_terms_["better"]
                               if self.friction_term == "auto" else self.friction_term)
        self.stage2_ = self.stage2_all_[self.friction_term_]
        return self

    # -- prediction --------------------------------------------------------------------------
    def predict_tau_r(self, d, W: np.ndarray | None = None) -> np.ndarray:
        """Stage-1 prediction T_rp of the torque-sensor reading (N, n) [N*m]."""
        _check_fitted(self, "ImprovedModel")
        W = _given_design(self, d, W)
        return W @ self.params_

    def prediction_terms(self, d, *, tau_r: str = "model", W: np.ndarray | None = None,
                         variant: str | None = None) -> dict:
        """Pieces of the improved model's motor torque on the trajectory of `d`.

        Returns dict (arrays (N, n) unless noted): ``Tr`` the torque-sensor torque used (stage-1
        T_rp, or the measured ``d.tau_j`` for tau_r="measured"), ``Mxi`` the reducer-friction
        multiplier (tau'_r = Tr / (1 - Mxi)), ``Phi`` (N, n, m) the stage-2 columns, ``c`` (n, m)
        their coefficients, ``u`` = Phi c the motor-side torque, ``W`` the stage-1 design.
        """
        _check_fitted(self, "ImprovedModel")
        variant = variant or self.friction_term_
        if variant not in self.stage2_all_:
            raise ValueError(f"friction variant {variant!r} was not fitted "
                             f"(fitted: {sorted(self.stage2_all_)})")
        n = self.model.n
        _, qd, qdd = _states(d, n)
        N = qd.shape[0]
        taudd = None
        sgn = coulomb_column(d, n, self.coulomb_eps)
        if tau_r == "model":
            W = _given_design(self, d, W)
            Tr = W @ self.params_
            if self.compliance:
                # the sensor torque is a spring torque and cannot jump: leave the step of a hard
                # sign(qd) Coulomb column out of its second derivative (it would be a spike);
                # a parallel-filtered Coulomb column is smooth like the filtered measurement the
                # stage-2 fit differentiated, and stays in
                keep = (np.ones(W.shape[2], bool) if sgn is not None else
                        ~coulomb_mask(self.model, self.base, self.terms, self.coulomb_eps))
                taudd = second_derivative(_time(d, N), W[..., keep] @ self.params_[keep])
        elif tau_r == "measured":
            Tr = _channel(d, "tau_j", n, N)
            if self.compliance:
                taudd = second_derivative(_time(d, N), Tr)
        else:
            raise ValueError(f"tau_r must be 'model' or 'measured', got {tau_r!r}")
        Phi = _phi(qd, qdd, taudd, self.coulomb_eps, self.compliance, sgn)
        s = _direction(d, qd, self.load_eps)
        g = np.sign(Tr)
        P = self.stage2_all_[variant].params               # (n, k + m)
        k = len(_xi_names(variant))
        xi, c = P[:, :k], P[:, k:]
        u = np.einsum("Njm,jm->Nj", Phi, c)
        if variant == "linear":
            Mxi = np.broadcast_to(xi[:, 0], (N, n))
        elif getattr(d, "filter_chain", None) is not None:
            # parallel-filtered direction: the affine law of _gain, as Mxi = 1 - 1/h
            s_sharp = np.tanh(qd / self.load_eps)
            Mxi = np.column_stack([
                1.0 - 1.0 / _gain(_multipliers(variant, s[:, j], g[:, j]), xi[j],
                                  s_sharp[:, j] * g[:, j])[0] for j in range(n)])
        elif variant == "opposing":
            Mxi = s * g * xi[:, 0]
        else:
            Mxi = xi[:, 0] + s * g * xi[:, 1]
        return {"Tr": Tr, "Mxi": Mxi, "Phi": Phi, "c": c, "u": u, "W": W}

    def predict(self, d, route: str = "closed_form", simplified: SimplifiedModel | None = None,
                *, tau_r: str = "model", W: np.ndarray | None = None,
                variant: str | None = None, T_pre: np.ndarray | None = None) -> np.ndarray:
        """Predicted motor torque tau'_m (N, n) [N*m] on the trajectory of `d`.

        Args:
            route: "closed_form" or "eq24" (needs `simplified` or `T_pre`).
            simplified: fitted SimplifiedModel for eq. (24).
            tau_r: "model" (stage-1 prediction T_rp, as for a trajectory not yet run) or
                "measured" (``d.tau_j``).
            W: precomputed stage-1 design (N, n, p) of `d` (shared with the simplified model).
            variant: friction variant (default: ``friction_term_``).
            T_pre: the simplified model's prediction (N, n), if already computed.
        """
        _check_fitted(self, "ImprovedModel")
        if route not in ROUTES:
            raise ValueError(f"unknown route {route!r}; choose one of {ROUTES}")
        pt = self.prediction_terms(d, tau_r=tau_r, W=W, variant=variant)
        Tr, Mxi, u = pt["Tr"], pt["Mxi"], pt["u"]
        if route == "closed_form":
            return Tr / (1.0 - Mxi) + u
        if T_pre is None:
            if simplified is None:
                raise ValueError("route 'eq24' needs the simplified model's prediction: pass "
                                 "simplified=<fitted SimplifiedModel> or T_pre=(N, n) array")
            T_pre = simplified.predict(d, pt["W"] if _same_columns(self, simplified) else None)
        T_pre = np.asarray(T_pre, dtype=float)
        if T_pre.shape != Tr.shape:
            raise ValueError(f"T_pre has shape {T_pre.shape}, expected {Tr.shape}")
        # dtau = tau'_m - tau_r evaluated with tau'_m := T_pre (paper eq. 24):
        #   dtau = Mxi * T_pre + (1 - Mxi) * u   (for "linear": a1 T_pre + a2 sign + ... + a5 taudd)
        return Tr + Mxi * T_pre + (1.0 - Mxi) * u


def _same_columns(a, b) -> bool:
    """True if two fitted models use the same design matrix (model, base, terms, eps)."""
    return (a.model is b.model and a.base is b.base and tuple(a.terms) == tuple(b.terms)
            and a.coulomb_eps == b.coulomb_eps)
