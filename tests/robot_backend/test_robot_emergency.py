"""robot.emergency.EmergencyWatch against scripted mailboxes: when the run stops after a drive's
error register 0x1001 gains a bit (in the frame) or an emergency waits in a mailbox (round robin),
what the stop names, and what is only recorded (warnings, register values)."""
import pytest

from robot.emergency import EmergencyWatch, register_meaning

JOINTS = [f"joint{k}" for k in range(1, 7)]


class Mailboxes:
    """read(k): the emergencies queued for slave k from the given cycle on (read once)."""
    def __init__(self):
        self.queued = {}          # k -> [(cycle from which it is there, emcy dict)]
        self.now = 0
        self.reads = []

    def put(self, k, at, code, register):
        self.queued.setdefault(k, []).append((at, {"slave": k + 1, "joint": JOINTS[k],
                                                   "error_code": code, "error_register": register,
                                                   "data": [0, 0, 0]}))

    def read(self, k):
        self.reads.append((self.now, k))
        ready = [e for at, e in self.queued.get(k, []) if at <= self.now]
        self.queued[k] = [(at, e) for at, e in self.queued.get(k, []) if at > self.now]
        return ready


def drive(watch, box, cycles, regs_at=None):
    """Run cycles 1..cycles; regs_at(cycle) -> register list or None (not mapped)."""
    for c in range(1, cycles + 1):
        box.now = c
        ev = watch.update(c, regs_at(c) if regs_at else None)
        if ev is not None:
            return ev
    return None


@pytest.mark.parametrize("emcy_delay, stop_after", [(0, 0), (2, 2), (None, 3)])
def test_register_in_the_frame_stops_within_confirm_cycles(emcy_delay, stop_after):
    """Joint 3's register gains generic + current (0x03) at cycle 100; its emergency is in the
    mailbox at once, 2 cycles later, or never: the stop comes at 100 + stop_after (<= 3), named
    with the code and meaning, or with the register's bits."""
    box = Mailboxes()
    if emcy_delay is not None:
        box.put(2, 100 + emcy_delay, 0x2310, 0x03)
    w = EmergencyWatch(JOINTS, box.read, poll_cycles=10, confirm_cycles=3)
    ev = drive(w, box, 200, lambda c: [0, 0, 0x03 if c >= 100 else 0, 0, 0, 0])
    assert ev is not None and ev.fault.value == "emergency" and ev.cycle == 100 + stop_after
    if emcy_delay is None:
        assert ev.message == ("cycle 103: joint joint3 reports error register 0x1001 = 0x03 "
                              "(generic, current); its emergency message was not read within 3 cycles")
    else:
        assert ("CoE emergency from joint joint3: error code 0x2310" in ev.message
                and "error register 0x03 (generic, current)" in ev.message), ev.message
    assert w.records()["error_registers"]["joint3"]["first_cycle"] == 100


def test_warning_emergency_recorded_not_stopping():
    """An emergency with error register 0 (no error present) is a warning: no stop, recorded."""
    box = Mailboxes()
    box.put(4, 50, 0x4210, 0x00)
    w = EmergencyWatch(JOINTS, box.read, poll_cycles=10)
    assert drive(w, box, 200, lambda c: [0] * 6) is None
    rec = w.records()
    assert [(e["joint"], e["error_code"], e["warning"]) for e in rec["emergencies"]] == [("joint5", 0x4210, True)]
    assert rec["emergency_warnings"] == rec["emergencies"] and rec["error_registers"] == {}


def test_round_robin_without_the_register():
    """Not mapped: one mailbox every poll_cycles, so an emergency is read within n x poll
    cycles; an error stops the run, naming code and meaning."""
    box = Mailboxes()
    box.put(0, 7, 0x4310, 0x09)
    w = EmergencyWatch(JOINTS, box.read, poll_cycles=10)
    ev = drive(w, box, 200)
    assert ev is not None and 7 <= ev.cycle <= 7 + 60
    assert "error code 0x4310" in ev.message and "temperature" in ev.message
    assert all(c % 10 == 6 for c, _ in box.reads)              # one read every 10 cycles


def test_primed_register_is_not_an_emergency_and_stopping_reads_only():
    """A register already set at bring-up is the start check's finding; an emergency read while
    the run is already stopping is recorded, never a second stop."""
    box = Mailboxes()
    w = EmergencyWatch(JOINTS, box.read, poll_cycles=10)
    w.prime([0, 0x11, 0, 0, 0, 0])
    assert drive(w, box, 30, lambda c: [0, 0x11, 0, 0, 0, 0]) is None
    box.put(3, 1, 0x2310, 0x03)
    for c in range(31, 100):
        box.now = c
        assert w.update(c, None, stopping=True) is None
    assert [e["error_code"] for e in w.emergencies] == [0x2310]


def test_register_meaning():
    assert register_meaning(0) == "no error"
    assert register_meaning(0x89) == "generic, temperature, manufacturer"
