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


# ---------------------------------------------------------------------------------------------
# issue 26: every figure in docs/ is the code's (tests/doc_figures.py)
# ---------------------------------------------------------------------------------------------

def _doc_figures():
    import sys
    sys.path.insert(0, str(ROOT / "tests"))
    import doc_figures
    return doc_figures


def _all_blocks() -> dict[str, tuple[str, str]]:
    D = _doc_figures()
    out = {}
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name, text in D.blocks(doc.read_text()).items():
            assert name not in out, f"figures block {name!r} twice ({out[name][0]}, {doc.name})"
            out[name] = (doc.name, text)
    return out


def test_figure_blocks_are_known_and_placed():
    """Every figures block names a known computation, and each known one is in a document."""
    D = _doc_figures()
    found = _all_blocks()
    assert set(found) == set(D.BLOCKS), (sorted(found), sorted(D.BLOCKS))
    assert found["paper-variants"][0] == "cli.md" and found["add-excitation"][0] == "excitation.md"
    assert found["quickstart-report"][0] == "reading-a-report.md"
    assert found["closed-loop-tracking"][0] == found["closed-loop-collision"][0] == "closed_loop.md"


def test_number_check_catches_a_hand_typed_figure():
    """The check fails on the numbers the issue found stale (docs/cli.md: 2.68 vs 2.60, 48 of
    48, 3.8 %) and passes on the golden run's."""
    D = _doc_figures()
    src = {"paper_replication": D.golden_metrics("paper_replication")}
    stale = ("Targets (>= 60 % reduction on excitation, >= 40 % on validation): 2.68 vs 2.60 "
             "N*m on excitation, 2.62 vs 2.75 N*m on validation. Stage 1: 48 of 48 base "
             "parameters within 3 sigma of the twin's truth, median |error| 3.8 %.")
    bad = D.check_block("paper-variants", stale, src)
    assert any("2.68" in b for b in bad) and any("3.8" in b for b in bad), bad
    good = " ".join(D.BLOCKS["paper-variants"][1](src["paper_replication"]))
    assert D.check_block("paper-variants", good, src) == []
    assert D.check_block("paper-variants", good + " (about 54 s)", src) != []


@pytest.mark.parametrize("name", ["paper-variants", "quickstart-report"])
def test_doc_figures_are_the_golden_runs(name):
    D = _doc_figures()
    doc, text = _all_blocks()[name]
    runs = D.BLOCKS[name][0]
    assert D.check_block(name, text, {r: D.golden_metrics(r) for r in runs}) == [], doc


def test_every_image_in_the_docs_has_a_producer():
    """Every image under docs/figures that a document shows is a copy of a run's plot that
    tests/doc_figures.py names (and regenerates), and each named one exists."""
    D = _doc_figures()
    shown = D.doc_images()
    inside = {k for k in shown if not k.startswith("/")}
    assert inside <= set(D.IMAGES), sorted(inside - set(D.IMAGES))
    assert not [k for k in shown if k.startswith("/")], "an image outside docs/figures"
    for k in D.IMAGES:
        assert (ROOT / "docs" / "figures" / k).is_file(), k


def test_cited_sections_exist():
    """docs/cli.md cites the README's paper table by its heading."""
    cli = FILES[1].read_text()
    m = re.search(r'README\'s table "([^"]+)"', cli)
    assert m and f"## {m.group(1)}\n" in FILES[0].read_text(), m and m.group(1)


def test_closed_loop_run_prints_its_results():
    """docs/closed_loop.md's figures are on the console: a run with closed_loop prints the
    tracking RMS, the goal ratios and the collision results (issue 26)."""
    from identify.outputs.render import console_summary as summary
    m = {"closed_loop": {"tracking_rms_rad": {"pid_only": 5.18e-4, "identified_ff": 3.29e-5,
                                              "true_ff": 3.31e-5},
                         "goals": {"identified_vs_pid": 0.0635, "goal_vs_pid": 0.2,
                                   "identified_vs_true": 0.995, "goal_vs_true": 1.2},
                         "trajectory": "validation"},
         "collision": {"models": {
             "identified": {"detected": True, "detection_delay_ms": 8.0, "false_alarms": 0,
                            "false_alarms_contact_run": 0},
             "cad": {"detected": False, "detection_delay_ms": None, "false_alarms": 1,
                     "false_alarms_contact_run": 2}}}}
    text = summary(m, Path("runs/x"))
    assert "tracking RMS [mrad] pid_only 0.5180, identified_ff 0.0329, true_ff 0.0331" in text
    assert "identified / PID only 0.064 (goal <= 0.2)" in text
    assert "identified / true 0.995 (goal <= 1.2)" in text
    assert "identified model: detected after 8 ms; false alarms 0 (free run) / 0" in text
    assert "cad model: not detected; false alarms 1 (free run) / 2 (contact run)" in text


def _pixels(path):
    import numpy as np
    from PIL import Image
    return np.asarray(Image.open(path).convert("RGB"))


@pytest.mark.slow
def test_doc_images_and_add_excitation_figures_from_fresh_runs(golden_run_folders, golden_cache,
                                                               tmp_path):
    """The quickstart images of docs/figures are the pixels a fresh quickstart run draws; the
    add_excitation figures of docs/excitation.md are a fresh add_excitation run's on that run,
    which prints "-> processing" once (the held data: their own step). The add_excitation run
    uses the golden runs' cache (its validation trajectory is quickstart's; its excitation, designed
    for the held data, is optimized)."""
    import numpy as np
    D = _doc_figures()
    qs = Path(golden_run_folders["quickstart"])
    for target, (scenario, plot) in D.IMAGES.items():
        if scenario != "quickstart":
            continue
        a, b = _pixels(ROOT / "docs" / "figures" / target), _pixels(qs / plot)
        assert a.shape == b.shape and np.array_equal(a, b), \
            f"docs/figures/{target} is not what the code draws: python tests/doc_figures.py"
    out = tmp_path / "add_excitation"
    res = D.run_scenario("add_excitation", out, golden_cache, held=qs, quiet=False)
    log = res.stdout + res.stderr
    assert log.count("-> processing ...") == 1 and "-> processing the held data" in log, log
    src = {"add_excitation": json.loads((out / "metrics.json").read_text()),
           "quickstart": json.loads((qs / "metrics.json").read_text())}
    assert D.check_block("add-excitation", _all_blocks()["add-excitation"][1], src) == []


@pytest.mark.slow
def test_closed_loop_doc_figures_from_a_fresh_run(golden_cache, tmp_path):
    """docs/closed_loop.md: the tracking and collision tables and both images are a fresh
    scenarios/closed_loop.yaml run's (identification, closed loop and collision runs; its two
    trajectories are quickstart's, read from the golden runs' cache)."""
    import numpy as np
    D = _doc_figures()
    out = tmp_path / "closed_loop"
    D.run_scenario("closed_loop", out, golden_cache)
    src = {"closed_loop": json.loads((out / "metrics.json").read_text())}
    for name in ("closed-loop-tracking", "closed-loop-collision"):
        assert D.check_block(name, _all_blocks()[name][1], src) == []
    for target, (scenario, plot) in D.IMAGES.items():
        if scenario == "closed_loop":
            a, b = _pixels(ROOT / "docs" / "figures" / target), _pixels(out / plot)
            assert a.shape == b.shape and np.array_equal(a, b), \
                f"docs/figures/{target} is not what the code draws: python tests/doc_figures.py"


def test_reading_a_report_states_the_codes_thresholds():
    """The warnings table quotes the warning the code prints and its threshold."""
    from types import SimpleNamespace
    from identify.app.pipeline import COND_HOPELESS, conditioning_warnings
    text = (ROOT / "docs" / "reading-a-report.md").read_text()
    (w,) = conditioning_warnings({"excitation": SimpleNamespace(cond=5e3, held=None)},
                                 SimpleNamespace(improved=None, simplified=None))
    assert w.startswith("WARNING: hopeless conditioning: cond(W_base)")
    assert f"> {COND_HOPELESS:g}" in w and "reach 30-60" in w
    assert f"cond(W_base) ... > {COND_HOPELESS:g}" in text and f"beyond {COND_HOPELESS:g}" in text
    assert "reach 30-60" in text
