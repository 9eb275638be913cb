"""Guards that refuse only what is wrong (issue 21, item 5): the unit guard and a friction-
dominated joint; processing.delay: auto at the edge of its search range."""
from types import SimpleNamespace

import numpy as np
import pytest

from identify.estimation.delay import estimate_delay
from identify.logs.guards import check_torque
from identify.logs.readers import LogError
from identify.logs.simulate import _motion
from identify.model.base_params import compute_base_parameters
from identify.model.robot_model import RobotModel

from conftest import ROOT


@pytest.fixture(scope="module")
def arm():
    model = RobotModel.from_urdf(str(ROOT / "assets" / "cobot6.urdf"))
    t = np.arange(2000) / 100.0
    q, qd, qdd = _motion(model, t, np.random.default_rng(2))
    z = np.zeros_like(q)
    return model, t, q, qd, qdd, model.inverse_dynamics(q, z, z)


def test_friction_dominated_wrists_are_not_refused_wrong_gains_are(arm):
    model, t, q, qd, qdd, grav = arm
    wrists = [3, 4, 5]
    grav = grav.copy()
    grav[:, wrists] *= 0.01          # wrists near their balanced pose: little gravity torque
    r = np.sqrt(np.mean(grav ** 2, axis=0))
    tau = grav.copy()
    eff = np.asarray(model.limits.tau_max, float)
    # friction 5 % of the effort limit on the wrists: 50x their gravity torque and more
    tau[:, wrists] += 0.05 * eff[wrists] * np.tanh(qd[:, wrists] / 0.02)
    ratios = np.sqrt(np.mean(tau ** 2, axis=0)) / r
    assert np.sum(ratios > 50) >= 3          # the old rule refused this log
    warnings = []
    check_torque(tau, grav, model, "log.csv", from_currents=True, warnings=warnings)
    assert warnings == []
    with pytest.raises(LogError, match="current_gains"):      # currents read as mA
        check_torque(tau * 1000, grav, model, "log.csv", from_currents=True)
    with pytest.raises(LogError, match="0.0099x the rigid-body"):  # gains motor side
        check_torque(tau / 101, grav, model, "log.csv", from_currents=True)
    one = tau.copy()
    one[:, 1] /= 101                           # one joint's gain wrong, the others agree
    check_torque(one, grav, model, "log.csv", from_currents=True, warnings=warnings)
    assert len(warnings) == 1 and "joint2" in warnings[0]


def test_delay_at_the_edge_of_the_search_is_named_and_not_an_estimate(arm):
    model, t, q, qd, qdd, grav = arm
    base = compute_base_parameters(model, terms=(), seed=0)
    W = base.reduce(model.regressor(q, qd, qdd))
    tau = model.inverse_dynamics(q, qd, qdd)
    d = SimpleNamespace(tau_m=tau, rate_hz=100.0, fit_mask=None)
    inside = estimate_delay(d, W, channel="tau_m", max_delay_s=0.05)
    assert abs(inside.delay_s) < 1e-3 and inside.edge_message("excitation") is None
    late = np.vstack([tau[:1].repeat(8, 0), tau[:-8]])        # 80 ms late, searched +-30 ms
    d.tau_m = late
    est = estimate_delay(d, W, channel="tau_m", max_delay_s=0.03)
    msg = est.edge_message("excitation")
    assert est.at_edge and msg is not None
    assert "tau_m" in msg and "excitation" in msg and "not compensated" in msg
