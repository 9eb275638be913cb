"""Where the emulated drives' motion comes from: the PyBullet twin, behind a small interface.

:class:`Motion` is what the slave chain needs: ``reset(q0)`` and ``step(q_cmd, tau_ff)`` advancing
one 1 ms control period and returning a :class:`MotionState` (SI, link side, arrays of n joints).

* :class:`TwinMotion` wraps :class:`twin.TwinSim` (the digital twin: rigid body, drives, friction,
  compliance, sensors). This is the default.
* :class:`FollowerMotion` is a first-order position follower with zero torques and currents --
  a test double for protocol tests that must not pay for a physics engine; it says nothing
  about dynamics and is selected only by ``{"motion": "follower"}``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np


@dataclass
class MotionState:
    """One control period's joint state. Shapes (n,); t [s], q [rad], qd [rad/s], tau_r
    (joint torque sensor) [N*m], tau_m (motor torque reflected to the link) [N*m], i_m [A] are
    the truth; q_meas, tau_r_meas, i_m_meas what the sensors report (None -> the truth)."""
    t: float
    q: np.ndarray
    qd: np.ndarray
    tau_r: np.ndarray
    tau_m: np.ndarray
    i_m: np.ndarray
    q_meas: np.ndarray | None = None
    tau_r_meas: np.ndarray | None = None
    i_m_meas: np.ndarray | None = None

    def measured(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(q, tau_r, i_m) as the sensors report them."""
        return (self.q if self.q_meas is None else self.q_meas,
                self.tau_r if self.tau_r_meas is None else self.tau_r_meas,
                self.i_m if self.i_m_meas is None else self.i_m_meas)


class Motion(Protocol):
    n: int
    joint_names: list[str]
    dt: float

    def reset(self, q0: np.ndarray) -> MotionState: ...

    def step(self, q_cmd: np.ndarray, tau_ff: np.ndarray) -> MotionState: ...

    def set_torque_limit(self, tau_max: np.ndarray) -> None: ...


class FollowerMotion:
    """q follows q_cmd through a first-order lag of time constant `tau_s`; torques are zero."""

    def __init__(self, joint_names: list[str], dt: float = 1e-3, tau_s: float = 0.01):
        self.joint_names = list(joint_names)
        self.n = len(self.joint_names)
        self.dt = dt
        self.alpha = 1.0 - math.exp(-dt / tau_s)
        self.t = 0.0
        self.q = np.zeros(self.n)
        self.qd = np.zeros(self.n)

    def _state(self) -> MotionState:
        z = np.zeros(self.n)
        return MotionState(self.t, self.q.copy(), self.qd.copy(), z, z.copy(), z.copy())

    def reset(self, q0) -> MotionState:
        self.t = 0.0
        self.q = np.asarray(q0, float).copy()
        self.qd = np.zeros(self.n)
        return self._state()

    def step(self, q_cmd, tau_ff) -> MotionState:
        dq = self.alpha * (np.asarray(q_cmd, float) - self.q)
        self.q = self.q + dq
        self.qd = dq / self.dt
        self.t += self.dt
        return self._state()

    def set_torque_limit(self, tau_max) -> None:
        """No torques here, so nothing to clip."""


class TwinMotion:
    """The PyBullet twin (``twin.TwinSim``) as a :class:`Motion`, with the twin's sensor model.

    `settings` are :class:`twin.config.TwinSettings` keys, passed through unchanged. Sensor
    imperfections use the parameters of :class:`twin.sensors.SensorModel` (same settings keys,
    same formulas), drawn per 1 ms step from streams seeded by ``settings["seed"]``; the twin's
    ``io_delay_s`` is not applied on the bus."""

    def __init__(self, urdf: str, drives: str, settings: dict | None = None):
        from twin import TwinConfig, TwinSim   # imported here: the emulator process owns PyBullet
        from twin.sensors import SensorModel
        self.cfg = TwinConfig.from_files(urdf, drives, settings=dict(settings or {}))
        self.sim = TwinSim(self.cfg)
        self.n = int(self.cfg.n)
        names = getattr(self.cfg, "joint_names", None) or getattr(self.sim, "joint_names", None)
        self.joint_names = list(names) if names is not None else [f"joint{k + 1}" for k in range(self.n)]
        self.dt = float(getattr(self.sim, "dt", 1e-3))
        self.sensors = SensorModel(self.cfg.settings, self.joint_names)
        self._rngs = [np.random.default_rng(s) for s in np.random.SeedSequence(self.sensors.seed).spawn(3)]

    def _measure(self, q, tau_r, i_m, t):
        s = self.sensors
        if not s.enabled:
            return q, tau_r, i_m
        enc, tq, cur = self._rngs
        qm = q + enc.standard_normal(self.n) * s.enc_sigma
        if s.enc_step is not None:
            qm = np.round(qm / s.enc_step) * s.enc_step
        taum = tau_r + s.tq_offset + s.tq_drift * t + tq.standard_normal(self.n) * s.tq_sigma
        im = i_m * (1.0 + s.i_scale) + s.i_bias + cur.standard_normal(self.n) * s.i_sigma
        if s.i_step is not None:
            im = np.round(im / s.i_step) * s.i_step
        return qm, taum, im

    def _convert(self, st) -> MotionState:
        q, qd = np.asarray(st.q, float), np.asarray(st.qd, float)
        tau_r, tau_m, i_m = (np.asarray(st.tau_r, float), np.asarray(st.tau_m, float), np.asarray(st.i_m, float))
        qm, taum, im = self._measure(q, tau_r, i_m, float(st.t))
        return MotionState(float(st.t), q, qd, tau_r, tau_m, i_m, qm, taum, im)

    def reset(self, q0) -> MotionState:
        st = self.sim.reset(np.asarray(q0, float))
        if st is None:
            st = self.sim.step(np.asarray(q0, float))
        return self._convert(st)

    def step(self, q_cmd, tau_ff) -> MotionState:
        return self._convert(self.sim.step(np.asarray(q_cmd, float), tau_ff=np.asarray(tau_ff, float)))

    def set_torque_limit(self, tau_max) -> None:
        """The drives' max torque (0x6072, link side (n,) [N*m]): the twin's motor torque is
        clipped there from the next period on."""
        self.sim.set_torque_limit(tau_max)

    def close(self) -> None:
        close = getattr(self.sim, "close", None)
        if close:
            close()


def make_motion(joint_names: list[str], urdf: str | None, drives: str | None,
                settings: dict | None, dt: float) -> Motion:
    """Pick the motion source: ``settings["motion"]`` is "twin" (default; needs `urdf` and
    `drives`) or "follower". Remaining settings go to the twin."""
    settings = dict(settings or {})
    kind = settings.pop("motion", "twin")
    settings.pop("q0", None)
    if kind == "follower":
        return FollowerMotion(joint_names, dt, float(settings.pop("follower_tau_s", 0.01)))
    if kind != "twin":
        raise ValueError(f"twin_settings['motion']={kind!r}: expected 'twin' or 'follower'")
    if not urdf or not drives:
        raise ValueError("the twin motion needs both urdf= and drives= (or twin_settings={'motion': 'follower'})")
    m = TwinMotion(urdf, drives, settings)
    missing = [j for j in joint_names if j not in m.joint_names]
    if missing:
        raise ValueError(f"EtherCAT config drives name joints {missing} that the URDF {urdf} does not have "
                         f"(it has {m.joint_names})")
    return m
