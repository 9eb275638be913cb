"""Payload identification: the fit against closed-form truth, physical consistency, recovery on a
noise-free twin to 0.1 %, the default-noise goal, and `twinid run` / `twinid fit` with a
``payload:`` section."""
from __future__ import annotations

import json

import numpy as np
import pytest

from identify.control.joint_model import from_parameters
from identify.control.runs import fit_payload, known_arm_model, run_payload
from identify.estimation.payload import PayloadFit, from_physical, payload_regressor, physical
from identify.model.drives import load_drives
from identify.model.payload import payload_in_model_frame
from identify.model.spatial import pseudo_inertia
from identify.scenario.spec import Payload, PayloadSpec

from conftest import ROOT, tiny_scenario

PAYLOAD = {"mass_kg": 1.5, "com_m": [0.01, -0.02, 0.05],
           "inertia_kgm2": [0.004, 0.005, 0.003, 0.0002, 0.0, -0.0001]}


def test_physical_round_trip_and_model_frame(ref_model):
    """from_physical / physical invert each other and agree with identify.model.payload (the
    twin's truth path) in the flange frame."""
    phi = from_physical(**PAYLOAD)
    d = physical(phi)
    assert d["mass_kg"] == pytest.approx(1.5, rel=1e-14)
    np.testing.assert_allclose(d["com_m"], PAYLOAD["com_m"], atol=1e-15)
    np.testing.assert_allclose(d["inertia_kgm2"], PAYLOAD["inertia_kgm2"], atol=1e-15)
    truth = payload_in_model_frame(ROOT / "assets" / "cobot6.urdf", ref_model, Payload(
        mass_kg=1.5, com_m=tuple(PAYLOAD["com_m"]), inertia_kgm2=tuple(PAYLOAD["inertia_kgm2"])))
    np.testing.assert_allclose(phi, truth, atol=1e-15)
    assert np.linalg.eigvalsh(pseudo_inertia(phi))[0] > 0


def test_fit_exact_and_consistent(ref_model):
    """Exact data -> exact parameters; a noisy fit whose least-squares solution is not physical
    is projected onto the consistent set (pseudo-inertia PSD, mass > 0)."""
    rng = np.random.default_rng(0)
    q, qd, qdd = rng.normal(size=(300, 6)), rng.normal(size=(300, 6)), rng.normal(size=(300, 6))
    Y = payload_regressor(ref_model, q, qd, qdd)
    phi = from_physical(**PAYLOAD)
    f = PayloadFit().fit(Y, Y @ phi)
    np.testing.assert_allclose(f.params_, phi, rtol=1e-9, atol=1e-12)
    assert not f.projected_
    # a near point mass at the flange origin plus noise: the LS inertia goes negative
    tiny = from_physical(0.2, [0.0, 0.0, 0.0], [1e-7, 1e-7, 1e-7, 0, 0, 0])
    y = Y @ tiny + 0.5 * rng.normal(size=(300, 6))
    f = PayloadFit().fit(Y, y)
    assert np.linalg.eigvalsh(pseudo_inertia(np.linalg.lstsq(Y.reshape(-1, 10), y.reshape(-1),
                                                             rcond=None)[0]))[0] < 0
    assert f.projected_ and np.linalg.eigvalsh(pseudo_inertia(f.params_))[0] > -1e-7
    assert f.params_[0] > 0 and np.all(f.std_ > 0)


def _arm(ref_model):
    d = load_drives(ROOT / "assets" / "cobot6_drives.yaml", list(ref_model.joint_names))
    return from_parameters(ref_model, ref_model.params, viscous=d.array("link_viscous"),
                           coulomb=d.array("link_coulomb"),
                           stage2={"xi_opp": d.array("xi"), "f_mc": d.array("motor_coulomb"),
                                   "f_mv": d.array("motor_viscous"), "J_m": d.array("J_r")},
                           source="truth")


def _arm_dict(payload):
    return {"urdf": str(ROOT / "assets" / "cobot6.urdf"),
            "drives": str(ROOT / "assets" / "cobot6_drives.yaml"), "payload": payload}


@pytest.mark.slow
def test_noise_free_twin_recovers_the_payload(ref_model):
    """Noise-free twin at 1 kHz, the arm known: mass within 0.1 %, CoM within 0.1 mm; the same
    fit with the arm's friction left out is visibly worse (so the test can tell)."""
    spec = PayloadSpec(period_s=6.0)
    quiet = {"sample_rate_hz": 1000, "encoder_noise_rad": 0.0, "torque_noise_Nm": 0.0,
             "current_noise_A": 0.0, "velocity_noise_rad_s": 0.0}
    arm = _arm(ref_model)
    res, tr, rec = run_payload(spec, "twin", _arm_dict(PAYLOAD), quiet, arm, {}, PAYLOAD)
    assert abs(res.mass_error_percent) <= 0.1, res.mass_error_percent
    assert res.com_error_m <= 1e-4, res.com_error_m
    assert tr.duration == pytest.approx(6.0)
    moving = np.ptp(rec.q_cmd, axis=0) > 0
    assert moving.tolist() == [False, False, False, True, True, True]     # wrist only
    bare = from_parameters(ref_model, ref_model.params)
    worse = fit_payload(spec, bare, rec, {}, PAYLOAD)
    assert abs(worse.mass_error_percent) > 0.5 and worse.com_error_m > 5e-3


@pytest.mark.slow
def test_run_and_fit_with_a_payload_section(tmp_path):
    """`twinid run` (default noise, 10 s wrist excitation): mass within 2 %, CoM within 5 mm,
    metrics.json payload section; then `twinid fit` of the recorded NPZ with the same payload
    section and the arm given as a URDF gives the same numbers (the log path)."""
    from identify.app.pipeline import fit_scenario, run_scenario
    from identify.scenario.load import scenario_from_dict
    base = tiny_scenario("payload_test")
    base["arm"]["payload"] = PAYLOAD
    base["twin"] = {"sample_rate_hz": 100, "seed": 3}
    base["processing"] = {"smooth_passes": 20}
    base["payload"] = {"period_s": 10.0}
    base["outputs"] = {"dir": str(tmp_path / "runs")}
    res = run_scenario(scenario_from_dict(base, base=ROOT), out=tmp_path / "run")
    p = json.loads((res.folder / "metrics.json").read_text())["payload"]
    assert abs(p["errors"]["mass_percent"]) <= 2.0 and p["errors"]["com_m"] <= 0.005
    assert p["truth"]["mass_kg"] == 1.5 and p["std"]["mass_kg"] > 0 and p["goal"]["met"]
    # the std cover the error (they are the block jackknife's where larger: before, the noise
    # std, sigma^2 (A^T A)^-1 of serially correlated filtered data, put the mass 6 sigma off)
    z_mass = (p["identified"]["mass_kg"] - 1.5) / p["std"]["mass_kg"]
    assert abs(z_mass) <= 3.0 and p["jackknife_ratio"] > 1.0, (z_mass, p["jackknife_ratio"])
    assert "jackknife" in p["std_note"]
    # from the log: arm given by a URDF with the drive file's link friction in <dynamics>
    from identify.model.urdf_export import export_urdf
    from identify.app.inputs import build_model
    scn = scenario_from_dict(base, base=ROOT)
    model = build_model(scn)
    arm = _arm(model)
    export_urdf(model, tmp_path / "arm.urdf", model.params, viscous=arm.viscous,
                coulomb=arm.coulomb)
    fit = dict(base)
    fit["payload"] = {"period_s": 10.0, "arm_model": str(tmp_path / "arm.urdf")}
    fit["fit"] = {"excitation": {"file": str(res.folder / "recordings" / "payload.npz")}}
    res2 = fit_scenario(scenario_from_dict(fit, base=ROOT), out=tmp_path / "fit")
    p2 = json.loads((res2.folder / "metrics.json").read_text())["payload"]
    assert p2["truth"] is None and p2["arm_source"].endswith("arm.urdf")
    assert p2["identified"]["mass_kg"] == pytest.approx(p["identified"]["mass_kg"], rel=1e-6)


def test_payload_section_needs_the_arm_off_the_twin(ref_model):
    with pytest.raises(ValueError, match="payload.arm_model"):
        known_arm_model(PayloadSpec(), ref_model, None)
