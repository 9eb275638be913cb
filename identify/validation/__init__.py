"""Judging fitted models: torque predictions of every model on every trajectory, RMS per joint /
overall against the measured signal, torque decomposition, parameter errors against a known
truth, and the identification plots.

May import: :mod:`identify.estimation`, :mod:`identify.model`, :mod:`identify.backend`,
:mod:`identify.common`. Must not import excitation, app, ``twin`` or ``robot``."""
