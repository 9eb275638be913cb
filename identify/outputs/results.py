"""The run's data model: what each step of the pipeline hands to the next, as plain dataclasses.

    scenario -> TrajectoryInfo (per trajectory) -> Recording (backend) -> Identification:
        processed data, Fits (simplified / improved), TruthComparison (twin runs),
        ModelValidation (predictions, RMS), Export (full parameters for the URDF)

Nothing here computes; :mod:`identify.outputs.render` turns these types into ``metrics.json``,
``parameters.yaml`` and the sweep records, each in one place. Arrays are SI: torques [N*m],
shapes (N samples, n joints) unless noted."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class TrajectoryInfo:
    """Facts about one trajectory a backend ran (optimized, loaded from a file or a log).

    cond: cond(W_base) on a grid 10x denser than the optimizer's; max_ratio / limits_used: the
    optimizer's report (peak |q|, |qd|, |qdd| over the limit; limits actually used)."""
    label: str
    source: str
    cond: float | None = None
    harmonics: int | None = None
    period_s: float | None = None
    periods: int | None = None
    duration_s: float | None = None
    solver_time_s: float | None = None
    seed: int | None = None
    starts: int | None = None
    max_ratio: dict | None = None
    limits_used: dict | None = None
    samples: int | None = None
    from_log: bool = False                # read from a log file (twinid fit), not run
    resampled: object | None = None       # logs: resampling facts of identify.logs
    # design figures (identify.excitation.information.DesignReport) and the collision check
    # (identify.backend.clearance.ClearanceReport) of an optimized or loaded trajectory
    objective: str | None = None          # cond | d_optimal | a_optimal
    cond_scaled: float | None = None      # cond(W_base D), D = diag(1/||column||)
    logdet: float | None = None           # log det of the Fisher information of a run
    rel_std: list | None = None           # (p,) predicted std / |prior value| per base parameter
    median_rel_std: float | None = None
    noise_std_Nm: list | None = None      # (n,) torque noise std the prediction assumes
    min_distance_m: float | None = None   # smallest clearance over the period (PyBullet)
    closest_pair: str | None = None       # the pair at that instant, and its time [s]
    closest_time_s: float | None = None
    clearance_margin_m: float | None = None
    clearance: dict | None = None         # t (N,) [s], min (N,) [m], margin, pairs {label: (N,)}
    held: "HeldDesign | None" = None      # excitation with held data: what they and it add


@dataclass
class HeldSource:
    """One entry of ``trajectories.excitation.held`` (identify.logs.held) the run used."""
    key: str                              # trajectories.excitation.held[i]
    source: str                           # the path given: run folder, recording or log file
    kind: str                             # run | recording | log | segment (of the fit's log)
    file: str                             # the file the samples came from
    samples: int                          # recorded samples
    duration_s: float
    processed_samples: int | None = None  # rows stacked into the fit (after processing)


@dataclass
class HeldDesign:
    """The design figures of the held data against the new trajectory's
    (identify.excitation.information, the scenario's noise model); the trajectory's own
    ``rel_std`` / ``median_rel_std`` / ``logdet`` are those of the combined estimate.

    rank: rank of the held information (of n_base); rel_std_held / rel_std_new (p,): predicted
    std / |prior| from the held data alone (None where a parameter is not identifiable from
    them) and from the new trajectory alone; median_*: their medians (None: not all
    identifiable)."""
    sources: list                         # [HeldSource]
    rank: int
    n_base: int
    rel_std_held: list
    rel_std_new: list
    median_rel_std_held: float | None
    median_rel_std_new: float | None


@dataclass
class RmsFigure:
    """RMS of predicted minus measured torque [N*m]: per_joint (n,), overall (all samples and
    joints)."""
    per_joint: np.ndarray
    overall: float

    @classmethod
    def of(cls, err: np.ndarray) -> "RmsFigure":
        """From an error series (N, n)."""
        err = np.asarray(err, float)
        return cls(np.sqrt(np.mean(err ** 2, axis=0)), float(np.sqrt(np.mean(err ** 2))))


@dataclass
class NoiseFloor:
    """The noise floor of a measured signal [N*m]: per_joint (n,) and overall RMS of the noise;
    source: "twin: injected" (the RMS of the noise the twin actually added at these samples) or
    "estimate: local cubic fit residual" (logs / hardware, identify.estimation.signal.noise_floor).
    An RMS against the raw signal cannot go below it (for an unbiased model it equals it)."""
    per_joint: np.ndarray
    overall: float
    source: str


@dataclass
class Fits:
    """The fitted joint models and the design matrices they were fitted / predicted with.

    designs: trajectory -> (N, n, p) design of the models (parallel-filtered Coulomb column);
    improved_requested: the scenario's improved_friction_term ("auto" chose ``improved``'s)."""
    simplified: object | None
    improved: object | None
    designs: dict
    improved_requested: str | None = None


@dataclass
class Truth:
    """Ground truth the twin knows (twin runs only).

    inertial (10n,) link-side standard parameters (URDF + payload); viscous, coulomb (n,) link
    friction; stage2: coefficient name -> (n,) drive truth; applicable / not_applicable: per stage
    ("stage1", "stage2") whether a constant-parameter truth exists, and why not."""
    inertial: np.ndarray
    viscous: np.ndarray
    coulomb: np.ndarray
    stage2: dict
    note: str
    applicable: dict
    not_applicable: dict
    settings_source: str
    law: str | None = None               # the twin's reducer-friction law (drive_truth)


@dataclass
class TruthComparison:
    """Identified parameters against the truth: base (p_base,) true base parameters (None when
    stage-1 truth does not apply); errors: "improved_stage1" / "improved_stage2" ->
    identify.validation.parameter_errors.ParameterErrors; expected: a truth was asked for (twin)
    but could not be built."""
    truth: Truth | None = None
    base: np.ndarray | None = None
    base_note: str | None = None
    errors: dict = field(default_factory=dict)
    expected: bool = False


@dataclass
class ModelValidation:
    """Every model on every trajectory.

    result: identify.validation.validate.ValidationResult; headline_route: the improved model's
    prediction route reported as "improved"; predictions: trajectory -> model -> (N, n);
    rms: trajectory -> model -> RmsFigure against the RAW measured signal at the processed samples
    (including "stage1_tau_j", the stage-1 joint-torque fit; predictions from the processed
    states); rms_filtered: the same against the filtered signal the fit saw (second figure);
    noise_floor: trajectory -> "tau_m" / "tau_j" -> NoiseFloor; rms_outside_reversals: as rms,
    over the samples outside velocity reversals (Processed.fit_mask: where the friction sticks,
    which no constant-parameter model describes);
    improvement: trajectory -> relative change of the headline vs the simplified model [%];
    variants_rms: reducer-friction variant -> trajectory -> overall RMS [N*m] (closed form);
    cond_measured: trajectory -> cond of the measured design."""
    result: object
    headline_route: str
    predictions: dict
    rms: dict
    improvement: dict
    variants_rms: dict
    cond_measured: dict
    rms_filtered: dict = field(default_factory=dict)
    noise_floor: dict = field(default_factory=dict)
    rms_outside_reversals: dict = field(default_factory=dict)


@dataclass
class Prior:
    """The prior of the physically consistent fit / the export: inertial (10n,) or None, kind
    ("none", "urdf", "perturbed"), requested kind, note, and the CAD error and seed when
    perturbed."""
    inertial: np.ndarray | None
    kind: str
    requested: str
    note: str
    error: float | None = None
    seed: int | None = None


@dataclass
class Export:
    """Full parameters for the identified URDF: inertial (10n,), viscous / coulomb (n,) or None,
    source: which model and how the full parameters were chosen; consistent: the physically
    consistent fit (identify.estimation.consistency.ConsistentFit) when one was made, with the
    signal it was fitted to."""
    inertial: np.ndarray | None
    viscous: np.ndarray | None
    coulomb: np.ndarray | None
    source: str
    consistent: object | None = None
    consistent_signal: str | None = None
    prior: Prior | None = None
    # the exported model (URDF + identified_joints.yaml) and what it predicts (issue 14):
    # joint_terms: identify.model.joint_sidecar.JointTerms; signal: name of the predicted signal;
    # predictions / rms: trajectory -> (N, n) / RmsFigure of RNEA(URDF) + joint terms;
    # physical: the inertials can be written as a URDF; reason: why not (None when physical)
    joint_terms: object | None = None
    signal: str | None = None
    predictions: dict = field(default_factory=dict)
    rms: dict = field(default_factory=dict)
    physical: bool = False
    reason: str | None = None
    # app.prior.Regularised when the export was regularised toward the nominal URDF (Headline)
    regularised: object | None = None


@dataclass
class Headline:
    """The run's headline: what the EXPORTED model (identified.urdf + identified_joints.yaml,
    what a user's controller computes) predicts against the RAW measured signal -- the same
    RmsFigure objects as ``Export.rms`` -- with the other fitted models beside it.

    derived_from: the fit the export comes from ("simplified", "improved stage 1", "selected
    terms", or "nominal URDF" when the regularisation chose it); signal: name of the predicted
    signal; rms: trajectory -> RmsFigure [N*m]; nominal_rms: trajectory -> RmsFigure of the
    nominal URDF (its own inertials, zero joint terms) on the same signal; worse_than_nominal:
    the UNregularised export's validation RMS above the nominal's (None: no validation
    trajectory); unregularised_rms: trajectory -> RmsFigure of that export when it was replaced;
    regularised: app.prior.Regularised or None; others: [(model, signal name, trajectory ->
    RmsFigure)] of the fitted models shown beside the headline."""
    derived_from: str
    signal: str
    rms: dict
    nominal_rms: dict
    worse_than_nominal: bool | None = None
    unregularised_rms: dict = field(default_factory=dict)
    regularised: object | None = None
    others: list = field(default_factory=list)


@dataclass
class Identification:
    """Everything identified from the excitation recording and checked on the validation one."""
    model: object
    base: object
    terms: tuple
    processed: dict                      # trajectory -> identify.estimation.processing.Processed
    fits: Fits
    truth: TruthComparison
    validation: ModelValidation
    export: Export | None
    prior: Prior
    warnings: list = field(default_factory=list)
    signal: str = "tau_m"                # fitted signal of the headline model: tau_m | tau_j
    spec: object | None = None           # identification settings actually used (autos resolved)
    from_logs: bool = False

    @property
    def signal_name(self) -> str:
        """'joint torque' or 'motor torque η·β·i' (identify.scenario.signals)."""
        from identify.scenario.signals import SIGNAL_NAMES
        return SIGNAL_NAMES[self.signal]

    @property
    def headline_model(self) -> str:
        """The model whose RMS the run is judged by: "export" (the exported URDF + sidecar,
        :class:`Headline`) when one was made, else the fitted model (improved when fitted, else
        simplified)."""
        if self.headline is not None:
            return "export"
        return "improved" if self.fits.improved is not None else "simplified"
    headline: Headline | None = None             # what the export predicts (the headline)
    delays: dict = field(default_factory=dict)   # trajectory -> estimation.delay.DelayEstimate
    held: list = field(default_factory=list)     # [HeldSource] stacked with the excitation rows
    cutoff: object | None = None                 # estimation.bandwidth.CutoffSelection (auto)

    # read-only shortcuts used by plots, sweeps and tests
    @property
    def simplified(self):
        return self.fits.simplified

    @property
    def improved(self):
        return self.fits.improved

    @property
    def consistent(self):
        return None if self.export is None else self.export.consistent

    @property
    def predictions(self) -> dict:
        return self.validation.predictions

    @property
    def truth_base(self):
        return self.truth.base


@dataclass
class RunInfo:
    """Facts about the run itself (not the identification): scenario name, description, backend
    (or "logs"), command, creation time, host, trajectories, timings [s], output files, console
    messages and extra sections."""
    name: str
    description: str | None
    backend: str
    command: str
    created: str
    host: str
    trajectories: dict = field(default_factory=dict)   # label -> TrajectoryInfo
    timings: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)
    messages: list = field(default_factory=list)


@dataclass(frozen=True)
class ControlOutcome:
    """What the control sections of a scenario produced (identify.control):

    closed_loop: ``ClosedLoopResult`` of the tracking cases, or None; collision: model name ->
    ``CollisionResult`` (empty when not run); collision_transfer: model name ->
    ``identify.control.transfer.TransferResult`` (thresholds calibrated on the other
    trajectory; empty when not run); payload: ``PayloadResult`` of a payload identification, or
    None."""
    closed_loop: object = None
    collision: dict = field(default_factory=dict)
    collision_transfer: dict = field(default_factory=dict)
    payload: object = None
