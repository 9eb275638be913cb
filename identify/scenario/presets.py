"""Column presets of common logging tools: a preset is a named column map, per signal the base
name of its columns; :func:`preset_columns` expands it for n joints against a file's header.

| preset | tool | time | q | qd | tau_j | i_m |
|---|---|---|---|---|---|---|
| ``ur_rtde`` | Universal Robots RTDE CSV export (``record.py``, space or comma separated) | ``timestamp`` | ``actual_q_<j>`` | ``actual_qd_<j>`` | -- | ``actual_current_<j>`` |
| ``libfranka`` | libfranka-style logs of ``franka::RobotState`` (CSV with header, or NPZ) | ``time`` | ``q`` | ``dq`` | ``tau_J`` | -- |
| ``text_per_signal`` | one text file per signal, one value per line, n lines per sample | ``time.txt`` | ``q.txt`` | ``qd.txt`` | ``tau_j.txt`` | ``i_m.txt`` (and ``tau_m.txt``) |
| ``ros2_joint_states`` | a rosbag2 of ``sensor_msgs/msg/JointState`` (ros2_control's joint_state_broadcaster), effort = joint torque | ``header.stamp`` | ``/joint_states`` position | ``/joint_states`` velocity | ``/joint_states`` effort | -- |

CSV header names of a joint's column are accepted as ``<base>_<j>``, ``<base><j>``,
``<base>[<j>]`` or ``<base>.<j>`` (j = 0..n-1); in an NPZ file ``<base>`` may be one (N, n)
array. Columns the scenario maps explicitly override the preset's; channels of a preset that the
file does not have are left out (text files: a missing file; CSV: a missing header name; rosbag2:
a topic whose messages leave that field empty). A rosbag2 preset maps channels to topics
(``fit.*.topics`` given explicitly override them)."""
from __future__ import annotations

__all__ = ["PRESETS", "preset_channels", "joint_column_candidates"]

PRESETS: dict[str, dict[str, str]] = {
    "ur_rtde": {"time": "timestamp", "q": "actual_q", "qd": "actual_qd", "i_m": "actual_current"},
    "libfranka": {"time": "time", "q": "q", "qd": "dq", "tau_j": "tau_J"},
    "text_per_signal": {"time": "time.txt", "q": "q.txt", "qd": "qd.txt", "tau_j": "tau_j.txt",
                        "i_m": "i_m.txt", "tau_m": "tau_m.txt"},
    "ros2_joint_states": {"q": "/joint_states", "qd": "/joint_states", "tau_j": "/joint_states"},
}

#: the format each preset implies when the scenario says format: auto
PRESET_FORMAT = {"ur_rtde": "csv", "libfranka": None, "text_per_signal": "text",
                 "ros2_joint_states": "rosbag2"}


def preset_channels(name: str) -> tuple[str, ...]:
    """Channels (q, qd, tau_j, i_m, tau_m) a preset can map."""
    return tuple(k for k in PRESETS[name] if k != "time")


def joint_column_candidates(base: str, j: int) -> tuple[str, ...]:
    """Header names accepted for joint j (0-based) of the column family `base`."""
    return (f"{base}_{j}", f"{base}{j}", f"{base}[{j}]", f"{base}.{j}")
