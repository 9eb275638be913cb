"""The prior of the physically consistent fit and of the exported URDF: none, the URDF's CAD
values, or (default on twin data, whose truth IS the URDF) a CAD model with seeded errors."""
from __future__ import annotations

import numpy as np

from identify.model.spatial import inertial_from_params, params_from_inertial
from identify.scenario.spec import Scenario

from .results import Prior


def perturbed_inertials(p, rel: float, seed: int) -> np.ndarray:
    """A CAD-like prior: each link's mass and rotational inertia (about its CoM) scaled by
    independent factors 1 + U(-rel, rel) (seeded), CoM kept. Uniform positive scaling keeps every
    link physically consistent (positive mass, positive-definite inertia, triangle inequalities).
    p: (10n,) standard parameters -> (10n,)."""
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
                 f"the URDF's masses and inertias with seeded CAD errors of +-{100 * rel:g} % "
                 f"(seed {seed}), still physically consistent", error=rel, seed=seed)
