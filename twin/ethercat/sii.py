"""SII EEPROM image of an emulated drive (ETG.1000.6 / ETG.2010), generated from the config.

Word addresses (16-bit words):
  0x00-0x07 ESC configuration area (word 4 = configured station alias, word 7 low byte = CRC-8)
  0x08/0x0A/0x0C/0x0E vendor id, product code, revision, serial number (32 bit each)
  0x18-0x1B standard receive / send mailbox offset and size, 0x1C mailbox protocols (CoE)
  0x3E EEPROM size (KiBit - 1), 0x3F version
  0x40 categories: STRINGS (10), GENERAL (30), FMMU (40), SYNCM (41), TXPDO (50), RXPDO (51), end 0xFFFF
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from .config import TYPES, Entry

CAT_STRINGS, CAT_GENERAL, CAT_FMMU, CAT_SYNCM, CAT_TXPDO, CAT_RXPDO, CAT_END = 10, 30, 40, 41, 50, 51, 0xFFFF
MBXPROT_COE = 0x0004
# CoE details: SDO, SDO info, PDO assign, PDO config, upload at startup, SDO complete access
COE_DETAILS = 0x01 | 0x04 | 0x08 | 0x20


@dataclass(frozen=True)
class SyncManagerLayout:
    """Physical layout of the four SyncManagers of the emulated ESC (byte addresses, lengths)."""
    mbx_out_start: int = 0x1000    # SM0: master -> slave mailbox
    mbx_out_len: int = 128
    mbx_in_start: int = 0x1080     # SM1: slave -> master mailbox
    mbx_in_len: int = 128
    outputs_start: int = 0x1100    # SM2: RxPDO (outputs)
    inputs_start: int = 0x1400     # SM3: TxPDO (inputs)

    # control bytes: mailbox write / read (one buffer), process data write / read (three buffers)
    SM0_CONTROL = 0x26
    SM1_CONTROL = 0x22
    SM2_CONTROL = 0x64
    SM3_CONTROL = 0x20


def crc8_config_area(data: bytes) -> int:
    """CRC-8 (polynomial x^8+x^2+x+1, initial 0xFF) over the first 14 bytes of the SII."""
    crc = 0xFF
    for b in data[:14]:
        crc ^= b
        for _ in range(8):
            crc = ((crc << 1) ^ 0x07) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def _category(cat: int, payload: bytes) -> bytes:
    if len(payload) % 2:
        payload += b"\x00"
    return struct.pack("<HH", cat, len(payload) // 2) + payload


def _pdo_category(cat: int, pdo_index: int, sm: int, entries: tuple[Entry, ...], name_idx: int) -> bytes:
    body = struct.pack("<HBBBBH", pdo_index, len(entries), sm, 0, name_idx, 0)
    for e in entries:
        body += struct.pack("<HBBBBH", e.index, e.sub, 0, TYPES[e.type][2], e.bits, 0)
    return _category(cat, body)


def build_sii(*, vendor_id: int, product_code: int, revision: int, serial: int, name: str,
              rx_pdo: int, rx_entries: tuple[Entry, ...], tx_pdo: int, tx_entries: tuple[Entry, ...],
              layout: SyncManagerLayout = SyncManagerLayout(), alias: int = 0) -> bytes:
    """The SII EEPROM content as bytes (an even number, little-endian words)."""
    head = bytearray(0x80)
    struct.pack_into("<HHHHH", head, 0, 0x0C05, 0x0000, 0x0000, 0x0000, alias)
    head[14] = crc8_config_area(head)
    struct.pack_into("<IIII", head, 0x08 * 2, vendor_id, product_code, revision, serial)
    struct.pack_into("<HHHH", head, 0x14 * 2, layout.mbx_out_start, layout.mbx_out_len,
                     layout.mbx_in_start, layout.mbx_in_len)          # bootstrap mailbox = standard
    struct.pack_into("<HHHHH", head, 0x18 * 2, layout.mbx_out_start, layout.mbx_out_len,
                     layout.mbx_in_start, layout.mbx_in_len, MBXPROT_COE)
    struct.pack_into("<HH", head, 0x3E * 2, 0x000F, 0x0001)            # 16 KiBit, version 1

    strings = [name, "Drives", "RxPDO", "TxPDO"]
    sbody = bytes([len(strings)]) + b"".join(bytes([len(s)]) + s.encode("ascii") for s in strings)
    general = bytearray(32)
    general[0] = 2          # group string
    general[1] = 0          # image
    general[2] = 1          # order string
    general[3] = 1          # name string (SOEM reads string 1 as the slave name)
    general[5] = COE_DETAILS
    general[11] = 0x00      # flags: LRW allowed (bit 1 clear)
    out_bytes = sum(e.bits for e in rx_entries) // 8
    in_bytes = sum(e.bits for e in tx_entries) // 8
    syncm = struct.pack("<HHBBBB", layout.mbx_out_start, layout.mbx_out_len, layout.SM0_CONTROL, 0, 1, 1)
    syncm += struct.pack("<HHBBBB", layout.mbx_in_start, layout.mbx_in_len, layout.SM1_CONTROL, 0, 1, 2)
    syncm += struct.pack("<HHBBBB", layout.outputs_start, out_bytes, layout.SM2_CONTROL, 0, 1, 3)
    syncm += struct.pack("<HHBBBB", layout.inputs_start, in_bytes, layout.SM3_CONTROL, 0, 1, 4)
    cats = (_category(CAT_STRINGS, sbody) + _category(CAT_GENERAL, bytes(general))
            + _category(CAT_FMMU, bytes([1, 2, 3, 0xFF])) + _category(CAT_SYNCM, syncm)
            + _pdo_category(CAT_TXPDO, tx_pdo, 3, tx_entries, 4)
            + _pdo_category(CAT_RXPDO, rx_pdo, 2, rx_entries, 3)
            + struct.pack("<H", CAT_END))
    image = bytes(head) + cats
    if len(image) > 2048:
        raise ValueError(f"SII image of {len(image)} bytes exceeds the 16 KiBit EEPROM")
    return image + b"\xff" * (2048 - len(image))


def read_categories(image: bytes) -> dict[int, bytes]:
    """Parse the category list of an SII image: {category type: payload} (first occurrence)."""
    out: dict[int, bytes] = {}
    pos = 0x40 * 2
    while pos + 4 <= len(image):
        cat, words = struct.unpack_from("<HH", image, pos)
        if cat == CAT_END:
            break
        out.setdefault(cat, image[pos + 4: pos + 4 + 2 * words])
        pos += 4 + 2 * words
    return out
