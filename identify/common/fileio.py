"""Atomic file writes: every output is written to a unique temporary name in the target folder,
flushed to disk and renamed over the target, so a reader (or a crash) never sees half a file."""
from __future__ import annotations

import json
import os
import shutil
import stat
import tempfile
from pathlib import Path

import numpy as np
import yaml

from .jsonutil import to_jsonable

__all__ = ["atomic_write_bytes", "atomic_write_text", "atomic_savez", "write_yaml", "write_json",
           "writable_problem", "regular_file_problem"]


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
    except BaseException as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:   # e.g. a full disk: name the file
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
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


#: libyaml's parser where PyYAML was built with it (10-20x faster on the long number lists of
#: cached trajectories and drive files); the constructor is the same safe one either way
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


_YAML_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def dump_yaml(data, **kw) -> str:
    """yaml.safe_dump of `data` with libyaml's emitter when available (the same text, 4x
    faster on a metrics-sized document); keyword arguments as yaml.safe_dump's."""
    return yaml.dump(data, Dumper=_YAML_DUMPER, **kw)


def parse_yaml(text: str):
    """yaml.safe_load of `text` with libyaml's parser when available (same documents, same
    types; yaml.YAMLError on bad input)."""
    return yaml.load(text, Loader=_YAML_LOADER)


def read_yaml(path: str | os.PathLike):
    """:func:`parse_yaml` of a file's text (OSError / yaml.YAMLError as the file gives)."""
    return parse_yaml(Path(path).read_text())


def write_yaml(path: str | os.PathLike, data) -> None:
    """`data` as plain YAML (numpy converted, non-finite floats -> null), atomically."""
    atomic_write_text(path, dump_yaml(to_jsonable(data), sort_keys=False,
                                      default_flow_style=None))


def write_json(path: str | os.PathLike, data) -> None:
    """`data` as strict JSON (numpy converted, non-finite floats -> null), atomically."""
    atomic_write_text(path, json.dumps(to_jsonable(data), indent=1, allow_nan=False))


# ------------------------------------------------------------------------------------------------
# before any work: can we write there, is there room, what is this path?
# ------------------------------------------------------------------------------------------------
MB = 1024 * 1024


def _existing_parent(path: Path) -> Path:
    p = Path(os.path.abspath(path))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def writable_problem(folder: str | os.PathLike, need_bytes: int = 0) -> str | None:
    """Why `folder` cannot take `need_bytes` of new files, or None if it can.

    Probes for real (creates the folder and a temporary file in it, then removes both if they
    were new), since permission bits say nothing for root or on a read-only mount. Free space is
    read from the nearest existing parent."""
    folder = Path(folder)
    parent = _existing_parent(folder)
    if parent.exists() and not parent.is_dir():
        return f"{parent} is a file, not a folder"
    created = not folder.exists()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".twinid-probe.", dir=folder)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        return f"cannot write in {folder} ({exc.strerror or exc})"
    finally:
        if created and folder.is_dir():
            try:
                folder.rmdir()      # leave no trace of the probe; the real write recreates it
            except OSError:
                pass
    free = shutil.disk_usage(_existing_parent(folder)).free
    if need_bytes and free < need_bytes:
        return (f"only {free / MB:.0f} MB free on {folder}, about {need_bytes / MB:.0f} MB "
                f"are needed")
    return None


def regular_file_problem(path: str | os.PathLike) -> str | None:
    """Why `path` is not a readable regular file ("not found", "is a directory", "is a named
    pipe (FIFO)", "is a device", ...), or None if it is one."""
    p = Path(path)
    try:
        st = p.stat()
    except FileNotFoundError:
        return "not found"
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    if stat.S_ISDIR(st.st_mode):
        return "is a directory, not a file"
    if stat.S_ISFIFO(st.st_mode):
        return "is a named pipe (FIFO), not a regular file (it may never end)"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        return "is a device, not a regular file (e.g. /dev/zero never ends)"
    if stat.S_ISSOCK(st.st_mode):
        return "is a socket, not a regular file"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if not os.access(p, os.R_OK):
        return "is not readable (permission denied)"
    return None


def log_input_problem(path: str | os.PathLike) -> str | None:
    """Why `path` is not a readable log (:func:`regular_file_problem`), or None: a regular file,
    or a rosbag2 bag folder (a directory holding ``metadata.yaml``)."""
    prob = regular_file_problem(path)
    if prob is not None and prob.startswith("is a directory"):
        if (Path(path) / "metadata.yaml").is_file():
            return None
        return ("is a directory without metadata.yaml: a log is a file, or a rosbag2 bag "
                "folder (give its .mcap / .db3 file if metadata.yaml is lost)")
    return prob


def input_bytes(path: str | os.PathLike) -> int:
    """Size [bytes] of an input: a file's, or the files' directly in a folder (a rosbag2 bag)."""
    p = Path(path)
    if p.is_dir():
        return sum(f.stat().st_size for f in p.iterdir() if f.is_file())
    return p.stat().st_size


def cache_root() -> Path:
    """twinid's cache folder: ``$TWINID_CACHE``, else ``$XDG_CACHE_HOME/twinid``, else
    ``~/.cache/twinid`` (never the working directory)."""
    env = os.environ.get("TWINID_CACHE")
    if env:
        return Path(os.path.expanduser(env))
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path(os.path.expanduser("~")) / ".cache"
    return base / "twinid"


#: free space a cache folder must have to be used [bytes]
CACHE_MIN_FREE = 50 * MB
_cache_state: dict[str, str | None] = {}


def usable_cache(sub: str, what: str = "") -> Path | None:
    """The cache folder ``cache_root()/sub`` if it can be written (and has
    :data:`CACHE_MIN_FREE`), else None. The first unusable cache of a process prints ONE warning
    saying what twinid does without a cache (every cache then falls back, silently)."""
    folder = cache_root() / sub
    key = str(folder)
    if key not in _cache_state:
        prob = writable_problem(folder, CACHE_MIN_FREE)
        _cache_state[key] = prob
        if prob is not None and not _cache_state.get("_warned"):
            _cache_state["_warned"] = "yes"
            from .progress import warn
            warn(f"cache folder unusable ({prob}): running without a cache -- the arm model is "
                 f"evaluated in CasADi's virtual machine (about 20x slower) instead of compiled "
                 f"C, and trajectories are optimized on every run. Set TWINID_CACHE to a "
                 f"writable folder.")
    return None if _cache_state[key] is not None else folder


#: folder -> the open lock file this process holds on it (hold_folder_lock)
_HELD_LOCKS: dict = {}


def hold_folder_lock(folder: str | os.PathLike, what: str, name: str = ".twinid.lock") -> None:
    """Hold an exclusive lock on `folder` (fcntl.flock on folder/name) until this process exits
    or locks the same folder again (a sequential re-run); the kernel drops it when the process
    dies, so no stale lock is ever left. Raises OSError (errno EWOULDBLOCK) when another process
    holds it; the lock file then names that process (pid, `what`)."""
    import fcntl
    key = str(Path(folder).resolve())
    old = _HELD_LOCKS.pop(key, None)
    if old is not None:
        old.close()
    fh = open(Path(folder) / name, "a+")
    try:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.seek(0)
        who = fh.read().strip()
        fh.close()
        raise BlockingIOError(f"{folder}: in use by another twinid command"
                              + (f" ({who})" if who else "")) from None
    fh.seek(0)
    fh.truncate()
    fh.write(json.dumps({"pid": os.getpid(), "command": what}))
    fh.flush()
    _HELD_LOCKS[key] = fh
