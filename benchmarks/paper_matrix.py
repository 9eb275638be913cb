"""The paper comparison, not circular: the replication scenario on the twin under each of its
reducer-friction laws, and every fitted joint model on each (issue 16, part 4).

    python benchmarks/paper_matrix.py [--laws opposing paper load_speed speed_efficiency
                                              independent] [--out DIR] [--json FILE]

Rows: the twin's law (twin.reducer_friction_law): ``opposing`` (the loss of the "opposing"
variant), ``paper`` (the paper's linear a1*tau'_m law, the "linear" variant's), ``load_speed``
(load- and speed-dependent efficiency with a Stribeck part, measured on real harmonic drives --
shared by NO fitted variant), ``speed_efficiency`` (strong speed-dependent efficiency in the
power-flow form, the law furthest from every fitted form) and ``independent`` (speed_efficiency
with Dahl presliding and load-dependent 4-quadrant link friction). Columns: motor-torque RMS against the RAW measured torque on the
excitation and on the independent validation trajectory of the simplified model and of the
improved model with the linear (paper), opposing and both reducer-friction terms (closed-form
prediction), and the reduction of the best-on-excitation improved variant (``auto``) vs the
simplified model; and two decompositions (issue 22 item 2), each its own run on the same
recordings' settings: ``simplified + armature`` (identification.armature: true -- the simplified
baseline lacks the reflected rotor inertia the improved model's stage 2 has) and ``single-stage +
load term`` (joint_model: simplified, friction: auto -- one fit on the motor torque alone, no
torque sensor, per joint the terms chosen by blocked cross-validation from the term library,
which holds the dissipative load term |tau_L|*sign(v), 4-quadrant too, and armature). The
README's headline is the speed_efficiency row. Trajectories come from the
excitation cache (.cache/excitation or $TWINID_CACHE), so only the first run optimizes.

Before printing, each run is checked to have produced every figure (finite, positive).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from identify.app.pipeline import run_scenario  # noqa: E402
from identify.common import progress  # noqa: E402
from identify.scenario import load_scenario  # noqa: E402

#: row name -> twin settings over the scenario's twin:
LAWS = {"opposing": {"reducer_friction_law": "opposing"},
        "paper": {"reducer_friction_law": "paper"},
        "load_speed": {"reducer_friction_law": "load_speed"},
        "speed_efficiency": {"reducer_friction_law": "speed_efficiency"},
        "independent": {"reducer_friction_law": "speed_efficiency", "presliding_rad": 5.0e-4,
                        "link_friction_load_driving": 0.05, "link_friction_load_braking": 0.02}}
#: column group -> identification settings over the scenario's
FITS = {"": {},
        "armature": {"armature": True},
        "single_stage": {"joint_model": "simplified", "friction": "auto"}}
VARIANTS = ("linear", "opposing", "both")
SCENARIO = ROOT / "scenarios" / "paper_replication.yaml"


def scenario_for_law(law: str, folder: Path, fit: str = "") -> Path:
    """The replication scenario with the twin settings of row `law` and the identification
    settings of column group `fit` (absolute paths)."""
    d = yaml.safe_load(SCENARIO.read_text())
    for k in ("urdf", "drives", "description"):
        d["arm"][k] = str((SCENARIO.parent / d["arm"][k]).resolve())
    d["twin"] = dict(d.get("twin") or {}, **LAWS[law])
    d["identification"] = dict(d.get("identification") or {}, **FITS[fit])
    if fit == "single_stage":
        d["identification"].pop("improved_friction_term", None)
    name = f"paper_replication_{law}" + (f"_{fit}" if fit else "")
    d["name"] = name
    d.setdefault("outputs", {}).update(plots=False, report=False, urdf=False)
    p = folder / f"{name}.yaml"
    p.write_text(yaml.safe_dump(d, sort_keys=False))
    return p


def row(metrics: dict) -> dict:
    """The matrix row of one run's metrics.json: trajectory -> model -> overall RMS [N*m]."""
    out = {}
    var = metrics["improved_variants_rms_closed_form"]
    for traj in ("excitation", "validation"):
        r = {"simplified": metrics["rms"][traj]["simplified"]["overall"]}
        for v in VARIANTS:
            r[f"improved {v}"] = var[v][traj]
        r["improved auto"] = metrics["rms"][traj]["improved"]["overall"]
        r["reduction auto [%]"] = metrics["improvement_percent"][traj]
        out[traj] = r
    out["auto chose"] = metrics["improved_variant"]
    out["targets_met"] = metrics["targets_met"]
    return out


def _metrics(law: str, folder: Path, fit: str) -> dict:
    scn = load_scenario(scenario_for_law(law, folder, fit))
    res = run_scenario(scn, out=folder / (law + (f"_{fit}" if fit else "")))
    return json.loads((Path(res.folder) / "metrics.json").read_text())


def run_law(law: str, folder: Path) -> dict:
    r = row(_metrics(law, folder, ""))
    arm = _metrics(law, folder, "armature")
    one = _metrics(law, folder, "single_stage")
    sel = (one.get("friction_selection") or {}).get("joints") or []
    for traj in ("excitation", "validation"):
        r[traj]["simplified + armature"] = arm["rms"][traj]["simplified"]["overall"]
        r[traj]["single-stage + load term"] = one["rms"][traj]["simplified"]["overall"]
    r["single-stage terms"] = {c["joint"]: c["chosen"] for c in sel}
    r["single-stage joints with a load term"] = sum(
        any(t.startswith("load_coulomb") for t in c["chosen"]) for c in sel)
    for traj in ("excitation", "validation"):
        bad = {k: v for k, v in r[traj].items() if not (isinstance(v, float) and math.isfinite(v))
               or (not k.startswith("reduction") and v <= 0)}
        if bad:
            raise SystemExit(f"insane result for law {law}: {bad}")
    return r


#: README label of each row
ROW_LABELS = {"opposing": "`opposing` (the opposing variant's own law)",
              "paper": "`paper` (the linear variant's own law)",
              "load_speed": "`load_speed` (no variant's law; the opposing form explains ~98 % of its loss)",
              "speed_efficiency": "**`speed_efficiency`** (furthest from every fitted form: the headline)",
              "independent": "`speed_efficiency` + presliding + load-dependent link friction"}
#: README columns: (header, key in a row's trajectory dict)
MD_COLUMNS = (("simplified", "simplified"), ("simplified + armature", "simplified + armature"),
              ("single-stage + load term (motor torque only)", "single-stage + load term"),
              ("improved linear (paper)", "improved linear"),
              ("improved opposing", "improved opposing"), ("improved both", "improved both"))


def _g(x: float) -> str:
    return f"{x:.3f}"


def markdown_table(rows: dict) -> str:
    """The README's matrix (raw-torque RMS [N*m], excitation / validation) from `rows`."""
    head = ["twin law"] + [h for h, _ in MD_COLUMNS] + ["auto chose (reduction)"]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for law, r in rows.items():
        red = " / ".join(f"{r[t]['reduction auto [%]']:.1f} %".replace("-", "−")
                         for t in ("excitation", "validation"))
        out.append("| " + " | ".join([ROW_LABELS.get(law, law)] + [
            f"{_g(r['excitation'][k])} / {_g(r['validation'][k])}" for _, k in MD_COLUMNS]
            + [f"{r['auto chose']} ({red})"]) + " |")
    return "\n".join(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--laws", nargs="+", default=list(LAWS), choices=list(LAWS))
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--json", type=Path, default=None, help="also write the rows as JSON")
    ap.add_argument("--from-json", type=Path, default=None,
                    help="print the README table of rows written by --json (no runs)")
    a = ap.parse_args(argv)
    if a.from_json:
        print(markdown_table(json.loads(a.from_json.read_text())))
        return 0
    progress.set_quiet(True)
    folder = a.out or Path(tempfile.mkdtemp(prefix="twinid_paper_matrix_"))
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows = {}
    for law in a.laws:
        rows[law] = run_law(law, folder)
        if a.json:      # after every row: a long run keeps what it has
            a.json.write_text(json.dumps(rows, indent=1))
    print("motor-torque RMS [N*m] against the raw measured eta*beta*i (closed-form predictions), "
          "paper replication (20 s, 100 Hz, smoothing x20)")
    cols = ["simplified", "simplified + armature", "single-stage + load term"] + \
        [f"improved {v}" for v in VARIANTS] + ["improved auto", "reduction auto [%]"]
    print(f"{'twin law':<17} {'trajectory':<11}" + "".join(f"{c:>26}" for c in cols)
          + "  auto chose")
    for law, r in rows.items():
        for traj in ("excitation", "validation"):
            print(f"{law:<17} {traj:<11}" + "".join(f"{r[traj][c]:>26.4f}" for c in cols)
                  + f"  {r['auto chose']}")
    print(f"({time.perf_counter() - t0:.0f} s; run folders in {folder})\n")
    print(markdown_table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
