"""The pre-move motor-torque check of the hardware backend (robot.torque_bound, robot.backend):
payload on the last link, friction, harmonic-drive loss, rotor inertia.

Independent truth: the twin (PyBullet arm with compliant harmonic-drive joints, its own friction
and reducer-loss laws, a 1 kHz position loop) run on the same commanded motion with the same
payload -- its ``Recording.truth['tau_m']`` is the motor torque the drives really deliver -- and
Pinocchio for the payload's rigid-body torque.
"""
from pathlib import Path

import numpy as np
import pytest

from identify import RobotModel
from robot.backend import HardwareBackend
from robot.safety import SafetyRefused, check_trajectory
from robot.torque_bound import TorqueBound, payload_params
from test_twin_helpers import ARM, CosineTrajectory, excitation

ROOT = Path(__file__).resolve().parents[2]
PAYLOAD3 = {"mass_kg": 3.0, "com_m": [0.01, -0.01, 0.06],
            "inertia_kgm2": [0.006, 0.005, 0.004, 0.0002, -0.0001, 0.0001]}


def twin_truth(traj, payload):
    """True motor torque (N, 6) [N*m] of the twin at 1 kHz on `traj` with `payload`, and t."""
    from twin import make_backend
    rec = make_backend({**ARM, "payload": payload},
                       {"seed": 3, "settle_s": 0.3, "sample_rate_hz": 1000}).run(traj)
    return rec.t, rec.truth["tau_m"]


def dry_backend(payload):
    return HardwareBackend({"urdf": ARM["urdf"], "drives": ARM["drives"], "payload": payload},
                           {"dry_run": True})


@pytest.mark.parametrize("payload", [None, PAYLOAD3], ids=["bare", "payload3kg"])
def test_bound_covers_twin_motor_torque(payload):
    """At every 1 ms sample of a fast multi-joint motion (velocity reversals, accelerations near
    the arm's limits) the bound evaluated on the COMMAND is >= the twin's true |motor torque|,
    without being vacuous (its peak within 1.45x of the true peak)."""
    tr = excitation(4.0)
    t, tau_m = twin_truth(tr, payload)
    be = dry_backend(payload)
    B = be.motor_torque_bound(*tr.evaluate(t))
    over = np.abs(tau_m) - B
    k, j = np.unravel_index(np.argmax(over), over.shape)
    assert over.max() <= 0, f"true motor torque above the bound at joint{j + 1}, t={t[k]:.3f} s: " \
                            f"{tau_m[k, j]:.3f} vs {B[k, j]:.3f} N*m"
    peak_true, peak_b = np.abs(tau_m).max(0), B.max(0)
    assert np.all(peak_b <= 1.45 * peak_true + 2.5), (peak_b, peak_true)
    if payload is not None:
        # the check before this fix (rigid-body torque of the BARE arm) misses the payload and the
        # reducer loss: the twin's motor torque on joint 2 is far above it
        bare = np.abs(RobotModel.reference().inverse_dynamics(*tr.evaluate(t)))
        assert np.abs(tau_m[:, 1]).max() > 1.5 * bare[:, 1].max()


def test_payload_pushing_joint2_over_its_limit_is_refused():
    """The arm lying flat (theta = 0) lifts slowly on joint 2. Bare: accepted, and the twin's motor
    torque stays under the limit. With a 5 kg payload on the flange: refused before anything moves,
    naming joint 2 and the sample -- and the twin confirms joint 2's motor torque would exceed its
    limit (the bare-arm rigid-body check used before accepted it)."""
    tr = CosineTrajectory(np.zeros(6), -np.radians([0, 25, 0, 0, 0, 0]), [0.25] * 6, 4.0)
    tau_max = RobotModel.reference().limits.tau_max
    heavy = {"mass_kg": 5.0, "com_m": [0.0, 0.0, 0.05], "inertia_kgm2": [0.01, 0.01, 0.01, 0, 0, 0]}

    ok = dry_backend(None)
    use = ok.check(tr)
    assert use["tau"][1] < 1
    _, tau_bare = twin_truth(tr, None)
    assert np.abs(tau_bare).max(0)[1] < tau_max[1]

    be = dry_backend(heavy)
    with pytest.raises(SafetyRefused, match=r"motor torque bound .* at joint joint2, sample 0 ") as e:
        be.check(tr)
    assert "trajectory" in str(e.value)
    with pytest.raises(SafetyRefused, match="joint2"):
        be.run(tr)                                   # the offline dry run refuses too
    _, tau_heavy = twin_truth(tr, heavy)
    assert np.abs(tau_heavy[:, 1]).max() > tau_max[1]          # the oracle: it WOULD exceed
    # the old check (rigid body, bare arm, no friction / reducer loss) let it through
    t = np.arange(4000) * 1e-3
    check_trajectory(t, *tr.evaluate(t), ok.limits, list(ok.full.joint_names),
                     model=RobotModel.reference())


def test_payload_rigid_body_matches_pinocchio():
    """The payload joins the last link (flange frame, inertia about its CoM): the backend's model
    equals Pinocchio's RNEA with the payload's Inertia appended to the last joint's body."""
    pin = pytest.importorskip("pinocchio")
    be = dry_backend(PAYLOAD3)
    pm = pin.buildModelFromUrdf(str(ROOT / "assets" / "cobot6.urdf"))
    Ixx, Iyy, Izz, Ixy, Ixz, Iyz = PAYLOAD3["inertia_kgm2"]
    I_c = np.array([[Ixx, Ixy, Ixz], [Ixy, Iyy, Iyz], [Ixz, Iyz, Izz]])
    pm.inertias[pm.njoints - 1] = pm.inertias[pm.njoints - 1] + pin.Inertia(
        PAYLOAD3["mass_kg"], np.array(PAYLOAD3["com_m"]), I_c)
    pd = pm.createData()
    rng = np.random.default_rng(5)
    q, qd, qdd = (rng.uniform(-2, 2, (8, 6)) for _ in range(3))
    ref = np.array([pin.rnea(pm, pd, q[k], qd[k], qdd[k]) for k in range(8)])
    np.testing.assert_allclose(be.full.inverse_dynamics(q, qd, qdd), ref, atol=1e-9)


def test_bound_closed_form_and_drive_file_terms():
    """Closed form per joint: (|tau_l| + f_lc + f_lv|qd|)/(1 - xi) + f_mc + f_mv|qd| + J_r|qdd|,
    then (1 + frac) * that + coulomb * (f_mc + f_lc/(1 - xi)); values from the drive file."""
    import yaml
    m = RobotModel.reference()
    tb = TorqueBound.from_files(m, ARM["drives"], margin_frac=0.25, margin_coulomb=1.0)
    raw = {e["name"]: e for e in yaml.safe_load(Path(ARM["drives"]).read_text())["joints"]}
    g = lambda k: np.array([raw[j][k] for j in m.joint_names], float)   # noqa: E731
    xi = g("xi_gf") + g("xi_sf")
    q = np.array([[0.1, -1.0, 0.5, -1.2, 0.3, 0.2]])
    qd = np.array([[0.5, -0.4, 0.3, -1.0, 2.0, 0.0]])
    qdd = np.array([[-2.0, 1.0, 3.0, 0.0, -4.0, 1.0]])
    tau = m.inverse_dynamics(q, qd, qdd)
    nom = ((np.abs(tau) + g("link_coulomb_Nm") + g("link_viscous_Nms_rad") * np.abs(qd)) / (1 - xi)
           + g("motor_coulomb_Nm") + g("motor_viscous_Nms_rad") * np.abs(qd)
           + g("gear_ratio") ** 2 * g("J_m_kgm2") * np.abs(qdd))
    np.testing.assert_allclose(tb.nominal(q, qd, qdd), nom, rtol=1e-12)
    np.testing.assert_allclose(tb(q, qd, qdd),
                               1.25 * nom + g("motor_coulomb_Nm") + g("link_coulomb_Nm") / (1 - xi),
                               rtol=1e-12)


@pytest.mark.parametrize("payload, needle", [
    ({"mass_kg": 0.0}, "arm.payload.mass_kg must be > 0"),
    ({"com_m": [0, 0, 0.1]}, "arm.payload.mass_kg is required"),
    ({"mass_kg": 1.0, "com_m": [0, 0]}, "arm.payload.com_m must be 3"),
    ({"mass_kg": 1.0, "inertia_kgm2": [1, 1, 1, 0, 0, "x"]}, "arm.payload.inertia_kgm2"),
    ({"mass_kg": 1.0, "inertia_kgm2": [-1, 1, 1, 0, 0, 0]}, "not positive semi-definite"),
    ({"mass_kg": 1.0, "colour": "red"}, "unknown key"),
])
def test_bad_payload_names_key(payload, needle):
    with pytest.raises(ValueError, match=needle):
        payload_params(payload)
    with pytest.raises(ValueError, match=needle):
        dry_backend(payload)


def test_missing_drive_file_refused(tmp_path):
    """No drive file -> no friction / reducer-loss bound -> refused, naming arm.drives."""
    urdf = tmp_path / "arm.urdf"
    urdf.write_text(Path(ARM["urdf"]).read_text())
    with pytest.raises(SafetyRefused, match="arm.drives"):
        HardwareBackend({"urdf": str(urdf)}, {"dry_run": True})
    with pytest.raises(FileNotFoundError, match="nope.yaml"):
        HardwareBackend({"urdf": str(urdf), "drives": str(tmp_path / "nope.yaml")}, {"dry_run": True})
