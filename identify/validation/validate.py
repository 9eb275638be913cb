"""Validation of identified joint models: motor-torque RMS, relative improvement, torque
decomposition and (on twin data) base-parameter errors against the ground truth.

    from identify.validation.validate import validate
    res = validate(sm, im, {"excitation": d_exc, "validation": d_val})
    print(res.table())

RMS convention (paper eq. 22 as reconstructed): per joint j, sqrt(mean_k e_kj^2) with
e = predicted - measured motor torque [N*m]; overall, sqrt(mean over all samples and joints).
"Measured" is the RAW measurement at the processed samples (``Processed.raw``: neither smoothed
nor low-passed), the predictions are made from the processed (filtered) states: comparing with
the filtered torque instead would reward filtering harder (a lower cut-off removes the noise
from the target and "improves" the figure while the error against the sensor grows). The
filtered-target figure is kept as ``rms_filtered`` (clearly labelled) for comparison.
The paper's "improved by 59.58 %" is the relative change of the overall RMS,
100 (rms_new - rms_ref) / rms_ref = -59.58 % (1.6859 -> 0.6815 N*m); :func:`relative_change`.
"""
from __future__ import annotations
from dataclasses import dataclass, field
import numpy as np
from identify.estimation.improved import ImprovedModel, same_design
from identify.estimation.simplified import SimplifiedModel
from identify.estimation.design import column_kinds, states
from .parameter_errors import parameter_errors, stage2_errors


COMPONENTS = ("gravity", "inertial", "coriolis", "friction")


MODEL_LABELS = {"simplified": "simplified", "improved_eq24": "improved, eq. (24)",
                "improved_closed_form": "improved, closed form"}


# --------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------
def rms(pred: np.ndarray, meas: np.ndarray) -> tuple[np.ndarray, float]:
    """RMS of pred - meas: per joint (n,) and overall (all samples and joints) [unit of input].

    Args: pred, meas: (N, n) arrays of equal shape."""
    pred = np.asarray(pred, dtype=float)
    meas = np.asarray(meas, dtype=float)
    if pred.shape != meas.shape:
        raise ValueError(f"prediction has shape {pred.shape}, measurement {meas.shape}")
    e2 = (pred - meas) ** 2
    return np.sqrt(e2.mean(axis=0)), float(np.sqrt(e2.mean()))


def relative_change(rms_ref: float, rms_new: float) -> float:
    """Relative change of an RMS in percent, 100 (new - ref) / ref (negative = better).

    The paper: relative_change(1.6859, 0.6815) = -59.58 %, relative_change(1.7045, 1.5762)
    = -7.53 % (it prints 7.52 %)."""
    if not rms_ref > 0:
        raise ValueError(f"reference RMS must be > 0, got {rms_ref!r}")
    return 100.0 * (rms_new - rms_ref) / rms_ref


# --------------------------------------------------------------------------------------------
# torque decomposition
# --------------------------------------------------------------------------------------------
def split_parameters(model, base, terms, params) -> tuple[np.ndarray, np.ndarray]:
    """Scatter design_matrix parameters (p,) onto the full columns: (10n,) rigid-body vector
    (zero at dependent columns) and (len(terms)*n,) friction vector, so that
    design_matrix(...) @ params == Y @ rigid + joint_columns(...) @ friction."""
    n = model.n
    params = np.asarray(params, dtype=float)
    kinds = column_kinds(model, base, terms)
    idx = np.asarray(base.independent)
    nf = len(tuple(terms)) * n
    if len(kinds) == len(idx):                       # base includes the friction terms
        full = np.zeros(10 * n + nf)
        full[idx] = params
        return full[:10 * n], full[10 * n:]
    rigid = np.zeros(10 * n)
    rigid[idx] = params[:len(idx)]
    return rigid, params[len(idx):]


def rigid_regressors(model, q, qd, qdd) -> dict[str, np.ndarray]:
    """The two extra regressor evaluations the decomposition needs, (N, n, 10n) each:
    "g" = Y(q, 0, 0) and "gi" = Y(q, 0, qdd). Share them between models on one trajectory."""
    zero = np.zeros_like(qd)
    return {"g": model.regressor(q, zero, zero), "gi": model.regressor(q, zero, qdd)}


def decompose(model, fitted, processed, regs: dict | None = None,
              W: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Decompose a fitted model's predicted motor torque into parts, each (N, n) [N*m].

    SimplifiedModel: gravity Y(q,0,0)p, inertial Y(q,0,qdd)p - gravity, coriolis (centrifugal
    and Coriolis) = rigid total - Y(q,0,qdd)p, friction (viscous + Coulomb columns), plus
    "offset" / "armature" if those joint terms are fitted (sum = its prediction).
    ImprovedModel (closed-form route, stage-1 tau_r): gravity, inertial, coriolis,
    link_friction (= stage-1 parts of T_rp), reducer_friction ((h - 1) T_rp), motor_friction
    (f_mc sign + f_mv qd), rotor_inertia (J'_m qdd), compliance (J'_m/K taudd_r); friction =
    link + reducer + motor friction. gravity + inertial + coriolis + rotor_inertia + compliance
    + friction (+ offset / armature if fitted) = the closed-form prediction.

    Args: regs: :func:`rigid_regressors` of `processed` (shared between models); W: the models'
        design_matrix of `processed` (saves one regressor evaluation).
    """
    d = processed
    from identify.model.friction import joint_columns
    q, qd, qdd = states(d, model.n)
    if regs is None:
        regs = rigid_regressors(model, q, qd, qdd)
    n = model.n
    pr, pf = split_parameters(model, fitted.base, fitted.terms, fitted.params_)
    from identify.estimation.design import coulomb_column
    joint_parts = {}                                   # per joint term: viscous, coulomb, ...
    for k, term in enumerate(fitted.terms):
        col = coulomb_column(d, n, fitted.coulomb_eps) if term == "coulomb" else None
        if col is None:                                # no filter chain: the plain column
            col = joint_columns(qd, qdd, (term,), fitted.coulomb_eps).diagonal(axis1=1, axis2=2)
        joint_parts[term] = col * pf[k * n:(k + 1) * n]
    fric = sum((joint_parts[t] for t in ("viscous", "coulomb") if t in joint_parts),
               np.zeros_like(q))
    extra = sum(joint_parts.values(), np.zeros_like(q))
    total = (model.regressor(q, qd, qdd) @ pr + extra) if W is None else W @ fitted.params_
    grav = regs["g"] @ pr
    gi = regs["gi"] @ pr
    out = {"gravity": grav, "inertial": gi - grav, "coriolis": total - extra - gi,
           "friction": fric}
    for t in ("offset", "armature"):                   # other joint terms, if fitted
        if t in joint_parts:
            out[t] = joint_parts[t]
    if isinstance(fitted, SimplifiedModel):
        return out
    if not isinstance(fitted, ImprovedModel):
        raise TypeError(f"cannot decompose a {type(fitted).__name__}")
    pt = fitted.prediction_terms(d, W=W)
    Tr = pt["Tr"]
    comp = pt["Phi"] * pt["c"][None]                      # (N, n, m)
    out["link_friction"] = out.pop("friction")
    out["reducer_friction"] = Tr / (1.0 - pt["Mxi"]) - Tr
    out["motor_friction"] = comp[..., 0] + comp[..., 1]
    out["rotor_inertia"] = comp[..., 2]
    out["compliance"] = comp[..., 3] if comp.shape[2] > 3 else np.zeros_like(Tr)
    out["friction"] = out["link_friction"] + out["reducer_friction"] + out["motor_friction"]
    return out


# --------------------------------------------------------------------------------------------
# validate
# --------------------------------------------------------------------------------------------
@dataclass
class ValidationResult:
    """Everything :func:`validate` measured (N samples, n joints per trajectory).

    Attributes:
        joint_names: (n,).
        t, measured: trajectory -> (N,) time [s], (N, n) measured motor torque [N*m].
        predictions: trajectory -> model -> (N, n) predicted motor torque [N*m]; models are
            "simplified", "improved_eq24", "improved_closed_form" (those available).
        rms: trajectory -> model -> (n,) per-joint RMS [N*m] against the RAW measured motor
            torque; rms_overall: -> float.
        rms_filtered, rms_filtered_overall: the same against the filtered motor torque (the
            target the fit saw) -- a second, labelled figure.
        measured_filtered: trajectory -> (N, n) filtered motor torque [N*m].
        change: trajectory -> model -> relative change of the overall RMS vs the simplified
            model [%] (negative = better; the paper's -59.58 % / -7.52 %).
        decomposition: trajectory -> model -> component -> (N, n) [N*m] (see :func:`decompose`).
        friction_comparison: the improved model's compare_friction_terms_.
        parameter_errors: "stage1" / "simplified" base parameters and "stage2" drive
            coefficients vs the truth, if given (ParameterErrors each).
    """

    joint_names: list
    t: dict = field(default_factory=dict)
    measured: dict = field(default_factory=dict)
    predictions: dict = field(default_factory=dict)
    rms: dict = field(default_factory=dict)
    rms_overall: dict = field(default_factory=dict)
    rms_filtered: dict = field(default_factory=dict)
    rms_filtered_overall: dict = field(default_factory=dict)
    measured_filtered: dict = field(default_factory=dict)
    change: dict = field(default_factory=dict)
    decomposition: dict = field(default_factory=dict)
    friction_comparison: dict | None = None
    parameter_errors: dict = field(default_factory=dict)

    def table(self) -> str:
        names = list(self.joint_names)
        head = (f"{'trajectory':<12} {'model':<24}" + "".join(f"{nm:>9}" for nm in names)
                + f"{'overall':>9} {'vs simpl.':>10}")
        rows = ["motor-torque RMS [N*m] (predicted - raw measured)", head, "-" * len(head)]
        for traj, by_model in self.rms.items():
            for mname, r in by_model.items():
                ch = self.change.get(traj, {}).get(mname)
                rows.append(f"{traj:<12} {MODEL_LABELS.get(mname, mname):<24}"
                            + "".join(f"{v:>9.4f}" for v in r)
                            + f"{self.rms_overall[traj][mname]:>9.4f}"
                            + (f" {ch:>+9.2f}%" if ch is not None else ""))
        if self.decomposition:
            rows.append("")
            rows.append("RMS of the predicted torque's parts [N*m]")
            for traj, by_model in self.decomposition.items():
                for mname, parts in by_model.items():
                    for comp, arr in parts.items():
                        rows.append(f"{traj:<12} {mname:<20} {comp:<17}"
                                    + "".join(f"{v:>9.3f}" for v in np.sqrt(np.mean(arr ** 2, 0))))
        if self.friction_comparison:
            fc = self.friction_comparison
            rows.append("")
            rows.append("reducer friction variants, stage-2 residual RMS of tau'_m [N*m]: "
                        + ", ".join(f"{k} {v:.4f}" for k, v in fc["rms"].items())
                        + f"  -> better: {fc['better']}")
        for what, pe in self.parameter_errors.items():
            rows.append("")
            kind = "drive coefficients" if what == "stage2" else "base parameters"
            rows.append(f"{what}: {pe.n_within} of {pe.n} {kind} within +-3 sigma of the "
                        f"truth; median |rel. error| {np.nanmedian(np.abs(pe.rel_error)):.3g} %"
                        + (f"; {pe.skipped_summary()}" if pe.skipped else ""))
        return "\n".join(rows)

    def to_dict(self) -> dict:
        """JSON-serialisable summary (no time series)."""
        out = {"joint_names": list(self.joint_names),
               "rms": {t: {m: [float(v) for v in r] for m, r in d.items()}
                       for t, d in self.rms.items()},
               "rms_overall": {t: {m: float(v) for m, v in d.items()}
                               for t, d in self.rms_overall.items()},
               "rms_filtered_target_overall": {t: {m: float(v) for m, v in d.items()}
                                               for t, d in self.rms_filtered_overall.items()},
               "change_vs_simplified_pct": {t: {m: float(v) for m, v in d.items()}
                                            for t, d in self.change.items()},
               "decomposition_rms": {t: {m: {c: [float(v) for v in np.sqrt(np.mean(a ** 2, 0))]
                                             for c, a in parts.items()}
                                         for m, parts in d.items()}
                                     for t, d in self.decomposition.items()}}
        if self.friction_comparison:
            fc = self.friction_comparison
            out["friction_comparison"] = {
                "rms": {k: float(v) for k, v in fc["rms"].items()},
                "rms_per_joint": {k: [float(x) for x in v]
                                  for k, v in fc.get("rms_per_joint", {}).items()},
                "better": fc["better"]}
        out["parameter_errors"] = {k: v.to_dict() for k, v in self.parameter_errors.items()}
        return out


def validate(simplified: SimplifiedModel | None, improved: ImprovedModel | None,
             trajectories: dict, *, routes=("eq24", "closed_form"), decompose_torque: bool = True,
             truth_base: np.ndarray | None = None, truth_drive: dict | None = None,
             designs: dict | None = None) -> ValidationResult:
    """Predict motor torque with the fitted models on each trajectory and compare with the
    measurement.

    Args:
        simplified, improved: fitted models (either may be None; eq. (24) needs both).
        trajectories: name -> processed data with ``tau_m`` (e.g. {"excitation": d,
            "validation": d_val}); the first is normally the identification trajectory.
        routes: improved-model prediction routes to evaluate.
        decompose_torque: also decompose each prediction (2 extra regressor evaluations per
            trajectory).
        truth_base: true base parameters in the stage-1 column order (twin data only; see
            :func:`true_base_parameters`) -> ``parameter_errors["stage1"]`` (and ["simplified"],
            whose motor-torque parameters absorb the drive and so are expected to be off).
        truth_drive: known drive values for :func:`stage2_errors` (twin data only) ->
            ``parameter_errors["stage2"]``.
        designs: optional trajectory -> precomputed design_matrix (N, n, p) of the models
            (saves one regressor evaluation per trajectory when the caller has it).
    """
    if simplified is None and improved is None:
        raise ValueError("validate needs at least one fitted model")
    if not isinstance(trajectories, dict) or not trajectories:
        raise ValueError("trajectories must be a non-empty dict name -> processed data")
    for r in routes:
        if r not in ("eq24", "closed_form"):
            raise ValueError(f"unknown route {r!r}; choose from ('eq24', 'closed_form')")
    if "eq24" in routes and improved is not None and simplified is None:
        raise ValueError("route 'eq24' needs the simplified model (pass it, or routes="
                         "('closed_form',))")
    ref = simplified or improved
    model = ref.model
    res = ValidationResult(joint_names=list(model.joint_names))
    share = simplified is not None and improved is not None and same_design(simplified, improved)
    for name, d in trajectories.items():
        q, qd, qdd = states(d, model.n)
        meas = getattr(d, "tau_m", None)
        if meas is None:
            raise ValueError(f"trajectory {name!r} has no measured motor torque tau_m")
        meas = np.asarray(meas, dtype=float)
        if meas.shape != q.shape:
            raise ValueError(f"trajectory {name!r}: tau_m has shape {meas.shape}, q {q.shape}")
        W_given = (designs or {}).get(name)
        if W_given is not None and not share and simplified is not None and improved is not None:
            raise ValueError("designs= needs both models to use the same design matrix")
        if W_given is not None:
            W_s = W_i = W_given
        else:
            W_s = simplified.design(d) if simplified is not None else None
            W_i = (W_s if share else improved.design(d)) if improved is not None else None
        preds = {}
        if simplified is not None:
            preds["simplified"] = simplified.predict(d, W=W_s)
        if improved is not None:
            for r in routes:
                preds[f"improved_{r}"] = improved.predict(
                    d, route=r, W=W_i, T_pre=preds.get("simplified"))
        raw = (getattr(d, "raw", None) or {}).get("tau_m")
        raw = meas if raw is None else np.asarray(raw, dtype=float)
        if raw.shape != meas.shape:
            raise ValueError(f"trajectory {name!r}: raw tau_m has shape {raw.shape}, the "
                             f"filtered one {meas.shape}")
        res.t[name] = np.asarray(getattr(d, "t", np.arange(q.shape[0])), dtype=float)
        res.measured[name] = raw
        res.measured_filtered[name] = meas
        res.predictions[name] = preds
        res.rms[name], res.rms_overall[name], res.change[name] = {}, {}, {}
        res.rms_filtered[name], res.rms_filtered_overall[name] = {}, {}
        for mname, p in preds.items():
            res.rms[name][mname], res.rms_overall[name][mname] = rms(p, raw)
            res.rms_filtered[name][mname], res.rms_filtered_overall[name][mname] = rms(p, meas)
        if "simplified" in preds:
            r0 = res.rms_overall[name]["simplified"]
            res.change[name] = {m: relative_change(r0, v) for m, v in res.rms_overall[name].items()
                                if m != "simplified"}
        if decompose_torque:
            regs = rigid_regressors(model, q, qd, qdd)
            dec = {}
            if simplified is not None:
                dec["simplified"] = decompose(model, simplified, d, regs, W=W_s)
            if improved is not None:
                dec["improved"] = decompose(model, improved, d, regs, W=W_i)
            res.decomposition[name] = dec
    if improved is not None:
        res.friction_comparison = improved.compare_friction_terms_
    if truth_drive is not None and improved is not None:
        res.parameter_errors["stage2"] = stage2_errors(improved.stage2_, truth_drive)
    if truth_base is not None:
        if improved is not None:
            res.parameter_errors["stage1"] = parameter_errors(improved.params_, improved.std_,
                                                              truth_base, improved.names1_)
        if simplified is not None:
            res.parameter_errors["simplified"] = parameter_errors(
                simplified.params_, simplified.std_, truth_base, simplified.names_)
    return res
