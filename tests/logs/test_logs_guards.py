"""Refusals of `twinid fit` name their cause and the key that fixes it (issue 14): explicit joint
models the log cannot support (at load, exit 2), unit guards (degrees read as radians,
milliseconds read as seconds, absurd current gains), windows; --validation-log with its own
window; processing.velocity: log."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from identify.app.cli import main
from identify.logs.load import LogError, load_log
from identify.logs.simulate import simulate, write_log
from identify.model.robot_model import RobotModel
from identify.scenario.spec import LogSpec


@pytest.fixture(scope="module")
def xarm(pybullet_data_path, tmp_path_factory):
    urdf = str(Path(pybullet_data_path) / "xarm/xarm6_robot.urdf")
    model = RobotModel.from_urdf(urdf)
    log = simulate(model, duration_s=12.0, rate_hz=200.0, signals="tau_m", seed=4)
    d = tmp_path_factory.mktemp("xarm")
    return urdf, model, log, d


def _run(tmp_path, capsys, urdf, fit, ident=None, args=()):
    scn = {"name": "g", "arm": {"urdf": urdf}, "fit": fit,
           "outputs": {"dir": str(tmp_path / "runs"), "plots": False, "report": False}}
    if ident:
        scn["identification"] = ident
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(scn))
    code = main(["--quiet", "fit", str(f), "--out", str(tmp_path / "out"), *args])
    return code, capsys.readouterr().err


def test_explicit_joint_model_without_its_signal_is_refused_at_load(xarm, tmp_path, capsys):
    urdf, _m, log, d = xarm
    f = write_log(log, d / "csv", "ur_rtde")
    fit = {"excitation": {"file": str(f), "preset": "ur_rtde", "current_gains": log.truth["gains"]}}
    code, err = _run(tmp_path, capsys, urdf, fit, ident={"joint_model": "improved"})
    assert code == 2, err
    assert "identification.joint_model" in err and "joint torque" in err and "auto" in err
    assert not (tmp_path / "out").exists()           # refused before anything was computed


def test_degrees_read_as_radians_is_refused(xarm, tmp_path, capsys):
    urdf, model, log, d = xarm
    f = write_log(log, d / "deg", "ur_rtde", degrees=True)
    spec = LogSpec(file=f, preset="ur_rtde", current_gains=tuple(log.truth["gains"]))
    with pytest.raises(LogError, match=r"position_unit: deg"):
        load_log(spec, model.joint_names, model=model)
    rec = load_log(LogSpec(file=f, preset="ur_rtde", current_gains=tuple(log.truth["gains"]),
                           position_unit="deg"), model.joint_names, model=model)
    np.testing.assert_allclose(rec.q, log.q, atol=1e-8)
    fit = {"excitation": {"file": str(f), "preset": "ur_rtde", "current_gains": log.truth["gains"]}}
    code, err = _run(tmp_path, capsys, urdf, fit)
    assert code == 2 and "position_unit: deg" in err, err


def test_milliseconds_read_as_seconds_is_refused(xarm):
    _u, model, log, d = xarm
    f = write_log(log, d / "ms", "libfranka", time_scale=1e-3)
    spec = LogSpec(file=f, preset="ur_rtde", current_gains=tuple(log.truth["gains"]))
    spec = LogSpec(file=f, format="csv", columns=None, preset="libfranka")
    with pytest.raises(LogError, match=r"time_scale: 0\.001") as ei:
        load_log(spec, model.joint_names, model=model)
    assert "milliseconds" in str(ei.value)


def test_absurd_current_gains_are_refused(xarm):
    _u, model, log, d = xarm
    f = write_log(log, d / "gain", "ur_rtde")
    mA = tuple(1000.0 * np.asarray(log.truth["gains"]))       # gains for currents in mA
    with pytest.raises(LogError, match=r"current_gains"):
        load_log(LogSpec(file=f, preset="ur_rtde", current_gains=mA), model.joint_names,
                 model=model)
    ok = load_log(LogSpec(file=f, preset="ur_rtde", current_gains=mA, check_units=False),
                  model.joint_names, model=model)
    assert ok.tau_m is not None


def test_windows_by_time_row_and_stamp(xarm):
    _u, model, log, d = xarm
    f = write_log(log, d / "win", "csv")
    t0 = 100.0                      # absolute stamps starting at 100 s
    data = np.loadtxt(f, delimiter=",", skiprows=1)
    data[:, 0] += t0
    head = f.read_text().splitlines()[0]
    g = d / "win" / "shifted.csv"
    np.savetxt(g, data, delimiter=",", header=head, comments="", fmt="%.10g")
    cols = {"time": "t", "q": [f"q_{j}" for j in range(6)], "tau_m": [f"i_m_{j}" for j in range(6)]}
    from identify.scenario.spec import ColumnMap
    cm = ColumnMap(time="t", q=tuple(cols["q"]), tau_m=tuple(cols["tau_m"]))
    a = load_log(LogSpec(file=g, columns=cm, window_s=(2.0, 4.0)), model.joint_names)
    b = load_log(LogSpec(file=g, columns=cm, window_t=(t0 + 2.0, t0 + 4.0)), model.joint_names)
    c = load_log(LogSpec(file=g, columns=cm, window_rows=(400, 801)), model.joint_names)
    for r in (a, b, c):
        np.testing.assert_allclose(r.t, a.t)
        np.testing.assert_array_equal(r.q, a.q)
    assert a.n_samples == 401 and a.t[0] == pytest.approx(t0 + 2.0)
    with pytest.raises(LogError, match=r"window_s \[50.0, 60.0\] keeps 0 samples .*0\.\.11\.995 s"):
        load_log(LogSpec(file=g, columns=cm, window_s=(50.0, 60.0)), model.joint_names)


def test_validation_log_takes_its_own_window_not_the_excitation_one(xarm, tmp_path, capsys):
    """--validation-log without a fit.validation section: the excitation log's columns, NOT its
    window (a window of 2..8 s would keep 0 samples of a 4 s validation log)."""
    urdf, model, log, d = xarm
    f = write_log(log, d / "exc", "ur_rtde")
    short = simulate(model, duration_s=4.0, rate_hz=200.0, signals="tau_m", seed=5)
    v = write_log(short, d / "val", "ur_rtde")
    fit = {"excitation": {"file": str(f), "preset": "ur_rtde",
                          "current_gains": log.truth["gains"], "window_s": [2.0, 11.0]}}
    # the textbook terms: this test is about the window; friction: auto on this 9 s log picks
    # a spurious term (validation 0.1225 N*m against 0.1: a known limit of issue 21's selection)
    code, err = _run(tmp_path, capsys, urdf, fit, ident={"friction": "terms"},
                     args=("--validation-log", str(v)))
    assert code == 0, err
    m = yaml.safe_load((tmp_path / "out" / "metrics.json").read_text())
    assert m["trajectories"]["validation"]["samples"] == 800
    assert m["export"]["rms"]["validation"]["overall"] < 0.1


def test_velocity_from_the_log_is_used(xarm):
    """processing.velocity: log uses the mapped qd (noise-free in the simulation) -- the fit's
    qd equals the logged one filtered, not differences of the noisy q."""
    from identify.estimation.processing import ProcessingSettings, process
    _u, model, log, d = xarm
    f = write_log(log, d / "vel", "ur_rtde")
    rec = load_log(LogSpec(file=f, preset="ur_rtde", current_gains=tuple(log.truth["gains"])),
                   model.joint_names)
    assert rec.qd is not None
    a = process(rec, ProcessingSettings(velocity="log", butter_cutoff_hz=None, smooth_passes=0))
    b = process(rec, ProcessingSettings(velocity="differentiate", butter_cutoff_hz=None,
                                        smooth_passes=0))
    np.testing.assert_allclose(a.qd, log.qd[:a.qd.shape[0]], atol=1e-7)
    assert np.max(np.abs(b.qd - log.qd[:b.qd.shape[0]])) > 1e-4     # differences of noisy q


def test_torque_ratio_guard_without_effort_limits():
    """No effort limits in the URDF: motor-side gains (100x too small) are caught by the ratio to
    the gravity torque on most joints; friction-dominated wrists (10-20x) are not refused."""
    from types import SimpleNamespace
    from identify.logs import guards
    n = 6
    model = SimpleNamespace(joint_names=[f"j{k}" for k in range(n)],
                            limits=SimpleNamespace(tau_max=np.full(n, np.inf)))
    rng = np.random.default_rng(0)
    grav = rng.normal(size=(500, n)) * np.array([0.0, 40, 20, 2, 0.5, 0.05])
    ok = grav + rng.normal(size=grav.shape) * np.array([1, 2, 1, 1, 1, 0.8])   # wrists: friction
    guards.check_torque(ok, grav, model, "log.csv", from_currents=True)
    with pytest.raises(LogError, match=r"log.csv: motor torque RMS .* check current_gains"):
        guards.check_torque(ok / 100.0, grav, model, "log.csv", from_currents=True)
