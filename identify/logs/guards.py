"""Unit guards: a log whose numbers are plausible only in another unit is refused (LogError,
exit 2) with the probable cause and the scenario key that fixes it. Checked on the SI arrays
after the import's unit conversion; ``fit.*.check_units: false`` turns them off.

| symptom | probable cause | key |
|---|---|---|
| positions beyond the URDF limits by more than max(0.5 rad, 25 % of the range) | degrees read as radians | ``position_unit: deg`` |
| positions beyond the limits by less | the arm's zero differs from the URDF's, or wrong joints | (warning) |
| sample rate < 10 Hz or > 100 kHz | milliseconds / microseconds / nanoseconds read as seconds, or the reverse | ``time_scale`` |
| a time step longer than MAX_GAP_SAMPLES sample periods | samples lost (a gap the resampling would fill by interpolation); the fit's own logs are split there instead (identify.logs.load.load_segments) | ``window_s`` / ``window_t`` |
| after ``position_unit: deg`` no joint spans more than 2 pi "degrees" | a log in radians read as degrees | ``position_unit: rad`` |
| motor torque against the URDF's rigid-body torque on the log's motion with a negative slope | a current gain or the current's sign flipped on that joint | ``current_gains`` |
| 99th-percentile motor torque > 5x the URDF effort limit, or 50x away from the URDF's gravity torque (plus a friction allowance of 10 % of the effort limit) on half of the joints | current gains in the wrong unit (mA, or per motor side) | ``current_gains`` |
| one joint 50x off while the others agree | that joint's gain | (warning) |
"""
from __future__ import annotations

import numpy as np

from .readers import LogError

_RATE_RANGE = (10.0, 1.0e5)
_SCALES = (1e-3, 1e-6, 1e-9, 1e3)


#: the longest step between time stamps the resampling may bridge [sample periods]; a 2 s gap
#: filled by a cubic spline made the validation RMS 3.10 N*m instead of 0.043
MAX_GAP_SAMPLES = 10


def gap_indices(t: np.ndarray, rate_hz: float) -> np.ndarray:
    """(g,) indices i of the time steps t[i] -> t[i + 1] longer than MAX_GAP_SAMPLES / rate_hz
    (lost samples: no interpolation may bridge them)."""
    return np.flatnonzero(np.diff(t) > MAX_GAP_SAMPLES / float(rate_hz))


def gap_spans(t: np.ndarray, gaps: np.ndarray, loc) -> str:
    """The gaps' spans in words, from the log's start (at most 3, then a count)."""
    dt = np.diff(t)
    spans = ", ".join(f"{t[i] - t[0]:.3f}..{t[i + 1] - t[0]:.3f} s ({dt[i]:.3g} s, after "
                      f"{loc(int(i))})" for i in gaps[:3])
    return spans + (f" and {gaps.size - 3} more" if gaps.size > 3 else "")


def check_gaps(t: np.ndarray, rate_hz: float, where: str, loc) -> None:
    """Refuse time steps longer than MAX_GAP_SAMPLES / rate_hz (lost samples), naming each gap's
    span (at most 3) and the window that avoids the longest. loc(i): sample i in words.
    Always checked (check_units does not turn it off): filled gaps are invented data. (The fit's
    own logs are split at their gaps instead: identify.logs.load.load_segments.)"""
    dt = np.diff(t)
    gaps = gap_indices(t, rate_hz)
    if not gaps.size:
        return
    spans, more = gap_spans(t, gaps, loc), ""
    k = int(gaps[np.argmax(dt[gaps])])
    before, after = t[k] - t[0], t[-1] - t[k + 1]
    hint = (f"window_s: [0, {before:.3f}]" if before >= after else
            f"window_s: [{t[k + 1] - t[0]:.3f}, {t[-1] - t[0]:.3f}]")
    raise LogError(f"{where}: time: {gaps.size} gap(s) in the samples longer than "
                   f"{MAX_GAP_SAMPLES} sample periods ({MAX_GAP_SAMPLES / rate_hz:g} s at "
                   f"{rate_hz:g} Hz), from the log's start: {spans}{more}; they would be filled "
                   f"by interpolation: fit the part without a gap ({hint}) or split the log "
                   f"into one log per part")


def check_time(t: np.ndarray, time_scale: float, where: str) -> None:
    """Refuse an implausible sample rate, suggesting the time_scale that gives a plausible one."""
    dt = np.diff(t)
    dt = dt[dt > 0]
    if dt.size == 0:
        return
    rate = 1.0 / float(np.median(dt))
    if _RATE_RANGE[0] <= rate <= _RATE_RANGE[1]:
        return
    good = [s for s in _SCALES if _RATE_RANGE[0] <= rate / s <= _RATE_RANGE[1]]
    hint = (f"; the time stamps are probably in other units: set time_scale: "
            f"{time_scale * good[0]:g}" if good else "")
    unit = {1e-3: "milliseconds", 1e-6: "microseconds", 1e-9: "nanoseconds", 1e3: "kiloseconds"}
    cause = f" ({unit[good[0]]} read as seconds?)" if good and good[0] < 1 else ""
    raise LogError(f"{where}: time: the median sample rate is {rate:.4g} Hz after time_scale "
                   f"{time_scale:g}, implausible for an arm's log{cause}{hint} "
                   f"(or check_units: false)")


def check_positions(q: np.ndarray, model, position_unit: str, where: str,
                    warnings: list) -> None:
    """Positions far beyond the URDF limits: degrees read as radians (refused), a small
    excess: warned."""
    lo = np.asarray(model.limits.q_min, float)
    hi = np.asarray(model.limits.q_max, float)
    qmin, qmax = q.min(axis=0), q.max(axis=0)
    span = np.where(np.isfinite(hi - lo), hi - lo, 4 * np.pi)
    lo = np.where(np.isfinite(lo), lo, -2 * np.pi)
    hi = np.where(np.isfinite(hi), hi, 2 * np.pi)
    excess = np.maximum(lo - qmin, qmax - hi)
    margin = np.maximum(0.5, 0.25 * span)
    names = list(model.joint_names)
    far = np.flatnonzero(excess > margin)
    if far.size:
        j = int(far[np.argmax(excess[far])])
        deg = position_unit == "rad" and np.all(np.deg2rad([qmin[j], qmax[j]]) >= lo[j] - margin[j]) \
            and np.all(np.deg2rad([qmin[j], qmax[j]]) <= hi[j] + margin[j])
        cause = ("; the log is probably in degrees: set position_unit: deg" if deg else
                 "; check the column map (is this column a position?) and position_unit")
        raise LogError(f"{where}: q of joint {names[j]} spans {qmin[j]:.4g}..{qmax[j]:.4g} rad, "
                       f"beyond the URDF limits [{lo[j]:.4g}, {hi[j]:.4g}] by {excess[j]:.3g} rad"
                       f"{cause} (or check_units: false)")
    if position_unit == "deg" and float((qmax - qmin).max()) < np.deg2rad(2 * np.pi):
        raise LogError(f"{where}: q: with position_unit: deg no joint moves more than "
                       f"{np.rad2deg((qmax - qmin).max()):.3g} deg (largest span, joint "
                       f"{names[int(np.argmax(qmax - qmin))]}): the log is probably in radians "
                       f"read as degrees: set position_unit: rad (or check_units: false)")
    near = np.flatnonzero(excess > 1e-3)
    for j in near:
        warnings.append(f"{where}: q of joint {names[j]} exceeds the URDF limits by "
                        f"{excess[j]:.3g} rad (zero offset of the arm vs the URDF?)")


#: friction allowance of the unit guard: a joint's friction may reach this fraction of its URDF
#: effort limit (or of the largest joint's gravity torque when the URDF has no limit)
FRICTION_ALLOWANCE = 0.1


def check_torque(tau_m: np.ndarray, rigid: np.ndarray | None, model, where: str,
                 from_currents: bool, warnings: list | None = None) -> None:
    """Motor torques (eta*beta*i) absurd against the effort limits or the rigid-body torque.

    The rigid-body comparison allows for friction: the measured RMS is compared with
    sqrt(rigid RMS^2 + allowance^2), allowance = FRICTION_ALLOWANCE x the joint's effort limit
    (a friction-dominated wrist joint with a small gravity torque is genuine); too small a
    torque is judged against the rigid body alone. Refused when half of the joints (at least 2)
    are 50x off; a single joint off while the others agree is a warning naming it."""
    if tau_m is None:
        return
    names = list(model.joint_names)
    p99 = np.percentile(np.abs(tau_m), 99, axis=0)
    key = "current_gains (eta*beta [N*m/A] per joint, link side)" if from_currents \
        else "the tau_m column map"
    eff = np.asarray(model.limits.tau_max, float)
    bad = np.flatnonzero(np.isfinite(eff) & (eff > 0) & (p99 > 5 * eff))
    if bad.size:
        j = int(bad[0])
        raise LogError(f"{where}: motor torque of joint {names[j]}: 99th percentile "
                       f"{p99[j]:.4g} N*m is {p99[j] / eff[j]:.3g}x the URDF effort limit "
                       f"{eff[j]:.4g} N*m; check {key} (currents in mA? gains motor side?) "
                       f"(or check_units: false)")
    if rigid is None:
        return
    r = np.sqrt(np.mean(rigid ** 2, axis=0))
    m = np.sqrt(np.mean(tau_m ** 2, axis=0))
    ok = r > 1e-3 * max(float(r.max()), 1e-12)
    allow = FRICTION_ALLOWANCE * np.where(np.isfinite(eff) & (eff > 0), eff, float(r.max()))
    r_high = np.sqrt(r ** 2 + allow ** 2)
    high = m / np.where(ok, r_high, 1.0)
    low = m / np.where(ok, r, 1.0)
    ratio = np.where(high > 50, high, low)
    # currents in mA are 1000x off, motor-side gains ~100x: refuse a factor of 50 on half of
    # the joints with a gravity torque
    bad = np.flatnonzero(ok & ((high > 50) | (low < 0.02)))
    ref = np.where(high > 50, r_high, r)
    if bad.size and bad.size >= max(2, int(np.ceil(ok.sum() / 2))):
        j = int(bad[0])
        raise LogError(f"{where}: motor torque RMS {m[j]:.4g} N*m of joint {names[j]} is "
                       f"{ratio[j]:.3g}x the rigid-body torque of the URDF"
                       f"{' plus a friction allowance' if high[j] > 50 else ''} "
                       f"({ref[j]:.4g} N*m) on the same motion; check {key} "
                       f"(or check_units: false)")
    if warnings is not None:
        for j in bad:
            warnings.append(f"{where}: motor torque RMS {m[j]:.4g} N*m of joint {names[j]} is "
                            f"{ratio[j]:.3g}x the URDF's rigid-body torque (+ friction "
                            f"allowance) ({ref[j]:.4g} N*m) while the other joints agree: check "
                            f"that joint's entry of {key}")


def check_torque_sign(t: np.ndarray, q: np.ndarray, tau_m: np.ndarray | None, model, where: str,
                      from_currents: bool) -> None:
    """Refuse a joint whose motor torque falls where the URDF's rigid-body torque on the log's
    own motion rises: per joint, tau_m ~ a RNEA(q, qd, qdd) + b qd + c sign(qd) + d (least
    squares; qd, qdd by central differences on <= 4000 samples at least 20 ms apart, friction
    absorbed by b, c, d); a < -0.25 with |a| > 5 standard errors is a flipped sign (a negative
    current gain made the validation RMS 1.20 N*m instead of 0.042, all of them -152 kg masses).
    t (N,) [s], q (N, n) [rad], tau_m (N, n) [N*m]."""
    if tau_m is None or t.shape[0] < 20:
        return
    step = max(1, t.shape[0] // 4000, int(np.ceil(0.02 / max(float(np.median(np.diff(t))),
                                                             1e-12))))
    ts, qs, ys = t[::step], q[::step], tau_m[::step]
    if ts.shape[0] < 20:
        return
    qd = np.gradient(qs, ts, axis=0)
    qdd = np.gradient(qd, ts, axis=0)
    rigid = model.inverse_dynamics(qs[2:-2], qd[2:-2], qdd[2:-2])
    qd, ys = qd[2:-2], ys[2:-2]
    names = list(model.joint_names)
    for j in range(q.shape[1]):
        X = np.column_stack([rigid[:, j], qd[:, j], np.tanh(qd[:, j] / 0.02),
                             np.ones(len(ys))])
        if np.std(rigid[:, j]) < 1e-6:
            continue
        coef, res, rank, _ = np.linalg.lstsq(X, ys[:, j], rcond=None)
        if rank < 4:
            continue
        r = ys[:, j] - X @ coef
        cov = np.linalg.pinv(X.T @ X) * float(r @ r) / max(len(ys) - 4, 1)
        a, se = float(coef[0]), float(np.sqrt(max(cov[0, 0], 0.0)))
        if a < -0.25 and abs(a) > 5 * se:
            key = ("current_gains (joint " + names[j] + ") or the current's sign"
                   if from_currents else "the sign of its tau_m column")
            raise LogError(f"{where}: motor torque of joint {names[j]} is {a:.3g}x the URDF's "
                           f"rigid-body torque on the log's motion (about +1 expected): its sign "
                           f"is flipped; check {key} (or check_units: false)")
