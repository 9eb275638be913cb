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


@pytest.fixture(scope="session")
def golden_cache(golden_run_folders) -> Path:
    """The twinid cache folder the golden runs of :func:`golden_run_folders` filled: the arm
    model compiled to C and their optimized trajectories (cold, checked against the golden
    documents). A fresh run whose trajectories are theirs (scenarios/closed_loop.yaml and
    add_excitation.yaml share quickstart's) reads them from here instead of optimizing them again
    -- as ``python tests/doc_figures.py`` does when it draws the docs' figures (one cache for
    all its runs); a cached trajectory gives the run the same numbers and pixels."""
    return Path(golden_run_folders["quickstart"]).parent / "cache"


#: the cache subfolders that depend only on the arm model (C libraries keyed by the function's
#: graph, base-parameter maps keyed by the model's hash): the same files whoever computes them
MODEL_CACHES = ("codegen", "base_params")


@pytest.fixture(scope="session")
def model_cache_store(tmp_path_factory) -> Path:
    """This session's (this xdist worker's) store of :data:`MODEL_CACHES` files, filled by the
    tests that use :func:`seed_model_cache` / :func:`keep_model_cache` (:func:`model_cache`)."""
    store = tmp_path_factory.mktemp("model_cache_store")
    for sub in MODEL_CACHES:
        (store / sub).mkdir()
    return store


def _copy_new(src: Path, dst: Path) -> None:
    """Copy the files of `src` that `dst` lacks; a library's manifest (.json) before the library,
    each by an atomic rename, so a reader never sees a library without its record."""
    import os
    import shutil
    files = sorted((p for p in src.iterdir() if p.is_file()), key=lambda p: p.suffix != ".json")
    for f in files:
        if not (dst / f.name).exists() and not f.name.startswith("."):
            tmp = dst / f".{f.name}.part"
            shutil.copyfile(f, tmp)
            os.replace(tmp, dst / f.name)


def seed_model_cache(cache: Path, store: Path) -> Path:
    """Make `cache` a twinid cache folder holding the store's arm-model files (and nothing else:
    no trajectories); returns `cache`."""
    for sub in MODEL_CACHES:
        (cache / sub).mkdir(parents=True, exist_ok=True)
        _copy_new(store / sub, cache / sub)
    return cache


def keep_model_cache(cache: Path, store: Path) -> None:
    """Add the arm-model files `cache` has and the store lacks to the store."""
    for sub in MODEL_CACHES:
        if (cache / sub).is_dir():
            _copy_new(cache / sub, store / sub)


@pytest.fixture
def model_cache(tmp_path, model_cache_store) -> Path:
    """A fresh twinid cache folder, ``tmp_path/"cache"``: no trajectories and nothing else of
    earlier runs, but the arm-model files this session has already computed (:data:`MODEL_CACHES`:
    the model compiled to C, base parameters), and the ones this test computes go back to the
    session's store. For tests of anything but those caches: the C compiler runs once per function
    and session instead of once per test (the excitation problem's functions: ~50 s)."""
    cache = seed_model_cache(tmp_path / "cache", model_cache_store)
    yield cache
    keep_model_cache(cache, model_cache_store)


# ---------------------------------------------------------------------------------------------
# pytest-xdist (`-n 2`, `--dist loadgroup`, the README's test command): which tests share a worker
# ---------------------------------------------------------------------------------------------

def xdist_group_of(item) -> str:
    """The xdist group of a test: tests that share a worker, in the order they were collected.

    * ``golden``: every test using the golden runs (:func:`golden_run_folders`, a session fixture:
      one worker runs the two cold golden runs once, not each worker);
    * ``ethercat``: every test that starts the EtherCAT slave emulator or a master on a veth pair
      (tests/robot_backend, tests/twin_backend/test_ethercat*, ``root`` marks): never two
      emulators at once (their 1 kHz cycles and watchdogs are timing-sensitive);
    * else the test's file: module-scoped fixtures (a simulated log, a CLI run) are computed once,
      as in a serial run, and a file's tests keep their order."""
    path = Path(str(item.fspath)).resolve()
    rel = path.relative_to(TESTS).as_posix() if TESTS in path.parents else path.name
    if "golden_run_folders" in getattr(item, "fixturenames", ()):
        return "golden"
    if (rel.startswith("robot_backend/") or rel.startswith("twin_backend/test_ethercat")
            or item.get_closest_marker("root") is not None):
        return "ethercat"
    return rel


#: under xdist, the groups whose tests run with the other worker idle: the EtherCAT tests time a
#: 1 kHz bus, watchdogs and exits "within a second" (with the other core busy they failed: a
#: bring-up exit in 1.003-1.012 s of 1.0, a parent-killed loop stopping in 0.30 s of 0.1)
EXCLUSIVE_GROUPS = ("ethercat",)
_LOCK: dict = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Under xdist, each test (setup, call, teardown, reruns) holds a lock file of this run
    (``PYTEST_XDIST_TESTRUNUID``) shared, and a test of :data:`EXCLUSIVE_GROUPS` holds it
    exclusive: it starts when the other worker's test has ended and no test starts beside it."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if run is None or "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    import fcntl
    import tempfile
    if "fh" not in _LOCK:
        _LOCK["fh"] = open(Path(tempfile.gettempdir()) / f"twinid-pytest-{run}.lock", "a+")
    fh = _LOCK["fh"]
    exclusive = xdist_group_of(item) in EXCLUSIVE_GROUPS
    fcntl.flock(fh, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(fh, fcntl.LOCK_UN)


#: under xdist, the groups that go first (the longest: the golden runs, ~5 min of one core; the
#: EtherCAT emulator), so that no long group starts last and leaves the other worker idle
FIRST_GROUPS = ("golden", "ethercat")


def _xdist(config) -> bool:
    return config.getoption("dist", "no") != "no" or "PYTEST_XDIST_WORKER" in os.environ


def pytest_configure(config):
    """Under xdist, hand the groups to the workers in the order of the collection (below), not
    by their number of tests (xdist's default)."""
    if _xdist(config) and hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(tryfirst=True)     # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    """Mark every test with its :func:`xdist_group_of` (read by ``--dist loadgroup``; without
    xdist the mark is inert and the order is the serial one). Under xdist the tests of
    :data:`FIRST_GROUPS` come first (a stable sort: each group keeps its order)."""
    groups = {}
    for item in items:
        groups[item.nodeid] = g = xdist_group_of(item)
        item.add_marker(pytest.mark.xdist_group(g))
    if _xdist(config):
        rank = {g: i for i, g in enumerate(FIRST_GROUPS)}
        items.sort(key=lambda it: rank.get(groups[it.nodeid], len(FIRST_GROUPS)))
