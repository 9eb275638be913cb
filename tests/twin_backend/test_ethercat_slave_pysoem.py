"""The real proof of the slave emulator: a real SOEM master (pysoem) over a veth pair brings the
emulated drives to OP, reads their identities, runs process data with the expected working
counter, enables the CiA 402 axes and tracks a CSP trajectory through the PyBullet twin, and
sees each injected fault the way it would see it on hardware.

Needs root (raw sockets, veth); every test creates and removes its own veth pair and is skipped,
with the reason, only if that is impossible.
"""
from __future__ import annotations

import math
import os
import struct
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

pysoem = pytest.importorskip("pysoem")

from twin.ethercat import SlaveChainProcess, load_slave_config  # noqa: E402

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "assets" / "cobot6_ethercat.yaml"
URDF = ROOT / "assets" / "cobot6.urdf"
DRIVES = ROOT / "assets" / "cobot6_drives.yaml"
RX_FMT, TX_FMT = "<Hihb", "<HiihhiHbB"      # the config's PDO layout (checked in test_layout_matches_config)
TIMEOUT_US = 20000                          # receive timeout: generous, the assertions are on content


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True)


@pytest.fixture()
def veth():
    """A fresh veth pair (master end, slave end), removed afterwards."""
    tag = f"{os.getpid() % 10000}{int(time.monotonic() * 1000) % 1000}"
    m, s = f"esm{tag}", f"ess{tag}"
    r = _ip("link", "add", m, "type", "veth", "peer", "name", s)
    if r.returncode != 0:
        pytest.skip(f"cannot create a veth pair (needs root and the veth driver): {r.stderr.strip()}")
    try:
        for name in (m, s):
            _ip("link", "set", name, "mtu", "1500")
            r = _ip("link", "set", name, "up")
            assert r.returncode == 0, r.stderr
        yield m, s
    finally:
        _ip("link", "del", m)


def emulator(iface, **kw):
    kw.setdefault("twin_settings", {"motion": "follower"})
    return SlaveChainProcess(iface, CONFIG, urdf=URDF, drives=DRIVES, **kw).start()


def bring_up(iface, setup=None):
    """pysoem bring-up as robot/ does it: config_init, startup SDOs + PDO assignment in the
    PREOP->SAFEOP hook, config_map, SAFEOP, one exchange, OP."""
    cfg = load_slave_config(CONFIG)
    master = pysoem.Master()
    master.open(iface)
    n = master.config_init()

    def hook(pos):
        s = master.slaves[pos]
        for sdo in cfg.startup:
            s.sdo_write(sdo.index, sdo.sub, struct.pack("<" + {"U8": "B", "I8": "b", "U16": "H", "I16": "h",
                                                                "U32": "I", "I32": "i"}[sdo.type], sdo.value))
        s.sdo_write(0x1C12, 0, struct.pack("<BxH", 1, cfg.rx_pdo), ca=True)
        s.sdo_write(0x1C13, 0, struct.pack("<BxH", 1, cfg.tx_pdo), ca=True)
        if setup:
            setup(s)

    for s in master.slaves:
        s.config_func = hook
    return master, n, cfg


def to_op(master):
    size = master.config_map()
    assert master.state_check(pysoem.SAFEOP_STATE, 500000) == pysoem.SAFEOP_STATE
    master.send_processdata()
    master.receive_processdata(TIMEOUT_US)
    master.state = pysoem.OP_STATE
    master.write_state()
    for _ in range(200):
        master.send_processdata()
        master.receive_processdata(TIMEOUT_US)
        if master.state_check(pysoem.OP_STATE, 5000) == pysoem.OP_STATE:
            break
    assert master.state_check(pysoem.OP_STATE, 50000) == pysoem.OP_STATE
    return size


def exchange(master, outputs=None):
    """One cycle; outputs: list of (controlword, target, torque_offset, mode) per slave."""
    if outputs is not None:
        for s, o in zip(master.slaves, outputs):
            s.output = struct.pack(RX_FMT, *o)
    master.send_processdata()
    wkc = master.receive_processdata(TIMEOUT_US)
    return wkc, [struct.unpack(TX_FMT, bytes(s.input)) for s in master.slaves]


def test_layout_matches_config():
    cfg = load_slave_config(CONFIG)
    codes = {"U8": "B", "I8": "b", "U16": "H", "I16": "h", "U32": "I", "I32": "i"}
    assert RX_FMT == "<" + "".join(codes[e.type] for e in cfg.rx_entries)
    assert TX_FMT == "<" + "".join(codes[e.type] for e in cfg.tx_entries)


def test_six_drives_to_op_identity_process_data_and_csp_with_twin(veth):
    """Bring-up of 6 drives with the PyBullet twin behind them; identities; 300+ cycles of process
    data with the expected working counter; CiA 402 enable; CSP tracking checked against the
    twin's ground truth."""
    m_if, s_if = veth
    q0 = [0.0, 0.3, -0.5, 0.0, 0.4, 0.0]
    proc = emulator(s_if, twin_settings={"motion": "twin", "seed": 3}, q0=q0)
    master = None
    try:
        master, n, cfg = bring_up(m_if)
        assert n == 6
        for k, s in enumerate(master.slaves):
            assert (s.man, s.id, s.rev) == (cfg.vendor_id, cfg.product_code, cfg.revision)
            assert struct.unpack("<I", s.sdo_read(0x1018, 4))[0] == k + 1         # serial = position + 1
            assert struct.unpack("<b", s.sdo_read(0x6060, 0))[0] == 8              # startup SDO applied
        size = to_op(master)
        assert size == 6 * (cfg.rx_bytes + cfg.tx_bytes)
        assert master.expected_wkc == 18
        assert all(len(s.output) == cfg.rx_bytes and len(s.input) == cfg.tx_bytes for s in master.slaves)

        cpr = cfg.drives[0].encoder_counts_per_rev
        wkc, ins = exchange(master)
        pos0 = [i[1] for i in ins]
        np.testing.assert_allclose([p * 2 * math.pi / cpr for p in pos0], q0, atol=2e-3)
        bad = 0
        for cw in (0x06, 0x07, 0x0F):
            for _ in range(5):
                wkc, ins = exchange(master, [(cw, p, 0, 8) for p in pos0])
                bad += wkc != 18
        assert all(i[0] & 0x6F == 0x27 for i in ins), [hex(i[0]) for i in ins]
        # CSP: 0.4 s of a smooth 0.1 rad bump on every joint
        sent, got = [], []
        for k in range(400):
            a = 0.1 * (1 - math.cos(2 * math.pi * k / 400)) / 2
            tgt = [p + round(a / (2 * math.pi) * cpr) for p in pos0]
            wkc, ins = exchange(master, [(0x0F, t, 0, 8) for t in tgt])
            bad += wkc != 18
            sent.append(tgt)
            got.append([i[1] for i in ins])
            assert not any(i[0] & 0x08 for i in ins), f"drive fault at cycle {k}: {[hex(i[6]) for i in ins]}"
        for _ in range(600):                                   # hold the start pose and settle
            wkc, ins = exchange(master, [(0x0F, t, 0, 8) for t in tgt])
            bad += wkc != 18
            got.append([i[1] for i in ins])
        assert bad == 0
        sent = np.array(sent) * 2 * math.pi / cpr
        got = np.array(got) * 2 * math.pi / cpr
        print("max tracking error", np.max(np.abs(got[:400] - sent), axis=0), "final", got[-1] - sent[-1])
        assert np.max(np.abs(got[-1] - sent[-1])) < 0.005      # back at the start, settled
        assert np.max(np.abs(got[:400] - sent)) < 0.05         # tracked (twin's 8 Hz position loop)
        assert np.all(np.max(got - got[0], axis=0) > 0.07)     # and every joint really moved
        truth = proc.truth()
        # the bus reported exactly the twin's sensor readings (to the count)
        k_last = len(truth["t"]) - 2                           # inputs of the last frame = state before its step
        np.testing.assert_allclose(got[-1], truth["q_meas"][k_last], atol=2 * 2 * math.pi / cpr)
        assert truth["enabled"][-1].all()
        np.testing.assert_allclose(truth["q_cmd"][-1], sent[-1], atol=1e-9)
        # torque sensor and current on the bus are the twin's (non-zero under gravity)
        jt = np.array([i[5] for i in ins]) * 1e-3
        np.testing.assert_allclose(jt, truth["tau_r_meas"][k_last], atol=1e-3)
        assert abs(jt[1]) > 1.0
    finally:
        if master is not None:
            master.close()
        proc.stop()


def test_identity_as_configured_and_wrong_identity(veth):
    m_if, s_if = veth
    proc = emulator(s_if)
    try:
        proc.inject("wrong_identity", slave=3)
        master = pysoem.Master()
        master.open(m_if)
        try:
            assert master.config_init() == 6
            cfg = load_slave_config(CONFIG)
            ids = [(s.man, s.id) for s in master.slaves]
            assert ids[3] == (cfg.vendor_id, cfg.product_code + 1)
            assert all(i == (cfg.vendor_id, cfg.product_code) for k, i in enumerate(ids) if k != 3)
            assert struct.unpack("<I", master.slaves[3].sdo_read(0x1018, 2))[0] == cfg.product_code + 1
        finally:
            master.close()
    finally:
        proc.stop()


def test_sdo_abort_reaches_pysoem(veth):
    m_if, s_if = veth
    proc = emulator(s_if, n_slaves=2)
    try:
        master = pysoem.Master()
        master.open(m_if)
        try:
            assert master.config_init() == 2
            with pytest.raises(pysoem.SdoError) as exc:
                master.slaves[0].sdo_read(0x7777, 0)
            assert exc.value.abort_code == 0x06020000
            proc.inject("sdo_abort", index=0x6060, code=0x08000022, slave=1)
            master.slaves[0].sdo_write(0x6060, 0, b"\x08")
            with pytest.raises(pysoem.SdoError) as exc:
                master.slaves[1].sdo_write(0x6060, 0, b"\x08")
            assert exc.value.abort_code == 0x08000022
            # a long segmented-size read still works after the abort (device name, normal upload)
            assert master.slaves[1].sdo_read(0x1008, 0) == b"twinid CiA402 servo"
        finally:
            master.close()
    finally:
        proc.stop()


def test_faults_seen_by_the_master(veth):
    """drop -> no frame (wkc -1); corrupt -> frame back unprocessed (wkc 0); stop_answering -> the
    working counter loses that slave's 3; drive_fault -> statusword fault + error code; and the
    twin is stepped once per process-data frame that reached the slaves."""
    m_if, s_if = veth
    proc = emulator(s_if, n_slaves=3)
    master = None
    try:
        master, n, cfg = bring_up(m_if)
        to_op(master)
        assert master.expected_wkc == 9
        ok = [(0, 0, 0, 8)] * 3
        assert exchange(master, ok)[0] == 9
        c0 = proc.status()["cycles"]
        proc.inject("drop_frames", count=3)
        assert [exchange(master, ok)[0] for _ in range(4)] == [-1, -1, -1, 9]
        proc.inject("corrupt_frames", count=2)
        assert [exchange(master, ok)[0] for _ in range(3)] == [0, 0, 9]
        st = proc.status()
        assert st["cycles"] - c0 == 2 and st["dropped"] == 3 and st["corrupted"] == 2
        proc.inject("stop_answering", slave=2)
        assert exchange(master, ok)[0] == 6
        proc.inject("resume_answering", slave=2)
        assert exchange(master, ok)[0] == 9
        proc.inject("drive_fault", slave=1, code=0x5400)
        wkc, ins = exchange(master, ok)
        wkc, ins = exchange(master, ok)
        assert wkc == 9 and ins[1][0] & 0x4F == 0x08 and ins[1][6] == 0x5400
        assert ins[0][0] & 0x4F == 0x40 and ins[0][6] == 0
        # the SyncManager watchdog as the master programs it (0x0400/0x0420): no process data
        # for > 100 ms in OP -> SAFEOP + AL status code 0x001B
        assert master.slaves[0].get_watchdog("processdata") == pytest.approx(500.0)
        for s in master.slaves:
            s.set_watchdog("processdata", 100.0)
        assert exchange(master, ok)[0] == 9
        time.sleep(0.3)
        master.read_state()
        assert all(s.state == pysoem.SAFEOP_STATE + 0x10 and s.al_status == 0x001B for s in master.slaves)
    finally:
        if master is not None:
            master.close()
        proc.stop()


def test_cli_serves_the_chain(veth):
    """`python -m twin.ethercat` runs the emulator until --duration ends."""
    import sys
    m_if, s_if = veth
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-m", "twin.ethercat", "--iface", s_if, "--config", str(CONFIG),
                          "--motion", "follower", "--n-slaves", "4", "--duration", "20", "--no-realtime"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = p.stdout.readline()
        while line and "drives on" not in line:
            line = p.stdout.readline()
        assert f"4 drives on {s_if}" in line             # printed once the socket is open
        master = pysoem.Master()
        master.open(m_if)
        try:
            assert master.config_init() == 4
        finally:
            master.close()
    finally:
        p.terminate()
        out, _ = p.communicate(timeout=10)
    assert "stopped after" in out


def test_start_fails_cleanly_on_a_missing_interface():
    proc = SlaveChainProcess("nosuchif0", CONFIG, twin_settings={"motion": "follower"})
    with pytest.raises(RuntimeError, match="nosuchif0"):
        proc.start()
    assert not proc.alive
    with pytest.raises(ValueError, match="unknown fault"):
        SlaveChainProcess("x", CONFIG).inject("nope")


def test_overlapping_process_image(veth):
    """config_overlap_map puts outputs and inputs on the same logical addresses: each slave's
    write FMMU takes the outputs from the frame before its read FMMU overwrites them."""
    m_if, s_if = veth
    proc = emulator(s_if, n_slaves=2, q0=[0.25, -0.5, 0, 0, 0, 0])
    master = None
    try:
        master, n, cfg = bring_up(m_if)
        size = master.config_overlap_map()
        # per slave max(rx, tx) = tx logical bytes; SOEM's IOmap holds outputs (up to the last
        # slave's output end) and inputs separately
        assert size == (cfg.tx_bytes + cfg.rx_bytes) + 2 * cfg.tx_bytes
        assert master.state_check(pysoem.SAFEOP_STATE, 500000) == pysoem.SAFEOP_STATE
        master.state = pysoem.OP_STATE
        master.write_state()
        for _ in range(200):
            master.send_overlap_processdata()
            master.receive_processdata(TIMEOUT_US)
            if master.state_check(pysoem.OP_STATE, 5000) == pysoem.OP_STATE:
                break
        assert master.expected_wkc == 6
        cpr = cfg.drives[0].encoder_counts_per_rev
        pos = [round(0.25 / (2 * math.pi) * cpr), round(-0.5 / (2 * math.pi) * cpr)]
        for cw in (0x06, 0x0F, 0x0F, 0x0F):
            for s, p in zip(master.slaves, pos):
                s.output = struct.pack(RX_FMT, cw, p + 1000, 0, 8)
            master.send_overlap_processdata()
            wkc = master.receive_processdata(TIMEOUT_US)
            ins = [struct.unpack(TX_FMT, bytes(s.input)) for s in master.slaves]
        assert wkc == 6
        assert all(i[0] & 0x6F == 0x27 for i in ins)
        assert [i[1] for i in ins] != pos and all(abs(i[1] - p) <= 1000 for i, p in zip(ins, pos))
    finally:
        if master is not None:
            master.close()
        proc.stop()


def test_distributed_clocks(veth):
    """config_dc finds 4 DC slaves and writes offsets that put their system time on the master's
    clock (ns since 2000-01-01); dc_sync programs SYNC0; every cycle's FRMW of the reference
    clock's system time comes back and advances with wall-clock time."""
    m_if, s_if = veth
    proc = emulator(s_if, n_slaves=4)
    master = None
    try:
        master, n, cfg = bring_up(m_if)
        master.config_map()
        assert master.config_dc()
        for s in master.slaves:
            s.dc_sync(True, 1_000_000)
        assert master.state_check(pysoem.SAFEOP_STATE, 500000) == pysoem.SAFEOP_STATE
        epoch2000 = 946684800
        times, walls = [], []
        for _ in range(50):
            master.send_processdata()
            assert master.receive_processdata(TIMEOUT_US) == 12       # LRW 3 x 4 (+ FRMW in the same frame)
            times.append(master.dc_time)
            walls.append(time.time())
            time.sleep(0.002)
        t = np.array(times, float)
        assert abs(t[-1] * 1e-9 - (walls[-1] - epoch2000)) < 2.0
        assert np.all(np.diff(t) > 0)
        np.testing.assert_allclose(t[-1] - t[0], (walls[-1] - walls[0]) * 1e9, rtol=0.2)
        # SYNC0 registers as dc_sync wrote them: activation 3 (cyclic + SYNC0), cycle 1 ms
        assert master.slaves[2]._fprd(0x0981, 1) == b"\x03"
        assert struct.unpack("<I", master.slaves[2]._fprd(0x09A0, 4))[0] == 1_000_000
        # slave clocks run on system time: every slave's 0x0910 is within 1 ms of the reference
        sys_t = [struct.unpack("<Q", s._fprd(0x0910, 8))[0] for s in master.slaves]
        assert max(sys_t) - min(sys_t) < 5_000_000
        st = proc.status()
        assert all(s["al_state"] == "SAFEOP" for s in st["slaves"])
    finally:
        if master is not None:
            master.close()
        proc.stop()
