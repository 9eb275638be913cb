"""End to end over a real EtherCAT link: the master side (robot/, pysoem/SOEM) against the twin
exposed as 6 emulated CiA 402 drives (twin.ethercat.SlaveChainProcess) on a veth pair this module
creates and removes. Needs root; skipped (with the reason) only when the pair cannot be created.

Independent truth: the emulator's own record of every period (``proc.truth()``: the command it
received and the sensor values it published, SI) -- the master's decoded recording must equal it
to within the bus quantization, which checks PDO layout, scaling, signs and joint order end to end.
"""
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from stopcheck import QDD_MAX, peak_command_accel, peak_truth_accel, standstill_before_disable

# The emulated drives are a Python process on this 2-core VM: a scheduling hiccup of the host
# can delay its answers past the 0.6 ms receive timeout in bursts and end a healthy run with
# "lost frames" (real ESCs answer in microseconds). Such a test is re-run (pytest-rerunfailures,
# at most 3 times); every run must still reach its own verdict, so a real fault fails all of them.
pytestmark = [pytest.mark.root, pytest.mark.flaky(reruns=3, reruns_delay=1)]

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "assets" / "cobot6_ethercat.yaml"
URDF = ROOT / "assets" / "cobot6.urdf"
DRIVES = ROOT / "assets" / "cobot6_drives.yaml"
NAMES = [f"joint{k}" for k in range(1, 7)]
KT = np.array([101 * 0.124] * 2 + [101 * 0.096] * 4)     # eta * beta [N*m/A]


def _sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True)


@pytest.fixture(scope="module")
def veth():
    """(master end, slave end) of a fresh veth pair, removed afterwards."""
    if os.geteuid() != 0:
        pytest.skip("needs root to create a veth pair and open raw sockets")
    tag = f"{os.getpid() % 100000}"
    m, s = f"rbm{tag}", f"rbs{tag}"
    _sh(f"ip link del {m}")
    r = _sh(f"ip link add {m} type veth peer name {s} && ip link set {m} mtu 1500 up && "
            f"ip link set {s} mtu 1500 up")
    if r.returncode != 0:
        _sh(f"ip link del {m}")
        pytest.skip(f"cannot create a veth pair on this machine: {r.stderr.strip()}")
    yield m, s
    _sh(f"ip link del {m}")


@pytest.fixture
def emulator(veth):
    """Factory: start the slave chain (motion 'follower' by default, 'twin' for physics)."""
    from twin.ethercat import SlaveChainProcess
    procs = []

    def start(motion="follower", **kw):
        p = SlaveChainProcess(veth[1], CONFIG, urdf=URDF, drives=DRIVES,
                              twin_settings={"motion": motion, **kw.pop("twin_settings", {})}, **kw)
        procs.append(p)
        return p.start()
    yield start
    for p in procs:
        p.stop()


class SineTraj:
    """q = q0 + a sin(w t) on every joint (starts and ends at q0 with the full period)."""
    def __init__(self, q0, a, w, duration):
        self.q0, self.a, self.w, self.duration = np.asarray(q0, float), np.asarray(a, float), w, duration

    @property
    def n_joints(self):
        return len(self.a)

    def evaluate(self, t):
        t = np.asarray(t, float)[:, None]
        s = np.sin(self.w * t)
        return self.q0 + self.a * s, self.a * self.w * np.cos(self.w * t), -self.a * self.w**2 * s


TRAJ = SineTraj(np.zeros(6), [0.2, 0.15, -0.15, 0.25, 0.25, 0.3], 2 * np.pi / 1.5, 1.5)


class RestTraj(SineTraj):
    """q = q0 + a (1 - cos(w t)) / 2: starts and ends at rest (one full period)."""
    def evaluate(self, t):
        t = np.asarray(t, float)[:, None]
        c, s = np.cos(self.w * t), np.sin(self.w * t)
        return (self.q0 + self.a * (1 - c) / 2, self.a * self.w * s / 2,
                self.a * self.w**2 * c / 2)


REST_TRAJ = RestTraj(np.zeros(6), [0.4, 0.3, -0.3, 0.5, 0.5, 0.6], 2 * np.pi / 1.5, 1.5)


def master_config(tmp_path, stall_cycles=None, bus=None):
    """The drive configuration as shipped (its default stall limit, 100 cycles, must survive this
    shared 2-core machine: the loop runs SCHED_FIFO with gc off and memory locked), except the
    lost-frame budget: the receive timeout is 0.6 ms, and on these VMs the host takes a vCPU away
    for 2-8 ms at a time (steal time; both processes hold the CPU wake-up latency at 0 us, which
    removed the halted-vCPU wake-ups measured before), so the Python emulator misses bursts of
    frames -- 40-130 per 7000 cycles measured here, more on the CI machines -- which real ESCs
    never do: 200 per 1000 cycles here instead of 5. A test about the lost-frame budget itself
    sets 50 and drops 75 frames (more than that, less than the SyncManager watchdog's 100 ms)."""
    import yaml
    raw = yaml.safe_load(CONFIG.read_text())
    if stall_cycles is not None:
        raw.setdefault("safety", {})["stall_cycles"] = stall_cycles
    raw["bus"]["lost_frame_budget"] = 200
    raw["bus"].update(bus or {})
    k = len(list(tmp_path.glob("ethercat*.yaml")))
    path = tmp_path / ("ethercat.yaml" if k == 0 else f"ethercat_{k}.yaml")   # never rewrites one in use
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def when_running(be, after_s, action):
    """Start a thread that calls action() once the loop has executed `after_s` of its plan (so
    faults land mid-trajectory however long process start-up and bring-up take here)."""
    def wait_then_act():
        t_end = time.monotonic() + 60
        while time.monotonic() < t_end:
            st = be.status()
            if st and st["phase"] == "run" and st["rows"] - st["run_row0"] >= after_s * 1000:
                action()
                return
            if st and st["phase"] in ("stop", "done"):
                return
            time.sleep(0.005)
    th = threading.Thread(target=wait_then_act, daemon=True)
    th.start()
    return th


def backend(veth, tmp_path, **settings):
    from robot.backend import HardwareBackend
    s = {"iface": veth[0], "armed": True, "record_dir": str(tmp_path / "rec"), "dwell_s": 0.2}
    s.update(settings)
    if "config" not in s:      # (a test's own config is never overwritten by the default one)
        s["config"] = master_config(tmp_path)
    return HardwareBackend({"urdf": str(URDF)}, s)


# -- bring-up --------------------------------------------------------------------------------------
@pytest.mark.parametrize("complete_access, dc", [(False, False), (True, True)])
def test_bringup_to_op_with_six_drives(veth, emulator, complete_access, dc):
    """Single-entry and complete-access PDO mapping; without and with distributed clocks."""
    import pysoem
    import yaml
    from robot.bus import EthercatBus
    from robot.config import parse_config
    emulator()
    raw = yaml.safe_load(CONFIG.read_text())
    raw["bus"]["distributed_clocks"] = dc
    cfg = parse_config(raw, str(CONFIG))
    bus = EthercatBus(cfg, veth[0], complete_access=complete_access)
    bus.open()
    try:
        assert len(bus.master.slaves) == 6 and bus.expected_wkc == 18
        states = bus.read_states()
        assert all(st == pysoem.OP_STATE and code == 0 for st, code in states), bus.al_report()
        assert [len(s.output) for s in bus.master.slaves] == [bus.layout.rx_size] * 6
        assert [len(s.input) for s in bus.master.slaves] == [bus.layout.tx_size] * 6
        out = bus.layout.new_outputs(6)
        out["modes_of_operation"] = 8
        wkc, inp = bus.exchange(out)
        assert wkc == 18
        assert np.all(inp["modes_of_operation_display"] == 8)      # startup SDO 0x6060 = CSP took
        assert np.all((inp["statusword"] & 0x4F) == 0x40)          # switch on disabled
    finally:
        bus.close()


def test_identity_mismatch_refused(veth, emulator):
    from robot.bus import EthercatBus, IdentityError
    from robot.config import load_config
    proc = emulator()
    proc.inject("wrong_identity", slave=1)
    bus = EthercatBus(load_config(CONFIG), veth[0])
    with pytest.raises(IdentityError, match=r"slave 2 \(joint2\).*product 0x00c0b061.*expected"):
        bus.open()
    assert bus.master is None                                      # closed again
    assert all(s["al_state"] != "OP" for s in proc.status()["slaves"])


def test_swapped_identical_drives_refused(veth, emulator):
    """Serial numbers 0x1018:4 configured per position (the emulated drive k has serial k + 1):
    the right chain comes up; two identical drives with swapped cables (the emulator swaps the
    serials of positions 2 and 3) are refused naming both positions."""
    import yaml
    from robot.bus import EthercatBus, IdentityError
    from robot.config import parse_config
    raw = yaml.safe_load(CONFIG.read_text())
    for k, d in enumerate(raw["drives"]):
        d["serial_number"] = k + 1
    cfg = parse_config(raw, str(CONFIG))
    proc = emulator()
    bus = EthercatBus(cfg, veth[0])
    bus.open()
    bus.close()
    proc.inject("swap_serials", slaves=[1, 2])
    bus = EthercatBus(cfg, veth[0])
    with pytest.raises(IdentityError) as e:
        bus.open()
    msg = str(e.value)
    assert ("slave 2 (joint2): serial number 0x1018:4 reads 3, configured 2; serial 3 is "
            "configured for slave 3 (joint3) (swapped cables?)") in msg, msg
    assert "slave 3 (joint3): serial number 0x1018:4 reads 2, configured 3" in msg, msg
    assert all(s["drive_state"] != "operation enabled" for s in proc.status()["slaves"])


def test_station_alias_checked_per_position(veth, emulator):
    """Station aliases configured per position (drives[k].station_alias; the emulator's SII word
    4 / register 0x0012 set to 100 + k): the right chain comes up; two drives with swapped aliases
    (swapped cables) are refused naming both positions, before any drive is enabled."""
    import yaml
    from robot.bus import EthercatBus, IdentityError
    from robot.config import parse_config
    raw = yaml.safe_load(CONFIG.read_text())
    for k, d in enumerate(raw["drives"]):
        d["station_alias"] = 100 + k
    cfg = parse_config(raw, str(CONFIG))
    proc = emulator()
    for k in range(6):
        proc.inject("set_alias", slave=k, alias=100 + k)
    bus = EthercatBus(cfg, veth[0])
    bus.open()
    bus.close()
    proc.inject("set_alias", slave=1, alias=102)
    proc.inject("set_alias", slave=2, alias=101)
    bus = EthercatBus(cfg, veth[0])
    with pytest.raises(IdentityError) as e:
        bus.open()
    msg = str(e.value)
    assert ("slave 2 (joint2): station alias (SII word 4 / 0x0012) reads 102, configured 101; "
            "alias 102 is configured for slave 3 (joint3) (swapped cables?)") in msg, msg
    assert "slave 3 (joint3): station alias (SII word 4 / 0x0012) reads 101, configured 102" in msg, msg
    assert all(s["drive_state"] != "operation enabled" for s in proc.status()["slaves"])


def test_backend_refuses_wrong_identity_before_moving(veth, emulator, tmp_path):
    from robot.backend import BusRefused
    proc = emulator()
    proc.inject("wrong_identity", slave=4)
    be = backend(veth, tmp_path)
    with pytest.raises(BusRefused, match=r"IdentityError: .*slave 5 \(joint5\)"):
        be.run(TRAJ)
    st = proc.status()
    assert st["cycles"] == 0                         # no process-data cycle ever ran
    assert all(x["drive_state"] == "switch on disabled" for x in st["slaves"])


def test_sdo_abort_refused(veth, emulator):
    from robot.bus import BusError, EthercatBus
    from robot.config import load_config
    proc = emulator()
    proc.inject("sdo_abort", index=0x6060)
    with pytest.raises(BusError, match=r"slave 1 \(joint1\): SDO write 0x6060:0 \(modes of operation\) "
                                        r"failed: abort code 0x08000020 \(data cannot be transferred"):
        EthercatBus(load_config(CONFIG), veth[0]).open()


# -- CSP on the twin -------------------------------------------------------------------------------
def test_csp_tracking_matches_emulator_truth(veth, emulator, tmp_path):
    proc = emulator("twin")
    be = backend(veth, tmp_path, record_rate_hz=1000.0)
    # rest to rest: the twin's motor torques stay within the arm's limits (the sine TRAJ starts
    # with a velocity step, whose transient exceeds joint 1's 110 N*m for > 20 ms on the twin --
    # the torque supervision stops such a run, as it should)
    rec = be.run(REST_TRAJ)
    truth = proc.truth()
    # rows of lost frames are left out of the returned recording (listed in meta)
    assert rec.n_samples + len(rec.meta["dropped_samples"]) == rec.meta["n_grid_samples"] == 1500
    assert rec.joint_names == NAMES
    grid = np.setdiff1d(np.arange(1500), rec.meta["dropped_samples"])
    nominal = grid * 1e-3                                            # command k at k * dt
    np.testing.assert_allclose(rec.q_cmd, REST_TRAJ.evaluate(nominal)[0], atol=1e-9)
    # rec.t: monotonic acquisition times (not row x period); late rows flagged
    assert np.all(np.diff(rec.t) > 0) and rec.late.shape == rec.t.shape
    assert abs(np.median(np.diff(rec.t)) - 1e-3) < 2e-4
    assert np.max(np.abs(rec.q - rec.q_cmd)) < 0.02                  # CSP tracking on the twin
    # the drives' own stop reactions, as the emulated drives hold them after bring-up: quick
    # stop / fault reaction on the quick-stop ramp, master lost -> quick stop, the ramps at the
    # joint's acceleration limit (counts/s^2), max torque at its torque limit (per mille)
    qdd = np.radians([600, 600, 600, 900, 900, 900])
    tau = be.full.limits.tau_max
    rated = [70.0, 70.0, 40.0, 20.0, 20.0, 20.0]
    for k, x in enumerate(proc.status()["slaves"]):
        r = x["stop_reactions"]
        assert (r["0x605a"], r["0x605b"], r["0x605c"], r["0x605e"], r["0x6007"]) == (2, 1, 1, 2, 3), r
        assert r["0x6085"] == r["0x6084"] == int(qdd[k] * 2**20 / (2 * np.pi)), r
        assert r["0x6072"] == int(np.ceil(tau[k] / rated[k] * 1000 - 1e-9)), (r, tau[k])
    st = be.last_stream
    # align the master's rows with the emulator's periods through the measured encoder counts
    # (moving, so the alignment is unique), then compare every channel at that alignment
    lsb = 2 * np.pi / 2**20
    nt = truth["q_meas"].shape[0]
    enabled = np.all((st.status & 0x6F) == 0x27, axis=1)
    last_en = int(np.flatnonzero(enabled)[-1])
    a = np.arange(be.last_summary["run_row0"], last_en - 1)           # drives enabled
    # rows whose frame came back in time (a late answer -- this shared machine can pause the
    # emulator -- leaves the previous inputs in the process image; the loop counts it as lost)
    wkc = np.load(Path(be.last_summary["record_dir"]) / "bus.npz")["wkc"]
    a = a[wkc[a] == 18]
    offs = [o for o in range(-a[0], nt - a[-1])
            if np.max(np.abs(st.q[a] - truth["q_meas"][a + o])) <= lsb / 2 + 1e-12]
    assert len(offs) == 1, offs
    b = a + offs[0]
    assert np.max(np.abs(st.qd[a] - truth["qd"][b])) <= lsb / 2 + 1e-9     # counts/s, rounded
    assert np.max(np.abs(st.tau_j[a] - truth["tau_r_meas"][b])) <= 0.0005 + 1e-9
    rated_i = np.array([5.6, 5.6, 4.1, 2.1, 2.1, 2.1])
    assert np.all(np.max(np.abs(st.i_m[a] - truth["i_m_meas"][b]), axis=0) <= rated_i / 2000 + 1e-9)
    rated_t = np.array([70, 70, 40, 20, 20, 20.0])
    assert np.all(np.max(np.abs(st.tau_m[a] - KT * truth["i_m_meas"][b]), axis=0) <= rated_t / 2000 + 1e-6)
    # CSP: the target sent in row k is the reference of row k+1 (the next sync); the emulated
    # drive applies it in the period after the one whose start state it reported in that frame
    r = np.arange(a[0] + 1, a[-1])           # commands reach the emulator even if answers are late
    assert np.max(np.abs(truth["q_cmd"][r + offs[0] + 1] - st.q_cmd[r + 1])) <= lsb / 2 + 1e-9
    s = be.last_summary
    # the loop's own lost-frame budget (master_config) decides whether a run is faulted; what this
    # test checks is every channel on the frames that answered, so it only bounds their share
    # (the Python emulator with twin physics loses 1-2 % of frames in bursts on this shared VM)
    span = last_en - 1 - s["run_row0"]
    assert s["fault"] is None and s["stop_confirmed"] and s["lost_frames"] <= 0.05 * span
    assert a.size > 0.95 * span
    status = proc.status()
    assert all(x["drive_state"] == "ready to switch on" for x in status["slaves"])
    check_ordered_stop(status, range(6))
    # distributed clocks on by default: SYNC0 every cycle with the configured 0.5 ms shift
    assert s["distributed_clocks"] is True
    assert all(x["sync0"]["active"] and x["sync0"]["cycle_ns"] == 1_000_000
               and x["sync0"]["shift_ns"] == 500_000 for x in status["slaves"]), status["slaves"][0]["sync0"]
    # SM watchdog programmed on every slave (0x0400/0x0420, read back by the emulator)
    assert all(abs(x["watchdog_s"] - 0.1) < 1e-3 for x in status["slaves"])
    # drive-side following error window 0x6065 written from safety.following_error_max_rad
    assert all(x["following_window_counts"] == round(0.05 / (2 * np.pi) * 2**20) for x in status["slaves"])
    # master cycle aligned to the DC reference clock: the frames' phase error in the DC cycle
    # settles (median over the second half of the run; a loaded 2-core machine adds jitter)
    dc_err = np.load(Path(s["record_dir"]) / "bus.npz")["dc_err_ns"]
    half = dc_err[dc_err.size // 2:]
    assert np.median(np.abs(half)) < 150_000, np.percentile(np.abs(half), [50, 90, 99])


def test_dry_run_never_enables(veth, emulator, tmp_path):
    proc = emulator()
    rec = backend(veth, tmp_path, armed=False, dry_run=True).run(TRAJ)
    assert rec.meta["dry_run"] and np.all(rec.q == rec.q[0])
    assert all(x["drive_state"] == "switch on disabled" for x in proc.status()["slaves"])
    assert not np.asarray(proc.truth()["enabled"]).any()    # no axis ever followed a target


# -- injected faults -------------------------------------------------------------------------------
def _disable_cycles(status):
    """Row at which each joint reaches a powerless state (ready to switch on after the shutdown
    word, or switch on disabled) after having been enabled."""
    en = np.argmax((status & 0x6F) == 0x27, axis=0)
    off = ((status & 0x6F) == 0x21) | ((status & 0x4F) == 0x40)
    return [int(en[j] + np.argmax(off[en[j]:, j])) for j in range(status.shape[1])]


def check_ordered_stop(status, joints, brake_cycles=100):
    """The emulator's own record of each drive's state transitions (independent of the master):
    OPERATION ENABLED -> SWITCHED ON (disable operation, brake engages) -> READY TO SWITCH ON
    (shutdown) at least `brake_cycles` later; distal joint first."""
    t_off = []
    for j in joints:
        tr = status["slaves"][j]["transitions"]
        on = [c for c, _t, a, b in tr if a == "operation enabled" and b == "switched on"]
        off = [c for c, _t, a, b in tr if a == "switched on" and b == "ready to switch on"]
        assert on and off, (j, tr[-6:])
        assert off[-1] - on[-1] >= brake_cycles, (j, on[-1], off[-1])
        t_off.append(on[-1])
    assert t_off == sorted(t_off, reverse=True), t_off


@pytest.mark.parametrize("kind, kwargs, expect", [
    ("drive_fault", {"slave": 2}, "drive_fault"),
    ("drop_frames", {"count": 75}, "lost_frames"),
    ("corrupt_frames", {"count": 75}, "lost_frames"),
    ("stop_answering", {"slave": 4}, "slave_lost"),
])
def test_injected_fault_safe_stop(veth, emulator, tmp_path, kind, kwargs, expect):
    from robot.backend import RunStopped
    proc = emulator()
    budget = {"lost_frame_budget": 50} if expect == "lost_frames" else None
    be = backend(veth, tmp_path, config=master_config(tmp_path, bus=budget))
    th = when_running(be, 1.2, lambda: proc.inject(kind, **kwargs))      # mid-trajectory
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    th.join()
    err = e.value
    s = err.summary
    assert err.fault == expect, s
    rec = err.recording
    assert rec.n_samples == s["rows"] and err.path.exists()       # every cycle recorded, on disk
    assert np.all(np.diff(rec.t) > 0)                             # real acquisition times
    assert s["stop_cycles"] <= s["stop_bound"] and rec.n_samples - s["fault_cycle"] <= s["stop_bound"] + 1
    answering = [j for j in range(6) if not (kind == "stop_answering" and j == 4)
                 and not (kind == "drive_fault" and j == 2)]
    order = [_disable_cycles(rec.status)[j] for j in answering]
    assert order == sorted(order, reverse=True)                    # distal joint first
    st = proc.status()
    slaves = st["slaves"]
    for j in answering:
        assert slaves[j]["drive_state"] in ("switch on disabled", "ready to switch on"), slaves[j]
    check_ordered_stop(st, answering)
    # the stop ramps the still-enabled joints to rest within their acceleration limits
    # (<= 1.2 qdd_max), measured on the recorded command stream (rows whose frame was lost left
    # out: the drives did not receive those commands), and disables them only at rest
    fc = s["fault_cycle"]
    bus = np.load(err.path.parent / "bus.npz")
    valid = bus["wkc"] == s["expected_wkc"]
    peak = peak_command_accel(rec.q_cmd, rec.status, 1e-3, fc - 2, valid=valid)
    assert np.all(peak <= 1.2 * QDD_MAX), (peak, QDD_MAX)
    # moving when the fault came (lost frames: the emulated drives held the last target they
    # received -- the stop starts there, at rest)
    assert s["stop_ramp_cycles"] > 5 or expect == "lost_frames", s
    # standstill confirmed by the measured speeds -- not with a slave lost: its working counter
    # share is missing, no frame is complete, the drives are disabled after settle_cycles
    assert s["stop_standstill"] == (kind != "stop_answering"), s
    v_off = standstill_before_disable(rec.q_cmd, rec.status, 1e-3, fc)
    assert all(v_off[j] is not None and v_off[j] < 1e-6 for j in answering), v_off
    if kind == "drive_fault":
        # and on what the drives received (the emulator's own record), from the period the
        # faulted drive dropped out on
        tr = proc.truth()
        en = tr["enabled"][:, 2]
        k_fault = int(np.flatnonzero(en[:-1] & ~en[1:])[-1])
        peak_rx = peak_truth_accel(tr, 1e-3, tr["t"][k_fault - 2])
        assert np.all(peak_rx[answering] <= 1.2 * QDD_MAX[answering]), (peak_rx, QDD_MAX)
    if kind == "drive_fault":
        assert slaves[2]["drive_state"] == "fault" and "joint3" in str(err)
        # the drive's CoE emergency (sent by the emulator on the fault) is read and recorded
        assert slaves[2]["emergencies_sent"] == 1
        assert [(e["joint"], e["error_code"]) for e in s["emergencies"]] == [("joint3", 0x2310)], s["emergencies"]
        assert "CoE emergencies: joint3 error code 0x2310" in str(err)


def test_stalled_loop_detected_and_stopped(veth, emulator, tmp_path):
    """SIGSTOP the loop process for 0.35 s mid-run (stall limit 100 cycles): the loop sees the
    stall on resuming and stops in order (the SM watchdog is programmed longer than the pause)."""
    from robot.backend import RunStopped
    emulator()
    be = backend(veth, tmp_path, config=master_config(tmp_path, bus={"watchdog_s": 1.0}))

    def stall():
        pid = be.loop_pid
        os.kill(pid, signal.SIGSTOP)
        time.sleep(0.35)
        os.kill(pid, signal.SIGCONT)
    th = when_running(be, 1.2, stall)
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    th.join()
    assert e.value.fault == "stalled_loop" and "periods late" in e.value.summary["message"]
    assert e.value.summary["stop_confirmed"]


def test_dead_loop_caught_by_watchdogs(veth, emulator, tmp_path):
    """SIGSTOP the loop for good: the parent's watchdog ends the run, keeps the samples, and the
    drives' SyncManager watchdog (emulator) takes them out of OP."""
    from robot.backend import RunStopped
    proc = emulator()
    be = backend(veth, tmp_path, watchdog_s=0.5)
    th = when_running(be, 1.2, lambda: os.kill(be.loop_pid, signal.SIGSTOP))
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    th.join()
    assert e.value.fault == "stalled_loop" and e.value.recording.n_samples > 1200
    time.sleep(0.6)
    slaves = proc.status()["slaves"]
    assert all(x["al_state"] != "OP" for x in slaves), slaves
    assert all(x["al_status_code"] == 0x001B for x in slaves)     # SyncManager watchdog


# -- the identification over the bus ---------------------------------------------------------------
def _scenario(backend, **extra):
    from identify.scenario.load import scenario_from_dict
    d = {"name": "e2e-bus", "backend": backend,
         "arm": {"urdf": str(URDF), "drives": str(DRIVES), "description": str(ROOT / "assets" / "cobot6.yaml")},
         "trajectories": {"excitation": {"harmonics": 4, "period_s": 6.0, "grid": 60, "starts": 1,
                                         "max_iter": 60, "seed": 0}},
         "processing": {"smooth_passes": 20},
         "identification": {"joint_model": "both", "estimator": "wls"}}
    d.update(extra)
    return scenario_from_dict(d, base=str(ROOT))


@pytest.mark.slow
def test_identification_over_bus_matches_twin(veth, emulator, tmp_path):
    """The pipeline's record + identify stages with `backend: hardware` over the bus (emulated
    drives run the PyBullet twin) give the same parameters as `backend: twin`, within noise: the
    parameter differences (in units of their combined standard error) are no larger than between
    two twin runs that differ only in the noise seed.

    What made it fail on loaded 2-vCPU machines (issue 23, measured): the loop used 93-100 % of
    its CPU, so the kernel's real-time throttling (950 ms per second for SCHED_FIFO) suspended it
    for ~50 ms about every second; the drives, on SYNC0, held their last target through each gap
    mid-motion, and the restart saturated the motor torque -- which the emulated drives did not
    hold to 0x6072 (165 N*m read against 110). Both fixed (the loop's CPU share, ~0.7 now, is in
    the summary); what remains is the host's own steal time (gaps of ~10 ms), see module doc."""
    from identify.app.acquisition import record
    from identify.app.identification import identify_recordings
    from identify.app.inputs import build_model
    from identify.app.trajectories import design_context, get_trajectory
    s_twin = _scenario("twin", twin={"sample_rate_hz": 100, "seed": 0})
    model = build_model(s_twin)
    terms = s_twin.identification.friction_terms
    # optimized within the drives' motor-torque limits (as a hardware scenario is by default),
    # so the hardware's own torque check accepts the trajectory the twin runs too
    spec = s_twin.trajectories.excitation
    import dataclasses
    s_lim = dataclasses.replace(s_twin, trajectories=dataclasses.replace(
        s_twin.trajectories, excitation=dataclasses.replace(spec, torque_limit="on")))
    ctx = design_context(s_lim, model, terms)
    traj = {"excitation": get_trajectory(s_lim.trajectories.excitation, model, terms, "excitation",
                                         ctx)}
    ident = {}
    ident["twin"] = identify_recordings(s_twin, model, record(s_twin, traj, model=model, show=False))
    s_twin1 = _scenario("twin", twin={"sample_rate_hz": 100, "seed": 1})
    ident["twin1"] = identify_recordings(s_twin1, model, record(s_twin1, traj, model=model, show=False))
    q0 = traj["excitation"][0].evaluate(np.zeros(1))[0][0]
    # the drives run on wall time as DC-synchronised drives do, so the twin's time matches the
    # master's acquisition time stamps (Recording.t) also across late cycles
    emulator("twin", twin_settings={"seed": 0}, q0=q0, record_truth=False, clock="sync0")
    s_hw = _scenario("hardware", hardware={
        "iface": veth[0], "armed": True,
        "config": master_config(tmp_path),
        "options": {"record_rate_hz": 100, "record_dir": str(tmp_path / "rec"), "dwell_s": 0.3}})
    recs = record(s_hw, traj, model=model, show=False)
    ex = recs["excitation"]
    assert ex.rate_hz == 100 and ex.n_samples + len(ex.meta["dropped_samples"]) == 600
    assert len(ex.meta["dropped_samples"]) <= 30     # 5 %: lost frames here, see master_config
    ident["hw"] = identify_recordings(s_hw, model, recs)

    def zmax(a, b, name):
        pa, pb = getattr(ident[a], name), getattr(ident[b], name)
        return np.max(np.abs(pa.params_ - pb.params_) / np.sqrt(pa.std_**2 + pb.std_**2))
    for name in ("simplified", "improved"):
        z_hw, z_seed = zmax("twin", "hw", name), zmax("twin", "twin1", name)
        print(f"{name}: max |z| bus vs twin {z_hw:.2f}, twin seed 0 vs seed 1 {z_seed:.2f}")
        assert z_hw < max(3.0, 2.0 * z_seed), (name, z_hw, z_seed)
    r_t = ident["twin"].validation.rms
    r_h = ident["hw"].validation.rms
    assert r_t.keys() == r_h.keys()
