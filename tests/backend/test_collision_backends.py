"""Both backends refuse a trajectory that collides (PyBullet check on the URDF's shapes, before
anything runs), naming the pair and the time; the same motion with less amplitude runs."""
from __future__ import annotations

import pytest

from identify import RobotModel
from identify.backend.clearance import CollisionRefused

from test_collision import folding_trajectory
from test_twin_helpers import ARM


@pytest.fixture(scope="module")
def model():
    return RobotModel.reference()


def test_twin_backend_refuses_colliding_trajectory(model):
    from twin import make_backend
    be = make_backend(ARM, {"settle_s": 0.1, "sample_rate_hz": 100})
    with pytest.raises(CollisionRefused, match=r"link\d / link\d at t = [\d.]+ s.*nothing was run"):
        be.run(folding_trajectory(model, 1.0, period=20.0))
    assert be.sim is None                       # refused before the simulator was built


def test_hardware_backend_refuses_colliding_trajectory(model):
    from robot.backend import HardwareBackend
    be = HardwareBackend({}, {"dry_run": True, "record_rate_hz": 100})
    with pytest.raises(CollisionRefused, match=r"link\d / link\d at t = [\d.]+ s"):
        be.run(folding_trajectory(model, 1.0, period=20.0))
    rec = be.run(folding_trajectory(model, 0.3, period=20.0))      # offline dry run: checked only
    assert rec.meta["dry_run"]
