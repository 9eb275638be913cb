"""CiA 402 state machine: decoding against the standard's bit patterns and controlword sequencing
against an independent transition table of the drive (IEC 61800-7-201, figure of the FSA)."""
import numpy as np
import pytest

from robot.drive import cia402
from robot.drive.cia402 import State

# statusword examples per state (with extra irrelevant bits set, e.g. voltage enabled 0x10,
# remote 0x200, target reached 0x400)
SW = {
    State.NOT_READY: 0x0000, State.SWITCH_ON_DISABLED: 0x0250, State.READY_TO_SWITCH_ON: 0x0231,
    State.SWITCHED_ON: 0x0233, State.OPERATION_ENABLED: 0x0637, State.QUICK_STOP_ACTIVE: 0x0217,
    State.FAULT_REACTION_ACTIVE: 0x021F, State.FAULT: 0x0218,
}


def test_decode_each_state():
    words = np.array(list(SW.values()))
    np.testing.assert_array_equal(cia402.decode_state(words), [int(s) for s in SW])
    assert cia402.decode_state(0x0040) == State.SWITCH_ON_DISABLED
    assert cia402.decode_state(0x0027) == State.OPERATION_ENABLED
    assert cia402.decode_state(0x0008) == State.FAULT
    assert cia402.decode_state(0x0001) == State.UNKNOWN
    assert list(cia402.is_fault(words)) == [s in (State.FAULT, State.FAULT_REACTION_ACTIVE) for s in SW]


def test_decode_every_statusword():
    """All 65536 statuswords against the standard's table written out here (bits 0-3 ready to
    switch on / switched on / operation enabled / fault, 5 quick stop, 6 switch on disabled;
    'x' bits ignored), in any array shape, and a scalar stays a scalar."""
    def state_of(w):
        b = [(w >> k) & 1 for k in range(7)]
        rtso, so, oe, f, qs, sod = b[0], b[1], b[2], b[3], b[5], b[6]
        if (rtso, so, oe, f, sod) == (0, 0, 0, 0, 0):
            return State.NOT_READY
        if (rtso, so, oe, f, sod) == (0, 0, 0, 0, 1):
            return State.SWITCH_ON_DISABLED
        if (rtso, so, oe, f, qs, sod) == (1, 0, 0, 0, 1, 0):
            return State.READY_TO_SWITCH_ON
        if (rtso, so, oe, f, qs, sod) == (1, 1, 0, 0, 1, 0):
            return State.SWITCHED_ON
        if (rtso, so, oe, f, qs, sod) == (1, 1, 1, 0, 1, 0):
            return State.OPERATION_ENABLED
        if (rtso, so, oe, f, qs, sod) == (1, 1, 1, 0, 0, 0):
            return State.QUICK_STOP_ACTIVE
        if (rtso, so, oe, f, sod) == (1, 1, 1, 1, 0):
            return State.FAULT_REACTION_ACTIVE
        if (rtso, so, oe, f, sod) == (0, 0, 0, 1, 0):
            return State.FAULT
        return State.UNKNOWN
    words = np.arange(65536)
    expect = np.array([int(state_of(int(w))) for w in words])
    got = cia402.decode_state(words.reshape(256, 256))
    assert got.shape == (256, 256)
    np.testing.assert_array_equal(got.ravel(), expect)
    assert np.ndim(cia402.decode_state(0x0637)) == 0


def drive_next(state, cw, prev_cw):
    """Independent model of a drive's FSA: (state, controlword, previous cw) -> next state."""
    c = cw & 0x8F
    if state == State.FAULT:
        return State.SWITCH_ON_DISABLED if (cw & 0x80) and not (prev_cw & 0x80) else state
    if state == State.NOT_READY:
        return State.SWITCH_ON_DISABLED
    if (c & 0x02) == 0:          # disable voltage (bit 1 clear) from any powered/ready state
        return State.SWITCH_ON_DISABLED
    if state == State.SWITCH_ON_DISABLED:
        return State.READY_TO_SWITCH_ON if (c & 0x87) == 0x06 else state
    if state == State.READY_TO_SWITCH_ON:
        if (c & 0x8F) == 0x0F:
            return State.OPERATION_ENABLED  # transition 3+4 shortcut allowed by many drives
        return State.SWITCHED_ON if (c & 0x87) == 0x07 else state
    if state == State.SWITCHED_ON:
        if (c & 0x8F) == 0x0F:
            return State.OPERATION_ENABLED
        return State.READY_TO_SWITCH_ON if (c & 0x87) == 0x06 else state
    if state == State.OPERATION_ENABLED:
        if (c & 0x87) == 0x06:
            return State.READY_TO_SWITCH_ON
        if (c & 0x8F) == 0x07:
            return State.SWITCHED_ON
        if (c & 0x06) == 0x02:
            return State.QUICK_STOP_ACTIVE
        return state
    if state == State.QUICK_STOP_ACTIVE:
        return state
    return state


@pytest.mark.parametrize("start", [State.NOT_READY, State.SWITCH_ON_DISABLED, State.READY_TO_SWITCH_ON,
                                   State.SWITCHED_ON, State.OPERATION_ENABLED, State.QUICK_STOP_ACTIVE,
                                   State.FAULT])
def test_enable_sequence_reaches_operation_enabled(start):
    st, prev = start, 0x80 if start == State.FAULT else 0x00   # a stale reset bit must not count
    for _ in range(10):
        cw = int(cia402.enable_controlword(SW[st], prev))
        st, prev = drive_next(st, cw, prev), cw
    assert st == State.OPERATION_ENABLED


def test_enable_vectorized_and_fault_reset_edge():
    sws = np.array([SW[State.FAULT], SW[State.SWITCH_ON_DISABLED], SW[State.SWITCHED_ON]])
    cw = cia402.enable_controlword(sws, np.zeros(3))
    np.testing.assert_array_equal(cw, [0x80, 0x06, 0x0F])
    cw2 = cia402.enable_controlword(sws, cw)     # reset bit held -> drop it to re-arm the edge
    assert cw2[0] == 0x00
    cw3 = cia402.enable_controlword(sws, np.zeros(3), allow_fault_reset=False)
    assert cw3[0] == 0x00


@pytest.mark.parametrize("start", [State.SWITCHED_ON, State.OPERATION_ENABLED, State.READY_TO_SWITCH_ON,
                                   State.QUICK_STOP_ACTIVE])
def test_disable_reaches_powerless_state(start):
    cw = int(cia402.disable_controlword(SW[start]))
    st = drive_next(start, cw, 0)
    assert st == State.SWITCH_ON_DISABLED and cia402.is_disabled(SW[st])
    assert cia402.is_disabled(SW[start]) == (start == State.READY_TO_SWITCH_ON)
