"""robot.bus.EthercatBus.al_faults on scripted AL-state reads (a fake pysoem master): a slave out
of OP is reported with its AL status code only when two immediate reads agree, and a read that
holds no AL state at all (the low nibble of register 0x0130 is not INIT/PREOP/BOOT/SAFEOP/OP --
what SOEM leaves after a late answer to another datagram was taken for the state read) is no
finding, whatever it repeats."""
from pathlib import Path

import pysoem
import pytest

from robot.bus import EthercatBus
from robot.config import load_config

ROOT = Path(__file__).resolve().parents[2]
OP, SAFEOP_ERR = pysoem.OP_STATE, pysoem.SAFEOP_STATE | pysoem.STATE_ERROR


class _Slave:
    def __init__(self):
        self.state, self.al_status = OP, 0


class _Master:
    """read_state() loads the next scripted [(state, code), ...] into the slaves."""
    def __init__(self, script):
        self.script = list(script)
        self.slaves = [_Slave() for _ in self.script[0]]

    def read_state(self):
        for s, (st, code) in zip(self.slaves, self.script.pop(0)):
            s.state, s.al_status = st, code


def _bus(script):
    bus = EthercatBus(load_config(ROOT / "assets" / "cobot6_ethercat.yaml"), "veth-test")
    bus.master = _Master(script)
    return bus


ALL_OP = [(OP, 0)] * 6


def _with(k, state, code=0, base=ALL_OP):
    out = list(base)
    out[k] = (state, code)
    return out


def test_all_in_op_is_no_finding():
    assert _bus([ALL_OP]).al_faults() is None


def test_slave_out_of_op_named_with_code_when_read_twice():
    bad = _with(2, SAFEOP_ERR, 0x001B)
    msg = _bus([bad, bad]).al_faults()
    assert msg is not None and "slave 3 (joint3)" in msg and "SAFEOP" in msg and "0x001b" in msg
    assert "joint1" not in msg


def test_finding_must_repeat():
    assert _bus([_with(2, SAFEOP_ERR, 0x001B), ALL_OP]).al_faults() is None


@pytest.mark.parametrize("garbage", [0x0F, 0x06, 0x1F, 0x0C])
def test_read_without_an_al_state_is_no_finding(garbage):
    junk = [(garbage, 0xFFFF)] * 6
    assert _bus([junk, junk]).al_faults() is None
    # a real finding on another slave still comes through beside the unreadable ones
    mixed = _with(4, SAFEOP_ERR, 0x001B, base=junk)
    msg = _bus([mixed, mixed]).al_faults()
    assert msg is not None and "slave 5 (joint5)" in msg and "slave 1 " not in msg
