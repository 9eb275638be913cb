"""The run estimate (identify.scenario.budget) against closed-form expectations: a trajectory
the excitation cache holds costs no optimization, one to optimize costs its starts
(S_PER_OPTIMIZER_START x (H - 1)^2 / 16 x grid / 200 each, run `cores` at a time), a model not
yet compiled adds COMPILE_S, and the machine's load scales the whole sum; the cache look-up
(identify.app.trajectories.cache_state) finds a trajectory the optimizer cached. No timing is
measured here: the calibration is in docs/cli.md."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from conftest import ROOT, tiny_scenario
from identify.scenario import budget as B
from identify.scenario.load import load_scenario

BOTH = ("excitation", "validation")


@pytest.fixture(scope="module")
def quick():
    return load_scenario(ROOT / "scenarios" / "quickstart.yaml")


@pytest.fixture(scope="module")
def paper():
    return load_scenario(ROOT / "scenarios" / "paper_replication.yaml")


def _s(scn, **kw) -> float:
    kw.setdefault("load", 0.0)
    kw.setdefault("cores", 2)
    return B.estimate_run(scn, **kw).seconds


def test_a_cached_trajectory_costs_no_optimization(quick):
    # quickstart: excitation 4 harmonics, validation 3, both grid 80, one start each
    exc = B.S_PER_OPTIMIZER_START * 3 ** 2 / 16 * 80 / 200
    val = B.S_PER_OPTIMIZER_START * 2 ** 2 / 16 * 80 / 200
    warm = _s(quick, cached=BOTH)
    assert _s(quick) == pytest.approx(warm + exc + val, rel=1e-12)
    assert _s(quick, cached=("excitation",)) == pytest.approx(warm + val, rel=1e-12)
    assert _s(quick, cached=("validation",)) == pytest.approx(warm + exc, rel=1e-12)
    assert "no trajectory to optimize" in B.estimate_run(quick, cached=BOTH, load=0).detail
    assert "optimizing validation" in B.estimate_run(quick, cached=("excitation",),
                                                     load=0).detail


def test_a_trajectory_from_a_file_costs_no_optimization(quick):
    ex = dataclasses.replace(quick.trajectories.excitation, source="file")
    scn = dataclasses.replace(quick, trajectories=dataclasses.replace(quick.trajectories,
                                                                      excitation=ex))
    assert _s(scn) == pytest.approx(_s(quick, cached=("excitation",)), rel=1e-12)


def test_parallel_starts_take_one_round_per_core(paper):
    # paper: excitation 5 harmonics, grid 200, 2 starts; validation 3 harmonics, 1 start
    exc_start = B.S_PER_OPTIMIZER_START
    val = B.S_PER_OPTIMIZER_START * 2 ** 2 / 16
    warm = _s(paper, cached=BOTH)
    assert _s(paper, cores=2) == pytest.approx(_s(paper, cached=BOTH, cores=2) + exc_start + val,
                                               rel=1e-12)
    assert _s(paper, cores=1) == pytest.approx(_s(paper, cached=BOTH, cores=1)
                                               + 2 * exc_start + val, rel=1e-12)
    assert _s(paper, cached=BOTH, cores=1) == pytest.approx(warm, rel=1e-12)   # load 0


def test_compiling_and_the_machines_load(quick):
    warm = _s(quick, cached=BOTH)
    assert _s(quick, cached=BOTH, compiled=False) == pytest.approx(warm + B.COMPILE_S, rel=1e-12)
    assert B.load_factor(0.0, 2) == 1.0 and B.load_factor(0.5, 2) == 1.0
    assert B.load_factor(3.0, 2) == pytest.approx(5 / 3)
    assert _s(quick, cached=BOTH, load=4.0) == pytest.approx(2 * warm, rel=1e-12)
    assert "x2.0 for the machine's load" in B.estimate_run(quick, cached=BOTH, load=4.0,
                                                           cores=2).detail
    assert "load" not in B.estimate_run(quick, cached=BOTH, load=0.9, cores=2).detail


def test_the_sweep_optimizes_once(quick):
    one_cold, one_warm = _s(quick), _s(quick, cached=BOTH)
    sw = B.estimate_sweep(quick, 10, workers=2, load=0.0)
    assert sw.seconds == pytest.approx(one_cold - one_warm + 10 * one_warm / 2, rel=1e-9)
    # trajectories the cache holds are not optimized again, a model not compiled yet is
    warm = B.estimate_sweep(quick, 10, workers=2, load=0.0, cached=BOTH)
    assert warm.seconds == pytest.approx(10 * one_warm / 2, rel=1e-9)
    cold_code = B.estimate_sweep(quick, 10, workers=2, load=0.0, cached=BOTH, compiled=False)
    assert cold_code.seconds == pytest.approx(B.COMPILE_S + 10 * one_warm / 2, rel=1e-9)


def test_cache_state_finds_what_the_optimizer_cached(tmp_path, monkeypatch):
    from identify.app.cli import main
    from identify.app.inputs import build_model
    from identify.app.trajectories import cache_state
    monkeypatch.setenv("TWINID_CACHE", str(tmp_path / "cache"))
    scn_d = tiny_scenario("budget_cache")
    f = tmp_path / "t.yaml"
    f.write_text(yaml.safe_dump(scn_d))
    scn = load_scenario(f)
    model = build_model(scn)
    before = cache_state(scn, model)
    assert before["cached"] == frozenset()
    assert main(["--quiet", "trajectory", str(f), "--out", str(tmp_path / "traj")]) == 0
    after = cache_state(scn, model)
    assert after["cached"] == frozenset(BOTH) and after["compiled"]
    assert {p.kind for p in after["plan"].values()} == {"cached"}
    # another seed is another problem: not cached
    scn_d["trajectories"]["validation"]["seed"] = 7
    f.write_text(yaml.safe_dump(scn_d))
    assert cache_state(load_scenario(f), model)["cached"] == frozenset({"excitation"})


def test_the_control_sections_runs_are_counted():
    """closed_loop.yaml: the tracking cases (3 on the twin), the collision part's free and contact
    runs and its transfer part (the other trajectory, the rest calibration, the rest contact),
    each one period plus the settle time; the same scenario without closed_loop: none."""
    scn = load_scenario(ROOT / "scenarios" / "closed_loop.yaml")
    cl, tr = scn.closed_loop, scn.trajectories
    settle = float((scn.twin or {}).get("settle_s", 0.5))
    judged = getattr(tr, cl.trajectory).period_s
    other = tr.excitation.period_s if cl.trajectory == "validation" else tr.validation.period_s
    col = cl.collision
    assert col.enabled and col.transfer and col.free_periods == 1
    want = (5 * (judged + settle) + (other + settle) + (col.rest_calibration_s + settle)
            + (col.rest_hold_s + settle))
    assert B.control_sim_seconds(scn) == pytest.approx(want, rel=1e-12)
    bare = dataclasses.replace(scn, closed_loop=None)
    assert B.control_sim_seconds(bare) == 0.0
    extra = B.estimate_run(scn, cached=BOTH, load=0.0, cores=2).seconds - \
        B.estimate_run(bare, cached=BOTH, load=0.0, cores=2).seconds
    assert extra == pytest.approx(want * 1000.0 / B.TWIN_STEPS_PER_S, rel=1e-9)
