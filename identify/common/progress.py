"""Progress bars and status lines for the CLI, silenced by ``--quiet``.

One switch for the whole process: :func:`set_quiet`. Library code asks :func:`enabled` before
passing ``progress=True`` to a stage, wraps long loops in :func:`bar`, and reports steps with
:func:`step`. Everything goes to stderr so stdout stays clean for scripts.
"""
from __future__ import annotations

import contextlib
import sys
import time

from tqdm.auto import tqdm

# tqdm's monitor thread (started by the first bar, alive for the rest of the process) is not
# needed by our bars, and a live thread makes the excitation optimizer keep its starts in one
# process (forking with other threads alive is unsafe): a design after any bar ran serially.
tqdm.monitor_interval = 0

_state = {"quiet": False}


def set_quiet(quiet: bool) -> None:
    """Silence (True) or enable (False) every bar and status line of this process."""
    _state["quiet"] = bool(quiet)


def enabled() -> bool:
    """True when progress output is wanted (not --quiet)."""
    return not _state["quiet"]


def bar(iterable=None, *, total: int | None = None, desc: str = "", unit: str = "it", **kw) -> tqdm:
    """A tqdm bar on stderr, disabled under --quiet."""
    return tqdm(iterable, total=total, desc=desc, unit=unit, disable=not enabled(),
                file=sys.stderr, dynamic_ncols=True, leave=False, **kw)


def message(text: str) -> None:
    """One status line on stderr (suppressed under --quiet)."""
    if enabled():
        tqdm.write(text, file=sys.stderr)


@contextlib.contextmanager
def step(title: str, timings: dict | None = None):
    """Announce a pipeline step; record its wall time [s] in `timings[title]` if given."""
    message(f"-> {title} ...")
    t0 = time.perf_counter()
    try:
        yield
    finally:
        dt = time.perf_counter() - t0
        if timings is not None:
            timings[title] = round(dt, 4)
        message(f"   {title}: {dt:.2f} s")


_warned: set[str] = set()


def warn(text: str) -> None:
    """A warning line on stderr, ``twinid: warning: <text>`` -- printed once per process for the
    same text, and also under --quiet (it says something about the results or the run)."""
    if text in _warned:
        return
    _warned.add(text)
    tqdm.write(f"twinid: warning: {text}", file=sys.stderr)
