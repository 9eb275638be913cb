"""The cyclic loop process and the hardware backend against a scripted test double of the bus
(tests/robot_fakes.py): completed run, refusal without arming, and the fault policy -- every
injected fault ends in the defined stop within its cycle bound with every sample recorded."""
from pathlib import Path

import numpy as np
import pytest

from robot.backend import HardwareBackend, RunStopped
from robot.safety import SafetyError
from stopcheck import QDD_MAX, peak_command_accel, standstill_before_disable

DT = 1e-3


class SineTraj:
    def __init__(self, a, w, duration, n=6):
        self.a, self.w, self.duration, self.n = np.asarray(a, float), w, duration, n

    @property
    def n_joints(self):
        return self.n

    def evaluate(self, t):
        t = np.asarray(t, float)[:, None]
        s = np.sin(self.w * t)
        return self.a * s, self.a * self.w * np.cos(self.w * t), -self.a * self.w**2 * s


TRAJ = SineTraj(np.array([0.2, 0.1, -0.1, 0.2, 0.2, 0.3]), 2 * np.pi / 1.5, 1.5)


def nominal(rec):
    """The command grid of a recording: sample k was commanded at k / rate (rec.t holds the real,
    monotonic acquisition times)."""
    return np.arange(rec.n_samples) / rec.rate_hz


def check_time_base(rec, period):
    """rec.t: real acquisition times, strictly increasing, on average one period apart; late
    flags present (independent of the loop's own bookkeeping: the stamps are wall clock)."""
    assert rec.t[0] >= 0 and np.all(np.diff(rec.t) > 0)
    assert rec.late is not None and rec.late.shape == rec.t.shape
    assert abs(np.median(np.diff(rec.t)) - period) < 0.2 * period


def loose_config(tmp_path):
    """The drive configuration with stall_cycles 200: a shared CI machine pauses processes for
    tens of ms, which must not pass for the faults under test (the stall test pauses longer)."""
    import yaml
    from robot.config import DEFAULT_CONFIG
    raw = yaml.safe_load(DEFAULT_CONFIG.read_text())
    raw["safety"]["stall_cycles"] = 200
    path = tmp_path / "ethercat.yaml"
    path.write_text(yaml.safe_dump(raw))
    return str(path)


def backend(tmp_path, faults=(), bus_kwargs=None, **settings):
    s = {"iface": "fake0", "armed": True, "record_dir": str(tmp_path / "rec"), "dwell_s": 0.1,
         "config": loose_config(tmp_path)}
    s.update(settings)
    return HardwareBackend({}, s, bus_factory="robot_fakes:FakeBus",
                           bus_kwargs={"faults": list(faults), **(bus_kwargs or {})})


def test_refuses_without_arming_and_bad_trajectory(tmp_path):
    be = backend(tmp_path, armed=False)
    with pytest.raises(SafetyError, match="not armed") as e:
        be.run(TRAJ)
    assert isinstance(e.value, ValueError)      # the pipeline maps refusals (ValueError) to exit 4
    assert not (tmp_path / "rec").exists()          # nothing started, nothing recorded
    fast = SineTraj(np.array([0.2, 0.1, -0.1, 0.2, 2.0, 0.3]), 2 * np.pi / 1.5, 1.5)
    with pytest.raises(ValueError, match="velocity limit at joint joint5, sample 0 "):
        backend(tmp_path).run(fast)


def test_completed_run_records_trajectory(tmp_path):
    be = backend(tmp_path)
    rec = be.run(TRAJ, periods=1)
    assert rec.rate_hz == 100.0 and rec.n_samples == 150 and rec.joint_names == [f"joint{k}" for k in range(1, 7)]
    check_time_base(rec, 0.01)
    q_ref, qd_ref, _ = TRAJ.evaluate(nominal(rec))
    np.testing.assert_allclose(rec.q_cmd, q_ref, atol=1e-9)
    # first-order lag of 4 ms: q lags q_cmd by about qd * 4 ms (+ one cycle)
    assert np.max(np.abs(rec.q - rec.q_cmd)) < 0.006
    np.testing.assert_allclose(rec.tau_j, np.tile(np.arange(1, 7) * 1.0, (150, 1)))
    rated = np.array([70, 70, 40, 20, 20, 20.0])
    np.testing.assert_allclose(rec.tau_m, np.tile(np.arange(1, 7) * 10 * rated / 1000, (150, 1)))
    assert np.all(rec.status == 0x0637)
    s = be.last_summary
    assert s["fault"] is None and s["stop_confirmed"] and s["stop_cycles"] <= s["stop_bound"]
    stream = be.last_stream
    assert stream.n_samples == s["rows"]
    assert np.all(stream.status[-1] == 0x0231)      # every drive shut down (ready to switch on)
    first = Path(s["record_dir"])
    assert first.parent == tmp_path / "rec" and (first / "stream.npz").exists()
    chunks = sorted(first.glob("chunk_*.npz"))
    assert len(chunks) >= 1
    # a second trajectory on the same backend gets its own folder; the first one's chunks stay
    be.run(TRAJ, periods=1)
    second = Path(be.last_summary["record_dir"])
    assert second != first and (second / "stream.npz").exists()
    assert sorted(first.glob("chunk_*.npz")) == chunks and (first / "stream.npz").exists()


def disable_order(status):
    """Cycle at which each joint first reports a powerless state ('ready to switch on' after the
    shutdown word, or 'switch on disabled') after being enabled."""
    en = np.argmax(status == 0x0637, axis=0)
    off = (status == 0x0231) | (status == 0x0250)
    return [int(en[j] + np.argmax(off[en[j]:, j])) for j in range(status.shape[1])]


# the plan: approach (>= 0.5 s) + dwell 0.1 s, then the trajectory: enabled cycle 900 is mid-motion
@pytest.mark.parametrize("fault, expect, policy_hold", [
    ({"kind": "drive_fault", "slave": 2, "at": 900}, "drive_fault", True),
    ({"kind": "drop_frames", "count": 10, "at": 900}, "lost_frames", True),
    ({"kind": "stop_answering", "slave": 3, "at": 900}, "slave_lost", True),
    ({"kind": "stall", "seconds": 0.3, "at": 900}, "stalled_loop", True),
    ({"kind": "freeze", "slave": 1, "at": 900}, "feedback_fault", False),
])
def test_fault_ends_in_safe_stop_with_recording(tmp_path, fault, expect, policy_hold):
    be = backend(tmp_path, faults=[fault])
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    err = e.value
    assert err.fault == expect, err.summary
    s = err.summary
    assert s["stop_cycles"] <= s["stop_bound"]
    rec = err.recording
    assert rec is not None and rec.n_samples == s["rows"] and err.path.exists()
    check_time_base(rec, DT)                                 # no sample missing, real stamps
    fc = s["fault_cycle"]
    assert rec.n_samples - fc <= s["stop_bound"] + 1         # stopped within the bound
    # the powered drives that still answer are disabled, distal first, one per cycle
    alive = [j for j in range(6) if not (expect == "slave_lost" and j == 3)
             and not (expect == "drive_fault" and j == 2)]
    order = disable_order(rec.status)
    seq = [order[j] for j in alive]
    assert seq == sorted(seq, reverse=True)
    hold = 50 if policy_hold else 0
    assert min(seq) - fc >= hold
    # stop order per drive: disable operation (switched on, brake engaging) for the configured
    # brake delay (0.1 s = 100 cycles), then shutdown
    assert s["brake_cycles"] == 100
    for j in alive:
        assert np.sum(rec.status[fc:, j] == 0x0233) >= s["brake_cycles"] - 1, j
    # after the fault the command of every enabled joint ramps to rest within its acceleration
    # limit (measured on the recorded command stream), never faster than the per-cycle step
    # limit, and the drives are disabled only once their command is at rest
    step = np.max(np.abs(np.diff(rec.q_cmd[fc:], axis=0)))
    assert step <= 0.005 + 1e-9
    valid = np.load(err.path.parent / "bus.npz")["wkc"] == s["expected_wkc"]
    peak = peak_command_accel(rec.q_cmd, rec.status, DT, fc - 2,
                              valid=None if expect == "slave_lost" else valid)
    assert np.all(peak <= 1.2 * QDD_MAX), (peak, QDD_MAX)
    # it was moving (lost frames: the fake drives held the last target they received, the stop
    # starts there at rest)
    assert s["stop_ramp_cycles"] is not None and (s["stop_ramp_cycles"] > 5 or expect == "lost_frames")
    v_off = standstill_before_disable(rec.q_cmd, rec.status, DT, fc)
    assert all(v_off[j] is not None and v_off[j] < 1e-6 for j in alive), v_off
    assert s["stop_standstill"] and s["stop_policy"] == ("hold" if policy_hold else "disable")


def _when_running(be, rows, action):
    import threading
    import time

    def wait():
        t_end = time.monotonic() + 30
        while time.monotonic() < t_end:
            st = be.status()
            if st and st["phase"] == "run" and st["rows"] - st["run_row0"] > rows:
                action(st)
                return
            time.sleep(0.005)
    th = threading.Thread(target=wait)
    th.start()
    return th


def test_abort_request_ends_in_safe_stop(tmp_path):
    """The parent's abort request (another thread) stops the run in the defined order: ramp to
    rest within the acceleration limits, then the drives disabled, confirmed."""
    be = backend(tmp_path)
    assert be.status() is None and not be.abort()
    th = _when_running(be, 900, lambda st: be.abort())
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    th.join()
    assert e.value.fault == "aborted" and e.value.summary["stop_confirmed"]
    assert "confirmed them disabled" in str(e.value)
    assert np.all(e.value.recording.status[-1] == 0x0231)
    rec, s = e.value.recording, e.value.summary
    assert np.all(peak_command_accel(rec.q_cmd, rec.status, DT, s["fault_cycle"] - 2) <= 1.2 * QDD_MAX)
    assert be.status() is None


def test_signal_to_the_loop_process_runs_the_defined_stop(tmp_path):
    """SIGTERM to the loop process alone (not the parent): the loop runs the defined stop on its
    own (fault 'signal', named), confirmed by the statuswords."""
    import os
    import signal
    be = backend(tmp_path)
    th = _when_running(be, 900, lambda st: os.kill(st["pid"], signal.SIGTERM))
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    th.join()
    s, rec = e.value.summary, e.value.recording
    assert e.value.fault == "signal" and "SIGTERM to the loop process" in s["message"]
    assert s["stop_confirmed"] and np.all(rec.status[-1] == 0x0231)
    assert np.all(peak_command_accel(rec.q_cmd, rec.status, DT, s["fault_cycle"] - 2) <= 1.2 * QDD_MAX)


def test_offline_dry_run_checks_without_bus(tmp_path):
    be = HardwareBackend({}, {"dry_run": True, "record_rate_hz": 100})
    rec = be.run(TRAJ, periods=2)
    assert rec.meta["dry_run"] and rec.n_samples == 300
    np.testing.assert_allclose(rec.q_cmd, np.tile(TRAJ.evaluate(np.arange(150) * 0.01)[0], (2, 1)), atol=1e-12)
    assert np.all(rec.q == rec.q[0])                 # nothing moved
    with pytest.raises(ValueError, match="iface"):
        HardwareBackend({}, {"armed": True}).run(TRAJ)


def test_torque_feedforward_sent_per_mille(tmp_path):
    """torque_feedforward: the drives receive the rigid-body inverse dynamics of the reference for
    the next sync (RobotModel, independent of robot/), per mille of the rated torque (the fake
    drive echoes it as torque_actual)."""
    from identify import RobotModel
    be = backend(tmp_path, bus_kwargs={"echo_torque": True}, torque_feedforward=True)
    rec = be.run(TRAJ)
    m = RobotModel.reference()
    tau = m.inverse_dynamics(*TRAJ.evaluate(nominal(rec) + 1e-3))
    rated = np.array([70, 70, 40, 20, 20, 20.0])
    assert np.all(np.max(np.abs(rec.tau_m - tau), axis=0) <= rated / 2000 + 1e-9)
    assert np.max(np.abs(tau)) > 10                       # not trivially zero


class JumpTraj(SineTraj):
    """TRAJ with a position jump of `jump` rad on joint 1 at t >= 0.5 s (velocity unchanged)."""
    def __init__(self, jump):
        super().__init__(TRAJ.a, TRAJ.w, TRAJ.duration)
        self.jump = jump

    def evaluate(self, t):
        q, qd, qdd = super().evaluate(t)
        q = q.copy()
        q[np.asarray(t) >= 0.5, 0] += self.jump
        return q, qd, qdd


def test_position_step_guard_is_below_velocity_limit(tmp_path):
    """The per-cycle step guard is min(5 mrad, 1.2 qd_max dt): joint 1 (qd_max = pi rad/s) may
    move 3.77 mrad per 1 ms cycle, not the configured 5 mrad (= 5 rad/s). A 4.5 mrad jump in the
    command is refused, naming the joint and the sample; 3.5 mrad passes."""
    be = backend(tmp_path)
    qd_max = np.radians([180, 180, 180, 225, 225, 225])
    np.testing.assert_allclose(be.step_max, np.minimum(0.005, 1.2 * qd_max * DT), rtol=1e-12)
    assert be.step_max[0] == pytest.approx(1.2 * np.pi * 1e-3)
    sample = int(round(0.5 / DT))
    with pytest.raises(ValueError, match=f"per-cycle position step limit at joint joint1, sample {sample} "):
        be.check(JumpTraj(0.0045))
    be.check(JumpTraj(0.0035 - TRAJ.a[0] * TRAJ.w * DT))


def test_stop_ramp_decelerates_at_the_acceleration_limit(tmp_path):
    """A frozen encoder on joint 1 mid-motion is a feedback fault within 20 cycles (named, long
    before the 50 mrad following error); with policy hold the joints' commands come to rest at
    their acceleration limit (the ramp runs at it: peak within 1 % of qdd_max, never above)."""
    be = backend(tmp_path, faults=[{"kind": "freeze", "slave": 0, "at": 900}],
                 fault_policy={"feedback_fault": "hold"})
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    err = e.value
    assert err.fault == "feedback_fault" and "joint joint1" in str(err) and "frozen encoder" in str(err)
    s, rec = err.summary, err.recording
    fc = s["fault_cycle"]
    # the first row of the frozen reading, from the data: joint 1 unchanged from there on
    dq = np.abs(np.diff(rec.q[:fc + 1, 0]))
    frozen_from = int(np.flatnonzero(dq > 0)[-1]) + 1
    assert 0 < fc - frozen_from <= 20, (fc, frozen_from)
    peak = peak_command_accel(rec.q_cmd, rec.status, DT, fc)
    moving = np.abs(rec.q_cmd[fc, :] - rec.q_cmd[fc - 1, :]) / DT > 0.05
    assert moving.sum() >= 3
    np.testing.assert_allclose(peak[moving], QDD_MAX[moving], rtol=0.01)
    assert np.abs(np.diff(rec.q_cmd[fc + 1:], axis=0)).max() <= 1.2 * np.pi * DT + 1e-9


def test_torque_feedforward_includes_payload(tmp_path):
    """With a payload the feed-forward is the rigid-body inverse dynamics of arm + payload:
    Pinocchio's RNEA with the payload's Inertia added to the last joint's body (independent of
    robot/), as received by the (echoing) fake drives, to the bus resolution."""
    pin = pytest.importorskip("pinocchio")
    from pathlib import Path
    pl = {"mass_kg": 1.0, "com_m": [0.0, 0.02, 0.06], "inertia_kgm2": [0.006, 0.005, 0.004, 0, 0, 0]}
    s = {"iface": "fake0", "armed": True, "record_dir": str(tmp_path / "rec"), "dwell_s": 0.1,
         "config": loose_config(tmp_path), "torque_feedforward": True}
    be = HardwareBackend({"payload": pl}, s, bus_factory="robot_fakes:FakeBus",
                         bus_kwargs={"echo_torque": True})
    rec = be.run(TRAJ)
    pm = pin.buildModelFromUrdf(str(Path(__file__).resolve().parents[2] / "assets" / "cobot6.urdf"))
    Ixx, Iyy, Izz, Ixy, Ixz, Iyz = pl["inertia_kgm2"]
    I_c = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    pm.inertias[pm.njoints - 1] = pm.inertias[pm.njoints - 1] + pin.Inertia(1.0, np.array(pl["com_m"]), I_c)
    pd = pm.createData()
    q, qd, qdd = TRAJ.evaluate(nominal(rec) + 1e-3)
    tau = np.array([pin.rnea(pm, pd, q[k], qd[k], qdd[k]) for k in range(len(q))])
    rated = np.array([70, 70, 40, 20, 20, 20.0])
    assert np.all(np.max(np.abs(rec.tau_m - tau), axis=0) <= rated / 2000 + 1e-9)
    from identify import RobotModel
    bare = RobotModel.reference().inverse_dynamics(q, qd, qdd)
    assert np.max(np.abs(rec.tau_m[:, 1] - bare[:, 1])) > 2.0     # the payload is not negligible


# -- CiA 402 supervision (fake bus; the same over veth in test_hardware_e2e) ---------------------
@pytest.mark.parametrize("kind, state", [("sto", "SWITCH ON DISABLED"), ("quick_stop", "QUICK STOP ACTIVE")])
def test_drive_leaving_enabled_without_fault_stops_the_run(tmp_path, kind, state):
    """A drive that leaves OPERATION ENABLED without a fault (safe torque off, drive-side quick
    stop) stops the run at once, named with its state -- here at standstill (the dwell before the
    trajectory, cycle 30 of the enabled phase)."""
    be = backend(tmp_path, faults=[{"kind": kind, "slave": 4, "at": 30}])
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    s = e.value.summary
    assert e.value.fault == "drive_disabled"
    assert f"joint5 is {state}" in s["message"]
    run0 = s["run_row0"]
    assert s["fault_cycle"] - run0 <= 31 + 2          # within a cycle or two of the event


def test_mode_request_ignored_is_refused_before_enabling(tmp_path):
    be = backend(tmp_path, bus_kwargs={"ignore_mode": True})
    with pytest.raises(RunStopped, match=r"joint1 ignores the mode request: 0x6061 reads 0") as e:
        be.run(TRAJ)
    assert e.value.fault == "mode_changed"
    assert not np.any(e.value.recording.status == 0x0637)      # never enabled


def test_fault_at_start_reported_and_reset_only_on_request(tmp_path):
    """A drive in FAULT at start: refused with its 0x603F code (fault_reset: never, the default);
    with fault_reset: on_start it is reset and the run completes."""
    from robot.safety import SafetyRefused
    be = backend(tmp_path, bus_kwargs={"start_fault": (2, 0x2310)})
    with pytest.raises(SafetyRefused, match=r"joint3: statusword 0x0218, error code 0x603F = 0x2310.*'never'"):
        be.run(TRAJ)
    import yaml
    cfg = loose_config(tmp_path)
    raw = yaml.safe_load(open(cfg))
    raw["safety"]["fault_reset"] = "on_start"
    cfg = str(tmp_path / "reset.yaml")
    open(cfg, "w").write(yaml.safe_dump(raw))
    be = backend(tmp_path, bus_kwargs={"start_fault": (2, 0x2310)}, config=cfg)
    rec = be.run(TRAJ)
    assert rec.n_samples == 150 and be.last_summary["fault"] is None


def test_start_pose_checked_against_trajectory_start(tmp_path):
    from robot.safety import SafetyRefused
    q0 = np.zeros(6)
    q0[3] = 0.8                                    # 0.8 rad away from the start (tolerance 0.5)
    be = backend(tmp_path, bus_kwargs={"q0": q0})
    with pytest.raises(SafetyRefused, match=r"joint joint4 at 0.8000 rad, start 0.0000 rad"):
        be.run(TRAJ)


def test_plausibility_torque_jump_and_warnings(tmp_path):
    """Actual torque 0x6077 at/beyond the arm's torque limit (what 0x6072 is set to) for 20 cycles
    stops the run naming joint and values; an encoder jump beyond 3x the velocity limit is a
    feedback fault at once; a drive warning (statusword bit 7) does not stop the run but is in
    its records (summary warnings: joint, first cycle, count)."""
    be = backend(tmp_path)
    tau_max = be.full.limits.tau_max
    pm = int(np.ceil(tau_max[3] * 1.1 / 20.0 * 1000))        # joint4: rated 20 N*m
    be = backend(tmp_path, faults=[{"kind": "overtorque", "slave": 3, "at": 900, "permille": pm}])
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    s = e.value.summary
    assert e.value.fault == "torque_limit" and "joint joint4 actual torque (0x6077)" in s["message"]
    assert s["stop_confirmed"]
    be = backend(tmp_path, faults=[{"kind": "jump", "slave": 4, "at": 900, "rad": 0.05}])
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    assert e.value.fault == "feedback_fault", e.value.summary
    assert "feedback fault at joint joint5: the encoder jumped 0.0" in e.value.summary["message"], e.value.summary["message"]
    be = backend(tmp_path, faults=[{"kind": "warning", "slave": 5, "at": 900}])
    be.run(TRAJ)
    w = be.last_summary["warnings"]
    assert list(w) == ["joint6"] and w["joint6"]["cycles"] > 100 and w["joint6"]["statusword"] & 0x80


def test_emergency_with_error_code_stops_the_run(tmp_path):
    """A CoE emergency with an error code (drive still enabled: a temperature warning class
    code) stops the run, naming joint, code and meaning, within one round of the mailbox reads
    (6 slaves x al_check_cycles = 60 cycles, + 2) of its arrival."""
    be = backend(tmp_path, faults=[{"kind": "emcy", "slave": 3, "at": 900, "code": 0x4310}])
    with pytest.raises(RunStopped) as e:
        be.run(TRAJ)
    s = e.value.summary
    assert e.value.fault == "emergency", s
    assert "CoE emergency from joint joint4: error code 0x4310 (drive temperature too high)" in s["message"]
    (em,) = s["emergencies"]
    arrived = s["run_row0"] + em["k_enabled"] - s["enable_cycles"]       # row of the injection
    assert 0 <= s["fault_cycle"] - arrived <= 6 * 10 + 2, (s["fault_cycle"], arrived)
    assert s["stop_confirmed"]


_BRINGUP_SCRIPT = """
import sys, time
sys.path.insert(0, {tests!r})
from robot.backend import HardwareBackend
from robot.runfiles import StopSignal
from test_robot_loop import TRAJ
if __name__ == "__main__":
    be = HardwareBackend({{}}, {{"iface": "fake0", "armed": True, "record_dir": {rec!r}}},
                         bus_factory="robot_fakes:FakeBus", bus_kwargs={{"open_delay_s": 30.0}})
    print("running", flush=True)
    try:
        be.run(TRAJ)
    except StopSignal:
        sys.exit(143)
    except KeyboardInterrupt:
        sys.exit(130)
"""


@pytest.mark.parametrize("sig, code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_signal_during_bus_bringup_exits_within_a_second(tmp_path, sig, code):
    """A signal while the bus comes up (here a 30 s bring-up) ends the command within 1 s with
    130 / 143, before anything was enabled, and leaves no loop process behind."""
    import os
    import signal
    import subprocess
    import sys
    import time
    script = tmp_path / "run.py"
    script.write_text(_BRINGUP_SCRIPT.format(tests=str(Path(__file__).resolve().parent),
                                             rec=str(tmp_path / "rec")))
    root = str(Path(__file__).resolve().parents[2])
    child = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=root + os.pathsep + str(Path(__file__).parent)))
    assert child.stdout.readline().strip() == "running"
    time.sleep(2.0)                                  # the loop process is in its bring-up
    kids = subprocess.run(["pgrep", "-P", str(child.pid)], capture_output=True, text=True).stdout.split()
    assert kids                                      # the spawned loop process (+ resource tracker)
    t0 = time.monotonic()
    child.send_signal(getattr(signal, sig))
    out, err = child.communicate(timeout=20)
    dt = time.monotonic() - t0
    assert child.returncode == code, err[-2000:]
    assert dt < 1.0, dt
    assert "the drives were never enabled" in err and "bring-up interrupted" in err
    time.sleep(0.5)                                  # the resource tracker leaves after its parent
    alive = [k for k in kids if Path(f"/proc/{k}").exists()
             and Path(f"/proc/{k}/stat").read_text().split()[2] != "Z"]
    assert not alive, alive


def test_absolute_pose_checked_at_bringup(tmp_path):
    """A run leaves the pose measured at its end in last_pose_file; the next run refuses a pose
    read at bring-up farther than last_pose_tolerance_rad from it (nothing moves), and a pose
    outside a joint's range is refused whatever the file says."""
    import json
    f = tmp_path / "last_pose.json"
    be = backend(tmp_path, last_pose_file=str(f))
    rec = be.run(TRAJ)
    last = json.loads(f.read_text())
    assert last["joint_names"] == rec.joint_names
    q_end = TRAJ.evaluate(np.array([TRAJ.duration]))[0][0]
    np.testing.assert_allclose(last["q"], q_end, atol=2e-3)        # the plan's end (after the dwell)
    be.run(TRAJ)                                                   # same pose: accepted
    q0 = np.array(last["q"]) + np.array([0, 0, 0.1, 0, 0, 0])     # joint3 moved while off
    be = backend(tmp_path, last_pose_file=str(f), bus_kwargs={"q0": q0})
    with pytest.raises(SafetyError, match=r"joint joint3 reads .* the last run ended at .*"
                                          r"last_pose_tolerance_rad 0.05"):
        be.run(TRAJ)
    q_out = np.zeros(6)
    q_out[2] = -3.2                                                # beyond joint3's +-2.967 rad
    be = backend(tmp_path, bus_kwargs={"q0": q_out})
    with pytest.raises(SafetyError, match=r"absolute encoder of joint joint3 reads -3.2000 rad"):
        be.run(TRAJ)
