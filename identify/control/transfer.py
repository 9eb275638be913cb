"""Collision thresholds that transfer (issue 22 item 4): calibrated on collision-free runs of one
trajectory (plus a hold of its start pose for the thresholds at rest), judged on another -- its
collision-free run (false alarms), its run with a contact while moving, and a contact while the
arm holds a pose -- with the static thresholds (+ stiction band) and the rest-aware ones
(:func:`identify.control.detection.rest_aware`).

    ra = calibrate(model, calib_rec, rest_rec, signal="tau_m", gain=50.0)
    od = judge(model, ra, {"free": (rec, []), "moving": (rec2, [contact])}, signal="tau_m", ...)
    # od["static"]["free"], od["rest_aware"]["moving"]: OnsetDetection

:func:`hold` is the trajectory of a held pose, :func:`transfer_runs` the twin runs of the
product's ``closed_loop.collision`` (one rest contact), :func:`evaluate_transfer` one model's
:class:`TransferResult`. ``benchmarks/bench_closed_loop.py --transfer`` uses the same functions
with many onsets."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from identify.backend.contact import Contact
from identify.excitation.fourier import FourierTrajectory

from .detection import OnsetDetection, RestAware, observer_residual, onset_detection, rest_aware
from .joint_model import JointModel
from .observer import alarms

__all__ = ["RULES", "hold", "calibrate", "rule_alarms", "judge", "merge_onsets",
           "TransferResult", "contact_from_spec", "other_trajectory", "transfer_runs",
           "evaluate_transfer"]

#: the threshold rules judged: static (+ stiction band) and rest-aware
RULES = ("static", "rest_aware")


def hold(q0: np.ndarray, duration_s: float) -> FourierTrajectory:
    """A trajectory holding the pose q0 (n,) [rad] for duration_s [s] (one period of a Fourier
    series without harmonics: the backends run it like any other)."""
    q0 = np.asarray(q0, float)
    z = np.zeros((q0.size, 1))
    return FourierTrajectory(q0=q0, a=z, b=z.copy(), wf=2 * np.pi / float(duration_s))


def calibrate(model: JointModel, calib, calib_rest, *, signal: str = "tau_m", gain: float = 50.0,
              stiction_speed: float = 0.02, settle_s: float = 0.1, k_sigma: float = 5.0,
              peak_factor: float = 1.2, margin_Nm: float = 0.1) -> RestAware:
    """The thresholds of both rules from collision-free recordings: `calib` while moving (the
    static rule, its rest samples left out) and `calib_rest` holding a pose (the rest-aware
    rule's thresholds at rest). The static rule uses ``.moving`` everywhere."""
    return rest_aware(model, calib, calib_rest, signal, gain, stiction_speed, settle_s=settle_s,
                      k_sigma=k_sigma, peak_factor=peak_factor, margin_Nm=margin_Nm)


def rule_alarms(ra: RestAware, rule: str, model: JointModel, rec, *, signal: str, gain: float,
                stiction_speed: float) -> np.ndarray:
    """(N,) bool alarms of recording `rec` with rule "static" (``ra.moving`` + the stiction band
    at every sample, at rest too) or "rest_aware" (:meth:`RestAware.alarms`)."""
    if rule == "static":
        r, band = observer_residual(model, rec, signal, gain, stiction_speed)
        return alarms(r, ra.moving.value, band)
    if rule == "rest_aware":
        return ra.alarms(model, rec, signal, gain, stiction_speed)
    raise ValueError(f"threshold rule must be one of {RULES}, got {rule!r}")


def judge(model: JointModel, ra: RestAware, runs: dict, *, signal: str, gain: float,
          stiction_speed: float) -> dict:
    """rule -> case -> OnsetDetection of each judged run: `runs` case -> (recording, Contacts the
    twin applied on it); the twin's true external torque (``rec.truth["tau_ext"]``) when known."""
    out = {}
    for rule in RULES:
        out[rule] = {}
        for case, (rec, contacts) in runs.items():
            a = rule_alarms(ra, rule, model, rec, signal=signal, gain=gain,
                            stiction_speed=stiction_speed)
            out[rule][case] = onset_detection(rec.t, a, contacts, gain,
                                              (rec.truth or {}).get("tau_ext"))
    return out


def merge_onsets(parts) -> OnsetDetection:
    """Several runs' OnsetDetection as one (onsets appended, false alarms and durations summed)."""
    parts = list(parts)
    cat = lambda a: np.concatenate([np.atleast_1d(getattr(p, a)) for p in parts])  # noqa: E731
    return OnsetDetection(onsets_s=cat("onsets_s"), detected=cat("detected").astype(bool),
                          delay_ms=cat("delay_ms"),
                          false_alarms=int(sum(p.false_alarms for p in parts)),
                          duration_s=float(sum(p.duration_s for p in parts)),
                          tau_ext_peak_Nm=cat("tau_ext_peak_Nm"))


@dataclass
class TransferResult:
    """One model's transferred collision figures. calibrated_on / judged_on: trajectory labels
    ("excitation", "validation"); rest_calibration_s [s]: the hold of calibrated_on's start pose;
    thresholds: the RestAware of both rules (static uses ``.moving``); detections: rule ->
    case ("free": judged trajectory's collision-free run, "moving": its contact run, "rest": the
    judged start pose held with `rest_contact`) -> OnsetDetection; contact / rest_contact: the
    Contacts applied."""
    model: str
    model_source: str
    signal: str
    gain: float
    stiction_speed: float
    calibrated_on: str
    judged_on: str
    rest_calibration_s: float
    thresholds: RestAware
    detections: dict
    contact: Contact
    rest_contact: Contact
    seeds: dict = field(default_factory=dict)


def contact_from_spec(c) -> Contact:
    """The Contact of a scenario's ContactSpec `c` (link, time_s, duration_s, force_N, point_m)."""
    return Contact(link=c.link, time_s=float(c.time_s), duration_s=float(c.duration_s),
                   force_N=tuple(float(x) for x in c.force_N),
                   point_m=None if c.point_m is None else tuple(float(x) for x in c.point_m))


def other_trajectory(label: str) -> str:
    """The trajectory the thresholds are calibrated on when `label` is judged."""
    if label not in ("excitation", "validation"):
        raise ValueError(f"closed_loop.trajectory must be excitation or validation, got {label!r}")
    return "excitation" if label == "validation" else "validation"


def transfer_runs(run, calib_trajectory, judged_trajectory, col, seed: int) -> tuple[dict, dict]:
    """The runs the transfer needs besides the judged trajectory's contact run (and, with
    ``col.free_periods`` 1, its collision-free run: the same-trajectory part's): ({label:
    recording}, {label: noise seed}). `run(trajectory, seed, contacts, periods)` -> recording
    (one closed-loop run with the identified feed-forward); col: a CollisionSpec. Seeds
    seed + 3 .. + 6: noise the others did not see."""
    seeds = {"transfer_calibration": seed + 3, "transfer_rest_calibration": seed + 4,
             "transfer_rest_contact": seed + 5}
    if col.free_periods > 1:
        seeds["transfer_free"] = seed + 6
    rest = contact_from_spec(col.rest_contact)
    recs = {"transfer_calibration": run(calib_trajectory, seeds["transfer_calibration"], [], 1),
            "transfer_rest_calibration": run(hold(calib_trajectory.q0, col.rest_calibration_s),
                                             seeds["transfer_rest_calibration"], [], 1),
            "transfer_rest_contact": run(hold(judged_trajectory.q0, col.rest_hold_s),
                                         seeds["transfer_rest_contact"], [rest.as_setting()], 1)}
    if col.free_periods > 1:
        recs["transfer_free"] = run(judged_trajectory, seeds["transfer_free"], [],
                                    int(col.free_periods))
    return recs, seeds


def evaluate_transfer(model: JointModel, recs: dict, free, hit, contact: Contact, col, *,
                      name: str, calibrated_on: str, judged_on: str,
                      seeds: dict | None = None) -> TransferResult:
    """One model's :class:`TransferResult` from :func:`transfer_runs`'s recordings `recs`, the
    judged trajectory's collision-free run `free` (its ``transfer_free`` recording instead when
    `recs` has one) and contact run `hit` (with `contact`); col: a CollisionSpec (signal, gain,
    threshold rule, settle_s, rest_contact)."""
    kw = {"signal": col.signal, "gain": col.observer_gain,
          "stiction_speed": col.stiction_speed_rad_s}
    ra = calibrate(model, recs["transfer_calibration"], recs["transfer_rest_calibration"],
                   settle_s=col.settle_s, k_sigma=col.k_sigma, peak_factor=col.peak_factor,
                   margin_Nm=col.margin_Nm, **kw)
    rest = contact_from_spec(col.rest_contact)
    det = judge(model, ra, {"free": (recs.get("transfer_free", free), []), "moving": (hit, [contact]),
                            "rest": (recs["transfer_rest_contact"], [rest])}, **kw)
    return TransferResult(model=name, model_source=model.source, signal=col.signal,
                          gain=float(col.observer_gain),
                          stiction_speed=float(col.stiction_speed_rad_s),
                          calibrated_on=calibrated_on, judged_on=judged_on,
                          rest_calibration_s=float(col.rest_calibration_s), thresholds=ra,
                          detections=det, contact=contact, rest_contact=rest,
                          seeds=dict(seeds or {}))
