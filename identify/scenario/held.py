"""Data already held (``trajectories.excitation.held``): what each entry names, read far enough to
refuse a wrong entry when the scenario is loaded (before anything is optimized or run).

An entry is a path or a log description:

* a folder: a run folder of ``twinid run``; its recorded excitation, ``recordings/excitation.npz``
  (only the run's own excitation: the data that run itself held are not followed -- list them
  too);
* a file: a recording ``.npz`` (:class:`identify.backend.recording.Recording`);
* a mapping: a log read through the log reader like ``fit.excitation``
  (:class:`~identify.scenario.spec.LogSpec`).

Here only the recording's header is read (format, joint names, rate), with numpy: the scenario
package does not import the backend package. The samples are read when the run starts
(:mod:`identify.logs.held`).
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np

from identify.outputs.layout import held_recording as held_file


def path_problem(entry: Path) -> str | None:
    """Why a path entry cannot be held data (missing, a folder without a recorded excitation),
    or None. The file's content is checked by :func:`recording_header`."""
    entry = Path(entry)
    if not entry.exists():
        return f"not found: {entry}"
    kind, f = held_file(entry)
    if kind == "run" and not f.is_file():
        return (f"{entry} is a folder without a recorded excitation ({f.relative_to(entry)} is missing: "
                f"not a run folder of twinid run, or one written with "
                f"outputs.save_recordings: false)")
    return None


def recording_header(path: Path) -> dict:
    """The header of a twinid recording .npz (format, version, rate_hz, joint_names, meta),
    without reading the samples. Raises ValueError saying why `path` is not a recording."""
    path = Path(path)
    hint = ""
    if path.suffix.lower() in (".yaml", ".yml"):
        hint = ("; a trajectory file holds no recorded samples: give the run folder that ran it, "
                "or its recordings/excitation.npz")
    if not zipfile.is_zipfile(path):
        raise ValueError(f"{path} is not a twinid recording (not an NPZ archive){hint}")
    try:
        with np.load(path, allow_pickle=False) as z:
            if "header" not in z.files or "t" not in z.files:
                raise ValueError("no header / t arrays")
            header = json.loads(bytes(z["header"].astype(np.uint8)).decode())
    except Exception as exc:  # noqa: BLE001 -- zip, pickle, json, key errors: one message
        msg = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
        raise ValueError(f"{path} is not a twinid recording ({msg}){hint}") from None
    if not isinstance(header, dict) or header.get("format") != "twinid-recording":
        got = header.get("format") if isinstance(header, dict) else None
        raise ValueError(f"{path} is not a twinid recording (format={got!r}){hint}")
    if not isinstance(header.get("joint_names"), list):
        raise ValueError(f"{path}: the recording header has no joint names")
    return header


def joints_problem(where: str, got, expected) -> str | None:
    """Why recorded joints `got` are not the arm's `expected` (another arm, another joint
    subset or order), or None."""
    got, expected = [str(j) for j in got], [str(j) for j in expected]
    if got == expected:
        return None
    if len(got) != len(expected):
        return (f"{where} holds {len(got)} joints {got}, the arm has {len(expected)} "
                f"{expected}: data of another arm")
    return (f"{where} holds joints {got}, the arm's are {expected} (other names or order): "
            f"data of another arm")
