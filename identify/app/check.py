"""``twinid check SCENARIO``: everything a command does before any work, printed; nothing written.

    text, code = check_scenario("scenarios/quickstart.yaml")

Sections, in the order a run meets them: load (the strict validation), files (the arm's and the
backend's), signals (``fit:`` logs: the columns read and the joint models they allow), the
trajectory plan (from a file, from the cache, or to optimize), the time / memory / disk
estimate against the budget (identify.scenario.budget), and on ``backend: hardware`` the
dry-run plan (what the backend would check; no bus access). Exit code 0 when a run would start,
2 when it would be refused as bad input or over budget."""
from __future__ import annotations

from pathlib import Path

from identify.common.errors import InputError
from identify.scenario.spec import ScenarioError

LABELS = ("excitation", "validation")


def check_scenario(path) -> tuple[str, int]:
    """The report of ``twinid check`` for scenario file `path` and its exit code (0 / 2)."""
    from identify.scenario.load import load_scenario
    lines: list[str] = [f"check {path}"]
    try:
        scn = load_scenario(path)
    except (ScenarioError, InputError, FileNotFoundError, OSError) as exc:
        return "\n".join(lines + [f"  load: FAILED: {exc}"]), 2
    lines.append(f"  load: ok: scenario {scn.name!r}, backend {scn.backend}")
    bad, box = False, {}
    for title, step in (("files", _files), ("signals", _signals), ("trajectories", _plan),
                        ("estimate", _estimate), ("hardware", _hardware)):
        try:
            out = step(scn, box)
        except Exception as exc:  # noqa: BLE001 -- every refusal is reported, then exit 2
            out, bad = [f"FAILED: {' '.join(str(exc).split()) or type(exc).__name__}"], True
        if out:
            lines.append(f"  {title}:")
            lines += [f"    {s}" for s in out]
            bad = bad or any(s.startswith(("FAILED", "REFUSED")) for s in out)
    lines.append("result: " + ("a run would be refused (exit 2)" if bad
                               else "ready: a run would start (exit 0)"))
    return "\n".join(lines), 2 if bad else 0


def _model(scn, box: dict):
    """The arm's model, built once per check (kept in `box`)."""
    from .inputs import build_model
    if "model" not in box:
        box["model"] = build_model(scn)
    return box["model"]


def _files(scn, box: dict) -> list[str]:
    """The arm's files (the URDF parsed into the model) and the backend's."""
    from .inputs import require_backend_files
    require_backend_files(scn)
    m = _model(scn, box)
    out = [f"urdf {scn.arm.urdf}: {m.n} joints ({', '.join(m.joint_names)})"]
    for key in ("drives", "description"):
        v = getattr(scn.arm, key)
        out.append(f"arm.{key}: {v if v is not None else '(none)'}")
    return out


def _signals(scn, box: dict) -> list[str]:
    """fit: the logs read as ``twinid fit`` reads them, the signals found and the joint models
    they allow (identify.scenario.signals)."""
    if scn.fit is None or scn.fit.excitation is None or scn.fit.excitation.file is None:
        return []
    from identify.logs.load import gains_from_drives, load_log
    from identify.scenario.signals import resolve_joint_model
    from .inputs import log_specs
    m = _model(scn, box)
    gains = None if scn.arm.drives is None else gains_from_drives(scn.arm.drives, m.joint_names)
    out = []
    for label, spec in log_specs(scn).items():
        rec = load_log(spec, m.joint_names, gains=gains, model=m, warnings=[])
        found = [k for k in ("q", "tau_j", "tau_m") if getattr(rec, k, None) is not None]
        out.append(f"{label} log {spec.file}: {rec.n_samples} samples, {rec.duration:.3f} s; "
                   f"signals {', '.join(found)}")
        if label == "excitation":
            allowed = []
            for jm in ("auto", "simplified", "improved", "both"):
                try:
                    res = resolve_joint_model(jm, rec.tau_j is not None, rec.tau_m is not None)
                except ValueError:
                    continue
                allowed.append(jm if jm != "auto" else f"auto (= {res[0]} on {res[1]})")
            out.append(f"joint models these signals allow: {', '.join(allowed) or 'none'}; "
                       f"requested {scn.identification.joint_model}")
            try:
                resolve_joint_model(scn.identification.joint_model, rec.tau_j is not None,
                                    rec.tau_m is not None)
            except ValueError as exc:
                out.append(f"FAILED: identification.joint_model: {exc}")
    return out


def _plan(scn, box: dict) -> list[str]:
    """Each trajectory: from its file, from the optimizer's cache, or to be optimized."""
    if scn.fit is not None and scn.fit.excitation is not None and scn.backend != "hardware" \
            and scn.fit.excitation.file is not None:
        return ["none: twinid fit identifies from the logs (twinid run would design them)"]
    from .trajectories import cache_state, check_contact_time, load_trajectory_file
    m = _model(scn, box)
    box["cache_state"] = state = cache_state(scn, m)
    plan = state["plan"]
    out, files = [], {}
    for label in LABELS:
        spec = getattr(scn.trajectories, label)
        what = f"{label}: {spec.period_s:g} s x {spec.periods}"
        p = plan[label]
        if p.kind == "file":
            files[label] = tr = load_trajectory_file(spec.file, label, m.n)
            out.append(f"{what}: from file {spec.file} ({tr.n_harmonics} harmonics)")
        elif p.kind == "held":
            out.append(f"{what}: to optimize with the held data ({len(spec.held)} entries; "
                       f"the cache is looked up after reading them)")
        else:
            out.append(f"{what}, {spec.harmonics} harmonics: " + (
                f"cached ({p.folder})" if p.kind == "cached" else
                f"to optimize ({spec.starts} start(s), seed {spec.seed}"
                + (", not cached)" if p.folder is None else f"; then cached in {p.folder})")))
    check_contact_time(scn, files)
    return out


def _estimate(scn, box: dict) -> list[str]:
    """The time / memory / disk estimate and the budget a run checks before any work."""
    from identify.scenario.budget import estimate_run, over_budget
    m = _model(scn, box)
    state = box.get("cache_state")      # None: the plan failed or is not made (twinid fit)
    est = estimate_run(scn, m.n, **({} if state is None else
                                    {"cached": state["cached"], "compiled": state["compiled"]}))
    out = [f"a run takes {est.describe()}; writes about {est.disk_bytes / 1e6:.1f} MB"]
    why = over_budget(est)
    if why is not None:
        out.append(f"REFUSED without --yes: {why}")
    return out


def _hardware(scn, box: dict) -> list[str]:
    """backend: hardware: what the backend would check before moving (no bus access here)."""
    if scn.backend != "hardware":
        return []
    h = scn.hardware
    cfg = h.config
    out = [f"interface {h.iface or '(none: offline)'}, bus configuration "
           f"{cfg if cfg is not None else '(none)'}",
           "would check: the slaves found against the configuration (identity, count), the PDO "
           "layout, distributed clocks, the drives' limits against the arm's, the trajectory "
           "against the limits at the bus rate",
           "mode: " + ("dry run (bus up, nothing moves)" if h.dry_run else
                       "armed: the arm moves" if h.armed else
                       "not armed: a run refuses to move the arm (exit 4); set hardware.armed "
                       "or hardware.dry_run")]
    if cfg is not None and not Path(cfg).is_file():
        out.append(f"FAILED: hardware.config {cfg}: not found")
    return out
