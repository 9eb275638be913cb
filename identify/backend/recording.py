"""The one data type every backend returns: a sampled record of a run on the arm.

A `Recording` holds what a real arm can measure (link encoder, joint torque sensor, motor
current) plus the commanded trajectory. The twin additionally fills `truth` with its internal
ground truth (true states, friction components, motor angles); identification code must never
read `truth` -- it exists only so tests and reports can compare identified values with the truth.

What instant each field of sample k refers to (the contract every backend must meet; the twin
meets it exactly, see docs/twin.md). The drive runs a control period of dt (1 ms); t_k is the
start of a period, and the drive's commands and its torque/current are held (zero-order hold)
over [t_k, t_k + dt). Every field of sample k refers to the SAME instant t_k:

    t[k]        t_k [s].
    q[k]        link encoder angle at t_k [rad].
    qd[k]       drive-reported (motor-side, reflected) velocity at t_k [rad/s].
    tau_j[k]    joint-torque-sensor torque acting during [t_k, t_k + dt) [N*m] -- the torque the
                link receives, so tau_j[k] - link friction = M(q[k]) qdd[k] + h(q[k], qd[k]).
    i_m[k]      motor current held during [t_k, t_k + dt) (set from the measurements at t_k) [A].
    tau_m[k]    eta * beta * i_m[k] [N*m], same instant as i_m.
    q_cmd[k]    position set point in effect at t_k (the trajectory evaluated at t_k) [rad].
    status[k]   drive status word read at t_k.
    truth[...]  (simulators) the same instant: "q", "qd", "q_m", "qd_m", "q_cmd" at t_k; "qdd" the
                link acceleration over [t_k, t_k + dt), (qd(t_k + dt) - qd(t_k)) / dt, i.e. the
                second central difference of the positions at k; every torque component
                ("tau_m", "tau_r", "tau_l", friction parts) and flag ("stick_*") the value held
                during [t_k, t_k + dt). Truth is never delayed.

A measurement delay is a deliberate, documented imperfection of a backend (the twin's
``io_delay_s``): every measured field (q, qd, tau_j, i_m, tau_m) of sample k is then the
aligned value of t_k - delay; t, q_cmd and truth are not delayed. ``meta["sample_alignment"]``
states the convention a backend implements (twin: "period_start").

Files: a single ``.npz``. Writing is atomic (temporary file + ``os.replace``), so a run killed
mid-write never leaves a file that looks complete. Backends that stream (the hardware loop) write
chunks with :class:`ChunkWriter` and assemble them with :func:`assemble_chunks`; a killed stream
leaves only complete chunks, which :func:`assemble_chunks` recovers.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

import numpy as np

from identify.common.fileio import atomic_savez
from identify.common.jsonutil import to_jsonable

from .truth import DriveTruth

FORMAT_VERSION = 1

# Channels that are (N, n) arrays; `t` is (N,). Optional channels may be None.
_CHANNELS = ("q", "tau_j", "i_m", "tau_m", "q_cmd", "qd", "status")
_REQUIRED = ("q",)


@dataclass
class Recording:
    """Sampled measurements of one run.

    Attributes (N samples, n joints, SI units):
        t:      (N,) sample times [s], strictly increasing.
        q:      (N, n) measured link position (link-side encoder) [rad].
        tau_j:  (N, n) joint torque sensor reading tau_r [N*m], or None.
        i_m:    (N, n) motor current [A], or None.
        tau_m:  (N, n) motor torque reflected to the link, eta*beta*i [N*m], or None.
        q_cmd:  (N, n) commanded link position [rad], or None.
        qd:     (N, n) velocity reported by the drive [rad/s], or None (identification
                normally differentiates `q` instead).
        status: (N, n) drive status words (hardware), or None.
        late:   (N,) bool, or None: True where the sample was not acquired on time (hardware:
                its cycle started more than half a period late or its frame was lost); `t`
                holds the real acquisition times either way.
        rate_hz: nominal sample rate [Hz].
        joint_names: joint order of the columns.
        meta:   JSON-serialisable metadata (arm, backend, seed, settings, trajectory).
        truth:  ground truth known only to a simulator: name -> (N, ...) array. Never read by
                identification code.
        drive_truth: the simulator's drive coefficients and laws as simulated
                (:class:`identify.backend.truth.DriveTruth`), or None. Never read by
                identification code.
        injected_noise_rms: a simulator's measurement error actually injected, per torque
                channel ("tau_j", "tau_m") the (n,) RMS over the recording of measured minus
                true value [N*m] -- the noise floor of RMS figures; None where unknown.
        backend_report: what the backend reports about the run in words (the hardware dry
                run's bus report), or None.
    """

    t: np.ndarray
    q: np.ndarray
    rate_hz: float
    joint_names: list[str]
    tau_j: np.ndarray | None = None
    i_m: np.ndarray | None = None
    tau_m: np.ndarray | None = None
    q_cmd: np.ndarray | None = None
    qd: np.ndarray | None = None
    status: np.ndarray | None = None
    late: np.ndarray | None = None
    meta: dict = field(default_factory=dict)
    truth: dict[str, np.ndarray] = field(default_factory=dict)
    drive_truth: DriveTruth | None = None
    injected_noise_rms: dict[str, np.ndarray] | None = None
    backend_report: str | None = None

    def __post_init__(self):
        self.t = np.asarray(self.t, dtype=float)
        if self.t.ndim != 1:
            raise ValueError(f"Recording.t must be 1-D, got shape {self.t.shape}")
        n_s = self.t.shape[0]
        n_j = len(self.joint_names)
        for name in _CHANNELS:
            v = getattr(self, name)
            if v is None:
                continue
            v = np.asarray(v, dtype=float if name != "status" else np.int64)
            if v.shape != (n_s, n_j):
                raise ValueError(
                    f"Recording.{name} has shape {v.shape}, expected ({n_s}, {n_j}) "
                    f"= (samples in t, joints {self.joint_names})")
            setattr(self, name, v)
        if self.late is not None:
            self.late = np.asarray(self.late, dtype=bool)
            if self.late.shape != (n_s,):
                raise ValueError(f"Recording.late has shape {self.late.shape}, expected ({n_s},)")
        if n_s > 1 and not np.all(np.diff(self.t) > 0):
            k = int(np.argmax(~(np.diff(self.t) > 0)))
            raise ValueError(f"Recording.t is not strictly increasing at sample {k + 1} "
                             f"(t[{k}]={self.t[k]!r}, t[{k + 1}]={self.t[k + 1]!r})")
        if not self.rate_hz > 0:
            raise ValueError(f"Recording.rate_hz must be > 0, got {self.rate_hz!r}")
        self.truth = {k: np.asarray(v) for k, v in self.truth.items()}

    @property
    def n_samples(self) -> int:
        return self.t.shape[0]

    @property
    def n_joints(self) -> int:
        return len(self.joint_names)

    @property
    def duration(self) -> float:
        return float(self.t[-1] - self.t[0]) if self.n_samples else 0.0

    def window(self, start: int, stop: int | None = None) -> "Recording":
        """Samples [start, stop) as a new Recording (truth sliced alike)."""
        sl = slice(start, stop)
        kw = {f.name: getattr(self, f.name) for f in fields(self)}
        kw["t"] = self.t[sl]
        for name in _CHANNELS + ("late",):
            if kw[name] is not None:
                kw[name] = kw[name][sl]
        kw["truth"] = {k: v[sl] for k, v in self.truth.items()}
        kw["meta"] = dict(self.meta)
        return Recording(**kw)

    # -- files -------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> Path:
        """Write atomically to a single .npz file; returns the path."""
        path = Path(path)
        arrays = _to_arrays(self)
        atomic_savez(path, arrays)
        return path

    @staticmethod
    def load(path: str | os.PathLike) -> "Recording":
        """Read a file written by :meth:`save`. Raises ValueError naming the file if it is not one."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"recording file not found: {path}")
        try:
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
        except Exception as exc:  # zipfile/pickle errors -> one clear message
            raise ValueError(f"{path}: not a readable recording file ({exc})") from exc
        return _from_arrays(data, str(path))


def _to_arrays(rec: Recording) -> dict[str, np.ndarray]:
    header = {"format": "twinid-recording", "version": FORMAT_VERSION,
              "rate_hz": rec.rate_hz, "joint_names": list(rec.joint_names), "meta": rec.meta}
    if rec.drive_truth is not None:
        header["drive_truth"] = rec.drive_truth.to_dict()
    if rec.injected_noise_rms is not None:
        header["injected_noise_rms"] = rec.injected_noise_rms
    if rec.backend_report is not None:
        header["backend_report"] = rec.backend_report
    # non-finite metadata (e.g. an unlimited joint range) round-trips: Python's json writes and
    # reads NaN / Infinity
    plain = to_jsonable(header, nonfinite="keep", where="recording header")
    arrays = {"header": np.frombuffer(json.dumps(plain).encode(), np.uint8), "t": rec.t}
    for name in _CHANNELS + ("late",):
        v = getattr(rec, name)
        if v is not None:
            arrays[name] = v
    for k, v in rec.truth.items():
        arrays["truth/" + k] = v
    return arrays


def _from_arrays(data: dict[str, np.ndarray], where: str) -> Recording:
    if "header" not in data or "t" not in data:
        raise ValueError(f"{where}: not a twinid recording (no header/t arrays)")
    header = json.loads(bytes(data["header"].astype(np.uint8)).decode())
    if header.get("format") != "twinid-recording":
        raise ValueError(f"{where}: not a twinid recording (format={header.get('format')!r})")
    if header.get("version", 0) > FORMAT_VERSION:
        raise ValueError(f"{where}: recording format version {header['version']} is newer than "
                         f"this program's ({FORMAT_VERSION})")
    kw = {name: data.get(name) for name in _CHANNELS + ("late",)}
    truth = {k[len("truth/"):]: v for k, v in data.items() if k.startswith("truth/")}
    meta = dict(header.get("meta") or {})
    # files written before DriveTruth kept the drive truth as a dict in meta["drive_truth"]
    dt = header.get("drive_truth", meta.pop("drive_truth", None))
    dt = None if dt is None else DriveTruth.from_dict(dt, f"{where}: drive_truth")
    # files written before these fields kept them in meta (the noise with a "note" string)
    noise = header.get("injected_noise_rms", meta.pop("injected_noise_rms", None))
    noise = None if noise is None else {k: np.asarray(v, float) for k, v in noise.items()
                                        if k != "note"}
    report = header.get("backend_report", meta.pop("bus_report_text", None))
    return Recording(t=data["t"], rate_hz=float(header["rate_hz"]),
                     joint_names=list(header["joint_names"]), meta=meta,
                     truth=truth, drive_truth=dt, injected_noise_rms=noise,
                     backend_report=report, **kw)


class ChunkWriter:
    """Streams a recording to disk while it is made, as numbered complete chunk files.

    Each chunk is written atomically, so a process killed at any moment leaves only whole chunks;
    :func:`assemble_chunks` turns the folder into one Recording (and file). Use for long runs whose
    samples must survive a crash (the hardware loop).
    """

    def __init__(self, folder: str | os.PathLike, joint_names: list[str], rate_hz: float,
                 meta: dict | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.joint_names = list(joint_names)
        self.rate_hz = float(rate_hz)
        self.meta = dict(meta or {})
        self._k = len(list(self.folder.glob("chunk_*.npz")))

    def write(self, t: np.ndarray, **channels: np.ndarray) -> Path:
        """Write one chunk: `t` (M,) and channels named as Recording fields, each (M, n)
        (`late`: (M,))."""
        rec = Recording(t=t, rate_hz=self.rate_hz, joint_names=self.joint_names,
                        meta=self.meta, **channels)
        path = self.folder / f"chunk_{self._k:06d}.npz"
        rec.save(path)
        self._k += 1
        return path


def assemble_chunks(folder: str | os.PathLike, out: str | os.PathLike | None = None) -> Recording:
    """Concatenate the complete chunks in `folder` (in order) into one Recording; save to `out`."""
    folder = Path(folder)
    parts = sorted(folder.glob("chunk_*.npz"))
    if not parts:
        raise ValueError(f"{folder}: no recorded chunks")
    recs = [Recording.load(p) for p in parts]
    first = recs[0]
    kw = {}
    for name in _CHANNELS + ("late",):
        vals = [getattr(r, name) for r in recs]
        kw[name] = None if any(v is None for v in vals) else np.concatenate(vals)
    rec = Recording(t=np.concatenate([r.t for r in recs]), rate_hz=first.rate_hz,
                    joint_names=first.joint_names, meta=first.meta, **kw)
    if out is not None:
        rec.save(out)
    return rec
