"""Excitation design beyond cond: D / A-optimal objectives (exact gradients), the predicted std
of the base parameters (against Monte Carlo least squares), information already held, and the
collision / motor-torque constraints (against the capsule model, PyBullet and the hardware's own
motor-torque bound)."""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from identify.excitation.__main__ import load_model
from identify.backend.clearance import check_clearance
from identify.excitation import ExcitationProblem, optimize_excitation
from identify.excitation.cache import problem_key
from identify.excitation.fourier import FourierTrajectory
from identify.excitation.conditioning import base_parameters, base_regressor
from identify.excitation.information import design_report, information_of
from identify.excitation.objective import build_nlp, collision_model
from identify.excitation.parametrization import to_x, random_trajectory
from identify.excitation.problem import resolve_start

SIGMA = (0.05, 0.2)


@pytest.fixture(scope="module")
def model():
    return load_model(None, ["joint2", "joint3"])


@pytest.fixture(scope="module")
def problem():
    return ExcitationProblem(harmonics=3, n_grid=40, start_pose=(-math.pi / 2, 0.0),
                             noise_std=SIGMA, run_samples=400)


def _theta(model, pr):
    bp = base_parameters(model, pr)
    p = np.concatenate([model.inertial_parameters(), np.full(2 * model.n, 0.3)])
    return tuple(bp.project(p))


@pytest.mark.parametrize("objective", ["d_optimal", "a_optimal"])
def test_information_objective_gradient_matches_finite_differences(model, problem, objective):
    pr = replace(problem, objective=objective, start_pose=(None, 0.0), collision_margin=None)
    pr = replace(pr, theta_prior=_theta(model, pr))
    bp = base_parameters(model, pr)
    F0 = 0.3 * np.eye(len(bp.independent))             # information already held
    nlp = build_nlp(model, pr, bp, information0=F0)
    _, free = resolve_start(model, pr)
    x = to_x(random_trajectory(model, pr, np.random.default_rng(2), fill=0.8), free)
    obj = nlp.keep.obj
    g = obj.gradient(x)
    h = 1e-6
    fd = np.array([(obj.value(x + h * e) - obj.value(x - h * e)) / (2 * h) for e in np.eye(x.size)])
    np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-6 * np.abs(g).max())
    # the value is the documented criterion of the weighted information, computed independently
    tr = random_trajectory(model, pr, np.random.default_rng(2), fill=0.8)
    t = np.arange(pr.n_grid) * (tr.period / pr.n_grid)
    W = base_regressor(model, bp, pr.terms, *tr.evaluate(t), coulomb_eps=pr.coulomb_eps)
    Wn = W / np.tile(np.asarray(SIGMA), pr.n_grid)[:, None]
    F = F0 + (pr.run_samples / pr.n_grid) * Wn.T @ Wn
    if objective == "d_optimal":
        ref = -np.linalg.slogdet(F)[1] / F.shape[0]
    else:
        s = np.abs(np.asarray(pr.theta_prior))
        s = np.maximum(s, 1e-3 * s.max())
        ref = math.log(np.sum(np.diag(np.linalg.inv(F)) / s ** 2))
    assert obj.value(x) == pytest.approx(ref, rel=1e-9)


def test_predicted_std_matches_monte_carlo_least_squares(model, problem):
    """design_report's std is the spread of weighted least squares over noise draws."""
    bp = base_parameters(model, problem)
    tr = random_trajectory(model, problem, np.random.default_rng(4), fill=0.8)
    N = 400
    rep = design_report(model, tr, bp, problem.terms, SIGMA, N, n_check=N)
    t = np.arange(N) * (tr.period / N)
    W = base_regressor(model, bp, problem.terms, *tr.evaluate(t))
    sig = np.tile(np.asarray(SIGMA), N)
    theta = np.random.default_rng(0).normal(size=W.shape[1])
    rng = np.random.default_rng(1)
    est = []
    for _ in range(400):
        y = W @ theta + sig * rng.standard_normal(sig.size)
        est.append(np.linalg.lstsq(W / sig[:, None], y / sig, rcond=None)[0])
    realized = np.std(est, axis=0, ddof=1)
    assert np.median(np.abs(realized / rep.std - 1)) < 0.06
    assert np.all(np.abs(realized / rep.std - 1) < 0.25)
    assert rep.cond == pytest.approx(np.linalg.cond(W), rel=1e-9)
    assert rep.cond_scaled <= rep.cond


def test_d_optimal_beats_cond_objective_on_its_criterion(model, problem):
    pr = replace(problem, theta_prior=_theta(model, problem))
    bp = base_parameters(model, pr)
    out = {}
    for obj in ("cond", "d_optimal", "a_optimal"):
        res = optimize_excitation(model, replace(pr, objective=obj), seed=0, n_starts=1)
        out[obj] = design_report(model, res.trajectory, bp, pr.terms, SIGMA, 400,
                                 theta_prior=pr.theta_prior)
    assert out["d_optimal"].logdet > out["cond"].logdet
    a = {k: float(np.sum(v.rel_std ** 2)) for k, v in out.items()}
    assert a["a_optimal"] < a["cond"]


def test_information_already_held_is_used(model, problem):
    """A second trajectory optimized given the first one's information gives a better combined
    estimate (A-criterion) than the same optimization ignoring it."""
    pr = replace(problem, objective="a_optimal", theta_prior=_theta(model, problem))
    bp = base_parameters(model, pr)
    first = optimize_excitation(model, replace(pr, objective="cond"), seed=3, n_starts=1).trajectory
    # what is held: a long recording in which the elbow hardly moved (its parameters are weak)
    first = FourierTrajectory.from_free(first.q0, first.a[:, 1:] * [[1.0], [0.1]],
                                        first.b[:, 1:] * [[1.0], [0.1]], first.wf)
    t = np.arange(2000) * (first.period / 2000)
    F0 = information_of(model, bp, pr.terms, *first.evaluate(t), SIGMA)
    s = np.abs(np.asarray(pr.theta_prior))
    s = np.maximum(s, 1e-3 * s.max())

    def combined(tr):
        return float(np.sum(design_report(model, tr, bp, pr.terms, SIGMA, 400,
                                          information0=F0).std ** 2 / s ** 2))
    alone = optimize_excitation(model, pr, seed=0, n_starts=1).trajectory
    joint = optimize_excitation(model, pr, seed=0, n_starts=1, information0=F0).trajectory
    assert combined(joint) < 0.9 * combined(alone)
    k0 = problem_key(model, pr, bp, 0, 1)
    assert problem_key(model, pr, bp, 0, 1, information0=F0) != k0
    assert problem_key(model, replace(pr, obstacles=({"type": "plane", "normal": [0, 0, 1],
                                                       "point_m": [0, 0, 0.3]},)), bp, 0, 1) != k0


def test_obstacle_constraint_holds_where_the_unconstrained_optimum_collides(model, problem):
    """A table plane the cond-optimal trajectory goes through: with the obstacle declared the
    optimized trajectory keeps the margin on the capsules (dense grid) and in PyBullet."""
    free = replace(problem, collision_margin=None)
    base = optimize_excitation(model, free, seed=0, n_starts=1).trajectory
    t = np.arange(400) * (base.period / 400)
    ac = collision_model(model, replace(problem, obstacles=()))
    A, B = ac.endpoints(base.evaluate(t)[0])
    lowest = float(np.min(np.minimum(A[..., 2], B[..., 2])[:, [c.body >= 2 for c in ac.capsules]]))
    height = lowest + 0.1            # 10 cm above the lowest capsule axis point of that optimum
    table = ({"type": "plane", "name": "table", "normal": [0, 0, 1], "point_m": [0, 0, height]},)
    pr = replace(problem, obstacles=table, collision_margin=0.02)
    res = optimize_excitation(model, pr, seed=0, n_starts=1)
    tr = res.trajectory
    caps = collision_model(model, pr)
    d = caps.distances(tr.evaluate(np.arange(4000) * (tr.period / 4000))[0])
    assert d.min() >= 0.02 - 1e-6
    assert tr.meta["collision"]["obstacles"][0]["name"] == "table"
    rep = check_clearance(model.source, model.joint_names, tr)      # margin, obstacles from meta
    assert rep.margin == 0.02 and rep.min_distance.min() >= 0.02
    with pytest.raises(ValueError, match="obstacle 'table'"):
        check_clearance(model.source, model.joint_names, base, obstacles=table, margin=0.02)


def test_motor_torque_constraint_matches_the_hardware_bound(model, problem):
    """With a heavy payload the cond-optimal trajectory exceeds the drives' limits under the
    hardware's own bound (robot.torque_bound); with torque_limit it stays within them."""
    from identify.excitation.torque import torque_limit_from_drives
    from identify.model.drives import load_drives
    from identify.model.payload import payload_in_model_frame
    from identify.model.robot_model import reference_paths
    from identify.scenario.spec import Payload
    from robot.torque_bound import TorqueBound
    paths = reference_paths()
    drives = load_drives(paths["drives"], list(model.joint_names))
    payload = Payload(mass_kg=6.0, com_m=(0.0, 0.0, 0.2))
    p10 = payload_in_model_frame(paths["urdf"], model, payload)
    tau_max = np.array([70.0, 40.0])
    tl = torque_limit_from_drives(drives, tau_max, p10)
    bound = TorqueBound(model=model.with_params(model.params + np.r_[np.zeros(10), p10]),
                        f_mc=drives.array("motor_coulomb"), f_mv=drives.array("motor_viscous"),
                        f_lc=drives.array("link_coulomb"), f_lv=drives.array("link_viscous"),
                        xi=drives.array("xi"), J_r=drives.array("J_r"), margin_frac=0.25,
                        margin_coulomb=1.0)

    def worst(tr):
        t = np.arange(2000) * (tr.period / 2000)
        return float(np.max(bound(*tr.evaluate(t)) / tau_max))
    plain = optimize_excitation(model, problem, seed=0, n_starts=1).trajectory
    assert worst(plain) > 1.0
    res = optimize_excitation(model, replace(problem, torque_limit=tl), seed=0, n_starts=1)
    assert worst(res.trajectory) <= 1.0
    # the optimizer's own report (10x its grid) is the hardware bound
    assert max(res.trajectory.meta["torque_ratio_max"]) == pytest.approx(worst(res.trajectory),
                                                                          rel=1e-3)


@pytest.mark.parametrize("excitation, validation", [("auto", "on"), ("on", "off"), ("on", "auto")])
def test_each_trajectory_has_its_own_torque_limit(tmp_path, monkeypatch, ref_model, excitation,
                                                  validation):
    """trajectories.<label>.torque_limit decides for that trajectory (on the twin, auto = off).
    The excitation's used to decide for both: validation: on was silently ignored."""
    from conftest import tiny_scenario
    from identify.app import trajectories as T
    from identify.scenario.load import scenario_from_dict
    d = tiny_scenario("torque")
    d["trajectories"]["excitation"]["torque_limit"] = excitation
    d["trajectories"]["validation"]["torque_limit"] = validation
    scn = scenario_from_dict(d, file=str(tmp_path / "s.yaml"), base=tmp_path)
    seen = {}

    def fake(spec, model, terms, label, ctx=None, information0=None):
        seen[label] = T.make_problem(spec, model, terms, ctx).torque_limit is not None
        return None, None
    monkeypatch.setattr(T, "get_trajectory", fake)
    T.trajectories(scn, ref_model)
    assert seen == {"excitation": excitation == "on", "validation": validation == "on"}


@pytest.mark.slow
def test_hardware_accepts_the_torque_limited_design(tmp_path, capsys, monkeypatch, model_cache):
    """The quickstart's trajectories designed for backend: hardware (torque_limit auto = on) and
    checked by the hardware backend's dry run, which evaluates the motor-torque bound every
    control cycle (1 kHz): the optimizer held it on 10x its grid only, and the hardware refused
    joint 2 at 110.001 N*m of 110 (exit 4). ~10 s (two optimizations, cold trajectory cache)."""
    import yaml
    from identify.app.cli import main
    from identify.model.robot_model import reference_paths
    monkeypatch.setenv("TWINID_CACHE", str(model_cache))
    paths = reference_paths()
    root = Path(__file__).resolve().parents[2]
    d = yaml.safe_load((root / "scenarios" / "quickstart.yaml").read_text())
    d["arm"] = {"urdf": str(paths["urdf"]), "drives": str(paths["drives"]),
                "description": str(root / "assets" / "cobot6.yaml")}
    d.pop("twin")
    d.update(backend="hardware", hardware={"dry_run": True})
    d["outputs"] = {"plots": False, "report": False, "urdf": False}
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    rc = main(["-q", "run", str(f), "--out", str(tmp_path / "out")])
    assert rc == 0, capsys.readouterr().err


@pytest.mark.parametrize("joint", ["joint1", "joint6"])
def test_one_moving_joint_has_no_pair_to_keep_apart(joint):
    """A one-joint arm without obstacles has no link pair the collision constraints could check:
    the design runs without them (it crashed on the empty distance array)."""
    arm = load_model(None, [joint])
    pr = ExcitationProblem(harmonics=3, n_grid=40, wf=math.pi / 2, start_pose=(0.0,),
                           collision_margin=0.02)
    res = optimize_excitation(arm, pr, seed=0, n_starts=1, cache_dir=None)
    assert res.trajectory.q0.shape == (1,) and np.isfinite(res.cond)
    assert collision_model(arm, pr) is None
