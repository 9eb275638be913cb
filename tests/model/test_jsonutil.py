"""identify.common.jsonutil.to_jsonable, and the files that use it (recording header, trajectory meta)."""
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from identify.excitation.fourier import FourierTrajectory
from identify.common.jsonutil import to_jsonable
from identify.backend.recording import Recording


@dataclass
class _Limits:
    q_max: np.ndarray
    name: str = "arm"


def _sample():
    return {"f32": np.float32(0.5), "i64": np.int64(-3), "b": np.bool_(True), "py": 2,
            "flag": False, "none": None, "path": Path("/tmp/x.yaml"),
            "arr": np.arange(6, dtype=np.int32).reshape(2, 3), "tup": (1, np.float64(2.5)),
            "nested": {3: [np.array([1.0, np.nan]), {"inf": np.inf}]},
            "dc": _Limits(q_max=np.array([1.0, -np.inf])), "minus": -math.inf}


def test_converts_to_strict_json_with_nonfinite_as_null():
    out = to_jsonable(_sample())
    text = json.dumps(out, allow_nan=False)                    # strict JSON: no NaN/Infinity
    assert json.loads(text) == out
    assert out == {"f32": 0.5, "i64": -3, "b": True, "py": 2, "flag": False, "none": None,
                   "path": "/tmp/x.yaml", "arr": [[0, 1, 2], [3, 4, 5]], "tup": [1, 2.5],
                   "nested": {"3": [[1.0, None], {"inf": None}]},
                   "dc": {"q_max": [1.0, None], "name": "arm"}, "minus": None}
    assert type(out["b"]) is bool and type(out["i64"]) is int and type(out["f32"]) is float
    assert yaml.safe_load(yaml.safe_dump(out)) == out          # YAML-safe too


def test_keep_mode_round_trips_nonfinite_through_yaml_and_python_json():
    out = to_jsonable(_sample(), nonfinite="keep")
    assert math.isnan(out["nested"]["3"][0][1]) and out["nested"]["3"][1]["inf"] == math.inf
    assert out["dc"]["q_max"] == [1.0, -math.inf] and out["minus"] == -math.inf
    for back in (json.loads(json.dumps(out)), yaml.safe_load(yaml.safe_dump(out))):
        assert back["dc"]["q_max"] == [1.0, -math.inf]
        assert math.isnan(back["nested"]["3"][0][1])


def test_does_not_modify_the_input_and_names_the_bad_value():
    d = {"a": np.array([np.nan])}
    to_jsonable(d)
    assert isinstance(d["a"], np.ndarray) and np.isnan(d["a"][0])
    with pytest.raises(TypeError, match=r"meta\['settings'\]\['gains'\]\[1\]: value of type "
                                        r"complex"):
        to_jsonable({"settings": {"gains": [1.0, 2j]}}, where="meta")
    with pytest.raises(TypeError, match=r"value\.x: value of type set"):
        @dataclass
        class Bad:
            x: set
        to_jsonable(Bad({1}))
    with pytest.raises(TypeError, match="dtype complex128"):
        to_jsonable(np.array([1j]))
    with pytest.raises(ValueError, match="nonfinite"):
        to_jsonable(1.0, nonfinite="string")


def test_recording_and_trajectory_files_use_it(tmp_path):
    meta = {"limits": {"q_max": np.array([1.0, np.inf])}, "gain": np.float64(2.5),
            "file": Path("a/b.urdf"), "seed": np.int64(4), "ok": np.bool_(True)}
    rec = Recording(t=np.arange(4) / 100.0, q=np.zeros((4, 2)), rate_hz=100.0,
                    joint_names=["j1", "j2"], meta=meta)
    back = Recording.load(rec.save(tmp_path / "r.npz"))
    assert back.meta == {"limits": {"q_max": [1.0, math.inf]}, "gain": 2.5, "file": "a/b.urdf",
                         "seed": 4, "ok": True}
    with pytest.raises(TypeError, match=r"recording header\['meta'\]\['obj'\]"):
        Recording(t=rec.t, q=rec.q, rate_hz=100.0, joint_names=["j1", "j2"],
                  meta={"obj": object()}).save(tmp_path / "bad.npz")
    assert not (tmp_path / "bad.npz").exists()
    tr = FourierTrajectory.from_free(np.zeros(2), np.full((2, 2), 0.1), np.full((2, 2), 0.1), 1.0,
                                     meta=meta)
    for name in ("t.yaml", "t.npz"):
        back = FourierTrajectory.load(tr.save(tmp_path / name))
        assert back.meta == {"limits": {"q_max": [1.0, math.inf]}, "gain": 2.5,
                             "file": "a/b.urdf", "seed": 4, "ok": True}
