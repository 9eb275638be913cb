"""Sensor imperfections of the twin: link encoder, joint torque sensor, motor current.

:class:`SensorModel` turns true signals sampled at the recording rate into measurements. All
randomness comes from one seed (independent streams per sensor), so the same seed and inputs give
bit-identical outputs. Settings keys are those of :class:`twin.config.TwinSettings`:

    encoder  q_meas   = quantize(q + N(0, encoder_noise_rad^2), 2 pi / 2**encoder_resolution_bits)
    torque   tau_meas = tau_r + torque_offset_Nm + torque_drift_Nm_s * t + N(0, torque_noise_Nm^2)
    current  i_meas   = quantize(i (1 + current_scale_error) + current_bias_A + N(0, current_noise_A^2),
                                 current_quantization_A),  i = tau_m / (eta beta)

    drive velocity (Recording.qd, the drive's motor-side velocity reflected to the link)
             qd_meas  = qd_m + N(0, velocity_noise_rad_s^2)            (sample_velocity)

With ``noise = False`` every measurement equals the truth. The I/O delay is applied by the backend
(it samples the truth io_delay_s earlier).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from .config import TwinSettings


class SensorModel:
    """Measurement model of the three sensors.

    Args:
        settings: :class:`TwinSettings` or a dict of its keys.
        joint_names: joint order (n,).
        seed: seed of the noise streams (None -> settings.seed).
    """

    def __init__(self, settings, joint_names, seed: int | None = None):
        if not isinstance(settings, TwinSettings):
            settings = TwinSettings.from_dict(settings)
        self.settings = s = settings
        self.joint_names = list(joint_names)
        n = len(self.joint_names)
        self.seed = int(s.seed if seed is None else seed)
        self.enabled = bool(s.noise)
        self.enc_sigma = s.per_joint("encoder_noise_rad", n)
        bits = s.encoder_resolution_bits
        self.enc_step = None if bits is None else 2.0 * math.pi / 2.0 ** int(bits)
        self.tq_sigma = s.per_joint("torque_noise_Nm", n)
        self.tq_offset = s.per_joint("torque_offset_Nm", n)
        self.tq_drift = s.per_joint("torque_drift_Nm_s", n)
        self.i_sigma = s.per_joint("current_noise_A", n)
        self.i_scale = s.per_joint("current_scale_error", n)
        self.i_bias = s.per_joint("current_bias_A", n)
        qa = s.current_quantization_A
        self.i_step = None if not qa else float(qa)
        self.vel_sigma = s.per_joint("velocity_noise_rad_s", n)

    def sample(self, states, t=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Measurements for true states.

        Args:
            states: mapping with (N, n) arrays ``q`` [rad], ``tau_r`` [N*m], ``i_m`` [A] (and ``t``
                (N,) [s] unless given), or a sequence of :class:`twin.sim.TwinState`.
            t: (N,) sample times [s] (for the torque drift); default states["t"].
        Returns:
            q (N, n) [rad], tau_j (N, n) [N*m], i_m (N, n) [A].
        """
        if isinstance(states, Mapping):
            q = np.asarray(states["q"], float)
            tau_r = np.asarray(states["tau_r"], float)
            i_m = np.asarray(states["i_m"], float)
            if t is None:
                t = states["t"]
        elif isinstance(states, Sequence):
            q = np.array([s.q for s in states], float)
            tau_r = np.array([s.tau_r for s in states], float)
            i_m = np.array([s.i_m for s in states], float)
            if t is None:
                t = np.array([s.t for s in states], float)
        else:
            raise TypeError("SensorModel.sample: states must be a mapping of arrays or a list of TwinState")
        t = np.asarray(t, float).reshape(-1)
        n = len(self.joint_names)
        for name, a in (("q", q), ("tau_r", tau_r), ("i_m", i_m)):
            if a.ndim != 2 or a.shape[1] != n or a.shape[0] != t.size:
                raise ValueError(f"SensorModel.sample: {name} has shape {a.shape}, expected "
                                 f"({t.size}, {n}) for joints {self.joint_names}")
        if not self.enabled:
            return q.copy(), tau_r.copy(), i_m.copy()
        enc_rng, tq_rng, cur_rng = (np.random.default_rng(s)
                                    for s in np.random.SeedSequence(self.seed).spawn(3))
        shape = q.shape
        q_meas = q + enc_rng.standard_normal(shape) * self.enc_sigma
        if self.enc_step is not None:
            q_meas = np.round(q_meas / self.enc_step) * self.enc_step
        tau_meas = (tau_r + self.tq_offset + self.tq_drift * t[:, None]
                    + tq_rng.standard_normal(shape) * self.tq_sigma)
        i_meas = (i_m * (1.0 + self.i_scale) + self.i_bias
                  + cur_rng.standard_normal(shape) * self.i_sigma)
        if self.i_step is not None:
            i_meas = np.round(i_meas / self.i_step) * self.i_step
        return q_meas, tau_meas, i_meas

    def sample_velocity(self, qd_m) -> np.ndarray:
        """Velocity reported by the drive (motor side / eta) [rad/s] for true qd_m (N, n)."""
        qd_m = np.asarray(qd_m, float)
        if qd_m.ndim != 2 or qd_m.shape[1] != len(self.joint_names):
            raise ValueError(f"SensorModel.sample_velocity: qd_m has shape {qd_m.shape}, expected "
                             f"(N, {len(self.joint_names)})")
        if not self.enabled:
            return qd_m.copy()
        rng = np.random.default_rng(np.random.SeedSequence(self.seed).spawn(4)[3])
        return qd_m + rng.standard_normal(qd_m.shape) * self.vel_sigma
