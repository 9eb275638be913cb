import os

# Small linear-algebra problems run 30x slower with multi-threaded BLAS on a busy 2-core box;
# set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
# the same kernels on every x86-64 machine (identify.common.kernels): the golden runs and the
# README's figures come out the same on AVX2 and AVX-512 machines
from identify.common import kernels  # noqa: E402  (imports no numpy)

kernels.pin()

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import matplotlib  # noqa: E402
import pytest  # noqa: E402

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The tests mirror the code's layout (tests/<stage>/, tests/twin_backend/, tests/robot_backend/;
# project-wide checks at the top). Shared helpers (golden_runs, robot_fakes, test_twin_helpers,
# the synthetic generator of test_joint_models) are importable by module name from any folder.
TESTS = Path(__file__).resolve().parent
for _d in [TESTS] + sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name != "data"
                           and not p.name.startswith((".", "__"))):
    if str(_d) not in sys.path:
        sys.path.append(str(_d))


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def ref_model():
    from identify import RobotModel
    return RobotModel.reference()


@pytest.fixture(scope="session")
def pybullet_data_path() -> str:
    import pybullet_data
    return pybullet_data.getDataPath()


def tiny_scenario(name: str, twin: dict | None = None, **sections) -> dict:
    """A scenario dict small enough for tests: 4 s trajectories with 3 / 2 harmonics on a coarse
    grid, the twin at 100 Hz. Extra top-level sections are merged in."""
    assets = ROOT / "assets"
    scn = {
        "name": name,
        "arm": {"urdf": str(assets / "cobot6.urdf"), "drives": str(assets / "cobot6_drives.yaml"),
                "description": str(assets / "cobot6.yaml")},
        "trajectories": {
            "excitation": {"harmonics": 3, "period_s": 4.0, "grid": 40, "starts": 1, "max_iter": 60,
                           "seed": 0},
            "validation": {"harmonics": 2, "period_s": 4.0, "grid": 40, "starts": 1, "max_iter": 60,
                           "seed": 1}},
        "twin": {"sample_rate_hz": 100, "settle_s": 0.1, **(twin or {})},
        "identification": {"joint_model": "both"},
    }
    scn.update(sections)
    return scn


@pytest.fixture(scope="session")
def golden_run_folders(tmp_path_factory):
    """name -> run folder of each golden scenario (tests/golden_runs.py: quickstart, paper
    replication), run once per session through the real command line with a cold trajectory
    cache. Shared by the golden-document test and the README test."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import golden_runs as G
    tmp = tmp_path_factory.mktemp("golden")
    return {name: G.run(name, tmp / name, tmp / "cache") for name in G.SCENARIOS}
