"""Everyday robustness (issue 13): run folders claimed atomically, outputs never mixed, caches
in the XDG folder with a fallback, a verified code-generation cache, budgets, conditioning
warnings, scenario parsing limits, the terminal."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from identify.common import fileio, progress

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"


def _scn(tmp: Path, **over):
    from identify.scenario.load import scenario_from_dict
    d = {"name": "robust",
         "arm": {"urdf": str(ASSETS / "cobot6.urdf"), "drives": str(ASSETS / "cobot6_drives.yaml")},
         "outputs": {"dir": str(tmp / "runs")}}
    d.update(over)
    return scenario_from_dict(d)


# -- run folders ------------------------------------------------------------------------------------
def test_run_folder_is_claimed_exclusively(tmp_path):
    from identify.outputs.layout import LOCK as LOCK_NAME
    from identify.outputs.runfolder import claim_run_folder
    from identify.common.errors import InputError
    scn = _scn(tmp_path)
    out = tmp_path / "out"
    with claim_run_folder(scn, out) as folder:
        assert (folder / LOCK_NAME).is_file()
        # a second command on the same folder, while the first holds it: refused
        with pytest.raises(InputError, match="in use by another twinid command"):
            with claim_run_folder(scn, out, force=True):
                pass
        (folder / "metrics.json").write_text("{}")
    assert not (out / LOCK_NAME).exists()
    # finished, non-empty: refused without --force
    with pytest.raises(InputError, match="not empty"):
        with claim_run_folder(scn, out):
            pass


def test_auto_named_folders_never_collide(tmp_path):
    from identify.outputs.runfolder import claim_run_folder
    scn = _scn(tmp_path)
    with claim_run_folder(scn, None) as a, claim_run_folder(scn, None) as b:
        assert a != b and a.parent == b.parent == tmp_path / "runs"


def test_stale_lock_of_a_dead_process_is_taken_over(tmp_path):
    from identify.outputs.layout import LOCK as LOCK_NAME
    from identify.outputs.runfolder import claim_run_folder
    proc = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True)
    dead = int(proc.stdout)
    out = tmp_path / "out"
    out.mkdir()
    (out / LOCK_NAME).write_text(json.dumps({"pid": dead, "host": os.uname().nodename}))
    with claim_run_folder(_scn(tmp_path), out) as folder:
        assert json.loads((folder / LOCK_NAME).read_text())["pid"] == os.getpid()


def test_force_removes_the_previous_outputs_only(tmp_path):
    from identify.outputs.runfolder import claim_run_folder
    out = tmp_path / "out"
    (out / "plots").mkdir(parents=True)
    (out / "plots" / "torque_validation.png").write_bytes(b"old")
    (out / "report.html").write_text("old")
    (out / "notes.txt").write_text("mine")
    with claim_run_folder(_scn(tmp_path), out, force=True) as folder:
        assert not (folder / "plots").exists() and not (folder / "report.html").exists()
        assert (folder / "notes.txt").read_text() == "mine"


def test_failed_command_leaves_no_empty_folder(tmp_path):
    from identify.outputs.runfolder import claim_run_folder
    out = tmp_path / "new"
    with pytest.raises(RuntimeError):
        with claim_run_folder(_scn(tmp_path), out):
            raise RuntimeError("boom")
    assert not out.exists()


def test_too_little_free_space_is_refused_before_work(tmp_path, monkeypatch):
    from identify.outputs.runfolder import claim_run_folder
    from identify.common.errors import InputError
    monkeypatch.setattr(fileio.shutil, "disk_usage",
                        lambda p: SimpleNamespace(total=1 << 30, used=0, free=5 * fileio.MB))
    with pytest.raises(InputError, match="only 5 MB free"):
        with claim_run_folder(_scn(tmp_path), tmp_path / "out", need_bytes=100 * fileio.MB):
            pass
    assert not (tmp_path / "out").exists()


def test_report_embeds_only_this_runs_plots(tmp_path):
    """A folder holding another run's plots (e.g. reused with plots: false) and a metrics.json
    listing none: the report shows none."""
    from identify.outputs.report import build_report
    from identify.common.figures import pyplot, save
    plt = pyplot()
    (tmp_path / "plots").mkdir()
    fig = plt.figure(figsize=(2, 2))
    fig.gca().plot([0, 1], [0, 1])
    save(fig, tmp_path / "plots" / "torque_old.png")
    (tmp_path / "metrics.json").write_text(json.dumps({"name": "x", "files": {"plots": []}}))
    md, html = build_report(tmp_path)
    assert "![" not in md.read_text() and "<img" not in html.read_text()
    (tmp_path / "metrics.json").write_text(json.dumps(
        {"name": "x", "files": {"plots": ["plots/torque_old.png"]}}))
    md, html = build_report(tmp_path)
    assert html.read_text().count("<img") == 1


# -- caches -----------------------------------------------------------------------------------------
@pytest.fixture
def fresh_cache_state(monkeypatch):
    monkeypatch.setattr(fileio, "_cache_state", {})
    monkeypatch.setattr(progress, "_warned", set())


def test_cache_root_is_xdg_not_the_working_directory(tmp_path, monkeypatch, fresh_cache_state):
    from identify.app.trajectories import cache_dir
    monkeypatch.delenv("TWINID_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    assert cache_dir() == tmp_path / "xdg" / "twinid" / "excitation"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert fileio.cache_root() == tmp_path / "home" / ".cache" / "twinid"
    monkeypatch.setenv("TWINID_CACHE", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine" / "excitation"
    assert not (tmp_path / ".cache").exists()


def test_unwritable_cache_falls_back_with_one_warning(tmp_path, monkeypatch, capsys,
                                                       fresh_cache_state):
    import casadi as ca

    from identify.app.trajectories import cache_dir
    from identify.model.regressor import compile_function
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("TWINID_CACHE", str(tmp_path / "afile" / "cache"))
    x = ca.SX.sym("x", 2)
    f = ca.Function("fallback_probe", [x], [ca.sin(x) * 2])
    assert compile_function(f) is f            # CasADi's virtual machine, no crash
    assert cache_dir() is None                 # trajectories not cached
    assert compile_function(f) is f
    err = capsys.readouterr().err
    assert err.count("twinid: warning: cache folder unusable") == 1, err
    assert "virtual machine" in err and "TWINID_CACHE" in err


_CODEGEN = textwrap.dedent("""
    import os, sys, pathlib, casadi as ca, numpy as np
    os.environ["TWINID_CACHE"] = sys.argv[1]
    from identify.common import progress
    from identify.model.regressor import compile_function
    x = ca.SX.sym("x", 3)
    f = ca.Function("verify_probe", [x], [ca.sin(x) * ca.cos(x[0]) + x ** 2])
    mode = sys.argv[2]
    folder = pathlib.Path(sys.argv[1]) / "codegen"
    if mode == "truncate":
        so = next(folder.glob("verify_probe_*.so"))
        so.write_bytes(so.read_bytes()[: so.stat().st_size // 3])
    if mode == "corrupt":
        so = next(folder.glob("verify_probe_*.so"))
        b = bytearray(so.read_bytes()); b[len(b) // 2] ^= 0xFF; so.write_bytes(bytes(b))
    g = compile_function(f)
    v = np.array([0.3, -1.2, 2.0])
    ok = np.allclose(np.asarray(g(v)).ravel(), np.asarray(f(v)).ravel(), atol=1e-12)
    print("external" if g is not f else "vm", ok)
""")


def test_codegen_cache_is_verified_before_loading(tmp_path):
    """A truncated or corrupted compiled library is rebuilt, never loaded (it crashed the
    process with SIGBUS). Run in subprocesses: a crash must not take pytest down."""
    cache = tmp_path / "cache"
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def run(mode):
        p = subprocess.run([sys.executable, "-c", _CODEGEN, str(cache), mode], env=env,
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
        return p
    first = run("build")
    assert first.stdout.split() == ["external", "True"]
    assert "compiling the arm model to C" in first.stderr and "compiled 'verify_probe'" in first.stderr
    manifest = next((cache / "codegen").glob("verify_probe_*.json"))
    rec = json.loads(manifest.read_text())
    so = manifest.with_suffix(".so")
    assert rec["size"] == so.stat().st_size
    again = run("reuse")
    assert "compiling" not in again.stderr           # cached: said only on the first run
    for mode in ("truncate", "corrupt"):
        p = run(mode)
        assert p.stdout.split() == ["external", "True"]
        assert "compiled 'verify_probe'" in p.stderr     # rebuilt
        assert json.loads(manifest.read_text())["size"] == so.stat().st_size


# -- budgets and conditioning ---------------------------------------------------------------------
def test_budget_estimate_refuses_absurd_runs_and_sweeps(tmp_path):
    from identify.scenario.budget import estimate_run, estimate_sweep, over_budget
    from identify.scenario.load import load_scenario
    quick = load_scenario(ROOT / "scenarios" / "quickstart.yaml")
    paper = load_scenario(ROOT / "scenarios" / "paper_replication.yaml")
    mem = 16 * 1024 ** 3
    for s in (quick, paper):
        assert over_budget(estimate_run(s, load=0.0), memory_bytes=mem) is None
    import dataclasses
    ex = dataclasses.replace(paper.trajectories.excitation, period_s=3600.0)
    long = dataclasses.replace(paper, trajectories=dataclasses.replace(paper.trajectories,
                                                                       excitation=ex))
    est = estimate_run(long, load=0.0)
    # measured: 6 min and 5.6 GB on the 2-core machine
    assert 3 * 60 < est.seconds < 20 * 60 and 3e9 < est.peak_bytes < 12e9
    assert "memory budget" in over_budget(est, memory_bytes=mem)
    sweep = estimate_sweep(quick, 900_000, workers=2, load=0.0)
    assert "time budget" in over_budget(sweep, memory_bytes=mem)
    assert over_budget(estimate_sweep(quick, 65, workers=2, load=0.0),
                       memory_bytes=mem) is None


def test_yes_runs_beyond_the_budget_with_a_warning(capsys):
    from identify.app.inputs import check_budget
    from identify.common.errors import InputError
    from identify.scenario.budget import Estimate
    est = Estimate(seconds=1e6, peak_bytes=1e9, disk_bytes=0, detail="test")
    with pytest.raises(InputError, match="--yes"):
        check_budget(est, yes=False)
    check_budget(est, yes=True)
    assert "running it because of --yes" in capsys.readouterr().err


def test_hopeless_conditioning_is_flagged_in_console_and_report(tmp_path):
    from identify.app.pipeline import conditioning_warnings
    from identify.outputs.report import build_report
    fit = SimpleNamespace(params_=np.array([1.0, 0.1, 0.01, 2.0]),
                          std_=np.array([0.1, 0.5, 0.2, 3.0]))
    ident = SimpleNamespace(improved=fit, simplified=None)
    w = conditioning_warnings({"excitation": SimpleNamespace(cond=2.6e5),
                               "validation": SimpleNamespace(cond=40.0)}, ident)
    assert len(w) == 2
    assert "cond(W_base) of the excitation trajectory is 2.6e+05" in w[0]
    assert "3 of 4 parameters" in w[1]
    good = SimpleNamespace(params_=np.ones(4), std_=np.full(4, 0.01))
    assert conditioning_warnings({"excitation": SimpleNamespace(cond=40.0)},
                                 SimpleNamespace(improved=good, simplified=None)) == []
    (tmp_path / "metrics.json").write_text(json.dumps({"name": "x", "messages": w}))
    html = build_report(tmp_path)[1].read_text()
    assert "WARNING: results not trustworthy" in html and "2.6e+05" in html


# -- scenario files --------------------------------------------------------------------------------
def _load_text(tmp_path, text):
    from identify.scenario.load import load_scenario
    f = tmp_path / "s.yaml"
    f.write_text(textwrap.dedent(text))
    return load_scenario(f)


def test_scientific_notation_numbers(tmp_path):
    s = _load_text(tmp_path, f"""
        arm: {{urdf: {ASSETS / 'cobot6.urdf'}, drives: {ASSETS / 'cobot6_drives.yaml'}}}
        trajectories:
          excitation: {{period_s: 2e1}}
          validation: {{period_s: "1.5e1", seed: 1}}
        twin: {{sample_rate_hz: 2.0e2, torque_noise_Nm: 5E-2}}
        """)
    assert s.trajectories.excitation.period_s == 20.0
    assert s.trajectories.validation.period_s == 15.0
    assert s.twin["sample_rate_hz"] == 200.0 and s.twin["torque_noise_Nm"] == 0.05


def test_smallest_period_is_accepted(tmp_path):
    from identify.scenario.spec import ScenarioError
    base = f"""
        arm: {{urdf: {ASSETS / 'cobot6.urdf'}, drives: {ASSETS / 'cobot6_drives.yaml'}}}
        trajectories:
          excitation: {{harmonics: 3, grid: 40, period_s: PERIOD}}
          validation: {{harmonics: 3, grid: 40, period_s: 4.0, seed: 1}}
        twin: {{sample_rate_hz: 100}}
        """
    assert _load_text(tmp_path, base.replace("PERIOD", "0.4")).trajectories.excitation.period_s == 0.4
    with pytest.raises(ScenarioError, match=r"period_s: 0.39 s is too short.* is 0.4 s"):
        _load_text(tmp_path, base.replace("PERIOD", "0.39"))


def test_large_scenario_file_refused(tmp_path):
    from identify.scenario.spec import ScenarioError
    f = tmp_path / "big.yaml"
    f.write_text("name: x\n" + "#" * (2 * 1024 * 1024) + "\n")
    from identify.scenario.load import load_scenario
    with pytest.raises(ScenarioError, match="at most"):
        load_scenario(f)


# -- terminal -------------------------------------------------------------------------------------
def test_ipopt_max_iter_is_not_a_failure():
    from identify.excitation.optimizer import ipopt_status_text
    assert ipopt_status_text("Maximum_Iterations_Exceeded", True, 100) == \
        "optimizer stopped at max_iter (100 it per IPOPT solve) with a feasible trajectory"
    assert "without a feasible" in ipopt_status_text("Maximum_Iterations_Exceeded", False)
    assert ipopt_status_text("Solve_Succeeded", True) == "solved"


def test_pybullet_banner_is_silenced_in_commands(tmp_path):
    """Loading a twin scenario imports pybullet; its C banner must not reach the terminal."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), TWINID_CACHE=str(tmp_path / "c"))
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump({"arm": {"urdf": str(ASSETS / "cobot6.urdf"),
                                         "drives": str(ASSETS / "cobot6_drives.yaml")},
                                 "trajectories": {"excitation": {"period_s": 3600.0}}}))
    p = subprocess.run([sys.executable, "-m", "identify", "--quiet", "run", str(f)], env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "--yes" in p.stderr
    probe = subprocess.run([sys.executable, "-c", "import identify.app.cli, twin.sim; "
                            "import sys; print('pybullet' in sys.modules)"], env=env,
                           capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "True"
    assert "pybullet build time" not in p.stdout + p.stderr + probe.stdout + probe.stderr


def test_version(capsys):
    from identify.app.cli import main
    assert main(["--version"]) == 0
    from importlib.metadata import version
    assert capsys.readouterr().out.strip() == f"twinid {version('twinid')}"


def test_lock_file_is_not_listed_in_the_report(tmp_path):
    from identify.outputs.report import build_report
    from identify.outputs.layout import LOCK as LOCK_NAME
    from identify.outputs.runfolder import claim_run_folder
    with claim_run_folder(_scn(tmp_path), tmp_path / "out") as folder:
        (folder / "metrics.json").write_text(json.dumps({"name": "x"}))
        md = build_report(folder)[0].read_text()      # built while the folder is claimed
    assert LOCK_NAME not in md and "metrics.json" in md
