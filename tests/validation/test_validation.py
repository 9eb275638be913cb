"""Validation: RMS and relative change (paper numbers), torque decomposition (Pinocchio oracle,
exact sums), base-parameter errors against the truth, and the full validate() on synthetic data
from the physical joint-model generator of test_joint_models."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

from identify.model.arm import REFERENCE_URDF
from identify.model.base_params import compute_base_parameters
from identify.estimation.improved import ImprovedModel
from identify.estimation.simplified import SimplifiedModel
from identify.estimation.processing import Processed
from identify.validation.validate import ValidationResult, decompose, relative_change, rms, validate
from identify.validation.parameter_errors import parameter_errors, stage2_errors, true_base_parameters
sys.path.insert(0, str(Path(__file__).resolve().parent))   # the shared synthetic generator
# the model/base fixtures are the joint-model tests' own (same arm, same base parameters)
from test_joint_models import EPS, LOAD_EPS, base, drive_truth, model, sines, synth  # noqa: E402,F401


@pytest.fixture(scope="module")
def fitted(model, base):
    tr = drive_truth()
    d, _ = synth(model, tr, seed=61, variant="opposing", sigma_m=0.05, sigma_j=0.01)
    dv, _ = synth(model, tr, seed=62, variant="opposing", sigma_m=0.05, sigma_j=0.01)
    sm = SimplifiedModel(model, base, coulomb_eps=EPS).fit(d)
    im = ImprovedModel(model, base, friction_term="opposing", coulomb_eps=EPS,
                       load_eps=LOAD_EPS).fit(d)
    return tr, d, dv, sm, im


def test_relative_change_reproduces_paper():
    assert round(relative_change(1.6859, 0.6815), 2) == -59.58
    assert abs(relative_change(1.7045, 1.5762) - (-7.52)) < 0.01
    with pytest.raises(ValueError):
        relative_change(0.0, 1.0)


def test_rms_closed_form():
    pred = np.zeros((4, 2))
    meas = np.array([[1.0, 2.0], [-1.0, 2.0], [1.0, -2.0], [-1.0, 2.0]])
    per_joint, overall = rms(pred, meas)
    np.testing.assert_allclose(per_joint, [1.0, 2.0])
    assert overall == pytest.approx(np.sqrt(2.5))
    with pytest.raises(ValueError, match="shape"):
        rms(pred, meas[:3])


def test_decomposition_gravity_matches_pinocchio(model, base):
    """Simplified model fitted on its own noise-free data: the gravity part is Pinocchio's
    generalized gravity, the parts sum to the prediction, and inertial + coriolis + gravity is
    Pinocchio's RNEA."""
    traj = sines(model.n, 71)
    t = np.arange(600) / 100.0
    q, qd, qdd = traj(t)
    fv, fc = np.full(6, 2.0), np.full(6, 0.7)
    tau = (model.inverse_dynamics(q, qd, qdd) + fv * qd + fc * np.tanh(qd / EPS))
    d = Processed(t=t, q=q, qd=qd, qdd=qdd, tau_j=None, tau_m=tau, rate_hz=100.0,
                  joint_names=list(model.joint_names))
    sm = SimplifiedModel(model, base, estimator="ols", coulomb_eps=EPS).fit(d)
    parts = decompose(model, sm, d)
    assert set(parts) == {"gravity", "inertial", "coriolis", "friction"}
    np.testing.assert_allclose(sum(parts.values()), sm.predict(d), atol=1e-9)
    pm = pin.buildModelFromUrdf(str(REFERENCE_URDF))
    pd = pm.createData()
    idx = np.arange(0, 600, 37)
    g_ref = np.array([pin.computeGeneralizedGravity(pm, pd, q[k]) for k in idx])
    np.testing.assert_allclose(parts["gravity"][idx], g_ref, atol=1e-7)
    rnea = np.array([pin.rnea(pm, pd, q[k], qd[k], qdd[k]) for k in idx])
    rigid = parts["gravity"] + parts["inertial"] + parts["coriolis"]
    np.testing.assert_allclose(rigid[idx], rnea, atol=1e-7)
    np.testing.assert_allclose(parts["friction"], fv * qd + fc * np.tanh(qd / EPS), atol=1e-7)
    M_qdd = np.array([pin.crba(pm, pd, q[k]) @ qdd[k] for k in idx])
    np.testing.assert_allclose(parts["inertial"][idx], M_qdd, atol=1e-7)


def test_decomposition_with_offset_and_armature_terms(model):
    """Extra joint terms get their own parts; the parts still sum to the prediction."""
    terms = ("viscous", "coulomb", "offset", "armature")
    base4 = compute_base_parameters(model, terms=terms, coulomb_eps=EPS, seed=0)
    traj = sines(model.n, 72)
    t = np.arange(600) / 100.0
    q, qd, qdd = traj(t)
    off, arm = np.linspace(-0.3, 0.3, 6), np.full(6, 0.2)
    tau = model.inverse_dynamics(q, qd, qdd) + 2.0 * qd + off + arm * qdd
    d = Processed(t=t, q=q, qd=qd, qdd=qdd, tau_j=None, tau_m=tau, rate_hz=100.0,
                  joint_names=list(model.joint_names))
    sm = SimplifiedModel(model, base4, estimator="ols", terms=terms, coulomb_eps=EPS).fit(d)
    parts = decompose(model, sm, d)
    assert {"offset", "armature"} <= set(parts)
    np.testing.assert_allclose(sum(parts.values()), sm.predict(d), atol=1e-8)
    np.testing.assert_allclose(parts["friction"], 2.0 * qd, atol=1e-6)


def test_improved_decomposition_sums_to_closed_form(model, fitted):
    tr, d, dv, sm, im = fitted
    parts = decompose(model, im, dv)
    total = (parts["gravity"] + parts["inertial"] + parts["coriolis"] + parts["rotor_inertia"]
             + parts["compliance"] + parts["friction"])
    np.testing.assert_allclose(total, im.predict(dv, route="closed_form"), atol=1e-9)
    # the reducer friction always opposes motion in the opposing variant (where it is resolved)
    moving = np.abs(dv.qd) > 0.2
    assert np.all(parts["reducer_friction"][moving] * dv.qd[moving] >= -1e-12)


def test_parameter_errors_closed_form():
    pe = parameter_errors([1.0, 2.2, 0.0, 5.0], [0.1, 0.1, 0.01, 0.0], [1.05, 2.0, 0.0, 5.0],
                          names=["a", "b", "c", "d"])
    np.testing.assert_allclose(pe.rel_error[:2], [100 * -0.05 / 1.05, 10.0])
    assert np.isnan(pe.rel_error[2])
    np.testing.assert_allclose(pe.z[:3], [-0.5, 2.0, 0.0])
    assert pe.z[3] == 0.0
    assert pe.n_within == 4 and pe.n == 4
    pe2 = parameter_errors([1.0], [0.1], [2.0])
    assert pe2.n_within == 0 and "NO" in pe2.table()
    with pytest.raises(ValueError, match="length"):
        parameter_errors([1.0, 2.0], [0.1], [1.0, 2.0])


def test_parameter_errors_nan_std_is_skipped_not_a_miss():
    """A NaN std (not identifiable) used to give z = inf and count as a miss; it is now left out
    of the +-3 sigma count and reported as skipped, while its error is still given."""
    pe = parameter_errors([1.0, 2.2, 7.0], [0.1, 0.1, np.nan], [1.05, 2.0, 5.0],
                          names=["a", "b", "c"])
    assert pe.n == 2 and pe.n_within == 2 and pe.n_skipped == 1
    assert pe.skipped[0][0] == "c" and "NaN" in pe.skipped[0][1]
    assert np.isnan(pe.z[2]) and not pe.within_3sigma[2] and not pe.compared[2]
    assert pe.rel_error[2] == pytest.approx(40.0)
    assert "1 skipped" in pe.table() and "skipped (std nan)" in pe.table()
    d = pe.to_dict()
    assert d["n_skipped"] == 1 and d["skipped"][0]["name"] == "c"
    json.dumps(d, allow_nan=False)


def test_stage2_errors_skip_noise_dominated_and_unidentified():
    """Closed-form check on hand-built stage-2 results: joint1 fully identified (z by hand),
    joint2's J_m/K noise-dominated (std NaN, as identify.estimation.improved marks it), joint3 without
    an identified xi. Only the comparable coefficients are counted; the others are listed with
    their reason."""
    from identify.estimation.stage2 import Stage2Joint, Stage2Result
    names = ["xi_opp", "f_mc", "f_mv", "J_m", "J_m/K"]
    truth = {"xi": [0.1, 0.2, 0.3], "f_mc": [1.0, 2.0, 3.0], "f_mv": [0.5, 0.6, 0.7],
             "J_m": [0.4, 0.5, 0.6], "K": [1e4, 2e4, 3e4]}
    t = np.array([[truth["xi"][j], truth["f_mc"][j], truth["f_mv"][j], truth["J_m"][j],
                   truth["J_m"][j] / truth["K"][j]] for j in range(3)])
    theta = t * 1.1                                   # 10 % off everywhere
    std = np.abs(t) * 0.05                            # -> z = 2 everywhere
    joints = []
    for j in range(3):
        var = std[j] ** 2
        dom = np.zeros(5, bool)
        ok = True
        if j == 1:
            dom[4] = True
            var = var.copy()
            var[4] = np.nan                            # joint_models: cov row/col NaN
        if j == 2:
            ok = False
            var = var.copy()
            var[0] = np.nan
        joints.append(Stage2Joint(f"joint{j + 1}", "opposing", names, theta[j], np.diag(var),
                                  0.1, 100, xi_identified=ok, noise_dominated=dom))
    res = Stage2Result("opposing", joints)
    pe = stage2_errors(res, truth)
    assert pe.names == [f"joint1.{n}" for n in names] + [f"joint2.{n}" for n in names[:4]]
    assert pe.n == 9 and pe.n_within == 9                   # z = 2 each; no inf miss
    np.testing.assert_allclose(pe.z, 2.0)
    assert pe.n_skipped == 6
    reasons = dict(pe.skipped)
    assert "noise-dominated" in reasons["joint2.J_m/K"]
    assert all("xi not identified" in reasons[f"joint3.{n}"] for n in names)
    assert "6 skipped" in pe.table()
    # a NaN std without the noise flag is skipped too (reason: std NaN)
    joints[0].noise_dominated = None
    joints[0].cov = joints[0].cov.copy()
    joints[0].cov[2, 2] = np.nan
    pe2 = stage2_errors(res, truth)
    assert pe2.n == 8 and pe2.n_within == 8
    assert "NaN" in dict(pe2.skipped)["joint1.f_mv"]


def test_validate_on_synthetic(model, base, fitted):
    tr, d, dv, sm, im = fitted
    truth = true_base_parameters(model, base, link_viscous=tr.f_lv, link_coulomb=tr.f_lc)
    res = validate(sm, im, {"excitation": d, "validation": dv}, truth_base=truth)
    assert isinstance(res, ValidationResult)
    for traj in ("excitation", "validation"):
        r = res.rms_overall[traj]
        assert set(r) == {"simplified", "improved_eq24", "improved_closed_form"}
        assert r["improved_closed_form"] < r["improved_eq24"] < r["simplified"]
        assert res.change[traj]["improved_closed_form"] < 0
        # independent recomputation of one number
        e = res.predictions[traj]["simplified"] - res.measured[traj]
        assert r["simplified"] == pytest.approx(np.sqrt(np.mean(e ** 2)))
    # noise on tau_m only: the closed form's residual on the identification run is the noise
    assert res.rms_overall["excitation"]["improved_closed_form"] == pytest.approx(0.05, rel=0.15)
    assert res.friction_comparison["better"] == "opposing"
    pe = res.parameter_errors["stage1"]
    assert pe.n == base.n_base
    assert pe.n_within >= int(0.9 * pe.n)          # ~99.7 % expected within 3 sigma
    text = res.table()
    assert "improved, closed form" in text and "within +-3 sigma" in text
    json.dumps(res.to_dict(), allow_nan=False)
    # a precomputed design gives the same numbers
    res2 = validate(sm, im, {"validation": dv}, designs={"validation": sm.design(dv)})
    for m, v in res2.rms_overall["validation"].items():
        assert v == pytest.approx(res.rms_overall["validation"][m], rel=1e-12)


def test_validate_errors(model, base, fitted):
    tr, d, dv, sm, im = fitted
    with pytest.raises(ValueError, match="at least one"):
        validate(None, None, {"x": d})
    with pytest.raises(ValueError, match="eq24"):
        validate(None, im, {"x": d})
    no_tm = Processed(t=d.t, q=d.q, qd=d.qd, qdd=d.qdd, tau_j=d.tau_j, tau_m=None,
                      rate_hz=d.rate_hz, joint_names=d.joint_names)
    with pytest.raises(ValueError, match="tau_m"):
        validate(sm, im, {"val": no_tm})
    with pytest.raises(ValueError, match="friction term"):
        true_base_parameters(model, base, link_viscous=tr.f_lv)
    res = validate(None, im, {"val": dv}, routes=("closed_form",), decompose_torque=False)
    assert list(res.rms_overall["val"]) == ["improved_closed_form"]


def test_plots(model, base, fitted, tmp_path):
    from identify.validation.plots import (plot_decomposition, plot_parameters, plot_residuals,
                                      plot_stage2, plot_torque_comparison)
    tr, d, dv, sm, im = fitted
    res = validate(sm, im, {"excitation": d, "validation": dv})
    truth = true_base_parameters(model, base, link_viscous=tr.f_lv, link_coulomb=tr.f_lc)
    paths = [plot_torque_comparison(res, "validation", tmp_path / "fig11.png"),
             plot_residuals(res, "excitation", tmp_path / "res.png"),
             plot_parameters(im.names1_, im.params_, im.std_, tmp_path / "p.png", truth=truth),
             plot_stage2(im.stage2_, tmp_path / "s2.png"),
             plot_decomposition(res, "validation", "improved", tmp_path / "dec.png")]
    for p in paths:
        assert p.exists() and p.stat().st_size > 5_000, p     # palette PNGs (issue 13)
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob("*.partial*"))
    with pytest.raises(ValueError, match="no trajectory"):
        plot_torque_comparison(res, "nope", tmp_path / "x.png")
    with pytest.raises(ValueError, match="model"):
        plot_torque_comparison(res, "validation", tmp_path / "x.png", models=["fancy"])
    with pytest.raises(ValueError, match="must match"):
        plot_parameters(["a"], [1.0, 2.0], [0.1, 0.1], tmp_path / "x.png")


# -- integration on the digital twin (harmonic-drive friction, compliance, stick-slip, noise) ----
def _fourier(seed: int, amp: float = 0.25, period: float = 10.0):
    from identify.excitation.fourier import FourierTrajectory
    rng = np.random.default_rng(seed)
    n, H = 6, 5
    q0 = np.array([0, -np.pi / 2, 0, -np.pi / 2, 0, 0]) + rng.uniform(-0.4, 0.4, n)
    return FourierTrajectory.from_free(q0, rng.uniform(-1, 1, (n, H - 1)) * amp,
                                       rng.uniform(-1, 1, (n, H - 1)) * amp, 2 * np.pi / period)


@pytest.fixture(scope="module")
def twin_runs():
    twin = pytest.importorskip("twin")
    from identify.model.arm import REFERENCE_DRIVES
    be = twin.make_backend({"urdf": str(REFERENCE_URDF), "drives": str(REFERENCE_DRIVES)},
                           {"sample_rate_hz": 100.0, "seed": 1})
    try:
        rec = be.run(_fourier(3), periods=2)          # excitation: 2 x 10 s
        rec_v = be.run(_fourier(4))                   # independent validation: 10 s
    finally:
        be.close()
    return rec, rec_v


def test_twin_improved_beats_simplified(model, twin_runs):
    import yaml
    from identify.model.arm import REFERENCE_DRIVES
    from identify.estimation.processing import process
    rec, rec_v = twin_runs
    base = compute_base_parameters(model, terms=("viscous", "coulomb"), seed=0)
    d, dv = process(rec), process(rec_v)
    sm = SimplifiedModel(model, base).fit(d)
    im = ImprovedModel(model, base, friction_term="auto").fit(d)
    # the twin's reducer loss is dissipative (efficiency 1 - xi driving, 1/(1 + xi) back-driven)
    assert im.friction_term_ == "opposing"
    cmp = im.compare_friction_terms_["rms"]
    assert cmp["opposing"] < 0.6 * cmp["linear"]
    joints = yaml.safe_load(REFERENCE_DRIVES.read_text())["joints"]
    truth = true_base_parameters(
        model, base, link_viscous=[j["link_viscous_Nms_rad"] for j in joints],
        link_coulomb=[j["link_coulomb_Nm"] for j in joints])
    g = lambda k: np.array([float(j[k]) for j in joints])          # noqa: E731
    drive = {"xi": g("xi_gf") + g("xi_sf"), "f_mc": g("motor_coulomb_Nm"),
             "f_mv": g("motor_viscous_Nms_rad"), "J_m": g("gear_ratio") ** 2 * g("J_m_kgm2"),
             "K": g("stiffness_Nm_rad")}
    res = validate(sm, im, {"excitation": d, "validation": dv}, truth_base=truth,
                   truth_drive=drive)
    pe2 = res.parameter_errors["stage2"]
    assert pe2.n >= 20 and "stage2" in res.to_dict()["parameter_errors"]
    for traj in ("excitation", "validation"):
        r = res.rms_overall[traj]
        assert r["improved_closed_form"] < r["simplified"], (traj, r)
        assert r["improved_eq24"] < r["simplified"], (traj, r)
    rv = res.rms_overall["validation"]
    assert rv["improved_closed_form"] < rv["improved_eq24"], rv
    # the drive-aware stage 1 sees the link's parameters, the simplified model does not
    pe1, pes = res.parameter_errors["stage1"], res.parameter_errors["simplified"]
    assert pe1.n == pes.n == base.n_base
    assert np.nanmedian(np.abs(pe1.rel_error)) < 0.1 * np.nanmedian(np.abs(pes.rel_error))
    # well-determined rigid-body combinations (rel. std < 5 %) within 10 % of the truth
    rigid = np.array([not nm.startswith(("fv", "fc")) for nm in pe1.names])
    sel = rigid & (pe1.std < 0.05 * np.abs(pe1.estimate))
    assert sel.sum() >= 4
    assert np.all(np.abs(pe1.rel_error[sel]) < 10.0), pe1.rel_error[sel]
    # identified reducer friction of the heavily loaded joints 2-4 near the drive file's xi,
    # rotor inertia and motor friction of joints 3-4 within 15 %
    xi = im.stage2_.params[:, 0]
    np.testing.assert_allclose(xi[1:4], drive["xi"][1:4], atol=0.03)
    for k, key in ((1, "f_mc"), (2, "f_mv"), (3, "J_m")):
        np.testing.assert_allclose(im.stage2_.params[2:4, k], drive[key][2:4], rtol=0.15)
