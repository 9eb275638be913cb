"""The product's closed_loop.collision with thresholds that transfer (issue 22 item 4), against
the twin's ground truth (the contact force and times it applied, its true external joint
torque): identify.control.runs.run_loop calibrates on a collision-free run of the excitation
trajectory and a hold of its start pose, and judges the validation trajectory's collision-free
run, its contact while moving and a contact while the arm holds its start pose.

The twin runs its default (matched) law; the observer's model is the twin's true model (what a
perfect identification exports), so what is judged is the thresholds' transfer, not the
identification. Short trajectories (tests/conftest.py tiny_scenario: 4 s) at 1 kHz."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from identify.control.transfer import evaluate_transfer

from conftest import ROOT, tiny_scenario

MOVING = {"link": "link3", "time_s": 2.0, "duration_s": 0.2, "force_N": [0.0, 20.0, 0.0]}
REST = {"link": "link3", "time_s": 0.5, "duration_s": 0.2, "force_N": [20.0, 0.0, 0.0]}


@pytest.fixture(scope="module")
def loop():
    """(LoopResults, trajectories, scenario, models) of run_loop on the twin (seed 0)."""
    from identify.app.acquisition import backend_arm
    from identify.app.inputs import build_model
    from identify.app.trajectories import get_trajectory
    from identify.app.truth import true_link_parameters
    from identify.control.runs import loop_models, run_loop, true_joint_model
    from identify.scenario.load import scenario_from_dict
    d = tiny_scenario("transfer_product")
    d["closed_loop"] = {"sample_rate_hz": 1000, "collision": {
        "contact": MOVING, "rest_contact": REST, "compare_cad": False, "free_periods": 2}}
    scn = scenario_from_dict(d, base=ROOT)
    robot = build_model(scn)
    truth = true_link_parameters(scn, robot)
    tr = {k: get_trajectory(getattr(scn.trajectories, k), robot,
                            scn.identification.friction_terms, k)[0]
          for k in ("excitation", "validation")}
    models = loop_models(robot, identified=true_joint_model(robot, truth), truth=truth)
    res = run_loop(scn.closed_loop, "twin", backend_arm(scn, robot),
                   {**scn.backend_settings(), "seed": 0}, tr["validation"], models,
                   robot.joint_names, calib_trajectory=tr["excitation"])
    return res, tr, scn, models


def test_transfer_runs_are_the_ones_stated(loop):
    """The calibration ran the excitation trajectory, the rest runs held the stated poses still,
    the twin applied the rest contact at the stated time, and the judged runs are the validation
    trajectory's."""
    res, tr, scn, _ = loop
    t = res.transfer["identified"]
    assert (t.calibrated_on, t.judged_on) == ("excitation", "validation")
    cal = res.recordings["transfer_calibration"]
    assert np.allclose(cal.q_cmd[0], tr["excitation"].q0, atol=1e-6)
    assert np.ptp(cal.q_cmd, axis=0).max() > 0.1
    for k, q0, T in (("transfer_rest_calibration", tr["excitation"].q0, 3.0),
                     ("transfer_rest_contact", tr["validation"].q0, 1.0)):
        rec = res.recordings[k]
        assert np.ptp(rec.q_cmd, axis=0).max() < 1e-9 and np.allclose(rec.q_cmd[0], q0)
        assert rec.t[-1] - rec.t[0] == pytest.approx(T, abs=2e-3)
    rest = res.recordings["transfer_rest_contact"]
    tex = np.abs(rest.truth["tau_ext"]).max(axis=1)
    inside = (rest.t >= 0.5) & (rest.t < 0.7)
    assert tex[inside].min() > 1.0 and tex[~inside & (rest.t < 0.49)].max() == 0.0
    assert t.seeds == {"transfer_calibration": 3, "transfer_rest_calibration": 4,
                       "transfer_rest_contact": 5, "transfer_free": 6}
    free = res.recordings["transfer_free"]        # free_periods 2: the judged trajectory twice
    assert np.allclose(free.q_cmd[0], tr["validation"].q0, atol=1e-6)
    assert free.t[-1] - free.t[0] == pytest.approx(8.0, abs=2e-3)


def _judged(loop, signal):
    """evaluate_transfer of the identified model on the loop's recordings with observer `signal`."""
    res, _, scn, models = loop
    col = dataclasses.replace(scn.closed_loop.collision, signal=signal)
    rec = res.recordings
    return evaluate_transfer(models["identified"], rec, rec["collision_free"],
                             rec["collision_contact"], res.transfer["identified"].contact, col,
                             name="identified", calibrated_on="excitation",
                             judged_on="validation")


@pytest.mark.parametrize("signal", ["tau_m", "tau_j"])
def test_thresholds_from_the_excitation_hold_on_the_validation_trajectory(loop, signal):
    """Thresholds from the excitation run judged on the validation trajectory, either rule: no
    false alarm on its collision-free run (2 periods, 8 s) nor around its contacts; its 20 N contact while moving
    (the twin's true external torque > 1 N*m) found within 50 ms; the rest thresholds are the
    rest calibration's, not the moving ones."""
    t = _judged(loop, signal)
    for rule in ("static", "rest_aware"):
        d = t.detections[rule]
        assert d["free"].false_alarms == 0 and d["free"].duration_s == pytest.approx(8.0)
        assert d["moving"].tau_ext_peak_Nm[0] > 1.0
        assert d["moving"].detected.all() and d["moving"].max_delay_ms <= 50.0, rule
        assert d["moving"].false_alarms == 0 and d["rest"].false_alarms == 0
    assert not np.allclose(t.thresholds.rest.value, t.thresholds.moving.value)


def test_contact_at_rest_found_only_with_rest_aware_thresholds(loop):
    """Motor-torque observer (the product's default): the 20 N contact at rest (the twin's true
    external torque > 2.5 N*m on some joint) is found by the rest-aware thresholds, inside the
    contact window, and missed by the static ones (their stiction band covers any friction at
    standstill: 2F wide)."""
    t = _judged(loop, "tau_m")
    st, ra = t.detections["static"]["rest"], t.detections["rest_aware"]["rest"]
    assert ra.tau_ext_peak_Nm[0] > 2.5
    assert ra.detected.all() and ra.max_delay_ms < 200.0, ra.delay_ms
    assert not st.detected.any(), st.delay_ms


def test_contact_at_rest_with_the_torque_sensor(loop):
    """Joint torque sensor: the 20 N contact at rest found by both rules, the rest-aware one
    within 50 ms and no later than the static one (the rest-referenced residual does not carry
    the held friction)."""
    t = _judged(loop, "tau_j")
    st, ra = t.detections["static"]["rest"], t.detections["rest_aware"]["rest"]
    assert ra.detected.all() and ra.max_delay_ms <= 50.0
    assert not st.detected.all() or ra.delay_ms[0] <= st.delay_ms[0]


def test_typed_results_round_trip_into_metrics_json(loop):
    """metrics.json ``collision_transfer`` (identify.outputs.render.control_sections) holds the
    typed TransferResult's figures as they are, says what calibrated and what was judged, and
    the report / console render them."""
    from identify.outputs.render import console_summary, control_sections
    from identify.outputs.results import ControlOutcome
    from identify.outputs.transfer import transfer_blocks
    from pathlib import Path
    res = loop[0]
    m = json.loads(json.dumps(control_sections(ControlOutcome(
        collision=res.collision, collision_transfer=res.transfer))))
    tm = m["collision_transfer"]
    t = res.transfer["identified"]
    assert tm["calibrated_on"]["trajectory"] == "excitation"
    assert tm["judged_on"]["trajectory"] == "validation"
    assert "3 s hold of its start pose" in tm["calibrated_on"]["runs"]
    assert tm["judged_on"]["rest_contact"] == REST and tm["judged_on"]["contact"] == MOVING
    assert tm["signal"] == "tau_m" and tm["settle_s"] == 0.1
    mm = tm["models"]["identified"]
    assert mm["threshold_moving_Nm"] == t.thresholds.moving.value.tolist()
    assert mm["threshold_rest_Nm"] == t.thresholds.rest.value.tolist()
    for rule, cases in t.detections.items():
        for case, od in cases.items():
            got = mm[rule][case]
            assert got["false_alarms"] == od.false_alarms and got["duration_s"] == od.duration_s
            if case != "free":
                assert got["detected"] == bool(od.detected[0]) and got["onset_s"] == od.onsets_s[0]
                assert (got["delay_ms"] is None) == np.isnan(od.delay_ms[0])
                assert got["delay_ms"] is None or got["delay_ms"] == od.delay_ms[0]
    assert mm["static"]["rest"]["detected"] is False and mm["rest_aware"]["rest"]["detected"]
    assert mm["goal_met"]["static"] is False
    assert m["collision"]["calibrated_on"].startswith("a collision-free run of the same trajectory")
    rows = transfer_blocks(tm)[1][2]
    assert [r[1] for r in rows] == ["static", "rest_aware"] and rows[0][4] == "missed"
    text = console_summary(m, Path("runs/x"))
    assert "collision (excitation -> validation), identified model, static: false alarms 0" in text
