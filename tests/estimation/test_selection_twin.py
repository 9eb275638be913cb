"""identification.friction: auto on the twin's joint torque sensor, whose law is known: link
friction f_c sign(qd) + f_v qd on top of the rigid body (twin/drive.py; the twin's stick-slip
holds the friction at rest, so a Coulomb-like shape may come out as sign, a narrow tanh or a
Dahl state with the smallest x_s), sensor noise. auto must find viscous + one Coulomb-like term
on every joint, and no offset, armature, load-dependent or nonlinear-viscous term (a Stribeck
term is allowed on one joint of six). Before the selection left each joint's standstill before
its first motion out and pruned the chosen set to the smallest subset within one SE of the
best, this 10 s, 200 Hz log took coulomb_asym + offset + quad_viscous + stribeck (no viscous)
on joint 3 and an extra stribeck + load_coulomb on joint 4 (docs/friction-terms.md)."""
import dataclasses

import pytest

from conftest import tiny_scenario


@pytest.fixture(scope="module")
def twin_joint_torque():
    from identify.app.acquisition import record
    from identify.app.pipeline import build_model
    from identify.app.trajectories import trajectories
    from identify.scenario.load import scenario_from_dict
    traj = {"harmonics": 4, "period_s": 10.0, "grid": 60, "starts": 1, "max_iter": 80}
    d = tiny_scenario("twin_auto", twin={"seed": 5, "sample_rate_hz": 200},
                      outputs={"plots": False, "report": False},
                      identification={"joint_model": "auto", "friction": "auto"})
    d["trajectories"] = {"excitation": {**traj, "seed": 0}, "validation": {**traj, "seed": 1}}
    scn = scenario_from_dict(d)
    model = build_model(scn)
    recs = record(scn, trajectories(scn, model), model=model, show=False)
    # the joint torque sensor alone (as a Panda / iiwa log): no motor currents
    recs = {k: dataclasses.replace(r, tau_m=None) for k, r in recs.items()}
    return scn, model, recs


def test_auto_finds_the_twins_link_friction_and_no_other_term(twin_joint_torque):
    from identify.app.identification import identify_recordings
    scn, model, recs = twin_joint_torque
    ident = identify_recordings(scn, model, recs, want_truth=False)
    assert ident.signal == "tau_j" and ident.spec.friction == "auto"
    sel = ident.simplified.selection_
    chosen = [c.to_dict()["chosen"] for c in sel.choices]
    for terms in sel.joint_terms:
        kinds = [t.kind for t in terms]
        assert "viscous" in kinds, chosen
        assert sum(k in ("coulomb", "dahl") for k in kinds) == 1, chosen
        assert set(kinds) <= {"viscous", "coulomb", "dahl", "stribeck"}, chosen
    assert sum("stribeck" in [t.kind for t in terms] for terms in sel.joint_terms) <= 1, chosen


#: the twin's friction options per joint (twin/config.py): joint 2 load-dependent link friction
#: (driving 0.10, braking 0.15 of |tau_r|), joint 3 a 40 % Coulomb asymmetry, joint 4 a Stribeck
#: peak (static / Coulomb 2, v_s 0.1 rad/s), joint 5 a Dahl presliding state (z0 = 3e-4 rad)
LAWS = {"stribeck": True, "stribeck_ratio": [1, 1, 1, 2.0, 1, 1],
        "stribeck_velocity_rad_s": [0.1] * 6, "coulomb_asymmetry": [0, 0, 0.4, 0, 0, 0],
        "link_friction_load_driving": [0, 0.1, 0, 0, 0, 0],
        "link_friction_load_braking": [0, 0.15, 0, 0, 0, 0],
        "presliding_rad": [0, 0, 0, 0, 3e-4, 0]}


@pytest.mark.slow
def test_auto_finds_the_twins_other_friction_laws_where_they_are():
    """The same 10 s, 200 Hz joint-torque log with the twin's friction options on some joints:
    auto takes a load-dependent term on joint 2 and on no other joint, a Stribeck term on
    joint 4 and on no other joint, the Dahl state on joint 5. (Measured 2026-12-03: joint 3's
    40 % asymmetry is NOT found on this log -- the best set scored is viscous +
    coulomb_asym(eps=0), but the smaller viscous + Coulomb lies within one SE of it; the
    previous rules did not find it either, and took Stribeck terms on joints 3 and 4 and a load
    term on joint 6.)"""
    from identify.app.acquisition import record
    from identify.app.identification import identify_recordings
    from identify.app.pipeline import build_model
    from identify.app.trajectories import trajectories
    from identify.scenario.load import scenario_from_dict
    traj = {"harmonics": 4, "period_s": 10.0, "grid": 60, "starts": 1, "max_iter": 80}
    d = tiny_scenario("twin_laws", twin={"seed": 5, "sample_rate_hz": 200, **LAWS},
                      outputs={"plots": False, "report": False},
                      identification={"joint_model": "auto", "friction": "auto"})
    d["trajectories"] = {"excitation": {**traj, "seed": 0}, "validation": {**traj, "seed": 1}}
    scn = scenario_from_dict(d)
    model = build_model(scn)
    recs = record(scn, trajectories(scn, model), model=model, show=False)
    recs = {k: dataclasses.replace(r, tau_m=None) for k, r in recs.items()}
    ident = identify_recordings(scn, model, recs, want_truth=False)
    sel = ident.simplified.selection_
    chosen = [c.to_dict()["chosen"] for c in sel.choices]
    kinds = [{t.kind for t in terms} for terms in sel.joint_terms]
    load = [j for j, k in enumerate(kinds) if k & {"load_coulomb", "load_coulomb_4q"}]
    stribeck = [j for j, k in enumerate(kinds) if "stribeck" in k]
    assert load == [1], chosen
    assert stribeck == [3], chosen
    assert "dahl" in kinds[4], chosen
