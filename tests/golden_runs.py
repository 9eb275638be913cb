"""Golden run documents: metrics.json and parameters.yaml of the quickstart and paper-replication
scenarios as the code produced them when they were last regenerated on purpose.

A refactoring must leave them equal (tests/test_golden_runs.py); a change that is meant to change
the numbers regenerates them and says why in its commit:

    python tests/golden_runs.py          # runs both scenarios (cold caches) and rewrites the files

Times, host names, creation stamps, absolute paths and the trajectory cache flag are not part of
the comparison (:data:`IGNORED`)."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data" / "golden"
SCENARIOS = {"quickstart": ROOT / "scenarios" / "quickstart.yaml",
             "paper_replication": ROOT / "scenarios" / "paper_replication.yaml"}
DOCUMENTS = {"metrics.json": json.loads, "parameters.yaml": yaml.safe_load}
IGNORED = {"timings_s", "created", "host", "solver_time_s", "description", "command"}
RTOL = 1e-7


def run(name: str, out: Path, cache: Path) -> Path:
    """Run scenario `name` with `twinid run` into `out` (trajectory cache in `cache`)."""
    # one BLAS thread: the optimized trajectories depend on the thread count (IPOPT's and numpy's
    # reductions), and the golden documents must not depend on the machine's cores
    env = dict(os.environ, TWINID_CACHE=str(cache), PYTHONPATH=str(ROOT), OPENBLAS_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "identify", "--quiet", "run", str(SCENARIOS[name]),
                    "--out", str(out)], check=True, env=env, cwd=ROOT)
    return out


def load(folder: Path) -> dict:
    return {f: parse((folder / f).read_text()) for f, parse in DOCUMENTS.items()}


def differences(golden, new, path: str = "", out: list | None = None) -> list[str]:
    """Where `new` differs from `golden` (numbers to RTOL; ignored keys skipped)."""
    out = [] if out is None else out
    if isinstance(golden, dict) and isinstance(new, dict):
        for k in sorted(set(golden) | set(new), key=str):
            if k in IGNORED:
                continue
            if k not in golden or k not in new:
                out.append(f"{path}.{k}: only in {'the new run' if k in new else 'the golden'}")
                continue
            differences(golden[k], new[k], f"{path}.{k}", out)
    elif isinstance(golden, list) and isinstance(new, list):
        if len(golden) != len(new):
            out.append(f"{path}: {len(golden)} items golden, {len(new)} new")
        else:
            for i, (a, b) in enumerate(zip(golden, new)):
                differences(a, b, f"{path}[{i}]", out)
    elif isinstance(golden, bool) or isinstance(new, bool):
        if type(golden) is not type(new) or golden != new:
            out.append(f"{path}: {golden!r} golden, {new!r} new")
    elif isinstance(golden, (int, float)) and isinstance(new, (int, float)):
        if not (math.isclose(golden, new, rel_tol=RTOL, abs_tol=1e-12)
                or (math.isnan(golden) and math.isnan(new))):
            out.append(f"{path}: {golden!r} golden, {new!r} new")
    elif isinstance(golden, str) and isinstance(new, str):
        if golden.replace(" (cached)", "") != new.replace(" (cached)", ""):
            out.append(f"{path}: {golden!r} golden, {new!r} new")
    elif golden != new:
        out.append(f"{path}: {golden!r} golden, {new!r} new")
    return out


def main() -> int:
    DATA.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name in SCENARIOS:
            folder = run(name, Path(tmp) / name, Path(tmp) / "cache")
            for f in DOCUMENTS:
                (DATA / f"{name}.{f}").write_text((folder / f).read_text())
            print(f"{name}: golden documents rewritten in {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
