"""Import recordings made elsewhere: our NPZ recordings, or CSV / NPZ logs with a column map.

A :class:`~identify.scenario.spec.LogSpec` (the ``fit:`` section of a scenario) says where each signal
is: time, joint positions, optional velocities, joint torques and/or motor currents (turned into
link-side motor torque with per-joint gains eta*beta [N*m/A]) or motor torques. Columns are 0-based
indices (CSV), names from a header row (CSV, ``header: true``) or array keys (NPZ: one (N, n) array
or a list of n (N,) arrays). Optional unit conversion (``time_scale``, ``position_unit``), a sample
window, and resampling of irregular time stamps onto a uniform grid
(:func:`identify.estimation.signal.resample_uniform`, cubic) complete the import.

Every problem raises :class:`LogError` (a ValueError) naming the file, and where it applies the
row (1-based line of the file) and the column/channel at fault.
"""
from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np

from identify.backend.recording import Recording
from identify.scenario.spec import ColumnMap, LogSpec
from identify.estimation.signal import is_uniform, resample_uniform

__all__ = ["LogError", "load_log", "gains_from_drives", "CHANNELS"]

CHANNELS = ("q", "qd", "tau_j", "i_m", "tau_m")
_UNIFORM_TOL = 0.01  # relative step deviation below which a log counts as uniformly sampled


class LogError(ValueError):
    """A log that cannot be imported; the message names file, row and column."""


def gains_from_drives(drives_path, joint_names) -> np.ndarray:
    """(n,) link-side current gains eta*beta [N*m/A] for `joint_names` from a drive YAML
    (read by :func:`identify.model.drives.load_drives`; its errors name file, joint and key)."""
    from identify.model.drives import load_drives
    try:
        return load_drives(drives_path, list(joint_names)).array("torque_factor")
    except (ValueError, FileNotFoundError) as exc:
        raise LogError(str(exc)) from None


def load_log(spec: LogSpec, joint_names, *, gains=None, where: str | None = None) -> Recording:
    """Read the log described by `spec` as a uniformly sampled :class:`Recording`.

    Args:
        spec: the log description (file, format, columns, units, window, rate).
        joint_names: (n,) joint order of the identification model.
        gains: (n,) default current gains eta*beta [N*m/A] (used when ``spec.current_gains`` is
            unset and currents are mapped).
        where: label used in messages (default: the file path).
    Returns:
        Recording with t (N,) [s] starting where the log (window) starts, q [rad], and whichever
        of qd [rad/s], tau_j, i_m [A], tau_m [N*m] were mapped; ``meta['log']`` records the import.
    """
    path = Path(spec.file)
    where = where or str(path)
    fmt = spec.format
    if fmt == "auto":
        fmt = _sniff(path)
    names = list(joint_names)
    if fmt == "recording":
        rec = Recording.load(path)
        if rec.joint_names != names:
            raise LogError(f"{where}: recording joints {rec.joint_names} differ from the model's "
                           f"{names}")
        t, ch = rec.t, {c: getattr(rec, c) for c in CHANNELS}
        if ch["tau_m"] is None and ch["i_m"] is not None:
            g = _gains(spec, gains, len(names), where)
            ch["tau_m"] = ch["i_m"] * g
        meta = dict(rec.meta)
    else:
        if spec.columns is None:
            raise LogError(f"{where}: a {fmt} log needs a column mapping (fit.*.columns)")
        if fmt == "csv":
            t, ch = _read_csv(path, spec, len(names), where)
        else:
            t, ch = _read_npz(path, spec.columns, len(names), where)
        t = t * spec.time_scale
        if spec.position_unit == "deg":
            for c in ("q", "qd"):
                if ch[c] is not None:
                    ch[c] = np.deg2rad(ch[c])
        if ch["i_m"] is not None and ch["tau_m"] is None:
            ch["tau_m"] = ch["i_m"] * _gains(spec, gains, len(names), where)
        meta = {}
    _check(t, ch, where, fmt)
    if spec.window_s is not None:
        lo, hi = spec.window_s
        keep = (t >= lo) & (t <= hi)
        if keep.sum() < 4:
            raise LogError(f"{where}: window_s {list(spec.window_s)} keeps {int(keep.sum())} "
                           f"samples (log spans {t[0]:g}..{t[-1]:g} s)")
        t = t[keep]
        ch = {k: None if v is None else v[keep] for k, v in ch.items()}
    dt = np.diff(t)
    rate = float(spec.rate_hz) if spec.rate_hz else 1.0 / float(np.median(dt))
    resampled = not is_uniform(t, rate, _UNIFORM_TOL)
    if resampled:
        present = [k for k, v in ch.items() if v is not None]
        stacked = np.concatenate([ch[k] for k in present], axis=1)
        tu, xu = resample_uniform(t, stacked, rate, method="cubic")
        parts = np.split(xu, len(present), axis=1)
        ch = {k: None for k in CHANNELS} | dict(zip(present, parts))
        t = tu
    meta = dict(meta)
    meta["log"] = {"file": str(path), "format": fmt, "resampled": bool(resampled),
                   "rate_hz": rate, "window_s": None if spec.window_s is None else list(spec.window_s)}
    return Recording(t=t, q=ch["q"], rate_hz=rate, joint_names=names, tau_j=ch["tau_j"],
                     i_m=ch["i_m"], tau_m=ch["tau_m"], qd=ch["qd"], meta=meta)


# ------------------------------------------------------------------------------------------------

def _sniff(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix == ".npz":
        try:
            with np.load(path, allow_pickle=False) as z:
                if "header" in z.files:
                    h = json.loads(bytes(z["header"].astype(np.uint8)).decode())
                    if isinstance(h, dict) and h.get("format") == "twinid-recording":
                        return "recording"
        except Exception as exc:  # noqa: BLE001
            raise LogError(f"{path}: not a readable NPZ file ({exc})") from None
        return "npz"
    if suffix in (".csv", ".txt", ".tsv", ".dat"):
        return "csv"
    raise LogError(f"{path}: cannot tell the log format from the suffix {suffix!r}; "
                   f"set format: csv | npz | recording")


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


def _read_csv(path: Path, spec: LogSpec, n: int, where: str):
    try:
        text = path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise LogError(f"{where}: cannot read ({exc})") from None
    lines = text.splitlines()
    first = 0
    while first < len(lines) and not lines[first].strip():
        first += 1
    header: list[str] = []
    delim = spec.delimiter if spec.delimiter.strip() else None
    if spec.header:
        if first >= len(lines):
            raise LogError(f"{where}: empty file (expected a header row)")
        header = [h.strip().strip('"') for h in lines[first].split(spec.delimiter)]
        first += 1
    body = "\n".join(lines[first:])
    try:
        data = np.loadtxt(io.StringIO(body), delimiter=delim, ndmin=2, comments="#")
    except ValueError as exc:
        msg = str(exc)
        raise LogError(f"{where}: {_shift_rows(msg, first)}") from None
    if data.size == 0:
        raise LogError(f"{where}: no data rows")
    ncol = data.shape[1]

    def col(c, channel):
        if isinstance(c, str):
            if not header:
                raise LogError(f"{where}: column {c!r} for {channel}: named columns need header: true")
            if c not in header:
                raise LogError(f"{where}: column {c!r} for {channel} is not in the header "
                               f"{header}")
            return header.index(c)
        if not 0 <= c < ncol:
            raise LogError(f"{where}: column {c} for {channel} is out of range (the file has "
                           f"{ncol} columns, 0..{ncol - 1})")
        return c

    cm = spec.columns
    t = data[:, col(cm.time, "time")]
    ch = {}
    for name in CHANNELS:
        cols = getattr(cm, name)
        if cols is None:
            ch[name] = None
            continue
        if isinstance(cols, str):
            raise LogError(f"{where}: {name}: a CSV log needs one column per joint, got {cols!r}")
        if len(cols) != n:
            raise LogError(f"{where}: {name}: {len(cols)} columns for {n} joints")
        ch[name] = data[:, [col(c, f"{name}[{j}]") for j, c in enumerate(cols)]]
    _first_row = first + 1  # 1-based line of the first data row
    ch["_row0"] = _first_row
    return t, ch


def _shift_rows(msg: str, offset: int) -> str:
    """numpy reports rows relative to the parsed text; point at the file's line instead."""
    import re
    return re.sub(r"row (\d+)", lambda m: f"line {int(m.group(1)) + offset + 1}", msg)


def _read_npz(path: Path, cm: ColumnMap, n: int, where: str):
    try:
        z = np.load(path, allow_pickle=False)
        arrays = {k: z[k] for k in z.files}
    except Exception as exc:  # noqa: BLE001
        raise LogError(f"{where}: not a readable NPZ file ({exc})") from None

    def get(key, channel):
        if not isinstance(key, str):
            raise LogError(f"{where}: {channel}: NPZ columns are array keys (strings), got {key!r}")
        if key not in arrays:
            raise LogError(f"{where}: {channel}: no array {key!r} in the file (has {sorted(arrays)})")
        return np.asarray(arrays[key], dtype=float)

    t = get(cm.time, "time").reshape(-1)
    ch = {}
    for name in CHANNELS:
        spec = getattr(cm, name)
        if spec is None:
            ch[name] = None
        elif isinstance(spec, str):
            a = get(spec, name)
            if a.ndim != 2 or a.shape[1] != n:
                raise LogError(f"{where}: {name}: array {spec!r} has shape {a.shape}, "
                               f"expected (N, {n})")
            ch[name] = a
        else:
            if len(spec) != n:
                raise LogError(f"{where}: {name}: {len(spec)} keys for {n} joints")
            cols = [get(k, f"{name}[{j}]").reshape(-1) for j, k in enumerate(spec)]
            if len({c.size for c in cols}) != 1:
                raise LogError(f"{where}: {name}: arrays {list(spec)} have different lengths")
            ch[name] = np.stack(cols, axis=1)
    for name, a in ch.items():
        if a is not None and a.shape[0] != t.shape[0]:
            raise LogError(f"{where}: {name} has {a.shape[0]} samples but time has {t.shape[0]}")
    ch["_row0"] = 0
    return t, ch


def _check(t: np.ndarray, ch: dict, where: str, fmt: str) -> None:
    row0 = ch.pop("_row0", 0)

    def loc(i):  # describe sample i
        return f"line {row0 + i}" if fmt == "csv" else f"sample {i}"

    if t.shape[0] < 4:
        raise LogError(f"{where}: only {t.shape[0]} samples")
    bad = ~np.isfinite(t)
    if bad.any():
        raise LogError(f"{where}: time is not finite at {loc(int(np.argmax(bad)))}")
    for name, a in ch.items():
        if a is None:
            continue
        bad = ~np.isfinite(a)
        if bad.any():
            i, j = np.argwhere(bad)[0]
            raise LogError(f"{where}: {name} of joint {j + 1} is not finite at {loc(int(i))}")
    d = np.diff(t)
    if np.any(d <= 0):
        i = int(np.argmax(d <= 0)) + 1
        raise LogError(f"{where}: time stamps must increase strictly; {loc(i)} has t={t[i]!r} "
                       f"after t={t[i - 1]!r}")
