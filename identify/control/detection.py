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
from .observer import (Thresholds, alarms, link_torque_from_motor, residual, stiction_band,
                       thresholds)

__all__ = ["CollisionResult", "observer_residual", "evaluate", "episodes"]


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
