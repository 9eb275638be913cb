"""The processing bandwidth chosen by the data (``processing.butter_cutoff_hz: auto``).

The zero-phase low-pass of :mod:`identify.estimation.processing` acts alike on the positions (from
which qd and qdd are differentiated) and on the torques. Too low a cutoff removes real torque
content (drive-compliance oscillation, fast accelerations) that the model could predict from the
states; too high a cutoff lets noise into the differentiated states. Which is right depends on
the arm, the sensors and the rate, so the cutoff is chosen by the data:

* candidates: a geometric grid from ``LOW_FACTOR`` x the trajectory's bandwidth (the frequency
  below which ``BAND_FRACTION`` of the power of the mean-removed positions lies,
  :func:`trajectory_band_hz`) to ``HIGH_FRACTION`` x the Nyquist frequency of the processed
  signal, neighbours a factor ``STEP`` apart (:func:`candidate_cutoffs`);
* score: blocked K-fold cross-validation on the identification (excitation) recording only --
  the fold layout, Gram blocks and solver of the friction selection
  (:mod:`identify.estimation.selection`): for every candidate the recording is processed with it,
  the fixed-term design fitted (weighted least squares on its own fit mask) on K-1 contiguous
  segments and its prediction compared with the RAW, unfiltered torque on the held-out segment
  -- the figure the validation reports. The raw noise is the same for every candidate, so the
  score differs only by what the filter removed from the signal or let into the states;
* choice: the candidate with the lowest score (mean over the folds and joints of log MSE); the
  one-SE rule is applied toward the lower cutoffs (the smoothest candidate whose fold-paired
  log MSE ratio to the best is within one standard error is taken: ``rule="one_se"``) only
  when asked -- by default the best (``rule="best"``), since a cutoff has no parameter count to
  be parsimonious about.

One cutoff applies to every joint: each joint's regressor row depends on every joint's states,
so the states must be filtered alike. The per-joint scores and the cutoff each joint alone would
prefer are reported (metrics.json ``cutoff_selection``)."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from .selection import CandidateScore, fold_grams, significant, solve_psd

#: fraction of the positions' power below the trajectory's bandwidth
BAND_FRACTION = 0.999
#: the lowest candidate [x the trajectory's bandwidth] and the highest [x Nyquist]
LOW_FACTOR = 5.0
HIGH_FRACTION = 0.9
#: ratio of neighbouring candidates
STEP = 1.6


def trajectory_band_hz(q: np.ndarray, rate_hz: float, fraction: float = BAND_FRACTION) -> float:
    """The trajectory's bandwidth [Hz]: the lowest frequency below which `fraction` of the
    power of the mean-removed positions lies, the largest over the joints.

    Args:
        q: (N, n) positions [rad] at `rate_hz` [Hz], N >= 8.
    Returns:
        bandwidth [Hz] (at least one frequency bin, rate / N)."""
    x = np.asarray(q, float)
    x = x.reshape(x.shape[0], -1) - x.mean(axis=0).reshape(1, -1)
    p = np.abs(np.fft.rfft(x, axis=0)) ** 2
    p[0] = 0.0
    c = np.cumsum(p, axis=0)
    tot = np.maximum(c[-1], 1e-300)
    k = np.argmax(c >= fraction * tot[None], axis=0)           # first bin past the fraction
    f = np.fft.rfftfreq(x.shape[0], 1.0 / rate_hz)
    return float(max(f[int(k.max())], rate_hz / x.shape[0]))


def candidate_cutoffs(band_hz: float, nyquist_hz: float, low: float = LOW_FACTOR,
                      high: float = HIGH_FRACTION, step: float = STEP) -> np.ndarray:
    """Geometric grid of cutoffs [Hz] from `low` x `band_hz` to `high` x `nyquist_hz`, both
    ends included, neighbours about `step` apart; (m,), m >= 1, increasing."""
    hi = high * nyquist_hz
    lo = min(low * band_hz, hi)
    m = max(1, int(math.ceil(math.log(hi / lo) / math.log(step) - 1e-9)) + 1) if hi > lo else 1
    return np.geomspace(lo, hi, m) if m > 1 else np.array([hi])


@dataclass
class CutoffCandidate:
    """One candidate cutoff: the overall score (a :class:`CandidateScore` whose fold MSE is the
    geometric mean over the joints) and one score per joint."""
    cutoff_hz: float
    overall: CandidateScore
    joints: list

    def to_dict(self, best: "CutoffCandidate") -> dict:
        m, se = self.overall.log_ratio(best.overall)
        return {"cutoff_hz": self.cutoff_hz, "cv_rms_Nm": self.overall.cv_rms,
                "cv_rms_per_joint_Nm": [j.cv_rms for j in self.joints],
                "log_mse_ratio_to_best": m, "se_of_log_ratio": se}


@dataclass
class CutoffSelection:
    """Result of :func:`select_cutoff`: the candidates with their scores, the chosen cutoff
    [Hz], the best by score, each joint's own best, and why."""
    candidates: list
    chosen_hz: float
    best_hz: float
    joint_best_hz: list
    joint_names: list
    signal: str
    folds: int
    band_hz: float
    rule: str
    why: str

    def to_dict(self) -> dict:
        best = next(c for c in self.candidates if c.cutoff_hz == self.best_hz)
        return {"method": f"blocked {self.folds}-fold cross-validation on the excitation "
                          f"recording only (contiguous segments, never the validation data): "
                          f"per candidate cutoff the recording processed with it, the fixed-"
                          f"term model fitted (WLS) on the other segments and its prediction "
                          f"scored against the RAW {self.signal} of the held-out segment; "
                          f"score: mean over folds and joints of log MSE",
                "signal": self.signal, "trajectory_band_hz": self.band_hz, "rule": self.rule,
                "chosen_hz": self.chosen_hz, "best_cv_hz": self.best_hz, "why": self.why,
                "joints": [{"joint": nm, "best_cv_hz": b, "chosen_hz": self.chosen_hz}
                           for nm, b in zip(self.joint_names, self.joint_best_hz)],
                "candidates": [c.to_dict(best) for c in self.candidates]}


def _fold_mse(W: np.ndarray, y_fit: np.ndarray, fit_mask: np.ndarray, y_raw: np.ndarray,
              val_mask: np.ndarray, folds: int) -> np.ndarray:
    """(K, n) held-out MSE [N^2*m^2] of the WLS fit of `y_fit` (N, n) on the design W (N, n, P)
    over `fit_mask` of the other K-1 contiguous segments, against `y_raw` over `val_mask` of the
    held-out one. Weights 1/sigma_j^2 from the all-sample least-squares residual of each joint."""
    N, n, P = W.shape
    C = np.zeros((N, n, 0))
    G, b, yy, cnt = fold_grams(W, C, y_fit, fit_mask, folds)        # training side
    Gv, bv, yyv, cntv = fold_grams(W, C, y_raw, val_mask, folds)    # held-out side, raw torque
    Gt, bt, yyt, ct = G.sum(0), b.sum(0), yy.sum(0), cnt.sum(0)
    p0 = solve_psd(Gt.sum(0), bt.sum(0))
    sse = yyt - 2 * bt @ p0 + np.einsum("i,jik,k->j", p0, Gt, p0)
    w = 1.0 / np.maximum(sse / np.maximum(ct, 1.0), 1e-30)         # (n,)
    A = np.einsum("j,jab->ab", w, Gt)[None] - np.einsum("j,kjab->kab", w, G)
    r = (w @ bt)[None] - np.einsum("j,kja->ka", w, b)
    p = np.stack([solve_psd(A[k], r[k]) for k in range(folds)])         # (K, P)
    e = yyv - 2 * np.einsum("kja,ka->kj", bv, p) + np.einsum("ka,kjab,kb->kj", p, Gv, p)
    return np.maximum(e, 0.0) / np.maximum(cntv, 1.0)


def _validation_mask(mask: np.ndarray, folds: int, least: int = 10) -> np.ndarray:
    """(N, n) samples every candidate is scored on: outside velocity reversals by the fit mask
    of the highest candidate (the narrowest window around a reversal, so that a low cutoff's
    smeared stick-slip torque near a reversal counts against it); a joint with fewer than
    `least` such samples in a fold is scored on all its samples."""
    mask = np.asarray(mask, bool)
    edges = np.linspace(0, mask.shape[0], folds + 1).astype(int)
    cnt = np.add.reduceat(mask, edges[:-1], axis=0)             # (K, n)
    return mask | (cnt < least).any(axis=0)[None]


def _score(fold_mse: np.ndarray, label: tuple) -> CandidateScore:
    """CandidateScore of per-fold MSE (K,) (cv_rms: sqrt of the folds' geometric mean)."""
    m = np.maximum(fold_mse, 1e-300)
    return CandidateScore(label, 0, float(np.sqrt(np.exp(np.mean(np.log(m))))), fold_mse)


def select_cutoff(recording, settings, design, *, signal: str = "tau_j", folds: int = 5,
                  candidates=None, rule: str = "best", joint_names=None) -> CutoffSelection:
    """Choose ``butter_cutoff_hz`` for `recording` by blocked K-fold CV (module docstring).

    Args:
        recording: the identification (excitation) recording; never the validation one.
        settings: :class:`~identify.estimation.processing.ProcessingSettings` (its cutoff is
            replaced by each candidate; every other setting is kept).
        design: callable Processed -> (N, n, P) design of the fitted model on those samples.
        signal: the torque channel scored, "tau_j" or "tau_m" (must be in the recording).
        folds: K contiguous segments (>= 2); candidates: cutoffs [Hz] (None: the grid of
            :func:`candidate_cutoffs`); rule: "best" or "one_se" (see the module docstring).
    Returns:
        :class:`CutoffSelection`.
    Raises:
        ValueError: no candidate below Nyquist, too few samples, a missing signal."""
    from identify.common.blas import single_thread_blas
    with single_thread_blas():          # many small products: threads only contend
        return _select(recording, settings, design, signal, folds, candidates, rule, joint_names)


def _select(recording, settings, design, signal, folds, candidates, rule, joint_names):
    from .processing import process
    if getattr(recording, signal, None) is None:
        raise ValueError(f"butter_cutoff_hz: auto scores the {signal} channel; the excitation "
                         f"recording has none")
    if rule not in ("best", "one_se"):
        raise ValueError(f"rule must be 'best' or 'one_se', got {rule!r}")
    rate = float(settings.resample_hz or recording.rate_hz)
    nyq = 0.5 * rate / settings.decimate
    band = trajectory_band_hz(recording.q if recording.q is not None else recording.q_cmd,
                              float(recording.rate_hz))
    cands = candidate_cutoffs(band, nyq) if candidates is None else \
        np.array(sorted(float(c) for c in candidates))
    if cands.size == 0 or not cands[-1] < nyq:
        raise ValueError(f"butter_cutoff_hz: auto: candidates {cands.tolist()} Hz must lie below "
                         f"the Nyquist frequency {nyq:g} Hz")
    # one trim for all (the lowest cutoff's), so every candidate has the same samples
    trim = settings.trim_s if settings.trim_s is not None else 2.0 / float(cands[0])
    runs = []
    for fc in cands:
        d = process(recording, dataclasses.replace(settings, butter_cutoff_hz=float(fc),
                                                   trim_s=trim))
        W = design(d)
        fit = np.ones(W.shape[:2], bool) if d.fit_mask is None else np.asarray(d.fit_mask, bool)
        runs.append((getattr(d, signal), fit, d.raw[signal], W))
    if runs[0][0].shape[0] < 10 * folds:
        raise ValueError(f"butter_cutoff_hz: auto: {runs[0][0].shape[0]} samples are too few "
                         f"for {folds} folds")
    val = _validation_mask(runs[-1][1], folds)
    names = list(joint_names or recording.joint_names)
    out = []
    for fc, (y, fit, raw, W) in zip(cands, runs):
        mse = _fold_mse(W, y, fit, raw, val, folds)                   # (K, n)
        geo = np.exp(np.mean(np.log(np.maximum(mse, 1e-300)), axis=1))
        out.append(CutoffCandidate(float(fc), _score(geo, (f"{fc:.4g} Hz",)),
                                   [_score(mse[:, j], (nm,)) for j, nm in enumerate(names)]))
    return _choose(out, names, signal, folds, band, rule)


def _choose(out: list, names: list, signal: str, folds: int, band: float,
            rule: str) -> CutoffSelection:
    """The best candidate by score, the chosen one by `rule`, each joint's best, and why."""
    best = min(out, key=lambda c: c.overall.mse)
    chosen = best
    if rule == "one_se":
        chosen = next(c for c in out if not significant(best.overall, c.overall, 1.0, 0.0))
    jb = [min(out, key=lambda c, j=j: c.joints[j].mse).cutoff_hz for j in range(len(names))]
    why = (f"{'lowest CV score' if chosen is best else 'lowest cutoff within one SE of the best'}"
           f" of {len(out)} candidates {out[0].cutoff_hz:.3g}-{out[-1].cutoff_hz:.3g} Hz (CV RMS "
           f"{chosen.overall.cv_rms:.4g} N*m against the raw {signal}; the best "
           f"{best.cutoff_hz:.3g} Hz, {best.overall.cv_rms:.4g} N*m); one cutoff for every joint "
           f"(each joint's regressor row depends on every joint's states)")
    return CutoffSelection(out, chosen.cutoff_hz, best.cutoff_hz, jb, names, signal, folds, band,
                           rule, why)
