"""Benchmark: identification.friction: auto -- per candidate term set, the blocked-CV score on the
identification log against the RMS on a held-out log of another motion, and the selection's time.

    python benchmarks/bench_selection.py [--duration 40] [--rate 200] [--noise 0.02] [--folds 5]

The arm is assets/cobot6.urdf with the known per-joint friction laws of
tests/estimation/test_selection.py (4-quadrant load-dependent Coulomb, Dahl state, Stribeck,
quadratic viscous, ...) plus white torque noise. Every candidate set is fitted here by plain
least squares, independently of the selection code: CV by refitting on K-1 contiguous segments,
held-out RMS by fitting on the whole identification log (load torque iterated twice) and
predicting the held-out log, against its noise-free torque. A good CV score is one that ranks the
sets as the held-out RMS does.
"""
from __future__ import annotations

import os

for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from identify.estimation.design import term_design  # noqa: E402
from identify.estimation.selection import select_friction  # noqa: E402
from identify.logs.simulate import _motion  # noqa: E402
from identify.model.base_params import compute_base_parameters  # noqa: E402
from identify.model.friction import Term, term_columns  # noqa: E402
from identify.model.robot_model import RobotModel  # noqa: E402

from estimation.test_selection import TRUTH  # noqa: E402


def make_log(model, seconds, rate, seed, noise):
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * rate)) / rate
    q, qd, qdd = _motion(model, t, rng, harmonics=5, period=20.0)
    rigid = model.inverse_dynamics(q, qd, qdd)
    tau = rigid.copy()
    for j, law in enumerate(TRUTH):
        for term, c in law:
            tau[:, j] += term_columns(term, qd[:, j], qdd[:, j], dt=1 / rate,
                                      tau_load=rigid[:, j]) @ np.asarray(c)
    d = SimpleNamespace(t=t, q=q, qd=qd, qdd=qdd, rate_hz=rate, filter_chain=None)
    return d, tau, tau + noise * rng.normal(size=tau.shape)


def _design(Wb, d, sets, tau_load):
    """Stacked design (N*n, pb + sum k_j) of per-joint term sets."""
    N, n, pb = Wb.shape
    cols = term_design(d, n, {t for s in sets for t in s}, tau_load=tau_load)
    blocks = [Wb]
    for j, s in enumerate(sets):
        for t in s:
            b = np.zeros((N, n, t.width))
            b[:, j] = cols[t][:, j]
            blocks.append(b)
    return np.concatenate(blocks, axis=2)


def _fit(Wb, d, y, sets, rows=None):
    """Least squares with the load torque iterated twice; returns (params, tau_L function)."""
    N, n, pb = Wb.shape
    rows = np.arange(N) if rows is None else rows
    tl = np.zeros((N, n))
    for _ in range(2):
        X = _design(Wb, d, sets, tl)
        p = np.linalg.lstsq(X[rows].reshape(-1, X.shape[2]), y[rows].reshape(-1), rcond=None)[0]
        tl = Wb @ p[:pb]
    return p


def _predict(Wb, d, sets, p):
    pb = Wb.shape[2]
    tl = Wb @ p[:pb]
    return _design(Wb, d, sets, tl) @ p


def cv_rms(Wb, d, y, sets, folds):
    N = Wb.shape[0]
    edges = np.linspace(0, N, folds + 1).astype(int)
    err = []
    for k in range(folds):
        test = np.arange(edges[k], edges[k + 1])
        train = np.setdiff1d(np.arange(N), test)
        p = _fit(Wb, d, y, sets, train)
        err.append(np.mean((_predict(Wb, d, sets, p)[test] - y[test]) ** 2, axis=0))
    return np.sqrt(np.exp(np.mean(np.log(err), axis=0)))       # geometric mean over the folds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=40.0)
    ap.add_argument("--rate", type=float, default=200.0)
    ap.add_argument("--noise", type=float, default=0.02)
    ap.add_argument("--folds", type=int, default=5)
    a = ap.parse_args(argv)
    model = RobotModel.from_urdf(str(ROOT / "assets" / "cobot6.urdf"))
    base = compute_base_parameters(model, terms=(), seed=0)
    d, _, y = make_log(model, a.duration, a.rate, 7, a.noise)
    dv, tv_true, _ = make_log(model, 0.5 * a.duration, a.rate, 8, a.noise)
    Wb = base.reduce(model.regressor(d.q, d.qd, d.qdd))
    Wv = base.reduce(model.regressor(dv.q, dv.qd, dv.qdd))
    t0 = time.perf_counter()
    sel = select_friction(Wb, d, y, joint_names=model.joint_names, folds=a.folds)
    t_sel = time.perf_counter() - t0
    n = model.n
    tb = [Term("viscous"), Term("coulomb", eps=0.0)]
    cands = {
        "textbook: viscous + sign Coulomb": [tb] * n,
        "viscous + tanh(v/0.02) Coulomb": [[Term("viscous"), Term("coulomb", eps=0.02)]] * n,
        "  + offset": [[Term("viscous"), Term("coulomb", eps=0.02), Term("offset")]] * n,
        "  + Stribeck (vs 0.3)": [[Term("viscous"), Term("coulomb", eps=0.0),
                                   Term("stribeck", eps=0.0, vs=0.3)]] * n,
        "  + 4-quadrant load Coulomb": [[Term("viscous"), Term("coulomb", eps=0.02),
                                         Term("load_coulomb_4q", eps=0.02)]] * n,
        "viscous + Dahl (xs 3e-4)": [[Term("viscous"), Term("dahl", xs=3e-4)]] * n,
        "  + quadratic viscous": [[Term("viscous"), Term("coulomb", eps=0.02),
                                   Term("quad_viscous")]] * n,
        "friction: auto (the choice)": sel.joint_terms,
        "the true laws": [[t for t, _ in law] for law in TRUTH],
    }
    print(f"identification log {a.duration:g} s at {a.rate:g} Hz, noise {a.noise:g} N*m, "
          f"{a.folds} folds; held-out log {0.5 * a.duration:g} s of another motion")
    print(f"select_friction: {t_sel:.2f} s (one core)")
    print(f"{'candidate set (every joint alike unless noted)':48s} {'CV RMS':>9s} "
          f"{'held-out RMS':>13s}   [N*m, all joints; held-out vs the noise-free torque]")
    for name, sets in cands.items():
        cv = cv_rms(Wb, d, y, sets, a.folds)
        p = _fit(Wb, d, y, sets)
        ho = np.sqrt(np.mean((_predict(Wv, dv, sets, p) - tv_true) ** 2, axis=0))
        print(f"{name:48s} {np.sqrt(np.mean(cv ** 2)):9.4f} {np.sqrt(np.mean(ho ** 2)):13.4f}"
              f"   per joint held-out: " + " ".join(f"{x:.3f}" for x in ho))
    for c in sel.choices:
        print(f"  {c.joint}: {' + '.join(c.chosen.terms)}  (CV RMS {c.chosen.cv_rms:.4f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
