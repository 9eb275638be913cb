"""rosbag2 logs (identify.logs.rosbag) written by the reader library's own writer (rosbags,
sqlite3 and MCAP storage) and read back.

The truth is the arrays written: joints in shuffled name order per message, two topics at
different rates merged (linear functions of time are interpolated exactly; a sinusoid within
the linear-interpolation bound h^2/8 max|f''|), header stamps vs receive time, messages out of
order. Hostile bags each raise a LogError naming the topic / message / joint at fault. The
end-to-end proof: a twin recording written to a bag and fitted by `twinid fit` gives the same
parameters as the recording itself.
"""
from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from rosbags.rosbag2 import StoragePlugin, Writer      # the test extra pins rosbags
from rosbags.typesys import Stores, get_typestore

from identify.app.cli import main
from identify.logs.load import LogError, load_log
from identify.scenario.load import scenario_from_dict
from identify.scenario.spec import LogSpec, ScenarioError, TopicMap
from test_logs import TINY, twin_recordings  # noqa: F401 -- the same twin recordings

TS = get_typestore(Stores.ROS2_HUMBLE)
JS = TS.types["sensor_msgs/msg/JointState"]
HEADER = TS.types["std_msgs/msg/Header"]
TIME = TS.types["builtin_interfaces/msg/Time"]
EPOCH_NS = 1_764_000_000 * 10**9          # stamps as a robot's clock gives them (2025)
NAMES = ["shoulder", "elbow", "wrist"]
STORAGE = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}


def _msg(stamp_ns: int, names, pos=(), vel=(), eff=()):
    return JS(header=HEADER(stamp=TIME(sec=stamp_ns // 10**9, nanosec=stamp_ns % 10**9),
                            frame_id=""),
              name=list(names), position=np.ascontiguousarray(pos, float),
              velocity=np.ascontiguousarray(vel, float), effort=np.ascontiguousarray(eff, float))


def write_bag(path: Path, topics: dict, storage: str = "mcap", other: dict | None = None) -> Path:
    """A rosbag2 at `path` written by rosbags' Writer: `topics` {name: [(receive_ns, JointState),
    ...]} in that order (an empty list: a topic without messages), `other` {name: (msgtype,
    [(receive_ns, message), ...])} topics of other types."""
    with Writer(path, version=9, storage_plugin=STORAGE[storage]) as w:
        for topic, msgs in topics.items():
            conn = w.add_connection(topic, JS.__msgtype__, typestore=TS)
            for recv, m in msgs:
                w.write(conn, recv, TS.serialize_cdr(m, JS.__msgtype__))
        for topic, (msgtype, msgs) in (other or {}).items():
            conn = w.add_connection(topic, msgtype, typestore=TS)
            for recv, m in msgs:
                w.write(conn, recv, TS.serialize_cdr(m, msgtype))
    return path


def _signals(t: np.ndarray):
    """Closed-form q, qd, effort (N, 3) at times t [s]."""
    w = np.array([0.7, 1.1, 1.9])
    q = 0.5 * np.sin(np.outer(t, w) + [0.0, 0.3, 0.6])
    qd = 0.5 * w * np.cos(np.outer(t, w) + [0.0, 0.3, 0.6])
    eff = np.outer(t, [2.0, -1.0, 0.5]) + [10.0, 5.0, 1.0]
    return q, qd, eff


def _joint_states(stamps_ns, recv_ns, rng=None, q=None, qd=None, eff=None):
    """[(receive_ns, JointState)] with the joints in a random name order per message."""
    t = (np.asarray(stamps_ns) - stamps_ns[0]) * 1e-9
    sq, sqd, seff = _signals(t)
    q = sq if q is None else q
    qd = sqd if qd is None else qd
    eff = seff if eff is None else eff
    out = []
    for k, (s, r) in enumerate(zip(stamps_ns, recv_ns)):
        order = rng.permutation(3) if rng is not None else np.arange(3)
        out.append((int(r), _msg(int(s), [NAMES[i] for i in order], q[k, order], qd[k, order],
                                 eff[k, order])))
    return out


def _stamps(n: int, rate_hz: float, start_ns: int = EPOCH_NS) -> np.ndarray:
    return start_ns + np.round(np.arange(n) * 1e9 / rate_hz).astype(np.int64)


# -- round trips -----------------------------------------------------------------------------------

@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_round_trip_names_permuted(tmp_path, storage):
    """Preset ros2_joint_states: positions / velocities / efforts back exactly, in the model's
    joint order although every message lists the joints in another order; t from header.stamp
    in seconds from the first message. The storage file alone (no metadata.yaml) reads the same."""
    rng = np.random.default_rng(0)
    st = _stamps(300, 200.0)
    recv = st + 3_000_000 + rng.integers(0, 500_000, st.size)     # 3..3.5 ms transport delay
    bag = write_bag(tmp_path / "bag", {"/joint_states": _joint_states(st, recv, rng)}, storage)
    t_true = (st - st[0]) * 1e-9
    q, qd, eff = _signals(t_true)
    model_order = [2, 0, 1]                 # the model lists wrist, shoulder, elbow
    names = [NAMES[i] for i in model_order]
    for path in (bag, *sorted(bag.glob("*.mcap")), *sorted(bag.glob("*.db3"))):
        if path.is_file():                  # the storage file without its metadata.yaml
            lone = tmp_path / "lone" / path.name
            lone.parent.mkdir(exist_ok=True)
            shutil.copy(path, lone)
            path = lone
        warnings: list = []
        rec = load_log(LogSpec(file=path, preset="ros2_joint_states"), names, warnings=warnings)
        np.testing.assert_array_equal(rec.q, q[:, model_order])
        np.testing.assert_array_equal(rec.qd, qd[:, model_order])
        np.testing.assert_array_equal(rec.tau_j, eff[:, model_order])
        np.testing.assert_allclose(rec.t, t_true, rtol=0, atol=1e-12)
        assert rec.i_m is None and rec.tau_m is None and warnings == []
        log = rec.meta["log"]
        assert log["format"] == "rosbag2" and log["resampled"] is False
        assert log["rosbag2"]["t0_ns"] == int(st[0])
        assert log["rosbag2"]["time_source"] == "header"


def test_two_topics_merged_onto_the_q_topic(tmp_path):
    """q / qd on /joint_states at 500 Hz, motor currents as the effort of /motor_currents at
    100 Hz starting 50 ms later and ending 40 ms earlier: the q samples outside the currents'
    span are cut, the currents interpolated onto the q stamps -- exactly for a current linear in
    time, within h^2/8 max|f''| for a sinusoid -- and turned into motor torque by the gains."""
    st = _stamps(1000, 500.0)
    sc = _stamps(190, 100.0, EPOCH_NS + 50_000_000)
    tc = (sc - st[0]) * 1e-9
    cur = np.stack([1.0 + 0.5 * tc, -2.0 + 0.25 * tc, 0.3 * np.sin(3.0 * tc)], axis=1)
    js = _joint_states(st, st, eff=np.zeros((st.size, 3)))
    mc = [(int(s), _msg(int(s), NAMES[::-1], eff=cur[k, ::-1])) for k, s in enumerate(sc)]
    bag = write_bag(tmp_path / "bag", {"/joint_states": js, "/motor_currents": mc})
    gains = np.array([10.0, 8.0, 5.0])
    spec = LogSpec(file=bag, format="rosbag2", current_gains=tuple(gains),
                   topics=TopicMap(q="/joint_states", qd="/joint_states", i_m="/motor_currents"))
    rec = load_log(spec, NAMES)
    t_all = (st - st[0]) * 1e-9
    keep = (st >= sc[0]) & (st <= sc[-1])
    assert rec.n_samples == keep.sum() and rec.tau_j is None
    cut = rec.meta["log"]["rosbag2"]["cut_to_common_span"]
    assert cut == {"start": int(np.argmax(keep)),
                   "end": int(keep.size - 1 - np.flatnonzero(keep)[-1])}
    q, qd, _ = _signals(t_all[keep])
    np.testing.assert_array_equal(rec.q, q)
    tk = t_all[keep]
    np.testing.assert_allclose(rec.i_m[:, 0], 1.0 + 0.5 * tk, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rec.i_m[:, 1], -2.0 + 0.25 * tk, rtol=0, atol=1e-12)
    bound = 0.01 ** 2 / 8 * 0.3 * 9.0       # h^2/8 * max|f''| of 0.3 sin(3 t), h = 10 ms
    err = np.abs(rec.i_m[:, 2] - 0.3 * np.sin(3.0 * tk))
    assert err.max() <= bound * (1 + 1e-9) and err.max() > 0.1 * bound
    np.testing.assert_allclose(rec.tau_m, rec.i_m * gains, rtol=1e-15)
    assert rec.t[0] == 0.0 and rec.meta["log"]["rosbag2"]["t0_ns"] == int(st[keep][0])


def test_header_time_or_receive_time(tmp_path):
    """Receive time = stamp + a jittered delay: header time by default; receive time only when
    asked (time_source: receive), then said in the warnings, and the jitter makes the log
    irregular (resampled)."""
    rng = np.random.default_rng(1)
    st = _stamps(400, 100.0)
    recv = st + 2_000_000 + rng.integers(0, 3_000_000, st.size)   # 2..5 ms, jitter 3 ms
    bag = write_bag(tmp_path / "bag", {"/joint_states": _joint_states(st, recv)}, "sqlite3")
    w1: list = []
    head = load_log(LogSpec(file=bag, preset="ros2_joint_states"), NAMES, warnings=w1)
    np.testing.assert_allclose(head.t, (st - st[0]) * 1e-9, atol=1e-12)
    assert head.meta["log"]["resampled"] is False and w1 == []
    w2: list = []
    spec = LogSpec(file=bag, preset="ros2_joint_states", time_source="receive")
    got = load_log(spec, NAMES, warnings=w2)
    assert got.meta["log"]["rosbag2"]["time_source"] == "receive"
    assert got.meta["log"]["rosbag2"]["t0_ns"] == int(recv[0])
    assert got.meta["log"]["resampled"] is True
    assert any("receive time" in w and "header.stamp" in w for w in w2), w2


def test_out_of_order_and_foreign_messages(tmp_path):
    """Messages written out of stamp order are sorted (a warning says so); messages of a gripper
    on the same topic (none of the model's joints) are skipped and counted; a joint the model
    does not have is ignored with a warning."""
    st = _stamps(200, 100.0)
    js = _joint_states(st, st)
    js[10], js[11] = js[11], js[10]
    js[50], js[52] = js[52], js[50]
    js = [(int(st[k]), m) for k, (_, m) in enumerate(js)]        # received in this order
    extra = []
    for recv, m in js:
        m.name.append("gripper_finger")
        m.position = np.append(m.position, 0.01)
        m.velocity = np.append(m.velocity, 0.0)
        m.effort = np.append(m.effort, 0.0)
        extra.append((recv, m))
    gripper = [(int(s) + 1, _msg(int(s) + 1, ["finger_a", "finger_b"], [0.0, 0.0], [0.0, 0.0],
                                 [0.0, 0.0])) for s in st[::10]]
    bag = write_bag(tmp_path / "bag", {"/joint_states": extra + gripper})
    warnings: list = []
    rec = load_log(LogSpec(file=bag, preset="ros2_joint_states"), NAMES, warnings=warnings)
    q, _, _ = _signals((st - st[0]) * 1e-9)
    np.testing.assert_array_equal(rec.q, q)
    assert rec.meta["log"]["rosbag2"]["skipped_messages"] == {"/joint_states": len(gripper)}
    assert any("3 message(s) arrived out of stamp order" in w for w in warnings), warnings
    assert any("gripper_finger" in w and "ignored" in w for w in warnings), warnings


# -- hostile bags ----------------------------------------------------------------------------------

def _good(n=50):
    st = _stamps(n, 100.0)
    return st, _joint_states(st, st)


def _hostile(case: str, tmp_path: Path):
    """(bag, LogSpec) of one hostile case."""
    st, js = _good()
    topics, other, spec = {"/joint_states": js}, None, LogSpec(preset="ros2_joint_states")
    if case == "missing joint":
        js[7] = (js[7][0], _msg(int(st[7]), NAMES[:2], [0, 0], [0, 0], [0, 0]))
    elif case == "another arm":
        topics = {"/joint_states": [(r, _msg(r, ["a1", "a2", "a3"], [0] * 3, [0] * 3, [0] * 3))
                                    for r, _ in js]}
    elif case == "empty topic":
        topics = {"/joint_states": []}
    elif case == "other type":
        f64 = TS.types["std_msgs/msg/Float64"]
        topics, other = {}, {"/joint_states": ("std_msgs/msg/Float64", [(1, f64(data=1.0))])}
    elif case == "no such topic":
        spec = LogSpec(topics=TopicMap(q="/joint_states", i_m="/motor_currents"),
                       current_gains=(1.0, 1.0, 1.0))
    elif case == "stamp zero":
        js[0] = (js[0][0], _msg(0, NAMES, [0] * 3, [0] * 3, [0] * 3))
    elif case == "same stamp":
        js[20] = (js[20][0], _msg(int(st[19]), NAMES, [0] * 3, [0] * 3, [0] * 3))
    elif case == "length mismatch":
        js[5] = (js[5][0], _msg(int(st[5]), NAMES, [0] * 2, [0] * 3, [0] * 3))
    elif case == "duplicate name":
        js[3] = (js[3][0], _msg(int(st[3]), NAMES + ["elbow"], [0] * 4, [0] * 4, [0] * 4))
    elif case == "field in some":
        js[9] = (js[9][0], _msg(int(st[9]), NAMES, [0] * 3, [], [0] * 3))
    elif case == "field in none":
        topics = {"/joint_states": [(r, _msg(r, NAMES, [0] * 3, [], [0] * 3)) for r, _ in js]}
        spec = LogSpec(topics=TopicMap(q="/joint_states", qd="/joint_states",
                                       tau_j="/joint_states"))
    elif case == "gap":
        sc = np.delete(st, np.arange(20, 30))
        topics["/motor_currents"] = [(int(s), _msg(int(s), NAMES, eff=[1.0] * 3)) for s in sc]
        spec = LogSpec(topics=TopicMap(q="/joint_states", tau_m="/motor_currents"))
    elif case == "no overlap":
        sc = _stamps(20, 100.0, EPOCH_NS + 10**10)
        topics["/motor_currents"] = [(int(s), _msg(int(s), NAMES, eff=[1.0] * 3)) for s in sc]
        spec = LogSpec(topics=TopicMap(q="/joint_states", tau_m="/motor_currents"))
    bag = write_bag(tmp_path / "bag", topics, other=other)
    return bag, spec


@pytest.mark.parametrize("case,fragments", [
    ("missing joint", ["/joint_states message 7 has no joint(s) wrist",
                       "it names shoulder, elbow"]),
    ("another arm", ["/joint_states: no message names the model's joints", "a1, a2, a3"]),
    ("empty topic", ["topic /joint_states has no messages"]),
    ("other type", ["topic /joint_states holds std_msgs/msg/Float64", "JointState"]),
    ("no such topic", ["no topic /motor_currents in the bag", "/joint_states (sensor_msgs/msg"
                                                              "/JointState, 50 messages)"]),
    ("stamp zero", ["/joint_states message 0 has header.stamp 0", "time_source: receive"]),
    ("same stamp", ["/joint_states messages 19 and 20 have the same time stamp"]),
    ("length mismatch", ["/joint_states message 5: 2 position values for 3 joint names"]),
    ("duplicate name", ["/joint_states message 3 names joint(s) elbow twice"]),
    ("field in some", ["/joint_states message 9 has no velocity values, unlike message 0"]),
    ("field in none", ["qd: the messages of /joint_states have no velocity values"]),
    ("gap", ["/motor_currents: no message between 0.190000 s and 0.300000 s", "110 ms",
             "topic_gap_s"]),
    ("no overlap", ["the topics share 0 stamps of /joint_states"]),
])
def test_hostile_bags(tmp_path, case, fragments):
    bag, spec = _hostile(case, tmp_path)
    import dataclasses
    with pytest.raises(LogError) as ei:
        load_log(dataclasses.replace(spec, file=bag), NAMES)
    msg = str(ei.value)
    assert msg.startswith(str(bag)), msg
    for f in fragments:
        assert f in msg, msg


def test_nan_field_is_a_field_not_published(tmp_path):
    """joint_state_broadcaster writes NaN for an interface a joint lacks: an effort NaN for all
    the model's joints (a gripper joint having one) is left out under the preset, refused when
    mapped explicitly; a NaN in some samples only is refused naming joint and sample."""
    import dataclasses
    st = _stamps(50, 100.0)
    nan = np.full((st.size, 3), np.nan)
    js = [(r, _msg(r, NAMES + ["finger"], np.append(m.position, 0.0), np.append(m.velocity, 0.0),
                   np.append(nan[0], 1.0))) for r, m in _joint_states(st, st)]
    bag = write_bag(tmp_path / "bag", {"/joint_states": js})
    rec = load_log(LogSpec(file=bag, preset="ros2_joint_states"), NAMES)
    assert rec.tau_j is None and rec.qd is not None
    explicit = LogSpec(file=bag, topics=TopicMap(q="/joint_states", tau_j="/joint_states"))
    with pytest.raises(LogError, match="tau_j: the messages of /joint_states have no effort "
                                       "values for the model's joints"):
        load_log(explicit, NAMES)
    one = write_bag(tmp_path / "one", {"/joint_states": _joint_states(
        st, st, eff=np.where(np.arange(st.size)[:, None] == 30, np.nan, 1.0) * np.ones(3))})
    with pytest.raises(LogError, match="tau_j of joint 1 is not finite at sample 30"):
        load_log(dataclasses.replace(explicit, file=one), NAMES)


def test_gap_within_tolerance_is_interpolated(tmp_path):
    """The same 110 ms gap is interpolated across when topic_gap_s allows it."""
    import dataclasses
    bag, spec = _hostile("gap", tmp_path)
    rec = load_log(dataclasses.replace(spec, file=bag, topic_gap_s=0.12), NAMES)
    np.testing.assert_array_equal(rec.tau_m, np.ones((50, 3)))


def test_missing_library_names_the_extra(tmp_path, monkeypatch):
    st, js = _good()
    bag = write_bag(tmp_path / "bag", {"/joint_states": js})
    monkeypatch.setitem(sys.modules, "rosbags.highlevel", None)
    with pytest.raises(LogError, match=r"needs the 'rosbags' package: pip install 'twinid\[ros\]'"):
        load_log(LogSpec(file=bag, preset="ros2_joint_states"), NAMES)


def test_not_a_bag(tmp_path):
    (tmp_path / "x.mcap").write_bytes(b"not an mcap file at all")
    with pytest.raises(LogError, match="x.mcap: not a readable rosbag2"):
        load_log(LogSpec(file=tmp_path / "x.mcap", preset="ros2_joint_states"), NAMES)
    (tmp_path / "folder").mkdir()
    with pytest.raises(LogError, match="without metadata.yaml"):
        load_log(LogSpec(file=tmp_path / "folder", topics=TopicMap(q="/j", tau_j="/j")), NAMES)


# -- scenario keys ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fit,key,fragment", [
    ({"file": "BAG", "topics": {"q": "/joint_states"}}, "fit.excitation.topics",
     "at least one torque channel"),
    ({"file": "BAG", "topics": {"q": "joint states", "tau_j": "/j"}}, "fit.excitation.topics.q",
     "not a ROS 2 topic name"),
    ({"file": "BAG", "columns": {"q": [1, 2, 3, 4, 5, 6], "tau_j": [7, 8, 9, 10, 11, 12]}},
     "fit.excitation.columns", "maps signals to topics"),
    ({"file": "BAG", "preset": "ur_rtde"}, "fit.excitation.preset",
     "a rosbag2 takes a topic preset"),
    ({"file": "BAG"}, "fit.excitation", "needs 'topics'"),
    ({"file": "BAG", "preset": "ros2_joint_states", "time_scale": 1e-9},
     "fit.excitation.time_scale", "leave time_scale at 1"),
    ({"file": "CSV", "columns": {"q": [1, 2, 3, 4, 5, 6], "tau_j": [7, 8, 9, 10, 11, 12]},
      "time_source": "receive"}, "fit.excitation.time_source", "is a rosbag2 key"),
    ({"file": "CSV", "format": "csv", "preset": "ros2_joint_states"}, "fit.excitation.preset",
     "reads a rosbag2; this log is format csv"),
    ({"file": "DIR", "preset": "ros2_joint_states"}, "fit.excitation.file",
     "directory without metadata.yaml"),
    ({"file": "BAG", "topics": {"q": "/j", "tau_j": "/j", "i_m": "/j"}},
     "fit.excitation.topics.i_m", "topics.tau_j takes the effort of /j already"),
])
def test_scenario_keys_refused(tmp_path, fit, key, fragment):
    st, js = _good()
    paths = {"BAG": write_bag(tmp_path / "bag", {"/joint_states": js}),
             "CSV": tmp_path / "log.csv", "DIR": tmp_path / "plain"}
    paths["CSV"].write_text("0,1\n")
    paths["DIR"].mkdir()
    fit = dict(fit, file=str(paths[fit["file"]]))
    with pytest.raises(ScenarioError) as ei:
        scenario_from_dict(dict(TINY, fit={"excitation": fit}))
    assert ei.value.path == key and fragment in ei.value.message, str(ei.value)


def test_scenario_accepts_bag_folder_and_file(tmp_path):
    st, js = _good()
    bag = write_bag(tmp_path / "bag", {"/joint_states": js})
    scn = scenario_from_dict(dict(TINY, fit={"excitation": {"file": str(bag),
                                                            "preset": "ros2_joint_states"}}))
    assert scn.fit.excitation.file == bag
    mcap = next(bag.glob("*.mcap"))
    fit = {"file": str(mcap), "topics": {"q": "/joint_states", "i_m": "/motor_currents"},
           "time_source": "receive", "topic_gap_s": 0.05}
    scn = scenario_from_dict(dict(TINY, fit={"excitation": fit},
                                  identification={"joint_model": "simplified"}))
    assert scn.fit.excitation.file == mcap and scn.fit.excitation.topics.i_m == "/motor_currents"


def test_effort_as_current_over_the_preset(tmp_path):
    """preset ros2_joint_states with topics.i_m on /joint_states: the effort is the motor
    current (the preset's tau_j on that topic is dropped), turned into motor torque by the
    gains; two explicit torque channels on one effort are refused."""
    import dataclasses
    st, js = _good()
    bag = write_bag(tmp_path / "bag", {"/joint_states": js})
    gains = (3.0, 2.0, 1.0)
    spec = LogSpec(file=bag, preset="ros2_joint_states", topics=TopicMap(i_m="/joint_states"),
                   current_gains=gains)
    rec = load_log(spec, NAMES)
    _, _, eff = _signals((st - st[0]) * 1e-9)
    assert rec.tau_j is None and rec.qd is not None
    np.testing.assert_array_equal(rec.i_m, eff)
    np.testing.assert_allclose(rec.tau_m, eff * gains, rtol=1e-15)
    both = dataclasses.replace(spec, topics=TopicMap(i_m="/joint_states", tau_j="/joint_states"))
    with pytest.raises(LogError, match="topics.tau_j and topics.i_m both take the effort of "
                                       "/joint_states"):
        load_log(both, NAMES)


# -- end to end ------------------------------------------------------------------------------------

def _recording_bag(rec, path: Path, storage: str) -> Path:
    """A twin recording as a bag: q, qd, tau_j on /joint_states (joints in reverse name order),
    motor currents as the effort of /motor_currents at the same stamps."""
    st = EPOCH_NS + np.round(rec.t * 1e9).astype(np.int64)
    names = list(rec.joint_names)[::-1]
    js = [(int(s), _msg(int(s), names, rec.q[k, ::-1], rec.qd[k, ::-1], rec.tau_j[k, ::-1]))
          for k, s in enumerate(st)]
    mc = [(int(s) + 100_000, _msg(int(s), rec.joint_names, eff=rec.i_m[k]))
          for k, s in enumerate(st)]
    return write_bag(path, {"/joint_states": js, "/motor_currents": mc}, storage)


def test_fit_from_bag_equals_fit_from_recording(twin_recordings, tmp_path, capsys):
    """`twinid fit` on the twin's recordings written to bags (excitation: an MCAP bag folder,
    validation: a lone sqlite3 .db3 file) gives the parameters of the fit of the recordings
    themselves (NPZ), to rounding."""
    recs, paths, model = twin_recordings
    ex = _recording_bag(recs["excitation"], tmp_path / "ex_bag", "mcap")
    va = _recording_bag(recs["validation"], tmp_path / "va_bag", "sqlite3")
    va_file = next(va.glob("*.db3"))
    topics = {"q": "/joint_states", "qd": "/joint_states", "tau_j": "/joint_states",
              "i_m": "/motor_currents"}
    fits = {}
    for name, section in (
            ("npz", {k: {"file": str(paths[k])} for k in ("excitation", "validation")}),
            ("bag", {"excitation": {"file": str(ex), "topics": topics},
                     "validation": {"file": str(va_file), "topics": topics}})):
        f = tmp_path / f"{name}.yaml"
        f.write_text(yaml.safe_dump(dict(TINY, name=name, fit=section)))
        out = tmp_path / f"out_{name}"
        code = main(["--quiet", "fit", str(f), "--out", str(out)])
        assert code == 0, capsys.readouterr().err
        fits[name] = yaml.safe_load((out / "parameters.yaml").read_text())
    for model_key, block, key in (("improved", "stage1", "value"),
                                  ("improved", "stage2", "params"),
                                  ("simplified", "rigid_body", "value")):
        a = fits["npz"]["models"][model_key][block]
        b = fits["bag"]["models"][model_key][block]
        assert a["names"] == b["names"]
        va_, vb = np.array(a[key], float), np.array(b[key], float)
        np.testing.assert_allclose(vb, va_, rtol=1e-7, atol=1e-9 * np.abs(va_).max())


# -- the README's example and --log ----------------------------------------------------------------

def _cobot_bag(path: Path, duration_s: float, rate_hz: float = 100.0) -> Path:
    """A bag of the test arm (cobot6) on /joint_states: smooth motion, effort = its rigid-body
    torque RNEA(q, qd, qdd) (plausible for the unit guards), joints in reverse name order."""
    from identify.app.inputs import build_model
    model = build_model(scenario_from_dict(TINY))
    st = _stamps(int(duration_s * rate_hz), rate_hz)
    t = (st - st[0]) * 1e-9
    w = 2 * np.pi / np.linspace(7.0, 13.0, model.n)
    q = 0.4 * np.sin(np.outer(t, w))
    qd = 0.4 * w * np.cos(np.outer(t, w))
    tau = model.inverse_dynamics(q, qd, -0.4 * w ** 2 * np.sin(np.outer(t, w)))
    names = list(model.joint_names)[::-1]
    js = [(int(s), _msg(int(s), names, q[k, ::-1], qd[k, ::-1], tau[k, ::-1]))
          for k, s in enumerate(st)]
    return write_bag(path, {"/joint_states": js})


def test_readme_example_and_log_option(tmp_path, capsys):
    """The README's rosbag2 fit section, its file replaced by a 90 s bag, passes `twinid check`
    (scenario keys, reading, unit guards: 60 s and 30 s windows at 100 Hz); `--log BAG_FOLDER`
    overrides the file as for any log."""
    import re
    from identify.app.inputs import log_specs
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", readme, flags=re.S)
                 if "ros2_joint_states" in b)
    fit = yaml.safe_load(block)["fit"]
    bag = _cobot_bag(tmp_path / "bags" / "run1", 90.0)
    for k in fit:
        assert fit[k]["file"] == "bags/run1"
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(dict(TINY, fit=fit, identification={"joint_model": "auto"})))
    code = main(["check", str(f)])
    cap = capsys.readouterr()
    assert code == 0, cap.out + cap.err
    out = cap.out
    assert "excitation log" in out and "6000 samples" in out and "signals q, tau_j" in out, out
    assert "validation log" in out and "3000 samples" in out, out
    scn = scenario_from_dict(dict(TINY, fit={"excitation": {"preset": "ros2_joint_states"}}))
    specs = log_specs(scn, log=str(bag))
    assert specs["excitation"].file == bag.resolve()
    rec = load_log(specs["excitation"], [f"joint{j}" for j in range(1, 7)])
    assert rec.n_samples == 9000 and rec.tau_j is not None


def test_simulated_log_as_a_bag(tmp_path):
    """identify.logs.simulate --format rosbag2 (write_joint_states): the simulated arrays come
    back from the bag exactly -- joint torque on /joint_states, currents on /motor_currents."""
    from identify.app.inputs import build_model
    from identify.logs.simulate import simulate, write_log
    model = build_model(scenario_from_dict(TINY))
    log = simulate(model, duration_s=3.0, rate_hz=200.0, signals="both", seed=2)
    bag = write_log(log, tmp_path / "sim", "rosbag2")
    assert bag == tmp_path / "sim" / "bag" and (bag / "metadata.yaml").is_file()
    topics = TopicMap(q="/joint_states", qd="/joint_states", tau_j="/joint_states",
                      i_m="/motor_currents")
    rec = load_log(LogSpec(file=bag, topics=topics, current_gains=tuple(log.truth["gains"])),
                   model.joint_names, model=model)
    np.testing.assert_allclose(rec.t, log.t, rtol=0, atol=1e-9)
    for k in ("q", "qd", "tau_j", "i_m"):
        np.testing.assert_array_equal(getattr(rec, k), getattr(log, k))
    np.testing.assert_allclose(rec.tau_m, log.tau_m, rtol=1e-12)
    with pytest.raises(ValueError, match="exists already"):
        write_log(log, tmp_path / "sim", "rosbag2")
