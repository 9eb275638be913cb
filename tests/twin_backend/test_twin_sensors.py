"""Sensor imperfections: statistics match the settings, seeding is bit-for-bit reproducible."""
import math

import numpy as np
import pytest

from twin.config import TwinSettings
from twin.sensors import SensorModel

NAMES = [f"joint{i}" for i in range(1, 7)]
N = 20000


def truth(seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(N) * 0.01
    return {"t": t, "q": rng.uniform(-3, 3, (N, 6)), "tau_r": rng.normal(0, 20, (N, 6)),
            "i_m": rng.normal(0, 2, (N, 6))}


def test_encoder_noise_and_quantization():
    step_bits = 16
    sigma = math.radians(0.005)
    sm = SensorModel({"encoder_noise_rad": sigma, "encoder_resolution_bits": step_bits}, NAMES, seed=3)
    tr = truth()
    q, _, _ = sm.sample(tr)
    lsb = 2 * math.pi / 2 ** step_bits
    counts = q / lsb
    np.testing.assert_allclose(counts, np.round(counts), atol=1e-6)      # on the encoder grid
    err = q - tr["q"]
    expected = math.sqrt(sigma ** 2 + lsb ** 2 / 12)                     # noise + quantization
    assert np.std(err) == pytest.approx(expected, rel=0.03)
    assert abs(np.mean(err)) < 4 * expected / math.sqrt(err.size)


def test_torque_sensor_noise_offset_drift():
    off = [0.1, -0.2, 0.3, 0.0, 0.05, -0.05]
    sm = SensorModel({"torque_noise_Nm": 0.2, "torque_offset_Nm": off, "torque_drift_Nm_s": 0.01},
                     NAMES, seed=4)
    tr = truth()
    _, tau, _ = sm.sample(tr)
    err = tau - tr["tau_r"] - 0.01 * tr["t"][:, None]
    np.testing.assert_allclose(err.mean(0), off, atol=4 * 0.2 / math.sqrt(N))
    np.testing.assert_allclose(err.std(0), 0.2, rtol=0.03)
    # the drift is a line in time: slope recovered from the data
    slope = np.polyfit(tr["t"], (tau - tr["tau_r"]).mean(1), 1)[0]
    assert slope == pytest.approx(0.01, rel=0.02)


def test_current_scale_bias_noise_quantization():
    sm = SensorModel({"current_noise_A": 0.05, "current_scale_error": 0.02, "current_bias_A": 0.1,
                      "current_quantization_A": 0.01}, NAMES, seed=5)
    tr = truth()
    _, _, i = sm.sample(tr)
    np.testing.assert_allclose(i / 0.01, np.round(i / 0.01), atol=1e-6)
    for j in range(6):
        A = np.column_stack([tr["i_m"][:, j], np.ones(N)])
        (gain, bias), res, *_ = np.linalg.lstsq(A, i[:, j], rcond=None)
        assert gain == pytest.approx(1.02, abs=2e-3)
        assert bias == pytest.approx(0.1, abs=4e-3)
        resid = i[:, j] - A @ [gain, bias]
        assert resid.std() == pytest.approx(math.sqrt(0.05 ** 2 + 0.01 ** 2 / 12), rel=0.03)


def test_drive_velocity_noise():
    tr = truth()
    sm = SensorModel({"velocity_noise_rad_s": 0.002}, NAMES, seed=9)
    qd = sm.sample_velocity(tr["tau_r"])
    np.testing.assert_allclose((qd - tr["tau_r"]).std(0), 0.002, rtol=0.03)
    assert np.array_equal(qd, SensorModel({"velocity_noise_rad_s": 0.002}, NAMES, seed=9).sample_velocity(tr["tau_r"]))


def test_seeding_bit_for_bit_and_independent_streams():
    tr = truth()
    a = SensorModel({}, NAMES, seed=7).sample(tr)
    b = SensorModel({}, NAMES, seed=7).sample(tr)
    c = SensorModel({}, NAMES, seed=8).sample(tr)
    for x, y, z in zip(a, b, c):
        assert np.array_equal(x, y)
        assert not np.array_equal(x, z)
    # streams are independent: encoder and torque errors uncorrelated
    q_err = (a[0] - tr["q"]).ravel()
    t_err = (a[1] - tr["tau_r"]).ravel()
    assert abs(np.corrcoef(q_err, t_err)[0, 1]) < 0.02


def test_noise_off_is_identity_and_settings_checked():
    tr = truth()
    q, tau, i = SensorModel({"noise": False}, NAMES, seed=1).sample(tr)
    assert np.array_equal(q, tr["q"]) and np.array_equal(tau, tr["tau_r"]) and np.array_equal(i, tr["i_m"])
    with pytest.raises(ValueError, match="unknown twin setting.*encoder_noise_deg"):
        SensorModel({"encoder_noise_deg": 0.01}, NAMES, seed=1)
    with pytest.raises(ValueError, match="torque_offset_Nm.*expected 1 or 6"):
        SensorModel({"torque_offset_Nm": [0.1, 0.2]}, NAMES, seed=1)
    with pytest.raises(ValueError, match=r"q has shape \(3, 6\)"):
        SensorModel({}, NAMES).sample({"t": np.zeros(4), "q": np.zeros((3, 6)), "tau_r": np.zeros((4, 6)),
                                       "i_m": np.zeros((4, 6))})
    assert "sample_rate_hz" in TwinSettings.keys()
