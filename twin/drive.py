"""Joint drive model pieces (vectorised over joints): friction laws, controller gains, the
stability check of the compliant coupling (pure functions of arrays); :mod:`twin.sim` calls them.
The CasADi graphs of the compiled 1 kHz step and of its matrix build are in :mod:`twin.step_graph`
(re-exported here).

Conventions (all reflected to the link side, (n,) arrays):
    q, v     link angle / velocity [rad, rad/s]       (PyBullet)
    q_m, w   motor angle / velocity / eta             (integrated here)
    tau_r  = K (q_m - q) + D (w - v)                   spring = torque-sensor torque [N*m]
    tau_in = tau_r + tau_hd                            harmonic-drive input torque tau'_r
    motor:   J_r dw/dt = tau_m - tau_mv - tau_mc - tau_hd - tau_rip - tau_r
    link:    M(q) qdd + h(q, qd) = tau_r - tau_lv - tau_lc = tau_l
Friction torques are reported positive when they resist positive motion (paper's convention).

Harmonic-drive load friction: the law of ``TwinSettings.reducer_friction_law`` (:mod:`twin.reducer`;
default "opposing", |tau_hd| = xi |tau_in| always opposing the gear's motion). For the opposing law,
with s = sign(w):
    driving   (s * tau_r > 0, power flows motor -> link): tau_hd = s * xi / (1 - xi) * |tau_r|
    back-driven (s * tau_r < 0, link drives the motor):    tau_hd = s * xi / (1 + xi) * |tau_r|
so the efficiency is 1 - xi when driving and 1 / (1 + xi) when back-driven (tau_r the torque at
which the law is evaluated; the compiled step evaluates it exactly at the end-of-step torque,
see twin.step_graph).
"""
from __future__ import annotations

import numpy as np

from .step_graph import (Layout, matrices_function, matrices_layout, step_function,  # noqa: F401
                         step_layouts)


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
    kp dt^2 / J >= 0.5. A per-joint first guard only: it ignores the coupling (links through M,
    motor and link through the spring); :func:`check_drive_gains` / :func:`check_rigid_gains`
    check the coupled loop."""
    for label, c, lim in (("pid_kd", kd * dt / J_total, 1.0), ("pid_kp", kp * dt * dt / J_total, 0.5)):
        bad = np.flatnonzero(c >= lim)
        if bad.size:
            j = int(bad[0])
            raise ValueError(f"{label} of joint {joint_names[j]!r} too high for the {dt * 1e3:g} ms "
                             f"loop with inertia {J_total[j]:.3g} kg*m^2 ({c[j]:.2f} >= {lim})")


def rigid_gains(bandwidth_hz: float, damping: float, integral_time_s: float, n: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Default position loop of RIGID joints (drive model off): decoupled (computed-torque style),
    tau_m = M(q) (kp e + kd (qd_cmd - qd) + ki integral(e)) + tau_ff with M the joint-space mass
    matrix (refreshed with the twin's mass_matrix_every), so every joint-space mode sees the same
    acceleration gains kp = w^2 [1/s^2], kd = 2 zeta w [1/s], ki = kp / T_i [1/s^3],
    w = 2 pi bandwidth, whatever the coupling of the links. Returns (kp, ki, kd), each (n,).

    Why not per-joint gains J w^2 as with the drive model: without the reflected rotor inertia the
    loop drives M(q) directly, and M^-1 diag(M) has eigenvalues up to ~23 on the reference arm
    upright (links 2-4 in line): a fast mode then gets 23x the derivative action meant for each
    joint, kd dt lambda / M_ii = 3.5 > 2, and the 1 ms loop diverges (the torque limit cycle at
    +-165 N*m within ~40 ms); see :func:`rigid_loop_map`."""
    wn = 2.0 * np.pi * bandwidth_hz
    kp = np.full(n, wn ** 2)
    return kp, kp / integral_time_s, np.full(n, 2.0 * damping * wn)


def rigid_loop_map(M: np.ndarray, kp: np.ndarray, ki: np.ndarray, kd: np.ndarray, dt: float,
                   Mc: np.ndarray | None = None, G: np.ndarray | None = None) -> np.ndarray:
    """Linearised 1 kHz closed loop of rigid joints holding a set point, as the twin runs it:
    state s = [q - q_cmd, qd, integral(q_cmd - q)] (3n,), s+ = A s with

        tau = Mc (-kp e - kd qd + ki z)          (controller, state at the start of the period)
        qd+ = qd + dt M^-1 (tau - G e)           (PyBullet's semi-implicit Euler, h ~ g0 + G e)
        e+  = e + dt qd+,   z+ = z - dt e        (integral updated with the start-of-step error)

    M (n, n) mass matrix [kg*m^2]; kp, ki, kd (n,) gains (torque gains with Mc = None = identity,
    acceleration gains with Mc = M); G (n, n) gravity stiffness dg/dq [N*m/rad] (None: 0).
    Returns A (3n, 3n); the loop is stable iff its spectral radius is < 1."""
    n = len(kp)
    Minv = np.linalg.inv(M)
    Mc = np.eye(n) if Mc is None else Mc
    F = Minv @ Mc
    Kq = F * kp[None, :] + (0.0 if G is None else Minv @ G)        # M^-1 (Mc kp + G)
    Kv = F * kd[None, :]
    Kz = F * ki[None, :]
    I, O = np.eye(n), np.zeros((n, n))
    Av = np.hstack([-dt * Kq, I - dt * Kv, dt * Kz])                 # qd+
    Ae = np.hstack([I, O, O]) + dt * Av                              # e+ = e + dt qd+
    Az = np.hstack([-dt * I, O, I])
    return np.vstack([Ae, Av, Az])


def _rigid_loop_eigs(M, kp, ki, kd, dt, Mc, G) -> np.ndarray:
    """Eigenvalues of :func:`rigid_loop_map` without the integral states of joints with ki = 0
    (they integrate the error but never act: eigenvalue exactly 1, not an instability)."""
    n = len(kp)
    A = rigid_loop_map(M, kp, ki, kd, dt, Mc, G)
    keep = np.concatenate([np.arange(2 * n), 2 * n + np.flatnonzero(ki != 0)])
    return np.linalg.eigvals(A[np.ix_(keep, keep)])


def _worst_gain(eigs, kp, ki, kd) -> tuple:
    """(radius, joint, gain name, factor) of the single change -- one joint's kp, ki or kd halved
    or doubled -- that lowers the spectral radius of eigs(kp, ki, kd) the most."""
    gains = {"kp": kp, "ki": ki, "kd": kd}
    best = (np.inf, 0, "kd", 0.5)
    for j in range(len(kp)):
        for g in gains:
            for factor in (0.5, 2.0):
                trial = {k: v.copy() for k, v in gains.items()}
                trial[g][j] *= factor
                r = float(np.max(np.abs(eigs(trial["kp"], trial["ki"], trial["kd"]))))
                if r < best[0] - 1e-12:
                    best = (r, j, g, factor)
    return best


def _instability(lam: complex, dt: float) -> str:
    """Plain-words kind of the unstable eigenvalue `lam` of a 1 kHz loop map."""
    if abs(lam.imag) < 1e-12 and lam.real < 0:
        return (f"it oscillates at the loop rate (eigenvalue {lam.real:.3g}): the derivative/"
                f"proportional action is too high for the inertia it drives")
    if abs(lam.imag) < 1e-12:
        return (f"it drifts away (eigenvalue {lam.real:.6g}): the gains are too low to hold "
                f"against gravity")
    return (f"an oscillation grows (|eigenvalue| {abs(lam):.4g}, "
            f"{abs(np.angle(lam)) / dt / 2 / np.pi:.1f} Hz)")


def _check_loop(eigs, kp, ki, kd, dt, joint_names, what: str, inertia: list, where: str) -> float:
    """Spectral radius of the loop with eigenvalue function eigs(kp, ki, kd); >= 1 raises the
    ValueError naming the joint and gain most at fault (:func:`_worst_gain`); inertia[j]: text
    on joint j's inertia for the message."""
    lam = eigs(kp, ki, kd)
    k = int(np.argmax(np.abs(lam)))
    rho = float(np.abs(lam[k]))
    if rho < 1.0:
        return rho
    r_best, j, g, factor = _worst_gain(eigs, kp, ki, kd)
    names = list(joint_names)
    raise ValueError(
        f"{where}position-loop gains unstable {what} at the {dt * 1e3:g} ms step: "
        f"{_instability(lam[k], dt)}; spectral radius {rho:.4g} >= 1 with the coupled dynamics. "
        f"Joint {names[j]!r} is most at fault (kp={kp[j]:.4g}, ki={ki[j]:.4g}, kd={kd[j]:.4g}; "
        f"{inertia[j]}; {'halving' if factor < 1 else 'doubling'} its {g} alone gives "
        f"radius {r_best:.4g}) -- {'lower' if factor < 1 else 'raise'} it (a longer "
        f"pid_integral_time_s tames integral-driven oscillations), or leave pid_kp/pid_ki/pid_kd "
        f"unset for the default loop")


def check_rigid_gains(M: np.ndarray, kp: np.ndarray, ki: np.ndarray, kd: np.ndarray, dt: float,
                      joint_names, Mc: np.ndarray | None = None, G: np.ndarray | None = None,
                      where: str = "") -> float:
    """Refuse a rigid-joint position loop that is unstable at the 1 ms step, coupling included:
    the spectral radius rho of :func:`rigid_loop_map` must be < 1. Returns rho.

    The error names the joint at fault -- the joint and gain (kp, ki or kd) whose halving or
    doubling alone lowers rho the most, and which way to change it -- with its smallest effective
    inertia 1/(M^-1)_jj (the inertia it drives when the other joints move freely, what a per-joint
    design must use) and the kind of instability: an oscillation at the loop rate (real eigenvalue
    < -1: derivative / proportional action too high for the coupled inertia), a growing
    oscillation, or a drift."""
    inv_d = 1.0 / np.diag(np.linalg.inv(M))
    txt = [f"its smallest effective inertia 1/(M^-1)_jj = {inv_d[j]:.3g} kg*m^2, diagonal "
           f"M_jj = {M[j, j]:.3g}" for j in range(len(kp))]
    return _check_loop(lambda a, b, c: _rigid_loop_eigs(M, a, b, c, dt, Mc, G), kp, ki, kd, dt,
                       joint_names, "with rigid joints", txt, where)


def drive_loop_map(A: np.ndarray, kp: np.ndarray, ki: np.ndarray, kd: np.ndarray, K: np.ndarray,
                   dt: float, deflection_compensation: bool, G: np.ndarray | None = None
                   ) -> np.ndarray:
    """Linearised 1 kHz closed loop WITH the drive model holding a set point, friction's
    stick-slip left out (viscous friction is inside A): state s = [q, v, q_m, w, tau_r, integral]
    (6n, deviations from the equilibrium), s+ = L s with

        tau_m = -kp q_m - kd w + kp/K tau_r (deflection compensation) + ki z
        [u, w+, v+, tau_r+, tau_l, q_m+] = A [v, w, q_m, q, tau_m, G q]   (the step's linear map)
        q+ = q + dt v+,   z+ = z - dt q_m + dt/K tau_r (compensation)

    A (6n, 6n): the map of :func:`matrices_function` (TwinSim's p["A"]); kp, ki, kd, K (n,);
    G (n, n) gravity stiffness dg/dq [N*m/rad] (None: 0). Returns L (6n, 6n)."""
    n = len(kp)
    dc = (1.0 / K) if deflection_compensation else np.zeros(n)
    I, O = np.eye(n), np.zeros((n, n))
    D = np.diag
    # tau_m as a row-block map of s = [q, v, qm, w, tau_r, z]
    Tm = np.hstack([O, O, -D(kp), -D(kd), D(kp * dc), D(ki)])
    Gq = O if G is None else G
    Xin = np.vstack([np.hstack([O, I, O, O, O, O]),        # v
                     np.hstack([O, O, O, I, O, O]),        # w
                     np.hstack([O, O, I, O, O, O]),        # q_m
                     np.hstack([I, O, O, O, O, O]),        # q
                     Tm,                                   # tau_m (ripple left out)
                     np.hstack([Gq, O, O, O, O, O])])      # h = G q
    Y = A @ Xin
    w_new, v_new, tau_r_new, qm_new = Y[n:2 * n], Y[2 * n:3 * n], Y[3 * n:4 * n], Y[5 * n:6 * n]
    q_new = np.hstack([I, O, O, O, O, O]) + dt * v_new
    z_new = np.hstack([O, O, -dt * I, O, D(dt * dc), I])
    return np.vstack([q_new, v_new, qm_new, w_new, tau_r_new, z_new])


def check_drive_gains(A: np.ndarray, kp, ki, kd, K, J_r, dt: float, deflection_compensation: bool,
                      joint_names, G: np.ndarray | None = None, where: str = "") -> float:
    """Refuse position-loop gains that make the drive-model loop unstable at the 1 ms step with
    the links coupled through the springs: spectral radius of :func:`drive_loop_map` < 1.
    Returns the radius. :func:`check_gains` (per joint, J'_m + M_ii) misses e.g. a derivative gain
    that is stable on J'_m + M_ii but not on the motor alone, which the spring lets ring (joint 2,
    kd = 2000 N*m*s/rad: kd dt / (J'_m + M_22) = 0.87, yet a +-165 N*m limit cycle)."""
    def eigs(a, b, c):
        return np.linalg.eigvals(drive_loop_map(A, a, b, c, K, dt, deflection_compensation, G))
    txt = [f"its reflected motor inertia J'_m = {J_r[j]:.3g} kg*m^2" for j in range(len(kp))]
    return _check_loop(eigs, kp, ki, kd, dt, joint_names, "with the drive model", txt, where)

