"""The optimizer's decision variables: Fourier coefficients of harmonics 2..H (harmonic 1
eliminated so the trajectory starts and ends at rest exactly) and the free start pose; the
constant bases mapping them to q, qd, qdd on a grid; random (feasible) trajectories as starts and
as the benchmark's baseline."""
from __future__ import annotations
import math
import numpy as np
from .fourier import FourierTrajectory
from .problem import ExcitationInfeasible, ExcitationProblem, resolve_start, scaled_limits


# ------------------------------------------------------------------------------------------------
# Fourier basis for the free coefficients
# ------------------------------------------------------------------------------------------------
def free_basis(H: int, wf: float, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Matrices P, V, A (N, 2(H-1)) with q - q0 = P x, qd = V x, qdd = A x for one joint, where
    x = [a_2..a_H, b_2..b_H] and harmonic 1 is fixed by the rest conditions (see fourier.py)."""
    t = np.asarray(t, float)
    k = np.arange(2, H + 1, dtype=float)
    ph = np.mod(np.outer(t, k) * wf, 2 * math.pi)
    ph1 = np.mod(t * wf, 2 * math.pi)[:, None]
    s, c, s1, c1 = np.sin(ph), np.cos(ph), np.sin(ph1), np.cos(ph1)
    kw = k * wf
    Pa = s / kw - s1 / wf
    Pb = (1 - c) / kw - k * (1 - c1) / wf
    Va = c - c1
    Vb = s - k * s1
    Aa = -kw * s + wf * s1
    Ab = kw * c - k * wf * c1
    return np.hstack([Pa, Pb]), np.hstack([Va, Vb]), np.hstack([Aa, Ab])


def split_x(x: np.ndarray, q_start: np.ndarray, free: np.ndarray, m: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """NLP variables x -> (Fourier coefficients X (n, m), start pose q0 (n,) rad): x holds X
    row by row, then the start angles of the `free` joints."""
    n = q_start.shape[0]
    q0 = q_start.copy()
    q0[free] = x[n * m:]
    return x[:n * m].reshape(n, m), q0


def states_on_grid(x: np.ndarray, q_start: np.ndarray, free: np.ndarray, P: np.ndarray,
                   V: np.ndarray, A: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """q, qd, qdd (N, n) at the samples of the bases P, V, A (N, m) of :func:`free_basis`."""
    X, q0 = split_x(x, q_start, free, P.shape[1])
    return q0[None, :] + P @ X.T, V @ X.T, A @ X.T


def to_trajectory(x: np.ndarray, q_start: np.ndarray, free: np.ndarray, H: int, wf: float,
                   joint_names, meta=None) -> FourierTrajectory:
    """NLP variables x -> the trajectory they describe (H harmonics, fundamental wf [rad/s],
    harmonic 1 from the rest conditions; free start joints' q0 from x, the others q_start)."""
    X, q0 = split_x(x, q_start, free, 2 * (H - 1))
    return FourierTrajectory.from_free(q0, X[:, :H - 1], X[:, H - 1:], wf,
                                       joint_names=tuple(joint_names), meta=meta or {})


def to_x(traj: FourierTrajectory, free: np.ndarray) -> np.ndarray:
    """The inverse of :func:`to_trajectory`: (n m + n_free,) the coefficients of harmonics
    2..H of every joint, then the start pose of the free joints (bool mask `free` (n,))."""
    return np.concatenate([np.hstack([traj.a[:, 1:], traj.b[:, 1:]]).reshape(-1), traj.q0[free]])


# ------------------------------------------------------------------------------------------------
# random feasible trajectories (initial guesses, benchmark baseline, validation)
# ------------------------------------------------------------------------------------------------
def random_trajectory(model, problem: ExcitationProblem, rng: np.random.Generator,
                      fill: float = 1.0, limits: dict | None = None,
                      n_check: int | None = None) -> FourierTrajectory:
    """A random trajectory of `problem`'s form scaled so the linear limits are used up to `fill`.

    Coefficients ~ N(0, 1)/k (harmonic k), free start poses uniform in the middle half of their
    range (clipped to +-pi). The motion is then scaled (about the start pose) so that the largest
    of |qd|/qd_max, |qdd|/qdd_max, position usage on a grid of `n_check` samples equals `fill`.
    The workspace constraint is NOT enforced here (see :func:`random_feasible_trajectory`).
    """
    n, H, wf = model.n, problem.harmonics, problem.wf
    lim = scaled_limits(model, problem) if limits is None else limits
    q_start, free = resolve_start(model, problem)
    q0 = q_start.copy()
    for i in np.flatnonzero(free):
        lo, hi = max(lim["q_min"][i], -math.pi), min(lim["q_max"][i], math.pi)
        c, h = 0.5 * (lo + hi), 0.5 * (hi - lo)
        q0[i] = rng.uniform(c - 0.5 * h, c + 0.5 * h)
    k = np.arange(2, H + 1, dtype=float)
    A = rng.standard_normal((n, H - 1)) / k
    B = rng.standard_normal((n, H - 1)) / k
    if H == 1:
        return FourierTrajectory.from_free(q0, A, B, wf, joint_names=tuple(model.joint_names))
    n_check = n_check or 10 * problem.n_grid
    t = np.arange(n_check) * (2 * math.pi / wf / n_check)
    P, V, Acc = free_basis(H, wf, t)
    X = np.hstack([A, B])                       # (n, m)
    dq, qd, qdd = X @ P.T, X @ V.T, X @ Acc.T   # (n, N)
    with np.errstate(divide="ignore", invalid="ignore"):
        up = np.where(dq.max(1) > 0, (lim["q_max"] - q0) / dq.max(1), np.inf)
        dn = np.where(dq.min(1) < 0, (lim["q_min"] - q0) / dq.min(1), np.inf)
        sv = lim["qd_max"] / np.abs(qd).max(1)
        sa = lim["qdd_max"] / np.abs(qdd).max(1)
    s = fill * np.min(np.vstack([up, dn, sv, sa]), axis=0)   # per joint
    s = np.where(np.isfinite(s), s, 1.0)
    X = X * s[:, None]
    return FourierTrajectory.from_free(q0, X[:, :H - 1], X[:, H - 1:], wf,
                                       joint_names=tuple(model.joint_names))


def random_feasible_trajectory(model, problem, rng, fill: float = 1.0, max_tries: int = 1000,
                               n_check: int | None = None) -> FourierTrajectory:
    """:func:`random_trajectory` that also satisfies the workspace constraint (rejection)."""
    lim = scaled_limits(model, problem)
    n_check = n_check or 10 * problem.n_grid
    for _ in range(max_tries):
        tr = random_trajectory(model, problem, rng, fill=fill, limits=lim, n_check=n_check)
        if lim["z_min"] is None:
            return tr
        t = np.arange(n_check) * (tr.period / n_check)
        if model.link_origins(tr.evaluate(t)[0])[:, 1:, 2].min() >= lim["z_min"]:
            return tr
    raise ExcitationInfeasible(f"no random trajectory in {max_tries} tries satisfies the workspace "
                               f"constraint z >= {lim['z_min']:g} m")
