"""EtherCAT frame and datagram codec (ETG.1000.4): Ethernet II header, EtherType 0x88A4,
a 2-byte EtherCAT header, then datagrams of

    cmd (1) | idx (1) | address (4: ADP+ADO or 32-bit logical) | len (2: 11 bits + C + M flags)
    | irq (2) | data (len) | working counter (2)

All little-endian. The emulator answers frames in place (:func:`iter_datagrams` yields offsets
into a ``bytearray``); :func:`decode_frame` / :func:`encode_frame` are the value-level codec
used by tests and tools.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field

ETHERTYPE_ECAT = 0x88A4
ETH_HEADER = 14
ECAT_HEADER = 2
DGRAM_HEADER = 10
WKC_SIZE = 2
MIN_ETH_FRAME = 60  # without FCS

# command codes
NOP, APRD, APWR, APRW, FPRD, FPWR, FPRW, BRD, BWR, BRW, LRD, LWR, LRW, ARMW, FRMW = range(15)
COMMAND_NAMES = {NOP: "NOP", APRD: "APRD", APWR: "APWR", APRW: "APRW", FPRD: "FPRD", FPWR: "FPWR",
                 FPRW: "FPRW", BRD: "BRD", BWR: "BWR", BRW: "BRW", LRD: "LRD", LWR: "LWR",
                 LRW: "LRW", ARMW: "ARMW", FRMW: "FRMW"}
READ_CMDS = frozenset({APRD, FPRD, BRD, LRD})
WRITE_CMDS = frozenset({APWR, FPWR, BWR, LWR})
RW_CMDS = frozenset({APRW, FPRW, BRW, LRW})
AUTO_INC = frozenset({APRD, APWR, APRW, ARMW})
CONFIGURED = frozenset({FPRD, FPWR, FPRW, FRMW})
BROADCAST = frozenset({BRD, BWR, BRW})
LOGICAL = frozenset({LRD, LWR, LRW})

_DGRAM = struct.Struct("<BBHHHH")  # cmd, idx, adp, ado, len|flags, irq
_ETH = struct.Struct("!6s6sH")


class FrameError(ValueError):
    """A received frame is not a well-formed EtherCAT frame; the message says where."""


@dataclass
class Datagram:
    """One EtherCAT datagram. `adp`/`ado` are the two 16-bit address halves; for logical
    commands the 32-bit logical address is ``adp | ado << 16`` (see :attr:`logical`)."""
    cmd: int
    idx: int = 0
    adp: int = 0
    ado: int = 0
    data: bytes = b""
    wkc: int = 0
    irq: int = 0
    circulating: bool = False

    @property
    def logical(self) -> int:
        return self.adp | (self.ado << 16)

    @staticmethod
    def logical_address(cmd: int, address: int, data: bytes, idx: int = 0) -> "Datagram":
        return Datagram(cmd, idx, address & 0xFFFF, (address >> 16) & 0xFFFF, bytes(data))


@dataclass
class Frame:
    datagrams: list[Datagram] = field(default_factory=list)
    dst: bytes = b"\xff" * 6
    src: bytes = b"\x01\x01\x01\x01\x01\x01"


def encode_frame(frame: Frame, pad: bool = True) -> bytes:
    """Frame -> wire bytes (without FCS); padded to 60 bytes if `pad`."""
    body = bytearray()
    n = len(frame.datagrams)
    for k, d in enumerate(frame.datagrams):
        if len(d.data) > 0x7FF:
            raise FrameError(f"datagram {k}: data length {len(d.data)} exceeds 2047 bytes")
        flags = len(d.data) | (0x4000 if d.circulating else 0) | (0x8000 if k < n - 1 else 0)
        body += _DGRAM.pack(d.cmd, d.idx, d.adp, d.ado, flags, d.irq)
        body += d.data
        body += struct.pack("<H", d.wkc & 0xFFFF)
    if len(body) > 0x7FF:
        raise FrameError(f"EtherCAT payload of {len(body)} bytes exceeds 2047 bytes")
    out = _ETH.pack(frame.dst, frame.src, ETHERTYPE_ECAT) + struct.pack("<H", len(body) | 0x1000) + body
    if pad and len(out) < MIN_ETH_FRAME:
        out += bytes(MIN_ETH_FRAME - len(out))
    return out


def iter_datagrams(buf) -> list[tuple[int, int, int]]:
    """Offsets of the datagrams in a wire frame: list of (header offset, data offset, data length).

    Raises FrameError (naming the datagram) if the frame is truncated or not EtherCAT."""
    if len(buf) < ETH_HEADER + ECAT_HEADER + DGRAM_HEADER + WKC_SIZE:
        raise FrameError(f"frame of {len(buf)} bytes is too short for one datagram")
    if (buf[12] << 8 | buf[13]) != ETHERTYPE_ECAT:
        raise FrameError(f"EtherType 0x{buf[12] << 8 | buf[13]:04x} is not EtherCAT (0x88a4)")
    hdr = buf[14] | buf[15] << 8
    if (hdr >> 12) != 1:
        raise FrameError(f"EtherCAT header type {hdr >> 12} is not 1 (datagrams)")
    end = ETH_HEADER + ECAT_HEADER + (hdr & 0x7FF)
    if end > len(buf):
        raise FrameError(f"EtherCAT header length {hdr & 0x7FF} exceeds the frame ({len(buf)} bytes)")
    out = []
    pos = ETH_HEADER + ECAT_HEADER
    k = 0
    while True:
        if pos + DGRAM_HEADER + WKC_SIZE > end:
            raise FrameError(f"datagram {k} header at byte {pos} runs past the EtherCAT payload")
        lf = buf[pos + 6] | buf[pos + 7] << 8
        length = lf & 0x7FF
        if pos + DGRAM_HEADER + length + WKC_SIZE > end:
            raise FrameError(f"datagram {k} (length {length}) runs past the EtherCAT payload")
        out.append((pos, pos + DGRAM_HEADER, length))
        pos += DGRAM_HEADER + length + WKC_SIZE
        k += 1
        if not lf & 0x8000:
            return out


def decode_frame(buf) -> Frame:
    """Wire bytes -> Frame (padding after the last datagram is ignored)."""
    dst, src, _ = _ETH.unpack_from(buf, 0)
    frame = Frame(dst=dst, src=src)
    for hpos, dpos, length in iter_datagrams(buf):
        cmd, idx, adp, ado, lf, irq = _DGRAM.unpack_from(buf, hpos)
        wkc = buf[dpos + length] | buf[dpos + length + 1] << 8
        frame.datagrams.append(Datagram(cmd, idx, adp, ado, bytes(buf[dpos:dpos + length]), wkc, irq,
                                        bool(lf & 0x4000)))
    return frame
