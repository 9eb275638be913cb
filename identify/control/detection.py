"""Collision detection with the momentum observer (:mod:`identify.control.observer`): thresholds
from a collision-free calibration run, then a collision-free test run (false alarms) and a run with
a contact (detection and its delay), all of the same trajectory with fresh sensor noise.

    res = evaluate(model, calib, free, contact, contact_spec, signal="tau_m", gain=50.0)

A false alarm is an alarm episode (a rising edge of the alarm) outside the contact: on the
collision-free run every episode, on the contact run those starting before the contact or later
than 5 observer time constants after its end (the residual's decay)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from identify.backend.contact import Contact

from .joint_model import JointModel
from .observer import (Thresholds, alarms, link_torque_from_motor, residual, rest_mask,
                       rest_referenced, stiction_band, thresholds)

__all__ = ["CollisionResult", "observer_residual", "evaluate", "episodes", "OnsetDetection",
           "onset_detection", "RestAware", "rest_aware"]


@dataclass
class CollisionResult:
    """Collision detection with one model (band: the contact run's time-varying threshold part
    (N, n), stiction_speed its width [rad/s], band_fraction: share of that run's samples where
    the band more than doubles some joint's threshold -- the detector's reduced-sensitivity
    time). detected: an alarm inside the contact window;
    detection_delay_ms: first alarm minus contact start [ms] (None if not detected);
    false_alarms: alarm episodes on the collision-free test run; false_alarms_contact_run:
    episodes outside the contact on the contact run; thresholds: per-joint Thresholds [N*m];
    peak_residual_Nm (n,): largest |r| during the contact; tau_ext_peak_Nm (n,): the twin's true
    external torque peak (None off the twin); t, r (N,), (N, n) of the contact run for plots."""
    model: str
    model_source: str
    signal: str
    gain: float
    thresholds: Thresholds
    detected: bool
    detection_delay_ms: float | None
    false_alarms: int
    false_alarms_contact_run: int
    contact: Contact
    peak_residual_Nm: np.ndarray
    tau_ext_peak_Nm: np.ndarray | None = None
    t: np.ndarray = field(repr=False, default=None)
    r: np.ndarray = field(repr=False, default=None)
    band: np.ndarray = field(repr=False, default=None)
    stiction_speed: float = 0.0
    band_fraction: float = 0.0


def observer_residual(model: JointModel, rec, signal: str, gain: float,
                      stiction_speed: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(residual, band) (N, n) [N*m] of a recording: link torque from the joint torque sensor
    (signal "tau_j") or from the motor torque through the model's drive ("tau_m");
    band: the thresholds' time-varying part (:func:`identify.control.observer.stiction_band`)."""
    t = np.asarray(rec.t, float)
    tau_in = None
    if signal == "tau_j":
        if rec.tau_j is None:
            raise ValueError("collision.signal tau_j: the recording has no joint torque (tau_j)")
        tau_r = np.asarray(rec.tau_j, float)
    elif signal == "tau_m":
        if rec.tau_m is None:
            raise ValueError("collision.signal tau_m: the recording has no motor torque")
        tau_r, tau_in = link_torque_from_motor(model, rec.qd, np.asarray(rec.tau_m, float),
                                               float(np.median(np.diff(t))), with_input=True)
    else:
        raise ValueError(f"collision.signal must be tau_m or tau_j, got {signal!r}")
    r = residual(model, t, rec.q, rec.qd, tau_r, gain)
    return r, stiction_band(model, t, rec.qd, tau_in, gain, stiction_speed)


def episodes(alarm: np.ndarray) -> np.ndarray:
    """Sample indices where an alarm episode starts (rising edges; sample 0 if it starts on)."""
    a = np.asarray(alarm, bool)
    return np.flatnonzero(a & ~np.concatenate([[False], a[:-1]]))


def evaluate(model: JointModel, calib, free, contact_rec, contact: Contact, *, name: str,
             signal: str = "tau_m", gain: float = 50.0, k_sigma: float = 5.0,
             peak_factor: float = 1.2, margin_Nm: float = 0.1,
             stiction_speed: float = 0.02) -> CollisionResult:
    """Thresholds from `calib`, false alarms on `free`, detection on `contact_rec` (recordings of
    the same trajectory); contact: the Contact the twin applied on `contact_rec`;
    stiction_speed [rad/s]: width of the thresholds' band at velocity reversals (0: static
    thresholds only)."""
    r_cal, b_cal = observer_residual(model, calib, signal, gain, stiction_speed)
    th = thresholds(r_cal, k_sigma, peak_factor, margin_Nm, band=b_cal)
    r_free, b_free = observer_residual(model, free, signal, gain, stiction_speed)
    fa_free = episodes(alarms(r_free, th.value, b_free)).size
    r, band = observer_residual(model, contact_rec, signal, gain, stiction_speed)
    t = np.asarray(contact_rec.t, float)
    t0, t1 = contact.time_s, contact.end_s
    inside = (t >= t0) & (t < t1)
    alarm = alarms(r, th.value, band)
    starts = episodes(alarm)
    ts = t[starts]
    hits = ts[(ts >= t0) & (ts < t1)]
    # an alarm already on at the onset counts from the onset
    on_at_onset = bool(np.any(inside) and alarm[np.flatnonzero(inside)[0]])
    delay = 0.0 if on_at_onset else (None if hits.size == 0 else round(float((hits[0] - t0) * 1e3), 6))
    outside = (ts < t0) | (ts >= t1 + 5.0 / gain)
    truth = contact_rec.truth or {}
    tex = None
    if "tau_ext" in truth:
        tex = np.max(np.abs(np.asarray(truth["tau_ext"], float)), axis=0)
    return CollisionResult(
        model=name, model_source=model.source, signal=signal, gain=float(gain), thresholds=th,
        detected=delay is not None, detection_delay_ms=delay, false_alarms=int(fa_free),
        false_alarms_contact_run=int(np.sum(outside)), contact=contact,
        peak_residual_Nm=np.max(np.abs(r[inside]), axis=0) if np.any(inside) else np.zeros(model.n),
        tau_ext_peak_Nm=tex, t=t, r=r, band=band, stiction_speed=float(stiction_speed),
        band_fraction=float(np.mean(np.any(band > th.value, axis=1))))


@dataclass
class OnsetDetection:
    """Detection of many contact onsets on one run. onsets_s (m,) [s] the contacts' starts;
    detected (m,) bool: an alarm episode starts inside the contact window [t0, t1) (or the alarm
    is on at the onset, delay 0); delay_ms (m,) [ms] first alarm minus onset (nan if missed);
    false_alarms: episodes starting outside every window [t0, t1 + 5/K_O); duration_s [s] of
    the run; tau_ext_peak_Nm (m,) the largest true external joint torque of each contact
    (nan off the twin)."""
    onsets_s: np.ndarray
    detected: np.ndarray
    delay_ms: np.ndarray
    false_alarms: int
    duration_s: float
    tau_ext_peak_Nm: np.ndarray

    @property
    def rate(self) -> float:
        """Share of the onsets detected [-] (nan without onsets)."""
        return float(np.mean(self.detected)) if self.detected.size else float("nan")

    @property
    def max_delay_ms(self) -> float:
        """Largest delay of the detected onsets [ms] (nan if none)."""
        d = self.delay_ms[self.detected]
        return float(np.max(d)) if d.size else float("nan")


def onset_detection(t: np.ndarray, alarm: np.ndarray, contacts, gain: float,
                    tau_ext: np.ndarray | None = None) -> OnsetDetection:
    """Per-onset detection and false alarms of one run (:class:`OnsetDetection`).

    Args: t (N,) [s]; alarm (N,) bool (:func:`identify.control.observer.alarms`); contacts: the
    Contacts the twin applied (any number, windows not overlapping); gain K_O [1/s] (an episode
    within 5/K_O after a contact's end is its residual's decay, not a false alarm); tau_ext (N, n)
    the twin's true external joint torque [N*m] or None."""
    t = np.asarray(t, float)
    alarm = np.asarray(alarm, bool)
    ts = t[episodes(alarm)]
    t0 = np.array([c.time_s for c in contacts], float)
    t1 = np.array([c.end_s for c in contacts], float)
    if t0.size and not np.all((t0 >= t[0]) & (t0 <= t[-1])):
        bad = int(np.flatnonzero((t0 < t[0]) | (t0 > t[-1]))[0])
        raise ValueError(f"contact {bad} starts at {t0[bad]} s, outside the run "
                         f"({t[0]} .. {t[-1]} s)")
    k0 = np.searchsorted(t, t0)                       # first sample inside each window
    on_at = alarm[np.minimum(k0, t.size - 1)]
    first = np.searchsorted(ts, t0)                   # first episode start >= t0
    nxt = np.append(ts, np.inf)[first]
    hit = nxt < t1
    delay = np.where(on_at, 0.0, np.where(hit, (nxt - t0) * 1e3, np.nan))
    ins = (ts[:, None] >= t0[None, :]) & (ts[:, None] < (t1 + 5.0 / gain)[None, :])
    fa = int(np.sum(~np.any(ins, axis=1))) if t0.size else int(ts.size)
    if tau_ext is None:
        peak = np.full(t0.size, np.nan)
    else:
        a = np.abs(np.asarray(tau_ext, float)).max(axis=1)
        peak = np.array([a[(t >= s) & (t < e)].max(initial=0.0) for s, e in zip(t0, t1)])
    return OnsetDetection(onsets_s=t0, detected=on_at | hit, delay_ms=np.round(delay, 6),
                          false_alarms=fa, duration_s=float(t[-1] - t[0] + np.median(np.diff(t))),
                          tau_ext_peak_Nm=peak)


@dataclass
class RestAware:
    """Thresholds with a friction state at standstill (:func:`rest_aware`): `moving` applies
    (plus the stiction band) while the arm moves, `rest` to the rest-referenced residual once
    the arm has been commanded still for settle_s [s]."""
    moving: Thresholds
    rest: Thresholds
    settle_s: float

    def alarms(self, model: JointModel, rec, signal: str, gain: float,
               stiction_speed: float) -> np.ndarray:
        """(N,) bool alarms of recording `rec` (its q_cmd tells rest from motion)."""
        r, band = observer_residual(model, rec, signal, gain, stiction_speed)
        rest = rest_mask(rec.q_cmd, float(np.median(np.diff(rec.t))), self.settle_s)
        rr = _rest_residual(model, rec, signal, gain, rest)
        th = np.where(rest[:, None], self.rest.value, self.moving.value + band)
        return np.any(np.abs(np.where(rest[:, None], rr, r)) > th, axis=1)


def _rest_residual(model: JointModel, rec, signal: str, gain: float, rest: np.ndarray):
    """The rest-referenced residual of a model without its direction-dependent terms (Coulomb,
    motor Coulomb, the opposing reducer loss): at standstill their sign follows the velocity
    noise, while the friction they stand for is held (the reference takes it)."""
    import dataclasses
    z = np.zeros(model.n)
    still = dataclasses.replace(model, coulomb=z, f_mc=z, xi_opp=z)
    r, _ = observer_residual(still, rec, signal, gain, 0.0)
    return rest_referenced(r, rest)


def rest_aware(model: JointModel, calib, calib_rest, signal: str = "tau_m", gain: float = 50.0,
               stiction_speed: float = 0.02, settle_s: float = 0.1, k_sigma: float = 5.0,
               peak_factor: float = 1.2, margin_Nm: float = 0.1) -> RestAware:
    """Thresholds from two collision-free recordings: `calib` while moving (the static rule of
    :func:`identify.control.observer.thresholds` with the stiction band; its rest samples, if
    any, left out) and `calib_rest` holding a pose (the rule on the rest-referenced residual of
    its samples after settle_s [s]). Raises ValueError naming the recording without rest."""
    dt = float(np.median(np.diff(calib.t)))
    r, band = observer_residual(model, calib, signal, gain, stiction_speed)
    still = rest_mask(calib.q_cmd, dt, settle_s)
    mov = thresholds(r[~still], k_sigma, peak_factor, margin_Nm, band=band[~still])
    rest = rest_mask(calib_rest.q_cmd, float(np.median(np.diff(calib_rest.t))), settle_s)
    if not np.any(rest):
        raise ValueError(f"rest calibration: the recording is never still for {settle_s} s")
    rr = _rest_residual(model, calib_rest, signal, gain, rest)
    th_rest = thresholds(rr[rest], k_sigma, peak_factor, margin_Nm)
    return RestAware(moving=mov, rest=th_rest, settle_s=float(settle_s))
