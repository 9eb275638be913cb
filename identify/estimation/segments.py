"""Several recordings fitted together (the data already held and a new run): their processed
data stacked into one :class:`~identify.estimation.processing.Processed` without any filter,
difference or period average across a seam (:func:`concatenate`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .processing import Processed

#: samples on each side of a seam left out of the stage-1 least squares (fit_mask): the
#: improved model's second time derivatives (two 3-point passes) reach 2 samples across it
SEAM_GUARD = 4


@dataclass(frozen=True)
class SegmentChains:
    """The filter chains of concatenated segments: :meth:`apply` filters each segment's part of a
    column block with its own chain (never across a seam) -- the duck type of
    :meth:`~identify.estimation.processing.FilterChain.apply` for
    :func:`~identify.estimation.processing.filter_columns`."""
    chains: tuple
    n_full: int

    @property
    def rate_hz(self) -> float:
        """Rate of the segments' full grids [Hz] (one rate: :func:`concatenate` checks it)."""
        return float(self.chains[0].rate_hz)

    def _cuts(self, x: np.ndarray, what: str) -> np.ndarray:
        if x.ndim < 1 or x.shape[0] != self.n_full:
            raise ValueError(f"{what}: has {x.shape[0] if x.ndim else 0} samples along axis 0, "
                             f"the concatenated segments' full grids have {self.n_full}")
        return np.cumsum([0] + [c.n_full for c in self.chains])

    def apply(self, x: np.ndarray, what: str = "columns") -> np.ndarray:
        x = np.asarray(x, dtype=float)
        cuts = self._cuts(x, what)
        return np.concatenate([c.apply(x[a:b], f"{what} (segment {k})") for k, (c, a, b)
                               in enumerate(zip(self.chains, cuts[:-1], cuts[1:]))])

    def per_segment(self, f, x: np.ndarray) -> np.ndarray:
        """f over each segment's part of the full-grid array x (axis 0), concatenated: a column
        that depends on the samples before it (the Dahl state) restarts at every seam."""
        x = np.asarray(x, dtype=float)
        cuts = self._cuts(x, "per-segment columns")
        return np.concatenate([f(x[a:b]) for a, b in zip(cuts[:-1], cuts[1:])])


def concatenate(parts: list) -> Processed:
    """Processed data of several recordings of one arm stacked into one, for one least-squares
    fit over all of their rows (the data already held and a new run).

    Each part was processed on its own (:func:`process`), so no filter, difference or period
    average ever crosses a seam; the Coulomb regressor column is filtered per segment
    (:class:`SegmentChains`). Time stamps are made continuous (each part ends one sample period
    before the next; the last part, the new run, keeps its own clock) so that time derivatives taken later over the stack see a
    uniform grid; the SEAM_GUARD samples on each side of a seam are left out of the stage-1 fit
    (``fit_mask``), where such a derivative mixes two recordings. Channels missing in any part
    (tau_j, tau_m, raw, period_std) are None / left out. meta: the last part's (the new run), with
    ``meta["segments"]`` = [{label, samples}] in stack order.

    Raises ValueError when the parts' joints or processed rates differ."""
    parts = list(parts)
    if len(parts) == 1:
        return parts[0]
    first = parts[-1]
    for k, d in enumerate(parts):
        if list(d.joint_names) != list(first.joint_names):
            raise ValueError(f"segment {k} has joints {list(d.joint_names)}, the last "
                             f"{list(first.joint_names)}")
        if not math.isclose(d.rate_hz, first.rate_hz, rel_tol=1e-6):
            raise ValueError(f"segment {k} was processed at {d.rate_hz:g} Hz, the last at "
                             f"{first.rate_hz:g} Hz: record at the same rate or set "
                             f"processing.resample_hz")
    dt = 1.0 / first.rate_hz
    ts, nxt = [], float(first.t[0])            # the new run keeps its own clock
    for d in reversed(parts):                   # earlier parts end one sample before the next
        rel = np.asarray(d.t, float) - float(d.t[0])
        tk = rel + float(first.t[0]) if d is first else rel + (nxt - dt - rel[-1])
        ts.insert(0, tk)
        nxt = float(tk[0])
    t = np.concatenate(ts)

    def cat(name):
        xs = [getattr(d, name) for d in parts]
        return None if any(x is None for x in xs) else np.concatenate(xs)

    def cat_dict(name):
        ds = [getattr(d, name) or {} for d in parts]
        return {k: np.concatenate([x[k] for x in ds]) for k in ds[-1] if all(k in x for x in ds)}

    N = [d.n_samples for d in parts]
    n = len(first.joint_names)
    mask = np.concatenate([np.ones((m, n), bool) if d.fit_mask is None
                           else np.asarray(d.fit_mask, bool) for d, m in zip(parts, N)])
    for cut in np.cumsum(N)[:-1]:
        mask[max(0, cut - SEAM_GUARD):cut + SEAM_GUARD] = False
    chains = [d.filter_chain for d in parts]
    chain = qd_full = None
    if all(c is not None for c in chains) and all(d.qd_full is not None for d in parts):
        chain = SegmentChains(tuple(chains), int(sum(c.n_full for c in chains)))
        qd_full = np.concatenate([d.qd_full for d in parts])
    floors = {}
    for k in (first.noise_floor or {}):            # RMS over the stacked samples
        if all(k in (d.noise_floor or {}) for d in parts):
            floors[k] = np.sqrt(sum(m * np.asarray(d.noise_floor[k], float) ** 2
                                    for d, m in zip(parts, N)) / sum(N))
    std = None
    if all(d.period_std is not None for d in parts):
        keys = set.intersection(*(set(d.period_std) for d in parts))
        std = {k: np.concatenate([d.period_std[k] for d in parts]) for k in keys}
    meta = dict(first.meta)
    meta["segments"] = [{"label": str(d.meta.get("label", f"segment {k}")), "samples": m}
                        for k, (d, m) in enumerate(zip(parts, N))]
    return Processed(t=t, q=cat("q"), qd=cat("qd"), qdd=cat("qdd"), tau_j=cat("tau_j"),
                     tau_m=cat("tau_m"), rate_hz=first.rate_hz,
                     joint_names=list(first.joint_names), meta=meta, period_std=std,
                     filter_chain=chain, qd_full=qd_full, raw=cat_dict("raw"),
                     noise_floor=floors, fit_mask=mask, delay_s=first.delay_s)
