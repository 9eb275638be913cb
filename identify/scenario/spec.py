"""Scenario files: one YAML file describes one experiment end to end.

A scenario is loaded into frozen, typed dataclasses (:class:`Scenario` and its parts) with strict
validation *before anything runs*. Every problem -- YAML syntax, unknown key, wrong type,
out-of-range value, missing file, inconsistent combination -- raises :class:`ScenarioError`, whose
text is ONE line::

    scenarios/foo.yaml:12: trajectories.excitation.harmonics: must be >= 1, got 0

The defaults live in ONE place: the dataclass field defaults below. ``twinid run --help`` and
``docs/cli.md`` describe the keys. Relative paths in a scenario are resolved against the folder
holding the scenario file. :meth:`Scenario.resolved` returns the fully resolved scenario (all
defaults filled, absolute paths) as plain data; it loads back to an equal :class:`Scenario`.

Sections that belong to other packages are validated by delegation: ``twin:`` is checked by the
twin package's validator (``twin.config``) when ``backend: twin``; ``processing:`` by
:class:`identify.estimation.processing.ProcessingSettings`; ``hardware.options`` by the robot package's
validator when ``backend: hardware``. Those packages are imported lazily, by name.
"""
from __future__ import annotations
import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Optional, Union

from identify.backend.arm import BackendArm


class ScenarioError(ValueError):
    """A scenario problem. ``str(err)`` is one line: ``file:line: key.path: message``."""

    def __init__(self, file: str, line: int | None, path: str, message: str):
        self.file, self.line, self.path, self.message = str(file), line, path, message
        loc = f"{self.file}:{line}" if line else self.file
        key = f" {path}:" if path else ""
        super().__init__(f"{loc}:{key} {message}".replace("\n", " "))


def _f(default=dataclasses.MISSING, *, factory=dataclasses.MISSING, **meta):
    if factory is not dataclasses.MISSING:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class Payload:
    """A rigid payload on the flange (added to the last link by the twin)."""
    mass_kg: float = _f(gt=0.0, doc="payload mass [kg]")
    com_m: tuple[float, float, float] = _f((0.0, 0.0, 0.0), doc="centre of mass in the flange frame [m]")
    inertia_kgm2: tuple[float, float, float, float, float, float] = _f(
        (0.0, 0.0, 0.0, 0.0, 0.0, 0.0), doc="[Ixx, Iyy, Izz, Ixy, Ixz, Iyz] about the CoM [kg m^2]")


@dataclass(frozen=True)
class ArmSpec:
    urdf: Path = _f(file=True, doc="arm URDF (relative to the scenario file)")
    drives: Optional[Path] = _f(None, file=True, doc="drive parameter YAML (twin ground truth, gains)")
    description: Optional[Path] = _f(None, file=True,
                                     doc="arm description YAML (acceleration limits, gravity)")
    payload: Optional[Payload] = _f(None, doc="payload on the flange, or null")
    joints: Optional[tuple[str, ...]] = _f(None, min_len=1,
                                           doc="identify only these joints (others locked at 0)")

    def backend_arm(self) -> BackendArm:
        """The arm handed to identify.backend.interface.load_backend: urdf, drives, payload, and
        joints only when a subset is selected."""
        return BackendArm(urdf=Path(self.urdf), drives=None if self.drives is None else Path(self.drives),
                          payload=None if self.payload is None else
                          {k: list(v) if isinstance(v, tuple) else v
                           for k, v in dataclasses.asdict(self.payload).items()},
                          joints=None if self.joints is None else tuple(self.joints))


@dataclass(frozen=True)
class TrajectorySpec:
    """How to get one trajectory: optimize it (Fourier series, cond(W)) or load it from a file."""
    source: Literal["optimize", "file"] = _f("optimize", doc="optimize | file")
    file: Optional[Path] = _f(None, file=True, doc="trajectory file (source: file)")
    harmonics: int = _f(5, min=1, max=30, doc="Fourier harmonics per joint")
    period_s: float = _f(20.0, gt=0.0, max=3600.0, doc="period 2*pi/wf [s] (paper: 20 s)")
    periods: int = _f(1, min=1, max=100, doc="periods run back to back on the arm")
    start_deg: Optional[tuple[float, ...]] = _f(
        None, doc="start/end pose [deg], one per joint (default: the paper's upright pose; a "
                  "joint whose limits exclude it at the middle of its range)")
    limit_scale: float = _f(0.8, gt=0.0, max=1.0, doc="fraction of the arm's q/qd/qdd limits used")
    grid: int = _f(200, min=10, max=100000, doc="constraint/objective sample points per period")
    starts: int = _f(2, min=1, max=1000, doc="optimizer multi-starts")
    seed: int = _f(0, min=0, doc="optimizer / random seed")
    z_min_m: Optional[float] = _f(None, doc="table plane: every link origin stays above z [m]")
    max_iter: int = _f(300, min=1, max=100000, doc="IPOPT iterations per start")
    cache: bool = _f(True, doc="reuse a cached optimization result with the same inputs")
    objective: Literal["cond", "d_optimal", "a_optimal"] = _f(
        "cond", doc="cond | d_optimal (log det of the information: lower predicted parameter "
                    "std, faster with collision constraints) | a_optimal (sum of squared "
                    "relative std); see docs/excitation.md")
    collision_margin_m: Optional[float] = _f(
        0.02, min=0.0, max=1.0, doc="self-collision / obstacle clearance kept by the optimizer and "
                                    "checked by the backends [m] (null: no collision constraints)")
    obstacles: tuple[dict, ...] = _f(
        (), doc="obstacles to clear: {type: plane, normal: [x,y,z], point_m: [x,y,z]} | "
                "{type: box, center_m: [x,y,z], size_m: [x,y,z]} (optional name)")
    torque_limit: Literal["auto", "on", "off"] = _f(
        "auto", doc="predicted motor torque (prior model, payload, friction, rotor inertia, "
                    "reducer loss, the hardware's margins) within the drives' limits as a "
                    "constraint; auto: on for backend hardware")
    held: tuple[Union[Path, LogSpec], ...] = _f(
        (), doc="excitation only: data already recorded -- run folders of twinid run (their "
                "recordings/excitation.npz), recording .npz files, or logs ({file: ..., preset: "
                "...} as fit.excitation); the new trajectory is optimized for the combined "
                "estimate (objective d_optimal / a_optimal) and the fit stacks them with the new "
                "recording; see docs/excitation.md")


@dataclass(frozen=True)
class Trajectories:
    excitation: TrajectorySpec = _f(factory=TrajectorySpec)
    validation: TrajectorySpec = _f(factory=lambda: TrajectorySpec(seed=1, harmonics=3),
                                    doc="independent trajectory (defaults: other seed, 3 harmonics)")


@dataclass(frozen=True)
class HardwareSpec:
    """Settings for the EtherCAT arm (robot package). Only used with `backend: hardware`."""
    iface: Optional[str] = _f(None, doc="network interface of the EtherCAT bus, e.g. eth1")
    armed: bool = _f(False, doc="must be true to move the arm (safety interlock)")
    config: Optional[Path] = _f(None, file=True, doc="EtherCAT bus/drive YAML")
    dry_run: bool = _f(False, doc="bring the bus up and check everything, but do not move")
    options: dict = _f(factory=dict, doc="further robot-backend settings, passed through")

    def to_settings(self) -> dict:
        s = {"iface": self.iface, "armed": self.armed, "dry_run": self.dry_run}
        if self.config is not None:
            s["config"] = str(self.config)
        s.update(self.options)
        return s


@dataclass(frozen=True)
class IdentificationSpec:
    joint_model: Literal["auto", "simplified", "improved", "both"] = _f(
        "auto", doc="which joint model(s): auto fits what the signals allow (joint torque and "
                    "motor torque: both; motor torque only: simplified, rigid body + friction on "
                    "eta*beta*i; joint torque only: rigid body + friction on the joint torque); an "
                    "explicit choice the data cannot support is refused at load")
    estimator: Literal["ols", "wls", "ridge", "iv"] = _f(
        "wls", doc="least-squares estimator, also used by the physically consistent fit (ols: "
                   "unit weights; wls: per-joint weights 1/sigma_j; ridge: wls weights plus a "
                   "pull towards the prior with the L-curve's lambda; iv: wls weights with "
                   "instrumental variables -- the design on the commanded trajectory -- against "
                   "the encoder-noise bias of the simplified / stage-1 fit, the consistent fit "
                   "then weights like wls)")
    physical_consistency: Union[bool, Literal["auto"]] = _f(
        "auto", doc="fit physically consistent full parameters (SDP); auto: on for logs (so the "
                    "exported URDF is physical), off on the twin")
    friction_terms: tuple[Literal["viscous", "coulomb", "offset", "armature"], ...] = _f(
        ("viscous", "coulomb"), min_len=1, doc="friction columns of the rigid-body fit "
                                               "(offset / armature are added by the keys below)")
    friction: Literal["default", "auto", "terms"] = _f(
        "default", doc="auto: per joint the friction / drive-loss terms and their shape constants "
                       "chosen by blocked cross-validation on the identification data "
                       "(docs/friction-terms.md; one torque signal, joint_model simplified); "
                       "terms: friction_terms on every joint; default: auto for logs fitted "
                       "with the simplified model (twinid fit), terms otherwise")
    friction_folds: int = _f(5, min=2, max=20, doc="contiguous folds of the friction: auto "
                                                   "cross-validation")
    offset: Union[bool, Literal["auto"]] = _f(
        "auto", doc="per-joint torque offset [N*m] (sensor / current offsets); auto: on for logs, "
                    "off on the twin")
    armature: Union[bool, Literal["auto"]] = _f(
        "auto", doc="per-joint reflected rotor inertia [kg*m^2] times qdd; auto: on for logs "
                    "fitted on the motor torque, off otherwise (a joint torque sensor sits "
                    "after the gear)")
    coulomb_shape: Literal["auto", "sign", "tanh"] = _f(
        "auto", doc="Coulomb friction shape: sign(qd) or tanh(qd / coulomb_velocity_scale); auto: "
                    "tanh for logs, sign on the twin")
    coulomb_velocity_scale: float = _f(0.02, gt=0.0, max=10.0,
                                       doc="velocity scale of the tanh Coulomb shape [rad/s]")
    improved_friction_term: Literal["auto", "linear", "opposing", "both"] = _f(
        "auto", doc="reducer friction of the improved model (stage 2): linear (the paper's "
                    "a1*tau_m), opposing (always opposes motion), both, or auto (the variant with "
                    "the lowest stage-2 residual on the identification data)")
    prediction: Literal["closed_form", "eq24"] = _f(
        "closed_form", doc="improved-model motor-torque prediction route reported as headline")
    prior: Literal["auto", "urdf", "perturbed", "none"] = _f(
        "auto", doc="prior of the physically consistent fit / URDF export: urdf (the URDF's CAD "
                    "values), perturbed (the URDF's masses and inertias with seeded random CAD "
                    "errors of +-prior_error, still physical), none; auto = perturbed on the twin "
                    "(whose truth IS the URDF), urdf otherwise")
    prior_error: float = _f(0.2, min=0.0, lt=1.0,
                            doc="relative CAD error of the perturbed prior (masses and inertias)")
    prior_seed: int = _f(0, min=0, doc="seed of the perturbed prior")


@dataclass(frozen=True)
class OutputSpec:
    dir: Path = _f(Path("runs"), cwd=True,
                   doc="parent folder of run folders, relative to the working directory")
    save_recordings: bool = _f(True, doc="write recordings (NPZ) into the run folder")
    plots: bool = _f(True, doc="draw plots")
    report: bool = _f(True, doc="write report.md and report.html")
    urdf: bool = _f(True, doc="export the identified arm as URDF")


# friendly sweep names -> the channel they perturb (mapped onto twin settings in identify.app.sweep)
NOISE_ALIASES = ("position", "torque", "current")


def twin_label(entry: dict) -> str:
    """The name of one ``sweep.twin`` entry: its ``label``, else its settings as key=value joined
    by commas (keys sorted); ``scenario`` for an empty entry."""
    if entry.get("label"):
        return str(entry["label"])
    items = sorted((k, v) for k, v in entry.items() if k != "label")
    return ",".join(f"{k}={v}" for k, v in items) or "scenario"


@dataclass(frozen=True)
class SweepSpec:
    noise: dict = _f(factory=lambda: {"position": [0.0, 1e-4, 1e-3], "torque": [0.0, 0.05, 0.2],
                                      "current": [0.0, 0.01, 0.05]},
                     doc="channel (position [rad] | torque [N*m] | current [A]) -> noise std levels")
    combine: tuple[Literal["separate", "together"], ...] = _f(
        ("separate", "together"), min_len=1,
        doc="separate: one channel at a time; together: all channels at level k at once")
    twin: tuple[dict, ...] = _f(
        (), doc="twin settings to vary (laws, imperfections): a list of mappings of twin keys "
                "over the scenario's twin:, each with an optional label; every one is crossed "
                "with the noise grid (noise: {} = the scenario's own noise)")
    seeds: int = _f(5, min=1, max=100000, doc="Monte Carlo seeds per grid point")
    seed0: int = _f(0, min=0, doc="first seed")
    executor: Literal["local", "dask"] = _f("local", doc="local processes | dask distributed")
    dask_address: Optional[str] = _f(None, doc="scheduler address for executor: dask")
    workers: Optional[int] = _f(None, min=1, max=4096, doc="local worker processes (default: all cores)")


@dataclass(frozen=True)
class ColumnMap:
    """Where each signal is in a log. Entries: a column index (CSV, 0-based), a column name (CSV
    with header), an array key (NPZ; a 2-D (N, n) array, or a list of n 1-D array keys), or a
    file name next to the log (format text: one value per line, n lines per sample)."""
    time: Union[None, int, str] = _f(None, doc="time stamps column/key (text: file; none: use rate_hz)")
    q: Union[None, str, tuple[Union[int, str], ...]] = _f(
        None, doc="joint positions (n columns or one 2-D key); required unless a preset gives it")
    qd: Union[None, str, tuple[Union[int, str], ...]] = _f(None, doc="joint velocities (optional)")
    tau_j: Union[None, str, tuple[Union[int, str], ...]] = _f(None, doc="joint torque sensors")
    i_m: Union[None, str, tuple[Union[int, str], ...]] = _f(None, doc="motor currents")
    tau_m: Union[None, str, tuple[Union[int, str], ...]] = _f(None, doc="motor torques (link side)")


@dataclass(frozen=True)
class TopicMap:
    """rosbag2 logs: the topic of each signal, each a ``sensor_msgs/msg/JointState`` topic whose
    joints are matched by name. q takes the messages' ``position``, qd their ``velocity``, tau_j /
    i_m / tau_m their ``effort`` (a joint torque, a motor current, a motor torque: the channel
    says which, as for CSV columns). The q topic's stamps are the time base."""
    q: Optional[str] = _f(None, doc="topic of the joint positions (the time base)")
    qd: Optional[str] = _f(None, doc="topic of the joint velocities (optional)")
    tau_j: Optional[str] = _f(None, doc="topic whose effort is the joint torque [N*m]")
    i_m: Optional[str] = _f(None, doc="topic whose effort is the motor current [A]")
    tau_m: Optional[str] = _f(None, doc="topic whose effort is the link-side motor torque [N*m]")


@dataclass(frozen=True)
class LogSpec:
    """A recording made elsewhere: our NPZ recording, or a CSV / NPZ / text log with a column map."""
    file: Optional[Path] = _f(None, file=True, bag_dir=True,
                              doc="the log file or rosbag2 folder (or pass --log / "
                                  "--validation-log)")
    format: Literal["auto", "recording", "csv", "npz", "text", "rosbag2"] = _f(
        "auto", doc="file format (auto: by content; text: one file per signal, one value a line; "
                    "rosbag2: a bag folder or its .mcap / .db3 file)")
    preset: Optional[Literal["ur_rtde", "libfranka", "text_per_signal", "ros2_joint_states"]] = _f(
        None, doc="named column map of a logging tool (docs/cli.md); columns given override it")
    columns: Optional[ColumnMap] = _f(None, doc="column mapping (required for csv / npz logs "
                                                "without a preset)")
    topics: Optional[TopicMap] = _f(None, doc="rosbag2: topic of each signal (required "
                                              "without a preset)")
    time_source: Literal["header", "receive"] = _f(
        "header", doc="rosbag2: time from the messages' header.stamp, or (receive) the bag's "
                      "receive time -- only for publishers that leave the stamp at 0")
    topic_gap_s: Optional[float] = _f(
        None, gt=0.0, doc="rosbag2: longest gap of a second topic interpolated across onto the "
                          "q topic's stamps [s] (default: 3 of its median sample periods)")
    header: Optional[bool] = _f(None, doc="CSV: the first row holds column names (default: "
                                          "true with a preset or named columns)")
    delimiter: str = _f("auto", doc="CSV field separator (auto: from the first line)")
    time_scale: float = _f(1.0, gt=0.0, doc="multiply time stamps by this to get seconds")
    position_unit: Literal["rad", "deg"] = _f("rad", doc="unit of q (and qd per second)")
    current_gains: Optional[tuple[float, ...]] = _f(
        None, doc="per joint N*m/A at the link (eta*beta); default: from arm.drives")
    window_s: Optional[tuple[float, float]] = _f(
        None, len=2, doc="[start, stop] window in seconds from the log's first time stamp")
    window_t: Optional[tuple[float, float]] = _f(
        None, len=2, doc="[start, stop] window in the log's own time stamps (after time_scale) [s]")
    window_rows: Optional[tuple[int, int]] = _f(
        None, len=2, doc="[first, stop) window of 0-based data rows (samples)")
    rate_hz: Optional[float] = _f(None, gt=0.0, doc="resampling rate (default: median rate)")
    check_units: bool = _f(True, doc="refuse logs whose units look wrong (degrees read as "
                                     "radians, milliseconds read as seconds, absurd current gains)")


@dataclass(frozen=True)
class FitSpec:
    excitation: Optional[LogSpec] = _f(None, doc="log to identify from")
    validation: Optional[LogSpec] = _f(None, doc="second log to validate on (optional)")


@dataclass(frozen=True)
class ContactSpec:
    """A contact the twin applies during the collision run (twin.contacts)."""
    link: str = _f("link3", doc="URDF link the force acts on (link3: the forearm)")
    time_s: float = _f(4.0, min=0.0, doc="contact start on the trajectory's clock [s]")
    duration_s: float = _f(0.2, gt=0.0, doc="contact duration [s]")
    force_N: tuple[float, float, float] = _f((0.0, 20.0, 0.0), doc="force in the world frame [N]")
    point_m: Optional[tuple[float, float, float]] = _f(
        None, doc="point of action in the link frame [m] (default: the link's centre of mass)")


@dataclass(frozen=True)
class CollisionSpec:
    """Collision detection with the momentum observer (docs/closed_loop.md)."""
    enabled: bool = _f(True, doc="run the collision part")
    contact: ContactSpec = _f(factory=ContactSpec)
    signal: Literal["tau_m", "tau_j"] = _f(
        "tau_m", doc="observer input: motor torque eta*beta*i (through the drive model) or the "
                     "joint torque sensor")
    observer_gain: float = _f(50.0, gt=0.0, max=500.0, doc="observer gain K_O [1/s]")
    k_sigma: float = _f(5.0, min=0.0, doc="threshold >= k_sigma * RMS of the collision-free residual")
    peak_factor: float = _f(1.2, min=0.0, doc="threshold >= peak_factor * its largest |residual|")
    margin_Nm: float = _f(0.1, min=0.0, doc="added to the threshold [N*m]")
    stiction_speed_rad_s: float = _f(
        0.02, min=0.0, doc="width of the thresholds' friction band at velocity reversals [rad/s] "
                           "(0: static thresholds only)")
    compare_cad: bool = _f(True, doc="also run the observer with the CAD model")
    transfer: bool = _f(
        True, doc="also judge thresholds that transfer (docs/closed_loop.md): calibrated on a "
                  "collision-free run of the OTHER trajectory (excitation when the loop runs the "
                  "validation one, and the reverse) plus a hold of its start pose, judged on this "
                  "trajectory's collision-free and contact runs and on a contact at rest "
                  "(rest_contact), static and rest-aware thresholds (twin only)")
    rest_calibration_s: float = _f(
        3.0, gt=0.0, doc="length of the collision-free rest calibration: the calibration "
                         "trajectory's start pose held [s]")
    settle_s: float = _f(
        0.1, gt=0.0, doc="the arm counts as at rest once commanded still this long [s] (the "
                         "rest-aware thresholds' friction state; 0.1 s = 5 time constants at the "
                         "default observer gain)")
    free_periods: int = _f(
        1, min=1, doc="periods of the judged trajectory's collision-free run the transferred "
                      "thresholds are judged on (1: the same-trajectory part's free run; more: "
                      "a run of its own, e.g. 6 x 10 s for the >= 60 s of issue 22)")
    rest_hold_s: float = _f(
        1.0, gt=0.0, doc="length of the contact-at-rest run: the judged trajectory's start pose "
                         "held [s]")
    rest_contact: ContactSpec = _f(
        factory=lambda: ContactSpec(time_s=0.5, force_N=(20.0, 0.0, 0.0)),
        doc="the contact applied while the arm holds the judged trajectory's start pose (time_s "
            "on the hold's clock, after settle_s, ending within rest_hold_s)")


@dataclass(frozen=True)
class ClosedLoopSpec:
    """The identified model in the loop: feed-forward tracking and collision detection."""
    model: Optional[Path] = _f(None, exists=True,
                               doc="run folder whose exported model to use (null: identify first)")
    trajectory: Literal["validation", "excitation"] = _f("validation",
                                                         doc="trajectory the cases run")
    sample_rate_hz: float = _f(1000.0, gt=0.0, doc="recording rate of the closed-loop runs [Hz]")
    collision: CollisionSpec = _f(factory=CollisionSpec)


@dataclass(frozen=True)
class PayloadSpec:
    """Payload identification with the arm's parameters known (docs/closed_loop.md)."""
    arm_model: Optional[Path] = _f(
        None, exists=True, doc="run folder (identified.urdf, ...) or URDF of the arm without the "
                               "payload; null: the twin's own arm (twin only)")
    harmonics: int = _f(3, min=2, max=10, doc="Fourier harmonics of the wrist excitation")
    period_s: float = _f(10.0, gt=0.0, max=600.0, doc="duration of the wrist excitation [s]")
    wrist_joints: int = _f(3, min=1, max=6, doc="how many of the last joints move")
    start_deg: Optional[tuple[float, ...]] = _f(
        (0.0, -60.0, 60.0, 0.0, 0.0, 0.0), doc="pose held by the other joints / wrist start [deg]")
    limit_scale: float = _f(0.8, gt=0.0, max=1.0, doc="fraction of the joint limits used")
    seed: int = _f(0, min=0, doc="optimizer seed")
    signal: Literal["tau_j", "tau_m"] = _f("tau_j", doc="joint torque sensor or motor torque")
    min_speed_rad_s: float = _f(0.05, min=0.0,
                                doc="equations of a joint slower than this are left out (stiction)")
    consistent: bool = _f(True, doc="physically consistent fit (pseudo-inertia PSD)")


@dataclass(frozen=True)
class Scenario:
    """One experiment. See docs/cli.md for a tour of the keys."""
    arm: ArmSpec = _f(doc="the arm")
    name: str = _f("scenario", doc="short name used in run folder names")
    description: str = _f("", doc="free text")
    backend: Literal["twin", "hardware"] = _f("twin", doc="twin | hardware -- the one flag")
    trajectories: Trajectories = _f(factory=Trajectories)
    twin: dict = _f(factory=dict, doc="twin settings (keys: twin/config.py)")
    hardware: HardwareSpec = _f(factory=HardwareSpec)
    processing: dict = _f(factory=dict, doc="identify.estimation.processing.ProcessingSettings fields")
    identification: IdentificationSpec = _f(factory=IdentificationSpec)
    outputs: OutputSpec = _f(factory=OutputSpec)
    sweep: SweepSpec = _f(factory=SweepSpec)
    fit: FitSpec = _f(factory=FitSpec)
    closed_loop: Optional[ClosedLoopSpec] = _f(None, doc="feed-forward tracking and collision "
                                                         "detection with the identified model")
    payload: Optional[PayloadSpec] = _f(None, doc="payload identification instead of the arm's")
    source: Optional[Path] = field(default=None, compare=False, metadata={"internal": True})

    # -- conveniences ---------------------------------------------------------------------------
    def backend_settings(self) -> dict:
        """The `settings` dict for identify.backend.interface.load_backend(self.backend, ...)."""
        if self.backend == "twin":
            return dict(self.twin)
        return self.hardware.to_settings()

    def resolved(self) -> dict:
        """All keys with defaults filled and paths absolute, as plain YAML-able data."""
        return to_plain(self)


_HINTS: dict[type, dict] = {}



def field_types(cls) -> dict:
    """field name -> type of the spec dataclass `cls` (annotations resolved, cached)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def to_plain(obj):
    """A spec (dataclass, paths, tuples) as plain YAML data; fields marked internal left out."""
    if dataclasses.is_dataclass(obj):
        return {f.name: to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not f.metadata.get("internal")}
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (list, tuple)):
        return [to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def schema_table() -> str:
    """A markdown table of every scenario key with its default and description (for docs)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]

    def walk(cls, prefix, base):
        hints = field_types(cls)
        for f in dataclasses.fields(cls):
            if f.metadata.get("internal"):
                continue
            key = f"{prefix}{f.name}"
            tp = hints[f.name]
            if base is not None:
                d = getattr(base, f.name)
            elif f.default is not dataclasses.MISSING:
                d = f.default
            elif f.default_factory is not dataclasses.MISSING:
                d = f.default_factory()
            else:
                d = dataclasses.MISSING
            inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
            sub = tp if dataclasses.is_dataclass(tp) else (inner[0] if inner else None)
            if sub is not None:
                walk(sub, key + ".", d if dataclasses.is_dataclass(d) else None)
                continue
            shown = "(required)" if d is dataclasses.MISSING else \
                ('`""`' if d == "" else f"`{to_plain(d)}`")
            doc = f.metadata.get("doc", "").replace("|", "/")
            rows.append(f"| `{key}` | {shown} | {doc} |")

    walk(Scenario, "", None)
    return "\n".join(rows)
