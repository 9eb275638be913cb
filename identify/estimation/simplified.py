"""The simplified joint model (the paper's baseline): rigid-body base parameters plus per-joint
Coulomb and viscous friction fitted to the motor torque, the drive's losses lumped in."""
from __future__ import annotations

import numpy as np
from identify.common.estimator import EstimatorMixin, check_is_fitted
from .design import BlockDesign, channel, design_from, design_matrix_names, given_design
from .estimators import make_estimator


# --------------------------------------------------------------------------------------------
# simplified model
# --------------------------------------------------------------------------------------------
class SimplifiedModel(EstimatorMixin):
    """Paper §1.1 / §2.3.1: tau'_m = W_b(q, qd, qdd) p_b + f_c sign(qd) + f_v qd, fitted to the
    motor torque by the chosen estimator ("wls" as in the paper, "ols", "ridge" or an instance).

    Settings are stored as given and checked by :meth:`fit`. After :meth:`fit`: ``params_``
    (p,), ``std_`` (p,), ``names_`` (p,), ``estimator_`` (the fitted estimator).
    """

    def __init__(self, model, base, estimator="wls", *, terms=("viscous", "coulomb"),
                 coulomb_eps: float = 0.0):
        self.model = model
        self.base = base
        self.estimator = estimator
        self.terms = terms
        self.coulomb_eps = coulomb_eps

    def design(self, processed) -> np.ndarray:
        """(N, n, p) regressor of the simplified model for processed data `processed`
        (:func:`design_from`: parallel-filtered Coulomb column if `processed` carries the filter chain)."""
        d = processed
        W, _ = design_from(self.model, self.base, d, terms=self.terms,
                           coulomb_eps=self.coulomb_eps, blocks=True)
        return W

    def fit(self, processed, *, W: np.ndarray | None = None) -> "SimplifiedModel":
        """Identify from the motor torque ``processed.tau_m``
        (:class:`~identify.estimation.processing.Processed`).

        `W` (N, n, p): a precomputed :meth:`design` of `processed` (optional). Returns self."""
        d = processed
        n = self.model.n
        W = given_design(self, d, W)
        names = design_matrix_names(self.model, self.base, self.terms)
        tau_m = channel(d, "tau_m", n, W.shape[0])
        if isinstance(W, BlockDesign):          # long logs: least squares in row blocks
            from .streaming import fit_blocks
            if not isinstance(self.estimator, str):
                raise ValueError("a design too large for memory needs estimator ols | wls | ridge")
            self.estimator_ = fit_blocks(lambda: ((Wb, tau_m[sl]) for sl, Wb in W.blocks()),
                                         n, W.shape[2], self.estimator.lower(), names)
            fac = self.estimator_.factors_              # cond of the design, for free
            W._cond = float(np.linalg.cond(fac.combined(np.ones(n))[0]))
        else:
            self.estimator_ = make_estimator(self.estimator).fit(
                W, tau_m, names=names, joint_names=list(self.model.joint_names))
        self.params_ = np.asarray(self.estimator_.params_, dtype=float)
        self.std_ = np.asarray(self.estimator_.std_, dtype=float)
        self.names_ = list(names)
        return self

    def predict(self, processed, W: np.ndarray | None = None) -> np.ndarray:
        """Predicted motor torque tau'_m (N, n) [N*m] on the states of `processed`."""
        d = processed
        check_is_fitted(self)
        W = given_design(self, d, W)
        return W @ self.params_
