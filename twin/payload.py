"""Payload on the twin's last link: a copy of the arm's URDF with a fixed payload link."""
from __future__ import annotations

import os
import xml.etree.ElementTree as ET


def urdf_with_payload(urdf: str, joint_names: list, payload: dict, out_dir: str) -> str:
    """Copy of `urdf` with a payload link fixed to the last moving joint's child link.

    payload: {mass_kg, com_m (3,), inertia_kgm2 [Ixx, Iyy, Izz, Ixy, Ixz, Iyz] about the COM},
    expressed in the last joint's link frame. Returns the new file's path."""
    tree = ET.parse(urdf)
    root = tree.getroot()
    last = None
    for j in root.findall("joint"):
        if j.get("name") == joint_names[-1]:
            last = j.find("child").get("link")
    if last is None:
        raise ValueError(f"{urdf}: joint {joint_names[-1]!r} not found for the payload")
    I = payload["inertia_kgm2"]
    c = payload["com_m"]
    link = ET.SubElement(root, "link", name="twin_payload")
    inertial = ET.SubElement(link, "inertial")
    ET.SubElement(inertial, "origin", xyz=f"{c[0]!r} {c[1]!r} {c[2]!r}", rpy="0 0 0")
    ET.SubElement(inertial, "mass", value=repr(float(payload["mass_kg"])))
    ET.SubElement(inertial, "inertia", ixx=repr(I[0]), iyy=repr(I[1]), izz=repr(I[2]),
                  ixy=repr(I[3]), ixz=repr(I[4]), iyz=repr(I[5]))
    joint = ET.SubElement(root, "joint", name="twin_payload_fixed", type="fixed")
    ET.SubElement(joint, "parent", link=last)
    ET.SubElement(joint, "child", link="twin_payload")
    ET.SubElement(joint, "origin", xyz="0 0 0", rpy="0 0 0")
    path = os.path.join(out_dir, "arm_with_payload.urdf")
    tree.write(path)
    return path
