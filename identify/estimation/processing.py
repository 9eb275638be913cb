"""Turn a :class:`~identify.backend.recording.Recording` into the arrays the estimators need.

``process(recording, settings)`` runs, in this order (each step optional, see
:class:`ProcessingSettings` -- the ONE place where the defaults are documented):

1. checks: every used channel finite (error names channel, sample and joint), the nominal rate
   matches the time stamps;
2. resampling onto a uniform grid when the time stamps are irregular (or a rate is requested);
3. averaging over repeated periods (the result is one period, treated as periodic from here on:
   filters and differences wrap around, so there are no edge effects and nothing is trimmed);
4.-5. ONE zero-phase filter chain applied alike to the positions and to the torques: the
   5-point cubic smoothing applied K times (paper: K = 20, there described for the torques), then a
   zero-phase Butterworth low-pass. Both are linear, time-invariant and symmetric, so the filtered
   torque is the filtered regressor times the parameters, H[tau] = H[Y] p, with no phase and no
   amplitude difference between the regressor's inputs and its outputs (exactly for terms linear
   in q, qd, qdd; to first order for the slowly varying nonlinear ones). Smoothing the torques
   alone would scale a torque component at frequency f by the smoothing gain G(f) but not the
   regressor (G = 0.98 at 5 Hz, 0.78 at 10 Hz for K = 20 at 100 Hz; ~1 below 10 Hz at 1 kHz),
   biasing the inertial parameters of fast motions;
6. velocity and acceleration: central differences of the filtered link-encoder position
   ("encoder"), or the commanded trajectory ("command": analytic derivatives when a trajectory
   object is given, else differences of the noise-free commanded position), filtered alike;
7. trimming of the filter edge transients (non-periodic data only);
8. decimation (keeps every k-th sample; the low-pass of step 5 is the anti-alias filter);
9. delay compensation (``delay``): the torque channels advanced by a constant delay relative to
   the positions (before any filtering; a cubic spline between samples); "auto" is resolved by
   the caller from the data (:func:`identify.estimation.delay.estimate_delay`);
10. the sample mask of the fits (``Processed.fit_mask``): samples near a velocity reversal of
   their joint (|qd| below ``reversal_speed_rad_s``, widened by the filter's support) are left
   out of the stage-1 / simplified least squares. There, real friction is stick-slip (the link
   sticks, friction takes any value in [-f_c, f_c]) and no constant-parameter Coulomb column
   sign(qd) describes it; on the twin with exact states, fitting every sample gives a median
   base-parameter error of 4 %, leaving out |qd| < 0.01 rad/s gives round-off (docs/joint_models.md);
11. the raw torques at the processed samples (``Processed.raw``: resampled / averaged /
   delay-compensated, but neither smoothed nor low-passed) and an estimate of their white-noise
   floor (``Processed.noise_floor``, :func:`identify.estimation.signal.noise_floor`), so that RMS
   figures can be computed against the measurement and not against the filtered signal;
12. parallel filtering (``filter_regressor``, default on): the chain of steps 4-5, 7 and 8 is
   returned as a :class:`FilterChain` together with the filtered velocity on the full grid, so
   that regressor columns that are NONLINEAR in the measured signals -- above all the Coulomb
   column sign(qd), a step at every velocity reversal -- can be built on the full grid and passed
   through exactly the torques' filter (:func:`filter_columns`; Gautier's parallel filtering).
   The identity H[tau] = H[Y] p above then holds for them too; without it the filtered torque
   has a smeared Coulomb step that a sharp sign(qd) cannot fit, which biases the Coulomb friction
   low and the viscous friction high (docs/joint_models.md, "Parallel filtering").

The code never looks at ``recording.truth`` and does not know which backend made the recording.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field

import numpy as np

from . import signal as sig
from identify.backend.recording import Recording

_VELOCITY_SOURCES = ("encoder", "command", "log", "differentiate")
#: the cutoff [Hz] `process` uses for butter_cutoff_hz "auto" when the caller did not resolve it
AUTO_FALLBACK_HZ = 10.0


@dataclass(frozen=True)
class ProcessingSettings:
    """Signal-processing settings (all defaults live here).

    Attributes:
        smooth_passes: K repetitions of the 5-point cubic smoothing (paper: 20). 0 disables it.
            Applied alike to the torques (tau_j, tau_m) and to the positions the derivatives
            come from (q, or the commanded q, qd, qdd), so both sides of tau = Y p see the same
            amplitude response (see the module docstring).
        smooth_torques: enable that smoothing (default True). The name follows the paper
            ("smoothing of the torques"); when on, the positions are smoothed alike.
        velocity: "encoder" -- differentiate the measured link position q (paper); "command" --
            use the commanded trajectory (analytic derivatives if `process` gets `trajectory=`,
            else differences of `q_cmd`); q itself is then the commanded position too;
            "log" -- the recording's own velocity channel ``qd`` (a log's mapped qd column),
            filtered like the positions, qdd its central difference; "differentiate" -- the same
            as "encoder" (the name used for logs).
        butter_order: Butterworth order (default 4). Applied forward-backward (zero phase).
        butter_cutoff_hz: low-pass cutoff [Hz] (default 10 Hz: the paper's 5-harmonic, 0.05 Hz
            Fourier excitation stays far below it, encoder/torque noise and drive-compliance
            oscillations (~40 Hz in the twin) are removed). None disables the low-pass.
            "auto": chosen by the data -- resolved by the caller
            (identify.app.identification.resolve_cutoff, blocked cross-validation on the
            excitation recording against the raw torque,
            :func:`identify.estimation.bandwidth.select_cutoff`); `process` itself, given
            "auto", uses :data:`AUTO_FALLBACK_HZ` and says so in its steps.
        trim_s: time [s] dropped at both ends against filter transients; None -> automatic,
            2 / butter_cutoff_hz (0.2 s at 10 Hz; 0 without the low-pass). Ignored after period
            averaging (periodic filtering has no edges).
        average_periods: P -> the recording holds P back-to-back periods; average them into one.
            None (default) keeps the recording as it is.
        period_s: period length [s] for `average_periods`; None -> the first present of
            recording.meta["period_s"], meta["trajectory"]["period_s"], ["duration_s"] (what
            the twin writes), ["duration"]; else N // P samples.
        decimate: keep every k-th sample at the end (default 1 = all). Needs the low-pass with
            butter_cutoff_hz < rate / (2 k).
        resample_hz: resample onto a uniform grid at this rate [Hz]. None (default) -> resample
            at recording.rate_hz only if the time stamps are irregular (jitter > 1 % of a period).
        resample_method: "cubic" (default) or "linear" interpolation for resampling.
        filter_regressor: parallel filtering (default True): `process` returns the filter chain
            (``Processed.filter_chain``) and the velocity on its full grid (``Processed.qd_full``)
            so that the joint models pass the regressor columns that are nonlinear in the
            measured signals (Coulomb sign(qd) / tanh(qd/eps)) through exactly the filter the
            torques went through (:func:`filter_columns`). Without it the filtered torque shows
            a smeared Coulomb step at every velocity reversal while sign(qd) stays sharp, which
            biases link Coulomb friction low and viscous friction high. False: neither is
            returned and the models use the plain columns.
        delay: delay of the torque channels (tau_j, tau_m) relative to the positions [s]; the
            torques are advanced by it before filtering. 0 (default): none; "auto": estimated
            from the data by the caller (identify.app.identification.process_recordings, a 1-D
            search on the stage-1 residual, :func:`identify.estimation.delay.estimate_delay`).
        reversal_speed_rad_s: samples of a joint whose filtered velocity is below this [rad/s]
            (velocity reversals, where friction is stick-slip and no constant-parameter
            Coulomb law holds), widened by ``reversal_window_s``, are left out of the
            stage-1 / simplified fits (``Processed.fit_mask``). Default 0.01; None: every
            sample is fitted.
        reversal_window_s: half-width [s] by which those samples are widened (the filter
            spreads the stick-slip torque over its impulse response). None -> automatic:
            1 / butter_cutoff_hz (0.1 s at 10 Hz), or 5 samples without the low-pass.
    """

    smooth_passes: int = 20
    smooth_torques: bool = True
    velocity: str = "encoder"
    butter_order: int = 4
    butter_cutoff_hz: object = 10.0          # [Hz], None or "auto"
    trim_s: float | None = None
    average_periods: int | None = None
    period_s: float | None = None
    decimate: int = 1
    resample_hz: float | None = None
    resample_method: str = "cubic"
    filter_regressor: bool = True
    delay: object = 0.0
    reversal_speed_rad_s: float | None = 0.01
    reversal_window_s: float | None = None

    def __post_init__(self):
        if not (self.delay == "auto" or (isinstance(self.delay, (int, float))
                                         and not isinstance(self.delay, bool)
                                         and math.isfinite(self.delay))):
            raise ValueError(f"ProcessingSettings.delay must be 'auto' or a number of seconds, "
                             f"got {self.delay!r}")
        if self.reversal_speed_rad_s is not None and not self.reversal_speed_rad_s >= 0:
            raise ValueError(f"ProcessingSettings.reversal_speed_rad_s must be >= 0 or None, "
                             f"got {self.reversal_speed_rad_s!r}")
        if self.reversal_window_s is not None and not self.reversal_window_s >= 0:
            raise ValueError(f"ProcessingSettings.reversal_window_s must be >= 0 or None, "
                             f"got {self.reversal_window_s!r}")
        if self.velocity not in _VELOCITY_SOURCES:
            raise ValueError(f"ProcessingSettings.velocity must be one of {_VELOCITY_SOURCES}, "
                             f"got {self.velocity!r}")
        if int(self.smooth_passes) != self.smooth_passes or self.smooth_passes < 0:
            raise ValueError(f"ProcessingSettings.smooth_passes must be an integer >= 0, "
                             f"got {self.smooth_passes!r}")
        if int(self.butter_order) != self.butter_order or self.butter_order < 1:
            raise ValueError(f"ProcessingSettings.butter_order must be an integer >= 1, "
                             f"got {self.butter_order!r}")
        fc = self.butter_cutoff_hz
        if fc is not None and fc != "auto" and not (isinstance(fc, (int, float))
                                                    and not isinstance(fc, bool) and fc > 0):
            raise ValueError(f"ProcessingSettings.butter_cutoff_hz must be > 0, 'auto' or None, "
                             f"got {self.butter_cutoff_hz!r}")
        if self.trim_s is not None and not self.trim_s >= 0:
            raise ValueError(f"ProcessingSettings.trim_s must be >= 0 or None, got {self.trim_s!r}")
        if self.average_periods is not None and (int(self.average_periods) != self.average_periods
                                                 or self.average_periods < 1):
            raise ValueError(f"ProcessingSettings.average_periods must be an integer >= 1 or None, "
                             f"got {self.average_periods!r}")
        if self.period_s is not None and not self.period_s > 0:
            raise ValueError(f"ProcessingSettings.period_s must be > 0, got {self.period_s!r}")
        if int(self.decimate) != self.decimate or self.decimate < 1:
            raise ValueError(f"ProcessingSettings.decimate must be an integer >= 1, "
                             f"got {self.decimate!r}")
        if self.resample_hz is not None and not self.resample_hz > 0:
            raise ValueError(f"ProcessingSettings.resample_hz must be > 0, got {self.resample_hz!r}")
        if not isinstance(self.filter_regressor, bool):
            raise ValueError(f"ProcessingSettings.filter_regressor must be true or false, "
                             f"got {self.filter_regressor!r}")
        if self.resample_method not in ("cubic", "linear"):
            raise ValueError(f"ProcessingSettings.resample_method must be 'cubic' or 'linear', "
                             f"got {self.resample_method!r}")

    @classmethod
    def from_dict(cls, d: dict | None) -> "ProcessingSettings":
        """Build from a mapping (e.g. a scenario YAML section); unknown keys are an error."""
        d = dict(d or {})
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown processing setting(s) {unknown}; known: {sorted(known)}")
        return cls(**d)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class FilterChain:
    """The linear, zero-phase filter chain :func:`process` applied alike to positions and torques,
    and the sample selection after it: everything needed to give another signal exactly the same
    treatment (parallel filtering of regressor columns, :func:`filter_columns`).

    Attributes:
        rate_hz: rate of the full grid the chain runs on (after resampling, before decimation)
            [Hz].
        smooth_passes: passes of the 5-point cubic smoothing (0: none).
        butter_order, butter_cutoff_hz: zero-phase Butterworth low-pass (cutoff [Hz]; None: none).
        periodic: the full grid is one period (after period averaging): filters wrap around.
        trim: samples dropped at each end after filtering (0 when periodic).
        decimate: keep every k-th sample after trimming.
        n_full: number of samples of the full grid (the length :meth:`apply` expects).
    """

    rate_hz: float
    smooth_passes: int
    butter_order: int
    butter_cutoff_hz: float | None
    periodic: bool
    trim: int
    decimate: int
    n_full: int

    def lowpass(self, x: np.ndarray) -> np.ndarray:
        """Smoothing then Butterworth along axis 0 of (n_full, ...) samples; same shape out."""
        x = np.asarray(x, dtype=float)
        if self.smooth_passes > 0:
            x = _smooth(x, self.smooth_passes, self.periodic)
        if self.butter_cutoff_hz is None:
            return x
        if self.periodic:
            return sig.periodic_filtfilt(x, self.rate_hz, self.butter_cutoff_hz,
                                         self.butter_order)
        return sig.butter_filtfilt(x, self.rate_hz, self.butter_cutoff_hz, self.butter_order)

    def per_segment(self, f, x: np.ndarray) -> np.ndarray:
        """f(x) of a full-grid array (one recording: one segment; see
        identify.estimation.segments.SegmentChains for stacked recordings)."""
        return f(x)

    def select(self, x: np.ndarray) -> np.ndarray:
        """Trimming then decimation along axis 0: (n_full, ...) -> (N, ...)."""
        x = np.asarray(x)
        if self.trim > 0:
            x = sig.trim(x, self.trim)
        # a contiguous copy: a strided view would keep the full-rate array alive (long logs)
        return np.ascontiguousarray(sig.decimate(x, self.decimate)) if self.decimate > 1 else x

    def apply(self, x: np.ndarray, what: str = "columns") -> np.ndarray:
        """:meth:`lowpass` then :meth:`select`: (n_full, ...) -> (N, ...) like the torques.
        `what` names the input in the errors (wrong length, non-finite values)."""
        x = np.asarray(x, dtype=float)
        if x.ndim < 1 or x.shape[0] != self.n_full:
            raise ValueError(f"{what}: has {x.shape[0] if x.ndim else 0} samples along axis 0, "
                             f"the filter chain's full grid has {self.n_full} (filter the columns "
                             f"built from Processed.qd_full, before trimming/decimation)")
        sig.check_finite(x, what)
        return self.select(self.lowpass(x))


def filter_columns(X: np.ndarray, chain: "FilterChain | Processed",
                   what: str = "regressor columns") -> np.ndarray:
    """Pass a block of regressor columns through exactly the filter chain of :func:`process`
    (same smoothing passes, Butterworth, periodic handling, trimming, decimation) -- parallel
    filtering, so that both sides of tau = W p see the same linear filter.

    Args:
        X: (N_full, ...) e.g. (N_full, n, k) columns evaluated on the chain's full grid (from
            ``Processed.qd_full``).
        chain: a :class:`FilterChain` or a :class:`Processed` carrying one
            (``ProcessingSettings.filter_regressor=True``).
        what: name of X for error messages.
    Returns:
        (N, ...) filtered columns, aligned with the processed samples.
    Raises:
        ValueError: no chain (processing ran with filter_regressor=False), wrong length,
            non-finite values.
    """
    if isinstance(chain, Processed):
        if chain.filter_chain is None:
            raise ValueError("processed data carry no filter chain (processed with "
                             "ProcessingSettings.filter_regressor=False)")
        chain = chain.filter_chain
    return chain.apply(X, what)


@dataclass
class Processed:
    """Processed, uniformly sampled arrays ready for the regressor (SI units).

    Attributes:
        t: (N,) time [s]; q, qd, qdd: (N, n) link position [rad], velocity [rad/s],
        acceleration [rad/s^2]; tau_j: (N, n) joint-torque-sensor torque [N*m] or None;
        tau_m: (N, n) motor torque reflected to the link [N*m] or None; rate_hz: sample rate of
        these arrays [Hz]; joint_names; meta: the recording's meta plus a JSON-serialisable
        "processing" entry (settings used, steps applied, sample counts);
        period_std: after period averaging, {channel: (N, n) per-sample standard deviation
        across the periods of the raw channel (before smoothing/filtering)}, else None;
        filter_chain: the :class:`FilterChain` the positions and torques went through (with
        ``ProcessingSettings.filter_regressor``, else None); qd_full: (N_full, n) the filtered
        link velocity [rad/s] on the chain's full grid (before trimming and decimation), from
        which nonlinear regressor columns are built before :func:`filter_columns` (else None);
        raw: {"tau_j", "tau_m"} -> (N, n) the measured torques at the processed samples, neither
        smoothed nor low-passed (resampled / averaged / delay-compensated like the filtered
        ones) [N*m]: what RMS figures are computed against;
        noise_floor: {"tau_j", "tau_m"} -> (n,) estimated white-noise std of the raw torques
        [N*m] (:func:`identify.estimation.signal.noise_floor`);
        fit_mask: (N, n) bool, True where a sample takes part in the stage-1 / simplified
        least squares (False near velocity reversals), or None (every sample);
        delay_s: the delay by which the torques were advanced [s].
    """

    t: np.ndarray
    q: np.ndarray
    qd: np.ndarray
    qdd: np.ndarray
    tau_j: np.ndarray | None
    tau_m: np.ndarray | None
    rate_hz: float
    joint_names: list[str]
    meta: dict = field(default_factory=dict)
    period_std: dict | None = None
    filter_chain: "FilterChain | None" = None
    qd_full: np.ndarray | None = None
    raw: dict = field(default_factory=dict)
    noise_floor: dict = field(default_factory=dict)
    fit_mask: np.ndarray | None = None
    delay_s: float = 0.0

    @property
    def n_samples(self) -> int:
        return self.t.shape[0]

    @property
    def n_joints(self) -> int:
        return len(self.joint_names)


def _period_samples(rec: Recording, ps: ProcessingSettings, rate: float) -> int | None:
    period = ps.period_s
    if period is None:
        period = rec.meta.get("period_s") if isinstance(rec.meta, dict) else None
    if period is None and isinstance(rec.meta.get("trajectory"), dict):
        tr = rec.meta["trajectory"]
        for key in ("period_s", "duration_s", "duration"):
            if tr.get(key) is not None:
                period = float(tr[key])
                break
    if period is None:
        return None
    s = period * rate
    if abs(s - round(s)) > 1e-6 * max(1.0, s):
        raise ValueError(f"period {period!r} s is not a whole number of samples at {rate:g} Hz "
                         f"({s:.6g}); resample or give period_s")
    return int(round(s))


def process(recording: Recording, settings: ProcessingSettings | None = None,
            trajectory=None, delay_s: float | None = None) -> Processed:
    """Process a recording into uniformly sampled, filtered q, qd, qdd and torques.

    Args:
        recording: the measured run (twin or hardware; `truth` is never read).
        settings: :class:`ProcessingSettings` (None -> defaults).
        trajectory: optional object with ``evaluate(t) -> (q, qd, qdd)`` each (N, n)
            (the commanded :class:`~identify.backend.interface.Trajectory`), used when
            ``settings.velocity == "command"`` for analytic derivatives. Evaluated at the
            recording's time stamps.
        delay_s: the torque delay to compensate [s]; None -> ``settings.delay`` (whose "auto"
            means 0 here: the caller estimates it and passes the number).
    Returns:
        :class:`Processed`.
    Raises:
        ValueError: non-finite samples (names channel, sample, joint), a nominal rate that does
            not match the time stamps, a missing channel for the chosen velocity source, a
            filter cutoff above Nyquist, too few samples.
    """
    ps = ProcessingSettings() if settings is None else settings
    rec = recording
    names = list(rec.joint_names)
    steps: list[str] = []
    if ps.butter_cutoff_hz == "auto":         # not resolved by the caller: the fixed fallback
        ps = dataclasses.replace(ps, butter_cutoff_hz=AUTO_FALLBACK_HZ)
        steps.append(f"butter_cutoff_hz: auto not resolved by the caller: {AUTO_FALLBACK_HZ:g} Hz")
    chans = _checked_channels(rec, ps, trajectory)                              # 1.
    t, chans, rate = _resampled(rec.t, chans, float(rec.rate_hz), ps, steps)    # 2.
    if delay_s is None:
        delay_s = 0.0 if ps.delay == "auto" else float(ps.delay)
    delay_s = float(delay_s)
    _advance_torques(chans, delay_s, rate, steps)                               # 9.
    meta_proc: dict = {"settings": ps.to_dict(), "n_samples_in": int(rec.n_samples)}
    t, period_std = _averaged(rec, ps, t, chans, rate, meta_proc, steps)        # 3.
    chain = _filter_chain(ps, rate, t.shape[0], periodic=period_std is not None, steps=steps)
    raw = {name: chans[name] for name in ("tau_j", "tau_m") if name in chans}
    floor = {name: sig.noise_floor(v) for name, v in raw.items()}               # 11.
    q, qd, qdd = _filtered_states(chans, chain, ps, t, trajectory, names, steps)  # 4.-6.
    out = {"q": q, "qd": qd, "qdd": qdd, "tau_j": chans.get("tau_j"), "tau_m": chans.get("tau_m")}
    qd_full = qd if ps.filter_regressor else None
    mask = None
    if ps.reversal_speed_rad_s is not None:                                     # 10.
        mask = chain.select(~_near_reversal(qd, ps, rate, chain.periodic))
        steps.append(f"samples within {_reversal_window(ps, rate)} samples of |qd| < "
                     f"{ps.reversal_speed_rad_s:g} rad/s left out of the fits "
                     f"({100.0 * (1.0 - mask.mean()):.1f} %)")
    out = {key: (None if v is None else chain.select(v)) for key, v in out.items()}  # 7.-8.
    t = chain.select(t)
    if chain.trim > 0:
        steps.append(f"trimmed {chain.trim} samples ({chain.trim / rate:g} s) at each end")
    if ps.decimate > 1:
        rate = rate / ps.decimate
        steps.append(f"decimated by {ps.decimate}")
    if ps.filter_regressor:                                                     # 12.
        steps.append("filter chain returned for parallel filtering of the nonlinear regressor "
                     "columns")
    meta_proc["steps"] = steps
    meta_proc["delay_s"] = delay_s
    meta_proc["n_samples_out"] = int(t.shape[0])
    meta = dict(rec.meta)
    meta["processing"] = meta_proc
    return Processed(t=np.asarray(t, dtype=float), q=out["q"], qd=out["qd"], qdd=out["qdd"],
                     tau_j=out["tau_j"], tau_m=out["tau_m"], rate_hz=rate, joint_names=names,
                     meta=meta, period_std=period_std,
                     filter_chain=chain if ps.filter_regressor else None, qd_full=qd_full,
                     raw={k: chain.select(v) for k, v in raw.items()}, noise_floor=floor,
                     fit_mask=mask, delay_s=delay_s)


#: the fewest samples processing takes (central differences and the filters' edges need them)
MIN_SAMPLES = 8


def _checked_channels(rec: Recording, ps: ProcessingSettings, trajectory) -> dict:
    """Step 1: the channels processing uses, {name: (N, n)} ("q" is the commanded position with
    velocity="command" and no trajectory), each checked finite; the time stamps checked against
    the nominal rate. ValueError naming the missing channel or the bad sample."""
    names = list(rec.joint_names)
    if rec.n_samples < MIN_SAMPLES:
        raise ValueError(f"recording has {rec.n_samples} samples; processing needs at least "
                         f"{MIN_SAMPLES}")
    sig.check_finite(rec.t, "recording.t")
    sig.check_rate(rec.t, float(rec.rate_hz), where="recording")
    use_cmd = ps.velocity == "command"
    chans: dict[str, np.ndarray] = {}
    if use_cmd and trajectory is None:
        if rec.q_cmd is None:
            raise ValueError("velocity='command' needs the recording's q_cmd channel (it has "
                             "none) or a trajectory passed to process(..., trajectory=...)")
        chans["q"] = rec.q_cmd
    elif not use_cmd:
        chans["q"] = rec.q
    if ps.velocity == "log":
        if rec.qd is None:
            raise ValueError("velocity='log' needs the recording's qd channel (map a qd column, "
                             "or use velocity: differentiate)")
        chans["qd"] = rec.qd
    for name in ("tau_j", "tau_m"):
        if getattr(rec, name) is not None:
            chans[name] = getattr(rec, name)
    if not any(k in chans for k in ("tau_j", "tau_m")):
        raise ValueError("recording has neither tau_j (joint torque sensor) nor tau_m "
                         "(motor torque) -- nothing to identify from")
    for name, v in chans.items():
        src = "q_cmd" if (name == "q" and use_cmd) else name
        sig.check_finite(v, f"recording.{src}", names)
    return chans


def _resampled(t: np.ndarray, chans: dict, rate: float, ps: ProcessingSettings,
               steps: list) -> tuple[np.ndarray, dict, float]:
    """Step 2: the channels on a uniform grid (at ``resample_hz``, or at the nominal rate when
    the time stamps are irregular). Returns t (N,) [s], channels, rate [Hz]."""
    target = ps.resample_hz
    if target is None and not sig.is_uniform(t, rate):
        target = rate
    if target is None:
        return t, chans, rate
    new = {}
    for name, v in chans.items():
        tu, new[name] = sig.resample_uniform(t, v, target, method=ps.resample_method)
    steps.append(f"resampled to {float(target):g} Hz ({ps.resample_method})")
    return tu, new, float(target)


def _advance_torques(chans: dict, delay_s: float, rate: float, steps: list) -> None:
    """Delay compensation (in place, before any filter): the torque channels advanced by
    `delay_s` [s] relative to the positions."""
    if delay_s == 0.0:
        return
    for name in ("tau_j", "tau_m"):
        if name in chans:
            chans[name] = sig.advance(chans[name], delay_s * rate)
    steps.append(f"torques advanced by {delay_s * 1e3:g} ms (delay compensation)")


def _averaged(rec: Recording, ps: ProcessingSettings, t: np.ndarray, chans: dict, rate: float,
              meta_proc: dict, steps: list) -> tuple[np.ndarray, dict | None]:
    """Step 3 (in place on `chans`): the average of ``average_periods`` periods, one period
    from here on. Returns t of that period and {channel: per-sample std across the periods}
    (None without averaging: the data are not periodic)."""
    if ps.average_periods is None:
        return t, None
    P = int(ps.average_periods)
    S = _period_samples(rec, ps, rate)
    stds = {}
    for name in list(chans):
        chans[name], stds[name] = sig.average_periods(chans[name], P, S,
                                                      channel=f"recording.{name}")
    S = chans[next(iter(chans))].shape[0]
    meta_proc["samples_per_period"] = S
    meta_proc["periods_averaged"] = P
    steps.append(f"averaged {P} periods of {S} samples")
    return t[:S], stds


def _filter_chain(ps: ProcessingSettings, rate: float, n_full: int, periodic: bool,
                  steps: list) -> FilterChain:
    """Steps 4-5, 7-8 as one :class:`FilterChain` on the `n_full`-sample grid at `rate` [Hz]:
    the cutoff checked against Nyquist (after decimation), the edge trim of non-periodic data."""
    smooth = ps.smooth_torques and ps.smooth_passes > 0
    if smooth:
        steps.append(f"5-point cubic smoothing x{ps.smooth_passes} on positions and torques")
    fc = ps.butter_cutoff_hz
    if fc is not None:
        nyq = 0.5 * rate / ps.decimate
        if fc >= nyq:
            raise ValueError(f"butter_cutoff_hz={fc:g} Hz must be below {nyq:g} Hz (Nyquist "
                             f"of {rate:g} Hz decimated by {ps.decimate})")
    elif ps.decimate > 1:
        raise ValueError("decimate > 1 needs the Butterworth low-pass as anti-alias filter "
                         "(butter_cutoff_hz is None)")
    trim_k = 0
    if not periodic:
        trim_s = ps.trim_s if ps.trim_s is not None else (2.0 / fc if fc is not None else 0.0)
        trim_k = int(math.ceil(trim_s * rate - 1e-9))
        if trim_k > 0 and 2 * trim_k >= n_full - 2:
            raise ValueError(f"trimming {trim_s:g} s at each end leaves too few of the "
                             f"{n_full} samples")
    return FilterChain(rate_hz=rate, smooth_passes=int(ps.smooth_passes) if smooth else 0,
                       butter_order=int(ps.butter_order), butter_cutoff_hz=fc,
                       periodic=periodic, trim=trim_k, decimate=int(ps.decimate),
                       n_full=int(n_full))


def _filtered_states(chans: dict, chain: FilterChain, ps: ProcessingSettings, t: np.ndarray,
                     trajectory, names: list, steps: list):
    """Steps 4-6: the torque channels low-passed in place, and q, qd, qdd (n_full, n) from the
    chosen velocity source, filtered by the same chain (central differences of the filtered
    position, the log's velocity, or the commanded trajectory's analytic derivatives)."""
    lowpass = chain.lowpass      # the filter chain every position and torque channel goes through
    dt = 1.0 / chain.rate_hz
    use_cmd = ps.velocity == "command"

    def deriv(x):
        return sig.periodic_differentiate(x, dt) if chain.periodic else sig.differentiate(x, dt=dt)

    for name in ("tau_j", "tau_m"):
        if name in chans:
            chans[name] = lowpass(chans[name])
    if use_cmd and trajectory is not None:
        qa, qda, qdda = (np.asarray(a, dtype=float) for a in trajectory.evaluate(t))
        for a, what in ((qa, "q"), (qda, "qd"), (qdda, "qdd")):
            if a.shape != (t.shape[0], len(names)):
                raise ValueError(f"trajectory.evaluate returned {what} of shape {a.shape}, "
                                 f"expected ({t.shape[0]}, {len(names)}) for joints {names}")
            sig.check_finite(a, f"trajectory {what}", names)
        q, qd, qdd = lowpass(qa), lowpass(qda), lowpass(qdda)
        steps.append("analytic derivatives of the commanded trajectory")
    elif ps.velocity == "log":
        q = lowpass(chans["q"])
        qd = lowpass(chans["qd"])
        qdd = deriv(qd)
        steps.append("velocity from the log's qd channel, acceleration its central difference")
    else:
        q = lowpass(chans["q"])
        qd = deriv(q)
        qdd = deriv(qd)
        steps.append("central differences of the " + ("commanded" if use_cmd else "encoder")
                     + " position")
    if chain.butter_cutoff_hz is not None:
        steps.append(f"zero-phase Butterworth order {ps.butter_order}, "
                     f"{chain.butter_cutoff_hz:g} Hz "
                     f"({'periodic' if chain.periodic else 'odd-padded'}) on positions and torques")
    return q, qd, qdd


def _reversal_window(ps: ProcessingSettings, rate: float) -> int:
    """Half-width [samples] of the exclusion around a velocity reversal."""
    w = ps.reversal_window_s
    if w is None:
        return (int(math.ceil(rate / ps.butter_cutoff_hz)) if ps.butter_cutoff_hz is not None
                else 5)
    return int(math.ceil(w * rate - 1e-9))


def _near_reversal(qd: np.ndarray, ps: ProcessingSettings, rate: float,
                   periodic: bool) -> np.ndarray:
    """(N_full, n) True where |qd| < reversal_speed within the window (vectorized running max
    of the slow-sample indicator by cumulative sums)."""
    low = (np.abs(qd) < ps.reversal_speed_rad_s).astype(np.int64)
    m = _reversal_window(ps, rate)
    if m == 0:
        return low.astype(bool)
    N = low.shape[0]
    pad = np.concatenate([low[-m:], low, low[:m]]) if periodic and N > 2 * m else \
        np.concatenate([np.zeros((m,) + low.shape[1:], np.int64), low,
                        np.zeros((m,) + low.shape[1:], np.int64)])
    c = np.concatenate([np.zeros((1,) + low.shape[1:], np.int64), np.cumsum(pad, axis=0)])
    return (c[2 * m + 1:] - c[:-2 * m - 1]) > 0


def _smooth(x: np.ndarray, passes: int, periodic: bool) -> np.ndarray:
    if not periodic:
        return sig.smooth5(x, passes)
    n = x.shape[0]
    if n <= 2 * passes + 2:
        raise ValueError(f"a period of {n} samples is too short for {passes} smoothing passes")
    return sig.smooth5(np.concatenate([x, x, x], axis=0), passes)[n:2 * n]
