"""The run's outputs: the typed results of a run (:mod:`.results`, immutable once built), their
rendering into ``metrics.json`` / ``parameters.yaml`` / sweep records (:mod:`.render`, the only
place that writes a metrics key; the collision-transfer section's keys, report blocks and
console lines in :mod:`.transfer`, which it calls), the run folder -- its file names (:mod:`.layout`), claiming it
and writing it (:mod:`.runfolder`) -- and the report read back from a finished folder
(:mod:`.report`). The name matches the scenario's ``outputs:`` section.

May import: ``identify.common``, ``model``, ``backend``, ``excitation`` (plots), ``estimation``,
``validation``, ``scenario``. Must not import ``identify.app``, ``identify.control``, ``logs``,
``twin`` or ``robot``."""
