"""Bring-up checks of one CiA 402 drive over SDO (no pysoem import: the caller passes SDO read /
write callables), and readable SDO errors.

* :func:`sdo_error_text` -- an SDO failure -> "SDO write 0x60C2:1 (interpolation time period)
  failed: abort code 0x06020000 (object does not exist in the object dictionary)", or for a
  mailbox timeout (pysoem ``WkcError`` with no text): "no mailbox answer (bus overloaded or slave
  not responding)".
* :func:`read_units` / :func:`check_units` -- the drive's own scaling: 0x608F position encoder
  resolution, 0x6091 gear ratio, 0x6092 feed constant, 0x6076 rated torque (motor side, mN*m),
  0x6075 rated current (mA), 0x2003 position source (1 motor encoder, 2 second / link encoder);
  compared with the configuration, a mismatch refuses naming joint, object and both values.
"""
from __future__ import annotations

import struct

OBJECT_NAMES = {
    0x6040: "controlword", 0x6060: "modes of operation", 0x6061: "modes of operation display",
    0x603F: "error code", 0x6065: "following error window", 0x6066: "following error time out",
    0x6075: "motor rated current", 0x6076: "motor rated torque", 0x608F: "position encoder resolution",
    0x6091: "gear ratio", 0x6092: "feed constant", 0x6098: "homing method",
    0x60B2: "torque offset", 0x60C2: "interpolation time period", 0x1C12: "SM2 PDO assignment",
    0x1C13: "SM3 PDO assignment", 0x1600: "RxPDO mapping", 0x1A00: "TxPDO mapping",
    0x2003: "position actual source (manufacturer)",
}

ABORT_MEANINGS = {
    0x05030000: "toggle bit not alternated", 0x05040000: "SDO protocol timed out",
    0x05040001: "client/server command specifier not valid or unknown",
    0x05040005: "out of memory", 0x06010000: "unsupported access to an object",
    0x06010001: "attempt to read a write-only object", 0x06010002: "attempt to write a read-only object",
    0x06010003: "subindex cannot be written, SI0 must be 0 for write access",
    0x06020000: "object does not exist in the object dictionary",
    0x06040041: "object cannot be mapped to the PDO",
    0x06040042: "the number and length of the objects to be mapped would exceed the PDO length",
    0x06040043: "general parameter incompatibility", 0x06040047: "general internal incompatibility",
    0x06060000: "access failed due to a hardware error",
    0x06070010: "data type does not match, length of service parameter does not match",
    0x06070012: "data type does not match, length of service parameter too high",
    0x06070013: "data type does not match, length of service parameter too low",
    0x06090011: "subindex does not exist", 0x06090030: "value range of parameter exceeded",
    0x06090031: "value of parameter written too high", 0x06090032: "value of parameter written too low",
    0x06090036: "maximum value is less than minimum value", 0x08000000: "general error",
    0x08000020: "data cannot be transferred or stored to the application",
    0x08000021: "data cannot be transferred or stored because of local control",
    0x08000022: "data cannot be transferred or stored in the present device state",
    0x08000023: "object dictionary dynamic generation fails or no object dictionary is present",
}
ABORT_NO_OBJECT = 0x06020000
ABORT_NO_SUBINDEX = 0x06090011

POS_SOURCE = {1: "motor", 2: "link"}


class DriveCheckError(RuntimeError):
    """A drive's own settings contradict the configuration; the message names joint and object."""


def object_label(index: int, sub: int) -> str:
    name = OBJECT_NAMES.get(index)
    return f"{index:#06x}:{sub}" + (f" ({name})" if name else "")


def abort_code(exc) -> int | None:
    code = getattr(exc, "abort_code", None)
    return int(code) if code is not None else None


def sdo_error_text(op: str, index: int, sub: int, exc) -> str:
    """'SDO write 0x60c2:1 (interpolation time period) failed: <why>'."""
    code = abort_code(exc)
    if code is not None:
        why = f"abort code {code:#010x} ({ABORT_MEANINGS.get(code, 'vendor-specific abort code')})"
    elif type(exc).__name__ in ("WkcError", "TimeoutError") and not str(exc):
        why = ("no mailbox answer in time (WkcError: the bus is overloaded or the slave does not "
               "answer its mailbox)")
    else:
        why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return f"SDO {op} {object_label(index, sub)} failed: {why}"


def _u32(b: bytes) -> int:
    return struct.unpack("<I", bytes(b)[:4].ljust(4, b"\0"))[0]


def retry_sdo(fn, *args, tries: int = 3, **kw):
    """Call an SDO function; a failure without an abort code (no mailbox answer in time: a lost
    frame, a loaded bus) is retried up to `tries` times. Abort codes are final."""
    for k in range(tries):
        try:
            return fn(*args, **kw)
        except Exception as exc:  # noqa: BLE001 -- classified by abort code
            if abort_code(exc) is not None or k == tries - 1:
                raise


def read_units(read, label: str = "") -> dict:
    """The drive's scaling objects through ``read(index, sub) -> bytes``. Objects the drive lacks
    are None (the check then relies on the configuration, and says so). `label` names the slave
    in errors."""
    out = {}
    pre = f"{label}: " if label else ""

    def get(key, index, sub, size=4):
        try:
            raw = retry_sdo(read, index, sub)
            out[key] = _u32(raw) if size == 4 else bytes(raw)[0]
        except Exception as exc:  # noqa: BLE001 -- an absent object is reported, not fatal
            if abort_code(exc) in (ABORT_NO_OBJECT, ABORT_NO_SUBINDEX):
                out[key] = None
            else:
                raise DriveCheckError(pre + sdo_error_text("read", index, sub, exc)) from exc
    get("encoder_increments", 0x608F, 1)
    get("encoder_motor_revs", 0x608F, 2)
    get("gear_motor_revs", 0x6091, 1)
    get("gear_shaft_revs", 0x6091, 2)
    get("feed", 0x6092, 1)
    get("feed_shaft_revs", 0x6092, 2)
    get("rated_torque_mNm", 0x6076, 0)
    get("rated_current_mA", 0x6075, 0)
    get("position_source", 0x2003, 0, size=1)
    return out


def check_units(drive, got: dict, label: str) -> list[str]:
    """Compare read units with a DriveConfig. Raises DriveCheckError on a mismatch; returns notes
    (objects the drive does not have)."""
    notes, bad = [], []

    def rel(a, b):
        return abs(a - b) / max(abs(b), 1e-12)
    if got.get("gear_motor_revs") and got.get("gear_shaft_revs"):
        g = got["gear_motor_revs"] / got["gear_shaft_revs"]
        if rel(g, drive.gear_ratio) > 1e-6:
            bad.append(f"gear ratio 0x6091 = {g:g}, configured gear_ratio {drive.gear_ratio:g}")
    else:
        notes.append("0x6091 gear ratio not present")
    if got.get("encoder_increments") and got.get("encoder_motor_revs"):
        per_motor = got["encoder_increments"] / got["encoder_motor_revs"]
        gear = (got["gear_motor_revs"] / got["gear_shaft_revs"] if got.get("gear_motor_revs")
                and got.get("gear_shaft_revs") else drive.gear_ratio)
        per_link = per_motor * gear
        if rel(per_link, drive.counts_per_link_rev) > 1e-9:
            bad.append(f"position encoder resolution 0x608F = {got['encoder_increments']}/"
                       f"{got['encoder_motor_revs']} counts per motor revolution = {per_link:.6g} "
                       f"counts per link revolution, configured {drive.counts_per_link_rev:.6g} "
                       f"({drive.position_encoder} encoder, encoder_counts_per_rev "
                       f"{drive.encoder_counts_per_rev})")
    else:
        notes.append("0x608F position encoder resolution not present")
    if got.get("feed") and got.get("feed_shaft_revs"):
        f = got["feed"] / got["feed_shaft_revs"]
        if rel(f, drive.counts_per_link_rev) > 1e-9:
            bad.append(f"feed constant 0x6092 = {f:.6g} counts per link revolution, configured "
                       f"{drive.counts_per_link_rev:.6g}")
    src = got.get("position_source")
    if src is not None:
        name = POS_SOURCE.get(src, f"unknown ({src})")
        if name != drive.position_encoder:
            bad.append(f"position actual source 0x2003 = {src} ({name} encoder), configured "
                       f"position_encoder: {drive.position_encoder}")
    else:
        notes.append("0x2003 position source not present")
    if got.get("rated_torque_mNm"):
        link = got["rated_torque_mNm"] * 1e-3 * drive.gear_ratio
        tol = 0.5e-3 * drive.gear_ratio + 1e-9           # mN*m rounding, reflected
        if abs(link - drive.rated_torque_Nm) > max(tol, 1e-3 * drive.rated_torque_Nm):
            bad.append(f"motor rated torque 0x6076 = {got['rated_torque_mNm']} mN*m (motor side) = "
                       f"{link:.4g} N*m at the link, configured rated_torque_Nm "
                       f"{drive.rated_torque_Nm:g} (link side)")
    else:
        notes.append("0x6076 rated torque not present")
    if got.get("rated_current_mA"):
        a = got["rated_current_mA"] * 1e-3
        if abs(a - drive.rated_current_A) > max(0.5e-3, 1e-3 * drive.rated_current_A):
            bad.append(f"motor rated current 0x6075 = {got['rated_current_mA']} mA, configured "
                       f"rated_current_A {drive.rated_current_A:g}")
    if bad:
        raise DriveCheckError(f"{label}: drive units differ from the configuration: " + "; ".join(bad))
    return notes


def rated_torque_link(drive, got: dict) -> float:
    """Link-side rated torque [N*m] the drive's per-mille torques refer to (0x6076 * gear), or the
    configured value when the drive lacks 0x6076."""
    if got.get("rated_torque_mNm"):
        return got["rated_torque_mNm"] * 1e-3 * drive.gear_ratio
    return drive.rated_torque_Nm
