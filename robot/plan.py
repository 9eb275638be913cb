"""The cycle-by-cycle command of a hardware run: approach -> dwell -> trajectory x periods -> dwell.

Everything the drives will be commanded is computed (and checked, :mod:`robot.safety`) before the
bus is touched; the cyclic loop only indexes into these arrays.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class RunPlan:
    """Commands at the cycle rate, joint order, SI.

    q, qd, qdd: (M, n) [rad, rad/s, rad/s^2]; t: (M,) [s] from the first command;
    traj_start, traj_stop: cycle indices [start, stop) of the trajectory part (the recording the
    backend returns covers these cycles, with t re-based to 0 at traj_start).
    """
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    traj_start: int
    traj_stop: int
    dt: float

    @property
    def n_cycles(self) -> int:
        return self.t.shape[0]


def quintic(q0: np.ndarray, q1: np.ndarray, duration: float, dt: float):
    """Minimum-jerk move q0 -> q1 (rest to rest) sampled every dt, first sample at t=dt,
    last exactly at q1. Returns q, qd, qdd each (K, n) with K = ceil(duration/dt)."""
    k = max(int(np.ceil(duration / dt - 1e-9)), 1)
    T = k * dt
    s = (np.arange(1, k + 1) * dt / T)[:, None]
    d = (np.asarray(q1, float) - np.asarray(q0, float))[None, :]
    pos = 10 * s**3 - 15 * s**4 + 6 * s**5
    vel = (30 * s**2 - 60 * s**3 + 30 * s**4) / T
    acc = (60 * s - 180 * s**2 + 120 * s**3) / T**2
    return q0 + d * pos, d * vel, d * acc


def approach_duration(q0, q1, qd_max, qdd_max, min_duration: float = 0.5) -> float:
    """Shortest minimum-jerk duration keeping peak speed (15/8 |dq|/T) and peak acceleration
    (10/sqrt(3) |dq|/T^2) within qd_max/qdd_max [rad/s, rad/s^2] on every joint."""
    dq = np.abs(np.asarray(q1, float) - np.asarray(q0, float))
    t_v = np.max(1.875 * dq / qd_max)
    with np.errstate(divide="ignore"):
        t_a = np.max(np.sqrt(10 / np.sqrt(3) * dq / qdd_max))
    return float(max(min_duration, t_v, t_a))


def build_plan(trajectory, periods: int, dt: float, q_now: np.ndarray, qd_max: np.ndarray,
               qdd_max: np.ndarray, dwell: float = 0.5) -> RunPlan:
    """Approach from the measured pose `q_now` to the trajectory's start (minimum jerk within
    qd_max/qdd_max), dwell, `periods` repetitions of the trajectory sampled every `dt`, dwell."""
    if periods < 1:
        raise ValueError(f"periods must be >= 1, got {periods}")
    q_now = np.asarray(q_now, float)
    n = q_now.shape[0]
    t0 = np.zeros(1)
    qs, _, _ = trajectory.evaluate(t0)
    q_start = np.asarray(qs, float).reshape(1, -1)[0]
    if q_start.shape[0] != n:
        raise ValueError(f"trajectory has {q_start.shape[0]} joints, the arm has {n}")
    T = approach_duration(q_now, q_start, qd_max, qdd_max)
    aq, aqd, aqdd = quintic(q_now, q_start, T, dt)
    nd = int(round(dwell / dt))
    hold = np.repeat(q_start[None, :], nd, axis=0)
    z = np.zeros_like(hold)
    m = int(round(trajectory.duration / dt))
    tt = (np.arange(m * periods) % m) * dt
    tq, tqd, tqdd = (np.asarray(a, float).reshape(m * periods, n) for a in trajectory.evaluate(tt))
    q = np.concatenate([aq, hold, tq, hold])
    qd = np.concatenate([aqd, z, tqd, z])
    qdd = np.concatenate([aqdd, z, tqdd, z])
    start = aq.shape[0] + nd
    return RunPlan(t=np.arange(q.shape[0]) * dt, q=q, qd=qd, qdd=qdd, traj_start=start,
                   traj_stop=start + m * periods, dt=dt)
