"""The twin's 1 kHz simulation loop: PyBullet link side + compliant harmonic-drive joints + the
drive's position loop.

One :meth:`TwinSim.step` is one 1 ms control period:

1. controller (CSP position loop on the motor side, per joint)::

       e = q_cmd + tau_r / K - q_m        (deflection compensation; without it e = q_cmd - q_m)
       tau_m = Kp e + Ki * integral(e) + Kd (qd_cmd - w) + tau_ff,
       qd_cmd from differencing q_cmd (the drive's velocity feed-forward), tau_m clipped at
       torque_limit_scale * URDF effort with anti-windup; gains from twin.drive.default_gains;
       rigid joints (drive_model False, no motor side: w = qd, q_m = q) by default the decoupled
       tau_m = M(q) (kp e + ki integral + kd (qd_cmd - qd)) + tau_ff (twin.drive.rigid_gains; M
       refreshed every ``mass_matrix_every`` steps), per-joint gains when given explicitly. At
       reset the loop linearised at q0 must be stable at 1 ms with the coupling (check_drive_gains,
       check_rigid_gains; radius in ``loop_radius``), else ValueError naming the joint;

2. drive + link coupling, integrated semi-implicitly (see below), friction by a stick-slip step;
3. one PyBullet step with the resulting link torque (TORQUE_CONTROL).

Integration scheme (why it is stable at 1 ms with stiff springs and light wrist links): the
spring-damper tau_r = K (q_m - q) + D (w - v) is evaluated at the END of the step,
tau_r+ = K e + (K dt + D) u+ with e = q_m - q and u+ = w+ - v+ (symplectic Euler positions), and
the link's velocity response uses the joint-space mass matrix M(q) (p.calculateMassMatrix,
refreshed every ``mass_matrix_every`` steps) and bias h(q, v) (every step; see Speed), so the
coupled linear system for (v+, w+) is solved exactly (linearly-implicit Euler, A-stable for the
spring: tested stable up to omega*dt = 1000). The torque handed to PyBullet is the implicit one,
so PyBullet's own semi-implicit step lands on the same v+.

Coulomb-type friction (motor Coulomb + harmonic-drive load friction on the motor side, link
Coulomb on the link side) is a set-valued stick-slip law solved at velocity level (time-stepping
as in rigid-body engines): the velocity without it is predicted; if the friction impulse
available in one step (dt * F) can bring the velocity to zero, the joint sticks (velocity zero)
and the friction equals what holds it; otherwise full friction opposes the motion. This does not
chatter and always dissipates. Link side first (the links are strongly coupled through M, so the
stuck set is solved exactly with the link Delassus matrix), then the motors (per joint with the
diagonal of their response matrix plus one Jacobi correction; motors are weakly coupled).

Speed: the whole period between PyBullet calls (controller, ripple, backlash, the linear map,
both stick-slip solves, the friction components) is ONE compiled function
(:func:`twin.step_graph.step_function`, CasADi -> C, cached on disk; CasADi's virtual machine if no C
compiler), evaluated in place on flat numpy buffers. The linear maps are rebuilt by a second
compiled function (:func:`twin.step_graph.matrices_function`) whenever the mass matrix is refreshed
(every ``mass_matrix_every`` steps) or a backlash play opens/closes. The bias h(q, v) is the arm's
rigid-body regressor Y(q, v, 0) theta (identify.model.regressor) compiled into the step, after a check at
construction that it reproduces PyBullet's calculateInverseDynamics (relative 1e-9 at seeded random
states; ``bias_source`` says "compiled"); if it does not, PyBullet's inverse dynamics is called
each step instead ("pybullet"). A period is then: the compiled step, set torques, step, read
states -- the PyBullet calls a bare torque loop needs. State channels are read as copies
(properties, :meth:`TwinSim.state`) or, for recording, as flat rows (:meth:`TwinSim.snapshot`)
unpacked in one batch (:meth:`TwinSim.channels`).
"""
from __future__ import annotations

import struct
import tempfile

import numpy as np

from identify.common.banner import import_pybullet

from . import drive as drv
from .compiled import compiled as _compiled
from .compiled import gravity as _gravity
from .compiled import model_bias
from .config import TwinConfig
from .payload import urdf_with_payload
from .readout import STATE_CHANNELS, StateReadout, TwinState

p = import_pybullet()

_TORQUE_CONTROL = p.TORQUE_CONTROL


class TwinSim(StateReadout):
    """PyBullet arm with compliant harmonic-drive joints and a 1 kHz position loop.

    Usage::

        sim = TwinSim(cfg)          # PyBullet DIRECT (cfg.settings.gui -> GUI)
        sim.reset(q0)               # at rest at q0, springs pre-loaded for equilibrium
        st = sim.step(q_cmd)        # one 1 ms period -> TwinState
        sim.close()

    The state lives in flat buffers shared with the compiled step (see :func:`twin.drive.step_layouts`);
    the attributes ``q, v, w, qm, tau_r, tau_m, tau_l, tau_ff, q_cmd`` and the friction components
    are read-only properties returning copies.
    """

    def __init__(self, cfg: TwinConfig, gui: bool | None = None, contact_k0: int = 0):
        """cfg: the twin's configuration; gui: override settings.gui; contact_k0: simulation
        period at which the contacts' clock (TwinSettings.contacts time_s = 0) starts (the
        backend's settle periods)."""
        self.cfg = cfg
        self.n = cfg.n
        self.dt = float(cfg.dt)
        self._tmp = None
        self.client = None
        urdf = self._load_world(gui, contact_k0)
        self._drive_coefficients()
        self._compile(urdf)
        self._bind_buffers()

    def _load_world(self, gui, contact_k0: int) -> str:
        """The PyBullet world: the arm (with its payload link) loaded without hidden damping or
        velocity motors, the joint indices, the contacts. Returns the URDF loaded."""
        cfg, s, n, dt = self.cfg, self.cfg.settings, self.n, self.dt
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
        links = {}
        for k in range(p.getNumJoints(self.body, physicsClientId=c)):
            info = p.getJointInfo(self.body, k, physicsClientId=c)
            idx[info[1].decode()] = k
            links[info[12].decode()] = k
            # no hidden damping anywhere: the drive model owns all friction
            p.changeDynamics(self.body, k, linearDamping=0.0, angularDamping=0.0, jointDamping=0.0,
                             physicsClientId=c)
        p.changeDynamics(self.body, -1, linearDamping=0.0, angularDamping=0.0, physicsClientId=c)
        missing = [j for j in cfg.joint_names if j not in idx]
        if missing:
            raise ValueError(f"{urdf}: PyBullet did not load joint(s) {missing}")
        self.jidx = [idx[j] for j in cfg.joint_names]
        #: external contact forces (twin.contacts), None without contacts
        self.contacts = None
        if s.contacts:
            from .contacts import Contacts
            moving = [k for k in range(p.getNumJoints(self.body, physicsClientId=c))
                      if p.getJointInfo(self.body, k, physicsClientId=c)[2] != p.JOINT_FIXED]
            if moving != self.jidx:
                raise ValueError(f"{urdf}: contacts need the moving joints in URDF order, got "
                                 f"{cfg.joint_names}")
            self.contacts = Contacts(s.contacts, self.body, c, self.jidx, links, dt, contact_k0)
        # disable the default velocity motors (they would act as hidden friction)
        p.setJointMotorControlArray(self.body, self.jidx, p.VELOCITY_CONTROL,
                                    forces=[0.0] * n, physicsClientId=c)
        return urdf

    def _drive_coefficients(self) -> None:
        """The drive model's coefficients from the drive file and the settings (friction laws,
        ripple, backlash, drift, limits), and the step's state at construction."""
        cfg, s, n = self.cfg, self.cfg.settings, self.n
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
        #: the reducer friction law in effect (twin.reducer)
        self.reducer = cfg.reducer_law()
        # tau_in / tau_r of the law's linear part (paper law): the motor holds gam * tau_r
        self._gam = self.reducer.gam if self.enabled else np.ones(n)
        self.asym = s.per_joint("coulomb_asymmetry", n)
        self.stribeck = bool(s.stribeck)
        self.str_ratio = s.per_joint("stribeck_ratio", n)
        self.str_v = s.per_joint("stribeck_velocity_rad_s", n)
        self.link_load = (s.per_joint("link_friction_load_driving", n) * (1.0 if s.link_friction else 0.0),
                          s.per_joint("link_friction_load_braking", n) * (1.0 if s.link_friction else 0.0))
        self.presliding = s.per_joint("presliding_rad", n) * (1.0 if s.link_friction else 0.0)
        self.ripple = s.per_joint("ripple_Nm", n)
        self._ripple_k = float(s.ripple_cycles_per_motor_rev) * d.gear_ratio
        self.backlash = 0.5 * s.per_joint("backlash_rad", n)
        self._backlash_on = bool(np.any(self.backlash > 0)) and self.enabled
        self.drift = float(s.friction_drift)
        self.drift_T = float(s.friction_drift_time_s)
        self.position_control = bool(s.position_control)
        self.mm_every = int(s.mass_matrix_every)
        self._zeros = [0.0] * n
        self.defl_comp = bool(s.deflection_compensation) and self.enabled
        tl = s.torque_limit_scale
        self.tau_lim = None if tl is None else float(tl) * cfg.tau_max
        if self.tau_lim is not None and not np.all(np.isfinite(self.tau_lim)):
            self.tau_lim = np.where(np.isfinite(self.tau_lim), self.tau_lim, 1e12)
        self.kp = self.ki = self.kd = None
        self._reset_done = False
        self.omega_dt = None
        self.t = 0.0
        self.k = 0

    def _compile(self, urdf: str) -> None:
        """The compiled step (and matrix build) with their flat buffers; the bias h(q, v) inside
        the step when the arm's regressor reproduces PyBullet's inverse dynamics."""
        n, dt = self.n, self.dt
        # -- the compiled step and its buffers (twin.drive.step_layouts) ------------------------
        self._lay = lay = drv.step_layouts(n, self.enabled)
        self._x, self._c, self._p, self._y = (np.zeros(lay[k].size) for k in "xcpy")
        self._X, self._C, self._P, self._Y = (lay[k].views(b) for k, b in
                                              zip("xcpy", (self._x, self._c, self._p, self._y)))
        # bias h(q, v) inside the compiled step from the arm's regressor when it reproduces
        # PyBullet's inverse dynamics (checked here); otherwise PyBullet's, one call per step
        self._theta, reg_key = self._model_bias(urdf) if self.enabled else (None, None)
        self.bias_source = "pybullet" if reg_key is None else "compiled"
        self._fn = _compiled("step", n, self.enabled, self.position_control, self._backlash_on, reg_key)
        self._fbuf, self._run = self._fn.buffer()
        for i, b in enumerate((self._x, self._c, self._p)):
            self._fbuf.set_arg(i, memoryview(b))
        self._fbuf.set_res(0, memoryview(self._y))
        # the matrix build (every mass_matrix_every steps) writes straight into the step's "p"
        # (rigid joints: p is only the position loop's output map, written by _build_matrices)
        if self.enabled:
            mlay = drv.matrices_layout(n)
            self._Mbuf, self._b, self._Wd = np.zeros((n, n)), np.zeros(mlay.size), np.zeros(2 * n)
            self._B = mlay.views(self._b)
            self._B["D"][:], self._B["J"][:], self._B["dt"][:] = self.D, self.J, dt
            self._B["gam"][:] = self._gam
            self._mbuf, self._run_m = _compiled("matrices", n).buffer()
            self._mbuf.set_arg(0, memoryview(self._Mbuf))
            self._mbuf.set_arg(1, memoryview(self._b))
            self._mbuf.set_res(0, memoryview(self._p))
            self._mbuf.set_res(1, memoryview(self._Wd))
        #: rigid joints' position loop: "decoupled" (tau = M(q) u, default) or "per_joint"
        #: (explicit gains); None with the drive model or without the position loop
        self.loop = None
        #: spectral radius (< 1) of the position loop linearised at the last reset pose (drive
        #: model or rigid joints; twin.drive.check_drive_gains / check_rigid_gains); None
        #: without the position loop
        self.loop_radius = None

    def _bind_buffers(self) -> None:
        """Slices and views of the step's buffers the 1 kHz loop uses, and the constant inputs
        (friction, ripple, backlash, drift, limits, reducer law, bias parameters) written once."""
        n, dt, lay = self.n, self.dt, self._lay
        lx, ly = lay["x"], lay["y"]
        # commit: y's first six blocks (w, qm, tau_r, integ, z_l, qc) are x's blocks w .. qc_prev
        self._commit_x = slice(lx.slice("w").start, lx.slice("qc_prev").stop)
        self._commit_y = slice(0, ly.slice("qc").stop)
        self._qv = slice(0, 2 * n)
        self._it = lx.slice("t").start
        self._ibad = ly.slice("bad_input").start
        self._ikc = ly.slice("k_changed").start
        self._ff_set = False
        self._ql = self._vl = None
        self._xqc, self._xff, self._xh = self._X["qc"], self._X["tau_ff"], self._X["h"]
        self._ytau = self._Y["tau_l"]
        src = {"q_m": "qm", "qd_m": "w", "q_cmd": "qc"}
        self._state_slices = [(ch, ly.slice(src.get(ch, ch))) for ch in STATE_CHANNELS
                              if ch not in ("q", "qd", "qdd", "i_m")]
        self._vprev_slice = ly.slice("v_prev")
        c = self._C
        c["fc_m"][:], c["fc_l"][:] = self.fc_m, self.fc_l
        c["asym"][:] = self.asym
        c["str_ratio"][:] = self.str_ratio if self.stribeck else 1.0
        c["str_v"][:] = self.str_v
        c["ripple"][:], c["ripple_k"][:] = self.ripple, self._ripple_k
        c["ll_drv"][:], c["ll_brk"][:] = self.link_load
        c["pre_z0"][:] = self.presliding
        c["backlash"][:], c["K"][:] = self.backlash, self.K
        c["drift"][:], c["drift_T"][:], c["dt"][:] = self.drift, self.drift_T, dt
        c["tau_lim"][:] = np.inf if self.tau_lim is None else self.tau_lim
        for k, val in self.reducer.step_parameters().items():
            c[k][:] = val
        if self._theta is not None:
            c["theta"][:] = self._theta

    #: largest relative difference between the regressor's bias and PyBullet's accepted
    BIAS_RTOL = 1e-9

    def _model_bias(self, urdf: str):
        """(theta, key) of the arm's regressor when its bias matches PyBullet's
        (:func:`twin.compiled.model_bias` with tolerance BIAS_RTOL), else (None, None)."""
        return model_bias(urdf, self.cfg, self.bias, self.BIAS_RTOL)

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
        if self.enabled:
            J_tot = np.diag(M) + self.J
            kp, ki, kd = drv.default_gains(J_tot, s.pid_bandwidth_hz, s.pid_damping,
                                           s.pid_integral_time_s)
            self.kp = kp if s.pid_kp is None else s.per_joint("pid_kp", self.n)
            self.ki = ki if s.pid_ki is None else s.per_joint("pid_ki", self.n)
            self.kd = kd if s.pid_kd is None else s.per_joint("pid_kd", self.n)
            if self.position_control:
                drv.check_gains(self.kp, self.kd, J_tot, self.dt, self.cfg.joint_names)
        else:
            self._rigid_gains(q0, M)
        self._build_controller()
        self.t = 0.0
        self.k = 0
        qm = q0 + (g / self.K if self.enabled else 0.0)
        if self._backlash_on:
            qm = qm + np.sign(g) * self.backlash
        # integrator holds gravity: tau_m = Kp (q0 - q_m) + Ki I = g
        if self.position_control:
            e0 = (qm if self.defl_comp else q0) - qm
            # rigid decoupled loop: tau = M u, so the integrator holds M^-1 g
            # the motor holds the reducer's input torque gam g (paper law: gam = 1 / (1 - xi))
            g_u = np.linalg.solve(M, g) if self.loop == "decoupled" else self._gam * g
            integ = np.where(self.ki > 0, (g_u - self.kp * e0) / np.where(self.ki > 0, self.ki, 1.0), 0.0)
        else:
            integ = np.zeros(self.n)
        X, Y = self._X, self._Y
        self._x[:] = 0.0
        self._y[:] = 0.0
        X["q"][:], X["v"][:], X["w"][:], X["qm"][:] = q0, qd0, qd0, qm
        X["tau_r"][:] = g if self.enabled else 0.0
        X["integ"][:], X["qc_prev"][:], X["qc"][:] = integ, q0, q0
        self._ff_set = False
        self._ql, self._vl = q0.tolist(), qd0.tolist()
        Y["w"][:], Y["qm"][:], Y["tau_r"][:], Y["integ"][:], Y["qc"][:] = (
            X["w"], X["qm"], X["tau_r"], X["integ"], X["qc_prev"])
        Y["tau_m"][:], Y["tau_l"][:], Y["tau_in"][:] = self._gam * g, g, self._gam * X["tau_r"]
        Y["v_prev"][:] = qd0
        # the rest "period" before t = 0: start state = the reset state (snapshot() right after
        # reset is the aligned sample of the rest pose)
        Y["q_prev"][:], Y["w_prev"][:], Y["qm_prev"][:], Y["qc_prev"][:] = q0, qd0, qm, q0
        Y["stick_m"][:] = Y["stick_l"][:] = 1.0 if self.enabled else 0.0
        Y["K_eff"][:] = self.K
        self._M = M
        self._build_matrices(M, self.K)
        if self.enabled and self.position_control:
            explicit = [k for k in ("pid_kp", "pid_ki", "pid_kd") if getattr(s, k) is not None]
            self.loop_radius = drv.check_drive_gains(
                self._P["A"], self.kp, self.ki, self.kd, self.K, self.J, self.dt, self.defl_comp,
                self.cfg.joint_names, G=self.gravity_stiffness(q0),
                where=f"settings {'/'.join(explicit)}: " if explicit else "default gains: ")
        self._reset_done = True
        return self.state()

    def _rigid_gains(self, q0: np.ndarray, M: np.ndarray) -> None:
        """Position loop of rigid joints (drive model off) at the start pose q0 with mass matrix M.

        No explicit gains: the decoupled loop tau = M(q) u (:func:`twin.drive.rigid_gains`,
        ``self.loop = "decoupled"``). Any of pid_kp / pid_ki / pid_kd given: per-joint gains
        (``"per_joint"``), the missing ones from the bandwidth on each joint's smallest effective
        inertia 1/(M^-1)_jj. Either way the 1 ms loop linearised at q0 -- coupled mass matrix and
        gravity stiffness included -- must be stable (:func:`twin.drive.check_rigid_gains`, which
        refuses naming the joint); its spectral radius is kept in ``self.loop_radius``."""
        s, n = self.cfg.settings, self.n
        explicit = [k for k in ("pid_kp", "pid_ki", "pid_kd") if getattr(s, k) is not None]
        if explicit:
            J_eff = 1.0 / np.diag(np.linalg.inv(M))
            kp, ki, kd = drv.default_gains(J_eff, s.pid_bandwidth_hz, s.pid_damping,
                                           s.pid_integral_time_s)
            self.kp = kp if s.pid_kp is None else s.per_joint("pid_kp", n)
            self.ki = ki if s.pid_ki is None else s.per_joint("pid_ki", n)
            self.kd = kd if s.pid_kd is None else s.per_joint("pid_kd", n)
            loop, Mc = "per_joint", None
        else:
            self.kp, self.ki, self.kd = drv.rigid_gains(s.pid_bandwidth_hz, s.pid_damping,
                                                        s.pid_integral_time_s, n)
            loop, Mc = "decoupled", M
        if not self.position_control:
            self.loop = self.loop_radius = None
            return
        self.loop = loop
        where = (f"settings {'/'.join(explicit)} (drive_model: false): " if explicit
                 else "default rigid-joint loop (drive_model: false): ")
        self.loop_radius = drv.check_rigid_gains(M, self.kp, self.ki, self.kd, self.dt,
                                                 self.cfg.joint_names, Mc=Mc,
                                                 G=self.gravity_stiffness(q0), where=where)

    def gravity_stiffness(self, q, step: float = 1e-6) -> np.ndarray:
        """dg/dq (n, n) [N*m/rad] of the gravity torque g(q) = h(q, 0), central differences of
        PyBullet's inverse dynamics with `step` [rad]."""
        q = np.asarray(q, dtype=float)
        z = np.zeros(self.n)
        G = np.empty((self.n, self.n))
        for j in range(self.n):
            dq = np.zeros(self.n)
            dq[j] = step
            G[:, j] = (self.bias(q + dq, z) - self.bias(q - dq, z)) / (2.0 * step)
        return G

    def _build_matrices(self, M: np.ndarray, K_eff: np.ndarray) -> None:
        """Precompute the linear maps of the semi-implicit step for mass matrix M (n, n) and the
        active stiffness K_eff (n,), into the compiled step's matrix input (layout "p"), by the
        compiled :func:`twin.drive.matrices_function`.

        Input x = [v, w, q_m, q, tau_me, h] (6n): link/motor velocity, motor/link angle (only the
        deflection e = q_m - q enters), motor torque minus ripple, bias h(q, v). Output
        Y = [u, w+, v+, tau_r, tau_l, q_m+] (6n) with u = w+ - v+ and q_m+ = q_m + dt w+.
        Y = A x + Cl P_l + Cm P_m for friction impulses P_l (links) and P_m (motors) [N*m*s].
        Equations: M (v+ - v) = dt (tau_r - f_lv v - h) + P_l,
        J (w+ - w) = dt (tau_me - f_mv w - gam tau_r) + P_m, tau_r = K e + (K dt + D) u, gam the
        reducer law's linear ratio tau_in / tau_r (1 but for the paper law). The reducer's
        Coulomb-type loss is evaluated in the compiled step, exactly at the END-of-step torque
        (:func:`twin.step_graph.step_function`)."""
        # viscous friction follows the warm-up drift, refreshed with M (every mass_matrix_every
        # steps; the drift's time constant is seconds to minutes)
        if not self.enabled:
            self._P["Mc"][:] = M if self.loop == "decoupled" else np.eye(self.n)
            self._P["K_used"][:] = K_eff
            self._Keff = np.array(K_eff, dtype=float)
            return
        fs = drv.drift_scale(self.t, self.drift, self.drift_T) if self.drift else 1.0
        B = self._B
        B["K_eff"][:] = K_eff
        B["fv_m"][:] = self.fv_m * fs
        B["fv_l"][:] = self.fv_l * fs
        self._Mbuf[:] = M
        self._run_m()
        if np.any(self._Wd <= 0):
            raise ValueError("drive coupling matrices are not positive: stiffness/damping too high "
                             "for the 1 ms step")
        self._Keff = np.array(K_eff, dtype=float)

    # ---------------------------------------------------------------------------------------
    def step(self, q_cmd, tau_ff=None) -> TwinState:
        """One 1 ms control period with link-side command q_cmd (n,) [rad] and optional
        feed-forward torque tau_ff (n,) [N*m] (link side, added to the PID output)."""
        self.advance(q_cmd, tau_ff)
        return self.state()

    def advance(self, q_cmd, tau_ff=None) -> None:
        """:meth:`step` without building the TwinState (fast path; read attributes or state()).

        One period = one call of the compiled step (controller + drive + friction) between
        PyBullet's inverse dynamics (bias h) and set-torques / step / read-states."""
        if not self._reset_done:
            raise RuntimeError("TwinSim.step before reset(q0)")
        qc = q_cmd if type(q_cmd) is np.ndarray and q_cmd.dtype == float else np.asarray(q_cmd, float)
        xqc = self._xqc
        if qc.shape != xqc.shape:
            raise ValueError(f"step {self.k}: q_cmd has shape {qc.shape}, expected ({self.n},)")
        xqc[:] = qc
        if tau_ff is not None:
            ff = np.asarray(tau_ff, dtype=float)
            if ff.shape != xqc.shape:
                self._input_error(qc, ff)
            self._xff[:] = ff
            self._ff_set = True
        elif self._ff_set:
            self._xff[:] = 0.0
            self._ff_set = False
        x, y = self._x, self._y
        x[self._it] = self.t
        c = self.client
        k = self.k
        if self.contacts is not None:
            tau_ext = self.contacts.apply(self.k, self._ql)
            self._X["tau_ext"][:] = 0.0 if tau_ext is None else tau_ext
        if self.enabled:
            if k % self.mm_every == 0 and k > 0:
                self._M = self.mass_matrix(x[:self.n].tolist())
                self._build_matrices(self._M, self._Keff)
            if self._theta is None:
                self._xh[:] = p.calculateInverseDynamics(self.body, self._ql, self._vl, self._zeros,
                                                         physicsClientId=c)
        elif self.loop == "decoupled" and k % self.mm_every == 0 and k > 0:
            self._M = self._P["Mc"][:] = self.mass_matrix(self._ql)
        self._run()
        if y[self._ibad]:
            self._input_error(qc, tau_ff)
        if self._backlash_on and y[self._ikc]:
            # a joint entered or left the play: the spring's stiffness changed, redo the step
            self._build_matrices(self._M, self._Y["K_eff"].copy())
            self._run()
        x[self._commit_x] = y[self._commit_y]
        p.setJointMotorControlArray(self.body, self.jidx, _TORQUE_CONTROL,
                                    forces=self._ytau.tolist(), physicsClientId=c)
        p.stepSimulation(physicsClientId=c)
        js = p.getJointStates(self.body, self.jidx, physicsClientId=c)
        self._ql = ql = [r[0] for r in js]
        self._vl = vl = [r[1] for r in js]
        x[self._qv] = ql + vl
        if not self.enabled:
            self._X["w"][:] = self._Y["w"][:] = vl
            self._X["qm"][:] = self._Y["qm"][:] = ql
        self.k = k = k + 1
        self.t = k * self.dt

    def run(self, q_cmd: np.ndarray, tau_ff: np.ndarray | None = None,
            snapshot_at: np.ndarray | None = None, out: np.ndarray | None = None) -> None:
        """Advance ``len(q_cmd)`` control periods in one call: period m gets the command
        q_cmd[m] (N, n) [rad] and feed-forward tau_ff[m] (N, n) [N*m] (None: none), exactly as
        N calls of :meth:`advance`. snapshot_at (S,) int: period indices in [0, N); row r of
        `out` (S, snapshot_size) receives :meth:`snapshot` taken just AFTER period
        snapshot_at[r] -- the row that :meth:`channels` turns into the aligned sample at the
        START of that period (state at its start, torques acting during it).

        Why: the per-period Python work (argument checks, attribute look-ups, the snapshot
        schedule, list building of the PyBullet results) is what separated the twin from the bare
        set-torques / step / read-states loop; here it runs with local names, preallocated
        buffers and ``zip`` unpacking of getJointStates. Arms whose bias comes from PyBullet, rigid
        joints, backlash and contacts take the general :meth:`advance` per period (same results)."""
        if not self._reset_done:
            raise RuntimeError("TwinSim.run before reset(q0)")
        n = self.n
        qc = np.ascontiguousarray(q_cmd, dtype=float)
        N = qc.shape[0]
        if qc.ndim != 2 or qc.shape[1] != n:
            raise ValueError(f"run: q_cmd has shape {qc.shape}, expected (N, {n})")
        ffa = None
        if tau_ff is not None:
            ffa = np.ascontiguousarray(tau_ff, dtype=float)
            if ffa.shape != qc.shape:
                raise ValueError(f"run: tau_ff has shape {ffa.shape}, expected {qc.shape}")
        snap = np.zeros(0, dtype=int) if snapshot_at is None else np.asarray(snapshot_at, int).reshape(-1)
        if snap.size and (out is None or out.shape != (snap.size, self.snapshot_size)):
            raise ValueError(f"run: out must have shape ({snap.size}, {self.snapshot_size})")
        if snap.size and (snap.min() < 0 or snap.max() >= N):
            raise ValueError(f"run: snapshot_at must lie within [0, {N})")
        order = np.argsort(snap, kind="stable")
        sched = [(int(snap[r]), int(r)) for r in order] + [(-1, -1)]      # sentinel
        ip = 0
        if not (self.enabled and self._theta is not None and not self._backlash_on
                and self.contacts is None):
            for m in range(N):
                self.advance(qc[m], None if ffa is None else ffa[m])
                while sched[ip][0] == m:
                    self.snapshot(out[sched[ip][1]])
                    ip += 1
        else:
            if ffa is None and self._ff_set:
                self._xff[:] = 0.0
                self._ff_set = False
            x, y, xqc, xff = self._x, self._y, self._xqc, self._xff
            m2 = 2 * n
            it, ibad, run = self._it, self._ibad, self._run
            cx, cy, ytau = self._commit_x, self._commit_y, self._ytau
            # q, v straight from getJointStates' tuples into x's first 2n floats (one C call)
            put_qv = struct.Struct(f"{m2}d").pack_into
            xb = memoryview(x).cast("B")
            body, jidx, c, dt, mm = self.body, self.jidx, self.client, self.dt, self.mm_every
            set_torques, step_sim, get_states = (p.setJointMotorControlArray, p.stepSimulation,
                                                 p.getJointStates)
            k = self.k
            nxt = sched[ip][0]
            qs = vs = None
            try:
                for m in range(N):
                    xqc[:] = qc[m]
                    if ffa is not None:
                        xff[:] = ffa[m]
                    x[it] = k * dt
                    if k % mm == 0 and k > 0:
                        self.k, self.t = k, k * dt           # the drift scale reads self.t
                        self._M = self.mass_matrix(x[:n].tolist())
                        self._build_matrices(self._M, self._Keff)
                    run()
                    if y[ibad]:
                        self.k, self.t = k, k * dt
                        self._input_error(qc[m], None if ffa is None else ffa[m])
                    x[cx] = y[cy]
                    set_torques(body, jidx, _TORQUE_CONTROL, forces=ytau.tolist(), physicsClientId=c)
                    step_sim(physicsClientId=c)
                    qs, vs, _, _ = zip(*get_states(body, jidx, physicsClientId=c))
                    put_qv(xb, 0, *qs, *vs)
                    k += 1
                    while nxt == m:
                        row = out[sched[ip][1]]
                        row[:m2] = x[:m2]
                        row[m2:] = y
                        ip += 1
                        nxt = sched[ip][0]
            finally:
                self.k, self.t = k, k * dt
                if qs is not None:
                    self._ql, self._vl = list(qs), list(vs)
                    self._ff_set = ffa is not None

    def _input_error(self, qc, tau_ff):
        """Raise the ValueError for a non-finite command or a bad feed-forward (state untouched)."""
        if not np.all(np.isfinite(qc)):
            raise ValueError(f"step {self.k} (t = {self.t:.3f} s): q_cmd is not finite: {qc.tolist()}")
        ff = np.asarray(tau_ff, dtype=float)
        raise ValueError(f"step {self.k} (t = {self.t:.3f} s): tau_ff must be {self.n} finite "
                         f"values, got {ff.tolist()}")

    def _build_controller(self) -> None:
        """Position-loop coefficients of the compiled step: e = q_cmd (+ tau_r / K with
        deflection compensation) - q_m, tau_m = Kp e + Ki integral + Kd ((q_cmd - q_cmd_prev) / dt
        - w), integral += dt * e."""
        dt = self.dt
        dc = 1.0 if self.defl_comp else 0.0
        kp, ki, kd, invK = self.kp, self.ki, self.kd, dc / self.K
        C = self._C
        C["c1"][:], C["c2"][:], C["c3"][:] = kp + kd / dt, -kd / dt, -kp
        C["c4"][:], C["c5"][:], C["c6"][:] = -kd, kp * invK, ki
        C["b1"][:], C["b3"][:], C["b5"][:] = dt, -dt, dt * invK

    def set_torque_limit(self, tau_max) -> None:
        """Clip the motor torque (link side) at `tau_max` (n,) [N*m] from the next period on, as a
        drive's max-torque object (CiA 402 0x6072) does -- never above the twin's own clip
        (torque_limit_scale x URDF effort); None: the twin's own clip again. The position loop's
        anti-windup acts at the clip."""
        own = np.inf if self.tau_lim is None else np.asarray(self.tau_lim, float)
        lim = own if tau_max is None else np.minimum(own, np.asarray(tau_max, float))
        if np.shape(lim) != (self.n,) or np.any(~(lim >= 0)):
            raise ValueError(f"set_torque_limit: {tau_max!r} is not {self.n} torques >= 0 [N*m]")
        self._C["tau_lim"][:] = lim

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


__all__ = ["TwinSim", "TwinState", "STATE_CHANNELS", "urdf_with_payload"]
