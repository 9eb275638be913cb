"""Unit tests of the EtherCAT slave emulator (twin/ethercat), in-process, no network, no root.

Frames are built by hand after ETG.1000.4 (byte layouts written out here, independent of the
codec under test) and pushed through SlaveChain.process; the answers are checked against what the
standard (and SOEM's usage) prescribes.
"""
from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest

from twin.ethercat import frames as F
from twin.ethercat.chain import SlaveChain
from twin.ethercat.coe import (ABORT_DEVICE_STATE, ABORT_NO_OBJECT, ABORT_NO_SUBINDEX, ABORT_NOT_MAPPABLE,
                               ABORT_READ_ONLY, ABORT_SUB0_NOT_ZERO, ABORT_VALUE_RANGE)
from twin.ethercat.config import SlaveConfigError, load_slave_config, parse_slave_config
from twin.ethercat.drive import FAULT, OPERATION_ENABLED, READY_TO_SWITCH_ON, SWITCH_ON_DISABLED, SWITCHED_ON
from twin.ethercat.motion import FollowerMotion
from twin.ethercat.sii import CAT_GENERAL, CAT_RXPDO, CAT_STRINGS, CAT_SYNCM, CAT_TXPDO, crc8_config_area, read_categories

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "assets" / "cobot6_ethercat.yaml"
JOINTS = [f"joint{k}" for k in range(1, 7)]


@pytest.fixture()
def cfg():
    return load_slave_config(CONFIG)


@pytest.fixture()
def chain(cfg):
    return SlaveChain(cfg, FollowerMotion(JOINTS), n_slaves=3, watchdog_s=None)


# ---------------------------------------------------------------------------------------------
# a minimal hand-written master

def raw_frame(dgrams):
    """dgrams: list of (cmd, adp, ado, data) -> wire bytes, laid out by hand."""
    body = b""
    for k, (cmd, adp, ado, data) in enumerate(dgrams):
        more = 0x8000 if k < len(dgrams) - 1 else 0
        body += bytes([cmd, k]) + adp.to_bytes(2, "little") + ado.to_bytes(2, "little")
        body += (len(data) | more).to_bytes(2, "little") + b"\x00\x00" + data + b"\x00\x00"
    return b"\xff" * 6 + b"\x01" * 6 + b"\x88\xa4" + (len(body) | 0x1000).to_bytes(2, "little") + body


def xfer(chain, dgrams):
    """Send datagrams, return [(data, wkc, adp)] of the answer; steps the chain like the server."""
    out = chain.process(raw_frame(dgrams))
    chain.after_frame()
    assert out is not None
    res, pos = [], 16
    for cmd, adp, ado, data in dgrams:
        n = len(data)
        res.append((bytes(out[pos + 10:pos + 10 + n]), int.from_bytes(out[pos + 10 + n:pos + 12 + n], "little"),
                    int.from_bytes(out[pos + 2:pos + 4], "little")))
        pos += 12 + n
    return res


def one(chain, cmd, adp, ado, data):
    return xfer(chain, [(cmd, adp, ado, data)])[0]


def fprd(chain, station, ado, n):
    return one(chain, F.FPRD, station, ado, bytes(n))


def fpwr(chain, station, ado, data):
    return one(chain, F.FPWR, station, ado, data)[1]


def assign_addresses(chain):
    for k in range(len(chain.slaves)):
        assert one(chain, F.APWR, (-k) & 0xFFFF, 0x0010, struct.pack("<H", 0x1001 + k))[1] == 1


def setup_mailbox(chain, station):
    sm = struct.pack("<HHBBBB", 0x1000, 128, 0x26, 0, 1, 0) + struct.pack("<HHBBBB", 0x1080, 128, 0x22, 0, 1, 0)
    assert fpwr(chain, station, 0x0800, sm) == 1


def al_request(chain, station, state):
    fpwr(chain, station, 0x0120, struct.pack("<H", state))
    st, code = struct.unpack("<HxxH", fprd(chain, station, 0x0130, 6)[0])
    return st, code


def to_preop(chain, station):
    setup_mailbox(chain, station)
    return al_request(chain, station, 2)


_cnt = [0]


def mailbox(chain, station, coe_body, service=2):
    """Write one CoE request into SM0, poll SM1, read the response -> (service, body bytes)."""
    _cnt[0] = _cnt[0] % 7 + 1
    payload = struct.pack("<H", service << 12) + coe_body
    mbx = struct.pack("<HHBB", len(payload), 0, 0, 0x03 | (_cnt[0] << 4)) + payload
    assert fpwr(chain, station, 0x1000, mbx + bytes(128 - len(mbx))) == 1
    status = fprd(chain, station, 0x080D, 1)[0][0]
    assert status & 0x08, "response mailbox not full"
    data, wkc, _ = fprd(chain, station, 0x1080, 128)
    assert wkc == 1
    assert not fprd(chain, station, 0x080D, 1)[0][0] & 0x08, "reading the last byte must release SM1"
    length, _, _, typ = struct.unpack_from("<HHBB", data)
    assert typ & 0x0F == 0x03
    return struct.unpack_from("<H", data, 6)[0] >> 12, data[8:6 + length]


def sdo_upload(chain, station, index, sub, ca=False):
    svc, body = mailbox(chain, station, struct.pack("<BHBI", 0x50 if ca else 0x40, index, sub, 0))
    if body[0] == 0x80:
        return ("abort", struct.unpack_from("<I", body, 4)[0], svc)
    assert svc == 3 and struct.unpack_from("<H", body, 1)[0] == index
    if body[0] & 0x02:                               # expedited
        n = 4 - ((body[0] >> 2) & 3)
        return body[4:4 + n]
    size = struct.unpack_from("<I", body, 4)[0]
    data = body[8:]
    toggle = 0
    while len(data) < size:                          # segmented upload
        svc, seg = mailbox(chain, station, struct.pack("<BHBI", 0x60 | toggle, 0, 0, 0))
        assert svc == 3 and seg[0] & 0xE0 == 0x00 and seg[0] & 0x10 == toggle
        n = len(seg) - 1
        if seg[0] & 0x01 and n == 7:
            n -= (seg[0] >> 1) & 7
        data += seg[1:1 + n]
        toggle ^= 0x10
    return data[:size]


def sdo_download(chain, station, index, sub, data, ca=False):
    if len(data) <= 4 and not ca:
        req = struct.pack("<BHB", 0x23 | ((4 - len(data)) << 2), index, sub) + data + bytes(4 - len(data))
    else:
        req = struct.pack("<BHBI", 0x31 if ca else 0x21, index, sub, len(data)) + data
    svc, body = mailbox(chain, station, req)
    if body[0] == 0x80:
        return ("abort", struct.unpack_from("<I", body, 4)[0], svc)
    assert svc == 3 and body[0] == 0x60 and struct.unpack_from("<HB", body, 1) == (index, sub)
    return True


# ---------------------------------------------------------------------------------------------
# frame codec

def test_frame_codec_round_trip_and_hand_layout():
    fr = F.Frame([F.Datagram(F.APRD, 7, 0xFFFF, 0x0130, b"\x00\x00", 0),
                  F.Datagram.logical_address(F.LRW, 0x00010000, bytes(range(20)), idx=9),
                  F.Datagram(F.BWR, 1, 0, 0x0120, b"\x11\x00", wkc=3, irq=0x0102, circulating=True)])
    wire = F.encode_frame(fr)
    back = F.decode_frame(wire)
    assert back.datagrams == fr.datagrams and back.src == fr.src and back.dst == fr.dst
    # the same frame written out by hand from ETG.1000.4
    body = (bytes([1, 7]) + b"\xff\xff\x30\x01" + b"\x02\x80" + b"\x00\x00" + b"\x00\x00" + b"\x00\x00"
            + bytes([12, 9]) + b"\x00\x00\x01\x00" + b"\x14\x80" + b"\x00\x00" + bytes(range(20)) + b"\x00\x00"
            + bytes([8, 1]) + b"\x00\x00\x20\x01" + b"\x02\x40" + b"\x02\x01" + b"\x11\x00" + b"\x03\x00")
    assert wire[:14] == b"\xff" * 6 + b"\x01" * 6 + b"\x88\xa4"
    assert wire[14:16] == (len(body) | 0x1000).to_bytes(2, "little")
    assert wire[16:16 + len(body)] == body
    assert len(wire) == 16 + len(body)  # already above the 60-byte minimum
    assert len(F.encode_frame(F.Frame([F.Datagram(F.NOP)]))) == 60


@pytest.mark.parametrize("mutate, msg", [
    (lambda b: b[:20], "too short"),
    (lambda b: b[:12] + b"\x08\x00" + b[14:], "not EtherCAT"),
    (lambda b: b[:14] + b"\xff\x17" + b[16:], "exceeds the frame"),
    (lambda b: b[:14] + (0x1000 | 14).to_bytes(2, "little") + b[16:], "runs past"),
])
def test_frame_codec_rejects_malformed(mutate, msg):
    wire = F.encode_frame(F.Frame([F.Datagram(F.APRD, 0, 0, 0x130, b"\x00" * 4)]))
    with pytest.raises(F.FrameError, match=msg):
        F.iter_datagrams(mutate(wire))


# ---------------------------------------------------------------------------------------------
# config + SII

def test_config_errors_name_the_key(cfg, tmp_path):
    import yaml
    raw = yaml.safe_load(CONFIG.read_text())
    raw["pdo"]["tx_entries"][2]["type"] = "F32"
    with pytest.raises(SlaveConfigError, match=r"pdo.tx_entries\[2\].type"):
        parse_slave_config(raw, "x.yaml")
    raw = yaml.safe_load(CONFIG.read_text())
    raw["drives"][4]["sign"] = 2
    with pytest.raises(SlaveConfigError, match=r"x.yaml: drives\[4\].sign"):
        parse_slave_config(raw, "x.yaml")
    with pytest.raises(SlaveConfigError, match="not found"):
        load_slave_config(tmp_path / "missing.yaml")
    assert cfg.rx_bytes == 9 and cfg.tx_bytes == 22


def _crc8_by_division(data: bytes) -> int:
    """CRC-8 (x^8+x^2+x+1, init 0xFF) as the remainder of a polynomial long division: an
    initial register of 0xFF equals inverting the first byte of the message."""
    m = bytearray(data)
    m[0] ^= 0xFF
    r = int.from_bytes(bytes(m), "big") << 8
    for bit in range(r.bit_length() - 1, 7, -1):
        if r >> bit & 1:
            r ^= 0x107 << (bit - 8)
    return r


def test_sii_image_matches_config(chain, cfg):
    img = bytes(chain.slaves[1].sii)
    w = lambda a: struct.unpack_from("<H", img, 2 * a)[0]
    assert struct.unpack_from("<IIII", img, 0x10) == (cfg.vendor_id, cfg.product_code, cfg.revision, 2)
    assert img[14] == crc8_config_area(img) == _crc8_by_division(img[:14])
    assert (w(0x18), w(0x19), w(0x1A), w(0x1B), w(0x1C)) == (0x1000, 128, 0x1080, 128, 0x0004)
    cats = read_categories(img)
    assert cats[CAT_GENERAL][5] & 0x20 and cats[CAT_GENERAL][5] & 0x01      # SDO + complete access
    assert cats[CAT_STRINGS][0] >= 1 and cats[CAT_GENERAL][3] == 1
    sms = [struct.unpack_from("<HHBBBB", cats[CAT_SYNCM], 8 * k) for k in range(4)]
    assert sms[2][:3] == (0x1100, cfg.rx_bytes, 0x64) and sms[3][:3] == (0x1400, cfg.tx_bytes, 0x20)
    # TxPDO category: PDO index, n entries, SM 3; entries' bit lengths sum to the input size
    idx, n, sm = struct.unpack_from("<HBB", cats[CAT_TXPDO])
    assert (idx, n, sm) == (cfg.tx_pdo, len(cfg.tx_entries), 3)
    bits = [cats[CAT_TXPDO][8 + 8 * k + 5] for k in range(n)]
    assert sum(bits) == 8 * cfg.tx_bytes
    assert struct.unpack_from("<HBB", cats[CAT_RXPDO]) == (cfg.rx_pdo, len(cfg.rx_entries), 2)


# ---------------------------------------------------------------------------------------------
# ESC registers, addressing, working counter

def test_broadcast_counts_slaves_and_auto_increment(chain):
    data, wkc, adp = one(chain, F.BRD, 0, 0x0000, bytes(2))
    assert wkc == 3 and data[0] == 0x11 and adp == 3     # every slave increments the position
    # auto-increment: slave k answers ADP = -k; the returned ADP is incremented by all 3
    for k in range(3):
        data, wkc, adp = one(chain, F.APRD, (-k) & 0xFFFF, 0x0010, bytes(2))
        assert wkc == 1 and adp == ((-k) + 3) & 0xFFFF
    assert one(chain, F.APRD, (-3) & 0xFFFF, 0x0000, bytes(2))[1] == 0   # nobody at position 3
    assign_addresses(chain)
    for k in range(3):
        assert struct.unpack("<H", fprd(chain, 0x1001 + k, 0x0010, 2)[0])[0] == 0x1001 + k
    assert fprd(chain, 0x1009, 0x0010, 2)[1] == 0
    # DL status: port 0 communication on all; port 1 open except on the last slave
    topo = [struct.unpack("<H", fprd(chain, 0x1001 + k, 0x0110, 2)[0])[0] for k in range(3)]
    assert all(t & 0x0300 == 0x0200 for t in topo)
    assert [t & 0x0C00 == 0x0800 for t in topo] == [True, True, False]
    # BRD ORs: one slave in error -> the OR of AL status shows the error bit
    chain.slaves[1].al_error(1, 0x0011)
    assert one(chain, F.BRD, 0, 0x0130, bytes(2))[0][0] == 0x11
    # read-only registers ignore writes (but the write is acknowledged)
    assert fpwr(chain, 0x1001, 0x0000, b"\x99\x99") == 1
    assert fprd(chain, 0x1001, 0x0000, 1)[0][0] == 0x11
    # read-write datagram: +1 read +2 write, returns the old content
    data, wkc, _ = one(chain, F.FPRW, 0x1002, 0x0012, struct.pack("<H", 0x0042))
    assert wkc == 3 and struct.unpack("<H", fprd(chain, 0x1002, 0x0012, 2)[0])[0] == 0x0042


def test_eeprom_interface_reads_sii(chain, cfg):
    assign_addresses(chain)
    st = 0x1002
    assert struct.unpack("<H", fprd(chain, st, 0x0502, 2)[0])[0] & 0x0040      # 8-byte reads
    # SOEM's sequence: command READ (0x0100) + word address in one 6-byte write, wait not busy, read data
    for word, expect in [(0x0008, cfg.vendor_id), (0x000A, cfg.product_code), (0x000C, cfg.revision)]:
        assert fpwr(chain, st, 0x0502, struct.pack("<HIH", 0x0100, word, 0)[:6]) == 1
        status = struct.unpack("<H", fprd(chain, st, 0x0502, 2)[0])[0]
        assert not status & 0x8000 and not status & 0x7800
        data = fprd(chain, st, 0x0508, 8)[0]
        assert struct.unpack_from("<I", data)[0] == expect
    assert fpwr(chain, st, 0x0502, struct.pack("<HI", 0x0100, 0x0E)[:6]) == 1
    assert struct.unpack_from("<I", fprd(chain, st, 0x0508, 4)[0])[0] == 2    # serial = position + 1


# ---------------------------------------------------------------------------------------------
# AL state machine

def test_al_transitions_valid_and_invalid(chain):
    assign_addresses(chain)
    st = 0x1001
    # INIT -> SAFEOP and INIT -> OP are invalid: error flag + 0x0011, state unchanged
    assert al_request(chain, st, 4) == (0x11, 0x0011)
    # without acknowledging the error, a request is ignored
    assert al_request(chain, st, 2) == (0x11, 0x0011)
    # acknowledge (0x10) + PREOP without mailbox SyncManagers -> invalid mailbox configuration
    assert al_request(chain, st, 0x12) == (0x11, 0x0016)
    setup_mailbox(chain, st)
    assert al_request(chain, st, 0x12) == (0x02, 0)
    assert al_request(chain, st, 8) == (0x12, 0x0011)        # PREOP -> OP skips SAFEOP
    assert al_request(chain, st, 0x13) == (0x12, 0x0011)     # BOOT from PREOP
    assert al_request(chain, st, 0x17) == (0x12, 0x0012)     # unknown state 7
    # PREOP -> SAFEOP with wrong SM2 length -> 0x001D; wrong SM3 -> 0x001E
    sm2 = struct.pack("<HHBBBB", 0x1100, 8, 0x64, 0, 1, 0)
    sm3 = struct.pack("<HHBBBB", 0x1400, 22, 0x20, 0, 1, 0)
    fpwr(chain, st, 0x0810, sm2 + sm3)
    assert al_request(chain, st, 0x14) == (0x12, 0x001D)
    fpwr(chain, st, 0x0810, struct.pack("<HHBBBB", 0x1100, 9, 0x64, 0, 1, 0) + struct.pack("<HHBBBB", 0x1400, 21, 0x20, 0, 1, 0))
    assert al_request(chain, st, 0x14) == (0x12, 0x001E)
    fpwr(chain, st, 0x0810, struct.pack("<HHBBBB", 0x1100, 9, 0x64, 0, 1, 0) + sm3)
    assert al_request(chain, st, 0x14) == (0x04, 0)
    assert al_request(chain, st, 8) == (0x08, 0)
    assert al_request(chain, st, 1) == (0x01, 0)             # any downward transition is allowed


def test_sm_watchdog_drops_to_safeop(cfg):
    chain = SlaveChain(cfg, FollowerMotion(JOINTS), n_slaves=1, watchdog_s=0.05)
    bring_to_op(chain)
    chain.check_watchdog(now=1.0)
    assert chain.slaves[0].al_state == 8
    chain.check_watchdog(now=1.04)
    assert chain.slaves[0].al_state == 8
    chain.check_watchdog(now=1.06)
    st, code = struct.unpack("<HxxH", fprd(chain, 0x1001, 0x0130, 6)[0])
    assert (st, code) == (0x14, 0x001B)


# ---------------------------------------------------------------------------------------------
# CoE SDO

def test_sdo_upload_download_expedited_normal_segmented_ca(chain, cfg):
    assign_addresses(chain)
    st = 0x1003
    assert to_preop(chain, st) == (2, 0)
    assert sdo_upload(chain, st, 0x1018, 1) == struct.pack("<I", cfg.vendor_id)                # expedited
    assert sdo_upload(chain, st, 0x1018, 4) == struct.pack("<I", 3)
    assert sdo_upload(chain, st, 0x1008, 0) == b"twinid CiA402 servo"                          # normal
    # complete access: sub 0 as U8 + pad, then the entries
    assert sdo_upload(chain, st, 0x1C12, 0, ca=True) == struct.pack("<BxH", 1, cfg.rx_pdo)
    tx = sdo_upload(chain, st, cfg.tx_pdo, 0, ca=True)
    assert tx[0] == len(cfg.tx_entries)
    assert list(struct.unpack_from(f"<{tx[0]}I", tx, 2)) == [e.mapping_word for e in cfg.tx_entries]
    # expedited download + read back (I8 0x6060, the startup SDOs of the config)
    for s in cfg.startup:
        from twin.ethercat.config import TYPES
        assert sdo_download(chain, st, s.index, s.sub, struct.pack("<" + TYPES[s.type][0], s.value)) is True
        assert struct.unpack("<" + TYPES[s.type][0], sdo_upload(chain, st, s.index, s.sub))[0] == s.value
    # PDO remapping: sub0 must be 0 before entries are written; CA download of a whole mapping
    assert sdo_download(chain, st, 0x1A01, 1, struct.pack("<I", 0x60640020)) is True   # 0x1A01 is empty
    assert sdo_download(chain, st, 0x1A00, 1, struct.pack("<I", 0x60640020)) == ("abort", ABORT_SUB0_NOT_ZERO, 2)
    new_map = struct.pack("<BxIII", 3, 0x60410010, 0x60640020, 0x20010020)
    assert sdo_download(chain, st, 0x1A00, 0, new_map, ca=True) is True
    assert sdo_upload(chain, st, 0x1A00, 0, ca=True) == new_map
    bad = struct.pack("<BxI", 1, 0x607A0020)     # an output object in a TxPDO
    assert sdo_download(chain, st, 0x1A00, 0, bad, ca=True) == ("abort", ABORT_NOT_MAPPABLE, 2)
    assert sdo_upload(chain, st, 0x1A00, 0, ca=True) == new_map                  # unchanged after the abort
    # complete access from subindex 1 keeps the count and is validated the same way
    assert sdo_download(chain, st, 0x1A00, 1, struct.pack("<III", 0x60410010, 0x607A0020, 0x20010020),
                        ca=True) == ("abort", ABORT_NOT_MAPPABLE, 2)
    assert sdo_download(chain, st, 0x1A00, 1, struct.pack("<III", 0x60410010, 0x606C0020, 0x20010020),
                        ca=True) is True
    assert sdo_upload(chain, st, 0x1A00, 3) == struct.pack("<I", 0x20010020)
    assert sdo_upload(chain, st, 0x1A00, 2) == struct.pack("<I", 0x606C0020)
    assert sdo_download(chain, st, 0x1A00, 0, new_map, ca=True) is True
    # segmented download and upload (data longer than the 128-byte mailbox allows in one go)
    big = struct.pack("<B", 16) + b"\x00" + b"".join(struct.pack("<I", 0x60410010) for _ in range(16))
    assert _segmented_download(chain, st, 0x1A01, big) is True
    assert sdo_upload(chain, st, 0x1A01, 0, ca=True) == big


def test_sdo_segmented_upload_small_mailbox(cfg):
    """A 32-byte mailbox forces the 19-byte device name and a CA mapping into segments."""
    from twin.ethercat.coe import SdoServer
    chain = SlaveChain(cfg, FollowerMotion(JOINTS), n_slaves=1, watchdog_s=None)
    srv = SdoServer(chain.slaves[0].od, mailbox_size=32)

    def req(body):
        payload = struct.pack("<H", 2 << 12) + body
        return struct.pack("<HHBB", len(payload), 0, 0, 0x13) + payload

    for index, ca, expect in [(0x1008, False, b"twinid CiA402 servo"),
                              (cfg.tx_pdo, True, bytes([len(cfg.tx_entries), 0]) + b"".join(
                                  struct.pack("<I", e.mapping_word) for e in cfg.tx_entries))]:
        r = srv.handle(req(struct.pack("<BHBI", 0x50 if ca else 0x40, index, 0, 0)), 2)
        length = struct.unpack_from("<H", r)[0]
        assert len(r) <= 32 and r[8] & 0xE3 == 0x41
        size = struct.unpack_from("<I", r, 12)[0]
        data = r[16:6 + length]
        toggle = 0
        while len(data) < size:
            r = srv.handle(req(struct.pack("<BHBI", 0x60 | toggle, 0, 0, 0)), 2)
            length = struct.unpack_from("<H", r)[0]
            assert len(r) <= 32 and r[8] & 0x10 == toggle
            n = length - 3
            if r[8] & 1 and n == 7:
                n -= (r[8] >> 1) & 7
            data += r[9:9 + n]
            toggle ^= 0x10
        assert data == expect
    # a wrong toggle bit aborts with 0x05030000
    srv.handle(req(struct.pack("<BHBI", 0x40, 0x1008, 0, 0)), 2)
    r = srv.handle(req(struct.pack("<BHBI", 0x70, 0, 0, 0)), 2)
    assert r[8] == 0x80 and struct.unpack_from("<I", r, 12)[0] == 0x05030000


def _segmented_download(chain, st, index, data):
    """CA download split into a 20-byte init + 7..119-byte segments (as SOEM does when the data
    exceed the mailbox)."""
    first = 20
    svc, body = mailbox(chain, st, struct.pack("<BHBI", 0x31, index, 0, len(data)) + data[:first])
    assert svc == 3 and body[0] == 0x60
    rest, toggle = data[first:], 0
    while rest:
        chunk, rest = rest[:30], rest[30:]
        last = not rest
        cmd = toggle | (0x01 if last else 0)
        if len(chunk) < 7:
            cmd |= (7 - len(chunk)) << 1
            chunk = chunk + bytes(7 - len(chunk))
        svc, body = mailbox(chain, st, bytes([cmd]) + chunk)
        if body[0] == 0x80:
            return ("abort", struct.unpack_from("<I", body, 4)[0])
        assert svc == 3 and body[0] & 0xE0 == 0x20 and body[0] & 0x10 == toggle
        toggle ^= 0x10
    return True


def test_sdo_aborts_use_coe_service_2(chain):
    assign_addresses(chain)
    st = 0x1001
    to_preop(chain, st)
    assert sdo_upload(chain, st, 0x1234, 0) == ("abort", ABORT_NO_OBJECT, 2)
    assert sdo_upload(chain, st, 0x1018, 9) == ("abort", ABORT_NO_SUBINDEX, 2)
    assert sdo_download(chain, st, 0x6041, 0, b"\x00\x00") == ("abort", ABORT_READ_ONLY, 2)
    assert sdo_download(chain, st, 0x6060, 0, b"\x09") == ("abort", ABORT_VALUE_RANGE, 2)   # CSV unsupported
    chain.inject("sdo_abort", index=0x6060, code=0x08000021)
    assert sdo_download(chain, st, 0x6060, 0, b"\x08") == ("abort", 0x08000021, 2)
    chain.inject("clear")
    assert sdo_download(chain, st, 0x6060, 0, b"\x08") is True
    # PDO assignment is writable only in PREOP
    bring_to_op(chain, stations=[st], preop_done=True)
    assert sdo_download(chain, st, 0x1C12, 0, b"\x00") == ("abort", ABORT_DEVICE_STATE, 2)


def test_mailbox_refuses_write_when_full_and_read_when_empty(chain):
    assign_addresses(chain)
    st = 0x1001
    to_preop(chain, st)
    assert fprd(chain, st, 0x1080, 128)[1] == 0                  # nothing to read: no working counter
    req = struct.pack("<HHBB", 10, 0, 0, 0x13) + struct.pack("<H", 2 << 12) + struct.pack("<BHBI", 0x40, 0x1000, 0, 0)
    assert fpwr(chain, st, 0x1000, req + bytes(128 - len(req))) == 1
    assert fpwr(chain, st, 0x1000, req + bytes(128 - len(req))) == 1   # queued behind the first answer
    assert fprd(chain, st, 0x1080, 128)[1] == 1
    assert fprd(chain, st, 0x1080, 128)[1] == 1
    assert fprd(chain, st, 0x1080, 128)[1] == 0


# ---------------------------------------------------------------------------------------------
# process data + CiA 402

def bring_to_op(chain, stations=None, preop_done=False):
    if stations is None:
        assign_addresses(chain)
        stations = [0x1001 + k for k in range(len(chain.slaves))]
    for k, st in enumerate(stations):
        if not preop_done:
            assert to_preop(chain, st) == (2, 0)
        fpwr(chain, st, 0x0810, struct.pack("<HHBBBB", 0x1100, 9, 0x64, 0, 1, 0)
             + struct.pack("<HHBBBB", 0x1400, 22, 0x20, 0, 1, 0))
        pos = chain.slaves.index(next(e for e in chain.slaves if e.station_address == st))
        # FMMU0 outputs at logical 9*pos, FMMU1 inputs after all outputs
        n = len(chain.slaves)
        fm0 = struct.pack("<IHBBHBBBxxx", 9 * pos, 9, 0, 7, 0x1100, 0, 2, 1)
        fm1 = struct.pack("<IHBBHBBBxxx", 9 * n + 22 * pos, 22, 0, 7, 0x1400, 0, 1, 1)
        fpwr(chain, st, 0x0600, fm0 + fm1)
        assert al_request(chain, st, 4) == (4, 0)
        assert al_request(chain, st, 8) == (8, 0)


def lrw(chain, outputs):
    """outputs: list of (controlword, target, torque_offset, mode) per slave -> (inputs, wkc)."""
    n = len(chain.slaves)
    data = b"".join(struct.pack("<Hihb", *o) for o in outputs) + bytes(22 * n)
    res, wkc, _ = one(chain, F.LRW, 0, 0, data)
    ins = [struct.unpack_from("<HiihhiHbB", res, 9 * n + 22 * k) for k in range(n)]
    return ins, wkc


def test_process_data_wkc_and_cia402_enable_csp(cfg):
    chain = SlaveChain(cfg, FollowerMotion(JOINTS, tau_s=0.002), n_slaves=3, q0=[0.1, -0.2, 0.3, 0, 0, 0],
                       watchdog_s=None)
    bring_to_op(chain)
    cpr = 1048576
    ins, wkc = lrw(chain, [(0, 0, 0, 8)] * 3)
    assert wkc == 9                                   # 3 per slave: +2 outputs, +1 inputs
    pos0 = [i[1] for i in ins]
    assert pos0 == [round(q / (2 * math.pi) * cpr) for q in (0.1, -0.2, 0.3)]
    assert all(i[0] & 0x4F == 0x40 for i in ins)       # switch on disabled
    for cw, mask, val in [(0x06, 0x6F, 0x21), (0x07, 0x6F, 0x23), (0x0F, 0x6F, 0x27)]:
        lrw(chain, [(cw, p, 0, 8) for p in pos0])
        ins, wkc = lrw(chain, [(cw, p, 0, 8) for p in pos0])
        assert wkc == 9 and all(i[0] & mask == val for i in ins), [hex(i[0]) for i in ins]
    # CSP: a ramp in the target is followed (first-order follower, tau 2 ms)
    dq = 0.001
    for k in range(200):
        tgt = [p + round(dq * (k + 1) / (2 * math.pi) * cpr) for p in pos0]
        ins, wkc = lrw(chain, [(0x0F, t, 0, 8) for t in tgt])
    err = [abs(i[1] - t) for i, t in zip(ins, tgt)]
    assert max(err) < 0.01 / (2 * math.pi) * cpr and wkc == 9
    truth = chain.truth()
    assert truth["q"].shape[1] == 6 and truth["enabled"][-1, :3].all() and not truth["enabled"][-1, 3:].any()
    # a target far from the actual position -> following error fault 0x8611
    far = [t + cpr // 4 for t in tgt]
    for _ in range(3):                                # detect, fault reaction, fault
        ins, _ = lrw(chain, [(0x0F, f, 0, 8) for f in far])
    assert all(i[0] & 0x4F == 0x08 and i[6] == 0x8611 for i in ins)
    # fault reset (rising edge of bit 7) -> switch on disabled
    lrw(chain, [(0x80, t, 0, 8) for t in tgt])
    ins, _ = lrw(chain, [(0x80, t, 0, 8) for t in tgt])
    assert all(i[0] & 0x4F == 0x40 and i[6] == 0 for i in ins)


def test_fault_injection_in_process(cfg):
    chain = SlaveChain(cfg, FollowerMotion(JOINTS), n_slaves=3, watchdog_s=None)
    bring_to_op(chain)
    out = [(0, 0, 0, 8)] * 3
    assert lrw(chain, out)[1] == 9
    chain.inject("stop_answering", slave=1)
    assert lrw(chain, out)[1] == 6
    chain.inject("resume_answering", slave=1)
    chain.inject("drop_frames", count=2)
    assert chain.process(raw_frame([(F.LRW, 0, 0, bytes(93))])) is None
    assert chain.process(raw_frame([(F.LRW, 0, 0, bytes(93))])) is None
    chain.inject("corrupt_frames", count=1)
    cycles = chain.cycles
    frame = raw_frame([(F.LRW, 0, 0, bytes(93))])
    bad = chain.process(frame)
    chain.after_frame()
    assert bad is not None and bad[16 + 10 + 93:16 + 12 + 93] == b"\x00\x00" and bad[26:119] != frame[26:119]
    assert chain.cycles == cycles                                      # not processed: no twin step
    assert fprd(chain, 0x1001, 0x0300, 1)[0][0] == 1                   # RX error counter
    assert lrw(chain, out)[1] == 9
    chain.inject("drive_fault", slave=2, code=0x5400)
    ins, _ = lrw(chain, out)
    assert ins[2][0] & 0x4F in (0x08, 0x0F) and ins[2][6] == 0x5400
    chain.inject("wrong_identity", slave=0)
    assert fpwr(chain, 0x1001, 0x0502, struct.pack("<HI", 0x0100, 0x0A)[:6]) == 1
    assert struct.unpack_from("<I", fprd(chain, 0x1001, 0x0508, 4)[0])[0] == cfg.product_code + 1
    with pytest.raises(ValueError, match="0-based bus position"):
        chain.inject("drive_fault", slave=3)
    with pytest.raises(ValueError, match="unknown fault"):
        chain.inject("meteor")
    with pytest.raises(ValueError, match="unknown argument"):
        chain.inject("drop_frames", cnt=3)


def test_drive_state_machine_transitions(cfg):
    chain = SlaveChain(cfg, FollowerMotion(JOINTS), n_slaves=1, watchdog_s=None)
    d = chain.slaves[0].drive
    cw = d.od.entry(0x6040, 0)
    seq = [(0x06, READY_TO_SWITCH_ON), (0x07, SWITCHED_ON), (0x0F, OPERATION_ENABLED), (0x07, SWITCHED_ON),
           (0x06, READY_TO_SWITCH_ON), (0x0F, OPERATION_ENABLED), (0x00, SWITCH_ON_DISABLED),
           (0x0F, SWITCH_ON_DISABLED), (0x06, READY_TO_SWITCH_ON), (0x02, SWITCH_ON_DISABLED)]
    for word, expect in seq:
        cw.value = word
        d.command(True)
        assert d.state == expect, (hex(word), d.state)
    # outputs not valid (ESC left OP) while enabled -> communication fault 0x8700
    for word in (0x06, 0x0F):
        cw.value = word
        d.command(True)
    d.on_leave_op()
    d.command(False)
    assert d.state == FAULT and d.od.value(0x603F) == 0x8700


def test_bus_scaling_against_config(cfg):
    chain = SlaveChain(cfg, FollowerMotion(JOINTS), n_slaves=6, watchdog_s=None)
    d = chain.slaves[2].drive
    s = cfg.drives[2]
    d.feedback(0.5, -1.25, 2.0, 12.3456)
    assert d.od.value(0x6064) == round(0.5 / (2 * math.pi) * s.encoder_counts_per_rev)
    assert d.od.value(0x606C) == round(-1.25 / (2 * math.pi) * s.encoder_counts_per_rev)
    # 0x6076 is the MOTOR rated torque in mN*m; the per-mille torque refers to it x gear ratio
    assert d.od.value(0x6076) == round(s.rated_torque_Nm / s.gear_ratio * 1000) == 396
    rated_link = 396e-3 * s.gear_ratio
    assert d.od.value(0x6077) == round(2.0 * s.gear_ratio * s.torque_constant_Nm_A / rated_link * 1000)
    assert d.od.value(0x6078) == round(2.0 / s.rated_current_A * 1000)
    assert d.od.value(0x2001) == 12346
    # units objects: link-side encoder of 2^20 counts = 2^20/101 counts per motor revolution
    assert (d.od.value(0x608F, 1), d.od.value(0x608F, 2)) == (s.encoder_counts_per_rev, 101)
    assert (d.od.value(0x6091, 1), d.od.value(0x6091, 2)) == (101, 1)
    assert (d.od.value(0x6092, 1), d.od.value(0x6092, 2)) == (s.encoder_counts_per_rev, 1)
    assert d.od.value(0x2003) == 2


# ---------------------------------------------------------------------------------------------
# the twin behind the bus (PyBullet), in-process

URDF = ROOT / "assets" / "cobot6.urdf"
DRIVES = ROOT / "assets" / "cobot6_drives.yaml"


def test_twin_sensor_stream_uses_twin_settings():
    """Per-step sensor readings: exact truth with noise off; with noise on, seeded (same seed ->
    same stream), with the encoder / torque-sensor noise levels of the settings."""
    from twin.ethercat.motion import TwinMotion
    q0 = np.array([0.0, 0.3, -0.5, 0.0, 0.4, 0.0])
    m = TwinMotion(str(URDF), str(DRIVES), {"noise": False})
    st = m.reset(q0)
    for _ in range(5):
        st = m.step(q0, np.zeros(6))
    assert np.array_equal(st.q_meas, st.q) and np.array_equal(st.tau_r_meas, st.tau_r)
    m.close()
    settings = {"seed": 11, "torque_noise_Nm": 0.2, "encoder_resolution_bits": None,
                "encoder_noise_rad": 1e-3, "current_noise_A": 0.0, "current_quantization_A": None}
    runs = []
    for _ in range(2):
        m = TwinMotion(str(URDF), str(DRIVES), settings)
        m.reset(q0)
        runs.append([m.step(q0, np.zeros(6)) for _ in range(300)])
        m.close()
    a, b = runs
    assert all(np.array_equal(x.tau_r_meas, y.tau_r_meas) and np.array_equal(x.q_meas, y.q_meas) for x, y in zip(a, b))
    dtau = np.array([x.tau_r_meas - x.tau_r for x in a])
    dq = np.array([x.q_meas - x.q for x in a])
    assert 0.17 < dtau.std() < 0.23 and abs(dtau.mean()) < 0.03
    assert 0.85e-3 < dq.std() < 1.15e-3
    np.testing.assert_allclose([x.i_m_meas for x in a], [x.i_m for x in a], atol=1e-12)


def test_chain_with_twin_reports_twin_sensors(cfg):
    """3 drives in OP over the in-process chain with the PyBullet twin: the bus carries the twin's
    sensor readings (position to the count, joint torque to 0.001 N*m, current to 1 per mille)."""
    from twin.ethercat.motion import TwinMotion
    q0 = [0.0, 0.3, -0.5, 0.0, 0.4, 0.0]
    chain = SlaveChain(cfg, TwinMotion(str(URDF), str(DRIVES), {"seed": 2}), n_slaves=3, q0=q0, watchdog_s=None)
    bring_to_op(chain)
    ins, _ = lrw(chain, [(0, 0, 0, 8)] * 3)
    pos0 = [i[1] for i in ins]
    for cw in (0x06, 0x0F):
        ins, wkc = lrw(chain, [(cw, p, 0, 8) for p in pos0])
    for _ in range(50):
        ins, wkc = lrw(chain, [(0x0F, p, 0, 8) for p in pos0])
    assert wkc == 9 and all(i[0] & 0x6F == 0x27 for i in ins)
    tr = chain.truth()
    last = len(tr["t"]) - 2                   # the answer carries the state before its own step
    cpr = cfg.drives[0].encoder_counts_per_rev
    for j, i in enumerate(ins):
        d = cfg.drives[j]
        assert i[1] == round(tr["q_meas"][last, j] / (2 * math.pi) * cpr)
        assert abs(i[5] * d.joint_torque_scale_Nm - tr["tau_r_meas"][last, j]) <= 0.0005 + 1e-12
        assert abs(i[4] - tr["i_m_meas"][last, j] / d.rated_current_A * 1000) <= 0.5 + 1e-9
        assert abs(i[3] - tr["i_m_meas"][last, j] * d.gear_ratio * d.torque_constant_Nm_A
                   / d.rated_torque_Nm * 1000) <= 0.5 + 1e-9
    assert abs(tr["tau_r"][last, 1]) > 5.0    # joint 2 carries the arm against gravity
    assert np.all(tr["enabled"][-1, :3]) and not np.any(tr["enabled"][-1, 3:])
    chain.motion.close()


def test_mailbox_repeat_request_resends_last_answer(chain):
    """SM1 repeat: the master toggles SM1 activate bit 1 (0x080E) after losing a read; the ESC puts
    the last answer back, sets mailbox full and mirrors the toggle in PDI control (0x080F)."""
    assign_addresses(chain)
    st = 0x1002
    to_preop(chain, st)
    first = sdo_upload(chain, st, 0x1018, 2)
    assert not fprd(chain, st, 0x080D, 1)[0][0] & 0x08
    stat_act = fprd(chain, st, 0x080D, 2)[0]
    assert fpwr(chain, st, 0x080D, bytes([stat_act[0], stat_act[1] ^ 0x02])) == 1
    sm1 = fprd(chain, st, 0x0808, 8)[0]
    assert sm1[5] & 0x08 and (sm1[7] & 0x02) == ((stat_act[1] ^ 0x02) & 0x02)
    data = fprd(chain, st, 0x1080, 128)[0]
    assert data[8] & 0x02 and data[12:12 + 4] == first


def test_sync0_clock_steps_wall_time_periods(cfg, monkeypatch):
    """clock="sync0": one period per elapsed cycle of wall time, as the server drives it (every
    frame waiting in the socket is read, SlaveChain.catch_up(number of process-data frames),
    then each frame answered and stepped). Normally the period is stepped after the answer
    (nothing delays it); cycles the master skipped are stepped BEFORE the next answer with the
    last outputs held (it reports where a DC-synced axis is now); frames that waited behind a
    stall of the emulator step one period each, in order, and nothing more (physics never runs
    ahead of the wall clock, and never skips a target the master sent)."""
    import twin.ethercat.chain as chain_mod
    now = [100.0]
    monkeypatch.setattr(chain_mod.time, "monotonic", lambda: now[0])
    chain = SlaveChain(cfg, FollowerMotion(JOINTS), n_slaves=3, watchdog_s=None, clock="sync0")
    bring_to_op(chain)
    n = len(chain.slaves)

    def frame(target, cw=0x0F):
        outs = [(cw, target, 0, 8)] * n
        return raw_frame([(F.LRW, 0, 0, b"".join(struct.pack("<Hihb", *o) for o in outs) + bytes(22 * n))])

    def serve(*targets, cw=0x0F):
        """-> (periods stepped before the first answer, periods stepped after the answers)"""
        batch = [frame(t, cw) for t in targets]
        assert not chain.is_process_data(raw_frame([(F.LRD, 0, 0, bytes(4))]))
        c0 = chain.cycles
        chain.catch_up(sum(map(chain.is_process_data, batch)))
        c1 = chain.cycles
        for f in batch:
            assert chain.process(f) is not None
            chain.after_frame()
        return c1 - c0, chain.cycles - c1

    assert serve(0, cw=0) == (0, 1)
    for cw in (0x06, 0x06, 0x07, 0x07, 0x0F, 0x0F):          # enable (CiA 402), 1 ms apart
        now[0] += 1e-3
        assert serve(0, cw=cw) == (0, 1)
    for k in range(5):                       # on time, with jitter
        now[0] += 1e-3 + 2e-4 * (-1) ** k
        assert serve(0) == (0, 1)
    now[0] += 4e-3                           # the master skipped 3 cycles
    assert serve(0) == (3, 1)
    now[0] += 7e-3                           # the emulator did not run for 7 ms: 7 frames waited
    assert serve(*range(10, 17)) == (0, 7)
    q_cmd = chain.truth()["q_cmd"][-8:, 0] / (2 * math.pi) * 1048576     # [counts]
    assert np.allclose(q_cmd, [0] + list(range(10, 17))), q_cmd          # every target, in order
    now[0] += 1e-3
    assert serve(0) == (0, 1)
    t = chain.truth()["t"]
    assert len(t) == chain.cycles and np.allclose(np.diff(t), 1e-3)
    now[0] += 1.0                            # far off the grid: resynchronised, no 1000-step burst
    assert serve(0) == (0, 1)
    frame_clock = SlaveChain(cfg, FollowerMotion(JOINTS), n_slaves=3, watchdog_s=None)
    assert frame_clock.catch_up(5) == 0 and frame_clock.cycles == 0


def test_drive_holds_its_torque_to_max_torque_0x6072(cfg):
    """A drive never produces more than its max torque 0x6072 (per mille of the rated torque):
    the twin's motor torque is clipped there, so 0x6077 never reads beyond it. Joint 2 holds the
    arm against gravity with more than the limit set here; once 0x6072 is lowered below that
    torque, the motor torque stays at the limit and the joint sinks (gravity wins) -- the
    physical consequence, read from the twin's own state."""
    from twin.ethercat.motion import TwinMotion
    q0 = [0.0, 0.8, -0.5, 0.0, 0.4, 0.0]
    # (sensors exact: 0x6077 is the drive's estimate from its measured current)
    chain = SlaveChain(cfg, TwinMotion(str(URDF), str(DRIVES), {"noise": False}), n_slaves=3, q0=q0,
                       watchdog_s=None, following_window_rad=1.0)
    bring_to_op(chain)
    ins, _ = lrw(chain, [(0, 0, 0, 8)] * 3)
    pos0 = [i[1] for i in ins]
    for cw in (0x06, 0x0F):
        lrw(chain, [(cw, p, 0, 8) for p in pos0])
    for _ in range(100):
        ins, _ = lrw(chain, [(0x0F, p, 0, 8) for p in pos0])
    rated = cfg.drives[1].rated_torque_Nm                   # link side [N*m]
    k0 = len(chain.truth()["t"])
    held = chain.truth()["tau_m"][-1, 1]
    limit_pm = 100                                          # 10 % of the rated torque
    assert abs(held) > 1.5 * limit_pm * 1e-3 * rated, held   # more than the limit set below
    chain.slaves[1].od.entry(0x6072, 0).value = limit_pm
    reported = []
    for _ in range(300):
        ins, _ = lrw(chain, [(0x0F, p, 0, 8) for p in pos0])
        reported.append(ins[1][3])
    tr = chain.truth()
    assert tr["enabled"][-1, 1]
    tau_m = np.abs(tr["tau_m"][k0 + 1:, 1])
    assert np.max(tau_m) <= limit_pm * 1e-3 * rated * (1 + 1e-9), np.max(tau_m)
    # 0x6077 [per mille] within 0x6072 (each answer carries the state before its own period)
    assert np.max(np.abs(reported[1:])) <= limit_pm, reported
    sink = (tr["q"][-1, 1] - q0[1]) * np.sign(held)     # gravity wins: the joint sinks (away
    assert sink < -0.05, tr["q"][-1, 1]                  # from the torque that held it)
    chain.slaves[1].od.entry(0x6072, 0).value = 3000             # the default: the twin's own clip
    for _ in range(5):
        lrw(chain, [(0x0F, p, 0, 8) for p in pos0])
    assert np.max(np.abs(chain.truth()["tau_m"][-3:, 1])) > 1.5 * limit_pm * 1e-3 * rated
    chain.motion.close()


def test_error_register_and_emergencies(cfg):
    """0x1001 (CiA 301 error register) with each error: generic bit 0 plus the class bit of the
    code (table written out here: 0x2xxx current 1, 0x3xxx voltage 2, 0x4xxx temperature 3,
    0x86xx device profile 5, other 0x8xxx communication 4, 0xFFxx manufacturer 7); an
    "emergency" injection (the axis keeps its state) queues a CoE emergency carrying the register
    and leaves the register set, a warning leaves it at 0; a fault reset clears it."""
    from twin.ethercat.drive import error_register_bits
    table = {0x2310: 0x03, 0x3210: 0x05, 0x4310: 0x09, 0x8611: 0x21, 0x8700: 0x11, 0xFF01: 0x81,
             0x5400: 0x01, 0x7305: 0x01}
    assert {c: error_register_bits(c) for c in table} == table
    chain = SlaveChain(cfg, FollowerMotion(JOINTS), n_slaves=3, watchdog_s=None)
    bring_to_op(chain)
    drive = chain.slaves[1].drive
    state0 = drive.state
    assert chain.inject("emergency", slave=1, code=0x4210, warning=True)["error_register"] == 0
    assert chain.inject("emergency", slave=1, code=0x4310)["error_register"] == 0x09
    assert chain.slaves[1].emergencies_sent == 2 and drive.state == state0     # no reaction
    assert chain.inject("emergency", slave=1, code=0x2310)["error_register"] == 0x0B   # accumulates
    assert chain.slaves[1].od.value(0x1001) == 0x0B
    chain.inject("drive_fault", slave=2, code=0x8611)
    assert chain.slaves[2].od.value(0x1001) == 0x21
    out = [(0, 0, 0, 8)] * 3
    lrw(chain, out)
    lrw(chain, [(0x80, 0, 0, 8)] * 3)                      # fault reset: rising edge of bit 7
    lrw(chain, [(0x80, 0, 0, 8)] * 3)
    assert chain.slaves[2].od.value(0x1001) == 0 and chain.slaves[2].drive.state == SWITCH_ON_DISABLED
    chain.inject("clear")
    assert chain.slaves[1].od.value(0x1001) == 0
