"""Reading a scenario file into typed :class:`~identify.scenario.spec.Scenario` data: YAML with line
numbers, strict conversion of every key to its declared type and range, and the one-line error
``file:line: key.path: message``."""
from __future__ import annotations
import dataclasses
import math
import os
import re
import types
import typing
from pathlib import Path
from typing import Any, Literal, Union
import yaml
from identify.common.fileio import log_input_problem, regular_file_problem
from .spec import Scenario, ScenarioError, field_types
from .checks import CheckContext, closest_key, cross_checks, dotted_path, type_name


#: largest scenario file read [bytes]; a scenario is a page of keys
MAX_FILE_BYTES = 1024 * 1024
#: most key paths a scenario may expand to (YAML aliases can make a tiny file expand to
#: billions of nodes: the "billion laughs" bomb)
MAX_NODES = 100_000


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads YAML 1.2 floats: ``1e9``, ``1.0e9``, ``2E-3`` (YAML 1.1 needs a
    dot and a signed exponent, ``1.0e+9``, and reads the others as strings)."""


_Loader.yaml_implicit_resolvers = {k: list(v) for k, v in
                                   yaml.SafeLoader.yaml_implicit_resolvers.items()}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))

NUMBER_RE = re.compile(r"^\s*[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?\s*$")


def _node_lines(node, path=(), out=None, ctx_file="") -> dict[tuple, int]:
    """Map key path -> 1-based line, from a composed YAML node tree; refuse duplicate keys and
    documents expanding (through aliases) to more than MAX_NODES key paths."""
    if out is None:
        out = {(): node.start_mark.line + 1}
    if len(out) > MAX_NODES:
        raise ScenarioError(ctx_file, node.start_mark.line + 1, dotted_path(path),
                            f"the document expands to more than {MAX_NODES:,} entries (YAML "
                            f"aliases / anchors nested too deep?); a scenario is refused beyond "
                            f"that")
    if isinstance(node, yaml.MappingNode):
        seen = {}
        for k, v in node.value:
            key = k.value if isinstance(k, yaml.ScalarNode) else str(k.value)
            line = k.start_mark.line + 1
            if key in seen:
                raise ScenarioError(ctx_file, line, dotted_path(path + (key,)),
                                    f"duplicate key (first defined on line {seen[key]})")
            seen[key] = line
            out[path + (key,)] = line
            _node_lines(v, path + (key,), out, ctx_file)
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            out[path + (i,)] = v.start_mark.line + 1
            _node_lines(v, path + (i,), out, ctx_file)
    return out


def load_scenario(path: str | os.PathLike) -> Scenario:
    """Read and validate a scenario file. Raises ScenarioError (one line) on any problem."""
    path = Path(path)
    fname = str(path)
    prob = regular_file_problem(path)
    if prob is not None:
        raise ScenarioError(fname, None, "", "scenario file not found" if prob == "not found"
                            else f"the scenario {prob}")
    if path.stat().st_size > MAX_FILE_BYTES:
        raise ScenarioError(fname, None, "", f"the file has {path.stat().st_size:,} bytes; a "
                            f"scenario is at most {MAX_FILE_BYTES:,} bytes")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(fname, None, "", f"cannot read the file ({exc})") from None
    try:
        node = yaml.compose(text, Loader=_Loader)
        if node is not None:
            lines = _node_lines(node, ctx_file=fname)      # before constructing: bombs stop here
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 -- _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        ctx_txt = ""
        if exc.context and exc.context_mark is not None and exc.problem_mark is not None \
                and exc.context_mark.line != exc.problem_mark.line:
            ctx_txt = f" ({exc.context} on line {exc.context_mark.line + 1})"
        raise ScenarioError(fname, line, "", f"YAML syntax error: {exc.problem or exc}{ctx_txt}") \
            from None
    except yaml.YAMLError as exc:
        raise ScenarioError(fname, None, "", f"YAML error: {exc}") from None
    if node is None or data is None:
        raise ScenarioError(fname, 1, "", "the scenario is empty")
    return scenario_from_dict(data, file=fname, base=path.resolve().parent, lines=lines)


def scenario_from_dict(data: Any, *, file: str = "<scenario>", base: str | os.PathLike | None = None,
                       lines: dict | None = None) -> Scenario:
    """Validate plain data (as from YAML) into a Scenario. `base` resolves relative paths."""
    ctx = CheckContext(file, lines or {}, Path(base).resolve() if base is not None else Path.cwd())
    if not isinstance(data, dict):
        raise ctx.error((), f"the scenario must be a mapping of keys, got {type_name(data)}")
    scn = _convert(Scenario, data, (), ctx)
    scn = dataclasses.replace(scn, source=Path(file) if file and not file.startswith("<") else None)
    cross_checks(scn, data, ctx)
    return scn


def _convert(tp, value, path: tuple, ctx: CheckContext, meta: dict | None = None):
    meta = meta or {}
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    # Optional / Union
    if origin is Union or origin is types.UnionType:
        if value is None:
            if type(None) in args:
                return None
            raise ctx.error(path, "must not be null")
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _convert(a, value, path, ctx, meta)
            except ScenarioError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        # prefer the error of the branch whose container type matched
        for exc, a in zip(errors, [a for a in args if a is not type(None)]):
            if (typing.get_origin(a) is tuple and isinstance(value, list)) or \
               (dataclasses.is_dataclass(a) and isinstance(value, dict)) or \
               (a in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool)):
                raise exc
        raise ctx.error(path, f"has the wrong type ({type_name(value)}); expected {_describe(tp)}")
    if value is None:
        raise ctx.error(path, f"must not be null (expected {_describe(tp)})")
    if origin is Literal:
        if isinstance(value, bool) and "on" in args and "off" in args:
            # YAML 1.1 reads an unquoted on / off (the documented values) as true / false
            value = "on" if value else "off"
        if value not in args or isinstance(value, bool):
            raise ctx.error(path, f"must be one of {', '.join(map(str, args))}; got {value!r}")
        return value
    if dataclasses.is_dataclass(tp):
        return _convert_dataclass(tp, value, path, ctx, meta.get("_base"))
    if origin is tuple:
        if not isinstance(value, list):
            raise ctx.error(path, f"must be a list, got {type_name(value)}")
        if len(args) == 2 and args[1] is Ellipsis:
            items = [_convert(args[0], v, path + (i,), ctx) for i, v in enumerate(value)]
        else:
            if len(value) != len(args):
                raise ctx.error(path, f"must be a list of {len(args)} values, got {len(value)}")
            items = [_convert(a, v, path + (i,), ctx) for i, (a, v) in enumerate(zip(args, value))]
        if "len" in meta and len(items) != meta["len"]:
            raise ctx.error(path, f"must have {meta['len']} entries, got {len(items)}")
        if "min_len" in meta and len(items) < meta["min_len"]:
            raise ctx.error(path, f"must have at least {meta['min_len']} entries, got {len(items)}")
        if len(set(map(repr, items))) != len(items) and args and typing.get_origin(args[0]) is Literal:
            raise ctx.error(path, "has repeated entries")
        return tuple(items)
    if tp is dict:
        if not isinstance(value, dict):
            raise ctx.error(path, f"must be a mapping, got {type_name(value)}")
        return dict(value)
    if tp is bool:
        if not isinstance(value, bool):
            raise ctx.error(path, f"must be true or false, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(path, f"must be an integer, got {type_name(value)} {value!r}")
        _check_range(value, path, ctx, meta)
        return value
    if tp is float:
        if isinstance(value, str) and NUMBER_RE.match(value):
            value = float(value)       # a quoted number, e.g. "1.0e9"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.error(path, f"must be a number, got {type_name(value)} {value!r}")
        value = float(value)
        if not math.isfinite(value):
            raise ctx.error(path, f"must be finite, got {value!r}")
        _check_range(value, path, ctx, meta)
        return value
    if tp is str:
        if not isinstance(value, str):
            raise ctx.error(path, f"must be a string, got {type_name(value)} {value!r}")
        return value
    if tp is Path:
        if not isinstance(value, str) or not value.strip():
            raise ctx.error(path, f"must be a path (string), got {type_name(value)} {value!r}")
        p = Path(os.path.expanduser(value))
        if not p.is_absolute():
            p = (Path.cwd() if meta.get("cwd") else ctx.base) / p
        p = Path(os.path.normpath(p))
        if meta.get("file"):
            prob = (log_input_problem if meta.get("bag_dir") else regular_file_problem)(p)
            if prob == "not found":
                raise ctx.error(path, f"file not found: {value} (looked at {p})")
            if prob is not None:
                raise ctx.error(path, f"{value} {prob}" + ("" if str(p) == value else
                                                          f" (looked at {p})"))
        if meta.get("exists") and not p.exists():
            raise ctx.error(path, f"not found: {value} (looked at {p})")
        return p
    raise TypeError(f"scenario schema: unsupported type {tp!r} at {dotted_path(path)}")


def _check_range(v, path, ctx, meta):
    if "min" in meta and v < meta["min"]:
        raise ctx.error(path, f"must be >= {meta['min']}, got {v}")
    if "max" in meta and v > meta["max"]:
        raise ctx.error(path, f"must be <= {meta['max']}, got {v}")
    if "gt" in meta and not v > meta["gt"]:
        raise ctx.error(path, f"must be > {meta['gt']}, got {v}")
    if "lt" in meta and not v < meta["lt"]:
        raise ctx.error(path, f"must be < {meta['lt']}, got {v}")


def _describe(tp) -> str:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union or origin is types.UnionType:
        return " or ".join(_describe(a) for a in args)
    if origin is Literal:
        return "one of " + ", ".join(map(str, args))
    if origin is tuple:
        return "a list"
    return {bool: "true/false", int: "an integer", float: "a number", str: "a string",
            Path: "a path", dict: "a mapping", type(None): "null"}.get(
        tp, "a mapping" if dataclasses.is_dataclass(tp) else str(tp))


def _convert_dataclass(cls, value, path, ctx, base=None):
    """Mapping -> dataclass `cls`. Missing keys take the value of `base` (the field's default
    instance, so nested defaults such as trajectories.validation.seed = 1 hold), else the class
    default."""
    if not isinstance(value, dict):
        raise ctx.error(path, f"must be a mapping of keys, got {type_name(value)}")
    hints = field_types(cls)
    flds = {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("internal")}
    for k in value:
        if k not in flds:
            close = closest_key(str(k), flds)
            hint = f" (did you mean '{close}'?)" if close else ""
            raise ctx.error(path + (k,), f"unknown key{hint}; allowed: {', '.join(flds)}")
    kw = {}
    for name, f in flds.items():
        if name in value:
            meta = dict(f.metadata)
            if base is not None:
                meta["_base"] = getattr(base, name)
            elif f.default_factory is not dataclasses.MISSING:
                meta["_base"] = f.default_factory()
            kw[name] = _convert(hints[name], value[name], path + (name,), ctx, meta)
        else:
            if base is not None:
                d = getattr(base, name)
            elif f.default is not dataclasses.MISSING:
                d = f.default
            elif f.default_factory is not dataclasses.MISSING:
                d = f.default_factory()
            else:
                raise ctx.error(path, f"missing required key '{name}'")
            if dataclasses.is_dataclass(d):   # fill nested defaults (resolves their paths)
                d = _convert_dataclass(type(d), {}, path + (name,), ctx, base=d)
            elif isinstance(d, Path):
                d = _convert(Path, str(d), path + (name,), ctx, dict(f.metadata))
            kw[name] = d
    return cls(**kw)


def key_line(file, path: tuple) -> int | None:
    """1-based line of the key `path` (or of its nearest parent) in the scenario file `file`, for
    errors found after loading; None when the file cannot be read again."""
    try:
        node = yaml.compose(Path(file).read_text(encoding="utf-8"), Loader=_Loader)
        lines = _node_lines(node, ctx_file=str(file)) if node is not None else {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError, ScenarioError):
        return None
    return CheckContext(str(file), lines, Path(".")).line(tuple(path))


def scenario_error(scn: Scenario, path: tuple, message: str) -> ScenarioError:
    """A :class:`ScenarioError` (``file:line: key.path: message``) about key `path` of a loaded
    scenario, for problems found when the scenario meets the arm's model."""
    if scn.source is None:
        return ScenarioError("<scenario>", None, dotted_path(path), message)
    return ScenarioError(str(scn.source), key_line(scn.source, path), dotted_path(path), message)
