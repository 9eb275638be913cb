"""Benchmark (issue 12): which excitation objective should be the default? The real pipeline
(``twinid run``: identify.app.pipeline.run_scenario) on the twin, paired over seeds.

    python benchmarks/bench_objective.py [--seeds 5] [--seed0 0] [--a-optimal]
        [--scenarios quickstart paper_replication] [--out DIR]

For each scenario (scenarios/<name>.yaml) and each seed s, every objective (cond, d_optimal, and
a_optimal with --a-optimal) designs the excitation trajectory with ``trajectories.excitation.seed
= s`` and the twin runs it with ``twin.seed = s`` (sensor noise); everything else is the
scenario's. The validation trajectory is the same for every run of a scenario (optimized once, at
the start, with the scenario's own validation settings, then loaded from a file), so the runs of
one seed differ only in the excitation objective: the comparison is paired. No trajectory comes
from the cache (``cache: false``); run folders go under a temporary folder (or --out, where
``results.jsonl`` lets an interrupted benchmark resume).

Per run, from the run's typed results as metrics.json renders them: the median |relative error|
of the identified base parameters against the twin's truth (stage 1; stage 2 where the twin's
reducer law has a constant-coefficient truth), the motor-torque RMS of the headline model
against the RAW measured torque on the validation trajectory and the reduction vs the simplified
model (the paper's headline), the joint-torque RMS of the stage-1 fit on the validation
trajectory (the parameters' own check, without the reducer model), the predicted median
relative std of the excitation trajectory's base parameters, cond(W_base) in SI units and
column-scaled, and the optimizer's wall time.

Printed per scenario: every run, the median over seeds, then for each figure the median ratio
objective / cond with a 95 % bootstrap interval over seeds (paired: the ratio of one seed's two
runs), the wins of each objective and a two-sided sign test, and the trajectories the pipeline
flags as hopeless (cond > COND_HOPELESS); last, a verdict on parameter error and validation RMS.
Lower is better for every figure.
Each figure is checked to be finite and in its range before anything is printed; the load
average is printed (timings depend on it).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from identify.app.pipeline import COND_HOPELESS, build_model, run_scenario  # noqa: E402
from identify.app.trajectories import design_context, get_trajectory  # noqa: E402
from identify.common import progress  # noqa: E402
from identify.scenario import load_scenario  # noqa: E402

OBJECTIVES = ("cond", "d_optimal", "a_optimal")
SCENARIOS = ("quickstart", "paper_replication")
#: figure -> (column header, format); every one: lower is better
FIGURES = {
    "stage1_err_pct": ("stage-1 err %", "{:.3f}"),
    "stage2_err_pct": ("stage-2 err %", "{:.3f}"),
    "val_rms_Nm": ("val RMS N*m", "{:.4f}"),
    "val_rms_tau_j_Nm": ("val τj RMS", "{:.4f}"),
    "val_reduction_pct": ("val red. %", "{:+.1f}"),
    "exc_reduction_pct": ("exc red. %", "{:+.1f}"),
    "pred_rel_std": ("pred rel std", "{:.4f}"),
    "cond": ("cond SI", "{:.1f}"),
    "cond_scaled": ("cond scaled", "{:.2f}"),
    "solver_time_s": ("opt. time s", "{:.1f}"),
}
#: figures compared as ratios objective / cond (the reductions are negative percentages: their
#: ratio would invert "better"; they are compared through the validation RMS itself)
RATIO_FIGURES = ("stage1_err_pct", "stage2_err_pct", "val_rms_Nm", "val_rms_tau_j_Nm",
                 "pred_rel_std", "cond",
                 "cond_scaled", "solver_time_s")


# ------------------------------------------------------------------------------------------------
# scenarios
# ------------------------------------------------------------------------------------------------

def _scenario_dict(name: str) -> dict:
    """The scenario file as a dict with absolute arm paths, no plots, report or recordings."""
    path = ROOT / "scenarios" / f"{name}.yaml"
    d = yaml.safe_load(path.read_text())
    for k in ("urdf", "drives", "description"):
        if d["arm"].get(k) is not None:
            d["arm"][k] = str((path.parent / d["arm"][k]).resolve())
    d.setdefault("outputs", {}).update(plots=False, report=False, save_recordings=False)
    return d


def _write(d: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(d, sort_keys=False))
    return path


def fixed_validation(name: str, folder: Path) -> Path:
    """The scenario's validation trajectory, optimized once (no cache) and saved to a file; an
    existing file (a resumed benchmark) is reused."""
    out = folder / f"{name}_validation.yaml"
    if out.is_file():
        return out
    d = _scenario_dict(name)
    d["trajectories"]["validation"] = dict(d["trajectories"].get("validation") or {}, cache=False)
    scn = load_scenario(_write(d, folder / f"{name}_validation_design.yaml"))
    model = build_model(scn)
    terms = scn.identification.friction_terms
    tr, _info = get_trajectory(scn.trajectories.validation, model, terms, "validation",
                               design_context(scn, model, terms))
    tr.save(out)
    return out


def run_scenario_file(name: str, seed: int, objective: str, validation: Path,
                      folder: Path) -> Path:
    """The benchmark's scenario of one run: the scenario's excitation with `objective` and seed
    `seed` (no cache), twin noise seed `seed`, the fixed validation trajectory."""
    d = _scenario_dict(name)
    d["name"] = f"{name}_{objective}_s{seed}"
    trajs = d["trajectories"]
    trajs["excitation"] = dict(trajs.get("excitation") or {}, seed=seed, objective=objective,
                               cache=False)
    val = dict(trajs.get("validation") or {})
    val.update(source="file", file=str(validation.resolve()))
    trajs["validation"] = val
    d["twin"] = dict(d.get("twin") or {}, seed=seed)
    return _write(d, folder / f"{d['name']}.yaml")


# ------------------------------------------------------------------------------------------------
# one run
# ------------------------------------------------------------------------------------------------

def record_of(metrics: dict) -> dict:
    """The benchmark's figures of one run, read from its metrics (as metrics.json has them)."""
    pe = metrics.get("parameter_errors", {})
    # the fitted model's motor-torque figure (the run's headline is the export, metrics "headline")
    head = "improved" if "improved" in metrics["rms"]["validation"] else "simplified"
    exc = metrics["trajectories"]["excitation"]
    return {
        "stage1_err_pct": pe.get("improved_stage1", {}).get("median_abs_error_percent"),
        "stage1_within": [pe.get("improved_stage1", {}).get("within_3sigma"),
                          pe.get("improved_stage1", {}).get("count")],
        "stage2_err_pct": pe.get("improved_stage2", {}).get("median_abs_error_percent"),
        "val_rms_Nm": metrics["rms"]["validation"][head]["overall"],
        "val_rms_simplified_Nm": metrics["rms"]["validation"]["simplified"]["overall"],
        # the stage-1 fit (rigid body + link friction) on the joint-torque sensor: the
        # parameters' own validation, without the reducer model the twin's law may not share
        "val_rms_tau_j_Nm": metrics["rms"]["validation"].get("stage1_tau_j", {}).get("overall"),
        "val_reduction_pct": metrics["improvement_percent"]["validation"],
        "exc_reduction_pct": metrics["improvement_percent"]["excitation"],
        "pred_rel_std": exc.get("median_rel_std"),
        "cond": exc.get("cond"),
        "cond_scaled": exc.get("cond_scaled"),
        "solver_time_s": exc.get("solver_time_s"),
        "trajectory_stage_s": metrics["timings_s"].get("excitation trajectory"),
        "traj_objective": exc.get("objective"),     # as the run reports them (checked against
        "traj_seed": exc.get("seed"),               # what was asked for)
        "source": exc.get("source"),
        "validation_source": metrics["trajectories"]["validation"].get("source"),
        "headline_model": head,
    }


def sanity(rec: dict, objective: str, seed: int, validation: Path) -> list[str]:
    """What is wrong with one run's record (empty: sane)."""
    bad = []
    if rec["traj_objective"] != objective:
        bad.append(f"excitation objective {rec['traj_objective']!r}, asked for {objective!r}")
    if rec["traj_seed"] != seed:
        bad.append(f"excitation seed {rec['traj_seed']}, asked for {seed}")
    if rec["source"] != "optimized":
        bad.append(f"excitation trajectory source {rec['source']!r} (cached?)")
    if rec["validation_source"] != str(validation.resolve()):
        bad.append(f"validation trajectory from {rec['validation_source']!r}, not the fixed file")

    def pos(key, lo=0.0, hi=math.inf, optional=False):
        v = rec[key]
        if v is None and optional:
            return
        if not (isinstance(v, (int, float)) and math.isfinite(v) and lo < v < hi):
            bad.append(f"{key} = {v!r} not in ({lo}, {hi})")
    pos("stage1_err_pct", hi=1e4)
    pos("stage2_err_pct", hi=1e4, optional=True)
    pos("val_rms_Nm", hi=1e3)
    pos("val_rms_simplified_Nm", hi=1e3)
    pos("val_rms_tau_j_Nm", hi=1e3)
    pos("val_reduction_pct", lo=-100.0, hi=1e4)
    pos("exc_reduction_pct", lo=-100.0, hi=1e4)
    pos("pred_rel_std", hi=1e6)
    pos("cond", lo=1.0 - 1e-9, hi=1e12)
    pos("cond_scaled", lo=1.0 - 1e-9, hi=1e12)
    pos("solver_time_s", hi=1e5)
    if rec["val_rms_Nm"] is not None and rec["val_rms_simplified_Nm"] is not None:
        red = 100.0 * (rec["val_rms_Nm"] / rec["val_rms_simplified_Nm"] - 1.0)
        if abs(red - rec["val_reduction_pct"]) > 1e-6 * max(1.0, abs(red)):
            bad.append(f"validation reduction {rec['val_reduction_pct']} % is not the RMS ratio "
                       f"({red} %)")
    w = rec["stage1_within"]
    if None in w or not 0 <= w[0] <= w[1] or w[1] <= 0:
        bad.append(f"stage-1 within 3 sigma {w}")
    return bad


def run_folder_of(folder: Path, name: str, seed: int, objective: str) -> Path:
    return folder / "runs" / f"{name}_{objective}_s{seed}"


def refreshed(rec: dict, folder: Path) -> dict:
    """A stored record with its figures read again from its run folder's metrics.json (figures
    added to the benchmark after the run), when the folder is there."""
    f = run_folder_of(folder, rec["scenario"], rec["seed"], rec["objective"]) / "metrics.json"
    if not f.is_file():
        return rec
    new = record_of(json.loads(f.read_text()))
    new.update({k: rec[k] for k in ("scenario", "seed", "objective", "load_avg", "run_wall_s")})
    return new


def run_one(name: str, seed: int, objective: str, validation: Path, folder: Path) -> dict:
    scn = load_scenario(run_scenario_file(name, seed, objective, validation, folder))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    res = run_scenario(scn, out=run_folder_of(folder, name, seed, objective))
    rec = record_of(res.metrics)
    rec.update(scenario=name, seed=seed, objective=objective, load_avg=load,
               run_wall_s=time.perf_counter() - t0)
    bad = sanity(rec, objective, seed, validation)
    if bad:
        raise SystemExit(f"insane result of {name} / {objective} / seed {seed}: " + "; ".join(bad))
    return rec


# ------------------------------------------------------------------------------------------------
# statistics
# ------------------------------------------------------------------------------------------------

def bootstrap_median_ratio(ratios: np.ndarray, n_boot: int = 10000, seed: int = 0
                           ) -> tuple[float, float, float]:
    """Median of the paired ratios (one per seed) and the 95 % percentile-bootstrap interval of
    that median (seeds resampled with replacement, `n_boot` times, fixed `seed`)."""
    r = np.asarray(ratios, float)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, r.size, size=(n_boot, r.size))
    meds = np.median(r[idx], axis=1)
    lo, hi = np.percentile(meds, [2.5, 97.5])
    return float(np.median(r)), float(lo), float(hi)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided sign-test p-value (ties left out)."""
    from scipy.stats import binomtest
    n = wins + losses
    return 1.0 if n == 0 else float(binomtest(wins, n, 0.5).pvalue)


def summarize(recs: list[dict], objectives: list[str]) -> dict:
    """figure -> objective -> {median, ratio (median, lo, hi), wins, losses, p} over the seeds
    that ran every objective."""
    by = {(r["seed"], r["objective"]): r for r in recs}
    seeds = sorted({s for s, _ in by if all((s, o) in by for o in objectives)})
    out = {"seeds": seeds}
    for fig in FIGURES:
        vals = {o: np.array([by[s, o][fig] for s in seeds], dtype=float) for o in objectives}
        if any(np.isnan(v).any() or v.size == 0 for v in vals.values()):
            continue
        d = {o: {"median": float(np.median(v))} for o, v in vals.items()}
        if fig in RATIO_FIGURES:
            for o in objectives[1:]:
                ratio = vals[o] / vals["cond"]
                wins, losses = int(np.sum(vals[o] < vals["cond"])), int(np.sum(vals[o] > vals["cond"]))
                d[o].update(ratio=bootstrap_median_ratio(ratio), wins=wins, losses=losses,
                            p=sign_test(wins, losses))
        best = np.argmin(np.stack([vals[o] for o in objectives]), axis=0)
        for k, o in enumerate(objectives):
            d[o]["best_of_seeds"] = int(np.sum(best == k))
        out[fig] = d
    return out


# ------------------------------------------------------------------------------------------------
# printing
# ------------------------------------------------------------------------------------------------

def print_scenario(name: str, recs: list[dict], objectives: list[str]) -> dict:
    figs = [f for f in FIGURES if any(r[f] is not None for r in recs)]
    print(f"\n== {name} (twin; excitation seed = twin noise seed; fixed validation trajectory)")
    head = f"{'seed':>4} {'objective':<10}" + "".join(f"{FIGURES[f][0]:>14}" for f in figs) \
        + f"{'within 3σ':>10}{'load':>6}"
    print(head)
    for r in sorted(recs, key=lambda r: (r["seed"], objectives.index(r["objective"]))):
        print(f"{r['seed']:>4} {r['objective']:<10}"
              + "".join(f"{FIGURES[f][1].format(r[f]):>14}" for f in figs)
              + f"{'{}/{}'.format(*r['stage1_within']):>10}{r['load_avg']:>6.1f}")
    s = summarize(recs, objectives)
    n = len(s["seeds"])
    print(f"median over {n} seeds ({s['seeds'][0]}..{s['seeds'][-1]}):")
    for o in objectives:
        print(f"{'':>4} {o:<10}" + "".join(
            f"{FIGURES[f][1].format(s[f][o]['median']):>14}" if f in s else f"{'-':>14}"
            for f in figs))
    for o in objectives[1:]:
        print(f"paired {o} / cond: median ratio [95 % bootstrap interval]; {o} better in k of "
              f"{n} seeds; two-sided sign test p")
        for f in figs:
            if f not in s or "ratio" not in s[f][o]:
                continue
            m, lo, hi = s[f][o]["ratio"]
            print(f"  {FIGURES[f][0]:<14} {m:6.3f} [{lo:.3f}, {hi:.3f}]   "
                  f"{s[f][o]['wins']} of {n} (worse {s[f][o]['losses']})   p = {s[f][o]['p']:.3f}")
    for o in objectives:
        hopeless = [r["seed"] for r in recs if r["objective"] == o and r["cond"] > COND_HOPELESS]
        print(f"{o}: {len(hopeless)} of {n} excitation trajectories hopeless (cond(W_base) > "
              f"{COND_HOPELESS:g}, the pipeline's warning)"
              + (f": seeds {hopeless}" if hopeless else ""))
    print("best objective per seed (counts): " + "; ".join(
        f"{FIGURES[f][0]}: " + ", ".join(f"{o} {s[f][o]['best_of_seeds']}" for o in objectives)
        for f in ("stage1_err_pct", "stage2_err_pct", "val_rms_Nm", "val_rms_tau_j_Nm") if f in s))
    return s


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=5, help="optimization / twin noise seeds")
    ap.add_argument("--seed0", type=int, default=0, help="first seed")
    ap.add_argument("--a-optimal", action="store_true", help="also the a_optimal objective")
    ap.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    ap.add_argument("--out", type=Path, default=None,
                    help="folder of the runs and results.jsonl (resumes); default: a temp dir")
    a = ap.parse_args(argv)
    if a.seeds < 2:
        ap.error("--seeds: at least 2 for a paired comparison")
    objectives = ["cond", "d_optimal"] + (["a_optimal"] if a.a_optimal else [])
    progress.set_quiet(True)
    folder = a.out or Path(tempfile.mkdtemp(prefix="twinid_bench_objective_"))
    folder.mkdir(parents=True, exist_ok=True)
    store = folder / "results.jsonl"
    done = [refreshed(json.loads(x), folder)
            for x in store.read_text().splitlines()] if store.is_file() else []
    have = {(r["scenario"], r["seed"], r["objective"]) for r in done}
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    seeds = list(range(a.seed0, a.seed0 + a.seeds))
    for name in a.scenarios:
        validation = fixed_validation(name, folder)
        for seed in seeds:
            for obj in objectives:
                if (name, seed, obj) in have:
                    continue
                rec = run_one(name, seed, obj, validation, folder)
                done.append(rec)
                with store.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                print(f"  {name} seed {seed} {obj}: stage-1 err {rec['stage1_err_pct']:.3f} %, "
                      f"val RMS {rec['val_rms_Nm']:.4f} N*m, opt. {rec['solver_time_s']:.1f} s "
                      f"(load {rec['load_avg']:.1f})", flush=True)
    wall = time.perf_counter() - t0
    summaries = {}
    for name in a.scenarios:
        recs = [r for r in done if r["scenario"] == name and r["seed"] in seeds
                and r["objective"] in objectives]
        for r in recs:         # resumed records are checked again before printing
            bad = sanity(r, r["objective"], r["seed"], folder / f"{name}_validation.yaml")
            if bad:
                raise SystemExit(f"insane stored result {name} / {r['objective']} / seed "
                                 f"{r['seed']}: " + "; ".join(bad))
        summaries[name] = print_scenario(name, recs, objectives)
    print("\nverdict (lower is better; by parameter error and validation RMS, not the objective's "
          "own criterion; 95 % bootstrap interval of the median paired ratio):")
    sides = []
    for name, s in summaries.items():
        for f in ("stage1_err_pct", "stage2_err_pct", "val_rms_Nm", "val_rms_tau_j_Nm"):
            if f in s:
                m, lo, hi = s[f]["d_optimal"]["ratio"]
                side = ("d_optimal" if hi < 1 else "cond" if lo > 1 else "neither (interval "
                        "contains 1)")
                sides.append(side)
                print(f"  {name:<18} {FIGURES[f][0]:<14} d_optimal/cond {m:.3f} "
                      f"[{lo:.3f}, {hi:.3f}] -> {side}")
    agreed = set(sides) if len(set(sides)) == 1 else set()
    print("  => " + (f"the evidence favours {agreed.pop()} on every figure of every scenario"
                     if agreed and "neither" not in next(iter(agreed))
                     else "mixed: no objective is better on every figure of every scenario"))
    loads = [r["load_avg"] for r in done if r["seed"] in seeds and r["objective"] in objectives]
    if loads:
        print(f"load average (1 min) at the start of the runs: {min(loads):.1f} to "
              f"{max(loads):.1f}")
    load1 = os.getloadavg()
    print(f"\nload average at start {load0[0]:.1f} / {load0[1]:.1f} / {load0[2]:.1f}, at end "
          f"{load1[0]:.1f} / {load1[1]:.1f} / {load1[2]:.1f} (2 cores); {wall:.0f} s this "
          f"invocation; run folders and results.jsonl in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
