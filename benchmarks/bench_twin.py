"""Benchmark: the twin (full drive model + sensors, 1 kHz) against bare PyBullet stepping.

    python benchmarks/bench_twin.py [--duration 20] [--repeat 3]

Runs, in the same process and interleaved (so machine load hits all alike), the best of
`--repeat` runs of:
  * twin   -- make_backend(...).run(trajectory): PID + compliant harmonic-drive joints with all
              friction + sensors at 100 Hz, a multi-joint trajectory of `--duration` s;
  * bare   -- p.stepSimulation() of the same arm (same URDF/flags), nothing else, same steps;
  * loop   -- the minimum torque-control loop any controller needs: set torques, step, read states.
Prints the real-time factor (target >= 40x) and the time ratio twin / bare (target <= 1.5x), and
twin / loop for reference.
"""
from __future__ import annotations

import argparse
import time

# process CPU time: on a shared machine wall time is inflated by other processes; the CPU time
# of this single-threaded process is what the twin costs (both are printed)
_clock = time.process_time
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
    p.setJointMotorControlArray(b, J, p.VELOCITY_CONTROL, forces=[0.0] * len(J), physicsClientId=c)
    return c, b, J


def bare(steps: int) -> float:
    c, b, J = _arm()
    t0 = _clock()
    for _ in range(steps):
        p.stepSimulation(physicsClientId=c)
    el = _clock() - t0
    p.disconnect(physicsClientId=c)
    return el


def loop(steps: int) -> float:
    c, b, J = _arm()
    tau = [0.0] * len(J)
    t0 = _clock()
    for _ in range(steps):
        p.setJointMotorControlArray(b, J, p.TORQUE_CONTROL, forces=tau, physicsClientId=c)
        p.stepSimulation(physicsClientId=c)
        p.getJointStates(b, J, physicsClientId=c)
    el = _clock() - t0
    p.disconnect(physicsClientId=c)
    return el


def twin(duration: float) -> float:
    from twin import make_backend
    be = make_backend({"urdf": URDF, "drives": DRIVES}, {"settle_s": 0.0, "seed": 0})
    traj = Cosines(duration)
    t0 = _clock()
    rec = be.run(traj)
    el = _clock() - t0
    assert np.all(np.isfinite(rec.q)) and rec.n_samples == int(round(duration * 100))
    return el


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=20.0, help="trajectory length [s]")
    ap.add_argument("--repeat", type=int, default=3, help="interleaved repetitions (best kept)")
    a = ap.parse_args(argv)
    steps = int(round(a.duration * 1000))
    res = {"twin": [], "bare": [], "loop": []}
    for _ in range(a.repeat):
        res["bare"].append(bare(steps))
        res["twin"].append(twin(a.duration))
        res["loop"].append(loop(steps))
    best = {k: min(v) for k, v in res.items()}
    rtf = a.duration / best["twin"]
    ratio = best["twin"] / best["bare"]
    print(f"steps: {steps} (1 kHz, {a.duration:g} s), best of {a.repeat}, process CPU time")
    print(f"bare PyBullet stepping : {best['bare']:.3f} s  ({best['bare'] / steps * 1e6:.1f} us/step)")
    print(f"torque loop (set/step/get): {best['loop']:.3f} s  ({best['loop'] / steps * 1e6:.1f} us/step)")
    print(f"twin (drive + sensors) : {best['twin']:.3f} s  ({best['twin'] / steps * 1e6:.1f} us/step)")
    print(f"real-time factor       : {rtf:.1f}x   (target >= 40x: {'met' if rtf >= 40 else 'NOT met'})")
    print(f"twin / bare stepping   : {ratio:.2f}x  (target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'})")
    print(f"twin / torque loop     : {best['twin'] / best['loop']:.2f}x")
    return {"rtf": rtf, "ratio_bare": ratio, **best}


if __name__ == "__main__":
    main()
