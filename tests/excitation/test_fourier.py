"""FourierTrajectory: analytic derivatives, rest conditions, periodicity, files."""
import math

import numpy as np
import pytest

from identify.backend.interface import Trajectory
from identify.excitation.fourier import FourierTrajectory, complete_rest

WF = 0.1 * math.pi


def _random_traj(seed=0, n=6, H=5, wf=WF, scale=0.3):
    rng = np.random.default_rng(seed)
    q0 = rng.uniform(-1, 1, n)
    return FourierTrajectory.from_free(q0, scale * rng.standard_normal((n, H - 1)),
                                       scale * rng.standard_normal((n, H - 1)), wf)


def test_derivatives_match_central_differences():
    tr = _random_traj()
    t = np.linspace(0.3, 19.7, 37)
    h = 1e-4
    q, qd, qdd = tr.evaluate(t)
    qp, qdp, _ = tr.evaluate(t + h)
    qm, qdm, _ = tr.evaluate(t - h)
    # central difference error ~ h^2 * third derivative; amplitudes here are O(1)
    np.testing.assert_allclose((qp - qm) / (2 * h), qd, atol=1e-7)
    np.testing.assert_allclose((qdp - qdm) / (2 * h), qdd, atol=1e-7)
    # and a wrong derivative would be caught: the check is sensitive at this level
    assert np.abs(qd).max() > 1e-2 and np.abs(qdd).max() > 1e-3


def test_position_matches_numerical_integral_of_velocity():
    """Independent of the closed-form q: integrate qd (trapezoid, fine grid) from q0."""
    tr = _random_traj(seed=3, n=2, H=4)
    t = np.linspace(0.0, tr.period, 20001)
    q, qd, _ = tr.evaluate(t)
    dt = t[1] - t[0]
    q_int = tr.q0 + np.vstack([np.zeros((1, 2)), np.cumsum((qd[1:] + qd[:-1]) * dt / 2, axis=0)])
    np.testing.assert_allclose(q_int, q, atol=1e-6)


def test_start_end_exact_and_periodic():
    tr = _random_traj(seed=1)
    q, qd, qdd = tr.evaluate(np.array([0.0, tr.period, 3 * tr.period]))
    for k in range(3):
        np.testing.assert_allclose(q[k], tr.q0, atol=1e-12)
        np.testing.assert_allclose(qd[k], 0.0, atol=1e-12)
        np.testing.assert_allclose(qdd[k], 0.0, atol=1e-12)
    t = np.linspace(0, tr.period, 50)
    a = tr.evaluate(t)
    b = tr.evaluate(t + 2 * tr.period)
    for x, y in zip(a, b):
        np.testing.assert_allclose(x, y, atol=1e-10)
    assert tr.period == pytest.approx(20.0)
    assert tr.with_periods(3).duration == pytest.approx(60.0)


def test_is_a_backend_trajectory_and_shapes():
    tr = _random_traj(n=3, H=2)
    assert isinstance(tr, Trajectory)
    assert tr.n_joints == 3 and tr.n_harmonics == 2
    q, qd, qdd = tr.evaluate(np.linspace(0, 1, 7))
    assert q.shape == qd.shape == qdd.shape == (7, 3)
    q1, _, _ = tr.evaluate(0.5)
    assert q1.shape == (3,)


def test_rest_conditions_enforced_with_joint_name():
    a = np.array([[0.1, 0.2], [0.3, -0.3]])  # joint A: sum a != 0
    b = np.array([[-0.4, 0.2], [0.0, 0.0]])
    with pytest.raises(ValueError, match="jA.*rest"):
        FourierTrajectory(np.zeros(2), a, b, WF, joint_names=("jA", "jB"))
    a_ok = np.array([[0.1, -0.1], [0.3, -0.3]])
    b_bad = np.array([[-0.4, 0.2], [0.1, 0.0]])  # joint B: sum k b != 0
    with pytest.raises(ValueError, match="jB.*acceleration"):
        FourierTrajectory(np.zeros(2), a_ok, b_bad, WF, joint_names=("jA", "jB"))
    FourierTrajectory(np.zeros(2), a_ok, b, WF, joint_names=("jA", "jB"))


def test_bad_inputs():
    with pytest.raises(ValueError, match="wf"):
        FourierTrajectory.from_free(np.zeros(1), np.zeros((1, 1)), np.zeros((1, 1)), 0.0)
    with pytest.raises(ValueError, match=r"\(n, H\)"):
        FourierTrajectory(np.zeros(2), np.zeros((3, 2)), np.zeros((3, 2)), WF)
    with pytest.raises(ValueError, match="periods"):
        FourierTrajectory(np.zeros(1), np.zeros((1, 1)), np.zeros((1, 1)), WF, periods=0)


def test_complete_rest():
    rng = np.random.default_rng(5)
    a, b = complete_rest(rng.standard_normal((4, 3)), rng.standard_normal((4, 3)))
    assert a.shape == (4, 4)
    np.testing.assert_allclose(a.sum(1), 0, atol=1e-14)
    np.testing.assert_allclose((b * np.arange(1, 5)).sum(1), 0, atol=1e-14)


@pytest.mark.parametrize("suffix", [".yaml", ".npz"])
def test_save_load_roundtrip(tmp_path, suffix):
    tr = FourierTrajectory(**{**_random_traj(seed=2, n=3).__dict__,
                              "joint_names": ("a", "b", "c"), "meta": {"cond": 12.5}})
    p = tr.save(tmp_path / ("traj" + suffix), rate_hz=100.0)
    back = FourierTrajectory.load(p)
    np.testing.assert_array_equal(back.a, tr.a)
    np.testing.assert_array_equal(back.b, tr.b)
    np.testing.assert_array_equal(back.q0, tr.q0)
    assert back.wf == tr.wf and back.joint_names == ("a", "b", "c")
    assert back.meta["cond"] == 12.5
    if suffix == ".npz":
        with np.load(p) as z:
            assert z["q"].shape == (2001, 3)
            np.testing.assert_allclose(z["q"], tr.evaluate(z["t"])[0])


def test_load_errors_name_file_and_key(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("wf_rad_s: 0.3\nq0_rad: [0.0]\na_rad_s: [[0.0]]\n")
    with pytest.raises(ValueError, match=r"bad\.yaml.*b_rad_s"):
        FourierTrajectory.load(p)
    txt = tmp_path / "x.txt"
    txt.write_text("")
    with pytest.raises(ValueError, match=r"x\.txt.*file type"):
        FourierTrajectory.load(txt)
    with pytest.raises(FileNotFoundError):
        FourierTrajectory.load(tmp_path / "missing.yaml")


def test_sample_table():
    tr = _random_traj(n=2, H=3)
    tab = tr.sample(50.0)
    assert tab["t"][0] == 0 and tab["t"][-1] == pytest.approx(tr.period)
    assert tab["q"].shape == (1001, 2)
    ext = tr.extremes(4000)
    assert np.all(ext["q_max"] >= tab["q"].max(0) - 1e-3)


def test_grid_tightening_bounds_the_continuous_maximum():
    """Ehlich-Zeller (used by identify.excitation.optimizer): a degree-H trigonometric polynomial whose
    |value| <= cos(pi H / N) on N equispaced samples stays <= 1 over the whole period."""
    rng = np.random.default_rng(4)
    H, N = 5, 40
    t_grid = np.arange(N) / N * 20.0
    t_fine = np.arange(40 * N) / (40 * N) * 20.0
    ratios = []
    for _ in range(200):
        tr = _random_traj(seed=int(rng.integers(1 << 30)), n=1, H=H)
        for k in range(1, 3):  # velocity and acceleration (position has the offset as well)
            g = tr.evaluate(t_grid)[k][:, 0]
            f = tr.evaluate(t_fine)[k][:, 0]
            ratios.append(np.abs(f).max() / np.abs(g).max())
    assert max(ratios) * math.cos(math.pi * H / N) <= 1.0 + 1e-12
    assert max(ratios) > 1.0   # between samples the polynomials do exceed the grid maximum
