"""The README's "Your own arm" examples run as written (issue 14): each ```sh block of that
section, with `twinid` / `python` replaced by this interpreter running this checkout."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _blocks() -> list[str]:
    text = (ROOT / "README.md").read_text()
    sec = text[text.index("## Your own arm"):]
    sec = sec[:sec.index("\n## ", 5)]
    return re.findall(r"```sh\n(.*?)```", sec, flags=re.S)


def test_three_examples_present():
    assert len(_blocks()) == 3


@pytest.mark.slow
@pytest.mark.parametrize("k,arm,signal", [(0, "xarm", "motor torque η·β·i"),
                                          (1, "panda", "joint torque"),
                                          (2, "iiwa", "motor torque η·β·i")])
def test_readme_example_runs(k, arm, signal, tmp_path):
    script = _blocks()[k]
    script = re.sub(r"\btwinid ", f"{sys.executable} -m identify --quiet ", script)
    script = re.sub(r"^python ", f"{sys.executable} ", script, flags=re.M)
    script = script.replace("$(python ", f"$({sys.executable} ")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    run = tmp_path / arm / "run"
    m = json.loads((run / "metrics.json").read_text())
    assert m["source"] == "logs" and m["signal"] == signal
    assert (run / "identified.urdf").is_file() and (run / "identified_joints.yaml").is_file()
    assert m["export"]["rms"]["validation"]["overall"] < 0.2
