"""Stage 2 of the pipeline: the excitation and validation trajectories of a scenario, optimized
(cached on disk) or loaded from a file, with the facts reported about them
(:class:`~identify.app.results.TrajectoryInfo`)."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from identify.common import progress
from identify.common.jsonutil import to_jsonable
from identify.excitation.conditioning import base_parameters, trajectory_cond
from identify.excitation.fourier import FourierTrajectory
from identify.excitation.optimizer import optimize_excitation
from identify.excitation.problem import ExcitationProblem
from identify.scenario.spec import Scenario, TrajectorySpec

from .results import TrajectoryInfo

LABELS = ("excitation", "validation")


def cache_dir() -> Path:
    """Folder of cached trajectory optimizations ($TWINID_CACHE or ./.cache/excitation)."""
    return Path(os.environ.get("TWINID_CACHE", ".cache")) / "excitation"


def make_problem(spec: TrajectorySpec, model, terms) -> ExcitationProblem:
    """The excitation problem of a trajectory spec (degrees converted to radians here, once)."""
    start = None if spec.start_deg is None else tuple(math.radians(v) for v in spec.start_deg)
    if start is not None and len(start) != model.n:
        raise ValueError(f"start_deg has {len(start)} angles, the arm has {model.n} joints")
    return ExcitationProblem(harmonics=spec.harmonics, wf=2 * math.pi / spec.period_s,
                             start_pose=start, n_grid=spec.grid, terms=tuple(terms),
                             limit_scale=spec.limit_scale, z_min=spec.z_min_m,
                             max_iter=spec.max_iter)


def get_trajectory(spec: TrajectorySpec, model, terms, label: str
                   ) -> tuple[FourierTrajectory, TrajectoryInfo]:
    """The trajectory of `spec` (one period) and the facts about it (cond(W_base), source, ...)."""
    problem = make_problem(spec, model, terms)
    if spec.source == "file":
        tr = FourierTrajectory.load(spec.file).with_periods(1)
        if tr.n_joints != model.n:
            raise ValueError(f"{spec.file}: trajectory has {tr.n_joints} joints, the arm has "
                             f"{model.n}")
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
    out = {}
    for label in LABELS:
        with progress.step(f"{label} trajectory", timings):
            out[label] = get_trajectory(getattr(scn.trajectories, label), model, terms, label)
    return out
