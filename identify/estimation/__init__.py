"""From recordings to parameters: signal processing (smoothing, differentiation, filtering,
alignment), least-squares estimators with honest uncertainty, the physically consistent fit, and
the joint models (simplified Coulomb-viscous and the improved harmonic-drive model), each an
estimator with ``fit`` / ``predict`` and fitted attributes ending in ``_``.

May import: :mod:`identify.model`, :mod:`identify.backend` (``Recording``), :mod:`identify.common`.
Must not import excitation, validation, app, ``twin`` or ``robot``."""
from .improved import ImprovedModel
from .simplified import SimplifiedModel

__all__ = ["SimplifiedModel", "ImprovedModel"]
