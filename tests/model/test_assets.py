"""The reference arm's asset files: URDF generated from the MDH table, physically consistent
inertia, plausible limits and drive parameters in the paper's ranges."""
import numpy as np
import pinocchio as pin
import yaml

from identify import RobotModel
from identify.model.arm import (REFERENCE_DESCRIPTION, REFERENCE_DRIVES, REFERENCE_URDF,
                          load_description)
from identify.model.spatial import inertial_from_params, pseudo_inertia


def test_urdf_fk_equals_mdh_fk():
    desc = load_description()
    pm = pin.buildModelFromUrdf(str(REFERENCE_URDF))
    pd = pm.createData()
    rng = np.random.default_rng(0)
    for _ in range(50):
        q = rng.uniform(-np.pi, np.pi, 6)
        pin.forwardKinematics(pm, pd, q)
        T_mdh = desc.mdh_transforms(q)
        for i in range(6):
            np.testing.assert_allclose(pd.oMi[i + 1].homogeneous, T_mdh[i], atol=1e-12)


def test_committed_urdf_is_what_the_generator_writes(tmp_path):
    out = load_description().write_urdf(tmp_path / "cobot6.urdf")
    assert out.read_text() == REFERENCE_URDF.read_text(), \
        "assets/cobot6.urdf is stale: run `python -m identify.model.arm assets/cobot6.yaml`"


def test_mdh_units_converted_once():
    desc = load_description()
    np.testing.assert_allclose(desc.d[0], 0.1223)
    np.testing.assert_allclose(desc.a[2:4], [-0.270, -0.253])
    np.testing.assert_allclose(desc.alpha[[1, 4, 5]], np.deg2rad([90, 90, -90]))


def test_upright_pose_is_upright():
    """Joints 2 and 4 at -90 deg put the arm upright (paper); prone at zero."""
    m = RobotModel.reference()
    up = m.link_origins(np.deg2rad([0, -90, 0, -90, 0, 0]))
    assert up[4, 2] > 0.6  # wrist well above the shoulder
    flat = m.link_origins(np.zeros(6))
    assert np.ptp(flat[2:4, 2]) < 1e-12  # prone: upper arm horizontal


def test_inertia_physically_consistent():
    m = RobotModel.reference()
    masses = m.params.reshape(6, 10)[:, 0]
    assert 12 < masses.sum() < 22  # a ~3 kg payload cobot of this size
    for i, p in enumerate(m.params.reshape(6, 10)):
        mass, c, I = inertial_from_params(p)
        assert mass > 0
        ev = np.linalg.eigvalsh(I)
        assert ev.min() > 0, f"link {i + 1}: inertia not positive definite"
        assert ev[0] + ev[1] >= ev[2] and ev[0] + ev[2] >= ev[1] and ev[1] + ev[2] >= ev[0]
        assert np.linalg.eigvalsh(pseudo_inertia(p)).min() > 0


def test_limits_plausible():
    m = RobotModel.reference()
    lim = m.limits
    assert np.all(lim.q_max > lim.q_min)
    assert np.all((lim.qd_max > 1.5) & (lim.qd_max < 5))
    assert np.all(np.isfinite(lim.qdd_max)) and np.all(lim.qdd_max > 5)
    assert np.all(lim.tau_max > 0)
    # the arm can hold itself horizontal (prone) against gravity within its torque limits
    g = m.inverse_dynamics(np.zeros(6), np.zeros(6), np.zeros(6))
    assert np.all(np.abs(g) < 0.8 * lim.tau_max), g


def test_drive_file_matches_paper_ranges():
    doc = yaml.safe_load(REFERENCE_DRIVES.read_text())
    joints = doc["joints"]
    assert [j["name"] for j in joints] == list(load_description().joint_names)
    for j in joints:
        eta = j["gear_ratio"]
        assert eta == 101
        assert 0.1 <= eta ** 2 * j["J_m_kgm2"] <= 0.6
        assert 0.3 <= j["xi_gf"] + j["xi_sf"] <= 0.8
        assert 0.8 <= j["motor_coulomb_Nm"] <= 1.9
        assert 2.7 <= j["motor_viscous_Nms_rad"] <= 7.9
        assert j["stiffness_Nm_rad"] > 0
    assert [j["torque_constant_Nm_A"] for j in joints] == [0.124, 0.124] + [0.096] * 4
    assert REFERENCE_DESCRIPTION.exists()
