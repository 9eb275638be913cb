"""The twin's ground truth of every drive coefficient, as simulated: ``Recording.drive_truth``
(:class:`identify.backend.truth.DriveTruth`).

Names as in docs/joint_models.md and identify.app.truth.true_link_parameters (per joint, link side,
SI): stage 2 ``xi_opp``, ``xi_lin`` [-], ``f_mc`` [N*m], ``f_mv`` [N*m*s/rad], ``J_m`` (the
REFLECTED rotor inertia eta^2 J_m, as the identification's a4 / (1 - xi)) [kg*m^2], ``J_m/K``
[s^2]; stage 1 (link side) ``viscous`` [N*m*s/rad], ``coulomb`` [N*m]. Switched-off sources are 0.

The reducer law (twin.reducer) decides which loss coefficient is a constant truth: ``opposing``
-> xi_opp = xi, xi_lin = 0; ``paper`` -> xi_lin = xi, xi_opp = 0; ``load_speed`` and
``speed_efficiency`` -> none (None), their parameters in ``law_params``. ``xi_realized`` is measured on the run's own truth channels
(sliding motor samples, |tau_in| above 5 % of the joint's largest): for the opposing law
sum |tau_rf| |tau_in| / sum tau_in^2, for the paper law sum tau_rf tau_in / sum tau_in^2 (and for
the other laws the opposing-equivalent value, not a truth); ``xi_realized_max_rel_dev`` the largest
relative deviation of one sample from the law (None for the other laws). Both are None where no
sample qualifies. The further laws switched on (load-dependent and presliding link friction,
ripple, drift) are stated in ``DriveTruth.laws`` (:func:`law_truths`).
"""
from __future__ import annotations

import numpy as np

from identify.backend.truth import DriveTruth, LawTruth

from .reducer import ReducerLaw

#: reducer laws with a constant loss coefficient (xi_opp or xi_lin is a truth)
CONSTANT_XI_LAWS = ("opposing", "paper")
#: why a reducer law has no constant xi (stage 2 not applicable)
NO_CONSTANT_XI = {
    "load_speed": "reducer_friction_law: load_speed -- the loss coefficient depends on speed and a "
                  "Stribeck drag is added; no identification variant shares this law, so xi has no "
                  "constant truth",
    "speed_efficiency": "reducer_friction_law: speed_efficiency -- the efficiency falls with speed "
                        "(mu from r0 xi to r_inf xi) and differs by power-flow direction; no "
                        "identification variant shares this law, so xi has no constant truth",
}
#: further link-friction laws under which stage 1's constant Coulomb level is not a truth
_LINK_LAWS_NOT_CONSTANT = {
    "load_friction": "link_friction_load_driving/braking != 0 -- the link Coulomb level grows with "
                     "the transmitted torque (4-quadrant)",
    "presliding": "presliding_rad != 0 -- Dahl presliding link friction (a friction state, "
                  "direction memory at rest)",
}

#: twin options under which a friction coefficient is not one constant (as in identify.app.truth)
_NOT_CONSTANT = {
    "stribeck": "stribeck: Coulomb friction with a Stribeck peak at low speed",
    "coulomb_asymmetry": "coulomb_asymmetry: different Coulomb levels in the two directions",
    "friction_drift": "friction_drift: friction changes during the run (warm-up)",
}


def realized_xi(law: ReducerLaw, truth: dict, frac: float = 0.05) -> tuple[list, list]:
    """(xi_realized, max relative deviation) per joint from truth channels tau_in, tau_hd,
    stick_m (N, n) of a run (see module doc); entries None where no sample qualifies."""
    tin, thd, stick = (np.asarray(truth[k], float) for k in ("tau_in", "tau_hd", "stick_m"))
    xi_r, dev = [], []
    for j in range(tin.shape[1]):
        a, b = tin[:, j], thd[:, j]
        big = np.abs(a) > frac * max(np.abs(a).max(), 1e-12)
        ok = (stick[:, j] == 0) & big & (np.abs(a) > 1e-9)
        if law.name == "paper":
            ok = big
        if not ok.any() or law.xi[j] == 0:
            xi_r.append(None if not ok.any() else 0.0)
            dev.append(None)
            continue
        a, b = a[ok], b[ok]
        if law.name == "paper":
            x = float(a @ b / (a @ a))
            d = np.abs(b - law.xi[j] * a) / (law.xi[j] * np.abs(a))
        else:
            x = float(np.abs(a) @ np.abs(b) / (a @ a))
            d = np.abs(np.abs(b) - law.xi[j] * np.abs(a)) / (law.xi[j] * np.abs(a))
        xi_r.append(x)
        dev.append(float(d.max()) if law.name in CONSTANT_XI_LAWS else None)
    return xi_r, dev


def drive_truth(cfg, law: ReducerLaw, truth: dict | None = None, cols=None) -> DriveTruth:
    """The :class:`~identify.backend.truth.DriveTruth` of a run with TwinConfig `cfg` and reducer
    `law` (the further laws from :func:`law_truths`); truth: the run's truth channels (N, k) of
    the recorded joints `cols` (indices into cfg's joints; None: all)."""
    s, d = cfg.settings, cfg.drives
    idx = np.arange(cfg.n) if cols is None else np.asarray(cols, int)
    dm = bool(s.drive_model)
    on = {k: dm and bool(getattr(s, k)) for k in ("motor_friction", "harmonic_friction", "link_friction")}
    pick = lambda a: tuple(float(x) for x in np.asarray(a, float)[idx])      # noqa: E731
    xi = d.xi * on["harmonic_friction"]
    zero = np.zeros(cfg.n)
    xi_opp, xi_lin = {"opposing": (xi, zero), "paper": (zero, xi)}.get(law.name, (None, None))
    J_r = d.J_r * dm
    reasons = [r for k, r in _NOT_CONSTANT.items()
               if (k == "stribeck" and s.stribeck)
               or (k == "coulomb_asymmetry" and np.any(np.asarray(s.coulomb_asymmetry, float) != 0))
               or (k == "friction_drift" and float(s.friction_drift) != 0)]
    laws = law_truths(cfg, idx)
    na = {"stage1": ([f"{r} (link friction)" for r in reasons]
                     + [r for k, r in _LINK_LAWS_NOT_CONSTANT.items()
                        if any(lt.name == k for lt in laws)]) if on["link_friction"] else [],
          "stage2": [f"{r} (motor friction)" for r in reasons] if on["motor_friction"] else []}
    if not dm:
        na["stage2"].append("drive_model: false -- no drive (tau_m = tau_j), no stage-2 coefficients")
    elif law.name not in CONSTANT_XI_LAWS and on["harmonic_friction"]:
        na["stage2"].append(NO_CONSTANT_XI[law.name])
    desc = law.describe()
    kw = {}
    if law.name not in CONSTANT_XI_LAWS:
        kw["law_params"] = {"mu0": pick(law.mu0), "mu1": pick(law.mu1), "w_mu_rad_s": pick(law.w_mu),
                            "F0_Nm": pick(law.F0), "w_s_rad_s": pick(law.w_s)}
    if truth is not None and dm:
        xr, dev = realized_xi(law.subset(idx), truth)
        kw["xi_realized"] = tuple(xr)
        kw["xi_realized_max_rel_dev"] = tuple(dev)
    return DriveTruth(
        joints=tuple(cfg.joint_names[j] for j in idx), law=desc["law"],
        shared_with_variant=desc["shared_with_variant"], dissipative=desc["dissipative"],
        law_description=desc["params"],
        xi_opp=None if xi_opp is None else pick(xi_opp), xi_lin=None if xi_lin is None else pick(xi_lin),
        xi_nominal=pick(xi), f_mc=pick(d.motor_coulomb * on["motor_friction"]),
        f_mv=pick(d.motor_viscous * on["motor_friction"]), J_m=pick(J_r), J_m_over_K=pick(J_r / d.stiffness),
        viscous=pick(d.link_viscous * on["link_friction"]), coulomb=pick(d.link_coulomb * on["link_friction"]),
        constant_parameter_truth={k: not v for k, v in na.items()}, not_constant=na,
        laws=laws, **kw)


def law_truths(cfg, idx=None) -> tuple:
    """The further laws of a run with TwinConfig `cfg` that are switched on, as
    :class:`LawTruth` of the joints `idx` (None: all): ``load_friction`` (link Coulomb + k |tau_r|,
    4-quadrant), ``presliding`` (Dahl link friction), ``ripple`` (motor-side torque ripple) and
    ``friction_drift`` (warm-up). Parameters per joint, SI (docs/twin.md "Twin laws")."""
    s, d = cfg.settings, cfg.drives
    idx = np.arange(cfg.n) if idx is None else np.asarray(idx, int)
    dm = bool(s.drive_model)
    lf = dm and bool(s.link_friction)
    pj = lambda k: np.asarray(s.per_joint(k, cfg.n), float)[idx]     # noqa: E731
    tup = lambda a: tuple(float(x) for x in np.asarray(a, float))    # noqa: E731
    fc = np.asarray(d.link_coulomb, float)[idx]
    out = []
    kd, kb = pj("link_friction_load_driving"), pj("link_friction_load_braking")
    if lf and (np.any(kd) or np.any(kb)):
        out.append(LawTruth(
            "load_friction", "F_c = coulomb_Nm + k |tau_r|, k = k_driving (tau_r v >= 0) or "
            "k_braking (tau_r v < 0); tau_r the transmitted (torque-sensor) torque",
            {"coulomb_Nm": tup(fc), "k_driving": tup(kd), "k_braking": tup(kb)},
            "Hamon, Gautier & Garrec, ICRA 2011 (load-dependent dry friction, 4 quadrants); "
            "Iskandar & Wolf, ICRA 2019"))
    z0 = pj("presliding_rad")
    if lf and np.any(z0):
        out.append(LawTruth(
            "presliding", "Dahl: z' = v - |v| z / z0, F = F_c z / z0 (z0 = 0: stick-slip Coulomb); "
            "at rest F keeps the sign of the last motion; after a reversal F = F_c (1 - 2 exp(-d / z0)) "
            "over the displacement d",
            {"z0_rad": tup(z0), "coulomb_Nm": tup(fc), "stiffness_Nm_rad": tup(
                np.where(z0 > 0, fc / np.where(z0 > 0, z0, 1.0), 0.0))},
            "Dahl, 'A solid friction model', Aerospace Corp. TOR-0158(3107-18)-1, 1968; "
            "Canudas de Wit, Olsson, Astrom & Lischinsky, IEEE Trans. Autom. Control 40(3), 1995"))
    amp = pj("ripple_Nm")
    if dm and np.any(amp):
        per_rev = float(s.ripple_cycles_per_motor_rev) * np.asarray(d.gear_ratio, float)[idx]
        out.append(LawTruth(
            "ripple", "tau_rip = A sin(k q_m) on the motor side (q_m the motor angle reflected to "
            "the link, k = cycles per motor rev * gear ratio periods per joint revolution); at "
            "link speed v its frequency is k |v| / (2 pi)",
            {"amplitude_Nm": tup(amp), "periods_per_joint_rev": tup(per_rev)},
            "Tuttle & Seering, IEEE Trans. Robot. Autom. 12(3), 1996; Ghorbel, Gandhi & Alpeter, "
            "ASME J. Mech. Des. 123(1), 2001 (kinematic error at twice the wave-generator rotation)"))
    if dm and float(s.friction_drift) != 0:
        out.append(LawTruth(
            "friction_drift", "motor and link Coulomb and viscous friction scale by "
            "1 + drift (1 - exp(-t / time_s)) (warm-up; xi kept)",
            {"drift": tup(np.full(idx.size, float(s.friction_drift))),
             "time_s": tup(np.full(idx.size, float(s.friction_drift_time_s)))},
            "Wolf & Iskandar, ICRA 2018; Carlson, Robertsson & Johansson, 'Modeling and "
            "identification of position and temperature dependent friction phenomena without "
            "temperature sensing', IROS 2015"))
    return tuple(out)
