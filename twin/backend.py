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


import numpy as np

from identify.recording import Recording

from identify.jsonutil import to_jsonable
from .config import TwinConfig, TwinSettings
from .sensors import SensorModel
from .sim import TwinSim


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
        # Each run on the arm gets fresh sensor noise (a real arm never repeats its noise); run k
        # of a backend uses noise_seed(k), so a new backend with the same seed repeats bit for bit.
        self.runs_done = 0

    def noise_seed(self, k: int) -> int:
        """Seed of the sensor noise of this backend's run k (0-based): run 0 uses the settings'
        seed itself, later runs independent streams derived from (seed, k)."""
        if k == 0:
            return int(self.settings.seed)
        return int(np.random.SeedSequence([int(self.settings.seed), k]).generate_state(1)[0])

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
        # the state is copied as one flat row (TwinSim.snapshot) at the sample instants and, with
        # an I/O delay, at the delayed sensor instants; channels are unpacked in one batch after
        # the run
        n_src = n_s if delay else 0
        events: dict[int, list] = {}
        for j, m in enumerate(sample_steps):
            events.setdefault(int(m), []).append(j)
            if delay:
                events.setdefault(int(m) - delay, []).append(n_s + j)

        self.close()
        self.sim = sim = TwinSim(cfg)
        raw = np.empty((n_s + n_src, sim.snapshot_size))
        bar = None
        try:
            sim.reset(q1[0])
            for _ in range(int(round(s.settle_s / dt))):
                sim.advance(q1[0])
            # sensor reads before t = 0 come from the settled rest state
            for m in [m for m in events if m < 0]:
                for r in events.pop(m):
                    sim.snapshot(raw[r])
            if progress:
                from tqdm import tqdm
                bar = tqdm(total=N, desc="twin", unit="ms", mininterval=0.5)
            get, snap, advance = events.get, sim.snapshot, sim.advance
            chunk = 4096                 # commands handed over as row lists, a chunk at a time
            for m0 in range(0, N, chunk):
                m1 = min(m0 + chunk, N)
                cmd = list(qc[m0 + 1:m1 + 1])
                ffl = [None] * (m1 - m0) if ff is None else list(ff[m0 + 1:m1 + 1])
                for m, q_c, f_c in zip(range(m0, m1), cmd, ffl):
                    rows = get(m)
                    if rows is not None:
                        for r in rows:
                            snap(raw[r])
                    advance(q_c, f_c)
                if bar is not None:
                    bar.update(m1 - m0)
        except ValueError as exc:
            raise ValueError(f"twin run stopped at control step {sim.k} (t = {sim.t:.3f} s): {exc}") from exc
        finally:
            if bar is not None:
                bar.close()
            sim.close()
            self.sim = None
        truth = sim.channels(raw[:n_s])
        src = sim.channels(raw[n_s:]) if delay else truth

        t = sample_steps * dt
        noise_seed = self.noise_seed(self.runs_done)
        self.runs_done += 1
        sensors = SensorModel(s, cfg.joint_names, seed=noise_seed)
        src_i = src["tau_m"] / cfg.drives.torque_factor
        q_meas, tau_meas, i_meas = sensors.sample({"q": src["q"], "tau_r": src["tau_r"], "i_m": src_i}, t=t)
        qd_meas = sensors.sample_velocity(src["qd_m"])
        meta = {
            "backend": "twin",
            "arm": {"urdf": str(cfg.urdf), "drives": str(cfg.drives_path), "payload": cfg.payload},
            "seed": int(s.seed),
            "noise_seed": noise_seed,
            "run_index": self.runs_done - 1,
            "settings": to_jsonable(s.to_dict(), nonfinite="keep"),
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

    def close(self) -> None:
        if self.sim is not None:
            self.sim.close()
            self.sim = None


def make_backend(arm: dict, settings: dict | None = None) -> TwinBackend:
    """Factory registered as "twin" in identify.backend.BACKENDS."""
    return TwinBackend(arm, settings)
