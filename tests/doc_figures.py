"""The figures the docs show, reproduced from runs (issue 26): numbers and images.

**Numbers.** A docs block between ``<!-- figures:NAME -->`` and ``<!-- /figures:NAME -->`` may
hold only numbers that :data:`BLOCKS` ``[NAME]`` computes from a run's ``metrics.json`` (written as
the docs write them), or the block's few fixed numbers (settings named in the sentence: "3 sigma",
"seed 0"). tests/test_docs.py checks every block: each computed phrase is in it, every other
number in it is fixed -- a hand-typed figure fails. Sources: ``quickstart`` and
``paper_replication`` are the golden documents (tests/data/golden, themselves checked against
fresh runs by tests/test_golden_runs.py); ``add_excitation`` is a fresh run of
scenarios/add_excitation.yaml on the golden quickstart run folder (slow test).

**Images.** :data:`IMAGES` names, for every image under docs/figures/, the scenario and the plot
of its run folder it is a copy of. tests/test_docs.py checks that every image the docs show is
listed, and (slow) that a fresh run draws the same pixels. Regenerate them on purpose with

    python tests/doc_figures.py        # runs the scenarios (golden settings), copies the plots

and say why in the commit.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden_runs  # noqa: E402

DOCS = ROOT / "docs"
FIGURES = DOCS / "figures"


# ---------------------------------------------------------------------------------------------
# numbers
# ---------------------------------------------------------------------------------------------

def _paper_variants(m: dict) -> list[str]:
    """docs/cli.md: the paper's linear reducer term against the simplified model, stage 1."""
    v = m["improved_variants_rms_closed_form"]["linear"]
    s = {t: m["rms"][t]["simplified"]["overall"] for t in ("excitation", "validation")}
    pe = m["parameter_errors"]["improved_stage1"]
    assert m["improved_variant"] == "opposing", "docs/cli.md says auto picks 'opposing'"
    met = {t: "met" if ok else "not met" for t, ok in m["targets_met"].items()}
    tgt = m["paper"]["targets_percent"] if "targets_percent" in m.get("paper", {}) else None
    out = [f"{v['excitation']:.2f} vs {s['excitation']:.2f} N*m on excitation",
           f"{v['validation']:.2f} vs {s['validation']:.2f} N*m on validation",
           f"{pe['within_3sigma']} of {pe['count']} base parameters within 3 sigma",
           f"median |error| {pe['median_abs_error_percent']:.2f} %",
           f"excitation target {met['excitation']}, validation target {met['validation']}"]
    if tgt:
        out += [f">= {abs(tgt['excitation']):g} % reduction on excitation",
                f">= {abs(tgt['validation']):g} % on validation"]
    return out


def _add_excitation(m: dict, q: dict) -> list[str]:
    """docs/excitation.md: the quickstart run (q) and the add_excitation run on it (m)."""
    h = m["trajectories"]["excitation"]["held"]
    pq, pa = (d["parameter_errors"]["improved_stage1"] for d in (q, m))
    return [f"the {h['n_base']} base",
            f"quickstart run alone {h['median_rel_std_held']:.4f} from its recorded samples",
            f"(its own design report, from the trajectory: "
            f"{q['trajectories']['excitation']['median_rel_std']:.4f})",
            f"the new d-optimal trajectory alone {h['median_rel_std_new_alone']:.4f}",
            f"combined **{m['trajectories']['excitation']['median_rel_std']:.4f}**",
            f"{pq['median_abs_error_percent']:.2f} % -> **{pa['median_abs_error_percent']:.2f} %**",
            f"({pq['within_3sigma']} of {pq['count']} within 3 sigma alone, "
            f"{pa['within_3sigma']} of {pa['count']} combined)"]


def _f(x: float, d: int = 2) -> str:
    return f"{x:.{d}f}"


def _quickstart_report(m: dict) -> list[str]:
    """docs/reading-a-report.md: the quickstart run's report."""
    r, imp = m["rms"], m["improvement_percent"]
    fl, ratio = m["noise_floor"], m["rms_over_noise_floor"]
    pe1, pe2 = m["parameter_errors"]["improved_stage1"], m["parameter_errors"].get("improved_stage2")
    tr = m["trajectories"]["excitation"]
    s2 = m["stage2"]
    pct = {t: f"{imp[t]:.1f}".replace("-", "−") for t in imp}
    return [f"excitation {_f(r['excitation']['simplified']['overall'])} → "
            f"{_f(r['excitation']['improved']['overall'])} N·m ({pct['excitation']} %)",
            f"validation {_f(r['validation']['simplified']['overall'])} → "
            f"{_f(r['validation']['improved']['overall'])} N·m ({pct['validation']} %)",
            f"noise floor of η·β·i is {fl['validation']['tau_m']['overall']:.3f} N·m",
            f"{ratio['validation']['improved']:.1f} times the floor",
            f"{ratio['validation']['simplified']:.1f} for the simplified model",
            f"cond(W_base) {m['cond_W']['excitation']:.1f} (excitation) and "
            f"{m['cond_W']['validation']:.1f} (validation)",
            f"{1e3 * tr['min_distance_m']:.0f} mm ({tr['closest_pair']})",
            f"{pe1['within_3sigma']} of {pe1['count']} base parameters",
            f"median error {pe1['median_abs_error_percent']:.2f} %",
            f"{s2['poorly_excited_count']} stage-2 coefficients poorly excited",
            f"{m['poorly_excited_count']['improved_stage1']} of {pe1['count']} stage-1"] + (
        [f"{pe2['within_3sigma']} of {pe2['count']} stage-2 coefficients",
         f"{pe2['skipped_count']} skipped"] if pe2 else
        ["stage 2 has no constant truth under the twin's law"])


def _closed_loop(m: dict) -> list[str]:
    """docs/closed_loop.md: the tracking and collision tables of scenarios/closed_loop.yaml."""
    cl, col = m["closed_loop"], m["collision"]
    g = cl["goals"]
    assert g["met"]["vs_pid"] and g["met"]["vs_true"] and col["goal"]["met"]["identified"]
    row = {}
    for case, label in (("pid_only", "PID only"), ("identified_ff", "identified model feed-forward"),
                        ("true_ff", "true model feed-forward")):
        rms = f"{1e3 * cl['tracking_rms_rad'][case]:.3g}"
        row[case] = (f"| {label} | {f'**{rms}**' if case == 'identified_ff' else rms} | "
                     f"{1e3 * cl['max_error_rad'][case]:.3g} | "
                     f"{cl['pid_torque_rms_Nm'][case]:.3g} |")
    ident, cad = col["models"]["identified"], col["models"]["cad"]
    assert not cad["detected"]
    th = {k: " ".join(f"{x:.2g}" for x in v["threshold_Nm"]) for k, v in col["models"].items()}
    peak = " / ".join(f"{x:.1f}" for x in ident["tau_ext_peak_Nm"][:3])
    return {"tracking": [*row.values(),
            f"identified / PID only = **{g['identified_vs_pid']:.3f}** (goal ≤ {g['goal_vs_pid']:g}, "
            f"met), identified / true = **{g['identified_vs_true']:.3f}** (goal ≤ "
            f"{g['goal_vs_true']:g}, met)"], "collision": [
            f"t = {col['contact']['time_s']:g} s for {col['contact']['duration_s']:g} s -- {peak} "
            f"N·m on joints 1-3",
            f"| identified | yes | **{ident['detection_delay_ms']:.0f} ms** | "
            f"**{ident['false_alarms']} / {ident['false_alarms_contact_run']}** | {th['identified']} |",
            f"| CAD | **no** | -- | {cad['false_alarms']} / {cad['false_alarms_contact_run']} | "
            f"{th['cad']} |",
            f"({ident['reduced_sensitivity_fraction']:.2f} on this trajectory with the motor "
            f"torque)"]}


#: block name -> (source runs, function(metrics...) -> phrases, fixed numbers of the block)
BLOCKS = {
    "paper-variants": (("paper_replication",), _paper_variants, {"1", "2", "3"}),
    "add-excitation": (("add_excitation", "quickstart"), _add_excitation, {"0", "1", "3"}),
    "quickstart-report": (("quickstart",), _quickstart_report, {"1", "2", "3", "6", "10"}),
    "closed-loop-tracking": (("closed_loop",), lambda m: _closed_loop(m)["tracking"],
                             {"0", "1", "3", "10"}),
    "closed-loop-collision": (("closed_loop",), lambda m: _closed_loop(m)["collision"],
                              {"20"}),
}

NUMBER = re.compile(r"(?<![\w.\-/])[−-]?\d+(?:\.\d+)?(?![\w.]\d)")


def numbers(text: str) -> set[str]:
    """The numbers written in `text` (a leading minus kept; "a1", "stage-2", "2026-12-01" and
    file names are not numbers)."""
    text = re.sub(r"`[^`]*`", " ", text)                  # code spans: file names, commands
    text = re.sub(r"\(\w[\w/.-]*\.png\)", " ", text)     # image links
    return {n.replace("−", "-") for n in NUMBER.findall(text)}


def blocks(text: str) -> dict[str, str]:
    """name -> text of every figures block of a document."""
    return {m.group(1): m.group(2) for m in re.finditer(
        r"<!-- figures:([\w-]+)[^>]*-->\n?(.*?)<!-- /figures:\1 -->", text, re.S)}


def golden_metrics(name: str) -> dict:
    return json.loads((golden_runs.DATA / f"{name}.metrics.json").read_text())


def check_block(name: str, text: str, sources: dict) -> list[str]:
    """Problems of block `name` (empty: it holds exactly the code's figures)."""
    runs, fn, fixed = BLOCKS[name]
    phrases = fn(*(sources[r] for r in runs))
    flat = " ".join(text.split())
    bad = [f"{name}: the run gives {p!r}, not in the docs" for p in phrases
           if " ".join(p.split()) not in flat]
    allowed = set(fixed)
    for p in phrases:
        allowed |= numbers(p)
    bad += [f"{name}: {n!r} is not a figure of the run (hand-typed?)"
            for n in sorted(numbers(text) - allowed)]
    return bad


# ---------------------------------------------------------------------------------------------
# images
# ---------------------------------------------------------------------------------------------

_QS = ("trajectory_excitation", "trajectory_excitation_clearance", "torque_validation",
       "residual_validation", "torque_decomposition_validation", "param_stage1", "param_stage2")
#: docs/figures/<file> -> (scenario, plot in its run folder)
IMAGES = {f"quickstart/{p}.png": ("quickstart", f"plots/{p}.png") for p in _QS}
IMAGES.update({"closed_loop_tracking.png": ("closed_loop", "plots/closed_loop_tracking.png"),
               "collision.png": ("closed_loop", "plots/collision.png")})


def doc_images() -> dict[str, list[str]]:
    """image file under docs/figures -> the documents that show it (README.md and docs/*.md)."""
    out: dict = {}
    for doc in [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]:
        for link in re.findall(r"!\[[^\]]*\]\(([^)]+\.png)\)", doc.read_text()):
            p = (doc.parent / link).resolve()
            out.setdefault(str(p.relative_to(FIGURES.resolve())) if FIGURES.resolve() in p.parents
                           else str(p), []).append(doc.name)
    return out


def run_scenario(name: str, out: Path, cache: Path, held: Path | None = None,
                 quiet: bool = True) -> subprocess.CompletedProcess:
    """Run scenarios/<name>.yaml as the golden runs do (one BLAS thread, the given cache); for
    add_excitation, with its held data replaced by the run folder `held`."""
    scn = ROOT / "scenarios" / f"{name}.yaml"
    if held is not None:
        d = yaml.safe_load(scn.read_text())
        for k in ("urdf", "drives", "description"):
            d["arm"][k] = str((scn.parent / d["arm"][k]).resolve())
        d["trajectories"]["excitation"]["held"] = [str(held)]
        scn = out.parent / f"{name}.yaml"
        scn.write_text(yaml.safe_dump(d))
    env = dict(os.environ, TWINID_CACHE=str(cache), PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    return subprocess.run([sys.executable, "-m", "identify"] + (["--quiet"] if quiet else [])
                          + ["run", str(scn), "--out", str(out)], check=True, env=env, cwd=ROOT,
                          capture_output=True, text=True)


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        folders = {}
        for scenario in sorted({s for s, _ in IMAGES.values()}):
            (tmp / scenario).parent.mkdir(exist_ok=True)
            run_scenario(scenario, tmp / scenario, tmp / "cache")
            folders[scenario] = tmp / scenario
        for target, (scenario, plot) in IMAGES.items():
            dest = FIGURES / target
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(folders[scenario] / plot, dest)
            print(f"{dest.relative_to(ROOT)} <- {scenario}: {plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
