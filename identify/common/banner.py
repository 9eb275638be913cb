"""Silence the ``pybullet build time: ...`` banner that pybullet's C extension prints on stderr
when it is first imported (by the twin, in the CLI process and in every sweep worker).

:func:`install` (called when :mod:`identify.common` is imported, so before any backend) puts a
meta-path finder in front of the import system that, for the listed modules only, runs the
extension's initialisation with file descriptor 2 pointed at /dev/null and flushes the C stdio
buffers before restoring it. Nothing else is touched; an import error still raises as usual.
"""
from __future__ import annotations

import contextlib
import ctypes
import importlib.abc
import os
import sys

#: modules whose import-time banner is silenced
NOISY = ("pybullet",)


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


class _QuietLoader(importlib.abc.Loader):
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        with _fd2_silenced():
            return self._loader.create_module(spec)

    def exec_module(self, module):
        with _fd2_silenced():
            return self._loader.exec_module(module)


class _QuietFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in NOISY:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _QuietLoader(spec.loader)
                return spec
        return None


def install() -> None:
    """Put the finder first on sys.meta_path (idempotent)."""
    if not any(isinstance(f, _QuietFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _QuietFinder())
