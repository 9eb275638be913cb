"""The collision check every backend runs before it moves anything: PyBullet's
``getClosestPoints`` on the URDF's own collision shapes, independent of the capsules the
optimizer used (identify.model.collision).

Checked on a grid 10x denser than the optimizer's (``meta['problem']['n_grid']`` of an optimized
trajectory, else 2000 samples per period): every pair of non-adjacent links (bodies merged over
fixed joints; adjacent = parent and child) and every link of a moving body (the second one on)
against the obstacles declared with the trajectory (``meta['collision']``: ``obstacles``,
``margin_m``). A pair of links closer than the margin at the trajectory's start pose is an
overlap of the model's geometry (the arm stands there) and is left out, as in the optimizer; a
link that close to an obstacle at the start pose is refused (the obstacle or the start pose is
wrong).

    report = check_clearance(urdf, joint_names, trajectory)       # raises CollisionRefused
    report.min_distance  # (N,) smallest distance over all checked pairs [m]; report.t (N,) [s]
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from identify.model.collision import parse_obstacles


class CollisionRefused(ValueError):
    """A trajectory comes closer than the margin to the arm itself or an obstacle (message names
    the pair and the time). A ValueError: backends refuse a trajectory with it."""


@dataclass
class ClearanceReport:
    """t (N,) [s]; min_distance (N,) [m] over all checked pairs; worst pair label and its time;
    margin [m]; pairs checked; ignored pair labels (overlapping at the start pose); labels and
    distances (N, P) of every checked pair (getClosestPoints reports pairs within margin + 0.1 m
    only: farther ones read margin + 0.1 m)."""
    t: np.ndarray
    min_distance: np.ndarray
    worst_pair: str
    worst_time: float
    margin: float
    n_pairs: int
    ignored: list = field(default_factory=list)
    labels: list = field(default_factory=list)       # (P,) pairs held to the margin
    distances: np.ndarray | None = None              # (N, P) [m], capped at margin + 0.1 m
    contact_only: list = field(default_factory=list)  # pairs the design left out: no contact


def design_left_out(trajectory) -> set:
    """Link pairs ({link a, link b}) the optimizer left out of its clearance constraints
    (``meta.collision.ignored_pairs``: its capsules are closer than the margin at the start
    pose, the model's own closeness): the check holds them to no contact, not to the margin
    (the capsules around vendor meshes are looser than the meshes PyBullet measures)."""
    col = (getattr(trajectory, "meta", None) or {}).get("collision") or {}
    out = set()
    for lb in col.get("ignored_pairs") or ():
        sides = str(lb).split(" / ")
        if len(sides) == 2 and not sides[1].startswith("obstacle"):
            # capsule labels are "<link> <shape>" (identify.model.collision)
            out.add(frozenset(x.rsplit(" ", 1)[0] for x in sides))
    return out


def trajectory_collision_settings(trajectory) -> tuple[tuple, float, int]:
    """(obstacles, margin [m], samples per period) declared by an optimized trajectory's meta."""
    meta = getattr(trajectory, "meta", None) or {}
    col = meta.get("collision") or {}
    prob = meta.get("problem") or {}
    n_grid = int(prob.get("n_grid", 200))
    return tuple(col.get("obstacles") or ()), float(col.get("margin_m", 0.0)), 10 * n_grid


class _World:
    """A PyBullet DIRECT client with the arm (fixed base) and the obstacles."""

    def __init__(self, urdf, obstacles):
        from identify.common.banner import import_pybullet
        pb = import_pybullet()
        self.pb = pb
        self.cid = pb.connect(pb.DIRECT)
        self.arm = pb.loadURDF(str(urdf), useFixedBase=True, physicsClientId=self.cid)
        nj = pb.getNumJoints(self.arm, physicsClientId=self.cid)
        info = [pb.getJointInfo(self.arm, j, physicsClientId=self.cid) for j in range(nj)]
        self.joint_index = {i[1].decode(): j for j, i in enumerate(info)}
        self.link_names = {-1: pb.getBodyInfo(self.arm, physicsClientId=self.cid)[0].decode()}
        self.link_names.update({j: i[12].decode() for j, i in enumerate(info)})
        parent = {j: i[16] for j, i in enumerate(info)}
        fixed = {j: i[2] == pb.JOINT_FIXED for j, i in enumerate(info)}
        # body of each link: follow fixed joints up to the link a moving joint drives
        body = {-1: -1}
        for j in range(nj):
            k = j
            while fixed[k] and parent[k] != -1:
                k = parent[k]
            body[j] = -1 if fixed[k] and parent[k] == -1 else k
        self.body = body
        self.body_parent = {k: (body[parent[k]] if k != -1 else None) for k in set(body.values())}
        self.geom_links = [l for l in [-1] + list(range(nj))
                           if pb.getCollisionShapeData(self.arm, l, physicsClientId=self.cid)]
        self.obstacles = []
        for ob in obstacles:
            if ob.kind == "plane":
                # a thick slab below the plane: half-extent 50 m sideways, 1 m deep
                z = np.array([0.0, 0.0, 1.0])
                axis = np.cross(z, ob.normal)
                s = np.linalg.norm(axis)
                ang = math.atan2(s, float(z @ ob.normal))
                quat = (pb.getQuaternionFromAxisAngle((axis / s).tolist(), ang) if s > 1e-12
                        else ((0, 0, 0, 1) if ob.normal[2] > 0 else (1, 0, 0, 0)))
                shape = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=[50, 50, 1],
                                                physicsClientId=self.cid)
                pos = (ob.point - ob.normal * 1.0).tolist()
            else:
                shape = pb.createCollisionShape(pb.GEOM_BOX, halfExtents=ob.half.tolist(),
                                                physicsClientId=self.cid)
                pos, quat = ob.center.tolist(), (0, 0, 0, 1)
            bid = pb.createMultiBody(0, shape, basePosition=pos, baseOrientation=quat,
                                     physicsClientId=self.cid)
            self.obstacles.append((bid, ob.name))

    def adjacent(self, a: int, b: int) -> bool:
        ba, bb = self.body[a], self.body[b]
        return ba == bb or self.body_parent.get(ba) == bb or self.body_parent.get(bb) == ba

    def pairs(self) -> list[tuple[str, int, int]]:
        """The pairs checked: ("self", link a, link b) of non-adjacent bodies, and ("obs", link,
        obstacle k) -- the base and the first moving body stand on the table and are not checked
        against obstacles."""
        links = self.geom_links
        pairs = [("self", a, b) for i, a in enumerate(links) for b in links[i + 1:]
                 if not self.adjacent(a, b)]
        first = sorted(v for v in set(self.body.values()) if v != -1)[:1]
        pairs += [("obs", a, k) for a in links if self.body[a] not in [-1] + first
                  for k in range(len(self.obstacles))]
        return pairs

    def label(self, pair) -> str:
        kind, a, b = pair
        return (f"{self.link_names[a]} / {self.link_names[b]}" if kind == "self" else
                f"{self.link_names[a]} / obstacle {self.obstacles[b][1]!r}")

    def set_pose(self, idx, qk) -> None:
        for j, v in zip(idx, qk):
            self.pb.resetJointState(self.arm, j, float(v), physicsClientId=self.cid)

    def distance(self, pair, far: float) -> float:
        """Signed distance of `pair` at the current pose [m] (far: nothing closer than it)."""
        kind, a, b = pair
        other, link = (self.arm, b) if kind == "self" else (self.obstacles[b][0], -1)
        pts = self.pb.getClosestPoints(self.arm, other, far, a, link, physicsClientId=self.cid)
        return min((p[8] for p in pts), default=far)

    def close(self):
        self.pb.disconnect(self.cid)


def _refuse_obstacle_at_start(pairs, d0: dict, label, margin: float, tol: float, t0: float,
                              what: str) -> None:
    """An obstacle is no part of the model: one the start pose already reaches into is a wrong
    declaration or a wrong start pose, never an overlap to leave out."""
    bad = [(label(p), d0[label(p)]) for p in pairs if p[0] == "obs" and d0[label(p)] < margin - tol]
    if bad:
        lb, d = min(bad, key=lambda x: x[1])
        raise CollisionRefused(
            f"{what} collides: {lb} at t = {t0:.3f} s, the start pose: "
            f"{'contact (penetration distance' if d < 0 else 'clearance below the margin ('}"
            f" {1e3 * d:.1f} mm, margin {1e3 * margin:.1f} mm; an obstacle the start pose "
            f"reaches is declared wrong or the start pose is); nothing was run")


def check_clearance(urdf, joint_names, trajectory=None, *, q=None, t=None, obstacles=None,
                    margin: float | None = None, n_samples: int | None = None,
                    tol: float = 1e-4, what: str = "trajectory") -> ClearanceReport:
    """Check one period of `trajectory` (or samples q (N, len(joint_names)) at times t) for
    collisions with PyBullet; joints of the URDF not in `joint_names` are held at 0.

    obstacles, margin, n_samples default to the trajectory's declaration
    (:func:`trajectory_collision_settings`). Raises :class:`CollisionRefused` naming the pair and
    the time of the closest approach when any checked distance is below margin - tol [m]."""
    obs_d, marg_d, ns_d = trajectory_collision_settings(trajectory)
    obstacles = parse_obstacles(obs_d if obstacles is None else obstacles)
    margin = marg_d if margin is None else float(margin)
    if q is None:
        N = int(n_samples or ns_d)
        period = float(getattr(trajectory, "period", trajectory.duration))
        t = np.arange(N) * (period / N)
        q = np.asarray(trajectory.evaluate(t)[0], float)
    q = np.atleast_2d(np.asarray(q, float))
    t = np.arange(q.shape[0], dtype=float) if t is None else np.asarray(t, float)
    w = _World(urdf, obstacles)
    label = w.label
    try:
        missing = [j for j in joint_names if j not in w.joint_index]
        if missing:
            raise ValueError(f"{urdf}: joint(s) {missing} not in the URDF")
        idx = [w.joint_index[j] for j in joint_names]
        far = max(margin, 0.0) + 0.1   # getClosestPoints reports pairs within this distance only
        pairs = w.pairs()
        w.set_pose(idx, q[0])
        d0 = {label(p): w.distance(p, far) for p in pairs}
        _refuse_obstacle_at_start(pairs, d0, label, margin, tol, t[0], what)
        ignored = [lb for lb, d in d0.items() if d < margin]
        left = design_left_out(trajectory)
        loose = [p for p in pairs if label(p) not in ignored and p[0] == "self"
                 and frozenset((w.link_names[p[1]], w.link_names[p[2]])) in left]
        pairs = [p for p in pairs if label(p) not in ignored and p not in loose]
        D = np.empty((q.shape[0], len(pairs)))
        Dl = np.empty((q.shape[0], len(loose)))
        for k in range(q.shape[0]):
            w.set_pose(idx, q[k])
            D[k] = [w.distance(p, far) for p in pairs]
            Dl[k] = [w.distance(p, far) for p in loose]
    finally:
        w.close()
    if loose and Dl.min() < -tol:
        k, p = np.unravel_index(int(np.argmin(Dl)), Dl.shape)
        raise CollisionRefused(
            f"{what} collides: {label(loose[p])} at t = {t[k]:.3f} s (sample {k} of {len(t)}): "
            f"contact (penetration distance {1e3 * Dl[k, p]:.1f} mm; a pair the design left out "
            f"of its margin, held to no contact); nothing was run")
    if not pairs:
        return ClearanceReport(t, np.full(len(t), np.inf), "", 0.0, margin, 0, ignored,
                               contact_only=[label(x) for x in loose])
    k, p = np.unravel_index(int(np.argmin(D)), D.shape)
    rep = ClearanceReport(t, D.min(1), label(pairs[p]), float(t[k]), margin, len(pairs), ignored,
                          [label(x) for x in pairs], D, [label(x) for x in loose])
    if D[k, p] < margin - tol:
        contact = "contact (penetration" if D[k, p] < 0 else "clearance below the margin ("
        raise CollisionRefused(
            f"{what} collides: {label(pairs[p])} at t = {t[k]:.3f} s (sample {k} of {len(t)}): "
            f"{contact} distance {1e3 * D[k, p]:.1f} mm, margin {1e3 * margin:.1f} mm); "
            f"nothing was run")
    return rep
