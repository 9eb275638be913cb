"""Parent-side housekeeping of a hardware run: the run's record folder, signals, console notes.

* :func:`new_record_dir` -- every run gets its own folder ``<record_dir>/run<k>_<time>`` (never
  reused, so the excitation's chunks survive the validation run); the parent folder must be
  writable (probed before the bus is touched); default ``./twinid-hardware`` (never the system
  temp folder).
* :class:`SignalGuard` -- while the loop may move the arm, SIGTERM / SIGHUP / SIGINT to the
  parent do not kill it: they request the defined stop (``ctrl[C_ABORT]``) and are re-raised as
  an exception once the loop has stopped the drives.
* :func:`warn` -- loud console notes (stderr), e.g. SCHED_FIFO unavailable, where samples are.
"""
from __future__ import annotations

import datetime as _dt
import os
import signal
import sys
import threading
from pathlib import Path

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

    def raise_if_received(self, where: str) -> None:
        """Re-raise the received signal: KeyboardInterrupt for SIGINT, StopSignal otherwise."""
        if self.received is None:
            return
        warn(f"{signal.Signals(self.received).name} received: the drives were stopped in the "
             f"defined order; {where}")
        if self.received == signal.SIGINT:
            raise KeyboardInterrupt
        raise StopSignal(self.received)
