"""``python -m identify.excitation``: optimize, save and plot excitation / validation trajectories
from the command line."""
from __future__ import annotations
import argparse
import math

import numpy as np
import sys
from pathlib import Path
from .optimizer import optimize_excitation, validation_trajectory
from .problem import ExcitationInfeasible, ExcitationProblem


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
    for k, tok in enumerate(text.split(",")):
        tok = tok.strip()
        if tok.lower() in ("free", "none", ""):
            out.append(None)
            continue
        v = _number(tok)
        if not math.isfinite(v):
            raise ValueError(f"--start-deg: entry {k + 1} {tok!r} is not an angle in degrees "
                             f"(or 'free')")
        out.append(math.radians(v))
    return tuple(out)


def _number(text: str) -> float:
    """float(text), NaN when it is not a number."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def _positive(text: str) -> float:
    """argparse type: a finite number > 0 (argparse names the option in the error)."""
    v = _number(text)
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"must be a number > 0, got {text!r}")
    return v


def held_information(model, problem, files, rate: float, noise) -> np.ndarray | None:
    """Fisher information (p, p) of trajectory files already recorded at `rate` [Hz] (``--held``),
    for the base parameters of `problem`; ValueError naming the file when one is not a trajectory
    of this arm."""
    if not files:
        return None
    from .conditioning import base_parameters
    from .fourier import FourierTrajectory
    from .information import information_of
    bp = base_parameters(model, problem)
    F0 = None
    for f in files:
        try:
            tr = FourierTrajectory.load(f)
        except FileNotFoundError:
            raise ValueError(f"--held {f}: file not found") from None
        except (ValueError, KeyError, TypeError, IndexError, AttributeError, OSError) as exc:
            raise ValueError(f"--held {f}: not a trajectory file (YAML / NPZ of python -m "
                             f"identify.excitation or twinid trajectory): "
                             f"{str(exc).replace(f'{f}: ', '')}") from None
        if tr.n_joints != model.n:
            raise ValueError(f"--held {f}: the trajectory moves {tr.n_joints} joints, the arm "
                             f"(--joints / --urdf) has {model.n} {list(model.joint_names)}")
        t = np.arange(int(round(tr.duration * rate))) / rate
        F = information_of(model, bp, problem.terms, *tr.evaluate(t), noise)
        F0 = F if F0 is None else F0 + F
    return F0


def main(argv: list[str] | None = None) -> int:
    """``python -m identify.excitation``: optimize, save and plot excitation/validation trajectories."""
    ap = argparse.ArgumentParser(prog="python -m identify.excitation",
                                 description="Optimize a Fourier excitation trajectory for cond(W_base).")
    ap.add_argument("--urdf", help="arm URDF (default: the reference arm with its YAML limits)")
    ap.add_argument("--joints", help="comma-separated joints to move (others locked at 0)")
    ap.add_argument("--out", default="trajectories", help="output folder")
    ap.add_argument("--harmonics", type=int, default=5)
    ap.add_argument("--period", type=_positive, default=20.0,
                    help="period 2 pi / wf [s]")
    ap.add_argument("--start-deg", help="comma-separated start pose [deg]; 'free' leaves a joint "
                                        "free (default: upright, joints 2 and 4 at -90)")
    ap.add_argument("--grid", type=int, default=200, help="grid samples per period")
    ap.add_argument("--limit-scale", type=float, default=0.8)
    ap.add_argument("--z-min", type=float, default=None, help="table plane [m]")
    ap.add_argument("--terms", default="viscous,coulomb", help="friction columns ('' for none)")
    ap.add_argument("--starts", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-iter", type=int, default=300)
    ap.add_argument("--rate", type=_positive, default=100.0,
                    help="sampled table rate [Hz]")
    ap.add_argument("--validation", action="store_true", help="also make a validation trajectory")
    ap.add_argument("--no-cache", action="store_true")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--quiet", action="store_true")
    ap.add_argument("--objective", default=ExcitationProblem.objective,
                    choices=["cond", "d_optimal", "a_optimal"],
                    help="cond(W_base), log det of the information, or the sum of squared "
                         "relative std (docs/excitation.md; default %(default)s)")
    ap.add_argument("--noise", type=float, default=0.05,
                    help="torque noise std per joint [N*m] of the information (d/a-optimal)")
    ap.add_argument("--collision-margin", type=float, default=0.02,
                    help="self-collision clearance [m]; negative: no collision constraints")
    ap.add_argument("--held", action="append", default=[],
                    help="trajectory file (YAML/NPZ) already recorded at --rate: optimize the "
                         "new one for the combined estimate (d/a-optimal; repeatable)")
    args = ap.parse_args(argv)
    try:
        joints = None if args.joints is None else [j.strip() for j in args.joints.split(",")]
        model = load_model(args.urdf, joints)
        problem = ExcitationProblem(
            harmonics=args.harmonics, wf=2 * math.pi / args.period,
            start_pose=_parse_pose(args.start_deg), n_grid=args.grid,
            terms=tuple(t for t in args.terms.split(",") if t.strip()),
            limit_scale=args.limit_scale, z_min=args.z_min, max_iter=args.max_iter,
            objective=args.objective, noise_std=args.noise,
            run_samples=int(round(args.rate * args.period)),
            collision_margin=None if args.collision_margin < 0 else args.collision_margin)
        if args.held and args.objective == "cond":
            # cond(W_base) is a figure of the new trajectory alone: it cannot use held data
            raise ValueError("--held needs --objective d_optimal or a_optimal (cond(W_base) of "
                             "the new trajectory alone would ignore the held data)")
        info0 = held_information(model, problem, args.held, args.rate, args.noise)
        out = Path(args.out)
        cache = None if args.no_cache else Path(".cache") / "excitation"
        jobs = [("excitation", lambda: optimize_excitation(
            model, problem, seed=args.seed, n_starts=args.starts, cache_dir=cache,
            progress=not args.quiet, information0=info0))]
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
