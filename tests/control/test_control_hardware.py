"""The hardware path of the closed loop: a feed-forward model's torque reaches the drives'
torque offset object (per mille), through the scripted test double of the bus, and a drive
mapping without torque_offset is refused before the bus is touched."""
import numpy as np
import pytest
import yaml

from identify import RobotModel
from identify.control.feedforward import feedforward
from identify.control.joint_model import from_parameters
from robot.backend import HardwareBackend
from robot.safety import SafetyRefused

from test_robot_loop import TRAJ, loose_config, nominal


def _backend(tmp_path, config):
    s = {"iface": "fake0", "armed": True, "record_dir": str(tmp_path / "rec"), "dwell_s": 0.1,
         "config": config}
    return HardwareBackend({}, s, bus_factory="robot_fakes:FakeBus",
                           bus_kwargs={"echo_torque": True})


def test_feedforward_model_written_to_torque_offset(tmp_path):
    m = RobotModel.reference()
    jm = from_parameters(m, m.params, viscous=np.full(6, 0.3), coulomb=np.full(6, 0.4),
                         stage2={"xi_opp": np.full(6, 0.3), "f_mc": np.full(6, 1.0),
                                 "J_m": np.full(6, 0.2)})
    rec = _backend(tmp_path, loose_config(tmp_path)).run(TRAJ, tau_ff=feedforward(jm))
    t = nominal(rec) + 1e-3                                      # the plan of the next sync
    want = jm.motor_torque(*TRAJ.evaluate(t))
    rated = np.array([70, 70, 40, 20, 20, 20.0])
    moving = np.abs(TRAJ.evaluate(t)[1]) > 0.05                 # the smoothed sign's band aside
    err = np.where(moving, np.abs(rec.tau_m - want), 0.0)
    assert np.all(err.max(axis=0) <= rated / 2000 + 1e-9)
    rigid = m.inverse_dynamics(*TRAJ.evaluate(t))
    assert np.max(np.abs(want - rigid)) > 5                     # not the rigid-body default


def test_feedforward_refused_without_torque_offset(tmp_path):
    raw = yaml.safe_load(open(loose_config(tmp_path)))
    raw["pdo"]["rx_entries"] = [e for e in raw["pdo"]["rx_entries"]
                                if e["name"] != "torque_offset"]
    path = tmp_path / "no_offset.yaml"
    path.write_text(yaml.safe_dump(raw))
    be = _backend(tmp_path, str(path))
    with pytest.raises(SafetyRefused, match="torque_offset"):
        be.run(TRAJ, tau_ff=lambda q, qd, qdd: np.zeros_like(q))


def test_dry_run_checks_the_feedforward(tmp_path):
    """A hardware dry run evaluates the feed-forward on the plan and refuses one the drives'
    torque offset cannot carry (per-mille range), before anything is enabled."""
    s = {"iface": "fake0", "armed": True, "record_dir": str(tmp_path / "rec"), "dwell_s": 0.1,
         "config": loose_config(tmp_path), "dry_run": True}
    be = HardwareBackend({}, s, bus_factory="robot_fakes:FakeBus", bus_kwargs={})
    with pytest.raises(SafetyRefused, match="feed-forward"):
        be.run(TRAJ, tau_ff=lambda q, qd, qdd: np.full_like(q, 1e5))
