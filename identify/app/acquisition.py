"""Pipeline step 3: run trajectories on the scenario's backend and collect the
recordings. The backend is looked up by name (:func:`identify.backend.load_backend`), so the
application never imports ``twin`` or ``robot``.

A backend that refuses a trajectory before moving (ValueError from ``Backend.run``, e.g. a limit
violation, or an unarmed hardware backend) raises :class:`~identify.common.errors.SafetyRefusal`
(CLI exit code 4)."""
from __future__ import annotations

import contextlib

import numpy as np

from identify.backend.arm import BackendArm
from identify.backend.interface import load_backend
from identify.backend.interface import preflight as backend_preflight
from identify.common import progress
from identify.common.errors import InputError, SafetyRefusal
from identify.scenario.spec import Scenario


def backend_arm(scn: Scenario, model=None) -> BackendArm:
    """The arm for load_backend (the twin also gets the model's acceleration limits)."""
    arm = scn.arm.backend_arm()
    if scn.backend == "twin" and model is not None and scn.arm.description is not None:
        arm = arm.with_(qdd_max=tuple(np.asarray(model.limits.qdd_max, float).tolist()))
    return arm


def record(scn: Scenario, trajs: dict, *, model=None, settings: dict | None = None,
           show: bool | None = None, timings: dict | None = None) -> dict:
    """Run each trajectory of `trajs` (label -> (trajectory, TrajectoryInfo)) on the scenario's
    backend; label -> Recording.

    `settings` overrides the backend settings (the sweep passes noise levels and seeds)."""
    show = progress.enabled() if show is None else show
    settings = scn.backend_settings() if settings is None else settings
    backend = load_backend(scn.backend, backend_arm(scn, model), settings)
    recs = {}
    try:
        for label, (tr, info) in trajs.items():
            step = progress.step(f"{scn.backend} run: {label}", timings) if show \
                else contextlib.nullcontext()
            with step:
                try:
                    rec = backend.run(tr, periods=info.periods, progress=show)
                except ValueError as exc:
                    raise SafetyRefusal(f"the {scn.backend} backend refused the {label} "
                                        f"trajectory: {exc}") from exc
            rec.meta = dict(rec.meta)
            rec.meta.setdefault("period_s", info.period_s)      # for period averaging
            rec.meta.setdefault("label", label)
            recs[label] = rec
    finally:
        backend.close()
    return recs


def check_payload_hold(scn: Scenario, model) -> None:
    """arm.payload within what the arm can hold (identify.model.payload.hold_problem): a 10 t
    payload was found by the twin's position loop and blamed on its PID gains. Raises
    ScenarioError at arm.payload.mass_kg (exit 2)."""
    from identify.model.payload import hold_problem, payload_in_model_frame
    from identify.scenario.load import scenario_error
    why = hold_problem(model, payload_in_model_frame(scn.arm.urdf, model, scn.arm.payload))
    if why:
        raise scenario_error(scn, ("arm", "payload", "mass_kg"),
                             f"{scn.arm.payload.mass_kg:g} kg: {why}")


def preflight(scn: Scenario, model=None, settings: dict | None = None) -> bool:
    """The backend's early refusal (identify.backend.preflight), before trajectories are
    optimized: arm.payload is checked against what the arm can hold (:func:`check_payload_hold`,
    exit 2); a refusal (the backend's SafetyRefused, or any error marked safety_refusal) becomes
    :class:`SafetyRefusal` (exit 4); a bad setting or a missing file or port (ValueError,
    FileNotFoundError) :class:`InputError` (exit 2); other errors propagate. True when the
    backend has a preflight."""
    settings = scn.backend_settings() if settings is None else settings
    if scn.arm.payload is not None and model is not None:
        check_payload_hold(scn, model)
    try:
        return backend_preflight(scn.backend, backend_arm(scn, model), settings)
    except Exception as exc:  # noqa: BLE001 -- classified below
        names = {c.__name__ for c in type(exc).__mro__}
        if "SafetyRefused" in names or getattr(exc, "safety_refusal", False):
            raise SafetyRefusal(f"the {scn.backend} backend refused before any trajectory was "
                                f"optimized: {exc}") from exc
        if isinstance(exc, (ValueError, FileNotFoundError)) and not isinstance(exc, InputError):
            raise InputError(str(exc)) from exc
        raise
