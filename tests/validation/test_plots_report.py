"""The report around the plots (issue 26): each plot with a caption that says what it shows and
what to look for (not its file name), shown at >= 900 px with click to enlarge, parameter tables
with a unit per row, the stage-2 table with units per coefficient, the signal of each RMS row,
the exported model's signal in its column's heading, and timings that add up to the total."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest


import identify.outputs.report as R


def _folder(tmp_path, metrics: dict, params: dict | None = None):
    from identify.common import figures
    plt = figures.pyplot()
    (tmp_path / "plots").mkdir()
    for stem in ("param_stage2", "torque_validation"):
        fig = plt.figure(figsize=(figures.WIDTH_IN, 2))
        figures.save(fig, tmp_path / "plots" / f"{stem}.png")
    metrics = {"name": "t", "files": {"plots": ["plots/param_stage2.png",
                                                "plots/torque_validation.png"]}, **metrics}
    (tmp_path / "metrics.json").write_text(json.dumps(metrics))
    import yaml
    (tmp_path / "parameters.yaml").write_text(yaml.safe_dump(params or {}))
    return tmp_path


def test_plots_have_captions_and_are_shown_wide(tmp_path):
    from identify.common.figures import caption
    folder = _folder(tmp_path, {})
    md, ht = R.build_report(folder)
    text, page = md.read_text(), ht.read_text()
    for stem in ("param_stage2", "torque_validation"):
        assert f"*{caption(stem)}*" in text
        assert "param stage2" not in page and "torque validation<" not in page
    assert page.count("onclick=\"this.classList.toggle('big')\"") == 2
    css = re.search(r"<style>(.*?)</style>", page, re.S).group(1)
    assert re.search(r"figure img\{[^}]*min-width:900px", css)
    assert re.search(r"img\.big\{[^}]*position:fixed", css)


@pytest.mark.parametrize("name, unit", [
    ("ZZ1 + YY2 + 0.0729*m3", "kg*m^2"), ("mx2 - 0.27*m3", "kg*m"), ("m1", "kg"),
    ("XY6", "kg*m^2"), ("fv3", "N*m*s/rad"), ("fc2", "N*m"), ("fo1", "N*m"), ("Ia4", "kg*m^2"),
    ("0.5*m3 + mz4", "kg")])
def test_parameter_units_by_first_term(name, unit):
    assert R._unit(name) == unit


def test_tables_carry_units_signals_and_add_up(tmp_path):
    metrics = {"signal": "motor torque η·β·i",
               "rms": {"validation": {
                   "simplified": {"per_joint": [1.0, 2.0], "overall": 1.6},
                   "stage1_tau_j": {"per_joint": [0.1, 0.2], "overall": 0.16}}},
               "timings_s": {"excitation trajectory": 1.0, "twin run: excitation": 2.0,
                             "plots": 4.0, "total_before_outputs": 3.5, "total": 14.3}}
    params = {"models": {"improved": {
        "stage1": {"names": ["m1", "fv1"], "value": [1.0, 0.2], "std": [0.1, 0.01]},
        "stage2": {"variant": "opposing", "names": ["xi_opp", "f_mc"], "joints": ["j1"],
                   "params": [[0.4, -0.58]], "std": [[0.01, 0.48]]}}}}
    md, _ = R.build_report(_folder(tmp_path, metrics, params))
    text = md.read_text()
    assert "| parameter | unit | value | std |" in text
    assert "| m1 | kg | 1 | 0.1 |" in text and "| fv1 | N*m*s/rad |" in text
    assert "| joint | xi_opp [-] | f_mc [N*m] | fit RMS [N*m] |" in text
    assert ("### RMS per joint, validation trajectory [N*m], motor torque η·β·i; stage1_tau_j: "
            "joint torque") in text
    rows = dict(re.findall(r"^\| ([^|]+?) \| ([\d.]+) \|$",
                           text.split("## Timings")[1].split("##")[0], re.M))
    steps = sum(float(v) for k, v in rows.items() if not k.startswith("total"))
    assert steps == pytest.approx(float(rows["total"]), abs=0.01), rows
    assert any(k.startswith("other") for k in rows)


def test_logs_summary_names_the_exported_models_signal(tmp_path):
    """The exported model of a motor-and-joint-torque log is fitted to the joint torque: its
    column says so instead of sitting under a motor-torque heading."""
    metrics = {"source": "logs", "signal": "motor torque η·β·i", "headline_model": "improved",
               "rms": {"validation": {"simplified": {"overall": 2.9},
                                      "improved": {"overall": 0.36}}},
               "export": {"signal": "joint torque", "written": True,
                          "rms": {"validation": {"overall": 0.139}}}}
    md, _ = R.build_report(_folder(tmp_path, metrics))
    text = md.read_text()
    assert ("| trajectory | simplified [N*m] (motor torque η·β·i) | improved [N*m] (motor torque "
            "η·β·i) | exported model [N*m] (joint torque) |") in text
    assert "## Summary: motor torque η·β·i RMS" not in text
    assert np.isclose(float(re.search(r"\| validation \| 2.9 \| 0.36 \| ([\d.]+) \|",
                                      text).group(1)), 0.139)


def test_trajectory_folder_plots_have_the_trajectory_caption(tmp_path):
    """A `twinid trajectory` folder names its plots excitation.png / validation.png: their
    captions are the trajectory plot's, not the file name."""
    import yaml
    from identify.common import figures
    plt = figures.pyplot()
    for label in ("excitation", "validation"):
        figures.save(plt.figure(figsize=(figures.WIDTH_IN, 2)), tmp_path / f"{label}.png")
    (tmp_path / "trajectories.yaml").write_text(yaml.safe_dump(
        {"kind": "trajectories", "name": "t", "trajectories": {"excitation": {"cond": 40.0}}}))
    md, _ = R.build_report(tmp_path)
    text = md.read_text()
    for label in ("excitation", "validation"):
        assert f"*{figures.caption(f'trajectory_{label}')}*" in text


def test_decomposition_is_not_under_measured_vs_predicted(tmp_path):
    """The decomposition plot shows the parts of a prediction, no measurement: its own heading."""
    from identify.common import figures
    folder = _folder(tmp_path, {})
    figures.save(figures.pyplot().figure(figsize=(figures.WIDTH_IN, 2)),
                 folder / "plots" / "torque_decomposition_validation.png")
    m = json.loads((folder / "metrics.json").read_text())
    m["files"]["plots"].append("plots/torque_decomposition_validation.png")
    (folder / "metrics.json").write_text(json.dumps(m))
    text = R.build_report(folder)[0].read_text()
    measured = text.split("## Measured vs predicted")[1].split("\n## ")[0]
    assert "torque_decomposition" not in measured and "torque_validation" in measured
    assert "## Parts of the predicted torque" in text


def test_trajectory_folder_timings_add_up_to_the_total(tmp_path):
    """A trajectory folder's report (twinid trajectory) has the same "other" line as a run's."""
    import yaml
    (tmp_path / "trajectories.yaml").write_text(yaml.safe_dump({
        "kind": "trajectories", "name": "t", "trajectories": {},
        "timings_s": {"excitation trajectory": 1.5, "validation trajectory": 0.5, "total": 3.0}}))
    md, _ = R.build_report(tmp_path)
    rows = dict(re.findall(r"^\| ([^|]+?) \| ([\d.]+) \|$",
                           md.read_text().split("## Timings")[1], re.M))
    other = [v for k, v in rows.items() if k.startswith("other")]
    assert other == ["1"] and float(rows["total"]) == 3.0, rows
