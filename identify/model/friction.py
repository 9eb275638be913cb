"""Extra per-joint regressor columns: friction, offset and rotor inertia (armature).

Each term contributes one column per joint that acts on that joint only:

| term        | column on joint j          | parameter (unit)                 | name |
|-------------|----------------------------|----------------------------------|------|
| viscous     | qd_j                       | viscous friction [N*m*s/rad]     | fv   |
| coulomb     | sign(qd_j) or tanh(qd_j/e) | Coulomb friction [N*m]           | fc   |
| offset      | 1                          | torque offset [N*m]              | fo   |
| armature    | qdd_j                      | reflected rotor inertia [kg*m^2] | Ia   |

Columns are grouped by term, then joint: [fv1..fvn, fc1..fcn, ...] in the order of `terms`.
"""
from __future__ import annotations

import casadi as ca
import numpy as np

TERMS = {"viscous": "fv", "coulomb": "fc", "offset": "fo", "armature": "Ia"}


def check_terms(terms) -> tuple[str, ...]:
    terms = tuple(terms)
    bad = [t for t in terms if t not in TERMS]
    if bad:
        raise ValueError(f"unknown joint term(s) {bad}; choose from {list(TERMS)}")
    if len(set(terms)) != len(terms):
        raise ValueError(f"joint terms repeated: {list(terms)}")
    return terms


def column_names(n: int, terms) -> list[str]:
    """Names of the extra columns, e.g. ['fv1', ..., 'fvn', 'fc1', ...]."""
    return [f"{TERMS[t]}{j + 1}" for t in check_terms(terms) for j in range(n)]


def _term_values(term: str, qd, qdd, coulomb_eps: float, xp):
    if term == "viscous":
        return qd
    if term == "coulomb":
        return xp.sign(qd) if coulomb_eps <= 0 else xp.tanh(qd / coulomb_eps)
    if term == "offset":
        return qd * 0 + 1
    return qdd  # armature


def joint_columns(qd, qdd, terms=("viscous", "coulomb"), coulomb_eps: float = 0.0) -> np.ndarray:
    """Extra columns for N samples.

    Args:
        qd, qdd: (N, n) or (n,) joint velocity [rad/s] and acceleration [rad/s^2].
        terms: subset of ("viscous", "coulomb", "offset", "armature").
        coulomb_eps: 0 -> sign(qd); > 0 -> smooth tanh(qd / eps) [rad/s].
    Returns:
        (N, n, len(terms)*n), or (n, len(terms)*n) for (n,) inputs.
    """
    terms = check_terms(terms)
    qd = np.asarray(qd, dtype=float)
    qdd = np.asarray(qdd, dtype=float)
    single = qd.ndim == 1
    qd2, qdd2 = np.atleast_2d(qd), np.atleast_2d(qdd)
    N, n = qd2.shape
    out = np.zeros((N, n, len(terms) * n))
    idx = np.arange(n)
    for k, term in enumerate(terms):
        out[:, idx, k * n + idx] = _term_values(term, qd2, qdd2, coulomb_eps, np)
    return out[0] if single else out


def joint_columns_sx(qd, qdd, terms=("viscous", "coulomb"), coulomb_eps: float = 0.01):
    """CasADi version of :func:`joint_columns` for one sample: qd, qdd (n,) SX/MX -> (n, k*n).
    Use coulomb_eps > 0 inside optimizers (sign is not differentiable)."""
    terms = check_terms(terms)
    n = qd.shape[0]
    cols = []
    for term in terms:
        v = _term_values(term, qd, qdd, coulomb_eps, ca)
        cols.append(ca.diag(v))
    return ca.horzcat(*cols) if cols else ca.SX.zeros(n, 0)


def full_regressor(model, q, qd, qdd, terms=(), coulomb_eps: float = 0.0) -> np.ndarray:
    """Rigid-body regressor with the extra columns appended: (N, n, 10n + len(terms)*n)."""
    Y = model.regressor(q, qd, qdd)
    if not terms:
        return Y
    return np.concatenate([Y, joint_columns(qd, qdd, terms, coulomb_eps)], axis=-1)


def full_parameter_names(model, terms=()) -> list[str]:
    return model.parameter_names() + column_names(model.n, terms)
