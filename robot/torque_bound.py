"""Conservative MOTOR-torque bound of a planned motion, for the check before the arm moves.

The drives must deliver the motor torque, which is larger than the rigid-body link torque: the
payload adds to the last link, friction acts on both sides of the gear, the harmonic drive loses a
fraction xi = xi_gf + xi_sf of its input torque when it drives the link, and the rotor accelerates.
With all torques reflected to the link side (reference README, improved joint model)::

    tau_r  = tau_l + f_lc sign(qd) + f_lv qd          torque through the gear / torque sensor
    tau'_m = J_r qdd_m + f_mc sign(qd) + f_mv qd + tau_r + tau_hd,   |tau_hd| <= xi/(1-xi) |tau_r|

so, per sample and joint, with tau_l = RNEA(q, qd, qdd) of the arm WITH its payload,

    nominal = (|tau_l| + f_lc + f_lv |qd|) / (1 - xi) + f_mc + f_mv |qd| + J_r |qdd|
    bound   = (1 + margin_frac) * nominal + margin_coulomb * (f_mc + f_lc / (1 - xi))

The nominal bound holds for the motor torque of the commanded motion; the position loop adds
transients around it (stick-slip breakaway at velocity reversals, the compliant mode it excites),
which the margins cover: on the twin (tests/robot_backend/test_robot_torque_bound.py) the true motor torque
exceeds the nominal bound by up to ~20 % of it plus one Coulomb level at reversals; the defaults
(robot.config.SafetyConfig: 25 % and one Coulomb level) keep it under the bound.

    from robot.torque_bound import TorqueBound
    tb = TorqueBound.from_files(model, "assets/cobot6_drives.yaml", payload)
    B = tb(q, qd, qdd)          # (N, n) [N*m], >= |motor torque| reflected to the link side
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PAYLOAD_KEYS = ("mass_kg", "com_m", "inertia_kgm2")


def payload_params(payload: dict, where: str = "arm.payload") -> np.ndarray:
    """Standard 10-vector (Pinocchio order, inertia about the frame origin) of a payload given as
    {mass_kg [kg], com_m (3,) [m] in the flange (last joint) frame, inertia_kgm2 [Ixx, Iyy, Izz,
    Ixy, Ixz, Iyz] [kg*m^2] about its centre of mass, flange axes}. Errors name `where`.key."""
    from identify.model.spatial import params_from_inertial
    if not isinstance(payload, dict):
        raise ValueError(f"{where} must be a mapping {{mass_kg, com_m, inertia_kgm2}}, got {payload!r}")
    bad = sorted(set(payload) - set(PAYLOAD_KEYS))
    if bad:
        raise ValueError(f"{where}: unknown key(s) {bad}; valid: {list(PAYLOAD_KEYS)}")

    def vec(key, size, default):
        v = payload.get(key, default)
        try:
            a = np.asarray(v, dtype=float).reshape(-1)
        except (TypeError, ValueError):
            raise ValueError(f"{where}.{key} must be {size} numbers, got {v!r}") from None
        if a.shape != (size,) or not np.all(np.isfinite(a)):
            raise ValueError(f"{where}.{key} must be {size} finite numbers, got {v!r}")
        return a

    if "mass_kg" not in payload:
        raise ValueError(f"{where}.mass_kg is required")
    m = vec("mass_kg", 1, None)[0]
    if not m > 0:
        raise ValueError(f"{where}.mass_kg must be > 0, got {payload['mass_kg']!r}")
    com = vec("com_m", 3, [0.0, 0.0, 0.0])
    Ixx, Iyy, Izz, Ixy, Ixz, Iyz = vec("inertia_kgm2", 6, [0.0] * 6)
    I_c = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    if np.linalg.eigvalsh(I_c).min() < -1e-12:
        raise ValueError(f"{where}.inertia_kgm2 is not positive semi-definite: {list(map(float, I_c.flat))}")
    return params_from_inertial(float(m), com, I_c)


def model_with_payload(model, payload: dict | None, where: str = "arm.payload"):
    """`model` (identify.RobotModel) with the payload added to its last link (unchanged if None)."""
    if payload is None:
        return model
    p = model.inertial_parameters()
    p[-10:] += payload_params(payload, where)
    return model.with_params(p)


@dataclass(frozen=True)
class TorqueBound:
    """Per-sample motor-torque bound (see module doc). All (n,) arrays in the model's joint order,
    link side, SI: f_mc, f_lc [N*m]; f_mv, f_lv [N*m*s/rad]; xi [-]; J_r [kg*m^2].
    ``model``: identify.RobotModel including the payload."""
    model: object
    f_mc: np.ndarray
    f_mv: np.ndarray
    f_lc: np.ndarray
    f_lv: np.ndarray
    xi: np.ndarray
    J_r: np.ndarray
    margin_frac: float = 0.0
    margin_coulomb: float = 0.0
    source: str = ""

    @staticmethod
    def from_files(model, drives_path, payload: dict | None = None, *, margin_frac: float = 0.0,
                   margin_coulomb: float = 0.0) -> "TorqueBound":
        """Bound for `model` (+ `payload` on its last link) with the drive file's friction,
        harmonic-drive loss and rotor inertia (identify.model.drives; errors name file, joint, key)."""
        from identify.model.drives import load_drives
        for name, v in (("margin_frac", margin_frac), ("margin_coulomb", margin_coulomb)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"torque bound {name} must be a finite number >= 0, got {v!r}")
        d = load_drives(drives_path, list(model.joint_names))
        return TorqueBound(model=model_with_payload(model, payload), f_mc=d.array("motor_coulomb"),
                           f_mv=d.array("motor_viscous"), f_lc=d.array("link_coulomb"),
                           f_lv=d.array("link_viscous"), xi=d.array("xi"), J_r=d.array("J_r"),
                           margin_frac=float(margin_frac), margin_coulomb=float(margin_coulomb),
                           source=str(drives_path))

    def nominal(self, q, qd, qdd, tau_l: np.ndarray | None = None) -> np.ndarray:
        """(N, n) [N*m] motor-torque bound of the commanded motion without margins.
        q, qd, qdd: (N, n) [rad, rad/s, rad/s^2]; tau_l: precomputed rigid-body torques (N, n)."""
        q, qd, qdd = (np.atleast_2d(np.asarray(a, float)) for a in (q, qd, qdd))
        if tau_l is None:
            tau_l = np.asarray(self.model.inverse_dynamics(q, qd, qdd), float).reshape(q.shape)
        aqd = np.abs(qd)
        tau_r = np.abs(tau_l) + self.f_lc + self.f_lv * aqd
        return tau_r / (1.0 - self.xi) + self.f_mc + self.f_mv * aqd + self.J_r * np.abs(qdd)

    def __call__(self, q, qd, qdd, tau_l: np.ndarray | None = None) -> np.ndarray:
        """(N, n) [N*m] conservative bound of |motor torque| (link side), margins included."""
        nom = self.nominal(q, qd, qdd, tau_l)
        return ((1.0 + self.margin_frac) * nom
                + self.margin_coulomb * (self.f_mc + self.f_lc / (1.0 - self.xi)))
