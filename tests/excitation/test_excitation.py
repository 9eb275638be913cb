"""Excitation optimization on a small problem (2 joints of the reference arm, 3 harmonics)."""
import math
from dataclasses import replace

import numpy as np
import pytest

from identify.excitation.conditioning import CondEvaluator, base_parameters, check_trajectory, limit_ratios, trajectory_cond
from identify.excitation.problem import ExcitationInfeasible, ExcitationProblem, scaled_limits
from identify.excitation.parametrization import free_basis, random_feasible_trajectory, random_trajectory
from identify.excitation.__main__ import load_model, main
from identify.excitation.optimizer import optimize_excitation, validation_trajectory
from identify.excitation.fourier import FourierTrajectory


@pytest.fixture(scope="module")
def model():
    return load_model(None, ["joint2", "joint3"])


@pytest.fixture(scope="module")
def problem():
    return ExcitationProblem(harmonics=3, n_grid=40, start_pose=(-math.pi / 2, 0.0))


@pytest.fixture(scope="module")
def result(model, problem, tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    return optimize_excitation(model, problem, seed=0, n_starts=2, cache_dir=cache), cache


def test_free_basis_matches_fourier_trajectory():
    rng = np.random.default_rng(0)
    H, wf = 4, 0.1 * math.pi
    x = rng.standard_normal(2 * (H - 1))
    tr = FourierTrajectory.from_free([0.3], x[None, :H - 1], x[None, H - 1:], wf)
    t = rng.uniform(0, 40, 25)
    P, V, A = free_basis(H, wf, t)
    q, qd, qdd = tr.evaluate(t)
    np.testing.assert_allclose(0.3 + P @ x, q[:, 0], atol=1e-12)
    np.testing.assert_allclose(V @ x, qd[:, 0], atol=1e-12)
    np.testing.assert_allclose(A @ x, qdd[:, 0], atol=1e-12)


def test_reference_limits_come_from_the_arm(model, problem):
    lim = scaled_limits(model, problem)
    # cobot6.yaml: joint3 +-170 deg, 180 deg/s, 600 deg/s^2; limit_scale 0.8
    assert lim["q_max"][1] == pytest.approx(math.radians(0.8 * 170))
    assert lim["qd_max"][1] == pytest.approx(math.radians(0.8 * 180))
    assert lim["qdd_max"][0] == pytest.approx(math.radians(0.8 * 600))


def test_optimized_trajectory_is_feasible_on_a_10x_denser_grid(model, problem, result):
    res, _ = result
    tr = res.trajectory
    check_trajectory(model, tr, res.limits_used, 10 * problem.n_grid)   # raises if violated
    check_trajectory(model, tr, res.limits_used, 10 * problem.n_grid + 7)
    r = limit_ratios(tr, res.limits_used, 4000)
    assert max(v.max() for v in r.values()) <= 1.0 + 1e-9
    # the optimizer uses the room it has: some limit is (nearly) active
    assert max(v.max() for v in r.values()) > 0.9
    q, qd, qdd = tr.evaluate(np.array([0.0, tr.period]))
    np.testing.assert_allclose(q, [[-math.pi / 2, 0.0]] * 2, atol=1e-12)
    np.testing.assert_allclose(qd, 0.0, atol=1e-12)
    np.testing.assert_allclose(qdd, 0.0, atol=1e-12)


def test_cond_is_the_plain_base_regressor_cond_and_beats_random(model, problem, result):
    res, _ = result
    bp = base_parameters(model, problem)
    # independent path: numpy regressor + numpy friction columns, exact sign
    assert res.cond == pytest.approx(trajectory_cond(model, res.trajectory, bp, problem.terms,
                                                     10 * problem.n_grid), rel=1e-9)
    assert res.n_base == bp.n_base
    rng = np.random.default_rng(7)
    ev = CondEvaluator(model, bp, problem.terms, 10 * problem.n_grid)
    rand = [ev(random_feasible_trajectory(model, problem, rng)) for _ in range(30)]
    assert res.cond < 0.9 * min(rand)


def test_deterministic_and_cached(model, problem, result):
    res, cache = result
    again = optimize_excitation(model, problem, seed=0, n_starts=2, cache_dir=cache)
    assert again.from_cache and again.cache_file == res.cache_file
    np.testing.assert_array_equal(again.trajectory.a, res.trajectory.a)
    assert again.cond == res.cond
    fresh = optimize_excitation(model, problem, seed=0, n_starts=2)   # no cache: re-solve
    assert not fresh.from_cache
    np.testing.assert_allclose(fresh.trajectory.a, res.trajectory.a, rtol=0, atol=1e-12)
    np.testing.assert_allclose(fresh.trajectory.b, res.trajectory.b, rtol=0, atol=1e-12)
    # a different problem (other limit scale) gets another cache entry
    other = optimize_excitation(model, replace(problem, limit_scale=0.7), seed=0, n_starts=1,
                                cache_dir=cache)
    assert not other.from_cache and other.cache_file != res.cache_file
    assert other.limits_used["qd_max"][0] == pytest.approx(0.7 * math.pi)


def test_validation_trajectory_differs_and_is_feasible(model, problem, result):
    res, _ = result
    val = validation_trajectory(model, problem, seed=1)
    assert val.trajectory.n_harmonics == 2
    assert np.isfinite(val.cond)
    check_trajectory(model, val.trajectory, val.limits_used, 10 * problem.n_grid)
    t = np.linspace(0, 20, 101)
    assert np.abs(val.trajectory.evaluate(t)[0] - res.trajectory.evaluate(t)[0]).max() > 0.1


def test_workspace_constraint(model):
    # joint2 only, arm swinging its upper arm: the elbow origin must stay above z_min
    pr = ExcitationProblem(harmonics=3, n_grid=40, start_pose=(-math.pi / 2, 0.0), z_min=0.05)
    res = optimize_excitation(model, pr, seed=0, n_starts=1)
    t = np.arange(800) * (res.trajectory.period / 800)
    z = model.link_origins(res.trajectory.evaluate(t)[0])[:, 1:, 2]
    assert z.min() >= 0.05 - 1e-9
    # without the table the optimizer does go below it (so the constraint was active)
    free = optimize_excitation(model, replace(pr, z_min=None), seed=0, n_starts=1)
    z_free = model.link_origins(free.trajectory.evaluate(t)[0])[:, 1:, 2]
    assert z_free.min() < 0.05


@pytest.mark.parametrize("change, match", [
    (dict(start_pose=(math.radians(150), 0.0), limit_scale=0.4), "joint2.*position limits"),
    (dict(start_pose=(-math.pi / 2, math.radians(160))), "joint3.*position limits"),
    (dict(limit_scale=(1.0, 0.0, 1.0)), "limit_scale for qd"),
    (dict(min_rms_velocity=3.0), "amplitude impossible for joint2.*velocity limit"),
    (dict(min_rms_velocity=(0.0, 1.0), wf=20 * math.pi), "amplitude impossible for joint3.*acceleration"),
    (dict(z_min=0.2), "workspace.*z_min"),
    (dict(harmonics=1), "harmonics = 1"),
])
def test_infeasible_requests_name_the_constraint(model, problem, change, match):
    with pytest.raises(ValueError, match=match):
        optimize_excitation(model, replace(problem, **change), n_starts=1)


def test_ipopt_infeasibility_is_translated(model, problem):
    # passes the necessary conditions (RMS <= qd_max) but no rest-to-rest Fourier series reaches it
    pr = replace(problem, min_rms_velocity=(0.0, 0.97 * 0.8 * math.pi), max_iter=60)
    with pytest.raises(ExcitationInfeasible, match="joint3") as ei:
        optimize_excitation(model, pr, n_starts=1)
    assert "Traceback" not in str(ei.value)


def test_malformed_settings(model, problem):
    with pytest.raises(ValueError, match="n_grid"):
        optimize_excitation(model, replace(problem, n_grid=5))
    with pytest.raises(ValueError, match="start_pose has 3 entries"):
        optimize_excitation(model, replace(problem, start_pose=(0.0, 0.0, 0.0)))
    with pytest.raises(ValueError, match="objective_power"):
        optimize_excitation(model, replace(problem, objective_power=3))
    with pytest.raises(ValueError, match="joint9"):
        load_model(None, ["joint9"])


def test_random_trajectory_fill(model, problem):
    lim = scaled_limits(model, problem)
    tr = random_trajectory(model, problem, np.random.default_rng(3), fill=0.5, n_check=400)
    t = np.arange(400) * (tr.period / 400)
    q, qd, qdd = tr.evaluate(t)
    dq = q - tr.q0
    use = np.vstack([dq.max(0) / (lim["q_max"] - tr.q0), dq.min(0) / (lim["q_min"] - tr.q0),
                     np.abs(qd).max(0) / lim["qd_max"], np.abs(qdd).max(0) / lim["qdd_max"]])
    # per joint, the tightest limit (position measured from the start pose) is used to `fill`
    np.testing.assert_allclose(use.max(0), 0.5, rtol=1e-9)


def test_joint_that_cannot_move(model, problem):
    from identify.model.robot_model import Limits
    L = model.limits
    frozen = model.with_limits(Limits(L.q_min, L.q_max, np.array([L.qd_max[0], 0.0]), L.qdd_max,
                                      L.tau_max))
    with pytest.raises(ExcitationInfeasible, match="joint3 cannot move.*velocity"):
        optimize_excitation(frozen, problem, n_starts=1)


def test_command_line(tmp_path, capsys):
    rc = main(["--joints", "joint2,joint3", "--start-deg=-90,0", "--harmonics", "3", "--grid", "40",
               "--starts", "1", "--out", str(tmp_path), "--no-cache", "--rate", "50"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "cond(W_base)" in out
    tr = FourierTrajectory.load(tmp_path / "excitation.yaml")
    assert tr.meta["cond_W_base"] > 1 and tr.joint_names == ("joint2", "joint3")
    with np.load(tmp_path / "excitation.npz") as z:
        assert z["q"].shape == (1001, 2)
    assert (tmp_path / "excitation.png").stat().st_size > 10000
    rc = main(["--joints", "joint2,joint3", "--start-deg=300,0", "--out", str(tmp_path),
               "--no-cache"])
    assert rc == 3
    assert "joint2" in capsys.readouterr().err


@pytest.mark.parametrize("r", [1, 4])
def test_objective_matches_numpy_and_brackets_cond(model, problem, r):
    """J from the CasADi graph == the same formula in numpy on the smooth-sign regressor, and
    cond(W)^2 <= exp(J) <= p^(2/r) cond(W)^2."""
    from identify.excitation.objective import build_nlp
    from identify.excitation.parametrization import to_x
    from identify.excitation.conditioning import base_regressor
    from identify.excitation.problem import resolve_start
    pr = replace(problem, objective_power=r)
    bp = base_parameters(model, pr)
    nlp = build_nlp(model, pr, bp)
    _, free = resolve_start(model, pr)
    tr = random_trajectory(model, pr, np.random.default_rng(11), fill=0.8)
    J = float(nlp.f_fun(to_x(tr, free)))
    t = np.arange(pr.n_grid) * (tr.period / pr.n_grid)
    W = base_regressor(model, bp, pr.terms, *tr.evaluate(t), coulomb_eps=pr.coulomb_eps)
    lam = np.linalg.eigvalsh(W.T @ W)
    lam = lam / lam.sum()
    J_np = (np.log(np.sum(lam ** r)) + np.log(np.sum(lam ** -r))) / r
    assert J == pytest.approx(J_np, rel=1e-8)
    c2 = np.linalg.cond(W) ** 2
    assert c2 <= np.exp(J) * (1 + 1e-9) and np.exp(J) <= len(lam) ** (2 / r) * c2 * (1 + 1e-9)


def test_fast_objective_gradient_matches_casadi_graph_and_finite_differences(model, problem):
    """The compiled + numpy objective used with the L-BFGS Hessian (identify.excitation.optimizer
    _FastObjective) equals the CasADi graph of J (built for hessian='exact'); its gradient
    equals the graph's algorithmic derivative and central finite differences."""
    import casadi as ca
    from identify.excitation.objective import build_nlp
    from identify.excitation.parametrization import to_x
    from identify.excitation.problem import resolve_start
    pr = replace(problem, objective_power=16, start_pose=(None, 0.0),   # a free start joint too
                 collision_margin=None)                     # exact Hessian: no callback rows
    bp = base_parameters(model, pr)
    fast = build_nlp(model, pr, bp)
    graph = build_nlp(model, replace(pr, hessian="exact"), bp)
    assert fast.keep is not None and graph.keep is None
    _, free = resolve_start(model, pr)
    tr = random_trajectory(model, pr, np.random.default_rng(5), fill=0.8)
    x = to_x(tr, free)
    assert float(fast.f_fun(x)) == pytest.approx(float(graph.f_fun(x)), rel=1e-10)
    xs = ca.MX.sym("x", x.size)
    g_ad = np.asarray(ca.Function("g", [xs], [ca.gradient(graph.f_fun(xs), xs)])(x)).ravel()
    g = fast.keep.obj.gradient(x)
    np.testing.assert_allclose(g, g_ad, rtol=1e-7, atol=1e-9 * np.abs(g_ad).max())
    h = 1e-6
    fd = np.array([(fast.keep.obj.value(x + h * e) - fast.keep.obj.value(x - h * e)) / (2 * h)
                   for e in np.eye(x.size)])
    np.testing.assert_allclose(g, fd, rtol=1e-4, atol=1e-6 * np.abs(g).max())
    # the solver's gradient (CasADi Jacobian of the callback) is this gradient
    g_solver = np.asarray(ca.Function("gs", [xs], [ca.jacobian(fast.f_fun(xs), xs)])(x)).ravel()
    np.testing.assert_array_equal(g_solver, g)


def test_screened_solve_satisfies_every_row_of_the_full_grid(model, problem):
    """IPOPT sees only a subset of the limit rows (screened_solve); the answer must still hold
    on every row of the full grid, and a coarse first-stage grid is tightened by Ehlich-Zeller."""
    from identify.excitation.objective import build_nlp
    from identify.excitation.optimizer import initial_guess, screened_solve
    from identify.excitation.parametrization import to_x
    from identify.excitation.problem import resolve_start
    pr = replace(problem, screen_stride=4, screen_threshold=0.6, polish_power=None,
                 screen_min_rows=0)
    bp = base_parameters(model, pr)
    nlp = build_nlp(model, pr, bp)
    _, free = resolve_start(model, pr)
    lim = scaled_limits(model, pr)
    x0 = to_x(initial_guess(model, pr, np.random.default_rng(3), lim), free)
    sol, st, iters, _ = screened_solve(nlp, x0, nlp.lbg.copy(), pr)
    x = np.asarray(sol["x"]).ravel()
    g = np.asarray(nlp.g_fun(x)).ravel()
    assert iters > 0 and np.all(np.isfinite(x))
    assert np.all(g <= nlp.ubg + 1e-6) and np.all(g >= nlp.lbg - 1e-6)
    lin = nlp.linear
    assert np.abs(g[lin]).max() > 0.9 * nlp.ubg[lin].max()     # some limit is (nearly) active
    # the solver really saw fewer rows than the full problem has
    assert nlp.subs and all(s_.size_in(4)[0] < nlp.lbg.size for s_, _ in nlp.subs.values())
    # coarse stage-1 grid: rows at every 4th sample, bound cos(pi H 4 / N)
    c = build_nlp(model, pr, bp, constraint_stride=4)
    assert c.linear.sum() * 4 == nlp.linear.sum()
    np.testing.assert_allclose(c.ubg[c.linear], math.cos(math.pi * 3 * 4 / 40))
    np.testing.assert_allclose(nlp.ubg[lin], math.cos(math.pi * 3 / 40))
    assert set(c.sample[c.linear]) == set(range(0, 40, 4))
    # clearance and table rows stay on the whole grid (screened instead: they have no
    # Ehlich-Zeller bound between samples)
    assert np.sum(c.kinds == "col") == np.sum(nlp.kinds == "col") > 0
    assert set(c.sample[c.kinds == "col"]) == set(range(40))
    with pytest.raises(ValueError, match="constraint stride 3 must divide n_grid = 40"):
        build_nlp(model, pr, bp, constraint_stride=3)


# -- the start pose against obstacles and the arm itself (check_problem, before any IPOPT) -------
def _box(c, s, name=None):
    return {"type": "box", "center_m": c, "size_m": s, **({"name": name} if name else {})}


def _plane(n, p):
    return {"type": "plane", "normal": n, "point_m": p}


FOLDED_START = tuple(math.radians(v) for v in (8, -148, 131, 26, -178, 98))  # link6 on link1


@pytest.mark.parametrize("change, setting, fragment", [
    (dict(obstacles=(_box([0, 0, 0.7], [0.2, 0.2, 0.2], "lamp"),)), "obstacles[0]",
     r"obstacle 'lamp' \(obstacles\[0\]\): at the start pose \[0\.0, -90\.0, 0\.0, -90\.0, 0\.0, "
     r"0\.0\] deg link4 cylinder \(moved by joint4\) is inside it"),
    (dict(obstacles=(_plane([0, 0, 1], [0, 0, 0]), _box([0, 0, 0], [5, 5, 5]))), "obstacles[1]",
     r"obstacles\[1\].*contains the arm's base"),                      # a box around everything
    (dict(obstacles=(_box([0, 0, 0.02], [0.05, 0.05, 0.05]),)), "obstacles[0]",
     r"contains the arm's base"),                       # the base is never checked: say so
    (dict(obstacles=(_plane([0, 0, 1], [0, 0, 0.3]),)), "obstacles[0]",
     r"base \(the world origin\) is 300 mm on the plane's forbidden side"),
    (dict(obstacles=(_plane([0, 0, -1], [0, 0, 0]),)), "obstacles[0]",   # normal flipped
     r"link2 cylinder \(moved by joint2\) is inside it"),
    (dict(obstacles=(_box([0, 0, 0.6], [0.3, 0.3, 0.3]),)), "obstacles[0]",
     r"link3 cylinder \(moved by joint3\) is 7\.7 mm from it, within the collision margin 20\.0"),
    (dict(start_pose=FOLDED_START), "start_pose",
     r"puts link1 cylinder / link6 cylinder in contact \(-7\.6 mm\)"),
    (dict(collision_margin=0.5), "collision_margin",          # left 13 of 16 pairs out silently
     r"margin of 500\.0 mm would leave 12 of the 15 link pairs unchecked.*below 28\.8 mm to "
     r"check every pair"),
    (dict(collision_margin=1.0), "collision_margin", r"15 of the 15"),     # was a numpy error
    (dict(z_min=float("nan")), None, r"z_min must be a finite height"),   # was an IPOPT error
])
def test_start_pose_refused_before_ipopt(ref_model, change, setting, fragment):
    """Each request used to run: an obstacle the start pose reaches was left out as an overlap of
    the model's shapes (silently ignored, or refused after the optimization), a start pose in
    self-collision likewise; a large margin dropped most pairs or crashed the first start."""
    from identify.excitation.problem import check_problem
    with pytest.raises(ValueError, match=fragment) as ei:
        check_problem(ref_model, ExcitationProblem(harmonics=3, n_grid=40, **change))
    assert getattr(ei.value, "setting", None) == setting


@pytest.mark.parametrize("change", [
    {}, dict(obstacles=(_plane([0, 0, 1], [0, 0, 0]),)),            # a table at the base
    dict(obstacles=(_plane([-1, 0, 0], [0.6, 0, 0]), _box([0.4, -0.4, 0.3], [0.3, 0.3, 0.6]))),
    dict(start_pose=(None,) + FOLDED_START[1:]),      # joint 1 free: the pose is not decided
    dict(collision_margin=None, start_pose=FOLDED_START),                # no collision model
])
def test_start_pose_checks_accept_valid_requests(ref_model, change):
    from identify.excitation.problem import check_problem
    check_problem(ref_model, ExcitationProblem(harmonics=3, n_grid=40, **change))


def _six_joint_trajectory(path):
    from identify.excitation.problem import upright_pose
    n = 6
    tr = FourierTrajectory.from_free(np.array(upright_pose(n)), np.full((n, 2), 0.05),
                                     np.full((n, 2), 0.02), 2 * math.pi / 4.0)
    tr.save(path)
    return str(path)


@pytest.mark.parametrize("args, fragment", [
    (["--period", "0"], "argument --period: must be a number > 0"),     # ZeroDivisionError
    (["--rate", "-5"], "argument --rate: must be a number > 0"),
    (["--start-deg=-90,abc"], "--start-deg: entry 2 'abc' is not an angle"),
    (["--z-min", "nan"], "z_min must be a finite height"),               # CasADi traceback
    (["--held", "{traj}"], "--held needs --objective d_optimal or a_optimal"),  # was ignored
    (["--objective", "d_optimal", "--held", "{traj}"],
     "--held {traj}: the trajectory moves 6 joints, the arm (--joints / --urdf) has 2"),
    (["--objective", "d_optimal", "--held", "{tmp}/missing.yaml"],
     "--held {tmp}/missing.yaml: file not found"),
])
def test_command_line_refuses_hostile_options(tmp_path, capsys, args, fragment):
    traj = _six_joint_trajectory(tmp_path / "held.yaml")
    sub = {"{traj}": traj, "{tmp}": str(tmp_path)}
    for k, v in sub.items():
        args = [a.replace(k, v) for a in args]
        fragment = fragment.replace(k, v)
    try:
        rc = main(["--joints", "joint2,joint3", "--start-deg=-90,0", "--harmonics", "3",
                   "--grid", "40", "--starts", "1", "--no-cache", "--no-plot", "--quiet",
                   "--out", str(tmp_path / "out")] + args)
    except SystemExit as exc:               # argparse: exit 2 with its usage line
        rc = exc.code
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and fragment in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()
