"""The run folder: claimed before any work (:func:`claim_run_folder`), written when the
identification is done (:func:`write_run`), finished with metrics.json and the report
(:func:`finish_run`). Its file names are :mod:`identify.outputs.layout`'s.

Documents come from :mod:`identify.outputs.render`; a failing plot is reported in
``metrics.json``'s ``messages`` and never loses a finished run."""
from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import json
import os
import platform
import re
import shutil
import time
from pathlib import Path

import numpy as np

from identify.common.errors import InputError
from identify.common.fileio import MB, writable_problem, write_json, write_yaml
from identify.excitation import export
from identify.excitation import plots as trajectory_plots
from identify.common import progress
from identify.model.joint_sidecar import write_sidecar
from identify.model.urdf_export import export_urdf
from identify.scenario.spec import Scenario
from identify.validation import plots as ident_plots

from . import layout, plotpool
from .render import control_run_document, metrics_document, model_tables, parameters_document
from .report import build_report
from .results import ControlOutcome, Identification, RunInfo, TrajectoryInfo


#: room a run folder needs besides the recordings (plots, reports, documents) [bytes]
FOLDER_BASE_BYTES = 20 * MB


def _auto_folder(scn: Scenario) -> Path:
    """Create <outputs.dir>/<timestamp>_<name>[-k] exclusively (mkdir fails if it exists, so
    two processes never get the same one)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", scn.name)
    parent = Path(scn.outputs.dir)
    prob = writable_problem(parent)
    if prob is not None:
        raise InputError(f"outputs.dir: {prob}")
    parent.mkdir(parents=True, exist_ok=True)
    for k in range(1, 1000):
        p = parent / (f"{stamp}_{safe}" + (f"-{k}" if k > 1 else ""))
        try:
            p.mkdir()
            return p
        except FileExistsError:
            continue
    raise InputError(f"{parent}: cannot create a new run folder (1000 exist for {stamp})")


def run_folder(scn: Scenario, out: str | os.PathLike | None) -> Path:
    """The run folder: `out` (created if needed), or a new <outputs.dir>/<timestamp>_<name>.
    Does not claim it: see :func:`claim_run_folder`."""
    if out is None:
        return _auto_folder(scn)
    p = Path(out)
    p.mkdir(parents=True, exist_ok=True)
    return p


def _lock_owner_alive(lock: Path) -> bool:
    """True unless the lock file names a process of this host that no longer exists."""
    try:
        rec = json.loads(lock.read_text())
        if rec.get("host") != platform.node():
            return True
        os.kill(int(rec["pid"]), 0)
    except ProcessLookupError:
        return False
    except (OSError, ValueError, KeyError, TypeError):
        return True       # unreadable / being written: assume a live owner
    return True


def _take_lock(folder: Path, command: str) -> Path:
    lock = folder / layout.LOCK
    rec = json.dumps({"pid": os.getpid(), "host": platform.node(), "command": command,
                      "started": _dt.datetime.now().isoformat(timespec="seconds")})
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if _lock_owner_alive(lock):
                try:
                    who = json.loads(lock.read_text())
                    who = f" (pid {who.get('pid')} on {who.get('host')}, {who.get('command')}, " \
                          f"started {who.get('started')})"
                except (OSError, ValueError):
                    who = ""
                raise InputError(f"{folder}: the folder is in use by another twinid command{who}; "
                                 f"wait for it or choose another --out") from None
            lock.unlink(missing_ok=True)        # its owner died: a stale lock
            continue
        except OSError as exc:
            raise InputError(f"{folder}: cannot write in the run folder "
                             f"({exc.strerror or exc})") from None
        with os.fdopen(fd, "w") as fh:
            fh.write(rec)
        return lock
    raise InputError(f"{folder}: cannot claim the folder (lock file {lock} keeps reappearing)")


@contextlib.contextmanager
def claim_run_folder(scn: Scenario, out: str | os.PathLike | None, *, force: bool = False,
                     need_bytes: int = 0, command: str = "run", inputs: dict | None = None):
    """Claim the run folder for one command, BEFORE any work; yields its path.

    * The folder is created (auto-named ones exclusively) and locked with an exclusively
      created lock file: a second command on the same folder is refused (exit 2) while the
      first runs. A lock left by a process that died on this host is taken over.
    * An existing `out` holding anything is refused unless `force` (then every output a twinid
      command writes -- :data:`identify.outputs.layout.OUTPUT_NAMES` -- is removed first, so nothing of the previous
      run, e.g. its plots, can mix with the new one; other files are left alone). Refused
      (exit 2, naming it) when that would remove an input of the command -- any file of the
      scenario (identify.scenario.checks.input_paths) or of `inputs` ({"--log": path}) lies in
      those outputs, is the folder or holds it -- or recordings made on the arm.
    * It must be writable with `need_bytes` + :data:`FOLDER_BASE_BYTES` free.
    On an exception the lock is released, and a folder this call created is removed if empty.
    """
    _refuse_bad_link(out)
    created = out is None or not Path(out).exists()
    if out is not None:
        prob = writable_problem(Path(out), 0)
        if prob is not None:
            raise InputError(f"--out {out}: {prob}")
    folder = run_folder(scn, out)
    if not folder.is_dir():
        raise InputError(f"--out {out}: not a folder")
    lock = _take_lock(folder, command)
    try:
        held = sorted(p.name for p in folder.iterdir() if p.name != layout.LOCK)
        if held:
            _refuse_replacing_inputs(scn, folder, inputs)
        if held and not force:
            shown = ", ".join(held[:6]) + (", ..." if len(held) > 6 else "")
            raise InputError(f"--out {folder}: the folder is not empty ({shown}); pass --force to "
                             f"replace a previous run's outputs, or choose a new folder")
        if held:
            for name in layout.OUTPUT_NAMES:
                p = folder / name
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                elif p.exists() or p.is_symlink():
                    p.unlink()
        prob = writable_problem(folder, need_bytes + FOLDER_BASE_BYTES)
        if prob is not None:
            raise InputError(f"run folder: {prob}")
    except BaseException:
        lock.unlink(missing_ok=True)
        if created:
            _remove_if_empty(folder)
        raise
    try:
        yield folder
    except BaseException:
        if created:
            lock.unlink(missing_ok=True)
            _remove_if_empty(folder)
        raise
    finally:
        lock.unlink(missing_ok=True)


def _refuse_bad_link(out) -> None:
    """--out (or a folder above it) that is a symlink loop or a dangling symlink: InputError
    naming it (mkdir said only "File exists")."""
    if out is None:
        return
    for p in (Path(out), *Path(out).parents):
        if p.is_symlink():
            try:
                os.stat(p)
            except OSError as exc:
                kind = "a symlink loop" if exc.errno == errno.ELOOP else \
                    f"a symlink to {os.readlink(p)}, which does not exist"
                raise InputError(f"--out {out}: {p} is {kind}; choose another --out") from None


def _refuse_replacing_inputs(scn: Scenario, folder: Path, inputs: dict | None) -> None:
    """--force would remove `folder`'s outputs (layout.OUTPUT_NAMES): refuse (InputError naming the
    key and path) when an input of the command is among them, is the folder or holds it, and
    when the folder holds recordings made on the arm (a hardware run's chunk folders
    recordings/run*, the lab's only copy: never removed by --force)."""
    from identify.scenario.checks import input_paths
    root = folder.resolve()
    doomed = [root / n for n in layout.OUTPUT_NAMES]
    for key, p in [*input_paths(scn), *(inputs or {}).items()]:
        p = None if p is None else Path(p).resolve()
        if p is None or not (p == root or p in root.parents
                             or any(p == d or d in p.parents for d in doomed)):
            continue
        where = ("is the run folder" if p == root else "holds the run folder" if p in
                 root.parents else "is in the run folder")
        raise InputError(f"{key}: {p} {where} --out {folder}, whose outputs --force would "
                         f"replace; --force never removes an input of the command: choose "
                         f"another --out")
    arm = sorted(str(d.relative_to(root)) for d in (root / layout.RECORDINGS).rglob("run*")
                 if d.is_dir())
    if arm:
        raise InputError(f"--out {folder}: {arm[0]} holds samples recorded on the "
                         f"arm (hardware run), which --force never removes; move "
                         f"{root / layout.RECORDINGS} elsewhere or choose another --out")


def _remove_if_empty(folder: Path) -> None:
    try:
        folder.rmdir()
    except OSError:
        pass


def plot_limits(model, info: TrajectoryInfo) -> dict:
    """Limits drawn on trajectory plots: those the optimizer used, else the arm's."""
    lu = info.limits_used or {}
    lim = model.limits
    out = {k: np.asarray(getattr(lim, k), float) for k in ("q_min", "q_max", "qd_max", "qdd_max")}
    for k in out:
        if isinstance(lu.get(k), (list, tuple, np.ndarray)):
            out[k] = np.array([np.inf if v is None else v for v in lu[k]], float)
    return out


def _plot_jobs(ident: Identification) -> list:
    """(file stem, function, args, kwargs) of the identification plots."""
    jobs = []
    vres = ident.validation.result
    for label in vres.rms:
        jobs.append((f"torque_{label}", ident_plots.plot_torque_comparison, (vres, label),
                     {"title": f"{ident.signal_name}, {label} trajectory",
                      "signal": ident.signal_name}))
        if label == "validation" or len(vres.rms) == 1:
            jobs.append((f"residual_{label}", ident_plots.plot_residuals, (vres, label),
                         {"signal": ident.signal_name}))
    if "validation" in vres.decomposition and "improved" in vres.decomposition["validation"]:
        jobs.append(("torque_decomposition_validation", ident_plots.plot_decomposition,
                     (vres, "validation", "improved"), {}))
    im, sm = ident.improved, ident.simplified
    if im is not None:
        jobs.append(("param_stage1", ident_plots.plot_parameters, (im.names1_, im.params_, im.std_),
                     {"truth": ident.truth_base,
                      "title": "stage 1 (torque sensor): base parameters, +-3 sigma"}))
        tr = ident.truth.truth
        s2_truth = tr.stage2 if tr is not None and tr.applicable.get("stage2") else None
        jobs.append(("param_stage2", ident_plots.plot_stage2, (im.stage2_,), {"truth": s2_truth}))
    elif sm is not None:
        jobs.append(("param_simplified", ident_plots.plot_parameters,
                     (sm.names_, sm.params_, sm.std_),
                     {"title": "simplified model parameters, +-3 sigma"}))
    return jobs


def write_sampled(folder: Path, model, trajs: dict | None, messages: list | None = None, *,
                  rate_hz: float = export.DEFAULT_RATE_HZ) -> dict:
    """Each trajectory of `trajs` (label -> (trajectory, info)) sampled for the arm's own
    controller into <folder>/sampled/ (identify.excitation.export; layout.sampled), the arm's
    limits (model.limits) re-checked at each form's rate. Returns label -> form -> file name
    relative to `folder`. A form that fails (a limit, a full disk) is named in `messages` when
    given (a finished run is never lost for it), else raised."""
    out: dict = {}
    for label, (tr, info) in (trajs or {}).items():
        periods = int(getattr(info, "periods", 1) or 1)
        if periods > 1 and hasattr(tr, "with_periods"):   # as the backend runs it
            tr = tr.with_periods(periods)
        try:
            files = export.export_trajectory(tr, layout.sampled(folder, label), model.limits,
                                             model.joint_names, rate_hz=rate_hz, name=label)
        except (ValueError, OSError) as exc:
            if messages is None:
                raise
            messages.append(f"sampled {label} trajectory not written: {exc}")
            continue
        out[label] = {k: (v if k == "skipped" else os.path.relpath(v, folder))
                      for k, v in files.items()}
    return out


#: stem of the sampled-trajectory job (identify.outputs.plotpool)
SAMPLED_JOB = "sampled"


def _sampled_job(folder: Path, model, trajs: dict, _path=None) -> tuple[list, float]:
    """:func:`write_sampled` as an output job: (its messages, seconds taken)."""
    t0 = time.perf_counter()
    messages: list = []
    write_sampled(folder, model, trajs, messages)
    return messages, round(time.perf_counter() - t0, 4)


def sampled_job(folder: Path, model, trajs: dict) -> tuple:
    """The job writing the trajectories' sampled forms (identify.outputs.plotpool): known
    once the design is done, so a run writes them while the arm runs."""
    return (SAMPLED_JOB, _sampled_job, (folder, model, trajs), {}, None)


def trajectory_plot_jobs(folder: Path, model, trajs: dict | None) -> list:
    """Plot jobs ``(stem, function, args, kwargs, path)`` of the trajectories (label ->
    (trajectory, TrajectoryInfo)) into folder/plots: known once the design is done, so a run
    draws them while the arm runs (identify.outputs.plotpool)."""
    pdir = folder / layout.PLOTS
    names = list(model.joint_names)
    jobs = [(f"trajectory_{label}", trajectory_plots.plot_trajectory,
             (tr, plot_limits(model, info)),
             {"title": f"{label} trajectory", "joint_names": names})
            for label, (tr, info) in (trajs or {}).items()]
    jobs += [(f"trajectory_{label}_clearance", trajectory_plots.plot_clearance, (info.clearance,),
              {"title": f"{label} trajectory: minimum link-pair / obstacle distance"})
             for label, (tr, info) in (trajs or {}).items() if getattr(info, "clearance", None)]
    return [(stem, fn, args, kw, pdir / f"{stem}.png") for stem, fn, args, kw in jobs]


def plot_jobs(folder: Path, ident: Identification, trajs: dict | None) -> list:
    """Every plot job of the run into folder/plots, the costliest first (plotpool.draw hands
    them to its drawers in this order): the parameter tables (text on every row), residuals,
    torques, then the trajectories."""
    rank = {"param": 0, "residual": 1, "torque": 2}
    pdir = folder / layout.PLOTS
    jobs = sorted(_plot_jobs(ident), key=lambda j: rank.get(j[0].split("_")[0], 2))
    return ([(stem, fn, args, kw, pdir / f"{stem}.png") for stem, fn, args, kw in jobs]
            + trajectory_plot_jobs(folder, ident.model, trajs))


def write_plots(folder: Path, ident: Identification, trajs: dict | None, messages: list,
                pool=None) -> list[str]:
    """Trajectory plots and identification plots into folder/plots, drawn by the run's plot
    workers `pool` (identify.outputs.plotpool; None: in this process; the jobs it was sent
    before are waited for, not drawn again); returns the files
    written (relative to `folder`), the list the report embeds. A plot that fails is named in
    `messages` (a plot never loses a finished run)."""
    pdir = folder / layout.PLOTS
    pdir.mkdir(exist_ok=True)
    for stem, err in plotpool.draw(pool, plot_jobs(folder, ident, trajs)):
        what = stem.replace("trajectory_", "trajectory plot (", 1) + ")" \
            if stem.startswith("trajectory_") else f"plot {stem}"
        messages.append(f"{what} failed: {err}")
    return sorted(f"{layout.PLOTS}/{p.name}" for p in pdir.glob("*.png"))


def write_run(folder: Path, scn: Scenario, ident: Identification, run: RunInfo, *,
              trajs: dict | None, recs: dict | None, scenario_doc: dict, plots=None) -> dict:
    """Write every document of a finished identification but metrics.json (that one is
    rendered once, by :func:`finish_run`, when everything the run does is known): the resolved
    scenario `scenario_doc`, trajectories, recordings, parameters, the exported model, plots
    (drawn by the plot workers `plots`, identify.outputs.plotpool, when given). Returns the
    model tables for the metrics document."""
    folder = Path(folder)
    out = scn.outputs
    run.messages = list(ident.warnings) + list(run.messages)
    write_yaml(folder / layout.SCENARIO, scenario_doc)
    if trajs:
        for label, (tr, _info) in trajs.items():
            tr.save(layout.trajectory(folder, label))
        if plots is None or SAMPLED_JOB not in plots.sent:     # else written meanwhile
            msgs, run.timings["sampled"] = _sampled_job(folder, ident.model, trajs)
            run.messages += msgs
    if recs and out.save_recordings:
        for label, rec in recs.items():
            rec.save(layout.recording(folder, label))
    models = model_tables(ident)
    write_yaml(folder / layout.PARAMETERS, parameters_document(ident))
    run.files["urdf"] = None
    ex = ident.export
    if out.urdf and ex is not None and ex.inertial is not None:
        try:
            run.files["urdf"] = export_urdf(
                ident.model, folder / layout.URDF, ex.inertial, viscous=ex.viscous,
                coulomb=ex.coulomb, comment=f"identified by twinid ({scn.name}): {ex.source}",
                name=f"{ident.model.name}_identified").name
            if ex.joint_terms is not None:
                run.files["joint_terms"] = write_sidecar(
                    folder / layout.SIDECAR, ex.joint_terms, urdf=layout.URDF).name
        except ValueError as exc:
            ex.reason = ex.reason or str(exc)
    if out.urdf and run.files.get("urdf") is None:
        why = ex.reason if ex is not None and ex.reason else "no model was fitted"
        run.messages.append(f"no {layout.URDF} written: {why}")
        progress.message(f"no {layout.URDF} written: {why}")
    run.files["plots"] = []     # the report embeds exactly these (never a previous run's)
    if out.plots:
        t0 = time.perf_counter()
        run.files["plots"] = write_plots(folder, ident, trajs, run.messages, plots)
        run.timings["plots"] = round(time.perf_counter() - t0, 4)
    if trajs and plots is not None and SAMPLED_JOB in plots.sent:
        plots.finish()       # (the plots waited for it already; without plots: here)
        done = plots.results.get(SAMPLED_JOB)
        if done is None:     # it failed in the worker: again here, where errors are named
            done = _sampled_job(folder, ident.model, trajs)
        run.messages += done[0]
        run.timings["sampled"] = done[1]
    return models


def finish_run(folder: Path, scn: Scenario, run: RunInfo, t0: float, *,
               ident: Identification | None = None, models: dict | None = None,
               control: ControlOutcome | None = None, joint_names=None) -> dict:
    """The run's last step: the total time, metrics.json rendered once from the run's results
    (an identification `ident` with its `models` tables, and/or the `control` sections; without
    `ident` a control-only run of the arm's `joint_names`), then the report (built from the
    folder's files). Returns the metrics document."""
    run.timings["total"] = round(time.perf_counter() - t0, 4)
    metrics = (metrics_document(run, ident, models, control) if ident is not None
               else control_run_document(run, joint_names, control))
    write_json(folder / layout.METRICS, metrics)
    if scn.outputs.report:
        build_report(folder)
    return metrics
