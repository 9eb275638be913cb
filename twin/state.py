"""The twin's ground-truth state of one control period: :class:`TwinState` and the names of its
per-joint channels (:data:`STATE_CHANNELS`, also the truth channels of a recording)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class TwinState:
    """Ground-truth state after one control step (all (n,), link side, SI).

    t: time [s]; q, qd, qdd: link angle/velocity/acceleration [rad, rad/s, rad/s^2] (qdd = the
    step's (qd+ - qd) / dt); q_m, qd_m: motor angle/velocity / eta [rad, rad/s]; q_cmd: commanded
    link angle [rad]; tau_m: reflected motor torque eta*beta*i [N*m]; i_m: motor current [A];
    tau_r: torque-sensor (spring) torque [N*m]; tau_in: harmonic-drive input torque tau'_r;
    tau_l: rigid-body link torque M qdd + h [N*m]; tau_mc, tau_mv: motor-side Coulomb and viscous
    friction; tau_hd: harmonic-drive load friction; tau_rip: torque ripple; tau_lc, tau_lv:
    link-side Coulomb and viscous friction (friction positive when resisting positive motion);
    tau_ff: feed-forward torque; stick_m, stick_l: 1.0 where the motor / link side stuck.
    """

    t: float
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    q_m: np.ndarray
    qd_m: np.ndarray
    q_cmd: np.ndarray
    tau_m: np.ndarray
    i_m: np.ndarray
    tau_r: np.ndarray
    tau_in: np.ndarray
    tau_l: np.ndarray
    tau_mc: np.ndarray
    tau_mv: np.ndarray
    tau_hd: np.ndarray
    tau_rip: np.ndarray
    tau_lc: np.ndarray
    tau_lv: np.ndarray
    tau_ff: np.ndarray
    stick_m: np.ndarray
    stick_l: np.ndarray


#: TwinState fields that are per-joint arrays (recorded as truth channels).
STATE_CHANNELS = ("q", "qd", "qdd", "q_m", "qd_m", "q_cmd", "tau_m", "i_m", "tau_r", "tau_in",
                  "tau_l", "tau_mc", "tau_mv", "tau_hd", "tau_rip", "tau_lc", "tau_lv", "tau_ff",
                  "stick_m", "stick_l")
