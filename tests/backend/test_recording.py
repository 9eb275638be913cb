"""Recording: validation, atomic save/load round trip, chunked streaming that survives a kill."""
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from identify.backend.recording import ChunkWriter, Recording, assemble_chunks


def _rec(N=50, n=3, seed=0):
    rng = np.random.default_rng(seed)
    return Recording(t=np.arange(N) * 0.01, q=rng.normal(size=(N, n)), rate_hz=100.0,
                     joint_names=[f"j{i}" for i in range(n)], tau_j=rng.normal(size=(N, n)),
                     i_m=rng.normal(size=(N, n)), tau_m=rng.normal(size=(N, n)),
                     meta={"backend": "test", "seed": seed, "gain": np.float64(2.5)},
                     truth={"qd": rng.normal(size=(N, n)), "friction_hd": rng.normal(size=(N, n))})


def test_round_trip(tmp_path):
    rec = _rec()
    path = rec.save(tmp_path / "r.npz")
    back = Recording.load(path)
    for name in ("t", "q", "tau_j", "i_m", "tau_m"):
        np.testing.assert_array_equal(getattr(back, name), getattr(rec, name))
    assert back.q_cmd is None
    assert back.joint_names == rec.joint_names and back.rate_hz == 100.0
    assert back.meta["gain"] == 2.5
    np.testing.assert_array_equal(back.truth["friction_hd"], rec.truth["friction_hd"])
    assert not list(tmp_path.glob("*.partial"))


def test_validation_names_the_fault():
    with pytest.raises(ValueError, match=r"Recording.tau_j has shape \(4, 2\), expected \(5, 2\)"):
        Recording(t=np.arange(5.0), q=np.zeros((5, 2)), tau_j=np.zeros((4, 2)), rate_hz=1.0,
                  joint_names=["a", "b"])
    with pytest.raises(ValueError, match="not strictly increasing at sample 3"):
        Recording(t=np.array([0, 1, 2, 2, 3.0]), q=np.zeros((5, 1)), rate_hz=1.0, joint_names=["a"])


def test_load_rejects_foreign_and_truncated_files(tmp_path):
    np.savez(tmp_path / "other.npz", x=np.zeros(3))
    with pytest.raises(ValueError, match="other.npz: not a twinid recording"):
        Recording.load(tmp_path / "other.npz")
    good = _rec().save(tmp_path / "good.npz")
    data = good.read_bytes()
    (tmp_path / "cut.npz").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cut.npz: not a readable recording file"):
        Recording.load(tmp_path / "cut.npz")


def test_window_slices_truth():
    rec = _rec()
    w = rec.window(10, 20)
    assert w.n_samples == 10
    np.testing.assert_array_equal(w.truth["qd"], rec.truth["qd"][10:20])


def test_chunks_survive_a_killed_writer(tmp_path):
    """A process killed while streaming leaves only complete chunks; they assemble."""
    folder = tmp_path / "stream"
    script = textwrap.dedent(f"""
        import sys, time, numpy as np
        sys.path.insert(0, {str(os.getcwd())!r})
        from identify.backend.recording import ChunkWriter
        w = ChunkWriter({str(folder)!r}, ["a", "b"], 100.0, meta={{"run": 1}})
        k = 0
        while True:
            t = (np.arange(10) + 10 * k) * 0.01
            w.write(t, q=np.full((10, 2), float(k)))
            k += 1
            if k == 3:
                print("ready", flush=True)
            time.sleep(0.002)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rec = assemble_chunks(folder, tmp_path / "all.npz")
    k = rec.n_samples // 10
    assert k >= 3 and rec.n_samples == 10 * k
    np.testing.assert_array_equal(rec.q[::10, 0], np.arange(k))
    assert Recording.load(tmp_path / "all.npz").n_samples == rec.n_samples
    w = ChunkWriter(folder, ["a", "b"], 100.0)  # re-opening continues the numbering
    assert w.write(np.array([99.0]), q=np.zeros((1, 2))).name == f"chunk_{k:06d}.npz"
