"""The small interface every backend (the PyBullet twin, the EtherCAT arm) implements.

The pipeline only ever talks to a :class:`Backend`: give it a trajectory, get a
:class:`~identify.backend.recording.Recording` back. Backends live in the `twin` and `robot` packages;
`identify` never imports them -- the scenario layer looks them up by name through
:func:`load_backend`.
"""
from __future__ import annotations

import dataclasses
import importlib
from typing import Protocol, runtime_checkable

import numpy as np

from .recording import Recording


@runtime_checkable
class Trajectory(Protocol):
    """A joint trajectory a backend can execute.

    Attributes:
        duration: length of one run [s].
        n_joints: number of joints n.
    """

    duration: float

    @property
    def n_joints(self) -> int: ...

    def evaluate(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Position [rad], velocity [rad/s], acceleration [rad/s^2] at times t (N,) -> 3 x (N, n)."""
        ...


@runtime_checkable
class Backend(Protocol):
    """Runs trajectories on an arm (simulated or physical)."""

    name: str

    def run(self, trajectory: Trajectory, *, periods: int = 1, progress: bool = False) -> Recording:
        """Execute `trajectory` `periods` times back to back (starting and ending at rest at
        its start pose) and return the sampled recording. Must check the trajectory against the
        arm's limits before moving anything, and raise ValueError naming joint and sample if
        it does not fit."""
        ...

    def close(self) -> None:
        """Release the simulator / bus."""
        ...


# backend name -> "module:factory". The factory takes (arm_config: dict, settings: dict).
BACKENDS = {
    "twin": "twin.backend:make_backend",
    "hardware": "robot.backend:make_backend",
}


# backend name -> ("module", "Class", "method") validating that backend's settings dict (raises
# ValueError or TypeError naming the key at fault); the class is a dataclass whose fields define
# the keys. With BACKENDS, the only place that names a backend's modules (tests/test_architecture.py
# counts these strings as import arrows).
SETTINGS = {
    "twin": ("twin.config", "TwinSettings", "from_dict"),
    "hardware": ("robot.config", "HardwareSettings", "from_settings"),
}


def settings_class(name: str):
    """The settings dataclass of backend `name` and the name of its validating constructor,
    imported lazily by name; ImportError / AttributeError when the backend is not installed."""
    module, cls_name, method = SETTINGS[name]
    return getattr(importlib.import_module(module), cls_name), method


def resolved_settings(name: str, settings: dict) -> dict | None:
    """Backend `name`'s settings with every default filled (its own validator), as a plain
    dict; None when the backend is not installed or refuses them."""
    try:
        cls, method = settings_class(name)
        obj = getattr(cls, method)(dict(settings))
    except Exception:  # noqa: BLE001 -- not installed, or settings it refuses
        return None
    return obj.to_dict() if hasattr(obj, "to_dict") else dataclasses.asdict(obj)


def load_backend(name: str, arm: dict, settings: dict) -> Backend:
    """Instantiate the backend registered under `name` (imported lazily, by name only)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    module, attr = BACKENDS[name].split(":")
    factory = getattr(importlib.import_module(module), attr)
    return factory(arm, settings)


def preflight(name: str, arm: dict, settings: dict) -> bool:
    """Early checks of backend `name` before any expensive work (e.g. trajectory optimization):
    imports the backend module lazily, by name, and calls its ``preflight(arm, settings)`` if it
    defines one (the hardware backend refuses there when not armed and not a dry run, raising its
    ``SafetyRefused``, a ValueError). Returns True when a preflight ran, False when the backend
    has none."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend {name!r}; choose one of {sorted(BACKENDS)}")
    module, _attr = BACKENDS[name].split(":")
    fn = getattr(importlib.import_module(module), "preflight", None)
    if fn is None:
        return False
    fn(arm, settings)
    return True
