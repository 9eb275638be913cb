"""Generalized-momentum collision observer (De Luca & Mattone 2003; Haddadin et al. 2017) and
its per-joint thresholds.

Link-side momentum p = (M(q) + diag(armature)) qd obeys

    dp/dt = tau_r - f(qd) - beta(q, qd) + tau_ext,   beta = g(q) - C(q, qd)^T qd = h(q, qd) - Mdot qd

(h = C qd + g the bias, Mdot + ... the skew-symmetry identity Mdot = C + C^T, f the joint
terms viscous*qd + coulomb*shape(qd) + offset). The residual

    r = K_O (p(t) - p(0) - int_0^t (tau_r - f - beta + r) ds)

is a first-order low-pass (time constant 1/K_O) of tau_ext and needs no acceleration. The
link torque tau_r is measured by the joint torque sensor (``signal="tau_j"``) or estimated from
the motor torque (``signal="tau_m"``, eta*beta*i): tau_r = (1 - Mxi) (tau_m - f_mc shape(qd) -
f_mv qd - J_m qdd_f), with qdd_f the causal filtered derivative of the measured velocity (only
the rotor inertia's small share needs it).

Discrete form at the sample period dt (aligned samples: torque held during [t_k, t_k + dt)):
r_k = (1 - K_O dt) r_{k-1} + K_O (p_k - p_{k-1} - dt u_{k-1}), u = tau_r - f - beta; vectorised
with scipy.signal.lfilter."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

from .joint_model import JointModel, shape

__all__ = ["mass_matrix", "momentum_terms", "link_torque_from_motor", "residual", "Thresholds",
           "thresholds", "alarms", "stiction_band", "rest_mask", "rest_referenced"]


def mass_matrix(model: JointModel, q: np.ndarray) -> np.ndarray:
    """Joint-space mass matrix M(q) (N, n, n) of the model's rigid body (no armature), one
    regressor call per column: M e_j = ID(q, 0, e_j) - ID(q, 0, 0)."""
    q = np.atleast_2d(np.asarray(q, float))
    N, n = q.shape
    z = np.zeros_like(q)
    g = model.robot.inverse_dynamics(q, z, z)
    M = np.empty((N, n, n))
    for j in range(n):
        e = np.zeros_like(q)
        e[:, j] = 1.0
        M[:, :, j] = model.robot.inverse_dynamics(q, z, e) - g
    return M


def momentum_terms(model: JointModel, q: np.ndarray, qd: np.ndarray, eps: float = 1e-6):
    """(p, beta) (N, n): momentum (M(q) + diag(armature)) qd [N*m*s] and beta = h(q, qd) - Mdot qd
    [N*m], Mdot qd by a central difference of M along the motion (step eps*qd [rad])."""
    q, qd = np.atleast_2d(q), np.atleast_2d(qd)
    M = mass_matrix(model, q)
    p = np.einsum("Nij,Nj->Ni", M, qd) + model.armature * qd
    dM = (mass_matrix(model, q + eps * qd) - mass_matrix(model, q - eps * qd)) / (2 * eps)
    h = model.robot.inverse_dynamics(q, qd, np.zeros_like(q))
    beta = h - np.einsum("Nij,Nj->Ni", dM, qd)
    return p, beta


def _filtered_derivative(x: np.ndarray, dt: float, cutoff_hz: float) -> np.ndarray:
    """Causal derivative of x (N, n) low-passed at cutoff_hz (first order), zero at k = 0."""
    d = np.vstack([np.zeros((1, x.shape[1])), np.diff(x, axis=0) / dt])
    a = np.exp(-2 * np.pi * cutoff_hz * dt)
    return lfilter([1 - a], [1, -a], d, axis=0)


def link_torque_from_motor(model: JointModel, qd: np.ndarray, tau_m: np.ndarray, dt: float,
                           accel_cutoff_hz: float = 20.0, with_input: bool = False):
    """Link torque tau_r (N, n) [N*m] estimated from the measured motor torque tau_m (N, n) through
    the model's drive (module doc); tau_m itself for a model without a motor side.
    with_input: return (tau_r, tau_in), tau_in the reducer's input torque estimate."""
    if not model.motor_side:
        tau_m = np.asarray(tau_m, float)
        return (tau_m, tau_m) if with_input else tau_m
    qdd_f = _filtered_derivative(qd, dt, accel_cutoff_hz)
    tau_in = (tau_m - model.f_mc * shape(qd, model.coulomb_scale) - model.f_mv * qd
              - model.J_m * qdd_f)
    tau_r = (1.0 - model.reducer_multiplier(qd, tau_in)) * tau_in
    return (tau_r, tau_in) if with_input else tau_r


def residual(model: JointModel, t: np.ndarray, q: np.ndarray, qd: np.ndarray,
             tau_r: np.ndarray, gain: float) -> np.ndarray:
    """Observer residual r (N, n) [N*m], an estimate of the external joint torque.

    Args: t (N,) [s] uniform; q, qd (N, n) measured [rad, rad/s]; tau_r (N, n) the link torque
    (measured or :func:`link_torque_from_motor`) [N*m]; gain K_O [1/s] (1/K_O the time constant;
    K_O * dt < 1)."""
    t = np.asarray(t, float)
    dt = float(np.median(np.diff(t)))
    if not gain * dt < 1.0:
        raise ValueError(f"observer gain {gain} 1/s is too high for the sample period {dt} s "
                         f"(needs gain * dt < 1)")
    p, beta = momentum_terms(model, q, qd)
    f = model.viscous * qd + model.coulomb * shape(qd, model.coulomb_scale) + model.offset
    u = tau_r - f - beta
    dz = np.zeros_like(p)
    dz[1:] = p[1:] - p[:-1] - dt * u[:-1]
    return lfilter([gain], [1.0, -(1.0 - gain * dt)], dz, axis=0)


def stiction_band(model: JointModel, t: np.ndarray, qd: np.ndarray, tau_in: np.ndarray | None,
                  gain: float, speed: float) -> np.ndarray:
    """Time-varying part of the thresholds (N, n) [N*m]: what the friction model cannot know near
    a velocity reversal, passed through the observer's own low-pass.

    While a joint sticks or reverses, its Coulomb-type friction (link Coulomb; with the motor
    torque also the motor Coulomb and the reducer's load-dependent loss xi_opp*|tau_in|) is
    anywhere within +-F, the model says F*shape(qd): the input error is at most
    w = 2 F (1 - |tanh(qd / speed)|), and the residual's share of it at most
    K_O / (s + K_O) applied to w. speed <= 0: no band."""
    qd = np.asarray(qd, float)
    if speed <= 0:
        return np.zeros_like(qd)
    F = np.abs(model.coulomb) + np.zeros_like(qd)
    if tau_in is not None and model.motor_side:
        F = F + np.abs(model.f_mc) + np.abs(model.xi_opp) * np.abs(tau_in)
    w = 2.0 * F * (1.0 - np.abs(np.tanh(qd / speed)))
    dt = float(np.median(np.diff(np.asarray(t, float))))
    return lfilter([gain * dt], [1.0, -(1.0 - gain * dt)], w, axis=0)


@dataclass
class Thresholds:
    """Per-joint alarm thresholds [N*m] from a collision-free run: value = max(k_sigma*sigma,
    peak_factor*peak) + margin, sigma the RMS and peak the largest |r| of that run's residual."""
    value: np.ndarray
    sigma: np.ndarray
    peak: np.ndarray
    k_sigma: float
    peak_factor: float
    margin_Nm: float


def thresholds(r_free: np.ndarray, k_sigma: float = 5.0, peak_factor: float = 1.2,
               margin_Nm: float = 0.1, band: np.ndarray | None = None) -> Thresholds:
    """Static thresholds (n,) from the residual r_free (N, n) of a collision-free run; with the
    run's :func:`stiction_band` the part of |r| it explains is not counted (the band is added back
    sample by sample when the alarms are checked)."""
    r = np.asarray(r_free, float)
    if band is not None:
        r = np.sign(r) * np.maximum(np.abs(r) - band, 0.0)
    sigma = np.sqrt(np.mean(r ** 2, axis=0))
    peak = np.max(np.abs(r), axis=0)
    val = np.maximum(k_sigma * sigma, peak_factor * peak) + margin_Nm
    return Thresholds(val, sigma, peak, float(k_sigma), float(peak_factor), float(margin_Nm))


def alarms(r: np.ndarray, threshold: np.ndarray, band: np.ndarray | None = None) -> np.ndarray:
    """(N,) bool: any joint's |r| above its threshold (n,) (+ the time-varying band (N, n))."""
    th = threshold if band is None else threshold + band
    return np.any(np.abs(r) > th, axis=1)



def rest_mask(q_cmd: np.ndarray, dt: float, settle_s: float, tol_rad: float = 1e-7) -> np.ndarray:
    """(N,) bool: the whole arm has been commanded still (every joint's set point within tol_rad
    [rad] of its value) for the last settle_s [s] -- causal, from the set points q_cmd (N, n)
    the controller knows. settle_s <= 0: never."""
    q = np.asarray(q_cmd, float)
    N = q.shape[0]
    W = int(round(settle_s / dt))
    if settle_s <= 0 or W >= N:
        return np.zeros(N, bool)
    moved = np.zeros(N, bool)
    moved[1:] = np.any(np.abs(np.diff(q, axis=0)) > tol_rad, axis=1)
    last_move = np.maximum.accumulate(np.where(moved, np.arange(N), 0))   # last move index
    return (np.arange(N) - last_move) >= W


def rest_referenced(r: np.ndarray, rest: np.ndarray) -> np.ndarray:
    """The residual (N, n) with, on each rest episode of `rest` (N,), its value at the episode's
    first sample subtracted: the friction state at standstill. A joint at rest keeps the
    friction its last motion left (stick, presliding), anywhere within +-F and unknown to the
    model -- but constant while nothing moves: after the settle time the residual holds that
    friction's error, and a contact shows as a change from it."""
    r = np.asarray(r, float)
    rest = np.asarray(rest, bool)
    start = rest & ~np.concatenate([[False], rest[:-1]])
    idx = np.maximum.accumulate(np.where(start, np.arange(rest.size), 0))
    return np.where(rest[:, None], r - r[idx], r)
