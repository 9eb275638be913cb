"""Pipeline step 2: the excitation and validation trajectories of a scenario, optimized
(cached on disk) or loaded from a file, with the facts reported about them
(:class:`~identify.outputs.results.TrajectoryInfo`)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from identify.common import progress
from identify.common.errors import InputError
from identify.common.fileio import regular_file_problem, usable_cache
from identify.common.jsonutil import to_jsonable
from identify.excitation.conditioning import base_parameters, trajectory_cond
from identify.excitation.fourier import FourierTrajectory
from identify.excitation.optimizer import optimize_excitation
from identify.excitation.problem import (ExcitationInfeasible, ExcitationProblem, check_problem,
                                         check_start_clearance)
from identify.scenario.load import scenario_error
from identify.scenario.spec import Scenario, TrajectorySpec

from identify.outputs.results import HeldDesign, HeldSource, TrajectoryInfo

LABELS = ("excitation", "validation")


def cache_dir() -> Path | None:
    """Folder of cached trajectory optimizations: ``<cache root>/excitation`` with the cache root
    ``$TWINID_CACHE``, else ``$XDG_CACHE_HOME/twinid`` or ``~/.cache/twinid`` (not the working
    directory). None -- after one warning -- when it cannot be written: no cache then."""
    return usable_cache("excitation", "trajectories are optimized on every run (not cached)")


@dataclass(frozen=True)
class DesignContext:
    """What the scenario says about the run a trajectory is designed for (all optional).

    noise_std: per-joint torque noise std [N*m] (the twin's torque_noise_Nm; 1 if unknown);
    sample_rate_hz: recording rate [Hz]; theta_prior: (p,) prior base parameter values;
    torque_limit: the excitation torque_limit dict (identify.excitation.torque) or None."""
    noise_std: object = 1.0
    sample_rate_hz: float | None = None
    theta_prior: tuple | None = None
    torque_limit: dict | None = None


def make_problem(spec: TrajectorySpec, model, terms, ctx: DesignContext | None = None
                 ) -> ExcitationProblem:
    """The excitation problem of a trajectory spec (degrees converted to radians here, once)."""
    ctx = ctx or DesignContext()
    start = None if spec.start_deg is None else tuple(math.radians(v) for v in spec.start_deg)
    if start is not None and len(start) != model.n:
        raise ValueError(f"start_deg has {len(start)} angles, the arm has {model.n} joints")
    run = (int(round(ctx.sample_rate_hz * spec.period_s * spec.periods))
           if ctx.sample_rate_hz else None)
    noise = ctx.noise_std if np.ndim(ctx.noise_std) == 0 else tuple(ctx.noise_std)
    return ExcitationProblem(harmonics=spec.harmonics, wf=2 * math.pi / spec.period_s,
                             start_pose=start, n_grid=spec.grid, terms=tuple(terms),
                             limit_scale=spec.limit_scale, z_min=spec.z_min_m,
                             max_iter=spec.max_iter, objective=spec.objective,
                             noise_std=noise, theta_prior=ctx.theta_prior, run_samples=run,
                             collision_margin=spec.collision_margin_m,
                             obstacles=tuple(spec.obstacles), torque_limit=ctx.torque_limit)


def load_trajectory_file(path, label: str, n_joints: int) -> FourierTrajectory:
    """One period of the trajectory in file `path` (YAML / NPZ written by ``twinid trajectory``).
    Raises InputError (exit 2) naming the file and the key when it is not such a file."""
    where = f"trajectories.{label}.file: {path}"
    prob = regular_file_problem(path)
    if prob is not None:
        raise InputError(f"{where}: {prob}")
    try:
        tr = FourierTrajectory.load(path).with_periods(1)
    except (ValueError, KeyError, TypeError, IndexError, AttributeError, OSError) as exc:
        msg = str(exc).replace(f"{path}: ", "")
        raise InputError(f"{where}: not a trajectory file written by twinid trajectory ({msg})"
                         ) from None
    if tr.n_joints != n_joints:
        raise InputError(f"{where}: the trajectory has {tr.n_joints} joints, the arm has "
                         f"{n_joints}")
    return tr


#: fraction of the drives' torque limits the optimizer may use: it holds the bound on 10x its
#: grid, the hardware checks every control cycle (1 kHz), and between the optimizer's samples
#: the bound rose 1e-5 above the limit: the hardware refused a trajectory twinid had designed
TORQUE_HEADROOM = 0.995


def design_context(scn: Scenario, model, terms) -> DesignContext:
    """Noise level, sample rate, prior base parameters and (if asked) the motor-torque limit of
    a scenario's run, for the excitation problem and the predicted std."""
    from identify.excitation.conditioning import base_parameters as _bp
    from identify.excitation.torque import torque_limit_from_drives
    twin = dict(scn.twin) if scn.backend == "twin" else {}
    noise = twin.get("torque_noise_Nm", 0.05 if scn.backend == "twin" else 1.0)
    if np.ndim(noise) == 1 and len(noise) != model.n:
        raise scenario_error(scn, ("twin", "torque_noise_Nm"), f"has {len(noise)} values, the arm "
                             f"has {model.n} joints {list(model.joint_names)}: give one number or "
                             f"one per joint")
    if not np.all(np.asarray(noise, float) > 0):
        noise = 1.0                          # noiseless twin: relative figures only
    rate = float(twin.get("sample_rate_hz") or 100.0) if scn.backend == "twin" else \
        float(scn.hardware.options.get("record_rate_hz") or 100.0)
    drives = None
    if scn.arm.drives is not None:
        from identify.model.drives import load_drives
        try:
            drives = load_drives(scn.arm.drives, list(model.joint_names))
        except (ValueError, OSError):
            drives = None
    # prior base parameter values: the URDF's inertials, the drive file's link-side friction
    bp = _bp(model, ExcitationProblem(terms=tuple(terms)))
    extra = []
    for term in terms:
        key = {"viscous": "link_viscous", "coulomb": "link_coulomb"}.get(term)
        extra.append(drives.array(key) if (drives is not None and key) else np.zeros(model.n))
    p_full = np.concatenate([model.inertial_parameters()] + extra)
    theta = tuple(float(v) for v in bp.project(p_full))
    tl = None
    if any(wants_torque_limit(scn, label) for label in LABELS):
        if drives is None:
            raise ValueError("trajectories.excitation.torque_limit needs arm.drives (friction, "
                             "reducer loss and rotor inertia of the drives)")
        payload = None
        if scn.arm.payload is not None:
            from identify.model.payload import payload_in_model_frame
            payload = payload_in_model_frame(scn.arm.urdf, model, scn.arm.payload)
        # the hardware scales its torque limits by hardware.options.limit_scale (robot.safety)
        scale = float(scn.hardware.options.get("limit_scale", 1.0)) if scn.backend == "hardware" \
            else 1.0
        tl = torque_limit_from_drives(
            drives, TORQUE_HEADROOM * scale * np.asarray(model.limits.tau_max, float), payload)
    return DesignContext(noise_std=noise, sample_rate_hz=rate, theta_prior=theta, torque_limit=tl)


def wants_torque_limit(scn: Scenario, label: str) -> bool:
    """Whether trajectory `label`'s torque_limit (auto: on for backend hardware) asks for the
    motor-torque constraint."""
    want = getattr(scn.trajectories, label).torque_limit
    return want == "on" or (want == "auto" and scn.backend == "hardware")


def label_context(scn: Scenario, ctx: DesignContext, label: str) -> DesignContext:
    """`ctx` for trajectory `label`: the motor-torque limit only when its own torque_limit asks
    (design_context computes it when any trajectory does)."""
    if wants_torque_limit(scn, label) or ctx.torque_limit is None:
        return ctx
    return dataclasses.replace(ctx, torque_limit=None)


#: ExcitationProblem field -> scenario key (trajectories.<label>.<key>)
_SETTING_KEYS = {"start_pose": "start_deg", "z_min": "z_min_m",
                 "collision_margin": "collision_margin_m", "limit_scale": "limit_scale",
                 "harmonics": "harmonics", "wf": "period_s", "n_grid": "grid",
                 "torque_limit": "torque_limit", "objective": "objective"}


@dataclass(frozen=True)
class TrajectoryPlan:
    """Where a run's trajectory comes from, known before any work: `kind` "file" (read from
    trajectories.<label>.file), "cached" (its optimization is in the cache `folder`),
    "optimize" (to optimize; cached in `folder` afterwards unless None) or "held" (optimized
    with the held data, whose information is only known after reading them: the cache is
    looked up then)."""
    kind: str
    folder: Path | None = None


def trajectory_plan(scn: Scenario, model) -> dict:
    """label -> :class:`TrajectoryPlan` of the scenario's trajectories: the optimizer's cache
    is looked up by the key identify.excitation.optimizer uses (identify.excitation.cache
    .problem_key), so "cached" means the run reads it instead of optimizing."""
    from identify.excitation.cache import problem_key
    terms = scn.identification.friction_terms
    ctx = None
    out = {}
    for label in LABELS:
        spec = getattr(scn.trajectories, label)
        if spec.source == "file":
            out[label] = TrajectoryPlan("file")
            continue
        folder = cache_dir() if spec.cache else None
        if label == "excitation" and spec.held:
            out[label] = TrajectoryPlan("held", folder)
            continue
        ctx = design_context(scn, model, terms) if ctx is None else ctx
        hit = False
        if folder is not None:
            problem = make_problem(spec, model, terms, label_context(scn, ctx, label))
            key = problem_key(model, problem, base_parameters(model, problem), spec.seed,
                              int(spec.starts))
            hit = (Path(folder) / f"excitation-{key[:20]}.yaml").is_file()
        out[label] = TrajectoryPlan("cached" if hit else "optimize", folder)
    return out


def cache_state(scn: Scenario, model) -> dict:
    """What the run estimate (identify.scenario.budget.estimate_run) needs to know about the
    caches: {"cached": labels whose optimization the cache holds, "compiled": the arm model's
    generated C is in the code-generation cache, "plan": trajectory_plan's}. Looked up before the plan (computing a
    cache key evaluates the model, which compiles it)."""
    from identify.model.regressor import is_compiled
    compiled = is_compiled(model.regressor_function())
    plan = trajectory_plan(scn, model)
    return {"cached": frozenset(k for k, p in plan.items() if p.kind == "cached"),
            "compiled": compiled, "plan": plan}


def estimate_cache_state(scn: Scenario, model) -> dict:
    """The keyword arguments ``cached`` and ``compiled`` of estimate_run (:func:`cache_state`);
    {} (the estimate assumes nothing is cached) when a trajectory's settings are malformed:
    the run then refuses them, naming the key, before anything is optimized."""
    try:
        state = cache_state(scn, model)
    except ValueError:
        return {}
    return {"cached": state["cached"], "compiled": state["compiled"]}


def check_designs(scn: Scenario, model, terms, ctx: DesignContext, files: dict) -> None:
    """Both trajectories' problems checked against the arm before anything is optimized (start
    pose within the limits, above the table, clear of the obstacles and of the arm itself;
    identify.excitation.problem.check_problem): a problem of the validation trajectory is not
    found after minutes of optimizing the excitation. `files`: label -> trajectory read from
    trajectories.<label>.file (its q(0) is the start pose checked). Raises ScenarioError
    (``file:line: trajectories.<label>.<key>: message``, exit 2)."""
    for label in LABELS:
        spec = getattr(scn.trajectories, label)
        base = ("trajectories", label)
        try:
            problem = make_problem(spec, model, terms, label_context(scn, ctx, label))
            if label in files:
                q0 = files[label].evaluate(np.zeros(1))[0][0]
                check_start_clearance(model, problem, q0)
            else:
                check_problem(model, problem)
        except ValueError as exc:
            setting = getattr(exc, "setting", None) or ""
            key = base
            if setting.startswith("obstacles["):
                key = base + ("obstacles", int(setting[len("obstacles["):-1]))
            elif setting in _SETTING_KEYS:
                key = base + (_SETTING_KEYS[setting],)
            elif label in files:
                key = base + ("file",)
            what = "infeasible: " if isinstance(exc, ExcitationInfeasible) else ""
            raise scenario_error(scn, key, f"{what}{exc}") from None


def check_contact_time(scn: Scenario, files: dict) -> None:
    """The collision run's contact (closed_loop.collision.contact.time_s) starts within the one
    period of trajectories.<closed_loop.trajectory> the closed loop runs: refused before any
    design work (it was found after the identification). `files`: label -> trajectory read
    from trajectories.<label>.file. Raises ScenarioError (exit 2)."""
    cl = scn.closed_loop
    if cl is None or not cl.collision.enabled or scn.backend != "twin":
        return
    label = cl.trajectory
    period = files[label].period if label in files else \
        getattr(scn.trajectories, label).period_s
    t0 = float(cl.collision.contact.time_s)
    if not t0 < period:
        raise scenario_error(scn, ("closed_loop", "collision", "contact", "time_s"),
                             f"{t0:g} s is not within the {label} trajectory the closed loop "
                             f"runs (0 .. {period:g} s: one period)")


def get_trajectory(spec: TrajectorySpec, model, terms, label: str,
                   ctx: DesignContext | None = None, information0=None
                   ) -> tuple[FourierTrajectory, TrajectoryInfo]:
    """The trajectory of `spec` (one period) and the facts about it (cond(W_base), source,
    design figures, collision check). information0: Fisher information already held."""
    problem = make_problem(spec, model, terms, ctx)
    if spec.source == "file":
        tr = load_trajectory_file(spec.file, label, model.n)
        bp = base_parameters(model, problem)
        info = TrajectoryInfo(label=label, source=str(spec.file),
                              cond=trajectory_cond(model, tr, bp, tuple(terms), 10 * spec.grid))
    else:
        res = optimize_excitation(model, problem, seed=spec.seed, n_starts=spec.starts,
                                  cache_dir=cache_dir() if spec.cache else None,
                                  progress=progress.enabled(), information0=information0,
                                  label=label)
        tr = res.trajectory
        info = TrajectoryInfo(
            label=label, source="optimized" + (" (cached)" if res.from_cache else ""),
            cond=res.cond, solver_time_s=res.solver_time_s, seed=spec.seed, starts=spec.starts,
            max_ratio={k: np.asarray(v).tolist() for k, v in res.max_ratio.items()},
            limits_used=to_jsonable(res.limits_used))
    info.harmonics = int(tr.n_harmonics)
    info.period_s = float(tr.period)
    info.periods = int(spec.periods)
    info.duration_s = float(tr.period * spec.periods)
    _design_facts(info, tr, model, problem, spec, information0)
    return tr, info


def _design_facts(info: TrajectoryInfo, tr, model, problem: ExcitationProblem, spec,
                  information0=None) -> None:
    """Design figures (identify.excitation.information) and the independent collision check
    (PyBullet on the URDF's shapes, 10x the optimizer grid; raises CollisionRefused naming pair
    and time) of `tr`, into `info`."""
    from identify.backend.clearance import check_clearance
    from identify.excitation.information import design_report
    bp = base_parameters(model, problem)
    run = problem.run_samples or 10 * problem.n_grid
    rep = design_report(model, tr, bp, problem.terms, problem.noise_std, run,
                        theta_prior=problem.theta_prior, n_check=10 * problem.n_grid,
                        information0=information0)
    info.objective = problem.objective
    info.cond_scaled = rep.cond_scaled
    info.logdet = rep.logdet if np.isfinite(rep.logdet) else None
    info.rel_std = [float(v) if np.isfinite(v) else None for v in rep.rel_std]
    info.median_rel_std = rep.median_rel_std if np.isfinite(rep.median_rel_std) else None
    info.noise_std_Nm = rep.noise_std.tolist()
    if model.source:
        margin = problem.collision_margin
        cr = check_clearance(model.source, model.joint_names, tr,
                             obstacles=[dict(o) for o in problem.obstacles],
                             margin=0.0 if margin is None else margin,
                             n_samples=10 * problem.n_grid, what=f"{info.label} trajectory")
        info.clearance_margin_m = cr.margin
        if cr.n_pairs:
            info.min_distance_m = float(cr.min_distance.min())
            info.closest_pair, info.closest_time_s = cr.worst_pair, cr.worst_time
            info.clearance = {"t": cr.t, "min": cr.min_distance, "margin": cr.margin,
                              "pairs": dict(zip(cr.labels, cr.distances.T))}


def held_sources(held, processed=None) -> list[HeldSource]:
    """[HeldSource] of identify.logs.held recordings (`processed`: their Processed, same order)."""
    out = []
    for k, h in enumerate(held):
        r = h.recording
        out.append(HeldSource(key=h.key, source=h.source, kind=h.kind, file=h.file,
                              samples=int(r.n_samples), duration_s=float(r.duration),
                              processed_samples=None if processed is None
                              else int(processed[k].n_samples)))
    return out


def held_information(scn: Scenario, model, terms, ctx: DesignContext, held=None
                     ) -> tuple[np.ndarray | None, list]:
    """The Fisher information (p, p) of the data already held (``trajectories.excitation.held``)
    for the base parameters of the excitation problem, and their [HeldSource].

    Computed from the *recorded* samples processed as the identification processes them
    (identify.estimation.processing with the scenario's settings: filtered q, qd, qdd), with the
    scenario's noise model (the design context's per-joint torque noise, the same the new
    trajectory's prediction uses, so both add consistently). A processed sample stands for
    N_raw / N_processed raw samples (decimation, period averaging), as the new trajectory's
    prediction counts the raw samples of its run. (None, []) without held data."""
    from identify.estimation.processing import ProcessingSettings, process
    from identify.excitation.information import information_of
    from identify.logs.held import load_held
    if held is None:
        if not scn.trajectories.excitation.held:
            return None, []
        held = load_held(scn, model.joint_names, model)
    spec = scn.trajectories.excitation
    problem = make_problem(spec, model, terms, ctx)
    bp = base_parameters(model, problem)
    ps = ProcessingSettings.from_dict(scn.processing)
    # the fit stacks the processed held data with the new run's: one rate, found before the run
    rate_new = ps.resample_hz or ctx.sample_rate_hz
    F, procs = None, []
    for h in held:
        try:
            d = process(h.recording, ps)
        except ValueError as exc:
            raise InputError(f"{h.key}: {h.file}: cannot be processed ({exc})") from None
        if rate_new and not math.isclose(d.rate_hz, rate_new / ps.decimate, rel_tol=1e-6):
            raise InputError(f"{h.key}: {h.file} is processed at {d.rate_hz:g} Hz, the new run "
                             f"at {rate_new / ps.decimate:g} Hz (recorded at "
                             f"{h.recording.rate_hz:g} Hz, the new run at {rate_new:g} Hz): "
                             f"record at the same rate or set processing.resample_hz")
        Fi = information_of(model, bp, problem.terms, d.q, d.qd, d.qdd, problem.noise_std)
        Fi *= h.recording.n_samples / d.n_samples
        F = Fi if F is None else F + Fi
        procs.append(d)
    return F, held_sources(held, procs)


def held_design(info: TrajectoryInfo, tr, model, problem: ExcitationProblem, F0: np.ndarray,
                sources: list) -> HeldDesign:
    """The held data alone and the new trajectory alone, in the figures of `info` (whose own
    figures are for the combined estimate)."""
    from identify.excitation.information import design_report
    bp = base_parameters(model, problem)
    run = problem.run_samples or 10 * problem.n_grid
    new = design_report(model, tr, bp, problem.terms, problem.noise_std, run,
                        theta_prior=problem.theta_prior, n_check=10 * problem.n_grid)
    # held alone: identifiable parameters through the pseudo-inverse of the equilibrated
    # information (a parameter is identifiable when it has no share in the null space)
    s = np.sqrt(np.maximum(np.diag(F0), 0.0))
    s = np.where(s > 0, s, 1.0)
    lam, V = np.linalg.eigh(F0 / s[:, None] / s[None, :])
    keep = lam > 1e-10 * max(lam[-1], 1e-300)
    ok = np.linalg.norm(V[:, ~keep], axis=1) < 1e-6
    C = (V[:, keep] / lam[keep]) @ V[:, keep].T
    std = np.where(ok, np.sqrt(np.maximum(np.diag(C), 0.0)) / s, np.inf)
    prior = (np.abs(np.asarray(problem.theta_prior, float)) if problem.theta_prior is not None
             else np.full(std.shape, np.nan))
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(prior > 0, std / prior, np.nan)

    def plain(x):
        return [float(v) if np.isfinite(v) else None for v in x]
    fin = np.isfinite(rel)
    med_held = float(np.nanmedian(rel)) if ok.all() and fin.any() else None
    med_new = new.median_rel_std if np.isfinite(new.median_rel_std) else None
    return HeldDesign(sources=sources, rank=int(keep.sum()), n_base=int(F0.shape[0]),
                      rel_std_held=plain(rel), rel_std_new=plain(new.rel_std),
                      median_rel_std_held=med_held, median_rel_std_new=med_new)


def trajectories(scn: Scenario, model, timings: dict | None = None, held=None) -> dict:
    """label -> (trajectory, TrajectoryInfo) for the excitation and validation trajectories.
    With data already held (``trajectories.excitation.held``; read here unless `held` gives
    them: identify.logs.held recordings) the excitation is designed for the combined estimate
    (information0) and its info carries :class:`HeldDesign`."""
    terms = scn.identification.friction_terms
    files = {}
    for label in LABELS:        # a bad trajectory file is refused before anything is optimized
        spec = getattr(scn.trajectories, label)
        if spec.source == "file":
            files[label] = load_trajectory_file(spec.file, label, model.n)
    check_contact_time(scn, files)
    ctx = design_context(scn, model, terms)
    check_designs(scn, model, terms, ctx, files)
    F0, sources = None, []
    if scn.trajectories.excitation.held:
        with progress.step("held data", timings):
            if held is None:
                from identify.logs.held import load_held
                held = load_held(scn, model.joint_names, model)
            F0, sources = held_information(scn, model, terms, ctx, held)
    out = {}
    for label in LABELS:
        spec = getattr(scn.trajectories, label)
        info0 = F0 if label == "excitation" else None
        ctx_l = label_context(scn, ctx, label)
        with progress.step(f"{label} trajectory", timings):
            out[label] = get_trajectory(spec, model, terms, label, ctx_l, information0=info0)
        if info0 is not None:
            tr, info = out[label]
            info.held = held_design(info, tr, model, make_problem(spec, model, terms, ctx_l),
                                    info0, sources)
            if info.logdet is None:
                raise InputError("trajectories.excitation.held: the held data and the new "
                                 "trajectory together leave base parameters unidentifiable "
                                 "(singular information); excite the joints the held data "
                                 "do not move")
    if held:
        held_not_validation(scn, held, out["validation"][0])
    return out


#: a held recording whose q follows the validation trajectory this closely (RMS) [rad] is a
#: recording of it (tracking error ~ mrad; another trajectory is ~ 1 rad away)
SAME_TRAJECTORY_RAD = 0.02


def held_not_validation(scn: Scenario, held, validation: FourierTrajectory) -> None:
    """Refuse held data that are a recording of the run's validation trajectory (e.g. the
    recordings/validation.npz of an earlier run with the same validation settings): the fit
    would see the data it is validated on. Raises ScenarioError at the held entry."""
    for i, h in enumerate(held):
        r = h.recording
        if r.n_samples == 0:
            continue
        q = validation.evaluate(r.t - r.t[0])[0]
        rms = float(np.sqrt(np.mean((np.asarray(q) - r.q) ** 2)))
        if rms < SAME_TRAJECTORY_RAD:
            raise scenario_error(
                scn, ("trajectories", "excitation", "held", i),
                f"{h.file} is a recording of this run's validation trajectory (its joint "
                f"positions are {1e3 * rms:.1f} mrad RMS from it): the fit would see the data "
                f"it is validated on; hold other data or change trajectories.validation "
                f"(e.g. its seed)")
