"""The prior of the physically consistent fit and of the exported URDF: none, the URDF's CAD
values, or (default on twin data, whose truth IS the URDF) a CAD model with seeded errors."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from identify.model.spatial import inertial_from_params, params_from_inertial
from identify.scenario.spec import Scenario

from identify.outputs.results import Prior


#: CAD error of a centre of mass: each coordinate shifted by U(-c, c) with c = max(COM_ERROR_MIN_M,
#: COM_ERROR_REL * the link's size) -- a few mm on a small wrist link, a few cm on a long arm link
COM_ERROR_MIN_M = 0.003
COM_ERROR_REL = 0.1


def _random_rotation(rng, angle_max: float) -> np.ndarray:
    """Rotation by a uniform angle in [-angle_max, angle_max] about a random axis (Rodrigues)."""
    ax = rng.standard_normal(3)
    ax /= np.linalg.norm(ax)
    a = rng.uniform(-angle_max, angle_max)
    K = np.array([[0, -ax[2], ax[1]], [ax[2], 0, -ax[0]], [-ax[1], ax[0], 0]])
    return np.eye(3) + np.sin(a) * K + (1 - np.cos(a)) * K @ K


def perturbed_inertials(p, rel: float, seed: int) -> np.ndarray:
    """A CAD-like prior with seeded errors (p: (10n,) standard parameters -> (10n,)), per link:

    * mass scaled by 1 + U(-rel, rel);
    * centre of mass shifted by U(-c, c) per coordinate, c = max(3 mm, 10 % of the link's size)
      x rel / 0.2 (size: the distance of the CoM from the joint axis origin, or the radius of
      gyration, whichever is larger) -- 3 mm to several cm on the reference arm at the default
      prior_error 0.2;
    * inertia about the CoM changed in SHAPE, not only in scale: its principal moments scaled by
      independent factors 1 + U(-rel, rel) and its principal axes rotated by up to rel * 90 deg.

    Each perturbed link stays physically consistent: positive mass, and principal moments that
    keep the triangle inequalities (scaled moments that break them are pulled back onto
    I1 <= I2 + I3 by the smallest change), so the inertia is positive definite."""
    p = np.asarray(p, float)
    if not 0 <= rel < 1:
        raise ValueError(f"prior_error must be within [0, 1), got {rel}")
    if rel == 0:
        return p.copy()
    rng = np.random.default_rng(seed)
    n = p.size // 10
    out = p.copy()
    for k in range(n):
        pk = p[10 * k:10 * k + 10]
        fm = 1.0 + rng.uniform(-rel, rel)
        fI = 1.0 + rng.uniform(-rel, rel, 3)
        dc = rng.uniform(-1.0, 1.0, 3)
        Rot = _random_rotation(rng, rel * np.pi / 2)
        if pk[0] <= 0:
            continue
        m, c, I_c = inertial_from_params(pk)
        size = max(float(np.linalg.norm(c)), float(np.sqrt(max(np.trace(I_c), 0.0) / (2 * m))))
        # the CoM error grows with prior_error like the others (the stated sizes at the default
        # prior_error 0.2; none at 0)
        c_new = c + dc * max(COM_ERROR_MIN_M, COM_ERROR_REL * size) * (rel / 0.2)
        lam, V = np.linalg.eigh(0.5 * (I_c + I_c.T))
        lam = np.maximum(lam, 0.0) * fI
        for i in range(3):             # triangle inequalities of the principal moments
            others = lam.sum() - lam[i]
            if lam[i] > others:
                lam[i] = others
        V = Rot @ V
        out[10 * k:10 * k + 10] = params_from_inertial(m * fm, c_new, (V * lam) @ V.T)
    return out


def prior_parameters(scn: Scenario, model, recs: dict | None = None) -> Prior:
    """The prior for identification.prior (auto: perturbed when the data come from the twin --
    whose truth IS the URDF -- else urdf)."""
    ident = scn.identification
    requested = getattr(ident, "prior", "auto")
    from_twin = any((getattr(r, "meta", None) or {}).get("backend") == "twin"
                    for r in (recs or {}).values())
    kind = ("perturbed" if from_twin else "urdf") if requested == "auto" else requested
    if kind == "none":
        return Prior(None, kind, requested,
                     "no prior: the best physically consistent fit (ties broken towards 0)")
    p = model.inertial_parameters()
    if kind == "urdf":
        return Prior(p, kind, requested, "the URDF's CAD values" + (
            " -- on the twin these ARE the ground truth, which flatters the result"
            if from_twin else ""))
    rel, seed = float(ident.prior_error), int(ident.prior_seed)
    return Prior(perturbed_inertials(p, rel, seed), kind, requested,
                 f"the URDF's links with seeded CAD errors (seed {seed}): masses and principal "
                 f"moments +-{100 * rel:g} %, principal axes rotated up to {90 * rel:g} deg, "
                 f"centres of mass shifted by up to max(3 mm, 10 % of the link size) per "
                 f"coordinate; still physically consistent", error=rel, seed=seed)


#: prior-distance weights tried by :func:`regularised_toward` (ConsistentFit.prior_weight: the
#: data term is the weighted residual mean square, so w = 1 makes a 100 % relative deviation of
#: one parameter cost as much as a residual of one noise std on every sample)
PRIOR_WEIGHTS = (1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)


@dataclass
class Regularised:
    """The export regularised toward the nominal URDF (:func:`regularised_toward`).

    params: (p_full,) the chosen full parameters (the nominal itself when it won);
    weight: the chosen prior weight, None when the nominal won; cv: candidate -> mean held-out
    mean-square error [N^2 m^2] over the folds ("nominal" included); folds: K."""
    params: np.ndarray
    weight: float | None
    cv: dict
    folds: int

    def to_dict(self) -> dict:
        return {"weight": self.weight, "chosen": "nominal" if self.weight is None else
                f"prior_weight {self.weight:g}", "folds": self.folds,
                "cv_mse_Nm2": {k: float(v) for k, v in self.cv.items()},
                "note": "prior-distance weight of the physically consistent fit chosen by "
                        "blocked K-fold cross-validation (contiguous segments) on the "
                        "identification data only; the most regularised candidate within one "
                        "standard error of the best"}


def regularised_toward(model, base, terms: tuple, W_full: np.ndarray, y: np.ndarray,
                       nominal: np.ndarray, *, fixed: np.ndarray | None = None,
                       estimator: str = "wls", folds: int = 4,
                       weights=PRIOR_WEIGHTS) -> Regularised:
    """The physically consistent fit of ``y`` with a prior-distance weight toward `nominal`,
    the weight chosen by blocked K-fold cross-validation on these (identification) rows only.

    W_full: (N, n, p_full) full regressor of `terms`; y: (N, n) the fitted signal [N*m];
    nominal: (p_full,) the nominal URDF's parameters (its inertials, zero joint terms);
    fixed: (N, n) torque of joint terms fixed beforehand (e.g. the terms chosen by
    ``friction: auto``), added to every fitted candidate's prediction but NOT to the nominal
    one (the nominal URDF has no friction), or None. Candidates: every w in `weights` and the
    nominal itself; score: mean over K contiguous folds of the held-out mean-square error; the
    choice is the most regularised candidate (nominal > larger w) within one standard error of
    the best mean. The chosen weight is refitted on all rows. Raises ValueError for fewer
    than 2 * folds samples."""
    from identify.estimation.consistency import ConsistentFit
    W_full, y = np.asarray(W_full, float), np.asarray(y, float)
    N = y.shape[0]
    if N < 2 * folds:
        raise ValueError(f"regularisation toward the nominal URDF: {N} samples for {folds} folds")
    f = np.zeros_like(y) if fixed is None else np.asarray(fixed, float)
    edges = np.linspace(0, N, folds + 1).astype(int)
    nominal_pred = W_full @ nominal

    def fit(rows, w):
        return ConsistentFit(model, base, terms=terms, prior=nominal, prior_weight=w,
                             estimator=estimator).fit(W_full[rows], y[rows] - f[rows]).params_
    scores = {w: [] for w in weights}
    scores["nominal"] = []
    for k in range(folds):
        test = np.zeros(N, bool)
        test[edges[k]:edges[k + 1]] = True
        for w in weights:
            pred = W_full[test] @ fit(~test, w) + f[test]
            scores[w].append(float(np.mean((pred - y[test]) ** 2)))
        scores["nominal"].append(float(np.mean((nominal_pred[test] - y[test]) ** 2)))
    mean = {k: float(np.mean(v)) for k, v in scores.items()}
    se = {k: float(np.std(v, ddof=1) / np.sqrt(folds)) for k, v in scores.items()}
    best = min(mean, key=mean.get)
    order = ["nominal"] + sorted(weights, reverse=True)          # most regularised first
    chosen = next(c for c in order if mean[c] <= mean[best] + se[best])
    cv = {("nominal" if k == "nominal" else f"{k:g}"): v for k, v in mean.items()}
    if chosen == "nominal":
        return Regularised(np.asarray(nominal, float).copy(), None, cv, folds)
    return Regularised(fit(np.ones(N, bool), chosen), float(chosen), cv, folds)
