"""Signal-processing primitives for identification data (pure functions on numpy arrays).

Every function works along axis 0 (samples) of an array of any trailing shape, e.g. (N,) or
(N, n), and is vectorized over samples: the only Python loops run over filter passes or
columns, never over samples. Times are in seconds, rates in Hz, and the functions are unit-agnostic
otherwise (they filter whatever SI quantity they are given).

Contents:
    smooth5          5-point cubic smoothing (exact for cubics), applied K times
    differentiate    central differences (4th/2nd order uniform, 2nd order irregular time stamps)
    butter_filtfilt  zero-phase Butterworth low-pass (forward-backward, second-order sections)
    periodic_filtfilt / periodic_differentiate  the same for one period of a periodic signal
    average_periods  mean over P back-to-back periods (+ per-sample standard deviation)
    trim             drop a time span from both ends
    resample_uniform irregular time stamps -> uniform grid (linear or cubic-spline)
    decimate         keep every k-th sample (after the caller's low-pass)
    check_finite     NaN/inf -> ValueError naming the channel, sample and column
    check_uniform    verify that time stamps are uniform at a given rate
"""
from __future__ import annotations

import numpy as np
from scipy import interpolate
from scipy import signal as _sps

# 5-point least-squares cubic smoothing ("five-point cubic smoothing"). Interior weights and the
# two special formulas at each end (they are the cubic fitted to the first/last 5 points,
# evaluated at those points), so a cubic polynomial passes through unchanged everywhere.
_W_MID = np.array([-3.0, 12.0, 17.0, 12.0, -3.0]) / 35.0
_W_0 = np.array([69.0, 4.0, -6.0, 4.0, -1.0]) / 70.0
_W_1 = np.array([2.0, 27.0, 12.0, -8.0, 2.0]) / 35.0


def check_finite(x: np.ndarray, channel: str, columns=None) -> None:
    """Raise ValueError naming `channel`, the first bad sample index and column if `x` holds
    NaN or inf. `columns` (optional) are names for axis 1 (e.g. joint names)."""
    x = np.asarray(x)
    bad = ~np.isfinite(x)
    if not bad.any():
        return
    idx = np.unravel_index(int(np.argmax(bad)), x.shape)
    where = f"sample {idx[0]}"
    if len(idx) > 1:
        col = idx[1]
        name = columns[col] if columns is not None and col < len(columns) else f"column {col}"
        where += f", {name}"
        if len(idx) > 2:
            where += f", index {tuple(int(i) for i in idx[2:])}"
    n_bad = int(bad.sum())
    raise ValueError(f"{channel}: non-finite value {float(x[idx])} at {where} "
                     f"({n_bad} non-finite value{'s' if n_bad > 1 else ''} in total)")


def smooth5(x: np.ndarray, passes: int = 1) -> np.ndarray:
    """5-point cubic smoothing along axis 0, applied `passes` times (the paper uses 20).

    Interior: y_i = (-3 x_{i-2} + 12 x_{i-1} + 17 x_i + 12 x_{i+1} - 3 x_{i+2}) / 35; the first and
    last two samples use the end-point formulas of the same local cubic fit. The filter is
    symmetric, hence zero-phase, and reproduces any cubic polynomial exactly.

    Args:
        x: (N, ...) samples, N >= 5.
        passes: number of repetitions K >= 0 (0 returns a copy).
    Returns:
        (N, ...) smoothed copy.
    """
    x = np.array(x, dtype=float, copy=True)
    passes = int(passes)
    if passes < 0:
        raise ValueError(f"smooth5: passes must be >= 0, got {passes}")
    if passes == 0:
        return x
    if x.shape[0] < 5:
        raise ValueError(f"smooth5 needs at least 5 samples, got {x.shape[0]}")
    for _ in range(passes):
        y = np.empty_like(x)
        y[2:-2] = (_W_MID[0] * x[:-4] + _W_MID[1] * x[1:-3] + _W_MID[2] * x[2:-2]
                   + _W_MID[3] * x[3:-1] + _W_MID[4] * x[4:])
        head = x[:5]
        tail = x[-5:][::-1]
        y[0] = np.tensordot(_W_0, head, axes=(0, 0))
        y[1] = np.tensordot(_W_1, head, axes=(0, 0))
        y[-1] = np.tensordot(_W_0, tail, axes=(0, 0))
        y[-2] = np.tensordot(_W_1, tail, axes=(0, 0))
        x = y
    return x


def smooth5_response(freq_hz, rate_hz: float, passes: int = 1) -> np.ndarray:
    """Amplitude response of the interior :func:`smooth5` filter applied `passes` times at
    frequencies `freq_hz` for sampling rate `rate_hz` (dimensionless gain)."""
    w = 2 * np.pi * np.asarray(freq_hz, dtype=float) / rate_hz
    return ((17 + 24 * np.cos(w) - 6 * np.cos(2 * w)) / 35.0) ** passes


def differentiate(x: np.ndarray, t=None, dt: float | None = None, order: int = 4) -> np.ndarray:
    """Time derivative along axis 0 by central differences.

    Uniform samples (`dt`): order 4 (default) uses the 5-point stencil
    (x[i-2] - 8 x[i-1] + 8 x[i+1] - x[i+2]) / (12 dt) -- exact for quartics; its gain at 10 Hz
    sampled at 100 Hz is 0.995 where the 3-point stencil's is 0.935 -- and order 2 the 3-point
    stencil (x[i+1] - x[i-1]) / (2 dt). The two samples at each end use second-order (one-sided at
    the very ends) differences. Irregular time stamps (`t`): second order (numpy.gradient).

    Args:
        x: (N, ...) samples, N >= 3 (>= 5 for order 4).
        t: (N,) time stamps [s] (may be irregular), or None to use `dt`.
        dt: uniform sample period [s] when `t` is None.
        order: 2 or 4 (uniform samples only).
    Returns:
        (N, ...) derivative [unit of x per s].
    """
    x = np.asarray(x, dtype=float)
    if x.shape[0] < 3:
        raise ValueError(f"differentiate needs at least 3 samples, got {x.shape[0]}")
    if order not in (2, 4):
        raise ValueError(f"differentiate: order must be 2 or 4, got {order!r}")
    if t is None:
        if dt is None or not dt > 0:
            raise ValueError(f"differentiate: give time stamps t or a positive dt (got dt={dt!r})")
        d = np.gradient(x, float(dt), axis=0, edge_order=2)
        if order == 4 and x.shape[0] >= 5:
            d[2:-2] = (x[:-4] - 8.0 * x[1:-3] + 8.0 * x[3:-1] - x[4:]) / (12.0 * dt)
        return d
    t = np.asarray(t, dtype=float)
    if t.shape != (x.shape[0],):
        raise ValueError(f"differentiate: t has shape {t.shape}, expected ({x.shape[0]},)")
    return np.gradient(x, t, axis=0, edge_order=2)


def _butter_sos(order: int, cutoff_hz: float, rate_hz: float) -> np.ndarray:
    order = int(order)
    if order < 1:
        raise ValueError(f"Butterworth order must be >= 1, got {order}")
    nyq = 0.5 * rate_hz
    if not 0 < cutoff_hz < nyq:
        raise ValueError(f"Butterworth cutoff {cutoff_hz!r} Hz must lie in (0, {nyq:g}) Hz "
                         f"(the Nyquist frequency of a {rate_hz:g} Hz signal)")
    return _sps.butter(order, cutoff_hz, btype="low", fs=rate_hz, output="sos")


def butter_filtfilt(x: np.ndarray, rate_hz: float, cutoff_hz: float, order: int = 4) -> np.ndarray:
    """Zero-phase Butterworth low-pass along axis 0 (forward-backward, so the effective amplitude
    response is |H|^2 and the phase is zero; -6 dB at `cutoff_hz`).

    The ends are padded by odd reflection (scipy's default) and initial conditions are steady
    state; a short transient still remains near the ends, see :func:`trim`.

    Args:
        x: (N, ...) uniformly sampled signal.
        rate_hz: sample rate [Hz]; cutoff_hz: cutoff [Hz] < rate_hz / 2; order: filter order.
    Returns:
        (N, ...) filtered copy.
    """
    x = np.asarray(x, dtype=float)
    sos = _butter_sos(order, cutoff_hz, rate_hz)
    padlen = min(3 * (2 * len(sos) + 1), x.shape[0] - 1)
    if x.shape[0] < 2:
        raise ValueError("butter_filtfilt needs at least 2 samples")
    return _sps.sosfiltfilt(sos, x, axis=0, padlen=padlen)


def periodic_filtfilt(x: np.ndarray, rate_hz: float, cutoff_hz: float,
                      order: int = 4) -> np.ndarray:
    """:func:`butter_filtfilt` for exactly one period of a periodic signal (x[N] == x[0] is NOT
    repeated): the period is filtered as the middle of three copies, so there is no edge
    transient and nothing needs trimming."""
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    ext = np.concatenate([x, x, x], axis=0)
    sos = _butter_sos(order, cutoff_hz, rate_hz)
    return _sps.sosfiltfilt(sos, ext, axis=0, padtype=None)[n:2 * n]


def periodic_differentiate(x: np.ndarray, dt: float, order: int = 4) -> np.ndarray:
    """Central difference (order 4: 5-point, order 2: 3-point stencil, see :func:`differentiate`)
    of one period of a periodic, uniformly sampled signal (wraps around at the ends).
    x: (N, ...); dt [s]."""
    x = np.asarray(x, dtype=float)
    if order == 2:
        return (np.roll(x, -1, axis=0) - np.roll(x, 1, axis=0)) / (2.0 * dt)
    if order != 4:
        raise ValueError(f"periodic_differentiate: order must be 2 or 4, got {order!r}")
    return (np.roll(x, 2, axis=0) - 8.0 * np.roll(x, 1, axis=0) + 8.0 * np.roll(x, -1, axis=0)
            - np.roll(x, -2, axis=0)) / (12.0 * dt)


def average_periods(x: np.ndarray, n_periods: int, samples_per_period: int | None = None,
                    channel: str = "signal") -> tuple[np.ndarray, np.ndarray]:
    """Average `n_periods` back-to-back periods of `samples_per_period` samples each.

    Args:
        x: (N, ...) with N >= n_periods * samples_per_period; trailing extra samples (at most one
           when `samples_per_period` is None, e.g. the closing sample t = P*T) are ignored.
        n_periods: P >= 1.
        samples_per_period: S; None -> N // P.
    Returns:
        mean (S, ...) and the per-sample standard deviation across periods (S, ...) (ddof=1;
        zeros when P == 1).
    """
    x = np.asarray(x, dtype=float)
    P = int(n_periods)
    if P < 1:
        raise ValueError(f"average_periods: n_periods must be >= 1, got {n_periods!r}")
    N = x.shape[0]
    if samples_per_period is None:
        S = N // P
        if N - P * S > 1:
            raise ValueError(f"{channel}: {N} samples do not split into {P} equal periods "
                             f"({N - P * S} left over); give the period length explicitly")
    else:
        S = int(samples_per_period)
        if P * S > N:
            raise ValueError(f"{channel}: {P} periods of {S} samples need {P * S} samples, "
                             f"the recording has {N}")
    if S < 3:
        raise ValueError(f"{channel}: a period of {S} samples is too short to average")
    blocks = x[:P * S].reshape((P, S) + x.shape[1:])
    mean = blocks.mean(axis=0)
    std = blocks.std(axis=0, ddof=1) if P > 1 else np.zeros_like(mean)
    return mean, std


def trim(x: np.ndarray, n_start: int, n_end: int | None = None) -> np.ndarray:
    """Drop `n_start` samples at the beginning and `n_end` (default: `n_start`) at the end."""
    n_end = n_start if n_end is None else n_end
    if n_start < 0 or n_end < 0:
        raise ValueError(f"trim: sample counts must be >= 0, got {n_start}, {n_end}")
    N = np.shape(x)[0]
    if n_start + n_end >= N:
        raise ValueError(f"trim: removing {n_start}+{n_end} samples leaves nothing of {N}")
    return np.asarray(x)[n_start:N - n_end]


def is_uniform(t: np.ndarray, rate_hz: float, rel_tol: float = 0.01) -> bool:
    """True if every step of `t` equals 1/rate_hz within `rel_tol` of a period."""
    dt = np.diff(np.asarray(t, dtype=float))
    return bool(dt.size == 0 or np.max(np.abs(dt * rate_hz - 1.0)) <= rel_tol)


def check_rate(t: np.ndarray, rate_hz: float, where: str = "recording",
               rel_tol: float = 0.02) -> None:
    """Raise ValueError if the median step of `t` disagrees with the nominal `rate_hz` by more
    than `rel_tol` (a mislabeled or mismatched rate)."""
    t = np.asarray(t, dtype=float)
    if t.size < 2:
        return
    med = float(np.median(np.diff(t)))
    if abs(med * rate_hz - 1.0) > rel_tol:
        raise ValueError(f"{where}: nominal rate {rate_hz:g} Hz does not match the time stamps "
                         f"(median step {med:.6g} s = {1.0 / med:.6g} Hz)")


def resample_uniform(t: np.ndarray, x: np.ndarray, rate_hz: float, method: str = "cubic",
                     t0: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Interpolate samples at irregular, strictly increasing time stamps onto a uniform grid.

    Args:
        t: (N,) time stamps [s]; x: (N, ...) values; rate_hz: grid rate [Hz].
        method: "cubic" (not-a-knot cubic spline) or "linear".
        t0: first grid time (default t[0]); the grid ends at or before t[-1].
    Returns:
        (t_u (M,), x_u (M, ...)).
    """
    t = np.asarray(t, dtype=float)
    x = np.asarray(x, dtype=float)
    if t.ndim != 1 or x.shape[0] != t.shape[0]:
        raise ValueError(f"resample_uniform: t {t.shape} and x {x.shape} lengths differ")
    if t.size < 4:
        raise ValueError("resample_uniform needs at least 4 samples")
    if not np.all(np.diff(t) > 0):
        k = int(np.argmax(~(np.diff(t) > 0)))
        raise ValueError(f"resample_uniform: time stamps not increasing at sample {k + 1}")
    if not rate_hz > 0:
        raise ValueError(f"resample_uniform: rate must be > 0, got {rate_hz!r}")
    start = t[0] if t0 is None else float(t0)
    m = int(np.floor((t[-1] - start) * rate_hz + 1e-9)) + 1
    tu = start + np.arange(m) / rate_hz
    if method == "cubic":
        xu = interpolate.CubicSpline(t, x, axis=0)(tu)
    elif method == "linear":
        flat = x.reshape(x.shape[0], -1)
        idx = np.clip(np.searchsorted(t, tu, side="right") - 1, 0, t.size - 2)
        w = ((tu - t[idx]) / (t[idx + 1] - t[idx]))[:, None]
        xu = ((1 - w) * flat[idx] + w * flat[idx + 1]).reshape((m,) + x.shape[1:])
    else:
        raise ValueError(f"resample_uniform: method must be 'cubic' or 'linear', got {method!r}")
    return tu, xu


def decimate(x: np.ndarray, factor: int, offset: int = 0) -> np.ndarray:
    """Keep every `factor`-th sample starting at `offset`. No anti-alias filter here: low-pass
    first (cutoff below rate / (2 factor)), as :func:`identify.estimation.processing.process` does."""
    factor = int(factor)
    if factor < 1:
        raise ValueError(f"decimate: factor must be >= 1, got {factor}")
    return np.asarray(x)[offset::factor]


def advance(x: np.ndarray, samples: float) -> np.ndarray:
    """x advanced in time by `samples` (may be fractional): y[k] = x(k + samples), a cubic
    spline between samples; values beyond the ends hold the end value (callers trim them).
    Used to compensate a delay of the torque channels relative to the positions
    (ProcessingSettings.delay): a signal measured `samples` late is read `samples` earlier."""
    x = np.asarray(x, dtype=float)
    if samples == 0:
        return x.copy()
    k = np.arange(x.shape[0], dtype=float)
    tq = np.clip(k + float(samples), 0.0, k[-1])
    if float(samples).is_integer():
        return x[tq.astype(int)]
    return interpolate.CubicSpline(k, x, axis=0)(tq)


def noise_floor(x: np.ndarray, half_width: int = 4, order: int = 3) -> np.ndarray:
    """Estimated std of white measurement noise in each column of `x` (N, ...) from the residual
    of a local polynomial fit (Savitzky-Golay, window 2*half_width+1, `order`): for white noise
    of std s the residual r = x - SG(x) has variance s^2 (1 - h0), h0 the filter's centre weight
    (the fit is a projection), so s = rms(r) / sqrt(1 - h0). Signal content that the local
    polynomial cannot follow (fast oscillations) adds to the estimate, so it is an upper bound
    for smooth signals. Returns the std per column, shape x.shape[1:]."""
    x = np.asarray(x, dtype=float)
    w = 2 * int(half_width) + 1
    if x.shape[0] < 2 * w:
        raise ValueError(f"noise_floor needs at least {2 * w} samples, got {x.shape[0]}")
    h = _sps.savgol_coeffs(w, order)
    r = x - _sps.savgol_filter(x, w, order, axis=0, mode="interp")
    r = r[half_width:-half_width]           # interior: the centre weight h0 applies there
    return np.sqrt(np.mean(r ** 2, axis=0) / (1.0 - h[half_width]))
