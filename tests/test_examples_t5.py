"""The T5 text-to-text example runs end to end in ``--smoke`` mode and writes its metrics and loss
curve (section V-D)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("matplotlib")
pytest.importorskip("tqdm")


@pytest.mark.sec5
def test_t5_text_to_text_smoke(run_example, tmp_path):
    run_example("t5_text_to_text.py", "--smoke", "--out", str(tmp_path / "run"))
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["smoke"] is True and metrics["steps"] == 10
    assert set(metrics["accuracy"]) == {"copy", "reverse", "sort", "add"}
    assert all(0.0 <= a <= 1.0 for a in metrics["accuracy"].values())
    assert (tmp_path / "run" / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
