"""Stacked regressor of 10 000 random samples of the reference arm: ours (CasADi, compiled, mapped)
vs a Pinocchio `computeJointTorqueRegressor` loop over the same samples, same run.
Target: ours <= 0.5x Pinocchio's time.   Run: python benchmarks/bench_regressor.py"""
import sys
import time
from pathlib import Path

import numpy as np
import pinocchio as pin

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from identify import RobotModel  # noqa: E402
from identify.model.arm import REFERENCE_URDF  # noqa: E402


def best_of(fn, repeat=5):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main(N=10_000):
    rng = np.random.default_rng(0)
    q, qd, qdd = (rng.uniform(-np.pi, np.pi, (N, 6)), rng.normal(0, 1.5, (N, 6)), rng.normal(0, 4, (N, 6)))
    t0 = time.perf_counter()
    m = RobotModel.reference()
    m.regressor(q[:1], qd[:1], qdd[:1])  # builds + compiles (cached on disk) once
    first = time.perf_counter() - t0
    pm = pin.buildModelFromUrdf(str(REFERENCE_URDF))
    pd = pm.createData()

    def pin_loop():
        Y = np.empty((N, 6, 60))
        for k in range(N):
            Y[k] = pin.computeJointTorqueRegressor(pm, pd, q[k], qd[k], qdd[k])
        return Y

    t_pin, Yp = best_of(pin_loop)
    t_ours, Y = best_of(lambda: m.regressor(q, qd, qdd))
    err = np.abs(Y - Yp).max()
    # the timed work must be right before a time is printed: same regressor as Pinocchio's
    if not (np.all(np.isfinite(Y)) and err <= 1e-8 * max(1.0, np.abs(Yp).max())):
        raise SystemExit(f"insane result: max |Y - Y_pin| = {err:.3g}")
    ratio = t_ours / t_pin
    print(f"samples: {N}  (reference arm, 6 joints, 60 columns)")
    print(f"model build + compile (first use): {first * 1e3:.1f} ms")
    print(f"pinocchio loop : {t_pin * 1e3:8.2f} ms")
    print(f"ours (mapped)  : {t_ours * 1e3:8.2f} ms")
    print(f"ratio ours/pinocchio = {ratio:.3f}  (target <= 0.5: {'met' if ratio <= 0.5 else 'NOT met'})")
    print(f"max |Y - Y_pin| = {err:.2e}")
    return ratio


if __name__ == "__main__":
    main()
