"""twin.config: settings refuse NaN/inf/wrong types, payloads must be physical, drive
parameters come from the one loader (identify.model.drives)."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from identify.model.drives import load_drives
from twin.config import DriveParams, TwinConfig, TwinSettings

ROOT = Path(__file__).resolve().parents[2]
URDF = ROOT / "assets" / "cobot6.urdf"
DRIVES = ROOT / "assets" / "cobot6_drives.yaml"


@pytest.mark.parametrize("d,frag", [
    ({"friction_drift": math.nan}, "friction_drift=nan: must be finite"),
    ({"current_scale_error": math.nan}, "current_scale_error=nan: must be finite"),
    ({"current_scale_error": [0, 0, math.nan, 0, 0, 0]}, "current_scale_error"),
    ({"io_delay_s": math.nan}, "io_delay_s=nan: must be finite"),
    ({"settle_s": math.inf}, "settle_s=inf: must be finite"),
    ({"seed": 1.5}, "seed=1.5: must be an integer"),
    ({"seed": True}, "seed=True"),
    ({"sample_rate_hz": -100}, "sample_rate_hz=-100: must be > 0"),
    ({"sample_rate_hz": 300}, "must divide the 1000 Hz"),
    ({"backlash_rad": math.nan}, "backlash_rad=nan: must be finite"),
    ({"torque_noise_Nm": -0.1}, "torque_noise_Nm must be >= 0"),
    ({"stribeck": "yes"}, "stribeck='yes': must be true or false"),
    ({"pid_kp": [1, 2, math.inf, 4, 5, 6]}, "pid_kp"),
    ({"torque_limit_scale": 0}, "torque_limit_scale=0: must be > 0"),
])
def test_settings_refuse_nan_inf_and_wrong_types(d, frag):
    with pytest.raises(ValueError) as ei:
        TwinSettings.from_dict(d)
    assert frag in str(ei.value), str(ei.value)


def test_defaults_and_valid_values_pass():
    s = TwinSettings.from_dict({})
    assert s.seed == 0 and s.sample_rate_hz == 100.0
    TwinSettings.from_dict({"seed": np.int64(3), "sample_rate_hz": 500, "pid_kp": None,
                            "torque_limit_scale": None, "coulomb_asymmetry": [0.1] * 6,
                            "friction_drift": -0.3, "encoder_resolution_bits": None})


@pytest.mark.parametrize("payload,frag", [
    ({"mass_kg": 2.0, "inertia_kgm2": [-1, 0, 0, 0, 0, 0]}, "not positive definite"),
    ({"mass_kg": 2.0, "inertia_kgm2": [0.01, 0.01, 0.05, 0, 0, 0]}, "triangle inequality"),
    ({"mass_kg": 2.0, "inertia_kgm2": [0.01, 0.01, 0.01, 0.02, 0, 0]}, "not positive definite"),
    ({"mass_kg": math.nan}, "mass_kg must be > 0"),
    ({"mass_kg": 1.0, "com_m": [0, math.inf, 0]}, "com_m"),
])
def test_impossible_payload_refused(payload, frag):
    with pytest.raises(ValueError) as ei:
        TwinConfig.from_files(URDF, DRIVES, payload=payload)
    assert frag in str(ei.value), str(ei.value)


def test_physical_payloads_accepted():
    # a solid box 0.1 x 0.2 x 0.3 m of 2 kg (closed form), rotated: still physical
    m, a, b, c = 2.0, 0.1, 0.2, 0.3
    I = np.diag([m * (b * b + c * c), m * (a * a + c * c), m * (a * a + b * b)]) / 12
    R = np.array([[0.6, -0.8, 0], [0.8, 0.6, 0], [0, 0, 1.0]])
    Ir = R @ I @ R.T
    pl = {"mass_kg": m, "com_m": [0, 0, 0.05],
          "inertia_kgm2": [Ir[0, 0], Ir[1, 1], Ir[2, 2], Ir[0, 1], Ir[0, 2], Ir[1, 2]]}
    assert TwinConfig.from_files(URDF, DRIVES, payload=pl).payload["mass_kg"] == m
    assert TwinConfig.from_files(URDF, DRIVES, payload={"mass_kg": 1.0}).payload is not None  # point mass


def test_drive_params_come_from_the_shared_loader():
    names = [f"joint{i}" for i in range(1, 7)]
    ov = {"joint3": {"link_viscous_Nms_rad": 0.5}}
    d = DriveParams.from_yaml(DRIVES, names, ov)
    ref = load_drives(DRIVES, names, ov)
    raw = yaml.safe_load(DRIVES.read_text())["joints"]
    np.testing.assert_array_equal(d.J_r, [j["gear_ratio"] ** 2 * j["J_m_kgm2"] for j in raw])
    np.testing.assert_array_equal(d.xi, ref.array("xi"))
    assert d.link_viscous[2] == 0.5 and d.link_viscous[1] == raw[1]["link_viscous_Nms_rad"]
    cfg = TwinConfig.from_files(URDF, DRIVES, overrides={"joint4": {"xi_gf": 0.5}})
    assert cfg.drives.xi[3] == pytest.approx(0.5 + raw[3]["xi_sf"])
    with pytest.raises(ValueError, match=r"drive_overrides\['joint4'\]: key 'xi_gf': xi_gf \+ xi_sf"):
        TwinConfig.from_files(URDF, DRIVES, overrides={"joint4": {"xi_gf": 0.95}})
