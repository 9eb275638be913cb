"""Sampled trajectories for an arm's own controller: tables and ready-to-play programs.

A Fourier trajectory (identify.excitation.fourier) is exact at any t; a vendor's controller plays
a table of set points. This module samples a trajectory at a fixed rate, re-checks the arm's
limits on exactly those samples, and writes the forms controllers read (docs/controllers.md):

    <stem>.csv / <stem>.npz    t [s], q [rad], qd [rad/s], qdd [rad/s^2] per joint (default 1 kHz)
    <stem>.script              URScript: movej to the start pose, then servoj at 500 Hz (e-series)
    <stem>_franka_1khz.csv     t and q only at 1 kHz, for the libfranka example franka_play.cpp
    <stem>_ros2_goal.yaml      control_msgs/action/FollowJointTrajectory goal (positions,
                               velocities, accelerations, time_from_start), 100 Hz by default

:class:`SampledTrajectory` reads any of these tables back and implements the backend's
trajectory protocol (duration, n_joints, evaluate(t)) by piecewise quintic Hermite interpolation
of (q, qd, qdd): it reproduces the samples exactly and is C2 between them, so a table can be
replayed on the twin and fitted like the trajectory it came from.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from identify.common.fileio import atomic_savez, atomic_write_text

from .conditioning import limit_violation

#: rates of the written forms [Hz]: the sampled table, URScript servoj (e-series control
#: loop), the Franka table (libfranka's 1 kHz loop), the ROS 2 goal (the controller interpolates)
DEFAULT_RATE_HZ = 1000.0
UR_RATE_HZ = 500.0
FRANKA_RATE_HZ = 1000.0
ROS_RATE_HZ = 100.0

#: |qd|, |qdd| at the first and last sample below which a trajectory counts as at rest
REST_TOL = 1e-6

# quintic Hermite basis on s in [0, 1]: rows p0, h v0, h^2 a0, p1, h v1, h^2 a1; columns s^0..s^5
_HERMITE = np.array([
    [1, 0, 0, -10, 15, -6],
    [0, 1, 0, -6, 8, -3],
    [0, 0, 0.5, -1.5, 1.5, -0.5],
    [0, 0, 0, 10, -15, 6],
    [0, 0, 0, -4, 7, -3],
    [0, 0, 0, 0.5, -1, 0.5]], float)


@dataclass(frozen=True, eq=False)
class SampledTrajectory:
    """A trajectory given by samples (implements identify.backend.interface.Trajectory).

    Attributes:
        t: (N,) strictly increasing sample times [s], t[0] = 0.
        q, qd, qdd: (N, n) position [rad], velocity [rad/s], acceleration [rad/s^2].
        joint_names: (n,) joint names, or None.
    """
    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    joint_names: tuple[str, ...] | None = None

    def __post_init__(self):
        t = np.asarray(self.t, float).reshape(-1)
        arrs = [np.asarray(getattr(self, k), float) for k in ("q", "qd", "qdd")]
        if t.size < 2 or np.any(np.diff(t) <= 0) or abs(t[0]) > 1e-12:
            raise ValueError("SampledTrajectory: t must start at 0 and increase strictly "
                             f"(got {t.size} samples)")
        for k, a in zip(("q", "qd", "qdd"), arrs):
            if a.ndim != 2 or a.shape[0] != t.size or a.shape != arrs[0].shape:
                raise ValueError(f"SampledTrajectory: {k} has shape {a.shape}, need "
                                 f"({t.size}, n) like q {arrs[0].shape}")
            if not np.all(np.isfinite(a)):
                i = int(np.argwhere(~np.isfinite(a))[0, 0])
                raise ValueError(f"SampledTrajectory: {k} is not finite at sample {i}")
        for k, a in zip(("t", "q", "qd", "qdd"), [t] + arrs):
            object.__setattr__(self, k, a)
        if self.joint_names is not None:
            names = tuple(str(n) for n in self.joint_names)
            if len(names) != self.n_joints:
                raise ValueError(f"SampledTrajectory: {len(names)} joint names for "
                                 f"{self.n_joints} joints")
            object.__setattr__(self, "joint_names", names)

    @property
    def n_joints(self) -> int:
        return int(self.q.shape[1])

    @property
    def duration(self) -> float:
        """t[-1] [s]."""
        return float(self.t[-1])

    @property
    def period(self) -> float:
        """The whole table is one period (for helpers that sample one period) [s]."""
        return self.duration

    @property
    def rate_hz(self) -> float:
        """Mean sample rate (N - 1) / duration [Hz]."""
        return (self.t.size - 1) / self.duration

    def evaluate(self, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """q, qd, qdd at times t (M,) [s] -> 3 x (M, n); t is clipped to [0, duration] (at rest
        before and after when the table starts and ends at rest)."""
        t = np.clip(np.asarray(t, float).reshape(-1), 0.0, self.duration)
        i = np.clip(np.searchsorted(self.t, t, side="right") - 1, 0, self.t.size - 2)
        h = (self.t[i + 1] - self.t[i])[:, None]                         # (M, 1)
        s = (t - self.t[i])[:, None] / h
        ends = np.stack([self.q[i], h * self.qd[i], h * h * self.qdd[i],
                         self.q[i + 1], h * self.qd[i + 1], h * h * self.qdd[i + 1]])  # (6, M, n)
        pw = np.arange(6)
        out = []
        for d in range(3):            # d-th derivative of s^p: p!/(p-d)! s^(p-d)
            fac = np.array([math.perm(p, d) for p in pw], float)
            mono = fac * s ** np.maximum(pw - d, 0) * (pw >= d)           # (M, 6)
            basis = mono @ _HERMITE.T                                     # (M, 6): per end value
            out.append(np.einsum("mk,kmn->mn", basis, ends) / h ** d)
        return out[0], out[1], out[2]


#: number format of the text forms: 12 significant digits (1e-12 relative; the NPZ is exact)
_FMT = "%.12g"


def _rows(data: np.ndarray, sep: str) -> str:
    """(N, k) numbers as N lines of k :data:`_FMT` numbers joined by `sep`."""
    fmt = sep.join([_FMT] * data.shape[1])
    return "\n".join(fmt % tuple(r) for r in data.tolist())


def sample(traj, rate_hz: float = DEFAULT_RATE_HZ, joint_names=None) -> SampledTrajectory:
    """`traj` (any Trajectory) sampled at `rate_hz` [Hz] over its duration, end point included
    (the duration is rounded to whole samples)."""
    if not (rate_hz > 0 and np.isfinite(rate_hz)):
        raise ValueError(f"sample rate must be a positive number of Hz, got {rate_hz!r}")
    n = int(round(float(traj.duration) * rate_hz))
    t = np.arange(n + 1) / float(rate_hz)
    q, qd, qdd = traj.evaluate(t)
    names = joint_names if joint_names is not None else getattr(traj, "joint_names", None)
    return SampledTrajectory(t, q, qd, qdd, names)


def _names(s: SampledTrajectory, joint_names=None) -> list[str]:
    names = joint_names if joint_names is not None else s.joint_names
    return list(names) if names is not None else [f"joint{i + 1}" for i in range(s.n_joints)]


def check_samples(s: SampledTrajectory, limits, joint_names=None, *, what: str = "trajectory",
                  tol: float = 1e-9) -> None:
    """Raise ValueError naming the joint, quantity and sample where the samples leave `limits`
    (identify.model.robot_model.Limits: q_min, q_max, qd_max, qdd_max (n,), SI) or do not start
    and end at rest (|qd|, |qdd| <= REST_TOL)."""
    names = _names(s, joint_names)
    bad = limit_violation((("q", s.q, limits.q_min, limits.q_max),
                           ("qd", s.qd, -np.asarray(limits.qd_max), limits.qd_max),
                           ("qdd", s.qdd, -np.asarray(limits.qdd_max), limits.qdd_max)), tol)
    if bad is not None:
        label, k, j, v, lo, hi = bad
        raise ValueError(f"{what}: {label} of {names[j]} leaves its limits at sample {k} "
                         f"(t = {s.t[k]:.4f} s): {v:.6g} not in [{lo:.6g}, {hi:.6g}]")
    for k in (0, s.t.size - 1):
        for label, v in (("qd", s.qd[k]), ("qdd", s.qdd[k])):
            if np.any(np.abs(v) > REST_TOL):
                j = int(np.argmax(np.abs(v)))
                raise ValueError(f"{what}: not at rest at sample {k} (t = {s.t[k]:.4f} s): "
                                 f"{label} of {names[j]} = {v[j]:.3g}")


# -- tables ----------------------------------------------------------------------------------
def write_table(s: SampledTrajectory, path, joint_names=None, *, derivatives: bool = True) -> Path:
    """CSV (header ``t,q_<joint>...,qd_<joint>...,qdd_<joint>...``; ``t,q_<joint>...`` without
    `derivatives`) or NPZ (arrays t, q, qd, qdd, joint_names) by the suffix of `path`."""
    path, names = Path(path), _names(s, joint_names)
    if path.suffix == ".npz":
        atomic_savez(path, {"t": s.t, "q": s.q, "qd": s.qd, "qdd": s.qdd,
                            "joint_names": np.array(names)})
        return path
    parts = [("q", s.q)] + ([("qd", s.qd), ("qdd", s.qdd)] if derivatives else [])
    head = ",".join(["t"] + [f"{k}_{n}" for k, _ in parts for n in names])
    data = np.column_stack([s.t] + [a for _, a in parts])
    rows = _rows(data, ",")
    atomic_write_text(path, f"{head}\n{rows}\n")
    return path


def read_table(path) -> SampledTrajectory:
    """A table written by :func:`write_table` (CSV or NPZ). A CSV without qd / qdd columns gets
    them by finite differences (np.gradient, second order). Raises ValueError naming the file
    and column at fault."""
    path = Path(path)
    if path.suffix == ".npz":
        with np.load(path, allow_pickle=False) as z:
            return SampledTrajectory(z["t"], z["q"], z["qd"], z["qdd"],
                                     tuple(str(n) for n in z["joint_names"]))
    with open(path, encoding="utf-8") as f:
        head = f.readline().strip().split(",")
    data = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    if head[0] != "t" or data.shape[1] != len(head):
        raise ValueError(f"{path}: header must start with t and name every column "
                         f"({len(head)} names, {data.shape[1]} columns)")
    names = [h[2:] for h in head if h.startswith("q_")]
    cols = {h: data[:, i] for i, h in enumerate(head)}
    t = cols["t"]
    q = np.column_stack([cols[f"q_{n}"] for n in names])
    if all(f"qd_{n}" in cols for n in names) and all(f"qdd_{n}" in cols for n in names):
        qd = np.column_stack([cols[f"qd_{n}"] for n in names])
        qdd = np.column_stack([cols[f"qdd_{n}"] for n in names])
        return SampledTrajectory(t, q, qd, qdd, tuple(names))
    return from_positions(t, q, names)


def from_positions(t, q, joint_names=None) -> SampledTrajectory:
    """A table of positions only (t (N,) [s], q (N, n) [rad]: the URScript and Franka forms),
    qd and qdd by second-order finite differences (np.gradient) -- what a position-controlled
    arm is asked to follow."""
    t, q = np.asarray(t, float), np.asarray(q, float)
    qd = np.gradient(q, t, axis=0, edge_order=2)
    qdd = np.gradient(qd, t, axis=0, edge_order=2)
    return SampledTrajectory(t, q, qd, qdd, None if joint_names is None else tuple(joint_names))


# -- URScript ----------------------------------------------------------------------------------
def urscript(s: SampledTrajectory, *, name: str = "twinid_trajectory", lookahead_s: float = 0.03,
             gain: float = 1000.0, move_speed: float = 0.2, move_acc: float = 0.5) -> str:
    """A URScript program playing `s` (sampled at 500 Hz, see :data:`UR_RATE_HZ`): movej to the
    start pose at `move_speed` [rad/s] / `move_acc` [rad/s^2], then one ``servoj(q, t=0.002,
    lookahead_time, gain)`` per sample, then stopj. Joint angles in rad, base to wrist 3."""
    if s.n_joints != 6:
        raise ValueError(f"URScript: a UR arm has 6 joints, the trajectory has {s.n_joints}")
    dt = 1.0 / UR_RATE_HZ
    if np.max(np.abs(np.diff(s.t) - dt)) > 1e-9:
        raise ValueError(f"URScript: samples must be {UR_RATE_HZ:g} Hz (servoj t = {dt:g} s)")
    fmt = lambda q: "[" + _rows(np.asarray(q)[None], ", ") + "]"  # noqa: E731
    lines = [f"def {name}():",
             f"  # written by twinid: {s.t.size} set points at {UR_RATE_HZ:g} Hz, "
             f"{s.duration:.3f} s; q in rad",
             f"  movej({fmt(s.q[0])}, a={move_acc:g}, v={move_speed:g})"]
    tail = f"], t={dt:g}, lookahead_time={lookahead_s:g}, gain={gain:g})"
    lines += [f"  servoj([{row}{tail}" for row in _rows(s.q, ", ").split("\n")]
    lines += ["  stopj(2.0)", "end", f"{name}()", ""]
    return "\n".join(lines)


def parse_urscript(text: str) -> np.ndarray:
    """The (N, 6) servoj set points of a program written by :func:`urscript` [rad]."""
    rows = [line.split("[", 1)[1].split("]", 1)[0] for line in text.splitlines()
            if line.strip().startswith("servoj(")]
    return np.array([[float(x) for x in r.split(",")] for r in rows], float)


# -- ROS 2 ---------------------------------------------------------------------------------------
def ros2_goal(s: SampledTrajectory, joint_names=None) -> str:
    """A ``control_msgs/action/FollowJointTrajectory`` goal (YAML) with every sample as a point
    (positions [rad], velocities [rad/s], accelerations [rad/s^2], time_from_start); send it
    with ``ros2 action send_goal <controller>/follow_joint_trajectory
    control_msgs/action/FollowJointTrajectory "$(cat <file>)"``. The first point is the start
    pose at time 0: the arm must be there already (joint_trajectory_controller rejects a jump)."""
    names = _names(s, joint_names)
    ns = np.round(s.t * 1e9).astype(np.int64)
    n = s.n_joints
    row = ("  - positions: [" + ", ".join([_FMT] * n) + "]\n    velocities: ["
           + ", ".join([_FMT] * n) + "]\n    accelerations: [" + ", ".join([_FMT] * n)
           + "]\n    time_from_start: {sec: %d, nanosec: %d}")
    data = np.column_stack([s.q, s.qd, s.qdd]).tolist()
    pts = "\n".join(row % (*r, k // 10**9, k % 10**9) for r, k in zip(data, ns.tolist()))
    head = ["# control_msgs/action/FollowJointTrajectory goal written by twinid",
            "trajectory:", "  joint_names: [" + ", ".join(names) + "]", "  points:"]
    return "\n".join(head) + "\n" + pts + "\n"


def parse_ros2_goal(text: str) -> SampledTrajectory:
    """The points of a goal written by :func:`ros2_goal` (any FollowJointTrajectory goal YAML
    with positions, velocities and accelerations in every point)."""
    import yaml
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    doc = yaml.load(text, Loader=loader)["trajectory"]
    pts = doc["points"]
    t = np.array([p["time_from_start"]["sec"] + 1e-9 * p["time_from_start"]["nanosec"]
                  for p in pts])
    arr = {k: np.array([p[k] for p in pts], float)
           for k in ("positions", "velocities", "accelerations")}
    return SampledTrajectory(t, arr["positions"], arr["velocities"], arr["accelerations"],
                             tuple(doc["joint_names"]))


# -- Franka --------------------------------------------------------------------------------------
FRANKA_EXAMPLE = r"""// franka_play.cpp -- written by twinid: play a 1 kHz joint table (t,q_1..q_7 [s, rad]) on a
// Franka arm with libfranka. Build (libfranka installed):
//   g++ -std=c++17 -O2 franka_play.cpp -lfranka -o franka_play
// Run: ./franka_play <robot-ip> <stem>_franka_1khz.csv
// Move the arm to the table's first pose first (e.g. libfranka's examples/generate_joint_position_motion
// style MotionGenerator); the table starts and ends at rest.
#include <franka/exception.h>
#include <franka/robot.h>
#include <array>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 3) { std::cerr << "usage: " << argv[0] << " <robot-ip> <table.csv>\n"; return 2; }
  std::ifstream in(argv[2]);
  std::string line;
  std::getline(in, line);                       // header: t,q_<joint1>,...,q_<joint7>
  std::vector<std::array<double, 7>> q;
  while (std::getline(in, line)) {
    std::stringstream ss(line);
    std::string cell;
    std::array<double, 7> row{};
    std::getline(ss, cell, ',');                // t, implied by the 1 kHz rate
    for (int j = 0; j < 7; ++j) {
      if (!std::getline(ss, cell, ',')) { std::cerr << "row " << q.size() << ": need 7 joints\n"; return 2; }
      row[j] = std::stod(cell);
    }
    q.push_back(row);
  }
  try {
    franka::Robot robot(argv[1]);
    robot.setCollisionBehavior({{20, 20, 18, 18, 16, 14, 12}}, {{20, 20, 18, 18, 16, 14, 12}},
                               {{20, 20, 20, 25, 25, 25}}, {{20, 20, 20, 25, 25, 25}});
    size_t k = 0;
    robot.control([&](const franka::RobotState&, franka::Duration period) -> franka::JointPositions {
      k += period.toMSec();                     // 1 kHz: one sample per millisecond
      if (k + 1 >= q.size()) return franka::MotionFinished(franka::JointPositions(q.back()));
      return franka::JointPositions(q[k]);
    });
  } catch (const franka::Exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}
"""


#: the forms :func:`export_trajectory` writes (keys of its `paths`)
FORMS = ("csv", "npz", "urscript", "franka_csv", "franka_example", "ros2_goal")


def export_trajectory(traj, paths: dict, limits, joint_names, *,
                      rate_hz: float = DEFAULT_RATE_HZ, name: str = "twinid_trajectory") -> dict:
    """Write every form of `traj` to `paths` (form -> file, :data:`FORMS`; the run folder's
    names are in identify.outputs.layout.sampled) after checking the `limits` and the rest at
    each form's own rate (:func:`check_samples`; ValueError naming joint and sample). The table
    at `rate_hz` [Hz] (CSV, NPZ), URScript at 500 Hz (6-joint arms only), the Franka table at
    1 kHz with the libfranka example, the ROS 2 goal at 100 Hz. Returns form -> file written,
    and "skipped" -> {form: reason}."""
    names = list(joint_names)
    for p in paths.values():
        Path(p).parent.mkdir(parents=True, exist_ok=True)

    def checked(rate):
        s = sample(traj, rate, names)
        check_samples(s, limits, names, what=f"{name} sampled at {rate:g} Hz")
        return s

    main = checked(rate_hz)
    out: dict = {"csv": write_table(main, paths["csv"], names),
                 "npz": write_table(main, paths["npz"], names), "skipped": {}}
    if len(names) == 6:
        atomic_write_text(paths["urscript"], urscript(checked(UR_RATE_HZ), name=_ident(name)))
        out["urscript"] = Path(paths["urscript"])
    else:
        out["skipped"]["urscript"] = f"a UR arm has 6 joints, this arm {len(names)}"
    # written for any arm (the twin's 6 joints replay it); franka_play.cpp refuses rows that do
    # not hold 7 joints
    out["franka_csv"] = write_table(checked(FRANKA_RATE_HZ), paths["franka_csv"], names,
                                    derivatives=False)
    atomic_write_text(paths["franka_example"], FRANKA_EXAMPLE)
    out["franka_example"] = Path(paths["franka_example"])
    atomic_write_text(paths["ros2_goal"], ros2_goal(checked(ROS_RATE_HZ), names))
    out["ros2_goal"] = Path(paths["ros2_goal"])
    return out


def _ident(stem: str) -> str:
    """`stem` as a URScript function name."""
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in stem)
    return out if out[:1].isalpha() else f"t_{out}"
