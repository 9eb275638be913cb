"""Base parameters: the identifiable linear combinations of the standard parameters.

Numerical method (Gautier 1990): stack the full regressor over many random states, take its rank
from a QR decomposition with column pivoting, then pick the independent columns in natural order
(an unpivoted QR's non-negligible diagonal) so each base parameter is led by the first parameter of
its group -- the classic readable grouping, e.g. ``ZZ1 + YY2 + 0.0729*m3``. With W1 the independent
and W2 the dependent columns, W2 = W1 beta, so

    tau = W p = W1 (p1 + beta p2) = W1 p_b,    p_b = E p,   E = [I beta] (columns re-ordered).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.linalg as sla

from .friction import check_terms, full_parameter_names, full_regressor


@dataclass(frozen=True)
class BaseParameters:
    """The base-parameter map of a model (plus selected extra joint terms).

    Attributes:
        full_names: (p,) names of the full parameter vector (10n inertial, then extra columns).
        terms: the extra joint terms included.
        independent: (b,) indices of the columns kept (the base regressor is Y[..., independent]).
        dependent: (p - b,) indices of the other columns.
        beta: (b, p - b) W[:, dependent] = W[:, independent] @ beta.
        E: (b, p) base parameters p_b = E @ p_full.
        names: (b,) readable combination of each base parameter.
        rank_tol: relative tolerance used for the rank decision.
    """

    full_names: tuple
    terms: tuple
    independent: np.ndarray
    dependent: np.ndarray
    beta: np.ndarray
    E: np.ndarray
    names: tuple
    rank_tol: float

    @property
    def n_base(self) -> int:
        return len(self.independent)

    @property
    def n_full(self) -> int:
        return len(self.full_names)

    def reduce(self, Y_full: np.ndarray) -> np.ndarray:
        """Base regressor from the full one: (..., p) -> (..., b)."""
        if Y_full.shape[-1] != self.n_full:
            raise ValueError(f"regressor has {Y_full.shape[-1]} columns, expected {self.n_full} "
                             f"(inertial columns + joint terms {list(self.terms)})")
        return Y_full[..., self.independent]

    def project(self, p_full: np.ndarray) -> np.ndarray:
        """Base parameters of a full parameter vector: E @ p."""
        return self.E @ np.asarray(p_full, dtype=float)

    def table(self, values: np.ndarray | None = None, std: np.ndarray | None = None) -> str:
        """Printable table: index, base parameter combination, and optional value / std."""
        head = f"{'#':>3}  {'base parameter':<60}"
        if values is not None:
            head += f" {'value':>12}"
        if std is not None:
            head += f" {'std':>10} {'rel.std %':>9}"
        lines = [head, "-" * len(head)]
        for i, name in enumerate(self.names):
            row = f"{i + 1:>3}  {name:<60}"
            if values is not None:
                row += f" {values[i]:>12.5g}"
            if std is not None:
                rel = 100 * std[i] / abs(values[i]) if values is not None and values[i] != 0 else np.inf
                row += f" {std[i]:>10.3g} {rel:>9.2f}"
            lines.append(row)
        return "\n".join(lines)


def _combination(lead: str, deps: list[tuple[str, float]]) -> str:
    s = lead
    for name, c in deps:
        if abs(c - 1) < 1e-9:
            s += f" + {name}"
        elif abs(c + 1) < 1e-9:
            s += f" - {name}"
        else:
            s += f" {'+' if c > 0 else '-'} {abs(c):.6g}*{name}"
    return s


def random_states(model, n_samples: int, rng: np.random.Generator):
    """Random (q, qd, qdd), each (n_samples, n), spread over the joint range."""
    n = model.n
    lo = np.where(np.isfinite(model.limits.q_min), model.limits.q_min, -np.pi)
    hi = np.where(np.isfinite(model.limits.q_max), model.limits.q_max, np.pi)
    q = rng.uniform(np.maximum(lo, -np.pi), np.minimum(hi, np.pi), (n_samples, n))
    qd = rng.normal(0.0, 1.0, (n_samples, n))
    qdd = rng.normal(0.0, 3.0, (n_samples, n))
    return q, qd, qdd


def compute_base_parameters(model, terms=(), n_samples: int | None = None, seed: int = 0,
                            rank_tol: float = 1e-8, coulomb_eps: float = 0.0) -> BaseParameters:
    """Base parameters of `model` with extra joint `terms` (see identify.model.friction).

    Args:
        model: RobotModel.
        terms: extra joint terms appended to the 10n inertial columns.
        n_samples: random states stacked (default 20 * parameter count / n).
        seed: RNG seed (the result is deterministic for a seed).
        rank_tol: a diagonal entry of R below rank_tol * |R[0, 0]| counts as zero.

    The result is kept on the model (a frozen RobotModel: its kinematics and limits, all the
    selection depends on, never change), so a run's many callers compute it once.
    """
    terms = check_terms(terms)
    memo = getattr(model, "__dict__", None)
    key = ("_base_parameters", tuple(terms), n_samples, int(seed), float(rank_tol),
           float(coulomb_eps))
    if memo is not None and key in memo:
        return memo[key]
    bp = _compute_base_parameters(model, terms, n_samples, seed, rank_tol, coulomb_eps)
    if memo is not None:
        memo[key] = bp
    return bp


def _compute_base_parameters(model, terms, n_samples, seed, rank_tol, coulomb_eps
                             ) -> BaseParameters:
    """compute_base_parameters without the memo."""
    rng = np.random.default_rng(seed)
    names = full_parameter_names(model, terms)
    p = len(names)
    if n_samples is None:
        n_samples = max(50, 20 * p // model.n)
    q, qd, qdd = random_states(model, n_samples, rng)
    W = full_regressor(model, q, qd, qdd, terms, coulomb_eps).reshape(-1, p)
    # column scaling so the rank decision is not driven by units
    scale = np.linalg.norm(W, axis=0)
    # a column that is zero up to round-off (e.g. mz2 about a horizontal axis, evaluated through
    # cos(pi/2) ~ 6e-17) must not be rescaled into a spurious independent direction
    nonzero = scale > 1e-10 * scale.max()
    Ws = W[:, nonzero] / scale[nonzero]
    cols = np.flatnonzero(nonzero)
    _, R, _ = sla.qr(Ws, mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > rank_tol * diag[0]))
    # natural-order selection: unpivoted QR keeps a column iff it adds a new direction
    _, R0 = np.linalg.qr(Ws, mode="reduced")
    d0 = np.abs(np.diag(R0))
    keep = d0 > rank_tol * max(d0.max(), 1e-300)
    if keep.sum() != rank:  # numerically ambiguous: trust the pivoted decision
        _, _, P = sla.qr(Ws, mode="economic", pivoting=True)
        keep = np.zeros(len(cols), bool)
        keep[P[:rank]] = True
    independent = cols[keep]
    dependent = np.setdiff1d(np.arange(p), independent)
    W1, W2 = W[:, independent], W[:, dependent]
    beta, *_ = np.linalg.lstsq(W1, W2, rcond=None)
    # exact structural zeros come out of lstsq as ~1e-10 noise; snap them (and round the rest to
    # 10 significant digits, far below any identification accuracy)
    beta[np.abs(beta) < 1e-8] = 0.0
    beta = np.array([[float(f'{v:.10g}') for v in row] for row in beta]).reshape(beta.shape)
    E = np.zeros((rank, p))
    E[:, independent] = np.eye(rank)
    E[:, dependent] = beta
    readable = []
    for i, col in enumerate(independent):
        deps = [(names[dependent[k]], beta[i, k]) for k in np.flatnonzero(beta[i])]
        readable.append(_combination(names[col], deps))
    return BaseParameters(full_names=tuple(names), terms=terms, independent=independent,
                          dependent=dependent, beta=beta, E=E, names=tuple(readable),
                          rank_tol=rank_tol)


def main(argv: list[str] | None = None) -> int:
    """`python -m identify.model.base_params [URDF] [--terms viscous coulomb ...]`: print the table."""
    import argparse

    from .arm import REFERENCE_URDF
    from .robot_model import RobotModel

    ap = argparse.ArgumentParser(prog="python -m identify.model.base_params",
                                 description="Print the base parameters of a serial arm.")
    ap.add_argument("urdf", nargs="?", default=None, help="URDF (default: the reference arm)")
    ap.add_argument("--joints", nargs="*", help="joint subset (others locked at zero)")
    ap.add_argument("--terms", nargs="*", default=[], help="extra joint terms: viscous coulomb offset armature")
    args = ap.parse_args(argv)
    model = RobotModel.reference() if args.urdf is None else RobotModel.from_urdf(args.urdf, args.joints)
    bp = compute_base_parameters(model, terms=args.terms)
    values = bp.project(np.concatenate([model.params, np.zeros(bp.n_full - model.params.size)]))
    print(f"{model.name}: {model.n} joints, {bp.n_full} standard parameters, {bp.n_base} base parameters"
          f" (source {model.source or REFERENCE_URDF})")
    print(bp.table(values))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
