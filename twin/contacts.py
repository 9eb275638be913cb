"""External contact forces on the twin's links (collision-detection tests): ``TwinSettings.contacts``.

Each contact {link, time_s, duration_s, force_N, point_m?} applies a constant WORLD-frame force on a
link over the 1 ms periods whose start lies in [time_s, time_s + duration_s), at the link's centre
of mass or at ``point_m`` given in the link's URDF frame. Per period, for the current pose, the
force's joint torque tau_ext = J_p(q)^T f (J_p the point's translational Jacobian, PyBullet's
calculateJacobian) enters the compiled step's link equation (M qdd + h = tau_l + tau_ext, so the
implicit spring prediction knows it) and PyBullet applies the force itself
(applyExternalForce, WORLD_FRAME). The truth records "tau_ext" (N, n) [N*m] and "f_ext" (N, k, 3)
[N] of the aligned samples (the force acting during the period starting at the sample).
"""
from __future__ import annotations

import numpy as np

from identify.common.banner import import_pybullet

p = import_pybullet()

_KEYS = {"link", "time_s", "duration_s", "force_N", "point_m"}


def period_range(c: dict, dt: float) -> tuple[int, int]:
    """[k0, k1): indices of the periods (on the recording's clock, period m starts at m dt) whose
    start lies in [time_s, time_s + duration_s), to 1e-9 of a period."""
    return (int(np.ceil(c["time_s"] / dt - 1e-9)),
            int(np.ceil((c["time_s"] + c["duration_s"]) / dt - 1e-9)))


def check_contacts(contacts, where: str = "contacts") -> None:
    """Raise ValueError naming the entry and key of a malformed contact list (link names are
    checked against the URDF when the twin loads it)."""
    if not isinstance(contacts, (list, tuple)):
        raise ValueError(f"{where}: must be a list of {{link, time_s, duration_s, force_N[, point_m]}}")
    for i, c in enumerate(contacts):
        w = f"{where}[{i}]"
        if not isinstance(c, dict):
            raise ValueError(f"{w}: must be a mapping")
        bad = sorted(set(c) - _KEYS)
        miss = sorted({"link", "time_s", "duration_s", "force_N"} - set(c))
        if bad or miss:
            raise ValueError(f"{w}: unknown key(s) {bad}, missing {miss}; keys: {sorted(_KEYS)}")
        if not isinstance(c["link"], str):
            raise ValueError(f"{w}.link: must be a link name")
        for k in ("time_s", "duration_s"):
            v = c[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise ValueError(f"{w}.{k}={v!r}: must be a finite number")
        if c["time_s"] < 0 or not c["duration_s"] > 0:
            raise ValueError(f"{w}: time_s must be >= 0 and duration_s > 0")
        for k in ("force_N", "point_m"):
            if k in c:
                try:
                    a = np.asarray(c[k], dtype=float)
                except (TypeError, ValueError):
                    a = np.zeros(0)
                if a.shape != (3,) or not np.all(np.isfinite(a)):
                    raise ValueError(f"{w}.{k}={c[k]!r}: must be 3 finite numbers")


class Contacts:
    """The contacts of one TwinSim: link indices, schedule on the simulation clock, and the
    per-period application (:meth:`apply`)."""

    def __init__(self, contacts, body: int, client: int, joint_idx: list, link_index: dict,
                 dt: float, k_offset: int = 0):
        """contacts: TwinSettings.contacts; link_index: URDF link name -> PyBullet link index;
        dt [s]: control period; k_offset: simulation period index of the recording's t = 0 (the
        settle periods)."""
        self.body, self.client, self.jidx = body, client, list(joint_idx)
        self.items = []
        for i, c in enumerate(contacts):
            if c["link"] not in link_index:
                raise ValueError(f"contacts[{i}].link={c['link']!r}: not a moving link of the URDF "
                                 f"(links: {sorted(link_index)})")
            k0, k1 = period_range(c, dt)
            self.items.append((link_index[c["link"]], k0 + k_offset, k1 + k_offset,
                               np.asarray(c["force_N"], float),
                               None if "point_m" not in c else np.asarray(c["point_m"], float)))
        self.k = len(self.items)
        #: world-frame force [N] of each contact in the last period, (k, 3)
        self.f = np.zeros((self.k, 3))

    def apply(self, k: int, q: list) -> np.ndarray | None:
        """At the start of simulation period k with link angles q (n,): apply the active forces in PyBullet (for
        its next stepSimulation) and return their joint torque tau_ext (n,) [N*m], or None when no
        contact is active."""
        self.f[:] = 0.0
        tau = None
        c, b = self.client, self.body
        zeros = [0.0] * len(q)
        for i, (li, k0, k1, f, pt) in enumerate(self.items):
            if not k0 <= k < k1:
                continue
            st = p.getLinkState(b, li, computeForwardKinematics=1, physicsClientId=c)
            # calculateJacobian takes the point in the URDF link frame (checked against finite
            # differences of the kinematics: the centre-of-mass frame would be off by the COM offset)
            if pt is None:
                world, local = np.asarray(st[0]), list(st[2])          # COM; its link-frame offset
            else:
                R = np.asarray(p.getMatrixFromQuaternion(st[5])).reshape(3, 3)
                world, local = np.asarray(st[4]) + R @ pt, pt.tolist()
            Jt, _ = p.calculateJacobian(b, li, local, list(q), zeros, zeros, physicsClientId=c)
            Jt = np.asarray(Jt)[:, :len(q)]
            tau = (0.0 if tau is None else tau) + Jt.T @ f
            p.applyExternalForce(b, li, f.tolist(), world.tolist(), p.WORLD_FRAME, physicsClientId=c)
            self.f[i] = f
        return tau
