"""The default excitation objective is one choice, stated once in each place a user meets it:
a scenario without ``objective`` gets the ExcitationProblem's default, ``python -m
identify.excitation`` says the same, and docs/excitation.md marks the same objective "(default)"
(the choice and its evidence: benchmarks/bench_objective.py, docs/excitation.md)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from identify.app.trajectories import make_problem
from identify.excitation import ExcitationProblem
from identify.excitation.__main__ import load_model, main
from identify.scenario.load import scenario_from_dict

ROOT = Path(__file__).resolve().parents[2]
DEFAULT = ExcitationProblem().objective


def test_scenario_without_objective_gets_the_problems_default():
    scn = scenario_from_dict({"name": "t", "arm": {"urdf": str(ROOT / "assets" / "cobot6.urdf")},
                              "backend": "twin",
                              "trajectories": {"excitation": {"harmonics": 3}}})
    model = load_model(None, ["joint2", "joint3"])
    for spec in (scn.trajectories.excitation, scn.trajectories.validation):
        assert spec.objective == DEFAULT
        assert make_problem(spec, model, ()).objective == DEFAULT


def test_command_line_default_is_the_problems(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    helptext = " ".join(capsys.readouterr().out.split())
    assert f"default {DEFAULT})" in helptext


def test_docs_mark_the_same_default():
    text = (ROOT / "docs" / "excitation.md").read_text()
    section = text.split("## Objectives", 1)[1].split("\n## ", 1)[0]
    marked = re.findall(r"^\| `(\w+)` \(default\) \|", section, re.MULTILINE)
    assert marked == [DEFAULT], marked
