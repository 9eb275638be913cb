"""CoE emergencies (EMCY) and the error register 0x1001 of every drive, watched by the loop.

A drive reports an error twice: in its error register 0x1001 (CiA 301: bit 0 "generic error" is
set while any error is present, the other bits name its class) and in an emergency message queued
in its mailbox (error code, error register, data). The mailbox is read with one datagram per
slave (SOEM's mailbox receive), too costly to read every slave every cycle, so:

* with 0x1001 mapped into the inputs (a tx entry named ``error_register``), the register is in
  every frame: a drive whose register gains a bit has its mailbox read that cycle and the next
  ``confirm_cycles`` ones until the emergency is there; the run stops at once either way (named
  with the emergency's code and meaning when it was read, else with the register's bits) --
  within ``confirm_cycles`` + 1 cycles of the frame that brought the register;
* without it, one slave's mailbox is read every ``poll_cycles`` cycles (round robin), as before:
  an emergency can wait n_slaves x poll_cycles cycles (60 on the reference arm).

An emergency whose error register is 0 is a warning (CiA 301: no error is present -- bit 0,
generic, is mandatory with any error; any bit set counts as an error here, so a drive that sets
only a class bit is not taken for a warning): recorded, no stop. Warnings and every register
value seen are kept for the run's records (:meth:`EmergencyWatch.records`).
"""
from __future__ import annotations

from .drive import cia402
from .faults import Fault
from .safety import FaultEvent

REGISTER_BITS = ((0x01, "generic"), (0x02, "current"), (0x04, "voltage"), (0x08, "temperature"),
                 (0x10, "communication"), (0x20, "device profile"), (0x80, "manufacturer"))


def register_meaning(value: int) -> str:
    """Names of the bits set in an error register value (CiA 301), e.g. "generic, current"."""
    names = [name for bit, name in REGISTER_BITS if value & bit]
    return ", ".join(names) if names else "no error"


class EmergencyWatch:
    """Per-cycle watch of emergencies and error registers (slaves in bus order).

    Args:
        joints: joint name of each slave (bus order).
        read: read(k) -> list of emergency dicts (error_code, error_register, ...) from slave k's
            mailbox (robot.bus.EthercatBus.read_emergencies), or None (no mailbox access).
        poll_cycles: the round-robin period of the mailbox reads.
        confirm_cycles: cycles the mailbox of a drive whose register came on is read for its
            emergency before the stop names the register alone.
    """

    def __init__(self, joints, read, poll_cycles: int, confirm_cycles: int = 3):
        self.joints = list(joints)
        self.read = read
        self.poll = max(1, int(poll_cycles))
        self.confirm = int(confirm_cycles)
        self.emergencies: list[dict] = []
        self.registers: dict[str, dict] = {}          # joint -> first cycle, first / last / OR value
        self._prev = [0] * len(self.joints)
        self._pending: dict[int, int] = {}            # slave -> cycle its register gained a bit
        self.event: FaultEvent | None = None

    def _read(self, k: int, cycle: int) -> list[dict]:
        if self.read is None:
            return []
        new = [dict(e, row=cycle, meaning=cia402.emcy_meaning(e["error_code"]),
                    warning=int(e["error_register"]) == 0) for e in self.read(k)]
        self.emergencies += new
        return new

    def read_all(self, cycle: int = -1) -> None:
        """Every slave's mailbox once (bring-up: what the drives queued before the run)."""
        for k in range(len(self.joints)):
            self._read(k, cycle)

    def prime(self, registers) -> None:
        """The registers read at bring-up (bus order): a drive already in error there is the
        start-up check's finding (a drive in FAULT), not an emergency of the run."""
        self._prev = [int(x) for x in registers]

    def _note_registers(self, cycle: int, registers) -> None:
        for k, v in enumerate(int(x) for x in registers):
            if v:
                d = self.registers.setdefault(self.joints[k], {"first_cycle": cycle, "first": v,
                                                              "any": 0, "cycles": 0})
                d["any"] |= v
                d["cycles"] += 1
                d["last"] = v
            if v & ~self._prev[k]:                      # a new error bit
                self._pending.setdefault(k, cycle)
            self._prev[k] = v

    def update(self, cycle: int, registers=None, frame_ok: bool = True, stopping: bool = False):
        """One cycle: `registers` the error registers of this frame (bus order) or None when not
        mapped; `frame_ok` whether the frame was complete; `stopping` True once the run is being
        stopped (emergencies are still read and recorded, none stops the run again). Returns the
        FaultEvent (Fault.EMERGENCY) that stops the run, once, or None."""
        if not frame_ok:
            return None
        if registers is not None:
            self._note_registers(cycle, registers)
        if self._pending:
            k = min(self._pending, key=self._pending.get)      # the oldest first
            found = [e for e in self._read(k, cycle) if not e["warning"]]
            since = self._pending[k]
            if found or cycle - since >= self.confirm:
                del self._pending[k]
                return self._fire(cycle, k, found[0] if found else None)
            return None
        if (cycle - 1) % self.poll == 5 % self.poll:                   # round robin
            k = ((cycle - 1) // self.poll) % len(self.joints)
            errors = [e for e in self._read(k, cycle) if not e["warning"]]
            if errors and not stopping:
                return self._fire(cycle, k, errors[0])
        return None

    def _fire(self, cycle: int, k: int, e: dict | None):
        if self.event is not None:
            return None
        joint = self.joints[k]
        if e is not None:
            msg = (f"cycle {cycle}: CoE emergency from joint {joint}: error code "
                   f"{e['error_code']:#06x} ({e['meaning']}), error register "
                   f"{e['error_register']:#04x} ({register_meaning(e['error_register'])})")
        else:
            v = self._prev[k]
            msg = (f"cycle {cycle}: joint {joint} reports error register 0x1001 = {v:#04x} "
                   f"({register_meaning(v)}); its emergency message was not read within "
                   f"{self.confirm} cycles")
        self.event = FaultEvent(Fault.EMERGENCY, cycle, msg)
        return self.event

    def records(self) -> dict:
        """For the run's summary: emergencies (errors and warnings, with the cycle they were read
        in), and the error registers seen per joint (first cycle, first / last value, OR of all
        values, cycles with a nonzero value)."""
        return {"emergencies": self.emergencies,
                "emergency_warnings": [e for e in self.emergencies if e["warning"]],
                "error_registers": self.registers}
