"""N emulated drives in a line, answering EtherCAT frames in place, stepping the motion once per
process-data frame (a frame with an LRW or LWR datagram; LRD-only frames do not step). No sockets here: :meth:`SlaveChain.process` takes a wire frame and returns
the answer (or None when the frame is lost), so everything is testable in-process.

Addressing as on a real line: auto-increment (every slave increments ADP; the one that sees 0
answers), configured station address, broadcast (every slave; BRD ORs the data), logical
(through each slave's FMMUs). Working counter: +1 per successful read, +1 per write, read-write
+1 for the read and +2 for the write.

Slave numbers in this module (and in fault injection) are 0-based bus positions, i.e. the index
into pysoem's ``master.slaves`` and the drive's index in the configuration file.
"""
from __future__ import annotations

import math
import struct
import time

import numpy as np

from . import frames as F
from .coe import drive_dictionary
from .config import SlaveConfig
from .drive import ERR_INJECTED_DEFAULT, Cia402Drive, STATE_NAMES as DRIVE_STATES
from .esc import ALSC_SM_WATCHDOG, OP, SAFEOP, STATE_NAMES as AL_NAMES, Esc
from .motion import Motion
from .sii import SyncManagerLayout, build_sii

# the drive's stop / fault reaction objects the master writes at bring-up (reported in status())
STOP_OBJECTS = (0x6007, 0x605A, 0x605B, 0x605C, 0x605E, 0x6084, 0x6085, 0x6072)
FAULT_KINDS = ("drive_fault", "drop_frames", "corrupt_frames", "stop_answering", "resume_answering",
               "sdo_abort", "wrong_identity", "sto", "quick_stop", "ignore_mode", "al_error",
               "set_object", "clear", "freeze_encoder", "warning", "swap_serials", "emergency",
               "set_alias")


class SlaveChain:
    """The emulated slaves plus the motion source they share.

    Args:
        cfg: the drive configuration (identity, PDO layout, per-drive scaling).
        motion: a :class:`~twin.ethercat.motion.Motion` over the arm's joints.
        n_slaves: number of drives on the line (None -> one per configured drive).
        q0: initial joint positions [rad], (motion.n,) (None -> zeros).
        watchdog_s: initial process-data (SyncManager) watchdog time, registers 0x0400/0x0420 (the
            master may reprogram them): an ESC in OP that gets no outputs for this long drops to
            SAFEOP with AL status code 0x001B (an enabled drive faults). None disables it.
        following_window_rad: CiA 402 following error window (0x6065) [rad].
        record_truth: keep every stepped state for :meth:`truth`.
        clock: "frame" (default, lock-step: one period per process-data frame, whatever the wall
            time) or "sync0" (as a DC-synchronised drive: one period per elapsed cycle of wall
            time, so a late master cycle lets the axis hold its last target for the missed
            SYNC0 events; the physics time then tracks the master's acquisition time stamps).
    """

    def __init__(self, cfg: SlaveConfig, motion: Motion, n_slaves: int | None = None, q0=None,
                 watchdog_s: float | None = 0.5, following_window_rad: float = 0.2,
                 record_truth: bool = True, clock: str = "frame"):
        n = len(cfg.drives) if n_slaves is None else int(n_slaves)
        if clock not in ("frame", "sync0"):
            raise ValueError(f"clock={clock!r}: expected 'frame' (one period per process-data "
                             f"frame) or 'sync0' (one period per elapsed cycle of wall time)")
        self.clock = clock
        self._t_step: float | None = None    # wall time of the last period stepped ("sync0")
        self.held_periods = self.catch_ups = 0   # "sync0": periods stepped with no frame, and when
        if not 1 <= n <= len(cfg.drives):
            raise ValueError(f"n_slaves={n_slaves}: {cfg.source} configures {len(cfg.drives)} drives")
        self.cfg = cfg
        self.motion = motion
        self.layout = SyncManagerLayout()
        self.watchdog_s = watchdog_s
        self.record_truth = record_truth
        self.joint_index = []
        for k in range(n):
            j = cfg.drives[k].joint
            if j not in motion.joint_names:
                raise ValueError(f"{cfg.source}: drives[{k}].joint={j!r} is not a joint of the arm "
                                 f"({motion.joint_names})")
            self.joint_index.append(motion.joint_names.index(j))
        self.slaves: list[Esc] = []
        for k in range(n):
            d = cfg.drives[k]
            ident = dict(vendor_id=cfg.vendor_id, product_code=cfg.product_code, revision=cfg.revision,
                         serial=k + 1, name="twinid CiA402 servo")
            pdo = dict(rx_pdo=cfg.rx_pdo, rx_entries=cfg.rx_entries, tx_pdo=cfg.tx_pdo, tx_entries=cfg.tx_entries)
            # 0x6076 is motor side (mN*m); the configured rated torque is link side
            od = drive_dictionary(**ident, **pdo,
                                  rated_torque_mNm=int(round(d.rated_torque_Nm / d.gear_ratio * 1000)),
                                  rated_current_mA=int(round(d.rated_current_A * 1000)),
                                  counts_per_rev=d.counts_per_link_rev,
                                  following_window_counts=int(following_window_rad / (2 * math.pi)
                                                              * d.counts_per_link_rev),
                                  gear_ratio=int(round(d.gear_ratio)), encoder_counts=d.encoder_counts_per_rev,
                                  position_source=1 if d.position_encoder == "motor" else 2)
            drive = Cia402Drive(od, d)
            esc = Esc(k, build_sii(**ident, **pdo, layout=self.layout), od, drive, is_last=(k == n - 1),
                      layout=self.layout, downstream=n - 1 - k)
            esc.set_watchdog(watchdog_s)
            self.slaves.append(esc)
        q0 = np.zeros(motion.n) if q0 is None else np.asarray(q0, float)
        if q0.shape != (motion.n,):
            raise ValueError(f"q0 has shape {q0.shape}, expected ({motion.n},) for joints {motion.joint_names}")
        self.q_hold = q0.copy()
        self._apply_state(motion.reset(q0))
        for esc in self.slaves:
            esc.drive.q_hold = esc.drive.q_actual
        # fault injection state
        self.drop_count = 0
        self.corrupt_count = 0
        # counters
        self.frames = 0
        self.cycles = 0
        self.dropped = 0
        self.corrupted = 0
        self.send_errors = 0
        self.last_send_error = ""
        self.answer_ns = np.zeros(10000, np.int64)   # receive -> answer sent, last 10000 frames (server)
        self.step_ns = np.zeros(10000, np.int64)     # answer sent -> motion stepped (server)
        self.last_output_t = [0.0] * n
        self._op_since = [None] * n
        self._pd_pending = False
        self._torque_limit: tuple | None = None   # the 0x6072 limits last handed to the motion
        self.watchdog_trips: list[dict] = []      # SM watchdog expiries: slave, time, last output
        self._truth = _TruthBuffer(motion.n)

    # ---- frame processing
    def process(self, frame) -> bytearray | None:
        """Answer one wire frame. Returns the frame to send back (same length) or None."""
        self.frames += 1
        if self.drop_count > 0:
            self.drop_count -= 1
            self.dropped += 1
            return None
        buf = bytearray(frame)
        try:
            dgrams = F.iter_datagrams(buf)
        except F.FrameError:
            return None
        if self.corrupt_count > 0:             # the ESCs see a CRC error: nothing is processed
            self.corrupt_count -= 1
            self.corrupted += 1
            for esc in self.slaves:
                esc.count_rx_error()
            for _h, d, n in dgrams:            # garbled payload, headers intact, working counter 0
                buf[d:d + n] = bytes(x ^ 0x5A for x in buf[d:d + n])
                buf[d + n] = buf[d + n + 1] = 0
            return buf
        pd = False
        for h, d, n in dgrams:
            cmd = buf[h]
            if cmd in F.LOGICAL:
                pd = pd or cmd != F.LRD          # a cycle = the frame that carries the outputs
                self._logical(buf, cmd, h, d, n)
            elif cmd != F.NOP:
                self._physical(buf, cmd, h, d, n)
        buf[6] |= 0x02                         # ESC port 0 marks the source MAC (as on real hardware)
        self._pd_pending = pd
        return buf

    def after_frame(self) -> None:
        """Called once the answer is on the wire, if the frame carried process data: step the
        motion one period with the outputs it brought (both clocks)."""
        if self._pd_pending:
            self._pd_pending = False
            if self.clock == "sync0":       # (catch_up not called first: start the grid here)
                self._t_step = (time.monotonic() - self.cfg.cycle_time_s if self._t_step is None
                                else self._t_step) + self.cfg.cycle_time_s
            self.cycle()

    def is_process_data(self, frame) -> bool:
        """Does this wire frame carry outputs (an LRW / LWR datagram)?"""
        try:
            return any(frame[h] in F.LOGICAL and frame[h] != F.LRD for h, _d, _n in F.iter_datagrams(frame))
        except F.FrameError:
            return False

    def catch_up(self, n_frames: int) -> int:
        """"sync0" clock, before a batch of `n_frames` process-data frames (those waiting in the
        socket) is answered: step the periods that fell due on the wall clock and that no frame
        of the batch accounts for -- cycles the master skipped, in which a DC-synced drive holds
        its last target through the SYNC0 events (frames that waited behind a stall of this
        process each step their own period, in order, with their own outputs, as the drive
        would have). Returns the periods stepped; none in the normal case, so the answer is not
        delayed. A no-op with the "frame" clock."""
        if self.clock != "sync0" or n_frames <= 0:
            return 0
        dt = self.cfg.cycle_time_s
        now = time.monotonic()
        if self._t_step is None or abs(now - self._t_step) > 50 * dt:
            self._t_step = now - n_frames * dt                  # (re)synchronise
        extra = int((now - self._t_step) / dt + 0.5) - n_frames
        for _ in range(extra):
            self.cycle()
        if extra > 0:
            self._t_step += extra * dt
            self.held_periods += extra
            self.catch_ups += 1
            return extra
        return 0

    def _physical(self, buf: bytearray, cmd: int, h: int, d: int, n: int) -> None:
        adp, ado = struct.unpack_from("<HH", buf, h + 2)
        wkc = buf[d + n] | buf[d + n + 1] << 8
        data = buf[d:d + n]
        orig = bytes(data)
        auto = cmd in F.AUTO_INC
        bcast = cmd in F.BROADCAST
        for esc in self.slaves:
            if not esc.answering:
                continue
            if auto:
                hit = adp == 0
                adp = (adp + 1) & 0xFFFF
            elif bcast:
                hit = True
                adp = (adp + 1) & 0xFFFF
            else:
                hit = adp == esc.station_address
            if cmd in (F.ARMW, F.FRMW):
                if hit:
                    r = esc.read(ado, n)
                    if r is not None:
                        data[:] = r
                        wkc += 1
                elif esc.write(ado, bytes(data)):
                    wkc += 1
                continue
            if not hit:
                continue
            if cmd in F.READ_CMDS:
                r = esc.read(ado, n)
                if r is not None:
                    if bcast:
                        data[:] = bytes(a | b for a, b in zip(data, r))
                    else:
                        data[:] = r
                    wkc += 1
            elif cmd in F.WRITE_CMDS:
                if esc.write(ado, orig):
                    wkc += 1
            elif cmd in F.RW_CMDS:
                r = esc.read(ado, n)
                ok = esc.write(ado, orig)
                if r is not None:
                    data[:] = bytes(a | b for a, b in zip(data, r)) if bcast else r
                    wkc += 1
                if ok:
                    wkc += 2
        buf[d:d + n] = data
        struct.pack_into("<H", buf, h + 2, adp)
        struct.pack_into("<H", buf, d + n, wkc & 0xFFFF)

    def _logical(self, buf: bytearray, cmd: int, h: int, d: int, n: int) -> None:
        lstart = struct.unpack_from("<I", buf, h + 2)[0]
        lend = lstart + n
        wkc = buf[d + n] | buf[d + n + 1] << 8
        do_read = cmd in (F.LRD, F.LRW)
        do_write = cmd in (F.LWR, F.LRW)
        now = None
        for k, esc in enumerate(self.slaves):
            if not esc.answering or not esc.process_data_active:
                continue
            rd = wr = False
            reads = []
            for ls, ln, ps, typ in esc.fmmus():
                a, b = max(lstart, ls), min(lend, ls + ln)
                if a >= b:
                    continue
                p = ps + (a - ls)
                if typ & 2 and do_write:
                    esc.mem[p:p + (b - a)] = buf[d + a - lstart:d + b - lstart]
                    wr = True
                if typ & 1 and do_read:
                    reads.append((a, b, p))
            for a, b, p in reads:
                buf[d + a - lstart:d + b - lstart] = esc.mem[p:p + (b - a)]
                rd = True
            if wr:
                esc.outputs_written = True
                if now is None:
                    now = time.monotonic()
                self.last_output_t[k] = now
            wkc += (1 if rd else 0) + ((2 if cmd == F.LRW else 1) if wr else 0)
        struct.pack_into("<H", buf, d + n, wkc & 0xFFFF)

    # ---- one control period
    def cycle(self) -> None:
        """Drives read their outputs, the motion steps one period, drives publish their inputs."""
        nj = self.motion.n
        q_cmd = self.q_hold.copy()
        tau_ff = np.zeros(nj)
        enabled = np.zeros(nj, bool)
        for esc, j in zip(self.slaves, self.joint_index):
            op = esc.al_state == OP
            if op and esc.outputs_written:
                esc.consume_outputs()
            esc.outputs_written = False
            c = esc.drive.command(op)
            q_cmd[j] = c.q_cmd
            tau_ff[j] = c.tau_ff
            enabled[j] = c.enabled
        # the drives hold their motor torque to 0x6072 (written at bring-up): the twin clips there
        lim = tuple(esc.drive.max_torque_link for esc in self.slaves)
        if lim != self._torque_limit:
            tau_max = np.full(nj, np.inf)
            tau_max[self.joint_index] = lim
            self.motion.set_torque_limit(tau_max)
            self._torque_limit = lim
        st = self.motion.step(q_cmd, tau_ff)
        self._apply_state(st)
        self.cycles += 1
        if self.record_truth:
            self._truth.append(st, q_cmd, tau_ff, enabled)

    def _apply_state(self, st) -> None:
        qm, taum, im = st.measured()
        for esc, j in zip(self.slaves, self.joint_index):
            esc.drive.feedback(float(qm[j]), float(st.qd[j]), float(im[j]), float(taum[j]))
            esc.publish_inputs()

    def check_watchdog(self, now: float | None = None) -> None:
        """SyncManager watchdog: an ESC in OP without outputs for `watchdog_s` drops to SAFEOP."""
        now = time.monotonic() if now is None else now
        for k, esc in enumerate(self.slaves):
            wd = esc.watchdog_s
            if esc.al_state == OP and wd is not None:
                if self._op_since[k] is None:
                    self._op_since[k] = now
                last = max(self.last_output_t[k], self._op_since[k])
                if now - last > wd:
                    esc.al_error(SAFEOP, ALSC_SM_WATCHDOG)
                    self.watchdog_trips.append({"slave": k, "t": now, "last_output_t": last,
                                                "watchdog_s": wd})
                    self._op_since[k] = None
            else:
                self._op_since[k] = None

    # ---- fault injection
    def _slave(self, slave) -> Esc:
        if isinstance(slave, bool) or not isinstance(slave, int) or not 0 <= slave < len(self.slaves):
            raise ValueError(f"slave={slave!r}: expected a 0-based bus position 0..{len(self.slaves) - 1}")
        return self.slaves[slave]

    def inject(self, kind: str, **kw) -> dict:
        """Inject a fault; see :data:`FAULT_KINDS`. Returns a short description."""
        def take(*names):
            extra = set(kw) - set(names)
            if extra:
                raise ValueError(f"fault {kind!r}: unknown argument(s) {sorted(extra)}; expected {list(names)}")
        if kind == "drive_fault":
            take("slave", "code")
            esc = self._slave(kw.get("slave"))
            esc.drive.inject_fault(int(kw.get("code", ERR_INJECTED_DEFAULT)))
            esc.publish_inputs()
            return {"slave": esc.position, "error_code": esc.drive.od.value(0x603F)}
        if kind == "emergency":          # reported, not reacted to: the axis keeps its state
            take("slave", "code", "warning")
            esc = self._slave(kw.get("slave"))
            esc.drive.report_emergency(int(kw.get("code", ERR_INJECTED_DEFAULT)), bool(kw.get("warning", False)))
            esc.publish_inputs()
            return {"slave": esc.position, "error_register": esc.od.value(0x1001)}
        if kind in ("drop_frames", "corrupt_frames"):
            take("count")
            count = kw.get("count", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ValueError(f"fault {kind!r}: count={count!r} must be a non-negative integer")
            if kind == "drop_frames":
                self.drop_count = count
            else:
                self.corrupt_count = count
            return {"count": count}
        if kind in ("stop_answering", "resume_answering"):
            take("slave")
            esc = self._slave(kw.get("slave"))
            esc.answering = kind == "resume_answering"
            return {"slave": esc.position, "answering": esc.answering}
        if kind == "sdo_abort":
            take("index", "code", "slave")
            index = kw.get("index")
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index <= 0xFFFF:
                raise ValueError(f"fault 'sdo_abort': index={index!r} must be a CoE object index")
            code = int(kw.get("code", 0x08000020))
            targets = self.slaves if kw.get("slave") is None else [self._slave(kw["slave"])]
            for esc in targets:
                esc.sdo.forced_aborts[index] = code
            return {"index": index, "code": code, "slaves": [e.position for e in targets]}
        if kind == "wrong_identity":
            take("slave", "vendor_id", "product_code")
            esc = self._slave(kw.get("slave"))
            vendor = kw.get("vendor_id")
            product = kw.get("product_code")
            if vendor is None and product is None:
                product = (self.cfg.product_code + 1) & 0xFFFFFFFF
            esc.set_identity(vendor, product)
            return {"slave": esc.position, "vendor_id": esc.od.value(0x1018, 1),
                    "product_code": esc.od.value(0x1018, 2)}
        if kind == "set_alias":             # configured station alias (SII word 4 / 0x0012)
            take("slave", "alias")
            esc = self._slave(kw.get("slave"))
            esc.set_alias(int(kw["alias"]))
            return {"slave": esc.position, "alias": int(kw["alias"])}
        if kind == "swap_serials":          # identical drives, cables swapped
            take("slaves")
            a, b = (self._slave(x) for x in kw["slaves"])
            sa, sb = a.od.value(0x1018, 4), b.od.value(0x1018, 4)
            a.set_serial(sb)
            b.set_serial(sa)
            return {"slaves": [a.position, b.position], "serials": [sb, sa]}
        out = self._inject_drive_state(kind, kw, take)
        if out is not None:
            return out
        raise ValueError(f"unknown fault {kind!r}; expected one of {FAULT_KINDS}")

    def _inject_drive_state(self, kind: str, kw: dict, take) -> dict | None:
        """The faults of a drive's state and objects (encoder, warning, STO, quick stop, mode,
        AL error, an object's value) and "clear"; None for any other kind."""
        if kind in ("freeze_encoder", "warning"):
            take("slave")
            esc = self._slave(kw.get("slave"))
            if kind == "freeze_encoder":     # 0x6064 keeps its last value; the axis moves on
                esc.drive.encoder_frozen = esc.drive.od.value(0x6064)
            else:                            # statusword bit 7 (warning) from now on
                esc.drive.warning = True
            esc.drive._publish_status()
            esc.publish_inputs()
            return {"slave": esc.position}
        if kind in ("sto", "quick_stop", "ignore_mode"):
            take("slave")
            esc = self._slave(kw.get("slave"))
            if kind == "sto":
                esc.drive.inject_sto()
            elif kind == "quick_stop":
                esc.drive.inject_quick_stop()
            else:
                esc.drive.ignore_mode = True
                esc.od.entry(0x6061, 0).value = 0
                esc.drive._publish_status()
            esc.publish_inputs()
            return {"slave": esc.position, "drive_state": DRIVE_STATES[esc.drive.state]}
        if kind == "al_error":
            take("slave", "code", "state")
            esc = self._slave(kw.get("slave"))
            code = int(kw.get("code", ALSC_SM_WATCHDOG))
            esc.al_error(int(kw.get("state", SAFEOP)), code)
            return {"slave": esc.position, "al_state": AL_NAMES.get(esc.al_state), "al_status_code": code}
        if kind == "set_object":
            take("slave", "index", "sub", "value")
            targets = self.slaves if kw.get("slave") is None else [self._slave(kw["slave"])]
            for esc in targets:
                esc.od.entry(int(kw["index"]), int(kw.get("sub", 0))).value = kw["value"]
            return {"index": kw["index"], "sub": kw.get("sub", 0), "value": kw["value"]}
        if kind == "clear":
            take()
            self.drop_count = self.corrupt_count = 0
            for esc in self.slaves:
                esc.answering = True
                esc.sdo.forced_aborts.clear()
                esc.set_identity(self.cfg.vendor_id, self.cfg.product_code)
                esc.drive.sto = False
                esc.drive.ignore_mode = False
                esc.drive.encoder_frozen = None
                esc.drive.warning = False
                esc.od.entry(0x1001, 0).value = 0
            return {}
        return None

    # ---- inspection
    def status(self) -> dict:
        return {
            "frames": self.frames, "cycles": self.cycles, "dropped": self.dropped, "corrupted": self.corrupted,
            "send_errors": self.send_errors, "answer_us": _time_stats(self.answer_ns),
            "step_us": _time_stats(self.step_ns), "held_periods": self.held_periods,
            "catch_ups": self.catch_ups,
            "slaves": [{"position": e.position, "station_address": e.station_address,
                        "al_state": AL_NAMES.get(e.al_state, hex(e.al_state)), "al_status": e.al_status,
                        "al_status_code": e.al_status_code, "answering": e.answering,
                        "drive_state": DRIVE_STATES[e.drive.state],
                        "statusword": e.drive.od.value(0x6041), "error_code": e.drive.od.value(0x603F),
                        "watchdog_s": e.watchdog_s, "sync0": e.sync0(),
                        "emergencies_sent": e.emergencies_sent,
                        "following_window_counts": e.od.value(0x6065),
                        "stop_reactions": {f"{i:#06x}": e.od.value(i) for i in STOP_OBJECTS},
                        "transitions": list(e.drive.transitions)}
                       for e in self.slaves],
            "watchdog_trips": list(self.watchdog_trips)}

    def truth(self) -> dict:
        """Every stepped period so far: t (N,); true q, qd, tau_r, tau_m, i_m, the commands q_cmd,
        tau_ff and the sensor readings q_meas, tau_r_meas, i_m_meas (N, n) SI (joint order of
        `joint_names`); enabled (N, n) bool (the axis tracked its CSP target)."""
        out = self._truth.arrays()
        out["joint_names"] = list(self.motion.joint_names)
        return out


class _TruthBuffer:
    """(N, 1 + 11 n) float64 record of stepped periods (about 0.5 kB per 1 ms for n = 6), kept in
    fixed blocks of 4096 rows: growing never copies (a copy of megabytes mid-run would pause the
    emulator for several frames)."""
    KEYS = ("q", "qd", "tau_r", "tau_m", "i_m", "q_cmd", "tau_ff", "enabled", "q_meas", "tau_r_meas", "i_m_meas")
    BLOCK = 4096

    def __init__(self, n: int):
        self.n = n
        self.width = 1 + len(self.KEYS) * n
        self.blocks = [np.zeros((self.BLOCK, self.width))]
        self.k = 0

    def append(self, st, q_cmd, tau_ff, enabled) -> None:
        b, r = divmod(self.k, self.BLOCK)
        if b == len(self.blocks):
            self.blocks.append(np.zeros((self.BLOCK, self.width)))
        qm, taum, im = st.measured()
        row = self.blocks[b][r]
        row[0] = st.t
        n = self.n
        for j, v in enumerate((st.q, st.qd, st.tau_r, st.tau_m, st.i_m, q_cmd, tau_ff, enabled, qm, taum, im)):
            row[1 + j * n:1 + (j + 1) * n] = v
        self.k += 1

    def arrays(self) -> dict:
        b, n = np.concatenate(self.blocks)[:self.k], self.n
        out = {"t": b[:, 0].copy()}
        for j, key in enumerate(self.KEYS):
            out[key] = b[:, 1 + j * n:1 + (j + 1) * n].copy()
        out["enabled"] = out["enabled"].astype(bool)
        return out


def _time_stats(ns: np.ndarray) -> dict:
    """Median / p99 / max [us] and the count over 1 ms of the filled entries of a ring of
    durations [ns]."""
    a = ns[ns > 0] * 1e-3
    if not a.size:
        return {}
    return {"n": int(a.size), "median": float(np.median(a)), "p99": float(np.percentile(a, 99)),
            "max": float(a.max()), "over_1ms": int(np.sum(a > 1000.0))}
