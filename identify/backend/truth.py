"""Typed truth a simulating backend states about its drives: :class:`DriveTruth` (the reducer law
and every drive coefficient as simulated) with :class:`LawTruth` entries for the further friction
and ripple laws in effect. The twin fills it (twin/truth.py); identify.app.truth reads it to judge
an identification; :class:`identify.backend.Recording` carries it (``Recording.drive_truth``) and
stores it in its NPZ header (older files, which held a plain dict in ``meta["drive_truth"]``, load
through :meth:`DriveTruth.from_dict`).

Names and units as in docs/joint_models.md (per joint, link side, SI): ``xi_opp``, ``xi_lin`` [-],
``f_mc`` [N*m], ``f_mv`` [N*m*s/rad], ``J_m`` (reflected rotor inertia eta^2 J_m) [kg*m^2],
``J_m/K`` [s^2], stage 1 ``viscous`` [N*m*s/rad], ``coulomb`` [N*m]. None where the simulated law
has no constant value of that coefficient (e.g. xi under a speed-dependent reducer law).

May import only identify.model / identify.common (the backend contract package).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

#: coefficient key (docs/joint_models.md, the old dict's keys) -> DriveTruth attribute
COEFFICIENTS = {"xi_opp": "xi_opp", "xi_lin": "xi_lin", "xi_nominal": "xi_nominal", "f_mc": "f_mc",
                "f_mv": "f_mv", "J_m": "J_m", "J_m/K": "J_m_over_K", "viscous": "viscous",
                "coulomb": "coulomb"}
#: units of the coefficients
UNITS = {"xi_opp": "-", "xi_lin": "-", "f_mc": "N*m", "f_mv": "N*m*s/rad",
         "J_m": "kg*m^2 (reflected, eta^2 J_m)", "J_m/K": "s^2", "viscous": "N*m*s/rad",
         "coulomb": "N*m"}


def _vec(v, where: str, n: int | None = None) -> tuple | None:
    """A per-joint tuple of floats (None stays None; a None entry makes the whole value None)."""
    if v is None:
        return None
    vals = list(v)
    if any(x is None for x in vals):
        return None
    out = tuple(float(x) for x in vals)
    if n is not None and len(out) != n:
        raise ValueError(f"drive truth: {where} has {len(out)} values, expected {n} (one per joint)")
    return out


def _opt_list(v) -> tuple | None:
    """Per-joint values that may hold None entries (e.g. xi_realized), as a tuple."""
    return None if v is None else tuple(None if x is None else float(x) for x in v)


@dataclass(frozen=True)
class LawTruth:
    """One further law the backend simulated (presliding friction, load-dependent friction,
    torque ripple, friction drift ...): its name, the formula in words, the per-joint parameters
    (name with unit suffix -> (n,) tuple, SI) and the source it follows."""

    name: str
    formula: str
    params: dict
    source: str = ""

    def param(self, key: str) -> np.ndarray:
        """Per-joint parameter `key` as an (n,) array; KeyError naming the valid keys."""
        if key not in self.params:
            raise KeyError(f"law {self.name!r} has no parameter {key!r}; it has {sorted(self.params)}")
        return np.asarray(self.params[key], float)

    def to_dict(self) -> dict:
        return {"name": self.name, "formula": self.formula,
                "params": {k: (list(v) if isinstance(v, (tuple, list)) else v)
                           for k, v in self.params.items()}, "source": self.source}

    @staticmethod
    def from_dict(d: dict) -> "LawTruth":
        params = {k: (tuple(float(x) for x in v) if isinstance(v, (list, tuple)) else v)
                  for k, v in dict(d.get("params") or {}).items()}
        return LawTruth(str(d["name"]), str(d.get("formula", "")), params, str(d.get("source", "")))


@dataclass(frozen=True)
class DriveTruth:
    """The drive truth of one run (per joint of ``joints``, link side, SI; module doc for names).

    law / shared_with_variant / dissipative / law_description: the reducer loss law, the
    identification variant that assumes the same form (None: none does), whether the loss never
    does positive work, and its parameters as read; law_params: the law's per-joint step
    parameters where it has no constant xi; constant_parameter_truth / not_constant: per stage
    ("stage1", "stage2") whether a constant-parameter truth exists, and why not; xi_realized /
    xi_realized_max_rel_dev: the loss coefficient measured on the run's truth channels (None
    entries where no sample qualifies); laws: the further laws in effect (:class:`LawTruth`)."""

    joints: tuple
    law: str
    shared_with_variant: str | None
    dissipative: bool
    xi_opp: tuple | None
    xi_lin: tuple | None
    xi_nominal: tuple
    f_mc: tuple
    f_mv: tuple
    J_m: tuple
    J_m_over_K: tuple
    viscous: tuple
    coulomb: tuple
    constant_parameter_truth: dict
    not_constant: dict
    law_description: dict = field(default_factory=dict)
    law_params: dict | None = None
    xi_realized: tuple | None = None
    xi_realized_max_rel_dev: tuple | None = None
    laws: tuple = ()

    def coefficient(self, key: str, joint_names=None) -> np.ndarray | None:
        """Coefficient `key` (a :data:`COEFFICIENTS` key) as an (n,) array, reordered to
        `joint_names` (None: as stored); None where the law has no constant value."""
        if key not in COEFFICIENTS:
            raise KeyError(f"drive truth has no coefficient {key!r}; valid: {list(COEFFICIENTS)}")
        v = getattr(self, COEFFICIENTS[key])
        if v is None:
            return None
        a = np.asarray(v, float)
        return a if joint_names is None else a[self.order(joint_names)]

    def order(self, joint_names) -> list:
        """Indices into ``joints`` of `joint_names`; ValueError naming a joint the truth lacks."""
        missing = [j for j in joint_names if j not in self.joints]
        if missing:
            raise ValueError(f"drive truth: joints {missing} not in the recorded truth {list(self.joints)}")
        return [self.joints.index(j) for j in joint_names]

    def law_truth(self, name: str) -> LawTruth | None:
        """The further law `name` in effect, None if it was not simulated."""
        return next((lt for lt in self.laws if lt.name == name), None)

    def to_dict(self) -> dict:
        """JSON-ready dict (the keys of the former ``meta["drive_truth"]`` dict, plus ``laws``)."""
        out = {"joints": list(self.joints), "law": self.law,
               "shared_with_variant": self.shared_with_variant, "dissipative": self.dissipative,
               "params": dict(self.law_description)}
        for key in COEFFICIENTS:
            v = getattr(self, COEFFICIENTS[key])
            out[key] = None if v is None else list(v)
        out["constant_parameter_truth"] = dict(self.constant_parameter_truth)
        out["not_constant"] = {k: list(v) for k, v in self.not_constant.items()}
        out["units"] = dict(UNITS)
        if self.law_params is not None:
            out["law_params"] = {k: list(v) for k, v in self.law_params.items()}
        if self.xi_realized is not None:
            out["xi_realized"] = list(self.xi_realized)
            out["xi_realized_max_rel_dev"] = (None if self.xi_realized_max_rel_dev is None
                                              else list(self.xi_realized_max_rel_dev))
        out["laws"] = [lt.to_dict() for lt in self.laws]
        return out

    @staticmethod
    def from_dict(d: dict, where: str = "drive truth") -> "DriveTruth":
        """From :meth:`to_dict`'s form, or the plain dict older recordings kept in
        ``meta["drive_truth"]`` (no ``laws``). ValueError naming `where` and the key at fault."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected a mapping, got {type(d).__name__}")
        try:
            joints = tuple(str(j) for j in d["joints"])
            n = len(joints)
            kw = {COEFFICIENTS[k]: _vec(d.get(k), f"{where}.{k}", n) for k in COEFFICIENTS}
            for k in ("xi_nominal", "f_mc", "f_mv", "J_m", "J_m/K", "viscous", "coulomb"):
                if kw[COEFFICIENTS[k]] is None:
                    raise ValueError(f"{where}: key {k!r} missing (one number per joint needed)")
            lp = d.get("law_params")
            return DriveTruth(
                joints=joints, law=str(d["law"]), shared_with_variant=d.get("shared_with_variant"),
                dissipative=bool(d.get("dissipative", True)),
                constant_parameter_truth={k: bool(v) for k, v in
                                          (d.get("constant_parameter_truth") or {}).items()},
                not_constant={k: [str(r) for r in v or []]
                              for k, v in (d.get("not_constant") or {}).items()},
                law_description=dict(d.get("params") or {}),
                law_params=None if lp is None else {k: _vec(v, f"{where}.law_params.{k}", n)
                                                    for k, v in lp.items()},
                xi_realized=_opt_list(d.get("xi_realized")),
                xi_realized_max_rel_dev=_opt_list(d.get("xi_realized_max_rel_dev")),
                laws=tuple(LawTruth.from_dict(x) for x in d.get("laws") or []), **kw)
        except KeyError as exc:
            raise ValueError(f"{where}: key {exc.args[0]!r} missing") from exc
