"""What makes the excitation optimizer fast must not change what it computes: the screened
solvers' kept-row callbacks (_RowSubset) against the full rows and finite differences, the
warm-started re-solve, starts run in forked workers against the same starts in one process."""
from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from identify.excitation import ExcitationProblem, optimize_excitation
from identify.excitation.__main__ import load_model
from identify.excitation.conditioning import base_parameters
from identify.excitation.objective import build_nlp
from identify.excitation.optimizer import initial_guess, screened_solve
from identify.excitation.parametrization import to_x
from identify.excitation.problem import resolve_start, scaled_limits


@pytest.fixture(scope="module")
def arm():
    return load_model(None, ["joint2", "joint3", "joint4"])


@pytest.fixture(scope="module")
def small():
    """Three joints of the reference arm, table and self-collision, a small grid: every row
    kind but torque."""
    return ExcitationProblem(harmonics=3, n_grid=40, z_min=0.05, collision_margin=0.02,
                             start_pose=(-math.pi / 2, 0.0, -math.pi / 2))


def _x0(model, problem, seed=3):
    _, free = resolve_start(model, problem)
    lim = scaled_limits(model, problem)
    return to_x(initial_guess(model, problem, np.random.default_rng(seed), lim), free)


def _fresh_python(code: str, timeout: float = 120):
    """`code` run by a fresh interpreter that imports this checkout (threads other tests leave
    alive in this process would make the optimizer, rightly, keep its starts in one process)."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         timeout=timeout)
    assert res.returncode == 0, res.stderr[-2000:]
    return res


def test_row_subset_is_the_full_rows_and_its_jacobian_the_derivative(arm, small):
    nlp = build_nlp(arm, small, base_parameters(arm, small))
    kinds = {nlp.kinds[sl][0] for (_, _, sl, _), src in zip(nlp.groups, nlp.sources) if src}
    assert kinds == {"z", "col"}
    x = _x0(arm, small)
    rng = np.random.default_rng(0)
    for rows in {id(s[0]): s[0] for s in nlp.sources if s}.values():
        idx = np.sort(rng.choice(rows.size, size=min(37, rows.size), replace=False))
        sub = rows.subset(idx)
        np.testing.assert_allclose(sub.value(x), rows.value(x)[idx], rtol=0, atol=1e-12)
        J = rows.jacobian(x)
        np.testing.assert_allclose(sub.jacobian(x), J[idx], rtol=0, atol=1e-12)
        h = 1e-6            # the full Jacobian against central differences of the values
        fd = np.stack([(rows.value(x + h * e) - rows.value(x - h * e)) / (2 * h)
                       for e in np.eye(x.size)], axis=1)
        np.testing.assert_allclose(J, fd, atol=1e-6 * max(1.0, np.abs(J).max()))


def test_kept_rows_are_the_selected_rows_of_g(arm, small):
    nlp = build_nlp(arm, small, base_parameters(arm, small))
    x = _x0(arm, small, seed=5)
    keep = np.random.default_rng(1).random(nlp.lbg.size) < 0.3
    g_kept, cbs = nlp._kept_rows(keep)
    import casadi as ca
    xs = nlp.symbols[0]
    val = np.asarray(ca.Function("k", [xs], [g_kept])(x)).ravel()
    np.testing.assert_allclose(val, np.asarray(nlp.g_fun(x)).ravel()[keep], atol=1e-12)
    jac = np.asarray(ca.Function("kj", [xs], [ca.jacobian(g_kept, xs)])(x))
    jac_full = np.asarray(ca.Function("fj", [xs], [ca.jacobian(nlp.symbols[2], xs)])(x))
    np.testing.assert_allclose(jac, jac_full[keep], atol=1e-10)
    assert cbs                   # the callback rows came from subset callbacks


def test_warm_restart_of_a_converged_solve_is_short(arm, small):
    pr = replace(small, polish_power=None)
    nlp = build_nlp(arm, pr, base_parameters(arm, pr))
    sol, _, it_cold, _ = screened_solve(nlp, _x0(arm, pr), nlp.lbg.copy(), pr)
    x = np.asarray(sol["x"]).ravel()
    warm = (sol["lam_g_all"], np.asarray(sol["lam_x"]).ravel())
    sol2, _, it_warm, _ = screened_solve(nlp, x, nlp.lbg.copy(), pr, warm)
    cold2, _, it_cold2, _ = screened_solve(nlp, x, nlp.lbg.copy(), pr)
    assert it_warm <= 10 < it_cold2, (it_warm, it_cold2, it_cold)
    assert float(sol2["f"]) == pytest.approx(float(sol["f"]), rel=1e-3)
    g = np.asarray(nlp.g_fun(np.asarray(sol2["x"]).ravel())).ravel()
    assert np.all(g >= nlp.lbg - 1e-6) and np.all(g <= nlp.ubg + 1e-6)


def test_starts_in_worker_processes_equal_starts_in_this_process():
    """Run in a fresh interpreter: threads other tests leave alive would make the optimizer
    (rightly) keep its starts in one process, and the forked path would go untested."""
    import json
    res = _fresh_python(
        "import json, math, numpy as np\n"
        "from identify.excitation import ExcitationProblem, optimize_excitation\n"
        "from identify.excitation.__main__ import load_model\n"
        "from identify.excitation.workers import start_workers\n"
        "arm = load_model(None, ['joint2', 'joint3', 'joint4'])\n"
        "pr = ExcitationProblem(harmonics=3, n_grid=40, z_min=0.05, collision_margin=0.02,\n"
        "                       start_pose=(-math.pi / 2, 0.0, -math.pi / 2))\n"
        "out = {'workers': [start_workers(2, 2), start_workers(2, 1), start_workers(1, 4)]}\n"
        "for w in (1, 2):\n"
        "    r = optimize_excitation(arm, pr, seed=4, n_starts=2, workers=w)\n"
        "    out[w] = {'a': r.trajectory.a.tolist(), 'b': r.trajectory.b.tolist(),\n"
        "              'starts': [[s['cond'], s['iterations'], s['status']] for s in r.starts]}\n"
        "print(json.dumps(out))\n", timeout=600)
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["workers"] == [2, 1, 1]
    assert out["1"] == out["2"]


def test_a_progress_bar_leaves_the_start_workers_available():
    """The CLI draws bars before later designs; tqdm's monitor thread, left alive by the first
    bar, used to make every later design keep its starts in one process. Fresh interpreter, as
    above."""
    code = ("from identify.common import progress\n"
            "from identify.excitation.workers import start_workers\n"
            "for _ in progress.bar(range(3), desc='x'): pass\n"
            "import threading; print(threading.active_count(), start_workers(2, 2))\n")
    assert _fresh_python(code).stdout.split() == ["1", "2"]


def test_starts_fall_back_to_this_process_when_a_worker_dies():
    """A worker killed mid-start (OOM killer) must not lose the design: its starts re-run here,
    with a warning. Fresh interpreter, as above."""
    code = ("import os\n"
            "from identify.excitation.workers import map_starts\n"
            "parent = os.getpid()\n"
            "def job(s):\n"
            "    if os.getpid() != parent and s == 1:\n"
            "        os._exit(9)\n"
            "    return 10 * s\n"
            "print(map_starts(job, 3, 2))\n")
    res = _fresh_python(code)
    assert res.stdout.strip() == "[0, 10, 20]"
    assert "worker process died" in res.stderr


def test_starts_run_in_this_process_without_a_worker_pool(monkeypatch, capsys):
    import concurrent.futures as cf
    from identify.excitation import workers

    def no_pool(*a, **k):
        raise OSError(38, "Function not implemented")
    monkeypatch.setattr(workers, "start_workers", lambda n, w=None: 2)
    monkeypatch.setattr(cf, "ProcessPoolExecutor", no_pool)
    assert workers.map_starts(lambda s: s + 1, 3, 2) == [1, 2, 3]
    assert "no worker pool" in capsys.readouterr().err


def test_every_start_is_polished_and_the_best_kept(arm, small):
    res = optimize_excitation(arm, small, seed=2, n_starts=3, workers=1)
    assert all("polish_iterations" in s for s in res.starts)
    # a polish never makes its start worse: the better of stage 1 and the polish is kept
    assert all(s["cond"] == min(s["stage1_cond"], s["polish_cond"]) for s in res.starts)
    assert res.cond == pytest.approx(min(s["cond"] for s in res.starts), rel=1e-9)


def test_start_workers_die_with_their_parent(tmp_path):
    """A parent killed by a signal must not leave its forked start workers behind."""
    import os
    import signal
    import subprocess
    import sys
    import time
    script = tmp_path / "parent.py"
    script.write_text(
        "import os, sys, time\n"
        "from identify.excitation.workers import map_starts\n"
        "def job(s):\n"
        # one write(2) of < PIPE_BUF bytes is atomic; print() under PYTHONUNBUFFERED makes
        # two writes, and the two workers' lines could interleave
        "    os.write(1, b'%d\\n' % os.getpid())\n"
        "    time.sleep(60)\n"
        "map_starts(job, 2, 2)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                         env=env)
    try:
        kids = [int(p.stdout.readline()) for _ in range(2)]
        assert all(k != p.pid for k in kids)
        os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        deadline = time.monotonic() + 10
        alive = kids
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = [k for k in kids if os.path.exists(f"/proc/{k}")
                     and open(f"/proc/{k}/stat").read().split()[2] != "Z"]
        assert not alive, f"start workers {alive} outlived their parent"
    finally:
        p.kill()
        p.stdout.close()
