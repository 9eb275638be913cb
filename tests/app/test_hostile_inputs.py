"""Hostile but plausible inputs of a new user (issue 13): each row gives the command, the exit
code and a fragment of the one-line message. Every row is refused (or answered) before any
trajectory is optimized or the twin runs, so the whole table takes seconds; the pipeline's
stages are replaced by a tripwire to prove it."""
from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest
import yaml

from identify.app import pipeline
from identify.app.cli import main

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"


def _base() -> dict:
    return {
        "name": "hostile",
        "arm": {"urdf": str(ASSETS / "cobot6.urdf"), "drives": str(ASSETS / "cobot6_drives.yaml"),
                "description": str(ASSETS / "cobot6.yaml")},
        "trajectories": {
            "excitation": {"harmonics": 3, "period_s": 4.0, "grid": 40, "starts": 1,
                           "max_iter": 60, "seed": 0},
            "validation": {"harmonics": 2, "period_s": 4.0, "grid": 40, "starts": 1,
                           "max_iter": 60, "seed": 1}},
        "twin": {"sample_rate_hz": 100, "settle_s": 0.1},
    }


def _write(tmp: Path, d: dict, name: str = "s.yaml") -> str:
    f = tmp / name
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return str(f)


# -- the inputs: each builds (argv) in a temporary folder ----------------------------------------
def period_3600(tmp):
    d = _base()
    d["trajectories"]["excitation"]["period_s"] = 3600.0
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def seeds_100000(tmp):
    d = _base()
    d["sweep"] = {"seeds": 100000}
    return ["sweep", _write(tmp, d), "--out", str(tmp / "out")]


def alias_bomb(tmp):
    text = 'name: &a ["x","x","x","x","x","x","x","x","x"]\n'
    prev = "a"
    for k in "bcdefghij":
        text += f"{k}: &{k} [" + ",".join([f"*{prev}"] * 9) + "]\n"
        prev = k
    f = tmp / "bomb.yaml"
    f.write_text(text)
    return ["run", str(f)]


def no_drives_on_twin(tmp):
    d = _base()
    del d["arm"]["drives"]
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def drives_of_another_arm(tmp):
    drv = yaml.safe_load((ASSETS / "cobot6_drives.yaml").read_text())
    drv["joints"] = drv["joints"][:5]
    (tmp / "drives5.yaml").write_text(yaml.safe_dump(drv))
    d = _base()
    d["arm"]["drives"] = str(tmp / "drives5.yaml")
    return ["run", _write(tmp, d)]


def description_of_another_arm(tmp):
    desc = yaml.safe_load((ASSETS / "cobot6.yaml").read_text())
    for i, r in enumerate(desc["mdh"]):
        r["joint"] = f"axis{i}"
    (tmp / "desc.yaml").write_text(yaml.safe_dump(desc))
    d = _base()
    d["arm"]["description"] = str(tmp / "desc.yaml")
    return ["run", _write(tmp, d)]


def rate_1e9_unquoted(tmp):
    text = Path(_write(tmp, _base())).read_text()
    assert "sample_rate_hz: 100" in text
    (tmp / "s.yaml").write_text(text.replace("sample_rate_hz: 100", "sample_rate_hz: 1.0e9"))
    return ["run", str(tmp / "s.yaml")]


def period_1ms(tmp):
    d = _base()
    d["trajectories"]["excitation"]["period_s"] = 0.001
    return ["run", _write(tmp, d)]


def _traj_file(tmp, path):
    d = _base()     # the validation trajectory: the excitation one must not be optimized first
    d["trajectories"]["validation"] = {"source": "file", "file": str(path)}
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def trajectory_is_passwd(tmp):
    (tmp / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    return _traj_file(tmp, tmp / "passwd")


def trajectory_is_other_yaml(tmp):
    (tmp / "t.yaml").write_text("just: some\nkeys: [1, 2]\n")
    return _traj_file(tmp, tmp / "t.yaml")


def trajectory_is_dev_zero(tmp):
    return _traj_file(tmp, "/dev/zero")


def _fit(tmp, log):
    d = _base()
    (tmp / "log.csv").write_text("0,0,0,0,0,0,0,1,1,1,1,1,1\n")
    d["fit"] = {"excitation": {"file": str(tmp / "log.csv"), "format": "csv",
                               "columns": {"time": 0, "q": [1, 2, 3, 4, 5, 6],
                                           "tau_j": [7, 8, 9, 10, 11, 12]}}}
    return ["fit", _write(tmp, d), "--log", str(log), "--out", str(tmp / "out")]


def log_is_dev_zero(tmp):
    return _fit(tmp, "/dev/zero")


def log_is_fifo(tmp):
    os.mkfifo(tmp / "pipe")
    return _fit(tmp, tmp / "pipe")


def log_is_directory(tmp):
    (tmp / "logs").mkdir()
    return _fit(tmp, tmp / "logs")


def scenario_is_dev_zero(tmp):
    return ["run", "/dev/zero"]


def scenario_is_directory(tmp):
    return ["run", str(tmp)]


def out_not_empty(tmp):
    (tmp / "out").mkdir()
    (tmp / "out" / "metrics.json").write_text("{}")
    return ["run", _write(tmp, _base()), "--out", str(tmp / "out")]


def out_read_only(tmp):
    # /sys refuses new entries even to root (permission bits alone would not stop root)
    return ["run", _write(tmp, _base()), "--out", "/sys/twinid-hostile-out"]


def out_below_a_file(tmp):
    (tmp / "afile").write_text("x")
    return ["run", _write(tmp, _base()), "--out", str(tmp / "afile" / "out")]


def out_in_use(tmp):
    import json
    (tmp / "out").mkdir()
    (tmp / "out" / ".twinid.lock").write_text(json.dumps(
        {"pid": os.getpid(), "host": os.uname().nodename, "command": "run", "started": "now"}))
    return ["run", _write(tmp, _base()), "--out", str(tmp / "out")]


def version(tmp):
    return ["--version"]


def report_of_empty_folder(tmp):
    return ["report", str(tmp)]


# -- the excitation design's keys, refused when they meet the arm (load-time ones:
#    tests/scenario/test_scenario.py) --------------------------------------------------------
def _excitation(tmp, which="excitation", **keys):
    d = _base()
    d["trajectories"][which].update(keys)
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def start_pose_inside_a_box(tmp):
    return _excitation(tmp, obstacles=[{"type": "box", "name": "lamp", "center_m": [0, 0, 0.7],
                                        "size_m": [0.2, 0.2, 0.2]}])


def validation_start_in_self_collision(tmp):
    # found before the excitation trajectory is optimized (the tripwire)
    return _excitation(tmp, "validation", start_deg=[8, -148, 131, 26, -178, 98])


def table_plane_flipped(tmp):
    return _excitation(tmp, obstacles=[{"type": "plane", "normal": [0, 0, -1],
                                        "point_m": [0, 0, 0]}])


def margin_half_a_metre(tmp):
    return _excitation(tmp, collision_margin_m=0.5)


# -- --force never deletes the command's own inputs (issue 25): each input lies in the outputs
#    --force would remove; the input must still be there after the refusal (FORCE_INPUTS) ----
def _out_with_run(tmp) -> Path:
    """tmp/out holding a previous run's outputs."""
    out = tmp / "out"
    (out / "recordings").mkdir(parents=True)
    (out / "metrics.json").write_text("{}")
    return out


def force_fit_log_in_out(tmp):
    out = _out_with_run(tmp)
    (out / "recordings" / "log.csv").write_text("0,0,0,0,0,0,0,1,1,1,1,1,1\n")
    return _fit(tmp, out / "recordings" / "log.csv") + ["--force"]


def force_fit_section_log_in_out(tmp):
    argv = force_fit_log_in_out(tmp)
    d = yaml.safe_load(Path(argv[1]).read_text())
    d["fit"]["excitation"]["file"] = str(tmp / "out" / "recordings" / "log.csv")
    return ["fit", _write(tmp, d), "--out", str(tmp / "out"), "--force"]


def force_trajectory_file_in_out(tmp):
    import math
    import numpy as np
    from identify.excitation.fourier import FourierTrajectory
    out = _out_with_run(tmp)
    (out / "trajectories").mkdir()
    a = np.zeros((6, 2))
    a[0] = [0.05, -0.05]
    FourierTrajectory(q0=np.zeros(6), a=a, b=np.zeros((6, 2)), wf=2 * math.pi / 4.0).save(
        out / "trajectories" / "validation.yaml")
    return _traj_file(tmp, out / "trajectories" / "validation.yaml") + ["--force"]


def force_scenario_in_out(tmp):
    out = _out_with_run(tmp)
    return ["run", _write(out, _base(), "scenario.yaml"), "--out", str(out), "--force"]


def force_closed_loop_model_is_out(tmp):
    out = _out_with_run(tmp)
    (out / "identified.urdf").write_text((ASSETS / "cobot6.urdf").read_text())
    d = _base()
    d["closed_loop"] = {"model": str(out)}
    return ["run", _write(tmp, d), "--out", str(out), "--force"]


def force_out_inside_closed_loop_model(tmp):
    argv = force_closed_loop_model_is_out(tmp)
    (tmp / "out" / "plots").mkdir()
    (tmp / "out" / "plots" / "a.png").write_bytes(b"png")
    return argv[:3] + [str(tmp / "out" / "plots"), "--force"]


def force_payload_arm_model_in_out(tmp):
    out = _out_with_run(tmp)
    (out / "identified.urdf").write_text((ASSETS / "cobot6.urdf").read_text())
    d = _base()
    d["payload"] = {"arm_model": str(out / "identified.urdf")}
    d["arm"]["payload"] = {"mass_kg": 1.0, "com_m": [0, 0, 0.05]}
    return ["run", _write(tmp, d), "--out", str(out), "--force"]


def force_hardware_recordings_in_out(tmp):
    out = _out_with_run(tmp)
    (out / "recordings" / "run00_20261202-031500").mkdir()
    (out / "recordings" / "run00_20261202-031500" / "chunk-000000.npz").write_bytes(b"rows")
    return ["run", _write(tmp, _base()), "--out", str(out), "--force"]


def out_symlink_loop(tmp):
    os.symlink(tmp / "b", tmp / "a")
    os.symlink(tmp / "a", tmp / "b")
    return ["run", _write(tmp, _base()), "--out", str(tmp / "a" / "run")]


def out_dangling_symlink(tmp):
    os.symlink(tmp / "gone", tmp / "out")
    return ["run", _write(tmp, _base()), "--out", str(tmp / "out")]


def name_300_characters(tmp):
    d = _base()
    d["name"] = "n" * 300
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def _processing(tmp, **keys):
    d = _base()
    d["processing"] = keys
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def delay_5_s(tmp):
    return _processing(tmp, delay=5.0)


def smooth_passes_3000(tmp):
    return _processing(tmp, smooth_passes=3000)


def delay_auto_reaches_the_work(tmp):
    return _processing(tmp, delay="auto")


def _held_recording(tmp, arm_meta: dict) -> str:
    """A 2 s twin-like recording of the reference arm (slow sines) with meta["arm"] = arm_meta."""
    import numpy as np
    from identify.backend.recording import Recording
    t = np.arange(200) / 100.0
    q = 0.2 * np.sin(np.outer(t, np.arange(1, 7)) * 0.5)
    rec = Recording(t=t, q=q, rate_hz=100.0, joint_names=[f"joint{j}" for j in range(1, 7)],
                    tau_j=np.zeros_like(q), tau_m=np.zeros_like(q), meta={"arm": arm_meta})
    return str(rec.save(tmp / "held.npz"))


def _held(tmp, arm_meta):
    d = _base()
    d["trajectories"]["excitation"].update({"objective": "d_optimal",
                                            "held": [_held_recording(tmp, arm_meta)]})
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def held_recorded_with_a_payload(tmp):
    return _held(tmp, {"urdf": str(ASSETS / "cobot6.urdf"),
                       "payload": {"mass_kg": 1.5, "com_m": [0.0, 0.0, 0.05]}})


def held_recorded_on_another_arm(tmp):
    other = tmp / "other.urdf"
    other.write_text((ASSETS / "cobot6.urdf").read_text().replace("<mass value=\"", "<mass value=\"1", 1))
    return _held(tmp, {"urdf": str(other), "payload": None})


def held_of_the_same_arm(tmp):       # read: the design starts (the tripwire, exit 130)
    return _held(tmp, {"urdf": str(ASSETS / "cobot6.urdf"), "payload": None})


# -- remote resources and the closed loop's contact: refused before any design work (issue 25)
def _contact(tmp, time_s, trajectory="validation"):
    d = _base()
    d["closed_loop"] = {"trajectory": trajectory,
                        "collision": {"contact": {"time_s": time_s}}}
    return d


def contact_after_the_trajectory(tmp):
    return ["run", _write(tmp, _contact(tmp, 9.0)), "--out", str(tmp / "out")]


def contact_after_a_trajectory_file(tmp):
    import math
    import numpy as np
    from identify.excitation.fourier import FourierTrajectory
    a = np.zeros((6, 2))
    a[0] = [0.05, -0.05]
    FourierTrajectory(q0=np.zeros(6), a=a, b=np.zeros((6, 2)), wf=2 * math.pi / 3.0).save(
        tmp / "v.yaml")
    d = _contact(tmp, 3.5)      # inside the scenario's period_s (4 s), past the file's 3 s
    d["trajectories"]["validation"] = {"source": "file", "file": str(tmp / "v.yaml")}
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def payload_10_t(tmp):                 # was blamed on the twin's PID gains
    d = _base()
    d["arm"]["payload"] = {"mass_kg": 10000.0, "com_m": [0.0, 0.0, 0.05]}
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def hardware_port_missing(tmp):
    d = _base()
    d["backend"] = "hardware"
    d["hardware"] = {"iface": "twinid-none0", "armed": True,
                     "config": str(ASSETS / "cobot6_ethercat.yaml")}
    del d["twin"]
    return ["run", _write(tmp, d), "--out", str(tmp / "out")]


def dask_scheduler_unreachable(tmp):
    import socket
    with socket.socket() as sk:         # a port nobody listens on: bound, then released
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    d = _base()
    d["sweep"] = {"seeds": 2}
    return ["sweep", _write(tmp, d), "--out", str(tmp / "out"), "--dask",
            f"tcp://127.0.0.1:{port}"]


#: each --force row and the input (relative to tmp) that must survive it
FORCE_INPUTS = {
    force_fit_log_in_out: "out/recordings/log.csv",
    force_fit_section_log_in_out: "out/recordings/log.csv",
    force_trajectory_file_in_out: "out/trajectories/validation.yaml",
    force_scenario_in_out: "out/scenario.yaml",
    force_closed_loop_model_is_out: "out/identified.urdf",
    force_out_inside_closed_loop_model: "out/plots/a.png",
    force_payload_arm_model_in_out: "out/identified.urdf",
    force_hardware_recordings_in_out: "out/recordings/run00_20261202-031500/chunk-000000.npz",
}


CASES = [
    # (input, exit code, fragment of the message)
    (out_symlink_loop, 2, "--out {tmp}/a/run: {tmp}/a is a symlink loop"),
    (out_dangling_symlink, 2, "--out {tmp}/out: {tmp}/out is a symlink to {tmp}/gone, which "
                              "does not exist"),
    (name_300_characters, 2, "s.yaml:1: name: 300 bytes long; at most 120"),
    (delay_5_s, 2, "processing.delay: 5 s is 125% of the 4 s trajectory: a torque delay is a few "
                   "milliseconds (bound 0.2 s"),
    (smooth_passes_3000, 2, "processing.smooth_passes: 3000 passes is beyond the bound of 200"),
    # documented, was refused as "must be a number": now accepted (the tripwire: exit 130)
    (delay_auto_reaches_the_work, 130, "interrupted"),
    (held_recorded_with_a_payload, 2, "trajectories.excitation.held[0]: {tmp}/held.npz was "
                                      "recorded with payload 1.5 kg at [0.0, 0.0, 0.05] m, the "
                                      "scenario's arm.payload is none"),
    (held_recorded_on_another_arm, 2, "trajectories.excitation.held[0]: {tmp}/held.npz was "
                                      "recorded on the arm of {tmp}/other.urdf"),
    (held_of_the_same_arm, 130, "interrupted"),
    (force_fit_log_in_out, 2, "--log: {tmp}/out/recordings/log.csv is in the run folder "
                              "--out {tmp}/out, whose outputs --force would replace"),
    (force_fit_section_log_in_out, 2, "fit.excitation.file: {tmp}/out/recordings/log.csv is in "
                                      "the run folder"),
    (force_trajectory_file_in_out, 2, "trajectories.validation.file: "
                                      "{tmp}/out/trajectories/validation.yaml is in the run folder"),
    (force_scenario_in_out, 2, "the scenario file: {tmp}/out/scenario.yaml is in the run folder"),
    (force_closed_loop_model_is_out, 2, "closed_loop.model: {tmp}/out is the run folder"),
    (force_out_inside_closed_loop_model, 2, "closed_loop.model: {tmp}/out holds the run folder "
                                            "--out {tmp}/out/plots"),
    (force_payload_arm_model_in_out, 2, "payload.arm_model: {tmp}/out/identified.urdf is in the "
                                        "run folder"),
    (force_hardware_recordings_in_out, 2, "recordings/run00_20261202-031500 holds samples "
                                          "recorded on the arm (hardware run), which --force "
                                          "never removes"),
    (start_pose_inside_a_box, 2, "s.yaml:15: trajectories.excitation.obstacles[0]: infeasible: "
                                 "obstacle 'lamp' (obstacles[0]): at the start pose"),
    (validation_start_in_self_collision, 2,
     "trajectories.validation.start_deg: infeasible: the start pose [8.0, -148.0, 131.0, 26.0, "
     "-178.0, 98.0] deg puts link1 cylinder / link6 cylinder in contact"),
    (table_plane_flipped, 2, "trajectories.excitation.obstacles[0]: infeasible: obstacle "
                             "'plane 0' (obstacles[0]): at the start pose"),
    (margin_half_a_metre, 2, "trajectories.excitation.collision_margin_m: infeasible: a "
                             "collision margin of 500.0 mm would leave"),
    (contact_after_the_trajectory, 2, "closed_loop.collision.contact.time_s: 9 s is not within "
                                      "the validation trajectory the closed loop runs (0 .. 4 s"),
    (contact_after_a_trajectory_file, 2, "closed_loop.collision.contact.time_s: 3.5 s is not "
                                         "within the validation trajectory the closed loop runs "
                                         "(0 .. 3 s"),
    (payload_10_t, 2, "arm.payload.mass_kg: 10000 kg: the arm cannot hold this payload in any "
                      "pose: in the most favourable of 512 poses sampled within the joint limits, "
                      "joint joint"),
    (hardware_port_missing, 2, "hardware.iface: no network interface named 'twinid-none0'"),
    (dask_scheduler_unreachable, 2, "--dask / sweep.dask_address: no Dask scheduler answers at "
                                    "tcp://127.0.0.1:"),
    (period_3600, 2, "pass --yes"),
    (seeds_100000, 2, "900,000 runs"),
    (alias_bomb, 2, "expands to more than"),
    (no_drives_on_twin, 2, "arm.drives: backend: twin needs arm.drives"),
    (drives_of_another_arm, 2, "arm.drives: drives5.yaml does not match the URDF"),
    (description_of_another_arm, 2, "arm.description: desc.yaml does not match the URDF"),
    (rate_1e9_unquoted, 2, "must divide the 1000 Hz control rate"),   # read as a number
    (period_1ms, 2, "the smallest period for 40 grid points at 100 Hz and 3 harmonics"),
    (trajectory_is_passwd, 2, "not a trajectory file"),
    (trajectory_is_other_yaml, 2, "not a trajectory file"),
    (trajectory_is_dev_zero, 2, "is a device, not a regular file"),
    (log_is_dev_zero, 2, "the log is a device"),
    (log_is_fifo, 2, "the log is a named pipe (FIFO)"),
    (log_is_directory, 2, "the log is a directory"),
    (scenario_is_dev_zero, 2, "the scenario is a device"),
    (scenario_is_directory, 2, "the scenario is a directory"),
    (out_not_empty, 2, "the folder is not empty (metrics.json); pass --force"),
    (out_read_only, 2, "cannot write in /sys/twinid-hostile-out"),
    (out_below_a_file, 2, "is a file, not a folder"),
    (out_in_use, 2, "in use by another twinid command"),
    (version, 0, "twinid 0."),
    (report_of_empty_folder, 2, "nor a trajectory folder"),
]


@pytest.fixture
def tripwire(monkeypatch):
    """Any trajectory optimization, twin run or log read fails the test: the inputs above must
    be refused before the work starts."""
    def boom(*a, **k):
        raise KeyboardInterrupt("work started before the input was refused")   # exit 130
    from identify.app import sweep
    from identify.app import trajectories as T
    monkeypatch.setattr(T, "optimize_excitation", boom)
    monkeypatch.setattr(pipeline, "record", boom)
    monkeypatch.setattr(pipeline, "load_segments", boom)
    monkeypatch.setattr(sweep, "trajectories", boom)


@pytest.mark.parametrize("make, code, fragment", CASES, ids=[c[0].__name__ for c in CASES])
def test_hostile_input(make, code, fragment, tmp_path, capsys, tripwire, monkeypatch, model_cache):
    monkeypatch.setenv("TWINID_CACHE", str(model_cache))
    argv = make(tmp_path)
    try:
        got = main(argv)
    except SystemExit as exc:          # argparse's --version
        got = exc.code or 0
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    assert got == code, text
    assert fragment.format(tmp=tmp_path) in text, text
    if code == 2:
        assert "Traceback" not in text
    if make in FORCE_INPUTS:            # refused before anything was removed
        assert (tmp_path / FORCE_INPUTS[make]).is_file()
        assert (tmp_path / "out" / "metrics.json").is_file()


def test_trajectory_files_are_checked_before_any_optimization(tmp_path, capsys, tripwire,
                                                             monkeypatch, model_cache):
    """A bad validation file is refused before the excitation trajectory is optimized (the
    tripwire turns an optimization into exit 130)."""
    monkeypatch.setenv("TWINID_CACHE", str(model_cache))
    assert main(trajectory_is_other_yaml(tmp_path)) == 2
    assert "trajectories.validation.file" in capsys.readouterr().err


# -- logs of a user's arm (issue 25): each row changes a log simulated from the arm's URDF
#    (identify.logs.simulate: the truth is known) and is refused naming the file, key, joint or
#    time span, or read as it should be -----------------------------------------------------
@pytest.fixture(scope="module")
def arm_log(tmp_path_factory):
    """(model, csv file, gains, column map) of an 8 s, 100 Hz simulated log with currents."""
    from identify.logs.simulate import simulate, write_log
    from identify.model.robot_model import RobotModel
    model = RobotModel.from_urdf(str(ASSETS / "cobot6.urdf"))
    log = simulate(model, duration_s=8.0, rate_hz=100.0, signals="both", seed=0)
    folder = tmp_path_factory.mktemp("armlog")
    f = write_log(log, folder, "csv")
    gains = yaml.safe_load((folder / "truth.yaml").read_text())["gains"]
    cols = {"time": "t", "q": [f"q_{j}" for j in range(6)], "i_m": [f"i_m_{j}" for j in range(6)]}
    return model, Path(f), [float(g) for g in gains], cols


def _rows(f: Path, keep) -> Path:
    """A copy of the CSV log `f` with only the data rows keep(t) is true for."""
    import numpy as np
    lines = f.read_text().splitlines()
    t = np.array([float(ln.split(",")[0]) for ln in lines[1:]])
    out = f.with_name(f"cut_{abs(hash(keep)) % 10**8}.csv")
    out.write_text("\n".join([lines[0]] + [ln for ln, k in zip(lines[1:], keep(t)) if k]) + "\n")
    return out


def _nan_row(f: Path, row: int, col: int) -> Path:
    """A copy of `f` with cell `col` of line `row` + 1 (1-based, the header is line 1) NaN."""
    lines = f.read_text().splitlines()
    cells = lines[row].split(",")
    cells[col] = "nan"
    lines[row] = ",".join(cells)
    out = f.with_name(f"nan_{row}_{col}.csv")
    out.write_text("\n".join(lines) + "\n")
    return out


def log_gap_2s(f, g):
    return {"file": _rows(f, lambda t: (t < 3.0) | (t >= 5.0))}


def log_gap_8_samples_filled(f, g):      # short losses are bridged by the resampling
    return {"file": _rows(f, lambda t: (t < 3.0) | (t >= 3.08))}


def log_one_negative_gain(f, g):
    return {"current_gains": g[:2] + [-g[2]] + g[3:]}


def log_all_gains_negative(f, g):
    return {"current_gains": [-x for x in g]}


def log_radians_read_as_degrees(f, g):
    return {"position_unit": "deg"}


def log_window_past_the_end(f, g):
    return {"window_s": [6.0, 20.0]}


def log_window_rows_past_the_end(f, g):
    return {"window_rows": [700, 900]}


def log_window_rows_six(f, g):         # passed the window check, failed in processing
    return {"window_rows": [0, 6]}


def log_nan_outside_the_window(f, g):
    return {"file": _nan_row(f, 50, 3), "window_s": [2.0, 7.5]}


def log_nan_inside_the_window(f, g):
    return {"file": _nan_row(f, 500, 3), "window_s": [2.0, 7.5]}


LOG_CASES = [
    # (change of the log spec, None: read, else a fragment of the LogError)
    (log_gap_2s, "time: 1 gap(s) in the samples longer than 10 sample periods (0.1 s at 100 Hz), "
                 "from the log's start: 2.990..5.000 s (2.01 s, after line 301); they would be "
                 "filled by interpolation: fit the part without a gap (window_s: [0, 2.990])"),
    (log_gap_8_samples_filled, None),
    (log_one_negative_gain, "motor torque of joint joint3 is -0.998x the URDF's rigid-body "
                             "torque on the log's motion (about +1 expected): its sign is flipped; "
                             "check current_gains (joint joint3)"),
    (log_all_gains_negative, "motor torque of joint joint1 is -1."),
    (log_radians_read_as_degrees, "the log is probably in radians read as degrees: set "
                                  "position_unit: rad"),
    (log_window_past_the_end, "window_s [6.0, 20.0] reaches beyond the log (it spans 0..7.99 s "
                              "from its start)"),
    (log_window_rows_past_the_end, "window_rows [700, 900] reaches beyond the log (it spans "
                                   "rows 0..800)"),
    (log_window_rows_six, "window_rows [0, 6] keeps 6 samples (processing needs at least 8; "
                          "the log spans rows 0..800)"),
    (log_nan_outside_the_window, None),
    (log_nan_inside_the_window, "q of joint 3 is not finite at line 501"),
]


@pytest.mark.parametrize("change, fragment", LOG_CASES, ids=[c[0].__name__ for c in LOG_CASES])
def test_hostile_log(change, fragment, arm_log):
    from identify.logs.load import LogError, load_log
    from identify.scenario.spec import ColumnMap, LogSpec
    model, f, gains, cols = arm_log
    keys = {"file": f, "format": "csv", "columns": ColumnMap(**cols), "current_gains": gains}
    keys.update(change(f, gains))
    spec = LogSpec(**keys)
    if fragment is None:
        rec = load_log(spec, model.joint_names, model=model, warnings=[])
        assert rec.t.shape[0] >= 500 and rec.tau_m is not None
        assert all(v is None or bool((v == v).all()) for v in (rec.q, rec.tau_m))
        return
    with pytest.raises(LogError) as exc:
        load_log(spec, model.joint_names, model=model, warnings=[])
    text = " ".join(str(exc.value).split())
    assert text.startswith(str(spec.file)) and fragment in text, text


@pytest.fixture(scope="module")
def ur_log(arm_log, tmp_path_factory):
    """The same motion as a Universal Robots RTDE export (preset ur_rtde, space separated)."""
    from identify.logs.simulate import simulate, write_log
    model, _, gains, _ = arm_log
    log = simulate(model, duration_s=8.0, rate_hz=100.0, signals="both", seed=0)
    return Path(write_log(log, tmp_path_factory.mktemp("urlog"), "ur_rtde"))


def _ur_edit(f: Path, name: str, drop=(), add=()) -> Path:
    """A copy of the RTDE log `f` without the columns `drop`, with columns `add` (value 0.1)."""
    lines = f.read_text().splitlines()
    keep = [i for i, h in enumerate(lines[0].split(" ")) if h not in drop]
    rows = [[c for i, c in enumerate(ln.split(" ")) if i in keep] for ln in lines]
    rows = [r + (list(add) if k == 0 else ["0.1"] * len(add)) for k, r in enumerate(rows)]
    out = f.with_name(name)
    out.write_text("\n".join(" ".join(r) for r in rows) + "\n")
    return out


PRESET_CASES = [
    # (columns dropped, columns added, fragment of the LogError)
    (("actual_current_5",), (), "preset ur_rtde: i_m: no column actual_current_5 (joint 6) in "
                                "the header; the file has it for joints 1, 2, 3, 4, 5"),
    (("actual_q_5",), (), "preset ur_rtde: q: no column actual_q_5 (joint 6) in the header"),
    ((), ("actual_q_6", "actual_qd_6"), "preset ur_rtde: q: the log has 7 joints "
                                        "(actual_q_0..actual_q_6), the arm 6"),
]


@pytest.mark.parametrize("drop, add, fragment", PRESET_CASES,
                         ids=["current_column_missing", "q_column_missing", "seven_joint_log"])
def test_hostile_preset_log(drop, add, fragment, arm_log, ur_log):
    from identify.logs.load import LogError, load_log
    from identify.scenario.spec import LogSpec
    model, _, gains, _ = arm_log
    ok = load_log(LogSpec(file=ur_log, preset="ur_rtde", current_gains=gains),
                  model.joint_names, model=model, warnings=[])
    assert ok.tau_m is not None                      # the unchanged export reads
    f = _ur_edit(ur_log, f"edit_{len(drop)}_{len(add)}.csv", drop, add)
    with pytest.raises(LogError) as exc:
        load_log(LogSpec(file=f, preset="ur_rtde", current_gains=gains), model.joint_names,
                 model=model, warnings=[])
    assert str(exc.value).startswith(str(f)) and fragment in str(exc.value), str(exc.value)


def test_payload_fit_from_a_log_in_degrees_is_refused(arm_log, tmp_path, capsys, monkeypatch,
                                                      model_cache):
    """The payload fit reads its log with the normal fit's unit guards: positions logged in
    degrees but declared in radians are refused naming the joint (they gave 0.435 kg for a
    1.5 kg payload, exit 0). The same log in radians is read (the fit then runs)."""
    import numpy as np
    monkeypatch.setenv("TWINID_CACHE", str(model_cache))
    model, f, gains, cols = arm_log
    lines = f.read_text().splitlines()
    rows = [[float(x) for x in ln.split(",")] for ln in lines[1:]]
    deg = np.array(rows)
    deg[:, 1:7] = np.rad2deg(deg[:, 1:7])
    log = tmp_path / "deg.csv"
    np.savetxt(log, deg, delimiter=",", header=lines[0], comments="")
    d = _base()
    d["arm"]["payload"] = {"mass_kg": 1.5, "com_m": [0.01, -0.02, 0.05]}
    d["payload"] = {"arm_model": str(ASSETS / "cobot6.urdf"), "signal": "tau_m"}
    d["fit"] = {"excitation": {"file": str(log), "format": "csv", "columns": cols,
                               "current_gains": gains}}
    rc = main(["-q", "fit", _write(tmp_path, d), "--out", str(tmp_path / "out")])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2, err
    assert f"{log}: q of joint joint" in err and "the log is probably in degrees: set " \
                                                 "position_unit: deg" in err, err


def test_two_sweeps_on_one_folder(tmp_path, capsys, tripwire, monkeypatch, model_cache):
    """A second sweep on a folder another process is sweeping is refused (exit 2, naming the
    other) before anything runs; once that process has ended, the folder is free again (the
    kernel releases the lock: no stale lock)."""
    import subprocess
    import sys
    monkeypatch.setenv("TWINID_CACHE", str(model_cache))
    out = tmp_path / "sweep"
    out.mkdir()
    hold = ("import fcntl, sys, time; f = open(sys.argv[1], 'a+'); "
            "fcntl.flock(f, fcntl.LOCK_EX); f.write('{\"pid\": 1, \"command\": \"sweep\"}'); "
            "f.flush(); print('held', flush=True); time.sleep(60)")
    other = subprocess.Popen([sys.executable, "-c", hold, str(out / ".twinid-sweep.lock")],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        d = _base()
        d["sweep"] = {"seeds": 2}
        argv = ["sweep", _write(tmp_path, d), "--out", str(out)]
        assert main(argv) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"{out}: in use by another twinid command" in err and "choose another --out" in err
    finally:
        other.kill()
        other.wait()
    assert main(argv) == 130                    # free again: the sweep starts (the tripwire)


@pytest.mark.parametrize("signum", [9, 15], ids=["SIGKILL", "SIGTERM"])
def test_sweep_workers_die_with_the_driver(signum, tmp_path, model_cache):
    """The sweep driver killed (SIGKILL) or terminated (SIGTERM: exit 143 within a second):
    its worker processes end too (a ~200 MB worker stayed alive)."""
    import signal as _signal
    import subprocess
    import sys
    import time
    from conftest import tiny_scenario
    d = tiny_scenario("tiny_sweep", sweep={"noise": {"torque": [0.0, 0.1, 0.2, 0.3]}, "seeds": 1})
    f = tmp_path / "sweep.yaml"
    f.write_text(yaml.safe_dump(d))
    env = dict(os.environ, PYTHONPATH=str(ROOT), TWINID_CACHE=str(model_cache))
    proc = subprocess.Popen([sys.executable, "-m", "identify", "-q", "sweep", str(f), "--out",
                             str(tmp_path / "out"), "--workers", "1"], env=env, cwd=ROOT,
                            start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)

    def children():
        try:
            return [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children")
                    .read_text().split()]
        except OSError:
            return []

    def alive(pid):
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] not in "ZX"
        except OSError:
            return False
    try:
        end = time.monotonic() + 300
        while not (tmp_path / "out" / "trajectories").exists() or len(children()) < 2:
            assert proc.poll() is None and time.monotonic() < end, proc.stderr.read()
            time.sleep(0.05)       # the worker (and the resource tracker) are running
        time.sleep(1.0)
        kids = children()
        t0 = time.monotonic()
        os.kill(proc.pid, signum)
        rc = proc.wait(timeout=30)
        dt = time.monotonic() - t0
        end = time.monotonic() + 3.0
        while any(alive(p) for p in kids) and time.monotonic() < end:
            time.sleep(0.05)
        assert not any(alive(p) for p in kids), f"workers {kids} outlived the driver"
        if signum == _signal.SIGTERM:
            assert rc == 143 and dt < 1.0, (rc, dt)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, _signal.SIGKILL)


def test_full_disk_names_the_file(tmp_path, monkeypatch):
    """A write failing for lack of space (ENOSPC from the kernel, here injected at the file's
    write) is reported with the file it was writing, and leaves no partial file."""
    import errno
    from identify.common import fileio
    real = os.fdopen

    class Full:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, data):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(fileio.os, "fdopen", lambda fd, mode: Full(real(fd, mode)))
    target = tmp_path / "metrics.json"
    with pytest.raises(OSError) as exc:
        fileio.atomic_write_text(target, "{}")
    assert exc.value.errno == errno.ENOSPC and exc.value.filename == str(target)
    assert str(target) in str(exc.value) and "No space left on device" in str(exc.value)
    assert list(tmp_path.iterdir()) == []
