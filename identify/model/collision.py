"""Collision geometry of a serial arm as capsules, their distances (numpy and CasADi) and the
obstacles a trajectory must clear.

Capsules (a segment a-b in a body frame and a radius) are generated from the URDF:

* every ``<collision>`` (else ``<visual>``) geometry of every link, on the body the link is rigidly
  attached to (fixed and locked joints merged as in :func:`identify.model.urdf.load_chain`):
  a cylinder becomes the capsule on its axis with its radius and length (it contains the
  cylinder: the end caps add at most one radius), a sphere a capsule of zero length, a box the
  capsule along its longest edge with the half diagonal of the other two edges as radius (contains
  the box); a mesh (STL, binary or ASCII, or OBJ; ``scale`` applied; ``package://`` resolved
  upwards from the URDF's folder and along ``ROS_PACKAGE_PATH``) the capsule containing all its
  vertices around their principal axis; other mesh formats raise (a silent omission would be
  unsafe);
* ``link_tubes``: a capsule from each body's frame origin to the next joint's origin, with the
  largest radius of that body's geometry (``tube_radius`` when it has none), for links at least
  ``tube_min_length`` long. The reference URDF only describes the joint housings; the tubes are
  the upper arm and the forearm between them.

Every capsule contains the geometry it was generated from, so a capsule distance >= margin
implies the true geometry distance >= margin (what the PyBullet check in
:mod:`identify.backend.clearance` verifies on the URDF's own shapes).

Pairs checked: capsules of bodies that are not adjacent (|i - j| >= 2; the base is body 0), and
every capsule of a moving body (bodies 2.., the base and the first link are mounted on the
table) against every declared obstacle. Obstacles (all SI, world frame):

* ``{type: plane, normal: [nx, ny, nz], point_m: [x, y, z]}``: allowed side n . (x - p) >= 0
  (a table: normal [0, 0, 1]; a wall: a horizontal normal);
* ``{type: box, center_m: [x, y, z], size_m: [sx, sy, sz]}``: an axis-aligned box (a cabinet).
  Capsule-box distances use points along the segment every ``box_step`` metres and subtract
  the largest gap a point spacing can hide (half the step), so they are conservative.

Distances are surface distances [m] (negative: penetration for capsule pairs and planes).
Segment-segment distance: closest points by clamped projections (Ericson, Real-Time Collision
Detection, 5.1.9), the same formulas in numpy (vectorised over samples and pairs) and CasADi
(piecewise smooth; exact gradients almost everywhere).
"""
from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import casadi as ca
import numpy as np

from .spatial import rpy_to_matrix, transform

OBSTACLE_KEYS = {"plane": ("type", "name", "normal", "point_m"),
                 "box": ("type", "name", "center_m", "size_m")}
#: obstacle coordinates, sizes and plane offsets beyond this are refused as a unit mistake
#: (millimetres for metres: 500 for 0.5) [m]; an arm's workcell is a few metres
OBSTACLE_MAX_M = 20.0


@dataclass(frozen=True)
class Capsule:
    """Segment a-b [m] in the frame of `body` (0 = base, i = body moved by joint i) and radius [m]."""
    body: int
    a: np.ndarray
    b: np.ndarray
    radius: float
    label: str


@dataclass(frozen=True)
class Obstacle:
    """A declared obstacle (see module doc). plane: normal (3,) unit, point (3,); box: center (3,),
    half (3,) half edge lengths."""
    kind: str
    name: str
    normal: np.ndarray | None = None
    point: np.ndarray | None = None
    center: np.ndarray | None = None
    half: np.ndarray | None = None

    def to_dict(self) -> dict:
        if self.kind == "plane":
            return {"type": "plane", "name": self.name, "normal": self.normal.tolist(),
                    "point_m": self.point.tolist()}
        return {"type": "box", "name": self.name, "center_m": self.center.tolist(),
                "size_m": (2 * self.half).tolist()}


def parse_obstacles(items, where: str = "obstacles") -> tuple[Obstacle, ...]:
    """Obstacles from plain data (list of dicts, see module doc); ValueError names `where[i].key`."""
    out, names = [], {}
    for i, d in enumerate(items or ()):
        w = f"{where}[{i}]"
        if isinstance(d, Obstacle):
            names.setdefault(d.name, i)
            out.append(d)
            continue
        if not isinstance(d, dict) or d.get("type") not in OBSTACLE_KEYS:
            raise ValueError(f"{w}: an obstacle is a mapping with type: plane | box, got {d!r}")
        kind = d["type"]
        bad = sorted(set(d) - set(OBSTACLE_KEYS[kind]))
        if bad:
            raise ValueError(f"{w}: unknown key(s) {bad} for a {kind}; valid: "
                             f"{list(OBSTACLE_KEYS[kind])}")

        def vec(key):
            if key not in d:
                raise ValueError(f"{w}.{key} is required for a {kind}")
            raw = d[key]
            try:
                if isinstance(raw, (str, bytes, bool)) or any(isinstance(x, bool) for x in raw):
                    raise TypeError("not numbers")       # true -> 1.0 would pass silently
                v = np.asarray(raw, float).reshape(-1)
            except (TypeError, ValueError):
                v = np.zeros(0)
            if v.shape != (3,) or not np.all(np.isfinite(v)):
                raise ValueError(f"{w}.{key} must be 3 finite numbers, got {raw!r}")
            if key != "normal" and np.abs(v).max() > OBSTACLE_MAX_M:
                raise ValueError(f"{w}.{key} {raw!r}: {np.abs(v).max():g} m is more than "
                                 f"{OBSTACLE_MAX_M:g} m (a workcell is a few metres); obstacles "
                                 f"are in metres (millimetres given?)")
            return v
        name = d.get("name", f"{kind} {i}")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{w}.name must be a non-empty string, got {name!r}")
        if name in names:
            raise ValueError(f"{w}.name {name!r} is already the name of obstacles[{names[name]}]: "
                             f"errors and reports name obstacles by it")
        names[name] = i
        if kind == "plane":
            nrm = vec("normal")
            if np.linalg.norm(nrm) < 1e-9:
                raise ValueError(f"{w}.normal must not be zero")
            pt = vec("point_m")
            off = float(pt @ nrm) / np.linalg.norm(nrm)
            if abs(off) > OBSTACLE_MAX_M:
                raise ValueError(f"{w}.point_m {d['point_m']!r}: the plane is {abs(off):g} m from "
                                 f"the arm's base, beyond {OBSTACLE_MAX_M:g} m; obstacles are in "
                                 f"metres (millimetres given?)")
            out.append(Obstacle("plane", name, normal=nrm / np.linalg.norm(nrm), point=pt))
        else:
            size = vec("size_m")
            if np.any(size <= 0):
                raise ValueError(f"{w}.size_m must be > 0 [m], got {d['size_m']!r}")
            out.append(Obstacle("box", name, center=vec("center_m"), half=0.5 * size))
    return tuple(out)


# ------------------------------------------------------------------------------------------------
# capsules from the URDF
# ------------------------------------------------------------------------------------------------
def _origin(elem) -> np.ndarray:
    o = elem.find("origin") if elem is not None else None
    if o is None:
        return np.eye(4)
    xyz, rpy = (_numbers(o, key, "", default="0 0 0", n=(3,)) for key in ("xyz", "rpy"))
    return transform(rpy_to_matrix(rpy), xyz)


def _body_links(root, moving: list[str]) -> dict[str, tuple[int, np.ndarray]]:
    """URDF link name -> (body, pose of the link frame in the body frame), merging fixed and
    locked joints like identify.model.urdf.load_chain (joints not in `moving` locked at 0)."""
    links = [l.get("name") for l in root.findall("link")]
    children: dict[str, list] = {ln: [] for ln in links}
    childs = set()
    for j in root.findall("joint"):
        children[j.find("parent").get("link")].append(j)
        childs.add(j.find("child").get("link"))
    base = [ln for ln in links if ln not in childs][0]
    out = {base: (0, np.eye(4))}
    stack = [(base, 0, np.eye(4))]
    while stack:
        ln, body, T = stack.pop()
        for j in children[ln]:
            child = j.find("child").get("link")
            Tj = T @ _origin(j)      # (joint origins were checked by identify.model.urdf)
            if j.get("name") in moving:
                b = moving.index(j.get("name")) + 1
                out[child] = (b, np.eye(4))
                stack.append((child, b, np.eye(4)))
            else:
                out[child] = (body, Tj)
                stack.append((child, body, Tj))
    return out


_MESH_CAPSULES: dict = {}     # (file, mtime, size, scale, pose, body, label) -> Capsule


def _resolve_mesh(filename: str, urdf_dir: Path, label: str) -> Path:
    """The file a URDF mesh ``filename`` names: relative to the URDF, ``file://``, or
    ``package://<pkg>/<rel>`` (a folder <pkg> among the URDF folder's ancestors or beside one
    of them, or under a ``ROS_PACKAGE_PATH`` entry)."""
    import os
    if filename.startswith("file://"):
        cands = [Path(filename[len("file://"):])]
    elif filename.startswith("package://"):
        pkg, _, rel = filename[len("package://"):].partition("/")
        cands = []
        for d in [urdf_dir, *urdf_dir.parents]:
            cands += [d / rel] if d.name == pkg else []
            cands.append(d / pkg / rel)
        for e in filter(None, os.environ.get("ROS_PACKAGE_PATH", "").split(os.pathsep)):
            cands.append(Path(e) / pkg / rel)
    else:
        cands = [urdf_dir / filename]
    for c in cands:
        if c.is_file():
            return c
    raise ValueError(f"{label}: mesh {filename!r} not found (looked for {cands[0]}"
                     f"{' and along the folders above the URDF and ROS_PACKAGE_PATH' if len(cands) > 1 else ''})")


def _read_mesh_vertices(path: Path, label: str) -> np.ndarray:
    """Vertices (V, 3) of an STL (binary or ASCII) or OBJ mesh, in the mesh's own units. A
    vertex that is not three numbers is a ValueError naming the mesh file and its line."""
    suffix = path.suffix.lower()
    if suffix == ".stl":
        data = path.read_bytes()
        n = int(np.frombuffer(data[80:84], "<u4")[0]) if len(data) >= 84 else -1
        if n >= 0 and len(data) == 84 + 50 * n:
            tri = np.dtype([("n", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")])
            V = np.frombuffer(data, tri, count=n, offset=84)["v"].reshape(-1, 3)
        else:
            V = _text_vertices(path, data.decode("ascii", errors="replace"), "vertex", 3)
    elif suffix == ".obj":      # "v x y z [w | r g b]"
        V = _text_vertices(path, path.read_text(errors="replace"), "v", None)
    else:
        raise ValueError(f"{label}: mesh {path.name}: only STL and OBJ meshes are read for the "
                         f"collision constraints; give the link an STL/OBJ or primitive "
                         f"<collision>, or set collision_margin_m: null (no constraints; the "
                         f"backends' PyBullet check still runs)")
    V = V.astype(float)
    if V.shape[0] == 0 or not np.all(np.isfinite(V)):
        raise ValueError(f"{label}: mesh {path} has no (finite) vertices")
    return V


def _text_vertices(path: Path, text: str, key: str, count: int | None) -> np.ndarray:
    """(V, 3) coordinates of the lines `key x y z ...` of a text mesh (ASCII STL: exactly 3
    numbers; OBJ: at least 3, the first 3 taken). ValueError naming the file and line of the
    first vertex that is not so."""
    lines = [(i, ln.split()) for i, ln in enumerate(text.splitlines(), 1)
             if ln.split()[:1] == [key]]
    ok = [len(f) - 1 == count if count else len(f) - 1 >= 3 for _, f in lines]
    if all(ok):
        try:
            return np.array([f[1:4] for _, f in lines], float).reshape(-1, 3)
        except ValueError:          # a field that is no number: found below
            pass
    i, f = next((i, f) for (i, f), good in zip(lines, ok)
                if not good or not all(map(_is_number, f[1:4])))
    raise ValueError(f"mesh {path}, line {i}: {' '.join(f)!r} is not a vertex of "
                     f"{'three' if count else 'at least three'} numbers")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _axis_capsule(V: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """(a, b, radius) of the capsule around the axis direction u (unit) containing points V
    (k, 3): axis through the centre of their bounding rectangle across u, radius the largest
    distance from it, ends pulled in as far as the end caps still cover every point."""
    e1 = np.cross(u, [1.0, 0.0, 0.0] if abs(u[0]) < 0.9 else [0.0, 1.0, 0.0])
    e1 /= np.linalg.norm(e1)
    e2 = np.cross(u, e1)
    x, y = V @ e1, V @ e2
    c = 0.5 * (x.max() + x.min()) * e1 + 0.5 * (y.max() + y.min()) * e2
    t = V @ u
    r = np.hypot(x - c @ e1, y - c @ e2)
    R = float(r.max()) + 1e-6
    h = np.sqrt(np.maximum(R * R - r * r, 0.0))
    hi, lo = float(np.max(t - h)), float(np.min(t + h))
    if hi < lo:                 # any axis point in [hi, lo] covers every point: a sphere
        hi = lo = 0.5 * (hi + lo)
    return c + lo * u, c + hi * u, R


def _points_capsule(V: np.ndarray, body: int, label: str) -> Capsule:
    """The capsule containing points V (k, 3) [m] of smallest volume found from their principal
    axis (Nelder-Mead over the axis direction; on the convex hull's vertices: a capsule is
    convex, so containing them contains the mesh)."""
    from scipy.optimize import minimize
    from scipy.spatial import ConvexHull, QhullError
    V = np.unique(np.asarray(V, float), axis=0)
    if len(V) > 64:
        try:
            V = V[ConvexHull(V).vertices]
        except (QhullError, ValueError):        # flat or degenerate: keep every point
            pass
    c0 = V.mean(0)
    _, vecs = np.linalg.eigh(np.cov((V - c0).T) if len(V) > 1 else np.eye(3))
    u0, e1, e2 = vecs[:, 2], vecs[:, 1], vecs[:, 0]

    def axis(z):
        u = u0 + z[0] * e1 + z[1] * e2
        return u / np.linalg.norm(u)

    def volume(z):
        a, b, R = _axis_capsule(V - c0, axis(z))
        return math.pi * R * R * (np.linalg.norm(b - a) + 4.0 * R / 3.0)
    z = minimize(volume, np.zeros(2), method="Nelder-Mead",
                 options={"xatol": 1e-6, "fatol": 1e-12, "initial_simplex":
                          np.array([[0.0, 0.0], [0.05, 0.0], [0.0, 0.05]])}).x
    if volume(z) > volume(np.zeros(2)):
        z = np.zeros(2)
    a, b, R = _axis_capsule(V - c0, axis(z))
    return Capsule(body, c0 + a, c0 + b, R, f"{label} mesh")


def _numbers(shape, key: str, label: str, *, default: str | None = None, n=(1,),
             positive: bool = False, nonneg: bool = False) -> np.ndarray:
    """The attribute `key` of a URDF <geometry> shape as finite numbers (count in `n`) [m or 1];
    a ValueError naming the link, shape and attribute otherwise."""
    text = shape.get(key, default)
    what = (f"{label}: " if label else "") + f"<{shape.tag} {key}={text!r}>"
    if text is None:
        raise ValueError(f"{what} is missing")
    try:
        v = np.array([float(x) for x in text.split()])
    except ValueError:
        raise ValueError(f"{what} is not a number") from None
    if v.size not in n or not np.all(np.isfinite(v)):
        raise ValueError(f"{what}: expected {' or '.join(map(str, n))} finite number(s)")
    if positive and np.any(v <= 0):
        raise ValueError(f"{what} must be > 0 [m]")
    if nonneg and np.any(v < 0):
        raise ValueError(f"{what} must be >= 0 [m]")
    return v


def _geometry_capsule(geom, T: np.ndarray, body: int, label: str,
                      urdf_dir: Path = Path(".")) -> Capsule:
    """The capsule containing one URDF <geometry> placed at pose T in the body frame."""
    shape = list(geom)[0]
    R, p = T[:3, :3], T[:3, 3]
    if shape.tag == "mesh":
        path = _resolve_mesh(shape.get("filename") or "", urdf_dir, label)
        scale = _numbers(shape, "scale", "", default="1 1 1", n=(1, 3))
        if np.any(scale == 0):
            raise ValueError(f"<mesh scale={shape.get('scale')!r}> has a zero factor")
        # the collision model is built several times per run (start-pose checks of both
        # trajectories, the optimizer, the backends): read and fit each mesh once
        st = path.stat()
        key = (str(path), st.st_mtime_ns, st.st_size, scale.tobytes(), T.tobytes(), body, label)
        if key not in _MESH_CAPSULES:
            if len(_MESH_CAPSULES) > 256:
                _MESH_CAPSULES.clear()
            V = _read_mesh_vertices(path, label)
            _MESH_CAPSULES[key] = _points_capsule((V * scale) @ R.T + p, body, label)
        return _MESH_CAPSULES[key]
    if shape.tag in ("cylinder", "capsule"):
        r = _numbers(shape, "radius", "", positive=True)[0]
        L = _numbers(shape, "length", "", nonneg=True)[0]
        ax = R[:, 2] * 0.5 * L
        return Capsule(body, p - ax, p + ax, r, f"{label} {shape.tag}")
    if shape.tag == "sphere":
        return Capsule(body, p.copy(), p.copy(), _numbers(shape, "radius", "", positive=True)[0],
                       f"{label} sphere")
    if shape.tag == "box":
        s = _numbers(shape, "size", "", n=(3,), positive=True)
        k = int(np.argmax(s))
        others = [i for i in range(3) if i != k]
        ax = R[:, k] * 0.5 * s[k]
        return Capsule(body, p - ax, p + ax, 0.5 * float(np.hypot(*s[others])), f"{label} box")
    raise ValueError(f"{label}: collision geometry <{shape.tag}> is not supported for the "
                     f"collision constraints (cylinder, sphere, box, capsule, mesh)")


def capsules_from_urdf(path, joint_names, *, link_tubes: bool = True, tube_radius: float = 0.04,
                       placements: np.ndarray | None = None, tube_min_length: float = 0.15
                       ) -> list[Capsule]:
    """Capsules of the arm in `path` whose moving joints are `joint_names` (see module doc).
    `placements` (n, 4, 4): joint frames in their parent body frames (RobotModel.placements),
    needed for the link tubes. Links shorter than tube_min_length [m] get no tube: a compact
    wrist is its joint housings (a tube there would overlap the neighbouring housings in most
    poses and forbid motions the real wrist makes)."""
    root = ET.parse(Path(path)).getroot()
    moving = list(joint_names)
    where = _body_links(root, moving)
    caps: list[Capsule] = []
    for link in root.findall("link"):
        ln = link.get("name")
        if ln not in where:
            continue
        body, T = where[ln]
        elems = link.findall("collision") or link.findall("visual")
        for e in elems:
            g = e.find("geometry")
            if g is None or not len(g):
                continue
            try:
                caps.append(_geometry_capsule(g, T @ _origin(e), body, f"{ln}", Path(path).parent))
            except ValueError as exc:
                raise ValueError(f"{path}: link {ln!r} <{e.tag}>: {exc}") from None
    if link_tubes and placements is not None:
        n = len(moving)
        names = {b: ln for ln, (b, T) in where.items() if np.allclose(T, np.eye(4))}
        for b in range(1, n):
            end = np.asarray(placements[b])[:3, 3]
            if np.linalg.norm(end) < max(tube_min_length, 1e-6) or any(
                    c.body == b and c.label.endswith(" mesh") for c in caps):
                continue        # a mesh is the link itself, not only its joint housings
            rs = [c.radius for c in caps if c.body == b]
            caps.append(Capsule(b, np.zeros(3), end.copy(), max(rs) if rs else float(tube_radius),
                                f"{names.get(b, f'body {b}')} tube"))
    return caps


# ------------------------------------------------------------------------------------------------
# forward kinematics of the body frames
# ------------------------------------------------------------------------------------------------
def body_frames_function(placements: np.ndarray, axes: np.ndarray) -> ca.Function:
    """CasADi Function q (n,) -> (3, 4 (n+1)): [R_b | p_b] of every body frame in the world
    (body 0 = base: identity)."""
    n = placements.shape[0]
    q = ca.SX.sym("q", n)
    R_w, p_w = ca.SX.eye(3), ca.SX.zeros(3)
    cols = [R_w, p_w]
    for i in range(n):
        Tp = np.asarray(placements[i])
        p_w = p_w + ca.mtimes(R_w, ca.DM(Tp[:3, 3]))
        R_w = ca.mtimes(ca.mtimes(R_w, ca.DM(Tp[:3, :3])), _axis_rot_sx(axes[i], q[i]))
        cols += [R_w, p_w]
    return ca.Function("body_frames", [q], [ca.horzcat(*cols)], ["q"], ["T"])


def _axis_rot_sx(axis, angle):
    """Rodrigues rotation about a constant unit axis by a symbolic angle."""
    k = np.asarray(axis, float) / np.linalg.norm(axis)
    K = ca.DM([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    return ca.DM.eye(3) + ca.sin(angle) * K + (1 - ca.cos(angle)) * ca.mtimes(K, K)


# ------------------------------------------------------------------------------------------------
# distances
# ------------------------------------------------------------------------------------------------
def segment_distance(p1, q1, p2, q2) -> np.ndarray:
    """Distance between segments p1-q1 and p2-q2 [m]; arrays (..., 3) broadcast, result (...).
    Closest points by clamped projections (Ericson 5.1.9), zero-length segments allowed."""
    d1, d2, r = q1 - p1, q2 - p2, p1 - p2
    a = np.sum(d1 * d1, -1)
    e = np.sum(d2 * d2, -1)
    b = np.sum(d1 * d2, -1)
    c = np.sum(d1 * r, -1)
    f = np.sum(d2 * r, -1)
    tiny = 1e-12
    denom = a * e - b * b
    with np.errstate(divide="ignore", invalid="ignore"):
        s = np.where(denom > tiny * np.maximum(a * e, tiny), (b * f - c * e) / denom, 0.0)
        s = np.clip(np.where(a > tiny, s, 0.0), 0, 1)
        t = np.where(e > tiny, np.clip((b * s + f) / e, 0, 1), 0.0)
        s = np.where(a > tiny, np.clip((b * t - c) / a, 0, 1), 0.0)
    diff = p1 + s[..., None] * d1 - p2 - t[..., None] * d2
    return np.sqrt(np.sum(diff * diff, -1))


def segment_distance_sx(p1, q1, p2, q2, a: float, e: float):
    """:func:`segment_distance` for CasADi 3-vectors; a = |q1 - p1|^2, e = |q2 - p2|^2 are the
    (constant, body-frame) squared segment lengths, so the degenerate cases are decided here."""
    d1, d2, r = q1 - p1, q2 - p2, p1 - p2
    tiny = 1e-12
    clamp = lambda x: ca.fmin(ca.fmax(x, 0), 1)  # noqa: E731
    b, c, f = ca.dot(d1, d2), ca.dot(d1, r), ca.dot(d2, r)
    if a > tiny and e > tiny:
        denom = a * e - b * b
        s = clamp((b * f - c * e) / ca.fmax(denom, 1e-9 * a * e))
        t = clamp((b * s + f) / e)
        s = clamp((b * t - c) / a)
    elif a > tiny:
        t, s = 0, clamp(-c / a)
    elif e > tiny:
        s, t = 0, clamp(f / e)
    else:
        s = t = 0
    diff = p1 + s * d1 - p2 - t * d2
    return ca.sqrt(ca.sumsqr(diff) + 1e-12)


def _box_distance(P, center, half):
    """Distance of points P (..., 3) to an axis-aligned box (0 inside) [m]."""
    d = np.maximum(np.abs(P - center) - half, 0.0)
    return np.sqrt(np.sum(d * d, -1))


@dataclass
class ArmCapsules:
    """The capsules of an arm, the pairs to check and their distances over joint trajectories.

    Attributes:
        capsules: list of :class:`Capsule`.
        obstacles: tuple of :class:`Obstacle`.
        pairs: (P, 2) capsule index pairs of non-adjacent bodies.
        obstacle_pairs: (O, 2) (capsule index, obstacle index) of moving bodies 2...
        ignored: labels of pairs left out because they are closer than the margin at the
            reference pose (geometry overlap of the model itself, see :meth:`drop_close`).
    """
    capsules: list
    obstacles: tuple
    joint_names: tuple
    placements: np.ndarray
    axes: np.ndarray
    box_step: float = 0.02
    pairs: np.ndarray = field(default=None)
    obstacle_pairs: np.ndarray = field(default=None)
    ignored: list = field(default_factory=list)

    def __post_init__(self):
        C = len(self.capsules)
        body = np.array([c.body for c in self.capsules], int)
        if self.pairs is None:
            self.pairs = np.array([(i, j) for i in range(C) for j in range(i + 1, C)
                                   if abs(body[i] - body[j]) >= 2], int).reshape(-1, 2)
        if self.obstacle_pairs is None:
            self.obstacle_pairs = np.array([(i, k) for i in range(C) for k in range(len(self.obstacles))
                                            if body[i] >= 2], int).reshape(-1, 2)
        self._frames = body_frames_function(np.asarray(self.placements), np.asarray(self.axes))
        self._frames_map = {}

    @classmethod
    def of_model(cls, model, obstacles=(), *, link_tubes: bool = True, box_step: float = 0.02
                 ) -> "ArmCapsules":
        """Capsules of a RobotModel read from its URDF (model.source)."""
        caps = capsules_from_urdf(model.source, model.joint_names, link_tubes=link_tubes,
                                  placements=model.placements)
        return cls(caps, parse_obstacles(obstacles), tuple(model.joint_names),
                   np.asarray(model.placements), np.asarray(model.axes), box_step=box_step)

    # -- labels -------------------------------------------------------------------------------
    def pair_labels(self) -> list[str]:
        """One label per checked pair, capsule pairs first, then capsule-obstacle pairs."""
        c = self.capsules
        return ([f"{c[i].label} / {c[j].label}" for i, j in self.pairs] +
                [f"{c[i].label} / obstacle {self.obstacles[k].name!r}"
                 for i, k in self.obstacle_pairs])

    # -- numpy --------------------------------------------------------------------------------
    def frames(self, q) -> np.ndarray:
        """(N, n+1, 3, 4) world [R | p] of every body for q (N, n)."""
        q = np.atleast_2d(np.asarray(q, float))
        if "eval" not in self._frames_map:          # generated C, compiled once (cached on disk)
            from .regressor import BatchEvaluator
            qs = ca.SX.sym("q", len(self.joint_names))   # BatchEvaluator writes nonzeros: dense
            self._frames_map["eval"] = BatchEvaluator(
                ca.Function("body_frames_dense", [qs], [ca.densify(self._frames(qs))]))
        T = self._frames_map["eval"](q)                          # (N, 3, 4 (n+1))
        return T.reshape(q.shape[0], 3, -1, 4).transpose(0, 2, 1, 3)

    def endpoints(self, q) -> tuple[np.ndarray, np.ndarray]:
        """World endpoints A, B (N, C, 3) of every capsule for q (N, n)."""
        T = self.frames(q)
        body = np.array([c.body for c in self.capsules])
        a = np.array([c.a for c in self.capsules])
        b = np.array([c.b for c in self.capsules])
        Tb = T[:, body]                                          # (N, C, 3, 4)
        R, p = Tb[..., :3], Tb[..., 3]
        return (np.einsum("ncij,cj->nci", R, a) + p, np.einsum("ncij,cj->nci", R, b) + p)

    def distances(self, q) -> np.ndarray:
        """(N, P + O) surface distances [m] of every checked pair (order of :meth:`pair_labels`)."""
        A, B = self.endpoints(q)
        rad = np.array([c.radius for c in self.capsules])
        i, j = self.pairs[:, 0], self.pairs[:, 1]
        d = segment_distance(A[:, i], B[:, i], A[:, j], B[:, j]) - rad[i] - rad[j]
        out = [d]
        for ci, k in self.obstacle_pairs:
            ob = self.obstacles[k]
            if ob.kind == "plane":
                h = np.minimum((A[:, ci] - ob.point) @ ob.normal, (B[:, ci] - ob.point) @ ob.normal)
                out.append((h - rad[ci])[:, None])
            else:
                P, step = self._box_points(A[:, ci], B[:, ci], ci)
                out.append((_box_distance(P, ob.center, ob.half).min(-1) - rad[ci] - 0.5 * step)[:, None])
        return np.hstack(out)

    def _box_points(self, A, B, ci):
        L = float(np.linalg.norm(self.capsules[ci].b - self.capsules[ci].a))
        m = max(2, int(math.ceil(L / self.box_step)) + 1)
        u = np.linspace(0, 1, m)
        return A[..., None, :] + u[:, None] * (B - A)[..., None, :], L / (m - 1)

    def drop_close(self, q_ref, margin: float) -> "ArmCapsules":
        """Copy without the pairs closer than `margin` at the pose q_ref (n,): a pose the arm
        stands at, so such a pair is an overlap of the model's geometry (e.g. a joint housing on
        the table), not a collision the trajectory could avoid. Their labels go to `ignored`."""
        d = self.distances(np.asarray(q_ref, float)[None, :])[0]
        labels = self.pair_labels()
        P = len(self.pairs)
        keep = d >= margin
        return ArmCapsules(self.capsules, self.obstacles, self.joint_names, self.placements,
                           self.axes, self.box_step, self.pairs[keep[:P]],
                           self.obstacle_pairs[keep[P:]],
                           self.ignored + [l for l, k in zip(labels, keep) if not k])

    def drop_constant(self, q_samples, tol: float = 1e-7) -> "ArmCapsules":
        """Copy without the pairs whose distance is the same at every pose of q_samples (N, n):
        their clearance is settled by the start pose (no constraint rows needed; a constant row
        only makes the problem degenerate)."""
        D = self.distances(np.asarray(q_samples, float))
        keep = np.ptp(D, axis=0) > tol
        P = len(self.pairs)
        return ArmCapsules(self.capsules, self.obstacles, self.joint_names, self.placements,
                           self.axes, self.box_step, self.pairs[keep[:P]],
                           self.obstacle_pairs[keep[P:]], list(self.ignored))

    # -- CasADi -------------------------------------------------------------------------------
    def distance_function(self) -> ca.Function:
        """SX Function q (n,) -> (P + O') distances [m]: one row per capsule pair, per plane
        pair one row per capsule end (min of the two is the distance), per box pair one row per
        point along the capsule (all must stay >= the margin)."""
        n = len(self.joint_names)
        q = ca.SX.sym("q", n)
        T = self._frames(q)
        W = []
        for c in self.capsules:
            R, p = T[:, 4 * c.body:4 * c.body + 3], T[:, 4 * c.body + 3]
            W.append((ca.mtimes(R, ca.DM(c.a)) + p, ca.mtimes(R, ca.DM(c.b)) + p))
        rows = []
        for i, j in self.pairs:
            ci, cj = self.capsules[i], self.capsules[j]
            a = float(np.sum((ci.b - ci.a) ** 2))
            e = float(np.sum((cj.b - cj.a) ** 2))
            rows.append(segment_distance_sx(W[i][0], W[i][1], W[j][0], W[j][1], a, e)
                        - ci.radius - cj.radius)
        for ci, k in self.obstacle_pairs:
            ob, r = self.obstacles[k], self.capsules[ci].radius
            A, B = W[ci]
            if ob.kind == "plane":
                nrm, pt = ca.DM(ob.normal), ca.DM(ob.point)
                rows += [ca.dot(A - pt, nrm) - r, ca.dot(B - pt, nrm) - r]
            else:
                L = float(np.linalg.norm(self.capsules[ci].b - self.capsules[ci].a))
                m = max(2, int(math.ceil(L / self.box_step)) + 1)
                for u in np.linspace(0, 1, m):
                    P = A + u * (B - A)
                    d = ca.fmax(ca.fabs(P - ca.DM(ob.center)) - ca.DM(ob.half), 0)
                    rows.append(ca.sqrt(ca.sumsqr(d) + 1e-12) - r - 0.5 * L / (m - 1))
        out = ca.vertcat(*rows) if rows else ca.SX(0, 1)
        return ca.Function("capsule_distances", [q], [out], ["q"], ["d"])

    def row_owner(self) -> np.ndarray:
        """(rows of :meth:`distance_function`,) index of the pair (in :meth:`pair_labels` order)
        each row belongs to."""
        own = list(range(len(self.pairs)))
        for k, (ci, ok) in enumerate(self.obstacle_pairs):
            ob = self.obstacles[ok]
            if ob.kind == "plane":
                m = 2
            else:
                L = float(np.linalg.norm(self.capsules[ci].b - self.capsules[ci].a))
                m = max(2, int(math.ceil(L / self.box_step)) + 1)
            own += [len(self.pairs) + k] * m
        return np.array(own, int)

