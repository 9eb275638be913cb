"""The `hardware` backend: runs a trajectory on the arm over EtherCAT and returns a Recording.

``make_backend(arm, settings)`` (registered in identify.backend.interface.BACKENDS) ->
:class:`HardwareBackend` with ``run(trajectory, periods=1, progress=False) -> Recording``.

``preflight(arm, settings)`` runs every check that needs no trajectory (settings, armed /
dry-run interlock, interface, drive configuration, drive file, payload) at scenario-load cost, so a
caller can refuse an unarmed run before building models or optimizing trajectories.

A run, in order (nothing touches the bus before step 3, nothing moves before step 5):
 1. refuse unless ``armed`` (or ``dry_run``);
 2. sample the trajectory at the cycle rate and check it against the arm's position, velocity and
    acceleration limits, the per-cycle step limit (min(configured, 1.2 qd_max dt)) and the torque
    limit applied to a conservative MOTOR-torque bound (robot.torque_bound: rigid body with the
    arm's payload, link and motor friction, harmonic-drive loss 1/(1 - xi), rotor inertia,
    margins); refusals (SafetyRefused) name joint and sample;
 3. create the run's own record folder (refused if not writable), start the loop process
    (robot.loop), which brings the bus up to OP (identities, units read from the drives, mode,
    watchdogs, DC) and reports the pose, drive faults, the bus report;
 4. refuse a drive already in FAULT (unless safety.fault_reset: on_start) or a pose farther than
    safety.start_pose_tolerance_rad from the start; plan the approach and check the whole plan;
    dry run: stop here and return the (unmoved) measured pose with the planned command and the
    bus report (meta["bus_report"], and in words Recording.backend_report);
 5. the loop enables the drives, runs the plan (with ``torque_feedforward``: plus the rigid-body
    inverse dynamics of arm + payload as torque_offset), stops in a defined order; meanwhile this process
    streams its samples to disk (identify.backend.recording.ChunkWriter) and watches its heartbeat.
A fault ends in the safe stop and raises :class:`RunStopped`, whose ``recording`` holds every
sample (also assembled on disk in the run's folder). SIGTERM/SIGHUP/SIGINT during a run request
the same stop (robot.runfiles.SignalGuard). See docs/hardware.md.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import threading
import time
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

from identify.common.jsonutil import to_jsonable
from identify.backend.arm import BackendArm
from identify.backend.clearance import check_clearance
from identify.backend.recording import ChunkWriter, Recording, assemble_chunks
from identify.common.fileio import atomic_savez, write_json

from . import loop as L
from .config import HardwareSettings, load_config
from .plan import approach_duration, build_plan
from .busreport import format_bus_report
from .netif import interface_problem
from .runfiles import RunIO, SignalGuard, check_free_space, new_record_dir, stop_claim, warn
from .safety import (DEFAULT_POLICY, STEP_VELOCITY_FACTOR, Fault, SafetyError, SafetyRefused,
                     check_trajectory, run_limits, step_limit)
from .stopramp import ramp_bound_cycles
from .torque_bound import TorqueBound, model_with_payload, payload_params
from .drive.units import make_units


class RunStopped(SafetyError):
    """The run ended in a safe stop. ``fault``: robot.safety.Fault value; ``summary``: the loop's
    report; ``recording``: every sample up to the stop (full stream, all phases); ``path``: its file."""

    def __init__(self, message, fault=None, summary=None, recording=None, path=None):
        super().__init__(message)
        self.fault, self.summary, self.recording, self.path = fault, summary or {}, recording, path


def _arm_models(arm: BackendArm):
    """(model of the identified joints, model of the full arm WITH the payload on its last link).
    The full model carries the acceleration limits (URDF has none)."""
    from identify import RobotModel
    from identify.model.arm import REFERENCE_URDF, load_description
    urdf = Path(arm.urdf or REFERENCE_URDF)
    joints = arm.joints
    # acceleration limits (URDF has none): arm.qdd_max, else the description YAML named in
    # arm.description, else <urdf stem>.yaml next to the URDF, else none (inf)
    desc_path = arm.description if arm.description else urdf.with_suffix(".yaml")
    full0 = RobotModel.from_urdf(urdf)
    qdd, gravity = None, (0.0, 0.0, -9.81)
    if desc_path.exists():
        desc = load_description(desc_path)
        by_name = dict(zip(desc.joint_names, np.asarray(desc.qdd_max, float)))
        qdd = np.array([by_name.get(j, np.inf) for j in full0.joint_names])
        gravity = tuple(np.asarray(desc.gravity, float))
    if arm.qdd_max is not None and joints is None:
        qdd = np.asarray(arm.qdd_max, float)
    full = model_with_payload(RobotModel.from_urdf(urdf, qdd_max=qdd, gravity=gravity),
                              arm.payload)
    model = full if not joints else RobotModel.from_urdf(urdf, list(joints), gravity=gravity)
    return model, full


def _drives_path(arm: BackendArm) -> Path:
    """The drive parameter file: arm.drives, else <urdf stem>_drives.yaml next to the URDF.
    Required: the motor-torque check needs its friction, reducer loss and rotor inertia."""
    from identify.model.arm import REFERENCE_URDF
    if arm.drives:
        return Path(arm.drives)
    urdf = Path(arm.urdf or REFERENCE_URDF)
    guess = urdf.with_name(urdf.stem + "_drives.yaml")
    if guess.exists():
        return guess
    raise SafetyRefused(f"hardware backend: arm.drives (the drive parameter YAML) is required for "
                        f"the motor-torque check before moving; none given and {guess} does not "
                        f"exist")


def preflight(arm: BackendArm | dict | None, settings: dict | None) -> HardwareSettings:
    """Everything a hardware run would refuse that is known before any trajectory exists, at
    scenario-load cost (no bus, no optimization, no dynamics): the settings (keys, types), the
    armed / dry-run interlock, the interface, the drive configuration and its joint mapping, the
    drive parameter file and the payload. Call it before building models or optimizing
    trajectories, so an unarmed run is refused at once.

    Returns the validated HardwareSettings. Raises SafetyRefused (not armed, no drive file;
    CLI exit 4), ValueError (bad setting, payload, iface missing), robot.config.ConfigError."""
    arm = BackendArm.of(arm, "hardware backend: arm")
    s = HardwareSettings.from_settings(settings)
    why = s.refusal()
    if why:
        raise SafetyRefused(why)
    if not s.iface and not s.dry_run:
        raise ValueError("hardware setting iface (the EtherCAT network interface) is required")
    from identify.model.arm import REFERENCE_URDF
    from identify.model.drives import load_drives
    from identify.model.urdf import load_chain
    cfg = load_config(s.config)
    names = list(load_chain(Path(arm.urdf or REFERENCE_URDF)).joint_names)
    make_units(cfg, names)                      # every drive has a joint and vice versa
    load_drives(_drives_path(arm), names)       # errors name the file, joint and key
    if arm.payload is not None:
        payload_params(arm.payload)
    if s.iface:     # a missing or unusable port is found now, not after minutes of design work
        why = interface_problem(s.iface)
        if why:
            raise ValueError(f"hardware.iface: {why}")
    return s


def make_backend(arm: BackendArm | dict | None, settings: dict) -> "HardwareBackend":
    return HardwareBackend(BackendArm.of(arm, "hardware backend: arm"), settings or {})


class HardwareBackend:
    name = "hardware"

    def __init__(self, arm: BackendArm | dict, settings: dict, *, bus_factory: str | None = None,
                 bus_kwargs: dict | None = None):
        arm = BackendArm.of(arm, "hardware backend: arm")
        # bus_factory/bus_kwargs: "module:callable" replacing robot.bus.EthercatBus (tests only)
        self._bus = (bus_factory or "robot.bus:EthercatBus", dict(bus_kwargs or {}))
        self.settings = HardwareSettings.from_settings(settings)
        self.cfg = load_config(self.settings.config)
        self.model, self.full = _arm_models(arm)      # full: with the payload on the last link
        names = list(self.full.joint_names)
        self.units = make_units(self.cfg, names)      # every drive has a joint and vice versa
        self.dt = self.cfg.bus.cycle_time_s
        s = self.settings
        sc = self.cfg.safety
        self.limits = run_limits(self.full, s.limit_scale, s.position_margin_rad)
        # motor-torque bound (payload, friction, reducer loss, rotor inertia) checked before moving
        self.torque_bound = TorqueBound.from_files(self.full, _drives_path(arm),
                                                   margin_frac=sc.torque_margin_frac,
                                                   margin_coulomb=sc.torque_margin_coulomb)
        # per-cycle position step, never above the velocity limit (+20 %)
        self.step_max = step_limit(sc.position_step_max_rad, self.limits.qd_max, self.dt)
        rate = s.record_rate_hz or 100.0
        self.decimate = int(round(1.0 / (rate * self.dt)))
        if self.decimate < 1 or abs(self.decimate * rate * self.dt - 1) > 1e-9:
            raise ValueError(f"hardware setting record_rate_hz={rate} must divide the cycle rate "
                             f"{1 / self.dt:g} Hz")
        self.rate_hz = 1.0 / (self.decimate * self.dt)
        self.model_cols = [names.index(j) for j in self.model.joint_names]
        self.last_summary: dict | None = None
        self.last_bus_report: dict | None = None
        self._runs = 0
        self.loop_pid: int | None = None     # pid of the current loop process (diagnostics)
        self._ctrl: np.ndarray | None = None  # the running loop's control block
        self._ctrl_lock = threading.Lock()     # status()/abort() vs. unmapping the block

    def status(self) -> dict | None:
        """While a run is in progress (from another thread): loop phase ('init', 'idle',
        'enable', 'run', 'stop', 'done'), rows recorded, and the row where the plan started."""
        with self._ctrl_lock:
            c = self._ctrl
            if c is None:
                return None
            names = ("init", "idle", "enable", "run", "stop", "done")
            return {"phase": names[int(c[L.C_PHASE])], "rows": int(c[L.C_ROWS]),
                    "run_row0": int(c[L.C_RUN_ROW0]), "pid": self.loop_pid}

    def abort(self) -> bool:
        """Request the defined stop of the running loop (from another thread; what Ctrl-C does).
        Returns False if no run is in progress."""
        with self._ctrl_lock:
            c = self._ctrl
            if c is None:
                return False
            c[L.C_ABORT] = 1
            return True

    # -- helpers --------------------------------------------------------------------------------
    def _full_q(self, q_model: np.ndarray) -> np.ndarray:
        """(N, n_model) -> (N, n_full), locked joints at 0."""
        out = np.zeros(q_model.shape[:-1] + (self.full.n,))
        out[..., self.model_cols] = q_model
        return out

    def motor_torque_bound(self, q, qd, qdd) -> np.ndarray:
        """(N, n_full) conservative bound of |motor torque| [N*m] (link side) of a commanded
        motion (N, n_full) of the full arm: rigid body + payload, friction, harmonic-drive loss,
        rotor inertia and the configured margins (robot.torque_bound)."""
        return self.torque_bound(q, qd, qdd)

    def _check(self, t, q, qd, qdd, what):
        try:
            return check_trajectory(t, q, qd, qdd, self.limits, list(self.full.joint_names),
                                    step_max=self.step_max, tau=self.motor_torque_bound,
                                    tau_label="motor torque bound (rigid body + payload, friction, "
                                              "reducer loss, rotor inertia, margins)")
        except ValueError as exc:
            raise SafetyRefused(f"{what}: {exc}") from None

    def check(self, trajectory, periods: int = 1) -> dict:
        """Step 1 only: sample one period at the cycle rate and check it (ValueError on failure)."""
        if trajectory.n_joints != self.model.n:
            raise ValueError(f"trajectory has {trajectory.n_joints} joints, the arm model "
                             f"{self.model.n} ({list(self.model.joint_names)})")
        m = int(round(trajectory.duration / self.dt))
        t = np.arange(m + 1) * self.dt
        q, qd, qdd = (self._full_q(np.asarray(a, float)) for a in trajectory.evaluate(t))
        return self._check(t, q, qd, qdd, "trajectory")

    # -- run ------------------------------------------------------------------------------------
    def run(self, trajectory, *, periods: int = 1, progress: bool = False,
            tau_ff=None) -> Recording:
        """tau_ff: optional feed-forward model, a callable (q, qd, qdd) (N, n) -> (N, n) [N*m, link
        side] evaluated on the run plan (approach included) and written to the drives' torque
        offset object 0x60B2 every cycle instead of the rigid-body ``torque_feedforward``; refused
        before the bus is touched when the PDO mapping has no torque_offset or the arm model is a
        joint subset. Every other check (limits, motor-torque bound, per-mille range) is the same."""
        s = self.settings
        if s.refusal():                      # known from the settings alone: refuse first
            raise SafetyRefused(s.refusal())
        if tau_ff is not None:
            if "torque_offset" not in [e.name for e in self.cfg.rx_entries]:
                raise SafetyRefused(f"{self.cfg.path}: a torque feed-forward needs the drives' "
                                    f"torque_offset (0x60B2) in the rx PDO mapping")
            if self.model.n != self.full.n:
                raise SafetyRefused("a torque feed-forward model needs the whole arm (no arm.joints "
                                    "subset)")
        self.check(trajectory, periods)
        check_clearance(self.full.source, self.model.joint_names, trajectory)   # collisions
        traj_full = _FullTrajectory(trajectory, self)
        if not s.iface:
            if not s.dry_run:
                raise ValueError("hardware setting iface (the EtherCAT network interface) is required")
            return self._offline_dry_run(traj_full, trajectory, periods)
        capacity = self._capacity(trajectory, periods)
        record_dir = new_record_dir(s.record_dir)          # refuses before the bus is touched
        check_free_space(record_dir, capacity * L.row_width(self.full.n) * 8 * 3)
        self._runs += 1
        io = RunIO.create(self, record_dir, capacity)
        meta = {"backend": "hardware", "iface": s.iface, "config": self.cfg.path,
                "cycle_time_s": self.dt, "dry_run": s.dry_run, "periods": periods,
                "trajectory_duration_s": float(trajectory.duration), "record_dir": str(record_dir)}
        io.writer = ChunkWriter(record_dir, list(self.full.joint_names), 1.0 / self.dt, meta)
        proc = self._loop_process(io, record_dir, capacity)
        summary, plan, error = None, None, None

        def on_signal(signum):
            io.ctrl[L.C_ABORT] = L.ABORT_SIGNAL    # running: the loop stops in the defined order
            try:
                io.parent.send(("quit",))          # still idle: leave without enabling
            except Exception:  # noqa: BLE001
                pass

        guard = SignalGuard(on_signal)
        try:
            with guard:
                got = self._bring_up_and_plan(io, proc, guard, traj_full, periods, tau_ff, meta)
                if isinstance(got, Recording):       # dry run
                    return got
                plan, tau_plan = got
                io.plan_shm = shared_memory.SharedMemory(create=True, size=2 * plan.q.size * 8)
                np.ndarray(plan.q.shape, np.float64, io.plan_shm.buf)[:] = plan.q
                np.ndarray(plan.q.shape, np.float64, io.plan_shm.buf, offset=plan.q.size * 8)[:] = tau_plan
                io.parent.send(("go", io.plan_shm.name, plan.n_cycles))
                summary, error = self._supervise(io.parent, proc, io.ctrl, io.flush, plan, progress)
        except BaseException:
            io.ctrl[L.C_ABORT] = io.ctrl[L.C_ABORT] or L.ABORT_REQUEST   # never unsupervised
            summary = summary or {"fault": Fault.ABORTED.value, "stop_confirmed": False,
                                  "message": "the parent stopped before the loop reported"}
            raise
        finally:
            cyc, n_rows, run_row0 = io.close(proc, self)
            self._save_last_pose(cyc)
            if n_rows == 0 and not any(record_dir.iterdir()):
                record_dir.rmdir()                 # nothing recorded: leave no empty folder
            elif sys.exc_info()[0] is not None:    # leaving on an exception: the records anyway
                self._write_records(record_dir, cyc, n_rows, run_row0, summary, io.write_error)
        return self._finish(record_dir, cyc, n_rows, run_row0, summary, error, io.write_error, guard,
                            plan, meta)

    def _offline_dry_run(self, traj_full, trajectory, periods) -> Recording:
        """No iface: no bus; the pose is taken to be the trajectory's start."""
        s = self.settings
        q0 = np.asarray(traj_full.evaluate(np.zeros(1))[0], float)[0]
        plan = build_plan(traj_full, periods, self.dt, q0, self.limits.qd_max, self.limits.qdd_max,
                          dwell=s.dwell_s)
        self._check(plan.t, plan.q, plan.qd, plan.qdd, "run plan")
        meta = {"backend": "hardware", "iface": None, "config": self.cfg.path, "dry_run": True,
                "cycle_time_s": self.dt, "periods": periods,
                "trajectory_duration_s": float(trajectory.duration)}
        rec = self._dry_recording(plan, q0, meta)
        rec.meta["note"] = "offline dry run (no iface): limits checked, bus not touched, nothing moved"
        return rec

    def _capacity(self, trajectory, periods) -> int:
        """Upper bound of the cycles the loop may record (bring-up, enable, plan, stop)."""
        s, sc, n = self.settings, self.cfg.safety, self.full.n
        t_app = approach_duration(self.limits.q_min, self.limits.q_max,
                                  self.limits.qd_max * sc.approach_speed_frac,
                                  self.limits.qdd_max * sc.approach_speed_frac)
        enable_cycles = int(s.enable_timeout_s / self.dt)
        brake = int(np.ceil(sc.brake_delay_s / self.dt)) + 1
        m_max = (int(round(trajectory.duration / self.dt)) * periods + int(np.ceil(t_app / self.dt))
                 + 2 * int(round(s.dwell_s / self.dt)) + 2)
        ramp = ramp_bound_cycles(STEP_VELOCITY_FACTOR * self.limits.qd_max, self.limits.qdd_max,
                                 sc.stop_jerk_max_rad_s3 or None, self.dt)
        return (enable_cycles + 200 + m_max + ramp + sc.settle_cycles + sc.hold_cycles + n + brake
                + sc.confirm_cycles + 16)

    def _loop_process(self, io, record_dir, capacity):
        """The (not yet started) loop process and its spec."""
        s, sc = self.settings, self.cfg.safety
        policy = {f.value: p for f, p in DEFAULT_POLICY.items()}
        policy.update(s.fault_policy)
        spec = L.LoopSpec(config_path=self.cfg.path, iface=s.iface, joint_names=list(self.full.joint_names),
                          limits=self.limits, rec_shm=io.rec_shm.name, ctrl_shm=io.ctrl_shm.name,
                          capacity=capacity, complete_access=s.complete_access,
                          receive_timeout_us=s.receive_timeout_us,
                          enable_timeout_cycles=int(s.enable_timeout_s / self.dt),
                          fault_reset=sc.fault_reset, policy=policy,
                          realtime=s.realtime, bus_factory=self._bus[0], bus_kwargs=self._bus[1],
                          parent_pid=os.getpid(), record_dir=str(record_dir),
                          torque_limit=np.asarray(self.full.limits.tau_max, float))
        ctx = mp.get_context("spawn")
        io.parent, child = ctx.Pipe()
        io.child = child
        return ctx.Process(target=L.loop_main, args=(spec, child), name="twinid-ethercat-loop", daemon=True)

    def _bring_up_and_plan(self, io, proc, guard, traj_full, periods, tau_ff, meta):
        """Start the loop, wait for OP, check the start, plan the run: (plan, torque offsets), or
        the dry-run Recording. A signal during bring-up leaves at once (nothing enabled)."""
        s, sc, parent = self.settings, self.cfg.safety, io.parent
        proc.start()
        self.loop_pid = proc.pid
        io.child.close()
        msg = _recv(parent, proc, s.bringup_timeout_s, "bring-up", interrupted=lambda: guard.received)
        if msg is None:                            # signalled while SOEM brings the bus up
            proc.kill()                            # nothing is enabled before "go"
            proc.join(1.0)
            guard.raise_if_received("nothing was moved (bus bring-up interrupted)", moved=False)
        if msg[0] == "error":
            raise _bus_error(msg)
        if msg[0] == "done":                       # a signal arrived during bring-up
            guard.raise_if_received("nothing was moved", moved=False)
        info = msg[1]
        if guard.received is not None:             # signalled during bring-up: leave, never enable
            _recv(parent, proc, 1.0, "signal exit")
            guard.raise_if_received("nothing was moved", moved=False)
        self.last_bus_report = dict(info.get("bus_report") or {}, rt=info.get("rt"))
        for w in (info.get("rt") or {}).get("warnings", []):
            warn(w)
        q_now = np.asarray(info["q"], float)
        try:
            self._check_start(info, q_now, traj_full)
            plan = build_plan(traj_full, periods, self.dt, q_now,
                              self.limits.qd_max * sc.approach_speed_frac,
                              self.limits.qdd_max * sc.approach_speed_frac, dwell=s.dwell_s)
            self._check(plan.t, plan.q, plan.qd, plan.qdd, "run plan (approach from the measured pose)")
            tau_plan = self._feedforward(plan, tau_ff)
        except ValueError:
            parent.send(("quit",))
            raise
        if s.dry_run:
            parent.send(("quit",))
            _recv(parent, proc, 5.0, "dry-run exit")
            rec = self._dry_recording(plan, q_now, meta)
            rec.meta["bus_report"] = to_jsonable(self.last_bus_report, nonfinite="keep")
            rec.backend_report = format_bus_report(self.last_bus_report)
            return rec
        return plan, tau_plan

    def _feedforward(self, plan, tau_ff) -> np.ndarray:
        """(M, n) torque offsets [N*m] of the plan: the given model's (checked: shape, finite,
        per-mille range), else the rigid-body inverse dynamics (torque_feedforward) or zeros."""
        if tau_ff is None:
            return (self.full.inverse_dynamics(plan.q, plan.qd, plan.qdd)
                    if self.settings.torque_feedforward else np.zeros_like(plan.q))
        tau = np.asarray(tau_ff(plan.q, plan.qd, plan.qdd), float)
        try:
            if tau.shape != plan.q.shape or not np.all(np.isfinite(tau)):
                raise ValueError(f"tau_ff returned shape {tau.shape} or non-finite values on the run "
                                 f"plan; expected finite {plan.q.shape}")
            self.units.torque_permille(tau)      # the per-mille range, before moving
        except ValueError as exc:
            raise SafetyRefused(f"feed-forward: {exc}") from None
        return tau

    def _check_start(self, info, q_now, traj_full) -> None:
        """Before enabling: drives already in FAULT (refused unless safety.fault_reset is
        on_start) and the measured pose against the trajectory's start pose."""
        sc = self.cfg.safety
        faults = info.get("faults") or {}
        if faults and sc.fault_reset != "on_start":
            txt = "; ".join(f"{j}: statusword {v['statusword']:#06x}, error code 0x603F = "
                            f"{v['error_code']:#06x}" for j, v in faults.items())
            raise SafetyRefused(f"drive(s) in FAULT before enabling: {txt}; not reset because "
                                f"safety.fault_reset is '{sc.fault_reset}' (clear the cause, or set "
                                f"fault_reset: on_start)")
        self._check_absolute_pose(q_now)
        q0 = np.asarray(traj_full.evaluate(np.zeros(1))[0], float)[0]
        d = np.abs(q_now - q0)
        if np.any(d > sc.start_pose_tolerance_rad):
            j = int(np.argmax(d))
            raise SafetyRefused(f"the pose read at bring-up is too far from the trajectory's start: "
                                f"joint {self.full.joint_names[j]} at {q_now[j]:.4f} rad, start "
                                f"{q0[j]:.4f} rad (|diff| {d[j]:.4f} > safety.start_pose_tolerance_rad "
                                f"{sc.start_pose_tolerance_rad})")

    def _check_absolute_pose(self, q_now) -> None:
        """The absolute encoders' pose at bring-up: inside every joint's range, and near the pose
        the last run ended at (settings.last_pose_file, when given and present)."""
        lim, names = self.full.limits, list(self.full.joint_names)
        out = (q_now < lim.q_min) | (q_now > lim.q_max)
        if out.any():
            j = int(np.argmax(out))
            raise SafetyRefused(f"the absolute encoder of joint {names[j]} reads {q_now[j]:.4f} rad at "
                                f"bring-up, outside its range [{lim.q_min[j]:.4f}, {lim.q_max[j]:.4f}] "
                                f"(encoder offset or multi-turn count lost?); nothing was moved")
        f = self.settings.last_pose_file
        if not f or not Path(f).exists():
            return
        import json
        try:
            last = json.loads(Path(f).read_text())
            q_last = np.array([dict(zip(last["joint_names"], last["q"]))[j] for j in names], float)
        except (ValueError, KeyError, TypeError) as exc:
            raise SafetyRefused(f"{f}: unreadable last pose ({type(exc).__name__}: {exc}); check the "
                                f"arm and remove the file") from None
        d = np.abs(q_now - q_last)
        tol = self.settings.last_pose_tolerance_rad
        if np.any(d > tol):
            j = int(np.argmax(d))
            raise SafetyRefused(f"joint {names[j]} reads {q_now[j]:.4f} rad at bring-up, the last run "
                                f"ended at {q_last[j]:.4f} rad ({f}): |diff| {d[j]:.4f} > "
                                f"last_pose_tolerance_rad {tol} (moved while off, or the absolute "
                                f"encoder lost its offset?); nothing was moved")

    def _save_last_pose(self, cyc) -> None:
        """The pose measured in the last row with a complete frame -> settings.last_pose_file."""
        f = self.settings.last_pose_file
        if not f or not len(cyc):
            return
        cols = L.column_slices(self.full.n)
        ok = np.flatnonzero(cyc[:, cols["wkc"]] > 0)
        if ok.size:
            write_json(f, {"joint_names": list(self.full.joint_names), "q": cyc[ok[-1], cols["q"]]})

    def _supervise(self, parent, proc, ctrl, flush, plan, progress):
        """Stream rows and watch the loop's heartbeat until it reports; returns (summary, error)."""
        s = self.settings
        bar = _progress(progress, plan.n_cycles)
        last_beat, t_beat = -1, time.monotonic()
        summary = error = None
        try:
            while True:
                msg = None
                if parent.poll(0.02):
                    try:
                        msg = parent.recv()
                    except (EOFError, OSError):       # the loop process died (killed)
                        proc.join(0.2)
                if msg is not None:
                    if msg[0] == "done":
                        summary = msg[1]
                    else:
                        error = msg
                    break
                beat = int(ctrl[L.C_HEARTBEAT])
                flush(int(ctrl[L.C_ROWS]), 1000)   # rows complete once counted; >= every 80 ms
                if bar is not None:
                    bar.n = min(plan.n_cycles, max(0, beat - int(ctrl[L.C_RUN_ROW0])))
                    bar.refresh()
                now = time.monotonic()
                if beat != last_beat:
                    last_beat, t_beat = beat, now
                elif now - t_beat > s.watchdog_s or not proc.is_alive():
                    why = ("loop process exited" if not proc.is_alive()
                           else f"no cycle for {now - t_beat:.2f} s")
                    ctrl[L.C_ABORT] = L.ABORT_REQUEST
                    proc.join(0.5)
                    if proc.is_alive():
                        proc.kill()
                    summary = {"fault": Fault.STALLED_LOOP.value, "message": f"stalled loop: {why}; "
                               "the drives' SyncManager watchdogs take over", "stop_confirmed": False}
                    break
        finally:
            if bar is not None:
                bar.close()
        return summary, error

    def _write_records(self, record_dir, cyc, n_rows, run_row0, summary, write_error):
        """stream.npz (assembled chunks), bus.npz and summary.json, each atomic; returns (stream
        Recording or None, its path or None, the summary written). Where the disk fails, the
        stream is built from the rows in memory (every row is kept) and the reason is noted."""
        cols = L.column_slices(self.full.n)
        stream, where = None, None
        if n_rows:
            try:
                stream = assemble_chunks(record_dir, record_dir / "stream.npz")
                where = record_dir / "stream.npz"
                if stream.n_samples != n_rows:
                    raise ValueError(f"{stream.n_samples} rows on disk, {n_rows} recorded")
            except Exception as exc:  # noqa: BLE001 -- the disk failed: say so, keep the rows in memory
                where = None
                write_error.append(f"assembling {record_dir / 'stream.npz'}: {type(exc).__name__}: {exc}")
                t, ch = L.chunk_channels(cyc, self.full.n)
                stream = Recording(t=t, rate_hz=1.0 / self.dt, joint_names=list(self.full.joint_names),
                                   meta={"note": "built from the rows in memory: the disk failed"}, **ch)
            try:
                atomic_savez(record_dir / "bus.npz", dict(
                    t=cyc[:, cols["t"]], wkc=cyc[:, cols["wkc"]].astype(np.int64),
                    late=cyc[:, cols["late"]], late_flag=cyc[:, cols["late_flag"]] > 0,
                    t_wall=cyc[:, cols["t_wall"]], phase=cyc[:, cols["phase"]].astype(np.int64),
                    dc_err_ns=cyc[:, cols["dc_err_ns"]], q_cmd=cyc[:, cols["q_cmd"]],
                    error_code=cyc[:, cols["error_code"]].astype(np.int64),
                    error_register=cyc[:, cols["error_register"]].astype(np.int64)))
            except Exception as exc:  # noqa: BLE001
                write_error.append(f"bus.npz: {type(exc).__name__}: {exc}")
        summary = dict(summary or {})
        summary.update(stats=cycle_stats(cyc[:, cols["t_wall"]], self.dt), record_dir=str(record_dir),
                       run_row0=run_row0, rows_recorded=n_rows,
                       stream_file=None if where is None else str(where))
        if write_error:
            summary["fault"] = summary.get("fault") or Fault.RECORD_FAILED.value
            summary["message"] = f"{summary.get('message')}; recording failed: {'; '.join(write_error)}"
        if summary.get("emergencies"):
            summary["message"] = (f"{summary.get('message')}; CoE emergencies: "
                                  + ", ".join(f"{e['joint']} error code {e['error_code']:#06x} ({e.get('meaning', '?')}"
                                              f"{', warning' if e.get('warning') else ''})"
                                              for e in summary["emergencies"]))
        try:
            write_json(record_dir / "summary.json", summary)
        except Exception as exc:  # noqa: BLE001 -- the samples matter more; the message says where
            summary["message"] = f"{summary.get('message')}; summary.json not written: {exc}"
        return stream, where, summary

    def _finish(self, record_dir, cyc, n_rows, run_row0, summary, error, write_error, guard, plan, meta):
        if error is not None:
            summary = dict(summary or {}, fault=summary.get("fault") if summary else None,
                           message=f"loop error {error[1]}: {error[2]}")
        stream, where, summary = (self._write_records(record_dir, cyc, n_rows, run_row0, summary,
                                                      write_error) if n_rows else
                                  (None, None, dict(summary or {})))
        saved = (f"the {n_rows} samples recorded are in {where}" if where is not None else
                 f"the {n_rows} samples recorded could NOT be saved ({'; '.join(write_error)}); they "
                 f"are in the exception's recording (memory)" if n_rows else "no sample was recorded")
        confirmed = bool(summary.get("stop_confirmed"))
        how = stop_claim(summary)
        if error is not None:
            exc = _bus_error(error)
            exc.args = (f"{exc.args[0]} ({how}; {saved})",)
            raise exc
        guard.raise_if_received(f"{how}; {saved}", moved=True, confirmed=confirmed)
        self.last_summary, self.last_stream = summary, stream
        if summary.get("cpu_warning"):
            warn(summary["cpu_warning"])
        if summary.get("fault"):
            if where is None or stream is None:
                warn(f"run stopped: {summary.get('message')}; {saved}")
            raise RunStopped(f"hardware run stopped ({how}): {summary.get('message')} ({saved})",
                             summary["fault"], summary, stream, where)
        a, b = run_row0 + plan.traj_start, run_row0 + plan.traj_stop
        cols = L.column_slices(self.full.n)
        rec = stream.window(a, b)
        # every `decimate`-th row of the command grid; rows whose frame was lost (their inputs are
        # the previous cycle's) are left out -- t keeps the real acquisition times, so the gap
        # shows; the full stream (stream.npz, bus.npz) keeps every row
        valid = cyc[a:b, cols["wkc"]] == summary.get("expected_wkc", -1)
        grid = np.arange(0, b - a, self.decimate)
        keep = grid[valid[grid]]
        dropped = np.flatnonzero(~valid[grid])          # sample indices (of the full grid) left out
        ch = {}
        for name in ("q", "tau_j", "i_m", "tau_m", "q_cmd", "qd", "status"):
            v = getattr(rec, name)
            ch[name] = None if v is None else v[keep][:, self.model_cols]
        meta.update(summary=to_jsonable(summary, nonfinite="keep"), rate_hz=self.rate_hz,
                    n_grid_samples=int(grid.size), dropped_samples=dropped.tolist(),
                    time_base="t: monotonic acquisition time of each sample [s] (taken as its frame "
                              "is sent) from the trajectory's start; late: the sample's cycle "
                              "started more than half a period late; rows of lost frames dropped")
        return Recording(t=rec.t[keep] - rec.t[0], rate_hz=self.rate_hz, late=rec.late[keep],
                         joint_names=list(self.model.joint_names), meta=meta, **ch)

    def _dry_recording(self, plan, q_now, meta) -> Recording:
        """Dry run: the arm did not move; q is the measured pose, q_cmd the planned command."""
        sel = slice(plan.traj_start, plan.traj_stop, self.decimate)
        qc = plan.q[sel][:, self.model_cols]
        meta = dict(meta, note="dry run: drives never enabled; q is the pose measured at bring-up")
        return Recording(t=plan.t[sel] - plan.t[plan.traj_start], rate_hz=self.rate_hz,
                         joint_names=list(self.model.joint_names), meta=meta,
                         q=np.repeat(q_now[None, self.model_cols], qc.shape[0], axis=0), q_cmd=qc)

    def close(self) -> None:
        """Nothing held between runs: each run opens and closes the bus in its own process."""


class _FullTrajectory:
    """The model-joint trajectory lifted to all drives (locked joints held at 0)."""

    def __init__(self, traj, be: HardwareBackend):
        self.traj, self.be, self.duration = traj, be, float(traj.duration)

    @property
    def n_joints(self):
        return self.be.full.n

    def evaluate(self, t):
        return tuple(self.be._full_q(np.asarray(a, float)) for a in self.traj.evaluate(np.asarray(t, float)))


def cycle_stats(t_wall: np.ndarray, dt: float) -> dict:
    """Cycle-time statistics from the wall-clock stamps of consecutive cycles [s]:
    median, p99, max period [s] and the count of periods longer than 1.5 dt (late cycles)."""
    if t_wall.shape[0] < 3:
        return {}
    p = np.diff(t_wall)
    return {"cycles": int(p.shape[0] + 1), "median_s": float(np.median(p)),
            "p99_s": float(np.percentile(p, 99)), "max_s": float(p.max()),
            "late_cycles": int(np.sum(p > 1.5 * dt)), "mean_s": float(p.mean())}


def _recv(conn, proc, timeout, what, interrupted=None):
    """The loop's next message within `timeout` [s]; None as soon as `interrupted()` is true."""
    t_end = time.monotonic() + timeout
    while time.monotonic() < t_end:
        if conn.poll(0.05):
            return conn.recv()
        if interrupted is not None and interrupted():
            return None
        if not proc.is_alive() and not conn.poll(0):
            raise RuntimeError(f"EtherCAT loop process died during {what} (exit code {proc.exitcode})")
    raise TimeoutError(f"EtherCAT loop process gave no answer within {timeout} s during {what}")


def _bus_error(msg):
    kind, text = msg[1], msg[2]
    if kind in ("IdentityError", "BusError"):
        # a bring-up refusal; this process never imports pysoem (robot.bus)
        return BusRefused(f"{kind}: {text}", kind)
    return RuntimeError(f"EtherCAT loop failed ({kind}): {text}")


class BusRefused(RuntimeError):
    """Bring-up refused by the bus layer (kind: 'IdentityError' or 'BusError')."""

    def __init__(self, message, kind):
        super().__init__(message)
        self.kind = kind


def _progress(on, total):
    if not on:
        return None
    from tqdm import tqdm
    return tqdm(total=total, desc="hardware run", unit="cycle", mininterval=0.5)


