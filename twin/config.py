"""Twin configuration: the ONE place where the twin's settings keys and defaults are defined.

Three things configure a twin:

* :class:`TwinSettings` -- every run option (sample rate, seed, sensor imperfections, friction
  options, controller, drive-parameter overrides, gui, settle time). Built from a plain dict with
  :meth:`TwinSettings.from_dict`, which raises ``ValueError`` naming any unknown key. The
  scenario layer maps scenario YAML onto exactly these keys.
* :class:`DriveParams` -- per-joint drive ground truth (gear ratio, torque constant, motor inertia,
  friction, harmonic-drive friction coefficients, stiffness, damping) read from the arm's drive
  YAML (``assets/cobot6_drives.yaml``) by the one loader :func:`identify.model.drives.load_drives`,
  with per-joint overrides, as (n,) arrays for the simulation.
* :class:`TwinConfig` -- URDF + drives + optional payload + settings, ready for
  :class:`twin.sim.TwinSim`.

Units: SI everywhere (rad, rad/s, N*m, A, s, kg, m). Per-joint settings accept a scalar (same for
every joint) or a list of n values in joint order.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, asdict
from pathlib import Path

import numpy as np

from identify.model.drives import DRIVE_KEYS as _DRIVE_KEY_MAP, load_drives
from identify.model.payload import payload_problem

from .reducer import ReducerLaw, read_law_parameters

#: Keys of one joint entry in the drives YAML (all SI, link side unless noted); the one reader of
#: that file is :func:`identify.model.drives.load_drives`.
DRIVE_KEYS = tuple(_DRIVE_KEY_MAP)

#: settings that must be true/false
_BOOL_KEYS = ("gui", "drive_model", "position_control", "deflection_compensation", "motor_friction",
              "harmonic_friction", "link_friction", "stribeck", "noise")
#: numeric settings that may be null
_NULLABLE = ("pid_kp", "pid_ki", "pid_kd", "torque_limit_scale", "encoder_resolution_bits",
             "current_quantization_A")


@dataclass
class TwinSettings:
    """All run options of the twin (plain values; scalars or per-joint lists where noted).

    Run / simulation:
        sample_rate_hz: recording rate [Hz], a divisor of 1000 (the 1 kHz control rate); paper: 100.
        seed: seed of every random draw (sensor noise, offsets); same seed -> same recording.
        gui: open the PyBullet GUI instead of DIRECT.
        settle_s: time [s] the arm holds the start pose before the recorded run starts.
        drive_model: False -> rigid joints: the commanded motor torque acts directly on the link
            (no motor inertia, no friction, no compliance). Used for rigid-body consistency checks.
            The position loop then drives the coupled link inertia M(q) itself, so by default it
            is decoupled: tau_m = M(q) (kp e + kd e' + ki int e) + tau_ff with acceleration gains
            from pid_bandwidth_hz / pid_damping / pid_integral_time_s, M refreshed every
            mass_matrix_every steps (holds the upright pose exactly; tracks the 2 s full-scale
            test excitation within 0.73 deg). Explicit pid_kp/ki/kd switch to per-joint gains.
        position_control: False -> no position loop: tau_m = tau_ff only (open-loop torque).
        deflection_compensation: the drive adds the joint deflection tau_r / K (from its torque
            sensor) to the motor-side set point, so the LINK settles at q_cmd (False: the motor
            settles at q_cmd and the link sags by tau_r / K).
        mass_matrix_every: refresh the joint-space mass matrix used by the semi-implicit
            compliance coupling every this many 1 ms steps (1 = every step). PyBullet itself
            always uses the exact M; the stale copy only shapes the implicit spring prediction:
            50 vs 1 differs by < 1e-5 rad and ~0.01 N*m on a 4 s excitation (tested).
    Controller (CSP position loop on the motor side, per joint):
        pid_bandwidth_hz: closed-loop bandwidth used to compute default gains [Hz]. Default 12 Hz:
            a third of the lowest joint resonance (joint 1, ~38 Hz); on the 4 s test excitation
            (link speeds to 3 rad/s) it tracks within 0.35 deg max / 0.23 deg rms per joint
            (8 Hz: 0.8 / 0.5 deg; 16 Hz: 0.22 / 0.16 deg).
        pid_damping: damping ratio used to compute default gains.
        pid_integral_time_s: integral time T_i: Ki = Kp / T_i [s].
        pid_kp, pid_ki, pid_kd: explicit gains [N*m/rad, N*m/(rad*s), N*m*s/rad] (None -> computed
            from bandwidth, damping and the joint's inertia J'_m + M_ii(q0), see :mod:`twin.drive`;
            rigid joints: the decoupled loop above, and a missing gain next to explicit ones uses
            the joint's smallest effective inertia 1/(M^-1)_ii(q0)). Every gain set is checked at
            reset: the 1 ms loop linearised at q0 (coupled links, springs, gravity stiffness;
            stick-slip friction left out) must have spectral radius < 1, else ValueError naming
            the joint and gain at fault (twin.drive.check_drive_gains / check_rigid_gains).
        torque_limit_scale: motor torque is clipped at this times the joint's URDF effort limit
            (None -> no clip).
    Friction and drive options:
        motor_friction, harmonic_friction, link_friction: switch each friction source on/off.
        reducer_friction_law: the harmonic-drive loss law (:mod:`twin.reducer`): "opposing"
            (default; xi |tau_in| always against the motion, the identification's "opposing"
            variant), "paper" (xi tau_in, the paper's generative law, the "linear" variant; not
            dissipative when back-driven), "load_speed" (speed-dependent coefficient + Stribeck
            drag from the harmonic-drive literature; no identification variant shares it;
            parameters in the drive file's ``reducer_friction_laws.load_speed``),
            "speed_efficiency" (efficiency falling strongly with speed, in the power-flow form:
            tau_r = eta(w) tau_in driving, tau_in = eta(w) tau_r back-driven; no identification
            variant shares it; ``reducer_friction_laws.speed_efficiency``).
        stribeck: add a Stribeck peak to the Coulomb terms.
        stribeck_ratio: static / Coulomb friction ratio (>= 1).
        stribeck_velocity_rad_s: Stribeck velocity (link side) [rad/s].
        coulomb_asymmetry: relative asymmetry a: F(+) = Fc (1 + a), F(-) = Fc (1 - a), |a| < 1.
        friction_drift: relative friction change reached after warm-up (e.g. -0.3 = -30 %),
            profile 1 + drift * (1 - exp(-t / friction_drift_time_s)); |drift| <= 0.3. Scales the
            motor and link Coulomb (every step) and viscous (with each mass-matrix refresh)
            friction; the harmonic-drive coefficient xi is kept constant.
        friction_drift_time_s: warm-up time constant [s].
        link_friction_load_driving, link_friction_load_braking: load-dependent link friction
            [-] (4-quadrant, docs/twin.md "Twin laws"): the link Coulomb level grows by
            k |tau_r| (tau_r the transmitted torque), k = driving coefficient when tau_r v >= 0
            (the drive drives the link), braking coefficient when tau_r v < 0; 0..0.2. Not drifted.
        presliding_rad: Dahl presliding of the link Coulomb friction: displacement constant z0
            [rad] (1e-4..1e-3 on real joints; 0 = stick-slip Coulomb): z' = v - |v| z / z0,
            friction F = F_c z / z0 (F_c the Coulomb level with every option above), so the
            friction keeps the sign of the last motion at standstill (direction memory).
        ripple_Nm: amplitude of the position-dependent torque ripple on the motor side [N*m].
        ripple_cycles_per_motor_rev: ripple periods per motor revolution (2 = harmonic-drive
            kinematic error at twice the wave-generator speed).
        backlash_rad: total backlash (play) of the transmission, link side [rad].
        drive_overrides: {joint name: {drives-YAML key: value}} replacing the drive file's values.
    Contacts (collision-detection tests, :mod:`twin.contacts`):
        contacts: list of external forces, each {link: URDF link name, time_s: start [s] on the
            recording's clock (t = 0 at the trajectory's start), duration_s [s], force_N:
            [fx, fy, fz] in the WORLD frame [N], point_m: optional [x, y, z] in the link's URDF
            frame [m] (default: the link's centre of mass)}. Applied over every 1 ms period whose
            start lies in [time_s, time_s + duration_s); recorded in the truth ("tau_ext",
            "f_ext").
    Sensors (see :mod:`twin.sensors`):
        noise: master switch; False -> ideal sensors (all imperfections below ignored).
        encoder_noise_rad: white noise std of the link encoder [rad] (0.001-0.01 deg realistic).
        encoder_resolution_bits: encoder counts per revolution = 2**bits (None -> no quantization).
        torque_noise_Nm: white noise std of the joint torque sensor [N*m].
        torque_offset_Nm: constant offset of the torque sensor [N*m].
        torque_drift_Nm_s: linear drift rate of the torque sensor offset [N*m/s].
        current_noise_A: white noise std of the motor current [A].
        current_scale_error: relative gain error of the current measurement (0.02 = +2 %).
        current_bias_A: constant current bias [A].
        current_quantization_A: current LSB [A] (None/0 -> none).
        velocity_noise_rad_s: white noise std of the drive's reported velocity (motor side,
            reflected to the link; Recording.qd) [rad/s].
        io_delay_s: fixed delay of every measurement [s] (rounded to whole 1 ms steps).
    """

    sample_rate_hz: float = 100.0
    seed: int = 0
    gui: bool = False
    settle_s: float = 0.5
    drive_model: bool = True
    position_control: bool = True
    deflection_compensation: bool = True
    mass_matrix_every: int = 50
    pid_bandwidth_hz: float = 12.0
    pid_damping: float = 1.0
    pid_integral_time_s: float = 0.1
    pid_kp: object = None
    pid_ki: object = None
    pid_kd: object = None
    torque_limit_scale: float | None = 1.5
    motor_friction: bool = True
    harmonic_friction: bool = True
    reducer_friction_law: str = "opposing"
    link_friction: bool = True
    stribeck: bool = False
    stribeck_ratio: object = 1.5
    stribeck_velocity_rad_s: object = 0.02
    coulomb_asymmetry: object = 0.0
    friction_drift: float = 0.0
    friction_drift_time_s: float = 60.0
    link_friction_load_driving: object = 0.0
    link_friction_load_braking: object = 0.0
    presliding_rad: object = 0.0
    ripple_Nm: object = 0.0
    ripple_cycles_per_motor_rev: float = 2.0
    backlash_rad: object = 0.0
    drive_overrides: dict = field(default_factory=dict)
    contacts: list = field(default_factory=list)
    noise: bool = True
    encoder_noise_rad: object = math.radians(0.005)
    encoder_resolution_bits: int | None = 20
    torque_noise_Nm: object = 0.05
    torque_offset_Nm: object = 0.0
    torque_drift_Nm_s: object = 0.0
    current_noise_A: object = 0.01
    current_scale_error: object = 0.0
    current_bias_A: object = 0.0
    current_quantization_A: float | None = 0.001
    velocity_noise_rad_s: object = 1e-3
    io_delay_s: float = 0.0

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]

    @classmethod
    def from_dict(cls, d: dict | None, where: str = "settings") -> "TwinSettings":
        """Build from a plain dict; unknown keys raise ValueError naming them and listing valid ones."""
        d = dict(d or {})
        unknown = sorted(set(d) - set(cls.keys()))
        if unknown:
            raise ValueError(f"{where}: unknown twin setting(s) {unknown}; valid keys: {cls.keys()}")
        s = cls(**d)
        s.validate(where)
        return s

    def to_dict(self) -> dict:
        return asdict(self)

    def validate(self, where: str = "settings") -> None:
        """Raise ValueError naming the key (``where.key=value: message``) of any bad setting:
        wrong type, NaN/inf, or out of range."""
        for k in _BOOL_KEYS:
            if not isinstance(getattr(self, k), (bool, np.bool_)):
                raise ValueError(f"{where}.{k}={getattr(self, k)!r}: must be true or false")
        for f in fields(self):
            k, v = f.name, getattr(self, f.name)
            if k in _BOOL_KEYS or k in ("drive_overrides", "reducer_friction_law", "contacts") or (
                    v is None and k in _NULLABLE):
                continue
            if isinstance(v, (bool, np.bool_)) or (isinstance(v, (list, tuple)) and
                                                   any(isinstance(x, bool) for x in v)):
                raise ValueError(f"{where}.{k}={v!r}: must be a number, not true/false")
            try:
                a = np.asarray(v, dtype=float)
            except (TypeError, ValueError):
                raise ValueError(f"{where}.{k}={v!r}: must be a number"
                                 + (" or a list of numbers (one per joint)"
                                    if f.type == "object" else "")) from None
            if a.ndim > 1 or a.size == 0:
                raise ValueError(f"{where}.{k}={v!r}: must be a number or a flat list of numbers")
            if not np.all(np.isfinite(a)):
                raise ValueError(f"{where}.{k}={v!r}: must be finite")
        for k in ("seed", "mass_matrix_every", "encoder_resolution_bits"):
            v = getattr(self, k)
            if v is not None and not (isinstance(v, (int, np.integer)) and not isinstance(v, bool)):
                raise ValueError(f"{where}.{k}={v!r}: must be an integer")
        if self.seed < 0:
            raise ValueError(f"{where}.seed={self.seed!r}: must be >= 0")
        rate = float(self.sample_rate_hz)
        if not rate > 0:
            raise ValueError(f"{where}.sample_rate_hz={self.sample_rate_hz!r}: must be > 0")
        if rate > 1000.0 or abs(1000.0 / rate - round(1000.0 / rate)) > 1e-9:
            raise ValueError(f"{where}.sample_rate_hz={self.sample_rate_hz!r}: must divide the "
                             f"1000 Hz control rate (e.g. 100, 200, 500, 1000)")
        if abs(float(self.friction_drift)) > 0.3 + 1e-12:
            raise ValueError(f"{where}.friction_drift={self.friction_drift!r}: must be within +-0.3")
        if self.friction_drift_time_s <= 0:
            raise ValueError(f"{where}.friction_drift_time_s={self.friction_drift_time_s!r}: "
                             f"must be > 0")
        if np.any(np.abs(np.asarray(self.coulomb_asymmetry, float)) >= 1):
            raise ValueError(f"{where}.coulomb_asymmetry must be within (-1, 1)")
        if np.any(np.asarray(self.stribeck_ratio, float) < 1):
            raise ValueError(f"{where}.stribeck_ratio must be >= 1")
        if np.any(np.asarray(self.stribeck_velocity_rad_s, float) <= 0):
            raise ValueError(f"{where}.stribeck_velocity_rad_s must be > 0")
        for k, hi in (("link_friction_load_driving", 0.2), ("link_friction_load_braking", 0.2),
                      ("presliding_rad", 0.01)):
            a = np.asarray(getattr(self, k), float)
            if np.any(a < 0) or np.any(a > hi):
                raise ValueError(f"{where}.{k}={getattr(self, k)!r}: must be within 0..{hi}")
        if np.any(np.asarray(self.backlash_rad, float) < 0):
            raise ValueError(f"{where}.backlash_rad must be >= 0")
        for k in ("io_delay_s", "settle_s"):
            if getattr(self, k) < 0:
                raise ValueError(f"{where}.{k}={getattr(self, k)!r}: must be >= 0 "
                                 f"(io_delay_s and settle_s must be >= 0)")
        if int(self.mass_matrix_every) < 1:
            raise ValueError(f"{where}.mass_matrix_every must be >= 1")
        if self.encoder_resolution_bits is not None and not 1 <= self.encoder_resolution_bits <= 64:
            raise ValueError(f"{where}.encoder_resolution_bits={self.encoder_resolution_bits!r}: "
                             f"must be within 1..64 (or null)")
        for k in ("pid_bandwidth_hz", "pid_damping", "pid_integral_time_s", "ripple_cycles_per_motor_rev"):
            if not float(getattr(self, k)) > 0:
                raise ValueError(f"{where}.{k}={getattr(self, k)!r}: must be > 0")
        if self.torque_limit_scale is not None and not float(self.torque_limit_scale) > 0:
            raise ValueError(f"{where}.torque_limit_scale={self.torque_limit_scale!r}: must be > 0 "
                             f"(or null: no clip)")
        if not float(np.min(np.asarray(self.current_scale_error, float))) > -1:
            raise ValueError(f"{where}.current_scale_error={self.current_scale_error!r}: must be > -1")
        for k in ("encoder_noise_rad", "torque_noise_Nm", "current_noise_A", "velocity_noise_rad_s",
                  "ripple_Nm", "current_quantization_A", "pid_kp", "pid_ki", "pid_kd"):
            v = getattr(self, k)
            if v is not None and np.any(np.asarray(v, float) < 0):
                raise ValueError(f"{where}.{k} must be >= 0")
        from .contacts import check_contacts
        from .reducer import LAWS
        check_contacts(self.contacts, f"{where}.contacts")
        if self.reducer_friction_law not in LAWS:
            raise ValueError(f"{where}.reducer_friction_law={self.reducer_friction_law!r}: must be "
                             f"one of {list(LAWS)}")
        if not isinstance(self.drive_overrides, dict):
            raise ValueError(f"{where}.drive_overrides must be a mapping joint -> {{key: value}}")

    def per_joint(self, key: str, n: int) -> np.ndarray:
        """Setting `key` as an (n,) float array (scalar broadcast; list length checked)."""
        v = getattr(self, key)
        a = np.asarray(0.0 if v is None else v, dtype=float)
        if a.ndim == 0:
            return np.full(n, float(a))
        if a.shape != (n,):
            raise ValueError(f"setting {key!r} has {a.size} values, expected 1 or {n} (one per joint)")
        return a.copy()


@dataclass(frozen=True)
class DriveParams:
    """Per-joint drive parameters, (n,) arrays in joint order, SI, link side unless noted.

    gear_ratio eta [-]; torque_constant beta [N*m/A] (motor shaft); J_m motor + wave-generator
    inertia on the motor shaft [kg*m^2]; J_r = eta^2 J_m reflected [kg*m^2]; motor_coulomb,
    link_coulomb [N*m]; motor_viscous, link_viscous [N*m*s/rad]; xi = xi_gf + xi_sf [-];
    stiffness K [N*m/rad]; damping D [N*m*s/rad]; rated_torque [N*m].
    """

    joint_names: tuple
    gear_ratio: np.ndarray
    torque_constant: np.ndarray
    J_m: np.ndarray
    motor_coulomb: np.ndarray
    motor_viscous: np.ndarray
    xi_gf: np.ndarray
    xi_sf: np.ndarray
    link_coulomb: np.ndarray
    link_viscous: np.ndarray
    stiffness: np.ndarray
    damping: np.ndarray
    rated_torque: np.ndarray
    source: str = ""

    @property
    def J_r(self) -> np.ndarray:
        return self.gear_ratio ** 2 * self.J_m

    @property
    def xi(self) -> np.ndarray:
        return self.xi_gf + self.xi_sf

    @property
    def torque_factor(self) -> np.ndarray:
        """eta * beta: reflected motor torque per ampere [N*m/A]."""
        return self.gear_ratio * self.torque_constant

    @staticmethod
    def from_yaml(path: str | Path, joint_names, overrides: dict | None = None,
                  where: str = "drive_overrides") -> "DriveParams":
        """Read the drives YAML for `joint_names` (matched by name), applying `overrides`
        ({joint: {key: value}}) -- through the one loader :func:`identify.model.drives.load_drives`.
        Errors name the file, joint and key (overrides: `where` + the key path)."""
        d = load_drives(path, list(joint_names), overrides, where=where)
        arr = d.array
        return DriveParams(
            joint_names=tuple(joint_names), gear_ratio=arr("gear_ratio"),
            torque_constant=arr("torque_constant"), J_m=arr("J_m"),
            motor_coulomb=arr("motor_coulomb"), motor_viscous=arr("motor_viscous"),
            xi_gf=arr("xi_gf"), xi_sf=arr("xi_sf"), link_coulomb=arr("link_coulomb"),
            link_viscous=arr("link_viscous"), stiffness=arr("stiffness"), damping=arr("damping"),
            rated_torque=arr("rated_torque"), source=str(path))


def _check_payload(payload: dict | None) -> dict | None:
    """Validate an end-effector payload {mass_kg, com_m (3,), inertia_kgm2 (6,) about the COM
    [Ixx, Iyy, Izz, Ixy, Ixz, Iyz], expressed in the last joint's link frame}."""
    if payload is None:
        return None
    allowed = {"mass_kg", "com_m", "inertia_kgm2"}
    bad = sorted(set(payload) - allowed)
    if bad:
        raise ValueError(f"payload: unknown key(s) {bad}; valid: {sorted(allowed)}")
    if "mass_kg" not in payload:
        raise ValueError("payload: 'mass_kg' is required")
    try:
        m = float(payload["mass_kg"])
        com = np.asarray(payload.get("com_m", [0.0, 0.0, 0.0]), float)
        I = np.asarray(payload.get("inertia_kgm2", [0.0] * 6), float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"payload: values must be numbers ({exc})") from None
    if not m > 0:
        raise ValueError(f"payload.mass_kg must be > 0, got {m}")
    if com.shape != (3,):
        raise ValueError(f"payload.com_m must have 3 values, got {com.size}")
    if I.shape != (6,):
        raise ValueError(f"payload.inertia_kgm2 must be [Ixx, Iyy, Izz, Ixy, Ixz, Iyz], got {I.size} values")
    prob = payload_problem(m, com, I)
    if prob is not None:
        raise ValueError(f"payload.{prob[0]}: {prob[1]}")
    return {"mass_kg": m, "com_m": com.tolist(), "inertia_kgm2": I.tolist()}


@dataclass
class TwinConfig:
    """Everything a :class:`twin.sim.TwinSim` needs.

    Attributes:
        urdf: path of the arm URDF.
        joint_names: moving joints in chain order (from the URDF).
        drives: :class:`DriveParams` for those joints.
        settings: :class:`TwinSettings`.
        payload: validated payload dict or None.
        q_min, q_max, qd_max, tau_max: (n,) URDF limits [rad, rad/s, N*m].
        qdd_max: (n,) acceleration limits [rad/s^2] (inf where unknown).
        dt: physics / control step [s] (1 ms).
    """

    urdf: str
    joint_names: list
    drives: DriveParams
    settings: TwinSettings
    payload: dict | None
    q_min: np.ndarray
    q_max: np.ndarray
    qd_max: np.ndarray
    tau_max: np.ndarray
    qdd_max: np.ndarray
    drives_path: str = ""
    dt: float = 1e-3
    #: the drive file's ``reducer_friction_laws`` section (twin.reducer.read_law_parameters)
    reducer_params: dict = field(default_factory=dict)
    gravity: tuple = (0.0, 0.0, -9.81)

    @property
    def n(self) -> int:
        return len(self.joint_names)

    @classmethod
    def from_files(cls, urdf_path, drives_path, overrides: dict | None = None,
                   payload: dict | None = None, sensors: dict | None = None,
                   settings: dict | TwinSettings | None = None, qdd_max=None) -> "TwinConfig":
        """Build from the arm URDF and drives YAML.

        Args:
            urdf_path, drives_path: files.
            overrides: per-joint drive overrides {joint: {key: value}} (merged over
                settings["drive_overrides"]).
            payload: {mass_kg, com_m, inertia_kgm2} on the last link, or None.
            sensors: sensor-setting keys (a subset of :class:`TwinSettings`), merged over `settings`.
            settings: dict of :class:`TwinSettings` keys (or an instance).
            qdd_max: (n,) acceleration limits [rad/s^2]; None -> the reference arm's when the URDF is
                the reference arm, else inf.
        """
        from identify.model.urdf import load_chain

        if isinstance(settings, TwinSettings):
            sd = settings.to_dict()
        else:
            sd = dict(settings or {})
        if sensors:
            sd.update(sensors)
        if overrides:
            merged = {k: dict(v) for k, v in (sd.get("drive_overrides") or {}).items()}
            for j, kv in overrides.items():
                merged.setdefault(j, {}).update(kv)
            sd["drive_overrides"] = merged
        s = TwinSettings.from_dict(sd)
        chain = load_chain(urdf_path)
        names = list(chain.joint_names)
        drives = DriveParams.from_yaml(drives_path, names, s.drive_overrides)
        n = len(names)
        if qdd_max is None:
            qdd_max = _reference_qdd_max(urdf_path, names)
        qdd = np.broadcast_to(np.asarray(qdd_max, float), (n,)).copy()
        return cls(urdf=str(urdf_path), joint_names=names, drives=drives, settings=s,
                   payload=_check_payload(payload), q_min=np.asarray(chain.q_min, float),
                   q_max=np.asarray(chain.q_max, float), qd_max=np.asarray(chain.qd_max, float),
                   tau_max=np.asarray(chain.tau_max, float), qdd_max=qdd, drives_path=str(drives_path),
                   reducer_params=read_law_parameters(drives_path))

    def reducer_law(self):
        """The :class:`twin.reducer.ReducerLaw` in effect (settings.reducer_friction_law; xi = 0
        with harmonic_friction off)."""
        s, d = self.settings, self.drives
        xi = d.xi if s.harmonic_friction else np.zeros(self.n)
        # the load_speed law's drag is scaled by the drive file's motor Coulomb level (a size
        # measure of the drive), whether or not the motor friction itself is switched on
        fc = d.motor_coulomb if s.harmonic_friction else np.zeros(self.n)
        return ReducerLaw.build(s.reducer_friction_law, xi, fc, self.reducer_params)


def _reference_qdd_max(urdf_path, names) -> np.ndarray:
    """Acceleration limits of the reference arm when `urdf_path` is its URDF (URDF has none)."""
    try:
        from identify import RobotModel
        ref = RobotModel.reference()
        if list(ref.joint_names) == list(names) and Path(urdf_path).stem == ref.name:
            return np.asarray(ref.limits.qdd_max, float)
    except Exception:  # foundation not available or not the reference arm
        pass
    return np.full(len(names), np.inf)
