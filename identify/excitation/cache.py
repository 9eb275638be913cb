"""On-disk cache of optimized trajectories, keyed by a hash of the model's fingerprint, the problem,
the base-parameter selection, the seed and the number of starts."""
from __future__ import annotations
import hashlib
import json
from pathlib import Path
import numpy as np
from identify.common.fileio import atomic_write_bytes, dump_yaml, read_yaml

from .fourier import FourierTrajectory, to_plain
from .problem import CACHE_VERSION, ExcitationResult


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


def problem_key(model, problem, bp, seed, n_starts, information0=None) -> str:
    """SHA-256 hex digest of everything the optimized trajectory depends on: the model's
    parameters, kinematics and limits, `problem`'s settings, the base-parameter columns of `bp`,
    seed, n_starts (None for both: the key of the built NLP, shared by every start), the
    information already held (p, p) and, with a collision margin, the URDF's bytes."""
    d = {"version": CACHE_VERSION, "model": _model_fingerprint(model), "problem": problem.to_dict(),
         "base_columns": [int(i) for i in np.asarray(bp.independent)], "seed": seed,
         "n_starts": n_starts}
    if information0 is not None:        # information already held changes the optimum
        d["information0"] = hashlib.sha256(
            np.ascontiguousarray(np.round(np.asarray(information0, float), 9)).tobytes()).hexdigest()
    if getattr(problem, "collision_margin", None) is not None and getattr(model, "source", ""):
        # the collision geometry comes from the URDF file: its bytes change the result
        try:
            d["urdf"] = hashlib.sha256(Path(model.source).read_bytes()).hexdigest()
        except OSError:
            d["urdf"] = str(model.source)
    return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def save_cache(path: Path, res: ExcitationResult) -> None:
    """Write `res` to the YAML file `path` (atomically), read back by :func:`load_cache`."""
    d = {"trajectory": res.trajectory.to_dict(), "cond": res.cond, "cond_grid": res.cond_grid,
         "objective": res.objective, "solver_time_s": res.solver_time_s,
         "build_time_s": res.build_time_s, "limits_used": to_plain(res.limits_used),
         "max_ratio": to_plain(res.max_ratio), "starts": to_plain(res.starts), "n_base": res.n_base,
         "base_names": list(res.base_names), "problem": res.problem.to_dict(), "seed": res.seed,
         "n_starts": res.n_starts}
    atomic_write_bytes(path, dump_yaml(to_plain(d), sort_keys=False).encode())


def load_cache(path: Path, problem) -> ExcitationResult | None:
    """The result :func:`save_cache` wrote to `path` (its problem: `problem`), or None when the
    file cannot be read as one (an old or damaged cache file is recomputed and overwritten)."""
    try:
        d = read_yaml(path)
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
