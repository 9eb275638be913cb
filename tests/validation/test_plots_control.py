"""The closed-loop figures (identify.control.plots, issue 26): one legend above the panels, units
on every axis, the feed-forward cases on a scale of their own (PID only, 10-20x larger, hid them
at 0), the identified case drawn so that it stays visible over the true one. (These plots live in
identify.control; their test sits with the other plot tests.)"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from identify.backend.contact import Contact

from test_plots import captured  # noqa: F401 -- figures kept open instead of saved
from test_plots_layout import _assert_figure_legends_outside_panels


def _tracking(n=3, N=2001):
    t = np.linspace(0.0, 10.0, N)
    base = np.sin(t[:, None] * np.arange(1, n + 1))
    cases = {nm: SimpleNamespace(t=t, error=base * s, error_rms_overall=s * np.sqrt(0.5))
             for nm, s in (("pid_only", 6e-4), ("identified_ff", 3.4e-5), ("true_ff", 3.3e-5))}
    return SimpleNamespace(cases=cases, joint_names=[f"joint{j + 1}" for j in range(n)],
                           trajectory="validation")


def test_tracking_plot_feed_forward_cases_on_their_own_scale(captured, tmp_path):
    from identify.control.plots import plot_tracking
    res = _tracking()
    plot_tracking(res, tmp_path / "t.png")
    fig = captured[0]
    _assert_figure_legends_outside_panels(fig)
    axes = np.array(fig.axes).reshape(3, 2)
    for j in range(3):
        lo, hi = axes[j, 1].get_ylim()
        ff = 1e3 * 3.4e-5
        # the right column spans the feed-forward error (+-0.034 mrad), not PID's +-0.6
        assert hi < 3 * ff and lo > -3 * ff and hi > 0.9 * ff, (lo, hi)
        assert "[mrad]" in axes[j, 0].get_ylabel()
        styles = {ln.get_label().split(" (")[0]: ln.get_linestyle() for ln in axes[j, 1].get_lines()}
        assert styles["identified model feed-forward"] != styles["true model feed-forward"]
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(labels) == 3 and any("0.024 mrad" in s for s in labels), labels
    assert [s.split(" (")[0] for s in labels] == ["PID only", "identified model feed-forward",
                                                  "true model feed-forward"]


def test_collision_plot_legend_and_units(captured, tmp_path):
    from identify.control.plots import plot_collision
    t = np.linspace(3.0, 5.0, 2001)
    r = np.zeros((t.size, 2))
    r[(t > 4.0) & (t < 4.2), 1] = 2.0
    res = {m: SimpleNamespace(t=t, r=r, thresholds=SimpleNamespace(value=np.array([0.5, 0.6])),
                              band=None, contact=Contact(link="link3", time_s=4.0, duration_s=0.2,
                                                      force_N=(0.0, 0.0, -20.0)),
                              detected=m == "identified", detection_delay_ms=8.0,
                              false_alarms=0) for m in ("identified", "cad")}
    plot_collision(res, ["joint1", "joint2"], tmp_path / "c.png")
    fig = captured[0]
    _assert_figure_legends_outside_panels(fig)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert set(labels) == {"contact", "observer residual r",
                           "thresholds ± (static + friction band)"}
    assert all("[N·m]" in ax.get_ylabel() for ax in fig.axes[::2])
    assert "detected after 8 ms" in fig.axes[0].get_title()
