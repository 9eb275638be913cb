"""The optimizer's long work is visible (issue 26 item 3): a bar over the starts and, for starts
run in this process, a bar over the running IPOPT solve's iterations, on stderr and silent under
--quiet; one line per finished start naming its trajectory; the iteration count of that line
and the iteration bar agree with IPOPT's own counts; max_iter is that of one IPOPT solve."""
from __future__ import annotations

import math

import pytest

from identify.common import progress
from identify.excitation.iterations import IterationCount, iteration_sink
from identify.excitation.optimizer import optimize_excitation, start_line, validation_trajectory
from identify.excitation.problem import ExcitationProblem
from identify.excitation.__main__ import load_model


@pytest.fixture(scope="module")
def arm():
    return load_model(None, ["joint2", "joint3", "joint4"])


@pytest.fixture(scope="module")
def small():
    return ExcitationProblem(harmonics=3, n_grid=40, z_min=0.05, max_iter=40,
                             start_pose=(-math.pi / 2, 0.0, -math.pi / 2))


def test_the_bars_iteration_counts_are_ipopts(arm, small):
    """The shared counters the worker processes fill (what the bar over the starts shows) end
    at each start's IPOPT iterations, stage 1 and polish, as its entry reports them."""
    import multiprocessing as mp
    counts = mp.get_context("fork").RawArray("l", 2)
    with iteration_sink(IterationCount(counts)):
        res = optimize_excitation(arm, small, seed=0, n_starts=2, workers=1)
    assert list(counts) == [s["iterations"] + s.get("polish_iterations", 0)
                            for s in res.starts]
    for s in res.starts:     # each solve within its own limit: a start may run several
        assert s["max_iter"] == small.max_iter
        assert s["iterations"] <= s["solves"] * s["max_iter"]
        assert s["polish_iterations"] <= s["polish_solves"] * s["polish_max_iter"]


def test_validation_is_named_and_bars_go_to_stderr(arm, small, capsys):
    progress.set_quiet(False)
    res = validation_trajectory(arm, small, seed=1, progress=True)
    out = capsys.readouterr()
    assert out.out == ""
    err = out.err
    assert "validation start 1/1: " in err and "excitation start" not in err
    assert "validation: starts" in err                  # the bar over the starts
    assert "validation (start 1/1, stage 1)" in err     # the bar over IPOPT's iterations
    entry = res.starts[0]
    assert start_line("validation", 0, 1, entry, True, "cond") in err


def test_quiet_shows_nothing(arm, small, capsys):
    progress.set_quiet(True)
    try:
        optimize_excitation(arm, small, seed=3, n_starts=1, progress=True, workers=1)
    finally:
        progress.set_quiet(False)
    assert capsys.readouterr().err == ""


def test_start_line_counts_iterations_against_the_limit_of_one_solve():
    entry = {"status": "Maximum_Iterations_Exceeded", "iterations": 200, "solves": 2,
             "max_iter": 100, "time_s": 1.25, "cond": 30.0, "polish_iterations": 33,
             "polish_solves": 1, "polish_max_iter": 33,
             "polish_status": "Maximum_Iterations_Exceeded"}
    assert start_line("validation", 0, 1, entry, True) == (
        "validation start 1/1: optimizer stopped at max_iter (100 it per IPOPT solve) with a "
        "feasible trajectory, 200 it in 2 IPOPT solves + polish 33 it (polish stopped at its "
        "max_iter 33), 1.2 s, cond 30")


def test_finished_starts_are_reported_in_this_process():
    from identify.excitation import workers
    seen = []
    assert workers.map_starts(lambda s: s * 10, 3, 2,
                              on_done=lambda s, r: seen.append((s, r))) == [0, 10, 20]
    assert sorted(seen) == [(0, 0), (1, 10), (2, 20)]
