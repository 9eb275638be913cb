"""The defined stop with bounded deceleration: ramp the position command to rest, settle, then
disable the drives in order (:class:`robot.safety.StopSequence`).

Every way a run ends (fault of one drive, bus fault, limit breach, signal, parent death, recorder
failure, the plan's end) goes through :class:`SafeStop`:

1. **ramp** -- the position command of every still-enabled joint starts from the velocity (and
   acceleration) of the command stream the drives were following and is brought to rest with a
   deceleration of at most ``acc_max`` [rad/s^2] per joint (and, with ``jerk_max``, a rate of change
   of the acceleration of at most ``jerk_max`` [rad/s^3]); joints whose drive is not enabled (it
   faulted, or left OPERATION ENABLED) are not commanded: their command follows the measured
   position;
2. **settle** -- the command holds still until the measured velocity of every enabled joint is
   below ``standstill_rad_s`` (at most ``settle_cycles`` cycles);
3. **hold and disable** -- :class:`robot.safety.StopSequence` (hold ``hold_cycles`` with policy
   ``hold``, none with ``disable``; then per drive, distal first: disable operation (brake),
   shutdown). The drives are disabled only at standstill of the command.

Bounded: :attr:`SafeStop.max_cycles` cycles whatever the drives report.
"""
from __future__ import annotations

import numpy as np

from .drive import cia402
from .safety import StopSequence


def ramp_bound_cycles(v0_max: np.ndarray, acc_max: np.ndarray, jerk_max: float | None,
                      dt: float) -> int:
    """Most cycles the ramp may take from a command velocity of at most `v0_max` (n,) [rad/s]
    with deceleration `acc_max` (n,) [rad/s^2] (and jerk `jerk_max` [rad/s^3], the acceleration
    starting at up to `acc_max` the wrong way), cycle time `dt` [s]."""
    t = np.asarray(v0_max, float) / np.asarray(acc_max, float)
    if jerk_max:
        t = t + 3.0 * np.asarray(acc_max, float) / float(jerk_max)
    return int(np.ceil(float(np.max(t)) / dt)) + 3


class StopRamp:
    """Per-cycle decelerating command, vectorized over joints (arrays (n,), SI).

    Args:
        p0: the last position command sent [rad]; v0: its velocity [rad/s] (difference of the last
            two commands / dt); a0: its acceleration [rad/s^2] (used with a jerk limit only).
        acc_max: (n,) deceleration limit [rad/s^2] (finite, > 0); jerk_max: [rad/s^3] or None.
        dt: cycle time [s].
    """

    def __init__(self, p0, v0, a0, acc_max, jerk_max: float | None, dt: float):
        self.p = np.array(p0, float)
        self.v = np.array(v0, float)
        self.a = np.array(a0, float) if jerk_max else np.zeros_like(self.p)
        self.acc = np.broadcast_to(np.asarray(acc_max, float), self.p.shape).copy()
        if not np.all(np.isfinite(self.acc) & (self.acc > 0)):
            raise ValueError(f"stop ramp: acceleration limits must be finite and > 0, got {self.acc}")
        self.jerk = float(jerk_max) if jerk_max else None
        self.dt = float(dt)

    def resync(self, q: np.ndarray, qd: np.ndarray | None) -> None:
        """Restart from the measured state (after lost frames: the drive did not receive the
        commands sent meanwhile and is where it measures, not where the ramp is): position `q`
        [rad], velocity `qd` [rad/s] (None: at rest), acceleration 0."""
        self.p = np.array(q, float)
        self.v = np.zeros_like(self.p) if qd is None else np.array(qd, float)
        self.a = np.zeros_like(self.p)

    @property
    def at_rest(self) -> bool:
        return bool(np.all(self.v == 0.0))

    def step(self, active: np.ndarray, q_meas: np.ndarray) -> np.ndarray:
        """Next command (n,) [rad]; `active` (n,) bool: the drive is enabled and follows the
        command; inactive joints are set to `q_meas` and to rest."""
        dt, v = self.dt, self.v
        if self.jerk is None:
            dv = np.clip(v, -self.acc * dt, self.acc * dt)          # |v| down by at most acc dt
            v_new = v - dv
        else:
            # deceleration from which a jerk-limited ramp-out ends exactly at v = 0: v = d^2 / 2J
            d = np.minimum(self.acc, np.sqrt(2.0 * self.jerk * np.abs(v)))
            a_goal = -np.sign(v) * d
            self.a = np.clip(self.a + np.clip(a_goal - self.a, -self.jerk * dt, self.jerk * dt),
                             -self.acc, self.acc)
            v_new = v + self.a * dt
            crossed = (np.sign(v_new) != np.sign(v)) | (np.abs(v_new) < self.jerk * dt * dt)
            v_new = np.where(crossed & (np.abs(v) <= self.acc * dt), 0.0, v_new)
            self.a = np.where(v_new == 0.0, 0.0, self.a)
        self.p = self.p + v_new * dt
        self.v = v_new
        off = ~np.asarray(active, bool)
        if off.any():
            self.p[off] = np.asarray(q_meas, float)[off]
            self.v[off] = 0.0
            self.a[off] = 0.0
        return self.p.copy()


class SafeStop:
    """Ramp -> settle -> :class:`robot.safety.StopSequence` (see module docstring). One
    :meth:`step` per cycle; ``done``, ``confirmed`` (the statuswords reported every drive
    powerless), ``k`` (cycles so far), ``ramp_cycles`` and ``standstill`` (the measured velocity
    was below the threshold before the drives were disabled) for the run's summary."""

    def __init__(self, n: int, p0, v0, a0, acc_max, dt: float, *, jerk_max: float | None,
                 hold_cycles: int, confirm_cycles: int, policy: str, brake_cycles: int,
                 standstill_rad_s: float, settle_cycles: int, v0_bound=None):
        self.ramp = StopRamp(p0, v0, a0, acc_max, jerk_max, dt)
        vb = np.abs(self.ramp.v) if v0_bound is None else np.asarray(v0_bound, float)
        self.ramp_max = ramp_bound_cycles(np.maximum(vb, np.abs(self.ramp.v)), self.ramp.acc,
                                          jerk_max, dt)
        self.settle_max = int(settle_cycles)
        self.standstill_rad_s = float(standstill_rad_s)
        self.seq = StopSequence(n, p0, hold_cycles, confirm_cycles, policy, brake_cycles=brake_cycles)
        self.k = 0
        self.ramp_cycles = None          # cycles until the command was at rest
        self.settle_k = 0
        self.standstill = False
        self.policy = policy
        self._q_prev = None

    @property
    def max_cycles(self) -> int:
        return self.ramp_max + self.settle_max + self.seq.max_cycles

    @property
    def done(self) -> bool:
        return self.seq.done or self.k >= self.max_cycles

    @property
    def confirmed(self) -> bool:
        return self.seq.confirmed

    def resync(self, q, qd) -> np.ndarray:
        """After lost frames: restart the ramp from the measured state (StopRamp.resync) while
        it runs, or hold the measured pose once it is over; returns the new command [rad]."""
        if self.ramp_cycles is None:
            self.ramp.resync(q, qd)
            return self.ramp.p.copy()
        if not self.disabling:
            self.seq.hold_q = np.array(q, float)
        return self.seq.hold_q.copy()

    @property
    def disabling(self) -> bool:
        """The drives are being disabled (the ramp and settling are over)."""
        return self.seq.k > 0

    def step(self, statusword, active, q_meas, qd_meas) -> tuple[np.ndarray, np.ndarray]:
        """Next (controlword (n,) int, position command (n,) rad). `statusword`: this cycle's
        (None when the frame was not valid); `active`: drives enabled; q_meas/qd_meas measured."""
        self.k += 1
        if self.ramp_cycles is None:
            target = self.ramp.step(active, q_meas)
            if self.ramp.at_rest or self.k >= self.ramp_max:
                self.ramp_cycles = self.k
                self.seq.hold_q = target.copy()
            self._q_prev = np.asarray(q_meas, float).copy()
            return np.full(self.seq.n, cia402.CW_ENABLE_OPERATION, np.int64), target
        if not self.standstill and self.settle_k < self.settle_max:
            act = np.asarray(active, bool)
            q = np.asarray(q_meas, float)
            qd = (q - self._q_prev) / self.ramp.dt if qd_meas is None else np.asarray(qd_meas, float)
            self._q_prev = q.copy()
            if np.all(np.abs(qd[act]) < self.standstill_rad_s):
                self.standstill = True
            else:
                self.settle_k += 1
                return (np.full(self.seq.n, cia402.CW_ENABLE_OPERATION, np.int64),
                        self.seq.hold_q.copy())
        return self.seq.step(statusword)
