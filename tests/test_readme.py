"""The README's headline (the paper replication on the twin, section "The paper's finding") is the
code's: a fresh `twinid run scenarios/paper_replication.yaml` (the golden-run session fixture of
tests/conftest.py) reproduces every number of the table between the ``paper-headline`` markers
within 2 %, and the "(met)" / "(not met)" of each row is ``targets_met`` of that run."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COLUMNS = ("simplified", "linear", "opposing", "both", "auto", "reduction")


def headline_rows(text: str) -> dict:
    """trajectory -> {column: value} of the README's marked headline table; "met": bool."""
    m = re.search(r"<!-- paper-headline: begin.*?-->(.*?)<!-- paper-headline: end -->", text, re.S)
    assert m, "README has no paper-headline table"
    rows = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        traj = next((t for t in ("excitation", "validation") if t in cells[0]), None)
        if traj is None or cells[0].startswith("trajectory"):
            continue
        nums = [float(re.sub(r"[^0-9.+-]", "", c.replace("−", "-"))) for c in cells[1:7]]
        rows[traj] = {**dict(zip(COLUMNS, nums)),
                                     "met": "(met)" in cells[-1]}
    assert set(rows) == {"excitation", "validation"}, rows
    return rows


def test_headline_parser_reads_the_readme():
    rows = headline_rows((ROOT / "README.md").read_text())
    assert all(len(r) == len(COLUMNS) + 1 for r in rows.values())


@pytest.mark.slow
def test_readme_headline_matches_a_fresh_replication(golden_run_folders):
    rows = headline_rows((ROOT / "README.md").read_text())
    m = json.loads((Path(golden_run_folders["paper_replication"]) / "metrics.json").read_text())
    var = m["improved_variants_rms_closed_form"]
    for traj, r in rows.items():
        fresh = {"simplified": m["rms"][traj]["simplified"]["overall"],
                 "linear": var["linear"][traj], "opposing": var["opposing"][traj],
                 "both": var["both"][traj], "auto": m["rms"][traj]["improved"]["overall"],
                 "reduction": m["improvement_percent"][traj]}
        for k, v in fresh.items():
            assert abs(r[k] - v) <= 0.02 * abs(v), (traj, k, r[k], v)
        assert r["met"] == m["targets_met"][traj], (traj, r["met"], m["targets_met"])
