"""Logs recorded elsewhere (CSV / NPZ files, rosbag2 bags of JointState messages) read into a
:class:`~identify.backend.recording.Recording`: column maps, windows, unit gains, resampling to a
uniform grid. ``twinid fit`` identifies from them exactly as from a backend run.

May import: :mod:`identify.scenario` (the log specs), :mod:`identify.estimation` (resampling),
:mod:`identify.model`, :mod:`identify.backend`, :mod:`identify.common`. Must not import
excitation, validation, app, ``twin`` or ``robot``."""
