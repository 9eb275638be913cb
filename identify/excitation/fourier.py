"""Finite Fourier-series joint trajectories (the excitation trajectory of the paper).

Per joint i, with fundamental angular frequency ``wf`` [rad/s] and harmonics k = 1..H::

    q_i(t)   = c_i + sum_k [ a_ik/(k wf) sin(k wf t) - b_ik/(k wf) cos(k wf t) ]
    qd_i(t)  =       sum_k [ a_ik cos(k wf t) + b_ik sin(k wf t) ]
    qdd_i(t) =       sum_k [ -a_ik k wf sin(k wf t) + b_ik k wf cos(k wf t) ]

``a`` and ``b`` are velocity amplitudes [rad/s]. The trajectory is periodic with period
T = 2 pi / wf, so it can be run several periods back to back. It is defined by its *start pose*
``q0 = q(0)`` (also the end pose of every period) and must start and end at rest::

    qd(0)  = sum_k a_ik        = 0
    qdd(0) = wf sum_k k b_ik   = 0

so the offset is c_i = q0_i + sum_k b_ik/(k wf). The constructor checks the rest conditions
and raises ``ValueError`` naming the joint when they do not hold; :meth:`FourierTrajectory.
from_free` builds a trajectory from harmonics 2..H only and fills harmonic 1 so that they hold
exactly (the parametrisation the optimizer in :mod:`identify.excitation.optimizer` uses).

Files: ``.yaml``/``.yml`` hold the coefficients (readable, exact float round trip);
``.npz`` holds the coefficients plus, optionally, a sampled table (t, q, qd, qdd).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from identify.common.fileio import atomic_savez, atomic_write_bytes, dump_yaml, read_yaml
from identify.common.jsonutil import to_jsonable

FORMAT = "twinid-fourier-trajectory"
FORMAT_VERSION = 1

# Rest-condition tolerance: |sum_k a_ik| and |wf sum_k k b_ik| relative to the coefficient size.
_REST_RTOL = 1e-9


@dataclass(frozen=True, eq=False)
class FourierTrajectory:
    """Periodic finite-Fourier-series trajectory (implements :class:`identify.backend.interface.Trajectory`).

    Attributes:
        q0: (n,) start (and end) pose [rad].
        a: (n, H) sine-of-position coefficients = cosine velocity amplitudes [rad/s].
        b: (n, H) cosine-of-position coefficients = sine velocity amplitudes [rad/s].
        wf: fundamental angular frequency [rad/s]; period T = 2 pi / wf [s].
        periods: number of periods in :attr:`duration` (default 1).
        joint_names: optional joint names (used in error messages and files).
        meta: JSON-serialisable metadata (e.g. the optimizer's settings and cond).
    """

    q0: np.ndarray
    a: np.ndarray
    b: np.ndarray
    wf: float
    periods: int = 1
    joint_names: tuple[str, ...] | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        q0 = np.array(self.q0, dtype=float).reshape(-1)
        a = np.array(self.a, dtype=float)
        b = np.array(self.b, dtype=float)
        if a.ndim == 1:
            a = a[:, None]
        if b.ndim == 1:
            b = b[:, None]
        n = q0.shape[0]
        if a.ndim != 2 or a.shape[0] != n or b.shape != a.shape:
            raise ValueError(f"FourierTrajectory: a {a.shape} and b {b.shape} must both be "
                             f"(n, H) with n = len(q0) = {n}")
        if a.shape[1] < 1:
            raise ValueError("FourierTrajectory: need at least one harmonic (H >= 1)")
        for name, v in (("q0", q0), ("a", a), ("b", b)):
            if not np.all(np.isfinite(v)):
                raise ValueError(f"FourierTrajectory: {name} contains non-finite values")
        wf = float(self.wf)
        if not (np.isfinite(wf) and wf > 0):
            raise ValueError(f"FourierTrajectory: wf must be a positive frequency [rad/s], "
                             f"got {self.wf!r}")
        periods = int(self.periods)
        if periods < 1 or periods != self.periods:
            raise ValueError(f"FourierTrajectory: periods must be a positive integer, "
                             f"got {self.periods!r}")
        names = None if self.joint_names is None else tuple(str(s) for s in self.joint_names)
        if names is not None and len(names) != n:
            raise ValueError(f"FourierTrajectory: {len(names)} joint names for {n} joints")
        k = np.arange(1, a.shape[1] + 1, dtype=float)
        scale_a = np.abs(a).sum(axis=1)
        scale_b = (np.abs(b) * k).sum(axis=1)
        res_a = a.sum(axis=1)
        res_b = (b * k).sum(axis=1)
        for i in range(n):
            jn = names[i] if names else f"joint {i + 1}"
            if abs(res_a[i]) > _REST_RTOL * max(scale_a[i], 1.0):
                raise ValueError(
                    f"FourierTrajectory: {jn} does not start at rest: qd(0) = sum_k a_k = "
                    f"{res_a[i]:.3g} rad/s (use FourierTrajectory.from_free to satisfy it)")
            if abs(res_b[i]) > _REST_RTOL * max(scale_b[i], 1.0):
                raise ValueError(
                    f"FourierTrajectory: {jn} does not start with zero acceleration: "
                    f"qdd(0) = wf sum_k k b_k = {wf * res_b[i]:.3g} rad/s^2 "
                    f"(use FourierTrajectory.from_free to satisfy it)")
        for arr in (q0, a, b):
            arr.setflags(write=False)
        object.__setattr__(self, "q0", q0)
        object.__setattr__(self, "a", a)
        object.__setattr__(self, "b", b)
        object.__setattr__(self, "wf", wf)
        object.__setattr__(self, "periods", periods)
        object.__setattr__(self, "joint_names", names)
        object.__setattr__(self, "meta", dict(self.meta))

    # -- construction ------------------------------------------------------------------------
    @classmethod
    def from_free(cls, q0, a_free, b_free, wf: float, **kw) -> "FourierTrajectory":
        """Build from harmonics 2..H; harmonic 1 is set so the trajectory starts at rest.

        Args:
            q0: (n,) start pose [rad].
            a_free, b_free: (n, H-1) coefficients of harmonics 2..H [rad/s] (H-1 may be 0).
            wf: fundamental frequency [rad/s].
        """
        a_free = np.atleast_2d(np.asarray(a_free, dtype=float))
        b_free = np.atleast_2d(np.asarray(b_free, dtype=float))
        a, b = complete_rest(a_free, b_free)
        return cls(q0=q0, a=a, b=b, wf=wf, **kw)

    # -- the Trajectory protocol ----------------------------------------------------------------
    @property
    def n_joints(self) -> int:
        return int(self.q0.shape[0])

    @property
    def n_harmonics(self) -> int:
        return int(self.a.shape[1])

    @property
    def period(self) -> float:
        """One period T = 2 pi / wf [s]."""
        return 2.0 * math.pi / self.wf

    @property
    def duration(self) -> float:
        """periods * T [s]."""
        return self.periods * self.period

    @property
    def offset(self) -> np.ndarray:
        """(n,) constant term c = q0 + sum_k b_k/(k wf) [rad] (the mean position)."""
        k = np.arange(1, self.n_harmonics + 1)
        return self.q0 + (self.b / (k * self.wf)).sum(axis=1)

    def evaluate(self, t) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Analytic q [rad], qd [rad/s], qdd [rad/s^2] at times t (N,) [s] -> 3 x (N, n).

        Any t is allowed (the series is periodic; t beyond one period wraps).
        """
        t = np.asarray(t, dtype=float)
        scalar = t.ndim == 0
        t = t.reshape(-1)
        k = np.arange(1, self.n_harmonics + 1, dtype=float)
        kw = k * self.wf                                   # (H,)
        # Reduce the phase modulo 2 pi first: exact periodicity and accuracy for large t.
        ph = np.mod(np.outer(t, k) * self.wf, 2.0 * math.pi)  # (N, H)
        s, c = np.sin(ph), np.cos(ph)
        q = self.offset + s @ (self.a / kw).T - c @ (self.b / kw).T
        qd = c @ self.a.T + s @ self.b.T
        qdd = -s @ (self.a * kw).T + c @ (self.b * kw).T
        if scalar:
            return q[0], qd[0], qdd[0]
        return q, qd, qdd

    def sample(self, rate_hz: float, periods: int | None = None) -> dict[str, np.ndarray]:
        """Table at `rate_hz` over `periods` periods (default: self.periods), end point included.

        Returns dict t (N,), q, qd, qdd (N, n).
        """
        if not rate_hz > 0:
            raise ValueError(f"sample: rate_hz must be > 0, got {rate_hz!r}")
        p = self.periods if periods is None else int(periods)
        n_s = int(round(p * self.period * rate_hz))
        t = np.arange(n_s + 1) / float(rate_hz)
        q, qd, qdd = self.evaluate(t)
        return {"t": t, "q": q, "qd": qd, "qdd": qdd}

    def extremes(self, n_samples: int = 2000) -> dict[str, np.ndarray]:
        """Per-joint min/max of q and max |qd|, |qdd| on a uniform grid of one period."""
        t = np.arange(n_samples) * (self.period / n_samples)
        q, qd, qdd = self.evaluate(t)
        return {"q_min": q.min(0), "q_max": q.max(0),
                "qd_abs_max": np.abs(qd).max(0), "qdd_abs_max": np.abs(qdd).max(0)}

    # -- files -------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        """Plain (YAML/JSON-serialisable) description; inverse of :meth:`from_dict`."""
        d = {"format": FORMAT, "version": FORMAT_VERSION, "wf_rad_s": self.wf,
             "periods": self.periods, "q0_rad": self.q0.tolist(),
             "a_rad_s": self.a.tolist(), "b_rad_s": self.b.tolist()}
        if self.joint_names is not None:
            d["joint_names"] = list(self.joint_names)
        if self.meta:
            d["meta"] = to_plain(self.meta)
        return d

    @classmethod
    def from_dict(cls, d: dict, where: str = "trajectory") -> "FourierTrajectory":
        """Inverse of :meth:`to_dict`; errors name `where` and the missing/bad key."""
        if not isinstance(d, dict):
            raise ValueError(f"{where}: expected a mapping, got {type(d).__name__}")
        if d.get("format", FORMAT) != FORMAT:
            raise ValueError(f"{where}: not a Fourier trajectory (format={d.get('format')!r})")
        if int(d.get("version", 1)) > FORMAT_VERSION:
            raise ValueError(f"{where}: trajectory format version {d['version']} is newer than "
                             f"this program's ({FORMAT_VERSION})")
        for key in ("wf_rad_s", "q0_rad", "a_rad_s", "b_rad_s"):
            if key not in d:
                raise ValueError(f"{where}: missing key {key!r}")
        try:
            return cls(q0=d["q0_rad"], a=d["a_rad_s"], b=d["b_rad_s"], wf=d["wf_rad_s"],
                       periods=d.get("periods", 1), joint_names=d.get("joint_names"),
                       meta=d.get("meta", {}) or {})
        except ValueError as exc:
            raise ValueError(f"{where}: {exc}") from exc

    def save(self, path: str | os.PathLike, *, rate_hz: float | None = None) -> Path:
        """Write to ``.yaml``/``.yml`` (coefficients) or ``.npz`` (coefficients, plus the
        sampled table t/q/qd/qdd over :attr:`duration` when `rate_hz` is given). Atomic."""
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix in (".yaml", ".yml"):
            text = dump_yaml(self.to_dict(), sort_keys=False, default_flow_style=None)
            atomic_write_bytes(path, text.encode())
        elif suffix == ".npz":
            arrays = {"header": np.frombuffer(json.dumps(self.to_dict()).encode(), np.uint8)}
            if rate_hz is not None:
                arrays.update(self.sample(rate_hz))
            atomic_savez(path, arrays)
        else:
            raise ValueError(f"{path}: unknown trajectory file type {suffix!r} "
                             f"(use .yaml, .yml or .npz)")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "FourierTrajectory":
        """Read a file written by :meth:`save` (errors name the file)."""
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"trajectory file not found: {path}")
        suffix = path.suffix.lower()
        if suffix in (".yaml", ".yml"):
            import yaml
            try:
                d = read_yaml(path)
            except yaml.YAMLError as exc:
                raise ValueError(f"{path}: not valid YAML ({exc})") from exc
        elif suffix == ".npz":
            try:
                with np.load(path, allow_pickle=False) as z:
                    d = json.loads(bytes(z["header"].astype(np.uint8)).decode())
            except Exception as exc:
                raise ValueError(f"{path}: not a readable trajectory file ({exc})") from exc
        else:
            raise ValueError(f"{path}: unknown trajectory file type {suffix!r} "
                             f"(use .yaml, .yml or .npz)")
        return cls.from_dict(d, where=str(path))

    def with_periods(self, periods: int) -> "FourierTrajectory":
        """The same trajectory with `periods` periods in :attr:`duration`."""
        return FourierTrajectory(self.q0, self.a, self.b, self.wf, periods, self.joint_names,
                                 self.meta)


def complete_rest(a_free: np.ndarray, b_free: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Prepend harmonic 1 so that sum_k a_k = 0 and sum_k k b_k = 0 (start at rest).

    a_free, b_free: (n, H-1) coefficients of harmonics 2..H -> a, b (n, H).
    """
    a_free = np.asarray(a_free, dtype=float)
    b_free = np.asarray(b_free, dtype=float)
    if a_free.shape != b_free.shape or a_free.ndim != 2:
        raise ValueError(f"complete_rest: a_free {a_free.shape} and b_free {b_free.shape} must "
                         f"both be (n, H-1)")
    k = np.arange(2, a_free.shape[1] + 2, dtype=float)
    a1 = -a_free.sum(axis=1, keepdims=True)
    b1 = -(b_free * k).sum(axis=1, keepdims=True)
    return np.hstack([a1, a_free]), np.hstack([b1, b_free])


def to_plain(o):
    """Metadata -> plain Python types for YAML / Python's json: :func:`~identify.common.jsonutil.
    to_jsonable` keeping non-finite floats (YAML writes .inf/.nan and reads them back; unlimited
    joint ranges -inf..inf must round-trip); used for the trajectory meta, the problem's
    settings and the cached results (identify.excitation.cache)."""
    return to_jsonable(o, nonfinite="keep", where="trajectory meta")
