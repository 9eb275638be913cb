"""An external contact a backend applies to the arm: :class:`Contact`, the typed hand-off from the
collision-detection runs (identify.control) to the twin, whose ``contacts`` setting takes
:meth:`Contact.as_setting` (settings stay plain data: a scenario's ``twin.contacts`` is YAML)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Contact:
    """A constant force on one link over a time window.

    link: the URDF link the force acts on; time_s: its start [s] on the trajectory's clock;
    duration_s: how long it acts [s]; force_N: (3,) the force in the WORLD frame [N];
    point_m: (3,) where it acts in the link's URDF frame [m], or None for the link's centre of
    mass."""
    link: str
    time_s: float
    duration_s: float
    force_N: tuple[float, float, float]
    point_m: tuple[float, float, float] | None = None

    @property
    def end_s(self) -> float:
        """The end of the contact window [s]."""
        return self.time_s + self.duration_s

    def as_setting(self) -> dict:
        """The entry of a backend's ``contacts`` setting: {link, time_s, duration_s, force_N
        [, point_m]}."""
        d = {"link": self.link, "time_s": float(self.time_s), "duration_s": float(self.duration_s),
             "force_N": [float(x) for x in self.force_N]}
        if self.point_m is not None:
            d["point_m"] = [float(x) for x in self.point_m]
        return d
