"""The `twinid` command end to end: quickstart run folder, report rebuild, trajectory command and
the documented exit codes (0, 2, 3, 4, 130)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from identify.app.cli import main

ROOT = Path(__file__).resolve().parents[2]

# fast settings on top of the shipped quickstart: 4 s trajectories, coarse grid, few iterations
FAST_TRAJ = {
    "excitation": {"harmonics": 3, "period_s": 4.0, "grid": 40, "starts": 1, "max_iter": 60, "seed": 0},
    "validation": {"harmonics": 2, "period_s": 4.0, "grid": 40, "starts": 1, "max_iter": 60, "seed": 1},
}


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TWINID_CACHE", str(tmp_path_factory.getbasetemp() / "twinid_cache"))


def fast_quickstart(tmp_path, **changes) -> Path:
    """scenarios/quickstart.yaml with fast trajectories, written next to the assets' absolute paths."""
    d = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    for k in ("urdf", "drives", "description"):
        d["arm"][k] = str((ROOT / "scenarios" / d["arm"][k]).resolve())
    d["trajectories"] = json.loads(json.dumps(FAST_TRAJ))
    d["twin"]["settle_s"] = 0.1
    for k, v in changes.items():
        d[k] = v
    f = tmp_path / "quick.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return f


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("quick")
    os.environ["TWINID_CACHE"] = str(tmp_path_factory.getbasetemp() / "twinid_cache")
    f = fast_quickstart(tmp)
    # the matched reducer law (opposing): these tests check the stage-2 truth comparison, which
    # only a law with constant coefficients has (the quickstart runs on speed_efficiency)
    d = yaml.safe_load(f.read_text())
    d["twin"]["reducer_friction_law"] = "opposing"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    out = tmp / "run"
    code = main(["--quiet", "run", str(f), "--out", str(out)])
    assert code == 0
    return out


def test_quickstart_run_folder(quick_run):
    out = quick_run
    for name in ("scenario.yaml", "metrics.json", "parameters.yaml", "identified.urdf",
                 "report.md", "report.html", "recordings/excitation.npz",
                 "recordings/validation.npz", "trajectories/excitation.yaml"):
        assert (out / name).is_file(), name
    m = json.loads((out / "metrics.json").read_text())
    for traj in ("excitation", "validation"):
        for model in ("simplified", "improved"):
            r = m["rms"][traj][model]
            assert len(r["per_joint"]) == 6 and r["overall"] > 0
            # overall RMS is the RMS of the per-joint RMS values (equal sample counts)
            assert r["overall"] == pytest.approx(math.sqrt(np.mean(np.square(r["per_joint"]))))
        assert m["cond_W"][traj] > 1
        s, i = m["rms"][traj]["simplified"]["overall"], m["rms"][traj]["improved"]["overall"]
        assert m["improvement_percent"][traj] == pytest.approx(100 * (i - s) / s)
    assert m["parameter_errors"]["improved_stage1"]["count"] == len(
        yaml.safe_load((out / "parameters.yaml").read_text())["base_parameters"])
    assert {"processing", "identification", "total"} <= set(m["timings_s"])
    p = yaml.safe_load((out / "parameters.yaml").read_text())
    st1 = p["models"]["improved"]["stage1"]
    assert len(st1["names"]) == len(st1["value"]) == len(st1["std"]) == len(st1["rel_std_percent"])
    for v, s, r in zip(st1["value"], st1["std"], st1["rel_std_percent"]):
        if r is not None:
            assert r == pytest.approx(100 * s / abs(v))
    # stage-2 truth of the twin (required: the twin's reducer loss opposes motion, so the default
    # 'auto' picks a variant that has one): reflected rotor inertia eta^2 J_m and xi_gf + xi_sf
    s2 = m["stage2"]
    assert "truth" in s2, sorted(s2)
    drives = yaml.safe_load((ROOT / "assets" / "cobot6_drives.yaml").read_text())["joints"]
    jm = [row[s2["names"].index("J_m")] for row in s2["truth"]]
    np.testing.assert_allclose(jm, [d["gear_ratio"] ** 2 * d["J_m_kgm2"] for d in drives])
    assert "xi_opp" in s2["names"]
    xi = [row[s2["names"].index("xi_opp")] for row in s2["truth"]]
    np.testing.assert_allclose(xi, [d["xi_gf"] + d["xi_sf"] for d in drives])
    assert m["truth"]["applicable"] == {"stage1": True, "stage2": True}
    # the improved model predicts the motor torque better than the simplified one (measured:
    # -78 % excitation, -95 % validation)
    for traj in ("excitation", "validation"):
        assert m["rms"][traj]["improved"]["overall"] < 0.7 * m["rms"][traj]["simplified"]["overall"]
    # stage-1 base parameters against an independently built truth: E @ (URDF inertia, the drive
    # file's link viscous and Coulomb friction); measured median |error| 8.9 %, 47/48 within 3 sigma
    from identify import RobotModel
    from identify.model.base_params import compute_base_parameters
    ref = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf")
    bp = compute_base_parameters(ref, terms=("viscous", "coulomb"), seed=0)
    assert list(bp.names) == list(st1["names"])
    full = np.concatenate([ref.inertial_parameters(), [d["link_viscous_Nms_rad"] for d in drives],
                           [d["link_coulomb_Nm"] for d in drives]])
    truth = bp.E @ full
    np.testing.assert_allclose(st1["truth"], truth, rtol=1e-9, atol=1e-12)
    val, std = np.array(st1["value"]), np.array(st1["std"])
    big = np.abs(truth) > 1e-3 * np.max(np.abs(truth))
    rel = 100 * np.abs(val - truth)[big] / np.abs(truth[big])
    assert np.median(rel) < 20.0, np.median(rel)
    within = int(np.sum(np.abs(val - truth) <= 3 * std))
    pe = m["parameter_errors"]["improved_stage1"]
    assert pe["within_3sigma"] == within
    assert within >= 0.85 * len(truth), (within, len(truth))
    # poorly excited parameters (std > |value|) are flagged per parameter and counted
    flags = np.array(st1["poorly_excited"])
    np.testing.assert_array_equal(flags, std > np.abs(val))
    assert st1["poorly_excited_count"] == int(flags.sum()) == m["poorly_excited_count"]["improved_stage1"]
    s2p = p["models"]["improved"]["stage2"]
    _check_stage2_block(s2p, m)
    sp = p["models"]["simplified"]["rigid_body"]
    np.testing.assert_array_equal(sp["poorly_excited"], np.array(sp["std"]) > np.abs(np.array(sp["value"])))
    # twin runs: the consistent fit's prior is NOT the twin's own truth
    assert m["prior"]["kind"] == "perturbed" and p["prior"]["kind"] == "perturbed"
    # the resolved scenario loads again and names the same experiment
    from identify.scenario.load import load_scenario
    assert load_scenario(out / "scenario.yaml").name == "quickstart"
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "<img" in html and "src='plots/" not in html
    md = (out / "report.md").read_text()
    assert "1.6859" in md and "0.6815" in md and "1.7045" in md and "1.5762" in md
    assert "Prior used: **perturbed**" in md
    assert f"Poorly excited (std > |value|): **{st1['poorly_excited_count']}** of {len(truth)}" in md


def _check_stage2_block(s2p: dict, m: dict) -> None:
    """parameters.yaml's stage-2 block carries joint_models' own flags and diagnostics, and the
    stage-2 parameter errors skip (and list) the coefficients that have no std."""
    n, k = len(s2p["joints"]), len(s2p["names"])
    std = np.array(s2p["std"], float)                      # JSON/YAML null -> nan
    val = np.array(s2p["params"], float)
    pe = np.array(s2p["poorly_excited"], bool)
    nd = np.array(s2p["noise_dominated"], bool)
    assert pe.shape == nd.shape == std.shape == (n, k)
    # joint_models' flag: std > |value|, and a coefficient WITHOUT a std (nan: fixed xi or a
    # noise-dominated column) is poorly excited -- never silently "well excited"
    np.testing.assert_array_equal(pe, ~(std <= np.abs(val)))
    assert np.all(pe[np.isnan(std)]) and np.all(np.isnan(std[nd]))
    assert s2p["poorly_excited_count"] == int(pe.sum())
    assert s2p["poorly_excited_names"] == [f"{s2p['joints'][j]}.{s2p['names'][c]}"
                                           for j, c in zip(*np.nonzero(pe))]
    assert s2p["noise_dominated_names"] == [f"{s2p['joints'][j]}.{s2p['names'][c]}"
                                            for j, c in zip(*np.nonzero(nd))]
    assert np.array(s2p["eiv_bias"], float).shape == (n, k)
    tau = np.array(s2p["tau_int"], float)
    assert tau.shape == (n, k) and np.all(tau[np.isfinite(tau)] > 0)
    # the fixed xi of a joint whose xi is not identified has no tau_int
    for j, ok in enumerate(s2p["xi_identified"]):
        assert ok or np.isnan(tau[j, 0])
    assert m["stage2"]["noise_dominated"] == s2p["noise_dominated"]
    if "truth" in s2p:
        e2 = m["parameter_errors"]["improved_stage2"]
        skipped = {d["name"] for d in e2["skipped"]}
        assert e2["count"] + e2["skipped_count"] == n * k
        no_std = {f"{s2p['joints'][j]}.{s2p['names'][c]}" for j, c in zip(*np.nonzero(np.isnan(std)))}
        # every coefficient without a std is skipped (not a 'miss'), none with a std is
        assert no_std <= skipped
        assert len(e2["names"]) == e2["count"] and not skipped & set(e2["names"])
        assert 0 <= e2["within_3sigma"] <= e2["count"]


def test_exported_urdf_loads(quick_run):
    import pybullet as pb
    from identify import RobotModel
    urdf = quick_run / "identified.urdf"
    m = RobotModel.from_urdf(urdf)
    ref = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf")
    assert m.joint_names == ref.joint_names
    np.testing.assert_allclose(m.placements, ref.placements, atol=1e-9)
    # the URDF's inertials are the consistent fit's full parameters
    p = yaml.safe_load((quick_run / "parameters.yaml").read_text())
    full = np.array(p["models"]["consistent"]["full"]["value"], float)
    np.testing.assert_allclose(m.inertial_parameters(), full[:60], rtol=1e-7, atol=1e-9)
    # ... and the identified base parameters are reproduced by them
    from identify.model.base_params import compute_base_parameters
    bp = compute_base_parameters(ref, terms=("viscous", "coulomb"), seed=0)
    assert bp.names == tuple(p["base_parameters"]) or list(bp.names) == p["base_parameters"]
    cid = pb.connect(pb.DIRECT)
    try:
        body = pb.loadURDF(str(urdf), useFixedBase=True, flags=pb.URDF_USE_INERTIA_FROM_FILE,
                           physicsClientId=cid)
        assert pb.getNumJoints(body, physicsClientId=cid) == 6
        masses = [pb.getDynamicsInfo(body, j, physicsClientId=cid)[0] for j in range(6)]
        np.testing.assert_allclose(masses, full[0:60:10], rtol=1e-7)
        damping = [pb.getJointInfo(body, j, physicsClientId=cid)[6] for j in range(6)]
        assert np.all(np.asarray(damping) >= 0)
    finally:
        pb.disconnect(cid)


def test_report_rebuild(quick_run, capsys):
    (quick_run / "report.html").unlink()
    (quick_run / "report.md").unlink()
    assert main(["report", str(quick_run)]) == 0
    assert (quick_run / "report.html").is_file() and (quick_run / "report.md").is_file()
    assert "report.html" in capsys.readouterr().out


def test_report_of_a_non_run_folder(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no metrics.json" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing")]) == 2


def test_trajectory_command(tmp_path):
    f = fast_quickstart(tmp_path)
    out = tmp_path / "traj"
    assert main(["--quiet", "trajectory", str(f), "--out", str(out)]) == 0
    from identify.excitation.fourier import FourierTrajectory
    tr = FourierTrajectory.load(out / "excitation.yaml")
    assert tr.n_joints == 6 and tr.period == pytest.approx(4.0)
    info = yaml.safe_load((out / "trajectories.yaml").read_text())
    assert info["trajectories"]["validation"]["harmonics"] == 2


def test_safety_refusal_exit_4(tmp_path, capsys):
    """A trajectory beyond the joint limits is refused by the twin before anything runs."""
    from identify.excitation.fourier import FourierTrajectory
    a = np.zeros((6, 2))
    b = np.zeros((6, 2))
    a[2] = [6.0, -6.0]       # velocity amplitude far beyond joint 3's limit
    tr = FourierTrajectory(q0=np.zeros(6), a=a, b=b, wf=2 * math.pi / 4.0)
    tr.save(tmp_path / "wild.yaml")
    trajs = json.loads(json.dumps(FAST_TRAJ))
    trajs["excitation"] = {"source": "file", "file": str(tmp_path / "wild.yaml")}
    f = fast_quickstart(tmp_path, trajectories=trajs)
    code = main(["--quiet", "run", str(f), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 4, err
    assert err.startswith("twinid: refused:") and "joint3" in err and len(err.splitlines()) == 1


def test_hardware_not_armed_exit_4(tmp_path, capsys):
    d = yaml.safe_load((ROOT / "scenarios" / "hardware.yaml").read_text())
    for k in ("urdf", "drives", "description"):
        d["arm"][k] = str((ROOT / "scenarios" / d["arm"][k]).resolve())
    d["hardware"]["config"] = str((ROOT / "scenarios" / d["hardware"]["config"]).resolve())
    d["hardware"]["iface"] = "twinid-test-none0"
    d["trajectories"] = json.loads(json.dumps(FAST_TRAJ))
    f = tmp_path / "hw.yaml"
    f.write_text(yaml.safe_dump(d))
    code = main(["--quiet", "run", str(f), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 4, err
    assert "not armed" in err and "Traceback" not in err


def test_infeasible_request_exit_2(tmp_path, capsys):
    trajs = json.loads(json.dumps(FAST_TRAJ))
    trajs["excitation"]["start_deg"] = [0, -90, 200, -90, 0, 0]     # joint 3 limit is +-170 deg
    f = fast_quickstart(tmp_path, trajectories=trajs)
    assert main(["--quiet", "run", str(f)]) == 2
    err = capsys.readouterr().err
    assert "joint3" in err or "start" in err


@pytest.mark.parametrize("exc,code", [(RuntimeError("solver blew up"), 3),
                                      (KeyboardInterrupt(), 130)])
def test_runtime_and_interrupt_exit_codes(tmp_path, monkeypatch, capsys, exc, code):
    import identify.app.pipeline as pl

    def boom(*a, **k):
        raise exc
    monkeypatch.setattr(pl, "run_scenario", boom)
    f = fast_quickstart(tmp_path)
    assert main(["--quiet", "run", str(f)]) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_usage_errors_and_help():
    assert main(["--help"]) == 0
    assert main(["frobnicate"]) == 2
    assert main(["run"]) == 2
    r = subprocess.run([sys.executable, "-m", "identify", "--help"], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0 and "exit codes" in r.stdout


def test_urdf_export_round_trip_and_refusal(tmp_path):
    """Export the reference arm's own parameters: reading the file back gives them again
    (independent reader: RobotModel.from_urdf); a non-physical link is refused by name."""
    from identify import RobotModel
    from identify.model.urdf_export import export_urdf, full_from_base
    ref = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf")
    p = ref.inertial_parameters()
    path = export_urdf(ref, tmp_path / "a.urdf", p, viscous=np.full(6, 0.3), coulomb=np.full(6, 0.5))
    back = RobotModel.from_urdf(path)
    np.testing.assert_allclose(back.inertial_parameters(), p, rtol=1e-9, atol=1e-12)
    from identify.model.urdf import load_chain
    ch = load_chain(path)
    np.testing.assert_allclose(ch.damping, 0.3)
    np.testing.assert_allclose(ch.friction, 0.5)
    bad = p.copy()
    bad[30] = -1.0                       # link 4 mass
    with pytest.raises(ValueError, match="link4"):
        export_urdf(ref, tmp_path / "b.urdf", bad)
    # full_from_base reproduces the base parameters exactly and stays at the prior otherwise
    from identify.model.base_params import compute_base_parameters
    bp = compute_base_parameters(ref, seed=0)
    target = bp.E @ (p * 1.1)
    full = full_from_base(bp.E, target, p)
    np.testing.assert_allclose(bp.E @ full, target, rtol=1e-9, atol=1e-12)
    assert np.linalg.norm(full - p) <= np.linalg.norm(p * 1.1 - p) + 1e-12


# ------------------------------------------------------------------------------------------------
# ground truth of the twin, prior, preflight (no simulation needed)
# ------------------------------------------------------------------------------------------------

def _scn(**arm_extra):
    from identify.scenario.load import scenario_from_dict
    arm = {"urdf": str(ROOT / "assets" / "cobot6.urdf"),
           "drives": str(ROOT / "assets" / "cobot6_drives.yaml"), **arm_extra}
    return scenario_from_dict({"arm": arm, "trajectories": json.loads(json.dumps(FAST_TRAJ))})


def _twin_defaults(**kw) -> dict:
    from twin.config import TwinSettings
    return TwinSettings.from_dict(kw).to_dict()


def test_truth_follows_the_twin_settings_and_overrides():
    from identify import RobotModel
    from identify.app.truth import true_link_parameters
    drives = yaml.safe_load((ROOT / "assets" / "cobot6_drives.yaml").read_text())["joints"]
    model = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf")
    scn = _scn()
    t = true_link_parameters(scn, model, _twin_defaults(
        drive_overrides={"joint2": {"link_coulomb_Nm": 0.7, "xi_gf": 0.3}}))
    assert t.applicable == {"stage1": True, "stage2": True}
    assert t.coulomb[1] == 0.7 and t.coulomb[0] == drives[0]["link_coulomb_Nm"]
    assert t.stage2["xi_opp"][1] == pytest.approx(0.3 + drives[1]["xi_sf"])
    for opt, frag in (({"stribeck": True}, "stribeck"), ({"coulomb_asymmetry": 0.2}, "asymmetry"),
                      ({"friction_drift": -0.2}, "drift")):
        t = true_link_parameters(scn, model, _twin_defaults(**opt))
        assert t.applicable == {"stage1": False, "stage2": False}, opt
        assert frag in t.not_applicable["stage1"][0] and frag in t.not_applicable["stage2"][0]
    # link friction off: stage 1 stays a constant law (friction 0) even with Stribeck
    t = true_link_parameters(scn, model, _twin_defaults(stribeck=True, link_friction=False))
    assert t.applicable["stage1"] and not t.applicable["stage2"]
    np.testing.assert_array_equal(t.coulomb, 0.0)
    # rigid joints: no drive at all -> no link friction, no stage-2 truth
    t = true_link_parameters(scn, model, _twin_defaults(drive_model=False))
    assert t.applicable == {"stage1": True, "stage2": False}
    assert "drive_model" in t.not_applicable["stage2"][0]
    np.testing.assert_array_equal(t.coulomb, 0.0)
    np.testing.assert_array_equal(t.viscous, 0.0)


def test_truth_payload_moved_into_the_last_model_link(tmp_path):
    """Joint subset without joint 6: the flange payload is carried by link 5. Independent truth:
    a URDF with the payload as a link fixed to joint 6's child (as the twin builds it), read with
    the same joint subset -- the URDF reader merges it into link 5 itself."""
    import xml.etree.ElementTree as ET
    from identify import RobotModel
    from identify.app.truth import true_link_parameters
    pl = {"mass_kg": 1.5, "com_m": [0.01, -0.02, 0.06], "inertia_kgm2": [0.004, 0.005, 0.003,
                                                                         0.0004, -0.0002, 0.0001]}
    subset = [f"joint{i}" for i in range(1, 6)]
    scn = _scn(payload=pl, joints=subset)
    model = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf", subset)
    t = true_link_parameters(scn, model, _twin_defaults())
    tree = ET.parse(ROOT / "assets" / "cobot6.urdf")
    root = tree.getroot()
    j6 = [j for j in root.findall("joint") if j.get("name") == "joint6"][0]
    flange = j6.find("child").get("link")
    Ixx, Iyy, Izz, Ixy, Ixz, Iyz = pl["inertia_kgm2"]
    root.append(ET.fromstring(
        f"<link name='payload'><inertial><origin xyz='{' '.join(map(str, pl['com_m']))}'/>"
        f"<mass value='{pl['mass_kg']}'/><inertia ixx='{Ixx}' iyy='{Iyy}' izz='{Izz}' ixy='{Ixy}' "
        f"ixz='{Ixz}' iyz='{Iyz}'/></inertial></link>"))
    root.append(ET.fromstring(f"<joint name='pf' type='fixed'><parent link='{flange}'/>"
                              f"<child link='payload'/></joint>"))
    tree.write(tmp_path / "with_payload.urdf")
    expected = RobotModel.from_urdf(tmp_path / "with_payload.urdf", subset).inertial_parameters()
    np.testing.assert_allclose(t.inertial, expected, rtol=1e-10, atol=1e-12)
    # ... which differs from adding the flange-frame vector to link 5 untransformed
    from identify.model.spatial import params_from_inertial
    I_c = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    naive = model.inertial_parameters()
    naive[-10:] += params_from_inertial(pl["mass_kg"], np.array(pl["com_m"]), I_c)
    assert np.max(np.abs(naive - expected)) > 1e-3
    assert scn.arm.joints == tuple(subset)


def test_perturbed_prior_is_physical_seeded_and_not_the_truth():
    from identify import RobotModel
    from identify.app.prior import perturbed_inertials, prior_parameters
    from identify.model.spatial import pseudo_inertia
    model = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf")
    p = model.inertial_parameters()
    a, b = perturbed_inertials(p, 0.2, 7), perturbed_inertials(p, 0.2, 7)
    np.testing.assert_array_equal(a, b)
    assert not np.allclose(a, perturbed_inertials(p, 0.2, 8))
    for k in range(model.n):
        assert np.linalg.eigvalsh(pseudo_inertia(a[10 * k:10 * k + 10])).min() > 0
        r = a[10 * k] / p[10 * k]
        assert 0.8 <= r <= 1.2 and r != 1.0
    from identify.model.spatial import inertial_from_params
    shifts, shape = [], []
    for k in range(model.n):                 # CoM moved (mm to cm), inertia shape changed
        m0, c0, I0 = inertial_from_params(p[10 * k:10 * k + 10])
        m1, c1, I1 = inertial_from_params(a[10 * k:10 * k + 10])
        shifts.append(np.abs(c1 - c0).max())
        l0, l1 = np.linalg.eigvalsh(I0), np.linalg.eigvalsh(I1)
        shape.append(np.ptp(l1 / l0))        # unequal scaling of the principal moments
    assert 1e-3 < max(shifts) < 0.1 and min(shifts) > 1e-4, shifts
    assert max(shape) > 0.05, shape
    np.testing.assert_array_equal(perturbed_inertials(p, 0.0, 1), p)

    class Rec:
        meta = {"backend": "twin"}
    scn = _scn()
    prior = prior_parameters(scn, model, {"excitation": Rec()})
    assert prior.kind == "perturbed" and not np.allclose(prior.inertial, p)
    prior = prior_parameters(scn, model, {})
    assert prior.kind == "urdf" and np.array_equal(prior.inertial, p)
    import dataclasses
    scn_none = dataclasses.replace(scn, identification=dataclasses.replace(
        scn.identification, prior="none"))
    assert prior_parameters(scn_none, model, {"excitation": Rec()}).inertial is None


def test_preflight_refusal_before_any_trajectory_is_optimized(tmp_path, monkeypatch, capsys):
    """identify.backend.interface.preflight imports the backend module by name and calls its preflight;
    the pipeline calls it before optimizing trajectories (refusal -> exit 4)."""
    import types
    import identify.backend.interface as ib
    import identify.app.pipeline as pl

    class SafetyRefused(ValueError):
        pass
    calls = []

    def preflight(arm, settings):
        calls.append((arm, settings))
        raise SafetyRefused("not armed and not a dry run")
    mod = types.ModuleType("twinid_fake_backend")
    mod.preflight = preflight
    mod.make_backend = lambda arm, settings: pytest.fail("backend built after a refusal")
    monkeypatch.setitem(sys.modules, "twinid_fake_backend", mod)
    monkeypatch.setitem(ib.BACKENDS, "twin", "twinid_fake_backend:make_backend")
    monkeypatch.setattr(pl, "trajectories", lambda *a, **k: pytest.fail("optimized before preflight"))
    f = fast_quickstart(tmp_path)
    assert main(["--quiet", "run", str(f), "--out", str(tmp_path / "o")]) == 4
    err = capsys.readouterr().err
    assert "not armed" in err and "before any trajectory" in err and len(calls) == 1
    assert calls[0][0].urdf.name == "cobot6.urdf" and calls[0][1]["sample_rate_hz"] == 100
    # a backend without preflight: nothing happens
    del mod.preflight
    assert ib.preflight("twin", {}, {}) is False


def test_joint_subset_run_end_to_end(tmp_path):
    """arm.joints = [joint2, joint3] on the twin: the other joints are held at 0 rad, the
    recordings have the two columns, and stage 1 finds the locked arm's base parameters
    (independent truth: the URDF read with the same joint subset + the drive file's friction)."""
    trajs = json.loads(json.dumps(FAST_TRAJ))
    f = fast_quickstart(tmp_path, trajectories=trajs)
    d = yaml.safe_load(f.read_text())
    d["arm"]["joints"] = ["joint3", "joint2"]
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    out = tmp_path / "run"
    assert main(["--quiet", "run", str(f), "--out", str(out)]) == 0
    from identify.backend.recording import Recording
    for label in ("excitation", "validation"):
        rec = Recording.load(out / "recordings" / f"{label}.npz")
        assert rec.joint_names == ["joint2", "joint3"] and rec.q.shape[1] == 2
        assert rec.truth["tau_r"].shape == rec.q.shape
        assert max(rec.meta["held_joints"]["max_abs_q_rad"]) < math.radians(0.2)
    m = json.loads((out / "metrics.json").read_text())
    p = yaml.safe_load((out / "parameters.yaml").read_text())
    assert m["joint_names"] == ["joint2", "joint3"]
    from identify import RobotModel
    from identify.model.base_params import compute_base_parameters
    sub = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf", ["joint2", "joint3"])
    bp = compute_base_parameters(sub, terms=("viscous", "coulomb"), seed=0)
    drv = {j["name"]: j for j in yaml.safe_load((ROOT / "assets" / "cobot6_drives.yaml").read_text())["joints"]}
    full = np.concatenate([sub.inertial_parameters(),
                           [drv[j]["link_viscous_Nms_rad"] for j in sub.joint_names],
                           [drv[j]["link_coulomb_Nm"] for j in sub.joint_names]])
    st1 = p["models"]["improved"]["stage1"]
    assert list(bp.names) == st1["names"]
    truth = bp.E @ full
    np.testing.assert_allclose(st1["truth"], truth, rtol=1e-9, atol=1e-12)
    val, std = np.array(st1["value"]), np.array(st1["std"])
    rigid = np.array([not nm.startswith(("fv", "fc")) for nm in st1["names"]])
    # measured: the gravity / inertia combinations within 0.4 %, my1 (small) 11 %, z <= 0.8
    good = rigid & (std < 0.05 * np.abs(val))
    assert good.sum() >= 4
    np.testing.assert_allclose(val[good], truth[good], rtol=0.03)
    assert np.all(np.abs(val - truth)[rigid] <= 4 * std[rigid])
    _check_stage2_block(p["models"]["improved"]["stage2"], m)
    md = (out / "report.md").read_text()
    assert "| model | joint2 | joint3 | overall |" in md


def test_reused_out_is_refused_then_forced_without_old_plots(quick_run, tmp_path, capsys):
    """Issue 13: a second run on a finished --out is refused before any work (exit 2); with
    --force and plots: false, the new report embeds none of the first run's plots."""
    import shutil
    out = tmp_path / "reuse"
    shutil.copytree(quick_run, out)
    assert list((out / "plots").glob("*.png"))
    f = fast_quickstart(tmp_path, outputs={"plots": False})
    assert main(["--quiet", "run", str(f), "--out", str(out)]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["--quiet", "run", str(f), "--out", str(out), "--force"]) == 0
    html = (out / "report.html").read_text()
    assert "<img" not in html and not (out / "plots").exists()
    assert json.loads((out / "metrics.json").read_text())["files"]["plots"] == []
    assert not (out / ".twinid.lock").exists()
    assert (out / "report.html").stat().st_size < 1_000_000


def test_quickstart_report_is_small(quick_run):
    """Issue 13: plots embedded in report.html, which stays below 1 MB."""
    html = (quick_run / "report.html").read_text()
    m = json.loads((quick_run / "metrics.json").read_text())
    assert m["files"]["plots"] and html.count("<img") == len(m["files"]["plots"])
    assert (quick_run / "report.html").stat().st_size < 1_000_000


def test_trajectory_folder_is_reportable(tmp_path, capsys):
    f = fast_quickstart(tmp_path)
    out = tmp_path / "traj"
    assert main(["--quiet", "trajectory", str(f), "--out", str(out)]) == 0
    assert yaml.safe_load((out / "trajectories.yaml").read_text())["kind"] == "trajectories"
    html = (out / "report.html").read_text()
    assert "twinid trajectory" in html and html.count("<img") == 2
    (out / "report.html").unlink()
    assert main(["report", str(out)]) == 0
    assert (out / "report.html").is_file()


def test_stop_signal_exit_code_is_128_plus_signal():
    """A hardware run ended by SIGTERM / SIGHUP (robot.runfiles.StopSignal, after the stop
    sequence) exits 143 / 129 like a process killed by that signal, not 3 (runtime failure)."""
    import signal as _signal
    from identify.app.cli import classify
    from robot.runfiles import StopSignal
    assert classify(StopSignal(_signal.SIGTERM)) == 143
    assert classify(StopSignal(_signal.SIGHUP)) == 129
    assert classify(KeyboardInterrupt()) == 130
    assert classify(RuntimeError("x")) == 3


def test_summary_names_the_signal_of_each_figure():
    """The console's closing lines never put an RMS of the joint torque beside motor-torque
    figures without saying so: each figure names the signal it is measured on."""
    from identify.outputs.render import console_summary as summary
    metrics = {"signal": "motor torque η·β·i",
               "rms": {"validation": {"simplified": {"overall": 4.06}, "improved": {"overall": 0.40}}},
               "improvement_percent": {"validation": -90.2},
               "export": {"signal": "joint torque", "rms": {"validation": {"overall": 0.15}}}}
    line = summary(metrics, "runs/x").splitlines()[1]
    assert "RMS [N*m] of motor torque η·β·i simplified 4.0600, improved 0.4000" in line
    assert line.endswith("exported model 0.1500 of joint torque")
