"""Real-time pacing and hygiene of the loop process (no pysoem, no numpy work in the hot path).

* :class:`Ticker` -- absolute-deadline pacing on a fixed grid of period `dt` [s]. A cycle that
  starts late is never followed by catch-up cycles: the next deadline is the first grid point at
  least half a period after the late start, so two consecutive cycles are never closer than
  ``dt / 2`` (the drives never see a doubled step from a burst). The grid keeps its phase, so with
  distributed clocks the master stays aligned to SYNC0; :meth:`Ticker.adjust` shifts the grid by
  the drift-compensation correction.
* :func:`harden` -- gc off, ``mlockall``, CPU affinity, SCHED_FIFO, and a zero CPU wake-up
  latency request (``/dev/cpu_dma_latency``); returns what was granted and a warning text for
  everything that was not (the loop prints it loudly).
* :class:`LoopWatch` -- the loop's own stop requests: SIGTERM / SIGHUP / SIGINT to the loop
  process and the death of its parent (PR_SET_PDEATHSIG + ``getppid`` every cycle).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import gc
import os
import signal
import time

from .faults import Fault

MCL_CURRENT, MCL_FUTURE = 1, 2


class Ticker:
    """Deadline pacing on the grid t0 + k*dt (perf_counter clock, seconds).

    :meth:`wait` sleeps most of the wait and spins the last `spin_s` (0.1 ms: a SCHED_FIFO sleep
    with the CPU wake-up latency pinned overshoots by 36-64 us (median-99 %) on this project's
    2-vCPU machines; every spun microsecond is CPU time the kernel's RT budget counts, see
    :func:`rt_budget`). Returns how late the cycle starts, in periods (0 if on time).
    ``skipped`` counts grid points left out after late starts.
    """

    def __init__(self, dt: float, clock=time.perf_counter, sleep=time.sleep, spin_s: float = 1e-4):
        self.dt = float(dt)
        self.clock, self.sleep = clock, sleep
        self.spin = float(spin_s)
        self.next = clock()
        self.skipped = 0
        self.last_start = None

    def wait(self) -> float:
        clock = self.clock
        rem = self.next - clock()
        if rem > 1.5 * self.spin:
            self.sleep(rem - self.spin)
        while clock() < self.next:
            pass
        now = clock()
        late = (now - self.next) / self.dt
        self.last_start = now
        nxt = self.next + self.dt
        if nxt - now < 0.5 * self.dt:          # late: skip grid points, never burst
            k = int((now + 0.5 * self.dt - nxt) // self.dt) + 1
            nxt += k * self.dt
            self.skipped += k
        self.next = nxt
        return max(0.0, late)

    def adjust(self, shift_s: float) -> None:
        """Move the grid by `shift_s` [s] (drift compensation; keep |shift| << dt)."""
        self.next += shift_s


class DcAligner:
    """Master-cycle alignment to the DC reference clock (a PI loop, as in SOEM's examples).

    Each cycle, with the reference clock's system time `dc_ns` read by the frame's FRMW datagram
    [ns], the phase error is the distance of ``dc_ns - target_ns`` from the SYNC0 grid (multiples
    of `cycle_ns`), wrapped to (-cycle/2, cycle/2]. :meth:`update` returns the correction [s] to
    add to the master's next deadline, so that the frames pass the slaves `target_ns` after each
    cycle boundary (SYNC0 fires at the boundary + its configured shift, later than the frame).
    The PI gains also absorb the drift between the master's clock and the reference clock.
    """

    def __init__(self, cycle_ns: int, target_ns: int, kp: float = 0.1, ki: float = 0.005):
        self.cycle = int(cycle_ns)
        self.shift = int(target_ns)
        self.kp, self.ki = kp, ki
        self.integral = 0.0
        self.error_ns = 0

    def phase_error(self, dc_ns: int) -> int:
        d = (int(dc_ns) - self.shift) % self.cycle
        if d > self.cycle // 2:
            d -= self.cycle
        return d

    def update(self, dc_ns: int) -> float:
        if not dc_ns:
            return 0.0
        e = self.phase_error(dc_ns)
        self.error_ns = e
        self.integral += e
        lim = self.cycle / self.ki if self.ki else 0.0
        self.integral = max(-lim, min(lim, self.integral))
        corr = -(self.kp * e + self.ki * self.integral)       # late frames -> start earlier
        bound = 0.05 * self.cycle                                # at most 5 % of a period per cycle
        return max(-bound, min(bound, corr)) * 1e-9


_LATENCY_FD: int | None = None     # held open for the life of the process (closing drops the request)


def hold_cpu_latency(path: str = "/dev/cpu_dma_latency") -> str | None:
    """Ask the kernel (PM QoS) to keep every CPU out of idle states with a wake-up latency above
    0 us, for as long as this process lives: an idle CPU that halts (a deep C-state, or a VM's
    vCPU exiting to the host) can take milliseconds to wake for the answer frame, in bursts --
    measured on this project's 2-vCPU CI machines as dozens of lost frames per 1000 cycles,
    none with the request held. Returns None when granted, else a warning text."""
    global _LATENCY_FD
    if _LATENCY_FD is not None:
        return None
    try:
        fd = os.open(path, os.O_WRONLY)
    except OSError as exc:
        return (f"CPU wake-up latency not pinned ({path}: {exc.strerror}): idle CPUs may take "
                f"long to wake for the bus (needs root)")
    try:
        os.write(fd, (0).to_bytes(4, "little", signed=True))
    except OSError as exc:
        os.close(fd)
        return f"CPU wake-up latency not pinned ({path}: {exc.strerror})"
    _LATENCY_FD = fd
    return None


def rt_budget(root: str = "/proc/sys/kernel") -> float | None:
    """The share of each period the kernel lets SCHED_FIFO tasks run (sched_rt_runtime_us /
    sched_rt_period_us; 0.95 by default): a loop whose CPU use reaches it is suspended for the
    rest of the period -- ~50 ms each second at the default, measured on this project's e2e runs
    as gaps of 44-56 ms about every second. None: unlimited (-1) or not readable."""
    try:
        with open(f"{root}/sched_rt_runtime_us") as fh:
            runtime = int(fh.read())
        with open(f"{root}/sched_rt_period_us") as fh:
            period = int(fh.read())
    except (OSError, ValueError):
        return None
    return None if runtime < 0 or period <= 0 else runtime / period


def cpu_share_warning(cpu_s: float, wall_s: float, budget: float | None, margin: float = 0.85) -> str | None:
    """A warning text when the loop's CPU use `cpu_s` over `wall_s` [s] came within `margin` of
    the kernel's RT budget (rt_budget), else None."""
    if budget is None or wall_s <= 0:
        return None
    share = cpu_s / wall_s
    if share < margin * budget:
        return None
    return (f"the loop used {share:.0%} of its CPU, close to the kernel's real-time budget "
            f"{budget:.0%} (sched_rt_runtime_us / sched_rt_period_us): at the budget the kernel "
            f"suspends the loop for the rest of each period and the drives hold their targets")


def harden(realtime: bool = True, cpu: int | None = None, priority: int = 30) -> dict:
    """RT hygiene for the loop process. Returns {"gc_off", "mlockall", "affinity", "sched_fifo",
    "cpu_latency_pinned", "warnings": [..]}; nothing here raises."""
    out = {"gc_off": False, "mlockall": False, "affinity": None, "sched_fifo": False,
           "cpu_latency_pinned": False, "rt_budget": rt_budget(), "warnings": []}
    gc.collect()
    gc.disable()
    out["gc_off"] = True
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        if libc.mlockall(MCL_CURRENT | MCL_FUTURE) == 0:
            out["mlockall"] = True
        else:
            out["warnings"].append(f"mlockall failed ({os.strerror(ctypes.get_errno())}): page faults "
                                   f"may stall the loop (needs root or CAP_IPC_LOCK, ulimit -l)")
    except (OSError, AttributeError) as exc:
        out["warnings"].append(f"mlockall unavailable ({exc})")
    try:
        cpus = sorted(os.sched_getaffinity(0))
        pick = cpu if cpu is not None else cpus[-1]
        os.sched_setaffinity(0, {pick})
        out["affinity"] = pick
    except (OSError, AttributeError, IndexError) as exc:
        out["warnings"].append(f"CPU affinity not set ({exc})")
    if realtime:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
            out["sched_fifo"] = True
        except (OSError, AttributeError) as exc:
            out["warnings"].append(
                f"SCHED_FIFO unavailable ({exc}): the 1 ms loop runs with normal priority and will "
                f"see late cycles; run as root or grant CAP_SYS_NICE (setcap cap_sys_nice+ep "
                f"<python>) and check /proc/sys/kernel/sched_rt_runtime_us")
    else:
        out["warnings"].append("SCHED_FIFO not requested (hardware.realtime: false)")
    if realtime:
        why = hold_cpu_latency()
        out["cpu_latency_pinned"] = why is None
        if why is not None:
            out["warnings"].append(why)
    return out


class LoopWatch:
    """The loop's own stop requests, checked every cycle: SIGTERM / SIGHUP / SIGINT to this
    process (a signal to the whole process group reaches it too) and the death of its parent
    (PR_SET_PDEATHSIG delivers SIGUSR1; ``os.getppid()`` is compared every cycle as well, which
    also covers a parent that died before the request was made). The loop never runs the plan
    unsupervised: either ends in the defined stop (Fault.SIGNAL / Fault.PARENT_DIED)."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

    def __init__(self, parent_pid: int | None):
        self.parent_pid = parent_pid
        self.signum: int | None = None
        self.parent_dead = False

    def install(self) -> None:
        for s in self.SIGNALS:
            signal.signal(s, self._on_signal)
        signal.signal(signal.SIGUSR1, self._on_parent_death)
        if self.parent_pid is not None:
            set_parent_death_signal(signal.SIGUSR1)

    def _on_signal(self, signum, frame):
        if self.signum is None:
            self.signum = signum

    def _on_parent_death(self, signum, frame):
        self.parent_dead = True

    def reason(self):
        """(Fault, text) of a pending stop request, or None."""
        if self.parent_pid is not None and (self.parent_dead or os.getppid() != self.parent_pid):
            self.parent_dead = True
            return (Fault.PARENT_DIED, f"the parent process (pid {self.parent_pid}) died; the loop "
                                       f"stops the arm on its own")
        if self.signum is not None:
            return (Fault.SIGNAL, f"{signal.Signals(self.signum).name} to the loop process")
        return None


def set_parent_death_signal(signum: int) -> bool:
    """prctl(PR_SET_PDEATHSIG, signum) through ctypes (Linux); False where unavailable."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(1, int(signum), 0, 0, 0) == 0       # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return False
