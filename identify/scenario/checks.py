"""Cross-checks of a typed scenario against its files before anything runs: the arm's joints and
drive files, payload physics, the backend's own settings validator (looked up by name), processing
settings and the Nyquist limit of the low-pass cut-off."""
from __future__ import annotations
import dataclasses
import math
from pathlib import Path
from identify.common.fileio import read_yaml
from identify.backend.interface import SETTINGS, settings_class
from identify.estimation.processing import ProcessingSettings
from identify.model.payload import payload_problem
from identify.outputs.layout import URDF, exported_model

from .logchecks import check_log_signals, check_log_spec
from .spec import LogSpec, NOISE_ALIASES, Scenario, ScenarioError, TrajectorySpec, twin_label


class CheckContext:
    """Where we are: file name, the node-line map, the base folder for relative paths."""

    def __init__(self, file: str, lines: dict[tuple, int], base: Path):
        self.file, self.lines, self.base = file, lines, base

    def line(self, path: tuple) -> int | None:
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)

    def error(self, path: tuple, message: str) -> ScenarioError:
        return ScenarioError(self.file, self.line(path), dotted_path(path), message)


def dotted_path(path: tuple) -> str:
    out = ""
    for p in path:
        out += f"[{p}]" if isinstance(p, int) else (("." if out else "") + str(p))
    return out


def type_name(v) -> str:
    if v is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "a list", dict: "a mapping"}.get(type(v), type(v).__name__)


def closest_key(key: str, options) -> str | None:
    import difflib
    m = difflib.get_close_matches(key, list(options), n=1, cutoff=0.6)
    return m[0] if m else None


def _drive_joint_count(scn: Scenario, ctx: CheckContext) -> int | None:
    if scn.arm.drives is None:
        return None
    try:
        data = read_yaml(scn.arm.drives)
        return len(data["joints"])
    except Exception as exc:
        raise ctx.error(("arm", "drives"), f"cannot read the drive file {scn.arm.drives}: {exc}")


def _check_payload(scn: Scenario, ctx: CheckContext) -> None:
    pl = scn.arm.payload
    if pl is None:
        return
    prob = payload_problem(pl.mass_kg, pl.com_m, pl.inertia_kgm2)
    if prob is not None:
        key = ("arm", "payload") + ((prob[0],) if prob[0] else ())
        raise ctx.error(key, prob[1])


def _check_arm_joints(scn: Scenario, ctx: CheckContext) -> None:
    """Every name in arm.joints is a non-fixed joint of the URDF (error at the entry's line), and
    the URDF with that subset (the other joints locked at 0) is a serial revolute chain."""
    if scn.arm.joints is None:
        return
    import xml.etree.ElementTree as ET
    from identify.model.urdf import URDFError, load_chain
    try:
        root = ET.parse(scn.arm.urdf).getroot()
    except (ET.ParseError, OSError) as exc:
        raise ctx.error(("arm", "urdf"), f"{scn.arm.urdf}: not a readable URDF ({exc})") from None
    movable = [j.get("name") for j in root.findall("joint") if j.get("type") != "fixed"]
    for i, j in enumerate(scn.arm.joints):
        if j not in movable:
            raise ctx.error(("arm", "joints", i), f"unknown joint {j!r}; the URDF {scn.arm.urdf.name} "
                                                  f"has the non-fixed joints {movable}")
    if len(set(scn.arm.joints)) != len(scn.arm.joints):
        raise ctx.error(("arm", "joints"), "has repeated joints")
    try:
        load_chain(scn.arm.urdf, list(scn.arm.joints))
    except (URDFError, OSError) as exc:
        raise ctx.error(("arm", "joints"), str(exc)) from None


def _check_drive_overrides(scn: Scenario, ctx: CheckContext) -> None:
    """twin.drive_overrides against the drive file, at load (error at the override key's line)."""
    ov = scn.twin.get("drive_overrides") if isinstance(scn.twin, dict) else None
    if not ov:
        return
    base = ("twin", "drive_overrides")
    if scn.arm.drives is None:
        raise ctx.error(base, "drive overrides need arm.drives (the file they override)")
    from identify.model.drives import DriveFileError, OverrideError, check_overrides, read_drive_file
    try:
        entries = read_drive_file(scn.arm.drives)
    except (DriveFileError, OSError) as exc:
        raise ctx.error(("arm", "drives"), str(exc)) from None
    names = None
    try:
        from identify.model.urdf import load_chain
        names = list(load_chain(scn.arm.urdf, None if scn.arm.joints is None
                                else list(scn.arm.joints)).joint_names)
    except Exception:  # noqa: BLE001 -- a bad URDF is reported elsewhere
        pass
    try:
        check_overrides(ov, entries, names)
    except OverrideError as exc:
        raise ctx.error(base + exc.path, exc.message) from None


def _check_cutoff(scn: Scenario, ctx: CheckContext, rate_hz: float | None) -> None:
    """processing.butter_cutoff_hz below the Nyquist frequency of the processed signal."""
    proc = scn.processing or {}
    fc = proc.get("butter_cutoff_hz", 10.0)
    rate = proc.get("resample_hz") or rate_hz
    dec = proc.get("decimate", 1) or 1
    if fc is None or rate is None or not isinstance(fc, (int, float)) or \
            not isinstance(dec, int) or isinstance(dec, bool) or dec < 1:
        return
    nyq = 0.5 * float(rate) / dec
    if not fc < nyq:
        key = ("processing", "butter_cutoff_hz") if "butter_cutoff_hz" in proc else ("processing",)
        raise ctx.error(key, f"cutoff {fc:g} Hz must be below the Nyquist frequency {nyq:g} Hz of "
                             f"the {float(rate):g} Hz signal" + (f" decimated by {dec}" if dec > 1 else ""))


def _urdf_joints(scn: Scenario, ctx: CheckContext) -> list[str] | None:
    from identify.model.urdf import URDFError, load_chain
    try:
        return list(load_chain(scn.arm.urdf).joint_names)
    except (URDFError, OSError) as exc:
        raise ctx.error(("arm", "urdf"), str(exc)) from None
    except Exception:  # noqa: BLE001 -- other URDF problems are reported when the model is built
        return None


def _check_files_match_urdf(scn: Scenario, ctx: CheckContext) -> None:
    """arm.drives and arm.description must name every moving joint of the URDF (or of
    arm.joints): a file written for another arm is refused here, at load -- not after the
    optimizer, nor by silently taking infinite acceleration limits."""
    if scn.arm.drives is None and scn.arm.description is None:
        return
    urdf = _urdf_joints(scn, ctx)
    if urdf is None:
        return
    need = list(scn.arm.joints) if scn.arm.joints else urdf
    files = []
    if scn.arm.drives is not None:
        from identify.model.drives import DriveFileError, read_drive_file
        try:
            names = list(read_drive_file(scn.arm.drives))
        except (DriveFileError, OSError) as exc:
            raise ctx.error(("arm", "drives"), str(exc)) from None
        files.append((("arm", "drives"), scn.arm.drives, names))
    if scn.arm.description is not None:
        try:
            doc = read_yaml(scn.arm.description)
            names = [str(r["joint"]) for r in doc["mdh"]]
        except Exception as exc:  # noqa: BLE001 -- any unreadable description
            raise ctx.error(("arm", "description"), f"cannot read the arm description "
                            f"{scn.arm.description}: {exc}") from None
        files.append((("arm", "description"), scn.arm.description, names))
    for key, path, names in files:
        missing = [j for j in need if j not in names]
        if missing:
            raise ctx.error(key, f"{path.name} does not match the URDF {scn.arm.urdf.name}: it "
                                 f"has joints {names}, the URDF's moving joints are {urdf} "
                                 f"(missing: {missing})")
        if not scn.arm.joints and len(names) != len(urdf):
            raise ctx.error(key, f"{path.name} does not match the URDF {scn.arm.urdf.name}: "
                                 f"{len(names)} joints {names}, the URDF has {len(urdf)} moving "
                                 f"joints {urdf}")


def _check_min_period(scn: Scenario, ctx: CheckContext, rate_hz: float | None) -> None:
    """An optimized trajectory's period must hold the optimizer's grid at the recording rate
    (period >= grid / rate) and its highest harmonic must pass the processing low-pass
    (period >= harmonics / cutoff); a shorter one yields a degenerate trajectory."""
    proc = scn.processing or {}
    fc = proc.get("butter_cutoff_hz", 10.0)
    fc = float(fc) if isinstance(fc, (int, float)) and not isinstance(fc, bool) and fc else None
    for which in ("excitation", "validation"):
        t: TrajectorySpec = getattr(scn.trajectories, which)
        if t.source != "optimize":
            continue
        need, why = 0.0, []
        if rate_hz:
            need = t.grid / float(rate_hz)
            why.append(f"{t.grid} grid points at {float(rate_hz):g} Hz")
        if fc:
            p2 = t.harmonics / fc
            why.append(f"{t.harmonics} harmonics below the {fc:g} Hz low-pass cut-off")
            need = max(need, p2)
        if t.period_s < need:
            raise ctx.error(("trajectories", which, "period_s"),
                            f"{t.period_s:g} s is too short: the smallest period for "
                            f"{' and '.join(why)} is {need:g} s")


def _check_obstacles(scn: Scenario, ctx: CheckContext) -> None:
    """trajectories.*.obstacles parse (identify.model.collision); error at the entry's line.
    Obstacles need collision constraints (a margin), the motor-torque limit the drive file."""
    from identify.model.collision import parse_obstacles
    for which in ("excitation", "validation"):
        t: TrajectorySpec = getattr(scn.trajectories, which)
        p = ("trajectories", which)
        if t.obstacles and t.collision_margin_m is None:
            key = p + ("collision_margin_m",) if p + ("collision_margin_m",) in ctx.lines \
                else p + ("obstacles",)
            raise ctx.error(key, "obstacles are declared but collision_margin_m is null (no "
                                 "collision constraints: the obstacles would be ignored); give a "
                                 "margin [m], e.g. 0.02")
        if t.torque_limit == "on" and scn.arm.drives is None:
            raise ctx.error(p + ("torque_limit",), "torque_limit: on needs arm.drives (friction, "
                                                   "reducer loss and rotor inertia of the drives)")
        obs = t.obstacles
        try:
            parse_obstacles(obs)
        except ValueError as exc:
            msg = str(exc)
            i = int(msg.split("[", 1)[1].split("]", 1)[0]) if msg.startswith("obstacles[") else None
            key = ("trajectories", which, "obstacles") + ((i,) if i is not None else ())
            if i is not None:
                msg = msg[len(f"obstacles[{i}]"):].lstrip(":. ")
            raise ctx.error(key, msg) from None


def _check_control(scn: Scenario, ctx: CheckContext, n: int | None) -> None:
    """closed_loop: / payload: sections (identify.control) against the arm's files."""
    cl = scn.closed_loop
    if cl is not None:
        if cl.model is None and not scn.outputs.urdf:
            raise ctx.error(("outputs", "urdf"), "closed_loop without closed_loop.model uses the "
                                                 "run's exported model: outputs.urdf must be true")
        if cl.model is not None and exported_model(cl.model) is None:
            raise ctx.error(("closed_loop", "model"), f"{cl.model} holds no exported model "
                                                      f"({URDF}: a run folder of twinid run / fit)")
        col = cl.collision
        if col.enabled and scn.backend == "twin":
            from identify.model.urdf import load_chain
            links = set(load_chain(scn.arm.urdf).link_names)
            for key in ("contact",) + (("rest_contact",) if col.transfer else ()):
                link = getattr(col, key).link
                if link not in links:
                    raise ctx.error(("closed_loop", "collision", key, "link"),
                                    f"unknown link {link!r}; the arm's moving links: "
                                    f"{sorted(links)}")
            rc = col.rest_contact
            if col.transfer and not col.settle_s <= rc.time_s < rc.time_s + rc.duration_s <= \
                    col.rest_hold_s:
                raise ctx.error(("closed_loop", "collision", "rest_contact", "time_s"),
                                f"the contact at rest ({rc.time_s} s for {rc.duration_s} s) must "
                                f"start after settle_s ({col.settle_s} s) and end within "
                                f"rest_hold_s ({col.rest_hold_s} s)")
    ps = scn.payload
    if ps is not None:
        if ps.start_deg is not None and n is not None and len(ps.start_deg) != n:
            raise ctx.error(("payload", "start_deg"), f"must have one angle per joint ({n}), "
                                                      f"got {len(ps.start_deg)}")
        if ps.arm_model is None and scn.backend != "twin":
            raise ctx.error(("payload", "arm_model"), "give the arm's parameters (a run folder or "
                                                      "a URDF); only the twin knows its own arm")
        if ps.arm_model is not None and Path(ps.arm_model).is_dir() and \
                exported_model(ps.arm_model) is None:
            raise ctx.error(("payload", "arm_model"), f"{ps.arm_model} holds no exported model "
                                                      f"({URDF})")
        if scn.arm.joints is not None:
            raise ctx.error(("payload",), "payload identification needs the whole arm (no "
                                          "arm.joints subset)")


#: the longest scenario name (it names the run folder <timestamp>_<name>; a file name has at
#: most 255 bytes, and a 300-character name failed with Errno 36 after the work)
MAX_NAME = 120


def cross_checks(scn: Scenario, data: dict, ctx: CheckContext) -> None:
    if len(scn.name.encode()) > MAX_NAME:
        raise ctx.error(("name",), f"{len(scn.name.encode())} bytes long; at most {MAX_NAME} "
                                   f"(it names the run folder <timestamp>_<name>)")
    _check_payload(scn, ctx)
    _check_arm_joints(scn, ctx)
    _check_files_match_urdf(scn, ctx)
    _check_obstacles(scn, ctx)
    n = _drive_joint_count(scn, ctx)
    if scn.arm.joints is not None:
        n = len(scn.arm.joints)
    _check_control(scn, ctx, n)
    for which in ("excitation", "validation"):
        t: TrajectorySpec = getattr(scn.trajectories, which)
        p = ("trajectories", which)
        if t.source == "file" and t.file is None:
            raise ctx.error(p + ("source",), "source: file needs the key 'file'")
        if t.source == "optimize" and t.file is not None:
            raise ctx.error(p + ("file",), "a trajectory file is only read with source: file")
        if t.start_deg is not None and n is not None and len(t.start_deg) != n:
            raise ctx.error(p + ("start_deg",), f"must have one angle per joint ({n}), "
                                                f"got {len(t.start_deg)}")
    _check_held(scn, ctx, n)
    ex, va = scn.trajectories.excitation, scn.trajectories.validation
    if ex.source == va.source == "optimize" and ex == va:
        raise ctx.error(("trajectories", "validation", "seed"), "the validation trajectory would "
                        "be identical to the excitation trajectory; give it another seed")
    sw = scn.sweep
    for k, levels in sw.noise.items():
        pk = ("sweep", "noise", k)
        if k not in NOISE_ALIASES:
            raise ctx.error(pk, f"unknown noise channel; allowed: {', '.join(NOISE_ALIASES)}")
        if not isinstance(levels, list) or not levels:
            raise ctx.error(pk, "must be a non-empty list of noise levels")
        for i, v in enumerate(levels):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ctx.error(pk + (i,), f"noise level must be a finite number >= 0, got {v!r}")
    _check_sweep_twin(scn, ctx)
    if "together" in sw.combine and len({len(v) for v in sw.noise.values()}) > 1:
        raise ctx.error(("sweep", "combine"), "combine: together needs the same number of levels "
                        "for every noise channel: " +
                        ", ".join(f"{k}={len(v)}" for k, v in sw.noise.items()))
    for which in ("excitation", "validation"):
        ls: LogSpec | None = getattr(scn.fit, which)
        if ls is not None:
            check_log_spec(scn, ls, ("fit", which), n, ctx)
    check_log_signals(scn, ctx)
    if scn.backend == "hardware" and not scn.hardware.iface and not scn.hardware.dry_run:
        raise ctx.error(("hardware", "iface"), "backend: hardware needs the network interface "
                                               "(hardware.iface)")
    _delegate_processing(scn, ctx)
    if scn.backend == "twin":
        _check_drive_overrides(scn, ctx)
        obj = _delegate("twin", scn.twin, ("twin",), ctx)
        rate = getattr(obj, "sample_rate_hz", None) if obj is not None else \
            scn.twin.get("sample_rate_hz")
        _check_held_rate(scn, ctx, rate)
        if scn.fit.excitation is None and scn.fit.validation is None:   # twin runs only: logs
            _check_cutoff(scn, ctx, rate)                                # have their own rate
            _check_min_period(scn, ctx, rate)
    elif scn.fit.excitation is None and scn.fit.validation is None:
        _check_min_period(scn, ctx, None)
    for ls in (scn.fit.excitation, scn.fit.validation):
        if ls is not None and ls.rate_hz is not None:
            _check_cutoff(scn, ctx, ls.rate_hz)
    # the hardware section is checked whatever the backend: switching `backend` to hardware
    # must not reveal a bad section only when the arm is about to move
    _delegate("hardware", scn.hardware.to_settings(), ("hardware",), ctx,
              required=bool(scn.hardware.options),
              paths={k: ("hardware", "options", k) for k in scn.hardware.options})


def _check_held(scn: Scenario, ctx: CheckContext, n: int | None) -> None:
    """trajectories.excitation.held (identify.scenario.held): excitation only, an objective that
    can use it, and each entry an existing run folder / recording of this arm's joints, or a
    valid log description -- the error at the entry's line."""
    from .held import held_file, joints_problem, path_problem, recording_header
    if scn.trajectories.validation.held:
        raise ctx.error(("trajectories", "validation", "held"), "held data belong to the "
                        "excitation (trajectories.excitation.held); the validation trajectory "
                        "stays independent of the fit")
    ex = scn.trajectories.excitation
    if not ex.held:
        return
    p = ("trajectories", "excitation")
    if ex.source == "optimize" and ex.objective == "cond":
        # cond(W_base) of the new trajectory alone cannot use the information already held
        raise ctx.error(p + ("objective",) if ("trajectories", "excitation", "objective")
                        in ctx.lines else p + ("held",),
                        "held data need objective d_optimal or a_optimal: cond(W_base) is a "
                        "figure of the new trajectory alone and would not put the excitation "
                        "where the held estimate is weak (docs/excitation.md)")
    joints = list(scn.arm.joints) if scn.arm.joints else None
    seen: dict = {}
    for i, entry in enumerate(ex.held):
        pi = p + ("held", i)
        f = entry.file if isinstance(entry, LogSpec) else \
            (held_file(entry)[1] if Path(entry).exists() else None)
        if f is not None and Path(f).exists():
            real = Path(f).resolve()
            if real in seen:
                raise ctx.error(pi, f"{f} is held already (held[{seen[real]}]): the same data "
                                    f"twice would count twice in the design and the fit (the "
                                    f"predicted std would be too small by sqrt(2))")
            seen[real] = i
        if isinstance(entry, LogSpec):
            if entry.file is None:
                raise ctx.error(pi, "a held log needs its 'file'")
            check_log_spec(scn, entry, pi, n, ctx)
            continue
        prob = path_problem(entry)
        if prob is not None:
            raise ctx.error(pi, prob)
        _kind, f = held_file(entry)
        try:
            header = recording_header(f)
        except ValueError as exc:
            raise ctx.error(pi, str(exc)) from None
        if joints is None:
            joints = _urdf_joints(scn, ctx)
        if joints is not None:
            prob = joints_problem(str(f), header["joint_names"], joints)
            if prob is not None:
                raise ctx.error(pi, prob)


def _check_held_rate(scn: Scenario, ctx: CheckContext, rate_hz) -> None:
    """Held recordings (run folders, .npz) at the rate of the new run (twin.sample_rate_hz)
    unless processing.resample_hz puts both on one grid: the fit stacks them after processing,
    and a mismatch would be found only after the new run."""
    from .held import held_file, recording_header
    proc = scn.processing or {}
    if not rate_hz or proc.get("resample_hz"):
        return
    for i, entry in enumerate(scn.trajectories.excitation.held):
        if isinstance(entry, LogSpec):
            continue
        f = held_file(entry)[1]
        got = recording_header(f).get("rate_hz")
        if isinstance(got, (int, float)) and not math.isclose(float(got), float(rate_hz),
                                                              rel_tol=1e-6):
            raise ctx.error(("trajectories", "excitation", "held", i),
                            f"{f} was recorded at {float(got):g} Hz, the new run records at "
                            f"{float(rate_hz):g} Hz (twin.sample_rate_hz): record at the same "
                            f"rate or set processing.resample_hz")


def _delegate_processing(scn: Scenario, ctx: CheckContext) -> None:
    if not scn.processing:
        return
    cls = ProcessingSettings
    _check_keys_types(cls, scn.processing, ("processing",), ctx)
    try:
        cls(**scn.processing)
    except (TypeError, ValueError) as exc:
        raise ctx.error(_blame(("processing",), scn.processing, str(exc)), str(exc)) from None
    _check_processing_bounds(scn, ctx)


#: most passes of the 5-point cubic smoothing (the paper's method uses 20; 3000 passes made the
#: fit's validation RMS 78 % worse: the torques' friction corners were smoothed away)
MAX_SMOOTH_PASSES = 200
#: the largest torque delay [s], and as a fraction of the shortest trajectory period
MAX_DELAY_S, MAX_DELAY_FRACTION = 1.0, 0.05


def _check_processing_bounds(scn: Scenario, ctx: CheckContext) -> None:
    """Values the settings class accepts but no real arm calls for: smooth_passes beyond
    MAX_SMOOTH_PASSES, a torque delay over MAX_DELAY_S or MAX_DELAY_FRACTION of the shortest
    trajectory (a drive's delay is milliseconds; 5 s was half of the trajectory)."""
    k = scn.processing.get("smooth_passes")
    if isinstance(k, int) and k > MAX_SMOOTH_PASSES:
        raise ctx.error(("processing", "smooth_passes"), f"{k} passes is beyond the bound of "
                        f"{MAX_SMOOTH_PASSES} (the method uses 20): that many passes smooth away "
                        f"the torques' friction corners")
    d = scn.processing.get("delay")
    if not isinstance(d, (int, float)):
        return
    worst = abs(float(d))
    period = min(float(t.period_s) for t in (scn.trajectories.excitation,
                                             scn.trajectories.validation))
    bound = min(MAX_DELAY_S, MAX_DELAY_FRACTION * period)
    if worst > bound:
        raise ctx.error(("processing", "delay"), f"{worst:g} s is {worst / period:.0%} of the "
                        f"{period:g} s trajectory: a torque delay is a few milliseconds (bound "
                        f"{bound:g} s: {MAX_DELAY_FRACTION:.0%} of the shortest trajectory, at "
                        f"most {MAX_DELAY_S:g} s); use delay: auto to estimate it")


def _blame(prefix: tuple, d: dict, msg: str) -> tuple:
    """Best guess of the key an error message is about (the longest key named in it)."""
    named = [k for k in d if str(k) in msg]
    return prefix + (max(named, key=lambda k: len(str(k))),) if named else prefix




def _check_keys_types(cls, d: dict, path: tuple, ctx: CheckContext, paths: dict | None = None) -> None:
    """Unknown keys and obvious type errors of a settings dict whose keys are `cls`'s fields
    (so the error can point at the key's line). Types follow each field's annotation/default:
    'object' fields are per-joint (a number or a list of numbers). paths: key -> its path in
    the scenario where it is not path + (key,)."""
    paths = paths or {}
    flds = {f.name: f for f in dataclasses.fields(cls)}
    for k, v in d.items():
        if k not in flds:
            close = closest_key(str(k), flds)
            hint = f" (did you mean '{close}'?)" if close else ""
            raise ctx.error(paths.get(k, path + (k,)), f"unknown key{hint}; allowed: {', '.join(flds)}")
        f = flds[k]
        ann = str(f.type)
        dflt = f.default
        if v is None:
            if "None" in ann or dflt is None or ann == "object":
                continue
            raise ctx.error(paths.get(k, path + (k,)), "must not be null")
        num = isinstance(v, (int, float)) and not isinstance(v, bool)
        if ann == "object":
            ok = num or v == "auto" or (isinstance(v, list) and v and all(
                isinstance(x, (int, float)) and not isinstance(x, bool) for x in v))
            if not ok:
                raise ctx.error(paths.get(k, path + (k,)), f"must be a number or a list of numbers (one per "
                                              f"joint), got {type_name(v)} {v!r}")
        elif isinstance(dflt, bool) or ann.startswith("bool"):
            if not isinstance(v, bool):
                raise ctx.error(paths.get(k, path + (k,)), f"must be true or false, got {v!r}")
        elif isinstance(dflt, (int, float)) or ann.split(" ")[0] in ("int", "float"):
            if not num:
                raise ctx.error(paths.get(k, path + (k,)), f"must be a number, got {type_name(v)} {v!r}")
            if not math.isfinite(v):
                raise ctx.error(paths.get(k, path + (k,)), f"must be finite, got {v!r}")
            if ann.split(" ")[0] == "int" and not isinstance(v, int):
                raise ctx.error(paths.get(k, path + (k,)), f"must be an integer, got {v!r}")
        elif isinstance(dflt, str) or ann.split(" ")[0] == "str":
            if not isinstance(v, str):
                raise ctx.error(paths.get(k, path + (k,)), f"must be a string, got {type_name(v)} {v!r}")
        elif ann.startswith("dict") and not isinstance(v, dict):
            raise ctx.error(paths.get(k, path + (k,)), f"must be a mapping, got {type_name(v)}")


def _check_sweep_twin(scn, ctx: CheckContext) -> None:
    """sweep.twin: each entry's twin settings (over the scenario's twin:) checked by the twin's
    own validator at the entry's key; labels unique (identify.scenario.spec.twin_label)."""
    seen = {}
    for i, entry in enumerate(scn.sweep.twin):
        path = ("sweep", "twin", i)
        if "label" in entry and (not isinstance(entry["label"], str) or not entry["label"].strip()):
            raise ctx.error(path + ("label",), "must be a non-empty string")
        label = twin_label(entry)
        if label in seen:
            raise ctx.error(path, f"repeats the twin settings / label {label!r} of entry {seen[label]}")
        seen[label] = i
        if scn.backend == "twin":
            over = {k: v for k, v in entry.items() if k != "label"}
            _delegate("twin", {**scn.twin, **over}, path, ctx, required=True)


def _delegate(backend: str, settings: dict, path: tuple, ctx: CheckContext, required: bool | None = None,
              paths: dict | None = None) -> None:
    """Validate backend settings with the backend package's own validator, imported by name;
    returns the validated settings object (None when the validator is not available). paths:
    key -> its path in the scenario where it is not path + (key,) (hardware.options.*)."""
    module, cls_name, _method = SETTINGS[backend]
    try:
        cls, method = settings_class(backend)
    except (ImportError, AttributeError):
        if (bool(settings) if required is None else required):
            raise ctx.error(path, f"cannot check these settings: the {backend} backend's "
                                  f"{module}.{cls_name} is not available yet") from None
        return
    if dataclasses.is_dataclass(cls):
        _check_keys_types(cls, settings, path, ctx, paths)
    try:
        return getattr(cls, method)(dict(settings))
    except (ValueError, TypeError, KeyError) as exc:
        msg = str(exc).strip("'\"")
        for prefix in ("settings: ", "settings."):
            if msg.startswith(prefix):
                msg = msg[len(prefix):]
        key = _blame(path, settings, msg)
        raise ctx.error((paths or {}).get(key[-1], key) if len(key) > len(path) else key,
                        msg) from None


def input_paths(scn: Scenario) -> list[tuple[str, Path]]:
    """Every file or folder the scenario names as an input, as (key path, path): the fields
    marked ``file`` / ``exists`` in identify.scenario.spec (arm.urdf, arm.drives,
    trajectories.*.file, fit.*.file, closed_loop.model, payload.arm_model, hardware.config, ...),
    each held entry (trajectories.excitation.held[i], a run folder, recording or log) and the
    scenario file itself. The run folder uses it so that --force never removes an input."""
    out: list[tuple[str, Path]] = []

    def walk(obj, key: str) -> None:
        for f in dataclasses.fields(obj):
            v, k = getattr(obj, f.name), f"{key}.{f.name}" if key else f.name
            if v is None or f.metadata.get("internal"):
                continue
            if f.metadata.get("file") or f.metadata.get("exists"):
                out.append((k, Path(v)))
            elif isinstance(v, (tuple, list)):
                for i, e in enumerate(v):
                    if isinstance(e, Path):
                        out.append((f"{k}[{i}]", e))
                    elif dataclasses.is_dataclass(e):
                        walk(e, f"{k}[{i}]")
            elif dataclasses.is_dataclass(v):
                walk(v, k)
    walk(scn, "")
    if scn.source is not None:
        out.append(("the scenario file", Path(scn.source)))
    return out
