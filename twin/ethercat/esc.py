"""One emulated EtherCAT Slave Controller (ESC) with its slave application (a CiA 402 drive).

Memory: 0x0000-0x0FFF registers, 0x1000-0x1FFF process RAM (SyncManager buffers). What the
master sees through the registers:

  0x0000-0x0009  type, revision, build, #FMMU, #SM, RAM size, port descriptor, features (no DC)
  0x0010/0x0012  configured station address / alias
  0x0100-0x0103  DL control, 0x0110 DL status (chain topology)
  0x0120 AL control -> AL state machine; 0x0130 AL status, 0x0134 AL status code
  0x0140         PDI control
  0x0300-0x0313  error counters (RX errors count corrupted frames)
  0x0400/0x0420  watchdog divider / process-data (SM) watchdog time; 0 disables the watchdog
  0x0500-0x050F  SII EEPROM interface (8-byte reads, never busy)
  0x0900-0x09A7  distributed clocks: a write to 0x0900 latches the port receive times (0x0900,
                 0x0904, 0x0918); 0x0910 reads the system time = local clock + offset (0x0920);
                 SYNC registers (0x0980-0x09A7) are stored (the twin steps per frame, not per SYNC0)
  0x0600-0x06FF  16 FMMUs of 16 bytes; 0x0800-0x087F 16 SyncManagers of 8 bytes
  0x1000+        mailbox buffers (SM0 in, SM1 out) and process data (SM2 outputs, SM3 inputs)

AL status codes raised: 0x0011 invalid state change, 0x0012 unknown state, 0x0013 bootstrap not
supported, 0x0016 invalid mailbox configuration, 0x001B SyncManager watchdog, 0x001D invalid
output configuration (SM2 length/address vs the PDO assignment), 0x001E invalid input
configuration (SM3).
"""
from __future__ import annotations

import math
import struct
import time

from .coe import ObjectDictionary, SdoServer, process_image_layout
from .config import TYPES
from .sii import SyncManagerLayout, crc8_config_area

INIT, PREOP, BOOT, SAFEOP, OP = 1, 2, 3, 4, 8
AL_ERROR = 0x10
STATE_NAMES = {INIT: "INIT", PREOP: "PREOP", BOOT: "BOOT", SAFEOP: "SAFEOP", OP: "OP"}

ALSC_INVALID_STATE_CHANGE = 0x0011
ALSC_UNKNOWN_STATE = 0x0012
ALSC_BOOT_NOT_SUPPORTED = 0x0013
ALSC_INVALID_MAILBOX = 0x0016
ALSC_SM_WATCHDOG = 0x001B
ALSC_INVALID_OUTPUTS = 0x001D
ALSC_INVALID_INPUTS = 0x001E

MEM_SIZE = 0x2000
REG_STADR, REG_ALIAS = 0x0010, 0x0012
REG_DLSTAT, REG_ALCTL, REG_ALSTAT, REG_ALCODE, REG_PDICTL = 0x0110, 0x0120, 0x0130, 0x0134, 0x0140
REG_RXERR = 0x0300
REG_WD_DIV, REG_WD_PD = 0x0400, 0x0420
REG_EEPCFG, REG_EEPCTL, REG_EEPADR, REG_EEPDAT = 0x0500, 0x0502, 0x0504, 0x0508
REG_FMMU, REG_SM = 0x0600, 0x0800
REG_DCTIME0, REG_DCSYSTIME, REG_DCSOF, REG_DCSYSOFFSET = 0x0900, 0x0910, 0x0918, 0x0920
DC_HOP_NS = 320              # emulated forward + return delay through one slave [ns]
EEP_R64 = 0x0040
# read-only register ranges [start, end): writes leave them unchanged
_READ_ONLY = ((0x0000, 0x0010), (REG_DLSTAT, REG_DLSTAT + 2), (REG_ALSTAT, REG_ALSTAT + 6),
              (REG_EEPCFG + 1, REG_EEPCFG + 2), (REG_DCTIME0, REG_DCTIME0 + 16), (REG_DCSOF, REG_DCSOF + 8))


class Esc:
    """Registers, SII, SyncManagers, FMMUs and AL state machine of one slave.

    `drive` is the slave application (:class:`twin.ethercat.drive.Cia402Drive`); `od` its object
    dictionary. Process-data layout (which OD entries sit where in SM2/SM3) is compiled from
    0x1C12/0x1C13 on PREOP -> SAFEOP."""

    def __init__(self, position: int, sii: bytes, od: ObjectDictionary, drive, is_last: bool,
                 layout: SyncManagerLayout = SyncManagerLayout(), downstream: int = 0):
        self.position = position
        self.downstream = downstream              # slaves behind this one (DC receive-time latch)
        self._clock_offset_ns = 1_000_000_007 * (position + 1)  # free-running local clocks differ
        self.sii = bytearray(sii)
        self.od = od
        self.drive = drive
        if drive is not None:
            drive.on_fault = self.queue_emergency      # a drive fault sends a CoE emergency
        self.emergencies_sent = 0
        self.layout = layout
        self.sdo = SdoServer(od, layout.mbx_in_len)
        self.mem = bytearray(MEM_SIZE)
        self.is_last = is_last
        self.answering = True
        self._pending: list[bytes] = []      # mailbox responses waiting for SM1
        self._last_response: bytes | None = None
        self._fmmus: list[tuple[int, int, int, int]] | None = None
        self.rx_layout: list = []
        self.tx_layout: list = []
        self._rx_struct = self._tx_struct = None
        self._rx_refs: list = []
        self._tx_refs: list = []
        self.outputs_written = False
        self.power_on()

    # ---- power-on register contents
    def power_on(self) -> None:
        m = self.mem
        m[:] = bytes(MEM_SIZE)
        # type, revision, build, #FMMU, #SM, RAM [KiB], port descriptor, features (DC, 64-bit DC)
        struct.pack_into("<BBHBBBBH", m, 0, 0x11, 0x00, 0x0001, 16, 16, MEM_SIZE // 1024 - 4, 0x0F, 0x000C)
        struct.pack_into("<H", m, REG_ALIAS, struct.unpack_from("<H", self.sii, 8)[0])
        # DL status: PDI operational, port 0 link + communication; port 1 the same unless last
        dl = 0x0001 | 0x0010 | 0x0200
        dl |= (0x0020 | 0x0800) if not self.is_last else 0x0400
        dl |= 0x1000 | 0x4000                          # ports 2, 3: loop closed, no communication
        struct.pack_into("<H", m, REG_DLSTAT, dl)
        struct.pack_into("<H", m, REG_ALSTAT, INIT)
        struct.pack_into("<H", m, REG_PDICTL, 0x0005)
        struct.pack_into("<H", m, REG_EEPCTL, EEP_R64)
        struct.pack_into("<H", m, REG_WD_DIV, 2498)                # 100 us watchdog ticks
        struct.pack_into("<H", m, REG_WD_PD, 1000)                 # 100 ms process-data watchdog
        self._pending.clear()
        self._last_response = None
        self._fmmus = None

    # ---- small accessors
    @property
    def station_address(self) -> int:
        return self.mem[REG_STADR] | self.mem[REG_STADR + 1] << 8

    @property
    def al_state(self) -> int:
        return self.mem[REG_ALSTAT] & 0x0F

    @property
    def al_status(self) -> int:
        return self.mem[REG_ALSTAT] | self.mem[REG_ALSTAT + 1] << 8

    @property
    def al_status_code(self) -> int:
        return self.mem[REG_ALCODE] | self.mem[REG_ALCODE + 1] << 8

    def sm(self, k: int) -> tuple[int, int, int, int, int]:
        """SyncManager k: (start, length, control, status, activate)."""
        return struct.unpack_from("<HHBBB", self.mem, REG_SM + 8 * k)

    def _sm_enabled(self, k: int) -> bool:
        return bool(self.mem[REG_SM + 8 * k + 6] & 0x01)

    def _set_sm_full(self, k: int, full: bool) -> None:
        a = REG_SM + 8 * k + 5
        self.mem[a] = (self.mem[a] | 0x08) if full else (self.mem[a] & ~0x08)

    def set_watchdog(self, seconds: float | None) -> None:
        """Program the process-data watchdog registers (None or 0 -> off), as a master would."""
        if not seconds:
            struct.pack_into("<H", self.mem, REG_WD_PD, 0)
            return
        div = max(2498, math.ceil(seconds * 1e9 / 40 / 65535) - 2)
        struct.pack_into("<H", self.mem, REG_WD_DIV, div)
        struct.pack_into("<H", self.mem, REG_WD_PD, min(65535, round(seconds * 1e9 / (40 * (div + 2)))))

    @property
    def watchdog_s(self) -> float | None:
        """Process-data watchdog time from 0x0400/0x0420 [s]; None if disabled."""
        div, t = struct.unpack_from("<H", self.mem, REG_WD_DIV)[0], struct.unpack_from("<H", self.mem, REG_WD_PD)[0]
        return t * 40e-9 * (div + 2) if t else None

    def set_serial(self, serial: int) -> None:
        """Change the serial number in SII and 0x1018:4 (fault injection: swapped drives)."""
        struct.pack_into("<I", self.sii, 0x0E * 2, serial)
        self.od.entry(0x1018, 4).value = serial

    def set_alias(self, alias: int) -> None:
        """Configured station alias: SII word 4 (with the configuration area's CRC) and register
        0x0012, as after a power cycle with that EEPROM content."""
        struct.pack_into("<H", self.sii, 8, alias & 0xFFFF)
        self.sii[14] = crc8_config_area(bytes(self.sii))
        struct.pack_into("<H", self.mem, REG_ALIAS, alias & 0xFFFF)

    def set_identity(self, vendor_id: int | None = None, product_code: int | None = None) -> None:
        """Change the identity in SII and 0x1018 (fault injection: wrong identity)."""
        if vendor_id is not None:
            struct.pack_into("<I", self.sii, 0x08 * 2, vendor_id)
            self.od.entry(0x1018, 1).value = vendor_id
        if product_code is not None:
            struct.pack_into("<I", self.sii, 0x0A * 2, product_code)
            self.od.entry(0x1018, 2).value = product_code

    # ---- datagram access (called by the chain)
    def read(self, ado: int, n: int) -> bytes | None:
        """Physical read of n bytes at `ado`; None if the ESC refuses (no working counter)."""
        end = ado + n
        if end > MEM_SIZE:
            return None
        L = self.layout
        mo, mo_end = L.mbx_out_start, L.mbx_out_start + L.mbx_out_len
        mi, mi_end = L.mbx_in_start, L.mbx_in_start + L.mbx_in_len
        if ado < mo_end and end > mo:                    # master may not read its own write mailbox
            return None
        if ado < REG_DCSYSTIME + 8 and end > REG_DCSYSTIME:    # system time, live
            struct.pack_into("<Q", self.mem, REG_DCSYSTIME, self.system_time_ns())
        if ado < mi_end and end > mi:                    # read mailbox
            if not (self._sm_enabled(1) and self.mem[REG_SM + 8 + 5] & 0x08):
                return None
            data = bytes(self.mem[ado:end])
            if end >= mi_end:                            # last byte read: buffer released
                self._set_sm_full(1, False)
                self._next_mailbox()
            return data
        return bytes(self.mem[ado:end])

    def write(self, ado: int, data) -> bool:
        """Physical write at `ado`; False if the ESC refuses (no working counter)."""
        n = len(data)
        end = ado + n
        if end > MEM_SIZE:
            return False
        L = self.layout
        mo, mo_end = L.mbx_out_start, L.mbx_out_start + L.mbx_out_len
        mi, mi_end = L.mbx_in_start, L.mbx_in_start + L.mbx_in_len
        if ado < mo_end and end > mo:                    # write mailbox
            if self.al_state in (INIT, BOOT) or not self._sm_enabled(0) or self.mem[REG_SM + 5] & 0x08:
                return False
            self.mem[ado:end] = data
            if end >= mo_end:
                self._mailbox_written()
            return True
        if ado < mi_end and end > mi:
            return False
        if ado >= 0x1000:                                # process RAM (SM2 outputs)
            self.mem[ado:end] = data
            return True
        m = self.mem
        saved = [(a, bytes(m[a:b])) for a, b in _READ_ONLY if ado < b and end > a]
        old_sm = bytes(m[REG_SM:REG_SM + 0x80]) if ado < REG_SM + 0x80 and end > REG_SM else None
        m[ado:end] = data
        for a, old in saved:
            m[a:a + len(old)] = old
        if old_sm is not None:
            self._sm_written(old_sm)
        if ado < REG_FMMU + 0x100 and end > REG_FMMU:
            self._fmmus = None
        if ado <= REG_EEPCTL + 1 and end > REG_EEPCTL:
            self._eeprom_command()
        if ado <= REG_ALCTL and end > REG_ALCTL:
            self.al_control(m[REG_ALCTL] | m[REG_ALCTL + 1] << 8)
        if ado <= REG_DCTIME0 < end:
            self._latch_receive_times()
        return True

    def sync0(self) -> dict:
        """SYNC0 as programmed by the master: activation (0x0981), cycle time (0x09A0) [ns],
        start time (0x0990) [ns] and shift = start time modulo cycle [ns] (SOEM starts SYNC0 on
        a whole number of cycles plus the shift)."""
        act = self.mem[0x0981]
        start = struct.unpack_from("<Q", self.mem, 0x0990)[0]
        cyc = struct.unpack_from("<I", self.mem, 0x09A0)[0]
        return {"active": bool(act & 0x01), "activation": act, "cycle_ns": cyc, "start_ns": start,
                "shift_ns": start % cyc if cyc else None}

    # ---- distributed clocks
    def local_time_ns(self) -> int:
        return (time.monotonic_ns() + self._clock_offset_ns) & 0xFFFFFFFFFFFFFFFF

    def system_time_ns(self) -> int:
        offset = struct.unpack_from("<q", self.mem, REG_DCSYSOFFSET)[0]
        return (self.local_time_ns() + offset) & 0xFFFFFFFFFFFFFFFF

    def _latch_receive_times(self) -> None:
        """Receive times of the latch frame: port 0 on the way out, port 1 when it comes back
        through the slaves behind this one (none for the last slave)."""
        t = self.local_time_ns()
        back = t + DC_HOP_NS * (self.downstream + 1) if self.downstream else 0
        struct.pack_into("<IIII", self.mem, REG_DCTIME0, t & 0xFFFFFFFF, back & 0xFFFFFFFF, 0, 0)
        struct.pack_into("<Q", self.mem, REG_DCSOF, t)

    # ---- SyncManager side effects
    def _sm_written(self, old: bytes) -> None:
        m = self.mem
        for k in range(16):
            a = REG_SM + 8 * k
            # status (byte 5) and PDI control (byte 7) are read-only for the master
            m[a + 5] = old[8 * k + 5]
            m[a + 7] = old[8 * k + 7]
            if not m[a + 6] & 0x01 and old[8 * k + 6] & 0x01:    # SM disabled: buffer state reset
                m[a + 5] &= ~0x08
                if k == 1:
                    self._pending.clear()
        # SM1 repeat request: master toggles activate bit 1, slave repeats and acknowledges
        a1 = REG_SM + 8
        if (m[a1 + 6] ^ old[8 + 6]) & 0x02:
            if self._last_response is not None:
                self._place_response(self._last_response)
            m[a1 + 7] = (m[a1 + 7] & ~0x02) | (m[a1 + 6] & 0x02)

    def _mailbox_written(self) -> None:
        L = self.layout
        req = bytes(self.mem[L.mbx_out_start:L.mbx_out_start + L.mbx_out_len])
        resp = self.sdo.handle(req, self.al_state)       # the application reads SM0 at once
        if resp is not None:
            self._pending.append(resp)
            if not self.mem[REG_SM + 8 + 5] & 0x08:
                self._next_mailbox()

    def queue_emergency(self, error_code: int, error_register: int = 0x01) -> None:
        """Queue a CoE emergency for the master's next mailbox read (mailbox SMs set up)."""
        if self.al_state in (PREOP, SAFEOP, OP):
            self._pending.append(self.sdo.emergency(error_code, error_register))
            self.emergencies_sent += 1
            if not self.mem[REG_SM + 8 + 5] & 0x08:
                self._next_mailbox()

    def _next_mailbox(self) -> None:
        if self._pending and self._sm_enabled(1):
            self._place_response(self._pending.pop(0))

    def _place_response(self, resp: bytes) -> None:
        L = self.layout
        buf = resp[:L.mbx_in_len] + bytes(max(0, L.mbx_in_len - len(resp)))
        self.mem[L.mbx_in_start:L.mbx_in_start + L.mbx_in_len] = buf
        self._last_response = resp
        self._set_sm_full(1, True)

    # ---- SII EEPROM interface
    def _eeprom_command(self) -> None:
        m = self.mem
        ctl = m[REG_EEPCTL] | m[REG_EEPCTL + 1] << 8
        cmd = ctl & 0x0700
        status = EEP_R64
        if cmd == 0x0100:                                # read 8 bytes (4 words)
            addr = struct.unpack_from("<I", m, REG_EEPADR)[0] * 2
            chunk = bytes(self.sii[addr:addr + 8])
            m[REG_EEPDAT:REG_EEPDAT + 8] = chunk + b"\xff" * (8 - len(chunk))
        elif cmd in (0x0200, 0x0300):                    # write / reload: not supported -> NACK-free no-op
            status |= 0x0000
        struct.pack_into("<H", m, REG_EEPCTL, status)

    # ---- AL state machine
    def _set_al(self, state: int, code: int = 0) -> None:
        err = AL_ERROR if code else 0
        struct.pack_into("<HHH", self.mem, REG_ALSTAT, state | err, 0, code)

    def al_error(self, state: int, code: int) -> None:
        """Drop to `state` (if lower) and indicate AL status `code` with the error flag."""
        old = self.al_state
        new = min(old, state)
        if old == OP and new != OP:
            self.drive.on_leave_op()
        self._set_al(new, code)

    def al_control(self, value: int) -> None:
        req, ack = value & 0x0F, value & AL_ERROR
        status = self.al_status
        cur = status & 0x0F
        if status & AL_ERROR:
            if not ack:
                return                                   # error indication must be acknowledged
            self._set_al(cur)
        if req == cur:
            return
        if req not in STATE_NAMES:
            self._set_al(cur, ALSC_UNKNOWN_STATE)
            return
        if req == BOOT:
            self._set_al(cur, ALSC_BOOT_NOT_SUPPORTED if cur == INIT else ALSC_INVALID_STATE_CHANGE)
            return
        if req < cur or (req == INIT):                   # any downward transition is allowed
            if cur == OP:
                self.drive.on_leave_op()
            if req == INIT:
                self._pending.clear()
                self._last_response = None
                self.sdo._seg = None
                for k in range(2):                        # mailbox buffers released
                    self._set_sm_full(k, False)
            self._set_al(req)
            return
        if (cur, req) == (INIT, PREOP):
            code = self._check_mailbox_sms()
        elif (cur, req) == (PREOP, SAFEOP):
            code = self._check_process_data_sms()
        elif (cur, req) == (SAFEOP, OP):
            code = 0
        else:
            code = ALSC_INVALID_STATE_CHANGE
        self._set_al(req if not code else cur, code)

    def _check_mailbox_sms(self) -> int:
        L = self.layout
        s0, s1 = self.sm(0), self.sm(1)
        if (s0[0], s0[1]) != (L.mbx_out_start, L.mbx_out_len) or not s0[4] & 1 or (s0[2] & 0x0F) != 0x06:
            return ALSC_INVALID_MAILBOX
        if (s1[0], s1[1]) != (L.mbx_in_start, L.mbx_in_len) or not s1[4] & 1 or (s1[2] & 0x0F) != 0x02:
            return ALSC_INVALID_MAILBOX
        return 0

    def _check_process_data_sms(self) -> int:
        """Compile the PDO layout from the OD and check SM2/SM3 against it."""
        L = self.layout
        rx = process_image_layout(self.od, 0x1C12)
        tx = process_image_layout(self.od, 0x1C13)
        rx_bytes = sum(b for _, b in rx) // 8
        tx_bytes = sum(b for _, b in tx) // 8
        s2, s3 = self.sm(2), self.sm(3)
        if rx_bytes and (s2[0] != L.outputs_start or s2[1] != rx_bytes or not s2[4] & 1
                         or (s2[2] & 0x0C) != 0x04):
            return ALSC_INVALID_OUTPUTS
        if tx_bytes and (s3[0] != L.inputs_start or s3[1] != tx_bytes or not s3[4] & 1
                         or (s3[2] & 0x0C) != 0x00):
            return ALSC_INVALID_INPUTS
        self.rx_layout, self.tx_layout = rx, tx
        self._rx_struct = struct.Struct("<" + "".join(TYPES[e.type][0] if e else f"{b // 8}x" for e, b in rx))
        self._tx_struct = struct.Struct("<" + "".join(TYPES[e.type][0] if e else f"{b // 8}x" for e, b in tx))
        self._rx_refs = [e for e, _ in rx if e is not None]
        self._tx_refs = [e for e, _ in tx if e is not None]
        self.publish_inputs()
        return 0

    # ---- process data
    def fmmus(self) -> list[tuple[int, int, int, int]]:
        """Active FMMUs: (logical start, length, physical start, type bits 1=read 2=write)."""
        if self._fmmus is None:
            out = []
            for k in range(16):
                ls, ln, _sb, _eb, ps, _psb, typ, act = struct.unpack_from("<IHBBHBBB", self.mem, REG_FMMU + 16 * k)
                if act & 1 and ln and typ & 3:
                    out.append((ls, ln, ps, typ & 3))
            self._fmmus = out
        return self._fmmus

    @property
    def process_data_active(self) -> bool:
        return self.al_state in (SAFEOP, OP)

    def consume_outputs(self) -> None:
        """SM2 buffer -> the RxPDO objects (only meaningful in OP)."""
        if self._rx_struct is not None and self._rx_refs:
            vals = self._rx_struct.unpack_from(self.mem, self.layout.outputs_start)
            for e, v in zip(self._rx_refs, vals):
                e.value = v

    def publish_inputs(self) -> None:
        """The TxPDO objects -> SM3 buffer."""
        if self._tx_struct is not None and self._tx_refs:
            self._tx_struct.pack_into(self.mem, self.layout.inputs_start, *[e.value for e in self._tx_refs])

    def count_rx_error(self) -> None:
        self.mem[REG_RXERR] = min(255, self.mem[REG_RXERR] + 1)


__all__ = ["Esc", "INIT", "PREOP", "BOOT", "SAFEOP", "OP", "STATE_NAMES"]
