"""twinid core library: arm models, regressors, base parameters, trajectories, signal processing,
estimators, joint models, validation, scenarios and reports. Never imports `twin` or `robot`."""
from identify.common import kernels as _kernels

_kernels.pin()      # before numpy loads: the same numbers on every x86-64 machine

from identify.model.robot_model import Limits, RobotModel
from identify.backend.recording import Recording

__all__ = ["RobotModel", "Limits", "Recording"]
__version__ = "0.1.0"
