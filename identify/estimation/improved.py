"""The paper's two joint models: *simplified* (Coulomb-viscous) and *improved* (harmonic drive).

    from identify.estimation import SimplifiedModel, ImprovedModel
    sm = SimplifiedModel(model, base).fit(d)            # tau'_m = W_b p_b + f_c sign(qd) + f_v qd
    im = ImprovedModel(model, base, friction_term="linear").fit(d)
    tau_m_hat = im.predict(d_val, route="closed_form")  # or route="eq24", simplified=sm

`processed` is any object with the attributes of :class:`identify.estimation.processing.Processed`: ``t`` (N,) [s] and
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

Parallel filtering (docs/joint_models.md): when `processed` carries the processing's filter chain
(``processed.filter_chain``, ``processed.qd_full``; ProcessingSettings.filter_regressor, the default), every
sign(qd) above -- the Coulomb columns of the simplified model and of stage 1, stage 2's Coulomb
column and the opposing direction s -- is evaluated on the unfiltered grid and passed through
exactly the torques' filter (design.coulomb_column, stage2.direction, stage2.reducer_gain), which
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
import numpy as np
from identify.common.estimator import EstimatorMixin, check_is_fitted
from .design import (channel, column_kinds, coulomb_column, coulomb_mask, design_from,
                     design_matrix_names, given_design, second_derivative, states, time_stamps)
from .estimators import check_serial, make_estimator
from .simplified import SimplifiedModel
from .stage2 import (FRICTION_VARIANTS, PHI_NAMES, Stage2Joint, Stage2Result, direction,
                     fit_stage2_joint, linear_start, multipliers, paper_a, phi_columns,
                     reducer_gain, xi_names)

__all__ = ["ImprovedModel", "ROUTES", "same_design"]



ROUTES = ("closed_form", "eq24")


def _check_design_filtering(obj, processed, W: np.ndarray) -> None:
    """A given design must carry the Coulomb column the data imply: the parallel-filtered one
    (:func:`coulomb_column`) when `processed` carries a filter chain. A plain sign(qd) there is a hard
    step whose second derivative (the compliance term of the prediction) is a spike at every
    reversal -- the benchmark that did this printed an improved model 30x worse than the
    simplified one. ValueError naming the fix."""
    d = processed
    sgn = coulomb_column(d, obj.model.n, obj.coulomb_eps) if "coulomb" in obj.terms else None
    if sgn is None:
        return
    cm = column_kinds(obj.model, obj.base, obj.terms) == "coulomb"
    got = np.asarray(W)[..., cm].sum(axis=-1)                 # (N, n): each row's own column
    if got.shape == sgn.shape and not np.allclose(got, sgn, atol=1e-9, rtol=1e-6):
        raise ValueError("the design W given with these data has a Coulomb column that is not "
                         "the parallel-filtered one of their filter chain; build it with "
                         "design_from(model, base, d) (or process with filter_regressor=False)")


# --------------------------------------------------------------------------------------------
# improved model
# --------------------------------------------------------------------------------------------
class ImprovedModel(EstimatorMixin):
    """Paper §1.2 / §2.3.2: two-stage identification with the harmonic-drive joint model.

    Stage 1: p_r = [p_b, f_lc, f_lv] from the torque sensor tau_j (estimator as in the paper: WLS).
    Stage 2: per joint, the reducer friction (xi) and the motor-side coefficients
    c = [f_mc, f_mv, J'_m, J'_m/K] from tau'_m and tau_r (see module docstring).

    Args (stored as given, checked by :meth:`fit`):
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
            autocorrelation time; None assumes independent samples (see :func:`serial_cov`).
            Stage 1 takes its own setting from the estimator (estimators.py, ``serial=``).
        errors_in_variables: add the estimated bias from the noise of the measured tau_r (a
            stage-2 regressor) to the stage-2 covariance (default True; see
            :func:`~identify.estimation.stage2.fit_stage2_joint`); False ignores it.

    After :meth:`fit`: ``stage1_`` (fitted estimator: params_, std_, ...), ``names1_``,
    ``friction_term_`` (variant used), ``stage2_`` (its Stage2Result), ``stage2_all_``
    (variant -> Stage2Result), ``variants_`` (the variants fitted: `variants` plus those
    "auto" compares), ``compare_friction_terms_`` (dict), ``params_`` / ``std_`` (stage-1
    parameters).
    """

    def __init__(self, model, base, estimator="wls", friction_term: str = "linear", *,
                 terms=("viscous", "coulomb"), coulomb_eps: float = 0.0, load_eps: float = 0.02,
                 compliance: bool = True, variants=FRICTION_VARIANTS,
                 serial: str | None = "auto", errors_in_variables: bool = True):
        self.model = model
        self.base = base
        self.estimator = estimator
        self.friction_term = friction_term
        self.terms = terms
        self.coulomb_eps = coulomb_eps
        self.load_eps = load_eps
        self.compliance = compliance
        self.variants = variants
        self.serial = serial
        self.errors_in_variables = errors_in_variables

    def _fitted_variants(self) -> tuple:
        """The settings checked (ValueError naming the bad one); returns the friction variants
        to fit: `variants` plus those `friction_term` needs."""
        ft = self.friction_term
        if ft not in FRICTION_VARIANTS + ("auto",):
            raise ValueError(f"unknown friction_term {ft!r}; choose one of "
                             f"{FRICTION_VARIANTS + ('auto',)}")
        bad = [v for v in self.variants if v not in FRICTION_VARIANTS]
        if bad:
            raise ValueError(f"unknown friction variant(s) {bad}; choose from {FRICTION_VARIANTS}")
        if not self.load_eps > 0:
            raise ValueError(f"load_eps must be > 0 [rad/s], got {self.load_eps!r}")
        check_serial(self.serial)
        need = ("linear", "opposing") if ft == "auto" else (ft,)
        return tuple(dict.fromkeys(tuple(self.variants) + need))

    # -- stage 1 ---------------------------------------------------------------------------
    def design(self, processed) -> np.ndarray:
        """(N, n, p) stage-1 regressor (same columns as the simplified model's, see
        :func:`design_from`)."""
        d = processed
        W, _ = design_from(self.model, self.base, d, terms=self.terms,
                           coulomb_eps=self.coulomb_eps)
        return W

    def fit(self, processed, *, W: np.ndarray | None = None) -> "ImprovedModel":
        """Stage 1 on ``processed.tau_j``, stage 2 on ``processed.tau_m`` and ``.tau_j``.

        `processed`: :class:`~identify.estimation.processing.Processed` (or any object with its
        channels); `W` (N, n, p): its precomputed :meth:`design` (optional). Returns self."""
        variants = self._fitted_variants()
        d = processed
        n = self.model.n
        W = given_design(self, d, W)
        _check_design_filtering(self, d, W)
        names = design_matrix_names(self.model, self.base, self.terms)
        N = W.shape[0]
        tau_j = channel(d, "tau_j", n, N)
        tau_m = channel(d, "tau_m", n, N)
        # samples near velocity reversals (stick-slip: no constant-parameter Coulomb law) are
        # left out of stage 1 when the processing marked them (Processed.fit_mask)
        mask = getattr(d, "fit_mask", None)
        kw = {} if mask is None else {"mask": mask}
        self.stage1_ = make_estimator(self.estimator).fit(
            W, tau_j, names=names, joint_names=list(self.model.joint_names), **kw)
        self.params_ = np.asarray(self.stage1_.params_, dtype=float)
        self.std_ = np.asarray(self.stage1_.std_, dtype=float)
        self.names1_ = list(names)
        self.variants_ = variants
        self.stage2_all_ = self._fit_stage2(d, W, tau_j, tau_m, variants)
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

    def _fit_stage2(self, processed, W, tau_j, tau_m, variants) -> dict:
        """Stage 2 of every joint for each friction variant: {variant: Stage2Result}. A variant
        the data do not support (ValueError) is left out, unless it is the one asked for."""
        d = processed
        n = self.model.n
        _, qd, qdd = states(d, n)
        N = qd.shape[0]
        t = time_stamps(d, N)
        taudd = second_derivative(t, tau_j) if self.compliance else None
        Phi = phi_columns(qd, qdd, taudd, self.coulomb_eps, self.compliance,
                          coulomb_column(d, n, self.coulomb_eps))
        s = direction(d, qd, self.load_eps)
        s_sharp = (np.tanh(qd / self.load_eps) if getattr(d, "filter_chain", None) is not None
                   else None)
        g = np.sign(tau_j)
        phi_names = list(PHI_NAMES[:Phi.shape[2]])
        if self.errors_in_variables:
            # noise proxy of the measured tau_r: the stage-1 residual (sensor noise + link-model
            # error, so the bias bound it gives is conservative)
            u = tau_j - W @ self.params_
            udd = second_derivative(t, u) if self.compliance else None
        else:
            u = udd = None

        def col(x, j):
            return None if x is None else x[:, j]
        starts = [linear_start(tau_m[:, j], tau_j[:, j], Phi[:, j], phi_names,
                               f"stage 2, joint {self.model.joint_names[j]}", self.serial,
                               col(u, j), col(udd, j))
                  for j in range(n)]
        out = {}
        for variant in variants:
            res = Stage2Result(variant)
            for j in range(n):
                jn = self.model.joint_names[j]
                M = multipliers(variant, s[:, j], g[:, j])
                nm = xi_names(variant) + phi_names
                try:
                    th, cov, rms, ok, Psi, tau, biases, dom = fit_stage2_joint(
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
                    sj.a, sj.a_std = paper_a(th, Psi, ok, self.serial, biases, dom)
                res.joints.append(sj)
            if res is not None:
                out[variant] = res
        return out

    # -- prediction --------------------------------------------------------------------------
    def predict_tau_r(self, processed, W: np.ndarray | None = None) -> np.ndarray:
        """Stage-1 prediction T_rp of the torque-sensor reading (N, n) [N*m]."""
        d = processed
        check_is_fitted(self)
        W = given_design(self, d, W)
        return W @ self.params_

    def prediction_terms(self, processed, *, tau_r: str = "model", W: np.ndarray | None = None,
                         variant: str | None = None) -> dict:
        """Pieces of the improved model's motor torque on the trajectory of `processed`.

        Returns dict (arrays (N, n) unless noted): ``Tr`` the torque-sensor torque used (stage-1
        T_rp, or the measured ``processed.tau_j`` for tau_r="measured"), ``Mxi`` the reducer-friction
        multiplier (tau'_r = Tr / (1 - Mxi)), ``Phi`` (N, n, m) the stage-2 columns, ``c`` (n, m)
        their coefficients, ``u`` = Phi c the motor-side torque, ``W`` the stage-1 design.
        """
        d = processed
        check_is_fitted(self)
        variant = variant or self.friction_term_
        if variant not in self.stage2_all_:
            raise ValueError(f"friction variant {variant!r} was not fitted "
                             f"(fitted: {sorted(self.stage2_all_)})")
        n = self.model.n
        _, qd, qdd = states(d, n)
        N = qd.shape[0]
        taudd = None
        sgn = coulomb_column(d, n, self.coulomb_eps)
        if tau_r == "model":
            W = given_design(self, d, W)
            _check_design_filtering(self, d, W)
            Tr = W @ self.params_
            if self.compliance:
                # the sensor torque is a spring torque and cannot jump: leave the step of a hard
                # sign(qd) Coulomb column out of its second derivative (it would be a spike);
                # a parallel-filtered Coulomb column is smooth like the filtered measurement the
                # stage-2 fit differentiated, and stays in
                keep = (np.ones(W.shape[2], bool) if sgn is not None else
                        ~coulomb_mask(self.model, self.base, self.terms, self.coulomb_eps))
                taudd = second_derivative(time_stamps(d, N), W[..., keep] @ self.params_[keep])
        elif tau_r == "measured":
            Tr = channel(d, "tau_j", n, N)
            if self.compliance:
                taudd = second_derivative(time_stamps(d, N), Tr)
        else:
            raise ValueError(f"tau_r must be 'model' or 'measured', got {tau_r!r}")
        Phi = phi_columns(qd, qdd, taudd, self.coulomb_eps, self.compliance, sgn)
        s = direction(d, qd, self.load_eps)
        g = np.sign(Tr)
        P = self.stage2_all_[variant].params               # (n, k + m)
        k = len(xi_names(variant))
        xi, c = P[:, :k], P[:, k:]
        u = np.einsum("Njm,jm->Nj", Phi, c)
        if variant == "linear":
            Mxi = np.broadcast_to(xi[:, 0], (N, n))
        elif getattr(d, "filter_chain", None) is not None:
            # parallel-filtered direction: the affine law of reducer_gain, as Mxi = 1 - 1/h
            s_sharp = np.tanh(qd / self.load_eps)
            Mxi = np.column_stack([
                1.0 - 1.0 / reducer_gain(multipliers(variant, s[:, j], g[:, j]), xi[j],
                                  s_sharp[:, j] * g[:, j])[0] for j in range(n)])
        elif variant == "opposing":
            Mxi = s * g * xi[:, 0]
        else:
            Mxi = xi[:, 0] + s * g * xi[:, 1]
        return {"Tr": Tr, "Mxi": Mxi, "Phi": Phi, "c": c, "u": u, "W": W}

    def predict(self, processed, route: str = "closed_form", simplified: SimplifiedModel | None = None,
                *, tau_r: str = "model", W: np.ndarray | None = None,
                variant: str | None = None, T_pre: np.ndarray | None = None) -> np.ndarray:
        """Predicted motor torque tau'_m (N, n) [N*m] on the trajectory of `processed`.

        Args:
            route: "closed_form" or "eq24" (needs `simplified` or `T_pre`).
            simplified: fitted SimplifiedModel for eq. (24).
            tau_r: "model" (stage-1 prediction T_rp, as for a trajectory not yet run) or
                "measured" (``processed.tau_j``).
            W: precomputed stage-1 design (N, n, p) of `processed` (shared with the simplified model).
            variant: friction variant (default: ``friction_term_``).
            T_pre: the simplified model's prediction (N, n), if already computed.
        """
        d = processed
        check_is_fitted(self)
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
            T_pre = simplified.predict(d, pt["W"] if same_design(self, simplified) else None)
        T_pre = np.asarray(T_pre, dtype=float)
        if T_pre.shape != Tr.shape:
            raise ValueError(f"T_pre has shape {T_pre.shape}, expected {Tr.shape}")
        # dtau = tau'_m - tau_r evaluated with tau'_m := T_pre (paper eq. 24):
        #   dtau = Mxi * T_pre + (1 - Mxi) * u   (for "linear": a1 T_pre + a2 sign + ... + a5 taudd)
        return Tr + Mxi * T_pre + (1.0 - Mxi) * u


def same_design(a, b) -> bool:
    """True if two fitted models use the same design matrix (model, base, terms, eps)."""
    return (a.model is b.model and a.base is b.base and tuple(a.terms) == tuple(b.terms)
            and a.coulomb_eps == b.coulomb_eps)
