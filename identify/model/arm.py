"""The arm description file (YAML): modified-DH kinematics, link inertia and limits.

It is the single source of truth for the reference arm; its URDF is generated from it:

    python -m identify.model.arm assets/cobot6.yaml            # writes assets/cobot6.urdf

Degrees and millimetres exist only in the file; :func:`load_description` converts them once.
"""
from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from identify.common.fileio import parse_yaml
from .spatial import params_from_inertial, rot_x, rot_z, transform
from .urdf import Chain, write_urdf

ASSETS = Path(__file__).resolve().parents[2] / "assets"   # the repository's assets/
REFERENCE_DESCRIPTION = ASSETS / "cobot6.yaml"
REFERENCE_URDF = ASSETS / "cobot6.urdf"
REFERENCE_DRIVES = ASSETS / "cobot6_drives.yaml"


@dataclass(frozen=True)
class ArmDescription:
    """An arm read from its description YAML, in SI.

    Attributes:
        name: arm name.
        joint_names: (n,).
        alpha, a, d, offset: (n,) MDH table [rad, m, m, rad]:
            T_{i-1,i} = RotX(alpha_i) TransX(a_i) RotZ(q_i + offset_i) TransZ(d_i).
        link_names: (n,).
        params: (n, 10) standard inertial parameters in each MDH link frame.
        base_name: base link name; base_params (10,) its inertia.
        q_min, q_max, qd_max, qdd_max, tau_max: (n,) limits [rad, rad/s, rad/s^2, N*m].
        gravity: (3,) [m/s^2] in the base frame.
        source: file path.
    """

    name: str
    joint_names: tuple
    alpha: np.ndarray
    a: np.ndarray
    d: np.ndarray
    offset: np.ndarray
    link_names: tuple
    params: np.ndarray
    base_name: str
    base_params: np.ndarray
    q_min: np.ndarray
    q_max: np.ndarray
    qd_max: np.ndarray
    qdd_max: np.ndarray
    tau_max: np.ndarray
    gravity: np.ndarray
    source: str

    @property
    def n(self) -> int:
        return len(self.joint_names)

    def mdh_transforms(self, q: np.ndarray) -> np.ndarray:
        """Forward kinematics from the MDH table.

        Args: q (n,) joint angles [rad].
        Returns: (n, 4, 4) pose of each link frame in the base frame.
        """
        q = np.asarray(q, dtype=float)
        T = np.eye(4)
        out = np.zeros((self.n, 4, 4))
        for i in range(self.n):
            A = transform(rot_x(self.alpha[i]), [self.a[i], 0.0, 0.0])
            B = transform(rot_z(q[i] + self.offset[i]), [0.0, 0.0, 0.0])
            C = transform(np.eye(3), [0.0, 0.0, self.d[i]])
            T = T @ A @ B @ C
            out[i] = T
        return out

    def to_chain(self) -> Chain:
        """The serial chain in URDF conventions: joint i's frame = MDH frame i at q = 0."""
        placements = np.zeros((self.n, 4, 4))
        for i in range(self.n):
            # RotZ(offset) and TransZ(d) commute, so the zero-angle placement is exact and the
            # joint rotates about its frame's z axis.
            placements[i] = (transform(rot_x(self.alpha[i]), [self.a[i], 0.0, 0.0])
                             @ transform(rot_z(self.offset[i]), [0.0, 0.0, self.d[i]]))
        return Chain(name=self.name, joint_names=list(self.joint_names),
                     link_names=list(self.link_names), base_link=self.base_name,
                     placements=placements, axes=np.tile([0.0, 0.0, 1.0], (self.n, 1)),
                     params=self.params.copy(), q_min=self.q_min, q_max=self.q_max,
                     qd_max=self.qd_max, tau_max=self.tau_max, damping=np.zeros(self.n),
                     friction=np.zeros(self.n), source=self.source)

    def write_urdf(self, path: str | os.PathLike) -> Path:
        return write_urdf(self.to_chain(), path, base_params=self.base_params,
                          comment=f"GENERATED from {Path(self.source).name} by "
                                  f"'python -m identify.model.arm'; do not edit by hand.")


def _get(d: dict, key: str, where: str):
    if not isinstance(d, dict) or key not in d:
        raise ValueError(f"{where}: missing key {key!r}")
    return d[key]


def _vec(d: dict, key: str, n: int, where: str) -> np.ndarray:
    v = np.asarray(_get(d, key, where), dtype=float)
    if v.shape != (n,):
        raise ValueError(f"{where}.{key}: expected {n} numbers, got {list(np.atleast_1d(v))}")
    return v


def _inertial(entry: dict, where: str) -> np.ndarray:
    m = float(_get(entry, "mass_kg", where))
    com = _vec(entry, "com_m", 3, where)
    ixx, iyy, izz, ixy, ixz, iyz = _vec(entry, "inertia_com_kgm2", 6, where)
    I = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    return params_from_inertial(m, com, I)


def load_description(path: str | os.PathLike = REFERENCE_DESCRIPTION) -> ArmDescription:
    """Read an arm description YAML and convert it to SI (see assets/cobot6.yaml for the format)."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"arm description not found: {path}")
    with open(path) as fh:
        doc = parse_yaml(fh.read())
    where = str(path)
    mdh = _get(doc, "mdh", where)
    links = _get(doc, "links", where)
    if len(mdh) != len(links):
        raise ValueError(f"{where}: {len(mdh)} MDH rows but {len(links)} links")
    n = len(mdh)
    deg = np.pi / 180.0
    rows = [(f"{where}: mdh[{i}]", r) for i, r in enumerate(mdh)]
    alpha = np.array([float(_get(r, "alpha_deg", w)) * deg for w, r in rows])
    a = np.array([float(_get(r, "a_mm", w)) * 1e-3 for w, r in rows])
    d = np.array([float(_get(r, "d_mm", w)) * 1e-3 for w, r in rows])
    off = np.array([float(r.get("offset_deg", 0.0)) * deg for _, r in rows])
    params = np.array([_inertial(l, f"{where}: links[{i}]") for i, l in enumerate(links)])
    base = _get(doc, "base", where)
    lim = _get(doc, "limits", where)
    lw = f"{where}: limits"
    return ArmDescription(
        name=str(doc.get("name", path.stem)),
        joint_names=tuple(str(_get(r, "joint", w)) for w, r in rows),
        alpha=alpha, a=a, d=d, offset=off,
        link_names=tuple(str(_get(l, "name", f"{where}: links[{i}]")) for i, l in enumerate(links)),
        params=params, base_name=str(base.get("name", "base_link")),
        base_params=_inertial(base, f"{where}: base"),
        q_min=_vec(lim, "q_min_deg", n, lw) * deg, q_max=_vec(lim, "q_max_deg", n, lw) * deg,
        qd_max=_vec(lim, "qd_max_deg_s", n, lw) * deg,
        qdd_max=_vec(lim, "qdd_max_deg_s2", n, lw) * deg,
        tau_max=_vec(lim, "tau_max_Nm", n, lw),
        gravity=np.asarray(doc.get("gravity_m_s2", [0.0, 0.0, -9.81]), dtype=float),
        source=str(path))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m identify.model.arm",
                                 description="Generate the URDF of an arm from its description YAML.")
    ap.add_argument("description", nargs="?", default=str(REFERENCE_DESCRIPTION))
    ap.add_argument("-o", "--output", help="URDF path (default: the YAML's path with .urdf)")
    args = ap.parse_args(argv)
    desc = load_description(args.description)
    out = Path(args.output) if args.output else Path(args.description).with_suffix(".urdf")
    desc.write_urdf(out)
    print(f"wrote {out} ({desc.n} joints)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
