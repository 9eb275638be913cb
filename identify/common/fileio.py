"""Atomic file writes: every output is written to a unique temporary name in the target folder,
flushed to disk and renamed over the target, so a reader (or a crash) never sees half a file."""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import yaml

from .jsonutil import to_jsonable

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_savez", "write_yaml", "write_json"]


def _atomic(path: Path, write, mode: int | None = None) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".partial", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to `path` atomically (mode 0644)."""
    _atomic(Path(path), lambda fh: fh.write(data), 0o644)


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """Write UTF-8 `text` to `path` atomically (mode 0644)."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_savez(path: str | os.PathLike, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` of `arrays` to `path` atomically."""
    _atomic(Path(path), lambda fh: np.savez(fh, **arrays))


def write_yaml(path: str | os.PathLike, data) -> None:
    """`data` as plain YAML (numpy converted, non-finite floats -> null), atomically."""
    atomic_write_text(path, yaml.safe_dump(to_jsonable(data), sort_keys=False,
                                           default_flow_style=None))


def write_json(path: str | os.PathLike, data) -> None:
    """`data` as strict JSON (numpy converted, non-finite floats -> null), atomically."""
    atomic_write_text(path, json.dumps(to_jsonable(data), indent=1, allow_nan=False))
