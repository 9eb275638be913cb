"""Benchmark: `twinid fit` of an hour-long log -- 1 h at 1 kHz, 3.6 M samples x 6 joints
(issue 14 target: <= 60 s wall, <= 2 GB resident on 2 cores), and the memory of reading a
1 M-row CSV.

    python benchmarks/bench_long_log.py [--hours 1.0] [--rate 1000] [--csv-rows 1000000]
        [--work DIR] [--skip-csv]

The logs are simulated from the reference arm's URDF (identify.logs.simulate: rigid body +
viscous / tanh-Coulomb / offset / armature, currents only, noise) and written once into --work
(not timed). Each fit runs in a fresh Python process with DEFAULT identification settings;
that process reports its wall time and its peak resident memory (resource.getrusage,
ru_maxrss). Baseline measured in the same run: the same fit of a log 1/10 as long; printed:
time and memory of both, the ratio per sample, and whether the targets are met. The timed work is
checked before anything is printed: the exported model's validation RMS must be below the
simulated noise-level bound.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    from pathlib import Path
    sys.path.insert(0, {root!r})
    t0 = time.perf_counter()
    what = {what!r}
    if what == "make":
        sys.path.insert(0, {bench!r})
        from bench_long_log import _make_log, _make_csv
        kind, a, b = {arg!r}
        p = _make_log(Path({out!r}), a, b, kind) if kind != "csv" else _make_csv(Path({out!r}), a)
        out = {{"path": str(p)}}
    elif what == "fit":
        from identify.app.pipeline import fit_scenario
        from identify.scenario.load import load_scenario
        res = fit_scenario(load_scenario({arg!r}), out={out!r})
        out = {{"rms": res.metrics["export"]["rms"]["validation"]["overall"],
                "samples": res.metrics["trajectories"]["excitation"]["samples"]}}
    else:
        from identify.logs.load import load_log
        from identify.scenario.spec import ColumnMap, LogSpec
        n = 6
        cm = ColumnMap(time=0, q=tuple(range(1, 7)), tau_m=tuple(range(13, 19)))
        rec = load_log(LogSpec(file={arg!r}, format="csv", columns=cm, header=True,
                               check_units=False), ["joint%d" % (j + 1) for j in range(n)])
        out = {{"samples": int(rec.n_samples)}}
    out["wall_s"] = time.perf_counter() - t0
    out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print("RESULT " + json.dumps(out))
""")


def _child(what: str, arg, out: str | None = None) -> dict:
    """Run `what` in a fresh process (the parent stays small: Linux carries ru_maxrss over
    fork + exec, so a parent that had generated the logs would inflate the children's peaks)."""
    code = _CHILD.format(root=str(ROOT), bench=str(Path(__file__).resolve().parent),
                         what=what, arg=arg, out=out)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
    if p.returncode != 0 or not line:
        raise SystemExit(f"child {what} failed ({p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(line[0][7:])


def _make_log(work: Path, hours: float, rate: float, tag: str) -> Path:
    """Simulated currents-only log (NPZ, 2-D arrays) of `hours` at `rate`, with its scenario
    (runs in a child process, see _child)."""
    import numpy as np
    import yaml
    from identify.logs.simulate import simulate
    from identify.model.robot_model import RobotModel, reference_paths
    d = work / tag
    scn = d / "fit.yaml"
    if scn.is_file():
        return scn
    d.mkdir(parents=True, exist_ok=True)
    urdf = str(reference_paths()["urdf"])
    model = RobotModel.from_urdf(urdf)
    for label, dur, seed in (("excitation", hours * 3600.0, 0), ("validation", 60.0, 1)):
        log = simulate(model, duration_s=dur, rate_hz=rate, signals="tau_m", seed=seed)
        np.savez(d / f"{label}.npz", t=log.t, q=log.q, i_m=log.i_m)
        gains = log.truth["gains"]
        del log
    fit = {k: {"file": f"{k}.npz", "format": "npz", "current_gains": gains,
               "columns": {"time": "t", "q": "q", "i_m": "i_m"}}
           for k in ("excitation", "validation")}
    scn.write_text(yaml.safe_dump({"name": f"long_{tag}", "arm": {"urdf": urdf}, "fit": fit,
                                   "outputs": {"dir": str(d / "runs")}}))
    return scn


def _make_csv(work: Path, rows: int, _unused=0) -> Path:
    import numpy as np
    p = work / f"rows_{rows}.csv"
    if p.is_file():
        return p
    rng = np.random.default_rng(0)
    t = np.arange(rows) / 1000.0
    block = 100_000
    with open(p, "w") as f:
        f.write(",".join(["t"] + [f"c{k}" for k in range(18)]) + "\n")
        for a in range(0, rows, block):
            b = min(rows, a + block)
            data = np.column_stack([t[a:b], 0.5 * np.sin(t[a:b, None] + np.arange(18)) +
                                    1e-3 * rng.normal(size=(b - a, 18))])
            np.savetxt(f, data, delimiter=",", fmt="%.9g")
    return p


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--rate", type=float, default=1000.0)
    ap.add_argument("--csv-rows", type=int, default=1_000_000)
    ap.add_argument("--work", default=os.path.join(os.environ.get("TMPDIR", "/tmp"),
                                                   "twinid_bench_long"))
    ap.add_argument("--skip-csv", action="store_true")
    a = ap.parse_args()
    work = Path(a.work)
    work.mkdir(parents=True, exist_ok=True)
    big = Path(_child("make", (f"{a.hours:g}h", a.hours, a.rate), str(work))["path"])
    small = Path(_child("make", (f"{a.hours / 10:g}h", a.hours / 10, a.rate), str(work))["path"])
    base = _child("fit", str(small), str(small.parent / "run"))
    res = _child("fit", str(big), str(big.parent / "run"))
    for r in (base, res):                 # the timed work produced a sane model
        assert r["rms"] < 1.0, r
    n_big, n_small = a.hours * 3600 * a.rate, a.hours * 360 * a.rate
    print(f"fit of {a.hours:g} h at {a.rate:g} Hz ({n_big / 1e6:.2f} M samples x 6 joints): "
          f"{res['wall_s']:.1f} s wall, peak RSS {res['maxrss_mb']:.0f} MB, exported-model "
          f"validation RMS {res['rms']:.4f} N*m")
    print(f"baseline (same run), {a.hours / 10:g} h: {base['wall_s']:.1f} s, peak RSS "
          f"{base['maxrss_mb']:.0f} MB, RMS {base['rms']:.4f} N*m")
    per = (res["wall_s"] / n_big) / (base["wall_s"] / n_small)
    print(f"time per sample vs baseline: {per:.2f}x; memory: {res['maxrss_mb'] / base['maxrss_mb']:.2f}x "
          f"for 10x the samples")
    print(f"target <= 60 s: {'met' if res['wall_s'] <= 60 else 'NOT met'}; "
          f"<= 2 GB: {'met' if res['maxrss_mb'] <= 2048 else 'NOT met'}")
    if not a.skip_csv:
        csv = Path(_child("make", ("csv", a.csv_rows, 0), str(work))["path"])
        r = _child("csv", str(csv))
        assert r["samples"] == a.csv_rows, r
        print(f"reading a {a.csv_rows / 1e6:g} M-row, 19-column CSV ({csv.stat().st_size / 1e6:.0f} MB): "
              f"{r['wall_s']:.1f} s, peak RSS {r['maxrss_mb']:.0f} MB (target: far below 10 GB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
