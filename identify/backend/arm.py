"""The arm a backend runs: :class:`BackendArm`, the typed hand-off from the application (the
scenario's ``arm:`` section) to ``load_backend`` / a backend's ``make_backend``.

A backend takes a BackendArm or a plain mapping with the same keys (a user's script, a test);
:meth:`BackendArm.of` converts and checks either, so every backend sees the same typed fields and
an unknown key is refused with its name."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

__all__ = ["BackendArm"]


def _path(v) -> Path | None:
    return None if v is None else Path(v)


@dataclass(frozen=True)
class BackendArm:
    """The arm's files and the facts a backend needs beyond them.

    urdf: the arm's URDF (None: the backend's reference arm, where it has one).
    drives: the drive parameter file (rotor inertia, friction, reducer loss, limits), or None.
    description: the arm description YAML (acceleration limits, gravity), or None.
    payload: the payload on the flange, {"mass_kg": float, "com_m": [3] (m, flange frame),
        "inertia_kgm2": [6] (optional)}, or None.
    joints: the joints identified (a subset of the URDF's moving joints; the others are held at
        0), or None for all.
    qdd_max: (n,) acceleration limits [rad/s^2] of `joints` (or of every joint), or None.
    name: a label for messages, or None."""
    urdf: Path | None = None
    drives: Path | None = None
    description: Path | None = None
    payload: dict | None = None
    joints: tuple[str, ...] | None = None
    qdd_max: tuple[float, ...] | None = None
    name: str | None = None

    @classmethod
    def of(cls, arm: "BackendArm | Mapping | None", where: str = "arm") -> "BackendArm":
        """`arm` as a BackendArm (a mapping's keys checked: an unknown key is a ValueError
        naming it)."""
        if isinstance(arm, BackendArm):
            return arm
        if arm is None:
            return cls()
        if not isinstance(arm, Mapping):
            raise ValueError(f"{where}: must be a BackendArm or a mapping of "
                             f"{[f.name for f in dataclasses.fields(cls)]}, got {arm!r}")
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted(set(arm) - known)
        if bad:
            raise ValueError(f"{where}: unknown arm key(s) {bad}; keys: {sorted(known)}")
        joints, qdd = arm.get("joints"), arm.get("qdd_max")
        return cls(urdf=_path(arm.get("urdf")), drives=_path(arm.get("drives")),
                   description=_path(arm.get("description")),
                   payload=None if arm.get("payload") is None else dict(arm["payload"]),
                   joints=None if joints is None else tuple(str(j) for j in joints),
                   qdd_max=None if qdd is None else tuple(float(x) for x in qdd),
                   name=arm.get("name"))

    def with_(self, **changes) -> "BackendArm":
        """A copy with `changes` (e.g. ``joints=...``)."""
        return dataclasses.replace(self, **changes)
