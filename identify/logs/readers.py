"""Reading the raw columns of a log: CSV (only the mapped columns are parsed, straight from the
file -- a 1 M-row, 19-column CSV needs ~150 MB, not a copy of the text), NPZ arrays, and text
logs with one file per signal. Each reader returns ``t (N,)`` (or None: no time column) and
``{channel: (N, n) | None}`` in the file's units, and the 1-based line of the first data row.

Column maps come from the scenario (``fit.*.columns``) merged over a preset
(:mod:`identify.scenario.presets`): explicit columns win; a preset's channel the file does not
have is left out."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from identify.scenario.presets import PRESETS, joint_column_candidates

CHANNELS = ("q", "qd", "tau_j", "i_m", "tau_m")


class LogError(ValueError):
    """A log that cannot be imported; the message names file, row and column."""


def sniff_format(path: Path) -> str:
    """The format of the log at `path` from its suffix (an NPZ file also by its header), or
    "rosbag2" for a bag folder (holding metadata.yaml) or a .mcap / .db3 storage file."""
    if path.is_dir():
        if (path / "metadata.yaml").is_file():
            return "rosbag2"
        raise LogError(f"{path}: a directory without metadata.yaml is not a rosbag2 bag folder")
    suffix = path.suffix.lower()
    if suffix in (".mcap", ".db3"):
        return "rosbag2"
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
    if suffix in (".csv", ".txt", ".tsv", ".dat", ".log"):
        return "csv"
    raise LogError(f"{path}: cannot tell the log format from the suffix {suffix!r}; "
                   f"set format: csv | npz | text | recording | rosbag2")


def column_map(spec) -> dict:
    """channel -> column spec (time included): the preset's base names under the scenario's
    explicit columns. Preset entries are marked ("preset", base) so readers can expand them
    per joint and drop them when absent."""
    out: dict = {}
    if spec.preset is not None:
        out.update({k: ("preset", v) for k, v in PRESETS[spec.preset].items()})
    if spec.columns is not None:
        for k in ("time",) + CHANNELS:
            v = getattr(spec.columns, k)
            if v is not None:
                out[k] = v
    return out


# -- CSV ------------------------------------------------------------------------------------------

def _first_lines(path: Path, where: str, k: int = 2) -> tuple[list[str], int]:
    """The first `k` non-empty, non-comment lines and the 0-based line index of the first."""
    out, first = [], None
    try:
        with open(path, encoding="utf-8-sig") as f:
            for i, line in enumerate(f):
                if line.strip() and not line.lstrip().startswith("#"):
                    if first is None:
                        first = i
                    out.append(line.rstrip("\n"))
                    if len(out) >= k:
                        break
    except (OSError, UnicodeDecodeError) as exc:
        raise LogError(f"{where}: cannot read ({exc})") from None
    if first is None:
        raise LogError(f"{where}: no data rows")
    return out, first


def _delimiter(spec, line: str) -> str | None:
    d = spec.delimiter
    if d != "auto":
        return d if d.strip() else None
    for c in (",", ";", "\t"):
        if c in line:
            return c
    return None                                   # whitespace (UR RTDE's record.py)


def _split(line: str, delim: str | None) -> list[str]:
    parts = line.split(delim) if delim else line.split()
    return [p.strip().strip('"') for p in parts]


def _wants_header(spec, cmap: dict) -> bool:
    if spec.header is not None:
        return bool(spec.header)
    named = any(isinstance(v, str) or (isinstance(v, tuple) and v and v[0] == "preset")
                or (isinstance(v, tuple) and any(isinstance(x, str) for x in v))
                for v in cmap.values())
    return named


def _preset_joint_columns(header: list, base: str, name: str, n: int, preset, where: str):
    """Header indices of a preset channel's n joint columns; None when the file has none of
    them (the channel is left out). Refused naming the column: some joints' columns missing (a
    missing current column of 6 was found only as "no torque signal"), or a column for joint
    n + 1 (a 7-joint log for a 6-joint arm was blamed on degrees)."""
    hits = [[h for h in joint_column_candidates(base, j) if h in header] for j in range(n + 1)]
    have = [j for j in range(n) if hits[j]]
    if not have:
        return None
    if len(have) < n:
        j = next(j for j in range(n) if not hits[j])
        raise LogError(f"{where}: preset {preset}: {name}: no column "
                       f"{joint_column_candidates(base, j)[0]} (joint {j + 1}) in the header; "
                       f"the file has it for joints {', '.join(str(k + 1) for k in have)}")
    if hits[n]:
        m = n + 1
        while any(h in header for h in joint_column_candidates(base, m)):
            m += 1
        raise LogError(f"{where}: preset {preset}: {name}: the log has {m} joints "
                       f"({hits[0][0]}..{hits[n][0]}), the arm {n}: a log of another arm?")
    return [header.index(hits[j][0]) for j in range(n)]


def read_csv(path: Path, spec, n: int, where: str):
    cmap = column_map(spec)
    lines, first = _first_lines(path, where)
    delim = _delimiter(spec, lines[0])
    header: list[str] = []
    skip = first
    if _wants_header(spec, cmap):
        header = _split(lines[0], delim)
        skip = first + 1
        if len(lines) < 2:
            raise LogError(f"{where}: no data rows after the header")
    ncol = len(_split(lines[1] if header else lines[0], delim))

    def col(c, channel):
        if isinstance(c, str):
            if not header:
                raise LogError(f"{where}: column {c!r} for {channel}: named columns need "
                               f"header: true")
            if c not in header:
                raise LogError(f"{where}: column {c!r} for {channel} is not in the header "
                               f"{header}")
            return header.index(c)
        if not 0 <= c < ncol:
            raise LogError(f"{where}: column {c} for {channel} is out of range (the file has "
                           f"{ncol} columns, 0..{ncol - 1})")
        return c

    wanted: dict[str, list[int] | int] = {}
    for name, c in cmap.items():
        if isinstance(c, tuple) and c and c[0] == "preset":
            base = c[1]
            if name == "time":
                if base in header:
                    wanted[name] = header.index(base)
                continue
            idx = _preset_joint_columns(header, base, name, n, spec.preset, where)
            if idx is not None:
                wanted[name] = idx
            elif name == "q":
                raise LogError(f"{where}: preset {spec.preset}: no columns "
                               f"{joint_column_candidates(base, 0)[0]}..{n - 1} for q in the "
                               f"header {header[:12]}{'...' if len(header) > 12 else ''}")
            continue
        if name == "time":
            wanted[name] = col(c, "time")
            continue
        if isinstance(c, str):
            raise LogError(f"{where}: {name}: a CSV log needs one column per joint, got {c!r}")
        if len(c) != n:
            raise LogError(f"{where}: {name}: {len(c)} columns for {n} joints")
        wanted[name] = [col(x, f"{name}[{j}]") for j, x in enumerate(c)]
    if "q" not in wanted:
        raise LogError(f"{where}: no joint positions mapped (columns.q or a preset)")
    use = sorted({i for v in wanted.values() for i in (v if isinstance(v, list) else [v])})
    pos = {c: k for k, c in enumerate(use)}
    try:
        data = np.loadtxt(path, delimiter=delim, skiprows=skip, usecols=use, ndmin=2,
                          comments="#", dtype=float, encoding="utf-8-sig")
    except ValueError as exc:
        import re
        msg = re.sub(r"row (\d+)", lambda m: f"line {int(m.group(1)) + skip + 1}", str(exc))
        raise LogError(f"{where}: {msg}") from None
    if data.size == 0:
        raise LogError(f"{where}: no data rows")
    t = data[:, pos[wanted["time"]]].copy() if "time" in wanted else None
    ch = {k: None for k in CHANNELS}
    for name in CHANNELS:
        if name in wanted:
            ch[name] = np.ascontiguousarray(data[:, [pos[i] for i in wanted[name]]])
    return t, ch, skip + 1


# -- NPZ ------------------------------------------------------------------------------------------

def read_npz(path: Path, spec, n: int, where: str):
    cmap = column_map(spec)
    try:
        z = np.load(path, allow_pickle=False)
        files = set(z.files)
    except Exception as exc:  # noqa: BLE001
        raise LogError(f"{where}: not a readable NPZ file ({exc})") from None

    def get(key, channel):
        if not isinstance(key, str):
            raise LogError(f"{where}: {channel}: NPZ columns are array keys (strings), got {key!r}")
        if key not in files:
            raise LogError(f"{where}: {channel}: no array {key!r} in the file (has {sorted(files)})")
        return np.asarray(z[key], dtype=float)

    t = None
    ch = {k: None for k in CHANNELS}
    for name, c in cmap.items():
        if isinstance(c, tuple) and c and c[0] == "preset":
            base = c[1]
            if base in files:
                c = base
            else:
                keys = [next((h for h in joint_column_candidates(base, j) if h in files), None)
                        for j in range(n)]
                if None in keys:
                    if name == "q":
                        raise LogError(f"{where}: preset {spec.preset}: no array {base!r} for q "
                                       f"(has {sorted(files)})")
                    continue
                c = tuple(keys)
        if name == "time":
            t = get(c, "time").reshape(-1)
            continue
        if isinstance(c, str):
            a = get(c, name)
            if a.ndim != 2 or a.shape[1] != n:
                raise LogError(f"{where}: {name}: array {c!r} has shape {a.shape}, "
                               f"expected (N, {n})")
            ch[name] = a
        else:
            if len(c) != n:
                raise LogError(f"{where}: {name}: {len(c)} keys for {n} joints")
            cols = [get(k, f"{name}[{j}]").reshape(-1) for j, k in enumerate(c)]
            if len({x.size for x in cols}) != 1:
                raise LogError(f"{where}: {name}: arrays {list(c)} have different lengths")
            ch[name] = np.stack(cols, axis=1)
    if ch["q"] is None:
        raise LogError(f"{where}: no joint positions mapped (columns.q or a preset)")
    N = ch["q"].shape[0]
    for name, a in list(ch.items()) + [("time", t)]:
        if a is not None and a.shape[0] != N:
            raise LogError(f"{where}: {name} has {a.shape[0]} samples but q has {N}")
    return t, ch, 0


# -- one file per signal --------------------------------------------------------------------------

def read_text(path: Path, spec, n: int, where: str):
    """Text logs, one file per signal next to `path` (the file of ``fit.*.file``): one value per
    line; a joint signal holds n lines per sample (joint 1..n of sample 0, then sample 1, ...),
    the time file one line per sample."""
    cmap = column_map(spec)
    if spec.preset is None and spec.columns is None:
        cmap = {k: ("preset", v) for k, v in PRESETS["text_per_signal"].items()}
    folder = path.parent
    t = None
    ch = {k: None for k in CHANNELS}
    for name, c in cmap.items():
        optional = isinstance(c, tuple) and c and c[0] == "preset"
        fname = c[1] if optional else c
        if not isinstance(fname, str):
            raise LogError(f"{where}: {name}: text logs map a signal to a file name, got {fname!r}")
        f = folder / fname
        if not f.is_file():
            if optional and name != "q":
                continue
            raise LogError(f"{where}: {name}: file {f} not found")
        try:
            v = np.loadtxt(f, dtype=float, ndmin=1, comments="#")
        except ValueError as exc:
            raise LogError(f"{f}: {exc}") from None
        v = v.reshape(-1)
        if name == "time":
            t = v
            continue
        if v.size % n:
            raise LogError(f"{f}: {v.size} values are not a whole number of samples of {n} joints "
                           f"(one value per line, {n} lines per sample)")
        ch[name] = v.reshape(-1, n)
    N = ch["q"].shape[0]
    for name, a in list(ch.items()) + [("time", t)]:
        if a is not None and a.shape[0] != N:
            raise LogError(f"{where}: {name} has {a.shape[0]} samples but q has {N}")
    return t, ch, 1
