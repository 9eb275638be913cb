"""Blocked K-fold cross-validation of linear least squares from per-fold Gram blocks: the
contiguous segments' X^T X, X^T y, y^T y computed once, the training normal equations of fold
k as the totals less fold k's block and the guard bands beside it, and the folds' validation
MSE of many candidate column sets in one stacked solve. Shared by the friction-term selection
(:mod:`identify.estimation.selection`) and the processing bandwidth
(:mod:`identify.estimation.bandwidth`)."""
from __future__ import annotations

import numpy as np


def _rows(Wb, C, y, mask):
    """X (n, N, P) = [Wb[:, j], C[:, j]] per joint and y (n, N), the rows outside `mask` zeroed,
    in one joint-major contiguous copy (each segment's products are then one BLAS call)."""
    N, n, pb = Wb.shape
    mask = np.asarray(mask, bool)
    X = np.empty((n, N, pb + C.shape[2]))
    X[:, :, :pb] = Wb.transpose(1, 0, 2)
    X[:, :, pb:] = C.transpose(1, 0, 2)
    X *= mask.T[:, :, None]
    return X, np.ascontiguousarray((np.where(mask, y, 0.0)).T), mask


def _segment_grams(X, ym, mask, segments):
    """Per segment k (a list of slices) and joint j: X^T X (K, n, P, P), X^T y (K, n, P), y^T y
    and the sample count (K, n) over the segment's rows (K x n matrix products, not per sample)."""
    n, _, P = X.shape
    K = len(segments)
    G, b = np.zeros((K, n, P, P)), np.zeros((K, n, P))
    yy, cnt = np.zeros((K, n)), np.zeros((K, n))
    for k, slices in enumerate(segments):
        for sl in slices:
            for j in range(n):
                Xk, yk = X[j, sl], ym[j, sl]
                G[k, j] += Xk.T @ Xk
                b[k, j] += Xk.T @ yk
                yy[k, j] += yk @ yk
            cnt[k] += mask[sl].sum(axis=0)
    return G, b, yy, cnt


def _fold_edges(N: int, folds: int) -> np.ndarray:
    return np.linspace(0, N, folds + 1).astype(int)


def _grams(Wb, C, y, mask, folds: int):
    """Per fold segment k and joint j: X^T X (K, n, P, P), X^T y (K, n, P), y^T y and the
    sample count (K, n) of X = [Wb[:, j], C[:, j]] over the segment's samples in `mask`."""
    X, ym, mask = _rows(Wb, C, y, mask)
    e = _fold_edges(Wb.shape[0], folds)
    return _segment_grams(X, ym, mask, [[slice(e[k], e[k + 1])] for k in range(folds)])


def _guarded_grams(Wb, C, y, mask, folds: int, guard: int):
    """:func:`_grams` and, per fold k, the Gram blocks (G, b) of its guard bands: the `guard`
    samples on each side of fold k outside it, which fold k's training leaves out (the
    zero-phase filter spreads each sample over ~1 / cut-off, so training rows next to the
    validation fold share its filtered noise)."""
    X, ym, mask = _rows(Wb, C, y, mask)
    N = Wb.shape[0]
    e = _fold_edges(N, folds)
    G, b, yy, cnt = _segment_grams(X, ym, mask, [[slice(e[k], e[k + 1])] for k in range(folds)])
    bands = [[slice(max(e[k] - guard, 0), e[k]), slice(e[k + 1], min(e[k + 1] + guard, N))]
             for k in range(folds)]
    Gg, bg, _, _ = _segment_grams(X, ym, mask, bands)
    return G, b, yy, cnt, Gg, bg


def guard_samples(processed) -> int:
    """Guard band [samples] at each CV fold edge: one period of the processing's low-pass
    cut-off at the processed rate (ceil(rate / cutoff), as the reversal window of
    :mod:`identify.estimation.processing`), 0 without a filter chain or low-pass."""
    chain = getattr(processed, "filter_chain", None)
    fc = getattr(chain, "butter_cutoff_hz", None)
    if chain is None or fc is None:
        return 0
    return int(np.ceil(float(processed.rate_hz) / float(fc) - 1e-9))


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

    def __init__(self, G, b, yy, cnt, pb: int, w: np.ndarray, guard=None):
        self.G, self.b, self.yy, self.cnt, self.pb, self.w = G, b, yy, cnt, pb, w
        self.Gt, self.bt = G.sum(axis=0), b.sum(axis=0)
        # training, per fold: every other fold, less the guard bands next to fold k (Gg, bg)
        self.Gg, self.bg = (np.zeros_like(G), np.zeros_like(b)) if guard is None else guard
        self.Gtr = self.Gt[None] - G - self.Gg
        self.btr = self.bt[None] - b - self.bg
        self.K = G.shape[0]
        # an MSE below 1e-12 of the torque's mean square is numerically zero (noise-free data
        # fitted by its own law): sets that reach it compare equal, so round-off -- which
        # differs between machines -- never decides a term, and parsimony keeps the smallest
        self.floor = MSE_FLOOR * yy.sum(axis=0) / np.maximum(cnt.sum(axis=0), 1.0)     # (n,)

    def _train(self, k):
        return (self.Gt, self.bt) if k is None else (self.Gtr[k], self.btr[k])

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


#: public names (the selection's and the bandwidth's imports)
fold_grams = _grams
guarded_fold_grams = _guarded_grams
solve_psd = _solve
FoldCV = _CV
