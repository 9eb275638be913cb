"""The cyclic loop: one process that owns the bus and exchanges process data every cycle.

Protocol with the parent (:mod:`robot.backend`), over a Pipe:
  child -> ("up", info)            bus in OP, info["q"] the measured pose [rad] (joint order)
  parent -> ("go", plan_shm, M)    execute the M-cycle command in shared memory (see RunPlan)
  parent -> ("quit",)              leave without enabling (dry run / refused plan)
  child -> ("error", kind, text)   bring-up or run failure before/without a safe stop
  child -> ("done", summary)       after the stop sequence; summary has the fault (or None)
Samples go to a shared-memory table (one row per cycle, :data:`COLUMNS`) that the parent streams
to disk with ``identify.backend.recording.ChunkWriter`` while the loop runs; the parent keeps every row
written even if this process dies. ``ctrl`` (shared int64) holds the row count and flags.

The loop never skips a command index: command k always goes with frame k. A cycle that starts
late is counted (a stall beyond ``stall_cycles`` periods is a fault) and is never followed by
catch-up frames (:class:`robot.rt.Ticker` skips grid points instead). Every row carries its
acquisition time from a monotonic clock (``t``, s since the first row) and a late flag (the
cycle started more than half a period late, or its frame did not come back complete).

Supervision every cycle (robot.safety.FaultMonitor): full CiA 402 state of every drive (a drive
that leaves OPERATION ENABLED without a fault stops the run), mode display 0x6061, working
counter, lost frames, limits, following error, stall; the AL state and status code of every
slave every ``bus.al_check_cycles`` cycles and at once on a working-counter deficit.
"""
from __future__ import annotations

import sys
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

from identify.model.robot_model import Limits

from .drive import cia402
from .config import load_config
from .emergency import EmergencyWatch
from .rt import DcAligner, LoopWatch, Ticker, cpu_share_warning, harden
from .safety import (DEFAULT_POLICY, STEP_VELOCITY_FACTOR, Fault, FaultEvent, FaultMonitor, FeedbackCheck,
                     limit_step, step_limit)
from .stopramp import SafeStop
from .drive.units import make_units

# ctrl slots
C_ROWS, C_PHASE, C_ABORT, C_RUN_ROW0, C_HEARTBEAT, C_LATE, C_STOP_ROW0, C_WRITTEN = range(8)
CTRL_LEN = 8
PH_INIT, PH_IDLE, PH_ENABLE, PH_RUN, PH_STOP, PH_DONE = range(6)
# ctrl[C_ABORT] values: why the parent asks for the defined stop
ABORT_REQUEST, ABORT_SIGNAL, ABORT_RECORD = 1, 2, 3
_ABORT_FAULT = {ABORT_REQUEST: Fault.ABORTED, ABORT_SIGNAL: Fault.SIGNAL, ABORT_RECORD: Fault.RECORD_FAILED}

# after lost frames in the stop, the ramp restarts from the measured state when the measured
# pose is farther than this fraction of safety.following_error_max_rad from the last command
RESYNC_FRACTION = 0.25

# per-row scalar columns, then per-joint blocks of n columns each
SCALARS = ("cycle", "t", "t_wall", "wkc", "late", "phase", "late_flag", "dc_err_ns")
BLOCKS = ("q", "qd", "tau_m", "i_m", "tau_j", "q_cmd", "status", "error_code", "error_register")


def row_width(n: int) -> int:
    return len(SCALARS) + len(BLOCKS) * n


def column_slices(n: int) -> dict[str, slice | int]:
    out: dict[str, slice | int] = {s: k for k, s in enumerate(SCALARS)}
    base = len(SCALARS)
    for b, name in enumerate(BLOCKS):
        out[name] = slice(base + b * n, base + (b + 1) * n)
    return out


@dataclass
class LoopSpec:
    """Everything the loop process needs (picklable). Arrays in model joint order (all drives)."""
    config_path: str
    iface: str
    joint_names: list[str]
    limits: Limits
    rec_shm: str
    ctrl_shm: str
    capacity: int
    complete_access: bool = False
    receive_timeout_us: int | None = None
    enable_timeout_cycles: int = 3000
    idle_timeout_s: float = 60.0
    fault_reset: str = "never"     # config safety.fault_reset
    policy: dict = field(default_factory=lambda: {f.value: p for f, p in DEFAULT_POLICY.items()})
    realtime: bool = True     # try SCHED_FIFO for the loop process (root / CAP_SYS_NICE)
    bus_factory: str = "robot.bus:EthercatBus"   # "module:callable"(cfg, iface, **kw); tests swap it
    bus_kwargs: dict = field(default_factory=dict)
    parent_pid: int | None = None     # watched every cycle (None: not watched, tests)
    record_dir: str | None = None     # where the loop writes the last rows if the parent died
    torque_limit: np.ndarray | None = None   # (n,) [N*m] the arm's torque limits -> 0x6072


def _attach(name):
    """Attach to a block the parent created (and will unlink). The spawned child shares the
    parent's resource tracker, so attaching registers nothing new."""
    return shared_memory.SharedMemory(name=name)


def loop_main(spec: LoopSpec, conn) -> None:
    """Entry point of the loop process."""
    # SIGTERM / SIGHUP / SIGINT (a signal to the whole group reaches this process too) and the
    # parent's death end in the defined stop, never in an unsupervised or abrupt end (_Watch)
    watch = LoopWatch(spec.parent_pid)
    watch.install()
    cfg = load_config(spec.config_path)
    units = make_units(cfg, spec.joint_names)
    ctrl_shm, rec_shm = _attach(spec.ctrl_shm), _attach(spec.rec_shm)
    ctrl = np.ndarray((CTRL_LEN,), np.int64, ctrl_shm.buf)
    rows = np.ndarray((spec.capacity, row_width(units.n)), np.float64, rec_shm.buf)
    rt = harden(spec.realtime)          # gc off, mlockall, CPU affinity, SCHED_FIFO (+ warnings)
    bus = None
    try:
        bus = _open_bus(spec, cfg)
    except Exception as exc:  # BusError / IdentityError: a clear message, no traceback
        text = str(exc) if isinstance(exc, RuntimeError) else f"{exc}\n{traceback.format_exc()}"
        _send(conn, ("error", type(exc).__name__, text))
        ctrl_shm.close(), rec_shm.close()
        return
    units = _drive_units(cfg, spec.joint_names, bus)
    plan_shm, run = None, None
    try:
        run = _Run(spec, cfg, units, bus, conn, ctrl, rows, rt, watch)
        plan_shm = _run(run)
    except Exception as exc:
        _emergency_stop(run, bus, units.n)
        _send(conn, ("error", type(exc).__name__, f"{exc}\n{traceback.format_exc()}"))
    finally:
        bus.close()
        ctrl[C_PHASE] = PH_DONE
        for s in (plan_shm, ctrl_shm, rec_shm):
            if s is not None:
                s.close()


def _send(conn, msg) -> None:
    """Send to the parent; a dead parent (broken pipe) is not an error here (see _Watch)."""
    try:
        conn.send(msg)
    except (BrokenPipeError, EOFError, OSError):
        pass


def _open_bus(spec: LoopSpec, cfg):
    """The bus object (spec.bus_factory, "module:callable"; robot.bus is the only pysoem import,
    in this process), brought up to OP with the drives' stop reactions written in PREOP."""
    import importlib
    from .drive.reactions import all_reaction_sdos
    mod, attr = spec.bus_factory.split(":")
    tau = spec.torque_limit if spec.torque_limit is not None else spec.limits.tau_max
    reactions = all_reaction_sdos(cfg.drives, cfg.safety, np.asarray(spec.limits.qdd_max, float),
                                  np.asarray(tau, float), spec.joint_names)
    bus = getattr(importlib.import_module(mod), attr)(
        cfg, spec.iface, complete_access=spec.complete_access,
        receive_timeout_us=spec.receive_timeout_us, reaction_sdos=reactions, **spec.bus_kwargs)
    bus.open()
    return bus


def _drive_units(cfg, joint_names, bus):
    """Units with the rated torque the drives report (0x6076 * gear; checked against the
    configuration at bring-up), so per-mille torques convert with the drive's own reference."""
    from dataclasses import replace
    from .drive.drivecheck import rated_torque_link
    got = getattr(bus, "units_read", None)
    if not got:
        return make_units(cfg, joint_names)
    drives = tuple(replace(d, rated_torque_Nm=rated_torque_link(d, g)) for d, g in zip(cfg.drives, got))
    return make_units(replace(cfg, drives=drives), joint_names)


def _emergency_stop(run, bus, n, cycles: int = 5) -> None:
    """Best effort after an unexpected error: if the drives may be enabled, ramp the command to
    rest (robot.stopramp.SafeStop from the command stream sent so far, policy disable); then, or
    if that fails too, disable voltage on every drive for a few cycles."""
    m = getattr(run, "motion", None)
    try:
        if m is not None and m.target is not None and m.phase != PH_ENABLE:
            stop = _new_stop(run, m, "disable")
            for _ in range(stop.max_cycles):
                run.ticker.wait()
                cw, want = stop.step(m.sw, m.active, m.q_valid, None)
                run.out["controlword"] = run.units.to_bus_order(cw)
                run.out["target_position"] = run.units.position_counts(want)
                wkc, inp = bus.exchange(run.out)
                if wkc == run.exp:
                    m.sw, m.q_valid, _ = run.decode(inp)
                    m.active = cia402.is_enabled(m.sw)
                if stop.done:
                    return
    except Exception:  # noqa: BLE001 -- fall back to switching the drives off
        pass
    try:
        out = bus.layout.new_outputs(n)
        for _ in range(cycles):
            wkc, inp = bus.exchange(out)
            out["target_position"] = inp["position_actual"]
            time.sleep(0.001)
    except Exception:
        pass


def chunk_channels(block: np.ndarray, n: int) -> tuple[np.ndarray, dict]:
    """(t (M,), channels for identify.backend.recording.ChunkWriter.write) of rows (M, width)."""
    c = column_slices(n)
    return block[:, c["t"]], dict(q=block[:, c["q"]], qd=block[:, c["qd"]], tau_m=block[:, c["tau_m"]],
                                  i_m=block[:, c["i_m"]], tau_j=block[:, c["tau_j"]],
                                  q_cmd=block[:, c["q_cmd"]], status=block[:, c["status"]],
                                  late=block[:, c["late_flag"]] > 0)


def _write_orphan(r: "_Run", summary: dict) -> None:
    """After the stop: with the parent dead nobody streams the rows -- write the ones it had
    not written (ctrl[C_WRITTEN] onwards) as a last chunk and summary.json into the run's
    record folder (atomic files)."""
    if not r.watch.parent_dead or not r.spec.record_dir:
        return
    from identify.backend.recording import ChunkWriter
    from identify.common.fileio import write_json
    d = Path(r.spec.record_dir)
    try:
        a = int(r.ctrl[C_WRITTEN])
        n_written = r.row - a
        if n_written > 0:
            t, ch = chunk_channels(r.rows[a:r.row], r.n)
            ChunkWriter(d, list(r.units.joint_names), 1.0 / r.dt).write(t, **ch)
        write_json(d / "summary.json", dict(summary, written_by="loop process (parent died)",
                                            rows_written_by_loop=n_written))
    except Exception as exc:  # noqa: BLE001 -- nothing else can be done without a parent
        print(f"twinid loop: could not write the last rows to {d}: {exc}", file=sys.stderr)


@dataclass
class _Run:
    """State shared by the phases of one run of the loop (one instance per loop process)."""
    spec: LoopSpec
    cfg: object
    units: object
    bus: object
    conn: object
    ctrl: np.ndarray
    rows: np.ndarray
    rt: dict
    watch: LoopWatch
    n: int = 0
    dt: float = 0.0
    out: np.ndarray | None = None
    inp: np.ndarray | None = None
    exp: int = 0
    cols: dict = field(default_factory=dict)
    ticker: Ticker | None = None
    aligner: DcAligner | None = None
    has: dict = field(default_factory=dict)
    emcy: list = field(default_factory=list)
    row: int = 0
    motion: "_Motion | None" = None
    emw: EmergencyWatch | None = None
    cpu0: tuple = (0.0, 0.0)          # (process CPU time, monotonic time) [s] when cycling began

    def decode(self, inp):
        """(statusword, q [rad], qd [rad/s] or None) in joint order."""
        sw = self.units.to_joint_order(inp["statusword"].astype(np.int64))
        q = self.units.position(inp["position_actual"])
        qd = self.units.velocity(inp["velocity_actual"]) if self.has["qd"] else None
        return sw, q, qd


def _setup(r: _Run) -> None:
    r.n, r.dt = r.units.n, r.cfg.bus.cycle_time_s
    lay = r.bus.layout
    tx, rx = lay.tx.names, lay.rx.names
    r.cols = column_slices(r.n)
    r.out = lay.new_outputs(r.n)
    r.has = {"mode": "modes_of_operation" in rx, "mode_disp": "modes_of_operation_display" in tx,
             "err": "error_code" in tx, "tff": "torque_offset" in rx, "qd": "velocity_actual" in tx,
             "tau_m": "torque_actual" in tx, "i_m": "current_actual" in tx,
             "tau_j": "joint_torque" in tx, "emcy": hasattr(r.bus, "read_emergencies"),
             "err_reg": "error_register" in tx}
    joints = [d.joint for d in r.cfg.drives][:r.n]
    r.emw = EmergencyWatch(joints, r.bus.read_emergencies if r.has["emcy"] else None,
                           r.cfg.bus.al_check_cycles)
    r.emcy = r.emw.emergencies
    if r.has["mode"]:
        r.out["modes_of_operation"] = cia402.MODE_CSP
    r.exp = r.bus.expected_wkc
    r.ticker = Ticker(r.dt)
    dc_on = bool(getattr(r.bus, "dc", False))
    r.aligner = (DcAligner(int(round(r.dt * 1e9)), int(round(r.cfg.bus.dc_frame_offset_s * 1e9)))
                 if dc_on else None)


def _run(r: "_Run"):
    """Bring-up report, idle, then the motion phases; returns the plan's shared memory (or None)."""
    conn = r.conn
    _setup(r)
    _report_pose(r)
    msg = _idle(r)
    if msg is None or msg[0] != "go":
        why = msg[1] if msg is not None and len(msg) > 1 else "left without enabling"
        _send(conn, ("done", {"fault": None, "message": why, "rows": 0}))
        return None
    _, plan_name, m_cycles = msg
    plan_shm = _attach(plan_name)
    plan_q = np.ndarray((m_cycles, r.n), np.float64, plan_shm.buf)
    plan_tau = np.ndarray((m_cycles, r.n), np.float64, plan_shm.buf, offset=m_cycles * r.n * 8)
    summary = _motion(r, plan_q, plan_tau)
    _write_orphan(r, summary)
    _send(conn, ("done", summary))
    return plan_shm


def _report_pose(r: _Run) -> None:
    """1. read the pose with the drives disabled and report it ("up")."""
    n, wkc = r.n, 0
    for _ in range(200):
        r.ticker.wait()
        r.out["controlword"] = 0
        wkc, r.inp = r.bus.exchange(r.out)
        if wkc == r.exp:
            break
    else:
        raise RuntimeError(f"{r.spec.iface}: no valid process data after 200 cycles "
                           f"(wkc {wkc}, expected {r.exp}): {r.bus.al_report()}")
    sw, q_now, _ = r.decode(r.inp)
    err0 = (r.units.to_joint_order(r.inp["error_code"]).astype(int) if r.has["err"]
            else np.zeros(n, int))
    faulted = {r.units.joint_names[j]: {"statusword": int(sw[j]), "error_code": int(err0[j])}
               for j in np.flatnonzero(cia402.is_fault(sw))}
    r.out["target_position"] = r.inp["position_actual"]
    r.emw.read_all(-1)
    if r.has["err_reg"]:
        r.emw.prime(r.inp["error_register"])
    report = r.bus.bus_report() if hasattr(r.bus, "bus_report") else {}
    r.conn.send(("up", {"q": q_now, "statusword": sw, "expected_wkc": r.exp, "faults": faulted,
                        "slaves": r.bus.slave_names(), "bus_report": report, "rt": r.rt,
                        "emergencies": r.emcy, "states": cia402.describe(sw)}))
    r.ctrl[C_PHASE] = PH_IDLE


def _idle(r: _Run):
    """2. keep the slaves fed (drives disabled) until the parent says go; None or a message
    ("quit",) / ("left", why) when the loop must leave without enabling."""
    t_idle = time.monotonic()
    while True:
        r.ticker.wait()
        r.out["controlword"] = 0
        r.out["target_position"] = r.inp["position_actual"]
        wkc, new = r.bus.exchange(r.out)
        if wkc == r.exp:
            r.inp = new
        why = r.watch.reason()
        if why is not None:
            return ("left", f"left without enabling: {why[1]}")
        if r.conn.poll():
            try:
                return r.conn.recv()
            except (EOFError, OSError):
                return ("left", "left without enabling: the parent's pipe closed")
        if time.monotonic() - t_idle > r.spec.idle_timeout_s:
            raise RuntimeError(f"no command from the parent within {r.spec.idle_timeout_s} s")


@dataclass
class _Motion:
    """Per-run state of the enable / run / stop phases."""
    phase: int = PH_ENABLE
    k_run: int = 0
    stop: SafeStop | None = None
    event: FaultEvent | None = None
    last_ok: bool = True
    enable_cycles: int = 0
    mode_wait: int = 0
    mode_ok: bool = True
    wkc_prev_ok: bool = True
    sw: np.ndarray | None = None
    q_valid: np.ndarray | None = None
    target: np.ndarray | None = None
    hist: list = field(default_factory=list)     # the last three targets sent (oldest first)
    prev_cw: np.ndarray | None = None
    active: np.ndarray | None = None             # drives in OPERATION ENABLED (last valid frame)
    qd_valid: np.ndarray | None = None
    delivered: np.ndarray | None = None   # the target sent with the last complete frame
    t_fault: float | None = None          # time.monotonic() when the fault was detected [s]
    q_ref_prev: np.ndarray | None = None
    emcy_event: FaultEvent | None = None   # an emergency with an error code, read last cycle
    feedback: FeedbackCheck | None = None
    gap: bool = False          # a frame was lost since the last valid one: the drives did not get
                               # every command; the stop restarts from the measured state


def _new_stop(r: _Run, m: _Motion, policy: str) -> SafeStop:
    """The defined stop from the command stream sent so far (robot.stopramp.SafeStop)."""
    sc, dt = r.cfg.safety, r.dt
    h = m.hist[-3:] if len(m.hist) >= 3 else [m.target] * (3 - len(m.hist)) + m.hist
    p0, v0, a0 = m.target, (h[2] - h[1]) / dt, (h[2] - 2 * h[1] + h[0]) / dt**2
    if m.gap and m.delivered is not None:
        # frames lost: the drives did not get the commands sent since the last complete frame
        # and hold the last one they received -- the stop starts there, at rest (after the gap,
        # _command restarts it from the measured state if a drive turns out elsewhere)
        p0, v0, a0 = m.delivered, np.zeros(r.n), np.zeros(r.n)
        m.target = p0.copy()
    return SafeStop(r.n, p0, v0, a0, r.spec.limits.qdd_max, dt,
                    jerk_max=sc.stop_jerk_max_rad_s3 or None, hold_cycles=sc.hold_cycles,
                    confirm_cycles=sc.confirm_cycles, policy=policy,
                    brake_cycles=max(1, int(np.ceil(sc.brake_delay_s / dt - 1e-9))),
                    standstill_rad_s=sc.standstill_rad_s, settle_cycles=sc.settle_cycles,
                    v0_bound=STEP_VELOCITY_FACTOR * np.asarray(r.spec.limits.qd_max, float))


def _command(r: _Run, m: _Motion, plan_q, plan_tau, step_max):
    """This cycle's (controlword, q_ref recorded, torque offset). CSP: the target sent in cycle k
    is the position for the next sync (t_{k+1}); q_ref is the command for this cycle's time t_k,
    i.e. the target sent in the cycle before, in every phase (one consistent command stream)."""
    tff = np.zeros(r.n)
    q_ref = m.target.copy()
    if m.phase == PH_ENABLE:
        # the mode display must read CSP before any enabling word is sent
        reset_ok = r.spec.fault_reset == "on_start"
        cw = (cia402.enable_controlword(m.sw, m.prev_cw, reset_ok) if m.mode_ok
              else np.zeros(r.n, np.int64))
        m.target = m.q_valid.copy()
        q_ref = m.target
    elif m.phase == PH_RUN:
        cw = np.full(r.n, cia402.CW_ENABLE_OPERATION, np.int64)
        k_next = min(m.k_run + 1, len(plan_q) - 1)
        m.target = limit_step(m.target, plan_q[k_next], step_max)
        tff = plan_tau[k_next]
        q_ref = plan_q[m.k_run]
    else:
        if m.gap and m.last_ok:
            # frames came back: a drive that held its last received target while they were lost
            # is far from the ramp -- restart from the measured state; one that received them
            # (only the replies were lost) followed the ramp: keep it
            if np.any(np.abs(m.q_valid - m.target)[m.active] > RESYNC_FRACTION * r.cfg.safety.following_error_max_rad):
                m.target = m.stop.resync(m.q_valid, m.qd_valid)
            m.gap = False
        cw, want = m.stop.step(m.sw if m.last_ok else None, m.active, m.q_valid, m.qd_valid)
        m.target = limit_step(m.target, want, step_max)
    m.hist = (m.hist + [m.target.copy()])[-3:]
    return cw, q_ref, tff


def _record(r: _Run, m: _Motion, wkc, inp, late, q_ref, t_acq, t_wall, dc_err):
    """Write this cycle's row (see COLUMNS) and advance the shared row counter."""
    if r.row >= r.spec.capacity:      # cannot happen with the parent's sizing; never overrun
        raise RuntimeError(f"recording table full ({r.spec.capacity} rows)")
    c, u, has = r.cols, r.units, r.has
    sw_new, q_meas, qd_meas = r.decode(inp)
    x = r.rows[r.row]
    x[c["cycle"]], x[c["t"]], x[c["t_wall"]], x[c["wkc"]] = r.row, t_acq, t_wall, wkc
    x[c["late"]], x[c["phase"]], x[c["dc_err_ns"]] = late, m.phase, dc_err
    x[c["late_flag"]] = 1.0 if (late > 0.5 or not m.last_ok) else 0.0
    x[c["q"]] = q_meas
    x[c["qd"]] = qd_meas if qd_meas is not None else np.nan
    x[c["tau_m"]] = u.motor_torque(inp["torque_actual"]) if has["tau_m"] else np.nan
    x[c["i_m"]] = u.current(inp["current_actual"]) if has["i_m"] else np.nan
    x[c["tau_j"]] = u.joint_torque(inp["joint_torque"]) if has["tau_j"] else np.nan
    x[c["q_cmd"]] = q_ref
    x[c["status"]] = sw_new
    x[c["error_code"]] = u.to_joint_order(inp["error_code"]) if has["err"] else 0
    x[c["error_register"]] = u.to_joint_order(inp["error_register"]) if has["err_reg"] else 0
    r.row += 1
    r.ctrl[C_ROWS] = r.row
    r.ctrl[C_HEARTBEAT] += 1
    if late > 1.0:
        r.ctrl[C_LATE] += 1
    return sw_new, q_meas, qd_meas


def _motion(r: _Run, plan_q, plan_tau) -> dict:
    """3. enable, run the plan, stop (robot.stopramp.SafeStop); returns the summary."""
    spec, sc, n = r.spec, r.cfg.safety, r.n
    monitor = FaultMonitor(r.units.joint_names, spec.limits, sc.following_error_max_rad,
                           r.cfg.bus.wkc_error_budget, r.cfg.bus.lost_frame_budget,
                           r.cfg.bus.lost_frame_window, sc.stall_cycles)
    step_max = step_limit(sc.position_step_max_rad, spec.limits.qd_max, r.dt)  # <= 1.2 qd_max dt
    sw, q0, _ = r.decode(r.inp)
    m = _Motion(sw=sw, q_valid=q0.copy(), target=q0.copy(), prev_cw=np.zeros(n, np.int64),
                mode_ok=not r.has["mode_disp"], active=cia402.is_enabled(sw))
    m.feedback = FeedbackCheck(r.units.joint_names, spec.limits.qd_max, np.abs(r.units.rad_per_count),
                               spec.torque_limit, r.dt, cycles=sc.feedback_fault_cycles)
    r.motion = m
    t0, t0_mono = time.perf_counter(), time.monotonic()
    r.cpu0 = (time.process_time(), t0_mono)
    r.ctrl[C_PHASE] = PH_ENABLE
    while True:
        late = r.ticker.wait()
        cw, q_ref, tff = _command(r, m, plan_q, plan_tau, step_max)
        r.out["controlword"] = r.units.to_bus_order(cw)
        r.out["target_position"] = r.units.position_counts(m.target)
        if r.has["tff"]:
            r.out["torque_offset"] = r.units.torque_permille(tff)
        m.prev_cw = cw
        t_acq = time.monotonic() - t0_mono
        wkc, inp = r.bus.exchange(r.out)
        t_end = time.perf_counter()
        m.last_ok = wkc == r.exp
        dc_err = 0
        if r.aligner is not None and wkc > 0:
            r.ticker.adjust(r.aligner.update(r.bus.dc_time()))
            dc_err = r.aligner.error_ns
        sw_new, q_meas, qd_meas = _record(r, m, wkc, inp, late, q_ref, t_acq, t_end - t0, dc_err)
        if m.last_ok:
            m.sw, m.q_valid, m.qd_valid = sw_new, q_meas, qd_meas
            m.active = cia402.is_enabled(sw_new)
            m.delivered = m.target.copy()
            m.gap = m.gap and m.phase == PH_STOP     # cleared by the stop's resync
        elif wkc <= 0:             # no frame back (a short working counter: the others got it)
            m.gap = True
        if m.phase in (PH_ENABLE, PH_RUN):
            was_run = m.phase == PH_RUN
            ev = _supervise(r, m, monitor, wkc, inp, late, q_meas, qd_meas, q_ref)
            _advance(r, m, ev, len(plan_q), was_run)
        elif m.stop.done:
            break
        _poll_emergencies(r, m, inp)
    return _summary(r, m, monitor)


def _supervise(r: _Run, m: _Motion, monitor, wkc, inp, late, q_meas, qd_meas, q_ref):
    """Every check of one cycle (robot.safety.FaultMonitor, the parent's and the loop's own stop
    requests, the AL state); returns a FaultEvent or None."""
    cyc, exp = r.row - 1, r.exp
    run = m.phase == PH_RUN
    reset_ok = r.spec.fault_reset == "on_start"
    mode = r.units.to_joint_order(inp["modes_of_operation_display"]) if r.has["mode_disp"] else None
    err = r.units.to_joint_order(inp["error_code"]) if r.has["err"] else None
    sw_new = r.units.to_joint_order(inp["statusword"].astype(np.int64))
    ev = monitor.update(cyc, wkc, exp, sw_new if (run or not reset_ok) else None, err,
                        q_meas, qd_meas, q_ref, late_periods=late, check_following=run,
                        expect_enabled=run, mode=mode if (run and m.last_ok) else None)
    if ev is None and run and m.last_ok:
        tau = r.units.motor_torque(inp["torque_actual"]) if r.has["tau_m"] else None
        step = q_ref - (m.q_ref_prev if m.q_ref_prev is not None else q_ref)
        ev = m.feedback.update(cyc, q_meas, step, tau, sw_new, enabled=m.active)
    m.q_ref_prev = np.array(q_ref, float)
    if ev is None:
        ev = _stop_request(r, cyc) or m.emcy_event
    deficit = 0 < wkc < exp
    if ev is None and ((deficit and m.wkc_prev_ok)
                       or (m.last_ok and cyc % r.cfg.bus.al_check_cycles == 0)):
        ev = _al_check(r.bus, cyc, deficit)
    if ev is not None and ev.fault in (Fault.DRIVE_FAULT, Fault.DRIVE_DISABLED):
        al = r.bus.al_faults() if hasattr(r.bus, "al_faults") else None
        if al:     # the drive reacted to its ESC leaving OP: name the cause first
            ev = FaultEvent(Fault.AL_STATE, ev.cycle, f"cycle {ev.cycle}: slave left OP: {al}; "
                            f"drive reaction: {ev.message}")
    if ev is not None and ev.fault == Fault.WKC_DROP:
        lost = r.bus.lost_slaves()
        if lost:
            ev = FaultEvent(Fault.SLAVE_LOST, ev.cycle, ev.message + "; lost: " + ", ".join(lost))
    m.wkc_prev_ok = not deficit
    if ev is None and m.phase == PH_ENABLE:
        ev = _enable_step(r, m, mode)
    return ev


def _stop_request(r: _Run, cyc: int):
    """The parent's abort request (ctrl[C_ABORT]) or the loop's own (signal, parent death)."""
    why = r.watch.reason()
    if why is not None:
        return FaultEvent(why[0], cyc, f"cycle {cyc}: {why[1]}")
    a = int(r.ctrl[C_ABORT])
    if not a:
        return None
    text = {ABORT_SIGNAL: "signal to the parent process",
            ABORT_RECORD: "the parent cannot write the recording"}.get(a, "abort requested")
    return FaultEvent(_ABORT_FAULT.get(a, Fault.ABORTED), cyc, f"cycle {cyc}: {text}")


def _enable_step(r: _Run, m: _Motion, mode):
    """One cycle of the enable phase: mode check, then OPERATION ENABLED on every drive."""
    m.enable_cycles += 1
    if not m.mode_ok:
        if m.last_ok and np.all(mode == cia402.MODE_CSP):
            m.mode_ok = True
            return None
        m.mode_wait += 1
        if m.mode_wait > 100:
            j = int(np.argmax(mode != cia402.MODE_CSP))
            return FaultEvent(Fault.MODE_CHANGED, r.row - 1,
                              f"refused before enabling: joint {r.units.joint_names[j]} ignores "
                              f"the mode request: 0x6061 reads {int(mode[j])}, CSP (8) requested "
                              f"in 0x6060")
        return None
    if np.all(cia402.is_enabled(m.sw)) and m.last_ok:
        m.phase = PH_RUN
        r.ctrl[C_RUN_ROW0] = r.row
        r.ctrl[C_PHASE] = PH_RUN
    elif m.enable_cycles > r.spec.enable_timeout_cycles:
        return FaultEvent(Fault.ENABLE_TIMEOUT, r.row - 1,
                          f"drives not enabled after {m.enable_cycles} cycles: states "
                          f"{dict(zip(r.units.joint_names, cia402.describe(m.sw)))}; "
                          f"{r.bus.al_report()}")
    return None


def _advance(r: _Run, m: _Motion, ev, m_cycles: int, was_run: bool) -> None:
    """Next plan index (when this cycle ran the plan), or the defined stop (plan finished:
    policy hold; fault: its policy)."""
    if ev is None and was_run:
        m.k_run += 1
        if m.k_run >= m_cycles:
            m.stop = _new_stop(r, m, "hold")
            m.phase = PH_STOP
    if ev is not None:
        m.event, m.t_fault = ev, time.monotonic()
        m.stop = _new_stop(r, m, r.spec.policy.get(ev.fault.value, "hold"))
        m.phase = PH_STOP
    if m.phase == PH_STOP:
        r.ctrl[C_PHASE] = PH_STOP
        r.ctrl[C_STOP_ROW0] = r.row


def _poll_emergencies(r: _Run, m: _Motion, inp) -> None:
    """CoE emergencies and error registers (robot.emergency.EmergencyWatch, every cycle); an
    error while enabling or running stops the run (Fault.EMERGENCY, named with code and meaning,
    at the next cycle's supervision)."""
    regs = inp["error_register"] if (r.has["err_reg"] and m.last_ok) else None
    run = m.phase in (PH_ENABLE, PH_RUN)
    ev = r.emw.update(r.row - 1, regs, frame_ok=m.last_ok, stopping=not run)
    if ev is not None and run and m.emcy_event is None:
        m.emcy_event = ev


def _summary(r: _Run, m: _Motion, monitor) -> dict:
    ev, st = m.event, m.stop
    cpu_s, wall_s = time.process_time() - r.cpu0[0], time.monotonic() - r.cpu0[1]
    if not r.cpu0[1]:                # never cycled (dry run, bring-up error)
        cpu_s = wall_s = 0.0
    return {"cpu_share": round(cpu_s / wall_s, 3) if wall_s > 0 else None,
            "cpu_warning": cpu_share_warning(cpu_s, wall_s, r.rt.get("rt_budget")),
            "rows": r.row, "fault": None if ev is None else ev.fault.value,
            "fault_cycle": None if ev is None else ev.cycle,
            "fault_time_monotonic": m.t_fault,
            "message": "completed" if ev is None else ev.message,
            "stop_cycles": st.k, "stop_bound": st.max_cycles, "stop_confirmed": st.confirmed,
            "stop_ramp_cycles": st.ramp_cycles, "stop_standstill": st.standstill,
            "stop_policy": st.policy, "expected_wkc": r.exp,
            "lost_frames": monitor.lost_total, "wkc_errors": monitor.wkc_total,
            "late_cycles": int(r.ctrl[C_LATE]), "skipped_grid_points": r.ticker.skipped,
            "enable_cycles": m.enable_cycles, "brake_cycles": st.seq.brake_cycles,
            "realtime": bool(r.rt.get("sched_fifo")), "rt": r.rt,
            "distributed_clocks": r.aligner is not None, **r.emw.records(),
            "warnings": m.feedback.warnings}


def _al_check(bus, cycle, deficit):
    """AL state of every slave (robot.bus.EthercatBus.al_faults); a lost slave is reported as
    such. Returns a FaultEvent or None."""
    if deficit:
        lost = bus.lost_slaves()
        if lost:
            return FaultEvent(Fault.SLAVE_LOST, cycle, f"cycle {cycle}: working counter short; "
                              f"lost: " + ", ".join(lost))
    msg = bus.al_faults() if hasattr(bus, "al_faults") else None
    if msg:
        return FaultEvent(Fault.AL_STATE, cycle, f"cycle {cycle}: slave left OP: {msg}")
    return None
