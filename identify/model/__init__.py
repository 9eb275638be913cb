"""The arm model: URDF parsing and writing, spatial algebra, the symbolic regressor, friction
columns, base parameters, :class:`RobotModel`, the reference-arm description, drive files and
payload physics.

May import: :mod:`identify.common`. Must not import the other stages (backend, excitation,
estimation, validation, app), ``twin`` or ``robot``. ``from identify.model import RobotModel``
keeps working (re-export; it was a module before the stage layout)."""
from .robot_model import Limits, RobotModel

__all__ = ["RobotModel", "Limits"]
