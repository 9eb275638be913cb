"""The twin as a pipeline backend: trajectory in, :class:`identify.backend.recording.Recording` out.

``make_backend(arm, settings)`` is registered under the name "twin" in identify.backend.interface.
``arm``: an :class:`identify.backend.arm.BackendArm` (or a mapping of its keys) with ``urdf`` and
``drives``, optionally ``payload``, ``joints`` and ``qdd_max``; ``settings`` uses the keys of
:class:`twin.config.TwinSettings` (unknown keys -> ValueError).

Joint subset (``arm.joints``, as ``RobotModel.from_urdf(joints=...)``): the twin still
simulates the whole arm; the joints outside the subset are commanded to hold 0 rad (their drive's
position loop holds them there, physically like a locked joint -- they deflect only by their
spring and tracking error, reported in ``meta["held_joints"]``). Trajectories then have one column
per subset joint (in the URDF's chain order, like the model's joint_names), and the Recording
holds only the subset's columns (``joint_names`` = the subset, ``truth`` likewise). 0 rad must lie
within every held joint's position limits. ``qdd_max`` may be given for the full arm or for the
subset (then the other joints keep the default).

A run: the trajectory is evaluated on the 1 kHz control grid and checked (finite, joint position /
velocity / acceleration limits) before anything moves; the arm is reset at rest at the
trajectory's start pose, holds it for ``settle_s``, then executes the trajectory ``periods`` times.
Samples are taken every 1000 / sample_rate_hz steps starting at t = 0. Sample k is ALIGNED
(identify.backend.recording defines the instants): every field refers to t_k, the start of the 1 ms
control period [t_k, t_k + dt) -- positions and velocities at t_k, torques and currents as held
during that period, qdd the period's acceleration (:meth:`twin.sim.TwinSim.channels`). The
sensors read that aligned sample ``io_delay_s`` earlier (a deliberate, uniform delay of every
measured field; truth is never delayed). ``Recording.qd`` is the drive's reported velocity: the
MOTOR velocity reflected to the link side (it leads the link velocity by the spring's deflection
rate). The recording's ``truth`` holds the true states and every torque component of the same
aligned samples (see :data:`twin.readout.STATE_CHANNELS`).
"""
from __future__ import annotations


import numpy as np

from identify.backend.arm import BackendArm
from identify.backend.recording import Recording
from identify.backend.clearance import check_clearance

from identify.common.jsonutil import to_jsonable
from .config import TwinConfig, TwinSettings
from .sensors import SensorModel
from .sim import TwinSim
from .truth import drive_truth


class TwinBackend:
    """Runs trajectories on the digital twin (see module doc)."""

    name = "twin"

    def __init__(self, arm: BackendArm | dict, settings: dict | None = None):
        arm = BackendArm.of(arm, "twin backend: arm")
        if arm.urdf is None or arm.drives is None:
            raise ValueError(f"twin backend: the arm needs its 'urdf' and 'drives' paths, got {arm!r}")
        self.arm = arm
        from identify.model.urdf import load_chain
        all_names = list(load_chain(arm.urdf).joint_names)
        self.active = _subset_indices(arm.joints, all_names, arm.urdf)
        qdd_max = arm.qdd_max
        sub_qdd = None
        if qdd_max is not None and self.active.size < len(all_names):
            q_arr = np.asarray(qdd_max, float).reshape(-1)
            if q_arr.size == self.active.size:        # given for the subset only
                sub_qdd, qdd_max = q_arr, None
        self.cfg = TwinConfig.from_files(arm.urdf, arm.drives, payload=arm.payload,
                                         settings=settings, qdd_max=qdd_max)
        if sub_qdd is not None:
            self.cfg.qdd_max = self.cfg.qdd_max.copy()
            self.cfg.qdd_max[self.active] = sub_qdd
        self.held = np.setdiff1d(np.arange(self.cfg.n), self.active)
        for j in self.held:
            lo, hi = self.cfg.q_min[j], self.cfg.q_max[j]
            if not lo <= 0.0 <= hi:
                raise ValueError(f"twin backend: joint {self.cfg.joint_names[j]!r} is not in "
                                 f"arm.joints and would be held at 0 rad, outside its limits "
                                 f"[{lo:.6g}, {hi:.6g}] rad")
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

    @property
    def joint_names(self) -> list:
        """Joints a trajectory drives and a Recording holds (the subset, chain order)."""
        return [self.cfg.joint_names[j] for j in self.active]

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
            trajectory: identify.backend.interface.Trajectory (duration [s], n_joints, evaluate(t)).
            periods: repetitions, back to back.
            progress: show a tqdm bar.
            tau_ff: optional torque feed-forward model, a callable (q, qd, qdd) (N, n) -> (N, n)
                [N*m] evaluated on the commanded trajectory (vectorised) and added to the drive's
                position-loop output (checking identified models in closed loop).
        """
        cfg, s = self.cfg, self.settings
        dt = cfg.dt
        periods = int(periods)
        if periods < 1:
            raise ValueError(f"periods must be >= 1, got {periods}")
        q1, sub, idx, ff, n_per = self._commands(trajectory, periods, tau_ff)
        N = n_per * periods
        stride = int(round(1000.0 / float(s.sample_rate_hz)))
        delay = int(round(float(s.io_delay_s) / dt))
        sample_steps = np.arange(0, N, stride)
        # One call of TwinSim.run for the settle periods (hold q1[0], no feed-forward) and the
        # trajectory. Sample m is the aligned sample of the period starting at t_m (period
        # n_settle + m of the run, TwinSim.channels), the sensors' delayed reads those of the
        # periods `delay` earlier; reads before the first period are the reset state at rest.
        n_settle = int(round(s.settle_s / dt))
        n = cfg.n
        qc = q1[idx]
        cmd = np.concatenate([np.broadcast_to(q1[0], (n_settle, n)), qc[1:N + 1]])
        ffs = None if ff is None else np.concatenate([np.zeros((n_settle, n)), ff[1:N + 1]])
        periods_at = n_settle + (np.concatenate([sample_steps, sample_steps - delay]) if delay
                                 else sample_steps)
        raw, sim = self._simulate(q1[0], cmd, ffs, periods_at, n_settle, progress)
        n_s = sample_steps.size
        truth = sim.channels(raw[:n_s])
        src = sim.channels(raw[n_s:]) if delay else truth
        return self._recording(trajectory, periods, sample_steps, delay, q1[idx[sample_steps]],
                               truth, src, sim)

    def _commands(self, trajectory, periods: int, tau_ff):
        """The commanded motion on the 1 ms grid, checked: (q1, sub, idx, ff, n_per) -- one period
        of q (n_per + 1, n) of every joint (those outside the subset at 0), the trajectory's own
        (q, qd, qdd) of the driven joints, the command index over all periods (qc[m] = q1[idx[m]]
        is the target of control period m, reached at t_{m+1}), the feed-forward on that grid
        ((N + 1, n) or None), samples per period."""
        cfg = self.cfg
        n, act = cfg.n, self.active
        k_act = act.size
        if int(trajectory.n_joints) != k_act:
            raise ValueError(f"trajectory has {trajectory.n_joints} joints, the twin backend drives "
                             f"{k_act} ({self.joint_names})")
        n_per = int(round(float(trajectory.duration) / cfg.dt))
        if n_per < 1:
            raise ValueError(f"trajectory duration {trajectory.duration!r} s is shorter than one 1 ms step")
        t_one = np.arange(n_per + 1) * cfg.dt
        sub = [np.asarray(a, float) for a in trajectory.evaluate(t_one)]
        for name, a in zip(("q", "qd", "qdd"), sub):
            if a.shape != (n_per + 1, k_act):
                raise ValueError(f"trajectory.evaluate returned {name} of shape {a.shape}, expected "
                                 f"({n_per + 1}, {k_act})")
        q1, qd1, qdd1 = sub if k_act == n else (self._full(a) for a in sub)
        self.check_trajectory(q1, qd1, qdd1, t_one)
        # self-collision and declared obstacles (PyBullet on the URDF's shapes, 10x the optimizer grid)
        check_clearance(self.arm.urdf, self.joint_names, trajectory)
        idx = np.concatenate([np.arange(n_per)] * periods + [[n_per]])
        ff = None
        if tau_ff is not None:
            ff_sub = np.asarray(tau_ff(*sub), float)
            if ff_sub.shape != (n_per + 1, k_act) or not np.all(np.isfinite(ff_sub)):
                raise ValueError(f"tau_ff returned shape {ff_sub.shape} or non-finite values; "
                                 f"expected finite ({n_per + 1}, {k_act})")
            ff = (ff_sub if k_act == n else self._full(ff_sub))[idx]
        return q1, sub, idx, ff, n_per

    def _full(self, a: np.ndarray) -> np.ndarray:
        """Columns of the driven joints (N, k) into every joint's (N, n), the others 0."""
        out = np.zeros((a.shape[0], self.cfg.n))
        out[:, self.active] = a
        return out

    def _simulate(self, q0, cmd, ffs, periods_at, n_settle: int, progress: bool):
        """Run the simulator over the command array `cmd` (settle + trajectory), reading the
        aligned samples of the periods `periods_at`: (raw rows, the closed TwinSim)."""
        total = cmd.shape[0]
        self.close()
        self.sim = sim = TwinSim(self.cfg, contact_k0=n_settle)
        raw = np.empty((periods_at.size, sim.snapshot_size))
        bar = None
        try:
            sim.reset(q0)
            for r in np.flatnonzero(periods_at < 0):
                sim.snapshot(raw[r])
            if progress:
                from tqdm import tqdm
                bar = tqdm(total=total, desc="twin", unit="ms", mininterval=0.5)
            chunk = 4096 if progress else total      # progress: hand over a chunk at a time
            for m0 in range(0, total, chunk):
                m1 = min(m0 + chunk, total)
                sel = np.flatnonzero((periods_at >= m0) & (periods_at < m1))
                rows = np.empty((sel.size, sim.snapshot_size))
                sim.run(cmd[m0:m1], None if ffs is None else ffs[m0:m1],
                        snapshot_at=periods_at[sel] - m0, out=rows)
                raw[sel] = rows
                if bar is not None:
                    bar.update(m1 - m0)
        except ValueError as exc:
            raise ValueError(f"twin run stopped at control step {sim.k} (t = {sim.t:.3f} s): {exc}") from exc
        finally:
            if bar is not None:
                bar.close()
            sim.close()
            self.sim = None
        return raw, sim

    def _recording(self, trajectory, periods: int, sample_steps, delay: int, q_cmd, truth: dict,
                   src: dict, sim) -> Recording:
        """The sensors' view of the simulated channels (`src`: the reads `delay` periods earlier)
        with the truth and metadata, columns of the driven joints."""
        cfg, s, act = self.cfg, self.settings, self.active
        dt = cfg.dt
        t = sample_steps * dt
        noise_seed = self.noise_seed(self.runs_done)
        self.runs_done += 1
        sensors = SensorModel(s, cfg.joint_names, seed=noise_seed)
        src_i = src["tau_m"] / cfg.drives.torque_factor
        q_meas, tau_meas, i_meas = sensors.sample({"q": src["q"], "tau_r": src["tau_r"], "i_m": src_i}, t=t)
        qd_meas = sensors.sample_velocity(src["qd_m"])
        tau_m_meas = i_meas * cfg.drives.torque_factor
        # RMS of the measurement error actually injected per joint (noise, quantization, offset,
        # drift, scale; measured minus the true value of the same, possibly delayed, instant):
        # the noise floor of RMS figures (identify.app.identification.noise_floors)
        inj = {"tau_j": tau_meas - src["tau_r"], "tau_m": tau_m_meas - src["tau_m"]}
        meta = self._meta(trajectory, periods, delay, noise_seed, sim)
        if act.size < cfg.n:
            meta["arm"]["joints"] = self.joint_names
            qh = truth["q"][:, self.held]
            meta["held_joints"] = {
                "names": [cfg.joint_names[j] for j in self.held], "command_rad": 0.0,
                "max_abs_q_rad": np.abs(qh).max(axis=0).tolist(),
                "max_abs_tau_r_Nm": np.abs(truth["tau_r"][:, self.held]).max(axis=0).tolist(),
                "note": "joints outside arm.joints, held at 0 rad by their drive's position loop"}
            cols = lambda a: np.ascontiguousarray(a[:, act])           # noqa: E731
            q_meas, tau_meas, i_meas, tau_m_meas, q_cmd, qd_meas = (
                cols(a) for a in (q_meas, tau_meas, i_meas, tau_m_meas, q_cmd, qd_meas))
            truth = {ch: cols(a) for ch, a in truth.items()}
        if s.contacts:
            # world-frame force of each contact during the period starting at each sample [N]
            from .contacts import period_range
            on = [(sample_steps >= period_range(c, dt)[0]) & (sample_steps < period_range(c, dt)[1])
                  for c in s.contacts]
            truth["f_ext"] = np.stack([np.outer(a, c["force_N"]) for a, c in zip(on, s.contacts)], axis=1)
            meta["contacts"] = to_jsonable(list(s.contacts))
        # the drive coefficients as simulated (twin.truth; names of docs/joint_models.md)
        return Recording(t=t, q=q_meas, tau_j=tau_meas, i_m=i_meas, tau_m=tau_m_meas,
                         q_cmd=q_cmd, qd=qd_meas, rate_hz=float(s.sample_rate_hz),
                         joint_names=self.joint_names, meta=meta, truth=truth,
                         drive_truth=drive_truth(cfg, sim.reducer, truth, act),
                         injected_noise_rms={ch: np.sqrt(np.mean(e[:, act] ** 2, axis=0))
                                             for ch, e in inj.items()})

    def _meta(self, trajectory, periods: int, delay: int, noise_seed: int, sim) -> dict:
        cfg, s = self.cfg, self.settings
        return {
            "backend": "twin",
            "arm": {"urdf": str(cfg.urdf), "drives": str(cfg.drives_path), "payload": cfg.payload},
            "seed": int(s.seed),
            "noise_seed": noise_seed,
            "run_index": self.runs_done - 1,
            "settings": to_jsonable(s.to_dict(), nonfinite="keep"),
            "trajectory": {"duration_s": float(trajectory.duration), "periods": periods,
                           "type": type(trajectory).__name__},
            "control_rate_hz": 1.0 / cfg.dt,
            # identify.backend.recording's contract: every field of sample k refers to t_k, the start of
            # a control period (torques held during it); measured fields io_delay_s earlier
            "sample_alignment": "period_start",
            "io_delay_s": delay * cfg.dt,
            "omega_dt_max": sim.omega_dt,
            "truth_note": "ground truth of the simulator; identification code must not read it",
        }

    def close(self) -> None:
        if self.sim is not None:
            self.sim.close()
            self.sim = None


def _subset_indices(joints, all_names: list, urdf) -> np.ndarray:
    """Chain indices of the subset `joints` (None -> all), in chain order; ValueError naming an
    unknown or repeated joint."""
    if joints is None:
        return np.arange(len(all_names))
    if isinstance(joints, str) or not hasattr(joints, "__iter__"):
        raise ValueError(f"twin backend: arm.joints must be a list of joint names, got {joints!r}")
    joints = list(joints)
    if not joints:
        raise ValueError("twin backend: arm.joints is empty; give at least one joint (or leave it "
                         "out for the whole arm)")
    for j in joints:
        if j not in all_names:
            raise ValueError(f"twin backend: arm.joints: unknown joint {j!r}; the URDF {urdf} has "
                             f"{all_names}")
    if len(set(joints)) != len(joints):
        raise ValueError(f"twin backend: arm.joints has repeated joints: {joints}")
    keep = set(joints)
    return np.array([i for i, nm in enumerate(all_names) if nm in keep], dtype=int)


def make_backend(arm: BackendArm | dict, settings: dict | None = None) -> TwinBackend:
    """Factory registered as "twin" in identify.backend.interface.BACKENDS."""
    return TwinBackend(arm, settings)
