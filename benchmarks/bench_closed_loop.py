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

    python benchmarks/bench_closed_loop.py --transfer [--seeds 0]

The model at work on the matched law (scenarios/closed_loop.yaml) and on laws no fitted model
shares (scenarios/closed_loop_independent.yaml: speed_efficiency, load-dependent and Dahl
presliding link friction), issue 22 item 4: feed-forward and payload as above, and collision
thresholds TRANSFERRED -- calibrated on a collision-free run of the excitation trajectory, judged
on the validation trajectory: false alarms over 60 s (6 periods), detection rate and delay over
20 onsets of 5 / 10 / 20 N on the forearm while moving (directions +x, +y, -x, -y in turn) and
20 onsets at standstill (the validation start pose held, +-x in turn), per observer signal
(motor torque, joint torque sensor). "felt" counts the onsets whose true external joint torque
(the twin's) reaches 1 N*m on some joint (a contact along a joint axis loads no joint).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

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


def _contacts(force: float, times, dirs) -> list:
    """Twin contact settings on the forearm (link3, at its CoM), 0.2 s each, world directions
    `dirs` (k, 3) in turn."""
    return [{"link": "link3", "time_s": float(t), "duration_s": 0.2,
             "force_N": (force * np.asarray(dirs[i % len(dirs)], float)).tolist()}
            for i, t in enumerate(times)]


def transfer_study(scn, folder: Path, seed: int) -> list:
    """Rows (signal, rule, case, OnsetDetection, thresholds) of the thresholds-transfer study
    (module doc) with the model exported in `folder`, on the twin of `scn` -- the product's
    identify.control.transfer (calibrate, judge, merge_onsets) over many onsets."""
    from identify.app.acquisition import backend_arm
    from identify.app.inputs import build_model
    from identify.app.trajectories import get_trajectory
    from identify.control.closed_loop import run_case
    from identify.control.feedforward import feedforward
    from identify.control.joint_model import from_export
    from identify.backend.contact import Contact
    from identify.control.transfer import calibrate, hold, judge, merge_onsets
    from identify.outputs import layout
    model = build_model(scn)
    ex = layout.exported_model(folder)
    ident = from_export(model, ex.urdf, ex.sidecar, ex.parameters)
    trs = {k: get_trajectory(getattr(scn.trajectories, k), model,
                             scn.identification.friction_terms, k)[0]
           for k in ("excitation", "validation")}
    val = trs["validation"]
    col = scn.closed_loop.collision
    s = {**scn.backend_settings(), "sample_rate_hz": scn.closed_loop.sample_rate_hz}
    arm, ff = backend_arm(scn, model), feedforward(ident)
    times = 0.35 + 0.5 * np.arange(20)
    moving = [(1, 0, 0), (0, 1, 0), (-1, 0, 0), (0, -1, 0)]
    runs = {"calibration (excitation)": (trs["excitation"], 1, []),
            "rest calibration": (hold(trs["excitation"].q0, 3.0), 1, []),
            "free, other trajectory": (val, 6, []),
            **{f"{f:g} N moving": (val, 1, _contacts(f, times, moving)) for f in (5.0, 10.0, 20.0)},
            # one contact per rest episode (0.8 s hold, contact at 0.5 s): a contact at rest moves
            # the friction state, a detection at rest latches (docs/closed_loop.md)
            **{f"{f:g} N at rest #{i}": (hold(val.q0, 0.8), 1,
                                         _contacts(f, [0.5], [((-1) ** i, 0, 0)]))
               for f in (5.0, 10.0, 20.0) for i in range(20)}}
    recs = {k: run_case("twin", arm, {**s, "seed": seed + 10 + i, "contacts": c}, tr, ff,
                        periods=p)
            for i, (k, (tr, p, c)) in enumerate(runs.items())}
    judged = {k: (rec, [Contact(**{**c, "force_N": tuple(c["force_N"])}) for c in runs[k][2]])
              for k, rec in list(recs.items())[2:]}
    rows = []
    for sig in ("tau_m", "tau_j"):
        kw = {"signal": sig, "gain": col.observer_gain, "stiction_speed": col.stiction_speed_rad_s}
        ra = calibrate(ident, recs["calibration (excitation)"], recs["rest calibration"],
                       settle_s=col.settle_s, k_sigma=col.k_sigma, peak_factor=col.peak_factor,
                       margin_Nm=col.margin_Nm, **kw)
        for rule, cases in judge(ident, ra, judged, **kw).items():
            th = ra.moving.value if rule == "static" else ra.rest.value
            label = "static" if rule == "static" else "rest-aware"
            merged = {}
            for k, od in cases.items():        # the one-contact rest runs as one row
                merged.setdefault(k.split(" #")[0], []).append(od)
            rows += [(sig, label, k, merge_onsets(ods), th) for k, ods in merged.items()]
    return rows


def _print_transfer(law: str, rows) -> None:
    print(f"\n{law}: thresholds from the excitation run, judged on the validation trajectory")
    print("signal | thresholds | case | detected (all / felt >= 1 N*m) | delay median / max [ms] | "
          "false alarms | duration [s] | thresholds (static: moving; rest-aware: at rest) [N*m]")
    for sig, rule, k, od, th in sorted(rows, key=lambda x: (x[0], x[1]), reverse=True):
        felt = od.tau_ext_peak_Nm >= 1.0
        d = od.delay_ms[od.detected]
        dl = f"{np.median(d):.0f} / {np.max(d):.0f}" if d.size else "--"
        det = (f"{int(od.detected.sum())}/{od.detected.size} / "
               f"{int(od.detected[felt].sum())}/{int(felt.sum())}") if od.detected.size else "--"
        print(f"{sig} | {rule} | {k} | {det} | {dl} | {od.false_alarms} | {od.duration_s:.0f} | "
              f"{' '.join(f'{v:.2g}' for v in th)}")


def transfer_main(seeds, out: Path) -> int:
    """The --transfer mode (module doc)."""
    for seed in seeds:
        for stem in ("closed_loop", "closed_loop_independent"):
            scn, folder = _with_seed(ROOT / "scenarios" / f"{stem}.yaml", seed, out)
            m = run_scenario(scn, out=folder).metrics
            cl = m["closed_loop"]
            tr = cl["tracking_rms_rad"]
            print(f"\n== {stem}, seed {seed}: reducer law "
                  f"{scn.twin.get('reducer_friction_law', 'opposing')}; tracking RMS PID / "
                  f"identified / true-constant-model [mrad] {1e3 * tr['pid_only']:.4f} / "
                  f"{1e3 * tr['identified_ff']:.4f} / {1e3 * tr['true_ff']:.4f}; identified/PID "
                  f"{cl['goals']['identified_vs_pid']:.3f}, identified/true "
                  f"{cl['goals']['identified_vs_true']:.3f}")
            from identify.outputs.transfer import transfer_summary
            print("\n".join(["the product's closed_loop.collision (metrics.json collision_transfer):"]
                            + transfer_summary(m.get("collision_transfer"))))
            _print_transfer(stem, transfer_study(scn, folder, seed))
            pscn, pfolder = _with_seed(ROOT / "scenarios" / "payload.yaml", seed, out)
            if stem != "closed_loop":
                import dataclasses
                laws = {k: v for k, v in scn.twin.items() if k not in ("sample_rate_hz", "seed")}
                pscn = dataclasses.replace(pscn, twin={**pscn.twin, **laws})
                pfolder = pfolder.with_name(pfolder.name + "_independent")
            p = run_scenario(pscn, out=pfolder).metrics["payload"]
            print(f"payload ({stem} laws): mass {p['errors']['mass_percent']:+.3f} %, CoM "
                  f"{1e3 * p['errors']['com_m']:.2f} mm")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--out", default="/tmp/twinid_bench_closed_loop")
    ap.add_argument("--transfer", action="store_true",
                    help="the model at work on the matched and the independent laws (issue 22)")
    a = ap.parse_args()
    progress.set_quiet(True)
    out = Path(a.out)
    if a.transfer:
        return transfer_main(a.seeds, out)
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
