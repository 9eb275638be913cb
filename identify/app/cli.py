"""The ``twinid`` command (also ``python -m identify``).

Subcommands::

    twinid run SCENARIO [--out DIR] [--force] [--yes]
                                               whole pipeline: trajectories, backend run, identification, report
    twinid sweep SCENARIO [--out DIR] [--dask ADDRESS] [--workers N]
                                               noise-sensitivity grid x Monte Carlo seeds
    twinid fit SCENARIO [--out DIR] [--log FILE] [--validation-log FILE]
                                               identify from recordings / CSV / NPZ logs made elsewhere
    twinid trajectory SCENARIO [--out DIR]     optimize and save the excitation/validation trajectories
    twinid check SCENARIO                      what a run checks before any work, printed; nothing written
    twinid report DIR                          rebuild report.md / report.html of a run or trajectory
                                               folder, summary.md / summary.html of a sweep folder
    twinid --version

A run folder is claimed before any work (exclusive lock; writable with room to spare); an
existing non-empty --out is refused unless --force. A run or sweep whose estimated time or memory
exceeds the budget (scenario/budget.py) is refused unless --yes.

Exit codes (scripts can rely on them):

    0    success
    2    bad input: malformed scenario (one line ``file:line: key.path: message``), bad log file,
         infeasible trajectory request, unusable URDF, bad command-line arguments, missing run folder
    3    runtime failure (solver failure, backend error, ...)
    4    safety refusal: the backend refused to move the arm (limits, not armed, ...) or a
         safety stop of the hardware backend (robot.safety.SafetyError and subclasses)
    130  interrupted (Ctrl-C); finished sweep runs stay on disk and are skipped on the next run
    143  SIGTERM (129 SIGHUP); during a hardware run after the defined stop sequence. Any step
         (trajectory optimization, compilation, ...) ends within a second of the signal, and
         nothing it was computing is cached (identify.common.interrupts)
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback

from identify.common import interrupts, progress
from identify.common.errors import InputError
from identify.scenario.spec import ScenarioError

EXIT_OK, EXIT_INPUT, EXIT_RUNTIME, EXIT_SAFETY, EXIT_INTERRUPTED = 0, 2, 3, 4, 130


# exceptions of other modules that mean "the request cannot be satisfied as given" (exit 2):
# an infeasible trajectory request (identify.excitation.optimizer), an unreadable log (identify.logs.load),
# a URDF that is not a serial revolute chain (identify.model.urdf).
_INPUT_ERRORS = ("ExcitationInfeasible", "LogError", "URDFError")


def _parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS,
                        help="no progress bars or status lines (errors still go to stderr)")
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the full traceback on runtime failures")
    p = argparse.ArgumentParser(
        prog="twinid", parents=[common],
        description="Dynamic parameter identification of robot arms: PyBullet twin or EtherCAT arm.",
        epilog="exit codes: 0 ok, 2 bad input/scenario, 3 runtime failure, 4 safety refusal, "
               "130 interrupted. See docs/cli.md for the scenario keys.")
    p.add_argument("--version", action="version", version=f"twinid {_version()}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    force = argparse.ArgumentParser(add_help=False)
    force.add_argument("--force", action="store_true",
                       help="reuse a non-empty --out folder: a previous run's outputs are removed")
    yes = argparse.ArgumentParser(add_help=False)
    yes.add_argument("--yes", action="store_true",
                     help="run even when the estimated time or memory exceeds the budget")

    r = sub.add_parser("run", parents=[common, force, yes],
                       help="run the whole pipeline from a scenario")
    r.add_argument("scenario", help="scenario YAML file")
    r.add_argument("--out", help="run folder (default: <outputs.dir>/<timestamp>_<name>)")

    s = sub.add_parser("sweep", parents=[common, yes], help="noise-sensitivity sweep (grid x seeds)")
    s.add_argument("scenario", help="scenario YAML file (uses its sweep section)")
    s.add_argument("--out", help="sweep folder; re-running on the same folder skips finished runs")
    s.add_argument("--dask", metavar="ADDRESS", help="run on this Dask distributed scheduler")
    s.add_argument("--workers", type=int, help="local worker processes (default: all cores)")

    f = sub.add_parser("fit", parents=[common, force],
                       help="identify from recordings or CSV/NPZ logs")
    f.add_argument("scenario", help="scenario YAML file (uses its fit section)")
    f.add_argument("--out", help="run folder")
    f.add_argument("--log", help="excitation log/recording (overrides fit.excitation.file)")
    f.add_argument("--validation-log", help="validation log (overrides fit.validation.file)")

    t = sub.add_parser("trajectory", parents=[common, force],
                       help="optimize and save trajectories (a trajectory folder with a report)")
    t.add_argument("scenario", help="scenario YAML file")
    t.add_argument("--out", help="folder for the trajectory files and plots")
    t.add_argument("--rate", type=float, metavar="HZ",
                   help="sample rate of sampled/<label>.csv / .npz (default 1000; the controller "
                        "forms keep their own rates: docs/controllers.md)")

    c = sub.add_parser("check", parents=[common],
                       help="everything a run checks before any work, printed; nothing written")
    c.add_argument("scenario", help="scenario YAML file")

    rp = sub.add_parser("report", parents=[common], help="rebuild the report of a finished run")
    rp.add_argument("dir", help="run, trajectory or sweep folder")
    return p


def _version() -> str:
    """The installed package's version (pyproject.toml), else the source tree's."""
    try:
        from importlib.metadata import PackageNotFoundError, version
        return version("twinid")
    except (ImportError, PackageNotFoundError):
        return "unknown (not installed)"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``twinid``; returns the exit code (see the module docstring)."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse: --help -> 0, usage error -> 2
        return int(exc.code or 0)
    quiet = getattr(args, "quiet", False)
    debug = getattr(args, "debug", False)
    progress.set_quiet(quiet)
    _matplotlib_config_dir()
    try:
        # SIGINT / SIGTERM / SIGHUP end the command within a second with 128 + signum, even
        # inside IPOPT or compiled code (identify.common.interrupts)
        with interrupts.handling():
            out = _dispatch(args)
        if out is not None:      # the result path(s) on stdout, also under --quiet (for scripts)
            print(out)
        return EXIT_OK
    except KeyboardInterrupt as exc:
        name = f" ({exc.args[0]})" if isinstance(exc, interrupts.Interrupted) else ""
        print(f"twinid: interrupted{name}", file=sys.stderr)
        code = interrupts.exit_code(exc)
        if interrupts.leaving():   # a real signal: exit now, the run folder is released already
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        return code
    except ScenarioError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_INPUT
    except BaseException as exc:  # noqa: BLE001 -- map every failure onto an exit code
        code = classify(exc)
        if code is None:
            raise
        label = {EXIT_INPUT: "error", EXIT_SAFETY: "refused", EXIT_RUNTIME: "failed"}[code]
        msg = " ".join(str(exc).split()) or type(exc).__name__
        print(f"twinid: {label}: {msg}", file=sys.stderr)
        if debug:
            traceback.print_exc()
        return code


def _matplotlib_config_dir() -> None:
    """With a read-only HOME, give matplotlib a temporary config folder (else it warns on its
    own, besides twinid's one cache warning)."""
    if os.environ.get("MPLCONFIGDIR"):
        return
    from identify.common.fileio import writable_problem
    if writable_problem(os.path.join(os.path.expanduser("~"), ".config", "matplotlib")):
        import tempfile
        os.environ["MPLCONFIGDIR"] = tempfile.mkdtemp(prefix="twinid-mpl-")


def classify(exc: BaseException) -> int | None:
    """Exit code for an exception (None: let it propagate, e.g. SystemExit)."""
    if isinstance(exc, (SystemExit, GeneratorExit)):
        return None
    if isinstance(getattr(exc, "signum", None), int):    # a backend stopped on SIGTERM / SIGHUP,
        return 128 + exc.signum                          # or identify.common.interrupts
    if isinstance(exc, KeyboardInterrupt):
        return EXIT_INTERRUPTED
    if isinstance(exc, (ScenarioError, InputError, FileNotFoundError)):
        return EXIT_INPUT
    names = {c.__name__ for c in type(exc).__mro__}
    if any(n in _INPUT_ERRORS for n in names):
        return EXIT_INPUT
    if getattr(exc, "safety_refusal", False) or any("Safety" in n or "Refus" in n for n in names):
        return EXIT_SAFETY
    return EXIT_RUNTIME


def rebuild_sweep_summary(folder) -> list | None:
    """``twinid report`` on a sweep folder (sweep.yaml + summary.json): summary.md and
    summary.html rebuilt by the sweep's own renderer from summary.json and the plots already
    there; their paths. None when `folder` is not a sweep folder."""
    import json
    from pathlib import Path
    folder = Path(folder)
    if not ((folder / "summary.json").is_file() and (folder / "sweep.yaml").is_file()):
        return None
    from .sweep import write_summary_docs
    try:
        summary = json.loads((folder / "summary.json").read_text())
        groups = dict.fromkeys((r["combine"], r["channel"]) for r in summary["points"])
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{folder / 'summary.json'}: not a sweep summary ({exc})") from None
    plots = [p for p in (folder / "plots" / f"sweep_{c}_{ch}.png" for c, ch in groups)
             if p.is_file()]        # in the order the sweep drew them
    write_summary_docs(folder, summary, plots)
    return [folder / "summary.md", folder / "summary.html"]


def _dispatch(args) -> str | None:
    from identify.scenario.load import load_scenario
    if args.command == "report":
        from identify.outputs.report import build_report
        if not os.path.isdir(args.dir):
            raise InputError(f"{args.dir}: no such run folder")
        paths = rebuild_sweep_summary(args.dir) or build_report(args.dir)
        return "\n".join(str(p) for p in paths)
    if args.command == "check":
        from .check import check_scenario
        text, code = check_scenario(args.scenario)
        print(text)
        if code:
            raise InputError("twinid check: a run of this scenario would be refused (above)")
        return None
    scn = load_scenario(args.scenario)
    if args.command == "run":
        from .pipeline import run_scenario
        return str(run_scenario(scn, out=args.out, force=args.force, yes=args.yes).folder)
    if args.command == "fit":
        from .pipeline import fit_scenario
        return str(fit_scenario(scn, out=args.out, log=args.log,
                                validation_log=args.validation_log, force=args.force).folder)
    if args.command == "trajectory":
        from .pipeline import trajectories_only
        if args.rate is not None and not (0 < args.rate < float("inf")):
            raise InputError(f"--rate must be a positive number of Hz, got {args.rate}")
        return str(trajectories_only(scn, out=args.out, force=args.force, rate_hz=args.rate))
    if args.command == "sweep":
        from .sweep import run_sweep
        if args.workers is not None and args.workers < 1:
            raise InputError(f"--workers must be >= 1, got {args.workers}")
        res = run_sweep(scn, out=args.out, dask_address=args.dask, workers=args.workers,
                        yes=args.yes)
        return str(res.folder)
    raise InputError(f"unknown command {args.command!r}")  # pragma: no cover -- argparse guards


if __name__ == "__main__":
    sys.exit(main())
