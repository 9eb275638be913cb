"""Unit tests (no root, no bus): configuration, PDO codec, unit conversions."""
import struct

import numpy as np
import pytest
import yaml

from robot.config import ConfigError, DEFAULT_CONFIG, load_config, parse_config
from robot.drive.pdo import PdoLayout, pack_sdo_value
from robot.drive.units import make_units


@pytest.fixture(scope="module")
def raw():
    return yaml.safe_load(DEFAULT_CONFIG.read_text())


@pytest.fixture(scope="module")
def cfg():
    return load_config()


def test_config_loads(cfg):
    assert cfg.n_drives == 6
    assert cfg.joint_names == [f"joint{k}" for k in range(1, 7)]
    assert cfg.vendor_id == 0xE1D and cfg.product_code == 0x00C0B060
    assert cfg.rx_entries[0].name == "controlword" and cfg.tx_entries[0].name == "statusword"
    assert cfg.bus.cycle_time_s == 0.001
    assert cfg.safety.torque_margin_frac == 0.25 and cfg.safety.torque_margin_coulomb == 1.0


@pytest.mark.parametrize("mutate, needle", [
    (lambda r: r.pop("identity"), "identity"),
    (lambda r: r["drives"][2].update(sign=2), "drives[2] (joint3).sign"),
    (lambda r: r["drives"][4].pop("rated_torque_Nm"), "drives[4] (joint5): missing key 'rated_torque_Nm'"),
    (lambda r: r["drives"][1].update(gear_ratio=-1), "drives[1] (joint2).gear_ratio must be > 0"),
    (lambda r: r["pdo"]["tx_entries"][1].update(type="F32"), "pdo.tx_entries[1].type"),
    (lambda r: r["pdo"]["rx_entries"].pop(0), "lacks required entry 'controlword'"),
    (lambda r: r["startup_sdo"][0].update(value=300), "startup_sdo[0].value=300 does not fit I8"),
    (lambda r: r["drives"].append(dict(r["drives"][0])), "drives[6].joint='joint1' appears twice"),
    (lambda r: r["safety"].update(torque_margin_frac=-0.1), "safety.torque_margin_frac must be >= 0"),
    (lambda r: r["safety"].update(torque_margin_coulomb="x"), "safety.torque_margin_coulomb must be a number"),
    (lambda r: r["drives"][3].update(station_alias=0), "drives[3] (joint4).station_alias must be 1..65535, got 0"),
    (lambda r: r["drives"][3].update(station_alias=70000), "drives[3] (joint4).station_alias must be 1..65535"),
])
def test_config_errors_name_key(raw, mutate, needle):
    import copy
    r = copy.deepcopy(raw)
    mutate(r)
    with pytest.raises(ConfigError) as e:
        parse_config(r, "cfg.yaml")
    assert needle in str(e.value) and "cfg.yaml" in str(e.value)


def test_pdo_layout_sizes_and_offsets_match_struct(cfg):
    lay = PdoLayout.from_config(cfg)
    fmt_rx = "<" + "".join({"U8": "B", "I8": "b", "U16": "H", "I16": "h", "U32": "I", "I32": "i"}[e.type]
                           for e in cfg.rx_entries)
    fmt_tx = "<" + "".join({"U8": "B", "I8": "b", "U16": "H", "I16": "h", "U32": "I", "I32": "i"}[e.type]
                           for e in cfg.tx_entries)
    assert lay.rx_size == struct.calcsize(fmt_rx) == 9
    assert lay.tx_size == struct.calcsize(fmt_tx) == 22
    # encode against struct (independent codec)
    out = lay.new_outputs(6)
    out["controlword"] = [0x0F, 0x06, 0x07, 0x00, 0x80, 0x0F]
    out["target_position"] = [-5, 2**31 - 1, -(2**31), 0, 123456, -1]
    out["torque_offset"] = [1, -1, 32767, -32768, 0, 5]
    out["modes_of_operation"] = 8
    enc = lay.encode(out)
    assert all(len(b) == lay.rx_size for b in enc)
    for k, b in enumerate(enc):
        assert struct.unpack(fmt_rx, b) == tuple(int(out[k][e.name]) for e in cfg.rx_entries)
    # decode a struct-packed input image
    rng = np.random.default_rng(0)
    vals = [[int(rng.integers(-100, 100)) if e.type[0] == "I" else int(rng.integers(0, 255))
             for e in cfg.tx_entries] for _ in range(6)]
    raw_in = [struct.pack(fmt_tx, *v) for v in vals]
    dec = lay.decode(raw_in)
    for k in range(6):
        assert [int(dec[k][e.name]) for e in cfg.tx_entries] == vals[k]
    assert lay.decode(b"".join(raw_in)).tobytes() == b"".join(raw_in)
    assert lay.decode_outputs(enc).tobytes() == out.tobytes()
    with pytest.raises(ValueError, match="not a multiple"):
        lay.decode(b"\0" * 23)


def test_pdo_validate_sizes_names_slave(cfg):
    lay = PdoLayout.from_config(cfg)
    lay.validate_sizes([9] * 6, [22] * 6)
    with pytest.raises(RuntimeError, match="slave 3: .* 9 output / 19 input bytes"):
        lay.validate_sizes([9] * 6, [22, 22, 19, 22, 22, 22])


def test_pdo_assignment_sdos(cfg):
    lay = PdoLayout.from_config(cfg)
    seq = lay.assignment_sdos()
    rx_words = [w for (i, s, d, ca) in seq if i == 0x1600 and s > 0 for w in struct.unpack("<I", d)]
    assert rx_words == [0x60400010, 0x607A0020, 0x60B20010, 0x60600008]
    assert (0x1C12, 1, struct.pack("<H", 0x1600), False) in seq
    assert seq[-1] == (0x1C13, 0, b"\x01", False)
    ca = lay.assignment_sdos(complete_access=True)
    assert ca[0][0] == 0x1600 and ca[0][2][:2] == b"\x04\x00" and ca[0][3]
    assert struct.unpack("<4I", ca[0][2][2:]) == tuple(rx_words)
    assert pack_sdo_value("I8", -3) == b"\xfd" and pack_sdo_value("U16", 0x1600) == b"\x00\x16"


def test_units_round_trip_and_closed_form(cfg):
    u = make_units(cfg)
    q = np.array([0.0, np.pi, -np.pi / 2, 1.0, -2.0, 6.0])
    c = u.position_counts(q)
    assert c[1] == 524288 and c[2] == -262144      # 2^20 counts per rev
    np.testing.assert_allclose(u.position(c), q, atol=np.pi / 2**20)
    # torque per mille of rated torque, current per mille of rated current
    pm = np.array([1000, -500, 250, 1, 0, -1000])
    np.testing.assert_allclose(u.motor_torque(pm), [70.0, -35.0, 10.0, 0.02, 0.0, -20.0])
    np.testing.assert_allclose(u.current(pm), [5.6, -2.8, 1.025, 0.0021, 0.0, -2.1])
    np.testing.assert_allclose(u.joint_torque(np.array([1500, 0, -1, 0, 0, 2])), [1.5, 0, -0.001, 0, 0, 0.002])
    np.testing.assert_allclose(u.torque_per_amp, [101 * 0.124] * 2 + [101 * 0.096] * 4)
    assert np.all(u.torque_permille(u.motor_torque(pm)) == pm)
    # vectorized over samples
    Q = np.stack([q, -q, 0.5 * q])
    np.testing.assert_allclose(u.position(u.position_counts(Q)), Q, atol=np.pi / 2**20)


def test_units_sign_and_order(raw):
    import copy
    r = copy.deepcopy(raw)
    r["drives"][1]["sign"] = -1
    r["drives"] = [r["drives"][k] for k in (5, 4, 3, 2, 1, 0)]   # bus order reversed
    cfg = parse_config(r, "rev.yaml")
    names = [f"joint{k}" for k in range(1, 7)]
    u = make_units(cfg, names)
    q = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    c = u.position_counts(q)                 # bus order: joint6 first
    per_rad = 2**20 / (2 * np.pi)
    assert c[0] == round(0.6 * per_rad) and c[4] == -round(0.2 * per_rad)
    np.testing.assert_allclose(u.position(c), q, atol=1e-5)
    assert u.motor_torque(np.array([0, 0, 0, 0, 1000, 0]))[1] == -70.0
    with pytest.raises(ValueError, match="no drive for \\['joint7'\\]"):
        make_units(cfg, names + ["joint7"])


def test_units_range_error_names_joint(cfg):
    u = make_units(cfg)
    q = np.zeros((3, 6))
    q[2, 4] = 1e5
    with pytest.raises(ValueError, match="joint joint5 at sample 2"):
        u.position_counts(q)
    with pytest.raises(ValueError, match="torque_offset .* joint joint1"):
        u.torque_permille(np.array([1e4, 0, 0, 0, 0, 0]))
