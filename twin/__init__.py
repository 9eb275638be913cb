"""The digital twin: PyBullet arm with compliant harmonic-drive joints, a 1 kHz position loop and
noisy sensors, behind the same backend interface as the hardware (see identify.backend.interface)."""
from .config import TwinConfig, TwinSettings, DriveParams
from .sim import TwinSim, TwinState


def make_backend(arm: dict, settings: dict | None = None):
    """Backend factory registered as "twin" in identify.backend.interface (arm = {"urdf", "drives",
    "payload"}, settings = TwinSettings keys)."""
    from .backend import make_backend as _mk
    return _mk(arm, settings)


__all__ = ["TwinConfig", "TwinSettings", "DriveParams", "TwinSim", "TwinState", "make_backend"]
