"""Export an identified arm as a URDF: inertials replaced, friction in ``<dynamics>``.

Identification gives *base* parameters (identifiable combinations). A URDF needs full standard
parameters per link, so :func:`full_from_base` picks the full vector closest (least squares, in
the prior's units) to a prior -- normally the URDF the identification started from -- whose base
projection equals the identified base parameters exactly::

    p = p_prior + pinv(E) (p_b - E p_prior)

With ``identification.physical_consistency: true`` the physically consistent fit already returns
full parameters (every link's pseudo-inertia PSD); those are used instead and the file says so.
Kinematics and limits are copied from the model; :func:`identify.model.urdf.write_urdf` writes the file.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .urdf import write_urdf

__all__ = ["full_from_base", "check_physical", "export_urdf"]


def full_from_base(E: np.ndarray, p_base: np.ndarray, prior: np.ndarray) -> np.ndarray:
    """Full parameters (p,) closest to `prior` (p,) with E @ p == p_base (b,). E: (b, p)."""
    E = np.asarray(E, dtype=float)
    p_base = np.asarray(p_base, dtype=float)
    prior = np.asarray(prior, dtype=float)
    if E.shape != (p_base.size, prior.size):
        raise ValueError(f"full_from_base: E {E.shape} does not match p_base ({p_base.size},) "
                         f"and prior ({prior.size},)")
    return prior + np.linalg.pinv(E) @ (p_base - E @ prior)


def check_physical(params: np.ndarray, link_names) -> list[str]:
    """Problems that make per-link parameters (n, 10) unusable in a simulator: mass <= 0 or an
    inertia about the centre of mass that is not positive definite. Empty list = fine."""
    from .spatial import inertial_from_params
    problems = []
    for name, p in zip(link_names, np.asarray(params).reshape(-1, 10)):
        if not p[0] > 0:
            problems.append(f"{name}: mass {p[0]:.4g} kg <= 0")
            continue
        _, _, I_c = inertial_from_params(p)
        ev = np.linalg.eigvalsh(0.5 * (I_c + I_c.T))
        if ev.min() <= 0:
            problems.append(f"{name}: inertia about the CoM not positive definite "
                            f"(eigenvalues {np.array2string(ev, precision=3)})")
    return problems


def export_urdf(model, path: str | os.PathLike, inertial: np.ndarray, *,
                viscous: np.ndarray | None = None, coulomb: np.ndarray | None = None,
                comment: str | None = None, name: str | None = None) -> Path:
    """Write `model` with standard inertial parameters `inertial` (10n,) and joint friction.

    Args:
        model: RobotModel (kinematics and limits are copied).
        inertial: (10n,) [m, mcx, mcy, mcz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz] per link, link frame.
        viscous: (n,) viscous friction [N*m*s/rad] -> <dynamics damping>. Negative values are
            clipped to 0 (a simulator cannot use them); the comment records the clipping.
        coulomb: (n,) Coulomb friction [N*m] -> <dynamics friction>, clipped alike.
    Raises:
        ValueError naming the link if a link's parameters are not physical (see check_physical).
    """
    n = model.n
    inertial = np.asarray(inertial, dtype=float).reshape(-1)
    if inertial.size != 10 * n:
        raise ValueError(f"export_urdf: expected {10 * n} inertial parameters, got {inertial.size}")
    problems = check_physical(inertial, model.link_names)
    if problems:
        raise ValueError("identified parameters are not physical, cannot write a URDF ("
                         + "; ".join(problems) + "); use identification.physical_consistency: true")
    notes = []

    def clip(x, label):
        if x is None:
            return np.zeros(n)
        x = np.asarray(x, dtype=float).reshape(-1)
        if x.size != n:
            raise ValueError(f"export_urdf: {label} needs {n} values, got {x.size}")
        if np.any(x < 0):
            bad = [model.joint_names[j] for j in np.flatnonzero(x < 0)]
            notes.append(f"negative {label} clipped to 0 on {', '.join(bad)}")
        return np.clip(x, 0.0, None)

    chain = model.to_chain(damping=clip(viscous, "viscous friction"),
                           friction=clip(coulomb, "Coulomb friction"))
    chain.params = inertial.reshape(n, 10).copy()
    if name:
        chain.name = name
    base = _root_inertial(model.source)
    if base is not None:
        chain.base_link = base[0]
    text = " ".join(filter(None, [comment] + notes))
    return write_urdf(chain, path, comment=text or None,
                      base_params=None if base is None else base[1])


def _root_inertial(urdf_path) -> tuple[str, np.ndarray] | None:
    """(name, standard 10-vector) of the source URDF's root link inertial (the fixed base does not
    enter the joint dynamics; it is copied so simulators see the same base). None if absent."""
    import xml.etree.ElementTree as ET
    from .spatial import params_from_inertial, rpy_to_matrix
    try:
        root = ET.parse(urdf_path).getroot()
    except (OSError, ET.ParseError, TypeError):
        return None
    children = {j.find("child").get("link") for j in root.findall("joint") if j.find("child") is not None}
    roots = [lk for lk in root.findall("link") if lk.get("name") not in children]
    if len(roots) != 1 or roots[0].find("inertial") is None:
        return None
    ine = roots[0].find("inertial")
    try:
        m = float(ine.find("mass").get("value"))
        org = ine.find("origin")
        xyz = np.array([float(v) for v in (org.get("xyz", "0 0 0") if org is not None else "0 0 0").split()])
        rpy = np.array([float(v) for v in (org.get("rpy", "0 0 0") if org is not None else "0 0 0").split()])
        it = ine.find("inertia")
        g = {k: float(it.get(k, 0.0)) for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
    except (AttributeError, TypeError, ValueError):
        return None
    I = np.array([[g["ixx"], g["ixy"], g["ixz"]], [g["ixy"], g["iyy"], g["iyz"]],
                  [g["ixz"], g["iyz"], g["izz"]]])
    R = rpy_to_matrix(rpy)
    if m <= 0:
        return None
    return roots[0].get("name"), params_from_inertial(m, xyz, R @ I @ R.T)
