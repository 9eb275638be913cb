"""The twin as a pipeline backend: trajectory in, :class:`identify.recording.Recording` out.

``make_backend(arm, settings)`` is registered under the name "twin" in identify.backend.
``arm = {"urdf": path, "drives": path, "payload": {mass_kg, com_m, inertia_kgm2} | None}``;
``settings`` uses the keys of :class:`twin.config.TwinSettings` (unknown keys -> ValueError).

A run: the trajectory is evaluated on the 1 kHz control grid and checked (finite, joint position /
velocity / acceleration limits) before anything moves; the arm is reset at rest at the
trajectory's start pose, holds it for ``settle_s``, then executes the trajectory ``periods`` times.
Samples are taken every 1000 / sample_rate_hz steps starting at t = 0; the sensors read the truth
``io_delay_s`` earlier. ``Recording.qd`` is the drive's reported velocity: the MOTOR velocity
reflected to the link side (it leads the link velocity by the spring's deflection rate). The recording's ``truth`` holds the true states and every torque
component at the sample instants (see :data:`twin.sim.STATE_CHANNELS`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from identify.recording import Recording

from .config import TwinConfig, TwinSettings
from .sensors import SensorModel
from .sim import STATE_CHANNELS, TwinSim

#: truth channels read by the sensors (kept at the delayed instants)
_SENSOR_SRC = ("q", "tau_r", "tau_m", "qd_m")


class TwinBackend:
    """Runs trajectories on the digital twin (see module doc)."""

    name = "twin"

    def __init__(self, arm: dict, settings: dict | None = None):
        if not isinstance(arm, dict) or "urdf" not in arm or "drives" not in arm:
            raise ValueError(f"twin backend: arm must be a dict with 'urdf' and 'drives' paths, got {arm!r}")
        bad = sorted(set(arm) - {"urdf", "drives", "payload", "name", "qdd_max"})
        if bad:
            raise ValueError(f"twin backend: unknown arm key(s) {bad}")
        self.arm = dict(arm)
        self.cfg = TwinConfig.from_files(arm["urdf"], arm["drives"], payload=arm.get("payload"),
                                         settings=settings, qdd_max=arm.get("qdd_max"))
        self.settings: TwinSettings = self.cfg.settings
        self.sim: TwinSim | None = None

    # -------------------------------------------------------------------------------------------
    def check_trajectory(self, q, qd, qdd, t) -> None:
        """Raise ValueError naming joint, sample and value if the commanded trajectory (N, n) is not
        finite or leaves the joint limits (position, velocity, acceleration)."""
        cfg = self.cfg
        names = cfg.joint_names
        for label, a in (("position", q), ("velocity", qd), ("acceleration", qdd)):
            bad = ~np.isfinite(a)
            if bad.any():
                k, j = np.argwhere(bad)[0]
                raise ValueError(f"commanded {label} is not finite at sample {k} (t = {t[k]:.4f} s), "
                                 f"joint {names[j]!r}: {a[k, j]!r}; nothing was run")
        tol = 1e-9
        checks = (("position", q, cfg.q_min, cfg.q_max, "rad"),
                  ("velocity", qd, -cfg.qd_max, cfg.qd_max, "rad/s"),
                  ("acceleration", qdd, -cfg.qdd_max, cfg.qdd_max, "rad/s^2"))
        for label, a, lo, hi, unit in checks:
            over = (a > hi + tol) | (a < lo - tol)
            if over.any():
                k, j = np.argwhere(over)[0]
                raise ValueError(
                    f"commanded {label} outside the limits of joint {names[j]!r} at sample {k} "
                    f"(t = {t[k]:.4f} s): {a[k, j]:.6g} {unit} not in [{lo[j]:.6g}, {hi[j]:.6g}]; "
                    f"nothing was run")

    def run(self, trajectory, *, periods: int = 1, progress: bool = False,
            tau_ff=None) -> Recording:
        """Execute `trajectory` `periods` times and return the recording.

        Args:
            trajectory: identify.backend.Trajectory (duration [s], n_joints, evaluate(t)).
            periods: repetitions, back to back.
            progress: show a tqdm bar.
            tau_ff: optional torque feed-forward model, a callable (q, qd, qdd) (N, n) -> (N, n)
                [N*m] evaluated on the commanded trajectory (vectorised) and added to the drive's
                position-loop output (checking identified models in closed loop).
        """
        cfg = self.cfg
        s = self.settings
        n = cfg.n
        if int(trajectory.n_joints) != n:
            raise ValueError(f"trajectory has {trajectory.n_joints} joints, the arm has {n} ({cfg.joint_names})")
        periods = int(periods)
        if periods < 1:
            raise ValueError(f"periods must be >= 1, got {periods}")
        dt = cfg.dt
        n_per = int(round(float(trajectory.duration) / dt))
        if n_per < 1:
            raise ValueError(f"trajectory duration {trajectory.duration!r} s is shorter than one 1 ms step")
        N = n_per * periods
        t_one = np.arange(n_per + 1) * dt
        q1, qd1, qdd1 = (np.asarray(a, float) for a in trajectory.evaluate(t_one))
        for name, a in (("q", q1), ("qd", qd1), ("qdd", qdd1)):
            if a.shape != (n_per + 1, n):
                raise ValueError(f"trajectory.evaluate returned {name} of shape {a.shape}, expected "
                                 f"({n_per + 1}, {n})")
        self.check_trajectory(q1, qd1, qdd1, t_one)
        # command grid over all periods: qc[m] is the target of control period m (reached at t_{m+1})
        idx = np.concatenate([np.arange(n_per)] * periods + [[n_per]])
        qc = q1[idx]
        ff = None
        if tau_ff is not None:
            ff1 = np.asarray(tau_ff(q1, qd1, qdd1), float)
            if ff1.shape != (n_per + 1, n) or not np.all(np.isfinite(ff1)):
                raise ValueError(f"tau_ff returned shape {ff1.shape} or non-finite values; expected "
                                 f"finite ({n_per + 1}, {n})")
            ff = ff1[idx]

        stride = int(round(1000.0 / float(s.sample_rate_hz)))
        delay = int(round(float(s.io_delay_s) / dt))
        sample_steps = np.arange(0, N, stride)
        n_s = sample_steps.size
        truth = {c: np.empty((n_s, n)) for c in STATE_CHANNELS}
        truth["i_m"] = np.empty((n_s, n))
        src = {c: np.empty((n_s, n)) for c in _SENSOR_SRC}
        truth_slot = {int(m): j for j, m in enumerate(sample_steps)}
        src_slot: dict[int, list] = {}
        for j, m in enumerate(sample_steps):
            src_slot.setdefault(int(m) - delay, []).append(j)

        self.close()
        self.sim = sim = TwinSim(cfg)
        try:
            sim.reset(q1[0])
            for _ in range(int(round(s.settle_s / dt))):
                sim.advance(q1[0])
            # truth/sensor rows for sensor reads before t = 0 come from the settled rest state
            pre = [j for m, js in src_slot.items() if m < 0 for j in js]
            if pre:
                st = sim.state()
                for c in _SENSOR_SRC:
                    src[c][pre] = getattr(st, c)
            rng = range(N)
            if progress:
                from tqdm import tqdm
                rng = tqdm(rng, desc="twin", unit="ms", mininterval=0.5)
            for m in rng:
                j = truth_slot.get(m)
                if j is not None:
                    self._store(truth, j)
                js = src_slot.get(m)
                if js is not None:
                    for jj in js:
                        src["q"][jj] = sim.q
                        src["tau_r"][jj] = sim.tau_r
                        src["tau_m"][jj] = sim.tau_m
                        src["qd_m"][jj] = sim.w
                sim.advance(qc[m + 1], None if ff is None else ff[m + 1])
        except ValueError as exc:
            raise ValueError(f"twin run stopped at control step {sim.k} (t = {sim.t:.3f} s): {exc}") from exc
        finally:
            sim.close()
            self.sim = None

        t = sample_steps * dt
        sensors = SensorModel(s, cfg.joint_names)
        src_i = src["tau_m"] / cfg.drives.torque_factor
        q_meas, tau_meas, i_meas = sensors.sample({"q": src["q"], "tau_r": src["tau_r"], "i_m": src_i}, t=t)
        qd_meas = sensors.sample_velocity(src["qd_m"])
        truth["i_m"] = truth["tau_m"] / cfg.drives.torque_factor
        meta = {
            "backend": "twin",
            "arm": {"urdf": str(cfg.urdf), "drives": str(cfg.drives_path), "payload": cfg.payload},
            "seed": int(s.seed),
            "settings": _jsonable(s.to_dict()),
            "trajectory": {"duration_s": float(trajectory.duration), "periods": periods,
                           "type": type(trajectory).__name__},
            "control_rate_hz": 1.0 / dt,
            "omega_dt_max": sim.omega_dt,
            "truth_note": "ground truth of the simulator; identification code must not read it",
        }
        return Recording(t=t, q=q_meas, tau_j=tau_meas, i_m=i_meas,
                         tau_m=i_meas * cfg.drives.torque_factor, q_cmd=q1[idx[sample_steps]], qd=qd_meas,
                         rate_hz=float(s.sample_rate_hz), joint_names=list(cfg.joint_names),
                         meta=meta, truth=truth)

    def _store(self, truth: dict, j: int) -> None:
        sim = self.sim
        truth["q"][j] = sim.q
        truth["qd"][j] = sim.v
        truth["q_m"][j] = sim.qm
        truth["qd_m"][j] = sim.w
        for c in STATE_CHANNELS:
            if c not in ("q", "qd", "q_m", "qd_m", "i_m"):
                truth[c][j] = getattr(sim, c)

    def close(self) -> None:
        if self.sim is not None:
            self.sim.close()
            self.sim = None


def _jsonable(d):
    if isinstance(d, dict):
        return {str(k): _jsonable(v) for k, v in d.items()}
    if isinstance(d, (list, tuple)):
        return [_jsonable(v) for v in d]
    if isinstance(d, np.ndarray):
        return d.tolist()
    if isinstance(d, (np.floating, np.integer)):
        return d.item()
    if isinstance(d, Path):
        return str(d)
    return d


def make_backend(arm: dict, settings: dict | None = None) -> TwinBackend:
    """Factory registered as "twin" in identify.backend.BACKENDS."""
    return TwinBackend(arm, settings)
