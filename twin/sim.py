"""The twin's 1 kHz simulation loop: PyBullet link side + compliant harmonic-drive joints + the
drive's position loop.

One :meth:`TwinSim.step` is one 1 ms control period:

1. controller (CSP position loop on the motor side, per joint)::

       e = q_cmd + tau_r / K - q_m        (deflection compensation; without it e = q_cmd - q_m)
       tau_m = Kp e + Ki * integral(e) + Kd (qd_cmd - w) + tau_ff,
       qd_cmd from differencing q_cmd (the drive's velocity feed-forward), tau_m clipped at
       torque_limit_scale * URDF effort with anti-windup; gains from twin.drive.default_gains;

2. drive + link coupling, integrated semi-implicitly (see below), friction by a stick-slip step;
3. one PyBullet step with the resulting link torque (TORQUE_CONTROL).

Integration scheme (why it is stable at 1 ms with stiff springs and light wrist links): the
spring-damper tau_r = K (q_m - q) + D (w - v) is evaluated at the END of the step,
tau_r+ = K e + (K dt + D) u+ with e = q_m - q and u+ = w+ - v+ (symplectic Euler positions), and
the link's velocity response uses the joint-space mass matrix M(q) (p.calculateMassMatrix,
refreshed every ``mass_matrix_every`` steps) and bias h(q, v) (p.calculateInverseDynamics, every
step), so the coupled linear system for (v+, w+) is solved exactly (linearly-implicit Euler,
A-stable for the spring: tested stable up to omega*dt = 1000). The torque handed to PyBullet is the
implicit one, so PyBullet's own semi-implicit step lands on the same v+.

Coulomb-type friction (motor Coulomb + harmonic-drive load friction on the motor side, link
Coulomb on the link side) is a set-valued stick-slip law solved at velocity level (time-stepping
as in rigid-body engines): the velocity without it is predicted; if the friction impulse
available in one step (dt * F) can bring the velocity to zero, the joint sticks (velocity zero)
and the friction equals what holds it; otherwise full friction opposes the motion. This does not
chatter and always dissipates. Link side first (the links are strongly coupled through M, so the
stuck set is solved exactly with the link Delassus matrix), then the motors (per joint with the
diagonal of their response matrix plus one Jacobi correction; motors are weakly coupled).

Speed: every linear map of the step is precomputed as one matrix whenever the mass matrix is
refreshed (every ``mass_matrix_every`` steps), so a step is a handful of small numpy operations plus
four PyBullet calls (inverse dynamics for h, set torques, step, read states).
"""
from __future__ import annotations

import math
import os
import tempfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass

import numpy as np
import pybullet as p

from .config import TwinConfig
from . import drive as drv

# C-level reductions (ndarray.any()/sum() go through Python wrappers; this is the hot loop)
_any = np.logical_or.reduce
_all = np.logical_and.reduce
_sum = np.add.reduce


@dataclass
class TwinState:
    """Ground-truth state after one control step (all (n,), link side, SI).

    t: time [s]; q, qd, qdd: link angle/velocity/acceleration [rad, rad/s, rad/s^2] (qdd = the
    step's (qd+ - qd) / dt); q_m, qd_m: motor angle/velocity / eta [rad, rad/s]; q_cmd: commanded
    link angle [rad]; tau_m: reflected motor torque eta*beta*i [N*m]; i_m: motor current [A];
    tau_r: torque-sensor (spring) torque [N*m]; tau_in: harmonic-drive input torque tau'_r;
    tau_l: rigid-body link torque M qdd + h [N*m]; tau_mc, tau_mv: motor-side Coulomb and viscous
    friction; tau_hd: harmonic-drive load friction; tau_rip: torque ripple; tau_lc, tau_lv:
    link-side Coulomb and viscous friction (friction positive when resisting positive motion);
    tau_ff: feed-forward torque; stick_m, stick_l: 1.0 where the motor / link side stuck.
    """

    t: float
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    q_m: np.ndarray
    qd_m: np.ndarray
    q_cmd: np.ndarray
    tau_m: np.ndarray
    i_m: np.ndarray
    tau_r: np.ndarray
    tau_in: np.ndarray
    tau_l: np.ndarray
    tau_mc: np.ndarray
    tau_mv: np.ndarray
    tau_hd: np.ndarray
    tau_rip: np.ndarray
    tau_lc: np.ndarray
    tau_lv: np.ndarray
    tau_ff: np.ndarray
    stick_m: np.ndarray
    stick_l: np.ndarray


#: TwinState fields that are per-joint arrays (recorded as truth channels).
STATE_CHANNELS = ("q", "qd", "qdd", "q_m", "qd_m", "q_cmd", "tau_m", "i_m", "tau_r", "tau_in",
                  "tau_l", "tau_mc", "tau_mv", "tau_hd", "tau_rip", "tau_lc", "tau_lv", "tau_ff",
                  "stick_m", "stick_l")


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


class TwinSim:
    """PyBullet arm with compliant harmonic-drive joints and a 1 kHz position loop.

    Usage::

        sim = TwinSim(cfg)          # PyBullet DIRECT (cfg.settings.gui -> GUI)
        sim.reset(q0)               # at rest at q0, springs pre-loaded for equilibrium
        st = sim.step(q_cmd)        # one 1 ms period -> TwinState
        sim.close()
    """

    def __init__(self, cfg: TwinConfig, gui: bool | None = None):
        self.cfg = cfg
        s = cfg.settings
        self.n = n = cfg.n
        self.dt = dt = float(cfg.dt)
        self._tmp = None
        urdf = cfg.urdf
        if cfg.payload is not None:
            self._tmp = tempfile.TemporaryDirectory(prefix="twin_")
            urdf = urdf_with_payload(cfg.urdf, cfg.joint_names, cfg.payload, self._tmp.name)
        use_gui = s.gui if gui is None else gui
        self.client = p.connect(p.GUI if use_gui else p.DIRECT)
        c = self.client
        p.resetSimulation(physicsClientId=c)
        g = _gravity(cfg)
        p.setGravity(*g, physicsClientId=c)
        p.setTimeStep(dt, physicsClientId=c)
        p.setPhysicsEngineParameter(numSubSteps=0, physicsClientId=c)
        self.body = p.loadURDF(urdf, useFixedBase=True, flags=p.URDF_USE_INERTIA_FROM_FILE,
                               physicsClientId=c)
        idx = {}
        for k in range(p.getNumJoints(self.body, physicsClientId=c)):
            info = p.getJointInfo(self.body, k, physicsClientId=c)
            idx[info[1].decode()] = k
            # no hidden damping anywhere: the drive model owns all friction
            p.changeDynamics(self.body, k, linearDamping=0.0, angularDamping=0.0, jointDamping=0.0,
                             physicsClientId=c)
        p.changeDynamics(self.body, -1, linearDamping=0.0, angularDamping=0.0, physicsClientId=c)
        missing = [j for j in cfg.joint_names if j not in idx]
        if missing:
            raise ValueError(f"{urdf}: PyBullet did not load joint(s) {missing}")
        self.jidx = [idx[j] for j in cfg.joint_names]
        # disable the default velocity motors (they would act as hidden friction)
        p.setJointMotorControlArray(self.body, self.jidx, p.VELOCITY_CONTROL,
                                    forces=[0.0] * n, physicsClientId=c)

        d = cfg.drives
        self.K = d.stiffness.copy()
        self.D = d.damping.copy()
        self.J = d.J_r.copy()
        self.xi = d.xi.copy()
        self.torque_factor = d.torque_factor.copy()
        self.enabled = bool(s.drive_model)
        self.fc_m = d.motor_coulomb * (1.0 if s.motor_friction else 0.0)
        self.fv_m = d.motor_viscous * (1.0 if s.motor_friction else 0.0)
        self.fc_l = d.link_coulomb * (1.0 if s.link_friction else 0.0)
        self.fv_l = d.link_viscous * (1.0 if s.link_friction else 0.0)
        if not s.harmonic_friction:
            self.xi = np.zeros(n)
        self._hd_drv = self.xi / (1.0 - self.xi)
        self._hd_bck = self.xi / (1.0 + self.xi)
        self.asym = s.per_joint("coulomb_asymmetry", n)
        self._asym_on = bool(np.any(self.asym != 0))
        self.stribeck = bool(s.stribeck)
        self.str_ratio = s.per_joint("stribeck_ratio", n)
        self.str_v = s.per_joint("stribeck_velocity_rad_s", n)
        self.ripple = s.per_joint("ripple_Nm", n)
        self._ripple_on = bool(np.any(self.ripple != 0))
        self._ripple_k = float(s.ripple_cycles_per_motor_rev) * d.gear_ratio
        self.backlash = 0.5 * s.per_joint("backlash_rad", n)
        self._backlash_on = bool(np.any(self.backlash > 0))
        self.drift = float(s.friction_drift)
        self.drift_T = float(s.friction_drift_time_s)
        self.position_control = bool(s.position_control)
        self.mm_every = int(s.mass_matrix_every)
        self._zeros = [0.0] * n
        self._static = {}
        self._z = np.zeros(n)
        self._z.flags.writeable = False
        self._var_friction = bool(self.drift != 0.0 or self._asym_on or self.stribeck)
        self._lim_l = dt * self.fc_l
        self._nlim_l = -self._lim_l
        self._dtFmc = dt * self.fc_m
        self._link_coulomb_on = bool(np.any(self.fc_l > 0))
        self._asym_arg = self.asym if self._asym_on else None
        self._str_arg = self.str_ratio if self.stribeck else None
        self.defl_comp = bool(s.deflection_compensation) and self.enabled
        tl = s.torque_limit_scale
        self.tau_lim = None if tl is None else float(tl) * cfg.tau_max
        if self.tau_lim is not None and not np.all(np.isfinite(self.tau_lim)):
            self.tau_lim = np.where(np.isfinite(self.tau_lim), self.tau_lim, 1e12)
        self.kp = self.ki = self.kd = None
        self._reset_done = False
        self.omega_dt = None

    # ---------------------------------------------------------------------------------------
    def mass_matrix(self, q) -> np.ndarray:
        """Joint-space mass matrix M(q) (n, n) of the link side (incl. payload)."""
        return np.asarray(p.calculateMassMatrix(self.body, list(map(float, q)),
                                                physicsClientId=self.client))

    def bias(self, q, qd) -> np.ndarray:
        """h(q, qd) = Coriolis/centrifugal + gravity torque (n,)."""
        z = [0.0] * self.n
        return np.asarray(p.calculateInverseDynamics(self.body, list(map(float, q)),
                                                     list(map(float, qd)), z,
                                                     physicsClientId=self.client))

    def reset(self, q0, qd0=None) -> TwinState:
        """Put the arm at rest at link angles q0 (n,) [rad], springs pre-loaded for static
        equilibrium (q_m = q0 + g(q0)/K), the position loop's integrator pre-loaded with the gravity
        torque, commanded position q0. Refuses drive parameters unstable at this step.
        qd0 (n,) [rad/s]: optional initial velocity of links and motors (not an equilibrium;
        used e.g. to start a rigid open-loop run mid-motion)."""
        q0 = np.asarray(q0, dtype=float).reshape(-1)
        qd0 = np.zeros(self.n) if qd0 is None else np.asarray(qd0, dtype=float).reshape(-1)
        if q0.shape != (self.n,):
            raise ValueError(f"reset: q0 has {q0.size} values, expected {self.n} ({self.cfg.joint_names})")
        if not np.all(np.isfinite(q0)):
            raise ValueError(f"reset: q0 is not finite: {q0}")
        c = self.client
        for j, k in enumerate(self.jidx):
            p.resetJointState(self.body, k, float(q0[j]), float(qd0[j]), physicsClientId=c)
        M = self.mass_matrix(q0)
        s = self.cfg.settings
        if self.enabled:
            self.omega_dt = drv.check_stability(M, self.J, self.K, self.D, self.fv_l, self.fv_m,
                                                self.dt, self.cfg.joint_names)
        g = self.bias(q0, np.zeros(self.n))
        J_tot = np.diag(M) + (self.J if self.enabled else 0.0)
        kp, ki, kd = drv.default_gains(J_tot, s.pid_bandwidth_hz, s.pid_damping, s.pid_integral_time_s)
        self.kp = kp if s.pid_kp is None else s.per_joint("pid_kp", self.n)
        self.ki = ki if s.pid_ki is None else s.per_joint("pid_ki", self.n)
        self.kd = kd if s.pid_kd is None else s.per_joint("pid_kd", self.n)
        if self.position_control:
            drv.check_gains(self.kp, self.kd, J_tot, self.dt, self.cfg.joint_names)
        self._build_controller()
        self.t = 0.0
        self.k = 0
        self.q = q0.copy()
        self.v = qd0.copy()
        self.qm = q0 + (g / self.K if self.enabled else 0.0)
        if self._backlash_on and self.enabled:
            self.qm = self.qm + np.sign(g) * self.backlash
        self.w = qd0.copy()
        # integrator holds gravity: tau_m = Kp (q0 - q_m) + Ki I = g
        if self.position_control:
            e0 = (self.qm if self.defl_comp else q0) - self.qm
            self.integ = np.where(self.ki > 0, (g - self.kp * e0) / np.where(self.ki > 0, self.ki, 1.0), 0.0)
        else:
            self.integ = np.zeros(self.n)
        self._qc_prev = q0.copy()
        self._M = M
        self._build_matrices(M, self.K)
        z = np.zeros(self.n)
        self._v_prev = self.v.copy()
        self.tau_m = g.copy()
        self.tau_r = g.copy() if self.enabled else z.copy()
        self.tau_l = g.copy()
        self.tau_ff = self._z
        self._fric = None
        self.q_cmd = q0.copy()
        self._reset_done = True
        return self.state()

    def _build_matrices(self, M: np.ndarray, K_eff: np.ndarray) -> None:
        """Precompute the linear maps of the semi-implicit step for mass matrix M and the active
        stiffness K_eff (n,).

        Input x = [v, w, q_m, q, tau_me, h] (6n): link/motor velocity, motor/link angle (only the
        deflection e = q_m - q enters), motor torque minus ripple, bias h(q, v). Output
        Y = [u, w+, v+, tau_r, tau_l, q_m+] (6n) with u = w+ - v+ and q_m+ = q_m + dt w+.
        Y = A x + Cl P_l + Cm P_m for friction impulses P_l (links) and P_m (motors) [N*m*s].
        Equations: M (v+ - v) = dt (tau_r - f_lv v - h) + P_l,
        J (w+ - w) = dt (tau_me - f_mv w - tau_r) + P_m, tau_r = K e + (K dt + D) u."""
        n, dt = self.n, self.dt
        # viscous friction follows the warm-up drift, refreshed with M (every mass_matrix_every
        # steps; the drift's time constant is seconds to minutes)
        fs = drv.drift_scale(self.t, self.drift, self.drift_T) if self.drift else 1.0
        self._fv_m_eff = self.fv_m * fs
        self._fv_l_eff = self.fv_l * fs
        key = (K_eff.tobytes(), fs)
        blocks = self._static.get(key)
        if blocks is None:
            if len(self._static) > 8:
                self._static.clear()
            I, O = np.eye(n), np.zeros((n, n))
            B = K_eff * dt + self.D
            invJ = 1.0 / self.J
            La = np.hstack([-np.diag(self._fv_l_eff), O, np.diag(K_eff), O, -I])
            Lb = np.hstack([O, -np.diag(self._fv_m_eff), -np.diag(K_eff), I, O])
            Sv = np.hstack([I, O, O, O, O])
            Zw = np.hstack([O, I, O, O, O]) + (dt * invJ)[:, None] * Lb
            ST = np.hstack([O, O, np.diag(K_eff), O, O])
            Sl = np.hstack([np.diag(self._fv_l_eff), O, O, O, O])
            blocks = (B, invJ, La, Sv, Zw, ST, Sl)
            self._static[key] = blocks
        B, invJ, La, Sv, Zw, ST, Sl = blocks
        I = np.eye(n)
        Minv = np.linalg.inv(M)
        Ginv = np.linalg.inv(I + dt * (np.diag(invJ) + Minv) * B[None, :])
        Zv = Sv + (dt * Minv) @ La
        Au = Ginv @ (Zw - Zv)
        dtJB = dt * B * invJ
        MB = dt * Minv * B[None, :]
        Aw = Zw - dtJB[:, None] * Au
        Av = Zv + MB @ Au
        AT = ST + B[:, None] * Au
        Al = AT - Sl
        A5 = np.vstack([Au, Aw, Av, AT, Al])
        Ae = A5[:, 2 * n:3 * n]
        # input [v, w, q_m, q, tau_me, h]: the deflection e = q_m - q folded into the matrix;
        # a sixth output block gives the new motor angle q_m + dt * w+ (symplectic Euler)
        A = np.hstack([A5[:, :2 * n], Ae, -Ae, A5[:, 3 * n:]])
        qm_row = dt * A[n:2 * n]
        qm_row[:, 2 * n:3 * n] += I
        self._A = np.vstack([A, qm_row])
        Cu = Ginv * invJ[None, :]
        Cw = np.diag(invJ) - dtJB[:, None] * Cu
        CT = B[:, None] * Cu
        self._Cm = np.vstack([Cu, Cw, MB @ Cu, CT, CT, dt * Cw])
        Lu = -Ginv @ Minv
        LT = B[:, None] * Lu
        Lv = Minv + MB @ Lu
        self._Cl = np.vstack([Lu, -dtJB[:, None] * Lu, Lv, LT, LT + I / dt, -dt * dtJB[:, None] * Lu])
        Wm = np.diag(Cw).copy()
        Wl = np.diag(Lv).copy()
        self._Wl_full = 0.5 * (Lv + Lv.T)            # link Delassus matrix (symmetric)
        self._Wl_inv = np.linalg.inv(self._Wl_full)
        if np.any(Wm <= 0) or np.any(Wl <= 0):
            raise ValueError("drive coupling matrices are not positive: stiffness/damping too high "
                             "for the 1 ms step")
        self._nWm = -1.0 / Wm
        self._nWl = -1.0 / Wl
        # HD friction at the END-of-step torque: sliding, the friction impulse changes tau_r by
        # gT * P_m (own joint), so F_hd = c |T_s - gT sg dt F_hd| -> F_hd = c |T_s| / (1 +- c gT dt)
        gT_dt = np.minimum(B * np.diag(Cu) * dt, 0.5)
        self._k_drv = dt * self._hd_drv / (1.0 + self._hd_drv * gT_dt)
        self._k_bck = dt * self._hd_bck / (1.0 - self._hd_bck * gT_dt)
        self._Keff = K_eff

    # ---------------------------------------------------------------------------------------
    def step(self, q_cmd, tau_ff=None) -> TwinState:
        """One 1 ms control period with link-side command q_cmd (n,) [rad] and optional
        feed-forward torque tau_ff (n,) [N*m] (link side, added to the PID output)."""
        self.advance(q_cmd, tau_ff)
        return self.state()

    def advance(self, q_cmd, tau_ff=None) -> None:
        """:meth:`step` without building the TwinState (fast path; read attributes or state())."""
        if not self._reset_done:
            raise RuntimeError("TwinSim.step before reset(q0)")
        n = self.n
        qc = q_cmd if type(q_cmd) is np.ndarray and q_cmd.dtype == float else np.asarray(q_cmd, float)
        if qc.shape != (n,):
            raise ValueError(f"step {self.k}: q_cmd has shape {qc.shape}, expected ({n},)")
        if not math.isfinite(_sum(qc)):
            raise ValueError(f"step {self.k} (t = {self.t:.3f} s): q_cmd is not finite: {qc.tolist()}")
        if tau_ff is not None:
            tau_ff = np.asarray(tau_ff, dtype=float)
            if tau_ff.shape != (n,) or not math.isfinite(_sum(tau_ff)):
                raise ValueError(f"step {self.k} (t = {self.t:.3f} s): tau_ff must be {n} finite "
                                 f"values, got {tau_ff.tolist()}")
        v, w, q = self.v, self.w, self.q
        # -- controller (motor side), one matrix product: see _build_controller -----------------
        if self.position_control:
            y = self._Gc @ np.concatenate((qc, self._qc_prev, self.qm, w, self.tau_r, self.integ))
            tau_m = y[:n]
            if tau_ff is not None:
                tau_m = tau_m + tau_ff
            if self.tau_lim is not None and _any(np.abs(tau_m) > self.tau_lim):
                sat = np.abs(tau_m) > self.tau_lim
                tau_m = np.minimum(np.maximum(tau_m, -self.tau_lim), self.tau_lim)
                self.integ = self.integ + np.where(sat, 0.0, y[n:])       # anti-windup
            else:
                self.integ = self.integ + y[n:]
        else:
            tau_m = self._z if tau_ff is None else tau_ff
        self._qc_prev = qc
        c = self.client
        if self.enabled and self.k % self.mm_every == 0 and self.k > 0:
            self._M = self.mass_matrix(q)
            self._build_matrices(self._M, self._Keff)
        if not self.enabled:
            tau_apply = tau_m
            self.tau_r = tau_m
            self.tau_l = tau_m
        else:
            tau_apply = self._drive_step(tau_m, q, v, w)
        p.setJointMotorControlArray(self.body, self.jidx, p.TORQUE_CONTROL,
                                    forces=tau_apply.tolist(), physicsClientId=c)
        p.stepSimulation(physicsClientId=c)
        qv = np.array([x[:2] for x in p.getJointStates(self.body, self.jidx, physicsClientId=c)])
        self._v_prev = v
        self.q = qv[:, 0]
        self.v = qv[:, 1]
        if self.enabled:
            self.qm = self._qm_new
        else:
            self.qm, self.w = self.q, self.v
        self.tau_m = tau_m
        self.tau_ff = self._z if tau_ff is None else tau_ff
        self.q_cmd = qc
        self.k += 1
        self.t = self.k * self.dt

    @property
    def qdd(self) -> np.ndarray:
        """Link acceleration of the last step, (qd+ - qd) / dt [rad/s^2]."""
        return (self.v - self._v_prev) / self.dt

    def _build_controller(self) -> None:
        """Position loop as one matrix: z = [q_cmd, q_cmd_prev, q_m, w, tau_r, integral] (6n) ->
        [tau_m, dt * e] (2n), e = q_cmd (+ tau_r / K with deflection compensation) - q_m,
        tau_m = Kp e + Ki integral + Kd ((q_cmd - q_cmd_prev) / dt - w)."""
        n, dt = self.n, self.dt
        dc = 1.0 if self.defl_comp else 0.0
        D = np.diag
        kp, ki, kd, invK = self.kp, self.ki, self.kd, dc / self.K
        top = np.hstack([D(kp + kd / dt), D(-kd / dt), D(-kp), D(-kd), D(kp * invK), D(ki)])
        O = np.zeros((n, n))
        bot = dt * np.hstack([np.eye(n), O, -np.eye(n), O, D(invK), O])
        self._Gc = np.vstack([top, bot])

    def _drive_step(self, tau_m, q, v, w):
        """Drive model for one step (see module doc); sets self.w (new motor velocity), tau_r,
        tau_l and the friction impulses; returns the torque applied to the links (= tau_l)."""
        n = self.n
        dt = self.dt
        qm = self.qm
        if self._backlash_on:
            e = qm - q
            inside = np.abs(e) <= self.backlash
            qm = q + (e - np.clip(e, -self.backlash, self.backlash))   # effective deflection
            K_eff = np.where(inside, 0.0, self.K)
            if not np.array_equal(K_eff, self._Keff):
                self._build_matrices(self._M, K_eff)
        if self._ripple_on:
            tau_rip = self.ripple * np.sin(self._ripple_k * self.qm)
            tau_m = tau_m - tau_rip
        else:
            tau_rip = None
        h = np.array(p.calculateInverseDynamics(self.body, q.tolist(), v.tolist(), self._zeros,
                                                physicsClientId=self.client))
        y = self._A @ np.concatenate((v, w, qm, q, tau_m, h))
        if self._var_friction:
            fs = drv.drift_scale(self.t, self.drift, self.drift_T)
            F_l = drv.coulomb_level(self.fc_l * fs, y[2 * n:3 * n], self._asym_arg,
                                    self._str_arg, self.str_v)
            lim_l = dt * F_l
            dtFmc = dt * drv.coulomb_level(self.fc_m * fs, y[n:2 * n], self._asym_arg,
                                           self._str_arg, self.str_v)
        else:
            lim_l = self._lim_l
            dtFmc = self._dtFmc
        # link-side Coulomb (stick-slip, per joint)
        if self._link_coulomb_on:
            v_s = y[2 * n:3 * n]
            P_l = np.minimum(np.maximum(v_s * self._nWl, self._nlim_l if lim_l is self._lim_l
                                        else -lim_l), lim_l)       # per-joint estimate
            stuck = np.abs(P_l) < lim_l
            if _any(stuck):
                # the links are strongly coupled through M: solve the stuck set exactly,
                # W_SS P_S = -(v_S + W_S,slip P_slip) (a per-joint estimate would diverge)
                if _all(stuck):
                    P_l = self._Wl_inv @ (-v_s)
                else:
                    W = self._Wl_full
                    P_l = P_l.copy()
                    P_l[stuck] = np.linalg.solve(W[np.ix_(stuck, stuck)],
                                                 -(v_s[stuck] + W[np.ix_(stuck, ~stuck)] @ P_l[~stuck]))
                P_l = np.minimum(np.maximum(P_l, -lim_l), lim_l)
            y += self._Cl @ P_l
        else:
            P_l = self._z
        # motor side: motor Coulomb + harmonic-drive load friction (stick-slip, per joint).
        # HD friction level dt*F_hd = |tau_r| * k, k for driving (w tau_r > 0) or back-driven,
        # made consistent with the END-of-step spring torque (see _build_matrices).
        w_s = y[n:2 * n]
        T_s = y[3 * n:4 * n]
        lim = dtFmc + np.abs(T_s) * np.where(w_s * T_s > 0, self._k_drv, self._k_bck)
        P_m = np.minimum(np.maximum(w_s * self._nWm, -lim), lim)   # stick: hold; slip: full friction
        y += self._Cm @ P_m
        if _any(np.abs(P_m) < lim):
            # a joint sticks: one Jacobi correction for the motors' coupling through the links
            P_2 = np.minimum(np.maximum(P_m + y[n:2 * n] * self._nWm, -lim), lim)
            y += self._Cm @ (P_2 - P_m)
            P_m = P_2
        self.w = y[n:2 * n]
        self.tau_r = y[3 * n:4 * n]
        self.tau_l = y[4 * n:5 * n]
        # (with backlash the matrix saw the effective motor angle; integrate the real one)
        self._qm_new = self.qm + dt * self.w if self._backlash_on else y[5 * n:]
        self._fric = (P_m, P_l, lim, dtFmc, lim_l, v, w, tau_rip, self._fv_m_eff, self._fv_l_eff)
        return self.tau_l

    # -- friction components, computed on demand from the last step's impulses ------------------
    @property
    def tau_hd(self) -> np.ndarray:
        """Harmonic-drive load friction of the last step [N*m] (its share of the motor-side
        Coulomb-type impulse; positive resists positive motion)."""
        if self._fric is None:
            return np.zeros(self.n)
        P_m, _, lim, dtFmc = self._fric[:4]
        share = np.divide(lim - dtFmc, lim, out=np.zeros(self.n), where=lim > 0)
        return -P_m / self.dt * share

    @property
    def tau_mc(self) -> np.ndarray:
        """Motor-side Coulomb friction of the last step [N*m]."""
        if self._fric is None:
            return np.zeros(self.n)
        return -self._fric[0] / self.dt - self.tau_hd

    @property
    def tau_in(self) -> np.ndarray:
        """Harmonic-drive input torque tau'_r = tau_r + tau_hd [N*m]."""
        return self.tau_r + self.tau_hd

    @property
    def tau_lc(self) -> np.ndarray:
        """Link-side Coulomb friction of the last step [N*m]."""
        return np.zeros(self.n) if self._fric is None else -self._fric[1] / self.dt

    @property
    def tau_mv(self) -> np.ndarray:
        """Motor-side viscous friction of the last step [N*m]."""
        return np.zeros(self.n) if self._fric is None else self._fric[8] * self._fric[6]

    @property
    def tau_lv(self) -> np.ndarray:
        """Link-side viscous friction of the last step [N*m]."""
        return np.zeros(self.n) if self._fric is None else self._fric[9] * self._fric[5]

    @property
    def tau_rip(self) -> np.ndarray:
        """Torque ripple of the last step [N*m]."""
        if self._fric is None or self._fric[7] is None:
            return np.zeros(self.n)
        return self._fric[7]

    @property
    def stick_m(self) -> np.ndarray:
        """1.0 where the motor side stuck in the last step."""
        if self._fric is None:
            return np.ones(self.n) if self.enabled else np.zeros(self.n)
        return (np.abs(self._fric[0]) < self._fric[2]).astype(float)

    @property
    def stick_l(self) -> np.ndarray:
        """1.0 where the link side stuck in the last step."""
        if self._fric is None:
            return np.ones(self.n) if self.enabled else np.zeros(self.n)
        return (np.abs(self._fric[1]) < self._fric[4]).astype(float)

    def state(self) -> TwinState:
        """The current ground-truth state (copies)."""
        i_m = self.tau_m / self.torque_factor
        kw = {name: np.array(getattr(self, _ATTR.get(name, name)), dtype=float) for name in STATE_CHANNELS
              if name != "i_m"}
        return TwinState(t=self.t, i_m=i_m, **kw)

    def close(self) -> None:
        """Disconnect PyBullet and remove temporary files."""
        if self.client is not None:
            try:
                p.disconnect(physicsClientId=self.client)
            except p.error:
                pass
            self.client = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


_ATTR = {"qd": "v", "qd_m": "w", "q_m": "qm"}


def _gravity(cfg: TwinConfig):
    """World gravity [m/s^2] (TwinConfig.gravity)."""
    return tuple(float(x) for x in cfg.gravity)
