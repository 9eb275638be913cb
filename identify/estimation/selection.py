"""Friction terms per joint chosen by the data (``identification.friction: auto``): blocked K-fold
cross-validation on the identification data only, over the term library of
:mod:`identify.model.friction`, with a parsimony rule (the smallest set within one standard error
of the best), and :class:`SelectedModel`, the simplified model with the chosen terms. See
docs/friction-terms.md."""
from __future__ import annotations
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from identify.common.estimator import EstimatorMixin, check_is_fitted
from .design import channel


# --------------------------------------------------------------------------------------------
# friction terms per joint, chosen by blocked cross-validation (identification.friction: auto)
# --------------------------------------------------------------------------------------------
#: Coulomb shape scales [rad/s], Stribeck velocities [rad/s], Dahl displacements [rad] tried
EPS_GRID = (0.0, 0.005, 0.02, 0.05)
VS_GRID = (0.1, 0.3, 1.0)
XS_GRID = (1e-4, 3e-4, 1e-3)
#: the textbook set every joint's search also starts from
TEXTBOOK = ("viscous", "coulomb(eps=0)")


def default_pool(load: bool = True, armature: bool = True) -> list:
    """The candidate terms of every joint, each with its exclusive group: at most one term per
    group in a joint's set ("coulomb": one Coulomb-like static shape -- sign / tanh, asymmetric,
    or the Dahl state; "stribeck"; "load": single or 4-quadrant). Returns [(group, Term)]."""
    from identify.model.friction import Term
    pool = [("viscous", Term("viscous")), ("offset", Term("offset"))]
    pool += [("coulomb", Term("coulomb", eps=e)) for e in EPS_GRID]
    pool += [("coulomb", Term("coulomb_asym", eps=e)) for e in EPS_GRID]
    pool += [("coulomb", Term("dahl", xs=x)) for x in XS_GRID]
    pool += [("stribeck", Term("stribeck", eps=e, vs=v)) for e in (0.0, 0.02) for v in VS_GRID]
    pool += [("sqrt_viscous", Term("sqrt_viscous")), ("quad_viscous", Term("quad_viscous"))]
    if armature:
        pool.append(("armature", Term("armature")))
    if load:
        pool += [("load", Term(k, eps=e)) for k in ("load_coulomb", "load_coulomb_4q")
                 for e in (0.0, 0.02)]
    return pool


@dataclass
class CandidateScore:
    """One evaluated term set of a joint: its labels, coefficient count, the blocked-CV RMS of
    the joint's torque [N*m] (the square root of the folds' geometric-mean MSE) and the
    per-fold mean squared errors [N^2*m^2]."""
    terms: tuple
    n_coef: int
    cv_rms: float
    fold_mse: np.ndarray

    @cached_property
    def log_fold_mse(self) -> np.ndarray:
        """(K,) log of the per-fold MSE (floored at 1e-300), computed once: the stepwise search
        compares each candidate thousands of times."""
        return np.log(np.maximum(self.fold_mse, 1e-300))

    @cached_property
    def mse(self) -> float:
        """The comparison score: mean over the folds of log(MSE) (one fold whose rigid body
        extrapolates badly does not decide it, as it would the arithmetic mean)."""
        return float(np.mean(self.log_fold_mse))

    def log_ratio(self, other: "CandidateScore") -> tuple[float, float]:
        """Mean over the folds of log(MSE_self / MSE_other) and its standard error: the
        fold-paired relative difference (scale-free, so a large gain is not hidden by the folds'
        different MSE levels)."""
        r = self.log_fold_mse - other.log_fold_mse
        se = float(r.std(ddof=1) / np.sqrt(r.size)) if r.size > 1 else 0.0
        return float(r.mean()), se

    def to_dict(self, best: "CandidateScore | None" = None) -> dict:
        out = {"terms": list(self.terms) or ["(rigid body only)"],
               "n_coefficients": self.n_coef, "cv_rms_Nm": self.cv_rms}
        if best is not None:
            m, se = self.log_ratio(best)
            out["log_mse_ratio_to_best"], out["se_of_log_ratio"] = m, se
        return out


@dataclass
class JointChoice:
    """The choice for one joint: the sets the stepwise search visited, the best by CV score,
    the chosen set (the smallest within one SE of the best) and why."""
    joint: str
    candidates: list
    best: CandidateScore
    chosen: CandidateScore
    why: str

    def to_dict(self) -> dict:
        return {"joint": self.joint, "chosen": list(self.chosen.terms),
                "chosen_cv_rms_Nm": self.chosen.cv_rms, "best_cv": list(self.best.terms),
                "best_cv_rms_Nm": self.best.cv_rms, "why": self.why,
                "candidates": [c.to_dict(self.best) for c in self.candidates]}


@dataclass
class FrictionSelection:
    """Result of :func:`select_friction`: per joint the chosen Terms and the scores, the folds,
    the load-torque passes and the final fit on all identification samples.

    params: (pb + sum_j k_j,) the rigid base parameters then joint 1's coefficients, joint 2's...
    std: same shape (WLS with the per-joint residual variances sigma (n,) [N*m]); names."""
    joint_terms: list
    choices: list
    folds: int
    passes: int
    params: np.ndarray
    std: np.ndarray
    names: list
    n_base: int
    sigma: np.ndarray

    def coefficients(self) -> list:
        """Per joint: [(Term, coefficient array (width,))] of the final fit."""
        out, k = [], self.n_base
        for terms in self.joint_terms:
            row = []
            for t in terms:
                row.append((t, self.params[k:k + t.width].copy()))
                k += t.width
            out.append(row)
        return out

    def to_dict(self) -> dict:
        return {"method": f"blocked {self.folds}-fold cross-validation on the identification "
                          f"samples (contiguous segments, never the validation data); per joint "
                          f"a stepwise search (add / remove / change the shape constant inside a "
                          f"term group) from no terms and from {' + '.join(TEXTBOOK)}; a term "
                          f"enters only if it lowers the CV mean squared error by more than one "
                          f"standard error of the fold-paired difference and leaves if removing "
                          f"it costs less than one (parsimony); load torque tau_L from the fit, "
                          f"{self.passes} pass(es)",
                "joints": [c.to_dict() for c in self.choices]}


def _grams(Wb, C, y, mask, folds: int):
    """Per fold segment k and joint j: X^T X (K, n, P, P), X^T y (K, n, P), y^T y and the
    sample count (K, n) of X = [Wb[:, j], C[:, j]] over the segment's samples in `mask` (the
    excluded rows zeroed in one joint-major contiguous copy, so each product is one BLAS call
    on contiguous rows)."""
    N, n, pb = Wb.shape
    P = pb + C.shape[2]
    mask = np.asarray(mask, bool)
    edges = np.linspace(0, N, folds + 1).astype(int)
    X = np.empty((n, N, P))
    X[:, :, :pb] = Wb.transpose(1, 0, 2)
    X[:, :, pb:] = C.transpose(1, 0, 2)
    X *= mask.T[:, :, None]
    ym = np.ascontiguousarray((np.where(mask, y, 0.0)).T)
    G, b = np.zeros((folds, n, P, P)), np.zeros((folds, n, P))
    yy, cnt = np.zeros((folds, n)), np.zeros((folds, n))
    for k in range(folds):                       # K x n matrix products (BLAS), not per sample
        sl = slice(edges[k], edges[k + 1])
        for j in range(n):
            Xk, yk = X[j, sl], ym[j, sl]
            G[k, j], b[k, j], yy[k, j] = Xk.T @ Xk, Xk.T @ yk, yk @ yk
        cnt[k] = mask[sl].sum(axis=0)
    return G, b, yy, cnt


def _solve(A, r):
    """A x = r for a symmetric positive semi-definite A, Jacobi-scaled with a 1e-10 ridge."""
    dg = np.sqrt(np.maximum(np.diag(A), 1e-300))
    As = A / dg[:, None] / dg[None, :]
    As[np.diag_indices_from(As)] += 1e-10
    dr = dg if np.ndim(r) == 1 else dg[:, None]
    return np.linalg.solve(As, r / dr) / dr


#: relative floor of a fold's MSE (see _CV): 1e-12 of the torque's mean square, an RMS of
#: 1e-6 of the signal -- far below any measured noise
MSE_FLOOR = 1e-12


class _CV:
    """Blocked-CV scores of candidate term sets from the per-fold Gram blocks: the training
    normal equations of fold k are the totals minus fold k's block; the other joints' friction
    coefficients are eliminated onto the rigid block once per (joint, fold) (Schur complement),
    so a candidate of joint j costs one small solve per fold."""

    def __init__(self, G, b, yy, cnt, pb: int, w: np.ndarray):
        self.G, self.b, self.yy, self.cnt, self.pb, self.w = G, b, yy, cnt, pb, w
        self.Gt, self.bt = G.sum(axis=0), b.sum(axis=0)
        self.Gtr, self.btr = self.Gt[None] - G, self.bt[None] - b      # training, per fold
        self.K = G.shape[0]
        # an MSE below 1e-12 of the torque's mean square is numerically zero (noise-free data
        # fitted by its own law): sets that reach it compare equal, so round-off -- which
        # differs between machines -- never decides a term, and parsimony keeps the smallest
        self.floor = MSE_FLOOR * yy.sum(axis=0) / np.maximum(cnt.sum(axis=0), 1.0)     # (n,)

    def _train(self, k):
        return (self.Gt, self.bt) if k is None else (self.Gt - self.G[k], self.bt - self.b[k])

    def reduced(self, sets, j: int) -> list:
        """(S (K, pb, pb), s (K, pb)): per fold the rigid-block normal matrix and right side of
        every joint but j, their own coefficients (columns `sets[i]` of C) eliminated."""
        pb, r = self.pb, np.arange(self.pb)
        out = []
        for k in range(self.K):
            Gk, bk = self._train(k)
            S, s = np.zeros((pb, pb)), np.zeros(pb)
            for i, cols in enumerate(sets):
                if i == j:
                    continue
                c = pb + np.asarray(cols, int)
                Grr, br = Gk[i][np.ix_(r, r)], bk[i][r]
                if c.size:
                    Grc, Gcc = Gk[i][np.ix_(r, c)], Gk[i][np.ix_(c, c)]
                    X = _solve(Gcc, np.column_stack([Grc.T, bk[i][c]]))
                    Grr = Grr - Grc @ X[:, :pb]
                    br = br - Grc @ X[:, pb]
                S += self.w[i] * Grr
                s += self.w[i] * br
            out.append((S, s))
        return np.stack([o[0] for o in out]), np.stack([o[1] for o in out])

    def fold_mse(self, red, j: int, cols) -> np.ndarray:
        """(K,) validation MSE of joint j with its columns `cols` of C, given :meth:`reduced`."""
        return self.fold_mse_many(red, j, [cols])[:, 0]

    def fold_mse_many(self, red, j: int, many) -> np.ndarray:
        """(K, C) validation MSE of joint j for C candidate column lists (the K x C training
        systems solved as one stacked solve). Shorter lists are padded at the end with
        decoupled unit rows (zero right side, zero validation block): their coefficients come
        out exactly 0 and the other unknowns as in the list's own system."""
        pb = self.pb
        lens = [len(c) for c in many]
        L = pb + max(lens)
        loc = np.zeros((len(many), L), int)
        valid = np.zeros((len(many), L), bool)
        for i, c in enumerate(many):
            loc[i, :pb + lens[i]] = np.r_[np.arange(pb), pb + np.asarray(c, int)]
            valid[i, :pb + lens[i]] = True
        ia, ib = loc[:, :, None], loc[:, None, :]
        both = valid[:, :, None] & valid[:, None, :]
        A = self.w[j] * self.Gtr[:, j][:, ia, ib] * both                 # (K, C, L, L)
        rhs = self.w[j] * self.btr[:, j][:, loc] * valid                 # (K, C, L)
        A[:, :, :pb, :pb] += red[0][:, None]
        rhs[:, :, :pb] += red[1][:, None]
        pad = ~valid
        if pad.any():
            ci, li = np.nonzero(pad)
            A[:, ci, li, li] = 1.0
        dg = np.sqrt(np.maximum(np.einsum("kcii->kci", A), 1e-300))
        As = A / dg[..., :, None] / dg[..., None, :]
        As[..., np.arange(L), np.arange(L)] += 1e-10
        p = np.linalg.solve(As, (rhs / dg)[..., None])[..., 0] / dg
        e = (self.yy[:, j][:, None] - 2 * np.einsum("kci,kci->kc", p, self.b[:, j][:, loc] * valid)
             + np.einsum("kci,kcij,kcj->kc", p, self.G[:, j][:, ia, ib] * both, p))
        return np.maximum(np.maximum(e, 0.0) / np.maximum(self.cnt[:, j], 1.0)[:, None],
                          self.floor[j])

    def fit(self, sets):
        """Parameters [rigid, joint 1's, joint 2's, ...] on all samples and the normal matrix."""
        pb = self.pb
        p = pb + sum(len(s) for s in sets)
        A, r = np.zeros((p, p)), np.zeros(p)
        off = pb
        for j, cols in enumerate(sets):
            loc = np.r_[np.arange(pb), pb + np.asarray(cols, int)]
            glob = np.r_[np.arange(pb), off + np.arange(len(cols))]
            A[np.ix_(glob, glob)] += self.w[j] * self.Gt[j][np.ix_(loc, loc)]
            r[glob] += self.w[j] * self.bt[j][loc]
            off += len(cols)
        return _solve(A, r), A


class _Joint:
    """Scores of one joint's candidate sets (entries of the pool), memoized."""

    def __init__(self, cv, red, j, pool, spans, allowed):
        self.cv, self.red, self.j, self.pool, self.spans = cv, red, j, pool, spans
        self.allowed = allowed
        self.memo: dict = {}

    def cols(self, entries):
        return [c for e in entries for c in range(*self.spans[e])]

    def __call__(self, entries) -> CandidateScore:
        key = tuple(sorted(entries))
        if key not in self.memo:
            self.many([entries])
        return self.memo[key]

    def many(self, sets) -> None:
        """Score every set of `sets` not scored yet, in one stacked solve."""
        group: dict = {}
        for entries in sets:
            key = tuple(sorted(entries))
            if key not in self.memo:
                group[key] = list(entries)
        if not group:
            return
        keys = list(group)
        mse = self.cv.fold_mse_many(self.red, self.j, [self.cols(k) for k in keys])
        for i, k in enumerate(keys):
            m = mse[:, i]
            self.memo[k] = CandidateScore(
                tuple(self.pool[e][1].label for e in group[k]), len(self.cols(k)),
                float(np.sqrt(np.exp(np.mean(np.log(np.maximum(m, 1e-300)))))), m)


#: a move must lower the fold-paired log CV MSE by this many of its standard errors and by at
#: least this much (the best of ~20 candidate terms clears one SE by chance alone)
ENTRY_SE = 1.0
ENTRY_REL = 2e-3
#: a term leaves (or is replaced by a smaller one) when it is worth less than one SE
LEAVE = (1.0, 0.0)


def _significant(new: CandidateScore, old: CandidateScore, n_se: float = ENTRY_SE,
                 rel: float = ENTRY_REL) -> bool:
    """`new` lowers the CV MSE of `old`: the mean fold-paired log(MSE ratio) below
    -max(n_se standard errors, rel)."""
    m, se = new.log_ratio(old)
    return m < -max(n_se * se, rel)


def _symmetric_alternative(ev: _Joint, cur, pos) -> list:
    """For an asymmetric Coulomb term: the set with the symmetric Coulomb of the same eps plus
    an offset instead (the two differ only near rest: f+ max(c,0) + f- min(c,0) =
    (f+ + f-)/2 c + (f+ - f-)/2 |c|), so asymmetry must beat an offset to stay."""
    pool, t = ev.pool, ev.pool[cur[pos]][1]
    if t.kind != "coulomb_asym":
        return []
    sym = [a for a in ev.allowed if pool[a][1].kind == "coulomb" and pool[a][1].eps == t.eps]
    off = [a for a in ev.allowed if pool[a][1].kind == "offset"]
    if not sym or not off:
        return []
    rest = cur[:pos] + [sym[0]] + cur[pos + 1:]
    return [rest if off[0] in rest else rest + [off[0]]]


def _stepwise(ev: _Joint, start, max_steps: int = 30):
    """Add / remove / swap-in-group moves from `start` until none is accepted; returns the final
    entries and the visited (accepted) sets in order."""
    pool = ev.pool
    cur = list(start)
    sc = ev(cur)
    visited = [sc]
    for _ in range(max_steps):
        used = {pool[e][0] for e in cur}
        moves = []
        ev.many([cur[:pos] + [a] + cur[pos + 1:] for pos, e in enumerate(cur) for a in ev.allowed
                 if pool[a][0] == pool[e][0] and a != e])
        for pos, e in enumerate(cur):            # 1. a better shape constant inside a group
            alts = [cur[:pos] + [a] + cur[pos + 1:] for a in ev.allowed
                    if pool[a][0] == pool[e][0] and a != e]
            alts += _symmetric_alternative(ev, cur, pos)
            # fewer coefficients: not significantly worse; as many: a lower score; more: a
            # significantly lower one
            good = [c for c in alts
                    if (ev(c).n_coef < sc.n_coef and not _significant(sc, ev(c), *LEAVE))
                    or (ev(c).mse < sc.mse and ev(c).n_coef == sc.n_coef)
                    or _significant(ev(c), sc)]
            if good:
                moves.append(min(good, key=lambda c: (ev(c).n_coef, ev(c).mse)))
                break
        if not moves:                            # 2. a term that does not earn its place
            drops = [[x for x in cur if x != e] for e in cur]
            ev.many(drops)
            ok = [c for c in drops if not _significant(sc, ev(c), *LEAVE)]
            if ok:
                moves.append(min(ok, key=lambda c: (ev(c).n_coef, ev(c).mse)))
        if not moves:                            # 3. a term that lowers the score significantly
            adds = [cur + [e] for e in ev.allowed if pool[e][0] not in used]
            ev.many(adds)
            if adds:
                best = min(adds, key=lambda c: ev(c).mse)
                if _significant(ev(best), sc):
                    moves.append(best)
        if not moves:
            break
        cur = moves[0]
        sc = ev(cur)
        visited.append(sc)
    return cur, visited


def _choose_joint(ev: _Joint, name: str, textbook) -> tuple[list, JointChoice]:
    """Stepwise from no terms and from the textbook set; the one-SE rule between the two ends
    and the best set seen."""
    ends, seen = [], {}
    for start in ([], textbook):
        cur, vis = _stepwise(ev, start)
        ends.append(cur)
        for v in vis:
            seen[v.terms] = v
    best = min(ev.memo.values(), key=lambda c: c.mse)
    within = [e for e in ends if not _significant(best, ev(e), 1.0, 0.0)]
    pick = (min(within, key=lambda e: (ev(e).n_coef, ev(e).mse)) if within
            else min(ends, key=lambda e: ev(e).mse))
    ch = ev(pick)
    seen[ch.terms] = ch
    seen.setdefault(best.terms, best)
    why = (f"{'within one SE of' if within else 'nearest to'} the best CV score "
           f"({best.cv_rms:.4g} N*m, {len(ev.memo)} sets scored): the smaller of the two "
           f"stepwise ends, {ch.n_coef} coefficient(s), CV RMS {ch.cv_rms:.4g} N*m")
    return pick, JointChoice(name, list(seen.values()), best, ch, why)


def _sigma(res, mask):
    return np.sqrt(np.maximum((res ** 2 * mask).sum(0) / np.maximum(mask.sum(0), 1), 1e-30))


def _predict_cols(Wb, C, p, pb, sets):
    """(N, n) torque of parameters p on the rigid design Wb and per-joint columns C[:, j, set]."""
    out = Wb @ p[:pb]
    off = pb
    for j, s in enumerate(sets):
        out[:, j] += C[:, j, s] @ p[off:off + len(s)]
        off += len(s)
    return out


def _load_torque(Wb, p, pb, chosen, pool, widths, qdd):
    """tau_L (N, n) [N*m]: rigid body + armature torque of the fit p."""
    tl = Wb @ p[:pb]
    off = pb
    for j, s in enumerate(chosen):
        for e in s:
            if pool[e][1].kind == "armature":
                tl[:, j] += p[off] * qdd[:, j]
            off += widths[e]
    return tl


def select_friction(Wb: np.ndarray, processed, y: np.ndarray, *, joint_names, folds: int = 5,
                    pool=None, load_passes: int = 3, mask: np.ndarray | None = None,
                    sweeps: int = 1) -> FrictionSelection:
    """Pick per joint the friction / drive-loss terms and their shape constants by blocked
    K-fold cross-validation on the identification samples only.

    Args:
        Wb: (N, n, pb) rigid-body base regressor of `processed` (inertial base parameters only).
        d: Processed data (states, filter chain) the term columns are built from
            (:func:`identify.estimation.design.term_design`).
        y: (N, n) fitted torque [N*m].
        joint_names: n names (reports); folds: K contiguous segments.
        pool: [(group, Term)] candidates (default :func:`default_pool`).
        load_passes: passes of (select, fit, recompute tau_L) when the pool has load terms
            (the bilinear problem solved by iteration; the first pass has no load terms).
        mask: (N, n) bool samples that take part (``processed.fit_mask``), None: all.
        sweeps: passes over the joints (each joint chosen with the others' current sets).
    Returns:
        :class:`FrictionSelection`.
    """
    d = processed
    from identify.common.blas import single_thread_blas
    with single_thread_blas():          # many small products: threads only contend
        return _select(Wb, d, y, joint_names, folds, pool, load_passes, mask, sweeps)


def _select(Wb, processed, y, joint_names, folds, pool, load_passes, mask, sweeps):
    d = processed
    from .design import term_design
    pool = default_pool() if pool is None else list(pool)
    N, n, pb = Wb.shape
    if N < 10 * folds:
        raise ValueError(f"select_friction: {N} samples are too few for {folds} folds")
    mask = np.ones((N, n), bool) if mask is None else np.asarray(mask, bool)
    loads = [i for i, (_, t) in enumerate(pool) if t.kind.startswith("load_coulomb")]
    static = term_design(d, n, [t for i, (_, t) in enumerate(pool) if i not in loads])
    widths = [t.width for _, t in pool]
    starts = np.r_[0, np.cumsum(widths)]
    spans = {i: (int(starts[i]), int(starts[i + 1])) for i in range(len(pool))}
    textbook = [i for i, (_, t) in enumerate(pool) if t.label in TEXTBOOK]
    chosen = [list(textbook) for _ in range(n)]
    tau_load = np.zeros((N, n))
    choices: list = [None] * n
    passes = 0
    for passes in range(1, (load_passes if loads else 1) + 1):
        cols = dict(static)
        cols.update(term_design(d, n, [pool[i][1] for i in loads], tau_load=tau_load))
        C = np.concatenate([cols[t] for _, t in pool], axis=2)
        allowed = [i for i in range(len(pool)) if passes > 1 or i not in loads]
        G, b, yy, cnt = _grams(Wb, C, y, mask, folds)
        sets = [[c for e in s for c in range(*spans[e])] for s in chosen]
        p0, _ = _CV(G, b, yy, cnt, pb, np.ones(n)).fit(sets)
        cv = _CV(G, b, yy, cnt, pb, 1.0 / _sigma(y - _predict_cols(Wb, C, p0, pb, sets),
                                                   mask) ** 2)
        old = [list(s) for s in chosen]
        for _ in range(sweeps if passes == 1 else 1):
            for j in range(n):
                sets = [[c for e in s for c in range(*spans[e])] for s in chosen]
                ev = _Joint(cv, cv.reduced(sets, j), j, pool, spans, allowed)
                chosen[j], choices[j] = _choose_joint(ev, str(joint_names[j]), textbook)
        sets = [[c for e in s for c in range(*spans[e])] for s in chosen]
        p, _ = cv.fit(sets)
        if not loads or (passes > 1 and chosen == old):
            break
        tau_load = _load_torque(Wb, p, pb, chosen, pool, widths, d.qdd)
    sigma = _sigma(y - _predict_cols(Wb, C, p, pb, sets), mask)
    cvf = _CV(G, b, yy, cnt, pb, 1.0 / sigma ** 2)
    p, A = cvf.fit(sets)
    std = np.sqrt(np.maximum(np.diag(np.linalg.pinv(A)), 0.0))
    jt = [[pool[e][1] for e in s] for s in chosen]
    names = [f"b{i + 1}" for i in range(pb)] + [
        f"{nm}_{joint_names[j]}" for j, terms in enumerate(jt) for t in terms
        for nm in t.coefficient_names]
    return FrictionSelection(jt, choices, folds, passes, p, std, names, pb, sigma)


def predict_selected(sel: FrictionSelection, Wb: np.ndarray, processed, *, filtered: bool = True
                     ) -> np.ndarray:
    """(N, n) torque [N*m] of a :class:`FrictionSelection` on processed data `processed` with rigid base
    design Wb (N, n, pb): rigid body + every joint's terms, tau_L = the model's own rigid-body +
    armature torque (the load-dependent columns are evaluated with it)."""
    d = processed
    from .design import term_design
    coef = sel.coefficients()
    rigid = Wb @ sel.params[:sel.n_base]
    tau_load = rigid.copy()
    for j, row in enumerate(coef):
        for t, c in row:
            if t.kind == "armature":
                tau_load[:, j] += c[0] * d.qdd[:, j]
    cols = term_design(d, Wb.shape[1], {t for row in coef for t, _ in row}, tau_load=tau_load,
                       filtered=filtered)
    out = rigid
    for j, row in enumerate(coef):
        for t, c in row:
            out[:, j] += cols[t][:, j] @ c
    return out


class SelectedModel(EstimatorMixin):
    """The simplified model with its friction terms chosen per joint by :func:`select_friction`
    (``identification.friction: auto``): tau = W_b p_b + sum over joint j's chosen terms, fitted
    to the one torque signal of ``processed.tau_m`` (the motor torque, or the joint torque aliased
    to it). Same interface as :class:`~identify.estimation.simplified.SimplifiedModel` (design /
    fit / predict); settings stored as given and checked by :meth:`fit`. After :meth:`fit`:
    ``params_``, ``std_``, ``names_``, ``rigid_params_`` (the rigid-body base parameters, the
    first ones of ``params_``) and ``selection_`` (the candidates, scores and choices).

    `base`: BaseParameters of the rigid body alone (``compute_base_parameters(model, ())``);
    `folds`: contiguous CV folds (>= 2); `pool`: candidate terms (None: :func:`default_pool`)."""

    terms = ()

    def __init__(self, model, base, *, folds: int = 5, pool=None):
        self.model = model
        self.base = base
        self.folds = folds
        self.pool = pool

    def design(self, processed) -> np.ndarray:
        """(N, n, pb) rigid-body base regressor of processed data `processed`."""
        d = processed
        from .design import states
        q, qd, qdd = states(d, self.model.n)
        return self.base.reduce(self.model.regressor(q, qd, qdd))

    def fit(self, processed, *, W: np.ndarray | None = None) -> "SelectedModel":
        """Select and fit on ``processed.tau_m``, every sample: the samples near velocity
        reversals and at rest that ``processed.fit_mask`` leaves out of the fixed-term fit are
        where the candidate terms differ (Dahl, asymmetric Coulomb vs offset, Stribeck).
        `W` (N, n, pb): a precomputed :meth:`design` of `processed` (optional). Returns self."""
        d = processed
        if np.asarray(self.base.E).shape[1] != 10 * self.model.n:
            raise ValueError("SelectedModel needs the rigid-body base parameters alone "
                             "(compute_base_parameters(model, terms=()))")
        if int(self.folds) != self.folds or self.folds < 2:
            raise ValueError(f"folds must be an integer >= 2, got {self.folds!r}")
        W = self.design(d) if W is None else W
        y = channel(d, "tau_m", self.model.n, W.shape[0])
        self.selection_ = select_friction(W, d, y, joint_names=list(self.model.joint_names),
                                          folds=int(self.folds), pool=self.pool)
        s = self.selection_
        self.params_, self.std_ = s.params, s.std
        self.rigid_params_ = s.params[:s.n_base]      # the rigid body's base parameters
        self.names_ = list(self.base.names) + s.names[s.n_base:]
        return self

    def predict(self, processed, W: np.ndarray | None = None, *, filtered: bool = True) -> np.ndarray:
        """Predicted torque (N, n) [N*m] on the states of `processed` (term columns parallel-filtered
        like the fit's when `processed` carries the filter chain and `filtered`)."""
        d = processed
        check_is_fitted(self)
        W = self.design(d) if W is None else W
        return predict_selected(self.selection_, W, d, filtered=filtered)

    def friction_torque(self, processed) -> np.ndarray:
        """(N, n) [N*m] the chosen terms' torque alone, unfiltered columns on ``processed``'s states
        (what the export adds to the rigid body), tau_L from this fit."""
        d = processed
        W = self.design(d)
        return self.predict(d, W, filtered=False) - W @ self.params_[:self.selection_.n_base]


#: the CV machinery shared with the processing-bandwidth selection (identify.estimation.bandwidth):
#: per-fold Gram blocks of contiguous segments, the Jacobi-scaled PSD solve, the significance test
fold_grams = _grams
solve_psd = _solve
significant = _significant
