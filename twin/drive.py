"""Joint drive model pieces (vectorised over joints): friction laws, controller gains, and the
stability check of the compliant coupling. Pure functions of arrays; :mod:`twin.sim` calls them.

Conventions (all reflected to the link side, (n,) arrays):
    q, v     link angle / velocity [rad, rad/s]       (PyBullet)
    q_m, w   motor angle / velocity / eta             (integrated here)
    tau_r  = K (q_m - q) + D (w - v)                   spring = torque-sensor torque [N*m]
    tau_in = tau_r + tau_hd                            harmonic-drive input torque tau'_r
    motor:   J_r dw/dt = tau_m - tau_mv - tau_mc - tau_hd - tau_rip - tau_r
    link:    M(q) qdd + h(q, qd) = tau_r - tau_lv - tau_lc = tau_l
Friction torques are reported positive when they resist positive motion (paper's convention).

Harmonic-drive load friction (paper eqs. 6-8, made dissipative): |tau_hd| = xi |tau_in|, always
opposing the gear's motion. With s = sign(w):
    driving   (s * tau_r > 0, power flows motor -> link): tau_hd = s * xi / (1 - xi) * |tau_r|
    back-driven (s * tau_r < 0, link drives the motor):    tau_hd = s * xi / (1 + xi) * |tau_r|
so the efficiency is 1 - xi when driving and 1 / (1 + xi) when back-driven.
"""
from __future__ import annotations

import numpy as np


def hd_friction_factor(xi: np.ndarray, w_sign: np.ndarray, tau_r: np.ndarray) -> np.ndarray:
    """|tau_hd| / |tau_r| for the current power-flow direction (see module doc); (n,)."""
    driving = w_sign * tau_r > 0
    return np.where(driving, xi / (1.0 - xi), xi / (1.0 + xi))


def coulomb_level(fc: np.ndarray, v: np.ndarray, asym: np.ndarray | None = None,
                  stribeck_ratio: np.ndarray | None = None,
                  stribeck_v: np.ndarray | None = None) -> np.ndarray:
    """Magnitude of the Coulomb-type friction at velocity `v` [N*m], (n,).

    fc Coulomb level; asym: F = fc (1 + a sign v); Stribeck:
    F *= 1 + (ratio - 1) exp(-(v / v_s)^2) (static level fc * ratio at rest).
    """
    F = fc
    if asym is not None:
        F = F * (1.0 + asym * np.sign(v))
    if stribeck_ratio is not None:
        F = F * (1.0 + (stribeck_ratio - 1.0) * np.exp(-(v / stribeck_v) ** 2))
    return F


def drift_scale(t: float, drift: float, time_s: float) -> float:
    """Warm-up friction scale 1 + drift (1 - exp(-t / time_s)) (|drift| <= 0.3) at time t [s]."""
    if drift == 0.0:
        return 1.0
    return 1.0 + drift * (1.0 - np.exp(-t / time_s))


def default_gains(J_total: np.ndarray, bandwidth_hz: float, damping: float,
                  integral_time_s: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """PID gains of the motor-side position loop for a joint of total inertia J_total [kg*m^2]
    (motor reflected + link diagonal inertia): Kp = J w^2, Kd = 2 zeta J w, Ki = Kp / T_i,
    w = 2 pi bandwidth. Returns (kp, ki, kd), each (n,)."""
    wn = 2.0 * np.pi * bandwidth_hz
    kp = J_total * wn ** 2
    kd = 2.0 * damping * J_total * wn
    ki = kp / integral_time_s
    return kp, ki, kd


#: largest omega * dt of the stiffest motor-link mode the twin accepts (see check_stability).
OMEGA_DT_MAX = 25.0


def coupled_frequencies(M: np.ndarray, J_r: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Natural angular frequencies [rad/s] of the linearised motor-spring-link system
    [[M, 0], [0, J_r]] x'' + [[K, -K], [-K, K]] x = 0 (M the joint-space mass matrix, (n, n))."""
    n = len(J_r)
    Mb = np.zeros((2 * n, 2 * n))
    Mb[:n, :n] = M
    Mb[n:, n:] = np.diag(J_r)
    Kb = np.block([[np.diag(K), -np.diag(K)], [-np.diag(K), np.diag(K)]])
    lam = np.linalg.eigvals(np.linalg.solve(Mb, Kb)).real
    return np.sqrt(np.clip(np.sort(lam), 0.0, None))


def check_stability(M: np.ndarray, J_r: np.ndarray, K: np.ndarray, D: np.ndarray,
                    link_viscous: np.ndarray, motor_viscous: np.ndarray, dt: float,
                    joint_names) -> float:
    """Refuse drive parameters the 1 ms scheme cannot integrate soundly; returns max omega*dt.

    * Spring-damper: integrated linearly-implicitly, so it never diverges (tested up to
      omega*dt = 1000), but above OMEGA_DT_MAX the spring is rigid within one step: implicit Euler
      damps a mode at omega by 1 / (1 + (omega dt)^2) per step, so the "compliance" would be a
      numerical artefact -- such a stiffness is refused, naming the joint, the natural frequency
      and the step (the default arm's stiffest mode, the wrist-3 link on its spring, is at
      omega*dt ~ 3.8).
    * Viscous friction is explicit: f_v dt / inertia must stay below 1 on the link side
      (f_lv dt (M^-1)_ii) and the motor side (f_mv dt / J'_m), otherwise explicit Euler oscillates
      (>= 1) and diverges (>= 2).
    Raises ValueError with the reason.
    """
    omega = coupled_frequencies(M, J_r, K)
    Minv_d = np.diag(np.linalg.inv(M))
    local = np.sqrt(K * (Minv_d + 1.0 / J_r))      # each link on its own spring against its motor
    worst = int(np.argmax(local))
    if omega[-1] * dt > OMEGA_DT_MAX:
        raise ValueError(
            f"drive stiffness too high for the {dt * 1e3:g} ms step: the stiffest motor-link mode "
            f"has natural frequency {omega[-1]:.0f} rad/s ({omega[-1] / 2 / np.pi:.0f} Hz), "
            f"omega*dt = {omega[-1] * dt:.1f} > {OMEGA_DT_MAX:g} (joint {joint_names[worst]!r}: "
            f"K = {K[worst]:.3g} N*m/rad, local mode {local[worst]:.0f} rad/s); the step cannot "
            f"resolve this compliance -- lower the stiffness or add payload inertia")
    for label, c, inertia in (("link", link_viscous * dt * Minv_d, 1.0 / Minv_d),
                              ("motor", motor_viscous * dt / J_r, J_r)):
        bad = np.flatnonzero(c >= 1.0)
        if bad.size:
            j = int(bad[0])
            raise ValueError(
                f"{label}-side viscous friction of joint {joint_names[j]!r} is too high for the "
                f"{dt * 1e3:g} ms step with inertia {inertia[j]:.3g} kg*m^2 "
                f"(f_v*dt/I = {c[j]:.2f} >= 1; explicit friction would oscillate/diverge)")
    return float(omega[-1] * dt)


def check_gains(kp: np.ndarray, kd: np.ndarray, J_total: np.ndarray, dt: float, joint_names) -> None:
    """Refuse position-loop gains the 1 kHz loop cannot run stably on a joint of inertia
    J_total: kd dt / J >= 1 (derivative action overshoots within one period) or
    kp dt^2 / J >= 0.5."""
    for label, c, lim in (("pid_kd", kd * dt / J_total, 1.0), ("pid_kp", kp * dt * dt / J_total, 0.5)):
        bad = np.flatnonzero(c >= lim)
        if bad.size:
            j = int(bad[0])
            raise ValueError(f"{label} of joint {joint_names[j]!r} too high for the {dt * 1e3:g} ms "
                             f"loop with inertia {J_total[j]:.3g} kg*m^2 ({c[j]:.2f} >= {lim})")
