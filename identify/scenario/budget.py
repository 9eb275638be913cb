"""What a scenario will cost before it runs: wall time and peak memory of a run or a sweep,
estimated from its keys and the state of the caches, and the budget beyond which the command
asks for ``--yes``.

The estimate is a linear model calibrated on this project's measurements (2-core machine), the
sum of

* :data:`BASE_S`: the fixed work of a run (arm model, base parameters, design context, export,
  the run folder's documents and report);
* :data:`DESIGN_S` per trajectory (x grid / 200): its design figures and the collision check
  on 10x its grid (also for a cached or loaded trajectory);
* the twin, which simulates at 1 kHz, about :data:`TWIN_STEPS_PER_S` steps per second, also
  the runs of the ``closed_loop:`` / ``payload:`` sections (:func:`control_sim_seconds`);
* identification, validation and the physically consistent fit: about :data:`S_PER_SAMPLE`
  seconds and :data:`BYTES_PER_SAMPLE` bytes per recorded sample (regressor (N, n, 10n) and its
  decomposition copies, filtered signals, design matrices: ``period_s: 3600`` at 100 Hz,
  3.6e5 samples, took 6 min and 5.6 GB);
* the plots (``outputs.plots``), :data:`PLOTS_S` + :data:`PLOT_S_PER_SAMPLE` per sample;
* each trajectory to optimize: :func:`optimization_seconds` -- nothing for one the excitation
  cache holds (``cached``: identify.app.trajectories.cache_state looks the key up) or read
  from a file;
* compiling the arm model to C, :data:`COMPILE_S`, when the code-generation cache does not
  hold it yet (``compiled``).

The constants are for an idle machine; the sum is multiplied by the machine's load
(:func:`load_factor`: max(1, (1-minute load average + 2) / (cores + 1))): on the shared 2-core
machine the same warm quickstart run took 11 s at load 0.9 and 15-21 s at load 3-4.
It is meant to tell 20 s from 2 h, and to be within +-50 % of a warm-cache run (measured:
docs/cli.md).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass

from .spec import Scenario

#: twin simulation steps (1 kHz) per second of wall time
TWIN_STEPS_PER_S = 17000.0
#: identification, validation, consistent fit and the sampled documents per recorded sample [s]
S_PER_SAMPLE = 5.5e-4
BYTES_PER_SAMPLE = 16_000
BASE_BYTES = 400 * 1024 ** 2
#: fixed work of a run [s] (see the module docstring)
BASE_S = 0.7
#: design figures and collision check of one trajectory with a 200-sample grid [s] (scales
#: with the grid)
DESIGN_S = 0.3
#: the standard set of plots (10 figures): PLOTS_S + PLOT_S_PER_SAMPLE x recorded samples [s]
PLOTS_S = 6.3
PLOT_S_PER_SAMPLE = 4e-4
#: one optimizer start of the reference problem (5 harmonics, grid 200, table constraint:
#: stage 1 and its polish) [s]; other problems scale by (H - 1)^2 / 16 x grid / 200
S_PER_OPTIMIZER_START = 16.0
#: generated C of the arm model, optimizer rows and twin, compiled once per machine [s]
COMPILE_S = 15.0
#: recording bytes per sample and joint on disk (NPZ, about 12 float64 channels)
DISK_BYTES_PER_SAMPLE_JOINT = 12 * 8

#: default budgets: beyond any, the command needs --yes. A run: 5 min (the paper's experiment
#: takes about 1.5 min cold on 2 cores); a sweep: 2 h (the shipped noise sweep: about 4 min)
BUDGET_S = 5 * 60.0
BUDGET_SWEEP_S = 2 * 3600.0
#: memory a command may plan to use: half the available memory, at most this [bytes]
BUDGET_MEMORY_BYTES = 4 * 1024 ** 3
BUDGET_MEMORY_FRACTION = 0.5


@dataclass
class Estimate:
    """Estimated cost of a command: `seconds` of wall time, `peak_bytes` of memory (one
    process), `disk_bytes` written, `runs` (1 for a run), and what it is made of (`detail`)."""
    seconds: float
    peak_bytes: float
    disk_bytes: float
    runs: int = 1
    detail: str = ""

    def describe(self) -> str:
        return (f"about {_duration(self.seconds)} and {self.peak_bytes / 1024 ** 3:.1f} GB of "
                f"memory" + (f" ({self.detail})" if self.detail else ""))


def _duration(s: float) -> str:
    if s < 90:
        return f"{s:.0f} s"
    if s < 5400:
        return f"{s / 60:.0f} min"
    if s < 3 * 86400:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.0f} days"


def _rate_hz(scn: Scenario) -> float:
    if scn.backend == "twin":
        v = (scn.twin or {}).get("sample_rate_hz", 100.0)
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else 100.0
    return 1000.0       # the hardware loop records every 1 kHz cycle


def optimization_seconds(spec, cores: int | None = None) -> float:
    """Wall time [s] of optimizing trajectory `spec` (a TrajectorySpec) from scratch: its
    starts, :data:`S_PER_OPTIMIZER_START` x (H - 1)^2 / 16 x grid / 200 each, run `cores` at a
    time (None: the cores this process may use)."""
    per_start = (S_PER_OPTIMIZER_START * (max(int(spec.harmonics), 2) - 1) ** 2 / 16.0
                 * float(spec.grid) / 200.0)
    cores = _cores() if cores is None else max(1, int(cores))
    rounds = math.ceil(int(spec.starts) / min(cores, int(spec.starts)))
    return per_start * rounds


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (
        os.cpu_count() or 1)


def load_factor(load: float | None = None, cores: int | None = None) -> float:
    """How much slower than on an idle machine a command runs: max(1, (load + 2) / (cores + 1)),
    with `load` the 1-minute load average (None: os.getloadavg's; 0 where there is none) and
    `cores` the usable cores (None: this process's). Fitted on the 2-core machine: the warm
    quickstart / paper runs took 1.7x / 1.5x longer at load 3.2 than at load 1."""
    if load is None:
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):
            load = 0.0
    cores = _cores() if cores is None else max(1, int(cores))
    return max(1.0, (float(load) + 2.0) / (cores + 1.0))


def estimate_run(scn: Scenario, n_joints: int = 6, cached=(), compiled: bool = True,
                 cores: int | None = None, load: float | None = None) -> Estimate:
    """Time / memory / disk of one ``twinid run`` of `scn`. cached: the labels of the
    trajectories whose optimization the excitation cache holds (identify.app.trajectories
    .cache_state; default none: every trajectory with ``source: optimize`` is optimized);
    compiled: the arm model's generated C is in the code-generation cache (False: add
    :data:`COMPILE_S`); cores: the usable cores (None: this process's); load: the 1-minute
    load average (None: the machine's now; see :func:`load_factor`)."""
    rate = _rate_hz(scn)
    samples, sim_s, opt_s, design_s = 0.0, 0.0, 0.0, 0.0
    parts, opt_parts = [], []
    for label in ("excitation", "validation"):
        t = getattr(scn.trajectories, label)
        dur = t.period_s * t.periods
        samples += dur * rate
        sim_s += dur + float((scn.twin or {}).get("settle_s", 0.5) or 0.0)
        design_s += DESIGN_S * float(t.grid) / 200.0
        if t.source == "optimize" and label not in cached:
            opt_s += optimization_seconds(t, cores)
            opt_parts.append(label)
        parts.append(f"{label} {dur:g} s")
    control_s = control_sim_seconds(scn)
    if control_s:
        sim_s += control_s
        parts.append(f"closed loop / payload runs {control_s:.0f} s simulated")
    twin_s = sim_s * 1000.0 / TWIN_STEPS_PER_S if scn.backend == "twin" else sim_s
    plots_s = PLOTS_S + PLOT_S_PER_SAMPLE * samples if scn.outputs.plots else 0.0
    compile_s = 0.0 if compiled else COMPILE_S
    busy = load_factor(load, cores)
    seconds = busy * (BASE_S + design_s + twin_s + samples * S_PER_SAMPLE + plots_s + opt_s
                      + compile_s)
    peak = BASE_BYTES + samples * BYTES_PER_SAMPLE
    disk = samples * n_joints * DISK_BYTES_PER_SAMPLE_JOINT
    detail = ", ".join(parts) + f" at {rate:g} Hz = {samples:,.0f} samples; " + (
        f"optimizing {' and '.join(opt_parts)} ~{_duration(opt_s)}" if opt_parts else
        "no trajectory to optimize") + (f", compiling the arm model ~{_duration(compile_s)}"
                                         if compile_s else "") + (
        f"; x{busy:.1f} for the machine's load" if busy >= 1.05 else "")
    return Estimate(seconds=seconds, peak_bytes=peak, disk_bytes=disk, detail=detail)


def control_sim_seconds(scn: Scenario) -> float:
    """Seconds the backend runs for the ``closed_loop:`` / ``payload:`` sections (each run one
    period plus the twin's settle time): the tracking cases (pid_only, identified_ff and, on
    the twin, true_ff), the collision part's free and contact runs, and its transfer part (the
    other trajectory, the rest calibration, the rest contact, the free run of free_periods);
    the payload's wrist excitation. Their observers and fits are cheap beside the runs."""
    settle = float((scn.twin or {}).get("settle_s", 0.5) or 0.0)
    total = 0.0
    cl = scn.closed_loop
    if cl is not None:
        twin = scn.backend == "twin"
        other = "validation" if cl.trajectory == "excitation" else "excitation"
        period = getattr(scn.trajectories, cl.trajectory).period_s
        runs = [period] * (3 if twin else 2)
        col = cl.collision
        if col.enabled and twin:
            runs += [period] * 2
            if col.transfer:
                runs += [getattr(scn.trajectories, other).period_s, col.rest_calibration_s,
                         col.rest_hold_s] + ([col.free_periods * period]
                                             if col.free_periods > 1 else [])
        total += sum(r + settle for r in runs)
    if scn.payload is not None:
        total += scn.payload.period_s + settle
    return total


def estimate_sweep(scn: Scenario, n_runs: int, workers: int | None, n_joints: int = 6,
                   load: float | None = None, cached=(), compiled: bool = True) -> Estimate:
    """Time / memory of a sweep of `n_runs` runs on `workers` local processes (trajectories
    optimized once, then cached). cached, compiled: the caches' state before the sweep, as for
    :func:`estimate_run`."""
    one = estimate_run(scn, n_joints, cached=cached, compiled=compiled, load=load)
    labels = ("excitation", "validation")
    per_run = estimate_run(scn, n_joints, cached=labels, load=load).seconds
    design_s = one.seconds - per_run
    w = max(1, workers or os.cpu_count() or 1)
    seconds = design_s + n_runs * per_run / w
    return Estimate(seconds=seconds, peak_bytes=one.peak_bytes * min(w, n_runs),
                    disk_bytes=n_runs * 50_000, runs=n_runs,
                    detail=f"{n_runs:,} runs of about {_duration(per_run)} on {w} worker(s)")


def available_memory() -> float:
    """Available memory [bytes] (Linux MemAvailable; elsewhere 8 GB is assumed)."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 8.0 * 1024 ** 3


def over_budget(est: Estimate, budget_s: float | None = None,
                memory_bytes: float | None = None) -> str | None:
    """Why `est` exceeds the budget, or None. Time: `budget_s` (default :data:`BUDGET_S` for a
    run, :data:`BUDGET_SWEEP_S` for a sweep); memory: half of `memory_bytes` (default: the
    available memory), at most :data:`BUDGET_MEMORY_BYTES`."""
    if budget_s is None:
        budget_s = BUDGET_SWEEP_S if est.runs > 1 else BUDGET_S
    avail = available_memory() if memory_bytes is None else memory_bytes
    mem = min(BUDGET_MEMORY_BYTES, avail * BUDGET_MEMORY_FRACTION)
    why = []
    if est.seconds > budget_s:
        why.append(f"more than the {_duration(budget_s)} time budget")
    if est.peak_bytes > mem:
        why.append(f"more than the {mem / 1024 ** 3:.1f} GB memory budget (half the available "
                   f"memory, at most {BUDGET_MEMORY_BYTES / 1024 ** 3:.0f} GB)")
    return " and ".join(why) or None
