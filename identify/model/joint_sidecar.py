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

A joint may also list ``terms``: library terms (identify.model.friction.Term; every formula in
docs/friction-terms.md) added on top, each ``{kind, <shape constants>, coefficients: [...]}``::

    tau_j += sum_terms  columns(kind, constants; qd_j, qdd_j, dt, tau_L_j) . coefficients
    tau_L = RNEA(q, qd, qdd) + (armature + library armature) * qdd     (the load torque)

The Dahl state starts at z = 0 at the first sample and is integrated over the samples given
(dt = their spacing). ``python -m identify.model.joint_sidecar URDF SIDECAR STATES.npz`` (arrays
t, q, qd, qdd [, tau]) prints / writes this prediction (:func:`predict_torque`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from identify.common.fileio import read_yaml

__all__ = ["JointTerms", "write_sidecar", "read_sidecar", "predict_torque", "FORMULA", "SHAPES"]

FORMULA = ("tau = RNEA(q, qd, qdd) + armature*qdd + viscous*qd + coulomb*shape(qd) + offset "
           "[+ sum of the joint's library terms: columns . coefficients, docs/friction-terms.md, "
           "tau_L = RNEA + armature*qdd]; "
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
    #: per joint [(Term, coefficients (width,))] of library terms added on top (or None)
    library: list | None = None

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

    def torque(self, qd: np.ndarray, qdd: np.ndarray, *, dt: float = 0.0,
               rigid: np.ndarray | None = None) -> np.ndarray:
        """(N, n) joint-term torque [N*m] for velocities / accelerations (N, n). Library terms
        need the sample interval `dt` [s] (Dahl) and the rigid-body torque `rigid` (N, n) [N*m]
        (load-dependent terms: tau_L = rigid + armature*qdd)."""
        qd, qdd = np.asarray(qd, float), np.asarray(qdd, float)
        out = (self.armature * qdd + self.viscous * qd + self.coulomb * self.shape(qd)
               + self.offset)
        if not self.library:
            return out
        from .friction import term_columns
        arm = self.armature + np.array([sum(float(c[0]) for t, c in row if t.kind == "armature")
                                        for row in self.library])
        tl = None if rigid is None else np.asarray(rigid, float) + arm * qdd
        for j, row in enumerate(self.library):
            for t, c in row:
                if t.kind.startswith("load_coulomb") and tl is None:
                    raise ValueError(f"joint {self.joint_names[j]}: term {t.label} needs the "
                                     f"rigid-body torque (rigid=)")
                if t.kind == "dahl" and not dt > 0:
                    raise ValueError(f"joint {self.joint_names[j]}: term {t.label} needs the "
                                     f"sample interval dt > 0")
                cols = term_columns(t, qd[:, j], qdd[:, j], dt=dt,
                                    tau_load=None if tl is None else tl[:, j])
                out[:, j] += cols @ np.asarray(c, float)
        return out


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
                             "offset": float(terms.offset[j]), "armature": float(terms.armature[j]),
                             **({"terms": [{**t.to_dict(), "coefficients":
                                            [float(x) for x in np.ravel(c)]}
                                           for t, c in terms.library[j]]}
                                if terms.library else {})}
                      for j, name in enumerate(terms.joint_names)}}
    path = Path(path)
    write_yaml(path, doc)
    return path


def read_sidecar(path: str | os.PathLike, joint_names=None) -> JointTerms:
    """Read ``identified_joints.yaml`` (in `joint_names` order when given). Errors name the file
    and the joint / key."""
    path = Path(path)
    doc = read_yaml(path)
    joints = doc.get("joints") if isinstance(doc, dict) else None
    if not isinstance(joints, dict) or not joints:
        raise ValueError(f"{path}: no 'joints' mapping")
    names = list(joint_names) if joint_names is not None else list(joints)
    vals = {k: [] for k in _KEYS}
    shapes, scales, library = set(), set(), []
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
        library.append(_read_terms(path, nm, e.get("terms") or []))
    if len(shapes) > 1 or len(scales) > 1:
        raise ValueError(f"{path}: one coulomb_shape / coulomb_velocity_scale for all joints "
                         f"expected, got {sorted(shapes)} / {sorted(scales)}")
    return JointTerms(names, *(np.array(vals[k]) for k in _KEYS), coulomb_shape=shapes.pop(),
                      coulomb_velocity_scale=scales.pop(), signal=doc.get("signal", ""),
                      library=library if any(library) else None)


def _read_terms(path, joint, entries) -> list:
    """[(Term, coefficients)] of a joint's ``terms`` list; errors name the file, joint, entry."""
    from .friction import parse_term
    out = []
    for i, e in enumerate(entries):
        where = f"{path}: joints.{joint}.terms[{i}]"
        if not isinstance(e, dict) or "coefficients" not in e:
            raise ValueError(f"{where}: expected {{kind, ..., coefficients: [...]}}")
        try:
            t = parse_term({k: v for k, v in e.items() if k != "coefficients"})
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        c = np.asarray(e["coefficients"], float).reshape(-1)
        if c.size != t.width:
            raise ValueError(f"{where}: {t.kind} has {t.width} coefficient(s), got {c.size}")
        out.append((t, c))
    return out


def predict_torque(urdf, sidecar, t, q, qd, qdd) -> np.ndarray:
    """The exported model's torque (N, n) [N*m]: RNEA of `urdf` (its inertials, gravity -9.81 z)
    plus the joint terms of `sidecar` (identified_joints.yaml), on states t (N,) [s], q, qd, qdd
    (N, n) [rad, rad/s, rad/s^2] in the sidecar's joint order -- what the run reports as the
    export's prediction (metrics.json export.rms) when given the run's processed states."""
    from .robot_model import RobotModel
    jt = read_sidecar(sidecar)
    model = RobotModel.from_urdf(urdf, list(jt.joint_names))
    q, qd, qdd = (np.asarray(a, float) for a in (q, qd, qdd))
    t = np.asarray(t, float).reshape(-1)
    dt = float(np.median(np.diff(t))) if t.size > 1 else 0.0
    rigid = model.inverse_dynamics(q, qd, qdd)
    return rigid + jt.torque(qd, qdd, dt=dt, rigid=rigid)


def main(argv=None) -> int:
    """``python -m identify.model.joint_sidecar URDF SIDECAR STATES.npz [--out PRED.npz]``."""
    import argparse
    ap = argparse.ArgumentParser(prog="python -m identify.model.joint_sidecar",
                                 description="the exported model's torque from URDF + sidecar on "
                                             "the states of an NPZ (t, q, qd, qdd [, tau])")
    ap.add_argument("urdf")
    ap.add_argument("sidecar")
    ap.add_argument("states")
    ap.add_argument("--out", default=None, help="write the prediction (array tau_pred) here")
    a = ap.parse_args(argv)
    z = np.load(a.states)
    missing = [k for k in ("t", "q", "qd", "qdd") if k not in z]
    if missing:
        raise SystemExit(f"{a.states}: missing array(s) {missing}")
    pred = predict_torque(a.urdf, a.sidecar, z["t"], z["q"], z["qd"], z["qdd"])
    if a.out:
        np.savez(a.out, tau_pred=pred)
    if "tau" in z:
        rms = np.sqrt(np.mean((pred - z["tau"]) ** 2, axis=0))
        print("RMS vs tau per joint [N*m]: " + " ".join(f"{r:.4g}" for r in rms))
    else:
        print(f"predicted {pred.shape[0]} samples x {pred.shape[1]} joints")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
