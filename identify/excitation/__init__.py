"""Excitation trajectories: finite Fourier series (:mod:`.fourier`), their optimization for a
well-conditioned base regressor under the arm's limits (CasADi + IPOPT), validation trajectories
and trajectory plots. ``python -m identify.excitation`` optimizes from the command line.

May import: :mod:`identify.model`, :mod:`identify.common`. Must not import backend, estimation,
validation, app, ``twin`` or ``robot``. ``from identify.excitation import ExcitationProblem,
optimize_excitation, validation_trajectory`` keeps working (re-export; it was a module before the
stage layout)."""
from .fourier import FourierTrajectory
from .problem import ExcitationProblem, ExcitationResult
from .optimizer import optimize_excitation, validation_trajectory

__all__ = ["FourierTrajectory", "ExcitationProblem", "ExcitationResult", "optimize_excitation",
           "validation_trajectory"]
