"""Shared helpers of the twin tests (no tests here): a smooth rest-to-rest trajectory, arm paths."""
from __future__ import annotations

from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
URDF = str(ROOT / "assets" / "cobot6.urdf")
DRIVES = str(ROOT / "assets" / "cobot6_drives.yaml")
ARM = {"urdf": URDF, "drives": DRIVES}
Q0 = np.radians([0.0, -90.0, 30.0, -90.0, 20.0, 0.0])


class CosineTrajectory:
    """q = q0 + A (1 - cos(2 pi f t)) / 2 per joint: starts at rest at q0, periodic (1/f)."""

    def __init__(self, q0, amp, freq, duration):
        self.q0 = np.asarray(q0, float)
        self.amp = np.asarray(amp, float)
        self.w = 2 * np.pi * np.asarray(freq, float)
        self.duration = float(duration)

    @property
    def n_joints(self) -> int:
        return self.q0.size

    def evaluate(self, t):
        t = np.asarray(t, float)[:, None]
        c, s = np.cos(self.w * t), np.sin(self.w * t)
        return (self.q0 + self.amp * (1 - c) / 2, self.amp * self.w * s / 2,
                self.amp * self.w ** 2 * c / 2)


def excitation(duration=4.0, scale=1.0):
    """A multi-joint test motion inside the reference arm's limits."""
    return CosineTrajectory(Q0, scale * np.radians([60, 40, 40, 60, 60, 80]),
                            [0.5, 0.25, 0.5, 0.75, 0.5, 0.75], duration)
