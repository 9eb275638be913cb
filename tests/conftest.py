import os

# Small linear-algebra problems run 30x slower with multi-threaded BLAS on a busy 2-core box;
# set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import matplotlib  # noqa: E402
import pytest  # noqa: E402

matplotlib.use("Agg")

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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
