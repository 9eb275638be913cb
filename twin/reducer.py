"""Harmonic-drive (reducer) friction laws of the twin: ``TwinSettings.reducer_friction_law``.

Notation (link side, per joint, docs/joint_models.md): tau_in = tau'_r the reducer's input torque
(wave generator side), tau_r its output (= the torque sensor's), w the motor velocity reflected to
the link, s = sign(w). The loss is tau_rf = tau_in - tau_r ("tau_hd" in the twin's truth); it is
reported positive when it resists positive motion.

``opposing`` (default; the identification's "opposing" variant):
    tau_rf = s xi |tau_in|,  xi = xi_gf + xi_sf of the drive file.
    Efficiency 1 - xi when the motor drives the load, 1 / (1 + xi) when the load back-drives.

``paper`` (the generative law of the paper's improved model, reference README eq. 3 / 5: the
meshing + rolling loss is a fixed fraction of the input torque, which is what makes Delta tau
linear in tau'_m with a1 = xi; the identification's "linear" variant):
    tau_rf = xi tau_in  (independent of the direction of motion; also at rest).
    Efficiency 1 - xi driving, but 1 / (1 - xi) > 1 back-driven: the loss then does POSITIVE work
    (it aids the motion). This is the paper's assumption, not physics; the twin implements it
    exactly so that the linear variant has an exact truth, and reports ``dissipative: false``.

``load_speed`` (from the harmonic-drive literature; NO fitted variant of the identification
shares it): a load-dependent loss whose coefficient grows with speed (efficiency falls with input
speed, as harmonic-drive efficiency curves show) plus a load-independent Stribeck part:
    tau_rf = s (F0(w) + mu(w) |tau_in|),
    mu(w)  = xi (r0 + (r_inf - r0) (1 - exp(-|w| / w_mu))),
    F0(w)  = c_s f_mc exp(-(w / w_s)^2)       (f_mc the joint's motor Coulomb friction).
    Efficiency of the load-proportional part 1 - mu(w) driving, 1 / (1 + mu(w)) back-driven;
    F0 is a drag torque (no-load), so the loss always opposes the motion.
    Sources: load- and velocity-dependent harmonic-drive friction, Tuttle & Seering, "A nonlinear
    model of a harmonic drive gear transmission", IEEE Trans. Robot. Autom. 12(3), 1996;
    Stribeck + Coulomb + viscous friction identified on harmonic drives, Taghirad & Belanger,
    "Modeling and parameter identification of harmonic drive systems", ASME J. Dyn. Syst. Meas.
    Control 120(4), 1998; velocity- and load-dependent friction of the PA-10's harmonic drives,
    Kennedy & Desai, IEEE/ASME Trans. Mechatronics 10(3), 2005; load-dependent friction with
    nonlinear viscous part, Wolf & Iskandar, ICRA 2018; efficiency falling with input speed and
    rising with load: Harmonic Drive CSG/CSF catalogue efficiency curves. Parameters (ours, inside
    those sources' ranges) in ``assets/cobot6_drives.yaml`` under ``reducer_friction_laws``.

``speed_efficiency`` (a strong speed dependence of the efficiency in the power-flow form; NO
fitted variant shares it, and unlike ``load_speed`` it is not an opposing law with a rescaled xi):
the reducer transmits a fraction eta(w) of the power in the direction the power flows,
    eta(w) = 1 - mu(w),  mu(w) = xi (r0 + (r_inf - r0) (1 - exp(-|w| / w_mu))),
    driving    (tau_in w > 0, motor -> link):  tau_r = eta(w) tau_in,
    back-driven (tau_in w < 0, link -> motor): tau_in = eta(w) tau_r,
i.e. tau_rf = s mu_q(w) |tau_in| with mu_q = mu driving and mu / (1 - mu) back-driven: the loss
grows several-fold with speed (r_inf / r0 = 5.3 in the drive file) and is larger when the load
back-drives the gear than when the motor drives it (a constant-xi "both" fit can only average the
two). Efficiency eta(w) in both directions, so the loss never does positive work.
    Sources: efficiency as a function of input speed measured on harmonic drives falls from ~80-90 %
    at low speed to ~30-60 % at high speed, and the back-driving efficiency is lower than the
    forward one: Harmonic Drive CSF/CSG catalogue efficiency curves (efficiency vs input speed
    and load torque); Kircanski & Goldenberg, "An experimental study of nonlinear stiffness,
    hysteresis, and friction effects in robot joints with harmonic drives and torque sensors",
    Int. J. Robot. Res. 16(2), 1997; Tuttle & Seering 1996 (above); the power-flow gear model
    with a speed-dependent mesh efficiency per energy-flow direction: Pelchen, Schweiger & Otter,
    "Modeling and simulating the efficiency of gearboxes and of planetary gearboxes", 2nd
    International Modelica Conference, 2002 (Modelica.Mechanics.Rotational.Components.LossyGear:
    tau_loss = (1 - eta(w)) tau_a forward, (1 - 1 / eta(w)) tau_a backward).
    Parameters in ``assets/cobot6_drives.yaml`` under ``reducer_friction_laws.speed_efficiency``.

The compiled step evaluates every law through one form (:meth:`ReducerLaw.step_parameters`):
    tau_r = tau_in / gam - s (F0(w) + mu_q(w) |tau_in|)   (gam = 1 / (1 - xi_lin); one part is 0;
    mu_q = mu(w) driving; back-driven mu(w) / (1 - mu(w)) where ``power_flow`` is 1, else mu(w))
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from identify.common.fileio import read_yaml

#: law names (TwinSettings.reducer_friction_law)
LAWS = ("opposing", "paper", "load_speed", "speed_efficiency")
#: identification variant (docs/joint_models.md) that assumes the same law, None: none does
SHARED_VARIANT = {"opposing": "opposing", "paper": "linear", "load_speed": None,
                  "speed_efficiency": None}
#: keys of the load_speed law in the drive file's ``reducer_friction_laws.load_speed`` section
LOAD_SPEED_KEYS = {
    "mu_rel_at_rest": "r0",                      # mu(0) / xi [-]
    "mu_rel_high_speed": "r_inf",                # mu(inf) / xi [-]
    "speed_constant_rad_s": "w_mu",              # [rad/s], link side
    "stribeck_rel_motor_coulomb": "c_s",         # F0(0) / f_mc [-]
    "stribeck_velocity_rad_s": "w_s",            # [rad/s], link side
}
#: keys of the speed_efficiency law (``reducer_friction_laws.speed_efficiency``)
SPEED_EFFICIENCY_KEYS = {
    "mu_rel_at_rest": "r0",                      # mu(0) / xi [-]
    "mu_rel_high_speed": "r_inf",                # mu(inf) / xi [-]
    "speed_constant_rad_s": "w_mu",              # [rad/s], link side
}
#: the parameter keys of each law with parameters
LAW_KEYS = {"load_speed": LOAD_SPEED_KEYS, "speed_efficiency": SPEED_EFFICIENCY_KEYS}


def read_law_parameters(drives_path) -> dict:
    """The ``reducer_friction_laws`` section of a drive YAML ({} if absent): {law: {key: value}}.
    identify.model.drives reads the per-joint entries; this section is the twin's own."""
    doc = read_yaml(Path(drives_path)) or {}
    sec = doc.get("reducer_friction_laws") or {}
    if not isinstance(sec, dict):
        raise ValueError(f"{drives_path}: reducer_friction_laws must be a mapping law -> parameters")
    bad = sorted(set(sec) - set(LAWS))
    if bad:
        raise ValueError(f"{drives_path}: reducer_friction_laws: unknown law(s) {bad}; valid: {list(LAWS)}")
    return {k: dict(v or {}) for k, v in sec.items()}


def _per_joint(v, n: int, where: str) -> np.ndarray:
    a = np.asarray(v, dtype=float)
    if a.ndim == 0:
        a = np.full(n, float(a))
    if a.shape != (n,) or not np.all(np.isfinite(a)):
        raise ValueError(f"{where}: expected a finite number or {n} numbers, got {v!r}")
    return a


#: per-joint array fields of ReducerLaw
ARRAY_FIELDS = ("xi", "xi_lin", "mu0", "mu1", "w_mu", "F0", "w_s", "power_flow")


def _law_parameters(name: str, raw: dict, n: int) -> tuple[dict, dict]:
    """({symbol: (n,) array}, raw section) of law `name` from its drive-file section `raw`;
    ValueError naming the law and key on a missing, unknown or out-of-range value."""
    keys = LAW_KEYS[name]
    raw = dict(raw)
    missing = sorted(set(keys) - set(raw))
    extra = sorted(set(raw) - set(keys) - {"source"})
    if missing or extra:
        raise ValueError(f"reducer_friction_laws.{name}: missing {missing}, unknown {extra}; "
                         f"keys: {list(keys)}")
    p = {keys[k]: _per_joint(raw[k], n, f"reducer_friction_laws.{name}.{k}") for k in keys}
    if any(np.any(p[k] < 0) for k in ("r0", "r_inf", "c_s") if k in p):
        raise ValueError(f"reducer_friction_laws.{name}: ratios must be >= 0")
    if any(np.any(p[k] <= 0) for k in ("w_mu", "w_s") if k in p):
        raise ValueError(f"reducer_friction_laws.{name}: velocities must be > 0")
    return p, raw


@dataclass(frozen=True)
class ReducerLaw:
    """One reducer law with its per-joint parameters ((n,) arrays, link side, SI).

    xi: the drive file's xi_gf + xi_sf (0 with harmonic_friction off); xi_lin: linear part
    (paper law); mu0, mu1, w_mu, F0, w_s: the Coulomb-type part mu(w) = mu0 + mu1 (1 -
    exp(-|w| / w_mu)), F0(w) = F0 exp(-(w / w_s)^2); power_flow: 1 where the back-driven
    coefficient is mu / (1 - mu) (speed_efficiency), else 0; params: the law's parameters as read."""

    name: str
    xi: np.ndarray
    xi_lin: np.ndarray
    mu0: np.ndarray
    mu1: np.ndarray
    w_mu: np.ndarray
    F0: np.ndarray
    w_s: np.ndarray
    params: dict
    power_flow: np.ndarray | None = None

    def __post_init__(self):
        if self.power_flow is None:
            object.__setattr__(self, "power_flow", np.zeros(self.xi.size))

    @staticmethod
    def build(name: str, xi, motor_coulomb, law_params: dict | None = None) -> "ReducerLaw":
        """The law `name` for joints with loss coefficient xi (n,) and motor Coulomb friction
        motor_coulomb (n,) [N*m]; law_params: the drive file's ``reducer_friction_laws``."""
        if name not in LAWS:
            raise ValueError(f"reducer_friction_law={name!r}: valid laws {list(LAWS)}")
        xi = np.asarray(xi, float)
        n = xi.size
        z, one = np.zeros(n), np.ones(n)
        if name == "opposing":
            return ReducerLaw(name, xi, z, xi.copy(), z, one, z, one, {})
        if name == "paper":
            return ReducerLaw(name, xi, z + xi, z, z, one, z, one, {})
        p, raw = _law_parameters(name, (law_params or {}).get(name) or {}, n)
        if np.any(xi * np.maximum(p["r0"], p["r_inf"]) >= 1):
            raise ValueError(f"reducer_friction_laws.{name}: mu(w) = xi * ratio must stay < 1 "
                             "(efficiency > 0)")
        params = ({k: p[v].tolist() for k, v in LAW_KEYS[name].items()}
                  | ({"source": raw["source"]} if "source" in raw else {}))
        if name == "speed_efficiency":
            return ReducerLaw(name, xi, z, xi * p["r0"], xi * (p["r_inf"] - p["r0"]), p["w_mu"], z,
                              one, params, power_flow=one)
        return ReducerLaw(name, xi, z, xi * p["r0"], xi * (p["r_inf"] - p["r0"]), p["w_mu"],
                          p["c_s"] * np.asarray(motor_coulomb, float), p["w_s"], params)

    @property
    def n(self) -> int:
        return self.xi.size

    def subset(self, idx) -> "ReducerLaw":
        """The law of the joints `idx` (indices), parameters as read kept."""
        idx = np.asarray(idx, int)
        arrays = {f: getattr(self, f)[idx] for f in ARRAY_FIELDS}
        return ReducerLaw(self.name, params=self.params, **arrays)

    @property
    def gam(self) -> np.ndarray:
        """tau_in / tau_r of the linear part, 1 / (1 - xi_lin)."""
        return 1.0 / (1.0 - self.xi_lin)

    @property
    def dissipative(self) -> bool:
        """True when the loss never does positive work (every law but ``paper`` with xi > 0)."""
        return not np.any(self.xi_lin > 0)

    def step_parameters(self) -> dict:
        """The compiled step's per-run inputs (twin.step_graph layout "c"): hd_mu0, hd_mu1,
        hd_w_mu, hd_F0, hd_w_s, hd_gam, hd_pf, each (n,)."""
        return {"hd_mu0": self.mu0, "hd_mu1": self.mu1, "hd_w_mu": self.w_mu, "hd_F0": self.F0,
                "hd_w_s": self.w_s, "hd_gam": self.gam, "hd_pf": self.power_flow}

    def mu(self, w) -> np.ndarray:
        """Load-proportional coefficient mu(w) of the Coulomb-type part at motor velocity w
        (..., n) [rad/s, link side]."""
        return self.mu0 + self.mu1 * (1.0 - np.exp(-np.abs(w) / self.w_mu))

    def mu_back(self, w) -> np.ndarray:
        """Load-proportional coefficient when the load back-drives the gear (tau_in w < 0):
        mu / (1 - mu) where ``power_flow`` is 1 (tau_in = (1 - mu) tau_r), else mu."""
        m = self.mu(w)
        return np.where(self.power_flow > 0, m / (1.0 - m), m)

    def drag(self, w) -> np.ndarray:
        """Load-independent part F0(w) [N*m] at motor velocity w (..., n)."""
        return self.F0 * np.exp(-(np.asarray(w, float) / self.w_s) ** 2)

    def loss(self, tau_in, w) -> np.ndarray:
        """tau_rf = tau_in - tau_r [N*m] for input torque tau_in and motor velocity w (..., n),
        sliding (w != 0); the numpy reference of the compiled law."""
        tau_in = np.asarray(tau_in, float)
        s = np.sign(w)
        m = np.where(s * tau_in >= 0, self.mu(w), self.mu_back(w))
        return self.xi_lin * tau_in + s * (self.drag(w) + m * np.abs(tau_in))

    def efficiency(self, w, driving: bool) -> np.ndarray:
        """Efficiency of the load-proportional part at motor velocity w (..., n): output / input
        power for |tau_in| >> F0 -- driving (motor -> link) 1 - mu - xi_lin, back-driven
        1 / (1 + mu_back) (opposing part; = 1 - mu for speed_efficiency) or 1 / (1 - xi_lin)
        (linear part, > 1: not physical)."""
        if driving:
            return 1.0 - self.mu(w) - self.xi_lin
        return 1.0 / ((1.0 + self.mu_back(w)) * (1.0 - self.xi_lin))

    def describe(self) -> dict:
        """JSON-ready description: name, shared identification variant, dissipative, params."""
        return {"law": self.name, "shared_with_variant": SHARED_VARIANT[self.name],
                "dissipative": self.dissipative, "params": self.params}
