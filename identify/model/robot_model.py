"""`RobotModel`: an immutable serial-chain arm with its linear-in-parameters dynamics.

    from identify import RobotModel
    m = RobotModel.from_urdf("assets/cobot6.urdf")
    Y = m.regressor(q, qd, qdd)            # (N, n, 10n)
    tau = m.inverse_dynamics(q, qd, qdd)   # == Y @ m.inertial_parameters()
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

import casadi as ca
import numpy as np

from .regressor import BatchEvaluator, build_link_origins, build_regressor
from .urdf import Chain, load_chain

PARAM_LABELS = ("m", "mx", "my", "mz", "XX", "XY", "YY", "XZ", "YZ", "ZZ")


@dataclass(frozen=True)
class Limits:
    """Joint limits, (n,) arrays in SI (inf where unknown)."""

    q_min: np.ndarray
    q_max: np.ndarray
    qd_max: np.ndarray
    qdd_max: np.ndarray
    tau_max: np.ndarray

    def scaled(self, factor: float) -> "Limits":
        """Velocity/acceleration/torque limits scaled by `factor` (positions kept)."""
        return Limits(self.q_min, self.q_max, self.qd_max * factor, self.qdd_max * factor,
                      self.tau_max * factor)


@dataclass(frozen=True, eq=False)
class RobotModel:
    """A serial chain of n revolute joints (immutable; CasADi functions are built lazily, once).

    Attributes:
        name: arm name.
        joint_names, link_names: (n,).
        placements: (n, 4, 4) joint frame in parent joint frame at q = 0 [m].
        axes: (n, 3) joint axes in joint frames.
        params: (10n,) standard inertial parameters (Pinocchio order per link).
        limits: :class:`Limits`.
        gravity: (3,) [m/s^2] in the base frame.
        source: file the model came from.
    """

    name: str
    joint_names: tuple
    link_names: tuple
    placements: np.ndarray
    axes: np.ndarray
    params: np.ndarray
    limits: Limits
    gravity: np.ndarray = field(default_factory=lambda: np.array([0.0, 0.0, -9.81]))
    source: str = ""

    # -- construction --------------------------------------------------------------------------
    @classmethod
    def from_chain(cls, chain: Chain, qdd_max: np.ndarray | None = None,
                   gravity=(0.0, 0.0, -9.81)) -> "RobotModel":
        n = len(chain.joint_names)
        lim = Limits(q_min=chain.q_min.copy(), q_max=chain.q_max.copy(), qd_max=chain.qd_max.copy(),
                     qdd_max=np.full(n, np.inf) if qdd_max is None else np.asarray(qdd_max, float),
                     tau_max=chain.tau_max.copy())
        return cls(name=chain.name, joint_names=tuple(chain.joint_names),
                   link_names=tuple(chain.link_names), placements=chain.placements.copy(),
                   axes=chain.axes.copy(), params=chain.params.reshape(-1).copy(), limits=lim,
                   gravity=np.asarray(gravity, dtype=float), source=chain.source)

    @classmethod
    def from_urdf(cls, path: str | os.PathLike, joints: list[str] | None = None, *,
                  qdd_max=None, gravity=(0.0, 0.0, -9.81)) -> "RobotModel":
        """Load a serial revolute chain from a URDF.

        Args:
            path: URDF file.
            joints: joint names to keep moving; other non-fixed joints are locked at zero.
            qdd_max: (n,) acceleration limits [rad/s^2] (URDF has none; default inf).
            gravity: (3,) [m/s^2].
        """
        return cls.from_chain(load_chain(path, joints), qdd_max=qdd_max, gravity=gravity)

    @classmethod
    def reference(cls) -> "RobotModel":
        """The project's reference arm (assets/cobot6.urdf) with all limits of assets/cobot6.yaml."""
        from .arm import REFERENCE_DESCRIPTION, REFERENCE_URDF, load_description
        desc = load_description(REFERENCE_DESCRIPTION)
        return cls.from_urdf(REFERENCE_URDF, qdd_max=desc.qdd_max, gravity=desc.gravity)

    def with_params(self, params: np.ndarray) -> "RobotModel":
        """A copy with other standard parameters (10n,)."""
        params = np.asarray(params, dtype=float).reshape(-1)
        if params.shape != (10 * self.n,):
            raise ValueError(f"expected {10 * self.n} parameters, got {params.shape[0]}")
        return replace(self, params=params)

    def with_limits(self, limits: Limits) -> "RobotModel":
        return replace(self, limits=limits)

    # -- basic facts -------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return len(self.joint_names)

    def parameter_names(self) -> list[str]:
        """10n names: m1, mx1, my1, mz1, XX1, XY1, YY1, XZ1, YZ1, ZZ1, m2, ..."""
        return [f"{lab}{i + 1}" for i in range(self.n) for lab in PARAM_LABELS]

    def inertial_parameters(self) -> np.ndarray:
        """(10n,) standard parameters (copy)."""
        return self.params.copy()

    # -- symbolic functions (built once) --------------------------------------------------------
    @cached_property
    def _Y(self) -> ca.Function:
        return build_regressor(self.placements, self.axes, self.gravity)

    @cached_property
    def _origins(self) -> ca.Function:
        return build_link_origins(self.placements, self.axes)

    @cached_property
    def _Y_eval(self) -> BatchEvaluator:
        return BatchEvaluator(self._Y)

    @cached_property
    def _origins_eval(self) -> BatchEvaluator:
        return BatchEvaluator(self._origins)

    def regressor_function(self) -> ca.Function:
        """CasADi Function (q, qd, qdd) -> Y (n x 10n); differentiable, SX-based."""
        return self._Y

    def link_origins_function(self) -> ca.Function:
        """CasADi Function q (n,) -> (3, n+1): world position of base and each joint frame [m]."""
        return self._origins

    # -- numerical evaluation ----------------------------------------------------------------
    def _states(self, *arrays):
        arrs = [np.asarray(a, dtype=float) for a in arrays]
        single = arrs[0].ndim == 1
        arrs = [np.atleast_2d(a) for a in arrs]
        for name, a in zip(("q", "qd", "qdd"), arrs):
            if a.ndim != 2 or a.shape[1] != self.n:
                raise ValueError(f"{name} must have shape (N, {self.n}) or ({self.n},), got {a.shape}")
            if a.shape[0] != arrs[0].shape[0]:
                raise ValueError(f"{name} has {a.shape[0]} samples, q has {arrs[0].shape[0]}")
            bad = ~np.isfinite(a)
            if bad.any():
                k, j = np.argwhere(bad)[0]
                raise ValueError(f"{name} is not finite at sample {k}, joint {self.joint_names[j]}")
        return single, arrs

    def regressor(self, q, qd, qdd) -> np.ndarray:
        """Rigid-body regressor.

        Args: q, qd, qdd: (N, n) or (n,) [rad, rad/s, rad/s^2].
        Returns: (N, n, 10n), or (n, 10n) for single-sample inputs; tau = Y @ params [N*m].
        """
        single, (q, qd, qdd) = self._states(q, qd, qdd)
        Y = self._Y_eval(q, qd, qdd)
        return Y[0] if single else Y

    def inverse_dynamics(self, q, qd, qdd, params: np.ndarray | None = None) -> np.ndarray:
        """Joint torques [N*m], (N, n) or (n,): Y(q, qd, qdd) @ params (default: the model's)."""
        p = self.params if params is None else np.asarray(params, dtype=float)
        return self.regressor(q, qd, qdd) @ p

    def link_origins(self, q) -> np.ndarray:
        """World positions of the base and every joint frame origin: (N, n+1, 3) for (N, n) input."""
        q = np.asarray(q, dtype=float)
        single = q.ndim == 1
        q2 = np.atleast_2d(q)
        P = self._origins_eval(q2).transpose(0, 2, 1)
        return P[0] if single else P

    def to_chain(self, *, damping=None, friction=None) -> Chain:
        """The model as a :class:`~identify.model.urdf.Chain` (for URDF export)."""
        n = self.n
        return Chain(name=self.name, joint_names=list(self.joint_names),
                  link_names=list(self.link_names), base_link="base_link",
                  placements=self.placements.copy(), axes=self.axes.copy(),
                  params=self.params.reshape(n, 10).copy(), q_min=self.limits.q_min,
                  q_max=self.limits.q_max, qd_max=self.limits.qd_max, tau_max=self.limits.tau_max,
                  damping=np.zeros(n) if damping is None else np.asarray(damping, float),
                  friction=np.zeros(n) if friction is None else np.asarray(friction, float),
                  source=self.source)


def reference_paths() -> dict[str, Path]:
    """Paths of the reference arm's asset files."""
    from .arm import REFERENCE_DESCRIPTION, REFERENCE_DRIVES, REFERENCE_URDF
    return {"description": REFERENCE_DESCRIPTION, "urdf": REFERENCE_URDF, "drives": REFERENCE_DRIVES}
