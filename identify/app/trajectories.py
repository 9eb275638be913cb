"""Stage 2 of the pipeline: the excitation and validation trajectories of a scenario, optimized
(cached on disk) or loaded from a file, with the facts reported about them
(:class:`~identify.app.results.TrajectoryInfo`)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from identify.common import progress
from identify.common.errors import InputError
from identify.common.fileio import regular_file_problem, usable_cache
from identify.common.jsonutil import to_jsonable
from identify.excitation.conditioning import base_parameters, trajectory_cond
from identify.excitation.fourier import FourierTrajectory
from identify.excitation.optimizer import optimize_excitation
from identify.excitation.problem import ExcitationProblem
from identify.scenario.spec import Scenario, TrajectorySpec

from .results import TrajectoryInfo

LABELS = ("excitation", "validation")


def cache_dir() -> Path | None:
    """Folder of cached trajectory optimizations: ``<cache root>/excitation`` with the cache root
    ``$TWINID_CACHE``, else ``$XDG_CACHE_HOME/twinid`` or ``~/.cache/twinid`` (not the working
    directory). None -- after one warning -- when it cannot be written: no cache then."""
    return usable_cache("excitation", "trajectories are optimized on every run (not cached)")


def make_problem(spec: TrajectorySpec, model, terms) -> ExcitationProblem:
    """The excitation problem of a trajectory spec (degrees converted to radians here, once)."""
    start = None if spec.start_deg is None else tuple(math.radians(v) for v in spec.start_deg)
    if start is not None and len(start) != model.n:
        raise ValueError(f"start_deg has {len(start)} angles, the arm has {model.n} joints")
    return ExcitationProblem(harmonics=spec.harmonics, wf=2 * math.pi / spec.period_s,
                             start_pose=start, n_grid=spec.grid, terms=tuple(terms),
                             limit_scale=spec.limit_scale, z_min=spec.z_min_m,
                             max_iter=spec.max_iter)


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


def get_trajectory(spec: TrajectorySpec, model, terms, label: str
                   ) -> tuple[FourierTrajectory, TrajectoryInfo]:
    """The trajectory of `spec` (one period) and the facts about it (cond(W_base), source, ...)."""
    problem = make_problem(spec, model, terms)
    if spec.source == "file":
        tr = load_trajectory_file(spec.file, label, model.n)
        bp = base_parameters(model, problem)
        info = TrajectoryInfo(label=label, source=str(spec.file),
                              cond=trajectory_cond(model, tr, bp, tuple(terms), 10 * spec.grid))
    else:
        res = optimize_excitation(model, problem, seed=spec.seed, n_starts=spec.starts,
                                  cache_dir=cache_dir() if spec.cache else None,
                                  progress=progress.enabled())
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
    return tr, info


def trajectories(scn: Scenario, model, timings: dict | None = None) -> dict:
    """label -> (trajectory, TrajectoryInfo) for the excitation and validation trajectories."""
    terms = scn.identification.friction_terms
    for label in LABELS:        # a bad trajectory file is refused before anything is optimized
        spec = getattr(scn.trajectories, label)
        if spec.source == "file":
            load_trajectory_file(spec.file, label, model.n)
    out = {}
    for label in LABELS:
        with progress.step(f"{label} trajectory", timings):
            out[label] = get_trajectory(getattr(scn.trajectories, label), model, terms, label)
    return out
