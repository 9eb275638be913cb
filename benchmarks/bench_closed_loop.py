"""Benchmark: the identified model at work on the twin (issue 11). Not a speed benchmark: the
goals are ratios measured in the same run.

    python benchmarks/bench_closed_loop.py [--seeds 0 1 2] [--out /tmp/bench_cl]

For each seed (the twin's noise and the identification's data), `twinid run
scenarios/closed_loop.yaml` (identify, then the three closed-loop cases and the collision runs)
and `twinid run scenarios/payload.yaml`. Printed per seed and as the worst case:

  feed-forward tracking RMS: identified / PID only (goal <= 0.2), identified / true model (<= 1.2)
  collision, identified model: detection delay (goal <= 50 ms), false alarms (goal 0); CAD model
  payload (10 s, default noise): mass error (goal <= 2 %), CoM error (goal <= 5 mm)

Each run's numbers come from its metrics.json; the script first asserts they are sane (finite,
the baseline PID-only case has a non-zero error, the contact's true external torque is non-zero).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from identify.app.pipeline import run_scenario  # noqa: E402
from identify.common import progress  # noqa: E402
from identify.scenario import load_scenario  # noqa: E402


def _with_seed(path: Path, seed: int, out: Path):
    import dataclasses
    scn = load_scenario(path)
    twin = dict(scn.twin)
    twin["seed"] = seed
    return dataclasses.replace(scn, twin=twin), out / f"{path.stem}_seed{seed}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="/tmp/twinid_bench_closed_loop")
    a = ap.parse_args()
    progress.set_quiet(True)
    out = Path(a.out)
    rows = []
    for seed in a.seeds:
        t0 = time.perf_counter()
        scn, folder = _with_seed(ROOT / "scenarios" / "closed_loop.yaml", seed, out)
        m = run_scenario(scn, out=folder).metrics
        cl, col = m["closed_loop"], m["collision"]
        tr = cl["tracking_rms_rad"]
        assert all(math.isfinite(v) for v in tr.values()) and tr["pid_only"] > 0, tr
        assert max(col["tau_ext_peak_Nm"]) > 1.0, col["tau_ext_peak_Nm"]
        scn, folder = _with_seed(ROOT / "scenarios" / "payload.yaml", seed, out)
        p = run_scenario(scn, out=folder).metrics["payload"]
        assert math.isfinite(p["identified"]["mass_kg"]) and p["identified"]["mass_kg"] > 0
        cad = col["models"].get("cad", {})
        rows.append({"seed": seed, "pid_mrad": 1e3 * tr["pid_only"],
                     "ident_mrad": 1e3 * tr["identified_ff"], "true_mrad": 1e3 * tr["true_ff"],
                     "vs_pid": cl["goals"]["identified_vs_pid"],
                     "vs_true": cl["goals"]["identified_vs_true"],
                     "pid_Nm": cl["pid_torque_rms_Nm"]["pid_only"],
                     "ident_Nm": cl["pid_torque_rms_Nm"]["identified_ff"],
                     "delay_ms": col["detection_delay_ms"], "false": col["false_alarms"],
                     "cad": ("missed" if not cad.get("detected") else
                             f"{cad['detection_delay_ms']:.0f} ms") + f", {cad.get('false_alarms')} fa",
                     "mass_pct": p["errors"]["mass_percent"], "com_mm": 1e3 * p["errors"]["com_m"],
                     "s": time.perf_counter() - t0})
    print("seed | tracking RMS PID / identified / true [mrad] | ident/PID | ident/true | PID torque "
          "RMS PID-only / identified [N*m] | collision delay [ms] | false alarms | CAD | payload "
          "mass [%] | CoM [mm] | wall [s]")
    for r in rows:
        print(f"{r['seed']} | {r['pid_mrad']:.4f} / {r['ident_mrad']:.4f} / {r['true_mrad']:.4f} | "
              f"{r['vs_pid']:.3f} | {r['vs_true']:.3f} | {r['pid_Nm']:.2f} / {r['ident_Nm']:.3f} | "
              f"{r['delay_ms']} | {r['false']} | {r['cad']} | {r['mass_pct']:+.3f} | "
              f"{r['com_mm']:.2f} | {r['s']:.0f}")
    worst = {"vs_pid": max(r["vs_pid"] for r in rows), "vs_true": max(r["vs_true"] for r in rows),
             "delay_ms": max((r["delay_ms"] if r["delay_ms"] is not None else math.inf) for r in rows),
             "false": max(r["false"] for r in rows),
             "mass_pct": max(abs(r["mass_pct"]) for r in rows),
             "com_mm": max(r["com_mm"] for r in rows)}
    goals = {"vs_pid": worst["vs_pid"] <= 0.2, "vs_true": worst["vs_true"] <= 1.2,
             "delay_ms": worst["delay_ms"] <= 50, "false": worst["false"] == 0,
             "mass_pct": worst["mass_pct"] <= 2.0, "com_mm": worst["com_mm"] <= 5.0}
    print("worst case:", json.dumps(worst), "\ngoals met:", json.dumps(goals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
