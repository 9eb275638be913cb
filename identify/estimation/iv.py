"""Instrumental-variable least squares (Gautier & Janot's IDIM-IV, with the instruments given).

The model is linear, y = W(x) p + e, but the regressor W is built from MEASURED states (encoder
positions differentiated twice and low-pass filtered): its errors are correlated with the
regressor's own columns (errors in variables), and in closed loop the torque noise moves the
states too, so least squares is biased -- typically towards smaller inertial parameters
(attenuation of the acceleration columns). An instrument matrix Z (same shape as W) that is
correlated with the noise-free regressor but not with the errors removes that bias:

    p_iv = (Z~^T W~)^-1 Z~^T y~

with the rows of joint j weighted by 1/sigma_j (two-step, as :class:`~identify.estimation.
estimators.WLS`: sigma_j from an OLS on W). Instruments used here: the regressor evaluated on
the states of a noise-free reference -- the commanded trajectory processed with the same filter
chain (``processing.velocity: command``), or the states simulated with the previous iterate's
parameters (Gautier & Janot) when a simulator is at hand; the estimator does not care which.

Covariance: the sandwich A^-1 (sum_j tau_j s_j^2 Z~_j^T Z~_j) A^-T, A = Z~^T W~, s_j^2 the
weighted residual variance of joint j and tau_j its integrated autocorrelation time (filtered
data are serially correlated). The std are larger than WLS's (IV trades variance for bias).
"""
from __future__ import annotations

import numpy as np

from identify.common.blas import single_thread_blas

from .estimators import (LinearFit, ols_step, prepare_system, apply_mask, check_serial,
                         integrated_autocorr_time, stack_system)

__all__ = ["IV"]


class IV(LinearFit):
    """Instrumental-variable weighted least squares (module docstring).

    Args:
        instruments: (N, n, p) instruments used when :meth:`fit` gets no ``Z`` (so that a
            joint model calling ``fit(W, y, names=..., joint_names=...)`` fits by IV), or None.
        rcond: rank-test threshold of the OLS step (see :class:`~identify.estimation.
            estimators.OLS`).
        serial: "auto" (default): each joint's residual variance inflated by its integrated
            autocorrelation time in the covariance; None: independent samples.
    Fitted attributes: those of :class:`~identify.estimation.estimators.LinearFit`, weights_ (n,)
    = 1/sigma_j, tau_int_ (n,), cond_instruments_ = cond(Z~^T W~)."""

    def __init__(self, instruments=None, rcond: float | None = None,
                 serial: str | None = "auto"):
        self.instruments = instruments
        self.rcond = rcond
        self.serial = serial

    @single_thread_blas()
    def fit(self, W, y, *, Z=None, mask=None, names=None, joint_names=None) -> "IV":
        """W (N, n, p) regressor of the measured states, y (N, n) torques [N*m], Z (N, n, p)
        instruments (the same regressor on noise-free reference states; None: the
        ``instruments`` setting); `mask` (N, n) bool:
        samples fitted (None: all); `names`, `joint_names` as for OLS. Returns self. Raises
        ValueError for instruments of another shape, non-finite ones, or instruments that are
        not correlated with the regressor (Z~^T W~ singular)."""
        serial = check_serial(self.serial)
        Z = self.instruments if Z is None else Z
        if Z is None:
            raise ValueError("IV: no instruments (give Z, or the instruments setting)")
        W = np.asarray(W, float)
        Z = np.asarray(Z, float)
        if Z.shape != W.shape:
            raise ValueError(f"IV: instruments Z have shape {Z.shape}, the regressor W {W.shape}")
        if not np.all(np.isfinite(Z)):
            k = int(np.argwhere(~np.isfinite(Z))[0][0])
            raise ValueError(f"IV: instruments Z are not finite at sample {k}")
        W, y, counts = apply_mask(W, y, mask)
        Z = Z if mask is None else Z * np.asarray(mask, bool)[:, :, None]
        A, b, N, n, names, dof = prepare_system(W, y, names, joint_names, self.rcond, counts)
        M, p = A.shape
        Az = stack_system(Z, y, names, joint_names)[0]
        sig = np.sqrt(ols_step(A, b, N, n, names, self.rcond, dof)[3])   # step 1: OLS
        sig = np.maximum(sig, 1e-9 * float(np.max(sig)) if np.max(sig) > 0 else 1.0)
        w = (1.0 / sig)[None, :]
        Aw = (A.reshape(N, n, p) * w[:, :, None]).reshape(M, p)
        Zw = (Az.reshape(N, n, p) * w[:, :, None]).reshape(M, p)
        bw = (b.reshape(N, n) * w).reshape(M)
        G = Zw.T @ Aw
        cond = float(np.linalg.cond(G))
        if not np.isfinite(cond) or cond > 1e14:
            raise ValueError(f"IV: the instruments are not correlated with the regressor "
                             f"(cond(Z^T W) = {cond:.3g})")
        p_hat = np.linalg.solve(G, Zw.T @ bw)
        ew = (bw - Aw @ p_hat).reshape(N, n)
        s2 = np.sum(ew ** 2, axis=0) / dof
        tau = integrated_autocorr_time(ew) if serial == "auto" else np.ones(n)
        Zj = Zw.reshape(N, n, p)
        middle = sum(tau[j] * s2[j] * (Zj[:, j].T @ Zj[:, j]) for j in range(n))
        Ginv = np.linalg.inv(G)
        cov = Ginv @ middle @ Ginv.T
        self.weights_ = w[0]
        self.tau_int_ = tau
        self.cond_instruments_ = cond
        return self._finish(A, b, N, n, names, p_hat, cov, counts)
