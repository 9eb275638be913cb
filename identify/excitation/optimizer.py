"""Optimized excitation trajectories (CasADi + IPOPT) and validation trajectories.

    from identify import RobotModel
    from identify.excitation.optimizer import ExcitationProblem, optimize_excitation, validation_trajectory
    m = RobotModel.reference()
    res = optimize_excitation(m, ExcitationProblem(), seed=0, n_starts=2, cache_dir=".cache/excitation")
    res.trajectory, res.cond, res.solver_time_s, res.limits_used
    python -m identify.excitation.optimizer --out traj/ --harmonics 5 --starts 2      # command line

Decision variables (per joint i): the coefficients a_ik, b_ik of harmonics k = 2..H of the Fourier
series of :mod:`identify.excitation.fourier`, plus the start pose q0_i of joints whose start is left free.
Harmonic 1 is eliminated so that the trajectory starts and ends at rest *exactly*
(a_i1 = -sum_k a_ik, b_i1 = -sum_k k b_ik); the start pose is exact because q(0) = q0 by
construction. q, qd, qdd on the grid are therefore *linear* in the variables.

Objective. W is the base regressor (identify.model.base_params selection of the rigid-body columns plus
the friction columns, SI units) stacked over a uniform grid of one period, M = W^T W / tr(W^T W).
We minimise, with r = ``objective_power`` (default 4),

    J = [log tr(M^r) + log tr(M^-r)] / r      (M^-1 by an LDL solve, M^r by repeated squaring)

i.e. the log of the product of the r-norms of the eigenvalues of M and of their inverses (both
matrices are normalised to unit trace before squaring, so no power overflows). It is smooth wherever
W has full column rank, invariant to the overall scale of W, and brackets the condition number:
cond(W)^2 <= exp(J) <= p^(2/r) cond(W)^2 (p base parameters); r = 1 is the trace / A-optimality
surrogate, r -> inf gives log cond(W)^2 itself. Unlike the raw cond(W), whose gradient jumps
whenever the largest or smallest singular value changes hands, J is differentiable and works with
IPOPT's quasi-Newton (L-BFGS) Hessian. With the L-BFGS Hessian (the default) J and its gradient
are not evaluated through CasADi's MX virtual machine but by :class:`_FastObjective`: W_b^T per
sample and its vector-Jacobian product run as generated C (compiled once and cached on disk by
identify.model.regressor.compile_function), M = W^T W, its eigen-decomposition and the closed-form dJ/dM
in numpy, the chain to the coefficients through the constant Fourier bases (reference arm, 200
samples: J + gradient ~4 ms instead of ~38 ms through the MX graph; tested against the graph's
derivative and finite differences).
hessian="exact" keeps the CasADi graph (second derivatives). Each start runs in two stages:
r = 4 from the random initial guess (robust progress from a poor start), then a warm-started
"polish" with r = ``polish_power`` (16), which is close to cond itself. To save IPOPT's linear algebra (which grows with the
number of constraint rows and dominated the solve time), the first stage constrains only every
``screen_stride``-th grid sample with the correspondingly stronger tightening, and the polish sees
only the rows near their bound plus every ``screen_stride``-th one, re-solving with more rows until
the whole grid holds (:func:`_screened_solve`). Measured on the reference arm (paper settings,
2 starts): r = 1, 2, 4, 8, 16, 64 alone all end at cond(W_base) 31-34; r = 4 then 16 ends at
28-30 without screening, 27.7 / 28.2 / 28.5 (seeds 0 / 1 / 2) with it, in half the time. IPOPT
stops when J has changed by less than ``obj_change_tol`` (relative) for 10 iterations. Coulomb
columns use a smooth sign tanh(qd/eps) inside the optimizer. The figure reported and judged is
always the plain cond(W_base) with the exact sign, on a grid 10x denser than the optimization grid
(:attr:`ExcitationResult.cond`).

Constraints at every grid sample (scaled to O(1) by the limits): |qd| <= qd_max, |qdd| <= qdd_max,
q within [q_min, q_max] (all scaled by ``limit_scale`` about the range centre), optionally every link
origin above a table plane z >= z_min, optionally a minimum RMS velocity per joint. The position,
velocity and acceleration bounds on the grid are tightened by the factor cos(pi H / N). q - c, qd
and qdd are trigonometric polynomials of degree H, and for those the Ehlich-Zeller inequality
bounds the maximum over the whole period by sec(pi H / N) times the maximum over N equispaced
samples (N > 2H), so these limits then hold in continuous time, not only on the grid (for H = 5,
N = 200 the tightening is 0.3 %). The result is still checked on the 10x denser grid; should a
linear limit be exceeded there (only by IPOPT's constraint tolerance), that joint's motion is scaled
towards the start pose until it holds. The table constraint has no such bound: a violation between
grid samples found on the dense grid raises the table for that start and re-solves (at most 3 times).

Infeasible requests are caught before IPOPT runs when a necessary condition fails (start pose
outside the limits or under the table, a joint that cannot move, an RMS velocity that no trajectory
can reach), and an IPOPT failure is translated into :class:`ExcitationInfeasible` naming the worst
violated constraint.

Results are cached in ``cache_dir`` as YAML files named by a SHA-256 hash of the full problem
definition (model parameters, kinematics, limits, settings, base-parameter selection, seed, starts).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import casadi as ca
import numpy as np

from .fourier import FourierTrajectory, _atomic_write, _plain

CACHE_VERSION = 3  # bump when the optimizer changes in a way that changes results


class ExcitationInfeasible(ValueError):
    """The requested excitation problem has no feasible trajectory (message names the constraint)."""


def upright_pose(n: int) -> tuple[float, ...]:
    """The paper's start pose [rad]: joints 2 and 4 at -90 deg (arm upright), the others at 0."""
    return tuple(-math.pi / 2 if i in (1, 3) else 0.0 for i in range(n))


@dataclass(frozen=True)
class ExcitationProblem:
    """Everything that defines an excitation-trajectory optimization (SI units).

    Attributes:
        harmonics: H, harmonics per joint (paper: 5).
        wf: fundamental frequency [rad/s] (paper: 0.1 pi, period 20 s).
        start_pose: (n,) start/end pose [rad]; an entry None leaves that joint's start pose free
            (optimized within the limits). None: the paper's upright pose (:func:`upright_pose`).
        n_grid: samples per period for the objective and the constraints (N).
        terms: friction columns appended to the regressor (identify.model.friction term names).
        coulomb_eps: smoothing velocity of the Coulomb sign inside the optimizer [rad/s].
        limit_scale: fraction of the arm's limits used: one number, or (q, qd, qdd). Velocity and
            acceleration limits are multiplied by it; the position range shrinks about its centre.
        z_min: table plane [m]: every link-frame origin stays at z >= z_min (None: no constraint).
        min_rms_velocity: per-joint lower bound on the RMS velocity over a period [rad/s]
            (one number or (n,); None: no bound).
        base_seed: seed of identify.model.base_params.compute_base_parameters (column selection).
        max_iter: IPOPT iterations per start.
        tol: IPOPT relative tolerance.
        obj_change_tol: stop early when J changes by less than this (relative) for 10 iterations
            at an acceptable point (IPOPT acceptable_obj_change_tol).
        objective_power: r in J = (log tr(M^r) + log tr(M^-r)) / r, a power of two (1, 2, 4, ...);
            larger r weights the extreme singular values more (r -> inf gives log cond(M)).
        hessian: IPOPT hessian_approximation ("limited-memory" or "exact"; exact was ~10x slower).
        lbfgs_history: IPOPT limited_memory_max_history.
        mu_strategy: IPOPT barrier update ("adaptive" or "monotone").
        polish_power: after each start, re-solve warm-started with this (higher) power to move
            from the smooth surrogate's optimum towards the lowest cond itself (None: off);
            at most max_iter // 3 iterations.
        screen_stride, screen_threshold: IPOPT sees only the linear limit rows of every
            screen_stride-th grid sample plus those within screen_threshold of their bound,
            rows being added and the solve repeated until the full grid holds (see
            :func:`_screened_solve`; same constraints, less linear algebra). With a polish
            stage, the first stage instead has its limit rows only at every screen_stride-th
            sample, tightened by cos(pi H screen_stride / N) so they hold in continuous time
            (used when N / screen_stride >= 2H + 1). None: all rows in both stages.
            Only problems with at least screen_min_rows linear limit rows (3 n N) are screened:
            below that IPOPT's linear algebra is cheap and the full problem is solved.
    """

    harmonics: int = 5
    wf: float = 0.1 * math.pi
    start_pose: tuple | None = None
    n_grid: int = 200
    terms: tuple[str, ...] = ("viscous", "coulomb")
    coulomb_eps: float = 0.05
    limit_scale: float | tuple[float, float, float] = 0.8
    z_min: float | None = None
    min_rms_velocity: float | tuple | None = None
    base_seed: int = 0
    max_iter: int = 300
    tol: float = 1e-6
    obj_change_tol: float = 3e-4
    objective_power: int = 4
    hessian: str = "limited-memory"
    polish_power: int | None = 16
    lbfgs_history: int = 6
    mu_strategy: str = "adaptive"
    screen_stride: int | None = 8
    screen_threshold: float = 0.5
    screen_min_rows: int = 1000

    @property
    def period(self) -> float:
        """T = 2 pi / wf [s]."""
        return 2.0 * math.pi / self.wf

    def to_dict(self) -> dict:
        return _plain(asdict(self))

    def scales(self) -> tuple[float, float, float]:
        s = self.limit_scale
        if np.ndim(s) == 0:
            return (float(s),) * 3
        s = tuple(float(x) for x in s)
        if len(s) != 3:
            raise ValueError(f"ExcitationProblem.limit_scale: one number or (q, qd, qdd), got {s}")
        return s


@dataclass
class ExcitationResult:
    """Outcome of :func:`optimize_excitation`.

    Attributes:
        trajectory: the best :class:`~identify.excitation.fourier.FourierTrajectory` (one period).
        cond: cond(W_base) with the exact Coulomb sign on the check grid (10x the optimization
            grid) -- the figure to report.
        cond_grid: the same on the optimization grid.
        objective: final value of J (see module docstring).
        solver_time_s: wall time spent in IPOPT over all starts [s] (0 when read from the cache).
        build_time_s: time to build the CasADi problem [s].
        limits_used: dict q_min, q_max, qd_max, qdd_max (n,) after scaling (+ z_min).
        max_ratio: dict q, qd, qdd -> (n,) max |value| / limit on the check grid (<= 1 when held;
            for q: max excursion relative to the scaled range, 1 = touching a bound).
        starts: per start: dict seed, status, iterations, time_s, cond, feasible, eval_time_s
            (of time_s, the wall time IPOPT spent in objective/constraint callbacks; the rest
            is IPOPT's own linear algebra).
        n_base: number of base parameters p (columns of W_base); base_names: their names.
        from_cache: True when the result was read from the cache; cache_file: its path.
        problem, seed, n_starts: the inputs.
    """

    trajectory: FourierTrajectory
    cond: float
    cond_grid: float
    objective: float
    solver_time_s: float
    build_time_s: float
    limits_used: dict
    max_ratio: dict
    starts: list
    n_base: int
    base_names: list
    problem: ExcitationProblem
    seed: int
    n_starts: int
    from_cache: bool = False
    cache_file: str | None = None

    def summary(self) -> str:
        lim = self.limits_used
        lines = [f"cond(W_base) = {self.cond:.2f} (check grid), {self.cond_grid:.2f} (opt. grid); "
                 f"{self.n_base} base parameters; solver {self.solver_time_s:.1f} s over "
                 f"{self.n_starts} start(s){' (cached)' if self.from_cache else ''}"]
        for k in ("q", "qd", "qdd"):
            lines.append(f"  max |{k}|/limit per joint: " +
                         " ".join(f"{x:.3f}" for x in self.max_ratio[k]))
        lines.append("  limits used: qd_max " + " ".join(f"{x:.3f}" for x in lim["qd_max"]) +
                     " rad/s; qdd_max " + " ".join(f"{x:.3f}" for x in lim["qdd_max"]) + " rad/s^2")
        return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# limits, start pose, checks
# ------------------------------------------------------------------------------------------------
def resolve_start(model, problem: ExcitationProblem) -> tuple[np.ndarray, np.ndarray]:
    """(q_start (n,) with NaN for free joints, free mask (n,) bool)."""
    n = model.n
    sp = upright_pose(n) if problem.start_pose is None else tuple(problem.start_pose)
    if len(sp) != n:
        raise ValueError(f"ExcitationProblem.start_pose has {len(sp)} entries, the arm "
                         f"{model.name!r} has {n} joints {list(model.joint_names)}")
    q = np.array([np.nan if v is None else float(v) for v in sp])
    return q, np.isnan(q)


def scaled_limits(model, problem: ExcitationProblem) -> dict:
    """Limits the trajectory must respect: q_min, q_max, qd_max, qdd_max (n,) [SI] (+ z_min)."""
    s_q, s_v, s_a = problem.scales()
    for name, s in (("q", s_q), ("qd", s_v), ("qdd", s_a)):
        if not (0.0 < s <= 1.0):
            raise ValueError(f"ExcitationProblem.limit_scale for {name} must be in (0, 1], got {s}")
    L = model.limits
    lo, hi = np.asarray(L.q_min, float), np.asarray(L.q_max, float)
    fin = np.isfinite(lo) & np.isfinite(hi)
    c = np.where(fin, 0.5 * (lo + hi), 0.0)
    h = np.where(fin, 0.5 * (hi - lo), np.inf)
    return {"q_min": np.where(fin, c - s_q * h, -np.inf), "q_max": np.where(fin, c + s_q * h, np.inf),
            "qd_max": s_v * np.asarray(L.qd_max, float),
            "qdd_max": s_a * np.asarray(L.qdd_max, float), "z_min": problem.z_min}


def _rms_bounds(model, problem) -> np.ndarray | None:
    v = problem.min_rms_velocity
    if v is None:
        return None
    v = np.broadcast_to(np.asarray(v, float), (model.n,)).copy()
    return v


def check_problem(model, problem: ExcitationProblem) -> None:
    """Necessary conditions for feasibility, checked before any optimization.

    Raises :class:`ExcitationInfeasible` (or ValueError for malformed settings) naming the
    joint and the constraint at fault.
    """
    n, names = model.n, list(model.joint_names)
    H, N = int(problem.harmonics), int(problem.n_grid)
    if H != problem.harmonics or H < 1:
        raise ValueError(f"ExcitationProblem.harmonics must be an integer >= 1, got {problem.harmonics!r}")
    if H == 1:
        raise ExcitationInfeasible(
            "harmonics = 1 leaves no free coefficient: starting and ending at rest forces "
            "a_1 = b_1 = 0, so the arm would not move; use harmonics >= 2")
    if not (np.isfinite(problem.wf) and problem.wf > 0):
        raise ValueError(f"ExcitationProblem.wf must be a positive frequency [rad/s], got {problem.wf!r}")
    if N < 2 * H + 1:
        raise ValueError(f"ExcitationProblem.n_grid = {N} cannot resolve {H} harmonics "
                         f"(need at least 2H+1 = {2 * H + 1} samples per period)")
    for key in ("objective_power", "polish_power"):
        r = getattr(problem, key)
        if key == "polish_power" and r is None:
            continue
        if not (isinstance(r, (int, np.integer)) and r >= 1 and (r & (r - 1)) == 0):
            raise ValueError(f"ExcitationProblem.{key} must be a power of two (1, 2, 4, ...), "
                             f"got {r!r}")
    if not problem.coulomb_eps > 0:
        raise ValueError(f"ExcitationProblem.coulomb_eps must be > 0 [rad/s], got {problem.coulomb_eps!r}")
    q_start, free = resolve_start(model, problem)
    lim = scaled_limits(model, problem)
    s_q = problem.scales()[0]
    for i in range(n):
        if free[i]:
            continue
        if not (lim["q_min"][i] <= q_start[i] <= lim["q_max"][i]):
            raise ExcitationInfeasible(
                f"start pose of {names[i]} ({math.degrees(q_start[i]):.2f} deg) is outside its "
                f"position limits [{math.degrees(lim['q_min'][i]):.2f}, "
                f"{math.degrees(lim['q_max'][i]):.2f}] deg (arm limits scaled by limit_scale "
                f"{s_q:g}): constraint q_min <= q(0) <= q_max")
    for key, label in (("qd_max", "velocity limit qd_max"), ("qdd_max", "acceleration limit qdd_max")):
        for i in range(n):
            if not lim[key][i] > 0:
                raise ExcitationInfeasible(
                    f"{names[i]} cannot move: its {label} is {lim[key][i]:g} (after limit_scale); "
                    f"the joint's regressor columns would be zero and cond(W) infinite")
    for i in range(n):
        if free[i]:
            continue
        if lim["q_max"][i] - lim["q_min"][i] <= 0:
            raise ExcitationInfeasible(f"{names[i]} cannot move: its position range is empty")
    if problem.z_min is not None:
        # q(0) is the start pose, so it must be above the table; for a free start joint only the
        # origins whose height does not depend on the free joints are decided already.
        z_min = float(problem.z_min)
        q_chk = np.where(free, np.clip(0.0, lim["q_min"], lim["q_max"]), q_start)
        z = model.link_origins(q_chk)[1:, 2]
        z_alt = model.link_origins(q_chk + 0.7 * free)[1:, 2]
        for j in range(n):
            if z[j] < z_min and abs(z_alt[j] - z[j]) < 1e-12:
                raise ExcitationInfeasible(
                    f"workspace constraint z >= z_min = {z_min:g} m fails at the start pose: the "
                    f"origin of the frame of {names[j]} is at z = {z[j]:.4f} m")
    vmin = _rms_bounds(model, problem)
    if vmin is not None:
        T = problem.period
        for i in range(n):
            if vmin[i] < 0:
                raise ValueError(f"min_rms_velocity for {names[i]} must be >= 0, got {vmin[i]}")
            if vmin[i] == 0:
                continue
            # RMS(qd) <= max|qd|;  RMS(qd) <= RMS(qdd)/wf <= qdd_max/wf (Parseval, k >= 1);
            # RMS(qd) <= H wf RMS(q - mean) <= H wf (q_max - q_min)/2 (Parseval, k <= H).
            caps = {"velocity limit qd_max": lim["qd_max"][i],
                    "acceleration limit (qdd_max / wf)": lim["qdd_max"][i] / problem.wf,
                    f"position range (H wf (q_max - q_min)/2, H = {H})":
                        H * problem.wf * 0.5 * (lim["q_max"][i] - lim["q_min"][i])}
            for what, cap in caps.items():
                if vmin[i] > cap:
                    raise ExcitationInfeasible(
                        f"amplitude impossible for {names[i]}: min_rms_velocity {vmin[i]:.4g} rad/s "
                        f"exceeds the most its {what} allows, {cap:.4g} rad/s (period {T:.3g} s)")


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


def check_trajectory(model, traj, limits: dict, n_samples: int, tol: float = 1e-9) -> None:
    """Raise ValueError naming joint, quantity and sample where `traj` leaves `limits`
    (including z >= z_min for every link origin when limits['z_min'] is set)."""
    t = np.arange(n_samples) * (traj.period / n_samples)
    q, qd, qdd = traj.evaluate(t)
    names = list(model.joint_names)
    checks = (("q", q, limits["q_min"], limits["q_max"]),
              ("qd", qd, -limits["qd_max"], limits["qd_max"]),
              ("qdd", qdd, -limits["qdd_max"], limits["qdd_max"]))
    for label, v, lo, hi in checks:
        span = np.where(np.isfinite(hi - lo), hi - lo, 1.0)
        bad = (v < lo - tol * span) | (v > hi + tol * span)
        if bad.any():
            k, j = np.argwhere(bad)[0]
            raise ValueError(f"trajectory leaves the {label} limits of {names[j]} at sample {k} "
                             f"(t = {t[k]:.4f} s): {v[k, j]:.6g} not in [{lo[j]:.6g}, {hi[j]:.6g}]")
    if limits.get("z_min") is not None:
        z = model.link_origins(q)[:, 1:, 2]
        bad = z < limits["z_min"] - tol
        if bad.any():
            k, j = np.argwhere(bad)[0]
            raise ValueError(f"trajectory violates the workspace constraint z >= {limits['z_min']:g} m "
                             f"at sample {k} (t = {t[k]:.4f} s): origin of the frame of {names[j]} "
                             f"at z = {z[k, j]:.4f} m")


# ------------------------------------------------------------------------------------------------
# Fourier basis for the free coefficients
# ------------------------------------------------------------------------------------------------
def free_basis(H: int, wf: float, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Matrices P, V, A (N, 2(H-1)) with q - q0 = P x, qd = V x, qdd = A x for one joint, where
    x = [a_2..a_H, b_2..b_H] and harmonic 1 is fixed by the rest conditions (see fourier.py)."""
    t = np.asarray(t, float)
    k = np.arange(2, H + 1, dtype=float)
    ph = np.mod(np.outer(t, k) * wf, 2 * math.pi)
    ph1 = np.mod(t * wf, 2 * math.pi)[:, None]
    s, c, s1, c1 = np.sin(ph), np.cos(ph), np.sin(ph1), np.cos(ph1)
    kw = k * wf
    Pa = s / kw - s1 / wf
    Pb = (1 - c) / kw - k * (1 - c1) / wf
    Va = c - c1
    Vb = s - k * s1
    Aa = -kw * s + wf * s1
    Ab = kw * c - k * wf * c1
    return np.hstack([Pa, Pb]), np.hstack([Va, Vb]), np.hstack([Aa, Ab])


def _to_trajectory(x: np.ndarray, q_start: np.ndarray, free: np.ndarray, H: int, wf: float,
                   joint_names, meta=None) -> FourierTrajectory:
    n = q_start.shape[0]
    m = 2 * (H - 1)
    X = x[:n * m].reshape(n, m)
    q0 = q_start.copy()
    q0[free] = x[n * m:]
    return FourierTrajectory.from_free(q0, X[:, :H - 1], X[:, H - 1:], wf,
                                       joint_names=tuple(joint_names), meta=meta or {})


def _to_x(traj: FourierTrajectory, free: np.ndarray) -> np.ndarray:
    return np.concatenate([np.hstack([traj.a[:, 1:], traj.b[:, 1:]]).reshape(-1), traj.q0[free]])


# ------------------------------------------------------------------------------------------------
# random feasible trajectories (initial guesses, benchmark baseline, validation)
# ------------------------------------------------------------------------------------------------
def random_trajectory(model, problem: ExcitationProblem, rng: np.random.Generator,
                      fill: float = 1.0, limits: dict | None = None,
                      n_check: int | None = None) -> FourierTrajectory:
    """A random trajectory of `problem`'s form scaled so the linear limits are used up to `fill`.

    Coefficients ~ N(0, 1)/k (harmonic k), free start poses uniform in the middle half of their
    range (clipped to +-pi). The motion is then scaled (about the start pose) so that the largest
    of |qd|/qd_max, |qdd|/qdd_max, position usage on a grid of `n_check` samples equals `fill`.
    The workspace constraint is NOT enforced here (see :func:`random_feasible_trajectory`).
    """
    n, H, wf = model.n, problem.harmonics, problem.wf
    lim = scaled_limits(model, problem) if limits is None else limits
    q_start, free = resolve_start(model, problem)
    q0 = q_start.copy()
    for i in np.flatnonzero(free):
        lo, hi = max(lim["q_min"][i], -math.pi), min(lim["q_max"][i], math.pi)
        c, h = 0.5 * (lo + hi), 0.5 * (hi - lo)
        q0[i] = rng.uniform(c - 0.5 * h, c + 0.5 * h)
    k = np.arange(2, H + 1, dtype=float)
    A = rng.standard_normal((n, H - 1)) / k
    B = rng.standard_normal((n, H - 1)) / k
    if H == 1:
        return FourierTrajectory.from_free(q0, A, B, wf, joint_names=tuple(model.joint_names))
    n_check = n_check or 10 * problem.n_grid
    t = np.arange(n_check) * (2 * math.pi / wf / n_check)
    P, V, Acc = free_basis(H, wf, t)
    X = np.hstack([A, B])                       # (n, m)
    dq, qd, qdd = X @ P.T, X @ V.T, X @ Acc.T   # (n, N)
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(dq.max(1) > 0, (lim["q_max"] - q0) / dq.max(1), np.inf)
        dn = np.where(dq.min(1) < 0, (lim["q_min"] - q0) / dq.min(1), np.inf)
        sv = lim["qd_max"] / np.abs(qd).max(1)
        sa = lim["qdd_max"] / np.abs(qdd).max(1)
    s = fill * np.min(np.vstack([up, dn, sv, sa]), axis=0)   # per joint
    s = np.where(np.isfinite(s), s, 1.0)
    X = X * s[:, None]
    return FourierTrajectory.from_free(q0, X[:, :H - 1], X[:, H - 1:], wf,
                                       joint_names=tuple(model.joint_names))


def random_feasible_trajectory(model, problem, rng, fill: float = 1.0, max_tries: int = 1000,
                               n_check: int | None = None) -> FourierTrajectory:
    """:func:`random_trajectory` that also satisfies the workspace constraint (rejection)."""
    lim = scaled_limits(model, problem)
    n_check = n_check or 10 * problem.n_grid
    for _ in range(max_tries):
        tr = random_trajectory(model, problem, rng, fill=fill, limits=lim, n_check=n_check)
        if lim["z_min"] is None:
            return tr
        t = np.arange(n_check) * (tr.period / n_check)
        if model.link_origins(tr.evaluate(t)[0])[:, 1:, 2].min() >= lim["z_min"]:
            return tr
    raise ExcitationInfeasible(f"no random trajectory in {max_tries} tries satisfies the workspace "
                               f"constraint z >= {lim['z_min']:g} m")


# ------------------------------------------------------------------------------------------------
# the NLP
# ------------------------------------------------------------------------------------------------
@dataclass
class _NLP:
    solver: ca.Function
    lbg: np.ndarray
    ubg: np.ndarray
    lbx: np.ndarray
    ubx: np.ndarray
    groups: list          # (label, joint index, slice into g, kind) for error messages
    g_fun: ca.Function
    f_fun: ca.Function
    bp: object
    build_time_s: float
    keep: object = None   # the objective callback (must outlive the solver)
    symbols: tuple = ()   # (x, f, G) MX expressions and the IPOPT options, for row-screened solvers
    opts: dict | None = None
    linear: np.ndarray | None = None   # (rows,) bool: a linear q/qd/qdd limit row
    sample: np.ndarray | None = None   # (rows,) grid sample index of the row within its group
    subs: dict | None = None           # screened solvers by row selection

    def sub_solver(self, keep: np.ndarray) -> ca.Function:
        """IPOPT solver of the same problem with only the constraint rows `keep` (bool mask)."""
        key = hashlib.sha1(np.packbits(keep).tobytes()).hexdigest()
        if self.subs is None:
            self.subs = {}
        if key not in self.subs:
            if len(self.subs) > 16:
                self.subs.clear()
            x, f, G = self.symbols
            idx = [int(i) for i in np.flatnonzero(keep)]
            self.subs[key] = ca.nlpsol("excitation_screened", "ipopt",
                                       {"x": x, "f": f, "g": G[idx]}, self.opts)
        return self.subs[key]


_NLP_CACHE: dict = {}


def _power_objective(M, p: int, r: int):
    """J = [log tr(M^r) + log tr(M^-r)] / r for a symmetric positive definite MX M (p x p).

    Overflow-safe for any power of two r: both M and M^-1 are normalised to unit trace before
    repeated squaring (their eigenvalues then lie in (0, 1]), and the scale is added back in logs.
    """
    Mn = M / ca.trace(M)                                  # eigenvalues sum to 1
    Mi = ca.solve(Mn, ca.MX.eye(p), "ldl", {})
    tr_i = ca.trace(Mi)
    Min = Mi / tr_i
    A, B = Mn, Min
    for _ in range(r.bit_length() - 1):
        A, B = ca.mtimes(A, A), ca.mtimes(B, B)
    return (ca.log(ca.trace(A)) + r * ca.log(tr_i) + ca.log(ca.trace(B))) / r


class _FastObjective:
    """J (module docstring) and its exact gradient w.r.t. the NLP variables, evaluated without
    CasADi's MX virtual machine: W_b^T per sample and its vector-Jacobian product come from
    generated C (identify.model.regressor.BatchEvaluator, cached on disk), M = W^T W, its eigenvalues and
    dJ/dM from numpy, the chain to the Fourier coefficients through the constant bases P, V, A.

    With lambda_k, u_k the eigenpairs of M, l_k = log(lambda_k / tr M) and w(+-r) = softmax(+-r l):
    J = [logsumexp(r l) + logsumexp(-r l)] / r and dJ/dM = U diag((w(+r) - w(-r)) / lambda) U^T
    (the trace terms cancel), dJ/dW^T_s = 2 dJ/dM W^T_s per sample s.
    """

    def __init__(self, model, problem: ExcitationProblem, bp, free, q_start, P, V, A):
        from identify.model.regressor import BatchEvaluator
        n, p = model.n, len(bp.independent)
        fb = base_regressor_function(model, bp, problem.terms, problem.coulomb_eps)
        q, qd, qdd = ca.SX.sym("q", n), ca.SX.sym("qd", n), ca.SX.sym("qdd", n)
        S = ca.SX.sym("S", p * n)
        Wt = fb(q, qd, qdd)
        val = ca.dot(ca.reshape(S, p, n), Wt)
        # BatchEvaluator writes nonzeros: both outputs made dense
        fwd = ca.Function("Wb_T_dense", [q, qd, qdd], [ca.densify(Wt)])
        vjp = ca.Function("Wb_T_vjp", [q, qd, qdd, S],
                          [ca.densify(ca.gradient(val, ca.vertcat(q, qd, qdd)))])
        self.fw = BatchEvaluator(fwd)           # (N, p, n)
        self.fv = BatchEvaluator(vjp)           # (N, 3n, 1)
        self.n, self.p, self.r = n, p, int(problem.objective_power)
        self.m = 2 * (int(problem.harmonics) - 1)
        self.free = np.asarray(free, bool)
        self.q_start = np.asarray(q_start, float)
        self.P, self.V, self.A = P, V, A
        self._last = None

    def _states(self, x):
        n, m = self.n, self.m
        X = x[:n * m].reshape(n, m)
        q0 = self.q_start.copy()
        q0[self.free] = x[n * m:]
        return q0[None, :] + self.P @ X.T, self.V @ X.T, self.A @ X.T      # (N, n) each

    def _forward(self, x):
        x = np.ascontiguousarray(x, float).reshape(-1)
        if self._last is not None and np.array_equal(self._last[0], x):
            return self._last
        q, qd, qdd = self._states(x)
        F = self.fw(q, qd, qdd)                                  # (N, p, n) = W_s^T
        Fm = F.transpose(1, 0, 2).reshape(self.p, -1)
        M = Fm @ Fm.T
        lam, U = np.linalg.eigh(M)
        if not (np.all(np.isfinite(lam)) and lam[0] > 0):
            self._last = (x, np.nan, None, None, None, None, (q, qd, qdd))
            return self._last
        ell = np.log(lam / lam.sum())

        def lse(v):
            c = v.max()
            w = np.exp(v - c)
            return c + math.log(w.sum()), w / w.sum()
        r = self.r
        jp, wp = lse(r * ell)
        jm, wm = lse(-r * ell)
        J = (jp + jm) / r
        self._last = (x, J, F, U, lam, wp - wm, (q, qd, qdd))
        return self._last

    def value(self, x) -> float:
        return float(self._forward(x)[1])

    def gradient(self, x) -> np.ndarray:
        x, J, F, U, lam, dw, (q, qd, qdd) = self._forward(x)
        if F is None:
            return np.full(x.shape, np.nan)
        G = (U * (dw / lam)) @ U.T                               # dJ/dM (p, p)
        S = 2.0 * np.einsum("pq,sqn->snp", G, F)                 # seeds, column-major per sample
        adj = self.fv(q, qd, qdd, S.reshape(S.shape[0], -1))[:, :, 0]   # (N, 3n)
        n = self.n
        aq, av, aa = adj[:, :n], adj[:, n:2 * n], adj[:, 2 * n:]
        gX = aq.T @ self.P + av.T @ self.V + aa.T @ self.A       # (n, m)
        return np.concatenate([gX.reshape(-1), aq.sum(0)[self.free]])


class _ObjCallback(ca.Callback):
    """CasADi Function x -> J backed by :class:`_FastObjective` (gradient via get_jacobian)."""

    def __init__(self, name, obj: _FastObjective, nx: int, grad: bool = False, opts=None):
        ca.Callback.__init__(self)
        self.obj, self.nx, self.grad = obj, nx, grad
        self._jac = None
        self.construct(name, opts or {})

    def get_n_in(self):
        return 2 if self.grad else 1

    def get_n_out(self):
        return 1

    def get_sparsity_in(self, i):
        return ca.Sparsity.dense(self.nx, 1) if i == 0 else ca.Sparsity.dense(1, 1)

    def get_sparsity_out(self, i):
        return ca.Sparsity.dense(1, self.nx) if self.grad else ca.Sparsity.dense(1, 1)

    def eval(self, arg):
        x = np.asarray(arg[0], float).reshape(-1)
        if self.grad:
            return [ca.DM(self.obj.gradient(x)).T]
        return [self.obj.value(x)]

    def has_jacobian(self):
        return not self.grad

    def get_jacobian(self, name, inames, onames, opts):
        self._jac = _ObjCallback(name, self.obj, self.nx, grad=True)
        return self._jac


def _build_nlp(model, problem: ExcitationProblem, bp, constraint_stride: int = 1) -> _NLP:
    """The IPOPT problem of `problem`. constraint_stride > 1: the linear limit rows only at every
    constraint_stride-th grid sample, tightened by cos(pi H stride / N) instead (Ehlich-Zeller on
    that coarser grid, so the limits still hold in continuous time; a cheaper first stage)."""
    cs = int(constraint_stride)
    key = (id(model), _problem_key(model, problem, bp, seed=None, n_starts=None), cs)
    if key in _NLP_CACHE:
        return _NLP_CACHE[key]
    t0 = time.perf_counter()
    n, H, N, wf = model.n, problem.harmonics, problem.n_grid, problem.wf
    m = 2 * (H - 1)
    q_start, free = resolve_start(model, problem)
    nf = int(free.sum())
    lim = scaled_limits(model, problem)
    t = np.arange(N) * (problem.period / N)
    P, V, A = free_basis(H, wf, t)

    x = ca.MX.sym("x", n * m + nf)
    X = ca.reshape(x[:n * m], m, n).T                       # (n, m), row i = joint i
    q0 = []
    kf = 0
    for i in range(n):
        if free[i]:
            q0.append(x[n * m + kf])
            kf += 1
        else:
            q0.append(ca.MX(float(q_start[i])))
    q0 = ca.vertcat(*q0)
    Q = ca.repmat(q0, 1, N) + ca.mtimes(X, ca.DM(P.T))       # (n, N)
    QD = ca.mtimes(X, ca.DM(V.T))
    QDD = ca.mtimes(X, ca.DM(A.T))

    keep = None
    if problem.hessian == "exact":      # needs second derivatives: the CasADi graph of J
        fb = base_regressor_function(model, bp, problem.terms, problem.coulomb_eps)
        Wt = fb.map(N, "serial")(Q, QD, QDD)                     # (p, n*N) = W^T
        p = Wt.shape[0]
        M = ca.mtimes(Wt, Wt.T)
        f = _power_objective(M, p, int(problem.objective_power))
    else:                               # first derivatives only: compiled C + numpy (faster)
        keep = _ObjCallback("J", _FastObjective(model, problem, bp, free, q_start, P, V, A),
                            n * m + nf)
        f = keep(x)

    if cs < 1 or N % cs or N // cs < 2 * H + 1:
        raise ValueError(f"constraint stride {cs} must divide n_grid = {N} and leave at least "
                         f"2H+1 = {2 * H + 1} constraint samples")
    bound = math.cos(math.pi * H * cs / N)  # Ehlich-Zeller: grid bound -> continuous-time bound
    g, lbg, ubg, groups = [], [], [], []
    off = 0

    def add(expr, lo, hi, label, joint, kind):
        nonlocal off
        sz = expr.shape[0] * expr.shape[1]
        g.append(ca.reshape(expr, sz, 1))
        lbg.append(np.broadcast_to(lo, (sz,)))
        ubg.append(np.broadcast_to(hi, (sz,)))
        groups.append((label, joint, slice(off, off + sz), kind))
        off += sz

    for i in range(n):
        lo, hi = lim["q_min"][i], lim["q_max"][i]
        if np.isfinite(lo) and np.isfinite(hi):
            c, h = 0.5 * (lo + hi), 0.5 * (hi - lo)
            add(((Q[i, ::cs] - c) / h).T, -bound, bound, "position limit", i, "q")
        if np.isfinite(lim["qd_max"][i]):
            add((QD[i, ::cs] / lim["qd_max"][i]).T, -bound, bound, "velocity limit", i, "qd")
        if np.isfinite(lim["qdd_max"][i]):
            add((QDD[i, ::cs] / lim["qdd_max"][i]).T, -bound, bound, "acceleration limit", i,
                "qdd")
    if problem.z_min is not None:
        O = model.link_origins_function().map(N, "serial")(Q)   # (3, (n+1) N)
        Z = ca.reshape(O[2, :], n + 1, N)                        # (n+1, N)
        # origins whose height never changes (e.g. the shoulder) are settled by check_problem
        rng = np.random.default_rng(0)
        lo = np.maximum(lim["q_min"], -math.pi)
        hi = np.minimum(lim["q_max"], math.pi)
        z_var = np.ptp(model.link_origins(rng.uniform(lo, hi, (64, n)))[:, :, 2], axis=0)
        for j in range(1, n + 1):
            if z_var[j] > 1e-9:
                add(Z[j, :].T, float(problem.z_min), np.inf,
                    "workspace z >= z_min (origin of frame)", j - 1, "z")
    vmin = _rms_bounds(model, problem)
    if vmin is not None:
        for i in range(n):
            if vmin[i] > 0:
                rms2 = ca.sumsqr(QD[i, :]) / N
                add(rms2 / vmin[i] ** 2, 1.0, np.inf, "minimum RMS velocity", i, "rms")
    G = ca.vertcat(*g) if g else ca.MX(0, 1)
    lbg = np.concatenate(lbg) if lbg else np.zeros(0)
    ubg = np.concatenate(ubg) if ubg else np.zeros(0)
    lbx = np.full(n * m + nf, -np.inf)
    ubx = np.full(n * m + nf, np.inf)
    for kf, i in enumerate(np.flatnonzero(free)):
        lbx[n * m + kf] = max(lim["q_min"][i], -1e3)
        ubx[n * m + kf] = min(lim["q_max"][i], 1e3)
    opts = {"ipopt.print_level": 0, "print_time": False, "ipopt.sb": "yes",
            "ipopt.hessian_approximation": problem.hessian, "ipopt.max_iter": int(problem.max_iter),
            "ipopt.tol": float(problem.tol), "ipopt.mu_strategy": problem.mu_strategy,
            "ipopt.limited_memory_max_history": int(problem.lbfgs_history),
            # L-BFGS creeps for many iterations once cond(W) has settled: stop after 10 iterations
            # with relative objective change below problem.obj_change_tol (at an acceptable point)
            "ipopt.acceptable_tol": 1e-2, "ipopt.acceptable_iter": 10,
            "ipopt.acceptable_obj_change_tol": float(problem.obj_change_tol)}
    solver = ca.nlpsol("excitation", "ipopt", {"x": x, "f": f, "g": G}, opts)
    linear = np.zeros(lbg.size, bool)
    sample = np.zeros(lbg.size, int)
    for label, j, sl, kind in groups:
        linear[sl] = kind in ("q", "qd", "qdd")
        sample[sl] = np.arange(sl.stop - sl.start) * (cs if linear[sl.start] else 1)
    nlp = _NLP(solver=solver, lbg=lbg, ubg=ubg, lbx=lbx, ubx=ubx, groups=groups,
               g_fun=ca.Function("g", [x], [G]), f_fun=ca.Function("f", [x], [f]), bp=bp,
               build_time_s=time.perf_counter() - t0, keep=keep, symbols=(x, f, G), opts=opts,
               linear=linear, sample=sample)
    if len(_NLP_CACHE) > 8:
        _NLP_CACHE.clear()
    _NLP_CACHE[key] = nlp
    return nlp


def _coarse_stride(problem: ExcitationProblem, lim: dict, q_start, free) -> int:
    """Constraint stride of the first stage (1: full grid). The largest of screen_stride,
    screen_stride/2, ... that divides N, leaves >= 2H+1 samples, tightens by no more than
    cos(pi H stride / N) >= 0.75 and keeps every fixed start pose well inside the tightened
    position range (else the coarse problem could be infeasible where the real one is not)."""
    H, N = int(problem.harmonics), int(problem.n_grid)
    st = int(problem.screen_stride or 1) if problem.polish_power else 1
    if 3 * len(q_start) * N < int(problem.screen_min_rows):
        return 1
    fin = np.isfinite(lim["q_min"]) & np.isfinite(lim["q_max"]) & ~np.asarray(free, bool)
    c = 0.5 * (lim["q_min"] + lim["q_max"])
    h = 0.5 * (lim["q_max"] - lim["q_min"])
    with np.errstate(invalid="ignore"):
        use = np.where(fin, np.abs(np.nan_to_num(q_start) - c) / h, 0.0)
    while st > 1:
        bound = math.cos(math.pi * H * st / N)
        if (N % st == 0 and N // st >= 2 * H + 1 and bound >= 0.75
                and np.all(use <= 0.9 * bound)):
            return st
        st //= 2
    return 1


def _screened_solve(nlp: _NLP, x0: np.ndarray, lbg: np.ndarray, problem: ExcitationProblem):
    """Solve `nlp` keeping only the constraint rows that can matter (IPOPT's KKT work grows with
    the number of rows; most of the 3 n N limit rows are far from active).

    Kept: every nonlinear row (table, RMS), the linear limit rows of every
    ``problem.screen_stride``-th grid sample, and those with |g| >= ``problem.screen_threshold``
    x bound at the current point. After a solve the full set is evaluated; rows that are violated
    or have come within the threshold are added and the solve is repeated warm-started (at most
    4 rounds, then the full problem). The returned point therefore satisfies *every* row of the
    full problem whenever the full problem's solve would. screen_stride None/<= 1: full problem.
    Returns (solution dict, IPOPT stats of the last solve, total iterations, evaluation time [s]).
    """
    stride = None if problem is None else problem.screen_stride
    ev_keys = ("f", "grad_f", "g", "jac_g")

    def run(solver, keep):
        sel = slice(None) if keep is None else keep
        sol = solver(x0=x0, lbg=lbg[sel], ubg=nlp.ubg[sel], lbx=nlp.lbx, ubx=nlp.ubx)
        st = solver.stats()
        return sol, st, int(st.get("iter_count", 0)), sum(float(st.get(f"t_wall_nlp_{k}", 0.0))
                                                          for k in ev_keys)
    if (not stride or stride <= 1 or nlp.linear is None
            or int(nlp.linear.sum()) < int(problem.screen_min_rows)):
        return run(nlp.solver, None)
    theta = float(problem.screen_threshold)
    bound = np.where(nlp.linear, nlp.ubg, np.inf)
    def near_rows(g):
        """Linear rows within theta of their bound, and their neighbours +-2 samples."""
        hot = nlp.linear & (np.abs(g) >= theta * bound)
        out = hot.copy()
        for d in (1, 2):
            out[d:] |= hot[:-d]
            out[:-d] |= hot[d:]
        return out & nlp.linear
    g = np.asarray(nlp.g_fun(x0)).reshape(-1)
    keep = ~nlp.linear | (nlp.sample % int(stride) == 0) | near_rows(g)
    iters, t_ev = 0, 0.0
    for _ in range(4):
        sol, st, it, ev = run(nlp.sub_solver(keep), keep)
        iters, t_ev = iters + it, t_ev + ev
        xs = np.asarray(sol["x"]).reshape(-1)
        if not np.all(np.isfinite(xs)):
            return sol, st, iters, t_ev
        g = np.asarray(nlp.g_fun(xs)).reshape(-1)
        near = near_rows(g) & ~keep
        viol = np.maximum(lbg - g, g - nlp.ubg)[~keep]
        if not viol.size or viol.max() <= 1e-9:
            return sol, st, iters, t_ev
        keep = keep | near
        x0 = xs
    sol, st, it, ev = run(nlp.solver, None)
    return sol, st, iters + it, t_ev + ev


def _worst_violation(nlp: _NLP, x: np.ndarray, names, lbg=None) -> tuple[float, str]:
    """Largest bound violation of g at x and a sentence naming its constraint."""
    g = np.asarray(nlp.g_fun(x)).reshape(-1)
    viol = np.maximum((nlp.lbg if lbg is None else lbg) - g, g - nlp.ubg)
    worst, text = -np.inf, "none"
    for label, j, sl, kind in nlp.groups:
        v = viol[sl]
        if v.size and v.max() > worst:
            k = int(nlp.sample[sl][np.argmax(v)]) if nlp.sample is not None else int(np.argmax(v))
            worst = float(v.max())
            unit = {"z": " m", "rms": " (fraction of the bound squared)"}.get(
                kind, " (fraction of the limit)")
            text = (f"{label} of {names[j]}" + (f" at grid sample {k}" if v.size > 1 else "") +
                    f" (violated by {worst:.3g}{unit})")
    return worst, text


# ------------------------------------------------------------------------------------------------
# caching
# ------------------------------------------------------------------------------------------------
def _model_fingerprint(model) -> dict:
    """Numbers that pin down the model: parameters, limits, gravity and the kinematics (through
    the regressor and link origins at fixed pseudo-random states)."""
    rng = np.random.default_rng(12345)
    n = model.n
    q, qd, qdd = (rng.uniform(-2, 2, (3, n)) for _ in range(3))
    Y = model.regressor(q, qd, qdd)
    O = model.link_origins(q)
    L = model.limits
    h = hashlib.sha256()
    for arr in (model.inertial_parameters(), np.asarray(model.gravity, float), Y, O,
                L.q_min, L.q_max, L.qd_max, L.qdd_max):
        h.update(np.ascontiguousarray(np.round(np.asarray(arr, float), 12)).tobytes())
    return {"name": model.name, "joints": list(model.joint_names), "numbers": h.hexdigest()}


def _problem_key(model, problem, bp, seed, n_starts) -> str:
    d = {"version": CACHE_VERSION, "model": _model_fingerprint(model), "problem": problem.to_dict(),
         "base_columns": [int(i) for i in np.asarray(bp.independent)], "seed": seed,
         "n_starts": n_starts}
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def _save_cache(path: Path, res: ExcitationResult) -> None:
    import yaml
    d = {"trajectory": res.trajectory.to_dict(), "cond": res.cond, "cond_grid": res.cond_grid,
         "objective": res.objective, "solver_time_s": res.solver_time_s,
         "build_time_s": res.build_time_s, "limits_used": _plain(res.limits_used),
         "max_ratio": _plain(res.max_ratio), "starts": _plain(res.starts), "n_base": res.n_base,
         "base_names": list(res.base_names), "problem": res.problem.to_dict(), "seed": res.seed,
         "n_starts": res.n_starts}
    _atomic_write(path, yaml.safe_dump(_plain(d), sort_keys=False).encode())


def _load_cache(path: Path, problem) -> ExcitationResult | None:
    import yaml
    try:
        d = yaml.safe_load(path.read_text())
        tr = FourierTrajectory.from_dict(d["trajectory"], where=str(path))
        lim = {k: (np.asarray(v, float) if k != "z_min" else v) for k, v in d["limits_used"].items()}
        return ExcitationResult(
            trajectory=tr, cond=float(d["cond"]), cond_grid=float(d["cond_grid"]),
            objective=float(d["objective"]), solver_time_s=float(d["solver_time_s"]),
            build_time_s=float(d["build_time_s"]), limits_used=lim,
            max_ratio={k: np.asarray(v, float) for k, v in d["max_ratio"].items()},
            starts=list(d["starts"]), n_base=int(d["n_base"]), base_names=list(d["base_names"]),
            problem=problem, seed=int(d["seed"]), n_starts=int(d["n_starts"]), from_cache=True,
            cache_file=str(path))
    except Exception:
        return None     # unreadable / old cache file: recompute (and overwrite)


# ------------------------------------------------------------------------------------------------
# the optimizer
# ------------------------------------------------------------------------------------------------
def optimize_excitation(model, problem: ExcitationProblem | None = None, *, seed: int = 0,
                        n_starts: int = 2, cache_dir=None, progress: bool = False,
                        bp=None) -> ExcitationResult:
    """Optimize a Fourier excitation trajectory for cond(W_base) (see module docstring).

    Runs with one OpenBLAS thread (identify.estimation.estimators.single_thread_blas): the per-iteration
    products are small (48 x 1200 Gram matrix, 48 x 48 eigen-decomposition), and BLAS threads on
    the busy 2-core machine made the optimizer 2-3x slower (CPU time above wall time).

    Args:
        model: a :class:`identify.RobotModel`.
        problem: the settings (default: the paper's, :class:`ExcitationProblem`()).
        seed: seed of the random initial guesses (start s uses seed sequence [seed, s]).
        n_starts: number of IPOPT starts; the feasible one with the lowest cond(W_base) is kept.
        cache_dir: folder of cached results (None: no caching).
        progress: print one line per start to stderr.
        bp: a precomputed base-parameter selection (default: from `problem`).

    Returns: :class:`ExcitationResult`.
    Raises: :class:`ExcitationInfeasible` naming the constraint when no start finds a feasible
        trajectory or a necessary condition fails; ValueError for malformed settings.
    """
    from identify.estimation.estimators import single_thread_blas
    with single_thread_blas():
        return _optimize_excitation(model, problem, seed=seed, n_starts=n_starts,
                                    cache_dir=cache_dir, progress=progress, bp=bp)


def _optimize_excitation(model, problem, *, seed, n_starts, cache_dir, progress, bp):
    problem = ExcitationProblem() if problem is None else problem
    if int(n_starts) < 1:
        raise ValueError(f"n_starts must be >= 1, got {n_starts!r}")
    check_problem(model, problem)
    bp = base_parameters(model, problem) if bp is None else bp
    names = list(model.joint_names)
    cache_file = None
    if cache_dir is not None:
        key = _problem_key(model, problem, bp, seed, int(n_starts))
        cache_file = Path(cache_dir) / f"excitation-{key[:20]}.yaml"
        if cache_file.exists():
            res = _load_cache(cache_file, problem)
            if res is not None:
                return res
    lim = scaled_limits(model, problem)
    q_start, free = resolve_start(model, problem)
    H, N, wf = problem.harmonics, problem.n_grid, problem.wf
    n_check = 10 * N
    terms = tuple(problem.terms)
    # with a polish stage, stage 1 only has to get close: its limit rows on a coarser grid
    # (tightened so they still hold in continuous time), the polish then uses the full grid
    coarse = _coarse_stride(problem, lim, q_start, free)
    nlp = _build_nlp(model, problem, bp, constraint_stride=coarse)
    cond_check = CondEvaluator(model, bp, terms, n_check)
    starts, best = [], None
    solver_time = 0.0
    worst_text = None
    nlp2 = None
    if problem.polish_power:
        nlp2 = _build_nlp(model, replace(problem, objective_power=int(problem.polish_power),
                                         max_iter=max(20, int(problem.max_iter) // 3)), bp)

    def z_raised(nlp_k, lbg):
        """How far the table rows of `lbg` were raised over the problem's own (0 if none)."""
        d = [float(np.max(lbg[sl] - nlp_k.lbg[sl])) for _, _, sl, kind in nlp_k.groups
             if kind == "z" and sl.stop > sl.start]
        return max(d) if d else 0.0

    def solve(nlp_k, x0, lbg, screen=True):
        """One IPOPT solve; a table violation between grid samples raises the table (lbg of the
        z rows) by what the dense grid found and re-solves warm-started, at most 3 times."""
        dt, iters, text, tr, t_ev = 0.0, 0, None, None, 0.0
        for attempt in range(4):
            t0 = time.perf_counter()
            sol, st, it_k, ev_k = _screened_solve(nlp_k, x0, lbg,
                                                  problem if screen else None)
            dt += time.perf_counter() - t0
            iters += it_k
            t_ev += ev_k
            xs = np.asarray(sol["x"]).reshape(-1)
            viol, text = _worst_violation(nlp_k, xs, names, lbg)
            ok = bool(np.all(np.isfinite(xs)) and viol <= 1e-6)
            if not ok:
                break
            tr, z_viol = _enforce_dense(model, _to_trajectory(xs, q_start, free, H, wf, names),
                                        lim, n_check)
            if z_viol <= 1e-9:
                break
            ok = False
            text = (f"workspace z >= z_min between grid samples (dense grid {n_check} samples, "
                    f"{z_viol:.3g} m below)")
            lbg = lbg.copy()
            for label, j, sl, kind in nlp_k.groups:
                if kind == "z":
                    lbg[sl] += 1.5 * z_viol + 1e-4
            x0 = xs
        return {"ok": ok, "x": xs, "tr": tr, "text": text, "lbg": lbg, "time_s": dt, "eval_s": t_ev,
                "iterations": iters, "status": st.get("return_status", "?"),
                "objective": float(sol["f"])}

    for s in range(int(n_starts)):
        rng = np.random.default_rng([int(seed), s])
        x0 = _to_x(_initial_guess(model, problem, rng, lim), free)
        r1 = solve(nlp, x0, nlp.lbg.copy(), screen=coarse == 1)
        cond = cond_check(r1["tr"]) if r1["ok"] else np.inf
        entry = {"start": s, "status": r1["status"], "iterations": r1["iterations"],
                 "time_s": r1["time_s"], "eval_time_s": r1["eval_s"], "objective": r1["objective"],
                 "cond": float(cond)}
        out = r1
        if r1["ok"] and nlp2 is not None:
            lbg2 = nlp2.lbg.copy()
            for _, _, sl, kind in nlp2.groups:
                if kind == "z":
                    lbg2[sl] += z_raised(nlp, r1["lbg"])
            r2 = solve(nlp2, r1["x"], lbg2)
            c2 = cond_check(r2["tr"]) if r2["ok"] else np.inf
            entry.update(polish_status=r2["status"], polish_iterations=r2["iterations"],
                         polish_time_s=r2["time_s"], polish_cond=float(c2))
            entry["time_s"] += r2["time_s"]
            entry["eval_time_s"] += r2["eval_s"]
            if c2 < cond:
                cond, out = c2, r2
        solver_time += entry["time_s"]
        ok = out["ok"]
        if not ok:
            worst_text = out["text"]
        entry.update(feasible=bool(ok), cond=float(cond))
        starts.append(entry)
        if progress:
            from identify.common.progress import message
            message(f"excitation start {s + 1}/{n_starts}: {entry['status']}, "
                    f"{entry['iterations']} it" +
                    (f" + polish {entry['polish_iterations']} it" if "polish_iterations" in entry
                     else "") + f", {entry['time_s']:.1f} s, cond {cond:.2f}")
        if ok and (best is None or cond < best[0]):
            best = (cond, out["tr"], out["objective"])
    if best is None:
        raise ExcitationInfeasible(
            f"no feasible excitation trajectory found in {n_starts} start(s) "
            f"(IPOPT: {starts[-1]['status']}); worst violated constraint: {worst_text}")
    cond, tr, fval = best
    cond_grid = trajectory_cond(model, tr, bp, terms, N)
    ratios = limit_ratios(tr, lim, n_check)
    meta = {"cond_W_base": cond, "cond_W_base_grid": cond_grid, "n_base": int(len(bp.independent)),
            "seed": int(seed), "n_starts": int(n_starts), "problem": problem.to_dict(),
            "limits_used": _plain(lim), "solver_time_s": solver_time}
    tr = FourierTrajectory(tr.q0, tr.a, tr.b, tr.wf, 1, tuple(names), meta)
    res = ExcitationResult(
        trajectory=tr, cond=cond, cond_grid=cond_grid, objective=fval, solver_time_s=solver_time,
        build_time_s=nlp.build_time_s, limits_used=lim, max_ratio=ratios, starts=starts,
        n_base=int(len(bp.independent)), base_names=list(getattr(bp, "names", [])),
        problem=problem, seed=int(seed), n_starts=int(n_starts), cache_file=None)
    if cache_file is not None:
        _save_cache(cache_file, res)
        res.cache_file = str(cache_file)
    return res


def _initial_guess(model, problem, rng, lim) -> FourierTrajectory:
    """Random trajectory using 70 % of the linear limits, shrunk towards the start pose until it
    also clears the table (the start pose does, see check_problem), so IPOPT starts feasible."""
    N = problem.n_grid
    tr = random_trajectory(model, problem, rng, fill=0.7, limits=lim, n_check=N)
    if lim.get("z_min") is None:
        return tr
    t = np.arange(N) * (tr.period / N)
    for _ in range(30):
        if model.link_origins(tr.evaluate(t)[0])[:, 1:, 2].min() >= lim["z_min"] + 1e-3:
            break
        tr = FourierTrajectory(tr.q0, 0.6 * tr.a, 0.6 * tr.b, tr.wf, 1, tr.joint_names)
    return tr


def _enforce_dense(model, tr: FourierTrajectory, lim: dict, n_check: int):
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


def validation_trajectory(model, problem: ExcitationProblem | None = None, *, seed: int = 1,
                          harmonics: int | None = None, wf: float | None = None,
                          n_starts: int = 1, cache_dir=None, progress: bool = False,
                          bp=None) -> ExcitationResult:
    """An independent feasible trajectory for validating identified models (paper Fig. 10).

    Same arm, limits and start pose as `problem`, but other frequency content: by default
    fewer harmonics (max(2, H - 2)) and another seed, optimized the same way (so it also excites
    every base parameter). `wf` may change the fundamental too (the period becomes 2 pi / wf).
    """
    problem = ExcitationProblem() if problem is None else problem
    Hv = max(2, problem.harmonics - 2) if harmonics is None else int(harmonics)
    pv = replace(problem, harmonics=Hv, wf=problem.wf if wf is None else float(wf))
    return optimize_excitation(model, pv, seed=seed, n_starts=n_starts, cache_dir=cache_dir,
                               progress=progress, bp=bp)


# ------------------------------------------------------------------------------------------------
# command line
# ------------------------------------------------------------------------------------------------
def load_model(urdf=None, joints=None):
    """The reference arm (limits incl. acceleration from its YAML) or a URDF, optionally with only
    `joints` moving. Unknown joint names raise ValueError naming them."""
    from identify.model.robot_model import RobotModel, reference_paths
    if urdf is None:
        ref = RobotModel.reference()
        if joints is None:
            return ref
        unknown = [j for j in joints if j not in ref.joint_names]
        if unknown:
            raise ValueError(f"unknown joint(s) {unknown}; the reference arm has {list(ref.joint_names)}")
        idx = [ref.joint_names.index(j) for j in joints]
        return RobotModel.from_urdf(reference_paths()["urdf"], joints=list(joints),
                                    qdd_max=ref.limits.qdd_max[idx], gravity=ref.gravity)
    return RobotModel.from_urdf(urdf, joints=joints)


def _parse_pose(text: str | None, n_hint: int | None = None):
    if text is None:
        return None
    out = []
    for tok in text.split(","):
        tok = tok.strip()
        out.append(None if tok.lower() in ("free", "none", "") else math.radians(float(tok)))
    return tuple(out)


def main(argv: list[str] | None = None) -> int:
    """``python -m identify.excitation.optimizer``: optimize, save and plot excitation/validation trajectories."""
    ap = argparse.ArgumentParser(prog="python -m identify.excitation.optimizer",
                                 description="Optimize a Fourier excitation trajectory for cond(W_base).")
    ap.add_argument("--urdf", help="arm URDF (default: the reference arm with its YAML limits)")
    ap.add_argument("--joints", help="comma-separated joints to move (others locked at 0)")
    ap.add_argument("--out", default="trajectories", help="output folder")
    ap.add_argument("--harmonics", type=int, default=5)
    ap.add_argument("--period", type=float, default=20.0, help="period 2 pi / wf [s]")
    ap.add_argument("--start-deg", help="comma-separated start pose [deg]; 'free' leaves a joint "
                                        "free (default: upright, joints 2 and 4 at -90)")
    ap.add_argument("--grid", type=int, default=200, help="grid samples per period")
    ap.add_argument("--limit-scale", type=float, default=0.8)
    ap.add_argument("--z-min", type=float, default=None, help="table plane [m]")
    ap.add_argument("--terms", default="viscous,coulomb", help="friction columns ('' for none)")
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-iter", type=int, default=300)
    ap.add_argument("--rate", type=float, default=100.0, help="sampled table rate [Hz]")
    ap.add_argument("--validation", action="store_true", help="also make a validation trajectory")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    try:
        joints = None if args.joints is None else [j.strip() for j in args.joints.split(",")]
        model = load_model(args.urdf, joints)
        problem = ExcitationProblem(
            harmonics=args.harmonics, wf=2 * math.pi / args.period,
            start_pose=_parse_pose(args.start_deg), n_grid=args.grid,
            terms=tuple(t for t in args.terms.split(",") if t.strip()),
            limit_scale=args.limit_scale, z_min=args.z_min, max_iter=args.max_iter)
        out = Path(args.out)
        cache = None if args.no_cache else Path(".cache") / "excitation"
        jobs = [("excitation", lambda: optimize_excitation(
            model, problem, seed=args.seed, n_starts=args.starts, cache_dir=cache,
            progress=not args.quiet))]
        if args.validation:
            jobs.append(("validation", lambda: validation_trajectory(
                model, problem, seed=args.seed + 1, n_starts=max(1, args.starts // 2),
                cache_dir=cache, progress=not args.quiet)))
        for label, job in jobs:
            res = job()
            out.mkdir(parents=True, exist_ok=True)
            y = res.trajectory.save(out / f"{label}.yaml")
            z = res.trajectory.save(out / f"{label}.npz", rate_hz=args.rate)
            print(f"{label}: {res.summary()}")
            print(f"  wrote {y} and {z}")
            if not args.no_plot:
                from .plots import plot_trajectory
                png = plot_trajectory(res.trajectory, res.limits_used, out / f"{label}.png",
                                      title=f"{label} trajectory, cond(W_base) = {res.cond:.1f}")
                print(f"  wrote {png}")
    except ExcitationInfeasible as exc:
        print(f"error: infeasible excitation problem: {exc}", file=sys.stderr)
        return 3
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
