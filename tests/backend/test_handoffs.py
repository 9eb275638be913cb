"""The typed hand-offs of the backend contract: BackendArm (the arm a backend runs), Contact (an
external force it applies), and the run folder's layout every reader goes through."""
from __future__ import annotations

from pathlib import Path

import pytest

from identify.backend.arm import BackendArm
from identify.backend.contact import Contact
from identify.outputs import layout

from conftest import ROOT

URDF = ROOT / "assets" / "cobot6.urdf"


def test_backend_arm_from_a_mapping_is_typed_and_checked():
    arm = BackendArm.of({"urdf": str(URDF), "drives": None, "joints": ["joint2", "joint3"],
                         "qdd_max": [1, 2], "payload": {"mass_kg": 1.5, "com_m": [0, 0, 0.05]}})
    assert arm.urdf == URDF and isinstance(arm.urdf, Path)
    assert arm.joints == ("joint2", "joint3") and arm.qdd_max == (1.0, 2.0)
    assert arm.payload == {"mass_kg": 1.5, "com_m": [0, 0, 0.05]}
    assert BackendArm.of(arm) is arm
    assert BackendArm.of(None) == BackendArm()
    with pytest.raises(ValueError, match=r"unknown arm key\(s\) \['colour'\]"):
        BackendArm.of({"urdf": str(URDF), "colour": "red"})
    with pytest.raises(ValueError, match="must be a BackendArm or a mapping"):
        BackendArm.of(str(URDF))
    assert arm.with_(joints=None).joints is None and arm.joints == ("joint2", "joint3")


def test_scenario_arm_becomes_the_backend_arm(tmp_path):
    from identify.scenario import load_scenario
    scn = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    arm = scn.arm.backend_arm()
    assert arm.urdf.resolve() == URDF.resolve() and arm.drives is not None
    assert arm.joints is None


def test_contact_as_the_twins_setting():
    c = Contact(link="link3", time_s=2, duration_s=0.5, force_N=(0, 0, -20))
    assert c.end_s == pytest.approx(2.5)
    assert c.as_setting() == {"link": "link3", "time_s": 2.0, "duration_s": 0.5,
                              "force_N": [0.0, 0.0, -20.0]}
    p = Contact(link="link3", time_s=0, duration_s=1, force_N=(1, 0, 0), point_m=(0, 0.1, 0))
    assert p.as_setting()["point_m"] == [0.0, 0.1, 0.0]
    from twin.contacts import check_contacts
    check_contacts([c.as_setting(), p.as_setting()])      # the twin's own validator takes it


def test_layout_finds_an_export_and_held_recordings(tmp_path):
    assert layout.exported_model(tmp_path) is None
    (tmp_path / layout.URDF).write_text("<robot/>")
    ex = layout.exported_model(tmp_path)
    assert ex.urdf == tmp_path / "identified.urdf" and ex.sidecar is None and ex.parameters is None
    (tmp_path / layout.SIDECAR).write_text("joints: {}")
    (tmp_path / layout.PARAMETERS).write_text("{}")
    ex = layout.exported_model(tmp_path)
    assert ex.sidecar.name == "identified_joints.yaml" and ex.parameters.name == "parameters.yaml"
    assert layout.held_recording(tmp_path) == ("run", tmp_path / "recordings" / "excitation.npz")
    f = tmp_path / "log.npz"
    assert layout.held_recording(f) == ("recording", f)
    # --force replaces everything a command writes, the joint sidecar included
    assert {"identified_joints.yaml", "metrics.json", "bus_report.txt"} <= set(layout.OUTPUT_NAMES)


def test_recording_carries_noise_floor_and_backend_report_as_fields(tmp_path):
    """The twin's injected noise and a backend's report in words are fields of the contract (no
    side channels in meta), saved and read back; files that kept them in meta still load."""
    import json
    import numpy as np
    from identify.backend.recording import Recording
    t = np.arange(5) * 0.01
    rec = Recording(t=t, q=np.zeros((5, 2)), rate_hz=100.0, joint_names=["a", "b"],
                    injected_noise_rms={"tau_m": np.array([0.1, 0.2])}, backend_report="bus ok")
    rec.save(tmp_path / "r.npz")
    back = Recording.load(tmp_path / "r.npz")
    np.testing.assert_allclose(back.injected_noise_rms["tau_m"], [0.1, 0.2])
    assert back.backend_report == "bus ok" and "injected_noise_rms" not in back.meta
    # an older file: the same facts in meta
    with np.load(tmp_path / "r.npz") as z:
        data = {k: z[k] for k in z.files}
    header = json.loads(bytes(data["header"]).decode())
    del header["injected_noise_rms"], header["backend_report"]
    header["meta"] = {"injected_noise_rms": {"note": "per joint", "tau_m": [0.3, 0.4]},
                      "bus_report_text": "old report"}
    data["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(tmp_path / "old.npz", **data)
    old = Recording.load(tmp_path / "old.npz")
    np.testing.assert_allclose(old.injected_noise_rms["tau_m"], [0.3, 0.4])
    assert old.backend_report == "old report" and old.meta == {}
