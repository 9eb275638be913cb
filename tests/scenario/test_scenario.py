"""Scenario loading: strict validation with one-line `file:line: key.path: message` errors.

Table-driven: every malformed scenario marks its offending line with ``# <-``; the test checks
that `twinid run` exits with code 2, prints exactly one line naming the file, that line and the
key path, and never a traceback -- before anything runs.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import yaml

from identify.app.cli import main
from identify.scenario.spec import ScenarioError, schema_table
from identify.scenario.load import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[2]
URDF = ROOT / "assets" / "cobot6.urdf"
DRIVES = ROOT / "assets" / "cobot6_drives.yaml"

VALID = f"""\
name: t
arm:
  urdf: {URDF}
  drives: {DRIVES}
backend: twin
trajectories:
  excitation: {{harmonics: 3, period_s: 4.0}}
  validation: {{harmonics: 2, period_s: 4.0, seed: 1}}
twin:
  sample_rate_hz: 100
processing:
  smooth_passes: 20
identification:
  joint_model: both
"""


def _replace(old: str, new: str) -> str:
    assert old in VALID, old
    return VALID.replace(old, new)


# (id, scenario text with the offending line marked "# <-", expected key path, message fragment)
CASES = [
    ("unknown top-level key", VALID + "colour: red  # <-\n", "colour", "unknown key"),
    ("unknown nested key, suggestion",
     _replace("excitation: {harmonics: 3, period_s: 4.0}",
              "excitation: {harmnics: 3, period_s: 4.0}  # <-"),
     "trajectories.excitation.harmnics", "did you mean 'harmonics'"),
    ("wrong type string for int",
     _replace("excitation: {harmonics: 3,", "excitation: {harmonics: five,") .replace(
         "period_s: 4.0}\n  validation", "period_s: 4.0}  # <-\n  validation"),
     "trajectories.excitation.harmonics", "must be an integer"),
    ("int out of range",
     _replace("excitation: {harmonics: 3, period_s: 4.0}",
              "excitation: {harmonics: 0, period_s: 4.0}  # <-"),
     "trajectories.excitation.harmonics", ">= 1"),
    ("negative period",
     _replace("excitation: {harmonics: 3, period_s: 4.0}",
              "excitation: {harmonics: 3, period_s: -4.0}  # <-"),
     "trajectories.excitation.period_s", "> 0"),
    ("bool where a number is expected",
     _replace("excitation: {harmonics: 3, period_s: 4.0}",
              "excitation: {harmonics: 3, period_s: true}  # <-"),
     "trajectories.excitation.period_s", "must be a number"),
    ("limit scale above 1",
     _replace("excitation: {harmonics: 3, period_s: 4.0}",
              "excitation: {harmonics: 3, period_s: 4.0, limit_scale: 1.5}  # <-"),
     "trajectories.excitation.limit_scale", "<= 1.0"),
    ("unknown backend", _replace("backend: twin", "backend: simulator  # <-"), "backend",
     "must be one of twin, hardware"),
    ("missing file", _replace(f"urdf: {URDF}", "urdf: no/such/arm.urdf  # <-"), "arm.urdf",
     "file not found"),
    ("missing required key", _replace(f"arm:\n  urdf: {URDF}\n", "arm:  # <-\n"), "arm",
     "missing required key 'urdf'"),
    ("duplicate key", _replace("backend: twin\n", "backend: twin\nbackend: twin  # <-\n"),
     "backend", "duplicate key"),
    ("YAML syntax error",
     _replace("backend: twin", "backend: twin: hardware  # <-"),
     "", "YAML syntax error"),
    ("twin: unknown setting", _replace("  sample_rate_hz: 100", "  sampel_rate_hz: 100  # <-"),
     "twin.sampel_rate_hz", "did you mean 'sample_rate_hz'"),
    ("twin: out-of-range setting (twin's own validator)",
     _replace("  sample_rate_hz: 100", "  sample_rate_hz: 333  # <-"),
     "twin.sample_rate_hz", "1000"),
    ("twin: wrong type", _replace("  sample_rate_hz: 100", "  sample_rate_hz: 100\n  seed: abc  # <-"),
     "twin.seed", "must be a number"),
    ("twin: per-joint list of strings",
     _replace("  sample_rate_hz: 100", "  sample_rate_hz: 100\n  torque_noise_Nm: [a, b]  # <-"),
     "twin.torque_noise_Nm", "list of numbers"),
    ("processing: unknown key", _replace("  smooth_passes: 20", "  smoothing: 20  # <-"),
     "processing.smoothing", "unknown key"),
    ("processing: bad value (ProcessingSettings' own check)",
     _replace("  smooth_passes: 20", "  smooth_passes: 20\n  velocity: gyro  # <-"),
     "processing.velocity", "velocity"),
    ("unknown estimator",
     _replace("  joint_model: both", "  joint_model: both\n  estimator: lasso  # <-"),
     "identification.estimator", "one of ols, wls, ridge"),
    ("unknown friction term in a list",
     _replace("  joint_model: both", "  joint_model: both\n  friction_terms:\n    - viscous\n"
                                    "    - sticky  # <-"),
     "identification.friction_terms[1]", "one of viscous"),
    ("start pose with the wrong number of joints",
     _replace("excitation: {harmonics: 3, period_s: 4.0}",
              "excitation: {harmonics: 3, period_s: 4.0, start_deg: [0, -90]}  # <-"),
     "trajectories.excitation.start_deg", "one angle per joint (6)"),
    ("source file without a file",
     _replace("excitation: {harmonics: 3, period_s: 4.0}",
              "excitation: {harmonics: 3, period_s: 4.0, source: file}  # <-"),
     "trajectories.excitation.source", "needs the key 'file'"),
    ("validation identical to excitation",
     _replace("validation: {harmonics: 2, period_s: 4.0, seed: 1}",
              "validation: {harmonics: 3, period_s: 4.0, seed: 0}  # <-"),
     "trajectories.validation.seed", "identical"),
    ("negative noise level", VALID + "sweep:\n  noise:\n    position:\n      - -1.0e-3  # <-\n",
     "sweep.noise.position[0]", ">= 0"),
    ("unknown noise channel", VALID + "sweep:\n  noise:\n    temperature: [1.0]  # <-\n",
     "sweep.noise.temperature", "unknown noise channel"),
    ("together with unequal level counts",
     VALID + "sweep:\n  noise: {position: [0, 1.0e-4], torque: [0, 0.1, 0.2]}\n"
             "  combine: [together]  # <-\n",
     "sweep.combine", "same number of levels"),
    ("zero Monte Carlo seeds", VALID + "sweep:\n  seeds: 0  # <-\n", "sweep.seeds", ">= 1"),
    ("log without any torque channel",
     VALID + f"fit:\n  excitation:\n    file: {DRIVES}\n    format: csv\n"
             "    columns:  # <-\n      time: 0\n      q: [1, 2, 3, 4, 5, 6]\n",
     "fit.excitation.columns", "at least one torque channel"),
    ("named CSV columns without a header",
     VALID + f"fit:\n  excitation:\n    file: {DRIVES}\n    header: false\n    columns:\n"
             "      time: t\n      q: [q1, q2, q3, q4, q5, q6]  # <-\n      tau_j: [1, 2, 3, 4, 5, 6]\n",
     "fit.excitation.columns.q", "header: true"),
    ("payload with zero mass",
     _replace(f"  drives: {DRIVES}\n", f"  drives: {DRIVES}\n  payload:\n    mass_kg: 0  # <-\n"),
     "arm.payload.mass_kg", "> 0.0"),
    ("hardware backend without interface",
     _replace("backend: twin", "backend: hardware").replace(
         "twin:\n  sample_rate_hz: 100\n", "") + "hardware:  # <-\n  armed: false\n",
     "hardware.iface", "network interface"),
    ("bad hardware option in a twin scenario (checked whatever the backend)",
     VALID + "hardware:\n  options:\n    record_rate_hz: -5  # <-\n",
     "hardware.options.record_rate_hz", "positive number"),
    ("misspelt hardware option", VALID + "hardware:\n  options:\n    recrd_rate_hz: 5  # <-\n",
     "hardware.options.recrd_rate_hz", "did you mean 'record_rate_hz'"),
    ("section of the wrong type", _replace("identification:\n  joint_model: both\n",
                                           "identification: [both]  # <-\n"),
     "identification", "must be a mapping"),
]


# physically impossible payloads, twin settings, drive overrides, joint subsets (refused at load)
_PAYLOAD = "  drives: {d}\n  payload: {{mass_kg: 2.0, inertia_kgm2: {I}}}  # <-\n".format
CASES += [
    ("payload: negative inertia (PyBullet would silently zero it)",
     _replace(f"  drives: {DRIVES}\n", _PAYLOAD(d=DRIVES, I="[-1, 0, 0, 0, 0, 0]")),
     "arm.payload.inertia_kgm2", "not positive definite"),
    ("payload: triangle inequality violated",
     _replace(f"  drives: {DRIVES}\n", _PAYLOAD(d=DRIVES, I="[0.01, 0.01, 0.05, 0, 0, 0]")),
     "arm.payload.inertia_kgm2", "triangle inequality"),
    ("payload: zero mass",
     _replace(f"  drives: {DRIVES}\n",
              f"  drives: {DRIVES}\n  payload: {{mass_kg: 0.0}}  # <-\n"),
     "arm.payload.mass_kg", "> 0"),
    ("twin setting NaN", _replace("  sample_rate_hz: 100\n",
                                  "  sample_rate_hz: 100\n  friction_drift: .nan  # <-\n"),
     "twin.friction_drift", "finite"),
    ("twin per-joint setting NaN", _replace("  sample_rate_hz: 100\n",
                                            "  sample_rate_hz: 100\n  current_scale_error: [0, .nan, 0, 0, 0, 0]  # <-\n"),
     "twin.current_scale_error", "finite"),
    ("twin settle_s inf", _replace("  sample_rate_hz: 100\n",
                                   "  sample_rate_hz: 100\n  settle_s: .inf  # <-\n"),
     "twin.settle_s", "finite"),
    ("twin seed not an integer", _replace("  sample_rate_hz: 100\n",
                                          "  sample_rate_hz: 100\n  seed: 1.5  # <-\n"),
     "twin.seed", "integer"),
    ("negative sample rate", _replace("  sample_rate_hz: 100\n", "  sample_rate_hz: -100  # <-\n"),
     "twin.sample_rate_hz", "must be > 0"),
    ("Butterworth cutoff above Nyquist",
     _replace("  smooth_passes: 20\n", "  smooth_passes: 20\n  butter_cutoff_hz: 80  # <-\n"),
     "processing.butter_cutoff_hz", "Nyquist frequency 50 Hz"),
    ("drive override: unknown joint",
     _replace("  sample_rate_hz: 100\n", "  sample_rate_hz: 100\n  drive_overrides:\n"
                                         "    joint9: {xi_gf: 0.2}  # <-\n"),
     "twin.drive_overrides.joint9", "unknown joint"),
    ("drive override: unknown key",
     _replace("  sample_rate_hz: 100\n", "  sample_rate_hz: 100\n  drive_overrides:\n"
                                         "    joint2:\n      stiffness: 10.0  # <-\n"),
     "twin.drive_overrides.joint2.stiffness", "unknown key"),
    ("drive override: xi >= 1 blames the override, not the drive file",
     _replace("  sample_rate_hz: 100\n", "  sample_rate_hz: 100\n  drive_overrides:\n"
                                         "    joint4:\n      xi_gf: 0.95  # <-\n"),
     "twin.drive_overrides.joint4.xi_gf", "xi_gf + xi_sf = 1.07 must be < 1"),
    ("arm.joints: unknown joint",
     _replace(f"  drives: {DRIVES}\n", f"  drives: {DRIVES}\n  joints:\n    - joint1\n"
                                       f"    - joint7  # <-\n"),
     "arm.joints[1]", "unknown joint 'joint7'"),
]


# the excitation design's keys (docs/excitation.md): obstacles, margin, torque limit, start pose
_EXC = "excitation: {harmonics: 3, period_s: 4.0}"
_BOX = "{{type: box, center_m: {c}, size_m: {s}}}".format
CASES_DESIGN = [
    ("obstacles without a collision margin",
     _replace(_EXC, "excitation: {harmonics: 3, period_s: 4.0, collision_margin_m: null,  # <-\n"
                    "               obstacles: [{type: plane, normal: [0, 0, 1], point_m: [0, 0, 0]}]}"),
     "trajectories.excitation.collision_margin_m", "obstacles are declared but"),
    ("obstacle in millimetres",
     _replace(_EXC, "excitation: {harmonics: 3, period_s: 4.0,\n"
                    "               obstacles: [" + _BOX(c="[400, -400, 300]", s="[0.3, 0.3, 0.6]")
              + "]}  # <-"),
     "trajectories.excitation.obstacles[0]", "millimetres given?"),
    ("obstacle coordinate true",
     _replace(_EXC, "excitation: {harmonics: 3, period_s: 4.0,\n"
                    "               obstacles: [" + _BOX(c="[true, 0, 0.3]", s="[0.3, 0.3, 0.6]")
              + "]}  # <-"),
     "trajectories.excitation.obstacles[0]", "center_m must be 3 finite numbers"),
    ("two obstacles of one name",
     _replace(_EXC, "excitation: {harmonics: 3, period_s: 4.0, obstacles: [\n"
                    "  {name: a, type: box, center_m: [0.5, 0.5, 0.2], size_m: [0.1, 0.1, 0.1]},\n"
                    "  {name: a, type: box, center_m: [-0.5, 0.5, 0.2], size_m: [0.1, 0.1, 0.1]}]}  # <-"),
     "trajectories.excitation.obstacles[1]", "already the name of obstacles[0]"),
    ("motor-torque limit without the drive file",
     _replace("backend: twin", "backend: hardware").replace(
         "twin:\n  sample_rate_hz: 100\n", "hardware: {dry_run: true}\n").replace(
         f"  drives: {DRIVES}\n", "").replace(
         _EXC, "excitation: {harmonics: 3, period_s: 4.0, torque_limit: on}  # <-"),
     "trajectories.excitation.torque_limit", "needs arm.drives"),
    # found when the scenario meets the arm's model, still before anything is optimized
    ("start pose inside a box",
     _replace(_EXC, "excitation: {harmonics: 3, period_s: 4.0,\n"
                    "               obstacles: [" + _BOX(c="[0, 0, 0.7]", s="[0.2, 0.2, 0.2]")
              + "]}  # <-"),
     "trajectories.excitation.obstacles[0]", "link4 cylinder (moved by joint4) is inside it"),
    ("validation start pose in self-collision",
     _replace("validation: {harmonics: 2, period_s: 4.0, seed: 1}",
              "validation: {harmonics: 2, period_s: 4.0, seed: 1,\n"
              "               start_deg: [8, -148, 131, 26, -178, 98]}  # <-"),
     "trajectories.validation.start_deg", "link1 cylinder / link6 cylinder in contact"),
    ("torque noise of another arm (the design's noise model)",
     _replace("  sample_rate_hz: 100\n", "  sample_rate_hz: 100\n  torque_noise_Nm: [0.05, 0.05]  # <-\n"),
     "twin.torque_noise_Nm", "has 2 values, the arm has 6 joints"),
    ("a margin the start pose cannot keep",
     _replace(_EXC, "excitation: {harmonics: 3, period_s: 4.0, collision_margin_m: 0.5}  # <-"),
     "trajectories.excitation.collision_margin_m", "would leave 12 of the 15 link pairs unchecked"),
]
CASES += CASES_DESIGN


@pytest.mark.parametrize("text,path,fragment", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_scenario_one_line_error(tmp_path, capsys, text, path, fragment):
    f = tmp_path / "bad.yaml"
    f.write_text(textwrap.dedent(text))
    marked = [i + 1 for i, line in enumerate(text.splitlines()) if "# <-" in line]
    assert len(marked) == 1, "each case marks exactly one line"
    line = marked[0]
    code = main(["--quiet", "run", str(f), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    prefix = f"{f}:{line}: " + (f"{path}: " if path else "")
    assert lines[0].startswith(prefix), (lines[0], prefix)
    assert fragment in lines[0]
    assert not (tmp_path / "out").exists(), "nothing may run before validation passes"


def test_case_count():
    assert len(CASES) >= 20


@pytest.mark.parametrize("text,where", [("", "empty"), ("- a\n- b\n", "a list")])
def test_empty_or_non_mapping(tmp_path, text, where):
    f = tmp_path / "s.yaml"
    f.write_text(text)
    with pytest.raises(ScenarioError) as ei:
        load_scenario(f)
    assert str(ei.value).startswith(f"{f}:1:")
    assert where in str(ei.value)


def test_missing_scenario_file_exit_code(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yaml")]) == 2
    assert "scenario file not found" in capsys.readouterr().err


def test_defaults_and_relative_paths(tmp_path):
    (tmp_path / "sub").mkdir()
    f = tmp_path / "sub" / "s.yaml"
    f.write_text(f"arm:\n  urdf: {Path(URDF).as_posix()}\n")
    s = load_scenario(f)
    assert s.backend == "twin"
    assert s.trajectories.excitation.harmonics == 5 and s.trajectories.excitation.seed == 0
    # nested defaults: the validation trajectory differs from the excitation by default
    assert s.trajectories.validation.seed == 1 and s.trajectories.validation.harmonics == 3
    # a partial section keeps the section's own defaults for the keys it leaves out
    s2 = scenario_from_dict({"arm": {"urdf": str(URDF)}, "trajectories": {"validation": {"period_s": 4}}})
    assert s2.trajectories.validation.seed == 1 and s2.trajectories.validation.period_s == 4.0
    # paths relative to the scenario file
    (tmp_path / "arm.urdf").write_text(Path(URDF).read_text())
    f.write_text("arm:\n  urdf: ../arm.urdf\n")
    assert load_scenario(f).arm.urdf == (tmp_path / "arm.urdf")


def test_resolved_round_trip(tmp_path):
    s = load_scenario(ROOT / "scenarios" / "paper_replication.yaml")
    d = s.resolved()
    f = tmp_path / "resolved.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    s2 = load_scenario(f)
    assert s2 == s
    assert Path(d["arm"]["urdf"]).is_absolute()


@pytest.mark.parametrize("name", ["quickstart", "paper_replication", "noise_sweep", "hardware"])
def test_shipped_scenarios_load(name):
    s = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    assert s.name == name
    if name == "paper_replication":
        ex = s.trajectories.excitation
        assert (ex.harmonics, ex.period_s) == (5, 20.0)
        assert s.backend_settings()["sample_rate_hz"] == 100
        assert s.processing["smooth_passes"] == 20 and s.identification.joint_model == "both"
    if name == "hardware":
        assert s.backend == "hardware" and s.hardware.armed is False
        # the same experiment as paper_replication, only the backend differs
        p = load_scenario(ROOT / "scenarios" / "paper_replication.yaml")
        assert s.trajectories == p.trajectories


def test_schema_table_lists_every_section():
    t = schema_table()
    for key in ("arm.urdf", "trajectories.excitation.harmonics", "sweep.noise", "fit.excitation.columns.time",
                "identification.joint_model", "outputs.dir"):
        assert f"`{key}`" in t


def test_docs_key_table_is_current():
    """docs/cli.md lists every scenario key with its default (regenerate with schema_table())."""
    assert schema_table() in (ROOT / "docs" / "cli.md").read_text()


@pytest.mark.parametrize("written, read", [("on", "on"), ("off", "off"), ("'on'", "on"),
                                           ("auto", "auto")])
def test_torque_limit_on_off_unquoted(tmp_path, written, read):
    """YAML 1.1 reads an unquoted on / off as true / false; the documented values must load
    (they were refused with 'must be one of auto, on, off; got True')."""
    f = tmp_path / "s.yaml"
    f.write_text(_replace("excitation: {harmonics: 3, period_s: 4.0}",
                          f"excitation: {{harmonics: 3, period_s: 4.0, torque_limit: {written}}}"))
    assert load_scenario(f).trajectories.excitation.torque_limit == read
