"""Capsule geometry and distances (identify.model.collision) against PyBullet, and the pre-run
clearance check (identify.backend.clearance) both backends call."""
from __future__ import annotations

import math

import numpy as np
import pytest

from identify import RobotModel
from identify.backend.clearance import CollisionRefused, check_clearance
from identify.excitation.fourier import FourierTrajectory
from identify.excitation.problem import upright_pose
from identify.model.collision import ArmCapsules, parse_obstacles, segment_distance

OBST = [{"type": "plane", "name": "table", "normal": [0, 0, 1], "point_m": [0, 0, 0.0]},
        {"type": "box", "name": "cabinet", "center_m": [0.35, 0.2, 0.3], "size_m": [0.2, 0.3, 0.6]}]


@pytest.fixture(scope="module")
def model():
    return RobotModel.reference()


def _pybullet_capsules(caps, obstacles):
    """A PyBullet world with one free body per capsule (placed per pose) and the obstacles."""
    import pybullet as pb
    cid = pb.connect(pb.DIRECT)
    bodies = []
    for c in caps:
        L = float(np.linalg.norm(c.b - c.a))
        if L > 1e-9:
            s = pb.createCollisionShape(pb.GEOM_CAPSULE, radius=c.radius, height=L, physicsClientId=cid)
        else:
            s = pb.createCollisionShape(pb.GEOM_SPHERE, radius=c.radius, physicsClientId=cid)
        bodies.append(pb.createMultiBody(0, s, physicsClientId=cid))
    obs = []
    for ob in obstacles:
        if ob.kind == "box":
            s = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=ob.half.tolist(), physicsClientId=cid)
            obs.append(pb.createMultiBody(0, s, basePosition=ob.center.tolist(), physicsClientId=cid))
    return pb, cid, bodies, obs


def _place(pb, cid, bid, A, B):
    d = B - A
    L = np.linalg.norm(d)
    if L < 1e-9:
        quat = (0, 0, 0, 1)
    else:
        z = np.array([0.0, 0.0, 1.0])
        ax = np.cross(z, d / L)
        s = np.linalg.norm(ax)
        ang = math.atan2(s, float(z @ d / L))
        quat = pb.getQuaternionFromAxisAngle((ax / s).tolist(), ang) if s > 1e-12 else (
            (0, 0, 0, 1) if d[2] > 0 else (1, 0, 0, 0))
    pb.resetBasePositionAndOrientation(bid, (0.5 * (A + B)).tolist(), quat, physicsClientId=cid)


def test_segment_distance_brute_force():
    rng = np.random.default_rng(3)
    P = rng.normal(size=(200, 4, 3))
    P[:20, 1] = P[:20, 0]               # degenerate segments (points)
    P[20:40, 3] = P[20:40, 2] + (P[20:40, 1] - P[20:40, 0])   # parallel
    d = segment_distance(P[:, 0], P[:, 1], P[:, 2], P[:, 3])
    u = np.linspace(0, 1, 101)
    S1 = P[:, None, 0] + u[None, :, None] * (P[:, 1] - P[:, 0])[:, None]
    S2 = P[:, None, 2] + u[None, :, None] * (P[:, 3] - P[:, 2])[:, None]
    brute = np.linalg.norm(S1[:, :, None] - S2[:, None, :], axis=-1).min((1, 2))
    assert np.all(d <= brute + 1e-12)
    assert np.max(brute - d) < 2e-2 * np.max(np.linalg.norm(P, axis=-1))
    assert np.mean(brute - d) < 1e-3


def test_capsule_distance_matches_pybullet_random_poses(model):
    """Capsule-pair and capsule-box distances of the reference arm at 60 random poses agree with
    PyBullet's getClosestPoints on the same capsules within 1 mm (numpy and CasADi forms)."""
    ac = ArmCapsules.of_model(model, OBST[1:], box_step=0.005)
    pb, cid, bodies, obs = _pybullet_capsules(ac.capsules, ac.obstacles)
    rng = np.random.default_rng(0)
    q = rng.uniform(-math.pi, math.pi, (60, model.n))
    D = ac.distances(q)
    f = ac.distance_function()
    own = ac.row_owner()
    A, B = ac.endpoints(q)
    P = len(ac.pairs)
    worst, n_close = 0.0, 0
    for k in range(q.shape[0]):
        for c, bid in enumerate(bodies):
            _place(pb, cid, bid, A[k, c], B[k, c])
        ref = []
        for i, j in ac.pairs:
            pts = pb.getClosestPoints(bodies[i], bodies[j], 10.0, physicsClientId=cid)
            ref.append(min(p[8] for p in pts))
        for i, o in ac.obstacle_pairs:
            pts = pb.getClosestPoints(bodies[i], obs[o], 10.0, physicsClientId=cid)
            ref.append(min(p[8] for p in pts))
        ref = np.array(ref)
        pos = ref > 0                       # penetration depths are not distances
        worst = max(worst, np.max(np.abs(D[k, :P] - ref[:P])[pos[:P]]))
        # boxes: conservative by at most the point spacing (here 5 mm / 2) plus 1 mm
        ob = D[k, P:] - ref[P:]
        assert np.all(ob[pos[P:]] <= 1e-3) and np.all(ob[pos[P:]] >= -3.5e-3)
        n_close += int(np.sum((ref < 0.05) & pos))
        rows = np.asarray(f(q[k])).ravel()
        mins = np.full(len(D[k]), np.inf)
        np.minimum.at(mins, own, rows)
        np.testing.assert_allclose(mins, D[k], atol=2e-6)
    pb.disconnect(cid)
    assert worst <= 1e-3, worst
    assert n_close > 10          # the poses did bring capsules close to each other


def test_capsules_contain_urdf_geometry(model):
    """The capsules never report more clearance than PyBullet finds on the URDF's own shapes."""
    ac = ArmCapsules.of_model(model, link_tubes=False)
    rng = np.random.default_rng(1)
    q = rng.uniform(-math.pi, math.pi, (30, model.n))
    d_caps = ac.distances(q).min(1)
    for k in range(q.shape[0]):
        rep = check_clearance(model.source, model.joint_names, q=q[k:k + 1], margin=-1.0)
        assert rep.min_distance[0] >= min(d_caps[k], 0.1) - 1e-6


def test_obstacle_errors_name_the_key():
    with pytest.raises(ValueError, match=r"obstacles\[1\]\.size_m"):
        parse_obstacles([OBST[0], {"type": "box", "center_m": [0, 0, 0], "size_m": [1, -1, 1]}])
    with pytest.raises(ValueError, match=r"obstacles\[0\]: unknown key"):
        parse_obstacles([{"type": "plane", "normal": [0, 0, 1], "point_m": [0, 0, 0], "hight": 1}])


#: offsets from the upright pose [rad] at which the wrist folds into the arm (PyBullet, URDF shapes)
FOLDED = np.array([0.0, 0.0, -2.68, -1.52, 2.88, 0.0])


def folding_trajectory(model, frac=1.0, period=10.0):
    """Joints 3-5 move from the upright pose to upright + frac * FOLDED and back (one period;
    a self-collision for frac = 1)."""
    n, wf = model.n, 2 * math.pi / period
    B = np.zeros((n, 1))
    B[:, 0] = FOLDED
    tr = FourierTrajectory.from_free(np.array(upright_pose(n)), np.zeros((n, 1)), B, wf,
                                     joint_names=tuple(model.joint_names))
    t = np.linspace(0, tr.period, 401)
    s = frac / np.max(np.abs(tr.evaluate(t)[0][:, 2] - tr.q0[2]) / abs(FOLDED[2]))
    return FourierTrajectory.from_free(tr.q0, np.zeros((n, 1)), s * B, wf,
                                       joint_names=tuple(model.joint_names))


def test_check_clearance_refuses_folding_trajectory(model):
    with pytest.raises(CollisionRefused, match=r"link\d / link\d at t = \d+\.\d+ s .*contact"):
        check_clearance(model.source, model.joint_names, folding_trajectory(model), margin=0.0)
    ok = check_clearance(model.source, model.joint_names, folding_trajectory(model, 0.3),
                         margin=0.01)
    assert ok.min_distance.min() >= 0.01 and ok.n_pairs > 5
    table = [{"type": "plane", "name": "table", "normal": [0, 0, 1], "point_m": [0, 0, 0.6]}]
    with pytest.raises(CollisionRefused, match=r"link\d / obstacle 'table' at t = "):
        check_clearance(model.source, model.joint_names, folding_trajectory(model, 0.3),
                        obstacles=table, margin=0.01)


def test_scenario_obstacle_error_names_file_line_and_key(tmp_path):
    from identify.scenario import load_scenario
    from identify.scenario.spec import ScenarioError
    from identify.model.robot_model import reference_paths
    p = reference_paths()
    f = tmp_path / "s.yaml"
    f.write_text(f"""name: t
arm: {{urdf: {p['urdf']}, drives: {p['drives']}}}
trajectories:
  excitation:
    obstacles:
      - {{type: plane, normal: [0, 0, 1], point_m: [0, 0, 0]}}
      - {{type: box, center_m: [0.5, 0, 0.2], size_m: [0.2, -0.2, 0.4]}}
""")
    with pytest.raises(ScenarioError, match=r"s\.yaml:7: trajectories\.excitation\.obstacles\[1\]: "
                                            r"size_m must be > 0"):
        load_scenario(f)


@pytest.mark.parametrize("obstacle, fragment", [
    ({"type": "box", "center_m": [True, 0.2, 0.3], "size_m": [0.1, 0.1, 0.1]},
     r"obstacles\[0\]\.center_m must be 3 finite numbers"),            # true would read as 1 m
    ({"type": "box", "center_m": [400, -400, 300], "size_m": [0.3, 0.3, 0.6]},
     r"obstacles\[0\]\.center_m .*millimetres given"),                  # mm for m
    ({"type": "box", "center_m": [0.4, -0.4, 0.3], "size_m": [300, 300, 600]},
     r"obstacles\[0\]\.size_m .*millimetres given"),
    ({"type": "plane", "normal": [0, 0, 1], "point_m": [0, 0, -50]},
     r"obstacles\[0\]\.point_m .*millimetres given"),
    ({"type": "box", "name": ["a"], "center_m": [0.4, 0, 0.3], "size_m": [0.1, 0.1, 0.1]},
     r"obstacles\[0\]\.name must be a non-empty string"),
])
def test_hostile_obstacle_values_are_refused(obstacle, fragment):
    with pytest.raises(ValueError, match=fragment):
        parse_obstacles([obstacle])


def test_obstacle_names_are_unique():
    a = {"type": "box", "name": "cabinet", "center_m": [0.4, 0, 0.3], "size_m": [0.1, 0.1, 0.1]}
    with pytest.raises(ValueError, match=r"obstacles\[1\]\.name 'cabinet' is already the name "
                                         r"of obstacles\[0\]"):
        parse_obstacles([a, {**a, "center_m": [-0.4, 0, 0.3]}])
    assert [o.name for o in parse_obstacles(OBST)] == ["table", "cabinet"]


def test_check_clearance_refuses_a_start_pose_at_an_obstacle(model):
    """A plane whose normal points away from the arm: every link is on its forbidden side for the
    whole period. Pairs closer than the margin at the start pose used to be left out as overlaps
    of the model, so the check passed; an obstacle is no part of the model: refused."""
    flipped = [{"type": "plane", "name": "floor", "normal": [0, 0, -1], "point_m": [0, 0, 0]}]
    with pytest.raises(CollisionRefused, match=r"link\d / obstacle 'floor' at t = 0\.000 s, the "
                                               r"start pose: contact"):
        check_clearance(model.source, model.joint_names, folding_trajectory(model, 0.3),
                        obstacles=flipped, margin=0.01)
    # the model's own overlaps at the start pose are still left out (the compact wrist)
    rep = check_clearance(model.source, model.joint_names, folding_trajectory(model, 0.3),
                          obstacles=OBST[:1], margin=0.01)
    assert rep.n_pairs > 5
