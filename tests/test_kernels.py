"""identify.common.kernels: importing identify first pins the BLAS and numpy kernels, so the
golden runs come out the same on AVX2 and AVX-512 machines."""
from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from identify.common import kernels

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                                reason="the pin is for x86-64")

_PROBE = ("import identify, numpy; "
          "from numpy._core._multiarray_umath import __cpu_features__ as f; "
          "numpy.dot(numpy.ones((64, 64)), numpy.ones((64, 64))); "
          "print(sorted(k for k, v in f.items() if v and k.startswith('AVX512')))")


def _probe(env):
    p = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    return p


def test_identify_imported_first_pins_openblas_and_numpy_kernels():
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_CORETYPE", "NPY_DISABLE_CPU_FEATURES")}
    env["OPENBLAS_VERBOSE"] = "2"           # OpenBLAS prints the kernel family it loaded
    p = _probe(env)
    assert "Core: Haswell" in p.stdout + p.stderr
    assert p.stdout.strip().splitlines()[-1] == "[]"       # no AVX-512 loop of numpy's runs


def test_a_setting_of_the_users_is_kept():
    env = dict(os.environ, OPENBLAS_CORETYPE="Sandybridge", OPENBLAS_VERBOSE="2")
    env.pop("NPY_DISABLE_CPU_FEATURES", None)
    p = _probe(env)
    assert "Core: Sandybridge" in p.stdout + p.stderr


def test_this_test_process_runs_the_pinned_kernels():
    assert kernels.pinned()
