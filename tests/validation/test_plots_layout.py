"""The report's plots are readable (issue 26): no legend or label covers data or another label
(bounding boxes from the Agg renderer, in pixels, at the saved resolution), the limit labels of
the trajectory plot sit beside their line, not on it, line colours of one panel are apart in a
perceptual sense (CIEDE2000, checked on the published test pairs), the clearance cap is not drawn
as a distance, the stage-2 plot has units, truth markers, fixed and unphysical coefficients
marked, and every report plot is at least 900 px wide with a caption that is not its file name.
Each test fails on the plots as they were before the issue (legends inside panels, labels on
the dashed line, tab10's brown and grey, a flat line at the cap, no units)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from identify.common import figures

from test_plots import _result, captured  # noqa: F401 -- the fixture and the fake result


# ---------------------------------------------------------------------------------------------
# helpers: pixel boxes and colour difference
# ---------------------------------------------------------------------------------------------

def _draw(fig):
    """Draw `fig` with Agg at the saved resolution; return its renderer."""
    fig.set_dpi(figures.DPI)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _overlap(a, b, tol: float = 0.5) -> bool:
    """Two display boxes overlap by more than `tol` pixels in both directions."""
    return (min(a.x1, b.x1) - max(a.x0, b.x0) > tol) and (min(a.y1, b.y1) - max(a.y0, b.y0) > tol)


def _visible_axes(fig):
    return [ax for ax in fig.axes if ax.get_visible()]


def _assert_figure_legends_outside_panels(fig):
    """No panel holds a legend; every figure legend and the title lie outside every panel and
    apart from each other; panel titles do not overlap other panels or the legend."""
    r = _draw(fig)
    axes = _visible_axes(fig)
    assert all(ax.get_legend() is None for ax in axes), "a legend inside a panel hides data"
    boxes = [ax.get_window_extent(r) for ax in axes]
    legends = [lg.get_window_extent(r) for lg in fig.legends]
    assert legends, "the figure has no legend"
    head = [fig._suptitle.get_window_extent(r)] if fig._suptitle is not None else []
    for lg in legends:
        for b in boxes:
            assert not _overlap(lg, b), (lg, b)
        for h in head:
            assert not _overlap(lg, h), ("legend on the title", lg, h)
    for i, ax in enumerate(axes):
        tb = ax.title.get_window_extent(r)
        for k, b in enumerate(boxes):
            if k != i:
                assert not _overlap(tb, b), (ax.get_title(), "on another panel")
        for lg in legends:
            assert not _overlap(tb, lg), (ax.get_title(), "under the legend")


def _srgb_to_lab(rgb) -> np.ndarray:
    """sRGB in [0, 1] (..., 3) -> CIELAB (D65)."""
    c = np.asarray(rgb, float)
    lin = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    M = np.array([[0.4124564, 0.3575761, 0.1804375], [0.2126729, 0.7151522, 0.0721750],
                  [0.0193339, 0.1191920, 0.9503041]])
    xyz = lin @ M.T / np.array([0.95047, 1.0, 1.08883])
    f = np.where(xyz > 216 / 24389, np.cbrt(xyz), (24389 / 27 * xyz + 16) / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]),
                     200 * (f[..., 1] - f[..., 2])], -1)


def _ciede2000(lab1, lab2) -> float:
    """CIEDE2000 colour difference (Sharma, Wu & Dalal 2005), kL = kC = kH = 1."""
    L1, a1, b1 = lab1
    L2, a2, b2 = lab2
    C1, C2 = np.hypot(a1, b1), np.hypot(a2, b2)
    Cm = (C1 + C2) / 2
    G = 0.5 * (1 - np.sqrt(Cm ** 7 / (Cm ** 7 + 25.0 ** 7)))
    a1p, a2p = (1 + G) * a1, (1 + G) * a2
    C1p, C2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p = np.degrees(np.arctan2(b1, a1p)) % 360 if C1p else 0.0
    h2p = np.degrees(np.arctan2(b2, a2p)) % 360 if C2p else 0.0
    dLp, dCp = L2 - L1, C2p - C1p
    dh = h2p - h1p
    if C1p * C2p == 0:
        dh = 0.0
    elif dh > 180:
        dh -= 360
    elif dh < -180:
        dh += 360
    dHp = 2 * np.sqrt(C1p * C2p) * np.sin(np.radians(dh / 2))
    Lm, Cmp = (L1 + L2) / 2, (C1p + C2p) / 2
    if C1p * C2p == 0:
        hm = h1p + h2p
    elif abs(h1p - h2p) <= 180:
        hm = (h1p + h2p) / 2
    else:
        hm = (h1p + h2p + 360) / 2 if h1p + h2p < 360 else (h1p + h2p - 360) / 2
    T = (1 - 0.17 * np.cos(np.radians(hm - 30)) + 0.24 * np.cos(np.radians(2 * hm))
         + 0.32 * np.cos(np.radians(3 * hm + 6)) - 0.20 * np.cos(np.radians(4 * hm - 63)))
    dtheta = 30 * np.exp(-(((hm - 275) / 25) ** 2))
    Rc = 2 * np.sqrt(Cmp ** 7 / (Cmp ** 7 + 25.0 ** 7))
    Sl = 1 + 0.015 * (Lm - 50) ** 2 / np.sqrt(20 + (Lm - 50) ** 2)
    Sc, Sh = 1 + 0.045 * Cmp, 1 + 0.015 * Cmp * T
    Rt = -np.sin(np.radians(2 * dtheta)) * Rc
    return float(np.sqrt((dLp / Sl) ** 2 + (dCp / Sc) ** 2 + (dHp / Sh) ** 2
                         + Rt * (dCp / Sc) * (dHp / Sh)))


@pytest.mark.parametrize("lab1, lab2, want", [
    # Sharma, Wu & Dalal (2005), Table 1, pairs 1, 7 and 17
    ((50.0, 2.6772, -79.7751), (50.0, 0.0, -82.7485), 2.0425),
    ((50.0, 0.0, 0.0), (50.0, -1.0, 2.0), 2.3669),
    ((50.0, 2.5, 0.0), (73.0, 25.0, -18.0), 27.1492)])
def test_ciede2000_matches_the_published_pairs(lab1, lab2, want):
    assert _ciede2000(lab1, lab2) == pytest.approx(want, abs=1e-4)


def _min_colour_difference(colours) -> tuple[float, tuple]:
    from matplotlib.colors import to_rgb
    labs = [_srgb_to_lab(to_rgb(c)) for c in colours]
    return min((_ciede2000(labs[i], labs[k]), (colours[i], colours[k]))
               for i in range(len(labs)) for k in range(i))


# ---------------------------------------------------------------------------------------------
# the plots
# ---------------------------------------------------------------------------------------------

def test_torque_plot_legend_and_titles_cover_no_data(captured, tmp_path):
    from identify.validation.plots import plot_torque_comparison
    res = _result()
    plot_torque_comparison(res, "validation", tmp_path / "c.png")
    fig = captured[0]
    _assert_figure_legends_outside_panels(fig)
    # the per-joint RMS, that the panel legends carried, is in each panel's title
    for j, ax in enumerate(_visible_axes(fig)):
        for m in ("simplified", "improved_closed_form"):
            assert f"{res.rms['validation'][m][j]:.3f}" in ax.get_title(), ax.get_title()
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[0] == "measured" and len(labels) == 3
    # the headline model's line lies above the other predictions (visible where they agree)
    z = {ln.get_label(): ln.get_zorder() for ln in fig.axes[0].get_lines()}
    assert z["improved, closed form"] > z["simplified"]


def test_residual_and_decomposition_legends_outside_the_panels(captured, tmp_path):
    from identify.validation.plots import plot_decomposition, plot_residuals
    res = _result()
    plot_residuals(res, "validation", tmp_path / "r.png")
    plot_decomposition(res, "validation", "improved", tmp_path / "d.png")
    for fig in captured:
        _assert_figure_legends_outside_panels(fig)


def test_decomposition_colours_are_perceptually_distinct(captured, tmp_path):
    """Eight parts of the improved model (as a run has them): every pair of line colours at
    least 20 CIEDE2000 apart (tab10's first eight, the colours before, fail: link friction's red
    and motor friction's brown are 16 apart, and thin brown and grey lines look alike)."""
    from identify.validation.plots import plot_decomposition
    res = _result()
    meas = res.measured["validation"]
    parts = ("gravity", "inertial", "coriolis", "link_friction", "reducer_friction",
             "motor_friction", "rotor_inertia", "compliance")
    res.decomposition["validation"]["improved"] = {p: meas * (k + 1) / 10 for k, p in
                                                   enumerate(parts)}
    plot_decomposition(res, "validation", "improved", tmp_path / "d.png")
    ax = captured[0].axes[0]
    colours = [ln.get_color() for ln in ax.get_lines()]
    assert len(colours) == len(parts)
    dmin, pair = _min_colour_difference(colours)
    assert dmin >= 20.0, (dmin, pair)
    # and the old palette would not have passed
    assert _min_colour_difference([f"C{k}" for k in range(8)])[0] < 20.0


def test_trajectory_limit_labels_beside_their_line_inside_the_panel(captured, tmp_path):
    from identify.excitation.fourier import FourierTrajectory
    from identify.excitation.plots import plot_trajectory
    rng = np.random.default_rng(0)
    tr = FourierTrajectory.from_free(np.zeros(3), rng.uniform(-1, 1, (3, 3)) * 0.3,
                                     rng.uniform(-1, 1, (3, 3)) * 0.3, 2 * np.pi / 10.0)
    q, qd, qdd = tr.evaluate(np.linspace(0, 10, 601))
    # limits the motion respects (as an optimized trajectory does), some reached within 2 %
    lim = {"q_min": q.min(0) - [3.0, 0.01, 0.3], "q_max": q.max(0) + [3.0, 0.2, 0.01],
           "qd_max": np.abs(qd).max(0) * [1.02, 1.5, 1.1],
           "qdd_max": np.abs(qdd).max(0) * [1.1, 1.02, 3.0]}
    plot_trajectory(tr, lim, tmp_path / "t.png")
    fig = captured[0]
    r = _draw(fig)
    checked = 0
    for ax in fig.axes:
        box = ax.get_window_extent(r)
        dashed = {round(float(ln.get_ydata()[0]), 6) for ln in ax.get_lines()
                  if ln.get_linestyle() == "--"}
        data = [ln for ln in ax.get_lines() if ln.get_linestyle() == "-"]
        pix = ax.transData.transform(np.column_stack([data[0].get_xdata(),
                                                      data[0].get_ydata()]))
        for tx in ax.texts:
            y = float(tx.get_position()[1])
            assert round(y, 6) in dashed
            tb = tx.get_window_extent(r)
            ypix = ax.transData.transform((0.0, y))[1]
            # the dashed line (0.9 pt wide) does not cross the label, the label is inside the
            # panel, on the side of its limit away from the motion
            assert tb.y0 > ypix + 0.5 or tb.y1 < ypix - 0.5, (tx.get_text(), tb, ypix)
            assert box.y0 <= tb.y0 and tb.y1 <= box.y1 and box.x0 <= tb.x0 <= tb.x1 <= box.x1
            # no point of the motion under the label
            assert not np.any((pix[:, 0] >= tb.x0) & (pix[:, 0] <= tb.x1)
                              & (pix[:, 1] >= tb.y0) & (pix[:, 1] <= tb.y1)), tx.get_text()
            if "max" in tx.get_text() and not tx.get_text().startswith("-"):
                assert tb.y0 > ypix, tx.get_text()
            checked += 1
    assert checked == 3 * 3 * 2


def test_clearance_cap_is_not_drawn_as_a_distance(captured, tmp_path):
    """PyBullet reads pairs farther than margin + 0.1 m as exactly that: the plot must not show
    a flat line at 120 mm as if it were a distance, and must say where measuring stops."""
    from identify.excitation.plots import plot_clearance
    t = np.linspace(0.0, 10.0, 1001)
    cap = 0.02 + 0.1
    near = np.minimum(0.04 + 0.1 * np.sin(t) ** 2, cap)         # at the cap half of the time
    clearance = {"t": t, "min": near, "margin": 0.02,
                 "pairs": {"link1 / link4": near, "link2 / link6": np.full_like(t, cap)}}
    plot_clearance(clearance, tmp_path / "c.png")
    fig = captured[0]
    ax = fig.axes[0]
    for ln in ax.get_lines():
        y = np.asarray(ln.get_ydata(), float)
        if ln.get_linestyle() == "--":
            continue
        assert not np.any(y[np.isfinite(y)] >= 1e3 * cap - 1e-6), ln.get_label()
    labels = [tx.get_text() for tx in ax.get_legend().get_texts()]
    assert any("not measured" in s and "120 mm" in s for s in labels), labels
    assert ax.get_ylim()[1] > 1e3 * cap
    # the legend is beside the axes, not on the curves
    r = _draw(fig)
    assert not _overlap(ax.get_legend().get_window_extent(r), ax.get_window_extent(r))


def _stage2_result():
    """A Stage2Result-like object: 3 joints, xi fixed at 0 on joint 3, a negative motor
    Coulomb on joint 2."""
    names = ["xi_opp", "f_mc", "f_mv", "J_m", "J_m/K"]
    P = np.array([[0.40, 1.5, 2.9, 0.52, 1e-4],
                  [0.45, -0.58, 4.4, 0.47, 2e-4],
                  [0.0, 1.2, 3.0, 0.30, 3e-4]])
    S = np.array([[0.01, 0.05, 0.03, 0.02, 1e-4],
                  [0.01, 0.48, 0.05, 0.04, 1e-4],
                  [np.nan, 0.05, 0.04, 0.01, 1e-4]])
    joints = [SimpleNamespace(joint=f"joint{k + 1}", xi_identified=k != 2) for k in range(3)]
    return SimpleNamespace(names=names, params=P, std=S, joints=joints, variant="opposing")


def test_stage2_plot_units_truth_fixed_and_unphysical(captured, tmp_path):
    from identify.validation.plots import STAGE2_UNITS, plot_stage2
    s2 = _stage2_result()
    truth = {"xi_opp": np.array([0.4, 0.45, 0.3]), "f_mc": np.array([1.5, 0.9, 1.2]),
             "f_mv": np.array([2.9, 4.4, 3.0]), "J_m": np.array([0.52, 0.47, 0.3]),
             "J_m/K": np.zeros(3)}
    plot_stage2(s2, tmp_path / "s2.png", truth=truth)
    fig = captured[0]
    axes = {ax.get_title(): ax for ax in _visible_axes(fig)}
    assert set(axes) == set(s2.names)
    for nm, ax in axes.items():
        assert ax.get_ylabel().endswith(f"[{STAGE2_UNITS[nm]}]"), ax.get_ylabel()
        # truth crosses at the truth values, one per joint
        cross = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
        assert len(cross) == 1
        np.testing.assert_allclose(cross[0].get_ydata(), truth[nm])
        lo, hi = ax.get_ylim()
        assert lo < truth[nm].min() and hi > truth[nm].max()
    # xi fixed at 0 on joint 3: an open marker, no error bar, a "fixed" note
    xi = axes["xi_opp"]
    open_ = [ln for ln in xi.get_lines() if ln.get_markerfacecolor() == "none"]
    assert len(open_) == 1 and list(open_[0].get_xdata()) == [2]
    bars = [c for c in xi.containers if hasattr(c, "lines")]
    assert all(2 not in np.asarray(c.lines[0].get_xdata()) for c in bars)
    assert any(tx.get_text() == "fixed" for tx in xi.texts)
    # the negative motor Coulomb on joint 2 is red and annotated; the others are blue
    fmc = axes["f_mc"]
    red = [c for c in fmc.containers if c.lines[0].get_color() == "tab:red"]
    assert len(red) == 1 and list(red[0].lines[0].get_xdata()) == [1]
    assert any("< 0" in tx.get_text() for tx in fmc.texts)
    assert not any("< 0" in tx.get_text() for tx in axes["f_mv"].texts)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "truth" in labels and any("fixed" in s for s in labels)
    _assert_figure_legends_outside_panels(fig)
    assert "no ground truth" not in fig._suptitle.get_text()
    captured.clear()
    plot_stage2(s2, tmp_path / "s2.png")                  # no truth: no crosses, and it says so
    fig = captured[0]
    assert not [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert "no ground truth" in fig._suptitle.get_text()


def test_parameter_plot_bars_inside_the_axis(captured, tmp_path):
    """Every +-3 sigma bar ends inside the axis (before: a point at z = 2.6 had its bar cut at
    5.3 of 5.6)."""
    from identify.validation.plots import plot_parameters
    z = np.array([2.6, -2.9, 0.4, 9.0, 0.0])
    std = np.full(5, 0.01)
    plot_parameters([f"p{k}" for k in range(5)], z * std, std, tmp_path / "p.png",
                    truth=np.zeros(5))
    ax = captured[0].axes[0]
    lo, hi = ax.get_xlim()
    for c in ax.containers:
        for seg in c.lines[2][0].get_segments():
            assert lo < seg[:, 0].min() and seg[:, 0].max() < hi, (seg, lo, hi)


def test_report_plots_are_wide_enough(captured, tmp_path):
    """Every report plot is at least 900 px wide at the saved resolution."""
    from identify.excitation.fourier import FourierTrajectory
    from identify.excitation.plots import plot_clearance, plot_trajectory
    from identify.validation.plots import (plot_decomposition, plot_parameters, plot_residuals,
                                           plot_stage2, plot_torque_comparison)
    res = _result()
    plot_torque_comparison(res, "validation", tmp_path / "a.png")
    plot_residuals(res, "validation", tmp_path / "b.png")
    plot_decomposition(res, "validation", "improved", tmp_path / "c.png")
    plot_parameters(["m1", "fv1"], [1.0, 0.2], [0.1, 0.01], tmp_path / "d.png")
    plot_stage2(_stage2_result(), tmp_path / "e.png")
    tr = FourierTrajectory.from_free(np.zeros(2), np.full((2, 2), 0.1), np.full((2, 2), 0.1),
                                     2 * np.pi / 10.0)
    plot_trajectory(tr, None, tmp_path / "f.png")
    t = np.linspace(0, 1, 11)
    plot_clearance({"t": t, "min": 0.05 + 0 * t, "margin": 0.02}, tmp_path / "g.png")
    assert len(captured) == 7
    for fig in captured:
        assert fig.get_figwidth() * figures.DPI >= 900, fig.get_figwidth()


@pytest.mark.parametrize("stem", [
    "trajectory_excitation", "trajectory_validation_clearance", "torque_excitation",
    "torque_validation", "residual_validation", "torque_decomposition_validation",
    "param_stage1", "param_stage2", "param_simplified", "closed_loop_tracking", "collision",
    "torque_validation_p2"])
def test_every_report_plot_has_a_caption(stem):
    """A caption says what the plot shows and what to look for -- not the file name."""
    text = figures.caption(stem)
    assert text != stem.replace("_", " ") and "Look for" in text, text
    label = next((w for w in ("excitation", "validation") if w in stem), None)
    if label:
        assert label in text
