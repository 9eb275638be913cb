"""The ONE reader of drive-parameter files (``assets/cobot6_drives.yaml``).

A drive file lists, per joint in joint order, the transmission and friction parameters that are
not rigid-body inertia (see the comments in ``assets/cobot6_drives.yaml``). Everything that needs
them -- the twin (:mod:`twin.config`), the pipeline's ground truth (:mod:`identify.app.pipeline`) and
the log importer's current gains (:mod:`identify.logs.load`) -- reads them here.

    from identify.model.drives import load_drives
    d = load_drives("assets/cobot6_drives.yaml", ["joint1", "joint2"],
                    overrides={"joint2": {"xi_gf": 0.3}})
    d["joint2"].xi, d.array("gear_ratio")      # per-joint dataclass, (n,) arrays

Units: SI, link side unless the key says otherwise (``J_m_kgm2`` is on the motor shaft).

Errors: :class:`DriveFileError` (a ValueError) names the file, joint and key; :class:`OverrideError`
(a ValueError) carries ``.path`` -- the key path inside the overrides mapping, e.g.
``("joint4", "xi_gf")`` -- so a scenario loader can point at the offending line.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np
import yaml
from identify.common.fileio import read_yaml

__all__ = ["DRIVE_KEYS", "JointDrive", "Drives", "DriveFileError", "OverrideError",
           "load_drives", "read_drive_file", "check_overrides"]

#: YAML key -> JointDrive field (all SI; link side unless noted).
DRIVE_KEYS = {
    "gear_ratio": "gear_ratio",                    # eta [-]
    "torque_constant_Nm_A": "torque_constant",     # beta [N*m/A], motor shaft
    "J_m_kgm2": "J_m",                             # rotor + wave generator [kg*m^2], motor shaft
    "motor_coulomb_Nm": "motor_coulomb",           # [N*m], link side
    "motor_viscous_Nms_rad": "motor_viscous",      # [N*m*s/rad], link side
    "xi_gf": "xi_gf",                              # harmonic-drive meshing loss [-]
    "xi_sf": "xi_sf",                              # harmonic-drive rolling loss [-]
    "link_coulomb_Nm": "link_coulomb",             # output bearing / seals [N*m]
    "link_viscous_Nms_rad": "link_viscous",        # [N*m*s/rad]
    "stiffness_Nm_rad": "stiffness",               # K [N*m/rad]
    "damping_Nms_rad": "damping",                  # D [N*m*s/rad]
    "rated_torque_Nm": "rated_torque",             # drive's 0x6076 [N*m]
}
_POSITIVE = ("gear_ratio", "torque_constant_Nm_A", "J_m_kgm2", "stiffness_Nm_rad", "rated_torque_Nm")
_NONNEG = ("motor_coulomb_Nm", "motor_viscous_Nms_rad", "xi_gf", "xi_sf", "link_coulomb_Nm",
           "link_viscous_Nms_rad", "damping_Nms_rad")


class DriveFileError(ValueError):
    """A drive file that cannot be used; the message names the file, joint and key."""


class OverrideError(ValueError):
    """A bad drive override. ``path``: key path inside the overrides mapping, e.g. ("joint4",
    "xi_gf"); ``message``: the problem (without location)."""

    def __init__(self, path: tuple, message: str, where: str = "drive_overrides"):
        self.path, self.message = tuple(path), message
        loc = where + "".join(f"[{p!r}]" for p in path[:1])
        key = f"key {path[1]!r}: " if len(path) > 1 and not message.startswith("unknown key") else ""
        super().__init__(f"{loc}: {key}{message}")


@dataclass(frozen=True)
class JointDrive:
    """Drive parameters of one joint (SI; link side unless noted).

    gear_ratio eta [-]; torque_constant beta [N*m/A] (motor shaft); J_m [kg*m^2] (motor shaft);
    motor_coulomb [N*m], motor_viscous [N*m*s/rad] (reflected to the link); xi_gf, xi_sf [-];
    link_coulomb [N*m], link_viscous [N*m*s/rad]; stiffness K [N*m/rad]; damping D [N*m*s/rad];
    rated_torque [N*m].
    """
    name: str
    gear_ratio: float
    torque_constant: float
    J_m: float
    motor_coulomb: float
    motor_viscous: float
    xi_gf: float
    xi_sf: float
    link_coulomb: float
    link_viscous: float
    stiffness: float
    damping: float
    rated_torque: float

    @property
    def J_r(self) -> float:
        """Reflected motor inertia eta^2 J_m [kg*m^2] (link side)."""
        return self.gear_ratio ** 2 * self.J_m

    @property
    def xi(self) -> float:
        """Total harmonic-drive loss coefficient xi_gf + xi_sf [-]."""
        return self.xi_gf + self.xi_sf

    @property
    def torque_factor(self) -> float:
        """eta * beta: link-side torque per motor ampere [N*m/A]."""
        return self.gear_ratio * self.torque_constant


@dataclass(frozen=True)
class Drives:
    """Drive parameters of the selected joints, in joint order (``source``: the file)."""
    joints: tuple
    source: str = ""

    @property
    def names(self) -> list[str]:
        return [j.name for j in self.joints]

    def __len__(self) -> int:
        return len(self.joints)

    def __getitem__(self, key):
        if isinstance(key, str):
            for j in self.joints:
                if j.name == key:
                    return j
            raise KeyError(f"{self.source}: no drive for joint {key!r} (has {self.names})")
        return self.joints[key]

    def array(self, attr: str) -> np.ndarray:
        """(n,) float array of a JointDrive field or property (e.g. "xi", "J_r")."""
        return np.array([float(getattr(j, attr)) for j in self.joints])


def read_drive_file(path) -> dict[str, dict]:
    """{joint name: raw entry} of a drive YAML (structure checked; values not yet)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"drive parameter file not found: {path}")
    try:
        doc = read_yaml(path)
    except yaml.YAMLError as exc:
        raise DriveFileError(f"{path}: not valid YAML ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("joints"), list):
        raise DriveFileError(f"{path}: expected a mapping with a 'joints' list")
    entries: dict[str, dict] = {}
    for k, e in enumerate(doc["joints"]):
        if not isinstance(e, dict) or "name" not in e:
            raise DriveFileError(f"{path}: joints[{k}] has no 'name'")
        if e["name"] in entries:
            raise DriveFileError(f"{path}: joints[{k}]: joint {e['name']!r} is listed twice")
        bad = sorted(set(e) - set(DRIVE_KEYS) - {"name"})
        if bad:
            raise DriveFileError(f"{path}: joint {e['name']!r}: unknown key(s) {bad}; "
                                 f"valid: {list(DRIVE_KEYS)}")
        entries[e["name"]] = e
    return entries


def _number(v) -> float | None:
    if isinstance(v, bool):
        return None
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def _value_problem(key: str, x: float) -> str | None:
    if key in _POSITIVE and not x > 0:
        return f"must be > 0, got {x}"
    if key in _NONNEG and not x >= 0:
        return f"must be >= 0, got {x}"
    return None


def check_overrides(overrides, entries: dict[str, dict], joint_names=None,
                    where: str = "drive_overrides") -> dict[str, dict]:
    """Validate {joint: {key: value}} against a drive file's entries (:func:`read_drive_file`).

    Checks: mapping shape, joint among `joint_names` (default: the file's joints), key among
    :data:`DRIVE_KEYS`, finite number in range, and xi_gf + xi_sf < 1 after the merge. Raises
    :class:`OverrideError` whose ``path`` names the override key at fault. Returns a clean copy
    with float values."""
    if overrides is None:
        return {}
    if not isinstance(overrides, dict):
        raise OverrideError((), "must be a mapping joint -> {key: value}", where)
    names = list(entries) if joint_names is None else list(joint_names)
    out: dict[str, dict] = {}
    for j, kv in overrides.items():
        if j not in names or j not in entries:
            raise OverrideError((j,), f"unknown joint; arm joints: {names}", where)
        if kv is None:
            kv = {}
        if not isinstance(kv, dict):
            raise OverrideError((j,), "must be a mapping {drive key: value}", where)
        clean = {}
        for k, v in kv.items():
            if k not in DRIVE_KEYS:
                raise OverrideError((j, k), f"unknown key {k!r}; valid: {list(DRIVE_KEYS)}", where)
            x = _number(v)
            if x is None:
                raise OverrideError((j, k), f"must be a finite number, got {v!r}", where)
            prob = _value_problem(k, x)
            if prob:
                raise OverrideError((j, k), prob, where)
            clean[k] = x
        merged_gf = clean.get("xi_gf", _number(entries[j].get("xi_gf")))
        merged_sf = clean.get("xi_sf", _number(entries[j].get("xi_sf")))
        if merged_gf is not None and merged_sf is not None and merged_gf + merged_sf >= 1:
            key = "xi_gf" if "xi_gf" in clean else "xi_sf"
            raise OverrideError((j, key), f"xi_gf + xi_sf = {merged_gf + merged_sf:g} must be < 1 "
                                          f"(xi_gf {merged_gf:g}, xi_sf {merged_sf:g} after the "
                                          f"override; a gear that loses all its torque)", where)
        out[j] = clean
    return out


def load_drives(path, joint_names=None, overrides: dict | None = None,
                where: str = "drive_overrides") -> Drives:
    """Drive parameters of `joint_names` (default: every joint of the file, file order).

    Args:
        path: drive YAML.
        joint_names: joints to read, matched by name, returned in this order.
        overrides: {joint: {drive key: value}} replacing the file's values (checked by
            :func:`check_overrides`; errors name `where` + the key path).
        where: how the overrides are named in error messages (e.g. "twin.drive_overrides").
    Raises:
        FileNotFoundError; DriveFileError naming file, joint and key; OverrideError naming the
        override key.
    """
    entries = read_drive_file(path)
    names = list(entries) if joint_names is None else list(joint_names)
    ov = check_overrides(overrides, entries, names, where)
    out = []
    for j in names:
        if j not in entries:
            raise DriveFileError(f"{path}: no drive entry for joint {j!r} (has {sorted(entries)})")
        e = entries[j]
        vals = {}
        for key, attr in DRIVE_KEYS.items():
            if key in ov.get(j, {}):
                vals[attr] = ov[j][key]
                continue
            if key not in e:
                raise DriveFileError(f"{path}: joint {j!r} is missing key {key!r}")
            x = _number(e[key])
            if x is None:
                raise DriveFileError(f"{path}: joint {j!r} key {key!r} is not a finite number: "
                                     f"{e[key]!r}")
            prob = _value_problem(key, x)
            if prob:
                raise DriveFileError(f"{path}: {key} {prob.split(', got')[0]} (joints [{j!r}]): "
                                     f"joint {j!r} key {key!r} is {x}")
            vals[attr] = x
        if vals["xi_gf"] + vals["xi_sf"] >= 1:
            raise DriveFileError(f"{path}: joint {j!r}: xi_gf + xi_sf = "
                                 f"{vals['xi_gf'] + vals['xi_sf']:g} must be < 1 (a gear that "
                                 f"loses all its torque)")
        out.append(JointDrive(name=j, **vals))
    return Drives(joints=tuple(out), source=str(path))


assert {f.name for f in fields(JointDrive)} == {"name", *DRIVE_KEYS.values()}
