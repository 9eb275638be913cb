"""The term library (identify.model.friction) against closed forms and a step-by-step reference."""
import numpy as np
import pytest

from identify.model.friction import Term, dahl_state, parse_term, term_columns, term_torque


def _dahl_loop(v, dt, xs):
    """Reference: the exact per-step update, one sample at a time."""
    z, out = 0.0, []
    for x in v * dt:
        s = np.sign(x)
        z = s + (z - s) * np.exp(-abs(x) / xs)
        out.append(z)
    return np.array(out)


def test_dahl_scan_equals_step_by_step_update():
    rng = np.random.default_rng(3)
    t = np.arange(3001) / 500.0
    v = 0.3 * np.sin(2 * np.pi * 0.4 * t) + 2e-3 * rng.normal(size=t.size)
    v[1000:1400] = 0.0                                    # a rest
    for xs in (1e-4, 5e-4, 1e-2):
        np.testing.assert_allclose(dahl_state(v, 1 / 500.0, xs), _dahl_loop(v, 1 / 500.0, xs),
                                   atol=1e-12)


def test_dahl_closed_form_constant_velocity_and_memory_at_rest():
    dt, xs, v0 = 1e-3, 1e-3, 0.05
    v = np.r_[np.full(200, v0), np.zeros(300), np.full(100, -v0)]
    z = dahl_state(v, dt, xs)
    x = v0 * dt * np.arange(1, 201)
    np.testing.assert_allclose(z[:200], 1 - np.exp(-x / xs), atol=1e-12)   # from z = 0
    np.testing.assert_allclose(z[200:500], z[199])          # at rest it keeps the direction
    xb = v0 * dt * np.arange(1, 101)
    np.testing.assert_allclose(z[500:], -1 + (z[199] + 1) * np.exp(-xb / xs), atol=1e-12)
    # two joints at once, along axis 0
    np.testing.assert_allclose(dahl_state(np.c_[v, -v], dt, xs), np.c_[z, -z], atol=1e-12)


def test_columns_closed_forms():
    v = np.array([-2.0, -0.1, 0.0, 0.05, 1.5])
    tl = np.array([3.0, -2.0, 1.0, -4.0, -1.0])
    np.testing.assert_allclose(term_columns(Term("stribeck", eps=0.0, vs=0.5), v)[:, 0],
                               np.exp(-(v / 0.5) ** 2) * np.sign(v))
    np.testing.assert_allclose(term_columns(Term("sqrt_viscous"), v)[:, 0],
                               np.sign(v) * np.abs(v) ** 0.5)
    np.testing.assert_allclose(term_columns(Term("quad_viscous"), v)[:, 0], v * np.abs(v))
    asym = term_columns(Term("coulomb_asym", eps=0.01), v)
    np.testing.assert_allclose(asym.sum(axis=1), np.tanh(v / 0.01))
    assert np.all(asym[:, 0] >= 0) and np.all(asym[:, 1] <= 0)
    q4 = term_columns(Term("load_coulomb_4q"), v, tau_load=tl)
    single = term_columns(Term("load_coulomb"), v, tau_load=tl)[:, 0]
    np.testing.assert_allclose(q4.sum(axis=1), single)       # the quadrants partition it
    np.testing.assert_allclose(single, np.abs(tl) * np.sign(v))
    # driving quadrant where tau_L and v agree in sign (sample 1), braking elsewhere
    drive = tl * v > 0
    assert drive.tolist() == [False, True, False, False, False]
    assert np.all(q4[~drive, 0] == 0) and np.all(q4[drive, 1] == 0)
    with pytest.raises(ValueError, match="load torque"):
        term_columns(Term("load_coulomb"), v)


def test_term_torque_and_labels():
    v = np.linspace(-1, 1, 7)
    a = np.linspace(2, -2, 7)
    tq = term_torque([Term("viscous"), Term("armature"), Term("offset")], [2.0, 0.5, -0.1], v, a)
    np.testing.assert_allclose(tq, 2 * v + 0.5 * a - 0.1)
    t = parse_term("dahl(xs=0.0002)")
    assert t == Term("dahl", xs=2e-4) and t.label == "dahl(xs=0.0002)"
    assert parse_term({"kind": "coulomb", "eps": 0.01}).label == "coulomb(eps=0.01)"
    assert Term("viscous", eps=3.0).eps == 0.0            # constants a kind does not use
    with pytest.raises(ValueError, match="unknown joint term"):
        Term("ripple")
    with pytest.raises(ValueError, match="xs must be > 0"):
        Term("dahl")
