"""The paper comparison, not circular: the replication scenario on the twin under each of its
reducer-friction laws, and every fitted joint model on each (issue 16, part 4).

    python benchmarks/paper_matrix.py [--laws opposing paper load_speed] [--out DIR]

Rows: the twin's law (twin.reducer_friction_law): ``opposing`` (the loss of the "opposing"
variant), ``paper`` (the paper's linear a1*tau'_m law, the "linear" variant's), ``load_speed``
(load- and speed-dependent efficiency with a Stribeck part, measured on real harmonic drives --
shared by NO fitted variant). Columns: motor-torque RMS against the RAW measured torque on the
excitation and on the independent validation trajectory of the simplified model and of the
improved model with the linear (paper), opposing and both reducer-friction terms (closed-form
prediction), and the reduction of the best-on-excitation improved variant (``auto``) vs the
simplified model. The README's headline is the load_speed row. Trajectories come from the
excitation cache (.cache/excitation or $TWINID_CACHE), so only the first run optimizes.

Before printing, each run is checked to have produced every figure (finite, positive).
"""
from __future__ import annotations

import argparse
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

LAWS = ("opposing", "paper", "load_speed")
VARIANTS = ("linear", "opposing", "both")
SCENARIO = ROOT / "scenarios" / "paper_replication.yaml"


def scenario_for_law(law: str, folder: Path) -> Path:
    """The replication scenario with twin.reducer_friction_law = `law` (absolute paths)."""
    d = yaml.safe_load(SCENARIO.read_text())
    for k in ("urdf", "drives", "description"):
        d["arm"][k] = str((SCENARIO.parent / d["arm"][k]).resolve())
    d["twin"] = dict(d.get("twin") or {}, reducer_friction_law=law)
    d["name"] = f"paper_replication_{law}"
    d.setdefault("outputs", {}).update(plots=False, report=False)
    p = folder / f"paper_replication_{law}.yaml"
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


def run_law(law: str, folder: Path) -> dict:
    scn = load_scenario(scenario_for_law(law, folder))
    res = run_scenario(scn, out=folder / law)
    import json
    m = json.loads((Path(res.folder) / "metrics.json").read_text())
    r = row(m)
    for traj in ("excitation", "validation"):
        bad = {k: v for k, v in r[traj].items() if not (isinstance(v, float) and math.isfinite(v))
               or (not k.startswith("reduction") and v <= 0)}
        if bad:
            raise SystemExit(f"insane result for law {law}: {bad}")
    return r


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--laws", nargs="+", default=list(LAWS), choices=LAWS)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    progress.set_quiet(True)
    folder = a.out or Path(tempfile.mkdtemp(prefix="twinid_paper_matrix_"))
    folder.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows = {law: run_law(law, folder) for law in a.laws}
    print("motor-torque RMS [N*m] against the raw measured eta*beta*i (closed-form predictions), "
          "paper replication (20 s, 100 Hz, smoothing x20)")
    cols = ["simplified"] + [f"improved {v}" for v in VARIANTS] + ["improved auto",
                                                                    "reduction auto [%]"]
    print(f"{'twin law':<11} {'trajectory':<11}" + "".join(f"{c:>20}" for c in cols)
          + "  auto chose")
    for law, r in rows.items():
        for traj in ("excitation", "validation"):
            print(f"{law:<11} {traj:<11}" + "".join(f"{r[traj][c]:>20.4f}" for c in cols)
                  + f"  {r['auto chose']}")
    print(f"({time.perf_counter() - t0:.0f} s; run folders in {folder})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
