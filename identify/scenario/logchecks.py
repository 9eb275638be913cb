"""The keys of one log description (``fit.excitation``, ``fit.validation``, a held log):
what a CSV / NPZ log maps by columns, what a rosbag2 maps by topics, the signals it has for the
joint model asked for, gains for currents, one window. Errors come from the caller's check
context (``ctx.error(key path, message)``: ``file:line: key: message``)."""
from __future__ import annotations

import re
from pathlib import Path

from .presets import PRESET_FORMAT
from .spec import LogSpec, Scenario

__all__ = ["check_log_spec", "check_log_signals"]

_DEFAULT_LOG = LogSpec()


def check_log_spec(scn: Scenario, ls: LogSpec, p: tuple, n: int | None, ctx) -> None:
    """One fit.* log: a column map or preset for csv / npz, one torque channel, one column per
    joint, gains for currents, at most one window, stop after start."""
    fmt = ls.format
    if fmt in ("csv", "npz") and ls.columns is None and ls.preset is None:
        raise ctx.error(p + ("format",), f"a {fmt} log needs a 'columns' mapping or a 'preset'")
    _check_bag_keys(ls, p, ctx)
    c = ls.columns
    if c is not None:
        if ls.preset is None and c.q is None:
            raise ctx.error(p + ("columns",), "map the joint positions (columns.q) or use a preset")
        if ls.preset is None and c.tau_j is None and c.i_m is None and c.tau_m is None:
            raise ctx.error(p + ("columns",), "map at least one torque channel: "
                            "tau_j, i_m (with gains) or tau_m")
        for ch in ("q", "qd", "tau_j", "i_m", "tau_m"):
            cols = getattr(c, ch)
            if isinstance(cols, tuple) and n is not None and len(cols) != n:
                raise ctx.error(p + ("columns", ch), f"must list one column per joint ({n}), "
                                                    f"got {len(cols)}")
            if isinstance(cols, tuple) and ls.header is False and fmt != "npz" and \
                    any(isinstance(x, str) for x in cols):
                raise ctx.error(p + ("columns", ch), "column names need header: true "
                                                    "(or use 0-based column indices)")
    maps_currents = (c is not None and c.i_m is not None) or ls.preset == "ur_rtde" or \
        (ls.topics is not None and ls.topics.i_m is not None)
    if maps_currents and ls.current_gains is None and scn.arm.drives is None:
        raise ctx.error(p + ("current_gains",), "motor currents need per-joint gains [N*m/A, "
                        "link side]: set current_gains or arm.drives")
    if ls.current_gains is not None and n is not None and len(ls.current_gains) != n:
        raise ctx.error(p + ("current_gains",), f"must have one gain per joint ({n}), "
                                                f"got {len(ls.current_gains)}")
    wins = [k for k in ("window_s", "window_t", "window_rows") if getattr(ls, k) is not None]
    if len(wins) > 1:
        raise ctx.error(p + (wins[1],), f"give one window, not {' and '.join(wins)}")
    for k in wins:
        w = getattr(ls, k)
        if not w[1] > w[0]:
            raise ctx.error(p + (k,), f"stop must be after start, got {list(w)}")
        if k == "window_rows" and w[0] < 0:
            raise ctx.error(p + (k,), f"rows are 0-based, got {list(w)}")


#: a ROS 2 topic name: slash-separated tokens of letters, digits, underscores, ~ and {}
_TOPIC_RE = re.compile(r"^[~/]?[A-Za-z_{][A-Za-z0-9_{}]*(/[A-Za-z_{][A-Za-z0-9_{}]*)*$")
_BAG_KEYS = ("topics", "time_source", "topic_gap_s")


def _is_bag_log(ls: LogSpec) -> bool:
    """The log is a rosbag2: by its format, else its path (a folder, .mcap, .db3), else its
    preset; a validation log's keys without a file (given by --validation-log) by its topics."""
    if ls.format != "auto":
        return ls.format == "rosbag2"
    if ls.file is not None:
        return Path(ls.file).is_dir() or Path(ls.file).suffix.lower() in (".mcap", ".db3")
    if ls.preset is not None:
        return PRESET_FORMAT.get(ls.preset) == "rosbag2"
    return ls.topics is not None


def _check_bag_keys(ls: LogSpec, p: tuple, ctx) -> None:
    """rosbag2 keys only on a bag, a bag's signals by topic (a topic map or a preset of one),
    the topic names well formed, its stamps read as they are (time_scale 1)."""
    if not _is_bag_log(ls):
        what = f"format {ls.format}" if ls.format != "auto" else \
            "not a bag (a folder holding metadata.yaml, a .mcap or .db3 file)"
        if ls.preset is not None and PRESET_FORMAT.get(ls.preset) == "rosbag2":
            raise ctx.error(p + ("preset",), f"preset {ls.preset} reads a rosbag2; this log is "
                                             f"{what}")
        for k in _BAG_KEYS:
            if getattr(ls, k) != getattr(_DEFAULT_LOG, k):
                raise ctx.error(p + (k,), f"{k} is a rosbag2 key; this log is {what}")
        return
    if ls.preset is not None and PRESET_FORMAT.get(ls.preset) != "rosbag2":
        raise ctx.error(p + ("preset",), f"preset {ls.preset} maps columns of a file; a rosbag2 "
                                         f"takes a topic preset (ros2_joint_states) or topics")
    if ls.columns is not None:
        raise ctx.error(p + ("columns",), "a rosbag2 log maps signals to topics (topics: {q: "
                                          "/joint_states, ...}), not columns")
    if ls.time_scale != 1.0:
        raise ctx.error(p + ("time_scale",), "a rosbag2's stamps are read in seconds as they "
                                             "are: leave time_scale at 1")
    t = ls.topics
    if t is None:
        if ls.preset is None:
            raise ctx.error(p, "a rosbag2 log needs 'topics' (at least q and one torque "
                               "channel) or preset: ros2_joint_states")
        return
    if ls.preset is None and t.q is None:
        raise ctx.error(p + ("topics",), "give the topic of the joint positions (topics.q)")
    if ls.preset is None and t.tau_j is None and t.i_m is None and t.tau_m is None:
        raise ctx.error(p + ("topics",), "give the topic of at least one torque channel: "
                                         "tau_j, i_m (with gains) or tau_m")
    effort: dict = {}
    for k in ("q", "qd", "tau_j", "i_m", "tau_m"):
        v = getattr(t, k)
        if v is not None and not _TOPIC_RE.match(v):
            raise ctx.error(p + ("topics", k), f"{v!r} is not a ROS 2 topic name (e.g. "
                                               f"/joint_states)")
        if v is not None and k in ("tau_j", "i_m", "tau_m"):
            if v in effort:
                raise ctx.error(p + ("topics", k), f"topics.{effort[v]} takes the effort of {v} "
                                                   f"already: an effort is one signal (joint "
                                                   f"torque, motor current or motor torque)")
            effort[v] = k


def _log_signals(scn: Scenario, ls: LogSpec) -> tuple[bool, bool] | None:
    """(has joint torque, has motor torque) of a fit log as far as the scenario tells, else None
    (e.g. a recording file we do not open here, a text log without a preset)."""
    from .presets import preset_channels
    chans = set()
    if ls.preset is not None and ls.preset != "text_per_signal":
        chans |= set(preset_channels(ls.preset))
    if ls.columns is not None:
        chans |= {k for k in ("tau_j", "i_m", "tau_m") if getattr(ls.columns, k) is not None}
    if ls.topics is not None:
        chans |= {k for k in ("tau_j", "i_m", "tau_m") if getattr(ls.topics, k) is not None}
    if ls.preset is not None and PRESET_FORMAT.get(ls.preset) == "rosbag2":
        return None         # a preset's channel the bag leaves empty is left out: seen on reading
    if ls.preset is None and ls.columns is None and ls.topics is None and ls.file is not None \
            and ls.file.suffix.lower() == ".npz":
        try:
            import numpy as np
            with np.load(ls.file, allow_pickle=False) as z:
                files = set(z.files)
            if "header" not in files:
                return None
            chans |= {k for k in ("tau_j", "i_m", "tau_m") if k in files}
        except Exception:  # noqa: BLE001 -- an unreadable file is reported when read
            return None
    elif ls.preset == "text_per_signal" or (ls.columns is None and ls.preset is None
                                            and ls.topics is None):
        return None
    return "tau_j" in chans, bool(chans & {"i_m", "tau_m"})


def check_log_signals(scn: Scenario, ctx) -> None:
    """An explicit identification.joint_model the excitation log cannot support is refused at
    load, naming the missing signal."""
    from .signals import resolve_joint_model
    ls = scn.fit.excitation
    if ls is None or scn.identification.joint_model == "auto":
        return
    sig = _log_signals(scn, ls)
    if sig is None:
        return
    try:
        resolve_joint_model(scn.identification.joint_model, *sig)
    except ValueError as exc:
        raise ctx.error(("identification", "joint_model"), f"{exc} (log {ls.file})") from None
