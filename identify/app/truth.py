"""Ground truth the twin knows, for judging an identification on twin data: the link-side rigid
body (URDF inertia + payload in the model's last link frame), link friction (stage 1) and the
drive coefficients (stage 2). The drive coefficients come from what the twin reports it simulated,
``Recording.drive_truth`` (identify.backend.truth.DriveTruth, filled by twin/truth.py: the reducer
law's own truth -- xi_opp for the "opposing" law, xi_lin for "paper", none for the laws no fitted
variant shares; the further laws in ``DriveTruth.laws``), when a recording carries it; otherwise
(older recordings) from the drive file through the one loader (identify.model.drives) and the
twin's resolved settings."""
from __future__ import annotations


import numpy as np

from identify.backend.truth import DriveTruth
from identify.model.drives import load_drives
from identify.model.payload import payload_in_model_frame
from identify.backend.interface import resolved_settings
from identify.scenario.spec import Scenario

from identify.outputs.results import Truth

#: twin options under which the twin's friction is not a constant-parameter law, per stage
_NOT_CONSTANT = {
    "stribeck": "stribeck: true -- the Coulomb level depends on speed (Stribeck peak)",
    "coulomb_asymmetry": "coulomb_asymmetry != 0 -- Coulomb friction differs by direction",
    "friction_drift": "friction_drift != 0 -- Coulomb and viscous friction drift during warm-up",
}
#: twin options that make only the link (stage-1) Coulomb friction non-constant
_NOT_CONSTANT_LINK = {
    ("link_friction_load_driving", "link_friction_load_braking"):
        "link_friction_load_driving/braking != 0 -- the link Coulomb level grows with the "
        "transmitted torque (4-quadrant)",
    ("presliding_rad",): "presliding_rad != 0 -- Dahl presliding link friction (a friction state, "
                         "direction memory at rest)",
}


def twin_settings(scn: Scenario, recs: dict | None = None) -> dict | None:
    """The twin's resolved settings (every key, defaults filled): the ones the twin recorded in
    ``Recording.meta['settings']`` when available (what it really ran with), else the scenario's
    ``twin`` section resolved by the twin's own validator (imported by name). None if unknown."""
    for rec in (recs or {}).values():
        meta = getattr(rec, "meta", None) or {}
        if meta.get("backend") == "twin" and isinstance(meta.get("settings"), dict):
            return dict(meta["settings"])
    return resolved_settings("twin", dict(scn.twin))


def recorded_settings(recs: dict) -> bool:
    """True when a recording carries the settings its backend ran with."""
    return any(isinstance((getattr(r, "meta", None) or {}).get("settings"), dict)
               for r in recs.values())


def recorded_drive_truth(recs: dict | None) -> DriveTruth | None:
    """The twin's ``Recording.drive_truth`` of the first recording carrying one, else None."""
    for rec in (recs or {}).values():
        dt = getattr(rec, "drive_truth", None)
        if isinstance(dt, DriveTruth):
            return dt
    return None


#: the first words of the message a run on a matched law carries (outputs/report.py puts it first)
MATCHED_LAW = "MATCHED LAW"


def matched_law_messages(recs: dict | None) -> list[str]:
    """[one message] when the twin's reducer loss law is the one a fitted variant assumes
    (``DriveTruth.shared_with_variant``), so the run grades that variant on its own law; [] on
    an independent law or without a twin truth (logs, hardware)."""
    dt = recorded_drive_truth(recs)
    if dt is None or not dt.shared_with_variant:
        return []
    return [f"{MATCHED_LAW}: the twin's reducer loss follows the '{dt.law}' law, the law the "
            f"improved model's '{dt.shared_with_variant}' variant assumes; its figures grade that "
            f"variant on its own law (deliberately here). For a law no fitted variant shares set "
            f"twin.reducer_friction_law: speed_efficiency (README, the paper's finding)."]


def _apply_drive_truth(truth: Truth, dt: DriveTruth, joint_names: list) -> Truth:
    """Replace the drive-file stage-1 friction and stage-2 coefficients of `truth` by the twin's
    recorded drive truth (reordered to `joint_names`); a coefficient the law has no constant
    truth for (xi of load_speed: None) is left out, and a stage is not applicable when the twin
    says so (``constant_parameter_truth``, with the twin's reasons)."""
    truth.stage2 = {k: v for k in ("xi_opp", "xi_lin", "f_mc", "f_mv", "J_m", "J_m/K")
                    if (v := dt.coefficient(k, joint_names)) is not None}
    for key in ("viscous", "coulomb"):
        setattr(truth, key, dt.coefficient(key, joint_names))
    for stage in ("stage1", "stage2"):
        if dt.constant_parameter_truth.get(stage) is False:
            truth.applicable[stage] = False
            # the twin's own reasons replace the ones guessed from its settings (same causes,
            # the twin's wording; merging them listed friction_drift twice)
            truth.not_applicable[stage] = [str(r) for r in dt.not_constant.get(stage) or []] or (
                list(truth.not_applicable.get(stage, []))
                or ["the twin reports no constant parameter truth"])
    truth.law = dt.law
    truth.note += f"; drive coefficients as simulated (reducer law {truth.law})"
    return truth


def true_link_parameters(scn: Scenario, model, settings: dict | None = None,
                         drive_truth: DriveTruth | None = None) -> Truth | None:
    """The twin's ground truth for `model` under the twin's resolved `settings`
    (:func:`twin_settings`; None: resolve the scenario's).

    ``applicable`` = {"stage1": bool, "stage2": bool} and ``not_applicable`` = {stage: [reasons]}
    say when a twin option makes a constant-parameter truth meaningless (Stribeck, Coulomb
    asymmetry, friction drift on an active friction source; drive_model false for stage 2; a
    reducer law without a constant-parameter truth). `drive_truth`: the twin's
    ``Recording.drive_truth`` (:func:`recorded_drive_truth`), which replaces the drive
    file's link friction and stage-2 coefficients (the twin's truth is what it simulates).
    None when no truth can be known (hardware, no drive file, twin settings unknown)."""
    if scn.backend != "twin" or scn.arm.drives is None:
        return None
    s = twin_settings(scn) if settings is None else dict(settings)
    if s is None:
        return None
    drv = load_drives(scn.arm.drives, list(model.joint_names), s.get("drive_overrides") or {},
                      where="twin.drive_overrides")
    p = model.inertial_parameters()
    if scn.arm.payload is not None:
        p = p.copy()
        p[-10:] += payload_in_model_frame(scn.arm.urdf, model, scn.arm.payload)
    drive_model = s.get("drive_model", True) is not False
    on = {k: drive_model and s.get(k, True) is not False
          for k in ("motor_friction", "harmonic_friction", "link_friction")}
    lc = drv.array("link_coulomb") * on["link_friction"]
    lv = drv.array("link_viscous") * on["link_friction"]
    active = []
    if s.get("stribeck", False):
        active.append(_NOT_CONSTANT["stribeck"])
    if np.any(np.asarray(s.get("coulomb_asymmetry", 0.0) or 0.0, float) != 0):
        active.append(_NOT_CONSTANT["coulomb_asymmetry"])
    if float(s.get("friction_drift", 0.0) or 0.0) != 0:
        active.append(_NOT_CONSTANT["friction_drift"])
    na = {"stage1": [f"{r} (link friction)" for r in active] if on["link_friction"] else [],
          "stage2": [f"{r} (motor friction)" for r in active] if on["motor_friction"] else []}
    if on["link_friction"]:
        na["stage1"] += [r for keys, r in _NOT_CONSTANT_LINK.items()
                         if any(np.any(np.asarray(s.get(k, 0.0) or 0.0, float) != 0) for k in keys)]
    if not drive_model:
        na["stage2"].append("drive_model: false -- the twin has no drive (no motor inertia, "
                            "friction or compliance; tau_m = tau_j), so there are no stage-2 "
                            "coefficients to compare with")
    xi = drv.array("xi") * on["harmonic_friction"]
    J_r = drv.array("J_r") * drive_model
    # stage-2 coefficients by name (docs/joint_models.md). The twin's reducer loss always opposes
    # motion, so its truth is xi_opp = xi_gf + xi_sf (and no linear part).
    stage2 = {"xi_opp": xi, "xi_lin": np.zeros_like(xi),
              "f_mc": drv.array("motor_coulomb") * on["motor_friction"],
              "f_mv": drv.array("motor_viscous") * on["motor_friction"], "J_m": J_r,
              "J_m/K": J_r / drv.array("stiffness")}
    note = ("the twin's URDF inertia" + (" + payload" if scn.arm.payload else "")
            + " and the drive file's link-side friction"
            + ("" if on["link_friction"] else " (switched off: 0)"))
    truth = Truth(inertial=p, viscous=lv, coulomb=lc, stage2=stage2, note=note,
                  applicable={k: not v for k, v in na.items()}, not_applicable=na,
                  settings_source="given" if settings is not None else "scenario")
    if drive_truth is not None:
        truth = _apply_drive_truth(truth, drive_truth, list(model.joint_names))
    return truth
