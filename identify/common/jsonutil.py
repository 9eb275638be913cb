"""Metadata -> plain Python data that ``json`` and ``yaml.safe_dump`` accept.

One converter for the whole project (recording headers, trajectory files, run folders, backend
metadata): :func:`to_jsonable`.
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import PurePath

import numpy as np

__all__ = ["to_jsonable"]

_NONFINITE = ("null", "keep")


def to_jsonable(obj, *, nonfinite: str = "null", where: str = "value"):
    """Recursively convert `obj` to plain dict / list / str / int / float / bool / None.

    Conversions: dict -> dict with ``str`` keys; list, tuple -> list; numpy array -> nested lists
    (``tolist``); numpy scalar -> Python scalar (``np.bool_`` -> bool); ``pathlib`` path -> str;
    dataclass instance -> dict of its fields (not its class: the result does not round-trip to
    the dataclass). str, int, bool, None pass unchanged.

    Non-finite floats (nan, inf, -inf; Python or numpy, also inside arrays):
        nonfinite="null" (default) -> None. Standard JSON (RFC 8259) has no NaN/Infinity, so
            the result can be written with ``json.dumps(..., allow_nan=False)`` and read by any
            JSON parser; a reader sees "no value".
        nonfinite="keep" -> left as float. For consumers that represent them and read them
            back: YAML (``.nan``, ``.inf``) and Python's own ``json`` (writes ``NaN``,
            ``Infinity``). Use it where the value must round-trip, e.g. an unlimited joint
            range of -inf..inf.

    Args:
        obj: the value to convert.
        nonfinite: "null" or "keep" (see above).
        where: name of `obj` used in error messages (e.g. "recording meta").
    Returns:
        A new plain structure (`obj` is not modified).
    Raises:
        TypeError: a value of any other type (complex, bytes, sets, arbitrary objects); the
            message names its position, e.g. ``meta['settings']['gains'][2]``.
        ValueError: an unknown `nonfinite` mode.
    """
    if nonfinite not in _NONFINITE:
        raise ValueError(f"to_jsonable: nonfinite must be one of {_NONFINITE}, got {nonfinite!r}")
    return _convert(obj, nonfinite == "null", where)


def _float(x: float, null: bool):
    return None if (null and not math.isfinite(x)) else x


def _convert(o, null: bool, where: str):
    if o is None or isinstance(o, (str, bool)):
        return o
    if isinstance(o, int):                      # after bool (bool is an int subclass)
        return int(o)
    if isinstance(o, float):
        return _float(float(o), null)
    if isinstance(o, dict):
        return {str(k): _convert(v, null, f"{where}[{k!r}]") for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_convert(v, null, f"{where}[{i}]") for i, v in enumerate(o)]
    if isinstance(o, np.ndarray):
        if o.dtype.kind in "biu" or (o.dtype.kind == "f" and (not null or np.all(np.isfinite(o)))):
            return o.tolist()                   # fast path: nothing to inspect element-wise
        if o.dtype.kind in "fO":
            return _convert(o.tolist(), null, where)
        raise TypeError(f"{where}: numpy array of dtype {o.dtype} is not JSON-serialisable")
    if isinstance(o, np.bool_):
        return bool(o)
    if isinstance(o, np.integer):
        return int(o)
    if isinstance(o, np.floating):
        return _float(float(o), null)
    if isinstance(o, PurePath):
        return str(o)
    if dataclasses.is_dataclass(o) and not isinstance(o, type):
        return {f.name: _convert(getattr(o, f.name), null, f"{where}.{f.name}")
                for f in dataclasses.fields(o)}
    raise TypeError(f"{where}: value of type {type(o).__name__} is not JSON-serialisable "
                    f"({o!r:.60})")
