"""Design matrices of the joint models from processed data: the base regressor with the friction
columns (the Coulomb column parallel-filtered like the torques), column kinds and masks, channel
access on processed recordings, and the estimator factory shared by both joint models."""
from __future__ import annotations
import numpy as np


# --------------------------------------------------------------------------------------------
# input checks and design matrices
# --------------------------------------------------------------------------------------------
def channel(processed, name: str, n: int | None = None, n_samples: int | None = None) -> np.ndarray:
    """Fetch a (N, n) channel of processed data with a clear error if missing or malformed."""
    d = processed
    x = getattr(d, name, None)
    if x is None:
        raise ValueError(f"processed data has no channel {name!r} (needed by the joint model)")
    x = np.asarray(x, dtype=float)
    if x.ndim != 2 or (n is not None and x.shape[1] != n):
        raise ValueError(f"channel {name!r} has shape {x.shape}, expected (N, {n})")
    if n_samples is not None and x.shape[0] != n_samples:
        raise ValueError(f"channel {name!r} has {x.shape[0]} samples, q has {n_samples}")
    bad = ~np.isfinite(x)
    if bad.any():
        k, j = np.argwhere(bad)[0]
        raise ValueError(f"channel {name!r}: non-finite value {x[k, j]!r} at sample {k}, "
                         f"joint {j + 1}")
    return x


def states(processed, n: int):
    """(q, qd, qdd) of processed data `processed`, each (N, n) [rad, rad/s, rad/s^2], checked by
    :func:`channel`."""
    d = processed
    q = channel(d, "q", n)
    N = q.shape[0]
    return q, channel(d, "qd", n, N), channel(d, "qdd", n, N)


def time_stamps(processed, N: int) -> np.ndarray:
    """Time stamps ``processed.t`` (N,) [s], checked: N samples (N >= 3), strictly increasing."""
    d = processed
    t = getattr(d, "t", None)
    if t is None:
        raise ValueError("processed data has no time stamps 't' (needed for taudd_r)")
    t = np.asarray(t, dtype=float).reshape(-1)
    if t.shape[0] != N:
        raise ValueError(f"time stamps 't' have {t.shape[0]} samples, q has {N}")
    if N < 3:
        raise ValueError(f"need at least 3 samples, got {N}")
    if not np.all(np.diff(t) > 0):
        k = int(np.argmax(~(np.diff(t) > 0)))
        raise ValueError(f"time stamps 't' are not strictly increasing at sample {k + 1}")
    return t


def _base_terms(base, n: int, terms: tuple) -> bool:
    """True if `base` was computed with the friction `terms` (its full columns include them),
    False if it covers the 10n inertial columns only."""
    n_full = np.asarray(base.E).shape[1]
    if n_full == 10 * n + len(terms) * n:
        bt = getattr(base, "terms", None)
        if bt is not None and tuple(bt) != tuple(terms):
            raise ValueError(f"base parameters were computed with friction terms {tuple(bt)}, "
                             f"the joint model uses {tuple(terms)}")
        return True
    if n_full == 10 * n:
        return False
    raise ValueError(f"base parameters have {n_full} full columns; expected {10 * n} (inertial) "
                     f"or {10 * n + len(terms) * n} (inertial + friction terms {tuple(terms)})")


def design_matrix(model, base, q, qd, qdd, *, terms=("viscous", "coulomb"),
                  coulomb_eps: float = 0.0, coulomb: np.ndarray | None = None
                  ) -> tuple[np.ndarray, list[str]]:
    """Base regressor with friction columns: rigid body W_b plus `terms` per joint.

    Args:
        model: RobotModel; base: BaseParameters of `model` (with or without the friction terms).
        q, qd, qdd: (N, n) [rad, rad/s, rad/s^2].
        terms: friction.joint_columns terms; coulomb_eps: tanh smoothing of sign [rad/s].
        coulomb: (N, n) values of the Coulomb columns to use instead of sign(qd) / tanh(qd/eps)
            -- the parallel-filtered column of :func:`coulomb_column` (ignored without the
            "coulomb" term).
    Returns:
        W (N, n, p) and the p column names.
    """
    from identify.model.friction import column_names, joint_columns
    n = model.n
    terms = tuple(terms)
    J = joint_columns(qd, qdd, terms=terms, coulomb_eps=coulomb_eps)
    if coulomb is not None and "coulomb" in terms:
        coulomb = np.asarray(coulomb, dtype=float)
        if coulomb.shape != J.shape[:2]:
            raise ValueError(f"Coulomb column values have shape {coulomb.shape}, expected "
                             f"{J.shape[:2]} (samples of qd, joints)")
        k = terms.index("coulomb")
        idx = np.arange(n)
        J[:, idx, k * n + idx] = coulomb
    Y = model.regressor(q, qd, qdd)
    if _base_terms(base, n, terms):
        return base.reduce(np.concatenate([Y, J], axis=2)), list(base.names)
    W = np.concatenate([base.reduce(Y), J], axis=2)
    return W, list(base.names) + (column_names(n, terms) if terms else [])


def coulomb_column(processed, n: int, coulomb_eps: float = 0.0) -> np.ndarray | None:
    """Parallel-filtered Coulomb column (N, n) of processed data `processed`, or None.

    If `processed` carries the processing's filter chain (``processed.filter_chain``, ``processed.qd_full``:
    ProcessingSettings.filter_regressor, the default), sign(qd) (tanh(qd / coulomb_eps) for
    coulomb_eps > 0) is evaluated on the chain's full grid and passed through exactly the filter
    the torques went through (processing.filter_columns), so that the smeared Coulomb step in
    the filtered torque is matched by the same smeared step in the regressor. Data without a
    chain (processed with filter_regressor=False, or built by hand): None, and the callers use
    the plain sign(qd) of ``processed.qd``.
    """
    d = processed
    chain = getattr(d, "filter_chain", None)
    if chain is None:
        return None
    from .processing import filter_columns
    qd_full = getattr(d, "qd_full", None)
    if qd_full is None:
        raise ValueError("processed data carry a filter chain but no qd_full (the velocity on "
                         "the chain's full grid) to build the Coulomb column from")
    qd_full = np.asarray(qd_full, dtype=float)
    if qd_full.ndim != 2 or qd_full.shape[1] != n:
        raise ValueError(f"qd_full has shape {qd_full.shape}, expected (N_full, {n})")
    raw = np.sign(qd_full) if coulomb_eps <= 0 else np.tanh(qd_full / coulomb_eps)
    out = filter_columns(raw, chain, "Coulomb column from qd_full")
    N = np.shape(getattr(d, "qd"))[0]
    if out.shape[0] != N:
        raise ValueError(f"the filter chain gives {out.shape[0]} samples, qd has {N}: the data "
                         f"were changed after processing")
    return out


def design_from(model, base, processed, *, terms=("viscous", "coulomb"), coulomb_eps: float = 0.0,
                blocks: bool = False) -> tuple[np.ndarray, list[str]]:
    """:func:`design_matrix` of processed data `processed` (q, qd, qdd and, if `processed` carries the filter
    chain, the parallel-filtered Coulomb column of :func:`coulomb_column`). This is the design
    the joint models use; share it between them via ``fit(d, W)`` / ``predict(d, W)``.
    With ``blocks=True`` a design larger than BLOCK_BYTES comes back as a :class:`BlockDesign`
    (built row block by row block when used)."""
    d = processed
    if blocks and is_large(model, base, d, terms):
        return BlockDesign(model, base, d, terms, coulomb_eps), \
            design_matrix_names(model, base, terms)
    q, qd, qdd = states(d, model.n)
    return design_matrix(model, base, q, qd, qdd, terms=terms, coulomb_eps=coulomb_eps,
                         coulomb=(coulomb_column(d, model.n, coulomb_eps)
                                  if "coulomb" in tuple(terms) else None))


#: designs larger than this [bytes] are built and used in row blocks (long logs)
BLOCK_BYTES = 256 * 2 ** 20


class BlockDesign:
    """A design too large to hold (N x n x p x 8 bytes > BLOCK_BYTES): the processed data and
    how to build any row block of it (:func:`design_matrix` on a slice, with the slice of the
    parallel-filtered Coulomb column). ``shape`` is the full design's; :meth:`blocks` yields
    (slice, W_block); ``W @ params`` predicts block by block."""

    def __init__(self, model, base, processed, terms, coulomb_eps: float):
        d = processed
        self.model, self.base, self.d = model, base, d
        self.terms, self.coulomb_eps = tuple(terms), float(coulomb_eps)
        q, self._qd, self._qdd = states(d, model.n)
        self._q = q
        self._coulomb = (coulomb_column(d, model.n, coulomb_eps)
                         if "coulomb" in self.terms else None)
        p = len(design_matrix_names(model, base, self.terms))
        self.shape = (q.shape[0], model.n, p)
        self.ndim = 3

    def blocks(self):
        from .streaming import row_blocks
        for sl in row_blocks(self.shape[0]):
            yield sl, design_matrix(self.model, self.base, self._q[sl], self._qd[sl],
                                    self._qdd[sl], terms=self.terms,
                                    coulomb_eps=self.coulomb_eps,
                                    coulomb=None if self._coulomb is None else self._coulomb[sl])[0]

    def __matmul__(self, params):
        from identify.common.blas import single_thread_blas
        out = np.empty(self.shape[:2])
        with single_thread_blas():      # small products: threads only contend
            for sl, W in self.blocks():
                out[sl] = W @ params
        return out

    def cond(self) -> float:
        """cond of the stacked design (from per-block R factors; cached)."""
        if getattr(self, "_cond", None) is not None:
            return self._cond
        R = np.zeros((0, self.shape[2]))
        for _sl, W in self.blocks():
            R = np.linalg.qr(np.vstack([R, W.reshape(-1, self.shape[2])]), mode="r")
        self._cond = float(np.linalg.cond(R))
        return self._cond


def is_large(model, base, processed, terms) -> bool:
    """True when the design of `processed` exceeds BLOCK_BYTES (use :class:`BlockDesign`)."""
    d = processed
    N = np.shape(getattr(d, "q"))[0]
    p = len(design_matrix_names(model, base, tuple(terms)))
    # the full regressor (10n columns) is built before the base reduction
    return N * model.n * max(p, 10 * model.n) * 8 > BLOCK_BYTES


def design_cond(W) -> float:
    """cond of a design (N, n, p) or a :class:`BlockDesign`."""
    if isinstance(W, BlockDesign):
        return W.cond()
    return float(np.linalg.cond(W.reshape(-1, W.shape[-1])))


def given_design(obj, processed, W):
    """Design of `processed` for a fitted/unfitted model `obj`: computed, or the caller's W checked."""
    d = processed
    if W is None:
        return obj.design(d)
    if isinstance(W, BlockDesign):
        return W
    W = np.asarray(W, dtype=float)
    q = channel(d, "q", obj.model.n)
    p = len(design_matrix_names(obj.model, obj.base, obj.terms))
    if W.ndim != 3 or W.shape != (q.shape[0], obj.model.n, p):
        raise ValueError(f"precomputed design W has shape {W.shape}, expected "
                         f"{(q.shape[0], obj.model.n, p)} (samples of q, joints, columns)")
    return W


def column_kinds(model, base, terms) -> np.ndarray:
    """(p,) kind of each design_matrix column: "rigid" or the friction term's name."""
    n = model.n
    terms = tuple(terms)
    if _base_terms(base, n, terms):
        idx = np.asarray(base.independent)
        fr = [terms[(i - 10 * n) // n] if i >= 10 * n else "rigid" for i in idx]
    else:
        fr = ["rigid"] * len(base.independent) + [t for t in terms for _ in range(n)]
    return np.array(fr, dtype=object)


def coulomb_mask(model, base, terms, coulomb_eps: float) -> np.ndarray:
    """(p,) True for hard-sign Coulomb columns (coulomb_eps <= 0) of design_matrix."""
    if coulomb_eps > 0:
        return np.zeros(len(column_kinds(model, base, terms)), bool)
    return column_kinds(model, base, terms) == "coulomb"


def second_derivative(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """d^2x/dt^2 along axis 0 by two passes of second-order central differences.

    Args: t (N,) [s]; x (N, ...). Returns (N, ...) [unit of x / s^2]."""
    from .signal import differentiate
    return differentiate(differentiate(x, t), t)


def design_matrix_names(model, base, terms) -> list[str]:
    from identify.model.friction import column_names
    if _base_terms(base, model.n, tuple(terms)):
        return list(base.names)
    return list(base.names) + (column_names(model.n, terms) if terms else [])


# --------------------------------------------------------------------------------------------
# columns of the per-joint term library (identify.model.friction.Term) from processed data
# --------------------------------------------------------------------------------------------
#: kinds whose columns are nonlinear in the velocity (parallel-filtered when a chain is known)
_NONLINEAR = ("coulomb", "coulomb_asym", "stribeck", "sqrt_viscous", "quad_viscous", "dahl")


def sample_interval(processed) -> float:
    """Sample interval of processed data `processed` [s] (1 / rate_hz, else the median step of t)."""
    d = processed
    rate = getattr(d, "rate_hz", None)
    if rate:
        return 1.0 / float(rate)
    return float(np.median(np.diff(time_stamps(d, np.shape(d.q)[0]))))


def term_design(processed, n: int, terms, *, tau_load: np.ndarray | None = None,
                filtered: bool = True) -> dict:
    """Columns of every library term in `terms` for all joints of processed data `processed`.

    Nonlinear terms (Coulomb, asymmetric Coulomb, Stribeck, sqrt/quadratic viscous, Dahl) are
    evaluated on the filter chain's full grid (``processed.qd_full``, dt = 1 / chain rate) and passed
    through the same filter as the torques when `processed` carries the chain and `filtered`; else on
    ``processed.qd`` with dt = :func:`sample_interval` (what a controller computes). Load-dependent terms
    use the (parallel-filtered) Coulomb shape of the same eps times |tau_L| on the processed
    samples (tau_L is smooth, so filter(|tau_L| c) ~ |tau_L| filter(c)).

    Args:
        d: Processed; n: joints; terms: iterable of Term; tau_load: (N, n) [N*m] (load terms).
    Returns:
        {Term: (N, n, Term.width)}.
    """
    d = processed
    from identify.model.friction import coulomb_shape, term_columns
    q, qd, qdd = states(d, n)
    chain = getattr(d, "filter_chain", None) if filtered else None
    full = getattr(d, "qd_full", None) if chain is not None else None
    out, shapes = {}, {}

    def shape(eps):
        if eps not in shapes:
            if full is None:
                shapes[eps] = coulomb_shape(qd, eps)
            else:
                from .processing import filter_columns
                shapes[eps] = filter_columns(coulomb_shape(full, eps), chain,
                                             f"Coulomb shape eps={eps:g} from qd_full")
        return shapes[eps]
    for term in terms:
        if term.kind.startswith("load_coulomb"):
            out[term] = term_columns(term, qd, dt=0.0, tau_load=tau_load, shape=shape(term.eps))
        elif term.kind in _NONLINEAR and full is not None:
            from .processing import filter_columns
            raw = chain.per_segment(lambda x, term=term: term_columns(
                term, x, dt=1.0 / chain.rate_hz), np.asarray(full, float))
            out[term] = filter_columns(raw, chain, f"joint term {term.label} from qd_full")
        else:
            out[term] = term_columns(term, qd, qdd, dt=sample_interval(d))
    return out
