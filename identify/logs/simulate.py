"""Simulated logs of any serial arm, in every format ``twinid fit`` reads -- to try the import on
an arm before its real logs exist, and to test it against a known truth.

    python -m identify.logs.simulate URDF OUT_DIR [--joints j1 j2 ...] [--format ur_rtde]
        [--signals tau_m|tau_j|both] [--duration 30] [--rate 500] [--seed 0]

The motion is a sum of sines per joint inside 60 % of the URDF's position limits (velocity and
acceleration moderate); the torques are the URDF's rigid body (RNEA) plus, per joint, the terms
of :mod:`identify.model.joint_sidecar` (viscous, Coulomb with a tanh shape, offset, armature),
plus Gaussian noise:

    tau_j = RNEA + viscous_l*qd + coulomb_l*tanh(qd/0.02) + offset_l           (joint torque sensor)
    tau_m = RNEA + armature*qdd + viscous*qd + coulomb*tanh(qd/0.02) + offset  (motor side)
    i_m   = tau_m / gain                                                       (currents, gain eta*beta)

The truth (``truth.yaml``: inertial parameters, per-joint terms of each signal, gains) is written
next to the log. Formats: ``csv`` (header ``t, q_<j>, qd_<j>, tau_j_<j>, i_m_<j>``),
``ur_rtde`` (space separated, ``timestamp actual_q_<j> actual_qd_<j> actual_current_<j>``),
``libfranka`` (``time, q_<j>, dq_<j>, tau_J_<j>``), ``npz`` (2-D arrays ``t q qd tau_j i_m``),
``text_per_signal`` (``time.txt``, ``q.txt``, ``qd.txt``, ``tau_j.txt``, ``i_m.txt``: one value
per line, n lines per sample), ``rosbag2`` (a bag folder ``bag/``, MCAP: ``/joint_states`` with
position, velocity and the joint torque as effort, ``/motor_currents`` with the currents as
effort; needs ``twinid[ros]``).
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = ["SimulatedLog", "simulate", "write_log", "FORMATS"]

FORMATS = ("csv", "ur_rtde", "libfranka", "npz", "text_per_signal", "rosbag2")
TANH_SCALE = 0.02


@dataclass
class SimulatedLog:
    """t (N,) [s]; q, qd, qdd (N, n); tau_j, tau_m, i_m (N, n) or None; truth: dict."""
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau_j: np.ndarray | None
    tau_m: np.ndarray | None
    i_m: np.ndarray | None
    joint_names: list
    truth: dict


def _motion(model, t, rng, harmonics=4, period=None):
    n = model.n
    lo = np.where(np.isfinite(model.limits.q_min), model.limits.q_min, -np.pi)
    hi = np.where(np.isfinite(model.limits.q_max), model.limits.q_max, np.pi)
    mid, half = 0.5 * (lo + hi), 0.3 * np.minimum(hi - lo, 2 * np.pi)
    period = period or max(8.0, min(20.0, float(t[-1] - t[0]) or 8.0))
    w = 2 * np.pi / period * np.arange(1, harmonics + 1)
    q = np.zeros((t.size, n))
    qd = np.zeros_like(q)
    qdd = np.zeros_like(q)
    for j in range(n):
        a = rng.normal(size=harmonics) / np.arange(1, harmonics + 1)
        ph = rng.uniform(0, 2 * np.pi, harmonics)
        arg = t[:, None] * w[None, :] + ph
        s = np.abs(a).sum()
        a = a / s * half[j]
        q[:, j] = mid[j] + np.sin(arg) @ a
        qd[:, j] = np.cos(arg) @ (a * w)
        qdd[:, j] = -np.sin(arg) @ (a * w ** 2)
    return q, qd, qdd


def simulate(model, *, duration_s=30.0, rate_hz=500.0, signals="both", seed=0,
             noise_q=1e-5, noise_tau=0.02, noise_i=0.005, chunk=200_000) -> SimulatedLog:
    """Simulate a log of `model` (RobotModel). signals: "tau_m" (currents), "tau_j" or "both"."""
    rng = np.random.default_rng(seed)
    n = model.n
    N = int(round(duration_s * rate_hz))
    t = np.arange(N) / rate_hz
    q, qd, qdd = _motion(model, t, rng)
    rigid = np.empty((N, n))
    for a in range(0, N, chunk):                  # bounded memory for long logs
        b = min(N, a + chunk)
        rigid[a:b] = model.inverse_dynamics(q[a:b], qd[a:b], qdd[a:b])
    # friction sizes from the arm, not the motion (the same arm in every log): gravity torque
    # RMS over 50 poses of a fixed seed
    qs, _, _ = _motion(model, np.linspace(0.0, 20.0, 50), np.random.default_rng(12345))
    z = np.zeros_like(qs)
    scale = np.maximum(np.sqrt(np.mean(model.inverse_dynamics(qs, z, z) ** 2, axis=0)), 1.0)
    link = {"viscous": 0.02 * scale, "coulomb": 0.03 * scale, "offset": 0.01 * scale,
            "armature": np.zeros(n)}
    motor = {"viscous": 0.1 * scale, "coulomb": 0.08 * scale, "offset": 0.03 * scale,
             "armature": 0.02 * np.linspace(1.0, 0.3, n)}
    gains = np.round(np.linspace(12.0, 4.0, n), 3)

    def terms(p):
        return (p["armature"] * qdd + p["viscous"] * qd + p["coulomb"] * np.tanh(qd / TANH_SCALE)
                + p["offset"])
    tau_j = tau_m = i_m = None
    if signals in ("tau_j", "both"):
        tau_j = rigid + terms(link) + noise_tau * rng.normal(size=(N, n))
    if signals in ("tau_m", "both"):
        tau_m = rigid + terms(motor)
        i_m = tau_m / gains + noise_i * rng.normal(size=(N, n))
        tau_m = i_m * gains
    qn = q + noise_q * rng.normal(size=q.shape)
    truth = {"inertial": model.inertial_parameters().tolist(), "gains": gains.tolist(),
             "coulomb_shape": "tanh", "coulomb_velocity_scale": TANH_SCALE,
             "joint_torque_terms": {k: v.tolist() for k, v in link.items()},
             "motor_torque_terms": {k: v.tolist() for k, v in motor.items()},
             "joint_names": list(model.joint_names), "signals": signals}
    return SimulatedLog(t, qn, qd + 0.0, qdd, tau_j, tau_m, i_m, list(model.joint_names), truth)


def write_log(log: SimulatedLog, out_dir, fmt: str = "csv", *, time_scale: float = 1.0,
              degrees: bool = False) -> Path:
    """Write `log` into `out_dir` in format `fmt` (see module docstring); returns the file to
    name in ``fit.*.file``. time_scale / degrees write stamps in 1/time_scale units and
    positions in degrees (to exercise the unit keys)."""
    import yaml
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    n = len(log.joint_names)
    t = log.t / time_scale
    q = np.rad2deg(log.q) if degrees else log.q
    qd = np.rad2deg(log.qd) if degrees else log.qd
    cols: list[tuple[str, np.ndarray]] = []

    def fam(base, a):
        if a is not None:
            cols.extend((f"{base}_{j}", a[:, j]) for j in range(n))
    if fmt in ("csv", "ur_rtde", "libfranka"):
        names = {"csv": ("t", "q", "qd", "tau_j", "i_m"),
                 "ur_rtde": ("timestamp", "actual_q", "actual_qd", None, "actual_current"),
                 "libfranka": ("time", "q", "dq", "tau_J", None)}[fmt]
        cols.append((names[0], t))
        fam(names[1], q)
        fam(names[2], qd)
        if names[3]:
            fam(names[3], log.tau_j)
        if names[4]:
            fam(names[4], log.i_m)
        sep = " " if fmt == "ur_rtde" else ","
        path = out / f"log_{fmt}.csv"
        data = np.column_stack([c for _, c in cols])
        np.savetxt(path, data, delimiter=sep, fmt="%.10g", header=sep.join(k for k, _ in cols),
                   comments="")
    elif fmt == "npz":
        path = out / "log.npz"
        arrays = {"t": t, "q": q, "qd": qd}
        for k in ("tau_j", "i_m"):
            if getattr(log, k) is not None:
                arrays[k] = getattr(log, k)
        np.savez(path, **arrays)
    elif fmt == "text_per_signal":
        np.savetxt(out / "time.txt", t, fmt="%.10g")
        for k, a in (("q", q), ("qd", qd), ("tau_j", log.tau_j), ("i_m", log.i_m)):
            if a is not None:
                np.savetxt(out / f"{k}.txt", a.reshape(-1), fmt="%.10g")
        path = out / "q.txt"
    elif fmt == "rosbag2":
        from .rosbag import write_joint_states
        path = out / "bag"
        if path.exists():
            raise ValueError(f"{path} exists already; a bag is written into a new folder")
        topics = {"/joint_states": {"position": q, "velocity": qd, "effort": log.tau_j}}
        if log.i_m is not None:
            topics["/motor_currents"] = {"effort": log.i_m}
        write_joint_states(path, t, log.joint_names, topics)
    else:
        raise ValueError(f"unknown format {fmt!r}; choose from {FORMATS}")
    (out / "truth.yaml").write_text(yaml.safe_dump(log.truth, sort_keys=False))
    return path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m identify.logs.simulate",
                                 description=__doc__.split("\n\n")[0])
    ap.add_argument("urdf")
    ap.add_argument("out_dir")
    ap.add_argument("--joints", nargs="*", default=None)
    ap.add_argument("--format", choices=FORMATS, default="csv")
    ap.add_argument("--signals", choices=("tau_m", "tau_j", "both"), default="both")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=500.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    from identify.model.robot_model import RobotModel
    model = RobotModel.from_urdf(a.urdf, a.joints)
    path = write_log(simulate(model, duration_s=a.duration, rate_hz=a.rate, signals=a.signals,
                              seed=a.seed), a.out_dir, a.format)
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
