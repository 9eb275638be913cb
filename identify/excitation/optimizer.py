"""Optimized excitation trajectories (CasADi + IPOPT) and validation trajectories.

    from identify import RobotModel
    from identify.excitation.optimizer import ExcitationProblem, optimize_excitation, validation_trajectory
    m = RobotModel.reference()
    res = optimize_excitation(m, ExcitationProblem(), seed=0, n_starts=2, cache_dir=".cache/excitation")
    res.trajectory, res.cond, res.solver_time_s, res.limits_used
    python -m identify.excitation --out traj/ --harmonics 5 --starts 2      # command line

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
r = 4 from the random initial guess (robust progress from a poor start), then a "polish" from its
end point with r = ``polish_power`` (16), which is close to cond itself. To save IPOPT's linear algebra (which grows with the
number of constraint rows and dominated the solve time), the first stage constrains only every
``screen_stride``-th grid sample with the correspondingly stronger tightening, and the polish sees
only the rows near their bound plus every ``screen_stride``-th one, re-solving with more rows until
the whole grid holds (:func:`screened_solve`). Such a re-solve (and the one after a violation
found between grid samples) starts from the previous primal-dual point with a small barrier
parameter (NLP.sub_solver, WARM_START_OPTIONS): 5-50 iterations instead of 50-100 from a cold
start. Starts are independent and run in forked worker processes, one per core
(identify.excitation.workers.map_starts, same result as in one process). Measured on the
reference arm (issue-4 settings, no table or collision, 2 starts): r = 1, 2, 4, 8, 16, 64 alone
all end at cond(W_base) 31-34; r = 4 then 16 ends at 28-30 without screening, 27.7 / 28.2 / 28.5
(seeds 0 / 1 / 2) with it, in half the time. IPOPT stops when J has changed by less than
``obj_change_tol`` (relative) for 10 iterations. Coulomb columns use a smooth sign tanh(qd/eps)
inside the optimizer. The figure reported and judged is always the plain cond(W_base) with the
exact sign, on a grid 10x denser than the optimization grid (:attr:`ExcitationResult.cond`).

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

Collision and motor-torque constraints (``collision_margin``, ``obstacles``, ``torque_limit``;
docs/excitation.md): per grid sample, the capsule distances of every checked pair
(identify.model.collision) stay >= the margin and the hardware's motor-torque bound
(identify.excitation.torque) <= the drives' limits; so are the table rows. All three are
evaluated as generated C with exact Jacobians (objective._SampleRows) and screened like the limit
rows (a clearance or table row enters IPOPT's problem when it comes within ``collision_screen``
of its bound; a screened solver's callback evaluates only its kept rows, objective._RowSubset).
Clearance and table rows sit on the whole grid in both stages (on the coarse first-stage grid
the capsules passed through each other between samples). The dense check grid
verifies them; a violation between grid samples tightens that pair's / joint's rows and
re-solves, and a start IPOPT ends infeasible on them is shrunk towards its (feasible) start pose
until everything holds. ``objective`` selects cond (above), d_optimal or a_optimal
(identify.excitation.information; starts are then ranked by that criterion on the dense grid,
and no polish stage runs); ``information0`` adds information already held.

Infeasible requests are caught before IPOPT runs when a necessary condition fails (start pose
outside the limits or under the table, a joint that cannot move, an RMS velocity that no trajectory
can reach), and an IPOPT failure is translated into :class:`ExcitationInfeasible` naming the worst
violated constraint.

Results are cached in ``cache_dir`` as YAML files named by a SHA-256 hash of the full problem
definition (model parameters, kinematics, limits, settings, base-parameter selection, seed, starts).
"""
from __future__ import annotations
import math
import time
from dataclasses import dataclass, replace
from pathlib import Path
import numpy as np
from identify.common import interrupts
from .fourier import FourierTrajectory, to_plain
from .cache import load_cache, problem_key, save_cache
from .conditioning import (CondEvaluator, base_parameters, collision_violation, enforce_dense,
                           limit_ratios, torque_violation, trajectory_cond)
from .iterations import (IterationBar, IterationCount, ipopt_status_text,  # noqa: F401
                         iteration_sink, solve_finished, solve_started, stage, start_line)
from .objective import NLP, build_nlp, collision_model
from .parametrization import random_trajectory, to_trajectory, to_x
from .problem import ExcitationInfeasible, ExcitationProblem, ExcitationResult, check_problem, resolve_start, scaled_limits
from .workers import map_starts, start_workers


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


def screened_solve(nlp: NLP, x0: np.ndarray, lbg: np.ndarray, problem: ExcitationProblem,
                    warm=None):
    """Solve `nlp` keeping only the constraint rows that can matter (IPOPT's KKT work grows with
    the number of rows; most of the 3 n N limit rows are far from active).

    Kept: every nonlinear row (table, RMS), the linear limit rows of every
    ``problem.screen_stride``-th grid sample, and those with |g| >= ``problem.screen_threshold``
    x bound at the current point. After a solve the full set is evaluated; rows that are violated
    or have come within the threshold are added and the solve is repeated warm-started (at most
    4 rounds, then the full problem). The returned point therefore satisfies *every* row of the
    full problem whenever the full problem's solve would. screen_stride None/<= 1: full problem.
    warm: (lam_g (all rows), lam_x) of a previous solve of the same rows' problem: the first
    round then starts from that primal-dual point too (NLP.sub_solver).
    Returns (solution dict with "lam_g_all": the multipliers of every row (0 for rows left out),
    IPOPT stats of the last solve (plus "max_iter": its iteration limit, and "solves": the
    number of IPOPT solves made), total iterations of them all, evaluation time [s]).
    """
    stride = None if problem is None else problem.screen_stride
    ev_keys = ("f", "grad_f", "g", "jac_g")

    def run(keep, x0, warm):
        sel = slice(None) if keep is None else keep
        args = dict(x0=x0, lbg=lbg[sel], ubg=nlp.ubg[sel], lbx=nlp.lbx, ubx=nlp.ubx)
        if warm is not None:
            args.update(lam_g0=warm[0][sel], lam_x0=warm[1])
        solver = nlp.sub_solver(keep, warm=warm is not None)
        solve_started(_max_iter(nlp))
        sol = solver(**args)
        interrupts.check()      # IPOPT turns an interrupt into a status: never take it as a result
        st = dict(solver.stats(), max_iter=_max_iter(nlp))
        solve_finished(int(st.get("iter_count", 0)))
        lam = np.zeros(lbg.size)
        lam[sel] = np.asarray(sol["lam_g"]).reshape(-1)
        sol = dict(sol, lam_g_all=lam)
        return sol, st, int(st.get("iter_count", 0)), sum(float(st.get(f"t_wall_nlp_{k}", 0.0))
                                                          for k in ev_keys)

    def next_warm(sol):
        xs = np.asarray(sol["x"]).reshape(-1)
        if not np.all(np.isfinite(xs)):
            return None
        return sol["lam_g_all"], np.asarray(sol["lam_x"]).reshape(-1)
    has_col = nlp.kinds is not None and bool(np.any(nlp.kinds == "col"))
    if (not stride or stride <= 1 or nlp.linear is None
            or (int(nlp.linear.sum()) < int(problem.screen_min_rows) and not has_col)):
        sol, st, it, ev = run(None, x0, warm)
        st["solves"] = 1
        return sol, st, it, ev
    theta = float(problem.screen_threshold)
    bound = np.where(nlp.linear, nlp.ubg, np.inf)
    kinds = nlp.kinds if nlp.kinds is not None else np.zeros(nlp.lbg.size, "<U4")
    col, tau, zr = kinds == "col", kinds == "tau", kinds == "z"
    screenable = nlp.linear | col | tau | zr

    def near_rows(g):
        """Linear and torque rows within theta of their bound (and their neighbours +-2
        samples), clearance and table rows within collision_screen [m] of their bound."""
        hot = (nlp.linear & (np.abs(g) >= theta * bound)) | (tau & (-g >= theta))
        out = hot.copy()
        for d in (1, 2):
            out[d:] |= hot[:-d]
            out[:-d] |= hot[d:]
        out |= (col | zr) & (g - lbg <= float(problem.collision_screen))
        return out & screenable
    g = np.asarray(nlp.g_fun(x0)).reshape(-1)
    n_solves = 0
    keep = ~screenable | ((nlp.linear | tau | zr) & (nlp.sample % int(stride) == 0)) | near_rows(g)
    iters, t_ev = 0, 0.0
    for _ in range(4):
        sol, st, it, ev = run(keep, x0, warm)
        iters, t_ev, n_solves = iters + it, t_ev + ev, n_solves + 1
        st["solves"] = n_solves
        xs = np.asarray(sol["x"]).reshape(-1)
        if not np.all(np.isfinite(xs)):
            return sol, st, iters, t_ev
        g = np.asarray(nlp.g_fun(xs)).reshape(-1)
        near = near_rows(g) & ~keep
        viol = np.maximum(lbg - g, g - nlp.ubg)[~keep]
        if not viol.size or viol.max() <= 1e-9:
            return sol, st, iters, t_ev
        keep = keep | near
        x0, warm = xs, next_warm(sol)
    sol, st, it, ev = run(None, x0, next_warm(sol))
    st["solves"] = n_solves + 1
    return sol, st, iters + it, t_ev + ev


def _max_iter(nlp: NLP) -> int:
    """IPOPT's iteration limit of each solve of `nlp` (its ``ipopt.max_iter`` option)."""
    return int((nlp.opts or {}).get("ipopt.max_iter", 3000))


def _worst_violation(nlp: NLP, x: np.ndarray, names, lbg=None) -> tuple[float, str]:
    """Largest bound violation of g at x and a sentence naming its constraint."""
    g = np.asarray(nlp.g_fun(x)).reshape(-1)
    viol = np.maximum((nlp.lbg if lbg is None else lbg) - g, g - nlp.ubg)
    worst, text = -np.inf, "none"
    for label, j, sl, kind in nlp.groups:
        v = viol[sl]
        if v.size and v.max() > worst:
            k = int(nlp.sample[sl][np.argmax(v)]) if nlp.sample is not None else int(np.argmax(v))
            worst = float(v.max())
            unit = {"z": " m", "col": " m", "rms": " (fraction of the bound squared)"}.get(
                kind, " (fraction of the limit)")
            text = ((label if j < 0 else f"{label} of {names[j]}") +
                    (f" at grid sample {k}" if v.size > 1 else "") +
                    f" (violated by {worst:.3g}{unit})")
    return worst, text


# ------------------------------------------------------------------------------------------------
# the optimizer
# ------------------------------------------------------------------------------------------------
def optimize_excitation(model, problem: ExcitationProblem | None = None, *, seed: int = 0,
                        n_starts: int = 2, cache_dir=None, progress: bool = False,
                        bp=None, information0=None, workers: int | None = None,
                        label: str = "excitation") -> ExcitationResult:
    """Optimize a Fourier excitation trajectory for problem.objective (cond(W_base) by default;
    see module docstring), safe under its collision and torque constraints.

    Runs with one OpenBLAS thread (identify.common.blas.single_thread_blas): the per-iteration
    products are small (48 x 1200 Gram matrix, 48 x 48 eigen-decomposition), and BLAS threads on
    the busy 2-core machine made the optimizer 2-3x slower (CPU time above wall time).

    Args:
        model: a :class:`identify.RobotModel`.
        problem: the settings (default: the paper's, :class:`ExcitationProblem`()).
        seed: seed of the random initial guesses (start s uses seed sequence [seed, s]).
        n_starts: number of IPOPT starts; the feasible one with the lowest cond(W_base) is kept.
        cache_dir: folder of cached results (None: no caching).
        progress: show the optimization on stderr (identify.common.progress, silent under
            --quiet): a bar over the starts with an ETA, one line per finished start and, for
            starts run in this process, a bar over the running IPOPT solve's iterations.
        bp: a precomputed base-parameter selection (default: from `problem`).
        information0: (p, p) Fisher information already held (recorded trajectories,
            identify.excitation.information.information_of); the D / A-optimal objectives then
            optimize the new trajectory for the combined estimate.
        workers: processes running the starts (None: one per start up to the cores this
            process may use; 1: in this process). The result does not depend on it
            (identify.excitation.workers.map_starts).
        label: the trajectory's name in the progress output ("excitation", "validation").

    Returns: :class:`ExcitationResult`.
    Raises: :class:`ExcitationInfeasible` naming the constraint when no start finds a feasible
        trajectory or a necessary condition fails; ValueError for malformed settings.
    """
    from identify.common.blas import single_thread_blas
    with single_thread_blas():
        return _optimize_excitation(model, problem, seed=seed, n_starts=n_starts,
                                    cache_dir=cache_dir, progress=progress, bp=bp,
                                    information0=information0, workers=workers, label=label)


def _optimize_excitation(model, problem, *, seed, n_starts, cache_dir, progress, bp,
                         information0=None, workers=None, label="excitation"):
    problem = ExcitationProblem() if problem is None else problem
    if int(n_starts) < 1:
        raise ValueError(f"n_starts must be >= 1, got {n_starts!r}")
    check_problem(model, problem)
    bp = base_parameters(model, problem) if bp is None else bp
    cache_file = None
    if cache_dir is not None:
        key = problem_key(model, problem, bp, seed, int(n_starts), information0)
        cache_file = Path(cache_dir) / f"excitation-{key[:20]}.yaml"
        if cache_file.exists():
            res = load_cache(cache_file, problem)
            if res is not None:
                if progress:
                    from identify.common.progress import message
                    message(f"{label}: optimized trajectory read from the cache "
                            f"({cache_file.name})")
                return res
    run = _Starts.build(model, problem, bp, seed=seed, n_starts=n_starts, progress=progress,
                        information0=information0, label=label)
    stage1 = run.run_all(workers)
    best, starts, solver_time = _best_start(run, stage1)
    res = _result(run, best, starts, solver_time)
    if cache_file is not None:
        interrupts.check()      # an interrupted solve is never cached
        save_cache(cache_file, res)
        res.cache_file = str(cache_file)
    return res


@dataclass(frozen=True)
class _Excess:
    """What the dense check grid found between the optimization grid's samples: the table
    violation z [m], per pair "clearance <pair>" its violation of the margin and its distance
    at the start pose [m] (pair, start), per joint the torque excess over tau_max (n,) (tau),
    and the sentence naming the worst of them."""
    z: float
    pair: dict
    start: dict
    tau: np.ndarray
    text: str


@dataclass(frozen=True)
class _Starts:
    """The solve context of one optimize_excitation call, shared by its starts: the built
    problems (stage 1 `nlp`; the cond polish `nlp2` or None), the dense-grid figures
    (cond_check, score: trajectory -> criterion, lower is better), the capsules (None without
    collision constraint), limits, start pose, and the call's settings. run_start(s) is the
    start job identify.excitation.workers.map_starts runs (a forked worker inherits it)."""
    model: object
    problem: ExcitationProblem
    bp: object
    nlp: NLP
    nlp2: NLP | None
    cond_check: CondEvaluator
    caps: object
    score: object
    lim: dict
    q_start: np.ndarray
    free: np.ndarray
    names: list
    n_check: int
    coarse: int
    seed: int
    n_starts: int
    progress: bool
    label: str = "excitation"

    @classmethod
    def build(cls, model, problem, bp, *, seed, n_starts, progress, information0,
              label: str = "excitation") -> "_Starts":
        """Build the NLPs and the dense-grid evaluators of `problem`."""
        lim = scaled_limits(model, problem)
        q_start, free = resolve_start(model, problem)
        n_check = 10 * problem.n_grid
        # with a polish stage, stage 1 only has to get close: its limit rows on a coarser grid
        # (tightened so they still hold in continuous time), the polish then uses the full grid
        coarse = _coarse_stride(problem, lim, q_start, free)
        nlp = build_nlp(model, problem, bp, constraint_stride=coarse, information0=information0)
        cond_check = CondEvaluator(model, bp, tuple(problem.terms), n_check)
        caps = collision_model(model, problem) if problem.collision_margin is not None else None
        score = _score_function(model, problem, bp, cond_check, information0)
        nlp2 = None
        if problem.polish_power and problem.objective == "cond":
            nlp2 = build_nlp(model, replace(problem, objective_power=int(problem.polish_power),
                                            max_iter=max(20, int(problem.max_iter) // 3)), bp)
        return cls(model=model, problem=problem, bp=bp, nlp=nlp, nlp2=nlp2,
                   cond_check=cond_check, caps=caps, score=score, lim=lim, q_start=q_start,
                   free=free, names=list(model.joint_names), n_check=n_check, coarse=coarse,
                   seed=int(seed), n_starts=int(n_starts), progress=bool(progress),
                   label=str(label))

    def trajectory(self, x: np.ndarray) -> FourierTrajectory:
        """NLP variables x -> the trajectory (identify.excitation.parametrization.to_trajectory)."""
        pr = self.problem
        return to_trajectory(x, self.q_start, self.free, pr.harmonics, pr.wf, self.names)

    def run_start(self, s: int) -> tuple[dict, dict]:
        """One start: stage 1 from its seeded initial guess, then (cond) its polish.
        Returns (the start's entry of ExcitationResult.starts, the kept solve's result)."""
        rng = np.random.default_rng([self.seed, s])
        x0 = to_x(initial_guess(self.model, self.problem, rng, self.lim, self.caps), self.free)
        stage(f"{self.label} (start {s + 1}/{self.n_starts}, stage 1)", s)
        # clearance rows are screened in both stages (most pairs stay far apart)
        r1 = self.solve(self.nlp, x0, self.nlp.lbg.copy(),
                        screen=self.coarse == 1 or self.caps is not None)
        cond = self.score(r1["tr"]) if r1["ok"] else np.inf
        entry = {"start": s, "status": r1["status"], "iterations": r1["iterations"],
                 "solves": r1["solves"], "max_iter": r1["max_iter"],
                 "time_s": r1["time_s"], "eval_time_s": r1["eval_s"], "objective": r1["objective"],
                 "cond": float(cond), "feasible": bool(r1["ok"])}
        out = r1
        if r1["ok"] and self.nlp2 is not None:
            stage(f"{self.label} (start {s + 1}/{self.n_starts}, polish)", s)
            entry, out = self.polish(entry, r1)
        return entry, out

    def run_all(self, workers: int | None) -> list:
        """[run_start(s) for every start] (identify.excitation.workers.map_starts: in worker
        processes when it can). With progress: a bar over the starts (its ETA from the
        finished ones) and one line per finished start; when the starts run in this process,
        also a bar over the running IPOPT solve's iterations (total: its max_iter); in worker
        processes, the iterations they have made so far on the starts' bar (shared counters,
        read every 0.5 s)."""
        if not self.progress:
            return map_starts(self.run_start, self.n_starts, workers)
        from identify.common.progress import bar
        with bar(total=self.n_starts, desc=f"{self.label}: starts", unit="start") as b:
            def done(s, result):
                self._report(s, result[0], result[1]["ok"])
                b.update(1)
            if start_workers(self.n_starts, workers) > 1:
                import multiprocessing as mp
                counts = mp.get_context("fork").RawArray("l", self.n_starts)

                def waiting():
                    b.set_postfix_str(f"{sum(counts)} IPOPT it so far")
                with iteration_sink(IterationCount(counts)):     # inherited by the workers
                    return map_starts(self.run_start, self.n_starts, workers, on_done=done,
                                      on_wait=waiting)
            with bar(total=int(self.problem.max_iter), desc=self.label, unit="it") as ib, \
                    iteration_sink(IterationBar(ib)):
                return map_starts(self.run_start, self.n_starts, 1, on_done=done)

    def _report(self, s: int, entry: dict, feasible: bool) -> None:
        """The progress line of start s (identify.common.progress.message)."""
        from identify.common.progress import message
        message(start_line(self.label, s, self.n_starts, entry, feasible, self.problem.objective))

    def polish(self, entry: dict, r1: dict) -> tuple[dict, dict]:
        """The cond polish of a feasible start (stage 1's raised rows kept): (entry, result)."""
        nlp, nlp2 = self.nlp, self.nlp2
        lbg2 = nlp2.lbg.copy()
        raised = {(lab, j): float(np.max(r1["lbg"][sl] - nlp.lbg[sl])) for lab, j, sl, kind
                  in nlp.groups if kind in ("col", "tau") and sl.stop > sl.start}
        for lab, j, sl, kind in nlp2.groups:
            if kind == "z":
                lbg2[sl] += _raised(nlp, r1["lbg"])
            elif kind in ("col", "tau"):   # each pair / joint keeps stage 1's raise
                lbg2[sl] += raised.get((lab, j), 0.0)
        r2 = self.solve(nlp2, r1["x"], lbg2)
        c2 = self.score(r2["tr"]) if r2["ok"] else np.inf
        entry.update(polish_status=r2["status"], polish_iterations=r2["iterations"],
                     polish_solves=r2["solves"], polish_max_iter=r2["max_iter"],
                     polish_time_s=r2["time_s"], polish_cond=float(c2),
                     stage1_cond=entry["cond"])
        entry["time_s"] += r2["time_s"]
        entry["eval_time_s"] += r2["eval_s"]
        if c2 < entry["cond"]:
            entry["cond"] = float(c2)
            return entry, r2
        return entry, r1

    def solve(self, nlp_k: NLP, x0: np.ndarray, lbg: np.ndarray, screen: bool = True) -> dict:
        """One IPOPT solve; a table, clearance or torque violation between grid samples raises
        those rows (lbg) by what the dense grid found and re-solves warm-started (primal and
        dual), at most 3 times. A start left infeasible on the clearance / torque rows is
        shrunk towards its start pose (:meth:`shrink_feasible`). Returns {"ok", "x", "tr",
        "text" (the worst violation), "lbg", "time_s", "eval_s", "iterations" (of every IPOPT
        solve made), "solves" (their number), "status" (of the last solve), "max_iter" (the
        iteration limit of each solve), "objective"}."""
        dt, iters, text, tr, t_ev, warm, solves = 0.0, 0, None, None, 0.0, None, 0
        for attempt in range(4):
            t0 = time.perf_counter()
            sol, st, it_k, ev_k = screened_solve(nlp_k, x0, lbg,
                                                  self.problem if screen else None, warm)
            dt += time.perf_counter() - t0
            iters += it_k
            solves += int(st.get("solves", 1))
            t_ev += ev_k
            xs = np.asarray(sol["x"]).reshape(-1)
            viol, text = _worst_violation(nlp_k, xs, self.names, lbg)
            ok = bool(np.all(np.isfinite(xs)) and viol <= 1e-6)
            if not ok:
                break
            tr, excess = self.dense_check(xs)
            if excess is None:
                break
            ok, text = False, excess.text
            lbg = _raise_rows(nlp_k, lbg, excess, self.problem.collision_margin)
            x0 = xs
            warm = (sol["lam_g_all"], np.asarray(sol["lam_x"]).reshape(-1))
        if not ok and np.all(np.isfinite(xs)) and (self.caps is not None or
                                                   self.problem.torque_limit is not None):
            # IPOPT can end infeasible on the nonconvex clearance / torque rows: shrink the
            # motion towards the start pose (which is feasible) until every constraint holds
            # on the grid and the dense grid; a feasible, if less exciting, trajectory
            xf = self.shrink_feasible(nlp_k, xs)
            if xf is not None:
                xs, ok, text = xf, True, None
                tr = self.trajectory(xs)
        return {"ok": ok, "x": xs, "tr": tr, "text": text, "lbg": lbg, "time_s": dt, "eval_s": t_ev,
                "iterations": iters, "solves": solves, "max_iter": int(st.get("max_iter", 0)),
                "status": st.get("return_status", "?"), "objective": float(sol["f"])}

    def dense_check(self, xs: np.ndarray) -> tuple[FourierTrajectory, _Excess | None]:
        """(the trajectory of xs with its linear limits made to hold on the dense grid, what
        it still violates there: None when every constraint holds)."""
        model, problem, caps, n_check = self.model, self.problem, self.caps, self.n_check
        tr, z_viol = enforce_dense(model, self.trajectory(xs), self.lim, n_check)
        c_viol, c_text, c_pair = collision_violation(caps, tr, n_check,
                                                      problem.collision_margin)
        t_viol = torque_violation(model, problem, tr, n_check)
        c_start = {}
        if caps is not None:
            c_start = dict(zip((f"clearance {l}" for l in caps.pair_labels()),
                               caps.distances(tr.evaluate(np.zeros(1))[0])[0]))
        if z_viol <= 1e-9 and c_viol <= 1e-9 and not np.any(t_viol > 1e-9):
            return tr, None
        text = (f"workspace z >= z_min between grid samples (dense grid {n_check} samples, "
                f"{z_viol:.3g} m below)") if z_viol > 1e-9 else c_text or (
            f"motor-torque limit between grid samples (dense grid: {1 + t_viol.max():.4f} "
            f"of tau_max)")
        return tr, _Excess(z=z_viol, pair=c_pair, start=c_start, tau=t_viol, text=text)

    def shrink_feasible(self, nlp_k: NLP, xs: np.ndarray) -> np.ndarray | None:
        """xs with its motion scaled by 0.9^k towards the start pose, for the first k < 40 at
        which every row of nlp_k's own problem and the dense grid hold; None if none does."""
        m = 2 * (self.problem.harmonics - 1) * self.model.n
        for k in range(1, 40):
            xf = xs.copy()
            xf[:m] *= 0.9 ** k
            if _worst_violation(nlp_k, xf, self.names)[0] > 1e-6:     # the problem's own bounds
                continue
            tr_f, z_v = enforce_dense(self.model, self.trajectory(xf), self.lim, self.n_check)
            if (z_v <= 1e-9 and collision_violation(self.caps, tr_f, self.n_check,
                                                     self.problem.collision_margin)[0] <= 1e-9
                    and not np.any(torque_violation(self.model, self.problem, tr_f,
                                                     self.n_check) > 1e-9)):
                return to_x(tr_f, self.free)
        return None


def _raised(nlp_k: NLP, lbg: np.ndarray, which: str = "z") -> float:
    """How far the table (or clearance) rows of `lbg` were raised over the problem's own."""
    d = [float(np.max(lbg[sl] - nlp_k.lbg[sl])) for _, _, sl, kind in nlp_k.groups
         if kind == which and sl.stop > sl.start]
    return max(d) if d else 0.0


def _raise_rows(nlp_k: NLP, lbg: np.ndarray, ex: _Excess, margin) -> np.ndarray:
    """A copy of lbg with the table rows, the violating pairs' clearance rows and the violating
    joints' torque rows raised by 1.5 x the dense grid's excess (+ 1e-4); a pair's rows never
    above what the start pose (t = 0 of every period) itself allows."""
    lbg = lbg.copy()
    for label, j, sl, kind in nlp_k.groups:
        if kind == "z" and ex.z > 1e-9:
            lbg[sl] += 1.5 * ex.z + 1e-4
        if kind == "col" and ex.pair[label] > 1e-9:     # that pair's rows only
            room = max(0.0, ex.start[label] - margin - 1e-3)
            lbg[sl] = np.minimum(lbg[sl] + 1.5 * ex.pair[label] + 1e-4, nlp_k.lbg[sl] + room)
        if kind == "tau" and ex.tau[j] > 1e-9:          # that joint's rows only
            lbg[sl] += 1.5 * ex.tau[j] + 1e-4
    return lbg


def _best_start(run: _Starts, stage1: list) -> tuple[tuple, list, float]:
    """((criterion, trajectory, objective) of the best feasible start, the starts' entries,
    total solver time [s]). Raises ExcitationInfeasible naming the worst violated constraint
    when no start is feasible."""
    problem = run.problem
    starts, best, solver_time, worst_text = [], None, 0.0, None
    for entry, out in stage1:
        if not out["ok"]:
            worst_text = out["text"]
    for entry, out in stage1:
        solver_time += entry["time_s"]
        cond = entry["cond"]
        if problem.objective != "cond":      # `cond` held the criterion: keep both
            entry.update(criterion=float(cond),
                         cond=float(run.cond_check(out["tr"])) if out["ok"] else float("inf"))
        starts.append(entry)
        if out["ok"] and (best is None or cond < best[0]):
            best = (cond, out["tr"], out["objective"])
    if best is None:
        last_max_iter = starts[-1].get("max_iter") or problem.max_iter
        raise ExcitationInfeasible(
            f"no feasible excitation trajectory found in {run.n_starts} start(s) "
            f"(IPOPT: {ipopt_status_text(starts[-1]['status'], False, last_max_iter)}); "
            f"worst violated constraint: {worst_text}")
    return best, starts, solver_time


def _result(run: _Starts, best: tuple, starts: list, solver_time: float) -> ExcitationResult:
    """The ExcitationResult of the best start: its figures on the dense grid and its meta."""
    model, problem, bp, lim, n_check = run.model, run.problem, run.bp, run.lim, run.n_check
    _, tr, fval = best
    cond = float(run.cond_check(tr))
    cond_grid = trajectory_cond(model, tr, bp, tuple(problem.terms), problem.n_grid)
    ratios = limit_ratios(tr, lim, n_check)
    meta = {"cond_W_base": cond, "cond_W_base_grid": cond_grid, "n_base": int(len(bp.independent)),
            "seed": run.seed, "n_starts": run.n_starts, "problem": problem.to_dict(),
            "limits_used": to_plain(lim), "solver_time_s": solver_time}
    caps = run.caps
    if caps is not None:    # what the backends' clearance check must hold (identify.backend.clearance)
        meta["collision"] = {"margin_m": float(problem.collision_margin),
                             "obstacles": [o.to_dict() for o in caps.obstacles],
                             "ignored_pairs": list(caps.ignored),
                             "min_distance_m": float(caps.distances(
                                 tr.evaluate(np.arange(n_check) * (tr.period / n_check))[0]).min())}
    if problem.torque_limit is not None:
        from .torque import torque_ratio
        tq = tr.evaluate(np.arange(n_check) * (tr.period / n_check))
        meta["torque_ratio_max"] = torque_ratio(model, problem.torque_limit, *tq).max(0).tolist()
    tr = FourierTrajectory(tr.q0, tr.a, tr.b, tr.wf, 1, tuple(run.names), meta)
    return ExcitationResult(
        trajectory=tr, cond=cond, cond_grid=cond_grid, objective=fval, solver_time_s=solver_time,
        build_time_s=run.nlp.build_time_s, limits_used=lim, max_ratio=ratios, starts=starts,
        n_base=int(len(bp.independent)), base_names=list(getattr(bp, "names", [])),
        problem=problem, seed=run.seed, n_starts=run.n_starts, cache_file=None)


def initial_guess(model, problem, rng, lim, caps=None) -> FourierTrajectory:
    """Random trajectory using 70 % of the linear limits, shrunk towards the start pose until it
    also clears the table, keeps the collision margin (the start pose does: check_problem, and
    pairs overlapping there are not checked) and the motor-torque limit (if the start pose's
    static torque is within it), so IPOPT starts feasible."""
    N = problem.n_grid
    tr = random_trajectory(model, problem, rng, fill=0.7, limits=lim, n_check=N)
    if lim.get("z_min") is None and caps is None and problem.torque_limit is None:
        return tr
    t = np.arange(N) * (tr.period / N)
    for _ in range(30):
        q = tr.evaluate(t)[0]
        ok = (lim.get("z_min") is None
              or model.link_origins(q)[:, 1:, 2].min() >= lim["z_min"] + 1e-3)
        if ok and caps is not None:
            ok = caps.distances(q).min() >= problem.collision_margin + 1e-3
        if ok and problem.torque_limit is not None:
            from .torque import torque_ratio
            _, qd, qdd = tr.evaluate(t)
            ok = torque_ratio(model, problem.torque_limit, q, qd, qdd).max() <= 0.95
        if ok:
            break
        tr = FourierTrajectory(tr.q0, 0.6 * tr.a, 0.6 * tr.b, tr.wf, 1, tr.joint_names)
    return tr


def _score_function(model, problem, bp, cond_check, information0):
    """Function trajectory -> the figure that ranks starts (lower is better) on the dense grid:
    cond(W_base) for "cond"; -log det F for "d_optimal"; tr(S F^-1 S) for "a_optimal"."""
    if problem.objective == "cond":
        return cond_check
    from .information import noise_vector, prior_scale, weighted_information
    sig = noise_vector(problem.noise_std, model.n)
    sc = prior_scale(problem.theta_prior)
    s2 = np.ones(len(bp.independent)) if sc is None else 1.0 / sc ** 2
    N = cond_check.n_samples
    fscale = float(problem.run_samples) / N if problem.run_samples else problem.n_grid / N

    def score(tr):
        t = np.arange(N) * (tr.period / N)
        F = weighted_information(cond_check.W(*tr.evaluate(t)), sig) * fscale
        if information0 is not None:
            F = F + information0
        sign, ld = np.linalg.slogdet(F)
        if sign <= 0:
            return np.inf
        if problem.objective == "d_optimal":
            return -ld / F.shape[0]
        return float(np.sum(s2 * np.diag(np.linalg.inv(F))))
    return score


def validation_trajectory(model, problem: ExcitationProblem | None = None, *, seed: int = 1,
                          harmonics: int | None = None, wf: float | None = None,
                          n_starts: int = 1, cache_dir=None, progress: bool = False,
                          bp=None, label: str = "validation") -> ExcitationResult:
    """An independent feasible trajectory for validating identified models (paper Fig. 10).

    Same arm, limits and start pose as `problem`, but other frequency content: by default
    fewer harmonics (max(2, H - 2)) and another seed, optimized the same way (so it also excites
    every base parameter). `wf` may change the fundamental too (the period becomes 2 pi / wf).
    """
    problem = ExcitationProblem() if problem is None else problem
    Hv = max(2, problem.harmonics - 2) if harmonics is None else int(harmonics)
    pv = replace(problem, harmonics=Hv, wf=problem.wf if wf is None else float(wf))
    return optimize_excitation(model, pv, seed=seed, n_starts=n_starts, cache_dir=cache_dir,
                               progress=progress, bp=bp, label=label)
