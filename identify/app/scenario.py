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
import importlib
import math
import os
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Optional, Union

import yaml

__all__ = [
    "ScenarioError", "Scenario", "ArmSpec", "Payload", "TrajectorySpec", "Trajectories",
    "HardwareSpec", "IdentificationSpec", "OutputSpec", "SweepSpec", "LogSpec", "ColumnMap",
    "FitSpec", "load_scenario", "scenario_from_dict", "NOISE_ALIASES", "payload_problem",
]


class ScenarioError(ValueError):
    """A scenario problem. ``str(err)`` is one line: ``file:line: key.path: message``."""

    def __init__(self, file: str, line: int | None, path: str, message: str):
        self.file, self.line, self.path, self.message = str(file), line, path, message
        loc = f"{self.file}:{line}" if line else self.file
        key = f" {path}:" if path else ""
        super().__init__(f"{loc}:{key} {message}".replace("\n", " "))


# ------------------------------------------------------------------------------------------------
# Schema. Field metadata understood by the loader:
#   min / max / gt / lt : numeric bounds;  len: exact list length;  min_len: minimum list length
#   file: path must name an existing file;  doc: one-line description (used in docs/cli.md).
# ------------------------------------------------------------------------------------------------

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


def payload_problem(mass_kg, com_m, inertia_kgm2) -> tuple[str, str] | None:
    """Why a payload is physically impossible, as (key, message), or None when it is fine.

    mass_kg > 0 and finite; com_m (3,) finite [m]; inertia_kgm2 [Ixx, Iyy, Izz, Ixy, Ixz, Iyz]
    about the CoM [kg*m^2]: finite, positive definite, and its principal moments satisfy the
    triangle inequalities (I1 + I2 >= I3). All zeros is accepted: a point mass."""
    import numpy as np
    try:
        m = float(mass_kg)
        c = np.asarray(com_m, float).reshape(-1)
        v = np.asarray(inertia_kgm2, float).reshape(-1)
    except (TypeError, ValueError) as exc:
        return "", f"not numeric ({exc})"
    if not (math.isfinite(m) and m > 0):
        return "mass_kg", f"must be a finite number > 0, got {mass_kg!r}"
    if c.shape != (3,) or not np.all(np.isfinite(c)):
        return "com_m", f"must be 3 finite numbers, got {list(c)}"
    if v.shape != (6,) or not np.all(np.isfinite(v)):
        return "inertia_kgm2", f"must be 6 finite numbers [Ixx, Iyy, Izz, Ixy, Ixz, Iyz], got {list(v)}"
    if not np.any(v):
        return None
    Ixx, Iyy, Izz, Ixy, Ixz, Iyz = v
    lam = np.linalg.eigvalsh(np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]]))
    tol = 1e-12 * max(1.0, float(np.max(np.abs(lam))))
    if lam[0] <= tol:
        return "inertia_kgm2", (f"not positive definite (principal moments {np.round(lam, 12).tolist()} "
                                f"kg*m^2); a physical body needs all > 0 (all zeros = point mass)")
    if lam[0] + lam[1] < lam[2] - tol:
        return "inertia_kgm2", (f"principal moments {np.round(lam, 12).tolist()} kg*m^2 violate the "
                                f"triangle inequality I1 + I2 >= I3 (no physical body has them)")
    return None


@dataclass(frozen=True)
class ArmSpec:
    urdf: Path = _f(file=True, doc="arm URDF (relative to the scenario file)")
    drives: Optional[Path] = _f(None, file=True, doc="drive parameter YAML (twin ground truth, gains)")
    description: Optional[Path] = _f(None, file=True,
                                     doc="arm description YAML (acceleration limits, gravity)")
    payload: Optional[Payload] = _f(None, doc="payload on the flange, or null")
    joints: Optional[tuple[str, ...]] = _f(None, min_len=1,
                                           doc="identify only these joints (others locked at 0)")

    def to_backend_dict(self) -> dict:
        """The `arm` dict handed to identify.backend.interface.load_backend: urdf, drives, payload, and
        joints only when a subset is selected."""
        d = {"urdf": str(self.urdf), "drives": None if self.drives is None else str(self.drives),
             "payload": None if self.payload is None else
             {k: list(v) if isinstance(v, tuple) else v
              for k, v in dataclasses.asdict(self.payload).items()}}
        if self.joints is not None:
            d["joints"] = list(self.joints)
        return d


@dataclass(frozen=True)
class TrajectorySpec:
    """How to get one trajectory: optimize it (Fourier series, cond(W)) or load it from a file."""
    source: Literal["optimize", "file"] = _f("optimize", doc="optimize | file")
    file: Optional[Path] = _f(None, file=True, doc="trajectory file (source: file)")
    harmonics: int = _f(5, min=1, max=30, doc="Fourier harmonics per joint")
    period_s: float = _f(20.0, gt=0.0, max=3600.0, doc="period 2*pi/wf [s] (paper: 20 s)")
    periods: int = _f(1, min=1, max=100, doc="periods run back to back on the arm")
    start_deg: Optional[tuple[float, ...]] = _f(
        None, doc="start/end pose [deg], one per joint (default: paper's upright pose)")
    limit_scale: float = _f(0.8, gt=0.0, max=1.0, doc="fraction of the arm's q/qd/qdd limits used")
    grid: int = _f(200, min=10, max=100000, doc="constraint/objective sample points per period")
    starts: int = _f(2, min=1, max=1000, doc="optimizer multi-starts")
    seed: int = _f(0, min=0, doc="optimizer / random seed")
    z_min_m: Optional[float] = _f(None, doc="table plane: every link origin stays above z [m]")
    max_iter: int = _f(300, min=1, max=100000, doc="IPOPT iterations per start")
    cache: bool = _f(True, doc="reuse a cached optimization result with the same inputs")


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
    joint_model: Literal["simplified", "improved", "both"] = _f("both", doc="which joint model(s)")
    estimator: Literal["ols", "wls", "ridge"] = _f("wls", doc="least-squares estimator")
    physical_consistency: bool = _f(False, doc="also fit physically consistent full parameters")
    friction_terms: tuple[Literal["viscous", "coulomb", "offset", "armature"], ...] = _f(
        ("viscous", "coulomb"), min_len=1, doc="friction columns of the rigid-body fit")
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


@dataclass(frozen=True)
class SweepSpec:
    noise: dict = _f(factory=lambda: {"position": [0.0, 1e-4, 1e-3], "torque": [0.0, 0.05, 0.2],
                                      "current": [0.0, 0.01, 0.05]},
                     doc="channel (position [rad] | torque [N*m] | current [A]) -> noise std levels")
    combine: tuple[Literal["separate", "together"], ...] = _f(
        ("separate", "together"), min_len=1,
        doc="separate: one channel at a time; together: all channels at level k at once")
    seeds: int = _f(5, min=1, max=100000, doc="Monte Carlo seeds per grid point")
    seed0: int = _f(0, min=0, doc="first seed")
    executor: Literal["local", "dask"] = _f("local", doc="local processes | dask distributed")
    dask_address: Optional[str] = _f(None, doc="scheduler address for executor: dask")
    workers: Optional[int] = _f(None, min=1, max=4096, doc="local worker processes (default: all cores)")


@dataclass(frozen=True)
class ColumnMap:
    """Where each signal is in a log. Entries: a column index (CSV, 0-based), a column name (CSV
    with header), or an array key (NPZ; a 2-D (N, n) array, or a list of n 1-D array keys)."""
    time: Union[int, str] = _f(doc="time stamps column/key")
    q: Union[str, tuple[Union[int, str], ...]] = _f(doc="joint positions (n columns or one 2-D key)")
    qd: Union[None, str, tuple[Union[int, str], ...]] = _f(None, doc="joint velocities (optional)")
    tau_j: Union[None, str, tuple[Union[int, str], ...]] = _f(None, doc="joint torque sensors")
    i_m: Union[None, str, tuple[Union[int, str], ...]] = _f(None, doc="motor currents")
    tau_m: Union[None, str, tuple[Union[int, str], ...]] = _f(None, doc="motor torques (link side)")


@dataclass(frozen=True)
class LogSpec:
    """A recording made elsewhere: our NPZ recording, or a CSV / NPZ log with a column map."""
    file: Path = _f(file=True, doc="the log file")
    format: Literal["auto", "recording", "csv", "npz"] = _f("auto", doc="file format (auto: by content)")
    columns: Optional[ColumnMap] = _f(None, doc="column mapping (required for csv / npz logs)")
    header: bool = _f(False, doc="CSV: the first row holds column names")
    delimiter: str = _f(",", doc="CSV field separator")
    time_scale: float = _f(1.0, gt=0.0, doc="multiply time stamps by this to get seconds")
    position_unit: Literal["rad", "deg"] = _f("rad", doc="unit of q (and qd per second)")
    current_gains: Optional[tuple[float, ...]] = _f(
        None, doc="per joint N*m/A at the link (eta*beta); default: from arm.drives")
    window_s: Optional[tuple[float, float]] = _f(None, len=2, doc="[start, stop] time window [s]")
    rate_hz: Optional[float] = _f(None, gt=0.0, doc="resampling rate (default: median rate)")


@dataclass(frozen=True)
class FitSpec:
    excitation: Optional[LogSpec] = _f(None, doc="log to identify from")
    validation: Optional[LogSpec] = _f(None, doc="second log to validate on (optional)")


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
    source: Optional[Path] = field(default=None, compare=False, metadata={"internal": True})

    # -- conveniences ---------------------------------------------------------------------------
    def backend_settings(self) -> dict:
        """The `settings` dict for identify.backend.interface.load_backend(self.backend, ...)."""
        if self.backend == "twin":
            return dict(self.twin)
        return self.hardware.to_settings()

    def resolved(self) -> dict:
        """All keys with defaults filled and paths absolute, as plain YAML-able data."""
        return _to_plain(self)


# ------------------------------------------------------------------------------------------------
# Loading
# ------------------------------------------------------------------------------------------------

class _Ctx:
    """Where we are: file name, the node-line map, the base folder for relative paths."""

    def __init__(self, file: str, lines: dict[tuple, int], base: Path):
        self.file, self.lines, self.base = file, lines, base

    def line(self, path: tuple) -> int | None:
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)

    def error(self, path: tuple, message: str) -> ScenarioError:
        return ScenarioError(self.file, self.line(path), _dotted(path), message)


def _dotted(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + str(p))
    return out


def _node_lines(node, path=(), out=None, ctx_file="") -> dict[tuple, int]:
    """Map key path -> 1-based line, from a composed YAML node tree; refuse duplicate keys."""
    if out is None:
        out = {(): node.start_mark.line + 1}
    if isinstance(node, yaml.MappingNode):
        seen = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
            line = k.start_mark.line + 1
            if key in seen:
                raise ScenarioError(ctx_file, line, _dotted(path + (key,)),
                                    f"duplicate key (first defined on line {seen[key]})")
            seen[key] = line
            out[path + (key,)] = line
            _node_lines(v, path + (key,), out, ctx_file)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out[path + (i,)] = v.start_mark.line + 1
            _node_lines(v, path + (i,), out, ctx_file)
    return out


def load_scenario(path: str | os.PathLike) -> Scenario:
    """Read and validate a scenario file. Raises ScenarioError (one line) on any problem."""
    path = Path(path)
    fname = str(path)
    if not path.is_file():
        raise ScenarioError(fname, None, "", "scenario file not found")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(fname, None, "", f"cannot read the file ({exc})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        ctx_txt = ""
        if exc.context and exc.context_mark is not None and exc.problem_mark is not None \
                and exc.context_mark.line != exc.problem_mark.line:
            ctx_txt = f" ({exc.context} on line {exc.context_mark.line + 1})"
        raise ScenarioError(fname, line, "", f"YAML syntax error: {exc.problem or exc}{ctx_txt}") \
            from None
    except yaml.YAMLError as exc:
        raise ScenarioError(fname, None, "", f"YAML error: {exc}") from None
    if node is None or data is None:
        raise ScenarioError(fname, 1, "", "the scenario is empty")
    lines = _node_lines(node, ctx_file=fname)
    return scenario_from_dict(data, file=fname, base=path.resolve().parent, lines=lines)


def scenario_from_dict(data: Any, *, file: str = "<scenario>", base: str | os.PathLike | None = None,
                       lines: dict | None = None) -> Scenario:
    """Validate plain data (as from YAML) into a Scenario. `base` resolves relative paths."""
    ctx = _Ctx(file, lines or {}, Path(base).resolve() if base is not None else Path.cwd())
    if not isinstance(data, dict):
        raise ctx.error((), f"the scenario must be a mapping of keys, got {_tname(data)}")
    scn = _convert(Scenario, data, (), ctx)
    scn = dataclasses.replace(scn, source=Path(file) if file and not file.startswith("<") else None)
    _cross_checks(scn, data, ctx)
    return scn


def _tname(v) -> str:
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)


_HINTS: dict[type, dict] = {}


def _hints(cls) -> dict:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _convert(tp, value, path: tuple, ctx: _Ctx, meta: dict | None = None):
    meta = meta or {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    # Optional / Union
    if origin is Union or origin is types.UnionType:
        if value is None:
            if type(None) in args:
                return None
            raise ctx.error(path, "must not be null")
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, path, ctx, meta)
            except ScenarioError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        # prefer the error of the branch whose container type matched
        for exc, a in zip(errors, [a for a in args if a is not type(None)]):
            if (typing.get_origin(a) is tuple and isinstance(value, list)) or \
               (a in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool)):
                raise exc
        raise ctx.error(path, f"has the wrong type ({_tname(value)}); expected {_describe(tp)}")
    if value is None:
        raise ctx.error(path, f"must not be null (expected {_describe(tp)})")
    if origin is Literal:
        if value not in args or isinstance(value, bool):
            raise ctx.error(path, f"must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, path, ctx, meta.get("_base"))
    if origin is tuple:
        if not isinstance(value, list):
            raise ctx.error(path, f"must be a list, got {_tname(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            items = [_convert(args[0], v, path + (i,), ctx) for i, v in enumerate(value)]
        else:
            if len(value) != len(args):
                raise ctx.error(path, f"must be a list of {len(args)} values, got {len(value)}")
            items = [_convert(a, v, path + (i,), ctx) for i, (a, v) in enumerate(zip(args, value))]
        if "len" in meta and len(items) != meta["len"]:
            raise ctx.error(path, f"must have {meta['len']} entries, got {len(items)}")
        if "min_len" in meta and len(items) < meta["min_len"]:
            raise ctx.error(path, f"must have at least {meta['min_len']} entries, got {len(items)}")
        if len(set(map(repr, items))) != len(items) and args and typing.get_origin(args[0]) is Literal:
            raise ctx.error(path, "has repeated entries")
        return tuple(items)
    if tp is dict:
        if not isinstance(value, dict):
            raise ctx.error(path, f"must be a mapping, got {_tname(value)}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ctx.error(path, f"must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(path, f"must be an integer, got {_tname(value)} {value!r}")
        _check_range(value, path, ctx, meta)
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.error(path, f"must be a number, got {_tname(value)} {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ctx.error(path, f"must be finite, got {value!r}")
        _check_range(value, path, ctx, meta)
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ctx.error(path, f"must be a string, got {_tname(value)} {value!r}")
        return value
    if tp is Path:
        if not isinstance(value, str) or not value.strip():
            raise ctx.error(path, f"must be a path (string), got {_tname(value)} {value!r}")
        p = Path(os.path.expanduser(value))
        if not p.is_absolute():
            p = (Path.cwd() if meta.get("cwd") else ctx.base) / p
        p = Path(os.path.normpath(p))
        if meta.get("file"):
            if not p.exists():
                raise ctx.error(path, f"file not found: {value} (looked at {p})")
            if not p.is_file():
                raise ctx.error(path, f"not a file: {value} (looked at {p})")
        return p
    raise TypeError(f"scenario schema: unsupported type {tp!r} at {_dotted(path)}")


def _check_range(v, path, ctx, meta):
    if "min" in meta and v < meta["min"]:
        raise ctx.error(path, f"must be >= {meta['min']}, got {v}")
    if "max" in meta and v > meta["max"]:
        raise ctx.error(path, f"must be <= {meta['max']}, got {v}")
    if "gt" in meta and not v > meta["gt"]:
        raise ctx.error(path, f"must be > {meta['gt']}, got {v}")
    if "lt" in meta and not v < meta["lt"]:
        raise ctx.error(path, f"must be < {meta['lt']}, got {v}")


def _describe(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union or origin is types.UnionType:
        return " or ".join(_describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is tuple:
        return "a list"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string",
            Path: "a path", dict: "a mapping", type(None): "null"}.get(
        tp, "a mapping" if dataclasses.is_dataclass(tp) else str(tp))


def _convert_dataclass(cls, value, path, ctx, base=None):
    """Mapping -> dataclass `cls`. Missing keys take the value of `base` (the field's default
    instance, so nested defaults such as trajectories.validation.seed = 1 hold), else the class
    default."""
    if not isinstance(value, dict):
        raise ctx.error(path, f"must be a mapping of keys, got {_tname(value)}")
    hints = _hints(cls)
    flds = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    for k in value:
        if k not in flds:
            close = _closest(str(k), flds)
            hint = f" (did you mean '{close}'?)" if close else ""
            raise ctx.error(path + (k,), f"unknown key{hint}; allowed: {', '.join(flds)}")
    kw = {}
    for name, f in flds.items():
        if name in value:
            meta = dict(f.metadata)
            if base is not None:
                meta["_base"] = getattr(base, name)
            elif f.default_factory is not dataclasses.MISSING:
                meta["_base"] = f.default_factory()
            kw[name] = _convert(hints[name], value[name], path + (name,), ctx, meta)
        else:
            if base is not None:
                d = getattr(base, name)
            elif f.default is not dataclasses.MISSING:
                d = f.default
            elif f.default_factory is not dataclasses.MISSING:
                d = f.default_factory()
            else:
                raise ctx.error(path, f"missing required key '{name}'")
            if dataclasses.is_dataclass(d):   # fill nested defaults (resolves their paths)
                d = _convert_dataclass(type(d), {}, path + (name,), ctx, base=d)
            elif isinstance(d, Path):
                d = _convert(Path, str(d), path + (name,), ctx, dict(f.metadata))
            kw[name] = d
    return cls(**kw)


def _closest(key: str, options) -> str | None:
    import difflib
    m = difflib.get_close_matches(key, list(options), n=1, cutoff=0.6)
    return m[0] if m else None


# ------------------------------------------------------------------------------------------------
# Cross-field checks and delegation
# ------------------------------------------------------------------------------------------------

def _drive_joint_count(scn: Scenario, ctx: _Ctx) -> int | None:
    if scn.arm.drives is None:
        return None
    try:
        data = yaml.safe_load(scn.arm.drives.read_text())
        return len(data["joints"])
    except Exception as exc:
        raise ctx.error(("arm", "drives"), f"cannot read the drive file {scn.arm.drives}: {exc}")


def _check_payload(scn: Scenario, ctx: _Ctx) -> None:
    pl = scn.arm.payload
    if pl is None:
        return
    prob = payload_problem(pl.mass_kg, pl.com_m, pl.inertia_kgm2)
    if prob is not None:
        key = ("arm", "payload") + ((prob[0],) if prob[0] else ())
        raise ctx.error(key, prob[1])


def _check_arm_joints(scn: Scenario, ctx: _Ctx) -> None:
    """Every name in arm.joints is a moving joint of the URDF (error at the entry's line)."""
    if scn.arm.joints is None:
        return
    from identify.model.urdf import URDFError, load_chain
    try:
        urdf_joints = list(load_chain(scn.arm.urdf).joint_names)
    except (URDFError, OSError) as exc:
        raise ctx.error(("arm", "urdf"), str(exc)) from None
    for i, j in enumerate(scn.arm.joints):
        if j not in urdf_joints:
            raise ctx.error(("arm", "joints", i), f"unknown joint {j!r}; the URDF {scn.arm.urdf.name} "
                                                  f"has {urdf_joints}")
    if len(set(scn.arm.joints)) != len(scn.arm.joints):
        raise ctx.error(("arm", "joints"), "has repeated joints")


def _check_drive_overrides(scn: Scenario, ctx: _Ctx) -> None:
    """twin.drive_overrides against the drive file, at load (error at the override key's line)."""
    ov = scn.twin.get("drive_overrides") if isinstance(scn.twin, dict) else None
    if not ov:
        return
    base = ("twin", "drive_overrides")
    if scn.arm.drives is None:
        raise ctx.error(base, "drive overrides need arm.drives (the file they override)")
    from identify.model.drives import DriveFileError, OverrideError, check_overrides, read_drive_file
    try:
        entries = read_drive_file(scn.arm.drives)
    except (DriveFileError, OSError) as exc:
        raise ctx.error(("arm", "drives"), str(exc)) from None
    names = None
    try:
        from identify.model.urdf import load_chain
        names = list(load_chain(scn.arm.urdf).joint_names)
    except Exception:  # noqa: BLE001 -- a bad URDF is reported elsewhere
        pass
    try:
        check_overrides(ov, entries, names)
    except OverrideError as exc:
        raise ctx.error(base + exc.path, exc.message) from None


def _check_cutoff(scn: Scenario, ctx: _Ctx, rate_hz: float | None) -> None:
    """processing.butter_cutoff_hz below the Nyquist frequency of the processed signal."""
    proc = scn.processing or {}
    fc = proc.get("butter_cutoff_hz", 10.0)
    rate = proc.get("resample_hz") or rate_hz
    dec = proc.get("decimate", 1) or 1
    if fc is None or rate is None or not isinstance(fc, (int, float)) or \
            not isinstance(dec, int) or isinstance(dec, bool) or dec < 1:
        return
    nyq = 0.5 * float(rate) / dec
    if not fc < nyq:
        key = ("processing", "butter_cutoff_hz") if "butter_cutoff_hz" in proc else ("processing",)
        raise ctx.error(key, f"cutoff {fc:g} Hz must be below the Nyquist frequency {nyq:g} Hz of "
                             f"the {float(rate):g} Hz signal" + (f" decimated by {dec}" if dec > 1 else ""))


def _cross_checks(scn: Scenario, data: dict, ctx: _Ctx) -> None:
    _check_payload(scn, ctx)
    _check_arm_joints(scn, ctx)
    n = _drive_joint_count(scn, ctx)
    if scn.arm.joints is not None:
        n = len(scn.arm.joints)
    for which in ("excitation", "validation"):
        t: TrajectorySpec = getattr(scn.trajectories, which)
        p = ("trajectories", which)
        if t.source == "file" and t.file is None:
            raise ctx.error(p + ("source",), "source: file needs the key 'file'")
        if t.source == "optimize" and t.file is not None:
            raise ctx.error(p + ("file",), "a trajectory file is only read with source: file")
        if t.start_deg is not None and n is not None and len(t.start_deg) != n:
            raise ctx.error(p + ("start_deg",), f"must have one angle per joint ({n}), "
                                                f"got {len(t.start_deg)}")
    ex, va = scn.trajectories.excitation, scn.trajectories.validation
    if ex.source == va.source == "optimize" and ex == va:
        raise ctx.error(("trajectories", "validation", "seed"), "the validation trajectory would "
                        "be identical to the excitation trajectory; give it another seed")
    sw = scn.sweep
    for k, levels in sw.noise.items():
        pk = ("sweep", "noise", k)
        if k not in NOISE_ALIASES:
            raise ctx.error(pk, f"unknown noise channel; allowed: {', '.join(NOISE_ALIASES)}")
        if not isinstance(levels, list) or not levels:
            raise ctx.error(pk, "must be a non-empty list of noise levels")
        for i, v in enumerate(levels):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ctx.error(pk + (i,), f"noise level must be a finite number >= 0, got {v!r}")
    if "together" in sw.combine and len({len(v) for v in sw.noise.values()}) > 1:
        raise ctx.error(("sweep", "combine"), "combine: together needs the same number of levels "
                        "for every noise channel: " +
                        ", ".join(f"{k}={len(v)}" for k, v in sw.noise.items()))
    for which in ("excitation", "validation"):
        ls: LogSpec | None = getattr(scn.fit, which)
        if ls is None:
            continue
        p = ("fit", which)
        fmt = ls.format
        if fmt in ("csv", "npz") and ls.columns is None:
            raise ctx.error(p + ("format",), f"a {fmt} log needs a 'columns' mapping")
        if ls.columns is not None:
            c = ls.columns
            if c.tau_j is None and c.i_m is None and c.tau_m is None:
                raise ctx.error(p + ("columns",), "map at least one torque channel: "
                                "tau_j, i_m (with gains) or tau_m")
            for ch in ("q", "qd", "tau_j", "i_m", "tau_m"):
                cols = getattr(c, ch)
                if isinstance(cols, tuple) and n is not None and len(cols) != n:
                    raise ctx.error(p + ("columns", ch), f"must list one column per joint ({n}), "
                                                        f"got {len(cols)}")
                if isinstance(cols, tuple) and not ls.header and fmt != "npz" and \
                        any(isinstance(x, str) for x in cols):
                    raise ctx.error(p + ("columns", ch), "column names need header: true "
                                                        "(or use 0-based column indices)")
            if c.i_m is not None and ls.current_gains is None and scn.arm.drives is None:
                raise ctx.error(p + ("current_gains",), "motor currents need per-joint gains: "
                                "set current_gains or arm.drives")
        if ls.current_gains is not None and n is not None and len(ls.current_gains) != n:
            raise ctx.error(p + ("current_gains",), f"must have one gain per joint ({n}), "
                                                    f"got {len(ls.current_gains)}")
        if ls.window_s is not None and not ls.window_s[1] > ls.window_s[0]:
            raise ctx.error(p + ("window_s",), f"stop must be after start, got {list(ls.window_s)}")
    if scn.backend == "hardware" and not scn.hardware.iface and not scn.hardware.dry_run:
        raise ctx.error(("hardware", "iface"), "backend: hardware needs the network interface "
                                               "(hardware.iface)")
    _delegate_processing(scn, ctx)
    if scn.backend == "twin":
        _check_drive_overrides(scn, ctx)
        obj = _delegate("twin", scn.twin, ("twin",), ctx)
        rate = getattr(obj, "sample_rate_hz", None) if obj is not None else \
            scn.twin.get("sample_rate_hz")
        if scn.fit.excitation is None and scn.fit.validation is None:   # twin runs only: logs
            _check_cutoff(scn, ctx, rate)                                # have their own rate
    for ls in (scn.fit.excitation, scn.fit.validation):
        if ls is not None and ls.rate_hz is not None:
            _check_cutoff(scn, ctx, ls.rate_hz)
    else:
        _delegate("hardware", scn.hardware.to_settings(), ("hardware",), ctx,
                  required=bool(scn.hardware.options))


def _delegate_processing(scn: Scenario, ctx: _Ctx) -> None:
    if not scn.processing:
        return
    try:
        mod = importlib.import_module("identify.estimation.processing")
        cls = mod.ProcessingSettings
    except (ImportError, AttributeError):
        raise ctx.error(("processing",), "identify.estimation.processing is not available yet; "
                                         "remove the processing section") from None
    _check_keys_types(cls, scn.processing, ("processing",), ctx)
    try:
        cls(**scn.processing)
    except (TypeError, ValueError) as exc:
        raise ctx.error(_blame(("processing",), scn.processing, str(exc)), str(exc)) from None


def _blame(prefix: tuple, d: dict, msg: str) -> tuple:
    """Best guess of the key an error message is about (the longest key named in it)."""
    named = [k for k in d if str(k) in msg]
    return prefix + (max(named, key=lambda k: len(str(k))),) if named else prefix


# backend -> "module:Class.method" validating that backend's settings dict (raises ValueError or
# TypeError naming the key at fault), and the dataclass whose fields define the keys. Imported
# lazily, by name, only for the backend a scenario selects.
SETTINGS_VALIDATORS = {
    "twin": ("twin.config", "TwinSettings", "from_dict"),
    "hardware": ("robot.config", "HardwareSettings", "from_settings"),
}


def _check_keys_types(cls, d: dict, path: tuple, ctx: _Ctx) -> None:
    """Unknown keys and obvious type errors of a settings dict whose keys are `cls`'s fields
    (so the error can point at the key's line). Types follow each field's annotation/default:
    'object' fields are per-joint (a number or a list of numbers)."""
    flds = {f.name: f for f in dataclasses.fields(cls)}
    for k, v in d.items():
        if k not in flds:
            close = _closest(str(k), flds)
            hint = f" (did you mean '{close}'?)" if close else ""
            raise ctx.error(path + (k,), f"unknown key{hint}; allowed: {', '.join(flds)}")
        f = flds[k]
        ann = str(f.type)
        dflt = f.default
        if v is None:
            if "None" in ann or dflt is None or ann == "object":
                continue
            raise ctx.error(path + (k,), "must not be null")
        num = isinstance(v, (int, float)) and not isinstance(v, bool)
        if ann == "object":
            ok = num or (isinstance(v, list) and v and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))
            if not ok:
                raise ctx.error(path + (k,), f"must be a number or a list of numbers (one per "
                                              f"joint), got {_tname(v)} {v!r}")
        elif isinstance(dflt, bool) or ann.startswith("bool"):
            if not isinstance(v, bool):
                raise ctx.error(path + (k,), f"must be true or false, got {v!r}")
        elif isinstance(dflt, (int, float)) or ann.split(" ")[0] in ("int", "float"):
            if not num:
                raise ctx.error(path + (k,), f"must be a number, got {_tname(v)} {v!r}")
            if not math.isfinite(v):
                raise ctx.error(path + (k,), f"must be finite, got {v!r}")
            if ann.split(" ")[0] == "int" and not isinstance(v, int):
                raise ctx.error(path + (k,), f"must be an integer, got {v!r}")
        elif isinstance(dflt, str) or ann.split(" ")[0] == "str":
            if not isinstance(v, str):
                raise ctx.error(path + (k,), f"must be a string, got {_tname(v)} {v!r}")
        elif ann.startswith("dict") and not isinstance(v, dict):
            raise ctx.error(path + (k,), f"must be a mapping, got {_tname(v)}")


def _delegate(backend: str, settings: dict, path: tuple, ctx: _Ctx, required: bool | None = None) -> None:
    """Validate backend settings with the backend package's own validator, imported by name;
    returns the validated settings object (None when the validator is not available)."""
    module, cls_name, method = SETTINGS_VALIDATORS[backend]
    try:
        mod = importlib.import_module(module)
        cls = getattr(mod, cls_name)
    except (ImportError, AttributeError):
        if (bool(settings) if required is None else required):
            raise ctx.error(path, f"cannot check these settings: the {backend} backend's "
                                  f"{module}.{cls_name} is not available yet") from None
        return
    if dataclasses.is_dataclass(cls):
        _check_keys_types(cls, settings, path, ctx)
    try:
        return getattr(cls, method)(dict(settings))
    except (ValueError, TypeError, KeyError) as exc:
        msg = str(exc).strip("'\"")
        for prefix in ("settings: ", "settings."):
            if msg.startswith(prefix):
                msg = msg[len(prefix):]
        raise ctx.error(_blame(path, settings, msg), msg) from None


# ------------------------------------------------------------------------------------------------
# Back to plain data
# ------------------------------------------------------------------------------------------------

def _to_plain(obj):
    if dataclasses.is_dataclass(obj):
        return {f.name: _to_plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)
                if not f.metadata.get("internal")}
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, (list, tuple)):
        return [_to_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _to_plain(v) for k, v in obj.items()}
    return obj


def schema_table() -> str:
    """A markdown table of every scenario key with its default and description (for docs)."""
    rows = ["| key | default | meaning |", "|---|---|---|"]

    def walk(cls, prefix, base):
        hints = _hints(cls)
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
                ('`""`' if d == "" else f"`{_to_plain(d)}`")
            doc = f.metadata.get("doc", "").replace("|", "/")
            rows.append(f"| `{key}` | {shown} | {doc} |")

    walk(Scenario, "", None)
    return "\n".join(rows)
