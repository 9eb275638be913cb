"""identification.friction: auto -- the per-joint term sets chosen by blocked cross-validation
(identify.estimation.selection.select_friction) on synthetic logs whose friction laws are known:
the terms that are there are found, and no others."""
from types import SimpleNamespace

import numpy as np
import pytest

from identify.estimation.selection import predict_selected, select_friction
from identify.logs.simulate import _motion
from identify.model.base_params import compute_base_parameters
from identify.model.friction import Term, term_columns
from identify.model.robot_model import RobotModel

from conftest import ROOT

RATE = 200.0

#: per joint the true law: [(Term, coefficients)]
TRUTH = [
    [(Term("viscous"), [0.8]), (Term("coulomb", eps=0.02), [1.5])],
    [(Term("viscous"), [2.0]), (Term("coulomb", eps=0.02), [1.0]), (Term("offset"), [0.6]),
     (Term("load_coulomb_4q", eps=0.02), [0.05, 0.12])],
    [(Term("viscous"), [0.6]), (Term("dahl", xs=3e-4), [0.8])],
    [(Term("viscous"), [0.3]), (Term("coulomb", eps=0.0), [0.4]),
     (Term("stribeck", eps=0.0, vs=0.3), [0.3])],
    [(Term("quad_viscous"), [0.4]), (Term("coulomb", eps=0.02), [0.3])],
    [(Term("viscous"), [0.1]), (Term("coulomb", eps=0.02), [0.15]), (Term("offset"), [0.05])],
]


@pytest.fixture(scope="module")
def case():
    model = RobotModel.from_urdf(str(ROOT / "assets" / "cobot6.urdf"))
    rng = np.random.default_rng(7)
    t = np.arange(int(40 * RATE)) / RATE
    q, qd, qdd = _motion(model, t, rng, harmonics=5, period=20.0)
    rigid = model.inverse_dynamics(q, qd, qdd)
    tau = rigid.copy()
    for j, law in enumerate(TRUTH):
        for term, c in law:
            tau[:, j] += term_columns(term, qd[:, j], qdd[:, j], dt=1 / RATE,
                                      tau_load=rigid[:, j]) @ np.asarray(c)
    y = tau + 0.02 * rng.normal(size=tau.shape)
    d = SimpleNamespace(t=t, q=q, qd=qd, qdd=qdd, rate_hz=RATE, filter_chain=None)
    base = compute_base_parameters(model, terms=(), seed=0)
    Wb = base.reduce(model.regressor(q, qd, qdd))
    return model, d, Wb, y, tau


def test_auto_finds_the_terms_that_are_there_and_no_others(case):
    model, d, Wb, y, tau = case
    sel = select_friction(Wb, d, y, joint_names=model.joint_names)
    for j, law in enumerate(TRUTH):
        assert sorted(t.label for t in sel.joint_terms[j]) == sorted(t.label for t, _ in law), \
            (j, sel.choices[j].to_dict())
    pred = predict_selected(sel, Wb, d)
    rms = np.sqrt(np.mean((pred - tau) ** 2, axis=0))      # against the noise-free torque
    assert np.all(rms < 0.01), rms
