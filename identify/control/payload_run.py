"""Payload identification run: a short wrist excitation optimized on the payload's columns only,
the run, and the fit (:class:`identify.estimation.payload.PayloadFit`) against the known arm.

    tr = wrist_excitation(robot, start, harmonics=3, period_s=10.0)
    res = identify_payload(arm_model, processed, signal="tau_j", truth=payload)

The excitation moves only the wrist joints (the others hold the start pose, but their torque
sensors still see the payload's weight): Fourier coefficients of the wrist joints chosen by
Powell's method to minimise cond of the column-scaled payload regressor (N n, 10) on a grid,
each candidate scaled into the joint limits (velocity, acceleration, position about the start)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from identify.estimation.payload import PayloadFit, from_physical, payload_regressor
from identify.excitation.fourier import FourierTrajectory

from .joint_model import JointModel
from .observer import link_torque_from_motor

__all__ = ["wrist_excitation", "PayloadResult", "identify_payload"]


def _scaled(robot, q0, a, b, wf, moving, limit_scale, t):
    """(FourierTrajectory, (q, qd, qdd) on t) with (a, b) scaled into the limits."""
    n, H = robot.n, a.shape[1]
    A, B = np.zeros((n, H)), np.zeros((n, H))
    A[moving], B[moving] = a, b
    tr = FourierTrajectory.from_free(q0, A, B, wf)
    q, qd, qdd = tr.evaluate(t)
    lim = robot.limits
    s = np.inf
    for j in moving:
        for peak, cap in ((np.max(np.abs(qd[:, j])), lim.qd_max[j]),
                          (np.max(np.abs(qdd[:, j])), lim.qdd_max[j])):
            if peak > 0 and np.isfinite(cap):
                s = min(s, limit_scale * cap / peak)
        dq = q[:, j] - q0[j]
        lo, hi = (lim.q_min[j] - q0[j]) * limit_scale, (lim.q_max[j] - q0[j]) * limit_scale
        if dq.max() > 0:
            s = min(s, hi / dq.max())
        if dq.min() < 0:
            s = min(s, lo / dq.min())
    s = 1.0 if not np.isfinite(s) else s
    tr = FourierTrajectory.from_free(q0, A * s, B * s, wf)
    return tr, tr.evaluate(t)


def wrist_excitation(robot, start, *, harmonics: int = 3, period_s: float = 10.0,
                     wrist: int = 3, limit_scale: float = 0.8, grid: int = 100, seed: int = 0,
                     max_evals: int = 600) -> tuple[FourierTrajectory, float]:
    """(trajectory, cond) of a wrist-only excitation (module doc); start (n,) [rad]; the last
    `wrist` joints move."""
    q0 = np.asarray(start, float)
    moving = list(range(robot.n - wrist, robot.n))
    wf = 2 * math.pi / period_s
    t = np.linspace(0.0, period_s, grid, endpoint=False)
    rng = np.random.default_rng(seed)
    shape = (len(moving), harmonics - 1)          # harmonic 1 completes the rest conditions

    def cost(x):
        a, b = x[:x.size // 2].reshape(shape), x[x.size // 2:].reshape(shape)
        _, (q, qd, qdd) = _scaled(robot, q0, a, b, wf, moving, limit_scale, t)
        A = payload_regressor(robot, q, qd, qdd).reshape(-1, 10)
        sc = np.linalg.norm(A, axis=0)
        if np.any(sc == 0):
            return 1e6
        return float(np.log(np.linalg.cond(A / sc)))

    best = None
    for _ in range(3):
        x0 = rng.normal(size=2 * len(moving) * (harmonics - 1))
        r = minimize(cost, x0, method="Powell", options={"maxfev": max_evals // 3, "xtol": 1e-3})
        if best is None or r.fun < best.fun:
            best = r
    x = best.x
    tr, _ = _scaled(robot, q0, x[:x.size // 2].reshape(shape), x[x.size // 2:].reshape(shape),
                    wf, moving, limit_scale, t)
    tr.meta.update({"kind": "payload wrist excitation", "cond_payload": float(math.exp(best.fun)),
               "moving_joints": [robot.joint_names[j] for j in moving]})
    return tr, float(math.exp(best.fun))


@dataclass
class PayloadResult:
    """identified / std / truth: {"mass_kg", "com_m" (3,), "inertia_kgm2" (6,) about the CoM in
    the flange frame} (truth None off the twin); params / params_std (10,) the flange-frame
    10-vector (std: the larger of the noise std and the block jackknife's, median ratio
    jackknife_ratio); cond: of the fit's weighted regressor; signal; arm_source: where the known arm came
    from; projected: the consistent fit moved the least-squares solution; errors: mass [%], CoM
    [m] against the truth (None without); samples, duration_s, trajectory_cond."""
    identified: dict
    std: dict
    truth: dict | None
    params: np.ndarray
    params_std: np.ndarray
    cond: float
    signal: str
    arm_source: str
    projected: bool
    mass_error_percent: float | None
    com_error_m: float | None
    samples: int
    duration_s: float
    trajectory_cond: float | None = None
    jackknife_ratio: float | None = None
    goal_mass_percent: float = 2.0
    goal_com_m: float = 0.005


def identify_payload(arm_model: JointModel, processed, *, signal: str = "tau_j", truth: dict | None = None,
                     consistent: bool = True, trajectory_cond: float | None = None,
                     min_speed: float = 0.05) -> PayloadResult:
    """Fit the payload on processed data `processed` (identify.estimation.processing.Processed: q, qd,
    qdd, tau_j / tau_m) with the known arm_model `arm_model` (without payload). signal "tau_j": the torque
    sensor against the arm_model's joint torque; "tau_m": the motor torque through the arm_model's drive
    (:func:`identify.control.observer.link_torque_from_motor`). truth: {mass_kg, com_m,
    inertia_kgm2} or None."""
    d = processed
    q, qd, qdd = d.q, d.qd, d.qdd
    if signal == "tau_j":
        if d.tau_j is None:
            raise ValueError("payload.signal tau_j: the recording has no joint torque (tau_j)")
        tau = d.tau_j
    elif signal == "tau_m":
        if d.tau_m is None:
            raise ValueError("payload.signal tau_m: the recording has no motor torque")
        dt = 1.0 / float(d.rate_hz)
        tau = link_torque_from_motor(arm_model, qd, d.tau_m, dt)
    else:
        raise ValueError(f"payload.signal must be tau_j or tau_m, got {signal!r}")
    y = tau - arm_model.joint_torque(q, qd, qdd)
    # a joint slower than min_speed [rad/s] may stick: its friction holds any torque up to the
    # Coulomb level, so those equations are left out (held joints: all of theirs)
    mask = np.abs(qd) >= min_speed
    fit = PayloadFit(consistent=consistent).fit(payload_regressor(arm_model.robot, q, qd, qdd), y,
                                                mask=mask)
    ident = fit.physical_
    err_m = err_c = None
    tdoc = None
    if truth is not None:
        tdoc = {"mass_kg": float(truth["mass_kg"]), "com_m": np.asarray(truth["com_m"], float),
                "inertia_kgm2": np.asarray(truth["inertia_kgm2"], float)}
        err_m = float(100.0 * (ident["mass_kg"] - tdoc["mass_kg"]) / tdoc["mass_kg"])
        err_c = float(np.linalg.norm(ident["com_m"] - tdoc["com_m"]))
        tdoc["params"] = from_physical(**{k: tdoc[k] for k in ("mass_kg", "com_m", "inertia_kgm2")})
    return PayloadResult(identified=ident, std=fit.physical_std_, truth=tdoc, params=fit.params_,
                         params_std=fit.std_, cond=fit.cond_, signal=signal,
                         arm_source=arm_model.source, projected=fit.projected_,
                         mass_error_percent=err_m, com_error_m=err_c, samples=int(q.shape[0]),
                         duration_s=float(d.t[-1] - d.t[0]), trajectory_cond=trajectory_cond,
                         jackknife_ratio=fit.jackknife_ratio_)
