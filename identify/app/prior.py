"""The prior of the physically consistent fit and of the exported URDF: none, the URDF's CAD
values, or (default on twin data, whose truth IS the URDF) a CAD model with seeded errors."""
from __future__ import annotations

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
