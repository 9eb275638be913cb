"""Stage 2 of the improved joint model, per joint: the harmonic-drive relation between motor torque
and the link-side torque (reducer friction variants, motor Coulomb/viscous friction, rotor inertia,
compliance term), fitted by Gauss-Newton with a sandwich covariance that includes serial
correlation and errors-in-variables; the paper's a1..a5 from the fitted coefficients.
The derivation is in docs/joint_models.md."""
from __future__ import annotations
from dataclasses import dataclass, field
import numpy as np
import scipy.linalg as sla
from .estimators import integrated_autocorr_time
from .design import coulomb_column

__all__ = ["FRICTION_VARIANTS", "PHI_NAMES", "PHI_UNITS", "Stage2Joint", "Stage2Result",
           "multipliers", "xi_names", "phi_columns", "direction", "serial_cov", "reducer_gain",
           "errors_in_variables_bias", "linear_start", "fit_stage2_joint", "paper_a",
           "XI_REL_STD_MAX", "XI_SNR_MIN", "XI_PLAUSIBLE_MAX", "NOISE_FRACTION_MAX"]


# physical meaning of the stage-2 coefficients c_k (docs/joint_models.md)
FRICTION_VARIANTS = ("linear", "opposing", "both")
PHI_NAMES = ("f_mc", "f_mv", "J_m", "J_m/K")


PHI_UNITS = ("N*m", "N*m*s/rad", "kg*m^2", "kg*m^2*rad/(N*m)")


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


def multipliers(variant: str, s: np.ndarray, g: np.ndarray) -> np.ndarray:
    """(N, k) multipliers M of the reducer-friction coefficients: h = 1 / (1 - M @ xi)."""
    if variant == "linear":
        return np.ones((s.shape[0], 1))
    if variant == "opposing":
        return (s * g)[:, None]
    if variant == "both":
        return np.stack([np.ones_like(s), s * g], axis=1)
    raise ValueError(f"unknown friction_term {variant!r}; choose one of {FRICTION_VARIANTS}")


def xi_names(variant: str) -> list[str]:
    return {"linear": ["xi_lin"], "opposing": ["xi_opp"], "both": ["xi_lin", "xi_opp"]}[variant]


def phi_columns(qd, qdd, taudd_r, coulomb_eps: float, compliance: bool,
         sgn: np.ndarray | None = None) -> np.ndarray:
    """(N, n, 4 or 3) stage-2 columns [sign(qd), qd, qdd, taudd_r] per joint; `sgn` (N, n):
    the parallel-filtered Coulomb column (:func:`coulomb_column`) replacing sign(qd)."""
    if sgn is None:
        sgn = np.sign(qd) if coulomb_eps <= 0 else np.tanh(qd / coulomb_eps)
    cols = [sgn, qd, qdd] + ([taudd_r] if compliance else [])
    return np.stack(cols, axis=2)


def direction(processed, qd: np.ndarray, load_eps: float) -> np.ndarray:
    """(N, n) smoothed direction of motion tanh(qd / load_eps) of the opposing reducer friction,
    parallel-filtered like the Coulomb column (:func:`coulomb_column`) when `processed` carries the
    filter chain: the reducer friction xi |tau'_r| s is a step at every reversal, like Coulomb
    friction (used through the affine law of :func:`reducer_gain`)."""
    d = processed
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


def serial_cov(Psi: np.ndarray, serial, n_params: int | None = None
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
#: ... or the joint's torque-sensor signal is this many times the noise (of tau_r: the stage-1
#: residual; of tau_m: the differenced residual of the linear start): then a large std of b comes from the linear start's misfit of a nonlinear loss,
#: not from a small signal, and fixing xi = 0 would drop the loss of a loaded joint (joint 2
#: of the reference arm: signal/noise ~250, relative std of b 0.104 on one trajectory, and a
#: stage-2 RMS of 7 N*m with xi fixed). Measured on the twin: wrist joint 6 ~10, others >= 16.
XI_SNR_MIN = 50.0


XI_PLAUSIBLE_MAX = 0.8  # largest reducer friction considered (the paper's Table 2: a1 <= 0.804)


def reducer_gain(M: np.ndarray, xi: np.ndarray, m_sharp: np.ndarray | None = None
          ) -> tuple[np.ndarray, np.ndarray]:
    """Reducer gain h = tau'_r / tau_r (N,) and its derivative dh/dxi (N, k).

    Sharp multipliers M (N, k) (:func:`multipliers`; the opposing column m = s g is +-1 away
    from reversals): h = 1 / (1 - M xi). With parallel filtering, M's opposing column (the
    last one of the opposing and both variants) is the filtered direction m_f = g H[s]
    (:func:`direction`) and `m_sharp` (N,) the unfiltered m. The law is not linear in m, so
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
    1 - xi_lin - |xi_opp| > 0 (the parallel-filtered law of :func:`reducer_gain`)."""
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


def errors_in_variables_bias(J: np.ndarray, Jn: np.ndarray, eps_of
                             ) -> tuple[np.ndarray, np.ndarray]:
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


def linear_start(tau_m, tau_r, Phi, names_c, where, serial="auto", u=None, udd=None):
    """Linear fit tau_m = b tau_r + Phi c, b = 1/(1 - xi_lin): returns (sol, std of b).

    The std is the serially corrected sandwich (:func:`serial_cov`); with a noise proxy `u` (N,)
    of tau_r (and `udd` its second derivative when Phi has the taudd_r column) the
    errors-in-variables bias of b (:func:`errors_in_variables_bias`) is added in quadrature, and the std is
    inf if the tau_r column is dominated by the noise."""
    A = np.column_stack([tau_r, Phi])
    sol, *_ = np.linalg.lstsq(A, tau_m, rcond=None)
    Psi = _influence(A, tau_m - A @ sol, where, ["1/(1-xi)"] + list(names_c))
    cov_lin, _ = serial_cov(Psi[:, :1], serial, n_params=A.shape[1])
    var_b = cov_lin[0, 0]
    if u is not None:
        Jn = _noise_columns(u, udd, np.ones((A.shape[0], 1)), Phi.shape[1])
        bias, dom = errors_in_variables_bias(A, Jn, lambda z: (sol[0] * u if not z[0] else 0.0 * u)
                              + (sol[-1] * udd if udd is not None and not z[-1] else 0.0))
        var_b = np.inf if dom[0] else var_b + bias[0] ** 2
    return sol, float(np.sqrt(var_b))


def fit_stage2_joint(tau_m, tau_r, Phi, M, names, where, start=None, serial="auto",
                      u=None, udd=None, m_sharp=None):
    """Least squares of tau_m = tau_r h(M, xi) + Phi c for one joint, h = 1 / (1 - M xi)
    (:func:`reducer_gain`; `m_sharp` (N,): the unfiltered opposing multiplier when M's is
    parallel-filtered).

    Args: tau_m, tau_r (N,); Phi (N, m); M (N, k); names (k + m,); start: the joint's
        :func:`linear_start` (shared between variants), computed if None; serial: "auto" or
        None (see :func:`serial_cov`); u (N,): proxy of the measurement noise in tau_r (the
        stage-1 residual) and udd (N,) its second derivative (when Phi has the taudd_r column),
        or None to ignore errors in variables.
    Returns: theta = [xi, c] (k + m,), cov (k + m, k + m), residual RMS [N*m], xi_identified,
        Psi (N, k + m) the influence series (:func:`_influence`; zero in the xi columns if xi is
        not identified), tau (k + m,) integrated autocorrelation time per coefficient [samples],
        biases (b, k + m) bias vectors included in cov as bias bias^T: [0] the estimated
        errors-in-variables bias, [1] (xi not identified only) the xi-absorption bound,
        dominated (k + m,) bool: column dominated by the sensor noise (coefficient not
        identifiable, variance NaN).
    cov = serially corrected sandwich + bias bias^T (:func:`errors_in_variables_bias`; with the stage-1
    residual as u -- sensor noise plus link-model error -- the bias is over- rather than
    under-estimated, so it is added to the covariance, not subtracted from theta).
    If the torque-sensor signal of this joint is too small against the noise to fix
    b = 1/(1 - xi) to XI_REL_STD_MAX (e.g. an unloaded wrist joint), xi is not identifiable
    (unless the signal is XI_SNR_MIN times the noise of tau_r and of tau_m, which the linear
    start's std cannot tell from its own misfit):
    it is fixed at 0, its variance is NaN and xi_identified is False; the other coefficients
    then absorb xi tau'_r, and the absorption for xi = XI_PLAUSIBLE_MAX is added to their
    covariance (and to the a's) like a bias.
    """
    k = M.shape[1]
    m = Phi.shape[1]
    if start is None:
        start = linear_start(tau_m, tau_r, Phi, names[k:], where, serial, u, udd)
    sol, sb = start
    b = sol[0]
    snr = 0.0
    if u is not None:
        # noise: of tau_r (u) and of tau_m (the linear start's residual differenced: its misfit
        # of a nonlinear loss is smooth, the noise is not)
        res = tau_m - np.column_stack([tau_r, Phi]) @ sol
        noise = max(float(np.sqrt(np.mean(u ** 2))),
                    float(np.sqrt(np.mean(np.diff(res) ** 2) / 2.0)), 1e-300)
        snr = float(np.sqrt(np.mean(tau_r ** 2))) / noise
    xi_identified = bool(b > 0 and (sb < XI_REL_STD_MAX * b or snr >= XI_SNR_MIN))

    def c5(th, z):
        return th[-1] * udd if udd is not None and not z[-1] else 0.0

    if not xi_identified:
        return _fit_without_xi(tau_m, tau_r, Phi, k, names, where, serial, u, udd)

    def resid(th):
        return tau_r * reducer_gain(M, th[:k], m_sharp)[0] + Phi @ th[k:] - tau_m

    def jac(th):
        return np.column_stack([tau_r[:, None] * reducer_gain(M, th[:k], m_sharp)[1], Phi])

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
    cov, tau = serial_cov(Psi, serial)
    bias = np.zeros(k + m)
    dom = np.zeros(k + m, bool)
    if u is not None:
        h, dh = reducer_gain(M, theta[:k], m_sharp)
        Jn = _noise_columns(u, udd, dh, m)
        bias, dom = errors_in_variables_bias(J, Jn, lambda z: h * u + c5(theta, z))
        cov = cov + np.outer(bias, bias)
        cov[dom, :] = np.nan
        cov[:, dom] = np.nan
    return theta, cov, float(np.sqrt(np.mean(r ** 2))), True, Psi, tau, bias[None], dom


def _fit_without_xi(tau_m, tau_r, Phi, k, names, where, serial, u, udd):
    """:func:`fit_stage2_joint` of a joint whose xi is not identifiable: xi fixed at 0 (variance
    NaN), tau_m - tau_r = Phi c by least squares, and the absorption of the largest plausible
    xi (XI_PLAUSIBLE_MAX) by c added to c's covariance like a bias. Same returns."""
    m = Phi.shape[1]
    sol_c, *_ = np.linalg.lstsq(Phi, tau_m - tau_r, rcond=None)
    r = tau_r + Phi @ sol_c - tau_m
    Psi_c = _influence(Phi, r, where, names[k:])
    cov_c, tau_c = serial_cov(Psi_c, serial)
    bias = np.zeros(k + m)
    dom = np.zeros(k + m, bool)
    if u is not None:
        Jn = _noise_columns(u, udd, np.zeros((Phi.shape[0], 0)), m)
        bias[k:], dom[k:] = errors_in_variables_bias(
            Phi, Jn, lambda z: u + (sol_c[-1] * udd if udd is not None and not z[-1] else 0.0))
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


def paper_a(theta: np.ndarray, Psi: np.ndarray, xi_identified: bool, serial="auto",
             biases: np.ndarray | None = None, dominated: np.ndarray | None = None
             ) -> tuple[np.ndarray, np.ndarray]:
    """Linear variant: a1 = xi, a_k = (1 - xi) c_k, std by the delta method applied to the
    influence series (Psi_a = Psi G^T, G = da/dtheta), so that the serial correction of
    :func:`serial_cov` uses each a's own autocorrelation time; the bias vectors `biases`
    (b, p) of :func:`fit_stage2_joint` (G bias) are added in quadrature as for theta, and a
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
    a_cov, _ = serial_cov(Psi_a, serial, n_params=Psi.shape[1] - (0 if xi_identified else 1))
    a_std = np.sqrt(np.clip(np.diag(a_cov) + np.sum(bias_a ** 2, axis=0), 0, None))
    if not xi_identified:
        a_std = np.concatenate([[np.nan], a_std])
    if dominated is not None:
        a_std = np.where(dominated, np.nan, a_std)
    if a.size < 5:                                   # no compliance column: a5 = 0 by choice
        a = np.concatenate([a, [0.0]])
        a_std = np.concatenate([a_std, [0.0]])
    return a, a_std
