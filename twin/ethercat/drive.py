"""The drive side of CiA 402 (IEC 61800-7-201) for one emulated axis: power state machine,
cyclic synchronous position (CSP) and the bus scaling of the twin's SI values.

Once per process-data cycle the chain calls :meth:`Cia402Drive.command` (reads controlword,
mode, target position and torque offset from the object dictionary, advances the state machine,
returns the link-side position command and feed-forward torque in SI) and, after the twin has
stepped, :meth:`Cia402Drive.feedback` (writes position/velocity/torque/current/joint torque in
bus units and checks the following error).

Bus scaling (the contract of ``assets/cobot6_ethercat.yaml``):
  position / target  counts of the configured position encoder: link-side (second) encoder,
                     ``encoder_counts_per_rev`` per link revolution, or motor encoder, that many
                     per motor revolution (x gear ratio per link revolution); times `sign`
  velocity           the same counts per second
  torque / offset    per mille of the rated torque 0x6076 (motor side, mN*m) x gear ratio
                     (link side: eta * beta * i from the current)
  current            per mille of ``rated_current_A``
  joint torque       units of ``joint_torque_scale_Nm`` (torque sensor, tau_r)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

from .coe import ObjectDictionary
from .config import DriveScaling

# power states
NOT_READY, SWITCH_ON_DISABLED, READY_TO_SWITCH_ON, SWITCHED_ON, OPERATION_ENABLED, \
    QUICK_STOP_ACTIVE, FAULT_REACTION_ACTIVE, FAULT = range(8)
STATE_NAMES = ["not ready to switch on", "switch on disabled", "ready to switch on", "switched on",
               "operation enabled", "quick stop active", "fault reaction active", "fault"]
_STATUS_BITS = {NOT_READY: 0x0000, SWITCH_ON_DISABLED: 0x0040, READY_TO_SWITCH_ON: 0x0031,
                SWITCHED_ON: 0x0033, OPERATION_ENABLED: 0x0037, QUICK_STOP_ACTIVE: 0x0017,
                FAULT_REACTION_ACTIVE: 0x001F, FAULT: 0x0018}
SW_REMOTE, SW_TARGET_REACHED, SW_FOLLOWS_TARGET, SW_FOLLOWING_ERROR = 0x0200, 0x0400, 0x1000, 0x2000

MODE_CSP = 8
# error codes (CiA 402 / 301)
ERR_FOLLOWING = 0x8611
ERR_COMMUNICATION = 0x8700   # sync / process data lost while enabled
ERR_INJECTED_DEFAULT = 0x2310  # continuous over-current (a plausible drive fault)


def error_register_bits(code: int) -> int:
    """CiA 301 error register 0x1001 for an error code: bit 0 (generic) always, plus the class
    bit -- 1 current (0x2xxx), 2 voltage (0x3xxx), 3 temperature (0x4xxx), 4 communication
    (0x8xxx but 0x86xx), 5 device profile (0x86xx: CiA 402 monitoring, e.g. following error 0x8611),
    7 manufacturer specific (0xFFxx)."""
    hi = (code >> 12) & 0xF
    bits = 0x01 | {2: 0x02, 3: 0x04, 4: 0x08}.get(hi, 0)
    if hi == 8:
        bits |= 0x20 if (code >> 8) & 0xF == 6 else 0x10
    if (code >> 8) & 0xFF == 0xFF:
        bits |= 0x80
    return bits


def _sat(v: float, lo: int, hi: int) -> int:
    return lo if v < lo else hi if v > hi else int(round(v))


@dataclass
class DriveCommand:
    """What the drive asks of the joint this cycle: hold (`enabled` False) or track `q_cmd`."""
    enabled: bool
    q_cmd: float       # link-side position command [rad]
    tau_ff: float      # feed-forward torque [N*m]


class Cia402Drive:
    """One CiA 402 axis bound to its object dictionary and bus scaling."""

    def __init__(self, od: ObjectDictionary, scaling: DriveScaling):
        self.od = od
        self.s = scaling
        self.rad_per_count = 2.0 * math.pi / scaling.counts_per_link_rev
        self.state = SWITCH_ON_DISABLED        # NOT_READY passes automatically after power-up
        # fault injection: safe torque off (held), drive-side quick stop (cycles left in QUICK
        # STOP ACTIVE before SWITCH ON DISABLED), a drive that ignores the mode request
        self.sto = False
        self.qs_left = 0
        self.ignore_mode = False
        self.encoder_frozen: int | None = None   # fault injection: 0x6064 stuck at this count
        self.warning = False                     # fault injection: statusword bit 7
        self.cycle = 0
        self.on_fault = None          # callback(error code, error register): the ESC sends a CoE emergency
        self.transitions: list[tuple[int, float, str, str]] = []   # (cycle, monotonic s, from, to)
        self.q_hold = 0.0
        self.q_actual = 0.0
        self._last_cw = 0
        self._e = {k: od.entry(k, 0) for k in (0x6040, 0x6041, 0x603F, 0x6060, 0x6061, 0x6064, 0x606C,
                                              0x6077, 0x6078, 0x607A, 0x60B2, 0x2001, 0x6062, 0x60F4,
                                              0x6065)}
        self._publish_status()

    @property
    def rated_torque_link(self) -> float:
        """Link-side rated torque [N*m] the per-mille torques refer to: 0x6076 (motor side,
        mN*m) times the gear ratio."""
        return self.od.value(0x6076) * 1e-3 * self.s.gear_ratio

    @property
    def max_torque_link(self) -> float:
        """Link-side torque limit [N*m] the drive holds its motor torque to: max torque 0x6072
        (per mille of the rated torque)."""
        return self.od.value(0x6072) * 1e-3 * self.rated_torque_link

    def _log(self, old: int, new: int) -> None:
        if old != new:
            self.transitions.append((self.cycle, time.monotonic(), STATE_NAMES[old], STATE_NAMES[new]))

    def inject_sto(self) -> None:
        """Safe torque off: power removed at once, the drive shows SWITCH ON DISABLED until cleared."""
        self.sto = True
        self._set_state(SWITCH_ON_DISABLED)

    def inject_quick_stop(self, cycles: int = 10) -> None:
        """Drive-side quick stop (e.g. a local stop input): QUICK STOP ACTIVE for `cycles`, then
        SWITCH ON DISABLED (quick stop option code 2)."""
        if self.state == OPERATION_ENABLED:
            self.qs_left = int(cycles)
            self._set_state(QUICK_STOP_ACTIVE)

    def _set_state(self, st: int) -> None:
        if st != OPERATION_ENABLED and self.state == OPERATION_ENABLED:
            self.q_hold = self.q_actual
        self._log(self.state, st)
        self.state = st
        self._publish_status()

    # ---- unit conversion
    def counts_to_rad(self, counts: int) -> float:
        return self.s.sign * counts * self.rad_per_count

    def rad_to_counts(self, q: float) -> int:
        return _sat(self.s.sign * q / self.rad_per_count, -2**31, 2**31 - 1)

    # ---- state machine
    @property
    def fault(self) -> bool:
        return self.state in (FAULT, FAULT_REACTION_ACTIVE)

    def inject_fault(self, code: int = ERR_INJECTED_DEFAULT) -> None:
        """Drive fault (fault injection or internal error): fault reaction, then FAULT."""
        if self.state == OPERATION_ENABLED:
            self.q_hold = self.q_actual
        self._e[0x603F].value = code & 0xFFFF
        self.od.entry(0x1001, 0).value = error_register_bits(code & 0xFFFF)
        if self.on_fault is not None:
            self.on_fault(code & 0xFFFF, self.od.value(0x1001))
        self._log(self.state, FAULT_REACTION_ACTIVE)
        self.state = FAULT_REACTION_ACTIVE
        self._publish_status()

    def report_emergency(self, code: int, warning: bool = False) -> None:
        """An error the drive reports without reacting to it (the axis keeps its state), e.g. a
        failing encoder battery: CoE emergency `code`; an error sets the error register 0x1001
        (generic + class bits) until a fault reset, a warning leaves it as it is."""
        if not warning:
            reg = self.od.value(0x1001) | error_register_bits(code & 0xFFFF)
            self.od.entry(0x1001, 0).value = reg
        if self.on_fault is not None:
            self.on_fault(code & 0xFFFF, self.od.value(0x1001))

    def on_leave_op(self) -> None:
        """The ESC left OP: outputs are no longer valid. An enabled axis faults (0x8700)."""
        if self.state in (OPERATION_ENABLED, QUICK_STOP_ACTIVE):
            self.inject_fault(ERR_COMMUNICATION)

    def command(self, outputs_valid: bool) -> DriveCommand:
        """Advance the state machine with the current controlword (if `outputs_valid`, i.e. the
        ESC is in OP) and return this cycle's joint command."""
        cw = self._e[0x6040].value if outputs_valid else self._last_cw & ~0x0080
        self.cycle += 1
        st = self.state
        if self.qs_left > 0:                               # drive-side quick stop in progress
            self.qs_left -= 1
            st = QUICK_STOP_ACTIVE if self.qs_left else SWITCH_ON_DISABLED
        elif st == FAULT_REACTION_ACTIVE:
            st = FAULT
        elif st == FAULT:
            if cw & 0x80 and not self._last_cw & 0x80:
                st = SWITCH_ON_DISABLED
                self._e[0x603F].value = 0
                self.od.entry(0x1001, 0).value = 0
        elif st == QUICK_STOP_ACTIVE:
            st = OPERATION_ENABLED if (cw & 0x0F) == 0x0F and (cw & 0x04) else SWITCH_ON_DISABLED
        elif not cw & 0x02:                                # disable voltage
            st = SWITCH_ON_DISABLED
        elif (cw & 0x06) == 0x02:                          # quick stop
            st = QUICK_STOP_ACTIVE if st == OPERATION_ENABLED else SWITCH_ON_DISABLED
        elif (cw & 0x07) == 0x06:                          # shutdown
            if st in (SWITCH_ON_DISABLED, SWITCHED_ON, OPERATION_ENABLED):
                st = READY_TO_SWITCH_ON
        elif (cw & 0x0F) == 0x07:                          # switch on / disable operation
            if st in (READY_TO_SWITCH_ON, OPERATION_ENABLED):
                st = SWITCHED_ON
        elif (cw & 0x0F) == 0x0F:                          # enable operation (also from RTSO)
            if st in (READY_TO_SWITCH_ON, SWITCHED_ON):
                st = OPERATION_ENABLED
        if self.sto and st not in (FAULT, FAULT_REACTION_ACTIVE):
            st = SWITCH_ON_DISABLED                        # no power while STO is active
        if st != OPERATION_ENABLED and self.state == OPERATION_ENABLED:
            self.q_hold = self.q_actual
        self._log(self.state, st)
        self.state = st
        self._last_cw = cw
        mode = 0 if self.ignore_mode else self._e[0x6060].value
        self._e[0x6061].value = mode
        if st == OPERATION_ENABLED and mode == MODE_CSP and outputs_valid:
            target = self._e[0x607A].value
            self._e[0x6062].value = target
            q_cmd = self.counts_to_rad(target)
            tau_ff = self.s.sign * self._e[0x60B2].value * 1e-3 * self.rated_torque_link
            return DriveCommand(True, q_cmd, tau_ff)
        return DriveCommand(False, self.q_hold, 0.0)

    def feedback(self, q: float, qd: float, i_m: float, tau_r: float) -> None:
        """Write this cycle's measurements (SI, link side: position [rad], velocity [rad/s], motor
        current [A], joint torque sensor [N*m]) into the object dictionary and check the following
        error of an enabled CSP axis. Torque actual is the drive's estimate from its current,
        eta * beta * i (link side)."""
        s = self.s
        tau_m = s.gear_ratio * s.torque_constant_Nm_A * i_m
        self.q_actual = q
        pos = self.rad_to_counts(q) if self.encoder_frozen is None else self.encoder_frozen
        e = self._e
        e[0x6064].value = pos
        e[0x606C].value = _sat(s.sign * qd / self.rad_per_count, -2**31, 2**31 - 1)
        e[0x6077].value = _sat(s.sign * tau_m / self.rated_torque_link * 1000.0, -32768, 32767)
        e[0x6078].value = _sat(s.sign * i_m / s.rated_current_A * 1000.0, -32768, 32767)
        e[0x2001].value = _sat(s.sign * tau_r / s.joint_torque_scale_Nm, -2**31, 2**31 - 1)
        if self.state == OPERATION_ENABLED and self._e[0x6061].value == MODE_CSP:
            ferr = e[0x607A].value - pos
            e[0x60F4].value = _sat(ferr, -2**31, 2**31 - 1)
            if abs(ferr) > e[0x6065].value:
                self.inject_fault(ERR_FOLLOWING)
        else:
            e[0x60F4].value = 0
        self._publish_status()

    def _publish_status(self) -> None:
        sw = _STATUS_BITS[self.state] | SW_REMOTE | (0x0080 if self.warning else 0)
        if self.state == OPERATION_ENABLED and self._e[0x6061].value == MODE_CSP:
            sw |= SW_FOLLOWS_TARGET
            if abs(self._e[0x60F4].value) <= self._e[0x6065].value // 10:
                sw |= SW_TARGET_REACHED
        if self._e[0x603F].value == ERR_FOLLOWING and self.state in (FAULT, FAULT_REACTION_ACTIVE):
            sw |= SW_FOLLOWING_ERROR
        self._e[0x6041].value = sw
