"""From recordings to parameters: signal processing (smoothing, differentiation, filtering,
alignment), least-squares estimators with honest uncertainty, the physically consistent fit, the
payload fit and the joint models (simplified Coulomb-viscous and the improved harmonic-drive
model).

Every fitter follows one contract (scikit-learn's, :mod:`identify.common.estimator`): the
constructor stores settings only, ``fit`` returns self -- ``fit(W, y, *, mask=None, names=None,
joint_names=None)`` for the regression fitters (OLS, WLS, Ridge, ConsistentFit, PayloadFit; IV
also takes its instruments ``Z``),
``fit(processed, *, W=None)`` for the joint models -- fitted attributes end in ``_``, and
``get_params`` / ``set_params`` / ``repr`` describe the settings.

May import: :mod:`identify.model`, :mod:`identify.backend` (``Recording``), :mod:`identify.common`.
Must not import excitation, validation, app, ``twin`` or ``robot``."""
from .consistency import ConsistentFit
from .estimators import OLS, WLS, Ridge
from .improved import ImprovedModel
from .iv import IV
from .payload import PayloadFit
from .simplified import SimplifiedModel

__all__ = ["OLS", "WLS", "Ridge", "IV", "ConsistentFit", "PayloadFit", "SimplifiedModel",
           "ImprovedModel"]
