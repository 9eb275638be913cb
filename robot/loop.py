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

import signal
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing import shared_memory

import numpy as np

from identify.model.robot_model import Limits

from .drive import cia402
from .config import load_config
from .rt import DcAligner, Ticker, harden
from .safety import DEFAULT_POLICY, Fault, FaultEvent, FaultMonitor, StopSequence, limit_step, step_limit
from .drive.units import make_units

# ctrl slots
C_ROWS, C_PHASE, C_ABORT, C_RUN_ROW0, C_HEARTBEAT, C_LATE, C_STOP_ROW0 = range(7)
CTRL_LEN = 8
PH_INIT, PH_IDLE, PH_ENABLE, PH_RUN, PH_STOP, PH_DONE = range(6)
# ctrl[C_ABORT] values: why the parent asks for the defined stop
ABORT_REQUEST, ABORT_SIGNAL, ABORT_RECORD = 1, 2, 3
_ABORT_FAULT = {ABORT_REQUEST: Fault.ABORTED, ABORT_SIGNAL: Fault.SIGNAL, ABORT_RECORD: Fault.RECORD_FAILED}

# per-row scalar columns, then per-joint blocks of n columns each
SCALARS = ("cycle", "t", "t_wall", "wkc", "late", "phase", "late_flag", "dc_err_ns")
BLOCKS = ("q", "qd", "tau_m", "i_m", "tau_j", "q_cmd", "status", "error_code")


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


def _attach(name):
    """Attach to a block the parent created (and will unlink). The spawned child shares the
    parent's resource tracker, so attaching registers nothing new."""
    return shared_memory.SharedMemory(name=name)


def loop_main(spec: LoopSpec, conn) -> None:
    """Entry point of the loop process."""
    # Ctrl-C reaches the whole process group: the loop must not die mid-motion on it. The parent
    # turns it into an abort request (ctrl[C_ABORT]) that ends in the defined stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    cfg = load_config(spec.config_path)
    units = make_units(cfg, spec.joint_names)
    n = units.n
    ctrl_shm, rec_shm = _attach(spec.ctrl_shm), _attach(spec.rec_shm)
    ctrl = np.ndarray((CTRL_LEN,), np.int64, ctrl_shm.buf)
    rows = np.ndarray((spec.capacity, row_width(n)), np.float64, rec_shm.buf)
    rt = harden(spec.realtime)          # gc off, mlockall, CPU affinity, SCHED_FIFO (+ warnings)
    import importlib
    mod, attr = spec.bus_factory.split(":")   # robot.bus: the only pysoem import, in this process
    bus = getattr(importlib.import_module(mod), attr)(
        cfg, spec.iface, complete_access=spec.complete_access,
        receive_timeout_us=spec.receive_timeout_us, **spec.bus_kwargs)
    try:
        bus.open()
    except RuntimeError as exc:   # BusError / IdentityError: a clear message, no traceback
        conn.send(("error", type(exc).__name__, str(exc)))
        ctrl_shm.close(), rec_shm.close()
        return
    except Exception as exc:
        conn.send(("error", type(exc).__name__, f"{exc}\n{traceback.format_exc()}"))
        ctrl_shm.close(), rec_shm.close()
        return
    units = _drive_units(cfg, spec.joint_names, bus)
    plan_shm = None
    try:
        plan_shm = _run(spec, cfg, units, bus, conn, ctrl, rows, rt)
    except Exception as exc:
        _emergency_disable(bus, units.n)
        conn.send(("error", type(exc).__name__, f"{exc}\n{traceback.format_exc()}"))
    finally:
        bus.close()
        ctrl[C_PHASE] = PH_DONE
        for s in (plan_shm, ctrl_shm, rec_shm):
            if s is not None:
                s.close()


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


def _emergency_disable(bus, n, cycles: int = 5) -> None:
    """Best effort after an unexpected error: disable voltage on every drive for a few cycles
    (leaving OP afterwards, in bus.close, disables them too)."""
    try:
        out = bus.layout.new_outputs(n)
        for _ in range(cycles):
            wkc, inp = bus.exchange(out)
            out["target_position"] = inp["position_actual"]
            time.sleep(0.001)
    except Exception:
        pass


def _run(spec, cfg, units, bus, conn, ctrl, rows, rt):
    n, dt = units.n, cfg.bus.cycle_time_s
    sc = cfg.safety
    cols = column_slices(n)
    lay = bus.layout
    names_tx = lay.tx.names
    out = lay.new_outputs(n)
    has_mode = "modes_of_operation" in lay.rx.names
    has_mode_disp = "modes_of_operation_display" in names_tx
    has_err = "error_code" in names_tx
    has_tff = "torque_offset" in lay.rx.names
    if has_mode:
        out["modes_of_operation"] = cia402.MODE_CSP
    exp = bus.expected_wkc
    ticker = Ticker(dt)
    dc_on = bool(getattr(bus, "dc", False))
    aligner = DcAligner(int(round(dt * 1e9)), int(round(cfg.bus.dc_frame_offset_s * 1e9))) if dc_on else None

    def decode(inp):
        sw = units.to_joint_order(inp["statusword"].astype(np.int64))
        q = units.position(inp["position_actual"])
        qd = units.velocity(inp["velocity_actual"]) if "velocity_actual" in names_tx else None
        return sw, q, qd

    # 1. read the pose (drives left disabled) --------------------------------------------------
    inp = None
    for _ in range(200):
        ticker.wait()
        out["controlword"] = 0
        wkc, inp = bus.exchange(out)
        if wkc == exp:
            break
    else:
        raise RuntimeError(f"{spec.iface}: no valid process data after 200 cycles "
                           f"(wkc {wkc}, expected {exp}): {bus.al_report()}")
    sw, q_now, _ = decode(inp)
    err0 = units.to_joint_order(inp["error_code"]).astype(int) if has_err else np.zeros(n, int)
    faulted = {units.joint_names[j]: {"statusword": int(sw[j]), "error_code": int(err0[j])}
               for j in np.flatnonzero(cia402.is_fault(sw))}
    out["target_position"] = inp["position_actual"]
    emcy: list[dict] = []              # CoE emergency messages, with the row they were read at
    has_emcy = hasattr(bus, "read_emergencies")
    if has_emcy:
        for k in range(n):
            emcy += [dict(e, row=-1) for e in bus.read_emergencies(k)]
    report = bus.bus_report() if hasattr(bus, "bus_report") else {}
    conn.send(("up", {"q": q_now, "statusword": sw, "expected_wkc": exp, "faults": faulted,
                      "slaves": bus.slave_names(), "bus_report": report, "rt": rt, "emergencies": emcy,
                      "states": cia402.describe(sw)}))
    ctrl[C_PHASE] = PH_IDLE

    # 2. idle until the parent says go (keep the slaves fed; watchdogs) -------------------------
    t_idle = time.monotonic()
    msg = None
    while msg is None:
        ticker.wait()
        out["controlword"] = 0
        out["target_position"] = inp["position_actual"]
        wkc, new = bus.exchange(out)
        if wkc == exp:
            inp = new
        if conn.poll():
            msg = conn.recv()
        elif time.monotonic() - t_idle > spec.idle_timeout_s:
            raise RuntimeError(f"no command from the parent within {spec.idle_timeout_s} s")
    if msg[0] != "go":
        conn.send(("done", {"fault": None, "message": "left without enabling", "rows": 0}))
        return None
    _, plan_name, m_cycles = msg
    plan_shm = _attach(plan_name)
    plan_q = np.ndarray((m_cycles, n), np.float64, plan_shm.buf)
    plan_tau = np.ndarray((m_cycles, n), np.float64, plan_shm.buf, offset=m_cycles * n * 8)

    monitor = FaultMonitor(units.joint_names, spec.limits, sc.following_error_max_rad,
                           cfg.bus.wkc_error_budget, cfg.bus.lost_frame_budget,
                           cfg.bus.lost_frame_window, sc.stall_cycles)
    step_max = step_limit(sc.position_step_max_rad, spec.limits.qd_max, dt)   # (n,), <= 1.2 qd_max dt
    brake_cycles = max(1, int(np.ceil(sc.brake_delay_s / dt - 1e-9)))
    reset_ok = spec.fault_reset == "on_start"
    sw, q_meas, qd_meas = decode(inp)
    target = q_meas.copy()          # target = actual before enabling
    q_valid = q_meas.copy()
    prev_cw = np.zeros(n, np.int64)
    phase, k_run, stop, event, last_ok = PH_ENABLE, 0, None, None, True
    enable_cycles = mode_wait = 0
    wkc_prev_ok = True
    row = 0
    t0 = time.perf_counter()
    t0_mono = time.monotonic()
    ctrl[C_PHASE] = PH_ENABLE
    mode_ok = not has_mode_disp
    while True:
        late = ticker.wait()
        if row >= spec.capacity:      # cannot happen with the parent's sizing; never overrun
            raise RuntimeError(f"recording table full ({spec.capacity} rows)")
        # -- command for this cycle -----------------------------------------------------------
        # CSP: the target sent in cycle k is the position for the next sync (t_{k+1}); the row
        # records q_ref = the reference at this cycle's time t_k next to the state measured at t_k
        tff = np.zeros(n)
        if phase == PH_ENABLE:
            # the mode display must read CSP before any enabling word is sent
            cw = (cia402.enable_controlword(sw, prev_cw, reset_ok) if mode_ok
                  else np.zeros(n, np.int64))
            target = q_valid.copy()
            q_ref = target
        elif phase == PH_RUN:
            cw = np.full(n, cia402.CW_ENABLE_OPERATION, np.int64)
            k_next = min(k_run + 1, m_cycles - 1)
            target = limit_step(target, plan_q[k_next], step_max)
            tff = plan_tau[k_next]
            q_ref = plan_q[k_run]
        else:
            cw, hold = stop.step(sw if last_ok else None)
            target = limit_step(target, hold, step_max)
            q_ref = target
        out["controlword"] = units.to_bus_order(cw)
        out["target_position"] = units.position_counts(target)
        if has_tff:
            out["torque_offset"] = units.torque_permille(tff)
        prev_cw = cw
        t_acq = time.monotonic() - t0_mono
        wkc, inp = bus.exchange(out)
        t_end = time.perf_counter()
        last_ok = wkc == exp
        dc_err = 0
        if aligner is not None and wkc > 0:
            ticker.adjust(aligner.update(bus.dc_time()))
            dc_err = aligner.error_ns
        # -- measurements ---------------------------------------------------------------------
        sw_new, q_meas, qd_meas = decode(inp)
        mode = units.to_joint_order(inp["modes_of_operation_display"]) if has_mode_disp else None
        if last_ok:
            sw, q_valid = sw_new, q_meas
        r = rows[row]
        r[cols["cycle"]] = row
        r[cols["t"]] = t_acq
        r[cols["t_wall"]] = t_end - t0
        r[cols["wkc"]] = wkc
        r[cols["late"]] = late
        r[cols["phase"]] = phase
        r[cols["late_flag"]] = 1.0 if (late > 0.5 or not last_ok) else 0.0
        r[cols["dc_err_ns"]] = dc_err
        r[cols["q"]] = q_meas
        r[cols["qd"]] = qd_meas if qd_meas is not None else np.nan
        r[cols["tau_m"]] = units.motor_torque(inp["torque_actual"]) if "torque_actual" in names_tx else np.nan
        r[cols["i_m"]] = units.current(inp["current_actual"]) if "current_actual" in names_tx else np.nan
        r[cols["tau_j"]] = units.joint_torque(inp["joint_torque"]) if "joint_torque" in names_tx else np.nan
        r[cols["q_cmd"]] = q_ref
        r[cols["status"]] = sw_new
        r[cols["error_code"]] = units.to_joint_order(inp["error_code"]) if has_err else 0
        row += 1
        ctrl[C_ROWS] = row
        ctrl[C_HEARTBEAT] += 1
        if late > 1.0:
            ctrl[C_LATE] += 1
        # -- supervision ----------------------------------------------------------------------
        if phase in (PH_ENABLE, PH_RUN):
            ev = monitor.update(row - 1, wkc, exp,
                                sw_new if (phase == PH_RUN or not reset_ok) else None,
                                units.to_joint_order(inp["error_code"]) if has_err else None,
                                q_meas, qd_meas, q_ref, late_periods=late,
                                check_following=phase == PH_RUN,
                                expect_enabled=phase == PH_RUN,
                                mode=mode if (phase == PH_RUN and last_ok) else None)
            if ev is None and ctrl[C_ABORT]:
                ev = FaultEvent(_ABORT_FAULT.get(int(ctrl[C_ABORT]), Fault.ABORTED), row - 1,
                                f"cycle {row - 1}: " + {ABORT_SIGNAL: "signal to the parent process",
                                                         ABORT_RECORD: "the parent cannot write the recording"}
                                .get(int(ctrl[C_ABORT]), "abort requested"))
            deficit = 0 < wkc < exp
            if ev is None and ((deficit and wkc_prev_ok)
                               or (last_ok and (row - 1) % cfg.bus.al_check_cycles == 0)):
                ev = _al_check(bus, row - 1, deficit)
            if ev is not None and ev.fault in (Fault.DRIVE_FAULT, Fault.DRIVE_DISABLED):
                al = bus.al_faults() if hasattr(bus, "al_faults") else None
                if al:     # the drive reacted to its ESC leaving OP: name the cause first
                    ev = FaultEvent(Fault.AL_STATE, ev.cycle, f"cycle {ev.cycle}: slave left OP: {al}; "
                                    f"drive reaction: {ev.message}")
            if ev is not None and ev.fault == Fault.WKC_DROP:
                lost = bus.lost_slaves()
                if lost:
                    ev = FaultEvent(Fault.SLAVE_LOST, ev.cycle, ev.message + "; lost: " + ", ".join(lost))
            wkc_prev_ok = not deficit
            if ev is None and phase == PH_ENABLE:
                enable_cycles += 1
                if not mode_ok:
                    if last_ok and np.all(mode == cia402.MODE_CSP):
                        mode_ok = True
                    elif (mode_wait := mode_wait + 1) > 100:
                        j = int(np.argmax(mode != cia402.MODE_CSP))
                        ev = FaultEvent(Fault.MODE_CHANGED, row - 1,
                                        f"refused before enabling: joint {units.joint_names[j]} "
                                        f"ignores the mode request: 0x6061 reads {int(mode[j])}, "
                                        f"CSP (8) requested in 0x6060")
                elif np.all(cia402.is_enabled(sw)) and last_ok:
                    phase = PH_RUN
                    ctrl[C_RUN_ROW0] = row
                    ctrl[C_PHASE] = PH_RUN
                elif enable_cycles > spec.enable_timeout_cycles:
                    ev = FaultEvent(Fault.ENABLE_TIMEOUT, row - 1,
                                    f"drives not enabled after {enable_cycles} cycles: states "
                                    f"{dict(zip(units.joint_names, cia402.describe(sw)))}; "
                                    f"{bus.al_report()}")
            elif ev is None and phase == PH_RUN:
                k_run += 1
                if k_run >= m_cycles:
                    stop = StopSequence(n, plan_q[-1], sc.hold_cycles, sc.confirm_cycles, "hold",
                                        brake_cycles=brake_cycles)
                    phase = PH_STOP
            if ev is not None:
                event = ev
                pol = spec.policy.get(ev.fault.value, "hold")
                stop = StopSequence(n, q_valid, sc.hold_cycles, sc.confirm_cycles, pol,
                                    brake_cycles=brake_cycles)
                phase = PH_STOP
            if phase == PH_STOP:
                ctrl[C_PHASE] = PH_STOP
                ctrl[C_STOP_ROW0] = row
        elif stop.done:
            break
        # CoE emergencies: one slave's mailbox every al_check_cycles (round robin, all phases)
        if has_emcy and last_ok and (row - 1) % cfg.bus.al_check_cycles == 5 % cfg.bus.al_check_cycles:
            k_mb = ((row - 1) // cfg.bus.al_check_cycles) % n
            emcy += [dict(e, row=row - 1) for e in bus.read_emergencies(k_mb)]
    summary = {"rows": row, "fault": None if event is None else event.fault.value,
               "fault_cycle": None if event is None else event.cycle,
               "message": "completed" if event is None else event.message,
               "stop_cycles": stop.k, "stop_bound": stop.max_cycles,
               "stop_confirmed": stop.confirmed, "expected_wkc": exp,
               "lost_frames": monitor.lost_total, "wkc_errors": monitor.wkc_total,
               "late_cycles": int(ctrl[C_LATE]), "skipped_grid_points": ticker.skipped,
               "enable_cycles": enable_cycles, "brake_cycles": brake_cycles,
               "realtime": bool(rt.get("sched_fifo")), "rt": rt, "distributed_clocks": dc_on,
               "emergencies": emcy}
    conn.send(("done", summary))
    return plan_shm


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
