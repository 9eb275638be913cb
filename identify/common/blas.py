"""BLAS threading: run small dense linear algebra with one OpenBLAS thread.

On a machine whose cores are busy, OpenBLAS threads slow tall-skinny QR and small p x p products
down 20-50x instead of speeding them up; the estimators and the excitation optimizer run inside
:func:`single_thread_blas`."""
from __future__ import annotations

import contextlib
import ctypes
import functools
import os

__all__ = ["single_thread_blas"]


_OPENBLAS_SYMBOLS = (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                     ("scipy_openblas_get_num_threads", "scipy_openblas_set_num_threads"),
                     ("openblas_get_num_threads64_", "openblas_set_num_threads64_"),
                     ("openblas_get_num_threads", "openblas_set_num_threads"))


@functools.lru_cache(maxsize=None)
def _handle(path: str) -> tuple | None:
    """(get, set) thread-count functions of the OpenBLAS at `path`, or None."""
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return None
    for g, s in _OPENBLAS_SYMBOLS:
        if hasattr(lib, g) and hasattr(lib, s):
            return getattr(lib, g), getattr(lib, s)
    return None


def _openblas_handles() -> tuple:
    """(get, set) thread-count functions of every OpenBLAS loaded in this process NOW (Linux;
    empty elsewhere or for other BLAS libraries). Read anew on every call: numpy's, scipy's and
    CasADi's IPOPT plugin each bring their own OpenBLAS, loaded lazily -- a list made once would
    miss those loaded later (IPOPT's threads then made optimized trajectories depend on the
    machine's core count)."""
    try:
        with open("/proc/self/maps") as fh:
            paths = sorted({ln.split()[-1] for ln in fh if "openblas" in ln.lower() and ".so" in ln})
    except OSError:
        return ()
    return tuple(h for h in map(_handle, paths) if h is not None)


@contextlib.contextmanager
def single_thread_blas():
    """Run the enclosed linear algebra with one OpenBLAS thread, restoring the previous counts.

    The estimators' work is tall-skinny QR in blocks of ~2000 rows and small p x p products, which
    BLAS threads do not speed up; on a machine whose cores are busy, OpenBLAS threads instead
    slowed it 20-50x (measured: one 120000 x 50 QR 0.1 s single-threaded vs 2-5 s with two
    threads on a loaded 2-core machine). No-op where OpenBLAS is not found."""
    handles = _openblas_handles()
    old = [int(get()) for get, _ in handles]
    for _, set_ in handles:
        set_(1)
    # an OpenBLAS first loaded inside the block (IPOPT's) starts with one thread as well
    env = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        yield
    finally:
        if env is None:
            os.environ.pop("OPENBLAS_NUM_THREADS", None)
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = env
        for (_, set_), k in zip(handles, old):
            set_(k)
