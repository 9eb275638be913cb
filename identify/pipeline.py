"""The whole pipeline, driven by a :class:`~identify.scenario.Scenario`.

    from identify.scenario import load_scenario
    from identify.pipeline import run_scenario
    res = run_scenario(load_scenario("scenarios/quickstart.yaml"), out="runs/demo")
    res.folder, res.metrics

Stages (each a small function, reusable by :mod:`identify.sweep`):

1. :func:`build_model` -- RobotModel from the scenario's URDF (+ acceleration limits);
2. :func:`get_trajectory` -- optimize (cached) or load the excitation / validation trajectories;
3. :func:`record` -- run them on the backend (``identify.backend.load_backend`` only; the
   pipeline never imports twin or robot);
4. :func:`identify_recordings` -- processing, simplified / improved joint models, predictions, RMS
   per joint / model / trajectory, cond(W), parameter errors against the twin's truth;
5. :func:`write_run` -- the run folder: ``scenario.yaml`` (resolved), ``trajectories/``,
   ``recordings/*.npz``, ``parameters.yaml`` (value, std, relative std), ``identified.urdf``,
   ``metrics.json``, ``plots/*.png``, ``report.md`` and ``report.html``.

A backend that refuses a trajectory before moving (ValueError from ``Backend.run``, e.g. a limit
violation, or an unarmed hardware backend) raises :class:`SafetyRefusal` (CLI exit code 4).
"""
from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import math
import os
import platform
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from .jsonutil import to_jsonable
from . import progress
from .scenario import Scenario, TrajectorySpec

__all__ = ["SafetyRefusal", "RunResult", "Identification", "build_model", "make_problem",
           "get_trajectory", "record", "identify_recordings", "run_scenario", "fit_scenario",
           "trajectories_only", "run_folder", "cache_dir", "preflight", "true_link_parameters",
           "twin_settings", "payload_in_model_frame", "perturbed_inertials", "prior_parameters"]

PAPER_IMPROVEMENT = {"excitation": -59.58, "validation": -7.52}


class SafetyRefusal(RuntimeError):
    """The backend refused to move the arm (limits, not armed, ...). CLI exit code 4."""

    safety_refusal = True


@dataclass
class RunResult:
    folder: Path
    metrics: dict
    identification: "Identification | None" = None


# ------------------------------------------------------------------------------------------------
# 1. model and trajectories
# ------------------------------------------------------------------------------------------------

def build_model(scn: Scenario):
    """RobotModel of the scenario's arm (acceleration limits and gravity from arm.description)."""
    from .model import RobotModel
    joints = list(scn.arm.joints) if scn.arm.joints else None
    qdd_max, gravity = None, (0.0, 0.0, -9.81)
    if scn.arm.description is not None:
        from .arm import load_description
        desc = load_description(scn.arm.description)
        gravity = tuple(np.asarray(desc.gravity, float))
        by_name = dict(zip(desc.joint_names, np.asarray(desc.qdd_max, float)))
        model0 = RobotModel.from_urdf(scn.arm.urdf, joints)
        qdd_max = np.array([by_name.get(j, np.inf) for j in model0.joint_names])
    return RobotModel.from_urdf(scn.arm.urdf, joints, qdd_max=qdd_max, gravity=gravity)


def cache_dir() -> Path:
    """Folder of cached trajectory optimizations ($TWINID_CACHE or ./.cache/excitation)."""
    return Path(os.environ.get("TWINID_CACHE", ".cache")) / "excitation"


def make_problem(spec: TrajectorySpec, model, terms):
    """identify.excitation.ExcitationProblem for a trajectory spec (SI conversion here)."""
    from .excitation import ExcitationProblem
    start = None if spec.start_deg is None else tuple(math.radians(v) for v in spec.start_deg)
    if start is not None and len(start) != model.n:
        raise ValueError(f"start_deg has {len(start)} angles, the arm has {model.n} joints")
    return ExcitationProblem(harmonics=spec.harmonics, wf=2 * math.pi / spec.period_s,
                             start_pose=start, n_grid=spec.grid, terms=tuple(terms),
                             limit_scale=spec.limit_scale, z_min=spec.z_min_m,
                             max_iter=spec.max_iter)


def get_trajectory(spec: TrajectorySpec, model, terms, label: str) -> tuple[object, dict]:
    """The trajectory of `spec` (one period) and facts about it (cond(W_base), source, ...)."""
    from .excitation import base_parameters, optimize_excitation, trajectory_cond
    from .fourier import FourierTrajectory
    problem = make_problem(spec, model, terms)
    if spec.source == "file":
        tr = FourierTrajectory.load(spec.file).with_periods(1)
        if tr.n_joints != model.n:
            raise ValueError(f"{spec.file}: trajectory has {tr.n_joints} joints, the arm has "
                             f"{model.n}")
        bp = base_parameters(model, problem)
        cond = trajectory_cond(model, tr, bp, tuple(terms), 10 * spec.grid)
        info = {"source": str(spec.file), "cond": cond}
    else:
        res = optimize_excitation(model, problem, seed=spec.seed, n_starts=spec.starts,
                                  cache_dir=cache_dir() if spec.cache else None,
                                  progress=progress.enabled())
        tr = res.trajectory
        info = {"source": "optimized" + (" (cached)" if res.from_cache else ""), "cond": res.cond,
                "solver_time_s": res.solver_time_s, "seed": spec.seed, "starts": spec.starts,
                "max_ratio": {k: np.asarray(v).tolist() for k, v in res.max_ratio.items()},
                "limits_used": _plain(res.limits_used)}
    info.update(label=label, harmonics=int(tr.n_harmonics), period_s=float(tr.period),
                periods=int(spec.periods), duration_s=float(tr.period * spec.periods))
    return tr, info


def trajectories(scn: Scenario, model, timings: dict | None = None):
    """(excitation, validation) trajectories and their info dicts."""
    terms = scn.identification.friction_terms
    out = {}
    for label in ("excitation", "validation"):
        with progress.step(f"{label} trajectory", timings):
            out[label] = get_trajectory(getattr(scn.trajectories, label), model, terms, label)
    return out


# ------------------------------------------------------------------------------------------------
# 2. backend
# ------------------------------------------------------------------------------------------------

def backend_arm(scn: Scenario, model=None) -> dict:
    """The `arm` dict for load_backend (the twin also gets the model's acceleration limits)."""
    arm = scn.arm.to_backend_dict()
    if scn.backend == "twin" and model is not None and scn.arm.description is not None:
        arm["qdd_max"] = np.asarray(model.limits.qdd_max, float).tolist()
    return arm


def record(scn: Scenario, trajs: dict, *, model=None, settings: dict | None = None,
           show: bool | None = None, timings: dict | None = None) -> dict:
    """Run each trajectory on the scenario's backend; label -> Recording.

    `settings` overrides the backend settings (the sweep passes noise levels and seeds)."""
    from .backend import load_backend
    show = progress.enabled() if show is None else show
    settings = scn.backend_settings() if settings is None else settings
    backend = load_backend(scn.backend, backend_arm(scn, model), settings)
    recs = {}
    try:
        for label, (tr, info) in trajs.items():
            with (progress.step(f"{scn.backend} run: {label}", timings) if show else _null()):
                try:
                    rec = backend.run(tr, periods=info["periods"], progress=show)
                except ValueError as exc:
                    raise SafetyRefusal(f"the {scn.backend} backend refused the {label} "
                                        f"trajectory: {exc}") from exc
            rec.meta = dict(rec.meta)
            rec.meta.setdefault("period_s", info["period_s"])      # for period averaging
            rec.meta.setdefault("label", label)
            recs[label] = rec
    finally:
        backend.close()
    return recs


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ------------------------------------------------------------------------------------------------
# 3. identification
# ------------------------------------------------------------------------------------------------

@dataclass
class Identification:
    """Everything identified from one excitation recording (and checked on the validation one)."""
    model: object
    base: object
    processed: dict                     # label -> Processed
    simplified: object | None
    improved: object | None
    consistent: object | None
    predictions: dict                   # label -> {model name: (N, n) predicted tau_m}
    metrics: dict
    parameters: dict                    # YAML-able tables (see parameters.yaml)
    urdf_params: dict | None = None     # inertial (10n,), viscous, coulomb, source
    warnings: list = field(default_factory=list)
    validation: object | None = None    # identify.validation.ValidationResult
    truth_base: np.ndarray | None = None


def _rms(err: np.ndarray) -> dict:
    per = np.sqrt(np.mean(err ** 2, axis=0))
    return {"per_joint": per.tolist(), "overall": float(np.sqrt(np.mean(err ** 2)))}


def _table(names, value, std=None, truth=None, poorly_excited=None) -> dict:
    """YAML-able parameter table. `poorly_excited`: (p,) bool flags (the estimator's
    ``poorly_excited_``: std > |value|) -> ``poorly_excited`` list + ``poorly_excited_count``."""
    value = np.asarray(value, float)
    t = {"names": [str(n) for n in names], "value": value.tolist()}
    if std is not None:
        std = np.asarray(std, float)
        t["std"] = std.tolist()
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(value != 0, 100.0 * std / np.abs(value), np.inf)
        t["rel_std_percent"] = [float(x) if np.isfinite(x) else None for x in rel]
    if poorly_excited is not None:
        pe = np.asarray(poorly_excited, bool).reshape(-1)
        if pe.size != value.size:
            raise ValueError(f"poorly_excited has {pe.size} flags for {value.size} parameters")
        t["poorly_excited"] = [bool(x) for x in pe]
        t["poorly_excited_count"] = int(pe.sum())
    if truth is not None:
        truth = np.asarray(truth, float)
        t["truth"] = truth.tolist()
        with np.errstate(divide="ignore", invalid="ignore"):
            err = np.where(truth != 0, 100.0 * (value - truth) / np.abs(truth), np.nan)
        t["error_percent"] = [float(x) if np.isfinite(x) else None for x in err]
    return t


def _perr_summary(pe) -> dict:
    """metrics.json summary of a validation.ParameterErrors (count = parameters compared; a
    parameter without a std is skipped and listed with the reason)."""
    rel = np.abs(pe.rel_error[np.isfinite(pe.rel_error)])
    return {"count": int(pe.n), "within_3sigma": int(pe.n_within),
            "median_abs_error_percent": float(np.median(rel)) if rel.size else None,
            "max_abs_error_percent": float(np.max(rel)) if rel.size else None,
            "rel_error_percent": [None if not np.isfinite(x) else float(x) for x in pe.rel_error],
            "z": [None if not np.isfinite(x) else float(x) for x in pe.z],
            "skipped_count": int(pe.n_skipped),
            "skipped": [{"name": nm, "reason": why} for nm, why in pe.skipped]}


def _stage2_flags(s2) -> dict:
    """Per-joint stage-2 diagnostics of a joint_models.Stage2Result, YAML-able ((n, k+4) lists
    in ``names`` order unless noted):

    poorly_excited / poorly_excited_count / poorly_excited_names: joint_models' flag (std >
        |value|, or no std: a NaN std -- fixed xi, noise-dominated column -- counts as poorly
        excited); a_poorly_excited (n, 5): the same for the paper's a1..a5 (linear variant);
    noise_dominated / noise_dominated_names: the coefficient's regressor column (tau_r or
        taudd_r) is more than half sensor noise -- not identifiable, std NaN;
    eiv_bias: estimated errors-in-variables bias of each coefficient (already in its std);
    tau_int: integrated autocorrelation time [samples] by which its variance was inflated
        (NaN for a fixed xi)."""
    n_c = len(s2.names)

    def per_joint(attr, fill):
        rows = []
        for j in s2.joints:
            v = getattr(j, attr, None)
            rows.append(np.full(n_c, fill) if v is None else np.asarray(v).reshape(-1))
        return np.array(rows)
    pe = np.asarray(s2.poorly_excited, bool)
    dom = per_joint("noise_dominated", False).astype(bool)
    out = {"poorly_excited": pe.tolist(), "poorly_excited_count": int(pe.sum()),
           "poorly_excited_names": list(s2.poorly_excited_names),
           "noise_dominated": dom.tolist(),
           "noise_dominated_names": [f"{j.joint}.{nm}" for j, row in zip(s2.joints, dom)
                                     for nm, bad in zip(j.names, row) if bad],
           "eiv_bias": per_joint("eiv_bias", 0.0).astype(float).tolist(),
           "tau_int": per_joint("tau_int", np.nan).astype(float).tolist(),
           "xi_identified": [bool(j.xi_identified) for j in s2.joints]}
    ape = s2.a_poorly_excited
    if ape is not None:
        out["a_poorly_excited"] = np.asarray(ape, bool).tolist()
    return out


#: twin options under which the twin's friction is not a constant-parameter law, per stage
_NOT_CONSTANT = {
    "stribeck": "stribeck: true -- the Coulomb level depends on speed (Stribeck peak)",
    "coulomb_asymmetry": "coulomb_asymmetry != 0 -- Coulomb friction differs by direction",
    "friction_drift": "friction_drift != 0 -- Coulomb and viscous friction drift during warm-up",
}


def twin_settings(scn: Scenario, recs: dict | None = None) -> dict | None:
    """The twin's resolved settings (every key, defaults filled): the ones the twin recorded in
    ``Recording.meta['settings']`` when available (what it really ran with), else the scenario's
    ``twin`` section resolved by the twin's own validator (imported by name). None if unknown."""
    for rec in (recs or {}).values():
        meta = getattr(rec, "meta", None) or {}
        if meta.get("backend") == "twin" and isinstance(meta.get("settings"), dict):
            return dict(meta["settings"])
    try:
        from importlib import import_module
        from .scenario import SETTINGS_VALIDATORS
        mod, cls, meth = SETTINGS_VALIDATORS["twin"]
        obj = getattr(getattr(import_module(mod), cls), meth)(dict(scn.twin))
        return obj.to_dict() if hasattr(obj, "to_dict") else dataclasses.asdict(obj)
    except Exception:  # noqa: BLE001 -- the twin package is not installed
        return None


def payload_in_model_frame(urdf, model, payload) -> np.ndarray:
    """Standard 10-vector of a flange payload in the frame of the model's last link.

    The twin fixes the payload to the child link of the URDF's last moving joint (the flange
    frame). When the model is a joint subset that leaves out the last joints, they are locked at
    zero and the payload is carried by the model's last link: its 10-vector is moved through the
    chain's placements (identify.spatial.combine_inertials)."""
    from .spatial import combine_inertials, params_from_inertial
    from .urdf import load_chain
    Ixx, Iyy, Izz, Ixy, Ixz, Iyz = payload.inertia_kgm2
    I_c = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    p_flange = params_from_inertial(payload.mass_kg, np.asarray(payload.com_m, float), I_c)
    full = load_chain(urdf)
    last = model.joint_names[-1]
    if last not in full.joint_names:
        raise ValueError(f"{urdf}: the model's last joint {last!r} is not a moving joint of the URDF")
    k = list(full.joint_names).index(last)
    T = np.eye(4)
    for i in range(k + 1, len(full.joint_names)):   # locked at q = 0: joint i in joint i-1's frame
        T = T @ full.placements[i]
    return combine_inertials([(T, p_flange)])


def true_link_parameters(scn: Scenario, model, settings: dict | None = None) -> dict | None:
    """Ground truth the twin knows (twin runs only), from the drive file through the one loader
    (identify.drives, with the twin's drive overrides) and the twin's resolved `settings`
    (:func:`twin_settings`): the link-side rigid body (URDF inertia + payload moved into the model's
    last link frame), link friction (stage 1) and the drive coefficients (stage 2).

    ``applicable`` = {"stage1": bool, "stage2": bool} and ``not_applicable`` = {stage: [reasons]}
    say when a twin option makes a constant-parameter truth meaningless (Stribeck, Coulomb
    asymmetry, friction drift on an active friction source; drive_model false for stage 2).
    None when no truth can be known (hardware, no drive file, twin settings unknown)."""
    if scn.backend != "twin" or scn.arm.drives is None:
        return None
    s = twin_settings(scn) if settings is None else dict(settings)
    if s is None:
        return None
    from .drives import load_drives
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
    return {"inertial": p, "viscous": lv, "coulomb": lc, "stage2": stage2, "note": note,
            "applicable": {k: not v for k, v in na.items()}, "not_applicable": na,
            "settings_source": "given" if settings is not None else "scenario"}


def perturbed_inertials(p, rel: float, seed: int) -> np.ndarray:
    """A CAD-like prior: each link's mass and rotational inertia (about its CoM) scaled by
    independent factors 1 + U(-rel, rel) (seeded), CoM kept. Uniform positive scaling keeps every
    link physically consistent (positive mass, positive-definite inertia, triangle inequalities).
    p: (10n,) standard parameters -> (10n,)."""
    from .spatial import inertial_from_params, params_from_inertial
    p = np.asarray(p, float)
    if not 0 <= rel < 1:
        raise ValueError(f"prior_error must be within [0, 1), got {rel}")
    rng = np.random.default_rng(seed)
    n = p.size // 10
    f = 1.0 + rng.uniform(-rel, rel, size=(n, 2))
    out = p.copy()
    for k in range(n):
        pk = p[10 * k:10 * k + 10]
        if pk[0] <= 0:
            continue
        m, c, I_c = inertial_from_params(pk)
        out[10 * k:10 * k + 10] = params_from_inertial(m * f[k, 0], c, I_c * f[k, 1])
    return out


def prior_parameters(scn: Scenario, model, recs: dict | None = None) -> tuple[np.ndarray | None, dict]:
    """(prior full inertial (10n,) or None, facts) for identification.prior (auto: perturbed
    when the data come from the twin -- whose truth IS the URDF -- else urdf)."""
    ident = scn.identification
    kind = getattr(ident, "prior", "auto")
    from_twin = any((getattr(r, "meta", None) or {}).get("backend") == "twin"
                    for r in (recs or {}).values())
    if kind == "auto":
        kind = "perturbed" if from_twin else "urdf"
    info = {"kind": kind, "requested": getattr(ident, "prior", "auto")}
    if kind == "none":
        info["note"] = "no prior: the best physically consistent fit (ties broken towards 0)"
        return None, info
    p = model.inertial_parameters()
    if kind == "urdf":
        info["note"] = ("the URDF's CAD values" + (" -- on the twin these ARE the ground truth, "
                                                   "which flatters the result" if from_twin else ""))
        return p, info
    rel, seed = float(ident.prior_error), int(ident.prior_seed)
    info.update(error=rel, seed=seed,
                note=f"the URDF's masses and inertias with seeded CAD errors of +-{100 * rel:g} % "
                     f"(seed {seed}), still physically consistent")
    return perturbed_inertials(p, rel, seed), info


def identify_recordings(scn: Scenario, model, recs: dict, *, base=None, want_truth: bool = True,
                        decompose: bool = True, timings: dict | None = None) -> Identification:
    """Processing + joint models + predictions + metrics on recordings {'excitation', ['validation']}.

    Metrics: RMS of predicted minus measured motor torque per joint / overall for each model on
    each trajectory; the improved-vs-simplified reduction (paper's sign convention: negative =
    better); cond of the measured base regressor; stage-2 coefficients; parameter errors against
    the twin's truth when known."""
    from .base_params import compute_base_parameters
    from .processing import ProcessingSettings, process
    ident = scn.identification
    terms = tuple(ident.friction_terms)
    if base is None:
        base = compute_base_parameters(model, terms=terms, seed=0)
    ps = ProcessingSettings.from_dict(scn.processing)
    warnings: list = []
    processed = {}
    with progress.step("processing", timings):
        for label, rec in recs.items():
            if list(rec.joint_names) != list(model.joint_names):
                raise ValueError(f"{label} recording joints {list(rec.joint_names)} differ from the "
                                 f"model's {list(model.joint_names)}")
            processed[label] = process(rec, ps)
    d_exc = processed["excitation"]
    want_s = ident.joint_model in ("simplified", "both")
    want_i = ident.joint_model in ("improved", "both")
    from .joint_models import ImprovedModel, SimplifiedModel, design_from
    # the models' own design (parallel-filtered Coulomb column), computed once per trajectory
    W = {label: design_from(model, base, d, terms=terms)[0] for label, d in processed.items()}
    sm = im = None
    with progress.step("identification", timings):
        if want_s:
            if d_exc.tau_m is None:
                raise ValueError("the simplified model needs the motor torque (tau_m or currents) "
                                 "in the excitation recording")
            sm = SimplifiedModel(model, base, ident.estimator, terms=terms).fit(d_exc, W["excitation"])
        if want_i:
            if d_exc.tau_j is None or d_exc.tau_m is None:
                raise ValueError("the improved model needs joint torques (tau_j) and motor torques "
                                 "(tau_m or currents) in the excitation recording")
            ft = ident.improved_friction_term
            im = ImprovedModel(model, base, ident.estimator,
                               friction_term="linear" if ft == "auto" else ft,
                               terms=terms).fit(d_exc, W["excitation"])
            if ft == "auto":   # model selection on the identification data only
                best = im.compare_friction_terms_["better"] or "linear"
                if best != "linear":
                    im = ImprovedModel(model, base, ident.estimator, friction_term=best,
                                       terms=terms).fit(d_exc, W["excitation"])
    from .validation import true_base_parameters, validate
    truth_base, truth_note = None, None
    truth = None
    if want_truth:
        try:
            truth = true_link_parameters(scn, model, twin_settings(scn, recs))
            if truth is not None:
                truth["settings_source"] = "recording" if any(
                    isinstance((getattr(r, "meta", None) or {}).get("settings"), dict)
                    for r in recs.values()) else "scenario"
        except ValueError as exc:
            warnings.append(f"no parameter truth: {exc}")
    if truth is not None and not truth["applicable"]["stage1"]:
        warnings.append("stage-1 parameter truth not applicable: "
                        + "; ".join(truth["not_applicable"]["stage1"]))
    if truth is not None and not truth["applicable"]["stage2"]:
        warnings.append("stage-2 coefficient truth not applicable: "
                        + "; ".join(truth["not_applicable"]["stage2"]))
    if truth is not None and truth["applicable"]["stage1"]:
        try:
            truth_base = true_base_parameters(model, base, link_viscous=truth["viscous"],
                                              link_coulomb=truth["coulomb"], terms=terms,
                                              inertial=truth["inertial"])
            truth_note = truth["note"]
        except ValueError as exc:
            warnings.append(f"no parameter truth: {exc}")
    with_tau_m = {k: d for k, d in processed.items() if d.tau_m is not None}
    routes = ("closed_form", "eq24") if sm is not None else ("closed_form",)
    with progress.step("validation", timings):
        vres = validate(sm, im, with_tau_m, routes=routes, decompose_torque=decompose,
                        truth_base=truth_base if im is not None else None)
    head = f"improved_{ident.prediction}" if ident.prediction in routes else "improved_closed_form"
    preds, rms, improvement = {}, {}, {}
    for label in vres.rms:
        P = dict(vres.predictions[label])
        R = {m: {"per_joint": np.asarray(v).tolist(), "overall": float(vres.rms_overall[label][m])}
             for m, v in vres.rms[label].items()}
        if im is not None:
            P["improved"] = P[head]
            R["improved"] = R[head]
            d = processed[label]
            if d.tau_j is not None:
                R["stage1_tau_j"] = _rms(im.predict_tau_r(d, W[label]) - d.tau_j)
        preds[label], rms[label] = P, R
        if head in vres.change.get(label, {}):
            improvement[label] = float(vres.change[label][head])
    variants = {}
    if im is not None:   # every fitted reducer-friction variant, closed-form route
        for v in im.stage2_all_:
            variants[v] = {label: float(_rms(im.predict(processed[label], route="closed_form",
                                                        W=W[label], variant=v)
                                             - processed[label].tau_m)["overall"])
                           for label in vres.rms}
    cond_meas = {label: float(np.linalg.cond(w.reshape(-1, w.shape[-1]))) for label, w in W.items()}

    params: dict = {"base_parameters": list(base.names), "friction_terms": list(terms), "models": {}}
    perr = {}
    urdf_params = None
    if sm is not None:
        tb = _table(sm.names_, sm.params_, sm.std_,
                    poorly_excited=getattr(sm.estimator_, "poorly_excited_", None))
        tb["note"] = ("simplified model: rigid-body base parameters + Coulomb/viscous friction "
                      "fitted to the motor torque eta*beta*i (the drive's losses are lumped into "
                      "these parameters, so the twin's link-side truth does not apply).")
        params["models"]["simplified"] = {"rigid_body": tb}
    if im is not None:
        tb = _table(im.names1_, im.params_, im.std_, truth_base,
                    poorly_excited=getattr(im.stage1_, "poorly_excited_", None))
        tb["note"] = ("improved model, stage 1: base parameters + link-side friction from the joint "
                      "torque sensor" + (f" (truth: {truth_note})" if truth_base is not None else ""))
        s2 = im.stage2_
        stage2 = {"variant": s2.variant, "names": list(s2.names), "joints": [j.joint for j in s2.joints],
                  "params": s2.params.tolist(), "std": s2.std.tolist(),
                  "rms_Nm": s2.rms.tolist()}
        stage2.update(_stage2_flags(s2))
        if truth is not None and not truth["applicable"]["stage2"]:
            stage2["truth_not_applicable"] = list(truth["not_applicable"]["stage2"])
        if truth is not None and s2.variant != "linear" and truth["applicable"]["stage2"]:
            t2 = np.array([[truth["stage2"][nm][j] for nm in s2.names] for j in range(model.n)])
            stage2["truth"] = t2.tolist()
            with np.errstate(divide="ignore", invalid="ignore"):
                e2 = np.where(t2 != 0, 100.0 * (s2.params - t2) / np.abs(t2), np.nan)
            stage2["error_percent"] = [[None if not np.isfinite(x) else float(x) for x in row]
                                       for row in e2]
        if s2.a is not None:
            stage2["a"] = s2.a.tolist()
            stage2["a_std"] = s2.a_std.tolist()
        cmp = im.compare_friction_terms_
        params["models"]["improved"] = {
            "stage1": tb, "stage2": stage2,
            "friction_term_comparison": {"rms_Nm": {k: float(v) for k, v in cmp["rms"].items()},
                                         "better": cmp["better"], "note": cmp["note"]}}
        pe = vres.parameter_errors.get("stage1")
        if pe is not None:
            perr["improved_stage1"] = _perr_summary(pe)
        if "truth" in stage2:
            # stage-2 coefficients against the twin's drive truth; coefficients without a std
            # (xi not identified, noise-dominated column) are skipped, with the reason
            from .validation import stage2_errors
            try:
                pe2 = stage2_errors(s2, truth["stage2"])
            except ValueError as exc:
                warnings.append(f"stage-2 parameter errors: {exc}")
            else:
                perr["improved_stage2"] = {**_perr_summary(pe2), "names": list(pe2.names)}
    # full parameters for the URDF: consistent fit, else the closest to the prior
    prior_inertial, prior_info = prior_parameters(scn, model, recs)
    params["prior"] = dict(prior_info)
    cf = None
    full, how = None, ""
    src = im if im is not None else sm
    y_label = "tau_j" if im is not None else "tau_m"
    if ident.physical_consistency and src is not None:
        from .consistency import ConsistentFit
        from .friction import full_regressor
        with progress.step("physically consistent fit", timings):
            Wf = full_regressor(model, d_exc.q, d_exc.qd, d_exc.qdd, terms)
            prior = None if prior_inertial is None else \
                np.concatenate([prior_inertial, np.zeros(len(terms) * model.n)])
            cf = ConsistentFit(model, base, terms=terms, prior=prior).fit(
                Wf, getattr(d_exc, y_label))
        params["models"]["consistent"] = {"full": {
            **_table(list(base.full_names), cf.params_),
            "note": f"physically consistent full parameters fitted to {y_label}; prior: "
                    f"{prior_info['kind']} ({prior_info['note']})"}}
        full, how = np.asarray(cf.params_, float), \
            f"physically consistent fit, prior {prior_info['kind']}"
    elif src is not None:
        from .urdf_export import full_from_base
        prior = np.concatenate([np.zeros(10 * model.n) if prior_inertial is None else prior_inertial,
                                np.zeros(len(terms) * model.n)])
        p_base = np.asarray(src.params_ if src is sm else im.params_, float)
        if p_base.size == base.n_base:
            full = full_from_base(base.E, p_base, prior)
            how = (f"closest to the {prior_info['kind']} prior's parameters with the identified "
                   f"base parameters")
        else:
            full = None
    if src is not None and full is not None:
        n = model.n
        fr = {t: full[10 * n + k * n: 10 * n + (k + 1) * n] for k, t in enumerate(terms)}
        urdf_params = {"inertial": full[:10 * n], "viscous": fr.get("viscous"),
                       "coulomb": fr.get("coulomb"),
                       "source": f"{'improved model stage 1 (torque sensor, link side)' if src is im else 'simplified model (motor torque)'}; {how}"}
    pe_counts = {}
    if sm is not None:
        pe_counts["simplified"] = params["models"]["simplified"]["rigid_body"].get("poorly_excited_count")
    if im is not None:
        pe_counts["improved_stage1"] = params["models"]["improved"]["stage1"].get("poorly_excited_count")
        pe_counts["improved_stage2"] = params["models"]["improved"]["stage2"]["poorly_excited_count"]
    truth_info = None
    if truth is not None:
        truth_info = {"applicable": truth["applicable"], "not_applicable": truth["not_applicable"],
                      "settings_source": truth["settings_source"]}
    elif want_truth and scn.backend == "twin":
        truth_info = {"applicable": {"stage1": False, "stage2": False},
                      "not_applicable": {"stage1": ["the twin's truth could not be built"],
                                         "stage2": ["the twin's truth could not be built"]}}
    metrics = {"rms": rms, "improvement_percent": improvement, "cond_W_measured": cond_meas,
               "n_base": int(base.n_base), "headline_improved_route": head,
               "prior": prior_info, "poorly_excited_count": pe_counts,
               "validation": {k: v for k, v in vres.to_dict().items()
                              if k in ("decomposition_rms", "change_vs_simplified_pct")}}
    if im is not None:
        metrics["stage2"] = params["models"]["improved"]["stage2"]
        metrics["friction_term_comparison"] = params["models"]["improved"]["friction_term_comparison"]
        metrics["improved_variants_rms_closed_form"] = variants
        metrics["improved_variant"] = im.friction_term
    if perr:
        metrics["parameter_errors"] = perr
    if truth_info is not None:
        metrics["truth"] = truth_info
    return Identification(model=model, base=base, processed=processed, simplified=sm, improved=im,
                          consistent=cf, predictions=preds, metrics=metrics, parameters=params,
                          urdf_params=urdf_params, warnings=warnings, validation=vres,
                          truth_base=truth_base)


# ------------------------------------------------------------------------------------------------
# 4. run folder
# ------------------------------------------------------------------------------------------------

def run_folder(scn: Scenario, out: str | os.PathLike | None) -> Path:
    """The run folder: `out`, or <outputs.dir>/<timestamp>_<name> (never an existing one)."""
    if out is not None:
        p = Path(out)
    else:
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", scn.name)
        p = Path(scn.outputs.dir) / f"{stamp}_{safe}"
        k = 1
        while p.exists():
            k += 1
            p = Path(scn.outputs.dir) / f"{stamp}_{safe}-{k}"
    p.mkdir(parents=True, exist_ok=True)
    return p


def _write_yaml(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(yaml.safe_dump(_plain(data), sort_keys=False, default_flow_style=None))
    os.replace(tmp, path)


def _write_json(path: Path, data) -> None:
    tmp = path.with_name(path.name + ".partial")
    tmp.write_text(json.dumps(_plain(data), indent=1, allow_nan=False))
    os.replace(tmp, path)


def _plain(o):
    """Plain JSON/YAML data (non-finite floats -> null); see identify.jsonutil."""
    return to_jsonable(o)


def resolved_scenario(scn: Scenario) -> dict:
    """The scenario as resolved, with the backend's full settings (defaults filled) when known."""
    d = scn.resolved()
    if scn.backend == "twin":
        ts = twin_settings(scn)
        if ts is not None:      # else keep what the user wrote
            d["twin"] = ts
    return d


def _limits_dict(model, info: dict) -> dict:
    """Limits drawn on trajectory plots: those the optimizer used, else the arm's."""
    lu = info.get("limits_used") or {}
    lim = model.limits
    out = {k: np.asarray(getattr(lim, k), float) for k in ("q_min", "q_max", "qd_max", "qdd_max")}
    for k in out:
        if isinstance(lu.get(k), (list, tuple, np.ndarray)):
            out[k] = np.array([np.inf if v is None else v for v in lu[k]], float)
    return out


def _plots(folder: Path, ident: Identification, trajs: dict | None, messages: list) -> None:
    """Trajectory plots (identify.trajectory_plots) and identification plots (identify.ident_plots);
    a failing plot is reported in metrics['messages'] and never loses a finished run."""
    pdir = folder / "plots"
    pdir.mkdir(exist_ok=True)
    if trajs:
        try:
            from . import trajectory_plots as tp
        except ImportError:
            tp = None
            messages.append("trajectory plots: identify.trajectory_plots is not available yet")
        fn = getattr(tp, "plot_trajectory", None) if tp is not None else None
        if tp is not None and fn is None:
            messages.append("trajectory plots: identify.trajectory_plots.plot_trajectory missing")
        for label, (tr, info) in (trajs.items() if fn is not None else ()):
            try:
                fn(tr, _limits_dict(ident.model, info), pdir / f"trajectory_{label}.png",
                   title=f"{label} trajectory", joint_names=list(ident.model.joint_names))
            except Exception as exc:  # noqa: BLE001
                messages.append(f"trajectory plot ({label}) failed: {exc}")
    try:
        from . import ident_plots as ip
    except ImportError:
        messages.append("identification plots: identify.ident_plots is not available yet")
        return
    jobs = []
    vres = ident.validation
    if vres is not None:
        for label in vres.rms:
            jobs.append((f"torque_{label}", ip.plot_torque_comparison, (vres, label),
                         {"title": f"motor torque, {label} trajectory"}))
            if label == "validation" or len(vres.rms) == 1:
                jobs.append((f"residual_{label}", ip.plot_residuals, (vres, label), {}))
        if "validation" in vres.decomposition and "improved" in vres.decomposition["validation"]:
            jobs.append(("torque_decomposition_validation", ip.plot_decomposition,
                         (vres, "validation", "improved"), {}))
    im = ident.improved
    if im is not None:
        jobs.append(("param_stage1", ip.plot_parameters, (im.names1_, im.params_, im.std_),
                     {"truth": ident.truth_base, "title": "stage 1 (torque sensor): base "
                                                          "parameters, +-3 sigma"}))
        jobs.append(("param_stage2", ip.plot_stage2, (im.stage2_,), {}))
    elif ident.simplified is not None:
        sm = ident.simplified
        jobs.append(("param_simplified", ip.plot_parameters, (sm.names_, sm.params_, sm.std_),
                     {"title": "simplified model parameters, +-3 sigma"}))
    for stem, fn, args, kw in jobs:
        try:
            fn(*args, pdir / f"{stem}.png", **kw)
        except Exception as exc:  # noqa: BLE001
            messages.append(f"plot {stem} failed: {exc}")


def write_run(folder: Path, scn: Scenario, ident: Identification, *, trajs: dict | None,
              recs: dict | None, traj_infos: dict | None, timings: dict, command: str,
              extra: dict | None = None) -> dict:
    """Write every output file of a finished run; returns the metrics dict."""
    folder = Path(folder)
    out = scn.outputs
    messages = list(ident.warnings)
    _write_yaml(folder / "scenario.yaml", resolved_scenario(scn))
    if trajs:
        tdir = folder / "trajectories"
        tdir.mkdir(exist_ok=True)
        for label, (tr, _info) in trajs.items():
            tr.save(tdir / f"{label}.yaml")
    if recs and out.save_recordings:
        rdir = folder / "recordings"
        rdir.mkdir(exist_ok=True)
        for label, rec in recs.items():
            rec.save(rdir / f"{label}.npz")
    _write_yaml(folder / "parameters.yaml", ident.parameters)
    urdf_file = None
    if out.urdf and ident.urdf_params is not None:
        from .urdf_export import export_urdf
        up = ident.urdf_params
        try:
            urdf_file = export_urdf(ident.model, folder / "identified.urdf", up["inertial"],
                                    viscous=up["viscous"], coulomb=up["coulomb"],
                                    comment=f"identified by twinid ({scn.name}): {up['source']}",
                                    name=f"{ident.model.name}_identified")
        except ValueError as exc:
            messages.append(f"URDF export skipped: {exc}")
    if out.plots:
        t0 = time.perf_counter()
        _plots(folder, ident, trajs, messages)
        timings["plots"] = round(time.perf_counter() - t0, 4)
    metrics = {
        "name": scn.name, "description": scn.description, "backend": scn.backend,
        "command": command, "created": _dt.datetime.now().isoformat(timespec="seconds"),
        "host": platform.node(),
        "joint_names": list(ident.model.joint_names),
        **ident.metrics,
        "paper": {"rms_Nm": {"excitation": {"simplified": 1.6859, "improved": 0.6815},
                             "validation": {"simplified": 1.7045, "improved": 1.5762}},
                  "improvement_percent": PAPER_IMPROVEMENT,
                  "targets_percent": {"excitation": -60.0, "validation": -40.0}},
        "targets_met": {k: bool(v <= {"excitation": -60.0, "validation": -40.0}[k])
                        for k, v in ident.metrics.get("improvement_percent", {}).items()},
        "timings_s": timings,
        "files": {"urdf": None if urdf_file is None else urdf_file.name},
        "messages": messages,
    }
    if traj_infos:
        metrics["trajectories"] = {k: {kk: vv for kk, vv in v.items() if kk != "label"}
                                   for k, v in traj_infos.items()}
        metrics["cond_W"] = {k: v["cond"] for k, v in traj_infos.items()}
    if recs:
        for label, rec in recs.items():
            metrics.setdefault("trajectories", {}).setdefault(label, {})["samples"] = rec.n_samples
    if extra:
        metrics.update(extra)
    _write_json(folder / "metrics.json", metrics)
    return metrics


def _finish(folder: Path, scn: Scenario, metrics: dict, timings: dict, t0: float) -> None:
    """Final timings into metrics.json, then the report (built from the folder's files)."""
    timings["total"] = round(time.perf_counter() - t0, 4)
    metrics["timings_s"] = timings
    _write_json(folder / "metrics.json", metrics)
    if scn.outputs.report:
        from .report import build_report
        build_report(folder)


# ------------------------------------------------------------------------------------------------
# 5. commands
# ------------------------------------------------------------------------------------------------

def preflight(scn: Scenario, model=None, settings: dict | None = None) -> bool:
    """The backend's early refusal (identify.backend.preflight), before trajectories are
    optimized: a refusal (the backend's SafetyRefused, or any error marked safety_refusal) becomes
    :class:`SafetyRefusal`; other errors propagate. True when the backend has a preflight."""
    from .backend import preflight as backend_preflight
    settings = scn.backend_settings() if settings is None else settings
    try:
        return backend_preflight(scn.backend, backend_arm(scn, model), settings)
    except Exception as exc:  # noqa: BLE001 -- classified below
        names = {c.__name__ for c in type(exc).__mro__}
        if "SafetyRefused" in names or getattr(exc, "safety_refusal", False):
            raise SafetyRefusal(f"the {scn.backend} backend refused before any trajectory was "
                                f"optimized: {exc}") from exc
        raise


def run_scenario(scn: Scenario, out=None) -> RunResult:
    """``twinid run``: preflight -> trajectories -> backend -> identification -> run folder."""
    timings: dict = {}
    t0 = time.perf_counter()
    model = build_model(scn)
    preflight(scn, model)
    trajs = trajectories(scn, model, timings)
    settings, folder = None, None
    if scn.backend == "hardware":        # samples stream into the run folder, kept on a stop
        folder = run_folder(scn, out)
        settings = scn.backend_settings()
        settings.setdefault("record_dir", str(folder / "recordings"))
    recs = record(scn, trajs, model=model, timings=timings, settings=settings)
    if settings is not None and settings.get("dry_run"):
        return _dry_run_result(folder, recs)
    ident = identify_recordings(scn, model, recs, timings=timings)
    folder = folder or run_folder(scn, out)
    timings["total_before_outputs"] = round(time.perf_counter() - t0, 4)
    metrics = write_run(folder, scn, ident, trajs=trajs, recs=recs,
                        traj_infos={k: v[1] for k, v in trajs.items()}, timings=timings,
                        command="run")
    _finish(folder, scn, metrics, timings, t0)
    progress.message(_summary(metrics, folder))
    return RunResult(folder, metrics, ident)


def _dry_run_result(folder: Path, recs: dict) -> RunResult:
    """hardware.dry_run: the bus came up and every check passed; print the backend's bus report
    (stdout), keep it in the run folder, identify nothing."""
    text = next((r.meta.get("bus_report_text") for r in recs.values() if r.meta.get("bus_report_text")),
                "dry run: no bus report (offline: no interface given)")
    (folder / "bus_report.txt").write_text(text + "\n")
    print(text, flush=True)
    return RunResult(folder, {"dry_run": True}, None)


def fit_scenario(scn: Scenario, out=None, log=None, validation_log=None) -> RunResult:
    """``twinid fit``: identify from recordings/logs named in the scenario's fit section."""
    from .logs import gains_from_drives, load_log
    from .scenario import LogSpec, ScenarioError
    timings: dict = {}
    t0 = time.perf_counter()
    specs = {"excitation": scn.fit.excitation, "validation": scn.fit.validation}
    for label, override in (("excitation", log), ("validation", validation_log)):
        if override is not None:
            base = specs[label] or LogSpec(file=Path(override))
            p = Path(override)
            if not p.is_file():
                raise FileNotFoundError(f"{override}: log file not found")
            specs[label] = dataclasses.replace(base, file=p.resolve())
    if specs["excitation"] is None:
        raise ScenarioError(str(scn.source or "<scenario>"), None, "fit.excitation",
                            "twinid fit needs a log: set fit.excitation.file or pass --log FILE")
    model = build_model(scn)
    gains = None
    if scn.arm.drives is not None:
        gains = gains_from_drives(scn.arm.drives, model.joint_names)
    recs = {}
    with progress.step("reading logs", timings):
        for label, spec in specs.items():
            if spec is not None:
                recs[label] = load_log(spec, model.joint_names, gains=gains)
    ident = identify_recordings(scn, model, recs, timings=timings, want_truth=False)
    folder = run_folder(scn, out)
    infos = {label: {"source": str(specs[label].file), "duration_s": rec.duration,
                     "samples": rec.n_samples, "resampled": rec.meta.get("log", {}).get("resampled")}
             for label, rec in recs.items()}
    metrics = write_run(folder, scn, ident, trajs=None, recs=recs, traj_infos=None,
                        timings=timings, command="fit", extra={"trajectories": infos})
    _finish(folder, scn, metrics, timings, t0)
    progress.message(_summary(metrics, folder))
    return RunResult(folder, metrics, ident)


def trajectories_only(scn: Scenario, out=None) -> Path:
    """``twinid trajectory``: optimize (or load) the trajectories and save them with plots."""
    model = build_model(scn)
    timings: dict = {}
    trajs = trajectories(scn, model, timings)
    folder = Path(out) if out is not None else run_folder(scn, None)
    folder.mkdir(parents=True, exist_ok=True)
    info = {}
    for label, (tr, inf) in trajs.items():
        tr.save(folder / f"{label}.yaml")
        info[label] = {k: v for k, v in inf.items() if k != "label"}
        try:
            from .trajectory_plots import plot_trajectory
        except ImportError:
            continue
        plot_trajectory(tr, _limits_dict(model, inf), folder / f"{label}.png",
                        title=f"{label} trajectory", joint_names=list(model.joint_names))
    _write_yaml(folder / "trajectories.yaml", {"trajectories": info, "timings_s": timings})
    for label, inf in info.items():
        progress.message(f"{label}: cond(W_base) = {inf['cond']:.2f}, {inf['duration_s']:.1f} s")
    return folder


def _summary(metrics: dict, folder: Path) -> str:
    lines = [f"run folder: {folder}"]
    for label, r in metrics.get("rms", {}).items():
        parts = [f"{k} {v['overall']:.4f}" for k, v in r.items() if k in ("simplified", "improved")]
        imp = metrics.get("improvement_percent", {}).get(label)
        lines.append(f"  {label}: RMS [N*m] " + ", ".join(parts)
                     + ("" if imp is None else f"  ({imp:+.2f} %)"))
    return "\n".join(lines)
