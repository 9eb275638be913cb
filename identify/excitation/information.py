"""What a trajectory tells about the base parameters: the Fisher information with the per-joint
noise model, the predicted standard deviation of every base parameter, and the design figures
reported for every trajectory (:class:`DesignReport`).

Noise model: the torque of joint j in every sample carries independent noise of std sigma_j
[N*m] (the scenario's torque-sensor noise). Ordinary least squares over the N_run samples of a
run (sample rate x duration x periods) then has

    cov(theta) = sigma^2 (W^T W)^-1            (sigma equal on all joints)
    F = sum_s W_s^T diag(1/sigma^2) W_s        (Fisher information; cov = F^-1 for weighted LS)

We predict with F (the weighted form). W on the optimizer's uniform grid of N points represents
a run of N_run samples by F_run = (N_run / N) F_grid (both sample the same period uniformly).
Information already held (recorded trajectories, :func:`information_of`) adds: F_total = F0 + F.

Column scaling (documented once, used by the objectives and the report):

* ``cond`` (SI): cond(W_base) in SI units, the optimizer's historic objective;
* ``cond (column-scaled)``: cond(W_base D) with D = diag(1 / ||column k||), i.e. after
  equilibrating the columns -- independent of the units chosen for each parameter;
* ``log det F``: D-optimality; a column scaling only adds a constant, so the D-optimal design does
  not depend on units;
* A-optimality minimises tr(S F^-1 S) with S = diag(1 / |theta_prior_k|): the sum of the squared
  predicted *relative* std. theta_prior are the prior base parameter values (the URDF's inertial
  parameters and the drive file's friction, projected onto the base parameters), floored at
  1e-3 of the largest |theta_prior| (a parameter whose prior value is ~0 would otherwise carry
  the whole sum).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .conditioning import base_regressor


@dataclass
class DesignReport:
    """Design figures of one trajectory (see module doc).

    cond, cond_scaled: cond(W_base) SI / column-scaled (check grid); logdet: log det F_run
    (natural log, F in the units of theta); std (p,): predicted std of each base parameter;
    rel_std (p,): std / |theta_prior| (NaN where no prior value); median_rel_std: median of
    rel_std; noise_std (n,) [N*m]; n_samples: samples of the run the prediction is for."""
    cond: float
    cond_scaled: float
    logdet: float
    std: np.ndarray
    rel_std: np.ndarray
    median_rel_std: float
    noise_std: np.ndarray
    n_samples: int

    def to_dict(self) -> dict:
        return {"cond": self.cond, "cond_scaled": self.cond_scaled, "logdet": self.logdet,
                "std": self.std.tolist(), "rel_std": self.rel_std.tolist(),
                "median_rel_std": self.median_rel_std, "noise_std_Nm": self.noise_std.tolist(),
                "n_samples": self.n_samples}


def noise_vector(noise_std, n: int) -> np.ndarray:
    """(n,) per-joint torque noise std [N*m] from one number or n numbers (must be > 0)."""
    s = np.broadcast_to(np.asarray(noise_std, float), (n,)).copy()
    if not np.all(np.isfinite(s) & (s > 0)):
        raise ValueError(f"noise std per joint must be finite and > 0 [N*m], got {noise_std!r}")
    return s


def weighted_information(W: np.ndarray, noise_std: np.ndarray) -> np.ndarray:
    """F = sum_s W_s^T diag(1/sigma^2) W_s for a stacked base regressor W (N*n, p), sample-major
    rows (joint fastest), noise_std (n,) [N*m]."""
    n = noise_std.shape[0]
    Ws = W / np.tile(noise_std, W.shape[0] // n)[:, None]
    return Ws.T @ Ws


def prior_scale(theta_prior) -> np.ndarray | None:
    """|theta_prior| floored at 1e-3 of its largest entry (the A-optimal column scaling)."""
    if theta_prior is None:
        return None
    a = np.abs(np.asarray(theta_prior, float))
    return np.maximum(a, 1e-3 * a.max())


def information_of(model, bp, terms, q, qd, qdd, noise_std) -> np.ndarray:
    """Fisher information (p, p) of recorded samples q, qd, qdd (N, n) [SI] for the base
    parameters of `bp` (exact Coulomb sign): the information already held when a new trajectory
    is optimized to add to it."""
    W = base_regressor(model, bp, terms, q, qd, qdd)
    return weighted_information(W, noise_vector(noise_std, model.n))


def design_report(model, traj, bp, terms, noise_std, n_samples_run: int, theta_prior=None,
                  n_check: int = 2000, information0=None) -> DesignReport:
    """Figures of `traj` (one period) on a uniform grid of n_check points, scaled to a run of
    n_samples_run samples; information0 (p, p): information already held (added)."""
    n = model.n
    sig = noise_vector(noise_std, n)
    t = np.arange(n_check) * (traj.period / n_check)
    W = base_regressor(model, bp, terms, *traj.evaluate(t))
    # conds from the p x p Gram matrices (cheap; relative error ~ cond^2 * 1e-16)
    G = W.T @ W
    norms = np.sqrt(np.diag(G))
    cond = _cond_gram(G)
    Dn = 1.0 / np.where(norms > 0, norms, 1.0)
    cond_scaled = _cond_gram(G * Dn[:, None] * Dn[None, :])
    F = weighted_information(W, sig) * (float(n_samples_run) / n_check)
    if information0 is not None:
        F = F + np.asarray(information0, float)
    sign, logdet = np.linalg.slogdet(F)
    try:
        C = np.linalg.inv(F)
        std = np.sqrt(np.maximum(np.diag(C), 0.0))
    except np.linalg.LinAlgError:
        std = np.full(F.shape[0], np.inf)
    if theta_prior is None:
        rel = np.full_like(std, np.nan)
    else:
        th = np.abs(np.asarray(theta_prior, float))
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(th > 0, std / th, np.nan)
    med = float(np.nanmedian(rel)) if np.any(np.isfinite(rel)) else float("nan")
    return DesignReport(cond=cond, cond_scaled=cond_scaled,
                        logdet=float(logdet) if sign > 0 else float("-inf"), std=std, rel_std=rel,
                        median_rel_std=med, noise_std=sig, n_samples=int(n_samples_run))


def _cond_gram(G: np.ndarray) -> float:
    """cond(W) from G = W^T W: sqrt(lambda_max / lambda_min) (inf when singular)."""
    lam = np.linalg.eigvalsh(G)
    return float(np.sqrt(lam[-1] / lam[0])) if lam[0] > 0 else float("inf")
