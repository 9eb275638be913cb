"""Parameter errors against a known truth (the twin's): relative error, z = (estimate - truth) / std,
counts within 3 sigma, the reasons a parameter is skipped, stage-2 coefficients against the drive
truth, and the true base parameters of a model from its full (link-side) parameters."""
from __future__ import annotations
from dataclasses import dataclass, field
import numpy as np


# --------------------------------------------------------------------------------------------
# parameters against the truth
# --------------------------------------------------------------------------------------------
@dataclass
class ParameterErrors:
    """Identified base parameters against their true values.

    Attributes (p parameters): names, estimate, std, truth; error = estimate - truth;
    rel_error [%] = 100 error / |truth| (NaN where the truth is about zero, :func:`near_zero`);
    z = error / std (NaN where the
    std is NaN); within_3sigma (p,) bool; compared (p,) bool: the std is known (not NaN), so the
    parameter takes part in the +-3 sigma count; n_within (count among the compared); n (number
    compared); skipped: [(name, reason), ...] of the parameters left out of the count (a NaN std:
    not identifiable from these data) -- and, for :func:`stage2_errors`, of the coefficients not
    compared at all (joint with unidentified xi, coefficient whose regressor column is
    noise-dominated).
    """

    names: list
    estimate: np.ndarray
    std: np.ndarray
    truth: np.ndarray
    error: np.ndarray
    rel_error: np.ndarray
    z: np.ndarray
    within_3sigma: np.ndarray
    n_within: int
    n: int
    compared: np.ndarray | None = None
    skipped: list = field(default_factory=list)

    @property
    def n_skipped(self) -> int:
        return len(self.skipped)

    def skipped_summary(self) -> str:
        """One line: how many were skipped and why (reasons counted), or ''."""
        if not self.skipped:
            return ""
        by: dict = {}
        for _nm, why in self.skipped:
            by[why] = by.get(why, 0) + 1
        return (f"{self.n_skipped} skipped: "
                + "; ".join(f"{k} ({why})" for why, k in by.items()))

    def table(self) -> str:
        w = max(12, min(60, max((len(s) for s in self.names), default=12)))
        rows = [f"{'#':>3}  {'base parameter':<{w}} {'truth':>11} {'estimate':>11} {'std':>9} "
                f"{'rel.err %':>9} {'z':>7}  3sigma"]
        cmp_ = self.compared if self.compared is not None else np.ones(len(self.names), bool)
        for i, nm in enumerate(self.names):
            flag = ("yes" if self.within_3sigma[i] else "NO") if cmp_[i] else "skipped (std nan)"
            rows.append(f"{i + 1:>3}  {nm[:w]:<{w}} {self.truth[i]:>11.5g} "
                        f"{self.estimate[i]:>11.5g} "
                        f"{self.std[i]:>9.2g} {self.rel_error[i]:>9.3g} {self.z[i]:>7.2f}  "
                        f"{flag}")
        rows.append(f"{self.n_within} of {self.n} within +-3 sigma of the truth"
                    + (f"; {self.skipped_summary()}" if self.skipped else ""))
        return "\n".join(rows)

    def to_dict(self) -> dict:
        """JSON-safe summary (NaN / inf -> None)."""
        def f(x):
            return float(x) if np.isfinite(x) else None
        rel = np.abs(self.rel_error[np.isfinite(self.rel_error)])
        return {"n": self.n, "n_within_3sigma": self.n_within,
                "median_abs_rel_error_pct": float(np.median(rel)) if rel.size else None,
                "n_skipped": self.n_skipped,
                "skipped": [{"name": nm, "reason": why} for nm, why in self.skipped],
                "parameters": [{"name": nm, "truth": f(t), "estimate": f(e), "std": f(s),
                                "rel_error_pct": f(r), "z": f(z)}
                               for nm, t, e, s, r, z in zip(self.names, self.truth, self.estimate,
                                                            self.std, self.rel_error, self.z)]}


#: why a parameter with no known truth is left out of the +-3 sigma count
REASON_NO_TRUTH = "no truth (the twin's link friction has no constant-parameter truth)"
#: why a parameter with std NaN is left out of the +-3 sigma count
REASON_STD_NAN = "std is NaN: not identifiable from these data"


REASON_XI_FIXED = ("xi not identified (the data do not fix 1/(1 - xi), e.g. a torque-sensor "
                   "signal too small; xi fixed at 0 and the motor-side coefficients absorb "
                   "xi tau'_r)")


REASON_NOISE = ("regressor column (tau_r or taudd_r) more than half sensor noise: "
                "noise-dominated, std NaN")


#: a truth is "about zero" when its magnitude is below this fraction of the largest truth of its
#: group (a table of base parameters; one stage-2 coefficient over the joints): a percent error
#: on it says nothing (5e-5 kg*m^2 off by 5e-4 reads 1000 %), z does
NEAR_ZERO_REL = 1e-3


def near_zero(truth, groups=None, rel: float = NEAR_ZERO_REL) -> np.ndarray:
    """(p,) bool: |truth| <= rel * max |truth| of its group (`groups` (p,) labels; None: one
    group). Exact zeros are always near zero."""
    tr = np.abs(np.asarray(truth, dtype=float).reshape(-1))
    g = np.zeros(tr.size, int) if groups is None else np.unique(np.asarray(groups),
                                                                 return_inverse=True)[1]
    scale = np.zeros(tr.size)
    for k in np.unique(g):
        scale[g == k] = tr[g == k].max() if np.any(g == k) else 0.0
    return tr <= rel * scale


def parameter_errors(estimate, std, truth, names=None, groups=None) -> ParameterErrors:
    """Compare estimates (p,) with std (p,) against the truth (p,).

    A parameter whose std is NaN (not identifiable from the data) keeps its row (error and
    relative error are still given) but z is NaN and it is left out of the +-3 sigma count
    (``compared`` False, listed in ``skipped``); so is one whose truth is NaN (none known:
    :func:`inertial_base_truth`). A std of 0 gives z = 0 for an exact estimate
    and inf otherwise (a miss). The relative error is NaN where the truth is about zero
    (:func:`near_zero` within `groups`), so that medians of it mean something; z still judges
    those parameters."""
    est = np.asarray(estimate, dtype=float).reshape(-1)
    sd = np.asarray(std, dtype=float).reshape(-1)
    tr = np.asarray(truth, dtype=float).reshape(-1)
    if not (est.shape == sd.shape == tr.shape):
        raise ValueError(f"estimate {est.shape}, std {sd.shape} and truth {tr.shape} differ in "
                         f"length")
    names = list(names) if names is not None else [f"p{i + 1}" for i in range(est.size)]
    if len(names) != est.size:
        raise ValueError(f"{len(names)} names for {est.size} parameters")
    err = est - tr
    compared = ~np.isnan(sd) & ~np.isnan(tr)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(~near_zero(tr, groups), 100.0 * err / np.abs(tr), np.nan)
        z = np.where(sd > 0, err / sd, np.where(err == 0, 0.0, np.inf))
    z = np.where(compared, z, np.nan)
    within = compared & (np.abs(np.where(compared, z, 0.0)) <= 3.0)
    skipped = [(nm, REASON_NO_TRUTH if np.isnan(t) else REASON_STD_NAN)
               for nm, c, t in zip(names, compared, tr) if not c]
    return ParameterErrors(names, est, sd, tr, err, rel, z, within, int(within.sum()),
                           int(compared.sum()), compared, skipped)


def stage2_errors(stage2, truth: dict) -> ParameterErrors:
    """Stage-2 coefficients of an ImprovedModel (its ``stage2_``) against known drive values.

    Args:
        stage2: Stage2Result.
        truth: name -> (n,) true values per joint; names "xi" (compared with xi_lin / xi_opp),
            "f_mc" [N*m], "f_mv" [N*m*s/rad], "J_m" (= eta^2 J_m) [kg*m^2], "K" [N*m/rad] (gives
            J_m/K); a coefficient's exact name ("xi_lin", "xi_opp", "J_m/K") takes precedence
            over these. Missing names are not compared.
    Skipped (not compared; listed with the reason in ``skipped``): every coefficient of a joint
    whose xi was not identified (its c absorbs xi tau'_r), and coefficients with std NaN -- those
    joint_models marks ``noise_dominated`` (e.g. J_m/K when taudd_r is mostly sensor noise) or
    any other NaN std. They would otherwise give z = inf and count as misses.
    Returns: ParameterErrors over the compared (joint, coefficient) pairs, names like
    "joint2.xi_opp".
    """
    tr = {k: np.asarray(v, dtype=float).reshape(-1) for k, v in truth.items()}
    if "K" in tr and "J_m" in tr:
        tr["J_m/K"] = tr["J_m"] / tr["K"]
    names, est, sd, tv, skipped = [], [], [], [], []
    for j, sj in enumerate(stage2.joints):
        std = np.asarray(sj.std, dtype=float)
        dom = (np.zeros(len(sj.names), bool) if sj.noise_dominated is None
               else np.asarray(sj.noise_dominated, bool))
        for k, nm in enumerate(sj.names):
            key = nm if nm in tr else ("xi" if nm.startswith("xi_") else nm)
            if key not in tr:
                continue
            if tr[key].shape[0] != len(stage2.joints):
                raise ValueError(f"truth {key!r} has {tr[key].shape[0]} values for "
                                 f"{len(stage2.joints)} joints")
            full = f"{sj.joint}.{nm}"
            if not sj.xi_identified:
                skipped.append((full, REASON_XI_FIXED))
            elif dom[k]:
                skipped.append((full, REASON_NOISE))
            elif np.isnan(std[k]):
                skipped.append((full, REASON_STD_NAN))
            else:
                names.append(full)
                est.append(sj.theta[k])
                sd.append(std[k])
                tv.append(tr[key][j])
    if not names:
        why = f"; skipped: {[nm for nm, _ in skipped]}" if skipped else ""
        raise ValueError(f"stage2_errors: no comparable coefficient (truth names {sorted(tr)})"
                         + why)
    pe = parameter_errors(est, sd, tv, names, groups=[nm.split(".", 1)[1] for nm in names])
    pe.skipped = skipped + pe.skipped
    return pe


def stage2_truth(stage2, truth) -> np.ndarray | None:
    """(n, k) drive truth in the order of the fitted stage-2 coefficients, when it applies (a
    twin truth for stage 2 and a fitted variant the twin's law can be compared with).

    Args:
        stage2: the improved model's fitted stage 2 (``ImprovedModel.stage2_``), or None.
        truth: the twin's ground truth (``identify.outputs.results.Truth``), or None."""
    if stage2 is None or truth is None or not truth.applicable["stage2"]:
        return None
    if any(nm not in truth.stage2 for nm in stage2.names):
        return None                      # no constant truth for this law (load_speed)
    # the fitted variant must contain the twin's law: "both" contains either; the drive-file
    # fallback (no recorded law) is the opposing loss
    law_variant = {"paper": "linear", "opposing": "opposing"}.get(truth.law or "opposing")
    if stage2.variant not in (law_variant, "both"):
        return None
    return np.array([[truth.stage2[nm][j] for nm in stage2.names]
                     for j in range(len(stage2.joints))])


def inertial_base_truth(model, base, inertial=None, terms=("viscous", "coulomb")) -> np.ndarray:
    """True base parameters (stage-1 / simplified column order, like :func:`true_base_parameters`)
    where they involve inertial parameters only, NaN where they involve a friction column: the
    truth that still holds when the twin's link friction follows a law with no constant-parameter
    truth (Stribeck, asymmetry, drift, load-dependent, presliding) -- the inertia did not
    change. `inertial` (10n,) defaults to the model's; `terms`: the fit's friction terms."""
    n = model.n
    p_in = model.inertial_parameters() if inertial is None else np.asarray(inertial, float)
    E = np.asarray(base.E, float)
    if E.shape[1] == 10 * n:                    # friction columns appended after the base ones
        return np.concatenate([np.asarray(base.project(p_in), float), np.full(len(terms) * n, np.nan)])
    fr = E[:, 10 * n:]
    out = E[:, :10 * n] @ p_in
    return np.where(np.any(fr != 0, axis=1), np.nan, out)


def true_base_parameters(model, base, *, link_viscous=None, link_coulomb=None,
                         terms=("viscous", "coulomb"), inertial=None) -> np.ndarray:
    """True base-parameter vector of the stage-1 / simplified columns.

    Args:
        model: RobotModel (its inertial parameters are the truth unless `inertial` (10n,) given).
        base: BaseParameters used in the fit.
        link_viscous, link_coulomb: (n,) true link-side friction [N*m*s/rad, N*m] (e.g. from
            assets/cobot6_drives.yaml); required for the corresponding `terms`.
    Returns: (n_base + extra,) in the column order of joint_models.design_matrix.
    """
    n = model.n
    p_in = model.inertial_parameters() if inertial is None else np.asarray(inertial, float)
    vals = {"viscous": link_viscous, "coulomb": link_coulomb}
    fr = []
    for t in terms:
        v = vals.get(t)
        if v is None:
            raise ValueError(f"true_base_parameters: give the true value of friction term {t!r}")
        v = np.asarray(v, dtype=float).reshape(-1)
        if v.shape != (n,):
            raise ValueError(f"true {t} friction has {v.size} values, the arm has {n} joints")
        fr.append(v)
    fr = np.concatenate(fr) if fr else np.zeros(0)
    n_full = np.asarray(base.E).shape[1]
    if n_full == 10 * n + fr.size:
        return base.project(np.concatenate([p_in, fr]))
    if n_full == 10 * n:
        return np.concatenate([base.project(p_in), fr])
    raise ValueError(f"base parameters have {n_full} full columns; expected {10 * n} or "
                     f"{10 * n + fr.size}")
