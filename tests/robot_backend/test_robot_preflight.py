"""robot.backend.preflight and the settings' interlock state: an unarmed hardware run is refused
from the scenario's settings alone, before any model, trajectory or bus work."""
from pathlib import Path

import pytest

from robot.backend import HardwareBackend, preflight
from robot.config import ConfigError, HardwareSettings
from robot.safety import SafetyRefused

ROOT = Path(__file__).resolve().parents[2]
ARM = {"urdf": str(ROOT / "assets" / "cobot6.urdf"), "drives": str(ROOT / "assets" / "cobot6_drives.yaml")}


def test_settings_expose_interlock_state():
    s = HardwareSettings.from_settings({"iface": "eth1"})
    assert not s.may_enable and "not armed" in s.refusal()
    assert HardwareSettings.from_settings({"dry_run": True}).refusal() is None
    assert not HardwareSettings.from_settings({"dry_run": True, "armed": True}).may_enable
    armed = HardwareSettings.from_settings({"iface": "eth1", "armed": True})
    assert armed.may_enable and armed.refusal() is None


def test_scenario_loader_settings_show_refusal():
    """The scenario layer validates `hardware:` with HardwareSettings.from_settings (identify's
    registry identify.backend.interface.SETTINGS); the object it gets back already knows the run will be refused."""
    from identify.backend.interface import SETTINGS
    from identify.scenario.load import scenario_from_dict
    mod, cls, meth = SETTINGS["hardware"]
    assert (mod, cls, meth) == ("robot.config", "HardwareSettings", "from_settings")
    scn = scenario_from_dict({"arm": {"urdf": ARM["urdf"], "drives": ARM["drives"]},
                              "backend": "hardware", "hardware": {"iface": "eth1"}},
                             base=str(ROOT))
    s = HardwareSettings.from_settings(scn.backend_settings())
    assert s.refusal() is not None and not s.may_enable
    with pytest.raises(SafetyRefused, match="not armed"):
        preflight(scn.arm.backend_arm(), scn.backend_settings())


def test_unarmed_refused_before_reading_anything(tmp_path):
    """The interlock is checked first: the refusal comes even when the arm's files do not exist
    (nothing was loaded, no model built, the bus never touched)."""
    missing = {"urdf": str(tmp_path / "none.urdf"), "drives": str(tmp_path / "none.yaml")}
    with pytest.raises(SafetyRefused, match="not armed") as e:
        preflight(missing, {"iface": "eth1", "armed": False, "config": str(tmp_path / "none_cfg.yaml")})
    assert isinstance(e.value, ValueError)          # the pipeline's refusal type (exit code 4)
    with pytest.raises(SafetyRefused, match="not armed"):
        HardwareBackend({}, {"iface": "eth1"}).run(object())   # run() refuses before the trajectory


def test_armed_preflight_checks_files_and_payload(tmp_path):
    s = preflight(ARM, {"iface": "lo", "armed": True})       # lo: a port every machine has
    assert s.may_enable and s.iface == "lo"
    assert not preflight({}, {"dry_run": True}).may_enable          # reference arm, offline check
    with pytest.raises(ValueError, match="iface"):
        preflight(ARM, {"armed": True})
    with pytest.raises(ValueError, match="unknown hardware setting"):
        preflight(ARM, {"armed": True, "iface": "eth1", "armd": True})
    with pytest.raises(ValueError, match="arm.payload.mass_kg must be > 0"):
        preflight({**ARM, "payload": {"mass_kg": -1.0}}, {"iface": "eth1", "armed": True})
    with pytest.raises(FileNotFoundError, match="none.yaml"):
        preflight({**ARM, "drives": str(tmp_path / "none.yaml")}, {"iface": "eth1", "armed": True})
    with pytest.raises(ConfigError, match="not found"):
        preflight(ARM, {"iface": "eth1", "armed": True, "config": str(tmp_path / "c.yaml")})
    bad = tmp_path / "drives.yaml"
    bad.write_text(Path(ARM["drives"]).read_text().replace("xi_sf: 0.18\n", "xi_sf: 0.9\n", 1))
    with pytest.raises(ValueError, match="joint2"):
        preflight({**ARM, "drives": str(bad)}, {"iface": "eth1", "armed": True})


# -- interface problems and SDO error texts (no root, no bus) ------------------------------------
def test_interface_problem_names_the_fix(monkeypatch):
    from robot import netif
    assert "no network interface named 'nope0'" in netif.interface_problem("nope0")
    assert "set hardware.iface" in netif.interface_problem("")
    monkeypatch.setattr(netif.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(netif, "_has_cap_net_raw", lambda: False)
    msg = netif.interface_problem("lo")
    assert "run as root" in msg and "setcap cap_net_raw" in msg


def test_armed_preflight_refuses_a_missing_port():
    """An interface that does not exist is refused by the preflight (before any trajectory is
    designed: it was found by the bus bring-up after 100 s of optimization), naming the key."""
    with pytest.raises(ValueError, match="hardware.iface: no network interface named "
                                         "'twinid-none0'"):
        preflight(ARM, {"iface": "twinid-none0", "armed": True})
    # the armed interlock still comes first
    with pytest.raises(SafetyRefused, match="not armed"):
        preflight(ARM, {"iface": "twinid-none0"})


def test_sdo_error_text_names_object_and_abort_meaning():
    from robot.drive.drivecheck import sdo_error_text

    class SdoError(Exception):
        abort_code = 0x06020000

    class WkcError(Exception):
        pass
    assert sdo_error_text("write", 0x60C2, 1, SdoError("x")) == (
        "SDO write 0x60c2:1 (interpolation time period) failed: abort code 0x06020000 "
        "(object does not exist in the object dictionary)")
    t = sdo_error_text("write", 0x6060, 0, WkcError())
    assert t.startswith("SDO write 0x6060:0 (modes of operation) failed: no mailbox answer") and "overloaded" in t


def test_check_units_against_config():
    import pytest as _pt
    from robot.config import load_config
    from robot.drive.drivecheck import DriveCheckError, check_units
    d = load_config().drives[0]
    good = {"encoder_increments": 1 << 20, "encoder_motor_revs": 101, "gear_motor_revs": 101,
            "gear_shaft_revs": 1, "feed": 1 << 20, "feed_shaft_revs": 1, "rated_torque_mNm": 693,
            "rated_current_mA": 5600, "position_source": 2}
    assert check_units(d, good, "slave 1 (joint1)") == []
    with _pt.raises(DriveCheckError, match=r"slave 1 \(joint1\).*gear ratio 0x6091 = 100"):
        check_units(d, dict(good, gear_motor_revs=100), "slave 1 (joint1)")
    with _pt.raises(DriveCheckError, match=r"motor rated torque 0x6076 = 700 mN\*m"):
        check_units(d, dict(good, rated_torque_mNm=700), "slave 1 (joint1)")
    notes = check_units(d, dict(good, position_source=None, rated_torque_mNm=None), "x")
    assert "0x2003 position source not present" in notes and "0x6076 rated torque not present" in notes
