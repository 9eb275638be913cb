"""CSV / NPZ log import (identify.logs.load) and `twinid fit`.

The proof: a headerless CSV written from twin data -- currents with per-joint gains instead of
motor torques, irregular time stamps -- gives the same parameters as fitting the recording
directly. Plus malformed logs -> errors naming file, line/sample and column.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy.interpolate import CubicSpline

from identify.app.cli import main
from identify.logs.load import LogError, gains_from_drives, load_log
from identify.backend.recording import Recording
from identify.scenario.spec import ColumnMap, LogSpec
from conftest import tiny_scenario

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"

TINY = tiny_scenario("tiny", twin={"seed": 3}, outputs={"plots": False, "report": False})


@pytest.fixture(scope="module")
def twin_recordings(tmp_path_factory):
    """Excitation and validation recordings of the twin (tiny trajectories), saved as NPZ."""
    import os
    from identify.app.acquisition import record
    from identify.app.inputs import build_model
    from identify.app.trajectories import trajectories
    from identify.scenario.load import scenario_from_dict
    cache = tmp_path_factory.getbasetemp() / "twinid_cache"
    old = os.environ.get("TWINID_CACHE")
    os.environ["TWINID_CACHE"] = str(cache)
    try:
        scn = scenario_from_dict(TINY)
        model = build_model(scn)
        recs = record(scn, trajectories(scn, model), model=model, show=False)
    finally:
        if old is None:
            os.environ.pop("TWINID_CACHE", None)
        else:
            os.environ["TWINID_CACHE"] = old
    folder = tmp_path_factory.mktemp("recs")
    paths = {k: r.save(folder / f"{k}.npz") for k, r in recs.items()}
    return recs, paths, model


def _write_irregular_csv(rec: Recording, path: Path, rng) -> np.ndarray:
    """Headerless CSV: t, q1..qn, i1..in, tau_j1..tau_jn at jittered time stamps (values
    interpolated from the recording). First and last stamps unjittered. Returns the gains."""
    t = rec.t
    dt = np.median(np.diff(t))
    jit = rng.uniform(-0.1, 0.1, t.size) * dt
    jit[0] = jit[-1] = 0.0
    ti = t + jit
    cols = [ti]
    for ch in ("q", "i_m", "tau_j"):
        cols.append(CubicSpline(t, getattr(rec, ch), axis=0)(ti))
    np.savetxt(path, np.column_stack(cols), delimiter=",", fmt="%.10g")
    assert not np.allclose(np.diff(ti), dt)     # really irregular


def _fit(tmp_path, name, fit_section, capsys, velocity=None) -> dict:
    scn = dict(TINY, name=name, fit=fit_section)
    if velocity is not None:
        scn["processing"] = {"velocity": velocity}
    f = tmp_path / f"{name}.yaml"
    f.write_text(yaml.safe_dump(scn))
    out = tmp_path / f"out_{name}"
    code = main(["--quiet", "fit", str(f), "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 0, err
    return yaml.safe_load((out / "parameters.yaml").read_text()), out


def test_fit_csv_with_currents_irregular_equals_recording(twin_recordings, tmp_path, capsys):
    recs, paths, model = twin_recordings
    rng = np.random.default_rng(0)
    n = model.n
    g = gains_from_drives(ASSETS / "cobot6_drives.yaml", model.joint_names)
    gains = {}
    for k in ("excitation", "validation"):
        _write_irregular_csv(recs[k], tmp_path / f"{k}.csv", rng)
        # the twin's motor torque is eta*beta times its measured current
        np.testing.assert_allclose(recs[k].tau_m, recs[k].i_m * g, rtol=1e-12, atol=1e-12)
        gains[k] = g
    cols = {"time": 0, "q": list(range(1, n + 1)), "i_m": list(range(n + 1, 2 * n + 1)),
            "tau_j": list(range(2 * n + 1, 3 * n + 1))}
    csv_fit = {k: {"file": str(tmp_path / f"{k}.csv"), "format": "csv", "columns": cols,
                   "current_gains": gains[k].tolist(), "rate_hz": 100.0}
               for k in ("excitation", "validation")}
    rec_fit = {k: {"file": str(paths[k])} for k in ("excitation", "validation")}
    # the recording has the drive's qd, the CSV none: compare like with like (q differentiated)
    p_rec, out_rec = _fit(tmp_path, "direct", rec_fit, capsys, velocity="differentiate")
    p_csv, out_csv = _fit(tmp_path, "csv", csv_fit, capsys)
    for model_key, block in (("improved", "stage1"), ("simplified", "rigid_body")):
        a = p_rec["models"][model_key][block]
        b = p_csv["models"][model_key][block]
        assert a["names"] == b["names"]
        va, vb, sa = (np.array(x, float) for x in (a["value"], b["value"], a["std"]))
        # the same parameters: differences far inside the parameters' own uncertainty
        assert np.all(np.abs(va - vb) <= 0.1 * sa + 1e-9 * np.abs(va)), \
            np.max(np.abs(va - vb) / sa)
    import json
    m = json.loads((out_csv / "metrics.json").read_text())
    assert m["trajectories"]["excitation"]["resampled"] is True
    assert m["command"] == "fit"


def test_window_and_units_npz(twin_recordings, tmp_path):
    recs, _paths, model = twin_recordings
    rec = recs["excitation"]
    n = model.n
    keys = {f"pos{j}": np.rad2deg(rec.q[:, j]) for j in range(n)}
    np.savez(tmp_path / "log.npz", time_ms=rec.t * 1000.0, tau=rec.tau_j, **keys)
    spec = LogSpec(file=tmp_path / "log.npz", columns=ColumnMap(
        time="time_ms", q=tuple(f"pos{j}" for j in range(n)), tau_j="tau"),
        time_scale=1e-3, position_unit="deg", window_s=(1.0, 2.0))
    out = load_log(spec, model.joint_names)
    keep = (rec.t >= 1.0 - 1e-9) & (rec.t <= 2.0 + 1e-9)
    assert out.n_samples == keep.sum()
    np.testing.assert_allclose(out.q, rec.q[keep], atol=1e-12)
    np.testing.assert_allclose(out.tau_j, rec.tau_j[keep])
    assert out.meta["log"]["resampled"] is False and out.tau_m is None


def _csv(tmp_path, rows, name="bad.csv") -> Path:
    p = tmp_path / name
    p.write_text("\n".join(",".join(str(c) for c in r) for r in rows) + "\n")
    return p


def _spec(path, **kw):
    cols = ColumnMap(time=0, q=(1, 2), tau_j=(3, 4))
    return LogSpec(file=path, columns=kw.pop("columns", cols), **kw)


GOOD = [[0.00 + 0.01 * k, 0.1 * k, 0.2 * k, 1.0, 2.0] for k in range(8)]


@pytest.mark.parametrize("mutate,kw,fragment", [
    (lambda r: r[3].__setitem__(2, "abc"), {}, "line 4"),
    (lambda r: r[5].__setitem__(0, 0.01), {}, "line 6"),
    (lambda r: r[2].__setitem__(3, "nan"), {}, "tau_j of joint 1 is not finite at line 3"),
    (lambda r: None, {"columns": ColumnMap(time=0, q=(1, 9), tau_j=(3, 4))}, "column 9 for q[1]"),
    (lambda r: None, {"columns": ColumnMap(time=0, q=(1, 2), i_m=(3, 4))}, "gains"),
    (lambda r: None, {"window_s": (5.0, 6.0)}, "window_s"),
])
def test_malformed_logs(tmp_path, mutate, kw, fragment):
    rows = [list(r) for r in GOOD]
    mutate(rows)
    p = _csv(tmp_path, rows)
    with pytest.raises(LogError) as ei:
        load_log(_spec(p, **kw), ["j1", "j2"])
    msg = str(ei.value)
    assert msg.startswith(str(p)) and fragment in msg, msg


def test_header_names_and_exact_uniform(tmp_path):
    rows = [["t", "a", "b", "ta", "tb"]] + GOOD
    p = _csv(tmp_path, rows, "h.csv")
    spec = LogSpec(file=p, header=True, columns=ColumnMap(time="t", q=("a", "b"), tau_j=("ta", "tb")))
    rec = load_log(spec, ["j1", "j2"])
    assert rec.n_samples == len(GOOD) and rec.rate_hz == pytest.approx(100.0)
    np.testing.assert_allclose(rec.q[:, 1], [r[2] for r in GOOD])
    with pytest.raises(LogError, match="not in the header"):
        load_log(dataclasses.replace(spec, columns=ColumnMap(time="time", q=("a", "b"),
                                                              tau_j=("ta", "tb"))), ["j1", "j2"])


def test_fit_without_log_is_input_error(tmp_path, capsys):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(dict(TINY)))
    assert main(["fit", str(f)]) == 2
    err = capsys.readouterr().err
    assert "fit.excitation" in err and "Traceback" not in err


def test_rate_inferred_from_irregular_time_stamps(tmp_path):
    """No rate_hz: the rate is the median of the irregular steps (here 1/0.005 s = 200 Hz) and the
    signal is resampled onto that grid; checked against the closed-form signal."""
    rng = np.random.default_rng(3)
    N = 400
    dt0 = 0.005
    t = np.arange(N) * dt0 + rng.uniform(-0.3, 0.3, N) * dt0    # jitter +-30 %, stays monotonic
    t[0] = 0.0
    steps = np.diff(t)
    assert abs(np.median(steps) - dt0) < 0.05 * dt0 and steps.min() > 0
    f = 1.5                                                      # Hz, far below Nyquist
    q = np.stack([np.sin(2 * np.pi * f * t), np.cos(2 * np.pi * f * t)], axis=1)
    rows = [[t[k], q[k, 0], q[k, 1], 1.0, 2.0] for k in range(N)]
    p = _csv(tmp_path, rows, "irregular.csv")
    rec = load_log(_spec(p), ["j1", "j2"])
    expected_rate = 1.0 / float(np.median(steps))
    assert rec.rate_hz == pytest.approx(expected_rate, rel=1e-9)
    assert rec.meta["log"]["resampled"] is True
    np.testing.assert_allclose(np.diff(rec.t), 1.0 / expected_rate, rtol=1e-9)
    truth = np.stack([np.sin(2 * np.pi * f * rec.t), np.cos(2 * np.pi * f * rec.t)], axis=1)
    np.testing.assert_allclose(rec.q, truth, atol=2e-4)
    np.testing.assert_allclose(rec.tau_j, np.tile([1.0, 2.0], (rec.n_samples, 1)), atol=1e-9)


def test_gains_from_drives_uses_the_shared_loader(tmp_path):
    """eta*beta per joint from the drive file (closed form from the raw YAML), errors naming file,
    joint and key."""
    raw = yaml.safe_load((ASSETS / "cobot6_drives.yaml").read_text())["joints"]
    names = [j["name"] for j in raw][::-1]
    g = gains_from_drives(ASSETS / "cobot6_drives.yaml", names)
    np.testing.assert_allclose(g, [j["gear_ratio"] * j["torque_constant_Nm_A"] for j in raw[::-1]])
    raw[2]["torque_constant_Nm_A"] = "abc"
    bad = tmp_path / "drives.yaml"
    bad.write_text(yaml.safe_dump({"joints": raw}))
    with pytest.raises(LogError, match=r"drives.yaml: joint 'joint3' key 'torque_constant_Nm_A'"):
        gains_from_drives(bad, names)


@pytest.mark.parametrize("preset", ["ur_rtde", "libfranka", "text_per_signal"])
def test_presets_read_twin_logs(twin_recordings, tmp_path, preset):
    """The twin's excitation recording written as each logging tool writes it reads back, by the
    preset alone, as the same signals (to the files' 10 significant digits)."""
    recs, _paths, model = twin_recordings
    rec = recs["excitation"]
    n = model.n
    g = gains_from_drives(ASSETS / "cobot6_drives.yaml", model.joint_names)
    fams = {"ur_rtde": ("timestamp", [("actual_q", rec.q), ("actual_qd", rec.qd),
                                      ("actual_current", rec.i_m)]),
            "libfranka": ("time", [("q", rec.q), ("dq", rec.qd), ("tau_J", rec.tau_j)])}
    if preset == "text_per_signal":
        for name, a in (("q", rec.q), ("qd", rec.qd), ("tau_j", rec.tau_j), ("i_m", rec.i_m)):
            np.savetxt(tmp_path / f"{name}.txt", a.reshape(-1), fmt="%.10g")
        np.savetxt(tmp_path / "time.txt", rec.t, fmt="%.10g")
        f, spec = tmp_path / "q.txt", LogSpec(file=tmp_path / "q.txt", preset=preset,
                                                current_gains=tuple(g))
    else:
        tname, fam = fams[preset]
        head = [tname] + [f"{b}_{j}" for b, _a in fam for j in range(n)]
        data = np.column_stack([rec.t] + [a for _b, a in fam])
        sep = " " if preset == "ur_rtde" else ","
        f = tmp_path / f"{preset}.csv"
        np.savetxt(f, data, delimiter=sep, header=sep.join(head), comments="", fmt="%.10g")
        spec = LogSpec(file=f, preset=preset, current_gains=tuple(g))
    got = load_log(spec, model.joint_names, model=model)
    np.testing.assert_allclose(got.t, rec.t, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.q, rec.q, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(got.qd, rec.qd, rtol=1e-8, atol=1e-9)
    if preset != "libfranka":
        np.testing.assert_allclose(got.tau_m, rec.tau_m, rtol=1e-8, atol=1e-8)
    else:
        assert got.tau_m is None
    if preset != "ur_rtde":
        np.testing.assert_allclose(got.tau_j, rec.tau_j, rtol=1e-8, atol=1e-8)
    else:
        assert got.tau_j is None
