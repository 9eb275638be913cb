"""Rendering the run's typed results (:mod:`identify.outputs.results`) into the documents a run
writes: ``parameters.yaml`` (:func:`parameters_document`), ``metrics.json``
(:func:`metrics_document`) and a sweep's per-run record (:func:`sweep_record`). Each key is
written here and nowhere else; the report (:mod:`identify.outputs.report`) reads the files back.

Documents are plain dict / list / float data (numpy converted); non-finite floats become null
when written (identify.common.fileio)."""
from __future__ import annotations

import numpy as np

from identify.common.jsonutil import to_jsonable
from identify.outputs.transfer import transfer_metrics, transfer_summary
from identify.estimation.estimators import MISFIT_RATIO

from identify.validation.parameter_errors import near_zero, stage2_truth

from .results import ControlOutcome, Identification, Prior, RmsFigure, RunInfo, TrajectoryInfo

#: the paper's motor-torque RMS [N*m] and relative changes [%] (Table 4 as reconstructed)
PAPER_RMS_NM = {"excitation": {"simplified": 1.6859, "improved": 0.6815},
                "validation": {"simplified": 1.7045, "improved": 1.5762}}
PAPER_IMPROVEMENT = {"excitation": -59.58, "validation": -7.52}
TARGETS_PERCENT = {"excitation": -60.0, "validation": -40.0}

_NOTE_SIMPLIFIED = ("simplified model: rigid-body base parameters + Coulomb/viscous friction "
                    "fitted to the motor torque eta*beta*i (the drive's losses are lumped into "
                    "these parameters, so the twin's link-side truth does not apply).")


def _finite_or_none(x) -> float | None:
    return float(x) if np.isfinite(x) else None


# ------------------------------------------------------------------------------------------------
# building blocks
# ------------------------------------------------------------------------------------------------

def parameter_table(names, value, std=None, truth=None, poorly_excited=None) -> dict:
    """YAML-able parameter table: names, value, and when given std with rel_std_percent,
    poorly_excited flags with their count (the estimator's ``poorly_excited_``: std > |value|),
    truth with error_percent (null where the truth is 0)."""
    value = np.asarray(value, float)
    t = {"names": [str(n) for n in names], "value": value.tolist()}
    if std is not None:
        std = np.asarray(std, float)
        t["std"] = std.tolist()
        with np.errstate(divide="ignore", invalid="ignore"):
            rel = np.where(value != 0, 100.0 * std / np.abs(value), np.inf)
        t["rel_std_percent"] = [_finite_or_none(x) for x in rel]
    if poorly_excited is not None:
        pe = np.asarray(poorly_excited, bool).reshape(-1)
        if pe.size != value.size:
            raise ValueError(f"poorly_excited has {pe.size} flags for {value.size} parameters")
        t["poorly_excited"] = [bool(x) for x in pe]
        t["poorly_excited_count"] = int(pe.sum())
    if truth is not None:
        truth = np.asarray(truth, float)
        t["truth"] = truth.tolist()
        zero = near_zero(truth)
        with np.errstate(divide="ignore", invalid="ignore"):
            err = np.where(~zero, 100.0 * (value - truth) / np.abs(truth), np.nan)
        t["error_percent"] = [_finite_or_none(x) for x in err]
        t["truth_near_zero"] = [bool(x) for x in zero]
        if std is not None:
            with np.errstate(divide="ignore", invalid="ignore"):
                z = (value - truth) / std
            t["z"] = [_finite_or_none(x) for x in z]
    return t


def error_summary(pe) -> dict:
    """Summary of a validation.ParameterErrors (count = parameters compared; a parameter without
    a std is skipped and listed with the reason)."""
    rel = np.abs(pe.rel_error[np.isfinite(pe.rel_error)])
    return {"count": int(pe.n), "within_3sigma": int(pe.n_within),
            "median_abs_error_percent": float(np.median(rel)) if rel.size else None,
            "max_abs_error_percent": float(np.max(rel)) if rel.size else None,
            "rel_error_percent": [_finite_or_none(x) for x in pe.rel_error],
            "z": [_finite_or_none(x) for x in pe.z],
            "skipped_count": int(pe.n_skipped),
            "skipped": [{"name": nm, "reason": why} for nm, why in pe.skipped]}


def stage2_flags(s2) -> dict:
    """Per-joint stage-2 diagnostics of a Stage2Result ((n, k+4) lists in ``names`` order unless
    noted):

    poorly_excited / poorly_excited_count / poorly_excited_names: the joint models' flag (std >
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


def stage2_document(ident: Identification) -> dict:
    """The improved model's stage-2 table (also in metrics.json)."""
    s2 = ident.improved.stage2_
    d = {"variant": s2.variant, "names": list(s2.names), "joints": [j.joint for j in s2.joints],
         "params": s2.params.tolist(), "std": s2.std.tolist(), "rms_Nm": s2.rms.tolist()}
    d.update(stage2_flags(s2))
    t = ident.truth.truth
    if t is not None and not t.applicable["stage2"]:
        d["truth_not_applicable"] = list(t.not_applicable["stage2"])
    t2 = stage2_truth(s2, ident.truth.truth)
    if t2 is not None:
        d["truth"] = t2.tolist()
        zero = near_zero(t2.T.reshape(-1), np.repeat(np.arange(t2.shape[1]), t2.shape[0])
                         ).reshape(t2.shape[1], t2.shape[0]).T        # per coefficient
        with np.errstate(divide="ignore", invalid="ignore"):
            e2 = np.where(~zero, 100.0 * (s2.params - t2) / np.abs(t2), np.nan)
            z2 = (s2.params - t2) / s2.std
        d["error_percent"] = [[_finite_or_none(x) for x in row] for row in e2]
        d["z"] = [[_finite_or_none(x) for x in row] for row in z2]
    if s2.a is not None:
        d["a"] = s2.a.tolist()
        d["a_std"] = s2.a_std.tolist()
    return d


def friction_comparison(ident: Identification) -> dict:
    cmp = ident.improved.compare_friction_terms_
    return {"rms_Nm": {k: float(v) for k, v in cmp["rms"].items()}, "better": cmp["better"],
            "note": cmp["note"]}


def prior_document(prior: Prior) -> dict:
    d = {"kind": prior.kind, "requested": prior.requested}
    if prior.error is not None:
        d.update(error=prior.error, seed=prior.seed)
    d["note"] = prior.note
    return d


def rms_document(r: RmsFigure) -> dict:
    return {"per_joint": np.asarray(r.per_joint).tolist(), "overall": float(r.overall)}


#: what the headline RMS figures are measured against
RMS_AGAINST = ("raw measured signal at the processed samples (neither smoothed nor low-passed); "
               "predictions from the processed states")
RMS_FILTERED_NOTE = ("against the filtered signal the fit saw (smoothing + low-pass): lower than "
                     "the headline figure by the noise the filter removed; not a measure of "
                     "agreement with the sensor")


RMS_OUTSIDE_NOTE = ("against the raw signal over the samples outside velocity reversals (the "
                    "samples the fit used, processing.reversal_speed_rad_s): at a reversal the "
                    "friction sticks, which no constant-parameter model describes")


def noise_floor_documents(v) -> dict:
    """trajectory -> signal -> {per_joint, overall, source} of ModelValidation.noise_floor."""
    return {label: {ch: {"per_joint": np.asarray(f.per_joint).tolist(),
                         "overall": float(f.overall), "source": f.source}
                    for ch, f in floors.items()}
            for label, floors in v.noise_floor.items()}


def delay_document(ident: Identification) -> dict:
    """trajectory -> {compensated_s: the delay the processing compensated [s], estimate (when
    processing.delay is auto), residual_s: the delay still estimated in the processed data}."""
    out = {}
    for label, d in ident.processed.items():
        meta = d.meta.get("processing", {})
        doc = {"compensated_s": float(getattr(d, "delay_s", 0.0))}
        if "delay_estimate" in meta:
            doc["estimate"] = meta["delay_estimate"]
        est = ident.delays.get(label)
        if est is not None:
            doc["residual"] = est.to_dict()
        out[label] = doc
    return out


def rms_over_floor(v, rms: dict | None = None) -> dict:
    """trajectory -> model -> overall RMS / the noise floor of its signal (tau_j for the stage-1
    joint-torque fit, tau_m otherwise); 1 = the model explains everything but the noise.
    `rms`: the figures to divide (default the headline ``v.rms``)."""
    out = {}
    for label, by_model in (v.rms if rms is None else rms).items():
        floors = v.noise_floor.get(label, {})
        row = {}
        for name, r in by_model.items():
            f = floors.get("tau_j" if name == "stage1_tau_j" else "tau_m")
            if f is not None and f.overall > 0:
                row[name] = float(r.overall / f.overall)
        out[label] = row
    return out


def trajectory_document(info: TrajectoryInfo) -> dict:
    """A trajectory's facts; fields that do not apply (None) are left out, except a log's
    ``resampled``."""
    if info.from_log:
        return {"source": info.source, "duration_s": info.duration_s, "samples": info.samples,
                "resampled": info.resampled}
    keys = ("source", "cond", "solver_time_s", "seed", "starts", "max_ratio", "limits_used",
            "harmonics", "period_s", "periods", "duration_s", "samples",
            "objective", "cond_scaled", "logdet", "median_rel_std", "rel_std", "noise_std_Nm",
            "min_distance_m", "closest_pair", "closest_time_s", "clearance_margin_m")
    out = {k: getattr(info, k) for k in keys if getattr(info, k) is not None}
    if info.held is not None:
        h = info.held
        out["held"] = {"sources": held_sources_document(h.sources), "rank": h.rank,
                       "n_base": h.n_base, "median_rel_std_held": h.median_rel_std_held,
                       "median_rel_std_new_alone": h.median_rel_std_new,
                       "rel_std_held": h.rel_std_held, "rel_std_new_alone": h.rel_std_new,
                       "note": HELD_DESIGN_NOTE}
    return out


HELD_DESIGN_NOTE = ("rel_std / median_rel_std / logdet of this trajectory are those of the "
                    "combined estimate (held data + this trajectory); rel_std_held: the held data "
                    "alone (null: not identifiable from them), rel_std_new_alone: this trajectory "
                    "alone; same noise model (noise_std_Nm) for both")


def held_sources_document(sources) -> list:
    """[HeldSource] -> list of plain dicts (metrics.json)."""
    return [{"key": s.key, "source": s.source, "kind": s.kind, "file": s.file,
             "samples": s.samples, "duration_s": s.duration_s,
             "processed_samples": s.processed_samples} for s in sources]


# ------------------------------------------------------------------------------------------------
# parameters.yaml
# ------------------------------------------------------------------------------------------------

#: what the std of a linear fit are (parameters.yaml, metrics.json "uncertainty")
STD_SANDWICH = ("HAC sandwich (Parzen kernel): noise std, serial correlation included; no misfit "
                f"flagged (block jackknife / sandwich std ratio not above {MISFIT_RATIO:g})")
STD_MISFIT = ("block jackknife where larger than the HAC sandwich: the residual is a model misfit "
              "(the estimates on contiguous blocks disagree beyond the noise); lower bounds")


def uncertainty_document(est) -> dict:
    """{"uncertainty": {std, jackknife_ratio, misfit}} of a fit whose estimator checked its
    residual for misfit (identify.estimation.estimators.WLS); {} for the others."""
    ratio = getattr(est, "jackknife_ratio_", None)
    if ratio is None or not np.isfinite(ratio):
        return {}
    mis = bool(getattr(est, "misfit_", False))
    return {"uncertainty": {"std": STD_MISFIT if mis else STD_SANDWICH,
                            "jackknife_ratio": float(ratio), "misfit": mis}}


def model_tables(ident: Identification) -> dict:
    """models.simplified / models.improved / models.consistent of parameters.yaml."""
    sm, im = ident.simplified, ident.improved
    models: dict = {}
    if sm is not None:
        tb = parameter_table(sm.names_, sm.params_, sm.std_,
                             poorly_excited=getattr(getattr(sm, "estimator_", None), "poorly_excited_",
                                                    None))
        tb.update(uncertainty_document(getattr(sm, "estimator_", None)))
        models["simplified"] = {"rigid_body": {**tb, "note": _NOTE_SIMPLIFIED}}
    if im is not None:
        tb = parameter_table(im.names1_, im.params_, im.std_, ident.truth.base,
                             poorly_excited=getattr(im.stage1_, "poorly_excited_", None))
        tb.update(uncertainty_document(im.stage1_))
        tb["note"] = ("improved model, stage 1: base parameters + link-side friction from the "
                      "joint torque sensor" + (f" (truth: {ident.truth.base_note})"
                                               if ident.truth.base is not None else ""))
        models["improved"] = {"stage1": tb, "stage2": stage2_document(ident),
                              "friction_term_comparison": friction_comparison(ident)}
    ex = ident.export
    if ex is not None and ex.consistent is not None:
        models["consistent"] = {"full": {
            **parameter_table(list(ident.base.full_names), ex.consistent.params_),
            "note": f"physically consistent full parameters fitted to {ex.consistent_signal}; "
                    f"prior: {ex.prior.kind} ({ex.prior.note})"}}
    return models


def parameters_document(ident: Identification) -> dict:
    """parameters.yaml."""
    return {"base_parameters": list(ident.base.names), "friction_terms": list(ident.terms),
            "models": model_tables(ident), "prior": prior_document(ident.prior)}


# ------------------------------------------------------------------------------------------------
# metrics.json
# ------------------------------------------------------------------------------------------------

def identification_metrics(ident: Identification, models: dict | None = None) -> dict:
    """The identification's part of metrics.json (also the source of the sweep records)."""
    models = model_tables(ident) if models is None else models
    v = ident.validation
    pe_counts = {}
    if "simplified" in models:
        pe_counts["simplified"] = models["simplified"]["rigid_body"].get("poorly_excited_count")
    if "improved" in models:
        pe_counts["improved_stage1"] = models["improved"]["stage1"].get("poorly_excited_count")
        pe_counts["improved_stage2"] = models["improved"]["stage2"]["poorly_excited_count"]
    m = {"rms": {label: {name: rms_document(r) for name, r in by_model.items()}
                 for label, by_model in v.rms.items()},
         "rms_against": RMS_AGAINST,
         "rms_filtered_target": {"note": RMS_FILTERED_NOTE,
                                 **{label: {name: rms_document(r) for name, r in by_model.items()}
                                    for label, by_model in v.rms_filtered.items()}},
         "noise_floor": noise_floor_documents(v),
         "delay": delay_document(ident),
         "rms_over_noise_floor": rms_over_floor(v),
         "rms_outside_reversals": {
             "note": RMS_OUTSIDE_NOTE,
             **{label: {name: rms_document(r) for name, r in by_model.items()}
                for label, by_model in v.rms_outside_reversals.items()}},
         "rms_outside_reversals_over_noise_floor": rms_over_floor(v, v.rms_outside_reversals),
         "improvement_percent": dict(v.improvement), "cond_W_measured": dict(v.cond_measured),
         "n_base": int(ident.base.n_base), "headline_improved_route": v.headline_route,
         "prior": prior_document(ident.prior), "poorly_excited_count": pe_counts,
         "uncertainty": {k: tb["uncertainty"] for k, tb in
                         (("simplified", models.get("simplified", {}).get("rigid_body", {})),
                          ("improved_stage1", models.get("improved", {}).get("stage1", {})))
                         if "uncertainty" in tb},
         "validation": {k: val for k, val in v.result.to_dict().items()
                        if k in ("decomposition_rms", "change_vs_simplified_pct")}}
    if "improved" in models:
        m["stage2"] = models["improved"]["stage2"]
        m["friction_term_comparison"] = models["improved"]["friction_term_comparison"]
        m["improved_variants_rms_closed_form"] = v.variants_rms
        m["improved_variant"] = ident.improved.friction_term
    selection = getattr(ident.simplified, "selection_", None)
    if selection is not None:           # identification.friction: auto
        m["friction_selection"] = selection.to_dict()
    if getattr(ident, "cutoff", None) is not None:      # processing.butter_cutoff_hz: auto
        m["cutoff_selection"] = ident.cutoff.to_dict()
    if ident.held:
        m["held_data"] = {"sources": held_sources_document(ident.held),
                          "note": "the excitation fit stacks the rows of these recordings "
                                  "(each processed on its own; kind 'segment': the parts of "
                                  "the excitation log between its gaps) before the excitation "
                                  "recording's (the log's longest part); RMS and "
                                  "cond_W_measured of 'excitation' are over all of them"}
    errs = {}
    for key, pe in ident.truth.errors.items():
        errs[key] = error_summary(pe)
        if key == "improved_stage2":
            errs[key]["names"] = list(pe.names)
    if errs:
        m["parameter_errors"] = errs
    t = ident.truth.truth
    if t is not None:
        m["truth"] = {"applicable": t.applicable, "not_applicable": t.not_applicable,
                      "settings_source": t.settings_source}
    elif ident.truth.expected:
        m["truth"] = {"applicable": {"stage1": False, "stage2": False},
                      "not_applicable": {"stage1": ["the twin's truth could not be built"],
                                         "stage2": ["the twin's truth could not be built"]}}
    return m


def export_document(ident: Identification) -> dict:
    """metrics.json ``export``: what the exported model (identified.urdf + identified_joints.yaml)
    predicts, its RMS per trajectory against the fitted signal, and why no URDF was written."""
    ex = ident.export
    if ex is None:
        return {"written": False, "reason": "no model was fitted"}
    return {"signal": ex.signal, "source": ex.source, "physical": bool(ex.physical),
            "reason": ex.reason,
            "formula": "tau = RNEA(q, qd, qdd) + armature*qdd + viscous*qd + coulomb*shape(qd) "
                       "+ offset (identified_joints.yaml)",
            "coulomb_shape": None if ex.joint_terms is None else ex.joint_terms.coulomb_shape,
            "rms": {label: rms_document(r) for label, r in ex.rms.items()}}


HEADLINE_NOTE = ("the exported model (identified.urdf + identified_joints.yaml: what a "
                 "controller computes) against the RAW measured signal; nominal: the input URDF's "
                 "own inertials with zero joint terms (no fit); others: the fitted models, each "
                 "against its own signal")


def headline_document(ident: Identification) -> dict | None:
    """metrics.json ``headline``: the exported model's RMS per trajectory (= ``export.rms``),
    the nominal URDF's, whether the fit was worse out of sample than the nominal, the
    regularisation toward it, and the other models beside it (each with its signal)."""
    h = ident.headline
    if h is None:
        return None
    doc = {"model": "export", "derived_from": h.derived_from, "signal": h.signal,
           "rms": {t: rms_document(r) for t, r in h.rms.items()},
           "nominal_urdf_rms": {t: rms_document(r) for t, r in h.nominal_rms.items()},
           "worse_than_nominal": h.worse_than_nominal,
           "others": [{"model": m, "signal": sig, "rms": {t: rms_document(r)
                                                          for t, r in by.items()}}
                      for m, sig, by in h.others],
           "note": HEADLINE_NOTE}
    if h.regularised is not None:
        doc["regularised"] = {**h.regularised.to_dict(), "unregularised_rms": {
            t: rms_document(r) for t, r in h.unregularised_rms.items()}}
    return doc


def signal_document(ident: Identification) -> dict:
    """metrics.json ``headline_model``, ``signal`` (name of the fitted torque signal),
    ``source`` (logs | backend) and ``identification_used`` (the settings with autos resolved)."""
    from identify.scenario.spec import to_plain
    return {"headline_model": ident.headline_model, "signal": ident.signal_name,
            "source": "logs" if ident.from_logs else "backend",
            "identification_used": None if ident.spec is None else to_plain(ident.spec)}


def control_sections(control: ControlOutcome | None) -> dict:
    """metrics.json ``closed_loop`` / ``collision`` / ``payload`` sections of what ran."""
    if control is None:
        return {}
    out = {}
    if control.closed_loop is not None:
        out["closed_loop"] = closed_loop_metrics(control.closed_loop)
    if control.collision:
        out["collision"] = collision_metrics(control.collision)
    if control.collision_transfer:
        out["collision_transfer"] = transfer_metrics(control.collision_transfer)
    if control.payload is not None:
        out["payload"] = payload_metrics(control.payload)
    return out


def metrics_document(run: RunInfo, ident: Identification, models: dict | None = None,
                     control: ControlOutcome | None = None) -> dict:
    """metrics.json of a run (with `control`: the closed loop / collision sections)."""
    m = {"name": run.name, "description": run.description, "backend": run.backend,
         "command": run.command, "created": run.created, "host": run.host,
         "joint_names": list(ident.model.joint_names),
         **identification_metrics(ident, models),
         "paper": {"rms_Nm": PAPER_RMS_NM, "improvement_percent": PAPER_IMPROVEMENT,
                   "targets_percent": TARGETS_PERCENT},
         "targets_met": {k: bool(val <= TARGETS_PERCENT[k])
                         for k, val in ident.validation.improvement.items()},
         "timings_s": run.timings, "files": dict(run.files), "messages": list(run.messages)}
    m.update(signal_document(ident))
    m["export"] = export_document(ident)
    head = headline_document(ident)
    if head is not None:
        m["headline"] = head
    if run.files.get("urdf") is not None:
        m["export"]["written"] = True
    elif "written" not in m["export"]:
        m["export"]["written"] = False
    if ident.from_logs:          # the paper's figures are the twin's targets, not a log's
        for key in ("paper", "targets_met"):
            m.pop(key, None)
    if run.trajectories:
        m["trajectories"] = {k: trajectory_document(i) for k, i in run.trajectories.items()}
        conds = {k: i.cond for k, i in run.trajectories.items() if i.cond is not None}
        if conds:
            m["cond_W"] = conds
    m.update(control_sections(control))
    return m


# ------------------------------------------------------------------------------------------------
# sweep records
# ------------------------------------------------------------------------------------------------

def sweep_record(ident: Identification, *, run_id: str, levels: dict, seed: int, time_s: float,
                 host: str, pid: int) -> dict:
    """One sweep run's JSON record (runs/<run_id>.json)."""
    m = identification_metrics(ident)
    errs = m.get("parameter_errors", {})
    pe = errs.get("improved_stage1", {})
    out = {"run_id": run_id, "levels": dict(levels), "seed": seed,
           "rms_overall": {t: {k: val["overall"] for k, val in r.items()}
                           for t, r in m["rms"].items()},
           "improvement_percent": m.get("improvement_percent", {}),
           "parameter_errors": {k: pe.get(k) for k in ("count", "within_3sigma",
                                                       "median_abs_error_percent",
                                                       "max_abs_error_percent",
                                                       "rel_error_percent")},
           "z": {stage: e.get("z") for stage, e in errs.items()},
           "rms_over_noise_floor": m.get("rms_over_noise_floor"),
           "cond_W_measured": m.get("cond_W_measured"),
           "time_s": time_s, "host": host, "pid": pid}
    return to_jsonable(out)


# ------------------------------------------------------------------------------------------------
# closed loop, collision detection, payload (identify.control)
# ------------------------------------------------------------------------------------------------

def closed_loop_metrics(res) -> dict:
    """metrics.json ``closed_loop`` of an identify.control.closed_loop.ClosedLoopResult."""
    c = res.cases
    per = lambda attr: {k: np.asarray(getattr(v, attr)).tolist() for k, v in c.items()}  # noqa: E731
    one = lambda attr: {k: float(getattr(v, attr)) for k, v in c.items()}               # noqa: E731
    any_case = next(iter(c.values()))
    return to_jsonable({
        "tracking_rms_rad": one("error_rms_overall"), "tracking_rms_rad_per_joint": per("error_rms"),
        "max_error_rad": one("max_error_overall"), "max_error_rad_per_joint": per("max_error"),
        "pid_torque_rms_Nm": one("pid_torque_rms_overall"),
        "pid_torque_rms_Nm_per_joint": per("pid_torque_rms"),
        "pid_torque_max_Nm_per_joint": per("pid_torque_max"),
        "goals": res.goals(), "trajectory": res.trajectory, "sample_rate_hz": res.sample_rate_hz,
        "state_source": any_case.state_source, "joint_names": list(res.joint_names),
        "model_source": {k: v.model_source for k, v in c.items()}})


def _collision_one(r) -> dict:
    th = r.thresholds
    return {"detected": bool(r.detected), "detection_delay_ms": r.detection_delay_ms,
            "false_alarms": int(r.false_alarms),
            "false_alarms_contact_run": int(r.false_alarms_contact_run),
            "threshold_Nm": th.value, "residual_rms_free_Nm": th.sigma,
            "residual_peak_free_Nm": th.peak, "peak_residual_in_contact_Nm": r.peak_residual_Nm,
            "tau_ext_peak_Nm": r.tau_ext_peak_Nm, "model_source": r.model_source,
            "reduced_sensitivity_fraction": r.band_fraction}


def collision_metrics(results: dict) -> dict:
    """metrics.json ``collision``: the identified model's figures at the top level (detected,
    detection_delay_ms, false_alarms, threshold_Nm, ...), every model under ``models``, the
    settings and the goals (detected within 50 ms, 0 false alarms)."""
    first = results.get("identified") or next(iter(results.values()))
    out = dict(_collision_one(first))
    out["models"] = {k: _collision_one(r) for k, r in results.items()}
    out.update({"signal": first.signal, "observer_gain_per_s": first.gain,
                "threshold_rule": {"k_sigma": first.thresholds.k_sigma,
                                   "peak_factor": first.thresholds.peak_factor,
                                   "margin_Nm": first.thresholds.margin_Nm,
                                   "stiction_speed_rad_s": first.stiction_speed},
                "contact": first.contact.as_setting(),
                "calibrated_on": "a collision-free run of the same trajectory (fresh noise); "
                                 "thresholds from another trajectory: collision_transfer",
                "goal": {"delay_ms": 50.0, "false_alarms": 0,
                         "met": {k: bool(r.detected and r.detection_delay_ms <= 50.0
                                         and r.false_alarms == 0) for k, r in results.items()}}})
    return to_jsonable(out)


#: what the payload's std are (metrics.json payload.std_note)
PAYLOAD_STD_NOTE = ("per parameter the larger of the noise std sigma^2 (A^T A)^-1 and the "
                    "delete-a-block jackknife's (10 contiguous blocks; jackknife_ratio: their "
                    "median ratio), then propagated to mass / CoM / inertia; a bias every block "
                    "shares is not in them")


def payload_metrics(res) -> dict:
    """metrics.json ``payload`` of an identify.control.payload_run.PayloadResult."""
    t = res.truth
    out = {"identified": res.identified, "std": res.std,
           "std_note": PAYLOAD_STD_NOTE, "jackknife_ratio": res.jackknife_ratio,
           "truth": None if t is None else {k: t[k] for k in ("mass_kg", "com_m", "inertia_kgm2")},
           "params_flange": res.params, "params_flange_std": res.params_std,
           "errors": {"mass_percent": res.mass_error_percent, "com_m": res.com_error_m},
           "goal": {"mass_percent": res.goal_mass_percent, "com_m": res.goal_com_m,
                    "met": None if t is None else bool(
                        abs(res.mass_error_percent) <= res.goal_mass_percent
                        and res.com_error_m <= res.goal_com_m)},
           "cond": res.cond, "trajectory_cond": res.trajectory_cond, "signal": res.signal,
           "arm_source": res.arm_source, "consistent_projection": res.projected,
           "samples": res.samples, "duration_s": res.duration_s}
    return to_jsonable(out)


def control_run_document(run: RunInfo, joint_names, control: ControlOutcome) -> dict:
    """metrics.json of a run without an arm identification (closed loop with a given model,
    payload identification)."""
    m = {"name": run.name, "description": run.description, "backend": run.backend,
         "command": run.command, "created": run.created, "host": run.host,
         "joint_names": list(joint_names), "timings_s": run.timings, "files": dict(run.files),
         "messages": list(run.messages)}
    if run.trajectories:
        m["trajectories"] = {k: trajectory_document(i) for k, i in run.trajectories.items()}
    m.update(control_sections(control))
    return m


def console_summary(metrics: dict, folder) -> str:
    """The console's closing lines of a run, from its metrics document."""
    lines = [f"run folder: {folder}"]
    signal = metrics.get("signal")
    export = metrics.get("export", {})
    for label, r in metrics.get("rms", {}).items():
        parts = [f"{k} {v['overall']:.4f}" for k, v in r.items() if k in ("simplified", "improved")]
        imp = metrics.get("improvement_percent", {}).get(label)
        line = (f"  {label}: RMS [N*m]" + (f" of {signal}" if signal else "") + " "
                + ", ".join(parts) + ("" if imp is None else f"  ({imp:+.2f} %)"))
        ex = export.get("rms", {}).get(label)
        if ex is not None:      # the exported model predicts its own fitted signal
            line += (f"; exported model {ex['overall']:.4f}"
                     + (f" of {export['signal']}" if export.get("signal") else ""))
        lines.append(line)
    return "\n".join(lines + headline_lines(metrics.get("headline")) + _control_summary(metrics))


def headline_lines(h: dict | None) -> list[str]:
    """The headline line (the exported model on the validation trajectory against the raw
    signal, beside the nominal URDF) and its WARNING when the fit lost to the nominal URDF."""
    if not h:
        return []
    traj = "validation" if "validation" in h["rms"] else next(iter(h["rms"]), None)
    if traj is None:
        return []
    nom = h["nominal_urdf_rms"].get(traj, {}).get("overall")
    out = [f"  headline ({traj}, exported model = identified.urdf + identified_joints.yaml, "
           f"from the {h['derived_from']}): RMS {h['rms'][traj]['overall']:.4f} N*m of "
           f"{h['signal']} against the raw signal"
           + ("" if nom is None else f"; nominal URDF (no fit) {nom:.4f}")]
    if h.get("worse_than_nominal"):
        reg = h.get("regularised")
        if reg is None:
            out.append("  WARNING: the fitted model is worse out of sample than the nominal URDF "
                       "(its regularisation failed: see the messages)")
        else:
            fit = reg["unregularised_rms"].get(traj, {}).get("overall", float("nan"))
            out.append(f"  WARNING: the fit was worse out of sample than the nominal URDF "
                       f"({fit:.4f} N*m); exported instead: regularised toward it "
                       f"({reg['chosen']}, chosen by cross-validation on the identification "
                       f"data)")
    return out


def _control_summary(metrics: dict) -> list[str]:
    """Closing lines of the closed-loop and collision runs (docs/closed_loop.md's figures)."""
    lines = []
    cl = metrics.get("closed_loop")
    if cl:
        g = cl.get("goals", {})
        rms = ", ".join(f"{k} {1e3 * v:.4f}" for k, v in cl.get("tracking_rms_rad", {}).items())
        lines.append(f"  closed loop ({cl.get('trajectory')}): tracking RMS [mrad] {rms}; "
                     f"identified / PID only {g.get('identified_vs_pid', float('nan')):.3f} "
                     f"(goal <= {g.get('goal_vs_pid')}), identified / true "
                     f"{g.get('identified_vs_true', float('nan')):.3f} "
                     f"(goal <= {g.get('goal_vs_true')})")
    for k, v in (metrics.get("collision") or {}).get("models", {}).items():
        d = (f"detected after {v['detection_delay_ms']:.0f} ms" if v.get("detected")
             else "not detected")
        lines.append(f"  collision, {k} model: {d}; false alarms {v.get('false_alarms')} "
                     f"(free run) / {v.get('false_alarms_contact_run')} (contact run)")
    return lines + transfer_summary(metrics.get("collision_transfer"))
