"""The run-time faults of a hardware run and the default reaction to each (no dependencies, so
the configuration layer can validate ``fault_policy`` without the safety logic)."""
from __future__ import annotations

from enum import Enum


class Fault(str, Enum):
    DRIVE_FAULT = "drive_fault"
    WKC_DROP = "wkc_drop"
    LOST_FRAMES = "lost_frames"
    SLAVE_LOST = "slave_lost"
    LIMIT_BREACH = "limit_breach"
    FOLLOWING_ERROR = "following_error"
    STALLED_LOOP = "stalled_loop"
    ENABLE_TIMEOUT = "enable_timeout"
    ABORTED = "aborted"
    DRIVE_DISABLED = "drive_disabled"    # left OPERATION ENABLED without a fault (STO, quick stop)
    MODE_CHANGED = "mode_changed"        # 0x6061 no longer shows CSP
    AL_STATE = "al_state"                # a slave left OP / shows an AL status code
    RECORD_FAILED = "record_failed"      # the parent could not write the recording
    SIGNAL = "signal"                    # SIGTERM / SIGHUP / SIGINT to the parent or the loop
    PARENT_DIED = "parent_died"          # the parent process died: the loop stops on its own
    FEEDBACK = "feedback_fault"          # encoder frozen / jumping against the commanded motion
    TORQUE_LIMIT = "torque_limit"        # actual torque 0x6077 beyond the configured limit
    EMERGENCY = "emergency"              # a CoE emergency with an error code


# What to do on each fault, after the command has been ramped to rest within the acceleration
# limits (robot.stopramp): "hold" (hold the pose for hold_cycles, then disable in order) or
# "disable" (disable in order as soon as the arm is at standstill).
DEFAULT_POLICY = {
    Fault.DRIVE_FAULT: "hold",        # the faulted drive has already dropped; the others hold
    Fault.WKC_DROP: "hold",
    Fault.LOST_FRAMES: "hold",
    Fault.SLAVE_LOST: "hold",
    Fault.LIMIT_BREACH: "hold",
    Fault.FOLLOWING_ERROR: "disable",  # the arm cannot follow (collision?): stop pushing at once
    Fault.STALLED_LOOP: "hold",
    Fault.ENABLE_TIMEOUT: "disable",
    Fault.ABORTED: "hold",
    Fault.DRIVE_DISABLED: "hold",      # the others hold; the disabled drive's brake holds its axis
    Fault.MODE_CHANGED: "disable",
    Fault.AL_STATE: "hold",
    Fault.RECORD_FAILED: "hold",
    Fault.SIGNAL: "hold",
    Fault.PARENT_DIED: "hold",
    Fault.FEEDBACK: "disable",
    Fault.TORQUE_LIMIT: "disable",
    Fault.EMERGENCY: "hold",
}
