"""Capsules of mesh geometry (vendor URDFs): the capsule contains every vertex, is tight for a
cylinder (closed form), reads binary / ASCII STL and OBJ alike with their scale and package://
paths; the vendor arms shipped with PyBullet get collision constraints and a start pose within
their limits by default."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np
import pytest

from identify.excitation import ExcitationProblem, optimize_excitation
from identify.excitation.__main__ import load_model
from identify.excitation.problem import check_problem, default_start, resolve_start, scaled_limits
from identify.model.collision import _points_capsule, capsules_from_urdf, segment_distance


def _contains(cap, V, tol=1e-9):
    d = segment_distance(cap.a[None, :], cap.b[None, :], V, V)
    return bool(np.all(d <= cap.radius + tol))


def test_capsule_of_a_cylinder_is_the_cylinder_closed_form():
    """Points of a cylinder (radius 0.05 m, length 0.3 m) on a tilted axis: the capsule's axis is
    the cylinder's, its radius the cylinder's, its segment inside the cylinder's length."""
    rng = np.random.default_rng(0)
    th = rng.uniform(0, 2 * math.pi, 4000)
    z = rng.uniform(-0.15, 0.15, 4000)
    P = np.c_[0.05 * np.cos(th), 0.05 * np.sin(th), z]
    rim = np.c_[0.05 * np.cos(th), 0.05 * np.sin(th), np.sign(z) * 0.15]   # the end discs' rims
    P = np.vstack([P, rim])
    ax = np.array([1.0, 2.0, 2.0]) / 3.0
    u = np.cross(ax, [0, 0, 1.0])
    u /= np.linalg.norm(u)
    ang = math.acos(ax[2])
    K = np.array([[0, -u[2], u[1]], [u[2], 0, -u[0]], [-u[1], u[0], 0]])
    R = np.eye(3) + math.sin(ang) * K + (1 - math.cos(ang)) * K @ K        # a tilted frame
    ax = R[:, 2]                                                             # cylinder axis
    c = np.array([0.1, -0.2, 0.3])
    V = P @ R.T + c
    cap = _points_capsule(V, 1, "cyl")
    assert _contains(cap, V)
    assert cap.radius == pytest.approx(0.05, abs=2e-4)
    seg = cap.b - cap.a
    assert abs(abs(seg @ ax) - np.linalg.norm(seg)) < 1e-6                 # along the axis
    assert np.linalg.norm(seg) <= 0.3 + 1e-9
    mid = 0.5 * (cap.a + cap.b)
    assert np.linalg.norm(mid - c) < 1e-3


def test_capsule_of_a_compact_point_set_is_a_sphere_containing_it():
    V = np.random.default_rng(1).normal(size=(500, 3)) * [0.01, 0.01, 0.01]
    cap = _points_capsule(V, 2, "blob")
    assert _contains(cap, V)


def _box_mesh(size):
    """Vertices (8, 3) and triangles (12, 3) of an axis-aligned box centred at the origin."""
    s = np.asarray(size, float) / 2
    V = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float) * s
    F = np.array([[0, 1, 3], [0, 3, 2], [4, 6, 7], [4, 7, 5], [0, 4, 5], [0, 5, 1],
                  [2, 3, 7], [2, 7, 6], [0, 2, 6], [0, 6, 4], [1, 5, 7], [1, 7, 3]])
    return V, F


def _write(fmt: str, path: Path, V, F) -> None:
    if fmt == "stl-binary":
        rec = np.zeros(len(F), np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("a", "<u2")]))
        rec["v"] = V[F]
        path.write_bytes(b"\0" * 80 + np.uint32(len(F)).tobytes() + rec.tobytes())
    elif fmt == "stl-ascii":
        lines = ["solid box"]
        for f in F:
            lines += ["facet normal 0 0 0", " outer loop"]
            lines += [f"  vertex {x:.9g} {y:.9g} {z:.9g}" for x, y, z in V[f]]
            lines += [" endloop", "endfacet"]
        path.write_text("\n".join(lines + ["endsolid box"]) + "\n")
    else:
        path.write_text("".join(f"v {x} {y} {z}\n" for x, y, z in V)
                        + "".join(f"f {a + 1} {b + 1} {c + 1}\n" for a, b, c in F))


_URDF = """<robot name="m">
  <link name="base"/>
  <link name="l1"><inertial><mass value="1"/><inertia ixx="0.01" iyy="0.01" izz="0.01" ixy="0" ixz="0" iyz="0"/></inertial>
    <collision><origin xyz="0 0 0.2" rpy="0 0 0"/><geometry><mesh filename="{fn}" scale="0.001 0.001 0.001"/></geometry></collision></link>
  <joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><axis xyz="0 0 1"/>
    <limit lower="-3" upper="3" effort="10" velocity="2"/></joint>
</robot>
"""


@pytest.mark.parametrize("fmt", ["stl-binary", "stl-ascii", "obj"])
def test_mesh_formats_scale_and_package_paths(tmp_path, fmt):
    """A 100 x 100 x 400 mm box as a millimetre mesh (scale 0.001) in a ROS package beside the
    URDF's folder: one capsule in metres containing the box, the same from every format."""
    V, F = _box_mesh([100.0, 100.0, 400.0])
    ext = ".obj" if fmt == "obj" else ".stl"
    (tmp_path / "arm_description" / "meshes").mkdir(parents=True)
    _write(fmt, tmp_path / "arm_description" / "meshes" / f"box{ext}", V, F)
    (tmp_path / "arm_description" / "urdf").mkdir()
    urdf = tmp_path / "arm_description" / "urdf" / "m.urdf"
    urdf.write_text(_URDF.format(fn=f"package://arm_description/meshes/box{ext}"))
    (cap,) = capsules_from_urdf(urdf, ["j1"], link_tubes=False)
    corners = V * 0.001 + [0, 0, 0.2]
    assert _contains(cap, corners, tol=1e-6)
    assert cap.radius == pytest.approx(0.05 * math.sqrt(2), abs=1e-5)     # half the diagonal
    assert sorted([cap.a[2], cap.b[2]]) == pytest.approx([0.0, 0.4], abs=1e-3)   # box z 0..0.4 m


def test_unreadable_mesh_formats_and_missing_meshes_name_the_link(tmp_path):
    urdf = tmp_path / "m.urdf"
    urdf.write_text(_URDF.format(fn="meshes/l1.dae"))
    (tmp_path / "meshes").mkdir()
    with pytest.raises(ValueError, match=r"l1: mesh 'meshes/l1.dae' not found"):
        capsules_from_urdf(urdf, ["j1"])
    (tmp_path / "meshes" / "l1.dae").write_text("<COLLADA/>")
    with pytest.raises(ValueError, match=r"l1: mesh l1.dae: only STL and OBJ.*collision_margin_m"):
        capsules_from_urdf(urdf, ["j1"])


def _pybullet_data_urdf(rel):
    pybullet_data = pytest.importorskip("pybullet_data")
    path = Path(pybullet_data.getDataPath()) / rel
    if not path.is_file():
        pytest.skip(f"{rel} not shipped with this pybullet")
    return path


@pytest.mark.parametrize("rel, joints", [
    ("kuka_iiwa/model.urdf", None), ("xarm/xarm6_robot.urdf", None),
    ("franka_panda/panda.urdf", [f"panda_joint{i}" for i in range(1, 8)])])
def test_vendor_arms_get_collision_constraints_and_a_start_pose_by_default(rel, joints):
    """Mesh URDFs were refused by the default collision margin (meshes not read), and the
    xArm's and Panda's limits exclude the paper's upright angles (the default start pose)."""
    arm = load_model(str(_pybullet_data_urdf(rel)), joints)
    pr = ExcitationProblem(harmonics=3, n_grid=40)          # default margin: 0.02 m
    check_problem(arm, pr)
    q0, free = resolve_start(arm, pr)
    lim = scaled_limits(arm, pr)
    assert not free.any() and np.all((q0 >= lim["q_min"]) & (q0 <= lim["q_max"]))
    assert q0 == pytest.approx(default_start(arm, pr))


def test_a_default_design_on_a_vendor_arm_keeps_its_clearance():
    arm = load_model(str(_pybullet_data_urdf("kuka_iiwa/model.urdf")), None)
    pr = ExcitationProblem(harmonics=3, n_grid=40, wf=2 * math.pi / 6.0)
    res = optimize_excitation(arm, pr, seed=0, n_starts=1, cache_dir=None)
    meta = res.trajectory.meta["collision"]
    assert meta["margin_m"] == pytest.approx(0.02)
    from identify.backend.clearance import check_clearance        # PyBullet, the URDF's meshes
    rep = check_clearance(arm.source, arm.joint_names, res.trajectory)
    assert rep.n_pairs > 0 and rep.min_distance.min() >= 0.02 - 1e-6


def test_pairs_the_design_left_out_are_held_to_no_contact_not_the_margin():
    """A pair in the trajectory's meta.collision.ignored_pairs (its capsules closer than the
    margin at the start pose) is checked by PyBullet for contact only: closer than the margin is
    accepted, contact refused. Without the entry the margin applies (the Kuka's default design
    was refused at 19.9 mm on a pair its optimizer had left out)."""
    from types import SimpleNamespace
    from identify import RobotModel
    from identify.backend.clearance import CollisionRefused, check_clearance
    from identify.excitation.problem import upright_pose
    arm = RobotModel.reference()
    up = np.asarray(upright_pose(6))
    folded = np.radians([8, -148, 131, 26, -178, 98])                   # link6 on link1
    Q = up + np.linspace(0, 1.1, 89)[:, None] * (folded - up)     # on into contact at ~1.055
    pair = "link1 / link6"

    def dist(q):        # one pose: a pair in contact there is left out as at a start pose
        rep = check_clearance(arm.source, arm.joint_names, q=q[None, :], margin=0.0, tol=1.0)
        return float(rep.distances[0, rep.labels.index(pair)]) if pair in rep.labels else -1.0
    d = np.array([dist(q) for q in Q])
    near = int(np.flatnonzero((d > 0.002) & (d < 0.015))[-1])           # close, no contact
    assert d[0] > 0.03
    meta = {"collision": {"margin_m": 0.02, "obstacles": [],
                          "ignored_pairs": ["link1 cylinder / link6 cylinder",
                                            "link2 cylinder / link6 cylinder"]}}
    left_out = SimpleNamespace(meta=meta)
    held = SimpleNamespace(meta={"collision": {"margin_m": 0.02, "obstacles": []}})
    rep = check_clearance(arm.source, arm.joint_names, left_out, q=Q[:near + 1])
    assert pair in rep.contact_only and pair not in rep.labels
    with pytest.raises(CollisionRefused, match=r"link1 / link6 .*clearance below the margin"):
        check_clearance(arm.source, arm.joint_names, held, q=Q[:near + 1])
    with pytest.raises(CollisionRefused, match=r"link1 / link6 .*held to no contact"):
        check_clearance(arm.source, arm.joint_names, left_out, q=Q)


@pytest.mark.parametrize("geometry, match", [
    ('<cylinder radius="-0.04" length="0.1"/>', r"<cylinder radius='-0.04'> must be > 0"),
    ('<cylinder radius="0.04"/>', r"<cylinder length=None> is missing"),
    ('<sphere radius="nan"/>', r"<sphere radius='nan'>: expected 1 finite"),
    ('<box size="0.1 0 0.2"/>', r"<box size='0.1 0 0.2'> must be > 0"),
    ('<box size="0.1 0.2"/>', r"<box size='0.1 0.2'>: expected 3 finite"),
    ('<capsule radius="0.05" length="-1"/>', r"<capsule length='-1'> must be >= 0"),
    ('<mesh filename="meshes/box.obj" scale="0.001 0 0.001"/>', r"<mesh scale='0.001 0 0.001'> has a zero factor"),
])
def test_bad_collision_shapes_refused_naming_file_and_link(tmp_path, geometry, match):
    """Bad numbers in a collision shape (a negative or missing radius, a zero box edge, a zero
    mesh scale factor, NaN) are refused when the collision model is built, naming the URDF,
    the link and the attribute (before: a negative-radius capsule, or a Python error)."""
    (tmp_path / "meshes").mkdir()
    _write("obj", tmp_path / "meshes" / "box.obj", *_box_mesh([1.0, 1.0, 1.0]))
    urdf = tmp_path / "m.urdf"
    text = _URDF.format(fn="meshes/box.obj")
    urdf.write_text(text.replace('<mesh filename="meshes/box.obj" scale="0.001 0.001 0.001"/>', geometry))
    with pytest.raises(ValueError, match=r"m\.urdf: link 'l1' <collision>: " + match):
        capsules_from_urdf(urdf, ["j1"], link_tubes=False)


def test_nan_collision_origin_refused(tmp_path):
    urdf = tmp_path / "m.urdf"
    urdf.write_text(_URDF.format(fn="x.obj").replace('<origin xyz="0 0 0.2"', '<origin xyz="0 nan 0.2"').replace(
        '<mesh filename="x.obj" scale="0.001 0.001 0.001"/>', '<sphere radius="0.1"/>'))
    with pytest.raises(ValueError, match=r"link 'l1' <collision>: <origin xyz='0 nan 0.2'>: expected 3 finite"):
        capsules_from_urdf(urdf, ["j1"], link_tubes=False)


@pytest.mark.parametrize("name, body, match", [
    ("short.obj", "v 0 0 0\nv 1 2\nv 1 1 1\nf 1 2 3\n", r"short\.obj, line 2: 'v 1 2' is not a vertex of at least three"),
    ("word.obj", "# made by hand\nv a b c\n", r"word\.obj, line 2: 'v a b c' is not a vertex"),
    ("short.stl", "solid x\nfacet normal 0 0 1\nouter loop\nvertex 0 0\nendloop\nendfacet\nendsolid\n",
     r"short\.stl, line 4: 'vertex 0 0' is not a vertex of three numbers"),
])
def test_malformed_mesh_named_with_its_line(tmp_path, name, body, match):
    """A text mesh whose vertex is not three numbers is refused naming the URDF, the link, the
    mesh file and its line (was numpy's "could not convert string to float" with no file);
    OBJ vertices with a w or colour after x y z are read."""
    (tmp_path / "meshes").mkdir()
    (tmp_path / "meshes" / name).write_text(body)
    urdf = tmp_path / "m.urdf"
    urdf.write_text(_URDF.format(fn=f"meshes/{name}"))
    with pytest.raises(ValueError, match=r"m\.urdf: link 'l1' <collision>: mesh .*" + match):
        capsules_from_urdf(urdf, ["j1"], link_tubes=False)
    (tmp_path / "meshes" / "ok.obj").write_text("v 0 0 0 1\nv 1 0 0\nv 0 1 0 0.5 0.5 0.5\nf 1 2 3\n")
    urdf.write_text(_URDF.format(fn="meshes/ok.obj"))
    assert capsules_from_urdf(urdf, ["j1"], link_tubes=False)
