"""The model a controller uses: rigid body + joint terms (link side) + drive (motor side).

Per joint j, SI units, arrays (N, n)::

    tau_r = RNEA(q, qd, qdd; params) + armature*qdd + viscous*qd + coulomb*shape(qd) + offset
    tau_m = tau_r / (1 - Mxi) + f_mc*shape(qd) + f_mv*qd + J_m*qdd          (motor torque, link side)
    Mxi   = xi_lin + s*sign(tau_r)*xi_opp,  s = tanh(qd / load_eps)          (reducer loss)

tau_r is the joint-torque-sensor (spring) torque, tau_m the motor torque reflected to the link
(eta*beta*i). The compliance term J_m/K * d2tau_r/dt2 of the improved model is left out (it needs
the second derivative of the torque; < 1e-3 of the torque on the reference arm). Without a drive
(``motor_side`` False) tau_m = tau_r: the model was fitted to the motor torque directly (a
simplified model's export).

Three sources, one type: :func:`from_export` (the exported URDF, the joint sidecar
when present, stage 2 from the parameters document), :func:`from_parameters`
(arrays, e.g. the twin's truth, built by the app), and the CAD model (:func:`cad_model`)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from identify.common.fileio import read_yaml
from identify.model.robot_model import RobotModel

__all__ = ["JointModel", "from_export", "from_parameters", "cad_model", "shape"]


def shape(qd: np.ndarray, scale: float) -> np.ndarray:
    """Coulomb shape of a velocity [rad/s]: sign(qd) (scale <= 0) or tanh(qd / scale)."""
    return np.sign(qd) if scale <= 0 else np.tanh(qd / scale)


@dataclass
class JointModel:
    """A full dynamic model of the arm (see module doc). robot: RobotModel whose ``params`` are the
    model's standard inertial parameters (10n,); per-joint arrays (n,); source: where it came
    from (for reports)."""
    robot: RobotModel
    viscous: np.ndarray
    coulomb: np.ndarray
    offset: np.ndarray
    armature: np.ndarray
    xi_lin: np.ndarray
    xi_opp: np.ndarray
    f_mc: np.ndarray
    f_mv: np.ndarray
    J_m: np.ndarray
    motor_side: bool = True
    coulomb_scale: float = 0.01
    load_eps: float = 0.01
    source: str = ""

    def __post_init__(self):
        n = self.robot.n
        for f in ("viscous", "coulomb", "offset", "armature", "xi_lin", "xi_opp", "f_mc", "f_mv",
                  "J_m"):
            v = getattr(self, f)
            v = np.zeros(n) if v is None else np.asarray(v, float).reshape(-1)
            if v.shape != (n,) or not np.all(np.isfinite(v)):
                raise ValueError(f"joint model ({self.source}): {f} must be {n} finite values, "
                                 f"got {np.asarray(v).tolist()}")
            setattr(self, f, v)
        if np.any(np.abs(self.xi_lin) + np.abs(self.xi_opp) >= 1):
            raise ValueError(f"joint model ({self.source}): reducer loss |xi_lin| + |xi_opp| must "
                             f"be < 1, got {self.xi_lin.tolist()} / {self.xi_opp.tolist()}")

    @property
    def n(self) -> int:
        return self.robot.n

    def joint_torque(self, q, qd, qdd) -> np.ndarray:
        """Predicted torque-sensor torque tau_r (N, n) [N*m]."""
        qd, qdd = np.atleast_2d(qd), np.atleast_2d(qdd)
        return (self.robot.inverse_dynamics(q, qd, qdd) + self.armature * qdd
                + self.viscous * qd + self.coulomb * shape(qd, self.coulomb_scale) + self.offset)

    def reducer_multiplier(self, qd, tau_r) -> np.ndarray:
        """Mxi (N, n): tau_in = tau_r / (1 - Mxi) is the reducer's input torque."""
        s = np.tanh(np.asarray(qd, float) / self.load_eps)
        return self.xi_lin + s * np.sign(tau_r) * self.xi_opp

    def motor_torque(self, q, qd, qdd) -> np.ndarray:
        """Predicted motor torque tau_m (N, n) [N*m, link side]: the torque feed-forward."""
        tau_r = self.joint_torque(q, qd, qdd)
        if not self.motor_side:
            return tau_r
        qd, qdd = np.atleast_2d(qd), np.atleast_2d(qdd)
        return (tau_r / (1.0 - self.reducer_multiplier(qd, tau_r))
                + self.f_mc * shape(qd, self.coulomb_scale) + self.f_mv * qd + self.J_m * qdd)

    def with_robot(self, robot: RobotModel) -> "JointModel":
        return dataclasses.replace(self, robot=robot)


def from_parameters(robot: RobotModel, inertial, *, viscous=None, coulomb=None, offset=None,
                    armature=None, stage2: dict | None = None, motor_side: bool = True,
                    source: str = "") -> JointModel:
    """A JointModel from arrays: inertial (10n,) standard parameters, link-side joint terms (n,),
    stage2: {"xi_lin", "xi_opp", "f_mc", "f_mv", "J_m"} -> (n,) (missing: 0)."""
    s2 = stage2 or {}
    return JointModel(robot=robot.with_params(inertial), viscous=viscous, coulomb=coulomb,
                      offset=offset, armature=armature, xi_lin=s2.get("xi_lin"),
                      xi_opp=s2.get("xi_opp"), f_mc=s2.get("f_mc"), f_mv=s2.get("f_mv"),
                      J_m=s2.get("J_m"), motor_side=motor_side, source=source)


def cad_model(robot: RobotModel, inertial, J_m, source: str = "CAD") -> JointModel:
    """What a commissioning engineer has without identification: CAD inertia (`inertial`, 10n)
    and the datasheet's reflected rotor inertia `J_m` (n,); no friction, no reducer loss."""
    return from_parameters(robot, inertial, stage2={"J_m": J_m}, source=source)


def _sidecar(path: Path, names) -> dict | None:
    """The joint sidecar's per-joint terms (identified_joints.yaml, see identify.model's writer):
    {"viscous", "coulomb", "offset", "armature": (n,), "scale": float, "signal": str}, or None when
    the file is absent. Errors name the file and the joint."""
    if not path.is_file():
        return None
    doc = read_yaml(path)
    joints = doc.get("joints") if isinstance(doc, dict) else None
    if not isinstance(joints, dict):
        raise ValueError(f"{path}: no 'joints' mapping")
    out = {k: np.zeros(len(names)) for k in ("viscous", "coulomb", "offset", "armature")}
    scale = 0.0
    for j, nm in enumerate(names):
        if nm not in joints:
            raise ValueError(f"{path}: joints: no entry for joint {nm!r}")
        e = joints[nm] or {}
        for k in out:
            out[k][j] = float(e.get(k, 0.0))
        if e.get("coulomb_shape", "sign") == "tanh":
            scale = float(e.get("coulomb_velocity_scale", 0.0))
    out["scale"] = scale
    out["signal"] = str(doc.get("signal", "joint torque"))
    return out


def _stage2(params_doc: dict, names, where: str) -> dict | None:
    """The improved model's stage-2 coefficients from parameters.yaml
    (models.improved.stage2: names, joints, params (n, k)) as name -> (n,), or None."""
    s2 = ((params_doc or {}).get("models") or {}).get("improved", {}).get("stage2")
    if not isinstance(s2, dict) or "params" not in s2:
        return None
    P = np.asarray(s2["params"], float)
    cols = list(s2.get("names", []))
    joints = list(s2.get("joints", names))
    if P.shape != (len(joints), len(cols)):
        raise ValueError(f"{where}: models.improved.stage2.params has shape {P.shape}, expected "
                         f"({len(joints)}, {len(cols)})")
    out = {}
    for k in ("xi_lin", "xi_opp", "f_mc", "f_mv", "J_m"):
        if k in cols:
            by = dict(zip(joints, P[:, cols.index(k)]))
            out[k] = np.array([by.get(nm, 0.0) for nm in names])
    return out


def from_export(robot: RobotModel, urdf, sidecar=None, parameters=None) -> JointModel:
    """The model a run exported: `urdf` (inertials, <dynamics> viscous and Coulomb), the joint
    sidecar `sidecar` when given and present (exact joint terms, offset, armature, Coulomb shape;
    it overrides <dynamics>), and the improved model's stage 2 from the parameters document
    `parameters` (motor side). The run folder's file names are identify.outputs.layout's
    (:func:`identify.outputs.layout.exported_model` finds them). `robot`: the arm's RobotModel
    (kinematics, gravity; its joints select the URDF's)."""
    urdf = Path(urdf)
    if not urdf.is_file():
        raise FileNotFoundError(f"{urdf}: the exported URDF is not there")
    names = list(robot.joint_names)
    ident = RobotModel.from_urdf(urdf, names, gravity=robot.gravity)
    if list(ident.joint_names) != names:
        raise ValueError(f"{urdf}: joints {list(ident.joint_names)} differ from the arm's {names}")
    from identify.model.urdf import load_chain
    chain = load_chain(urdf, names)
    terms = {"viscous": np.asarray(chain.damping, float), "coulomb": np.asarray(chain.friction, float),
             "offset": None, "armature": None}
    scale, signal = 0.0, "joint torque"
    side = None if sidecar is None else _sidecar(Path(sidecar), names)
    if side is not None:
        terms = {k: side[k] for k in ("viscous", "coulomb", "offset", "armature")}
        scale, signal = side["scale"], side["signal"]
    pfile = None if parameters is None else Path(parameters)
    s2 = _stage2(read_yaml(pfile) if pfile is not None and pfile.is_file()
                 else {}, names, str(pfile))
    motor_side = s2 is not None and "motor" not in signal
    src = f"{urdf}" + (f" + {Path(sidecar).name}" if side is not None else "") + \
        (f" + stage 2 of {pfile.name}" if motor_side else "")
    jm = from_parameters(robot, ident.params, **terms, stage2=s2 if motor_side else None,
                         motor_side=motor_side, source=src)
    if scale > 0:
        jm.coulomb_scale = scale
    return jm
