"""README.md and docs/cli.md agree (issue 13): the quick-start figures live in one block that both
files hold verbatim, whose RMS figures are those of the golden quickstart run, and the counts the
documents state are the code's."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = (ROOT / "README.md", ROOT / "docs" / "cli.md")


def _blocks(text: str) -> dict[str, str]:
    return {m.group(1): m.group(2) for m in re.finditer(
        r"<!-- shared:([\w-]+)[^>]*-->\n(.*?)<!-- /shared:\1 -->", text, re.S)}


def test_shared_blocks_are_identical():
    blocks = [_blocks(f.read_text()) for f in FILES]
    assert "quickstart" in blocks[0], "README lost its shared quick-start block"
    assert set(blocks[0]) == set(blocks[1])
    for name in blocks[0]:
        assert blocks[0][name] == blocks[1][name], f"shared block {name!r} differs"


def test_quickstart_figures_are_the_golden_runs():
    text = _blocks(FILES[0].read_text())["quickstart"]
    m = json.loads((ROOT / "tests" / "data" / "golden" / "quickstart.metrics.json").read_text())
    for traj in ("excitation", "validation"):
        s = m["rms"][traj]["simplified"]["overall"]
        i = m["rms"][traj]["improved"]["overall"]
        red = m["improvement_percent"][traj]
        want = f"{traj}\n?\\s*{s:.2f} → {i:.2f} N·m \\(−{abs(red):.1f} %\\)"
        assert re.search(want.replace(" ", r"\s+"), text), (want, text)


def test_counts_stated_in_the_documents():
    from identify.app.sweep import grid
    from identify.scenario.load import load_scenario
    cli = FILES[1].read_text()
    n = len(grid(load_scenario(ROOT / "scenarios" / "noise_sweep.yaml"))[0])
    assert f"{n} runs" in cli
    assert not re.search(r"\((?!%d)\d+ runs\)" % n, cli)


@pytest.mark.slow
def test_base_parameter_counts_in_the_readme():
    from identify import RobotModel
    from identify.model.base_params import compute_base_parameters
    m = RobotModel.reference()
    rb = len(compute_base_parameters(m).independent)
    fr = len(compute_base_parameters(m, terms=("viscous", "coulomb")).independent)
    readme = FILES[0].read_text()
    assert f"**Base parameters of the reference arm: {rb}**" in readme
    assert f"{fr} with per-joint viscous and Coulomb friction" in readme
