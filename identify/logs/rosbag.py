"""rosbag2 logs (sqlite3 and MCAP storage): ``sensor_msgs/msg/JointState`` messages by topic,
read with the `rosbags` library (pure Python; the optional extra ``twinid[ros]``, imported here
only, and only when a bag is read).

Which topic holds what is ``fit.*.topics`` (channel -> topic) over a preset
(:mod:`identify.scenario.presets`: ``ros2_joint_states``). A channel takes one field of its
topic's messages: q <- ``position``, qd <- ``velocity``, tau_j / i_m / tau_m <- ``effort``; what
an effort is (joint torque, motor current with gains, link-side motor torque) is the channel it
is mapped to, exactly as for CSV columns.

Joints are matched by name in every message (the order may change from message to message);
messages holding none of the model's joints (a gripper publishing on the same topic) are
skipped, a message holding only some is refused naming the missing joints. Time is
``header.stamp``; the bag's receive time only with ``time_source: receive`` (said in the
warnings: it carries the transport's delay and jitter). Messages out of stamp order are sorted;
a stamp seen twice is refused. The q topic is the time base: every other topic is interpolated
linearly onto its stamps, over the span all topics share, and only across gaps up to
``topic_gap_s`` (default 3 of that topic's median sample periods) -- a longer gap is refused
naming the topic and the times.

Time stamps are returned in seconds from the first kept stamp of the q topic (its absolute
value, ns since the epoch, is in the import's meta as ``t0_ns``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from identify.scenario.presets import PRESETS

from .readers import CHANNELS, LogError

__all__ = ["read_rosbag", "write_joint_states", "topic_map", "JOINT_STATE"]

#: the message type read (rosbags' name; ROS 1 bags' sensor_msgs/JointState reads the same)
JOINT_STATE = "sensor_msgs/msg/JointState"
#: the JointState field each channel takes
FIELD = {"q": "position", "qd": "velocity", "tau_j": "effort", "i_m": "effort", "tau_m": "effort"}
#: default longest interpolated gap of a second topic, in its median sample periods
GAP_PERIODS = 3.0


def topic_map(spec, where: str = "") -> dict[str, tuple[str, bool]]:
    """channel -> (topic, optional): the scenario's explicit ``topics`` over the preset's (a
    preset channel is optional: left out when the messages leave its field empty, q excepted).
    A topic's effort is one signal: an explicit torque channel on a topic replaces the preset's
    torque channel there (effort = current, not torque), two explicit ones are refused."""
    explicit = {} if spec.topics is None else \
        {k: getattr(spec.topics, k) for k in CHANNELS if getattr(spec.topics, k) is not None}
    effort: dict = {}
    for k, v in explicit.items():
        if FIELD[k] == "effort":
            if v in effort:
                raise LogError(f"{where}: topics.{effort[v]} and topics.{k} both take the effort "
                               f"of {v}; an effort is one signal (joint torque, motor current or "
                               f"motor torque)")
            effort[v] = k
    out: dict[str, tuple[str, bool]] = {}
    if spec.preset is not None:
        out.update({k: (v, k != "q") for k, v in PRESETS[spec.preset].items()
                    if k in FIELD and not (FIELD[k] == "effort" and v in effort)})
    out.update({k: (v, False) for k, v in explicit.items()})
    return out


@dataclass
class TopicData:
    """One topic's JointState messages for the model's joints, in receive order.

    stamps: (M,) int64 [ns]; values: field -> (M, n) in the model's joint order, or None when
    every message leaves the field empty (or NaN for all the model's joints); index: (M,) the message's 0-based index on the topic
    (skipped messages counted)."""
    stamps: np.ndarray
    values: dict
    index: np.ndarray
    skipped: int = 0
    ignored_joints: list = field(default_factory=list)


def _library(where: str):
    """rosbags' AnyReader, Writer, StoragePlugin and the ROS 2 Humble typestore, or a LogError
    naming the extra to install."""
    try:
        from rosbags.highlevel import AnyReader
        from rosbags.rosbag2 import StoragePlugin, Writer
        from rosbags.typesys import Stores, get_typestore
    except ImportError:
        raise LogError(f"{where}: reading rosbag2 logs needs the 'rosbags' package: "
                       f"pip install 'twinid[ros]' (or pip install 'rosbags>=0.11,<0.12')") \
            from None
    return AnyReader, Writer, StoragePlugin, get_typestore(Stores.ROS2_HUMBLE)


def write_joint_states(path, t: np.ndarray, joint_names, topics: dict, *,
                       storage: str = "mcap", t0_ns: int = 1_700_000_000 * 10**9) -> Path:
    """Write a rosbag2 bag folder of JointState topics (simulated logs, tests).

    Args:
        path: the bag folder to create (must not exist).
        t: (N,) sample times [s]; each message's header.stamp and receive time is t0_ns + t.
        joint_names: (n,) the messages' ``name``.
        topics: {topic: {field: (N, n) array}}, field position / velocity / effort (a field
            not given is written empty).
        storage: "mcap" or "sqlite3".
    Returns:
        the bag folder.
    """
    _, Writer, StoragePlugin, store = _library(str(path))
    js = store.types[JOINT_STATE]
    header, stamp = store.types["std_msgs/msg/Header"], store.types["builtin_interfaces/msg/Time"]
    ns = int(t0_ns) + np.round(np.asarray(t, dtype=float) * 1e9).astype(np.int64)
    empty = np.zeros(0)
    plugin = {"mcap": StoragePlugin.MCAP, "sqlite3": StoragePlugin.SQLITE3}[storage]
    with Writer(Path(path), version=9, storage_plugin=plugin) as w:
        for topic, fields in topics.items():
            conn = w.add_connection(topic, JOINT_STATE, typestore=store)
            rows = {f: None if fields.get(f) is None else np.ascontiguousarray(fields[f], float)
                    for f in ("position", "velocity", "effort")}
            for k, s in enumerate(ns):
                msg = js(header=header(stamp=stamp(sec=int(s) // 10**9, nanosec=int(s) % 10**9),
                                       frame_id=""), name=list(joint_names),
                         **{f: empty if a is None else a[k] for f, a in rows.items()})
                w.write(conn, int(s), store.serialize_cdr(msg, JOINT_STATE))
    return Path(path)


def _open(path: Path, where: str):
    """The rosbags AnyReader of `path` (not yet entered), ROS 2 types by default."""
    AnyReader, _, _, store = _library(where)
    return AnyReader([path], default_typestore=store)


def _connections(reader, topics: set, where: str) -> list:
    """The bag's connections of `topics`, each checked: present, JointState, not empty."""
    have: dict = {}
    for c in reader.connections:
        have.setdefault(c.topic, []).append(c)
    listing = ", ".join(f"{t} ({cs[0].msgtype}, {sum(c.msgcount for c in cs)} messages)"
                        for t, cs in sorted(have.items())) or "none"
    out = []
    for topic in sorted(topics):
        if topic not in have:
            raise LogError(f"{where}: no topic {topic} in the bag (it has: {listing})")
        types = {c.msgtype for c in have[topic]}
        if types != {JOINT_STATE}:
            raise LogError(f"{where}: topic {topic} holds {', '.join(sorted(types))}, not "
                           f"{JOINT_STATE}")
        if sum(c.msgcount for c in have[topic]) == 0:
            raise LogError(f"{where}: topic {topic} has no messages")
        out += have[topic]
    return out


class _Collector:
    """Rows of one topic gathered message by message: the joints matched by name (one index
    permutation per distinct name list), the requested fields as (n,) rows."""

    def __init__(self, topic: str, names: list, fields: set, where: str):
        self.topic, self.names, self.fields, self.where = topic, names, sorted(fields), where
        self.stamps, self.index, self.skipped = [], [], 0
        self.rows = {f: [] for f in self.fields}
        self.perm: dict = {}
        self.extra: set = set()
        self.count = 0

    def _permutation(self, msg_names: tuple, k: int):
        """Indices of the model's joints in the message, or None for a message without any."""
        if msg_names not in self.perm:
            pos = {nm: i for i, nm in enumerate(msg_names)}
            if len(pos) != len(msg_names):
                dup = sorted({nm for nm in msg_names if msg_names.count(nm) > 1})
                raise LogError(f"{self.where}: {self.topic} message {k} names joint(s) "
                               f"{', '.join(dup)} twice")
            missing = [nm for nm in self.names if nm not in pos]
            if len(missing) == len(self.names):
                self.perm[msg_names] = None
            elif missing:
                raise LogError(f"{self.where}: {self.topic} message {k} has no joint(s) "
                               f"{', '.join(missing)} (it names {', '.join(msg_names)})")
            else:
                self.perm[msg_names] = np.array([pos[nm] for nm in self.names])
                self.extra |= set(msg_names) - set(self.names)
        return self.perm[msg_names]

    def add(self, msg, receive_ns: int, use_receive: bool) -> None:
        k = self.count
        self.count += 1
        names = tuple(msg.name)
        perm = self._permutation(names, k)
        if perm is None:
            self.skipped += 1
            return
        for f in self.fields:
            v = np.asarray(getattr(msg, f), dtype=float)
            if v.size == 0:
                v = None
            elif v.size != len(names):
                raise LogError(f"{self.where}: {self.topic} message {k}: {v.size} {f} values "
                               f"for {len(names)} joint names")
            self.rows[f].append(v if v is None else v[perm])
        stamp = msg.header.stamp
        self.stamps.append(receive_ns if use_receive else int(stamp.sec) * 10**9 +
                           int(stamp.nanosec))
        self.index.append(k)

    def result(self) -> TopicData:
        if not self.stamps:
            theirs = sorted({nm for key in self.perm for nm in key})
            raise LogError(f"{self.where}: {self.topic}: no message names the model's joints "
                           f"{', '.join(self.names)} (the topic has {', '.join(theirs) or 'none'})")
        values = {}
        for f, rows in self.rows.items():
            empty = [r is None for r in rows]
            if all(empty):
                values[f] = None
                continue
            if any(empty):
                i = empty.index(not empty[0])
                got = "no" if empty[i] else "its"
                raise LogError(f"{self.where}: {self.topic} message {self.index[i]} has {got} "
                               f"{f} values, unlike message {self.index[0]}: a field is either "
                               f"in every message or in none")
            a = np.vstack(rows)
            # ros2_control's joint_state_broadcaster fills an interface a joint lacks with NaN:
            # NaN for every one of the model's joints in every message is a field not published
            values[f] = None if np.isnan(a).all() else a
        return TopicData(np.asarray(self.stamps, dtype=np.int64), values,
                         np.asarray(self.index), self.skipped, sorted(self.extra))


def _read_topics(path: Path, wanted: dict, names: list, use_receive: bool,
                 where: str) -> dict[str, TopicData]:
    """topic -> TopicData of the fields `wanted[topic]`, one pass over the bag."""
    col = {t: _Collector(t, names, f, where) for t, f in wanted.items()}
    try:
        with _open(path, where) as reader:
            conns = _connections(reader, set(wanted), where)
            for conn, t_ns, raw in reader.messages(connections=conns):
                col[conn.topic].add(reader.deserialize(raw, conn.msgtype), t_ns, use_receive)
    except LogError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the library's errors, one message with the file
        raise LogError(f"{where}: not a readable rosbag2 ({type(exc).__name__}: {exc})") from None
    return {t: c.result() for t, c in col.items()}


def _in_time_order(d: TopicData, topic: str, use_receive: bool, where: str,
                   warnings: list) -> TopicData:
    """`d` sorted by stamp; zero stamps (an unstamped publisher) and repeated stamps refused."""
    if not use_receive and np.any(d.stamps == 0):
        k = int(d.index[np.argmax(d.stamps == 0)])
        raise LogError(f"{where}: {topic} message {k} has header.stamp 0: its publisher does "
                       f"not stamp the messages; set time_source: receive to use the bag's "
                       f"receive time instead")
    back = int(np.sum(np.diff(d.stamps) < 0))
    if back:
        order = np.argsort(d.stamps, kind="stable")
        d = TopicData(d.stamps[order], {f: None if v is None else v[order]
                                        for f, v in d.values.items()},
                      d.index[order], d.skipped, d.ignored_joints)
        warnings.append(f"{where}: {topic}: {back} message(s) arrived out of stamp order; "
                        f"sorted by {'receive time' if use_receive else 'header.stamp'}")
    same = np.diff(d.stamps) == 0
    if same.any():
        i = int(np.argmax(same))
        raise LogError(f"{where}: {topic} messages {d.index[i]} and {d.index[i + 1]} have the "
                       f"same time stamp {d.stamps[i]} ns")
    return d


def _gap_tolerance(ts: np.ndarray, spec) -> float:
    """Longest interpolated gap [ns] of a second topic with stamps `ts`."""
    if spec.topic_gap_s is not None:
        return float(spec.topic_gap_s) * 1e9
    return GAP_PERIODS * float(np.median(np.diff(ts))) if ts.size > 1 else 0.0


def _onto(tp: np.ndarray, d: TopicData, f: str, topic: str, spec, where: str) -> np.ndarray:
    """Field `f` of topic `d` at the stamps `tp` [ns] (inside its span): linear interpolation,
    refused where the bracketing messages are further apart than the tolerance."""
    ts, v = d.stamps, d.values[f]
    j = np.clip(np.searchsorted(ts, tp, side="right") - 1, 0, ts.size - 1)
    exact = ts[j] == tp
    gap = ts[np.minimum(j + 1, ts.size - 1)] - ts[j]
    tol = _gap_tolerance(ts, spec)
    bad = ~exact & (gap > tol)
    if bad.any():
        i = int(np.argmax(bad))
        a, b = (int(x) for x in (ts[j[i]], ts[j[i] + 1]))
        raise LogError(f"{where}: {topic}: no message between {(a - tp[0]) * 1e-9:.6f} s and "
                       f"{(b - tp[0]) * 1e-9:.6f} s (a gap of {(b - a) * 1e-6:.3g} ms, longer "
                       f"than the {tol * 1e-6:.3g} ms interpolated across: topic_gap_s); the "
                       f"q topic's samples in between have no {f}")
    x = (tp - ts[0]).astype(float)
    xs = (ts - ts[0]).astype(float)
    return np.stack([np.interp(x, xs, v[:, c]) for c in range(v.shape[1])], axis=1)


def _common_span(data: dict, primary: str, where: str) -> tuple[np.ndarray, dict]:
    """Which of the q topic's stamps lie inside the span every topic covers (N,) bool, and how
    many were cut at its start and end."""
    tp = data[primary].stamps
    lo = max(int(d.stamps[0]) for d in data.values())
    hi = min(int(d.stamps[-1]) for d in data.values())
    keep = (tp >= lo) & (tp <= hi)
    if keep.sum() < 4:
        spans = "; ".join(f"{t}: {d.stamps[0]}..{d.stamps[-1]} ns" for t, d in data.items())
        raise LogError(f"{where}: the topics share {int(keep.sum())} stamps of {primary} "
                       f"(spans {spans}): they do not overlap in time")
    return keep, {"start": int(np.argmax(keep)), "end": int(np.argmax(keep[::-1]))}


def read_rosbag(path: Path, spec, names: list, where: str, warnings: list):
    """The channels of a rosbag2 log on the q topic's time base.

    Args:
        path: bag folder, or its .mcap / .db3 storage file.
        spec: the LogSpec (topics / preset, time_source, topic_gap_s).
        names: (n,) the model's joint names, matched against each message's ``name``.
        where: label of the messages.
        warnings: list the import's warnings are appended to.
    Returns:
        t (N,) [s] from the first kept stamp, {channel: (N, n) | None} in the bag's units (SI by
        ROS convention: rad, rad/s, N*m, A), and the import's facts for ``meta['log']``.
    """
    if spec.time_scale != 1.0:
        raise LogError(f"{where}: time_scale: a rosbag2's stamps are in ns and read as "
                       f"seconds; leave time_scale at 1")
    tmap = topic_map(spec, where)
    if "q" not in tmap:
        raise LogError(f"{where}: a rosbag2 log needs its topics: set fit.*.topics (q and a "
                       f"torque channel) or preset: ros2_joint_states")
    use_receive = spec.time_source == "receive"
    wanted: dict = {}
    for ch, (topic, _opt) in tmap.items():
        wanted.setdefault(topic, set()).add(FIELD[ch])
    data = _read_topics(path, wanted, list(names), use_receive, where)
    for topic in data:
        data[topic] = _in_time_order(data[topic], topic, use_receive, where, warnings)
    primary = tmap["q"][0]
    ch = {k: None for k in CHANNELS}
    for name, (topic, optional) in tmap.items():
        if data[topic].values[FIELD[name]] is None:
            if optional:
                continue
            raise LogError(f"{where}: {name}: the messages of {topic} have no {FIELD[name]} "
                           f"values for the model's joints (empty arrays, or NaN throughout: "
                           f"the publisher has no such interface)")
        ch[name] = topic
    used = {t: d for t, d in data.items() if t in set(v for v in ch.values() if v)}
    keep, cut = _common_span(used, primary, where)
    tp = used[primary].stamps[keep]
    for name, topic in ch.items():
        if topic is None:
            continue
        f = FIELD[name]
        ch[name] = used[topic].values[f][keep] if topic == primary else \
            _onto(tp, used[topic], f, topic, spec, where)
    if use_receive:
        warnings.append(f"{where}: time from the bag's receive time (time_source: receive), not "
                        f"header.stamp: the transport's delay and jitter are in the time stamps")
    for topic, d in used.items():
        if d.ignored_joints:
            warnings.append(f"{where}: {topic}: joint(s) {', '.join(d.ignored_joints)} are not "
                            f"in the model; ignored")
    meta = {"topics": {k: tmap[k][0] for k in CHANNELS if ch[k] is not None},
            "time_source": spec.time_source, "t0_ns": int(tp[0]),
            "cut_to_common_span": cut,
            "skipped_messages": {t: d.skipped for t, d in used.items() if d.skipped}}
    return (tp - tp[0]).astype(float) * 1e-9, ch, meta
