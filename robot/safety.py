"""Safety of a run on the physical arm: checks before the bus is touched, per-cycle fault
detection, and the safe-stop sequence.

* :func:`check_trajectory` -- position, velocity, acceleration, torque (rigid-body inverse dynamics
  of the planned trajectory via ``RobotModel.inverse_dynamics``, or a given per-sample torque such
  as the motor-torque bound of :mod:`robot.torque_bound`) and per-cycle position-step limits of a
  sampled command, all at once (vectorized). Raises ValueError naming joint, sample and time.
* :func:`run_limits` -- the limits a run may use (``identify.model.robot_model.Limits``); :func:`step_limit`
  -- the per-cycle position step, never above the velocity limit.
* :class:`FaultMonitor` -- one ``update`` per cycle: drive fault bit, working-counter drop (a
  consecutive budget), lost frames (a budget per sliding window), slave lost, position/velocity
  limit breach, following error, stalled loop.
* :class:`StopSequence` -- the defined stop: hold the last measured pose for ``hold_cycles``
  (policy ``hold``) then disable the drives one per cycle from the distal joint to the base, then
  wait at most ``confirm_cycles`` for the statuswords to confirm. Bounded by
  :attr:`StopSequence.max_cycles`.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from identify.model.robot_model import Limits

from .drive import cia402
from .faults import DEFAULT_POLICY, Fault  # noqa: F401 -- re-exported


class SafetyError(RuntimeError):
    """A run was refused or stopped for safety reasons."""


class SafetyRefused(SafetyError, ValueError):
    """Refused before anything moved (not armed, ...). A ValueError, as the Backend protocol
    asks for refusals, so the pipeline reports it as a safety refusal (CLI exit code 4)."""


def run_limits(model, scale: float = 1.0, position_margin: float = 0.0) -> Limits:
    """The limits a run may use (identify.model.robot_model.Limits, SI): the model's limits with velocity,
    acceleration and torque scaled by `scale` (0 < scale <= 1) and the position range shrunk by
    `position_margin` [rad] at both ends."""
    if not 0 < scale <= 1:
        raise ValueError(f"limits scale must be in (0, 1], got {scale!r}")
    lim = model.limits
    return Limits(np.asarray(lim.q_min, float) + position_margin,
                  np.asarray(lim.q_max, float) - position_margin,
                  scale * np.asarray(lim.qd_max, float),
                  scale * np.asarray(lim.qdd_max, float),
                  scale * np.asarray(lim.tau_max, float))


#: the per-cycle step may exceed qd_max * dt by this factor (acceleration term of a sampled motion)
STEP_VELOCITY_FACTOR = 1.2


def step_limit(configured: float, qd_max: np.ndarray, dt: float) -> np.ndarray:
    """(n,) largest commanded position change per cycle [rad]: min(configured,
    1.2 * qd_max * dt) per joint, so the per-cycle guard never allows more than the joint's
    velocity limit [rad/s] (+20 %); `dt` the cycle time [s]."""
    qd_max = np.asarray(qd_max, float)
    return np.minimum(float(configured), STEP_VELOCITY_FACTOR * qd_max * float(dt))


def _first_violation(excess: np.ndarray):
    """(N, n) boolean -> (sample, joint) of the first True in time order, or None."""
    if not excess.any():
        return None
    k, j = np.argwhere(excess)[0]
    return int(k), int(j)


def check_trajectory(t: np.ndarray, q: np.ndarray, qd: np.ndarray, qdd: np.ndarray,
                     limits: Limits, joint_names: list[str], *, model=None,
                     step_max: np.ndarray | float | None = None,
                     tau: np.ndarray | None = None,
                     tau_label: str = "torque (rigid-body inverse dynamics)") -> dict:
    """Check a sampled joint trajectory against `limits` before anything moves.

    Args:
        t: (N,) [s]; q, qd, qdd: (N, n) [rad, rad/s, rad/s^2] as commanded.
        model: object with ``inverse_dynamics(q, qd, qdd) -> (N, n)`` [N*m] for the torque check
            (rigid body only; friction adds to it on the arm). Skipped if None and `tau` is None.
        step_max: largest allowed |q[k+1] - q[k]| per joint [rad] (the per-cycle position step,
            when the samples are the cycle's commands).
        tau: joint torques (N, n) [N*m] instead of `model`, or a callable (q, qd, qdd) -> (N, n)
            evaluated after the inputs are checked (e.g. the motor-torque bound of
            robot.torque_bound); checked against limits.tau_max; `tau_label` names it in errors.
    Returns: dict of the worst use of each limit, as fractions (1.0 = at the limit) per joint.
    Raises: ValueError naming the limit, joint, sample and time of the first violation.
    """
    t = np.asarray(t, float)
    q, qd, qdd = (np.asarray(a, float) for a in (q, qd, qdd))
    n = len(joint_names)
    for name, a in (("q", q), ("qd", qd), ("qdd", qdd)):
        if a.ndim != 2 or a.shape != (t.shape[0], n):
            raise ValueError(f"trajectory {name} has shape {a.shape}, expected ({t.shape[0]}, {n})")
        bad = _first_violation(~np.isfinite(a))
        if bad:
            raise ValueError(f"trajectory {name} is not finite at joint {joint_names[bad[1]]}, "
                             f"sample {bad[0]} (t={t[bad[0]]:.4f} s)")

    def fail(what, a, lim, k, j, unit):
        raise ValueError(f"trajectory exceeds the {what} limit at joint {joint_names[j]}, sample {k} "
                         f"(t={t[k]:.4f} s): {a[k, j]:.6g} {unit} vs limit {lim[j]:.6g} {unit}")

    bad = _first_violation(q < limits.q_min)
    if bad:
        fail("lower position", q, limits.q_min, *bad, "rad")
    bad = _first_violation(q > limits.q_max)
    if bad:
        fail("upper position", q, limits.q_max, *bad, "rad")
    bad = _first_violation(np.abs(qd) > limits.qd_max)
    if bad:
        fail("velocity", qd, limits.qd_max, *bad, "rad/s")
    bad = _first_violation(np.abs(qdd) > limits.qdd_max)
    if bad:
        fail("acceleration", qdd, limits.qdd_max, *bad, "rad/s^2")
    usage = {"qd": np.max(np.abs(qd), axis=0) / limits.qd_max,
             "qdd": np.max(np.abs(qdd), axis=0) / limits.qdd_max}
    if step_max is not None and q.shape[0] > 1:
        step = np.abs(np.diff(q, axis=0))
        sm = np.broadcast_to(np.asarray(step_max, float), (n,))
        bad = _first_violation(step > sm)
        if bad:
            k, j = bad
            raise ValueError(f"trajectory exceeds the per-cycle position step limit at joint "
                             f"{joint_names[j]}, sample {k + 1} (t={t[k + 1]:.4f} s): step "
                             f"{step[k, j]:.6g} rad vs limit {sm[j]:.6g} rad")
        usage["step"] = np.max(step, axis=0) / sm
    if tau is None and model is not None:
        tau = np.asarray(model.inverse_dynamics(q, qd, qdd), float).reshape(q.shape)
    elif callable(tau):
        tau = np.asarray(tau(q, qd, qdd), float).reshape(q.shape)
    if tau is not None:
        bad = _first_violation(np.abs(tau) > limits.tau_max)
        if bad:
            fail(tau_label, tau, limits.tau_max, *bad, "N*m")
        usage["tau"] = np.max(np.abs(tau), axis=0) / limits.tau_max
    return usage


def limit_step(prev: np.ndarray, desired: np.ndarray, step_max: np.ndarray) -> np.ndarray:
    """Per-cycle position-step limiter: move from `prev` towards `desired` by at most `step_max`."""
    return prev + np.clip(desired - prev, -step_max, step_max)


# -- run-time faults ------------------------------------------------------------------------------
@dataclass
class FaultEvent:
    fault: Fault
    cycle: int
    message: str


class FaultMonitor:
    """Per-cycle fault detection. Call :meth:`update` once per cycle; returns a FaultEvent (the
    first fault; later calls keep returning None) or None.

    Args:
        joint_names: model joint order (for messages); arrays passed to update are in this order.
        limits: position/velocity limits checked on the measured state (a breach is a fault).
        following_error_max: (n,) or scalar [rad].
        wkc_error_budget: consecutive cycles with 0 < wkc < expected tolerated.
        lost_frame_budget, lost_frame_window: lost frames (wkc <= 0) tolerated per window [cycles].
        stall_cycles: a cycle starting more than this many periods late is a stall.
    """

    def __init__(self, joint_names, limits: Limits | None, following_error_max,
                 wkc_error_budget: int, lost_frame_budget: int, lost_frame_window: int,
                 stall_cycles: int):
        self.joint_names = list(joint_names)
        self.limits = limits
        self.fe_max = np.broadcast_to(np.asarray(following_error_max, float), (len(joint_names),))
        self.wkc_budget = int(wkc_error_budget)
        self.lost_budget = int(lost_frame_budget)
        self.window = int(lost_frame_window)
        self.stall_cycles = int(stall_cycles)
        self._wkc_run = 0
        self._lost_cycles: list[int] = []
        self.lost_total = 0
        self.wkc_total = 0
        self.fired: FaultEvent | None = None

    def _fire(self, fault, cycle, msg):
        self.fired = FaultEvent(fault, cycle, msg)
        return self.fired

    def update(self, cycle: int, wkc: int, expected_wkc: int, statusword=None, error_code=None,
               q=None, qd=None, q_cmd=None, late_periods: float = 0.0, lost_slaves=(),
               check_following: bool = True, expect_enabled: bool = False,
               mode=None) -> FaultEvent | None:
        """One cycle's observations (arrays (n,) in joint order; q/qd [rad, rad/s]; q_cmd the
        command the drives are following [rad]). Data from a cycle whose frame was lost or whose
        working counter is short are not trusted for the state checks.

        expect_enabled: every drive must be in OPERATION ENABLED (the full statusword state is
        checked: a drive that leaves it without a fault -- STO, drive-side quick stop, switch-on
        disabled -- is a DRIVE_DISABLED fault, also at standstill). mode: 0x6061 per drive; any
        value other than CSP (8) is a MODE_CHANGED fault."""
        if self.fired is not None:
            return None
        if late_periods > self.stall_cycles:
            return self._fire(Fault.STALLED_LOOP, cycle,
                              f"cycle {cycle} started {late_periods:.1f} periods late "
                              f"(stall limit {self.stall_cycles})")
        if lost_slaves:
            return self._fire(Fault.SLAVE_LOST, cycle, f"cycle {cycle}: slave(s) lost: "
                              + ", ".join(str(s) for s in lost_slaves))
        if wkc <= 0:   # no frame back
            self.lost_total += 1
            self._lost_cycles.append(cycle)
            while self._lost_cycles and self._lost_cycles[0] <= cycle - self.window:
                self._lost_cycles.pop(0)
            if len(self._lost_cycles) > self.lost_budget:
                return self._fire(Fault.LOST_FRAMES, cycle,
                                  f"cycle {cycle}: {len(self._lost_cycles)} lost frames within "
                                  f"{self.window} cycles (budget {self.lost_budget})")
            return None
        if wkc != expected_wkc:
            self.wkc_total += 1
            self._wkc_run += 1
            if self._wkc_run > self.wkc_budget:
                return self._fire(Fault.WKC_DROP, cycle,
                                  f"cycle {cycle}: working counter {wkc} != expected {expected_wkc} "
                                  f"for {self._wkc_run} consecutive cycles (budget {self.wkc_budget})")
            return None
        self._wkc_run = 0
        if statusword is not None:
            f = cia402.is_fault(statusword)
            if f.any():
                j = int(np.argmax(f))
                ec = f", error code {int(np.asarray(error_code)[j]):#06x}" if error_code is not None else ""
                names = [self.joint_names[k] for k in np.flatnonzero(f)]
                return self._fire(Fault.DRIVE_FAULT, cycle,
                                  f"cycle {cycle}: drive fault on {', '.join(names)} (statusword "
                                  f"{int(np.asarray(statusword)[j]):#06x}{ec})")
            if expect_enabled:
                ev = self._left_enabled(cycle, statusword)
                if ev is not None:
                    return ev
        if mode is not None:
            bad = np.asarray(mode) != cia402.MODE_CSP
            if bad.any():
                j = int(np.argmax(bad))
                return self._fire(Fault.MODE_CHANGED, cycle,
                                  f"cycle {cycle}: joint {self.joint_names[j]} reports mode of "
                                  f"operation {int(np.asarray(mode)[j])} (0x6061), not CSP (8)")
        if q is not None and self.limits is not None:
            lim = self.limits
            bad = (q < lim.q_min) | (q > lim.q_max)
            if qd is not None:
                bad |= np.abs(qd) > lim.qd_max
            if bad.any():
                j = int(np.argmax(bad))
                v = f", qd={qd[j]:.4f} rad/s (max {lim.qd_max[j]:.4f})" if qd is not None else ""
                return self._fire(Fault.LIMIT_BREACH, cycle,
                                  f"cycle {cycle}: joint {self.joint_names[j]} outside its limits: "
                                  f"q={q[j]:.4f} rad in [{lim.q_min[j]:.4f}, {lim.q_max[j]:.4f}]{v}")
        if check_following and q is not None and q_cmd is not None:
            e = np.abs(np.asarray(q_cmd) - q)
            bad = e > self.fe_max
            if bad.any():
                j = int(np.argmax(bad))
                return self._fire(Fault.FOLLOWING_ERROR, cycle,
                                  f"cycle {cycle}: following error {e[j]:.4f} rad at joint "
                                  f"{self.joint_names[j]} (limit {self.fe_max[j]:.4f} rad)")
        return None


    def _left_enabled(self, cycle, statusword):
        st = cia402.decode_state(statusword)
        off = st != cia402.State.OPERATION_ENABLED
        if not off.any():
            return None
        parts = []
        for j in np.flatnonzero(off):
            parts.append(f"{self.joint_names[j]} is {cia402.explain_state(int(st[j]))} "
                         f"(statusword {int(np.asarray(statusword)[j]):#06x})")
        return self._fire(Fault.DRIVE_DISABLED, cycle,
                          f"cycle {cycle}: drive left OPERATION ENABLED without a fault: "
                          + "; ".join(parts))


class StopSequence:
    """The defined safe stop, one :meth:`step` per cycle (controlwords in joint order).

    1. halt (policy "hold"): ``hold_cycles`` cycles with the drives enabled (0x0F) and commanded
       to `hold_q` (the last valid measured pose) -- in CSP, holding the pose is the halt;
    2. per drive, in `order` (default distal joint first, base last), one drive starting per
       cycle: disable operation (0x07, OPERATION ENABLED -> SWITCHED ON: the drive engages its
       brake and still holds torque) for ``brake_cycles`` cycles (the configured brake delay),
       then shutdown (0x06, -> READY TO SWITCH ON: power off);
    3. at most ``confirm_cycles`` cycles waiting for every statusword to report a powerless state.
    ``done`` after at most :attr:`max_cycles` steps, whatever the drives report.
    """

    def __init__(self, n: int, hold_q: np.ndarray, hold_cycles: int, confirm_cycles: int,
                 policy: str = "hold", order: list[int] | None = None, brake_cycles: int = 1):
        if policy not in ("hold", "disable"):
            raise ValueError(f"stop policy must be 'hold' or 'disable', got {policy!r}")
        self.n = n
        self.hold_q = np.array(hold_q, float)
        self.hold_cycles = int(hold_cycles) if policy == "hold" else 0
        self.brake_cycles = max(1, int(brake_cycles))
        self.confirm_cycles = int(confirm_cycles)
        self.order = list(order) if order is not None else list(range(n - 1, -1, -1))
        self._rank = np.empty(n, int)
        self._rank[self.order] = np.arange(n)
        self.k = 0
        self.done = False
        self.confirmed = False

    @property
    def max_cycles(self) -> int:
        return self.hold_cycles + self.n + self.brake_cycles + self.confirm_cycles

    def step(self, statusword=None) -> tuple[np.ndarray, np.ndarray]:
        """Next (controlword (n,) int, target q (n,) rad) in joint order; sets `done`."""
        m = self.k - self.hold_cycles - self._rank      # cycles since each drive's turn began
        cw = np.where(m < 0, cia402.CW_ENABLE_OPERATION,
                      np.where(m < self.brake_cycles, cia402.CW_SWITCH_ON, cia402.CW_SHUTDOWN))
        cw = cw.astype(np.int64)
        if statusword is not None and np.all(m >= self.brake_cycles):
            if np.all(cia402.is_disabled(statusword)):
                self.confirmed = True
                self.done = True
        self.k += 1
        if self.k >= self.max_cycles:
            self.done = True
        return cw, self.hold_q.copy()


class FeedbackCheck:
    """Plausibility of feedback and effort, one :meth:`update` per cycle with a complete frame
    (arrays (n,) in joint order, SI):

    * frozen encoder: the command moves faster than ``moving_rad_s`` while the measured position
      has not changed by a count for ``cycles`` consecutive cycles;
    * jumping encoder: the measured position changed faster than ``jump_factor`` x the velocity
      limit since the last complete frame (physically impossible);
    * torque: |actual torque| (0x6077, link side) at or above ``tau_limit`` (what 0x6072 was set
      to: a drive honouring it saturates there) for ``torque_cycles`` consecutive cycles (20:
      a sustained overload, not the transient of a velocity step);
    * warnings (statusword bit 7): counted per joint, first cycle kept (``warnings``), no stop.
    """

    def __init__(self, joint_names, qd_max, resolution_rad, tau_limit, dt: float, cycles: int = 10,
                 moving_rad_s: float = 0.05, jump_factor: float = 3.0, torque_cycles: int = 20):
        self.names = list(joint_names)
        n = len(self.names)
        self.qd_max = np.broadcast_to(np.asarray(qd_max, float), (n,))
        self.res = np.broadcast_to(np.asarray(resolution_rad, float), (n,))
        self.tau_limit = None if tau_limit is None else np.broadcast_to(np.asarray(tau_limit, float), (n,))
        self.dt, self.cycles, self.moving = float(dt), int(cycles), float(moving_rad_s)
        self.jump_factor, self.torque_cycles = float(jump_factor), int(torque_cycles)
        self._q_last = None
        self._c_last = None
        self._frozen = np.zeros(n, int)
        self._over = np.zeros(n, int)
        self.warnings: dict[str, dict] = {}

    def update(self, cycle: int, q, q_cmd_step, tau=None, statusword=None, enabled=None):
        """`q` measured [rad]; `q_cmd_step` this cycle's command change [rad]; `tau` actual
        torque [N*m] or None; `enabled` (n,) bool (only enabled drives are checked). Returns a
        FaultEvent (FEEDBACK, TORQUE_LIMIT) or None."""
        q = np.asarray(q, float)
        en = np.ones(q.shape, bool) if enabled is None else np.asarray(enabled, bool)
        if statusword is not None:
            self._note_warnings(cycle, np.asarray(statusword))
        ev = None
        if self._q_last is not None:
            k = max(1, cycle - self._c_last)
            dq = np.abs(q - self._q_last)
            jump = en & (dq > self.jump_factor * self.qd_max * self.dt * k)
            if jump.any():
                j = int(np.argmax(jump))
                ev = FaultEvent(Fault.FEEDBACK, cycle,
                                f"cycle {cycle}: feedback fault at joint {self.names[j]}: the encoder "
                                f"jumped {dq[j]:.5f} rad in {k} cycle(s) (more than {self.jump_factor:g} "
                                f"x the velocity limit {self.qd_max[j]:.3f} rad/s)")
            moving = np.abs(np.asarray(q_cmd_step, float)) > self.moving * self.dt
            still = dq < 0.5 * self.res
            self._frozen = np.where(en & moving & still, self._frozen + 1, 0)
            if ev is None and (self._frozen >= self.cycles).any():
                j = int(np.argmax(self._frozen))
                ev = FaultEvent(Fault.FEEDBACK, cycle,
                                f"cycle {cycle}: feedback fault at joint {self.names[j]}: the encoder "
                                f"reads the same position for {self._frozen[j]} cycles while the "
                                f"command moves (frozen encoder)")
        self._q_last, self._c_last = q.copy(), cycle
        if ev is None and tau is not None and self.tau_limit is not None:
            over = en & (np.abs(np.asarray(tau, float)) >= self.tau_limit)
            self._over = np.where(over, self._over + 1, 0)
            if (self._over >= self.torque_cycles).any():
                j = int(np.argmax(self._over))
                ev = FaultEvent(Fault.TORQUE_LIMIT, cycle,
                                f"cycle {cycle}: joint {self.names[j]} actual torque (0x6077) "
                                f"{float(np.asarray(tau)[j]):.2f} N*m beyond its limit "
                                f"{self.tau_limit[j]:.2f} N*m (0x6072) for {self._over[j]} cycles")
        return ev

    def _note_warnings(self, cycle, sw):
        w = (sw.astype(np.int64) & cia402.SW_WARNING) != 0
        for j in np.flatnonzero(w):
            d = self.warnings.setdefault(self.names[j], {"first_cycle": cycle, "cycles": 0,
                                                         "statusword": int(sw[j])})
            d["cycles"] += 1
