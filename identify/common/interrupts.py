"""Interrupts that stop: SIGINT / SIGTERM / SIGHUP end a command within a second, whatever it is
doing.

Two things defeat Python's default KeyboardInterrupt in this project: IPOPT (through CasADi) calls
back into Python for the objective and constraint rows and treats an exception raised there as a
failed evaluation, so an interrupt turned into an IPOPT status ("solved to the acceptable
tolerance") and the run went on; and long stretches of compiled code (CasADi's code generation,
IPOPT's linear algebra) never return to the interpreter, so a Python handler cannot run at all.

    from identify.common import interrupts
    with interrupts.handling():          # the command line (identify.app.cli) around a command
        ...
        interrupts.check()               # after a solver call: raise if a signal came meanwhile

Within :func:`handling`:

* the first signal raises :class:`Interrupted` (a KeyboardInterrupt with ``signum``; exit code
  128 + signum: 130 SIGINT, 143 SIGTERM, 129 SIGHUP; later ones do not disturb the clean-up it
  set off) and stays *recorded*: :func:`check` and
  :func:`pending` see them even after a library swallowed the exception, so a solve that was
  interrupted is never taken for a result (identify.excitation never caches it);
* a watchdog thread wakes on every signal at the C level (``signal.set_wakeup_fd``). When the
  signal's handler is still this module's (a backend's own guard -- the hardware run's defined
  stop, robot.runfiles.SignalGuard -- is left alone) and the command has not ended ``grace_s``
  seconds later (stuck in compiled code, or a clean-up that hangs), it ends the process's direct
  children (pool workers, the C compiler) and exits with 128 + signum;
* forked children do not inherit the wake-up descriptor (their signals are their own).

Only the main thread can install handlers; elsewhere :func:`handling` does nothing.
"""
from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading

#: the signals handled (each exits 128 + its number)
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

#: seconds the watchdog gives the main thread to end the command after a signal
GRACE_S = 0.7


class Interrupted(KeyboardInterrupt):
    """A signal ended the command; ``signum`` is its number (exit code 128 + signum)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


class _State:
    installed = False
    received: int | None = None     # first signal received while installed
    old_handlers: dict = {}
    old_wakeup = -1
    pipe: tuple[int, int] | None = None
    done: threading.Event | None = None
    grace_s = GRACE_S
    leaving = False                 # the command ended after a signal: the process is exiting


_S = _State()


def _handler(signum, frame):
    """Raise on the first signal only: a second one (Ctrl-C pressed again) must not break the
    clean-up the first set off; the watchdog ends the process grace_s after each signal."""
    if _S.received is None:
        _S.received = int(signum)
        raise Interrupted(signum)


def pending() -> int | None:
    """The signal received since :func:`handling` was entered (None: none)."""
    return _S.received if _S.installed else None


def check() -> None:
    """Raise :class:`Interrupted` if a signal was received (call after code that may have
    swallowed the exception, e.g. a solver that calls back into Python)."""
    s = pending()
    if s is not None:
        raise Interrupted(s)


def leaving() -> bool:
    """True once a command ended by a signal left :func:`handling` (finish=True): the process
    should exit now (identify.app.cli does with os._exit: the interpreter's tear-down -- freeing
    the CasADi graphs -- took 1.4 s after an interrupted compilation, and daemon threads such as
    the watchdog cannot run during it)."""
    return _S.leaving


def exit_code(exc: BaseException) -> int:
    """128 + signum for an :class:`Interrupted`, 130 for any other KeyboardInterrupt."""
    return 128 + int(getattr(exc, "signum", signal.SIGINT))


def _children() -> list[int]:
    """Process ids of this process's direct children (Linux /proc; [] elsewhere)."""
    pids = []
    try:
        for task in os.listdir(f"/proc/{os.getpid()}/task"):
            with open(f"/proc/{os.getpid()}/task/{task}/children") as f:
                pids += [int(p) for p in f.read().split()]
    except OSError:
        pass
    return pids


def _force_exit(signum: int, quiet: bool = False) -> None:
    """End the process with 128 + signum (its direct children first). quiet: the command has
    already reported the interrupt and the interpreter is tearing down (stdio flushed)."""
    if quiet:
        for f in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                f.flush()
    else:
        name = signal.Signals(signum).name
        os.write(2, f"twinid: interrupted ({name}); the step in progress did not return "
                    f"within {_S.grace_s:.1f} s: stopped\n".encode())
    for pid in _children():
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    os._exit(128 + signum)


def _watch(fd: int, done: threading.Event) -> None:
    """Watchdog thread: one byte per signal on `fd` (the wake-up pipe)."""
    try:
        while not done.is_set():
            data = os.read(fd, 64)
            if not data:
                return
            for signum in data:
                if signum not in SIGNALS or signal.getsignal(signum) is not _handler:
                    continue      # not ours, or another guard (a hardware stop) is in charge
                if not done.wait(_S.grace_s):
                    _force_exit(signum, quiet=_S.leaving)
    except OSError:
        return
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)


def _after_fork_child() -> None:
    if _S.installed:
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
        _S.pipe = None


os.register_at_fork(after_in_child=_after_fork_child)


def install(grace_s: float = GRACE_S) -> bool:
    """Install the handlers and the watchdog (main thread only; False elsewhere or if already
    installed)."""
    if _S.installed or threading.current_thread() is not threading.main_thread():
        return False
    r, w = os.pipe()
    os.set_blocking(w, False)
    _S.old_wakeup = signal.set_wakeup_fd(w, warn_on_full_buffer=False)
    _S.old_handlers = {s: signal.signal(s, _handler) for s in SIGNALS}
    _S.received, _S.pipe, _S.grace_s = None, (r, w), float(grace_s)
    _S.done = threading.Event()
    _S.installed = True
    t = threading.Thread(target=_watch, args=(r, _S.done), name="twinid-interrupt-watchdog",
                         daemon=True)
    t.twinid_watchdog = True
    t.start()
    return True


def uninstall(finish: bool = False) -> None:
    """Restore the previous handlers and wake-up descriptor; stop the watchdog. finish: if a
    signal was received, leave the watchdog's deadline standing (the process is exiting; should
    the interpreter's tear-down -- garbage collection of compiled functions, atexit hooks -- take
    longer, the watchdog ends it grace_s after the signal with 128 + signum)."""
    if not _S.installed:
        return
    _S.installed = False
    if finish and _S.received is not None:
        _S.leaving = True
    else:
        _S.done.set()
    for s, h in _S.old_handlers.items():
        signal.signal(s, h)
    with contextlib.suppress(ValueError):
        signal.set_wakeup_fd(_S.old_wakeup)
    if _S.pipe is not None and not _S.leaving:
        with contextlib.suppress(OSError):     # (the watchdog may have ended already)
            os.write(_S.pipe[1], b"\0")   # wake the watchdog so that it sees `done`
        os.close(_S.pipe[1])
    _S.pipe, _S.old_handlers, _S.received = None, {}, None


@contextlib.contextmanager
def handling(grace_s: float = GRACE_S, finish: bool = True):
    """Context manager: :func:`install` on entry (if possible), :func:`uninstall` (`finish`)
    on exit. With finish (the command line: the process ends after an interrupted command) the
    process is gone at most grace_s after a signal; finish=False for code that carries on."""
    mine = install(grace_s)
    try:
        yield
    finally:
        if mine:
            uninstall(finish)


def is_watchdog(thread: threading.Thread) -> bool:
    """True for this module's watchdog thread (it holds no lock: forking beside it is safe)."""
    return bool(getattr(thread, "twinid_watchdog", False))


def run_group(cmd: list[str]):
    """subprocess.run(cmd, capture_output=True, text=True) in a process group of its own, the
    whole group killed on any exception (an interrupt): a compiler driver's own children (gcc's
    cc1, as, ld) die with it instead of finishing orphaned. Returns the CompletedProcess."""
    import subprocess
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            process_group=0)
    try:
        out, err = proc.communicate()
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def stop_pool(ex) -> None:
    """Kill a concurrent.futures.ProcessPoolExecutor's workers (SIGKILL), reap them and shut the
    pool down without waiting for its running jobs (an interrupted caller)."""
    procs = list((getattr(ex, "_processes", None) or {}).values())
    for p in procs:
        with contextlib.suppress(OSError, AttributeError, ValueError):
            p.kill()
    for p in procs:
        with contextlib.suppress(OSError, AttributeError, ValueError, AssertionError):
            p.join(1.0)
    ex.shutdown(wait=False, cancel_futures=True)


def die_with_parent(parent: int) -> None:
    """Initializer of a worker process (a start of the optimizer, a sweep run): the kernel sends
    it SIGTERM when its parent dies (PR_SET_PDEATHSIG; a driver killed with SIGKILL left a
    ~200 MB sweep worker running), and SIGINT / SIGTERM / SIGHUP take their default action (a
    Ctrl-C reaches the whole group; the parent, interrupted itself, stops the pool). parent: the
    parent's pid, to catch a parent that died before the request took effect."""
    import ctypes
    for s in SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))    # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)
