"""The plots say what they show (issues 13 and 16): residual time series on their own time axis
(not the histogram's torque axis), time labels, both trajectory limits drawn and labelled, the
stage-1 parameters in units of sigma with full names; fast drawing (decimation, pages) that
keeps every peak. Figures are inspected through their axes (data limits, labels), captured by
replacing the saver."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from identify.common import figures


@pytest.fixture
def captured(monkeypatch):
    """Figures passed to figures.save, kept open for inspection (nothing written)."""
    figs = []

    def keep(fig, path, dpi=figures.DPI):
        figs.append(fig)
        return path
    monkeypatch.setattr(figures, "save", keep)
    yield figs
    plt = figures.pyplot()
    for f in figs:
        plt.close(f)


def _result(n=6, N=2001, T=10.0, seed=0):
    """A ValidationResult-like object: N samples over [0.5, 0.5 + T] s, residuals of +-20 N*m so
    the histogram's axis is far from the time axis."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.5, 0.5 + T, N)
    meas = np.sin(t[:, None] * np.arange(1, n + 1)) * 5
    preds = {"simplified": meas + rng.normal(0, 8, (N, n)),
             "improved_closed_form": meas + rng.normal(0, 1, (N, n))}
    rms = {m: np.sqrt(np.mean((p - meas) ** 2, 0)) for m, p in preds.items()}
    dec = {"improved": {"rigid_body": meas * 0.8, "reducer": meas * 0.2}}
    return SimpleNamespace(t={"validation": t}, measured={"validation": meas},
                           predictions={"validation": preds}, rms={"validation": rms},
                           rms_overall={"validation": {m: float(np.sqrt(np.mean(r ** 2)))
                                                       for m, r in rms.items()}},
                           joint_names=[f"joint{j + 1}" for j in range(n)],
                           decomposition={"validation": dec})


def test_residual_time_series_have_their_own_time_axis(captured, tmp_path):
    from identify.validation.plots import plot_residuals
    res = _result()
    t = res.t["validation"]
    plot_residuals(res, "validation", tmp_path / "r.png")
    fig = captured[0]
    hist = [ax for ax in fig.axes if ax.get_title() == "residual distribution"]
    series = [ax for ax in fig.axes if ax.get_title().startswith("joint")]
    assert len(hist) == 1 and len(series) == 6
    span = t[-1] - t[0]
    for ax in series:
        lo, hi = ax.get_xlim()
        # the time series fills the panel: the axis is the time range (+ matplotlib's margin),
        # not the residuals' +-40 N*m of the histogram
        assert t[0] - 0.06 * span <= lo <= t[0] and t[-1] <= hi <= t[-1] + 0.06 * span, (lo, hi)
        assert not ax.get_shared_x_axes().joined(ax, hist[0])
    e = (res.predictions["validation"]["simplified"] - res.measured["validation"]).ravel()
    lo, hi = hist[0].get_xlim()
    assert lo <= e.min() and hi >= e.max()
    # every column's lowest time panel says "t [s]"
    assert sum(ax.get_xlabel() == "t [s]" for ax in series) == 2


def test_decomposition_and_torque_plots_have_time_labels(captured, tmp_path):
    from identify.validation.plots import plot_decomposition, plot_torque_comparison
    res = _result()
    plot_decomposition(res, "validation", "improved", tmp_path / "d.png")
    plot_torque_comparison(res, "validation", tmp_path / "c.png")
    for fig in captured:
        labels = [ax.get_xlabel() for ax in fig.axes]
        assert labels.count("t [s]") == 2, labels
        assert all(ax.get_ylabel() for ax in fig.axes)


def test_joints_are_paged(captured, tmp_path):
    from identify.validation.plots import plot_residuals, plot_torque_comparison
    res = _result(n=8)
    first = plot_torque_comparison(res, "validation", tmp_path / "c.png")
    assert first == tmp_path / "c.png"
    assert [len(f.axes) for f in captured] == [6, 2]
    captured.clear()
    plot_residuals(res, "validation", tmp_path / "r.png")
    # the histogram (all joints) comes once, on the last page
    assert [len(f.axes) for f in captured] == [6, 3]
    assert figures.page_path(tmp_path / "c.png", 1) == tmp_path / "c_p2.png"


def test_decimate_keeps_every_extreme():
    rng = np.random.default_rng(1)
    N = 100_003
    t = np.linspace(0, 1, N)
    y = np.cumsum(rng.normal(size=(N, 3)), 0)
    y[12_345, 1] = 1e6                      # a single-sample spike must survive
    td, yd = figures.decimate(t, y, 1000)
    assert len(td) <= 1000 + 2
    assert np.all(np.diff(td) > 0) and td[0] == t[0] and td[-1] == t[-1]
    np.testing.assert_array_equal(yd.max(0), y.max(0))
    np.testing.assert_array_equal(yd.min(0), y.min(0))
    # every bucket's extremes: the envelope of the decimated line equals the original's
    # the envelope over any window of the decimated line equals the original's over the
    # buckets it covers: check on windows of whole buckets
    size = int(np.ceil(N / (1000 // 6)))
    for k in range(0, N - size, size * 7):
        sl = slice(k, k + size)
        inside = (td >= t[sl][0]) & (td <= t[sl][-1])
        np.testing.assert_array_equal(yd[inside].max(0), y[sl].max(0))
        np.testing.assert_array_equal(yd[inside].min(0), y[sl].min(0))
    short_t, short_y = figures.decimate(t[:50], y[:50], 1000)
    assert short_t is not None and len(short_t) == 50


def test_trajectory_plot_draws_and_labels_both_limits(captured, tmp_path):
    from identify.excitation.fourier import FourierTrajectory
    from identify.excitation.plots import plot_trajectory
    rng = np.random.default_rng(0)
    tr = FourierTrajectory.from_free(np.zeros(2), rng.uniform(-1, 1, (2, 2)) * 0.2,
                                     rng.uniform(-1, 1, (2, 2)) * 0.2, 2 * np.pi / 10.0)
    # joint 1: limits far outside the motion (+-5 rad = +-286 deg) still drawn, axis spans them
    lim = {"q_min": np.array([-5.0, -0.3]), "q_max": np.array([5.0, 0.4]),
           "qd_max": np.array([2.0, 2.0]), "qdd_max": np.array([8.0, np.inf])}
    plot_trajectory(tr, lim, tmp_path / "t.png", joint_names=["a1", "a2"])
    fig = captured[0]
    axes = np.array(fig.axes).reshape(2, 3)
    expect = {(0, 0): (-5.0, 5.0), (1, 0): (-0.3, 0.4), (0, 1): (-2.0, 2.0), (1, 1): (-2.0, 2.0),
              (0, 2): (-8.0, 8.0)}
    for (r, c), (lo, hi) in expect.items():
        ax = axes[r, c]
        lines = sorted(round(float(ln.get_ydata()[0]), 6) for ln in ax.get_lines()
                       if ln.get_linestyle() == "--")
        assert lines == pytest.approx(sorted([np.degrees(lo), np.degrees(hi)]), abs=1e-4)
        y0, y1 = ax.get_ylim()
        assert y0 < np.degrees(lo) and y1 > np.degrees(hi)
        texts = [tx.get_text() for tx in ax.texts]
        assert any(f"{np.degrees(hi):.0f}" in s for s in texts), texts
        assert any(f"{np.degrees(lo):.0f}" in s for s in texts), texts
    # an infinite limit draws no line
    assert not [ln for ln in axes[1, 2].get_lines() if ln.get_linestyle() == "--"]
    assert [ax.get_xlabel() for ax in axes[-1]] == ["t [s]"] * 3


def test_parameter_plot_in_sigma_units_with_full_names(captured, tmp_path):
    from identify.validation.plots import plot_parameters
    names = ["ZZ1 + YY2 + 0.0729*m3 + YY3 + 0.152112*m4 + 0.2466*mz4 + YY4 + 0.152112*m5",
             "fv1", "XY6", "fc2"]
    truth = np.array([0.9449, 0.3, 1e-5, 0.45])
    std = np.array([0.0035, 0.0042, 0.0004, 0.0001])
    values = truth + np.array([1.0, -2.0, 0.5, 50.0]) * std      # z = 1, -2, 0.5, 50
    plot_parameters(names, values, std, tmp_path / "p.png", truth=truth)
    ax = captured[0].axes[0]
    labels = [tl.get_text() for tl in ax.get_yticklabels()]
    assert labels == names                                          # full, not clipped
    y_of = dict(zip(names, ax.get_yticks()))
    pts = {}
    for ln in ax.get_lines():
        for x, y in zip(np.atleast_1d(ln.get_xdata()), np.atleast_1d(ln.get_ydata())):
            pts.setdefault(round(float(y), 6), []).append(float(x))
    for nm, z in zip(names[:3], [1.0, -2.0, 0.5]):
        assert any(abs(x - z) < 1e-9 for x in pts[round(float(y_of[nm]), 6)]), (nm, pts)
    # the 50-sigma outlier is drawn at the clip edge, its z written beside it
    assert any(abs(x - 10.0) < 1e-9 for x in pts[round(float(y_of["fc2"]), 6)])
    assert any("z = 50" in tx.get_text() for tx in ax.texts)
    assert "σ" in ax.get_xlabel()
    assert "3 of 4 within ±3σ" in captured[0]._suptitle.get_text()


def test_saved_png_is_small_palette_png(tmp_path):
    from identify.validation.plots import plot_torque_comparison
    p = plot_torque_comparison(_result(N=20001), "validation", tmp_path / "c.png")
    data = p.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[25] == 3                    # colour type 3: palette
    assert 10_000 < len(data) < 150_000
    assert not list(tmp_path.glob("*.partial"))


def test_clearance_plot_draws_minimum_pairs_and_margin_in_mm(tmp_path, monkeypatch):
    """The report's clearance plot: the minimum distance, the closest pairs that move and the
    margin, in mm over the period's time axis (a static pair is left out)."""
    import numpy as np
    from identify.common import figures
    from identify.excitation.plots import plot_clearance
    t = np.linspace(0.0, 10.0, 2001)
    moving = 0.05 + 0.02 * np.sin(t)
    clearance = {"t": t, "min": moving, "margin": 0.02,
                 "pairs": {"link2 / link5": moving, "link1 / link3": np.full_like(t, 0.3)}}
    seen = {}
    real_save = figures.save

    def spy(fig, path, *a, **k):
        ax = fig.axes[0]
        seen["labels"] = [ln.get_label() for ln in ax.get_lines()]
        seen["ymax"] = max(np.max(ln.get_ydata()) for ln in ax.get_lines())
        seen["xmax"] = max(np.max(ln.get_xdata()) for ln in ax.get_lines()[:2])
        return real_save(fig, path, *a, **k)
    monkeypatch.setattr(figures, "save", spy)
    out = plot_clearance(clearance, tmp_path / "c.png")
    assert out.exists() and out.stat().st_size > 1000
    assert "link2 / link5" in seen["labels"] and "link1 / link3" not in seen["labels"]
    assert "margin 20 mm" in seen["labels"]
    assert abs(seen["ymax"] - 70.0) < 0.5 and abs(seen["xmax"] - 10.0) < 1e-9
