"""URDF in and out.

:func:`load_chain` reads a URDF into a serial chain of revolute joints: links rigidly attached by
fixed joints (and by joints the caller chose to lock at zero) are merged into one body whose
inertia is expressed in the frame of the moving joint that carries it. Anything that is not a
serial chain of revolute joints raises :class:`URDFError` naming the element at fault.

:func:`write_urdf` writes a serial chain (used to generate the reference arm from its MDH table
and to export identified arms).
"""
from __future__ import annotations

import math
import os
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .spatial import (combine_inertials, inertial_from_params, matrix_to_rpy,
                      params_from_inertial, rpy_to_matrix, transform)

_REVOLUTE = ("revolute", "continuous")


class URDFError(ValueError):
    """A URDF that cannot be used as a serial revolute chain; the message names the culprit."""


@dataclass
class Chain:
    """A serial chain read from a URDF (all SI).

    Attributes:
        name: robot name.
        joint_names: (n,) moving joints, base to tip.
        link_names: (n,) the URDF link each moving joint drives (merged bodies keep that name).
        base_link: the root link.
        placements: (n, 4, 4) pose of joint i's frame in joint i-1's frame (base frame for i = 0)
            at zero joint angle.
        axes: (n, 3) unit rotation axis of each joint in its own frame.
        params: (n, 10) standard inertial parameters of each merged body in its joint frame.
        q_min, q_max, qd_max, tau_max: (n,) limits from <limit> (inf where absent/continuous).
        damping, friction: (n,) values of <dynamics> (0 where absent).
        source: path of the file read.
        bodies: (n + 1,) names of the URDF links merged into each body (body 0 = the base, body
            i = the body moved by joint i, its first entry the joint's child link). Links without
            ``<inertial>`` (frames such as ``tool0``, ``flange``) count as mass 0.
    """

    name: str
    joint_names: list[str]
    link_names: list[str]
    base_link: str
    placements: np.ndarray
    axes: np.ndarray
    params: np.ndarray
    q_min: np.ndarray
    q_max: np.ndarray
    qd_max: np.ndarray
    tau_max: np.ndarray
    damping: np.ndarray = field(default_factory=lambda: np.zeros(0))
    friction: np.ndarray = field(default_factory=lambda: np.zeros(0))
    source: str = ""
    bodies: list = field(default_factory=list)


def _floats(text: str | None, n: int, default: float, where: str) -> np.ndarray:
    if text is None:
        return np.full(n, default)
    try:
        vals = np.array([float(x) for x in text.split()])
    except ValueError as exc:
        raise URDFError(f"{where}: cannot read numbers from {text!r}") from exc
    if vals.shape != (n,):
        raise URDFError(f"{where}: expected {n} numbers, got {text!r}")
    if not np.all(np.isfinite(vals)):
        raise URDFError(f"{where}: non-finite number in {text!r}")
    return vals


def _origin(elem, where: str) -> np.ndarray:
    o = elem.find("origin") if elem is not None else None
    if o is None:
        return np.eye(4)
    xyz = _floats(o.get("xyz"), 3, 0.0, where + "/origin@xyz")
    rpy = _floats(o.get("rpy"), 3, 0.0, where + "/origin@rpy")
    return transform(rpy_to_matrix(rpy), xyz)


def _link_params(link, where: str) -> np.ndarray | None:
    inertial = link.find("inertial")
    if inertial is None:
        return None
    mass_el = inertial.find("mass")
    inertia_el = inertial.find("inertia")
    if mass_el is None or inertia_el is None:
        raise URDFError(f"{where}: <inertial> needs both <mass> and <inertia>")
    try:
        m = float(mass_el.get("value"))
        I = {k: float(inertia_el.get(k, 0.0)) for k in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
    except (TypeError, ValueError) as exc:
        raise URDFError(f"{where}: unreadable mass or inertia value ({exc})") from exc
    if not (math.isfinite(m) and m >= 0.0):
        raise URDFError(f"{where}: <mass value={mass_el.get('value')!r}> must be a finite mass >= 0 [kg]")
    bad = [k for k, v in I.items() if not math.isfinite(v)]
    if bad:
        raise URDFError(f"{where}: <inertia> {', '.join(bad)} not a finite number [kg*m^2]")
    T = _origin(inertial, where + "/inertial")
    I_c = np.array([[I["ixx"], I["ixy"], I["ixz"]],
                    [I["ixy"], I["iyy"], I["iyz"]],
                    [I["ixz"], I["iyz"], I["izz"]]])
    lam = np.linalg.eigvalsh(I_c)
    # vendor files round their tensors: only a clearly negative principal moment is refused
    if lam[0] < -1e-6 * max(1e-6, float(np.abs(lam).max())):
        raise URDFError(f"{where}: <inertia> has a negative principal moment of inertia "
                        f"({', '.join(f'{v:.4g}' for v in lam)} kg*m^2): not a rigid body")
    # inertia given in the inertial frame (rotated by rpy), centred at its origin
    R = T[:3, :3]
    return params_from_inertial(m, T[:3, 3], R @ I_c @ R.T)


def _read_root(path: Path) -> ET.Element:
    if not path.exists():
        raise FileNotFoundError(f"URDF file not found: {path}")
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as exc:
        raise URDFError(f"{path}: not valid XML ({exc})") from exc
    if root.tag != "robot":
        raise URDFError(f"{path}: root element is <{root.tag}>, expected <robot>")
    return root


def _tree(path: Path, root: ET.Element):
    """(links by name, joint elements, joints by parent link name, the root link)."""
    links = {l.get("name"): l for l in root.findall("link")}
    joint_elems = root.findall("joint")
    by_child: dict[str, ET.Element] = {}
    children: dict[str, list[ET.Element]] = {name: [] for name in links}
    for j in joint_elems:
        jn = j.get("name")
        parent = j.find("parent").get("link") if j.find("parent") is not None else None
        child = j.find("child").get("link") if j.find("child") is not None else None
        for role, ln in (("parent", parent), ("child", child)):
            if ln not in links:
                raise URDFError(f"{path}: joint {jn!r} names {role} link {ln!r}, which is not defined")
        if child in by_child:
            raise URDFError(f"{path}: link {child!r} is the child of two joints "
                            f"({by_child[child].get('name')!r}, {jn!r})")
        by_child[child] = j
        children[parent].append(j)
    roots = [ln for ln in links if ln not in by_child]
    if len(roots) != 1:
        raise URDFError(f"{path}: expected one root link, found {roots}")
    return links, joint_elems, children, roots[0]


def _bodies(path: Path, children: dict, base: str, is_moving):
    """Walk the tree from the root link, merging rigidly attached links into bodies:
    (moving joints in chain order, their placements in the parent body (n, 4, 4), body_links:
    per body [(link name, T_body_link)], body 0 the base)."""
    chain_joints: list[ET.Element] = []
    placements: list[np.ndarray] = []
    body_links: list[list[tuple[str, np.ndarray]]] = [[(base, np.eye(4))]]

    def absorb(link_name: str, T_body_link: np.ndarray, body: int):
        for j in children[link_name]:
            T_parent_joint = _origin(j, f"{path}: joint {j.get('name')!r}")
            child = j.find("child").get("link")
            if is_moving(j):
                if len(chain_joints) > body:
                    prev = chain_joints[body].get("name")
                    raise URDFError(
                        f"{path}: not a serial chain -- body of link {link_name!r} carries two moving "
                        f"joints ({prev!r} and {j.get('name')!r}); lock one with a joint subset")
                chain_joints.append(j)
                placements.append(T_body_link @ T_parent_joint)
                body_links.append([(child, np.eye(4))])
                absorb(child, np.eye(4), body + 1)
            else:
                T = T_body_link @ T_parent_joint
                body_links[body].append((child, T))
                absorb(child, T, body)
    absorb(base, np.eye(4), 0)
    return chain_joints, placements, body_links


def _body_params(path: Path, links: dict, body_links: list, n: int) -> np.ndarray:
    """(n, 10) inertial parameters of the moving bodies (their links combined)."""
    params = np.zeros((n, 10))
    for ln, _T in body_links[0]:         # the fixed base: no parameters, but a broken file is refused
        _link_params(links[ln], f"{path}: link {ln!r}")
    for b in range(1, n + 1):
        parts = []
        for ln, T in body_links[b]:
            p = _link_params(links[ln], f"{path}: link {ln!r}")
            if p is None:       # a massless frame (tool0, flange, sensor frames): mass 0
                continue
            parts.append((T, p))
        if parts:               # else a body of frames only: all parameters 0
            params[b - 1] = combine_inertials(parts)
    return params


def _joint_data(path: Path, chain_joints: list) -> dict:
    """Axes (n, 3), limits (q_min, q_max, qd_max, tau_max; inf where the URDF has none) and
    <dynamics> damping / friction (n,) of the moving joints."""
    n = len(chain_joints)
    out = {"axes": np.zeros((n, 3)), "q_min": np.full(n, -np.inf), "damping": np.zeros(n),
           "friction": np.zeros(n), **{k: np.full(n, np.inf) for k in ("q_max", "qd_max", "tau_max")}}
    for i, j in enumerate(chain_joints):
        jn = j.get("name")
        ax = _floats(j.find("axis").get("xyz") if j.find("axis") is not None else None, 3, 0.0,
                     f"{path}: joint {jn!r} axis")
        if j.find("axis") is None:
            ax = np.array([1.0, 0.0, 0.0])  # URDF default
        norm = np.linalg.norm(ax)
        if norm < 1e-12:
            raise URDFError(f"{path}: joint {jn!r} has a zero axis")
        out["axes"][i] = ax / norm
        limit = j.find("limit")
        if limit is not None:
            def get(key, default):
                v = limit.get(key)
                try:
                    x = float(v) if v is not None else default
                except ValueError:
                    raise URDFError(f"{path}: joint {jn!r} <limit {key}={v!r}> is not a number") from None
                if math.isnan(x):
                    raise URDFError(f"{path}: joint {jn!r} <limit {key}={v!r}> is not a number")
                return x
            if j.get("type") == "revolute":
                out["q_min"][i] = get("lower", -np.inf)
                out["q_max"][i] = get("upper", np.inf)
                if out["q_min"][i] > out["q_max"][i]:
                    raise URDFError(f"{path}: joint {jn!r} has lower limit > upper limit")
            v, e = get("velocity", 0.0), get("effort", 0.0)
            out["qd_max"][i] = v if v > 0 else np.inf
            out["tau_max"][i] = e if e > 0 else np.inf
        dyn = j.find("dynamics")
        if dyn is not None:
            for key in ("damping", "friction"):
                v = dyn.get(key, 0.0)
                try:
                    x = float(v)
                except ValueError:
                    x = math.nan
                if not (math.isfinite(x) and x >= 0.0):
                    raise URDFError(f"{path}: joint {jn!r} <dynamics {key}={v!r}> must be a finite "
                                    f"number >= 0")
                out[key][i] = x
    return out


def load_chain(path: str | os.PathLike, joints: list[str] | None = None) -> Chain:
    """Read a URDF as a serial chain of revolute joints.

    Args:
        path: the URDF file.
        joints: names of the joints to keep moving (in any order; the chain order is the URDF's).
            Every other non-fixed joint is locked at zero and merged like a fixed joint.
            None keeps every non-fixed joint.
    Raises:
        FileNotFoundError, URDFError naming the file and the offending joint/link.
    """
    path = Path(path)
    root = _read_root(path)
    links, joint_elems, children, base = _tree(path, root)
    all_joint_names = [j.get("name") for j in joint_elems]
    if joints is not None:
        unknown = [j for j in joints if j not in all_joint_names]
        if unknown:
            raise URDFError(f"{path}: joint(s) {unknown} not in the URDF (it has {all_joint_names})")
    keep = set(joints) if joints is not None else None

    def is_moving(j) -> bool:
        jt = j.get("type")
        jn = j.get("name")
        if jt == "fixed":
            return False
        if keep is not None and jn not in keep:
            return False  # locked at zero by request
        if jt not in _REVOLUTE:
            raise URDFError(f"{path}: joint {jn!r} is {jt!r}; only revolute/continuous joints are "
                            f"supported (pass a joint subset to lock it)")
        return True

    chain_joints, placements, body_links = _bodies(path, children, base, is_moving)
    n = len(chain_joints)
    if n == 0:
        raise URDFError(f"{path}: no moving revolute joint found")
    params = _body_params(path, links, body_links, n)
    jd = _joint_data(path, chain_joints)
    return Chain(name=root.get("name", path.stem), joint_names=[j.get("name") for j in chain_joints],
                 link_names=[j.find("child").get("link") for j in chain_joints], base_link=base,
                 placements=np.array(placements), axes=jd["axes"], params=params,
                 q_min=jd["q_min"], q_max=jd["q_max"], qd_max=jd["qd_max"], tau_max=jd["tau_max"],
                 damping=jd["damping"], friction=jd["friction"], source=str(path),
                 bodies=[[ln for ln, _T in body] for body in body_links])


# ---------------------------------------------------------------------------------------------
def _fmt(x) -> str:
    return " ".join(repr(float(v)) for v in np.atleast_1d(x))


def _inertial_xml(parent: ET.Element, p: np.ndarray) -> None:
    """Append an <inertial> for standard 10-vector p (frame = link frame)."""
    m, c, I_c = inertial_from_params(p)
    inertial = ET.SubElement(parent, "inertial")
    ET.SubElement(inertial, "origin", xyz=_fmt(c), rpy="0 0 0")
    ET.SubElement(inertial, "mass", value=repr(float(m)))
    ET.SubElement(inertial, "inertia", ixx=repr(float(I_c[0, 0])), ixy=repr(float(I_c[0, 1])),
                  ixz=repr(float(I_c[0, 2])), iyy=repr(float(I_c[1, 1])), iyz=repr(float(I_c[1, 2])),
                  izz=repr(float(I_c[2, 2])))


def write_urdf(chain: Chain, path: str | os.PathLike, *, base_params: np.ndarray | None = None,
               comment: str | None = None, visuals: bool = True) -> Path:
    """Write `chain` as a URDF (base link + one link per joint, revolute joints).

    `chain.damping` / `chain.friction` go into <dynamics> (viscous [N*m*s/rad], Coulomb [N*m]).
    `base_params` (10,) optionally gives the base link's inertial. Small cylinders along each joint
    axis are added as visual/collision geometry so the file renders in viewers.
    """
    robot = ET.Element("robot", name=chain.name)
    if comment:
        robot.append(ET.Comment(" " + comment.replace("--", "- -") + " "))
    base = ET.SubElement(robot, "link", name=chain.base_link)
    if base_params is not None:
        _inertial_xml(base, base_params)
    parent = chain.base_link
    n = len(chain.joint_names)
    for i in range(n):
        T = chain.placements[i]
        j = ET.SubElement(robot, "joint", name=chain.joint_names[i],
                          type="revolute" if np.isfinite(chain.q_min[i]) else "continuous")
        ET.SubElement(j, "parent", link=parent)
        ET.SubElement(j, "child", link=chain.link_names[i])
        ET.SubElement(j, "origin", xyz=_fmt(T[:3, 3]), rpy=_fmt(matrix_to_rpy(T[:3, :3])))
        ET.SubElement(j, "axis", xyz=_fmt(chain.axes[i]))
        lim = {}
        if np.isfinite(chain.q_min[i]):
            lim.update(lower=repr(float(chain.q_min[i])), upper=repr(float(chain.q_max[i])))
        lim["effort"] = repr(float(chain.tau_max[i])) if np.isfinite(chain.tau_max[i]) else "0"
        lim["velocity"] = repr(float(chain.qd_max[i])) if np.isfinite(chain.qd_max[i]) else "0"
        ET.SubElement(j, "limit", **lim)
        damping = chain.damping[i] if len(chain.damping) else 0.0
        friction = chain.friction[i] if len(chain.friction) else 0.0
        ET.SubElement(j, "dynamics", damping=repr(float(damping)), friction=repr(float(friction)))
        link = ET.SubElement(robot, "link", name=chain.link_names[i])
        _inertial_xml(link, chain.params[i])
        if visuals:
            ax = chain.axes[i]
            # cylinder along the joint axis: URDF cylinders lie along z, so tilt z onto the axis
            zhat = np.array([0.0, 0.0, 1.0])
            v = np.cross(zhat, ax)
            if np.linalg.norm(v) < 1e-9:
                rpy = np.zeros(3) if ax[2] > 0 else np.array([math.pi, 0, 0])
            else:
                angle = math.acos(np.clip(ax @ zhat, -1, 1))
                k = v / np.linalg.norm(v)
                K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
                R = np.eye(3) + math.sin(angle) * K + (1 - math.cos(angle)) * K @ K
                rpy = matrix_to_rpy(R)
            for tag in ("visual", "collision"):
                el = ET.SubElement(link, tag)
                ET.SubElement(el, "origin", xyz="0 0 0", rpy=_fmt(rpy))
                geom = ET.SubElement(el, "geometry")
                ET.SubElement(geom, "cylinder", radius="0.04", length="0.08")
        parent = chain.link_names[i]
    ET.indent(robot, space="  ")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".partial")
    ET.ElementTree(robot).write(tmp, encoding="unicode", xml_declaration=True)
    os.replace(tmp, path)
    return path
