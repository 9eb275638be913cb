"""Estimating a constant delay of the measured torques relative to the positions.

A drive that reports its torque sensor or current a few cycles later than its encoder (bus
latency, a filter inside the drive) shifts tau against Y(q, qd, qdd): on a twin with exact
states, a one-sample (1 ms) shift alone left the base parameters 0.8 % off. The delay is
estimated from the data by a 1-D search on the least-squares residual:

    r(s) = min_p || y(t + s) - W p ||^2,   s on a grid of whole samples in [-max, max],

with W the regressor of the processed states (fixed: only the torque moves) and y the filtered
torque advanced by s samples. r is evaluated with one QR of W (r = ||y_s||^2 - ||Q^T y_s||^2) and
the minimum is refined to a fraction of a sample by a parabola through the best sample and its
neighbours (the filtered torque is smooth, so r is smooth in s). The estimate is the delay of the
torque channel relative to the position source the processing used (the encoder; the commanded
position with ``velocity: command``); a delay common to every measured channel (the twin's
``io_delay_s`` moves q and the torques alike) is zero relative to the encoder.

    est = estimate_delay(d, W)              # d: Processed, W: its (N, n, p) design
    d2 = process(rec, settings, delay_s=est.delay_s)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from . import signal as sig


@dataclass
class DelayEstimate:
    """Result of :func:`estimate_delay`.

    Attributes:
        delay_s: estimated delay of the torque channel behind the positions [s] (advance the
            torques by it to compensate); channel: the torque channel used ("tau_j" / "tau_m");
        shifts_s: (K,) the searched shifts [s]; residual_rms: (K,) fit residual RMS at each
            [N*m]; at_edge: the minimum lies at the end of the searched range (the true delay may
            be larger: widen ``max_delay_s``).
    """

    delay_s: float
    channel: str
    shifts_s: np.ndarray
    residual_rms: np.ndarray
    at_edge: bool

    def edge_message(self, label: str) -> str | None:
        """The warning for a minimum at the edge of the searched range (None inside it): the
        channel named, the range, and that the value is not an estimate."""
        if not self.at_edge:
            return None
        lo, hi = float(self.shifts_s[0]) * 1e3, float(self.shifts_s[-1]) * 1e3
        return (f"{label}: processing.delay: auto could not align the torque channel "
                f"{self.channel} with the positions: its residual is lowest at the edge of the "
                f"searched range [{lo:+.1f}, {hi:+.1f}] ms ({self.delay_s * 1e3:+.1f} ms), so "
                f"the delay is not estimated and not compensated; set processing.delay to a "
                f"number of seconds if it is known (a misfit of the model, not a delay, also "
                f"gives this)")

    def to_dict(self) -> dict:
        return {"delay_s": float(self.delay_s), "channel": self.channel,
                "at_edge_of_search": bool(self.at_edge),
                "searched_s": [float(self.shifts_s[0]), float(self.shifts_s[-1])],
                "residual_rms_at_estimate_Nm": float(np.min(self.residual_rms)),
                "residual_rms_at_zero_Nm": float(self.residual_rms[np.argmin(
                    np.abs(self.shifts_s))])}


def estimate_delay(processed, W: np.ndarray, channel: str | None = None,
                   max_delay_s: float = 0.025) -> DelayEstimate:
    """Delay of the torque `channel` of processed data `processed` behind its positions.

    Args:
        d: :class:`~identify.estimation.processing.Processed` (uniform ``rate_hz``; ``fit_mask``
            is honoured).
        W: (N, n, p) design of `processed` (stage-1 / simplified columns of the processed states).
        channel: "tau_j" or "tau_m"; None -> tau_j if present, else tau_m.
        max_delay_s: searched range [s], both signs (at least 2 samples).
    Returns:
        :class:`DelayEstimate`.
    Raises:
        ValueError: no such channel, W and the data disagree, too few samples for the range.
    """
    d = processed
    if channel is None:
        channel = "tau_j" if getattr(d, "tau_j", None) is not None else "tau_m"
    y = getattr(d, channel, None)
    if y is None:
        raise ValueError(f"estimate_delay: the processed data have no {channel}")
    y = np.asarray(y, float)
    W = np.asarray(W, float)
    N, n = y.shape
    if W.shape[:2] != (N, n):
        raise ValueError(f"estimate_delay: W has shape {W.shape}, the data ({N}, {n})")
    rate = float(d.rate_hz)
    m = max(2, int(math.ceil(max_delay_s * rate)))
    if N <= 4 * m + W.shape[2]:
        raise ValueError(f"estimate_delay: {N} samples are too few for a search of +-{m} samples")
    keep = np.ones((N, n), bool)
    mask = getattr(d, "fit_mask", None)
    if mask is not None:
        keep &= np.asarray(mask, bool)
    keep[:m] = keep[N - m:] = False            # advanced samples beyond the ends are not data
    A = (W * keep[..., None]).reshape(N * n, -1)
    Q, _ = np.linalg.qr(A, mode="reduced")
    shifts = np.arange(-m, m + 1)
    res = np.empty(shifts.size)
    for k, s in enumerate(shifts):              # 2m + 1 whole-sample shifts (indexing only)
        b = (sig.advance(y, float(s)) * keep).reshape(-1)
        res[k] = float(b @ b - np.sum((Q.T @ b) ** 2))
    res = np.maximum(res, 0.0)
    i = int(np.argmin(res))
    frac = 0.0
    if 0 < i < shifts.size - 1:
        r0, r1, r2 = res[i - 1], res[i], res[i + 1]
        den = r0 - 2.0 * r1 + r2
        if den > 0:
            frac = float(np.clip(0.5 * (r0 - r2) / den, -0.5, 0.5))
    n_fit = max(int(keep.sum()), 1)
    return DelayEstimate(delay_s=(shifts[i] + frac) / rate, channel=channel,
                         shifts_s=shifts / rate, residual_rms=np.sqrt(res / n_fit),
                         at_edge=i in (0, shifts.size - 1))
