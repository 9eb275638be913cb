"""The quickstart and paper-replication runs reproduce their golden documents
(tests/golden_runs.py): a change that was not meant to change any number (a refactoring) leaves
every number of metrics.json and parameters.yaml equal. Each scenario runs once per session,
cold trajectory cache, through the real command line."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import golden_runs as G  # noqa: E402


# golden_run_folders: the session fixture in tests/conftest.py (shared with test_readme.py)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(G.SCENARIOS))
def test_run_reproduces_golden_documents(golden_run_folders, name):
    new = G.load(golden_run_folders[name])
    for doc, parse in G.DOCUMENTS.items():
        golden = parse((G.DATA / f"{name}.{doc}").read_text())
        diff = G.differences(golden, new[doc], doc)
        assert not diff, (f"{name}: {len(diff)} differences from the golden {doc} (regenerate with "
                          f"python tests/golden_runs.py if the change is meant to change numbers):\n"
                          + "\n".join(diff[:20]))


def test_differences_finds_a_changed_number_and_ignores_times():
    golden = {"rms": {"overall": 1.0, "per_joint": [1.0, 2.0]}, "timings_s": {"total": 3.0},
              "source": "optimized"}
    same = {"rms": {"overall": 1.0 + 1e-12, "per_joint": [1.0, 2.0]}, "timings_s": {"total": 9.0},
            "source": "optimized (cached)"}
    assert G.differences(golden, same) == []
    changed = {"rms": {"overall": 1.001, "per_joint": [1.0, 2.0, 3.0]}, "timings_s": {},
               "source": "optimized"}
    diff = G.differences(golden, changed)
    assert any("overall" in d for d in diff) and any("per_joint" in d for d in diff)
    assert G.differences({"a": True}, {"a": 1}) != []
