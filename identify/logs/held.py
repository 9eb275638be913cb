"""The data already held (``trajectories.excitation.held``, :mod:`identify.scenario.held`) read
into recordings: a run folder's recorded excitation, a recording ``.npz``, or a log through the
log reader (:func:`identify.logs.load.load_log`). Every entry must be of the arm the scenario
identifies (same joint names, same order); every problem raises
:class:`~identify.common.errors.InputError` (exit 2) naming the key and the file."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from identify.backend.recording import Recording
from identify.common.errors import InputError
from identify.scenario.held import held_file, joints_problem, path_problem
from identify.scenario.spec import LogSpec, Scenario

from .load import gains_from_drives, load_log
from .readers import LogError


@dataclass
class HeldRecording:
    """One held entry, read. key: its scenario key (``trajectories.excitation.held[i]``);
    source: the path given (run folder, recording or log file); kind: run | recording | log
    (segment: a part of the fit's excitation log between two gaps, identify.app.pipeline);
    file: the file the samples came from; recording: the samples."""
    key: str
    source: str
    kind: str
    file: str
    recording: Recording


def load_held(scn: Scenario, joint_names, model=None, warnings: list | None = None
              ) -> list[HeldRecording]:
    """The recordings of ``scn.trajectories.excitation.held`` in the scenario's order, checked
    against the arm's `joint_names` (n,). `model`: the RobotModel for the log unit guards."""
    out = []
    names = list(joint_names)
    for i, entry in enumerate(scn.trajectories.excitation.held):
        key = f"trajectories.excitation.held[{i}]"
        if isinstance(entry, LogSpec):
            gains = None
            if scn.arm.drives is not None:
                try:
                    gains = gains_from_drives(scn.arm.drives, names)
                except LogError:
                    gains = None        # the log's own current_gains, or its error below
            try:
                rec = load_log(entry, names, gains=gains, where=f"{key}: {entry.file}",
                               model=model, warnings=warnings)
            except (LogError, ValueError, OSError) as exc:
                msg = str(exc)          # the reader's message may name `where` (the key) already
                raise InputError(msg if msg.startswith(f"{key}:") else f"{key}: {msg}") from None
            out.append(HeldRecording(key, str(entry.file), "log", str(entry.file), rec))
            continue
        prob = path_problem(entry)
        if prob is not None:
            raise InputError(f"{key}: {prob}")
        kind, f = held_file(Path(entry))
        try:
            rec = Recording.load(f)
        except (ValueError, OSError, KeyError) as exc:
            msg = str(exc).replace(f"{f}: ", "")
            raise InputError(f"{key}: {f} is not a twinid recording ({msg})") from None
        prob = joints_problem(str(f), rec.joint_names, names) or _arm_problem(str(f), rec, scn)
        if prob is not None:
            raise InputError(f"{key}: {prob}")
        out.append(HeldRecording(key, str(entry), kind, str(f), rec))
    return out


def missing_signals(held: list[HeldRecording], channels) -> None:
    """Refuse held data without a torque channel the fit uses (`channels`: "tau_j" / "tau_m"),
    naming the entry, its file and the channel."""
    what = {"tau_j": "joint torques (tau_j)", "tau_m": "motor torques (tau_m or currents)"}
    for h in held:
        for ch in channels:
            if getattr(h.recording, ch) is None:
                raise InputError(f"{h.key}: {h.file} has no {what.get(ch, ch)}, which the fit of "
                                 f"the new recording uses; held data need the same signals")


def _payload_of(d) -> tuple | None:
    """(mass [kg], CoM (3,) [m]) of a payload mapping, None for none."""
    if not d:
        return None
    return float(d["mass_kg"]), tuple(float(x) for x in d.get("com_m", (0.0, 0.0, 0.0)))


def _arm_problem(file: str, rec: Recording, scn: Scenario) -> str | None:
    """A recording made on another arm than the scenario's, as far as its metadata says
    (``meta["arm"]`` of a twin recording: the URDF, the payload): a URDF whose file still exists
    with other contents, or another payload (the fit would give the payload's torques to the
    arm's parameters). None when it agrees or the recording does not say."""
    arm = rec.meta.get("arm") if isinstance(rec.meta, dict) else None
    if not isinstance(arm, dict):
        return None
    urdf = arm.get("urdf")
    if urdf and Path(urdf).is_file() and Path(urdf).resolve() != Path(scn.arm.urdf).resolve():
        if Path(urdf).read_bytes() != Path(scn.arm.urdf).read_bytes():
            return (f"{file} was recorded on the arm of {urdf}, not the scenario's "
                    f"{scn.arm.urdf} (other URDF contents): held data must be of the same arm")
    want = _payload_of(scn.arm.backend_arm().payload)
    got = _payload_of(arm.get("payload")) if "payload" in arm else want
    same = (got is None) == (want is None) and (got is None or (
        abs(got[0] - want[0]) <= 1e-9 and all(abs(a - b) <= 1e-9 for a, b in zip(got[1],
                                                                                    want[1]))))
    if not same:
        show = lambda p: "none" if p is None else f"{p[0]:g} kg at {list(p[1])} m"   # noqa: E731
        return (f"{file} was recorded with payload {show(got)}, the scenario's arm.payload is "
                f"{show(want)}: the fit would give the difference to the arm's parameters")
    return None
