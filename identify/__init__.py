"""twinid core library: arm models, regressors, base parameters, trajectories, signal processing,
estimators, joint models, validation, scenarios and reports. Never imports `twin` or `robot`."""
from identify.model.robot_model import Limits, RobotModel
from identify.backend.recording import Recording

__all__ = ["RobotModel", "Limits", "Recording"]
__version__ = "0.1.0"
