"""What a scenario will cost before it runs: wall time and peak memory of a run or a sweep,
estimated from its keys alone, and the budget beyond which the command asks for ``--yes``.

The estimate is a linear model calibrated on this project's measurements (2-core machine):

* the twin simulates at 1 kHz, about :data:`TWIN_STEPS_PER_S` steps per second;
* identification, validation and the physically consistent fit cost about
  :data:`S_PER_SAMPLE` seconds and hold about :data:`BYTES_PER_SAMPLE` bytes per recorded sample
  (regressor (N, n, 10n) and its decomposition copies, filtered signals, design matrices:
  ``period_s: 3600`` at 100 Hz, 3.6e5 samples, took 6 min and 5.6 GB);
* a trajectory optimization about :data:`S_PER_OPTIMIZER_START` s per start (cached: 0).

It is meant to tell 20 s from 2 h, not 20 s from 25 s.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

from .spec import Scenario

TWIN_STEPS_PER_S = 15000.0
S_PER_SAMPLE = 5e-4
BYTES_PER_SAMPLE = 16_000
BASE_BYTES = 400 * 1024 ** 2
BASE_S = 8.0
#: paper settings with table and self-collision: 2 starts + the polish of the best 21 s in one
#: process (15 s with the starts in 2 worker processes), 1-start validation ~5 s
S_PER_OPTIMIZER_START = 9.0
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


def estimate_run(scn: Scenario, n_joints: int = 6) -> Estimate:
    """Time / memory / disk of one ``twinid run`` of `scn` (trajectories not cached)."""
    rate = _rate_hz(scn)
    samples, sim_s, starts = 0.0, 0.0, 0
    parts = []
    for label in ("excitation", "validation"):
        t = getattr(scn.trajectories, label)
        dur = t.period_s * t.periods
        samples += dur * rate
        sim_s += dur + float((scn.twin or {}).get("settle_s", 0.5) or 0.0)
        if t.source == "optimize":
            starts += t.starts
        parts.append(f"{label} {dur:g} s")
    twin_s = sim_s * 1000.0 / TWIN_STEPS_PER_S if scn.backend == "twin" else sim_s
    seconds = BASE_S + twin_s + samples * S_PER_SAMPLE + starts * S_PER_OPTIMIZER_START
    peak = BASE_BYTES + samples * BYTES_PER_SAMPLE
    disk = samples * n_joints * DISK_BYTES_PER_SAMPLE_JOINT
    detail = ", ".join(parts) + f" at {rate:g} Hz = {samples:,.0f} samples"
    return Estimate(seconds=seconds, peak_bytes=peak, disk_bytes=disk, detail=detail)


def estimate_sweep(scn: Scenario, n_runs: int, workers: int | None, n_joints: int = 6) -> Estimate:
    """Time / memory of a sweep of `n_runs` runs on `workers` local processes (trajectories
    optimized once, then cached)."""
    one = estimate_run(scn, n_joints)
    starts = sum(getattr(scn.trajectories, k).starts for k in ("excitation", "validation")
                 if getattr(scn.trajectories, k).source == "optimize")
    per_run = one.seconds - starts * S_PER_OPTIMIZER_START
    w = max(1, workers or os.cpu_count() or 1)
    seconds = starts * S_PER_OPTIMIZER_START + n_runs * per_run / w
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
