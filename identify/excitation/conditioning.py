"""Conditioning of a trajectory: the base regressor (rigid-body base columns + friction columns,
SI units) over a trajectory, cond(W_base) on a dense grid, limit ratios, the dense limit check
every optimized trajectory must pass, and the optimizer's dense-grid checks: the linear limits
made to hold (enforce_dense), the clearance (collision_violation) and motor-torque
(torque_violation) excess between the optimization grid's samples."""
from __future__ import annotations
import casadi as ca
import numpy as np
from .fourier import FourierTrajectory
from .problem import ExcitationProblem


# ------------------------------------------------------------------------------------------------
# regressor pieces
# ------------------------------------------------------------------------------------------------
def base_parameters(model, problem: ExcitationProblem):
    """The identify.model.base_params selection used by `problem` (friction terms included)."""
    from identify.model.base_params import compute_base_parameters
    return compute_base_parameters(model, terms=tuple(problem.terms), seed=problem.base_seed)


def base_regressor_function(model, bp, terms, coulomb_eps: float) -> ca.Function:
    """SX Function (q, qd, qdd) -> W_b^T (p x n) with a smooth Coulomb sign (for the optimizer)."""
    from identify.model.friction import joint_columns_sx
    n = model.n
    q, qd, qdd = ca.SX.sym("q", n), ca.SX.sym("qd", n), ca.SX.sym("qdd", n)
    Y = model.regressor_function()(q, qd, qdd)
    if terms:
        Y = ca.horzcat(Y, joint_columns_sx(qd, qdd, tuple(terms), coulomb_eps=coulomb_eps))
    idx = [int(i) for i in np.asarray(bp.independent)]
    Yb = Y[:, idx]
    return ca.Function("Wb_T", [q, qd, qdd], [Yb.T], ["q", "qd", "qdd"], ["Wb_T"])


def base_regressor(model, bp, terms, q, qd, qdd, coulomb_eps: float = 0.0) -> np.ndarray:
    """Numerical stacked base regressor W_b (N*n, p), exact Coulomb sign by default (SI)."""
    from identify.model.friction import full_regressor
    Y = full_regressor(model, q, qd, qdd, tuple(terms), coulomb_eps)
    return bp.reduce(Y).reshape(-1, len(bp.independent))


def trajectory_cond(model, traj, bp, terms, n_samples: int, coulomb_eps: float = 0.0) -> float:
    """cond(W_base) of `traj` over one period sampled uniformly at `n_samples` points."""
    t = np.arange(n_samples) * (traj.period / n_samples)
    W = base_regressor(model, bp, terms, *traj.evaluate(t), coulomb_eps=coulomb_eps)
    return float(np.linalg.cond(W))


class CondEvaluator:
    """Fast cond(W_base) of trajectories on a fixed uniform grid of one period (exact Coulomb sign).

    Builds the mapped CasADi base regressor once; equal to :func:`trajectory_cond` (which goes
    through the numerical ``model.regressor`` path) up to round-off.
    """

    def __init__(self, model, bp, terms, n_samples: int):
        self.n_samples = int(n_samples)
        self.n_base = len(bp.independent)
        self._f = base_regressor_function(model, bp, tuple(terms), 0.0).map(self.n_samples, "serial")

    def W(self, q, qd, qdd) -> np.ndarray:
        """(N*n, p) stacked base regressor for (N, n) inputs, N = n_samples (sample-major rows)."""
        Wt = np.asarray(self._f(q.T, qd.T, qdd.T))          # (p, n*N), column block per sample
        return Wt.T

    def __call__(self, traj) -> float:
        t = np.arange(self.n_samples) * (traj.period / self.n_samples)
        return float(np.linalg.cond(self.W(*traj.evaluate(t))))


def limit_ratios(traj, limits: dict, n_samples: int) -> dict:
    """Per joint max |qd|/qd_max, |qdd|/qdd_max and position usage on a uniform grid of one period.

    Position usage: max over t of (q - c)/h, with c, h the centre and half-width of
    [q_min, q_max] (1 = on a bound). All (n,) arrays; <= 1 means the limit holds.
    """
    t = np.arange(n_samples) * (traj.period / n_samples)
    q, qd, qdd = traj.evaluate(t)
    lo, hi = limits["q_min"], limits["q_max"]
    fin = np.isfinite(lo) & np.isfinite(hi)
    c = np.where(fin, 0.5 * (lo + hi), 0.0)
    h = np.where(fin, 0.5 * (hi - lo), np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        rq = np.where(fin, np.abs(q - c).max(0) / h, 0.0)
        rv = np.abs(qd).max(0) / limits["qd_max"]
        ra = np.abs(qdd).max(0) / limits["qdd_max"]
    return {"q": rq, "qd": rv, "qdd": ra}


def limit_violation(checks, tol: float = 1e-9):
    """The first sample leaving its limits: `checks` = ((label, v (N, n), lo (n,), hi (n,)), ...)
    in one unit each (rad, rad/s, rad/s^2); tol relative to the finite range. Returns
    (label, sample k, joint j, value, lo_j, hi_j) or None."""
    for label, v, lo, hi in checks:
        lo, hi = np.asarray(lo, float), np.asarray(hi, float)
        span = np.where(np.isfinite(hi - lo), hi - lo, 1.0)
        bad = (v < lo - tol * span) | (v > hi + tol * span)
        if bad.any():
            k, j = np.argwhere(bad)[0]
            return label, int(k), int(j), float(v[k, j]), float(lo[j]), float(hi[j])
    return None


def check_trajectory(model, traj, limits: dict, n_samples: int, tol: float = 1e-9) -> None:
    """Raise ValueError naming joint, quantity and sample where `traj` leaves `limits`
    (including z >= z_min for every link origin when limits['z_min'] is set)."""
    t = np.arange(n_samples) * (traj.period / n_samples)
    q, qd, qdd = traj.evaluate(t)
    names = list(model.joint_names)
    checks = (("q", q, limits["q_min"], limits["q_max"]),
              ("qd", qd, -limits["qd_max"], limits["qd_max"]),
              ("qdd", qdd, -limits["qdd_max"], limits["qdd_max"]))
    bad = limit_violation(checks, tol)
    if bad is not None:
        label, k, j, v, lo, hi = bad
        raise ValueError(f"trajectory leaves the {label} limits of {names[j]} at sample {k} "
                         f"(t = {t[k]:.4f} s): {v:.6g} not in [{lo:.6g}, {hi:.6g}]")
    if limits.get("z_min") is not None:
        z = model.link_origins(q)[:, 1:, 2]
        bad = z < limits["z_min"] - tol
        if bad.any():
            k, j = np.argwhere(bad)[0]
            raise ValueError(f"trajectory violates the workspace constraint z >= {limits['z_min']:g} m "
                             f"at sample {k} (t = {t[k]:.4f} s): origin of the frame of {names[j]} "
                             f"at z = {z[k, j]:.4f} m")


def collision_violation(caps, tr, n_check: int, margin):
    """(how far [m] the closest capsule pair of `tr` on the dense grid is inside the margin, 0
    when it holds; sentence naming the pair and time; {"clearance <pair>": violation [m]})."""
    if caps is None:
        return 0.0, "", {}
    t = np.arange(n_check) * (tr.period / n_check)
    D = caps.distances(tr.evaluate(t)[0])
    if D.size == 0:
        return 0.0, "", {}
    labels = caps.pair_labels()
    per = {f"clearance {l}": max(0.0, float(margin) - float(d)) for l, d in zip(labels, D.min(0))}
    k, p = np.unravel_index(int(np.argmin(D)), D.shape)
    v = max(0.0, float(margin) - float(D[k, p]))
    return v, (f"clearance {labels[p]} between grid samples (t = {t[k]:.3f} s, "
               f"{1e3 * D[k, p]:.1f} mm, margin {1e3 * margin:.1f} mm)"), per


def torque_violation(model, problem, tr, n_check: int) -> np.ndarray:
    """(n,) how far the exact motor-torque bound / tau_max of `tr` exceeds 1 on the dense grid
    (0 where it holds, or without a torque limit)."""
    if problem.torque_limit is None:
        return np.zeros(model.n)
    from .torque import torque_ratio
    t = np.arange(n_check) * (tr.period / n_check)
    return np.maximum(0.0, torque_ratio(model, problem.torque_limit, *tr.evaluate(t)).max(0) - 1.0)


def enforce_dense(model, tr: FourierTrajectory, lim: dict, n_check: int):
    """Make the linear limits hold on the dense check grid and measure the table clearance.

    Each joint whose motion exceeds a limit between optimization grid samples is scaled about its
    start pose by exactly the factor that brings it back (q0 + f (q - q0) stays between q0 and q,
    and qd, qdd scale by f). Returns (trajectory, workspace violation [m], 0 when it holds).
    """
    t = np.arange(n_check) * (tr.period / n_check)
    q, qd, qdd = tr.evaluate(t)
    dq = q - tr.q0
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.vstack([
            np.where(dq.max(0) > 0, (lim["q_max"] - tr.q0) / dq.max(0), np.inf),
            np.where(dq.min(0) < 0, (lim["q_min"] - tr.q0) / dq.min(0), np.inf),
            lim["qd_max"] / np.abs(qd).max(0), lim["qdd_max"] / np.abs(qdd).max(0)]).min(0)
    f = np.where(np.isfinite(f), f, 1.0)
    if np.any(f < 1.0):
        f = np.minimum(1.0, f * (1.0 - 1e-12))
        tr = FourierTrajectory(tr.q0, tr.a * f[:, None], tr.b * f[:, None], tr.wf, 1,
                               tr.joint_names, tr.meta)
        q = tr.evaluate(t)[0]
    z_viol = 0.0
    if lim.get("z_min") is not None:
        z_viol = max(0.0, float(lim["z_min"] - model.link_origins(q)[:, 1:, 2].min()))
    return tr, z_viol
