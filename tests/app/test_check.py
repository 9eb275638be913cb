"""`twinid check SCENARIO` (identify.app.check): what a run checks before any work, printed,
exit 0 / 2, nothing written; and `twinid report` on a sweep folder (summary.md / summary.html
rebuilt by the sweep's own renderer, byte for byte)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from conftest import ROOT, tiny_scenario
from identify.app.cli import main


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TWINID_CACHE", str(tmp_path_factory.getbasetemp() / "twinid_cache"))


def _snapshot(folder: Path) -> dict:
    """Every file and folder below `folder` with its size and modification time."""
    out = {}
    for dirpath, dirs, files in os.walk(folder):
        for n in dirs + files:
            p = Path(dirpath) / n
            st = p.stat()
            out[str(p.relative_to(folder))] = (st.st_size, st.st_mtime_ns)
    return out


def _check(tmp_path, capsys, scn: dict) -> tuple[int, str]:
    f = tmp_path / "scn.yaml"
    f.write_text(yaml.safe_dump(scn))
    before = _snapshot(tmp_path)
    code = main(["check", str(f)])
    out = capsys.readouterr().out
    assert _snapshot(tmp_path) == before            # nothing written, no run folder created
    assert not (tmp_path / "runs").exists()
    return code, out


def test_check_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    code, out = _check(tmp_path, capsys, tiny_scenario("chk", outputs={"dir": str(tmp_path / "runs")}))
    assert code == 0, out
    for s in ("load: ok: scenario 'chk', backend twin", "6 joints (joint1", "trajectories:",
              "excitation: 4 s x 1, 3 harmonics: to optimize (1 start(s), seed 0",
              "a run takes about", "result: ready"):
        assert s in out, (s, out)
    assert "hardware:" not in out


def test_check_reports_a_cached_trajectory_as_cached(tmp_path, capsys):
    scn = tiny_scenario("chk_cached")
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(scn))
    assert main(["--quiet", "trajectory", str(f), "--out", str(tmp_path / "traj")]) == 0
    capsys.readouterr()
    code, out = _check(tmp_path, capsys, scn)
    assert code == 0
    assert "excitation: 4 s x 1, 3 harmonics: cached (" in out
    assert "validation: 4 s x 1, 2 harmonics: cached (" in out


def test_check_refusals_exit_2_and_name_the_key(tmp_path, capsys):
    scn = tiny_scenario("chk_bad")
    del scn["arm"]["drives"]                        # the twin needs them
    code, out = _check(tmp_path, capsys, scn)
    assert code == 2 and "FAILED" in out and "arm.drives" in out
    scn = tiny_scenario("chk_long")                 # 17 h of excitation: over the time budget
    scn["trajectories"]["excitation"].update(period_s=600.0, periods=100)
    code, out = _check(tmp_path, capsys, scn)
    assert code == 2 and "REFUSED without --yes" in out
    scn = tiny_scenario("chk_typo", twin_={"x": 1})  # malformed: the load line says where
    code, out = _check(tmp_path, capsys, scn)
    assert code == 2 and "load: FAILED" in out and "twin_" in out


def test_check_hardware_plan_touches_no_bus(tmp_path, capsys):
    scn = tiny_scenario("chk_hw", backend="hardware",
                        hardware={"iface": "nonexistent0", "armed": False,
                                  "config": str(ROOT / "assets" / "cobot6_ethercat.yaml")})
    code, out = _check(tmp_path, capsys, scn)
    assert code == 0, out
    assert "interface nonexistent0" in out and "not armed: a run refuses" in out


def test_check_fit_reads_the_logs_and_names_the_models_they_allow(tmp_path, capsys):
    from identify import RobotModel
    from identify.logs.simulate import simulate, write_log
    model = RobotModel.from_urdf(ROOT / "assets" / "cobot6.urdf")
    log = write_log(simulate(model, duration_s=2.0, rate_hz=200.0, signals="tau_j"),
                    tmp_path / "logs", "npz")
    scn = tiny_scenario("chk_fit", fit={"excitation": {"file": str(log), "columns": {
                            "time": "t", "q": "q", "tau_j": "tau_j"}}})
    scn["identification"] = {"joint_model": "auto"}
    code, out = _check(tmp_path, capsys, scn)
    assert "excitation log" in out and "400 samples" in out and "signals q, tau_j" in out, out
    assert "joint models these signals allow: auto (= " in out and "requested auto" in out, out
    assert code == 0, out
    scn["identification"] = {"joint_model": "simplified"}   # needs motor currents: refused
    code, out = _check(tmp_path, capsys, scn)
    assert code == 2 and "simplified needs the motor torque" in out, out


def test_report_rebuilds_a_sweep_folder_byte_for_byte(tmp_path, capsys):
    scn = tiny_scenario("rep_sweep", sweep={"noise": {"torque": [0.0, 0.1]}, "seeds": 1})
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(scn))
    out = tmp_path / "sweep"
    assert main(["--quiet", "sweep", str(f), "--out", str(out), "--workers", "1"]) == 0
    want = {n: (out / n).read_bytes() for n in ("summary.md", "summary.html")}
    for n in want:
        (out / n).unlink()
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    printed = capsys.readouterr().out.split()
    assert printed == [str(out / "summary.md"), str(out / "summary.html")]
    for n, b in want.items():
        assert (out / n).read_bytes() == b, n
    (out / "summary.json").write_text("[1, 2]")
    assert main(["report", str(out)]) == 2
    assert "summary.json: not a sweep summary" in capsys.readouterr().err
