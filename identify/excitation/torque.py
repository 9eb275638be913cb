"""The motor-torque constraint of the excitation problem: the same conservative bound the
hardware checks before it moves (robot.torque_bound, reproduced here because identify may not
import robot), as a smooth CasADi function for IPOPT and exactly in numpy for the report.

With tau_l the rigid-body torque of the prior model WITH the payload on its last link, per joint
(all link side, SI):

    nominal = (|tau_l| + f_lc + f_lv |qd|) / (1 - xi) + f_mc + f_mv |qd| + J_r |qdd|
    bound   = (1 + margin_frac) nominal + margin_coulomb (f_mc + f_lc / (1 - xi))   <=  tau_max

Inside the optimizer |x| is replaced by sqrt(x^2 + eps^2) >= |x| (smooth and never below the
exact bound), eps = 0.01 N*m, 1e-3 rad/s, 1e-2 rad/s^2.
"""
from __future__ import annotations

import casadi as ca
import numpy as np

KEYS = ("f_mc", "f_mv", "f_lc", "f_lv", "xi", "J_r", "tau_max")


def check_torque_limit(model, d: dict) -> None:
    """ValueError naming the key when `d` is not a valid torque_limit (see module doc)."""
    if not isinstance(d, dict):
        raise ValueError(f"torque_limit must be a mapping, got {d!r}")
    bad = sorted(set(d) - set(KEYS) - {"payload", "margin_frac", "margin_coulomb"})
    if bad:
        raise ValueError(f"torque_limit: unknown key(s) {bad}")
    for k in KEYS:
        v = np.asarray(d.get(k, np.nan), float).reshape(-1)
        if v.shape != (model.n,) or not np.all(np.isfinite(v)) or np.any(v < 0):
            raise ValueError(f"torque_limit.{k} must be {model.n} finite numbers >= 0, got {d.get(k)!r}")
    if np.any(np.asarray(d["xi"], float) >= 1):
        raise ValueError("torque_limit.xi must be < 1 (reducer loss fraction)")
    if np.any(np.asarray(d["tau_max"], float) <= 0):
        raise ValueError("torque_limit.tau_max must be > 0 [N*m]")
    if d.get("payload") is not None and np.asarray(d["payload"], float).shape != (10,):
        raise ValueError("torque_limit.payload must be 10 standard parameters or null")


def _arrays(model, d):
    a = {k: np.asarray(d[k], float) for k in KEYS}
    p = np.array(model.params, float)
    if d.get("payload") is not None:
        p[-10:] += np.asarray(d["payload"], float)
    return a, p, float(d.get("margin_frac", 0.0)), float(d.get("margin_coulomb", 0.0))


def torque_ratio(model, d: dict, q, qd, qdd) -> np.ndarray:
    """(N, n) exact bound / tau_max for samples (N, n) [SI]."""
    a, p, mf, mc = _arrays(model, d)
    tau = model.regressor(q, qd, qdd) @ p
    aqd = np.abs(qd)
    nom = ((np.abs(tau) + a["f_lc"] + a["f_lv"] * aqd) / (1 - a["xi"]) + a["f_mc"]
           + a["f_mv"] * aqd + a["J_r"] * np.abs(qdd))
    bound = (1 + mf) * nom + mc * (a["f_mc"] + a["f_lc"] / (1 - a["xi"]))
    return bound / a["tau_max"]


def torque_ratio_function(model, d: dict) -> ca.Function:
    """SX Function (q, qd, qdd) (n,) -> (n,) smooth bound / tau_max (>= the exact ratio)."""
    a, p, mf, mc = _arrays(model, d)
    n = model.n
    q, qd, qdd = ca.SX.sym("q", n), ca.SX.sym("qd", n), ca.SX.sym("qdd", n)
    tau = ca.mtimes(model.regressor_function()(q, qd, qdd), ca.DM(p))
    sabs = lambda x, e: ca.sqrt(x * x + e * e)  # noqa: E731
    aqd = sabs(qd, 1e-3)
    nom = ((sabs(tau, 1e-2) + a["f_lc"] + a["f_lv"] * aqd) / (1 - a["xi"]) + a["f_mc"]
           + a["f_mv"] * aqd + a["J_r"] * sabs(qdd, 1e-2))
    bound = (1 + mf) * nom + mc * (a["f_mc"] + a["f_lc"] / (1 - a["xi"]))
    return ca.Function("torque_ratio", [q, qd, qdd], [bound / a["tau_max"]])


def torque_limit_from_drives(drives, tau_max, payload=None, margin_frac: float = 0.25,
                             margin_coulomb: float = 1.0) -> dict:
    """The torque_limit dict from an identify.model.drives drive set (friction, xi, J_r), the
    limits tau_max (n,) [N*m], a payload (10,) and the margins (defaults: the hardware's,
    robot.config.SafetyConfig)."""
    return {"f_mc": drives.array("motor_coulomb").tolist(),
            "f_mv": drives.array("motor_viscous").tolist(),
            "f_lc": drives.array("link_coulomb").tolist(),
            "f_lv": drives.array("link_viscous").tolist(), "xi": drives.array("xi").tolist(),
            "J_r": drives.array("J_r").tolist(), "tau_max": np.asarray(tau_max, float).tolist(),
            "payload": None if payload is None else np.asarray(payload, float).tolist(),
            "margin_frac": float(margin_frac), "margin_coulomb": float(margin_coulomb)}
