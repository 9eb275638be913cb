"""Torque feed-forward from a model: the motor torque the model says the planned motion needs.

    ff = feedforward(joint_model)          # callable (q, qd, qdd) (N, n) -> (N, n) [N*m]
    rec = backend.run(trajectory, tau_ff=ff)

The backends evaluate the callable on the commanded trajectory (vectorised, once before the run)
and add it to the drive's position-loop output every 1 ms period (twin: ``TwinBackend.run``;
hardware: the drive's torque offset object, ``robot.backend``)."""
from __future__ import annotations

import numpy as np

from .joint_model import JointModel

__all__ = ["feedforward", "pid_only"]


def feedforward(model: JointModel):
    """Feed-forward callable of `model` (:meth:`JointModel.motor_torque` on the plan)."""
    def tau_ff(q, qd, qdd) -> np.ndarray:
        return model.motor_torque(q, qd, qdd)
    tau_ff.model_source = model.source
    return tau_ff


def pid_only(q, qd, qdd) -> np.ndarray:
    """The 'no feed-forward' case as a callable (zeros), so every case runs the same code path."""
    return np.zeros_like(np.asarray(q, float))
