"""Benchmark: the twin (full drive model + sensors, 1 kHz) against bare PyBullet stepping.

    python benchmarks/bench_twin.py [--duration 20] [--repeat 3]

Runs, in the same process and interleaved (so machine load hits all alike), the best of
`--repeat` runs of:
  * twin   -- make_backend(...).run(trajectory): PID + compliant harmonic-drive joints with all
              friction + sensors at 100 Hz, a multi-joint trajectory of `--duration` s (the whole
              run() call: PyBullet set-up, settle-free run, sensor sampling, recording);
  * bare   -- baseline 1: p.stepSimulation() of the same arm (same URDF/flags), nothing else;
  * loop   -- baseline 2: the minimal torque-control loop any controller needs on PyBullet: set
              torques, step, read states -- replaying the twin's own link torques of every 1 ms
              period (recorded beforehand, untimed), so PyBullet integrates the same motion as in
              the twin run (a constant torque would let the arm fall onto its joint limits, a
              different and costlier PyBullet workload);
Prints the real-time factor in process-CPU and wall time (target >= 40x), the ratios twin / bare
(target <= 1.5x) and twin / loop (target <= 1.2x), and the cost of each part of one period
(timed alone). Before printing, the twin run is checked to be sane: finite, sample count, and
tracking the commanded trajectory within 1 deg.
"""
from __future__ import annotations

import argparse
import time

from pathlib import Path

import numpy as np
import pybullet as p

ROOT = Path(__file__).resolve().parents[1]
URDF = str(ROOT / "assets" / "cobot6.urdf")
DRIVES = str(ROOT / "assets" / "cobot6_drives.yaml")


class Cosines:
    """q = q0 + A (1 - cos(2 pi f t)) / 2: starts at rest, inside the reference arm's limits."""

    def __init__(self, duration):
        self.q0 = np.radians([0.0, -90.0, 30.0, -90.0, 20.0, 0.0])
        self.amp = np.radians([60, 40, 40, 60, 60, 80])
        self.w = 2 * np.pi * np.array([0.5, 0.25, 0.5, 0.75, 0.5, 0.75])
        self.duration = float(duration)

    n_joints = 6

    def evaluate(self, t):
        t = np.asarray(t, float)[:, None]
        c, s = np.cos(self.w * t), np.sin(self.w * t)
        return (self.q0 + self.amp * (1 - c) / 2, self.amp * self.w * s / 2,
                self.amp * self.w ** 2 * c / 2)


def _arm():
    c = p.connect(p.DIRECT)
    p.setGravity(0, 0, -9.81, physicsClientId=c)
    p.setTimeStep(1e-3, physicsClientId=c)
    b = p.loadURDF(URDF, useFixedBase=True, flags=p.URDF_USE_INERTIA_FROM_FILE, physicsClientId=c)
    J = [k for k in range(p.getNumJoints(b, physicsClientId=c))
         if p.getJointInfo(b, k, physicsClientId=c)[2] == p.JOINT_REVOLUTE]
    # the twin's PyBullet world: no hidden damping, no sub-steps (else a replay moves differently)
    p.setPhysicsEngineParameter(numSubSteps=0, physicsClientId=c)
    for k in range(-1, p.getNumJoints(b, physicsClientId=c)):
        p.changeDynamics(b, k, linearDamping=0.0, angularDamping=0.0, physicsClientId=c)
        if k >= 0:
            p.changeDynamics(b, k, jointDamping=0.0, physicsClientId=c)
    p.setJointMotorControlArray(b, J, p.VELOCITY_CONTROL, forces=[0.0] * len(J), physicsClientId=c)
    return c, b, J


class _Clock:
    """Process CPU time and wall time of a block. On a shared machine wall time is inflated by
    other processes; the CPU time of this single-threaded process is what the twin costs."""

    def __enter__(self):
        self.c0, self.w0 = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu = time.process_time() - self.c0
        self.wall = time.perf_counter() - self.w0


def bare(steps: int) -> tuple[float, float]:
    c, b, J = _arm()
    with _Clock() as k:
        for _ in range(steps):
            p.stepSimulation(physicsClientId=c)
    p.disconnect(physicsClientId=c)
    return k.cpu, k.wall


def twin_torques(duration: float) -> tuple[np.ndarray, list]:
    """The start pose and the link torque tau_l of every 1 ms period of the twin run of
    `duration` s (settle-free, as in :func:`twin`): what the baseline loop replays."""
    from twin import TwinConfig, TwinSim
    steps = int(round(duration * 1000))
    traj = Cosines(duration)
    q = traj.evaluate(np.arange(steps + 1) * 1e-3)[0]
    with TwinSim(TwinConfig.from_files(URDF, DRIVES, settings={})) as sim:
        sim.reset(q[0])
        rows = np.empty((steps, sim.snapshot_size))
        sim.run(q[1:], snapshot_at=np.arange(steps), out=rows)   # row m: period m
        tau = sim.channels(rows)["tau_l"]
        q_end = sim.q
    return q[0], tau.tolist(), q_end


def twin_steady(duration: float) -> tuple[float, float]:
    """Only the 1 kHz loop of the twin (TwinSim.run over the same trajectory), without the
    per-run set-up (PyBullet connect + URDF load ~20 ms, reset checks, sensor model, recording)."""
    from twin import TwinConfig, TwinSim
    steps = int(round(duration * 1000))
    q = Cosines(duration).evaluate(np.arange(steps + 1) * 1e-3)[0]
    with TwinSim(TwinConfig.from_files(URDF, DRIVES, settings={})) as sim:
        sim.reset(q[0])
        with _Clock() as k:
            sim.run(q[1:])
        assert np.all(np.isfinite(sim.q)) and np.abs(sim.q - q[-1]).max() < np.radians(1.0)
    return k.cpu, k.wall


def loop(q0, taus, q_end) -> tuple[float, float]:
    c, b, J = _arm()
    for j, k in enumerate(J):
        p.resetJointState(b, k, float(q0[j]), 0.0, physicsClientId=c)
    with _Clock() as k:
        for tau in taus:
            p.setJointMotorControlArray(b, J, p.TORQUE_CONTROL, forces=tau, physicsClientId=c)
            p.stepSimulation(physicsClientId=c)
            js = p.getJointStates(b, J, physicsClientId=c)
    p.disconnect(physicsClientId=c)
    # same workload as the twin: the replay ends where the twin ended (open loop over 20 000
    # steps, so only roughly)
    drift = np.abs(np.array([r[0] for r in js]) - q_end).max()
    assert drift < 0.05, f"torque replay diverged from the twin's motion by {drift:.3g} rad"
    return k.cpu, k.wall


def breakdown(steps: int) -> dict:
    """Process-CPU cost [us] of each part of TwinSim.advance, each timed alone on a twin in motion
    (PyBullet calls with the twin's own arguments; 'compiled step' = the one C call; 'matrix
    rebuild' = mass matrix + compiled build, per step at the default refresh period)."""
    from twin import TwinConfig, TwinSim
    cfg = TwinConfig.from_files(URDF, DRIVES, settings={})
    sim = TwinSim(cfg)
    traj = Cosines(max(steps / 1000.0, 1.0) + 1.0)
    q = traj.evaluate(np.arange(steps + 501) * 1e-3)[0]
    sim.reset(q[0])
    for k in range(500):
        sim.advance(q[k + 1])
    rows = list(q[501:])
    with _Clock() as k_adv:
        for r in rows[:steps]:
            sim.advance(r)
    with _Clock() as k_run:
        sim.run(q[501:501 + steps][::-1])          # back along the same path, batched
    c, b, J = sim.client, sim.body, sim.jidx
    tau = sim.tau_l.tolist()
    m = max(steps // 4, 1000)
    out = {"run (batched, total)": k_run.cpu / steps * 1e6}
    with _Clock() as k:
        for _ in range(m):
            sim._run()
    out["compiled step (C)"] = k.cpu / m * 1e6
    with _Clock() as k:
        for _ in range(m // 10):
            sim._build_matrices(sim.mass_matrix(sim.q), sim._Keff)
    out["matrix rebuild / mass_matrix_every"] = k.cpu / (m // 10) * 1e6 / sim.mm_every
    with _Clock() as k:
        for _ in range(m):
            p.setJointMotorControlArray(b, J, p.TORQUE_CONTROL, forces=tau, physicsClientId=c)
    out["PyBullet set torques"] = k.cpu / m * 1e6
    with _Clock() as k:
        for _ in range(m):
            js = p.getJointStates(b, J, physicsClientId=c)
            [r[0] for r in js] + [r[1] for r in js]
    out["PyBullet read states (+ lists)"] = k.cpu / m * 1e6
    with _Clock() as k:
        for _ in range(m):
            p.stepSimulation(physicsClientId=c)
    out["PyBullet stepSimulation"] = k.cpu / m * 1e6
    sim.close()
    out["Python glue (rest of run)"] = out["run (batched, total)"] - sum(
        v for k2, v in out.items() if k2 != "run (batched, total)")
    out["advance, per-step API (total)"] = k_adv.cpu / steps * 1e6
    return out


def twin(duration: float):
    from twin import make_backend
    be = make_backend({"urdf": URDF, "drives": DRIVES}, {"settle_s": 0.0, "seed": 0})
    traj = Cosines(duration)
    with _Clock() as k:
        rec = be.run(traj)
    assert np.all(np.isfinite(rec.q)) and rec.n_samples == int(round(duration * 100))
    err = np.abs(rec.truth["q"] - rec.q_cmd).max()
    assert err < np.radians(1.0), f"twin does not track the trajectory: {np.degrees(err):.2f} deg"
    return k.cpu, k.wall


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=20.0, help="trajectory length [s]")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved repetitions (best kept)")
    a = ap.parse_args(argv)
    steps = int(round(a.duration * 1000))
    twin(0.1)                                   # load the compiled step once (cached on disk)
    q0, taus, q_end = twin_torques(a.duration)
    res = {"twin": [], "bare": [], "loop": [], "steady": []}
    for _ in range(a.repeat):
        res["bare"].append(bare(steps))
        res["twin"].append(twin(a.duration))
        res["loop"].append(loop(q0, taus, q_end))
        res["steady"].append(twin_steady(a.duration))
    cpu = {k: min(r[0] for r in v) for k, v in res.items()}
    wall = {k: min(r[1] for r in v) for k, v in res.items()}
    us = lambda x: x / steps * 1e6                                          # noqa: E731
    rtf, rtf_wall = a.duration / cpu["twin"], a.duration / wall["twin"]
    ratio = cpu["twin"] / cpu["bare"]
    print(f"steps: {steps} (1 kHz, {a.duration:g} s), best of {a.repeat}; per step: CPU (wall) [us]")
    rows = (("bare PyBullet stepping      (baseline 1)", "bare"),
            ("torque loop set/step/get    (baseline 2)", "loop"),
            ("twin (drive + sensors, full run)", "twin"),
            ("twin 1 kHz loop only (TwinSim.run)", "steady"))
    for label, k in rows:
        print(f"  {label:46s}: {us(cpu[k]):6.1f} ({us(wall[k]):6.1f})")
    print(f"real-time factor, CPU  : {rtf:6.1f}x  (target >= 40x: {'met' if rtf >= 40 else 'NOT met'})")
    print(f"real-time factor, wall : {rtf_wall:6.1f}x")
    print(f"twin / bare stepping   : {ratio:5.2f}x  (target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'};"
          f" CPU, wall {wall['twin'] / wall['bare']:.2f}x)")
    r_loop = cpu["twin"] / cpu["loop"]
    print(f"twin / torque loop     : {r_loop:5.2f}x  (target <= 1.2x: {'met' if r_loop <= 1.2 else 'NOT met'};"
          f" CPU, wall {wall['twin'] / wall['loop']:.2f}x)")
    r_steady = cpu["steady"] / cpu["loop"]
    print(f"twin loop / torque loop: {r_steady:5.2f}x  (target <= 1.2x: {'met' if r_steady <= 1.2 else 'NOT met'};"
          f" CPU, wall {wall['steady'] / wall['loop']:.2f}x; without the per-run set-up)")
    print(f"torque loop / bare     : {cpu['loop'] / cpu['bare']:5.2f}x  (the PyBullet calls any "
          f"controller needs, already above 1.5x)")
    parts = breakdown(min(steps, 10000))
    print("per-step cost of TwinSim.advance, parts timed alone [us CPU]:")
    for k, v in parts.items():
        print(f"  {k:36s}: {v:5.2f}")
    return {"rtf": rtf, "rtf_wall": rtf_wall, "ratio_bare": ratio,
            "ratio_loop": r_loop, "ratio_loop_steady": r_steady, "cpu": cpu, "wall": wall, "parts": parts}


if __name__ == "__main__":
    main()
