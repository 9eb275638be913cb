"""The plot server (identify.outputs.plotpool): jobs drawn in other processes, every file as
drawn in this one, failures named, and nothing left behind -- a server that dies, a job that
cannot travel, an interrupt."""
from __future__ import annotations

import os
import signal
import time

import pytest

from identify.common import interrupts
from identify.outputs import plotpool


def _write_pid(tag, path, *, fail=False):
    """A plot job: writes its process id and `tag` (fails on request)."""
    if fail:
        raise ValueError(f"job {tag} failed on purpose")
    path.write_text(f"{os.getpid()} {tag}")


def _job(tmp_path, stem, fail=False, tag=None):
    return (stem, _write_pid, (tag or stem,), {"fail": fail}, tmp_path / f"{stem}.txt")


def _pid(tmp_path, stem):
    return int((tmp_path / f"{stem}.txt").read_text().split()[0])


def _children() -> set[int]:
    me = str(os.getpid())
    out = set()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == me:
                        out.add(int(d))
            except OSError:
                pass
    return out


def _isolated(check, tmp_path):
    """Run `check(tmp_path)` here, or -- where this process may not fork (threads that other
    tests left alive: identify.excitation.workers.start_workers) -- in a fresh Python."""
    from identify.excitation.workers import start_workers
    if start_workers(2, 2) == 2:
        return check(tmp_path)
    import subprocess
    import sys
    code = (f"import sys; sys.path[:0] = {sys.path[:3]!r}; from pathlib import Path; "
            f"import test_plotpool as t; t.{check.__name__}(Path({str(tmp_path)!r}))")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(__file__)] + sys.path))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0, p.stderr[-3000:]


def test_jobs_are_drawn_by_other_processes_and_failures_named(tmp_path):
    _isolated(_check_drawn_elsewhere, tmp_path)


def test_jobs_sent_early_are_waited_for_not_drawn_again(tmp_path):
    _isolated(_check_early, tmp_path)


def test_a_job_that_cannot_be_pickled_is_drawn_here(tmp_path):
    _isolated(_check_unpicklable, tmp_path)


def test_a_dead_server_leaves_its_jobs_to_this_process(tmp_path):
    _isolated(_check_dead_server, tmp_path)


def test_an_exception_in_the_block_kills_the_server_at_once(tmp_path):
    _isolated(_check_exception, tmp_path)


def test_what_a_job_returns_is_kept_from_the_server_and_from_here(tmp_path):
    _isolated(_check_results, tmp_path)


def _check_drawn_elsewhere(tmp_path):
    before = _children()
    with plotpool.plot_pool(workers=2) as pool:
        assert pool is not None and pool.alive
        jobs = [_job(tmp_path, f"p{k}") for k in range(4)] + [_job(tmp_path, "bad", fail=True)]
        failures = plotpool.draw(pool, jobs)
    assert failures == [("bad", "job bad failed on purpose")]
    pids = {_pid(tmp_path, f"p{k}") for k in range(4)}
    assert os.getpid() not in pids
    assert all((tmp_path / f"p{k}.txt").read_text().endswith(f"p{k}") for k in range(4))
    assert _children() <= before            # the server and its drawers are gone


def _check_early(tmp_path):
    with plotpool.plot_pool(workers=2) as pool:
        pool.send([_job(tmp_path, "early")], workers=1)
        failures = plotpool.draw(pool, [_job(tmp_path, "early", tag="again"),
                                        _job(tmp_path, "late")])
    assert failures == []
    assert (tmp_path / "early.txt").read_text().endswith("early")     # drawn once, early
    assert (tmp_path / "late.txt").is_file()


def _check_unpicklable(tmp_path):
    path = tmp_path / "local.txt"
    job = ("local", lambda p: p.write_text(str(os.getpid())), (), {}, path)   # a lambda
    with plotpool.plot_pool(workers=2) as pool:
        assert plotpool.draw(pool, [job, _job(tmp_path, "remote")]) == []
    assert int(path.read_text()) == os.getpid()
    assert _pid(tmp_path, "remote") != os.getpid()


def _check_dead_server(tmp_path):
    with plotpool.plot_pool(workers=2) as pool:
        os.kill(pool._proc.pid, signal.SIGKILL)
        pool._proc.join(5.0)
        assert not pool.alive
        assert plotpool.draw(pool, [_job(tmp_path, "a"), _job(tmp_path, "b")]) == []
    assert _pid(tmp_path, "a") == os.getpid() == _pid(tmp_path, "b")


def test_without_a_pool_everything_is_drawn_here(tmp_path):
    assert plotpool.draw(None, [_job(tmp_path, "x"), _job(tmp_path, "y", fail=True)]) == [
        ("y", "job y failed on purpose")]
    assert _pid(tmp_path, "x") == os.getpid()


def _check_exception(tmp_path):
    before = _children()
    t0 = time.monotonic()
    with pytest.raises(interrupts.Interrupted):
        with plotpool.plot_pool(workers=2) as pool:
            pool.send([_job(tmp_path, "z")])
            raise interrupts.Interrupted(signal.SIGINT)
    assert time.monotonic() - t0 < 3.0
    assert _children() <= before


def test_the_server_dies_with_its_parent(tmp_path):
    """A parent killed with SIGKILL takes its plot server with it (PR_SET_PDEATHSIG)."""
    import subprocess
    import sys
    code = ("import sys, time; from identify.outputs import plotpool; "
            "p = plotpool.start(2); print(p._proc.pid, flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        server = int(proc.stdout.readline())
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        for _ in range(100):
            if not os.path.exists(f"/proc/{server}") or \
                    open(f"/proc/{server}/stat").read().rsplit(")", 1)[1].split()[0] == "Z":
                break
            time.sleep(0.05)
        else:
            pytest.fail("the plot server outlived its parent")
    finally:
        proc.kill()


def _answer(x, path):
    """An output job returning a value."""
    return {"x": x, "pid": os.getpid()}


def _check_results(tmp_path):
    with plotpool.plot_pool(workers=2) as pool:
        pool.send([("a", _answer, (1,), {}, None)], workers=1)
        assert plotpool.draw(pool, [("b", lambda path: 2, (), {}, None)]) == []
        assert pool.results["a"]["x"] == 1 and pool.results["a"]["pid"] != os.getpid()
        assert pool.results["b"] == 2                  # drawn here (a lambda cannot travel)


def test_text_buffered_before_the_fork_is_printed_once(tmp_path):
    """The server is forked with the parent's stdio buffers (multiprocessing flushes them before
    it forks; a bare os.fork would not): the server's exit must not print the parent's pending
    text a second time."""
    import subprocess
    import sys
    code = ("import sys; from identify.outputs import plotpool; sys.stdout.write('pending'); "
            "p = plotpool.start(1); p.close()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "pending"
