"""CoE (CANopen over EtherCAT) for the emulated drives: object dictionary and SDO server.

The object dictionary (:class:`ObjectDictionary`) holds CiA 301 communication objects (0x1000,
0x1008, 0x1018, 0x1C00, PDO mapping 0x1600-0x1603 / 0x1A00-0x1A03, PDO assignment 0x1C12 /
0x1C13) and the CiA 402 objects of one axis (built by :func:`drive_dictionary`).
:class:`SdoServer` answers mailbox requests (ETG.1000.6 sec. 5.6): SDO upload and download --
expedited, normal, segmented and complete access -- and sends aborts as CoE service 2
(SOEM recognises an abort only there). Mailbox frames are the bytes of one SyncManager buffer:

    mailbox header (6) | CoE header (2) | SDO command (1) | index (2) | subindex (1) | data ...
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Callable

from .config import TYPES, Entry

# ---- abort codes (ETG.1000.6 table 41)
ABORT_TOGGLE = 0x05030000
ABORT_COMMAND = 0x05040001
ABORT_UNSUPPORTED_ACCESS = 0x06010000
ABORT_READ_ONLY = 0x06010002
ABORT_SUB0_NOT_ZERO = 0x06010003
ABORT_NO_OBJECT = 0x06020000
ABORT_NOT_MAPPABLE = 0x06040041
ABORT_PDO_LENGTH = 0x06040042
ABORT_LENGTH = 0x06070010
ABORT_TOO_LONG = 0x06070012
ABORT_TOO_SHORT = 0x06070013
ABORT_NO_SUBINDEX = 0x06090011
ABORT_VALUE_RANGE = 0x06090030
ABORT_GENERAL = 0x08000000
ABORT_CANNOT_STORE = 0x08000020
ABORT_DEVICE_STATE = 0x08000022

MBX_HEADER = 6
MBXT_ERR, MBXT_COE = 0x00, 0x03
COES_EMERGENCY, COES_SDOREQ, COES_SDORES = 1, 2, 3
MBXERR_UNSUPPORTED_PROTOCOL, MBXERR_SERVICE_NOT_SUPPORTED, MBXERR_SIZE_TOO_SHORT = 0x02, 0x04, 0x06

AL_PREOP = 2
PDO_MAPPING_CAPACITY = 16
PDO_ASSIGN_CAPACITY = 4


class SdoAbort(Exception):
    """Raised inside the object dictionary; the SDO server turns it into an abort transfer."""

    def __init__(self, code: int, what: str = ""):
        super().__init__(f"SDO abort 0x{code:08x} {what}".strip())
        self.code = code


@dataclass
class ODEntry:
    """One subindex. `type` is a key of config.TYPES or "STR"; access "ro", "rw" (any state) or
    "rw_preop" (writable in PREOP only); `pdo` is "rx"/"tx" if the entry may be mapped."""
    type: str
    value: object
    access: str = "ro"
    pdo: str | None = None
    check: Callable[[int], bool] | None = None

    @property
    def size(self) -> int:
        return len(self.value) if self.type == "STR" else TYPES[self.type][1] // 8

    def encode(self) -> bytes:
        if self.type == "STR":
            return bytes(self.value)
        return struct.pack("<" + TYPES[self.type][0], self.value)

    def decode(self, data: bytes) -> object:
        if self.type == "STR":
            return bytes(data)
        if len(data) != self.size:
            raise SdoAbort(ABORT_TOO_LONG if len(data) > self.size else ABORT_TOO_SHORT,
                           f"(expected {self.size} bytes, got {len(data)})")
        return struct.unpack("<" + TYPES[self.type][0], data)[0]


@dataclass
class ODObject:
    """An object: `entries[0]` is the value of a VAR, or the entry count of an ARRAY/RECORD."""
    index: int
    name: str
    entries: dict[int, ODEntry]
    kind: str = "VAR"            # VAR, ARRAY, RECORD
    on_sub0: Callable[[int], None] | None = None  # validates a new entry count (may raise SdoAbort)


@dataclass
class ObjectDictionary:
    objects: dict[int, ODObject] = field(default_factory=dict)
    on_write: Callable[[int, int], None] | None = None   # notified after any successful write

    def add(self, obj: ODObject) -> ODObject:
        self.objects[obj.index] = obj
        return obj

    def obj(self, index: int) -> ODObject:
        o = self.objects.get(index)
        if o is None:
            raise SdoAbort(ABORT_NO_OBJECT, f"(0x{index:04x})")
        return o

    def entry(self, index: int, sub: int) -> ODEntry:
        e = self.obj(index).entries.get(sub)
        if e is None:
            raise SdoAbort(ABORT_NO_SUBINDEX, f"(0x{index:04x}:{sub})")
        return e

    def value(self, index: int, sub: int = 0):
        return self.entry(index, sub).value

    # ---- SDO access
    def read(self, index: int, sub: int) -> bytes:
        return self.entry(index, sub).encode()

    def write(self, index: int, sub: int, data: bytes, al_state: int) -> None:
        o = self.obj(index)
        e = self.entry(index, sub)
        self._check_writable(o, e, sub, al_state)
        value = e.decode(bytes(data))
        if o.kind != "VAR" and sub == 0:
            if not 0 <= value <= max(s for s in o.entries if s > 0):
                raise SdoAbort(ABORT_VALUE_RANGE, f"(0x{index:04x}:0 = {value})")
            if o.on_sub0 is not None:
                o.on_sub0(value)
        elif e.check is not None and not e.check(value):
            raise SdoAbort(ABORT_VALUE_RANGE, f"(0x{index:04x}:{sub} = {value})")
        e.value = value
        if self.on_write:
            self.on_write(index, sub)

    def _check_writable(self, o: ODObject, e: ODEntry, sub: int, al_state: int) -> None:
        if e.access == "ro":
            raise SdoAbort(ABORT_READ_ONLY, f"(0x{o.index:04x}:{sub})")
        if e.access == "rw_preop" and al_state != AL_PREOP:
            raise SdoAbort(ABORT_DEVICE_STATE, f"(0x{o.index:04x} writable in PREOP only)")
        if o.on_sub0 is not None and sub > 0 and o.entries[0].value != 0:
            raise SdoAbort(ABORT_SUB0_NOT_ZERO, f"(0x{o.index:04x}: write 0 to subindex 0 first)")

    def read_complete(self, index: int, sub: int) -> bytes:
        """Complete access upload from `sub` (0 or 1): subindex 0 as U8 + one pad byte, then
        subindexes 1..n packed."""
        o = self.obj(index)
        if o.kind == "VAR":
            raise SdoAbort(ABORT_UNSUPPORTED_ACCESS, f"(0x{index:04x} is not an array/record)")
        n = o.entries[0].value
        out = bytearray(bytes([n, 0]) if sub == 0 else b"")
        for s in range(1, n + 1):
            out += o.entries[s].encode()
        return bytes(out)

    def write_complete(self, index: int, sub: int, data: bytes, al_state: int) -> None:
        """Complete access download from `sub` (0 or 1), layout as in :meth:`read_complete`."""
        o = self.obj(index)
        if o.kind == "VAR":
            raise SdoAbort(ABORT_UNSUPPORTED_ACCESS, f"(0x{index:04x} is not an array/record)")
        data = bytes(data)
        if sub == 0:
            if len(data) < 1:
                raise SdoAbort(ABORT_TOO_SHORT)
            n, pos = data[0], 2
        else:
            n, pos = o.entries[0].value, 0
        if n > max(o.entries) or n < 0:
            raise SdoAbort(ABORT_VALUE_RANGE, f"(0x{index:04x}:0 = {n})")
        need = pos + sum(o.entries[s].size for s in range(1, n + 1))
        if len(data) != need and not (sub == 0 and n == 0 and len(data) in (1, 2)):
            raise SdoAbort(ABORT_TOO_LONG if len(data) > need else ABORT_TOO_SHORT,
                           f"(0x{index:04x}: {len(data)} bytes for {n} entries, expected {need})")
        for s in range(1, n + 1):
            e = o.entries[s]
            if e.access == "ro" or (e.access == "rw_preop" and al_state != AL_PREOP):
                raise SdoAbort(ABORT_READ_ONLY if e.access == "ro" else ABORT_DEVICE_STATE,
                               f"(0x{index:04x}:{s})")
        old = {s: o.entries[s].value for s in o.entries}
        try:
            for s in range(1, n + 1):
                e = o.entries[s]
                v = e.decode(data[pos:pos + e.size])
                pos += e.size
                if e.check is not None and not e.check(v):
                    raise SdoAbort(ABORT_VALUE_RANGE, f"(0x{index:04x}:{s} = {v})")
                e.value = v
            if sub == 1 and o.on_sub0 is not None:
                o.on_sub0(n)                   # entries changed under an unchanged count: re-validate
            if sub == 0:
                e0 = o.entries[0]
                if e0.access == "ro":
                    if n != e0.value:
                        raise SdoAbort(ABORT_READ_ONLY, f"(0x{index:04x}:0)")
                else:
                    if e0.access == "rw_preop" and al_state != AL_PREOP:
                        raise SdoAbort(ABORT_DEVICE_STATE, f"(0x{index:04x} writable in PREOP only)")
                    if o.on_sub0 is not None:
                        o.on_sub0(n)
                    e0.value = n
        except SdoAbort:
            for s, v in old.items():
                o.entries[s].value = v
            raise
        if self.on_write:
            self.on_write(index, sub)


# ---- dictionary builder -------------------------------------------------------------------------

def _var(od, index, name, type_, value, access="ro", pdo=None, check=None):
    return od.add(ODObject(index, name, {0: ODEntry(type_, value, access, pdo, check)}))


def _record(od, index, name, types_values, access="ro", sub0_access="ro", kind="RECORD"):
    ents = {0: ODEntry("U8", len(types_values), sub0_access)}
    for s, (t, v) in enumerate(types_values, start=1):
        ents[s] = ODEntry(t, v, access)
    return od.add(ODObject(index, name, ents, kind))


def mapped_entries(od: ObjectDictionary, pdo_index: int) -> list[tuple[int, int, int]]:
    """(index, sub, bits) of the entries mapped in PDO `pdo_index` (up to its subindex 0)."""
    o = od.obj(pdo_index)
    out = []
    for s in range(1, o.entries[0].value + 1):
        w = o.entries[s].value
        out.append(((w >> 16) & 0xFFFF, (w >> 8) & 0xFF, w & 0xFF))
    return out


def assigned_pdos(od: ObjectDictionary, assign_index: int) -> list[int]:
    o = od.obj(assign_index)
    return [o.entries[s].value for s in range(1, o.entries[0].value + 1)]


# stop and fault reactions (CiA 402 option codes) and their ramps [counts/s^2], written by the
# master at bring-up: (index, name, type, default, access, pdo direction, check)
STOP_REACTION_OBJECTS = (
    (0x6007, "abort connection option code", "I16", 1, "rw", None, lambda v: 0 <= v <= 3),
    (0x605A, "quick stop option code", "I16", 2, "rw", None, lambda v: 0 <= v <= 8),
    (0x605B, "shutdown option code", "I16", 0, "rw", None, lambda v: v in (-1, 0, 1)),
    (0x605C, "disable operation option code", "I16", 1, "rw", None, lambda v: v in (0, 1)),
    (0x605E, "fault reaction option code", "I16", 2, "rw", None, lambda v: 0 <= v <= 4),
    (0x6084, "profile deceleration", "U32", 1 << 22, "rw", None, lambda v: v > 0),
    (0x6085, "quick stop deceleration", "U32", 1 << 23, "rw", None, lambda v: v > 0),
)


def drive_dictionary(*, vendor_id: int, product_code: int, revision: int, serial: int, name: str,
                     rx_pdo: int, rx_entries: tuple[Entry, ...], tx_pdo: int, tx_entries: tuple[Entry, ...],
                     rated_torque_mNm: int, rated_current_mA: int, counts_per_rev: int,
                     following_window_counts: int, gear_ratio: int = 1, encoder_counts: int | None = None,
                     position_source: int = 2) -> ObjectDictionary:
    """The object dictionary of one CiA 402 axis (CSP only), default PDO mapping from the config."""
    od = ObjectDictionary()
    _var(od, 0x1000, "device type", "U32", 0x00020192)          # CiA 402, servo drive
    _var(od, 0x1008, "device name", "STR", name.encode("ascii"))
    _var(od, 0x1009, "hardware version", "STR", b"emulated ESC")
    _var(od, 0x100A, "software version", "STR", b"twinid twin.ethercat")
    _record(od, 0x1018, "identity", [("U32", vendor_id), ("U32", product_code), ("U32", revision),
                                     ("U32", serial)])
    _record(od, 0x1C00, "SM communication type", [("U8", 1), ("U8", 2), ("U8", 3), ("U8", 4)], kind="ARRAY")

    # CiA 402 objects: (index, name, type, default, access, pdo direction, check)
    ro, rw = "ro", "rw"
    for idx, nm, t, v, acc, pdo, chk in [
        (0x1001, "error register", "U8", 0, ro, "tx", None),      # CiA 301, mappable here
        (0x603F, "error code", "U16", 0, ro, "tx", None),
        (0x6040, "controlword", "U16", 0, rw, "rx", None),
        (0x6041, "statusword", "U16", 0, ro, "tx", None),
        (0x6060, "modes of operation", "I8", 8, rw, "rx", lambda m: m in (0, 8)),
        (0x6061, "modes of operation display", "I8", 8, ro, "tx", None),
        (0x6062, "position demand value", "I32", 0, ro, "tx", None),
        (0x6064, "position actual value", "I32", 0, ro, "tx", None),
        (0x6065, "following error window", "U32", following_window_counts, rw, None, None),
        (0x606C, "velocity actual value", "I32", 0, ro, "tx", None),
        (0x6071, "target torque", "I16", 0, rw, "rx", None),
        (0x6072, "max torque", "U16", 3000, rw, "rx", None),
        (0x6075, "motor rated current", "U32", rated_current_mA, ro, None, None),
        (0x6076, "motor rated torque", "U32", rated_torque_mNm, ro, None, None),
        (0x6077, "torque actual value", "I16", 0, ro, "tx", None),
        (0x6078, "current actual value", "I16", 0, ro, "tx", None),
        (0x607A, "target position", "I32", 0, rw, "rx", None),
        (0x60B1, "velocity offset", "I32", 0, rw, "rx", None),
        (0x60B2, "torque offset", "I16", 0, rw, "rx", None),
        (0x60F4, "following error actual value", "I32", 0, ro, "tx", None),
        (0x6502, "supported drive modes", "U32", 1 << 7, ro, None, None),       # CSP
        (0x2001, "joint torque sensor (0.001 N*m)", "I32", 0, ro, "tx", None),
        (0x2002, "encoder counts per revolution", "U32", counts_per_rev, ro, None, None),
        (0x2003, "position actual source (1 motor, 2 link encoder)", "U8", position_source, ro, None, None),
        (0x6066, "following error time out", "U16", 10, rw, None, None),
    ] + list(STOP_REACTION_OBJECTS):
        _var(od, idx, nm, t, v, acc, pdo, chk)
    # units (CiA 402): encoder increments per motor revolution, gear ratio, feed constant
    enc = counts_per_rev if encoder_counts is None else encoder_counts
    motor_revs = gear_ratio if position_source == 2 else 1        # link encoder: per gear motor revs
    _record(od, 0x608F, "position encoder resolution", [("U32", enc), ("U32", motor_revs)])
    _record(od, 0x6091, "gear ratio", [("U32", gear_ratio), ("U32", 1)])
    _record(od, 0x6092, "feed constant", [("U32", counts_per_rev), ("U32", 1)])
    ip = _record(od, 0x60C2, "interpolation time period", [("U8", 1), ("I8", -3)], access=rw)
    ip.entries[2].check = lambda e: -6 <= e <= 0

    def mapping_object(index, direction, default):
        ents = {0: ODEntry("U8", len(default), "rw_preop")}
        for s in range(1, PDO_MAPPING_CAPACITY + 1):
            ents[s] = ODEntry("U32", default[s - 1].mapping_word if s <= len(default) else 0, "rw_preop")
        o = od.add(ODObject(index, f"{direction}PDO mapping", ents, "RECORD"))

        def check(n, o=o, direction=direction):
            bits = 0
            for s in range(1, n + 1):
                w = o.entries[s].value
                ix, sx, b = (w >> 16) & 0xFFFF, (w >> 8) & 0xFF, w & 0xFF
                if ix == 0 and sx == 0:       # gap (padding) entry
                    bits += b
                    continue
                tgt = od.objects.get(ix)
                ent = tgt.entries.get(sx) if tgt else None
                if ent is None or ent.pdo != direction or ent.type == "STR" or TYPES[ent.type][1] != b:
                    raise SdoAbort(ABORT_NOT_MAPPABLE, f"(0x{index:04x}:{s} = 0x{w:08x})")
                bits += b
            if bits % 8:
                raise SdoAbort(ABORT_PDO_LENGTH, f"(0x{index:04x}: {bits} bits is not whole bytes)")
        o.on_sub0 = check

    for k in range(4):
        mapping_object(0x1600 + k, "rx", rx_entries if 0x1600 + k == rx_pdo else ())
        mapping_object(0x1A00 + k, "tx", tx_entries if 0x1A00 + k == tx_pdo else ())

    def assign_object(index, lo, default):
        ents = {0: ODEntry("U8", 1, "rw_preop")}
        for s in range(1, PDO_ASSIGN_CAPACITY + 1):
            ents[s] = ODEntry("U16", default if s == 1 else 0, "rw_preop")
        o = od.add(ODObject(index, "PDO assignment", ents, "ARRAY"))

        def check(n, o=o):
            for s in range(1, n + 1):
                v = o.entries[s].value
                if not lo <= v < lo + 4:
                    raise SdoAbort(ABORT_VALUE_RANGE, f"(0x{index:04x}:{s} = 0x{v:04x} is no PDO of this SM)")
        o.on_sub0 = check

    assign_object(0x1C12, 0x1600, rx_pdo)
    assign_object(0x1C13, 0x1A00, tx_pdo)
    return od


def process_image_layout(od: ObjectDictionary, assign_index: int) -> list[tuple[ODEntry | None, int]]:
    """Current process-data layout of one SyncManager: [(entry or None for a gap, bits)]."""
    out = []
    for pdo in assigned_pdos(od, assign_index):
        for ix, sx, bits in mapped_entries(od, pdo):
            out.append((None if ix == 0 else od.entry(ix, sx), bits))
    return out


# ---- SDO server ---------------------------------------------------------------------------------

@dataclass
class _Segmented:
    index: int
    sub: int
    ca: bool
    data: bytearray
    toggle: int
    total: int = 0
    upload: bool = True


class SdoServer:
    """Answers CoE mailbox requests against an :class:`ObjectDictionary`.

    `mailbox_size` is the SM1 (slave -> master) buffer length; `forced_aborts` maps an object
    index to an abort code the server answers with for any access to that object (fault
    injection)."""

    def __init__(self, od: ObjectDictionary, mailbox_size: int = 128):
        self.od = od
        self.mailbox_size = mailbox_size
        self.forced_aborts: dict[int, int] = {}
        self._seg: _Segmented | None = None
        self._cnt = 0

    # mailbox framing
    def _mbx(self, mbx_type: int, payload: bytes) -> bytes:
        self._cnt = self._cnt % 7 + 1
        return struct.pack("<HHBB", len(payload), 0, 0, mbx_type | (self._cnt << 4)) + payload

    def _coe(self, service: int, body: bytes) -> bytes:
        return self._mbx(MBXT_COE, struct.pack("<H", service << 12) + body)

    def _abort(self, index: int, sub: int, code: int) -> bytes:
        self._seg = None
        return self._coe(COES_SDOREQ, struct.pack("<BHBI", 0x80, index, sub, code))

    def emergency(self, error_code: int, error_register: int = 0x01, data: bytes = b"") -> bytes:
        """A CoE emergency message (service 1): error code, error register, 5 data bytes."""
        return self._coe(COES_EMERGENCY, struct.pack("<HB", error_code & 0xFFFF, error_register & 0xFF)
                         + (bytes(data) + bytes(5))[:5])

    def mailbox_error(self, detail: int) -> bytes:
        return self._mbx(MBXT_ERR, struct.pack("<HH", 0x0001, detail))

    def handle(self, mbx: bytes, al_state: int) -> bytes | None:
        """One request mailbox (the SM0 buffer) -> the response mailbox, or None if no answer."""
        length, _addr, _prio, typ = struct.unpack_from("<HHBB", mbx, 0)
        if (typ & 0x0F) != MBXT_COE:
            return self.mailbox_error(MBXERR_UNSUPPORTED_PROTOCOL)
        if length < 2 + 8 or MBX_HEADER + length > len(mbx):
            return self.mailbox_error(MBXERR_SIZE_TOO_SHORT)
        service = struct.unpack_from("<H", mbx, MBX_HEADER)[0] >> 12
        if service != COES_SDOREQ:
            return self.mailbox_error(MBXERR_SERVICE_NOT_SUPPORTED)
        body = bytes(mbx[MBX_HEADER + 2: MBX_HEADER + length])
        cmd = body[0]
        ccs = cmd >> 5
        index, sub = struct.unpack_from("<HB", body, 1)
        if ccs == 4:                       # abort from the master
            self._seg = None
            return None
        if ccs in (0, 3):                  # segments carry no index
            return self._segment(ccs, cmd, body, al_state)
        self._seg = None
        if index in self.forced_aborts:
            return self._abort(index, sub, self.forced_aborts[index])
        try:
            if ccs == 1:
                return self._download(cmd, index, sub, body, al_state)
            if ccs == 2:
                return self._upload(cmd, index, sub)
        except SdoAbort as exc:
            return self._abort(index, sub, exc.code)
        return self._abort(index, sub, ABORT_COMMAND)

    def _upload(self, cmd: int, index: int, sub: int) -> bytes:
        ca = bool(cmd & 0x10)
        data = self.od.read_complete(index, sub) if ca else self.od.read(index, sub)
        hdr = struct.pack("<HB", index, sub)
        if len(data) <= 4 and not ca:
            c = 0x43 | ((4 - len(data)) << 2)
            return self._coe(COES_SDORES, bytes([c]) + hdr + data + bytes(4 - len(data)))
        room = self.mailbox_size - MBX_HEADER - 2 - 8
        first = data[:room]
        if len(data) > room:
            self._seg = _Segmented(index, sub, ca, bytearray(data[room:]), 0, len(data), True)
        c = 0x41 | (0x10 if ca else 0)
        return self._coe(COES_SDORES, bytes([c]) + hdr + struct.pack("<I", len(data)) + first)

    def _download(self, cmd: int, index: int, sub: int, body: bytes, al_state: int) -> bytes:
        ca = bool(cmd & 0x10)
        hdr = struct.pack("<HB", index, sub)
        if cmd & 0x02:                     # expedited
            n = 4 - ((cmd >> 2) & 0x03) if cmd & 0x01 else 4
            data = body[4:4 + n]
            if not cmd & 0x01:             # size not indicated: use the entry's size
                data = body[4:4 + self.od.entry(index, sub).size]
        else:
            size = struct.unpack_from("<I", body, 4)[0]
            data = body[8:8 + size]
            if len(data) < size:           # segmented download follows
                self._seg = _Segmented(index, sub, ca, bytearray(data), 0, size, False)
                return self._coe(COES_SDORES, bytes([0x60]) + hdr + bytes(4))
        if ca:
            self.od.write_complete(index, sub, data, al_state)
        else:
            self.od.write(index, sub, data, al_state)
        return self._coe(COES_SDORES, bytes([0x60]) + hdr + bytes(4))

    def _segment(self, ccs: int, cmd: int, body: bytes, al_state: int) -> bytes:
        seg = self._seg
        if seg is None or seg.upload != (ccs == 3):
            return self._abort(0, 0, ABORT_COMMAND)
        toggle = cmd & 0x10
        if toggle != seg.toggle:
            return self._abort(seg.index, seg.sub, ABORT_TOGGLE)
        seg.toggle ^= 0x10
        if ccs == 3:                       # upload segment request
            room = self.mailbox_size - MBX_HEADER - 2 - 1
            chunk, seg.data = bytes(seg.data[:room]), seg.data[room:]
            last = not seg.data
            c = toggle | (0x01 if last else 0)
            if last and len(chunk) < 7:
                c |= (7 - len(chunk)) << 1
                chunk += bytes(7 - len(chunk))
            if last:
                self._seg = None
            return self._coe(COES_SDORES, bytes([c]) + chunk)
        # download segment
        n = len(body) - 1
        if len(body) == 8:                 # minimum-size segment: the command says how many bytes count
            n = 7 - ((cmd >> 1) & 0x07)
        seg.data += body[1:1 + n]
        if cmd & 0x01:                     # last segment
            self._seg = None
            try:
                if len(seg.data) != seg.total:
                    raise SdoAbort(ABORT_LENGTH, f"(segmented download of {len(seg.data)} bytes, announced {seg.total})")
                if seg.ca:
                    self.od.write_complete(seg.index, seg.sub, bytes(seg.data), al_state)
                else:
                    self.od.write(seg.index, seg.sub, bytes(seg.data), al_state)
            except SdoAbort as exc:
                return self._abort(seg.index, seg.sub, exc.code)
        return self._coe(COES_SDORES, bytes([0x20 | toggle]) + bytes(7))
