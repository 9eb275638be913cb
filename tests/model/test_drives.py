"""identify.model.drives: the one reader of drive-parameter files (checked against the raw YAML)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from identify.model.drives import (DRIVE_KEYS, DriveFileError, OverrideError, check_overrides,
                             load_drives, read_drive_file)

ROOT = Path(__file__).resolve().parents[2]
DRIVES = ROOT / "assets" / "cobot6_drives.yaml"
RAW = yaml.safe_load(DRIVES.read_text())["joints"]


def test_values_match_the_raw_file_in_requested_order():
    names = ["joint5", "joint2"]
    d = load_drives(DRIVES, names)
    assert d.names == names and d.source == str(DRIVES)
    by = {j["name"]: j for j in RAW}
    for key, attr in DRIVE_KEYS.items():
        np.testing.assert_array_equal(d.array(attr), [float(by[j][key]) for j in names])
    e = by["joint5"]
    assert d["joint5"].J_r == pytest.approx(e["gear_ratio"] ** 2 * e["J_m_kgm2"], rel=1e-15)
    assert d["joint5"].xi == pytest.approx(e["xi_gf"] + e["xi_sf"])
    assert d["joint5"].torque_factor == pytest.approx(e["gear_ratio"] * e["torque_constant_Nm_A"])
    assert load_drives(DRIVES).names == [j["name"] for j in RAW]


def test_overrides_merge_and_name_the_key():
    d = load_drives(DRIVES, None, {"joint3": {"link_coulomb_Nm": 0.9, "xi_sf": 0.1}})
    assert d["joint3"].link_coulomb == 0.9 and d["joint3"].xi_sf == 0.1
    assert d["joint3"].xi_gf == RAW[2]["xi_gf"] and d["joint2"].link_coulomb == RAW[1]["link_coulomb_Nm"]
    entries = read_drive_file(DRIVES)
    for ov, path, frag in [({"joint9": {}}, ("joint9",), "unknown joint"),
                           ({"joint2": {"stiffness": 1.0}}, ("joint2", "stiffness"), "unknown key"),
                           ({"joint2": {"damping_Nms_rad": float("nan")}}, ("joint2", "damping_Nms_rad"),
                            "finite"),
                           ({"joint2": {"gear_ratio": -3}}, ("joint2", "gear_ratio"), "> 0"),
                           ({"joint4": {"xi_sf": 0.9}}, ("joint4", "xi_sf"), "must be < 1"),
                           ({"joint1": 3.0}, ("joint1",), "mapping")]:
        with pytest.raises(OverrideError) as ei:
            check_overrides(ov, entries, where="twin.drive_overrides")
        assert ei.value.path == path and frag in ei.value.message, str(ei.value)
        assert str(ei.value).startswith(f"twin.drive_overrides[{path[0]!r}]")
        assert str(DRIVES) not in str(ei.value)       # the override is at fault, not the file
    with pytest.raises(OverrideError, match="unknown joint"):   # joint not in the arm selection
        check_overrides({"joint6": {}}, entries, ["joint1"])


@pytest.mark.parametrize("mutate,frag", [
    (lambda j: j[3].pop("stiffness_Nm_rad"), "joint 'joint4' is missing key 'stiffness_Nm_rad'"),
    (lambda j: j[1].__setitem__("J_m_kgm2", "abc"), "joint 'joint2' key 'J_m_kgm2' is not a finite number"),
    (lambda j: j[1].__setitem__("J_m_kgm2", float("inf")), "joint 'joint2' key 'J_m_kgm2' is not a finite"),
    (lambda j: j[0].__setitem__("xi_gf", -0.1), "xi_gf must be >= 0 (joints ['joint1'])"),
    (lambda j: j[5].__setitem__("xi_gf", 0.9), "joint 'joint6': xi_gf + xi_sf"),
    (lambda j: j[2].__setitem__("colour", 1), "joint 'joint3': unknown key(s) ['colour']"),
    (lambda j: j.append(dict(j[0])), "'joint1' is listed twice"),
])
def test_bad_files_name_file_joint_and_key(tmp_path, mutate, frag):
    joints = [dict(j) for j in RAW]
    mutate(joints)
    p = tmp_path / "drives.yaml"
    p.write_text(yaml.safe_dump({"joints": joints}))
    with pytest.raises(DriveFileError) as ei:
        load_drives(p)
    assert str(ei.value).startswith(str(p)) and frag in str(ei.value), str(ei.value)


def test_missing_file_and_joint():
    with pytest.raises(FileNotFoundError):
        load_drives(ROOT / "nope.yaml")
    with pytest.raises(DriveFileError, match="no drive entry for joint 'elbow'"):
        load_drives(DRIVES, ["joint1", "elbow"])
