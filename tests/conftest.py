import os
import sys
from pathlib import Path

import matplotlib
import pytest

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
