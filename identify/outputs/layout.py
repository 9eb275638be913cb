"""The file names of a run folder, in one place. Every command writes them through this module and
every reader (the closed loop's model, held data, payload identification, the report) finds them
through it; no other module spells a run folder's file name.

    <run folder>/
        scenario.yaml          the scenario as resolved (every default filled)
        trajectories/          <label>.yaml: the trajectories run (load with ``source: file``)
        recordings/            <label>.npz: the recordings (identify.backend.Recording)
        parameters.yaml        identified values, std, errors against a truth
        identified.urdf        the exported model: inertials, <dynamics> viscous and Coulomb
        identified_joints.yaml the exported joint terms a URDF cannot hold (the joint sidecar)
        metrics.json           every figure of the run (identify.outputs.render)
        plots/                 <name>.png
        report.md, report.html
        bus_report.txt         a hardware dry run's bus report
        sampled/               the trajectories for the arm's own controller (docs/controllers.md):
                               <label>.csv / .npz (t, q, qd, qdd), <label>.script (URScript),
                               <label>_franka_1khz.csv + franka_play.cpp, <label>_ros2_goal.yaml
    <trajectory folder>/       (``twinid trajectory``)
        trajectories.yaml, <label>.yaml, <label>.png, sampled/, report.md, report.html

Imports nothing from the project: the stages below ``outputs`` read folders through it."""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SCENARIO = "scenario.yaml"
TRAJECTORIES = "trajectories"
RECORDINGS = "recordings"
PARAMETERS = "parameters.yaml"
URDF = "identified.urdf"
SIDECAR = "identified_joints.yaml"
METRICS = "metrics.json"
PLOTS = "plots"
REPORT_MD = "report.md"
REPORT_HTML = "report.html"
BUS_REPORT = "bus_report.txt"
TRAJECTORY_INDEX = "trajectories.yaml"
#: the sampled trajectories for the arm's own controller (docs/controllers.md), in a run folder
#: and in a trajectory folder
SAMPLED = "sampled"
FRANKA_EXAMPLE = "franka_play.cpp"
#: the lock file of a claimed run folder (held while a command writes into it)
LOCK = ".twinid.lock"

#: every file / folder a twinid command writes into a run folder (what --force may replace)
OUTPUT_NAMES = (SCENARIO, TRAJECTORIES, RECORDINGS, PARAMETERS, URDF, SIDECAR, METRICS, PLOTS,
                REPORT_MD, REPORT_HTML, BUS_REPORT, TRAJECTORY_INDEX, SAMPLED, "excitation.yaml",
                "validation.yaml", "excitation.png", "validation.png")


def recording(folder: str | os.PathLike, label: str) -> Path:
    """<folder>/recordings/<label>.npz"""
    return Path(folder) / RECORDINGS / f"{label}.npz"


def trajectory(folder: str | os.PathLike, label: str) -> Path:
    """<folder>/trajectories/<label>.yaml"""
    return Path(folder) / TRAJECTORIES / f"{label}.yaml"


def plot(folder: str | os.PathLike, stem: str) -> Path:
    """<folder>/plots/<stem>.png"""
    return Path(folder) / PLOTS / f"{stem}.png"


@dataclass(frozen=True)
class ExportedModel:
    """The files of a run folder's exported model: the URDF, the joint sidecar and the
    parameters document (stage 2 of the improved model) -- each None where the run wrote none."""
    urdf: Path
    sidecar: Path | None
    parameters: Path | None


def exported_model(folder: str | os.PathLike) -> ExportedModel | None:
    """The exported model of run folder `folder`, or None when it holds no exported URDF (not a
    run folder of ``twinid run`` / ``twinid fit``, or one written with ``outputs.urdf: false``)."""
    folder = Path(folder)
    if not (folder / URDF).is_file():
        return None
    side, par = folder / SIDECAR, folder / PARAMETERS
    return ExportedModel(urdf=folder / URDF, sidecar=side if side.is_file() else None,
                         parameters=par if par.is_file() else None)


def held_recording(entry: str | os.PathLike) -> tuple[str, Path]:
    """(kind, file) of a held-data entry: ("run", <folder>/recordings/excitation.npz) for a run
    folder, ("recording", entry) for a file."""
    entry = Path(entry)
    if entry.is_dir():
        return "run", recording(entry, "excitation")
    return "recording", entry


def sampled(folder: str | os.PathLike, label: str) -> dict[str, Path]:
    """form -> file of trajectory `label` sampled for a controller (the forms of
    identify.excitation.export.FORMS): <folder>/sampled/<label>.csv, .npz, .script (URScript),
    <label>_franka_1khz.csv, franka_play.cpp (shared), <label>_ros2_goal.yaml."""
    d = Path(folder) / SAMPLED
    return {"csv": d / f"{label}.csv", "npz": d / f"{label}.npz", "urscript": d / f"{label}.script",
            "franka_csv": d / f"{label}_franka_1khz.csv", "franka_example": d / FRANKA_EXAMPLE,
            "ros2_goal": d / f"{label}_ros2_goal.yaml"}
