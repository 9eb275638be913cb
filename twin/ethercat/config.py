"""Slave-side reading of the EtherCAT drive configuration (``assets/cobot6_ethercat.yaml``).

The file is the contract between the master (``robot/``) and this emulator. The emulator parses
it on its own (it does not import ``robot``), so that a wrong reading on one side shows up as a
bring-up failure instead of two sides agreeing on the same mistake.

Everything here stays in bus integers (counts, per mille, 0.001 N*m); SI conversion of the drive
values lives in :mod:`twin.ethercat.drive`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

# scalar type name -> (struct code, bit length, CoE data type code)
TYPES: dict[str, tuple[str, int, int]] = {
    "I8": ("b", 8, 0x0002), "I16": ("h", 16, 0x0003), "I32": ("i", 32, 0x0004),
    "U8": ("B", 8, 0x0005), "U16": ("H", 16, 0x0006), "U32": ("I", 32, 0x0007),
}


class SlaveConfigError(ValueError):
    """The configuration file cannot drive the emulator; the message names file and key."""


@dataclass(frozen=True)
class Entry:
    """A mapped PDO entry: CoE index, subindex, scalar type name, field name."""
    index: int
    sub: int
    type: str
    name: str

    @property
    def bits(self) -> int:
        return TYPES[self.type][1]

    @property
    def mapping_word(self) -> int:
        """32-bit PDO mapping value: index << 16 | sub << 8 | bit length."""
        return (self.index << 16) | (self.sub << 8) | self.bits


@dataclass(frozen=True)
class Startup:
    index: int
    sub: int
    type: str
    value: int


@dataclass(frozen=True)
class DriveScaling:
    """Per-drive bus scaling (see the config file header for the meaning of each value)."""
    joint: str
    sign: int
    encoder_counts_per_rev: int
    gear_ratio: float
    torque_constant_Nm_A: float
    rated_torque_Nm: float
    rated_current_A: float
    joint_torque_scale_Nm: float
    position_encoder: str = "link"      # "link": second (link-side) encoder; "motor": motor encoder

    @property
    def counts_per_link_rev(self) -> int:
        """Counts of 0x6064 per link revolution (encoder counts x gear ratio for a motor encoder)."""
        g = round(self.gear_ratio) if self.position_encoder == "motor" else 1
        return self.encoder_counts_per_rev * g


@dataclass(frozen=True)
class SlaveConfig:
    vendor_id: int
    product_code: int
    revision: int
    rx_pdo: int
    rx_entries: tuple[Entry, ...]
    tx_pdo: int
    tx_entries: tuple[Entry, ...]
    startup: tuple[Startup, ...]
    drives: tuple[DriveScaling, ...]
    cycle_time_s: float
    source: str

    @property
    def rx_bytes(self) -> int:
        return sum(e.bits for e in self.rx_entries) // 8

    @property
    def tx_bytes(self) -> int:
        return sum(e.bits for e in self.tx_entries) // 8


def load_slave_config(path: str | Path) -> SlaveConfig:
    """Read and check the drive configuration file at `path`."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SlaveConfigError(f"EtherCAT configuration file not found: {path}") from None
    except yaml.YAMLError as exc:
        raise SlaveConfigError(f"{path}: not valid YAML ({exc})") from exc
    return parse_slave_config(raw, str(path))


def parse_slave_config(raw: dict, where: str = "<dict>") -> SlaveConfig:
    """Check a parsed configuration mapping; errors name `where` and the key at fault."""
    if not isinstance(raw, dict):
        raise SlaveConfigError(f"{where}: top level must be a mapping")

    def section(key):
        v = raw.get(key)
        if not isinstance(v, dict):
            raise SlaveConfigError(f"{where}: missing or non-mapping section '{key}'")
        return v

    def integer(d, key, ctx, lo=None, hi=None):
        v = d.get(key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise SlaveConfigError(f"{where}: {ctx}.{key} must be an integer, got {v!r}")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            raise SlaveConfigError(f"{where}: {ctx}.{key}={v} outside [{lo}, {hi}]")
        return v

    def positive(d, key, ctx):
        v = d.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SlaveConfigError(f"{where}: {ctx}.{key} must be a positive number, got {v!r}")
        return float(v)

    ident = section("identity")
    vendor = integer(ident, "vendor_id", "identity", 0, 0xFFFFFFFF)
    product = integer(ident, "product_code", "identity", 0, 0xFFFFFFFF)
    revision = integer(ident, "revision", "identity", 0, 0xFFFFFFFF) if "revision" in ident else 0

    pdo = section("pdo")

    def entries(key):
        lst = pdo.get(key)
        if not isinstance(lst, list) or not lst:
            raise SlaveConfigError(f"{where}: pdo.{key} must be a non-empty list")
        out = []
        for k, e in enumerate(lst):
            ctx = f"pdo.{key}[{k}]"
            if not isinstance(e, dict):
                raise SlaveConfigError(f"{where}: {ctx} must be a mapping")
            t = e.get("type")
            if t not in TYPES:
                raise SlaveConfigError(f"{where}: {ctx}.type={t!r} not one of {sorted(TYPES)}")
            out.append(Entry(integer(e, "index", ctx, 0x1000, 0xFFFF), integer(e, "sub", ctx, 0, 255),
                             t, str(e.get("name", f"obj_{e['index']:04x}"))))
        return tuple(out)

    rx_entries, tx_entries = entries("rx_entries"), entries("tx_entries")
    rx_pdo = integer(pdo, "rx", "pdo", 0x1600, 0x17FF)
    tx_pdo = integer(pdo, "tx", "pdo", 0x1A00, 0x1BFF)

    startup = []
    for k, s in enumerate(raw.get("startup_sdo") or []):
        ctx = f"startup_sdo[{k}]"
        if not isinstance(s, dict) or s.get("type") not in TYPES:
            raise SlaveConfigError(f"{where}: {ctx} needs index, sub, type (one of {sorted(TYPES)}), value")
        startup.append(Startup(integer(s, "index", ctx, 0x1000, 0xFFFF), integer(s, "sub", ctx, 0, 255),
                               s["type"], integer(s, "value", ctx)))

    drives_raw = raw.get("drives")
    if not isinstance(drives_raw, list) or not drives_raw:
        raise SlaveConfigError(f"{where}: 'drives' must be a non-empty list (one entry per joint)")
    drives = []
    for k, d in enumerate(drives_raw):
        ctx = f"drives[{k}]"
        if not isinstance(d, dict) or not isinstance(d.get("joint"), str):
            raise SlaveConfigError(f"{where}: {ctx} must be a mapping with a 'joint' name")
        sign = integer(d, "sign", ctx) if "sign" in d else 1
        if sign not in (1, -1):
            raise SlaveConfigError(f"{where}: {ctx}.sign must be +1 or -1, got {sign}")
        drives.append(DriveScaling(
            joint=d["joint"], sign=sign,
            encoder_counts_per_rev=integer(d, "encoder_counts_per_rev", ctx, 1),
            gear_ratio=positive(d, "gear_ratio", ctx),
            torque_constant_Nm_A=positive(d, "torque_constant_Nm_A", ctx),
            rated_torque_Nm=positive(d, "rated_torque_Nm", ctx),
            rated_current_A=positive(d, "rated_current_A", ctx),
            joint_torque_scale_Nm=positive(d, "joint_torque_scale_Nm", ctx),
            position_encoder=str(d.get("position_encoder", "link"))))
        if drives[-1].position_encoder not in ("link", "motor"):
            raise SlaveConfigError(f"{where}: {ctx}.position_encoder must be link or motor")
    cycle = float((raw.get("bus") or {}).get("cycle_time_s", 0.001))
    return SlaveConfig(vendor, product, revision, rx_pdo, rx_entries, tx_pdo, tx_entries,
                       tuple(startup), tuple(drives), cycle, where)
