"""Feed-forward tracking: the same trajectory, gains and sensor noise with no feed-forward (PID
only), the identified model's and the true model's torque feed-forward.

    rec = run_case(backend_name, arm, settings, trajectory, tau_ff)  # one closed-loop run
    case = tracking_case("identified_ff", rec, tau_ff, trajectory)   # its figures
    res = ClosedLoopResult(cases={...}, ...)                          # rendered by identify.outputs.render

Tracking error e = q - q_cmd per sample: the twin's true link angle (``state_source`` "truth";
sensor noise would otherwise set the floor), the encoder on hardware ("measured"). The torque the
PID had to supply is the motor torque minus the feed-forward (the twin's truth channels; on
hardware the measured motor torque minus the feed-forward at the sample's plan instant)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from identify.backend.arm import BackendArm
from identify.backend.interface import load_backend

__all__ = ["TrackingCase", "ClosedLoopResult", "run_case", "tracking_case", "CASES"]

#: case names, in report order
CASES = ("pid_only", "identified_ff", "true_ff")


@dataclass
class TrackingCase:
    """Figures of one closed-loop run. error_rms / max_error (n,) [rad], *_overall over all
    joints and samples; pid_torque_rms / pid_torque_max (n,) [N*m]; t (N,) [s] and error (N, n)
    [rad] kept for the plots (not rendered)."""
    name: str
    error_rms: np.ndarray
    error_rms_overall: float
    max_error: np.ndarray
    max_error_overall: float
    pid_torque_rms: np.ndarray
    pid_torque_rms_overall: float
    pid_torque_max: np.ndarray
    state_source: str
    model_source: str
    t: np.ndarray = field(repr=False, default=None)
    error: np.ndarray = field(repr=False, default=None)


@dataclass
class ClosedLoopResult:
    """The three cases (name -> TrackingCase; true_ff missing on hardware), the trajectory they
    ran, sample rate [Hz], and the goals: identified <= goal_vs_pid * PID-only and <= goal_vs_true
    * true model (tracking RMS)."""
    cases: dict
    trajectory: str
    sample_rate_hz: float
    joint_names: list
    goal_vs_pid: float = 0.2
    goal_vs_true: float = 1.2

    def ratio(self, a: str, b: str) -> float | None:
        if a not in self.cases or b not in self.cases:
            return None
        return float(self.cases[a].error_rms_overall / max(self.cases[b].error_rms_overall, 1e-300))

    def goals(self) -> dict:
        """{"identified_vs_pid": ratio, "identified_vs_true": ratio, "met": {...}}."""
        rp, rt = self.ratio("identified_ff", "pid_only"), self.ratio("identified_ff", "true_ff")
        met = {"vs_pid": None if rp is None else bool(rp <= self.goal_vs_pid),
               "vs_true": None if rt is None else bool(rt <= self.goal_vs_true)}
        return {"identified_vs_pid": rp, "identified_vs_true": rt, "goal_vs_pid": self.goal_vs_pid,
                "goal_vs_true": self.goal_vs_true, "met": met}


def run_case(backend_name: str, arm: BackendArm, settings: dict, trajectory, tau_ff, *,
             progress: bool = False, periods: int = 1):
    """One closed-loop run of `trajectory` (`periods` times back to back) with feed-forward
    callable `tau_ff` on a fresh backend (same settings, hence the same sensor-noise seed, for
    every case). Returns the Recording."""
    be = load_backend(backend_name, arm, settings)
    kw = {} if tau_ff is None else {"tau_ff": tau_ff}
    try:
        return be.run(trajectory, periods=int(periods), progress=progress, **kw)
    finally:
        be.close()


def tracking_case(name: str, rec, tau_ff, trajectory, model_source: str = "",
                  lead_s: float = 0.0) -> TrackingCase:
    """Tracking and PID-torque figures of a closed-loop recording (module doc).

    lead_s [s]: the reference of sample k is the plan at t_k + lead_s. The twin's CSP loop holds
    during the period [t_k, t_k + dt) the set point of the period's END, q(t_k + dt) (its position
    demand); a loop that tracks perfectly has its link there, so the twin's runs use lead_s = dt
    (against the plan at t_k every case would carry the same extra dt*qd, 1.2e-3 rad RMS on the
    quick-start validation trajectory). lead_s = 0: the recording's q_cmd."""
    truth = rec.truth or {}
    if "q" in truth:
        q, src = np.asarray(truth["q"], float), "truth"
    else:
        q, src = np.asarray(rec.q, float), "measured"
    ref = (np.asarray(rec.q_cmd, float) if lead_s == 0
           else trajectory.evaluate(np.asarray(rec.t, float) + lead_s)[0])
    err = q - ref
    if "tau_m" in truth and "tau_ff" in truth:
        pid = np.asarray(truth["tau_m"], float) - np.asarray(truth["tau_ff"], float)
    else:
        plan = trajectory.evaluate(np.asarray(rec.t, float))
        pid = np.asarray(rec.tau_m, float) - np.asarray(tau_ff(*plan), float)
    return TrackingCase(
        name=name, error_rms=np.sqrt(np.mean(err ** 2, axis=0)),
        error_rms_overall=float(np.sqrt(np.mean(err ** 2))), max_error=np.max(np.abs(err), axis=0),
        max_error_overall=float(np.max(np.abs(err))), pid_torque_rms=np.sqrt(np.mean(pid ** 2, axis=0)),
        pid_torque_rms_overall=float(np.sqrt(np.mean(pid ** 2))),
        pid_torque_max=np.max(np.abs(pid), axis=0), state_source=src, model_source=model_source,
        t=np.asarray(rec.t, float), error=err)
