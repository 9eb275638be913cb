"""Collision thresholds transferred across trajectories on a twin whose drive laws no model
shares (issue 22 item 4): thresholds calibrated on a collision-free run of the excitation
trajectory, judged on the validation trajectory -- no false alarm there, contacts at standstill
and while moving found; and the per-onset bookkeeping of identify.control.detection.onset_detection
against hand-made alarms.

The twin runs speed_efficiency (strong speed-dependent efficiency), load-dependent link friction
and Dahl presliding (docs/twin.md); the observer uses the joint torque sensor and the link-side
model of the twin's URDF and drive file (the constant-coefficient model: the laws above are not
in it)."""
from __future__ import annotations

import numpy as np
import pytest

from identify.backend.contact import Contact
from identify.control.detection import observer_residual, onset_detection, rest_aware
from identify.control.observer import alarms, thresholds

from conftest import ROOT, tiny_scenario

INDEPENDENT = {"reducer_friction_law": "speed_efficiency", "link_friction_load_driving": 0.05,
               "link_friction_load_braking": 0.02, "presliding_rad": 5.0e-4}
GAIN, SPEED = 50.0, 0.02


def test_onset_detection_counts_each_onset_and_the_alarms_outside():
    """Three contacts: one found 4 ms after its onset, one with the alarm already on at its
    onset (delay 0), one missed; an episode 2 s after the last window is a false alarm, one in
    the 5/K_O decay after a window is not."""
    t = np.arange(6000) * 1e-3
    cs = [Contact(link="link3", time_s=ts, duration_s=0.2, force_N=(0.0, 10.0, 0.0))
          for ts in (1.0, 2.0, 3.0)]
    a = np.zeros(t.size, bool)
    a[1004:1100] = True                  # onset 1: +4 ms
    a[1990:2050] = True                  # onset 2: on before and at its onset
    a[3250:3260] = True                  # after window 3 (ends 3.2 s), within 5/K_O = 0.1 s
    a[5200:5210] = True                  # a false alarm
    od = onset_detection(t, a, cs, GAIN)
    assert od.detected.tolist() == [True, True, False]
    assert od.delay_ms[0] == pytest.approx(4.0) and od.delay_ms[1] == 0.0
    assert np.isnan(od.delay_ms[2]) and od.rate == pytest.approx(2 / 3)
    assert od.false_alarms == 2          # the episode starting at 1.99 s is before its window
    assert od.max_delay_ms == pytest.approx(4.0) and od.duration_s == pytest.approx(6.0)
    with pytest.raises(ValueError, match="contact 0 starts at 7.0 s"):
        onset_detection(t, a, [Contact(link="link3", time_s=7.0, duration_s=0.1,
                                       force_N=(0, 0, 1))], GAIN)


@pytest.fixture(scope="module")
def transfer_runs():
    """The runs of the transfer case on the independent-law twin at 1 kHz: calibration on the
    excitation trajectory and a 1.5 s hold of its start pose, a collision-free run of the validation trajectory (2 periods, 8 s),
    contacts at rest (the validation start pose held 0.8 s, 10 N in +x, in -x) and while moving (20 N)."""
    from identify.app.acquisition import backend_arm
    from identify.app.inputs import build_model
    from identify.app.trajectories import get_trajectory
    from identify.app.truth import true_link_parameters
    from identify.control.closed_loop import run_case
    from identify.control.feedforward import feedforward
    from identify.control.joint_model import from_parameters
    from identify.excitation.fourier import FourierTrajectory
    from identify.scenario.load import scenario_from_dict
    scn = scenario_from_dict(tiny_scenario("transfer", twin={**INDEPENDENT, "seed": 0}), base=ROOT)
    robot = build_model(scn)
    T = true_link_parameters(scn, robot)
    model = from_parameters(robot, T.inertial, viscous=T.viscous, coulomb=T.coulomb,
                            motor_side=False, source="URDF + drive file, link side")
    tr = {k: get_trajectory(getattr(scn.trajectories, k), robot,
                            scn.identification.friction_terms, k)[0]
          for k in ("excitation", "validation")}
    val = tr["validation"]
    s = {**scn.backend_settings(), "sample_rate_hz": 1000}
    arm, ff = backend_arm(scn, robot), feedforward(model)
    # one contact per rest episode: a contact at rest moves the friction state (presliding), so
    # after it the rest reference is stale (a detection at rest latches: docs/closed_loop.md)
    rest = [[{"link": "link3", "time_s": 0.5, "duration_s": 0.2, "force_N": [10.0 * sg, 0.0, 0.0]}]
            for sg in (1, -1)]
    hold = FourierTrajectory(q0=val.q0, a=np.zeros((robot.n, 1)), b=np.zeros((robot.n, 1)),
                             wf=2 * np.pi / 0.8)
    moving = [{"link": "link3", "time_s": ts, "duration_s": 0.2, "force_N": [20.0, 0.0, 0.0]}
              for ts in (1.3, 2.1)]
    hold_ex = FourierTrajectory(q0=tr["excitation"].q0, a=np.zeros((robot.n, 1)),
                                b=np.zeros((robot.n, 1)), wf=2 * np.pi / 1.5)
    runs = {"calib": run_case("twin", arm, {**s, "seed": 1}, tr["excitation"], ff),
            "calib_rest": run_case("twin", arm, {**s, "seed": 5}, hold_ex, ff),
            "free": run_case("twin", arm, {**s, "seed": 2}, val, ff, periods=2),
            **{f"rest{i}": run_case("twin", arm, {**s, "seed": 3 + 10 * i, "contacts": c}, hold, ff)
               for i, c in enumerate(rest)},
            "moving": run_case("twin", arm, {**s, "seed": 4, "contacts": moving}, val, ff)}
    contacts = {k: [Contact(link=c["link"], time_s=c["time_s"], duration_s=c["duration_s"],
                            force_N=tuple(c["force_N"])) for c in cs]
                for k, cs in (("rest0", rest[0]), ("rest1", rest[1]), ("moving", moving))}
    return model, runs, contacts


def _judge(model, runs, contacts, detector):
    """name -> OnsetDetection of every run with `detector` (recording -> alarms (N,))."""
    return {k: onset_detection(rec.t, detector(rec), contacts.get(k, []), GAIN,
                               rec.truth.get("tau_ext")) for k, rec in runs.items()}


def _static(model, runs, **rule):
    r_cal, b_cal = observer_residual(model, runs["calib"], "tau_j", GAIN, SPEED)
    th = thresholds(r_cal, band=b_cal, **rule)

    def detector(rec):
        r, b = observer_residual(model, rec, "tau_j", GAIN, SPEED)
        return alarms(r, th.value, b)
    return detector


def test_thresholds_from_one_trajectory_hold_on_another(transfer_runs):
    """Rest-aware thresholds (moving: the excitation run; at rest: a collision-free hold): no
    false alarm on 8 s of the validation trajectory nor around its contacts; every 10 N
    contact at standstill (both directions, the twin's true external torque > 2.5 N*m) found
    within 50 ms, and the 20 N contacts while moving. The same runs judged with thresholds at
    the calibration run's own peak (k_sigma 1, peak factor 1, no margin) raise false alarms on
    the other trajectory (the free run is a real test), and without the friction state at rest
    (static thresholds with the stiction band) the rest contacts are missed."""
    model, runs, contacts = transfer_runs
    ra = rest_aware(model, runs["calib"], runs["calib_rest"], "tau_j", GAIN, SPEED)
    od = _judge(model, runs, contacts, lambda rec: ra.alarms(model, rec, "tau_j", GAIN, SPEED))
    for k in ("calib", "calib_rest", "free"):
        assert od[k].false_alarms == 0, k
    assert od["free"].duration_s == pytest.approx(8.0)
    for k in ("rest0", "rest1", "moving"):
        assert np.all(od[k].tau_ext_peak_Nm > 2.5), (k, od[k].tau_ext_peak_Nm)
        assert od[k].detected.all(), (k, od[k].delay_ms)
        assert od[k].max_delay_ms <= 50.0, (k, od[k].delay_ms)
        assert od[k].false_alarms == 0
    tight = _judge(model, runs, contacts, _static(model, runs, k_sigma=1.0, peak_factor=1.0,
                                                  margin_Nm=0.0))
    assert tight["free"].false_alarms > 0
    static = _judge(model, runs, contacts, _static(model, runs))
    assert not (static["rest0"].detected.all() and static["rest1"].detected.all())
