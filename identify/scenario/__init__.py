"""Scenario files: the typed description of one experiment (:mod:`.spec`), read strictly with
one-line errors ``file:line: key.path: message`` (:mod:`.load`) and cross-checked against the
arm's files and the backend's own settings before anything runs (:mod:`.checks`).

May import: :mod:`identify.model`, :mod:`identify.estimation` (processing settings),
:mod:`identify.common`; backends' settings validators are looked up by name. Must not import
excitation, validation, app, ``twin`` or ``robot``.

    from identify.scenario import load_scenario
    scn = load_scenario("scenarios/quickstart.yaml")
"""
from .load import load_scenario, scenario_from_dict
from .spec import Scenario, ScenarioError, schema_table

__all__ = ["load_scenario", "scenario_from_dict", "Scenario", "ScenarioError", "schema_table"]
