"""Export an identified arm as a URDF: inertials replaced, friction in ``<dynamics>``.

Identification gives *base* parameters (identifiable combinations). A URDF needs full standard
parameters per link, so :func:`full_from_base` picks the full vector closest (least squares, in
the prior's units) to a prior -- normally the URDF the identification started from -- whose base
projection equals the identified base parameters exactly::

    p = p_prior + pinv(E) (p_b - E p_prior)

With ``identification.physical_consistency: true`` the physically consistent fit already returns
full parameters (every link's pseudo-inertia PSD); those are used instead and the file says so.
When the model came from a URDF file, the export EDITS that file: every link, joint, visual and
collision element (mesh paths as in the input), every locked or fixed joint stays as shipped; the
identified inertial of body i goes into the child link of moving joint i (the body's frame), the
inertials of the links merged into it (fixed frames, locked joints) are removed (their mass is in
the identified body), and each moving joint gets ``<dynamics damping friction>``. Without a source
file :func:`identify.model.urdf.write_urdf` writes a plain chain.

Physical means: per link mass >= 0 and an inertia about the centre of mass positive semidefinite,
both up to round-off (``PSD_RTOL`` relative to the link's largest moment): a solver's -5e-18 is
not a reason to refuse an export; the written inertia is the projection onto the PSD cone.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .urdf import write_urdf

__all__ = ["full_from_base", "check_physical", "export_urdf", "PSD_RTOL"]

#: eigenvalues of an inertia above -PSD_RTOL * (largest moment) count as round-off of 0
PSD_RTOL = 1e-9
_MASS_ATOL = 1e-12


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
    """Problems that make per-link parameters (n, 10) unusable in a simulator: a negative mass, a
    positive first moment with zero mass, or an inertia about the centre of mass that is not
    positive semidefinite beyond round-off (:data:`PSD_RTOL`). Empty list = fine."""
    from .spatial import inertial_from_params
    problems = []
    for name, p in zip(link_names, np.asarray(params).reshape(-1, 10)):
        scale = max(1.0, float(np.max(np.abs(p))))
        if p[0] < -_MASS_ATOL * scale:
            problems.append(f"{name}: mass {p[0]:.4g} kg < 0")
            continue
        if p[0] <= _MASS_ATOL * scale:
            if np.max(np.abs(p[1:4])) > 1e-9 * scale:
                problems.append(f"{name}: zero mass with a non-zero first moment {p[1:4]}")
            continue
        _, _, I_c = inertial_from_params(p)
        ev = np.linalg.eigvalsh(0.5 * (I_c + I_c.T))
        if ev.min() < -PSD_RTOL * max(float(np.max(np.abs(ev))), 1e-300):
            problems.append(f"{name}: inertia about the CoM not positive semidefinite "
                            f"(eigenvalues {np.array2string(ev, precision=3)})")
    return problems


def _clean_inertial(p: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """(mass, com (3,), inertia about the com (3, 3)) with round-off removed: negative
    eigenvalues of the order of round-off set to 0, a zero mass written as 0."""
    from .spatial import inertial_from_params
    if p[0] <= _MASS_ATOL * max(1.0, float(np.max(np.abs(p)))):
        return 0.0, np.zeros(3), np.zeros((3, 3))
    m, c, I_c = inertial_from_params(p)
    lam, V = np.linalg.eigh(0.5 * (I_c + I_c.T))
    if lam.min() >= 0:          # physical as it is: written unchanged, bit for bit
        return float(m), np.asarray(c, float), I_c
    return float(m), np.asarray(c, float), (V * np.clip(lam, 0.0, None)) @ V.T


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
    # round-off: write the projection onto the physical set (check_physical passed)
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

    damping, friction = clip(viscous, "viscous friction"), clip(coulomb, "Coulomb friction")
    text = " ".join(filter(None, [comment] + notes))
    src = Path(model.source) if getattr(model, "source", "") else None
    if src is not None and src.is_file():
        return _edit_source(model, src, path, inertial.reshape(n, 10), damping, friction,
                            text, name)
    chain = model.to_chain(damping=damping, friction=friction)
    chain.params = inertial.reshape(n, 10).copy()
    if name:
        chain.name = name
    base = _root_inertial(model.source)
    if base is not None:
        chain.base_link = base[0]
    return write_urdf(chain, path, comment=text or None,
                      base_params=None if base is None else base[1])


def _fmt(x) -> str:
    return " ".join(repr(float(v)) for v in np.atleast_1d(x))


def _edit_source(model, src: Path, path, params: np.ndarray, damping, friction, comment: str,
                 name: str | None) -> Path:
    """The source URDF with the identified inertials and friction (see the module docstring)."""
    import xml.etree.ElementTree as ET
    from .urdf import load_chain
    chain = load_chain(src, list(model.joint_names))
    if list(chain.joint_names) != list(model.joint_names):
        raise ValueError(f"export_urdf: {src} gives the joints {chain.joint_names}, the model has "
                         f"{list(model.joint_names)}")
    tree = ET.parse(src)
    root = tree.getroot()
    links = {lk.get("name"): lk for lk in root.findall("link")}
    joints = {j.get("name"): j for j in root.findall("joint")}
    for i, body in enumerate(chain.bodies[1:]):
        carrier, merged = links[body[0]], body[1:]
        for ln in merged:                              # mass now in the identified body
            for el in links[ln].findall("inertial"):
                links[ln].remove(el)
        for el in carrier.findall("inertial"):
            carrier.remove(el)
        m, c, I_c = _clean_inertial(params[i])
        ine = ET.Element("inertial")
        ET.SubElement(ine, "origin", xyz=_fmt(c), rpy="0 0 0")
        ET.SubElement(ine, "mass", value=repr(m))
        ET.SubElement(ine, "inertia", ixx=repr(float(I_c[0, 0])), ixy=repr(float(I_c[0, 1])),
                      ixz=repr(float(I_c[0, 2])), iyy=repr(float(I_c[1, 1])),
                      iyz=repr(float(I_c[1, 2])), izz=repr(float(I_c[2, 2])))
        carrier.insert(0, ine)
        j = joints[model.joint_names[i]]
        for el in j.findall("dynamics"):
            j.remove(el)
        ET.SubElement(j, "dynamics", damping=repr(float(damping[i])),
                      friction=repr(float(friction[i])))
    if name:
        root.set("name", name)
    if comment:
        root.insert(0, ET.Comment(" " + comment.replace("--", "- -") + " "))
    root.insert(0, ET.Comment(f" edited copy of {src}: relative mesh paths refer to that "
                              f"folder "))
    ET.indent(root, space="  ")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".partial")
    tree.write(tmp, encoding="unicode", xml_declaration=True)
    os.replace(tmp, path)
    return path


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
