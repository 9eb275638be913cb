"""Payload physics: checks that a payload's mass, centre of mass and inertia describe a physical
body, and its standard 10-vector in the frame of a model's last link.

A payload is fixed to the flange (the child link of the URDF's last moving joint): mass [kg],
centre of mass [m] and inertia about the centre of mass [kg*m^2, order Ixx, Iyy, Izz, Ixy, Ixz,
Iyz], all in the flange frame."""
from __future__ import annotations

import math

import numpy as np

from .spatial import combine_inertials, params_from_inertial
from .urdf import load_chain

__all__ = ["payload_problem", "payload_in_model_frame", "hold_problem"]


def payload_problem(mass_kg, com_m, inertia_kgm2) -> tuple[str, str] | None:
    """Why a payload is physically impossible, as (key, message), or None when it is fine.

    mass_kg > 0 and finite; com_m (3,) finite [m]; inertia_kgm2 [Ixx, Iyy, Izz, Ixy, Ixz, Iyz]
    about the CoM [kg*m^2]: finite, positive definite, and its principal moments satisfy the
    triangle inequalities (I1 + I2 >= I3). All zeros is accepted: a point mass."""
    import numpy as np
    try:
        m = float(mass_kg)
        c = np.asarray(com_m, float).reshape(-1)
        v = np.asarray(inertia_kgm2, float).reshape(-1)
    except (TypeError, ValueError) as exc:
        return "", f"not numeric ({exc})"
    if not (math.isfinite(m) and m > 0):
        return "mass_kg", f"must be a finite number > 0, got {mass_kg!r}"
    if c.shape != (3,) or not np.all(np.isfinite(c)):
        return "com_m", f"must be 3 finite numbers, got {list(c)}"
    if v.shape != (6,) or not np.all(np.isfinite(v)):
        return "inertia_kgm2", f"must be 6 finite numbers [Ixx, Iyy, Izz, Ixy, Ixz, Iyz], got {list(v)}"
    if not np.any(v):
        return None
    Ixx, Iyy, Izz, Ixy, Ixz, Iyz = v
    lam = np.linalg.eigvalsh(np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]]))
    tol = 1e-12 * max(1.0, float(np.max(np.abs(lam))))
    if lam[0] <= tol:
        return "inertia_kgm2", (f"not positive definite (principal moments {np.round(lam, 12).tolist()} "
                                f"kg*m^2); a physical body needs all > 0 (all zeros = point mass)")
    if lam[0] + lam[1] < lam[2] - tol:
        return "inertia_kgm2", (f"principal moments {np.round(lam, 12).tolist()} kg*m^2 violate the "
                                f"triangle inequality I1 + I2 >= I3 (no physical body has them)")
    return None


def payload_in_model_frame(urdf, model, payload) -> np.ndarray:
    """Standard 10-vector of a flange payload in the frame of the model's last link.

    The twin fixes the payload to the child link of the URDF's last moving joint (the flange
    frame). When the model is a joint subset that leaves out the last joints, they are locked at
    zero and the payload is carried by the model's last link: its 10-vector is moved through the
    chain's placements (identify.model.spatial.combine_inertials)."""
    Ixx, Iyy, Izz, Ixy, Ixz, Iyz = payload.inertia_kgm2
    I_c = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    p_flange = params_from_inertial(payload.mass_kg, np.asarray(payload.com_m, float), I_c)
    full = load_chain(urdf)
    last = model.joint_names[-1]
    if last not in full.joint_names:
        raise ValueError(f"{urdf}: the model's last joint {last!r} is not a moving joint of the URDF")
    k = list(full.joint_names).index(last)
    T = np.eye(4)
    for i in range(k + 1, len(full.joint_names)):   # locked at q = 0: joint i in joint i-1's frame
        T = T @ full.placements[i]
    return combine_inertials([(T, p_flange)])


#: a payload is refused when, in every pose sampled within the joint limits, some joint would
#: need more than this multiple of its torque limit just to hold the arm still: the margin
#: keeps a payload that fits in a pose between the samples from being refused
HOLD_FACTOR = 2.0


def hold_problem(model, payload10: np.ndarray, n_poses: int = 512, seed: int = 0
                 ) -> str | None:
    """Why the arm cannot hold the payload still in any pose, or None.

    model: RobotModel of the arm without the payload (limits.tau_max [N*m] per joint);
    payload10: (10,) standard inertial parameters of the payload in the frame of the model's last
    link (:func:`payload_in_model_frame`). The gravity torque RNEA(q, 0, 0) of the arm with the
    payload is evaluated on `n_poses` poses drawn uniformly within the joint limits (seeded);
    the payload is refused when even the most favourable pose needs more than HOLD_FACTOR x a
    joint's limit (a payload like that stops the twin's loop and the real drives alike)."""
    p = model.inertial_parameters()
    p[-10:] += np.asarray(payload10, float)
    loaded = model.with_params(p)
    lim = loaded.limits
    rng = np.random.default_rng(seed)
    q = rng.uniform(lim.q_min, lim.q_max, size=(n_poses, loaded.n))
    z = np.zeros_like(q)
    tau = np.abs(loaded.inverse_dynamics(q, z, z))
    ratio = tau / np.asarray(lim.tau_max, float)
    worst = ratio.max(axis=1)               # per pose: the joint nearest to / furthest over
    k = int(np.argmin(worst))               # the most favourable pose
    if worst[k] <= HOLD_FACTOR:
        return None
    j = int(np.argmax(ratio[k]))
    return (f"the arm cannot hold this payload in any pose: in the most favourable of {n_poses} "
            f"poses sampled within the joint limits, joint {loaded.joint_names[j]} needs "
            f"{tau[k, j]:.4g} N*m of gravity torque, {worst[k]:.3g}x its limit of "
            f"{float(lim.tau_max[j]):g} N*m")

