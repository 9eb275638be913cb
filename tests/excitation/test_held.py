"""Data already held (trajectories.excitation.held): a new trajectory designed for the combined
estimate and fitted together with the held recordings, checked against the twin's truth.

The held data move joints 1-3 fully and joints 4-6 a little (or not at all): the base
parameters of the wrist are weakly excited (or not identifiable) from them alone."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import yaml
from conftest import tiny_scenario

from identify.app.acquisition import record
from identify.app.identification import identify_recordings
from identify.outputs.render import error_summary, trajectory_document
from identify.outputs.results import TrajectoryInfo
from identify.app.trajectories import design_context, held_information, trajectories
from identify.backend.recording import Recording
from identify.estimation.design import coulomb_column
from identify.estimation.processing import ProcessingSettings, process
from identify.estimation.segments import SEAM_GUARD, concatenate
from identify.excitation.fourier import FourierTrajectory
from identify.excitation.problem import upright_pose
from identify.logs.held import HeldRecording
from identify.scenario.load import scenario_from_dict

PERIOD = 4.0
HELD_PERIODS = 3      # the held run is 3x longer than the new one: both weigh in the fit
WRIST = 0.3           # wrist amplitude of the held data (fraction of joints 1-3 scale)


def _partial(wrist: float, seed: int = 3) -> FourierTrajectory:
    """Joints 1-3 with full random amplitudes, joints 4-6 scaled by `wrist` (0: at rest)."""
    q0 = np.array([0.0 if v is None else v for v in upright_pose(6)], float)
    rng = np.random.default_rng(seed)
    af, bf = rng.normal(0, 0.08, (6, 2)), rng.normal(0, 0.08, (6, 2))
    af[3:] *= wrist
    bf[3:] *= wrist
    return FourierTrajectory.from_free(q0, af, bf, 2 * math.pi / PERIOD)


def _scenario(tmp_path, held=None, **exc):
    d = tiny_scenario("held", identification={"joint_model": "improved",
                                               "physical_consistency": False})
    d["trajectories"]["excitation"].update({"objective": "d_optimal", **exc})
    if held is not None:
        d["trajectories"]["excitation"]["held"] = held
    return scenario_from_dict(d, file=str(tmp_path / "s.yaml"), base=tmp_path)


def _record(scn, model, tr, seed: int, periods: int = 1) -> Recording:
    info = TrajectoryInfo(label="excitation", source="test", period_s=tr.period, periods=periods)
    settings = {**scn.backend_settings(), "seed": seed}
    return record(scn, {"excitation": (tr, info)}, model=model, settings=settings,
                  show=False)["excitation"]


@pytest.fixture(scope="module")
def weak_held(tmp_path_factory, ref_model):
    """A recording of the wrist-weak trajectory on the twin (seed 0), saved as a run folder."""
    tmp = tmp_path_factory.mktemp("held")
    scn = _scenario(tmp)
    rec = _record(scn, ref_model, _partial(WRIST), seed=0, periods=HELD_PERIODS)
    (tmp / "run1" / "recordings").mkdir(parents=True)
    rec.save(tmp / "run1" / "recordings" / "excitation.npz")
    return tmp, rec


def test_singular_held_combined_design_is_regular(tmp_path, ref_model):
    """Held data that never move the wrist leave base parameters unidentifiable on their own;
    the new trajectory designed with them makes the combined information regular, and adds
    nothing where the held data already know."""
    scn0 = _scenario(tmp_path)
    rec = _record(scn0, ref_model, _partial(0.0), seed=0)
    rec.q[:, 3:] = np.round(rec.q[0, 3:], 4)       # still joints: a constant encoder reading
    rec.save(tmp_path / "wrist_still.npz")
    scn = _scenario(tmp_path, held=["wrist_still.npz"])
    out = trajectories(scn, ref_model)
    info = out["excitation"][1]
    h = info.held
    assert h.rank < h.n_base == 48                     # singular on its own (Coulomb: 3)
    assert h.median_rel_std_held is None                       # not all identifiable
    held = np.array([np.inf if v is None else v for v in h.rel_std_held])
    comb = np.array([np.nan if v is None else v for v in info.rel_std])
    unknown = ~np.isfinite(held) & np.isfinite(comb)
    assert unknown.sum() >= 4          # (parameters without a prior value have no rel_std)
    assert np.all(comb[unknown] < 1.0)                          # identified by the combination
    known = np.isfinite(held) & np.isfinite(comb)
    assert np.all(comb[known] <= held[known] * (1 + 1e-9))      # information only adds
    assert info.logdet is not None and h.sources[0].kind == "recording"
    doc = trajectory_document(info)                     # metrics.json
    assert doc["held"]["sources"][0]["file"].endswith("wrist_still.npz")
    assert doc["held"]["rank"] == h.rank and doc["held"]["median_rel_std_held"] is None
    # without the held data the same settings design another trajectory
    tr_alone = trajectories(_scenario(tmp_path), ref_model)["excitation"][0]
    assert not np.allclose(tr_alone.a, out["excitation"][0].a)


def test_combined_fit_predicted_and_realized(weak_held, ref_model):
    """The combined design's predicted std of the weakly excited base parameters is far below
    the held data's alone; the spread of the combined fit over noise seeds (held and new data
    both re-recorded) agrees with the combined prediction; and the combined fit recovers the
    twin's truth far better than the held run alone."""
    tmp, rec0 = weak_held
    scn = _scenario(tmp, held=["run1"])
    out = trajectories(scn, ref_model)
    tr, info = out["excitation"]
    h = info.held
    held = np.array([np.inf if v is None else v for v in h.rel_std_held], float)
    comb = np.array([np.nan if v is None else v for v in info.rel_std], float)
    ok = np.isfinite(held) & np.isfinite(comb)
    weak = ok & (held > 10 * np.nanmedian(held))
    assert weak.sum() >= 3
    assert np.all(comb[weak] < 0.1 * held[weak])
    assert h.sources[0].kind == "run" and h.sources[0].file.endswith("excitation.npz")

    # realized spread: both recordings with fresh noise per seed
    prior = np.abs(np.asarray(design_context(scn, ref_model, ("viscous", "coulomb")).theta_prior))
    est, errs = [], None
    for s in range(6):
        hs = _record(scn, ref_model, _partial(WRIST), seed=10 + s, periods=HELD_PERIODS)
        new = _record(scn, ref_model, tr, seed=20 + s)
        held_s = [HeldRecording("trajectories.excitation.held[0]", "run1", "run", "x.npz", hs)]
        ident = identify_recordings(scn, ref_model, {"excitation": new}, held=held_s,
                                    decompose=False)
        assert [x.key for x in ident.held] == ["trajectories.excitation.held[0]"]
        est.append(ident.fits.improved.params_)
        if s == 0:
            errs = error_summary(ident.truth.errors["improved_stage1"])
    est = np.array(est)
    realized = est.std(axis=0, ddof=1) / np.where(prior > 0, prior, np.nan)
    ratio = realized[np.isfinite(comb) & np.isfinite(realized)] / \
        comb[np.isfinite(comb) & np.isfinite(realized)]
    new_alone = np.array([np.nan if v is None else v for v in h.rel_std_new], float)
    # where the held data know a parameter better than the new trajectory alone
    sel = np.isfinite(new_alone) & np.isfinite(realized) & (held < new_alone)
    assert sel.sum() >= 5
    vs_new = float(np.median(realized[sel] / new_alone[sel]))
    print(f"realized / predicted std, median over parameters: combined {np.median(ratio):.3f}, "
          f"new trajectory alone {vs_new:.3f} (on the {sel.sum()} parameters the held data "
          f"know better)")
    assert 0.75 < float(np.median(ratio)) < 1.3, np.median(ratio)
    assert vs_new < 0.8           # the held rows count: not the spread of the new data alone

    scn_alone = _scenario(tmp)
    alone = identify_recordings(scn_alone, ref_model, {"excitation": rec0}, decompose=False)
    e_alone = error_summary(alone.truth.errors["improved_stage1"])
    print(f"median |error| vs truth: combined {errs['median_abs_error_percent']:.2f} %, held "
          f"alone {e_alone['median_abs_error_percent']:.2f} %; weak parameters: predicted "
          f"rel. std held {np.median(held[weak]):.3g} -> combined {np.median(comb[weak]):.3g}")
    assert errs["median_abs_error_percent"] < 0.3 * e_alone["median_abs_error_percent"]


def test_cond_objective_refused_and_validation_held(tmp_path, weak_held):
    tmp, _ = weak_held
    with pytest.raises(ValueError, match=r"s\.yaml.*trajectories\.excitation\.held.*d_optimal"):
        _scenario(tmp, held=["run1"], objective="cond")
    d = tiny_scenario("held")
    d["trajectories"]["validation"]["held"] = [str(tmp / "run1")]
    with pytest.raises(ValueError, match=r"trajectories\.validation\.held: held data belong"):
        scenario_from_dict(d, file="s.yaml", base=tmp)


def _cli(tmp_path, capsys, held) -> tuple[int, str]:
    from identify.app.cli import main
    d = tiny_scenario("held")
    d["trajectories"]["excitation"].update(objective="d_optimal", held=held)
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    rc = main(["-q", "run", str(f), "--out", str(tmp_path / "out")])
    return rc, capsys.readouterr().err


def test_hostile_held_entries(tmp_path, capsys, weak_held):
    """Each bad entry: exit 2 with file:line: the entry's key, naming the file and the problem."""
    _, rec = weak_held
    (tmp_path / "empty_run").mkdir()
    (tmp_path / "not_a_recording.npz").write_bytes(b"PK\x03\x04 definitely not a zip")
    _partial(WRIST).save(tmp_path / "trajectory.yaml")
    five = Recording(t=rec.t, q=rec.q[:, :5], rate_hz=rec.rate_hz,
                     joint_names=list(rec.joint_names[:5]), tau_j=rec.tau_j[:, :5])
    five.save(tmp_path / "five.npz")
    cases = [("missing_run", "not found"),
             ("empty_run", "without a recorded excitation"),
             ("not_a_recording.npz", "is not a twinid recording"),
             ("trajectory.yaml", "holds no recorded samples"),
             ("five.npz", "holds 5 joints")]
    for entry, fragment in cases:
        rc, err = _cli(tmp_path, capsys, [entry])
        assert rc == 2, (entry, err)
        assert "s.yaml:" in err and "trajectories.excitation.held[0]:" in err, err
        assert entry in err and fragment in err, err
    assert not (tmp_path / "out").exists()                 # refused before anything ran


def test_held_without_the_fitted_signal(tmp_path, weak_held, ref_model):
    """A held recording without the joint torque the improved model's stage 1 needs: refused
    at the fit, naming the entry and the file."""
    from identify.common.errors import InputError
    _, rec = weak_held
    bare = dataclasses.replace(rec, tau_j=None)
    scn = _scenario(tmp_path)
    held = [HeldRecording("trajectories.excitation.held[0]", "a.npz", "recording", "a.npz", bare)]
    with pytest.raises(InputError, match=r"held\[0\]: a\.npz has no joint torques"):
        identify_recordings(scn, ref_model, {"excitation": rec}, held=held, want_truth=False)


def test_concatenate_never_filters_across_the_seam(weak_held, ref_model):
    """The stacked Coulomb column is each segment's own parallel-filtered column; time stamps
    are continuous with the new run's own clock; the seam is masked out of stage 1."""
    _, rec = weak_held
    ps = ProcessingSettings.from_dict({"smooth_passes": 20})
    a = process(rec, ps)
    b = process(rec.window(100, None), ps)
    b.meta = {**b.meta, "label": "new"}
    c = concatenate([a, b])
    n = ref_model.n
    want = np.concatenate([coulomb_column(a, n), coulomb_column(b, n)])
    np.testing.assert_allclose(coulomb_column(c, n), want, atol=1e-12)
    assert np.all(np.diff(c.t) > 0)
    np.testing.assert_allclose(c.t[a.n_samples:], b.t)
    np.testing.assert_allclose(np.diff(c.t), 1.0 / a.rate_hz, rtol=1e-6)
    cut = a.n_samples
    assert not c.fit_mask[cut - SEAM_GUARD:cut + SEAM_GUARD].any()
    assert [s["samples"] for s in c.meta["segments"]] == [a.n_samples, b.n_samples]


def test_stacked_state_terms_restart_at_the_seam(weak_held, ref_model):
    """The nonlinear library terms of stacked data (evaluated on the full grids and filtered,
    identify.estimation.design.term_design) are each segment's own columns: the Dahl state
    restarts at the seam instead of carrying the previous recording's last state (the stacked
    chain had no rate either: held data with a Dahl or sqrt-viscous term failed)."""
    from identify.estimation.design import term_design
    from identify.model.friction import Term
    _, rec = weak_held
    ps = ProcessingSettings.from_dict({"smooth_passes": 20})
    a = process(rec, ps)
    b = process(rec.window(100, None), ps)
    c = concatenate([a, b])
    n = ref_model.n
    terms = [Term("dahl", xs=1e-3), Term("sqrt_viscous")]
    got = term_design(c, n, terms)
    own = [term_design(d, n, terms) for d in (a, b)]
    for term in terms:
        np.testing.assert_allclose(got[term], np.concatenate([o[term] for o in own]),
                                   atol=1e-12)


def test_held_log_through_the_log_reader(tmp_path, weak_held, ref_model):
    """A held entry given as a log (a CSV with a column map, read by identify.logs) holds the
    same information as the recording it was written from."""
    tmp, rec = weak_held
    n = ref_model.n
    cols = ["time"] + [f"q_{j}" for j in range(n)] + [f"tau_j_{j}" for j in range(n)]
    np.savetxt(tmp_path / "log.csv", np.column_stack([rec.t, rec.q, rec.tau_j]),
               delimiter=",", header=",".join(cols), comments="", fmt="%.17g")
    log = {"file": "log.csv", "format": "csv", "header": True,
           "columns": {"time": "time", "q": [f"q_{j}" for j in range(n)],
                       "tau_j": [f"tau_j_{j}" for j in range(n)]}}
    scn_log = _scenario(tmp_path, held=[log])
    scn_rec = _scenario(tmp, held=["run1"])
    terms = ("viscous", "coulomb")
    F_log, src = held_information(scn_log, ref_model, terms,
                                  design_context(scn_log, ref_model, terms))
    F_rec, _ = held_information(scn_rec, ref_model, terms,
                                design_context(scn_rec, ref_model, terms))
    assert src[0].kind == "log" and src[0].samples == rec.n_samples
    np.testing.assert_allclose(F_log, F_rec, rtol=1e-6, atol=1e-9 * np.abs(F_rec).max())


def test_force_never_replaces_the_held_run(tmp_path, capsys, weak_held):
    """--out on the held run folder with --force would delete its recordings: refused, exit 2,
    the recording still there."""
    tmp, _ = weak_held
    from identify.app.cli import main
    d = tiny_scenario("held")
    d["trajectories"]["excitation"].update(objective="d_optimal", held=[str(tmp / "run1")])
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(d, sort_keys=False))
    rc = main(["-q", "run", str(f), "--out", str(tmp / "run1"), "--force"])
    err = capsys.readouterr().err
    assert rc == 2 and "trajectories.excitation.held[0]" in err and "--force" in err, err
    assert (tmp / "run1" / "recordings" / "excitation.npz").is_file()


def test_hostile_held_entries_found_at_load(tmp_path, capsys, weak_held):
    """The same data twice (a run folder and its own recording) and a recording at another rate
    than the new run's: exit 2 at the entry's line, before anything ran (the rate mismatch used
    to surface in the fit, after the new run, and the same data twice passed silently)."""
    tmp, rec = weak_held
    run = str(tmp / "run1")
    dataclasses.replace(rec, t=2 * rec.t, rate_hz=rec.rate_hz / 2).save(tmp_path / "at50.npz")
    cases = [([run, run + "/recordings/excitation.npz"], 1, "is held already (held[0])"),
             ([run, str(tmp_path / "at50.npz")], 1,
              "was recorded at 50 Hz, the new run records at 100 Hz (twin.sample_rate_hz)")]
    for held, i, fragment in cases:
        rc, err = _cli(tmp_path, capsys, held)
        assert rc == 2 and f"s.yaml:" in err and f"trajectories.excitation.held[{i}]:" in err, err
        assert fragment in err, err
        assert not (tmp_path / "out").exists()


def test_held_log_error_names_the_key_once(tmp_path, capsys, weak_held):
    _, rec = weak_held
    n = rec.n_joints
    cols = ["time"] + [f"q{j}" for j in range(n)] + [f"t{j}" for j in range(n)]
    np.savetxt(tmp_path / "log.csv", np.column_stack([rec.t, rec.q, rec.tau_j]), delimiter=",",
               header=",".join(cols), comments="", fmt="%.9g")
    log = {"file": str(tmp_path / "log.csv"), "format": "csv", "header": True,
           "columns": {"time": "time", "q": [f"q{j}" for j in range(n)],
                       "tau_j": [f"tau{j}" for j in range(n)]}}
    rc, err = _cli(tmp_path, capsys, [log])
    assert rc == 2 and "column 'tau0' for tau_j[0] is not in the header" in err, err
    assert err.count("trajectories.excitation.held[0]") == 1, err


def test_validation_recording_is_not_held(tmp_path, capsys, ref_model):
    """A recording of the run's own validation trajectory (an earlier run's
    recordings/validation.npz with the same validation settings) would put the validation data
    into the fit: refused at its entry before the new run."""
    from identify.app.trajectories import get_trajectory
    scn = _scenario(tmp_path)
    tr, _ = get_trajectory(scn.trajectories.validation, ref_model, ("viscous", "coulomb"),
                           "validation", design_context(scn, ref_model, ("viscous", "coulomb")))
    t = np.arange(int(3 * tr.period * 100)) / 100.0          # 3 periods, 1 mrad tracking noise
    q, _, _ = tr.evaluate(t)
    q = q + np.random.default_rng(0).normal(0, 1e-3, q.shape)
    Recording(t=t, q=q, rate_hz=100.0, joint_names=list(ref_model.joint_names),
              tau_j=np.zeros_like(q), tau_m=np.zeros_like(q)).save(tmp_path / "validation.npz")
    rc, err = _cli(tmp_path, capsys, [str(tmp_path / "validation.npz")])
    assert rc == 2 and "trajectories.excitation.held[0]:" in err, err
    assert "is a recording of this run's validation trajectory" in err, err
    assert not (tmp_path / "out" / "recordings").exists()
