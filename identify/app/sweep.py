"""Sweeps on the twin: a grid of twin laws / imperfections x sensor-noise levels x Monte Carlo
seeds.

    from identify.scenario.spec import load_scenario
    from identify.app.sweep import run_sweep
    res = run_sweep(load_scenario("scenarios/noise_sweep.yaml"), out="runs/sweep1")
    res.folder, res.summary

Grid (scenario ``sweep:``): per noise channel -- ``position`` (encoder, [rad]), ``torque`` (joint
torque sensor, [N*m]), ``current`` (motor current, [A]) -- a list of noise standard deviations.
``combine: separate`` varies one channel at a time (the others at 0); ``together`` sets every
channel to its k-th level at once; ``noise: {}`` leaves the scenario's own noise settings (one
point). ``twin:`` (optional) lists twin settings to vary -- reducer laws and imperfections, e.g.
``[{reducer_friction_law: opposing}, {label: independent, reducer_friction_law: speed_efficiency,
presliding_rad: 5.0e-4}]`` -- each a mapping of twin keys over the scenario's ``twin:`` with an
optional ``label``; every entry is crossed with the noise grid, so the summary reports per law the
RMS reduction of the improved over the simplified model and the coverage of the reported std.
Each grid point runs ``seeds`` Monte Carlo seeds (twin setting
``seed`` = seed0 .. seed0 + seeds - 1). A run = the excitation and validation trajectories on the
twin, identification, and per run: the base-parameter errors of stage 1 against the twin's truth
and the motor-torque RMS of every model on both trajectories.

Runs are independent tasks. Executors: local worker processes (default, all cores, no service
needed) or a Dask distributed cluster (``--dask ADDRESS`` or ``sweep.executor: dask`` with
``sweep.dask_address``). The trajectories are optimized once, before the runs. Each finished run
is written to ``<folder>/runs/<run_id>.json`` (atomically) as soon as it completes, and a re-run on
the same folder skips every run whose file exists -- an interrupted sweep resumes where it stopped.
The run id encodes the twin entry's label, the noise levels and the seed, so identical grid
points are run once.

Outputs: ``sweep.yaml`` (the resolved scenario), ``runs/*.json``, ``summary.json``, ``summary.md``,
``summary.html`` and ``plots/sweep_*.png`` (median over seeds with a 10-90 % band).
"""
from __future__ import annotations

import concurrent.futures as cf
import dataclasses
import datetime as _dt
import hashlib
import json
import multiprocessing as mp
import os
import re
import time
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from identify.common import interrupts, progress
from identify.common.errors import InputError
from identify.common.fileio import hold_folder_lock, read_yaml
from identify.scenario.spec import NOISE_ALIASES, Scenario, twin_label

from .acquisition import record
from .identification import identify_recordings
from .inputs import build_model, check_budget, require_backend_files
from identify.outputs.render import sweep_record
from .inputs import resolved_scenario
from .trajectories import trajectories

__all__ = ["NOISE_SETTINGS", "SweepTask", "SweepResult", "grid", "run_task", "run_sweep",
           "summarize"]

# sweep channel -> twin setting it sets (twin/config.py TwinSettings)
NOISE_SETTINGS = {"position": "encoder_noise_rad", "torque": "torque_noise_Nm",
                  "current": "current_noise_A"}
assert set(NOISE_SETTINGS) == set(NOISE_ALIASES)


@dataclass(frozen=True)
class SweepTask:
    """One run: noise level per channel (empty: the scenario's noise), the Monte Carlo seed and
    the twin settings of its ``sweep.twin`` entry (empty without one)."""
    run_id: str
    levels: tuple          # ((channel, std), ...) for every channel, in NOISE_ALIASES order
    seed: int
    twin: tuple = ()       # ((twin key, value), ...) over the scenario's twin settings
    twin_label: str = ""   # the entry's label ("" without sweep.twin)

    def settings(self, base: dict) -> dict:
        """Twin settings of this run: the scenario's, with the twin entry's settings, the noise
        levels and the seed."""
        s = dict(base)
        s.update(dict(self.twin))
        if self.levels:
            s.update({NOISE_SETTINGS[ch]: float(v) for ch, v in self.levels})
            s["noise"] = True
        s["seed"] = int(self.seed)
        return s


def _run_id(levels: dict, seed: int, label: str = "") -> str:
    parts = [f"{ch[0]}{levels[ch]:.6g}" for ch in NOISE_ALIASES] if levels else ["noise_scenario"]
    rid = "_".join(parts) + f"_s{seed}"
    if label:     # a readable prefix and a hash: labels that sanitize alike stay apart
        safe = re.sub(r"[^A-Za-z0-9_.+-]", "_", label)[:40]
        rid = f"{safe}-{hashlib.sha256(label.encode()).hexdigest()[:6]}__{rid}"
    return re.sub(r"[^A-Za-z0-9_.+-]", "_", rid)


def _twin_entries(scn: Scenario) -> list[tuple[str, tuple]]:
    """(label, ((key, value), ...)) per sweep.twin entry; [("", ())] without sweep.twin."""
    if not scn.sweep.twin:
        return [("", ())]
    return [(twin_label(e), tuple(sorted((k, v) for k, v in e.items() if k != "label")))
            for e in scn.sweep.twin]


def grid(scn: Scenario) -> tuple[list[SweepTask], list[dict]]:
    """Unique tasks and the grid points [{twin, twin_settings, combine, channel, level_index,
    levels, run_ids}] (twin entries outermost; ``combine: scenario`` for ``noise: {}``)."""
    sw = scn.sweep
    channels = [c for c in NOISE_ALIASES if c in sw.noise]
    seeds = [sw.seed0 + k for k in range(sw.seeds)]
    tasks: dict[str, SweepTask] = {}
    points = []

    def add(entry, combine, channel, k, levels):
        label, over = entry
        full = {c: float(levels.get(c, 0.0)) for c in NOISE_ALIASES} if levels is not None else {}
        ids = []
        for s in seeds:
            rid = _run_id(full, s, label)
            tasks.setdefault(rid, SweepTask(rid, tuple(full.items()), s, over, label))
            ids.append(rid)
        points.append({"twin": label, "twin_settings": dict(over), "combine": combine,
                       "channel": channel, "level_index": k, "levels": full, "run_ids": ids})

    for entry in _twin_entries(scn):
        if not channels:
            add(entry, "scenario", "none", 0, None)
            continue
        if "separate" in sw.combine:
            for ch in channels:
                for k, lv in enumerate(sw.noise[ch]):
                    add(entry, "separate", ch, k, {ch: lv})
        if "together" in sw.combine:
            for k in range(len(sw.noise[channels[0]])):
                add(entry, "together", "all", k, {ch: sw.noise[ch][k] for ch in channels})
    return list(tasks.values()), points


# ------------------------------------------------------------------------------------------------
# one run (executes in a worker process / on a Dask worker)
# ------------------------------------------------------------------------------------------------
_MODEL_CACHE: dict = {}


def _model(scn: Scenario):
    key = (str(scn.arm.urdf), scn.arm.joints, str(scn.arm.description))
    if key not in _MODEL_CACHE:
        _MODEL_CACHE[key] = build_model(scn)
    return _MODEL_CACHE[key]


def run_task(scn: Scenario, trajs: dict, task: SweepTask) -> dict:
    """Run one sweep task; returns its JSON-able record (no files written here)."""
    progress.set_quiet(True)      # workers never draw bars; the driver shows the sweep's bar
    t0 = time.perf_counter()
    model = _model(scn)
    recs = record(scn, trajs, model=model, settings=task.settings(scn.twin), show=False)
    ident = identify_recordings(scn, model, recs, decompose=False)
    out = sweep_record(ident, run_id=task.run_id, levels=task.levels, seed=task.seed,
                       time_s=time.perf_counter() - t0, host=os.uname().nodename,
                       pid=os.getpid())
    if task.twin_label:
        out.update(twin=task.twin_label, twin_settings=dict(task.twin))
    return out


def _run_task_star(args):
    return run_task(*args)


# ------------------------------------------------------------------------------------------------
# driver
# ------------------------------------------------------------------------------------------------
@dataclass
class SweepResult:
    folder: Path
    summary: dict
    ran: list           # run ids executed now
    skipped: list       # run ids found finished on disk


def _fingerprint(scn: Scenario) -> str:
    """Hash of everything that changes a run's numbers (not the grid, executor or outputs)."""
    d = scn.resolved()
    for k in ("sweep", "outputs", "name", "description", "fit"):
        d.pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _atomic_json(path: Path, data) -> None:
    tmp = path.with_name(path.name + f".{os.getpid()}.partial")
    tmp.write_text(json.dumps(data, indent=1, allow_nan=False))
    os.replace(tmp, path)


def _prepare_folder(scn: Scenario, out) -> Path:
    if out is None:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", scn.name)
        folder = Path(scn.outputs.dir) / f"{stamp}_{safe}-sweep"
    else:
        folder = Path(out)
    (folder / "runs").mkdir(parents=True, exist_ok=True)
    try:                # one sweep per folder (two on one --out both ran)
        hold_folder_lock(folder, "sweep", ".twinid-sweep.lock")
    except OSError as exc:
        raise InputError(f"{exc}; wait for it or choose another --out") from None
    fp = _fingerprint(scn)
    meta = folder / "sweep.yaml"
    if meta.exists():
        old = read_yaml(meta) or {}
        if old.get("fingerprint") != fp:
            raise InputError(f"{folder}: this sweep folder was made with a different scenario "
                             f"(arm, backend settings, trajectories, processing or identification "
                             f"differ); use another --out folder")
    tmp = meta.with_name(meta.name + ".partial")
    tmp.write_text(yaml.safe_dump({"fingerprint": fp, "scenario": resolved_scenario(scn)},
                                  sort_keys=False))
    os.replace(tmp, meta)
    return folder


def _finished(folder: Path) -> set:
    done = set()
    for p in (folder / "runs").glob("*.json"):
        try:
            json.loads(p.read_text())
            done.add(p.stem)
        except (OSError, json.JSONDecodeError):
            pass      # a torn file cannot exist (atomic writes), but never trust one
    return done


def _check_sweep_budget(scn: Scenario, workers: int | None, yes: bool, model) -> None:
    """Count the runs (grid points x seeds, without building the task list) and refuse a sweep
    beyond the time / memory budget unless `yes` (identify.app.inputs.check_budget); the
    trajectories and the arm model's code the caches hold cost nothing."""
    from identify.scenario.budget import estimate_sweep
    from .trajectories import estimate_cache_state
    one_seed = dataclasses.replace(scn, sweep=dataclasses.replace(scn.sweep, seeds=1))
    n_runs = len(grid(one_seed)[0]) * scn.sweep.seeds
    check_budget(estimate_sweep(scn, n_runs, workers, model.n,
                                **estimate_cache_state(scn, model)),
                 yes, what=f"this sweep ({n_runs:,} runs)")


def run_sweep(scn: Scenario, out=None, *, dask_address: str | None = None,
              workers: int | None = None, yes: bool = False) -> SweepResult:
    """Run (or resume) the scenario's noise sweep; see the module docstring. Refused before
    anything runs when its estimated time or memory exceeds the budget, unless `yes`."""
    if scn.backend != "twin":
        raise InputError("a sweep needs backend: twin (it sets the twin's sensor noise and laws)")
    sw = scn.sweep
    address = dask_address or (sw.dask_address if sw.executor == "dask" else None)
    if sw.executor == "dask" and not address:
        raise InputError("sweep.executor: dask needs sweep.dask_address or --dask ADDRESS")
    require_backend_files(scn)
    model = build_model(scn)
    _check_sweep_budget(scn, workers, yes, model)
    tasks, points = grid(scn)
    client = _dask_client(address) if address else None   # reached before any design work
    try:
        return _sweep(scn, out, model, tasks, points, client, address, workers)
    finally:
        if client is not None:
            client.close()


def _sweep(scn: Scenario, out, model, tasks, points, client, address, workers) -> SweepResult:
    """run_sweep after its checks: the folder, the trajectories, the runs, the summary."""
    folder = _prepare_folder(scn, out)
    timings: dict = {}
    trajs = trajectories(scn, model, timings)
    tdir = folder / "trajectories"
    tdir.mkdir(exist_ok=True)
    for label, (tr, _i) in trajs.items():
        tr.save(tdir / f"{label}.yaml")
    done = _finished(folder)
    todo = [t for t in tasks if t.run_id not in done]
    skipped = [t.run_id for t in tasks if t.run_id in done]
    progress.message(f"sweep: {len(tasks)} runs, {len(skipped)} already finished, "
                     f"{len(todo)} to run on " + (f"dask {address}" if address else
                                                  f"{workers or os.cpu_count()} local processes"))
    ran, failed = [], []
    t0 = time.perf_counter()
    fdir = folder / "failed"
    if todo:
        bar = progress.bar(total=len(todo), desc="sweep runs", unit="run")
        try:
            for task, res, err in _execute(scn, trajs, todo, client, workers):
                if err is None:
                    _atomic_json(folder / "runs" / f"{task.run_id}.json", res)
                    (fdir / f"{task.run_id}.json").unlink(missing_ok=True)
                    ran.append(task.run_id)
                else:       # recorded, not counted as finished: a re-run tries it again
                    fdir.mkdir(exist_ok=True)
                    _atomic_json(fdir / f"{task.run_id}.json",
                                 {"run_id": task.run_id, "levels": dict(task.levels),
                                  "seed": task.seed, "error": err})
                    failed.append(task.run_id)
                bar.update(1)
        finally:
            bar.close()
    timings["runs"] = round(time.perf_counter() - t0, 3)
    summary = summarize(folder, scn, points, timings=timings)
    if failed:
        raise RuntimeError(f"{len(failed)} of {len(todo)} sweep runs failed (their errors are in "
                           f"{fdir}; the summary covers the finished runs; re-run to retry them)")
    return SweepResult(folder, summary, ran, skipped)


def _dask_client(address: str):
    """A Client of the Dask scheduler at `address`; a scheduler that does not answer within
    20 s is an InputError naming the address (exit 2), before any trajectory is designed."""
    try:
        from distributed import Client
    except ImportError:
        raise RuntimeError("Dask distributed is not installed: pip install 'dask[distributed]'"
                           ) from None
    try:
        _probe(address)
        return Client(address, timeout="20s")
    except (OSError, TimeoutError, ValueError) as exc:
        raise InputError(f"--dask / sweep.dask_address: no Dask scheduler answers at {address} "
                         f"({type(exc).__name__}: {exc}); start one (dask scheduler) or fix the "
                         f"address") from None


def _probe(address: str) -> None:
    """Open and close a TCP connection to a tcp:// / tls:// scheduler address: a refused or
    unroutable one fails at once (OSError), where the Dask client retries until its timeout."""
    import socket
    from urllib.parse import urlsplit
    u = urlsplit(address if "://" in address else f"tcp://{address}")
    if u.scheme in ("tcp", "tls") and u.hostname and u.port:
        socket.create_connection((u.hostname, u.port), timeout=5.0).close()


def _execute(scn, trajs, todo, client, workers):
    """Yield (task, result, None) or (task, None, error text) as tasks complete (any order),
    on the Dask `client`, else on local processes. A task that raises does not stop the
    others."""
    if client is not None:
        from distributed import as_completed
        futs = {client.submit(run_task, scn, trajs, t, key=f"twinid-{t.run_id}-{id(todo)}",
                              pure=False): t for t in todo}
        for fut in as_completed(futs):
            yield _outcome(futs[fut], fut)
        return
    n = max(1, min(int(workers or os.cpu_count() or 1), len(todo)))
    ctx = mp.get_context("spawn")   # fresh interpreters: no inherited simulator or solver state
    with _worker_env(), cf.ProcessPoolExecutor(   # the workers die with the driver
            max_workers=n, mp_context=ctx, initializer=interrupts.die_with_parent,
            initargs=(os.getpid(),)) as ex:
        futs = {ex.submit(run_task, scn, trajs, t): t for t in todo}
        try:
            for fut in cf.as_completed(futs):
                yield _outcome(futs[fut], fut)
        except BaseException:
            ex.shutdown(wait=False, cancel_futures=True)
            raise


# one BLAS thread per worker process: N processes already use the N cores (as Dask's nanny does)
_WORKER_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class _worker_env:
    """Set _WORKER_ENV (unless the user set them) while the worker processes are spawned."""

    def __enter__(self):
        self._old = {k: os.environ.get(k) for k in _WORKER_ENV}
        for k, v in _WORKER_ENV.items():
            os.environ.setdefault(k, v)
        return self

    def __exit__(self, *exc):
        for k, v in self._old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        return False


def _outcome(task, fut):
    try:
        return task, fut.result(), None
    except (KeyboardInterrupt, BrokenProcessPool):
        raise
    except Exception as exc:  # noqa: BLE001 -- one failed run must not lose the others
        return task, None, f"{type(exc).__name__}: {exc}"


# ------------------------------------------------------------------------------------------------
# summary
# ------------------------------------------------------------------------------------------------
def _stats(values) -> dict:
    v = np.asarray([x for x in values if x is not None and np.isfinite(x)], float)
    if v.size == 0:
        return {"n": 0, "median": None, "p10": None, "p90": None, "mean": None, "std": None}
    return {"n": int(v.size), "median": float(np.median(v)), "p10": float(np.percentile(v, 10)),
            "p90": float(np.percentile(v, 90)), "mean": float(v.mean()),
            "std": float(v.std(ddof=1)) if v.size > 1 else 0.0}


METRICS = {
    "param_median_abs_error_percent": ("median |base-parameter error| [%]",
                                       lambda r: r["parameter_errors"].get("median_abs_error_percent")),
    "param_within_3sigma_fraction": ("base parameters within 3 sigma [fraction]",
                                     lambda r: (r["parameter_errors"]["within_3sigma"] /
                                                r["parameter_errors"]["count"])
                                     if r["parameter_errors"].get("count") else None),
    "validation_rms_simplified": ("validation RMS, simplified [N*m]",
                                  lambda r: r["rms_overall"].get("validation", {}).get("simplified")),
    "validation_rms_improved": ("validation RMS, improved [N*m]",
                                lambda r: r["rms_overall"].get("validation", {}).get("improved")),
    "excitation_reduction_percent": ("RMS reduction improved vs simplified, excitation [%]",
                                     lambda r: r.get("improvement_percent", {}).get("excitation")),
    "validation_reduction_percent": ("RMS reduction improved vs simplified, validation [%]",
                                     lambda r: r.get("improvement_percent", {}).get("validation")),
}


#: stages whose z = (estimate - truth) / std the runs record (render.sweep_record "z")
COVERAGE_STAGES = ("improved_stage1", "improved_stage2", "simplified")


def coverage(records: list) -> dict:
    """Calibration of the reported std per stage over the runs of one grid point: the z values
    of every run pooled; fraction within 1, 2 and 3 sigma (a calibrated Gaussian std gives
    68.3 / 95.4 / 99.7 %), the RMS of z (1 when calibrated) and the count. Stages without z in
    any run are left out."""
    out = {}
    for stage in COVERAGE_STAGES:
        z = np.asarray([x for r in records for x in ((r.get("z") or {}).get(stage) or [])
                        if x is not None and np.isfinite(x)], float)
        if z.size == 0:
            continue
        a = np.abs(z)
        out[stage] = {"n": int(z.size), "within_1sigma": float(np.mean(a <= 1.0)),
                      "within_2sigma": float(np.mean(a <= 2.0)),
                      "within_3sigma": float(np.mean(a <= 3.0)),
                      "rms_z": float(np.sqrt(np.mean(z ** 2))),
                      "median_abs_z": float(np.median(a))}
    return out


def summarize(folder, scn: Scenario, points: list, timings: dict | None = None) -> dict:
    """Aggregate the finished runs per grid point (median, 10-90 % band over seeds); write
    summary.json / summary.md / summary.html and plots. Missing runs are counted, not invented."""
    folder = Path(folder)
    runs = {}
    for p in (folder / "runs").glob("*.json"):
        runs[p.stem] = json.loads(p.read_text())
    rows = []
    for pt in points:
        rs = [runs[i] for i in pt["run_ids"] if i in runs]
        row = {k: v for k, v in pt.items() if k != "run_ids"}
        row["runs_finished"] = len(rs)
        row["runs_total"] = len(pt["run_ids"])
        for key, (_label, fn) in METRICS.items():
            row[key] = _stats([fn(r) for r in rs])
        row["coverage"] = coverage(rs)
        rows.append(row)
    summary = {"name": scn.name, "created": _dt.datetime.now().isoformat(timespec="seconds"),
               "noise_settings": NOISE_SETTINGS, "seeds": scn.sweep.seeds,
               "twin": [{"label": lb, "settings": dict(ov)} for lb, ov in _twin_entries(scn) if lb],
               "points": rows, "timings_s": timings or {},
               "runs_finished": len(runs)}
    _atomic_json(folder / "summary.json", summary)
    plots = _plot(folder, rows)
    write_summary_docs(folder, summary, plots)
    return summary


def _plot(folder: Path, rows: list) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pdir = folder / "plots"
    pdir.mkdir(exist_ok=True)
    groups: dict = {}
    for r in rows:
        if r["combine"] != "scenario":     # a single point per law: the law plot below
            groups.setdefault((r.get("twin", ""), r["combine"], r["channel"]), []).append(r)
    out = []
    units = {"position": "rad", "torque": "N*m", "current": "A"}
    for (label, combine, channel), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["level_index"])
        x = (np.array([r["levels"][channel] for r in rs]) if channel in units
             else np.array([r["level_index"] for r in rs], float))
        fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
        for ax, keys in zip(axes, (("param_median_abs_error_percent",),
                                   ("validation_rms_simplified", "validation_rms_improved"))):
            for key in keys:
                med = np.array([np.nan if r[key]["median"] is None else r[key]["median"] for r in rs])
                lo = np.array([np.nan if r[key]["p10"] is None else r[key]["p10"] for r in rs])
                hi = np.array([np.nan if r[key]["p90"] is None else r[key]["p90"] for r in rs])
                ax.plot(x, med, "o-", label=METRICS[key][0])
                ax.fill_between(x, lo, hi, alpha=0.25)
            ax.set_xlabel(f"{channel} noise std [{units[channel]}]" if channel in units
                          else "noise level index (all channels together)")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        fig.suptitle((f"twin {label}: " if label else "") +
                     f"sweep: {channel} ({combine}); median over seeds, 10-90 % band")
        fig.tight_layout()
        tag = f"{_run_id({}, 0, label).split('__')[0]}_" if label else ""
        path = pdir / f"sweep_{tag}{combine}_{channel}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        out.append(path)
    laws = [r for r in rows if r["combine"] == "scenario" and r.get("twin")]
    if laws:
        out.append(_plot_laws(pdir, laws))
    return out


def _plot_laws(pdir: Path, rows: list) -> Path:
    """Validation RMS of both models per twin entry (median over seeds, 10-90 % bars)."""
    import matplotlib.pyplot as plt
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * len(rows) + 2), 3.6))
    for j, key in enumerate(("validation_rms_simplified", "validation_rms_improved")):
        med = np.array([np.nan if r[key]["median"] is None else r[key]["median"] for r in rows])
        lo = np.array([np.nan if r[key]["p10"] is None else r[key]["p10"] for r in rows])
        hi = np.array([np.nan if r[key]["p90"] is None else r[key]["p90"] for r in rows])
        ax.bar(x + (j - 0.5) * 0.38, med, 0.38, yerr=[med - lo, hi - med], capsize=3,
               label=METRICS[key][0])
    ax.set_xticks(x, [r["twin"] for r in rows], fontsize=7, rotation=15)
    ax.set_ylabel("[N*m]")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=7)
    fig.suptitle("sweep over twin settings: validation RMS, median over seeds, 10-90 %")
    fig.tight_layout()
    path = pdir / "sweep_twin.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _fmt(s: dict) -> str:
    if s["median"] is None:
        return "--"
    return f"{s['median']:.4g} [{s['p10']:.3g}, {s['p90']:.3g}]"


def write_summary_docs(folder: Path, summary: dict, plots: list) -> None:
    from identify.common.fileio import atomic_write_text

    from identify.outputs.markup import render_html, render_markdown
    by_law = bool(summary.get("twin"))
    lead = ["twin"] if by_law else []
    head = lead + ["combine", "channel", "level", "runs"] + [METRICS[k][0] for k in METRICS]
    rows = []
    for r in summary["points"]:
        lvl = r["levels"].get(r["channel"]) if r["channel"] in r["levels"] else \
            (", ".join(f"{k}={v:g}" for k, v in r["levels"].items()) or "scenario's")
        rows.append(([r.get("twin", "")] if by_law else []) +
                    [r["combine"], r["channel"], f"{lvl:g}" if isinstance(lvl, float) else lvl,
                     f"{r['runs_finished']}/{r['runs_total']}"] + [_fmt(r[k]) for k in METRICS])
    cov_head = lead + ["combine", "channel", "level", "stage", "n z", "within 1 sigma",
                       "within 2 sigma", "within 3 sigma", "RMS z"]
    cov_rows = []
    for r, row in zip(summary["points"], rows):
        for stage, c in r.get("coverage", {}).items():
            cov_rows.append(row[:len(lead) + 3] + [stage, str(c["n"])]
                            + [f"{100 * c[k]:.1f} %" for k in ("within_1sigma", "within_2sigma",
                                                               "within_3sigma")]
                            + [f"{c['rms_z']:.3g}"])
    blocks = [("h", 1, f"twinid sweep: {summary['name']}"),
              ("p", f"{summary['runs_finished']} runs finished; {summary['seeds']} Monte Carlo seeds "
                    f"per grid point; cells: median [10 %, 90 %] over seeds. Noise settings of the "
                    f"twin: " + ", ".join(f"{k} -> `{v}`" for k, v in NOISE_SETTINGS.items()))]
    if by_law:
        blocks.append(("p", "Twin settings varied (over the scenario's twin:): " + "; ".join(
            f"{t['label']}: " + (", ".join(f"{k}={v}" for k, v in t["settings"].items()) or "--")
            for t in summary["twin"])))
    blocks.append(("table", head, rows))
    if cov_rows:
        blocks += [("h", 2, "Calibration of the reported uncertainty"),
                   ("p", "z = (estimate - truth) / reported std, pooled over the seeds of a grid "
                         "point; a calibrated std gives 68.3 % / 95.4 % / 99.7 % within 1 / 2 / 3 "
                         "sigma and RMS z = 1."),
                   ("table", cov_head, cov_rows)]
    for p in plots:
        blocks.append(("img", os.path.relpath(p, folder), p.stem.replace("_", " ")))
    atomic_write_text(folder / "summary.md", render_markdown(blocks))
    atomic_write_text(folder / "summary.html", render_html(blocks, folder, "twinid sweep"))
