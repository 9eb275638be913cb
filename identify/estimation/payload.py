"""Payload identification with the arm's parameters known: the 10 inertial parameters of a body
fixed to the flange from the torque the known arm model does not explain.

    y = tau - tau_arm(q, qd, qdd) = Y_P(q, qd, qdd) phi        (N, n)

Y_P (N, n, 10) is the regressor's block of the last link (the flange frame, in which the payload
is expressed: identify.model.payload), phi = [m, m cx, m cy, m cz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]
(Pinocchio order, inertia about the flange origin). The fit (:class:`PayloadFit`) is a weighted
least squares (per-joint noise from an ordinary fit's residual), then, when that solution is not
physically consistent, the nearest consistent one in the same weighted metric: positive mass and
pseudo-inertia [[tr(I)/2 1 - I, h], [h^T, m]] positive semidefinite (Wensing et al. 2017), by a
small SDP (cvxpy / Clarabel). std from the unconstrained covariance: per parameter the larger of
sigma^2 (A^T A)^-1 and the delete-a-block jackknife (identify.estimation.estimators.
block_jackknife_cov; ``jackknife_ratio_`` the median ratio of the two), and, for mass / CoM /
inertia about the CoM, propagated through the conversion's Jacobian."""
from __future__ import annotations

import numpy as np

from identify.common.estimator import EstimatorMixin, check_is_fitted
from identify.model.spatial import params_from_inertial, pseudo_inertia

from .estimators import block_jackknife_cov, misfit_inflation, stack_system

__all__ = ["PayloadFit", "PAYLOAD_NAMES", "payload_regressor", "physical", "physical_std",
           "from_physical"]


def payload_regressor(model, q, qd, qdd) -> np.ndarray:
    """(N, n, 10) regressor block of `model`'s last link (the flange frame)."""
    return model.regressor(q, qd, qdd)[..., -10:]


def physical(phi: np.ndarray) -> dict:
    """mass_kg, com_m (3,), inertia_kgm2 [Ixx, Iyy, Izz, Ixy, Ixz, Iyz] about the CoM, of a
    10-vector in the flange frame."""
    phi = np.asarray(phi, float)
    m = phi[0]
    c = phi[1:4] / m
    Ixx, Ixy, Iyy, Ixz, Iyz, Izz = phi[4:]
    I_o = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    I_c = I_o - m * (np.dot(c, c) * np.eye(3) - np.outer(c, c))       # parallel axis
    return {"mass_kg": float(m), "com_m": c,
            "inertia_kgm2": np.array([I_c[0, 0], I_c[1, 1], I_c[2, 2], I_c[0, 1], I_c[0, 2], I_c[1, 2]])}


def _flat(d: dict) -> np.ndarray:
    return np.concatenate([[d["mass_kg"]], d["com_m"], d["inertia_kgm2"]])


def physical_std(phi: np.ndarray, cov: np.ndarray) -> dict:
    """std of :func:`physical`'s quantities, first order (central-difference Jacobian)."""
    phi = np.asarray(phi, float)
    J = np.empty((10, 10))
    for k in range(10):
        h = 1e-7 * max(1e-3, abs(phi[k]))
        e = np.zeros(10)
        e[k] = h
        J[:, k] = (_flat(physical(phi + e)) - _flat(physical(phi - e))) / (2 * h)
    s = np.sqrt(np.maximum(np.diag(J @ cov @ J.T), 0.0))
    return {"mass_kg": float(s[0]), "com_m": s[1:4], "inertia_kgm2": s[4:]}


def from_physical(mass_kg, com_m, inertia_kgm2) -> np.ndarray:
    """10-vector (flange origin) of mass, CoM (3,) and inertia about the CoM [Ixx, Iyy, Izz, Ixy,
    Ixz, Iyz]."""
    Ixx, Iyy, Izz, Ixy, Ixz, Iyz = inertia_kgm2
    I_c = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    return params_from_inertial(float(mass_kg), np.asarray(com_m, float), I_c)


#: names of the 10 payload parameters (Pinocchio order, flange frame, inertia about its origin)
PAYLOAD_NAMES = ("m", "mcx", "mcy", "mcz", "Ixx", "Ixy", "Iyy", "Ixz", "Iyz", "Izz")


class PayloadFit(EstimatorMixin):
    """Weighted least squares of the payload's 10 parameters, then the nearest physically
    consistent ones (module doc).

    Args (stored as given, checked by :meth:`fit`): consistent: project onto the consistent set
    when the least-squares solution is outside it (default True); min_eig: margin of the
    pseudo-inertia [kg*m^2].
    Fitted attributes: params_ (10,), cov_ (10, 10), std_ (10,), sigma_ (n,) per-joint residual
    std [N*m], projected_ (True when the SDP moved the least-squares solution to the consistent
    set), physical_ / physical_std_ (:func:`physical`), cond_ (of the weighted, column-scaled
    regressor), names_ (10,)."""

    def __init__(self, consistent: bool = True, min_eig: float = 1e-9):
        self.consistent = consistent
        self.min_eig = min_eig

    def fit(self, W: np.ndarray, y: np.ndarray, *, mask: np.ndarray | None = None,
            names=None, joint_names=None) -> "PayloadFit":
        """W (N, n, 10) payload regressor (:func:`payload_regressor`), y (N, n) the torque the
        known arm does not explain [N*m]; `mask` (N, n) bool: the equations to use (e.g. moving
        joints only: friction of a joint at rest holds any torque up to its Coulomb level, so its
        equation says nothing exact); `names`: the 10 parameter names (default
        :data:`PAYLOAD_NAMES`); `joint_names` (messages). Returns self."""
        min_eig = float(self.min_eig)
        Y, y = np.asarray(W, float), np.asarray(y, float)
        if Y.ndim != 3 or Y.shape[2] != 10 or y.shape != Y.shape[:2]:
            raise ValueError(f"payload fit: W must be (N, n, 10) and y (N, n), got {Y.shape} and "
                             f"{y.shape}")
        names = list(PAYLOAD_NAMES if names is None else names)
        if len(names) != 10:
            raise ValueError(f"payload fit: {len(names)} parameter names given for 10 columns")
        stack_system(Y, y, names, joint_names)          # finite / joint-name checks
        if mask is not None:
            mask = np.asarray(mask, bool)
            if mask.shape != y.shape:
                raise ValueError(f"payload fit: mask has shape {mask.shape}, expected {y.shape}")
            Y, y = Y * mask[..., None], y * mask
        phi0 = np.linalg.lstsq(Y.reshape(-1, 10), y.reshape(-1), rcond=None)[0]
        res0 = y - Y @ phi0
        used = np.ones(y.shape, bool) if mask is None else mask
        sigma = np.sqrt(np.sum(res0 ** 2, axis=0) / np.maximum(used.sum(axis=0), 1))
        w = 1.0 / np.maximum(sigma, 1e-9 * max(1.0, float(sigma.max())))
        A = (Y * w[None, :, None]).reshape(-1, 10)
        b = (y * w[None, :]).reshape(-1)
        scale = np.linalg.norm(A, axis=0)
        if np.any(scale == 0):
            k = int(np.argmin(scale))
            raise ValueError("payload fit: a payload column is zero over the whole recording "
                             f"(column {k}, {names[k]}); the wrists did not excite it")
        self.cond_ = float(np.linalg.cond(A / scale))
        phi = np.linalg.lstsq(A, b, rcond=None)[0]
        dof = max(int(used.sum()) - 10, 1)
        s2 = float(np.sum((b - A @ phi) ** 2) / dof)
        cov = s2 * np.linalg.inv(A.T @ A)
        # sigma^2 (A^T A)^-1 takes the residual for independent noise; filtered data are serially
        # correlated and the known arm's model error runs along the trajectory: each std is the
        # larger of it and the delete-a-block jackknife's (the spread of the fits with one of 10
        # contiguous blocks left out), which holds for either
        N, n = y.shape
        self.jackknife_ratio_, up = misfit_inflation(cov, block_jackknife_cov(A, b, N, n))
        self.cov_ = cov * np.outer(up, up)
        self.std_ = np.sqrt(np.diag(self.cov_))
        self.sigma_ = sigma * np.sqrt(s2)
        self.projected_ = False
        if self.consistent and np.linalg.eigvalsh(pseudo_inertia(phi))[0] < min_eig:
            phi = self._project(A, b, phi, min_eig)
            self.projected_ = True
        self.params_ = phi
        self.physical_ = physical(phi)
        self.physical_std_ = physical_std(phi, self.cov_)
        self.names_ = names
        return self

    def predict(self, W: np.ndarray) -> np.ndarray:
        """W (N, n, 10) payload regressor -> the payload's torque (N, n) [N*m]."""
        check_is_fitted(self)
        W = np.asarray(W, float)
        if W.shape[-1] != 10:
            raise ValueError(f"payload fit: W has {W.shape[-1]} columns, expected 10")
        return W @ self.params_

    @staticmethod
    def _project(A: np.ndarray, b: np.ndarray, phi_ls: np.ndarray, min_eig: float) -> np.ndarray:
        """The consistent phi minimising the same weighted residual (QR-reduced SDP)."""
        import cvxpy as cp
        Q, R = np.linalg.qr(A)
        c = Q.T @ b
        x = cp.Variable(10)
        m, hx, hy, hz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz = (x[i] for i in range(10))
        tr = 0.5 * (Ixx + Iyy + Izz)
        P = cp.bmat([[tr - Ixx, -Ixy, -Ixz, hx], [-Ixy, tr - Iyy, -Iyz, hy],
                     [-Ixz, -Iyz, tr - Izz, hz], [hx, hy, hz, m]])
        Ps = 0.5 * (P + P.T)
        prob = cp.Problem(cp.Minimize(cp.sum_squares(R @ x - c)),
                          [Ps >> min_eig * np.eye(4), m >= 1e-6])
        prob.solve(solver=cp.CLARABEL)
        if x.value is None:
            raise ValueError(f"payload fit: the consistent fit failed ({prob.status})")
        return np.asarray(x.value, float)
