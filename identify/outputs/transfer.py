"""metrics.json ``collision_transfer``, its report section and console lines: collision thresholds
calibrated on one trajectory and judged on another (identify.control.transfer.TransferResult per
model), for both threshold rules (static + stiction band, rest-aware)."""
from __future__ import annotations

import math

import numpy as np

from identify.common.jsonutil import to_jsonable

__all__ = ["transfer_metrics", "transfer_blocks", "transfer_summary"]

#: the goal the transferred thresholds are judged on (issue 22 item 4)
GOAL = {"delay_ms": 50.0, "false_alarms": 0}


def _case(od) -> dict:
    """One judged run's figures: its single onset (detected, delay) when it has one."""
    d = {"false_alarms": int(od.false_alarms), "duration_s": float(od.duration_s)}
    if od.onsets_s.size:
        delay = float(od.delay_ms[0])
        d.update({"onset_s": float(od.onsets_s[0]), "detected": bool(od.detected[0]),
                  "delay_ms": None if math.isnan(delay) else delay,
                  "tau_ext_peak_Nm": (None if math.isnan(float(od.tau_ext_peak_Nm[0]))
                                      else float(od.tau_ext_peak_Nm[0]))})
    return d


def _met(rule: dict) -> bool:
    """No false alarm on the judged trajectory, both contacts found within the goal's delay."""
    return (rule["free"]["false_alarms"] == GOAL["false_alarms"]
            and all(rule[c].get("detected") and rule[c]["delay_ms"] <= GOAL["delay_ms"]
                    and rule[c]["false_alarms"] == 0 for c in ("moving", "rest")))


def _model(r) -> dict:
    rules = {rule: {case: _case(od) for case, od in cases.items()}
             for rule, cases in r.detections.items()}
    return {"model_source": r.model_source,
            "threshold_moving_Nm": np.asarray(r.thresholds.moving.value).tolist(),
            "threshold_rest_Nm": np.asarray(r.thresholds.rest.value).tolist(),
            **rules, "goal_met": {rule: _met(v) for rule, v in rules.items()}}


def transfer_metrics(results: dict) -> dict:
    """metrics.json ``collision_transfer`` of model name -> TransferResult: what the thresholds
    were calibrated on and judged on, the settings, and per model and rule the collision-free
    run of the judged trajectory (``free``: false alarms), its contact while moving
    (``moving``) and the contact at rest (``rest``)."""
    first = results.get("identified") or next(iter(results.values()))
    th = first.thresholds.moving
    rest_s = first.detections["static"]["rest"].duration_s
    return to_jsonable({
        "calibrated_on": {
            "trajectory": first.calibrated_on,
            "runs": f"a collision-free run of the {first.calibrated_on} trajectory (identified "
                    f"feed-forward) and a {first.rest_calibration_s:g} s hold of its start pose"},
        "judged_on": {
            "trajectory": first.judged_on,
            "runs": f"the {first.judged_on} trajectory's collision-free run (free) and contact "
                    f"run (moving), and a {rest_s:g} s hold of its start pose with a contact "
                    f"(rest)",
            "contact": first.contact.as_setting(), "rest_contact": first.rest_contact.as_setting()},
        "signal": first.signal, "observer_gain_per_s": first.gain,
        "settle_s": first.thresholds.settle_s,
        "threshold_rule": {"k_sigma": th.k_sigma, "peak_factor": th.peak_factor,
                           "margin_Nm": th.margin_Nm,
                           "stiction_speed_rad_s": first.stiction_speed},
        "rules": {"static": "thresholds from the moving calibration plus the stiction band, "
                            "at every sample",
                  "rest_aware": "the same while moving; at rest (commanded still for settle_s) "
                                "the rest-referenced residual against the rest calibration's "
                                "thresholds"},
        "noise_seeds": first.seeds, "goal": GOAL,
        "models": {k: _model(r) for k, r in results.items()}})


def _fmt_case(c: dict) -> str:
    if not c.get("detected"):
        return "missed"
    return f"{c['delay_ms']:.0f} ms"


def transfer_blocks(tr: dict) -> list[tuple]:
    """Report blocks (identify.outputs.report) of a metrics.json ``collision_transfer``."""
    cal, jud = tr["calibrated_on"], tr["judged_on"]
    head = ["model", "thresholds", f"false alarms ({jud['trajectory']}, collision-free)",
            "contact while moving", "contact at rest", "goal met"]
    rows = [[k, rule, str(v[rule]["free"]["false_alarms"]), _fmt_case(v[rule]["moving"]),
             _fmt_case(v[rule]["rest"]), str(v["goal_met"][rule])]
            for k, v in tr["models"].items() for rule in ("static", "rest_aware")]
    rc = jud["rest_contact"]
    return [("h", 2, "Collision detection: thresholds from another trajectory"),
            ("table", head, rows),
            ("p", f"Calibrated on {cal['runs']}; judged on {jud['runs']}. Contact at rest: "
                  f"{rc['force_N']} N on {rc['link']} at {rc['time_s']} s for "
                  f"{rc['duration_s']} s. Observer input {tr['signal']}; rest-aware: "
                  f"{tr['rules']['rest_aware']} ({tr['settle_s']} s). Goal: 0 false alarms, both "
                  f"contacts within {tr['goal']['delay_ms']:g} ms.")]


def transfer_summary(tr: dict | None) -> list[str]:
    """Console lines (identify.outputs.render.console_summary) of ``collision_transfer``."""
    if not tr:
        return []
    out = []
    for k, v in tr["models"].items():
        for rule in ("static", "rest_aware"):
            out.append(f"  collision ({tr['calibrated_on']['trajectory']} -> "
                       f"{tr['judged_on']['trajectory']}), {k} model, {rule}: false alarms "
                       f"{v[rule]['free']['false_alarms']}; moving {_fmt_case(v[rule]['moving'])}; "
                       f"at rest {_fmt_case(v[rule]['rest'])}")
    return out
