"""Bus integers <-> SI for the arm's drives: counts <-> rad, per mille <-> N*m / A, joint order, signs.

All functions are vectorized: arrays (..., n) in the model's joint order on the SI side and in bus
order on the bus side (the bus order is the order of ``drives`` in the configuration file).

Scaling (see assets/cobot6_ethercat.yaml):
  position_actual / target_position: counts of the position encoder, ``counts_per_link_rev`` per
      link revolution (link-side encoder: encoder_counts_per_rev; motor encoder: x gear ratio);
  velocity_actual: counts/s;
  torque_actual / torque_offset: per mille of ``rated_torque_Nm`` (motor torque reflected to the
      link side, tau'_m = eta * beta * i);
  current_actual: per mille of ``rated_current_A``;
  joint_torque: units of ``joint_torque_scale_Nm`` (torque sensor, tau_r).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from robot.config import EthercatConfig

I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
I16_MIN, I16_MAX = -(1 << 15), (1 << 15) - 1


@dataclass(frozen=True)
class Units:
    """Per-joint conversion factors, all (n,) arrays in the MODEL's joint order.

    bus_of_joint[j]: bus position of model joint j; joint_of_bus[k]: model joint of bus slave k.
    rad_per_count: signed (includes the drive sign) [rad/count].
    nm_per_permille: signed [N*m per mille]; a_per_permille: signed [A per mille];
    nm_per_sensor_unit: signed [N*m per unit].
    """
    joint_names: tuple[str, ...]
    bus_of_joint: np.ndarray
    joint_of_bus: np.ndarray
    rad_per_count: np.ndarray
    nm_per_permille: np.ndarray
    a_per_permille: np.ndarray
    nm_per_sensor_unit: np.ndarray
    torque_per_amp: np.ndarray   # eta * beta [N*m/A], link side (unsigned)

    @property
    def n(self) -> int:
        return len(self.joint_names)

    # -- order ------------------------------------------------------------------------------
    def to_joint_order(self, bus_values: np.ndarray) -> np.ndarray:
        """(..., n) in bus order -> (..., n) in model joint order."""
        return np.asarray(bus_values)[..., self.bus_of_joint]

    def to_bus_order(self, joint_values: np.ndarray) -> np.ndarray:
        """(..., n) in model joint order -> (..., n) in bus order."""
        return np.asarray(joint_values)[..., self.joint_of_bus]

    # -- bus (bus order, integers) -> SI (joint order) -----------------------------------------
    def position(self, counts: np.ndarray) -> np.ndarray:
        """position_actual counts (..., n bus order) -> link angle [rad] (..., n joint order)."""
        return self.to_joint_order(np.asarray(counts, dtype=float)) * self.rad_per_count

    def velocity(self, counts_s: np.ndarray) -> np.ndarray:
        """velocity_actual [counts/s] -> [rad/s]."""
        return self.to_joint_order(np.asarray(counts_s, dtype=float)) * self.rad_per_count

    def motor_torque(self, permille: np.ndarray) -> np.ndarray:
        """torque_actual [per mille of rated] -> reflected motor torque tau'_m [N*m]."""
        return self.to_joint_order(np.asarray(permille, dtype=float)) * self.nm_per_permille

    def current(self, permille: np.ndarray) -> np.ndarray:
        """current_actual [per mille of rated current] -> motor current [A]."""
        return self.to_joint_order(np.asarray(permille, dtype=float)) * self.a_per_permille

    def joint_torque(self, units: np.ndarray) -> np.ndarray:
        """joint_torque sensor units -> tau_r [N*m]."""
        return self.to_joint_order(np.asarray(units, dtype=float)) * self.nm_per_sensor_unit

    # -- SI (joint order) -> bus integers (bus order) -------------------------------------------
    def position_counts(self, q: np.ndarray) -> np.ndarray:
        """Link angle [rad] (..., n joint order) -> target_position counts (int64, bus order).

        Raises ValueError naming joint and sample if a value does not fit a 32-bit counter."""
        c = np.rint(np.asarray(q, dtype=float) / self.rad_per_count)
        _check_range(c, I32_MIN, I32_MAX, self.joint_names, "target_position (rad -> counts)")
        return self.to_bus_order(c.astype(np.int64))

    def torque_permille(self, tau: np.ndarray) -> np.ndarray:
        """Feed-forward torque [N*m] (..., n joint order) -> torque_offset per mille (bus order)."""
        c = np.rint(np.asarray(tau, dtype=float) / self.nm_per_permille)
        _check_range(c, I16_MIN, I16_MAX, self.joint_names, "torque_offset (N*m -> per mille)")
        return self.to_bus_order(c.astype(np.int64))


def _check_range(c, lo, hi, names, what):
    bad = ~((c >= lo) & (c <= hi))
    if np.any(bad):
        idx = np.argwhere(bad)[0]
        j = int(idx[-1])
        where = f" at sample {int(idx[0])}" if c.ndim > 1 else ""
        raise ValueError(f"{what}: joint {names[j]}{where} gives {c[tuple(idx)]:.0f}, "
                         f"outside [{lo}, {hi}]")


def make_units(cfg: EthercatConfig, joint_names: list[str] | None = None) -> Units:
    """Conversion factors for the drives in `cfg`, columns in `joint_names` order (default: the
    configuration's own order). Every model joint must have exactly one drive."""
    bus_names = cfg.joint_names
    names = list(joint_names) if joint_names is not None else list(bus_names)
    missing = [j for j in names if j not in bus_names]
    extra = [j for j in bus_names if j not in names]
    if missing or extra:
        raise ValueError(f"{cfg.path}: drives do not match the model's joints: "
                         f"no drive for {missing}, drives without joint {extra}")
    bus_of_joint = np.array([bus_names.index(j) for j in names])
    joint_of_bus = np.argsort(bus_of_joint)
    d = [cfg.drives[k] for k in bus_of_joint]
    sign = np.array([x.sign for x in d], dtype=float)
    return Units(
        joint_names=tuple(names), bus_of_joint=bus_of_joint, joint_of_bus=joint_of_bus,
        rad_per_count=sign * 2.0 * np.pi / np.array([x.counts_per_link_rev for x in d], float),
        nm_per_permille=sign * np.array([x.rated_torque_Nm for x in d]) / 1000.0,
        a_per_permille=sign * np.array([x.rated_current_A for x in d]) / 1000.0,
        nm_per_sensor_unit=sign * np.array([x.joint_torque_scale_Nm for x in d]),
        torque_per_amp=np.array([x.gear_ratio * x.torque_constant_Nm_A for x in d]))
