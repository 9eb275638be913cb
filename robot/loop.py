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

The loop never skips a cycle index: the emulated slaves advance the twin one step per frame, so
command k always goes with frame k. A cycle that starts late is counted (and a stall beyond
``stall_cycles`` periods is a fault); the schedule then restarts from now.
"""
from __future__ import annotations

import os
import signal
import time
import traceback
from dataclasses import dataclass, field
from multiprocessing import shared_memory

import numpy as np

from identify.model.robot_model import Limits

from . import cia402
from .config import load_config
from .safety import DEFAULT_POLICY, Fault, FaultEvent, FaultMonitor, StopSequence, limit_step, step_limit
from .units import make_units

# ctrl slots
C_ROWS, C_PHASE, C_ABORT, C_RUN_ROW0, C_HEARTBEAT, C_LATE, C_STOP_ROW0 = range(7)
CTRL_LEN = 8
PH_INIT, PH_IDLE, PH_ENABLE, PH_RUN, PH_STOP, PH_DONE = range(6)

# per-row scalar columns, then per-joint blocks of n columns each
SCALARS = ("cycle", "t", "t_wall", "wkc", "late", "phase")
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
    allow_fault_reset: bool = True
    policy: dict = field(default_factory=lambda: {f.value: p for f, p in DEFAULT_POLICY.items()})
    realtime: bool = True     # try SCHED_FIFO for the loop process (root / CAP_SYS_NICE)
    bus_factory: str = "robot.bus:EthercatBus"   # "module:callable"(cfg, iface, **kw); tests swap it
    bus_kwargs: dict = field(default_factory=dict)


class Ticker:
    """Absolute-deadline pacing: sleep most of the wait, spin the last ~0.2 ms."""

    def __init__(self, dt: float):
        self.dt = dt
        self.next = time.perf_counter()

    def wait(self) -> float:
        """Wait for the next cycle; returns how late it starts, in periods (0 if on time)."""
        now = time.perf_counter()
        rem = self.next - now
        if rem > 3e-4:
            time.sleep(rem - 2e-4)
        while time.perf_counter() < self.next:
            pass
        now = time.perf_counter()
        late = (now - self.next) / self.dt
        if late > 1.0:
            self.next = now + self.dt     # restart the schedule; no burst of catch-up frames
        else:
            self.next += self.dt
        return late


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
    rt = False
    if spec.realtime:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(30))
            rt = True
        except (OSError, AttributeError):
            rt = False
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


def _run(spec, cfg, units, bus, conn, ctrl, rows, realtime=False):
    n, dt = units.n, cfg.bus.cycle_time_s
    sc = cfg.safety
    cols = column_slices(n)
    lay = bus.layout
    names_tx = lay.tx.names
    out = lay.new_outputs(n)
    has_mode = "modes_of_operation" in lay.rx.names
    has_tff = "torque_offset" in lay.rx.names
    if has_mode:
        out["modes_of_operation"] = cia402.MODE_CSP
    exp = bus.expected_wkc
    ticker = Ticker(dt)

    def decode(inp):
        sw = units.to_joint_order(inp["statusword"].astype(np.int64))
        q = units.position(inp["position_actual"])
        qd = units.velocity(inp["velocity_actual"]) if "velocity_actual" in names_tx else None
        return sw, q, qd

    # 1. read the pose (drives left disabled) --------------------------------------------------
    cw_bus = np.zeros(n, np.int64)
    inp = None
    for _ in range(200):
        ticker.wait()
        out["controlword"] = cw_bus
        wkc, inp = bus.exchange(out)
        if wkc == exp:
            break
    else:
        raise RuntimeError(f"{spec.iface}: no valid process data after 200 cycles "
                           f"(wkc {wkc}, expected {exp}): {bus.al_report()}")
    sw, q_now, _ = decode(inp)
    out["target_position"] = inp["position_actual"]
    conn.send(("up", {"q": q_now, "statusword": sw, "expected_wkc": exp,
                      "slaves": bus.slave_names()}))
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
    sw, q_meas, qd_meas = decode(inp)
    target = q_meas.copy()          # target = actual before enabling
    q_valid = q_meas.copy()
    prev_cw = np.zeros(n, np.int64)
    phase, k_run, stop, event, last_ok = PH_ENABLE, 0, None, None, True
    enable_cycles = 0
    row = 0
    t0 = time.perf_counter()
    ctrl[C_PHASE] = PH_ENABLE
    while True:
        late = ticker.wait()
        if row >= spec.capacity:      # cannot happen with the parent's sizing; never overrun
            raise RuntimeError(f"recording table full ({spec.capacity} rows)")
        # -- command for this cycle -----------------------------------------------------------
        # CSP: the target sent in cycle k is the position for the next sync (t_{k+1}); the row
        # records q_ref = the reference at this cycle's time t_k next to the state measured at t_k
        # (the same convention as the twin backend's recordings).
        tff = np.zeros(n)
        if phase == PH_ENABLE:
            cw = cia402.enable_controlword(sw, prev_cw, spec.allow_fault_reset)
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
        wkc, inp = bus.exchange(out)
        last_ok = wkc == exp
        # -- measurements ---------------------------------------------------------------------
        sw_new, q_meas, qd_meas = decode(inp)
        if last_ok:
            sw, q_valid = sw_new, q_meas
        r = rows[row]
        r[cols["cycle"]] = row
        r[cols["t"]] = row * dt
        r[cols["t_wall"]] = time.perf_counter() - t0
        r[cols["wkc"]] = wkc
        r[cols["late"]] = late
        r[cols["phase"]] = phase
        r[cols["q"]] = q_meas
        r[cols["qd"]] = qd_meas if qd_meas is not None else np.nan
        r[cols["tau_m"]] = units.motor_torque(inp["torque_actual"]) if "torque_actual" in names_tx else np.nan
        r[cols["i_m"]] = units.current(inp["current_actual"]) if "current_actual" in names_tx else np.nan
        r[cols["tau_j"]] = units.joint_torque(inp["joint_torque"]) if "joint_torque" in names_tx else np.nan
        r[cols["q_cmd"]] = q_ref
        r[cols["status"]] = sw_new
        r[cols["error_code"]] = (units.to_joint_order(inp["error_code"]) if "error_code" in names_tx
                                 else 0)
        row += 1
        ctrl[C_ROWS] = row
        ctrl[C_HEARTBEAT] += 1
        if late > 1.0:
            ctrl[C_LATE] += 1
        # -- supervision ----------------------------------------------------------------------
        if phase in (PH_ENABLE, PH_RUN):
            ev = monitor.update(row - 1, wkc, exp,
                                sw_new if phase == PH_RUN else None,   # enabling resets faults
                                units.to_joint_order(inp["error_code"]) if "error_code" in names_tx else None,
                                q_meas, qd_meas, q_ref, late_periods=late,
                                check_following=phase == PH_RUN)
            if ev is None and ctrl[C_ABORT]:
                ev = FaultEvent(Fault.ABORTED, row - 1, f"cycle {row - 1}: abort requested")
            if ev is not None and ev.fault == Fault.WKC_DROP:
                lost = bus.lost_slaves()
                if lost:
                    ev = FaultEvent(Fault.SLAVE_LOST, ev.cycle, ev.message + "; lost: " + ", ".join(lost))
            if ev is None and phase == PH_ENABLE:
                enable_cycles += 1
                if np.all(cia402.is_enabled(sw)) and last_ok:
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
                    stop = StopSequence(n, plan_q[-1], sc.hold_cycles, sc.confirm_cycles, "hold")
                    phase = PH_STOP
            if ev is not None:
                event = ev
                pol = spec.policy.get(ev.fault.value, "hold")
                stop = StopSequence(n, q_valid, sc.hold_cycles, sc.confirm_cycles, pol)
                phase = PH_STOP
            if phase == PH_STOP:
                ctrl[C_PHASE] = PH_STOP
                ctrl[C_STOP_ROW0] = row
        elif stop.done:
            break
    summary = {"rows": row, "fault": None if event is None else event.fault.value,
               "fault_cycle": None if event is None else event.cycle,
               "message": "completed" if event is None else event.message,
               "stop_cycles": stop.k, "stop_bound": stop.max_cycles,
               "stop_confirmed": stop.confirmed, "expected_wkc": exp,
               "lost_frames": monitor.lost_total, "wkc_errors": monitor.wkc_total,
               "late_cycles": int(ctrl[C_LATE]), "enable_cycles": enable_cycles,
               "realtime": realtime}
    conn.send(("done", summary))
    return plan_shm
