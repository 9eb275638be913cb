"""Least squares of long logs in row blocks: per-joint triangular factors instead of the stacked
regressor.

An hour at 1 kHz is 3.6 M samples; its design (N, n, p) would need ~10 GB. Every quantity the
estimators of :mod:`identify.estimation.estimators` compute is a function of, per joint j, the
triangular factor R_j ((p+1) x (p+1)) of the augmented rows [A_j | b_j] (A_j: the rows of joint
j, b_j its torques), plus the residual series for the autocorrelation time:

* the fit with joint weights w_j: R = qr([w_1 R_1; ...; w_n R_n]) -> solve R p = z
  (Householder QR of already-triangular blocks: the same R as the QR of the stacked rows);
* joint j's residual sum of squares for any p: ||R_j [p; -1]||^2;
* A_j^T A_j = R_j[:, :p]^T R_j[:, :p], so OLS's joint-wise sandwich covariance
  (R^T R)^-1 (sum_j v_j w_j^2 A_j^T A_j) (R^T R)^-1; the Parzen-kernel HAC sandwich of
  :class:`~identify.estimation.estimators.WLS` needs the per-sample scores
  (N x p floats), collected in the second pass.

:class:`JointFactors` accumulates R_j block by block (QR updates: qr([R_j; new rows])), so memory
is O(block x n x p + n p^2) whatever N; :func:`fit_blocks` runs the OLS / WLS / Ridge estimators
on them (a second pass over the blocks gives the residual series for tau_int, (N, n) floats).
The numbers equal the in-memory estimators' to round-off (tests/estimation/test_streaming.py).
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import scipy.linalg as sla

from scipy.signal import fftconvolve

from identify.common.blas import single_thread_blas

from .estimators import (LinearFit, check_identifiable, dof_per_joint, hac_lags,
                         integrated_autocorr_time, lcurve_corner, parzen_window, qr_r)

__all__ = ["JointFactors", "fit_blocks", "BlockFit", "row_blocks", "BLOCK_ROWS"]

#: samples per block (x n joints x p columns x 8 bytes: ~50 MB for 6 joints and 60 columns)
BLOCK_ROWS = 20_000


def row_blocks(N: int, block: int = BLOCK_ROWS) -> list[slice]:
    return [slice(a, min(N, a + block)) for a in range(0, N, block)]


class JointFactors:
    """Per-joint R factors of [A_j | b_j] (p+1, p+1), accumulated block by block."""

    def __init__(self, n: int, p: int):
        self.n, self.p = n, p
        self.R = [np.zeros((0, p + 1)) for _ in range(n)]
        self.N = 0

    def add(self, W: np.ndarray, y: np.ndarray) -> None:
        """W (B, n, p) design rows, y (B, n) torques of B samples."""
        W = np.asarray(W, float)
        y = np.asarray(y, float)
        if W.shape[1:] != (self.n, self.p) or y.shape != W.shape[:2]:
            raise ValueError(f"block shapes W {W.shape}, y {y.shape}; expected (B, {self.n}, "
                             f"{self.p}) and (B, {self.n})")
        for name, x in (("W (regressor)", W), ("y (torque)", y)):
            bad = ~np.isfinite(x)
            if bad.any():
                idx = np.unravel_index(int(np.argmax(bad)), x.shape)
                raise ValueError(f"{name}: non-finite value at sample {self.N + idx[0]}, joint "
                                 f"{idx[1]}")
        for j in range(self.n):
            aug = np.column_stack([W[:, j, :], y[:, j]])
            self.R[j] = qr_r(np.vstack([self.R[j], aug]))
        self.N += W.shape[0]

    def rss(self, params: np.ndarray) -> np.ndarray:
        """(n,) residual sum of squares per joint of y - W params."""
        v = np.concatenate([np.asarray(params, float), [-1.0]])
        return np.array([float(np.sum((R @ v) ** 2)) for R in self.R])

    def gram(self, j: int) -> np.ndarray:
        """A_j^T A_j (p, p)."""
        Rj = self.R[j][:, :self.p]
        return Rj.T @ Rj

    def combined(self, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """R (p, p), z (p,), r^2 of the rows weighted by w_j per joint."""
        p = self.p
        Rb = np.linalg.qr(np.vstack([wj * R for wj, R in zip(w, self.R)]), mode="r")
        if Rb.shape[0] < p + 1:
            Rb = np.vstack([Rb, np.zeros((p + 1 - Rb.shape[0], p + 1))])
        return Rb[:p, :p], Rb[:p, p], float(Rb[p, p] ** 2)


class BlockFit(LinearFit):
    """Fitted attributes of :class:`~identify.estimation.estimators.OLS` / ``WLS`` / ``Ridge``
    computed from :class:`JointFactors` (same names, same meaning); ``method`` says which."""

    def __init__(self, method: str):
        self.method = method


def _sandwich(R: np.ndarray, factors: JointFactors, var_w2: np.ndarray) -> np.ndarray:
    p = factors.p
    S = sum(v * factors.gram(j) for j, v in enumerate(var_w2))
    Rinv = sla.solve_triangular(R, np.eye(p), check_finite=False)
    P = Rinv @ Rinv.T                                   # (A^T A)^-1 of the weighted rows
    return P @ S @ P


@single_thread_blas()
def fit_blocks(blocks: Callable[[], Iterator[tuple[np.ndarray, np.ndarray]]], n: int, p: int,
               estimator: str = "wls", names=None) -> BlockFit:
    """Fit y = W p over row blocks with the estimators' definitions (serial="auto").

    Args:
        blocks: called (twice) -> iterator of (W (B, n, p), y (B, n)) over the samples in time
            order.
        n, p: joints and parameters; estimator: "ols" | "wls" | "ridge"; names: p names.
    """
    names = [f"p{k + 1}" for k in range(p)] if names is None else [str(s) for s in names]
    fac = JointFactors(n, p)
    for W, y in blocks():
        fac.add(W, y)
    N = fac.N
    dof = dof_per_joint(N, n, p)
    R1, z1, _ = fac.combined(np.ones(n))
    if N * n < p:
        raise ValueError(f"fewer equations ({N * n}) than parameters ({p})")
    if estimator != "ridge":
        check_identifiable(np.zeros((N * n, p)) if N * n < p else R1, names, R=R1)
    p1 = sla.lstsq(R1, z1, check_finite=False)[0] if estimator == "ridge" else \
        sla.solve_triangular(R1, z1, check_finite=False)
    sig = np.sqrt(fac.rss(p1) / dof)
    sig = np.maximum(sig, 1e-9 * float(np.max(sig)) if np.max(sig) > 0 else 1.0)
    w = np.ones(n) if estimator == "ols" else 1.0 / sig
    R, z, r2 = fac.combined(w)
    out = BlockFit(estimator)
    if estimator == "ridge":            # D: column norms of the UNWEIGHTED rows, as Ridge
        D = np.sqrt(np.sum(R1 ** 2, axis=0))
        D = np.where(D > 0, D, 1.0)
        U, s, Vt = np.linalg.svd(R / D)
        beta = U.T @ z
        keep = s > max(N * n, p) * np.finfo(float).eps * s[0]
        lam = lcurve_corner(s[keep], beta[keep], r2)[0]
        f = s[keep] / (s[keep] ** 2 + lam)
        V = Vt[keep].T
        params = (V @ (f * beta[keep])) / D
        out.lambda_ = float(lam)
    else:
        params = sla.solve_triangular(R, z, check_finite=False)
    # second pass: weighted residual series for the autocorrelation time; WLS also keeps the
    # per-sample scores sum_j w_j^2 A_kj e_kj (N, p) for its HAC sandwich (as WLS does)
    e = np.empty((N, n))
    scores = np.empty((N, p)) if estimator == "wls" else None
    k = 0
    for W, y in blocks():
        B = W.shape[0]
        e[k:k + B] = (y - W @ params) * w
        if scores is not None:
            scores[k:k + B] = np.einsum("bjp,bj->bp", W * w[None, :, None], e[k:k + B])
        k += B
    tau = integrated_autocorr_time(e)
    ew2 = np.sum(e ** 2, axis=0)
    if estimator == "ridge":
        scale2 = float(ew2.sum()) / (N * n - p)
        cov = scale2 * float(np.mean(tau)) * (V * f ** 2) @ V.T / np.outer(D, D)
    elif estimator == "wls":            # Parzen-kernel HAC sandwich of estimators.WLS
        lags, tau = hac_lags(e)
        L = max(int(lags), 0)
        KS = fftconvolve(scores, parzen_window(L)[:, None], mode="same", axes=0) if L > 0 else scores
        Rinv = sla.solve_triangular(R, np.eye(p), check_finite=False)
        P = Rinv @ Rinv.T
        cov = P @ (scores.T @ KS) @ P * (N * n / (N * n - p))
        out.hac_lags_ = lags
    else:
        cov = _sandwich(R, fac, tau * ew2 / dof * w ** 2)
    rss = fac.rss(params)
    out.params_ = params
    out.cov_ = 0.5 * (cov + cov.T)
    out.sigma2_ = rss / dof
    out.residual_rms_ = np.sqrt(rss / N)
    out.names_ = names
    out.n_joints_, out.n_samples_ = n, N
    out.tau_int_ = tau
    out.weights_ = w
    out.factors_ = fac
    return out
