"""Extra per-joint regressor columns: friction, offset and rotor inertia (armature).

Each term contributes one column per joint that acts on that joint only:

| term        | column on joint j          | parameter (unit)                 | name |
|-------------|----------------------------|----------------------------------|------|
| viscous     | qd_j                       | viscous friction [N*m*s/rad]     | fv   |
| coulomb     | sign(qd_j) or tanh(qd_j/e) | Coulomb friction [N*m]           | fc   |
| offset      | 1                          | torque offset [N*m]              | fo   |
| armature    | qdd_j                      | reflected rotor inertia [kg*m^2] | Ia   |

Columns are grouped by term, then joint: [fv1..fvn, fc1..fcn, ...] in the order of `terms`.

## The per-joint term library (:class:`Term`, :func:`term_columns`)

The per-joint term library of the joint model: friction and drive-loss terms, each linear in
its coefficient once its shape constant is fixed (docs/friction-terms.md has every formula, its
units, when it is observable and how the sidecar writes it).

v = qd_j [rad/s], a = qdd_j [rad/s^2], tau_L = the joint's load torque (rigid body + armature of
the current fit) [N*m], c(v) = the Coulomb shape: sign(v) (eps = 0) or tanh(v / eps).

| kind            | columns of joint j                                  | coefficient(s) [unit]          |
|-----------------|-----------------------------------------------------|--------------------------------|
| viscous         | v                                                   | f_v [N*m*s/rad]                |
| coulomb         | c(v)                                                | f_c [N*m]                      |
| coulomb_asym    | max(c(v), 0), min(c(v), 0)                          | f_c+, f_c- [N*m]               |
| stribeck        | exp(-(v / v_s)^2) * c(v)                            | f_s - f_c [N*m]                |
| sqrt_viscous    | sign(v) * |v|^0.5                                   | f_1/2 [N*m*(s/rad)^0.5]        |
| quad_viscous    | v * |v|                                             | f_2 [N*m*s^2/rad^2]            |
| load_coulomb    | |tau_L| * c(v)                                      | f_L [-]                        |
| load_coulomb_4q | |tau_L|*c(v)*[tau_L*v > 0], |tau_L|*c(v)*[tau_L*v <= 0] | f_L,drive, f_L,brake [-]     |
| dahl            | z(t), dz/dx = (1 - z*sign(dx)) / x_s, dx = v*dt     | f_c,dahl [N*m]                 |
| armature        | a                                                   | I_a [kg*m^2]                   |
| offset          | 1                                                   | tau_0 [N*m]                    |

Shape constants: ``eps`` [rad/s] (coulomb, coulomb_asym, stribeck, load_coulomb*), ``vs``
[rad/s] (stribeck), ``xs`` [rad] (dahl). A :class:`Term` names a kind and its constants; its
``label`` (e.g. ``"coulomb(eps=0.01)"``) is how reports and the sidecar name it.

The Dahl state is solved exactly per step, z_k = s_k + (z_{k-1} - s_k) * exp(-|dx_k| / x_s) with
s_k = sign(dx_k) (at rest z keeps the last direction), as the linear recurrence
z_k = A_k z_{k-1} + B_k by a parallel prefix scan (log2 N vectorized passes, no Python loop over
samples; A_k in [0, 1], so nothing overflows).
"""
from __future__ import annotations

from dataclasses import dataclass

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


# --------------------------------------------------------------------------------------------
# the per-joint term library
# --------------------------------------------------------------------------------------------
#: kind -> (number of columns, shape constants it uses, coefficient names, coefficient units)
KINDS = {
    "viscous": (1, (), ("fv",), ("N*m*s/rad",)),
    "coulomb": (1, ("eps",), ("fc",), ("N*m",)),
    "coulomb_asym": (2, ("eps",), ("fc_pos", "fc_neg"), ("N*m", "N*m")),
    "stribeck": (1, ("eps", "vs"), ("fs",), ("N*m",)),
    "sqrt_viscous": (1, (), ("fv_sqrt",), ("N*m*(s/rad)^0.5",)),
    "quad_viscous": (1, (), ("fv_quad",), ("N*m*s^2/rad^2",)),
    "load_coulomb": (1, ("eps",), ("fl",), ("1",)),
    "load_coulomb_4q": (2, ("eps",), ("fl_drive", "fl_brake"), ("1", "1")),
    "dahl": (1, ("xs",), ("fc_dahl",), ("N*m",)),
    "armature": (1, (), ("Ia",), ("kg*m^2",)),
    "offset": (1, (), ("fo",), ("N*m",)),
}


@dataclass(frozen=True)
class Term:
    """One term of a joint's model: its kind (:data:`KINDS`) and shape constants.

    eps: Coulomb shape scale [rad/s] (0: sign); vs: Stribeck velocity [rad/s]; xs: Dahl
    presliding displacement [rad]. Constants a kind does not use are ignored (kept 0)."""

    kind: str
    eps: float = 0.0
    vs: float = 0.0
    xs: float = 0.0

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown joint term kind {self.kind!r}; choose from {list(KINDS)}")
        uses = KINDS[self.kind][1]
        for k in ("eps", "vs", "xs"):
            val = float(getattr(self, k))
            if k not in uses:
                object.__setattr__(self, k, 0.0)
            elif val < 0 or (k != "eps" and val <= 0):
                raise ValueError(f"joint term {self.kind}: {k} must be "
                                 f"{'>= 0' if k == 'eps' else '> 0'}, got {val!r}")
            else:
                object.__setattr__(self, k, val)

    @property
    def width(self) -> int:
        """Number of columns (coefficients) of this term per joint."""
        return KINDS[self.kind][0]

    @property
    def coefficient_names(self) -> tuple:
        return KINDS[self.kind][2]

    @property
    def units(self) -> tuple:
        return KINDS[self.kind][3]

    @property
    def label(self) -> str:
        """E.g. ``viscous``, ``coulomb(eps=0.01)``, ``dahl(xs=0.0002)``."""
        uses = KINDS[self.kind][1]
        if not uses:
            return self.kind
        return f"{self.kind}(" + ",".join(f"{k}={getattr(self, k):g}" for k in uses) + ")"

    def to_dict(self) -> dict:
        return {"kind": self.kind, **{k: float(getattr(self, k)) for k in KINDS[self.kind][1]}}


def parse_term(x) -> Term:
    """A :class:`Term` from a Term, a label (``"coulomb(eps=0.01)"``) or a mapping
    ``{kind: ..., eps: ...}``. Raises ValueError naming the bad entry."""
    if isinstance(x, Term):
        return x
    if isinstance(x, dict):
        d = dict(x)
        if "kind" not in d:
            raise ValueError(f"joint term {x!r}: no 'kind'")
        return Term(**d)
    s = str(x).strip()
    if "(" not in s:
        return Term(s)
    kind, rest = s.split("(", 1)
    if not rest.endswith(")"):
        raise ValueError(f"joint term {s!r}: expected kind(key=value,...)")
    kw = {}
    for part in filter(None, rest[:-1].split(",")):
        k, _, v = part.partition("=")
        try:
            kw[k.strip()] = float(v)
        except ValueError:
            raise ValueError(f"joint term {s!r}: {part!r} is not key=number") from None
    return Term(kind.strip(), **kw)


def needs_load(term: Term) -> bool:
    """True for the load-dependent kinds (their columns need tau_L)."""
    return term.kind.startswith("load_coulomb")


def coulomb_shape(v: np.ndarray, eps: float) -> np.ndarray:
    """c(v) = sign(v) (eps <= 0) or tanh(v / eps) [-], elementwise."""
    v = np.asarray(v, float)
    return np.sign(v) if eps <= 0 else np.tanh(v / eps)


def dahl_state(v: np.ndarray, dt: float, xs: float, z0: float = 0.0) -> np.ndarray:
    """Dahl-type direction-memory state z (N, ...) in [-1, 1] of velocities v (N, ...) [rad/s]
    sampled every dt [s]: per step dx_k = v_k*dt, s_k = sign(dx_k),
    z_k = s_k + (z_{k-1} - s_k)*exp(-|dx_k| / xs), z_{-1} = z0 (exact solution of
    dz/dx = (1 - z*sign(dx)) / xs over the step). Solved as z_k = A_k z_{k-1} + B_k by a parallel
    prefix scan along axis 0 (vectorized; log2 N passes)."""
    v = np.asarray(v, float)
    if not (xs > 0 and dt > 0):
        raise ValueError(f"dahl_state: xs [rad] and dt [s] must be > 0, got {xs!r}, {dt!r}")
    dx = v * dt
    A = np.exp(-np.abs(dx) / xs)
    B = np.sign(dx) * (1.0 - A)
    N = A.shape[0]
    shift = 1
    while shift < N:            # compose (A, B) over windows of doubling length
        B_new = B.copy()
        B_new[shift:] = A[shift:] * B[:-shift] + B[shift:]
        A_new = A.copy()
        A_new[shift:] = A[shift:] * A[:-shift]
        A, B = A_new, B_new
        shift *= 2
    return A * z0 + B


def term_columns(term: Term, v: np.ndarray, a: np.ndarray | None = None, *, dt: float = 0.0,
                 tau_load: np.ndarray | None = None, shape: np.ndarray | None = None,
                 dahl: np.ndarray | None = None) -> np.ndarray:
    """Columns of one term for one or more joints.

    Args:
        term: the :class:`Term`.
        v: (N,) or (N, n) joint velocity [rad/s]; a: same shape, acceleration [rad/s^2]
            (armature only).
        dt: sample interval [s] (dahl only, when `dahl` is not given).
        tau_load: same shape as v, the load torque tau_L [N*m] (load_coulomb* only).
        shape: optional precomputed c(v) (e.g. the parallel-filtered Coulomb column) used
            instead of c(v) by coulomb / coulomb_asym / stribeck / load_coulomb*.
        dahl: optional precomputed Dahl state (dahl only).
    Returns:
        (N, width) for (N,) input, (N, n, width) for (N, n) input.
    Raises:
        ValueError: a needed input is missing.
    """
    v = np.asarray(v, float)
    k = term.kind
    c = None
    if k in ("coulomb", "coulomb_asym", "stribeck", "load_coulomb", "load_coulomb_4q"):
        c = coulomb_shape(v, term.eps) if shape is None else np.asarray(shape, float)
    if k == "viscous":
        cols = [v]
    elif k == "coulomb":
        cols = [c]
    elif k == "coulomb_asym":
        cols = [np.maximum(c, 0.0), np.minimum(c, 0.0)]
    elif k == "stribeck":
        cols = [np.exp(-(v / term.vs) ** 2) * c]
    elif k == "sqrt_viscous":
        cols = [np.sign(v) * np.sqrt(np.abs(v))]
    elif k == "quad_viscous":
        cols = [v * np.abs(v)]
    elif k in ("load_coulomb", "load_coulomb_4q"):
        if tau_load is None:
            raise ValueError(f"joint term {term.label} needs the load torque tau_L")
        tl = np.asarray(tau_load, float)
        base = np.abs(tl) * c
        if k == "load_coulomb":
            cols = [base]
        else:
            drive = tl * v > 0
            cols = [np.where(drive, base, 0.0), np.where(drive, 0.0, base)]
    elif k == "dahl":
        cols = [dahl_state(v, dt, term.xs) if dahl is None else np.asarray(dahl, float)]
    elif k == "armature":
        if a is None:
            raise ValueError("joint term armature needs the acceleration qdd")
        cols = [np.asarray(a, float)]
    else:  # offset
        cols = [np.ones_like(v)]
    return np.stack(cols, axis=-1)


def term_torque(terms, coefficients, v, a=None, *, dt: float = 0.0, tau_load=None):
    """Torque (N,) [N*m] of one joint's `terms` (sequence of Term) with `coefficients`
    (sequence of per-term arrays of width Term.width) on velocities v (N,)."""
    out = np.zeros(np.shape(v))
    for term, coef in zip(terms, coefficients):
        cols = term_columns(term, v, a, dt=dt, tau_load=tau_load)
        out = out + cols @ np.asarray(coef, float).reshape(term.width)
    return out
