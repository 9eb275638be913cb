"""The inputs of a command, resolved before any work: the arm's RobotModel, what a backend needs
beyond a loadable scenario, the time / memory budget, the logs of ``twinid fit`` with the
command line's overrides and the processing defaults for logs, the scenario as resolved for the
run folder, and the run's facts (:class:`~identify.outputs.results.RunInfo`)."""
from __future__ import annotations

import dataclasses
import datetime as _dt
import platform
from pathlib import Path

import numpy as np

from identify.backend.interface import resolved_settings
from identify.common import progress
from identify.common.errors import InputError
from identify.common.fileio import log_input_problem
from identify.model.arm import load_description
from identify.model.robot_model import RobotModel
from identify.outputs.results import RunInfo
from identify.scenario.spec import LogSpec, Scenario, ScenarioError

__all__ = ["build_model", "require_backend_files", "check_budget", "run_info", "log_specs",
           "log_processing", "rate_defaults", "resolve_cutoff", "resolved_scenario"]


def build_model(scn: Scenario) -> RobotModel:
    """RobotModel of the scenario's arm (acceleration limits and gravity from arm.description)."""
    joints = list(scn.arm.joints) if scn.arm.joints else None
    qdd_max, gravity = None, (0.0, 0.0, -9.81)
    if scn.arm.description is not None:
        desc = load_description(scn.arm.description)
        gravity = tuple(np.asarray(desc.gravity, float))
        by_name = dict(zip(desc.joint_names, np.asarray(desc.qdd_max, float)))
        model0 = RobotModel.from_urdf(scn.arm.urdf, joints)
        qdd_max = np.array([by_name.get(j, np.inf) for j in model0.joint_names])
    return RobotModel.from_urdf(scn.arm.urdf, joints, qdd_max=qdd_max, gravity=gravity)


def require_backend_files(scn: Scenario) -> None:
    """What a backend needs beyond a loadable scenario: the twin simulates the drives of
    arm.drives (without it, exit 2 here instead of a TypeError deep in the twin)."""
    if scn.backend == "twin" and scn.arm.drives is None:
        raise ScenarioError(str(scn.source or "<scenario>"), None, "arm.drives",
                            "backend: twin needs arm.drives, the drive parameters the twin "
                            "simulates (e.g. assets/cobot6_drives.yaml)")


def check_budget(est, yes: bool, what: str = "this run") -> None:
    """Print the estimate; refuse (InputError, exit 2) beyond the budget unless `yes`."""
    from identify.scenario.budget import over_budget
    progress.message(f"estimate: {what} takes {est.describe()}")
    why = over_budget(est)
    if why is None:
        return
    if not yes:
        raise InputError(f"{what} would take {est.describe()}: {why}. Check the scenario "
                         f"(period_s, periods, sample_rate_hz, sweep.seeds, ...) or pass --yes "
                         f"to run it anyway")
    progress.warn(f"{what} takes {est.describe()} ({why}); running it because of --yes")


def run_info(scn: Scenario, command: str, timings: dict, backend: str | None = None) -> RunInfo:
    """The run's facts at its start: name, backend (`backend` overrides the scenario's: "logs"
    for a fit), command, time stamp, host; `timings` is filled by the steps."""
    return RunInfo(name=scn.name, description=scn.description, backend=backend or scn.backend,
                   command=command, created=_dt.datetime.now().isoformat(timespec="seconds"),
                   host=platform.node(), timings=timings)


def log_specs(scn: Scenario, log=None, validation_log=None) -> dict:
    """label -> LogSpec of the fit section, with the command line's --log / --validation-log.

    A validation log without its own ``fit.validation`` section takes the excitation log's
    format, preset, columns, units and gains -- never its window (a window is a property of one
    file); ``fit.validation`` (possibly without ``file``) gives it its own."""
    specs = {"excitation": scn.fit.excitation, "validation": scn.fit.validation}
    for label, override in (("excitation", log), ("validation", validation_log)):
        if override is not None:
            p = Path(override)
            prob = log_input_problem(p)
            if prob == "not found":
                raise FileNotFoundError(f"{override}: log file not found")
            if prob is not None:
                raise InputError(f"{override}: the log {prob}")
            base = specs[label]
            if base is None and label == "validation" and specs["excitation"] is not None:
                base = dataclasses.replace(specs["excitation"], window_s=None, window_t=None,
                                           window_rows=None)
            specs[label] = dataclasses.replace(base or LogSpec(file=p), file=p.resolve())
    if specs["excitation"] is None or specs["excitation"].file is None:
        raise ScenarioError(str(scn.source or "<scenario>"), None, "fit.excitation",
                            "twinid fit needs a log: set fit.excitation.file or pass --log FILE")
    if specs["validation"] is not None and specs["validation"].file is None:
        raise ScenarioError(str(scn.source or "<scenario>"), None, "fit.validation.file",
                            "fit.validation has no file: set it or pass --validation-log FILE")
    return {k: v for k, v in specs.items() if v is not None}


def log_processing(scn: Scenario, recs: dict) -> Scenario:
    """Processing defaults for logs, unless the scenario says:

    * ``velocity``: the log's own qd when every log maps one ("log"), else differences of q
      ("differentiate");
    * ``decimate``: above 20 x butter_cutoff_hz, keep every k-th sample after the low-pass,
      k = floor(rate / (5 x butter_cutoff_hz)) -- a 1 kHz log low-passed at 10 Hz is fitted at 50 Hz (the filtered
      signals carry nothing above the cut-off: the 4th-order Butterworth is down 64 dB at the
      25 Hz Nyquist frequency), and twenty times fewer rows make an hour-long log fit in
      memory and time;
    * ``smooth_passes``: 0 when rate >= 50 x butter_cutoff_hz -- there the paper's 5-point
      smoothing x20 has a gain >= 0.9996 below the cut-off (it was designed for 100 Hz data)
      and would only cost time."""
    from identify.estimation.processing import ProcessingSettings
    proc = dict(scn.processing or {})
    if "velocity" not in proc:
        proc["velocity"] = "log" if all(r.qd is not None for r in recs.values()) \
            else "differentiate"
    if proc.get("butter_cutoff_hz", ProcessingSettings.butter_cutoff_hz) == "auto":
        return dataclasses.replace(scn, processing=proc)     # after the choice: rate_defaults
    rate = min(float(r.rate_hz) for r in recs.values())
    return dataclasses.replace(scn, processing=rate_defaults(proc, rate))


def rate_defaults(proc: dict, rate: float) -> dict:
    """`proc` with the rate-dependent defaults of :func:`log_processing` (``decimate``,
    ``smooth_passes``) filled for its numeric cutoff at `rate` [Hz] (a copy; keys given are
    kept). ``butter_cutoff_hz: auto`` resolves its cutoff first and then calls this."""
    from identify.estimation.processing import ProcessingSettings
    proc = dict(proc)
    fc = proc.get("butter_cutoff_hz", ProcessingSettings.butter_cutoff_hz)
    if "decimate" not in proc and fc and "resample_hz" not in proc and rate > 20.0 * fc:
        proc["decimate"] = max(1, int(rate // (5.0 * float(fc))))
    if "smooth_passes" not in proc and fc and "resample_hz" not in proc and rate >= 50.0 * fc:
        proc["smooth_passes"] = 0
    return proc


def resolve_cutoff(scn: Scenario, model, recs: dict, base, signal: str,
                   timings: dict | None = None, from_logs: bool = False) -> tuple[Scenario, object]:
    """``processing.butter_cutoff_hz: auto``: the scenario with the cutoff chosen by blocked
    cross-validation on the EXCITATION recording only
    (:func:`identify.estimation.bandwidth.select_cutoff`: each candidate's fixed-term fit scored
    against the raw torque of held-out contiguous segments), and the
    :class:`~identify.estimation.bandwidth.CutoffSelection` (None and `scn` unchanged for a
    numeric cutoff). With auto the smoothing defaults to none (``smooth_passes: 0``; the data
    choose the bandwidth -- the paper's smoothing x20 would cap it at ~12 Hz at 100 Hz); an
    explicit ``smooth_passes`` is kept for every candidate. Scored channel: the joint torque when
    the improved model is fitted or it is the only signal (stage 1), else the motor torque.
    `from_logs`: the logs' rate-dependent defaults (:func:`rate_defaults`) follow the choice."""
    from identify.estimation.bandwidth import select_cutoff
    from identify.estimation.design import design_from
    from identify.estimation.processing import ProcessingSettings
    proc = dict(scn.processing or {})
    if proc.get("butter_cutoff_hz") != "auto":
        return scn, None
    proc.setdefault("smooth_passes", 0)
    ps = ProcessingSettings.from_dict(proc)
    rec = recs["excitation"]
    ident = scn.identification
    channel = "tau_j" if rec.tau_j is not None and (
        signal == "tau_j" or ident.joint_model in ("improved", "both")) else "tau_m"
    terms = tuple(ident.friction_terms)
    eps = float(ident.coulomb_velocity_scale) if ident.coulomb_shape == "tanh" else 0.0
    with progress.step("processing bandwidth (butter_cutoff_hz: auto)", timings):
        sel = select_cutoff(rec, ps, lambda d: design_from(model, base, d, terms=terms,
                                                           coulomb_eps=eps)[0],
                            signal=channel, joint_names=list(model.joint_names))
    progress.message(f"butter_cutoff_hz: auto -> {sel.chosen_hz:.3g} Hz ({sel.why})")
    proc["butter_cutoff_hz"] = float(sel.chosen_hz)
    if from_logs:
        proc = rate_defaults(proc, min(float(r.rate_hz) for r in recs.values()))
    return dataclasses.replace(scn, processing=proc), sel


def resolved_scenario(scn: Scenario, ident=None) -> dict:
    """The scenario as resolved, with the backend's full settings (defaults filled) when known.
    With `ident`: the identification settings actually used (``auto`` keys resolved); a fit
    from logs keeps only the sections that apply (no twin, trajectories, sweep, hardware)."""
    d = scn.resolved()
    if ident is not None and ident.spec is not None:
        d["identification"] = dataclasses.replace(scn, identification=ident.spec).resolved()[
            "identification"]
    if ident is not None and ident.from_logs:
        for key in ("twin", "trajectories", "sweep", "hardware", "backend"):
            d.pop(key, None)
        return d
    if scn.backend == "twin":
        ts = resolved_settings("twin", dict(scn.twin))
        if ts is not None:      # else keep what the user wrote
            d["twin"] = ts
    return d
