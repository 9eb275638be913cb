"""Silence the ``pybullet build time: ...`` banner that pybullet's C extension prints on stderr
when it is first imported (by the twin, in the CLI process and in every sweep worker): every
module of the project that needs pybullet gets it from :func:`import_pybullet`. Importing this
module changes nothing."""
from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import sys

@contextlib.contextmanager
def _fd2_silenced():
    try:
        libc = ctypes.CDLL(None)
    except OSError:
        libc = None
    sys.stderr.flush()
    saved = os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(null, 2)
        yield
    finally:
        if libc is not None:
            libc.fflush(None)
        os.dup2(saved, 2)
        os.close(saved)
        os.close(null)


def import_pybullet():
    """``import pybullet``, without the banner: the first import runs the extension's
    initialisation with file descriptor 2 pointed at /dev/null (C stdio flushed before it is
    restored); later calls return the imported module. An import error still raises."""
    if "pybullet" in sys.modules:
        return sys.modules["pybullet"]
    with _fd2_silenced():
        return importlib.import_module("pybullet")
