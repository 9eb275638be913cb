"""Import recordings made elsewhere: our NPZ recordings, CSV / NPZ / text logs with a column map, or
rosbag2 bags of JointState messages with a topic map (:mod:`identify.logs.rosbag`).

A :class:`~identify.scenario.spec.LogSpec` (the ``fit:`` section of a scenario) says where each signal
is: time, joint positions, optional velocities, joint torques and/or motor currents (turned into
link-side motor torque with per-joint gains eta*beta [N*m/A]) or motor torques -- by explicit
columns, a preset of a logging tool (:mod:`identify.scenario.presets`), or both. Reading is
:mod:`identify.logs.readers`; then unit conversion (``time_scale``, ``position_unit``), a window
(:func:`select_window`: ``window_s`` from the log's start, ``window_t`` in its own time stamps,
``window_rows``), the unit guards (:mod:`identify.logs.guards`) and resampling of irregular time
stamps onto a uniform grid (:func:`identify.estimation.signal.resample_uniform`, cubic).

Every problem raises :class:`LogError` (a ValueError) naming the file, and where it applies the
row (1-based line of the file) and the column/channel at fault.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from identify.backend.recording import Recording
from identify.estimation.processing import MIN_SAMPLES
from identify.estimation.signal import is_uniform, resample_uniform
from identify.scenario.presets import PRESET_FORMAT
from identify.scenario.spec import LogSpec

from . import guards
from .readers import CHANNELS, LogError, read_csv, read_npz, read_text, sniff_format
from .rosbag import read_rosbag

__all__ = ["LogError", "load_log", "load_segments", "gains_from_drives", "CHANNELS",
           "select_window"]

_UNIFORM_TOL = 0.01  # relative step deviation below which a log counts as uniformly sampled


def gains_from_drives(drives_path, joint_names) -> np.ndarray:
    """(n,) link-side current gains eta*beta [N*m/A] for `joint_names` from a drive YAML
    (read by :func:`identify.model.drives.load_drives`; its errors name file, joint and key)."""
    from identify.model.drives import load_drives
    try:
        return load_drives(drives_path, list(joint_names)).array("torque_factor")
    except (ValueError, FileNotFoundError) as exc:
        raise LogError(str(exc)) from None


def select_window(spec: LogSpec, t: np.ndarray, where: str) -> slice:
    """The samples of the log's window: ``window_rows`` [first, stop) 0-based rows,
    ``window_s`` [start, stop] seconds from the first time stamp, ``window_t`` [start, stop] in
    the log's own time stamps (after time_scale) -- at most one of them. A window keeping fewer
    samples than processing needs (MIN_SAMPLES) is an error stating the log's span."""
    given = [k for k in ("window_s", "window_t", "window_rows") if getattr(spec, k) is not None]
    if len(given) > 1:
        raise LogError(f"{where}: give one window, not {' and '.join(given)}")
    N = t.shape[0]
    if not given:
        return slice(0, N)
    key = given[0]
    lo, hi = getattr(spec, key)
    if key == "window_rows":
        a, b = max(0, int(lo)), min(N, int(hi))
    else:
        off = t[0] if key == "window_s" else 0.0
        a = int(np.searchsorted(t, lo + off, side="left"))
        b = int(np.searchsorted(t, hi + off, side="right"))
    span = (f"rows 0..{N}" if key == "window_rows" else
            f"0..{t[-1] - t[0]:g} s from its start" if key == "window_s" else
            f"time stamps {t[0]:g}..{t[-1]:g} s")
    if b - a < MIN_SAMPLES:
        raise LogError(f"{where}: {key} {[lo, hi]} keeps {max(b - a, 0)} samples (processing "
                       f"needs at least {MIN_SAMPLES}; the log spans {span})")
    # a window reaching past the log's end (or before its start) keeps less than asked for
    dt = float(np.median(np.diff(t))) if N > 1 else 0.0
    past = (hi > N or lo < 0) if key == "window_rows" else \
        (hi + off > t[-1] + dt or lo + off < t[0] - dt)
    if past:
        raise LogError(f"{where}: {key} {[lo, hi]} reaches beyond the log (it spans {span}); "
                       f"give a window inside it")
    return slice(a, b)


#: a part of a log between two gaps shorter than this [s] is left out of the fit (the filters'
#: edges and the differentiation take its samples; it carries next to no excitation)
MIN_SEGMENT_S = 1.0


def load_log(spec: LogSpec, joint_names, *, gains=None, where: str | None = None,
             model=None, warnings: list | None = None) -> Recording:
    """Read the log described by `spec` as one uniformly sampled :class:`Recording`; a time
    step longer than guards.MAX_GAP_SAMPLES periods (lost samples) is refused
    (:func:`load_segments` splits the log there instead). Arguments and result as
    :func:`load_segments`' single segment."""
    return _load(spec, joint_names, gains, where, model, warnings, split=False)[0]


def load_segments(spec: LogSpec, joint_names, *, gains=None, where: str | None = None,
                  model=None, warnings: list | None = None) -> list[Recording]:
    """The log's contiguous segments: split at every time step longer than
    guards.MAX_GAP_SAMPLES sample periods (samples lost: no interpolation may fill them), each
    resampled on its own; segments shorter than MIN_SEGMENT_S [s] are left out. A log without
    gaps is one segment. What was split and left out is appended to `warnings`, naming the file
    and the spans; LogError when no segment is long enough. Segment k carries
    ``meta['log']['segment']`` = {index, of, span_s: [first, last] [s] from the log's start}."""
    return _load(spec, joint_names, gains, where, model, warnings, split=True)


def _load(spec: LogSpec, joint_names, gains, where, model, warnings, *, split: bool
          ) -> list[Recording]:
    """Read the log described by `spec` as uniformly sampled :class:`Recording` segments.

    Args:
        spec: the log description (file, format, preset, columns, units, window, rate).
        joint_names: (n,) joint order of the identification model.
        gains: (n,) default current gains eta*beta [N*m/A] (used when ``spec.current_gains`` is
            unset and currents are mapped).
        where: label used in messages (default: the file path).
        model: the RobotModel, for the unit guards (limits, rigid-body torque); None skips the
            position and torque guards.
        warnings: list the guards' warnings are appended to.
        split: cut the log at its gaps (else a gap is refused).
    Returns:
        [Recording] with t (N,) [s] the log's time stamps (of the window), q [rad], and whichever
        of qd [rad/s], tau_j, i_m [A], tau_m [N*m] were mapped; ``meta['log']`` records the import.
    """
    if spec.file is None:
        raise LogError("no log file: set fit.<log>.file or pass --log / --validation-log")
    path = Path(spec.file)
    where = where or str(path)
    fmt = spec.format
    if fmt == "auto":
        fmt = (PRESET_FORMAT.get(spec.preset) if spec.preset else None) or sniff_format(path)
    names = list(joint_names)
    warnings = [] if warnings is None else warnings
    t, ch, meta, row0, dtruth = _read(spec, fmt, path, names, gains, where, warnings)
    _check_time(t, where, fmt, row0)
    win = select_window(spec, t, where)
    if win != slice(0, t.shape[0]):
        t = t[win]
        ch = {k: None if v is None else v[win] for k, v in ch.items()}
    # samples outside the window are not used: only the window's must be finite
    _check_channels(ch, where, fmt, row0 + int(win.start or 0))
    if spec.check_units and fmt != "recording":
        guards.check_time(t, spec.time_scale, where)
        if model is not None:       # magnitudes only: <= 200 000 evenly spread samples
            k = max(1, t.shape[0] // 200_000)
            q_s = ch["q"][::k]
            guards.check_positions(q_s, model, spec.position_unit, where, warnings)
            guards.check_torque(None if ch["tau_m"] is None else ch["tau_m"][::k],
                                _gravity_torque(model, q_s), model, where,
                                from_currents=ch["i_m"] is not None, warnings=warnings)
            guards.check_torque_sign(t[::k], q_s, None if ch["tau_m"] is None else
                                     ch["tau_m"][::k], model, where,
                                     from_currents=ch["i_m"] is not None)
    dt = np.diff(t)
    rate = float(spec.rate_hz) if spec.rate_hz else 1.0 / float(np.median(dt))
    loc = lambda i: _loc(fmt, row0 + int(win.start or 0) + i)     # noqa: E731
    if not split:
        guards.check_gaps(t, rate, where, loc)
    spans = _segments(t, rate, where, loc, warnings) if split else [(0, t.shape[0])]
    window = {k: list(getattr(spec, k)) for k in ("window_s", "window_t", "window_rows")
              if getattr(spec, k) is not None} or None
    meta = dict(meta)
    bag = meta.pop("rosbag2", None)
    out = []
    for k, (a, b) in enumerate(spans):
        ts, cs = t[a:b], {c: None if v is None else v[a:b] for c, v in ch.items()}
        resampled = not is_uniform(ts, rate, _UNIFORM_TOL)
        if resampled:
            ts, cs = _resampled(ts, cs, rate)
        m = dict(meta)
        m["log"] = {"file": str(path), "format": fmt, "preset": spec.preset,
                    "resampled": bool(resampled), "rate_hz": rate, "window": window,
                    "channels": [c for c, v in cs.items() if v is not None]}
        if bag is not None:
            m["log"]["rosbag2"] = bag
        if len(spans) > 1:
            m["log"]["segment"] = {"index": k, "of": len(spans),
                                   "span_s": [float(t[a] - t[0]), float(t[b - 1] - t[0])]}
        out.append(Recording(t=ts, q=cs["q"], rate_hz=rate, joint_names=names, tau_j=cs["tau_j"],
                             i_m=cs["i_m"], tau_m=cs["tau_m"], qd=cs["qd"], meta=m,
                             drive_truth=dtruth))
    return out


def _resampled(t: np.ndarray, ch: dict, rate: float) -> tuple[np.ndarray, dict]:
    """(t, channels) resampled onto a uniform grid at `rate` [Hz] (cubic; no step longer than
    guards.MAX_GAP_SAMPLES periods is left to bridge)."""
    present = [k for k, v in ch.items() if v is not None]
    tu, xu = resample_uniform(t, np.concatenate([ch[k] for k in present], axis=1), rate,
                              method="cubic")
    return tu, {k: None for k in CHANNELS} | dict(zip(present, np.split(xu, len(present), axis=1)))


def _segments(t: np.ndarray, rate: float, where: str, loc, warnings: list) -> list:
    """[(first, stop)] sample ranges of the log's parts between its gaps that are at least
    MIN_SEGMENT_S [s] long; the split and what was left out appended to `warnings`."""
    gaps = guards.gap_indices(t, rate)
    if not gaps.size:
        return [(0, t.shape[0])]
    edges = np.concatenate([[0], gaps + 1, [t.shape[0]]])
    parts = list(zip(edges[:-1].tolist(), edges[1:].tolist()))
    keep = [(a, b) for a, b in parts
            if b - a >= MIN_SAMPLES and t[b - 1] - t[a] >= MIN_SEGMENT_S]
    words = lambda ab: f"{t[ab[0]] - t[0]:.3f}..{t[ab[1] - 1] - t[0]:.3f} s"    # noqa: E731
    head = (f"{where}: time: {gaps.size} gap(s) in the samples longer than "
            f"{guards.MAX_GAP_SAMPLES} sample periods ({guards.MAX_GAP_SAMPLES / rate:g} s at "
            f"{rate:g} Hz), from the log's start: {guards.gap_spans(t, gaps, loc)}")
    if not keep:
        raise LogError(f"{head}; no part between them lasts {MIN_SEGMENT_S:g} s: nothing to fit")
    dropped = [p for p in parts if p not in keep]
    warnings.append(f"{head}: fitted as {len(keep)} segment(s) ({', '.join(map(words, keep))}), "
                    f"each filtered and differentiated on its own, none bridged by interpolation"
                    + (f"; left out, shorter than {MIN_SEGMENT_S:g} s: "
                       f"{', '.join(map(words, dropped))}" if dropped else ""))
    return keep


# ------------------------------------------------------------------------------------------------

def _read(spec: LogSpec, fmt: str, path: Path, names: list, gains, where: str, warnings: list):
    """The log's samples in SI units before any window: t (N,) [s], {channel: (N, n) | None}
    (tau_m from i_m and gains when only currents are mapped), meta, the file's row of sample 0
    and the drive truth of our own recordings."""
    n = len(names)
    if fmt == "recording":
        rec = Recording.load(path)
        if rec.joint_names != names:
            raise LogError(f"{where}: recording joints {rec.joint_names} differ from the model's "
                           f"{names}")
        t, ch = rec.t, {c: getattr(rec, c) for c in CHANNELS}
        if ch["tau_m"] is None and ch["i_m"] is not None:
            ch["tau_m"] = ch["i_m"] * _gains(spec, gains, n, where)
        return t, ch, dict(rec.meta), 0, rec.drive_truth
    meta: dict = {}
    if fmt == "rosbag2":
        if spec.columns is not None:
            raise LogError(f"{where}: a rosbag2 log maps signals to topics (fit.*.topics), not "
                           f"columns")
        t, ch, meta["rosbag2"] = read_rosbag(path, spec, names, where, warnings)
        row0 = 0
    else:
        if spec.columns is None and spec.preset is None and fmt != "text":
            raise LogError(f"{where}: a {fmt} log needs a column mapping (fit.*.columns) or a "
                           f"preset (fit.*.preset)")
        reader = {"csv": read_csv, "npz": read_npz, "text": read_text}[fmt]
        t, ch, row0 = reader(path, spec, n, where)
        if t is None:
            if not spec.rate_hz:
                raise LogError(f"{where}: no time stamps mapped: map columns.time or give rate_hz")
            t = np.arange(ch["q"].shape[0]) / float(spec.rate_hz)
        else:
            t = t * spec.time_scale
    if spec.position_unit == "deg":
        for c in ("q", "qd"):
            if ch[c] is not None:
                ch[c] = np.deg2rad(ch[c])
    if ch["i_m"] is not None and ch["tau_m"] is None:
        ch["tau_m"] = ch["i_m"] * _gains(spec, gains, n, where)
    return t, ch, meta, row0, None


def _gravity_torque(model, q: np.ndarray, max_samples: int = 2000) -> np.ndarray:
    """Rigid-body torque of the URDF at rest, RNEA(q, 0, 0) (N', n), on <= max_samples samples
    (the guard only needs magnitudes)."""
    step = max(1, q.shape[0] // max_samples)
    qs = q[::step]
    z = np.zeros_like(qs)
    return model.inverse_dynamics(qs, z, z)


def _gains(spec: LogSpec, default, n: int, where: str) -> np.ndarray:
    g = spec.current_gains if spec.current_gains is not None else default
    if g is None:
        raise LogError(f"{where}: motor currents need per-joint gains (current_gains or arm.drives)")
    g = np.asarray(g, dtype=float)
    if g.shape != (n,):
        raise LogError(f"{where}: current_gains must have {n} entries, got {g.size}")
    if np.any(g == 0) or not np.all(np.isfinite(g)):
        raise LogError(f"{where}: current_gains must be finite and non-zero, got {g.tolist()}")
    return g


def _loc(fmt: str, i: int) -> str:
    """Sample i of the file in words (1-based line of a CSV / text file)."""
    return f"line {i}" if fmt in ("csv", "text") else f"sample {i}"


def _check_time(t: np.ndarray, where: str, fmt: str, row0: int) -> None:
    """At least 4 samples; time stamps finite and strictly increasing."""
    if t.shape[0] < 4:
        raise LogError(f"{where}: only {t.shape[0]} samples")
    bad = ~np.isfinite(t)
    if bad.any():
        raise LogError(f"{where}: time is not finite at {_loc(fmt, row0 + int(np.argmax(bad)))}")
    d = np.diff(t)
    if np.any(d <= 0):
        i = int(np.argmax(d <= 0)) + 1
        raise LogError(f"{where}: time stamps must increase strictly; {_loc(fmt, row0 + i)} has "
                       f"t={t[i]!r} after t={t[i - 1]!r}")


def _check_channels(ch: dict, where: str, fmt: str, row0: int) -> None:
    """Every mapped channel finite (row0: the file's row of sample 0)."""
    for name, a in ch.items():
        if a is None:
            continue
        bad = ~np.isfinite(a)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise LogError(f"{where}: {name} of joint {j + 1} is not finite at "
                           f"{_loc(fmt, row0 + int(i))}")
