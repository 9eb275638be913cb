"""The joint terms an exported URDF cannot hold: ``identified_joints.yaml``.

A URDF carries the rigid body (``<inertial>``) and at most ``<dynamics damping friction>``; the
identified model also has a Coulomb shape, torque offsets and rotor inertia (armature). The
exported model predicts, per joint j, in the units of the fitted signal [N*m]::

    tau_j = RNEA(q, qd, qdd)_j + armature_j*qdd_j + viscous_j*qd_j + coulomb_j*shape(qd_j) + offset_j

    shape(v) = sign(v)                                    (coulomb_shape: sign)
    shape(v) = tanh(v / coulomb_velocity_scale)           (coulomb_shape: tanh)

with RNEA the inverse dynamics of the exported URDF (its inertials, gravity as in the run).
``viscous`` [N*m*s/rad], ``coulomb`` [N*m], ``offset`` [N*m], ``armature`` [kg*m^2],
``coulomb_velocity_scale`` [rad/s]. The values are the identified ones (not clipped), so the
file reproduces the run's prediction; the URDF's ``<dynamics>`` holds viscous and Coulomb clipped
at 0 for simulators.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

__all__ = ["JointTerms", "write_sidecar", "read_sidecar", "FORMULA", "SHAPES"]

FORMULA = ("tau = RNEA(q, qd, qdd) + armature*qdd + viscous*qd + coulomb*shape(qd) + offset; "
           "shape(v) = sign(v) (coulomb_shape: sign) or tanh(v / coulomb_velocity_scale) "
           "(coulomb_shape: tanh)")
SHAPES = ("sign", "tanh")
_KEYS = ("viscous", "coulomb", "offset", "armature")


@dataclass
class JointTerms:
    """Per-joint terms of an exported model (n joints, arrays (n,), zeros for terms not fitted).

    signal: what the model predicts ("joint torque" or "motor torque eta*beta*i")."""
    joint_names: list
    viscous: np.ndarray
    coulomb: np.ndarray
    offset: np.ndarray
    armature: np.ndarray
    coulomb_shape: str = "sign"
    coulomb_velocity_scale: float = 0.0
    signal: str = "joint torque"
    notes: list = field(default_factory=list)

    def __post_init__(self):
        n = len(self.joint_names)
        for k in _KEYS:
            v = np.zeros(n) if getattr(self, k) is None else \
                np.asarray(getattr(self, k), float).reshape(-1)
            if v.shape != (n,):
                raise ValueError(f"joint terms: {k} has {v.size} values for {n} joints")
            setattr(self, k, v)
        if self.coulomb_shape not in SHAPES:
            raise ValueError(f"coulomb_shape must be one of {SHAPES}, got {self.coulomb_shape!r}")
        if self.coulomb_shape == "tanh" and not self.coulomb_velocity_scale > 0:
            raise ValueError("coulomb_shape tanh needs coulomb_velocity_scale > 0 [rad/s]")

    def shape(self, qd: np.ndarray) -> np.ndarray:
        qd = np.asarray(qd, float)
        if self.coulomb_shape == "sign":
            return np.sign(qd)
        return np.tanh(qd / self.coulomb_velocity_scale)

    def torque(self, qd: np.ndarray, qdd: np.ndarray) -> np.ndarray:
        """(N, n) joint-term torque [N*m] for velocities / accelerations (N, n)."""
        qd, qdd = np.asarray(qd, float), np.asarray(qdd, float)
        return (self.armature * qdd + self.viscous * qd + self.coulomb * self.shape(qd)
                + self.offset)


def write_sidecar(path: str | os.PathLike, terms: JointTerms, *, urdf: str | None = None) -> Path:
    """Write ``identified_joints.yaml``: formula, units, signal and one entry per joint name."""
    from identify.common.fileio import write_yaml
    doc = {"formula": FORMULA,
           "units": {"viscous": "N*m*s/rad", "coulomb": "N*m", "offset": "N*m",
                     "armature": "kg*m^2", "coulomb_velocity_scale": "rad/s",
                     "torque": f"N*m of the fitted signal ({terms.signal})"},
           "signal": terms.signal, "urdf": urdf, "notes": list(terms.notes),
           "joints": {name: {"viscous": float(terms.viscous[j]), "coulomb": float(terms.coulomb[j]),
                             "coulomb_shape": terms.coulomb_shape,
                             "coulomb_velocity_scale": float(terms.coulomb_velocity_scale),
                             "offset": float(terms.offset[j]), "armature": float(terms.armature[j])}
                      for j, name in enumerate(terms.joint_names)}}
    path = Path(path)
    write_yaml(path, doc)
    return path


def read_sidecar(path: str | os.PathLike, joint_names=None) -> JointTerms:
    """Read ``identified_joints.yaml`` (in `joint_names` order when given). Errors name the file
    and the joint / key."""
    path = Path(path)
    doc = yaml.safe_load(path.read_text())
    joints = doc.get("joints") if isinstance(doc, dict) else None
    if not isinstance(joints, dict) or not joints:
        raise ValueError(f"{path}: no 'joints' mapping")
    names = list(joint_names) if joint_names is not None else list(joints)
    vals = {k: [] for k in _KEYS}
    shapes, scales = set(), set()
    for nm in names:
        if nm not in joints:
            raise ValueError(f"{path}: joints: no entry for joint {nm!r} (has {list(joints)})")
        e = joints[nm]
        for k in _KEYS:
            if k not in e:
                raise ValueError(f"{path}: joints.{nm}: missing key {k!r}")
            vals[k].append(float(e[k]))
        shapes.add(e.get("coulomb_shape", "sign"))
        scales.add(float(e.get("coulomb_velocity_scale", 0.0)))
    if len(shapes) > 1 or len(scales) > 1:
        raise ValueError(f"{path}: one coulomb_shape / coulomb_velocity_scale for all joints "
                         f"expected, got {sorted(shapes)} / {sorted(scales)}")
    return JointTerms(names, *(np.array(vals[k]) for k in _KEYS), coulomb_shape=shapes.pop(),
                      coulomb_velocity_scale=scales.pop(), signal=doc.get("signal", ""))
