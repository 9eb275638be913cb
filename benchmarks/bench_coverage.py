"""Benchmark: is the reported uncertainty calibrated? A 20-seed noise sweep on the twin at
realistic noise (encoder 1e-4 rad, torque sensor 0.05 N*m, motor current 0.02 A; quickstart
trajectories, 100 Hz) and, per stage, the fraction of z = (estimate - truth) / reported std within
1, 2 and 3 sigma (issue 16, part 3). Targets: within 3 sigma >= 97 %, within 1 sigma in
[60 %, 76 %] (a calibrated Gaussian std gives 68.3 % / 95.4 % / 99.7 %).

    python benchmarks/bench_coverage.py [--seeds 20] [--workers 2] [--out DIR]

The sweep folder is kept (default a temporary one); re-running on the same --out resumes. Before
printing the table (and the time), the script checks that the sweep produced what it times: every
run finished, each stage has z values from every seed.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from identify.app.sweep import run_sweep  # noqa: E402
from identify.scenario import load_scenario  # noqa: E402

TARGET_3 = 0.97
TARGET_1 = (0.60, 0.76)

SCENARIO = """\
name: coverage
arm:
  urdf: {a}/cobot6.urdf
  drives: {a}/cobot6_drives.yaml
  description: {a}/cobot6.yaml
backend: twin
trajectories:
  excitation: {{harmonics: 4, period_s: 10.0, grid: 80, starts: 1, max_iter: 100, seed: 0}}
  validation: {{harmonics: 3, period_s: 10.0, grid: 80, starts: 1, max_iter: 100, seed: 1}}
twin: {{sample_rate_hz: 100}}
processing: {{smooth_passes: 20}}
identification: {{joint_model: both, estimator: wls, physical_consistency: false}}
sweep:
  noise: {{position: [1.0e-4], torque: [0.05], current: [0.02]}}
  combine: [together]
  seeds: {seeds}
  executor: local
  workers: {workers}
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    a = ap.parse_args(argv)
    out = a.out or Path(tempfile.mkdtemp(prefix="twinid_coverage_"))
    out.mkdir(parents=True, exist_ok=True)
    scn_file = out / "coverage.yaml"
    scn_file.write_text(SCENARIO.format(a=ROOT / "assets", seeds=a.seeds, workers=a.workers))
    t0 = time.perf_counter()
    res = run_sweep(load_scenario(scn_file), out=out / "sweep", workers=a.workers)
    wall = time.perf_counter() - t0
    (pt,) = res.summary["points"]
    if pt["runs_finished"] != a.seeds:
        raise SystemExit(f"insane result: {pt['runs_finished']} of {a.seeds} runs finished")
    cov = pt["coverage"]
    for stage in ("improved_stage1", "improved_stage2"):
        if stage not in cov or cov[stage]["n"] < a.seeds:
            raise SystemExit(f"insane result: no z values of {stage} from every seed ({cov})")
    print(f"z = (estimate - truth) / std over {a.seeds} seeds, encoder 1e-4 rad, torque 0.05 N*m, "
          f"current 0.02 A (100 Hz, quickstart trajectories); sweep folder {res.folder}")
    print(f"  {'stage':<18} {'n':>5} {'1 sigma':>9} {'2 sigma':>9} {'3 sigma':>9} {'RMS z':>7}  "
          f"targets: 3 sigma >= {TARGET_3:.0%}, 1 sigma in [{TARGET_1[0]:.0%}, {TARGET_1[1]:.0%}]")
    for stage, c in cov.items():
        ok3 = c["within_3sigma"] >= TARGET_3
        ok1 = TARGET_1[0] <= c["within_1sigma"] <= TARGET_1[1]
        print(f"  {stage:<18} {c['n']:>5} {c['within_1sigma']:>9.1%} {c['within_2sigma']:>9.1%} "
              f"{c['within_3sigma']:>9.1%} {c['rms_z']:>7.3f}  "
              f"3 sigma {'MET' if ok3 else 'NOT MET'}, 1 sigma {'MET' if ok1 else 'NOT MET'}")
    print(f"wall time {wall:.1f} s ({a.workers} workers)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
