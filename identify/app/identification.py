"""Stages 4-6 of the pipeline on recordings {'excitation', ['validation']}:

    process -> fit (simplified / improved joint models) -> truth (twin runs) -> validate
            -> parameter errors -> prior -> export (full parameters for the URDF)

each a small function over the types of :mod:`identify.outputs.results`; :func:`identify_recordings`
runs them in that order. Rendering to files is :mod:`identify.outputs.render`'s job."""
from __future__ import annotations

import numpy as np

from identify.common import progress
from identify.estimation.consistency import ConsistentFit
from identify.estimation.delay import estimate_delay
from identify.estimation.design import BlockDesign, design_cond, design_from
from identify.estimation.improved import ImprovedModel
from identify.estimation.processing import ProcessingSettings, process
from identify.estimation.selection import SelectedModel
from identify.estimation.simplified import SimplifiedModel
from identify.estimation.streaming import row_blocks
from identify.model.base_params import compute_base_parameters
from identify.model.friction import full_regressor
from identify.model.urdf_export import full_from_base
from identify.scenario.signals import SIGNAL_NAMES, resolve_identification
from identify.scenario.spec import Scenario
from identify.validation.parameter_errors import (inertial_base_truth, stage2_errors, stage2_truth,
                                                  true_base_parameters)
from identify.validation.validate import validate

from .inputs import resolve_cutoff
from .prior import prior_parameters
from identify.outputs.results import (Export, Fits, Headline, Identification, ModelValidation,
                                     NoiseFloor, Prior, RmsFigure, TruthComparison)
from .truth import recorded_drive_truth, recorded_settings, true_link_parameters, twin_settings


def coulomb_eps(scn: Scenario) -> float:
    """Velocity scale of the Coulomb column [rad/s]: 0 for sign(qd), the scale for tanh."""
    ident = scn.identification
    return float(ident.coulomb_velocity_scale) if ident.coulomb_shape == "tanh" else 0.0


def resolve_signals(scn: Scenario, recs: dict, from_logs: bool) -> tuple[Scenario, str]:
    """The scenario with its identification ``auto`` keys resolved for the signals of the
    excitation recording (identify.scenario.signals), and the fitted signal "tau_j" | "tau_m".
    Raises ValueError naming a missing signal."""
    import dataclasses
    rec = recs["excitation"]
    ident, signal = resolve_identification(scn.identification, rec.tau_j is not None,
                                           rec.tau_m is not None, from_logs=from_logs)
    return dataclasses.replace(scn, identification=ident), signal


def alias_signal(processed: dict, signal: str) -> None:
    """Joint torque only: the rigid body + friction model is fitted to, and validated on, the
    joint torque -- it takes the place of the motor torque in the processed data."""
    if signal != "tau_j":
        return
    for d in processed.values():
        if d.tau_j is None:
            raise ValueError("the excitation data have only joint torques; the validation data "
                             "have none")
        d.tau_m = d.tau_j
        for extra in ("raw", "noise_floor"):      # raw measurement / noise floor alike
            x = getattr(d, extra, None)
            if isinstance(x, dict) and "tau_j" in x:
                x["tau_m"] = x["tau_j"]


def process_recordings(scn: Scenario, model, recs: dict, timings: dict | None = None,
                       base=None, title: str = "processing") -> dict:
    """label -> Processed (identify.estimation.processing) with the scenario's settings. With
    ``processing.delay: auto`` each recording's torque delay is estimated from the data
    (:func:`identify.estimation.delay.estimate_delay` on the stage-1 / simplified design of the
    uncompensated data) and the recording processed again with it compensated -- unless the
    minimum lies at the edge of the searched range (then a warning names the channel and nothing
    is compensated); the estimate is in ``Processed.meta["processing"]["delay_estimate"]``.
    `title`: the step's name on the console and in `timings`."""
    ps = ProcessingSettings.from_dict(scn.processing)
    processed = {}
    with progress.step(title, timings):
        for label, rec in recs.items():
            if list(rec.joint_names) != list(model.joint_names):
                raise ValueError(f"{label} recording joints {list(rec.joint_names)} differ from the "
                                 f"model's {list(model.joint_names)}")
            d = process(rec, ps)
            if ps.delay == "auto":
                terms = tuple(scn.identification.friction_terms)
                if base is None:
                    base = compute_base_parameters(model, terms=terms, seed=0)
                est = estimate_delay(d, design_from(model, base, d, terms=terms)[0])
                edge = est.edge_message(label)
                if edge is None:
                    d = process(rec, ps, delay_s=est.delay_s)
                else:                  # the edge of the range is no estimate: not applied
                    progress.message("warning: " + edge)
                d.meta["processing"]["delay_estimate"] = {**est.to_dict(),
                                                          "applied": edge is None}
            processed[label] = d
    return processed


def estimate_delays(model, base, terms, processed: dict, designs: dict) -> dict:
    """label -> DelayEstimate of the torque delay left in the processed data (after any
    compensation; ~0 when the data are aligned). Reported in metrics.json (``delay``)."""
    out = {}
    for label, d in processed.items():
        W = designs.get(label)
        if isinstance(W, BlockDesign):
            continue                    # long logs: the search needs the design in memory
        if W is None:
            W = design_from(model, base, d, terms=terms)[0]
        try:
            out[label] = estimate_delay(d, W)
        except ValueError:
            continue                    # too short a recording for the search: not reported
    return out


def fit_models(scn: Scenario, model, base, processed: dict, timings: dict | None = None) -> Fits:
    """The joint models the scenario asks for, fitted on the excitation data. With
    ``improved_friction_term: auto`` the reducer-friction term is chosen by the stage-2 residual
    on the identification data only."""
    ident = scn.identification
    terms = tuple(ident.friction_terms)
    d_exc = processed["excitation"]
    # the models' own design (parallel-filtered Coulomb column), computed once per trajectory
    eps = coulomb_eps(scn)
    # long logs: the simplified model alone works on designs built in row blocks
    blocks = ident.joint_model == "simplified"
    W = {label: design_from(model, base, d, terms=terms, coulomb_eps=eps, blocks=blocks)[0]
         for label, d in processed.items()}
    sm = im = None
    with progress.step("identification", timings):
        if ident.joint_model in ("simplified", "both"):
            if d_exc.tau_m is None:
                raise ValueError("the simplified model needs the motor torque (tau_m or currents) "
                                 "in the excitation recording")
            if getattr(ident, "friction", "terms") == "auto":
                rigid = compute_base_parameters(model, terms=(), seed=0)
                sm = SelectedModel(model, rigid, folds=ident.friction_folds).fit(d_exc)
            else:
                sm = SimplifiedModel(model, base, ident.estimator, terms=terms,
                                     coulomb_eps=eps).fit(d_exc, W=W["excitation"])
        if ident.joint_model in ("improved", "both"):
            if d_exc.tau_j is None or d_exc.tau_m is None:
                raise ValueError("the improved model needs joint torques (tau_j) and motor torques "
                                 "(tau_m or currents) in the excitation recording")
            ft = ident.improved_friction_term
            im = ImprovedModel(model, base, ident.estimator,
                               friction_term="linear" if ft == "auto" else ft,
                               terms=terms, coulomb_eps=eps).fit(d_exc, W=W["excitation"])
            if ft == "auto":
                best = im.compare_friction_terms_["better"] or "linear"
                if best != "linear":
                    im = ImprovedModel(model, base, ident.estimator, friction_term=best,
                                       terms=terms, coulomb_eps=eps).fit(d_exc, W=W["excitation"])
    return Fits(simplified=sm, improved=im, designs=W,
                improved_requested=ident.improved_friction_term if im is not None else None)


def consistent_estimator(scn: Scenario) -> str:
    """The estimator of the physically consistent fit: the scenario's, except ``iv`` (the SDP
    has no instruments: it weights like wls)."""
    est = scn.identification.estimator
    return "wls" if est == "iv" else est


def iv_scenario(scn: Scenario, model, base, recs: dict, processed: dict) -> Scenario:
    """``identification.estimator: iv``: the scenario whose estimator is an
    :class:`identify.estimation.iv.IV` bound to the instruments of the excitation data -- the
    same design evaluated on the COMMANDED trajectory processed with the same settings
    (``processing.velocity: command``), a noise-free reference uncorrelated with the encoder and
    torque noise; used by the simplified fit and the improved model's stage 1 (``friction:
    terms``). Any other estimator: `scn` unchanged. ValueError when the excitation recording
    has no commanded trajectory or the reference is processed onto other samples (held data,
    resampling)."""
    import dataclasses
    from identify.estimation.iv import IV
    if scn.identification.estimator != "iv":
        return scn
    rec, d = recs["excitation"], processed["excitation"]
    if rec.q_cmd is None:
        raise ValueError("identification.estimator: iv needs the commanded trajectory (q_cmd) "
                         "of the excitation recording for its instruments; it has none")
    ps = dataclasses.replace(ProcessingSettings.from_dict(scn.processing), velocity="command")
    d_ref = process(rec, ps, delay_s=getattr(d, "delay_s", None))
    if d_ref.t.shape != d.t.shape or not np.allclose(d_ref.t, d.t):
        raise ValueError(f"identification.estimator: iv: the commanded trajectory is processed "
                         f"onto {d_ref.t.size} samples, the excitation data onto {d.t.size} "
                         f"(held data or resampling); use wls")
    terms = tuple(scn.identification.friction_terms)
    Z = design_from(model, base, d_ref, terms=terms, coulomb_eps=coulomb_eps(scn))[0]
    return dataclasses.replace(scn, identification=dataclasses.replace(
        scn.identification, estimator=IV(instruments=Z)))


def build_truth(scn: Scenario, model, base, recs: dict, warnings: list) -> TruthComparison:
    """The twin's truth for these recordings and the true base parameters (stage 1), with the
    reasons a truth does not apply appended to `warnings`."""
    terms = tuple(scn.identification.friction_terms)
    cmp = TruthComparison(expected=scn.backend == "twin")
    try:
        truth = true_link_parameters(scn, model, twin_settings(scn, recs),
                                     drive_truth=recorded_drive_truth(recs))
    except ValueError as exc:
        warnings.append(f"no parameter truth: {exc}")
        return cmp
    if truth is None:
        return cmp
    truth.settings_source = "recording" if recorded_settings(recs) else "scenario"
    cmp.truth = truth
    for stage, what in (("stage1", "stage-1 parameter"), ("stage2", "stage-2 coefficient")):
        if not truth.applicable[stage]:
            warnings.append(f"{what} truth not applicable: "
                            + "; ".join(truth.not_applicable[stage]))
    if truth.applicable["stage1"]:
        try:
            cmp.base = true_base_parameters(model, base, link_viscous=truth.viscous,
                                            link_coulomb=truth.coulomb, terms=terms,
                                            inertial=truth.inertial)
            cmp.base_note = truth.note
        except ValueError as exc:
            warnings.append(f"no parameter truth: {exc}")
    else:       # every reason is the link friction's law: the inertia still has its truth
        cmp.base = inertial_base_truth(model, base, truth.inertial, terms)
        cmp.base_note = (truth.note + "; base parameters of the inertia only (the link friction "
                         "has no constant-parameter truth)")
    return cmp


def noise_floors(recs: dict, processed: dict) -> dict:
    """trajectory -> {"tau_m", "tau_j"} -> :class:`NoiseFloor` of the raw signals RMS figures are
    computed against: on the twin the RMS of the noise it injected
    (``Recording.injected_noise_rms``), when the processed samples are the recording's own samples
    (no resampling or period averaging, which change the noise); otherwise the estimate of the
    processing (``Processed.noise_floor``)."""
    out = {}
    for label, d in processed.items():
        rec = recs.get(label)
        injected = getattr(rec, "injected_noise_rms", None) or {}
        steps = " ".join(d.meta.get("processing", {}).get("steps", []))
        same = rec is not None and "resampled" not in steps and "averaged" not in steps
        floors = {}
        for ch in ("tau_m", "tau_j"):
            if getattr(d, ch, None) is None:
                continue
            if same and injected.get(ch) is not None:
                pj = np.asarray(injected[ch], float)
                floors[ch] = NoiseFloor(pj, float(np.sqrt(np.mean(pj ** 2))), "twin: injected")
            elif ch in (getattr(d, "noise_floor", None) or {}):
                pj = np.asarray(d.noise_floor[ch], float)
                floors[ch] = NoiseFloor(pj, float(np.sqrt(np.mean(pj ** 2))),
                                        "estimate: local cubic fit residual")
        out[label] = floors
    return out


def _outside_reversals(d, preds: dict, raw_m, stage1) -> dict:
    """model -> RmsFigure against the raw signal over the samples outside velocity reversals
    (``Processed.fit_mask``), per joint over that joint's samples; {} without a mask."""
    mask = getattr(d, "fit_mask", None)
    if mask is None:
        return {}
    mask = np.asarray(mask, bool)
    cnt = np.maximum(mask.sum(axis=0), 1)

    def fig(err):
        e2 = np.asarray(err, float) ** 2 * mask
        return RmsFigure(np.sqrt(e2.sum(axis=0) / cnt), float(np.sqrt(e2.sum() / cnt.sum())))
    out = {m: fig(p - raw_m) for m, p in preds.items()}
    if stage1:
        out["stage1_tau_j"] = fig(stage1[0] - stage1[1])
    return out


def validate_models(scn: Scenario, fits: Fits, processed: dict, truth: TruthComparison, *,
                    decompose: bool = True, timings: dict | None = None,
                    recs: dict | None = None) -> ModelValidation:
    """Predictions and RMS of every fitted model on every trajectory with a motor torque; the
    improved model's headline route; every reducer-friction variant (closed form); cond of the
    measured designs."""
    sm, im, W = fits.simplified, fits.improved, fits.designs
    route = scn.identification.prediction
    with_tau_m = {k: d for k, d in processed.items() if d.tau_m is not None}
    routes = ("closed_form", "eq24") if sm is not None else ("closed_form",)
    blocks = any(isinstance(w, BlockDesign) for w in W.values())
    if blocks or isinstance(sm, SelectedModel):
        decompose = False            # needs the full regressors in memory / uniform terms
    with progress.step("validation", timings):
        vres = validate(sm, im, with_tau_m, routes=routes, decompose_torque=decompose,
                        # the stored row-block designs are the fixed-term model's, not the
                        # selected model's own columns
                        designs=({k: W[k] for k in with_tau_m}
                                 if blocks and im is None and not isinstance(sm, SelectedModel)
                                 else None),
                        truth_base=truth.base if im is not None else None)
    head = f"improved_{route}" if route in routes else "improved_closed_form"
    preds, rms, rms_f, rms_o, improvement = {}, {}, {}, {}, {}
    pred_r = raw_j = None
    for label in vres.rms:
        P = dict(vres.predictions[label])
        R = {m: RmsFigure(np.asarray(v), float(vres.rms_overall[label][m]))
             for m, v in vres.rms[label].items()}
        RF = {m: RmsFigure(np.asarray(v), float(vres.rms_filtered_overall[label][m]))
              for m, v in vres.rms_filtered[label].items()}
        if im is not None:
            P["improved"], R["improved"], RF["improved"] = P[head], R[head], RF[head]
            d = processed[label]
            if d.tau_j is not None:
                pred_r = im.predict_tau_r(d, W[label])
                raw_j = (getattr(d, "raw", None) or {}).get("tau_j")
                raw_j = d.tau_j if raw_j is None else raw_j
                R["stage1_tau_j"] = RmsFigure.of(pred_r - raw_j)
                RF["stage1_tau_j"] = RmsFigure.of(pred_r - d.tau_j)
        preds[label], rms[label], rms_f[label] = P, R, RF
        rms_o[label] = _outside_reversals(processed[label], P, vres.measured[label],
                                          R.get("stage1_tau_j") and (pred_r, raw_j))
        if head in vres.change.get(label, {}):
            improvement[label] = float(vres.change[label][head])
    variants = {}
    if im is not None:
        for v in im.stage2_all_:
            variants[v] = {label: RmsFigure.of(
                im.predict(processed[label], route="closed_form", W=W[label], variant=v)
                - vres.measured[label]).overall for label in vres.rms}
    cond = {label: design_cond(w) for label, w in W.items()}
    return ModelValidation(result=vres, headline_route=head, predictions=preds, rms=rms,
                           improvement=improvement, variants_rms=variants, cond_measured=cond,
                           rms_filtered=rms_f, rms_outside_reversals=rms_o,
                           noise_floor=noise_floors(recs or {}, with_tau_m))


def parameter_errors(fits: Fits, validation: ModelValidation, truth: TruthComparison,
                     warnings: list) -> None:
    """Fill ``truth.errors``: stage-1 base parameters (from the validation) and stage-2 drive
    coefficients against the twin's drive truth. Coefficients without a std (xi not identified,
    noise-dominated column) are skipped with the reason."""
    im = fits.improved
    if im is None:
        return
    pe = validation.result.parameter_errors.get("stage1")
    if pe is not None:
        truth.errors["improved_stage1"] = pe
    if stage2_truth(im.stage2_, truth.truth) is not None:
        try:
            truth.errors["improved_stage2"] = stage2_errors(
                im.stage2_, {nm: truth.truth.stage2[nm] for nm in
                             ("xi_opp", "xi_lin", "f_mc", "f_mv", "J_m", "J_m/K")
                             if nm in truth.truth.stage2})
        except ValueError as exc:
            warnings.append(f"stage-2 parameter errors: {exc}")


def fit_export(scn: Scenario, model, base, fits: Fits, processed: dict, prior: Prior,
               timings: dict | None = None, signal: str = "tau_m") -> Export | None:
    """Full parameters for the URDF and the joint terms for ``identified_joints.yaml``: the
    physically consistent fit (when asked for), else the parameters closest to the prior with the
    identified base parameters; and what that exported model predicts on every trajectory
    (RNEA of the exported inertials + the joint terms, identify.model.joint_sidecar). None
    without a model."""
    terms = tuple(scn.identification.friction_terms)
    eps = coulomb_eps(scn)
    sm, im = fits.simplified, fits.improved
    src = im if im is not None else sm
    if src is None:
        return None
    if isinstance(src, SelectedModel):
        return _export_selected(scn, model, src, processed, prior, timings, signal)
    d_exc = processed["excitation"]
    y_label = "tau_j" if im is not None else "tau_m"
    consistent, full, how = None, None, ""
    if scn.identification.physical_consistency:
        with progress.step("physically consistent fit", timings):
            p0 = None if prior.inertial is None else \
                np.concatenate([prior.inertial, np.zeros(len(terms) * model.n)])
            y = getattr(d_exc, y_label)

            def blocks():           # the full regressor in row blocks (long logs fit in memory)
                for sl in row_blocks(y.shape[0]):
                    yield full_regressor(model, d_exc.q[sl], d_exc.qd[sl], d_exc.qdd[sl], terms,
                                         coulomb_eps=eps), y[sl]
            try:
                consistent = ConsistentFit(model, base, terms=terms, prior=p0,
                                           estimator=consistent_estimator(scn)
                                           ).fit_blocks(blocks)
            except (RuntimeError, ValueError) as exc:   # a finished fit is never lost to it
                progress.message(f"warning: physically consistent fit failed ({exc}); the "
                                 f"export uses the identified base parameters")
                consistent = None
        if consistent is not None:
            full = np.asarray(consistent.params_, float)
            how = f"physically consistent fit ({consistent_estimator(scn)}), prior {prior.kind}"
    if full is None:
        p0 = np.concatenate([np.zeros(10 * model.n) if prior.inertial is None else prior.inertial,
                             np.zeros(len(terms) * model.n)])
        p_base = np.asarray(src.params_, float)
        if p_base.size == base.n_base:
            full = full_from_base(base.E, p_base, p0)
            how = (f"closest to the {prior.kind} prior's parameters with the identified "
                   f"base parameters")
    fitted = "tau_j" if (src is im or signal == "tau_j") else "tau_m"
    which = ("improved model stage 1 (torque sensor, link side)" if src is im
             else f"rigid body + friction on the {SIGNAL_NAMES[fitted]}")
    if full is None:
        return Export(None, None, None, f"{which}; no full parameters", consistent, y_label, prior,
                      reason="no full parameters (the fit has no base parameters)")
    n = model.n
    fr = {t: full[10 * n + k * n: 10 * n + (k + 1) * n] for k, t in enumerate(terms)}
    ex = Export(inertial=full[:10 * n], viscous=fr.get("viscous"), coulomb=fr.get("coulomb"),
                source=f"{which}; {how}", consistent=consistent, consistent_signal=y_label,
                prior=prior, signal=SIGNAL_NAMES[fitted])
    export_prediction(scn, model, ex, fr, processed, y_label)
    return ex


def export_prediction(scn: Scenario, model, ex: Export, fr: dict, processed: dict,
                      y_label: str) -> None:
    """Fill ``ex.joint_terms``, ``physical`` / ``reason`` and the exported model's predictions
    and RMS: tau = RNEA(q, qd, qdd; exported inertials) + armature*qdd + viscous*qd +
    coulomb*shape(qd) + offset on the processed samples of every trajectory."""
    from identify.model.joint_sidecar import JointTerms
    from identify.model.urdf_export import check_physical
    ident = scn.identification
    ex.joint_terms = JointTerms(list(model.joint_names), fr.get("viscous"), fr.get("coulomb"),
                                fr.get("offset"), fr.get("armature"),
                                coulomb_shape=ident.coulomb_shape,
                                coulomb_velocity_scale=float(ident.coulomb_velocity_scale),
                                signal=ex.signal)
    problems = check_physical(ex.inertial, model.link_names)
    ex.physical = not problems
    if problems:
        ex.reason = ("the identified inertial parameters are not physical (" + "; ".join(problems)
                     + "); set identification.physical_consistency: true")
    _export_rms(model, ex, processed, y_label)


def _export_rms(model, ex: Export, processed: dict, y_label: str) -> None:
    """The exported model's predictions and RMS on every trajectory: RNEA of the exported
    inertials + the sidecar's joint terms (identify.model.joint_sidecar.JointTerms.torque, dt
    the samples' spacing) on the processed samples."""
    for label, d in processed.items():
        y = getattr(d, y_label)
        if y is None:
            continue
        rigid = np.empty(y.shape)
        for sl in row_blocks(y.shape[0]):           # RNEA in row blocks (long logs)
            rigid[sl] = model.inverse_dynamics(d.q[sl], d.qd[sl], d.qdd[sl], ex.inertial)
        t = np.asarray(d.t, float)
        dt = float(np.median(np.diff(t))) if t.size > 1 else 0.0
        pred = rigid + ex.joint_terms.torque(d.qd, d.qdd, dt=dt, rigid=rigid)
        ex.predictions[label] = pred
        raw = (getattr(d, "raw", None) or {}).get(y_label)    # against the raw measurement
        ex.rms[label] = RmsFigure.of(pred - (y if raw is None else raw))


def _export_selected(scn: Scenario, model, sm: SelectedModel, processed: dict, prior: Prior,
                     timings: dict | None, signal: str) -> Export:
    """The export of ``friction: auto``: the chosen terms with their fitted coefficients in the
    sidecar (``terms`` per joint), the inertials from the physically consistent fit of the
    torque minus those terms (when asked for) or the parameters closest to the prior with the
    identified base parameters; predictions as for every export (:func:`_export_rms`)."""
    from identify.model.joint_sidecar import JointTerms
    from identify.model.urdf_export import check_physical
    n = model.n
    d_exc = processed["excitation"]
    coef = sm.selection_.coefficients()
    p0 = np.zeros(10 * n) if prior.inertial is None else np.asarray(prior.inertial, float)
    consistent, how = None, ""
    if scn.identification.physical_consistency:
        with progress.step("physically consistent fit", timings):
            y = d_exc.tau_m - sm.friction_torque(d_exc)

            def blocks():
                for sl in row_blocks(y.shape[0]):
                    yield full_regressor(model, d_exc.q[sl], d_exc.qd[sl], d_exc.qdd[sl], ()), y[sl]
            try:
                consistent = ConsistentFit(model, sm.base, terms=(),
                                           prior=None if prior.inertial is None else p0,
                                           estimator=consistent_estimator(scn)
                                           ).fit_blocks(blocks)
                how = (f"physically consistent fit ({consistent_estimator(scn)}) of the "
                       f"torque minus the chosen terms, prior {prior.kind}")
            except (RuntimeError, ValueError) as exc:
                progress.message(f"warning: physically consistent fit failed ({exc}); the "
                                 f"export uses the identified base parameters")
    if consistent is not None:
        full = np.asarray(consistent.params_, float)[:10 * n]
    else:
        full = full_from_base(sm.base.E, sm.params_[:sm.base.n_base], p0)
        how = f"closest to the {prior.kind} prior's parameters with the identified base parameters"

    def pick(kinds):
        return np.array([sum(float(np.mean(c)) for t, c in row if t.kind in kinds)
                         for row in coef])
    ex = Export(inertial=full, viscous=pick(("viscous",)),
                coulomb=pick(("coulomb", "coulomb_asym", "dahl")),
                source=f"rigid body + per-joint terms chosen by cross-validation on the "
                       f"{SIGNAL_NAMES[signal]}; {how}",
                consistent=consistent, consistent_signal="tau_m", prior=prior,
                signal=SIGNAL_NAMES[signal])
    zeros = np.zeros(n)
    ex.joint_terms = JointTerms(list(model.joint_names), zeros, zeros, zeros, zeros,
                                signal=ex.signal, library=coef,
                                notes=["friction: auto -- every term of a joint is in its "
                                       "'terms' list (docs/friction-terms.md)"])
    problems = check_physical(ex.inertial, model.link_names)
    ex.physical = not problems
    if problems:
        ex.reason = ("the identified inertial parameters are not physical (" + "; ".join(problems)
                     + "); set identification.physical_consistency: true")
    _export_rms(model, ex, processed, "tau_m")
    return ex


def nominal_export(model, processed: dict, y_label: str, signal: str) -> Export:
    """The nominal URDF as an export: its own inertials, zero joint terms (no fit at all), with
    its predictions and RMS against the raw `y_label` signal on every trajectory."""
    from identify.model.joint_sidecar import JointTerms
    nom = Export(inertial=np.asarray(model.inertial_parameters(), float), viscous=None,
                 coulomb=None, source="nominal URDF (its inertials, zero joint terms)",
                 signal=signal, physical=True)
    nom.joint_terms = JointTerms(list(model.joint_names), None, None, None, None, signal=signal)
    _export_rms(model, nom, processed, y_label)
    return nom


def _derived_from(fits: Fits, ex: Export) -> str:
    if isinstance(fits.simplified, SelectedModel):
        return "selected terms"
    return "improved stage 1" if ex.consistent_signal == "tau_j" and fits.improved is not None \
        else "simplified"


def headline_of(scn: Scenario, model, base, fits: Fits, validation: ModelValidation,
                processed: dict, ex: Export | None, timings: dict | None = None,
                warnings: list | None = None) -> tuple[Export | None, Headline | None]:
    """The headline (:class:`Headline`): the export's own RMS against the raw signal, beside the
    nominal URDF's and the fitted models'. When the export is worse than the nominal URDF on
    the validation trajectory, a WARNING (in `warnings` and on the console) and the export is
    replaced by the physically consistent fit regularised toward the nominal URDF, its prior
    weight chosen by cross-validation on the identification data only
    (:func:`identify.app.prior.regularised_toward`). Returns (the export, the headline)."""
    if ex is None or not ex.rms or ex.inertial is None:
        return ex, None
    y_label = ex.consistent_signal or "tau_m"
    nom = nominal_export(model, processed, y_label, ex.signal)
    others = [(m, ex.signal if (m == "stage1_tau_j") == (y_label == "tau_j") else
               SIGNAL_NAMES["tau_j" if m == "stage1_tau_j" else "tau_m"],
               {t: by[m] for t, by in validation.rms.items() if m in by})
              for m in ("simplified", "improved", "stage1_tau_j")
              if any(m in by for by in validation.rms.values())]
    h = Headline(_derived_from(fits, ex), ex.signal, ex.rms, nom.rms, others=others)
    if "validation" not in ex.rms:
        return ex, h
    e_val, n_val = ex.rms["validation"].overall, nom.rms["validation"].overall
    h.worse_than_nominal = bool(e_val > n_val)
    if not h.worse_than_nominal:
        return ex, h
    text = (f"WARNING: the fitted model is worse out of sample than the nominal URDF with no "
            f"fit: validation RMS {e_val:.4g} vs {n_val:.4g} N*m of {ex.signal}; the export is "
            f"regularised toward the nominal URDF (prior weight chosen by cross-validation on "
            f"the identification data)")
    progress.warn(text)
    if warnings is not None:
        warnings.append(text)
    with progress.step("regularisation toward the nominal URDF", timings):
        try:
            reg_ex = _regularised_export(scn, model, base, fits, processed, ex, nom)
        except (RuntimeError, ValueError) as exc:
            progress.warn(f"regularisation toward the nominal URDF failed ({exc}); the "
                          f"unregularised export is kept")
            return ex, h
    h.unregularised_rms, h.rms = ex.rms, reg_ex.rms
    h.regularised = reg_ex.regularised
    if reg_ex.regularised.weight is None:
        h.derived_from = "nominal URDF"
    return reg_ex, h


def _regularised_export(scn: Scenario, model, base, fits: Fits, processed: dict, ex: Export,
                        nom: Export) -> Export:
    """The export refitted toward the nominal URDF (:func:`headline_of`); its
    ``regularised`` attribute holds the :class:`identify.app.prior.Regularised`."""
    import dataclasses
    from .prior import regularised_toward
    n, d = model.n, processed["excitation"]
    y_label = ex.consistent_signal or "tau_m"
    y = getattr(d, y_label)
    sm = fits.simplified
    selected = isinstance(sm, SelectedModel)
    terms = () if selected else tuple(scn.identification.friction_terms)
    W_full = full_regressor(model, d.q, d.qd, d.qdd, terms, coulomb_eps=coulomb_eps(scn))
    nominal = np.concatenate([nom.inertial, np.zeros(len(terms) * n)])
    reg = regularised_toward(model, sm.base if selected else base, terms, W_full, y, nominal,
                             fixed=sm.friction_torque(d) if selected else None,
                             estimator=consistent_estimator(scn))
    how = ("; regularised toward the nominal URDF: " + ("the nominal URDF itself (no fit) won"
           if reg.weight is None else f"prior weight {reg.weight:g}")
           + " by cross-validation on the identification data")
    if selected and reg.weight is None:
        out = dataclasses.replace(nom, source=ex.source + how, signal=ex.signal)
    elif selected:
        out = dataclasses.replace(ex, inertial=reg.params[:10 * n], source=ex.source + how,
                                  predictions={}, rms={})
        _export_rms(model, out, processed, y_label)
    else:
        fr = {t: reg.params[10 * n + k * n: 10 * n + (k + 1) * n] for k, t in enumerate(terms)}
        out = dataclasses.replace(ex, inertial=reg.params[:10 * n], viscous=fr.get("viscous"),
                                  coulomb=fr.get("coulomb"), source=ex.source + how,
                                  predictions={}, rms={})
        export_prediction(scn, model, out, fr, processed, y_label)
    out.consistent_signal, out.regularised = y_label, reg
    return out


def stack_held(scn: Scenario, model, base, processed: dict, signal: str, held: list,
               timings: dict | None = None) -> list:
    """Put the data already held (identify.logs.held recordings) under the excitation rows:
    each held recording processed on its own with the scenario's settings (as the new one),
    then ``processed["excitation"]`` = the stack held..., new
    (:func:`identify.estimation.segments.concatenate`: no filter across a seam). The fit of
    every model is then the combined estimate the excitation was designed for. Returns the
    [HeldSource] used. Raises InputError naming the entry without a signal the fit uses."""
    from identify.common.errors import InputError
    from identify.estimation.segments import concatenate
    from identify.logs.held import missing_signals

    from .trajectories import held_sources
    jm = scn.identification.joint_model
    need = ["tau_j"] if signal == "tau_j" else \
        (["tau_m"] if jm == "simplified" else ["tau_j", "tau_m"] if jm in ("improved", "both")
         else [])
    missing_signals(held, need)
    hp = process_recordings(scn, model, {h.key: h.recording for h in held}, timings, base=base,
                            title="processing the held data")
    alias_signal(hp, signal)
    parts = []
    for h in held:
        d = hp[h.key]
        d.meta = {**d.meta, "label": h.key}
        parts.append(d)
    try:
        processed["excitation"] = concatenate(parts + [processed["excitation"]])
    except ValueError as exc:
        raise InputError(f"trajectories.excitation.held: {exc}") from None
    return held_sources(held, parts)


def identify_recordings(scn: Scenario, model, recs: dict, *, base=None, want_truth: bool = True,
                        decompose: bool = True, timings: dict | None = None,
                        from_logs: bool = False, held: list | None = None) -> Identification:
    """The identification stages on recordings {'excitation', ['validation']}, in order. The
    ``auto`` keys of ``identification`` are resolved first for the recordings' signals
    (`from_logs`: defaults for real arms' logs, else the twin's). Data already held
    (``trajectories.excitation.held``, read here unless `held` gives them: identify.logs.held
    recordings) are fitted together with the excitation recording (:func:`stack_held`)."""
    scn, signal = resolve_signals(scn, recs, from_logs)
    terms = tuple(scn.identification.friction_terms)
    if base is None or tuple(getattr(base, "terms", terms)) != terms:
        base = compute_base_parameters(model, terms=terms, seed=0)
    warnings: list = []
    scn, cutoff = resolve_cutoff(scn, model, recs, base, signal, timings, from_logs=from_logs)
    processed = process_recordings(scn, model, recs, timings, base=base)
    alias_signal(processed, signal)
    if held is None and scn.trajectories.excitation.held:
        from identify.logs.held import load_held
        held = load_held(scn, model.joint_names, model, warnings)
    used = stack_held(scn, model, base, processed, signal, held, timings) if held else []
    fits = fit_models(iv_scenario(scn, model, base, recs, processed), model, base, processed,
                      timings)
    delays = estimate_delays(model, base, terms, processed, fits.designs)
    truth = build_truth(scn, model, base, recs, warnings) if want_truth else TruthComparison()
    validation = validate_models(scn, fits, processed, truth, decompose=decompose, timings=timings,
                                 recs=recs)
    parameter_errors(fits, validation, truth, warnings)
    prior = prior_parameters(scn, model, recs)
    export = fit_export(scn, model, base, fits, processed, prior, timings, signal=signal)
    export, headline = headline_of(scn, model, base, fits, validation, processed, export, timings,
                                   warnings)
    if isinstance(fits.simplified, SelectedModel):      # the fitted model's own columns
        base, terms = fits.simplified.base, ()
    return Identification(model=model, base=base, terms=terms, processed=processed, fits=fits,
                          truth=truth, validation=validation, export=export, prior=prior,
                          warnings=warnings, delays=delays, signal=signal,
                          spec=scn.identification, from_logs=from_logs, held=used,
                          headline=headline, cutoff=cutoff)
