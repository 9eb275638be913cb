"""Pacing of the loop (robot.rt.Ticker) on a simulated clock: a late cycle is never followed by
catch-up cycles, and the grid keeps its phase; DC drift compensation (robot.rt.DcAligner)
converges on a reference clock that runs 100 ppm fast."""
import numpy as np

from robot.rt import DcAligner, Ticker


class FakeClock:
    """perf_counter stand-in: sleep() advances time; `stalls` {call index: extra seconds}."""
    def __init__(self, stalls):
        self.t, self.stalls, self.k = 0.0, dict(stalls), 0

    def clock(self):
        self.t += 1e-6                     # every reading costs 1 us
        return self.t

    def sleep(self, s):
        self.t += s


def test_late_cycle_never_followed_by_catch_up():
    dt = 1e-3
    fc = FakeClock({})
    tick = Ticker(dt, clock=fc.clock, sleep=fc.sleep)
    starts, lates = [], []
    rng = np.random.default_rng(0)
    stalls = {k: float(rng.uniform(0.3, 3.5)) * dt for k in rng.choice(np.arange(20, 1900), 40, replace=False)}
    for k in range(2000):
        lates.append(tick.wait())
        starts.append(fc.t)
        fc.t += 2e-4 + stalls.get(k, 0.0)           # the cycle's work (+ a stall)
    p = np.diff(starts)
    assert p.min() >= 0.5 * dt                        # never closer than half a period
    assert np.sum(p < 0.5 * dt) == 0
    # phase kept: every cycle that is not itself late starts on the grid (to the clock's cost)
    ph = (np.array(starts) - starts[0]) / dt
    on_time = np.array(lates) < 0.01
    assert on_time.sum() > 1800
    assert np.max(np.abs(ph - np.round(ph))[on_time]) < 0.02
    assert tick.skipped > 0 and max(lates) > 1.0


def test_dc_aligner_locks_onto_drifting_reference():
    cycle = 1_000_000
    al = DcAligner(cycle, 50_000)
    t_master = 0.0              # master send times [s]
    offset_ns = 377_123         # reference clock = 1.0001 * master + offset
    errs = []
    nxt = 0.0
    for k in range(3000):
        t_master = nxt
        dc = int(1.0001 * t_master * 1e9 + offset_ns)
        corr = al.update(dc)
        errs.append(al.error_ns)
        nxt = t_master + cycle * 1e-9 + corr
    assert abs(np.mean(errs[-500:])) < 2_000 and np.max(np.abs(errs[-500:])) < 10_000   # within 10 us


def test_cpu_latency_request_written_and_held(tmp_path, monkeypatch):
    """robot.rt.hold_cpu_latency writes the PM QoS request (a 32-bit 0 [us]) and keeps the file
    open (the kernel drops the request when it closes); where the device cannot be opened it
    returns a warning naming it instead of raising."""
    import os
    from robot import rt
    monkeypatch.setattr(rt, "_LATENCY_FD", None)
    dev = tmp_path / "cpu_dma_latency"
    dev.write_bytes(b"")
    assert rt.hold_cpu_latency(str(dev)) is None
    fd = rt._LATENCY_FD
    assert fd is not None and os.fstat(fd).st_ino == dev.stat().st_ino     # still open
    assert dev.read_bytes() == (0).to_bytes(4, "little")
    assert rt.hold_cpu_latency(str(tmp_path / "other")) is None            # held once per process
    os.close(fd)
    monkeypatch.setattr(rt, "_LATENCY_FD", None)
    why = rt.hold_cpu_latency(str(tmp_path / "missing" / "cpu_dma_latency"))
    assert why is not None and "missing/cpu_dma_latency" in why and rt._LATENCY_FD is None


def test_rt_budget_and_cpu_share_warning(tmp_path):
    """The kernel's SCHED_FIFO budget read from its two files (runtime / period, -1: unlimited),
    and the end-of-run warning when the loop's CPU share came within 85 % of it."""
    from robot.rt import cpu_share_warning, rt_budget
    (tmp_path / "sched_rt_runtime_us").write_text("950000\n")
    (tmp_path / "sched_rt_period_us").write_text("1000000\n")
    assert rt_budget(str(tmp_path)) == 0.95
    (tmp_path / "sched_rt_runtime_us").write_text("-1\n")
    assert rt_budget(str(tmp_path)) is None
    assert rt_budget(str(tmp_path / "missing")) is None
    assert cpu_share_warning(0.70, 1.0, 0.95) is None            # 0.70 < 0.85 * 0.95
    w = cpu_share_warning(0.93, 1.0, 0.95)
    assert w is not None and "93%" in w and "95%" in w and "sched_rt_runtime_us" in w
    assert cpu_share_warning(0.99, 1.0, None) is None            # unlimited
