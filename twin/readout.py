"""The twin's ground-truth state of one control period (:class:`TwinState`, the per-joint channel
names :data:`STATE_CHANNELS`, also the truth channels of a recording) and its readout.

State read-out of :class:`twin.sim.TwinSim`, kept apart from the simulation loop: read-only
properties (copies of the compiled step's buffers), the per-step :class:`TwinState`, and the flat
snapshot rows a recording is made of with their aligned unpacking (:meth:`StateReadout.channels`)."""
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


class StateReadout:
    """Mixin: named copies of the state held in a TwinSim's flat buffers ``_X`` (the step's input:
    state at the end of the last step) and ``_Y`` (the last step's outputs); SI, (n,) arrays."""

    @property
    def q(self) -> np.ndarray:
        """Link angle [rad] (n,)."""
        return self._X["q"].copy()

    @property
    def v(self) -> np.ndarray:
        """Link velocity [rad/s] (n,)."""
        return self._X["v"].copy()

    @property
    def qdd(self) -> np.ndarray:
        """Link acceleration of the last step, (qd+ - qd) / dt [rad/s^2]."""
        return (self._X["v"] - self._Y["v_prev"]) / self.dt

    @property
    def w(self) -> np.ndarray:
        """Motor velocity / eta [rad/s] (n,)."""
        return self._Y["w"].copy()

    @property
    def qm(self) -> np.ndarray:
        """Motor angle / eta [rad] (n,)."""
        return self._Y["qm"].copy()

    @property
    def q_cmd(self) -> np.ndarray:
        """Last commanded link angle [rad] (n,)."""
        return self._Y["qc"].copy()

    @property
    def integ(self) -> np.ndarray:
        """Integral of the position-loop error [rad*s] (n,)."""
        return self._Y["integ"].copy()

    @property
    def tau_m(self) -> np.ndarray:
        """Reflected motor torque eta*beta*i [N*m] (n,)."""
        return self._Y["tau_m"].copy()

    @property
    def tau_r(self) -> np.ndarray:
        """Spring (torque-sensor) torque [N*m] (n,)."""
        return self._Y["tau_r"].copy()

    @property
    def tau_l(self) -> np.ndarray:
        """Torque applied to the links (rigid-body M qdd + h) [N*m] (n,)."""
        return self._Y["tau_l"].copy()

    @property
    def tau_ff(self) -> np.ndarray:
        """Feed-forward torque of the last step [N*m] (n,)."""
        return self._Y["tau_ff"].copy()

    @property
    def tau_hd(self) -> np.ndarray:
        """Harmonic-drive load friction of the last step [N*m] (its share of the motor-side
        Coulomb-type impulse; positive resists positive motion)."""
        return self._Y["tau_hd"].copy()

    @property
    def tau_mc(self) -> np.ndarray:
        """Motor-side Coulomb friction of the last step [N*m]."""
        return self._Y["tau_mc"].copy()

    @property
    def tau_in(self) -> np.ndarray:
        """Harmonic-drive input torque tau'_r = tau_r + tau_hd [N*m]."""
        return self._Y["tau_in"].copy()

    @property
    def tau_lc(self) -> np.ndarray:
        """Link-side Coulomb friction of the last step [N*m]."""
        return self._Y["tau_lc"].copy()

    @property
    def tau_mv(self) -> np.ndarray:
        """Motor-side viscous friction of the last step [N*m]."""
        return self._Y["tau_mv"].copy()

    @property
    def tau_lv(self) -> np.ndarray:
        """Link-side viscous friction of the last step [N*m]."""
        return self._Y["tau_lv"].copy()

    @property
    def tau_rip(self) -> np.ndarray:
        """Torque ripple of the last step [N*m]."""
        return self._Y["tau_rip"].copy()

    @property
    def stick_m(self) -> np.ndarray:
        """1.0 where the motor side stuck in the last step."""
        return self._Y["stick_m"].copy()

    @property
    def stick_l(self) -> np.ndarray:
        """1.0 where the link side stuck in the last step."""
        return self._Y["stick_l"].copy()

    # -- state read-out: properties (copies) and the flat snapshot used by the backend -----------
    @property
    def snapshot_size(self) -> int:
        """Length of :meth:`snapshot` rows."""
        return 2 * self.n + self._lay["y"].size

    def snapshot(self, out: np.ndarray | None = None) -> np.ndarray:
        """The last period as one flat row [SI]: q, v at its end, then the step's outputs (which
        include the state at its start); written into `out` (snapshot_size,) if given.
        :meth:`channels` turns rows into the aligned samples of those periods."""
        if out is None:
            out = np.empty(self.snapshot_size)
        m = 2 * self.n
        out[:m] = self._x[:m]
        out[m:] = self._y
        return out

    def channels(self, rows: np.ndarray) -> dict:
        """Snapshot rows (N, snapshot_size), each taken right after a control period
        [t, t + dt) -> {channel: (N, n) array} for every :data:`STATE_CHANNELS` entry (SI), the
        ALIGNED sample at the period's start t (the contract of identify.backend.recording):

        * q, qd, q_m, qd_m: link / motor angle and velocity at t;
        * qdd: the link acceleration over the period, (qd(t + dt) - qd(t)) / dt -- exactly the
          central second difference of the sampled positions (symplectic Euler), and what the
          period's torques produce: tau_l = M(q(t)) qdd + h(q(t), qd(t));
        * q_cmd: the position set point in effect at t (the trajectory at t);
        * tau_m, i_m, every torque component and stick flag: the values acting during the
          period (zero-order hold from t; tau_r is the compliance's torque of the
          linearly-implicit step, i.e. K (q_m - q) + D (qd_m - qd) evaluated at t + dt).

        :meth:`state` (the per-step API) differs: positions and velocities at the END of the
        period, next to the same period's torques."""
        R = np.asarray(rows, dtype=float)
        if R.ndim != 2 or R.shape[1] != self.snapshot_size:
            raise ValueError(f"channels: rows have shape {R.shape}, expected (N, {self.snapshot_size})")
        n, m, ly = self.n, 2 * self.n, self._lay["y"]
        get = lambda name: R[:, m:][:, ly.slice(name)]          # noqa: E731
        v0 = get("v_prev")
        out = {"q": get("q_prev"), "qd": v0, "qdd": (R[:, n:m] - v0) / self.dt,
               "q_m": get("qm_prev"), "qd_m": get("w_prev"), "q_cmd": get("qc_prev"),
               "tau_m": get("tau_m"), "i_m": get("tau_m") / self.torque_factor}
        for name in STATE_CHANNELS:
            if name not in out:
                out[name] = get(name)
        res = {name: np.array(out[name]) for name in STATE_CHANNELS}
        if self.contacts is not None:
            # joint torque of the external contact forces acting during the period [N*m]
            res["tau_ext"] = np.array(get("tau_ext"))
        return res

    def state(self) -> TwinState:
        """The current ground-truth state (copies): q, qd, q_m, qd_m at the end of the last
        period, its torques and qdd = (qd - qd_start) / dt (not the aligned sample of
        :meth:`channels`, see there)."""
        n = self.n
        xc = self._x[:2 * n].copy()
        yc = self._y.copy()
        kw = {name: yc[sl] for name, sl in self._state_slices}
        kw["q"], kw["qd"] = xc[:n], xc[n:]
        kw["qdd"] = (kw["qd"] - yc[self._vprev_slice]) / self.dt
        kw["i_m"] = kw["tau_m"] / self.torque_factor
        return TwinState(t=self.t, **kw)
