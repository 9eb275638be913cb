"""The compiled 1 kHz step (controller + drive + stick-slip friction) as CasADi graphs, and the
flat-vector layouts they read and write; :mod:`twin.sim` compiles and calls them.

One CasADi function evaluates everything between two PyBullet calls of a control period, so a
period costs one call into generated C instead of ~40 small numpy operations. It is a pure
function of flat float64 vectors (layouts below), evaluated through CasADi's FunctionBuffer on
numpy memory. The matrices of the linearly-implicit scheme (TwinSim._build_matrices, refreshed
with the mass matrix) are an input, so the function does not depend on the arm's numbers and one
compiled copy per structure (drive on/off, position loop on/off, backlash on/off) serves every arm
of n joints (cached on disk by identify.model.regressor.compile_function).
"""
from __future__ import annotations

import casadi as ca
import numpy as np


class Layout:
    """Named blocks of a flat float64 vector: ``fields`` = [(name, rows, cols)], cols*rows values
    each (matrices stored row-major, i.e. C order). ``slice(name)`` gives the block's range."""

    def __init__(self, fields):
        self.fields = list(fields)
        self._at = {}
        o = 0
        for name, r, c in self.fields:
            self._at[name] = (o, r, c)
            o += r * c
        self.size = o

    def slice(self, name: str) -> slice:
        o, r, c = self._at[name]
        return slice(o, o + r * c)

    def shape(self, name: str) -> tuple:
        _, r, c = self._at[name]
        return (r, c) if c > 1 else (r,)

    def views(self, buf: np.ndarray) -> dict:
        """name -> numpy view of `buf` with the block's shape (writes go into `buf`)."""
        return {name: buf[self.slice(name)].reshape(self.shape(name)) for name, _, _ in self.fields}

    def sym(self, v):
        """name -> CasADi expression of the block (matrices rebuilt from row-major storage)."""
        out = {}
        for name, r, c in self.fields:
            o = self._at[name][0]
            seg = v[o:o + r * c]
            out[name] = ca.reshape(seg, c, r).T if c > 1 else seg
        return out


def step_layouts(n: int, enabled: bool = True) -> dict:
    """Layouts of the compiled step's vectors for n joints (enabled: the drive model is on):

    x (per step, [SI]): link q, v; motor angle/velocity qm, w; spring torque tau_r; PID integral;
        the link friction's presliding (Dahl) displacement z_l [rad]; previous and current
        command qc_prev, qc; feed-forward tau_ff; bias h(q, v); time t;
        joint torque of external contact forces tau_ext (twin.contacts; the link equation is
        M qdd + h = tau_l + tau_ext).
    c (per run): controller coefficients (u = c1 qc + c2 qc_prev + c3 qm + c4 w + c5 tau_r +
        c6 integral, integral += b1 qc + b3 qm + b5 tau_r), torque limit, friction laws, ripple,
        backlash, stiffness, the reducer law's parameters (twin.reducer.step_parameters: hd_mu0,
        hd_mu1, hd_w_mu, hd_F0, hd_w_s of the opposing part, hd_gam = 1/(1 - xi_lin) of the
        linear part, hd_pf = 1 for the power-flow form), the load-dependent link Coulomb
        coefficients ll_drv / ll_brk [-] (tau_r w >= 0 / < 0), the link friction's Dahl
        displacement constant pre_z0 [rad] (0: stick-slip Coulomb instead), dt, standard inertial parameters theta (10n, for the bias h).
    p (per mass-matrix refresh, from TwinSim._build_matrices): the maps A, Cm, Cl, the link
        Delassus matrix W and the per-joint friction constants. Rigid joints (enabled False):
        only the position loop's output map Mc (n x n: tau_m = Mc u + tau_ff; the mass matrix
        for the decoupled loop, the identity for per-joint gains, see :func:`rigid_gains`) and
        K_used.
    y (output): the new w, qm, tau_r, integral, z_l and command (in the order of x, to commit with
        one copy), then every recorded torque/flag channel, the start-of-step v (for qdd), the
        effective stiffness, two flags (non-finite input, effective stiffness changed), and the
        start-of-period q, w, qm and previous command (so one row after the period holds the
        aligned sample of the period, see TwinSim.channels).
    """
    v = lambda *names: [(nm, n, 1) for nm in names]          # noqa: E731
    return {
        "x": Layout(v("q", "v", "w", "qm", "tau_r", "integ", "z_l", "qc_prev", "qc", "tau_ff", "h")
                    + [("t", 1, 1)] + v("tau_ext")),
        "c": Layout(v("c1", "c2", "c3", "c4", "c5", "c6", "b1", "b3", "b5", "tau_lim", "fc_m",
                      "fc_l", "asym", "str_ratio", "str_v", "ripple", "ripple_k", "backlash", "K",
                      "hd_mu0", "hd_mu1", "hd_w_mu", "hd_F0", "hd_w_s", "hd_gam", "hd_pf",
                      "ll_drv", "ll_brk", "pre_z0")
                    + [("drift", 1, 1), ("drift_T", 1, 1), ("dt", 1, 1), ("theta", 10 * n, 1)]),
        "p": (Layout([("A", 6 * n, 6 * n), ("Cm", 6 * n, n), ("Cl", 6 * n, n), ("W", n, n)]
                     + v("nWm", "nWl", "fv_m", "fv_l", "K_used")) if enabled
              else Layout([("Mc", n, n)] + v("K_used"))),
        "y": Layout(v("w", "qm", "tau_r", "integ", "z_l", "qc", "tau_l", "tau_m", "tau_in", "tau_mc",
                      "tau_mv", "tau_hd", "tau_rip", "tau_lc", "tau_lv", "stick_m", "stick_l",
                      "tau_ff", "v_prev", "K_eff")
                    + [("bad_input", 1, 1), ("k_changed", 1, 1)]
                    + v("q_prev", "w_prev", "qm_prev", "qc_prev", "tau_ext")),
    }


def _clip(x, lim):
    """min(max(x, -lim), lim), as np.minimum(np.maximum(...)) in the reference implementation."""
    return ca.fmin(ca.fmax(x, -lim), lim)


def _coulomb_level_sx(fc, v, asym, ratio, v_s):
    """coulomb_level for CasADi (asymmetry 0 and ratio 1 reproduce fc exactly)."""
    return fc * (1.0 + asym * ca.sign(v)) * (1.0 + (ratio - 1.0) * ca.exp(-(v / v_s) ** 2))


def _link_level(C, fs, vel, T):
    """Link Coulomb level [N*m] at link velocity vel and transmitted torque T (n,): the constant
    part (Stribeck, asymmetry, drift scale fs) + the load-dependent part k |T|, k = ll_drv when
    the transmitted torque drives the link (T vel >= 0), ll_brk when it brakes it (4-quadrant)."""
    k = ca.if_else(T * vel >= 0, C["ll_drv"], C["ll_brk"])
    return _coulomb_level_sx(C["fc_l"] * fs, vel, C["asym"], C["str_ratio"], C["str_v"]) + k * ca.fabs(T)


def _presliding(C, fs, z, v, tau_r, dt):
    """Dahl presliding link friction where pre_z0 > 0: (flags, new state z+ [rad], friction F
    [N*m]). z' = v - |v| z / z0 integrated exactly over the period at the start velocity v (the
    link's own displacement of the period, symplectic Euler), F = level(v, tau_r) z+ / z0; F acts
    on the link like a bias (explicit: its stiffness level / z0 is small next to K) and the
    joint's stick-slip Coulomb is then off. Elsewhere z+ = 0 and F = 0 (selected, not computed)."""
    zero = ca.SX.zeros(v.shape[0])
    pre = C["pre_z0"] > 0
    z0 = ca.if_else(pre, C["pre_z0"], 1.0)
    sv = ca.sign(v)
    z_new = ca.if_else(pre, sv * z0 + (z - sv * z0) * ca.exp(-ca.fabs(v) * dt / z0), zero)
    return pre, z_new, ca.if_else(pre, _link_level(C, fs, v, tau_r) * z_new / z0, zero)


def _link_stick_slip(W, nWl, v_s, lim_l):
    """Link-side Coulomb impulses P_l (n,) [N*m*s]: per-joint estimate, then the stuck set S
    solved exactly, W_SS P_S = -(v_S + W_S,slip P_slip), as the SPD system [[W_SS, 0], [0, I]]
    (W the link Delassus matrix, nWl = -1 / diag(W), v_s the predicted link velocity)."""
    n = v_s.shape[0]
    zero = ca.SX.zeros(n)
    P_l = _clip(v_s * nWl, lim_l)
    s = ca.fabs(P_l) < lim_l
    slip_P = ca.if_else(s, zero, P_l)
    rhs = ca.if_else(s, -(v_s + ca.mtimes(W, slip_P)), zero)
    Ws = ca.SX(n, n)
    for i in range(n):
        for j in range(n):
            Ws[i, j] = ca.if_else(s[i] * s[j], W[i, j], 1.0 if i == j else 0.0)
    P_S = _spd_solve(Ws, rhs)
    return _clip(ca.if_else(s, P_S, P_l), lim_l)


def _reducer_coefficients(C, yw, wa, gT):
    """The reducer law at predicted motor velocity yw (|yw| = wa): drag F0 [N*m] and the
    own-joint solve's coefficients k_drv = mu / (1 - mu (1 - g)) (driving) and
    k_bck = mu_b / (1 + mu_b (1 - g)) (back-driven), mu_b = mu / (1 - mu) in the power-flow form
    (hd_pf > 0: tau_in = (1 - mu) tau_r), else mu; g = gT the own joint's gain."""
    mu = C["hd_mu0"] + C["hd_mu1"] * (1.0 - ca.exp(-wa / C["hd_w_mu"]))
    F0 = C["hd_F0"] * ca.exp(-(yw / C["hd_w_s"]) ** 2)
    k_drv = mu / (1.0 - mu * (1.0 - gT))
    mu_b = ca.if_else(C["hd_pf"] > 0, mu / (1.0 - mu), mu)
    return F0, k_drv, mu_b / (1.0 + mu_b * (1.0 - gT))


def _motor_stick_slip(C, nWm, Cmw, CmT, yw, yT, dtFmc, dt):
    """Motor-side stick-slip with the reducer's Coulomb-type loss, per joint: (w+, tau_r+, motor
    friction impulse P_m [N*m*s], its limit, reducer loss part hd_c [N*m]) from the predicted
    motor velocity yw and spring torque yT (after the link impulses), the motor Coulomb impulse
    limit dtFmc and the rows Cmw, CmT of the motor impulse map.

    Reducer law (twin.reducer): tau_r = tau_in - s (F0(w) + mu(w) |tau_in|), s = sign(w),
    evaluated EXACTLY at the end-of-step spring torque tau_r+, which itself moves with the
    friction impulse: tau_r+ = T - s g (F_mc + F_hd) + (other joints' impulses), g the own
    joint's gain (dt * dtau_r/dP). Solving the piecewise-linear own-joint equation:
      z = s T - g F_mc + (1 - g) F0,  F_hd = F0 + |z| mu / (1 -+ mu (1 - g))
    (- : driving, z >= 0; + : back-driven, mu_b there, see _reducer_coefficients). Pass 1 with T
    the prediction, pass 2 with T including the other joints' pass-1 impulses (coupling up to
    45 % of the own gain on the reference arm), so the law holds to second order in the coupling."""
    zero = ca.SX.zeros(yw.shape[0])
    gT = dt * ca.diag(CmT)
    sw = ca.sign(yw)
    wa = ca.fabs(yw)
    F0, k_drv, k_bck = _reducer_coefficients(C, yw, wa, gT)
    Fmc = dtFmc / dt

    def limit(T):
        z = sw * T - gT * Fmc + (1.0 - gT) * F0
        return dtFmc + dt * (F0 + ca.fabs(z) * ca.if_else(z >= 0, k_drv, k_bck))

    lim1 = limit(yT)
    P_1 = _clip(yw * nWm, lim1)
    yw1 = yw + ca.mtimes(Cmw, P_1)
    yT1 = yT + ca.mtimes(CmT, P_1)
    lim = limit(yT1 - ca.diag(CmT) * P_1)
    # second pass: the law's limit with the coupling, and the stuck joints' holding impulse
    # corrected for the other joints' impulses (one Jacobi step)
    P_m = _clip(P_1 + yw1 * nWm, lim)
    yw = yw + ca.mtimes(Cmw, P_m)
    yT = yT + ca.mtimes(CmT, P_m)
    share = ca.if_else(lim > 0, (lim - dtFmc) / ca.if_else(lim > 0, lim, 1.0), zero)
    # reducer loss tau_rf = tau_in - tau_r: the Coulomb-type part (share of the friction
    # impulse) + the linear part xi_lin tau_in = (gam - 1) tau_r (paper law)
    hd_c = -P_m / dt * share
    return yw, yT, P_m, lim, hd_c


def _spd_solve(A, b):
    """Solve A x = b for a symmetric positive definite A (n x n SX) by an unrolled Cholesky."""
    n = A.shape[0]
    L = [[None] * n for _ in range(n)]
    for j in range(n):
        s = A[j, j]
        for k in range(j):
            s = s - L[j][k] * L[j][k]
        L[j][j] = ca.sqrt(s)
        for i in range(j + 1, n):
            s = A[i, j]
            for k in range(j):
                s = s - L[i][k] * L[j][k]
            L[i][j] = s / L[j][j]
    y = [None] * n
    for i in range(n):
        s = b[i]
        for k in range(i):
            s = s - L[i][k] * y[k]
        y[i] = s / L[i][i]
    x = [None] * n
    for i in reversed(range(n)):
        s = y[i]
        for k in range(i + 1, n):
            s = s - L[k][i] * x[k]
        x[i] = s / L[i][i]
    return ca.vertcat(*x)


def step_function(n: int, *, enabled: bool, position_control: bool, backlash: bool,
                  regressor: ca.Function | None = None) -> ca.Function:
    """The control period as a CasADi Function (x, c, p) -> y (layouts: :func:`step_layouts`).

    Equations (see twin.sim's module doc for the scheme): position loop with torque clip and
    anti-windup; with the drive model: backlash dead zone (optional), ripple, the linear map
    Y = A [v, w, qm, q, tau_m - tau_rip, h], link-side stick-slip (stuck set solved exactly with the
    Delassus matrix W: masked SPD system), motor-side stick-slip with harmonic-drive load friction
    (|tau_r|-proportional level, driving / back-driven factor) and one Jacobi correction; then the
    friction components. Without the drive model the motor torque acts on the links directly.

    regressor: the arm's bias h(q, v, theta) (:func:`identify.model.regressor.build_bias`, recursive Newton-Euler);
    given, h is evaluated inside the step from the standard parameters theta in c["theta"]
    (x["h"] is then ignored); None: h comes in x["h"].
    """
    L = step_layouts(n, enabled)
    xs, cs, ps = ca.SX.sym("x", L["x"].size), ca.SX.sym("c", L["c"].size), ca.SX.sym("p", L["p"].size)
    X, C, P = L["x"].sym(xs), L["c"].sym(cs), L["p"].sym(ps)
    q, v, w, qm, tau_r, integ = X["q"], X["v"], X["w"], X["qm"], X["tau_r"], X["integ"]
    qc, ff = X["qc"], X["tau_ff"]
    dt = C["dt"]
    zero = ca.SX.zeros(n)
    # non-finite command or feed-forward (NaN/inf fail the comparison)
    bad = 1 - (ca.fabs(ca.sum1(qc) + ca.sum1(ff)) < ca.inf)
    if position_control:
        u = (C["c1"] * qc + C["c2"] * X["qc_prev"] + C["c3"] * qm + C["c4"] * w
             + C["c5"] * tau_r + C["c6"] * integ)
        de = C["b1"] * qc + C["b3"] * qm + C["b5"] * tau_r
        if not enabled:
            u = ca.mtimes(P["Mc"], u)          # rigid joints: decoupled (Mc = M) or per joint (I)
        tau_m = u + ff
        lim_t = C["tau_lim"]
        sat = ca.fabs(tau_m) > lim_t
        tau_m = _clip(tau_m, lim_t)
        integ_new = integ + ca.if_else(sat, zero, de)
    else:
        tau_m = ff
        integ_new = integ
    out = {"integ": integ_new, "z_l": X["z_l"], "qc": qc, "tau_m": tau_m, "tau_ff": ff, "v_prev": v, "q_prev": q,
           "w_prev": w, "qm_prev": qm, "qc_prev": X["qc_prev"], "tau_ext": X["tau_ext"],
           "bad_input": bad, "k_changed": ca.SX(0)}
    if not enabled:
        out.update(w=v, qm=q, tau_r=tau_m, tau_l=tau_m, tau_in=tau_m, K_eff=P["K_used"])
        for k in ("tau_mc", "tau_mv", "tau_hd", "tau_rip", "tau_lc", "tau_lv", "stick_m", "stick_l"):
            out[k] = zero
    else:
        if backlash:
            bl = C["backlash"]
            e = qm - q
            inside = ca.fabs(e) <= bl
            qm_e = q + (e - _clip(e, bl))
            K_eff = ca.if_else(inside, zero, C["K"])
            out["k_changed"] = ca.sum1(K_eff != P["K_used"]) > 0
        else:
            qm_e = qm
            K_eff = P["K_used"]
        tau_rip = C["ripple"] * ca.sin(C["ripple_k"] * qm)
        tau_me = tau_m - tau_rip
        fs = 1.0 + C["drift"] * (1.0 - ca.exp(-X["t"] / C["drift_T"]))
        pre, z_new, F_d = _presliding(C, fs, X["z_l"], v, tau_r, dt)
        h = (X["h"] if regressor is None else regressor(q, v, C["theta"])) - X["tau_ext"] + F_d
        # Only the rows the period needs are evaluated: motor velocity w+, link velocity v+ (for
        # the link friction) and spring torque tau_r+ of Y = A [v, w, qm, q, tau_me, h]; the
        # columns of qm and q are +-Ae (only the deflection e = qm - q enters), tau_l follows from
        # tau_r (tau_l = tau_r - f_lv v + P_l / dt, the rows of A, Cl and Cm say so) and
        # qm+ = qm + dt w+. Same equations as the full map, about half the multiplications.
        A, Cl, Cm = P["A"], P["Cl"], P["Cm"]
        rw, rv, rT = slice(n, 2 * n), slice(2 * n, 3 * n), slice(3 * n, 4 * n)
        xin = ca.vertcat(v, w, qm_e - q, tau_me, h)
        cols = lambda M: ca.horzcat(M[:, 0:3 * n], M[:, 4 * n:6 * n])      # noqa: E731
        yw = ca.mtimes(cols(A[rw, :]), xin)
        v_s = ca.mtimes(cols(A[rv, :]), xin)
        yT = ca.mtimes(cols(A[rT, :]), xin)
        # (load part at the start-of-period transmitted torque: the step's own prediction yT
        # still lacks the friction impulses, which shift it by up to ~10 % on the shoulder)
        lim_l = ca.if_else(pre, zero, dt * _link_level(C, fs, v_s, tau_r))
        dtFmc = dt * _coulomb_level_sx(C["fc_m"] * fs, yw, C["asym"], C["str_ratio"], C["str_v"])
        # link-side Coulomb: per-joint estimate, then the stuck set S solved exactly,
        # W_SS P_S = -(v_S + W_S,slip P_slip), as the SPD system [[W_SS, 0], [0, I]]
        P_l = _link_stick_slip(P["W"], P["nWl"], v_s, lim_l)
        yw = yw + ca.mtimes(Cl[rw, :], P_l)
        yT = yT + ca.mtimes(Cl[rT, :], P_l)
        # motor side: motor Coulomb + the reducer's Coulomb-type loss (see _motor_stick_slip)
        yw, yT, P_m, lim, hd_c = _motor_stick_slip(C, P["nWm"], Cm[rw, :], Cm[rT, :], yw, yT, dtFmc, dt)
        tau_hd = hd_c + (C["hd_gam"] - 1.0) * yT
        out.update(
            w=yw, qm=qm + dt * yw, tau_r=yT, tau_l=yT - P["fv_l"] * v + P_l / dt - F_d,
            tau_in=yT + tau_hd, tau_hd=tau_hd, z_l=z_new,
            tau_mc=-P_m / dt - hd_c, tau_lc=ca.if_else(pre, F_d, -P_l / dt), tau_mv=P["fv_m"] * w,
            tau_lv=P["fv_l"] * v,
            tau_rip=tau_rip, stick_m=ca.fabs(P_m) < lim, stick_l=ca.fabs(P_l) < lim_l, K_eff=K_eff)
    yv = ca.vertcat(*[out[name] for name, _, _ in L["y"].fields])
    tag = (f"twin_step{n}_{'d' if enabled else 'r'}{'p' if position_control else 'o'}"
           f"{'b' if backlash else ''}{'h' if regressor is not None and enabled else ''}")
    return ca.Function(tag, [xs, cs, ps], [yv], ["x", "c", "p"], ["y"])


def _spd_inverse(A):
    """Inverse of a symmetric positive definite SX matrix (unrolled Cholesky, column solves)."""
    n = A.shape[0]
    return ca.horzcat(*[_spd_solve(A, ca.DM.eye(n)[:, j]) for j in range(n)])


def matrices_layout(n: int) -> Layout:
    """Inputs of :func:`matrices_function` besides M: stiffness in effect K_eff, damping D,
    reflected motor inertia J_r, viscous friction (drift applied) fv_m / fv_l, the reducer's
    linear torque ratio gam = tau_in / tau_r = 1 / (1 - xi_lin) (1 without a linear part), and dt."""
    return Layout([(nm, n, 1) for nm in ("K_eff", "D", "J", "fv_m", "fv_l", "gam")]
                  + [("dt", 1, 1)])


def matrices_function(n: int) -> ca.Function:
    """(M (n x n, row-major), b (matrices_layout)) -> the step's matrix input p (step_layouts "p")
    plus the diagonals Wm, Wl (2n; must be > 0) -- the linear maps of the linearly-implicit step.

    Same equations as the numpy reference (TwinSim._build_matrices docstring), the motor seeing
    the spring torque through the reducer's linear ratio gam (tau_in = gam tau_r): with
    B = K dt + D, S = dt (gam J^-1 + M^-1): G = I + S diag(B) is inverted as I - S b (I + b S b)^-1 b, b = sqrt(B)
    (push-through identity; I + b S b is SPD, so both inverses are Cholesky-based and B may be 0
    inside a backlash play)."""
    lay = matrices_layout(n)
    Ms, bs = ca.SX.sym("M", n * n), ca.SX.sym("b", lay.size)
    M = ca.reshape(Ms, n, n).T
    b = lay.sym(bs)
    K, D, J, fvm, fvl, dt = b["K_eff"], b["D"], b["J"], b["fv_m"], b["fv_l"], b["dt"]
    I, O = ca.SX.eye(n), ca.SX.zeros(n, n)
    dg = ca.diag
    B = K * dt + D
    invJ = 1.0 / J
    gam = b["gam"]
    La = ca.horzcat(-dg(fvl), O, dg(K), O, -I)
    Lb = ca.horzcat(O, -dg(fvm), -dg(gam * K), I, O)
    Sv = ca.horzcat(I, O, O, O, O)
    Zw = ca.horzcat(O, I, O, O, O) + ca.repmat(dt * invJ, 1, 5 * n) * Lb
    ST = ca.horzcat(O, O, dg(K), O, O)
    Sl = ca.horzcat(dg(fvl), O, O, O, O)
    Minv = _spd_inverse(M)
    Minv = 0.5 * (Minv + Minv.T)
    S = dt * (dg(gam * invJ) + Minv)
    sb = ca.sqrt(B)
    Sb = S * ca.repmat(sb.T, n, 1)                              # S diag(b)
    H = I + ca.repmat(sb, 1, n) * Sb                            # I + b S b (SPD)
    Ginv = I - ca.mtimes(ca.mtimes(Sb, _spd_inverse(H)), dg(sb))
    rowB = lambda X: ca.repmat(B, 1, X.shape[1]) * X           # noqa: E731  diag(B) X
    colB = lambda X: X * ca.repmat(B.T, X.shape[0], 1)         # noqa: E731  X diag(B)
    Zv = Sv + ca.mtimes(dt * Minv, La)
    Au = ca.mtimes(Ginv, Zw - Zv)
    dtJB = dt * B * gam * invJ
    MB = colB(dt * Minv)
    rowJB = lambda X: ca.repmat(dtJB, 1, X.shape[1]) * X       # noqa: E731
    Aw = Zw - rowJB(Au)
    Av = Zv + ca.mtimes(MB, Au)
    AT = ST + rowB(Au)
    Al = AT - Sl
    A5 = ca.vertcat(Au, Aw, Av, AT, Al)
    Ae = A5[:, 2 * n:3 * n]
    A = ca.horzcat(A5[:, :2 * n], Ae, -Ae, A5[:, 3 * n:])
    qm_row = dt * A[n:2 * n, :] + ca.horzcat(O, O, I, O, O, O)
    A = ca.vertcat(A, qm_row)
    Cu = Ginv * ca.repmat(invJ.T, n, 1)
    Cw = dg(invJ) - rowJB(Cu)
    CT = rowB(Cu)
    Cm = ca.vertcat(Cu, Cw, ca.mtimes(MB, Cu), CT, CT, dt * Cw)
    Lu = -ca.mtimes(Ginv, Minv)
    LT = rowB(Lu)
    Lv = Minv + ca.mtimes(MB, Lu)
    Cl = ca.vertcat(Lu, -rowJB(Lu), Lv, LT, LT + I / dt, -dt * rowJB(Lu))
    Wm, Wl = ca.diag(Cw), ca.diag(Lv)
    W = 0.5 * (Lv + Lv.T)
    rm = lambda X: ca.reshape(X.T, -1, 1)                      # noqa: E731  row-major flatten
    out = {"A": rm(A), "Cm": rm(Cm), "Cl": rm(Cl), "W": rm(W), "nWm": -1.0 / Wm, "nWl": -1.0 / Wl,
           "fv_m": fvm, "fv_l": fvl, "K_used": K}
    pv = ca.vertcat(*[ca.densify(out[name]) for name, _, _ in step_layouts(n)["p"].fields])
    return ca.Function(f"twin_matrices{n}", [Ms, bs], [pv, ca.vertcat(Wm, Wl)], ["M", "b"], ["p", "W_diag"])
