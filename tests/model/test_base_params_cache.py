"""The base-parameter map cached per kinematics (issue 27): the cached map is the computed one,
a damaged file is recomputed, and a model whose map differs never gets another's."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from identify import RobotModel
from identify.model import base_params as B


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TWINID_CACHE", str(tmp_path))
    monkeypatch.setattr(B, "_MEMO", {})
    return tmp_path / "base_params"


def _same(a, b):
    return (a.full_names == b.full_names and a.names == b.names
            and np.array_equal(a.independent, b.independent) and np.array_equal(a.E, b.E)
            and np.array_equal(a.beta, b.beta))


def test_cached_map_is_the_computed_one_in_and_across_processes(cache):
    m = RobotModel.reference()
    fresh = B._compute(m, B.check_terms(("viscous", "coulomb")), None, 0, 1e-8, 0.0)
    first = B.compute_base_parameters(m, ("viscous", "coulomb"))
    assert _same(first, fresh) and len(list(cache.glob("*.npz"))) == 1
    B._MEMO.clear()                                   # as a new process: read from the file
    again = B.compute_base_parameters(m, ("viscous", "coulomb"))
    assert again is not first and _same(again, fresh)


def test_a_damaged_cache_file_is_recomputed(cache):
    m = RobotModel.reference()
    good = B.compute_base_parameters(m)
    (path,) = cache.glob("*.npz")
    path.write_bytes(b"not an npz")
    B._MEMO.clear()
    assert _same(B.compute_base_parameters(m), good)
    assert B._load_cached(path, (), 1e-8) is not None          # rewritten


def test_the_key_follows_what_the_map_depends_on(cache):
    m = RobotModel.reference()
    k = B._key(m, (), None, 0, 1e-8, 0.0)
    assert B._key(m.with_params(2 * m.params), (), None, 0, 1e-8, 0.0) == k   # inertia: no
    lim = dataclasses.replace(m.limits, q_max=m.limits.q_max * 0.5)
    assert B._key(m.with_limits(lim), (), None, 0, 1e-8, 0.0) != k           # ranges: yes
    ax = dataclasses.replace(m, axes=-m.axes)
    assert B._key(ax, (), None, 0, 1e-8, 0.0) != k                            # kinematics
    assert B._key(m, ("viscous",), None, 0, 1e-8, 0.0) != k
    assert B._key(m, (), None, 1, 1e-8, 0.0) != k
