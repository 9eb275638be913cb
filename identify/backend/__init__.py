"""The contract between the pipeline and a backend (the twin, the hardware, logs): the
:class:`Recording` a run returns and the :class:`Backend` protocol with ``load_backend`` (looks a
backend up by name, so this package never imports ``twin`` or ``robot``).

May import: :mod:`identify.model`, :mod:`identify.common`. Must not import excitation,
estimation, validation or app. ``from identify.backend import load_backend`` keeps working
(re-export; it was a module before the stage layout)."""
from .interface import Backend, Trajectory, load_backend, preflight
from .recording import Recording
from .truth import DriveTruth, LawTruth

__all__ = ["Backend", "Trajectory", "load_backend", "preflight", "Recording", "DriveTruth", "LawTruth"]
