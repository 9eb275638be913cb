"""The same numbers on every x86-64 machine: BLAS and numpy kernels pinned before numpy loads.

The excitation design is an iterative optimization (IPOPT, hundreds of iterations), so the last
bits of a matrix product decide which local optimum it ends in: the same scenario gave a
trajectory with cond(W) 30.97 on one machine, 30.82 on another (OpenBLAS picked its AVX-512
kernels on one, its AVX2 ones on the other) and 32.15 with OpenBLAS's older kernels -- and every
number of the run after it differed by up to a few per cent. Pinned here, before the first
import of numpy (both OpenBLAS copies, numpy's and IPOPT's, read the setting when they load):

* ``OPENBLAS_CORETYPE=Haswell`` -- the AVX2 / FMA kernels every x86-64 server of the last ten
  years runs (the matrices here are small: AVX-512 gains nothing);
* ``NPY_DISABLE_CPU_FEATURES`` -- numpy's AVX-512 loops (sin, cos, exp, reductions) off, so its
  AVX2 ones run everywhere.

A value the user set is kept (``setdefault``). On other architectures nothing is set. Loaded
after numpy (a program that imported numpy first), it changes nothing: :func:`pinned` says so.
"""
from __future__ import annotations

import os
import platform
import sys

#: OpenBLAS kernel family used on x86-64
CORETYPE = "Haswell"
#: numpy CPU features switched off on x86-64
NUMPY_DISABLED = "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL " \
                 "AVX512_ICL AVX512_SPR"


def pin() -> bool:
    """Set the kernel choices for x86-64 if numpy is not loaded yet; True when they will hold."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    if "numpy" in sys.modules:
        return pinned()
    os.environ.setdefault("OPENBLAS_CORETYPE", CORETYPE)
    os.environ.setdefault("NPY_DISABLE_CPU_FEATURES", NUMPY_DISABLED)
    return True


def pinned() -> bool:
    """The kernels this process runs are the pinned ones (numpy loaded with the settings)."""
    return (os.environ.get("OPENBLAS_CORETYPE") == CORETYPE
            and os.environ.get("NPY_DISABLE_CPU_FEATURES") == NUMPY_DISABLED)
