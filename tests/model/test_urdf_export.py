"""The identified URDF: the vendor's file edited (meshes, frames, locked joints as shipped),
inertials to round-off tolerance, and the joint-term sidecar."""
from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest

from identify.model.joint_sidecar import JointTerms, read_sidecar, write_sidecar
from identify.model.robot_model import RobotModel
from identify.model.spatial import params_from_inertial
from identify.model.urdf_export import check_physical, export_urdf

PANDA_JOINTS = [f"panda_joint{i}" for i in range(1, 8)]


def _meshes(path):
    root = ET.parse(path).getroot()
    return sorted(m.get("filename") for m in root.iter("mesh"))


def test_panda_export_keeps_meshes_and_frames(tmp_path, pybullet_data_path):
    src = Path(pybullet_data_path) / "franka_panda" / "panda.urdf"
    model = RobotModel.from_urdf(src, PANDA_JOINTS)
    p = model.inertial_parameters() * 1.1                    # "identified"
    out = export_urdf(model, tmp_path / "id.urdf", p, viscous=np.full(7, 0.3),
                      coulomb=np.full(7, -0.1), comment="test")
    assert _meshes(out) == _meshes(src) and _meshes(out)       # paths as in the input
    back = RobotModel.from_urdf(out, PANDA_JOINTS)
    np.testing.assert_allclose(back.inertial_parameters(), p, rtol=1e-10, atol=1e-12)
    root = ET.parse(out).getroot()
    dyn = {j.get("name"): j.find("dynamics") for j in root.findall("joint")}
    assert float(dyn["panda_joint3"].get("damping")) == 0.3
    assert float(dyn["panda_joint3"].get("friction")) == 0.0  # negative Coulomb clipped in URDF
    links = {lk.get("name"): lk for lk in root.findall("link")}
    # the hand and fingers (merged into link 7's identified body) carry no inertial of their own
    assert links["panda_hand"].find("inertial") is None
    assert links["panda_leftfinger"].find("inertial") is None
    assert {j.get("name") for j in root.findall("joint")} >= {"panda_finger_joint1",
                                                               "panda_hand_joint"}


def test_psd_to_round_off_is_exported_and_real_violations_refused(tmp_path, ref_model):
    p = ref_model.inertial_parameters().copy()
    # link 6: an inertia about the CoM with a zero principal moment, minus round-off
    m, c = 0.8, np.array([0.0, 0.01, 0.02])
    I_c = np.diag([2e-3, 2e-3, -5.5e-18])
    p[50:60] = params_from_inertial(m, c, I_c)
    assert check_physical(p, ref_model.link_names) == []
    out = export_urdf(ref_model, tmp_path / "ok.urdf", p)
    izz = [float(lk.find("inertial/inertia").get("izz")) for lk in ET.parse(out).getroot()
           .findall("link") if lk.find("inertial") is not None][-1]
    assert izz >= 0.0
    p[50:60] = params_from_inertial(m, c, np.diag([2e-3, 2e-3, -1e-4]))
    probs = check_physical(p, ref_model.link_names)
    assert len(probs) == 1 and probs[0].startswith(ref_model.link_names[5])
    with pytest.raises(ValueError, match=ref_model.link_names[5]):
        export_urdf(ref_model, tmp_path / "bad.urdf", p)


def test_twin_arm_export_keeps_its_visuals(tmp_path, ref_model):
    out = export_urdf(ref_model, tmp_path / "id.urdf", ref_model.inertial_parameters())
    a = ET.parse(out).getroot()
    b = ET.parse(ref_model.source).getroot()
    assert len(list(a.iter("visual"))) == len(list(b.iter("visual"))) > 0


def test_sidecar_round_trip_and_formula():
    jt = JointTerms(["a", "b"], [0.1, 0.2], [1.0, 2.0], [0.5, -0.5], [0.01, 0.02],
                    coulomb_shape="tanh", coulomb_velocity_scale=0.05, signal="joint torque")
    qd = np.array([[0.1, -0.02]])
    qdd = np.array([[1.0, 2.0]])
    expect = np.array([[0.01 * 1 + 0.1 * 0.1 + 1.0 * np.tanh(0.1 / 0.05) + 0.5,
                        0.02 * 2 + 0.2 * -0.02 + 2.0 * np.tanh(-0.02 / 0.05) - 0.5]])
    np.testing.assert_allclose(jt.torque(qd, qdd), expect, rtol=1e-14)


def test_sidecar_file_round_trip(tmp_path):
    jt = JointTerms(["a", "b"], [0.1, 0.2], [1.0, 2.0], None, None, signal="motor torque")
    f = write_sidecar(tmp_path / "j.yaml", jt)
    back = read_sidecar(f, ["b", "a"])
    np.testing.assert_array_equal(back.viscous, [0.2, 0.1])
    assert back.coulomb_shape == "sign" and np.all(back.armature == 0)
    with pytest.raises(ValueError, match="no entry for joint 'c'"):
        read_sidecar(f, ["c"])
