"""EtherCAT drive configuration (``assets/cobot6_ethercat.yaml``) -> validated, immutable dataclasses.

The file holds the vendor-facing integers of the bus (identity, PDO layout, startup SDOs,
per-drive scaling). This module only parses and validates; conversion to SI lives in
:mod:`robot.drive.units`, the PDO codec in :mod:`robot.drive.pdo`. Every error names the file and the key
(and the drive / entry index) at fault.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "assets" / "cobot6_ethercat.yaml"

# PDO / SDO scalar types: name -> (numpy little-endian code, bit length, signed)
TYPES = {
    "U8": ("<u1", 8, False), "I8": ("<i1", 8, True),
    "U16": ("<u2", 16, False), "I16": ("<i2", 16, True),
    "U32": ("<u4", 32, False), "I32": ("<i4", 32, True),
}


class ConfigError(ValueError):
    """The drive configuration file is malformed; the message names file and key."""


@dataclass(frozen=True)
class PdoEntry:
    """One mapped object: CoE index/subindex, scalar type name (see TYPES), field name."""
    index: int
    sub: int
    type: str
    name: str

    @property
    def bits(self) -> int:
        return TYPES[self.type][1]

    @property
    def mapping_word(self) -> int:
        """The 32-bit PDO mapping entry (index << 16 | sub << 8 | bit length)."""
        return (self.index << 16) | (self.sub << 8) | self.bits


@dataclass(frozen=True)
class StartupSdo:
    """A CoE object written to every drive in PREOP before the PDO assignment. `optional`: written
    only when the drive has the object (an 'object does not exist' abort skips it, reported)."""
    index: int
    sub: int
    type: str
    value: int
    optional: bool = False


@dataclass(frozen=True)
class DriveConfig:
    """Per-drive scaling (bus position = list position = joint order in the file).

    sign: +1/-1 maps the drive's positive direction to the model's joint direction.
    encoder_counts_per_rev: link-side encoder counts per link revolution.
    gear_ratio, torque_constant_Nm_A: eta and beta (tau'_m = eta * beta * i).
    rated_torque_Nm: 0x6076, link-side (reflected); torque_actual/torque_offset are per mille of it.
    rated_current_A: 0x6075; current_actual is per mille of it.
    joint_torque_scale_Nm: N*m per unit of the torque-sensor object.
    position_encoder: "link" (0x6064 is the link-side, second encoder) or "motor" (0x6064 is the
        motor encoder: encoder_counts_per_rev counts per MOTOR revolution, gear_ratio motor
        revolutions per link revolution). Read back from the drive at bring-up (0x608F, 0x6091,
        manufacturer object 0x2003) and compared; a mismatch refuses.
    """
    joint: str
    sign: int
    encoder_counts_per_rev: int
    gear_ratio: float
    torque_constant_Nm_A: float
    rated_torque_Nm: float
    rated_current_A: float
    joint_torque_scale_Nm: float
    position_encoder: str = "link"
    serial_number: int | None = None     # 0x1018:4 expected at this bus position (None: not checked)
    station_alias: int | None = None     # configured station alias (SII word 4, loaded into ESC
                                         # register 0x0012) expected here (None: not checked)

    @property
    def counts_per_link_rev(self) -> float:
        """Counts of 0x6064 per link revolution."""
        return self.encoder_counts_per_rev * (self.gear_ratio if self.position_encoder == "motor" else 1)


@dataclass(frozen=True)
class BusConfig:
    """Bus settings (``bus:`` section; SI units).

    distributed_clocks: "auto" (on when every slave supports DC), True (required) or False.
    sync0_shift_s: SYNC0 shift after the DC cycle boundary [s]; dc_frame_offset_s: where in the
        DC cycle the master aligns its frames (drift-compensated) [s].
    watchdog_s: SyncManager (process-data) watchdog programmed into every slave (0x0400 divider,
        0x0420 time): a slave whose outputs stop for this long leaves OP (drives stop).
    receive_timeout_frac: process-data receive timeout as a fraction of the cycle (< 1: a lost
        frame costs at most one cycle).
    al_check_cycles: the AL state/status code of every slave is read every this many cycles (and
        at once on any working-counter deficit).
    """
    cycle_time_s: float = 0.001
    distributed_clocks: object = "auto"
    wkc_error_budget: int = 3       # consecutive working-counter drops tolerated
    lost_frame_budget: int = 5      # lost frames tolerated within lost_frame_window cycles
    lost_frame_window: int = 1000
    sync0_shift_s: float = 0.0005
    dc_frame_offset_s: float = 0.00005
    watchdog_s: float = 0.1
    receive_timeout_frac: float = 0.6
    al_check_cycles: int = 10


@dataclass(frozen=True)
class SafetyConfig:
    """Run-time safety settings (optional ``safety:`` section; SI units; defaults below).

    following_error_max_rad: |q_cmd - q_actual| beyond which the run stops.
    position_step_max_rad: largest commanded change per cycle (per joint); the step actually
        enforced is min(this, 1.2 * qd_max * cycle_time) per joint (:func:`robot.safety.step_limit`),
        so the limiter never allows more than the joint's velocity limit (+20 % for the
        acceleration term of a sampled motion).
    hold_cycles: cycles the drives hold the last measured pose after a fault before disabling.
    stall_cycles: a cycle that starts this many periods late is a stalled loop.
    confirm_cycles: cycles allowed for the drives to report 'disabled' after the disable command.
    approach_speed_frac: fraction of qd_max used for the move to the trajectory's start pose.
    torque_margin_frac, torque_margin_coulomb: margins of the pre-move motor-torque bound
        (:mod:`robot.torque_bound`): bound = (1 + frac) * nominal + coulomb * Coulomb level, for
        the position loop's transients around the commanded motion.
    fault_reset: "never" (default: a drive already in FAULT at start refuses the run, naming
        its 0x603F error code) or "on_start" (reset it once while enabling).
    brake_delay_s: in the stop sequence, time between disable operation (0x07, brake engages)
        and shutdown (0x06, power off) per drive [s].
    start_pose_tolerance_rad: the pose read at bring-up may differ from the trajectory's start
        pose by at most this much per joint [rad] (else refused before enabling).
    following_error_timeout_s: drive-side following error timeout, written to 0x6066 [s]; the
        window 0x6065 is following_error_max_rad in counts.
    stop_jerk_max_rad_s3: jerk limit of the stop ramp [rad/s^3] (0: acceleration limit only); the
        ramp's deceleration is the run's acceleration limit qdd_max of each joint.
    standstill_rad_s, settle_cycles: after the ramp the drives are disabled once every enabled
        joint's measured speed is below standstill_rad_s [rad/s], waiting at most settle_cycles.
    quick_stop_option, shutdown_option, disable_operation_option, fault_reaction_option,
        abort_connection_option: the drives' own stop reactions written at bring-up (0x605A,
        0x605B, 0x605C, 0x605E, 0x6007; CiA 402 option codes), with the quick-stop and profile
        deceleration (0x6085, 0x6084) from the arm's acceleration limits and the max torque 0x6072
        from its torque limits (:mod:`robot.drive.reactions`).
    feedback_fault_cycles: consecutive cycles of a frozen or jumping encoder (against the
        commanded motion) that stop the run as a feedback fault.
    """
    following_error_max_rad: float = 0.05
    position_step_max_rad: float = 0.005
    hold_cycles: int = 50
    stall_cycles: int = 100
    confirm_cycles: int = 20
    approach_speed_frac: float = 0.2
    torque_margin_frac: float = 0.25
    torque_margin_coulomb: float = 1.0
    fault_reset: str = "never"            # "never" | "on_start": reset a drive fault found at start
    brake_delay_s: float = 0.1            # disable operation (0x07) -> shutdown (0x06) delay
    start_pose_tolerance_rad: float = 0.5  # |pose read at bring-up - trajectory start| allowed
    following_error_timeout_s: float = 0.01   # drive-side following error (0x6066)
    stop_jerk_max_rad_s3: float = 0.0     # 0: no jerk limit on the stop ramp
    standstill_rad_s: float = 0.05
    settle_cycles: int = 200
    quick_stop_option: int = 2            # slow down on the quick stop ramp -> switch on disabled
    shutdown_option: int = 1              # slow down on the slow down ramp, then disable
    disable_operation_option: int = 1     # slow down on the slow down ramp, then disable
    fault_reaction_option: int = 2        # slow down on the quick stop ramp
    abort_connection_option: int = 3      # master lost: quick stop
    feedback_fault_cycles: int = 10


@dataclass(frozen=True)
class EthercatConfig:
    path: str
    bus: BusConfig
    vendor_id: int
    product_code: int
    revision: int
    rx_pdo: int
    rx_entries: tuple[PdoEntry, ...]
    tx_pdo: int
    tx_entries: tuple[PdoEntry, ...]
    startup_sdo: tuple[StartupSdo, ...]
    drives: tuple[DriveConfig, ...]
    safety: SafetyConfig = field(default_factory=SafetyConfig)

    @property
    def n_drives(self) -> int:
        return len(self.drives)

    @property
    def joint_names(self) -> list[str]:
        return [d.joint for d in self.drives]


# CiA 402 option codes a safe integration may choose (each one decelerates on a ramp; "disable
# drive function" / coasting (0) is not offered)
_REACTION_CODES = {
    "quick_stop_option": (1, 2, 5, 6),        # 0x605A: slow down / quick stop ramp (5, 6: stay in QSA)
    "shutdown_option": (1,),                  # 0x605B: slow down ramp, then disable
    "disable_operation_option": (1,),         # 0x605C: slow down ramp, then disable
    "fault_reaction_option": (1, 2),          # 0x605E: slow down / quick stop ramp
    "abort_connection_option": (1, 3),        # 0x6007: fault (-> fault reaction) / quick stop
}

REQUIRED_RX = ("controlword", "target_position")
REQUIRED_TX = ("statusword", "position_actual")


def load_config(path: str | Path | None = None) -> EthercatConfig:
    """Read and validate the drive configuration YAML (default: assets/cobot6_ethercat.yaml)."""
    path = Path(path) if path is not None else DEFAULT_CONFIG
    if not path.exists():
        raise ConfigError(f"EtherCAT configuration file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})") from exc
    return parse_config(raw, str(path))


def _parse_drives(dl, where: str, num) -> list[DriveConfig]:
    """The ``drives:`` list (`num`: parse_config's validating number reader)."""
    if not isinstance(dl, list) or not dl:
        raise ConfigError(f"{where}: 'drives' must be a non-empty list (one entry per joint)")
    drives, seen = [], set()
    for k, d in enumerate(dl):
        ctx = f"drives[{k}]"
        if not isinstance(d, dict):
            raise ConfigError(f"{where}: {ctx} must be a mapping")
        joint = d.get("joint")
        if not isinstance(joint, str) or not joint:
            raise ConfigError(f"{where}: {ctx}.joint must be a joint name")
        if joint in seen:
            raise ConfigError(f"{where}: {ctx}.joint={joint!r} appears twice")
        seen.add(joint)
        ctx = f"{ctx} ({joint})"
        sign = num(d, "sign", ctx, int, default=1)
        if sign not in (1, -1):
            raise ConfigError(f"{where}: {ctx}.sign must be +1 or -1, got {sign}")
        enc = d.get("position_encoder", "link")
        if enc not in ("link", "motor"):
            raise ConfigError(f"{where}: {ctx}.position_encoder must be 'link' or 'motor', got {enc!r}")
        drives.append(DriveConfig(
            joint=joint, sign=sign,
            encoder_counts_per_rev=num(d, "encoder_counts_per_rev", ctx, int, True),
            gear_ratio=num(d, "gear_ratio", ctx, positive=True),
            torque_constant_Nm_A=num(d, "torque_constant_Nm_A", ctx, positive=True),
            rated_torque_Nm=num(d, "rated_torque_Nm", ctx, positive=True),
            rated_current_A=num(d, "rated_current_A", ctx, positive=True),
            joint_torque_scale_Nm=num(d, "joint_torque_scale_Nm", ctx, positive=True),
            position_encoder=enc,
            serial_number=num(d, "serial_number", ctx, int) if "serial_number" in d else None,
            station_alias=_alias(d, ctx, where, num)))
    return drives


def _alias(d: dict, ctx: str, where: str, num) -> int | None:
    """drives[k].station_alias: 1..65535 or absent (0 is "no alias" on EtherCAT)."""
    if "station_alias" not in d:
        return None
    a = num(d, "station_alias", ctx, int)
    if not 1 <= a <= 0xFFFF:
        raise ConfigError(f"{where}: {ctx}.station_alias must be 1..65535, got {a!r}")
    return a


def _parse_bus(b: dict, where: str, num) -> BusConfig:
    """The ``bus:`` section (`num`: parse_config's validating number reader)."""
    bd = BusConfig()
    dcv = b.get("distributed_clocks", bd.distributed_clocks)
    if dcv not in (True, False, "auto"):
        raise ConfigError(f"{where}: bus.distributed_clocks must be auto, true or false, got {dcv!r}")
    bus = BusConfig(
        cycle_time_s=num(b, "cycle_time_s", "bus", positive=True, default=bd.cycle_time_s),
        distributed_clocks=dcv,
        sync0_shift_s=num(b, "sync0_shift_s", "bus", default=bd.sync0_shift_s),
        dc_frame_offset_s=num(b, "dc_frame_offset_s", "bus", default=bd.dc_frame_offset_s),
        watchdog_s=num(b, "watchdog_s", "bus", positive=True, default=bd.watchdog_s),
        receive_timeout_frac=num(b, "receive_timeout_frac", "bus", positive=True,
                                 default=bd.receive_timeout_frac),
        al_check_cycles=num(b, "al_check_cycles", "bus", int, True, default=bd.al_check_cycles),
        wkc_error_budget=num(b, "wkc_error_budget", "bus", int, default=bd.wkc_error_budget),
        lost_frame_budget=num(b, "lost_frame_budget", "bus", int, default=bd.lost_frame_budget),
        lost_frame_window=num(b, "lost_frame_window", "bus", int, True, default=bd.lost_frame_window))
    if not 1e-4 <= bus.cycle_time_s <= 0.1:
        raise ConfigError(f"{where}: bus.cycle_time_s={bus.cycle_time_s} outside [1e-4, 0.1] s")
    if not bus.receive_timeout_frac < 1:
        raise ConfigError(f"{where}: bus.receive_timeout_frac={bus.receive_timeout_frac} must be < 1 "
                          f"(a lost frame may cost at most one cycle)")
    if not 0 <= bus.sync0_shift_s < bus.cycle_time_s or not 0 <= bus.dc_frame_offset_s < bus.cycle_time_s:
        raise ConfigError(f"{where}: bus.sync0_shift_s / dc_frame_offset_s must be in [0, cycle_time_s)")
    if not 2 * bus.cycle_time_s <= bus.watchdog_s <= 6.5:
        raise ConfigError(f"{where}: bus.watchdog_s={bus.watchdog_s} outside [2 cycles, 6.5 s]")
    return bus


def _parse_safety(s: dict, where: str, num) -> SafetyConfig:
    """The ``safety:`` section (`num`: parse_config's validating number reader)."""
    sd = SafetyConfig()
    safety = SafetyConfig(
        following_error_max_rad=num(s, "following_error_max_rad", "safety", positive=True,
                                    default=sd.following_error_max_rad),
        position_step_max_rad=num(s, "position_step_max_rad", "safety", positive=True,
                                  default=sd.position_step_max_rad),
        hold_cycles=num(s, "hold_cycles", "safety", int, default=sd.hold_cycles),
        stall_cycles=num(s, "stall_cycles", "safety", int, True, default=sd.stall_cycles),
        confirm_cycles=num(s, "confirm_cycles", "safety", int, True, default=sd.confirm_cycles),
        approach_speed_frac=num(s, "approach_speed_frac", "safety", positive=True,
                                default=sd.approach_speed_frac),
        torque_margin_frac=num(s, "torque_margin_frac", "safety", default=sd.torque_margin_frac),
        torque_margin_coulomb=num(s, "torque_margin_coulomb", "safety",
                                  default=sd.torque_margin_coulomb),
        fault_reset=s.get("fault_reset", sd.fault_reset),
        brake_delay_s=num(s, "brake_delay_s", "safety", default=sd.brake_delay_s),
        start_pose_tolerance_rad=num(s, "start_pose_tolerance_rad", "safety", positive=True,
                                     default=sd.start_pose_tolerance_rad),
        following_error_timeout_s=num(s, "following_error_timeout_s", "safety", positive=True,
                                      default=sd.following_error_timeout_s),
        stop_jerk_max_rad_s3=num(s, "stop_jerk_max_rad_s3", "safety", default=sd.stop_jerk_max_rad_s3),
        standstill_rad_s=num(s, "standstill_rad_s", "safety", positive=True,
                             default=sd.standstill_rad_s),
        settle_cycles=num(s, "settle_cycles", "safety", int, default=sd.settle_cycles),
        feedback_fault_cycles=num(s, "feedback_fault_cycles", "safety", int, True,
                                  default=sd.feedback_fault_cycles),
        **{k: num(s, k, "safety", int, default=getattr(sd, k)) for k in _REACTION_CODES})
    for k, allowed in _REACTION_CODES.items():
        if getattr(safety, k) not in allowed:
            raise ConfigError(f"{where}: safety.{k}={getattr(safety, k)} is not a stop reaction "
                              f"that ends at rest; allowed: {sorted(allowed)}")
    if safety.fault_reset not in ("never", "on_start"):
        raise ConfigError(f"{where}: safety.fault_reset must be 'never' or 'on_start', got "
                          f"{safety.fault_reset!r}")
    if not 0 <= safety.brake_delay_s <= 5:
        raise ConfigError(f"{where}: safety.brake_delay_s={safety.brake_delay_s} outside [0, 5] s")
    for key in ("torque_margin_frac", "torque_margin_coulomb", "stop_jerk_max_rad_s3", "settle_cycles"):
        if getattr(safety, key) < 0:
            raise ConfigError(f"{where}: safety.{key} must be >= 0, got {getattr(safety, key)!r}")
    return safety


def parse_config(raw: dict, where: str = "<dict>") -> EthercatConfig:
    """Validate an already-parsed configuration mapping (`where` names it in errors)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: top level must be a mapping")

    def sect(key):
        v = raw.get(key)
        if not isinstance(v, dict):
            raise ConfigError(f"{where}: missing or non-mapping section '{key}'")
        return v

    def num(d, key, ctx, kind=float, positive=False, default=None):
        if key not in d:
            if default is not None:
                return default
            raise ConfigError(f"{where}: {ctx}: missing key '{key}'")
        v = d[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"{where}: {ctx}.{key} must be a number, got {v!r}")
        if kind is int and (not float(v).is_integer()):
            raise ConfigError(f"{where}: {ctx}.{key} must be an integer, got {v!r}")
        if not math.isfinite(v):
            raise ConfigError(f"{where}: {ctx}.{key} must be finite, got {v!r}")
        if positive and not v > 0:
            raise ConfigError(f"{where}: {ctx}.{key} must be > 0, got {v!r}")
        return kind(v)

    bus = _parse_bus(raw.get("bus", {}) or {}, where, num)

    ident = sect("identity")
    vendor = num(ident, "vendor_id", "identity", int)
    product = num(ident, "product_code", "identity", int)
    revision = num(ident, "revision", "identity", int, default=0)

    pdo = sect("pdo")

    def entries(key):
        lst = pdo.get(key)
        if not isinstance(lst, list) or not lst:
            raise ConfigError(f"{where}: pdo.{key} must be a non-empty list")
        out, names = [], set()
        for k, e in enumerate(lst):
            ctx = f"pdo.{key}[{k}]"
            if not isinstance(e, dict):
                raise ConfigError(f"{where}: {ctx} must be a mapping")
            t = e.get("type")
            if t not in TYPES:
                raise ConfigError(f"{where}: {ctx}.type={t!r} not one of {sorted(TYPES)}")
            name = e.get("name")
            if not isinstance(name, str) or not name.isidentifier():
                raise ConfigError(f"{where}: {ctx}.name={name!r} must be an identifier")
            if name in names:
                raise ConfigError(f"{where}: {ctx}.name={name!r} appears twice")
            names.add(name)
            idx = num(e, "index", ctx, int)
            sub = num(e, "sub", ctx, int, default=0)
            if not (0 <= idx <= 0xFFFF and 0 <= sub <= 0xFF):
                raise ConfigError(f"{where}: {ctx}: index/sub out of range ({idx:#x}/{sub})")
            out.append(PdoEntry(idx, sub, t, name))
        return tuple(out)

    rx_entries, tx_entries = entries("rx_entries"), entries("tx_entries")
    for req, lst, key in ((REQUIRED_RX, rx_entries, "rx_entries"), (REQUIRED_TX, tx_entries, "tx_entries")):
        have = {e.name for e in lst}
        for r in req:
            if r not in have:
                raise ConfigError(f"{where}: pdo.{key} lacks required entry '{r}'")

    sdos = []
    for k, s in enumerate(raw.get("startup_sdo", []) or []):
        ctx = f"startup_sdo[{k}]"
        if not isinstance(s, dict) or s.get("type") not in TYPES:
            raise ConfigError(f"{where}: {ctx} needs index, sub, type (one of {sorted(TYPES)}), value")
        v = num(s, "value", ctx, int)
        code, bits, signed = TYPES[s["type"]]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        if not lo <= v <= hi:
            raise ConfigError(f"{where}: {ctx}.value={v} does not fit {s['type']}")
        opt = s.get("optional", False)
        if not isinstance(opt, bool):
            raise ConfigError(f"{where}: {ctx}.optional must be true or false, got {opt!r}")
        sdos.append(StartupSdo(num(s, "index", ctx, int), num(s, "sub", ctx, int, default=0), s["type"], v,
                               opt))

    drives = _parse_drives(raw.get("drives"), where, num)

    safety = _parse_safety(raw.get("safety", {}) or {}, where, num)

    return EthercatConfig(path=where, bus=bus, vendor_id=vendor, product_code=product,
                          revision=revision, rx_pdo=num(pdo, "rx", "pdo", int),
                          rx_entries=rx_entries, tx_pdo=num(pdo, "tx", "pdo", int),
                          tx_entries=tx_entries, startup_sdo=tuple(sdos), drives=tuple(drives),
                          safety=safety)


# -- backend settings (scenario `hardware:` section; `options` are passed through) ------------------
@dataclass(frozen=True)
class HardwareSettings:
    """Settings of the hardware backend (all optional; SI units).

    iface: network interface of the bus. armed: must be True to enable the drives (never a
    default). dry_run: bring the bus up and run every check, never enable. config: drive
    configuration YAML. limit_scale: fraction of the arm's qd/qdd/tau limits the run may use.
    position_margin_rad: kept clear of each position limit. record_dir: folder for the streamed
    chunks; every run gets its own sub-folder ``run<k>_<time>`` (default: ./twinid-hardware;
    the pipeline passes <run folder>/recordings). record_rate_hz: rate of the returned recording
    (default: the cycle rate; must divide it). torque_feedforward: send the rigid-body inverse
    dynamics of the plan (arm + payload) as torque_offset. complete_access: PDO mapping by CoE complete access.
    receive_timeout_us: process-data receive timeout (default: bus.receive_timeout_frac of the
    cycle; must stay below the cycle). enable_timeout_s:
    time allowed to enable all drives. watchdog_s: the parent stops a loop that makes no progress
    this long. bringup_timeout_s: time allowed to reach OP. dwell_s: rest before/after the
    trajectory. realtime: run the
    loop process SCHED_FIFO when permitted (a loud warning when not granted). fault_policy:
    {fault name: "hold" | "disable"} overrides of robot.safety.DEFAULT_POLICY. last_pose_file: a
    JSON file where every run leaves the pose measured at its end; the next run refuses a pose
    read at bring-up farther than last_pose_tolerance_rad [rad] from it on any joint (an absolute
    / multi-turn encoder that lost its offset), None: not checked.

    The interlock is part of the settings: :meth:`refusal` tells at load time whether a run would
    be refused (not armed and not a dry run), :attr:`may_enable` whether it would enable drives.
    """
    iface: str | None = None
    armed: bool = False
    dry_run: bool = False
    config: str | None = None
    limit_scale: float = 1.0
    position_margin_rad: float = 0.0
    record_dir: str | None = None
    record_rate_hz: float | None = None
    torque_feedforward: bool = False
    complete_access: bool = False
    receive_timeout_us: int | None = None
    enable_timeout_s: float = 3.0
    watchdog_s: float = 1.0
    bringup_timeout_s: float = 30.0
    dwell_s: float = 0.5
    realtime: bool = True
    fault_policy: dict = field(default_factory=dict)
    last_pose_file: str | None = None      # JSON of the pose measured at the end of the last run
    last_pose_tolerance_rad: float = 0.05  # bring-up pose vs that pose, per joint

    @staticmethod
    def from_settings(settings: dict | None) -> "HardwareSettings":
        """Validate a settings dict; errors name the key."""
        from dataclasses import fields as _fields
        settings = dict(settings or {})
        known = {f.name: f for f in _fields(HardwareSettings)}
        unknown = sorted(set(settings) - set(known))
        if unknown:
            raise ValueError(f"unknown hardware setting(s) {unknown}; known: {sorted(known)}")
        kw = {}
        for k, v in settings.items():
            if v is None:
                kw[k] = None if k in ("iface", "config", "record_dir", "record_rate_hz", "last_pose_file",
                                      "receive_timeout_us") else known[k].default
                continue
            if k in ("armed", "dry_run", "torque_feedforward", "complete_access",
                     "realtime"):
                if not isinstance(v, bool):
                    raise ValueError(f"hardware setting {k} must be true or false, got {v!r}")
            elif k in ("iface", "config", "record_dir", "last_pose_file"):
                v = str(v)
            elif k == "fault_policy":
                if not isinstance(v, dict):
                    raise ValueError(f"hardware setting fault_policy must be a mapping, got {v!r}")
                from .faults import Fault
                names = {f.value for f in Fault}
                for fk, fv in v.items():
                    if fk not in names:
                        raise ValueError(f"hardware setting fault_policy.{fk}: unknown fault; "
                                         f"known: {sorted(names)}")
                    if fv not in ("hold", "disable"):
                        raise ValueError(f"hardware setting fault_policy.{fk} must be 'hold' or "
                                         f"'disable', got {fv!r}")
            else:
                if (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                        or v < 0 or (v == 0 and k != "position_margin_rad")):
                    raise ValueError(f"hardware setting {k} must be a positive number, got {v!r}")
                if k == "limit_scale" and v > 1:
                    raise ValueError(f"hardware setting limit_scale must be in (0, 1], got {v!r}")
                if k == "receive_timeout_us":
                    v = int(v)
            kw[k] = v
        return HardwareSettings(**kw)

    @property
    def may_enable(self) -> bool:
        """True when a run with these settings would enable the drives (armed, not a dry run)."""
        return self.armed and not self.dry_run

    def refusal(self) -> str | None:
        """Why a run with these settings is refused before anything is computed or the bus is
        touched (None: not refused). Known at scenario load time."""
        if not self.armed and not self.dry_run:
            return ("refusing to move the arm: the hardware backend is not armed "
                    "(set hardware.armed: true, or dry_run: true to only check)")
        return None


def validate_settings(settings: dict) -> HardwareSettings:
    """Validator the scenario layer calls (by name) on the `hardware` settings / options."""
    return HardwareSettings.from_settings(settings)
