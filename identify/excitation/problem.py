"""The excitation problem as data: :class:`ExcitationProblem` (harmonics, period, grid, limits
scale, start pose, table plane, solver options), :class:`ExcitationResult`, the limits actually
used (scaled, tightened for continuous time) and the up-front feasibility checks that name what
cannot be met before IPOPT runs."""
from __future__ import annotations
import math
from dataclasses import asdict, dataclass
import numpy as np
from .fourier import FourierTrajectory, to_plain


CACHE_VERSION = 5  # bump when the optimizer changes in a way that changes results


class ExcitationInfeasible(ValueError):
    """The requested excitation problem has no feasible trajectory (message names the constraint).

    setting: the :class:`ExcitationProblem` field at fault when one is ("start_pose", "z_min",
    "collision_margin", "obstacles[k]", ...), so a caller can name its own key; else None."""

    def __init__(self, message: str = "", setting: str | None = None):
        super().__init__(message)
        self.setting = setting


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
            (optimized within the limits). None: the paper's upright pose (:func:`upright_pose`),
            a joint whose limits exclude it at the middle of its range (:func:`default_start`).
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
            :func:`screened_solve`; same constraints, less linear algebra). With a polish
            stage, the first stage instead has its limit rows only at every screen_stride-th
            sample, tightened by cos(pi H screen_stride / N) so they hold in continuous time
            (used when N / screen_stride >= 2H + 1). None: all rows in both stages.
            Only problems with at least screen_min_rows linear limit rows (3 n N) are screened:
            below that IPOPT's linear algebra is cheap and the full problem is solved.
        objective: "cond" (the smooth surrogate of cond(W_base) above, SI units), "d_optimal"
            (maximise log det of the Fisher information with the per-joint noise `noise_std`)
            or "a_optimal" (minimise the sum of squared predicted relative std of the base
            parameters, columns scaled by `theta_prior`); see identify.excitation.information.
        noise_std: per-joint torque noise std [N*m] (one number or (n,)) of the noise model.
        theta_prior: (p,) prior base parameter values (A-optimal scaling, relative std in the
            report); None: from the model's inertial parameters (friction columns unscaled).
        run_samples: samples the trajectory will be recorded with (rate x duration x periods);
            scales the grid's information to a run's when information already held is added.
        collision_margin: every checked capsule pair (non-adjacent links; links and obstacles,
            identify.model.collision) stays at least this far apart [m] on the grid; None: no
            collision constraints. Needs the model's URDF (model.source).
        obstacles: declared obstacles (plain dicts, identify.model.collision.parse_obstacles).
        link_tubes: add the capsules between consecutive joint origins (the link structure).
        collision_screen: capsule rows whose distance exceeds the margin (table rows whose
            height exceeds z_min) by more than this [m] at the current point are left out of
            IPOPT's problem (added back when they come close, as for the limit rows; table rows
            of every screen_stride-th sample are always kept).
        torque_limit: None, or the motor-torque constraint (predicted motor torque of the prior
            model + payload + friction + rotor inertia + reducer loss, with margins, within the
            drives' limits; identify.excitation.torque): dict with (n,) lists f_mc, f_mv, f_lc,
            f_lv [N*m, N*m*s/rad], xi [-], J_r [kg*m^2], tau_max [N*m], payload (10,) standard
            parameters on the last link or None, margin_frac, margin_coulomb.
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
    objective: str = "cond"
    noise_std: float | tuple = 1.0
    theta_prior: tuple | None = None
    run_samples: int | None = None
    collision_margin: float | None = 0.02
    obstacles: tuple = ()
    link_tubes: bool = True
    collision_screen: float = 0.03
    torque_limit: dict | None = None

    @property
    def period(self) -> float:
        """T = 2 pi / wf [s]."""
        return 2.0 * math.pi / self.wf

    def to_dict(self) -> dict:
        return to_plain(asdict(self))

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
        starts: per start: dict seed, status (of its last IPOPT solve), iterations (of all its
            IPOPT solves), solves (their number), max_iter (the limit of each), time_s, cond,
            feasible, eval_time_s (of time_s, the wall time IPOPT spent in objective/constraint
            callbacks; the rest is IPOPT's own linear algebra); after a polish the same with
            polish_ (polish_status, polish_iterations, polish_solves, polish_max_iter, ...).
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
def default_start(model, problem: ExcitationProblem) -> tuple[float, ...]:
    """The start pose when none is given [rad]: :func:`upright_pose` (the paper's arm), each
    joint whose (scaled) limits exclude its upright angle at the middle of its range instead
    (another arm's convention: e.g. a Panda's shoulder reaches +-84 deg at limit_scale 0.8)."""
    up = np.asarray(upright_pose(model.n))
    lim = scaled_limits(model, problem)
    mid = np.clip(np.nan_to_num(0.5 * (lim["q_min"] + lim["q_max"])), -math.pi, math.pi)
    inside = (up >= lim["q_min"]) & (up <= lim["q_max"])
    return tuple(float(v) for v in np.where(inside, up, mid))


def resolve_start(model, problem: ExcitationProblem) -> tuple[np.ndarray, np.ndarray]:
    """(q_start (n,) with NaN for free joints, free mask (n,) bool)."""
    n = model.n
    sp = default_start(model, problem) if problem.start_pose is None else tuple(problem.start_pose)
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


def rms_bounds(model, problem) -> np.ndarray | None:
    """(n,) minimum RMS velocity per joint [rad/s] of `problem` (one number broadcast to every
    joint), or None without that constraint."""
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
                f"{s_q:g}): constraint q_min <= q(0) <= q_max", setting="start_pose")
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
        if not math.isfinite(z_min):
            raise ValueError(f"ExcitationProblem.z_min must be a finite height [m] or None, got "
                             f"{problem.z_min!r}")
        q_chk = np.where(free, np.clip(0.0, lim["q_min"], lim["q_max"]), q_start)
        z = model.link_origins(q_chk)[1:, 2]
        z_alt = model.link_origins(q_chk + 0.7 * free)[1:, 2]
        for j in range(n):
            if z[j] < z_min and abs(z_alt[j] - z[j]) < 1e-12:
                raise ExcitationInfeasible(
                    f"workspace constraint z >= z_min = {z_min:g} m fails at the start pose: the "
                    f"origin of the frame of {names[j]} is at z = {z[j]:.4f} m", setting="z_min")
    _check_design_settings(model, problem)
    check_start_clearance(model, problem)
    vmin = rms_bounds(model, problem)
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


OBJECTIVES = ("cond", "d_optimal", "a_optimal")


def _check_design_settings(model, problem: ExcitationProblem) -> None:
    """Objective, noise model, collision and torque settings (ValueError naming the setting)."""
    from identify.model.collision import parse_obstacles
    if problem.objective not in OBJECTIVES:
        raise ValueError(f"ExcitationProblem.objective must be one of {list(OBJECTIVES)}, got "
                         f"{problem.objective!r}")
    if problem.objective != "cond" and problem.hessian == "exact":
        raise ValueError(f"ExcitationProblem.objective {problem.objective!r} needs "
                         f"hessian='limited-memory' (its exact gradient is the fast path)")
    try:
        noise = np.broadcast_to(np.asarray(problem.noise_std, float), (model.n,))
    except ValueError:
        noise = np.full(model.n, np.nan)
    if not np.all(np.isfinite(noise) & (noise > 0)):
        raise ValueError(f"ExcitationProblem.noise_std must be one number or {model.n} numbers, "
                         f"finite and > 0 [N*m], got {problem.noise_std!r}")
    if problem.hessian == "exact" and (problem.collision_margin is not None
                                       or problem.torque_limit is not None):
        raise ValueError("ExcitationProblem hessian='exact' supports only the limit, table and "
                         "RMS constraints: set collision_margin None and torque_limit None, or "
                         "use hessian='limited-memory'")
    if problem.collision_margin is not None:
        m = problem.collision_margin
        if not (np.isfinite(m) and m >= 0):
            raise ValueError(f"ExcitationProblem.collision_margin must be >= 0 [m] or None, got {m!r}")
        if not model.source:
            raise ValueError("collision constraints need the arm's URDF (RobotModel.source is "
                             "empty); set collision_margin None to optimize without them")
    parse_obstacles(problem.obstacles, "obstacles")
    if problem.obstacles and problem.collision_margin is None:
        raise ValueError("obstacles are declared but collision_margin is None (no collision "
                         "constraints): set a margin [m]")
    if problem.torque_limit is not None:
        from .torque import check_torque_limit
        check_torque_limit(model, problem.torque_limit)


#: the arm's base (the world origin) may lie this far on an obstacle's forbidden side [m] (a
#: table plane declared a few mm above the base frame's origin)
BASE_TOLERANCE = 0.01


def check_start_clearance(model, problem: ExcitationProblem, q_start=None) -> None:
    """The start pose against the collision model (identify.model.collision), before anything is
    optimized; raises :class:`ExcitationInfeasible` naming the obstacle or link pair, the distance
    and the pose (``setting``: "obstacles[k]", "start_pose" or "collision_margin"):

    * no declared obstacle holds the arm's base, the world origin (a box around it, a plane with
      the base on its forbidden side: a flipped normal, millimetres for metres, ...);
    * every moving link checked against obstacles (the second one on) is at least
      `collision_margin` from every obstacle at the start pose. (The optimizer and the backends'
      check leave out pairs closer than the margin at the start pose as overlaps of the model's
      own shapes; an obstacle there would silently be ignored.)
    * no pair of links is in contact at the start pose while apart at the zero pose and at
      :func:`upright_pose`, nor within `collision_margin` at the start pose only (a pair as close
      at a reference pose is the model's own closeness, e.g. a compact wrist or loose capsules
      around vendor meshes: left out of the constraints, listed in ``ignored_pairs``);
    * the margin leaves at most half of those pairs out (else it is not a clearance).

    Only pairs whose pose does not depend on a free start joint are decided here. q_start: (n,)
    start pose [rad] (default: the problem's, free joints at the middle of their range; for a
    trajectory read from a file, its q(0)). Nothing is checked without collision constraints
    (collision_margin None) or without the arm's URDF (model.source)."""
    if problem.collision_margin is None or not model.source:
        return
    from identify.model.collision import ArmCapsules, parse_obstacles
    margin = float(problem.collision_margin)
    obstacles = parse_obstacles(problem.obstacles, "obstacles")
    for k, ob in enumerate(obstacles):
        what = f"obstacle {ob.name!r} (obstacles[{k}])"
        if ob.kind == "plane":
            h = float(-ob.point @ ob.normal)
            if h < -BASE_TOLERANCE:
                raise ExcitationInfeasible(
                    f"{what}: the arm's base (the world origin) is {-1e3 * h:.0f} mm on the "
                    f"plane's forbidden side (allowed: normal . (x - point_m) >= 0, normal "
                    f"{ob.normal.round(3).tolist()}, point_m {ob.point.tolist()}): the normal "
                    f"points away from the arm, or point_m is not in metres", setting=f"obstacles[{k}]")
        elif np.all(np.abs(ob.center) < ob.half):
            raise ExcitationInfeasible(
                f"{what}: the box (center_m {ob.center.tolist()}, size_m "
                f"{(2 * ob.half).tolist()}) contains the arm's base (the world origin)",
                setting=f"obstacles[{k}]")
    names = list(model.joint_names)
    lim = scaled_limits(model, problem)
    if q_start is None:
        q0, free = resolve_start(model, problem)
        mid = np.clip(np.nan_to_num(0.5 * (lim["q_min"] + lim["q_max"])), -math.pi, math.pi)
        q0 = np.where(free, mid, q0)
    else:
        q0, free = np.asarray(q_start, float), np.zeros(model.n, bool)
    # body b moves with joints 1..b: decided when none of them is free
    decided_below = int(np.argmax(free)) + 1 if free.any() else model.n + 1
    ac = ArmCapsules.of_model(model, obstacles, link_tubes=problem.link_tubes)
    D = ac.distances(np.stack([q0, np.zeros(model.n), np.asarray(upright_pose(model.n))]))
    labels = ac.pair_labels()
    body = np.array([c.body for c in ac.capsules], int)
    pose = "[" + ", ".join("free" if f else f"{math.degrees(v):.1f}" for v, f in zip(q0, free)) + \
        "] deg"
    P = len(ac.pairs)
    for p, (ci, k) in enumerate(ac.obstacle_pairs):
        d = D[0, P + p]
        if body[ci] < decided_below and d < margin:
            ob = obstacles[k]
            inside = "inside it" if d < 0 else f"{1e3 * d:.1f} mm from it"
            raise ExcitationInfeasible(
                f"obstacle {ob.name!r} (obstacles[{k}]): at the start pose {pose} "
                f"{labels[P + p].split(' / ')[0]} (moved by {names[body[ci] - 1]}) is {inside}, "
                f"within the collision margin {1e3 * margin:.1f} mm: move the obstacle or choose "
                f"another start pose", setting=f"obstacles[{k}]")
    decided = [p for p, (i, j) in enumerate(ac.pairs) if max(body[i], body[j]) < decided_below]
    for p in decided:
        d, d_ref = D[0, p], D[1:, p].min()
        # in contact at the start pose, apart at the reference poses: a start pose in contact;
        # within the margin only at the start pose: the start pose's doing. A pair as close at
        # a reference pose is the model's own closeness (loose capsules around vendor meshes):
        # left out as before (trajectory meta: ignored_pairs)
        if d < 0 <= d_ref or 0 <= d < margin <= d_ref:
            apart = (f"puts {labels[p]} in contact ({1e3 * d:.1f} mm)" if d < 0 else
                     f"puts {labels[p]} {1e3 * d:.1f} mm apart")
            raise ExcitationInfeasible(
                f"the start pose {pose} {apart}, within the collision margin "
                f"{1e3 * margin:.1f} mm (at the zero and upright poses they are {1e3 * d_ref:.0f} "
                f"mm or more apart): choose another start pose"
                + ("" if d < 0 else f" or a collision margin below {1e3 * d:.1f} mm"),
                setting="start_pose")
    # pairs the margin itself leaves out (apart at the reference poses, closer than the margin
    # at the start pose): most of them unchecked means the margin is not a clearance
    ds = np.sort([D[0, p] for p in decided if D[1:, p].min() >= 0])
    if ds.size >= 2 and np.count_nonzero(ds < margin) > ds.size // 2:
        raise ExcitationInfeasible(
            f"a collision margin of {1e3 * margin:.1f} mm would leave "
            f"{np.count_nonzero(ds < margin)} of the {ds.size} link pairs unchecked (closer than "
            f"it at the start pose {pose}, so left out as the model's own overlap): give a margin "
            f"below {1e3 * ds[0]:.1f} mm to check every pair (at most "
            f"{1e3 * ds[ds.size // 2]:.1f} mm leaves half of them out)", setting="collision_margin")
