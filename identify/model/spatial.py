"""Rotation, transform and inertia helpers shared by the URDF loader, the MDH description and the
regressor. Functions taking `xp` work on numpy arrays and CasADi SX alike."""
from __future__ import annotations

import numpy as np


def skew(v):
    """3x3 cross-product matrix of a 3-vector (numpy)."""
    x, y, z = v
    return np.array([[0.0, -z, y], [z, 0.0, -x], [-y, x, 0.0]])


def rot_x(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])


def rot_y(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0, s], [0, 1.0, 0], [-s, 0, c]])


def rot_z(a: float) -> np.ndarray:
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0], [s, c, 0], [0, 0, 1.0]])


def rpy_to_matrix(rpy) -> np.ndarray:
    """URDF roll-pitch-yaw (fixed axes X, then Y, then Z): R = Rz(y) Ry(p) Rx(r)."""
    r, p, y = rpy
    return rot_z(y) @ rot_y(p) @ rot_x(r)


def matrix_to_rpy(R: np.ndarray) -> np.ndarray:
    """Inverse of :func:`rpy_to_matrix` (pitch in [-pi/2, pi/2])."""
    sp = -R[2, 0]
    p = np.arcsin(np.clip(sp, -1.0, 1.0))
    if abs(np.cos(p)) > 1e-9:
        r = np.arctan2(R[2, 1], R[2, 2])
        y = np.arctan2(R[1, 0], R[0, 0])
    else:  # gimbal lock: put everything in yaw
        r = 0.0
        y = np.arctan2(-R[0, 1], R[1, 1])
    return np.array([r, p, y])


def transform(R: np.ndarray, p) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = p
    return T


def axis_rotation(axis, angle, xp=np):
    """Rotation by `angle` about unit `axis` (Rodrigues). Works for numpy (xp=np) and CasADi
    (xp=casadi, angle an SX scalar); a principal axis gives the exact sparse matrix."""
    ax = np.asarray(axis, dtype=float)
    c, s = xp.cos(angle), xp.sin(angle)
    for k, (i, j) in enumerate(((1, 2), (2, 0), (0, 1))):  # rotations about x, y, z
        e = np.zeros(3)
        e[k] = 1.0
        for sign in (1.0, -1.0):
            if np.allclose(ax, sign * e):
                R = [[0.0] * 3 for _ in range(3)]
                R[k][k] = 1.0
                R[i][i] = c
                R[j][j] = c
                R[i][j] = -sign * s
                R[j][i] = sign * s
                return R
    K = skew(ax)
    K2 = K @ K
    return [[(1.0 if a == b else 0.0) + s * K[a, b] + (1 - c) * K2[a, b] for b in range(3)]
            for a in range(3)]


def inertia_about_origin(mass: float, com, I_com) -> np.ndarray:
    """Inertia tensor about the frame origin from the one about the centre of mass (3x3)."""
    c = np.asarray(com, dtype=float)
    return np.asarray(I_com, dtype=float) + mass * (c @ c * np.eye(3) - np.outer(c, c))


def params_from_inertial(mass: float, com, I_com) -> np.ndarray:
    """Standard 10-vector [m, mcx, mcy, mcz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz] (inertia about origin)."""
    I = inertia_about_origin(mass, com, I_com)
    c = np.asarray(com, dtype=float)
    return np.array([mass, *(mass * c), I[0, 0], I[0, 1], I[1, 1], I[0, 2], I[1, 2], I[2, 2]])


def inertial_from_params(p) -> tuple[float, np.ndarray, np.ndarray]:
    """Inverse of :func:`params_from_inertial`: (mass, com (3,), inertia about com (3,3))."""
    p = np.asarray(p, dtype=float)
    m = float(p[0])
    if m <= 0:
        raise ValueError(f"mass must be positive to convert to a centre of mass, got {m}")
    c = p[1:4] / m
    I_o = np.array([[p[4], p[5], p[7]], [p[5], p[6], p[8]], [p[7], p[8], p[9]]])
    I_c = I_o - m * (c @ c * np.eye(3) - np.outer(c, c))
    return m, c, I_c


def pseudo_inertia(p) -> np.ndarray:
    """4x4 pseudo-inertia J = [[0.5 tr(I) 1 - I, h], [h^T, m]] of a 10-vector; PSD <=> physical."""
    p = np.asarray(p, dtype=float)
    I = np.array([[p[4], p[5], p[7]], [p[5], p[6], p[8]], [p[7], p[8], p[9]]])
    J = np.zeros((4, 4))
    J[:3, :3] = 0.5 * np.trace(I) * np.eye(3) - I
    J[:3, 3] = J[3, :3] = p[1:4]
    J[3, 3] = p[0]
    return J


def combine_inertials(parts) -> np.ndarray:
    """Sum rigidly attached bodies: `parts` is an iterable of (T (4x4) body frame -> target frame,
    10-vector in body frame). Returns the 10-vector of the union in the target frame."""
    total = np.zeros(10)
    for T, p in parts:
        R, t = T[:3, :3], T[:3, 3]
        m = p[0]
        h = p[1:4]
        I_o = np.array([[p[4], p[5], p[7]], [p[5], p[6], p[8]], [p[7], p[8], p[9]]])
        # rotate to target axes (about the body origin), then shift the origin by t
        I_r = R @ I_o @ R.T
        h_r = R @ h
        I_t = I_r + m * (t @ t * np.eye(3) - np.outer(t, t)) - (np.outer(t, h_r) + np.outer(h_r, t)
                                                              - 2 * (t @ h_r) * np.eye(3))
        h_t = h_r + m * t
        total += np.array([m, *h_t, I_t[0, 0], I_t[0, 1], I_t[1, 1], I_t[0, 2], I_t[1, 2], I_t[2, 2]])
    return total
