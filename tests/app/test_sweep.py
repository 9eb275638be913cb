"""Noise sweeps: grid construction, Dask (real LocalCluster) == local processes, and resuming a
sweep killed mid-way without redoing finished runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from identify.scenario.load import scenario_from_dict
from identify.app.sweep import NOISE_SETTINGS, grid, run_sweep
from conftest import tiny_scenario

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"


def tiny(noise, seeds, combine=("separate",)) -> dict:
    return tiny_scenario("tiny_sweep", sweep={"noise": noise, "seeds": seeds, "combine": list(combine)})


@pytest.fixture(autouse=True)
def _cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("TWINID_CACHE", str(tmp_path_factory.getbasetemp() / "twinid_cache"))


def _numbers(folder: Path) -> dict:
    out = {}
    for p in sorted((folder / "runs").glob("*.json")):
        d = json.loads(p.read_text())
        for k in ("time_s", "host", "pid"):
            d.pop(k)
        out[p.stem] = d
    return out


def test_grid_separate_together_dedup():
    scn = scenario_from_dict(tiny({"position": [0.0, 1e-4], "torque": [0.0, 0.1],
                                   "current": [0.0, 0.01]}, seeds=3,
                                  combine=("separate", "together")))
    tasks, points = grid(scn)
    # separate: 3 channels x 2 levels, together: 2 levels -> 8 points of 3 seeds each
    assert len(points) == 8 and all(len(p["run_ids"]) == 3 for p in points)
    # the all-zero point appears 4 times (each channel's level 0 and together level 0) but runs once
    assert len(tasks) == (8 - 3) * 3
    t = next(t for t in tasks if dict(t.levels)["torque"] == 0.1)
    s = t.settings({"sample_rate_hz": 100})
    assert s[NOISE_SETTINGS["torque"]] == 0.1 and s[NOISE_SETTINGS["position"]] == 0.0
    assert s["seed"] == t.seed and s["sample_rate_hz"] == 100
    together = [p for p in points if p["combine"] == "together" and p["level_index"] == 1][0]
    assert together["levels"] == {"position": 1e-4, "torque": 0.1, "current": 0.01}


def test_dask_local_cluster_equals_local_processes(tmp_path):
    distributed = pytest.importorskip("distributed")
    scn = scenario_from_dict(tiny({"torque": [0.2]}, seeds=2))
    local = run_sweep(scn, out=tmp_path / "local", workers=2)
    assert len(local.ran) == 2 and not local.skipped
    # a real cluster: scheduler in this process, one worker in its own (fresh) process, as on
    # a remote machine
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40) as cluster:
        dask = run_sweep(scn, out=tmp_path / "dask", dask_address=cluster.scheduler_address)
    assert sorted(dask.ran) == sorted(local.ran)
    a, b = _numbers(tmp_path / "local"), _numbers(tmp_path / "dask")
    assert a == b
    # different seeds give different noise, hence different estimates
    r0, r1 = a.values()
    assert r0["parameter_errors"]["rel_error_percent"] != r1["parameter_errors"]["rel_error_percent"]
    summ = json.loads((tmp_path / "dask" / "summary.json").read_text())
    assert summ["points"][0]["runs_finished"] == 2
    assert (tmp_path / "dask" / "plots" / "sweep_separate_torque.png").is_file()
    assert (tmp_path / "dask" / "summary.html").is_file()


def test_killed_sweep_resumes_without_redoing(tmp_path):
    scn_dict = tiny({"torque": [0.0, 0.1, 0.2]}, seeds=1)
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump(scn_dict))
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "identify", "--quiet", "sweep", str(f),
                             "--out", str(out), "--workers", "1"], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            if list((out / "runs").glob("*.json")) if (out / "runs").is_dir() else []:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)      # the driver and its worker processes
        proc.wait(timeout=30)
    finished = {p.stem: p.stat().st_mtime_ns for p in (out / "runs").glob("*.json")}
    assert 1 <= len(finished) < 3
    assert not list((out / "runs").glob("*.partial"))
    res = run_sweep(scenario_from_dict(scn_dict), out=out, workers=1)
    assert sorted(res.skipped) == sorted(finished)
    assert len(res.ran) == 3 - len(finished) and not set(res.ran) & set(finished)
    for rid, mtime in finished.items():
        assert (out / "runs" / f"{rid}.json").stat().st_mtime_ns == mtime
    summ = json.loads((out / "summary.json").read_text())
    assert summ["runs_finished"] == 3
    # a third run has nothing left to do
    again = run_sweep(scenario_from_dict(scn_dict), out=out, workers=1)
    assert again.ran == [] and len(again.skipped) == 3
    # the folder refuses a sweep of a different experiment
    other = dict(scn_dict, twin={"sample_rate_hz": 200, "settle_s": 0.1})
    from identify.common.errors import InputError
    with pytest.raises(InputError, match="different scenario"):
        run_sweep(scenario_from_dict(other), out=out, workers=1)


def test_failed_run_is_reported_not_finished():
    import concurrent.futures as cf
    from identify.app.sweep import SweepTask, _outcome
    t = SweepTask("x_s0", (("position", 0.0), ("torque", 0.0), ("current", 0.0)), 0)
    ok, bad = cf.Future(), cf.Future()
    ok.set_result({"run_id": "x_s0"})
    bad.set_exception(ValueError("regressor is rank deficient"))
    assert _outcome(t, ok) == (t, {"run_id": "x_s0"}, None)
    task, res, err = _outcome(t, bad)
    assert res is None and err == "ValueError: regressor is rank deficient"


def test_sweep_needs_the_twin(capsys):
    from identify.app.cli import main
    assert main(["--quiet", "sweep", str(ROOT / "scenarios" / "hardware.yaml")]) == 2
    assert "backend: twin" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------
# sweep.twin: the grid over twin laws and imperfections (issue 22 item 5)
# ------------------------------------------------------------------------------------------------
INDEPENDENT = {"label": "independent", "reducer_friction_law": "speed_efficiency",
               "presliding_rad": 5.0e-4, "link_friction_load_driving": 0.05,
               "link_friction_load_braking": 0.02}


def test_grid_crosses_twin_entries_with_noise():
    d = tiny({"torque": [0.0, 0.1]}, seeds=2)
    d["sweep"]["twin"] = [{"reducer_friction_law": "opposing"}, INDEPENDENT]
    tasks, points = grid(scenario_from_dict(d))
    assert len(points) == 2 * 2 and len(tasks) == 2 * 2 * 2
    assert [p["twin"] for p in points] == ["reducer_friction_law=opposing"] * 2 + ["independent"] * 2
    t = next(t for t in tasks if t.twin_label == "independent" and dict(t.levels)["torque"] == 0.1)
    s = t.settings({"sample_rate_hz": 100, "reducer_friction_law": "opposing", "presliding_rad": 0})
    assert s["reducer_friction_law"] == "speed_efficiency" and s["presliding_rad"] == 5.0e-4
    assert s[NOISE_SETTINGS["torque"]] == 0.1 and s["noise"] is True and s["sample_rate_hz"] == 100
    # noise: {} keeps the scenario's noise settings: one point per entry, nothing overridden
    d = tiny({}, seeds=1)
    d["sweep"]["twin"] = [INDEPENDENT]
    d["twin"]["torque_noise_Nm"] = 0.07
    tasks, points = grid(scenario_from_dict(d))
    assert len(tasks) == 1 and points[0]["combine"] == "scenario" and points[0]["levels"] == {}
    s = tasks[0].settings(scenario_from_dict(d).twin)
    assert s["torque_noise_Nm"] == 0.07 and "noise" not in s and s["presliding_rad"] == 5.0e-4


@pytest.mark.parametrize("entry, key, msg", [
    ({"reducer_friction_law": "no_such_law"}, "reducer_friction_law", "must be"),
    ({"presliding_rad": 1.0}, "presliding_rad", "presliding_rad"),
    ({"no_such_key": 1}, "no_such_key", "no_such_key"),
    ({"label": ""}, "label", "non-empty"),
])
def test_bad_twin_entry_refused_at_load_naming_its_key(entry, key, msg):
    from identify.scenario.spec import ScenarioError
    d = tiny({}, seeds=1)
    d["sweep"]["twin"] = [{"reducer_friction_law": "opposing"}, entry]
    with pytest.raises(ScenarioError, match=msg) as exc:
        scenario_from_dict(d)
    assert "sweep.twin.1" in str(exc.value) or "sweep.twin[1]" in str(exc.value), str(exc.value)


def test_repeated_twin_entry_refused():
    from identify.scenario.spec import ScenarioError
    d = tiny({}, seeds=1)
    d["sweep"]["twin"] = [{"reducer_friction_law": "opposing"}, {"reducer_friction_law": "opposing"}]
    with pytest.raises(ScenarioError, match="repeats"):
        scenario_from_dict(d)


def test_tiny_law_sweep_reports_per_law(tmp_path):
    """Two laws, one seed: the matched law (opposing, the improved model's own) and an independent
    one (speed_efficiency + presliding + load friction). Each worker must run ITS law: only the
    matched one has a constant stage-1/2 truth (the twin says so), hence full parameter errors and
    coverage (the independent one: its inertial base parameters only); the improved model gains
    more on its own law than on the independent one."""
    d = tiny({}, seeds=1)
    d["sweep"]["twin"] = [{"label": "matched", "reducer_friction_law": "opposing"}, INDEPENDENT]
    res = run_sweep(scenario_from_dict(d), out=tmp_path / "laws", workers=2)
    assert len(res.ran) == 2
    pts = {p["twin"]: p for p in res.summary["points"]}
    assert set(pts) == {"matched", "independent"}
    m, ind = pts["matched"], pts["independent"]
    assert m["coverage"]["improved_stage2"]["n"] > 0 and m["param_median_abs_error_percent"]["n"] == 1
    # the independent law's link friction has no constant truth: its stage-1 coverage counts the
    # inertial base parameters only (their truth, the URDF, still holds), stage 2 none
    assert set(ind["coverage"]) == {"improved_stage1"}, ind["coverage"]
    assert ind["coverage"]["improved_stage1"]["n"] == m["coverage"]["improved_stage1"]["n"] - 12
    for p in (m, ind):    # the improved model beats the simplified one on both laws
        assert p["validation_rms_improved"]["median"] < p["validation_rms_simplified"]["median"]
        assert p["validation_reduction_percent"]["median"] < 0
    assert m["excitation_reduction_percent"]["median"] < ind["excitation_reduction_percent"]["median"] - 10
    rec = json.loads(next((tmp_path / "laws" / "runs").glob("independent-*.json")).read_text())
    assert rec["twin"] == "independent" and rec["twin_settings"]["presliding_rad"] == 5.0e-4
    md = (tmp_path / "laws" / "summary.md").read_text()
    assert "| independent |" in md and "RMS reduction" in md
    assert (tmp_path / "laws" / "plots" / "sweep_twin.png").is_file()
