"""Compiled functions of the twin, built once per process: the 1 kHz step and the matrix build
(:mod:`twin.step_graph`, compiled to C by identify.model.regressor.compile_function and cached on disk),
and the arm's regressor used for the compiled bias h(q, v) after checking it against PyBullet."""
from __future__ import annotations

import numpy as np

from identify.model.regressor import build_bias, compile_function

from . import step_graph

#: compiled functions, keyed by (kind, n, flags...)
_COMPILED: dict = {}
#: regressors per arm geometry (placements, axes, gravity)
_REGRESSORS: dict = {}

#: largest relative difference between the regressor's bias and PyBullet's accepted
BIAS_RTOL = 1e-9


class _Regressor:
    """An arm's bias h(q, v, theta) by recursive Newton-Euler (:func:`identify.model.regressor.build_bias`,
    what the compiled step evaluates) and a batch evaluator of it (for the check against
    PyBullet)."""

    def __init__(self, model):
        from identify.model.regressor import BatchEvaluator
        self.f = build_bias(model.placements, model.axes, model.gravity)
        self.h = BatchEvaluator(self.f)


def compiled(kind: str, n: int, *flags):
    """The compiled step ("step", n, drive model, position loop, backlash, regressor key) or
    matrix build ("matrices", n); the generated C is cached on disk by
    identify.model.regressor.compile_function."""
    key = (kind, n) + flags
    f = _COMPILED.get(key)
    if f is None:
        if kind == "step":
            enabled, position_control, backlash, reg_key = flags
            f = step_graph.step_function(
                n, enabled=enabled, position_control=position_control, backlash=backlash,
                regressor=None if reg_key is None else _REGRESSORS[reg_key].f)
        else:
            f = step_graph.matrices_function(n)
        f = _COMPILED[key] = compile_function(f)
    return f


def gravity(cfg) -> tuple:
    """World gravity [m/s^2] of a TwinConfig (TwinConfig.gravity)."""
    return tuple(float(x) for x in cfg.gravity)


def model_bias(urdf: str, cfg, bias, rtol: float = BIAS_RTOL):
    """(theta, key) of the arm's model when its bias h(q, v, theta) (recursive Newton-Euler on the
    geometry and standard parameters theta read by identify.model.RobotModel) matches
    `bias(q, v)` (PyBullet's calculateInverseDynamics) to relative `rtol` at seeded random states
    inside the joint limits, else (None, None). theta: standard parameters (10n,); key: the
    regressor's cache key for :func:`compiled`."""
    from identify.model import RobotModel
    n = cfg.n
    try:
        model = RobotModel.from_urdf(urdf, cfg.joint_names, gravity=gravity(cfg))
    except Exception:                     # noqa: BLE001 -- any failure: use PyBullet's h
        return None, None
    key = (model.placements.tobytes(), model.axes.tobytes(), model.gravity.tobytes())
    reg = _REGRESSORS.get(key)
    if reg is None:
        reg = _REGRESSORS[key] = _Regressor(model)
    rng = np.random.default_rng(0)
    lo = np.where(np.isfinite(cfg.q_min), cfg.q_min, -np.pi)
    hi = np.where(np.isfinite(cfg.q_max), cfg.q_max, np.pi)
    q = rng.uniform(lo, hi, (4, n))
    v = rng.uniform(-2.0, 2.0, (4, n))
    h_model = reg.h(q, v, np.broadcast_to(model.params, (len(q), model.params.size)))[:, :, 0]
    h_pb = np.array([bias(q[k], v[k]) for k in range(len(q))])
    scale = np.maximum(np.abs(h_pb).max(axis=1, keepdims=True), 1.0)
    if not np.all(np.abs(h_model - h_pb) <= rtol * scale):
        return None, None
    return model.params.copy(), key
