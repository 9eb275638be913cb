"""Which torque signals a run has, and the identification settings they call for.

Signals: ``tau_j`` (a joint torque sensor, link side) and ``tau_m`` (motor torque eta*beta*i,
from currents and gains, or logged as such). ``identification.joint_model: auto`` fits what the
signals allow:

| signals | joint_model | fitted signal |
|---|---|---|
| tau_j and tau_m | both (simplified and improved) | motor torque eta*beta*i (headline) |
| tau_m only | simplified (rigid body + friction) | motor torque eta*beta*i |
| tau_j only | simplified (rigid body + friction) on the joint torque | joint torque |

An explicit choice the data cannot support is refused (:func:`resolve_joint_model` raises naming
the missing signal). The other ``auto`` keys (physical_consistency, offset, armature,
coulomb_shape) take the defaults that fit real arms (``from_logs``) or the twin's model;
``friction: default`` becomes ``auto`` (per-joint terms chosen by cross-validation) for logs
fitted with the simplified model and ``terms`` otherwise.
"""
from __future__ import annotations

import dataclasses

__all__ = ["SIGNAL_NAMES", "resolve_joint_model", "resolve_identification"]

SIGNAL_NAMES = {"tau_j": "joint torque", "tau_m": "motor torque η·β·i"}
_NEEDS = {"simplified": ("tau_m",), "improved": ("tau_j", "tau_m"), "both": ("tau_j", "tau_m")}
_HOW = {"tau_j": "a joint torque sensor (columns.tau_j / topics.tau_j)",
        "tau_m": "motor currents with gains (columns.i_m / topics.i_m + current_gains / "
                 "arm.drives) or motor torques (columns.tau_m / topics.tau_m)"}


def resolve_joint_model(requested: str, has_tau_j: bool, has_tau_m: bool) -> tuple[str, str]:
    """(joint_model, fitted signal "tau_j" | "tau_m") for the available signals.

    Raises ValueError naming the missing signal when `requested` cannot be fitted."""
    have = {"tau_j": bool(has_tau_j), "tau_m": bool(has_tau_m)}
    if not any(have.values()):
        raise ValueError("the data have no torque signal: map a joint torque (tau_j), motor "
                         "currents (i_m) or motor torques (tau_m)")
    if requested == "auto":
        if have["tau_j"] and have["tau_m"]:
            return "both", "tau_m"
        return "simplified", "tau_m" if have["tau_m"] else "tau_j"
    missing = [s for s in _NEEDS[requested] if not have[s]]
    if missing:
        what = " and ".join(f"the {SIGNAL_NAMES[s]} ({_HOW[s]})" for s in missing)
        alt = ("; joint_model: auto fits rigid body + friction on the "
               + SIGNAL_NAMES["tau_j" if have["tau_j"] else "tau_m"])
        raise ValueError(f"joint_model: {requested} needs {what}, which the data do not have{alt}")
    return requested, "tau_m"


def resolve_identification(spec, has_tau_j: bool, has_tau_m: bool, *, from_logs: bool):
    """The IdentificationSpec with every ``auto`` replaced by the value used, and the fitted
    signal ("tau_j" | "tau_m"). friction_terms gets offset / armature appended when on."""
    jm, signal = resolve_joint_model(spec.joint_model, has_tau_j, has_tau_m)
    pc = spec.physical_consistency
    if pc == "auto":
        pc = bool(from_logs)
    off = spec.offset if spec.offset != "auto" else \
        bool(from_logs or "offset" in spec.friction_terms)
    arm = spec.armature if spec.armature != "auto" else \
        bool((from_logs and jm == "simplified" and signal == "tau_m")
             or "armature" in spec.friction_terms)
    shape = spec.coulomb_shape if spec.coulomb_shape != "auto" else \
        ("tanh" if from_logs else "sign")
    friction = spec.friction
    if friction == "default":
        friction = "auto" if from_logs and jm == "simplified" else "terms"
    elif friction == "auto" and jm != "simplified":
        raise ValueError(f"identification.friction: auto chooses the terms of the simplified "
                         f"model on one torque signal; joint_model resolves to {jm} (set "
                         f"joint_model: simplified, or friction: terms)")
    terms = list(spec.friction_terms)
    for t, on in (("offset", off), ("armature", arm)):
        if on and t not in terms:
            terms.append(t)
        if not on and t in terms:
            terms.remove(t)
    return dataclasses.replace(spec, joint_model=jm, friction=friction,
                               physical_consistency=pc, offset=off,
                               armature=arm, coulomb_shape=shape,
                               friction_terms=tuple(terms)), signal
