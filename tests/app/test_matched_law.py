"""A run on a twin law a fitted variant shares says so in its report's first lines (issue 22
item 3): the message comes from the twin's own truth (DriveTruth.shared_with_variant), and
report.py renders it right under the run line, before the summary."""
from __future__ import annotations

from identify.app.truth import MATCHED_LAW, matched_law_messages
from identify.backend.truth import DriveTruth


class _Rec:
    def __init__(self, dt):
        self.drive_truth = dt


def _truth(law, shared):
    n = 2
    return DriveTruth.from_dict({"joints": ["joint1", "joint2"], "law": law,
                                 "shared_with_variant": shared, "xi_nominal": [0.1] * n,
                                 "f_mc": [1.0] * n, "f_mv": [0.1] * n, "J_m": [0.5] * n,
                                 "J_m/K": [1e-5] * n, "viscous": [1.0] * n, "coulomb": [2.0] * n})


def test_message_only_on_a_matched_law():
    msgs = matched_law_messages({"excitation": _Rec(_truth("opposing", "opposing"))})
    assert len(msgs) == 1 and msgs[0].startswith(MATCHED_LAW)
    assert "'opposing' law" in msgs[0] and "'opposing' variant" in msgs[0]
    paper = matched_law_messages({"excitation": _Rec(_truth("paper", "linear"))})
    assert "'linear' variant" in paper[0]
    assert matched_law_messages({"excitation": _Rec(_truth("speed_efficiency", None))}) == []
    assert matched_law_messages({"excitation": _Rec(None)}) == []     # logs: no twin truth
    assert matched_law_messages(None) == []


def test_report_puts_the_message_first(tmp_path):
    from identify.outputs.report import _blocks
    msg = matched_law_messages({"excitation": _Rec(_truth("opposing", "opposing"))})[0]
    metrics = {"name": "x", "backend": "twin", "command": "run", "messages": ["note", msg],
               "rms": {"validation": {"simplified": {"overall": 2.0},
                                      "improved": {"overall": 1.0}}},
               "improvement_percent": {"validation": -50.0}}
    B = _blocks(tmp_path, metrics, {}, {})
    texts = [b[-1] if b[0] != "table" else "" for b in B]
    i_msg = next(i for i, t in enumerate(texts) if isinstance(t, str) and MATCHED_LAW in t)
    i_sum = next(i for i, t in enumerate(texts) if isinstance(t, str) and t.startswith("Summary"))
    assert i_msg < i_sum and i_msg <= 3
