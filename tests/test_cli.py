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

from identify.cli import main

ROOT = Path(__file__).resolve().parents[1]

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
    # stage-2 truth of the twin: reflected rotor inertia eta^2 J_m and xi_gf + xi_sf per joint
    s2 = m["stage2"]
    if "truth" in s2:
        drives = yaml.safe_load((ROOT / "assets" / "cobot6_drives.yaml").read_text())["joints"]
        jm = [row[s2["names"].index("J_m")] for row in s2["truth"]]
        np.testing.assert_allclose(jm, [d["gear_ratio"] ** 2 * d["J_m_kgm2"] for d in drives])
        if "xi_opp" in s2["names"]:
            xi = [row[s2["names"].index("xi_opp")] for row in s2["truth"]]
            np.testing.assert_allclose(xi, [d["xi_gf"] + d["xi_sf"] for d in drives])
    # the resolved scenario loads again and names the same experiment
    from identify.scenario import load_scenario
    assert load_scenario(out / "scenario.yaml").name == "quickstart"
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "<img" in html and "src='plots/" not in html
    md = (out / "report.md").read_text()
    assert "1.6859" in md and "0.6815" in md and "1.7045" in md and "1.5762" in md


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
    from identify.base_params import compute_base_parameters
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
    from identify.fourier import FourierTrajectory
    tr = FourierTrajectory.load(out / "excitation.yaml")
    assert tr.n_joints == 6 and tr.period == pytest.approx(4.0)
    info = yaml.safe_load((out / "trajectories.yaml").read_text())
    assert info["trajectories"]["validation"]["harmonics"] == 2


def test_safety_refusal_exit_4(tmp_path, capsys):
    """A trajectory beyond the joint limits is refused by the twin before anything runs."""
    from identify.fourier import FourierTrajectory
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
    import identify.pipeline as pl

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
    from identify.urdf_export import export_urdf, full_from_base
    ref = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf")
    p = ref.inertial_parameters()
    path = export_urdf(ref, tmp_path / "a.urdf", p, viscous=np.full(6, 0.3), coulomb=np.full(6, 0.5))
    back = RobotModel.from_urdf(path)
    np.testing.assert_allclose(back.inertial_parameters(), p, rtol=1e-9, atol=1e-12)
    from identify.urdf import load_chain
    ch = load_chain(path)
    np.testing.assert_allclose(ch.damping, 0.3)
    np.testing.assert_allclose(ch.friction, 0.5)
    bad = p.copy()
    bad[30] = -1.0                       # link 4 mass
    with pytest.raises(ValueError, match="link4"):
        export_urdf(ref, tmp_path / "b.urdf", bad)
    # full_from_base reproduces the base parameters exactly and stays at the prior otherwise
    from identify.base_params import compute_base_parameters
    bp = compute_base_parameters(ref, seed=0)
    target = bp.E @ (p * 1.1)
    full = full_from_base(bp.E, target, p)
    np.testing.assert_allclose(bp.E @ full, target, rtol=1e-9, atol=1e-12)
    assert np.linalg.norm(full - p) <= np.linalg.norm(p * 1.1 - p) + 1e-12
