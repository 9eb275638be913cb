"""Read-only state properties of :class:`twin.sim.TwinSim` (copies of the compiled step's
buffers), kept apart from the simulation loop."""
from __future__ import annotations

import numpy as np


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
