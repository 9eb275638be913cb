"""Parent-side housekeeping of a hardware run: the run's record folder, signals, console notes.

* :func:`new_record_dir` -- every run gets its own folder ``<record_dir>/run<k>_<time>`` (never
  reused, so the excitation's chunks survive the validation run); the parent folder must be
  writable (probed before the bus is touched); default ``./twinid-hardware`` (never the system
  temp folder).
* :class:`SignalGuard` -- while the loop may move the arm, SIGTERM / SIGHUP / SIGINT to the
  parent do not kill it: they request the defined stop (``ctrl[C_ABORT]``) and are re-raised as
  an exception once the loop has stopped the drives.
* :func:`warn` -- loud console notes (stderr), e.g. SCHED_FIFO unavailable, where samples are.
* :class:`RunIO` -- the parent's side of one loop run (shared memory, pipe, rows streamed to
  chunk files at least every 80 ms); :func:`check_free_space` before arming;
  :func:`stop_claim` -- what a message may say about a stop (only what the drives confirmed).
"""
from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
import threading
import time
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

from . import loop as L

DEFAULT_RECORD_ROOT = "twinid-hardware"


class RecordDirError(OSError):
    """The record folder cannot be created or written; the message names it and why."""


def new_record_dir(root: str | os.PathLike | None) -> Path:
    """A fresh, writable folder for one run's chunks (see module docstring)."""
    base = Path(root) if root else Path.cwd() / DEFAULT_RECORD_ROOT
    try:
        base.mkdir(parents=True, exist_ok=True)
        k = len([p for p in base.glob("run*") if p.is_dir()])
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        while True:
            d = base / f"run{k:02d}_{stamp}"
            if not d.exists():
                break
            k += 1
        d.mkdir()
        probe = d / ".write-probe"
        probe.write_bytes(b"0" * 4096)
        probe.unlink()
    except OSError as exc:
        raise RecordDirError(f"cannot write the recording under {base}: {exc.strerror or exc} "
                             f"(set hardware.options.record_dir / --out to a writable folder); "
                             f"nothing was moved") from exc
    return d


def check_free_space(folder: Path, need_bytes: int) -> None:
    """Refuse (RecordDirError, nothing moved) when the file system holding `folder` has less
    than `need_bytes` free: the run's rows (chunks, the assembled stream, bus.npz) must fit
    before the drives are armed, so a full disk cannot cut a recording short."""
    import shutil
    free = shutil.disk_usage(folder).free
    if free < need_bytes:
        raise RecordDirError(f"not enough free space for the recording under {folder}: "
                             f"{free / 1e6:.1f} MB free, {need_bytes / 1e6:.1f} MB needed (the "
                             f"run's longest recording, 3 copies); nothing was moved")


def warn(text: str) -> None:
    """A loud console line on stderr (also under --quiet)."""
    print(f"twinid: WARNING: {text}", file=sys.stderr, flush=True)


class StopSignal(BaseException):
    """SIGTERM or SIGHUP reached the parent during a run (after the defined stop)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalGuard:
    """Context manager: SIGTERM/SIGHUP/SIGINT call `on_signal(signum)` instead of killing the
    process (main thread only; elsewhere it does nothing). ``received`` holds the first one."""

    SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)

    def __init__(self, on_signal):
        self.on_signal = on_signal
        self.received: int | None = None
        self._old = {}

    def _handler(self, signum, frame):
        if self.received is None:
            self.received = signum
        self.on_signal(signum)

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for s in self.SIGNALS:
                self._old[s] = signal.signal(s, self._handler)
        return self

    def __exit__(self, *exc):
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()
        return False

    def raise_if_received(self, where: str, moved: bool = True, confirmed: bool = False) -> None:
        """Re-raise the received signal: KeyboardInterrupt for SIGINT, StopSignal otherwise.
        The note claims only what is known: `moved` False (nothing was enabled), else
        `confirmed` (the drives' statuswords confirmed the defined stop) or not."""
        if self.received is None:
            return
        name = signal.Signals(self.received).name
        if not moved:
            what = "the drives were never enabled"
        elif confirmed:
            what = "the drives were stopped in the defined order (confirmed by their statuswords)"
        else:
            what = "the defined stop was requested; the drives did NOT confirm it"
        warn(f"{name} received: {what}; {where}")
        if self.received == signal.SIGINT:
            raise KeyboardInterrupt
        raise StopSignal(self.received)


def stop_claim(summary: dict) -> str:
    """What the loop's summary lets us claim about the stop -- only what the drives confirmed."""
    if summary.get("stop_confirmed"):
        ramp = summary.get("stop_ramp_cycles")
        return (f"ramped to rest in {ramp} cycles, the drives' statuswords confirmed them disabled"
                if ramp is not None else "the drives' statuswords confirmed them disabled")
    return ("the drives did NOT confirm a disabled state; check the arm (their own stop reactions "
            "and SyncManager watchdogs apply)")


class RunIO:
    """The parent's side of one loop run: shared memory (control block, row table, plan), the
    pipe, and the chunk writer streaming rows to disk (at least every FLUSH_S seconds)."""

    FLUSH_S = 0.08

    @classmethod
    def create(cls, be, record_dir, capacity):
        io = cls()
        width = L.row_width(be.full.n)
        io.ctrl_shm = shared_memory.SharedMemory(create=True, size=L.CTRL_LEN * 8)
        io.rec_shm = shared_memory.SharedMemory(create=True, size=capacity * width * 8)
        io.plan_shm = None
        io.ctrl = np.ndarray((L.CTRL_LEN,), np.int64, io.ctrl_shm.buf)
        io.ctrl[:] = 0
        io.rows = np.ndarray((capacity, width), np.float64, io.rec_shm.buf)
        io.n = be.full.n
        io.writer, io.parent, io.child = None, None, None
        io.written, io.t_flush, io.write_error = 0, time.monotonic(), []
        be._ctrl = io.ctrl
        return io

    def flush(self, upto, min_rows=1):
        """Stream rows [written, upto) to a chunk file once FLUSH_S has passed (or min_rows=0...);
        a write failure requests the defined stop (ctrl[C_ABORT] = ABORT_RECORD)."""
        now = time.monotonic()
        if self.write_error or upto <= self.written:
            return
        if upto - self.written < min_rows and now - self.t_flush < self.FLUSH_S:
            return
        try:
            t, ch = L.chunk_channels(self.rows[self.written:upto], self.n)
            self.writer.write(t, **ch)
        except Exception as exc:  # noqa: BLE001 -- full disk, folder gone, ...: stop the arm
            self.ctrl[L.C_ABORT] = L.ABORT_RECORD
            self.write_error.append(f"{type(exc).__name__}: {exc}")
            return
        self.written, self.t_flush = upto, now
        self.ctrl[L.C_WRITTEN] = upto

    def close(self, proc, be):
        """Join the loop, write the last rows, release the shared memory; (rows copy, count,
        first run row)."""
        if proc.pid is not None:               # started (a failed start leaves nothing to join)
            proc.join(10.0)
            if proc.is_alive():
                proc.kill()
                proc.join(1.0)
        n_rows = int(self.ctrl[L.C_ROWS])
        self.flush(n_rows)
        run_row0 = int(self.ctrl[L.C_RUN_ROW0])
        cyc = self.rows[:n_rows].copy()
        with be._ctrl_lock:
            be._ctrl = None
        for shm in (self.plan_shm, self.ctrl_shm, self.rec_shm):
            if shm is not None:
                shm.close()
                shm.unlink()
        if self.parent is not None:
            self.parent.close()
        return cyc, n_rows, run_row0

