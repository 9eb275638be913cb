"""Interrupts that stop (issue 25, issue 23 item 2): SIGINT / SIGTERM during the trajectory
optimization (IPOPT calling back into Python), in its parallel start workers and during the C
compilation of the arm model end the command with 128 + signum within a second, leave no worker
or compiler behind and cache nothing (the next run re-optimizes).

Each case runs ``python -m identify trajectory`` in a subprocess (its own session, so that a
Ctrl-C can be sent to the whole group as a terminal does) and sends the signal once the step is
under way: the truth is the exit status, the wall time after the signal, the processes left in the
group and the cache folder's contents."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"


def _scenario(tmp: Path, starts: int) -> str:
    """A twin scenario whose excitation solve runs for several seconds (5 harmonics, 300 it)."""
    d = {"name": "interrupt",
         "arm": {"urdf": str(ASSETS / "cobot6.urdf"), "drives": str(ASSETS / "cobot6_drives.yaml"),
                 "description": str(ASSETS / "cobot6.yaml")},
         "trajectories": {
             "excitation": {"harmonics": 5, "period_s": 10.0, "grid": 80, "starts": starts,
                            "max_iter": 300, "seed": 0},
             "validation": {"harmonics": 3, "period_s": 10.0, "grid": 80, "starts": 1,
                            "max_iter": 100, "seed": 1}},
         "twin": {"sample_rate_hz": 100}}
    f = tmp / f"interrupt_{starts}.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    return str(f)


class _Run:
    """`python -m identify trajectory SCENARIO` in its own session, stderr read line by line."""

    def __init__(self, scenario: str, out: Path, cache: Path):
        env = dict(os.environ, PYTHONPATH=str(ROOT), TWINID_CACHE=str(cache))
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "identify", "trajectory", scenario, "--out", str(out)],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            start_new_session=True)
        self.lines: list[str] = []
        self._seen = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stderr:
            with self._seen:
                self.lines.append(line)
                self._seen.notify_all()

    def wait_for(self, fragment: str, timeout: float = 240.0) -> None:
        end = time.monotonic() + timeout
        with self._seen:
            while not any(fragment in ln for ln in self.lines):
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise AssertionError(f"{fragment!r} never printed: {''.join(self.lines)}")
                self._seen.wait(0.2)

    def children(self) -> list[int]:
        try:
            return [int(p) for p in Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
                    .read_text().split()]
        except OSError:
            return []

    def interrupt(self, signum: int, group: bool = False) -> tuple[int, float]:
        """Send `signum` (to the whole group: as a terminal's Ctrl-C); (exit code, seconds from
        the signal to the exit)."""
        t0 = time.monotonic()
        (os.killpg if group else os.kill)(self.proc.pid, signum)
        try:
            rc = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            raise AssertionError(f"still running 30 s after {signal.Signals(signum).name}")
        return rc, time.monotonic() - t0

    def group_alive(self, settle: float = 1.0) -> bool:
        """Is any process of the run's group (workers, the C compiler) still alive?"""
        end = time.monotonic() + settle
        while time.monotonic() < end:
            try:
                os.killpg(self.proc.pid, 0)
            except ProcessLookupError:
                return False
            time.sleep(0.05)
        return True

    def text(self) -> str:
        return "".join(self.lines)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> Path:
    """A cache folder holding the compiled arm model (no trajectory): one full run, then its
    optimized trajectories removed."""
    base = tmp_path_factory.mktemp("compiled")
    cache = base / "cache"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TWINID_CACHE=str(cache))
    scn = ROOT / "scenarios" / "quickstart.yaml"
    r = subprocess.run([sys.executable, "-m", "identify", "-q", "trajectory", str(scn), "--out",
                        str(base / "out")], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr
    shutil.rmtree(cache / "excitation")
    return cache / "codegen"


def _cache_with(compiled: Path, tmp: Path) -> Path:
    cache = tmp / "cache"
    shutil.copytree(compiled, cache / "codegen")
    return cache


def _cached_trajectories(cache: Path) -> list:
    return sorted(p.name for p in (cache / "excitation").glob("*")) if (
        cache / "excitation").exists() else []


@pytest.mark.parametrize("signum, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_signal_during_optimization_stops_and_caches_nothing(signum, code, compiled, tmp_path):
    cache = _cache_with(compiled, tmp_path)
    run = _Run(_scenario(tmp_path, starts=1), tmp_path / "out", cache)
    run.wait_for("-> excitation trajectory")
    time.sleep(2.0)                                   # IPOPT is iterating (a solve takes > 5 s)
    assert "excitation start 1/1" not in run.text(), "the solve ended before the signal"
    rc, dt = run.interrupt(signum)
    assert rc == code, run.text()
    assert dt < 1.0, f"{dt:.2f} s from the signal to the exit"
    assert "interrupted" in run.text()
    assert "excitation start 1/1" not in run.text()   # no start reported as solved
    assert _cached_trajectories(cache) == []          # the next run re-optimizes
    assert not (tmp_path / "out" / "excitation.yaml").exists()


@pytest.mark.parametrize("group", [False, True], ids=["SIGTERM-to-parent", "Ctrl-C-to-group"])
def test_signal_during_parallel_starts_ends_the_workers(group, compiled, tmp_path):
    cache = _cache_with(compiled, tmp_path)
    run = _Run(_scenario(tmp_path, starts=2), tmp_path / "out", cache)
    run.wait_for("-> excitation trajectory")
    end = time.monotonic() + 120
    while len(run.children()) < 2:                    # the start workers are solving
        assert run.proc.poll() is None and time.monotonic() < end, run.text()
        time.sleep(0.05)
    workers = run.children()
    time.sleep(1.0)
    signum = signal.SIGINT if group else signal.SIGTERM
    rc, dt = run.interrupt(signum, group=group)
    assert rc == 128 + signum, run.text()
    assert dt < 1.0, f"{dt:.2f} s from the signal to the exit"
    assert not run.group_alive(), f"workers {workers} outlived the command"
    assert "excitation start" not in run.text()
    assert _cached_trajectories(cache) == []


def test_signal_during_compilation_stops_and_leaves_no_partial_library(tmp_path):
    cache = tmp_path / "cache"                        # empty: the arm model is compiled
    run = _Run(_scenario(tmp_path, starts=1), tmp_path / "out", cache)
    run.wait_for("compiling the arm model to C")
    time.sleep(0.2)
    rc, dt = run.interrupt(signal.SIGINT)
    assert rc == 130, run.text()
    assert dt < 1.0, f"{dt:.2f} s from the signal to the exit"
    assert not run.group_alive(), "the C compiler outlived the command"
    codegen = cache / "codegen"
    left = sorted(p.name for p in codegen.iterdir()) if codegen.exists() else []
    assert not [p for p in left if not p.endswith((".so", ".json"))], left   # no temp folder
    libs = {p[:-3] for p in left if p.endswith(".so")}
    assert libs <= {p[:-5] for p in left if p.endswith(".json")}, left      # each verified
    assert _cached_trajectories(cache) == []


_STUCK = """
import hashlib, sys
from identify.common import interrupts
with interrupts.handling():
    print("ready", flush=True)
    hashlib.pbkdf2_hmac("sha256", b"x", b"y", 2 ** 31 - 1)   # C code that never checks signals
"""


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_watchdog_ends_a_process_stuck_in_compiled_code(signum):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    p = subprocess.Popen([sys.executable, "-c", _STUCK], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.3)
    t0 = time.monotonic()
    p.send_signal(signum)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        raise AssertionError("the watchdog did not end the process")
    dt = time.monotonic() - t0
    assert p.returncode == 128 + signum
    assert dt < 1.0, f"{dt:.2f} s"
    assert "did not return within" in p.stderr.read()


def test_handlers_are_restored_and_a_swallowed_interrupt_is_still_seen():
    from identify.common import interrupts
    before = {s: signal.getsignal(s) for s in interrupts.SIGNALS}
    with interrupts.handling(grace_s=60.0, finish=False):  # pytest carries on
        assert interrupts.pending() is None
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.5)                           # the handler runs here
        except interrupts.Interrupted as exc:         # a library catching it ...
            assert exc.signum == signal.SIGTERM
        assert interrupts.pending() == signal.SIGTERM  # ... does not make it go away
        with pytest.raises(interrupts.Interrupted):
            interrupts.check()
    assert {s: signal.getsignal(s) for s in interrupts.SIGNALS} == before
    assert interrupts.pending() is None
    interrupts.check()                                # nothing pending once uninstalled
