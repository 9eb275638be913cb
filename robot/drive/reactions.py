"""The drives' own stop and fault reactions, written to every drive at bring-up (PREOP), so a
drive that loses the master, faults or receives a quick stop decelerates on a ramp within the
arm's limits instead of coasting or switching off while moving.

Objects (CiA 402 / CiA 301): 0x605A quick stop option code, 0x605B shutdown option code, 0x605C
disable operation option code, 0x605E fault reaction option code, 0x6007 abort connection option
code (option codes from ``safety:`` in the drive configuration), 0x6085 quick stop deceleration and
0x6084 profile deceleration (the slow-down ramp) from the joint's acceleration limit [rad/s^2] in
position units (counts of 0x6064) per s^2, and 0x6072 max torque from the joint's torque limit [N*m]
in per mille of the rated torque.
"""
from __future__ import annotations

import math

import numpy as np

from robot.config import DriveConfig, SafetyConfig

#: (index, name) of each object written, in the order written
OBJECTS = ((0x605A, "quick stop option code"), (0x605B, "shutdown option code"),
           (0x605C, "disable operation option code"), (0x605E, "fault reaction option code"),
           (0x6007, "abort connection option code"), (0x6085, "quick stop deceleration"),
           (0x6084, "profile deceleration"), (0x6072, "max torque"))


def decel_counts(drive: DriveConfig, qdd_max: float) -> int:
    """Deceleration `qdd_max` [rad/s^2] of the link in counts of 0x6064 per s^2 (rounded down,
    so the drive's ramp is never steeper than the limit; at least 1)."""
    if not (math.isfinite(qdd_max) and qdd_max > 0):
        raise ValueError(f"joint {drive.joint}: the stop ramp needs a finite acceleration limit > 0, "
                         f"got {qdd_max!r} rad/s^2 (arm description qdd_max)")
    v = int(math.floor(qdd_max * drive.counts_per_link_rev / (2 * math.pi)))
    if v > 0xFFFFFFFF:
        raise ValueError(f"joint {drive.joint}: deceleration {qdd_max} rad/s^2 is {v} counts/s^2, "
                         f"beyond the 32-bit 0x6085")
    return max(1, v)


def max_torque_permille(tau_max: float, rated_torque_link_Nm: float, joint: str) -> int:
    """Torque limit `tau_max` [N*m, link side] in per mille of the drive's rated torque
    [N*m, link side] for 0x6072 (rounded up: the drive must not clip a torque the run may use)."""
    if not (math.isfinite(tau_max) and tau_max > 0):
        raise ValueError(f"joint {joint}: max torque 0x6072 needs a finite torque limit > 0, "
                         f"got {tau_max!r} N*m")
    v = int(math.ceil(tau_max / rated_torque_link_Nm * 1000.0 - 1e-9))
    if v > 0xFFFF:
        raise ValueError(f"joint {joint}: torque limit {tau_max} N*m is {v} per mille of the rated "
                         f"torque {rated_torque_link_Nm} N*m, beyond the 16-bit 0x6072")
    return v


def reaction_sdos(drive: DriveConfig, sc: SafetyConfig, qdd_max: float,
                  tau_max: float) -> list[tuple[int, int, str, int]]:
    """[(index, sub, type, value)] for one drive: the objects of :data:`OBJECTS` in that order.
    `qdd_max` [rad/s^2] and `tau_max` [N*m] are the joint's limits (link side)."""
    dec = decel_counts(drive, qdd_max)
    return [(0x605A, 0, "I16", sc.quick_stop_option), (0x605B, 0, "I16", sc.shutdown_option),
            (0x605C, 0, "I16", sc.disable_operation_option),
            (0x605E, 0, "I16", sc.fault_reaction_option),
            (0x6007, 0, "I16", sc.abort_connection_option),
            (0x6085, 0, "U32", dec), (0x6084, 0, "U32", dec),
            (0x6072, 0, "U16", max_torque_permille(tau_max, drive.rated_torque_Nm, drive.joint))]


def all_reaction_sdos(drives, sc: SafetyConfig, qdd_max: np.ndarray, tau_max: np.ndarray,
                      joint_names: list[str]) -> list[list[tuple[int, int, str, int]]]:
    """Per drive in bus order (the configuration's order): :func:`reaction_sdos` with the limits
    of its joint; `qdd_max`, `tau_max` (n,) in `joint_names` order."""
    by = {j: k for k, j in enumerate(joint_names)}
    return [reaction_sdos(d, sc, float(qdd_max[by[d.joint]]), float(tau_max[by[d.joint]]))
            for d in drives]
