"""Base parameters: count = numerical rank, torques reconstructed exactly from base parameters."""
import numpy as np
import pytest

from identify.model.base_params import compute_base_parameters, random_states
from identify.model.friction import full_regressor, joint_columns


@pytest.mark.parametrize("terms", [(), ("viscous", "coulomb"), ("viscous", "coulomb", "offset", "armature")])
def test_count_equals_numerical_rank(ref_model, terms):
    bp = compute_base_parameters(ref_model, terms=terms, seed=0)
    q, qd, qdd = random_states(ref_model, 400, np.random.default_rng(99))
    W = full_regressor(ref_model, q, qd, qdd, terms).reshape(-1, bp.n_full)
    # oracle: SVD rank of the unscaled stack with numpy's default tolerance, on other samples
    assert bp.n_base == np.linalg.matrix_rank(W)
    assert np.linalg.matrix_rank(bp.reduce(W)) == bp.n_base


def test_reference_arm_count_is_36(ref_model):
    assert compute_base_parameters(ref_model).n_base == 36  # stated in README


def test_base_reconstruction_equals_full_model(ref_model):
    bp = compute_base_parameters(ref_model, terms=("viscous", "coulomb", "armature"), seed=1)
    rng = np.random.default_rng(5)
    p_full = np.concatenate([ref_model.params, rng.uniform(0.1, 2, 3 * ref_model.n)])
    q, qd, qdd = random_states(ref_model, 300, rng)
    W = full_regressor(ref_model, q, qd, qdd, bp.terms)
    np.testing.assert_allclose(bp.reduce(W) @ bp.project(p_full), W @ p_full, rtol=1e-9, atol=1e-9)


def test_deterministic_for_seed(ref_model):
    a = compute_base_parameters(ref_model, seed=3)
    b = compute_base_parameters(ref_model, seed=3)
    assert a.names == b.names and np.array_equal(a.E, b.E)


def test_readable_grouping_matches_closed_form(ref_model):
    """Classic grouping with parallel joints 2-3 (a2 = -0.27 m): ZZ2 absorbs a2^2 * (m3+...+m6)."""
    bp = compute_base_parameters(ref_model)
    zz2 = next(n for n in bp.names if n.startswith("ZZ2"))
    assert zz2 == "ZZ2 + 0.0729*m3 + 0.0729*m4 + 0.0729*m5 + 0.0729*m6"
    assert bp.names[0].startswith("ZZ1 + YY2")
    assert "36" in bp.table().splitlines()[-1]


def test_joint_columns():
    qd = np.array([[0.5, -0.2, 0.0]])
    qdd = np.array([[1.0, 2.0, 3.0]])
    C = joint_columns(qd, qdd, ("viscous", "coulomb", "offset", "armature"))
    assert C.shape == (1, 3, 12)
    np.testing.assert_allclose(C[0].diagonal(), qd[0])
    np.testing.assert_allclose(C[0][:, 3:6].diagonal(), [1, -1, 0])
    np.testing.assert_allclose(C[0][:, 6:9].diagonal(), 1)
    np.testing.assert_allclose(C[0][:, 9:12].diagonal(), qdd[0])
    smooth = joint_columns(qd, qdd, ("coulomb",), coulomb_eps=0.01)
    np.testing.assert_allclose(smooth[0].diagonal(), np.tanh(qd[0] / 0.01))
    with pytest.raises(ValueError, match="unknown joint term"):
        joint_columns(qd, qdd, ("stiction",))
